/* cmd_calibrate.c — `dtplan calibrate -o configs/hardware/local.json`: measures
 * this machine with the CPU engine's code paths (dt_op_gemm = OpenBLAS sgemm;
 * 16-bit operands converted to fp32 first, as the CPU engine does; the engine's
 * flash-attention kernels; the fixed cost of one engine op), memory bandwidth
 * (memcpy), and MPI all-reduce bus bandwidth between local ranks, and writes a
 * profile that dt_hardware_load reads. A few seconds. docs/hardware.md
 * "Calibration", docs/time-model.md "Kernel-level terms". */
#include <cjson/cJSON.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dt_cli.h"
#include "dt_hardware.h"
#include "dt_ops.h"

#define CAL_GEMM_N 768                 /* square GEMM size: large enough for OpenBLAS's peak */
#define CAL_GEMM_REPS 8
#define CAL_COPY_BYTES ((size_t)256 << 20)
#define CAL_COPY_REPS 5
#define CAL_ALLREDUCE_FLOATS ((size_t)16 << 20) /* 64 MiB */
#define CAL_ALLREDUCE_REPS 5
/* Device memory of a CPU rank: a quarter of host RAM (the cpu profile's share, docs/hardware.md). */
#define CAL_DEVICE_SHARE 4
/* Attention probe: GPT-2's head size (64) and width, a mid-length sequence; the
 * FLOPs are counted as dt_model_block_fwd_flops_per_seq does (QK^T and PV over
 * the full T x T, 2 FLOPs per multiply-add), backward = 2 x forward. */
#define CAL_ATTN_B 2
#define CAL_ATTN_T 256
#define CAL_ATTN_C 768
#define CAL_ATTN_H 12
#define CAL_ATTN_REPS 3
#define CAL_ATTN_FLOPS_PER_MAC_PAIR 4.0   /* QK^T + PV, 2 FLOPs per multiply-add each */
#define CAL_BWD_OVER_FWD 2.0
/* Op-overhead probe: an engine op on so few elements that its fixed cost (one
 * OpenMP parallel region: fork, barrier, join) is all that is left. */
#define CAL_OP_ELEMS 64
#define CAL_OP_REPS 2000
/* Element-wise probe: a block's LayerNorm, GELU and residual add on CAL_EW_TOKENS
 * tokens of GPT-2's width (C = 768, F = 4C): bytes read + written / time. */
#define CAL_EW_TOKENS 512
#define CAL_EW_C 768
#define CAL_EW_REPS 20
#define CAL_LN_EPS 1e-5f
/* While rank 0 measures, the other ranks wait without spinning (a busy MPI wait
 * would take a core from the measurement): polling period, ns. */
#define CAL_POLL_NS 1000000L
/* CPU AdamW touches ~32 bytes per parameter (reference/planning.md §5.4). */
#define CAL_ADAM_BYTES_PER_PARAM 32.0
/* Peak per core: 2 AVX-512 FMA units x 16 fp32 lanes x 2 FLOPs per cycle at the cpu
 * profile's 2.8 GHz (docs/hardware.md); an estimate, used only for MFU. */
#define CAL_PEAK_PER_CORE (2.8e9 * 2 * 16 * 2)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu, u;
    if (e == 0) u = s; /* zero / subnormal flushed: not timing-relevant */
    else if (e == 31) u = s | 0x7F800000u | (m << 13);
    else u = s | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* FLOP/s of C = A·B (n x n) including the conversion of 16-bit operands when conv != NULL. */
static double gemm_flops(float (*conv)(uint16_t)) {
    const int n = CAL_GEMM_N;
    size_t nn = (size_t)n * n;
    float *a = malloc(nn * 4), *b = malloc(nn * 4), *c = malloc(nn * 4);
    uint16_t *a16 = malloc(nn * 2), *b16 = malloc(nn * 2);
    if (!a || !b || !c || !a16 || !b16) return 0;
    for (size_t i = 0; i < nn; i++) {
        a16[i] = (uint16_t)(0x3C00u + (i % 97)); /* small positive values in either format */
        b16[i] = (uint16_t)(0x3C00u + (i % 89));
        a[i] = (float)(i % 7) * 1e-3f;
        b[i] = (float)(i % 5) * 1e-3f;
    }
    double best = 1e30;
    for (int r = 0; r < CAL_GEMM_REPS + 1; r++) {
        double t0 = now_s();
        if (conv)
            for (size_t i = 0; i < nn; i++) a[i] = conv(a16[i]), b[i] = conv(b16[i]);
        dt_op_gemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double t = now_s() - t0;
        if (r > 0 && t < best) best = t; /* first run warms up threads and caches */
    }
    free(a), free(b), free(c), free(a16), free(b16);
    return 2.0 * n * (double)n * n / best;
}

static float *filled(size_t n) {
    float *p = malloc(n * sizeof *p);
    if (p)
        for (size_t i = 0; i < n; i++) p[i] = (float)(i % 17) * 1e-2f; /* small, finite softmax inputs */
    return p;
}

/* FLOP/s of the engine's flash-attention forward + backward, best of reps. */
static double attention_flops(void) {
    const int64_t B = CAL_ATTN_B, T = CAL_ATTN_T, C = CAL_ATTN_C, H = CAL_ATTN_H;
    size_t nqkv = (size_t)(B * T * 3 * C), nout = (size_t)(B * T * C), nlse = (size_t)(B * H * T);
    float *qkv = filled(nqkv), *dqkv = filled(nqkv), *out = filled(nout), *dout = filled(nout);
    float *lse = filled(nlse);
    double best = 1e30;
    if (qkv && dqkv && out && dout && lse)
        for (int r = 0; r < CAL_ATTN_REPS + 1; r++) {
            double t0 = now_s();
            dt_op_attention_forward_flash(out, lse, qkv, B, T, C, H);
            dt_op_attention_backward_flash(dqkv, dout, qkv, out, lse, B, T, C, H);
            double t = now_s() - t0;
            if (r > 0 && t < best) best = t;
        }
    free(qkv), free(dqkv), free(out), free(dout), free(lse);
    double fwd = CAL_ATTN_FLOPS_PER_MAC_PAIR * (double)B * (double)T * (double)T * (double)C;
    return best < 1e30 ? (1.0 + CAL_BWD_OVER_FWD) * fwd / best : 0.0;
}

/* Fixed seconds per engine op: a residual add of CAL_OP_ELEMS, best of reps. */
static double op_overhead(void) {
    float *a = filled(CAL_OP_ELEMS), *b = filled(CAL_OP_ELEMS), *c = filled(CAL_OP_ELEMS);
    double best = 1e30;
    if (a && b && c)
        for (int r = 0; r < CAL_OP_REPS; r++) {
            double t0 = now_s();
            dt_op_residual_forward(c, a, b, CAL_OP_ELEMS);
            double t = now_s() - t0;
            if (t < best) best = t;
        }
    free(a), free(b), free(c);
    return best < 1e30 ? best : 0.0;
}

/* Bytes/s of the engine's element-wise kernels: layernorm (read + write C), GELU
 * (read + write 4C), residual (read 2C, write C) per token, fp32. */
static double elementwise_bw(void) {
    const int64_t N = CAL_EW_TOKENS, C = CAL_EW_C, F = 4 * CAL_EW_C;
    float *x = filled((size_t)(N * F)), *y = filled((size_t)(N * F)), *z = filled((size_t)(N * C));
    float *w = filled((size_t)C), *bb = filled((size_t)C), *mean = filled((size_t)N), *rstd = filled((size_t)N);
    double best = 1e30;
    if (x && y && z && w && bb && mean && rstd)
        for (int r = 0; r < CAL_EW_REPS + 1; r++) {
            double t0 = now_s();
            dt_op_layernorm_forward(z, mean, rstd, x, w, bb, N, C, CAL_LN_EPS);
            dt_op_gelu_forward(y, x, N * F);
            dt_op_residual_forward(z, x, y, N * C);
            double t = now_s() - t0;
            if (r > 0 && t < best) best = t;
        }
    free(x), free(y), free(z), free(w), free(bb), free(mean), free(rstd);
    double bytes = (double)N * (double)(2 * C + 2 * F + 3 * C) * sizeof(float);
    return best < 1e30 ? bytes / best : 0.0;
}

/* Ranks other than 0 wait here, asleep, until rank 0 has measured. */
static void quiet_wait(void) {
    MPI_Request q;
    int done = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &q);
    struct timespec ts = {0, CAL_POLL_NS};
    for (MPI_Test(&q, &done, MPI_STATUS_IGNORE); !done; MPI_Test(&q, &done, MPI_STATUS_IGNORE))
        nanosleep(&ts, NULL);
}

static double copy_bw(void) {
    char *s = malloc(CAL_COPY_BYTES), *d = malloc(CAL_COPY_BYTES);
    if (!s || !d) return 0;
    memset(s, 1, CAL_COPY_BYTES);
    memset(d, 0, CAL_COPY_BYTES);
    double best = 1e30;
    volatile char sink = 0;
    for (int r = 0; r < CAL_COPY_REPS; r++) {
        s[r] = (char)r;
        double t0 = now_s();
        memcpy(d, s, CAL_COPY_BYTES);
        double t = now_s() - t0;
        sink += d[r];
        if (t < best) best = t;
    }
    (void)sink;
    free(s), free(d);
    return 2.0 * (double)CAL_COPY_BYTES / best; /* read + write */
}

/* nccl-tests busbw of an all-reduce among the ranks of MPI_COMM_WORLD. */
static double allreduce_busbw(int *nranks) {
    MPI_Comm_size(MPI_COMM_WORLD, nranks);
    float *buf = calloc(CAL_ALLREDUCE_FLOATS, sizeof *buf);
    if (!buf) return 0;
    double best = 1e30;
    for (int r = 0; r < CAL_ALLREDUCE_REPS + 1; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)CAL_ALLREDUCE_FLOATS, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t = MPI_Wtime() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (r > 0 && t < best) best = t;
    }
    free(buf);
    double n = *nranks, S = (double)CAL_ALLREDUCE_FLOATS * sizeof(float);
    return 2.0 * (n - 1.0) / n * S / best;
}

static int write_profile(const char *path, const dt_hardware *base, double f32, double f16b, double f16h,
                         double bw, double busbw, int nranks, double attn, double op_s, double ew) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t host = pages > 0 && psz > 0 ? (int64_t)pages * psz : base->host_mem_bytes;
    double peak = (double)(cores > 0 ? cores : 1) * CAL_PEAK_PER_CORE;
    double ach[3] = {f32, f16b, f16h};
    cJSON *o = cJSON_CreateObject(), *pk = cJSON_CreateObject(), *ac = cJSON_CreateObject();
    cJSON *nets = cJSON_CreateObject();
    static const char *const dn[3] = {"fp32", "bf16", "fp16"};
    for (int i = 0; i < 3; i++) {
        cJSON_AddNumberToObject(pk, dn[i], peak > ach[i] ? peak : ach[i]);
        cJSON_AddNumberToObject(ac, dn[i], ach[i]);
    }
    char src[512];
    snprintf(src, sizeof src,
             "dtplan calibrate: sgemm %dx%d (16-bit converted first), memcpy %zu MiB, MPI_Allreduce 64 MiB on %d rank(s), "
             "engine flash attention B=%d T=%d C=%d H=%d fwd+bwd, engine residual add of %d elements, "
             "engine layernorm+gelu+residual on %d x %d; the rest from the cpu profile",
             CAL_GEMM_N, CAL_GEMM_N, CAL_COPY_BYTES >> 20, nranks, CAL_ATTN_B, CAL_ATTN_T, CAL_ATTN_C, CAL_ATTN_H,
             CAL_OP_ELEMS, CAL_EW_TOKENS, CAL_EW_C);
    cJSON_AddStringToObject(o, "format", "dtplan.hardware/1");
    cJSON_AddStringToObject(o, "name", "local");
    cJSON_AddStringToObject(o, "source", src);
    cJSON_AddStringToObject(o, "device", "cpu");
    cJSON_AddNumberToObject(o, "device_mem_bytes", (double)(host / CAL_DEVICE_SHARE));
    cJSON_AddNumberToObject(o, "reserve_bytes", (double)base->reserve_bytes);
    cJSON_AddItemToObject(o, "peak_flops", pk);
    cJSON_AddItemToObject(o, "achievable_flops", ac);
    cJSON_AddNumberToObject(o, "mem_bw", bw);
    cJSON_AddNumberToObject(o, "intra_busbw", busbw > 0 ? busbw : base->intra_busbw);
    cJSON_AddNumberToObject(o, "intra_alpha_s", base->intra_alpha_s);
    cJSON_AddStringToObject(o, "default_interconnect", base->interconnect);
    /* the network table is not measurable from one machine: the cpu profile's */
    static const char *const links[] = {"10Gb", "25Gb", "100Gb", "200Gb", "400Gb"};
    for (int i = 0; i < 5; i++) {
        dt_hardware h;
        dt_error e;
        if (dt_hardware_load("cpu", links[i], &h, &e)) continue;
        cJSON *n = cJSON_CreateObject();
        cJSON_AddNumberToObject(n, "busbw", h.inter_busbw);
        cJSON_AddNumberToObject(n, "alpha_s", h.inter_alpha_s);
        cJSON_AddItemToObject(nets, links[i], n);
    }
    cJSON_AddItemToObject(o, "interconnects", nets);
    cJSON_AddNumberToObject(o, "h2d_bw", bw / 2.0); /* one-way copy */
    cJSON_AddNumberToObject(o, "host_mem_bytes", (double)host);
    cJSON_AddNumberToObject(o, "cpu_adam_params_per_s", bw / CAL_ADAM_BYTES_PER_PARAM);
    cJSON_AddNumberToObject(o, "nvme_bw", base->nvme_bw);
    cJSON_AddNumberToObject(o, "nvme_bytes", (double)base->nvme_bytes);
    if (attn > 0) cJSON_AddNumberToObject(o, "attention_flops", attn);
    if (op_s > 0) cJSON_AddNumberToObject(o, "op_overhead_s", op_s);
    if (ew > 0) cJSON_AddNumberToObject(o, "elementwise_bw", ew);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return 1;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f) ok = (fclose(f) == 0) && ok;
    free(text);
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "dtplan: calibrate: cannot write '%s'\n", path);
        remove(tmp);
        return 1;
    }
    dt_hardware check;
    dt_error e;
    if (dt_hardware_load(path, NULL, &check, &e)) {
        fprintf(stderr, "dtplan: calibrate: wrote an unloadable profile: %s\n", e.msg);
        return 1;
    }
    return 0;
}

/* Re-runs this command under `mpirun -n 2` so the collective can be measured. */
static int relaunch_under_mpirun(const char *out) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = '\0';
    setenv("DT_CALIBRATE_CHILD", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "mpirun -n 2 --oversubscribe '%s' calibrate -o '%s' >/dev/null 2>&1", self, out);
    return system(cmd);
}

int dt_cmd_calibrate(int argc, char **argv) {
    const char *out = NULL;
    int no_mpi = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: dtplan calibrate -o configs/hardware/local.json [--no-mpi]\n"
                   "  measures GEMM FLOP/s (fp32, bf16, fp16), memory bandwidth and MPI all-reduce\n"
                   "  bus bandwidth between 2 local ranks; writes a hardware profile\n");
            return 0;
        } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--no-mpi")) {
            no_mpi = 1;
        } else {
            fprintf(stderr, "dtplan: calibrate: unknown option '%s' (usage: dtplan calibrate -o local.json)\n", argv[i]);
            return 2;
        }
    }
    if (!out) {
        fprintf(stderr, "dtplan: calibrate: -o PATH is required (example: -o configs/hardware/local.json)\n");
        return 2;
    }
    if (strlen(out) > 4000) {
        fprintf(stderr, "dtplan: calibrate: -o path too long\n");
        return 2;
    }
    dt_hardware base;
    dt_error e;
    if (dt_hardware_load("cpu", NULL, &base, &e)) {
        fprintf(stderr, "dtplan: calibrate: %s\n", e.msg);
        return 1;
    }
    int under_mpi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE");
    if (!under_mpi && !no_mpi && !getenv("DT_CALIBRATE_CHILD")) {
        if (relaunch_under_mpirun(out) == 0) {
            dt_hardware h;
            if (dt_hardware_load(out, NULL, &h, &e) == DT_OK) {
                printf("calibrate: wrote %s (fp32 %.1f, bf16 %.1f GFLOP/s; attention %.1f GFLOP/s; op %.2f us; "
                       "element-wise %.1f GB/s; memcpy %.1f GB/s; all-reduce busbw %.2f GB/s on 2 ranks)\n",
                       out, h.achievable_flops[0] / 1e9, h.achievable_flops[1] / 1e9, h.attention_flops / 1e9,
                       h.op_overhead_s * 1e6, h.elementwise_bw / 1e9, h.mem_bw / 1e9, h.intra_busbw / 1e9);
                return 0;
            }
        }
        fprintf(stderr, "dtplan: calibrate: mpirun -n 2 failed; measuring without MPI (intra_busbw from the cpu profile)\n");
    }
    int rank = 0, nranks = 1;
    double busbw = 0;
    if (under_mpi) {
        MPI_Init(NULL, NULL);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        busbw = allreduce_busbw(&nranks);
    }
    int rc = 0;
    if (rank == 0) {
        /* per-rank compute and memory figures, measured while the other ranks idle */
        double f32 = gemm_flops(NULL), fb = gemm_flops(bf16_to_f32), fh = gemm_flops(f16_to_f32);
        double bw = copy_bw(), attn = attention_flops(), op_s = op_overhead(), ew = elementwise_bw();
        rc = write_profile(out, &base, f32, fb, fh, bw, busbw, nranks, attn, op_s, ew);
        if (!rc)
            printf("calibrate: wrote %s (fp32 %.1f, bf16 %.1f, fp16 %.1f GFLOP/s; attention %.1f GFLOP/s; op %.2f us; "
                   "element-wise %.1f GB/s; memcpy %.1f GB/s; busbw %.2f GB/s on %d rank(s))\n",
                   out, f32 / 1e9, fb / 1e9, fh / 1e9, attn / 1e9, op_s * 1e6, ew / 1e9, bw / 1e9, busbw / 1e9,
                   nranks);
    }
    if (under_mpi) {
        quiet_wait();   /* rank 0's part releases the sleeping ranks (nonblocking on all: MPI does not
                         * match a blocking barrier with a nonblocking one) */
        MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Finalize();
    }
    return rc;
}
