/* lm_llama.c — the llama-family block (Llama, Qwen2, Qwen3) of dt_lm: its
 * tensor layout, saved activations, RoPE tables, forward and backward, as
 * Hugging Face transformers' LlamaDecoderLayer / Qwen2DecoderLayer /
 * Qwen3DecoderLayer compute them (docs/engine.md "The llama family"):
 *
 *   h    = x + o_proj(attn(rope(qk_norm?(q_proj(n1))), rope(qk_norm?(k_proj(n1))), v_proj(n1)))
 *   out  = h + down_proj(silu(gate_proj(n2)) * up_proj(n2)),   n1 = rms1(x), n2 = rms2(h)
 *
 * Packing: q_proj, k_proj, v_proj weights are adjacent in the flat layout, so
 * q | k rows form one [QK, C] matrix (one GEMM into the saved qk) and v_proj the
 * next [KVD, C]; gate_proj and up_proj form one [2F, C] matrix whose output row
 * is gate | up (dt_op_swiglu_forward's input). Biases (Qwen2) likewise.
 *
 * Letters as lm_internal.h: H query heads, Hkv kv heads, D head_dim, QD = H D,
 * KVD = Hkv D, QK = QD + KVD, N = B T. */
#include <math.h>
#include <stdio.h>

#include "lm_internal.h"

/* per-block tensors in layout order (the llama-family entries of g->boff) */
enum {
    LL_IN, LL_QW, LL_KW, LL_VW, LL_QB, LL_KB, LL_VB, LL_QN, LL_KN, LL_OW, LL_POST, LL_GW, LL_UW,
    LL_DW, LL_COUNT
};

typedef struct {
    const char *suffix;   /* after "model.layers.<l>." */
    int ndim;
} ll_tensor;

static const ll_tensor ll_tensors[LL_COUNT] = {
    [LL_IN] = {"input_layernorm.weight", 1},       [LL_QW] = {"self_attn.q_proj.weight", 2},
    [LL_KW] = {"self_attn.k_proj.weight", 2},      [LL_VW] = {"self_attn.v_proj.weight", 2},
    [LL_QB] = {"self_attn.q_proj.bias", 1},        [LL_KB] = {"self_attn.k_proj.bias", 1},
    [LL_VB] = {"self_attn.v_proj.bias", 1},        [LL_QN] = {"self_attn.q_norm.weight", 1},
    [LL_KN] = {"self_attn.k_norm.weight", 1},      [LL_OW] = {"self_attn.o_proj.weight", 2},
    [LL_POST] = {"post_attention_layernorm.weight", 1}, [LL_GW] = {"mlp.gate_proj.weight", 2},
    [LL_UW] = {"mlp.up_proj.weight", 2},           [LL_DW] = {"mlp.down_proj.weight", 2},
};

_Static_assert(LL_COUNT <= DT_LM_MAX_BLOCK_TENSORS, "g->boff holds every llama block tensor");

static int ll_present(const dt_lm *g, int k) {
    if (k == LL_QB || k == LL_KB || k == LL_VB) return g->qkv_bias;
    if (k == LL_QN || k == LL_KN) return g->qk_norm;
    return 1;
}

/* shape [d0, d1] of tensor kind k (d1 = 0 for vectors) */
static void ll_shape(const dt_lm *g, int k, int64_t *d0, int64_t *d1) {
    const int64_t C = g->C, F = g->F, QD = g->QD, KVD = g->KVD, D = g->D;
    const int64_t shp[LL_COUNT][2] = {
        [LL_IN] = {C, 0},   [LL_QW] = {QD, C},  [LL_KW] = {KVD, C}, [LL_VW] = {KVD, C},
        [LL_QB] = {QD, 0},  [LL_KB] = {KVD, 0}, [LL_VB] = {KVD, 0}, [LL_QN] = {D, 0},
        [LL_KN] = {D, 0},   [LL_OW] = {C, QD},  [LL_POST] = {C, 0}, [LL_GW] = {F, C},
        [LL_UW] = {F, C},   [LL_DW] = {C, F},
    };
    *d0 = shp[k][0];
    *d1 = shp[k][1];
}

int lm_llama_block_tensors(const dt_lm *g) {
    int n = 0;
    for (int k = 0; k < LL_COUNT; k++) n += ll_present(g, k);
    return n;
}

void lm_llama_block_layout(dt_lm *g, int l, int *i, size_t *off) {
    const size_t base = *off;
    for (int k = 0; k < LL_COUNT; k++) {
        if (!ll_present(g, k)) {
            if (l == 0) g->boff[k] = SIZE_MAX;
            continue;
        }
        char name[DT_TENSOR_NAME_MAX];
        int64_t d0, d1;
        ll_shape(g, k, &d0, &d1);
        snprintf(name, sizeof name, "model.layers.%d.%s", l, ll_tensors[k].suffix);
        if (l == 0) g->boff[k] = *off - base;
        lm_set_tensor(g, (*i)++, name, 1 + l, off, ll_tensors[k].ndim, d0, d1);
    }
}

static void *take(char *base, size_t *off, size_t bytes) {
    void *p = base ? base + *off : NULL;
    *off += bytes;
    return p;
}

/* The saved tensors of docs/activations.md's llama table, in this order. */
void lm_llama_layout_block_acts(dt_lm *g, block_acts *ba, char *base, size_t *off) {
    const int64_t B = g->B, T = g->T, C = g->C, H = g->H, F = g->F, N = B * T;
    const int64_t QK = g->QD + g->KVD;
    const size_t a = (size_t)g->asz, f = sizeof(float);
    ba->ln1 = take(base, off, a * N * C);
    ba->ln1_rstd = take(base, off, f * N);
    if (g->qk_norm) {
        ba->qk_raw = take(base, off, a * N * QK);
        ba->qk_rstd = take(base, off, f * N * (H + g->Hkv));
    }
    ba->qk = take(base, off, a * N * QK);
    ba->v = take(base, off, a * N * g->KVD);
    if (g->attn == DT_ATTN_FLASH) ba->lse = take(base, off, f * B * H * T);
    else ba->probs = take(base, off, a * B * H * T * T);
    ba->att = take(base, off, a * N * g->QD);
    ba->res1 = take(base, off, a * N * C);
    ba->ln2 = take(base, off, a * N * C);
    ba->ln2_rstd = take(base, off, f * N);
    ba->gu = take(base, off, a * N * 2 * F);
    ba->act = take(base, off, a * N * F);
}

/* ----------------------------------------------------------------------------
 * RoPE frequencies, in fp32 in the order HF transformers computes them
 * (modeling_rope_utils: _compute_default_rope_parameters, _compute_linear_...,
 * _compute_llama3_parameters), so the tables match its to the last bits the
 * library functions allow. */

static void rope_llama3(const dt_rope_scaling *rs, float *inv, int64_t half) {
    const float factor = (float)rs->factor, low = (float)rs->low_freq_factor;
    const float high = (float)rs->high_freq_factor, old = (float)rs->original_max_pos;
    const float low_wavelen = (float)((double)rs->original_max_pos / rs->low_freq_factor);
    const float high_wavelen = (float)((double)rs->original_max_pos / rs->high_freq_factor);
    const float two_pi = (float)(2.0 * M_PI);
    for (int64_t i = 0; i < half; i++) {
        float wavelen = two_pi / inv[i];
        float f = wavelen > low_wavelen ? inv[i] / factor : inv[i];
        float smooth = (old / wavelen - low) / (high - low);
        float smoothed = (1.0f - smooth) * f / factor + smooth * f;
        int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        inv[i] = medium ? smoothed : f;
    }
}

void lm_llama_rope_tables(const dt_model *m, int64_t T, float *cos_t, float *sin_t) {
    const int64_t D = m->head_dim, half = D / 2;
    float inv[DT_LM_MAX_HEAD_DIM / 2];
    for (int64_t i = 0; i < half; i++)
        inv[i] = 1.0f / powf((float)m->rope_theta, (float)(2 * i) / (float)D);
    switch (m->rope_scaling.type) {
    case DT_ROPE_LINEAR:
        for (int64_t i = 0; i < half; i++) inv[i] /= (float)m->rope_scaling.factor;
        break;
    case DT_ROPE_LLAMA3: rope_llama3(&m->rope_scaling, inv, half); break;
    case DT_ROPE_DEFAULT:
    case DT_ROPE_DYNAMIC: /* the default within the trained positions (dt_arch.h) */
        break;
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            float angle = inv[i] * (float)t;
            cos_t[t * half + i] = cosf(angle);
            sin_t[t * half + i] = sinf(angle);
        }
}

/* ----------------------------------------------------------------------------
 * forward */

/* q | k for the attention: the projection, per-head norm (Qwen3), RoPE. */
static int qk_forward(dt_lm *g, block_acts *A, const float *ln1, const lm_params *P) {
    const int64_t B = g->B, T = g->T, C = g->C, H = g->H, Hkv = g->Hkv, D = g->D, N = B * T;
    const int64_t QD = g->QD, QK = QD + g->KVD;
    const size_t *o = g->boff;
    const float *p = P->f32;
    const float *bqk = g->qkv_bias ? p + o[LL_QB] : NULL;   /* q | k biases [QK] */
    float *qk = lm_act_f32(g, A->qk, g->w32.qk);            /* [N, QK] */
    int rc;
    if (g->qk_norm) {
        float *raw = lm_act_f32(g, A->qk_raw, g->w32.qk_raw);   /* [N, QK] */
        if ((rc = lm_linear_forward(g, DT_LM_OP_QKV, LM_W_OUT_IN, raw, A->ln1, ln1, P, o[LL_QW], bqk, N, C, QK)))
            return rc;
        lm_act_commit(g, A->qk_raw, raw, (size_t)(N * QK));
        lm_prof_mark m = lm_prof_begin(g);
        g->dev->rmsnorm_forward(qk, A->qk_rstd, raw, p + o[LL_QN], N, H, D, QK, g->eps);
        g->dev->rmsnorm_forward(qk + QD, A->qk_rstd + N * H, raw + QD, p + o[LL_KN], N, Hkv, D, QK,
                                g->eps);
        lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    } else if ((rc = lm_linear_forward(g, DT_LM_OP_QKV, LM_W_OUT_IN, qk, A->ln1, ln1, P, o[LL_QW], bqk, N, C, QK))) {
        return rc;
    }
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->rope_forward(qk, g->rope_cos, g->rope_sin, B, T, H + Hkv, D, QK);
    lm_prof_end(g, DT_LM_OP_ROPE, m, 0.0);
    lm_act_commit(g, A->qk, qk, (size_t)(N * QK));
    return DT_OK;
}

static void attention_forward(dt_lm *g, block_acts *A, const float *qk, const float *v, float *att) {
    const int64_t B = g->B, T = g->T, H = g->H, Hkv = g->Hkv, D = g->D;
    const int64_t QK = g->QD + g->KVD;
    float *probs = NULL;   /* [B, H, T, T] materialized only */
    lm_prof_mark m = lm_prof_begin(g);
    if (g->attn == DT_ATTN_FLASH) {
        g->dev->attention_gqa_forward_flash(att, A->lse, qk, QK, qk + g->QD, QK, v, g->KVD, B, T, H,
                                            Hkv, D);
    } else {
        probs = lm_act_f32(g, A->probs, g->w32.probs);
        g->dev->attention_gqa_forward_probs(att, probs, qk, QK, qk + g->QD, QK, v, g->KVD, B, T, H,
                                            Hkv, D);
    }
    lm_prof_end(g, DT_LM_OP_ATTENTION, m, lm_attention_flops(g, DT_LM_PASS_FWD));
    if (probs) lm_act_commit(g, A->probs, probs, (size_t)(B * H * T * T));
}

int lm_llama_block_forward(dt_lm *g, int l, block_acts *A, void *xout, const lm_params *P) {
    const int64_t C = g->C, F = g->F, N = g->B * g->T, QD = g->QD, KVD = g->KVD;
    block_f32 *w = &g->w32;
    const size_t *o = g->boff;
    const float *p = P->f32;   /* vectors (and with fp32 linears the matrices) */
    int rc;
    const float *x = lm_act_load(g, g->x[l], w->x, (size_t)(N * C));   /* [N, C] */

    float *ln1 = lm_act_f32(g, A->ln1, w->ln1);   /* [N, C] */
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->rmsnorm_forward(ln1, A->ln1_rstd, x, p + o[LL_IN], N, 1, C, C, g->eps);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    lm_act_commit_lin(g, A->ln1, ln1, (size_t)(N * C));

    if ((rc = qk_forward(g, A, ln1, P))) return rc;
    const float *qk = lm_act_f32(g, A->qk, w->qk);   /* [N, QK], committed */
    float *v = lm_act_f32(g, A->v, w->v);             /* [N, KVD] */
    if ((rc = lm_linear_forward(g, DT_LM_OP_QKV, LM_W_OUT_IN, v, A->ln1, ln1, P, o[LL_VW],
                                g->qkv_bias ? p + o[LL_VB] : NULL, N, C, KVD)))
        return rc;
    lm_act_commit(g, A->v, v, (size_t)(N * KVD));

    float *att = lm_act_f32(g, A->att, w->att);   /* [N, QD] */
    attention_forward(g, A, qk, v, att);
    lm_act_commit_lin(g, A->att, att, (size_t)(N * QD));

    float *proj = g->dC;   /* [N, C] o_proj / down_proj output, not saved */
    if ((rc = lm_linear_forward(g, DT_LM_OP_ATTN_PROJ, LM_W_OUT_IN, proj, A->att, att, P, o[LL_OW], NULL, N, QD, C)))
        return rc;
    float *res1 = lm_act_f32(g, A->res1, w->res1);   /* [N, C] */
    m = lm_prof_begin(g);
    g->dev->residual_forward(res1, x, proj, N * C);
    lm_prof_end(g, DT_LM_OP_RESIDUAL, m, 0.0);
    lm_act_commit(g, A->res1, res1, (size_t)(N * C));

    float *ln2 = lm_act_f32(g, A->ln2, w->ln2);   /* [N, C] */
    m = lm_prof_begin(g);
    g->dev->rmsnorm_forward(ln2, A->ln2_rstd, res1, p + o[LL_POST], N, 1, C, C, g->eps);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    lm_act_commit_lin(g, A->ln2, ln2, (size_t)(N * C));

    float *gu = lm_act_f32(g, A->gu, w->gu);   /* [N, 2F] gate | up */
    if ((rc = lm_linear_forward(g, DT_LM_OP_FC, LM_W_OUT_IN, gu, A->ln2, ln2, P, o[LL_GW], NULL, N, C, 2 * F)))
        return rc;
    lm_act_commit(g, A->gu, gu, (size_t)(N * 2 * F));
    float *act = lm_act_f32(g, A->act, w->act);   /* [N, F] */
    m = lm_prof_begin(g);
    g->dev->swiglu_forward(act, gu, N, F);
    lm_prof_end(g, DT_LM_OP_ACT, m, 0.0);
    lm_act_commit_lin(g, A->act, act, (size_t)(N * F));

    if (!xout) return DT_OK;   /* recomputing for backward: the block output is not needed */
    if ((rc = lm_linear_forward(g, DT_LM_OP_FC_PROJ, LM_W_OUT_IN, proj, A->act, act, P, o[LL_DW], NULL, N, F, C)))
        return rc;
    float *xo = lm_act_f32(g, xout, w->xout);   /* [N, C] */
    m = lm_prof_begin(g);
    g->dev->residual_forward(xo, res1, proj, N * C);
    lm_prof_end(g, DT_LM_OP_RESIDUAL, m, 0.0);
    lm_act_commit(g, xout, xo, (size_t)(N * C));
    return DT_OK;
}

/* ----------------------------------------------------------------------------
 * backward: on entry g->dres = dL/dx[l+1]; on exit dL/dx[l] */

/* MLP: x[l+1] = res1 + down(swiglu(gate_up(rms2(res1)))); adds its part to dres. */
static int mlp_backward(dt_lm *g, const block_acts *A, const float *res1, const lm_params *P,
                        float *G) {
    const int64_t C = g->C, F = g->F, N = g->B * g->T;
    block_f32 *w = &g->w32;
    const size_t *o = g->boff;
    const float *ln2 = lm_act_load_lin(g, A->ln2, w->ln2, (size_t)(N * C));   /* [N, C] */
    const float *gu = lm_act_load(g, A->gu, w->gu, (size_t)(N * 2 * F));      /* [N, 2F] */
    const float *act = lm_act_load_lin(g, A->act, w->act, (size_t)(N * F));   /* [N, F] */
    float *dact = g->dA, *dgu = g->dF, *dln2 = g->dC;   /* [N, F], [N, 2F], [N, C] */
    int rc;
    if ((rc = lm_linear_backward(g, DT_LM_OP_FC_PROJ, LM_W_OUT_IN, dact, G + o[LL_DW], NULL, g->dres, A->act, act, P,
                                 o[LL_DW], N, F, C, 0)))
        return rc;
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->swiglu_backward(dgu, dact, gu, N, F);
    lm_prof_end(g, DT_LM_OP_ACT, m, 0.0);
    if ((rc = lm_linear_backward(g, DT_LM_OP_FC, LM_W_OUT_IN, dln2, G + o[LL_GW], NULL, dgu, A->ln2, ln2, P,
                                 o[LL_GW], N, C, 2 * F, 0)))
        return rc;
    m = lm_prof_begin(g);
    g->dev->rmsnorm_backward(g->dres, G + o[LL_POST], dln2, res1, P->f32 + o[LL_POST], A->ln2_rstd,
                             N, 1, C, C, 1);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    return DT_OK;
}

/* d loss / d (q | k) before RoPE and norm, and d loss / d v, from d att. */
static void qkv_grads(dt_lm *g, const block_acts *A, const float *datt, const float *P, float *G,
                      float *dqk, float *dv) {
    const int64_t B = g->B, T = g->T, H = g->H, Hkv = g->Hkv, D = g->D, N = B * T;
    const int64_t QD = g->QD, KVD = g->KVD, QK = QD + KVD;
    block_f32 *w = &g->w32;
    const size_t *o = g->boff;
    const float *qk = lm_act_load(g, A->qk, w->qk, (size_t)(N * QK));   /* [N, QK] */
    const float *v = lm_act_load(g, A->v, w->v, (size_t)(N * KVD));     /* [N, KVD] */
    /* flash reads the output att [N, QD], materialized the probabilities [B, H, T, T] */
    const float *att = g->attn == DT_ATTN_FLASH ? lm_act_load(g, A->att, w->att, (size_t)(N * QD)) : NULL;
    const float *probs =
        g->attn == DT_ATTN_FLASH ? NULL : lm_act_load(g, A->probs, w->probs, (size_t)(B * H * T * T));
    lm_prof_mark m = lm_prof_begin(g);
    if (g->attn == DT_ATTN_FLASH)
        g->dev->attention_gqa_backward_flash(dqk, dqk + QD, dv, datt, qk, QK, qk + QD, QK, v, KVD, att,
                                             A->lse, B, T, H, Hkv, D);
    else
        g->dev->attention_gqa_backward_probs(dqk, dqk + QD, dv, datt, qk, QK, qk + QD, QK, v, KVD,
                                             probs, B, T, H, Hkv, D);
    lm_prof_end(g, DT_LM_OP_ATTENTION, m, lm_attention_flops(g, DT_LM_PASS_BWD));
    m = lm_prof_begin(g);
    g->dev->rope_backward(dqk, g->rope_cos, g->rope_sin, B, T, H + Hkv, D, QK);
    lm_prof_end(g, DT_LM_OP_ROPE, m, 0.0);
    if (!g->qk_norm) return;
    const float *raw = lm_act_load(g, A->qk_raw, w->qk_raw, (size_t)(N * QK));   /* [N, QK] */
    m = lm_prof_begin(g);
    g->dev->rmsnorm_backward(dqk, G + o[LL_QN], dqk, raw, P + o[LL_QN], A->qk_rstd, N, H, D, QK, 0);
    g->dev->rmsnorm_backward(dqk + QD, G + o[LL_KN], dqk + QD, raw + QD, P + o[LL_KN],
                             A->qk_rstd + N * H, N, Hkv, D, QK, 0);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
}

int lm_llama_block_backward(dt_lm *g, int l, const block_acts *A, const lm_params *P, float *G) {
    const int64_t C = g->C, N = g->B * g->T, QD = g->QD, KVD = g->KVD, QK = QD + KVD;
    block_f32 *w = &g->w32;
    const size_t *o = g->boff;
    const float *p = P->f32;
    int rc;
    const float *x = lm_act_load(g, g->x[l], w->x, (size_t)(N * C));         /* [N, C] */
    const float *res1 = lm_act_load(g, A->res1, w->res1, (size_t)(N * C));   /* [N, C] */
    if ((rc = mlp_backward(g, A, res1, P, G))) return rc;

    /* attention: res1 = x + o_proj(att). The saved att is o_proj's input; flash
     * attention's backward also reads it (qkv_grads loads it then) */
    const float *att = lm_act_load_lin(g, A->att, w->att, (size_t)(N * QD));   /* [N, QD] */
    float *datt = g->dA;                                   /* [N, QD] */
    float *dqk = g->dQKV, *dv = g->dQKV + N * QK;          /* [N, QK], [N, KVD] */
    if ((rc = lm_linear_backward(g, DT_LM_OP_ATTN_PROJ, LM_W_OUT_IN, datt, G + o[LL_OW], NULL, g->dres, A->att, att, P,
                                 o[LL_OW], N, QD, C, 0)))
        return rc;
    qkv_grads(g, A, datt, p, G, dqk, dv);

    const float *ln1 = lm_act_load_lin(g, A->ln1, w->ln1, (size_t)(N * C));   /* [N, C] */
    float *dln1 = g->dC;                                                      /* [N, C] */
    if ((rc = lm_linear_backward(g, DT_LM_OP_QKV, LM_W_OUT_IN, dln1, G + o[LL_QW], g->qkv_bias ? G + o[LL_QB] : NULL,
                                 dqk, A->ln1, ln1, P, o[LL_QW], N, C, QK, 0)))
        return rc;
    if ((rc = lm_linear_backward(g, DT_LM_OP_QKV, LM_W_OUT_IN, dln1, G + o[LL_VW], g->qkv_bias ? G + o[LL_VB] : NULL,
                                 dv, A->ln1, ln1, P, o[LL_VW], N, C, KVD, 1)))
        return rc;
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->rmsnorm_backward(g->dres, G + o[LL_IN], dln1, x, p + o[LL_IN], A->ln1_rstd, N, 1, C, C, 1);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    return DT_OK;
}
