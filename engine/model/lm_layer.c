/* lm_layer.c — what every block family of dt_lm builds with (lm_internal.h): the
 * tensor table (each tensor declared with its flags and init rule), the activation
 * allocator's cursor, the linears (the fp32 device ops, or with bf16 params and
 * activations bf16 x bf16 -> fp32 GEMMs on the stored tensors: docs/engine.md
 * "Precision") and the per-op profile's clock. It calls no family and not the
 * driver (lm.c), so the families and the driver stand on it, not on each other. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "lm_internal.h"

/* ----------------------------------------------------------------------------
 * the tensor table and the activation cursor */

void lm_layout_add(dt_lm *g, lm_layout *lo, int group, const lm_tensor_decl *d) {
    dt_tensor_info *t = &g->tensors[lo->i];
    snprintf(g->names[lo->i], DT_TENSOR_NAME_MAX, "%s", d->name);
    t->name = g->names[lo->i];
    t->group = group;
    t->offset = lo->off;
    t->ndim = d->ndim;
    t->shape[0] = d->d0;
    t->shape[1] = d->ndim == 2 ? d->d1 : 0;
    t->numel = (size_t)(d->ndim == 2 ? d->d0 * d->d1 : d->d0);
    t->flags = d->flags;
    t->init = d->init;
    lo->off += t->numel;
    lo->i++;
}

int lm_check_head_dim(int64_t D, dt_error *err) {
    if (D > DT_LM_MAX_HEAD_DIM)
        return dt_errorf(err, DT_EINVAL, "model: head size %lld exceeds the supported %d", (long long)D,
                         DT_LM_MAX_HEAD_DIM);
    return DT_OK;
}

/* ---- the layout from models/' description ---- */

/* a matrix [d0, d1], N(0, std): trained, decayed */
static void add_matrix(dt_lm *g, lm_layout *lo, int group, const char *name, int64_t d0, int64_t d1, double std) {
    const lm_tensor_decl d = {name, 2, d0, d1, DT_TENSOR_TRAINABLE | DT_TENSOR_DECAY, {DT_INIT_NORMAL, std}};
    lm_layout_add(g, lo, group, &d);
}

/* a vector [n] starting at 0 (biases) or 1 (norm weights): trained, not decayed */
static void add_vector(dt_lm *g, lm_layout *lo, int group, const char *name, int64_t n, dt_init_kind init) {
    const lm_tensor_decl d = {name, 1, n, 0, DT_TENSOR_TRAINABLE, {init, 0.0}};
    lm_layout_add(g, lo, group, &d);
}

static void add_norm(dt_lm *g, lm_layout *lo, int group, const char *prefix, const dt_norm_desc *n) {
    char name[DT_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "%s%s.weight", prefix, n->name);
    add_vector(g, lo, group, name, n->width, DT_INIT_ONE);
    if (n->kind != DT_NORM_LAYERNORM) return;
    snprintf(name, sizeof name, "%s%s.bias", prefix, n->name);
    add_vector(g, lo, group, name, n->width, DT_INIT_ZERO);
}

/* a linear's weight in the family's layout */
static void add_weight(dt_lm *g, lm_layout *lo, int group, const char *prefix, const dt_linear_desc *li,
                       double std) {
    char name[DT_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "%s%s.weight", prefix, li->name);
    const int in_out = g->family->weight_layout == LM_W_IN_OUT;
    add_matrix(g, lo, group, name, in_out ? li->in : li->out, in_out ? li->out : li->in, std);
}

static void add_bias(dt_lm *g, lm_layout *lo, int group, const char *prefix, const dt_linear_desc *li) {
    if (!li->bias) return;
    char name[DT_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "%s%s.bias", prefix, li->name);
    add_vector(g, lo, group, name, li->out, DT_INIT_ZERO);
}

/* norm; in-linears' weights, their biases; in-norms; out weight and bias */
static void add_sublayer(dt_lm *g, lm_layout *lo, int group, const char *prefix, const dt_sublayer_desc *s,
                         double out_std) {
    const double std = g->family->init_std;
    add_norm(g, lo, group, prefix, &s->norm);
    for (int i = 0; i < s->n_in; i++) add_weight(g, lo, group, prefix, &s->in[i], std);
    for (int i = 0; i < s->n_in; i++) add_bias(g, lo, group, prefix, &s->in[i]);
    for (int i = 0; i < s->n_in_norm; i++) add_norm(g, lo, group, prefix, &s->in_norm[i]);
    add_weight(g, lo, group, prefix, &s->out, out_std);
    add_bias(g, lo, group, prefix, &s->out);
}

static int norm_tensors(const dt_norm_desc *n) { return n->kind == DT_NORM_LAYERNORM ? 2 : 1; }

static int sublayer_tensors(const dt_sublayer_desc *s) {
    int n = norm_tensors(&s->norm) + 1 + (s->out.bias != 0);
    for (int i = 0; i < s->n_in; i++) n += 1 + (s->in[i].bias != 0);
    for (int i = 0; i < s->n_in_norm; i++) n += norm_tensors(&s->in_norm[i]);
    return n;
}

int lm_layout_count(const dt_model_desc *d, int64_t L, int tied) {
    const int block = sublayer_tensors(&d->block.attn) + sublayer_tensors(&d->block.mlp);
    return d->n_embed + (int)L * block + norm_tensors(&d->final_norm) + !tied;
}

void lm_layout_embed(dt_lm *g, const dt_model_desc *d, lm_layout *lo) {
    for (int i = 0; i < d->n_embed; i++) {
        char name[DT_TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "%s%s.weight", g->family->model_prefix, d->embed[i].name);
        add_matrix(g, lo, 0, name, d->embed[i].rows, d->embed[i].width, g->family->init_std);
    }
}

void lm_layout_block(dt_lm *g, const dt_model_desc *d, int l, lm_layout *lo) {
    const lm_family *f = g->family;
    char prefix[DT_TENSOR_NAME_MAX];
    snprintf(prefix, sizeof prefix, f->block_prefix, l);
    /* GPT-2 (Radford et al. 2019 §2.3): the residual branches' last linears scaled by 1/sqrt(2L) */
    const double out_std = f->scale_out_init ? f->init_std / sqrt(2.0 * (double)g->L) : f->init_std;
    add_sublayer(g, lo, 1 + l, prefix, &d->block.attn, out_std);
    add_sublayer(g, lo, 1 + l, prefix, &d->block.mlp, out_std);
}

void lm_layout_head(dt_lm *g, const dt_model_desc *d, lm_layout *lo) {
    const int last = (int)g->L + 1;
    const size_t base = lo->off;
    add_norm(g, lo, last, g->family->model_prefix, &d->final_norm);
    g->norm_off = 0;
    g->norm_numel = lo->off - base;
    /* the classifier matrix [V, C]: the embedding (tied) or lm_head after the norm */
    g->cls_group = g->tied ? 0 : last;
    g->cls_off = g->tied ? 0 : g->norm_numel;
    if (!g->tied) {
        char name[DT_TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "%s.weight", d->lm_head.name);
        add_matrix(g, lo, last, name, d->lm_head.out, d->lm_head.in, g->family->init_std);
    }
}

int lm_layout_kinds(dt_lm *g, dt_error *err) {
    const lm_family *f = g->family;
    char prefix[DT_TENSOR_NAME_MAX], name[DT_TENSOR_NAME_MAX * 2];
    snprintf(prefix, sizeof prefix, f->block_prefix, 0);
    int used = 0, in_block = 0;
    for (int i = 0; i < g->ntensors; i++) in_block += g->tensors[i].group == 1;
    for (int k = 0; k < f->block_kinds; k++) {
        g->boff[k] = SIZE_MAX;
        snprintf(name, sizeof name, "%s%s", prefix, f->kind_names[k]);
        for (int i = 0; i < g->ntensors; i++)
            if (g->tensors[i].group == 1 && strcmp(g->tensors[i].name, name) == 0) {
                g->boff[k] = g->tensors[i].offset - g->group_off[1];
                used++;
            }
    }
    if (used == in_block || g->L == 0) return DT_OK;
    for (int i = 0; i < g->ntensors; i++) {
        const dt_tensor_info *t = &g->tensors[i];
        int known = 0;
        for (int k = 0; k < f->block_kinds && t->group == 1; k++)
            known |= g->boff[k] == t->offset - g->group_off[1];
        if (t->group == 1 && !known)
            return dt_errorf(err, DT_EINVAL, "model: the block has a tensor %s the engine's %s block does not use",
                             t->name, f->name);
    }
    return DT_OK;
}

void *lm_take(char *base, size_t *off, size_t bytes) {
    void *p = base ? base + *off : NULL;
    *off += bytes;
    return p;
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

/* ----------------------------------------------------------------------------
 * linears (lm_internal.h lm_linear): fp32 device ops, or bf16 x bf16 -> fp32 GEMMs */

int lm_linear_forward(dt_lm *g, const lm_linear *lin, const lm_params *P, float *out, const void *inp,
                      const float *inp32, int64_t N) {
    const int64_t IC = lin->IC, OC = lin->OC;
    const dt_lm_op kind = lin->kind;
    const lm_wlayout lay = lin->lay;
    const size_t w_off = lin->w_off;
    const float *bias = lin->b_off == SIZE_MAX ? NULL : P->f32 + lin->b_off;   /* [OC] */
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

int lm_linear_backward(dt_lm *g, const lm_linear *lin, const lm_params *P, float *G, float *dinp,
                       lm_dinp_mode mode, const float *dout, const void *inp, const float *inp32, int64_t N) {
    const int64_t IC = lin->IC, OC = lin->OC;
    const dt_lm_op kind = lin->kind;
    const lm_wlayout lay = lin->lay;
    const size_t w_off = lin->w_off;
    const int accumulate_dinp = mode == LM_DINP_ADD;
    float *dw = G + w_off;                                              /* W's layout */
    float *dbias = lin->b_off == SIZE_MAX ? NULL : G + lin->b_off;      /* [OC] */
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

int lm_linear_residual(dt_lm *g, const lm_linear *lin, const lm_params *P, const void *inp, const float *inp32,
                       const float *resid, void *act, float *view, float **out) {
    const int64_t N = g->B * g->T, n = N * g->C;
    float *proj = g->dC;   /* [N, C] the projection, not saved */
    int rc = lm_linear_forward(g, lin, P, proj, inp, inp32, N);
    if (rc) return rc;
    float *sum = lm_act_f32(g, act, view);   /* [N, C] */
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->residual_forward(sum, resid, proj, n);
    lm_prof_end(g, DT_LM_OP_RESIDUAL, m, 0.0);
    lm_act_commit(g, act, sum, (size_t)n);
    *out = sum;
    return DT_OK;
}
