/* dt_devmath.h — per-element math shared by the CPU backend (ops_cpu.c,
 * device_cpu.c) and the CUDA kernels (engine/cuda/kernels.cu). Everything here
 * is static inline, free of libc except <math.h> functions CUDA also provides
 * on the device (fabsf, sqrtf), and marked DT_DTYPE_HD so nvcc compiles a
 * __host__ __device__ copy. The CPU tests therefore exercise exactly the
 * formulas the GPU runs (tests/gpu/test_devmath.c checks them against
 * independent libm formulas on the CPU).
 *
 * Units: plain fp32 values; no array arguments except the typed load/store
 * helpers, which index ELEMENTS. */
#ifndef DT_DEVMATH_H
#define DT_DEVMATH_H

#include <math.h>
#include <stdint.h>

#include "dt_dtype.h"

/* `omp declare simd` lets the CPU loops vectorise calls; meaningless to nvcc. */
#if defined(_OPENMP) && !defined(__CUDACC__)
#define DT_SIMD_FN _Pragma("omp declare simd")
#else
#define DT_SIMD_FN
#endif

/* ----------------------------------------------------------------------------
 * fast exp: exp(x) = 2^n * e^r, n = round(x / ln2), |r| <= ln2/2, e^r by its
 * Taylor series to degree 7 (truncation error < r^8/8! ~ 1.4e-9 relative, below
 * fp32's 6e-8 epsilon). Branch-free so `omp simd` vectorises it; libm's expf is
 * not vectorised without -ffast-math. */
#define DT_LN2_HI 0.693145751953125f     /* ln 2 split in two for exact r (Cody–Waite) */
#define DT_LN2_LO 1.428606765330187e-06f
#define DT_LOG2E 1.4426950408889634f
#define DT_EXP_MAX 88.0f                  /* e^88 < FLT_MAX = 3.4e38 */
#define DT_EXP_MIN -87.0f                 /* e^-87 > FLT_MIN = 1.18e-38 (normal) */
/* Adding then subtracting 1.5 * 2^23 rounds a float of magnitude < 2^22 to the
 * nearest integer in the FPU's round-to-nearest mode, without a libm call
 * (gcc will not inline floorf unless -fno-trapping-math). */
#define DT_ROUND_MAGIC 12582912.0f

DT_SIMD_FN
static inline DT_DTYPE_HD float dt_fast_expf(float x) {
    x = x > DT_EXP_MAX ? DT_EXP_MAX : x;
    int under = x < DT_EXP_MIN;
    x = x < DT_EXP_MIN ? DT_EXP_MIN : x;
    float fn = (x * DT_LOG2E + DT_ROUND_MAGIC) - DT_ROUND_MAGIC;
    float r = x - fn * DT_LN2_HI;
    r = r - fn * DT_LN2_LO;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t n = (int32_t)fn;
    float scale = dt_bits_f32((uint32_t)(n + 127) << 23);
    return under ? 0.0f : p * scale;
}

/* tanh(u) = sign(u) (1 - 2 / (e^{2|u|} + 1)); absolute error ~1e-7, which is what
 * GELU needs (it uses 1 + tanh). */
DT_SIMD_FN
static inline DT_DTYPE_HD float dt_fast_tanhf(float u) {
    float a = fabsf(u);
    float e = dt_fast_expf(2.0f * a);
    float t = 1.0f - 2.0f / (e + 1.0f);
    return u < 0 ? -t : t;
}

/* ----------------------------------------------------------------------------
 * GELU (tanh approximation). sqrt(2/pi) and 0.044715: Hendrycks & Gimpel 2016,
 * eq. for the tanh approximation; GPT-2's gelu_new. */
#define DT_GELU_S 0.7978845608028654f   /* sqrt(2 / pi) */
#define DT_GELU_C 0.044715f

DT_SIMD_FN
static inline DT_DTYPE_HD float dt_gelu(float x) {
    float t = dt_fast_tanhf(DT_GELU_S * (x + DT_GELU_C * x * x * x));
    return 0.5f * x * (1.0f + t);
}

/* d gelu / dx at x */
DT_SIMD_FN
static inline DT_DTYPE_HD float dt_gelu_grad(float x) {
    float t = dt_fast_tanhf(DT_GELU_S * (x + DT_GELU_C * x * x * x));
    float du = DT_GELU_S * (1.0f + 3.0f * DT_GELU_C * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

/* ----------------------------------------------------------------------------
 * LayerNorm, per element: xhat = (x - mean) * rstd, out = xhat * w + b.
 * Backward (per row sums s1 = mean(dout*w), s2 = mean(dout*w*xhat) given):
 *   dinp = rstd * (dout*w - s1 - xhat*s2) */
static inline DT_DTYPE_HD float dt_ln_out(float x, float m, float r, float w, float b) {
    return (x - m) * r * w + b;
}
static inline DT_DTYPE_HD float dt_ln_dinp(float x, float m, float r, float w, float d, float s1,
                                           float s2) {
    float xhat = (x - m) * r;
    return r * (d * w - s1 - xhat * s2);
}

/* ----------------------------------------------------------------------------
 * RMSNorm (Zhang & Sennrich 2019; HF LlamaRMSNorm), per element: out = x * rstd * w,
 * rstd = 1 / sqrt(mean(x^2) + eps). Backward (per row sum s = mean(dout*w*x) given):
 *   dinp = rstd * (dout*w - x * rstd^2 * s) */
static inline DT_DTYPE_HD float dt_rms_out(float x, float r, float w) { return x * r * w; }
static inline DT_DTYPE_HD float dt_rms_dinp(float x, float r, float w, float d, float s) {
    return r * (d * w - x * r * r * s);
}

/* SiLU (Elfwing et al. 2018; torch.nn.functional.silu) and SwiGLU (Shazeer 2020,
 * HF LlamaMLP: down(silu(gate(x)) * up(x))). silu(g) = g * sigmoid(g);
 * d silu / dg = sigmoid(g) * (1 + g * (1 - sigmoid(g))). */
DT_SIMD_FN
static inline DT_DTYPE_HD float dt_sigmoid(float x) { return 1.0f / (1.0f + dt_fast_expf(-x)); }
DT_SIMD_FN
static inline DT_DTYPE_HD float dt_swiglu(float gate, float up) { return gate * dt_sigmoid(gate) * up; }
/* d out / d gate and d out / d up of dt_swiglu, times dout */
DT_SIMD_FN
static inline DT_DTYPE_HD float dt_swiglu_dgate(float gate, float up, float dout) {
    float s = dt_sigmoid(gate);
    return dout * up * s * (1.0f + gate * (1.0f - s));
}
DT_SIMD_FN
static inline DT_DTYPE_HD float dt_swiglu_dup(float gate, float dout) {
    return dout * gate * dt_sigmoid(gate);
}

/* A target that carries no loss (an SFT prompt token, padding): its row's loss
 * and logit gradients are 0. The value of torch.nn.CrossEntropyLoss's default
 * ignore_index, which Hugging Face labels use for the same purpose. */
#define DT_IGNORE_INDEX (-100)

/* cross-entropy backward, per logit: dloss * softmax(z)_v (target subtracts dloss) */
static inline DT_DTYPE_HD float dt_ce_dlogit(float z, float lse, float dloss) {
    return dloss * dt_fast_expf(z - lse);
}

/* 1 if the fp32 bit pattern is inf or NaN (exponent all ones) */
static inline DT_DTYPE_HD int dt_nonfinite_f32(float x) {
    return (dt_f32_bits(x) & 0x7f800000u) == 0x7f800000u;
}
/* 16-bit inf / NaN: exponent all ones (bf16 0x7f80, fp16 0x7c00) */
static inline DT_DTYPE_HD int dt_nonfinite_16(uint16_t h, int is_bf16) {
    uint16_t mask = is_bf16 ? 0x7f80u : 0x7c00u;
    return (h & mask) == mask;
}

/* ----------------------------------------------------------------------------
 * typed element load / store (element index i of an array of dtype t) */
static inline DT_DTYPE_HD float dt_load(const void *p, dt_dtype t, size_t i) {
    if (t == DT_DTYPE_FP32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == DT_DTYPE_BF16 ? dt_bf16_to_f32(h) : dt_fp16_to_f32(h);
}
static inline DT_DTYPE_HD void dt_store(void *p, dt_dtype t, size_t i, float v) {
    if (t == DT_DTYPE_FP32) ((float *)p)[i] = v;
    else if (t == DT_DTYPE_BF16) ((uint16_t *)p)[i] = dt_f32_to_bf16(v);
    else ((uint16_t *)p)[i] = dt_f32_to_fp16(v);
}
/* 16-bit accumulate with one rounding: dst = round(dst + acc) */
static inline DT_DTYPE_HD uint16_t dt_add_16(uint16_t dst, float acc, int is_bf16) {
    float v = (is_bf16 ? dt_bf16_to_f32(dst) : dt_fp16_to_f32(dst)) + acc;
    return is_bf16 ? dt_f32_to_bf16(v) : dt_f32_to_fp16(v);
}

/* ----------------------------------------------------------------------------
 * AdamW, one element (torch.optim.AdamW / DeepSpeed adam_w_mode semantics, as
 * engine/model/optim.c): the scalars are computed once per step on the host in fp32. */
typedef struct dt_adamw_scalars {
    float b1, b2, eps, lr;
    float grad_mul;      /* 1 / (loss_scale * clip) */
    float bc1, bc2;      /* 1 - beta^t bias corrections */
    float shrink;        /* 1 - lr * weight_decay (1 without decay) */
} dt_adamw_scalars;

/* Updates m, v in place and returns the new parameter value from p. */
static inline DT_DTYPE_HD float dt_adamw_elem(float p, float g, float *m, float *v,
                                              const dt_adamw_scalars *s) {
    g = g * s->grad_mul;
    float mm = s->b1 * *m + (1.0f - s->b1) * g;
    float vv = s->b2 * *v + (1.0f - s->b2) * g * g;
    *m = mm;
    *v = vv;
    return p * s->shrink - s->lr * (mm / s->bc1) / (sqrtf(vv / s->bc2) + s->eps);
}

/* Chunk (elements) of the deterministic sum of squares: each chunk is summed
 * in double in index order, chunks are added in order (any thread count, CPU or
 * GPU, gives the same double). */
#define DT_SUMSQ_CHUNK 4096

/* ----------------------------------------------------------------------------
 * counter-based random numbers (the init's draws, LoRA's dropout masks): splitmix64
 * (Steele, Lea, Flood 2014) at `counter` of the stream seeded with seed, and a uniform in
 * (0, 1) from its top 53 bits (never 0), so any element is drawn alone, on either device. */
#define DT_SPLITMIX_GAMMA 0x9e3779b97f4a7c15ULL
#define DT_TWO_POW_53 9007199254740992.0
DT_DTYPE_HD static inline uint64_t dt_splitmix64_at(uint64_t seed, uint64_t counter) {
    uint64_t z = seed + counter * DT_SPLITMIX_GAMMA;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
DT_DTYPE_HD static inline double dt_uniform01_at(uint64_t seed, uint64_t counter) {
    return ((double)(dt_splitmix64_at(seed, counter) >> 11) + 0.5) / DT_TWO_POW_53;
}
/* Element e of an inverted dropout (torch nn.Dropout: kept with probability 1 - p, scaled by
 * inv = float(1 / (1 - p))) whose mask is the uniform at counter e + 1 of stream >= p. */
DT_DTYPE_HD static inline float dt_dropout_at(uint64_t stream, uint64_t e, double p, float inv, float x) {
    return dt_uniform01_at(stream, e + 1) >= p ? x * inv : 0.0f;
}

#endif
