/* dt_timemodel.h — predicted step time and bytes communicated for a plan, on
 * the plan's hardware numbers (alpha-beta collectives, achievable FLOP/s).
 * It describes what dtrun does: when it reduces, gathers and overlaps.
 * Formulas and sources: docs/time-model.md. The estimate (timemodel.c) dispatches a plan
 * with a layout to planner/parallel3d.c and every other plan to the terms of
 * dt_timeterms.h; fine-tuning's compute is in those terms (planner/finetune.c). */
#ifndef DT_TIMEMODEL_H
#define DT_TIMEMODEL_H

#include <stddef.h>

#include "dt_plan.h"
#include "dt_timeterms.h"

int dt_time_estimate(const dt_plan *p, dt_time_breakdown *out, dt_error *err);
/* Bytes per rank per optimizer step by collective (dt_collective convention). */
int dt_time_comm_bytes(const dt_plan *p, int64_t out[DT_COLL_COUNT], dt_error *err);
/* Fills p->prediction (memory, time, comm bytes) and sets valid = 1. */
int dt_predict(dt_plan *p, dt_error *err);
/* Recomputes plan->prediction from the plan's settings (dt_predict). *stale = 1
 * when the plan carried a valid prediction that differs (a hand-edited plan);
 * what then names the first differing part. The plan must be valid. */
int dt_plan_refresh_prediction(dt_plan *plan, int *stale, char *what, size_t what_len, dt_error *err);

#endif
