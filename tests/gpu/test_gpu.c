/* test_gpu.c — the CUDA device against the CPU device (needs a GPU; exits 77
 * without one). Modes:
 *   kernels : every op of dt_device.h on random inputs, GPU vs CPU
 *   gpt2    : a full GPT-2 training step (forward, backward, AdamW, forward)
 *             on both devices, fp32 and mixed-bf16, flash / materialized,
 *             with and without checkpointing
 *   memory  : GPT-2 124M's tracked device bytes per category vs the plan's
 *             dt_memory_estimate (within 2%), and the driver's view bounded
 *             both ways: tracked <= used since binding <= tracked +
 *             DT_GPU_RUNTIME_ALLOWANCE (docs/cuda.md "GPU tests")
 * Tolerances (documented in docs/cuda.md): fp32 ops 1e-5 relative to the
 * output's scale (GEMM / reductions reorder sums; the GPU may fuse
 * multiply-adds differently); 16-bit GEMM operands 1e-2; a whole fp32 step 1e-4,
 * mixed-bf16 3e-2 of the gradients' max magnitude. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "dt_cuda.h"
#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_lm.h"
#include "dt_memory.h"
#include "dt_test.h"
#include "gpu_test_util.h"

/* What the driver may show in use beyond dt's tracked device bytes after the
 * device is bound (the CUDA context exists by then, so it is not part of it):
 * cuBLAS / cuBLASLt handle and workspace (up to 32 MiB per handle on sm_90),
 * kernel code loaded lazily (CUDA_MODULE_LOADING=LAZY), the backend's small
 * scratch (finiteness flag, sum-of-squares partials) and cudaMalloc's
 * rounding to 2 MiB pages for each of the model's few hundred blocks.
 * docs/cuda.md "GPU tests"; not yet measured on a GPU. */
#define DT_GPU_RUNTIME_ALLOWANCE ((int64_t)512 << 20)


#define F32 1e-5
static void test_kernels(void) {
    /* GEMM, all transposes, then 16-bit operands */
    int64_t M = 67, N = 45, K = 129;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *A = rnd((size_t)(M * K), -1, 1), *B = rnd((size_t)(K * N), -1, 1);
            float *C = rnd((size_t)(M * N), -1, 1);
            float *dA = up(A, M * K * 4), *dB = up(B, K * N * 4), *dC = up(C, M * N * 4);
            cpu->gemm(ta, tb, M, N, K, 0.5f, A, ta ? M : K, B, tb ? K : N, 2.0f, C, N);
            gpu->gemm(ta, tb, M, N, K, 0.5f, dA, ta ? M : K, dB, tb ? K : N, 2.0f, dC, N);
            cmp(ta ? (tb ? "gemm TT" : "gemm TN") : (tb ? "gemm NT" : "gemm NN"), C, dC,
                (size_t)(M * N), F32);
            dt_dtype t16[2] = {DT_DTYPE_BF16, DT_DTYPE_FP16};
            for (int k = 0; k < 2 && !ta && !tb; k++) {
                uint16_t *A16 = malloc(M * K * 2), *B16 = malloc(K * N * 2);
                dt_convert(A16, t16[k], A, DT_DTYPE_FP32, (size_t)(M * K));
                dt_convert(B16, t16[k], B, DT_DTYPE_FP32, (size_t)(K * N));
                void *dA16 = up(A16, M * K * 2), *dB16 = up(B16, K * N * 2);
                cpu->gemm_ex(0, 0, M, N, K, 1.0f, A16, t16[k], K, B16, t16[k], N, 0.0f, C,
                             DT_DTYPE_FP32, N);
                gpu->gemm_ex(0, 0, M, N, K, 1.0f, dA16, t16[k], K, dB16, t16[k], N, 0.0f, dC,
                             DT_DTYPE_FP32, N);
                cmp(k ? "gemm_ex fp16" : "gemm_ex bf16", C, dC, (size_t)(M * N), 1e-2);
                gpu->free(dA16);
                gpu->free(dB16);
                free(A16);
                free(B16);
            }
            gpu->free(dA);
            gpu->free(dB);
            gpu->free(dC);
            free(A);
            free(B);
            free(C);
        }

    /* linear / bias / layernorm / gelu / residual / axpy */
    int64_t R = 96, IC = 80, OC = 112;
    float *x = rnd(R * IC, -2, 2), *w = rnd(IC * OC, -0.5f, 0.5f), *bias = rnd(OC, -1, 1);
    float *dout = rnd(R * OC, -1, 1), *out = malloc(R * OC * 4), *dinp = rnd(R * IC, -1, 1);
    float *dw = rnd(IC * OC, -1, 1), *db = rnd(OC, -1, 1);
    float *dx = up(x, R * IC * 4), *dwt = up(w, IC * OC * 4), *dbias = up(bias, OC * 4);
    float *ddout = up(dout, R * OC * 4), *dout_g = up(out, R * OC * 4);
    float *ddinp = up(dinp, R * IC * 4), *ddw = up(dw, IC * OC * 4), *ddb = up(db, OC * 4);
    cpu->linear_forward(out, x, w, bias, R, IC, OC);
    gpu->linear_forward(dout_g, dx, dwt, dbias, R, IC, OC);
    cmp("linear_forward", out, dout_g, (size_t)(R * OC), F32);
    cpu->linear_backward(dinp, dw, db, dout, x, w, R, IC, OC, 1);
    gpu->linear_backward(ddinp, ddw, ddb, ddout, dx, dwt, R, IC, OC, 1);
    cmp("linear_backward dinp", dinp, ddinp, (size_t)(R * IC), F32);
    cmp("linear_backward dw", dw, ddw, (size_t)(IC * OC), F32);
    cmp("linear_backward dbias", db, ddb, (size_t)OC, F32);

    int64_t C = IC;
    float *lw = rnd(C, 0.5f, 1.5f), *lb = rnd(C, -0.5f, 0.5f), *lo = malloc(R * C * 4);
    float *mean = malloc(R * 4), *rstd = malloc(R * 4), *g = rnd(R * C, -1, 1);
    float *ldw = rnd(C, -1, 1), *ldb = rnd(C, -1, 1), *ldi = rnd(R * C, -1, 1);
    float *dlw = up(lw, C * 4), *dlb = up(lb, C * 4), *dlo = up(lo, R * C * 4);
    float *dmean = up(mean, R * 4), *drstd = up(rstd, R * 4), *dg = up(g, R * C * 4);
    float *dldw = up(ldw, C * 4), *dldb = up(ldb, C * 4), *dldi = up(ldi, R * C * 4);
    cpu->layernorm_forward(lo, mean, rstd, x, lw, lb, R, C, 1e-5f);
    gpu->layernorm_forward(dlo, dmean, drstd, dx, dlw, dlb, R, C, 1e-5f);
    cmp("layernorm_forward", lo, dlo, (size_t)(R * C), F32);
    cmp("layernorm rstd", rstd, drstd, (size_t)R, F32);
    cpu->layernorm_backward(ldi, ldw, ldb, g, x, lw, mean, rstd, R, C);
    gpu->layernorm_backward(dldi, dldw, dldb, dg, dx, dlw, dmean, drstd, R, C);
    cmp("layernorm_backward dinp", ldi, dldi, (size_t)(R * C), F32);
    cmp("layernorm_backward dw", ldw, dldw, (size_t)C, F32);
    cmp("layernorm_backward db", ldb, dldb, (size_t)C, F32);

    size_t n = (size_t)(R * C);
    cpu->gelu_forward(lo, x, (int64_t)n);
    gpu->gelu_forward(dlo, dx, (int64_t)n);
    cmp("gelu_forward", lo, dlo, n, F32);
    cpu->gelu_backward(ldi, x, g, (int64_t)n);
    gpu->gelu_backward(dldi, dx, dg, (int64_t)n);
    cmp("gelu_backward", ldi, dldi, n, F32);
    cpu->residual_forward(lo, x, g, (int64_t)n);
    gpu->residual_forward(dlo, dx, dg, (int64_t)n);
    cmp("residual_forward", lo, dlo, n, 0.0);
    cpu->axpy(lo, g, -0.25f, (int64_t)n);
    gpu->axpy(dlo, dg, -0.25f, (int64_t)n);
    cmp("axpy", lo, dlo, n, F32);

    /* attention: B=2, T=70 (crosses the CPU's 64-key tile), C=64, H=4 */
    int64_t B = 2, T = 70, AC = 64, H = 4;
    size_t nq = (size_t)(B * T * 3 * AC), no = (size_t)(B * T * AC), nl = (size_t)(B * H * T);
    float *qkv = rnd(nq, -1, 1), *ao = malloc(no * 4), *lse = malloc(nl * 4);
    float *ad = rnd(no, -1, 1), *dq = malloc(nq * 4), *probs = malloc((size_t)(B * H * T * T) * 4);
    float *dqkv_ = up(qkv, nq * 4), *dao = up(ao, no * 4), *dlse = up(lse, nl * 4);
    float *dad = up(ad, no * 4), *ddq = up(dq, nq * 4);
    float *dprobs = up(probs, (size_t)(B * H * T * T) * 4);
    cpu->attention_forward_flash(ao, lse, qkv, B, T, AC, H);
    gpu->attention_forward_flash(dao, dlse, dqkv_, B, T, AC, H);
    cmp("attention_forward_flash", ao, dao, no, F32);
    cmp("attention lse", lse, dlse, nl, F32);
    cpu->attention_backward_flash(dq, ad, qkv, ao, lse, B, T, AC, H);
    gpu->attention_backward_flash(ddq, dad, dqkv_, dao, dlse, B, T, AC, H);
    cmp("attention_backward_flash", dq, ddq, nq, 1e-4);
    cpu->attention_forward_probs(ao, probs, qkv, B, T, AC, H);
    gpu->attention_forward_probs(dao, dprobs, dqkv_, B, T, AC, H);
    cmp("attention_forward_probs", ao, dao, no, F32);
    cmp("attention probs", probs, dprobs, (size_t)(B * H * T * T), F32);
    cpu->attention_backward_probs(dq, ad, qkv, probs, B, T, AC, H);
    gpu->attention_backward_probs(ddq, dad, dqkv_, dprobs, B, T, AC, H);
    cmp("attention_backward_probs", dq, ddq, nq, 1e-4);

    /* encoder (fp32, bf16 wte, 16-bit grads with token chains) */
    int64_t V = 50, EC = 48;
    int32_t tok[2 * 70];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7) % 13 + (i % 3) * 17;
    float *wte = rnd(V * EC, -1, 1), *wpe = rnd(T * EC, -1, 1), *eo = malloc(B * T * EC * 4);
    float *ed = rnd(B * T * EC, -1, 1), *dwte = rnd(V * EC, -1, 1), *dwpe = rnd(T * EC, -1, 1);
    int32_t *dtok = up(tok, sizeof tok);
    float *dwte_ = up(wte, V * EC * 4), *dwpe_ = up(wpe, T * EC * 4), *deo = up(eo, B * T * EC * 4);
    float *ded = up(ed, B * T * EC * 4), *ddwte = up(dwte, V * EC * 4), *ddwpe = up(dwpe, T * EC * 4);
    cpu->encoder_forward(eo, tok, wte, wpe, B, T, EC);
    gpu->encoder_forward(deo, dtok, dwte_, dwpe_, B, T, EC);
    cmp("encoder_forward", eo, deo, (size_t)(B * T * EC), 0.0);
    cpu->encoder_backward(dwte, dwpe, ed, tok, B, T, EC);
    gpu->encoder_backward(ddwte, ddwpe, ded, dtok, B, T, EC);
    cmp("encoder_backward dwte", dwte, ddwte, (size_t)(V * EC), 0.0);   /* same order */
    cmp("encoder_backward dwpe", dwpe, ddwpe, (size_t)(T * EC), 0.0);
    uint16_t *w16 = malloc(V * EC * 2), *g16 = calloc(V * EC, 2), *p16 = calloc(T * EC, 2);
    dt_convert(w16, DT_DTYPE_BF16, wte, DT_DTYPE_FP32, (size_t)(V * EC));
    void *dw16 = up(w16, V * EC * 2), *dg16 = up(g16, V * EC * 2), *dp16 = up(p16, T * EC * 2);
    cpu->encoder_forward_cast(eo, tok, w16, DT_DTYPE_BF16, wpe, B, T, EC);
    gpu->encoder_forward_cast(deo, dtok, dw16, DT_DTYPE_BF16, dwpe_, B, T, EC);
    cmp("encoder_forward_cast bf16", eo, deo, (size_t)(B * T * EC), 0.0);
    int32_t head[50], next[140];
    for (int v = 0; v < V; v++) head[v] = -1;
    for (int i = (int)(B * T) - 1; i >= 0; i--) {
        next[i] = head[tok[i]];
        head[tok[i]] = i;
    }
    int32_t *dhead = up(head, sizeof head), *dnext = up(next, sizeof next);
    float *acc = malloc(T * EC * 4);
    cpu->encoder_backward_16(g16, p16, DT_DTYPE_BF16, ed, tok, head, next, acc, B, T, EC);
    gpu->encoder_backward_16(dg16, dp16, DT_DTYPE_BF16, ded, dtok, dhead, dnext, NULL, B, T, EC);
    float *g32 = malloc(V * EC * 4);
    uint16_t *gg = (uint16_t *)down(dg16, V * EC * 2);
    dt_convert(g32, DT_DTYPE_FP32, g16, DT_DTYPE_BF16, (size_t)(V * EC));
    float *gg32 = malloc(V * EC * 4);
    dt_convert(gg32, DT_DTYPE_FP32, gg, DT_DTYPE_BF16, (size_t)(V * EC));
    float *dgg32 = up(gg32, V * EC * 4);
    cmp("encoder_backward_16 wte", g32, dgg32, (size_t)(V * EC), 0.0);

    /* cross-entropy, 16-bit accumulate, finiteness, sum of squares, convert, AdamW */
    int64_t CN = 33, CV = 1001;
    float *lg = rnd(CN * CV, -8, 8), *clse = malloc(CN * 4), *closs = malloc(CN * 4);
    int32_t tg[33];
    for (int i = 0; i < CN; i++) tg[i] = (i * 31) % CV;
    float *dlg = up(lg, CN * CV * 4), *dclse = up(clse, CN * 4), *dcloss = up(closs, CN * 4);
    int32_t *dtg = up(tg, sizeof tg);
    double l1 = cpu->crossentropy_forward(clse, closs, lg, tg, CN, CV);
    double l2 = gpu->crossentropy_forward(dclse, dcloss, dlg, dtg, CN, CV);
    printf("crossentropy mean loss cpu %.9g gpu %.9g\n", l1, l2);
    CHECK_NEAR(l1, l2, 1e-5 * fabs(l1));
    cmp("crossentropy lse", clse, dclse, (size_t)CN, F32);
    cpu->crossentropy_backward_inplace(lg, clse, tg, 0.125f, CN, CV);
    gpu->crossentropy_backward_inplace(dlg, dclse, dtg, 0.125f, CN, CV);
    cmp("crossentropy_backward", lg, dlg, (size_t)(CN * CV), F32);

    CHECK(gpu->all_finite(dlg, DT_DTYPE_FP32, (size_t)(CN * CV)));
    float inf = INFINITY;
    gpu->memcpy(dlg + 17, &inf, 4, DT_COPY_H2D, DT_STREAM_COMPUTE);
    CHECK(!gpu->all_finite(dlg, DT_DTYPE_FP32, (size_t)(CN * CV)));
    size_t big = 100003;
    float *s = rnd(big, -3, 3), *ds = up(s, big * 4);
    double q1 = cpu->sumsq(s, DT_DTYPE_FP32, big), q2 = gpu->sumsq(ds, DT_DTYPE_FP32, big);
    printf("sumsq cpu %.17g gpu %.17g\n", q1, q2);
    CHECK_NEAR(q1, q2, 1e-12 * q1);
    uint16_t *s16 = malloc(big * 2);
    void *ds16 = gpu->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, big * 2);
    dt_convert(s16, DT_DTYPE_FP16, s, DT_DTYPE_FP32, big);
    gpu->convert(ds16, DT_DTYPE_FP16, ds, DT_DTYPE_FP32, big);
    uint16_t *back16 = (uint16_t *)down(ds16, big * 2);
    CHECK(memcmp(s16, back16, big * 2) == 0);   /* same rounding function */
    float *a16 = rnd(big, -1, 1), *da16 = up(a16, big * 4);
    cpu->accumulate_16(s16, DT_DTYPE_FP16, a16, big);
    gpu->accumulate_16(ds16, DT_DTYPE_FP16, da16, big);
    free(back16);
    back16 = (uint16_t *)down(ds16, big * 2);
    CHECK(memcmp(s16, back16, big * 2) == 0);

    float *pp = rnd(big, -1, 1), *gr = rnd(big, -1, 1), *mm = calloc(big, 4), *vv = calloc(big, 4);
    float *dpp = up(pp, big * 4), *dgr = up(gr, big * 4), *dmm = up(mm, big * 4), *dvv = up(vv, big * 4);
    for (int t = 1; t <= 3; t++) {
        dt_adamw_scalars sc = dt_adamw_make_scalars(1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0, 1, t);
        cpu->adamw(pp, DT_DTYPE_FP32, NULL, mm, vv, DT_DTYPE_FP32, gr, DT_DTYPE_FP32, big, &sc);
        gpu->adamw(dpp, DT_DTYPE_FP32, NULL, dmm, dvv, DT_DTYPE_FP32, dgr, DT_DTYPE_FP32, big, &sc);
    }
    cmp("adamw params", pp, dpp, big, 1e-6);
    cmp("adamw v", vv, dvv, big, 1e-6);
    dt_error err = {0};
    CHECK(gpu->synchronize(&err) == 0);
    if (err.code) fprintf(stderr, "%s\n", err.msg);
    /* (host buffers of this test are left to process exit; device ones likewise) */
}

static dt_model small_gpt2(void) {
    dt_model m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "gpu-test");
    m.family = DT_FAMILY_GPT2;
    m.n_layer = 2;
    m.hidden = 64;
    m.n_head = m.n_kv_head = 4;
    m.head_dim = 16;
    m.ffn = 256;
    m.vocab = 96;
    m.max_pos = 64;
    m.tied_embeddings = 1;
    m.qkv_bias = 1;
    m.norm_eps = 1e-5;
    return m;
}

static void test_gpt2_step(void) {
    dt_model m = small_gpt2();
    int64_t B = 2, T = 48, N = B * T;
    int32_t in[96], tg[96];
    for (int i = 0; i < N; i++) {
        in[i] = (i * 37 + 11) % 96;
        tg[i] = (i * 53 + 5) % 96;
    }
    in[3] = in[20] = in[77] = 42;   /* repeated tokens exercise the wte gradient chains */
    struct { dt_precision_preset p; int64_t K; dt_attention a; double tol; } cs[] = {
        {DT_PREC_FP32, 0, DT_ATTN_FLASH, 1e-4},
        {DT_PREC_FP32, 1, DT_ATTN_MATERIALIZED, 1e-4},
        {DT_PREC_MIXED_BF16, 0, DT_ATTN_FLASH, 3e-2},
        {DT_PREC_MIXED_BF16, 2, DT_ATTN_MATERIALIZED, 3e-2},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        dt_precision p;
        dt_precision_from_preset(cs[c].p, &p);
        dt_lm *gc = NULL, *gg = NULL;
        dt_error err = {0};
        CHECK(dt_lm_create_on(&m, &p, B, T, cs[c].K, cs[c].a, DT_DEVICE_CPU, 0, &gc, &err) == 0);
        CHECK(dt_lm_create_on(&m, &p, B, T, cs[c].K, cs[c].a, DT_DEVICE_CUDA, 0, &gg, &err) == 0);
        if (!gc || !gg) {
            fprintf(stderr, "create: %s\n", err.msg);
            return;
        }
        CHECK(dt_lm_init_random(gc, 7, NULL) == DT_OK);
        CHECK(dt_lm_init_random(gg, 7, NULL) == DT_OK);
        size_t P = dt_lm_num_params(gc);
        float lc = 0, lg = 0;
        dt_lm_zero_grad(gc);
        dt_lm_zero_grad(gg);
        CHECK(dt_lm_forward(gc, in, tg, &lc, &err) == 0 && dt_lm_backward(gc, 1.0f, &err) == 0);
        CHECK(dt_lm_forward(gg, in, tg, &lg, &err) == 0 && dt_lm_backward(gg, 1.0f, &err) == 0);
        printf("case %zu: loss cpu %.7f gpu %.7f\n", c, lc, lg);
        CHECK_NEAR(lc, lg, cs[c].tol * fabs(lc));
        float *gcpu = malloc(P * 4), *ggpu32 = malloc(P * 4);
        dt_convert(gcpu, DT_DTYPE_FP32, dt_lm_grads(gc), p.grad, P);
        const dt_device_ops *gd = dt_lm_device_ops(gg);
        void *tmp = gd->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, P * 4);
        gd->convert(tmp, DT_DTYPE_FP32, dt_lm_grads(gg), p.grad, P);
        cmp("gpt2 grads", gcpu, tmp, P, cs[c].tol);
        double s1 = dt_lm_grad_sumsq(gc), s2 = dt_lm_grad_sumsq(gg);
        CHECK_NEAR(s1, s2, cs[c].tol * 10 * s1);
        CHECK(dt_lm_grads_finite(gg));
        /* one SGD-like AdamW step on both devices, then the loss again */
        dt_adamw_scalars sc = dt_adamw_make_scalars(1e-2, 0.9, 0.95, 1e-8, 0.0, 1.0, 0, 1);
        void *mc = calloc(P, 4), *vc = calloc(P, 4);
        void *mg = gd->alloc(DT_POOL_DEVICE, DT_MEM_OPTIMIZER, P * 4);
        void *vg = gd->alloc(DT_POOL_DEVICE, DT_MEM_OPTIMIZER, P * 4);
        cpu->adamw(dt_lm_params(gc), p.param, NULL, mc, vc, DT_DTYPE_FP32, dt_lm_grads(gc),
                   p.grad, P, &sc);
        gd->adamw(dt_lm_params(gg), p.param, NULL, mg, vg, DT_DTYPE_FP32, dt_lm_grads(gg),
                  p.grad, P, &sc);
        CHECK(dt_lm_forward(gc, in, tg, &lc, &err) == 0);
        CHECK(dt_lm_forward(gg, in, tg, &lg, &err) == 0);
        printf("case %zu: loss after one step cpu %.7f gpu %.7f\n", c, lc, lg);
        CHECK_NEAR(lc, lg, cs[c].tol * fabs(lc));
        CHECK(gd->synchronize(&err) == 0);
        gd->free(tmp);
        gd->free(mg);
        gd->free(vg);
        free(mc);
        free(vc);
        free(gcpu);
        free(ggpu32);
        dt_lm_free(gc);
        dt_lm_free(gg);
    }
}

static void test_memory(void) {
    dt_plan p;
    dt_error err = {0};
    dt_plan_defaults(&p);
    CHECK(dt_model_resolve("gpt2", &p.model, &err) == 0);
    p.cluster.nodes = 1;
    p.cluster.gpus_per_node = 1;
    p.cluster.device = DT_DEVICE_CUDA;
    p.parallel.world_size = 1;
    p.parallel.zero_stage = 0;
    p.batch.micro_batch = 4;
    p.batch.seq_len = 1024;
    p.batch.grad_accum = 1;
    p.batch.global_batch = 4;
    dt_precision_from_preset(DT_PREC_MIXED_BF16, &p.precision);
    p.activations.ckpt_layers = 0;
    p.activations.attention = DT_ATTN_FLASH;
    dt_mem_breakdown est;
    CHECK(dt_memory_estimate(&p, &est, &err) == 0);
    size_t f0 = 0, tot = 0, fb = 0;
    dt_lm *g = NULL;
    CHECK(dt_lm_create_on(&p.model, &p.precision, 4, 1024, 0, DT_ATTN_FLASH, DT_DEVICE_CUDA, 0,
                            &g, &err) == 0);
    if (!g) {
        fprintf(stderr, "create: %s\n", err.msg);
        return;
    }
    const dt_device_ops *d = dt_lm_device_ops(g);
    size_t P = dt_lm_num_params(g);
    /* the optimizer state the trainer allocates for this preset: master + m + v */
    void *opt = d->alloc(DT_POOL_DEVICE, DT_MEM_OPTIMIZER,
                         P * (size_t)dt_precision_optimizer_bytes(&p.precision));
    CHECK(opt != NULL);
    CHECK(dt_cuda_meminfo(&f0, &tot, &fb) == 0);
    struct { const char *n; dt_mem_category c; int64_t pred; } rows[] = {
        {"params", DT_MEM_PARAMS, est.params},
        {"grads", DT_MEM_GRADS, est.grads},
        {"optimizer", DT_MEM_OPTIMIZER, est.optimizer},
        {"activations", DT_MEM_ACTIVATIONS, est.activations},
    };
    for (int i = 0; i < 4; i++) {
        int64_t meas = d->mem_current(DT_POOL_DEVICE, rows[i].c);
        double rel = fabs((double)meas - (double)rows[i].pred) / (double)rows[i].pred;
        printf("%-12s measured %12lld predicted %12lld  (%.2f%%)\n", rows[i].n, (long long)meas,
               (long long)rows[i].pred, 100 * rel);
        CHECK(rel <= 0.02);
    }
    /* cuBLAS's workspace comes from the tracked allocator (buffers), as the plan counts it */
    CHECK(d->mem_current(DT_POOL_DEVICE, DT_MEM_BUFFERS) >= DT_CUDA_GEMM_WORKSPACE_BYTES);
    int64_t tracked = 0;
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++) tracked += d->mem_current(DT_POOL_DEVICE, (dt_mem_category)c);
    const int64_t used = (int64_t)(fb - f0);
    printf("cudaMemGetInfo: %.3f GiB used since binding, %.3f GiB tracked, runtime %.1f MiB "
           "(allowance %.0f MiB: lazily loaded kernels, allocator granularity)\n",
           (double)used / (1 << 30), (double)tracked / (1 << 30), (double)(used - tracked) / (1 << 20),
           (double)DT_GPU_RUNTIME_ALLOWANCE / (1 << 20));
    CHECK(used >= tracked);
    CHECK(used <= tracked + DT_GPU_RUNTIME_ALLOWANCE);
    /* the device op the memory probe reads (dt_device_meminfo): the same driver
     * figures, and a peak sampled after each allocation that covers them */
    dt_device_meminfo mi;
    CHECK(d->meminfo && d->meminfo(&mi, 0) == DT_OK);
    CHECK(mi.applicable == 1);
    CHECK(mi.total == (int64_t)tot);
    CHECK(mi.used_at_bind == (int64_t)(tot - fb));
    CHECK(mi.used - mi.used_at_bind >= tracked);
    CHECK(mi.used - mi.used_at_bind <= tracked + DT_GPU_RUNTIME_ALLOWANCE);
    CHECK(mi.peak_used >= mi.used);
    CHECK(mi.tracked_at_peak <= tracked);
    d->free(opt);
    dt_lm_free(g);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_gpu_kernels kernels|gpt2|memory\n");
        return 2;
    }
    if (dt_device_cuda_count() == 0) {
        printf("no CUDA GPU visible: skipped\n");
        return SKIP;
    }
    dt_error err = {0};
    cpu = dt_device_cpu();
    if (dt_device_get(DT_DEVICE_CUDA, 0, &gpu, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (!strcmp(argv[1], "kernels")) test_kernels();
    else if (!strcmp(argv[1], "gpt2")) test_gpt2_step();
    else if (!strcmp(argv[1], "memory")) test_memory();
    else {
        fprintf(stderr, "unknown mode '%s'\n", argv[1]);
        return 2;
    }
    TEST_MAIN_END();
}
