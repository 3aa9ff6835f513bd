/* userconfig.c — LLaMA-Factory / Hugging Face TrainingArguments / runbook training
 * configs (dt_userconfig.h; docs/configs.md). libyaml parses; every key is looked up in
 * one table per format, type-checked, and used, named as not affecting the prediction,
 * or refused with the reason. */
#include "dt_userconfig.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <yaml.h>

#include "dt_json.h"
#include "dt_model.h"
#include "dt_precision.h"

/* The runbook's automatic strategy (the users' distributed-training guide, "自动策略选择"):
 * parameters < 1B DDP, 1B-7B ZeRO-2, > 7B ZeRO-3. */
#define DT_RUNBOOK_DDP_BELOW 1000000000LL
#define DT_RUNBOOK_ZERO2_UPTO 7000000000LL
/* LLaMA-Factory DataArguments.cutoff_len default (src/llamafactory/hparams/data_args.py). */
#define DT_LF_DEFAULT_CUTOFF 2048
/* Step counts beyond this are not runs (dtplan solve's own bound on --steps). */
#define DT_UCFG_MAX_STEPS 1099511627776.0
/* Files larger than this are not training configs. */
#define DT_UCFG_MAX_BYTES (4u << 20)

/* ------------------------------------------------------------ small tables */

const char *dt_ucfg_format_name(dt_ucfg_format f) {
    switch (f) {
    case DT_UCFG_LLAMAFACTORY: return "llamafactory";
    case DT_UCFG_HF: return "hf";
    case DT_UCFG_RUNBOOK: return "runbook";
    default: return "auto";
    }
}

int dt_ucfg_format_parse(const char *s, dt_ucfg_format *out, dt_error *err) {
    static const dt_ucfg_format all[] = {DT_UCFG_AUTO, DT_UCFG_LLAMAFACTORY, DT_UCFG_HF, DT_UCFG_RUNBOOK};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (s && !strcmp(s, dt_ucfg_format_name(all[i]))) return *out = all[i], DT_OK;
    return dt_errorf(err, DT_EINVAL, "--config-format '%s': expected llamafactory, hf or runbook (e.g. "
                                     "--config-format llamafactory)", s ? s : "");
}

int dt_runbook_auto_stage(int64_t params) {
    if (params < DT_RUNBOOK_DDP_BELOW) return 0;
    return params <= DT_RUNBOOK_ZERO2_UPTO ? 2 : 3;
}

int dt_lr_scaling_parse(const char *s, dt_lr_scaling *out, dt_error *err) {
    static const dt_lr_scaling all[] = {DT_LR_SCALE_NONE, DT_LR_SCALE_LINEAR, DT_LR_SCALE_SQRT};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (s && !strcmp(s, dt_lr_scaling_name(all[i]))) return *out = all[i], DT_OK;
    return dt_errorf(err, DT_EINVAL, "--lr-scaling '%s': expected linear, sqrt or none (e.g. --lr-scaling sqrt)",
                     s ? s : "");
}

const char *dt_lr_scaling_name(dt_lr_scaling s) {
    return s == DT_LR_SCALE_LINEAR ? "linear" : s == DT_LR_SCALE_SQRT ? "sqrt" : "none";
}

double dt_lr_scaled(double lr, int64_t old_batch, int64_t new_batch, dt_lr_scaling s) {
    if (old_batch <= 0 || new_batch <= 0 || s == DT_LR_SCALE_NONE) return lr;
    double r = (double)new_batch / (double)old_batch;
    return s == DT_LR_SCALE_LINEAR ? lr * r : lr * sqrt(r);
}

/* ------------------------------------------------------------ scalars as PyYAML types them */

typedef enum { V_NULL, V_BOOL, V_INT, V_FLOAT, V_STR, V_MAP, V_SEQ } vtype;

typedef struct {
    vtype t;
    int b;
    int64_t i;
    double f;
    const char *s;          /* scalar text (also for V_STR) */
} value;

static int all_digits(const char *s, const char *end) {
    if (s == end) return 0;
    for (; s < end; s++)
        if (!((*s >= '0' && *s <= '9') || *s == '_')) return 0;
    return 1;
}

/* PyYAML's implicit float: [-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)? | [-+]?\.[0-9_]+(...)? |
 * [-+]?\.inf | \.nan (yaml/resolver.py). A float needs the dot, and its exponent a sign:
 * `1e-5` stays a string. JSON text follows JSON's number grammar instead. */
static int is_pyyaml_float(const char *s) {
    const char *p = s;
    if (*p == '-' || *p == '+') p++;
    if (!strcmp(p, ".inf") || !strcmp(p, ".Inf") || !strcmp(p, ".INF")) return 1;
    if (p == s && (!strcmp(p, ".nan") || !strcmp(p, ".NaN") || !strcmp(p, ".NAN"))) return 1;
    const char *dot = strchr(p, '.');
    if (!dot) return 0;
    if (dot > p && !(*p >= '0' && *p <= '9')) return 0;
    if (dot > p && !all_digits(p, dot)) return 0;
    const char *q = dot + 1;
    while ((*q >= '0' && *q <= '9') || *q == '_') q++;
    if (dot == p && q == dot + 1) return 0;   /* "." alone */
    if (!*q) return 1;
    if (*q != 'e' && *q != 'E') return 0;
    q++;
    if (*q != '-' && *q != '+') return 0;
    q++;
    return *q && all_digits(q, q + strlen(q)) && !strchr(q, '_');
}

static int is_json_number(const char *s) {
    char *end = NULL;
    if (!*s) return 0;
    strtod(s, &end);
    return *end == '\0' && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9'));
}

static void strip_underscores(const char *s, char *out, size_t n) {
    size_t k = 0;
    for (; *s && k + 1 < n; s++)
        if (*s != '_') out[k++] = *s;
    out[k] = '\0';
}

static void scalar_value(const yaml_node_t *node, int json, value *v) {
    const char *s = (const char *)node->data.scalar.value;
    memset(v, 0, sizeof *v);
    v->s = s;
    v->t = V_STR;
    if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return;
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    static const char *const trues[] = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
    static const char *const falses[] = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"};
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
        if (!strcmp(s, nulls[i])) return (void)(v->t = V_NULL);
    for (size_t i = 0; i < sizeof trues / sizeof trues[0]; i++) {
        if (!strcmp(s, trues[i])) return (void)(v->t = V_BOOL, v->b = 1);
        if (!strcmp(s, falses[i])) return (void)(v->t = V_BOOL, v->b = 0);
    }
    char buf[64];
    strip_underscores(s, buf, sizeof buf);
    const char *d = (buf[0] == '-' || buf[0] == '+') ? buf + 1 : buf;
    if (strlen(s) < sizeof buf && *d && all_digits(d, d + strlen(d)) && (d[0] != '0' || !d[1])) {
        char *end = NULL;
        long long x = strtoll(buf, &end, 10);
        if (!*end) return (void)(v->t = V_INT, v->i = x);
    }
    if (json ? is_json_number(s) : is_pyyaml_float(s)) {
        v->t = V_FLOAT;
        v->f = strtod(buf, NULL);
        if (!strcmp(d, ".inf") || !strcmp(d, ".Inf") || !strcmp(d, ".INF")) v->f = buf[0] == '-' ? -INFINITY : INFINITY;
        if (!strcmp(d, ".nan") || !strcmp(d, ".NaN") || !strcmp(d, ".NAN")) v->f = NAN;
    }
}

static void node_value(yaml_node_t *node, int json, value *v) {
    memset(v, 0, sizeof *v);
    if (node->type == YAML_SCALAR_NODE) scalar_value(node, json, v);
    else v->t = node->type == YAML_MAPPING_NODE ? V_MAP : V_SEQ;
}

static const char *vtype_name(vtype t) {
    static const char *const n[] = {"null", "a boolean", "an integer", "a number", "a string", "a mapping", "a list"};
    return n[t];
}

/* ------------------------------------------------------------ key tables */

typedef enum { T_ANY, T_BOOL, T_INT, T_NUM, T_STR } ktype;

typedef enum {
    F_NONE,          /* no effect: why says why */
    F_REFUSE,        /* refused when set to anything but false / null / 0 / "" */
    F_MODEL, F_MICRO, F_ACCUM, F_TOTAL_BATCH, F_SEQ, F_BF16, F_FP16, F_PURE_BF16, F_MIXED, F_USE_MIXED,
    F_GC, F_NO_GC, F_FLASH, F_DEEPSPEED, F_STRATEGY, F_LR, F_WD, F_B1, F_B2, F_EPS, F_CLIP, F_MAX_STEPS,
    F_WARMUP_STEPS, F_WARMUP_RATIO, F_SCHED, F_SAVE_STEPS, F_STAGE, F_FT_TYPE, F_OPTIM, F_DATALOADER,
    F_EPOCHS, F_DATASET, F_DATASET_DIR, F_TRAIN_FILE,
    F_FTKEY          /* a fine-tuning key: read now, its meaning set once finetuning_type is known */
} kfield;

typedef struct {
    const char *key;
    ktype type;
    kfield field;
    const char *why;     /* F_NONE: why it does not matter; F_REFUSE: what is not modelled */
} key_rule;

#define NE_LOG "logging, saving or reporting: no effect on a step's memory or time"
#define NE_DATA "data preparation on the host, before and between steps"
#define NE_EVAL "evaluation and prediction run outside the training step"
#define NE_GEN "generation settings (predict / chat), not training"
#define NE_HUB "where files come from or go to"

/* Hugging Face TrainingArguments (transformers 4.4x training_args.py) and
 * Seq2SeqTrainingArguments; LLaMA-Factory takes them as top-level keys too. */
static const key_rule k_hf[] = {
    {"per_device_train_batch_size", T_INT, F_MICRO, NULL},
    {"gradient_accumulation_steps", T_INT, F_ACCUM, NULL},
    {"bf16", T_BOOL, F_BF16, NULL},
    {"fp16", T_BOOL, F_FP16, NULL},
    {"gradient_checkpointing", T_BOOL, F_GC, NULL},
    {"deepspeed", T_ANY, F_DEEPSPEED, NULL},
    {"learning_rate", T_NUM, F_LR, NULL},
    {"weight_decay", T_NUM, F_WD, NULL},
    {"adam_beta1", T_NUM, F_B1, NULL},
    {"adam_beta2", T_NUM, F_B2, NULL},
    {"adam_epsilon", T_NUM, F_EPS, NULL},
    {"max_grad_norm", T_NUM, F_CLIP, NULL},
    {"max_steps", T_INT, F_MAX_STEPS, NULL},
    {"warmup_steps", T_INT, F_WARMUP_STEPS, NULL},
    {"warmup_ratio", T_NUM, F_WARMUP_RATIO, NULL},
    {"lr_scheduler_type", T_STR, F_SCHED, NULL},
    {"save_steps", T_NUM, F_SAVE_STEPS, NULL},
    {"optim", T_STR, F_OPTIM, NULL},
    {"num_train_epochs", T_NUM, F_EPOCHS, NULL},
    {"output_dir", T_STR, F_NONE, NE_LOG},
    {"overwrite_output_dir", T_BOOL, F_NONE, NE_LOG},
    {"do_train", T_BOOL, F_NONE, "the prediction is of training steps"},
    {"do_eval", T_BOOL, F_NONE, NE_EVAL},
    {"do_predict", T_BOOL, F_NONE, NE_EVAL},
    {"eval_strategy", T_STR, F_NONE, NE_EVAL},
    {"evaluation_strategy", T_STR, F_NONE, NE_EVAL},
    {"eval_steps", T_NUM, F_NONE, NE_EVAL},
    {"eval_delay", T_NUM, F_NONE, NE_EVAL},
    {"eval_accumulation_steps", T_INT, F_NONE, NE_EVAL},
    {"per_device_eval_batch_size", T_INT, F_NONE, NE_EVAL},
    {"prediction_loss_only", T_BOOL, F_NONE, NE_EVAL},
    {"predict_with_generate", T_BOOL, F_NONE, NE_EVAL},
    {"generation_max_length", T_INT, F_NONE, NE_EVAL},
    {"generation_num_beams", T_INT, F_NONE, NE_EVAL},
    {"sortish_sampler", T_BOOL, F_NONE, NE_DATA},
    {"lr_scheduler_kwargs", T_ANY, F_NONE, "the schedule's shape, not its memory or time"},
    {"log_level", T_STR, F_NONE, NE_LOG},
    {"log_level_replica", T_STR, F_NONE, NE_LOG},
    {"logging_dir", T_STR, F_NONE, NE_LOG},
    {"logging_strategy", T_STR, F_NONE, NE_LOG},
    {"logging_first_step", T_BOOL, F_NONE, NE_LOG},
    {"logging_steps", T_NUM, F_NONE, NE_LOG},
    {"logging_nan_inf_filter", T_BOOL, F_NONE, NE_LOG},
    {"save_strategy", T_STR, F_NONE, NE_LOG},
    {"save_total_limit", T_INT, F_NONE, NE_LOG},
    {"save_safetensors", T_BOOL, F_NONE, NE_LOG},
    {"save_only_model", T_BOOL, F_NONE, NE_LOG},
    {"save_on_each_node", T_BOOL, F_NONE, NE_LOG},
    {"report_to", T_ANY, F_NONE, NE_LOG},
    {"run_name", T_STR, F_NONE, NE_LOG},
    {"disable_tqdm", T_BOOL, F_NONE, NE_LOG},
    {"load_best_model_at_end", T_BOOL, F_NONE, NE_LOG},
    {"metric_for_best_model", T_STR, F_NONE, NE_LOG},
    {"greater_is_better", T_BOOL, F_NONE, NE_LOG},
    {"resume_from_checkpoint", T_STR, F_NONE, "where the run starts from, not what a step costs"},
    {"ignore_data_skip", T_BOOL, F_NONE, NE_DATA},
    {"seed", T_INT, F_NONE, "randomness, not cost"},
    {"data_seed", T_INT, F_NONE, "randomness, not cost"},
    {"full_determinism", T_BOOL, F_NONE, "deterministic kernels are assumed to cost the same"},
    {"dataloader_num_workers", T_INT, F_NONE, NE_DATA},
    {"dataloader_pin_memory", T_BOOL, F_NONE, NE_DATA},
    {"dataloader_drop_last", T_BOOL, F_NONE, NE_DATA},
    {"dataloader_persistent_workers", T_BOOL, F_NONE, NE_DATA},
    {"dataloader_prefetch_factor", T_INT, F_NONE, NE_DATA},
    {"remove_unused_columns", T_BOOL, F_NONE, NE_DATA},
    {"label_names", T_ANY, F_NONE, NE_DATA},
    {"group_by_length", T_BOOL, F_NONE, "batches of similar lengths: the plan assumes full sequences anyway"},
    {"length_column_name", T_STR, F_NONE, NE_DATA},
    {"bf16_full_eval", T_BOOL, F_NONE, NE_EVAL},
    {"fp16_full_eval", T_BOOL, F_NONE, NE_EVAL},
    {"fp16_opt_level", T_STR, F_NONE, "Apex AMP only"},
    {"half_precision_backend", T_STR, F_NONE, "the autocast backend; bf16 / fp16 set the dtypes"},
    {"tf32", T_BOOL, F_NONE, "applies to fp32 matmuls; mixed-precision GEMMs run in bf16 / fp16"},
    {"local_rank", T_INT, F_NONE, "set by the launcher"},
    {"ddp_backend", T_STR, F_NONE, "the profile's interconnect sets the collectives' speed"},
    {"ddp_timeout", T_INT, F_NONE, "a timeout, not a cost"},
    {"ddp_find_unused_parameters", T_BOOL, F_NONE, "every parameter is used in these models"},
    {"ddp_bucket_cap_mb", T_NUM, F_NONE, "DDP's bucket size (25 MB default) is within the buffers' allowance"},
    {"ddp_broadcast_buffers", T_BOOL, F_NONE, "these models have no buffers to broadcast"},
    {"gradient_checkpointing_kwargs", T_ANY, F_NONE, "use_reentrant: both variants keep the same block inputs"},
    {"label_smoothing_factor", T_NUM, F_NONE, "changes the loss value, not its cost"},
    {"neftune_noise_alpha", T_NUM, F_NONE, "noise on the embeddings: an elementwise op"},
    {"auto_find_batch_size", T_BOOL, F_REFUSE, "auto_find_batch_size halves the batch after an out-of-memory error at "
                                               "run time; plan the batch instead (dtplan solve)"},
    {"torch_compile", T_BOOL, F_REFUSE, "torch.compile's fused kernels are not modelled"},
    {"torch_compile_backend", T_STR, F_REFUSE, "torch.compile's fused kernels are not modelled"},
    {"torch_compile_mode", T_STR, F_REFUSE, "torch.compile's fused kernels are not modelled"},
    {"fsdp", T_ANY, F_REFUSE, "FSDP through TrainingArguments is not read yet; estimate it with --runtime fsdp "
                              "--zero-stage 3"},
    {"fsdp_config", T_ANY, F_REFUSE, "FSDP through TrainingArguments is not read yet; estimate it with --runtime fsdp"},
    {"use_cpu", T_BOOL, F_REFUSE, "use_cpu trains on the CPU with the Trainer; plan CPU ranks with --hardware cpu"},
    {"push_to_hub", T_BOOL, F_NONE, NE_HUB},
    {"hub_model_id", T_STR, F_NONE, NE_HUB},
    {"hub_strategy", T_STR, F_NONE, NE_HUB},
    {"hub_token", T_STR, F_NONE, NE_HUB},
    {"hub_private_repo", T_BOOL, F_NONE, NE_HUB},
    {"include_num_input_tokens_seen", T_BOOL, F_NONE, NE_LOG},
    {"include_tokens_per_second", T_BOOL, F_NONE, NE_LOG},
    {"average_tokens_across_devices", T_BOOL, F_NONE, "one scalar all-reduce per step"},
    {"accelerator_config", T_ANY, F_NONE, "how accelerate splits batches: same per-device batch"},
    {"batch_eval_metrics", T_BOOL, F_NONE, NE_EVAL},
    {"jit_mode_eval", T_BOOL, F_NONE, NE_EVAL},
    {"use_liger_kernel", T_BOOL, F_REFUSE, "Liger's fused kernels (fused linear cross-entropy) change activation "
                                           "memory; not modelled"},
};

/* transformers' examples/pytorch/language-modeling/run_clm.py DataTrainingArguments: the data
 * files a Trainer script reads (TrainingArguments has none); read in the hf format only. */
static const key_rule k_hf_data[] = {
    {"train_file", T_STR, F_TRAIN_FILE, NULL},
    {"validation_file", T_STR, F_NONE, NE_EVAL},
};

/* LLaMA-Factory's own arguments (src/llamafactory/hparams/{model,data,finetuning,generating}_args.py). */
static const key_rule k_lf[] = {
    {"model_name_or_path", T_STR, F_MODEL, NULL},
    {"stage", T_STR, F_STAGE, NULL},
    {"finetuning_type", T_STR, F_FT_TYPE, NULL},
    {"quantization_bit", T_INT, F_FTKEY, NULL},
    {"cutoff_len", T_INT, F_SEQ, NULL},
    {"pure_bf16", T_BOOL, F_PURE_BF16, NULL},
    {"flash_attn", T_STR, F_FLASH, NULL},
    {"disable_gradient_checkpointing", T_BOOL, F_NO_GC, NULL},
    {"template", T_STR, F_NONE, "formats the conversations; every sequence is planned at cutoff_len tokens"},
    {"dataset", T_ANY, F_DATASET, NULL},
    {"eval_dataset", T_ANY, F_NONE, NE_EVAL},
    {"dataset_dir", T_STR, F_DATASET_DIR, NULL},
    {"media_dir", T_STR, F_NONE, NE_DATA},
    {"packing", T_BOOL, F_NONE, "every sequence is planned at cutoff_len tokens, what packing gives (without it, "
                                "the upper bound)"},
    {"neat_packing", T_BOOL, F_NONE, "every sequence is planned at cutoff_len tokens"},
    {"train_on_prompt", T_BOOL, F_NONE, "which labels count, not the cost"},
    {"mask_history", T_BOOL, F_NONE, "which labels count, not the cost"},
    {"streaming", T_BOOL, F_NONE, NE_DATA},
    {"buffer_size", T_INT, F_NONE, NE_DATA},
    {"mix_strategy", T_STR, F_NONE, NE_DATA},
    {"interleave_probs", T_ANY, F_NONE, NE_DATA},
    {"overwrite_cache", T_BOOL, F_NONE, NE_DATA},
    {"preprocessing_batch_size", T_INT, F_NONE, NE_DATA},
    {"preprocessing_num_workers", T_INT, F_NONE, NE_DATA},
    {"max_samples", T_INT, F_NONE, "bounds the dataset: steps need its size (max_steps or --steps)"},
    {"val_size", T_NUM, F_NONE, NE_EVAL},
    {"eval_num_beams", T_INT, F_NONE, NE_EVAL},
    {"eval_on_each_dataset", T_BOOL, F_NONE, NE_EVAL},
    {"ignore_pad_token_for_loss", T_BOOL, F_NONE, "which labels count, not the cost"},
    {"tool_format", T_STR, F_NONE, NE_DATA},
    {"tokenized_path", T_STR, F_NONE, NE_DATA},
    {"trust_remote_code", T_BOOL, F_NONE, "lets transformers run the model repository's code; the shape comes "
                                          "from its config.json"},
    {"cache_dir", T_STR, F_NONE, NE_HUB},
    {"model_revision", T_STR, F_NONE, NE_HUB},
    {"hf_hub_token", T_STR, F_NONE, NE_HUB},
    {"ms_hub_token", T_STR, F_NONE, NE_HUB},
    {"use_fast_tokenizer", T_BOOL, F_NONE, NE_DATA},
    {"split_special_tokens", T_BOOL, F_NONE, NE_DATA},
    {"low_cpu_mem_usage", T_BOOL, F_NONE, "how weights load, before training"},
    {"use_cache", T_BOOL, F_NONE, "training runs without the KV cache"},
    {"use_reentrant_gc", T_BOOL, F_NONE, "both checkpointing variants keep the same block inputs"},
    {"rope_scaling", T_ANY, F_NONE, "changes the rotary frequencies only: the same memory and FLOPs"},
    {"train_from_scratch", T_BOOL, F_NONE, "random initialisation: the same shapes"},
    {"print_param_status", T_BOOL, F_NONE, NE_LOG},
    {"plot_loss", T_BOOL, F_NONE, NE_LOG},
    {"include_effective_tokens_per_second", T_BOOL, F_NONE, NE_LOG},
    {"compute_accuracy", T_BOOL, F_NONE, NE_EVAL},
    {"disable_shuffling", T_BOOL, F_NONE, NE_DATA},
    {"moe_aux_loss_coef", T_NUM, F_NONE, "mixture-of-experts only (the catalog's models are dense)"},
    {"upcast_layernorm", T_BOOL, F_REFUSE, "fp32 norms inside a 16-bit model are not modelled"},
    {"upcast_lmhead_output", T_BOOL, F_REFUSE, "an fp32 copy of the lm_head output is not modelled"},
    {"resize_vocab", T_BOOL, F_REFUSE, "resized embeddings are not modelled (the shape comes from config.json)"},
    {"new_special_tokens", T_ANY, F_REFUSE, "added tokens resize the embeddings, which is not modelled"},
    {"shift_attn", T_BOOL, F_REFUSE, "S^2-Attn (LongLoRA's shifted sparse attention) is not modelled"},
    {"mixture_of_depths", T_STR, F_REFUSE, "mixture-of-depths skips blocks per token; not modelled"},
    {"use_unsloth", T_BOOL, F_REFUSE, "Unsloth's kernels are not modelled"},
    {"use_unsloth_gc", T_BOOL, F_REFUSE, "Unsloth's offloaded checkpointing is not modelled"},
    {"enable_liger_kernel", T_BOOL, F_REFUSE, "Liger's fused kernels (fused linear cross-entropy) change activation "
                                              "memory; not modelled"},
    {"adapter_name_or_path", T_ANY, F_REFUSE, "a saved adapter's rank and targets live in its adapter_config.json, "
                                              "which is not read; remove it and give its lora_rank / lora_target "
                                              "(the same memory and time as a new adapter of that shape)"},
    {"use_galore", T_BOOL, F_REFUSE, "GaLore's projected optimizer states are not modelled: dtplan plans AdamW"},
    {"use_apollo", T_BOOL, F_REFUSE, "APOLLO's optimizer states are not modelled: dtplan plans AdamW"},
    {"use_badam", T_BOOL, F_REFUSE, "BAdam's block-wise updates are not modelled: dtplan plans AdamW"},
    {"use_adam_mini", T_BOOL, F_REFUSE, "Adam-mini's shared moments are not modelled: dtplan plans AdamW"},
    {"use_muon", T_BOOL, F_REFUSE, "the Muon optimizer is not modelled: dtplan plans AdamW"},
    {"use_llama_pro", T_BOOL, F_REFUSE, "LLaMA Pro's expanded blocks are not modelled"},
    {"lora_rank", T_INT, F_FTKEY, NULL},
    {"lora_alpha", T_NUM, F_FTKEY, NULL},
    {"lora_dropout", T_NUM, F_FTKEY, NULL},
    {"lora_target", T_ANY, F_FTKEY, NULL},
    {"additional_target", T_ANY, F_FTKEY, NULL},
    {"use_rslora", T_BOOL, F_FTKEY, NULL},
    {"use_dora", T_BOOL, F_FTKEY, NULL},
    {"pissa_init", T_BOOL, F_FTKEY, NULL},
    {"loraplus_lr_ratio", T_NUM, F_FTKEY, NULL},
    {"freeze_trainable_layers", T_INT, F_FTKEY, NULL},
    {"freeze_trainable_modules", T_ANY, F_FTKEY, NULL},
    {"freeze_extra_modules", T_ANY, F_FTKEY, NULL},
    {"quantization_method", T_STR, F_FTKEY, NULL},
    {"quantization_type", T_STR, F_FTKEY, NULL},
    {"double_quantization", T_BOOL, F_FTKEY, NULL},
    {"loraplus_lr_embedding", T_NUM, F_NONE, "read only with loraplus_lr_ratio (refused)"},
    {"pissa_iter", T_INT, F_NONE, "read only with pissa_init (refused)"},
    {"pissa_convert", T_BOOL, F_NONE, "converts a saved PiSSA adapter after training"},
    {"create_new_adapter", T_BOOL, F_NONE, "read only with adapter_name_or_path (refused)"},
    {"quantization_device_map", T_ANY, F_REFUSE, "LLaMA-Factory refuses a device map for quantised models in "
                                                 "training (inference only)"},
    {"pref_beta", T_NUM, F_FTKEY, NULL},
    {"pref_ftx", T_NUM, F_FTKEY, NULL},
    {"pref_bco_weight", T_NUM, F_FTKEY, NULL},
    {"pref_loss", T_STR, F_FTKEY, NULL},
    {"dpo_label_smoothing", T_NUM, F_FTKEY, NULL},
    {"ld_alpha", T_NUM, F_FTKEY, NULL},
    {"kto_chosen_weight", T_NUM, F_FTKEY, NULL},
    {"kto_rejected_weight", T_NUM, F_FTKEY, NULL},
    {"simpo_gamma", T_NUM, F_FTKEY, NULL},
    {"ref_model", T_STR, F_FTKEY, NULL},
    {"ref_model_adapters", T_STR, F_FTKEY, NULL},
    {"ref_model_quantization_bit", T_INT, F_FTKEY, NULL},
    {"ppo_buffer_size", T_INT, F_FTKEY, NULL},
    {"ppo_epochs", T_INT, F_FTKEY, NULL},
    {"ppo_score_norm", T_BOOL, F_FTKEY, NULL},
    {"ppo_target", T_NUM, F_FTKEY, NULL},
    {"ppo_whiten_rewards", T_BOOL, F_FTKEY, NULL},
    {"reward_model", T_STR, F_FTKEY, NULL},
    {"reward_model_adapters", T_STR, F_FTKEY, NULL},
    {"reward_model_quantization_bit", T_INT, F_FTKEY, NULL},
    {"reward_model_type", T_STR, F_FTKEY, NULL},
    {"do_sample", T_BOOL, F_NONE, NE_GEN},
    {"temperature", T_NUM, F_NONE, NE_GEN},
    {"top_p", T_NUM, F_NONE, NE_GEN},
    {"top_k", T_INT, F_NONE, NE_GEN},
    {"num_beams", T_INT, F_NONE, NE_GEN},
    {"max_length", T_INT, F_NONE, NE_GEN},
    {"max_new_tokens", T_INT, F_NONE, NE_GEN},
    {"repetition_penalty", T_NUM, F_NONE, NE_GEN},
    {"length_penalty", T_NUM, F_NONE, NE_GEN},
    {"default_system", T_STR, F_NONE, NE_GEN},
    {"skip_special_tokens", T_BOOL, F_NONE, NE_GEN},
    {"enable_thinking", T_BOOL, F_NONE, NE_GEN},
};

/* The runbooks' training: block (the VLM runbook's batch_size / accumulation_steps /
 * use_mixed_precision, the distributed-training guide's distributed_strategy /
 * deepspeed.config_path / dataloader / mixed_precision); Hugging Face keys there too. */
static const key_rule k_runbook[] = {
    {"batch_size", T_INT, F_TOTAL_BATCH, NULL},
    {"accumulation_steps", T_INT, F_ACCUM, NULL},
    {"use_mixed_precision", T_BOOL, F_USE_MIXED, NULL},
    {"mixed_precision", T_STR, F_MIXED, NULL},
    {"distributed_strategy", T_STR, F_STRATEGY, NULL},
    {"dataloader", T_ANY, F_DATALOADER, NULL},
    {"use_ddp", T_BOOL, F_NONE, "the launcher's choice; distributed_strategy and --gpus set the plan"},
    {"distributed", T_BOOL, F_NONE, "the launcher's choice; --gpus sets the ranks"},
    {"distributed_backend", T_STR, F_NONE, "the profile's interconnect sets the collectives' speed"},
    {"find_unused_parameters", T_BOOL, F_NONE, "every parameter is used in these models"},
    {"num_workers", T_INT, F_NONE, NE_DATA},
    {"pin_memory", T_BOOL, F_NONE, NE_DATA},
    {"epochs", T_NUM, F_EPOCHS, NULL},
    {"num_epochs", T_NUM, F_EPOCHS, NULL},
};

static const key_rule *find_rule(const key_rule *t, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].key, key)) return &t[i];
    return NULL;
}
#define N_OF(t) (sizeof t / sizeof t[0])

/* ------------------------------------------------------------ reading */

/* LLaMA-Factory's fine-tuning keys (hparams/finetuning_args.py FreezeArguments,
 * LoraArguments; hparams/model_args.py QuantizationArguments): what each means depends on
 * finetuning_type, which may come later in the file. */
/* After them (K_METHOD_N on), the RLHF keys (finetuning_args.py RLHFArguments), whose meaning
 * depends on stage. */
enum { K_RANK, K_ALPHA, K_DROPOUT, K_TARGET, K_ADD, K_RSLORA, K_DORA, K_PISSA, K_LORAPLUS, K_LAYERS, K_MODULES,
       K_EXTRA, K_QBIT, K_QMETHOD, K_QTYPE, K_DQ, K_METHOD_N,
       P_BETA = K_METHOD_N, P_LOSS, P_FTX, P_BCO, P_SMOOTH, P_LD_ALPHA, P_SIMPO_GAMMA, P_REF, P_REF_ADAPTERS, P_REF_QBIT,
       P_KTO_CHOSEN, P_KTO_REJECTED, P_PPO_BUFFER, P_PPO_EPOCHS, P_PPO_NORM, P_PPO_TARGET, P_PPO_WHITEN, P_REWARD,
       P_REWARD_ADAPTERS, P_REWARD_QBIT, P_REWARD_TYPE, K_N };
static const char *const k_ftkeys[K_N] = {
    "lora_rank", "lora_alpha", "lora_dropout", "lora_target", "additional_target", "use_rslora", "use_dora",
    "pissa_init", "loraplus_lr_ratio", "freeze_trainable_layers", "freeze_trainable_modules", "freeze_extra_modules",
    "quantization_bit", "quantization_method", "quantization_type", "double_quantization",
    "pref_beta", "pref_loss", "pref_ftx", "pref_bco_weight", "dpo_label_smoothing", "ld_alpha", "simpo_gamma",
    "ref_model", "ref_model_adapters", "ref_model_quantization_bit", "kto_chosen_weight", "kto_rejected_weight",
    "ppo_buffer_size", "ppo_epochs", "ppo_score_norm", "ppo_target", "ppo_whiten_rewards", "reward_model",
    "reward_model_adapters", "reward_model_quantization_bit", "reward_model_type"};

static int ftkey_index(const char *key) {
    for (int i = 0; i < K_N; i++)
        if (!strcmp(k_ftkeys[i], key)) return i;
    return 0;   /* unreachable: the table's F_FTKEY keys are k_ftkeys' */
}

typedef struct {
    int set, line, idx;   /* idx: its entry in dt_usercfg.keys */
    value v;
    yaml_node_t *node;
} ft_key;

typedef struct {
    yaml_document_t *doc;
    dt_usercfg *c;
    int json;
    const char *file;     /* for messages */
    char dir[DT_PATH_MAX];
    int bf16, fp16, pure; /* the precision keys as set (contradictions are checked at the end) */
    ft_key ft[K_N];       /* the fine-tuning keys as read (finish_method gives them their meaning) */
} reader;

static int note_key(reader *r, const char *key, dt_ukey_use use, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int note_key(reader *r, const char *key, dt_ukey_use use, int line, const char *fmt, ...) {
    dt_usercfg *c = r->c;
    if (c->n_keys >= DT_UCFG_MAX_KEYS) return DT_OK;   /* the report's length; the key was still checked */
    dt_ukey *k = &c->keys[c->n_keys++];
    snprintf(k->key, sizeof k->key, "%s", key);
    k->use = use;
    k->line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->why, sizeof k->why, fmt, ap);
    va_end(ap);
    return DT_OK;
}

static int type_error(const reader *r, const char *key, int line, ktype want, const value *v, dt_error *err) {
    static const char *const want_name[] = {"any value", "true or false", "a whole number", "a number", "a string"};
    const char *hint = "";
    if ((want == T_NUM || want == T_INT) && v->t == V_STR && strpbrk(v->s, "eE") && strtod(v->s, NULL) != 0)
        hint = " (YAML 1.1, which PyYAML and so LLaMA-Factory read, makes a number of it only with a dot and a signed "
               "exponent: write 1.0e-5, not 1e-5)";
    return dt_errorf(err, DT_EINVAL, "%s:%d: '%s' must be %s, not %s '%s'%s", r->file, line, key, want_name[want],
                     vtype_name(v->t), v->t <= V_STR ? v->s : "...", hint);
}

static int check_type(const reader *r, const char *key, int line, ktype t, const value *v, dt_error *err) {
    int ok = t == T_ANY || v->t == V_NULL || (t == T_BOOL && v->t == V_BOOL) || (t == T_INT && v->t == V_INT) ||
             (t == T_NUM && (v->t == V_INT || v->t == V_FLOAT)) || (t == T_STR && v->t <= V_STR && v->t != V_NULL);
    return ok ? DT_OK : type_error(r, key, line, t, v, err);
}

static double num_of(const value *v) { return v->t == V_INT ? (double)v->i : v->f; }

static int positive_int(const reader *r, const char *key, int line, const value *v, int64_t *out, dt_error *err) {
    if (v->t != V_INT || v->i < 1)
        return dt_errorf(err, DT_EINVAL, "%s:%d: '%s' must be a whole number >= 1, not '%s'", r->file, line, key,
                         v->t <= V_STR ? v->s : "...");
    *out = v->i;
    return DT_OK;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* deepspeed: a path (relative to the working directory, as the Trainer opens it, or to
 * the config's directory), or the runbook's {config_path: PATH}. */
static int read_deepspeed(reader *r, const char *key, int line, yaml_node_t *node, dt_error *err) {
    dt_usercfg *c = r->c;
    const char *written = NULL;
    if (node->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(r->doc, p->key), *v = yaml_document_get_node(r->doc, p->value);
            const char *ks = k && k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "";
            if (!strcmp(ks, "config_path") && v && v->type == YAML_SCALAR_NODE) written = (const char *)v->data.scalar.value;
            else
                return dt_errorf(err, DT_EINVAL,
                                 "%s:%d: '%s.%s': an inline DeepSpeed config is not read; put it in a JSON file and "
                                 "name it (%s: ds_config.json)", r->file, (int)k->start_mark.line + 1, key, ks, key);
        }
    } else if (node->type == YAML_SCALAR_NODE) {
        written = (const char *)node->data.scalar.value;
    }
    if (!written || !*written)
        return dt_errorf(err, DT_EINVAL, "%s:%d: '%s' must name a DeepSpeed JSON file (e.g. %s: ds_z3_config.json)",
                         r->file, line, key, key);
    snprintf(c->deepspeed_written, sizeof c->deepspeed_written, "%s", written);
    char alt[2 * DT_PATH_MAX];
    snprintf(alt, sizeof alt, "%s/%s", r->dir, written);
    const char *found = file_exists(written) ? written : (written[0] != '/' && file_exists(alt)) ? alt : NULL;
    if (!found)
        return dt_errorf(err, DT_EINVAL,
                         "%s:%d: %s: '%s' does not exist (looked in the working directory and in %s); give the path "
                         "of the DeepSpeed JSON",
                         r->file, line, key, written, r->dir);
    if (strlen(found) >= sizeof c->deepspeed)
        return dt_errorf(err, DT_EINVAL, "%s:%d: %s: path longer than %d bytes", r->file, line, key,
                         (int)sizeof c->deepspeed - 1);
    memcpy(c->deepspeed, found, strlen(found) + 1);   /* fits: checked above */
    return note_key(r, key, DT_UKEY_USED, line, "DeepSpeed config %s (read as --deepspeed)", found);
}

static int read_schedule(reader *r, const char *key, int line, const char *s, dt_error *err) {
    static const struct { const char *hf; dt_sched_kind kind; } map[] = {
        {"linear", DT_SCHED_WARMUP_DECAY_LR}, {"cosine", DT_SCHED_WARMUP_COSINE_LR},
        {"constant", DT_SCHED_CONSTANT}, {"constant_with_warmup", DT_SCHED_WARMUP_LR},
    };
    for (size_t i = 0; i < N_OF(map); i++)
        if (!strcmp(s, map[i].hf)) {
            r->c->schedule = (int)map[i].kind;
            return note_key(r, key, DT_UKEY_USED, line, "the plan's schedule (no effect on memory or time)");
        }
    return dt_errorf(err, DT_EINVAL,
                     "%s:%d: %s '%s' has no plan equivalent (dtrun runs linear, cosine, constant and "
                     "constant_with_warmup); use one of them",
                     r->file, line, key, s);
}

static int read_optim(reader *r, const char *key, int line, const char *s, dt_error *err) {
    static const char *const adamw[] = {"adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw_apex_fused", "adamw"};
    for (size_t i = 0; i < N_OF(adamw); i++)
        if (!strcmp(s, adamw[i])) return note_key(r, key, DT_UKEY_USED, line, "AdamW: fp32 master weights and moments");
    return dt_errorf(err, DT_EINVAL,
                     "%s:%d: %s: '%s' is not modelled: dtplan plans AdamW with fp32 moments (use optim: adamw_torch)",
                     r->file, line, key, s);
}

static int read_mixed(reader *r, const char *key, int line, const char *s, dt_error *err) {
    if (!strcmp(s, "bf16")) r->c->precision = DT_PREC_MIXED_BF16;
    else if (!strcmp(s, "fp16")) r->c->precision = DT_PREC_MIXED_FP16;
    else if (!strcmp(s, "no") || !strcmp(s, "fp32")) r->c->precision = DT_PREC_FP32;
    else
        return dt_errorf(err, DT_EINVAL, "%s:%d: %s '%s': expected bf16, fp16 or no", r->file, line, key, s);
    return note_key(r, key, DT_UKEY_USED, line, "precision %s",
                    dt_precision_preset_name((dt_precision_preset)r->c->precision));
}

static int read_strategy(reader *r, const char *key, int line, const char *s, dt_error *err) {
    static const struct { const char *name; int stage; } map[] = {
        {"ddp", 0}, {"zero1", 1}, {"zero2", 2}, {"zero3", 3}, {"zero-1", 1}, {"zero-2", 2}, {"zero-3", 3},
    };
    dt_usercfg *c = r->c;
    if (!strcmp(s, "auto")) {
        c->strategy_auto = 1;
        return note_key(r, key, DT_UKEY_USED, line,
                        "the runbook's rule: < 1B parameters DDP, 1-7B ZeRO-2, > 7B ZeRO-3");
    }
    if (!strcmp(s, "deepspeed"))
        return note_key(r, key, DT_UKEY_USED, line, "DeepSpeed: the stage comes from deepspeed.config_path");
    for (size_t i = 0; i < N_OF(map); i++)
        if (!strcasecmp(s, map[i].name)) {
            c->strategy_stage = map[i].stage;
            return note_key(r, key, DT_UKEY_USED, line, "ZeRO stage %d", map[i].stage);
        }
    return dt_errorf(err, DT_EINVAL, "%s:%d: %s '%s': expected auto, ddp, deepspeed, zero1, zero2 or zero3", r->file,
                     line, key, s);
}

static int read_dataloader(reader *r, const char *key, int line, yaml_node_t *node, dt_error *err);

/* One key's value into the config (the rule's field), after the type check. */
static int apply_rule(reader *r, const key_rule *k, const char *key, int line, yaml_node_t *node, const value *v,
                      dt_error *err) {
    dt_usercfg *c = r->c;
    int rc;
    if (v->t == V_NULL && k->field != F_NONE)
        return note_key(r, key, DT_UKEY_NO_EFFECT, line, "null: the default applies");
    switch (k->field) {
    case F_NONE: return note_key(r, key, DT_UKEY_NO_EFFECT, line, "%s", k->why);
    case F_REFUSE: {
        int off = (v->t == V_BOOL && !v->b) || (v->t == V_STR && !*v->s) || (v->t == V_INT && v->i == 0);
        if (off) return note_key(r, key, DT_UKEY_NO_EFFECT, line, "off");
        return dt_errorf(err, DT_EINVAL, "%s:%d: %s: %s", r->file, line, key, k->why);
    }
    case F_MODEL:
        snprintf(c->model, sizeof c->model, "%s", v->s);
        return note_key(r, key, DT_UKEY_USED, line, "the model");
    case F_MICRO:
        if ((rc = positive_int(r, key, line, v, &c->micro_batch, err))) return rc;
        return note_key(r, key, DT_UKEY_USED, line, "micro-batch %lld per GPU", (long long)c->micro_batch);
    case F_ACCUM:
        if ((rc = positive_int(r, key, line, v, &c->grad_accum, err))) return rc;
        return note_key(r, key, DT_UKEY_USED, line, "gradient accumulation %lld", (long long)c->grad_accum);
    case F_TOTAL_BATCH:
        if ((rc = positive_int(r, key, line, v, &c->total_batch, err))) return rc;
        return note_key(r, key, DT_UKEY_USED, line, "%lld sequences over all GPUs (divided by --gpus)",
                        (long long)c->total_batch);
    case F_SEQ:
        if ((rc = positive_int(r, key, line, v, &c->seq_len, err))) return rc;
        return note_key(r, key, DT_UKEY_USED, line, "%lld tokens per sequence", (long long)c->seq_len);
    case F_BF16: case F_FP16: case F_PURE_BF16: case F_GC: case F_NO_GC: case F_USE_MIXED: {
        static const char *const what[] = {"bf16 mixed precision", "fp16 mixed precision", "pure bf16 (no fp32 master)",
                                           "gradient checkpointing", "gradient checkpointing", "mixed precision"};
        int idx = k->field == F_BF16 ? 0 : k->field == F_FP16 ? 1 : k->field == F_PURE_BF16 ? 2
                : k->field == F_GC ? 3 : k->field == F_NO_GC ? 4 : 5;
        if (k->field == F_GC) c->ckpt = v->b;
        if (k->field == F_NO_GC) c->ckpt = !v->b;
        if (k->field == F_BF16) r->bf16 = v->b;
        if (k->field == F_FP16) r->fp16 = v->b;
        if (k->field == F_PURE_BF16) r->pure = v->b;
        if (k->field == F_USE_MIXED && c->precision < 0) c->precision = v->b ? DT_PREC_MIXED_BF16 : DT_PREC_FP32;
        return note_key(r, key, DT_UKEY_USED, line, "%s %s", what[idx],
                        (k->field == F_NO_GC ? !v->b : v->b) ? "on" : "off");
    }
    case F_MIXED: return read_mixed(r, key, line, v->s, err);
    case F_FLASH: {
        static const struct { const char *lf, *kernel; } map[] = {
            {"auto", "sdpa"}, {"sdpa", "sdpa"}, {"fa2", "flash"}, {"fa3", "flash"}, {"disabled", "eager"}};
        for (size_t i = 0; i < N_OF(map); i++)
            if (!strcmp(v->s, map[i].lf)) {
                snprintf(c->attention, sizeof c->attention, "%s", map[i].kernel);
                return note_key(r, key, DT_UKEY_USED, line, "%s attention", map[i].kernel);
            }
        return dt_errorf(err, DT_EINVAL, "%s:%d: %s '%s': expected auto, sdpa, fa2 or disabled", r->file, line, key,
                         v->s);
    }
    case F_DEEPSPEED: return read_deepspeed(r, key, line, node, err);
    case F_STRATEGY: return read_strategy(r, key, line, v->s, err);
    case F_LR: case F_WD: case F_B1: case F_B2: case F_EPS: case F_CLIP: {
        double x = num_of(v);
        if (!isfinite(x) || x < 0 || (k->field == F_LR && !(x > 0)))
            return dt_errorf(err, DT_EINVAL, "%s:%d: '%s' must be a %snumber, not '%s'", r->file, line, key,
                             k->field == F_LR ? "positive " : "non-negative ", v->s);
        double *dst = k->field == F_LR ? &c->lr : k->field == F_WD ? &c->weight_decay : k->field == F_B1 ? &c->adam_beta1
                    : k->field == F_B2 ? &c->adam_beta2 : k->field == F_EPS ? &c->adam_eps : &c->max_grad_norm;
        *dst = x;
        return note_key(r, key, DT_UKEY_USED, line, "%g: the plan's optimizer (no effect on memory or time)", x);
    }
    case F_MAX_STEPS:
        if (v->i > 0) {
            c->max_steps = v->i;
            return note_key(r, key, DT_UKEY_USED, line, "%lld optimizer steps", (long long)v->i);
        }
        return note_key(r, key, DT_UKEY_NO_EFFECT, line, "%lld: epochs decide", (long long)v->i);
    case F_WARMUP_STEPS:
        if (v->i < 0) return dt_errorf(err, DT_EINVAL, "%s:%d: '%s' must be >= 0", r->file, line, key);
        c->warmup_steps = v->i;
        return note_key(r, key, DT_UKEY_USED, line, "the plan's warmup (no effect on memory or time)");
    case F_WARMUP_RATIO:
        if (!(num_of(v) >= 0 && num_of(v) <= 1))
            return dt_errorf(err, DT_EINVAL, "%s:%d: '%s' must be in [0, 1]", r->file, line, key);
        c->warmup_ratio = num_of(v);
        return note_key(r, key, DT_UKEY_USED, line, "the plan's warmup (no effect on memory or time)");
    case F_SCHED: return read_schedule(r, key, line, v->s, err);
    case F_SAVE_STEPS: {
        double x = num_of(v);
        if (!(x >= 0 && x <= DT_UCFG_MAX_STEPS))
            return dt_errorf(err, DT_EINVAL, "%s:%d: '%s' must be a number of steps in 0..%.0f (or a fraction below 1)",
                             r->file, line, key, DT_UCFG_MAX_STEPS);
        if (x < 1) return note_key(r, key, DT_UKEY_NO_EFFECT, line, "a fraction of the run's steps: not carried by the plan");
        c->save_steps = (int64_t)x;
        return note_key(r, key, DT_UKEY_USED, line, "the plan's save interval (no effect on a step)");
    }
    case F_STAGE:
        snprintf(c->stage, sizeof c->stage, "%s", v->s);
        return note_key(r, key, DT_UKEY_USED, line, "%s", !strcmp(v->s, "rm")    ? "a reward model: value head, pairs"
                                                          : !strcmp(v->s, "dpo") ? "dpo: policy, reference, pairs"
                                                                                 : "causal-LM training");
    case F_FT_TYPE:
        snprintf(c->finetuning_type, sizeof c->finetuning_type, "%s", v->s);
        return note_key(r, key, DT_UKEY_USED, line, "%s", !strcmp(v->s, "full") ? "all parameters train" : v->s);
    case F_FTKEY: {
        int i = ftkey_index(k->key);
        r->ft[i] = (ft_key){1, line, c->n_keys, *v, node};
        return note_key(r, key, DT_UKEY_USED, line, "fine-tuning");   /* what it set: finish_method */
    }
    case F_OPTIM: return read_optim(r, key, line, v->s, err);
    case F_DATALOADER: return read_dataloader(r, key, line, node, err);
    case F_DATASET:
        /* one dataset: DATASET_DIR/NAME may be its dtrun prepare output (the CLI looks) */
        if (v->t == V_STR && *v->s && !strchr(v->s, ',')) {
            snprintf(c->dataset, sizeof c->dataset, "%s", v->s);
            return note_key(r, key, DT_UKEY_USED, line, "the plan's data when dataset_dir/%s is a dtrun prepare "
                            "output (else none: give --data)", v->s);
        }
        return note_key(r, key, DT_UKEY_NO_EFFECT, line, "several datasets: the plan names no data (prepare them into "
                        "one dtrun prepare output and give --data DIR)");
    case F_DATASET_DIR:
        snprintf(c->dataset_dir, sizeof c->dataset_dir, "%s", v->s);
        return note_key(r, key, DT_UKEY_USED, line, "where dataset's dtrun prepare output is looked for");
    case F_TRAIN_FILE:
        snprintf(c->dataset, sizeof c->dataset, "%s", v->s);
        return note_key(r, key, DT_UKEY_USED, line, "the plan's data when it is a dtrun prepare output (else none: "
                        "give --data)");
    case F_EPOCHS:
        if (!(num_of(v) > 0) || !isfinite(num_of(v)))
            return dt_errorf(err, DT_EINVAL, "%s:%d: '%s' must be a positive number", r->file, line, key);
        c->epochs = num_of(v);
        return note_key(r, key, DT_UKEY_USED, line,
                        "the plan's steps, from --data's token count (a dtrun prepare output); no effect on a step");
    }
    return DT_OK;
}

static int read_map(reader *r, yaml_node_t *map, const char *prefix, const key_rule *const *tables,
                    const size_t *sizes, int n_tables, dt_error *err);

/* The runbook's training.dataloader: {batch_size (per GPU), num_workers, pin_memory, ...}. */
static int read_dataloader(reader *r, const char *key, int line, yaml_node_t *node, dt_error *err) {
    static const key_rule k_dl[] = {
        {"batch_size", T_INT, F_MICRO, NULL},
        {"num_workers", T_INT, F_NONE, NE_DATA},
        {"pin_memory", T_BOOL, F_NONE, NE_DATA},
        {"prefetch_factor", T_INT, F_NONE, NE_DATA},
        {"persistent_workers", T_BOOL, F_NONE, NE_DATA},
        {"drop_last", T_BOOL, F_NONE, NE_DATA},
        {"shuffle", T_BOOL, F_NONE, NE_DATA},
    };
    if (node->type != YAML_MAPPING_NODE)
        return dt_errorf(err, DT_EINVAL, "%s:%d: '%s' must be a mapping (batch_size, num_workers, ...)", r->file, line,
                         key);
    const key_rule *t[] = {k_dl};
    const size_t n[] = {N_OF(k_dl)};
    return read_map(r, node, key, t, n, 1, err);
}

/* Every key of a mapping: looked up in the tables in order; unknown keys and duplicates
 * are refused (HfArgumentParser refuses keys no dataclass has; PyYAML would keep the
 * last of two equal keys in silence). */
static int read_map(reader *r, yaml_node_t *map, const char *prefix, const key_rule *const *tables,
                    const size_t *sizes, int n_tables, dt_error *err) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(r->doc, p->key), *vn = yaml_document_get_node(r->doc, p->value);
        int line = kn ? (int)kn->start_mark.line + 1 : 0;
        if (!kn || kn->type != YAML_SCALAR_NODE || !vn)
            return dt_errorf(err, DT_EINVAL, "%s:%d: a key must be a plain name", r->file, line);
        const char *k = (const char *)kn->data.scalar.value;
        char full[DT_UCFG_KEY_MAX];
        snprintf(full, sizeof full, "%s%s%s", prefix ? prefix : "", prefix ? "." : "", k);
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            yaml_node_t *qk = yaml_document_get_node(r->doc, q->key);
            if (qk && qk->type == YAML_SCALAR_NODE && !strcmp((const char *)qk->data.scalar.value, k))
                return dt_errorf(err, DT_EINVAL, "%s:%d: '%s' is given twice (also line %d); keep one", r->file, line,
                                 full, (int)qk->start_mark.line + 1);
        }
        const key_rule *rule = NULL;
        for (int t = 0; t < n_tables && !rule; t++) rule = find_rule(tables[t], sizes[t], k);
        if (!rule && r->c->format != DT_UCFG_LLAMAFACTORY && find_rule(k_lf, N_OF(k_lf), k) &&
            find_rule(k_lf, N_OF(k_lf), k)->field == F_FTKEY)
            return dt_errorf(err, DT_EINVAL,
                             "%s:%d: '%s' is LLaMA-Factory's; %s has no fine-tuning keys (PEFT's LoraConfig and "
                             "BitsAndBytesConfig are separate objects): give the method as options (--finetune lora "
                             "--lora-rank 8 ...), or read the file with --config-format llamafactory",
                             r->file, line, full, r->c->format == DT_UCFG_HF ? "TrainingArguments" : "the runbook");
        if (!rule)
            return dt_errorf(err, DT_EINVAL,
                             "%s:%d: unknown key '%s' for a %s config (its own parser refuses unknown keys too); "
                             "check the spelling or remove it (docs/configs.md lists the keys)",
                             r->file, line, full, dt_ucfg_format_name(r->c->format));
        value v;
        node_value(vn, r->json, &v);
        int rc = check_type(r, full, line, rule->type, &v, err);
        if (!rc) rc = apply_rule(r, rule, full, line, vn, &v, err);
        if (rc) return rc;
    }
    return DT_OK;
}

/* ------------------------------------------------------------ format, methods */

static int map_has(yaml_document_t *doc, yaml_node_t *map, const char *key, yaml_node_t **val) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k && k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key)) {
            if (val) *val = yaml_document_get_node(doc, p->value);
            return 1;
        }
    }
    return 0;
}

static dt_ucfg_format detect(yaml_document_t *doc, yaml_node_t *root) {
    yaml_node_t *t = NULL;
    if (map_has(doc, root, "training", &t) && t && t->type == YAML_MAPPING_NODE) return DT_UCFG_RUNBOOK;
    for (size_t i = 0; i < N_OF(k_lf); i++)
        if (map_has(doc, root, k_lf[i].key, NULL)) return DT_UCFG_LLAMAFACTORY;
    return DT_UCFG_HF;
}

int dt_usercfg_check_methods(const dt_usercfg *c, dt_error *err) {
    /* LLaMA-Factory's default finetuning_type is lora (FinetuningArguments); stage sft. */
    const char *ft = c->finetuning_type[0] ? c->finetuning_type
                     : c->format == DT_UCFG_LLAMAFACTORY ? "lora" : "full";
    static const char *const stages[] = {"pt", "sft", "rm", "ppo", "dpo", "kto"};
    int known = !c->stage[0];
    for (size_t i = 0; i < N_OF(stages); i++) known |= !strcmp(c->stage, stages[i]);
    if (!known)
        return dt_errorf(err, DT_EINVAL, "%s: stage '%s' is not a LLaMA-Factory stage (pt, sft, rm, ppo, dpo, kto)",
                         c->path, c->stage);
    if (!strcmp(c->stage, "ppo"))
        return dt_errorf(err, DT_EINVAL,
                         "%s: stage: ppo is not modelled for LLaMA-Factory yet: its PPO (trl's PPOTrainer) trains a value "
                         "head on the policy's own backbone, makes ppo_epochs passes over each rollout and may hold the "
                         "reward model as a LoRA adapter of the policy, while the plan's ppo trains a separate critic in "
                         "one pass (DeepSpeed-Chat / OpenRLHF); plan that with dtplan solve --objective ppo", c->path);
    if (!strcmp(c->stage, "kto"))
        return dt_errorf(err, DT_EINVAL,
                         "%s: stage: kto is not modelled yet (KTO's unpaired desirable / undesirable examples with a "
                         "mismatched KL batch through the policy and the reference); for paired data use stage: dpo "
                         "with pref_loss: kto_pair", c->path);
    if (!strcmp(ft, "oft"))
        return dt_errorf(err, DT_EINVAL,
                         "%s: finetuning_type: oft is not modelled yet (OFT's orthogonal block adapters); dtplan plans "
                         "full, freeze, lora and, with quantization_bit, qlora", c->path);
    if (strcmp(ft, "full") && strcmp(ft, "freeze") && strcmp(ft, "lora"))
        return dt_errorf(err, DT_EINVAL, "%s: finetuning_type '%s' is not one of full, freeze, lora, oft", c->path, ft);
    if (c->quantization_bit && strcmp(ft, "lora"))
        return dt_errorf(err, DT_EINVAL,
                         "%s: quantization_bit: %d with finetuning_type %s: a quantised base trains only adapters "
                         "(LLaMA-Factory refuses it too); use finetuning_type: lora (QLoRA) or remove quantization_bit",
                         c->path, c->quantization_bit, ft);
    return DT_OK;
}

/* ---- the fine-tuning method (dt_finetune.h) from LLaMA-Factory's keys ---- */

static int ft_fail(const reader *r, int k, dt_error *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int ft_fail(const reader *r, int k, dt_error *err, const char *fmt, ...) {
    char why[DT_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return dt_errorf(err, DT_EINVAL, "%s:%d: %s: %s", r->file, r->ft[k].line, k_ftkeys[k], why);
}

/* What key k did, in the report (its entry was made when it was read). */
static void ft_note(reader *r, int k, dt_ukey_use use, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void ft_note(reader *r, int k, dt_ukey_use use, const char *fmt, ...) {
    if (!r->ft[k].set || r->ft[k].idx >= r->c->n_keys) return;
    dt_ukey *u = &r->c->keys[r->ft[k].idx];
    u->use = use;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(u->why, sizeof u->why, fmt, ap);
    va_end(ap);
}

/* 1 when key k is set to something other than false / null / 0. */
static int ft_on(const reader *r, int k) {
    const value *v = &r->ft[k].v;
    return r->ft[k].set && !((v->t == V_BOOL && !v->b) || (v->t == V_INT && v->i == 0) || v->t == V_NULL);
}

/* A module list as LLaMA-Factory takes it: "a, b" (split_arg) or a YAML list of names. */
static int ft_names(const reader *r, int k, dt_ft_names *out, dt_error *err) {
    char list[DT_FT_MAX_NAMES * DT_FT_NAME_MAX + DT_FT_MAX_NAMES] = "";
    const yaml_node_t *n = r->ft[k].node;
    if (n->type == YAML_SCALAR_NODE) {
        snprintf(list, sizeof list, "%s", (const char *)n->data.scalar.value);
    } else if (n->type == YAML_SEQUENCE_NODE) {
        size_t used = 0;
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
            yaml_node_t *item = yaml_document_get_node(r->doc, *it);
            if (!item || item->type != YAML_SCALAR_NODE)
                return ft_fail(r, k, err, "a list of module names holds only names (e.g. q_proj,v_proj)");
            used += (size_t)snprintf(list + used, used < sizeof list ? sizeof list - used : 0, "%s%s", used ? "," : "",
                                     (const char *)item->data.scalar.value);
        }
    } else {
        return ft_fail(r, k, err, "module names as \"a,b\" or a list (e.g. q_proj,v_proj)");
    }
    dt_error e;
    if (dt_ft_names_parse(list, k_ftkeys[k], out, &e)) return dt_errorf(err, DT_EINVAL, "%s:%d: %s", r->file, r->ft[k].line, e.msg);
    return DT_OK;
}

/* quantization_bit / _method / _type / double_quantization (bitsandbytes through
 * LLaMA-Factory's model_utils/quantization.py: BitsAndBytesConfig(load_in_4bit,
 * bnb_4bit_quant_type, bnb_4bit_use_double_quant, bnb_4bit_compute_dtype = the
 * training dtype: bf16 / fp16, else None = fp32) or load_in_8bit). */
static int ft_quant(reader *r, dt_finetune *ft, dt_error *err) {
    const int bits = r->c->quantization_bit;
    if (r->ft[K_QMETHOD].set) {
        const char *m = r->ft[K_QMETHOD].v.s;
        if (strcmp(m, "bnb") && strcmp(m, "bitsandbytes"))
            return ft_fail(r, K_QMETHOD, err, "'%s' is not modelled (%s); dtplan models bitsandbytes' on-the-fly 4 / "
                                              "8-bit base: quantization_method: bnb", m,
                           !strcmp(m, "hqq") ? "HQQ's 1-8-bit half-quadratic storage"
                           : !strcmp(m, "eetq") ? "EETQ's 8-bit kernels" : "not an on-the-fly method LLaMA-Factory names");
        ft_note(r, K_QMETHOD, DT_UKEY_USED, "bitsandbytes quantises the base");
    }
    if (bits == 8) {
        ft->quant = DT_STORAGE_INT8;
        ft_note(r, K_QTYPE, DT_UKEY_NO_EFFECT, "4-bit only (this base is 8-bit)");
        ft_note(r, K_DQ, DT_UKEY_NO_EFFECT, "4-bit only (this base is 8-bit)");
    } else {
        if (r->ft[K_QTYPE].set) {
            dt_error e;
            if (dt_storage_parse(r->ft[K_QTYPE].v.s, &ft->quant, &e) ||
                (ft->quant != DT_STORAGE_NF4 && ft->quant != DT_STORAGE_FP4))
                return ft_fail(r, K_QTYPE, err, "'%s': expected nf4 or fp4 (bnb_4bit_quant_type)", r->ft[K_QTYPE].v.s);
            ft_note(r, K_QTYPE, DT_UKEY_USED, "%s base weights", r->ft[K_QTYPE].v.s);
        }
        if (r->ft[K_DQ].set) {
            ft->double_quant = r->ft[K_DQ].v.b;
            ft_note(r, K_DQ, DT_UKEY_USED, "absmax %s", ft->double_quant ? "double-quantised (per 256)" : "fp32 per 64");
        }
    }
    ft->compute_dtype = r->bf16 || r->pure ? DT_DTYPE_BF16 : r->fp16 ? DT_DTYPE_FP16 : DT_DTYPE_FP32;
    ft_note(r, K_QBIT, DT_UKEY_USED, "QLoRA: %d-bit base (%s), dequantised to %s per use", bits,
            dt_storage_name(ft->quant), dt_dtype_name(ft->compute_dtype));
    return DT_OK;
}

static int ft_lora(reader *r, dt_finetune *ft, dt_error *err) {
    static const struct { int k; const char *why; } refused[] = {
        {K_DORA, "DoRA's magnitude vectors and weight-norm pass are not modelled yet; plan plain LoRA (use_dora: false)"},
        {K_PISSA, "PiSSA's SVD initialisation (it rewrites the base weights) is not modelled yet; plan LoRA's own init "
                  "(pissa_init: false)"},
        {K_LORAPLUS, "LoRA+ trains lora_B at its own learning rate; a plan carries one learning rate (remove "
                     "loraplus_lr_ratio)"},
    };
    for (size_t i = 0; i < N_OF(refused); i++)
        if (ft_on(r, refused[i].k)) return ft_fail(r, refused[i].k, err, "%s", refused[i].why);
    if (r->ft[K_RANK].set) {
        if (r->ft[K_RANK].v.i < 1)
            return ft_fail(r, K_RANK, err, "%lld: a LoRA rank is at least 1 (e.g. lora_rank: 8)", (long long)r->ft[K_RANK].v.i);
        ft->lora_rank = r->ft[K_RANK].v.i;
        ft_note(r, K_RANK, DT_UKEY_USED, "LoRA rank %lld", (long long)ft->lora_rank);
    }
    /* LoraArguments.__post_init__: lora_alpha = lora_alpha or lora_rank * 2 */
    ft->lora_alpha = 2.0 * (double)ft->lora_rank;
    if (ft_on(r, K_ALPHA)) {
        double a = num_of(&r->ft[K_ALPHA].v);
        if (!(a > 0) || !isfinite(a)) return ft_fail(r, K_ALPHA, err, "%s: a positive number (e.g. lora_alpha: 16)", r->ft[K_ALPHA].v.s);
        ft->lora_alpha = a;
        r->c->lora_alpha_given = 1;
    }
    ft_note(r, K_ALPHA, DT_UKEY_USED, "scale alpha / r (no effect on memory or time)");
    if (r->ft[K_DROPOUT].set) {
        ft->lora_dropout = num_of(&r->ft[K_DROPOUT].v);
        if (!(ft->lora_dropout >= 0 && ft->lora_dropout < 1))
            return ft_fail(r, K_DROPOUT, err, "%s: a probability in [0, 1) (e.g. lora_dropout: 0.05)", r->ft[K_DROPOUT].v.s);
        ft_note(r, K_DROPOUT, DT_UKEY_USED, "%s", ft->lora_dropout > 0 ? "dropout(x) and its mask kept per adapted linear"
                                                                       : "no dropout");
    }
    if (r->ft[K_TARGET].set) {
        dt_ft_names t;
        if (ft_names(r, K_TARGET, &t, err)) return err->code;
        ft->lora_target_all = t.n == 1 && !strcmp(t.name[0], "all");   /* only exactly [all] (adapter.py) */
        if (!ft->lora_target_all) ft->lora_target = t;
        ft_note(r, K_TARGET, DT_UKEY_USED, "adapters on %s", ft->lora_target_all ? "every linear of the blocks" : "the named linears");
    }
    if (r->ft[K_ADD].set) {
        if (ft_names(r, K_ADD, &ft->modules_to_save, err)) return err->code;
        ft_note(r, K_ADD, DT_UKEY_USED, "PEFT modules_to_save: trained whole");
    }
    ft->use_rslora = r->ft[K_RSLORA].set && r->ft[K_RSLORA].v.b;
    ft_note(r, K_RSLORA, DT_UKEY_USED, "scale alpha / %s (no effect on memory or time)", ft->use_rslora ? "sqrt(r)" : "r");
    /* adapter.py init_adapter: trainable parameters are cast to fp32 unless pure_bf16 */
    ft->adapter_dtype = r->pure ? DT_DTYPE_BF16 : DT_DTYPE_FP32;
    return ft->method == DT_FT_QLORA ? ft_quant(r, ft, err) : DT_OK;
}

static int ft_freeze(reader *r, dt_finetune *ft, dt_error *err) {
    if (r->ft[K_LAYERS].set) {
        if (r->ft[K_LAYERS].v.i == 0)
            return ft_fail(r, K_LAYERS, err, "0 trains no block (LLaMA-Factory then trains only freeze_extra_modules), "
                                             "which is not modelled; give N > 0 (the last N blocks) or -N (the first N)");
        ft->trainable_layers = r->ft[K_LAYERS].v.i;
        ft_note(r, K_LAYERS, DT_UKEY_USED, "the %s %lld blocks trained", ft->trainable_layers > 0 ? "last" : "first",
                (long long)llabs(ft->trainable_layers));
    }
    dt_ft_names mods = {0}, extra = {0};
    if (r->ft[K_MODULES].set) {
        if (ft_names(r, K_MODULES, &mods, err)) return err->code;
        if (dt_ft_names_has(&mods, "all")) mods.n = 0;   /* "all": every module of those blocks */
        ft_note(r, K_MODULES, DT_UKEY_USED, "%s of those blocks trained", mods.n ? "the named modules" : "every module");
    }
    if (r->ft[K_EXTRA].set) {
        if (ft_names(r, K_EXTRA, &extra, err)) return err->code;
        if (mods.n + extra.n > DT_FT_MAX_NAMES)
            return ft_fail(r, K_EXTRA, err, "more than %d module names with freeze_trainable_modules", DT_FT_MAX_NAMES);
        for (int i = 0; i < extra.n; i++) memcpy(mods.name[mods.n++], extra.name[i], DT_FT_NAME_MAX);
        ft_note(r, K_EXTRA, DT_UKEY_USED, "trained whole, outside the blocks");
    }
    ft->trainable_modules = mods;
    r->c->freeze_block_names = mods.n - extra.n;
    return DT_OK;
}

/* The method LLaMA-Factory runs for these keys into c->finetune; every fine-tuning key
 * noted as used, without effect for this method, or refused. */
static int finish_method(reader *r, dt_error *err) {
    dt_usercfg *c = r->c;
    if (r->ft[K_QBIT].set) {
        const int64_t bits = r->ft[K_QBIT].v.i;
        if (bits != 4 && bits != 8)
            return ft_fail(r, K_QBIT, err, "%lld: bitsandbytes quantises the base to 4 or 8 bits (quantization_bit: 4 "
                                           "for QLoRA)", (long long)bits);
        c->quantization_bit = (int)bits;
    }
    int rc = dt_usercfg_check_methods(c, err);
    if (rc) return rc;
    const char *type = c->finetuning_type[0] ? c->finetuning_type : c->format == DT_UCFG_LLAMAFACTORY ? "lora" : "full";
    const int lora = !strcmp(type, "lora"), freeze = !strcmp(type, "freeze");
    static const int lora_only[] = {K_RSLORA, K_DORA, K_PISSA, K_LORAPLUS};
    for (size_t i = 0; !lora && i < N_OF(lora_only); i++)   /* FinetuningArguments.__post_init__ refuses these */
        if (ft_on(r, lora_only[i]))
            return ft_fail(r, lora_only[i], err, "only valid with finetuning_type: lora (LLaMA-Factory refuses it with %s)",
                           type);
    for (int k = 0; k < K_METHOD_N; k++) {   /* the method's keys are noted again below */
        const char *only = k <= K_LORAPLUS ? "lora" : k <= K_EXTRA ? "freeze" : "lora with quantization_bit";
        ft_note(r, k, DT_UKEY_NO_EFFECT, "used only with finetuning_type %s (this config: %s%s)", only, type,
                c->finetuning_type[0] ? "" : ", LLaMA-Factory's default");
    }
    dt_finetune *ft = &c->finetune;
    dt_finetune_defaults(lora ? (c->quantization_bit ? DT_FT_QLORA : DT_FT_LORA) : freeze ? DT_FT_FREEZE : DT_FT_FULL, ft);
    if ((lora && ft_lora(r, ft, err)) || (freeze && ft_freeze(r, ft, err))) return err->code;
    return dt_finetune_check(ft, c->path, err);
}

/* The RLHF keys (finetuning_args.py RLHFArguments) for stage: rm (LLaMA-Factory's value-head
 * reward model) and dpo (pref_loss, pref_beta; ref_model checked by the CLI against the
 * policy's shape); the other keys noted with the stage that reads them, or refused. */
static int finish_objective(reader *r, dt_error *err) {
    dt_usercfg *c = r->c;
    const int dpo = !strcmp(c->stage, "dpo"), rm = !strcmp(c->stage, "rm");
    const char *stage = c->stage[0] ? c->stage : "sft, LLaMA-Factory's default";
    for (int k = P_BETA; k < K_N; k++)
        ft_note(r, k, DT_UKEY_NO_EFFECT, "used only by stage %s (this config: %s)",
                k <= P_REF_QBIT ? "dpo" : k <= P_KTO_REJECTED ? "kto" : "ppo", stage);
    if (rm) {
        dt_objective_defaults(DT_OBJ_RM, &c->objective);
        c->objective.rm_head = DT_RM_HEAD_VALUE;   /* load_model(add_valuehead=True) for rm */
        return DT_OK;
    }
    if (!dpo) return DT_OK;
    dt_objective *o = &c->objective;
    dt_objective_defaults(DT_OBJ_DPO, o);
    dt_error e;
    if (r->ft[P_LOSS].set) {
        if (dt_pref_loss_parse(r->ft[P_LOSS].v.s, &o->pref_loss, &e)) return ft_fail(r, P_LOSS, err, "%s", e.msg);
        ft_note(r, P_LOSS, DT_UKEY_USED, "the dpo loss%s", dt_pref_loss_ref_free(o->pref_loss) ? ": no reference model "
                                                                                                  "(orpo / simpo)" : "");
    }
    if (r->ft[P_BETA].set) {
        const double b = num_of(&r->ft[P_BETA].v);
        if (!(b >= 0) || !isfinite(b)) return ft_fail(r, P_BETA, err, "must be a number >= 0 (default 0.1)");
        o->pref_beta = b;
        ft_note(r, P_BETA, DT_UKEY_USED, "the plan's dpo beta (no effect on memory or time)");
    }
    /* FinetuningArguments.__post_init__: "`dpo_label_smoothing` is only valid for sigmoid loss." */
    if (ft_on(r, P_SMOOTH) && o->pref_loss != DT_PREF_SIGMOID)
        return ft_fail(r, P_SMOOTH, err, "only valid with pref_loss: sigmoid (LLaMA-Factory refuses it with %s)",
                       dt_pref_loss_name(o->pref_loss));
    ft_note(r, P_FTX, DT_UKEY_NO_EFFECT, "an SFT term on the chosen responses' log-probs, already computed");
    ft_note(r, P_BCO, DT_UKEY_NO_EFFECT, "BCO's term on the same log-probs: scalars per pair");
    if (r->ft[P_SMOOTH].set) {   /* cDPO's epsilon: LLaMA-Factory's sigmoid loss takes it (range as hparams) */
        const double e = num_of(&r->ft[P_SMOOTH].v);
        if (!(e >= 0 && e < 0.5)) return ft_fail(r, P_SMOOTH, err, "must be in [0, 0.5) (default 0)");
        o->label_smoothing = e;
        ft_note(r, P_SMOOTH, DT_UKEY_USED, "the plan's dpo label smoothing (changes the loss value, not its cost)");
    }
    ft_note(r, P_LD_ALPHA, DT_UKEY_NO_EFFECT, "weights the log-probs of the verbose tokens: elementwise");
    ft_note(r, P_SIMPO_GAMMA, DT_UKEY_NO_EFFECT, "%s", o->pref_loss == DT_PREF_SIMPO ? "simpo's margin: a scalar"
                                                                                     : "used only with pref_loss: simpo");
    const int ref_free = dt_pref_loss_ref_free(o->pref_loss);
    const int lora = !strcmp(c->finetuning_type[0] ? c->finetuning_type : "lora", "lora");
    if (r->ft[P_REF].set && !ref_free) {
        if (lora)   /* create_ref_model loads it beside the LoRA policy: a full frozen copy */
            return ft_fail(r, P_REF, err, "a separate reference beside a LoRA policy is not modelled (the plan's LoRA "
                                          "reference is the policy with its adapters disabled, what LLaMA-Factory "
                                          "does without ref_model); remove ref_model");
        snprintf(c->ref_model, sizeof c->ref_model, "%s", r->ft[P_REF].v.s);
        c->ref_model_line = r->ft[P_REF].line;
        ft_note(r, P_REF, DT_UKEY_USED, "the frozen reference: it must have the policy's shape (checked)");
    } else if (r->ft[P_REF].set) {
        ft_note(r, P_REF, DT_UKEY_NO_EFFECT, "pref_loss %s uses no reference", dt_pref_loss_name(o->pref_loss));
    }
    ft_note(r, P_REF_ADAPTERS, DT_UKEY_NO_EFFECT, "merged into the reference's weights when it loads: the same shape");
    if (ft_on(r, P_REF_QBIT) && !ref_free && !lora)
        return ft_fail(r, P_REF_QBIT, err, "a bitsandbytes-quantised reference is not modelled (the plan's reference is "
                                           "held in the training dtype); remove it");
    if (ft_on(r, P_REF_QBIT))
        ft_note(r, P_REF_QBIT, DT_UKEY_NO_EFFECT, "no separate reference is loaded (%s)", ref_free ? "orpo / simpo" : "LoRA");
    return DT_OK;
}

/* After every key: contradictions and the formats' defaults. */
static int finish(reader *r, dt_error *err, int bf16, int fp16, int pure) {
    dt_usercfg *c = r->c;
    if (bf16 && fp16)
        return dt_errorf(err, DT_EINVAL, "%s: bf16: true and fp16: true contradict (the Trainer refuses both); keep one",
                         r->file);
    if (pure && fp16)
        return dt_errorf(err, DT_EINVAL, "%s: pure_bf16: true and fp16: true contradict; keep one", r->file);
    if (c->format != DT_UCFG_RUNBOOK || bf16 || fp16) {
        if (pure) c->precision = DT_PREC_PURE_BF16;
        else if (bf16) c->precision = DT_PREC_MIXED_BF16;
        else if (fp16) c->precision = DT_PREC_MIXED_FP16;
        else if (c->precision < 0) c->precision = DT_PREC_FP32;   /* TrainingArguments: neither = fp32 */
    }
    if (c->format == DT_UCFG_LLAMAFACTORY) {
        if (c->ckpt < 0) c->ckpt = 1;           /* disable_gradient_checkpointing defaults to false */
        if (!c->seq_len) c->seq_len = DT_LF_DEFAULT_CUTOFF;
        if (!c->attention[0]) snprintf(c->attention, sizeof c->attention, "sdpa");   /* flash_attn: auto */
    }
    if (c->total_batch && c->micro_batch)
        return dt_errorf(err, DT_EINVAL,
                         "%s: training.batch_size (the total over the GPUs) and a per-GPU batch size are both given; "
                         "keep one", r->file);
    int rc = finish_method(r, err);
    if (!rc) rc = finish_objective(r, err);
    c->methods_refused = rc != DT_OK;
    return rc;
}

static int read_root(reader *r, yaml_node_t *root, dt_error *err) {
    dt_usercfg *c = r->c;
    int rc;
    if (c->format == DT_UCFG_RUNBOOK) {
        yaml_node_t *t = NULL;
        if (!map_has(r->doc, root, "training", &t) || !t || t->type != YAML_MAPPING_NODE)
            return dt_errorf(err, DT_EINVAL, "%s: a runbook config needs a 'training:' mapping", r->file);
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
            yaml_node_t *kn = yaml_document_get_node(r->doc, p->key), *vn = yaml_document_get_node(r->doc, p->value);
            const char *k = kn && kn->type == YAML_SCALAR_NODE ? (const char *)kn->data.scalar.value : "";
            int line = kn ? (int)kn->start_mark.line + 1 : 0;
            if (!strcmp(k, "training")) continue;
            if ((!strcmp(k, "model_name_or_path") || !strcmp(k, "model")) && vn && vn->type == YAML_SCALAR_NODE) {
                snprintf(c->model, sizeof c->model, "%s", (const char *)vn->data.scalar.value);
                note_key(r, k, DT_UKEY_USED, line, "the model");
                continue;
            }
            yaml_node_t *name = NULL;
            if (!strcmp(k, "model") && vn && vn->type == YAML_MAPPING_NODE &&
                (map_has(r->doc, vn, "model_name_or_path", &name) || map_has(r->doc, vn, "name_or_path", &name) ||
                 map_has(r->doc, vn, "name", &name)) && name && name->type == YAML_SCALAR_NODE) {
                snprintf(c->model, sizeof c->model, "%s", (const char *)name->data.scalar.value);
                note_key(r, "model", DT_UKEY_USED, line, "the model (its other keys are not read)");
                continue;
            }
            note_key(r, k, DT_UKEY_NO_EFFECT, line, "section not read: dtplan reads training: and the model");
        }
        const key_rule *tables[] = {k_runbook, k_hf};
        const size_t sizes[] = {N_OF(k_runbook), N_OF(k_hf)};
        rc = read_map(r, t, "training", tables, sizes, 2, err);
    } else {
        const key_rule *tables[] = {k_lf, k_hf};
        const size_t sizes[] = {N_OF(k_lf), N_OF(k_hf)};
        const key_rule *hf_tables[] = {k_hf, k_hf_data};
        const size_t hf_sizes[] = {N_OF(k_hf), N_OF(k_hf_data)};
        rc = c->format == DT_UCFG_LLAMAFACTORY ? read_map(r, root, NULL, tables, sizes, 2, err)
                                               : read_map(r, root, NULL, hf_tables, hf_sizes, 2, err);
    }
    if (rc) return rc;
    return finish(r, err, r->bf16, r->fp16, r->pure);
}

int dt_usercfg_parse(const char *text, size_t len, const char *path, dt_ucfg_format fmt, dt_usercfg *out,
                     dt_error *err) {
    if (!text || !out) return dt_errorf(err, DT_EINTERNAL, "dt_usercfg_parse: NULL argument");
    memset(out, 0, sizeof *out);
    out->precision = out->ckpt = out->strategy_stage = out->schedule = -1;
    out->weight_decay = out->adam_beta1 = out->adam_beta2 = out->adam_eps = out->max_grad_norm = -1;
    out->warmup_steps = -1;
    out->warmup_ratio = -1;
    if (!path) path = "config";
    snprintf(out->path, sizeof out->path, "%s", path);
    reader r;
    memset(&r, 0, sizeof r);
    r.c = out;
    r.file = path;
    r.dir[0] = '.';
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(r.dir, sizeof r.dir, "%.*s", (int)(slash - path), path);
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) i++;
    r.json = i < len && text[i] == '{';

    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        int line = (int)parser.problem_mark.line + 1, col = (int)parser.problem_mark.column + 1;
        int rc = dt_errorf(err, DT_EINVAL, "%s:%d:%d: YAML syntax error: %s%s%s", path, line, col,
                           parser.problem ? parser.problem : "malformed", parser.context ? " " : "",
                           parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return rc;
    }
    r.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc;
    if (!root) rc = dt_errorf(err, DT_EINVAL, "%s: the config is empty", path);
    else if (root->type != YAML_MAPPING_NODE)
        rc = dt_errorf(err, DT_EINVAL, "%s:%d: the config must be a mapping of keys (key: value lines)", path,
                       (int)root->start_mark.line + 1);
    else {
        out->format = fmt == DT_UCFG_AUTO ? detect(&doc, root) : fmt;
        rc = read_root(&r, root, err);
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

int dt_usercfg_load(const char *path, dt_ucfg_format fmt, dt_usercfg *out, dt_error *err) {
    char *text = NULL;
    size_t len = 0;
    int rc = dt_read_file(path, DT_UCFG_MAX_BYTES, &text, &len, err);
    if (rc == DT_EIO) err->code = rc = DT_EINVAL;   /* a --config the user named: bad input */
    if (rc) return dt_error_prefix(err, "--config"), rc;
    rc = dt_usercfg_parse(text, len, path, fmt, out, err);
    free(text);
    return rc;
}

/* ------------------------------------------------------------ model_name_or_path */

static int config_in_dir(const char *dir, char *out, size_t n) {
    char p[5 * DT_PATH_MAX];
    int w = snprintf(p, sizeof p, "%s/config.json", dir);
    if (w < 0 || (size_t)w >= sizeof p || !file_exists(p) || strlen(p) >= n) return 0;
    snprintf(out, n, "%s", p);
    return 1;
}

/* $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub (huggingface_hub constants.py). */
static void hub_cache(char *out, size_t n) {
    const char *hub = getenv("HF_HUB_CACHE"), *home = getenv("HF_HOME"), *user = getenv("HOME");
    if (hub && *hub) snprintf(out, n, "%s", hub);
    else if (home && *home) snprintf(out, n, "%s/hub", home);
    else snprintf(out, n, "%s/.cache/huggingface/hub", user && *user ? user : ".");
}

/* A text model or a vision-language one (its language model in m: the command resolves the
 * name again with the tower, docs/vlm.md). */
static int resolve_any(const char *name, dt_model *m, dt_error *err) {
    dt_vlm v;
    return dt_model_resolve_vlm(name, m, &v, err);
}

int dt_usercfg_model(const char *spec, dt_model *m, char *resolved, size_t n, dt_error *err) {
    struct stat st;
    if (!spec || !*spec) return dt_errorf(err, DT_EINVAL, "model_name_or_path is empty");
    if (stat(spec, &st) == 0) {
        if (S_ISDIR(st.st_mode) && !config_in_dir(spec, resolved, n))
            return dt_errorf(err, DT_EINVAL, "model_name_or_path '%s' is a directory without config.json", spec);
        if (!S_ISDIR(st.st_mode)) snprintf(resolved, n, "%s", spec);
        return resolve_any(resolved, m, err);
    }
    const char *slash = strchr(spec, '/');
    int hub_id = slash && slash > spec && slash[1] && !strchr(slash + 1, '/') && spec[0] != '.';
    char cache[DT_PATH_MAX], snaps[3 * DT_PATH_MAX] = "";
    hub_cache(cache, sizeof cache);
    if (hub_id) {
        snprintf(snaps, sizeof snaps, "%s/models--%.*s--%s/snapshots", cache, (int)(slash - spec), spec, slash + 1);
        DIR *d = opendir(snaps);
        int found = 0;
        if (d) {
            struct dirent *e;
            while (!found && (e = readdir(d))) {
                if (e->d_name[0] == '.') continue;
                char dir[4 * DT_PATH_MAX];
                snprintf(dir, sizeof dir, "%s/%s", snaps, e->d_name);
                found = config_in_dir(dir, resolved, n);
            }
            closedir(d);
        }
        if (found) return resolve_any(resolved, m, err);
    } else if (slash) {
        return dt_errorf(err, DT_EINVAL, "model_name_or_path '%s' does not exist (a local directory with config.json, "
                                         "a hub id ORG/NAME in the Hugging Face cache, or a catalog name)", spec);
    }
    /* a catalog name, or ORG/NAME whose NAME is one (the catalog holds the publishers' config.json) */
    const char *name = hub_id ? slash + 1 : spec;
    snprintf(resolved, n, "%s", name);
    dt_error e2;
    if (resolve_any(name, m, &e2) == DT_OK) return DT_OK;
    if (!hub_id) return *err = e2, err->code;
    return dt_errorf(err, DT_EINVAL,
                     "model_name_or_path '%s': not in the Hugging Face cache (%s has no config.json; dtplan never "
                     "downloads) and '%s' is not a catalog model; download it (huggingface-cli download %s "
                     "config.json) or give --model NAME|config.json",
                     spec, snaps, name, spec);
}
