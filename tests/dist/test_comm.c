/* test_comm.c — the MPI (and self) backends of dt_comm.h, run under mpirun with
 * 1, 2 and 4 ranks: results of every collective in fp32 / bf16 / fp16, in-place
 * forms, byte counters per the dt_collective convention, and the timeout path
 * (a peer that arrives late turns into an error, not a hang). */
#include <unistd.h>

#include "dt_comm.h"
#include "dt_dtype.h"
#include "dt_test.h"

#define N 1000  /* elements per rank block; not a multiple of any vector width */

static dt_comm *c;
static int rank, world;

static void test_allreduce(void) {
    dt_error err = {0};
    float *f = malloc(N * sizeof *f);
    for (int i = 0; i < N; i++) f[i] = (float)(rank + 1) * (float)i;
    CHECK(dt_comm_allreduce(c, f, N, DT_DTYPE_FP32, DT_RED_SUM, &err) == DT_OK);
    const float tri = (float)(world * (world + 1) / 2);
    for (int i = 0; i < N; i++) CHECK_NEAR(f[i], tri * (float)i, 1e-6);
    for (int i = 0; i < N; i++) f[i] = (float)(rank + 1);
    CHECK(dt_comm_allreduce(c, f, N, DT_DTYPE_FP32, DT_RED_AVG, &err) == DT_OK);
    for (int i = 0; i < N; i++) CHECK_NEAR(f[i], (world + 1) / 2.0, 1e-6);

    /* bf16 / fp16: small integers are exact in both formats */
    uint16_t *h = malloc(N * sizeof *h);
    for (int i = 0; i < N; i++) h[i] = dt_f32_to_bf16((float)(rank + (i % 7)));
    CHECK(dt_comm_allreduce(c, h, N, DT_DTYPE_BF16, DT_RED_SUM, &err) == DT_OK);
    for (int i = 0; i < N; i++)
        CHECK_NEAR(dt_bf16_to_f32(h[i]), world * (i % 7) + world * (world - 1) / 2, 0);
    for (int i = 0; i < N; i++) h[i] = dt_f32_to_fp16((float)(2 * rank));
    CHECK(dt_comm_allreduce(c, h, N, DT_DTYPE_FP16, DT_RED_AVG, &err) == DT_OK);
    for (int i = 0; i < N; i++) CHECK_NEAR(dt_fp16_to_f32(h[i]), world - 1, 0);
    free(h);
    free(f);
}

static void test_reduce_scatter_allgather(void) {
    dt_error err = {0};
    float *send = malloc((size_t)N * world * sizeof *send);
    float *recv = malloc(N * sizeof *recv);
    for (int b = 0; b < world; b++)
        for (int i = 0; i < N; i++) send[b * N + i] = (float)(b * 1000 + i + rank);
    CHECK(dt_comm_reduce_scatter(c, send, recv, N, DT_DTYPE_FP32, DT_RED_SUM, &err) == DT_OK);
    for (int i = 0; i < N; i++)
        CHECK_NEAR(recv[i], world * (float)(rank * 1000 + i) + world * (world - 1) / 2.0f, 1e-6);
    /* in place: the result lands in this rank's own block */
    for (int b = 0; b < world; b++)
        for (int i = 0; i < N; i++) send[b * N + i] = (float)(b + 1);
    CHECK(dt_comm_reduce_scatter(c, send, send + (size_t)rank * N, N, DT_DTYPE_FP32, DT_RED_AVG, &err) ==
          DT_OK);
    for (int i = 0; i < N; i++) CHECK_NEAR(send[(size_t)rank * N + i], rank + 1, 1e-6);

    /* all-gather, out of place then in place */
    for (int i = 0; i < N; i++) recv[i] = (float)(rank * N + i);
    CHECK(dt_comm_allgather(c, recv, send, N, DT_DTYPE_FP32, &err) == DT_OK);
    for (int i = 0; i < N * world; i++) CHECK_NEAR(send[i], i, 0);
    for (int i = 0; i < N * world; i++) send[i] = (i / N == rank) ? (float)(-i) : 0.0f;
    CHECK(dt_comm_allgather(c, send + (size_t)rank * N, send, N, DT_DTYPE_FP32, &err) == DT_OK);
    for (int i = 0; i < N * world; i++) CHECK_NEAR(send[i], -i, 0);
    free(send);
    free(recv);
}

static void test_broadcast_and_counters(void) {
    dt_error err = {0};
    dt_comm_reset_counters(c);
    float v[3] = {0};
    if (rank == world - 1) v[0] = 1.5f, v[1] = 2.5f, v[2] = -3.0f;
    CHECK(dt_comm_broadcast(c, v, 3, DT_DTYPE_FP32, world - 1, &err) == DT_OK);
    CHECK_NEAR(v[0], 1.5, 0);
    CHECK_NEAR(v[2], -3.0, 0);
    uint16_t h[10] = {0};
    CHECK(dt_comm_allreduce(c, h, 10, DT_DTYPE_BF16, DT_RED_SUM, &err) == DT_OK);
    CHECK(dt_comm_allreduce(c, h, 10, DT_DTYPE_BF16, DT_RED_SUM, &err) == DT_OK);
    float *buf = calloc((size_t)4 * world, sizeof *buf);
    CHECK(dt_comm_reduce_scatter(c, buf, buf + (size_t)rank * 4, 4, DT_DTYPE_FP32, DT_RED_SUM, &err) == DT_OK);
    CHECK(dt_comm_allgather(c, buf + (size_t)rank * 4, buf, 4, DT_DTYPE_FP32, &err) == DT_OK);
    free(buf);
    CHECK_EQ_I64(dt_comm_bytes(c, DT_COLL_BROADCAST), 12);
    CHECK_EQ_I64(dt_comm_bytes(c, DT_COLL_ALLREDUCE), 2 * 10 * 2);
    CHECK_EQ_I64(dt_comm_calls(c, DT_COLL_ALLREDUCE), 2);
    CHECK_EQ_I64(dt_comm_bytes(c, DT_COLL_REDUCE_SCATTER), 4 * 4 * world);
    CHECK_EQ_I64(dt_comm_bytes(c, DT_COLL_ALLGATHER), 4 * 4 * world);
    /* bad root is an input error, not a hang */
    CHECK(dt_comm_broadcast(c, v, 3, DT_DTYPE_FP32, world, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "root") != NULL);
}

static void test_timeout(void) {
    if (world < 2) return;
    dt_error err = {0};
    float x = 1.0f;
    if (rank == 0) {
        dt_comm_set_timeout(c, 0.5);
        int rc = dt_comm_allreduce(c, &x, 1, DT_DTYPE_FP32, DT_RED_SUM, &err);
        CHECK(rc == DT_ECOMM);   /* a peer's failure is classified by its code */
        CHECK(err.code == DT_ECOMM);
        CHECK(strstr(err.msg, "did not complete within") != NULL);
        dt_comm_set_timeout(c, 60);
    } else {
        usleep(1500 * 1000);  /* arrive after rank 0's deadline */
        CHECK(dt_comm_allreduce(c, &x, 1, DT_DTYPE_FP32, DT_RED_SUM, &err) == DT_OK);
    }
    CHECK(dt_comm_barrier(c, &err) == DT_OK);
}

int main(int argc, char **argv) {
    dt_error err = {0};
    int use_self = argc > 1 && !strcmp(argv[1], "self");
    int rc = use_self ? dt_comm_init_self(&c, &err) : dt_comm_init_mpi(&c, 60.0, &err);
    if (rc) {
        fprintf(stderr, "init: %s\n", err.msg);
        return 1;
    }
    rank = dt_comm_rank(c);
    world = dt_comm_size(c);
    CHECK(dt_comm_local_size(c) >= 1);
    CHECK(dt_comm_local_rank(c) < dt_comm_local_size(c));
    test_allreduce();
    test_reduce_scatter_allgather();
    test_broadcast_and_counters();
    test_timeout();
    int failed = dt_test_failures;  /* mpirun fails the job if any rank exits non-zero */
    dt_comm_free(c);
    if (failed) fprintf(stderr, "rank %d: %d check(s) failed\n", rank, failed);
    else if (rank == 0) printf("ok (%s, %d ranks)\n", use_self ? "self" : "mpi", world);
    return failed ? 1 : 0;
}
