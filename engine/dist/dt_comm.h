/* dt_comm.h — the communication interface the engine uses for every byte it
 * moves between ranks (per ZeRO stage: docs/zero.md "What runs when"):
 * all-reduce, reduce-scatter, all-gather, broadcast, barrier, blocking and
 * non-blocking, with byte counters per collective. Backends: "self" (world size 1), MPI (CPU ranks), NCCL (CUDA
 * ranks, engine/cuda/). No home-made collective algorithms: each call maps to
 * one library collective (an MPI reduction above DT_COMM_PIECE_BYTES: the same
 * collective on consecutive pieces, one after the other).
 *
 * Counts are ELEMENTS of the given dtype. Byte counters follow dt_plan.h's
 * dt_collective convention (the full logical buffer: all-reduce count*elem,
 * reduce-scatter recvcount*world*elem, all-gather sendcount*world*elem,
 * broadcast count*elem), summed over calls, so they compare 1:1 with the plan's
 * prediction.comm_bytes. Every wait has a deadline (timeout_s); a collective
 * that does not complete in time fails with DT_ERUNTIME naming the collective
 * and the likely cause (a rank died or hangs). */
#ifndef DT_COMM_H
#define DT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_plan.h"
#include "dt_precision.h"

typedef struct dt_comm dt_comm;
typedef struct dt_comm_req dt_comm_req;

typedef enum { DT_COMM_SELF = 0, DT_COMM_MPI = 1, DT_COMM_NCCL = 2 } dt_comm_backend;
typedef enum { DT_RED_SUM = 0, DT_RED_AVG = 1 } dt_reduce_op;

/* World of one: every collective is a local copy (counters still count). */
int dt_comm_init_self(dt_comm **out, dt_error *err);
/* MPI_COMM_WORLD (initialises MPI if the caller has not). timeout_s > 0. */
int dt_comm_init_mpi(dt_comm **out, double timeout_s, dt_error *err);
/* The MPI library settings the engine runs with (Open MPI: the ring for non-blocking
 * all-reduces), set in the environment unless the user set them; call before MPI_Init
 * where a program initialises MPI itself (dt_comm_init_mpi does). */
void dt_comm_mpi_defaults(void);
/* MPI for ranks no MPI launcher started (torchrun --no-python, dtrun --nnodes):
 * joins `world` singleton processes into one world through rank 0's
 * ompi-server, brokered over the TCP rendezvous (dt_mpijoin.h); this process
 * gets rank `rank`. Collectives then behave exactly as under mpirun. */
struct dt_rdzv;
int dt_comm_init_mpi_tcp(dt_comm **out, double timeout_s, struct dt_rdzv *rdzv, int rank, int world,
                         dt_error *err);
/* The ranks of c with the same color, ordered by key, as a communicator of their own
 * (MPI_Comm_split: collective over c, every rank calls it); "self" gives "self". NCCL:
 * DT_EINVAL (not built). Free it with dt_comm_free before c. */
int dt_comm_split(dt_comm *c, int color, int key, dt_comm **out, dt_error *err);
/* Finalises MPI only if dt_comm_init_mpi initialised it. */
void dt_comm_free(dt_comm *c);
/* Ends every rank of the job at once after an unrecoverable error (MPI_Abort);
 * a no-op for "self". */
void dt_comm_abort(dt_comm *c, int code);

dt_comm_backend dt_comm_backend_of(const dt_comm *c);
const char *dt_comm_backend_name(const dt_comm *c);   /* "self" | "mpi" | "nccl" */
int dt_comm_rank(const dt_comm *c);
int dt_comm_size(const dt_comm *c);
int dt_comm_local_rank(const dt_comm *c);             /* rank among processes on this host */
int dt_comm_local_size(const dt_comm *c);
double dt_comm_timeout(const dt_comm *c);
void dt_comm_set_timeout(dt_comm *c, double timeout_s);

/* Bytes of one library call of an MPI all-reduce or reduce-scatter: larger ones are
 * issued in pieces, one after the other. Open MPI's non-blocking collectives (libnbc)
 * allocate a temporary the size of the whole call — an in-place all-reduce on every
 * rank, a reduce-scatter (all blocks) on rank 0 — so a 1.35 GiB gradient all-reduce
 * cost 1.35 GiB more per rank (docs/memory-model.md "Buffers", "CPU runtime"). 32 MiB at
 * the 2-10 GB/s of a shared-memory reduction takes 3-15 ms, far above the tens of
 * microseconds a call costs. A reduce-scatter piece is packed into a staging buffer of
 * the same size (pieces of each block are not contiguous). NCCL is not split. */
#define DT_COMM_PIECE_BYTES ((size_t)32 << 20)

/* Blocking collectives. In place where the signature has one buffer.
 * reduce_scatter: send holds world*recvcount elements, rank i receives block i.
 * allgather: recv holds world*sendcount elements, block i from rank i; send may
 * alias recv + rank*sendcount (in place). */
int dt_comm_allreduce(dt_comm *c, void *buf, size_t count, dt_dtype t, dt_reduce_op op,
                      dt_error *err);
int dt_comm_reduce_scatter(dt_comm *c, const void *send, void *recv, size_t recvcount, dt_dtype t,
                           dt_reduce_op op, dt_error *err);
int dt_comm_allgather(dt_comm *c, const void *send, void *recv, size_t sendcount, dt_dtype t,
                      dt_error *err);
int dt_comm_broadcast(dt_comm *c, void *buf, size_t count, dt_dtype t, int root, dt_error *err);
int dt_comm_barrier(dt_comm *c, dt_error *err);

/* Non-blocking variants: start, then dt_comm_wait (which frees the request).
 * For DT_RED_AVG the division by world size happens in dt_comm_wait. Buffers
 * must stay untouched until the wait returns. */
int dt_comm_iallreduce(dt_comm *c, void *buf, size_t count, dt_dtype t, dt_reduce_op op,
                       dt_comm_req **req, dt_error *err);
int dt_comm_ireduce_scatter(dt_comm *c, const void *send, void *recv, size_t recvcount,
                            dt_dtype t, dt_reduce_op op, dt_comm_req **req, dt_error *err);
int dt_comm_iallgather(dt_comm *c, const void *send, void *recv, size_t sendcount, dt_dtype t,
                       dt_comm_req **req, dt_error *err);
int dt_comm_wait(dt_comm *c, dt_comm_req *req, dt_error *err);

/* Counters since creation or the last reset: bytes (dt_collective convention)
 * and number of calls per collective. */
int64_t dt_comm_bytes(const dt_comm *c, dt_collective coll);
int64_t dt_comm_calls(const dt_comm *c, dt_collective coll);
void dt_comm_reset_counters(dt_comm *c);

#endif
