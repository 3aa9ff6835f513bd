/* attention_cpu.c — the CPU device's causal self-attention (dt_ops.h): grouped-query
 * attention (Ainslie et al. 2023) on separate q, k, v with row strides, flash (tiled
 * keys, online softmax: Dao et al. 2022, FlashAttention) and materialized, for the
 * llama family (Llama, Qwen2, Qwen3: each k / v head shared by a group of query
 * heads) and GPT-2 (Hq = Hkv = H on the thirds of a packed qkv row) alike. The key
 * tile, row block and dot product come from ops_cpu_internal.h, the per-element
 * math from dt_devmath.h, so this file stands on its own: it calls no other op file.
 *
 * Determinism (as ops_cpu.c): no reduction order depends on the thread count. The
 * forward runs query rows in parallel; the backward runs one (batch, kv head) per
 * task, which owns the k / v gradient of its kv head and the q gradients of its
 * query heads, and visits those query heads in head order. So a recomputed block is
 * bitwise the original, with any number of threads. */
#include <math.h>
#include <string.h>

#include "dt_devmath.h"
#include "dt_ops.h"
#include "ops_cpu_internal.h"

/* ----------------------------------------------------------------------------
 * attention: GPT-2's packed multi-head attention is grouped-query attention with
 * Hq = Hkv = H, D = C / H and q, k, v the three thirds of each qkv row
 * (below: the one implementation). */

void dt_op_attention_forward_flash(float *out, float *lse, const float *qkv, int64_t B,
                                   int64_t T, int64_t C, int64_t H) {
    dt_op_attention_gqa_forward_flash(out, lse, qkv, 3 * C, qkv + C, 3 * C, qkv + 2 * C, 3 * C, B, T,
                                      H, H, C / H);
}

void dt_op_attention_backward_flash(float *dqkv, const float *dout, const float *qkv,
                                    const float *out, const float *lse, int64_t B, int64_t T,
                                    int64_t C, int64_t H) {
    dt_op_attention_gqa_backward_flash(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, 3 * C, qkv + C, 3 * C,
                                       qkv + 2 * C, 3 * C, out, lse, B, T, H, H, C / H);
}

void dt_op_attention_forward_probs(float *out, float *probs, const float *qkv, int64_t B,
                                   int64_t T, int64_t C, int64_t H) {
    dt_op_attention_gqa_forward_probs(out, probs, qkv, 3 * C, qkv + C, 3 * C, qkv + 2 * C, 3 * C, B, T,
                                      H, H, C / H);
}

void dt_op_attention_backward_probs(float *dqkv, const float *dout, const float *qkv,
                                    const float *probs, int64_t B, int64_t T, int64_t C,
                                    int64_t H) {
    dt_op_attention_gqa_backward_probs(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, 3 * C, qkv + C, 3 * C,
                                       qkv + 2 * C, 3 * C, probs, B, T, H, H, C / H);
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
