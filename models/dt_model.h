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
 * The families' blocks are written once, as a module table (dt_model_describe); the
 * counts, FLOPs and saved activations below are all derived from it (family.c).
 * All counts are in elements (parameters, or values per token), never bytes. */
#ifndef DT_MODEL_H
#define DT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "dt_arch.h"   /* dt_model, dt_family: the description a plan carries */
#include "dt_error.h"
#include "dt_vlm.h"   /* dt_vlm: a vision tower + projector before the model */


/* Resolves "--model" text: a catalog name (case-insensitive: "gpt2", "Qwen3-0.6B",
 * "llama-2-7b", ...) or a path to a Hugging Face config.json (gpt2 / llama / qwen2 /
 * qwen3 / mistral model_type; both "rope_theta" and "rope_parameters" spellings). */
int dt_model_resolve(const char *name_or_path, dt_model *out, dt_error *err);
/* Parses config.json text; name is stored in out->name. A vision-language config (model_type
 * llava) fails here with one line: callers that plan one use the _vlm forms below. */
int dt_model_from_config_json(const char *json, const char *name, dt_model *out, dt_error *err);
/* Both kinds: a text config leaves *v zero; a Hugging Face LLaVA config.json (model_type llava:
 * vision_config, text_config with LlamaConfig's defaults for the keys it omits,
 * vision_feature_layer, vision_feature_select_strategy, image_token_index, projector_hidden_act)
 * gives the language model in *out and the tower and projector in *v (images_per_sample 1,
 * stage full). A vision_config without the tower's shape keys fails with one line. */
int dt_model_from_config_json_vlm(const char *json, const char *name, dt_model *out, dt_vlm *v, dt_error *err);
int dt_model_resolve_vlm(const char *name_or_path, dt_model *out, dt_vlm *v, dt_error *err);
/* A standard llama-family decoder shape whose parameter count is close to n_params
 * (documented in docs/models.md); sets out->derived = 1. */
int dt_model_for_params(int64_t n_params, dt_model *out, dt_error *err);

/* Catalog: number of entries and the i-th canonical name (for listings/tests). */
int dt_model_catalog_count(void);
const char *dt_model_catalog_name(int i);
/* The Hugging Face hub id a catalog model's config.json comes from (its "_name_or_path",
 * e.g. "Qwen/Qwen2.5-7B" for "qwen2.5-7b", any case) into out (n bytes); 0 when name is not
 * a catalog model or the id does not fit. */
int dt_model_catalog_hub_id(const char *name, char *out, size_t n);

/* ---- The family description: one source for counts, FLOPs and saved activations ----
 *
 * dt_model_describe resolves a model into the modules of its family's pre-norm block,
 * as Hugging Face writes it (GPT2Block in modeling_gpt2.py; LlamaDecoderLayer,
 * Qwen2DecoderLayer, Qwen3DecoderLayer in modeling_llama.py / _qwen2.py / _qwen3.py).
 * A block is two sublayers, each  residual += out(core(in(norm(residual)))):
 *   attention: norm -> in linears (q, k, v | c_attn) -> [q/k norms] -> attention -> out
 *   MLP:       norm -> in linears (gate, up | c_fc)  -> activation             -> out
 * Every size in these structs is in ELEMENTS (parameters, or values per token); the
 * memory model alone turns elements into bytes. docs/models.md "Family description". */
typedef enum { DT_NORM_LAYERNORM = 0, DT_NORM_RMSNORM = 1 } dt_norm_kind;
typedef enum { DT_MLP_GELU = 0, DT_MLP_SWIGLU = 1 } dt_mlp_kind;   /* GELU(x W1); SiLU(x Wg) * x Wu */

typedef struct dt_linear_desc {
    const char *name;    /* HF module name within the block / model, e.g. "self_attn.q_proj" */
    int64_t in, out;     /* the weight has in x out elements */
    int bias;            /* 1: plus a bias of out elements */
} dt_linear_desc;

typedef struct dt_norm_desc {
    const char *name;    /* "ln_1", "input_layernorm", "self_attn.q_norm", ... */
    dt_norm_kind kind;   /* LayerNorm: weight + bias, keeps mean + rstd; RMSNorm: weight, keeps rstd */
    int64_t width;       /* elements normalised together = the weight's length */
    int64_t rows;        /* rows normalised per token: 1, or heads for Qwen3's q/k norm */
} dt_norm_desc;

#define DT_SUBLAYER_MAX_IN 3
#define DT_SUBLAYER_MAX_IN_NORM 2
typedef struct dt_sublayer_desc {
    dt_norm_desc norm;                              /* on the residual stream */
    int n_in;
    dt_linear_desc in[DT_SUBLAYER_MAX_IN];          /* all read the norm's output */
    int n_in_norm;
    dt_norm_desc in_norm[DT_SUBLAYER_MAX_IN_NORM];  /* on in outputs before the core (Qwen3) */
    dt_linear_desc out;                             /* core output -> residual */
} dt_sublayer_desc;

typedef struct dt_block_desc {
    dt_sublayer_desc attn, mlp;
    int64_t n_head, n_kv_head, head_dim;   /* attention core: softmax(q k^T / sqrt d) v */
    dt_mlp_kind act;                       /* MLP core */
    int resid_dropouts;                    /* HF nn.Dropout modules on the residual branches (GPT-2: 2) */
} dt_block_desc;

typedef struct dt_embed_desc { const char *name; int64_t rows, width; } dt_embed_desc;

#define DT_MODEL_MAX_EMBED 2
typedef struct dt_model_desc {
    dt_block_desc block;                      /* each of the n_layer blocks */
    int n_embed;
    dt_embed_desc embed[DT_MODEL_MAX_EMBED];  /* wte / embed_tokens [V, h]; gpt2's wpe [P, h] */
    dt_norm_desc final_norm;                  /* ln_f / norm */
    dt_linear_desc lm_head;                   /* h -> V, no bias; computed even when tied */
    int lm_head_tied;                         /* shares embed[0]: its parameters count once */
    int embed_dropout;                        /* HF nn.Dropout after the embeddings (GPT-2's drop) */
} dt_model_desc;

/* Fills out from m (all zero for an unknown family). Names point to static strings. */
void dt_model_describe(const dt_model *m, dt_model_desc *out);

/* Parameter counts (elements), from the description. Tied weights are counted once. */
int64_t dt_model_params(const dt_model *m);             /* total */
int64_t dt_model_block_params(const dt_model *m);       /* one transformer block */
int64_t dt_model_block_matmul_params(const dt_model *m);/* its linears' weights (no biases, norms) */
int64_t dt_model_embedding_params(const dt_model *m);   /* wte (+ wpe for gpt2) */
int64_t dt_model_head_params(const dt_model *m);        /* final norm + untied lm_head */
/* DeepSpeed model_to_params' "largest layer": the largest single module's own params
 * (for LLMs the V x h embedding or lm_head). */
int64_t dt_model_largest_module_params(const dt_model *m);
/* The largest weight matrix inside one block (for LLMs the MLP's; what references that
 * take "largest layer" as a block's biggest matrix use; docs/memory-model.md). */
int64_t dt_model_largest_block_matrix_params(const dt_model *m);
/* Elements of the whole model's parameter tensors (each weight, bias and norm vector on
 * its own) with fewer than threshold elements: what DeepSpeed ZeRO-3 keeps unpartitioned
 * under stage3_param_persistence_threshold. */
int64_t dt_model_small_tensor_params(const dt_model *m, int64_t threshold);
/* The modules of one block ZeRO-3 fetches one at a time (those owning a tensor of at
 * least threshold elements): writes up to max per-module element counts into sizes and
 * returns how many modules there are. */
int dt_model_block_fetch_sizes(const dt_model *m, int64_t threshold, int64_t *sizes, int max);
/* Elements per token that an unfused MLP activation (Hugging Face's NewGELUActivation,
 * SiLU(gate) * up as two ops) keeps for backward beyond dt_model_block_saved's. */
int64_t dt_model_block_act_unfused(const dt_model *m);

/* What a block (or the head) keeps for backward, per token (Korthikanti et al. 2022
 * §4.1, every op keeps its inputs): elems values in the activation dtype, stats fp32
 * norm statistics, attn_rows the query heads whose attention state (flash: one
 * log-sum-exp; materialized: T probabilities) the memory model adds per token. */
typedef struct dt_saved { int64_t elems, stats, attn_rows; } dt_saved;
void dt_model_block_saved(const dt_model *m, dt_saved *out);
void dt_model_head_saved(const dt_model *m, dt_saved *out);   /* final norm and lm_head inputs */
/* Elements per token of a sublayer's in linears' outputs, the wider sublayer's: q + k + v
 * or gate + up (c_fc), the widest gradient a block's backward holds at once. */
int64_t dt_model_block_widest_in(const dt_model *m);

/* Forward FLOPs of one block for one sequence of seq tokens (docs/models.md "FLOPs
 * convention"): matmul = 2 x matmul params x seq; attention = QK^T + PV over the full
 * seq x seq square; mlp_out = the MLP's out linear (down_proj / c_proj), part of matmul. */
typedef struct dt_block_flops { double matmul, attention, mlp_out; } dt_block_flops;
void dt_model_block_fwd_flops(const dt_model *m, int64_t seq, dt_block_flops *out);
double dt_model_block_fwd_flops_per_seq(const dt_model *m, int64_t seq);   /* matmul + attention */
/* Training FLOPs for one sequence, forward + backward (no recompute): 3 x (L blocks'
 * forward + the lm_head's 2 V h seq). */
double dt_model_train_flops_per_seq(const dt_model *m, int64_t seq);

/* For a derived model (m->derived): the well-known shape it was taken from, e.g.
 * "Llama-2-7B" (docs/models.md, "Derived shapes"); NULL otherwise. */
const char *dt_model_derived_source(const dt_model *m);

#endif
