/* ops_cpu.c — the CPU device backend: dt_ops.h with the CPU GEMM kernel chosen at
 * start-up (dt_gemm_cpu.h: oneDNN or OpenBLAS sgemm) for every matrix product and
 * OpenMP loops for everything else (per-element math
 * from dt_devmath.h, shared with the CUDA kernels). The bulk 16-bit conversions
 * are convert_cpu.c, attention (GPT-2's and the llama family's) attention_cpu.c.
 *
 * Determinism: every reduction has a fixed order that does not depend on the
 * number of threads (parallel loops split over independent outputs: rows for
 * row-wise ops, column bands for column sums), so a recomputed block gives
 * bitwise the same numbers as the original forward. The llama family's ops
 * (nn.Linear layout, RMSNorm, RoPE, SwiGLU) live in ops_cpu_llama.c under the
 * same rules; it calls this file's GEMM and bias ops, this file calls none of its. */
#include "dt_ops.h"

#include <math.h>
#include <string.h>

#include "dt_devmath.h"
#include "dt_dtype.h"
#include "dt_gemm_cpu.h"
#include "ops_cpu_internal.h"

/* DT_COL_BAND (column band), DT_PAR_MIN: ops_cpu_internal.h, shared with the other
 * CPU op files. */

/* ----------------------------------------------------------------------------
 * GEMM */

/* The fp32 kernel chosen once per process (dt_gemm_cpu.h: oneDNN or OpenBLAS sgemm).
 * Should oneDNN fail a call (out of memory for its buffers), OpenBLAS runs it. */
void dt_op_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc) {
    dt_gemm_kernel k = dt_gemm_cpu_choice()->f32;
    if (dt_gemm_cpu_f32(k, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) &&
        k != DT_GEMM_OPENBLAS)
        dt_gemm_cpu_f32(DT_GEMM_OPENBLAS, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta,
                        C, ldc);
}

void dt_op_broadcast_rows(float *out, const float *bias, int64_t N, int64_t OC) {
    /* out [N, OC], bias [OC] */
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) memcpy(out + n * OC, bias, (size_t)OC * sizeof(float));
}

void dt_op_linear_forward(float *out, const float *inp, const float *w, const float *bias,
                          int64_t N, int64_t IC, int64_t OC) {
    float beta = 0.0f;
    if (bias) {   /* start from the broadcast bias so the GEMM adds onto it (beta = 1) */
        dt_op_broadcast_rows(out, bias, N, OC);
        beta = 1.0f;
    }
    dt_op_gemm(0, 0, N, OC, IC, 1.0f, inp, IC, w, OC, beta, out, OC);
}

void dt_op_bias_backward(float *db, const float *dout, int64_t N, int64_t OC) {
    int64_t nband = (OC + DT_COL_BAND - 1) / DT_COL_BAND;
#pragma omp parallel for schedule(static)
    for (int64_t band = 0; band < nband; band++) {
        int64_t c0 = band * DT_COL_BAND;
        int64_t c1 = c0 + DT_COL_BAND < OC ? c0 + DT_COL_BAND : OC;
        float acc[DT_COL_BAND] = {0};
        for (int64_t n = 0; n < N; n++) {
            const float *row = dout + n * OC;
#pragma omp simd
            for (int64_t c = c0; c < c1; c++) acc[c - c0] += row[c];
        }
        for (int64_t c = c0; c < c1; c++) db[c] += acc[c - c0];
    }
}

void dt_op_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                           const float *inp, const float *w, int64_t N, int64_t IC, int64_t OC,
                           int accumulate_dinp) {
    if (dinp)  /* dinp[N, IC] = dout[N, OC] @ w[IC, OC]^T */
        dt_op_gemm(0, 1, N, IC, OC, 1.0f, dout, OC, w, OC, accumulate_dinp ? 1.0f : 0.0f, dinp,
                   IC);
    /* dw[IC, OC] += inp[N, IC]^T @ dout[N, OC] (NULL: a frozen weight, none) */
    if (dw) dt_op_gemm(1, 0, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dw, OC);
    if (dbias) dt_op_bias_backward(dbias, dout, N, OC);
}

/* ----------------------------------------------------------------------------
 * encoder */

void dt_op_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                           int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < B * T; n++) {
        const float *we = wte + (int64_t)tokens[n] * C;   /* [C] */
        float *o = out + n * C;                            /* [C] */
        if (!wpe) {   /* no learned positions (the llama family) */
            memcpy(o, we, (size_t)C * sizeof(float));
            continue;
        }
        const float *pe = wpe + (n % T) * C;               /* [C] */
#pragma omp simd
        for (int64_t c = 0; c < C; c++) o[c] = we[c] + pe[c];
    }
}

void dt_op_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                            int64_t B, int64_t T, int64_t C) {
    int64_t nband = (C + DT_COL_BAND - 1) / DT_COL_BAND;
#pragma omp parallel for schedule(static)
    for (int64_t band = 0; band < nband; band++) {
        int64_t c0 = band * DT_COL_BAND;
        int64_t c1 = c0 + DT_COL_BAND < C ? c0 + DT_COL_BAND : C;
        for (int64_t n = 0; n < B * T; n++) {
            const float *d = dout + n * C;                 /* [C] */
            float *we = dwte + (int64_t)tokens[n] * C;     /* [C] */
#pragma omp simd
            for (int64_t c = c0; c < c1; c++) we[c] += d[c];
            if (!dwpe) continue;   /* no learned positions */
            float *pe = dwpe + (n % T) * C;                /* [C] */
#pragma omp simd
            for (int64_t c = c0; c < c1; c++) pe[c] += d[c];
        }
    }
}

/* ----------------------------------------------------------------------------
 * LayerNorm */

void dt_op_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                             const float *w, const float *b, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *x = inp + n * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; c++) s += x[c];
        float m = s / (float)C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int64_t c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float r = 1.0f / sqrtf(v / (float)C + eps);
        float *o = out + n * C;
#pragma omp simd
        for (int64_t c = 0; c < C; c++) o[c] = dt_ln_out(x[c], m, r, w[c], b[c]);
        mean[n] = m;
        rstd[n] = r;
    }
}

void dt_op_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, const float *mean,
                              const float *rstd, int64_t N, int64_t C) {
    /* dinp, row by row: dxhat = dout * w;
     * dinp += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *x = inp + n * C, *d = dout + n * C;
        float m = mean[n], r = rstd[n];
        float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
        for (int64_t c = 0; c < C; c++) {
            float dx = d[c] * w[c];
            s1 += dx;
            s2 += dx * (x[c] - m) * r;
        }
        s1 /= (float)C;
        s2 /= (float)C;
        float *di = dinp + n * C;
#pragma omp simd
        for (int64_t c = 0; c < C; c++) di[c] += dt_ln_dinp(x[c], m, r, w[c], d[c], s1, s2);
    }
    /* dw, db: column sums over rows, one band of columns per task (NULL: frozen, none) */
    if (!dw) return;
    int64_t nband = (C + DT_COL_BAND - 1) / DT_COL_BAND;
#pragma omp parallel for schedule(static)
    for (int64_t band = 0; band < nband; band++) {
        int64_t c0 = band * DT_COL_BAND;
        int64_t c1 = c0 + DT_COL_BAND < C ? c0 + DT_COL_BAND : C;
        float aw[DT_COL_BAND] = {0}, ab[DT_COL_BAND] = {0};
        for (int64_t n = 0; n < N; n++) {
            const float *x = inp + n * C, *d = dout + n * C;
            float m = mean[n], r = rstd[n];
#pragma omp simd
            for (int64_t c = c0; c < c1; c++) {
                aw[c - c0] += d[c] * (x[c] - m) * r;
                ab[c - c0] += d[c];
            }
        }
        for (int64_t c = c0; c < c1; c++) {
            dw[c] += aw[c - c0];
            db[c] += ab[c - c0];
        }
    }
}

/* ----------------------------------------------------------------------------
 * GELU (tanh approximation). sqrt(2/pi) and 0.044715: Hendrycks & Gimpel 2016,
 * eq. for the tanh approximation; GPT-2's gelu_new. */

void dt_op_gelu_forward(float *out, const float *inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        out[i] = dt_gelu(inp[i]);
    }
}

void dt_op_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        dinp[i] = dt_gelu_grad(inp[i]) * dout[i];
    }
}

/* ----------------------------------------------------------------------------
 * residual, axpy, finiteness */

void dt_op_residual_forward(float *out, const float *a, const float *b, int64_t n) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void dt_op_dropout_mask(float *y, const float *x, int64_t n, uint64_t stream, double p) {
    const float inv = (float)(1.0 / (1.0 - p));
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < n; e++) y[e] = dt_dropout_at(stream, (uint64_t)e, p, inv, x[e]);
}

void dt_op_axpy(float *y, const float *x, float alpha, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= DT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

int dt_op_all_finite(const float *x, int64_t n) {
    int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n >= DT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) bad |= dt_nonfinite_f32(x[i]);
    return !bad;
}

/* ----------------------------------------------------------------------------
 * cross-entropy on the logits buffer */

double dt_op_crossentropy_forward(float *lse, float *losses, const float *logits,
                                  const int32_t *targets, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *z = logits + n * V;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int64_t v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t v = 0; v < V; v++) s += dt_fast_expf(z[v] - mx);
        lse[n] = mx + logf(s);
        if (targets) losses[n] = targets[n] == DT_IGNORE_INDEX ? 0.0f : lse[n] - z[targets[n]];
    }
    if (!targets) return 0.0;
    double total = 0.0;
    for (int64_t n = 0; n < N; n++) total += losses[n];
    return total / (double)N;
}

void dt_op_crossentropy_backward_inplace(float *logits, const float *lse, const int32_t *targets,
                                         float dloss, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        float *z = logits + n * V;
        if (targets[n] == DT_IGNORE_INDEX) {   /* no loss, no gradient */
            memset(z, 0, (size_t)V * sizeof(float));
            continue;
        }
        float l = lse[n];
#pragma omp simd
        for (int64_t v = 0; v < V; v++) z[v] = dt_ce_dlogit(z[v], l, dloss);
        z[targets[n]] -= dloss;
    }
}
