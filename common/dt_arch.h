/* dt_arch.h — the description of a decoder-only architecture, as a plan file
 * carries it (common/plan.c) and every layer above reads it: the shape fields,
 * the family, and the consistency check. What to do with a description — resolve
 * a name or config.json into one, count its parameters and FLOPs — lives in
 * models/dt_model.h. */
#ifndef DT_ARCH_H
#define DT_ARCH_H

#include <stdint.h>

#include "dt_error.h"

/* Upper bounds on each dimension: keep every count below 2^62 so int64 arithmetic
 * cannot overflow (3·h·f·L <= 3·2^20·2^22·2^14 < 2^58), far above any real model. */
#define DT_MAX_LAYERS   (INT64_C(1) << 14)
#define DT_MAX_HIDDEN   (INT64_C(1) << 20)
#define DT_MAX_HEADS    (INT64_C(1) << 16)
#define DT_MAX_HEAD_DIM (INT64_C(1) << 16)
#define DT_MAX_QDIM     (INT64_C(1) << 22)   /* n_head * head_dim */
#define DT_MAX_FFN      (INT64_C(1) << 22)
#define DT_MAX_VOCAB    (INT64_C(1) << 24)
#define DT_MAX_POS      (INT64_C(1) << 24)

typedef enum { DT_FAMILY_GPT2 = 0, DT_FAMILY_LLAMA = 1 } dt_family;

/* RoPE frequency scaling, as config.json's "rope_scaling" / "rope_parameters"
 * rope_type says (HF transformers modeling_rope_utils):
 *   default : inv_freq[i] = theta^(-2i/d)
 *   linear  : positions divided by factor (the same as inv_freq / factor)
 *   dynamic : NTK-aware; changes the frequencies only beyond original_max_pos, so
 *             at training lengths within max_pos it is the default
 *   llama3  : Llama-3.1's band-wise rescaling by factor, low_freq_factor,
 *             high_freq_factor over original_max_pos */
typedef enum {
    DT_ROPE_DEFAULT = 0,
    DT_ROPE_LINEAR = 1,
    DT_ROPE_DYNAMIC = 2,
    DT_ROPE_LLAMA3 = 3
} dt_rope_type;

typedef struct dt_rope_scaling {
    dt_rope_type type;
    double factor;              /* linear / dynamic / llama3; 0 for default */
    double low_freq_factor;     /* llama3 only */
    double high_freq_factor;    /* llama3 only */
    int64_t original_max_pos;   /* llama3 / dynamic: original_max_position_embeddings; 0 otherwise */
} dt_rope_scaling;

/* The parameters of dt_rope_scaling; their keys are HF's (config.json and the plan
 * use the same): "factor", "low_freq_factor", "high_freq_factor",
 * "original_max_position_embeddings". */
typedef enum {
    DT_ROPE_FACTOR = 0,
    DT_ROPE_LOW_FREQ_FACTOR = 1,
    DT_ROPE_HIGH_FREQ_FACTOR = 2,
    DT_ROPE_ORIGINAL_MAX_POS = 3,
    DT_ROPE_N_PARAMS = 4
} dt_rope_param;
const char *dt_rope_param_key(dt_rope_param p);
/* 1 when type t has parameter p (linear: factor; dynamic: factor, original_max_pos;
 * llama3: all four; default: none). Every other parameter must be 0. */
int dt_rope_type_uses(dt_rope_type t, dt_rope_param p);
/* Ranges (HF modeling_rope_utils _validate_*_rope_parameters): factor >= 1, 0 <
 * low_freq_factor < high_freq_factor, original_max_pos in 1..max_pos, unused ones 0.
 * The message starts with where (e.g. "model 'x': rope_scaling") and names the key. */
int dt_rope_scaling_check(const dt_rope_scaling *r, int64_t max_pos, const char *where, dt_error *err);

typedef struct dt_model {
    char name[64];        /* catalog name ("gpt2", "qwen3-32b"), file stem, or "derived-32B" */
    dt_family family;
    int64_t n_layer;      /* L: transformer blocks */
    int64_t hidden;       /* h: residual width */
    int64_t n_head;       /* a: query heads */
    int64_t n_kv_head;    /* key/value heads (GQA); == n_head for multi-head attention */
    int64_t head_dim;     /* d: per-head width (hidden / n_head unless the config says) */
    int64_t ffn;          /* f: MLP inner width */
    int64_t vocab;        /* V: embedding rows (as in config.json, not padded) */
    int64_t max_pos;      /* max_position_embeddings / n_positions (gpt2: rows of wpe) */
    int tied_embeddings;  /* lm_head shares wte */
    int qkv_bias;         /* llama family: q,k,v projections have biases (Qwen2). gpt2: always 1 */
    int qk_norm;          /* llama family: per-head RMSNorm on q and k (Qwen3) */
    double norm_eps;      /* LayerNorm / RMSNorm epsilon */
    double rope_theta;    /* llama family RoPE base; 0 for gpt2 */
    dt_rope_scaling rope_scaling;   /* llama family; all zero (DT_ROPE_DEFAULT) for gpt2 */
    int derived;          /* 1 when the shape was derived from a bare parameter count */
    int64_t requested_params; /* derived shapes: the count asked for (--params 32B = 32e9), which sizes
                               * the model states (params, grads, optimizer) everywhere; 0 otherwise
                               * (docs/models.md "Parameter counts: one rule") */
    /* A sequence classifier (transformers' *ForSequenceClassification, a reward model:
     * docs/objectives.md "In dtrun"): num_labels > 0 puts a head "score.weight"
     * [num_labels, hidden] (no bias) in place of the LM head, its logits read at the last
     * token that is not pad_token_id. 0: a causal LM (every plan; pad_token_id unused). */
    int64_t num_labels;
    int64_t pad_token_id;
} dt_model;

/* Checks internal consistency (sizes within the bounds above, heads divide, GQA groups,
 * RoPE scaling: dt_rope_scaling_check, and none for gpt2). */
int dt_model_validate(const dt_model *m, dt_error *err);

const char *dt_family_name(dt_family f);   /* "gpt2" / "llama" */
const char *dt_rope_type_name(dt_rope_type t);   /* "default" / "linear" / "dynamic" / "llama3" */

#endif
