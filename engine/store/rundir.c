/* rundir.c — see dt_rundir.h. */
#include "dt_rundir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dt_safetensors.h"

#define DT_METRICS_NAME "metrics.jsonl"
#define DT_REPORT_STEM "run-report"
#define DT_HB_DIR "hb"

/* name == prefix followed by 1..max decimal digits, then suffix */
static int digits_between(const char *name, const char *prefix, const char *suffix, size_t max) {
    size_t pl = strlen(prefix), sl = strlen(suffix), n = strlen(name);
    if (n < pl + sl + 1 || strncmp(name, prefix, pl) != 0 || strcmp(name + n - sl, suffix) != 0) return 0;
    size_t d = strspn(name + pl, "0123456789");
    return d >= 1 && d <= max && pl + d + sl == n;
}

/* A top-level file dtrun writes (or a temporary of one: NAME.tmp, NAME.tmp.PID). */
static int own_file(const char *name) {
    char base[256];
    size_t n = strlen(name);
    if (n >= sizeof base) return 0;
    memcpy(base, name, n + 1);
    char *t = strstr(base, ".tmp");
    if (t && (t[4] == '\0' || (t[4] == '.' && t[5] && strspn(t + 5, "0123456789") == strlen(t + 5)))) *t = '\0';
    return strcmp(base, DT_METRICS_NAME) == 0 || strcmp(base, DT_REPORT_STEM ".json") == 0 ||
           digits_between(base, DT_REPORT_STEM "-rank", ".json", 9);
}

/* A checkpoint directory name: ckpt-N, .ckpt-N.tmp, .ckpt-N.old. */
static int own_ckpt_dir(const char *name) {
    return digits_between(name, DT_CKPT_PREFIX, "", 18) || digits_between(name, "." DT_CKPT_PREFIX, ".tmp", 18) ||
           digits_between(name, "." DT_CKPT_PREFIX, ".old", 18);
}

/* Is dir/name dtrun's (by name and kind)? */
static int own_entry(const char *dir, const char *name) {
    char p[DT_PATH_MAX * 2];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (lstat(p, &st) != 0) return 0;
    if (S_ISDIR(st.st_mode)) return own_ckpt_dir(name) || strcmp(name, DT_HB_DIR) == 0;
    return S_ISREG(st.st_mode) && own_file(name);
}

/* The first entry of dir that is not dtrun's (any entry when all_count), or
 * "" when there is none; -1 when dir cannot be listed. */
static int first_entry(const char *dir, int all_count, char *name, size_t n) {
    name[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (all_count || !own_entry(dir, e->d_name)) {
            snprintf(name, n, "%s", e->d_name);
            break;
        }
    }
    closedir(d);
    return 0;
}

int dt_rundir_check(const char *dir, dt_out_mode mode, dt_error *err) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT) return DT_OK;   /* created when the run starts */
        return dt_errorf(err, DT_EINVAL, "%s: cannot use the output directory: %s; choose another --out", dir,
                         strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return dt_errorf(err, DT_EINVAL, "%s: is %s, not a directory; choose another --out", dir,
                         dt_file_kind(st.st_mode));
    if (mode == DT_OUT_OVERWRITE) return DT_OK;
    char found[256], latest[DT_PATH_MAX * 2];
    int64_t step = -1;
    if (mode == DT_OUT_RESUME) {
        dt_ckpt_latest(dir, latest, sizeof latest, &step, err);
        if (step >= 0) return DT_OK;
    }
    /* a new run: nothing may be there; --resume without a checkpoint: only dtrun's own files */
    if (first_entry(dir, mode == DT_OUT_NEW, found, sizeof found))
        return dt_errorf(err, DT_EINVAL, "%s: cannot list the output directory: %s; choose another --out", dir,
                         strerror(errno));
    if (!found[0]) return DT_OK;
    if (mode == DT_OUT_NEW)
        return dt_errorf(err, DT_EINVAL,
                         "%s: the output directory is not empty (it holds %s); continue the run in it with --resume, "
                         "replace dtrun's own files there with --overwrite (other files are kept), or choose another "
                         "--out",
                         dir, found);
    return dt_errorf(err, DT_EINVAL,
                     "%s: --resume found no checkpoint here, and %s was not written by dtrun; start a new run beside "
                     "it with --overwrite (it is kept), or choose another --out",
                     dir, found);
}

/* unlink that tolerates a file already gone */
static int remove_file(const char *path, dt_error *err) {
    if (unlink(path) == 0 || errno == ENOENT) return DT_OK;
    return dt_errorf(err, DT_EIO, "%s: cannot remove (--overwrite): %s", path, strerror(errno));
}

/* hb/: the rank-K heartbeat files, then the directory when nothing else is in it. */
static int clear_heartbeats(const char *hb, dt_error *err) {
    DIR *d = opendir(hb);
    if (!d) return DT_OK;
    struct dirent *e;
    char p[DT_PATH_MAX * 3];
    int rc = DT_OK;
    while (!rc && (e = readdir(d))) {
        if (!digits_between(e->d_name, "rank-", "", 9)) continue;
        snprintf(p, sizeof p, "%s/%s", hb, e->d_name);
        rc = remove_file(p, err);
    }
    closedir(d);
    rmdir(hb);
    return rc;
}

int dt_rundir_clear(const char *dir, dt_error *err) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? DT_OK : dt_errorf(err, DT_EIO, "%s: cannot list: %s", dir, strerror(errno));
    struct dirent *e;
    char p[DT_PATH_MAX * 2];
    int rc = DT_OK;
    while (!rc && (e = readdir(d))) {
        if (!own_entry(dir, e->d_name)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (own_ckpt_dir(e->d_name)) dt_ckpt_remove(p);   /* a directory with other files in it stays */
        else if (strcmp(e->d_name, DT_HB_DIR) == 0) rc = clear_heartbeats(p, err);
        else rc = remove_file(p, err);
    }
    closedir(d);
    return rc ? rc : dt_fsync_dir(dir, err);
}

int dt_rundir_prepare(const char *dir, dt_out_mode mode, dt_comm *c, int *refused, dt_error *err) {
    const int many = dt_comm_size(c) > 1;
    dt_error ignored;
    dt_error_clear(&ignored);
    *refused = 0;
    /* every rank reads the same directory before any rank writes into it, so all agree */
    int rc = dt_rundir_check(dir, mode, err);
    int rc2 = many ? dt_comm_barrier(c, rc ? &ignored : err) : DT_OK;
    if (rc) {
        *refused = !rc2;
        return rc;
    }
    if (rc2) return rc2;
    if (dt_comm_rank(c) == 0) {
        if (mode == DT_OUT_OVERWRITE) rc = dt_rundir_clear(dir, err);
        if (!rc) rc = dt_mkdirs(dir, err);
    }
    /* the other ranks write (heartbeats, shards) only after rank 0 cleared */
    rc2 = many ? dt_comm_barrier(c, rc ? &ignored : err) : DT_OK;
    if (!rc && !rc2 && dt_comm_rank(c) != 0) rc = dt_mkdirs(dir, err);
    return rc ? rc : rc2;
}

/* The step of a complete metrics line ("{"step": N, ...}\n"), or -1. */
static long long line_step(const char *line, size_t len) {
    long long s = -1;
    int end = 0;
    if (len < 3 || line[len - 1] != '\n' || line[len - 2] != '}') return -1;
    if (sscanf(line, "{\"step\": %lld%n", &s, &end) != 1 || end == 0 || (line[end] != ',' && line[end] != '}'))
        return -1;
    return s;
}

int dt_metrics_truncate(const char *path, int64_t step, dt_error *err) {
    int fd;
    uint64_t size = 0;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return DT_OK;
    if (dt_file_open_regular(path, "metrics file", &fd, &size, err)) return err->code;
    FILE *in = fdopen(fd, "rb");
    if (!in) {
        close(fd);
        return dt_errorf(err, DT_ENOMEM, "%s: cannot read: %s", path, strerror(errno));
    }
    char tmp[DT_PATH_MAX * 2];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = NULL;
    char *line = NULL;
    size_t cap = 0;
    uint64_t kept = 0;
    long long prev = 0;
    int rc = DT_OK;
    ssize_t n;
    /* keep the complete lines of steps 1..step in increasing order; stop at the first other */
    while ((n = getline(&line, &cap, in)) > 0) {
        long long s = line_step(line, (size_t)n);
        if (s <= prev || s > step) break;
        if (!out && !(out = fopen(tmp, "wb"))) {
            rc = dt_errorf(err, DT_EIO, "%s: cannot create: %s", tmp, strerror(errno));
            break;
        }
        if (fwrite(line, 1, (size_t)n, out) != (size_t)n) {
            rc = dt_errorf(err, DT_EIO, "%s: cannot write: %s", tmp, strerror(errno));
            break;
        }
        kept += (uint64_t)n;
        prev = s;
    }
    int read_error = ferror(in);
    free(line);
    fclose(in);
    if (!rc && read_error) rc = dt_errorf(err, DT_EIO, "%s: cannot read: %s", path, strerror(errno));
    if (!rc && kept == size) {   /* nothing to drop: leave the file as it is */
        if (out) fclose(out);
        unlink(tmp);
        return DT_OK;
    }
    if (!rc && !out && !(out = fopen(tmp, "wb")))
        rc = dt_errorf(err, DT_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    if (!rc && (fflush(out) != 0 || fsync(fileno(out)) != 0))
        rc = dt_errorf(err, DT_EIO, "%s: cannot write: %s", tmp, strerror(errno));
    if (out && fclose(out) != 0 && !rc) rc = dt_errorf(err, DT_EIO, "%s: cannot write: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0) rc = dt_errorf(err, DT_EIO, "%s: cannot replace: %s", path, strerror(errno));
    if (rc) {
        unlink(tmp);
        return rc;
    }
    char dir[DT_PATH_MAX * 2];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    return dt_fsync_dir(slash ? dir : ".", err);
}

int64_t dt_metrics_size(FILE *f) {
    struct stat st;
    return fstat(fileno(f), &st) == 0 ? (int64_t)st.st_size : -1;
}

int dt_metrics_commit(FILE *f, int64_t good, const char *path, dt_error *err) {
    errno = 0;
    if (!ferror(f) && fflush(f) == 0) return DT_OK;
    int e = errno ? errno : EIO;
    __fpurge(f);   /* nothing of the failed line stays buffered for a later flush */
    clearerr(f);
    if (good >= 0 && ftruncate(fileno(f), (off_t)good) != 0)
        return dt_errorf(err, DT_EIO, "%s: cannot write: %s (and cannot remove the partial line: %s)", path,
                         strerror(e), strerror(errno));
    return dt_errorf(err, DT_EIO, "%s: cannot write: %s", path, strerror(e));
}

int dt_metrics_close(FILE **f, const char *path, dt_error *err) {
    if (!*f) return DT_OK;
    int64_t good = dt_metrics_size(*f);
    int rc = dt_metrics_commit(*f, good, path, err);
    if (!rc && fsync(fileno(*f)) != 0) rc = dt_errorf(err, DT_EIO, "%s: cannot write: %s", path, strerror(errno));
    if (fclose(*f) != 0 && !rc) rc = dt_errorf(err, DT_EIO, "%s: cannot write: %s", path, strerror(errno));
    *f = NULL;
    return rc;
}

void dt_run_id_new(char id[DT_RUN_ID_LEN + 1]) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;   /* no entropy yet (early boot): time and pid still tell runs apart */
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_sec * 1000000007ULL) ^ ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid();
    }
    snprintf(id, DT_RUN_ID_LEN + 1, "%016llx", (unsigned long long)v);
}
