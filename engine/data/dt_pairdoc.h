/* dt_pairdoc.h — preference pairs (rm, dpo) and prompts (grpo) from JSONL records, and a
 * batch of pairs for the trainer (docs/data.md "Preference and prompt records").
 *
 * A pair is two sequences sharing a prompt: prompt ‖ chosen and prompt ‖ rejected; the prompt's
 * tokens are not trained (label -100), the completion's are. As TRL 1.16's DPOTrainer tokenizes
 * (_prepare_dataset's tokenize_fn): the prompt alone (with the assistant's header for a chat),
 * prompt + chosen and prompt + rejected are each rendered, and the completion starts where the
 * prompt's ids and each sequence's ids first differ. A plain-text pair's completions end with the
 * tokenizer's end-of-text id (TRL's add_eos); a chat's with the turn's end token.
 *
 * Records, one JSON object per line (TRL's and LLaMA-Factory's field names):
 *   {"prompt": str, "chosen": str, "rejected": str}                  TRL standard, plain text
 *   {"prompt": [msg...], "chosen": [msg], "rejected": [msg]}          TRL conversational
 *   {"chosen": [msg...], "rejected": [msg...]}                        TRL, implicit prompt (the
 *                                                                     messages both share)
 *   {"instruction": str, "input": str?, "system": str?, "history": [[q, a]...]?,
 *    "chosen": str, "rejected": str}                                  LLaMA-Factory alpaca, ranking
 *   {"conversations": [{"from", "value"}...], "system": str?,
 *    "chosen": {"from": "gpt", "value"}, "rejected": {...}}           LLaMA-Factory sharegpt, ranking
 * msg = {"role": "system" | "user" | "assistant", "content": str}; sharegpt's from = human | gpt |
 * system. The completion of a chat pair is one assistant message. Prompt-only records (GRPO):
 * {"prompt": str | [msg...], "answer": str | number (optional)}.
 *
 * Length (max_len > 0, the plan's sequence): a pair whose prompt alone is max_len tokens or more
 * is refused (TRL drops it: nothing would be trained); a longer sequence keeps its first max_len
 * tokens (TRL's truncation_mode "keep_start"). Errors: "PATH:LINE: $.chosen: ..." and DT_EINVAL. */
#ifndef DT_PAIRDOC_H
#define DT_PAIRDOC_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_prepdoc.h"

typedef struct dt_pair {
    int32_t *ids[2];  /* [0] prompt ‖ chosen, [1] prompt ‖ rejected (malloc'd) */
    size_t n[2];      /* tokens of each, after truncation */
    size_t prompt_n;  /* the leading tokens both share and neither trains */
    int truncated;    /* 1 when a sequence lost its end to max_len */
} dt_pair;

/* One preference record (line: n bytes, no newline) into *out. ctx: dt_prepdoc_init with
 * DT_PREP_CHAT and the chat template for chat records. path, lineno: for messages. */
int dt_pairdoc_encode(const dt_prepdoc_ctx *ctx, const char *line, size_t n, const char *path, uint64_t lineno,
                      int64_t max_len, dt_pair *out, dt_error *err);
void dt_pair_free(dt_pair *p);

/* One prompt-only record: *ids the prompt (a chat's with the assistant's header), *answer the
 * "answer" field as text (NULL when absent; a number as JSON writes it). A prompt of max_len
 * tokens or more (max_len > 0) is refused: no room to generate. Both malloc'd. */
int dt_promptdoc_encode(const dt_prepdoc_ctx *ctx, const char *line, size_t n, const char *path, uint64_t lineno,
                        int64_t max_len, int32_t **ids, size_t *n_ids, char **answer, dt_error *err);

/* A batch of npairs pairs as TRL's concatenated_forward lays it out: rows 0..npairs-1 the chosen
 * sequences, rows npairs..2·npairs-1 the rejected ones, each right-padded to T with pad_id.
 * ids: (2·npairs, T); targets: (2·npairs, T) shifted labels: targets[r, t] = ids[r, t+1] when
 * position t+1 is a completion token, else -100 (DT_OBJ_IGNORE_LABEL's value), what
 * dt_obj_seq_logps reads. DT_EINVAL when a sequence is longer than T. */
int dt_pair_batch(const dt_pair *pairs, int64_t npairs, int64_t T, int32_t pad_id, int32_t *ids, int32_t *targets,
                  dt_error *err);

#endif
