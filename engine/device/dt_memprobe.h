/* dt_memprobe.h — what the kernel and the driver measure of this process's
 * memory, per phase of a run (docs/dtrun.md "Real memory per phase").
 *
 * Unlike dt_memtrack.h, which counts the engine's own allocations ("tracked"),
 * every figure here comes from outside our code:
 *   RSS    : the kernel's resident set of the process, VmRSS / VmHWM of
 *            /proc/self/status. The peak of one phase is VmHWM after the peak
 *            was reset to the current RSS at the phase's start by writing "5"
 *            to /proc/self/clear_refs (Linux >= 4.0, proc(5)). Where that write
 *            fails the probe falls back to sampling VmRSS at each phase's begin
 *            and end (a lower bound; mode DT_PROBE_SAMPLE, the reason in note).
 *            The kernel updates the high-water mark before it unmaps or
 *            reclaims pages, so a peak between two readings is never missed.
 *   device : the driver's used bytes of the device (CUDA: cudaMemGetInfo,
 *            total - free), read through the device's meminfo op: the highest
 *            value sampled after each of the device's allocations and at each
 *            phase boundary. Not applicable on the CPU device (its memory is
 *            the RSS).
 * Next to each phase's real peak the probe keeps what our code tracked at that
 * time (dt_memtrack's peak of both pools within the phase, by category; on a
 * device with its own host pool, e.g. CUDA pinned memory, that pool's bytes at
 * the phase's end are added), so the report can show real = tracked + runtime.
 *
 * Phases nest (a checkpoint save contains the export): a reading credits every
 * open phase, then only the phase being opened resets the peak. The start-up
 * phase, when it is the first phase of the process, does not reset: it runs
 * from process start (exec) to its end.
 * Cost per begin/end: one pread of /proc/self/status (about 15 us) and, at
 * begin, one 1-byte write to clear_refs (about 1 us).
 * Not thread-safe: one thread (the trainer's) opens and closes phases.
 * DT_MEMPROBE=0 in the environment turns the probe off (begin / end return at
 * once; the report then has no phase figures); DT_MEMPROBE=sample uses the
 * sampling fallback even where the reset works (its test). */
#ifndef DT_MEMPROBE_H
#define DT_MEMPROBE_H

#include <stdint.h>

#include "dt_device.h"
#include "dt_memtrack.h"

typedef enum {
    DT_PHASE_STARTUP = 0,    /* process start to the first step: model, init / load, ZeRO partitioning */
    DT_PHASE_FORWARD = 1,    /* a micro-step's forward */
    DT_PHASE_BACKWARD = 2,   /* a micro-step's backward */
    DT_PHASE_OPTIMIZER = 3,  /* the step's tail: waiting gradient collectives, norm, AdamW, all-gather */
    DT_PHASE_EVAL = 4,       /* a validation pass */
    DT_PHASE_CKPT_SAVE = 5,  /* a checkpoint save (contains the export) */
    DT_PHASE_CKPT_LOAD = 6,  /* loading a checkpoint to resume (inside start-up) */
    DT_PHASE_EXPORT = 7,     /* writing the consolidated weights (model.safetensors, config.json) */
    DT_PHASE_OBJECTIVE = 8,  /* an objective's micro-step (rm / dpo / grpo: the reference's forward,
                              * the policy's forward and backward; grpo's rollout at a step's first) */
    DT_PHASE_GENERATE = 9,   /* grpo's rollout: generation, rewards, advantages (inside objective) */
    DT_PHASE_COUNT = 10
} dt_phase;

typedef enum {
    DT_PROBE_RESET = 0,   /* VmHWM reset per phase through /proc/self/clear_refs: exact peaks */
    DT_PROBE_SAMPLE = 1,  /* clear_refs refused: VmRSS at phase begin / end (start-up: VmHWM) */
    DT_PROBE_NONE = 2     /* no /proc/self/status: no RSS figures */
} dt_probe_mode;

typedef struct {
    int64_t runs;                        /* times the phase ran */
    double seconds;                      /* wall time in the phase, all runs */
    int64_t rss_peak;                    /* bytes: the highest peak RSS of one run */
    /* what dt_memtrack counted (both pools) at its peak within the run that
     * set rss_peak; total is their sum */
    int64_t tracked[DT_MEM_CAT_COUNT];
    int64_t tracked_total;
    int64_t dev_used_peak;               /* driver: highest device used bytes over runs; -1: n/a */
    int64_t dev_tracked;                 /* the device pool's tracked bytes at that sample */
} dt_phase_stat;

typedef struct {
    dt_probe_mode mode;
    char note[200];                      /* why the probe fell back ("" when mode is RESET) */
    int device;                          /* 1: the dev_* fields hold the driver's figures */
    dt_phase_stat ph[DT_PHASE_COUNT];
} dt_memprobe_report;

/* Opens /proc/self/status and /proc/self/clear_refs and checks the reset
 * works (once; later calls only change the device). dev: the run's device,
 * asked for the driver's figures (NULL: none). */
void dt_memprobe_init(const dt_device_ops *dev);
/* Opens phase p (ignored when it is open already): credits the open phases
 * with a reading, then (except start-up) resets the peaks. */
void dt_memprobe_begin(dt_phase p);
/* Closes phase p and any phase opened inside it; folds the run into the
 * phase's figures (max over runs). Ignored when p is not open. */
void dt_memprobe_end(dt_phase p);
/* The figures so far (closed runs only). */
void dt_memprobe_get(dt_memprobe_report *out);
/* Forgets every figure and closes every phase (tests). */
void dt_memprobe_clear(void);
/* The process's peak RSS so far, bytes: the highest VmHWM read, across the
 * resets (which restart getrusage's ru_maxrss too); -1 before any reading. */
int64_t dt_memprobe_process_peak(void);
/* VmRSS now, bytes (-1 without /proc). */
int64_t dt_memprobe_rss_now(void);

const char *dt_phase_name(dt_phase p);         /* JSON key: "startup", "forward", ... */
const char *dt_phase_label(dt_phase p);        /* for people: "start-up", "ckpt save", ... */
const char *dt_probe_mode_name(dt_probe_mode m); /* "reset", "sample", "none" */

#endif
