/* dt_vlmtrain.h — the trainer's vision-language run (docs/vlm.md "In dtrun"): a plan with a
 * vlm section trains the LLaVA model of dt_vlmrun.h through the objective table of
 * dt_objrun.h (the policy is the model's language model, whose group 0 holds the projector),
 * its batches read by dt_vlm_batch from the pixel shards beside the token shards. */
#ifndef DT_VLMTRAIN_H
#define DT_VLMTRAIN_H

#include <stdint.h>

#include "dt_error.h"
#include "dt_lm.h"
#include "dt_objrun.h"
#include "dt_plan.h"
#include "dt_vlmrun.h"

/* The table of a VLM plan (check, open, micro, ...); its open takes the model from
 * dt_objrun_ctx.vlm. */
const dt_objrun_ops *dt_vlmtrain_ops(void);

/* The model of plan p with the trainer's options o (B, T, flags): *r, and *g its language model. */
int dt_vlmtrain_create(const dt_plan *p, const dt_lm_options *o, dt_vlmrun **r, dt_error *err);

/* Every tensor the ZeRO engine does not initialise — the frozen tower, and under stage
 * pretrain the language model's base set — from output.init (a LlavaForConditionalGeneration
 * directory: every tensor, the trained set too, into the model's flat buffers) or from seed
 * (the base set as dt_lm_init_base_random; the tower: matrices and embeddings N(0, 0.02^2),
 * LayerNorm weights 1, biases 0). *from_dir: the trained set was read too (the ZeRO engine
 * takes it with dt_zero_init_from_model). */
int dt_vlmtrain_init_base(dt_vlmrun *r, const dt_plan *p, int *from_dir, dt_error *err);

/* The trained model as a LlavaForConditionalGeneration directory OUT/hf-step<8 digits>
 * (dt_vlmdir_save; rank 0 calls it, the parameters whole on every rank: ZeRO 0-2). */
/* The export of a run that stops at step stop: its directory absent or empty, else DT_EINVAL
 * naming it (checked before the first step, so a run does not end refused). */
int dt_vlmtrain_check_export(const char *out_dir, int64_t stop, dt_error *err);
int dt_vlmtrain_export(dt_vlmrun *r, const dt_plan *p, const char *out_dir, int64_t step, char *path, size_t cap,
                       dt_error *err);

#endif
