/* dsexport.c — see dt_dsexport.h. DeepSpeed key names and defaults are DeepSpeed's
 * own (commit 38327e07: deepspeed/runtime/zero/config.py, zero/offload_config.py,
 * constants.py, lr_schedules.py); the launch lines use torchrun's flags
 * (torch/distributed/run.py) as the users' runbooks do (docs/plan-format.md,
 * "DeepSpeed export"). */
#include "dt_dsexport.h"
#include "dt_layout.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_json.h"

#define DS_DEFAULT_SCRIPT "train.py"
#define DS_DEFAULT_CONFIG "ds_config.json"
#define DS_DEFAULT_JOB "dtplan"
/* WarmupLR / WarmupDecayLR / WarmupCosineLR (deepspeed/runtime/lr_schedules.py, 0.19.8,
 * each __init__) raise "warmup_num_steps must be a positive integer, got 0" for W <= 0,
 * then run with max(2, W) (the log warmup divides by ln W), as dtrun does
 * (engine/model/optim.c DT_MIN_WARMUP_STEPS). A plan's W of 0 is exported as 1: the
 * smallest value DeepSpeed accepts, run exactly as 0 would be, and never above the
 * plan's total_steps (>= 1), so the file still imports into a valid plan. */
#define DS_MIN_WARMUP_STEPS 1

void dt_dsexport_opts_default(dt_dsexport_opts *o) {
    o->config_path = DS_DEFAULT_CONFIG;
    o->plan_path = "plan.json";
    o->script = DS_DEFAULT_SCRIPT;
    o->master_addr = "$MASTER_ADDR";
    o->master_port = DT_DEFAULT_MASTER_PORT;
    o->job_name = DS_DEFAULT_JOB;
}

char *dt_export_text_close(FILE *f, char **buf, const char *what, dt_error *err) {
    if (fclose(f) != 0 || !*buf) {   /* open_memstream sets *buf only when flushed or closed */
        free(*buf);
        dt_errorf(err, DT_ENOMEM, "export %s: out of memory", what);
        return NULL;
    }
    return *buf;
}

/* ---- a growing string on open_memstream ---- */
typedef struct {
    FILE *f;
    char *s;
    size_t n;
} strbuf;

static int sb_open(strbuf *b) {
    b->s = NULL;
    b->n = 0;
    b->f = open_memstream(&b->s, &b->n);
    return b->f != NULL;
}

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(b->f, fmt, ap);
    va_end(ap);
}

static char *sb_close(strbuf *b, dt_error *err) {
    if (fclose(b->f) != 0 || !b->s) {
        free(b->s);
        dt_errorf(err, DT_ENOMEM, "out of memory while writing the DeepSpeed export");
        return NULL;
    }
    return b->s;
}

static int check_plan(const dt_plan *p, dt_error *err) {
    int rc = dt_plan_validate(p, err);
    if (rc) dt_error_prefix(err, "cannot export an invalid plan");
    return rc;
}

/* Validates the plan and opens the output buffer; 0 on success. */
static int begin(const dt_plan *p, strbuf *b, dt_error *err) {
    if (check_plan(p, err)) return err ? err->code : DT_EINVAL;
    if (!sb_open(b)) return dt_errorf(err, DT_ENOMEM, "out of memory");
    return DT_OK;
}

/* ---------------------------------------------------------------- config */

static void add_offload(cJSON *zero, const char *key, dt_offload o, const char *nvme_path, double ratio) {
    if (o == DT_OFFLOAD_NONE) return; /* DeepSpeed's default device "none" */
    cJSON *x = cJSON_AddObjectToObject(zero, key);
    cJSON_AddStringToObject(x, "device", dt_offload_name(o));
    if (o == DT_OFFLOAD_NVME) cJSON_AddStringToObject(x, "nvme_path", nvme_path);
    /* page-locked host buffers: what the users' configs/deepspeed/zero3.json sets and
     * what makes the host<->device bandwidth in the hardware profile (pinned) apply */
    cJSON_AddBoolToObject(x, "pin_memory", 1);
    if (ratio < 1.0) cJSON_AddNumberToObject(x, "ratio", ratio);   /* partial offload (deepspeed runtime) */
}

static cJSON *config_tree(const dt_plan *p) {
    cJSON *root = cJSON_CreateObject();
    const dt_batch *b = &p->batch;
    cJSON_AddNumberToObject(root, "train_batch_size", (double)b->global_batch);
    cJSON_AddNumberToObject(root, "train_micro_batch_size_per_gpu", (double)b->micro_batch);
    cJSON_AddNumberToObject(root, "gradient_accumulation_steps", (double)b->grad_accum);
    /* DeepSpeed's code default is 0 (off), so always write the plan's value
     * (GRADIENT_CLIPPING_DEFAULT, deepspeed/runtime/constants.py) */
    cJSON_AddNumberToObject(root, "gradient_clipping", p->optimizer.grad_clip);
    if (p->runtime.kind == DT_RUNTIME_DEEPSPEED && p->runtime.comm_dtype_set)
        cJSON_AddStringToObject(root, "communication_data_type", dt_dtype_name(p->runtime.comm_dtype));

    const dt_parallel *q = &p->parallel;
    cJSON *z = cJSON_AddObjectToObject(root, "zero_optimization");
    cJSON_AddNumberToObject(z, "stage", q->zero_stage);
    const double ratio = p->runtime.kind == DT_RUNTIME_DEEPSPEED ? p->runtime.offload_ratio : 1.0;
    add_offload(z, "offload_optimizer", q->offload_optimizer, q->nvme_path, ratio);
    add_offload(z, "offload_param", q->offload_param, q->nvme_path, 1.0);
    cJSON_AddBoolToObject(z, "overlap_comm", q->overlap_comm);
    cJSON_AddBoolToObject(z, "contiguous_gradients", 1);
    cJSON_AddBoolToObject(z, "reduce_scatter", !(p->runtime.kind == DT_RUNTIME_DEEPSPEED && p->runtime.grads_allreduce));
    cJSON_AddNumberToObject(z, "reduce_bucket_size", (double)q->reduce_bucket_elems);
    cJSON_AddNumberToObject(z, "allgather_bucket_size", (double)q->allgather_bucket_elems);
    /* the stage-3 keys are accepted at every stage; writing them keeps the
     * round trip through `dtplan estimate --deepspeed` exact for stage-3 rows */
    cJSON_AddNumberToObject(z, "stage3_prefetch_bucket_size", (double)q->prefetch_bucket_elems);
    cJSON_AddNumberToObject(z, "stage3_max_live_parameters", (double)q->max_live_params);
    cJSON_AddNumberToObject(z, "sub_group_size", (double)q->sub_group_elems);
    if (p->runtime.kind == DT_RUNTIME_DEEPSPEED) {
        /* what the deepspeed runtime profile modelled (docs/memory-model.md "Runtime profiles") */
        cJSON_AddNumberToObject(z, "stage3_max_reuse_distance", (double)p->runtime.max_reuse_distance);
        cJSON_AddNumberToObject(z, "stage3_param_persistence_threshold", (double)p->runtime.persistence_threshold);
        /* ZeRO++ as the plan modelled it (written only when on: DeepSpeed's defaults are off) */
        if (p->runtime.hpz_partition > 1)
            cJSON_AddNumberToObject(z, "zero_hpz_partition_size", (double)p->runtime.hpz_partition);
        if (p->runtime.quantized_weights) cJSON_AddBoolToObject(z, "zero_quantized_weights", 1);
        if (p->runtime.quantized_gradients) cJSON_AddBoolToObject(z, "zero_quantized_gradients", 1);
    }

    const dt_precision *pr = &p->precision;
    int bf16 = pr->preset == DT_PREC_MIXED_BF16 || pr->preset == DT_PREC_PURE_BF16;
    int fp16 = pr->preset == DT_PREC_MIXED_FP16;
    cJSON *f = cJSON_AddObjectToObject(root, "bf16");
    cJSON_AddBoolToObject(f, "enabled", bf16);
    f = cJSON_AddObjectToObject(root, "fp16");
    cJSON_AddBoolToObject(f, "enabled", fp16);
    if (fp16) {
        /* every scaler key written, so DeepSpeed uses them rather than its class
         * defaults (2^32, hysteresis 1: DynamicLossScaler,
         * deepspeed/runtime/fp16/loss_scaler.py) */
        cJSON_AddNumberToObject(f, "loss_scale", pr->loss_scale);
        cJSON_AddNumberToObject(f, "initial_scale_power", pr->initial_scale_power);
        cJSON_AddNumberToObject(f, "loss_scale_window", pr->loss_scale_window);
        cJSON_AddNumberToObject(f, "hysteresis", pr->hysteresis);
        cJSON_AddNumberToObject(f, "min_loss_scale", pr->min_loss_scale);
    }
    if (pr->grad != pr->param) {
        /* gradient accumulation wider than the weights (DeepSpeed "data_types") */
        cJSON *d = cJSON_AddObjectToObject(root, "data_types");
        cJSON_AddStringToObject(d, "grad_accum_dtype", dt_dtype_name(pr->grad));
    }

    const dt_optimizer *o = &p->optimizer;
    cJSON *opt = cJSON_AddObjectToObject(root, "optimizer");
    cJSON_AddStringToObject(opt, "type", "AdamW");
    cJSON *op = cJSON_AddObjectToObject(opt, "params");
    cJSON_AddNumberToObject(op, "lr", o->lr);
    double betas[2] = {o->beta1, o->beta2};
    cJSON_AddItemToObject(op, "betas", cJSON_CreateDoubleArray(betas, 2));
    cJSON_AddNumberToObject(op, "eps", o->eps);
    cJSON_AddNumberToObject(op, "weight_decay", o->weight_decay);

    const dt_schedule *s = &p->schedule;
    const double warmup = (double)(s->warmup_steps > DS_MIN_WARMUP_STEPS ? s->warmup_steps : DS_MIN_WARMUP_STEPS);
    const char *warmup_type = s->warmup_linear ? "linear" : "log";
    if (s->kind != DT_SCHED_CONSTANT) {
        cJSON *sch = cJSON_AddObjectToObject(root, "scheduler");
        cJSON *sp;
        switch (s->kind) {
        case DT_SCHED_WARMUP_LR:
        case DT_SCHED_WARMUP_DECAY_LR:
            cJSON_AddStringToObject(sch, "type", s->kind == DT_SCHED_WARMUP_LR ? "WarmupLR" : "WarmupDecayLR");
            sp = cJSON_AddObjectToObject(sch, "params");
            if (s->kind == DT_SCHED_WARMUP_DECAY_LR)
                cJSON_AddNumberToObject(sp, "total_num_steps", (double)s->total_steps);
            cJSON_AddNumberToObject(sp, "warmup_min_lr", s->warmup_min_lr);
            cJSON_AddNumberToObject(sp, "warmup_max_lr", o->lr);
            cJSON_AddNumberToObject(sp, "warmup_num_steps", warmup);
            cJSON_AddStringToObject(sp, "warmup_type", warmup_type);
            break;
        default: /* WarmupCosineLR: multiplies the optimizer's lr (deepspeed/runtime/lr_schedules.py) */
            cJSON_AddStringToObject(sch, "type", "WarmupCosineLR");
            sp = cJSON_AddObjectToObject(sch, "params");
            cJSON_AddNumberToObject(sp, "total_num_steps", (double)s->total_steps);
            cJSON_AddNumberToObject(sp, "warmup_min_ratio", s->warmup_min_lr);
            cJSON_AddNumberToObject(sp, "warmup_num_steps", warmup);
            cJSON_AddNumberToObject(sp, "cos_min_ratio", s->cos_min_ratio);
            cJSON_AddStringToObject(sp, "warmup_type", warmup_type);
            break;
        }
    }
    cJSON_AddBoolToObject(root, "wall_clock_breakdown", 0);
    return root;
}

char *dt_dsexport_config(const dt_plan *p, dt_error *err) {
    if (check_plan(p, err)) return NULL;
    if (p->runtime.kind == DT_RUNTIME_MEGATRON) {
        dt_errorf(err, DT_EINVAL,
                  "export --deepspeed: the plan is for runtime megatron (Megatron-LM's own model code and "
                  "distributed optimizer), not DeepSpeed; dtplan export --megatron writes its arguments, or re-plan "
                  "with dtplan solve --runtime deepspeed");
        return NULL;
    }
    if (dt_layout_active(p)) {   /* a ds_config.json holds no TP / CP / PP degrees */
        dt_layout l = dt_layout_of(p);
        dt_errorf(err, DT_EINVAL,
                  "export --deepspeed: the plan's layout (TP %lld x CP %lld x PP %lld) is not a DeepSpeed config "
                  "setting; dtplan export --megatron writes Megatron-LM's arguments for it, or re-plan without a "
                  "layout (dtplan solve --no-layouts)",
                  (long long)l.tp, (long long)l.cp, (long long)l.pp);
        return NULL;
    }
    cJSON *root = config_tree(p);
    char *text = root ? dt_json_print(root) : NULL;
    cJSON_Delete(root);
    if (!text) dt_errorf(err, DT_ENOMEM, "out of memory while printing the DeepSpeed config");
    return text;
}

/* ----------------------------------------------------------------- notes */

char *dt_dsexport_notes(const dt_plan *p, dt_error *err) {
    strbuf b;
    if (begin(p, &b, err)) return NULL;
    if (p->activations.ckpt_layers > 0)
        sb_printf(&b,
                  "note: the plan recomputes %lld of %lld layers; DeepSpeed does not choose this, the "
                  "model code does (HF: --gradient_checkpointing checkpoints every layer)\n",
                  (long long)p->activations.ckpt_layers, (long long)p->model.n_layer);
    if (p->precision.preset == DT_PREC_PURE_BF16)
        sb_printf(&b,
                  "note: pure-bf16 has no DeepSpeed switch: bf16.enabled keeps an fp32 master copy and "
                  "fp32 moments, 12 bytes/param of optimizer state instead of the plan's 4\n");
    if (p->runtime.kind != DT_RUNTIME_DTRUN)
        sb_printf(&b, "note: the plan predicts Hugging Face model code under %s with attn_implementation=\"%s\"%s%s; "
                      "load the model that way (DeepSpeed's config has no switch for it)\n",
                  dt_runtime_name(p->runtime.kind),
                  p->runtime.attention == DT_KERNEL_FLASH ? "flash_attention_2" : dt_attn_kernel_name(p->runtime.attention),
                  p->activations.selective ? " and selective attention recompute" : "",
                  p->runtime.kind == DT_RUNTIME_FSDP ? " (the plan's runtime is fsdp, not DeepSpeed)" : "");
    else if (p->activations.attention == DT_ATTN_MATERIALIZED)
        sb_printf(&b, "note: the plan materialises attention scores; pick the matching attention "
                      "implementation in the model code (DeepSpeed's config has no switch)\n");
    if (p->cluster.device == DT_DEVICE_CPU)
        sb_printf(&b, "note: the plan runs on CPU ranks; DeepSpeed runs them on its CPU accelerator over gloo "
                      "(selected when no GPU is present, DS_ACCELERATOR=cpu otherwise; fp16 only where the CPU has "
                      "AVX512-FP16 or AMX-FP16; bench/validate_ds_export.sh)\n");
    return sb_close(&b, err);
}

/* ---------------------------------------------------------------- launch */

static void opts_or_default(const dt_dsexport_opts *in, dt_dsexport_opts *o) {
    dt_dsexport_opts_default(o);
    if (!in) return;
    if (in->config_path) o->config_path = in->config_path;
    if (in->plan_path) o->plan_path = in->plan_path;
    if (in->script) o->script = in->script;
    if (in->master_addr) o->master_addr = in->master_addr;
    if (in->master_port > 0) o->master_port = in->master_port;
    if (in->job_name) o->job_name = in->job_name;
}

/* A vision-language plan: the stage as LLaVA's train.py takes it (haotian-liu/LLaVA
 * llava/train/train.py ModelArguments / TrainingArguments; scripts/v1_5/pretrain.sh trains the
 * projector with --tune_mm_mlp_adapter True, finetune.sh the projector + LLM), appended to the
 * script's arguments (with --finetune lora / qlora: finetune_lora.sh's --lora_enable, --lora_r,
 * --lora_alpha, and QLoRA's --bits); "" for a text plan. LLaVA-1.5's code keeps the tower frozen in every stage
 * (clip_encoder.py: requires_grad_(False), torch.no_grad()), so a "full" plan says so. */
static void vlm_args(const dt_plan *p, char *buf, size_t n) {
    const dt_vlm *v = &p->vlm;
    buf[0] = '\0';
    if (!dt_vlm_active(v)) return;
    snprintf(buf, n,
             " --mm_projector_type %s --mm_vision_select_layer %lld --mm_vision_select_feature %s "
             "--model_max_length %lld --per_device_train_batch_size %lld --gradient_accumulation_steps %lld "
             "--learning_rate %g --%s True --gradient_checkpointing %s%s",
             v->projector == DT_PROJ_LINEAR ? "linear" : "mlp2x_gelu", (long long)v->tower.select_layer,
             v->tower.keep_cls ? "cls_patch" : "patch", (long long)p->batch.seq_len, (long long)p->batch.micro_batch,
             (long long)p->batch.grad_accum, p->optimizer.lr, p->precision.param == DT_DTYPE_FP16 ? "fp16" : "bf16",
             p->activations.ckpt_layers > 0 ? "True" : "False",
             v->stage == DT_VLM_PRETRAIN ? " --tune_mm_mlp_adapter True" : "");
    const dt_finetune *ft = &p->finetune;
    const size_t used = strlen(buf);
    if (dt_ft_is_lora(ft) && used < n)   /* finetune_lora.sh: LoRA on the LLM, the projector trained whole */
        snprintf(buf + used, n - used, " --lora_enable True --lora_r %lld --lora_alpha %g --lora_dropout %g%s",
                 (long long)ft->lora_rank, ft->lora_alpha, ft->lora_dropout,
                 ft->method != DT_FT_QLORA ? "" : ft->quant == DT_STORAGE_INT8 ? " --bits 8" : " --bits 4");
}

static const char *vlm_dtrun_note(const dt_plan *p) {
    if (!dt_vlm_active(&p->vlm)) return "";
    return p->vlm.stage == DT_VLM_FULL ? "# LLaVA-1.5's train.py freezes the vision tower in every stage: a full-stage "
                                         "plan needs a script that trains it (docs/vlm.md)\n"
                                       : "";
}

char *dt_dsexport_launch(const dt_plan *p, const dt_dsexport_opts *in, dt_error *err) {
    dt_dsexport_opts o;
    opts_or_default(in, &o);
    strbuf b;
    if (begin(p, &b, err)) return NULL;
    const long long nodes = (long long)p->cluster.nodes, per = (long long)p->cluster.gpus_per_node;
    const char *node_rank = nodes > 1 ? "$NODE_RANK" : "0";
    sb_printf(&b, "# DeepSpeed: on each of the %lld node(s), NODE_RANK = 0..%lld\n", nodes, nodes - 1);
    char va[512];
    vlm_args(p, va, sizeof va);
    sb_printf(&b,
              "torchrun --nnodes %lld --nproc_per_node %lld --node_rank %s --master_addr %s "
              "--master_port %d %s --deepspeed %s%s\n",
              nodes, per, node_rank, o.master_addr, o.master_port, o.script, o.config_path, va);
    sb_printf(&b, "%s", vlm_dtrun_note(p));
    if (dt_vlm_active(&p->vlm)) {   /* cli/dtrun trains a VLM plan on the CPU in fp32 only (dt_vlmtrain.h) */
        sb_printf(&b, "# dtrun: trains VLM plans on the CPU in fp32 only, ZeRO 0-2 (docs/vlm.md \"In dtrun\")\n");
        return sb_close(&b, err);
    }
    sb_printf(&b, "# dtrun: the plan itself (starts the %lld local rank(s) of each node)\n", per);
    if (nodes > 1)
        sb_printf(&b, "dtrun --nnodes %lld --node-rank %s --master-addr %s --master-port %d %s\n",
                  nodes, node_rank, o.master_addr, o.master_port, o.plan_path);
    else
        sb_printf(&b, "dtrun %s\n", o.plan_path);
    return sb_close(&b, err);
}

char *dt_dsexport_sbatch(const dt_plan *p, const dt_dsexport_opts *in, dt_error *err) {
    dt_dsexport_opts o;
    opts_or_default(in, &o);
    strbuf b;
    if (begin(p, &b, err)) return NULL;
    const long long nodes = (long long)p->cluster.nodes, per = (long long)p->cluster.gpus_per_node;
    char va[512];
    vlm_args(p, va, sizeof va);
    sb_printf(&b, "#!/bin/bash\n");
    sb_printf(&b, "#SBATCH --job-name=%s\n", o.job_name);
    sb_printf(&b, "#SBATCH --nodes=%lld\n", nodes);
    sb_printf(&b, "#SBATCH --ntasks-per-node=1          # one torchrun per node; it starts the ranks\n");
    if (p->cluster.device == DT_DEVICE_CUDA) sb_printf(&b, "#SBATCH --gres=gpu:%lld\n", per);
    sb_printf(&b, "#SBATCH --exclusive\n");
    sb_printf(&b, "#SBATCH --output=%%x-%%j.out\n");
    sb_printf(&b, "set -eo pipefail\n");
    sb_printf(&b, "export GPUS_PER_NODE=%lld\n", per);
    sb_printf(&b, "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n");
    sb_printf(&b, "export MASTER_PORT=%d\n", o.master_port);
    /* --node_rank $SLURM_NODEID: with one task per node it equals SLURM_PROCID (the
     * users' SLURM runbook's spelling, docs/plan-format.md "DeepSpeed export") and
     * stays right if tasks per node ever change */
    sb_printf(&b,
              "srun --kill-on-bad-exit=1 --wait=60 --jobid $SLURM_JOB_ID bash -c 'python -u -m "
              "torch.distributed.run --nnodes $SLURM_NNODES --nproc_per_node $GPUS_PER_NODE "
              "--node_rank $SLURM_NODEID --master_addr $MASTER_ADDR --master_port $MASTER_PORT "
              "%s --deepspeed %s%s'\n",
              o.script, o.config_path, va);
    if (dt_vlm_active(&p->vlm)) return sb_close(&b, err);   /* dtrun does not train VLM plans yet */
    sb_printf(&b, "# or the plan itself with dtrun:\n");
    sb_printf(&b,
              "# srun --kill-on-bad-exit=1 --jobid $SLURM_JOB_ID bash -c 'dtrun --nnodes $SLURM_NNODES "
              "--node-rank $SLURM_NODEID --master-addr $MASTER_ADDR --master-port $MASTER_PORT %s'\n",
              o.plan_path);
    return sb_close(&b, err);
}
