/* test_gemm_cpu.c — the CPU GEMM kernels of engine/device/dt_gemm_cpu.h.
 *
 *   - every kernel (OpenBLAS and oneDNN sgemm; oneDNN's bf16 matmul and the widened
 *     bf16 GEMM, each into an fp32 and a bf16 C) against a double-precision
 *     reference on odd shapes (M, N, K not multiples of 16), all four
 *     transpositions, leading dimensions larger than the rows, alpha and beta;
 *     bf16 inputs are bf16 values, so the reference is the exact product of what
 *     the kernel reads, and the bound is the fp32 summation bound
 *     |C - ref| <= (K + 2) 2^-24 (|alpha| sum |a b| + |beta c|), plus 2^-8 |ref|
 *     for a bf16 C (its one rounding);
 *   - small-integer inputs: every kernel bit for bit equal to the exact result;
 *   - bitwise determinism: each kernel twice on the same inputs, and the same
 *     GEMM from every thread of an OpenMP region at once (the primitive cache and
 *     per-thread scratchpads), equal bit for bit;
 *   - the choice: DT_GEMM forces it (ctest runs this binary with DT_GEMM unset,
 *     =openblas and =fp32=onednn,bf16=onednn), dt_gemm_parse's syntax and errors,
 *     and the device's gemm / gemm_ex run the chosen kernels (bit for bit).
 * OPENBLAS_CORETYPE is left as the environment sets it. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_gemm_cpu.h"
#include "dt_isaprobe.h"
#include "dt_ops.h"
#include "dt_test.h"

#define U32 (1.0 / 16777216.0)   /* fp32 unit roundoff 2^-24 */
#define U16 (1.0 / 256.0)        /* bf16 unit roundoff 2^-8 */
#define PAD 5                    /* leading dimensions exceed the rows by this */
/* bf16 test values stay above this magnitude (or are 0), so no product or
 * partial sum reaches the fp32 denormal range that VDPBF16PS flushes */
#define MIN_MAG (1.0f / 1024.0f)

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float urand(void) {   /* [-1, 1) */
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float urand_normal(void) {   /* [-1, 1), |x| >= MIN_MAG or 0 */
    float x = urand();
    return fabsf(x) < MIN_MAG ? 0.0f : x;
}

typedef struct {
    int64_t M, N, K;
} dims;

/* odd shapes around the 16 / 48-wide register blocks, plus degenerate ones */
static const dims shapes[] = {{1, 1, 1},    {1, 37, 19},   {23, 1, 45},   {17, 33, 65},
                              {61, 47, 131}, {129, 3, 257}, {150, 201, 99}, {255, 97, 513}};

static double a_at(const float *a, int ta, int64_t lda, int64_t m, int64_t k) {
    return a[ta ? k * lda + m : m * lda + k];
}

/* The exact product in double: s[m * N + n] = sum_k a b, sa = sum_k |a b|. */
static void reference(double *s, double *sa, const float *a, int ta, int64_t lda, const float *b,
                      int tb, int64_t ldb, int64_t M, int64_t N, int64_t K) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double x = 0.0, xa = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double p = a_at(a, ta, lda, m, k) * (tb ? b[n * ldb + k] : b[k * ldb + n]);
                x += p;
                xa += fabs(p);
            }
            s[m * N + n] = x;
            sa[m * N + n] = xa;
        }
}

/* Checks C (dtype ct) against the reference (s, sa); returns the worst ratio of
 * error to bound (<= 1 passes). c0: C before the call (fp32 values). The fp32 sum
 * errs by at most (K + 2) u32 (|alpha| sum |ab| + |beta c|) (Higham, "Accuracy and
 * Stability of Numerical Algorithms", 2nd ed., §3.1, for any summation order); a
 * bf16 C then rounds once: at most u16 of the fp32 value. */
static double check_ref(const void *C, dt_dtype ct, const float *c0, const double *s,
                        const double *sa, int64_t M, int64_t N, int64_t K, float alpha,
                        float beta, int64_t ldc) {
    double worst = 0.0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            size_t i = (size_t)(m * ldc + n);
            double cin = beta == 0.0f ? 0.0 : c0[i];
            double ref = alpha * s[m * N + n] + beta * cin;
            double bound =
                (double)(K + 2) * U32 * (fabs(alpha) * sa[m * N + n] + fabs(beta * cin));
            if (ct == DT_DTYPE_BF16) bound = bound * (1.0 + U16) + U16 * fabs(ref);
            bound += 1e-30;   /* an exact zero */
            double got = dt_load(C, ct, i);
            double r = fabs(got - ref) / bound;
            if (!(r <= worst)) worst = isnan(r) ? INFINITY : r;
        }
    return worst;
}

/* One kernel on one case. kind: 0 fp32, 1 bf16 -> fp32, 2 bf16 -> bf16. */
static int run_kernel(dt_gemm_kernel k, int kind, int ta, int tb, int64_t M, int64_t N, int64_t K,
                      float alpha, const void *A, int64_t lda, const void *B, int64_t ldb,
                      float beta, void *C, int64_t ldc) {
    if (kind == 0)
        return dt_gemm_cpu_f32(k, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return dt_gemm_cpu_bf16(k, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                            kind == 2 ? DT_DTYPE_BF16 : DT_DTYPE_FP32, ldc);
}

typedef struct {
    dt_gemm_kernel k;
    int kind;
    const char *name;
} kcase;

static const kcase kernels[] = {
    {DT_GEMM_OPENBLAS, 0, "openblas sgemm"},   {DT_GEMM_ONEDNN, 0, "onednn sgemm"},
    {DT_GEMM_ONEDNN, 1, "onednn bf16->fp32"},  {DT_GEMM_ONEDNN, 2, "onednn bf16->bf16"},
    {DT_GEMM_WIDEN, 1, "widen bf16->fp32"},    {DT_GEMM_WIDEN, 2, "widen bf16->bf16"},
};
#define NKERNELS (int)(sizeof kernels / sizeof kernels[0])

/* Operands of one case in fp32 (bf16 values where the kernel reads bf16) and bf16. */
typedef struct {
    float *a, *b, *c0, *c;
    uint16_t *a16, *b16, *c16;
    size_t na, nb, nc;
} operands;

static void operands_make(operands *o, int ta, int tb, int64_t M, int64_t N, int64_t K,
                          int64_t lda, int64_t ldb, int64_t ldc, int integers) {
    o->na = (size_t)((ta ? K : M) * lda);
    o->nb = (size_t)((tb ? N : K) * ldb);
    o->nc = (size_t)(M * ldc);
    o->a = malloc(o->na * sizeof(float));
    o->b = malloc(o->nb * sizeof(float));
    o->c0 = malloc(o->nc * sizeof(float));
    o->c = malloc(o->nc * sizeof(float));
    o->a16 = malloc(o->na * sizeof(uint16_t));
    o->b16 = malloc(o->nb * sizeof(uint16_t));
    o->c16 = malloc(o->nc * sizeof(uint16_t));
    if (!o->a || !o->b || !o->c0 || !o->c || !o->a16 || !o->b16 || !o->c16) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    /* integers in [-2, 2]: products and sums exact in fp32 and, K <= 63, in bf16 */
    for (size_t i = 0; i < o->na; i++) o->a[i] = integers ? (float)(i * 7 % 5) - 2.0f : urand_normal();
    for (size_t i = 0; i < o->nb; i++) o->b[i] = integers ? (float)(i * 3 % 5) - 2.0f : urand_normal();
    for (size_t i = 0; i < o->nc; i++) o->c0[i] = integers ? (float)(i % 3) - 1.0f : urand_normal();
    /* the values the bf16 kernels read, as fp32: the reference uses these */
    dt_round_f32(o->a, DT_DTYPE_BF16, o->na);
    dt_round_f32(o->b, DT_DTYPE_BF16, o->nb);
    dt_round_f32(o->c0, DT_DTYPE_BF16, o->nc);
    dt_convert(o->a16, DT_DTYPE_BF16, o->a, DT_DTYPE_FP32, o->na);
    dt_convert(o->b16, DT_DTYPE_BF16, o->b, DT_DTYPE_FP32, o->nb);
}

static void operands_free(operands *o) {
    free(o->a);
    free(o->b);
    free(o->c0);
    free(o->c);
    free(o->a16);
    free(o->b16);
    free(o->c16);
}

/* C before the call, in the kernel's C dtype; returns the C pointer */
static void *c_reset(operands *o, int kind) {
    memcpy(o->c, o->c0, o->nc * sizeof(float));
    dt_convert(o->c16, DT_DTYPE_BF16, o->c0, DT_DTYPE_FP32, o->nc);
    return kind == 2 ? (void *)o->c16 : (void *)o->c;
}

/* every kernel vs the double reference on every shape, transposition, alpha/beta */
static void test_accuracy(void) {
    const float alphas[] = {1.0f, 0.75f}, betas[] = {0.0f, 1.0f, -0.5f};
    double worst[NKERNELS] = {0};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            const int ta = t & 1, tb = t >> 1;
            const int64_t M = shapes[s].M, N = shapes[s].N, K = shapes[s].K;
            const int64_t lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
            operands o;
            operands_make(&o, ta, tb, M, N, K, lda, ldb, ldc, 0);
            double *rs = malloc((size_t)(M * N) * sizeof(double));
            double *ra = malloc((size_t)(M * N) * sizeof(double));
            reference(rs, ra, o.a, ta, lda, o.b, tb, ldb, M, N, K);
            for (int ab = 0; ab < 6; ab++) {
                float alpha = alphas[ab / 3], beta = betas[ab % 3];
                for (int k = 0; k < NKERNELS; k++) {
                    const kcase *kc = &kernels[k];
                    void *C = c_reset(&o, kc->kind);
                    int rc = run_kernel(kc->k, kc->kind, ta, tb, M, N, K, alpha,
                                        kc->kind ? (void *)o.a16 : (void *)o.a, lda,
                                        kc->kind ? (void *)o.b16 : (void *)o.b, ldb, beta, C, ldc);
                    CHECK_EQ_I64(rc, DT_OK);
                    double r = check_ref(C, kc->kind == 2 ? DT_DTYPE_BF16 : DT_DTYPE_FP32,
                                         o.c0, rs, ra, M, N, K, alpha, beta, ldc);
                    if (r > 1.0)
                        fprintf(stderr, "%s: %lldx%lldx%lld t%d%d alpha %g beta %g: error %.3g x "
                                        "the bound\n",
                                kc->name, (long long)M, (long long)N, (long long)K, ta, tb,
                                alpha, beta, r);
                    CHECK(r <= 1.0);
                    if (r > worst[k]) worst[k] = r;
                    /* the padding between rows of C is never written */
                    for (int64_t m = 0; m < M; m++)
                        for (int64_t p = N; p < ldc; p++) {
                            size_t i = (size_t)(m * ldc + p);
                            float now = kc->kind == 2 ? dt_bf16_to_f32(o.c16[i]) : o.c[i];
                            float was = kc->kind == 2 ? dt_bf16_to_f32(dt_f32_to_bf16(o.c0[i]))
                                                      : o.c0[i];
                            CHECK(memcmp(&now, &was, sizeof now) == 0);
                        }
                }
            }
            free(rs);
            free(ra);
            operands_free(&o);
        }
    for (int k = 0; k < NKERNELS; k++)
        printf("  %-20s worst error %.3f of the bound\n", kernels[k].name, worst[k]);
}

/* small integers: every kernel bit for bit equal to the exact result */
static void test_exact(void) {
    const dims ex[] = {{7, 9, 11}, {33, 17, 63}, {100, 70, 48}};
    for (size_t s = 0; s < sizeof ex / sizeof ex[0]; s++)
        for (int t = 0; t < 4; t++) {
            const int ta = t & 1, tb = t >> 1;
            const int64_t M = ex[s].M, N = ex[s].N, K = ex[s].K;
            const int64_t lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
            operands o;
            operands_make(&o, ta, tb, M, N, K, lda, ldb, ldc, 1);
            for (int k = 0; k < NKERNELS; k++) {
                const kcase *kc = &kernels[k];
                void *C = c_reset(&o, kc->kind);
                CHECK_EQ_I64(run_kernel(kc->k, kc->kind, ta, tb, M, N, K, 1.0f,
                                        kc->kind ? (void *)o.a16 : (void *)o.a, lda,
                                        kc->kind ? (void *)o.b16 : (void *)o.b, ldb, 1.0f, C, ldc),
                             DT_OK);
                int bad = 0;
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        double want = o.c0[m * ldc + n];
                        for (int64_t kk = 0; kk < K; kk++)
                            want += a_at(o.a, ta, lda, m, kk) *
                                    (tb ? o.b[n * ldb + kk] : o.b[kk * ldb + n]);
                        if (dt_load(C, kc->kind == 2 ? DT_DTYPE_BF16 : DT_DTYPE_FP32,
                                    (size_t)(m * ldc + n)) != want)
                            bad++;
                    }
                if (bad)
                    fprintf(stderr, "%s: %lldx%lldx%lld t%d%d: %d entries differ from the exact "
                                    "integer result\n",
                            kc->name, (long long)M, (long long)N, (long long)K, ta, tb, bad);
                CHECK(bad == 0);
            }
            operands_free(&o);
        }
}

/* the widen kernel makes op(B) fp32 32 MiB at a time (gemm_cpu.c DT_WIDEN_B_BYTES: 16384
 * columns at K = 512): a product over three such blocks, the last a partial one, equals
 * the exact integer result in every element and every transposition, into an fp32 C and,
 * rounded once, into a bf16 C; the padding between C's rows stays untouched */
static void test_widen_blocks(void) {
    const int64_t M = 2, N = 40000, K = 512;
    for (int t = 0; t < 4; t++) {
        const int ta = t & 1, tb = t >> 1;
        const int64_t lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
        operands o;
        operands_make(&o, ta, tb, M, N, K, lda, ldb, ldc, 1);
        for (int kind = 1; kind <= 2; kind++) {
            void *C = c_reset(&o, kind);
            CHECK_EQ_I64(run_kernel(DT_GEMM_WIDEN, kind, ta, tb, M, N, K, 1.0f, o.a16, lda, o.b16, ldb,
                                    1.0f, C, ldc),
                         DT_OK);
            const dt_dtype ct = kind == 2 ? DT_DTYPE_BF16 : DT_DTYPE_FP32;
            int bad = 0;
            for (int64_t m = 0; m < M; m++) {
                for (int64_t n = 0; n < N; n++) {
                    double want = kind == 2 ? dt_bf16_to_f32(dt_f32_to_bf16(o.c0[m * ldc + n])) : o.c0[m * ldc + n];
                    for (int64_t kk = 0; kk < K; kk++)
                        want += a_at(o.a, ta, lda, m, kk) * (tb ? o.b[n * ldb + kk] : o.b[kk * ldb + n]);
                    if (kind == 2) want = dt_bf16_to_f32(dt_f32_to_bf16((float)want));   /* |sums| < 2^24: exact in fp32 */
                    if (dt_load(C, ct, (size_t)(m * ldc + n)) != want) bad++;
                }
                for (int64_t p = N; p < ldc; p++) {
                    const size_t i = (size_t)(m * ldc + p);
                    float now = kind == 2 ? dt_bf16_to_f32(o.c16[i]) : o.c[i];
                    float was = kind == 2 ? dt_bf16_to_f32(dt_f32_to_bf16(o.c0[i])) : o.c0[i];
                    if (memcmp(&now, &was, sizeof now)) bad++;
                }
            }
            if (bad) fprintf(stderr, "widen, 3 blocks, t%d%d, kind %d: %d entries wrong\n", ta, tb, kind, bad);
            CHECK(bad == 0);
        }
        operands_free(&o);
    }
    printf("  widen over 3 blocks of op(B) (%lldx%lldx%lld): exact\n", (long long)M, (long long)N, (long long)K);
}

/* bit for bit: twice in a row, and from every thread of a parallel region */
static void test_determinism(void) {
    const int64_t M = 301, N = 517, K = 703;   /* large enough to split over threads */
    for (int t = 0; t < 3; t++) {
        const int ta = t == 2, tb = t == 1;
        const int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
        operands o;
        operands_make(&o, ta, tb, M, N, K, lda, ldb, ldc, 0);
        const size_t cbytes = o.nc * sizeof(float);
        double *rs = malloc((size_t)(M * N) * sizeof(double));
        double *ra = malloc((size_t)(M * N) * sizeof(double));
        reference(rs, ra, o.a, ta, lda, o.b, tb, ldb, M, N, K);
        for (int k = 0; k < NKERNELS; k++) {
            const kcase *kc = &kernels[k];
            const void *A = kc->kind ? (void *)o.a16 : (void *)o.a;
            const void *B = kc->kind ? (void *)o.b16 : (void *)o.b;
            float *first = malloc(cbytes), *again = malloc(cbytes);
            const int nthr = omp_get_max_threads();
            float *par = malloc(cbytes * (size_t)nthr);
            int rcs[2] = {0, 0}, prc = 0;
            for (int rep = 0; rep < 2; rep++) {
                float *dst = rep ? again : first;
                memset(dst, 0, cbytes);   /* bf16 C: the first half of the buffer */
                rcs[rep] = run_kernel(kc->k, kc->kind, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f,
                                      dst, ldc);
            }
            CHECK_EQ_I64(rcs[0], DT_OK);
            CHECK_EQ_I64(rcs[1], DT_OK);
            if (memcmp(first, again, cbytes))
                fprintf(stderr, "%s t%d%d: two runs differ\n", kc->name, ta, tb);
            CHECK(memcmp(first, again, cbytes) == 0);
            /* the same GEMM from every thread at once (each one-threaded inside) */
            memset(par, 0, cbytes * (size_t)nthr);
#pragma omp parallel num_threads(nthr) reduction(| : prc)
            {
                float *dst = par + (size_t)omp_get_thread_num() * o.nc;
                prc |= run_kernel(kc->k, kc->kind, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f,
                                  dst, ldc);
            }
            CHECK_EQ_I64(prc, DT_OK);
            for (int i = 1; i < nthr; i++) CHECK(memcmp(par, par + (size_t)i * o.nc, cbytes) == 0);
            dt_dtype ct = kc->kind == 2 ? DT_DTYPE_BF16 : DT_DTYPE_FP32;
            CHECK(check_ref(par, ct, o.c0, rs, ra, M, N, K, 1.0f, 0.0f, ldc) <= 1.0);
            free(first);
            free(again);
            free(par);
        }
        free(rs);
        free(ra);
        operands_free(&o);
    }
}

/* the choice follows DT_GEMM; the device runs the chosen kernels */
static void test_choice(void) {
    dt_error err = {0};
    int rc = dt_gemm_cpu_init(&err);
    const dt_gemm_choice *c = dt_gemm_cpu_choice();
    char desc[512];
    printf("  %s\n", dt_gemm_cpu_describe(desc, sizeof desc));
    CHECK_EQ_I64(rc, DT_OK);
    CHECK(c->bad_f32 == 0 && c->bad_bf16 == 0);   /* every kernel passed the self-check */
    CHECK(c->f32 == DT_GEMM_OPENBLAS || c->f32 == DT_GEMM_ONEDNN);
    CHECK(c->bf16 == DT_GEMM_ONEDNN || c->bf16 == DT_GEMM_WIDEN);
    const char *env = getenv("DT_GEMM");
    dt_gemm_kernel f = DT_GEMM_KERNEL_COUNT, b = DT_GEMM_KERNEL_COUNT;
    int ff = 0, fb = 0;
    CHECK_EQ_I64(dt_gemm_parse(env, &f, &b, &ff, &fb, &err), DT_OK);
    CHECK_EQ_I64(c->forced, ff || fb);
    if (ff) CHECK_EQ_I64(c->f32, f);
    if (fb) CHECK_EQ_I64(c->bf16, b);
    if (env && !strcmp(env, "openblas")) {
        CHECK_EQ_I64(c->f32, DT_GEMM_OPENBLAS);
        CHECK_EQ_I64(c->bf16, DT_GEMM_WIDEN);
        CHECK(strstr(desc, "fp32 openblas sgemm, bf16 widen") == desc);
    }
    CHECK(strstr(desc, c->forced ? "forced by DT_GEMM" : "(rule;") != NULL);
    /* the bf16 rule's probe: 0 exactly where the CPU has no AVX512-BF16, a plausible
     * ratio where it has (the instruction does 2x the FMA's FLOPs: between a tenth and
     * 4x of them); a core below the threshold without AMX widens bf16 */
    __builtin_cpu_init();
    const int has_bf16 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
    printf("  bf16 dot / fma FLOP ratio %.3f (probe again: %.3f)\n", c->bf16_dot_ratio, dt_isa_bf16_dot_vs_fma());
    if (!has_bf16) CHECK(c->bf16_dot_ratio == 0.0);
    else CHECK(c->bf16_dot_ratio > 0.1 && c->bf16_dot_ratio < 4.0);
    CHECK((strstr(desc, "bf16 dot ") != NULL) == (c->bf16_dot_ratio > 0));
    if (!fb && c->bf16_dot_ratio < DT_GEMM_BF16_DOT_MIN_RATIO && strstr(c->onednn_isa, "amx") == NULL)
        CHECK_EQ_I64(c->bf16, DT_GEMM_WIDEN);

    /* the device's gemm and gemm_ex give the chosen kernel's bits */
    const dt_device_ops *dev = dt_device_cpu();
    const int64_t M = 45, N = 77, K = 130;
    operands o;
    operands_make(&o, 0, 1, M, N, K, K, K, N, 0);
    float *want = malloc(o.nc * sizeof(float));
    uint16_t *want16 = malloc(o.nc * sizeof(uint16_t));
    memcpy(want, o.c0, o.nc * sizeof(float));
    CHECK_EQ_I64(dt_gemm_cpu_f32(c->f32, 0, 1, M, N, K, 1.0f, o.a, K, o.b, K, 1.0f, want, N), DT_OK);
    c_reset(&o, 0);
    dev->gemm(0, 1, M, N, K, 1.0f, o.a, K, o.b, K, 1.0f, o.c, N);
    CHECK(memcmp(want, o.c, o.nc * sizeof(float)) == 0);
    memcpy(want, o.c0, o.nc * sizeof(float));
    CHECK_EQ_I64(dt_gemm_cpu_bf16(c->bf16, 0, 1, M, N, K, 1.0f, o.a16, K, o.b16, K, 1.0f, want,
                                  DT_DTYPE_FP32, N),
                 DT_OK);
    c_reset(&o, 1);
    CHECK_EQ_I64(dev->gemm_ex(0, 1, M, N, K, 1.0f, o.a16, DT_DTYPE_BF16, K, o.b16, DT_DTYPE_BF16,
                              K, 1.0f, o.c, DT_DTYPE_FP32, N),
                 DT_OK);
    CHECK(memcmp(want, o.c, o.nc * sizeof(float)) == 0);
    dt_convert(want16, DT_DTYPE_BF16, o.c0, DT_DTYPE_FP32, o.nc);
    CHECK_EQ_I64(dt_gemm_cpu_bf16(c->bf16, 0, 1, M, N, K, 1.0f, o.a16, K, o.b16, K, 1.0f, want16,
                                  DT_DTYPE_BF16, N),
                 DT_OK);
    c_reset(&o, 2);
    CHECK_EQ_I64(dev->gemm_ex(0, 1, M, N, K, 1.0f, o.a16, DT_DTYPE_BF16, K, o.b16, DT_DTYPE_BF16,
                              K, 1.0f, o.c16, DT_DTYPE_BF16, N),
                 DT_OK);
    CHECK(memcmp(want16, o.c16, o.nc * sizeof(uint16_t)) == 0);
    /* mixed dtypes are still widened: fp32 A with bf16 B equals the fp32 GEMM of the
     * widened B on the chosen fp32 kernel */
    memcpy(want, o.c0, o.nc * sizeof(float));
    CHECK_EQ_I64(dt_gemm_cpu_f32(c->f32, 0, 1, M, N, K, 1.0f, o.a, K, o.b, K, 1.0f, want, N), DT_OK);
    c_reset(&o, 0);
    CHECK_EQ_I64(dev->gemm_ex(0, 1, M, N, K, 1.0f, o.a, DT_DTYPE_FP32, K, o.b16, DT_DTYPE_BF16, K,
                              1.0f, o.c, DT_DTYPE_FP32, N),
                 DT_OK);
    CHECK(memcmp(want, o.c, o.nc * sizeof(float)) == 0);
    free(want);
    free(want16);
    operands_free(&o);
}

static void test_parse(void) {
    dt_gemm_kernel f = DT_GEMM_OPENBLAS, b = DT_GEMM_WIDEN;
    int ff = 1, fb = 1;
    dt_error err = {0};
    CHECK_EQ_I64(dt_gemm_parse(NULL, &f, &b, &ff, &fb, &err), DT_OK);
    CHECK(ff == 0 && fb == 0 && f == DT_GEMM_OPENBLAS && b == DT_GEMM_WIDEN);
    CHECK_EQ_I64(dt_gemm_parse("auto", &f, &b, &ff, &fb, &err), DT_OK);
    CHECK(ff == 0 && fb == 0);
    CHECK_EQ_I64(dt_gemm_parse("onednn", &f, &b, &ff, &fb, &err), DT_OK);
    CHECK(ff && fb && f == DT_GEMM_ONEDNN && b == DT_GEMM_ONEDNN);
    CHECK_EQ_I64(dt_gemm_parse("openblas", &f, &b, &ff, &fb, &err), DT_OK);
    CHECK(ff && fb && f == DT_GEMM_OPENBLAS && b == DT_GEMM_WIDEN);
    f = DT_GEMM_ONEDNN;
    b = DT_GEMM_ONEDNN;
    CHECK_EQ_I64(dt_gemm_parse("bf16=widen", &f, &b, &ff, &fb, &err), DT_OK);
    CHECK(!ff && fb && f == DT_GEMM_ONEDNN && b == DT_GEMM_WIDEN);
    CHECK_EQ_I64(dt_gemm_parse("fp32=openblas,bf16=onednn", &f, &b, &ff, &fb, &err), DT_OK);
    CHECK(ff && fb && f == DT_GEMM_OPENBLAS && b == DT_GEMM_ONEDNN);
    const char *bad[] = {"mkl", "widen", "fp32=widen", "bf16=openblas", "fp16=onednn",
                         "fp32=onednn,", "fp32", "fp32=onednnx"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dt_error_clear(&err);
        CHECK_EQ_I64(dt_gemm_parse(bad[i], &f, &b, &ff, &fb, &err), DT_EINVAL);
        CHECK(strstr(err.msg, "DT_GEMM") != NULL);
    }
    CHECK_STR(dt_gemm_kernel_name(DT_GEMM_ONEDNN), "onednn");
    CHECK(dt_gemm_kernel_name(DT_GEMM_KERNEL_COUNT) == NULL);
    /* dtypes and kernels outside the contract */
    float x = 0.0f;
    uint16_t h = 0;
    CHECK_EQ_I64(dt_gemm_cpu_bf16(DT_GEMM_ONEDNN, 0, 0, 1, 1, 1, 1.0f, &h, 1, &h, 1, 0.0f, &h,
                                  DT_DTYPE_FP16, 1),
                 DT_EINVAL);
    CHECK_EQ_I64(dt_gemm_cpu_f32(DT_GEMM_WIDEN, 0, 0, 1, 1, 1, 1.0f, &x, 1, &x, 1, 0.0f, &x, 1),
                 DT_EINVAL);
    CHECK_EQ_I64(dt_gemm_cpu_bf16(DT_GEMM_OPENBLAS, 0, 0, 1, 1, 1, 1.0f, &h, 1, &h, 1, 0.0f, &x,
                                  DT_DTYPE_FP32, 1),
                 DT_EINVAL);
    /* K = 0: C = beta C, beta = 0 overwrites (even NaN) */
    float c2[2] = {NAN, 3.0f};
    CHECK_EQ_I64(dt_gemm_cpu_f32(DT_GEMM_ONEDNN, 0, 0, 1, 1, 0, 1.0f, &x, 1, &x, 1, 0.0f, c2, 1),
                 DT_OK);
    CHECK(c2[0] == 0.0f && c2[1] == 3.0f);
}

int main(void) {
    printf("parse\n");
    test_parse();
    printf("choice (DT_GEMM=%s, OPENBLAS_CORETYPE=%s, %d threads)\n",
           getenv("DT_GEMM") ? getenv("DT_GEMM") : "(unset)",
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)",
           omp_get_max_threads());
    test_choice();
    test_widen_blocks();
    printf("accuracy vs double\n");
    test_accuracy();
    printf("exact integers\n");
    test_exact();
    printf("determinism\n");
    test_determinism();
    TEST_MAIN_END();
}
