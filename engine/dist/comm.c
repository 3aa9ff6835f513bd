/* comm.c — "self", MPI and (with CUDA) NCCL backends of dt_comm.h.
 *
 * Every MPI collective is issued non-blocking (MPI_I*) and completed by a
 * polling wait with a monotonic deadline, so a dead or hung peer turns into an
 * error after timeout_s instead of a hang. 16-bit reductions use a user MPI_Op
 * that widens each pair to fp32, adds, and rounds back (MPI has no bf16/fp16
 * types); the algorithm and its order stay Open MPI's own.
 *
 * NCCL (DT_HAVE_CUDA): the collectives are enqueued by engine/cuda/comm_nccl.c
 * on device buffers and completed by dt_comm_wait's deadline loop there; MPI
 * (when launched by mpirun/srun) only bootstraps: rank, local rank and the
 * broadcast of NCCL's unique id. */
#include "dt_comm.h"

#include <mpi.h>
#include <sched.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dt_clock.h"
#include "dt_dtype.h"
#include "dt_mpijoin.h"

#ifdef DT_HAVE_CUDA
#include "dt_backend.h"
#include "dt_device.h"
#include "dt_nccl.h"
#endif

#ifdef DT_HAVE_CUDA
/* The NCCL half of the CUDA back-end (engine/cuda/comm_nccl.c), looked up in the
 * loaded module once a CUDA device is bound (dt_backend.h). */
typedef struct nccl_api {
    __typeof__(dt_nccl_create) *create;
    __typeof__(dt_nccl_unique_id) *unique_id;
    __typeof__(dt_nccl_free) *free;
    __typeof__(dt_nccl_abort) *abort;
    __typeof__(dt_nccl_allreduce) *allreduce;
    __typeof__(dt_nccl_reduce_scatter) *reduce_scatter;
    __typeof__(dt_nccl_allgather) *allgather;
    __typeof__(dt_nccl_broadcast) *broadcast;
    __typeof__(dt_nccl_barrier) *barrier;
    __typeof__(dt_nccl_wait) *wait;
} nccl_api;
static nccl_api g_nccl;

static int nccl_api_load(dt_error *err) {
    static const struct { const char *symbol; size_t offset; } syms[] = {
        {"dt_nccl_create", offsetof(nccl_api, create)},
        {"dt_nccl_unique_id", offsetof(nccl_api, unique_id)},
        {"dt_nccl_free", offsetof(nccl_api, free)},
        {"dt_nccl_abort", offsetof(nccl_api, abort)},
        {"dt_nccl_allreduce", offsetof(nccl_api, allreduce)},
        {"dt_nccl_reduce_scatter", offsetof(nccl_api, reduce_scatter)},
        {"dt_nccl_allgather", offsetof(nccl_api, allgather)},
        {"dt_nccl_broadcast", offsetof(nccl_api, broadcast)},
        {"dt_nccl_barrier", offsetof(nccl_api, barrier)},
        {"dt_nccl_wait", offsetof(nccl_api, wait)},
    };
    nccl_api api;
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *fn = dt_backend_cuda_sym(syms[i].symbol, err);
        if (!fn) return err->code;
        memcpy((char *)&api + syms[i].offset, &fn, sizeof fn);
    }
    g_nccl = api;
    return DT_OK;
}
#endif

struct dt_comm {
    dt_comm_backend backend;
    int rank, size, local_rank, local_size;
    double timeout_s;
    int we_initialised_mpi;
    MPI_Comm world;          /* duplicate of MPI_COMM_WORLD (MPI backend) */
    MPI_Op op_sum16[3];      /* indexed by dt_dtype; only BF16 and FP16 used */
    int64_t bytes[DT_COLL_COUNT];
    int64_t calls[DT_COLL_COUNT];
    int mpi_up;              /* MPI world set up (MPI backend, or NCCL bootstrapped by MPI) */
    dt_mpijoin *join;        /* world joined from singletons (dt_comm_init_mpi_tcp), else NULL */
#ifdef DT_HAVE_CUDA
    dt_nccl *nccl;           /* NCCL backend */
#endif
};

/* Reductions at least this large trim the heap when they complete (dt_comm_wait):
 * glibc's initial mmap threshold (mallopt(3) M_MMAP_THRESHOLD, 128 KiB); smaller
 * temporaries are ordinary heap chunks, reused, and not worth a trim per call. */
#define TRIM_MIN_BYTES ((size_t)128 << 10)

/* A reduction the MPI backend issues in pieces (dt_comm.h DT_COMM_PIECE_BYTES): one
 * piece in flight per request, the next started by dt_comm_wait when it completes. */
typedef enum { PIECE_NONE = 0, PIECE_ALLREDUCE, PIECE_REDUCE_SCATTER } piece_kind;

struct dt_comm_req {
    MPI_Request mpi;
    const char *what;        /* for messages: "all-reduce", "barrier", ... */
    void *bounce;            /* owned staging: the packed send blocks of a reduce-scatter piece
                              * (or the whole send when it is in place), freed at wait */
    piece_kind kind;         /* PIECE_NONE: one library call, nothing to continue */
    const char *send;        /* reduce-scatter: world blocks of n elements */
    char *dst;               /* all-reduce: the buffer; reduce-scatter: the receive block */
    size_t n, next, piece;   /* elements (per block), the first not yet issued, elements per piece */
    void *avg_buf;           /* non-NULL: divide avg_count elements by world size on completion */
    size_t avg_count;
    dt_dtype t;
    int nccl;                /* enqueued on the NCCL communicator */
};

static void count(dt_comm *c, dt_collective coll, size_t elems, dt_dtype t) {
    c->bytes[coll] += (int64_t)elems * dt_dtype_size(t);
    c->calls[coll] += 1;
}

/* ---- 16-bit sum operators ---------------------------------------------- */

static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = dt_f32_to_bf16(dt_bf16_to_f32(a[i]) + dt_bf16_to_f32(b[i]));
}

static void sum_fp16(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = dt_f32_to_fp16(dt_fp16_to_f32(a[i]) + dt_fp16_to_f32(b[i]));
}

static MPI_Datatype mpi_type(dt_dtype t) {
    return t == DT_DTYPE_FP32 ? MPI_FLOAT : MPI_UINT16_T;
}

static MPI_Op mpi_sum(const dt_comm *c, dt_dtype t) {
    return t == DT_DTYPE_FP32 ? MPI_SUM : c->op_sum16[t];
}

/* Divides n elements of type t by the world size (for DT_RED_AVG). */
static void scale_avg(void *buf, size_t n, dt_dtype t, int world) {
    const float inv = 1.0f / (float)world;
    if (t == DT_DTYPE_FP32) {
        float *f = buf;
        for (size_t i = 0; i < n; i++) f[i] *= inv;
    } else if (t == DT_DTYPE_BF16) {
        uint16_t *h = buf;
        for (size_t i = 0; i < n; i++) h[i] = dt_f32_to_bf16(dt_bf16_to_f32(h[i]) * inv);
    } else {
        uint16_t *h = buf;
        for (size_t i = 0; i < n; i++) h[i] = dt_f32_to_fp16(dt_fp16_to_f32(h[i]) * inv);
    }
}

static int check_count(size_t n, const char *what, dt_error *err) {
    if (n > (size_t)INT32_MAX)
        return dt_errorf(err, DT_EINVAL,
                         "%s of %zu elements exceeds MPI's int count limit; use smaller buckets", what, n);
    return DT_OK;
}

/* ---- lifecycle ---------------------------------------------------------- */

int dt_comm_init_self(dt_comm **out, dt_error *err) {
    dt_comm *c = calloc(1, sizeof *c);
    if (!c) return dt_errorf(err, DT_ENOMEM, "out of memory creating the self communicator");
    c->backend = DT_COMM_SELF;
    c->size = c->local_size = 1;
    c->timeout_s = 600.0;
    *out = c;
    return DT_OK;
}

/* Everything after MPI is up: duplicate `base` as the world, ranks, local
 * ranks (shared-memory split), the 16-bit sum operators. */
static void setup_mpi(dt_comm *c, MPI_Comm base, double timeout_s) {
    MPI_Comm_dup(base, &c->world);
    /* Errors come back as codes so they become messages, not aborts. */
    MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->world, &c->rank);
    MPI_Comm_size(c->world, &c->size);
    MPI_Comm local;
    MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &c->local_rank);
    MPI_Comm_size(local, &c->local_size);
    MPI_Comm_free(&local);
    MPI_Op_create(sum_bf16, 1, &c->op_sum16[DT_DTYPE_BF16]);
    MPI_Op_create(sum_fp16, 1, &c->op_sum16[DT_DTYPE_FP16]);
    c->backend = DT_COMM_MPI;
    c->mpi_up = 1;
    c->timeout_s = timeout_s;
}

/* Open MPI's non-blocking all-reduce (coll/libnbc), which every reduction here runs
 * through, picks by itself an algorithm that moves a node's large reductions at half
 * the blocking call's rate (2 ranks, 32 MiB pieces: 0.95 vs 2.0 GB/s busbw; ring 1.97,
 * docs/benchmarks.md "Collectives as the engine runs them"). The ring is
 * bandwidth-optimal (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for
 * clusters of workstations") and NCCL's choice for large messages; Open MPI reads its MCA
 * parameters from the environment at initialisation. A value the user set is kept. */
#define LIBNBC_IALLREDUCE_ALGORITHM_ENV "OMPI_MCA_coll_libnbc_iallreduce_algorithm"
#define LIBNBC_IALLREDUCE_RING "1"
void dt_comm_mpi_defaults(void) { setenv(LIBNBC_IALLREDUCE_ALGORITHM_ENV, LIBNBC_IALLREDUCE_RING, 0); }

int dt_comm_init_mpi(dt_comm **out, double timeout_s, dt_error *err) {
    if (!(timeout_s > 0)) return dt_errorf(err, DT_EINVAL, "communication timeout must be > 0 s");
    dt_comm *c = calloc(1, sizeof *c);
    if (!c) return dt_errorf(err, DT_ENOMEM, "out of memory creating the MPI communicator");
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        dt_comm_mpi_defaults();
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            free(c);
            return dt_errorf(err, DT_ERUNTIME, "MPI_Init_thread failed (is this run under mpirun/srun?)");
        }
        c->we_initialised_mpi = 1;
    }
    setup_mpi(c, MPI_COMM_WORLD, timeout_s);
    *out = c;
    return DT_OK;
}

int dt_comm_init_mpi_tcp(dt_comm **out, double timeout_s, struct dt_rdzv *rdzv, int rank, int world,
                         dt_error *err) {
    if (!(timeout_s > 0)) return dt_errorf(err, DT_EINVAL, "communication timeout must be > 0 s");
    dt_comm *c = calloc(1, sizeof *c);
    if (!c) return dt_errorf(err, DT_ENOMEM, "out of memory creating the MPI communicator");
    MPI_Comm joined;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) dt_comm_mpi_defaults();
    int rc = dt_mpijoin_init(rdzv, rank, world, timeout_s, &joined, &c->join, err);
    if (rc) {
        free(c);
        return rc;
    }
    c->we_initialised_mpi = !inited;
    setup_mpi(c, joined, timeout_s);
    MPI_Comm_free(&joined);
    *out = c;
    return DT_OK;
}

int dt_comm_split(dt_comm *c, int color, int key, dt_comm **out, dt_error *err) {
    *out = NULL;
    if (c->backend == DT_COMM_SELF) return dt_comm_init_self(out, err);
    if (c->backend != DT_COMM_MPI)
        return dt_errorf(err, DT_EINVAL,
                         "sub-communicators (tensor parallelism) are built on MPI only, not on %s; run the "
                         "plan on CPU ranks",
                         dt_comm_backend_name(c));
    dt_comm *s = calloc(1, sizeof *s);
    if (!s) return dt_errorf(err, DT_ENOMEM, "out of memory creating a sub-communicator");
    MPI_Comm sub;
    if (MPI_Comm_split(c->world, color, key, &sub) != MPI_SUCCESS) {
        free(s);
        return dt_errorf(err, DT_ECOMM, "MPI_Comm_split failed splitting the world into groups");
    }
    setup_mpi(s, sub, c->timeout_s);
    MPI_Comm_free(&sub);
    *out = s;
    return DT_OK;
}

void dt_comm_free(dt_comm *c) {
    if (!c) return;
#ifdef DT_HAVE_CUDA
    if (c->nccl) g_nccl.free(c->nccl);
#endif
    if (c->mpi_up) {
        MPI_Op_free(&c->op_sum16[DT_DTYPE_BF16]);
        MPI_Op_free(&c->op_sum16[DT_DTYPE_FP16]);
        MPI_Comm_free(&c->world);
        if (c->we_initialised_mpi) MPI_Finalize();
    }
    dt_mpijoin_finish(c->join);   /* after MPI_Finalize: the ompi-server may go */
    free(c);
}

void dt_comm_abort(dt_comm *c, int code) {
    if (!c) return;
#ifdef DT_HAVE_CUDA
    if (c->backend == DT_COMM_NCCL) {
        g_nccl.abort(c->nccl);
        /* without MPI the launcher (torchrun) ends the other ranks when this one exits */
        if (!c->mpi_up) _Exit(code);
    }
#endif
    /* a joined world: MPI_COMM_WORLD is this singleton alone, so abort the joined one */
    if (c->mpi_up) MPI_Abort(c->join ? c->world : MPI_COMM_WORLD, code);
}

dt_comm_backend dt_comm_backend_of(const dt_comm *c) { return c->backend; }
const char *dt_comm_backend_name(const dt_comm *c) {
    return c->backend == DT_COMM_SELF ? "self" : c->backend == DT_COMM_MPI ? "mpi" : "nccl";
}
int dt_comm_rank(const dt_comm *c) { return c->rank; }
int dt_comm_size(const dt_comm *c) { return c->size; }
int dt_comm_local_rank(const dt_comm *c) { return c->local_rank; }
int dt_comm_local_size(const dt_comm *c) { return c->local_size; }
double dt_comm_timeout(const dt_comm *c) { return c->timeout_s; }
void dt_comm_set_timeout(dt_comm *c, double timeout_s) {
    if (timeout_s > 0) c->timeout_s = timeout_s;
}

int64_t dt_comm_bytes(const dt_comm *c, dt_collective coll) {
    return coll >= 0 && coll < DT_COLL_COUNT ? c->bytes[coll] : 0;
}
int64_t dt_comm_calls(const dt_comm *c, dt_collective coll) {
    return coll >= 0 && coll < DT_COLL_COUNT ? c->calls[coll] : 0;
}
void dt_comm_reset_counters(dt_comm *c) {
    memset(c->bytes, 0, sizeof c->bytes);
    memset(c->calls, 0, sizeof c->calls);
}

/* ---- non-blocking core -------------------------------------------------- */

static int new_req(const char *what, dt_comm_req **req, dt_error *err) {
    *req = calloc(1, sizeof **req);
    if (!*req) return dt_errorf(err, DT_ENOMEM, "out of memory for a %s request", what);
    (*req)->what = what;
    (*req)->mpi = MPI_REQUEST_NULL;
    return DT_OK;
}

#ifdef DT_HAVE_CUDA
/* an NCCL request: counted like MPI's, completed by dt_nccl_wait */
static int nccl_req(dt_comm *c, const char *what, dt_collective coll, size_t elems, dt_dtype t,
                    dt_comm_req **req, dt_error *err) {
    int rc = new_req(what, req, err);
    if (rc) return rc;
    count(c, coll, elems, t);
    (*req)->nccl = 1;
    return DT_OK;
}
/* the enqueue's result: on failure the request is dropped */
static int nccl_started(int rc, dt_comm_req **req) {
    if (rc) {
        free(*req);
        *req = NULL;
    }
    return rc;
}
#endif

static int mpi_fail(int rc, const char *what, dt_error *err) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return dt_errorf(err, DT_ECOMM, "MPI %s failed: %s", what, msg);
}

/* Elements per library call of a reduction over `blocks` blocks (1 for an all-reduce,
 * the world for a reduce-scatter): at most DT_COMM_PIECE_BYTES in all, at least one. */
static size_t piece_elems(dt_dtype t, size_t blocks) {
    size_t per = (size_t)DT_COMM_PIECE_BYTES / ((size_t)dt_dtype_size(t) * blocks);
    return per > 0 ? per : 1;
}

/* Issues q's next piece: elements [next, next + piece) of the buffer (all-reduce, in
 * place) or of every block (reduce-scatter, packed into q->bounce when it is in use). */
static int start_piece(dt_comm *c, dt_comm_req *q, dt_error *err) {
    const size_t esz = (size_t)dt_dtype_size(q->t), lo = q->next;
    const size_t len = q->n - lo < q->piece ? q->n - lo : q->piece;
    int rc;
    q->next = lo + len;
    if (q->kind == PIECE_ALLREDUCE) {
        rc = MPI_Iallreduce(MPI_IN_PLACE, q->dst + lo * esz, (int)len, mpi_type(q->t), mpi_sum(c, q->t), c->world,
                            &q->mpi);
        return rc == MPI_SUCCESS ? DT_OK : mpi_fail(rc, "all-reduce", err);
    }
    const void *sb = q->send;
    if (q->bounce) {
        for (size_t b = 0; b < (size_t)c->size; b++)
            memcpy((char *)q->bounce + b * len * esz, q->send + (b * q->n + lo) * esz, len * esz);
        sb = q->bounce;
    }
    rc = MPI_Ireduce_scatter_block(sb, q->dst + lo * esz, (int)len, mpi_type(q->t), mpi_sum(c, q->t), c->world,
                                   &q->mpi);
    return rc == MPI_SUCCESS ? DT_OK : mpi_fail(rc, "reduce-scatter", err);
}

int dt_comm_iallreduce(dt_comm *c, void *buf, size_t n, dt_dtype t, dt_reduce_op op,
                       dt_comm_req **req, dt_error *err) {
#ifdef DT_HAVE_CUDA
    if (c->backend == DT_COMM_NCCL) {
        int nrc = nccl_req(c, "all-reduce", DT_COLL_ALLREDUCE, n, t, req, err);
        return nrc ? nrc : nccl_started(n ? g_nccl.allreduce(c->nccl, buf, n, t, op, err) : DT_OK, req);
    }
#endif
    int rc = check_count(n, "all-reduce", err);
    if (rc) return rc;
    if ((rc = new_req("all-reduce", req, err))) return rc;
    count(c, DT_COLL_ALLREDUCE, n, t);
    (*req)->t = t;
    if (c->backend == DT_COMM_MPI && n > 0) {
        dt_comm_req *q = *req;
        q->kind = PIECE_ALLREDUCE;
        q->dst = buf;
        q->n = n;
        q->piece = piece_elems(t, 1);
        if ((rc = start_piece(c, q, err))) {
            free(q);
            *req = NULL;
            return rc;
        }
    }
    if (op == DT_RED_AVG) {
        (*req)->avg_buf = buf;
        (*req)->avg_count = n;
    }
    return DT_OK;
}

int dt_comm_ireduce_scatter(dt_comm *c, const void *send, void *recv, size_t n, dt_dtype t,
                            dt_reduce_op op, dt_comm_req **req, dt_error *err) {
#ifdef DT_HAVE_CUDA
    if (c->backend == DT_COMM_NCCL) {
        int nrc = nccl_req(c, "reduce-scatter", DT_COLL_REDUCE_SCATTER, n * (size_t)c->size, t, req, err);
        return nrc ? nrc : nccl_started(n ? g_nccl.reduce_scatter(c->nccl, send, recv, n, t, op, err) : DT_OK, req);
    }
#endif
    int rc = check_count(n * (size_t)c->size, "reduce-scatter", err);
    if (rc) return rc;
    if ((rc = new_req("reduce-scatter", req, err))) return rc;
    count(c, DT_COLL_REDUCE_SCATTER, n * (size_t)c->size, t);
    (*req)->t = t;
    size_t esz = (size_t)dt_dtype_size(t);
    if (c->backend == DT_COMM_MPI && n > 0) {
        /* Pieces of every block are packed into a bounce buffer the request owns;
         * so is the whole input when it is in place (recv is this rank's block of
         * send), since MPI_IN_PLACE semantics differ. */
        dt_comm_req *q = *req;
        q->kind = PIECE_REDUCE_SCATTER;
        q->send = send;
        q->dst = recv;
        q->n = n;
        q->piece = piece_elems(t, (size_t)c->size);
        const int in_place = (const char *)send + (size_t)c->rank * n * esz == (const char *)recv;
        if (q->piece < n || in_place) {
            const size_t per = q->piece < n ? q->piece : n;
            q->bounce = malloc(per * (size_t)c->size * esz);
            if (!q->bounce) {
                free(q);
                *req = NULL;
                return dt_errorf(err, DT_ENOMEM, "out of memory for a reduce-scatter's staging");
            }
        }
        if ((rc = start_piece(c, q, err))) {
            free(q->bounce);
            free(q);
            *req = NULL;
            return rc;
        }
    } else if (n > 0 && send != recv) {
        memmove(recv, send, n * esz);
    }
    if (op == DT_RED_AVG) {
        (*req)->avg_buf = recv;
        (*req)->avg_count = n;
    }
    return DT_OK;
}

int dt_comm_iallgather(dt_comm *c, const void *send, void *recv, size_t n, dt_dtype t,
                       dt_comm_req **req, dt_error *err) {
#ifdef DT_HAVE_CUDA
    if (c->backend == DT_COMM_NCCL) {
        int nrc = nccl_req(c, "all-gather", DT_COLL_ALLGATHER, n * (size_t)c->size, t, req, err);
        return nrc ? nrc : nccl_started(n ? g_nccl.allgather(c->nccl, send, recv, n, t, err) : DT_OK, req);
    }
#endif
    int rc = check_count(n * (size_t)c->size, "all-gather", err);
    if (rc) return rc;
    if ((rc = new_req("all-gather", req, err))) return rc;
    count(c, DT_COLL_ALLGATHER, n * (size_t)c->size, t);
    size_t esz = (size_t)dt_dtype_size(t);
    if (c->backend == DT_COMM_MPI && n > 0) {
        const void *sb = send;
        if ((const char *)recv + (size_t)c->rank * n * esz == (const char *)send) sb = MPI_IN_PLACE;
        rc = MPI_Iallgather(sb, (int)n, mpi_type(t), recv, (int)n, mpi_type(t), c->world, &(*req)->mpi);
        if (rc != MPI_SUCCESS) {
            free(*req);
            *req = NULL;
            return mpi_fail(rc, "all-gather", err);
        }
    } else if (n > 0 && send != recv) {
        memmove(recv, send, n * esz);
    }
    return DT_OK;
}

int dt_comm_wait(dt_comm *c, dt_comm_req *req, dt_error *err) {
    if (!req) return DT_OK;
    int rc = DT_OK;
#ifdef DT_HAVE_CUDA
    if (req->nccl) {   /* DT_RED_AVG was ncclAvg: nothing to scale */
        rc = g_nccl.wait(c->nccl, req->what, c->rank, c->timeout_s, err);
        free(req);
        return rc;
    }
#endif
    if (req->mpi != MPI_REQUEST_NULL) {
        double deadline = dt_clock_s() + c->timeout_s;
        int done = 0;
        while (!done) {
            int mrc = MPI_Test(&req->mpi, &done, MPI_STATUS_IGNORE);
            if (mrc != MPI_SUCCESS) {
                rc = mpi_fail(mrc, req->what, err);
                break;
            }
            if (done && req->next < req->n) {   /* the next piece of a reduction */
                if ((rc = start_piece(c, req, err))) break;
                done = 0;
                continue;
            }
            if (!done && dt_clock_s() > deadline) {
                rc = dt_errorf(err, DT_ECOMM,
                               "%s on rank %d did not complete within %.0f s: another rank died or hangs "
                               "(raise the limit with --timeout if steps are legitimately slow)",
                               req->what, c->rank, c->timeout_s);
                break;
            }
            if (!done) sched_yield();
        }
    }
    if (rc == DT_OK && req->avg_buf && c->size > 1) scale_avg(req->avg_buf, req->avg_count, req->t, c->size);
    free(req->bounce);
    const size_t blocks = req->kind == PIECE_REDUCE_SCATTER ? (size_t)c->size : 1;
    const int large = req->kind != PIECE_NONE && req->n * blocks * (size_t)dt_dtype_size(req->t) >= TRIM_MIN_BYTES;
    free(req);
#ifdef __GLIBC__
    /* A piece's temporaries below glibc's mmap threshold (the last, shorter piece;
     * calls under a piece) come from the heap and, freed, stay resident until the heap
     * is trimmed: give them back now, so the process holds them only while a call is in
     * flight (malloc_trim(3); docs/memory-model.md "The CPU runtime term"). */
    if (large) malloc_trim(0);
#else
    (void)large;
#endif
    return rc;
}

/* ---- blocking wrappers -------------------------------------------------- */

int dt_comm_allreduce(dt_comm *c, void *buf, size_t n, dt_dtype t, dt_reduce_op op, dt_error *err) {
    dt_comm_req *r = NULL;
    int rc = dt_comm_iallreduce(c, buf, n, t, op, &r, err);
    return rc ? rc : dt_comm_wait(c, r, err);
}

int dt_comm_reduce_scatter(dt_comm *c, const void *send, void *recv, size_t n, dt_dtype t,
                           dt_reduce_op op, dt_error *err) {
    dt_comm_req *r = NULL;
    int rc = dt_comm_ireduce_scatter(c, send, recv, n, t, op, &r, err);
    return rc ? rc : dt_comm_wait(c, r, err);
}

int dt_comm_allgather(dt_comm *c, const void *send, void *recv, size_t n, dt_dtype t, dt_error *err) {
    dt_comm_req *r = NULL;
    int rc = dt_comm_iallgather(c, send, recv, n, t, &r, err);
    return rc ? rc : dt_comm_wait(c, r, err);
}

int dt_comm_broadcast(dt_comm *c, void *buf, size_t n, dt_dtype t, int root, dt_error *err) {
    int rc = check_count(n, "broadcast", err);
    if (rc) return rc;
    if (root < 0 || root >= c->size)
        return dt_errorf(err, DT_EINVAL, "broadcast root %d outside world of %d ranks", root, c->size);
    count(c, DT_COLL_BROADCAST, n, t);
#ifdef DT_HAVE_CUDA
    if (c->backend == DT_COMM_NCCL) {
        if (n == 0) return DT_OK;
        rc = g_nccl.broadcast(c->nccl, buf, n, t, root, err);
        return rc ? rc : g_nccl.wait(c->nccl, "broadcast", c->rank, c->timeout_s, err);
    }
#endif
    if (c->backend != DT_COMM_MPI || n == 0) return DT_OK;
    dt_comm_req *r = NULL;
    if ((rc = new_req("broadcast", &r, err))) return rc;
    int mrc = MPI_Ibcast(buf, (int)n, mpi_type(t), root, c->world, &r->mpi);
    if (mrc != MPI_SUCCESS) {
        free(r);
        return mpi_fail(mrc, "broadcast", err);
    }
    return dt_comm_wait(c, r, err);
}

int dt_comm_barrier(dt_comm *c, dt_error *err) {
#ifdef DT_HAVE_CUDA
    if (c->backend == DT_COMM_NCCL) {
        int nrc = g_nccl.barrier(c->nccl, err);
        return nrc ? nrc : g_nccl.wait(c->nccl, "barrier", c->rank, c->timeout_s, err);
    }
#endif
    if (c->backend != DT_COMM_MPI) return DT_OK;
    dt_comm_req *r = NULL;
    int rc = new_req("barrier", &r, err);
    if (rc) return rc;
    int mrc = MPI_Ibarrier(c->world, &r->mpi);
    if (mrc != MPI_SUCCESS) {
        free(r);
        return mpi_fail(mrc, "barrier", err);
    }
    return dt_comm_wait(c, r, err);
}

/* ---- NCCL bootstrap ----------------------------------------------------- */

#ifdef DT_HAVE_CUDA
static dt_nccl_id_exchange g_id_exchange;
static void *g_id_exchange_ctx;

void dt_nccl_set_id_exchange(dt_nccl_id_exchange fn, void *ctx) {
    g_id_exchange = fn;
    g_id_exchange_ctx = ctx;
}

/* integer environment variable, or def when unset; -1 when set but not an int */
static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    return *end || x < 0 || x > INT32_MAX ? -1 : (int)x;
}

int dt_comm_init_nccl(dt_comm **out, double timeout_s, dt_error *err) {
    *out = NULL;
    if (!(timeout_s > 0)) return dt_errorf(err, DT_EINVAL, "communication timeout must be > 0 s");
    int under_mpi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
    dt_comm *c = NULL;
    int rc;
    if (under_mpi) {
        if ((rc = dt_comm_init_mpi(&c, timeout_s, err))) return rc;
    } else {
        /* torchrun-style: the launcher's variables */
        int rank = env_int("RANK", 0), size = env_int("WORLD_SIZE", 1);
        int lrank = env_int("LOCAL_RANK", 0), lsize = env_int("LOCAL_WORLD_SIZE", 1);
        if (rank < 0 || size < 1 || lrank < 0 || lsize < 1 || rank >= size)
            return dt_errorf(err, DT_EINVAL,
                             "NCCL: RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s are not a valid rank "
                             "layout (need 0 <= RANK < WORLD_SIZE)",
                             getenv("RANK") ? getenv("RANK") : "", getenv("WORLD_SIZE") ?
                             getenv("WORLD_SIZE") : "", getenv("LOCAL_RANK") ?
                             getenv("LOCAL_RANK") : "");
        c = calloc(1, sizeof *c);
        if (!c) return dt_errorf(err, DT_ENOMEM, "out of memory creating the NCCL communicator");
        c->rank = rank;
        c->size = size;
        c->local_rank = lrank;
        c->local_size = lsize;
        c->timeout_s = timeout_s;
    }
    /* bind to LOCAL_RANK's GPU before any NCCL call (one GPU per rank) */
    const dt_device_ops *dev = NULL;
    if ((rc = dt_device_get(DT_DEVICE_CUDA, c->local_rank, &dev, err))) goto fail;
    if ((rc = nccl_api_load(err))) goto fail;
    unsigned char id[DT_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    int self_bootstrap = getenv("NCCL_COMM_ID") != NULL;   /* every rank derives the id */
    if (c->rank == 0 || self_bootstrap)
        if ((rc = g_nccl.unique_id(id, err))) goto fail;
    if (!self_bootstrap && c->size > 1) {
        if (c->mpi_up) {
            rc = dt_comm_broadcast(c, id, DT_NCCL_ID_BYTES / sizeof(float), DT_DTYPE_FP32, 0, err);
        } else if (g_id_exchange) {
            rc = g_id_exchange(g_id_exchange_ctx, id, sizeof id, c->rank, c->size, err);
        } else {
            rc = dt_errorf(err, DT_EINVAL,
                           "NCCL: %d ranks but no way to share NCCL's unique id: launch with "
                           "mpirun/srun, or set NCCL_COMM_ID=<rank-0 host>:<free port> in every "
                           "rank's environment", c->size);
        }
        if (rc) goto fail;
    }
    if ((rc = g_nccl.create(&c->nccl, c->rank, c->size, id, timeout_s, err))) goto fail;
    c->backend = DT_COMM_NCCL;
    dt_comm_reset_counters(c);   /* the id broadcast is bootstrap, not training traffic */
    *out = c;
    return DT_OK;
fail:
    dt_error_prefix(err, "rank %d (LOCAL_RANK %d): ", c->rank, c->local_rank);
    dt_comm_free(c);
    return rc;
}
#endif
