/* dt_finetune_json.h — the plan's optional "finetune" section (docs/plan-format.md
 * "finetune"), for common/plan.c. Absent means full fine-tuning; present, every key of
 * its method is required and no other key is allowed. */
#ifndef DT_FINETUNE_JSON_H
#define DT_FINETUNE_JSON_H

#include "dt_finetune.h"
#include "dt_json.h"

/* Adds "finetune" to root (nothing for full fine-tuning). */
void dt_finetune_write_json(cJSON *root, const dt_finetune *ft);
/* Reads root's "finetune" into ft (zero = full when absent); errors set root->failed. */
void dt_finetune_read_json(dt_jobj *root, dt_finetune *ft, dt_error *err);

#endif
