/* dt_tokenizer.h — Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2,
 * Llama-3, Qwen2/2.5/3), encoding and decoding exactly as `tokenizers` does
 * (docs/tokenizers.md):
 *   - added tokens (special or not) are split out of the text first (leftmost, longest),
 *   - the pre-tokenizer's split regex(es) run through PCRE2 (UTF + UCP): ByteLevel's own
 *     GPT-2 regex (use_regex) and/or Split(Regex, "Isolated") stages of a Sequence,
 *   - each pre-token's bytes are merged by BPE, lowest merge rank first (leftmost on
 *     ties); with the model's ignore_merges (Llama-3) a pre-token that is itself in the
 *     vocabulary is taken whole,
 *   - decoding maps ids back to their bytes (ByteLevel's byte-to-unicode mapping undone).
 * Not handled: the post-processor (no BOS/EOS is added: like encode(add_special_tokens=
 * False)); the NFC normalizer (Qwen2) is accepted and the text is taken as already NFC.
 * Everything else a file asks for that is not supported (WordPiece, Unigram, byte
 * fallback, dropout, other normalizers or pre-tokenizers) is refused at load with one
 * line naming it. Errors through dt_error; nothing is printed. */
#ifndef DT_TOKENIZER_H
#define DT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"

typedef struct dt_tokenizer dt_tokenizer;

/* Loads tokenizer.json at path (read through dt_json_read_file: regular file, bounded,
 * strict JSON). DT_EIO when it cannot be read, DT_EINVAL when it is malformed or of a
 * kind not supported ("...: byte-level BPE tokenizer.json (GPT-2, Llama-3, Qwen2) is
 * supported"), DT_ENOMEM. */
int dt_tok_load(const char *path, dt_tokenizer **out, dt_error *err);
/* The same from text already in memory; what names it in messages. */
int dt_tok_load_text(const char *text, size_t len, const char *what, dt_tokenizer **out,
                     dt_error *err);
void dt_tok_free(dt_tokenizer *t);

/* Encodes len bytes of UTF-8 text (invalid UTF-8 is DT_EINVAL). with_special = 1: the
 * text of a special added token (<|endoftext|>) becomes its id; 0: special tokens' text
 * is encoded as ordinary text (for untrusted data), non-special added tokens still
 * match. *ids is malloc'd (free it; NULL when *n_ids is 0 is possible). */
int dt_tok_encode(const dt_tokenizer *t, const char *text, size_t len, int with_special,
                  int32_t **ids, size_t *n_ids, dt_error *err);
/* Bytes of ids[0..n-1] concatenated (an added token's content as written); *out is
 * malloc'd and NUL-terminated, *len its length. An id outside [0, vocab size) or one
 * without a token is DT_EINVAL naming it. */
int dt_tok_decode(const dt_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len,
                  dt_error *err);
/* 1 + the largest id of the vocabulary and the added tokens. */
int32_t dt_tok_vocab_size(const dt_tokenizer *t);
/* The id of a token by its text (an added token's content, or a vocabulary entry's
 * bytes); -1 when there is none. */
int32_t dt_tok_token_id(const dt_tokenizer *t, const char *token);

#endif
