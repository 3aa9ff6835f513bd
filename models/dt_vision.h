/* dt_vision.h — a vision-language model's vision side (dt_vlm.h): its parameter tensors
 * (as Hugging Face's CLIPVisionModel / SiglipVisionModel and LlavaMultiModalProjector name
 * them), counts, forward FLOPs and the activations its backward keeps. The language model
 * is the family description's (dt_model.h). Sizes are ELEMENTS; docs/vlm.md. */
#ifndef DT_VISION_H
#define DT_VISION_H

#include <stdint.h>

#include "dt_model.h"
#include "dt_pgroup.h"

/* Parameter counts: the whole tower (every block, as the checkpoint holds it, even those
 * above the feature layer), one tower block, and the projector into lm's width. */
int64_t dt_vision_tower_params(const dt_vlm *v);
int64_t dt_vision_block_params(const dt_vlm *v);
int64_t dt_vision_projector_params(const dt_vlm *v, const dt_model *lm);

/* Forward FLOPs of one image (docs/models.md "FLOPs convention": 2 per multiply-add; the
 * attention's QK^T and PV over the full, bidirectional tokens x tokens square): the tower
 * (patch embedding and every block: Hugging Face runs them all to return hidden_states)
 * and the projector on the image tokens. */
double dt_vision_tower_fwd_flops(const dt_vlm *v);
double dt_vision_projector_fwd_flops(const dt_vlm *v, const dt_model *lm);

/* What a trained tower keeps for backward per image (Korthikanti et al. 2022 §4.1, every op
 * keeps its inputs; non-causal: the same terms over all tokens): act values in the
 * activation dtype, stats fp32 values (LayerNorm mean + rstd; flash / sdpa log-sum-exp),
 * probs the attention probabilities of eager attention (heads x tokens^2), pixels the patch
 * convolution's input (kept for its weight gradient). Only the blocks up to the feature layer
 * count: the graph above it is unreachable from the loss and freed with the tower's output. */
typedef struct dt_vision_saved { int64_t act, stats, probs, pixels; } dt_vision_saved;
void dt_vision_tower_saved(const dt_vlm *v, int materialized, dt_vision_saved *out);
/* The projector's kept inputs per image (linear_1's input, the activation's, linear_2's). */
int64_t dt_vision_projector_saved(const dt_vlm *v, const dt_model *lm);

/* The tower's and the projector's parameter groups (role DT_ROLE_VISION), trained or frozen
 * as the stage says (pretrain / sft: tower frozen; the projector always trained), stored in
 * load_dtype. */
int dt_vision_pgroups(const dt_vlm *v, const dt_model *lm, dt_dtype load_dtype, dt_pgroups *tower,
                      dt_pgroups *projector, dt_error *err);

#endif
