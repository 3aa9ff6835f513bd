/* The local spawner: 2 ranks of launch_helper under mpirun. A rank exiting 3
 * or dying by SIGKILL is named with its pid and host, the call returns
 * non-zero within seconds and no rank process is left; SIGTERM to the launcher
 * tears the job down; a clean run returns 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dt_launch.h"
#include "dt_test.h"
#include "dt_clock.h"

#define WORLD 2
#define MAX_WAIT_S 25.0   /* the teardown must finish well within this */

static const char *helper;
static char piddir[64];

static int read_pid(int rank) {
    char path[128];
    snprintf(path, sizeof path, "%s/pid-%d", piddir, rank);
    FILE *f = fopen(path, "r");
    int pid = -1;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1) pid = -1;
        fclose(f);
    }
    return pid;
}

static void clear_pids(void) {
    for (int r = 0; r < WORLD; r++) {
        char path[128];
        snprintf(path, sizeof path, "%s/pid-%d", piddir, r);
        unlink(path);
    }
}

/* Every rank pid that was recorded is gone (not even a zombie of ours). */
static void check_no_orphans(const char *mode) {
    for (int r = 0; r < WORLD; r++) {
        int pid = read_pid(r);
        CHECK(pid > 0);
        if (pid <= 0) continue;
        double until = dt_clock_s() + 2.0;   /* a SIGKILLed process needs a moment to be reaped */
        while (kill(pid, 0) == 0 && dt_clock_s() < until) usleep(20000);
        int alive = kill(pid, 0) == 0;
        if (alive) fprintf(stderr, "%s: rank %d (pid %d) survived\n", mode, r, pid);
        CHECK(!alive);
    }
}

/* Runs one spawner (mpirun-based or direct) on launch_helper in `mode`,
 * returns its result, its one-line log in `log` and the time it took. */
static dt_spawn_result run_spawner(const dt_launch_info *direct, const char *mode, char *log, size_t cap,
                                   double *took) {
    clear_pids();
    char *argv[] = {(char *)helper, piddir, (char *)mode, NULL};
    FILE *lf = tmpfile();
    dt_spawn_result res;
    dt_error err = {0};
    double t0 = dt_clock_s();
    int rc = direct ? dt_launch_spawn_direct(direct, argv, lf, &res, &err)
                    : dt_launch_spawn_mpirun(WORLD, argv, lf, &res, &err);
    *took = dt_clock_s() - t0;
    CHECK_EQ_I64(rc, DT_OK);
    rewind(lf);
    size_t n = fread(log, 1, cap - 1, lf);
    log[n] = 0;
    fclose(lf);
    fprintf(stderr, "[%s%s] %.2f s: %s", direct ? "direct " : "", mode, *took, n ? log : "(no message)\n");
    return res;
}

static dt_spawn_result spawn(const char *mode, char *log, size_t cap, double *took) {
    return run_spawner(NULL, mode, log, cap, took);
}

/* dtrun's path: dt_launch_spawn_local re-executes THIS binary (as dtrun
 * re-executes itself) with "--as-rank PID_DIR MODE"; the rank records its pid
 * and rank 1 fails in mode "exit3". */
static int as_rank(char **argv) {
    dt_launch_info li;
    dt_error err;
    if (dt_launch_discover(NULL, &li, &err) || li.agent || li.world != WORLD) return 4;
    snprintf(piddir, sizeof piddir, "%s", argv[2]);
    char path[128];
    snprintf(path, sizeof path, "%s/pid-%d", piddir, li.rank);
    FILE *f = fopen(path, "w");
    if (!f) return 4;
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    return strcmp(argv[3], "exit3") == 0 && li.rank == 1 ? 3 : 0;
}

/* A node agent of a 2-node job (--nnodes): its 2 ranks start as direct
 * children with torchrun's variables; a failing rank is named, the other one
 * stopped, nothing left behind. */
static dt_spawn_result spawn_direct(const char *mode, char *log, size_t cap, double *took) {
    dt_launch_info li;
    memset(&li, 0, sizeof li);
    li.source = DT_LAUNCH_SRC_FLAGS;
    li.agent = 1;
    li.nnodes = 2;
    li.node_rank = 0;
    li.local_world = WORLD;
    li.world = 2 * WORLD;
    li.rank = 0;
    strcpy(li.master_addr, "127.0.0.1");
    li.master_port = 29555;
    return run_spawner(&li, mode, log, cap, took);
}

static void test_spawn_direct(void) {
    char log[1024], want[512];
    double took;
    dt_spawn_result res = spawn_direct("torchrun2x2", log, sizeof log, &took);
    CHECK_EQ_I64(res.status, 0);
    CHECK_STR(log, "");
    check_no_orphans("direct torchrun2x2");
    res = spawn_direct("exit3", log, sizeof log, &took);
    CHECK_EQ_I64(res.failed_rank, 1);
    CHECK_EQ_I64(res.status, 3);
    snprintf(want, sizeof want,
             "dtrun: rank 1 (pid %d, host %s) exited with code 3; the other ranks on node 0 were stopped\n",
             read_pid(1), res.host);
    CHECK_STR(log, want);
    CHECK(took < MAX_WAIT_S);
    check_no_orphans("direct exit3");
    res = spawn_direct("kill9", log, sizeof log, &took);
    CHECK_EQ_I64(res.failed_rank, 1);
    CHECK_EQ_I64(res.signal, SIGKILL);
    CHECK(res.status != 0);
    CHECK(strstr(log, "was killed by signal 9") != NULL);
    check_no_orphans("direct kill9");
}

static void test_spawn_local(const char *self) {
    static const char *modes[] = {"ok", "exit3"};
    for (int m = 0; m < 2; m++) {
        clear_pids();
        dt_launch_info li;
        dt_error err = {0};
        CHECK_EQ_I64(dt_launch_discover(NULL, &li, &err), DT_OK);
        CHECK_EQ_I64(dt_launch_must_spawn(&li, WORLD), 1);
        char *av[] = {(char *)self, "--as-rank", piddir, (char *)modes[m], NULL};
        FILE *lf = tmpfile();
        int status = dt_launch_spawn_local(&li, WORLD, WORLD, 4, av, lf, &err);
        char log[512] = "";
        rewind(lf);
        size_t n = fread(log, 1, sizeof log - 1, lf);
        log[n] = 0;
        fclose(lf);
        fprintf(stderr, "[spawn_local %s] status %d: %s", modes[m], status, n ? log : "(no message)\n");
        CHECK_EQ_I64(status, m == 0 ? 0 : 1);
        if (m == 1) CHECK(strstr(log, "rank 1 (pid ") && strstr(log, "exited with code 3"));
        check_no_orphans(modes[m]);
    }
    /* the plan disagrees with --nproc-per-node: exit status 2, one line */
    dt_launch_info li;
    dt_error err = {0};
    dt_launch_flags f;
    dt_launch_flags_init(&f);
    f.nproc_per_node = 3;
    f.given = 1;
    CHECK_EQ_I64(dt_launch_discover(&f, &li, &err), DT_OK);
    char *av[] = {(char *)self, NULL};
    CHECK_EQ_I64(dt_launch_spawn_local(&li, 2, 2, 1, av, NULL, &err), 2);
    CHECK(strstr(err.msg, "the plan wants world_size 2") && strstr(err.msg, "dtrun's launch flags give 3"));
}

int main(int argc, char **argv) {
    int sup = dt_launch_supervisor(argc, argv);
    if (sup >= 0) return sup;
    if (argc == 4 && strcmp(argv[1], "--as-rank") == 0) return as_rank(argv);
    if (argc != 2) {
        fprintf(stderr, "usage: test_launch_spawn PATH/launch_helper\n");
        return 2;
    }
    helper = argv[1];
    snprintf(piddir, sizeof piddir, "/tmp/dt-spawn-XXXXXX");
    CHECK(mkdtemp(piddir) != NULL);
    char log[1024], want[512];
    double took;

    dt_spawn_result res = spawn("ok", log, sizeof log, &took);
    CHECK_EQ_I64(res.status, 0);
    CHECK_EQ_I64(res.failed_rank, -1);
    CHECK_STR(log, "");
    check_no_orphans("ok");

    res = spawn("exit3", log, sizeof log, &took);
    CHECK_EQ_I64(res.failed_rank, 1);
    CHECK_EQ_I64(res.exit_code, 3);
    CHECK_EQ_I64(res.status, 3);
    CHECK_EQ_I64(res.pid, read_pid(1));
    snprintf(want, sizeof want, "dtrun: rank 1 (pid %d, host %s) exited with code 3; the other ranks were stopped\n",
             read_pid(1), res.host);
    CHECK_STR(log, want);
    CHECK(took < MAX_WAIT_S);
    check_no_orphans("exit3");

    res = spawn("kill9", log, sizeof log, &took);
    CHECK_EQ_I64(res.failed_rank, 1);
    CHECK_EQ_I64(res.signal, SIGKILL);
    CHECK(res.status != 0);
    snprintf(want, sizeof want, "dtrun: rank 1 (pid %d, host %s) was killed by signal 9", read_pid(1), res.host);
    CHECK(strncmp(log, want, strlen(want)) == 0);
    CHECK(took < MAX_WAIT_S);
    check_no_orphans("kill9");

    /* real MPI ranks: MPI_Init works under the supervisor; a rank exiting
     * mid-job while the other blocks in MPI_Barrier is still named */
    res = spawn("mpi", log, sizeof log, &took);
    CHECK_EQ_I64(res.status, 0);
    CHECK_STR(log, "");
    check_no_orphans("mpi");
    res = spawn("mpi_exit3", log, sizeof log, &took);
    CHECK_EQ_I64(res.failed_rank, 1);
    CHECK_EQ_I64(res.exit_code, 3);
    CHECK(strstr(log, "rank 1 (pid ") && strstr(log, "exited with code 3"));
    CHECK(took < MAX_WAIT_S);
    check_no_orphans("mpi_exit3");

    /* SIGTERM to the launcher (here: a forked copy of it) stops every rank */
    clear_pids();
    char tlog_path[128], tlog[512] = "";
    snprintf(tlog_path, sizeof tlog_path, "%s/launcher.log", piddir);
    pid_t launcher = fork();
    if (launcher == 0) {
        char *av[] = {(char *)helper, piddir, "hang", NULL};
        dt_spawn_result r2;
        dt_error e2;
        FILE *lf = fopen(tlog_path, "w");
        int rc = dt_launch_spawn_mpirun(WORLD, av, lf, &r2, &e2);
        fclose(lf);
        _exit(rc ? 100 : r2.status);
    }
    double t0 = dt_clock_s();
    while ((read_pid(0) <= 0 || read_pid(1) <= 0) && dt_clock_s() - t0 < MAX_WAIT_S) usleep(20000);
    CHECK(read_pid(0) > 0 && read_pid(1) > 0);
    kill(launcher, SIGTERM);
    int st = 0;
    t0 = dt_clock_s();
    while (waitpid(launcher, &st, WNOHANG) == 0 && dt_clock_s() - t0 < MAX_WAIT_S) usleep(20000);
    took = dt_clock_s() - t0;
    FILE *tf = fopen(tlog_path, "r");
    if (tf) {
        size_t tn = fread(tlog, 1, sizeof tlog - 1, tf);
        tlog[tn] = 0;
        fclose(tf);
    }
    fprintf(stderr, "[sigterm] %s", tlog);
    CHECK(strstr(tlog, "dtrun: stopped by signal 15") != NULL);
    fprintf(stderr, "[sigterm] launcher stopped in %.2f s with status %d\n", took,
            WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    CHECK(took < MAX_WAIT_S);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    check_no_orphans("sigterm");

    test_spawn_local(argv[0]);
    test_spawn_direct();

    /* no mpirun: one line saying so, non-zero */
    setenv(DT_LAUNCH_ENV_MPIRUN, "/nonexistent/mpirun", 1);
    res = spawn("ok", log, sizeof log, &took);
    unsetenv(DT_LAUNCH_ENV_MPIRUN);
    CHECK_EQ_I64(res.status, 1);
    CHECK_STR(log, "dtrun: cannot run /nonexistent/mpirun: No such file or directory (install Open MPI or "
                   "set DT_MPIRUN to mpirun's path)\n");

    clear_pids();
    unlink(tlog_path);
    rmdir(piddir);
    TEST_MAIN_END();
}
