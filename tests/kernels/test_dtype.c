/* test_dtype.c — bf16 / fp16 conversions: exact values, round-to-nearest-even
 * ties, overflow, subnormals, NaN, every 16-bit pattern round-tripping, and the
 * bulk (AVX-512) paths agreeing bit for bit with the scalar ones. */
#include <float.h>
#include <stdint.h>

#include "dt_dtype.h"
#include "dt_test.h"

static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }

int main(void) {
    /* exact values */
    CHECK_EQ_I64(dt_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_I64(dt_f32_to_bf16(-2.0f), 0xc000);
    CHECK_EQ_I64(dt_f32_to_fp16(1.0f), 0x3c00);
    CHECK_EQ_I64(dt_f32_to_fp16(-2.0f), 0xc000);
    CHECK_EQ_I64(dt_f32_to_fp16(65504.0f), 0x7bff);          /* fp16 max */
    CHECK(dt_fp16_to_f32(0x0001) == 5.9604644775390625e-8f);  /* 2^-24, smallest subnormal */
    CHECK(dt_fp16_to_f32(0x0400) == 6.103515625e-5f);         /* 2^-14, smallest normal */
    CHECK(dt_bf16_to_f32(0x3f80) == 1.0f);

    /* ties to even. bf16 near 1: spacing 2^-7. 1 + 2^-8 is a tie -> 1 (even);
     * 1 + 3*2^-8 is a tie between 1+2^-7 (odd) and 1+2^-6 (even) -> 1+2^-6 */
    CHECK_EQ_I64(dt_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    CHECK_EQ_I64(dt_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    CHECK_EQ_I64(dt_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);   /* above the tie */
    /* fp16 near 1: spacing 2^-10 */
    CHECK_EQ_I64(dt_f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
    CHECK_EQ_I64(dt_f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
    /* fp16 overflow: 65519 rounds to 65504, 65520 (the tie, max is odd) to inf */
    CHECK_EQ_I64(dt_f32_to_fp16(65519.0f), 0x7bff);
    CHECK_EQ_I64(dt_f32_to_fp16(65520.0f), 0x7c00);
    CHECK_EQ_I64(dt_f32_to_fp16(-1e30f), 0xfc00);
    CHECK_EQ_I64(dt_f32_to_bf16(FLT_MAX), 0x7f80);            /* rounds up to inf */
    /* fp16 subnormals: 2^-25 is the tie between 0 and 2^-24 -> 0; 1.5*2^-24 -> 2*2^-24 */
    CHECK_EQ_I64(dt_f32_to_fp16(0x1p-25f), 0x0000);
    CHECK_EQ_I64(dt_f32_to_fp16(0x1p-25f * 1.0001f), 0x0001);
    CHECK_EQ_I64(dt_f32_to_fp16(1.5f * 0x1p-24f), 0x0002);
    CHECK_EQ_I64(dt_f32_to_fp16(-0x1p-14f), 0x8400);
    /* NaN stays NaN, inf stays inf */
    CHECK(isnan(dt_bf16_to_f32(dt_f32_to_bf16(NAN))));
    CHECK(isnan(dt_fp16_to_f32(dt_f32_to_fp16(NAN))));
    CHECK(isinf(dt_bf16_to_f32(dt_f32_to_bf16(INFINITY))));
    CHECK(isinf(dt_fp16_to_f32(dt_f32_to_fp16(-INFINITY))));

    /* every non-NaN 16-bit pattern round-trips through fp32 exactly */
    int bad_bf = 0, bad_fp = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float fb = dt_bf16_to_f32((dt_bf16)h), ff = dt_fp16_to_f32((dt_fp16)h);
        if (!isnan(fb) && dt_f32_to_bf16(fb) != h) bad_bf++;
        if (!isnan(ff) && dt_f32_to_fp16(ff) != h) bad_fp++;
    }
    CHECK_EQ_I64(bad_bf, 0);
    CHECK_EQ_I64(bad_fp, 0);

    /* rounding is to the NEAREST representable value: compare with neighbours */
    uint32_t s = 12345;
    int not_nearest = 0;
    for (int i = 0; i < 200000; i++) {
        float x = dt_bits_f32(lcg(&s) & 0xbfffffffu);        /* finite, |x| < 2 */
        x *= 1000.0f;
        dt_fp16 h = dt_f32_to_fp16(x);
        double e = fabs((double)dt_fp16_to_f32(h) - x);
        if (e > fabs((double)dt_fp16_to_f32((dt_fp16)(h + 1)) - x) ||
            ((h & 0x7fff) && e > fabs((double)dt_fp16_to_f32((dt_fp16)(h - 1)) - x)))
            not_nearest++;
        dt_bf16 b = dt_f32_to_bf16(x);
        e = fabs((double)dt_bf16_to_f32(b) - x);
        if (e > fabs((double)dt_bf16_to_f32((dt_bf16)(b + 1)) - x) ||
            ((b & 0x7fff) && e > fabs((double)dt_bf16_to_f32((dt_bf16)(b - 1)) - x)))
            not_nearest++;
    }
    CHECK_EQ_I64(not_nearest, 0);

    /* bulk == scalar, bit for bit, on random data with specials and an odd tail */
    enum { N = 100003 };
    static float src[N], back[N];
    static uint16_t hb[N], hf[N];
    for (int i = 0; i < N; i++) src[i] = dt_bits_f32(lcg(&s));
    src[5] = INFINITY;
    src[6] = -0.0f;
    src[7] = 65520.0f;
    src[8] = 0x1p-25f;
    dt_bf16_from_f32(hb, src, N);
    dt_fp16_from_f32(hf, src, N);
    int mism = 0;
    for (int i = 0; i < N; i++) {
        if (isnan(src[i])) {
            mism += !isnan(dt_bf16_to_f32(hb[i])) + !isnan(dt_fp16_to_f32(hf[i]));
            continue;
        }
        mism += hb[i] != dt_f32_to_bf16(src[i]);
        mism += hf[i] != dt_f32_to_fp16(src[i]);
    }
    CHECK_EQ_I64(mism, 0);
    mism = 0;
    dt_bf16_to_f32_n(back, hb, N);
    for (int i = 0; i < N; i++) mism += dt_f32_bits(back[i]) != dt_f32_bits(dt_bf16_to_f32(hb[i]));
    dt_fp16_to_f32_n(back, hf, N);
    for (int i = 0; i < N; i++) mism += dt_f32_bits(back[i]) != dt_f32_bits(dt_fp16_to_f32(hf[i]));
    CHECK_EQ_I64(mism, 0);

    /* dt_convert / dt_round_f32 agree with the element functions */
    float r[4] = {1.0f + 0x1p-8f, 3.14159f, -7e-6f, 1e5f};
    dt_round_f32(r, DT_DTYPE_FP16, 4);
    CHECK(r[1] == dt_fp16_to_f32(dt_f32_to_fp16(3.14159f)));
    CHECK(isinf(r[3]));
    uint16_t h2[4];
    float in[4] = {0.5f, -1.25f, 2.0f, 3.0f};
    dt_convert(h2, DT_DTYPE_BF16, in, DT_DTYPE_FP32, 4);
    uint16_t h3[4];
    dt_convert(h3, DT_DTYPE_FP16, h2, DT_DTYPE_BF16, 4);
    float o[4];
    dt_convert(o, DT_DTYPE_FP32, h3, DT_DTYPE_FP16, 4);
    for (int i = 0; i < 4; i++) CHECK(o[i] == in[i]);
    TEST_MAIN_END();
}
