/* ttexport.c — torchtitan's job TOML and launch lines for a plan (dt_ttexport.h). Every key
 * below is a field of pytorch/torchtitan torchtitan/config/job_config.py at commit
 * 238fa9953e4aec2a62582121564273d7cbb1e9f1 (docs/parallelism.md "Export to torchtitan"). */
#include "dt_ttexport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_layout.h"
#include "dt_vlm.h"

#define TT_COMMIT "238fa9953e4aec2a62582121564273d7cbb1e9f1"

/* torchtitan's model flavors (torchtitan/models/llama3/__init__.py llama3_args and
 * models/qwen3/__init__.py qwen3_args at TT_COMMIT): the shape that picks [model] name and flavor.
 * llama3's ffn is what its FeedForward computes from ffn_dim_multiplier and multiple_of. */
typedef struct tt_flavor {
    const char *name, *flavor;
    int64_t n_layer, hidden, n_head, n_kv_head, ffn;
    double rope_theta;
} tt_flavor;
static const tt_flavor k_flavors[] = {
    {"llama3", "8B", 32, 4096, 32, 8, 14336, 500000},
    {"llama3", "70B", 80, 8192, 64, 8, 28672, 500000},
    {"llama3", "405B", 126, 16384, 128, 8, 53248, 500000},
    {"qwen3", "0.6B", 28, 1024, 16, 8, 3072, 1000000},
    {"qwen3", "1.7B", 28, 2048, 16, 8, 6144, 1000000},
    {"qwen3", "4B", 36, 2560, 32, 8, 9728, 1000000},
    {"qwen3", "8B", 36, 4096, 32, 8, 12288, 1000000},
    {"qwen3", "14B", 40, 5120, 40, 8, 17408, 1000000},
    {"qwen3", "32B", 64, 5120, 64, 8, 25600, 1000000},
};
#define N_FLAVORS (sizeof k_flavors / sizeof k_flavors[0])

/* torchtitan's llama3 always scales RoPE as Llama 3.1 does (models/llama3/model/args.py
 * RoPEScalingArgs: factor 8, low 1, high 4, original 8192); its qwen3 does not scale. */
static const dt_rope_scaling k_tt_llama3_rope = {DT_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192};

static int rope_matches(const dt_model *m, int llama3) {
    const dt_rope_scaling *r = &m->rope_scaling, *t = &k_tt_llama3_rope;
    if (!llama3) return r->type == DT_ROPE_DEFAULT;
    return r->type == t->type && r->factor == t->factor && r->low_freq_factor == t->low_freq_factor &&
           r->high_freq_factor == t->high_freq_factor && r->original_max_pos == t->original_max_pos;
}

static const tt_flavor *flavor_of(const dt_model *m) {
    for (size_t i = 0; i < N_FLAVORS; i++) {
        const tt_flavor *f = &k_flavors[i];
        const int qwen3 = !strcmp(f->name, "qwen3");
        if (m->family == DT_FAMILY_LLAMA && f->n_layer == m->n_layer && f->hidden == m->hidden &&
            f->n_head == m->n_head && f->n_kv_head == m->n_kv_head && f->ffn == m->ffn &&
            f->rope_theta == m->rope_theta && m->qk_norm == qwen3 && rope_matches(m, !qwen3))
            return f;
    }
    return NULL;
}

/* torchtitan's int selective_ac_option n checkpoints every n-th block (distributed/
 * activation_checkpoint.py _apply_layer_sac): L / n blocks. 0 when K blocks are not that. */
static int64_t ac_every(int64_t K, int64_t L) { return K > 0 && L % K == 0 ? L / K : 0; }

/* A TOML float: %g with ".0" added when it would read as an integer (TOML v1.0.0 "Float"). */
static void tfloat(FILE *f, const char *key, double v) {
    char b[64];
    snprintf(b, sizeof b, "%g", v);
    fprintf(f, "%s = %s%s\n", key, b, strpbrk(b, ".eEn") ? "" : ".0");
}

/* A TOML basic string: quote, backslash and control characters escaped (TOML v1.0.0 "String"). */
static void tstr(FILE *f, const char *key, const char *v) {
    fprintf(f, "%s = \"", key);
    for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c < 0x20 || *c == 0x7f) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputs("\"\n", f);
}

static int refuse(dt_error *err, const char *key, const char *why) {
    return dt_errorf(err, DT_EINVAL, "export --torchtitan: %s: %s", key, why);
}

static int check_parallel(const dt_plan *p, dt_error *err) {
    const dt_parallel *x = &p->parallel;
    if (x->zero_stage == 1)
        return refuse(err, "parallel.zero_stage 1",
                      "torchtitan's FSDP2 shards parameters, gradients and optimizer states together (no "
                      "optimizer-only sharding); re-plan with dtplan solve --stages 0,2,3");
    if (x->offload_optimizer == DT_OFFLOAD_NVME || x->offload_param == DT_OFFLOAD_NVME)
        return refuse(err, "parallel.offload nvme", "torchtitan offloads to the CPU only; re-plan with --no-offload");
    if ((x->offload_optimizer == DT_OFFLOAD_CPU) != (x->offload_param == DT_OFFLOAD_CPU))
        return refuse(err, "parallel.offload_optimizer / offload_param",
                      "torchtitan's training.enable_cpu_offload moves parameters, gradients and optimizer states "
                      "together; re-plan with both on the CPU or --no-offload");
    const dt_layout l = dt_layout_of(p);
    if (x->zero_stage == 0 && dt_layout_active(p))
        return refuse(err, "parallel.zero_stage 0 with a layout",
                      "torchtitan's DDP refuses > 1D parallelism (models/llama3/infra/parallelize.py); re-plan "
                      "with ZeRO 2 or 3 (FSDP2)");
    if (l.tp > 1 && !l.sp)
        return refuse(err, "layout.sp false",
                      "torchtitan's tensor parallelism always shards the norms over the sequence (SP); re-plan "
                      "with sequence parallelism");
    if (l.vpp > 1)
        for (int64_t s = 0; s < l.pp; s++)
            if (dt_layout_stage_layers(p, s) % l.vpp)
                return refuse(err, "layout.first_stage_layers",
                              "an uneven split does not divide into the interleaved model chunks");
    return DT_OK;
}

static int check_model(const dt_plan *p, dt_error *err) {
    if (p->finetune.method != DT_FT_FULL)
        return refuse(err, "finetune.method", "torchtitan trains every parameter (no LoRA, QLoRA or freeze)");
    if ((p->objective.kind != DT_OBJ_AUTO && p->objective.kind != DT_OBJ_PT) || p->data.loss_mask)
        return refuse(err, "objective",
                      "torchtitan's trainer is next-token prediction on every token (pt); no sft mask, rm, dpo, "
                      "grpo or ppo");
    if (dt_vlm_active(&p->vlm)) return refuse(err, "vlm", "torchtitan's llama3 / qwen3 have no vision tower");
    if (!flavor_of(&p->model))
        return dt_errorf(err, DT_EINVAL,
                         "export --torchtitan: model '%s' (%lld layers, hidden %lld, ffn %lld, rope_theta %g, its RoPE "
                         "scaling) is none of torchtitan's flavors (llama3 8B / 70B / 405B with Llama 3.1's RoPE "
                         "scaling, qwen3 0.6B..32B); plan one of those "
                         "(e.g. --model llama-3.1-8b)",
                         p->model.name, (long long)p->model.n_layer, (long long)p->model.hidden,
                         (long long)p->model.ffn, p->model.rope_theta);
    return DT_OK;
}

static int check_training(const dt_plan *p, dt_error *err) {
    if (p->precision.param == DT_DTYPE_FP16)
        return refuse(err, "precision fp16", "torchtitan trains in bfloat16 or float32 (training.dtype, "
                                             "mixed_precision_param); re-plan with --precision bf16");
    const int64_t K = p->activations.ckpt_layers, L = p->model.n_layer;
    if (K > 0 && K < L && !ac_every(K, L))
        return dt_errorf(err, DT_EINVAL,
                         "export --torchtitan: activations.ckpt_layers %lld: torchtitan checkpoints every n-th of "
                         "the %lld blocks (selective_ac_option n); plan a count that divides them, or 0 / %lld",
                         (long long)K, (long long)L, (long long)L);
    if (K > 0 && p->activations.selective)
        return refuse(err, "activations.selective with ckpt_layers", "torchtitan has one activation_checkpoint.mode");
    if (p->schedule.kind != DT_SCHED_CONSTANT && p->schedule.warmup_steps > 0 && !p->schedule.warmup_linear)
        return refuse(err, "schedule.warmup_linear false", "torchtitan warms up linearly; re-plan with a linear "
                                                            "warmup");
    return DT_OK;
}

static int check(const dt_plan *p, dt_error *err) {
    int rc = dt_plan_validate(p, err);
    if (rc) return rc;
    if (p->cluster.device != DT_DEVICE_CUDA)
        return refuse(err, "cluster.device cpu", "torchtitan trains on GPUs");
    if ((rc = check_parallel(p, err)) || (rc = check_model(p, err))) return rc;
    return check_training(p, err);
}

/* [parallelism]; the pipeline split as module_fqns_per_model_part (exactly the plan's split). */
static void parallelism(FILE *f, const dt_plan *p) {
    const dt_layout l = dt_layout_of(p);
    const int64_t dp = dt_layout_dp(p);
    const int shard = p->parallel.zero_stage >= 2;
    fprintf(f, "\n[parallelism]\n");
    fprintf(f, "data_parallel_replicate_degree = %lld\n", (long long)(shard ? 1 : dp));
    fprintf(f, "data_parallel_shard_degree = %lld\n", (long long)(shard ? dp : 1));
    /* ZeRO-3 reshards after forward; ZeRO-2 keeps the gathered parameters to the backward */
    if (shard) fprintf(f, "fsdp_reshard_after_forward = \"%s\"\n", p->parallel.zero_stage == 3 ? "always" : "never");
    fprintf(f, "tensor_parallel_degree = %lld\n", (long long)l.tp);
    fprintf(f, "context_parallel_degree = %lld\n", (long long)l.cp);
    fprintf(f, "pipeline_parallel_degree = %lld\n", (long long)l.pp);
    if (l.pp == 1) return;
    fprintf(f, "pipeline_parallel_schedule = \"%s\"\n", l.vpp > 1 ? "Interleaved1F1B" : "1F1B");
    fprintf(f, "pipeline_parallel_microbatch_size = %lld\n", (long long)p->batch.micro_batch);
    fprintf(f, "module_fqns_per_model_part = [\n");
    int64_t layer = 0;
    const int64_t stages = l.pp * l.vpp;
    for (int64_t j = 0; j < stages; j++) {   /* virtual stage j lives on rank j mod pp ("loop" style) */
        const int64_t n = dt_layout_stage_layers(p, j % l.pp) / l.vpp;
        fprintf(f, "    [");
        const char *sep = "";
        if (j == 0) fprintf(f, "\"tok_embeddings\""), sep = ", ";
        for (int64_t i = 0; i < n; i++, layer++) fprintf(f, "%s\"layers.%lld\"", sep, (long long)layer), sep = ", ";
        if (j == stages - 1) fprintf(f, "%s\"norm\", \"output\"", sep);
        fprintf(f, "],\n");
    }
    fprintf(f, "]\n");
}

static void training(FILE *f, const dt_plan *p) {
    const dt_batch *b = &p->batch;
    const dt_precision *pr = &p->precision;
    const int pp = dt_layout_of(p).pp > 1;
    fprintf(f, "\n[training]\n");
    /* with PP the micro-batches of one step are the pipeline's (local = micro x accumulation) */
    fprintf(f, "local_batch_size = %lld\n", (long long)(pp ? b->micro_batch * b->grad_accum : b->micro_batch));
    fprintf(f, "global_batch_size = %lld\n", (long long)b->global_batch);
    fprintf(f, "seq_len = %lld\n", (long long)b->seq_len);
    tfloat(f, "max_norm", p->optimizer.grad_clip);
    fprintf(f, "steps = %lld\n", (long long)p->schedule.total_steps);
    const int pure_bf16 = pr->param == DT_DTYPE_BF16 && !pr->has_master;
    fprintf(f, "dtype = \"%s\"\n", pure_bf16 ? "bfloat16" : "float32");
    fprintf(f, "mixed_precision_param = \"%s\"\n", pr->param == DT_DTYPE_BF16 ? "bfloat16" : "float32");
    fprintf(f, "mixed_precision_reduce = \"float32\"\n");
    fprintf(f, "enable_cpu_offload = %s\n", p->parallel.offload_param == DT_OFFLOAD_CPU ? "true" : "false");
}

static void optimizer(FILE *f, const dt_plan *p) {
    const dt_optimizer *o = &p->optimizer;
    const dt_schedule *s = &p->schedule;
    fprintf(f, "\n[optimizer]\nname = \"AdamW\"\n");
    tfloat(f, "lr", o->lr);
    tfloat(f, "beta1", o->beta1);
    tfloat(f, "beta2", o->beta2);
    tfloat(f, "eps", o->eps);
    tfloat(f, "weight_decay", o->weight_decay);
    fprintf(f, "\n[lr_scheduler]\n");
    fprintf(f, "warmup_steps = %lld\n", (long long)(s->kind == DT_SCHED_CONSTANT ? 0 : s->warmup_steps));
    if (s->kind == DT_SCHED_CONSTANT || s->kind == DT_SCHED_WARMUP_LR) {
        fprintf(f, "decay_ratio = 0.0   # no decay: constant after the warmup\n");
    } else {
        fprintf(f, "decay_type = \"%s\"\n", s->kind == DT_SCHED_WARMUP_COSINE_LR ? "cosine" : "linear");
        tfloat(f, "min_lr_factor", s->kind == DT_SCHED_WARMUP_COSINE_LR ? s->cos_min_ratio : 0.0);
    }
}

static void activation_checkpoint(FILE *f, const dt_plan *p) {
    const int64_t K = p->activations.ckpt_layers, L = p->model.n_layer;
    fprintf(f, "\n[activation_checkpoint]\n");
    if (K == L) fprintf(f, "mode = \"full\"\n");
    else if (K > 0) fprintf(f, "mode = \"selective\"\nselective_ac_option = \"%lld\"   # every %lld-th block: %lld "
                               "of %lld\n", (long long)ac_every(K, L), (long long)ac_every(K, L), (long long)K,
                            (long long)L);
    else if (p->activations.selective) fprintf(f, "mode = \"selective\"\nselective_ac_option = \"op\"\n");
    else fprintf(f, "mode = \"none\"\n");
}

static void notes(FILE *f, const dt_plan *p) {
    fprintf(f, "# note: set [training] dataset / dataset_path to a torchtitan dataset%s%s%s, and [model] hf_assets_path "
               "to the tokenizer of %s\n", p->data.train[0] ? " (the plan's data, " : "", p->data.train,
            p->data.train[0] ? ", is not in its format)" : "", p->model.name);
    if (p->precision.param != DT_DTYPE_FP32 && p->precision.grad != DT_DTYPE_FP32)
        fprintf(f, "# note: torchtitan reduces gradients in float32 (mixed_precision_reduce); the plan counted %s "
                   "gradients\n", dt_dtype_name(p->precision.grad));
    if (p->activations.selective && !p->activations.ckpt_layers)
        fprintf(f, "# note: torchtitan's selective \"op\" policy saves every other matmul's output; the plan's "
                   "selective recompute is the attention core (Korthikanti et al. 2022)\n");
    if (p->runtime.kind != DT_RUNTIME_FSDP)
        fprintf(f, "# note: the plan's prediction is for runtime %s; torchtitan's is runtime fsdp\n",
                dt_runtime_name(p->runtime.kind));
}

static FILE *open_text(char **buf, size_t *n, dt_error *err) {
    FILE *f = open_memstream(buf, n);
    if (!f) dt_errorf(err, DT_ENOMEM, "export --torchtitan: out of memory");
    return f;
}

char *dt_ttexport_toml(const dt_plan *p, dt_error *err) {
    if (check(p, err)) return NULL;
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_text(&buf, &n, err);
    if (!f) return NULL;
    const tt_flavor *fl = flavor_of(&p->model);
    fprintf(f, "# torchtitan job config (torchtitan/config/job_config.py at %s), written by dtplan export "
               "--torchtitan\n", TT_COMMIT);
    notes(f, p);
    char desc[160];
    snprintf(desc, sizeof desc, "%s on %lld GPUs (dtplan)", p->model.name, (long long)p->parallel.world_size);
    fprintf(f, "\n[job]\n");
    tstr(f, "dump_folder", p->output.dir);
    tstr(f, "description", desc);
    fprintf(f, "\n[model]\nname = \"%s\"\nflavor = \"%s\"\n", fl->name, fl->flavor);
    optimizer(f, p);
    training(f, p);
    parallelism(f, p);
    fprintf(f, "\n[checkpoint]\nenable = %s\nfolder = \"checkpoint\"\n", p->output.save_interval > 0 ? "true" : "false");
    if (p->output.save_interval > 0) fprintf(f, "interval = %lld\n", (long long)p->output.save_interval);
    fprintf(f, "keep_latest_k = %lld\n", (long long)p->output.keep_last);
    activation_checkpoint(f, p);
    fprintf(f, "\n[compile]\nenable = false\n");
    fprintf(f, "\n[debug]\nseed = %llu\n", (unsigned long long)p->data.seed);
    return dt_export_text_close(f, &buf, "--torchtitan", err);
}

/* run_train.sh's torchrun (one node) or multinode_trainer.slurm's (rendezvous at the head node). */
static void torchrun(FILE *f, const dt_plan *p, const char *endpoint, const char *toml_path) {
    fprintf(f, "PYTORCH_ALLOC_CONF=\"expandable_segments:True\" torchrun --nnodes %lld --nproc_per_node %lld "
               "--rdzv_backend c10d --rdzv_endpoint \"%s\" -m torchtitan.train --job.config_file %s\n",
            (long long)p->cluster.nodes, (long long)p->cluster.gpus_per_node, endpoint, toml_path);
}

static char *launch_text(const dt_plan *p, const dt_dsexport_opts *o, const char *toml_path, int sbatch,
                         dt_error *err) {
    if (check(p, err)) return NULL;
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_text(&buf, &n, err);
    if (!f) return NULL;
    char ep[300];
    if (sbatch) {
        fprintf(f, "#!/bin/bash\n#SBATCH --job-name=%s\n#SBATCH --nodes=%lld\n#SBATCH --ntasks-per-node=1\n",
                o->job_name, (long long)p->cluster.nodes);
        fprintf(f, "#SBATCH --gres=gpu:%lld\n#SBATCH --exclusive\n#SBATCH --output=%%x-%%j.out\nset -eo pipefail\n",
                (long long)p->cluster.gpus_per_node);
        fprintf(f, "head_node=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n");
        fprintf(f, "head_node_ip=$(srun --nodes=1 --ntasks=1 -w \"$head_node\" hostname --ip-address)\n");
        fprintf(f, "srun ");
        snprintf(ep, sizeof ep, "$head_node_ip:%d", o->master_port);
    } else {
        fprintf(f, "# torchtitan: on each of the %lld node(s)\n", (long long)p->cluster.nodes);
        if (p->cluster.nodes > 1) snprintf(ep, sizeof ep, "%s:%d", o->master_addr, o->master_port);
        else snprintf(ep, sizeof ep, "localhost:0");
    }
    torchrun(f, p, ep, toml_path);
    return dt_export_text_close(f, &buf, "--torchtitan", err);
}

char *dt_ttexport_launch(const dt_plan *p, const dt_dsexport_opts *o, const char *toml_path, dt_error *err) {
    return launch_text(p, o, toml_path, 0, err);
}

char *dt_ttexport_sbatch(const dt_plan *p, const dt_dsexport_opts *o, const char *toml_path, dt_error *err) {
    return launch_text(p, o, toml_path, 1, err);
}
