/* dt_prepare.h — `dtrun prepare`: text files, folders and JSONL (pretraining text, SFT
 * chats) into token shards v2 (dt_shard.h) with a train/validation split
 * (docs/data.md "dtrun prepare").
 *
 * Two passes over the inputs, never the whole corpus in memory:
 *   1. index: walk the inputs (folders recursively, names sorted), check every document
 *      (UTF-8, JSON, the line's shape) and note where it is: 32 bytes per document;
 *   2. shuffle the documents with a permutation that depends only on the seed, give the
 *      first ceil(val_fraction x N) of them to validation (Hugging Face datasets'
 *      train_test_split rounding), then read, tokenize (OpenMP threads over the
 *      documents of a batch) and write them in that order.
 * The output does not depend on the number of threads. Every document is preceded by
 * the tokenizer's end-of-text token (llm.c dev/data/fineweb.py: "the special
 * <|endoftext|> token delimits all documents"). Shards are filled to shard_tokens
 * exactly (a document may continue in the next shard, as in llm.c).
 *
 * Output directory (the policy of dt_rundir.h, for prepare's own files): out must be
 * absent, empty, or hold only what a previous prepare wrote (prepare.json, train/,
 * val/, .prepare-tmp/), which is then replaced. Everything is written under
 * out/.prepare-tmp/ first (each file to a temporary name, fsynced, renamed) and moved
 * into place at the end, prepare.json last: a directory without prepare.json is an
 * unfinished prepare, and an interrupted run never leaves a shard under train/ or val/.
 * Errors through dt_error, one line naming the file (and line) and what is wrong;
 * nothing is printed (progress goes to the caller's callback). */
#ifndef DT_PREPARE_H
#define DT_PREPARE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_image.h"
#include "dt_shard.h"

/* llm.c dev/data/fineweb.py: shard_size = 10**8 tokens per shard */
#define DT_PREP_SHARD_TOKENS 100000000LL
/* nanoGPT data/openwebtext/prepare.py: train_test_split(test_size=0.0005) */
#define DT_PREP_VAL_FRACTION 0.0005
/* val_fraction's default: DT_PREP_VAL_FRACTION, or no validation for a single document */
#define DT_PREP_VAL_AUTO (-1.0)
#define DT_PREP_SEED 1337ULL   /* nanoGPT's default seed (train.py, sample.py) */
#define DT_PREP_MANIFEST "prepare.json"
#define DT_PREP_STAGING ".prepare-tmp"
#define DT_PREP_TRAIN_DIR "train"
#define DT_PREP_VAL_DIR "val"
/* LLaVA-1.5 (llava-hf/llava-1.5-7b-hf config.json): CLIP ViT-L/14 at 336 px, so
 * (336 / 14)^2 = 576 patch features per image (vision_feature_select_strategy "default"
 * drops the class token), each one <image> placeholder token */
#define DT_PREP_IMAGE_SIZE 336
#define DT_PREP_IMAGE_TOKENS 576
#define DT_PREP_IMAGE_TOKEN "<image>"
#define DT_PREP_IMAGE_ID_AUTO (-1)   /* the tokenizer's <image> token */

typedef enum {
    DT_PREP_TEXT = 0,    /* text files: each file is one document */
    DT_PREP_JSONL = 1,   /* JSON Lines, {"text": "..."} per line: pretraining */
    DT_PREP_CHAT = 2,    /* JSON Lines of {"messages": [{"role", "content"}...]} or
                            {"instruction", "input", "output"}: SFT with a loss mask */
    DT_PREP_LLAVA = 3,   /* LLaVA's JSON (a list of {"id", "image", "conversations": [{"from":
                            "human"|"gpt", "value"}...]}, llava_v1_5_mix665k.json): SFT with
                            a loss mask, each <image> expanded to image_tokens placeholders,
                            the images preprocessed into pixel shards (dt_pixshard.h) */
    DT_PREP_PAIRS = 4,   /* JSON Lines of preference pairs (dt_pairdoc.h: TRL's and LLaMA-Factory's
                            fields, plain or chat) into pair shards (dt_pairshard.h) */
    DT_PREP_PROMPTS = 5  /* JSON Lines of prompt records for grpo ({"prompt": str | [msg...],
                            "answer": ...?}, dt_pairdoc.h) into prompt shards (dt_pairshard.h) */
} dt_prep_format;

/* what a record whose image cannot be used does (--on-bad-image) */
typedef enum { DT_BAD_IMAGE_STOP = 0, DT_BAD_IMAGE_SKIP = 1 } dt_bad_image;

typedef enum {
    DT_CHAT_CHATML = 0,  /* Qwen2's: <|im_start|>role\ncontent<|im_end|>\n */
    DT_CHAT_LLAMA3 = 1   /* Llama-3's: <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n
                            content (trimmed)<|eot_id|> */
} dt_chat_template;

typedef struct dt_prep_progress {
    int phase;               /* 0: indexing the inputs, 1: tokenizing */
    uint64_t bytes_done;     /* input bytes indexed (phase 0) or tokenized (phase 1) */
    uint64_t bytes_total;    /* phase 1: all input bytes of the documents; phase 0: 0 */
    uint64_t tokens;         /* written so far */
    uint64_t docs;           /* indexed (phase 0) or written (phase 1) */
    double seconds;          /* since the phase began */
} dt_prep_progress;

typedef struct dt_prep_opts {
    const char *tokenizer;           /* tokenizer.json or tokenizer.model */
    const char *out;                 /* output directory */
    const char *const *inputs;       /* files and folders */
    int n_inputs;
    dt_prep_format format;
    dt_chat_template chat;           /* DT_PREP_CHAT only */
    double val_fraction;             /* [0, 1), or DT_PREP_VAL_AUTO */
    uint64_t seed;
    int64_t shard_tokens;            /* >= 1 */
    int threads;                     /* 0: OpenMP's default (OMP_NUM_THREADS, else all cores) */
    /* DT_PREP_LLAVA only */
    const char *image_folder;        /* the records' "image" paths are relative to it */
    dt_clip_opts clip;               /* CLIPImageProcessor's settings (336 px by default) */
    int64_t image_token_id;          /* DT_PREP_IMAGE_ID_AUTO, or an id (may be >= the tokenizer's vocab) */
    int image_tokens;                /* placeholders per image (DT_PREP_IMAGE_TOKENS) */
    dt_bad_image on_bad_image;
    uint64_t max_image_pixels;       /* DT_IMAGE_MAX_PIXELS */
    int64_t max_len;                 /* DT_PREP_PAIRS: the sequence length a pair must fit (--seq; a
                                      * prompt of max_len tokens or more is refused, a longer side cut to
                                      * it as TRL's truncation does); 0: no limit */
    volatile sig_atomic_t *stop;     /* set (by a signal handler) to stop at the next batch; may be NULL */
    void (*progress)(const dt_prep_progress *p, void *arg);   /* after each batch; may be NULL */
    void *progress_arg;
} dt_prep_opts;

/* What a run wrote (also in prepare.json). Index 0 train, 1 validation (dt_split). */
typedef struct dt_prep_result {
    uint64_t docs[2], tokens[2], trained[2];   /* trained: tokens whose mask bit is 1 */
    int shards[2];
    uint64_t files, skipped_files;   /* read; skipped in folders (binary, symlinks) */
    uint64_t skipped_docs;           /* empty documents, chats without an assistant turn */
    uint64_t images[2];              /* llava: images written per split */
    uint64_t bad_images;             /* llava, --on-bad-image skip: records left out */
    char first_bad_image[DT_ERROR_MSG_MAX];   /* the first of them, as the stop policy would say it */
    uint64_t bytes;                  /* input bytes of the documents */
    double val_fraction;             /* the one used (DT_PREP_VAL_AUTO resolved) */
    uint32_t token_bytes;
    int64_t vocab;
    char fingerprint[2 * DT_SHARD2_FINGERPRINT_BYTES + 1];   /* hex */
    double seconds;
} dt_prep_result;

/* opts with the defaults above (format text, chatml, no callbacks; llava: CLIP at 336 px,
 * 576 image tokens, the tokenizer's <image>, stop on a bad image). */
void dt_prep_defaults(dt_prep_opts *o);
/* llava: CLIPImageProcessor's settings from a Hugging Face preprocessor_config.json (size,
 * crop_size, image_mean, image_std, rescale_factor; CLIPImageProcessor type, bicubic, every
 * do_* switch on, else DT_EINVAL naming the key). clip->pad_square is kept. */
int dt_prep_read_processor(const char *path, dt_clip_opts *clip, dt_error *err);
/* llava: the image token id (image_token_index) and the placeholders per image
 * ((image_size / patch_size)^2, + 1 for vision_feature_select_strategy "full") from a
 * LLaVA config.json. */
int dt_prep_read_llava_config(const char *path, int64_t *image_token_id, int *image_tokens, dt_error *err);

/* Runs the whole preparation. DT_EINVAL: bad input (options, an input file, the output
 * directory, the tokenizer); DT_EIO: a read or write failed; DT_ERUNTIME: stopped through
 * opts->stop. On any failure the output directory is as it was before (a previous
 * prepare's output stays whole), except for out/.prepare-tmp/ when the process itself
 * is killed. */
int dt_prepare(const dt_prep_opts *o, dt_prep_result *res, dt_error *err);
/* DT_PREP_PAIRS and DT_PREP_PROMPTS (not dt_prepare's; prompts: dt_promptdoc_encode, prompt
 * shards, "input_format": "prompts", trained 0): every input JSONL file's records tokenized as TRL does
 * (dt_pairdoc_encode), shuffled by the seed, split, written as pair shards train/ and val/
 * (dt_pairshard.h) and prepare.json ("input_format": "pairs"). The first bad record stops it
 * with one line naming PATH:LINE; nothing is written then. res: docs = pairs, tokens = both
 * sides', trained = completion tokens. */
int dt_prepare_pairs(const dt_prep_opts *o, dt_prep_result *res, dt_error *err);

/* Staging shared by the formats (prepare.c): the output directory checked (only a previous
 * prepare's files), created (*created: it was absent), out/.prepare-tmp made empty (its path
 * in stage, n bytes); commit moves stage's train/ and val/ (where shards[s] > 0) and its
 * prepare.json into out, replacing a previous output; abort removes the stage (and out when
 * created). dt_prep_shard_name: a shard's path in its split ("train/train-000000.bin"). */
int dt_prep_stage_open(const char *out, char *stage, size_t n, int *created, dt_error *err);
int dt_prep_stage_commit(const char *out, const char *stage, const int shards[2], dt_error *err);
void dt_prep_stage_abort(const char *out, const char *stage, int created);
void dt_prep_shard_name(int split, int index, char *out, size_t n);
/* prepare.json's entry of split s: count_key (documents, pairs) = r->docs[s], tokens,
 * trained_tokens and the shards' names. */
struct cJSON;
struct cJSON *dt_prep_manifest_split(const dt_prep_result *r, int s, const char *count_key);
/* Writes root (freed here) as path atomically. */
int dt_prep_manifest_write(struct cJSON *root, const char *path, dt_error *err);
/* The order and split of N records: val_fraction (DT_PREP_VAL_AUTO: DT_PREP_VAL_FRACTION, none
 * for one record) rounded up as datasets' train_test_split, *n_val the first of the order
 * (*perm, malloc'd: Fisher-Yates from splitmix64 seeded with seed alone); *used the fraction.
 * DT_EINVAL when it leaves no training record (what names them). */
int dt_prep_split(uint64_t N, double val_fraction, uint64_t seed, const char *what, uint64_t **perm,
                  uint64_t *n_val, double *used, dt_error *err);

#endif
