/* vlm.c — a LLaVA model in the engine (dt_vlmrun.h): the vision side (vision_cpu.c) feeding a
 * dt_lm through its input-embeddings hook (dt_lm_embeds). The hook's forward writes the
 * projector's output rows, in order, over the token embeddings at the image-token positions
 * (LlavaModel.get_placeholder_mask + masked_scatter); its backward gathers dL/d(inputs_embeds)
 * at those positions into dembeds [B * images * tokens, C] and zeroes them there, so the
 * embedding's gradient sees only the text positions, as autograd through masked_scatter does,
 * and runs the projector's backward. The projector's tensors are the language model's extra
 * tensors of group 0 (dt_lm_extra), so both hooks run where a ZeRO engine has them bound. */
#include "dt_vlmrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_finetune.h"
#include "dt_memtrack.h"

/* the projector's weights' init: transformers' LlavaPreTrainedModel._init_weights draws every
 * nn.Linear weight N(0, text_config.initializer_range^2), biases 0; LlamaConfig's default 0.02 */
#define LLAVA_INIT_STD 0.02
#define PROJ_TENSORS 4

struct dt_vlmrun {
    dt_lm *lm;
    dt_vit *vit;
    dt_lm_extra extra[PROJ_TENSORS];              /* the projector, in the language model's group 0 */
    char names[PROJ_TENSORS][DT_VIT_NAME_MAX + 32];
    float *embeds;              /* [B * per_seq, C] the projector's output */
    int64_t B, T, C, per_seq;   /* per_seq: image tokens in a sequence with its images */
    int64_t ips, npx;           /* images per sequence, pixel values per image */
    int32_t image_token;
    uint8_t *has;               /* [B] this pass's sequences with images */
    float *px;                  /* [B * ips, npx] their pixel values, compacted */
    float *dembeds;             /* [B * per_seq, C] */
};

/* the image-token positions of sequence b hold per_seq of them, else one line */
static int count_images(const dt_vlmrun *r, const int32_t *inputs, int64_t b, dt_error *err) {
    int64_t n = 0;
    for (int64_t t = 0; t < r->T; t++) n += inputs[b * r->T + t] == r->image_token;
    const int64_t want = r->has[b] ? r->per_seq : 0;
    if (n != want)
        return dt_errorf(err, DT_EINVAL, "vlm: sequence %lld holds %lld image tokens (id %d), its images give %lld "
                         "features: the data and the model's images_per_sample / image size disagree",
                         (long long)b, (long long)n, (int)r->image_token, (long long)want);
    return DT_OK;
}

/* the projector's weights and gradients where the language model's group 0 is bound now */
static void projector(dt_vlmrun *r, const float *w[PROJ_TENSORS], float *g[PROJ_TENSORS]) {
    for (int i = 0; i < PROJ_TENSORS; i++) {
        w[i] = dt_lm_extra_params(r->lm, i);
        if (g) g[i] = dt_lm_extra_grads(r->lm, i);
    }
}

static int embeds_forward(void *ctx, const int32_t *inputs, float *x0, dt_error *err) {
    dt_vlmrun *r = ctx;
    for (int64_t b = 0; b < r->B; b++) {
        int rc = count_images(r, inputs, b, err);
        if (rc) return rc;
    }
    const float *w[PROJ_TENSORS];
    projector(r, w, NULL);
    dt_vit_project(r->vit, w, r->embeds);
    const float *e = r->embeds;
    int64_t j = 0;
    for (int64_t n = 0; n < r->B * r->T; n++)
        if (inputs[n] == r->image_token)
            memcpy(x0 + n * r->C, e + (j++) * r->C, sizeof(float) * (size_t)r->C);
    return DT_OK;
}

static int embeds_backward(void *ctx, const int32_t *inputs, float *dx0, dt_error *err) {
    (void)err;
    dt_vlmrun *r = ctx;
    int64_t j = 0;
    for (int64_t n = 0; n < r->B * r->T; n++)
        if (inputs[n] == r->image_token) {
            memcpy(r->dembeds + (j++) * r->C, dx0 + n * r->C, sizeof(float) * (size_t)r->C);
            memset(dx0 + n * r->C, 0, sizeof(float) * (size_t)r->C);
        }
    const float *w[PROJ_TENSORS];
    float *g[PROJ_TENSORS];
    projector(r, w, g);
    dt_vit_project_backward(r->vit, w, g, r->dembeds);
    return DT_OK;
}

/* the projector's tensors as the language model's extra tensors, Hugging Face's names */
static void set_extra(dt_vlmrun *r) {
    for (int i = 0; i < PROJ_TENSORS; i++) {
        const dt_vit_tensor *t = dt_vit_tensor_at(r->vit, DT_VIT_PROJECTOR, i);
        snprintf(r->names[i], sizeof r->names[i], "%s%s", DT_VLM_PROJECTOR_PREFIX, t->name);
        r->extra[i] = (dt_lm_extra){r->names[i], t->shape[0], t->ndim > 1 ? t->shape[1] : 0,
                                    t->decay ? LLAVA_INIT_STD : 0.0, t->decay};
    }
}

int dt_vlmrun_check(const dt_vlm *v, const dt_precision *prec, const dt_lm_options *o, dt_error *err) {
    if (v->stage == DT_VLM_FULL)
        return dt_errorf(err, DT_EINVAL, "--vlm-stage full (the vision tower trained) is not built in dtrun's engine "
                         "yet: use --vlm-stage pretrain or sft (LLaVA-1.5's stages, the tower frozen)");
    if (o->device != DT_DEVICE_CPU)
        return dt_errorf(err, DT_EINVAL, "vlm: dtrun's vision-language engine runs on the CPU only (use --device cpu)");
    if (prec->param != DT_DTYPE_FP32 || prec->activation != DT_DTYPE_FP32)
        return dt_errorf(err, DT_EINVAL, "vlm: dtrun's vision-language engine runs fp32 only; 16-bit precisions are "
                         "not built (use --precision fp32)");
    if (o->finetune && o->finetune->method != DT_FT_FULL)
        return dt_errorf(err, DT_EINVAL, "vlm: --finetune %s with a vision-language model is not built in dtrun's "
                         "engine (the stages train the projector, or the projector and the whole language model)",
                         dt_ft_method_name(o->finetune->method));
    if (o->tp) return dt_errorf(err, DT_EINVAL, "vlm: tensor parallelism with a vision-language model is not built");
    if (v->image_token_index < 0 || v->image_token_index >= INT32_MAX)
        return dt_errorf(err, DT_EINVAL, "vlm: image_token_index %lld out of range", (long long)v->image_token_index);
    return DT_OK;
}

int dt_vlmrun_create(const dt_model *lm, const dt_vlm *v, const dt_precision *prec, const dt_lm_options *o,
                     dt_vlmrun **out, dt_error *err) {
    *out = NULL;
    int rc = dt_vlmrun_check(v, prec, o, err);
    if (rc) return rc;
    if (v->image_token_index >= lm->vocab)
        return dt_errorf(err, DT_EINVAL, "vlm: image_token_index %lld is outside the language model's vocabulary of "
                         "%lld", (long long)v->image_token_index, (long long)lm->vocab);
    dt_vlmrun *r = calloc(1, sizeof *r);
    if (!r) return dt_errorf(err, DT_ENOMEM, "vlm: out of memory");
    r->B = o->B, r->T = o->T, r->C = lm->hidden, r->image_token = (int32_t)v->image_token_index;
    r->per_seq = dt_vlm_sequence_image_tokens(v);
    r->ips = v->images_per_sample, r->npx = v->tower.channels * v->tower.image_size * v->tower.image_size;
    if ((rc = dt_vlm_check_seq(v, o->T, err)) ||
        (rc = dt_vit_create(v, lm, o->B * v->images_per_sample, &r->vit, err))) {
        dt_vlmrun_free(r);
        return rc;
    }
    const dt_lm_embeds hook = {r, embeds_forward, embeds_backward};
    set_extra(r);
    dt_lm_options lo = *o;
    lo.embeds = &hook;
    lo.extra = r->extra, lo.nextra = PROJ_TENSORS;
    if (!dt_vlm_trains_llm(v)) lo.flags |= DT_LM_FROZEN;
    r->dembeds = dt_mem_alloc(DT_POOL_HOST, DT_MEM_BUFFERS, sizeof(float) * (size_t)(r->B * r->per_seq * r->C));
    r->embeds = dt_mem_alloc(DT_POOL_HOST, DT_MEM_ACTIVATIONS, sizeof(float) * (size_t)(r->B * r->per_seq * r->C));
    r->px = dt_mem_alloc(DT_POOL_HOST, DT_MEM_BUFFERS, sizeof(float) * (size_t)(r->B * r->ips * r->npx));
    r->has = calloc((size_t)r->B, 1);
    if (!r->dembeds || !r->embeds || !r->px || !r->has) {
        dt_vlmrun_free(r);
        return dt_errorf(err, DT_ENOMEM, "vlm: out of memory");
    }
    if ((rc = dt_lm_create_opts(lm, prec, &lo, &r->lm, err))) {
        dt_vlmrun_free(r);
        return rc;
    }
    *out = r;
    return DT_OK;
}

void dt_vlmrun_free(dt_vlmrun *r) {
    if (!r) return;
    dt_lm_free(r->lm);
    dt_vit_free(r->vit);
    dt_mem_free(r->dembeds);
    dt_mem_free(r->embeds);
    dt_mem_free(r->px);
    free(r->has);
    free(r);
}

dt_lm *dt_vlmrun_lm(dt_vlmrun *r) { return r->lm; }
dt_vit *dt_vlmrun_vit(dt_vlmrun *r) { return r->vit; }

int dt_vlmrun_forward(dt_vlmrun *r, const float *pixels, const uint8_t *has_image, const int32_t *inputs,
                      const int32_t *targets, float *loss, dt_error *err) {
    int64_t n = 0;   /* sequences with images: their pixel rows, in order */
    const size_t row = sizeof(float) * (size_t)(r->ips * r->npx);
    for (int64_t b = 0; b < r->B; b++) {
        r->has[b] = !has_image || has_image[b];
        if (r->has[b]) memcpy((char *)r->px + (size_t)(n++) * row, (const char *)pixels + (size_t)b * row, row);
    }
    int rc = dt_vit_tower_forward(r->vit, r->px, n * r->ips, err);
    return rc ? rc : dt_lm_forward(r->lm, inputs, targets, loss, err);
}

int dt_vlmrun_backward(dt_vlmrun *r, float grad_scale, dt_error *err) {
    return dt_lm_backward(r->lm, grad_scale, err);
}
