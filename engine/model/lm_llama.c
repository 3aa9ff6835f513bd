/* lm_llama.c — the llama family (Llama, Qwen2, Qwen3) of dt_lm (lm_family_llama):
 * how it names and stores the modules models/ describes (nn.Linear weights), the
 * tensors its block reads, saved activations, RoPE tables, block forward and
 * backward and final RMSNorm, as
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
#include <stdlib.h>

#include "lm_internal.h"

/* the block's tensor kinds (the llama-family entries of g->slots), in layout order */
enum {
    LL_IN, LL_QW, LL_KW, LL_VW, LL_QB, LL_KB, LL_VB, LL_QN, LL_KN, LL_OW, LL_POST, LL_GW, LL_UW,
    LL_DW,
    /* LoRA's A and B of each adaptable module, in the order of ll_lora_mod */
    LL_Q_A, LL_Q_B, LL_K_A, LL_K_B, LL_V_A, LL_V_B, LL_O_A, LL_O_B, LL_G_A, LL_G_B, LL_U_A, LL_U_B,
    LL_D_A, LL_D_B, LL_COUNT
};
/* the adaptable modules (PEFT targets every linear of the block), ids for lm_linear_add_lora */
enum { LL_MOD_Q, LL_MOD_K, LL_MOD_V, LL_MOD_O, LL_MOD_G, LL_MOD_U, LL_MOD_D, LL_MODS };

/* HF LlamaConfig.initializer_range (also Qwen2 / Qwen3): N(0, 0.02) for every
 * linear and the embedding, RMSNorm weights 1, biases 0 (LlamaPreTrainedModel._init_weights). */
#define DT_LLAMA_INIT_STD 0.02

/* what the block reads, by name within the block (models/' module names; g->slots) */
static const char *const ll_kinds[LL_COUNT] = {
    [LL_IN] = "input_layernorm.weight",
    [LL_QW] = "self_attn.q_proj.weight",
    [LL_KW] = "self_attn.k_proj.weight",
    [LL_VW] = "self_attn.v_proj.weight",
    [LL_QB] = "self_attn.q_proj.bias",
    [LL_KB] = "self_attn.k_proj.bias",
    [LL_VB] = "self_attn.v_proj.bias",
    [LL_QN] = "self_attn.q_norm.weight",
    [LL_KN] = "self_attn.k_norm.weight",
    [LL_OW] = "self_attn.o_proj.weight",
    [LL_POST] = "post_attention_layernorm.weight",
    [LL_GW] = "mlp.gate_proj.weight",
    [LL_UW] = "mlp.up_proj.weight",
    [LL_DW] = "mlp.down_proj.weight",
    [LL_Q_A] = "self_attn.q_proj.lora_A.weight", [LL_Q_B] = "self_attn.q_proj.lora_B.weight",
    [LL_K_A] = "self_attn.k_proj.lora_A.weight", [LL_K_B] = "self_attn.k_proj.lora_B.weight",
    [LL_V_A] = "self_attn.v_proj.lora_A.weight", [LL_V_B] = "self_attn.v_proj.lora_B.weight",
    [LL_O_A] = "self_attn.o_proj.lora_A.weight", [LL_O_B] = "self_attn.o_proj.lora_B.weight",
    [LL_G_A] = "mlp.gate_proj.lora_A.weight",    [LL_G_B] = "mlp.gate_proj.lora_B.weight",
    [LL_U_A] = "mlp.up_proj.lora_A.weight",      [LL_U_B] = "mlp.up_proj.lora_B.weight",
    [LL_D_A] = "mlp.down_proj.lora_A.weight",    [LL_D_B] = "mlp.down_proj.lora_B.weight",
};

/* kinds one GEMM reads as one matrix (q | k rows, their biases, gate | up rows): they
 * must live in one set (a freeze that trains q_proj but not k_proj is refused) */
static const int ll_fused[][2] = {{LL_QW, LL_KW}, {LL_QB, LL_KB}, {LL_GW, LL_UW}};

/* ----------------------------------------------------------------------------
 * the model description */

static int llama_check(const dt_model *m, dt_error *err) {
    int rc = lm_check_head_dim(m->head_dim, err);
    if (rc) return rc;
    if (m->head_dim % 2 != 0)
        return dt_errorf(err, DT_EINVAL, "model: model '%s' has an odd head_dim %lld; RoPE rotates pairs",
                         m->name, (long long)m->head_dim);
    if (m->qk_norm && m->qkv_bias)
        return dt_errorf(err, DT_EINVAL,
                         "model: model '%s' has both q/k/v bias and q/k norm, which no supported "
                         "model_type combines (qwen2: bias; qwen3: norm)", m->name);
    return DT_OK;
}

static void llama_configure(dt_lm *g, const dt_model *m) {
    g->D = m->head_dim;
    g->qk_norm = m->qk_norm;
    g->qkv_bias = m->qkv_bias;
    g->tied = m->tied_embeddings;
}

/* ----------------------------------------------------------------------------
 * saved activations and scratch */

/* One block's saved activations (docs/activations.md, the llama family): pointers
 * into the activations allocation, act dtype unless float *. */
typedef struct {
    void *ln1;          /* [N, C] input_layernorm output */
    float *ln1_rstd;    /* [N] */
    void *qk_raw;       /* [N, QK] q/k norm only: the projection before the norm */
    float *qk_rstd;     /* [N, H] then [N, Hkv]: q / k norm statistics (q/k norm only) */
    void *qk;           /* [N, QK] q | k after norm and RoPE (what attention reads) */
    void *v;            /* [N, KVD] */
    float *lse;         /* [B, H, T] (flash) or NULL */
    void *probs;        /* [B, H, T, T] (materialized) or NULL */
    void *att;          /* [N, QD] attention output = o_proj input */
    void *res1;         /* [N, C] residual after attention */
    void *ln2;          /* [N, C] */
    float *ln2_rstd;    /* [N] */
    void *gu;           /* [N, 2F] gate | up projection output */
    void *act;          /* [N, F] silu(gate) * up = down_proj input */
} llama_acts;

/* fp32 views of the family's own activations (16-bit activation dtypes; else NULL) */
typedef struct {
    float *qk_raw, *qk, *v, *gu, *act;
} llama_views;
_Static_assert(sizeof(llama_views) % sizeof(float *) == 0, "dt_lm_free frees a views struct as float pointers");

/* The saved tensors of docs/activations.md's llama table, in this order. */
static void llama_layout_block_acts(dt_lm *g, int64_t l, void *acts, char *base, size_t *off, const void *shared) {
    llama_acts *ba = acts;
    const llama_acts *sh = shared;
    const int64_t B = g->B, T = g->T, C = g->C, H = g->H, F = g->F, N = B * T;
    const int64_t QK = g->QD + g->KVD;
    const size_t a = (size_t)g->asz, f = sizeof(float);
    /* the linears' inputs are read back only for their weight's or adapters' gradients (the
     * RMSNorms' backward reads their input and statistics, not their output) */
    const int all = !sh;
    const int ln1 = all || lm_reads_linear_input(g, l, LL_QW, LL_Q_A, LL_K_A) ||
                    lm_reads_linear_input(g, l, LL_VW, LL_V_A, -1);
    ba->ln1 = lm_take_kept(base, off, a * N * C, ln1, all ? NULL : sh->ln1);
    ba->ln1_rstd = lm_take(base, off, f * N);
    if (g->qk_norm) {
        ba->qk_raw = lm_take(base, off, a * N * QK);
        ba->qk_rstd = lm_take(base, off, f * N * (H + g->Hkv));
    }
    ba->qk = lm_take(base, off, a * N * QK);
    ba->v = lm_take(base, off, a * N * g->KVD);
    if (g->attn == DT_ATTN_FLASH) ba->lse = lm_take(base, off, f * B * H * T);
    else ba->probs = lm_take(base, off, a * B * H * T * T);
    /* flash attention's backward reads its output (o_proj's input) */
    ba->att = lm_take_kept(base, off, a * N * g->QD,
                           all || g->attn == DT_ATTN_FLASH || lm_reads_linear_input(g, l, LL_OW, LL_O_A, -1),
                           all ? NULL : sh->att);
    ba->res1 = lm_take(base, off, a * N * C);
    ba->ln2 = lm_take_kept(base, off, a * N * C, all || lm_reads_linear_input(g, l, LL_GW, LL_G_A, LL_U_A),
                           all ? NULL : sh->ln2);
    ba->ln2_rstd = lm_take(base, off, f * N);
    ba->gu = lm_take(base, off, a * N * 2 * F);
    ba->act = lm_take_kept(base, off, a * N * F, all || lm_reads_linear_input(g, l, LL_DW, LL_D_A, -1),
                           all ? NULL : sh->act);
}

static void llama_layout_norm_stats(dt_lm *g, char *base, size_t *off) {
    g->lnf_rstd = lm_take(base, off, sizeof(float) * g->B * g->T);
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

void lm_rope_tables(const dt_model *m, int64_t T, float *cos_t, float *sin_t) {
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

/* RoPE tables [T, D/2] computed on the host, then copied to the device. 1 on
 * success, 0 when the host copy cannot be allocated. */
static int upload_rope(dt_lm *g, const dt_model *m) {
    size_t n = (size_t)(g->T * (g->D / 2));
    float *h = malloc(2 * n * sizeof(float));
    if (!h) return 0;
    lm_rope_tables(m, g->T, h, h + n);
    g->dev->memcpy(g->rope_cos, h, n * sizeof(float), DT_COPY_H2D, DT_STREAM_H2D);
    g->dev->memcpy(g->rope_sin, h + n, n * sizeof(float), DT_COPY_H2D, DT_STREAM_H2D);
    g->dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
    g->dev->stream_sync(DT_STREAM_H2D);
    free(h);
    return 1;
}

static float *ll_buf(const dt_lm *g, size_t bytes) {
    return g->dev->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, bytes);
}

static int llama_alloc_scratch(dt_lm *g, const dt_model *m) {
    const int64_t N = g->B * g->T, F = g->F, QK = g->QD + g->KVD, half = g->D / 2;
    g->dQKV = ll_buf(g, sizeof(float) * N * (QK + g->KVD));
    g->dF = ll_buf(g, sizeof(float) * N * 2 * F);
    g->dA = ll_buf(g, sizeof(float) * N * (g->QD > F ? g->QD : F));
    g->rope_cos = ll_buf(g, sizeof(float) * g->T * half);
    g->rope_sin = ll_buf(g, sizeof(float) * g->T * half);
    return g->dQKV && g->dF && g->dA && g->rope_cos && g->rope_sin && upload_rope(g, m);
}

/* fp32 views of the family's own activations (16-bit activation dtypes) */
static int llama_alloc_views(dt_lm *g) {
    const int64_t N = g->B * g->T, F = g->F, QK = g->QD + g->KVD;
    const size_t f = sizeof(float);
    llama_views *w = g->fviews;
    int ok = (w->qk = ll_buf(g, f * N * QK)) && (w->v = ll_buf(g, f * N * g->KVD)) &&
             (w->gu = ll_buf(g, f * N * 2 * F)) && (w->act = ll_buf(g, f * N * F));
    if (g->qk_norm) ok = ok && (w->qk_raw = ll_buf(g, f * N * QK));
    return ok;
}

static int64_t llama_widest_linear(const dt_lm *g) {
    int64_t w = g->C > g->F ? g->C : g->F;
    const int64_t qkv = g->QD + g->KVD, mlp_in = 2 * g->F;   /* gate | up */
    if (qkv > w) w = qkv;
    return mlp_in > w ? mlp_in : w;
}

static float *llama_gemm16_view(dt_lm *g) { return ((llama_views *)g->fviews)->act; }

/* ----------------------------------------------------------------------------
 * the block's linears (nn.Linear layout); a bias where the model has one */

typedef struct {
    lm_linear qk, v, o, gate_up, down;
} llama_linears;

static llama_linears llama_linears_of(const dt_lm *g, const lm_params *P) {
    const lm_slot *o = P->slot, none = {SIZE_MAX, DT_LM_SET_TRAINED};
    const int64_t C = g->C, F = g->F, QD = g->QD, KVD = g->KVD;
    /* q | k rows are one [QK, C] matrix (q_proj, k_proj adjacent in one set: llama_check_sets),
     * their biases one [QK] */
    llama_linears s = {
        .qk = {DT_LM_OP_QKV, LM_W_OUT_IN, o[LL_QW], o[LL_QB], C, QD + KVD},
        .v = {DT_LM_OP_QKV, LM_W_OUT_IN, o[LL_VW], o[LL_VB], C, KVD},
        .o = {DT_LM_OP_ATTN_PROJ, LM_W_OUT_IN, o[LL_OW], none, QD, C},
        .gate_up = {DT_LM_OP_FC, LM_W_OUT_IN, o[LL_GW], none, C, 2 * F},
        .down = {DT_LM_OP_FC_PROJ, LM_W_OUT_IN, o[LL_DW], none, F, C},
    };
    /* PEFT's per-module adapters on their output columns */
    lm_linear_add_lora(g, P, &s.qk, LL_MOD_Q, LL_Q_A, LL_Q_B, 0, QD);
    lm_linear_add_lora(g, P, &s.qk, LL_MOD_K, LL_K_A, LL_K_B, QD, KVD);
    lm_linear_add_lora(g, P, &s.v, LL_MOD_V, LL_V_A, LL_V_B, 0, KVD);
    lm_linear_add_lora(g, P, &s.o, LL_MOD_O, LL_O_A, LL_O_B, 0, C);
    lm_linear_add_lora(g, P, &s.gate_up, LL_MOD_G, LL_G_A, LL_G_B, 0, F);
    lm_linear_add_lora(g, P, &s.gate_up, LL_MOD_U, LL_U_A, LL_U_B, F, F);
    lm_linear_add_lora(g, P, &s.down, LL_MOD_D, LL_D_A, LL_D_B, 0, C);
    return s;
}

/* ----------------------------------------------------------------------------
 * forward */

/* q | k for the attention: the projection, per-head norm (Qwen3), RoPE. */
static int qk_forward(dt_lm *g, llama_acts *A, const float *ln1, const lm_params *P) {
    const llama_views *fv = g->fviews;
    const int64_t B = g->B, T = g->T, H = g->H, Hkv = g->Hkv, D = g->D, N = B * T;
    const int64_t QD = g->QD, QK = QD + g->KVD;
    const llama_linears lin = llama_linears_of(g, P);
    float *qk = lm_act_f32(g, A->qk, fv->qk);            /* [N, QK] */
    int rc;
    if (g->qk_norm) {
        float *raw = lm_act_f32(g, A->qk_raw, fv->qk_raw);   /* [N, QK] */
        if ((rc = lm_linear_forward(g, &lin.qk, P, raw, A->ln1, ln1, N)))
            return rc;
        lm_act_commit(g, A->qk_raw, raw, (size_t)(N * QK));
        lm_prof_mark m = lm_prof_begin(g);
        g->dev->rmsnorm_forward(qk, A->qk_rstd, raw, lm_w32(P, LL_QN), N, H, D, QK, g->eps);
        g->dev->rmsnorm_forward(qk + QD, A->qk_rstd + N * H, raw + QD, lm_w32(P, LL_KN), N, Hkv, D, QK,
                                g->eps);
        lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    } else if ((rc = lm_linear_forward(g, &lin.qk, P, qk, A->ln1, ln1, N))) {
        return rc;
    }
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->rope_forward(qk, g->rope_cos, g->rope_sin, B, T, H + Hkv, D, QK);
    lm_prof_end(g, DT_LM_OP_ROPE, m, 0.0);
    lm_act_commit(g, A->qk, qk, (size_t)(N * QK));
    return DT_OK;
}

static void attention_forward(dt_lm *g, llama_acts *A, const float *qk, const float *v, float *att) {
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

static int llama_block_forward(dt_lm *g, int l, void *acts, void *xout, const lm_params *P) {
    llama_acts *A = acts;
    const llama_views *fv = g->fviews;
    const int64_t C = g->C, F = g->F, N = g->B * g->T, QD = g->QD, KVD = g->KVD;
    block_f32 *w = &g->w32;
    const llama_linears lin = llama_linears_of(g, P);
    int rc;
    const float *x = lm_act_load(g, g->x[l], w->x, (size_t)(N * C));   /* [N, C] */

    float *ln1 = lm_act_f32(g, A->ln1, w->ln1);   /* [N, C] */
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->rmsnorm_forward(ln1, A->ln1_rstd, x, lm_w32(P, LL_IN), N, 1, C, C, g->eps);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    lm_act_commit_lin(g, A->ln1, ln1, (size_t)(N * C));

    if ((rc = qk_forward(g, A, ln1, P))) return rc;
    const float *qk = lm_act_f32(g, A->qk, fv->qk);   /* [N, QK], committed */
    float *v = lm_act_f32(g, A->v, fv->v);             /* [N, KVD] */
    if ((rc = lm_linear_forward(g, &lin.v, P, v, A->ln1, ln1, N)))
        return rc;
    lm_act_commit(g, A->v, v, (size_t)(N * KVD));

    float *att = lm_act_f32(g, A->att, w->att);   /* [N, QD] */
    attention_forward(g, A, qk, v, att);
    lm_act_commit_lin(g, A->att, att, (size_t)(N * QD));

    float *res1;   /* [N, C] x + o_proj(att) */
    if ((rc = lm_linear_residual(g, &lin.o, P, A->att, att, x, A->res1, w->res1, &res1))) return rc;

    float *ln2 = lm_act_f32(g, A->ln2, w->ln2);   /* [N, C] */
    m = lm_prof_begin(g);
    g->dev->rmsnorm_forward(ln2, A->ln2_rstd, res1, lm_w32(P, LL_POST), N, 1, C, C, g->eps);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    lm_act_commit_lin(g, A->ln2, ln2, (size_t)(N * C));

    float *gu = lm_act_f32(g, A->gu, fv->gu);   /* [N, 2F] gate | up */
    if ((rc = lm_linear_forward(g, &lin.gate_up, P, gu, A->ln2, ln2, N)))
        return rc;
    lm_act_commit(g, A->gu, gu, (size_t)(N * 2 * F));
    float *act = lm_act_f32(g, A->act, fv->act);   /* [N, F] */
    m = lm_prof_begin(g);
    g->dev->swiglu_forward(act, gu, N, F);
    lm_prof_end(g, DT_LM_OP_ACT, m, 0.0);
    lm_act_commit_lin(g, A->act, act, (size_t)(N * F));

    if (!xout) return DT_OK;   /* recomputing for backward: the block output is not needed */
    float *xo;   /* [N, C] res1 + down_proj(act) */
    return lm_linear_residual(g, &lin.down, P, A->act, act, res1, xout, w->xout, &xo);
}

/* ----------------------------------------------------------------------------
 * backward: on entry g->dres = dL/dx[l+1]; on exit dL/dx[l] */

/* MLP: x[l+1] = res1 + down(swiglu(gate_up(rms2(res1)))); adds its part to dres. */
static int mlp_backward(dt_lm *g, const llama_acts *A, const float *res1, const lm_params *P,
                        float *G) {
    const llama_views *fv = g->fviews;
    const int64_t C = g->C, F = g->F, N = g->B * g->T;
    block_f32 *w = &g->w32;
    const float *ln2 = lm_act_load_lin(g, A->ln2, w->ln2, (size_t)(N * C));   /* [N, C] */
    const float *gu = lm_act_load(g, A->gu, fv->gu, (size_t)(N * 2 * F));      /* [N, 2F] */
    const float *act = lm_act_load_lin(g, A->act, fv->act, (size_t)(N * F));   /* [N, F] */
    float *dact = g->dA, *dgu = g->dF, *dln2 = g->dC;   /* [N, F], [N, 2F], [N, C] */
    const llama_linears lin = llama_linears_of(g, P);
    int rc;
    if ((rc = lm_linear_backward(g, &lin.down, P, G, dact, LM_DINP_SET, g->dres, A->act, act, N)))
        return rc;
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->swiglu_backward(dgu, dact, gu, N, F);
    lm_prof_end(g, DT_LM_OP_ACT, m, 0.0);
    if ((rc = lm_linear_backward(g, &lin.gate_up, P, G, dln2, LM_DINP_SET, dgu, A->ln2, ln2, N)))
        return rc;
    if ((rc = lm_tp_allreduce(g, dln2, (size_t)(N * C)))) return rc;   /* tensor parallelism: f */
    m = lm_prof_begin(g);
    g->dev->rmsnorm_backward(g->dres, lm_g32(P, G, LL_POST), dln2, res1, lm_w32(P, LL_POST), A->ln2_rstd,
                             N, 1, C, C, 1);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    return DT_OK;
}

/* d loss / d (q | k) before RoPE and norm, and d loss / d v, from d att. */
static void qkv_grads(dt_lm *g, const llama_acts *A, const float *datt, const lm_params *P, float *G,
                      float *dqk, float *dv) {
    const llama_views *fv = g->fviews;
    const int64_t B = g->B, T = g->T, H = g->H, Hkv = g->Hkv, D = g->D, N = B * T;
    const int64_t QD = g->QD, KVD = g->KVD, QK = QD + KVD;
    block_f32 *w = &g->w32;
    const float *qk = lm_act_load(g, A->qk, fv->qk, (size_t)(N * QK));   /* [N, QK] */
    const float *v = lm_act_load(g, A->v, fv->v, (size_t)(N * KVD));     /* [N, KVD] */
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
    const float *raw = lm_act_load(g, A->qk_raw, fv->qk_raw, (size_t)(N * QK));   /* [N, QK] */
    m = lm_prof_begin(g);
    g->dev->rmsnorm_backward(dqk, lm_g32(P, G, LL_QN), dqk, raw, lm_w32(P, LL_QN), A->qk_rstd, N, H, D, QK, 0);
    g->dev->rmsnorm_backward(dqk + QD, lm_g32(P, G, LL_KN), dqk + QD, raw + QD, lm_w32(P, LL_KN),
                             A->qk_rstd + N * H, N, Hkv, D, QK, 0);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
}

static int llama_block_backward(dt_lm *g, int l, const void *acts, const lm_params *P, float *G) {
    const llama_acts *A = acts;
    const int64_t C = g->C, N = g->B * g->T, QD = g->QD, KVD = g->KVD, QK = QD + KVD;
    block_f32 *w = &g->w32;
    const llama_linears lin = llama_linears_of(g, P);
    int rc;
    const float *x = lm_act_load(g, g->x[l], w->x, (size_t)(N * C));         /* [N, C] */
    const float *res1 = lm_act_load(g, A->res1, w->res1, (size_t)(N * C));   /* [N, C] */
    if ((rc = mlp_backward(g, A, res1, P, G))) return rc;

    /* attention: res1 = x + o_proj(att). The saved att is o_proj's input; flash
     * attention's backward also reads it (qkv_grads loads it then) */
    const float *att = lm_act_load_lin(g, A->att, w->att, (size_t)(N * QD));   /* [N, QD] */
    float *datt = g->dA;                                   /* [N, QD] */
    float *dqk = g->dQKV, *dv = g->dQKV + N * QK;          /* [N, QK], [N, KVD] */
    if ((rc = lm_linear_backward(g, &lin.o, P, G, datt, LM_DINP_SET, g->dres, A->att, att, N)))
        return rc;
    qkv_grads(g, A, datt, P, G, dqk, dv);

    const float *ln1 = lm_act_load_lin(g, A->ln1, w->ln1, (size_t)(N * C));   /* [N, C] */
    const int input_grad = lm_block_input_grad(g, l, P, LL_IN);
    float *dln1 = input_grad ? g->dC : NULL;                                  /* [N, C] */
    if ((rc = lm_linear_backward(g, &lin.qk, P, G, dln1, LM_DINP_SET, dqk, A->ln1, ln1, N)))
        return rc;
    if ((rc = lm_linear_backward(g, &lin.v, P, G, dln1, LM_DINP_ADD, dv, A->ln1, ln1, N)))
        return rc;
    if (!input_grad) return DT_OK;
    if ((rc = lm_tp_allreduce(g, dln1, (size_t)(N * C)))) return rc;   /* tensor parallelism: f */
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->rmsnorm_backward(g->dres, lm_g32(P, G, LL_IN), dln1, x, lm_w32(P, LL_IN), A->ln1_rstd, N, 1, C, C, 1);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    return DT_OK;
}

/* ----------------------------------------------------------------------------
 * the final RMSNorm (model.norm.weight at the start of group L + 1) */

static void llama_norm_forward(dt_lm *g, float *out, const float *x, const float *P) {
    g->dev->rmsnorm_forward(out, g->lnf_rstd, x, P, g->B * g->T, 1, g->C, g->C, g->eps);
}

static void llama_norm_backward(dt_lm *g, const float *dout, const float *x, const float *P, float *G) {
    g->dev->rmsnorm_backward(g->dres, G, dout, x, P, g->lnf_rstd, g->B * g->T, 1, g->C, g->C, 1);
}

const lm_family lm_family_llama = {
    .name = "llama",
    .hf_prefix = "",
    .op_names = {"q|k|v proj", "o_proj", "gate|up", "down_proj", "lm_head", "attention", "rmsnorm",
                 "rope", "swiglu", "residual", "cross-entropy", "embedding", "convert"},
    .has_wpe = 0,
    .model_prefix = "model.",
    .block_prefix = "model.layers.%d.",
    .weight_layout = LM_W_OUT_IN,
    .init_std = DT_LLAMA_INIT_STD,
    .scale_out_init = 0,
    .block_kinds = LL_COUNT,
    .kind_names = ll_kinds,
    .first_norm_kind = LL_IN,
    .lora_mods = LL_MODS,
    .fused = ll_fused,
    .n_fused = sizeof ll_fused / sizeof ll_fused[0],
    .acts_size = sizeof(llama_acts),
    .views_size = sizeof(llama_views),
    .check = llama_check,
    .configure = llama_configure,
    .layout_block_acts = llama_layout_block_acts,
    .layout_norm_stats = llama_layout_norm_stats,
    .alloc_scratch = llama_alloc_scratch,
    .alloc_views = llama_alloc_views,
    .widest_linear = llama_widest_linear,
    .gemm16_view = llama_gemm16_view,
    .block_forward = llama_block_forward,
    .block_backward = llama_block_backward,
    .norm_forward = llama_norm_forward,
    .norm_backward = llama_norm_backward,
};
