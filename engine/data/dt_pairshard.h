/* dt_pairshard.h — preference-pair shards (docs/data.md "Pair shards"): what `dtrun prepare
 * --format pairs` writes and the rm / dpo objectives read, beside the token shards of
 * dt_shard.h. Each pair is the two sequences TRL's DPOTrainer / RewardTrainer build
 * (dt_pairdoc.h): prompt ‖ chosen and prompt ‖ rejected, whose first prompt_n tokens are the
 * shared prompt; the completion mask of either side is its positions >= prompt_n (TRL's
 * completion_mask), so it is stored as that one length.
 *
 * One file: a 1024-byte header, an index of 24 bytes per pair, then the tokens. All integers
 * little-endian.
 *   offset  bytes  field
 *        0      4  magic "DTPS"
 *        4      4  version: 1
 *        8      4  header bytes: 1024
 *       12      4  flags: 0 preference pairs; 1 (DT_PAIRSHARD_PROMPTS) prompt records for grpo
 *       16      4  split: 0 train, 1 validation
 *       20      4  shard index within its split, from 0
 *       24      8  vocab size of the tokenizer (every token is below it)
 *       32      8  pair count
 *       40      8  token count (both sides of every pair)
 *       48      8  prepare id (one random value per prepare run)
 *       56      4  pad id (the tokenizer's end-of-text, TRL's pad_token = eos_token)
 *       60      4  end-of-text id
 *       64     32  tokenizer fingerprint (dt_tok_fingerprint)
 *       96      4  CRC-32C of the payload (index, then tokens)
 *      100      4  CRC-32C of header bytes [0, 100)
 *      104    920  zero
 *     1024         index, per pair: u64 input line (1-based), u32 input file (prepare.json
 *                  "inputs"), u32 prompt_n, u32 chosen tokens, u32 rejected tokens
 *                  tokens: u32, per pair its chosen sequence then its rejected one
 * A prompt shard (flags 1, `dtrun prepare --format prompts`) holds each prompt record as a pair
 * whose "chosen" side is prompt ‖ has-answer (token value 0 / 1) ‖ the answer's tokens (the
 * same tokenizer; decoded back to its text), and whose "rejected" side is prompt ‖ end-of-text
 * (unused): the same CRCs and checks.
 * The file is exactly 1024 + 24 x pairs + 4 x tokens bytes; written atomically (NAME.tmp,
 * fsync, rename, fsync of the directory). */
#ifndef DT_PAIRSHARD_H
#define DT_PAIRSHARD_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_pairdoc.h"
#include "dt_shard.h"

#define DT_PAIRSHARD_MAGIC "DTPS"
#define DT_PAIRSHARD_VERSION 1
#define DT_PAIRSHARD_INDEX_BYTES 24   /* per pair */
#define DT_PAIRSHARD_PROMPTS 1u       /* header flags: prompt records (grpo) */

typedef struct dt_pairshard_header {
    uint32_t split, shard_index;
    uint32_t flags;           /* 0 pairs, DT_PAIRSHARD_PROMPTS */
    uint64_t vocab;
    uint64_t pairs, tokens;   /* filled by the writer */
    uint64_t prepare_id;
    uint32_t pad_id, eot_id;
    unsigned char fingerprint[DT_SHARD2_FINGERPRINT_BYTES];
} dt_pairshard_header;

/* Where a pair came from, for messages. */
typedef struct dt_pair_src {
    uint64_t line;
    uint32_t input;
} dt_pair_src;

/* Writes n pairs (src: their inputs) as one shard at path, atomically. Every token must be
 * below h->vocab, every side non-empty and longer than prompt_n. */
int dt_pairshard_write(const char *path, const dt_pairshard_header *h, const dt_pair *pairs, const dt_pair_src *src,
                       size_t n, dt_error *err);

/* ---- reading: every shard of a split in memory, checked ---- */
typedef struct dt_pairset dt_pairset;

typedef struct dt_pairset_opts {
    int64_t vocab;                        /* the model's: every token must be below it */
    const unsigned char *fingerprint;     /* the tokenizer the shards must carry, or NULL */
    const char *fingerprint_hint;         /* appended to a mismatch's message */
    int prompts;                          /* 1: prompt shards wanted (grpo), 0: pairs */
} dt_pairset_opts;

/* path: a pair shard, or a directory whose *.bin files are (sorted by name). Errors name
 * the file: not a pair shard (a hint to run dtrun prepare --format pairs), truncated, CRC,
 * a token or length out of range, shards of different prepare runs or tokenizers. */
int dt_pairset_open(const char *path, const dt_pairset_opts *o, dt_pairset **out, dt_error *err);
void dt_pairset_free(dt_pairset *s);
int64_t dt_pairset_count(const dt_pairset *s);
int32_t dt_pairset_pad_id(const dt_pairset *s);
/* The shards' tokenizer fingerprint (SHA-256 bytes). */
const unsigned char *dt_pairset_fingerprint(const dt_pairset *s);

/* Prompt record i of a prompt set: its ids and its answer's ids (viewing the shard; *has_answer
 * 0 when the record has none) and where it came from ("input #F line L (PATH, record J)") into
 * where (wcap bytes). */
void dt_pairset_prompt(const dt_pairset *s, int64_t i, const int32_t **ids, int64_t *n, const int32_t **answer,
                       int64_t *answer_n, int *has_answer, char *where, size_t wcap);

/* Every pair's prompt shorter than T: DT_EINVAL naming the first that is not (as below). */
int dt_pairset_check_len(const dt_pairset *s, int64_t T, dt_error *err);
/* A batch of the pairs idx[0 .. n) as dt_pair_batch lays it out ((2n, T) ids and shifted
 * targets: chosen rows first), each side cut to its first T tokens (TRL's max_length,
 * truncation_mode "keep_start"). A pair whose prompt alone is T tokens or more is refused
 * (DT_EINVAL naming its input line and shard: nothing of it would be trained). *ntrunc: the
 * sides cut (NULL to skip). */
int dt_pairset_batch(const dt_pairset *s, const int64_t *idx, int64_t n, int64_t T, int32_t *ids, int32_t *targets,
                     int64_t *ntrunc, dt_error *err);

#endif
