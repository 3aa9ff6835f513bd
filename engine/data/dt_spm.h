/* dt_spm.h — SentencePiece models (Llama-2's, Mistral's, Gemma's tokenizer.model) through
 * Debian's libsentencepiece (a C++ library; tokenizer_spm.cc is the extern "C" shim).
 * Internal to engine/data: the public interface is dt_tokenizer.h, which dispatches here
 * when a tokenizer file is not JSON (docs/tokenizers.md "SentencePiece").
 *
 * Encoding is SentencePieceProcessor::Encode (the model's own normalizer, dummy prefix,
 * byte fallback; no BOS/EOS: python's sp.encode(text)); decoding is Decode (ids -> text,
 * the dummy prefix's space removed, byte pieces reassembled). No exception crosses the
 * shim: every failure is a dt_error. Thread-safe for concurrent encode/decode of one model
 * (the processor's methods are const). */
#ifndef DT_SPM_H
#define DT_SPM_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_spm dt_spm;

/* Parses a serialized ModelProto (the bytes of a tokenizer.model); what names it in
 * messages. DT_EINVAL when libsentencepiece refuses it (its reason in the message). */
int dt_spm_load(const void *bytes, size_t len, const char *what, dt_spm **out, dt_error *err);
void dt_spm_free(dt_spm *m);

/* len bytes of valid UTF-8 (the caller checks) -> *ids (malloc'd, may be NULL when
 * *n is 0). */
int dt_spm_encode(const dt_spm *m, const char *text, size_t len, int32_t **ids, size_t *n,
                  dt_error *err);
/* ids (each in [0, vocab)) -> *out (malloc'd, NUL-terminated), *len bytes. */
int dt_spm_decode(const dt_spm *m, const int32_t *ids, size_t n, char **out, size_t *len,
                  dt_error *err);

/* Number of pieces (ids are 0 .. size-1). */
int32_t dt_spm_size(const dt_spm *m);
/* A piece's text as the model stores it ("▁the", "<0x0A>", "<s>"); *len its bytes. */
const char *dt_spm_piece(const dt_spm *m, int32_t id, size_t *len);
/* The id of a piece by its exact text, -1 when the model has no such piece. */
int32_t dt_spm_piece_id(const dt_spm *m, const char *piece);
/* The model's </s> and <s> ids (-1 when the model has none). */
int32_t dt_spm_eos_id(const dt_spm *m);
int32_t dt_spm_bos_id(const dt_spm *m);

#ifdef __cplusplus
}
#endif

#endif
