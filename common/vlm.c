/* vlm.c — a vision-language model's description: token counts, stages, names, checks
 * (dt_vlm.h) and the plan's "model.vision" object (dt_vlm_json.h). docs/vlm.md. */
#include "dt_vlm.h"
#include "dt_vlm_json.h"

#include <inttypes.h>
#include <string.h>

#include "dt_arch.h"

static const char *const k_stage_names[DT_VLM_STAGES] = {"pretrain", "sft", "full"};
static const char *const k_vit_names[] = {"clip", "siglip"};
static const char *const k_proj_names[] = {"mlp2x_gelu", "linear"};
#define N_VIT ((int)(sizeof k_vit_names / sizeof k_vit_names[0]))
#define N_PROJ ((int)(sizeof k_proj_names / sizeof k_proj_names[0]))
/* Pixels per image side: far above any ViT's input (SigLIP-so400m 384, InternViT 448). */
#define DT_VLM_MAX_IMAGE (INT64_C(1) << 14)
#define DT_VLM_MAX_IMAGES (INT64_C(1) << 12)

int dt_vlm_active(const dt_vlm *v) { return v->tower.n_layer > 0; }

int64_t dt_vlm_patches(const dt_vlm *v) {
    const int64_t side = v->tower.patch > 0 ? v->tower.image_size / v->tower.patch : 0;
    return side * side;
}

/* CLIP prepends a class token (CLIPVisionEmbeddings.class_embedding); SigLIP has none. */
static int has_cls(const dt_vlm *v) { return v->tower.kind == DT_VIT_CLIP; }

int64_t dt_vlm_tower_tokens(const dt_vlm *v) { return dt_vlm_patches(v) + has_cls(v); }
int64_t dt_vlm_image_tokens(const dt_vlm *v) {
    return dt_vlm_patches(v) + (v->tower.keep_cls && has_cls(v) ? 1 : 0);
}
int64_t dt_vlm_used_layers(const dt_vlm *v) {
    const int64_t s = v->tower.select_layer;
    return s >= 0 ? s : v->tower.n_layer + 1 + s;
}
int64_t dt_vlm_sequence_image_tokens(const dt_vlm *v) {
    return dt_vlm_active(v) ? v->images_per_sample * dt_vlm_image_tokens(v) : 0;
}

int dt_vlm_trains_tower(const dt_vlm *v) { return dt_vlm_active(v) && v->stage == DT_VLM_FULL; }
int dt_vlm_trains_llm(const dt_vlm *v) { return !dt_vlm_active(v) || v->stage != DT_VLM_PRETRAIN; }

const char *dt_vlm_stage_name(dt_vlm_stage s) {
    return (unsigned)s < DT_VLM_STAGES ? k_stage_names[s] : "?";
}
const char *dt_vit_kind_name(dt_vit_kind k) { return (unsigned)k < (unsigned)N_VIT ? k_vit_names[k] : "?"; }
const char *dt_projector_name(dt_projector_kind k) { return (unsigned)k < (unsigned)N_PROJ ? k_proj_names[k] : "?"; }

int dt_vlm_stage_parse(const char *s, dt_vlm_stage *out, dt_error *err) {
    for (int i = 0; i < DT_VLM_STAGES; i++)
        if (s && !strcmp(s, k_stage_names[i])) {
            *out = (dt_vlm_stage)i;
            return DT_OK;
        }
    return dt_errorf(err, DT_EINVAL, "--vlm-stage '%s': not a stage (pretrain: the projector only, sft: projector "
                     "+ language model, full: everything)", s ? s : "");
}

static int positive(const char *where, const char *key, int64_t v, int64_t max, dt_error *err) {
    if (v >= 1 && v <= max) return DT_OK;
    return dt_errorf(err, DT_EINVAL, "%s.%s = %" PRId64 ": must be in 1..%" PRId64, where, key, v, max);
}

int dt_vlm_check(const dt_vlm *v, const char *where, dt_error *err) {
    const dt_vision_tower *t = &v->tower;
    int rc;
    if ((rc = positive(where, "image_size", t->image_size, DT_VLM_MAX_IMAGE, err)) ||
        (rc = positive(where, "patch_size", t->patch, t->image_size, err)) ||
        (rc = positive(where, "num_channels", t->channels, DT_MAX_HEADS, err)) ||
        (rc = positive(where, "num_hidden_layers", t->n_layer, DT_MAX_LAYERS, err)) ||
        (rc = positive(where, "hidden_size", t->hidden, DT_MAX_HIDDEN, err)) ||
        (rc = positive(where, "num_attention_heads", t->n_head, DT_MAX_HEADS, err)) ||
        (rc = positive(where, "intermediate_size", t->ffn, DT_MAX_FFN, err)) ||
        (rc = positive(where, "images_per_sample", v->images_per_sample, DT_VLM_MAX_IMAGES, err)))
        return rc;
    if (t->hidden % t->n_head)
        return dt_errorf(err, DT_EINVAL, "%s: num_attention_heads %" PRId64 " does not divide hidden_size %" PRId64,
                         where, t->n_head, t->hidden);
    if (t->select_layer < -(t->n_layer + 1) || t->select_layer > t->n_layer || dt_vlm_used_layers(v) < 1)
        return dt_errorf(err, DT_EINVAL, "%s.vision_feature_layer = %" PRId64 ": the tower has %" PRId64
                         " blocks (use 1..%" PRId64 ", or -1..-%" PRId64 " from the end)", where, t->select_layer,
                         t->n_layer, t->n_layer, t->n_layer);
    if ((unsigned)v->stage >= DT_VLM_STAGES || (unsigned)t->kind >= (unsigned)N_VIT ||
        (unsigned)v->projector >= (unsigned)N_PROJ)
        return dt_errorf(err, DT_EINVAL, "%s: stage, tower kind or projector out of range", where);
    return DT_OK;
}

/* ------------------------------------------------------------ plan.json */

void dt_vlm_write_json(cJSON *model, const dt_vlm *v) {
    if (!dt_vlm_active(v)) return;   /* absent: a text-only model, as every older plan */
    const dt_vision_tower *t = &v->tower;
    cJSON *o = cJSON_AddObjectToObject(model, "vision");
    if (!o) return;
    cJSON_AddStringToObject(o, "tower", k_vit_names[t->kind]);
    cJSON_AddNumberToObject(o, "image_size", (double)t->image_size);
    cJSON_AddNumberToObject(o, "patch_size", (double)t->patch);
    cJSON_AddNumberToObject(o, "num_channels", (double)t->channels);
    cJSON_AddNumberToObject(o, "n_layer", (double)t->n_layer);
    cJSON_AddNumberToObject(o, "hidden", (double)t->hidden);
    cJSON_AddNumberToObject(o, "n_head", (double)t->n_head);
    cJSON_AddNumberToObject(o, "ffn", (double)t->ffn);
    cJSON_AddNumberToObject(o, "feature_layer", (double)t->select_layer);
    cJSON_AddStringToObject(o, "select_strategy", t->keep_cls ? "full" : "default");
    cJSON_AddBoolToObject(o, "pooling_head", t->head);
    cJSON_AddStringToObject(o, "projector", k_proj_names[v->projector]);
    cJSON_AddNumberToObject(o, "image_token_index", (double)v->image_token_index);
    cJSON_AddNumberToObject(o, "images_per_sample", (double)v->images_per_sample);
    cJSON_AddStringToObject(o, "stage", k_stage_names[v->stage]);
}

void dt_vlm_read_json(dt_jobj *model, dt_vlm *v, dt_error *err) {
    static const char *const strategies[] = {"default", "full"};
    memset(v, 0, sizeof *v);
    if (model->failed || !dt_jobj_has(model, "vision")) return;   /* absent: text only */
    dt_vision_tower *t = &v->tower;
    dt_jobj o;
    int e = 0;
    if (dt_jobj_open(&o, model, "vision", err)) return;
    if (!dt_jobj_enum(&o, "tower", k_vit_names, N_VIT, &e, err)) t->kind = (dt_vit_kind)e;
    dt_jobj_int(&o, "image_size", 1, INT64_MAX, &t->image_size, err);
    dt_jobj_int(&o, "patch_size", 1, INT64_MAX, &t->patch, err);
    dt_jobj_int(&o, "num_channels", 1, INT64_MAX, &t->channels, err);
    dt_jobj_int(&o, "n_layer", 1, INT64_MAX, &t->n_layer, err);
    dt_jobj_int(&o, "hidden", 1, INT64_MAX, &t->hidden, err);
    dt_jobj_int(&o, "n_head", 1, INT64_MAX, &t->n_head, err);
    dt_jobj_int(&o, "ffn", 1, INT64_MAX, &t->ffn, err);
    dt_jobj_int(&o, "feature_layer", -DT_MAX_LAYERS - 1, DT_MAX_LAYERS, &t->select_layer, err);
    if (!dt_jobj_enum(&o, "select_strategy", strategies, 2, &e, err)) t->keep_cls = e;
    dt_jobj_bool(&o, "pooling_head", &t->head, err);
    if (!dt_jobj_enum(&o, "projector", k_proj_names, N_PROJ, &e, err)) v->projector = (dt_projector_kind)e;
    dt_jobj_int(&o, "image_token_index", INT64_MIN, INT64_MAX, &v->image_token_index, err);
    dt_jobj_int(&o, "images_per_sample", 1, INT64_MAX, &v->images_per_sample, err);
    if (!dt_jobj_enum(&o, "stage", k_stage_names, DT_VLM_STAGES, &e, err)) v->stage = (dt_vlm_stage)e;
    if (!o.failed && dt_vlm_check(v, "$.model.vision", err)) o.failed = err->code;
    if (dt_jobj_close(&o, err)) model->failed = o.failed;
}

int dt_vlm_check_seq(const dt_vlm *v, int64_t seq_len, dt_error *err) {
    const int64_t img = dt_vlm_sequence_image_tokens(v);
    if (img < seq_len) return DT_OK;
    return dt_errorf(err, DT_EINVAL, "seq_len %" PRId64 " holds no text beside %" PRId64 " image tokens (%" PRId64
                     " images x %" PRId64 "): the language model's sequence counts them; raise --seq or lower "
                     "--images-per-sample", seq_len, img, v->images_per_sample, dt_vlm_image_tokens(v));
}
