/* comm_nccl.c — NCCL collectives for dt_comm (see dt_nccl.h).
 *
 * One communicator per process, one GPU per rank. Every collective:
 *   1. compute -> comm stream hand-off (event): the data the compute stream
 *      produced is complete before NCCL reads it;
 *   2. the NCCL call on the comm stream (non-blocking communicator: an
 *      ncclInProgress return is polled to completion with the deadline);
 *   3. a completion event on the comm stream, which dt_nccl_wait polls.
 * Errors name the collective, the rank and NCCL's own message. */
#include "dt_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dt_cuda.h"
#include "dt_device.h"
#include "dt_clock.h"

struct dt_nccl {
    ncclComm_t comm;
    int rank, size, dead;
    double timeout_s;
    cudaEvent_t done;         /* recorded after the last enqueued collective */
    float *one;               /* [1] device scratch for the barrier */
};

_Static_assert(DT_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "NCCL unique id size changed");

static ncclDataType_t nccl_type(dt_dtype t) {
    return t == DT_DTYPE_FP32 ? ncclFloat32 : t == DT_DTYPE_BF16 ? ncclBfloat16 : ncclFloat16;
}
static ncclRedOp_t nccl_op(dt_reduce_op op) { return op == DT_RED_AVG ? ncclAvg : ncclSum; }
static cudaStream_t comm_stream(void) { return (cudaStream_t)dt_cuda_stream(DT_STREAM_COMM); }

static int nccl_fail(dt_nccl *n, ncclResult_t r, const char *what, dt_error *err) {
    const char *last = n && n->comm ? ncclGetLastError(n->comm) : NULL;
    return dt_errorf(err, DT_ECOMM, "NCCL %s on rank %d failed: %s%s%s", what,
                     n ? n->rank : -1, ncclGetErrorString(r), last && *last ? ": " : "",
                     last ? last : "");
}

/* A non-blocking communicator's call may return ncclInProgress: poll until it
 * settles, aborting at the deadline. */
static int settle(dt_nccl *n, ncclResult_t r, const char *what, dt_error *err) {
    double deadline = dt_clock_s() + n->timeout_s;
    while (r == ncclInProgress) {
        if (dt_clock_s() > deadline) {
            ncclCommAbort(n->comm);
            n->dead = 1;
            return dt_errorf(err, DT_ECOMM,
                             "NCCL %s on rank %d did not start within %.0f s: another rank died, "
                             "hangs or cannot reach this one (NCCL_DEBUG=INFO shows why)",
                             what, n->rank, n->timeout_s);
        }
        sched_yield();
        if (ncclCommGetAsyncError(n->comm, &r) != ncclSuccess) r = ncclInternalError;
    }
    if (r != ncclSuccess) {
        int rc = nccl_fail(n, r, what, err);
        ncclCommAbort(n->comm);
        n->dead = 1;
        return rc;
    }
    return DT_OK;
}

int dt_nccl_unique_id(void *id, dt_error *err) {
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess)
        return dt_errorf(err, DT_ERUNTIME, "NCCL ncclGetUniqueId failed: %s (NCCL_COMM_ID or the "
                         "network interface may be wrong; see NCCL_SOCKET_IFNAME)",
                         ncclGetErrorString(r));
    memcpy(id, &u, sizeof u);
    return DT_OK;
}

int dt_nccl_create(dt_nccl **out, int rank, int size, const void *id, double timeout_s,
                   dt_error *err) {
    *out = NULL;
    dt_nccl *n = calloc(1, sizeof *n);
    if (!n) return dt_errorf(err, DT_ENOMEM, "out of memory creating the NCCL communicator");
    n->rank = rank;
    n->size = size;
    n->timeout_s = timeout_s;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;   /* so a missing peer becomes a deadline, not a hang */
    ncclResult_t r = ncclCommInitRankConfig(&n->comm, size, u, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        int rc = nccl_fail(n, r, "ncclCommInitRank", err);
        free(n);
        return rc;
    }
    int rc = settle(n, r, "ncclCommInitRank", err);
    if (rc) {
        free(n);
        return rc;
    }
    /* the barrier's scratch is zeroed (a 1-element all-reduce of garbage is
     * harmless but shows up in compute-sanitizer's initcheck) */
    if (cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming) != cudaSuccess ||
        cudaMalloc((void **)&n->one, sizeof(float)) != cudaSuccess ||
        cudaMemset(n->one, 0, sizeof(float)) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
        ncclCommAbort(n->comm);   /* no collective was issued: nothing to finalize */
        free(n);
        return dt_errorf(err, DT_ERUNTIME, "cuda: cannot create the NCCL completion event and "
                         "barrier scratch");
    }
    *out = n;
    return DT_OK;
}

/* Teardown of a live communicator. ncclCommFinalize is collective and, on a
 * non-blocking communicator, returns ncclInProgress: NCCL requires polling
 * ncclCommGetAsyncError until it settles before any other call on the
 * communicator, destroy included (NCCL user guide, "Fault tolerance" /
 * non-blocking communicators). A peer that has exited never finalizes, so the
 * poll has the communicator's deadline; on timeout or error the communicator
 * is aborted instead of destroyed (abort does not wait for peers). */
void dt_nccl_free(dt_nccl *n) {
    if (!n) return;
    if (!n->dead) {
        ncclResult_t r = ncclCommFinalize(n->comm);
        double deadline = dt_clock_s() + n->timeout_s;
        while (r == ncclInProgress && dt_clock_s() <= deadline) {
            sched_yield();
            if (ncclCommGetAsyncError(n->comm, &r) != ncclSuccess) r = ncclInternalError;
        }
        if (r == ncclSuccess) ncclCommDestroy(n->comm);
        else ncclCommAbort(n->comm);
        n->dead = 1;
    }
    cudaEventDestroy(n->done);
    cudaFree(n->one);
    free(n);
}

void dt_nccl_abort(dt_nccl *n) {
    if (n && !n->dead) {
        ncclCommAbort(n->comm);
        n->dead = 1;
    }
}

static int begin(dt_nccl *n, const char *what, dt_error *err) {
    if (n->dead)
        return dt_errorf(err, DT_ECOMM,
                         "NCCL %s on rank %d: the communicator was aborted after an earlier error",
                         what, n->rank);
    const dt_device_ops *dev = NULL;
    int rc = dt_device_get(DT_DEVICE_CUDA, dt_cuda_ordinal(), &dev, err);
    if (rc) return rc;
    dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_COMM);
    return DT_OK;
}

static int finish(dt_nccl *n, ncclResult_t r, const char *what, dt_error *err) {
    int rc = settle(n, r, what, err);
    if (rc) return rc;
    if (cudaEventRecord(n->done, comm_stream()) != cudaSuccess)
        return dt_errorf(err, DT_ERUNTIME, "cuda: recording the %s completion event failed", what);
    return DT_OK;
}

int dt_nccl_allreduce(dt_nccl *n, void *buf, size_t count, dt_dtype t, dt_reduce_op op,
                      dt_error *err) {
    int rc = begin(n, "all-reduce", err);
    if (rc) return rc;
    return finish(n, ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), n->comm,
                                   comm_stream()), "all-reduce", err);
}

int dt_nccl_reduce_scatter(dt_nccl *n, const void *send, void *recv, size_t recvcount,
                           dt_dtype t, dt_reduce_op op, dt_error *err) {
    int rc = begin(n, "reduce-scatter", err);
    if (rc) return rc;
    return finish(n, ncclReduceScatter(send, recv, recvcount, nccl_type(t), nccl_op(op), n->comm,
                                       comm_stream()), "reduce-scatter", err);
}

int dt_nccl_allgather(dt_nccl *n, const void *send, void *recv, size_t sendcount, dt_dtype t,
                      dt_error *err) {
    int rc = begin(n, "all-gather", err);
    if (rc) return rc;
    return finish(n, ncclAllGather(send, recv, sendcount, nccl_type(t), n->comm, comm_stream()),
                  "all-gather", err);
}

int dt_nccl_broadcast(dt_nccl *n, void *buf, size_t count, dt_dtype t, int root, dt_error *err) {
    int rc = begin(n, "broadcast", err);
    if (rc) return rc;
    return finish(n, ncclBroadcast(buf, buf, count, nccl_type(t), root, n->comm, comm_stream()),
                  "broadcast", err);
}

int dt_nccl_barrier(dt_nccl *n, dt_error *err) {
    int rc = begin(n, "barrier", err);
    if (rc) return rc;
    return finish(n, ncclAllReduce(n->one, n->one, 1, ncclFloat32, ncclSum, n->comm, comm_stream()),
                  "barrier", err);
}

int dt_nccl_wait(dt_nccl *n, const char *what, int rank, double timeout_s, dt_error *err) {
    if (n->dead)
        return dt_errorf(err, DT_ECOMM, "NCCL %s on rank %d: the communicator was aborted",
                         what, rank);
    double deadline = dt_clock_s() + timeout_s;
    for (;;) {
        cudaError_t ce = cudaEventQuery(n->done);
        if (ce == cudaSuccess) break;
        if (ce != cudaErrorNotReady) {
            dt_nccl_abort(n);
            return dt_errorf(err, DT_ECOMM, "NCCL %s on rank %d: CUDA error %s", what, rank,
                             cudaGetErrorString(ce));
        }
        ncclResult_t async = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(n->comm, &async);
        if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
            int rc = nccl_fail(n, r != ncclSuccess ? r : async, what, err);
            dt_nccl_abort(n);
            return rc;
        }
        if (dt_clock_s() > deadline) {
            dt_nccl_abort(n);
            return dt_errorf(err, DT_ECOMM,
                             "%s on rank %d did not complete within %.0f s: another rank died or "
                             "hangs (the NCCL communicator was aborted; raise the limit with "
                             "--timeout if steps are legitimately slow)",
                             what, rank, timeout_s);
        }
        sched_yield();
    }
    /* results are consumed by the compute stream: explicit hand-off back */
    const dt_device_ops *dev = NULL;
    if (dt_device_get(DT_DEVICE_CUDA, dt_cuda_ordinal(), &dev, err)) return DT_ERUNTIME;
    dev->handoff(DT_STREAM_COMM, DT_STREAM_COMPUTE);
    return DT_OK;
}
