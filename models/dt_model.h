/* dt_model.h — decoder-only transformer architectures and their shape arithmetic.
 *
 * A dt_model is the resolved architecture (never just a name): everything the
 * memory model, the time model and the engine need to know about tensor shapes.
 * Two families:
 *   DT_FAMILY_GPT2  : LayerNorm (with bias), GELU MLP (c_fc, c_proj), learned
 *                     positions (wpe), biases on every linear, tied lm_head.
 *   DT_FAMILY_LLAMA : RMSNorm (weight only), SwiGLU MLP (gate, up, down), RoPE,
 *                     GQA (n_kv_head <= n_head), optional q/k/v bias (Qwen2),
 *                     optional per-head q/k RMSNorm (Qwen3), tied or untied lm_head.
 * All counts are in elements (parameters), never bytes. */
#ifndef DT_MODEL_H
#define DT_MODEL_H

#include <stdint.h>

#include "dt_arch.h"   /* dt_model, dt_family: the description a plan carries */
#include "dt_error.h"


/* Resolves "--model" text: a catalog name (case-insensitive: "gpt2", "Qwen3-0.6B",
 * "llama-2-7b", ...) or a path to a Hugging Face config.json (gpt2 / llama / qwen2 /
 * qwen3 / mistral model_type; both "rope_theta" and "rope_parameters" spellings). */
int dt_model_resolve(const char *name_or_path, dt_model *out, dt_error *err);
/* Parses config.json text; name is stored in out->name. */
int dt_model_from_config_json(const char *json, const char *name, dt_model *out, dt_error *err);
/* A standard llama-family decoder shape whose parameter count is close to n_params
 * (documented in docs/models.md); sets out->derived = 1. */
int dt_model_for_params(int64_t n_params, dt_model *out, dt_error *err);

/* Catalog: number of entries and the i-th canonical name (for listings/tests). */
int dt_model_catalog_count(void);
const char *dt_model_catalog_name(int i);

/* Parameter counts (elements). Tied weights are counted once. */
int64_t dt_model_params(const dt_model *m);             /* total */
int64_t dt_model_block_params(const dt_model *m);       /* one transformer block */
int64_t dt_model_embedding_params(const dt_model *m);   /* wte (+ wpe for gpt2) */
int64_t dt_model_head_params(const dt_model *m);        /* final norm + untied lm_head */
/* DeepSpeed model_to_params' "largest layer": the largest single module's own params
 * (for LLMs the V x h embedding or lm_head). */
int64_t dt_model_largest_module_params(const dt_model *m);

/* Training FLOPs for one sequence of seq tokens, forward + backward (no recompute):
 * 6 * (matmul params) * seq + the attention score (QK^T) and value (PV) FLOPs the
 * engine really performs; the exact convention is written in docs/models.md. */
double dt_model_train_flops_per_seq(const dt_model *m, int64_t seq);
/* Forward FLOPs of one transformer block for one sequence (used for recompute cost). */
double dt_model_block_fwd_flops_per_seq(const dt_model *m, int64_t seq);


/* For a derived model (m->derived): the well-known shape it was taken from, e.g.
 * "Llama-2-7B" (docs/models.md, "Derived shapes"); NULL otherwise. */
const char *dt_model_derived_source(const dt_model *m);

#endif
