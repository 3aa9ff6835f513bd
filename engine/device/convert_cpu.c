/* convert_cpu.c — the CPU device's bulk 16-bit conversions (dt_dtype.h's dt_convert,
 * dt_round_f32 and the bf16 / fp16 array conversions) and the 16-bit store-and-round
 * and accumulate ops of dt_ops.h, AVX-512 where the compiler targets it, else the
 * scalar conversions of dt_dtype.h (round to nearest even either way, bit for bit the
 * same). The GEMM kernels (gemm_cpu.c) and the ops (ops_cpu.c) both use them; this
 * file uses neither, so none of the three needs another's internals. */
#include <string.h>

#include "dt_devmath.h"
#include "dt_dtype.h"
#include "dt_ops.h"
#include "ops_cpu_internal.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

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
