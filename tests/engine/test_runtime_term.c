/* test_runtime_term.c — the CPU runtime term (docs/memory-model.md "The CPU runtime term").
 *
 * 1. The planner's MPI-temporary and I/O-chunk terms (planner/memory.c dt_memory_cpu_runtime)
 *    are the engine's own (engine/dist/zero.c dt_zero_untracked_bytes, rank 0) for GPT-2
 *    tiny / 124M / 355M, stages 0-3, worlds 1 / 2 / 4, overlap on and off, DeepSpeed's
 *    bucket and a small one; the plan's reserve on the CPU is base + max(comm, io); the base
 *    is the profile's measured runtime (runtime_mpi_bytes on more than one rank), else its
 *    reserve_bytes.
 * 2. Under mpirun (engine_runtime_term_np2): dt_comm's MPI all-reduce (fp32, bf16) and reduce-scatter of
 *    several DT_COMM_PIECE_BYTES pieces give the right sums (in place too), and a call raises
 *    the process's peak RSS by at most what the term counts for it (rank 0: libnbc's
 *    temporary and the packed piece, two pieces; other ranks one), not by the call's size. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_comm.h"
#include "dt_dtype.h"
#include "dt_memory.h"
#include "dt_model.h"
#include "dt_test.h"
#include "dt_zero.h"

#define MIB ((int64_t)1 << 20)
/* allowance for what else a call may touch (MPI's shared-memory fragments, libnbc's
 * schedule, the stack): small beside the pieces the check is about */
#define RSS_SLACK (4 * MIB)

/* 0 in a sanitized build (DT_TEST_SANITIZED=1, tests/engine/CMakeLists.txt):
 * AddressSanitizer keeps freed blocks in its quarantine instead of reusing them, so the
 * pieces' temporaries stay resident one after another and the peak is their sum. The
 * sums are still checked there; the RSS bounds only in a plain build. */
static int rss_bounds_apply(void) {
    const char *s = getenv("DT_TEST_SANITIZED");
    return !(s && s[0] == '1');
}

static void cpu_plan(dt_plan *p, const char *model, int64_t world) {
    dt_error e = {0};
    dt_plan_defaults(p);
    int rc = dt_model_resolve(model, &p->model, &e);
    if (rc) fprintf(stderr, "model %s: %s\n", model, e.msg);
    CHECK(rc == 0);
    p->cluster.device = DT_DEVICE_CPU;
    p->cluster.hw.device = DT_DEVICE_CPU;
    p->cluster.nodes = 1;
    p->cluster.gpus_per_node = world;
    p->parallel.world_size = world;
    p->precision.param = p->precision.grad = p->precision.activation = DT_DTYPE_FP32;
    p->precision.has_master = 0;
    p->batch.seq_len = 64;
}

static void test_planner_equals_engine(void) {
    static const char *const models[] = {"gpt2-tiny", "gpt2", "gpt2-medium"};
    static const int64_t worlds[] = {1, 2, 4};
    static const int64_t buckets[] = {500000000, 1000000};
    int checked = 0;
    for (int mi = 0; mi < 3; mi++)
        for (int wi = 0; wi < 3; wi++)
            for (int s = 0; s <= 3; s++)
                for (int ov = 0; ov <= 1; ov++)
                    for (int bi = 0; bi < 2; bi++) {
                        dt_plan p;
                        cpu_plan(&p, models[mi], worlds[wi]);
                        p.parallel.zero_stage = s;
                        p.parallel.overlap_comm = ov;
                        p.parallel.reduce_bucket_elems = buckets[bi];
                        p.cluster.hw.reserve_bytes = 256 * MIB;
                        p.cluster.hw.runtime_bytes = 39 * MIB;
                        p.cluster.hw.runtime_mpi_bytes = 48 * MIB;
                        dt_mem_runtime rt;
                        CHECK(dt_memory_cpu_runtime(&p, 0, &rt) == 1);
                        int64_t comm = -1, io = -1;
                        dt_zero_untracked_bytes(&p, 0, &comm, &io);
                        CHECK_EQ_I64(rt.comm, comm);
                        CHECK_EQ_I64(rt.io, io);
                        CHECK_EQ_I64(rt.base, worlds[wi] > 1 ? 48 * MIB : 39 * MIB);
                        dt_mem_breakdown m;
                        dt_error e = {0};
                        CHECK(dt_memory_estimate(&p, &m, &e) == 0);
                        CHECK_EQ_I64(m.reserve, rt.base + (rt.comm > rt.io ? rt.comm : rt.io));
                        if (worlds[wi] == 1) CHECK_EQ_I64(comm, 0);
                        /* no rank holds more than rank 0 */
                        int64_t c1, io1;
                        dt_zero_untracked_bytes(&p, 1, &c1, &io1);
                        CHECK(c1 <= comm && io1 == io);
                        checked++;
                    }
    CHECK(checked == 3 * 3 * 4 * 2 * 2);
    /* the bound is a piece, not the call: GPT-2 124M at stage 0 all-reduces 474 MiB of
     * gradients, and MPI holds one 32 MiB piece of it */
    dt_plan p;
    cpu_plan(&p, "gpt2", 2);
    int64_t comm, io;
    dt_zero_untracked_bytes(&p, 0, &comm, &io);
    CHECK_EQ_I64(comm, (int64_t)DT_COMM_PIECE_BYTES);
    CHECK_EQ_I64(io, (int64_t)DT_IO_CHUNK_BYTES);
    /* stage 1: rank 0 holds libnbc's temporary and the packed piece of the embedding's
     * reduce-scatter (its gradient, 157 MB, exceeds a piece), rank 1 the packed piece */
    p.parallel.zero_stage = 1;
    dt_zero_untracked_bytes(&p, 0, &comm, &io);
    CHECK_EQ_I64(comm, 2 * (int64_t)DT_COMM_PIECE_BYTES);
    dt_zero_untracked_bytes(&p, 1, &comm, &io);
    CHECK_EQ_I64(comm, (int64_t)DT_COMM_PIECE_BYTES);
    /* a profile without a measured runtime: its reserve */
    p.cluster.hw.reserve_bytes = 256 * MIB;
    p.cluster.hw.runtime_bytes = p.cluster.hw.runtime_mpi_bytes = 0;
    dt_mem_runtime rt;
    CHECK(dt_memory_cpu_runtime(&p, 0, &rt) == 1);
    CHECK_EQ_I64(rt.base, 256 * MIB);
    /* only runtime_bytes measured (calibrate --no-mpi): used on any world */
    p.cluster.hw.runtime_bytes = 40 * MIB;
    CHECK(dt_memory_cpu_runtime(&p, 0, &rt) == 1);
    CHECK_EQ_I64(rt.base, 40 * MIB);
    /* GPU plans keep the profile's reserve and have no CPU runtime term */
    p.cluster.device = p.cluster.hw.device = DT_DEVICE_CUDA;
    CHECK(dt_memory_cpu_runtime(&p, 0, &rt) == 0);
    dt_mem_breakdown m;
    dt_error e = {0};
    CHECK(dt_memory_estimate(&p, &m, &e) == 0);
    CHECK_EQ_I64(m.reserve, 256 * MIB);
}

/* ---- under MPI ---- */

static int64_t status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long v = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) {
            v = atoll(line + n);
            break;
        }
    if (f) fclose(f);
    return v;
}

/* resets the peak to the current RSS (proc(5)); 0 where that is refused */
static int reset_peak(void) {
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd < 0) return 0;
    int ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok;
}

/* how much a call raised the peak RSS, bytes; -1 when the peak cannot be reset */
typedef struct {
    int ok;
    int64_t rss0;
} peak_probe;
static peak_probe probe_begin(void) {
    peak_probe pp = {reset_peak(), status_kib("VmRSS:")};
    return pp;
}
static int64_t probe_rise(peak_probe pp) { return pp.ok ? (status_kib("VmHWM:") - pp.rss0) * 1024 : -1; }

static void test_mpi_pieces(dt_comm *c) {
    const int r = dt_comm_rank(c), W = dt_comm_size(c);
    dt_error e = {0};
    /* 2.5 pieces: two full pieces and a half one */
    const size_t n = (size_t)DT_COMM_PIECE_BYTES / sizeof(float) * 5 / 2;
    float *a = malloc(n * sizeof(float));
    CHECK(a != NULL);
    if (!a) return;
    for (size_t i = 0; i < n; i++) a[i] = (float)(r + 1) * (float)(i % 1000);
    CHECK(dt_comm_barrier(c, &e) == 0);
    peak_probe pp = probe_begin();
    CHECK(dt_comm_allreduce(c, a, n, DT_DTYPE_FP32, DT_RED_SUM, &e) == 0);
    int64_t rise = probe_rise(pp);
    const float tri = (float)(W * (W + 1) / 2);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += a[i] != tri * (float)(i % 1000);
    CHECK(bad == 0);
    if (rise >= 0) {
        printf("rank %d: all-reduce of %.0f MiB raised the peak RSS by %.1f MiB\n", r,
               (double)(n * sizeof(float)) / MIB, (double)rise / MIB);
        if (rss_bounds_apply()) CHECK(rise <= (int64_t)DT_COMM_PIECE_BYTES + RSS_SLACK);
    }
    /* reduce-scatter: world blocks of 1.5 pieces each, into a separate receive and in place */
    const size_t per = (size_t)DT_COMM_PIECE_BYTES / sizeof(float) * 3 / 2;
    float *s = malloc(per * (size_t)W * sizeof(float)), *recv = malloc(per * sizeof(float));
    CHECK(s && recv);
    if (!s || !recv) goto out;
    /* its pages resident before the call is measured (not zeros: malloc + memset 0 may
     * become calloc, which leaves fresh pages untouched) */
    for (size_t i = 0; i < per; i++) recv[i] = -1.0f;
    for (int in_place = 1; in_place >= 0; in_place--) {
        for (size_t i = 0; i < per * (size_t)W; i++) s[i] = (float)(r + 1) * (float)(i % 777);
        float *dst = in_place ? s + (size_t)r * per : recv;
        CHECK(dt_comm_barrier(c, &e) == 0);
        pp = probe_begin();
        CHECK(dt_comm_reduce_scatter(c, s, dst, per, DT_DTYPE_FP32, DT_RED_SUM, &e) == 0);
        rise = probe_rise(pp);
        bad = 0;
        for (size_t i = 0; i < per; i++) bad += dst[i] != tri * (float)(((size_t)r * per + i) % 777);
        CHECK(bad == 0);
        if (rise >= 0) {
            printf("rank %d: reduce-scatter (%s) of %.0f MiB raised the peak RSS by %.1f MiB\n", r,
                   in_place ? "in place" : "separate receive", (double)(per * (size_t)W * sizeof(float)) / MIB,
                   (double)rise / MIB);
            /* in place or not, a piece's blocks are packed: the pieces bound it */
            if (rss_bounds_apply()) CHECK(rise <= (r == 0 ? 2 : 1) * (int64_t)DT_COMM_PIECE_BYTES + RSS_SLACK);
        }
    }
    /* 16-bit: the same pieces through the widening user op (values exact in bf16) */
    {
        const size_t m = (size_t)DT_COMM_PIECE_BYTES / sizeof(uint16_t) * 5 / 2;
        uint16_t *h = malloc(m * sizeof(uint16_t));
        CHECK(h != NULL);
        if (h) {
            for (size_t i = 0; i < m; i++) h[i] = dt_f32_to_bf16((float)(r + 1) * (float)(i % 8));
            CHECK(dt_comm_allreduce(c, h, m, DT_DTYPE_BF16, DT_RED_SUM, &e) == 0);
            bad = 0;
            for (size_t i = 0; i < m; i++) bad += dt_bf16_to_f32(h[i]) != tri * (float)(i % 8);
            CHECK(bad == 0);
            free(h);
        }
    }
out:
    free(a);
    free(s);
    free(recv);
}

int main(void) {
    const int under_mpi = getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL;
    if (!under_mpi) {
        test_planner_equals_engine();
        TEST_MAIN_END();
    }
    dt_comm *c = NULL;
    dt_error e = {0};
    if (dt_comm_init_mpi(&c, 120.0, &e)) {
        fprintf(stderr, "mpi: %s\n", e.msg);
        return 1;
    }
    test_mpi_pieces(c);
    int failed = dt_test_failures;
    dt_comm_free(c);
    if (failed) {
        fprintf(stderr, "%d check(s) failed\n", failed);
        return 1;
    }
    printf("ok\n");
    return 0;
}
