/* test_nccl.c — the NCCL dt_comm under mpirun with 2 ranks (one GPU each;
 * exits 77 where fewer than 2 GPUs are visible): all-reduce (sum, avg; fp32,
 * bf16), reduce-scatter, all-gather (in place), broadcast, barrier, byte
 * counters in the dt_collective convention, and a collective that one rank
 * never joins failing on the other with the timeout message (not a hang). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "dt_nccl.h"
#include "dt_comm.h"
#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_test.h"

static const dt_device_ops *dev;

static void *up(const void *h, size_t bytes) {
    void *d = dev->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, bytes);
    dev->memcpy(d, h, bytes, DT_COPY_H2D, DT_STREAM_H2D);
    dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
    return d;
}
static void down(void *h, const void *d, size_t bytes) {
    dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_D2H);
    dev->memcpy(h, d, bytes, DT_COPY_D2H, DT_STREAM_D2H);
    dev->stream_sync(DT_STREAM_D2H);
}

int main(void) {
    if (dt_device_cuda_count() < 2) {
        printf("fewer than 2 CUDA GPUs visible: skipped\n");
        return 77;
    }
    dt_comm *c = NULL;
    dt_error err = {0};
    if (dt_comm_init_nccl(&c, 60.0, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int r = dt_comm_rank(c), W = dt_comm_size(c);
    CHECK_STR(dt_comm_backend_name(c), "nccl");
    CHECK(dt_device_get(DT_DEVICE_CUDA, dt_comm_local_rank(c), &dev, &err) == 0);
    enum { N = 1000 };
    float h[N * 4], o[N * 4];
    for (int i = 0; i < N; i++) h[i] = (float)(r + 1) * (float)(i % 17);
    float *d = up(h, N * 4);
    CHECK(dt_comm_allreduce(c, d, N, DT_DTYPE_FP32, DT_RED_SUM, &err) == 0);
    down(o, d, N * 4);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= o[i] == (float)(W * (W + 1) / 2) * (float)(i % 17);
    CHECK(ok);
    CHECK(dt_comm_allreduce(c, d, N, DT_DTYPE_FP32, DT_RED_AVG, &err) == 0);
    down(o, d, N * 4);
    CHECK_NEAR(o[16], (float)(W * (W + 1) / 2) * 16.0f, 1e-4);   /* avg of equal values */
    uint16_t b16[N], b16o[N];
    for (int i = 0; i < N; i++) b16[i] = dt_f32_to_bf16((float)(r + 1));
    void *db = up(b16, sizeof b16);
    CHECK(dt_comm_allreduce(c, db, N, DT_DTYPE_BF16, DT_RED_SUM, &err) == 0);
    down(b16o, db, sizeof b16o);
    CHECK(dt_bf16_to_f32(b16o[N - 1]) == (float)(W * (W + 1) / 2));
    /* reduce-scatter: block i of the sum lands on rank i */
    for (int i = 0; i < N * W; i++) h[i] = (float)i;
    float *ds = up(h, (size_t)N * W * 4), *dr = up(h, N * 4);
    CHECK(dt_comm_reduce_scatter(c, ds, dr, N, DT_DTYPE_FP32, DT_RED_SUM, &err) == 0);
    down(o, dr, N * 4);
    CHECK(o[5] == (float)W * (float)(r * N + 5));
    /* all-gather in place */
    for (int i = 0; i < N; i++) h[i] = (float)(100 * r + i % 7);
    float *dg = up(h, (size_t)N * W * 4);
    dev->memcpy(dg + (size_t)r * N, dg, N * 4, DT_COPY_D2D, DT_STREAM_COMPUTE);
    CHECK(dt_comm_allgather(c, dg + (size_t)r * N, dg, N, DT_DTYPE_FP32, &err) == 0);
    down(o, dg, (size_t)N * W * 4);
    CHECK(o[N + 3] == 103.0f && o[3] == 3.0f);
    CHECK(dt_comm_broadcast(c, dr, N, DT_DTYPE_FP32, 1, &err) == 0);
    CHECK(dt_comm_barrier(c, &err) == 0);
    CHECK_EQ_I64(dt_comm_bytes(c, DT_COLL_ALLREDUCE), (int64_t)N * 4 * 2 + N * 2);
    CHECK_EQ_I64(dt_comm_bytes(c, DT_COLL_REDUCE_SCATTER), (int64_t)N * W * 4);
    CHECK_EQ_I64(dt_comm_bytes(c, DT_COLL_ALLGATHER), (int64_t)N * W * 4);
    /* rank 1 never joins: rank 0 must fail after its 2 s deadline with the message */
    dt_comm_set_timeout(c, 2.0);
    if (r == 0) {
        dt_error e2 = {0};
        int rc = dt_comm_allreduce(c, d, N, DT_DTYPE_FP32, DT_RED_SUM, &e2);
        printf("rank 0 lone all-reduce: %s\n", e2.msg);
        CHECK_EQ_I64(rc, DT_ECOMM);   /* a peer's failure is classified by its code */
        CHECK(strstr(e2.msg, "did not complete within") != NULL);
    } else {
        sleep(4);
    }
    dt_comm_free(c);
    TEST_MAIN_END();
}
