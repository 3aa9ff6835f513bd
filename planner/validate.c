/* validate.c — reading a published measurement and predicting it (dt_validate.h,
 * docs/validation.md). A case is read strictly, as plans are: every key of the format,
 * none other; the configuration becomes a dt_plan through the same setters the CLI
 * uses (dt_plan_set_runtime, dt_plan_set_attention), and dt_plan_validate checks it. */
#include "dt_validate.h"
#include "dt_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_json.h"
#include "dt_memory.h"
#include "dt_model.h"
#include "dt_timemodel.h"

#define VAL_TERA 1e12   /* TFLOP/s */

static const char *const k_quantity_names[DT_VAL_QUANTITY_COUNT] = {"samples_per_s", "tokens_per_s_per_gpu",
                                                                     "peak_bytes", "fits",
                                                                     "peak_allocated_bytes",
                                                                     "model_tflops_per_gpu"};
static const char *const k_offload_names[] = {"none", "cpu", "nvme"};
static const char *const k_runtime_names[] = {"dtrun", "deepspeed", "fsdp", "megatron"};   /* dt_runtime_kind order */
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))
/* NVMe offload needs a directory; a case states where its source swapped to, or the
 * DeepSpeed documentation's example path (docs/_pages/config-json.md "/local_nvme"). */
#define VAL_DEFAULT_NVME_PATH "/local_nvme"
/* Sanity bounds on a case's integers: far beyond any published run. */
#define VAL_MAX_RANKS ((int64_t)1 << 20)
#define VAL_MAX_BATCH ((int64_t)1 << 20)
#define VAL_MAX_SEQ ((int64_t)1 << 24)

const char *dt_val_quantity_name(dt_val_quantity q) {
    return (unsigned)q < DT_VAL_QUANTITY_COUNT ? k_quantity_names[q] : "?";
}

static void read_source(dt_jobj *root, dt_val_case *c, dt_error *err) {
    dt_jobj s;
    if (dt_jobj_open(&s, root, "source", err)) return;
    dt_jobj_str(&s, "title", 0, c->title, sizeof c->title, err);
    dt_jobj_str(&s, "url", 0, c->url, sizeof c->url, err);
    dt_jobj_str(&s, "where", 0, c->where, sizeof c->where, err);
    dt_jobj_str(&s, "quote", 0, c->quote, sizeof c->quote, err);
    if (dt_jobj_close(&s, err)) root->failed = s.failed;
}

/* "assumptions": an array of strings (optional) */
static void read_notes(dt_jobj *root, dt_val_case *c, dt_error *err) {
    if (root->failed || !dt_jobj_has(root, "assumptions")) return;
    const cJSON *a = dt_jobj_item(root, "assumptions", err);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > DT_VAL_MAX_NOTES) {
        root->failed = dt_errorf(err, DT_EINVAL, "%s.assumptions: expected an array of at most %d strings",
                                 root->path, DT_VAL_MAX_NOTES);
        return;
    }
    for (const cJSON *s = a->child; s; s = s->next) {
        if (!cJSON_IsString(s) || !s->valuestring[0] || strlen(s->valuestring) >= DT_VAL_TEXT_MAX) {
            root->failed = dt_errorf(err, DT_EINVAL, "%s.assumptions: every item must be a non-empty string "
                                                    "shorter than %d bytes", root->path, DT_VAL_TEXT_MAX);
            return;
        }
        snprintf(c->notes[c->n_notes++], DT_VAL_TEXT_MAX, "%s", s->valuestring);
    }
}

/* The model: a catalog name ("model") or a Hugging Face config.json object ("model_config"). */
static void read_model(dt_jobj *cfg, const char *case_name, dt_model *m, dt_error *err) {
    const int has_name = dt_jobj_has(cfg, "model"), has_cfg = dt_jobj_has(cfg, "model_config");
    if (has_name == has_cfg) {
        cfg->failed = dt_errorf(err, DT_EINVAL, "%s: give exactly one of \"model\" (a catalog name) and "
                                               "\"model_config\" (a config.json object)", cfg->path);
        return;
    }
    if (has_name) {
        char name[64];
        if (!dt_jobj_str(cfg, "model", 0, name, sizeof name, err) && dt_model_resolve(name, m, err))
            cfg->failed = dt_error_prefix(err, "%s.model", cfg->path);
        return;
    }
    const cJSON *o = dt_jobj_item(cfg, "model_config", err);
    if (!cJSON_IsObject(o)) {
        cfg->failed = dt_errorf(err, DT_EINVAL, "%s.model_config: expected a config.json object", cfg->path);
        return;
    }
    char *text = cJSON_PrintUnformatted(o);
    if (!text) {
        cfg->failed = dt_errorf(err, DT_ENOMEM, "out of memory");
        return;
    }
    if (dt_model_from_config_json(text, case_name, m, err))
        cfg->failed = dt_error_prefix(err, "%s.model_config", cfg->path);
    free(text);
}

/* Optional overrides of the runtime profile's defaults. */
static void read_runtime_overrides(dt_jobj *cfg, dt_runtime *r, dt_error *err) {
    const struct { const char *key; int *v; } flags[] = {
        {"dropout", &r->dropout},         {"upcast_logits", &r->upcast_logits}, {"fused_loss", &r->fused_loss},
        {"upcast_norm", &r->upcast_norm},
        {"upcast_softmax", &r->upcast_softmax}, {"unfused_act", &r->unfused_act}};
    for (int i = 0; i < N_OF(flags); i++)
        if (!cfg->failed && dt_jobj_has(cfg, flags[i].key)) dt_jobj_bool(cfg, flags[i].key, flags[i].v, err);
    if (!cfg->failed && dt_jobj_has(cfg, "max_reuse_distance"))
        dt_jobj_int(cfg, "max_reuse_distance", 0, INT64_MAX, &r->max_reuse_distance, err);
    if (!cfg->failed && dt_jobj_has(cfg, "persistence_threshold"))
        dt_jobj_int(cfg, "persistence_threshold", 0, INT64_MAX, &r->persistence_threshold, err);
    if (!cfg->failed && dt_jobj_has(cfg, "fetch_overhead_s"))
        dt_jobj_num(cfg, "fetch_overhead_s", DT_JNUM_NONNEG, &r->fetch_overhead_s, err);
    /* DeepSpeed's zero_optimization.reduce_scatter, as in a plan's runtime: false = stages 1-2
     * all-reduce the gradients (dt_plan_validate refuses it outside the deepspeed runtime) */
    int rs = 1;
    if (!cfg->failed && dt_jobj_has(cfg, "reduce_scatter") && !dt_jobj_bool(cfg, "reduce_scatter", &rs, err))
        r->grads_allreduce = !rs;
}

/* Optional DeepSpeed bucket keys, in elements. */
static void read_buckets(dt_jobj *cfg, dt_parallel *q, dt_error *err) {
    const struct { const char *key; int64_t *v; } b[] = {
        {"reduce_bucket_size", &q->reduce_bucket_elems},
        {"allgather_bucket_size", &q->allgather_bucket_elems},
        {"stage3_prefetch_bucket_size", &q->prefetch_bucket_elems},
        {"stage3_max_live_parameters", &q->max_live_params},
        {"sub_group_size", &q->sub_group_elems}};
    for (int i = 0; i < N_OF(b); i++)
        if (!cfg->failed && dt_jobj_has(cfg, b[i].key)) dt_jobj_int(cfg, b[i].key, 1, INT64_MAX, b[i].v, err);
}

/* A hardware profile named by path is looked up next to the case file (the suite's own
 * profiles live in tests/validation/hardware/); a catalog name is used as is. */
/* Optional "layout": {"tp", "pp", "cp", "vpp" (counts, 1 = off), "sp" (bool, default on with tp > 1),
 * "first_stage_layers" and "last_stage_layers" (an uneven split, both or neither)}
 * (docs/parallelism.md); the global batch becomes micro x accumulation x the data-parallel size. */
static void read_layout(dt_jobj *cfg, dt_plan *p, dt_error *err) {
    dt_jobj l;
    if (dt_jobj_open(&l, cfg, "layout", err)) return;
    int64_t d[6] = {1, 1, 1, 1, 0, 0};   /* tp, pp, cp, vpp, first / last stage layers */
    static const char *const keys[6] = {"tp", "pp", "cp", "vpp", "first_stage_layers", "last_stage_layers"};
    for (int i = 0; i < 6 && !l.failed; i++)
        if (dt_jobj_has(&l, keys[i])) dt_jobj_int(&l, keys[i], 1, i < 4 ? VAL_MAX_RANKS : p->model.n_layer, &d[i], err);
    int sp = 1;
    if (!l.failed && dt_jobj_has(&l, "sp")) dt_jobj_bool(&l, "sp", &sp, err);
    if (dt_jobj_close(&l, err)) {
        cfg->failed = l.failed;
        return;
    }
    dt_layout_set(p, d[0], sp, d[2], d[1], d[3]);
    p->layout.first_stage_layers = d[4], p->layout.last_stage_layers = d[5];
    p->batch.global_batch = p->batch.micro_batch * p->batch.grad_accum * dt_layout_dp(p);
}

static void hardware_path(const char *name, const char *case_path, char *out, size_t n) {
    const char *slash = case_path ? strrchr(case_path, '/') : NULL;
    const int is_path = strchr(name, '/') != NULL || (strlen(name) > 5 && !strcmp(name + strlen(name) - 5, ".json"));
    if (!is_path || name[0] == '/' || !slash) snprintf(out, n, "%s", name);
    else snprintf(out, n, "%.*s/%s", (int)(slash - case_path), case_path, name);
}

static void read_config(dt_jobj *root, const char *what, dt_val_case *c, dt_error *err) {
    dt_jobj g;
    dt_plan *p = &c->plan;
    if (dt_jobj_open(&g, root, "config", err)) return;
    dt_plan_defaults(p);
    read_model(&g, c->name, &p->model, err);
    char hw[128] = "", hw_path[1024] = "", link[32] = "", prec[32] = "", attn[32] = "";
    int v = 0;
    dt_jobj_str(&g, "hardware", 0, hw, sizeof hw, err);
    hardware_path(hw, what, hw_path, sizeof hw_path);
    if (!g.failed && dt_jobj_has(&g, "interconnect")) dt_jobj_str(&g, "interconnect", 0, link, sizeof link, err);
    if (!g.failed && dt_hardware_load(hw_path, link[0] ? link : NULL, &p->cluster.hw, err))
        g.failed = dt_error_prefix(err, "%s.hardware", g.path);
    p->cluster.device = p->cluster.hw.device;
    dt_jobj_int(&g, "nodes", 1, VAL_MAX_RANKS, &p->cluster.nodes, err);
    dt_jobj_int(&g, "gpus_per_node", 1, VAL_MAX_RANKS, &p->cluster.gpus_per_node, err);
    p->parallel.world_size = p->cluster.nodes * p->cluster.gpus_per_node;
    dt_jobj_str(&g, "precision", 0, prec, sizeof prec, err);
    if (!g.failed) {
        dt_precision_preset preset;
        if (dt_precision_parse_preset(prec, &preset, err)) g.failed = dt_error_prefix(err, "%s.precision", g.path);
        else dt_precision_from_preset(preset, &p->precision);
    }
    dt_jobj_int(&g, "micro_batch", 1, VAL_MAX_BATCH, &p->batch.micro_batch, err);
    dt_jobj_int(&g, "grad_accum", 1, VAL_MAX_BATCH, &p->batch.grad_accum, err);
    dt_jobj_int(&g, "seq_len", 1, VAL_MAX_SEQ, &p->batch.seq_len, err);
    p->batch.global_batch = p->batch.micro_batch * p->batch.grad_accum * p->parallel.world_size;
    int64_t stage = 0;
    dt_jobj_int(&g, "zero_stage", 0, 3, &stage, err);
    p->parallel.zero_stage = (int)stage;
    if (!dt_jobj_enum(&g, "offload_optimizer", k_offload_names, N_OF(k_offload_names), &v, err))
        p->parallel.offload_optimizer = (dt_offload)v;
    if (!dt_jobj_enum(&g, "offload_param", k_offload_names, N_OF(k_offload_names), &v, err))
        p->parallel.offload_param = (dt_offload)v;
    if (p->parallel.offload_optimizer == DT_OFFLOAD_NVME || p->parallel.offload_param == DT_OFFLOAD_NVME)
        snprintf(p->parallel.nvme_path, sizeof p->parallel.nvme_path, "%s", VAL_DEFAULT_NVME_PATH);
    read_buckets(&g, &p->parallel, err);
    /* checkpointed blocks: a count, or "all" */
    const cJSON *ck = g.failed ? NULL : dt_jobj_item(&g, "ckpt_layers", err);
    if (ck && cJSON_IsString(ck) && !strcmp(ck->valuestring, "all")) p->activations.ckpt_layers = p->model.n_layer;
    else if (ck) dt_jobj_int(&g, "ckpt_layers", 0, p->model.n_layer, &p->activations.ckpt_layers, err);
    if (!g.failed && dt_jobj_enum(&g, "runtime", k_runtime_names, N_OF(k_runtime_names), &v, err) == DT_OK) {
        dt_plan_set_runtime(p, (dt_runtime_kind)v);
        /* DeepSpeed's overlap_comm default is on for stage 3 only (zero/config.py); FSDP overlaps always */
        p->parallel.overlap_comm = v == DT_RUNTIME_FSDP || p->parallel.zero_stage == 3;
    }
    if (!g.failed && dt_jobj_has(&g, "overlap_comm")) dt_jobj_bool(&g, "overlap_comm", &p->parallel.overlap_comm, err);
    if (!g.failed && dt_jobj_has(&g, "attention") && !dt_jobj_str(&g, "attention", 0, attn, sizeof attn, err) &&
        dt_plan_set_attention(p, attn, "attention", err))
        g.failed = dt_error_prefix(err, "%s", g.path);
    if (!g.failed && dt_jobj_has(&g, "selective_recompute"))
        dt_jobj_bool(&g, "selective_recompute", &p->activations.selective, err);
    if (!g.failed) read_runtime_overrides(&g, &p->runtime, err);
    if (!g.failed && dt_jobj_has(&g, "layout")) read_layout(&g, p, err);
    if (dt_jobj_close(&g, err)) {
        root->failed = g.failed;
        return;
    }
    if (dt_plan_validate(p, err)) root->failed = dt_error_prefix(err, "%s", g.path);
}

static void read_measured(dt_jobj *root, dt_val_case *c, dt_error *err) {
    dt_jobj m;
    int q = 0;
    if (dt_jobj_open(&m, root, "measured", err)) return;
    if (!dt_jobj_enum(&m, "quantity", k_quantity_names, N_OF(k_quantity_names), &q, err))
        c->quantity = (dt_val_quantity)q;
    if (!m.failed && c->quantity == DT_VAL_FITS) {
        int fits = 0;
        if (!dt_jobj_bool(&m, "value", &fits, err)) c->measured = fits;
    } else {
        dt_jobj_num(&m, "value", DT_JNUM_POS, &c->measured, err);
    }
    if (dt_jobj_close(&m, err)) root->failed = m.failed;
}

int dt_validate_case_parse(const char *json, const char *what, dt_val_case *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *tree = NULL;
    int rc = dt_json_parse(json, what, &tree, err);
    if (rc) return rc;
    dt_jobj root;
    char format[64] = "";
    if (!dt_jobj_init(&root, tree, "$", err) && !dt_jobj_str(&root, "format", 0, format, sizeof format, err) &&
        strcmp(format, DT_VALIDATION_FORMAT))
        root.failed = dt_errorf(err, DT_EINVAL, "$.format: expected \"%s\", got \"%s\"", DT_VALIDATION_FORMAT, format);
    dt_jobj_str(&root, "name", 0, out->name, sizeof out->name, err);
    if (!root.failed) read_source(&root, out, err);
    if (!root.failed) read_notes(&root, out, err);
    if (!root.failed && dt_jobj_has(&root, "rank_group"))
        dt_jobj_str(&root, "rank_group", 0, out->rank_group, sizeof out->rank_group, err);
    if (!root.failed) read_config(&root, what, out, err);
    if (!root.failed) read_measured(&root, out, err);
    if (!root.failed) dt_jobj_close(&root, err);
    cJSON_Delete(tree);
    return root.failed;
}

int dt_validate_case_load(const char *path, dt_val_case *out, dt_error *err) {
    char *text = NULL;
    int rc = dt_json_read_file(path, &text, NULL, err);
    if (rc) return rc;
    rc = dt_validate_case_parse(text, path, out, err);
    free(text);
    if (rc && strncmp(err->msg, path, strlen(path)) != 0) dt_error_prefix(err, "%s", path);
    return rc;
}

int dt_validate_case_predict(const dt_val_case *c, dt_val_result *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    const dt_plan *p = &c->plan;
    dt_mem_breakdown m;
    dt_time_breakdown t;
    if (dt_memory_estimate(p, &m, err) || dt_time_estimate(p, &t, err)) return err->code;
    out->peak_bytes = m.total;
    out->step_s = t.step_s;
    const double samples = (double)p->batch.global_batch;
    switch (c->quantity) {
    case DT_VAL_SAMPLES_PER_S: out->predicted = t.step_s > 0 ? samples / t.step_s : 0; break;
    case DT_VAL_TOKENS_PER_S_GPU:
        out->predicted = t.step_s > 0 ? t.tokens_per_s / (double)p->parallel.world_size : 0;
        break;
    case DT_VAL_MODEL_TFLOPS_GPU:   /* mfu is model FLOPs / (step x the GPUs' peak) */
        out->predicted = t.mfu * p->cluster.hw.peak_flops[p->precision.param] / VAL_TERA;
        break;
    case DT_VAL_PEAK_BYTES: out->predicted = (double)m.total; break;
    case DT_VAL_PEAK_ALLOCATED_BYTES: out->predicted = (double)(m.total - m.reserve); break;
    default: out->predicted = m.total <= p->cluster.hw.device_mem_bytes; break;
    }
    out->error = c->quantity == DT_VAL_FITS ? (out->predicted != c->measured)
                                             : (out->predicted - c->measured) / c->measured;
    return DT_OK;
}
