/* dt_pgroup.h — a model as parameter groups: every parameter tensor of the family
 * description (dt_model_describe, models/family.c's module table), each with a
 * trainability (frozen / trained / adapter) and a storage format (dt_quant.h), for the
 * fine-tuning method a plan carries (dt_finetune.h). Counts, memory and time all read
 * these groups (docs/architecture.md "Parameter groups", docs/finetune.md).
 *
 * A run may hold several models (a policy and its frozen reference, a reward model, a
 * vision tower): each is described by its own dt_pgroups with its role, and the memory
 * model sums them; nothing here assumes one model. Sizes are ELEMENTS unless a name
 * says bytes. */
#ifndef DT_PGROUP_H
#define DT_PGROUP_H

#include <stdint.h>

#include "dt_arch.h"
#include "dt_error.h"
#include "dt_finetune.h"

typedef enum { DT_TRAIN_FROZEN = 0, DT_TRAIN_TRAINED = 1, DT_TRAIN_ADAPTER = 2 } dt_trainability;
/* Which model of a run the groups describe (only the policy is planned today). */
typedef enum { DT_ROLE_POLICY = 0, DT_ROLE_REFERENCE = 1, DT_ROLE_REWARD = 2, DT_ROLE_VISION = 3 } dt_model_role;

/* One kind of tensor, repeated over a range of blocks (or once, outside the blocks). */
typedef struct dt_pgroup {
    const char *module;   /* HF module path inside a block ("self_attn.q_proj") or outside ("lm_head") */
    const char *tensor;   /* "weight" | "bias" | "lora_A.weight" | "lora_B.weight" */
    int in_block;         /* 1: one tensor in each block first_layer .. first_layer + n_layers - 1 */
    int64_t first_layer, n_layers;   /* outside the blocks: 0, 1 */
    int64_t rows, cols;   /* the tensor as HF stores it: linear [out, in], lora_A [r, in], lora_B [out, r],
                           * vectors [1, n], embeddings [V, h] */
    dt_trainability train;
    dt_storage storage;
    int linear;           /* the weight of a linear (or embedding) layer */
    int embedding;        /* an embedding table (wte / embed_tokens, wpe): before the blocks */
} dt_pgroup;

#define DT_PGROUPS_MAX 160
typedef struct dt_pgroups {
    dt_model_role role;
    int64_t n_layer;
    int double_quant;     /* 4-bit storages: absmax quantised again (dt_storage_tensor_bytes) */
    int64_t quant_block;
    int n;
    dt_pgroup g[DT_PGROUPS_MAX];
} dt_pgroups;

/* The groups of model m under method ft, base weights loaded in load_dtype (the plan's
 * precision.param). Bad settings for this model — a LoRA target or trainable module the
 * family lacks, a rank above min(in, out) of a targeted linear, trainable_layers outside
 * -L..L — fail with DT_EINVAL and one line naming the setting, the model and the fix. */
int dt_model_pgroups(const dt_model *m, const dt_finetune *ft, dt_dtype load_dtype, dt_model_role role,
                     dt_pgroups *out, dt_error *err);

/* 1 when name is a module of m outside its blocks (embed_tokens, norm, lm_head; wte, wpe,
 * ln_f; lm_head of a tied model included), as --trainable-modules names them. */
int dt_model_outer_module(const dt_model *m, const char *name);
int64_t dt_pgroup_elems(const dt_pgroup *g);                           /* n_layers x rows x cols */
int64_t dt_pgroup_bytes(const dt_pgroups *s, const dt_pgroup *g);      /* stored, quantisation state included */
/* Sums over the groups whose trainability is t (elements / stored bytes). */
int64_t dt_pgroups_elems(const dt_pgroups *s, dt_trainability t);
int64_t dt_pgroups_bytes(const dt_pgroups *s, dt_trainability t);
/* Elements of the quantised weights, and the largest one (what a use dequantises at once). */
int64_t dt_pgroups_quantized_elems(const dt_pgroups *s);
int64_t dt_pgroups_largest_quantized(const dt_pgroups *s);
/* The first block holding a trained or adapter tensor (n_layer when none does); 0 when a
 * tensor before the blocks (the embeddings) is trained. Backward runs no further down. */
int64_t dt_pgroups_first_trained_layer(const dt_pgroups *s);
/* 1 when the embeddings are trained (their gradient needs the backward down to them). */
int dt_pgroups_embedding_trained(const dt_pgroups *s);
/* State of module (an in-block path of the description) in block layer: trained (weight
 * trained), adapted (a LoRA adapter on it). */
void dt_pgroups_module_state(const dt_pgroups *s, const char *module, int64_t layer, int *trained, int *adapted);

/* 1 when the base tensor `tensor` ("weight" | "bias") of module is trained (its own values
 * updated: full, freeze's trained blocks / modules, modules_to_save), 0 when frozen. layer:
 * the block, or -1 for a module outside the blocks (embed_tokens, norm, lm_head; wte, wpe,
 * ln_f). The engine's layout asks this of every tensor, so it trains what the planner counts. */
int dt_pgroups_tensor_trained(const dt_pgroups *s, const char *module, const char *tensor, int64_t layer);

/* What one block in the backward keeps for it, relative to dt_model_block_saved (full
 * fine-tuning), per token (docs/finetune.md "Activations"):
 *   dropped: elements not kept (a linear's input kept only for its weight gradient when
 *     the weight is frozen and not adapted; a norm's output no trained norm weight and no
 *     linear keeps);
 *   lora_rank: x A^T of each adapted linear (r elements, kept by lora_B);
 *   lora_dropout_in: with dropout > 0, each adapted linear's dropout(x) (its input width),
 *     and as many mask elements;
 *   first_norm: when no gradient flows into the block, the width of its first norm's input
 *     (the residual), which only the input gradient needs; first_norm_trained: that norm's
 *     weight is trained (its weight gradient still reads the normalised input);
 *   frozen_rms: elements of the RMSNorms with a frozen weight (Hugging Face's
 *     weight * normalised(x) keeps normalised(x) only for the weight's gradient);
 *   masks_unkept: dropout inputs that need no gradient (the first block's attention
 *     input under a frozen norm): dropout keeps its mask only for the input's gradient.
 * attn_keeps_out: the attention kernel keeps its output itself (flash / sdpa: their
 * backward reads it), so o_proj's input stays. grad_in: a gradient flows into the block. */
typedef struct dt_ft_saved {
    int64_t dropped, lora_rank, lora_dropout_in;
    int64_t first_norm, frozen_rms;
    int first_norm_trained;
    int64_t masks_unkept;   /* of lora_dropout_in: inputs needing no gradient, whose dropout keeps no mask */
} dt_ft_saved;
void dt_pgroups_block_saved(const dt_model *m, const dt_pgroups *s, const dt_finetune *ft, int64_t layer,
                            int attn_keeps_out, int grad_in, dt_ft_saved *out);
/* The lm_head's input (the final norm's output) is kept only when the head or the final
 * norm is trained (or the head adapted): elements per token dropped otherwise. */
int64_t dt_pgroups_head_dropped(const dt_model *m, const dt_pgroups *s);

/* 1 when the classifier matrix carries a gradient: an untied lm_head trained, or (tied) the
 * token embedding it shares. */
int dt_pgroups_classifier_trained(const dt_model *m, const dt_pgroups *s);
/* Elements with a gradient and optimizer state (trained + adapter) in one of the model's
 * parameter groups as the engine and ZeRO unit them (engine/model/dt_lm.h): unit 0 the
 * embeddings, 1 + l block l, n_layer + 1 the rest (final norm, untied lm_head). */
int64_t dt_pgroups_unit_elems(const dt_pgroups *s, int64_t unit);

/* The units dtrun's ZeRO engine communicates (engine/dist/zero.c: the embeddings, each
 * block, the final norm with an untied lm_head), over what method ft trains (NULL or full:
 * every parameter), each padded to a multiple of W ranks: *emb the embeddings' unit, *other
 * the largest of the rest, *state the elements with a gradient, all units (unpadded). A
 * method the model cannot take counts as full. */
void dt_model_zero_units(const dt_model *m, const dt_finetune *ft, int64_t W, int64_t *emb, int64_t *other,
                         int64_t *state);

/* The first block backward reaches under method ft (dt_pgroups_first_trained_layer; 0 for
 * NULL, full, or a method the model cannot take). */
int64_t dt_model_first_trained_block(const dt_model *m, const dt_finetune *ft);

/* LoRA's extra forward multiply-adds per token of one block: r (in + out) per adapted linear. */
int64_t dt_pgroups_block_lora_macs(const dt_pgroups *s, int64_t layer);
/* Weight elements of one block's linears whose weight gradient is computed (trained). */
int64_t dt_pgroups_block_trained_matmul(const dt_model *m, const dt_pgroups *s, int64_t layer);
/* Adapted linears in one block (each adds its LoRA kernels). */
int dt_pgroups_block_adapted(const dt_pgroups *s, int64_t layer);

#endif
