/* dt_data.h — training data: a directory (or file) of text read with a byte-level
 * tokenizer (token = byte value, vocab 256), or token shards: llm.c's and dtrun's v2.
 *
 * llm.c shard format (llm.c dev/data/data_common.py, write_datafile): a header of 256
 * little-endian int32 ([0] magic 20240520, [1] version 1, [2] token count), then
 * that many little-endian uint16 tokens; the file size must be exactly
 * 1024 + 2 * count bytes.
 * dtrun's v2 shards (dt_shard.h, docs/data.md; `dtrun prepare` writes them): uint16 or
 * uint32 tokens, the tokenizer's vocab size and fingerprint, CRC-32C sums, an optional
 * loss mask. data.format "llmc" reads both kinds, told apart by their magic.
 *
 * Samples are non-overlapping windows of T+1 tokens (inputs = first T, targets =
 * last T) cut from each source (the concatenated text, or one shard); a source's
 * tail shorter than a window is dropped. Without a separate valid path, the last
 * valid_fraction of the windows (in file order, before shuffling) are the
 * validation set. The training windows are shuffled once per epoch with a
 * permutation derived only from (seed, epoch), so the loader's whole state is
 * (epoch, cursor) and a resumed run reads exactly what a straight run reads.
 * Counts are tokens or windows, never bytes, unless named *_bytes. */
#ifndef DT_DATA_H
#define DT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_shard.h"

#define DT_SHARD_MAGIC 20240520
#define DT_SHARD_VERSION 1
#define DT_SHARD_HEADER_INTS 256
#define DT_BYTE_VOCAB 256

typedef struct dt_corpus dt_corpus;     /* the tokens of one path (train or valid) */
typedef struct dt_loader dt_loader;     /* windows of a corpus, batched */

/* format: "text" (byte tokenizer) or "llmc" (shards). path: a file, or a
 * directory whose regular files (sorted by name; text: files holding a NUL byte,
 * e.g. fortune's .dat indexes, and symlinks are skipped; llmc: *.bin) are read.
 * vocab: the model's vocabulary; every token must be < vocab. Errors name the
 * file and what is wrong (truncated shard, wrong magic, token out of range). */
int dt_corpus_open(const char *path, const char *format, int64_t vocab, dt_corpus **out,
                   dt_error *err);

/* What a caller knows about the data it expects (dt_corpus_open_opts). */
typedef struct dt_corpus_opts {
    int64_t vocab;                       /* the model's vocabulary: every token < vocab; a v2
                                            shard whose tokenizer's vocab size exceeds it is
                                            refused (one line naming both) */
    const unsigned char *fingerprint;    /* DT_SHARD2_FINGERPRINT_BYTES: the tokenizer the
                                            shards must have been prepared with (one line
                                            naming both fingerprints when not), or NULL: not
                                            checked, though all v2 shards of one path must
                                            agree. An llm.c shard has none: refused when set,
                                            unless llmc_unchecked */
    const char *fingerprint_of;          /* whose fingerprint it is, named in the message
                                            ("the model's tokenizer DIR/tokenizer.json");
                                            NULL: "the expected" */
    const char *fingerprint_hint;        /* what to do, ending the message; NULL: prepare
                                            the data with the right tokenizer */
    int llmc_unchecked;                  /* 1: llm.c shards (no fingerprint) are read
                                            unchecked; v2 shards are still checked */
} dt_corpus_opts;

/* dt_corpus_open with the checks of o. v2 shards are verified on open (header CRC,
 * payload CRC-32C, size, every token below the header's vocab). */
int dt_corpus_open_opts(const char *path, const char *format, const dt_corpus_opts *o, dt_corpus **out,
                        dt_error *err);
void dt_corpus_free(dt_corpus *c);
int64_t dt_corpus_tokens(const dt_corpus *c);
int dt_corpus_files(const dt_corpus *c);
/* Subfolders of a data directory: not read (only the directory's own files are). */
int dt_corpus_subdirs(const dt_corpus *c);
/* 1 when some v2 shard of c has a loss mask (SFT data): use dt_loader_next_masked. */
int dt_corpus_has_mask(const dt_corpus *c);
/* The tokenizer fingerprint c's v2 shards carry: 1 and out filled, 0 when c has none
 * (text, llm.c shards). */
int dt_corpus_fingerprint(const dt_corpus *c, unsigned char out[DT_SHARD2_FINGERPRINT_BYTES]);
/* Hex digits of a fingerprint shown in messages: enough to tell two apart. */
#define DT_FINGERPRINT_SHOWN_HEX 16
/* The 2 * DT_SHARD2_FINGERPRINT_BYTES hex digits of a fingerprint (a plan's, a
 * checkpoint's) into out: DT_OK, or DT_EINVAL when hex is not that many hex digits. */
int dt_fingerprint_from_hex(const char *hex, unsigned char out[DT_SHARD2_FINGERPRINT_BYTES], dt_error *err);
/* The largest tokenizer vocab size a v2 shard of c names; 0 without v2 shards. */
int64_t dt_corpus_vocab(const dt_corpus *c);

typedef struct dt_loader_pos {
    int64_t epoch;     /* completed passes over the windows */
    int64_t cursor;    /* windows consumed in this epoch (all ranks together) */
} dt_loader_pos;

/* Windows [first, first + count) of c's window list (seq_len + 1 tokens each);
 * count < 0 means "to the end". shuffle: permute per epoch from seed.
 * rank / world: each global batch is world * B windows; rank r takes the r-th B.
 * Fails when the range holds fewer windows than one global batch. */
int dt_loader_create(const dt_corpus *c, int64_t seq_len, int64_t B, int64_t first,
                     int64_t count, int shuffle, uint64_t seed, int rank, int world,
                     const char *what, dt_loader **out, dt_error *err);
void dt_loader_free(dt_loader *l);

/* Total windows in c for seq_len. */
int64_t dt_corpus_windows(const dt_corpus *c, int64_t seq_len);

/* Splits c's windows into train / valid: valid = the last
 * max(1, round(valid_fraction * n)) windows (0 when valid_fraction is 0). */
void dt_split_windows(int64_t n, double valid_fraction, int64_t *train_count,
                      int64_t *valid_count);

/* Fills inputs and targets [B, T] with the next batch, moving to a new epoch
 * (and a new permutation) when the windows run out. */
void dt_loader_next(dt_loader *l, int32_t *inputs, int32_t *targets);
/* The same, and mask [B, T] (may be NULL): 1 when targets[b, t] counts in the loss, 0
 * when it does not (a v2 shard's loss mask at the target's position: SFT trains on the
 * assistant's tokens only); 1 everywhere for text, llm.c shards and unmasked v2 shards.
 * Windows and their order are dt_loader_next's: the two may be mixed. */
void dt_loader_next_masked(dt_loader *l, int32_t *inputs, int32_t *targets, uint8_t *mask);
/* Back to epoch 0, cursor 0 (validation passes start here). */
void dt_loader_reset(dt_loader *l);
dt_loader_pos dt_loader_get_pos(const dt_loader *l);
int dt_loader_set_pos(dt_loader *l, dt_loader_pos pos, dt_error *err);
int64_t dt_loader_windows(const dt_loader *l);

/* Writes an llm.c shard (used by tests and tools). Atomic (temp + rename). */
int dt_shard_write(const char *path, const uint16_t *tokens, int64_t n, dt_error *err);

/* 64-bit deterministic generator used for shuffling (splitmix64). */
uint64_t dt_rng_next(uint64_t *state);
/* The loader's order of n items in epoch `epoch`: Fisher-Yates from splitmix64 keyed by
 * (seed, epoch), or the identity without shuffle (the pair loader of the rm / dpo
 * objectives walks its pairs in the same order a dt_loader walks windows). */
void dt_epoch_perm(int64_t *perm, int64_t n, int shuffle, uint64_t seed, int64_t epoch);

#endif
