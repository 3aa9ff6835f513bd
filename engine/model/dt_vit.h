/* dt_vit.h — a LLaVA model's vision side on the CPU in fp32 (docs/vlm.md "In dtrun"): the
 * CLIP vision tower's forward (transformers' CLIPVisionModel) up to the feature layer, and the
 * multi-modal projector (LlavaMultiModalProjector: linear_1, GELU, linear_2, with biases),
 * forward and backward. The tower is frozen (LLaVA-1.5's stages pretrain and sft): it keeps
 * nothing for a backward and has no gradient. Sizes are ELEMENTS; pointers host memory. */
#ifndef DT_VIT_H
#define DT_VIT_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_model.h"

/* the two parts, each one flat fp32 buffer with its tensor table */
#define DT_VIT_TOWER 0
#define DT_VIT_PROJECTOR 1
#define DT_VIT_NAME_MAX 96

/* One tensor: Hugging Face's name under "model.vision_tower." (tower) or
 * "model.multi_modal_projector." (projector), e.g. "encoder.layers.0.self_attn.q_proj.weight",
 * "linear_1.weight"; its place in its part's buffer and its shape (the patch embedding
 * [D, channels, patch, patch]); decay: AdamW's weight decay applies (matrices). */
typedef struct dt_vit_tensor {
    char name[DT_VIT_NAME_MAX];
    size_t offset, numel;
    int ndim;
    int64_t shape[4];
    int decay;
} dt_vit_tensor;

typedef struct dt_vit dt_vit;

/* The vision side of v into lm's width (lm->hidden) for up to n_images images per pass.
 * DT_EINVAL with one line for what is not built: a SigLIP tower, the one-linear projector. */
int dt_vit_create(const dt_vlm *v, const dt_model *lm, int64_t n_images, dt_vit **out, dt_error *err);
void dt_vit_free(dt_vit *t);

/* The tower's tensors (its own flat fp32 buffer, dt_vit_tower_params) and the projector's
 * (linear_1.weight, linear_1.bias, linear_2.weight, linear_2.bias: their names and shapes;
 * the values live where the caller keeps them, e.g. dt_lm's group 0, dt_lm_extra). */
int dt_vit_num_tensors(const dt_vit *t, int part);
const dt_vit_tensor *dt_vit_tensor_at(const dt_vit *t, int part, int i);
size_t dt_vit_tower_numel(const dt_vit *t);
float *dt_vit_tower_params(dt_vit *t);
/* Tokens each image gives the language model (dt_vlm_image_tokens) and the width of one. */
int64_t dt_vit_tokens(const dt_vit *t);
int64_t dt_vit_width(const dt_vit *t);

/* pixels [n, channels, image_size, image_size] (CLIPImageProcessor's output), 0 <= n <=
 * n_images: the tower's selected features [n * tokens, D] (hidden_states[vision_feature_layer],
 * the class token dropped under "default"). */
int dt_vit_tower_forward(dt_vit *t, const float *pixels, int64_t n, dt_error *err);
const float *dt_vit_features(const dt_vit *t);
/* The projector on the last tower forward's features, with its four tensors w[i] (fp32, in
 * dt_vit_tensor_at(t, DT_VIT_PROJECTOR, i)'s order and shapes): embeds [n * tokens, C]. */
void dt_vit_project(dt_vit *t, const float *const w[4], float *embeds);
/* Its backward: dembeds [n * tokens, C] (the gradient of its output) into the gradients g[i]
 * (+=; the tower is frozen: no input gradient). */
void dt_vit_project_backward(dt_vit *t, const float *const w[4], float *const g[4], const float *dembeds);

#endif
