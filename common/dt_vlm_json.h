/* dt_vlm_json.h — the plan's optional "model.vision" object (docs/plan-format.md
 * "model.vision"), for common/plan.c. Absent means a text-only model; present, every
 * key is required and no other key is allowed. */
#ifndef DT_VLM_JSON_H
#define DT_VLM_JSON_H

#include "dt_json.h"
#include "dt_vlm.h"

/* Adds "vision" to the model object (nothing for a text-only model). */
void dt_vlm_write_json(cJSON *model, const dt_vlm *v);
/* Reads model's "vision" into v (zero when absent); errors set model->failed. */
void dt_vlm_read_json(dt_jobj *model, dt_vlm *v, dt_error *err);

#endif
