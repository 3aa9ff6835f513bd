/* ops_cpu.c — the CPU device backend: dt_ops.h with the CPU GEMM kernel chosen at
 * start-up (dt_gemm_cpu.h: oneDNN or OpenBLAS sgemm) for every matrix product and
 * OpenMP loops for everything else (per-element math
 * from dt_devmath.h, shared with the CUDA kernels), plus the bulk
 * 16-bit conversions of dt_dtype.h (AVX-512 when the compiler targets it).
 *
 * Determinism: every reduction has a fixed order that does not depend on the
 * number of threads (parallel loops split over independent outputs: rows for
 * row-wise ops, column bands for column sums), so a recomputed block gives
 * bitwise the same numbers as the original forward. The llama family's ops
 * (nn.Linear layout, RMSNorm, RoPE, SwiGLU, grouped-query attention) live in
 * ops_cpu_llama.c under the same rules. */
#include "dt_ops.h"

#include <math.h>
#include <string.h>

#include "dt_devmath.h"
#include "dt_dtype.h"
#include "dt_gemm_cpu.h"
#include "ops_cpu_internal.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* DT_COL_BAND (column band): ops_cpu_internal.h, shared with ops_cpu_llama.c. */
/* Arrays shorter than this are converted on one thread (thread start-up would
 * cost more than the work). */
#define DT_PAR_MIN 32768

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
    /* dw[IC, OC] += inp[N, IC]^T @ dout[N, OC] */
    dt_op_gemm(1, 0, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dw, OC);
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
    /* dw, db: column sums over rows, one band of columns per task */
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
 * attention: GPT-2's packed multi-head attention is grouped-query attention with
 * Hq = Hkv = H, D = C / H and q, k, v the three thirds of each qkv row
 * (ops_cpu_llama.c holds the one implementation). */

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

/* ----------------------------------------------------------------------------
 * bulk 16-bit conversions */

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* 16 fp32 bit patterns (u) rounded to bf16, round to nearest even, each in the low half
 * of its 32-bit lane; the vector form of dt_f32_to_bf16 */
static inline __m512i bf16_round16(__m512i u) {
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    r = _mm512_srli_epi32(r, 16);
    /* NaN inputs: keep the sign/exponent bits and set the quiet bit */
    __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000));
    __m512i qn = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_mask_mov_epi32(r, nan, qn);
}
#endif

void dt_bf16_from_f32(dt_bf16 *dst, const float *src, size_t n) {
    size_t nv = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    nv = n / 16 * 16;
#pragma omp parallel for schedule(static) if (n >= DT_PAR_MIN)
    for (size_t i = 0; i < nv; i += 16) {
        __m512i u = _mm512_loadu_si512((const void *)(src + i));
        __m512i r = bf16_round16(u);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
    }
#endif
    for (size_t i = nv; i < n; i++) dst[i] = dt_f32_to_bf16(src[i]);
}

void dt_bf16_to_f32_n(float *dst, const dt_bf16 *src, size_t n) {
    size_t nv = 0;
#if defined(__AVX512F__)
    nv = n / 16 * 16;
#pragma omp parallel for schedule(static) if (n >= DT_PAR_MIN)
    for (size_t i = 0; i < nv; i += 16) {
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512((void *)(dst + i), _mm512_slli_epi32(h, 16));
    }
#endif
    for (size_t i = nv; i < n; i++) dst[i] = dt_bf16_to_f32(src[i]);
}

void dt_fp16_from_f32(dt_fp16 *dst, const float *src, size_t n) {
    size_t nv = 0;
#if defined(__AVX512F__)
    nv = n / 16 * 16;
#pragma omp parallel for schedule(static) if (n >= DT_PAR_MIN)
    for (size_t i = 0; i < nv; i += 16) {
        __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256((__m256i *)(dst + i), h);
    }
#endif
    for (size_t i = nv; i < n; i++) dst[i] = dt_f32_to_fp16(src[i]);
}

void dt_fp16_to_f32_n(float *dst, const dt_fp16 *src, size_t n) {
    size_t nv = 0;
#if defined(__AVX512F__)
    nv = n / 16 * 16;
#pragma omp parallel for schedule(static) if (n >= DT_PAR_MIN)
    for (size_t i = 0; i < nv; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
#endif
    for (size_t i = nv; i < n; i++) dst[i] = dt_fp16_to_f32(src[i]);
}

void dt_op_store_round(void *dst, dt_dtype t, float *x, size_t n) {
    if (t == DT_DTYPE_FP32) {
        if (dst != x) memcpy(dst, x, n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    size_t nv = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    nv = n / 16 * 16;
    if (t == DT_DTYPE_BF16) {
        /* dt_bf16_from_f32's rounding, then the kept half shifted back */
#pragma omp parallel for schedule(static) if (n >= DT_PAR_MIN)
        for (size_t i = 0; i < nv; i += 16) {
            __m512i u = _mm512_loadu_si512((const void *)(x + i));
            __m512i r = bf16_round16(u);
            _mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtepi32_epi16(r));
            _mm512_storeu_si512((void *)(x + i), _mm512_slli_epi32(r, 16));
        }
    } else {
        /* dt_fp16_from_f32's VCVTPS2PH, then VCVTPH2PS */
#pragma omp parallel for schedule(static) if (n >= DT_PAR_MIN)
        for (size_t i = 0; i < nv; i += 16) {
            __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + i),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            _mm256_storeu_si256((__m256i *)(d + i), h);
            _mm512_storeu_ps(x + i, _mm512_cvtph_ps(h));
        }
    }
#else
#pragma omp parallel for schedule(static) if (n >= DT_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        d[i] = t == DT_DTYPE_BF16 ? dt_f32_to_bf16(x[i]) : dt_f32_to_fp16(x[i]);
        x[i] = t == DT_DTYPE_BF16 ? dt_bf16_to_f32(d[i]) : dt_fp16_to_f32(d[i]);
    }
    nv = n;
#endif
    for (size_t i = nv; i < n; i++) {
        d[i] = t == DT_DTYPE_BF16 ? dt_f32_to_bf16(x[i]) : dt_f32_to_fp16(x[i]);
        x[i] = t == DT_DTYPE_BF16 ? dt_bf16_to_f32(d[i]) : dt_fp16_to_f32(d[i]);
    }
}

void dt_op_accumulate_16(uint16_t *dst, dt_dtype t, const float *acc, size_t n) {
    const int bf = t == DT_DTYPE_BF16;
    size_t nv = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    nv = n / 16 * 16;
    if (bf) {
        /* widen (a shift), add, dt_bf16_from_f32's rounding */
#pragma omp parallel for schedule(static) if (n >= DT_PAR_MIN)
        for (size_t i = 0; i < nv; i += 16) {
            __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(dst + i)));
            __m512 v = _mm512_add_ps(_mm512_castsi512_ps(_mm512_slli_epi32(h, 16)), _mm512_loadu_ps(acc + i));
            __m512i r = bf16_round16(_mm512_castps_si512(v));
            _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
        }
    } else {
        /* VCVTPH2PS, add, VCVTPS2PH (round to nearest even, as dt_fp16_from_f32) */
#pragma omp parallel for schedule(static) if (n >= DT_PAR_MIN)
        for (size_t i = 0; i < nv; i += 16) {
            __m512 v = _mm512_add_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dst + i))),
                                     _mm512_loadu_ps(acc + i));
            _mm256_storeu_si256((__m256i *)(dst + i),
                                _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
#else
#pragma omp parallel for schedule(static) if (n >= DT_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = dt_add_16(dst[i], acc[i], bf);
    nv = n;
#endif
    for (size_t i = nv; i < n; i++) dst[i] = dt_add_16(dst[i], acc[i], bf);
}

void dt_convert(void *dst, dt_dtype dst_t, const void *src, dt_dtype src_t, size_t n) {
    if (dst_t == src_t) {
        memcpy(dst, src, n * (size_t)dt_dtype_size(dst_t));
        return;
    }
    if (src_t == DT_DTYPE_FP32) {
        if (dst_t == DT_DTYPE_BF16) dt_bf16_from_f32(dst, src, n);
        else dt_fp16_from_f32(dst, src, n);
        return;
    }
    if (dst_t == DT_DTYPE_FP32) {
        if (src_t == DT_DTYPE_BF16) dt_bf16_to_f32_n(dst, src, n);
        else dt_fp16_to_f32_n(dst, src, n);
        return;
    }
    /* bf16 <-> fp16: through fp32, element by element */
    const uint16_t *s = src;
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++) {
        float f = src_t == DT_DTYPE_BF16 ? dt_bf16_to_f32(s[i]) : dt_fp16_to_f32(s[i]);
        d[i] = dst_t == DT_DTYPE_BF16 ? dt_f32_to_bf16(f) : dt_f32_to_fp16(f);
    }
}

void dt_round_f32(float *x, dt_dtype t, size_t n) {
    if (t == DT_DTYPE_FP32) return;
#pragma omp parallel for schedule(static) if (n >= DT_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        x[i] = t == DT_DTYPE_BF16 ? dt_bf16_to_f32(dt_f32_to_bf16(x[i]))
                                  : dt_fp16_to_f32(dt_f32_to_fp16(x[i]));
}
