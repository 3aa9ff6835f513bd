/* dt_generate.h — text generation with a KV cache for the families of dt_lm.h (GPT-2;
 * Llama / Qwen2 / Qwen3), on the CPU in fp32: prefill of each prompt, then one decode
 * step per new token over every sequence still running (docs/objectives.md "The
 * generator"). Greedy, or sampling with temperature, top-k and top-p in the order
 * Hugging Face generate applies its warpers (temperature, top-k, top-p), from a seed.
 *
 * The generator holds its own fp32 copy of the weights (as TRL gathers a ZeRO-3 model
 * for generation): it is filled from a dt_lm group by group (dt_gen_load_group: the
 * caller may have gathered that group into the model's bound storage), LoRA adapters
 * merged into their linears, or left out (the reference of a LoRA policy). Positions
 * are per sequence (no padding): sequence i's prompt starts at position 0, as a
 * left-padded batch with transformers' position_ids from the attention mask.
 *
 * Memory: weights (the model's parameter count, fp32), the KV cache
 * 2 · layers · kv_heads · head_dim · 4 bytes · max_len · max_batch, and scratch rows. */
#ifndef DT_GENERATE_H
#define DT_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_lm.h"
#include "dt_model.h"

struct dt_finetune;
typedef struct dt_gen dt_gen;

/* A generator for model m: up to max_batch sequences at once, each at most max_len
 * tokens (prompt + completion, <= m->max_pos for GPT-2's learned positions).
 * DT_EINVAL (one line) for sizes out of range, DT_ENOMEM. */
int dt_gen_create(const dt_model *m, int64_t max_batch, int64_t max_len, dt_gen **out, dt_error *err);
void dt_gen_free(dt_gen *gen);
/* Bytes the generator allocated (weights + KV cache + scratch). */
size_t dt_gen_bytes(const dt_gen *gen);

/* Copies the tensors of parameter group `group` (0 .. L+1, dt_lm.h) of lm into the
 * generator, reading the trained set through dt_lm_group_params (whatever storage is
 * bound now), the base set from its flat buffer and QLoRA's quantised linears dequantised
 * (dt_lm_quant_get: the fp32 values its training forward uses). Parameters must be fp32 in
 * host memory. With ft a LoRA method and adapters 1, each adapted linear gets W + s·B·A
 * (s = dt_ft_lora_scale); adapters 0 (or no LoRA): the base weights alone. */
int dt_gen_load_group(dt_gen *gen, dt_lm *lm, int group, const struct dt_finetune *ft, int adapters,
                      dt_error *err);
/* Every group of lm (its parameters unpartitioned: flat or bound). */
int dt_gen_load(dt_gen *gen, dt_lm *lm, const struct dt_finetune *ft, int adapters, dt_error *err);

#define DT_GEN_MAX_EOS 8

typedef struct dt_gen_params {
    int64_t max_new_tokens;  /* >= 1 */
    double temperature;      /* 0: greedy (argmax, the first on ties as torch.argmax); > 0: sampled */
    int64_t top_k;           /* 0: off; else keep the logits >= the k-th largest (HF TopKLogitsWarper) */
    double top_p;            /* 1: off; else HF TopPLogitsWarper (the smallest set of mass >= top_p) */
    int64_t vocab_limit;     /* 0: any id; else only ids < vocab_limit are chosen (a tokenizer
                              * with fewer ids than the embedding has rows) */
    uint64_t seed;           /* sequence i draws from its own stream (seed, first_stream + i): a
                              * sequence's completion does not depend on the others in the batch */
    uint64_t first_stream;   /* 0 usually; a caller splitting one batch over calls (grpo's ranks)
                              * gives each part its first sequence's place */
    int n_eos;               /* a sequence stops after emitting any of eos[0 .. n_eos) (kept in
                              * its completion, as generate keeps it) */
    int32_t eos[DT_GEN_MAX_EOS];
} dt_gen_params;

/* Generates after n prompts (prompt i: prompts[i][0 .. plen[i]), 1 <= plen[i]; n <=
 * max_batch; plen[i] + max_new_tokens <= max_len). out [n, max_new_tokens]: sequence i's
 * tokens, the first out_len[i] valid (the rest -1). logits: NULL, or [n, max_new_tokens,
 * V] fp32 receiving the raw logits each new token was chosen from (generate's
 * output_logits; rows after a sequence stopped are left untouched). DT_EINVAL names a
 * prompt that is empty, too long, or holds a token outside the vocabulary. */
int dt_gen_run(dt_gen *gen, const dt_gen_params *p, int64_t n, const int32_t *const *prompts,
               const int64_t *plen, int32_t *out, int64_t *out_len, float *logits, dt_error *err);

#endif
