/* dt_shard.h — dtrun token shards, version 2 (docs/data.md "Token shards v2"): what
 * `dtrun prepare` writes and engine/data/data.c reads beside llm.c's uint16 shards.
 *
 * One file: a 1024-byte header (the size of llm.c's, 256 int32), the tokens, then the
 * loss mask when the header says there is one. All integers little-endian.
 *
 *   offset  bytes  field
 *        0      4  magic "DTSH"
 *        4      4  version: 2
 *        8      4  header bytes: 1024
 *       12      4  token bytes: 2 (uint16, vocab <= 65536) or 4 (uint32)
 *       16      4  flags: bit 0 = a loss mask follows the tokens; other bits 0
 *       20      4  split: 0 train, 1 validation
 *       24      8  vocab size of the tokenizer (every token is below it)
 *       32      8  token count
 *       40      8  documents that start in this shard (end-of-text tokens written)
 *       48      8  prepare id: one random value shared by every shard of one prepare run
 *       56      4  shard index within its split, from 0
 *       60      4  end-of-text id (0xFFFFFFFF: none)
 *       64     32  tokenizer fingerprint: SHA-256 of its vocabulary (dt_tok_fingerprint)
 *       96      4  CRC-32C of the payload (tokens, then mask bytes)
 *      100      4  CRC-32C of header bytes [0, 100)
 *      104    920  zero
 *     1024         tokens: count x token bytes
 *                  mask: ceil(count / 8) bytes; bit (i % 8) of byte i / 8 is 1 when
 *                  token i counts in the loss as a target (SFT: assistant tokens)
 * The file is exactly 1024 + count x token bytes (+ ceil(count / 8)) bytes.
 * Writers write to NAME.tmp in the same directory, fsync, rename, fsync the directory:
 * a shard under its own name is always complete. Sizes are bytes unless named *_count. */
#ifndef DT_SHARD_H
#define DT_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"

#define DT_SHARD2_MAGIC "DTSH"
#define DT_SHARD2_MAGIC_BYTES 4
#define DT_SHARD2_VERSION 2
#define DT_SHARD2_HEADER_BYTES 1024
#define DT_SHARD2_CRC_SPAN 100          /* the header CRC covers bytes [0, 100) */
#define DT_SHARD2_FINGERPRINT_BYTES 32  /* SHA-256 */
#define DT_SHARD2_FLAG_MASK 1u
#define DT_SHARD2_NO_TOKEN 0xFFFFFFFFu  /* eot_id when the tokenizer has none */
/* uint16 tokens hold ids below 2^16 (llm.c's GPT-2 shards); larger vocabularies
 * (Llama-3 128256, Qwen2 151646) take uint32. */
#define DT_SHARD2_U16_VOCAB 65536

typedef enum { DT_SPLIT_TRAIN = 0, DT_SPLIT_VAL = 1 } dt_split;

typedef struct dt_shard_header {
    uint32_t token_bytes;   /* 2 or 4 */
    uint32_t flags;         /* DT_SHARD2_FLAG_MASK */
    uint32_t split;         /* dt_split */
    uint64_t vocab;
    uint64_t count;         /* tokens */
    uint64_t docs;
    uint64_t prepare_id;
    uint32_t shard_index;
    uint32_t eot_id;
    unsigned char fingerprint[DT_SHARD2_FINGERPRINT_BYTES];
    uint32_t payload_crc;
} dt_shard_header;

/* Bytes the file must have for h (header, tokens, mask). */
uint64_t dt_shard2_file_bytes(const dt_shard_header *h);
/* Token width for a vocabulary: 2 when vocab <= DT_SHARD2_U16_VOCAB, else 4. */
uint32_t dt_shard2_token_bytes(uint64_t vocab);
/* 1 when the first bytes are a v2 shard's magic (the caller holds at least 4 bytes). */
int dt_shard2_is(const void *bytes, size_t len);

/* Parses and checks the header of a file of file_bytes whose first bytes are at bytes
 * (at least DT_SHARD2_HEADER_BYTES of them, or fewer for a truncated file): magic,
 * version, header size, header CRC, token width against the vocabulary, no unknown flag,
 * zero padding, and the file size the counts give. Errors name path and what is wrong
 * ("...: truncated: the header says N tokens (B bytes) but the file has F bytes"). The
 * payload CRC is dt_shard2_check_payload's (it reads every byte). */
int dt_shard2_parse(const void *bytes, uint64_t file_bytes, const char *path, dt_shard_header *h,
                    dt_error *err);
/* CRC-32C of the payload (tokens and mask) against the header's. */
int dt_shard2_check_payload(const void *file, const dt_shard_header *h, const char *path, dt_error *err);
/* Mask bit of token i (1 when the file has no mask). */
static inline int dt_shard2_mask_bit(const uint8_t *mask, uint64_t i) {
    return mask ? (mask[i >> 3] >> (i & 7)) & 1 : 1;
}

/* ---- writer: tokens streamed to PATH.tmp, the mask kept in memory (count / 8 bytes),
 * header and CRCs written at close, then fsync + rename + fsync of the directory. ---- */
typedef struct dt_shard_writer dt_shard_writer;

/* h gives everything but count, docs and payload_crc (the writer counts those). */
int dt_shard_writer_open(const char *path, const dt_shard_header *h, dt_shard_writer **out, dt_error *err);
/* Appends n tokens; mask[i] (0 or 1) per token when the shard has a mask (NULL: all 1).
 * docs: documents starting in these tokens. Every token must be below the header's vocab. */
int dt_shard_writer_put(dt_shard_writer *w, const int32_t *ids, const uint8_t *mask, size_t n, uint64_t docs,
                        dt_error *err);
uint64_t dt_shard_writer_count(const dt_shard_writer *w);
/* Completes the file under its name; frees w (also on failure, when PATH.tmp is removed). */
int dt_shard_writer_close(dt_shard_writer *w, dt_error *err);
/* Removes PATH.tmp and frees w. */
void dt_shard_writer_abort(dt_shard_writer *w);

/* A whole shard in one call (tests, tools): dt_shard_writer_open + put + close. */
int dt_shard2_write(const char *path, const dt_shard_header *h, const int32_t *ids, const uint8_t *mask,
                    size_t n, dt_error *err);

#endif
