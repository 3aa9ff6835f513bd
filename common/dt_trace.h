/* dt_trace.h — Chrome trace-event JSON (Perfetto / chrome://tracing), written by
 * `dtplan simulate --trace` and (later) `dtrun --trace`, read by `dtplan compare`.
 * Engine-agnostic: spans and counters in microseconds, no planner types.
 *
 * File: {"traceEvents":[...], "displayTimeUnit":"ms"}; a span is
 * {"name","cat","ph":"X","ts","dur","pid","tid","args"}, ts/dur in µs; a counter is
 * {"name","ph":"C","ts","pid","args":{series: value}}; thread names are "M" events.
 * Event names and categories: docs/simulate.md ("Event names"). */
#ifndef DT_TRACE_H
#define DT_TRACE_H

#include <stdint.h>

#include "dt_error.h"

/* The event vocabulary both the simulator (planner/simulate.c) and the engine's
 * tracer (engine/dist/tracer.c) write: streams are trace threads, kinds are span names. */
typedef enum {
    DT_SIM_COMPUTE = 0,    /* kernels of the device's compute stream (incl. device AdamW) */
    DT_SIM_COMM = 1,       /* collectives */
    DT_SIM_XFER = 2,       /* host<->device copies and NVMe reads/writes */
    DT_SIM_CPU = 3,        /* the CPU optimizer (offload) */
    DT_SIM_STREAMS = 4
} dt_sim_stream;

/* The event names of docs/simulate.md (also what dtrun --trace writes). */
typedef enum {
    DT_SIM_FORWARD = 0, DT_SIM_BACKWARD, DT_SIM_RECOMPUTE,
    DT_SIM_ALLREDUCE, DT_SIM_REDUCE_SCATTER, DT_SIM_ALLGATHER,
    DT_SIM_H2D, DT_SIM_D2H, DT_SIM_NVME, DT_SIM_OPTIMIZER,
    DT_SIM_KINDS
} dt_sim_kind;
const char *dt_sim_kind_name(dt_sim_kind k);        /* "forward", "reduce_scatter", ... */
const char *dt_sim_stream_name(dt_sim_stream s);    /* "compute", "comm", "transfer", "cpu" */

#define DT_TRACE_NAME_MAX 64

typedef struct dt_trace dt_trace;    /* a trace being written */

typedef struct dt_trace_span {
    const char *name;      /* the phase: "forward", "reduce_scatter", ... */
    const char *cat;       /* the stream: "compute", "comm", "transfer", "cpu" */
    int pid, tid;          /* rank, stream */
    double ts_us, dur_us;  /* start and duration, µs, dur >= 0 */
    const char *unit;      /* args.unit, e.g. "block.3"; NULL = none */
    int micro;             /* args.micro, < 0 = none */
    int64_t bytes;         /* args.bytes, < 0 = none */
} dt_trace_span;

dt_trace *dt_trace_new(void);
void dt_trace_free(dt_trace *t);
/* Names thread tid of pid in the viewer ("M" thread_name event). */
int dt_trace_thread_name(dt_trace *t, int pid, int tid, const char *name, dt_error *err);
int dt_trace_add_span(dt_trace *t, const dt_trace_span *s, dt_error *err);
/* One "C" event: n series (keys[i] = values[i]) at ts_us. */
int dt_trace_add_counter(dt_trace *t, const char *name, int pid, double ts_us, int n, const char *const *keys,
                         const double *values, dt_error *err);
/* Writes the file atomically. */
int dt_trace_write(const dt_trace *t, const char *path, dt_error *err);

/* ---- reading ---- */
typedef struct dt_trace_rspan {
    char name[DT_TRACE_NAME_MAX];
    char cat[DT_TRACE_NAME_MAX];
    int pid, tid;
    double ts_us, dur_us;
} dt_trace_rspan;

typedef struct dt_trace_data {
    int n_spans;
    dt_trace_rspan *spans;  /* "X" events in file order */
    int n_counters;         /* "C" events seen */
} dt_trace_data;

/* Reads and checks a trace: each "X" event needs a string name, numeric ts and
 * dur >= 0, integer pid/tid (cat optional); errors name the file and event index. */
int dt_trace_read(const char *path, dt_trace_data *out, dt_error *err);
void dt_trace_data_free(dt_trace_data *d);

#endif
