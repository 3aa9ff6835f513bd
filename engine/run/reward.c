/* reward.c — GRPO's reward command and the built-in exact-answer check (dt_reward.h). */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dt_clock.h"
#include "dt_reward.h"

extern char **environ;

/* how long one poll waits before the deadline is looked at again, and the pause between
 * waitpid polls once the command's stdout has closed (milliseconds) */
#define REWARD_POLL_MS 50
#define REWARD_WAIT_NS (10 * 1000 * 1000L)
/* how much of a command / an output line a message quotes */
#define REWARD_QUOTE 60

typedef struct { char *p; size_t n, cap; } buf;

static int buf_add(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* the JSONL the command reads: one object per item */
static int build_input(const dt_reward_item *items, int64_t n, buf *in, const char *cmd, dt_error *err) {
    for (int64_t i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        char *line = NULL;
        if (o && cJSON_AddStringToObject(o, "prompt", items[i].prompt ? items[i].prompt : "") &&
            cJSON_AddStringToObject(o, "completion", items[i].completion ? items[i].completion : "") &&
            (!items[i].answer || cJSON_AddStringToObject(o, "answer", items[i].answer)))
            line = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        int bad = !line || buf_add(in, line, strlen(line)) || buf_add(in, "\n", 1);
        free(line);
        if (bad) return dt_errorf(err, DT_ENOMEM, "reward command '%.*s': no memory for record %lld's JSON",
                                  REWARD_QUOTE, cmd, (long long)i);
    }
    return 0;
}

static int spawn(const char *cmd, int in_fd, int out_fd, pid_t *pid, dt_error *err) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_fd, STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    posix_spawnattr_setpgroup(&at, 0); /* its own group: a timeout kills the shell's children too */
    posix_spawnattr_setsigdefault(&at, &def);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&at, &none);
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    int rc = posix_spawn(pid, "/bin/sh", &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc) return dt_errorf(err, DT_ERUNTIME, "reward command '%.*s': cannot start /bin/sh: %s", REWARD_QUOTE, cmd,
                             strerror(rc));
    return 0;
}

/* kills the command's process group and reaps the shell */
static void kill_group(pid_t pid) {
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* feeds in to wfd and collects rfd into out until rfd closes or the deadline passes;
 * 1 on timeout, -1 on an OS error, 0 otherwise */
static int pump(int wfd, int rfd, const buf *in, buf *out, double deadline) {
    size_t off = 0;
    char chunk[4096];
    while (rfd >= 0) {
        double left = deadline - dt_clock_s();
        if (left <= 0) return 1;
        struct pollfd p[2] = {{rfd, POLLIN, 0}, {wfd, POLLOUT, 0}};
        int np = wfd >= 0 ? 2 : 1;
        int ms = left * 1000 < REWARD_POLL_MS ? (int)(left * 1000) + 1 : REWARD_POLL_MS;
        if (poll(p, (nfds_t)np, ms) < 0 && errno != EINTR) return -1;
        if (np == 2 && p[1].revents) {
            ssize_t w = write(wfd, in->p + off, in->n - off);
            if (w > 0) off += (size_t)w;
            if ((w < 0 && errno != EAGAIN && errno != EINTR) || off == in->n) close(wfd), wfd = -1;
        }
        if (p[0].revents) {
            ssize_t r = read(rfd, chunk, sizeof chunk);
            if (r > 0 && buf_add(out, chunk, (size_t)r)) return -1;
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) rfd = -1;
        }
    }
    if (wfd >= 0) close(wfd);
    return 0;
}

/* waits for pid until the deadline; 1 on timeout */
static int wait_until(pid_t pid, double deadline, int *status) {
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid) return 0;
        if (w < 0 && errno != EINTR) return *status = -1, 0;
        if (dt_clock_s() >= deadline) return 1;
        struct timespec ts = {0, REWARD_WAIT_NS};
        nanosleep(&ts, NULL);
    }
}

/* one line per item, each a finite number */
static int parse_scores(const char *cmd, char *text, int64_t n, double *rewards, dt_error *err) {
    int64_t k = 0;
    char *line = text;
    while (*line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (k == n) return dt_errorf(err, DT_EINVAL, "reward command '%.*s' printed more lines than the %lld completions it was given",
                                     REWARD_QUOTE, cmd, (long long)n);
        char *end;
        errno = 0;
        double v = strtod(line, &end);
        while (isspace((unsigned char)*end)) end++;
        if (end == line || *end || errno == ERANGE || !isfinite(v))
            return dt_errorf(err, DT_EINVAL, "reward command '%.*s': line %lld '%.*s' (record %lld) is not a finite number; "
                             "print one score per line",
                             REWARD_QUOTE, cmd, (long long)(k + 1), REWARD_QUOTE, line, (long long)k);
        rewards[k++] = v;
        if (!nl) break;
        line = nl + 1;
    }
    if (k != n)
        return dt_errorf(err, DT_EINVAL, "reward command '%.*s' printed %lld scores for %lld completions (record %lld has none)",
                         REWARD_QUOTE, cmd, (long long)k, (long long)n, (long long)k);
    return 0;
}

static int judge_exit(const char *cmd, int status, dt_error *err) {
    if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (status != -1 && WIFSIGNALED(status))
        return dt_errorf(err, DT_EINVAL, "reward command '%.*s' was killed by signal %d", REWARD_QUOTE, cmd,
                         WTERMSIG(status));
    return dt_errorf(err, DT_EINVAL, "reward command '%.*s' exited with status %d; its scores are not used",
                     REWARD_QUOTE, cmd, status == -1 ? -1 : WEXITSTATUS(status));
}

/* runs the command with SIGPIPE blocked in this thread (a command that stops reading must not
 * kill the trainer), and drops a SIGPIPE it raised */
static int run_blocked(const char *cmd, const buf *in, buf *out, double timeout_s, int *status, dt_error *err) {
    int inp[2], outp[2];
    if (pipe2(inp, O_CLOEXEC)) return dt_errorf(err, DT_EIO, "reward command: pipe: %s", strerror(errno));
    if (pipe2(outp, O_CLOEXEC)) {
        close(inp[0]), close(inp[1]);
        return dt_errorf(err, DT_EIO, "reward command: pipe: %s", strerror(errno));
    }
    pid_t pid;
    int rc = spawn(cmd, inp[0], outp[1], &pid, err);
    close(inp[0]), close(outp[1]);
    if (rc) return close(inp[1]), close(outp[0]), rc;
    fcntl(inp[1], F_SETFL, O_NONBLOCK);
    fcntl(outp[0], F_SETFL, O_NONBLOCK);
    double deadline = dt_clock_s() + timeout_s;
    int p = pump(inp[1], outp[0], in, out, deadline);
    close(outp[0]);
    if (p == 0) p = wait_until(pid, deadline, status);
    if (p) {
        kill_group(pid);
        if (p < 0) return dt_errorf(err, DT_EIO, "reward command '%.*s': reading its output: %s", REWARD_QUOTE, cmd,
                                    strerror(errno));
        return dt_errorf(err, DT_EINVAL, "reward command '%.*s' did not finish within %g s and was killed; "
                         "raise the timeout or make it faster", REWARD_QUOTE, cmd, timeout_s);
    }
    kill(-pid, SIGKILL); /* anything the shell left in its group */
    return 0;
}

int dt_reward_command(const char *cmd, const dt_reward_item *items, int64_t n, double timeout_s, double *rewards,
                      dt_error *err) {
    if (!cmd || !*cmd) return dt_errorf(err, DT_EINVAL, "reward command: empty; give a shell command line");
    if (n <= 0) return dt_errorf(err, DT_EINVAL, "reward command '%.*s': no completions to score", REWARD_QUOTE, cmd);
    if (!(timeout_s > 0)) return dt_errorf(err, DT_EINVAL, "reward command timeout %g s: must be > 0", timeout_s);
    buf in = {0}, out = {0};
    int rc = build_input(items, n, &in, cmd, err);
    if (rc) return free(in.p), rc;
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    int status = -1;
    rc = run_blocked(cmd, &in, &out, timeout_s, &status, err);
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, NULL, &zero) == SIGPIPE) {}
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!rc) rc = judge_exit(cmd, status, err);
    if (!rc) rc = parse_scores(cmd, out.p ? out.p : (char[]){0}, n, rewards, err);
    free(in.p), free(out.p);
    return rc;
}

/* ---- exact answer ---- */

/* s without leading / trailing white space: [*b, *e) */
static void trim(const char *s, const char **b, const char **e) {
    *b = s;
    while (isspace((unsigned char)**b)) (*b)++;
    *e = *b + strlen(*b);
    while (*e > *b && isspace((unsigned char)(*e)[-1])) (*e)--;
}

/* the completion's last number, commas between digits dropped, into out (size cap); 0 if none */
static int last_number(const char *s, char *out, size_t cap) {
    const char *end = NULL;
    for (const char *p = s + strlen(s); p > s; p--)
        if (isdigit((unsigned char)p[-1])) { end = p; break; }
    if (!end) return 0;
    const char *b = end;
    int dot = 0;
    while (b > s && (isdigit((unsigned char)b[-1]) || (b[-1] == '.' && !dot && b - 1 > s && isdigit((unsigned char)b[-2])) ||
                     (b[-1] == ',' && b - 1 > s && isdigit((unsigned char)b[-2])))) {
        if (b[-1] == '.') dot = 1;
        b--;
    }
    if (b > s && b[-1] == '-') b--;
    size_t k = 0;
    for (const char *p = b; p < end && k + 1 < cap; p++)
        if (*p != ',') out[k++] = *p;
    out[k] = 0;
    return 1;
}

int dt_reward_exact(const dt_reward_item *items, int64_t n, double *rewards, dt_error *err) {
    for (int64_t i = 0; i < n; i++) {
        if (!items[i].answer)
            return dt_errorf(err, DT_EINVAL, "exact-answer reward: record %lld has no answer field; "
                             "give the prompt file an \"answer\" or use a reward command", (long long)i);
        const char *c = items[i].completion ? items[i].completion : "", *cb, *ce, *ab, *ae;
        trim(c, &cb, &ce);
        trim(items[i].answer, &ab, &ae);
        int same = ce - cb == ae - ab && !memcmp(cb, ab, (size_t)(ae - ab));
        char num[128];
        if (!same && last_number(c, num, sizeof num))
            same = strlen(num) == (size_t)(ae - ab) && !memcmp(num, ab, (size_t)(ae - ab));
        rewards[i] = same ? 1.0 : 0.0;
    }
    return 0;
}
