/* dt_report_charts.h — the charts dtplan and dtrun draw, on top of dt_chart.h.
 * They take plain arrays and the shared dt_plan.h structs, so any command can
 * call them. Output format from the file extension (.png / .svg); every
 * function returns DT_OK or a DT_E* code with one line in err, never prints,
 * and never leaves a partial file. Pictures and meanings: docs/reports.md. */
#ifndef DT_REPORT_CHARTS_H
#define DT_REPORT_CHARTS_H

#include <stdint.h>

#include "dt_chart.h"
#include "dt_plan.h"
#include "dt_units.h"

/* The word the axis labels use for one rank: "GPU" (default) or, after
 * dt_chart_set_device(DT_DEVICE_CPU), "rank" ("per rank", "tokens/s (all ranks)"),
 * so charts of CPU plans do not speak of GPUs. Process-wide; set it once from the
 * plan before drawing. */
void dt_chart_set_device(dt_device d);
const char *dt_chart_rank_word(void);   /* "GPU" or "rank" */

/* `dtplan estimate --plot mem.png`: one stacked bar per row (e.g. "ZeRO-2",
 * "ZeRO-3 + cpu offload"): params, grads, optimizer, activations, buffers and
 * reserve of the per-rank device pool, in `units` (GiB or GB), with the
 * total printed on each bar and the memory limit as a dashed line
 * (limit_bytes <= 0: no line). All byte counts must be >= 0. */
int dt_chart_memory_rows(const char *path, const char *title, int n_rows,
                         const char *const *row_labels, const dt_mem_breakdown *rows,
                         int64_t limit_bytes, dt_units units, dt_error *err);

/* `dtplan solve --plot`: every candidate the solver looked at. */
typedef struct dt_chart_candidate {
    double step_s;         /* predicted optimizer-step time, seconds, > 0 */
    int64_t peak_bytes;    /* predicted peak device bytes per rank, >= 0 */
    int feasible;          /* 1: meets every constraint (memory, batch, ...) */
} dt_chart_candidate;

/* Scatter of peak memory (y, `units`) against step time (x, seconds; a log
 * axis when the times span more than DT_CHART_LOG_SPAN x): infeasible = grey
 * x, feasible = blue dot, chosen (index, or -1 for none) = big red star whose
 * legend text is chosen_label (e.g. "chosen: ZeRO-2, micro 4"; NULL =
 * "chosen"). limit_bytes > 0 adds the memory limit as a dashed line. */
#define DT_CHART_LOG_SPAN 30.0
int dt_chart_candidates(const char *path, const char *title, int n, const dt_chart_candidate *c,
                        int chosen, const char *chosen_label, int64_t limit_bytes, dt_units units,
                        dt_error *err);

/* A metric against optimizer step, e.g. from dtrun's metrics.jsonl. */
typedef struct dt_chart_curve {
    int n;                 /* points; 0 = absent (where allowed) */
    const double *step;    /* [n] optimizer step */
    const double *value;   /* [n] */
} dt_chart_curve;

/* `dtplan report`: training loss (line) and validation loss (line + dots,
 * may be absent: valid.n == 0), cross-entropy in nats per token. */
int dt_chart_loss(const char *path, const char *title, dt_chart_curve train, dt_chart_curve valid,
                  dt_error *err);

/* `dtplan report` of a grpo run: the mean reward per step (metrics.jsonl's "reward"). */
int dt_chart_reward(const char *path, const char *title, dt_chart_curve reward, dt_error *err);

/* `dtplan report`: measured global tokens/s per step, and the plan's
 * prediction as a dashed line (predicted <= 0: none). */
int dt_chart_throughput(const char *path, const char *title, dt_chart_curve tokens_per_s,
                        double predicted_tokens_per_s, dt_error *err);

/* `dtplan report`: measured step time (s) per step, predicted as a dashed line
 * (predicted <= 0: none). */
int dt_chart_step_time(const char *path, const char *title, dt_chart_curve step_s,
                       double predicted_step_s, dt_error *err);

/* `dtplan report`: predicted vs measured device bytes per rank, grouped bars
 * per category (params, grads, optimizer, activations, buffers) plus the
 * total without the reserve (total - reserve, the part an allocator tracks).
 * limit_bytes > 0 adds the limit line. */
int dt_chart_memory_compare(const char *path, const char *title,
                            const dt_mem_breakdown *predicted, const dt_mem_breakdown *measured,
                            int64_t limit_bytes, dt_units units, dt_error *err);

/* `dtplan report` / `dtplan compare`: predicted vs measured step time by phase
 * (compute, recompute, exposed comm, exposed offload, optimizer, step), ms. */
int dt_chart_time_compare(const char *path, const char *title,
                          const dt_time_breakdown *predicted, const dt_time_breakdown *measured,
                          dt_error *err);

/* `dtplan simulate --plot`: one step's timeline by stream, and device memory
 * over time underneath. Streams with no events are left out. */
typedef enum {
    DT_TL_COMPUTE = 0,     /* forward / backward / recompute kernels */
    DT_TL_COMM = 1,        /* collectives */
    DT_TL_H2D = 2,         /* host <-> device (and NVMe) transfers */
    DT_TL_CPU_OPT = 3,     /* optimizer step on the host (offload) */
    DT_TL_STREAM_COUNT = 4
} dt_timeline_stream;

/* Same order as the simulator's event kinds (planner/dt_simulate.h). */
typedef enum {
    DT_TL_FORWARD = 0,
    DT_TL_BACKWARD = 1,
    DT_TL_RECOMPUTE = 2,
    DT_TL_ALLREDUCE = 3,
    DT_TL_REDUCE_SCATTER = 4,
    DT_TL_ALLGATHER = 5,
    DT_TL_COPY_H2D = 6,
    DT_TL_COPY_D2H = 7,
    DT_TL_NVME = 8,        /* NVMe reads / writes (offload to nvme) */
    DT_TL_OPTIMIZER = 9,
    DT_TL_KIND_COUNT = 10
} dt_timeline_kind;

typedef struct dt_timeline_event {
    dt_timeline_stream stream;
    dt_timeline_kind kind;
    double t0_s, t1_s;     /* seconds from the step's start, t0 <= t1 */
} dt_timeline_event;

typedef struct dt_timeline_mem {
    double t_s;            /* seconds from the step's start */
    int64_t bytes;         /* device bytes allocated from t_s until the next sample */
} dt_timeline_mem;

/* n_mem == 0: no memory panel. limit_bytes > 0: limit line in the panel. */
int dt_chart_step_timeline(const char *path, const char *title, int n_events,
                           const dt_timeline_event *events, int n_mem, const dt_timeline_mem *mem,
                           int64_t limit_bytes, dt_units units, dt_error *err);

const char *dt_timeline_stream_name(dt_timeline_stream s); /* "compute", "comm", "h2d", "cpu-optimizer" */
const char *dt_timeline_kind_name(dt_timeline_kind k);     /* "forward", "reduce-scatter", ... */

#endif
