/* dt_vlm.h — a vision-language model as a plan carries it (plan.json "model.vision",
 * docs/plan-format.md, docs/vlm.md): a ViT vision tower (CLIP or SigLIP), a projector
 * into the language model's width, how many images a sample holds, and the LLaVA-1.5
 * training stage that says which of the three parts are trained. The language model is
 * the plan's dt_model. A zeroed struct (tower.n_layer 0) is a text-only plan.
 *
 * Names and meanings follow Hugging Face transformers' LlavaConfig / CLIPVisionConfig /
 * SiglipVisionConfig (config.json keys in the comments). Sizes are elements. */
#ifndef DT_VLM_H
#define DT_VLM_H

#include <stdint.h>

#include "dt_error.h"

/* LLaVA-1.5's stages (Liu et al. 2023, "Improved Baselines with Visual Instruction Tuning"
 * §4 / LLaVA scripts/v1_5): pretrain trains the projector only (tower and LLM frozen), sft
 * the projector + LLM (tower frozen), full everything. */
typedef enum { DT_VLM_PRETRAIN = 0, DT_VLM_SFT = 1, DT_VLM_FULL = 2 } dt_vlm_stage;
#define DT_VLM_STAGES 3
typedef enum { DT_VIT_CLIP = 0, DT_VIT_SIGLIP = 1 } dt_vit_kind;   /* clip_vision_model | siglip_vision_model */
/* multi_modal_projector: LLaVA's linear_1 -> act -> linear_2 (LlavaMultiModalProjector,
 * LLaVA mm_projector_type mlp2x_gelu), or one linear (LLaVA-1's "linear"). */
typedef enum { DT_PROJ_MLP2X = 0, DT_PROJ_LINEAR = 1 } dt_projector_kind;

typedef struct dt_vision_tower {
    dt_vit_kind kind;
    int64_t image_size;   /* image_size: pixels per side */
    int64_t patch;        /* patch_size */
    int64_t channels;     /* num_channels (3) */
    int64_t n_layer;      /* num_hidden_layers */
    int64_t hidden;       /* hidden_size */
    int64_t n_head;       /* num_attention_heads */
    int64_t ffn;          /* intermediate_size */
    int64_t select_layer; /* vision_feature_layer: index into hidden_states (L + 1 entries); < 0 from the end */
    int keep_cls;         /* vision_feature_select_strategy "full" (1) | "default" (0: drop the class token) */
    int head;             /* SigLIP vision_use_head: the attention-pooling head (unused by LLaVA's features) */
} dt_vision_tower;

typedef struct dt_vlm {
    dt_vision_tower tower;
    dt_projector_kind projector;
    int64_t image_token_index;   /* image_token_index: the <image> placeholder id */
    int64_t images_per_sample;   /* images in each sequence (>= 1) */
    dt_vlm_stage stage;
} dt_vlm;

/* 1 when v describes a vision-language model (a tower is present). */
int dt_vlm_active(const dt_vlm *v);
/* Patches per image, (image_size / patch)^2 with the division floored (CLIPVisionEmbeddings /
 * SiglipVisionEmbeddings num_patches: the strided convolution drops a remainder, so
 * SigLIP-so400m's 384 px at patch 14 gives 27 x 27); tokens the tower runs on (+ CLIP's class
 * token); image tokens each image inserts into the text sequence (patches, + 1 with
 * keep_cls and a class token); blocks the selected feature needs (select_layer >= 0:
 * that many; < 0: L + 1 + select_layer). */
int64_t dt_vlm_patches(const dt_vlm *v);
int64_t dt_vlm_tower_tokens(const dt_vlm *v);
int64_t dt_vlm_image_tokens(const dt_vlm *v);
int64_t dt_vlm_used_layers(const dt_vlm *v);
/* Image tokens of one sequence: images_per_sample x dt_vlm_image_tokens. */
int64_t dt_vlm_sequence_image_tokens(const dt_vlm *v);

/* What each stage trains. */
int dt_vlm_trains_tower(const dt_vlm *v);
int dt_vlm_trains_llm(const dt_vlm *v);

const char *dt_vlm_stage_name(dt_vlm_stage s);   /* "pretrain" | "sft" | "full" */
int dt_vlm_stage_parse(const char *s, dt_vlm_stage *out, dt_error *err);
const char *dt_vit_kind_name(dt_vit_kind k);     /* "clip" | "siglip" */
const char *dt_projector_name(dt_projector_kind k); /* "mlp2x_gelu" | "linear" */

/* Consistency: every size positive, patch_size <= image_size, heads divide hidden,
 * select_layer within -(L+1)..L, images_per_sample >= 1. where prefixes the message. */
int dt_vlm_check(const dt_vlm *v, const char *where, dt_error *err);

/* The language model's sequence (seq_len tokens, --seq) holds the image tokens and at least one
 * text token: one line otherwise. */
int dt_vlm_check_seq(const dt_vlm *v, int64_t seq_len, dt_error *err);

#endif
