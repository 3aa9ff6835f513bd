/* dt_vlmdir.h — Hugging Face LlavaForConditionalGeneration directories in and out for the
 * engine's vision-language model (dt_vlmrun.h; docs/vlm.md "In dtrun"). */
#ifndef DT_VLMDIR_H
#define DT_VLMDIR_H

#include <stdint.h>

#include "dt_error.h"
#include "dt_model.h"
#include "dt_vlmrun.h"

/* Loads every tensor of r (the tower, the projector, the language model's trained and base
 * sets) from dir: model.safetensors or the shards of model.safetensors.index.json, one file
 * mapped at a time; F32 / BF16 / F16, converted to fp32. Names as transformers 5 writes them
 * (vision_tower.*, multi_modal_projector.*, language_model.model.*, language_model.lm_head.*),
 * as it holds them (model.vision_tower.*, model.multi_modal_projector.*, model.language_model.*,
 * lm_head.*) and the checkpoints of transformers 4 (vision_tower.vision_model.*). dir's
 * config.json must describe m and v (one line naming the first field that differs). A missing
 * tensor or a wrong shape is DT_EINVAL naming it; tensors r lacks (rotary buffers) are ignored. */
int dt_vlmdir_load(dt_vlmrun *r, const dt_model *m, const dt_vlm *v, const char *dir, dt_error *err);

/* Writes r as transformers 5's save_pretrained does: config.json (LlavaConfig), fp32 shards of
 * at most shard_bytes each (one tensor may exceed it) and model.safetensors.index.json, or one
 * model.safetensors when everything fits; each file written atomically. dir must be absent or
 * empty (nothing a user wrote is overwritten). */
int dt_vlmdir_save(dt_vlmrun *r, const dt_model *m, const dt_vlm *v, const char *dir, uint64_t shard_bytes,
                   dt_error *err);

#endif
