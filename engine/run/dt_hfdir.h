/* dt_hfdir.h — Hugging Face model directories, in and out: config.json for
 * either family (GPT2Config; LlamaConfig / Qwen2Config / Qwen3Config), and
 * weights from model.safetensors or from shards listed by
 * model.safetensors.index.json ("weight_map": tensor name -> shard file), as
 * transformers' save_pretrained writes them (docs/dtrun.md "Hugging Face models"). */
#ifndef DT_HFDIR_H
#define DT_HFDIR_H

#include "dt_error.h"
#include "dt_lm.h"
#include "dt_model.h"

/* The config.json text for m (malloc'd; NULL when out of memory). The llama
 * family is written as the model_type its options are: q/k norm -> qwen3,
 * q/k/v bias -> qwen2, else llama. */
char *dt_hf_config_text(const dt_model *m);

/* 1 when path is a directory (a Hugging Face model directory to read). */
int dt_hf_is_dir(const char *path);

/* Checks dir/config.json describes m (the same shape, the same family options):
 * DT_EINVAL naming both shapes otherwise. `what` says what dir is, for the message. */
int dt_hf_check_config(const char *dir, const dt_model *m, const char *what, dt_error *err);

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
