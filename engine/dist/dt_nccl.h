/* dt_nccl.h — the NCCL backend of dt_comm (engine/cuda/comm_nccl.c), and the
 * constructor of an NCCL dt_comm (engine/dist/comm.c). Built only with CUDA
 * (DT_HAVE_CUDA); callers include it under that macro.
 *
 * Buffers passed to an NCCL dt_comm's collectives are DEVICE pointers (from the
 * CUDA device's alloc). Collectives are enqueued on the device's comm stream
 * after an event hand-off from the compute stream, and dt_comm_wait polls their
 * completion event with the communicator's deadline (NVIDIA's documented
 * pattern: cudaEventQuery + ncclCommGetAsyncError, ncclCommAbort on error or
 * timeout), then hands the result back to the compute stream with an event.
 * NCCL_* environment variables are left as the user set them. */
#ifndef DT_NCCL_H
#define DT_NCCL_H

#include <stddef.h>

#include "dt_comm.h"
#include "dt_error.h"
#include "dt_precision.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_NCCL_ID_BYTES 128   /* NCCL_UNIQUE_ID_BYTES (nccl.h) */

/* How the 128-byte unique id travels from rank 0 to every rank. mpirun / srun
 * launches use MPI_Bcast (built in). A torchrun-style launch registers its TCP
 * rendezvous here (engine/dist/dt_rendezvous.h): rank 0 passes the id it created, the
 * others receive it into id. Without either, NCCL_COMM_ID=host:port in every
 * rank's environment lets NCCL bootstrap itself. */
typedef int (*dt_nccl_id_exchange)(void *ctx, void *id, size_t bytes, int rank, int size,
                                   dt_error *err);
void dt_nccl_set_id_exchange(dt_nccl_id_exchange fn, void *ctx);

/* An NCCL world. Launched by mpirun/srun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or
 * PMIX_RANK set): rank, size and the per-host local rank come from MPI. Else
 * from RANK, WORLD_SIZE and LOCAL_RANK (torchrun). The process binds to GPU
 * LOCAL_RANK (cudaSetDevice) before ncclCommInitRank. Initialisation is
 * non-blocking with the timeout_s deadline. */
int dt_comm_init_nccl(dt_comm **out, double timeout_s, dt_error *err);

/* ---- low level (used by comm.c) ---- */
typedef struct dt_nccl dt_nccl;

int dt_nccl_create(dt_nccl **out, int rank, int size, const void *id, double timeout_s,
                   dt_error *err);
int dt_nccl_unique_id(void *id, dt_error *err);   /* DT_NCCL_ID_BYTES */
void dt_nccl_free(dt_nccl *n);
void dt_nccl_abort(dt_nccl *n);
/* Enqueue one collective (counts in elements, as dt_comm.h); what names it in
 * messages. Returns with the work queued and a completion event recorded. */
int dt_nccl_allreduce(dt_nccl *n, void *buf, size_t count, dt_dtype t, dt_reduce_op op,
                      dt_error *err);
int dt_nccl_reduce_scatter(dt_nccl *n, const void *send, void *recv, size_t recvcount,
                           dt_dtype t, dt_reduce_op op, dt_error *err);
int dt_nccl_allgather(dt_nccl *n, const void *send, void *recv, size_t sendcount, dt_dtype t,
                      dt_error *err);
int dt_nccl_broadcast(dt_nccl *n, void *buf, size_t count, dt_dtype t, int root, dt_error *err);
int dt_nccl_barrier(dt_nccl *n, dt_error *err);   /* a 1-element all-reduce */
/* Waits for everything enqueued so far, deadline timeout_s. */
int dt_nccl_wait(dt_nccl *n, const char *what, int rank, double timeout_s, dt_error *err);

#ifdef __cplusplus
}
#endif

#endif
