/* dt_dsconfig.h — DeepSpeed interoperability for dtplan:
 *   1. importing a DeepSpeed config JSON (zero1/2/3.json) with DeepSpeed's own
 *      validation rules and Hugging Face Trainer's "auto" resolution
 *      (DeepSpeed 0.16.5 deepspeed/runtime/config.py and runtime/zero/; HF transformers
 *      integrations/deepspeed.py; docs/memory-model.md "DeepSpeed configs"), and
 *   2. DeepSpeed's own model-state estimators, estimate_zero2/zero3_model_states_
 *      mem_needs, for `dtplan estimate --compare deepspeed`
 *      (deepspeed/runtime/zero/stage_1_and_2.py and stage3.py; docs/memory-model.md
 *      "--compare deepspeed").
 * Units: *_elems are elements, everything else in bytes unless the name says so. */
#ifndef DT_DSCONFIG_H
#define DT_DSCONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "dt_plan.h"

/* ------------------------------------------------------------------ config */

#define DT_DS_MAX_NOTES 32
#define DT_DS_NOTE_MAX 200

/* Lines worth telling the user (ignored keys, how each "auto" was resolved). */
typedef struct dt_ds_notes {
    int n;
    char line[DT_DS_MAX_NOTES][DT_DS_NOTE_MAX];
} dt_ds_notes;

/* A config value as written: absent, a number/bool/string, or "auto". */
typedef enum { DT_DS_ABSENT = 0, DT_DS_SET = 1, DT_DS_AUTO = 2 } dt_ds_state;

typedef struct dt_ds_int {
    dt_ds_state state;
    int64_t value;           /* meaningful when state == DT_DS_SET */
} dt_ds_int;

typedef struct dt_ds_num {
    dt_ds_state state;
    double value;
} dt_ds_num;

typedef struct dt_dsconfig {
    /* batch triple (top level) */
    dt_ds_int train_batch;        /* train_batch_size */
    dt_ds_int micro_batch;        /* train_micro_batch_size_per_gpu */
    dt_ds_int grad_accum;         /* gradient_accumulation_steps */
    dt_ds_num grad_clip;          /* gradient_clipping (DeepSpeed code default 0 = off) */
    /* zero_optimization */
    int zero_stage;               /* 0..3 (absent section: 0) */
    dt_offload offload_optimizer;
    dt_offload offload_param;
    char nvme_path[DT_PATH_MAX];  /* from offload_optimizer/offload_param nvme_path */
    dt_ds_int reduce_bucket;      /* elements */
    dt_ds_int allgather_bucket;
    dt_ds_int prefetch_bucket;    /* stage3_prefetch_bucket_size */
    dt_ds_int max_live;           /* stage3_max_live_parameters */
    dt_ds_int sub_group;          /* sub_group_size */
    dt_ds_int persistence;        /* stage3_param_persistence_threshold (runtime deepspeed) */
    dt_ds_int reuse_distance;     /* stage3_max_reuse_distance (runtime deepspeed) */
    int overlap_comm;             /* -1 absent (DeepSpeed: true iff stage 3) */
    double offload_ratio;         /* offload_optimizer.ratio (1 when absent) */
    int64_t hpz;                  /* zero_hpz_partition_size (1 when absent) */
    int quantized_weights;        /* zero_quantized_weights */
    int quantized_gradients;      /* zero_quantized_gradients */
    int reduce_scatter_off;       /* zero_optimization.reduce_scatter false */
    int comm_dtype_set;           /* communication_data_type given (not null) */
    dt_dtype comm_dtype;
    /* precision */
    dt_ds_state fp16, bf16;       /* enabled flags: SET means the value in *_on */
    int fp16_on, bf16_on;
    double loss_scale;            /* fp16.loss_scale (0 = dynamic) */
    int initial_scale_power, loss_scale_window, hysteresis;
    double min_loss_scale;
    int has_dynamic_args;         /* any of the scaler keys present (DeepSpeed's get_dynamic_loss_scale_args) */
    /* optimizer (AdamW family) */
    int has_optimizer;
    char optimizer_type[32];
    dt_ds_num lr, beta1, beta2, eps, weight_decay;
    /* scheduler */
    int has_scheduler;
    char scheduler_type[32];
    dt_ds_num warmup_min_lr, warmup_max_lr, warmup_num_steps, total_num_steps, cos_min_ratio;
    dt_ds_num warmup_min_ratio;   /* WarmupCosineLR's warmup start, a fraction of lr */
    int warmup_linear;            /* warmup_type "linear" (default "log") */
    /* what DeepSpeed ignores but a user should know (unknown top-level keys, ...) */
    dt_ds_notes notes;
} dt_dsconfig;

/* Parses and validates a DeepSpeed config text the way DeepSpeed 0.16 does:
 * duplicate keys, unknown keys inside zero_optimization / offload_* (pydantic
 * extra="forbid"), stage > 3, wrong types, bf16 + fp16 together. what names the
 * source in messages (a path). Unknown top-level keys are not errors (DeepSpeed
 * ignores them) but are listed in out->notes. */
int dt_dsconfig_parse(const char *json, const char *what, dt_dsconfig *out, dt_error *err);
int dt_dsconfig_load(const char *path, dt_dsconfig *out, dt_error *err);

/* Applies the config to a plan whose model, cluster (world size) and CLI values
 * are already filled: "auto" takes the plan's value (what HF Trainer fills from
 * TrainingArguments: micro-batch, accumulation, clipping, lr, precision) or HF's
 * model-derived rule (reduce_bucket_size = h*h, stage3_prefetch_bucket_size =
 * 0.9*h*h). Then checks what DeepSpeed checks at initialize(): the batch triple
 * (inference + "Check batch related parameters..." wording), stage/offload
 * combinations. Each resolved "auto" is appended to notes (may be NULL). */
int dt_dsconfig_apply(const dt_dsconfig *c, dt_plan *p, dt_ds_notes *notes, dt_error *err);

/* For a plan whose runtime is deepspeed (dt_plan_set_runtime first): the keys only that
 * profile models, stage3_max_reuse_distance and stage3_param_persistence_threshold
 * ("auto": HF Trainer's 10 x hidden for the threshold, DeepSpeed's default for the
 * distance), reduce_scatter, communication_data_type, offload_optimizer.ratio and ZeRO++'s
 * zero_hpz_partition_size, zero_quantized_weights and zero_quantized_gradients (stage 3;
 * DT_EINVAL where DeepSpeed
 * would refuse them: an hpZ group size that does not divide the world); each "auto" and
 * each key DeepSpeed would ignore is noted. */
int dt_dsconfig_apply_runtime(const dt_dsconfig *c, dt_plan *p, dt_ds_notes *notes, dt_error *err);

/* DeepSpeed's stage/offload rules, shared by the config reader and the CLI:
 * offload_optimizer needs stage >= 1, nvme optimizer offload and any offload_param
 * need stage 3. */
int dt_ds_check_offload(int stage, dt_offload opt, dt_offload param, dt_error *err);

/* -------------------------------------------------------------- estimators */

/* DeepSpeed's additional_buffer_factor default (CPU numbers only). */
#define DT_DS_BUFFER_FACTOR 1.5

/* estimate_zero2_model_states_mem_needs (current code, since DeepSpeed PR #5099). */
void dt_ds_zero2_mem(int64_t total_params, int64_t gpus_per_node, int64_t nodes, int cpu_offload,
                     double buffer_factor, int64_t *cpu_bytes, int64_t *gpu_bytes);
/* The pre-#5099 (<= v0.14.2) GPU line: 4P + 16P/G, still printed by the docs. */
int64_t dt_ds_zero2_gpu_legacy(int64_t total_params, int64_t gpus);
/* estimate_zero3_model_states_mem_needs. */
void dt_ds_zero3_mem(int64_t total_params, int64_t largest_layer_params, int64_t gpus_per_node,
                     int64_t nodes, int cpu_offload, int cpu_offload_params, int zero_init,
                     double buffer_factor, int64_t *cpu_bytes, int64_t *gpu_bytes);

/* The *_all_cold printouts, byte-for-byte in DeepSpeed's format (Python <= 3.10
 * enum formatting, "cpu "), into buf. Return the length written (truncated to n-1). */
size_t dt_ds_format_zero2_cold(int64_t total_params, int64_t gpus_per_node, int64_t nodes,
                               char *buf, size_t n);
size_t dt_ds_format_zero3_cold(int64_t total_params, int64_t largest_layer_params,
                               int64_t gpus_per_node, int64_t nodes, char *buf, size_t n);

#endif
