/* dt_dtype.h — 16-bit floating-point storage types and their conversion to and
 * from fp32.
 *
 *   bf16: 1 sign, 8 exponent, 7 mantissa bits = the top half of an IEEE fp32.
 *   fp16: IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits; max 65504).
 *
 * fp32 -> 16-bit rounds to nearest, ties to even (IEEE 754 default rounding);
 * NaN stays NaN (quiet), overflow becomes +-inf (fp16: |x| >= 65520).
 * The scalar helpers are static inline and free of libc so a CUDA backend can
 * include them (DT_DTYPE_HD adds __host__ __device__ there). The bulk helpers
 * (implemented in ops_cpu.c, AVX-512 where the compiler targets it) convert
 * arrays; counts are in ELEMENTS. */
#ifndef DT_DTYPE_H
#define DT_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "dt_precision.h"

#ifdef __CUDACC__
#define DT_DTYPE_HD __host__ __device__
#else
#define DT_DTYPE_HD
#endif

typedef uint16_t dt_bf16;   /* raw bits */
typedef uint16_t dt_fp16;   /* raw bits */

static inline DT_DTYPE_HD uint32_t dt_f32_bits(float f) {
    union { float f; uint32_t u; } v;
    v.f = f;
    return v.u;
}

static inline DT_DTYPE_HD float dt_bits_f32(uint32_t u) {
    union { float f; uint32_t u; } v;
    v.u = u;
    return v.f;
}

static inline DT_DTYPE_HD float dt_bf16_to_f32(dt_bf16 h) { return dt_bits_f32((uint32_t)h << 16); }

static inline DT_DTYPE_HD dt_bf16 dt_f32_to_bf16(float f) {
    uint32_t u = dt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (dt_bf16)((u >> 16) | 0x0040u); /* quiet NaN */
    /* round to nearest even: add 0x7fff plus the lowest kept bit, then truncate */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (dt_bf16)(u >> 16);
}

static inline DT_DTYPE_HD float dt_fp16_to_f32(dt_fp16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) return dt_bits_f32(sign | 0x7f800000u | (man << 13));   /* inf / NaN */
    if (exp == 0) {
        if (man == 0) return dt_bits_f32(sign);                                 /* +-0 */
        /* subnormal: man * 2^-24, exact in fp32 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return dt_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));            /* 127 - 15 = 112 */
}

static inline DT_DTYPE_HD dt_fp16 dt_f32_to_fp16(float f) {
    uint32_t u = dt_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (dt_fp16)(sign | 0x7e00u);            /* NaN */
    if (a >= 0x477ff000u) return (dt_fp16)(sign | 0x7c00u);           /* >= 65520: rounds to inf */
    if (a < 0x38800000u) {
        /* result is subnormal (or zero): value / 2^-24 rounded to nearest even */
        if (a < 0x33000000u) return (dt_fp16)sign;                    /* < 2^-25: rounds to 0 */
        uint32_t e = a >> 23;                                        /* 102 .. 112 */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e;                                   /* 14 .. 24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (dt_fp16)(sign | q);
    }
    /* normal: rebias exponent (-112 << 23), round 13 dropped bits to nearest even */
    uint32_t r = a - (112u << 23);
    r += 0xfffu + ((r >> 13) & 1u);
    return (dt_fp16)(sign | (r >> 13));
}

#ifndef __CUDACC__
/* Bulk conversions (elements). src and dst must not overlap. */
void dt_bf16_from_f32(dt_bf16 *dst, const float *src, size_t n);
void dt_bf16_to_f32_n(float *dst, const dt_bf16 *src, size_t n);
void dt_fp16_from_f32(dt_fp16 *dst, const float *src, size_t n);
void dt_fp16_to_f32_n(float *dst, const dt_fp16 *src, size_t n);
/* Any dtype to any dtype (n elements); fp32 -> fp32 is a copy. */
void dt_convert(void *dst, dt_dtype dst_t, const void *src, dt_dtype src_t, size_t n);
/* Rounds an fp32 array in place to the values dtype t can hold (no-op for fp32). */
void dt_round_f32(float *x, dt_dtype t, size_t n);
#endif

#endif
