/* dt_tokenizer.h — the models' own tokenizers (docs/tokenizers.md), encoding and decoding
 * exactly as their libraries do:
 *   - a SentencePiece model (tokenizer.model: Llama-2, Mistral, Gemma) through Debian's
 *     libsentencepiece (dt_spm.h): SentencePieceProcessor's encode / decode, no BOS/EOS;
 *     control pieces (<s>, </s>) are never read from text, with_special makes no difference;
 *   - a Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2, Llama-3,
 *     Qwen2/2.5/3), as `tokenizers` does it:
 *   - added tokens (special or not) are split out of the text first (leftmost, longest),
 *   - the pre-tokenizer's split regex(es) run through PCRE2 (UTF + UCP): ByteLevel's own
 *     GPT-2 regex (use_regex) and/or Split(Regex, "Isolated") stages of a Sequence,
 *   - each pre-token's bytes are merged by BPE, lowest merge rank first (leftmost on
 *     ties); with the model's ignore_merges (Llama-3) a pre-token that is itself in the
 *     vocabulary is taken whole,
 *   - decoding maps ids back to their bytes (ByteLevel's byte-to-unicode mapping undone).
 *   - the NFC normalizer (Qwen2) runs through ICU on each segment the added tokens leave.
 * Not handled: the post-processor (no BOS/EOS is added: like encode(add_special_tokens=
 * False)). A file whose first byte after white space is '{' is read as tokenizer.json,
 * any other as a SentencePiece model. Everything else a file asks for that is not supported (WordPiece, Unigram, byte
 * fallback, dropout, other normalizers or pre-tokenizers) is refused at load with one
 * line naming it. Errors through dt_error; nothing is printed. */
#ifndef DT_TOKENIZER_H
#define DT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"

typedef struct dt_tokenizer dt_tokenizer;

#define DT_TOK_FINGERPRINT_BYTES 32   /* SHA-256 */

typedef enum {
    DT_TOK_BPE_JSON = 1,         /* tokenizer.json, byte-level BPE */
    DT_TOK_SENTENCEPIECE = 2     /* tokenizer.model */
} dt_tok_kind;

/* Loads tokenizer.json or a SentencePiece tokenizer.model at path (a regular file of at
 * most DT_READ_MAX_JSON bytes; JSON strictly validated). DT_EIO when it cannot be read,
 * DT_EINVAL when it is malformed or of a kind not supported ("...: byte-level BPE
 * tokenizer.json (GPT-2, Llama-3, Qwen2) is supported", or libsentencepiece's reason),
 * DT_ENOMEM. */
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
/* Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF, as Rust's
 * str and Python's utf-8 codec): the offset of the first byte that is not, or len. */
size_t dt_tok_utf8_check(const char *text, size_t len);
/* Bytes of ids[0..n-1] concatenated (an added token's content as written); *out is
 * malloc'd and NUL-terminated, *len its length. An id outside [0, vocab size) or one
 * without a token is DT_EINVAL naming it. */
int dt_tok_decode(const dt_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len,
                  dt_error *err);
/* 1 + the largest id of the vocabulary and the added tokens. */
int32_t dt_tok_vocab_size(const dt_tokenizer *t);
/* The id of a token by its text (an added token's content, or a vocabulary entry's
 * bytes; a SentencePiece piece as the model spells it, "▁the", "<0x0A>"); -1 when there
 * is none. */
int32_t dt_tok_token_id(const dt_tokenizer *t, const char *token);
/* A token's text (its bytes for tokenizer.json, the piece for SentencePiece),
 * NUL-terminated, *len its bytes; NULL when the id has no token. Owned by t. */
const char *dt_tok_token_text(const dt_tokenizer *t, int32_t id, size_t *len);
dt_tok_kind dt_tok_get_kind(const dt_tokenizer *t);
/* The end-of-text token that separates documents: SentencePiece's </s> (eos_id);
 * tokenizer.json's first added token of <|endoftext|> (GPT-2, Qwen2), <|end_of_text|>
 * (Llama-3), </s>, <eos>. -1 when there is none. */
int32_t dt_tok_eot_id(const dt_tokenizer *t);
/* SHA-256 over the vocabulary, id by id: each id's token text (dt_tok_token_text) with a
 * 4-byte little-endian length before it, 0xFFFFFFFF alone for an id without a token
 * (docs/data.md "Tokenizer fingerprint"). Two tokenizers with the same fingerprint give
 * every id the same token. */
void dt_tok_fingerprint(const dt_tokenizer *t, unsigned char out[DT_TOK_FINGERPRINT_BYTES]);

#endif
