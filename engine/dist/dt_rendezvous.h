/* dt_rendezvous.h — a TCP side channel for ranks that were not started by an
 * MPI launcher (torchrun --no-python, dtrun's --nnodes/--node-rank flags):
 * rank 0 listens, every other rank connects, and through it they share the
 * 128-byte NCCL unique id (any bytes), exchange small per-rank records (host
 * names for local-rank checks) and meet at barriers. Star topology through
 * rank 0; only for bootstrap-sized messages (bytes, not tensors).
 *
 * Port: rank 0 listens on master_port + DT_RENDEZVOUS_PORT_OFFSET, because
 * torchrun's own c10d store already listens on MASTER_PORT on node 0
 * (torchrun docs, "Environment Variables": MASTER_PORT hosts the C10d TCP
 * store; docs/launch.md §3).
 *
 * Every wait has a deadline of timeout_s from the call; on expiry or when a
 * peer disconnects the call fails with DT_ERUNTIME and one line naming the
 * rank and what was awaited, e.g.
 *   "rank 3 did not connect to 10.0.0.1:29501 within 60 s"
 *   "rank 2 closed its connection to rank 0 during barrier (it exited or crashed)".
 * After an error the handle is unusable: close it. */
#ifndef DT_RENDEZVOUS_H
#define DT_RENDEZVOUS_H

#include <stddef.h>

#include "dt_error.h"

#define DT_RENDEZVOUS_PORT_OFFSET 1    /* listen on MASTER_PORT + 1 */
#define DT_RENDEZVOUS_TIMEOUT_S 300.0  /* default join/exchange deadline, seconds */
#define DT_RENDEZVOUS_MAX_BYTES (1 << 20)  /* largest blob / record, bytes */

typedef struct dt_rdzv dt_rdzv;

/* Joins the rendezvous: rank 0 binds `port` (all interfaces) and waits for
 * world-1 peers; others connect to addr:port, retrying until the deadline.
 * Peers announce (rank, world); duplicates, out-of-range ranks and a different
 * world size are errors. port is the rendezvous port itself (callers add
 * DT_RENDEZVOUS_PORT_OFFSET to MASTER_PORT). world 1: no sockets at all. */
int dt_rendezvous_open(dt_rdzv **out, const char *addr, int port, int rank, int world, double timeout_s,
                       dt_error *err);
void dt_rendezvous_close(dt_rdzv *r);

/* rank 0's `bytes` bytes of buf arrive in every rank's buf. */
int dt_rendezvous_broadcast(dt_rdzv *r, void *buf, size_t bytes, dt_error *err);
/* all[i*bytes .. (i+1)*bytes) = rank i's `mine`, on every rank. */
int dt_rendezvous_allgather(dt_rdzv *r, const void *mine, void *all, size_t bytes, dt_error *err);
/* Returns when every rank has entered. */
int dt_rendezvous_barrier(dt_rdzv *r, dt_error *err);

#endif
