/* dt_hfdir.h — Hugging Face model directories, in and out: config.json for
 * either family (GPT2Config; LlamaConfig / Qwen2Config / Qwen3Config), and
 * weights from model.safetensors or from shards listed by
 * model.safetensors.index.json ("weight_map": tensor name -> shard file), as
 * transformers' save_pretrained writes them (docs/dtrun.md "Hugging Face models"). */
#ifndef DT_HFDIR_H
#define DT_HFDIR_H

#include <stddef.h>

#include "dt_error.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_precision.h"
#include "dt_tokenizer.h"

/* The config.json text for m (malloc'd; NULL when out of memory). The llama
 * family is written as the model_type its options are: q/k norm -> qwen3,
 * q/k/v bias -> qwen2, else llama. */
char *dt_hf_config_text(const dt_model *m);

/* 1 when path is a directory (a Hugging Face model directory to read). */
int dt_hf_is_dir(const char *path);

/* Checks dir/config.json describes m (the same shape, the same family options):
 * DT_EINVAL naming both shapes otherwise. `what` says what dir is, for the message. */
int dt_hf_check_config(const char *dir, const dt_model *m, const char *what, dt_error *err);

/* The tokenizer a Hugging Face model directory ships: dir/tokenizer.json, else
 * dir/tokenizer.model (save_pretrained writes them beside the weights): the first that
 * dt_tok_load reads (Llama-2 ships a byte-fallback tokenizer.json it refuses, and the
 * tokenizer.model it reads). *found = 1, fp its fingerprint (dt_tok_fingerprint, the one
 * `dtrun prepare` writes into shard headers) and path (n bytes) the file; *found = 0 when
 * there is none, DT_OK, or when none of those there can be read: the first one's error
 * (DT_EINVAL naming the file and why). */
int dt_hf_tokenizer_fingerprint(const char *dir, unsigned char fp[DT_TOK_FINGERPRINT_BYTES], char *path, size_t n,
                                int *found, dt_error *err);

/* A source of g's parameters read by flat element range, so a ZeRO-3 rank reads
 * only the elements of its own shards (dt_zero_load_params) and a full load goes
 * through no second copy. Open checks every tensor of g once: present exactly
 * once (a directory: in one of the index's shards), F32 / BF16 / F16, the
 * model's shape (each failure DT_EINVAL naming the file and tensor); files are
 * then memory-mapped one at a time as reads need them, and the pages a read
 * touched are released after each dt_io_chunk_bytes() of it (dt_map_release), so
 * a read keeps at most that much of a file resident. */
typedef struct dt_hf_src dt_hf_src;
/* path: one .safetensors file holding every tensor of g. */
int dt_hf_src_open_file(const dt_lm *g, const char *path, dt_hf_src **out, dt_error *err);
/* dir: model.safetensors, else the shards of model.safetensors.index.json. */
int dt_hf_src_open_dir(const dt_lm *g, const char *dir, dt_hf_src **out, dt_error *err);
/* Flat elements [lo, lo + n) of g's layout, converted to pdt, into HOST memory
 * dst[0 .. n). */
int dt_hf_src_read(dt_hf_src *s, size_t lo, size_t n, dt_dtype pdt, void *dst, dt_error *err);
void dt_hf_src_close(dt_hf_src *s);
/* A source of g's BASE set (its frozen tensors, dt_lm_base_tensor; dt_hf_src_read's lo, n
 * then count elements of that set's flat buffer): path a directory as dt_hf_src_open_dir
 * reads, else one .safetensors file. The same checks. */
int dt_hf_src_open_base(const dt_lm *g, const char *path, dt_hf_src **out, dt_error *err);
/* A source of g's QUANT set (QLoRA's quantised linears, dt_lm_quant_tensor, by their float
 * values; lo, n count elements of that set's fp32 view), as dt_hf_src_open_base. */
int dt_hf_src_open_quant(const dt_lm *g, const char *path, dt_hf_src **out, dt_error *err);
/* A source of g's trained set, as dt_hf_src_open_dir / _file (path a directory or one file),
 * for a LoRA run started from a base model: the LoRA adapters (DT_TENSOR_ADAPTER) the files
 * lack are drawn from seed by the model's init rule (dt_lm_init_slice: PEFT's init), every
 * other tensor must be there. */
int dt_hf_src_open_seeded(const dt_lm *g, const char *path, uint64_t seed, dt_hf_src **out, dt_error *err);

/* Drops the pages of [p, p + len) of a read-only file mapping from this
 * process (madvise MADV_DONTNEED: they stay in the page cache and fault back
 * in when read again), so reading a mapped file does not grow the resident set
 * by the file's size. */
void dt_map_release(const void *p, size_t len);

/* The distinct shard files of a safetensors index's weight_map (ipath: the index.json), in
 * first-seen order: *names (free it) holds *n plain file names inside the index's directory;
 * DT_EINVAL naming the index when it has no weight_map or a name is not such a file. */
int dt_hf_index_shards(const char *ipath, char (**names)[256], int *n, dt_error *err);
/* Loads every tensor of g from dir: model.safetensors, or the shards of
 * model.safetensors.index.json one file at a time (each memory-mapped, never
 * all at once), into host memory params of g's flat layout in dtype pdt.
 * F32 / BF16 / F16 tensors; names dt_lm_hf_prefix + name (or the bare name);
 * a missing tensor, a wrong shape, a shard that is not listed or not a regular
 * file is DT_EINVAL naming it. Tensors the model does not have are ignored
 * (e.g. GPT-2's attn.bias buffers, rotary inv_freq). */
int dt_hf_load_dir(const dt_lm *g, dt_dtype pdt, const char *dir, void *params, dt_error *err);
/* The same from one .safetensors file: every tensor of g must be in it. */
int dt_hf_load_file(const dt_lm *g, dt_dtype pdt, const char *path, void *params, dt_error *err);

#endif
