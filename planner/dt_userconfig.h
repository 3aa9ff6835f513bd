/* dt_userconfig.h — the training configs users already hold, read with libyaml:
 *   llamafactory : LLaMA-Factory's training YAML (`llamafactory-cli train FILE`): its
 *                  ModelArguments, DataArguments, FinetuningArguments, GeneratingArguments
 *                  and Hugging Face's Seq2SeqTrainingArguments as top-level keys;
 *   hf           : Hugging Face TrainingArguments as YAML or JSON (what
 *                  HfArgumentParser.parse_yaml_file / parse_json_file take);
 *   runbook      : the users' runbooks' YAML, whose `training:` block holds the batch
 *                  (batch_size: the TOTAL over the GPUs), accumulation_steps,
 *                  use_mixed_precision and distributed_strategy (auto: < 1B DDP,
 *                  1-7B ZeRO-2, > 7B ZeRO-3).
 * Every key is classified (docs/configs.md): used for the prediction, named as not
 * affecting it, or refused with the reason (DT_EINVAL). Unknown keys are refused, as
 * LLaMA-Factory's and Hugging Face's own parsers refuse them. Scalars are typed as
 * PyYAML (which both tools use) types them: `1e-5` without a dot is a string there.
 * The library never prints; dt_usercfg.keys lists what each key did. */
#ifndef DT_USERCONFIG_H
#define DT_USERCONFIG_H

#include <stdint.h>

#include "dt_arch.h"
#include "dt_error.h"
#include "dt_finetune.h"
#include "dt_objective.h"
#include "dt_plan.h"

typedef enum {
    DT_UCFG_AUTO = 0,          /* detect from the keys */
    DT_UCFG_LLAMAFACTORY = 1,
    DT_UCFG_HF = 2,
    DT_UCFG_RUNBOOK = 3
} dt_ucfg_format;

typedef enum {
    DT_UKEY_USED = 0,          /* sets part of the prediction or of the plan */
    DT_UKEY_NO_EFFECT = 1      /* read, type-checked, does not change memory or time */
} dt_ukey_use;

#define DT_UCFG_MAX_KEYS 160
#define DT_UCFG_KEY_MAX 64
#define DT_UCFG_WHY_MAX 200

typedef struct dt_ukey {
    char key[DT_UCFG_KEY_MAX];       /* "per_device_train_batch_size", "training.batch_size" */
    dt_ukey_use use;
    char why[DT_UCFG_WHY_MAX];       /* what it set, or why it does not matter */
    int line;                        /* 1-based line of the key in the file */
} dt_ukey;

/* What a config says. Integers are 0 and strings "" when the key is absent;
 * precision/ckpt/stage are -1 when absent. */
typedef struct dt_usercfg {
    dt_ucfg_format format;
    char path[DT_PATH_MAX];
    char model[DT_PATH_MAX];         /* model_name_or_path as written ("" absent) */
    int64_t micro_batch;             /* per_device_train_batch_size / dataloader.batch_size */
    int64_t grad_accum;              /* gradient_accumulation_steps / accumulation_steps */
    int64_t total_batch;             /* runbook training.batch_size: over all GPUs */
    int64_t seq_len;                 /* cutoff_len (LLaMA-Factory default 2048) */
    int precision;                   /* dt_precision_preset, -1 absent */
    int ckpt;                        /* 1 gradient checkpointing, 0 none, -1 absent */
    char attention[16];              /* sdpa | flash | eager ("" absent) */
    char deepspeed[DT_PATH_MAX];     /* the DeepSpeed JSON, resolved to a path that exists */
    char deepspeed_written[DT_PATH_MAX];  /* ... as the config wrote it */
    int strategy_auto;               /* runbook distributed_strategy: auto */
    int strategy_stage;              /* runbook ddp / zero1..3: 0..3, -1 absent */
    double lr;                       /* learning_rate, 0 absent */
    double weight_decay, adam_beta1, adam_beta2, adam_eps, max_grad_norm;   /* -1 absent */
    int64_t max_steps;               /* > 0 only */
    double epochs;                   /* num_train_epochs / epochs, 0 absent */
    int64_t warmup_steps;            /* -1 absent */
    double warmup_ratio;             /* -1 absent */
    int schedule;                    /* dt_sched_kind, -1 absent */
    int64_t save_steps;              /* 0 absent */
    char dataset[DT_PATH_MAX];       /* LLaMA-Factory's one dataset name, or hf train_file ("" none / several) */
    char dataset_dir[DT_PATH_MAX];   /* LLaMA-Factory dataset_dir ("" absent: its default "data") */
    char stage[16];                  /* LLaMA-Factory stage ("" absent: sft) */
    char finetuning_type[16];        /* "" absent: LLaMA-Factory's default is lora */
    int quantization_bit;            /* 4 | 8, 0 absent */
    dt_finetune finetune;            /* the method LLaMA-Factory runs for finetuning_type and its keys
                                      * (docs/configs.md "Fine-tuning keys"); zeroed (full) for hf / runbook */
    int lora_alpha_given;            /* lora_alpha set (not null / 0): else it follows the rank (2 x r) */
    int freeze_block_names;          /* freeze: finetune.trainable_modules' first names, from
                                      * freeze_trainable_modules; the rest from freeze_extra_modules */
    dt_objective objective;          /* stage rm / dpo (LLaMA-Factory's value-head rm; dpo's pref_loss and
                                      * pref_beta: docs/configs.md "Stages"); zeroed (auto) for pt / sft */
    char ref_model[DT_PATH_MAX];     /* dpo ref_model as written ("" absent: the policy's own weights) */
    int ref_model_line;
    int methods_refused;             /* 1: every key read, only dt_usercfg_check_methods refused */
    int n_keys;
    dt_ukey keys[DT_UCFG_MAX_KEYS];
} dt_usercfg;

const char *dt_ucfg_format_name(dt_ucfg_format f);
/* "llamafactory" | "hf" | "runbook" (also "auto"); DT_EINVAL otherwise. */
int dt_ucfg_format_parse(const char *s, dt_ucfg_format *out, dt_error *err);

/* Parses text (YAML or JSON, len bytes; need not be NUL-terminated); path names it in
 * messages ("FILE:LINE:COLUMN: ..." for syntax errors) and is the directory relative
 * DeepSpeed paths are also looked up in. fmt DT_UCFG_AUTO detects. DT_EINVAL: one
 * line naming the key, what is wrong and a fix. */
int dt_usercfg_parse(const char *text, size_t len, const char *path, dt_ucfg_format fmt, dt_usercfg *out,
                     dt_error *err);
int dt_usercfg_load(const char *path, dt_ucfg_format fmt, dt_usercfg *out, dt_error *err);

/* The one place that refuses the stages and methods the planner does not model yet (stages
 * ppo and kto, finetuning_type oft) and quantization_bit without LoRA: DT_EINVAL naming the
 * key and what is missing; DT_OK for full / freeze / lora pt / sft / rm / dpo.
 * dt_usercfg_parse calls it, then builds c->finetune (refusing DoRA, PiSSA, LoRA+ and
 * non-bitsandbytes quantization by name, with file:line). */
int dt_usercfg_check_methods(const dt_usercfg *c, dt_error *err);

/* model_name_or_path as LLaMA-Factory / transformers take it, resolved into m: a local
 * directory with config.json (or a config.json path); a hub id "ORG/NAME" found in the
 * Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub:
 * models--ORG--NAME/snapshots/REV/config.json; never downloaded); else a catalog name,
 * the whole text or, for ORG/NAME, NAME. resolved (n bytes) gets what dt_model_resolve
 * took (a catalog name or a config.json path), for a --model option. DT_EINVAL with one
 * line naming where it looked. */
int dt_usercfg_model(const char *spec, dt_model *m, char *resolved, size_t n, dt_error *err);

/* The runbook's distributed_strategy: auto rule (the distributed-training guide): ZeRO
 * stage 0 (DDP) below 1e9 parameters, 2 up to 7e9, 3 above. */
int dt_runbook_auto_stage(int64_t params);

/* Learning rate for a global batch that differs from the config's (the runbook's two
 * rules: linear, lr x new/old; square root, lr x sqrt(new/old)). */
typedef enum { DT_LR_SCALE_NONE = 0, DT_LR_SCALE_LINEAR = 1, DT_LR_SCALE_SQRT = 2 } dt_lr_scaling;
int dt_lr_scaling_parse(const char *s, dt_lr_scaling *out, dt_error *err);
const char *dt_lr_scaling_name(dt_lr_scaling s);
double dt_lr_scaled(double lr, int64_t old_batch, int64_t new_batch, dt_lr_scaling s);

#endif
