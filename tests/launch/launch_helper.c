/* A stand-in rank for the spawner tests: records its pid, then behaves as told.
 *   launch_helper PID_DIR MODE     MODE: ok | exit3 | kill9 | hang | mpi | mpi_exit3 | torchrun2x2
 * exit3/kill9: rank 1 exits with code 3 / dies by SIGKILL after a short delay
 * while the other ranks would sleep for a minute (they must be torn down).
 * mpi: MPI_Init under the supervisor, an all-reduce of the ranks checked
 * against W(W-1)/2; mpi_exit3: rank 1 exits 3 while rank 0 waits in a barrier.
 * torchrun2x2: exits 6 unless torchrun's variables describe 2 nodes x 2 ranks
 * with this process on node 0 (dt_launch_spawn_direct's environment). */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_launch.h"

#define HELPER_SLEEP_S 60   /* far beyond the tests' time limits */
#define HELPER_DELAY_US 300000

int main(int argc, char **argv) {
    int st = dt_launch_supervisor(argc, argv);
    if (st >= 0) return st;
    if (argc != 3) {
        fprintf(stderr, "usage: launch_helper PID_DIR ok|exit3|kill9|hang\n");
        return 2;
    }
    dt_launch_info li;
    dt_error err;
    if (dt_launch_discover(NULL, &li, &err) || li.agent) {
        fprintf(stderr, "launch_helper: %s\n", li.agent ? "not started as a rank" : err.msg);
        return 2;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/pid-%d", argv[1], li.rank);
    FILE *f = fopen(path, "w");
    if (!f) return 2;
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    const char *mode = argv[2];
    if (strcmp(mode, "ok") == 0) return 0;
    if (strcmp(mode, "torchrun2x2") == 0)
        return li.source == DT_LAUNCH_SRC_TORCHRUN && li.world == 4 && li.local_world == 2 && li.nnodes == 2 &&
                       li.node_rank == 0 && li.local_rank == li.rank && getenv(DT_LAUNCH_ENV_CHILD) &&
                       strcmp(li.master_addr, "127.0.0.1") == 0 && li.master_port == 29555
                   ? 0
                   : 6;
    if (strncmp(mode, "mpi", 3) == 0) {
        MPI_Init(NULL, NULL);
        int rank, world, sum = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        if (rank != li.rank || world != li.world) return 4;
        MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (sum != world * (world - 1) / 2) return 5;
        if (strcmp(mode, "mpi_exit3") == 0) {
            if (rank == 1) { usleep(HELPER_DELAY_US); return 3; }
            MPI_Barrier(MPI_COMM_WORLD);   /* never completes: rank 1 is gone */
        }
        MPI_Finalize();
        return 0;
    }
    if (li.rank == 1 && strcmp(mode, "exit3") == 0) { usleep(HELPER_DELAY_US); return 3; }
    if (li.rank == 1 && strcmp(mode, "kill9") == 0) { usleep(HELPER_DELAY_US); raise(SIGKILL); }
    sleep(HELPER_SLEEP_S);
    return 0;
}
