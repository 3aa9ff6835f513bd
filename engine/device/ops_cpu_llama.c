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

/* Flash forward of one query row i: keys 0..i in tiles of DT_ATT_TILE with an
 * online softmax (running max and denominator, accumulator rescaled per tile).
 * The output row is the accumulator. Returns lse = max + log(denominator). */
static float gqa_flash_row(float *o, const float *q, const float *kh, const float *vh, int64_t i,
                           const gqa_shape *S) {
    /* o [D] (out slice), q [D] (query i), kh, vh: key / value j at kh + j sk, vh + j sv, [D] */
    float s[DT_ATT_TILE];   /* scores of one tile */
    for (int64_t d = 0; d < S->D; d++) o[d] = 0.0f;
    float mx = -INFINITY, l = 0.0f;
    for (int64_t j0 = 0; j0 <= i; j0 += DT_ATT_TILE) {
        int64_t j1 = j0 + DT_ATT_TILE <= i + 1 ? j0 + DT_ATT_TILE : i + 1;
        float tmax = -INFINITY;
        for (int64_t j = j0; j < j1; j++) {
            float v = dt_cpu_dot(q, kh + j * S->sk, S->D) * S->scale;
            s[j - j0] = v;
            tmax = v > tmax ? v : tmax;
        }
        float mnew = tmax > mx ? tmax : mx;
        float corr = dt_fast_expf(mx - mnew);   /* 0 on the first tile */
        l *= corr;
#pragma omp simd
        for (int64_t d = 0; d < S->D; d++) o[d] *= corr;
        for (int64_t j = j0; j < j1; j++) {
            float p = dt_fast_expf(s[j - j0] - mnew);
            l += p;
            const float *v = vh + j * S->sv;   /* [D] */
#pragma omp simd
            for (int64_t d = 0; d < S->D; d++) o[d] += p * v[d];
        }
        mx = mnew;
    }
    float inv = 1.0f / l;
    for (int64_t d = 0; d < S->D; d++) o[d] *= inv;
    return mx + logf(l);
}

void dt_op_attention_gqa_forward_flash(float *out, float *lse, const float *q, int64_t sq,
                                       const float *k, int64_t sk, const float *v, int64_t sv,
                                       int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    /* out [B, T, Hq D], lse [B, Hq, T], q [B, T, sq] (heads [Hq, D] inside),
     * k [B, T, sk], v [B, T, sv] (heads [Hkv, D] inside) */
    gqa_shape S = gqa_shape_of(sq, sk, sv, Hq, Hkv, D);
#pragma omp parallel for collapse(3) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < T; i++)
                lse[(b * Hq + h) * T + i] = gqa_flash_row(
                    out + (b * T + i) * S.OW + h * D, q + (b * T + i) * sq + h * D,
                    k + b * T * sk + gqa_kv_col(&S, h), v + b * T * sv + gqa_kv_col(&S, h), i, &S);
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

/* Backward of one query head h, ADDED into its dq and its kv head's dk, dv.
 * Given p_ij (recomputed from lse, or read from probs):
 *   dv_j += p_ij dout_i;  dp_ij = dout_i . v_j;  ds_ij = p_ij (dp_ij - D_i)
 *   dq_i += scale ds_ij k_j;  dk_j += scale ds_ij q_i
 * with D_i = sum_j p_ij dp_ij = dout_i . out_i (flash) or summed directly
 * (materialized). Rows i, then keys j, in order. */
static void gqa_backward_head(const gqa_batch *bt, const float *lse_h, const float *probs_h,
                              int64_t h, int64_t T, const gqa_shape *S) {
    /* lse_h [T] (flash, else NULL), probs_h [T, T] (materialized, else NULL) */
    int64_t D = S->D, kvc = gqa_kv_col(S, h);
    const float *kh = bt->k + kvc, *vh = bt->v + kvc;   /* key / value j: + j sk, + j sv */
    float *dkh = bt->dk + kvc, *dvh = bt->dv + kvc;     /* likewise */
    float pbuf[DT_ATT_TILE], dpbuf[DT_ATT_TILE];        /* p_ij, dp_ij of one key tile */
    for (int64_t i = 0; i < T; i++) {
        const float *q = bt->q + i * S->sq + h * D;             /* [D] */
        const float *dout_i = bt->dout + i * S->OW + h * D;     /* [D] */
        float *dq = bt->dq + i * S->sq + h * D;                 /* [D] */
        const float *prow = probs_h ? probs_h + i * T : NULL;   /* [T] */
        float li = lse_h ? lse_h[i] : 0.0f;
        float Di;
        if (bt->out) {
            Di = dt_cpu_dot(dout_i, bt->out + i * S->OW + h * D, D);
        } else {   /* materialized: D_i = sum_j p_ij dp_ij */
            Di = 0.0f;
            for (int64_t j = 0; j <= i; j++)
                Di += prow[j] * dt_cpu_dot(dout_i, vh + j * S->sv, D);
        }
        for (int64_t j0 = 0; j0 <= i; j0 += DT_ATT_TILE) {
            int64_t j1 = j0 + DT_ATT_TILE <= i + 1 ? j0 + DT_ATT_TILE : i + 1;
            for (int64_t j = j0; j < j1; j++) {
                pbuf[j - j0] = prow ? prow[j]
                                    : dt_fast_expf(dt_cpu_dot(q, kh + j * S->sk, D) * S->scale -
                                                   li);
                dpbuf[j - j0] = dt_cpu_dot(dout_i, vh + j * S->sv, D);
            }
            for (int64_t j = j0; j < j1; j++) {
                float p = pbuf[j - j0];
                float ds = p * (dpbuf[j - j0] - Di) * S->scale;
                const float *kj = kh + j * S->sk;   /* [D] */
                float *dk = dkh + j * S->sk;        /* [D] */
                float *dv = dvh + j * S->sv;        /* [D] */
#pragma omp simd
                for (int64_t d = 0; d < D; d++) {
                    dq[d] += ds * kj[d];
                    dk[d] += ds * q[d];
                    dv[d] += p * dout_i[d];
                }
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
            gqa_zero_group_grads(&bt, g, T, S);
            for (int64_t h = g * S->group; h < (g + 1) * S->group; h++)
                gqa_backward_head(&bt, lse ? lse + (b * S->Hq + h) * T : NULL,
                                  probs ? probs + (b * S->Hq + h) * T * T : NULL, h, T, S);
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
