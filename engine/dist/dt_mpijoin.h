/* dt_mpijoin.h — one MPI world for ranks that no MPI launcher started:
 * `torchrun --no-python dtrun plan.json` and `dtrun --nnodes N --node-rank R
 * ... plan.json` on CPU (docs/launch.md §3, "MPI world without mpirun").
 *
 * Each rank starts MPI as a singleton, then the singletons connect into one
 * intracommunicator with MPI's dynamic-process calls (MPI_Open_port /
 * MPI_Comm_accept / MPI_Comm_connect / MPI_Intercomm_merge, MPI-3.1 §10.4).
 * Open MPI 4 needs a rendezvous server for connect/accept between separately
 * started processes: rank 0 runs `ompi-server` (Open MPI's own tool) and every
 * rank points its MPI at it through OMPI_MCA_pmix_server_uri before MPI_Init.
 * The server's URI and rank 0's port name travel over the TCP rendezvous
 * (dt_rendezvous.h). Ranks join one at a time in rank order, so the merged
 * communicator's ranks equal the launcher's RANK; this is checked.
 *
 * The collectives themselves are Open MPI's, exactly as under mpirun.
 * MPI_Comm_accept/connect have no timeout: a watchdog thread ends this process
 * with one line on stderr (exit 1) if the join has not finished within
 * timeout_s — the only way out of a connect to a peer that died meanwhile. */
#ifndef DT_MPIJOIN_H
#define DT_MPIJOIN_H

#include <mpi.h>

#include "dt_error.h"
#include "dt_rendezvous.h"

#define DT_MPIJOIN_ENV_SERVER "DT_OMPI_SERVER"   /* optional path of ompi-server */

typedef struct dt_mpijoin dt_mpijoin;

/* Initialises MPI (MPI_THREAD_FUNNELED, as a singleton) and returns in *world
 * an intracommunicator of `world_size` processes in which this process has
 * rank `rank`. Every rank calls it with the same rendezvous. Errors: DT_ERUNTIME
 * with one line (ompi-server missing or failed, a rank outside the join). */
int dt_mpijoin_init(dt_rdzv *rdzv, int rank, int world_size, double timeout_s, MPI_Comm *world,
                    dt_mpijoin **out, dt_error *err);

/* Call after MPI_Finalize: rank 0 stops its ompi-server. NULL is fine. */
void dt_mpijoin_finish(dt_mpijoin *j);

#endif
