/* memprobe.c — see dt_memprobe.h. */
#include "dt_memprobe.h"
#include "dt_consts.h"
#include "dt_clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DT_STATUS_MAX 8192   /* /proc/self/status is about 1.5 KiB */

/* what one open run of a phase has seen so far */
typedef struct {
    int64_t rss;
    int64_t tracked[DT_MEM_CAT_COUNT], tracked_total;
    int64_t dev_used, dev_tracked;
    double t0;
    int from_exec;    /* opened without a reset: VmHWM since exec is this run's peak */
} run_acc;

static struct {
    int inited;
    int status_fd, clear_fd;
    dt_probe_mode mode;
    char note[200];
    const dt_device_ops *dev;
    int device;                        /* the device answered with the driver's figures */
    int begun;                         /* a phase was opened before (start-up resets then) */
    int off;                           /* DT_MEMPROBE=0: begin / end do nothing */
    int64_t max_hwm;                   /* the highest VmHWM read: the process's peak across resets */
    dt_phase stack[DT_PHASE_COUNT];    /* open phases, outermost first */
    int depth;
    run_acc run[DT_PHASE_COUNT];
    dt_phase_stat st[DT_PHASE_COUNT];
} g = {.status_fd = -1, .clear_fd = -1, .mode = DT_PROBE_NONE};

/* "Key:   123 kB" of the status text, in bytes; -1 when absent */
static int64_t status_kb(const char *txt, const char *key) {
    const char *p = strstr(txt, key);
    if (!p) return -1;
    return (int64_t)strtoll(p + strlen(key), NULL, 10) * (int64_t)DT_KIB;
}

/* VmRSS and VmHWM now, bytes; 0 on success */
static int read_status(int64_t *rss, int64_t *hwm) {
    char buf[DT_STATUS_MAX];
    if (g.status_fd < 0) return -1;
    ssize_t n = pread(g.status_fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = '\0';
    *rss = status_kb(buf, "\nVmRSS:");
    *hwm = status_kb(buf, "\nVmHWM:");
    return *rss >= 0 && *hwm >= 0 ? 0 : -1;
}

static void fall_back(const char *why, int e) {
    g.mode = DT_PROBE_SAMPLE;
    snprintf(g.note, sizeof g.note,
             "/proc/self/clear_refs: %s%s%s%s: phase peaks after start-up are VmRSS sampled at each "
             "phase's begin and end, a lower bound",
             why, e ? " (" : "", e ? strerror(e) : "", e ? ")" : "");
    if (g.clear_fd >= 0) close(g.clear_fd);
    g.clear_fd = -1;
}

/* resets VmHWM to the current RSS; falls back to sampling when refused */
static void reset_hwm(void) {
    if (g.mode != DT_PROBE_RESET) return;
    if (pwrite(g.clear_fd, "5", 1, 0) != 1) fall_back("writing 5 failed", errno);
}

void dt_memprobe_init(const dt_device_ops *dev) {
    g.dev = dev;
    if (g.inited) return;
    g.inited = 1;
    const char *env = getenv("DT_MEMPROBE");
    if (env && !strcmp(env, "0")) {
        g.off = 1;
        g.mode = DT_PROBE_NONE;
        snprintf(g.note, sizeof g.note, "disabled by DT_MEMPROBE=0");
        return;
    }
    g.status_fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    int64_t rss, hwm;
    if (g.status_fd < 0 || read_status(&rss, &hwm)) {
        g.mode = DT_PROBE_NONE;
        snprintf(g.note, sizeof g.note, "/proc/self/status: no VmRSS / VmHWM (%s): no RSS figures",
                 strerror(errno ? errno : ENOENT));
        return;
    }
    g.mode = DT_PROBE_RESET;
    if (env && !strcmp(env, "sample")) {   /* the fallback on purpose (its test) */
        fall_back("not used (DT_MEMPROBE=sample)", 0);
        return;
    }
    g.clear_fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (g.clear_fd < 0) fall_back("cannot open", errno);
    /* the reset itself is checked where it first matters: begin() of a phase
     * other than start-up (resetting here would lose the start-up peak) */
}

/* One reading, credited to every open phase; returns VmRSS (-1: none).
 * reset_dev: the device's peak restarts after the reading. */
static int64_t sample(int reset_dev) {
    int64_t rss = -1, hwm = -1;
    if (g.mode != DT_PROBE_NONE && read_status(&rss, &hwm)) rss = hwm = -1;
    if (hwm > g.max_hwm) g.max_hwm = hwm;
    int64_t at[DT_MEM_CAT_COUNT];
    int64_t tracked = dt_mem_window_peak(at);
    if (g.dev && g.dev->kind != DT_DEVICE_CPU) {
        /* the device's own host pool (pinned on CUDA) is host memory too; the
         * CPU device's pools are dt_memtrack's, counted above */
        for (int c = 0; c < DT_MEM_CAT_COUNT; c++) {
            int64_t h = g.dev->mem_current(DT_POOL_HOST, (dt_mem_category)c);
            at[c] += h;
            tracked += h;
        }
    }
    dt_device_meminfo mi = {0};
    int dev_ok = g.dev && g.dev->meminfo && g.dev->meminfo(&mi, reset_dev) == DT_OK && mi.applicable;
    if (dev_ok) g.device = 1;
    for (int i = 0; i < g.depth; i++) {
        run_acc *r = &g.run[g.stack[i]];
        /* sampling mode: VmHWM is never reset, so it is exact for start-up only */
        int64_t v = g.mode == DT_PROBE_RESET || r->from_exec ? hwm : rss;
        if (v > r->rss) r->rss = v;
        if (tracked > r->tracked_total) {
            r->tracked_total = tracked;
            memcpy(r->tracked, at, sizeof at);
        }
        if (dev_ok && mi.peak_used > r->dev_used) {
            r->dev_used = mi.peak_used;
            r->dev_tracked = mi.tracked_at_peak;
        }
    }
    return rss;
}

static int is_open(dt_phase p) {
    for (int i = 0; i < g.depth; i++)
        if (g.stack[i] == p) return 1;
    return 0;
}

void dt_memprobe_begin(dt_phase p) {
    if (!g.inited) dt_memprobe_init(NULL);
    if (g.off || (int)p < 0 || p >= DT_PHASE_COUNT || is_open(p)) return;
    /* start-up runs from exec: the first phase of the process keeps VmHWM */
    const int from_start = p == DT_PHASE_STARTUP && !g.begun;
    g.begun = 1;
    /* the open phases' reading, which is also this phase's starting level:
     * after the resets VmHWM, the window and the device's peak restart from
     * the levels now, so the reading at the end covers the start; only the
     * sampling fallback needs the starting RSS kept */
    int64_t rss = sample(!from_start);
    if (!from_start) {
        reset_hwm();
        dt_mem_window_reset();
    }
    run_acc *r = &g.run[p];
    memset(r, 0, sizeof *r);
    r->rss = g.mode == DT_PROBE_SAMPLE ? rss : -1;
    r->dev_used = -1;
    r->t0 = dt_clock_s();
    r->from_exec = from_start;
    g.stack[g.depth++] = p;
}

void dt_memprobe_end(dt_phase p) {
    if (g.off || (int)p < 0 || p >= DT_PHASE_COUNT || !is_open(p)) return;
    sample(0);
    const double t = dt_clock_s();
    while (g.depth > 0) {
        dt_phase q = g.stack[--g.depth];
        run_acc *r = &g.run[q];
        dt_phase_stat *s = &g.st[q];
        if (s->runs == 0) s->dev_used_peak = -1;
        s->runs++;
        s->seconds += t - r->t0;
        if (s->runs == 1 || r->rss > s->rss_peak) {
            s->rss_peak = r->rss;
            memcpy(s->tracked, r->tracked, sizeof r->tracked);
            s->tracked_total = r->tracked_total;
        }
        if (r->dev_used > s->dev_used_peak) {
            s->dev_used_peak = r->dev_used;
            s->dev_tracked = r->dev_tracked;
        }
        if (q == p) break;
    }
}

void dt_memprobe_get(dt_memprobe_report *out) {
    memset(out, 0, sizeof *out);
    out->mode = g.mode;
    snprintf(out->note, sizeof out->note, "%s", g.note);
    out->device = g.device;
    memcpy(out->ph, g.st, sizeof g.st);
    for (int p = 0; p < DT_PHASE_COUNT; p++)
        if (out->ph[p].runs == 0) out->ph[p].dev_used_peak = -1;
}

void dt_memprobe_clear(void) {
    g.depth = 0;
    g.device = 0;
    memset(g.run, 0, sizeof g.run);
    memset(g.st, 0, sizeof g.st);
}

int64_t dt_memprobe_process_peak(void) {
    int64_t rss, hwm;
    if (g.inited && g.status_fd >= 0 && !read_status(&rss, &hwm) && hwm > g.max_hwm) g.max_hwm = hwm;
    return g.max_hwm > 0 ? g.max_hwm : -1;
}

int64_t dt_memprobe_rss_now(void) {
    if (!g.inited) dt_memprobe_init(NULL);
    int64_t rss, hwm;
    return read_status(&rss, &hwm) ? -1 : rss;
}

const char *dt_phase_name(dt_phase p) {
    static const char *n[DT_PHASE_COUNT] = {"startup",   "forward",   "backward",  "optimizer",
                                            "eval",      "ckpt_save", "ckpt_load", "export",
                                            "objective", "generate"};
    return (int)p >= 0 && p < DT_PHASE_COUNT ? n[p] : "?";
}

const char *dt_phase_label(dt_phase p) {
    static const char *n[DT_PHASE_COUNT] = {"start-up",  "forward",   "backward",  "optimizer",
                                            "eval",      "ckpt save", "ckpt load", "export",
                                            "objective", "generate"};
    return (int)p >= 0 && p < DT_PHASE_COUNT ? n[p] : "?";
}

const char *dt_probe_mode_name(dt_probe_mode m) {
    return m == DT_PROBE_RESET ? "reset" : m == DT_PROBE_SAMPLE ? "sample" : "none";
}
