/* ops_cpu_llama.c — the CPU versions of the llama family's device ops (dt_ops.h,
 * "the llama family"; Llama, Qwen2, Qwen3):
 *   - linears with torch.nn.Linear's weight layout [out, in] (cblas_sgemm with a
 *     transposed operand, broadcast bias, column-band bias gradient);
 *   - RMSNorm (Zhang & Sennrich 2019) over strided groups of D elements (a whole
 *     row, or Qwen3's per-head q / k norm inside a packed qkv row);
 *   - rotary position embedding (Su et al. 2021, RoFormer), HF's rotate-half
 *     convention, in place;
 *   - SwiGLU (Shazeer 2020) on the packed gate | up projection.
 * Grouped-query attention is attention_cpu.c (shared with GPT-2). Per-element
 * math comes from dt_devmath.h (shared with the CUDA kernels); the column band
 * from ops_cpu_internal.h (shared with ops_cpu.c).
 *
 * Determinism (as ops_cpu.c): no reduction order depends on the thread count.
 * Parallel loops split over independent outputs (rows, row groups, column
 * bands of a parameter gradient). So a recomputed block is bitwise the original,
 * with any number of threads. */
#include <math.h>
#include <string.h>

#include "dt_devmath.h"
#include "dt_ops.h"
#include "ops_cpu_internal.h"

/* RoPE rotation direction: the forward rotates by +angle; the backward applies
 * the transpose of the rotation, i.e. rotates by -angle (sin -> -sin). */
#define DT_ROPE_FORWARD 1.0f
#define DT_ROPE_INVERSE (-1.0f)

/* ----------------------------------------------------------------------------
 * nn.Linear-layout linear layers */

void dt_op_linear_t_forward(float *out, const float *inp, const float *w, const float *bias,
                            int64_t N, int64_t IC, int64_t OC) {
    /* out [N, OC], inp [N, IC], w [OC, IC], bias [OC] or NULL */
    float beta = 0.0f;
    if (bias) {   /* start from the broadcast bias so the GEMM adds onto it */
        dt_op_broadcast_rows(out, bias, N, OC);
        beta = 1.0f;
    }
    /* out[N, OC] (+)= inp[N, IC] @ w[OC, IC]^T */
    dt_op_gemm(0, 1, N, OC, IC, 1.0f, inp, IC, w, IC, beta, out, OC);
}

void dt_op_linear_t_backward(float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int64_t N, int64_t IC, int64_t OC,
                             int accumulate_dinp) {
    /* dinp [N, IC] or NULL, dw [OC, IC], dbias [OC] or NULL, dout [N, OC], inp [N, IC],
     * w [OC, IC] */
    if (dinp)  /* dinp[N, IC] (+)= dout[N, OC] @ w[OC, IC] */
        dt_op_gemm(0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, accumulate_dinp ? 1.0f : 0.0f, dinp,
                   IC);
    /* dw[OC, IC] += dout[N, OC]^T @ inp[N, IC] (NULL: a frozen weight, none) */
    if (dw) dt_op_gemm(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
    if (dbias) dt_op_bias_backward(dbias, dout, N, OC);   /* column bands: deterministic */
}

/* ----------------------------------------------------------------------------
 * RMSNorm over strided groups: group (n, h) is the D elements at n*stride + h*D */

void dt_op_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int64_t N,
                           int64_t nh, int64_t D, int64_t stride, float eps) {
    /* out, inp [N, stride] (groups [N, nh, D] inside), rstd [N, nh], w [D] */
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < nh; h++) {
            const float *x = inp + n * stride + h * D;   /* [D] */
            float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
            for (int64_t d = 0; d < D; d++) ss += x[d] * x[d];
            float r = 1.0f / sqrtf(ss / (float)D + eps);
            float *o = out + n * stride + h * D;         /* [D]; may be x */
#pragma omp simd
            for (int64_t d = 0; d < D; d++) o[d] = dt_rms_out(x[d], r, w[d]);
            rstd[n * nh + h] = r;
        }
}

/* dw [D] += sum over rows n, then groups h, in that order, of dout * x * rstd:
 * one band of DT_COL_BAND columns per task (the scheme of layernorm's dw). */
static void rmsnorm_backward_dw(float *dw, const float *dout, const float *inp,
                                const float *rstd, int64_t N, int64_t nh, int64_t D,
                                int64_t stride) {
    /* dw [D], dout, inp [N, stride] (groups [N, nh, D] inside), rstd [N, nh] */
    int64_t nband = (D + DT_COL_BAND - 1) / DT_COL_BAND;
#pragma omp parallel for schedule(static)
    for (int64_t band = 0; band < nband; band++) {
        int64_t c0 = band * DT_COL_BAND;
        int64_t c1 = c0 + DT_COL_BAND < D ? c0 + DT_COL_BAND : D;
        float acc[DT_COL_BAND] = {0};   /* [c1 - c0] used */
        for (int64_t n = 0; n < N; n++)
            for (int64_t h = 0; h < nh; h++) {
                const float *x = inp + n * stride + h * D;    /* [D] */
                const float *d = dout + n * stride + h * D;   /* [D] */
                float r = rstd[n * nh + h];
#pragma omp simd
                for (int64_t c = c0; c < c1; c++) acc[c - c0] += d[c] * (x[c] * r);
            }
        for (int64_t c = c0; c < c1; c++) dw[c] += acc[c - c0];
    }
}

/* dinp (=, or += when accumulate) per group: rstd * (dout*w - x * rstd^2 * mean(dout*w*x)) */
static void rmsnorm_backward_dinp(float *dinp, const float *dout, const float *inp,
                                  const float *w, const float *rstd, int64_t N, int64_t nh,
                                  int64_t D, int64_t stride, int accumulate) {
    /* dinp, dout, inp [N, stride] (groups [N, nh, D] inside), w [D], rstd [N, nh] */
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < nh; h++) {
            const float *x = inp + n * stride + h * D;    /* [D] */
            const float *d = dout + n * stride + h * D;   /* [D] */
            float *di = dinp + n * stride + h * D;        /* [D]; may be d when writing */
            float r = rstd[n * nh + h];
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t c = 0; c < D; c++) s += d[c] * w[c] * x[c];
            s /= (float)D;
            if (accumulate) {
#pragma omp simd
                for (int64_t c = 0; c < D; c++) di[c] += dt_rms_dinp(x[c], r, w[c], d[c], s);
            } else {
#pragma omp simd
                for (int64_t c = 0; c < D; c++) di[c] = dt_rms_dinp(x[c], r, w[c], d[c], s);
            }
        }
}

void dt_op_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                            const float *w, const float *rstd, int64_t N, int64_t nh, int64_t D,
                            int64_t stride, int accumulate_dinp) {
    /* dw first: it reads dout, which an in-place dinp (dinp == dout) overwrites */
    if (dw) rmsnorm_backward_dw(dw, dout, inp, rstd, N, nh, D, stride);   /* NULL: a frozen weight */
    rmsnorm_backward_dinp(dinp, dout, inp, w, rstd, N, nh, D, stride, accumulate_dinp);
}

/* ----------------------------------------------------------------------------
 * RoPE, rotate-half convention (HF apply_rotary_pos_emb): pairs (i, i + D/2) */

/* Rotates the first nh heads of every row of x in place by sign * angle. */
static void rope_rotate(float *x, const float *cos_tab, const float *sin_tab, int64_t B,
                        int64_t T, int64_t nh, int64_t D, int64_t stride, float sign) {
    /* x [B, T, stride] (heads [B, T, nh, D] inside), cos_tab, sin_tab [T, D/2] */
    int64_t half = D / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < B * T; n++)
        for (int64_t h = 0; h < nh; h++) {
            const float *c = cos_tab + (n % T) * half;   /* [D/2] at position t = n % T */
            const float *s = sin_tab + (n % T) * half;   /* [D/2] */
            float *x1 = x + n * stride + h * D;          /* [D/2] first half of the head */
            float *x2 = x1 + half;                       /* [D/2] second half */
#pragma omp simd
            for (int64_t i = 0; i < half; i++) {
                float a = x1[i], b = x2[i], si = sign * s[i];
                x1[i] = a * c[i] - b * si;
                x2[i] = b * c[i] + a * si;
            }
        }
}

void dt_op_rope_forward(float *x, const float *cos_tab, const float *sin_tab, int64_t B,
                        int64_t T, int64_t nh, int64_t D, int64_t stride) {
    /* x [B, T, stride], cos_tab, sin_tab [T, D/2] */
    rope_rotate(x, cos_tab, sin_tab, B, T, nh, D, stride, DT_ROPE_FORWARD);
}

void dt_op_rope_backward(float *dx, const float *cos_tab, const float *sin_tab, int64_t B,
                         int64_t T, int64_t nh, int64_t D, int64_t stride) {
    /* dx [B, T, stride], cos_tab, sin_tab [T, D/2]. The rotation is orthogonal: its
     * transpose (the gradient map) is its inverse. */
    rope_rotate(dx, cos_tab, sin_tab, B, T, nh, D, stride, DT_ROPE_INVERSE);
}

/* ----------------------------------------------------------------------------
 * SwiGLU on gu [N, 2F] = gate | up */

void dt_op_swiglu_forward(float *out, const float *gu, int64_t N, int64_t F) {
    /* out [N, F], gu [N, 2F] */
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *g = gu + n * 2 * F;   /* [F] gate */
        const float *u = g + F;            /* [F] up */
        float *o = out + n * F;            /* [F] */
#pragma omp simd
        for (int64_t f = 0; f < F; f++) o[f] = dt_swiglu(g[f], u[f]);
    }
}

void dt_op_swiglu_backward(float *dgu, const float *dout, const float *gu, int64_t N, int64_t F) {
    /* dgu [N, 2F], dout [N, F], gu [N, 2F] */
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *g = gu + n * 2 * F;   /* [F] gate */
        const float *u = g + F;            /* [F] up */
        const float *d = dout + n * F;     /* [F] */
        float *dg = dgu + n * 2 * F;       /* [F] d gate */
        float *du = dg + F;                /* [F] d up */
#pragma omp simd
        for (int64_t f = 0; f < F; f++) {
            float gv = g[f], uv = u[f], dv = d[f];   /* read before writing: dgu may be gu */
            dg[f] = dt_swiglu_dgate(gv, uv, dv);
            du[f] = dt_swiglu_dup(gv, dv);
        }
    }
}
