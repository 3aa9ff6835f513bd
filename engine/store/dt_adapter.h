/* dt_adapter.h — LoRA adapters in Hugging Face PEFT's format (peft 0.21: utils/save_and_load.py,
 * tuners/lora/config.py, config.py; docs/finetune.md "Adapter files"), in and out, and the
 * merge of an adapter into its base model (`dtrun merge`).
 *
 * An adapter directory holds two files, as PeftModel.save_pretrained writes them:
 *   adapter_config.json        LoraConfig.to_dict(): peft_type "LORA", task_type "CAUSAL_LM"
 *                              (or "SEQ_CLS": a reward model, modules_to_save ["classifier",
 *                              "score"] and "base_model.model.score.weight" in the weights),
 *                              r, lora_alpha, lora_dropout, target_modules, use_rslora,
 *                              modules_to_save, fan_in_fan_out (true for GPT-2's Conv1D),
 *                              bias "none", base_model_name_or_path, inference_mode, ...;
 *   adapter_model.safetensors  "base_model.model." + the base's state-dict key:
 *                              <module>.lora_A.weight [r, in], <module>.lora_B.weight [out, r]
 *                              ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
 *                              "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight"), and
 *                              each modules_to_save tensor under its base key
 *                              ("base_model.model.lm_head.weight"); __metadata__ {"format": "pt"}
 *                              plus, when known, "dt_base_fingerprint" (below).
 * Names in this API are the ENGINE's tensor names (dt_lm.h: "model.layers.3.self_attn.q_proj..."
 * for llama, "h.3.attn.c_attn..." for gpt2); the family's Hugging Face prefix ("transformer."
 * for gpt2, "" for llama) goes between "base_model.model." and the name in the file.
 *
 * The base fingerprint: SHA-256 over every tensor of the base model's safetensors (its
 * model.safetensors, or the shards of model.safetensors.index.json), in name order, of the
 * record name, dtype, shape and CRC-32C of the tensor's bytes. It covers the weights' names,
 * shapes, dtypes and values; not config.json, the tokenizer, or how the weights are sharded
 * (re-sharding a base keeps its fingerprint; converting it to another dtype does not).
 * Sizes are elements unless named bytes. */
#ifndef DT_ADAPTER_H
#define DT_ADAPTER_H

#include <stddef.h>
#include <stdint.h>

#include "dt_arch.h"
#include "dt_error.h"
#include "dt_finetune.h"

#define DT_ADAPTER_CONFIG_FILE "adapter_config.json"
#define DT_ADAPTER_WEIGHTS_FILE "adapter_model.safetensors"
#define DT_ADAPTER_BASE_MAX 512
#define DT_ADAPTER_FP_HEX 65   /* 64 hex digits + NUL */

typedef struct dt_adapter_config {
    /* method DT_FT_LORA (or QLORA: written the same way): lora_rank, lora_alpha, lora_dropout,
     * use_rslora, modules_to_save (module names, PEFT's suffix match). Read back: method LORA,
     * lora_target the config's target_modules (a list; a regex string is refused). */
    dt_finetune ft;
    dt_family family;                          /* gpt2: fan_in_fan_out true */
    int seq_cls;                               /* task_type "SEQ_CLS" (a reward model: its score head
                                                * "score.weight" among modules_to_save, as PEFT's
                                                * PeftModelForSequenceClassification saves it); 0
                                                * "CAUSAL_LM" */
    char base_model[DT_ADAPTER_BASE_MAX];      /* base_model_name_or_path; "" writes null */
    char base_fingerprint[DT_ADAPTER_FP_HEX];  /* hex; "" = unknown (nothing written, nothing checked) */
} dt_adapter_config;

/* One tensor to write: fp32 data of ndim = 2, shape as stored (lora_A [r, in], lora_B [out, r],
 * a modules_to_save tensor its base shape, 1 or 2 dims). */
typedef struct dt_adapter_tensor {
    const char *name;          /* engine name, e.g. "model.layers.3.self_attn.q_proj.lora_A.weight" */
    int ndim;
    int64_t shape[2];
    const float *data;         /* host, shape[0] x shape[1] elements */
} dt_adapter_tensor;

/* Writes dir/adapter_config.json and dir/adapter_model.safetensors. dir must not exist or be
 * an empty directory: both files go into a new temporary directory beside it (fsync'd), which
 * is then renamed onto dir, so dir appears whole or not at all; on failure nothing is left.
 * Every tensor must be a lora_A / lora_B of a linear of cfg->family (pairs complete, rank
 * cfg->ft.lora_rank, A's and B's shapes agreeing) or a module of cfg->ft.modules_to_save:
 * DT_EINVAL naming the tensor otherwise. target_modules is written as the list of adapted
 * module paths (what PEFT writes for "all-linear"), so PeftModel.from_pretrained re-creates
 * exactly these adapters. */
int dt_adapter_write(const char *dir, const dt_adapter_config *cfg, const dt_adapter_tensor *t, int n,
                     dt_error *err);

/* A read adapter: its config and tensors, memory-mapped (F32, BF16 or F16 as stored). */
typedef struct dt_adapter dt_adapter;

typedef struct dt_adapter_entry {
    const char *name;          /* engine name (the file's key without "base_model.model." + prefix) */
    const char *module;        /* engine module path ("model.layers.3.self_attn.q_proj"; for a
                                * modules_to_save tensor the name without ".weight"/".bias") */
    int kind;                  /* DT_ADAPTER_LORA_A, _LORA_B, _SAVED */
    char dtype[8];             /* "F32" | "BF16" | "F16" */
    int ndim;
    int64_t shape[2];
    const void *data;          /* mapped, shape[0] x shape[1] elements of dtype */
} dt_adapter_entry;
enum { DT_ADAPTER_LORA_A = 0, DT_ADAPTER_LORA_B = 1, DT_ADAPTER_SAVED = 2 };

/* Reads and validates dir: both files present and regular, the safetensors whole (not
 * truncated, a valid header), peft_type LORA, r >= 1, lora_alpha > 0, bias "none", no DoRA
 * or per-module ranks (rank_pattern / alpha_pattern), every key under "base_model.model.",
 * every tensor a lora_A [r, in] / lora_B [out, r] pair or a modules_to_save tensor,
 * fan_in_fan_out as the family needs (true for gpt2 keys, false for llama). Each failure is
 * DT_EINVAL with one line naming the file and the thing, and what to do. */
int dt_adapter_read(const char *dir, dt_adapter **out, dt_error *err);
void dt_adapter_free(dt_adapter *a);
const dt_adapter_config *dt_adapter_cfg(const dt_adapter *a);
int dt_adapter_count(const dt_adapter *a);
const dt_adapter_entry *dt_adapter_get(const dt_adapter *a, int i);
const dt_adapter_entry *dt_adapter_find(const dt_adapter *a, const char *name);   /* NULL if absent */
/* The entry's elements converted to fp32 into dst (shape[0] x shape[1] floats). */
void dt_adapter_entry_f32(const dt_adapter_entry *e, float *dst);
/* LoRA's scale: alpha / r, or alpha / sqrt(r) with use_rslora (dt_ft_lora_scale). */
double dt_adapter_scale(const dt_adapter *a);

/* Checks a against model m (the plan's): the family, each adapted module one m has (a llama
 * q_proj on a gpt2 model, a layer past m's last: DT_EINVAL naming it), each lora_A [r, in] and
 * lora_B [out, r] with m's in / out, each modules_to_save tensor m's shape. */
int dt_adapter_check_model(const dt_adapter *a, const dt_model *m, dt_error *err);

/* Checks a against the Hugging Face model directory hfdir (its safetensors, sharded or not):
 * every adapted module has its base tensor ("<module>.weight" with the family's prefix) with
 * lora_A's in and lora_B's out (GPT-2's Conv1D: [in, out]), every modules_to_save tensor its
 * base's shape, and, when a carries a fingerprint, hfdir's fingerprint equals it. DT_EINVAL
 * with one line naming the adapter, the tensor and the base otherwise. For `--init HFDIR` with
 * `--init-adapter DIR`; dtrun merge runs the same check. */
int dt_adapter_check_base(const dt_adapter *a, const char *hfdir, dt_error *err);

/* The fingerprint (above) of the Hugging Face model directory hfdir, as hex. Reads every
 * tensor byte once (memory-mapped, pages released as it goes). */
int dt_adapter_base_fingerprint(const char *hfdir, char hex[DT_ADAPTER_FP_HEX], dt_error *err);

/* `dtrun merge`: a Hugging Face model directory out from base hfdir + adapter adir, with
 * W' = W + scale * B A (fan_in_fan_out: W' = W + scale * (B A)^T), computed in fp32 and rounded
 * once to the output dtype; modules_to_save tensors replace their base tensors; every other
 * tensor copied (converted when out_dtype is given). config.json (its "dtype" set to the
 * output's) and every other non-weight file of hfdir (tokenizer files, generation_config.json)
 * are copied. Weights in shards of at most max_shard_bytes (bytes; a larger tensor alone in its
 * shard) named as transformers' save_pretrained names them, with model.safetensors.index.json
 * when there is more than one. Checks before writing anything: the adapter against the base's
 * tensors (every adapted module present, shapes), its fingerprint when it has one, out absent
 * or an empty directory. Streams one tensor at a time, in row blocks: memory is bounded by the
 * adapter plus a few row blocks, never the model. Written into a temporary directory beside
 * out and renamed onto it; on any failure nothing is left. A SEQ_CLS adapter (a reward model's)
 * on a causal-LM base gives a sequence-classification directory, as PEFT's merge of it on
 * AutoModelForSequenceClassification saves: the base's lm_head.weight left out, the adapter's
 * score.weight added, config.json's architectures *ForSequenceClassification with id2label /
 * label2id of one label per score row (the base's pad_token_id kept: set it when the base has
 * none and the model scores padded batches). */
typedef struct dt_merge_opts {
    int64_t max_shard_bytes;   /* bytes; transformers' default is 5 GB = 5e9 */
    int out_dtype;             /* a dt_dtype (fp32 / bf16 / fp16), or -1: each tensor keeps the base's */
} dt_merge_opts;
int dt_adapter_merge(const char *hfdir, const char *adir, const char *out, const dt_merge_opts *o,
                     dt_error *err);

#endif
