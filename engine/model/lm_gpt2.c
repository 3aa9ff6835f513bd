/* lm_gpt2.c — the GPT-2 family of dt_lm (lm_family_gpt2): how it names and stores
 * the modules models/ describes (Conv1D weights, GPT-2's init), the tensors its block
 * reads, its saved activations, block forward and backward and final LayerNorm, as
 * Hugging Face transformers' GPT2Block computes them
 * (docs/engine.md):
 *
 *   h   = x + c_proj(attn(c_attn(ln_1(x))))
 *   out = h + mlp.c_proj(gelu_new(mlp.c_fc(ln_2(h))))
 *
 * Weights [in, out] as HF's Conv1D stores them; learned positions (wpe) added by
 * the encoder; the classifier is the embedding (tied). Built on lm_layer.c only.
 *
 * Letters as lm_internal.h: N = B T, F ffn, hs = C / H. */
#include <math.h>
#include <stdio.h>

#include "lm_internal.h"

/* GPT-2 init (Radford et al. 2019 §2.3; HF GPT2PreTrainedModel._init_weights):
 * N(0, 0.02) weights, residual projections scaled by 1/sqrt(2L). */
#define DT_GPT2_INIT_STD 0.02

/* per-block tensors, in Hugging Face order */
enum {
    P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPW, P_ATTPB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPW,
    P_FCPB,
    /* LoRA's A and B of each linear (PEFT's c_attn, c_proj, c_fc, c_proj targets) */
    P_QKV_A, P_QKV_B, P_ATTP_A, P_ATTP_B, P_FC_A, P_FC_B, P_FCP_A, P_FCP_B, P_BLOCK_COUNT
};
enum { G2_MOD_QKV, G2_MOD_ATTP, G2_MOD_FC, G2_MOD_FCP, G2_MODS };

/* what the block reads, by name within the block (models/' module names; g->slots) */
static const char *const g2_kinds[P_BLOCK_COUNT] = {
    [P_LN1W] = "ln_1.weight",          [P_LN1B] = "ln_1.bias",
    [P_QKVW] = "attn.c_attn.weight",   [P_QKVB] = "attn.c_attn.bias",
    [P_ATTPW] = "attn.c_proj.weight",  [P_ATTPB] = "attn.c_proj.bias",
    [P_LN2W] = "ln_2.weight",          [P_LN2B] = "ln_2.bias",
    [P_FCW] = "mlp.c_fc.weight",       [P_FCB] = "mlp.c_fc.bias",
    [P_FCPW] = "mlp.c_proj.weight",    [P_FCPB] = "mlp.c_proj.bias",
    [P_QKV_A] = "attn.c_attn.lora_A.weight", [P_QKV_B] = "attn.c_attn.lora_B.weight",
    [P_ATTP_A] = "attn.c_proj.lora_A.weight", [P_ATTP_B] = "attn.c_proj.lora_B.weight",
    [P_FC_A] = "mlp.c_fc.lora_A.weight",     [P_FC_B] = "mlp.c_fc.lora_B.weight",
    [P_FCP_A] = "mlp.c_proj.lora_A.weight",  [P_FCP_B] = "mlp.c_proj.lora_B.weight",
};

/* ----------------------------------------------------------------------------
 * the model description */

static int gpt2_check(const dt_model *m, dt_error *err) {
    if (m->hidden % m->n_head != 0)
        return dt_errorf(err, DT_EINVAL,
                         "model: model '%s' has hidden %lld not a multiple of its %lld heads",
                         m->name, (long long)m->hidden, (long long)m->n_head);
    return lm_check_head_dim(m->hidden / m->n_head, err);
}

static void gpt2_configure(dt_lm *g, const dt_model *m) {
    g->D = m->hidden / m->n_head;
    g->qk_norm = 0;
    g->qkv_bias = 1;
    g->tied = 1;
}

/* ----------------------------------------------------------------------------
 * saved activations and scratch */

/* One block's saved activations (docs/activations.md, GPT-2): pointers into the
 * activations allocation, act dtype unless float *. */
typedef struct {
    void *ln1;                   /* [N, C] ln_1 output */
    float *ln1_mean, *ln1_rstd;  /* [N] */
    void *qkv;                   /* [N, 3QD] packed q | k | v (QD = C unless tensor-parallel) */
    float *lse;                  /* [B, H, T] (flash) or NULL */
    void *probs;                 /* [B, H, T, T] (materialized) or NULL */
    void *att;                   /* [N, QD] attention output = c_proj input */
    void *res1;                  /* [N, C] residual after attention */
    void *ln2;                   /* [N, C] */
    float *ln2_mean, *ln2_rstd;  /* [N] */
    void *fch;                   /* [N, F] c_fc output */
    void *gelu;                  /* [N, F] GELU output = mlp.c_proj input */
} gpt2_acts;

/* fp32 views of the family's own activations (16-bit activation dtypes; else NULL) */
typedef struct {
    float *qkv, *fch, *gelu;     /* [N, 3C], [N, F], [N, F] */
} gpt2_views;
_Static_assert(sizeof(gpt2_views) % sizeof(float *) == 0, "dt_lm_free frees a views struct as float pointers");

static void gpt2_layout_block_acts(dt_lm *g, int64_t l, void *acts, char *base, size_t *off, const void *shared) {
    gpt2_acts *ba = acts;
    const gpt2_acts *sh = shared;
    int64_t B = g->B, T = g->T, C = g->C, H = g->H, F = g->F, N = B * T;
    size_t a = (size_t)g->asz, f = sizeof(float);
    /* the linears' inputs are read back only for their weight's or adapter's gradient (the
     * LayerNorms' backward reads their input and statistics, not their output) */
    const int all = !sh;
    ba->ln1 = lm_take_kept(base, off, a * N * C, all || lm_reads_linear_input(g, l, P_QKVW, P_QKV_A, -1),
                           all ? NULL : sh->ln1);
    ba->ln1_mean = lm_take(base, off, f * N);
    ba->ln1_rstd = lm_take(base, off, f * N);
    ba->qkv = lm_take(base, off, a * N * 3 * g->QD);
    if (g->attn == DT_ATTN_FLASH) ba->lse = lm_take(base, off, f * B * H * T);
    else ba->probs = lm_take(base, off, a * B * H * T * T);
    /* flash attention's backward reads its output (c_proj's input) */
    ba->att = lm_take_kept(base, off, a * N * g->QD,
                           all || g->attn == DT_ATTN_FLASH || lm_reads_linear_input(g, l, P_ATTPW, P_ATTP_A, -1),
                           all ? NULL : sh->att);
    ba->res1 = lm_take(base, off, a * N * C);
    ba->ln2 = lm_take_kept(base, off, a * N * C, all || lm_reads_linear_input(g, l, P_FCW, P_FC_A, -1),
                           all ? NULL : sh->ln2);
    ba->ln2_mean = lm_take(base, off, f * N);
    ba->ln2_rstd = lm_take(base, off, f * N);
    ba->fch = lm_take(base, off, a * N * F);
    ba->gelu = lm_take_kept(base, off, a * N * F, all || lm_reads_linear_input(g, l, P_FCPW, P_FCP_A, -1),
                            all ? NULL : sh->gelu);
}

static void gpt2_layout_norm_stats(dt_lm *g, char *base, size_t *off) {
    const int64_t N = g->B * g->T;
    g->lnf_mean = lm_take(base, off, sizeof(float) * N);
    g->lnf_rstd = lm_take(base, off, sizeof(float) * N);
}

static float *g2_buf(const dt_lm *g, size_t bytes) {
    return g->dev->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, bytes);
}

static int gpt2_alloc_scratch(dt_lm *g, const dt_model *m) {
    (void)m;
    const int64_t N = g->B * g->T;
    g->dQKV = g2_buf(g, sizeof(float) * N * 3 * g->QD);
    g->dF = g2_buf(g, sizeof(float) * N * g->F);
    return g->dQKV && g->dF;
}

/* fp32 views of the family's own activations (16-bit activation dtypes) */
static int gpt2_alloc_views(dt_lm *g) {
    const int64_t N = g->B * g->T;
    const size_t f = sizeof(float);
    gpt2_views *w = g->fviews;
    return (w->qkv = g2_buf(g, f * N * 3 * g->QD)) && (w->fch = g2_buf(g, f * N * g->F)) &&
           (w->gelu = g2_buf(g, f * N * g->F));
}

static int64_t gpt2_widest_linear(const dt_lm *g) {
    int64_t w = g->C > g->F ? g->C : g->F;
    return 3 * g->QD > w ? 3 * g->QD : w;
}

static float *gpt2_gemm16_view(dt_lm *g) { return ((gpt2_views *)g->fviews)->gelu; }

/* ----------------------------------------------------------------------------
 * the block */

/* the block's four linears (Conv1D layout, each with its bias) */
typedef struct {
    lm_linear qkv, attn_proj, fc, fc_proj;
} gpt2_linears;

static gpt2_linears gpt2_linears_of(const dt_lm *g, const lm_params *P) {
    const lm_slot *o = P->slot;
    const int64_t C = g->C, F = g->F, QD = g->QD;   /* QD: the attention width, C unless tensor-parallel */
    gpt2_linears s = {
        .qkv = {DT_LM_OP_QKV, LM_W_IN_OUT, o[P_QKVW], o[P_QKVB], C, 3 * QD},
        .attn_proj = {DT_LM_OP_ATTN_PROJ, LM_W_IN_OUT, o[P_ATTPW], o[P_ATTPB], QD, C},
        .fc = {DT_LM_OP_FC, LM_W_IN_OUT, o[P_FCW], o[P_FCB], C, F},
        .fc_proj = {DT_LM_OP_FC_PROJ, LM_W_IN_OUT, o[P_FCPW], o[P_FCPB], F, C},
    };
    lm_linear_add_lora(g, P, &s.qkv, G2_MOD_QKV, P_QKV_A, P_QKV_B, 0, 3 * QD);
    lm_linear_add_lora(g, P, &s.attn_proj, G2_MOD_ATTP, P_ATTP_A, P_ATTP_B, 0, C);
    lm_linear_add_lora(g, P, &s.fc, G2_MOD_FC, P_FC_A, P_FC_B, 0, F);
    lm_linear_add_lora(g, P, &s.fc_proj, G2_MOD_FCP, P_FCP_A, P_FCP_B, 0, C);
    return s;
}

/* One block forward from x[l]. A: where its activations go. xout: x[l + 1], or
 * NULL when recomputing for backward (the block output is not needed then).
 * DT_OK or a GEMM's error. */
static int gpt2_block_forward(dt_lm *g, int l, void *acts, void *xout, const lm_params *P) {
    gpt2_acts *A = acts;
    const gpt2_views *fv = g->fviews;
    int64_t B = g->B, T = g->T, C = g->C, H = g->H, F = g->F, N = B * T, QD = g->QD;
    block_f32 *w = &g->w32;
    const gpt2_linears lin = gpt2_linears_of(g, P);
    int rc;
    const float *x = lm_act_load(g, g->x[l], w->x, (size_t)(N * C));   /* [N, C] */

    float *ln1 = lm_act_f32(g, A->ln1, w->ln1);   /* [N, C] */
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->layernorm_forward(ln1, A->ln1_mean, A->ln1_rstd, x, lm_w32(P, P_LN1W), lm_w32(P, P_LN1B), N, C,
                            g->eps);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    lm_act_commit_lin(g, A->ln1, ln1, (size_t)(N * C));

    float *qkv = lm_act_f32(g, A->qkv, fv->qkv);   /* [N, 3QD] */
    if ((rc = lm_linear_forward(g, &lin.qkv, P, qkv, A->ln1, ln1, N)))
        return rc;
    lm_act_commit(g, A->qkv, qkv, (size_t)(N * 3 * QD));

    float *att = lm_act_f32(g, A->att, w->att);   /* [N, QD] */
    float *probs = NULL;                          /* [B, H, T, T] materialized only */
    m = lm_prof_begin(g);
    if (g->attn == DT_ATTN_FLASH) {
        g->dev->attention_forward_flash(att, A->lse, qkv, B, T, QD, H);
    } else {
        probs = lm_act_f32(g, A->probs, w->probs);
        g->dev->attention_forward_probs(att, probs, qkv, B, T, QD, H);
    }
    lm_prof_end(g, DT_LM_OP_ATTENTION, m, lm_attention_flops(g, DT_LM_PASS_FWD));
    if (probs) lm_act_commit(g, A->probs, probs, (size_t)(B * H * T * T));
    lm_act_commit_lin(g, A->att, att, (size_t)(N * QD));

    float *res1;   /* [N, C] x + c_proj(att) */
    if ((rc = lm_linear_residual(g, &lin.attn_proj, P, A->att, att, x, A->res1, w->res1, &res1))) return rc;

    float *ln2 = lm_act_f32(g, A->ln2, w->ln2);   /* [N, C] */
    m = lm_prof_begin(g);
    g->dev->layernorm_forward(ln2, A->ln2_mean, A->ln2_rstd, res1, lm_w32(P, P_LN2W), lm_w32(P, P_LN2B), N,
                            C, g->eps);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    lm_act_commit_lin(g, A->ln2, ln2, (size_t)(N * C));

    float *fch = lm_act_f32(g, A->fch, fv->fch);   /* [N, F] */
    if ((rc = lm_linear_forward(g, &lin.fc, P, fch, A->ln2, ln2, N)))
        return rc;
    lm_act_commit(g, A->fch, fch, (size_t)(N * F));
    float *gelu = lm_act_f32(g, A->gelu, fv->gelu);   /* [N, F] */
    m = lm_prof_begin(g);
    g->dev->gelu_forward(gelu, fch, N * F);
    lm_prof_end(g, DT_LM_OP_ACT, m, 0.0);
    lm_act_commit_lin(g, A->gelu, gelu, (size_t)(N * F));

    if (!xout) return DT_OK;
    float *xo;   /* [N, C] res1 + mlp.c_proj(gelu) */
    return lm_linear_residual(g, &lin.fc_proj, P, A->gelu, gelu, res1, xout, w->xout, &xo);
}

/* Block l backward. On entry g->dres = dL/dx[l+1]; on exit dL/dx[l]. DT_OK or a
 * GEMM's error. */
static int gpt2_block_backward(dt_lm *g, int l, const void *acts, const lm_params *P, float *G) {
    const gpt2_acts *A = acts;
    const gpt2_views *fv = g->fviews;
    int64_t B = g->B, T = g->T, C = g->C, H = g->H, F = g->F, N = B * T, QD = g->QD;
    block_f32 *w = &g->w32;
    const gpt2_linears lin = gpt2_linears_of(g, P);
    /* fp32 views the elementwise ops read; the linears' inputs only without gemm16 */
    const float *x = lm_act_load(g, g->x[l], w->x, (size_t)(N * C));          /* [N, C] */
    const float *ln1 = lm_act_load_lin(g, A->ln1, w->ln1, (size_t)(N * C));   /* [N, C] */
    const float *qkv = lm_act_load(g, A->qkv, fv->qkv, (size_t)(N * 3 * QD));   /* [N, 3QD] */
    const float *att = lm_act_load(g, A->att, w->att, (size_t)(N * QD));      /* [N, QD] */
    const float *res1 = lm_act_load(g, A->res1, w->res1, (size_t)(N * C));    /* [N, C] */
    const float *ln2 = lm_act_load_lin(g, A->ln2, w->ln2, (size_t)(N * C));   /* [N, C] */
    const float *fch = lm_act_load(g, A->fch, fv->fch, (size_t)(N * F));       /* [N, F] */
    const float *gelu = lm_act_load_lin(g, A->gelu, fv->gelu, (size_t)(N * F));/* [N, F] */
    float *dres = g->dres, *dC = g->dC, *dF = g->dF, *dQKV = g->dQKV;
    int rc;

    /* MLP: x[l+1] = res1 + gelu @ Wp + bp */
    if ((rc = lm_linear_backward(g, &lin.fc_proj, P, G, dF, LM_DINP_SET, dres, A->gelu, gelu, N)))
        return rc;
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->gelu_backward(dF, fch, dF, N * F);
    lm_prof_end(g, DT_LM_OP_ACT, m, 0.0);
    if ((rc = lm_linear_backward(g, &lin.fc, P, G, dC, LM_DINP_SET, dF, A->ln2, ln2, N)))
        return rc;
    m = lm_prof_begin(g);
    if ((rc = lm_tp_allreduce(g, dC, (size_t)(N * C)))) return rc;   /* tensor parallelism: f */
    g->dev->layernorm_backward(dres, lm_g32(P, G, P_LN2W), lm_g32(P, G, P_LN2B), dC, res1, lm_w32(P, P_LN2W),
                             A->ln2_mean, A->ln2_rstd, N, C);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    /* attention: res1 = x + att @ Wap + bap */
    if ((rc = lm_linear_backward(g, &lin.attn_proj, P, G, dC, LM_DINP_SET, dres, A->att, att, N)))
        return rc;
    const float *probs = g->attn == DT_ATTN_FLASH
                             ? NULL
                             : lm_act_load(g, A->probs, w->probs, (size_t)(B * H * T * T));
    m = lm_prof_begin(g);
    if (g->attn == DT_ATTN_FLASH)
        g->dev->attention_backward_flash(dQKV, dC, qkv, att, A->lse, B, T, QD, H);
    else
        g->dev->attention_backward_probs(dQKV, dC, qkv, probs, B, T, QD, H);
    lm_prof_end(g, DT_LM_OP_ATTENTION, m, lm_attention_flops(g, DT_LM_PASS_BWD));
    const int input_grad = lm_block_input_grad(g, l, P, P_LN1W);
    if ((rc = lm_linear_backward(g, &lin.qkv, P, G, input_grad ? dC : NULL, LM_DINP_SET, dQKV, A->ln1, ln1, N)))
        return rc;
    if (!input_grad) return DT_OK;
    m = lm_prof_begin(g);
    if (input_grad && (rc = lm_tp_allreduce(g, dC, (size_t)(N * C)))) return rc;   /* tensor parallelism: f */
    g->dev->layernorm_backward(dres, lm_g32(P, G, P_LN1W), lm_g32(P, G, P_LN1B), dC, x, lm_w32(P, P_LN1W),
                             A->ln1_mean, A->ln1_rstd, N, C);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    return DT_OK;
}

/* ----------------------------------------------------------------------------
 * the final LayerNorm (weight, bias at the start of group L + 1) */

static void gpt2_norm_forward(dt_lm *g, float *out, const float *x, const float *P) {
    g->dev->layernorm_forward(out, g->lnf_mean, g->lnf_rstd, x, P, P + g->C, g->B * g->T, g->C, g->eps);
}

static void gpt2_norm_backward(dt_lm *g, const float *dout, const float *x, const float *P, float *G) {
    /* G NULL: a frozen final norm (no weight / bias gradient) */
    g->dev->layernorm_backward(g->dres, G, G ? G + g->C : NULL, dout, x, P, g->lnf_mean, g->lnf_rstd, g->B * g->T,
                               g->C);
}

const lm_family lm_family_gpt2 = {
    .name = "gpt2",
    .hf_prefix = "transformer.",
    .op_names = {"qkv", "attn proj", "fc", "fc proj", "classifier", "attention", "layernorm", "rope",
                 "gelu", "residual", "cross-entropy", "encoder", "convert"},
    .has_wpe = 1,
    .model_prefix = "",
    .block_prefix = "h.%d.",
    .weight_layout = LM_W_IN_OUT,
    .init_std = DT_GPT2_INIT_STD,
    .scale_out_init = 1,
    .block_kinds = P_BLOCK_COUNT,
    .kind_names = g2_kinds,
    .first_norm_kind = P_LN1W,
    .lora_mods = G2_MODS,
    .acts_size = sizeof(gpt2_acts),
    .views_size = sizeof(gpt2_views),
    .check = gpt2_check,
    .configure = gpt2_configure,
    .layout_block_acts = gpt2_layout_block_acts,
    .layout_norm_stats = gpt2_layout_norm_stats,
    .alloc_scratch = gpt2_alloc_scratch,
    .alloc_views = gpt2_alloc_views,
    .widest_linear = gpt2_widest_linear,
    .gemm16_view = gpt2_gemm16_view,
    .block_forward = gpt2_block_forward,
    .block_backward = gpt2_block_backward,
    .norm_forward = gpt2_norm_forward,
    .norm_backward = gpt2_norm_backward,
};
