/* bench_gpt2.c — CPU backend throughput: one full forward + backward of a GPT-2
 * (default GPT-2 124M, B=4, T=64, fp32) against this machine's own GEMM
 * ceiling, a large cblas_sgemm measured in the same run.
 *
 *   bench_gpt2 [--model NAME] [--batch B] [--seq T] [--steps N] [--precision P]
 *              [--ckpt K] [--attention flash|materialized]
 *
 * Achieved FLOP/s counts 6 * N_params * tokens (forward 2, backward 4 FLOPs per
 * parameter per token; Kaplan et al. 2020 §2.1) plus the causal attention the
 * engine performs: per layer, head and (query i, key j <= i) pair, 2*hs FLOPs
 * for q.k and 2*hs for p*v in forward, twice that in backward (12*hs in all).
 * Recompute is not counted (it is overhead, as MFU conventions treat it). Also
 * prints the process CPU time per step, steadier than wall time on a shared machine. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dt_gemm_cpu.h"
#include "dt_lm.h"
#include "dt_memtrack.h"

/* The ceiling GEMM: square, large enough to run at the BLAS's peak rate. */
#define CEIL_DIM 2048
#define CEIL_REPS 3
#define FLOPS_PER_PARAM_TOKEN 6.0   /* 2 forward + 4 backward */
#define ATT_FLOPS_PER_PAIR_HS 12.0  /* (2 + 2) forward, (4 + 4) backward */

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU time of the whole process (all threads): on a shared machine a step's CPU
 * time varies far less than its wall time, so precisions compare on it too */
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static double gemm_ceiling_gflops(void) {
    size_t n = CEIL_DIM;
    float *a = malloc(n * n * sizeof(float)), *b = malloc(n * n * sizeof(float)),
          *c = malloc(n * n * sizeof(float));
    if (!a || !b || !c) return 0.0;
    for (size_t i = 0; i < n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
        c[i] = 0.0f;
    }
    double best = 1e30;
    for (int r = 0; r < CEIL_REPS + 1; r++) {   /* the first call warms up */
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a,
                    (int)n, b, (int)n, 0.0f, c, (int)n);
        double t = now_s() - t0;
        if (r > 0 && t < best) best = t;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * (double)n * n * n / best / 1e9;
}

static int usage(const char *msg) {
    fprintf(stderr, "bench_gpt2: %s\nusage: bench_gpt2 [--model NAME] [--batch B] [--seq T] "
                    "[--steps N] [--precision fp32|mixed-bf16|mixed-fp16|pure-bf16] [--ckpt K] "
                    "[--attention flash|materialized]\n", msg);
    return 2;
}

int main(int argc, char **argv) {
    const char *model = "gpt2", *precision = "fp32";
    int64_t B = 4, T = 64, steps = 3, K = 0;
    dt_attention attn = DT_ATTN_FLASH;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage("missing value after the last option");
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--batch")) B = atoll(v);
        else if (!strcmp(a, "--seq")) T = atoll(v);
        else if (!strcmp(a, "--steps")) steps = atoll(v);
        else if (!strcmp(a, "--ckpt")) K = atoll(v);
        else if (!strcmp(a, "--precision")) precision = v;
        else if (!strcmp(a, "--attention")) {
            if (!strcmp(v, "flash")) attn = DT_ATTN_FLASH;
            else if (!strcmp(v, "materialized")) attn = DT_ATTN_MATERIALIZED;
            else return usage("--attention must be flash or materialized");
        } else return usage("unknown option");
        i++;
    }
    if (B < 1 || T < 1 || steps < 1) return usage("--batch, --seq and --steps must be positive");

    dt_error err = {0};
    dt_model m;
    dt_precision_preset pp;
    dt_precision prec;
    if (dt_model_resolve(model, &m, &err) || dt_precision_parse_preset(precision, &pp, &err)) {
        fprintf(stderr, "bench_gpt2: %s\n", err.msg);
        return 2;
    }
    dt_precision_from_preset(pp, &prec);

    char gemm[256];
    printf("machine: %d OpenMP threads\n", omp_get_max_threads());
    printf("gemm: %s\n", dt_gemm_cpu_describe(gemm, sizeof gemm));
    double ceil_gf = gemm_ceiling_gflops();
    printf("GEMM ceiling: cblas_sgemm %dx%dx%d: %.1f GFLOP/s\n", CEIL_DIM, CEIL_DIM, CEIL_DIM,
           ceil_gf);

    dt_lm *g = NULL;
    if (dt_lm_create(&m, &prec, B, T, K, attn, &g, &err)) {
        fprintf(stderr, "bench_gpt2: %s\n", err.msg);
        return 2;
    }
    dt_lm_init_random(g, 1337);
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(B * T)),
            *tg = malloc(sizeof(int32_t) * (size_t)(B * T));
    uint64_t s = 42;
    for (int64_t i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        in[i] = (int32_t)((s >> 33) % (uint64_t)m.vocab);
        tg[i] = (int32_t)((s >> 13) % (uint64_t)m.vocab);
    }
    double nparams = (double)dt_lm_num_params(g);
    double hs = (double)(m.hidden / m.n_head);
    double pairs = (double)T * (double)(T + 1) / 2.0;
    double flops = FLOPS_PER_PARAM_TOKEN * nparams * (double)(B * T) +
                   ATT_FLOPS_PER_PAIR_HS * hs * pairs * (double)(m.n_layer * m.n_head * B);

    float loss = 0.0f;
    double best = 1e30, total = 0.0, cpu_total = 0.0;
    for (int64_t it = 0; it <= steps; it++) {   /* iteration 0 warms up */
        double t0 = now_s(), c0 = cpu_s();
        dt_lm_zero_grad(g);
        if (dt_lm_forward(g, in, tg, &loss, &err) || dt_lm_backward(g, 1.0f, &err)) {
            fprintf(stderr, "bench_gpt2: %s\n", err.msg);
            return 1;
        }
        double t = now_s() - t0;
        if (it > 0) {
            cpu_total += cpu_s() - c0;
            total += t;
            if (t < best) best = t;
        }
    }
    double mean = total / (double)steps;
    double gf = flops / mean / 1e9;
    printf("model: %s, %.0f params, B=%lld T=%lld, %s, %s attention, %lld checkpointed\n",
           m.name, nparams, (long long)B, (long long)T, precision,
           attn == DT_ATTN_FLASH ? "flash" : "materialized", (long long)K);
    printf("fwd+bwd: mean %.1f ms (best %.1f ms) over %lld steps, loss %.4f\n", mean * 1e3,
           best * 1e3, (long long)steps, loss);
    printf("fwd+bwd CPU time: mean %.1f ms per step (all %d threads)\n",
           cpu_total / (double)steps * 1e3, omp_get_max_threads());
    printf("tokens/s: %.1f\n", (double)(B * T) / mean);
    printf("achieved: %.1f GFLOP/s (%.2f GFLOP per step)\n", gf, flops / 1e9);
    printf("ratio to GEMM ceiling: %.1f%%\n", 100.0 * gf / ceil_gf);
    printf("memory: params %.1f MiB, grads %.1f MiB, activations %.1f MiB, buffers %.1f MiB\n",
           dt_mem_current(DT_POOL_DEVICE, DT_MEM_PARAMS) / 1048576.0,
           dt_mem_current(DT_POOL_DEVICE, DT_MEM_GRADS) / 1048576.0,
           dt_mem_current(DT_POOL_DEVICE, DT_MEM_ACTIVATIONS) / 1048576.0,
           dt_mem_current(DT_POOL_DEVICE, DT_MEM_BUFFERS) / 1048576.0);
    free(in);
    free(tg);
    dt_lm_free(g);
    return 0;
}
