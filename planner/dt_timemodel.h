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
/* Fills p->prediction (memory, time, comm bytes) and sets valid = 1. */
int dt_predict(dt_plan *p, dt_error *err);

#endif
