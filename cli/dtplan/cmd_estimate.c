/* cmd_estimate.c — `dtplan estimate`: per-GPU, per-host and NVMe memory for every
 * ZeRO stage x offload option (or one plan / one DeepSpeed config), as a table or
 * JSON, optionally next to DeepSpeed's own estimator output. Formulas: memory.c
 * and docs/memory-model.md. Bad input: one line on stderr, exit 2. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_cli.h"
#include "dt_layout.h"
#include "dt_parallel3d.h"
#include "dt_megatron.h"
#include "dt_model.h"
#include "dt_dsconfig.h"
#include "dt_memory.h"
#include "dt_cli_ft.h"
#include "dt_cli_obj.h"
#include "dt_objplan.h"
#include "dt_plan.h"
#include "dt_report_charts.h"
#include "dt_timemodel.h"
#include "dt_units.h"

/* Defaults (docs/memory-model.md "Defaults"): the users' runbooks'
 * per_device_train_batch_size is 1; the sequence is HF run_clm / pretraining.py's
 * block_size cap of 1024 (and the plan default), never above the model's
 * positions; no checkpointing. */
#define EST_DEFAULT_MICRO 1
#define EST_DEFAULT_SEQ 1024
#define EST_DEFAULT_HARDWARE "H100-SXM-80GB"
#define EST_MAX_ROWS 16
/* offload "nvme" needs a directory; DeepSpeed's config documentation's example path
 * (docs/_pages/config-json.md, offload_optimizer.nvme_path "/local_nvme") */
#define EST_NVME_EXAMPLE "/local_nvme"
/* sanity bounds on CLI integers: far beyond any real run, small enough that the
 * byte arithmetic cannot overflow */
#define EST_MAX_GPUS ((int64_t)1 << 20)
#define EST_MAX_MICRO ((int64_t)1 << 20)
#define EST_MAX_SEQ ((int64_t)1 << 24)

typedef struct {
    int zero_stage;
    dt_offload opt, param;
    dt_mem_breakdown m;
    dt_mem_phase phase;   /* the phase of the peak (DT_MEM_PHASE_SUM for dtrun) */
    int64_t phase_total[DT_MEM_PHASE_COUNT];   /* each phase's total, bytes per rank */
} est_row;

typedef struct {
    const char *params, *model, *gpus, *nodes, *micro, *accum, *seq, *ckpt, *precision;
    const char *param_dtype, *grad_dtype, *master_dtype, *moment_dtype, *attention, *mem;
    const char *deepspeed, *hardware, *units, *compare, *plan, *stage, *off_opt, *off_param, *plot;
    const char *runtime, *recompute, *largest, *sub_group;
    int json;
    dt_ft_args ft;   /* --finetune and its settings (cli/dtplan/ftopts.c) */
    dt_obj_args obj; /* --objective and its settings (cli/dtplan/objopts.c) */
} est_args;

/* one "dtplan: ..." line on stderr, exit 2 */
#define fail(...) dt_cli_fail(2, __VA_ARGS__)

static void usage(FILE *f) {
    fprintf(f,
            "usage: dtplan estimate (--params COUNT | --model NAME|config.json | --plan plan.json) [options]\n"
            "\n"
            "Per-GPU, per-host and NVMe memory for every ZeRO stage x offload option.\n"
            "\n"
            "  --params COUNT        parameters, e.g. 32B, 6.7B, 7e9, 350M (derives a standard decoder shape;\n"
            "                        model states use exactly COUNT, the shape's own count the rest)\n"
            "  --model NAME|PATH     catalog model (gpt2, qwen3-0.6b, qwen2.5-32b, llama-2-7b, ...) or config.json\n"
            "  --plan plan.json      re-evaluate a plan's configuration (notes a stale stored prediction)\n"
            "  --gpus N              total GPUs (ranks), default 1\n"
            "  --nodes N             nodes (GPUs are split evenly), default 1\n"
            "  --micro-batch N       sequences per GPU per micro-step, default %d\n"
            "  --grad-accum N        micro-steps per optimizer step, default 1\n"
            "  --seq N               tokens per sequence, default min(%d, model positions)\n"
            "  --ckpt none|full|K    activation checkpointing: none, all layers, or the first K\n"
            "  --precision P         mixed-bf16 (default) | mixed-fp16 | pure-bf16 | fp32\n"
            "  --param-dtype T, --grad-dtype T, --moment-dtype T   fp32|bf16|fp16 overrides\n"
            "  --master-dtype T      fp32|bf16|fp16|none (none: no separate master copy)\n"
            "  --attention A         flash (default) | materialized; with --runtime deepspeed|fsdp the kernel:\n"
            "                        sdpa (their default) | flash | eager (keeps the s x s probabilities)\n"
            "  --runtime R           what runs the plan: dtrun (default: this repository's engine, the model as\n"
            "                        before runtimes existed) | deepspeed | fsdp (Hugging Face model code; peak =\n"
            "                        the largest phase of the step; docs/memory-model.md \"Runtime profiles\") |\n"
            "                        megatron (Megatron-LM's own model code, ZeRO stage 0 or 1 = its distributed\n"
            "                        optimizer; docs/parallelism.md \"Runtimes\")\n"
            "  --recompute selective recompute the attention core (Korthikanti et al. 2022 section 5) of every\n"
            "                        block not checkpointed; deepspeed / fsdp only (none: the default)\n"
            "  --largest-layer L     module (default: DeepSpeed's model_to_params) | block_matrix: what ZeRO-3's\n"
            "                        transient gradient and --compare deepspeed take as the largest layer\n"
            "  --zero-stage S        only rows with this stage (0..3)\n"
            "  --offload-optimizer D, --offload-param D   only rows with this offload (none|cpu|nvme)\n"
            "  --deepspeed cfg.json  stage/offload/buckets/batch/precision from a DeepSpeed config (with\n"
            "                        --runtime deepspeed also ZeRO++, the offload ratio and the gradients'\n"
            "                        collective); one row, and its predicted step\n"
            "  --sub-group-size N    DeepSpeed's sub_group_size (default 1e9 elements): the optimizer tile, and\n"
            "                        the size of each of the 4 host swap buffers of NVMe optimizer offload\n"
            "  --hardware NAME|PATH  hardware profile (reserve, device memory), default %s\n"
            "  --mem LIMIT           mark rows whose per-GPU total fits, e.g. 80G (= 80 GiB), 80GB (= 80e9);\n"
            "                        a unit is required, at most the profile's device memory\n"
            "  --units GB|GiB        display unit (default GiB); JSON is always bytes\n"
            "  --json                JSON instead of the table\n"
            "  --compare deepspeed   also print DeepSpeed's estimate_zero2/zero3 numbers\n"
            "  --plot FILE.png|.svg  stacked bars per row (params ... reserve), --mem as a dashed line\n"
            "  --config FILE         a LLaMA-Factory / HF TrainingArguments / runbook YAML (or JSON): its model,\n"
            "                        batch, sequence, precision, checkpointing and DeepSpeed file as the options\n"
            "                        above (the command line's win); every key reported (docs/configs.md)\n"
            "  --config-format F     llamafactory | hf | runbook (default: detected)\n",
            EST_DEFAULT_MICRO, EST_DEFAULT_SEQ, EST_DEFAULT_HARDWARE);
    dt_ft_usage(f);
    dt_obj_usage(f);
}

/* ------------------------------------------------------------ arguments */

static int parse_args(int argc, char **argv, est_args *a) {
    static const struct {
        const char *name;
        size_t off;
    } opts[] = {
        {"--params", offsetof(est_args, params)},         {"--model", offsetof(est_args, model)},
        {"--gpus", offsetof(est_args, gpus)},             {"--nodes", offsetof(est_args, nodes)},
        {"--micro-batch", offsetof(est_args, micro)},     {"--grad-accum", offsetof(est_args, accum)},
        {"--seq", offsetof(est_args, seq)},               {"--ckpt", offsetof(est_args, ckpt)},
        {"--precision", offsetof(est_args, precision)},   {"--param-dtype", offsetof(est_args, param_dtype)},
        {"--grad-dtype", offsetof(est_args, grad_dtype)}, {"--master-dtype", offsetof(est_args, master_dtype)},
        {"--moment-dtype", offsetof(est_args, moment_dtype)},
        {"--attention", offsetof(est_args, attention)},   {"--mem", offsetof(est_args, mem)},
        {"--deepspeed", offsetof(est_args, deepspeed)},   {"--hardware", offsetof(est_args, hardware)},
        {"--units", offsetof(est_args, units)},           {"--compare", offsetof(est_args, compare)},
        {"--plan", offsetof(est_args, plan)},             {"--zero-stage", offsetof(est_args, stage)},
        {"--offload-optimizer", offsetof(est_args, off_opt)},
        {"--offload-param", offsetof(est_args, off_param)},
        {"--plot", offsetof(est_args, plot)},            {"--runtime", offsetof(est_args, runtime)},
        {"--recompute", offsetof(est_args, recompute)},   {"--largest-layer", offsetof(est_args, largest)},
        {"--sub-group-size", offsetof(est_args, sub_group)},
    };
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout);
            return -1;
        }
        if (!strcmp(arg, "--json")) {
            a->json = 1;
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        int found = 0;
        for (size_t k = 0; k < sizeof opts / sizeof opts[0] && !found; k++) {
            if (strlen(opts[k].name) != len || strncmp(arg, opts[k].name, len)) continue;
            found = 1;
            const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!val) return fail("%s needs a value (see dtplan estimate --help)", opts[k].name);
            if (!*val) return fail("%s: empty value (see dtplan estimate --help)", opts[k].name);
            const char **slot = (const char **)((char *)a + opts[k].off);
            if (*slot) return fail("%s given twice", opts[k].name);
            *slot = val;
        }
        if (!found) {
            const int t = dt_ft_args_take(&a->ft, argc, argv, &i, "estimate");
            if (t == 2) return 2;
            if (t) continue;
            const int o = dt_obj_args_take(&a->obj, argc, argv, &i, "estimate");
            if (o == 2) return 2;
            if (o) continue;
        }
        if (!found) return fail("estimate: unknown option '%s' (see dtplan estimate --help)", arg);
    }
    return 0;
}

/* positive integer option in [1, max]; example: a value that works */
static int int_opt(const char *s, const char *what, int64_t max, int64_t example, int64_t *out) {
    dt_error e = {0};
    return dt_parse_int(s, what, 1, max, example, out, &e) ? dt_cli_fail_err(e.code, &e) : 0;
}

static int dtype_opt(const char *s, const char *what, dt_dtype *out) {
    dt_error e = {0};
    if (dt_dtype_parse(s, out, &e)) return fail("%s: %s", what, e.msg);
    return 0;
}

/* ------------------------------------------------------------ set-up */

typedef struct {
    dt_plan plan;
    int64_t n_params;      /* model-state count (the exact request for --params) */
    int64_t mem_limit;     /* 0 = no --mem */
    dt_units units;
    int from_config;       /* rows: only the configured one */
    int stage_filter;      /* -1 all */
    int opt_filter, param_filter;
    int largest_block_matrix;  /* --largest-layer block_matrix (--compare deepspeed) */
    dt_ds_notes notes;
} est_ctx;

static int resolve_precision(const est_args *a, dt_precision *pr) {
    dt_error e = {0};
    dt_precision_preset preset = DT_PREC_MIXED_BF16;
    if (a->precision && dt_precision_parse_preset(a->precision, &preset, &e)) return dt_cli_fail_err(e.code, &e);
    dt_precision_from_preset(preset, pr);
    return 0;
}

static int apply_dtype_overrides(const est_args *a, dt_precision *pr) {
    if (a->param_dtype) {
        if (dtype_opt(a->param_dtype, "--param-dtype", &pr->param)) return 2;
        pr->activation = pr->param; /* activations are stored in the working dtype */
    }
    if (a->grad_dtype && dtype_opt(a->grad_dtype, "--grad-dtype", &pr->grad)) return 2;
    if (a->moment_dtype && dtype_opt(a->moment_dtype, "--moment-dtype", &pr->moment)) return 2;
    if (a->master_dtype) {
        if (!strcmp(a->master_dtype, "none")) {
            pr->has_master = 0;
        } else {
            if (dtype_opt(a->master_dtype, "--master-dtype", &pr->master)) return 2;
            pr->has_master = 1;
        }
    }
    return 0;
}

static int resolve_model(const est_args *a, est_ctx *c) {
    dt_error e = {0};
    if (a->params && a->model)
        return fail("give either --params or --model, not both (--model already fixes the count)");
    if (!a->params && !a->model)
        return fail("estimate: give --params COUNT (e.g. --params 32B) or --model NAME (e.g. --model qwen3-0.6b)");
    if (a->model) {
        if (dt_model_resolve_vlm(a->model, &c->plan.model, &c->plan.vlm, &e)) return dt_cli_fail_err(e.code, &e);
        c->n_params = dt_model_params(&c->plan.model);   /* the language model's (the vision side: its groups) */
        return 0;
    }
    if (dt_parse_count(a->params, "--params", &c->n_params, &e)) return dt_cli_fail_err(e.code, &e);
    if (dt_model_for_params(c->n_params, &c->plan.model, &e)) return dt_cli_fail_err(e.code, &e);
    return 0;
}

/* HF Trainer refuses config values that contradict explicit arguments ("Please
 * correct the following DeepSpeed config values that mismatch TrainingArguments
 * values"); dtplan does the same for the options that map onto them. */
static int check_mismatch(const est_args *a, const dt_dsconfig *ds, const dt_plan *p) {
    if (a->micro && ds->micro_batch.state == DT_DS_SET && ds->micro_batch.value != p->batch.micro_batch)
        return fail("%s: ds train_micro_batch_size_per_gpu=%lld vs --micro-batch %lld mismatch (HF Trainer "
                    "rejects this too): set it to \"auto\" or drop --micro-batch",
                    a->deepspeed, (long long)ds->micro_batch.value, (long long)p->batch.micro_batch);
    if (a->accum && ds->grad_accum.state == DT_DS_SET && ds->grad_accum.value != p->batch.grad_accum)
        return fail("%s: ds gradient_accumulation_steps=%lld vs --grad-accum %lld mismatch (HF Trainer "
                    "rejects this too): set it to \"auto\" or drop --grad-accum",
                    a->deepspeed, (long long)ds->grad_accum.value, (long long)p->batch.grad_accum);
    if (a->precision) {
        int want_bf16 = p->precision.preset == DT_PREC_MIXED_BF16 || p->precision.preset == DT_PREC_PURE_BF16;
        int want_fp16 = p->precision.preset == DT_PREC_MIXED_FP16;
        int ds_bf16 = ds->bf16 == DT_DS_SET && ds->bf16_on, ds_fp16 = ds->fp16 == DT_DS_SET && ds->fp16_on;
        int ds_decides = ds->bf16 == DT_DS_SET || ds->fp16 == DT_DS_SET;
        if (ds_decides && (want_bf16 != ds_bf16 || want_fp16 != ds_fp16))
            return fail("%s: ds %s vs --precision %s mismatch (HF Trainer rejects this too): set "
                        "\"enabled\": \"auto\" or drop --precision",
                        a->deepspeed, ds_bf16 ? "bf16.enabled=true" : ds_fp16 ? "fp16.enabled=true" : "fp32 (no bf16/fp16)",
                        a->precision);
    }
    if (a->stage && atoi(a->stage) != ds->zero_stage)
        return fail("%s: ds zero_optimization.stage=%d vs --zero-stage %s mismatch: drop one",
                    a->deepspeed, ds->zero_stage, a->stage);
    /* the offload filters would be ignored: the config fixes the one row */
    const struct { const char *flag, *arg, *key; dt_offload ds; } off[] = {
        {"--offload-optimizer", a->off_opt, "offload_optimizer", ds->offload_optimizer},
        {"--offload-param", a->off_param, "offload_param", ds->offload_param}};
    for (int i = 0; i < 2; i++)
        if (off[i].arg && strcmp(off[i].arg, dt_offload_name(off[i].ds)))
            return fail("%s: ds zero_optimization.%s.device=%s vs %s %s mismatch: drop one", a->deepspeed, off[i].key,
                        dt_offload_name(off[i].ds), off[i].flag, off[i].arg);
    return 0;
}

/* --runtime, then the choices that depend on it: --attention (dtrun: flash | materialized;
 * deepspeed / fsdp: the kernel), --recompute, --largest-layer. */
static int apply_runtime(const est_args *a, est_ctx *c, const dt_dsconfig *ds) {
    dt_plan *p = &c->plan;
    const dt_runtime_kind kind = p->runtime.kind;   /* parsed in setup */
    if (kind == DT_RUNTIME_MEGATRON && p->cluster.device != DT_DEVICE_CUDA)
        return fail("--runtime megatron: hardware %s is a CPU profile and Megatron-LM runs on CUDA GPUs only (use a GPU "
                    "--hardware such as H100-SXM-80GB, or --runtime dtrun)", p->cluster.hw.name);
    if (kind != DT_RUNTIME_DTRUN && kind != DT_RUNTIME_MEGATRON && p->cluster.device != DT_DEVICE_CUDA &&
        dt_hardware_hf_runtime_bytes(&p->cluster.hw, kind == DT_RUNTIME_DEEPSPEED, -1) <= 0)
        return fail("--runtime %s on CPU ranks needs the CPU profile's measured %s; hardware %s has none (bench/"
                    "validate_runtimes.sh measures it; or use a GPU --hardware such as H100-SXM-80GB, or --runtime "
                    "dtrun)", a->runtime, kind == DT_RUNTIME_DEEPSPEED ? "deepspeed_runtime_bytes" : "torch_runtime_bytes",
                    p->cluster.hw.name);
    if (kind != DT_RUNTIME_DTRUN) {
        dt_plan_set_runtime(p, kind);
        dt_error e = {0};
        if (ds && kind == DT_RUNTIME_DEEPSPEED && dt_dsconfig_apply_runtime(ds, p, &c->notes, &e)) {
            dt_error_prefix(&e, "--deepspeed %s", a->deepspeed);
            return dt_cli_fail_err(e.code, &e);
        }
    }
    if (a->deepspeed && kind == DT_RUNTIME_FSDP)
        return fail("--runtime fsdp with --deepspeed %s: a DeepSpeed config describes a DeepSpeed run (use --runtime "
                    "deepspeed, or drop --deepspeed)", a->deepspeed);
    dt_error e = {0};
    if (a->attention && dt_plan_set_attention(p, a->attention, "--attention", &e)) return dt_cli_fail_err(e.code, &e);
    if (a->recompute) {
        if (strcmp(a->recompute, "selective") && strcmp(a->recompute, "none"))
            return fail("--recompute '%s': expected selective or none (whole blocks: --ckpt)", a->recompute);
        if (!strcmp(a->recompute, "selective") && kind == DT_RUNTIME_DTRUN)
            return fail("--recompute selective: dtrun's engine recomputes whole blocks only (use --ckpt, or "
                        "--runtime deepspeed / fsdp)");
        p->activations.selective = !strcmp(a->recompute, "selective");
    }
    if (a->largest) {
        if (!strcmp(a->largest, "module")) c->largest_block_matrix = 0;
        else if (!strcmp(a->largest, "block_matrix")) c->largest_block_matrix = 1;
        else return fail("--largest-layer '%s': expected module or block_matrix", a->largest);
        if (kind == DT_RUNTIME_DTRUN && !a->compare)
            return fail("--largest-layer applies to --runtime deepspeed / fsdp and to --compare deepspeed");
        if (kind != DT_RUNTIME_DTRUN)
            p->runtime.largest_layer = c->largest_block_matrix ? DT_LARGEST_BLOCK_MATRIX : DT_LARGEST_MODULE;
    }
    return 0;
}

/* --mem must fit the hardware profile's device (issue 16: 100G on an 80 GiB H100 was
 * taken at its word). */
static int check_mem(const est_args *a, const est_ctx *c) {
    dt_error e = {0};
    /* with --plan the profile is the plan's: --hardware cannot be given then */
    if (c->mem_limit &&
        dt_hardware_check_mem_limit(&c->plan.cluster.hw, c->mem_limit, "--mem", a->mem, !a->plan, &e))
        return dt_cli_fail_err(e.code, &e);
    return 0;
}

static int setup(const est_args *a, est_ctx *c) {
    dt_error e = {0};
    memset(c, 0, sizeof *c);
    c->stage_filter = c->opt_filter = c->param_filter = -1;
    if (a->units && dt_parse_units(a->units, &c->units, &e)) return dt_cli_fail_err(e.code, &e);
    if (a->plot && dt_cli_check_plot_name("--plot", a->plot, "mem.png", &e)) return dt_cli_fail_err(e.code, &e);
    if (a->mem && dt_parse_bytes(a->mem, "--mem", &c->mem_limit, &e)) return dt_cli_fail_err(e.code, &e);
    if (a->compare && strcmp(a->compare, "deepspeed"))
        return fail("--compare '%s': the only estimator to compare with is 'deepspeed'", a->compare);
    if (a->stage) {
        int64_t s = -1;
        char *end = NULL;
        s = strtoll(a->stage, &end, 10);
        if (*end || end == a->stage || s < 0 || s > 3)
            return fail("--zero-stage '%s': must be 0, 1, 2 or 3", a->stage);
        c->stage_filter = (int)s;
    }
    dt_offload o;
    if (a->off_opt) {
        if (dt_offload_parse(a->off_opt, &o, &e)) return fail("--offload-optimizer: %s", e.msg);
        c->opt_filter = (int)o;
    }
    if (a->off_param) {
        if (dt_offload_parse(a->off_param, &o, &e)) return fail("--offload-param: %s", e.msg);
        c->param_filter = (int)o;
    }
    if (c->stage_filter >= 0 || c->opt_filter >= 0 || c->param_filter >= 0) {
        int st = c->stage_filter >= 0 ? c->stage_filter : 3;
        dt_offload oo = c->opt_filter >= 0 ? (dt_offload)c->opt_filter : DT_OFFLOAD_NONE;
        dt_offload op = c->param_filter >= 0 ? (dt_offload)c->param_filter : DT_OFFLOAD_NONE;
        if (dt_ds_check_offload(st, oo, op, &e)) return dt_cli_fail_err(e.code, &e);
    }

    if (a->plan) {
        /* every option the plan already fixes would be silently ignored */
        const struct { const char *v, *name; } fixed[] = {
            {a->params, "--params"}, {a->model, "--model"}, {a->gpus, "--gpus"}, {a->nodes, "--nodes"},
            {a->deepspeed, "--deepspeed"}, {a->micro, "--micro-batch"}, {a->accum, "--grad-accum"},
            {a->seq, "--seq"}, {a->ckpt, "--ckpt"}, {a->precision, "--precision"}, {a->hardware, "--hardware"},
            {a->attention, "--attention"}, {a->param_dtype, "--param-dtype"}, {a->grad_dtype, "--grad-dtype"},
            {a->master_dtype, "--master-dtype"}, {a->moment_dtype, "--moment-dtype"},
            {a->stage, "--zero-stage"}, {a->off_opt, "--offload-optimizer"}, {a->off_param, "--offload-param"},
            {a->runtime, "--runtime"}, {a->recompute, "--recompute"}, {a->largest, "--largest-layer"},
            {a->sub_group, "--sub-group-size"},
        };
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
            if (fixed[i].v)
                return fail("--plan fixes the configuration; %s cannot be combined with it (edit the plan, or "
                            "drop --plan)", fixed[i].name);
        if (a->ft.given)
            return fail("--plan fixes the configuration, its fine-tuning method too; the fine-tuning options cannot "
                        "be combined with it (drop --plan and give the model, or re-plan: dtplan solve --finetune lora)");
        if (dt_plan_load(a->plan, &c->plan, &e)) {
            dt_error_prefix(&e, "--plan");
            return dt_cli_fail_err(e.code, &e);
        }
        c->n_params = c->plan.model.requested_params > 0 ? c->plan.model.requested_params
                                                          : dt_model_params(&c->plan.model);
        c->from_config = 1;
        return check_mem(a, c);
    }

    dt_plan *p = &c->plan;
    dt_plan_defaults(p);
    int rc = resolve_model(a, c);
    if (rc) return rc;
    /* the kind first: the DeepSpeed config's notes depend on what the runtime models */
    if (a->runtime && dt_runtime_parse(a->runtime, &p->runtime.kind, &e)) return dt_cli_fail_err(e.code, &e);

    int64_t gpus = 1, nodes = 1;
    if (a->gpus && int_opt(a->gpus, "--gpus", EST_MAX_GPUS, 8, &gpus)) return 2;
    if (a->nodes && int_opt(a->nodes, "--nodes", EST_MAX_GPUS, 2, &nodes)) return 2;
    if (gpus % nodes)
        return fail("--gpus %lld is not divisible by --nodes %lld: every node runs the same number of GPUs",
                    (long long)gpus, (long long)nodes);
    p->cluster.nodes = nodes;
    p->cluster.gpus_per_node = gpus / nodes;
    p->parallel.world_size = gpus;

    const char *hw = a->hardware ? a->hardware : EST_DEFAULT_HARDWARE;
    if (dt_hardware_load(hw, NULL, &p->cluster.hw, &e)) return dt_cli_fail_err(e.code, &e);
    p->cluster.device = p->cluster.hw.device;
    if ((rc = check_mem(a, c))) return rc;

    int64_t micro = EST_DEFAULT_MICRO, accum = 1;
    int64_t seq = EST_DEFAULT_SEQ < p->model.max_pos ? EST_DEFAULT_SEQ : p->model.max_pos;
    if (a->micro && int_opt(a->micro, "--micro-batch", EST_MAX_MICRO, 4, &micro)) return 2;
    if (a->accum && int_opt(a->accum, "--grad-accum", EST_MAX_MICRO, 8, &accum)) return 2;
    if (a->seq && int_opt(a->seq, "--seq", EST_MAX_SEQ, 1024, &seq)) return 2;
    if (p->model.family == DT_FAMILY_GPT2 && seq > p->model.max_pos)
        return fail("--seq %lld: %s has %lld learned positions; use --seq %lld or less", (long long)seq,
                    p->model.name, (long long)p->model.max_pos, (long long)p->model.max_pos);
    p->batch.micro_batch = micro;
    p->batch.grad_accum = accum;
    p->batch.seq_len = seq;
    p->batch.global_batch = micro * accum * gpus;

    if (a->ckpt) {
        int64_t k = 0;
        if (!strcmp(a->ckpt, "none")) k = 0;
        else if (!strcmp(a->ckpt, "full")) k = p->model.n_layer;
        else {
            char *end = NULL;
            long long v = strtoll(a->ckpt, &end, 10);
            if (*end || end == a->ckpt || v < 0)
                return fail("--ckpt '%s': expected none, full or a number of layers (0..%lld)", a->ckpt,
                            (long long)p->model.n_layer);
            if (v > p->model.n_layer)
                return fail("--ckpt %lld: %s has only %lld layers", v, p->model.name,
                            (long long)p->model.n_layer);
            k = v;
        }
        p->activations.ckpt_layers = k;
    }
    if ((rc = resolve_precision(a, &p->precision))) return rc;

    dt_dsconfig ds;
    if (a->deepspeed) {
        if (dt_dsconfig_load(a->deepspeed, &ds, &e)) {
            dt_error_prefix(&e, "--deepspeed");
            return dt_cli_fail_err(e.code, &e);
        }
        if ((rc = check_mismatch(a, &ds, p))) return rc;
        c->notes = ds.notes;
        if (dt_dsconfig_apply(&ds, p, &c->notes, &e)) {
            dt_error_prefix(&e, "--deepspeed %s", a->deepspeed);
            return dt_cli_fail_err(e.code, &e);
        }
        c->from_config = 1;
    }
    if (a->sub_group) {
        if (a->deepspeed && ds.sub_group.state == DT_DS_SET)
            return fail("--sub-group-size %s and --deepspeed %s's sub_group_size %lld: give it in one place",
                        a->sub_group, a->deepspeed, (long long)ds.sub_group.value);
        if (dt_parse_count(a->sub_group, "--sub-group-size", &p->parallel.sub_group_elems, &e)) return dt_cli_fail_err(e.code, &e);
    }
    if ((rc = apply_runtime(a, c, a->deepspeed ? &ds : NULL))) return rc;
    if ((rc = apply_dtype_overrides(a, &p->precision))) return rc;
    if ((rc = dt_ft_args_apply(&a->ft, p))) return rc;   /* the method, checked against the model */
    return dt_obj_args_apply(&a->obj, p);   /* the objective, checked against the batch */
}

/* ------------------------------------------------------------ rows */

/* One row: the peak phase's breakdown (dt_memory_phases; dtrun's is the sum). */
static int row_memory(const dt_plan *p, int64_t n_params, est_row *r) {
    dt_error e = {0};
    dt_mem_phases ph;
    if (dt_memory_phases(p, n_params, &ph, &e)) return dt_cli_fail_err(e.code, &e);
    r->m = ph.at[ph.peak];
    r->phase = ph.peak;
    for (int i = 0; i < DT_MEM_PHASE_COUNT; i++) r->phase_total[i] = ph.at[i].total;
    return 0;
}

static int compute_rows(est_ctx *c, est_row *rows, int *n_rows) {
    *n_rows = 0;
    if (c->from_config) {
        est_row *r = &rows[(*n_rows)++];
        r->zero_stage = c->plan.parallel.zero_stage;
        r->opt = c->plan.parallel.offload_optimizer;
        r->param = c->plan.parallel.offload_param;
        return row_memory(&c->plan, c->n_params, r);
    }
    for (int stage = 0; stage <= 3; stage++)
        for (int o = DT_OFFLOAD_NONE; o <= DT_OFFLOAD_NVME; o++)
            for (int q = DT_OFFLOAD_NONE; q <= DT_OFFLOAD_NVME; q++) {
                if (dt_ds_check_offload(stage, (dt_offload)o, (dt_offload)q, NULL)) continue;
                if ((c->stage_filter >= 0 && stage != c->stage_filter) ||
                    (c->opt_filter >= 0 && o != c->opt_filter) || (c->param_filter >= 0 && q != c->param_filter))
                    continue;
                dt_plan p = c->plan;
                p.parallel.zero_stage = stage;
                p.parallel.offload_optimizer = (dt_offload)o;
                p.parallel.offload_param = (dt_offload)q;
                p.parallel.overlap_comm = stage == 3; /* DeepSpeed's default per stage */
                /* a runtime that cannot run the combination (FSDP: no stage 1, no NVMe) has no row;
                 * an NVMe row needs a directory only to be valid (DeepSpeed's documented example) */
                if (p.runtime.kind != DT_RUNTIME_DTRUN) {
                    dt_plan v = p;
                    if (!v.parallel.nvme_path[0]) snprintf(v.parallel.nvme_path, sizeof v.parallel.nvme_path, "%s", EST_NVME_EXAMPLE);
                    if (dt_plan_validate(&v, NULL)) continue;
                }
                est_row *r = &rows[(*n_rows)++];
                r->zero_stage = stage;
                r->opt = (dt_offload)o;
                r->param = (dt_offload)q;
                if (row_memory(&p, c->n_params, r)) return 2;
            }
    return 0;
}

/* ------------------------------------------------------------ output */

static double U(const est_ctx *c, int64_t b) { return dt_bytes_in(b, c->units); }

static void print_header(const est_ctx *c) {
    const dt_plan *p = &c->plan;
    const dt_model *m = &p->model;
    const dt_precision *pr = &p->precision;
    char cnt[32], b1[32], b2[32];
    int64_t shape_params = dt_model_params(m);
    printf("model      %s (%s family", m->name, dt_family_name(m->family));
    if (m->derived) {
        const char *src = dt_model_derived_source(m);
        printf(", shape derived for the requested count from %s)\n", src ? src : "a standard decoder");
        printf("shape      %" PRId64 " layers, hidden %" PRId64 ", %" PRId64 " heads, %" PRId64
               " kv heads, head dim %" PRId64 ", ffn %" PRId64 ", vocab %" PRId64 "\n",
               m->n_layer, m->hidden, m->n_head, m->n_kv_head, m->head_dim, m->ffn, m->vocab);
        printf("params     %" PRId64 " as requested (%s): model states use it; the derived shape has %" PRId64
               " (%s: activations, FLOPs, communication)\n",
               c->n_params, dt_format_count(c->n_params, cnt, sizeof cnt), shape_params,
               dt_format_count(shape_params, b1, sizeof b1));
    } else {
        printf(")\n");
        printf("shape      %" PRId64 " layers, hidden %" PRId64 ", %" PRId64 " heads, %" PRId64
               " kv heads, head dim %" PRId64 ", ffn %" PRId64 ", vocab %" PRId64 "\n",
               m->n_layer, m->hidden, m->n_head, m->n_kv_head, m->head_dim, m->ffn, m->vocab);
        printf("params     %" PRId64 " (%s)\n", c->n_params, dt_format_count(c->n_params, cnt, sizeof cnt));
    }
    /* Hugging Face runs on CPU ranks: the reserve is the runtime's measured footprint, per stage */
    char reserve[160];
    if (dt_memory_hf_on_cpu(p)) {
        int at = snprintf(reserve, sizeof reserve, "runtime footprint (measured) ");
        for (int s = 0; s < DT_HW_STAGES && at > 0 && (size_t)at < sizeof reserve; s++)
            at += snprintf(reserve + at, sizeof reserve - (size_t)at, "%s%s", s ? " / " : "",
                           dt_format_bytes(dt_hardware_hf_runtime_bytes(&p->cluster.hw, p->runtime.kind ==
                                                                        DT_RUNTIME_DEEPSPEED, s), c->units, b2, sizeof b2));
        if (at > 0 && (size_t)at < sizeof reserve) snprintf(reserve + at, sizeof reserve - (size_t)at, " at ZeRO 0/1/2/3");
    } else {
        snprintf(reserve, sizeof reserve, "reserve %s", dt_format_bytes(p->cluster.hw.reserve_bytes, c->units, b2, sizeof b2));
    }
    printf("cluster    %" PRId64 " node%s x %" PRId64 " %s%s = %" PRId64 " %srank%s; hardware %s (%s per %s, %s)\n",
           p->cluster.nodes, p->cluster.nodes > 1 ? "s" : "", p->cluster.gpus_per_node, dt_chart_rank_word(),
           p->cluster.gpus_per_node > 1 ? "s" : "", p->parallel.world_size, dt_layout_active(p) ? "" : "data-parallel ",
           p->parallel.world_size > 1 ? "s" : "", p->cluster.hw.name,
           dt_format_bytes(p->cluster.hw.device_mem_bytes, c->units, b1, sizeof b1), dt_chart_rank_word(), reserve);
    char lay[320];
    dt_p3_describe(p, lay, sizeof lay);
    if (lay[0]) printf("layout     %s; memory of the largest pipeline stage\n", lay);
    printf("batch      micro-batch %" PRId64 ", sequence %" PRId64 ", checkpointed layers %" PRId64 " of %" PRId64
           ", %s attention\n",
           p->batch.micro_batch, p->batch.seq_len, p->activations.ckpt_layers, m->n_layer,
           p->runtime.kind != DT_RUNTIME_DTRUN ? dt_attn_kernel_name(p->runtime.attention)
           : p->activations.attention == DT_ATTN_FLASH ? "flash" : "materialized");
    printf("precision  %s: params %s (%d B), grads %s (%d B), optimizer %d B/param (",
           dt_precision_preset_name(pr->preset), dt_dtype_name(pr->param), dt_precision_param_bytes(pr),
           dt_dtype_name(pr->grad), dt_precision_grad_bytes(pr), dt_precision_optimizer_bytes(pr));
    if (pr->has_master) printf("%s master + ", dt_dtype_name(pr->master));
    else printf("no master copy, ");
    printf("%s m and v), activations %s\n", dt_dtype_name(pr->moment), dt_dtype_name(pr->activation));
    if (p->runtime.kind != DT_RUNTIME_DTRUN) {
        const dt_runtime *r = &p->runtime;
        printf("runtime    %s (%s): %s attention%s, dropout %s, logits %s, RMSNorm %s, "
               "activation %s; the peak is the largest phase of the step\n",
               dt_runtime_name(r->kind), dt_runtime_code(r->kind), dt_attn_kernel_name(r->attention),
               p->activations.selective ? " with selective recompute" : "", r->dropout ? "on" : "off",
               r->upcast_logits ? "fp32" : "16-bit", r->upcast_norm ? "in fp32" : "as the weights",
               r->unfused_act ? "unfused" : "fused");
        char mg[320];
        dt_mg_describe(p, mg, sizeof mg);
        if (mg[0]) printf("megatron   %s\n", mg);
        if (r->kind == DT_RUNTIME_DEEPSPEED)
            printf("zero-3     largest layer = %s; max_reuse_distance %" PRId64 ", persistence_threshold %" PRId64
                   ", fetch overhead %g s per module\n",
                   r->largest_layer == DT_LARGEST_MODULE ? "the largest module" : "a block's largest matrix",
                   r->max_reuse_distance, r->persistence_threshold, r->fetch_overhead_s);
        if (r->grads_allreduce || r->comm_dtype_set)
            printf("gradients  %s%s%s\n", r->grads_allreduce ? "all-reduced (reduce_scatter false)" : "reduce-scattered",
                   r->comm_dtype_set ? ", communicated in " : "", r->comm_dtype_set ? dt_dtype_name(r->comm_dtype) : "");
        if (r->offload_ratio < 1.0 || r->hpz_partition > 1 || r->quantized_weights || r->quantized_gradients)
            printf("zero-3     offload_optimizer.ratio %g; ZeRO++: hpZ group %" PRId64 ", qwZ %s, qgZ %s "
                   "(docs/memory-model.md \"Partial offload and ZeRO++\")\n",
                   r->offload_ratio, r->hpz_partition, r->quantized_weights ? "on" : "off",
                   r->quantized_gradients ? "on" : "off");
    }
    if (c->from_config && p->parallel.zero_stage > 0)
        printf("buckets    reduce %" PRId64 ", allgather %" PRId64 ", stage-3 prefetch %" PRId64 " elements; overlap_comm %s\n",
               p->parallel.reduce_bucket_elems, p->parallel.allgather_bucket_elems,
               p->parallel.prefetch_bucket_elems, p->parallel.overlap_comm ? "on" : "off");
    dt_ft_print_summary(p, "finetune   ");
    dt_vlm_print_summary(p, "vision     ");
    dt_obj_print_summary(p, "objective  ");
    printf("units      %s; device columns per %s, host and NVMe per node\n",
           c->units == DT_UNITS_GB ? "GB = 10^9 bytes" : "GiB = 2^30 bytes", dt_chart_rank_word());
    for (int i = 0; i < c->notes.n; i++) printf("note       %s\n", c->notes.line[i]);
    printf("\n");
}

static void print_table(const est_ctx *c, const est_row *rows, int n) {
    const char *u = dt_units_name(c->units);
    char lim[32];
    int cpu = !strcmp(dt_chart_rank_word(), "rank");
    printf("                 |%s per %s (%s) %s| per node (%s)\n",
           cpu ? "------------------------------" : "-------------------------------", dt_chart_rank_word(), u,
           "-------------------------------", u);
    const int phased = c->plan.runtime.kind != DT_RUNTIME_DTRUN;
    printf("ZeRO  offload    |   params    grads optimizer |   states |    activ  buffers  reserve |    total |      host       NVMe");
    if (c->mem_limit) printf(" | fits %s", dt_format_bytes(c->mem_limit, c->units, lim, sizeof lim));
    if (phased) printf(" | peak at");
    printf("\n      opt/param  |\n");
    for (int i = 0; i < n; i++) {
        const dt_mem_breakdown *m = &rows[i].m;
        char off[16];
        snprintf(off, sizeof off, "%s/%s", dt_offload_name(rows[i].opt), dt_offload_name(rows[i].param));
        int64_t states = m->params + m->grads + m->optimizer;
        printf("  %d   %-10s | %8.2f %8.2f %9.2f | %8.2f | %8.2f %8.2f %8.2f | %8.2f | %9.2f  %9.2f", rows[i].zero_stage,
               off, U(c, m->params), U(c, m->grads), U(c, m->optimizer), U(c, states), U(c, m->activations),
               U(c, m->buffers), U(c, m->reserve), U(c, m->total), U(c, m->host_total), U(c, m->nvme));
        if (c->mem_limit) printf(" | %s", m->total <= c->mem_limit ? "yes" : "no");
        if (phased) printf(" | %s", dt_mem_phase_name(rows[i].phase));
        printf("\n");
    }
    printf("\nstates = params + grads + optimizer (the model states the ZeRO paper tabulates); "
           "total = states + activations + buffers + reserve.\n");
    if (phased)
        printf("each row is the phase of the step with the most device memory (backward start: every activation and the "
               "loss's fp32 buffers; backward end: gradients complete; optimizer step), its terms as they are then.\n");
}

/* A fine-tuning method: every term it changes, for the configuration (a DeepSpeed config or
 * a plan), else the first row that fits --mem (the first row without --mem). */
static void print_finetune_terms(const est_ctx *c, const est_row *rows, int n) {
    if ((c->plan.finetune.method == DT_FT_FULL && !dt_objplan_active(&c->plan) && !dt_vlm_active(&c->plan.vlm)) ||
        n < 1)
        return;
    dt_plan p = c->plan;
    if (!c->from_config) {
        int k = 0;
        while (c->mem_limit && k + 1 < n && rows[k].m.total > c->mem_limit) k++;
        p.parallel.zero_stage = rows[k].zero_stage;
        p.parallel.offload_optimizer = rows[k].opt;
        p.parallel.offload_param = rows[k].param;
        p.parallel.overlap_comm = rows[k].zero_stage == 3;
        if (p.parallel.offload_optimizer == DT_OFFLOAD_NVME || p.parallel.offload_param == DT_OFFLOAD_NVME)
            snprintf(p.parallel.nvme_path, sizeof p.parallel.nvme_path, "%s", EST_NVME_EXAMPLE);
    }
    dt_ft_print_terms(&p, c->units);
    dt_vlm_print_terms(&p, c->units);   /* a vision-language model: the tower, projector and LLM rows */
    dt_obj_print_terms(&p, c->units);   /* an objective: every model's rows, the generation phase */
}

/* One configuration (a DeepSpeed config or a plan): its predicted step as well, so what the
 * config's keys change in time (buckets, overlap, ZeRO++, the gradients' collective) shows
 * next to the memory. Nothing when the time model cannot price the plan. */
static void print_config_time(const est_ctx *c) {
    dt_time_breakdown t;
    dt_error e = {0};
    if (dt_time_estimate(&c->plan, &t, &e)) return;
    printf("time       step %.4g s = compute %.4g + recompute %.4g + exposed comm %.4g (of %.4g) + offload %.4g + "
           "optimizer %.4g; %.0f tokens/s, MFU %.1f%% (docs/time-model.md; dtplan simulate draws the step)\n",
           t.step_s, t.compute_s, t.recompute_s, t.comm_exposed_s, t.comm_s, t.offload_s, t.optimizer_s,
           t.tokens_per_s, 100.0 * t.mfu);
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

static void print_json(const est_ctx *c, const est_row *rows, int n) {
    const dt_plan *p = &c->plan;
    const dt_model *m = &p->model;
    printf("{\n  \"model\": {\"name\": ");
    json_str(m->name);
    printf(", \"family\": \"%s\", \"derived\": %s, \"params\": %" PRId64 ", \"shape_params\": %" PRId64
           ", \"n_layer\": %" PRId64 ", \"hidden\": %" PRId64 ", \"n_head\": %" PRId64 ", \"n_kv_head\": %" PRId64
           ", \"head_dim\": %" PRId64 ", \"ffn\": %" PRId64 ", \"vocab\": %" PRId64 "},\n",
           dt_family_name(m->family), m->derived ? "true" : "false", c->n_params, dt_model_params(m), m->n_layer,
           m->hidden, m->n_head, m->n_kv_head, m->head_dim, m->ffn, m->vocab);
    printf("  \"cluster\": {\"nodes\": %" PRId64 ", \"gpus_per_node\": %" PRId64 ", \"hardware\": ",
           p->cluster.nodes, p->cluster.gpus_per_node);
    json_str(p->cluster.hw.name);
    printf("},\n  \"batch\": {\"micro_batch\": %" PRId64 ", \"seq_len\": %" PRId64 ", \"ckpt_layers\": %" PRId64
           ", \"attention\": \"%s\"},\n",
           p->batch.micro_batch, p->batch.seq_len, p->activations.ckpt_layers,
           p->activations.attention == DT_ATTN_FLASH ? "flash" : "materialized");
    printf("  \"precision\": \"%s\",\n", dt_precision_preset_name(p->precision.preset));
    if (p->runtime.kind != DT_RUNTIME_DTRUN) {
        const dt_runtime *r = &p->runtime;
        printf("  \"runtime\": {\"kind\": \"%s\", \"attention\": \"%s\", \"selective_recompute\": %s, \"dropout\": %s, "
               "\"upcast_logits\": %s, \"upcast_norm\": %s, \"upcast_softmax\": %s, \"unfused_act\": %s, "
               "\"largest_layer\": \"%s\", \"max_reuse_distance\": %" PRId64 ", \"persistence_threshold\": %" PRId64
               ", \"offload_ratio\": %g, \"hpz_partition_size\": %" PRId64
               ", \"quantized_weights\": %s, \"quantized_gradients\": %s, \"reduce_scatter\": %s"
               ", \"communication_data_type\": %s%s%s},\n",
               dt_runtime_name(r->kind), dt_attn_kernel_name(r->attention), p->activations.selective ? "true" : "false",
               r->dropout ? "true" : "false", r->upcast_logits ? "true" : "false", r->upcast_norm ? "true" : "false",
               r->upcast_softmax ? "true" : "false", r->unfused_act ? "true" : "false",
               dt_largest_layer_name(r->largest_layer), r->max_reuse_distance, r->persistence_threshold,
               r->offload_ratio, r->hpz_partition, r->quantized_weights ? "true" : "false",
               r->quantized_gradients ? "true" : "false", r->grads_allreduce ? "false" : "true",
               r->comm_dtype_set ? "\"" : "", r->comm_dtype_set ? dt_dtype_name(r->comm_dtype) : "null",
               r->comm_dtype_set ? "\"" : "");
    }
    dt_ft_print_json(p);
    dt_vlm_print_json(p);
    dt_obj_print_json(p);
    if (c->mem_limit) printf("  \"mem_limit\": %" PRId64 ",\n", c->mem_limit);
    printf("  \"rows\": [\n");
    for (int i = 0; i < n; i++) {
        const dt_mem_breakdown *b = &rows[i].m;
        printf("    {\"zero_stage\": %d, \"offload_optimizer\": \"%s\", \"offload_param\": \"%s\",\n", rows[i].zero_stage,
               dt_offload_name(rows[i].opt), dt_offload_name(rows[i].param));
        printf("     \"per_gpu\": {\"params\": %" PRId64 ", \"grads\": %" PRId64 ", \"optimizer\": %" PRId64
               ", \"activations\": %" PRId64 ", \"buffers\": %" PRId64 ", \"reserve\": %" PRId64 ", \"total\": %" PRId64 "},\n",
               b->params, b->grads, b->optimizer, b->activations, b->buffers, b->reserve, b->total);
        printf("     \"per_host\": {\"params\": %" PRId64 ", \"optimizer\": %" PRId64 ", \"buffers\": %" PRId64
               ", \"total\": %" PRId64 "},\n     \"nvme\": %" PRId64,
               b->host_params, b->host_optimizer, b->host_buffers, b->host_total, b->nvme);
        if (c->mem_limit) printf(", \"fits\": %s", b->total <= c->mem_limit ? "true" : "false");
        if (p->runtime.kind != DT_RUNTIME_DTRUN) {
            printf(", \"peak_phase\": \"%s\",\n     \"phase_totals\": {", dt_mem_phase_name(rows[i].phase));
            for (int k = DT_MEM_PHASE_BWD_START; k < DT_MEM_PHASE_COUNT; k++)
                printf("%s\"%s\": %" PRId64, k > DT_MEM_PHASE_BWD_START ? ", " : "", dt_mem_phase_name((dt_mem_phase)k),
                       rows[i].phase_total[k]);
            printf("}");
        }
        printf("}%s\n", i + 1 < n ? "," : "");
    }
    printf("  ]\n}\n");
}

static void print_compare(const est_ctx *c, const est_row *rows, int n) {
    const dt_plan *p = &c->plan;
    const int64_t P = c->n_params;
    const int64_t L = c->largest_block_matrix ? dt_model_largest_block_matrix_params(&p->model)
                                              : dt_model_largest_module_params(&p->model);
    const int64_t g = p->cluster.gpus_per_node, N = p->cluster.nodes, G = g * N;
    char buf[2048];
    if (c->largest_block_matrix)
        printf("\nDeepSpeed's own estimators for the same case (estimate_zero2/zero3_model_states_mem_needs_all_cold,\n"
               "DeepSpeed 0.16.5; its \"GB\" is bytes/2^30, i.e. GiB; largest layer = a block's largest matrix, "
               "--largest-layer block_matrix, not what DeepSpeed's model_to_params finds):\n\n");
    else
        printf("\nDeepSpeed's own estimators for the same case (estimate_zero2/zero3_model_states_mem_needs_all_cold,\n"
               "DeepSpeed 0.16.5; its \"GB\" is bytes/2^30, i.e. GiB; largest layer = the %s-row embedding/lm_head):\n\n",
               "vocab");
    dt_ds_format_zero2_cold(P, g, N, buf, sizeof buf);
    fputs(buf, stdout);
    printf("\n");
    dt_ds_format_zero3_cold(P, L, g, N, buf, sizeof buf);
    fputs(buf, stdout);

    /* one line on why: compare the like-for-like rows when they are in the table */
    const dt_mem_breakdown *z2 = NULL;
    for (int i = 0; i < n; i++)
        if (rows[i].zero_stage == 2 && rows[i].opt == DT_OFFLOAD_NONE) z2 = &rows[i].m;
    int64_t cpu, gpu;
    dt_ds_zero2_mem(P, g, N, 0, DT_DS_BUFFER_FACTOR, &cpu, &gpu);
    printf("\nwhy ours differ: DeepSpeed counts model states only, at 2 B/param replicated + 18 B/param sharded "
           "(16-bit and fp32 grads, fp32 master, Adam m and v) and, for ZeRO-3, 4 B x the largest layer "
           "(%" PRId64 " params)",
           L);
    if (z2)
        printf("; e.g. ZeRO-2 without offload: DeepSpeed %.2f GiB vs dtplan's model states %.2f GiB (%s: %d+%d+%d B/param)"
               " plus %.2f GiB of activations, buffers and reserve that DeepSpeed leaves out",
               (double)gpu / 1073741824.0, (double)(z2->params + z2->grads + z2->optimizer) / 1073741824.0,
               dt_precision_preset_name(p->precision.preset), dt_precision_param_bytes(&p->precision),
               dt_precision_grad_bytes(&p->precision), dt_precision_optimizer_bytes(&p->precision),
               (double)(z2->activations + z2->buffers + z2->reserve) / 1073741824.0);
    printf("; its CPU column adds a 1.5x buffer factor and the fp32 model copies made at load time (%" PRId64 " GPUs).\n", G);
}

static void print_plan_staleness(const est_ctx *c, const est_row *r) {
    const dt_prediction *pred = &c->plan.prediction;
    if (!pred->valid) {
        printf("\nnote: the plan stores no valid prediction; these rows are the current model's\n");
        return;
    }
    const dt_mem_breakdown *s = &pred->memory, *m = &r->m;
    if (!memcmp(s, m, sizeof *s)) {
        printf("\nthe plan's stored memory prediction matches this estimate\n");
        return;
    }
    char a[32], b[32];
    printf("\nnote: the plan's stored prediction is stale: stored total %s per %s, now %s",
           dt_format_bytes(s->total, c->units, a, sizeof a), dt_chart_rank_word(),
           dt_format_bytes(m->total, c->units, b, sizeof b));
    static const char *names[] = {"params", "grads", "optimizer", "activations", "buffers", "reserve"};
    const int64_t sv[] = {s->params, s->grads, s->optimizer, s->activations, s->buffers, s->reserve};
    const int64_t mv[] = {m->params, m->grads, m->optimizer, m->activations, m->buffers, m->reserve};
    for (int i = 0; i < 6; i++)
        if (sv[i] != mv[i])
            printf("; %s %s -> %s", names[i], dt_format_bytes(sv[i], c->units, a, sizeof a),
                   dt_format_bytes(mv[i], c->units, b, sizeof b));
    if (s->host_total != m->host_total)
        printf("; host %s -> %s", dt_format_bytes(s->host_total, c->units, a, sizeof a),
               dt_format_bytes(m->host_total, c->units, b, sizeof b));
    printf(" (refresh it by re-solving or re-exporting the plan)\n");
}

/* --plot: the table as stacked bars, one per row, --mem as the limit line. */
static int plot_rows(const est_ctx *c, const est_row *rows, int n, const char *path) {
    char (*lab)[48] = calloc((size_t)n, sizeof *lab);
    const char **labels = calloc((size_t)n, sizeof *labels);
    dt_mem_breakdown *m = calloc((size_t)n, sizeof *m);
    if (!lab || !labels || !m) {
        free(lab), free(labels), free(m);
        return fail("out of memory");
    }
    for (int i = 0; i < n; i++) {
        int k = snprintf(lab[i], sizeof lab[i], "ZeRO-%d", rows[i].zero_stage);
        if (rows[i].opt != DT_OFFLOAD_NONE)
            k += snprintf(lab[i] + k, sizeof lab[i] - (size_t)k, " opt:%s", dt_offload_name(rows[i].opt));
        if (rows[i].param != DT_OFFLOAD_NONE)
            snprintf(lab[i] + k, sizeof lab[i] - (size_t)k, " par:%s", dt_offload_name(rows[i].param));
        labels[i] = lab[i];
        m[i] = rows[i].m;
    }
    char title[192], cnt[32];
    snprintf(title, sizeof title, "%s (%s params), %lld %s(s): memory per %s", c->plan.model.name,
             dt_format_count(c->n_params, cnt, sizeof cnt), (long long)c->plan.parallel.world_size,
             dt_chart_rank_word(), dt_chart_rank_word());
    dt_error e = {0};
    int rc = dt_chart_memory_rows(path, title, n, labels, m, c->mem_limit, c->units, &e) ? dt_cli_fail_err(e.code, &e) : 0;
    if (!rc) printf("plot: %s\n", path);
    free(lab), free(labels), free(m);
    return rc;
}

int dt_estimate_plan(int argc, char **argv, dt_plan *out) {
    est_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    est_ctx *c = calloc(1, sizeof *c);
    if (!c) return fail("out of memory");
    rc = setup(&a, c);
    if (!rc && !c->from_config) {
        if (c->stage_filter < 0 || c->opt_filter < 0 || c->param_filter < 0)
            rc = fail("one configuration is needed: --deepspeed FILE, or --zero-stage with --offload-optimizer and "
                      "--offload-param");
        c->plan.parallel.zero_stage = c->stage_filter;
        c->plan.parallel.offload_optimizer = (dt_offload)c->opt_filter;
        c->plan.parallel.offload_param = (dt_offload)c->param_filter;
        c->plan.parallel.overlap_comm = c->stage_filter == 3;   /* DeepSpeed's default per stage */
    }
    dt_error e = {0};
    if (!rc && dt_plan_validate(&c->plan, &e)) rc = dt_cli_fail_err(e.code, &e);
    if (!rc) *out = c->plan;
    free(c);
    return rc;
}

int dt_cmd_estimate(int argc, char **argv) {
    est_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    est_ctx *c = calloc(1, sizeof *c);
    est_row *rows = calloc(EST_MAX_ROWS, sizeof *rows);
    if (!c || !rows) {
        free(c);
        free(rows);
        return fail("out of memory");
    }
    rc = setup(&a, c);
    if (!rc) {
        dt_chart_set_device(c->plan.cluster.device);
        int n = 0;
        rc = compute_rows(c, rows, &n);
        if (!rc && n == 0) rc = fail("no stage/offload row matches the filters");
        if (!rc) {
            if (a.json) {
                print_json(c, rows, n);
            } else {
                print_header(c);
                print_table(c, rows, n);
                if (c->from_config) print_config_time(c);
                print_finetune_terms(c, rows, n);
                if (a.plan) print_plan_staleness(c, &rows[0]);
                if (a.compare) print_compare(c, rows, n);
            }
            if (!rc && a.plot) rc = plot_rows(c, rows, n, a.plot);
        }
    }
    free(rows);
    free(c);
    return rc;
}
