/* lm.c — the decoder on a device backend (dt_device.h): parameter layout for both
 * families, storage and group binding, hooks, initialisation, the forward /
 * backward drivers (embedding, blocks, final norm, classifier, loss), activation
 * checkpointing, 16-bit storage (with bf16 params and activations the linears run
 * bf16 GEMMs on the stored tensors: lm_linear_*), and the GPT-2 block. The
 * llama-family block is lm_llama.c; the object both share is lm_internal.h. See
 * dt_lm.h for the API and
 * docs/engine.md for the design; docs/activations.md is the list of saved tensors
 * this file allocates (category activations).
 *
 * Dimension letters: B batch, T time, C channels, H heads, hs = C / H, F ffn, V
 * vocab, L layers, N = B * T token rows.
 *
 * Every op, copy and allocation goes through g->dev (dt_device.h), so the same
 * code runs on the CPU (synchronous, host pointers) and on CUDA (device
 * pointers, one compute stream). Host-side work is limited to token checks and
 * the token-position chains of the 16-bit encoder backward (built on the host
 * copy of the inputs, then uploaded). */
#include "dt_lm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_memtrack.h"
#include "lm_internal.h"

/* ----------------------------------------------------------------------------
 * parameter layout */

/* per-block tensors, in Hugging Face order */
enum {
    P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPW, P_ATTPB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPW,
    P_FCPB, P_BLOCK_COUNT
};
static const char *const block_names[P_BLOCK_COUNT] = {
    "ln_1.weight",      "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",      "ln_2.bias",
    "mlp.c_fc.weight",  "mlp.c_fc.bias",  "mlp.c_proj.weight",  "mlp.c_proj.bias"};

/* GPT-2 init (Radford et al. 2019 §2.3; HF GPT2PreTrainedModel._init_weights):
 * N(0, 0.02) weights, residual projections scaled by 1/sqrt(2L). */
#define DT_GPT2_INIT_STD 0.02
/* HF LlamaConfig.initializer_range (also Qwen2 / Qwen3): N(0, 0.02) for every
 * linear and the embedding, RMSNorm weights 1, biases 0 (LlamaPreTrainedModel._init_weights). */
#define DT_LLAMA_INIT_STD 0.02
/* GPT-2's layer_norm_epsilon when a model description carries none (HF GPT2Config). */
#define DT_GPT2_LN_EPS 1e-5f
/* Tensors shorter than this are initialised on one thread. */
#define DT_INIT_PAR_MIN 65536

/* ----------------------------------------------------------------------------
 * small helpers */

/* element offset of tensor i inside its group */
static size_t in_group(const dt_lm *g, int i) {
    return g->tensors[i].offset - g->group_off[g->tensors[i].group];
}





static int hook(const dt_lm *g, int (*fn)(void *, int), int group, dt_error *err,
                const char *what) {
    if (!fn) return 0;
    int rc = fn(g->hooks.ctx, group);
    if (rc && err && err->code == DT_OK)
        dt_errorf(err, rc, "model: %s hook failed for group %d", what, group);
    return rc;
}

/* A group's parameters for the blocks (lm_params): the bound fp32 storage; with
 * 16-bit params the group converted into pw, or with gemm16 only its vectors
 * (each at its own offset in pw; the matrices are read from storage). */
static lm_params group_params(dt_lm *g, int group) {
    lm_params p = {g->gparams[group], NULL};
    if (g->pt == DT_DTYPE_FP32) return p;
    p.f32 = g->pw;
    lm_prof_mark m = lm_prof_begin(g);
    if (!g->gemm16) {
        g->dev->convert(g->pw, DT_DTYPE_FP32, g->gparams[group], g->pt, g->group_numel[group]);
        lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
        return p;
    }
    p.w16 = g->gparams[group];
    for (int i = 0; i < g->ntensors; i++) {
        const dt_tensor_info *t = &g->tensors[i];
        if (t->group != group || t->ndim != 1) continue;
        size_t off = in_group(g, i);
        g->dev->convert(g->pw + off, DT_DTYPE_FP32, lm_tensor_ptr(g->gparams[group], off, g->psz),
                        g->pt, t->numel);
    }
    lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
    return p;
}

/* Elements of the final norm at the start of group L+1 (gpt2: weight and bias). */
static size_t norm_numel(const dt_lm *g) {
    return (size_t)(g->fam == DT_FAMILY_GPT2 ? 2 * g->C : g->C);
}

/* fp32 parameters of the final norm (the start of group L+1; an untied lm_head
 * after it is converted in row chunks by the classifier) */
static float *norm_params_f32(dt_lm *g) {
    int last = (int)g->L + 1;
    if (g->pt == DT_DTYPE_FP32) return g->gparams[last];
    g->dev->convert(g->pw, DT_DTYPE_FP32, g->gparams[last], g->pt, norm_numel(g));
    return g->pw;
}

/* fp32 gradient accumulator of a group: the bound grads, or gw zeroed */
static float *group_grads_f32(dt_lm *g, int group) {
    if (g->gt == DT_DTYPE_FP32) return g->ggrads[group];
    g->dev->memset0(g->gw, g->group_numel[group] * sizeof(float));
    return g->gw;
}

/* 16-bit grads: grads[off .. off+n) += acc (rounded once per element) */
static void grads_add_16(dt_lm *g, int group, size_t off, const float *acc, size_t n) {
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->accumulate_16((uint16_t *)g->ggrads[group] + off, g->gt, acc, n);
    lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
}

static void group_grads_commit(dt_lm *g, int group) {
    if (g->gt != DT_DTYPE_FP32) grads_add_16(g, group, 0, g->gw, g->group_numel[group]);
}

/* ----------------------------------------------------------------------------
 * per-op profile (dt_lm_set_profile, lm_internal.h) */

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

lm_prof_mark lm_prof_now(const dt_lm *g) {
    g->dev->stream_sync(DT_STREAM_COMPUTE);   /* a no-op on the CPU */
    lm_prof_mark m = {clock_s(CLOCK_MONOTONIC), clock_s(CLOCK_PROCESS_CPUTIME_ID)};
    return m;
}

void lm_prof_record(const dt_lm *g, dt_lm_op op, lm_prof_mark m, double flops) {
    lm_prof_mark e = lm_prof_now(g);
    dt_lm_profile *p = g->prof;
    p->wall[g->prof_pass][op] += e.wall - m.wall;
    p->cpu[g->prof_pass][op] += e.cpu - m.cpu;
    p->flops[g->prof_pass][op] += flops;
    p->calls[g->prof_pass][op]++;
}

void dt_lm_set_profile(dt_lm *g, dt_lm_profile *p) { g->prof = p; }

const char *dt_lm_op_name(const dt_lm *g, dt_lm_op op) {
    static const char *const gpt2[DT_LM_OP_COUNT] = {
        "qkv", "attn proj", "fc", "fc proj", "classifier", "attention", "layernorm",
        "rope", "gelu", "residual", "cross-entropy", "encoder", "convert"};
    static const char *const llama[DT_LM_OP_COUNT] = {
        "q|k|v proj", "o_proj", "gate|up", "down_proj", "lm_head", "attention", "rmsnorm",
        "rope", "swiglu", "residual", "cross-entropy", "embedding", "convert"};
    if ((int)op < 0 || op >= DT_LM_OP_COUNT) return "?";
    return g->fam == DT_FAMILY_LLAMA ? llama[op] : gpt2[op];
}

/* ----------------------------------------------------------------------------
 * linears (lm_internal.h): fp32 device ops, or bf16 x bf16 -> fp32 GEMMs */

int lm_linear_forward(dt_lm *g, dt_lm_op kind, lm_wlayout lay, float *out, const void *inp,
                      const float *inp32, const lm_params *P, size_t w_off, const float *bias,
                      int64_t N, int64_t IC, int64_t OC) {
    const double flops = 2.0 * (double)N * (double)IC * (double)OC;
    lm_prof_mark m = lm_prof_begin(g);
    if (!g->gemm16) {
        const float *w = P->f32 + w_off;
        if (lay == LM_W_IN_OUT) g->dev->linear_forward(out, inp32, w, bias, N, IC, OC);
        else g->dev->linear_t_forward(out, inp32, w, bias, N, IC, OC);
        lm_prof_end(g, kind, m, flops);
        return DT_OK;
    }
    const int wt = lay == LM_W_OUT_IN;
    const void *w = lm_tensor_ptr((void *)P->w16, w_off, g->psz);   /* [IC, OC] or [OC, IC] */
    float beta = 0.0f;
    if (bias) {   /* as the fp32 ops: the GEMM adds onto the broadcast bias */
        g->dev->broadcast_rows(out, bias, N, OC);
        beta = 1.0f;
    }
    /* out[N, OC] (+)= inp[N, IC] @ w (Conv1D) or w^T (nn.Linear) */
    int rc = g->dev->gemm_ex(0, wt, N, OC, IC, 1.0f, inp, g->at, IC, w, g->pt, wt ? IC : OC, beta,
                             out, DT_DTYPE_FP32, OC);
    lm_prof_end(g, kind, m, flops);
    return rc;
}

int lm_linear_backward(dt_lm *g, dt_lm_op kind, lm_wlayout lay, float *dinp, float *dw,
                       float *dbias, const float *dout, const void *inp, const float *inp32,
                       const lm_params *P, size_t w_off, int64_t N, int64_t IC, int64_t OC,
                       int accumulate_dinp) {
    /* dinp (when asked) and dw: one 2 N IC OC GEMM each */
    const double gemm_flops = 2.0 * (double)N * (double)IC * (double)OC;
    const double flops = (dinp ? 2.0 : 1.0) * gemm_flops;
    lm_prof_mark m = lm_prof_begin(g);
    if (!g->gemm16) {
        const float *w = P->f32 + w_off;
        if (lay == LM_W_IN_OUT)
            g->dev->linear_backward(dinp, dw, dbias, dout, inp32, w, N, IC, OC, accumulate_dinp);
        else
            g->dev->linear_t_backward(dinp, dw, dbias, dout, inp32, w, N, IC, OC, accumulate_dinp);
        lm_prof_end(g, kind, m, flops);
        return DT_OK;
    }
    const int wt = lay == LM_W_OUT_IN;
    const void *w = lm_tensor_ptr((void *)P->w16, w_off, g->psz);   /* [IC, OC] or [OC, IC] */
    if (dbias) g->dev->bias_backward(dbias, dout, N, OC);   /* from the fp32 gradient */
    lm_prof_end(g, kind, m, 0.0);
    /* rows of dout per bf16 chunk: all N unless OC > d16_cap / N (dt_lm_create
     * guarantees one row fits); fixed by the shapes, so recompute stays bitwise */
    int64_t rows = (int64_t)(g->d16_cap / (size_t)OC);
    if (rows > N) rows = N;
    int rc = DT_OK;
    for (int64_t r0 = 0; r0 < N && !rc; r0 += rows) {
        int64_t nr = r0 + rows <= N ? rows : N - r0;
        const void *x = lm_tensor_ptr((void *)inp, (size_t)(r0 * IC), g->asz);   /* [nr, IC] */
        m = lm_prof_begin(g);
        g->dev->convert(g->d16, DT_DTYPE_BF16, dout + r0 * OC, DT_DTYPE_FP32, (size_t)(nr * OC));
        lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
        m = lm_prof_begin(g);
        /* dinp[nr, IC] (+)= d16[nr, OC] @ w^T (Conv1D) or w (nn.Linear) */
        if (dinp)
            rc = g->dev->gemm_ex(0, !wt, nr, IC, OC, 1.0f, g->d16, DT_DTYPE_BF16, OC, w, g->pt,
                                 wt ? IC : OC, accumulate_dinp ? 1.0f : 0.0f, dinp + r0 * IC,
                                 DT_DTYPE_FP32, IC);
        /* dw += x^T @ d16 ([IC, OC], Conv1D) or d16^T @ x ([OC, IC], nn.Linear) */
        if (!rc && wt)
            rc = g->dev->gemm_ex(1, 0, OC, IC, nr, 1.0f, g->d16, DT_DTYPE_BF16, OC, x, g->at, IC,
                                 1.0f, dw, DT_DTYPE_FP32, IC);
        else if (!rc)
            rc = g->dev->gemm_ex(1, 0, IC, OC, nr, 1.0f, x, g->at, IC, g->d16, DT_DTYPE_BF16, OC,
                                 1.0f, dw, DT_DTYPE_FP32, OC);
        lm_prof_end(g, kind, m, flops * (double)nr / (double)N);
    }
    return rc;
}

/* ----------------------------------------------------------------------------
 * create / free */

void lm_set_tensor(dt_lm *g, int i, const char *name, int group, size_t *off, int ndim, int64_t d0,
                   int64_t d1) {
    dt_tensor_info *t = &g->tensors[i];
    snprintf(g->names[i], DT_TENSOR_NAME_MAX, "%s", name);
    t->name = g->names[i];
    t->group = group;
    t->offset = *off;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 0;
    t->numel = (size_t)(ndim == 2 ? d0 * d1 : d0);
    *off += t->numel;
}

static void build_layout(dt_lm *g) {
    int64_t C = g->C, F = g->F;
    size_t off = 0;
    int i = 0;
    const int llama = g->fam == DT_FAMILY_LLAMA;
    g->group_off[0] = off;
    if (llama) {
        lm_set_tensor(g, i++, "model.embed_tokens.weight", 0, &off, 2, g->V, C);
    } else {
        lm_set_tensor(g, i++, "wte.weight", 0, &off, 2, g->V, C);
        lm_set_tensor(g, i++, "wpe.weight", 0, &off, 2, g->maxT, C);
    }
    g->group_numel[0] = off - g->group_off[0];
    for (int l = 0; l < g->L; l++) {
        int grp = 1 + l;
        g->group_off[grp] = off;
        if (llama) {
            lm_llama_block_layout(g, l, &i, &off);
        } else {
            /* shapes [in, out] as HF Conv1D */
            int64_t shp[P_BLOCK_COUNT][2] = {{C, 0}, {C, 0},     {C, 3 * C}, {3 * C, 0},
                                             {C, C}, {C, 0},     {C, 0},     {C, 0},
                                             {C, F}, {F, 0},     {F, C},     {C, 0}};
            for (int k = 0; k < P_BLOCK_COUNT; k++) {
                char name[DT_TENSOR_NAME_MAX];
                snprintf(name, sizeof name, "h.%d.%s", l, block_names[k]);
                if (l == 0) g->boff[k] = off - g->group_off[grp];
                lm_set_tensor(g, i++, name, grp, &off, shp[k][1] ? 2 : 1, shp[k][0], shp[k][1]);
            }
        }
        g->group_numel[grp] = off - g->group_off[grp];
    }
    int last = g->L + 1;
    g->group_off[last] = off;
    g->norm_off = 0;
    if (llama) {
        lm_set_tensor(g, i++, "model.norm.weight", last, &off, 1, C, 0);
        if (!g->tied) lm_set_tensor(g, i++, "lm_head.weight", last, &off, 2, g->V, C);
    } else {
        lm_set_tensor(g, i++, "ln_f.weight", last, &off, 1, C, 0);
        lm_set_tensor(g, i++, "ln_f.bias", last, &off, 1, C, 0);
    }
    g->group_numel[last] = off - g->group_off[last];
    /* the classifier matrix [V, C]: the embedding (tied) or lm_head after the norm */
    g->cls_group = g->tied ? 0 : last;
    g->cls_off = g->tied ? 0 : (size_t)C;
    g->nparams = off;
    g->ntensors = i;
}

/* Reserves bytes at *off of the activation allocation: its address when base
 * is given, NULL when only measuring. */
static void *take(char *base, size_t *off, size_t bytes) {
    void *p = base ? base + *off : NULL;
    *off += bytes;
    return p;
}

static void layout_gpt2_block_acts(dt_lm *g, block_acts *ba, char *base, size_t *off) {
    int64_t B = g->B, T = g->T, C = g->C, H = g->H, F = g->F, N = B * T;
    size_t a = (size_t)g->asz, f = sizeof(float);
    ba->ln1 = take(base, off, a * N * C);
    ba->ln1_mean = take(base, off, f * N);
    ba->ln1_rstd = take(base, off, f * N);
    ba->qkv = take(base, off, a * N * 3 * C);
    if (g->attn == DT_ATTN_FLASH) ba->lse = take(base, off, f * B * H * T);
    else ba->probs = take(base, off, a * B * H * T * T);
    ba->att = take(base, off, a * N * C);
    ba->res1 = take(base, off, a * N * C);
    ba->ln2 = take(base, off, a * N * C);
    ba->ln2_mean = take(base, off, f * N);
    ba->ln2_rstd = take(base, off, f * N);
    ba->fch = take(base, off, a * N * F);
    ba->gelu = take(base, off, a * N * F);
}

/* Lays out (or, with base == NULL, just measures) the saved activations. */
static size_t layout_acts(dt_lm *g, char *base) {
    int64_t N = g->B * g->T, C = g->C;
    size_t a = (size_t)g->asz, f = sizeof(float), off = 0;
    for (int64_t l = 0; l <= g->L; l++) g->x[l] = take(base, &off, a * N * C);
    int64_t nblocks = g->L - g->K + (g->K > 0 ? 1 : 0);
    for (int64_t s = 0; s < nblocks; s++) {
        /* saved blocks K..L-1 first, then the shared recompute area */
        block_acts *ba = s < g->L - g->K ? &g->blocks[g->K + s] : &g->recompute;
        if (g->fam == DT_FAMILY_LLAMA) lm_llama_layout_block_acts(g, ba, base, &off);
        else layout_gpt2_block_acts(g, ba, base, &off);
    }
    g->lnf = take(base, &off, a * N * C);
    if (g->fam == DT_FAMILY_GPT2) g->lnf_mean = take(base, &off, f * N);
    g->lnf_rstd = take(base, &off, f * N);
    return off;
}

static void *buf(const dt_lm *g, size_t bytes) {
    return g->dev->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, bytes);
}


/* fp32 working copies of one block's activations (16-bit activation dtypes). */
static int alloc_f32_views(dt_lm *g) {
    int64_t N = g->B * g->T, C = g->C, F = g->F;
    size_t f = sizeof(float);
    block_f32 *w = &g->w32;
    int ok = (w->x = buf(g, f * N * C)) && (w->ln1 = buf(g, f * N * C)) &&
             (w->att = buf(g, f * N * g->QD)) && (w->res1 = buf(g, f * N * C)) &&
             (w->ln2 = buf(g, f * N * C)) && (w->xout = buf(g, f * N * C));
    if (g->fam == DT_FAMILY_LLAMA) {
        int64_t QK = g->QD + g->KVD;
        ok = ok && (w->qk = buf(g, f * N * QK)) && (w->v = buf(g, f * N * g->KVD)) &&
             (w->gu = buf(g, f * N * 2 * F)) && (w->act = buf(g, f * N * F));
        if (g->qk_norm) ok = ok && (w->qk_raw = buf(g, f * N * QK));
    } else {
        ok = ok && (w->qkv = buf(g, f * N * 3 * C)) && (w->fch = buf(g, f * N * F)) &&
             (w->gelu = buf(g, f * N * F));
    }
    if (g->attn == DT_ATTN_MATERIALIZED) ok = ok && (w->probs = buf(g, f * g->B * g->H * g->T * g->T));
    return ok;
}

/* The widest linear output (OC): one row of its activation gradient must fit d16. */
static int64_t widest_linear(const dt_lm *g) {
    int64_t w = g->C > g->F ? g->C : g->F;
    int64_t qkv = g->fam == DT_FAMILY_LLAMA ? g->QD + g->KVD : 3 * g->C;
    int64_t mlp_in = g->fam == DT_FAMILY_LLAMA ? 2 * g->F : g->F;   /* llama: gate | up */
    if (qkv > w) w = qkv;
    return mlp_in > w ? mlp_in : w;
}

/* gemm16 (lm_internal.h) with bf16 params and activations: the linears' 16-bit
 * GEMMs read the stored tensors. Its activation-gradient scratch d16 is the fp32
 * view of the MLP's GEMM-only activation (GPT-2 gelu, llama act: [N, F] fp32,
 * 2 N F bf16 elements), which nothing reads in backward once the linears read
 * storage; nothing is allocated for it. fp16 keeps the widened fp32 path: the CPU
 * has no fp16 GEMM kernel (dt_gemm_cpu.h). */
static void set_gemm16(dt_lm *g) {
    g->gemm16 = 0;
    if (g->pt != DT_DTYPE_BF16 || g->at != DT_DTYPE_BF16) return;
    float *view = g->fam == DT_FAMILY_LLAMA ? g->w32.act : g->w32.gelu;
    /* bf16 elements in the [N, F] fp32 view */
    size_t cap = (size_t)(g->B * g->T * g->F) * (sizeof(float) / sizeof(uint16_t));
    if ((size_t)widest_linear(g) > cap) return;      /* not even one row: keep the fp32 path */
    g->d16 = (uint16_t *)view;
    g->d16_cap = cap;
    g->gemm16 = 1;
}

/* RoPE tables [T, D/2] computed on the host, then copied to the device. */
static int upload_rope(dt_lm *g, const dt_model *m) {
    size_t n = (size_t)(g->T * (g->D / 2));
    float *h = malloc(2 * n * sizeof(float));
    if (!h) return 0;
    lm_llama_rope_tables(m, g->T, h, h + n);
    g->dev->memcpy(g->rope_cos, h, n * sizeof(float), DT_COPY_H2D, DT_STREAM_H2D);
    g->dev->memcpy(g->rope_sin, h + n, n * sizeof(float), DT_COPY_H2D, DT_STREAM_H2D);
    g->dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
    g->dev->stream_sync(DT_STREAM_H2D);
    free(h);
    return 1;
}

/* What this engine runs of a model description: one line naming what it cannot. */
static int check_model(const dt_model *m, dt_error *err) {
    int rc = dt_model_validate(m, err);
    if (rc) return rc;
    int64_t D = m->family == DT_FAMILY_LLAMA ? m->head_dim : m->hidden / m->n_head;
    if (m->family == DT_FAMILY_GPT2 && m->hidden % m->n_head != 0)
        return dt_errorf(err, DT_EINVAL,
                         "model: model '%s' has hidden %lld not a multiple of its %lld heads",
                         m->name, (long long)m->hidden, (long long)m->n_head);
    if (D > DT_LM_MAX_HEAD_DIM)
        return dt_errorf(err, DT_EINVAL, "model: head size %lld exceeds the supported %d",
                         (long long)D, DT_LM_MAX_HEAD_DIM);
    if (m->family == DT_FAMILY_LLAMA && D % 2 != 0)
        return dt_errorf(err, DT_EINVAL, "model: model '%s' has an odd head_dim %lld; RoPE rotates pairs",
                         m->name, (long long)D);
    if (m->family == DT_FAMILY_LLAMA && m->qk_norm && m->qkv_bias)
        return dt_errorf(err, DT_EINVAL,
                         "model: model '%s' has both q/k/v bias and q/k norm, which no supported "
                         "model_type combines (qwen2: bias; qwen3: norm)", m->name);
    return DT_OK;
}

int dt_lm_create(const dt_model *m, const dt_precision *prec, int64_t B, int64_t T,
                   int64_t ckpt_layers, dt_attention attn, dt_lm **out, dt_error *err) {
    return dt_lm_create_on(m, prec, B, T, ckpt_layers, attn, DT_DEVICE_CPU, 0, out, err);
}

int dt_lm_create_on(const dt_model *m, const dt_precision *prec, int64_t B, int64_t T,
                      int64_t ckpt_layers, dt_attention attn, dt_device device, int ordinal,
                      dt_lm **out, dt_error *err) {
    return dt_lm_create_ex(m, prec, B, T, ckpt_layers, attn, device, ordinal, 0, out, err);
}

int dt_lm_create_ex(const dt_model *m, const dt_precision *prec, int64_t B, int64_t T,
                    int64_t ckpt_layers, dt_attention attn, dt_device device, int ordinal,
                    unsigned flags, dt_lm **out, dt_error *err) {
    *out = NULL;
    const dt_device_ops *dev = NULL;
    int drc = dt_device_get(device, ordinal, &dev, err);
    if (drc) return drc;
    if (!m || !prec) return dt_errorf(err, DT_EINVAL, "model: model and precision are required");
    int rc = check_model(m, err);
    if (rc) return rc;
    if (B < 1 || T < 1 || T > m->max_pos)
        return dt_errorf(err, DT_EINVAL,
                         "model: batch %lld x sequence %lld invalid: need B >= 1 and 1 <= T <= %lld "
                         "(the model's positions)",
                         (long long)B, (long long)T, (long long)m->max_pos);
    if (ckpt_layers < 0 || ckpt_layers > m->n_layer)
        return dt_errorf(err, DT_EINVAL, "model: checkpointed layers %lld outside 0..%lld",
                         (long long)ckpt_layers, (long long)m->n_layer);
    if (attn != DT_ATTN_FLASH && attn != DT_ATTN_MATERIALIZED)
        return dt_errorf(err, DT_EINVAL, "model: unknown attention kind %d", (int)attn);

    dt_lm *g = calloc(1, sizeof *g);
    if (!g) return dt_errorf(err, DT_ENOMEM, "model: out of memory");
    g->dev = dev;
    g->B = B;
    g->T = T;
    g->fam = m->family;
    g->C = m->hidden;
    g->H = m->n_head;
    g->Hkv = m->n_kv_head;
    g->D = m->family == DT_FAMILY_LLAMA ? m->head_dim : m->hidden / m->n_head;
    g->QD = g->H * g->D;
    g->KVD = g->Hkv * g->D;
    g->qk_norm = m->family == DT_FAMILY_LLAMA && m->qk_norm;
    g->qkv_bias = m->family == DT_FAMILY_GPT2 || m->qkv_bias;
    g->tied = m->family == DT_FAMILY_GPT2 || m->tied_embeddings;
    g->F = m->ffn;
    g->V = m->vocab;
    g->L = m->n_layer;
    g->maxT = m->max_pos;
    g->K = ckpt_layers;
    g->eps = m->norm_eps > 0 ? (float)m->norm_eps : DT_GPT2_LN_EPS;
    g->attn = attn;
    g->pt = prec->param;
    g->gt = prec->grad;
    g->at = prec->activation;
    g->psz = dt_dtype_size(g->pt);
    g->gsz = dt_dtype_size(g->gt);
    g->asz = dt_dtype_size(g->at);

    g->ngroups = (int)g->L + 2;
    /* the most tensors either family has: embeddings 2, blocks, final norm + head 2 */
    int per_block = g->fam == DT_FAMILY_LLAMA ? lm_llama_block_tensors(g) : P_BLOCK_COUNT;
    g->ntensors = 2 + (int)g->L * per_block + 2;
    g->tensors = calloc((size_t)g->ntensors, sizeof *g->tensors);
    g->names = calloc((size_t)g->ntensors, sizeof *g->names);
    g->group_off = calloc((size_t)g->ngroups, sizeof(size_t));
    g->group_numel = calloc((size_t)g->ngroups, sizeof(size_t));
    g->gparams = calloc((size_t)g->ngroups, sizeof(void *));
    g->ggrads = calloc((size_t)g->ngroups, sizeof(void *));
    g->x = calloc((size_t)g->L + 1, sizeof(void *));
    g->blocks = calloc((size_t)g->L, sizeof(block_acts));
    if (!g->tensors || !g->names || !g->group_off || !g->group_numel || !g->gparams ||
        !g->ggrads || !g->x || !g->blocks) {
        dt_lm_free(g);
        return dt_errorf(err, DT_ENOMEM, "model: out of memory for the layout tables");
    }
    build_layout(g);

    int64_t N = B * T, C = g->C, F = g->F, V = g->V;
    const int flat = !(flags & DT_LM_NO_FLAT);
    if (flat) {
        g->params = dev->alloc(DT_POOL_DEVICE, DT_MEM_PARAMS, g->nparams * (size_t)g->psz);
        g->grads = dev->alloc(DT_POOL_DEVICE, DT_MEM_GRADS, g->nparams * (size_t)g->gsz);
    }
    g->act_bytes = layout_acts(g, NULL);
    g->act_mem = dev->alloc(DT_POOL_DEVICE, DT_MEM_ACTIVATIONS, g->act_bytes);
    int ok = (!flat || (g->params && g->grads)) && g->act_mem;
    if (ok) layout_acts(g, g->act_mem);
    for (int grp = 0; grp < g->ngroups && flat; grp++) {   /* else unbound until dt_lm_bind_group */
        g->gparams[grp] = lm_tensor_ptr(g->params, g->group_off[grp], g->psz);
        g->ggrads[grp] = lm_tensor_ptr(g->grads, g->group_off[grp], g->gsz);
    }

    g->logits = buf(g, sizeof(float) * N * V);
    g->ce_lse = buf(g, sizeof(float) * N);
    g->ce_losses = buf(g, sizeof(float) * N);
    g->inputs = buf(g, sizeof(int32_t) * N);
    g->targets = buf(g, sizeof(int32_t) * N);
    g->dres = buf(g, sizeof(float) * N * C);
    g->dC = buf(g, sizeof(float) * N * C);
    if (g->fam == DT_FAMILY_LLAMA) {
        int64_t QK = g->QD + g->KVD, half = g->D / 2;
        g->dQKV = buf(g, sizeof(float) * N * (QK + g->KVD));
        g->dF = buf(g, sizeof(float) * N * 2 * F);
        g->dA = buf(g, sizeof(float) * N * (g->QD > F ? g->QD : F));
        g->rope_cos = buf(g, sizeof(float) * T * half);
        g->rope_sin = buf(g, sizeof(float) * T * half);
        ok = ok && g->dA && g->rope_cos && g->rope_sin && upload_rope(g, m);
    } else {
        g->dQKV = buf(g, sizeof(float) * N * 3 * C);
        g->dF = buf(g, sizeof(float) * N * F);
    }
    ok = ok && g->logits && g->ce_lse && g->ce_losses && g->inputs && g->targets && g->dres &&
         g->dC && g->dQKV && g->dF;

    /* groups converted whole: blocks, the final norm, wpe; the embedding and
     * lm_head matrices are converted in row chunks */
    g->max_group_numel = g->group_numel[1];
    if (g->fam == DT_FAMILY_GPT2 && (size_t)(g->maxT * C) > g->max_group_numel)
        g->max_group_numel = (size_t)(g->maxT * C);
    if (norm_numel(g) > g->max_group_numel) g->max_group_numel = norm_numel(g);
    g->vchunk = (int64_t)(g->max_group_numel / (size_t)C);
    if (g->vchunk > V) g->vchunk = V;
    if (g->pt != DT_DTYPE_FP32) ok = ok && (g->pw = buf(g, sizeof(float) * g->max_group_numel));
    if (g->gt != DT_DTYPE_FP32) {
        ok = ok && (g->gw = buf(g, sizeof(float) * g->max_group_numel)) &&
             (g->tok_head = buf(g, sizeof(int32_t) * V)) && (g->tok_next = buf(g, sizeof(int32_t) * N));
    }
    /* host copies of what the host reads or builds (token checks, chains) */
    g->h_inputs = g->inputs;
    g->h_tok_head = g->tok_head;
    g->h_tok_next = g->tok_next;
    if (!dev->host_addressable && ok) {
        g->h_inputs = dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, sizeof(int32_t) * N);
        ok = g->h_inputs != NULL;
        if (g->gt != DT_DTYPE_FP32)
            ok = ok && (g->h_tok_head = dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, sizeof(int32_t) * V)) &&
                 (g->h_tok_next = dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, sizeof(int32_t) * N));
    }
    if (ok && g->h_tok_head)
        for (int64_t v = 0; v < V; v++) g->h_tok_head[v] = -1;
    if (g->at != DT_DTYPE_FP32) ok = ok && alloc_f32_views(g);
    if (ok) set_gemm16(g);
    if (!ok) {
        dt_lm_free(g);
        return dt_errorf(err, DT_ENOMEM,
                         "model: out of memory allocating %s (B=%lld, T=%lld); a smaller micro-batch "
                         "or more checkpointed layers would need less",
                         m->name, (long long)B, (long long)T);
    }
    *out = g;
    return DT_OK;
}

void dt_lm_free(dt_lm *g) {
    if (!g) return;
    const dt_device_ops *dev = g->dev;
    if (!dev->host_addressable) {
        dev->free(g->h_inputs);
        dev->free(g->h_tok_head);
        dev->free(g->h_tok_next);
    }
    dev->free(g->params);
    dev->free(g->grads);
    dev->free(g->act_mem);
    void *bufs[] = {g->logits, g->ce_lse,   g->ce_losses, g->inputs,   g->targets,
                    g->dres,   g->dC,       g->dQKV,      g->dF,       g->pw,
                    g->gw,     g->w32.x,    g->w32.ln1,   g->w32.qkv,  g->w32.probs,
                    g->w32.att, g->w32.res1, g->w32.ln2,  g->w32.fch,  g->w32.gelu,
                    g->w32.xout, g->tok_head, g->tok_next, g->dA, g->rope_cos, g->rope_sin,
                    g->w32.qk_raw, g->w32.qk, g->w32.v, g->w32.gu, g->w32.act};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev->free(bufs[i]);
    free(g->tensors);
    free(g->names);
    free(g->group_off);
    free(g->group_numel);
    free(g->gparams);
    free(g->ggrads);
    free(g->x);
    free(g->blocks);
    free(g);
}

/* ----------------------------------------------------------------------------
 * layout queries */

int dt_lm_num_tensors(const dt_lm *g) { return g->ntensors; }
const dt_tensor_info *dt_lm_tensor(const dt_lm *g, int i) {
    return i >= 0 && i < g->ntensors ? &g->tensors[i] : NULL;
}
int dt_lm_num_groups(const dt_lm *g) { return g->ngroups; }
int dt_lm_tied(const dt_lm *g) { return g->tied; }
const char *dt_lm_hf_prefix(const dt_lm *g) { return g->fam == DT_FAMILY_GPT2 ? "transformer." : ""; }
dt_family dt_lm_family(const dt_lm *g) { return g->fam; }
size_t dt_lm_group_offset(const dt_lm *g, int group) {
    return group >= 0 && group < g->ngroups ? g->group_off[group] : 0;
}
size_t dt_lm_group_numel(const dt_lm *g, int group) {
    return group >= 0 && group < g->ngroups ? g->group_numel[group] : 0;
}
size_t dt_lm_num_params(const dt_lm *g) { return g->nparams; }
void *dt_lm_params(dt_lm *g) { return g->params; }
void *dt_lm_grads(dt_lm *g) { return g->grads; }
const float *dt_lm_logits(const dt_lm *g) { return g->logits; }
size_t dt_lm_activation_bytes(const dt_lm *g) { return g->act_bytes; }
dt_device dt_lm_device(const dt_lm *g) { return g->dev->kind; }
const dt_device_ops *dt_lm_device_ops(const dt_lm *g) { return g->dev; }

void dt_lm_set_hooks(dt_lm *g, const dt_lm_hooks *hooks) {
    if (hooks) g->hooks = *hooks;
    else memset(&g->hooks, 0, sizeof g->hooks);
}

int dt_lm_bind_group(dt_lm *g, int group, void *params, void *grads) {
    if (group < 0 || group >= g->ngroups) return DT_EINVAL;
    if ((!params && !g->params) || (!grads && !g->grads)) return DT_EINVAL; /* released flat buffer */
    g->gparams[group] = params ? params : lm_tensor_ptr(g->params, g->group_off[group], g->psz);
    g->ggrads[group] = grads ? grads : lm_tensor_ptr(g->grads, g->group_off[group], g->gsz);
    return DT_OK;
}

/* does any group still point into [base, base + bytes)? */
static int flat_in_use(void *const *ptrs, int n, const void *base, size_t bytes) {
    const char *lo = base, *hi = lo + bytes;
    for (int i = 0; i < n; i++)
        if ((const char *)ptrs[i] >= lo && (const char *)ptrs[i] < hi) return 1;
    return 0;
}

int dt_lm_release_flat(dt_lm *g, int params, int grads, dt_error *err) {
    if (params && g->params && flat_in_use(g->gparams, g->ngroups, g->params, g->nparams * (size_t)g->psz))
        return dt_errorf(err, DT_EINVAL, "model: cannot release the flat parameters while a group uses them");
    if (grads && g->grads && flat_in_use(g->ggrads, g->ngroups, g->grads, g->nparams * (size_t)g->gsz))
        return dt_errorf(err, DT_EINVAL, "model: cannot release the flat gradients while a group uses them");
    if (params) {
        g->dev->free(g->params);
        g->params = NULL;
    }
    if (grads) {
        g->dev->free(g->grads);
        g->grads = NULL;
    }
    return DT_OK;
}

int dt_lm_restore_flat(dt_lm *g, int params, int grads, dt_mem_category cat, dt_error *err) {
    if (params && !g->params && !(g->params = g->dev->alloc(DT_POOL_DEVICE, cat, g->nparams * (size_t)g->psz)))
        return dt_errorf(err, DT_ENOMEM, "model: out of memory restoring the flat parameters (%zu elements)",
                         g->nparams);
    if (grads && !g->grads && !(g->grads = g->dev->alloc(DT_POOL_DEVICE, cat, g->nparams * (size_t)g->gsz)))
        return dt_errorf(err, DT_ENOMEM, "model: out of memory restoring the flat gradients (%zu elements)",
                         g->nparams);
    return DT_OK;
}

void *dt_lm_group_params(dt_lm *g, int group) {
    return group >= 0 && group < g->ngroups ? g->gparams[group] : NULL;
}
void *dt_lm_group_grads(dt_lm *g, int group) {
    return group >= 0 && group < g->ngroups ? g->ggrads[group] : NULL;
}

/* ----------------------------------------------------------------------------
 * init */

/* The initial value of every parameter is a pure function of (seed, flat
 * element index), so any slice can be drawn without the rest: a ZeRO-3 rank
 * draws only its shard, and the weights are bitwise the same for any world
 * size (the role of DeepSpeed's zero.Init; docs/engine.md "Initialisation").
 *
 * Element e takes a standard normal by Box–Muller (cos branch) from two
 * uniforms, the splitmix64 outputs (Steele, Lea, Flood 2014) at counters 2e + 1
 * and 2e + 2 of the stream seeded with seed. */
#define DT_SPLITMIX_GAMMA 0x9e3779b97f4a7c15ULL
#define DT_TWO_POW_53 9007199254740992.0

static uint64_t splitmix64_at(uint64_t seed, uint64_t counter) {
    uint64_t z = seed + counter * DT_SPLITMIX_GAMMA;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* uniform in (0, 1): 53 random bits, never 0 */
static double uniform01_at(uint64_t seed, uint64_t counter) {
    return ((double)(splitmix64_at(seed, counter) >> 11) + 0.5) / DT_TWO_POW_53;
}

static double normal_at(uint64_t seed, uint64_t e) {
    double u1 = uniform01_at(seed, 2 * e + 1), u2 = uniform01_at(seed, 2 * e + 2);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* How tensor t starts: *constant (0 biases, 1 norm weights) when it returns 1,
 * else N(0, *std). */
static int init_rule(const dt_lm *g, const dt_tensor_info *t, float *constant, double *std) {
    const char *nm = t->name;
    if (ends_with(nm, ".bias")) {
        *constant = 0.0f;
        return 1;
    }
    int is_norm = g->fam == DT_FAMILY_GPT2 ? strstr(nm, "ln_") != NULL : strstr(nm, "norm") != NULL;
    if (is_norm) {
        *constant = 1.0f;
        return 1;
    }
    if (g->fam == DT_FAMILY_LLAMA) *std = DT_LLAMA_INIT_STD;
    else if (strstr(nm, "c_proj.weight")) *std = DT_GPT2_INIT_STD / sqrt(2.0 * (double)g->L);
    else *std = DT_GPT2_INIT_STD;
    return 0;
}

void dt_lm_init_slice(const dt_lm *g, uint64_t seed, size_t lo, size_t n, void *dst, dt_dtype dt) {
    size_t hi = lo + n > g->nparams ? g->nparams : lo + n;
    for (int i = 0; i < g->ntensors; i++) {
        const dt_tensor_info *t = &g->tensors[i];
        size_t a = t->offset > lo ? t->offset : lo, b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (a >= b) continue;
        float c = 0.0f;
        double std = 0.0;
        int constant = init_rule(g, t, &c, &std);
        int64_t cnt = (int64_t)(b - a);
#pragma omp parallel for schedule(static) if (cnt > DT_INIT_PAR_MIN)
        for (int64_t k = 0; k < cnt; k++) {
            size_t e = a + (size_t)k;
            float v = constant ? c : (float)(normal_at(seed, e) * std);
            dt_store(dst, dt, e - lo, v);
        }
    }
}

void dt_lm_init_random(dt_lm *g, uint64_t seed) {
    /* drawn on the host: into the params directly, or into a host staging copy */
    size_t bytes = g->nparams * (size_t)g->psz;
    void *host = g->dev->host_addressable ? g->params
                                          : g->dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, bytes);
    if (!host) return;   /* no flat buffer (DT_LM_NO_FLAT, released), or out of host memory */
    dt_lm_init_slice(g, seed, 0, g->nparams, host, g->pt);
    if (host != g->params) {
        g->dev->memcpy(g->params, host, bytes, DT_COPY_H2D, DT_STREAM_H2D);
        g->dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
        /* the upload is done once the compute stream passed the hand-off; a
         * pending asynchronous error stays recorded for the caller's next
         * synchronize (synchronize(NULL) would clear it unreported) */
        g->dev->stream_sync(DT_STREAM_COMPUTE);
        g->dev->free(host);
    }
}

/* ----------------------------------------------------------------------------
 * forward */

/* off[k]: element offset of block l's tensor k (P_*) inside the group's fp32 view */
static void block_offsets(const dt_lm *g, int l, size_t off[P_BLOCK_COUNT]) {
    (void)l;   /* every block has the same layout inside its group */
    for (int k = 0; k < P_BLOCK_COUNT; k++) off[k] = g->boff[k];
}

/* One block forward from x[l]. A: where its activations go. xout: x[l + 1], or
 * NULL when recomputing for backward (the block output is not needed then).
 * DT_OK or a GEMM's error. */
static int block_forward(dt_lm *g, int l, block_acts *A, void *xout, const lm_params *P) {
    int64_t B = g->B, T = g->T, C = g->C, H = g->H, F = g->F, N = B * T;
    block_f32 *w = &g->w32;
    size_t o[P_BLOCK_COUNT];
    block_offsets(g, l, o);
    const float *p = P->f32;   /* vectors (and with fp32 linears the matrices) */
    int rc;
    const float *x = lm_act_load(g, g->x[l], w->x, (size_t)(N * C));   /* [N, C] */

    float *ln1 = lm_act_f32(g, A->ln1, w->ln1);   /* [N, C] */
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->layernorm_forward(ln1, A->ln1_mean, A->ln1_rstd, x, p + o[P_LN1W], p + o[P_LN1B], N, C,
                            g->eps);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    lm_act_commit_lin(g, A->ln1, ln1, (size_t)(N * C));

    float *qkv = lm_act_f32(g, A->qkv, w->qkv);   /* [N, 3C] */
    if ((rc = lm_linear_forward(g, DT_LM_OP_QKV, LM_W_IN_OUT, qkv, A->ln1, ln1, P, o[P_QKVW],
                                p + o[P_QKVB], N, C, 3 * C)))
        return rc;
    lm_act_commit(g, A->qkv, qkv, (size_t)(N * 3 * C));

    float *att = lm_act_f32(g, A->att, w->att);   /* [N, C] */
    float *probs = NULL;                          /* [B, H, T, T] materialized only */
    m = lm_prof_begin(g);
    if (g->attn == DT_ATTN_FLASH) {
        g->dev->attention_forward_flash(att, A->lse, qkv, B, T, C, H);
    } else {
        probs = lm_act_f32(g, A->probs, w->probs);
        g->dev->attention_forward_probs(att, probs, qkv, B, T, C, H);
    }
    lm_prof_end(g, DT_LM_OP_ATTENTION, m, lm_attention_flops(g, DT_LM_PASS_FWD));
    if (probs) lm_act_commit(g, A->probs, probs, (size_t)(B * H * T * T));
    lm_act_commit_lin(g, A->att, att, (size_t)(N * C));

    float *proj = g->dC;   /* [N, C] c_proj output, not saved */
    if ((rc = lm_linear_forward(g, DT_LM_OP_ATTN_PROJ, LM_W_IN_OUT, proj, A->att, att, P,
                                o[P_ATTPW], p + o[P_ATTPB], N, C, C)))
        return rc;
    float *res1 = lm_act_f32(g, A->res1, w->res1);   /* [N, C] */
    m = lm_prof_begin(g);
    g->dev->residual_forward(res1, x, proj, N * C);
    lm_prof_end(g, DT_LM_OP_RESIDUAL, m, 0.0);
    lm_act_commit(g, A->res1, res1, (size_t)(N * C));

    float *ln2 = lm_act_f32(g, A->ln2, w->ln2);   /* [N, C] */
    m = lm_prof_begin(g);
    g->dev->layernorm_forward(ln2, A->ln2_mean, A->ln2_rstd, res1, p + o[P_LN2W], p + o[P_LN2B], N,
                            C, g->eps);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    lm_act_commit_lin(g, A->ln2, ln2, (size_t)(N * C));

    float *fch = lm_act_f32(g, A->fch, w->fch);   /* [N, F] */
    if ((rc = lm_linear_forward(g, DT_LM_OP_FC, LM_W_IN_OUT, fch, A->ln2, ln2, P, o[P_FCW],
                                p + o[P_FCB], N, C, F)))
        return rc;
    lm_act_commit(g, A->fch, fch, (size_t)(N * F));
    float *gelu = lm_act_f32(g, A->gelu, w->gelu);   /* [N, F] */
    m = lm_prof_begin(g);
    g->dev->gelu_forward(gelu, fch, N * F);
    lm_prof_end(g, DT_LM_OP_ACT, m, 0.0);
    lm_act_commit_lin(g, A->gelu, gelu, (size_t)(N * F));

    if (!xout) return DT_OK;
    if ((rc = lm_linear_forward(g, DT_LM_OP_FC_PROJ, LM_W_IN_OUT, proj, A->gelu, gelu, P,
                                o[P_FCPW], p + o[P_FCPB], N, F, C)))
        return rc;
    float *xo = lm_act_f32(g, xout, w->xout);   /* [N, C] */
    m = lm_prof_begin(g);
    g->dev->residual_forward(xo, res1, proj, N * C);
    lm_prof_end(g, DT_LM_OP_RESIDUAL, m, 0.0);
    lm_act_commit(g, xout, xo, (size_t)(N * C));
    return DT_OK;
}

static block_acts *acts_of(dt_lm *g, int l) { return l < g->K ? &g->recompute : &g->blocks[l]; }

/* The classifier matrix [V, C] (the embedding, or lm_head) in param dtype. */
static const void *cls_params(const dt_lm *g) {
    return lm_tensor_ptr(g->gparams[g->cls_group], g->cls_off, g->psz);
}

/* logits[N, V] = lnf[N, C] @ W[V, C]^T, W the embedding (tied) or lm_head. lnf:
 * the saved activation, lnf32 its fp32 view (unused with gemm16). */
static int classifier_forward_run(dt_lm *g, const void *lnf, const float *lnf32) {
    int64_t N = g->B * g->T, C = g->C, V = g->V;
    if (g->gemm16)   /* one bf16 GEMM on the stored lnf and matrix */
        return g->dev->gemm_ex(0, 1, N, V, C, 1.0f, lnf, g->at, C, cls_params(g), g->pt, C, 0.0f,
                               g->logits, DT_DTYPE_FP32, V);
    if (g->pt == DT_DTYPE_FP32) {
        g->dev->gemm(0, 1, N, V, C, 1.0f, lnf32, C, cls_params(g), C, 0.0f, g->logits, V);
        return DT_OK;
    }
    for (int64_t v0 = 0; v0 < V; v0 += g->vchunk) {
        int64_t nv = v0 + g->vchunk <= V ? g->vchunk : V - v0;
        g->dev->convert(g->pw, DT_DTYPE_FP32, (const uint16_t *)cls_params(g) + v0 * C, g->pt,
                        (size_t)(nv * C));
        g->dev->gemm(0, 1, N, nv, C, 1.0f, lnf32, C, g->pw, C, 0.0f, g->logits + v0, V);
    }
    return DT_OK;
}

/* classifier_forward_run, booked to the profile's classifier */
static int classifier_forward(dt_lm *g, const void *lnf, const float *lnf32) {
    lm_prof_mark m = lm_prof_begin(g);
    int rc = classifier_forward_run(g, lnf, lnf32);
    lm_prof_end(g, DT_LM_OP_CLASSIFIER, m, 2.0 * (double)(g->B * g->T) * (double)g->C * (double)g->V);
    return rc;
}

/* One block forward, whichever the family. */
static int any_block_forward(dt_lm *g, int l, block_acts *A, void *xout, const lm_params *P) {
    if (g->fam == DT_FAMILY_LLAMA) return lm_llama_block_forward(g, l, A, xout, P);
    return block_forward(g, l, A, xout, P);
}

/* A GEMM's error (gemm_ex: out of scratch memory, the library failed) as one
 * line; l: the block, or -1 for the classifier. */
static int gemm_failed(const dt_lm *g, dt_error *err, int rc, const char *pass, int l) {
    if (l < 0)
        return dt_errorf(err, rc, "model: a %s GEMM of the classifier failed on the %s device",
                         pass, g->dev->name);
    return dt_errorf(err, rc, "model: a %s GEMM of block %d failed on the %s device", pass, l,
                     g->dev->name);
}

/* Every token inside the vocabulary; targets may also be DT_IGNORE_INDEX. *counted
 * (may be NULL): the tokens that are not ignored. */
static int check_tokens(const dt_lm *g, const int32_t *tok, const char *what, int64_t *counted,
                        dt_error *err) {
    const int allow_ignore = counted != NULL;
    int64_t c = 0;
    for (int64_t n = 0; n < g->B * g->T; n++) {
        if (allow_ignore && tok[n] == DT_IGNORE_INDEX) continue;
        if (tok[n] < 0 || tok[n] >= g->V)
            return dt_errorf(err, DT_EINVAL,
                             "model: %s token %d at position %lld is outside the vocabulary 0..%lld%s",
                             what, tok[n], (long long)n, (long long)(g->V - 1),
                             allow_ignore ? " (or -100: no loss)" : "");
        c++;
    }
    if (counted) *counted = c;
    return DT_OK;
}

int dt_lm_forward(dt_lm *g, const int32_t *inputs, const int32_t *targets, float *loss,
                    dt_error *err) {
    int64_t B = g->B, T = g->T, C = g->C, N = B * T, V = g->V;
    int rc;
    if (!inputs) return dt_errorf(err, DT_EINVAL, "model: forward needs input tokens");
    int64_t counted = N;
    if ((rc = check_tokens(g, inputs, "input", NULL, err))) return rc;
    if (targets && (rc = check_tokens(g, targets, "target", &counted, err))) return rc;
    /* host copy (for the 16-bit encoder backward's chains), then the device's;
     * the upload runs on the h2d stream and is handed to compute by an event */
    size_t tok_bytes = sizeof(int32_t) * (size_t)N;
    g->dev->stream_sync(DT_STREAM_H2D);   /* the last upload has read h_inputs */
    memcpy(g->h_inputs, inputs, tok_bytes);
    /* write-after-read: the previous micro-batch's backward, possibly still
     * queued on the compute stream, reads g->targets (cross-entropy) and
     * g->inputs (encoder); the uploads below must wait for it */
    g->dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_H2D);
    if (g->inputs != g->h_inputs)
        g->dev->memcpy(g->inputs, g->h_inputs, tok_bytes, DT_COPY_H2D, DT_STREAM_H2D);
    if (targets) g->dev->memcpy(g->targets, targets, tok_bytes, DT_COPY_H2D, DT_STREAM_H2D);
    g->dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
    g->have_targets = 0;

    /* group 0: encoder x[0] = wte[tokens] + wpe[0..T) */
    if ((rc = hook(g, g->hooks.before_forward, 0, err, "before_forward"))) return rc;
    float *x0 = lm_act_f32(g, g->x[0], g->w32.xout);
    const int has_wpe = g->fam == DT_FAMILY_GPT2;   /* learned positions; llama: RoPE in the blocks */
    g->prof_pass = DT_LM_PASS_FWD;
    lm_prof_mark m = lm_prof_begin(g);
    if (g->pt == DT_DTYPE_FP32) {
        const float *P = g->gparams[0];
        g->dev->encoder_forward(x0, g->inputs, P + in_group(g, 0), has_wpe ? P + in_group(g, 1) : NULL,
                                B, T, C);
    } else {
        float *wpe = NULL;
        if (has_wpe) {
            wpe = g->pw;
            g->dev->convert(wpe, DT_DTYPE_FP32, lm_tensor_ptr(g->gparams[0], in_group(g, 1), g->psz),
                            g->pt, (size_t)(T * C));
        }
        g->dev->encoder_forward_cast(x0, g->inputs, g->gparams[0], g->pt, wpe, B, T, C);
    }
    lm_prof_end(g, DT_LM_OP_ENCODER, m, 0.0);
    lm_act_commit(g, g->x[0], x0, (size_t)(N * C));
    if ((rc = hook(g, g->hooks.after_forward, 0, err, "after_forward"))) return rc;

    for (int l = 0; l < g->L; l++) {
        if ((rc = hook(g, g->hooks.before_forward, 1 + l, err, "before_forward"))) return rc;
        lm_params P = group_params(g, 1 + l);
        if ((rc = any_block_forward(g, l, acts_of(g, l), g->x[l + 1], &P)))
            return gemm_failed(g, err, rc, "forward", l);
        if ((rc = hook(g, g->hooks.after_forward, 1 + l, err, "after_forward"))) return rc;
    }

    /* final norm (and an untied lm_head, in the same group) */
    int last = (int)g->L + 1;
    if ((rc = hook(g, g->hooks.before_forward, last, err, "before_forward"))) return rc;
    const float *P = norm_params_f32(g);
    const float *xL = lm_act_load(g, g->x[g->L], g->w32.x, (size_t)(N * C));
    float *lnf = lm_act_f32(g, g->lnf, g->w32.ln1);
    m = lm_prof_begin(g);
    if (g->fam == DT_FAMILY_LLAMA)
        g->dev->rmsnorm_forward(lnf, g->lnf_rstd, xL, P, N, 1, C, C, g->eps);
    else
        g->dev->layernorm_forward(lnf, g->lnf_mean, g->lnf_rstd, xL, P, P + C, N, C, g->eps);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    lm_act_commit_lin(g, g->lnf, lnf, (size_t)(N * C));
    if (!g->tied && (rc = classifier_forward(g, g->lnf, lnf)))
        return gemm_failed(g, err, rc, "forward", -1);
    if ((rc = hook(g, g->hooks.after_forward, last, err, "after_forward"))) return rc;

    /* tied: group 0 again for the classifier; then the loss */
    if (g->tied) {
        if ((rc = hook(g, g->hooks.before_forward, 0, err, "before_forward"))) return rc;
        if ((rc = classifier_forward(g, g->lnf, lnf))) return gemm_failed(g, err, rc, "forward", -1);
        if ((rc = hook(g, g->hooks.after_forward, 0, err, "after_forward"))) return rc;
    }
    m = lm_prof_begin(g);
    double mean = g->dev->crossentropy_forward(g->ce_lse, g->ce_losses, g->logits,
                                             targets ? g->targets : NULL, N, V);
    lm_prof_end(g, DT_LM_OP_XENT, m, 0.0);
    if (targets) {
        /* the op's mean is over all N rows, ignored ones at 0: the mean over the counted */
        if (counted < N) mean = counted > 0 ? mean * (double)N / (double)counted : 0.0;
        if (loss) *loss = (float)mean;
        g->counted = counted;
        g->have_targets = 1;
    }
    return DT_OK;
}

/* ----------------------------------------------------------------------------
 * backward */

/* Block l backward. On entry g->dres = dL/dx[l+1]; on exit dL/dx[l]. DT_OK or a
 * GEMM's error. */
static int block_backward(dt_lm *g, int l, const block_acts *A, const lm_params *P, float *G) {
    int64_t B = g->B, T = g->T, C = g->C, H = g->H, F = g->F, N = B * T;
    block_f32 *w = &g->w32;
    size_t o[P_BLOCK_COUNT];
    block_offsets(g, l, o);
    const float *p = P->f32;
    /* fp32 views the elementwise ops read; the linears' inputs only without gemm16 */
    const float *x = lm_act_load(g, g->x[l], w->x, (size_t)(N * C));          /* [N, C] */
    const float *ln1 = lm_act_load_lin(g, A->ln1, w->ln1, (size_t)(N * C));   /* [N, C] */
    const float *qkv = lm_act_load(g, A->qkv, w->qkv, (size_t)(N * 3 * C));   /* [N, 3C] */
    const float *att = lm_act_load(g, A->att, w->att, (size_t)(N * C));       /* [N, C] */
    const float *res1 = lm_act_load(g, A->res1, w->res1, (size_t)(N * C));    /* [N, C] */
    const float *ln2 = lm_act_load_lin(g, A->ln2, w->ln2, (size_t)(N * C));   /* [N, C] */
    const float *fch = lm_act_load(g, A->fch, w->fch, (size_t)(N * F));       /* [N, F] */
    const float *gelu = lm_act_load_lin(g, A->gelu, w->gelu, (size_t)(N * F));/* [N, F] */
    float *dres = g->dres, *dC = g->dC, *dF = g->dF, *dQKV = g->dQKV;
    int rc;

    /* MLP: x[l+1] = res1 + gelu @ Wp + bp */
    if ((rc = lm_linear_backward(g, DT_LM_OP_FC_PROJ, LM_W_IN_OUT, dF, G + o[P_FCPW],
                                 G + o[P_FCPB], dres, A->gelu, gelu, P, o[P_FCPW], N, F, C, 0)))
        return rc;
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->gelu_backward(dF, fch, dF, N * F);
    lm_prof_end(g, DT_LM_OP_ACT, m, 0.0);
    if ((rc = lm_linear_backward(g, DT_LM_OP_FC, LM_W_IN_OUT, dC, G + o[P_FCW], G + o[P_FCB], dF,
                                 A->ln2, ln2, P, o[P_FCW], N, C, F, 0)))
        return rc;
    m = lm_prof_begin(g);
    g->dev->layernorm_backward(dres, G + o[P_LN2W], G + o[P_LN2B], dC, res1, p + o[P_LN2W],
                             A->ln2_mean, A->ln2_rstd, N, C);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    /* attention: res1 = x + att @ Wap + bap */
    if ((rc = lm_linear_backward(g, DT_LM_OP_ATTN_PROJ, LM_W_IN_OUT, dC, G + o[P_ATTPW],
                                 G + o[P_ATTPB], dres, A->att, att, P, o[P_ATTPW], N, C, C, 0)))
        return rc;
    const float *probs = g->attn == DT_ATTN_FLASH
                             ? NULL
                             : lm_act_load(g, A->probs, w->probs, (size_t)(B * H * T * T));
    m = lm_prof_begin(g);
    if (g->attn == DT_ATTN_FLASH)
        g->dev->attention_backward_flash(dQKV, dC, qkv, att, A->lse, B, T, C, H);
    else
        g->dev->attention_backward_probs(dQKV, dC, qkv, probs, B, T, C, H);
    lm_prof_end(g, DT_LM_OP_ATTENTION, m, lm_attention_flops(g, DT_LM_PASS_BWD));
    if ((rc = lm_linear_backward(g, DT_LM_OP_QKV, LM_W_IN_OUT, dC, G + o[P_QKVW], G + o[P_QKVB],
                                 dQKV, A->ln1, ln1, P, o[P_QKVW], N, C, 3 * C, 0)))
        return rc;
    m = lm_prof_begin(g);
    g->dev->layernorm_backward(dres, G + o[P_LN1W], G + o[P_LN1B], dC, x, p + o[P_LN1W],
                             A->ln1_mean, A->ln1_rstd, N, C);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    return DT_OK;
}

/* classifier backward, dlogits in g->logits: dlnf[N, C] = dlogits @ W; dW +=
 * dlogits^T @ lnf (W [V, C]). lnf: the saved activation, lnf32 its fp32 view
 * (unused with gemm16). DT_OK or a GEMM's error. */
static int classifier_backward(dt_lm *g, const void *lnf, const float *lnf32, float *dlnf) {
    int64_t N = g->B * g->T, C = g->C, V = g->V;
    const int grp = g->cls_group;
    const size_t off = g->cls_off;
    const double flops_per_v = 4.0 * (double)N * (double)C;   /* dlnf and dW: 2 N C each per vocab row */
    lm_prof_mark m = lm_prof_begin(g);
    if (g->pt == DT_DTYPE_FP32 && g->gt == DT_DTYPE_FP32) {
        g->dev->gemm(0, 0, N, C, V, 1.0f, g->logits, V, cls_params(g), C, 0.0f, dlnf, C);
        g->dev->gemm(1, 0, V, C, N, 1.0f, g->logits, V, lnf32, C, 1.0f, (float *)g->ggrads[grp] + off, C);
        lm_prof_end(g, DT_LM_OP_CLASSIFIER, m, flops_per_v * (double)V);
        return DT_OK;
    }
    /* chunks over V: gemm16 rounds each dlogits chunk [N, nv] to bf16 into d16 */
    int64_t vchunk = g->vchunk;
    if (g->gemm16 && (size_t)(N * vchunk) > g->d16_cap) vchunk = (int64_t)(g->d16_cap / (size_t)N);
    int rc = DT_OK;
    for (int64_t v0 = 0; v0 < V && !rc; v0 += vchunk) {
        int64_t nv = v0 + vchunk <= V ? vchunk : V - v0;
        const float dlnf_beta = v0 ? 1.0f : 0.0f;   /* the chunks' sums over V accumulate */
        float *dw = g->gt == DT_DTYPE_FP32 ? (float *)g->ggrads[grp] + off + v0 * C : g->gw;
        const float dw_beta = g->gt == DT_DTYPE_FP32 ? 1.0f : 0.0f;   /* gw: a fresh chunk */
        m = lm_prof_begin(g);   /* the chunk's weight conversion (16-bit, not gemm16) is booked with it */
        if (g->gemm16) {
            const void *w = lm_tensor_ptr((void *)cls_params(g), (size_t)(v0 * C), g->psz);   /* [nv, C] */
            m = lm_prof_begin(g);
            g->dev->convert_2d(g->d16, DT_DTYPE_BF16, nv, g->logits + v0, DT_DTYPE_FP32, V, N, nv);
            lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
            m = lm_prof_begin(g);
            rc = g->dev->gemm_ex(0, 0, N, C, nv, 1.0f, g->d16, DT_DTYPE_BF16, nv, w, g->pt, C,
                                 dlnf_beta, dlnf, DT_DTYPE_FP32, C);
            if (!rc)
                rc = g->dev->gemm_ex(1, 0, nv, C, N, 1.0f, g->d16, DT_DTYPE_BF16, nv, lnf, g->at,
                                     C, dw_beta, dw, DT_DTYPE_FP32, C);
        } else {
            const float *w;   /* [nv, C] */
            if (g->pt == DT_DTYPE_FP32) {
                w = (const float *)cls_params(g) + v0 * C;
            } else {
                g->dev->convert(g->pw, DT_DTYPE_FP32, (const uint16_t *)cls_params(g) + v0 * C,
                                g->pt, (size_t)(nv * C));
                w = g->pw;
            }
            g->dev->gemm(0, 0, N, C, nv, 1.0f, g->logits + v0, V, w, C, dlnf_beta, dlnf, C);
            g->dev->gemm(1, 0, nv, C, N, 1.0f, g->logits + v0, V, lnf32, C, dw_beta, dw, C);
        }
        lm_prof_end(g, DT_LM_OP_CLASSIFIER, m, flops_per_v * (double)nv);
        if (!rc && g->gt != DT_DTYPE_FP32) grads_add_16(g, grp, off + (size_t)(v0 * C), g->gw, (size_t)(nv * C));
    }
    return rc;
}

/* Final norm backward into group L+1's first elements: on entry g->dC holds
 * d loss / d lnf; on exit g->dres = d loss / d x[L]. */
static void final_norm_backward(dt_lm *g) {
    int64_t N = g->B * g->T, C = g->C;
    int last = (int)g->L + 1;
    const float *P = norm_params_f32(g);
    float *G = g->gt == DT_DTYPE_FP32 ? g->ggrads[last] : g->gw;
    if (g->gt != DT_DTYPE_FP32) g->dev->memset0(g->gw, norm_numel(g) * sizeof(float));
    const float *xL = lm_act_load(g, g->x[g->L], g->w32.x, (size_t)(N * C));
    g->dev->memset0(g->dres, sizeof(float) * (size_t)(N * C));
    lm_prof_mark m = lm_prof_begin(g);
    if (g->fam == DT_FAMILY_LLAMA)
        g->dev->rmsnorm_backward(g->dres, G, g->dC, xL, P, g->lnf_rstd, N, 1, C, C, 1);
    else
        g->dev->layernorm_backward(g->dres, G, G + C, g->dC, xL, P, g->lnf_mean, g->lnf_rstd, N, C);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    if (g->gt != DT_DTYPE_FP32) grads_add_16(g, last, 0, g->gw, norm_numel(g));
}

/* One block backward, whichever the family. */
static int any_block_backward(dt_lm *g, int l, const block_acts *A, const lm_params *P, float *G) {
    if (g->fam == DT_FAMILY_LLAMA) return lm_llama_block_backward(g, l, A, P, G);
    return block_backward(g, l, A, P, G);
}

/* encoder backward into group 0's grads (any grad dtype) */
static void encoder_backward(dt_lm *g) {
    int64_t B = g->B, T = g->T, C = g->C, N = B * T;
    if (g->gt == DT_DTYPE_FP32) {
        float *G = g->ggrads[0];
        g->dev->encoder_backward(G + in_group(g, 0), g->fam == DT_FAMILY_GPT2 ? G + in_group(g, 1) : NULL,
                                 g->dres, g->inputs, B, T,
                               C);
        return;
    }
    /* 16-bit grads: sum each wte row's contributions in fp32 first (tokens in
     * order, so deterministic), then round into storage once per row. Chain the
     * positions of each token in order on the host: tok_head[tok] = first
     * position, tok_next[n] = next position with the same token (-1 ends). */
    for (int64_t n = N - 1; n >= 0; n--) {
        g->h_tok_next[n] = g->h_tok_head[g->h_inputs[n]];
        g->h_tok_head[g->h_inputs[n]] = (int32_t)n;
    }
    if (g->tok_head != g->h_tok_head) {
        /* write-after-read: the last encoder_backward_16 on the compute stream
         * reads tok_head / tok_next (not ordered otherwise: nothing between two
         * calls is guaranteed to wait for the compute stream) */
        g->dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_H2D);
        g->dev->memcpy(g->tok_head, g->h_tok_head, sizeof(int32_t) * (size_t)g->V, DT_COPY_H2D,
                       DT_STREAM_H2D);
        g->dev->memcpy(g->tok_next, g->h_tok_next, sizeof(int32_t) * (size_t)N, DT_COPY_H2D,
                       DT_STREAM_H2D);
        g->dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
    }
    void *G = g->ggrads[0];
    g->dev->encoder_backward_16(lm_tensor_ptr(G, in_group(g, 0), g->gsz),
                                g->fam == DT_FAMILY_GPT2 ? lm_tensor_ptr(G, in_group(g, 1), g->gsz) : NULL,
                                g->gt, g->dres, g->inputs,
                                g->tok_head, g->tok_next, g->gw, B, T, C);
    /* reset the host head table for the next call, once the upload has read it */
    g->dev->stream_sync(DT_STREAM_H2D);
    for (int64_t n = 0; n < N; n++) g->h_tok_head[g->h_inputs[n]] = -1;
}

int dt_lm_backward(dt_lm *g, float grad_scale, dt_error *err) {
    int64_t B = g->B, T = g->T, C = g->C, N = B * T, V = g->V;
    int rc;
    if (!g->have_targets)
        return dt_errorf(err, DT_EINVAL,
                         "model: backward needs a preceding forward with targets");
    g->have_targets = 0;   /* the logits buffer becomes dlogits */

    /* mean loss over N tokens, times the caller's scale (1/accum, loss scale) */
    float dloss = g->counted > 0 ? grad_scale / (float)g->counted : 0.0f;
    g->prof_pass = DT_LM_PASS_BWD;
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->crossentropy_backward_inplace(g->logits, g->ce_lse, g->targets, dloss, N, V);
    lm_prof_end(g, DT_LM_OP_XENT, m, 0.0);

    const float *lnf = lm_act_load_lin(g, g->lnf, g->w32.ln1, (size_t)(N * C));   /* [N, C] */
    int last = (int)g->L + 1;
    if (g->tied) {   /* group 0 first: the classifier is the embedding */
        if ((rc = hook(g, g->hooks.before_backward, 0, err, "before_backward"))) return rc;
        if ((rc = classifier_backward(g, g->lnf, lnf, g->dC)))
            return gemm_failed(g, err, rc, "backward", -1);
        if ((rc = hook(g, g->hooks.before_backward, last, err, "before_backward"))) return rc;
    } else {         /* lm_head lives in group L+1 with the final norm */
        if ((rc = hook(g, g->hooks.before_backward, last, err, "before_backward"))) return rc;
        if ((rc = classifier_backward(g, g->lnf, lnf, g->dC)))
            return gemm_failed(g, err, rc, "backward", -1);
    }
    final_norm_backward(g);
    if ((rc = hook(g, g->hooks.after_backward, last, err, "after_backward"))) return rc;

    for (int l = (int)g->L - 1; l >= 0; l--) {
        if ((rc = hook(g, g->hooks.before_backward, 1 + l, err, "before_backward"))) return rc;
        lm_params Pl = group_params(g, 1 + l);
        if (l < g->K) {   /* recompute */
            g->prof_pass = DT_LM_PASS_RECOMPUTE;
            rc = any_block_forward(g, l, &g->recompute, NULL, &Pl);
            g->prof_pass = DT_LM_PASS_BWD;
            if (rc) return gemm_failed(g, err, rc, "recompute", l);
        }
        float *Gl = group_grads_f32(g, 1 + l);
        if ((rc = any_block_backward(g, l, acts_of(g, l), &Pl, Gl)))
            return gemm_failed(g, err, rc, "backward", l);
        group_grads_commit(g, 1 + l);
        if ((rc = hook(g, g->hooks.after_backward, 1 + l, err, "after_backward"))) return rc;
    }

    /* untied: group 0 is entered here for the first time in this pass */
    if (!g->tied && (rc = hook(g, g->hooks.before_backward, 0, err, "before_backward"))) return rc;
    m = lm_prof_begin(g);
    encoder_backward(g);
    lm_prof_end(g, DT_LM_OP_ENCODER, m, 0.0);
    if ((rc = hook(g, g->hooks.after_backward, 0, err, "after_backward"))) return rc;
    return DT_OK;
}

void dt_lm_zero_grad(dt_lm *g) {
    for (int grp = 0; grp < g->ngroups; grp++)
        g->dev->memset0(g->ggrads[grp], g->group_numel[grp] * (size_t)g->gsz);
}

/* ----------------------------------------------------------------------------
 * gradient checks */

int dt_lm_grads_finite(const dt_lm *g) {
    for (int grp = 0; grp < g->ngroups; grp++)
        if (!g->dev->all_finite(g->ggrads[grp], g->gt, g->group_numel[grp])) return 0;
    return 1;
}

double dt_lm_grad_sumsq(const dt_lm *g) {
    /* per group in fixed chunks (dt_devmath.h), groups in order */
    double total = 0.0;
    for (int grp = 0; grp < g->ngroups; grp++)
        total += g->dev->sumsq(g->ggrads[grp], g->gt, g->group_numel[grp]);
    return total;
}
