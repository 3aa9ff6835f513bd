/* dt_simulate.h — discrete-event simulation of ONE optimizer step on one rank:
 * the compute stream (forward / recompute / backward per unit per micro-step),
 * the communication stream (bucketed all-reduce, per-unit reduce-scatter and
 * all-gather with one-unit prefetch), host<->device / NVMe transfers and the CPU
 * optimizer, with the dependencies docs/time-model.md says the engine has, and the
 * device memory allocated per category over time. Durations come from the time
 * model's own numbers (dt_time_terms_build) — see docs/simulate.md.
 *
 * Units: seconds for times, bytes for memory and transfer sizes. */
#ifndef DT_SIMULATE_H
#define DT_SIMULATE_H

#include <stdint.h>

#include "dt_plan.h"
#include "dt_trace.h"   /* dt_sim_stream, dt_sim_kind: the event vocabulary */

/* Device-memory categories tracked over time. */
typedef enum {
    DT_SIMMEM_PARAMS = 0,      /* resident params (sharded for stage 3) */
    DT_SIMMEM_GRADS,           /* resident gradient buffer / shard */
    DT_SIMMEM_OPTIMIZER,       /* resident optimizer state (+ master) */
    DT_SIMMEM_ACTIVATIONS,     /* saved activations: grow in forward, freed in backward */
    DT_SIMMEM_GATHERED,        /* stage 3: gathered full units (current + prefetched) */
    DT_SIMMEM_UNIT_GRADS,      /* stage 3: one unit's full gradients until reduce-scattered */
    DT_SIMMEM_BUCKETS,         /* communication buckets (reduce / step all-gather) */
    DT_SIMMEM_WORKSPACE,       /* logits, losses, token ids, backward scratch, recompute area */
    DT_SIMMEM_RESERVE,         /* the profile's runtime reserve (constant) */
    DT_SIMMEM_COUNT
} dt_sim_mem_cat;

typedef struct dt_sim_event {
    dt_sim_stream stream;
    dt_sim_kind kind;
    int micro;                 /* micro-step 0..A-1, -1 for once-per-step events */
    int unit;                  /* parameter unit (0 embeddings .. L+1 head), -1 none */
    const char *phase;         /* "forward" | "backward" | "step" */
    double t0_s, t1_s;
    int64_t bytes;             /* collective / transfer size (dt_collective convention), else 0 */
} dt_sim_event;

typedef struct dt_sim_mem_sample {
    double t_s;                /* from this time until the next sample */
    int64_t bytes[DT_SIMMEM_COUNT];
    int64_t total;
} dt_sim_mem_sample;

typedef struct dt_sim_result {
    int n_events;
    dt_sim_event *events;      /* ordered by (stream, t0) within each stream */
    int n_mem;
    dt_sim_mem_sample *mem;    /* by time */
    double step_s;             /* the end of the last event */
    double compute_busy_s;     /* compute stream busy time (incl. recompute, device optimizer) */
    double comm_s;             /* communication stream busy time */
    double comm_exposed_s;     /* time the comm stream is busy while compute is idle */
    int peak_index;            /* index into mem of the peak */
    /* The critical path, from the step's end backwards, as events (indices),
     * listed start to end. */
    int n_critical;
    int *critical;
} dt_sim_result;

/* Simulates one step of p. Fills r (free with dt_sim_free). */
int dt_simulate(const dt_plan *p, dt_sim_result *r, dt_error *err);
void dt_sim_free(dt_sim_result *r);

const char *dt_sim_mem_name(dt_sim_mem_cat c);      /* "params", ... */

/* Helpers that read the time and memory models' own numbers (no formula of
 * theirs is repeated here; docs/simulate.md explains the probes):
 * the cost of one collective of `bytes` (dt_collective convention) on p's
 * network, and the workspace bytes (logits, losses, ids, backward scratch)
 * the closed form counts in `buffers`. */
double dt_sim_collective_s(const dt_plan *p, dt_collective c, double bytes);
int64_t dt_sim_workspace_bytes(const dt_plan *p);

#endif
