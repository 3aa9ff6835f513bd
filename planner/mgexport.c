/* mgexport.c — Megatron-LM launch lines for a plan (dt_mgexport.h). Each argument below is
 * pretrain_gpt.py's (megatron/training/arguments.py); the mapping is docs/parallelism.md
 * "Export to Megatron-LM". */
#include "dt_mgexport.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_layout.h"
#include "dt_megatron.h"

#define MG_SCRIPT "pretrain_gpt.py"
/* Megatron-LM's default dropout (arguments.py: --attention-dropout, --hidden-dropout 0.1). */
#define MG_DEFAULT_DROPOUT "0.1"

static int check(const dt_plan *p, dt_error *err) {
    int rc = dt_plan_validate(p, err);
    if (rc) return rc;
    if (p->parallel.zero_stage >= 2)
        return dt_errorf(err, DT_EINVAL,
                         "export --megatron: ZeRO stage %d: Megatron-LM shards only the optimizer states "
                         "(--use-distributed-optimizer, ZeRO-1); re-plan with dtplan solve --stages 0,1",
                         p->parallel.zero_stage);
    if (p->cluster.device != DT_DEVICE_CUDA)
        return dt_errorf(err, DT_EINVAL, "export --megatron: the plan is for CPU ranks; Megatron-LM trains on GPUs");
    if (p->parallel.offload_optimizer != DT_OFFLOAD_NONE || p->parallel.offload_param != DT_OFFLOAD_NONE)
        return dt_errorf(err, DT_EINVAL, "export --megatron: Megatron-LM does not offload to the host; re-plan "
                                         "with dtplan solve --no-offload");
    return DT_OK;
}

static void arg(FILE *f, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void arg(FILE *f, const char *name, const char *fmt, ...) {
    fprintf(f, " \\\n    %s", name);
    if (!fmt) return;
    fputc(' ', f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
}

static void layout_args(FILE *f, const dt_plan *p) {
    const dt_layout l = dt_layout_of(p);
    arg(f, "--tensor-model-parallel-size", "%lld", (long long)l.tp);
    arg(f, "--pipeline-model-parallel-size", "%lld", (long long)l.pp);
    if (l.cp > 1) arg(f, "--context-parallel-size", "%lld", (long long)l.cp);
    if (l.sp) arg(f, "--sequence-parallel", NULL);
    if (l.vpp > 1)
        arg(f, "--num-layers-per-virtual-pipeline-stage", "%lld",
            (long long)(p->model.n_layer / l.pp / l.vpp));
    if (l.first_stage_layers) {
        arg(f, "--decoder-first-pipeline-num-layers", "%lld", (long long)l.first_stage_layers);
        arg(f, "--decoder-last-pipeline-num-layers", "%lld", (long long)l.last_stage_layers);
    }
    if (p->parallel.zero_stage == 1) arg(f, "--use-distributed-optimizer", NULL);
    if (p->parallel.overlap_comm) arg(f, "--overlap-grad-reduce", NULL);
}

static void model_args(FILE *f, const dt_plan *p) {
    const dt_model *m = &p->model;
    arg(f, "--num-layers", "%lld", (long long)m->n_layer);
    arg(f, "--hidden-size", "%lld", (long long)m->hidden);
    arg(f, "--ffn-hidden-size", "%lld", (long long)m->ffn);
    arg(f, "--num-attention-heads", "%lld", (long long)m->n_head);
    if (m->head_dim * m->n_head != m->hidden) arg(f, "--kv-channels", "%lld", (long long)m->head_dim);
    if (m->n_kv_head != m->n_head) {
        arg(f, "--group-query-attention", NULL);
        arg(f, "--num-query-groups", "%lld", (long long)m->n_kv_head);
    }
    arg(f, "--max-position-embeddings", "%lld", (long long)m->max_pos);
    arg(f, "--norm-epsilon", "%g", m->norm_eps);
    if (m->family == DT_FAMILY_LLAMA) {
        arg(f, "--normalization", "RMSNorm");
        arg(f, "--swiglu", NULL);
        arg(f, "--position-embedding-type", "rope");
        arg(f, "--rotary-base", "%g", m->rope_theta);
        arg(f, "--disable-bias-linear", NULL);
        if (m->qkv_bias) arg(f, "--add-qkv-bias", NULL);
        if (m->qk_norm) arg(f, "--qk-layernorm", NULL);
    }
    if (!m->tied_embeddings) arg(f, "--untie-embeddings-and-output-weights", NULL);
    const char *drop = p->runtime.dropout ? MG_DEFAULT_DROPOUT : "0.0";
    arg(f, "--attention-dropout", "%s", drop);
    arg(f, "--hidden-dropout", "%s", drop);
}

static void training_args(FILE *f, const dt_plan *p) {
    const dt_precision *pr = &p->precision;
    arg(f, "--micro-batch-size", "%lld", (long long)p->batch.micro_batch);
    arg(f, "--global-batch-size", "%lld", (long long)p->batch.global_batch);
    arg(f, "--seq-length", "%lld", (long long)p->batch.seq_len);
    if (pr->param == DT_DTYPE_BF16) arg(f, "--bf16", NULL);
    else if (pr->param == DT_DTYPE_FP16) arg(f, "--fp16", NULL);
    /* a megatron plan keeps Megatron's fp32 grad buffer with --bf16 (dt_mg_grad_bytes) */
    if (pr->param != DT_DTYPE_FP32 && pr->grad == DT_DTYPE_BF16 && dt_mg_grad_bytes(p) == dt_dtype_size(DT_DTYPE_BF16))
        arg(f, "--grad-reduce-in-bf16", NULL);
    /* the plan's unfused (materialized) attention under runtime megatron: AttnBackend.unfused
     * (megatron/core/transformer/enums.py); flash is the default backend's choice */
    if (p->runtime.kind == DT_RUNTIME_MEGATRON && p->runtime.attention == DT_KERNEL_EAGER)
        arg(f, "--attention-backend", "unfused");
    const int64_t K = p->activations.ckpt_layers, L = p->model.n_layer;
    if (K > 0) {
        arg(f, "--recompute-granularity", "full");
        /* uniform over every layer, or the first ceil(K / pp-share) layers of each stage */
        const int64_t per_stage = K == L ? 1 : (K * dt_layout_stage_layers(p, 0) + L - 1) / L;
        arg(f, "--recompute-method", K == L ? "uniform" : "block");
        arg(f, "--recompute-num-layers", "%lld", (long long)per_stage);
    } else if (p->activations.selective) {
        arg(f, "--recompute-granularity", "selective");
    }
    const dt_optimizer *o = &p->optimizer;
    arg(f, "--optimizer", "adam");
    arg(f, "--lr", "%g", o->lr);
    arg(f, "--weight-decay", "%g", o->weight_decay);
    arg(f, "--adam-beta1", "%g", o->beta1);
    arg(f, "--adam-beta2", "%g", o->beta2);
    arg(f, "--adam-eps", "%g", o->eps);
    arg(f, "--clip-grad", "%g", o->grad_clip);
    const dt_schedule *s = &p->schedule;
    arg(f, "--train-iters", "%lld", (long long)s->total_steps);
    if (s->kind != DT_SCHED_CONSTANT) arg(f, "--lr-warmup-iters", "%lld", (long long)s->warmup_steps);
    if (s->kind == DT_SCHED_WARMUP_DECAY_LR) {
        arg(f, "--lr-decay-style", "linear");
        arg(f, "--min-lr", "0.0");
    } else if (s->kind == DT_SCHED_WARMUP_COSINE_LR) {
        arg(f, "--lr-decay-style", "cosine");
        arg(f, "--min-lr", "%g", o->lr * s->cos_min_ratio);
    } else {
        arg(f, "--lr-decay-style", "constant");
    }
    arg(f, "--seed", "%llu", (unsigned long long)p->data.seed);
    arg(f, "--save", "%s", p->output.dir);
    if (p->output.save_interval > 0) arg(f, "--save-interval", "%lld", (long long)p->output.save_interval);
    arg(f, "--data-path", "\"$DATA_PATH\"");
    arg(f, "--tokenizer-type", "HuggingFaceTokenizer");
    arg(f, "--tokenizer-model", "\"$TOKENIZER\"");
}

static void notes(FILE *f, const dt_plan *p) {
    fprintf(f, "# note: DATA_PATH is a dataset prefix made by Megatron-LM's tools/preprocess_data.py; TOKENIZER "
               "the Hugging Face tokenizer of %s (the plan's data, %s, is not in Megatron's format)\n",
            p->model.name, p->data.train);
    if (p->precision.param != DT_DTYPE_FP32 && !p->precision.has_master)
        fprintf(f, "# note: Megatron-LM keeps fp32 main parameters with --bf16/--fp16; the plan's %s without a "
                   "master copy has no Megatron switch\n",
                dt_precision_preset_name(p->precision.preset));
    if (p->runtime.kind != DT_RUNTIME_DTRUN && p->runtime.kind != DT_RUNTIME_MEGATRON)
        fprintf(f, "# note: the plan's prediction is for runtime %s (Hugging Face model code); Megatron-LM's own "
                   "model code keeps fewer activations (docs/parallelism.md)\n",
                dt_runtime_name(p->runtime.kind));
}

static int torchrun(FILE *f, const dt_plan *p, const dt_dsexport_opts *o, const char *node_rank,
                    const char *addr, const char *port) {
    const char *script = o->script && strcmp(o->script, "train.py") ? o->script : MG_SCRIPT;
    fprintf(f, "torchrun --nnodes %lld --nproc_per_node %lld --node_rank %s --master_addr %s --master_port %s %s",
            (long long)p->cluster.nodes, (long long)p->cluster.gpus_per_node, node_rank, addr, port, script);
    layout_args(f, p);
    model_args(f, p);
    training_args(f, p);
    fputc('\n', f);
    return 0;
}


/* A memory stream for a checked plan (NULL and err set otherwise). */
static FILE *open_text(const dt_plan *p, char **buf, size_t *n, dt_error *err) {
    if (check(p, err)) return NULL;
    FILE *f = open_memstream(buf, n);
    if (!f) dt_errorf(err, DT_ENOMEM, "export --megatron: out of memory");
    return f;
}

char *dt_mgexport_launch(const dt_plan *p, const dt_dsexport_opts *o, dt_error *err) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_text(p, &buf, &n, err);
    if (!f) return NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->master_port);
    fprintf(f, "# Megatron-LM: on each of the %lld node(s), NODE_RANK = 0..%lld\n", (long long)p->cluster.nodes,
            (long long)p->cluster.nodes - 1);
    notes(f, p);
    torchrun(f, p, o, p->cluster.nodes > 1 ? "$NODE_RANK" : "0", o->master_addr, port);
    return dt_export_text_close(f, &buf, "--megatron", err);
}

char *dt_mgexport_sbatch(const dt_plan *p, const dt_dsexport_opts *o, dt_error *err) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_text(p, &buf, &n, err);
    if (!f) return NULL;
    fprintf(f, "#!/bin/bash\n#SBATCH --job-name=%s\n#SBATCH --nodes=%lld\n", o->job_name, (long long)p->cluster.nodes);
    fprintf(f, "#SBATCH --ntasks-per-node=1          # one torchrun per node; it starts the ranks\n");
    fprintf(f, "#SBATCH --gres=gpu:%lld\n#SBATCH --exclusive\n#SBATCH --output=%%x-%%j.out\nset -eo pipefail\n",
            (long long)p->cluster.gpus_per_node);
    fprintf(f, "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n");
    fprintf(f, "export MASTER_PORT=%d\n", o->master_port);
    fprintf(f, "export CUDA_DEVICE_MAX_CONNECTIONS=1   # Megatron-LM's requirement for TP / SP overlap\n");
    notes(f, p);
    fprintf(f, "export DATA_PATH=\"${DATA_PATH:?set DATA_PATH to a tools/preprocess_data.py prefix}\"\n");
    fprintf(f, "export TOKENIZER=\"${TOKENIZER:?set TOKENIZER to the Hugging Face tokenizer of the model}\"\n");
    fprintf(f, "srun --wait=60 --kill-on-bad-exit=1 bash -c '");
    torchrun(f, p, o, "$SLURM_NODEID", "$MASTER_ADDR", "$MASTER_PORT");
    fprintf(f, "'\n");
    return dt_export_text_close(f, &buf, "--megatron", err);
}
