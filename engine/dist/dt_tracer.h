/* dt_tracer.h — `dtrun --trace FILE`: the real run as Chrome trace-event JSON in
 * the simulator's format and event names (docs/simulate.md "Event names"), so
 * `dtplan compare sim.json run.json` can set a simulated and a measured step side
 * by side. pid = rank, tid = stream (dt_sim_stream: compute, comm, transfer, cpu).
 *
 * One tracer per process (the engine's hooks have no other place to reach it).
 * Off by default: every call below returns at once when dt_tracer_on() is 0, and
 * the engine guards its clock reads with it, so an untraced run pays one
 * predictable branch per hook. Times are CLOCK_MONOTONIC µs from an origin every
 * rank sets right after a barrier (dt_tracer_set_origin), so ranks line up.
 * docs/time-model.md "Measuring: dtrun --trace" lists what each span covers. */
#ifndef DT_TRACER_H
#define DT_TRACER_H

#include <stdint.h>

#include "dt_comm.h"
#include "dt_error.h"
#include "dt_trace.h"

/* 1 while tracing; read through dt_tracer_on(). */
extern int dt_tracer_enabled;

static inline int dt_tracer_on(void) { return dt_tracer_enabled; }

/* Starts collecting for this rank; n_layer names the units ("embeddings",
 * "block.N" 1-based, "head" = unit n_layer + 1). */
int dt_tracer_start(int rank, int64_t n_layer, dt_error *err);
/* Time zero of the trace = now (call on every rank right after a barrier). */
void dt_tracer_set_origin(void);
/* µs since the origin; 0 when off (callers need not branch). */
double dt_tracer_now_us(void);
/* The micro-step spans get as args.micro from now on. */
void dt_tracer_set_micro(int micro);

/* Records one span [t0_us, t1_us]. unit < 0: no unit; per_micro = 0: a
 * once-per-step event (no args.micro); bytes < 0: none. */
void dt_tracer_span(dt_sim_kind kind, dt_sim_stream stream, int unit, int per_micro, int64_t bytes, double t0_us,
                    double t1_us);

/* Collective over comm: every rank writes PATH.rankN.part, rank 0 merges the
 * parts into PATH (Chrome trace JSON) and removes them. Then stops tracing. */
int dt_tracer_finish(const char *path, dt_comm *comm, dt_error *err);
/* Drops what was collected and stops tracing (error paths). */
void dt_tracer_stop(void);

#endif
