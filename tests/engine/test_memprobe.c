/* test_memprobe.c — the memory probe (engine/device/dt_memprobe.h) reads what
 * the kernel measures: 64 MiB allocated and touched inside a phase raise that
 * phase's real peak by >= 60 MiB; the next phase, after the free and the
 * reset, peaks lower; a nested phase's peak counts for its parent; what the
 * engine tracked inside a phase is reported next to it and the real peak is
 * at least that; the CPU device has no driver view (meminfo not applicable).
 * Run again with DT_MEMPROBE=sample (engine_memprobe_sample): the same on the
 * sampling fallback. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dt_device.h"
#include "dt_memprobe.h"
#include "dt_memtrack.h"
#include "dt_test.h"

#define MIB (1024 * 1024)

/* malloc + touch every page; volatile so the compiler keeps the pages */
/* Pages straight from the kernel (mmap / munmap), not malloc: a sanitizer's
 * allocator keeps freed blocks in quarantine, so RSS would not fall on free. */
static char *touch(size_t bytes) {
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    volatile char *p = m;
    for (size_t i = 0; i < bytes; i += 4096) p[i] = (char)(i >> 12 | 1);
    return (char *)p;
}

static void release(char *p, size_t bytes) {
    if (p) munmap(p, bytes);
}

int main(void) {
    const dt_device_ops *cpu = dt_device_cpu();
    dt_device_meminfo mi;
    mi.applicable = 7;
    CHECK(cpu->meminfo && cpu->meminfo(&mi, 0) == DT_OK && mi.applicable == 0);

    dt_memprobe_init(cpu);
    dt_memprobe_begin(DT_PHASE_STARTUP);   /* from exec: not reset */
    dt_memprobe_end(DT_PHASE_STARTUP);
    dt_memprobe_report r;
    dt_memprobe_get(&r);
    printf("probe mode %s%s%s\n", dt_probe_mode_name(r.mode), r.note[0] ? ": " : "", r.note);
    if (r.mode == DT_PROBE_NONE) {
        printf("no /proc/self/status here: skipped\n");
        return 77;
    }
    const char *env = getenv("DT_MEMPROBE");
    if (env && !strcmp(env, "sample")) CHECK(r.mode == DT_PROBE_SAMPLE && r.note[0]);
    CHECK(r.ph[DT_PHASE_STARTUP].runs == 1);
    CHECK(r.ph[DT_PHASE_STARTUP].rss_peak > 0);
    CHECK(!r.device);

    int64_t base = dt_memprobe_rss_now();
    CHECK(base > 0);

    /* 64 MiB inside "forward", freed before "backward" */
    dt_memprobe_begin(DT_PHASE_FORWARD);
    char *big = touch((size_t)64 * MIB);
    CHECK(big != NULL);
    dt_memprobe_end(DT_PHASE_FORWARD);
    release(big, (size_t)64 * MIB);
    dt_memprobe_begin(DT_PHASE_BACKWARD);
    char *small = touch((size_t)1 * MIB);
    dt_memprobe_end(DT_PHASE_BACKWARD);
    release(small, (size_t)1 * MIB);
    dt_memprobe_get(&r);
    const dt_phase_stat *f = &r.ph[DT_PHASE_FORWARD], *b = &r.ph[DT_PHASE_BACKWARD];
    printf("base %.1f MiB, forward peak %.1f MiB, backward peak %.1f MiB\n", (double)base / MIB,
           (double)f->rss_peak / MIB, (double)b->rss_peak / MIB);
    CHECK(f->runs == 1 && b->runs == 1);
    CHECK(f->rss_peak - base >= 60 * MIB);
    if (r.mode == DT_PROBE_RESET) {
        /* exact peaks: backward holds 1 MiB, far below forward's 64 */
        CHECK(b->rss_peak < f->rss_peak - 32 * MIB);
    } else {
        CHECK(b->rss_peak < f->rss_peak);
    }

    /* the max over runs: a second, smaller forward does not lower the peak */
    dt_memprobe_begin(DT_PHASE_FORWARD);
    dt_memprobe_end(DT_PHASE_FORWARD);
    dt_memprobe_get(&r);
    CHECK(r.ph[DT_PHASE_FORWARD].runs == 2);
    CHECK(r.ph[DT_PHASE_FORWARD].rss_peak == f->rss_peak);

    /* nesting: export inside a save; the save's peak includes the export's,
     * and closing the save closes a phase left open inside it */
    dt_memprobe_begin(DT_PHASE_CKPT_SAVE);
    dt_memprobe_begin(DT_PHASE_EXPORT);
    big = touch((size_t)64 * MIB);
    dt_memprobe_end(DT_PHASE_EXPORT);
    release(big, (size_t)64 * MIB);
    dt_memprobe_begin(DT_PHASE_EVAL);   /* left open: closed with the save */
    dt_memprobe_end(DT_PHASE_CKPT_SAVE);
    dt_memprobe_end(DT_PHASE_EVAL);     /* not open any more: ignored */
    dt_memprobe_get(&r);
    CHECK(r.ph[DT_PHASE_EXPORT].rss_peak - base >= 60 * MIB);
    CHECK(r.ph[DT_PHASE_CKPT_SAVE].rss_peak >= r.ph[DT_PHASE_EXPORT].rss_peak);
    CHECK(r.ph[DT_PHASE_EVAL].runs == 1);
    CHECK(r.ph[DT_PHASE_CKPT_SAVE].runs == 1);

    /* tracked next to real: 32 MiB through dt_memtrack (zero-filled, so
     * resident) inside "optimizer", freed after it */
    dt_memprobe_begin(DT_PHASE_OPTIMIZER);
    void *t = dt_mem_alloc(DT_POOL_DEVICE, DT_MEM_OPTIMIZER, (size_t)32 * MIB);
    void *h = dt_mem_alloc(DT_POOL_HOST, DT_MEM_BUFFERS, (size_t)8 * MIB);
    CHECK(t && h);
    dt_memprobe_end(DT_PHASE_OPTIMIZER);
    dt_mem_free(t);
    dt_mem_free(h);
    dt_memprobe_begin(DT_PHASE_CKPT_LOAD);
    dt_memprobe_end(DT_PHASE_CKPT_LOAD);
    dt_memprobe_get(&r);
    const dt_phase_stat *o = &r.ph[DT_PHASE_OPTIMIZER], *l = &r.ph[DT_PHASE_CKPT_LOAD];
    printf("optimizer: real %.1f MiB, tracked %.1f MiB (optimizer %.1f, buffers %.1f)\n",
           (double)o->rss_peak / MIB, (double)o->tracked_total / MIB,
           (double)o->tracked[DT_MEM_OPTIMIZER] / MIB, (double)o->tracked[DT_MEM_BUFFERS] / MIB);
    CHECK(o->tracked[DT_MEM_OPTIMIZER] >= 32 * MIB);
    CHECK(o->tracked[DT_MEM_BUFFERS] >= 8 * MIB);
    CHECK(o->tracked_total >= 40 * MIB);
    CHECK(o->rss_peak >= o->tracked_total);
    CHECK(l->tracked_total <= o->tracked_total - 40 * MIB);
    CHECK(o->dev_used_peak == -1);   /* the CPU device: no driver figures */

    /* names */
    CHECK_STR(dt_phase_name(DT_PHASE_STARTUP), "startup");
    CHECK_STR(dt_phase_name(DT_PHASE_CKPT_SAVE), "ckpt_save");
    CHECK_STR(dt_phase_label(DT_PHASE_CKPT_LOAD), "ckpt load");

    dt_memprobe_clear();
    dt_memprobe_get(&r);
    CHECK(r.ph[DT_PHASE_FORWARD].runs == 0);
    TEST_MAIN_END();
}
