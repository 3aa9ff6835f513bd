/* dt_vlmrun.h — a LLaVA vision-language model in dtrun's engine (docs/vlm.md "In dtrun"):
 * the vision side (dt_vit.h: CLIP tower, frozen, and the projector) before a language model
 * (dt_lm.h) whose input embeddings carry the projected image features at the image-token
 * positions (transformers 5's LlavaModel: masked_scatter over input_ids == image_token_id).
 * Stages (dt_vlm.h): pretrain trains the projector (the language model frozen: dt_lm's base
 * set), sft the projector and the language model; the language model's backward returns the
 * gradient of its input embeddings at the image positions, which the projector's backward
 * takes. full (the tower trained) is not built. CPU, fp32. */
#ifndef DT_VLMRUN_H
#define DT_VLMRUN_H

#include <stdint.h>

#include "dt_error.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_vit.h"

typedef struct dt_vlmrun dt_vlmrun;

/* The model of lm (the language model) and v for micro-batches of o->B sequences of o->T
 * tokens, v->images_per_sample images each. o->finetune must be NULL or full (LoRA with a VLM
 * is not built); o->flags and o->embeds are the engine's. DT_EINVAL with one line naming
 * what is not built: stage full, a device other than the CPU, a precision other than fp32,
 * a SigLIP tower, a fine-tuning method. */
int dt_vlmrun_create(const dt_model *lm, const dt_vlm *v, const dt_precision *prec, const dt_lm_options *o,
                     dt_vlmrun **out, dt_error *err);
void dt_vlmrun_free(dt_vlmrun *r);
/* dt_vlmrun_create's refusals alone (o: its device, finetune and tp), before anything is built. */
int dt_vlmrun_check(const dt_vlm *v, const dt_precision *prec, const dt_lm_options *o, dt_error *err);
/* Its parts: the language model, whose group 0 holds the projector's tensors as extra tensors
 * (dt_lm_extra, named DT_VLM_PROJECTOR_PREFIX + "linear_1.weight", ...; always trained), every
 * tensor of its own in the base set under pretrain; and the vision side (the frozen tower's
 * weights, dt_vit_tower_params). */
#define DT_VLM_PROJECTOR_PREFIX "multi_modal_projector."
dt_lm *dt_vlmrun_lm(dt_vlmrun *r);
dt_vit *dt_vlmrun_vit(dt_vlmrun *r);

/* pixels [B, images_per_sample, channels, image_size, image_size] (dt_pixshard.h's
 * dt_vlm_batch gives them so); has_image [B]: which sequences have their images (NULL: all;
 * a text-only conversation's pixel rows are not read and it holds no image token); inputs,
 * targets [B, T] as dt_lm_forward's, a sequence with images holding exactly
 * images_per_sample x dt_vit_tokens image tokens (DT_EINVAL naming the sequence otherwise, as
 * transformers' "Image features and image tokens do not match"). *loss: the mean
 * cross-entropy over the counted targets. */
int dt_vlmrun_forward(dt_vlmrun *r, const float *pixels, const uint8_t *has_image, const int32_t *inputs,
                      const int32_t *targets, float *loss, dt_error *err);
/* The backward of the last forward, gradients accumulated times grad_scale (dt_lm_backward's):
 * the language model's trained tensors (sft) and the projector's. Zeroing, the gradient norm,
 * the optimizer and checkpoints are the language model's (dt_lm_zero_grad, ...): the
 * projector is its trained set's too. */
int dt_vlmrun_backward(dt_vlmrun *r, float grad_scale, dt_error *err);

#endif
