/* dt_prepdoc.h — one document of `dtrun prepare` (dt_prepare.h): the check of a JSONL
 * line's shape (pass 1) and a document's token ids and loss mask (pass 2). Internal to
 * engine/data; separate so a test or fuzzer can drive it without files.
 *
 * Documents (docs/data.md "Input formats"):
 *   text   the bytes as they are (UTF-8), encoded without special tokens;
 *   jsonl  {"text": "..."}: the string, encoded without special tokens;
 *   chat   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}...]}
 *          or {"instruction": "...", "input": "..." (optional), "output": "...",
 *          "system": "..." (optional)}, rendered with the chat template; the template's
 *          own tokens by id, the texts encoded without special tokens (a message's text
 *          never becomes a control token). Other keys are ignored.
 *   llava  one element of LLaVA's JSON list: {"id": ..., "image": "path" (optional: text-only
 *          records have none), "conversations": [{"from": "human"|"gpt"|"system",
 *          "value": "..."}...]}, rendered as chat (human = user, gpt = assistant); every
 *          "<image>" in a value becomes image_tokens copies of image_id (mask 0), the text
 *          around it encoded apart, as Hugging Face's tokenizer splits at an added token.
 *          A record with an image holds exactly one "<image>", one without holds none.
 * Every document starts with the end-of-text id; only chat documents have a mask: 1 on
 * the assistant's content tokens and the token that ends its turn (<|im_end|> or
 * <|eot_id|>), 0 elsewhere. */
#ifndef DT_PREPDOC_H
#define DT_PREPDOC_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_prepare.h"
#include "dt_tokenizer.h"

/* The template's special tokens, by index */
enum {
    DT_PD_IM_START = 0, DT_PD_IM_END,                               /* chatml */
    DT_PD_BEGIN, DT_PD_START_HEADER, DT_PD_END_HEADER, DT_PD_EOT_ID, /* llama3 */
    DT_PD_N_SPECIAL
};

typedef struct dt_prepdoc_ctx {
    const dt_tokenizer *tok;
    dt_prep_format format;
    dt_chat_template chat;
    int32_t eot;                        /* the document separator */
    int32_t special[DT_PD_N_SPECIAL];   /* ids of the template's tokens (-1 when unused) */
    int32_t image_id;                   /* llava: the placeholder id (set by the caller) */
    int image_tokens;                   /* llava: placeholders per <image> */
} dt_prepdoc_ctx;

/* Fills ctx for tok: the end-of-text id and the chat template's tokens, each of which the
 * tokenizer must have (DT_EINVAL naming the missing token and the tokenizer, tok_path). */
int dt_prepdoc_init(dt_prepdoc_ctx *ctx, const dt_tokenizer *tok, const char *tok_path, dt_prep_format format,
                    dt_chat_template chat, dt_error *err);

/* Pass 1, jsonl and chat: line (n bytes, no newline) must be one strict JSON object
 * (dt_json_validate, no duplicate keys) of the format's shape. Errors:
 * "PATH:LINE:COL: invalid JSON ..." or "PATH:LINE: $.messages[1].role: ...". *skip = 1
 * for a document with nothing to train on (an empty "text", a chat without an
 * assistant message). */
int dt_prepdoc_check_line(const dt_prepdoc_ctx *ctx, const char *line, size_t n, const char *path,
                          uint64_t lineno, int *skip, dt_error *err);

/* Pass 2: the ids of one document, or of one piece of a text document (first = 0 for
 * the pieces after its first: no end-of-text id before them). *mask is NULL for text
 * and jsonl, else one byte (0 or 1) per id. *ids and *mask are malloc'd. */
int dt_prepdoc_encode(const dt_prepdoc_ctx *ctx, const char *bytes, size_t n, int first, int32_t **ids,
                      uint8_t **mask, size_t *n_ids, dt_error *err);

/* llava, pass 2: the record's "image" (malloc'd; NULL for a text-only record) and its
 * "id" as text for messages ("" when absent), in id (idn bytes). */
int dt_prepdoc_image(const char *bytes, size_t n, char **image, char *id, size_t idn, dt_error *err);

/* The chat template's ids for n messages (roles "system" | "user" | "assistant"), as
 * dt_prepdoc_encode renders them but with no end-of-text id before them and no mask;
 * add_generation_prompt: then the assistant's header (chatml '<|im_start|>assistant\n', llama3
 * '<|start_header_id|>assistant<|end_header_id|>\n\n'), as transformers'
 * apply_chat_template(add_generation_prompt=True). *ids is malloc'd. Preference pairs
 * (dt_pairdoc.h) are built from it. */
int dt_prepdoc_render(const dt_prepdoc_ctx *ctx, const char *const *roles, const char *const *contents, size_t n,
                      int add_generation_prompt, int32_t **ids, size_t *n_ids, dt_error *err);

#endif
