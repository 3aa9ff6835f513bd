/* ops_cpu_llama.c — the CPU versions of the llama family's device ops (dt_ops.h,
 * "the llama family"; Llama, Qwen2, Qwen3):
 *   - linears with torch.nn.Linear's weight layout [out, in] (cblas_sgemm with a
 *     transposed operand, broadcast bias, column-band bias gradient);
 *   - RMSNorm (Zhang & Sennrich 2019) over strided groups of D elements (a whole
 *     row, or Qwen3's per-head q / k norm inside a packed qkv row);
 *   - rotary position embedding (Su et al. 2021, RoFormer), HF's rotate-half
 *     convention, in place;
 *   - SwiGLU (Shazeer 2020) on the packed gate | up projection;
 *   - causal grouped-query attention (Ainslie et al. 2023) on separate q, k, v
 *     with row strides (a packed q | k | v row is one case), flash (tiled keys,
 *     online softmax: Dao et al. 2022, FlashAttention) and materialized: the
 *     algorithm of GPT-2's attention in ops_cpu.c, with each k / v head shared
 *     by a group of query heads.
 * Per-element math comes from dt_devmath.h (shared with the CUDA kernels); the
 * column band and the attention key tile from ops_cpu_internal.h (shared with
 * ops_cpu.c).
 *
 * Determinism (as ops_cpu.c): no reduction order depends on the thread count.
 * Parallel loops split over independent outputs (rows, row groups, column
 * bands of a parameter gradient, attention query rows); the attention backward
 * runs one (batch, kv head) per task, which owns the k / v gradient of its kv
 * head and the q gradients of its query heads, and visits those query heads in
 * head order. So a recomputed block is bitwise the original, with any number of
 * threads. */
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
    /* dw[OC, IC] += dout[N, OC]^T @ inp[N, IC] */
    dt_op_gemm(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
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
    rmsnorm_backward_dw(dw, dout, inp, rstd, N, nh, D, stride);
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

/* ----------------------------------------------------------------------------
 * causal grouped-query attention on separate q, k, v, each with its own row stride */

/* Shapes and strides of one call, in elements. */
typedef struct {
    int64_t D;           /* head dim */
    int64_t Hq;          /* query heads */
    int64_t group;       /* query heads per kv head: Hq / Hkv */
    int64_t sq, sk, sv;  /* row strides of q, k, v (and of dq, dk, dv) */
    int64_t OW;          /* out row width: Hq D */
    float scale;         /* 1 / sqrt(D) */
} gqa_shape;

static gqa_shape gqa_shape_of(int64_t sq, int64_t sk, int64_t sv, int64_t Hq, int64_t Hkv,
                              int64_t D) {
    gqa_shape S;
    S.D = D;
    S.Hq = Hq;
    S.group = Hq / Hkv;
    S.sq = sq;
    S.sk = sk;
    S.sv = sv;
    S.OW = Hq * D;
    S.scale = 1.0f / sqrtf((float)D);
    return S;
}

/* column of query head h's kv head inside a k (or v) row */
static inline int64_t gqa_kv_col(const gqa_shape *S, int64_t h) { return h / S->group * S->D; }

/* ---- blocks of query rows against tiles of keys (ops_cpu_internal.h DT_ATT_ROWS,
 * DT_ATT_KEYS). Block rows i0 .. i0 + nr - 1 (nr <= DT_ATT_ROWS) see keys 0 .. i0 + nr - 1;
 * the key tiles start at multiples of DT_ATT_KEYS = DT_ATT_ROWS, so a block's last tile is
 * its diagonal and every row keeps at least its own key there. */

/* xt [D][DT_ATT_ROWS] = rows i0 .. i0 + nr - 1 of x (row r at x + (i0 + r) sx, [D]);
 * zero in the lanes past nr */
static void att_transpose_rows(float *xt, const float *x, int64_t sx, int64_t i0, int64_t nr, int64_t D) {
    for (int64_t r = 0; r < DT_ATT_ROWS; r++)
        for (int64_t d = 0; d < D; d++) xt[d * DT_ATT_ROWS + r] = r < nr ? x[(i0 + r) * sx + d] : 0.0f;
}

/* acc[jj][r] = (row r of xt) . y_(j0 + jj) for the keys of one tile, y_j at y + j sy [D];
 * keys at or past j1 repeat key j1 - 1 (the callers mask them). Each score vector is a
 * chain of fused multiply-adds in d order, the tile's DT_ATT_KEYS chains independent. */
static void att_dots(float acc[DT_ATT_KEYS][DT_ATT_ROWS], const float *xt, const float *y, int64_t sy,
                     int64_t j0, int64_t j1, int64_t D) {
    const float *yr[DT_ATT_KEYS];
    for (int64_t jj = 0; jj < DT_ATT_KEYS; jj++) yr[jj] = y + (j0 + jj < j1 ? j0 + jj : j1 - 1) * sy;
    memset(acc, 0, sizeof(float) * DT_ATT_KEYS * DT_ATT_ROWS);
    for (int64_t d = 0; d < D; d++) {
        const float *xd = xt + d * DT_ATT_ROWS;   /* [DT_ATT_ROWS] */
        for (int64_t jj = 0; jj < DT_ATT_KEYS; jj++) {
            const float yv = yr[jj][d];
#pragma omp simd
            for (int64_t r = 0; r < DT_ATT_ROWS; r++) acc[jj][r] += xd[r] * yv;
        }
    }
}

/* 1 when key j counts for block row r: inside the tile's keys, causal, a real row */
static inline int att_live(int64_t j, int64_t j1, int64_t i0, int64_t r, int64_t nr) {
    return j < j1 && j <= i0 + r && r < nr;
}

/* x_r[d] = x_r[d] * c_r + sum_jj w[jj][r] y_(j0 + jj)[d] for the block's rows, keys in
 * order (masked keys carry w = 0); x_r at x + (i0 + r) sx, y_j at y + j sy, [D] */
static void att_rows_axpy(float *x, int64_t sx, const float *c, const float w[DT_ATT_KEYS][DT_ATT_ROWS],
                          const float *y, int64_t sy, int64_t j0, int64_t j1, int64_t i0, int64_t nr, int64_t D) {
    const float *yr[DT_ATT_KEYS];
    for (int64_t jj = 0; jj < DT_ATT_KEYS; jj++) yr[jj] = y + (j0 + jj < j1 ? j0 + jj : j1 - 1) * sy;
    for (int64_t r = 0; r < nr; r++) {
        float *xr = x + (i0 + r) * sx;   /* [D] */
        float wr[DT_ATT_KEYS];
        for (int64_t jj = 0; jj < DT_ATT_KEYS; jj++) wr[jj] = w[jj][r];
        const float cr = c ? c[r] : 1.0f;
#pragma omp simd
        for (int64_t d = 0; d < D; d++) {
            float a = xr[d] * cr;
            for (int64_t jj = 0; jj < DT_ATT_KEYS; jj++) a += wr[jj] * yr[jj][d];
            xr[d] = a;
        }
    }
}

/* Flash forward of one block of query head h: online softmax over the key tiles
 * (running max and denominator per row, the output rescaled per tile; Dao et al. 2022).
 * out, q: this batch's rows; kh, vh: the head's key / value j at + j sk, + j sv [D]. */
static void att_forward_block(float *out, float *lse_h, const float *q, const float *kh, const float *vh,
                              int64_t h, int64_t i0, int64_t nr, const gqa_shape *S, float *qt) {
    const int64_t D = S->D, j_end = i0 + nr;
    float *o = out + h * D;   /* row i at o + i OW */
    float m[DT_ATT_ROWS], l[DT_ATT_ROWS], mnew[DT_ATT_ROWS], corr[DT_ATT_ROWS];
    float sc[DT_ATT_KEYS][DT_ATT_ROWS];   /* scores, then probabilities */
    att_transpose_rows(qt, q + h * D, S->sq, i0, nr, D);
    for (int64_t r = 0; r < DT_ATT_ROWS; r++) m[r] = -INFINITY, l[r] = 0.0f;
    for (int64_t r = 0; r < nr; r++) memset(o + (i0 + r) * S->OW, 0, (size_t)D * sizeof(float));
    for (int64_t j0 = 0; j0 < j_end; j0 += DT_ATT_KEYS) {
        const int64_t j1 = j0 + DT_ATT_KEYS < j_end ? j0 + DT_ATT_KEYS : j_end;
        att_dots(sc, qt, kh, S->sk, j0, j1, D);
        for (int64_t r = 0; r < DT_ATT_ROWS; r++) mnew[r] = m[r];
        /* rows past nr stay live (their zero queries give finite scores, so no lane's max is
         * -inf); they are never stored */
        for (int64_t jj = 0; jj < DT_ATT_KEYS; jj++) {
#pragma omp simd
            for (int64_t r = 0; r < DT_ATT_ROWS; r++) {
                float v = att_live(j0 + jj, j1, i0, r, DT_ATT_ROWS) ? sc[jj][r] * S->scale : -INFINITY;
                sc[jj][r] = v;
                mnew[r] = v > mnew[r] ? v : mnew[r];
            }
        }
#pragma omp simd
        for (int64_t r = 0; r < DT_ATT_ROWS; r++) {
            corr[r] = dt_fast_expf(m[r] - mnew[r]);   /* 0 on the first tile (m = -inf) */
            l[r] *= corr[r];
        }
        for (int64_t jj = 0; jj < DT_ATT_KEYS; jj++) {
#pragma omp simd
            for (int64_t r = 0; r < DT_ATT_ROWS; r++) {
                float p = dt_fast_expf(sc[jj][r] - mnew[r]);   /* masked: exp(-inf) = 0 */
                sc[jj][r] = p;
                l[r] += p;
            }
        }
        att_rows_axpy(o, S->OW, corr, (const float(*)[DT_ATT_ROWS])sc, vh, S->sv, j0, j1, i0, nr, D);
        for (int64_t r = 0; r < DT_ATT_ROWS; r++) m[r] = mnew[r];
    }
    for (int64_t r = 0; r < nr; r++) {
        float *orow = o + (i0 + r) * S->OW, inv = 1.0f / l[r];
        for (int64_t d = 0; d < D; d++) orow[d] *= inv;
        lse_h[i0 + r] = m[r] + logf(l[r]);
    }
}

void dt_op_attention_gqa_forward_flash(float *out, float *lse, const float *q, int64_t sq,
                                       const float *k, int64_t sk, const float *v, int64_t sv,
                                       int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    /* out [B, T, Hq D], lse [B, Hq, T], q [B, T, sq] (heads [Hq, D] inside),
     * k [B, T, sk], v [B, T, sv] (heads [Hkv, D] inside) */
    gqa_shape S = gqa_shape_of(sq, sk, sv, Hq, Hkv, D);
    const int64_t nblk = (T + DT_ATT_ROWS - 1) / DT_ATT_ROWS;
    /* blocks round-robin: the causal triangle makes later blocks longer */
#pragma omp parallel for collapse(3) schedule(static, 1)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t blk = 0; blk < nblk; blk++) {
                float qt[D * DT_ATT_ROWS];   /* [D][DT_ATT_ROWS] */
                const int64_t i0 = blk * DT_ATT_ROWS, nr = T - i0 < DT_ATT_ROWS ? T - i0 : DT_ATT_ROWS;
                att_forward_block(out + b * T * S.OW, lse + (b * Hq + h) * T, q + b * T * sq,
                                  k + b * T * sk + gqa_kv_col(&S, h), v + b * T * sv + gqa_kv_col(&S, h), h, i0,
                                  nr, &S, qt);
            }
}

/* Materialized forward of one query row i: p [T] = softmax of the causal scores
 * (0 above the diagonal), o [D] = sum_j p_j v_j. */
static void gqa_probs_row(float *o, float *p, const float *q, const float *kh, const float *vh,
                          int64_t i, int64_t T, const gqa_shape *S) {
    /* o [D], p [T], q [D], kh, vh: key / value j at kh + j sk, vh + j sv, [D] */
    float mx = -INFINITY;
    for (int64_t j = 0; j <= i; j++) {
        p[j] = dt_cpu_dot(q, kh + j * S->sk, S->D) * S->scale;
        mx = p[j] > mx ? p[j] : mx;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j <= i; j++) {
        p[j] = dt_fast_expf(p[j] - mx);
        sum += p[j];
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j <= i; j++) p[j] *= inv;
    for (int64_t j = i + 1; j < T; j++) p[j] = 0.0f;
    for (int64_t d = 0; d < S->D; d++) o[d] = 0.0f;
    for (int64_t j = 0; j <= i; j++) {
        const float *vj = vh + j * S->sv;   /* [D] */
#pragma omp simd
        for (int64_t d = 0; d < S->D; d++) o[d] += p[j] * vj[d];
    }
}

void dt_op_attention_gqa_forward_probs(float *out, float *probs, const float *q, int64_t sq,
                                       const float *k, int64_t sk, const float *v, int64_t sv,
                                       int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    /* out [B, T, Hq D], probs [B, Hq, T, T], q [B, T, sq], k [B, T, sk], v [B, T, sv] */
    gqa_shape S = gqa_shape_of(sq, sk, sv, Hq, Hkv, D);
#pragma omp parallel for collapse(3) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < T; i++)
                gqa_probs_row(out + (b * T + i) * S.OW + h * D, probs + ((b * Hq + h) * T + i) * T,
                              q + (b * T + i) * sq + h * D, k + b * T * sk + gqa_kv_col(&S, h),
                              v + b * T * sv + gqa_kv_col(&S, h), i, T, &S);
}

/* One batch's gradient pointers and inputs, as the backward of one head reads them. */
typedef struct {
    float *dq, *dk, *dv;       /* [T, sq], [T, sk], [T, sv] of this batch */
    const float *q, *k, *v;    /* [T, sq], [T, sk], [T, sv] of this batch */
    const float *dout, *out;   /* [T, Hq D] of this batch (out NULL: materialized) */
} gqa_batch;

/* Zeroes the gradient slices one (batch, kv head g) task owns: dq of its query
 * heads, dk and dv of g, at every position. */
static void gqa_zero_group_grads(const gqa_batch *bt, int64_t g, int64_t T, const gqa_shape *S) {
    int64_t q0 = g * S->group * S->D, kv = g * S->D;
    for (int64_t t = 0; t < T; t++) {
        memset(bt->dq + t * S->sq + q0, 0, (size_t)(S->group * S->D) * sizeof(float));
        memset(bt->dk + t * S->sk + kv, 0, (size_t)S->D * sizeof(float));
        memset(bt->dv + t * S->sv + kv, 0, (size_t)S->D * sizeof(float));
    }
}

/* Backward of one block of query head h, ADDED into its dq and its kv head's dk, dv.
 * Given p_ij (recomputed from lse, or read from probs):
 *   dv_j += p_ij dout_i;  dp_ij = dout_i . v_j;  ds_ij = p_ij (dp_ij - D_i)
 *   dq_i += scale ds_ij k_j;  dk_j += scale ds_ij q_i
 * with D_i = sum_j p_ij dp_ij = dout_i . out_i (flash) or summed directly
 * (materialized). Tiles in key order; dq_i gets its keys in order, dk_j and dv_j their
 * rows in order (blocks in order, rows in order inside a block). */
static void att_backward_block(const gqa_batch *bt, const float *lse_h, const float *probs_h, int64_t h,
                               int64_t i0, int64_t nr, int64_t T, const gqa_shape *S, float *qt, float *dt) {
    /* lse_h [T] (flash, else NULL), probs_h [T, T] (materialized, else NULL) */
    const int64_t D = S->D, kvc = gqa_kv_col(S, h), j_end = i0 + nr;
    const float *kh = bt->k + kvc, *vh = bt->v + kvc;   /* key / value j: + j sk, + j sv */
    float *dkh = bt->dk + kvc, *dvh = bt->dv + kvc;     /* likewise */
    const float *qh = bt->q + h * D, *douth = bt->dout + h * D;   /* row i: + i sq, + i OW */
    float li[DT_ATT_ROWS], Di[DT_ATT_ROWS];
    float p[DT_ATT_KEYS][DT_ATT_ROWS], ds[DT_ATT_KEYS][DT_ATT_ROWS];
    att_transpose_rows(qt, qh, S->sq, i0, nr, D);
    att_transpose_rows(dt, douth, S->OW, i0, nr, D);
    for (int64_t r = 0; r < DT_ATT_ROWS; r++) {
        const int64_t i = i0 + r;
        const float *dout_i = douth + i * S->OW;   /* [D] */
        li[r] = r < nr && lse_h ? lse_h[i] : 0.0f;
        Di[r] = 0.0f;
        if (r >= nr) continue;
        if (bt->out) {
            Di[r] = dt_cpu_dot(dout_i, bt->out + i * S->OW + h * D, D);
        } else {   /* materialized: D_i = sum_j p_ij dp_ij */
            for (int64_t j = 0; j <= i; j++) Di[r] += probs_h[i * T + j] * dt_cpu_dot(dout_i, vh + j * S->sv, D);
        }
    }
    for (int64_t j0 = 0; j0 < j_end; j0 += DT_ATT_KEYS) {
        const int64_t j1 = j0 + DT_ATT_KEYS < j_end ? j0 + DT_ATT_KEYS : j_end;
        if (!probs_h) att_dots(p, qt, kh, S->sk, j0, j1, D);
        att_dots(ds, dt, vh, S->sv, j0, j1, D);   /* dp */
        for (int64_t jj = 0; jj < DT_ATT_KEYS; jj++) {
            const int64_t j = j0 + jj;
            if (probs_h)
                for (int64_t r = 0; r < DT_ATT_ROWS; r++)
                    p[jj][r] = att_live(j, j1, i0, r, nr) ? probs_h[(i0 + r) * T + j] : 0.0f;
            else
#pragma omp simd
                for (int64_t r = 0; r < DT_ATT_ROWS; r++)
                    p[jj][r] = att_live(j, j1, i0, r, nr) ? dt_fast_expf(p[jj][r] * S->scale - li[r]) : 0.0f;
#pragma omp simd
            for (int64_t r = 0; r < DT_ATT_ROWS; r++) ds[jj][r] = p[jj][r] * (ds[jj][r] - Di[r]) * S->scale;
        }
        att_rows_axpy(bt->dq + h * D, S->sq, NULL, (const float(*)[DT_ATT_ROWS])ds, kh, S->sk, j0, j1, i0, nr, D);
        /* the block's rows of q and dout [D]; rows past nr repeat the last (their ds and p are 0) */
        const float *qr[DT_ATT_ROWS], *dr[DT_ATT_ROWS];
        for (int64_t r = 0; r < DT_ATT_ROWS; r++) {
            const int64_t i = i0 + (r < nr ? r : nr - 1);
            qr[r] = qh + i * S->sq, dr[r] = douth + i * S->OW;
        }
        for (int64_t j = j0; j < j1; j++) {
            float *dk = dkh + j * S->sk, *dv = dvh + j * S->sv;   /* [D] */
            const int64_t jj = j - j0;
            float a[DT_ATT_ROWS], c[DT_ATT_ROWS];
            for (int64_t r = 0; r < DT_ATT_ROWS; r++) a[r] = ds[jj][r], c[r] = p[jj][r];
#pragma omp simd
            for (int64_t d = 0; d < D; d++) {
                float x = dk[d], y = dv[d];
                for (int64_t r = 0; r < DT_ATT_ROWS; r++) {
                    x += a[r] * qr[r][d];
                    y += c[r] * dr[r][d];
                }
                dk[d] = x;
                dv[d] = y;
            }
        }
    }
}

/* One task per (batch b, kv head g): zero what it owns, then its query heads in order. */
static void gqa_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                         const float *k, const float *v, const float *out, const float *lse,
                         const float *probs, int64_t B, int64_t T, const gqa_shape *S) {
    /* dq, q [B, T, sq]; dk, k [B, T, sk]; dv, v [B, T, sv]; dout, out [B, T, Hq D] (out
     * NULL: materialized); lse [B, Hq, T] (flash, else NULL); probs [B, Hq, T, T]
     * (materialized, else NULL) */
    int64_t Hkv = S->Hq / S->group;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t g = 0; g < Hkv; g++) {
            gqa_batch bt = {
                .dq = dq + b * T * S->sq, .dk = dk + b * T * S->sk, .dv = dv + b * T * S->sv,
                .q = q + b * T * S->sq, .k = k + b * T * S->sk, .v = v + b * T * S->sv,
                .dout = dout + b * T * S->OW, .out = out ? out + b * T * S->OW : NULL,
            };
            float qt[S->D * DT_ATT_ROWS], dt[S->D * DT_ATT_ROWS];   /* [D][DT_ATT_ROWS] each */
            gqa_zero_group_grads(&bt, g, T, S);
            for (int64_t h = g * S->group; h < (g + 1) * S->group; h++)
                for (int64_t i0 = 0; i0 < T; i0 += DT_ATT_ROWS)
                    att_backward_block(&bt, lse ? lse + (b * S->Hq + h) * T : NULL,
                                       probs ? probs + (b * S->Hq + h) * T * T : NULL, h, i0,
                                       T - i0 < DT_ATT_ROWS ? T - i0 : DT_ATT_ROWS, T, S, qt, dt);
        }
}

void dt_op_attention_gqa_backward_flash(float *dq, float *dk, float *dv, const float *dout,
                                        const float *q, int64_t sq, const float *k, int64_t sk,
                                        const float *v, int64_t sv, const float *out,
                                        const float *lse, int64_t B, int64_t T, int64_t Hq,
                                        int64_t Hkv, int64_t D) {
    gqa_shape S = gqa_shape_of(sq, sk, sv, Hq, Hkv, D);
    gqa_backward(dq, dk, dv, dout, q, k, v, out, lse, NULL, B, T, &S);
}

void dt_op_attention_gqa_backward_probs(float *dq, float *dk, float *dv, const float *dout,
                                        const float *q, int64_t sq, const float *k, int64_t sk,
                                        const float *v, int64_t sv, const float *probs, int64_t B,
                                        int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    gqa_shape S = gqa_shape_of(sq, sk, sv, Hq, Hkv, D);
    gqa_backward(dq, dk, dv, dout, q, k, v, NULL, NULL, probs, B, T, &S);
}
