/* dt_objective_json.h — the plan's optional "objective" section (docs/plan-format.md
 * "objective"), for common/plan.c. Absent means DT_OBJ_AUTO; present, every key of its
 * kind is required and no other key is allowed. */
#ifndef DT_OBJECTIVE_JSON_H
#define DT_OBJECTIVE_JSON_H

#include "dt_json.h"
#include "dt_objective.h"

/* Adds "objective" to root (nothing for DT_OBJ_AUTO). */
void dt_objective_write_json(cJSON *root, const dt_objective *o);
/* Reads root's "objective" into o (zero = auto when absent); errors set root->failed. */
void dt_objective_read_json(dt_jobj *root, dt_objective *o, dt_error *err);

#endif
