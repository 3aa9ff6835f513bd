/* lm_layer.c — what every block family of dt_lm builds with (lm_internal.h): the
 * tensor table (each tensor declared with its flags and init rule), the activation
 * allocator's cursor, the linears (the fp32 device ops, or with bf16 params and
 * activations bf16 x bf16 -> fp32 GEMMs on the stored tensors: docs/engine.md
 * "Precision") and the per-op profile's clock. It calls no family and not the
 * driver (lm.c), so the families and the driver stand on it, not on each other. */
#include <stdio.h>
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
