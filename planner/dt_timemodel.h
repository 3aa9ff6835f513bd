/* dt_timemodel.h — predicted step time and bytes communicated for a plan, on
 * the plan's hardware numbers (alpha-beta collectives, achievable FLOP/s).
 * It describes what dtrun does: when it reduces, gathers and overlaps.
 * Formulas and sources: docs/time-model.md. */
#ifndef DT_TIMEMODEL_H
#define DT_TIMEMODEL_H

#include "dt_plan.h"

int dt_time_estimate(const dt_plan *p, dt_time_breakdown *out, dt_error *err);
/* Bytes per rank per optimizer step by collective (dt_collective convention). */
int dt_time_comm_bytes(const dt_plan *p, int64_t out[DT_COLL_COUNT], dt_error *err);
/* Compute time of one micro-step on one rank, seconds: the forward, the backward
 * and one block's forward (what recomputing a checkpointed block costs). GEMM
 * FLOPs at achievable_flops, attention FLOPs at attention_flops, a fixed
 * op_overhead_s per engine op, and on a CPU device the node's cores (FLOP/s and
 * memory bandwidth) shared by its gpus_per_node ranks (docs/time-model.md). */
typedef struct dt_time_compute {
    double fwd_s, bwd_s, block_fwd_s;
} dt_time_compute;
int dt_time_compute_micro(const dt_plan *p, dt_time_compute *out, dt_error *err);
/* Fills p->prediction (memory, time, comm bytes) and sets valid = 1. */
int dt_predict(dt_plan *p, dt_error *err);

#endif
