/* dt_memreport.h — the run report's real memory per phase (docs/dtrun.md "Real
 * memory per phase"): what the kernel (peak RSS) and the driver (device used
 * bytes) measured per phase (engine/device/dt_memprobe.h), next to the plan's
 * steady-state prediction for the rank and explained as what the engine
 * tracked by category plus the runtime remainder (code, libraries, MPI,
 * allocator = real - tracked), which is always shown. */
#ifndef DT_MEMREPORT_H
#define DT_MEMREPORT_H

#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "dt_error.h"
#include "dt_memprobe.h"
#include "dt_plan.h"

/* The prediction a rank's real memory is held against: the plan's per-rank
 * total (reserve included) plus the rank's share of its node's host pool; on
 * a device with its own memory (cuda) the RSS prediction is the host share
 * alone and *device gets the device total. -1 when the plan has no prediction. */
void dt_memreport_predicted(const dt_plan *plan, int64_t *rss, int64_t *device);

/* The prediction per phase for rank `rank` (bytes, indexed by dt_phase): on the CPU
 * device the plan's terms plus the runtime term as it is in that phase — the measured
 * runtime footprint, + the MPI collective temporaries in backward and the optimizer
 * step, + one checkpoint I/O chunk in save (at ZeRO-0 on rank 0 only, the one writer),
 * load and (resumed_or_init: a checkpoint or weights file is read) start-up; returns 1. Elsewhere every phase gets
 * dt_memreport_predicted's rss figure and it returns 0. -1s without a prediction. */
int dt_memreport_phase_predicted(const dt_plan *plan, int rank, int resumed_or_init, int64_t out[DT_PHASE_COUNT]);

/* Adds "real_memory" to rank `rank`'s run report (format in docs/dtrun.md). */
void dt_memreport_json(cJSON *report, const dt_plan *plan, int rank, const dt_memprobe_report *pr);

/* Prints the real-memory table of each rank, read back from the rank reports in
 * out_dir (run-report.json, run-report-rank<r>.json), to log. */
int dt_memreport_print(const char *out_dir, int world, FILE *log, dt_error *err);

#endif
