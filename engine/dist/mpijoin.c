/* mpijoin.c — an MPI world from singletons and a TCP rendezvous (dt_mpijoin.h). */
#define _GNU_SOURCE
#include "dt_mpijoin.h"
#include "dt_clock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DT_MPIJOIN_URI_MAX 1024          /* bytes of ompi-server's URI line, NUL included */
#define DT_MPIJOIN_WATCH_NS 50000000L    /* watchdog poll period: 50 ms */
#define DT_MPIJOIN_STOP_GRACE_S 2.0      /* SIGTERM -> SIGKILL for ompi-server at the end */

struct dt_mpijoin {
    pid_t server;            /* rank 0: the ompi-server child; 0 elsewhere */
    char dir[256];           /* rank 0: temporary directory of the URI file */
    pthread_t watchdog;
    int watching;
    atomic_int joined;
    int rank;
    double deadline, timeout_s;
};

/* ---- ompi-server (rank 0) ------------------------------------------------ */

/* Starts `ompi-server --no-daemonize -r FILE` and reads the URI line it
 * writes there (to a pipe it would sit in stdio's buffer until exit). */
static int start_server(dt_mpijoin *j, char *uri, size_t cap, dt_error *err) {
    const char *prog = getenv(DT_MPIJOIN_ENV_SERVER);
    if (!prog || !*prog) prog = "ompi-server";
    const char *tmp = getenv("TMPDIR");
    snprintf(j->dir, sizeof j->dir, "%s/dtrun-ompi-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(j->dir)) {
        j->dir[0] = 0;
        return dt_errorf(err, DT_EIO, "cannot create a directory for ompi-server's URI in %s: %s",
                         tmp && *tmp ? tmp : "/tmp", strerror(errno));
    }
    char file[sizeof j->dir + 8];
    snprintf(file, sizeof file, "%s/uri", j->dir);
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid < 0) return dt_errorf(err, DT_ERUNTIME, "fork failed: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);   /* rank 0 gone -> the server goes too */
        if (getppid() != me) _exit(1);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
        execlp(prog, prog, "--no-daemonize", "-r", file, (char *)NULL);
        _exit(127);
    }
    j->server = pid;
    for (;;) {
        int st = 0;
        if (waitpid(pid, &st, WNOHANG) == pid) {   /* the server exited (or never started) */
            j->server = 0;
            if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
                return dt_errorf(err, DT_ERUNTIME,
                                 "cannot run %s, which a CPU run without mpirun needs to connect its ranks "
                                 "(install openmpi-bin, set %s to its path, or launch with mpirun/srun)",
                                 prog, DT_MPIJOIN_ENV_SERVER);
            return dt_errorf(err, DT_ERUNTIME, "%s exited (%s %d) before reporting its URI", prog,
                             WIFSIGNALED(st) ? "signal" : "code", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        }
        FILE *f = fopen(file, "r");
        if (f) {
            size_t n = fread(uri, 1, cap - 1, f);
            fclose(f);
            uri[n] = 0;
            char *nl = strchr(uri, '\n');
            if (nl) {   /* a whole line: written and flushed */
                *nl = 0;
                return DT_OK;
            }
            if (n + 1 >= cap)
                return dt_errorf(err, DT_ERUNTIME, "%s reported a URI longer than %zu bytes", prog, cap);
        }
        if (dt_clock_s() > j->deadline)
            return dt_errorf(err, DT_ERUNTIME, "%s did not report its URI within %.0f s", prog, j->timeout_s);
        struct timespec ts = {0, DT_MPIJOIN_WATCH_NS};
        nanosleep(&ts, NULL);
    }
}

static void stop_server(dt_mpijoin *j) {
    if (j->server > 0) {
        kill(j->server, SIGTERM);
        double until = dt_clock_s() + DT_MPIJOIN_STOP_GRACE_S;
        int st;
        while (waitpid(j->server, &st, WNOHANG) == 0) {
            if (dt_clock_s() > until) {
                kill(j->server, SIGKILL);
                waitpid(j->server, &st, 0);
                break;
            }
            struct timespec ts = {0, DT_MPIJOIN_WATCH_NS};
            nanosleep(&ts, NULL);
        }
        j->server = 0;
    }
    if (j->dir[0]) {
        char file[sizeof j->dir + 8];
        snprintf(file, sizeof file, "%s/uri", j->dir);
        unlink(file);
        rmdir(j->dir);
        j->dir[0] = 0;
    }
}

/* ---- watchdog ------------------------------------------------------------ */

static void *watch(void *arg) {
    dt_mpijoin *j = arg;
    while (!atomic_load(&j->joined)) {
        if (dt_clock_s() > j->deadline) {
            fprintf(stderr,
                    "dtrun: rank %d: the MPI world did not form within %.0f s (a rank died, or cannot reach "
                    "rank 0's ompi-server); stopping\n",
                    j->rank, j->timeout_s);
            fflush(stderr);
            if (j->server > 0) kill(j->server, SIGKILL);
            _exit(1);
        }
        struct timespec ts = {0, DT_MPIJOIN_WATCH_NS};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void stop_watch(dt_mpijoin *j) {
    atomic_store(&j->joined, 1);
    if (j->watching) pthread_join(j->watchdog, NULL);
    j->watching = 0;
}

/* ---- the join ------------------------------------------------------------- */

static int mpi_fail(int code, const char *what, dt_error *err) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, s, &len);
    return dt_errorf(err, DT_ERUNTIME, "%s failed: %s", what, s);
}

void dt_mpijoin_finish(dt_mpijoin *j) {
    if (!j) return;
    stop_watch(j);
    stop_server(j);
    free(j);
}

int dt_mpijoin_init(dt_rdzv *rdzv, int rank, int world_size, double timeout_s, MPI_Comm *world,
                    dt_mpijoin **out, dt_error *err) {
    *out = NULL;
    if (world_size < 2 || rank < 0 || rank >= world_size)
        return dt_errorf(err, DT_EINVAL, "MPI join: rank %d of %d (needs 2 or more ranks)", rank, world_size);
    dt_mpijoin *j = calloc(1, sizeof *j);
    if (!j) return dt_errorf(err, DT_ENOMEM, "out of memory (MPI join)");
    j->rank = rank;
    j->timeout_s = timeout_s;
    j->deadline = dt_clock_s() + timeout_s;
    /* Open MPI refuses root unless told; dtrun's own mpirun launch passes
     * --allow-run-as-root the same way (launch.c). */
    if (geteuid() == 0) {
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    }

    /* mpirun -q's setting: no multi-line banners from MPI_Abort (dtrun prints
     * its own one-line reason first) */
    setenv("OMPI_MCA_orte_execute_quiet", "1", 0);

    /* 1. rank 0's ompi-server URI to everyone (empty: it failed, see rank 0) */
    char uri[DT_MPIJOIN_URI_MAX] = {0};
    int rc = DT_OK;
    if (rank == 0) rc = start_server(j, uri, sizeof uri, err);
    if (rank == 0 && rc) uri[0] = 0;
    dt_error e2;
    int brc = dt_rendezvous_broadcast(rdzv, uri, sizeof uri, rank == 0 && rc ? &e2 : err);
    if (rc || brc) {
        dt_mpijoin_finish(j);
        return rc ? rc : brc;
    }
    if (!uri[0]) {
        dt_mpijoin_finish(j);
        return dt_errorf(err, DT_ERUNTIME, "rank 0 could not start ompi-server to connect the ranks (see its message)");
    }
    setenv("OMPI_MCA_pmix_server_uri", uri, 1);

    /* 2. MPI as a singleton, under the watchdog from here on */
    if (pthread_create(&j->watchdog, NULL, watch, j) == 0) j->watching = 1;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            dt_mpijoin_finish(j);
            return dt_errorf(err, DT_ERUNTIME, "MPI_Init_thread failed (singleton start without mpirun)");
        }
    }
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);

    /* 3. rank 0's port name to everyone */
    char port[MPI_MAX_PORT_NAME] = {0};
    int mrc = MPI_SUCCESS;
    if (rank == 0) mrc = MPI_Open_port(MPI_INFO_NULL, port);
    if (mrc != MPI_SUCCESS) {
        mpi_fail(mrc, "MPI_Open_port", err);
        port[0] = 0;
    }
    if ((brc = dt_rendezvous_broadcast(rdzv, port, sizeof port, mrc ? &e2 : err)) || mrc) {
        dt_mpijoin_finish(j);
        return mrc ? DT_ERUNTIME : brc;
    }
    if (!port[0]) {
        dt_mpijoin_finish(j);
        return dt_errorf(err, DT_ERUNTIME, "rank 0 could not open an MPI port (see its message)");
    }

    /* 4. join one rank at a time: ranks 0..k-1 accept, rank k connects; the
     *    merge puts the joiner last (high = 1), so ranks come out in order */
    MPI_Comm cur;
    MPI_Comm_dup(MPI_COMM_SELF, &cur);
    MPI_Comm_set_errhandler(cur, MPI_ERRORS_RETURN);
    for (int k = 1; k < world_size && !rc; k++) {
        MPI_Comm inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
        if (rank < k) {
            mrc = MPI_Comm_accept(port, MPI_INFO_NULL, 0, cur, &inter);
            if (mrc) rc = mpi_fail(mrc, "MPI_Comm_accept", err);
        } else if (rank == k) {
            mrc = MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
            if (mrc) rc = mpi_fail(mrc, "MPI_Comm_connect to rank 0's port", err);
        }
        if (rank <= k && !rc) {
            mrc = MPI_Intercomm_merge(inter, rank == k, &merged);
            MPI_Comm_free(&inter);
            if (mrc) rc = mpi_fail(mrc, "MPI_Intercomm_merge", err);
            else {
                MPI_Comm_free(&cur);
                cur = merged;
                MPI_Comm_set_errhandler(cur, MPI_ERRORS_RETURN);
            }
        }
        if (!rc) rc = dt_rendezvous_barrier(rdzv, err);   /* rank k+1 connects only now */
    }
    if (rank == 0) MPI_Close_port(port);
    int r = -1, s = 0;
    if (!rc) {
        MPI_Comm_rank(cur, &r);
        MPI_Comm_size(cur, &s);
        if (r != rank || s != world_size)
            rc = dt_errorf(err, DT_ERUNTIME, "MPI join produced rank %d of %d where rank %d of %d was expected", r,
                           s, rank, world_size);
    }
    stop_watch(j);
    if (rc) {
        MPI_Comm_free(&cur);
        dt_mpijoin_finish(j);
        return rc;
    }
    *world = cur;
    *out = j;
    return DT_OK;
}
