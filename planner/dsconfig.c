/* dsconfig.c — DeepSpeed config import (`dtplan estimate --deepspeed zero3.json`).
 *
 * Rules reproduced (DeepSpeed @ 38327e07 = 0.16.5: deepspeed/runtime/config.py,
 * runtime/zero/config.py, runtime/zero/offload_config.py; HF transformers
 * integrations/deepspeed.py for "auto"; docs/memory-model.md "DeepSpeed configs"):
 *   - duplicate keys are an error (dict_raise_error_on_duplicate_keys);
 *   - zero_optimization, offload_optimizer, offload_param are pydantic models with
 *     extra="forbid": unknown keys are errors; field names and aliases both accepted;
 *   - unknown top-level keys are ignored by DeepSpeed (noted, not rejected);
 *   - "auto" inside pydantic sections means the field default, except the keys HF
 *     Trainer fills first (reduce_bucket_size = h*h, stage3_prefetch_bucket_size =
 *     0.9*h*h, stage3_param_persistence_threshold = 10*h); top-level "auto" values
 *     are filled by HF Trainer from TrainingArguments (= the plan's values here);
 *   - stage > 3: "Maximum supported ZeRO stage is 3"; bf16 + fp16 both enabled;
 *     partial offload (ratio < 1) only with stage 3; the batch triple inference and
 *     its assertion messages, word for word (DeepSpeedConfig._batch_assertion). */
#include "dt_dsconfig.h"

#include <math.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dt_json.h"

/* HF Trainer's "auto" rules (transformers/integrations/deepspeed.py) */
#define HF_PREFETCH_FRACTION 0.9   /* stage3_prefetch_bucket_size = 0.9 * h * h */
#define HF_PERSISTENCE_PER_HIDDEN 10 /* stage3_param_persistence_threshold = 10 * h */
/* FusedAdam constructor defaults, used when an optimizer section omits a param */
#define DS_ADAM_LR 1e-3
#define DS_ADAM_BETA1 0.9
#define DS_ADAM_BETA2 0.999
#define DS_ADAM_EPS 1e-8
#define DS_ADAM_WD 0.0
/* WarmupLR defaults (deepspeed/runtime/lr_schedules.py) */
#define DS_WARMUP_MAX_LR 1e-3
#define DS_WARMUP_STEPS 1000
#define DS_COS_MIN_RATIO 1e-4
/* fp16 scaler defaults when no dynamic-scale key is given (ZeRO path: DynamicLossScaler,
 * deepspeed/runtime/fp16/loss_scaler.py) */
#define DS_CLASS_INIT_SCALE_POWER 32
#define DS_CLASS_HYSTERESIS 1
/* ... and the fp16 section's documented defaults */
#define DS_INITIAL_SCALE_POWER 16
#define DS_LOSS_SCALE_WINDOW 1000
#define DS_HYSTERESIS 2
#define DS_MIN_LOSS_SCALE 1.0
/* the plan's bound on fp16's initial_scale_power (2^64: far above any gradient range) */
#define DS_MAX_SCALE_POWER 64
/* sanity bound on each batch number so micro * gas * world cannot overflow */
#define DS_BATCH_MAX ((int64_t)1 << 30)

static void note(dt_ds_notes *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(dt_ds_notes *n, const char *fmt, ...) {
    if (!n || n->n >= DT_DS_MAX_NOTES) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->line[n->n++], DT_DS_NOTE_MAX, fmt, ap);
    va_end(ap);
}

static int is_auto(const cJSON *v) {
    return cJSON_IsString(v) && v->valuestring && !strcmp(v->valuestring, "auto");
}

/* ------------------------------------------------------------ key tables */

static const char *const k_top_known[] = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "steps_per_print", "wall_clock_breakdown", "memory_breakdown", "dump_state",
    "zero_optimization", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
    "fp16", "bf16", "bfloat16", "amp", "torch_autocast", "gradient_clipping", "optimizer",
    "scheduler", "prescale_gradients", "gradient_predivide_factor", "sparse_gradients",
    "communication_data_type", "seq_parallel_communication_data_type", "disable_allgather",
    "activation_checkpointing", "aio", "flops_profiler", "tensorboard", "wandb", "csv_monitor",
    "comet", "comms_logger", "monitor_config", "elasticity", "autotuning", "pipeline",
    "checkpoint", "data_types", "data_efficiency", "curriculum_learning",
    "compression_training", "sparse_attention", "nebula", "eigenvalue",
    "progressive_layer_drop", "quantize_training", "weight_quantization", "hybrid_engine",
    "compile", "timers", "graph_harvesting", "dataloader_drop_last", "zero_optimization_stage",
    "use_data_before_expert_parallel_", "mics_shard_size", NULL};

/* DeepSpeedZeroConfig fields (and aliases) — extra="forbid" */
static const char *const k_zero_known[] = {
    "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size",
    "use_multi_rank_bucket_allreduce", "allgather_partitions", "allgather_bucket_size",
    "overlap_comm", "load_from_fp32_weights", "elastic_checkpoint", "offload_param",
    "offload_optimizer", "sub_group_size", "cpu_offload", "cpu_offload_param",
    "cpu_offload_use_pin_memory", "prefetch_bucket_size", "stage3_prefetch_bucket_size",
    "param_persistence_threshold", "stage3_param_persistence_threshold",
    "model_persistence_threshold", "stage3_model_persistence_threshold",
    "max_live_parameters", "stage3_max_live_parameters", "max_reuse_distance",
    "stage3_max_reuse_distance", "gather_16bit_weights_on_model_save",
    "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
    "module_granularity_threshold", "stage3_module_granularity_threshold",
    "use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params",
    "ignore_unused_parameters", "legacy_stage1", "round_robin_gradients",
    "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_nontrainable_weights",
    "zero_quantized_gradients", "zeropp_loco_param", "mics_shard_size",
    "mics_hierarchical_params_gather", "memory_efficient_linear", "pipeline_loading_checkpoint",
    "override_module_apply", "log_trace_cache_warnings", NULL};

static const char *const k_offopt_known[] = {"device", "nvme_path", "buffer_count", "pin_memory",
                                             "pipeline", "pipeline_read", "pipeline_write",
                                             "fast_init", "ratio", NULL};
static const char *const k_offparam_known[] = {"device", "nvme_path", "buffer_count",
                                               "buffer_size", "max_in_cpu", "pin_memory", NULL};

static int in_list(const char *const *list, const char *key) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], key)) return 1;
    return 0;
}

/* pydantic extra="forbid": the first unknown key is an error naming its path */
static int forbid_unknown(const cJSON *obj, const char *path, const char *const *known,
                          const char *section, dt_error *err) {
    for (const cJSON *c = obj->child; c; c = c->next)
        if (!in_list(known, c->string)) {
            char p[DT_JSON_PATH_MAX];
            dt_json_path_join(p, sizeof p, path, c->string);
            return dt_errorf(err, DT_EINVAL,
                             "%s: unknown key: DeepSpeed's %s accepts no extra keys (pydantic: "
                             "\"Extra inputs are not permitted\")",
                             p, section);
        }
    return DT_OK;
}

/* ------------------------------------------------------------ typed reads */

static int bad(const char *path, const char *key, const char *want, const cJSON *v,
               dt_error *err) {
    char p[DT_JSON_PATH_MAX], desc[64];
    dt_json_path_join(p, sizeof p, path, key);
    dt_json_describe(v, desc, sizeof desc);
    return dt_errorf(err, DT_EINVAL, "%s: expected %s, got %s", p, want, desc);
}

/* the item for key, or for its alias; both given is an error */
static const cJSON *get2(const cJSON *obj, const char *path, const char *key, const char *alias,
                         const char **used, dt_error *err, int *rc) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
    const cJSON *b = alias ? cJSON_GetObjectItemCaseSensitive(obj, alias) : NULL;
    *rc = DT_OK;
    if (a && b) {
        char p[DT_JSON_PATH_MAX];
        dt_json_path_join(p, sizeof p, path, key);
        *rc = dt_errorf(err, DT_EINVAL, "%s: given twice (also as \"%s\"): keep one", p, alias);
        return NULL;
    }
    *used = a ? key : alias;
    return a ? a : b;
}

/* integral number in [min, max], or "auto" */
static int read_int(const cJSON *obj, const char *path, const char *key, const char *alias,
                    int64_t min, int64_t max, dt_ds_int *out, dt_error *err) {
    int rc;
    const char *used = key;
    const cJSON *v = get2(obj, path, key, alias, &used, err, &rc);
    if (rc) return rc;
    if (!v) {
        out->state = DT_DS_ABSENT;
        return DT_OK;
    }
    if (is_auto(v)) {
        out->state = DT_DS_AUTO;
        return DT_OK;
    }
    char want[80];
    if (min == INT64_MIN)
        snprintf(want, sizeof want, "an integer or \"auto\"");
    else if (max == INT64_MAX)
        snprintf(want, sizeof want, "an integer >= %lld or \"auto\"", (long long)min);
    else
        snprintf(want, sizeof want, "an integer in [%lld, %lld] or \"auto\"", (long long)min, (long long)max);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        fabs(v->valuedouble) > (double)DT_JSON_MAX_EXACT_INT || v->valuedouble < (double)min ||
        v->valuedouble > (double)max)
        return bad(path, used, want, v, err);
    out->state = DT_DS_SET;
    out->value = (int64_t)v->valuedouble;
    return DT_OK;
}

/* A number in [lo, hi] (lo excluded when lo_open; hi = INFINITY: no upper bound), or
 * "auto". integral: whole numbers only (step counts). */
typedef struct {
    double lo, hi;
    int lo_open, integral;
} ds_range;
#define DS_NONNEG ((ds_range){0, INFINITY, 0, 0})
#define DS_POS ((ds_range){0, INFINITY, 1, 0})
#define DS_UNIT ((ds_range){0, 1, 0, 0})
#define DS_STEPS ((ds_range){0, (double)DT_JSON_MAX_EXACT_INT, 0, 1})

static int read_num(const cJSON *obj, const char *path, const char *key, ds_range r, dt_ds_num *out,
                    dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) {
        out->state = DT_DS_ABSENT;
        return DT_OK;
    }
    if (is_auto(v)) {
        out->state = DT_DS_AUTO;
        return DT_OK;
    }
    char want[80];
    if (r.integral) snprintf(want, sizeof want, "an integer >= %g or \"auto\"", r.lo);
    else if (isinf(r.hi)) snprintf(want, sizeof want, "a number %s %g or \"auto\"", r.lo_open ? ">" : ">=", r.lo);
    else snprintf(want, sizeof want, "a number in [%g, %g] or \"auto\"", r.lo, r.hi);
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(x) || x < r.lo || (r.lo_open && x == r.lo) || x > r.hi || (r.integral && x != floor(x)))
        return bad(path, key, want, v, err);
    out->state = DT_DS_SET;
    out->value = x;
    return DT_OK;
}

/* Keys DeepSpeed's pydantic models type-check that dtplan does not otherwise read:
 * a wrong type or a negative count is refused as DeepSpeed refuses it. */
static int check_typed(const cJSON *obj, const char *path, const char *const *bools, const char *const *counts,
                       dt_error *err) {
    for (int i = 0; bools && bools[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, bools[i]);
        if (v && !cJSON_IsBool(v)) return bad(path, bools[i], "true or false", v, err);
    }
    for (int i = 0; counts && counts[i]; i++) {
        dt_ds_int n;
        int rc = read_int(obj, path, counts[i], NULL, 0, INT64_MAX, &n, err);
        if (rc) return rc;
    }
    return DT_OK;
}

/* JSON bool; "auto" -> state AUTO. Absent leaves *on untouched. */
static int read_bool(const cJSON *obj, const char *path, const char *key, dt_ds_state *state,
                     int *on, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (state) *state = DT_DS_ABSENT;
    if (!v) return DT_OK;
    if (is_auto(v) && state) {
        *state = DT_DS_AUTO;
        return DT_OK;
    }
    if (!cJSON_IsBool(v)) return bad(path, key, state ? "true, false or \"auto\"" : "true or false", v, err);
    if (state) *state = DT_DS_SET;
    *on = cJSON_IsTrue(v) ? 1 : 0;
    return DT_OK;
}

static int read_object(const cJSON *parent, const char *path, const char *key, const cJSON **out,
                       char *child_path, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(parent, key);
    *out = NULL;
    dt_json_path_join(child_path, DT_JSON_PATH_MAX, path, key);
    if (!v || cJSON_IsNull(v)) return DT_OK;
    if (!cJSON_IsObject(v)) return bad(path, key, "an object", v, err);
    *out = v;
    return DT_OK;
}

/* ------------------------------------------------------------ sections */

static int read_offload(const cJSON *zero, const char *path, const char *key, int is_param,
                        dt_offload *dev, dt_dsconfig *c, double *ratio, dt_error *err) {
    const cJSON *o;
    char p[DT_JSON_PATH_MAX];
    int rc = read_object(zero, path, key, &o, p, err);
    if (rc || !o) return rc;
    rc = forbid_unknown(o, p, is_param ? k_offparam_known : k_offopt_known,
                        is_param ? "offload_param config" : "offload_optimizer config", err);
    if (rc) return rc;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "device");
    if (d && !is_auto(d)) {
        if (!cJSON_IsString(d) || dt_offload_parse(d->valuestring, dev, NULL) != DT_OK)
            return bad(p, "device", "one of \"none\", \"cpu\", \"nvme\"", d, err);
    }
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(o, "nvme_path");
    if (np && !cJSON_IsNull(np)) {
        if (!cJSON_IsString(np) || strlen(np->valuestring) >= DT_PATH_MAX)
            return bad(p, "nvme_path", "a path string", np, err);
        snprintf(c->nvme_path, sizeof c->nvme_path, "%s", np->valuestring);
    }
    if (*dev == DT_OFFLOAD_NVME && !c->nvme_path[0]) {
        char q[DT_JSON_PATH_MAX];
        dt_json_path_join(q, sizeof q, p, "nvme_path");
        return dt_errorf(err, DT_EINVAL, "%s: required when device is \"nvme\" (a directory on the NVMe drive)", q);
    }
    /* DeepSpeedZeroOffloadOptimizerConfig / ...ParamConfig field types (ge=0 counts) */
    static const char *const opt_bools[] = {"pin_memory", "pipeline", "pipeline_read", "pipeline_write", "fast_init",
                                            NULL};
    static const char *const opt_counts[] = {"buffer_count", NULL};
    static const char *const param_bools[] = {"pin_memory", NULL};
    static const char *const param_counts[] = {"buffer_count", "buffer_size", "max_in_cpu", NULL};
    rc = check_typed(o, p, is_param ? param_bools : opt_bools, is_param ? param_counts : opt_counts, err);
    if (rc) return rc;
    if (!is_param) {
        dt_ds_num r = {0};
        rc = read_num(o, p, "ratio", DS_UNIT, &r, err);
        if (rc) return rc;
        if (r.state == DT_DS_SET) *ratio = r.value;
    }
    return DT_OK;
}

static int read_zero(const cJSON *root, dt_dsconfig *c, dt_error *err) {
    const cJSON *z;
    char p[DT_JSON_PATH_MAX];
    int rc = read_object(root, "$", "zero_optimization", &z, p, err);
    if (rc || !z) return rc;
    rc = forbid_unknown(z, p, k_zero_known, "zero_optimization config (DeepSpeedZeroConfig)", err);
    if (rc) return rc;

    const cJSON *st = cJSON_GetObjectItemCaseSensitive(z, "stage");
    if (st && is_auto(st)) {
        note(&c->notes, "%s.stage: \"auto\" -> DeepSpeed's default 0", p);
    } else if (st) {
        if (!cJSON_IsNumber(st) || st->valuedouble != floor(st->valuedouble) || st->valuedouble < 0)
            return bad(p, "stage", "a ZeRO stage 0, 1, 2 or 3", st, err);
        if (st->valuedouble > 3)
            return dt_errorf(err, DT_EINVAL, "%s.stage: %g: Maximum supported ZeRO stage is 3", p,
                             st->valuedouble);
        c->zero_stage = (int)st->valuedouble;
    }
    /* bucket sizes > 0 (a 0-element bucket never fills); the stage-3 counts are
     * DeepSpeedZeroConfig's ge=0 fields */
    if ((rc = read_int(z, p, "reduce_bucket_size", NULL, 1, INT64_MAX, &c->reduce_bucket, err))) return rc;
    if ((rc = read_int(z, p, "allgather_bucket_size", NULL, 1, INT64_MAX, &c->allgather_bucket, err))) return rc;
    if ((rc = read_int(z, p, "stage3_prefetch_bucket_size", "prefetch_bucket_size", 0, INT64_MAX,
                       &c->prefetch_bucket, err)))
        return rc;
    if ((rc = read_int(z, p, "stage3_max_live_parameters", "max_live_parameters", 0, INT64_MAX, &c->max_live,
                       err)))
        return rc;
    /* ge=0; 0: every parameter a sub-group of its own (stage3.py _create_fp16_sub_groups) */
    if ((rc = read_int(z, p, "sub_group_size", NULL, 0, INT64_MAX, &c->sub_group, err))) return rc;
    if ((rc = read_int(z, p, "stage3_param_persistence_threshold", "param_persistence_threshold", 0, INT64_MAX,
                       &c->persistence, err)))
        return rc;
    if ((rc = read_int(z, p, "stage3_max_reuse_distance", "max_reuse_distance", 0, INT64_MAX, &c->reuse_distance,
                       err)))
        return rc;
    static const char *const zero_bools[] = {
        "contiguous_gradients", "reduce_scatter", "use_multi_rank_bucket_allreduce", "allgather_partitions",
        "load_from_fp32_weights", "elastic_checkpoint", "cpu_offload_use_pin_memory",
        "gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save", "use_all_reduce_for_fetch_params",
        "stage3_use_all_reduce_for_fetch_params", "ignore_unused_parameters", "legacy_stage1",
        "round_robin_gradients", "zero_quantized_weights", "zero_quantized_nontrainable_weights",
        "zero_quantized_gradients", "mics_hierarchical_params_gather", "memory_efficient_linear",
        "pipeline_loading_checkpoint", "override_module_apply", "log_trace_cache_warnings", NULL};
    static const char *const zero_counts[] = {"model_persistence_threshold",
                                              "stage3_model_persistence_threshold", "zero_hpz_partition_size", NULL};
    if ((rc = check_typed(z, p, zero_bools, zero_counts, err))) return rc;
    dt_ds_int hpz = {0};
    if ((rc = read_int(z, p, "zero_hpz_partition_size", NULL, 0, INT64_MAX, &hpz, err))) return rc;
    if (hpz.state == DT_DS_SET && hpz.value > 1) c->hpz = hpz.value;
    if ((rc = read_bool(z, p, "zero_quantized_weights", NULL, &c->quantized_weights, err))) return rc;
    if ((rc = read_bool(z, p, "zero_quantized_gradients", NULL, &c->quantized_gradients, err))) return rc;
    int rs = 1;
    if ((rc = read_bool(z, p, "reduce_scatter", NULL, &rs, err))) return rc;
    c->reduce_scatter_off = !rs;
    dt_ds_state ov = DT_DS_ABSENT;
    int on = 0;
    if ((rc = read_bool(z, p, "overlap_comm", &ov, &on, err))) return rc;
    c->overlap_comm = ov == DT_DS_SET ? on : -1;

    /* deprecated spellings map onto the offload sections */
    int legacy = 0;
    if ((rc = read_bool(z, p, "cpu_offload", NULL, &legacy, err))) return rc;
    if (legacy) {
        c->offload_optimizer = DT_OFFLOAD_CPU;
        note(&c->notes, "%s.cpu_offload is deprecated: read as offload_optimizer.device \"cpu\"", p);
    }
    legacy = 0;
    if ((rc = read_bool(z, p, "cpu_offload_param", NULL, &legacy, err))) return rc;
    if (legacy) {
        c->offload_param = DT_OFFLOAD_CPU;
        note(&c->notes, "%s.cpu_offload_param is deprecated: read as offload_param.device \"cpu\"", p);
    }
    double ratio = 1.0;
    if ((rc = read_offload(z, p, "offload_optimizer", 0, &c->offload_optimizer, c, &ratio, err))) return rc;
    c->offload_ratio = ratio;
    if ((rc = read_offload(z, p, "offload_param", 1, &c->offload_param, c, NULL, err))) return rc;
    if (ratio < 1.0 && c->zero_stage != 3)
        return dt_errorf(err, DT_EINVAL,
                         "%s.offload_optimizer.ratio %g: Partial offloading only supported for ZeRO Stage 3.",
                         p, ratio);
    if (c->offload_optimizer != DT_OFFLOAD_NONE || c->offload_param != DT_OFFLOAD_NONE) {
        rc = dt_ds_check_offload(c->zero_stage, c->offload_optimizer, c->offload_param, err);
        if (rc) return dt_error_prefix(err, "%s", p);
    }
    return DT_OK;
}

/* communication_data_type: null, or "fp32" / "fp16" / "bf16" in any case (DeepSpeed's
 * get_communication_data_type, runtime/config.py, and its error's words) */
static int read_comm_dtype(const cJSON *root, dt_dsconfig *c, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "communication_data_type");
    if (!v || cJSON_IsNull(v)) return DT_OK;
    char low[8] = "";
    if (cJSON_IsString(v) && strlen(v->valuestring) < sizeof low)
        for (size_t i = 0; i <= strlen(v->valuestring); i++) low[i] = (char)tolower((unsigned char)v->valuestring[i]);
    if (!strcmp(low, "fp32") || !strcmp(low, "fp16") || !strcmp(low, "bf16")) {
        c->comm_dtype = !strcmp(low, "fp32") ? DT_DTYPE_FP32 : !strcmp(low, "fp16") ? DT_DTYPE_FP16 : DT_DTYPE_BF16;
        c->comm_dtype_set = 1;
        return DT_OK;
    }
    return dt_errorf(err, DT_EINVAL,
                     "$.communication_data_type: Invalid communication_data_type. Supported data types: ['fp16', "
                     "'bf16', 'fp32']. Got: %.40s", cJSON_IsString(v) ? v->valuestring : "a non-string");
}

static int read_precision(const cJSON *root, dt_dsconfig *c, dt_error *err) {
    const cJSON *f, *b;
    char pf[DT_JSON_PATH_MAX], pb[DT_JSON_PATH_MAX];
    int rc = read_object(root, "$", "fp16", &f, pf, err);
    if (rc) return rc;
    if (f) {
        if ((rc = read_bool(f, pf, "enabled", &c->fp16, &c->fp16_on, err))) return rc;
        static const char *const dyn[] = {"initial_scale_power", "loss_scale_window", "min_loss_scale",
                                          "hysteresis", "consecutive_hysteresis", NULL};
        for (int i = 0; dyn[i]; i++)
            if (cJSON_GetObjectItemCaseSensitive(f, dyn[i])) c->has_dynamic_args = 1;
        dt_ds_num v = {0};
        if ((rc = read_num(f, pf, "loss_scale", DS_NONNEG, &v, err))) return rc;   /* 0 = dynamic */
        if (v.state == DT_DS_SET) c->loss_scale = v.value;
        dt_ds_int i = {0};
        /* 2^64 is far above any fp16 gradient range; the counts fit an int */
        if ((rc = read_int(f, pf, "initial_scale_power", NULL, 0, DS_MAX_SCALE_POWER, &i, err))) return rc;
        if (i.state == DT_DS_SET) c->initial_scale_power = (int)i.value;
        if ((rc = read_int(f, pf, "loss_scale_window", NULL, 1, INT32_MAX, &i, err))) return rc;
        if (i.state == DT_DS_SET) c->loss_scale_window = (int)i.value;
        if ((rc = read_int(f, pf, "hysteresis", NULL, 1, INT32_MAX, &i, err))) return rc;
        if (i.state == DT_DS_SET) c->hysteresis = (int)i.value;
        if ((rc = read_num(f, pf, "min_loss_scale", DS_POS, &v, err))) return rc;   /* the scale's floor */
        if (v.state == DT_DS_SET) c->min_loss_scale = v.value;
        static const char *const fp16_bools[] = {"auto_cast", "consecutive_hysteresis", NULL};
        if ((rc = check_typed(f, pf, fp16_bools, NULL, err))) return rc;
        int mw = 0;
        if ((rc = read_bool(f, pf, "fp16_master_weights_and_grads", NULL, &mw, err))) return rc;
        if (mw && c->zero_stage != 2)
            return dt_errorf(err, DT_EINVAL,
                             "%s.fp16_master_weights_and_grads: only supported with ZeRO stage 2 (stage is %d)",
                             pf, c->zero_stage);
    }
    rc = read_object(root, "$", "bf16", &b, pb, err);
    if (rc) return rc;
    if (!b) {
        rc = read_object(root, "$", "bfloat16", &b, pb, err); /* old name, still read */
        if (rc) return rc;
    }
    if (b && (rc = read_bool(b, pb, "enabled", &c->bf16, &c->bf16_on, err))) return rc;
    if (c->fp16 == DT_DS_SET && c->fp16_on && c->bf16 == DT_DS_SET && c->bf16_on)
        return dt_errorf(err, DT_EINVAL, "$.fp16.enabled and $.bf16.enabled: bfloat16 and fp16 modes "
                                         "cannot be simultaneously enabled");
    const cJSON *amp;
    char pa[DT_JSON_PATH_MAX];
    if ((rc = read_object(root, "$", "amp", &amp, pa, err))) return rc;
    int amp_on = 0;
    if (amp && (rc = read_bool(amp, pa, "enabled", NULL, &amp_on, err))) return rc;
    if (amp_on && c->zero_stage > 0)
        return dt_errorf(err, DT_EINVAL, "%s.enabled: Amp and ZeRO are not currently compatible (stage %d)",
                         pa, c->zero_stage);
    if (amp_on && c->fp16 == DT_DS_SET && c->fp16_on)
        return dt_errorf(err, DT_EINVAL, "%s.enabled: amp and fp16 cannot both be enabled", pa);
    return DT_OK;
}

static int read_type(const cJSON *obj, const char *path, char *buf, size_t n, dt_error *err) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!t) return dt_errorf(err, DT_EINVAL, "%s.type: missing required key", path);
    if (!cJSON_IsString(t) || !t->valuestring[0] || strlen(t->valuestring) >= n)
        return bad(path, "type", "a type name string", t, err);
    snprintf(buf, n, "%s", t->valuestring);
    return DT_OK;
}

static int read_optimizer(const cJSON *root, dt_dsconfig *c, dt_error *err) {
    const cJSON *o, *pp;
    char p[DT_JSON_PATH_MAX], q[DT_JSON_PATH_MAX];
    int rc = read_object(root, "$", "optimizer", &o, p, err);
    if (rc || !o) return rc;
    c->has_optimizer = 1;
    if ((rc = read_type(o, p, c->optimizer_type, sizeof c->optimizer_type, err))) return rc;
    if (strcasecmp(c->optimizer_type, "adamw") && strcasecmp(c->optimizer_type, "adam"))
        note(&c->notes, "%s.type \"%s\": dtplan models AdamW's states (master + m + v)", p,
             c->optimizer_type);
    if ((rc = read_object(o, p, "params", &pp, q, err))) return rc;
    if (!pp) return DT_OK;
    /* torch.optim.AdamW refuses lr, eps < 0 ("Invalid learning rate"); a plan needs them > 0 */
    if ((rc = read_num(pp, q, "lr", DS_POS, &c->lr, err))) return rc;
    if ((rc = read_num(pp, q, "eps", DS_POS, &c->eps, err))) return rc;
    if ((rc = read_num(pp, q, "weight_decay", DS_NONNEG, &c->weight_decay, err))) return rc;
    const cJSON *betas = cJSON_GetObjectItemCaseSensitive(pp, "betas");
    if (betas && is_auto(betas)) {
        c->beta1.state = c->beta2.state = DT_DS_AUTO;
    } else if (betas) {
        if (!cJSON_IsArray(betas) || cJSON_GetArraySize(betas) != 2 ||
            !cJSON_IsNumber(cJSON_GetArrayItem(betas, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(betas, 1)))
            return bad(q, "betas", "[beta1, beta2] or \"auto\"", betas, err);
        c->beta1.state = c->beta2.state = DT_DS_SET;
        c->beta1.value = cJSON_GetArrayItem(betas, 0)->valuedouble;
        c->beta2.value = cJSON_GetArrayItem(betas, 1)->valuedouble;
        if (c->beta1.value < 0 || c->beta1.value >= 1 || c->beta2.value < 0 || c->beta2.value >= 1)
            return bad(q, "betas", "two numbers in [0, 1)", betas, err);
    }
    return DT_OK;
}

/* WarmupDecayLR / WarmupCosineLR take total_num_steps as a required argument (no default
 * in deepspeed/runtime/lr_schedules.py): without it DeepSpeed's _scheduler_from_config
 * fails with a TypeError */
static int check_total_given(const dt_dsconfig *c, const char *params_path, dt_error *err) {
    if (c->total_num_steps.state != DT_DS_ABSENT ||
        (strcmp(c->scheduler_type, "WarmupDecayLR") && strcmp(c->scheduler_type, "WarmupCosineLR")))
        return DT_OK;
    return dt_errorf(err, DT_EINVAL, "%s.total_num_steps: required by %s (DeepSpeed has no default); set the "
                     "run's optimizer steps or \"auto\"", params_path, c->scheduler_type);
}

static int read_scheduler(const cJSON *root, dt_dsconfig *c, dt_error *err) {
    const cJSON *s, *pp;
    char p[DT_JSON_PATH_MAX], q[DT_JSON_PATH_MAX];
    int rc = read_object(root, "$", "scheduler", &s, p, err);
    if (rc || !s) return rc;
    c->has_scheduler = 1;
    if ((rc = read_type(s, p, c->scheduler_type, sizeof c->scheduler_type, err))) return rc;
    if (strcmp(c->scheduler_type, "WarmupLR") && strcmp(c->scheduler_type, "WarmupDecayLR") &&
        strcmp(c->scheduler_type, "WarmupCosineLR"))
        note(&c->notes, "%s.type \"%s\": not modelled by dtplan (WarmupLR used for the plan)", p,
             c->scheduler_type);
    if ((rc = read_object(s, p, "params", &pp, q, err))) return rc;
    if (!pp) return check_total_given(c, q, err);
    if ((rc = read_num(pp, q, "warmup_min_lr", DS_NONNEG, &c->warmup_min_lr, err))) return rc;
    if ((rc = read_num(pp, q, "warmup_max_lr", DS_POS, &c->warmup_max_lr, err))) return rc;   /* the plan's lr */
    /* WarmupLR / WarmupDecayLR / WarmupCosineLR.__init__ (deepspeed/runtime/lr_schedules.py,
     * 0.19.8): "warmup_num_steps must be a positive integer" — 0 stops deepspeed.initialize */
    ds_range total = DS_STEPS;
    total.lo = 1;
    if ((rc = read_num(pp, q, "warmup_num_steps", total, &c->warmup_num_steps, err))) return rc;
    if ((rc = read_num(pp, q, "total_num_steps", total, &c->total_num_steps, err))) return rc;
    if ((rc = read_num(pp, q, "cos_min_ratio", DS_UNIT, &c->cos_min_ratio, err))) return rc;
    if ((rc = read_num(pp, q, "warmup_min_ratio", DS_UNIT, &c->warmup_min_ratio, err))) return rc;
    if ((rc = check_total_given(c, q, err))) return rc;
    if (c->warmup_min_lr.state == DT_DS_SET && c->warmup_max_lr.state == DT_DS_SET &&
        c->warmup_min_lr.value > c->warmup_max_lr.value)
        return dt_errorf(err, DT_EINVAL, "%s.warmup_min_lr %g exceeds warmup_max_lr %g: the warmup would lower the lr",
                         q, c->warmup_min_lr.value, c->warmup_max_lr.value);
    /* DeepSpeed only warns ("total_num_steps ... is less than warmup_num_steps"); a plan
     * cannot hold a warmup longer than the run */
    if (c->warmup_num_steps.state == DT_DS_SET && c->total_num_steps.state == DT_DS_SET &&
        c->total_num_steps.value < c->warmup_num_steps.value)
        return dt_errorf(err, DT_EINVAL, "%s: total_num_steps %g is less than warmup_num_steps %g", q,
                         c->total_num_steps.value, c->warmup_num_steps.value);
    const cJSON *wt = cJSON_GetObjectItemCaseSensitive(pp, "warmup_type");
    if (wt && !(cJSON_IsString(wt) && (!strcmp(wt->valuestring, "log") || !strcmp(wt->valuestring, "linear"))))
        return bad(q, "warmup_type", "\"log\" or \"linear\"", wt, err);
    if (wt && !strcmp(wt->valuestring, "linear")) c->warmup_linear = 1;
    return DT_OK;
}

/* ------------------------------------------------------------ keys read, not modelled */

/* Keys DeepSpeed acts on that change memory or time in ways the planner does not model:
 * when a config sets one away from DeepSpeed's default, a note names it and what the
 * prediction assumes instead (nothing a user wrote is dropped without a word). */
typedef enum { WHEN_TRUE, WHEN_FALSE, WHEN_SET, WHEN_POSITIVE } unmodelled_when;
typedef struct {
    const char *section;   /* "" = top level, else a top-level object or zero_optimization's child */
    const char *key;
    unmodelled_when when;
    const char *assumed;   /* what the prediction does instead */
} unmodelled_key;

static const unmodelled_key k_unmodelled[] = {
    {"zero_optimization", "contiguous_gradients", WHEN_FALSE,
     "no contiguous gradient buffer; the prediction keeps DeepSpeed's default reduce bucket"},
    {"zero_optimization", "mics_shard_size", WHEN_POSITIVE,
     "MiCS shards the states within groups of this many ranks; the prediction shards over the world"},
    {"", "mics_shard_size", WHEN_POSITIVE,
     "MiCS shards the states within groups of this many ranks; the prediction shards over the world"},
    {"zero_optimization", "stage3_use_all_reduce_for_fetch_params", WHEN_TRUE,
     "parameters are fetched by all-reduce (twice an all-gather's bytes); the prediction all-gathers"},
    {"zero_optimization", "use_all_reduce_for_fetch_params", WHEN_TRUE,
     "parameters are fetched by all-reduce (twice an all-gather's bytes); the prediction all-gathers"},
    {"zero_optimization", "zero_quantized_nontrainable_weights", WHEN_TRUE,
     "frozen weights kept quantized; the prediction trains every weight in 16 bits"},
    {"zero_optimization", "zeropp_loco_param", WHEN_SET, "qgZ's LoCo error feedback buffers are not counted"},
    {"offload_optimizer", "pipeline_read", WHEN_TRUE, "NVMe reads overlapped with the step; the prediction serialises them"},
    {"offload_optimizer", "pipeline_write", WHEN_TRUE, "NVMe writes overlapped with the step; the prediction serialises them"},
    {"data_types", "grad_accum_dtype", WHEN_SET,
     "gradients accumulate in this dtype; the prediction accumulates them in the gradient dtype"},
    {"fp16", "fp16_master_weights_and_grads", WHEN_TRUE, "fp16 master weights and gradients; the prediction keeps fp32 ones"},
    {"activation_checkpointing", "partition_activations", WHEN_TRUE,
     "applies to models checkpointed through deepspeed.checkpointing only; the prediction keeps whole activations"},
    {"activation_checkpointing", "cpu_checkpointing", WHEN_TRUE,
     "applies to models checkpointed through deepspeed.checkpointing only; the prediction keeps them on the GPU"},
};

/* The object holding a table entry's key (top level, a top-level object, or an object inside
 * zero_optimization) and its JSON path ("$", "$.fp16", "$.zero_optimization.offload_optimizer"). */
static const cJSON *section_of(const cJSON *root, const char *section, char *path, size_t n) {
    snprintf(path, n, "$");
    if (!section[0]) return root;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, section);
    if (s) {
        snprintf(path, n, "$.%s", section);
    } else {
        const cJSON *z = cJSON_GetObjectItemCaseSensitive(root, "zero_optimization");
        s = z ? cJSON_GetObjectItemCaseSensitive(z, section) : NULL;
        snprintf(path, n, "$.zero_optimization.%s", section);
    }
    return cJSON_IsObject(s) ? s : NULL;
}

static int unmodelled_applies(const cJSON *v, unmodelled_when when) {
    switch (when) {
    case WHEN_TRUE: return cJSON_IsTrue(v);
    case WHEN_FALSE: return cJSON_IsFalse(v);
    case WHEN_POSITIVE: return cJSON_IsNumber(v) && v->valuedouble > 0;
    default: return v && !cJSON_IsNull(v) && !is_auto(v);
    }
}

static void note_unmodelled(const cJSON *root, dt_ds_notes *notes) {
    for (size_t i = 0; i < sizeof k_unmodelled / sizeof k_unmodelled[0]; i++) {
        const unmodelled_key *k = &k_unmodelled[i];
        char path[64];
        const cJSON *sec = section_of(root, k->section, path, sizeof path);
        const cJSON *v = sec ? cJSON_GetObjectItemCaseSensitive(sec, k->key) : NULL;
        if (!v || !unmodelled_applies(v, k->when)) continue;
        char val[48];
        if (cJSON_IsString(v)) snprintf(val, sizeof val, "\"%.40s\"", v->valuestring);
        else if (cJSON_IsNumber(v)) snprintf(val, sizeof val, "%g", v->valuedouble);
        else snprintf(val, sizeof val, "%s", cJSON_IsTrue(v) ? "true" : cJSON_IsFalse(v) ? "false" : "set");
        note(notes, "%s.%s %s: not modelled: %s", path, k->key, val, k->assumed);
    }
    /* the profiles' host <-> device bandwidth is pinned memory's: DeepSpeed's default is pageable */
    const cJSON *z = cJSON_GetObjectItemCaseSensitive(root, "zero_optimization");
    static const char *const off[] = {"offload_optimizer", "offload_param"};
    for (int i = 0; i < 2 && z; i++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(z, off[i]);
        const cJSON *d = o ? cJSON_GetObjectItemCaseSensitive(o, "device") : NULL;
        if (!cJSON_IsString(d) || !strcmp(d->valuestring, "none") ||
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "pin_memory")))
            continue;
        note(notes, "$.zero_optimization.%s.pin_memory off (DeepSpeed's default): pageable host buffers copy "
                    "slower than the profile's pinned h2d_bw the prediction uses", off[i]);
    }
}

int dt_dsconfig_parse(const char *json, const char *what, dt_dsconfig *c, dt_error *err) {
    memset(c, 0, sizeof *c);
    c->overlap_comm = -1;
    c->offload_ratio = 1.0;
    c->hpz = 1;
    c->initial_scale_power = DS_INITIAL_SCALE_POWER;
    c->loss_scale_window = DS_LOSS_SCALE_WINDOW;
    c->hysteresis = DS_HYSTERESIS;
    c->min_loss_scale = DS_MIN_LOSS_SCALE;
    cJSON *root = NULL;
    int rc = dt_json_parse(json, what, &root, err); /* syntax, trailing garbage, duplicates */
    if (rc) return rc;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dt_errorf(err, DT_EINVAL, "%s: a DeepSpeed config is a JSON object", what);
    }
    for (const cJSON *k = root->child; k; k = k->next)
        if (!in_list(k_top_known, k->string))
            note(&c->notes, "$.%s: not a DeepSpeed key; DeepSpeed ignores it", k->string);
    /* the batch numbers' signs are checked with DeepSpeed's words when applied */
    if (!rc) rc = read_int(root, "$", "train_batch_size", NULL, INT64_MIN, INT64_MAX, &c->train_batch, err);
    if (!rc)
        rc = read_int(root, "$", "train_micro_batch_size_per_gpu", NULL, INT64_MIN, INT64_MAX, &c->micro_batch, err);
    if (!rc)
        rc = read_int(root, "$", "gradient_accumulation_steps", NULL, INT64_MIN, INT64_MAX, &c->grad_accum, err);
    if (!rc) rc = read_num(root, "$", "gradient_clipping", DS_NONNEG, &c->grad_clip, err);
    if (!rc) rc = read_zero(root, c, err);
    if (!rc) rc = read_comm_dtype(root, c, err);
    if (!rc) rc = read_precision(root, c, err);
    if (!rc) rc = read_optimizer(root, c, err);
    if (!rc) rc = read_scheduler(root, c, err);
    if (!rc) note_unmodelled(root, &c->notes);
    cJSON_Delete(root);
    if (rc) return dt_error_prefix(err, "%s", what);
    return DT_OK;
}

int dt_dsconfig_load(const char *path, dt_dsconfig *out, dt_error *err) {
    char *text = NULL;
    int rc = dt_json_read_file(path, &text, NULL, err);
    if (rc) return rc;
    rc = dt_dsconfig_parse(text, path, out, err);
    free(text);
    return rc;
}

/* DeepSpeed's partial offload and ZeRO++ onto the deepspeed runtime (validate_deepspeed_keys in
 * common/plan.c holds the rules): what DeepSpeed would ignore is noted, what it would
 * refuse is an error. */
static int apply_zeropp(const dt_dsconfig *c, dt_plan *p, dt_ds_notes *notes, dt_error *err) {
    dt_runtime *r = &p->runtime;
    const dt_parallel *q = &p->parallel;
    if (c->offload_ratio < 1.0) {
        if (q->offload_optimizer == DT_OFFLOAD_CPU) r->offload_ratio = c->offload_ratio;
        else
            note(notes, "offload_optimizer.ratio %g: DeepSpeed's partial offload moves sub-groups between the GPU "
                        "and CPU memory; with offload_optimizer %s it has no effect", c->offload_ratio,
                 dt_offload_name(q->offload_optimizer));
    }
    const int zeropp = c->hpz > 1 || c->quantized_weights || c->quantized_gradients;
    if (zeropp && q->zero_stage != 3) {
        note(notes, "zero_hpz_partition_size / zero_quantized_weights / zero_quantized_gradients: ZeRO++ acts on "
                    "stage 3 only; ignored at stage %d", q->zero_stage);
        return DT_OK;
    }
    if (c->hpz > 1 && q->world_size % c->hpz)
        return dt_errorf(err, DT_EINVAL,
                         "$.zero_optimization.zero_hpz_partition_size %lld does not divide the world size %lld "
                         "(DeepSpeed's hpZ groups are world / size ranks; use the GPUs per node, %lld)",
                         (long long)c->hpz, (long long)q->world_size, (long long)p->cluster.gpus_per_node);
    r->hpz_partition = c->hpz;
    r->quantized_weights = c->quantized_weights;
    r->quantized_gradients = c->quantized_gradients;
    return DT_OK;
}

int dt_dsconfig_apply_runtime(const dt_dsconfig *c, dt_plan *p, dt_ds_notes *notes, dt_error *err) {
    dt_runtime *r = &p->runtime;
    if (r->kind != DT_RUNTIME_DEEPSPEED) return DT_OK;
    /* the gradients' collectives as DeepSpeed runs them: all-reduced where reduce_scatter is
     * off (stages 1-2; stage 3 always reduce-scatters), cast to communication_data_type */
    if (c->reduce_scatter_off && (p->parallel.zero_stage == 1 || p->parallel.zero_stage == 2)) r->grads_allreduce = 1;
    else if (c->reduce_scatter_off)
        note(notes, "zero_optimization.reduce_scatter false: no effect at stage %d", p->parallel.zero_stage);
    r->comm_dtype_set = c->comm_dtype_set, r->comm_dtype = c->comm_dtype;
    const int64_t h = p->model.hidden;
    if (c->persistence.state == DT_DS_SET) r->persistence_threshold = c->persistence.value;
    if (c->persistence.state == DT_DS_AUTO) {
        r->persistence_threshold = HF_PERSISTENCE_PER_HIDDEN * h;
        note(notes, "stage3_param_persistence_threshold \"auto\" -> 10 x hidden = %lld (HF Trainer's rule)",
             (long long)r->persistence_threshold);
    }
    if (c->reuse_distance.state == DT_DS_SET) r->max_reuse_distance = c->reuse_distance.value;
    if (c->reuse_distance.state == DT_DS_AUTO)
        note(notes, "stage3_max_reuse_distance \"auto\" -> DeepSpeed's default %lld",
             (long long)r->max_reuse_distance);
    return apply_zeropp(c, p, notes, err);
}

int dt_ds_check_offload(int stage, dt_offload opt, dt_offload param, dt_error *err) {
    if (opt != DT_OFFLOAD_NONE && stage < 1)
        return dt_errorf(err, DT_EINVAL,
                         "offload_optimizer device \"%s\" needs ZeRO stage 1, 2 or 3 (stage is %d)",
                         dt_offload_name(opt), stage);
    if (opt == DT_OFFLOAD_NVME && stage != 3)
        return dt_errorf(err, DT_EINVAL,
                         "offload_optimizer device \"nvme\" needs ZeRO stage 3 (stage is %d): NVMe "
                         "offload is ZeRO-Infinity; use \"cpu\" with stages 1-2",
                         stage);
    if (param != DT_OFFLOAD_NONE && stage != 3)
        return dt_errorf(err, DT_EINVAL,
                         "offload_param device \"%s\" needs ZeRO stage 3 (stage is %d): only stage 3 "
                         "partitions parameters",
                         dt_offload_name(param), stage);
    return DT_OK;
}

/* ------------------------------------------------------------ apply */

static double num_or(const dt_ds_num *v, double plan_value, double section_default) {
    if (v->state == DT_DS_SET) return v->value;
    if (v->state == DT_DS_AUTO) return plan_value;
    return section_default;
}

/* DeepSpeedConfig._set_batch_related_parameters + _batch_assertion (deepspeed/runtime/config.py) */
static int batch_triple(int64_t *train, int64_t *micro, int64_t *gas, int has_train, int has_micro,
                        int has_gas, int64_t world, dt_error *err) {
    /* given values must be positive before DeepSpeed's floor divisions use them */
    if (has_train && *train <= 0)
        return dt_errorf(err, DT_EINVAL, "Train batch size: %lld has to be greater than 0", (long long)*train);
    if (has_micro && *micro <= 0)
        return dt_errorf(err, DT_EINVAL, "Micro batch size per gpu: %lld has to be greater than 0",
                         (long long)*micro);
    if (has_gas && *gas <= 0)
        return dt_errorf(err, DT_EINVAL, "Gradient accumulation steps: %lld has to be greater than 0",
                         (long long)*gas);
    if (*train > DS_BATCH_MAX || *micro > DS_BATCH_MAX || *gas > DS_BATCH_MAX)
        return dt_errorf(err, DT_EINVAL, "batch sizes above %lld are not plausible (train %lld, micro %lld, "
                         "accumulation %lld)", (long long)DS_BATCH_MAX, (long long)*train,
                         (long long)*micro, (long long)*gas);
    if (has_train && has_micro && has_gas) {
        /* nothing derived */
    } else if (has_train && has_micro) {
        *gas = *train / *micro / world;
    } else if (has_train && has_gas) {
        *micro = *train / world / *gas;
    } else if (has_micro && has_gas) {
        *train = *micro * *gas * world;
    } else if (has_train) {
        *gas = 1;
        *micro = *train / world;
    } else if (has_micro) {
        *train = *micro * world;
        *gas = 1;
    } else {
        return dt_errorf(err, DT_EINVAL,
                         "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
    }
    if (*train <= 0)
        return dt_errorf(err, DT_EINVAL, "Train batch size: %lld has to be greater than 0", (long long)*train);
    if (*micro <= 0)
        return dt_errorf(err, DT_EINVAL, "Micro batch size per gpu: %lld has to be greater than 0",
                         (long long)*micro);
    if (*gas <= 0)
        return dt_errorf(err, DT_EINVAL, "Gradient accumulation steps: %lld has to be greater than 0",
                         (long long)*gas);
    if (*train != *micro * *gas * world) {
        /* which dtplan flag to change: world_size is --gpus; with all three numbers in
         * the config, a --gpus that fits them, otherwise the train_batch_size that fits */
        char hint[160];
        int64_t per_world = *micro * *gas;
        if (has_train && has_micro && has_gas && *train % per_world == 0)
            snprintf(hint, sizeof hint, "world_size is dtplan's --gpus: use --gpus %lld with this config, or set its "
                     "train_batch_size to %lld or \"auto\"", (long long)(*train / per_world),
                     (long long)(per_world * world));
        else
            snprintf(hint, sizeof hint, "world_size is dtplan's --gpus %lld: set the config's train_batch_size to %lld "
                     "or \"auto\", or change --gpus", (long long)world, (long long)(per_world * world));
        return dt_errorf(err, DT_EINVAL,
                         "Check batch related parameters. train_batch_size is not equal to "
                         "micro_batch_per_gpu * gradient_acc_step * world_size %lld != %lld * %lld * %lld (%s)",
                         (long long)*train, (long long)*micro, (long long)*gas, (long long)world, hint);
    }
    return DT_OK;
}

int dt_dsconfig_apply(const dt_dsconfig *c, dt_plan *p, dt_ds_notes *notes, dt_error *err) {
    dt_parallel *z = &p->parallel;
    const int64_t h = p->model.hidden;

    /* ZeRO */
    z->zero_stage = c->zero_stage;
    z->offload_optimizer = c->offload_optimizer;
    z->offload_param = c->offload_param;
    snprintf(z->nvme_path, sizeof z->nvme_path, "%s", c->nvme_path);
    z->overlap_comm = c->overlap_comm >= 0 ? c->overlap_comm : (c->zero_stage == 3);
    if (c->reduce_bucket.state == DT_DS_SET) z->reduce_bucket_elems = c->reduce_bucket.value;
    if (c->reduce_bucket.state == DT_DS_AUTO) {
        z->reduce_bucket_elems = h * h;
        note(notes, "reduce_bucket_size \"auto\" -> hidden^2 = %lld (HF Trainer's rule)", (long long)(h * h));
    }
    if (c->allgather_bucket.state == DT_DS_SET) z->allgather_bucket_elems = c->allgather_bucket.value;
    if (c->allgather_bucket.state == DT_DS_AUTO)
        note(notes, "allgather_bucket_size \"auto\" -> DeepSpeed's default %lld",
             (long long)z->allgather_bucket_elems);
    if (c->prefetch_bucket.state == DT_DS_SET) z->prefetch_bucket_elems = c->prefetch_bucket.value;
    if (c->prefetch_bucket.state == DT_DS_AUTO) {
        if (c->zero_stage == 3) {
            z->prefetch_bucket_elems = (int64_t)(HF_PREFETCH_FRACTION * (double)h * (double)h);
            note(notes, "stage3_prefetch_bucket_size \"auto\" -> 0.9 x hidden^2 = %lld (HF Trainer's rule)",
                 (long long)z->prefetch_bucket_elems);
        } else {
            note(notes, "stage3_prefetch_bucket_size \"auto\" -> DeepSpeed's default %lld (HF fills it only for stage 3)",
                 (long long)z->prefetch_bucket_elems);
        }
    }
    if (c->persistence.state == DT_DS_AUTO && c->zero_stage == 3 && p->runtime.kind == DT_RUNTIME_DTRUN)
        note(notes, "stage3_param_persistence_threshold \"auto\" -> 10 x hidden = %lld (HF Trainer's rule; "
                    "small-parameter persistence is not modelled)", (long long)(10 * h));
    if (p->runtime.kind == DT_RUNTIME_DTRUN && (c->reduce_scatter_off || c->comm_dtype_set))
        note(notes, "reduce_scatter / communication_data_type: how DeepSpeed reduces gradients; dtrun's engine "
                    "reduce-scatters in the gradient dtype (--runtime deepspeed models them)");
    if (p->runtime.kind == DT_RUNTIME_DTRUN && c->offload_ratio < 1.0)
        note(notes, "offload_optimizer.ratio %g: DeepSpeed's partial offload; dtrun's engine offloads the whole "
                    "optimizer partition (--runtime deepspeed models the ratio)", c->offload_ratio);
    if (p->runtime.kind == DT_RUNTIME_DTRUN && (c->hpz > 1 || c->quantized_weights || c->quantized_gradients))
        note(notes, "zero_hpz_partition_size / zero_quantized_weights / zero_quantized_gradients: ZeRO++; dtrun's "
                    "engine has none of it (--runtime deepspeed models them)");
    if (c->max_live.state == DT_DS_SET) z->max_live_params = c->max_live.value;
    if (c->sub_group.state == DT_DS_SET) z->sub_group_elems = c->sub_group.value;
    int rc = dt_ds_check_offload(z->zero_stage, z->offload_optimizer, z->offload_param, err);
    if (rc) return dt_error_prefix(err, "$.zero_optimization");

    /* precision: bf16 -> mixed-bf16, fp16 -> mixed-fp16, neither -> fp32 (DeepSpeed's
     * dtype resolution); "auto" follows the plan's precision (HF's --bf16/--fp16). */
    int bf16 = c->bf16 == DT_DS_SET ? c->bf16_on
             : c->bf16 == DT_DS_AUTO ? (p->precision.preset == DT_PREC_MIXED_BF16 ||
                                        p->precision.preset == DT_PREC_PURE_BF16)
                                     : 0;
    int fp16 = c->fp16 == DT_DS_SET ? c->fp16_on
             : c->fp16 == DT_DS_AUTO ? p->precision.preset == DT_PREC_MIXED_FP16 : 0;
    if (c->bf16 == DT_DS_AUTO || c->fp16 == DT_DS_AUTO)
        note(notes, "bf16/fp16 \"enabled\": \"auto\" -> %s (from the requested precision)",
             bf16 ? "bf16" : fp16 ? "fp16" : "fp32");
    dt_precision_preset want = bf16 ? DT_PREC_MIXED_BF16 : fp16 ? DT_PREC_MIXED_FP16 : DT_PREC_FP32;
    if (!(want == DT_PREC_MIXED_BF16 && p->precision.preset == DT_PREC_PURE_BF16))
        dt_precision_from_preset(want, &p->precision);
    if (fp16) {
        p->precision.loss_scale = c->loss_scale;
        if (c->has_dynamic_args) {
            p->precision.initial_scale_power = c->initial_scale_power;
            p->precision.loss_scale_window = c->loss_scale_window;
            p->precision.hysteresis = c->hysteresis;
            p->precision.min_loss_scale = c->min_loss_scale;
        } else {
            /* DeepSpeed quirk (get_dynamic_loss_scale_args, deepspeed/runtime/config.py): no
             * scaler key -> DynamicLossScaler's class defaults 2^32, hysteresis 1 */
            p->precision.initial_scale_power = DS_CLASS_INIT_SCALE_POWER;
            p->precision.hysteresis = DS_CLASS_HYSTERESIS;
            note(notes, "fp16 without scaler keys: DeepSpeed starts the loss scale at 2^32 with hysteresis 1");
        }
    }

    /* batch triple: "auto" -> the plan's (CLI) values, as HF fills them */
    const int64_t world = z->world_size;
    int64_t micro = c->micro_batch.state == DT_DS_SET ? c->micro_batch.value : p->batch.micro_batch;
    int64_t gas = c->grad_accum.state == DT_DS_SET ? c->grad_accum.value : p->batch.grad_accum;
    int64_t train = c->train_batch.state == DT_DS_SET ? c->train_batch.value : micro * gas * world;
    if (c->micro_batch.state == DT_DS_AUTO)
        note(notes, "train_micro_batch_size_per_gpu \"auto\" -> %lld (per_device_train_batch_size)", (long long)micro);
    if (c->grad_accum.state == DT_DS_AUTO)
        note(notes, "gradient_accumulation_steps \"auto\" -> %lld", (long long)gas);
    if (c->train_batch.state == DT_DS_AUTO)
        note(notes, "train_batch_size \"auto\" -> world x micro x accumulation = %lld", (long long)train);
    /* HF Trainer always fills all three when it is the launcher; DeepSpeed alone
     * infers the missing ones from those given */
    int has_train = c->train_batch.state != DT_DS_ABSENT, has_micro = c->micro_batch.state != DT_DS_ABSENT;
    int has_gas = c->grad_accum.state != DT_DS_ABSENT;
    rc = batch_triple(&train, &micro, &gas, has_train, has_micro, has_gas, world, err);
    if (rc) return rc;
    p->batch.micro_batch = micro;
    p->batch.grad_accum = gas;
    p->batch.global_batch = train;

    /* clipping: absent -> DeepSpeed's 0 (off); auto -> the plan's (HF max_grad_norm) */
    p->optimizer.grad_clip = num_or(&c->grad_clip, p->optimizer.grad_clip, 0.0);
    if (c->has_optimizer) {
        p->optimizer.lr = num_or(&c->lr, p->optimizer.lr, DS_ADAM_LR);
        p->optimizer.beta1 = num_or(&c->beta1, p->optimizer.beta1, DS_ADAM_BETA1);
        p->optimizer.beta2 = num_or(&c->beta2, p->optimizer.beta2, DS_ADAM_BETA2);
        p->optimizer.eps = num_or(&c->eps, p->optimizer.eps, DS_ADAM_EPS);
        p->optimizer.weight_decay = num_or(&c->weight_decay, p->optimizer.weight_decay, DS_ADAM_WD);
    }
    if (c->has_scheduler) {
        dt_schedule *s = &p->schedule;
        s->kind = !strcmp(c->scheduler_type, "WarmupDecayLR")    ? DT_SCHED_WARMUP_DECAY_LR
                : !strcmp(c->scheduler_type, "WarmupCosineLR") ? DT_SCHED_WARMUP_COSINE_LR
                                                                 : DT_SCHED_WARMUP_LR;
        s->warmup_linear = c->warmup_linear;
        s->warmup_steps = (int64_t)num_or(&c->warmup_num_steps, (double)s->warmup_steps, DS_WARMUP_STEPS);
        s->total_steps = (int64_t)num_or(&c->total_num_steps, (double)s->total_steps, (double)s->total_steps);
        /* plan convention: warmup_min_lr is WarmupCosineLR's ratio, else an lr */
        s->warmup_min_lr = s->kind == DT_SCHED_WARMUP_COSINE_LR ? num_or(&c->warmup_min_ratio, 0.0, 0.0)
                                                                : num_or(&c->warmup_min_lr, 0.0, 0.0);
        s->cos_min_ratio = num_or(&c->cos_min_ratio, s->cos_min_ratio, DS_COS_MIN_RATIO);
        if (s->kind != DT_SCHED_WARMUP_COSINE_LR)
            p->optimizer.lr = num_or(&c->warmup_max_lr, p->optimizer.lr, DS_WARMUP_MAX_LR);
    }
    return DT_OK;
}
