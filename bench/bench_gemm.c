/* bench_gemm.c — the CPU GEMM kernels of engine/device/dt_gemm_cpu.h side by side,
 * in GFLOP/s, at GPT-2 124M's shapes (B x T = 1024 token rows), fp32 and bf16, for
 * each thread count asked.
 *
 *   bench_gemm [--threads 1,2] [--reps R] [--rows N] [--quick] [--clock wall|cpu]
 *              [--describe]
 *
 * --clock cpu divides by the process's CPU time per thread instead of the wall
 * clock: on a machine shared with other jobs it leaves out the time the kernel
 * was not running (preempted), so kernels compare fairly under load; it still
 * counts spinning and waiting threads (a badly balanced kernel pays for them).
 * --describe prints only the kernels this environment chooses (the engine's
 * start-up choice: DT_GEMM, the rule) and exits.
 * Columns: openblas (cblas_sgemm, the core OPENBLAS_CORETYPE or CPUID picks),
 * onednn (dnnl_sgemm), onednn-bf16 (the matmul primitive, bf16 x bf16 -> fp32),
 * widen-bf16 (bf16 widened to fp32, then the chosen fp32 kernel: what the engine
 * did before oneDNN). Every kernel runs once per repeat in turn (interleaved, so
 * a busy moment hits all of them); the best repeat counts (the kernel's rate
 * undisturbed). OPENBLAS_CORETYPE is read when OpenBLAS loads, so the other core
 * needs another process: bench/bench_gemm.sh runs both. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dt_dtype.h"
#include "dt_gemm_cpu.h"

#define DEFAULT_ROWS 1024   /* GPT-2 B = 4 x T = 256 tokens */
#define DEFAULT_REPS 3
#define GPT2_C 768
#define GPT2_F 3072
#define GPT2_V 50257
#define MAX_THREADS_LIST 8
#define NKERN 4
#define FLOPS_PER_MAC 2.0

typedef struct {
    const char *what;
    int ta, tb;
    int64_t M, N, K;   /* M and K given in token rows where they are (filled at start) */
} shape;

static clockid_t g_clock = CLOCK_MONOTONIC;
static double g_clock_div = 1.0;   /* CPU clock: the thread count (CPU seconds per second) */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return ((double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec) / g_clock_div;
}

static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((int64_t)(seed >> 40) % 2001 - 1000) * 1e-3f;   /* [-1, 1] */
    }
}

static int usage(const char *msg) {
    fprintf(stderr, "bench_gemm: %s\nusage: bench_gemm [--threads 1,2] [--reps R] [--rows N] "
                    "[--quick] [--clock wall|cpu] [--describe]\n", msg);
    return 2;
}

int main(int argc, char **argv) {
    int threads[MAX_THREADS_LIST] = {1, 2}, nthreads = 2, reps = DEFAULT_REPS, quick = 0;
    int64_t rows = DEFAULT_ROWS;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quick")) {
            quick = 1;
            continue;
        }
        if (!strcmp(a, "--describe")) {
            char d[512];
            printf("gemm: %s\n", dt_gemm_cpu_describe(d, sizeof d));
            return 0;
        }
        if (i + 1 >= argc) return usage("missing value after the last option");
        const char *v = argv[++i];
        if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--rows")) rows = atoll(v);
        else if (!strcmp(a, "--clock")) {
            if (!strcmp(v, "cpu")) g_clock = CLOCK_PROCESS_CPUTIME_ID;
            else if (strcmp(v, "wall")) return usage("--clock must be wall or cpu");
        }
        else if (!strcmp(a, "--threads")) {
            nthreads = 0;
            for (char *p = (char *)v; *p && nthreads < MAX_THREADS_LIST;) {
                threads[nthreads++] = (int)strtol(p, &p, 10);
                if (*p == ',') p++;
                else if (*p) return usage("--threads takes a comma-separated list");
            }
        } else return usage("unknown option");
    }
    if (reps < 1 || rows < 1) return usage("--reps and --rows must be positive");
    for (int t = 0; t < nthreads; t++)
        if (threads[t] < 1) return usage("thread counts must be positive");

    /* GPT-2 124M's GEMMs at `rows` tokens: the forward of each linear (inp @ W),
     * the MLP's two backward GEMMs (dinp = dout W^T, dW = inp^T dout) and the tied
     * classifier (lnf @ wte^T); --quick leaves out the classifier. */
    shape shapes[] = {
        {"attn.c_attn fwd", 0, 0, rows, 3 * GPT2_C, GPT2_C},
        {"mlp.c_fc fwd", 0, 0, rows, GPT2_F, GPT2_C},
        {"mlp.c_proj fwd", 0, 0, rows, GPT2_C, GPT2_F},
        {"mlp.c_fc bwd dinp", 0, 1, rows, GPT2_C, GPT2_F},
        {"mlp.c_fc bwd dW", 1, 0, GPT2_C, GPT2_F, rows},
        {"lm_head fwd", 0, 1, rows, GPT2_V, GPT2_C},
    };
    int nshapes = (int)(sizeof shapes / sizeof shapes[0]) - (quick ? 1 : 0);

    char desc[512];
    dt_error err = {0};
    if (dt_gemm_cpu_init(&err)) fprintf(stderr, "bench_gemm: %s\n", err.msg);
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("gemm: %s\n", dt_gemm_cpu_describe(desc, sizeof desc));
    printf("OPENBLAS_CORETYPE=%s, best of %d interleaved repeats, GFLOP/s (%s)\n",
           coretype ? coretype : "(unset)", reps,
           g_clock == CLOCK_MONOTONIC ? "wall clock" : "per CPU-second of each thread");
    const char *kname[NKERN] = {"openblas", "onednn", "onednn-bf16", "widen-bf16"};
    printf("%-18s %-5s %5s %6s %6s %3s | %9s %9s %11s %10s\n", "gemm", "op", "M", "N", "K", "thr",
           kname[0], kname[1], kname[2], kname[3]);

    for (int s = 0; s < nshapes; s++) {
        const shape *sh = &shapes[s];
        int64_t M = sh->M, N = sh->N, K = sh->K;
        int64_t lda = sh->ta ? M : K, ldb = sh->tb ? K : N, ldc = N;
        size_t na = (size_t)(M * K), nb = (size_t)(K * N), nc = (size_t)(M * N);
        float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
        float *c = malloc(nc * sizeof(float));
        uint16_t *a16 = malloc(na * sizeof(uint16_t)), *b16 = malloc(nb * sizeof(uint16_t));
        if (!a || !b || !c || !a16 || !b16) {
            fprintf(stderr, "bench_gemm: out of memory at %s\n", sh->what);
            return 1;
        }
        fill(a, na, 1 + (uint64_t)s);
        fill(b, nb, 101 + (uint64_t)s);
        dt_convert(a16, DT_DTYPE_BF16, a, DT_DTYPE_FP32, na);
        dt_convert(b16, DT_DTYPE_BF16, b, DT_DTYPE_FP32, nb);
        double flops = FLOPS_PER_MAC * (double)M * (double)N * (double)K;
        for (int t = 0; t < nthreads; t++) {
            omp_set_num_threads(threads[t]);
            g_clock_div = g_clock == CLOCK_MONOTONIC ? 1.0 : (double)threads[t];
            double best[NKERN];
            for (int k = 0; k < NKERN; k++) best[k] = 1e30;
            for (int r = 0; r <= reps; r++) {   /* repeat 0 warms up (and JIT-compiles) */
                for (int k = 0; k < NKERN; k++) {
                    double t0 = now_s();
                    int rc;
                    if (k < 2)
                        rc = dt_gemm_cpu_f32(k == 0 ? DT_GEMM_OPENBLAS : DT_GEMM_ONEDNN, sh->ta,
                                             sh->tb, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
                    else
                        rc = dt_gemm_cpu_bf16(k == 2 ? DT_GEMM_ONEDNN : DT_GEMM_WIDEN, sh->ta,
                                              sh->tb, M, N, K, 1.0f, a16, lda, b16, ldb, 0.0f, c,
                                              DT_DTYPE_FP32, ldc);
                    double dt = now_s() - t0;
                    if (rc) {
                        fprintf(stderr, "bench_gemm: %s on %s failed (%d)\n", kname[k], sh->what,
                                rc);
                        return 1;
                    }
                    if (r > 0 && dt < best[k]) best[k] = dt;
                }
            }
            printf("%-18s %-5s %5lld %6lld %6lld %3d |", sh->what,
                   sh->ta ? "T,N" : sh->tb ? "N,T" : "N,N", (long long)M, (long long)N,
                   (long long)K, threads[t]);
            printf(" %9.1f %9.1f %11.1f %10.1f\n", flops / best[0] / 1e9, flops / best[1] / 1e9,
                   flops / best[2] / 1e9, flops / best[3] / 1e9);
            fflush(stdout);
        }
        free(a);
        free(b);
        free(c);
        free(a16);
        free(b16);
    }
    return 0;
}
