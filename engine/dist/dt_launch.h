/* dt_launch.h — how a dtrun process learns its place in the job, and how
 * `dtrun plan.json` alone starts every local rank (docs/launch.md §1).
 *
 * Rank discovery, first match wins (docs/launch.md §2 gives the order and
 * DeepSpeed's, deepspeed/comm/comm.py init_distributed):
 *   1. dtrun's own flags: --nnodes N --node-rank R --nproc-per-node M
 *      --master-addr A --master-port P (dash or underscore, "--f V" or "--f=V",
 *      like torchrun). The process is then a NODE AGENT: it starts the node's
 *      M ranks itself (M defaults to the plan's cluster.gpus_per_node).
 *   2. torchrun: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
 *      MASTER_ADDR, MASTER_PORT (torchrun --no-python dtrun plan.json).
 *   3. Open MPI: OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE (mpirun).
 *   4. Slurm: SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NNODES,
 *      SLURM_NODEID; MASTER_ADDR from the first host of SLURM_STEP_NODELIST /
 *      SLURM_JOB_NODELIST when MASTER_ADDR is unset (srun).
 *   5. none: a lone process; it is a node agent for a one-node job.
 *
 * Typical use in dtrun's main (see docs/launch.md §API):
 *
 *   int st = dt_launch_supervisor(argc, argv); if (st >= 0) return st;
 *   dt_launch_flags lf; dt_launch_flags_parse(&lf, &argc, argv, &err);  // strips the flags
 *   ... parse the rest, load the plan ...
 *   dt_launch_info li; dt_launch_discover(&lf, &li, &err);
 *   if (dt_launch_must_spawn(&li, world))
 *       return dt_launch_spawn_local(&li, world, gpus_per_node,
 *                                    argc, argv, stderr, &err);   // main's exit status
 *   dt_launch_check_world(&li, world, gpus_per_node, nodes, &err);
 *   ... comm backend per dt_launch_backend(&li, is_cuda, ...) ...
 *
 * Library functions return DT_* codes with one line in dt_error; they never
 * print (except the spawner's failure line, to the FILE the caller gives) and
 * never exit. */
#ifndef DT_LAUNCH_H
#define DT_LAUNCH_H

#include <stdio.h>

#include "dt_error.h"
#include "dt_consts.h"

#define DT_LAUNCH_ADDR_MAX 256
#define DT_LAUNCH_DEFAULT_ADDR DT_TORCHRUN_DEFAULT_ADDR
#define DT_LAUNCH_DEFAULT_PORT DT_TORCHRUN_DEFAULT_PORT

/* Environment markers set by the spawner for the processes it starts. */
#define DT_LAUNCH_ENV_SUPERVISE "DT_LAUNCH_SUPERVISE"  /* = status dir: become a rank supervisor */
#define DT_LAUNCH_ENV_CHILD "DT_LAUNCH_CHILD"          /* = 1: a spawned rank; never spawn again */
#define DT_LAUNCH_ENV_MPIRUN "DT_MPIRUN"               /* optional path of mpirun to use */

typedef enum {
    DT_LAUNCH_SRC_NONE = 0,
    DT_LAUNCH_SRC_FLAGS,
    DT_LAUNCH_SRC_TORCHRUN,
    DT_LAUNCH_SRC_MPI,
    DT_LAUNCH_SRC_SLURM
} dt_launch_source;

/* dtrun's launch flags; -1 / "" when not given. */
typedef struct dt_launch_flags {
    int nnodes, node_rank, nproc_per_node, master_port;
    char master_addr[DT_LAUNCH_ADDR_MAX];
    int given;               /* number of launch flags seen */
} dt_launch_flags;

typedef struct dt_launch_info {
    dt_launch_source source;
    int agent;               /* 1: this process starts the node's ranks (flags, none);
                                0: this process IS rank `rank` */
    int rank, local_rank;    /* agents: rank of the node's first rank, local_rank 0 */
    int world, local_world;  /* 0 = not known yet (agent without --nproc-per-node / none):
                                dt_launch_check_world fills them from the plan */
    int node_rank, nnodes;
    char master_addr[DT_LAUNCH_ADDR_MAX];
    int master_port;
} dt_launch_info;

const char *dt_launch_source_name(dt_launch_source s);  /* "flags" | "torchrun" | "mpi" | "slurm" | "none" */

void dt_launch_flags_init(dt_launch_flags *f);
/* Removes every launch flag (and its value) from argv, shifting the rest down
 * and updating *argc (argv[*argc] stays NULL). Bad values: DT_EINVAL. */
int dt_launch_flags_parse(dt_launch_flags *f, int *argc, char **argv, dt_error *err);

/* Fills *out from flags (may be NULL) and the environment, in the order above.
 * Inconsistent values (rank >= world, local_rank >= local_world, a family half
 * set, flags under another launcher that disagree) give DT_EINVAL naming the
 * variables. */
int dt_launch_discover(const dt_launch_flags *flags, dt_launch_info *out, dt_error *err);

/* The plan's world (world_size, gpus_per_node, nodes) against the launched
 * one; fills unknown world/local_world of agents. DT_EINVAL names both, e.g.
 * "the plan wants world_size 4 (1 node x 4) but mpirun started 2 ranks ...". */
int dt_launch_check_world(dt_launch_info *li, int world_size, int gpus_per_node, int nodes,
                          dt_error *err);

/* First host of a Slurm hostlist ("gpu[07-09,12],cpu1" -> "gpu07"). DT_EINVAL
 * for an empty or malformed list. */
int dt_launch_first_host(const char *hostlist, char *out, size_t cap, dt_error *err);

/* Rank-by-hostname: given every rank's host name (world records of `stride`
 * bytes, NUL-terminated, e.g. from dt_rendezvous_allgather), the number of
 * lower ranks on this rank's host and the count on it. */
void dt_launch_local_from_hosts(const char *hosts, size_t stride, int world, int rank,
                                int *local_rank, int *local_world);

/* 1 when this process must start the ranks itself: an agent (flags, none)
 * and a plan with world_size > 1. An agent of a one-rank plan just trains
 * (dt_launch_check_world makes it rank 0 of 1). */
int dt_launch_must_spawn(const dt_launch_info *li, int world_size);

/* Which bootstrap the ranks use once launched (docs/launch.md §Bootstrap):
 * SELF for a world of one; MPI when an MPI launcher started the ranks (mpirun,
 * srun --mpi=pmix): dt_comm_init_mpi, and for CUDA the 128-byte NCCL id goes
 * through MPI_Bcast; TCP when torchrun or dtrun's flags started them: CUDA
 * ranks share the NCCL id with dt_rendezvous at master_addr:master_port +
 * DT_RENDEZVOUS_PORT_OFFSET, and CPU ranks join one MPI world over the same
 * channel (dt_comm_init_mpi_tcp, dt_mpijoin.h). */
typedef enum { DT_BOOT_SELF = 0, DT_BOOT_MPI, DT_BOOT_TCP } dt_launch_boot;
int dt_launch_bootstrap(const dt_launch_info *li, int is_cuda, dt_launch_boot *out, dt_error *err);

/* ---- spawning ----------------------------------------------------------- */

/* Runs `argv` (argv[0] = program path; NULL-terminated) as `world` ranks on
 * this machine under mpirun (-n world --oversubscribe, --allow-run-as-root as
 * root), each wrapped in a rank supervisor (the program must call
 * dt_launch_supervisor first thing in main). Forwards stdout/stderr, waits.
 * Ctrl-C/SIGTERM to the caller, or any rank failing, tears down the whole
 * process group. Returns the exit status for main: 0 when every rank exited 0;
 * otherwise 1 (or the failing code) after printing ONE line to `log`:
 *   "dtrun: rank 1 (pid 4242, host h) exited with code 3; the other ranks were stopped"
 *   "dtrun: rank 0 (pid 4241, host h) was killed by signal 9 (Killed); ..."
 * timeout_s bounds the teardown grace (SIGTERM -> SIGKILL), not the run. */
typedef struct dt_spawn_result {
    int failed_rank;         /* -1 when all ranks succeeded */
    int pid, exit_code, signal;
    char host[DT_LAUNCH_ADDR_MAX];
    int status;              /* what the caller's main should return */
} dt_spawn_result;

int dt_launch_spawn_mpirun(int world, char *const argv[], FILE *log, dt_spawn_result *res,
                           dt_error *err);

/* Starts this node's li->local_world ranks as children of the agent, the way
 * torchrun does: argv (argv[0] = program path) with RANK, LOCAL_RANK,
 * WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT and DT_LAUNCH_CHILD=1 set. Waits; the first rank that fails on its
 * own stops the node's others (SIGTERM, then SIGKILL after a grace) and is
 * named in ONE line to `log`, like dt_launch_spawn_mpirun. Ranks on other
 * nodes learn of it through their collectives' deadline. */
int dt_launch_spawn_direct(const dt_launch_info *li, char *const argv[], FILE *log, dt_spawn_result *res,
                           dt_error *err);

/* dtrun's entry: the agent starts this node's ranks for the plan and returns
 * main's exit status (0 ok, 1 a rank failed, 2 bad launch). One node: mpirun
 * with local_world ranks (dt_launch_spawn_mpirun). Several nodes (--nnodes):
 * dt_launch_spawn_direct on every node; the ranks meet at
 * master_addr:master_port + DT_RENDEZVOUS_PORT_OFFSET. argv is dtrun's own argv
 * with the launch flags already stripped. */
int dt_launch_spawn_local(dt_launch_info *li, int world_size, int gpus_per_node, int argc, char **argv,
                          FILE *log, dt_error *err);

/* Call first in main. Returns -1 when this process should carry on normally;
 * otherwise this process was started as a rank supervisor (DT_LAUNCH_SUPERVISE
 * set): it ran the real rank as its child (same argv, DT_LAUNCH_CHILD=1),
 * recorded pid/host/exit in the status dir, and returns the child's exit status. */
int dt_launch_supervisor(int argc, char **argv);

#endif
