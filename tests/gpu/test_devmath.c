/* test_devmath.c — runs on every machine (no GPU needed): the per-element
 * math the CUDA kernels share with the CPU (dt_devmath.h) against independent
 * double-precision formulas, proof that the CPU ops really go through those
 * functions (bitwise), the CPU device table (complete, AdamW bitwise equal to
 * engine/model/optim.c's independent loop, sum of squares vs dt_grad_sumsq), and the
 * error a 'device: cuda' request gives where no GPU (or no CUDA build) exists; the counter-based
 * RNG and dropout mask the CPU and CUDA devices share. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "dt_device.h"
#include "dt_devmath.h"
#include "dt_dtype.h"
#include "dt_lm.h"
#include "dt_ops.h"
#include "dt_optim.h"
#include "dt_test.h"
#ifdef DT_HAVE_CUDA
#include "dt_cuda.h"
#endif

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float urand(float lo, float hi) {   /* xorshift64*, deterministic */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    double u = (double)((rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
    return lo + (float)u * (hi - lo);
}

static void test_scalar_formulas(void) {
    double worst_exp = 0, worst_gelu = 0, worst_dgelu = 0;
    for (int k = 0; k < 200000; k++) {
        float x = urand(-80.0f, 80.0f);
        double e = exp((double)x);
        double rel = fabs(dt_fast_expf(x) - e) / e;
        if (rel > worst_exp) worst_exp = rel;
        float g = urand(-8.0f, 8.0f);
        double u = sqrt(2.0 / M_PI) * (g + 0.044715 * (double)g * g * g);
        double ref = 0.5 * g * (1.0 + tanh(u));
        double dref = 0.5 * (1.0 + tanh(u)) + 0.5 * g * (1.0 - tanh(u) * tanh(u)) *
                                                 sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * g * g);
        double ag = fabs(dt_gelu(g) - ref), adg = fabs(dt_gelu_grad(g) - dref);
        if (ag > worst_gelu) worst_gelu = ag;
        if (adg > worst_dgelu) worst_dgelu = adg;
    }
    printf("fast exp max rel err %.3g, gelu max abs err %.3g, gelu' %.3g\n", worst_exp, worst_gelu,
           worst_dgelu);
    CHECK(worst_exp < 5e-7);     /* a few fp32 ulps */
    CHECK(worst_gelu < 2e-6);    /* |x| <= 8: ~ulp(8) */
    CHECK(worst_dgelu < 2e-6);
    CHECK(dt_fast_expf(-100.0f) == 0.0f);
    CHECK(isfinite(dt_fast_expf(100.0f)));
    CHECK(dt_fast_tanhf(-3.0f) == -dt_fast_tanhf(3.0f));

    /* LayerNorm pieces vs the textbook formula */
    float x = 1.5f, m = 0.25f, r = 2.0f, w = 0.75f, b = -0.5f, d = 0.3f, s1 = 0.1f, s2 = -0.2f;
    CHECK_NEAR(dt_ln_out(x, m, r, w, b), (1.5 - 0.25) * 2.0 * 0.75 - 0.5, 1e-6);
    CHECK_NEAR(dt_ln_dinp(x, m, r, w, d, s1, s2), 2.0 * (0.3 * 0.75 - 0.1 - 2.5 * -0.2), 1e-6);
    CHECK_NEAR(dt_ce_dlogit(2.0f, 3.0f, 0.5f), 0.5 * exp(-1.0), 1e-7);
    CHECK(dt_nonfinite_f32(INFINITY) && dt_nonfinite_f32(NAN) && !dt_nonfinite_f32(3.0e38f));
    CHECK(dt_nonfinite_16(0x7f80u, 1) && dt_nonfinite_16(0x7c00u, 0) && !dt_nonfinite_16(0x7bffu, 0));
    /* typed load/store round trips and the one-rounding 16-bit add */
    uint16_t h[1];
    dt_store(h, DT_DTYPE_BF16, 0, 1.0f);
    CHECK_EQ_I64(h[0], 0x3f80);
    CHECK(dt_load(h, DT_DTYPE_BF16, 0) == 1.0f);
    dt_store(h, DT_DTYPE_FP16, 0, -2.0f);
    CHECK_EQ_I64(h[0], 0xc000);
    CHECK(dt_add_16(dt_f32_to_bf16(1.0f), 1.0f / 512.0f, 1) == dt_f32_to_bf16(1.0f));  /* tie -> even */
    CHECK(dt_add_16(dt_f32_to_fp16(1.0f), 1.0f, 0) == dt_f32_to_fp16(2.0f));

    /* AdamW element vs torch.optim.AdamW's formula in double */
    dt_adamw_scalars s = dt_adamw_make_scalars(1e-3, 0.9, 0.95, 1e-8, 0.1, 0.5, 1, 3);
    float mm = 0.01f, vv = 0.0004f;
    float p = dt_adamw_elem(0.2f, 0.3f, &mm, &vv, &s);
    double gg = 0.3 * 0.5, m2 = 0.9 * 0.01 + 0.1 * gg, v2 = 0.95 * 0.0004 + 0.05 * gg * gg;
    double pref = 0.2 * (1 - 1e-3 * 0.1) -
                  1e-3 * (m2 / (1 - pow(0.9, 3))) / (sqrt(v2 / (1 - pow(0.95, 3))) + 1e-8);
    CHECK_NEAR(mm, m2, 1e-8);
    CHECK_NEAR(vv, v2, 1e-9);
    CHECK_NEAR(p, pref, 1e-7);
}

/* The CPU ops produce exactly the shared functions' values: the CPU tests
 * cover the formulas the GPU kernels compile from the same header. */
/* The counter-based RNG of the init and of LoRA's dropout masks (dt_splitmix64_at) against
 * SplitMix64's published outputs from state 0 (Vigna's splitmix64.c, the generator of
 * Java's SplittableRandom: 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f), the
 * uniform in (0, 1), and the CPU's dropout op (what the CUDA kernel runs) element by element:
 * kept where the uniform at e + 1 is >= p, times float(1 / (1 - p)), about 1 - p kept. */
static void test_counter_rng(void) {
    const uint64_t want[3] = {0xe220a8397b1dcdafULL, 0x6e789e6aa1b965f4ULL, 0x06c45d188009454fULL};
    for (int i = 0; i < 3; i++) CHECK(dt_splitmix64_at(0, (uint64_t)i + 1) == want[i]);
    enum { N = 4096 };
    static float x[N], y[N];
    const double p = 0.25;
    for (int i = 0; i < N; i++) x[i] = urand(-2, 2);
    dt_op_dropout_mask(y, x, N, 12345, p);
    int same = 1, kept = 0;
    for (int e = 0; e < N; e++) {
        const double u = dt_uniform01_at(12345, (uint64_t)e + 1);
        same &= u > 0.0 && u < 1.0 && y[e] == (u >= p ? x[e] * (float)(1.0 / (1.0 - p)) : 0.0f);
        kept += u >= p;
    }
    CHECK(same);
    /* binomial(N, 0.75): sd 27.7, so 5 sd */
    CHECK(abs(kept - (int)(0.75 * N)) < 140);
}

static void test_cpu_ops_use_shared_math(void) {
    enum { N = 7, C = 37, V = 53 };
    float inp[N * C], out[N * C], dout[N * C], din[N * C], w[C], b[C], mean[N], rstd[N];
    for (int i = 0; i < N * C; i++) {
        inp[i] = urand(-4, 4);
        dout[i] = urand(-1, 1);
    }
    for (int c = 0; c < C; c++) {
        w[c] = urand(0.5f, 1.5f);
        b[c] = urand(-0.5f, 0.5f);
    }
    dt_op_gelu_forward(out, inp, N * C);
    dt_op_gelu_backward(din, inp, dout, N * C);
    int same = 1;
    for (int i = 0; i < N * C; i++)
        same &= out[i] == dt_gelu(inp[i]) && din[i] == dt_gelu_grad(inp[i]) * dout[i];
    CHECK(same);
    dt_op_layernorm_forward(out, mean, rstd, inp, w, b, N, C, 1e-5f);
    same = 1;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            same &= out[n * C + c] == dt_ln_out(inp[n * C + c], mean[n], rstd[n], w[c], b[c]);
    CHECK(same);
    float logits[N * V], z0[N * V], lse[N], losses[N];
    int32_t tg[N];
    for (int i = 0; i < N * V; i++) z0[i] = logits[i] = urand(-6, 6);
    for (int n = 0; n < N; n++) tg[n] = (n * 13) % V;
    dt_op_crossentropy_forward(lse, losses, logits, tg, N, V);
    dt_op_crossentropy_backward_inplace(logits, lse, tg, 0.25f, N, V);
    same = 1;
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++) {
            float e = dt_ce_dlogit(z0[n * V + v], lse[n], 0.25f) - (v == tg[n] ? 0.25f : 0.0f);
            same &= logits[n * V + v] == e;
        }
    CHECK(same);
}

static void test_cpu_device(void) {
    const dt_device_ops *d = dt_device_cpu();
    CHECK(d && d->kind == DT_DEVICE_CPU && d->host_addressable);
    /* every entry is filled: a missing op would crash gpt2 on this device */
    const void *const *fp = (const void *const *)&d->alloc;
    size_t nptr = (sizeof *d - ((const char *)&d->alloc - (const char *)d)) / sizeof(void *);
    for (size_t i = 0; i < nptr; i++) CHECK(fp[i] != NULL);

    /* AdamW through the device == engine/model/optim.c's own loop, bitwise, for each preset */
    dt_precision_preset presets[] = {DT_PREC_FP32, DT_PREC_MIXED_BF16, DT_PREC_PURE_BF16,
                                     DT_PREC_MIXED_FP16};
    for (int k = 0; k < 4; k++) {
        dt_precision pr;
        dt_precision_from_preset(presets[k], &pr);
        enum { P = 1000 };
        int ps = dt_dtype_size(pr.param), gs = dt_dtype_size(pr.grad);
        unsigned char p1[P * 4], p2[P * 4], gr[P * 4];
        for (int i = 0; i < P; i++) {
            dt_store(p1, pr.param, i, urand(-1, 1));
            dt_store(gr, pr.grad, i, urand(-1, 1));
        }
        memcpy(p2, p1, (size_t)P * ps);
        dt_optim *o = NULL;
        dt_error err = {0};
        CHECK(dt_optim_create(&pr, P, &o, &err) == 0);
        if (!o) continue;
        dt_optim_init_master(o, p1);
        int ms = dt_dtype_size(dt_optim_moment_dtype(o));
        float *master = NULL;
        void *m = calloc(P, (size_t)ms), *v = calloc(P, (size_t)ms);
        if (dt_optim_has_master(o)) {
            master = malloc(P * sizeof(float));
            for (int i = 0; i < P; i++) master[i] = dt_load(p2, pr.param, i);
        }
        dt_adamw hp = {1e-2, 0.9, 0.95, 1e-8, 0.1};
        for (int t = 1; t <= 3; t++) {
            dt_optim_update(o, p1, gr, 0, P, &hp, 0.5, 1, t);
            dt_adamw_scalars s = dt_adamw_make_scalars(hp.lr, hp.beta1, hp.beta2, hp.eps,
                                                       hp.weight_decay, 0.5, 1, t);
            d->adamw(p2, pr.param, master, m, v, dt_optim_moment_dtype(o), gr, pr.grad, P, &s);
        }
        CHECK(memcmp(p1, p2, (size_t)P * ps) == 0);
        CHECK(memcmp(dt_optim_m(o), m, (size_t)P * ms) == 0);
        CHECK(memcmp(dt_optim_v(o), v, (size_t)P * ms) == 0);
        (void)gs;
        free(m);
        free(v);
        free(master);
        dt_optim_free(o);
    }

    /* sum of squares / finiteness through the device vs dt_grad_sumsq */
    enum { G = 10000 };
    float g[G];
    double ref = 0;
    for (int i = 0; i < G; i++) {
        g[i] = urand(-2, 2);
        ref += (double)g[i] * g[i];
    }
    int nf = 0;
    CHECK_NEAR(d->sumsq(g, DT_DTYPE_FP32, G), dt_grad_sumsq(g, DT_DTYPE_FP32, G, &nf), 1e-9 * ref);
    CHECK(d->all_finite(g, DT_DTYPE_FP32, G));
    g[G - 1] = INFINITY;
    CHECK(!d->all_finite(g, DT_DTYPE_FP32, G));
    uint16_t h16[3] = {dt_f32_to_fp16(1.0f), 0x7c00u, 0};
    CHECK(!d->all_finite(h16, DT_DTYPE_FP16, 3) && d->all_finite(h16, DT_DTYPE_FP16, 1));

    /* gemm_ex with 16-bit operands == fp32 gemm on the rounded values */
    enum { M = 5, K = 9, NN = 6 };
    float A[M * K], B[K * NN], C1[M * NN], C2[M * NN];
    uint16_t A16[M * K], B16[K * NN];
    for (int i = 0; i < M * K; i++) A[i] = dt_bf16_to_f32(A16[i] = dt_f32_to_bf16(urand(-1, 1)));
    for (int i = 0; i < K * NN; i++) B[i] = dt_bf16_to_f32(B16[i] = dt_f32_to_bf16(urand(-1, 1)));
    dt_op_gemm(0, 0, M, NN, K, 1.0f, A, K, B, NN, 0.0f, C1, NN);
    CHECK(d->gemm_ex(0, 0, M, NN, K, 1.0f, A16, DT_DTYPE_BF16, K, B16, DT_DTYPE_BF16, NN, 0.0f, C2,
                     DT_DTYPE_FP32, NN) == 0);
    CHECK(memcmp(C1, C2, sizeof C1) == 0);
}

/* How the CUDA device maps gemm_ex dtypes onto cublasGemmEx (dt_device.h),
 * and the CPU device's answers for the same combinations. */
static void test_gemm_ex_dtypes(void) {
    const dt_dtype F = DT_DTYPE_FP32, BF = DT_DTYPE_BF16, H = DT_DTYPE_FP16;
    dt_gemm_ex_plan p;
    /* supported by cuBLAS as they are */
    CHECK(dt_gemm_ex_plan_for(F, F, F, 0, &p) == DT_OK && p.ab == F && p.c == F && !p.tf32);
    CHECK(dt_gemm_ex_plan_for(F, F, F, 1, &p) == DT_OK && p.tf32);
    CHECK(dt_gemm_ex_plan_for(BF, BF, F, 0, &p) == DT_OK && p.ab == BF && p.c == F);
    CHECK(dt_gemm_ex_plan_for(BF, BF, BF, 0, &p) == DT_OK && p.ab == BF && p.c == BF);
    CHECK(dt_gemm_ex_plan_for(H, H, H, 0, &p) == DT_OK && p.ab == H && p.c == H);
    /* TF32 never with 16-bit operands (cuBLAS: CUBLAS_STATUS_NOT_SUPPORTED) */
    CHECK(dt_gemm_ex_plan_for(BF, BF, F, 1, &p) == DT_OK && !p.tf32);
    CHECK(dt_gemm_ex_plan_for(H, H, H, 1, &p) == DT_OK && !p.tf32);
    /* mixed A / B: both widened to fp32 */
    CHECK(dt_gemm_ex_plan_for(BF, F, F, 0, &p) == DT_OK && p.ab == F && p.c == F);
    CHECK(dt_gemm_ex_plan_for(F, H, BF, 1, &p) == DT_OK && p.ab == F && p.c == F && p.tf32);
    CHECK(dt_gemm_ex_plan_for(BF, H, H, 0, &p) == DT_OK && p.ab == F && p.c == F);
    /* C of a dtype cuBLAS cannot write from these operands: fp32 scratch */
    CHECK(dt_gemm_ex_plan_for(F, F, BF, 0, &p) == DT_OK && p.ab == F && p.c == F);
    CHECK(dt_gemm_ex_plan_for(BF, BF, H, 0, &p) == DT_OK && p.ab == BF && p.c == F);
    /* not a dtype */
    CHECK(dt_gemm_ex_plan_for((dt_dtype)3, F, F, 0, &p) == DT_EINVAL);
    CHECK(dt_gemm_ex_plan_for(F, (dt_dtype)-1, F, 0, &p) == DT_EINVAL);
    CHECK(dt_gemm_ex_plan_for(F, F, (dt_dtype)7, 0, &p) == DT_EINVAL);

    /* the CPU device: mixed operands give the fp32 GEMM of the widened values,
     * a 16-bit C is rounded once; a bad dtype is refused before any work */
    const dt_device_ops *d = dt_device_cpu();
    enum { M = 4, K = 7, NN = 5 };
    float A[M * K], Bf[K * NN], C1[M * NN], C2[M * NN];
    uint16_t A16[M * K], C16[M * NN];
    for (int i = 0; i < M * K; i++) A[i] = dt_bf16_to_f32(A16[i] = dt_f32_to_bf16(urand(-1, 1)));
    for (int i = 0; i < K * NN; i++) Bf[i] = urand(-1, 1);
    dt_op_gemm(0, 0, M, NN, K, 1.0f, A, K, Bf, NN, 0.0f, C1, NN);
    CHECK(d->gemm_ex(0, 0, M, NN, K, 1.0f, A16, BF, K, Bf, F, NN, 0.0f, C2, F, NN) == DT_OK);
    CHECK(memcmp(C1, C2, sizeof C1) == 0);
    CHECK(d->gemm_ex(0, 0, M, NN, K, 1.0f, A16, BF, K, Bf, F, NN, 0.0f, C16, H, NN) == DT_OK);
    int same = 1;
    for (int i = 0; i < M * NN; i++) same &= C16[i] == dt_f32_to_fp16(C1[i]);
    CHECK(same);
    memcpy(C2, C1, sizeof C1);
    CHECK(d->gemm_ex(0, 0, M, NN, K, 1.0f, A16, (dt_dtype)5, K, Bf, F, NN, 0.0f, C2, F, NN) ==
          DT_EINVAL);
    CHECK(memcmp(C1, C2, sizeof C1) == 0);   /* untouched */
}

/* LOCAL_RANK -> CUDA ordinal (dt_device.h): modulo the visible GPUs */
static void test_cuda_ordinal(void) {
    CHECK_EQ_I64(dt_cuda_ordinal_for(0, 8), 0);
    CHECK_EQ_I64(dt_cuda_ordinal_for(5, 8), 5);
    CHECK_EQ_I64(dt_cuda_ordinal_for(3, 1), 0);   /* srun --gpus-per-task=1 */
    CHECK_EQ_I64(dt_cuda_ordinal_for(5, 4), 1);
    CHECK_EQ_I64(dt_cuda_ordinal_for(-1, 4), -1);
    CHECK_EQ_I64(dt_cuda_ordinal_for(0, 0), -1);
}

#ifdef DT_HAVE_CUDA
/* Pieces of the CUDA backend that need no GPU: the attention launch shape
 * (per-thread vectors in shared memory) and the recorded-error path. */
static void test_cuda_host_side(void) {
    const int64_t KiB = 1024;
    /* hs 64, one vector: 256 B per thread; 96 KiB holds 384, capped at 256 */
    CHECK_EQ_I64(dt_cuda_att_threads(64, 1, 96 * KiB, 256, 32), 256);
    /* hs 128, dk + dv: 1 KiB per thread -> 96 threads (3 warps) */
    CHECK_EQ_I64(dt_cuda_att_threads(128, 2, 96 * KiB, 256, 32), 96);
    /* hs 256, dk + dv: 2 KiB -> 48, rounded down to one warp */
    CHECK_EQ_I64(dt_cuda_att_threads(256, 2, 96 * KiB, 256, 32), 32);
    /* 48 KiB (no opt-in): 24 threads, less than a warp, kept as is */
    CHECK_EQ_I64(dt_cuda_att_threads(256, 2, 48 * KiB, 256, 32), 24);
    /* does not fit at all / bad sizes */
    CHECK_EQ_I64(dt_cuda_att_threads(1 << 20, 2, 96 * KiB, 256, 32), 0);
    CHECK_EQ_I64(dt_cuda_att_threads(0, 1, 96 * KiB, 256, 32), 0);
    /* every launch's shared memory fits the budget */
    for (int64_t hs = 1; hs <= 512; hs++)
        for (int v = 1; v <= 2; v++) {
            int th = dt_cuda_att_threads(hs, v, 96 * KiB, 256, 32);
            CHECK(th >= 0 && th <= 256 && (int64_t)th * hs * v * 4 <= 96 * KiB);
        }

    /* errors: the first one recorded wins, is one line naming the call, and
     * taking it clears it */
    dt_error err = {0};
    CHECK_EQ_I64(dt_cuda_take_error(&err), DT_OK);
    dt_cuda_note_error("cublasGemmEx (gemm M=2 N=3 K=4)", "the operation is not\nsupported");
    dt_cuda_note_error("cudaMemcpyAsync", "later error");
    CHECK_EQ_I64(dt_cuda_take_error(&err), DT_ERUNTIME);
    printf("recorded cuda error: %s\n", err.msg);
    CHECK(strstr(err.msg, "cuda: cublasGemmEx (gemm M=2 N=3 K=4) failed: the operation") == err.msg);
    CHECK(strchr(err.msg, '\n') == NULL && strstr(err.msg, "later") == NULL);
    CHECK_EQ_I64(dt_cuda_take_error(&err), DT_OK);
    dt_cuda_note_error("k_adamw", "an illegal memory access was encountered");
    CHECK_EQ_I64(dt_cuda_take_error(NULL), DT_ERUNTIME);   /* NULL: cleared, not reported */
    CHECK_EQ_I64(dt_cuda_take_error(&err), DT_OK);
}
#endif

static void test_cuda_request_without_gpu(void) {
    if (dt_device_cuda_count() > 0) return;   /* covered by the GPU tests there */
    const dt_device_ops *d = NULL;
    dt_error err = {0};
    CHECK_EQ_I64(dt_device_get(DT_DEVICE_CUDA, 0, &d, &err), DT_ERUNTIME);
    CHECK(d == NULL && strstr(err.msg, "cuda") != NULL);
    CHECK(strchr(err.msg, '\n') == NULL);
    /* the back-end is linked into this test: it is found (the reason is the GPU,
     * not the module; glibc's RTLD_DEFAULT is NULL and once read as "not loaded") */
    CHECK(strstr(err.msg, "cannot be loaded") == NULL);
    printf("cuda request here: %s\n", err.msg);
    dt_model m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "t");
    m.family = DT_FAMILY_GPT2;
    m.n_layer = 1;
    m.hidden = 8;
    m.n_head = m.n_kv_head = 2;
    m.head_dim = 4;
    m.tied_embeddings = 1;
    m.qkv_bias = 1;
    m.vocab = 11;
    m.max_pos = 4;
    m.ffn = 32;
    m.norm_eps = 1e-5;   /* dt_lm_create validates the description (dt_model_validate) */
    dt_precision p;
    dt_precision_from_preset(DT_PREC_FP32, &p);
    dt_lm *g = NULL;
    dt_error e2 = {0};
    CHECK_EQ_I64(dt_lm_create_on(&m, &p, 1, 4, 0, DT_ATTN_FLASH, DT_DEVICE_CUDA, 0, &g, &e2),
                 DT_ERUNTIME);
    CHECK(g == NULL);
    /* the CPU through create_on is the default create */
    CHECK(dt_lm_create_on(&m, &p, 1, 4, 0, DT_ATTN_FLASH, DT_DEVICE_CPU, 0, &g, &e2) == 0);
    CHECK(g && dt_lm_device(g) == DT_DEVICE_CPU && dt_lm_device_ops(g) == dt_device_cpu());
    dt_lm_free(g);
    CHECK_EQ_I64(dt_device_get((dt_device)7, 0, &d, &err), DT_EINVAL);
}

int main(void) {
    test_scalar_formulas();
    test_counter_rng();
    test_cpu_ops_use_shared_math();
    test_cpu_device();
    test_gemm_ex_dtypes();
    test_cuda_ordinal();
#ifdef DT_HAVE_CUDA
    test_cuda_host_side();
#endif
    test_cuda_request_without_gpu();
    TEST_MAIN_END();
}
