/* heartbeat.c — per-rank liveness records and the "which rank?" diagnosis
 * (dt_heartbeat.h). */
#define _GNU_SOURCE
#include "dt_heartbeat.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct dt_heartbeat {
    int fd, rank, pid;
    int64_t step;            /* last step written */
    char host[128];
};

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int mkdir_p(const char *dir) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0777) && errno != EEXIST) return -1;
            *s = '/';
        }
    return mkdir(p, 0777) && errno != EEXIST ? -1 : 0;
}

static void my_host(char *h, size_t cap) {
    if (gethostname(h, cap - 1)) snprintf(h, cap, "?");
    h[cap - 1] = 0;
    for (char *c = h; *c; c++)
        if (*c == ' ' || *c == '\n') *c = '_';
}

static int write_record(dt_heartbeat *h, int64_t step, const char *state) {
    char rec[DT_HEARTBEAT_RECORD_BYTES];
    memset(rec, ' ', sizeof rec);
    int n = snprintf(rec, sizeof rec, "step=%lld pid=%d host=%s wall=%.3f state=%s", (long long)step, h->pid,
                     h->host, wall_s(), state);
    if (n < 0 || n >= (int)sizeof rec - 1) return DT_EIO;
    h->step = step;
    rec[n] = ' ';
    rec[sizeof rec - 1] = '\n';
    /* one pwrite of a fixed-size record at offset 0: readers see old or new */
    return pwrite(h->fd, rec, sizeof rec, 0) == (ssize_t)sizeof rec ? DT_OK : DT_EIO;
}

int dt_heartbeat_open(dt_heartbeat **out, const char *run_dir, int rank, dt_error *err) {
    *out = NULL;
    char dir[PATH_MAX], path[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/hb", run_dir);
    if (mkdir_p(dir))
        return dt_errorf(err, DT_EIO, "cannot create the heartbeat directory %s: %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/rank-%d", dir, rank);
    dt_heartbeat *h = calloc(1, sizeof *h);
    if (!h) return dt_errorf(err, DT_ENOMEM, "out of memory (heartbeat)");
    h->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (h->fd < 0) {
        free(h);
        return dt_errorf(err, DT_EIO, "cannot write heartbeat file %s: %s", path, strerror(errno));
    }
    h->rank = rank;
    h->pid = (int)getpid();
    my_host(h->host, sizeof h->host);
    if (write_record(h, -1, "run")) {
        dt_heartbeat_close(h, 0);
        return dt_errorf(err, DT_EIO, "cannot write heartbeat file %s: %s", path, strerror(errno));
    }
    *out = h;
    return DT_OK;
}

int dt_heartbeat_beat(dt_heartbeat *h, int64_t step) { return h ? write_record(h, step, "run") : DT_OK; }

void dt_heartbeat_close(dt_heartbeat *h, int clean) {
    if (!h) return;
    if (clean) write_record(h, h->step, "done");
    close(h->fd);
    free(h);
}

static int read_rank(const char *run_dir, int rank, const char *me, double now, dt_heartbeat_rank *r) {
    memset(r, 0, sizeof *r);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/hb/rank-%d", run_dir, rank);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char rec[DT_HEARTBEAT_RECORD_BYTES + 1] = {0};
    size_t n = fread(rec, 1, DT_HEARTBEAT_RECORD_BYTES, f);
    fclose(f);
    rec[n] = 0;
    long long step;
    double wall;
    char state[16];
    if (sscanf(rec, "step=%lld pid=%d host=%127s wall=%lf state=%15s", &step, &r->pid, r->host, &wall, state) != 5)
        return 0;
    r->present = 1;
    r->step = step;
    r->age_s = now - wall;
    if (r->age_s < 0) r->age_s = 0;   /* clock skew between hosts */
    r->done = strcmp(state, "done") == 0;
    if (strcmp(r->host, me) == 0 && r->pid > 0 && kill(r->pid, 0) != 0 && errno == ESRCH) r->gone = 1;
    return 1;
}

int dt_heartbeat_diagnose(const char *run_dir, int world, double stale_s, dt_heartbeat_rank *ranks, char *msg,
                          size_t cap) {
    char me[128];
    my_host(me, sizeof me);
    const double now = wall_s();
    int gone = -1, missing = -1, oldest = -1, n_bad = 0;
    double oldest_age = -1;
    dt_heartbeat_rank cur, best_gone = {0}, best_old = {0};
    for (int i = 0; i < world; i++) {
        read_rank(run_dir, i, me, now, &cur);
        if (ranks) ranks[i] = cur;
        if (!cur.present) {
            if (missing < 0) missing = i;
            n_bad++;
        } else if (cur.gone && !cur.done) {
            if (gone < 0) { gone = i; best_gone = cur; }
            n_bad++;
        } else if (!cur.done) {
            if (cur.age_s > stale_s) n_bad++;
            if (cur.age_s > oldest_age) { oldest_age = cur.age_s; oldest = i; best_old = cur; }
        }
    }
    char more[64] = "";
    if (n_bad > 1) snprintf(more, sizeof more, " (%d ranks look unhealthy)", n_bad);
    if (gone >= 0) {
        snprintf(msg, cap, "rank %d (pid %d, host %s) is gone; its last beat was at step %lld, %.0f s ago%s", gone,
                 best_gone.pid, best_gone.host, (long long)best_gone.step, best_gone.age_s, more);
        return gone;
    }
    if (missing >= 0) {
        snprintf(msg, cap, "rank %d never beat (no %s/hb/rank-%d): it did not start, died before step 0, or runs on "
                 "another node without a shared --out directory%s",
                 missing, run_dir, missing, more);
        return missing;
    }
    if (oldest >= 0 && oldest_age > stale_s) {
        snprintf(msg, cap, "rank %d last beat %.0f s ago at step %lld (pid %d, host %s)%s", oldest, oldest_age,
                 (long long)best_old.step, best_old.pid, best_old.host, more);
        return oldest;
    }
    if (oldest >= 0)
        snprintf(msg, cap, "all %d ranks beat within the last %.0f s (oldest: rank %d at step %lld, %.0f s ago)",
                 world, stale_s, oldest, (long long)best_old.step, oldest_age);
    else
        snprintf(msg, cap, "all %d ranks finished cleanly", world);
    return -1;
}
