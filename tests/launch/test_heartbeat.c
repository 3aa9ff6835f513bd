/* Heartbeat records and the diagnosis that names a dead, missing or hung rank. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dt_heartbeat.h"
#include "dt_test.h"

#define STALE_S 30.0

/* Writes rank's record by hand with a beat `age_s` seconds old. */
static void fake_beat(const char *dir, int rank, long long step, int pid, double age_s, const char *state) {
    char path[512];
    snprintf(path, sizeof path, "%s/hb/rank-%d", dir, rank);
    FILE *f = fopen(path, "w");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char host[128];
    gethostname(host, sizeof host);
    fprintf(f, "step=%lld pid=%d host=%s wall=%.3f state=%s\n", step, pid, host,
            (double)ts.tv_sec + 1e-9 * ts.tv_nsec - age_s, state);
    fclose(f);
}

int main(void) {
    char dir[] = "/tmp/dt-hb-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char run[600];
    snprintf(run, sizeof run, "%s/run", dir);   /* not created yet: open makes it */
    const int world = 4;
    dt_error err = {0};
    dt_heartbeat *hb[4] = {0};
    for (int r = 0; r < 3; r++) CHECK_EQ_I64(dt_heartbeat_open(&hb[r], run, r, &err), DT_OK);
    for (int r = 0; r < 3; r++) CHECK_EQ_I64(dt_heartbeat_beat(hb[r], 17), DT_OK);
    char msg[512];
    dt_heartbeat_rank ranks[4];

    /* rank 3 never started */
    CHECK_EQ_I64(dt_heartbeat_diagnose(run, world, STALE_S, ranks, msg, sizeof msg), 3);
    CHECK(strstr(msg, "rank 3 never beat") != NULL);
    CHECK_EQ_I64(ranks[0].step, 17);
    CHECK_EQ_I64(ranks[0].pid, getpid());
    CHECK(ranks[0].age_s < 5.0);

    /* everyone fresh */
    CHECK_EQ_I64(dt_heartbeat_open(&hb[3], run, 3, &err), DT_OK);
    CHECK_EQ_I64(dt_heartbeat_beat(hb[3], 17), DT_OK);
    CHECK_EQ_I64(dt_heartbeat_diagnose(run, world, STALE_S, NULL, msg, sizeof msg), -1);
    CHECK(strstr(msg, "all 4 ranks beat within the last 30 s") != NULL);

    /* rank 2 hung: its last beat is 41 s old */
    fake_beat(run, 2, 16, getpid(), 41.0, "run");
    CHECK_EQ_I64(dt_heartbeat_diagnose(run, world, STALE_S, NULL, msg, sizeof msg), 2);
    char want[128];
    snprintf(want, sizeof want, "rank 2 last beat 41 s ago at step 16 (pid %d, host ", (int)getpid());
    CHECK(strstr(msg, want) != NULL);
    /* a finished rank with an old beat is not blamed */
    fake_beat(run, 2, 20, getpid(), 41.0, "done");
    CHECK_EQ_I64(dt_heartbeat_diagnose(run, world, STALE_S, NULL, msg, sizeof msg), -1);

    /* rank 1's process died: named first even though its beat is fresh */
    pid_t c = fork();
    if (c == 0) {
        dt_heartbeat *h;
        dt_error e;
        if (dt_heartbeat_open(&h, run, 1, &e) || dt_heartbeat_beat(h, 9)) _exit(1);
        _exit(0);   /* dies without a clean close */
    }
    int st;
    waitpid(c, &st, 0);
    fake_beat(run, 2, 16, getpid(), 41.0, "run");
    CHECK_EQ_I64(dt_heartbeat_diagnose(run, world, STALE_S, NULL, msg, sizeof msg), 1);
    snprintf(want, sizeof want, "rank 1 (pid %d, host ", (int)c);
    CHECK(strstr(msg, want) && strstr(msg, "is gone; its last beat was at step 9"));
    CHECK(strstr(msg, "(2 ranks look unhealthy)") != NULL);

    /* clean close keeps the step and marks done */
    dt_heartbeat_close(hb[0], 1);
    CHECK_EQ_I64(dt_heartbeat_diagnose(run, world, STALE_S, ranks, msg, sizeof msg), 1);
    CHECK_EQ_I64(ranks[0].done, 1);
    CHECK_EQ_I64(ranks[0].step, 17);
    for (int r = 1; r < 4; r++) dt_heartbeat_close(hb[r], 0);

    /* unwritable directory */
    dt_heartbeat *h;
    CHECK_EQ_I64(dt_heartbeat_open(&h, "/proc/dt-no-such/run", 0, &err), DT_EIO);
    CHECK(strstr(err.msg, "cannot create the heartbeat directory /proc/dt-no-such/run/hb") != NULL);

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ_I64(system(cmd), 0);
    TEST_MAIN_END();
}
