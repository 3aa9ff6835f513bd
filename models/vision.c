/* vision.c — the vision side of a LLaVA model (dt_vision.h): the tower's and the
 * projector's tensors as one table (Hugging Face modeling_clip.py CLIPVisionTransformer /
 * modeling_siglip.py SiglipVisionTransformer, modeling_llava.py LlavaMultiModalProjector),
 * and the counts, FLOPs and saved activations derived from it. docs/vlm.md.
 *
 * Notation: S image side, p patch, c channels, P = (S/p)^2 patches, s tower tokens (P, + 1
 * class token for CLIP), n image tokens, h tower width, f tower MLP width, a heads, H the
 * language model's width. Counts are elements. */
#include "dt_vision.h"

#include <string.h>

/* 2 FLOPs per multiply-add (docs/models.md "FLOPs convention"). */
#define FLOPS_PER_MAC 2.0
/* Linears per tower block: q, k, v, out_proj (each h x h) and fc1, fc2 (h x f). */
#define VIT_ATTN_LINEARS 4
#define VIT_MLP_LINEARS 2
/* Attention core matmuls: QK^T and PV (each s x s x h multiply-adds). */
#define VIT_ATTN_MATMULS 2
/* LayerNorms per block (layer_norm1, layer_norm2) and the fp32 statistics each keeps per
 * token (mean, rstd: torch native_layer_norm). */
#define VIT_BLOCK_NORMS 2
#define LN_STATS 2
/* Values per token a block keeps, in units of h (every op keeps its inputs, Korthikanti
 * et al. 2022 §4.1): layer_norm1's input, q/k/v's input (its output), q, k, v (the attention
 * core's inputs), out_proj's input, layer_norm2's input, fc1's input. */
#define VIT_SAVED_H 8
/* ... in units of f: fc2's input, and the activation's: quick_gelu x * sigmoid(1.702 x) keeps
 * x and the sigmoid's output (2), GELU its input (1). Measured: tests/models/golden/llava_saved.txt. */
#define VIT_SAVED_F_QUICK_GELU 3
#define VIT_SAVED_F_GELU 2
/* The projector keeps linear_1's input (n x h_vision), GELU's input and linear_2's input (n x H each). */
#define PROJ_SAVED_H 2

typedef struct { const char *module, *tensor; int64_t rows, cols; int in_block, linear; } vt_tensor;
#define VT_MAX 32
typedef struct { int n; vt_tensor t[VT_MAX]; } vt_list;

static void put(vt_list *l, const char *module, const char *tensor, int64_t rows, int64_t cols, int in_block,
                int linear) {
    if (l->n < VT_MAX && rows > 0 && cols > 0) l->t[l->n++] = (vt_tensor){module, tensor, rows, cols, in_block, linear};
}

static void linear(vt_list *l, const char *module, int64_t in, int64_t out, int in_block) {
    put(l, module, "weight", out, in, in_block, 1);
    put(l, module, "bias", 1, out, in_block, 0);
}
static void layernorm(vt_list *l, const char *module, int64_t width, int in_block) {
    put(l, module, "weight", 1, width, in_block, 0);
    put(l, module, "bias", 1, width, in_block, 0);
}

static int clip(const dt_vlm *v) { return v->tower.kind == DT_VIT_CLIP; }

/* The tower's tensors: embeddings, [pre_layrnorm], the blocks, post_layernorm, [SigLIP's head]. */
static void tower_tensors(const dt_vlm *v, vt_list *l) {
    const dt_vision_tower *t = &v->tower;
    const int64_t h = t->hidden, f = t->ffn;
    memset(l, 0, sizeof *l);
    if (clip(v)) put(l, "embeddings.class_embedding", "weight", 1, h, 0, 0);
    put(l, "embeddings.patch_embedding", "weight", h, t->channels * t->patch * t->patch, 0, 1);
    if (!clip(v)) put(l, "embeddings.patch_embedding", "bias", 1, h, 0, 0);
    put(l, "embeddings.position_embedding", "weight", dt_vlm_tower_tokens(v), h, 0, 1);
    if (clip(v)) layernorm(l, "pre_layrnorm", h, 0);
    static const char *const attn[VIT_ATTN_LINEARS] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                       "self_attn.out_proj"};
    for (int i = 0; i < VIT_ATTN_LINEARS; i++) linear(l, attn[i], h, h, 1);
    layernorm(l, "layer_norm1", h, 1);
    linear(l, "mlp.fc1", h, f, 1);
    linear(l, "mlp.fc2", f, h, 1);
    layernorm(l, "layer_norm2", h, 1);
    layernorm(l, "post_layernorm", h, 0);
    if (!t->head) return;
    /* SiglipMultiheadAttentionPoolingHead: probe, nn.MultiheadAttention (packed in_proj), LayerNorm, MLP */
    put(l, "head.probe", "weight", 1, h, 0, 0);
    put(l, "head.attention", "in_proj_weight", 3 * h, h, 0, 1);
    put(l, "head.attention", "in_proj_bias", 1, 3 * h, 0, 0);
    linear(l, "head.attention.out_proj", h, h, 0);
    layernorm(l, "head.layernorm", h, 0);
    linear(l, "head.mlp.fc1", h, f, 0);
    linear(l, "head.mlp.fc2", f, h, 0);
}

static void projector_tensors(const dt_vlm *v, const dt_model *lm, vt_list *l) {
    memset(l, 0, sizeof *l);
    if (v->projector == DT_PROJ_LINEAR) {
        linear(l, "multi_modal_projector.linear", v->tower.hidden, lm->hidden, 0);
        return;
    }
    linear(l, "multi_modal_projector.linear_1", v->tower.hidden, lm->hidden, 0);
    linear(l, "multi_modal_projector.linear_2", lm->hidden, lm->hidden, 0);
}

static int64_t sum(const vt_list *l, int64_t n_layer, int blocks_only) {
    int64_t s = 0;
    for (int i = 0; i < l->n; i++)
        if (!blocks_only || l->t[i].in_block) s += (l->t[i].in_block ? n_layer : 1) * l->t[i].rows * l->t[i].cols;
    return s;
}

int64_t dt_vision_tower_params(const dt_vlm *v) {
    vt_list l;
    tower_tensors(v, &l);
    return sum(&l, v->tower.n_layer, 0);
}
int64_t dt_vision_block_params(const dt_vlm *v) {
    vt_list l;
    tower_tensors(v, &l);
    return sum(&l, 1, 1);
}
int64_t dt_vision_projector_params(const dt_vlm *v, const dt_model *lm) {
    vt_list l;
    projector_tensors(v, lm, &l);
    return sum(&l, 1, 0);
}

double dt_vision_tower_fwd_flops(const dt_vlm *v) {
    const dt_vision_tower *t = &v->tower;
    const double s = (double)dt_vlm_tower_tokens(v), h = (double)t->hidden, f = (double)t->ffn;
    const double patch = (double)dt_vlm_patches(v) * (double)(t->channels * t->patch * t->patch) * h;
    const double block = s * (VIT_ATTN_LINEARS * h * h + VIT_MLP_LINEARS * h * f) + VIT_ATTN_MATMULS * s * s * h;
    return FLOPS_PER_MAC * (patch + (double)t->n_layer * block);
}

double dt_vision_projector_fwd_flops(const dt_vlm *v, const dt_model *lm) {
    vt_list l;
    projector_tensors(v, lm, &l);
    double macs = 0;
    for (int i = 0; i < l.n; i++)
        if (l.t[i].linear) macs += (double)(l.t[i].rows * l.t[i].cols);
    return FLOPS_PER_MAC * (double)dt_vlm_image_tokens(v) * macs;
}

void dt_vision_tower_saved(const dt_vlm *v, int materialized, dt_vision_saved *out) {
    const dt_vision_tower *t = &v->tower;
    const int64_t s = dt_vlm_tower_tokens(v), L = dt_vlm_used_layers(v);
    const int64_t per_f = clip(v) ? VIT_SAVED_F_QUICK_GELU : VIT_SAVED_F_GELU;
    memset(out, 0, sizeof *out);
    out->pixels = t->channels * t->image_size * t->image_size;
    /* CLIP's pre_layrnorm keeps its input and statistics */
    out->act = clip(v) ? s * t->hidden : 0;
    out->stats = clip(v) ? LN_STATS * s : 0;
    out->act += L * s * (VIT_SAVED_H * t->hidden + per_f * t->ffn);
    out->stats += L * s * VIT_BLOCK_NORMS * LN_STATS;
    if (materialized) out->probs = L * t->n_head * s * s;
    else out->stats += L * t->n_head * s;   /* flash / sdpa: one log-sum-exp per query head and token */
}

int64_t dt_vision_projector_saved(const dt_vlm *v, const dt_model *lm) {
    const int64_t n = dt_vlm_image_tokens(v);
    return v->projector == DT_PROJ_LINEAR ? n * v->tower.hidden : n * (v->tower.hidden + PROJ_SAVED_H * lm->hidden);
}

static int groups_of(const vt_list *l, int64_t n_layer, dt_trainability train, dt_dtype load, dt_pgroups *out,
                     dt_error *err) {
    memset(out, 0, sizeof *out);
    out->role = DT_ROLE_VISION;
    out->n_layer = n_layer;
    for (int i = 0; i < l->n; i++) {
        if (out->n == DT_PGROUPS_MAX)
            return dt_errorf(err, DT_EINTERNAL, "vision description: more than %d parameter groups", DT_PGROUPS_MAX);
        const vt_tensor *t = &l->t[i];
        out->g[out->n++] = (dt_pgroup){t->module, t->tensor, t->in_block, 0, t->in_block ? n_layer : 1, t->rows,
                                       t->cols, train, dt_storage_of_dtype(load), t->linear,
                                       !strcmp(t->module, "embeddings.position_embedding")};
    }
    return DT_OK;
}

int dt_vision_pgroups(const dt_vlm *v, const dt_model *lm, dt_dtype load_dtype, dt_pgroups *tower,
                      dt_pgroups *projector, dt_error *err) {
    vt_list l;
    int rc = dt_vlm_check(v, "vision model", err);
    if (rc) return rc;
    tower_tensors(v, &l);
    if ((rc = groups_of(&l, v->tower.n_layer, dt_vlm_trains_tower(v) ? DT_TRAIN_TRAINED : DT_TRAIN_FROZEN,
                        load_dtype, tower, err)))
        return rc;
    projector_tensors(v, lm, &l);
    return groups_of(&l, 0, DT_TRAIN_TRAINED, load_dtype, projector, err);
}
