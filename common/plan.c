/* plan.c — plan.json ("dtplan.plan/1") defaults, validation, reading and writing.
 * See dt_plan.h and docs/plan-format.md (every key, its type, unit and default).
 *
 * Reading is strict: the text is parsed with dt_json (syntax errors as line:column,
 * duplicate keys rejected), every section is read with typed getters that name the
 * JSON path, keys never asked for are "unknown", and the result goes through
 * dt_plan_validate. Writing builds a cJSON tree in struct order and prints it with
 * dt_json_print, whose number format reads back exactly, so write -> read -> write
 * is the identity on text and on the struct. */
#include "dt_plan.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_finetune_json.h"
#include "dt_objective_json.h"
#include "dt_vlm_json.h"
#include "dt_json.h"
#include "dt_layout.h"

/* ---- defaults (dt_plan.h; DeepSpeed's code defaults: docs/plan-format.md "parallel") ---- */
#define DS_REDUCE_BUCKET_ELEMS 500000000LL     /* zero_optimization.reduce_bucket_size 5e8 */
#define DS_ALLGATHER_BUCKET_ELEMS 500000000LL  /* allgather_bucket_size 5e8 */
#define DS_PREFETCH_BUCKET_ELEMS 50000000LL    /* stage3_prefetch_bucket_size, code default 5e7 */
#define DS_MAX_LIVE_PARAMS 1000000000LL        /* stage3_max_live_parameters 1e9 */
#define DS_SUB_GROUP_ELEMS 1000000000LL        /* sub_group_size 1e9 */
#define DS_COS_MIN_RATIO 0.0001                /* WarmupCosineLR (deepspeed/runtime/lr_schedules.py) */
#define DEFAULT_SEQ_LEN 1024                   /* GPT-2's context (dt_plan.h) */
#define DEFAULT_LR 2e-4                        /* AdamW: docs/plan-format.md "optimizer" */
#define DEFAULT_BETA1 0.9
#define DEFAULT_BETA2 0.999
#define DEFAULT_EPS 1e-8
#define DEFAULT_WEIGHT_DECAY 0.01
#define DEFAULT_GRAD_CLIP 1.0                  /* configs/deepspeed/zero*.json's gradient_clipping */
#define DEFAULT_TOTAL_STEPS 1000
#define DEFAULT_WARMUP_STEPS 100               /* 10% of the default run */
#define DEFAULT_VALID_FRACTION 0.05            /* of the training text held out for validation */
#define DEFAULT_EVAL_BATCHES 8
#define DEFAULT_SEED 1337                      /* llm.c's seed, for familiarity */
#define DEFAULT_KEEP_LAST 2
#define DEFAULT_TRAIN_DATA "/usr/share/games/fortunes"  /* Debian fortunes-min/-off text */
#define DEFAULT_OUTPUT_DIR "out"
#define BYTE_VOCAB 256                         /* byte tokenizer: one token per byte value */
#define GPT2_VOCAB 50257                       /* GPT-2 BPE vocabulary (llm.c shards' ids) */
#define MAX_RANKS 1000000                      /* sanity bound for nodes, gpus_per_node */
#define MAX_LOSS_SCALE_POWER 64                /* 2^64: far above any fp16 gradient range */
#define DT_NO_LOSS_SCALE 1.0                   /* bf16 / fp32: a static scale of 1 (dt_precision_from_preset) */
/* Runtime profiles' defaults (docs/memory-model.md "Runtime profiles"). DeepSpeed's code
 * defaults (deepspeed/runtime/zero/config.py, DeepSpeed 0.16.5): stage3_max_reuse_distance
 * 1e9 and stage3_param_persistence_threshold 1e5 elements. */
#define DS_MAX_REUSE_DISTANCE 1000000000LL
#define DS_PERSISTENCE_THRESHOLD 100000LL

static const char *const k_attention_names[] = {"flash", "materialized"};
static const char *const k_runtime_names[] = {"dtrun", "deepspeed", "fsdp", "megatron"};
static const char *const k_kernel_names[] = {"flash", "sdpa", "eager"};
static const char *const k_largest_names[] = {"module", "block_matrix"};
static const char *const k_device_names[] = {"cpu", "cuda"};
static const char *const k_sched_names[] = {"constant", "WarmupLR", "WarmupDecayLR",
                                            "WarmupCosineLR"};
static const char *const k_warmup_names[] = {"log", "linear"}; /* index = warmup_linear */
static const char *const k_collective_names[] = {"allreduce", "reduce_scatter", "allgather",
                                                 "broadcast"};
static const char *const k_format_names[] = {"text", "llmc"};
static const char *const k_tokenizer_names[] = {"byte", "gpt2"};
static const char *const k_dtype_keys[] = {"fp32", "bf16", "fp16"}; /* peak_flops[] index */
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

const char *dt_runtime_name(dt_runtime_kind k) {
    return ((int)k >= 0 && (int)k < N_OF(k_runtime_names)) ? k_runtime_names[k] : "?";
}

const char *dt_runtime_code(dt_runtime_kind k) {
    if (k == DT_RUNTIME_DTRUN) return "dtrun's engine";
    return k == DT_RUNTIME_MEGATRON ? "Megatron-LM's own model code" : "Hugging Face model code";
}

int dt_runtime_parse(const char *s, dt_runtime_kind *out, dt_error *err) {
    for (int i = 0; s && i < N_OF(k_runtime_names); i++)
        if (!strcmp(s, k_runtime_names[i])) {
            *out = (dt_runtime_kind)i;
            return DT_OK;
        }
    return dt_errorf(err, DT_EINVAL,
                     "--runtime '%s': unknown runtime (use dtrun, deepspeed, fsdp or megatron; e.g. --runtime deepspeed)",
                     s ? s : "");
}

const char *dt_attn_kernel_name(dt_attn_kernel k) {
    return ((int)k >= 0 && (int)k < N_OF(k_kernel_names)) ? k_kernel_names[k] : "?";
}

const char *dt_largest_layer_name(dt_largest_layer l) {
    return ((int)l >= 0 && (int)l < N_OF(k_largest_names)) ? k_largest_names[l] : "?";
}

/* megatron: Megatron-LM's own GPT / Llama (megatron/core/models/gpt), not Hugging Face's code.
 * Its attention is the fused / flash kernel (--attention-backend auto picks Transformer
 * Engine's fused attention, megatron/training/arguments.py); the softmax of unfused attention
 * is FusedScaleMaskSoftmax (--no-masked-softmax-fusion off by default), which computes in fp32
 * in registers and stores its output in the activation dtype, so no fp32 copy is kept; the
 * bias-GeLU / bias-SwiGLU and bias-dropout-add fusions are on (--no-bias-gelu-fusion,
 * --no-bias-dropout-fusion off by default): the activation is one fused op; the norms are
 * fused kernels (no fp32 copy of the input); vocab_parallel_cross_entropy upcasts the logits
 * (megatron/core/tensor_parallel/cross_entropy.py calculate_logits_max: .float()) and writes
 * the gradient in place (fused_loss). Dropout as the family's usual recipe has it: GPT's
 * --hidden-dropout / --attention-dropout 0.1 (arguments.py defaults), 0 for Llama (the
 * examples' Llama recipes pass 0.0), like the Hugging Face configs. */
static void megatron_defaults(dt_runtime *out) {
    out->attention = DT_KERNEL_FLASH;
    out->upcast_logits = 1;
    out->fused_loss = 1;
    out->upcast_norm = 0;
    out->upcast_softmax = 0;
    out->unfused_act = 0;
}

/* dtrun: its engine (no dropout, fused kernels). deepspeed / fsdp: Hugging Face
 * Transformers' model code as it runs by default: attn_implementation "sdpa" (the default
 * since transformers 4.36 when torch >= 2.1.1, modeling_utils.py); dropout as the family's
 * config has it (GPT2Config attn_pdrop = resid_pdrop = embd_pdrop = 0.1; LlamaConfig,
 * Qwen2Config, Qwen3Config attention_dropout = 0.0 and no residual dropout); the loss
 * upcasts logits to fp32 (loss_utils.py ForCausalLMLoss: logits.float()); LlamaRMSNorm and
 * the eager softmax compute in fp32 (modeling_llama.py; GPT-2's LayerNorm and softmax do
 * not); the MLP activation is unfused (activations.py NewGELUActivation is a composition
 * of element-wise ops; LlamaMLP multiplies act(gate) by up as a separate op). */
void dt_runtime_defaults(dt_runtime_kind kind, const dt_model *m, dt_runtime *out) {
    memset(out, 0, sizeof *out);   /* dtrun: all zero */
    out->kind = kind;
    if (kind == DT_RUNTIME_DTRUN) return;
    out->largest_layer = DT_LARGEST_MODULE;
    out->max_reuse_distance = DS_MAX_REUSE_DISTANCE;
    out->persistence_threshold = DS_PERSISTENCE_THRESHOLD;
    out->offload_ratio = 1.0;
    out->hpz_partition = 1;
    const int llama = m && m->family == DT_FAMILY_LLAMA;
    out->attention = DT_KERNEL_SDPA;
    out->dropout = !llama;
    out->upcast_logits = 1;
    out->upcast_norm = llama;
    out->upcast_softmax = llama;
    out->unfused_act = 1;
    if (kind == DT_RUNTIME_MEGATRON) megatron_defaults(out);
}

void dt_plan_set_runtime(dt_plan *p, dt_runtime_kind kind) {
    dt_runtime_defaults(kind, &p->model, &p->runtime);
    if (kind != DT_RUNTIME_DTRUN)
        p->activations.attention = p->runtime.attention == DT_KERNEL_EAGER ? DT_ATTN_MATERIALIZED : DT_ATTN_FLASH;
}

int dt_plan_set_attention(dt_plan *p, const char *name, const char *what, dt_error *err) {
    static const struct { const char *name; dt_attn_kernel kernel; dt_attention storage; } k_att[] = {
        {"flash", DT_KERNEL_FLASH, DT_ATTN_FLASH}, {"materialized", DT_KERNEL_EAGER, DT_ATTN_MATERIALIZED},
        {"sdpa", DT_KERNEL_SDPA, DT_ATTN_FLASH},   {"eager", DT_KERNEL_EAGER, DT_ATTN_MATERIALIZED}};
    const int dtrun = p->runtime.kind == DT_RUNTIME_DTRUN, megatron = p->runtime.kind == DT_RUNTIME_MEGATRON;
    for (int i = 0; name && i < N_OF(k_att); i++) {
        if (strcmp(name, k_att[i].name)) continue;
        if ((dtrun || megatron) && k_att[i].kernel == DT_KERNEL_SDPA) break;
        if (dtrun && !strcmp(name, "eager")) break;
        p->activations.attention = k_att[i].storage;
        if (!dtrun) p->runtime.attention = k_att[i].kernel;
        return DT_OK;
    }
    return dt_errorf(err, DT_EINVAL, "%s '%s': expected %s", what, name ? name : "",
                     dtrun ? "flash or materialized (eager and sdpa are kernels of --runtime deepspeed / fsdp)"
                     : megatron ? "flash or eager (= materialized: Megatron-LM's unfused attention; sdpa is PyTorch's "
                                  "kernel under Hugging Face code)"
                                : "sdpa, flash or eager");
}

const char *dt_collective_name(dt_collective c) {
    return (c >= 0 && (int)c < N_OF(k_collective_names)) ? k_collective_names[c] : "?";
}

void dt_plan_defaults(dt_plan *p) {
    memset(p, 0, sizeof *p);
    p->cluster.nodes = 1;
    p->cluster.gpus_per_node = 1;
    p->cluster.device = DT_DEVICE_CPU;
    dt_error e;
    if (dt_hardware_load("cpu", NULL, &p->cluster.hw, &e) != DT_OK) {
        /* No built-in cpu profile: keep the name and zero numbers (no prediction). */
        memset(&p->cluster.hw, 0, sizeof p->cluster.hw);
        snprintf(p->cluster.hw.name, sizeof p->cluster.hw.name, "cpu");
        p->cluster.hw.device = DT_DEVICE_CPU;
    }
    p->parallel.world_size = 1;
    p->parallel.zero_stage = 0;
    p->parallel.offload_optimizer = DT_OFFLOAD_NONE;
    p->parallel.offload_param = DT_OFFLOAD_NONE;
    p->parallel.reduce_bucket_elems = DS_REDUCE_BUCKET_ELEMS;
    p->parallel.allgather_bucket_elems = DS_ALLGATHER_BUCKET_ELEMS;
    p->parallel.prefetch_bucket_elems = DS_PREFETCH_BUCKET_ELEMS;
    p->parallel.max_live_params = DS_MAX_LIVE_PARAMS;
    p->parallel.sub_group_elems = DS_SUB_GROUP_ELEMS;
    p->parallel.overlap_comm = 0; /* DeepSpeed: true only for stage 3 (deepspeed/runtime/zero/config.py) */
    p->batch.micro_batch = 1;
    p->batch.grad_accum = 1;
    p->batch.global_batch = 1;
    p->batch.seq_len = DEFAULT_SEQ_LEN;
    dt_precision_from_preset(DT_PREC_MIXED_BF16, &p->precision);
    p->activations.ckpt_layers = 0;
    p->activations.attention = DT_ATTN_FLASH;
    p->activations.selective = 0;
    dt_runtime_defaults(DT_RUNTIME_DTRUN, NULL, &p->runtime);
    p->optimizer.lr = DEFAULT_LR;
    p->optimizer.beta1 = DEFAULT_BETA1;
    p->optimizer.beta2 = DEFAULT_BETA2;
    p->optimizer.eps = DEFAULT_EPS;
    p->optimizer.weight_decay = DEFAULT_WEIGHT_DECAY;
    p->optimizer.grad_clip = DEFAULT_GRAD_CLIP;
    p->schedule.kind = DT_SCHED_WARMUP_LR;
    p->schedule.total_steps = DEFAULT_TOTAL_STEPS;
    p->schedule.warmup_steps = DEFAULT_WARMUP_STEPS;
    p->schedule.warmup_linear = 1;
    p->schedule.warmup_min_lr = 0.0;
    p->schedule.cos_min_ratio = DS_COS_MIN_RATIO;
    snprintf(p->data.train, sizeof p->data.train, "%s", DEFAULT_TRAIN_DATA);
    snprintf(p->data.format, sizeof p->data.format, "text");
    snprintf(p->data.tokenizer, sizeof p->data.tokenizer, "byte");
    p->data.valid_fraction = DEFAULT_VALID_FRACTION;
    p->data.eval_interval = 0;
    p->data.eval_batches = DEFAULT_EVAL_BATCHES;
    p->data.seed = DEFAULT_SEED;
    snprintf(p->output.dir, sizeof p->output.dir, "%s", DEFAULT_OUTPUT_DIR);
    p->output.save_interval = 0;
    p->output.keep_last = DEFAULT_KEEP_LAST;
}

void dt_plan_drop_demo_data(dt_plan *p) {
    if (p->model.vocab > BYTE_VOCAB && !strcmp(p->data.train, DEFAULT_TRAIN_DATA)) p->data.train[0] = '\0';
}

/* ------------------------------------------------------------ validation */

/* 1 when s is exactly n lowercase hex digits. */
static int is_lower_hex(const char *s, size_t n) {
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

static int name_index(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

static int finite_nonneg(double x) { return isfinite(x) && x >= 0; }

static int validate_hardware(const dt_cluster *c, dt_error *err) {
    const dt_hardware *h = &c->hw;
    if (!h->name[0])
        return dt_errorf(err, DT_EINVAL, "cluster.hardware.name is empty (name the profile, e.g. \"cpu\")");
    if (h->device != c->device)
        return dt_errorf(err, DT_EINVAL,
                         "cluster.device is %s but hardware profile '%s' describes a %s device",
                         k_device_names[c->device], h->name, k_device_names[h->device]);
    const struct { const char *name; double v; } nums[] = {
        {"device_mem_bytes", (double)h->device_mem_bytes}, {"reserve_bytes", (double)h->reserve_bytes},
        {"peak_flops.fp32", h->peak_flops[0]}, {"peak_flops.bf16", h->peak_flops[1]},
        {"peak_flops.fp16", h->peak_flops[2]}, {"achievable_flops.fp32", h->achievable_flops[0]},
        {"achievable_flops.bf16", h->achievable_flops[1]}, {"achievable_flops.fp16", h->achievable_flops[2]},
        {"mem_bw", h->mem_bw}, {"intra_busbw", h->intra_busbw}, {"intra_alpha_s", h->intra_alpha_s},
        {"inter_busbw", h->inter_busbw}, {"inter_alpha_s", h->inter_alpha_s}, {"h2d_bw", h->h2d_bw},
        {"host_mem_bytes", (double)h->host_mem_bytes}, {"cpu_adam_params_per_s", h->cpu_adam_params_per_s},
        {"nvme_bw", h->nvme_bw}, {"nvme_bytes", (double)h->nvme_bytes},
        {"attention_flops", h->attention_flops}, {"op_overhead_s", h->op_overhead_s},
        {"elementwise_bw", h->elementwise_bw}, {"sm_count", h->sm_count},
        {"runtime_bytes", (double)h->runtime_bytes}, {"runtime_mpi_bytes", (double)h->runtime_mpi_bytes},
        {"thread_efficiency", h->thread_efficiency}, {"thread_cores", h->thread_cores},
        {"intra_busbw_reduce_scatter", h->intra_busbw_rs}, {"intra_busbw_allgather", h->intra_busbw_ag},
        {"gemm_peak_fraction.fp32", h->gemm_peak_fraction[0]}, {"gemm_peak_fraction.bf16", h->gemm_peak_fraction[1]},
        {"gemm_peak_fraction.fp16", h->gemm_peak_fraction[2]}, {"mem_bw_fraction", h->mem_bw_fraction},
    };
    for (int i = 0; i < N_OF(nums); i++)
        if (!finite_nonneg(nums[i].v))
            return dt_errorf(err, DT_EINVAL, "cluster.hardware.%s = %g must be a finite number >= 0",
                             nums[i].name, nums[i].v);
    for (int t = 0; t < 3; t++)
        if (h->achievable_flops[t] > h->peak_flops[t])
            return dt_errorf(err, DT_EINVAL,
                             "cluster.hardware.achievable_flops.%s (%g) exceeds peak_flops.%s (%g)",
                             k_dtype_keys[t], h->achievable_flops[t], k_dtype_keys[t], h->peak_flops[t]);
    for (int t = 0; t < 3; t++)
        if (h->gemm_peak_fraction[t] > 1.0)
            return dt_errorf(err, DT_EINVAL, "cluster.hardware.gemm_peak_fraction.%s (%g) is above 1",
                             k_dtype_keys[t], h->gemm_peak_fraction[t]);
    if (h->mem_bw_fraction > 1.0)
        return dt_errorf(err, DT_EINVAL, "cluster.hardware.mem_bw_fraction (%g) is above 1", h->mem_bw_fraction);
    if (h->reserve_bytes > h->device_mem_bytes && h->device_mem_bytes > 0)
        return dt_errorf(err, DT_EINVAL,
                         "cluster.hardware.reserve_bytes (%" PRId64 ") exceeds device_mem_bytes (%" PRId64 ")",
                         h->reserve_bytes, h->device_mem_bytes);
    return DT_OK;
}

static int validate_parallel(const dt_plan *p, dt_error *err) {
    const dt_parallel *q = &p->parallel;
    if (q->world_size != p->cluster.nodes * p->cluster.gpus_per_node)
        return dt_errorf(err, DT_EINVAL,
                         "parallel.world_size %" PRId64 " != cluster.nodes %" PRId64
                         " x cluster.gpus_per_node %" PRId64 " (data parallel: every rank is a replica)",
                         q->world_size, p->cluster.nodes, p->cluster.gpus_per_node);
    if (q->zero_stage > 3)
        return dt_errorf(err, DT_EINVAL,
                         "Maximum supported ZeRO stage is 3 (parallel.zero_stage = %d)", q->zero_stage);
    if (q->zero_stage < 0)
        return dt_errorf(err, DT_EINVAL, "parallel.zero_stage = %d: use 0 (DDP), 1, 2 or 3",
                         q->zero_stage);
    if ((int)q->offload_optimizer < 0 || (int)q->offload_optimizer > DT_OFFLOAD_NVME ||
        (int)q->offload_param < 0 || (int)q->offload_param > DT_OFFLOAD_NVME)
        return dt_errorf(err, DT_EINVAL, "parallel.offload_*: not one of none, cpu, nvme");
    if (q->offload_param != DT_OFFLOAD_NONE && q->zero_stage != 3)
        return dt_errorf(err, DT_EINVAL,
                         "parallel.offload_param = %s needs zero_stage 3 (DeepSpeed offloads "
                         "parameters only in ZeRO stage 3); this plan has stage %d",
                         dt_offload_name(q->offload_param), q->zero_stage);
    if (q->offload_optimizer != DT_OFFLOAD_NONE && q->zero_stage == 0)
        return dt_errorf(err, DT_EINVAL,
                         "parallel.offload_optimizer = %s needs ZeRO stage 1, 2 or 3 (stage 0 "
                         "keeps the optimizer on the device)", dt_offload_name(q->offload_optimizer));
    if (q->offload_optimizer == DT_OFFLOAD_NVME && q->zero_stage != 3)
        return dt_errorf(err, DT_EINVAL,
                         "parallel.offload_optimizer = nvme needs zero_stage 3 (DeepSpeed supports "
                         "NVMe optimizer offload only with ZeRO stage 3); this plan has stage %d",
                         q->zero_stage);
    if ((q->offload_optimizer == DT_OFFLOAD_NVME || q->offload_param == DT_OFFLOAD_NVME) &&
        !q->nvme_path[0])
        return dt_errorf(err, DT_EINVAL,
                         "parallel.nvme_path is empty but NVMe offload is on (give the directory "
                         "for swap files, e.g. \"/local_nvme\")");
    const struct { const char *name; int64_t v; } sizes[] = {
        {"reduce_bucket_elems", q->reduce_bucket_elems},
        {"allgather_bucket_elems", q->allgather_bucket_elems},
        {"prefetch_bucket_elems", q->prefetch_bucket_elems},
        {"max_live_params", q->max_live_params},
    };
    for (int i = 0; i < N_OF(sizes); i++)
        if (sizes[i].v <= 0)
            return dt_errorf(err, DT_EINVAL, "parallel.%s = %" PRId64 " must be > 0 (elements)",
                             sizes[i].name, sizes[i].v);
    if (q->sub_group_elems < 0)   /* 0: every unit a sub-group of its own, as DeepSpeed's 0 */
        return dt_errorf(err, DT_EINVAL, "parallel.sub_group_elems = %" PRId64 " must be >= 0 (elements)",
                         q->sub_group_elems);
    return DT_OK;
}

static int validate_batch(const dt_plan *p, dt_error *err) {
    const dt_batch *b = &p->batch;
    /* DeepSpeed's own assertions and wording (deepspeed/runtime/config.py, _batch_assertion) */
    if (b->global_batch <= 0)
        return dt_errorf(err, DT_EINVAL, "Train batch size: %" PRId64 " has to be greater than 0",
                         b->global_batch);
    if (b->micro_batch <= 0)
        return dt_errorf(err, DT_EINVAL,
                         "Micro batch size per gpu: %" PRId64 " has to be greater than 0",
                         b->micro_batch);
    if (b->grad_accum <= 0)
        return dt_errorf(err, DT_EINVAL,
                         "Gradient accumulation steps: %" PRId64 " has to be greater than 0",
                         b->grad_accum);
    int64_t world = dt_layout_dp(p);   /* the data-parallel size: world_size without a layout */
    if (b->micro_batch > INT64_MAX / b->grad_accum / (world > 0 ? world : 1) ||
        b->global_batch != b->micro_batch * b->grad_accum * world)
        return dt_errorf(err, DT_EINVAL,
                         "Check batch related parameters. train_batch_size is not equal to "
                         "micro_batch_per_gpu * gradient_acc_step * world_size %" PRId64
                         " != %" PRId64 " * %" PRId64 " * %" PRId64
                         " (fix batch.global_batch, batch.micro_batch or batch.grad_accum)",
                         b->global_batch, b->micro_batch, b->grad_accum, world);
    if (b->seq_len <= 0)
        return dt_errorf(err, DT_EINVAL, "batch.seq_len = %" PRId64 " must be > 0 (tokens)",
                         b->seq_len);
    if (p->model.family == DT_FAMILY_GPT2 && b->seq_len > p->model.max_pos)
        return dt_errorf(err, DT_EINVAL,
                         "batch.seq_len %" PRId64 " exceeds model.max_pos %" PRId64
                         " (gpt2 has learned positions only for %" PRId64 " tokens)",
                         b->seq_len, p->model.max_pos, p->model.max_pos);
    return DT_OK;
}

static int validate_precision(const dt_precision *pr, dt_error *err) {
    if ((int)pr->preset < 0 || (int)pr->preset > DT_PREC_FP32)
        return dt_errorf(err, DT_EINVAL, "precision.preset: unknown preset %d", (int)pr->preset);
    const dt_dtype dts[] = {pr->param, pr->grad, pr->master, pr->moment, pr->activation};
    for (int i = 0; i < N_OF(dts); i++)
        if ((int)dts[i] < 0 || (int)dts[i] > DT_DTYPE_FP16)
            return dt_errorf(err, DT_EINVAL, "precision: unknown dtype %d", (int)dts[i]);
    dt_precision ref;
    dt_precision_from_preset(pr->preset, &ref);
    const char *preset = dt_precision_preset_name(pr->preset);
    if (pr->param != ref.param)
        return dt_errorf(err, DT_EINVAL,
                         "precision.param = %s does not match preset %s (which trains %s weights; "
                         "pick the preset that matches)", dt_dtype_name(pr->param), preset,
                         dt_dtype_name(ref.param));
    if (ref.has_master && !pr->has_master)
        return dt_errorf(err, DT_EINVAL,
                         "precision.has_master = false contradicts preset %s (mixed precision keeps "
                         "fp32 master weights; use pure-bf16 for no master copy)", preset);
    if (pr->has_master && pr->master != DT_DTYPE_FP32)
        return dt_errorf(err, DT_EINVAL, "precision.master = %s: master weights must be fp32",
                         dt_dtype_name(pr->master));
    /* without a master copy the working weights are the master: a different master
     * dtype would be silently ignored */
    if (!pr->has_master && pr->master != pr->param)
        return dt_errorf(err, DT_EINVAL,
                         "precision.master = %s contradicts precision.has_master = false (no separate master copy: "
                         "the %s params are their own master); set master to %s or has_master to true",
                         dt_dtype_name(pr->master), dt_dtype_name(pr->param), dt_dtype_name(pr->param));
    /* loss scaling exists only for fp16 (the engine and DeepSpeed ignore it otherwise):
     * a bf16/fp32 plan that asks for it would silently train without it */
    if (pr->param != DT_DTYPE_FP16 && (pr->loss_scale != DT_NO_LOSS_SCALE || pr->initial_scale_power != 0))
        return dt_errorf(err, DT_EINVAL,
                         "precision.loss_scale = %g, initial_scale_power = %d contradict precision.preset = %s: "
                         "loss scaling applies only to fp16 params; write loss_scale 1 and initial_scale_power 0",
                         pr->loss_scale, pr->initial_scale_power, preset);
    int has_bf16 = 0, has_fp16 = 0;
    for (int i = 0; i < N_OF(dts); i++) {
        if (i == 2 && !pr->has_master) continue;
        has_bf16 |= dts[i] == DT_DTYPE_BF16;
        has_fp16 |= dts[i] == DT_DTYPE_FP16;
    }
    if (has_bf16 && has_fp16) /* DeepSpeed's assertion wording (deepspeed/runtime/config.py) */
        return dt_errorf(err, DT_EINVAL,
                         "bfloat16 and fp16 modes cannot be simultaneously enabled (precision "
                         "mixes bf16 and fp16 dtypes)");
    if (dt_dtype_size(pr->grad) < dt_dtype_size(pr->param) ||
        dt_dtype_size(pr->moment) < dt_dtype_size(pr->param))
        return dt_errorf(err, DT_EINVAL,
                         "precision: grad (%s) and moment (%s) must be at least as wide as param (%s)",
                         dt_dtype_name(pr->grad), dt_dtype_name(pr->moment), dt_dtype_name(pr->param));
    if (!finite_nonneg(pr->loss_scale))
        return dt_errorf(err, DT_EINVAL, "precision.loss_scale = %g must be >= 0 (0 = dynamic)",
                         pr->loss_scale);
    if (pr->initial_scale_power < 0 || pr->initial_scale_power > MAX_LOSS_SCALE_POWER)
        return dt_errorf(err, DT_EINVAL, "precision.initial_scale_power = %d must be in [0, %d]",
                         pr->initial_scale_power, MAX_LOSS_SCALE_POWER);
    if (pr->loss_scale_window < 1 || pr->hysteresis < 1)
        return dt_errorf(err, DT_EINVAL,
                         "precision.loss_scale_window (%d) and hysteresis (%d) must be >= 1",
                         pr->loss_scale_window, pr->hysteresis);
    if (!(isfinite(pr->min_loss_scale) && pr->min_loss_scale > 0))
        return dt_errorf(err, DT_EINVAL, "precision.min_loss_scale = %g must be > 0",
                         pr->min_loss_scale);
    return DT_OK;
}

/* DeepSpeed's partial optimizer offload, ZeRO++ and the gradients' collective (reduce_scatter,
 * communication_data_type; deepspeed runtime only): the rules
 * DeepSpeed itself enforces (runtime/zero/config.py "Partial offloading only supported for
 * ZeRO Stage 3."; utils/groups.py _create_zero_param_parallel_group: the world divides into
 * hpZ groups) and the ones the model needs (a ratio means nothing without a CPU-offloaded
 * optimizer). */
static int validate_deepspeed_keys(const dt_plan *p, dt_error *err) {
    const dt_runtime *r = &p->runtime;
    const dt_parallel *q = &p->parallel;
    if (!(r->offload_ratio >= 0 && r->offload_ratio <= 1))
        return dt_errorf(err, DT_EINVAL, "runtime.offload_ratio = %g must be in [0, 1]", r->offload_ratio);
    if (r->hpz_partition < 1)
        return dt_errorf(err, DT_EINVAL, "runtime.hpz_partition_size = %lld must be >= 1 (1 = hpZ off)",
                         (long long)r->hpz_partition);
    const int partial = r->offload_ratio < 1.0, zeropp = r->hpz_partition > 1 || r->quantized_weights ||
                                                          r->quantized_gradients;
    if ((partial || zeropp || r->grads_allreduce || r->comm_dtype_set) && r->kind != DT_RUNTIME_DEEPSPEED)
        return dt_errorf(err, DT_EINVAL,
                         "runtime.offload_ratio / hpz_partition_size / quantized_* / reduce_scatter / "
                         "communication_data_type: DeepSpeed's options, not %s's (set runtime.kind to deepspeed or "
                         "drop them)", k_runtime_names[r->kind]);
    if (r->comm_dtype_set && ((int)r->comm_dtype < 0 || r->comm_dtype > DT_DTYPE_FP16))
        return dt_errorf(err, DT_EINVAL, "runtime.communication_data_type: not fp32, bf16 or fp16");
    if (partial && (q->zero_stage != 3 || q->offload_optimizer != DT_OFFLOAD_CPU))
        return dt_errorf(err, DT_EINVAL,
                         "runtime.offload_ratio = %g: partial offloading needs ZeRO stage 3 with offload_optimizer "
                         "cpu (this plan: stage %d, offload_optimizer %s)",
                         r->offload_ratio, q->zero_stage, dt_offload_name(q->offload_optimizer));
    if (zeropp && q->zero_stage != 3)
        return dt_errorf(err, DT_EINVAL, "runtime.hpz_partition_size / quantized_*: ZeRO++ is a stage-3 option "
                                         "(this plan: stage %d)", q->zero_stage);
    if (r->hpz_partition > 1 && q->world_size % r->hpz_partition)
        return dt_errorf(err, DT_EINVAL,
                         "runtime.hpz_partition_size = %lld does not divide the world size %lld (use the GPUs per "
                         "node, %lld)", (long long)r->hpz_partition, (long long)q->world_size,
                         (long long)p->cluster.gpus_per_node);
    return DT_OK;
}

/* Megatron-LM's data parallelism is plain DDP or the distributed optimizer
 * (--use-distributed-optimizer: the fp32 main parameters and Adam states sharded over DP,
 * megatron/core/optimizer/distrib_optimizer.py) = ZeRO-1; it has no ZeRO-2 / 3, and runs
 * on CUDA GPUs only. */
static int validate_megatron(const dt_plan *p, dt_error *err) {
    const dt_parallel *q = &p->parallel;
    if (p->runtime.attention == DT_KERNEL_SDPA)
        return dt_errorf(err, DT_EINVAL,
                         "runtime.attention = \"sdpa\" with runtime megatron: PyTorch's kernel under Hugging Face "
                         "code; Megatron-LM runs \"flash\" (its fused / flash backends) or \"eager\" (unfused)");
    if (p->cluster.device != DT_DEVICE_CUDA)
        return dt_errorf(err, DT_EINVAL,
                         "runtime.kind = megatron on CPU ranks: Megatron-LM runs on CUDA GPUs only (use a GPU "
                         "hardware profile, or runtime dtrun)");
    if (q->zero_stage >= 2)
        return dt_errorf(err, DT_EINVAL,
                         "parallel.zero_stage = %d with runtime megatron: Megatron-LM has no ZeRO-%d (its data "
                         "parallelism is DDP, zero_stage 0, or the distributed optimizer, zero_stage 1); use 0 or 1, "
                         "or runtime deepspeed / fsdp",
                         q->zero_stage, q->zero_stage);
    return DT_OK;   /* offload: refused with every layout (common/layout.c) */
}

/* The runtime section: a dtrun plan carries none (its fields stay at the defaults);
 * deepspeed / fsdp plans run on GPUs, with what their frameworks support. */
static int validate_runtime(const dt_plan *p, dt_error *err) {
    const dt_runtime *r = &p->runtime;
    int rc;
    if ((int)r->kind < 0 || (int)r->kind >= N_OF(k_runtime_names))
        return dt_errorf(err, DT_EINVAL, "runtime.kind: not dtrun, deepspeed, fsdp or megatron");
    if (r->kind == DT_RUNTIME_DTRUN) {
        if (r->attention || r->dropout || r->upcast_logits || r->fused_loss || r->upcast_norm || r->upcast_softmax ||
            r->unfused_act ||
            r->largest_layer || r->fetch_overhead_s != 0 || r->max_reuse_distance || r->persistence_threshold ||
            r->offload_ratio != 0 || r->hpz_partition || r->quantized_weights || r->quantized_gradients ||
            r->grads_allreduce || r->comm_dtype_set)
            return dt_errorf(err, DT_EINVAL,
                             "runtime: a dtrun plan has no runtime choices (delete the runtime section, or set "
                             "runtime.kind to deepspeed or fsdp)");
        if (p->activations.selective)
            return dt_errorf(err, DT_EINVAL,
                             "activations.selective_recompute = true: dtrun's engine recomputes whole blocks only "
                             "(use activations.ckpt_layers, or runtime.kind deepspeed / fsdp)");
        return DT_OK;
    }
    const char *kind = k_runtime_names[r->kind];
    if ((int)r->attention < 0 || (int)r->attention >= N_OF(k_kernel_names) || (int)r->largest_layer < 0 ||
        (int)r->largest_layer >= N_OF(k_largest_names))
        return dt_errorf(err, DT_EINVAL, "runtime.attention / runtime.largest_layer: unknown value");
    const dt_attention storage = r->attention == DT_KERNEL_EAGER ? DT_ATTN_MATERIALIZED : DT_ATTN_FLASH;
    if (p->activations.attention != storage)
        return dt_errorf(err, DT_EINVAL,
                         "runtime.attention = \"%s\" contradicts activations.attention = \"%s\" (eager keeps the "
                         "materialized probabilities, sdpa and flash do not): set activations.attention to \"%s\"",
                         k_kernel_names[r->attention], k_attention_names[p->activations.attention],
                         k_attention_names[storage]);
    if (r->kind == DT_RUNTIME_MEGATRON && (rc = validate_megatron(p, err))) return rc;
    /* on CPU ranks (issue 34): only with the runtime's footprint measured on the machine */
    if (p->cluster.device != DT_DEVICE_CUDA &&
        dt_hardware_hf_runtime_bytes(&p->cluster.hw, r->kind == DT_RUNTIME_DEEPSPEED, p->parallel.zero_stage) <= 0)
        return dt_errorf(err, DT_EINVAL,
                         "runtime.kind = %s on CPU ranks needs the hardware profile's measured %s (bench/"
                         "validate_runtimes.sh measures it), or use runtime dtrun or a GPU hardware profile", kind,
                         r->kind == DT_RUNTIME_DEEPSPEED ? "deepspeed_runtime_bytes" : "torch_runtime_bytes");
    if (!finite_nonneg(r->fetch_overhead_s) || r->max_reuse_distance < 0 || r->persistence_threshold < 0)
        return dt_errorf(err, DT_EINVAL,
                         "runtime.fetch_overhead_s, max_reuse_distance and persistence_threshold must be >= 0");
    if ((rc = validate_deepspeed_keys(p, err))) return rc;
    if (r->kind == DT_RUNTIME_FSDP) {
        const dt_parallel *q = &p->parallel;
        if (q->zero_stage == 1)
            return dt_errorf(err, DT_EINVAL,
                             "parallel.zero_stage = 1 with runtime fsdp: FSDP has no optimizer-only sharding (use 0 "
                             "for DDP, 2 for SHARD_GRAD_OP, 3 for FULL_SHARD)");
        if (q->offload_optimizer == DT_OFFLOAD_NVME || q->offload_param == DT_OFFLOAD_NVME ||
            q->offload_optimizer != q->offload_param)
            return dt_errorf(err, DT_EINVAL,
                             "parallel.offload_optimizer = %s, offload_param = %s with runtime fsdp: FSDP's "
                             "CPUOffload moves parameters, gradients and the optimizer together (use cpu/cpu with "
                             "stage 3, or none/none)",
                             dt_offload_name(q->offload_optimizer), dt_offload_name(q->offload_param));
    }
    return DT_OK;
}

static int validate_training(const dt_plan *p, dt_error *err) {
    const dt_optimizer *o = &p->optimizer;
    if (!(isfinite(o->lr) && o->lr > 0))
        return dt_errorf(err, DT_EINVAL, "optimizer.lr = %g must be > 0", o->lr);
    if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
        return dt_errorf(err, DT_EINVAL, "optimizer.beta1 = %g, beta2 = %g must be in [0, 1)",
                         o->beta1, o->beta2);
    if (!(isfinite(o->eps) && o->eps > 0))
        return dt_errorf(err, DT_EINVAL, "optimizer.eps = %g must be > 0", o->eps);
    if (!finite_nonneg(o->weight_decay) || !finite_nonneg(o->grad_clip))
        return dt_errorf(err, DT_EINVAL,
                         "optimizer.weight_decay = %g and grad_clip = %g must be >= 0 (grad_clip 0 "
                         "disables clipping)", o->weight_decay, o->grad_clip);
    const dt_schedule *s = &p->schedule;
    if ((int)s->kind < 0 || (int)s->kind > DT_SCHED_WARMUP_COSINE_LR)
        return dt_errorf(err, DT_EINVAL, "schedule.kind: unknown kind %d", (int)s->kind);
    if (s->total_steps < 1)
        return dt_errorf(err, DT_EINVAL, "schedule.total_steps = %" PRId64 " must be >= 1",
                         s->total_steps);
    if (s->warmup_steps < 0 || s->warmup_steps > s->total_steps)
        return dt_errorf(err, DT_EINVAL,
                         "schedule.warmup_steps = %" PRId64 " must be in [0, total_steps = %" PRId64 "]",
                         s->warmup_steps, s->total_steps);
    if (!finite_nonneg(s->warmup_min_lr))
        return dt_errorf(err, DT_EINVAL, "schedule.warmup_min_lr = %g must be >= 0", s->warmup_min_lr);
    if (s->kind == DT_SCHED_WARMUP_COSINE_LR && s->warmup_min_lr > 1)
        return dt_errorf(err, DT_EINVAL,
                         "schedule.warmup_min_lr = %g: for WarmupCosineLR it is a ratio of lr "
                         "(DeepSpeed warmup_min_ratio), in [0, 1]", s->warmup_min_lr);
    if ((s->kind == DT_SCHED_WARMUP_LR || s->kind == DT_SCHED_WARMUP_DECAY_LR) &&
        s->warmup_min_lr > o->lr)
        return dt_errorf(err, DT_EINVAL, "schedule.warmup_min_lr = %g exceeds optimizer.lr = %g",
                         s->warmup_min_lr, o->lr);
    if (!(s->cos_min_ratio >= 0 && s->cos_min_ratio <= 1))
        return dt_errorf(err, DT_EINVAL, "schedule.cos_min_ratio = %g must be in [0, 1]",
                         s->cos_min_ratio);
    if (s->warmup_linear != 0 && s->warmup_linear != 1)
        return dt_errorf(err, DT_EINVAL, "schedule.warmup_linear must be 0 or 1");
    return DT_OK;
}

static int validate_io(const dt_plan *p, dt_error *err) {
    const dt_data *d = &p->data;
    int fmt = name_index(d->format, k_format_names, N_OF(k_format_names));
    int tok = name_index(d->tokenizer, k_tokenizer_names, N_OF(k_tokenizer_names));
    if (fmt < 0)
        return dt_errorf(err, DT_EINVAL, "data.format '%s': use \"text\" or \"llmc\"", d->format);
    if (tok < 0)
        return dt_errorf(err, DT_EINVAL, "data.tokenizer '%s': use \"byte\" or \"gpt2\"", d->tokenizer);
    if (fmt == 0 && tok != 0)
        return dt_errorf(err, DT_EINVAL,
                         "data.format \"text\" is tokenized by the byte tokenizer; set data.tokenizer to \"byte\"");
    int64_t need = tok == 0 ? BYTE_VOCAB : GPT2_VOCAB;
    if (p->model.vocab < need)
        return dt_errorf(err, DT_EINVAL,
                         "model.vocab %" PRId64 " is smaller than the %s tokenizer's %" PRId64 " ids",
                         p->model.vocab, d->tokenizer, need);
    if (!(d->valid_fraction >= 0 && d->valid_fraction < 1))
        return dt_errorf(err, DT_EINVAL, "data.valid_fraction = %g must be in [0, 1)", d->valid_fraction);
    if (d->eval_interval < 0 || d->eval_batches < 0)
        return dt_errorf(err, DT_EINVAL, "data.eval_interval and data.eval_batches must be >= 0");
    if (d->eval_interval > 0 && d->eval_batches < 1)
        return dt_errorf(err, DT_EINVAL,
                         "data.eval_interval = %" PRId64 " but data.eval_batches = 0 (evaluate at least one batch)",
                         d->eval_interval);
    if (d->eval_interval > 0 && !d->valid[0] && d->valid_fraction <= 0)
        return dt_errorf(err, DT_EINVAL,
                         "data.eval_interval > 0 needs validation data: set data.valid or data.valid_fraction > 0");
    if (d->seed > (uint64_t)DT_JSON_MAX_EXACT_INT)
        return dt_errorf(err, DT_EINVAL, "data.seed must be <= 2^53 (JSON numbers are doubles)");
    if (d->tokenizer_fingerprint[0] && !is_lower_hex(d->tokenizer_fingerprint, DT_PLAN_FINGERPRINT_HEX))
        return dt_errorf(err, DT_EINVAL,
                         "data.tokenizer_fingerprint \"%s\" is not %d lowercase hex digits (prepare.json's "
                         "tokenizer.fingerprint): re-plan with dtplan solve --data DIR, or remove the key",
                         d->tokenizer_fingerprint, DT_PLAN_FINGERPRINT_HEX);
    const dt_output *o = &p->output;
    if (!o->dir[0]) return dt_errorf(err, DT_EINVAL, "output.dir is empty");
    if (o->save_interval < 0)
        return dt_errorf(err, DT_EINVAL, "output.save_interval = %" PRId64 " must be >= 0", o->save_interval);
    if (o->keep_last < 1)
        return dt_errorf(err, DT_EINVAL, "output.keep_last = %" PRId64 " must be >= 1", o->keep_last);
    return DT_OK;
}

static int validate_prediction(const dt_prediction *pr, dt_error *err) {
    if (!pr->valid) return DT_OK;
    const dt_mem_breakdown *m = &pr->memory;
    const int64_t mem[] = {m->params, m->grads, m->optimizer, m->activations, m->buffers, m->reserve,
                           m->total, m->host_params, m->host_optimizer, m->host_buffers,
                           m->host_total, m->nvme};
    for (int i = 0; i < N_OF(mem); i++)
        if (mem[i] < 0) return dt_errorf(err, DT_EINVAL, "prediction.memory: negative byte count");
    const dt_time_breakdown *t = &pr->time;
    const double tm[] = {t->compute_s, t->recompute_s, t->comm_s, t->comm_exposed_s, t->offload_s,
                         t->optimizer_s, t->step_s, t->tokens_per_s, t->mfu};
    for (int i = 0; i < N_OF(tm); i++)
        if (!finite_nonneg(tm[i]))
            return dt_errorf(err, DT_EINVAL, "prediction.time: values must be finite and >= 0");
    for (int c = 0; c < DT_COLL_COUNT; c++)
        if (pr->comm_bytes[c] < 0)
            return dt_errorf(err, DT_EINVAL, "prediction.comm_bytes.%s is negative",
                             k_collective_names[c]);
    return DT_OK;
}

int dt_plan_validate(const dt_plan *p, dt_error *err) {
    int rc = dt_model_validate(&p->model, err);   /* its messages start "model '<name>': " */
    if (rc) return rc;
    const dt_cluster *c = &p->cluster;
    if (c->nodes < 1 || c->nodes > MAX_RANKS || c->gpus_per_node < 1 || c->gpus_per_node > MAX_RANKS)
        return dt_errorf(err, DT_EINVAL,
                         "cluster.nodes = %" PRId64 " and cluster.gpus_per_node = %" PRId64
                         " must be in [1, %d]", c->nodes, c->gpus_per_node, MAX_RANKS);
    if ((int)c->device < 0 || (int)c->device > DT_DEVICE_CUDA)
        return dt_errorf(err, DT_EINVAL, "cluster.device: not cpu or cuda");
    if ((rc = validate_hardware(c, err))) return rc;
    if ((rc = validate_parallel(p, err))) return rc;
    if ((rc = dt_layout_validate(p, err))) return rc;   /* first: the batch divides by its dp */
    if ((rc = validate_batch(p, err))) return rc;
    if ((rc = validate_precision(&p->precision, err))) return rc;
    if (p->activations.ckpt_layers < 0 || p->activations.ckpt_layers > p->model.n_layer)
        return dt_errorf(err, DT_EINVAL,
                         "activations.ckpt_layers = %" PRId64 " must be in [0, model.n_layer = %" PRId64 "]",
                         p->activations.ckpt_layers, p->model.n_layer);
    if ((int)p->activations.attention < 0 || (int)p->activations.attention > DT_ATTN_MATERIALIZED)
        return dt_errorf(err, DT_EINVAL, "activations.attention: not flash or materialized");
    if (p->activations.selective != 0 && p->activations.selective != 1)
        return dt_errorf(err, DT_EINVAL, "activations.selective: must be 0 or 1");
    if ((rc = validate_runtime(p, err))) return rc;
    if ((rc = validate_training(p, err))) return rc;
    if ((rc = validate_io(p, err))) return rc;
    if ((rc = dt_finetune_check(&p->finetune, "finetune", err))) return rc;   /* the model's checks: dt_model_pgroups */
    if (dt_vlm_active(&p->vlm) && (rc = dt_vlm_check(&p->vlm, "model.vision", err))) return rc;
    if (dt_vlm_active(&p->vlm) && (rc = dt_vlm_check_seq(&p->vlm, p->batch.seq_len, err))) return rc;
    if ((rc = dt_objective_check(&p->objective, p->batch.seq_len, p->batch.global_batch, "objective", err))) return rc;
    return validate_prediction(&p->prediction, err);
}

/* --------------------------------------------------------------- writing */

static cJSON *add_obj(cJSON *parent, const char *key) {
    cJSON *o = cJSON_CreateObject();
    if (o) cJSON_AddItemToObject(parent, key, o);
    return o;
}
static void add_i(cJSON *o, const char *k, int64_t v) { cJSON_AddNumberToObject(o, k, (double)v); }
static void add_d(cJSON *o, const char *k, double v) { cJSON_AddNumberToObject(o, k, v); }
static void add_b(cJSON *o, const char *k, int v) { cJSON_AddBoolToObject(o, k, v != 0); }
static void add_s(cJSON *o, const char *k, const char *v) { cJSON_AddStringToObject(o, k, v); }
/* a per-ZeRO-stage byte count of the hardware profile, written when measured */
static void add_stage_bytes(cJSON *o, const char *k, const int64_t v[DT_HW_STAGES]) {
    double d[DT_HW_STAGES];
    int any = 0;
    for (int s = 0; s < DT_HW_STAGES; s++) d[s] = (double)v[s], any |= v[s] > 0;
    if (any) cJSON_AddItemToObject(o, k, cJSON_CreateDoubleArray(d, DT_HW_STAGES));
}

/* "rope_scaling": only when the type is not the default (plans before it existed, and
 * every gpt2 / unscaled llama plan, have none); HF's keys, only the type's parameters. */
static void write_rope_scaling(cJSON *model, const dt_rope_scaling *r) {
    if (r->type == DT_ROPE_DEFAULT) return;
    cJSON *o = add_obj(model, "rope_scaling");
    add_s(o, "rope_type", dt_rope_type_name(r->type));
    if (dt_rope_type_uses(r->type, DT_ROPE_FACTOR)) add_d(o, dt_rope_param_key(DT_ROPE_FACTOR), r->factor);
    if (dt_rope_type_uses(r->type, DT_ROPE_LOW_FREQ_FACTOR))
        add_d(o, dt_rope_param_key(DT_ROPE_LOW_FREQ_FACTOR), r->low_freq_factor);
    if (dt_rope_type_uses(r->type, DT_ROPE_HIGH_FREQ_FACTOR))
        add_d(o, dt_rope_param_key(DT_ROPE_HIGH_FREQ_FACTOR), r->high_freq_factor);
    if (dt_rope_type_uses(r->type, DT_ROPE_ORIGINAL_MAX_POS))
        add_i(o, dt_rope_param_key(DT_ROPE_ORIGINAL_MAX_POS), r->original_max_pos);
}

static void write_model(cJSON *root, const dt_model *m, const dt_vlm *v) {
    cJSON *o = add_obj(root, "model");
    add_s(o, "name", m->name);
    add_s(o, "family", dt_family_name(m->family));
    add_i(o, "n_layer", m->n_layer);
    add_i(o, "hidden", m->hidden);
    add_i(o, "n_head", m->n_head);
    add_i(o, "n_kv_head", m->n_kv_head);
    add_i(o, "head_dim", m->head_dim);
    add_i(o, "ffn", m->ffn);
    add_i(o, "vocab", m->vocab);
    add_i(o, "max_pos", m->max_pos);
    add_b(o, "tied_embeddings", m->tied_embeddings);
    add_b(o, "qkv_bias", m->qkv_bias);
    add_b(o, "qk_norm", m->qk_norm);
    add_d(o, "norm_eps", m->norm_eps);
    add_d(o, "rope_theta", m->rope_theta);
    write_rope_scaling(o, &m->rope_scaling);
    add_b(o, "derived", m->derived);
    if (m->requested_params > 0) add_i(o, "requested_params", m->requested_params);
    dt_vlm_write_json(o, v);   /* optional: absent = a text-only model */
}

static void write_per_dtype(cJSON *o, const char *key, const double v[3]) {
    cJSON *d = add_obj(o, key);
    for (int t = 0; t < 3; t++) add_d(d, k_dtype_keys[t], v[t]);
}

static void write_cluster(cJSON *root, const dt_cluster *c) {
    cJSON *o = add_obj(root, "cluster");
    add_i(o, "nodes", c->nodes);
    add_i(o, "gpus_per_node", c->gpus_per_node);
    add_s(o, "device", k_device_names[c->device]);
    const dt_hardware *h = &c->hw;
    cJSON *w = add_obj(o, "hardware");
    add_s(w, "name", h->name);
    add_s(w, "device", k_device_names[h->device]);
    add_i(w, "device_mem_bytes", h->device_mem_bytes);
    add_i(w, "reserve_bytes", h->reserve_bytes);
    write_per_dtype(w, "peak_flops", h->peak_flops);
    write_per_dtype(w, "achievable_flops", h->achievable_flops);
    add_d(w, "mem_bw", h->mem_bw);
    add_d(w, "intra_busbw", h->intra_busbw);
    add_d(w, "intra_alpha_s", h->intra_alpha_s);
    add_s(w, "interconnect", h->interconnect);
    add_d(w, "inter_busbw", h->inter_busbw);
    add_d(w, "inter_alpha_s", h->inter_alpha_s);
    add_d(w, "h2d_bw", h->h2d_bw);
    add_i(w, "host_mem_bytes", h->host_mem_bytes);
    add_d(w, "cpu_adam_params_per_s", h->cpu_adam_params_per_s);
    add_d(w, "nvme_bw", h->nvme_bw);
    add_i(w, "nvme_bytes", h->nvme_bytes);
    /* optional kernel-level terms: written when the profile has them */
    if (h->attention_flops > 0) add_d(w, "attention_flops", h->attention_flops);
    if (h->op_overhead_s > 0) add_d(w, "op_overhead_s", h->op_overhead_s);
    if (h->elementwise_bw > 0) add_d(w, "elementwise_bw", h->elementwise_bw);
    if (h->sm_count > 0) add_d(w, "sm_count", h->sm_count);   /* the GPU GEMM model's wave width */
    if (h->runtime_bytes > 0) add_i(w, "runtime_bytes", h->runtime_bytes);   /* measured runtime footprint */
    if (h->runtime_mpi_bytes > 0) add_i(w, "runtime_mpi_bytes", h->runtime_mpi_bytes);
    add_stage_bytes(w, "torch_runtime_bytes", h->torch_runtime_bytes);          /* HF runs on CPU ranks */
    add_stage_bytes(w, "deepspeed_runtime_bytes", h->deepspeed_runtime_bytes);
    if (h->intra_busbw_rs > 0) add_d(w, "intra_busbw_reduce_scatter", h->intra_busbw_rs);   /* measured per */
    if (h->intra_busbw_ag > 0) add_d(w, "intra_busbw_allgather", h->intra_busbw_ag);        /* collective */
    if (h->thread_efficiency > 0) {   /* measured multi-thread efficiency of a CPU rank */
        add_d(w, "thread_efficiency", h->thread_efficiency);
        add_d(w, "thread_cores", h->thread_cores);
    }
    /* measured GPU efficiencies (dtplan calibrate --device cuda) */
    if (h->gemm_peak_fraction[0] > 0 || h->gemm_peak_fraction[1] > 0 || h->gemm_peak_fraction[2] > 0)
        write_per_dtype(w, "gemm_peak_fraction", h->gemm_peak_fraction);
    if (h->mem_bw_fraction > 0) add_d(w, "mem_bw_fraction", h->mem_bw_fraction);
}

static void write_precision(cJSON *root, const dt_precision *pr) {
    cJSON *o = add_obj(root, "precision");
    add_s(o, "preset", dt_precision_preset_name(pr->preset));
    add_s(o, "param", dt_dtype_name(pr->param));
    add_s(o, "grad", dt_dtype_name(pr->grad));
    add_b(o, "has_master", pr->has_master);
    add_s(o, "master", dt_dtype_name(pr->master));
    add_s(o, "moment", dt_dtype_name(pr->moment));
    add_s(o, "activation", dt_dtype_name(pr->activation));
    add_d(o, "loss_scale", pr->loss_scale);
    add_i(o, "initial_scale_power", pr->initial_scale_power);
    add_i(o, "loss_scale_window", pr->loss_scale_window);
    add_i(o, "hysteresis", pr->hysteresis);
    add_d(o, "min_loss_scale", pr->min_loss_scale);
    cJSON *b = add_obj(o, "bytes_per_param"); /* derived, checked on read */
    add_i(b, "param", dt_precision_param_bytes(pr));
    add_i(b, "grad", dt_precision_grad_bytes(pr));
    add_i(b, "optimizer", dt_precision_optimizer_bytes(pr));
}

static void write_prediction(cJSON *root, const dt_prediction *pr) {
    cJSON *o = add_obj(root, "prediction");
    add_b(o, "valid", pr->valid);
    dt_prediction empty;
    memset(&empty, 0, sizeof empty);
    if (!pr->valid && !memcmp(pr, &empty, sizeof empty)) return; /* {"valid": false} */
    const dt_mem_breakdown *m = &pr->memory;
    cJSON *mo = add_obj(o, "memory");
    add_i(mo, "params", m->params);
    add_i(mo, "grads", m->grads);
    add_i(mo, "optimizer", m->optimizer);
    add_i(mo, "activations", m->activations);
    add_i(mo, "buffers", m->buffers);
    add_i(mo, "reserve", m->reserve);
    add_i(mo, "total", m->total);
    add_i(mo, "host_params", m->host_params);
    add_i(mo, "host_optimizer", m->host_optimizer);
    add_i(mo, "host_buffers", m->host_buffers);
    add_i(mo, "host_total", m->host_total);
    add_i(mo, "nvme", m->nvme);
    const dt_time_breakdown *t = &pr->time;
    cJSON *to = add_obj(o, "time");
    add_d(to, "compute_s", t->compute_s);
    add_d(to, "recompute_s", t->recompute_s);
    add_d(to, "comm_s", t->comm_s);
    add_d(to, "comm_exposed_s", t->comm_exposed_s);
    add_d(to, "offload_s", t->offload_s);
    add_d(to, "optimizer_s", t->optimizer_s);
    add_d(to, "step_s", t->step_s);
    add_d(to, "tokens_per_s", t->tokens_per_s);
    add_d(to, "mfu", t->mfu);
    cJSON *co = add_obj(o, "comm_bytes");
    for (int c = 0; c < DT_COLL_COUNT; c++) add_i(co, k_collective_names[c], pr->comm_bytes[c]);
}

/* "runtime": only for deepspeed / fsdp plans (a dtrun plan, and every plan written
 * before profiles existed, has none). */
static void write_runtime(cJSON *root, const dt_runtime *r) {
    if (r->kind == DT_RUNTIME_DTRUN) return;
    cJSON *o = add_obj(root, "runtime");
    add_s(o, "kind", k_runtime_names[r->kind]);
    add_s(o, "attention", k_kernel_names[r->attention]);
    add_b(o, "dropout", r->dropout);
    add_b(o, "upcast_logits", r->upcast_logits);
    add_b(o, "fused_loss", r->fused_loss);
    add_b(o, "upcast_norm", r->upcast_norm);
    add_b(o, "upcast_softmax", r->upcast_softmax);
    add_b(o, "unfused_act", r->unfused_act);
    add_s(o, "largest_layer", k_largest_names[r->largest_layer]);
    add_d(o, "fetch_overhead_s", r->fetch_overhead_s);
    add_i(o, "max_reuse_distance", r->max_reuse_distance);
    add_i(o, "persistence_threshold", r->persistence_threshold);
    /* optional keys, written only when set (plans without them read as DeepSpeed's defaults) */
    if (r->offload_ratio != 1.0) add_d(o, "offload_ratio", r->offload_ratio);
    if (r->hpz_partition > 1) add_i(o, "hpz_partition_size", r->hpz_partition);
    if (r->quantized_weights) add_b(o, "quantized_weights", 1);
    if (r->quantized_gradients) add_b(o, "quantized_gradients", 1);
    if (r->grads_allreduce) add_b(o, "reduce_scatter", 0);
    if (r->comm_dtype_set) add_s(o, "communication_data_type", dt_dtype_name(r->comm_dtype));
}

static cJSON *plan_to_tree(const dt_plan *p) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    add_s(root, "format", DT_PLAN_FORMAT);
    write_model(root, &p->model, &p->vlm);
    write_cluster(root, &p->cluster);

    const dt_parallel *q = &p->parallel;
    cJSON *o = add_obj(root, "parallel");
    add_i(o, "world_size", q->world_size);
    add_i(o, "zero_stage", q->zero_stage);
    add_s(o, "offload_optimizer", dt_offload_name(q->offload_optimizer));
    add_s(o, "offload_param", dt_offload_name(q->offload_param));
    add_s(o, "nvme_path", q->nvme_path);
    add_i(o, "reduce_bucket_elems", q->reduce_bucket_elems);
    add_i(o, "allgather_bucket_elems", q->allgather_bucket_elems);
    add_i(o, "prefetch_bucket_elems", q->prefetch_bucket_elems);
    add_i(o, "max_live_params", q->max_live_params);
    add_i(o, "sub_group_elems", q->sub_group_elems);
    add_b(o, "overlap_comm", q->overlap_comm);

    o = add_obj(root, "batch");
    add_i(o, "micro_batch", p->batch.micro_batch);
    add_i(o, "grad_accum", p->batch.grad_accum);
    add_i(o, "global_batch", p->batch.global_batch);
    add_i(o, "seq_len", p->batch.seq_len);

    write_precision(root, &p->precision);

    o = add_obj(root, "activations");
    add_i(o, "ckpt_layers", p->activations.ckpt_layers);
    add_s(o, "attention", k_attention_names[p->activations.attention]);
    if (p->activations.selective) add_b(o, "selective_recompute", 1);
    write_runtime(root, &p->runtime);
    dt_layout_write(root, p);

    const dt_optimizer *op = &p->optimizer;
    o = add_obj(root, "optimizer");
    add_d(o, "lr", op->lr);
    add_d(o, "beta1", op->beta1);
    add_d(o, "beta2", op->beta2);
    add_d(o, "eps", op->eps);
    add_d(o, "weight_decay", op->weight_decay);
    add_d(o, "grad_clip", op->grad_clip);

    const dt_schedule *s = &p->schedule;
    o = add_obj(root, "schedule");
    add_s(o, "kind", k_sched_names[s->kind]);
    add_i(o, "total_steps", s->total_steps);
    add_i(o, "warmup_steps", s->warmup_steps);
    add_s(o, "warmup_type", k_warmup_names[s->warmup_linear ? 1 : 0]);
    add_d(o, "warmup_min_lr", s->warmup_min_lr);
    add_d(o, "cos_min_ratio", s->cos_min_ratio);

    const dt_data *d = &p->data;
    o = add_obj(root, "data");
    if (d->train[0]) add_s(o, "train", d->train);   /* absent: the plan names no training data */
    add_s(o, "valid", d->valid);
    add_s(o, "format", d->format);
    add_s(o, "tokenizer", d->tokenizer);
    add_d(o, "valid_fraction", d->valid_fraction);
    add_i(o, "eval_interval", d->eval_interval);
    add_i(o, "eval_batches", d->eval_batches);
    add_i(o, "seed", (int64_t)d->seed);
    /* optional, written only when known: a plan without them reads as before */
    if (d->tokenizer_fingerprint[0]) {
        add_s(o, "tokenizer_fingerprint", d->tokenizer_fingerprint);
        add_s(o, "tokenizer_path", d->tokenizer_path);
    }
    if (d->loss_mask) add_b(o, "loss_mask", 1);

    o = add_obj(root, "output");
    add_s(o, "dir", p->output.dir);
    add_i(o, "save_interval", p->output.save_interval);
    add_i(o, "keep_last", p->output.keep_last);
    add_s(o, "init", p->output.init);

    write_prediction(root, &p->prediction);
    dt_finetune_write_json(root, &p->finetune);   /* optional: absent = full fine-tuning */
    dt_objective_write_json(root, &p->objective);   /* optional: absent = pt, or sft for masked data */
    return root;
}

char *dt_plan_to_json(const dt_plan *p, dt_error *err) {
    if (dt_plan_validate(p, err)) {
        dt_error_prefix(err, "plan not written");
        return NULL;
    }
    cJSON *root = plan_to_tree(p);
    char *text = root ? dt_json_print(root) : NULL;
    cJSON_Delete(root);
    if (!text) dt_errorf(err, DT_ENOMEM, "out of memory while printing the plan");
    return text;
}

int dt_plan_save(const char *path, const dt_plan *p, dt_error *err) {
    char *text = dt_plan_to_json(p, err);
    if (!text) return err ? err->code : DT_EINVAL;
    int rc = dt_json_write_file_atomic(path, text, err);
    free(text);
    return rc;
}

/* --------------------------------------------------------------- reading */

/* Optional "$.model.rope_scaling" (absent: the default). Strict like every object: the
 * type's parameters are required and any other key is unknown; the ranges are
 * dt_model_validate's (dt_rope_scaling_check). "default" is written by leaving it out. */
static void read_rope_scaling(dt_jobj *model, dt_rope_scaling *r, dt_error *err) {
    memset(r, 0, sizeof *r);
    if (model->failed || !dt_jobj_has(model, "rope_scaling")) return;
    const dt_rope_type types[] = {DT_ROPE_LINEAR, DT_ROPE_DYNAMIC, DT_ROPE_LLAMA3};
    const char *names[N_OF(types)];
    for (int i = 0; i < N_OF(types); i++) names[i] = dt_rope_type_name(types[i]);
    dt_jobj o;
    int t = 0;
    if (dt_jobj_open(&o, model, "rope_scaling", err)) {
        model->failed = err->code;
        return;
    }
    if (!dt_jobj_enum(&o, "rope_type", names, N_OF(types), &t, err)) r->type = types[t];
    if (!o.failed && dt_rope_type_uses(r->type, DT_ROPE_FACTOR))
        dt_jobj_num(&o, dt_rope_param_key(DT_ROPE_FACTOR), DT_JNUM_ANY, &r->factor, err);
    if (!o.failed && dt_rope_type_uses(r->type, DT_ROPE_LOW_FREQ_FACTOR))
        dt_jobj_num(&o, dt_rope_param_key(DT_ROPE_LOW_FREQ_FACTOR), DT_JNUM_ANY, &r->low_freq_factor, err);
    if (!o.failed && dt_rope_type_uses(r->type, DT_ROPE_HIGH_FREQ_FACTOR))
        dt_jobj_num(&o, dt_rope_param_key(DT_ROPE_HIGH_FREQ_FACTOR), DT_JNUM_ANY, &r->high_freq_factor, err);
    if (!o.failed && dt_rope_type_uses(r->type, DT_ROPE_ORIGINAL_MAX_POS))
        dt_jobj_int(&o, dt_rope_param_key(DT_ROPE_ORIGINAL_MAX_POS), 1, INT64_MAX, &r->original_max_pos, err);
    if (dt_jobj_close(&o, err)) model->failed = o.failed;
}

static void read_model(dt_jobj *root, dt_model *m, dt_vlm *v, dt_error *err) {
    dt_jobj r;
    if (dt_jobj_open(&r, root, "model", err)) return;
    const char *fam[2] = {dt_family_name(DT_FAMILY_GPT2), dt_family_name(DT_FAMILY_LLAMA)};
    int f = 0;
    dt_jobj_str(&r, "name", 0, m->name, sizeof m->name, err);
    dt_jobj_enum(&r, "family", fam, 2, &f, err);
    m->family = (dt_family)f;
    dt_jobj_int(&r, "n_layer", 1, INT64_MAX, &m->n_layer, err);
    dt_jobj_int(&r, "hidden", 1, INT64_MAX, &m->hidden, err);
    dt_jobj_int(&r, "n_head", 1, INT64_MAX, &m->n_head, err);
    dt_jobj_int(&r, "n_kv_head", 1, INT64_MAX, &m->n_kv_head, err);
    dt_jobj_int(&r, "head_dim", 1, INT64_MAX, &m->head_dim, err);
    dt_jobj_int(&r, "ffn", 1, INT64_MAX, &m->ffn, err);
    dt_jobj_int(&r, "vocab", 1, INT64_MAX, &m->vocab, err);
    dt_jobj_int(&r, "max_pos", 1, INT64_MAX, &m->max_pos, err);
    dt_jobj_bool(&r, "tied_embeddings", &m->tied_embeddings, err);
    dt_jobj_bool(&r, "qkv_bias", &m->qkv_bias, err);
    dt_jobj_bool(&r, "qk_norm", &m->qk_norm, err);
    dt_jobj_num(&r, "norm_eps", DT_JNUM_POS, &m->norm_eps, err);
    dt_jobj_num(&r, "rope_theta", DT_JNUM_NONNEG, &m->rope_theta, err);
    read_rope_scaling(&r, &m->rope_scaling, err);
    dt_jobj_bool(&r, "derived", &m->derived, err);
    /* optional: only derived shapes carry it (plans written before it existed lack it) */
    if (!r.failed && dt_jobj_has(&r, "requested_params"))
        dt_jobj_int(&r, "requested_params", 1, INT64_C(1) << 50, &m->requested_params, err); /* > 100T: no */
    if (!r.failed && m->requested_params > 0 && !m->derived) {
        r.failed = dt_errorf(err, DT_EINVAL,
                             "$.model.requested_params: only a derived shape (\"derived\": true) carries a "
                             "requested count; delete the key");
    }
    dt_vlm_read_json(&r, v, err);
    if (!dt_jobj_close(&r, err)) return;
    root->failed = r.failed;
}

static void read_per_dtype(dt_jobj *parent, const char *key, double v[3], dt_error *err) {
    dt_jobj r;
    if (dt_jobj_open(&r, parent, key, err)) return;
    for (int t = 0; t < 3; t++) dt_jobj_num(&r, k_dtype_keys[t], DT_JNUM_NONNEG, &v[t], err);
    if (dt_jobj_close(&r, err)) parent->failed = r.failed;
}

/* an optional array of DT_HW_STAGES byte counts (add_stage_bytes) */
static void read_stage_bytes(dt_jobj *r, const char *key, int64_t out[DT_HW_STAGES], dt_error *err) {
    if (r->failed || !dt_jobj_has(r, key)) return;
    const cJSON *v = dt_jobj_item(r, key, err);
    int ok = cJSON_IsArray(v) && cJSON_GetArraySize(v) == DT_HW_STAGES;
    for (int s = 0; ok && s < DT_HW_STAGES; s++) {
        const cJSON *e = cJSON_GetArrayItem(v, s);
        ok = cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble == floor(e->valuedouble) &&
             e->valuedouble < 4611686018427387904.0;
        if (ok) out[s] = (int64_t)e->valuedouble;
    }
    if (!ok) r->failed = dt_errorf(err, DT_EINVAL, "%s.%s: expected %d byte counts (ZeRO stages 0..3)", r->path, key,
                                   DT_HW_STAGES);
}

static void read_cluster(dt_jobj *root, dt_cluster *c, dt_error *err) {
    dt_jobj r, w;
    int dev = 0;
    if (dt_jobj_open(&r, root, "cluster", err)) return;
    dt_jobj_int(&r, "nodes", 1, INT64_MAX, &c->nodes, err);
    dt_jobj_int(&r, "gpus_per_node", 1, INT64_MAX, &c->gpus_per_node, err);
    dt_jobj_enum(&r, "device", k_device_names, N_OF(k_device_names), &dev, err);
    c->device = (dt_device)dev;
    if (!dt_jobj_open(&w, &r, "hardware", err)) {
        dt_hardware *h = &c->hw;
        dt_jobj_str(&w, "name", 0, h->name, sizeof h->name, err);
        dt_jobj_enum(&w, "device", k_device_names, N_OF(k_device_names), &dev, err);
        h->device = (dt_device)dev;
        dt_jobj_int(&w, "device_mem_bytes", 0, INT64_MAX, &h->device_mem_bytes, err);
        dt_jobj_int(&w, "reserve_bytes", 0, INT64_MAX, &h->reserve_bytes, err);
        if (!w.failed) read_per_dtype(&w, "peak_flops", h->peak_flops, err);
        if (!w.failed) read_per_dtype(&w, "achievable_flops", h->achievable_flops, err);
        dt_jobj_num(&w, "mem_bw", DT_JNUM_NONNEG, &h->mem_bw, err);
        dt_jobj_num(&w, "intra_busbw", DT_JNUM_NONNEG, &h->intra_busbw, err);
        dt_jobj_num(&w, "intra_alpha_s", DT_JNUM_NONNEG, &h->intra_alpha_s, err);
        dt_jobj_str(&w, "interconnect", 1, h->interconnect, sizeof h->interconnect, err);
        dt_jobj_num(&w, "inter_busbw", DT_JNUM_NONNEG, &h->inter_busbw, err);
        dt_jobj_num(&w, "inter_alpha_s", DT_JNUM_NONNEG, &h->inter_alpha_s, err);
        dt_jobj_num(&w, "h2d_bw", DT_JNUM_NONNEG, &h->h2d_bw, err);
        dt_jobj_int(&w, "host_mem_bytes", 0, INT64_MAX, &h->host_mem_bytes, err);
        dt_jobj_num(&w, "cpu_adam_params_per_s", DT_JNUM_NONNEG, &h->cpu_adam_params_per_s, err);
        dt_jobj_num(&w, "nvme_bw", DT_JNUM_NONNEG, &h->nvme_bw, err);
        dt_jobj_int(&w, "nvme_bytes", 0, INT64_MAX, &h->nvme_bytes, err);
        /* optional kernel-level terms (plans written before they existed lack them) */
        if (dt_jobj_has(&w, "attention_flops"))
            dt_jobj_num(&w, "attention_flops", DT_JNUM_NONNEG, &h->attention_flops, err);
        if (dt_jobj_has(&w, "op_overhead_s"))
            dt_jobj_num(&w, "op_overhead_s", DT_JNUM_NONNEG, &h->op_overhead_s, err);
        if (dt_jobj_has(&w, "elementwise_bw"))
            dt_jobj_num(&w, "elementwise_bw", DT_JNUM_NONNEG, &h->elementwise_bw, err);
        if (dt_jobj_has(&w, "sm_count"))
            dt_jobj_num(&w, "sm_count", DT_JNUM_NONNEG, &h->sm_count, err);
        if (dt_jobj_has(&w, "runtime_bytes"))
            dt_jobj_int(&w, "runtime_bytes", 0, INT64_MAX, &h->runtime_bytes, err);
        if (dt_jobj_has(&w, "runtime_mpi_bytes"))
            dt_jobj_int(&w, "runtime_mpi_bytes", 0, INT64_MAX, &h->runtime_mpi_bytes, err);
        read_stage_bytes(&w, "torch_runtime_bytes", h->torch_runtime_bytes, err);
        read_stage_bytes(&w, "deepspeed_runtime_bytes", h->deepspeed_runtime_bytes, err);
        if (dt_jobj_has(&w, "intra_busbw_reduce_scatter"))
            dt_jobj_num(&w, "intra_busbw_reduce_scatter", DT_JNUM_NONNEG, &h->intra_busbw_rs, err);
        if (dt_jobj_has(&w, "intra_busbw_allgather"))
            dt_jobj_num(&w, "intra_busbw_allgather", DT_JNUM_NONNEG, &h->intra_busbw_ag, err);
        if (dt_jobj_has(&w, "thread_efficiency"))
            dt_jobj_num(&w, "thread_efficiency", DT_JNUM_NONNEG, &h->thread_efficiency, err);
        if (dt_jobj_has(&w, "thread_cores"))
            dt_jobj_num(&w, "thread_cores", DT_JNUM_NONNEG, &h->thread_cores, err);
        if (!w.failed && dt_jobj_has(&w, "gemm_peak_fraction"))
            read_per_dtype(&w, "gemm_peak_fraction", h->gemm_peak_fraction, err);
        if (dt_jobj_has(&w, "mem_bw_fraction"))
            dt_jobj_num(&w, "mem_bw_fraction", DT_JNUM_NONNEG, &h->mem_bw_fraction, err);
        if (dt_jobj_close(&w, err)) r.failed = w.failed;
    }
    if (dt_jobj_close(&r, err)) root->failed = r.failed;
}

static void read_parallel(dt_jobj *root, dt_parallel *q, dt_error *err) {
    dt_jobj r;
    int oo = 0, op = 0;
    if (dt_jobj_open(&r, root, "parallel", err)) return;
    dt_jobj_int(&r, "world_size", 1, INT64_MAX, &q->world_size, err);
    /* any non-negative stage reads; above 3 gets DeepSpeed's words */
    int64_t stage = 0;
    if (!dt_jobj_int(&r, "zero_stage", 0, INT64_MAX, &stage, err) && stage > 3)
        r.failed = dt_errorf(err, DT_EINVAL, "$.parallel.zero_stage: Maximum supported ZeRO stage is 3 (got %lld)",
                             (long long)stage);
    q->zero_stage = (int)(stage > 3 ? 3 : stage);
    dt_jobj_enum(&r, "offload_optimizer", dt_offload_names, N_OF(dt_offload_names), &oo, err);
    dt_jobj_enum(&r, "offload_param", dt_offload_names, N_OF(dt_offload_names), &op, err);
    q->offload_optimizer = (dt_offload)oo;
    q->offload_param = (dt_offload)op;
    dt_jobj_str(&r, "nvme_path", 1, q->nvme_path, sizeof q->nvme_path, err);
    dt_jobj_int(&r, "reduce_bucket_elems", 1, INT64_MAX, &q->reduce_bucket_elems, err);
    dt_jobj_int(&r, "allgather_bucket_elems", 1, INT64_MAX, &q->allgather_bucket_elems, err);
    dt_jobj_int(&r, "prefetch_bucket_elems", 1, INT64_MAX, &q->prefetch_bucket_elems, err);
    dt_jobj_int(&r, "max_live_params", 1, INT64_MAX, &q->max_live_params, err);
    q->sub_group_elems = DS_SUB_GROUP_ELEMS;   /* optional: plans written before it had 1e9 */
    if (!r.failed && dt_jobj_has(&r, "sub_group_elems"))
        dt_jobj_int(&r, "sub_group_elems", 0, INT64_MAX, &q->sub_group_elems, err);
    dt_jobj_bool(&r, "overlap_comm", &q->overlap_comm, err);
    if (dt_jobj_close(&r, err)) root->failed = r.failed;
}

static void read_batch(dt_jobj *root, dt_batch *b, dt_error *err) {
    dt_jobj r;
    if (dt_jobj_open(&r, root, "batch", err)) return;
    dt_jobj_int(&r, "micro_batch", 1, INT64_MAX, &b->micro_batch, err);
    dt_jobj_int(&r, "grad_accum", 1, INT64_MAX, &b->grad_accum, err);
    dt_jobj_int(&r, "global_batch", 1, INT64_MAX, &b->global_batch, err);
    dt_jobj_int(&r, "seq_len", 1, INT64_MAX, &b->seq_len, err);
    if (dt_jobj_close(&r, err)) root->failed = r.failed;
}

static void read_dtype(dt_jobj *r, const char *key, dt_dtype *out, dt_error *err) {
    const char *names[3];
    for (int t = 0; t < 3; t++) names[t] = dt_dtype_name((dt_dtype)t);
    int v = 0;
    if (!dt_jobj_enum(r, key, names, 3, &v, err)) *out = (dt_dtype)v;
}

static const char *const k_bytes_keys[3] = {"param", "grad", "optimizer"};

/* declared_bytes[] receives $.precision.bytes_per_param (0 when absent). */
static void read_precision(dt_jobj *root, dt_precision *pr, int64_t declared_bytes[3],
                           dt_error *err) {
    dt_jobj r;
    if (dt_jobj_open(&r, root, "precision", err)) return;
    const char *presets[4];
    for (int i = 0; i < 4; i++) presets[i] = dt_precision_preset_name((dt_precision_preset)i);
    int preset = 0;
    dt_jobj_enum(&r, "preset", presets, 4, &preset, err);
    pr->preset = (dt_precision_preset)preset;
    read_dtype(&r, "param", &pr->param, err);
    read_dtype(&r, "grad", &pr->grad, err);
    dt_jobj_bool(&r, "has_master", &pr->has_master, err);
    read_dtype(&r, "master", &pr->master, err);
    read_dtype(&r, "moment", &pr->moment, err);
    read_dtype(&r, "activation", &pr->activation, err);
    dt_jobj_num(&r, "loss_scale", DT_JNUM_NONNEG, &pr->loss_scale, err);
    dt_jobj_int32(&r, "initial_scale_power", 0, MAX_LOSS_SCALE_POWER, &pr->initial_scale_power, err);
    dt_jobj_int32(&r, "loss_scale_window", 1, INT32_MAX, &pr->loss_scale_window, err);
    dt_jobj_int32(&r, "hysteresis", 1, INT32_MAX, &pr->hysteresis, err);
    dt_jobj_num(&r, "min_loss_scale", DT_JNUM_POS, &pr->min_loss_scale, err);
    /* Optional, derived from the dtypes: read here, compared after validation
     * (catches an edited dtype with a stale byte count). */
    if (!r.failed && dt_jobj_has(&r, "bytes_per_param")) {
        dt_jobj b;
        if (!dt_jobj_open(&b, &r, "bytes_per_param", err)) {
            for (int i = 0; i < 3; i++)
                dt_jobj_int(&b, k_bytes_keys[i], 1, INT64_MAX, &declared_bytes[i], err);
            if (dt_jobj_close(&b, err)) r.failed = b.failed;
        }
    }
    if (dt_jobj_close(&r, err)) root->failed = r.failed;
}

/* Optional "$.runtime" (absent: dtrun, as every plan written before profiles). When
 * present every key is required, as in the other sections. */
static void read_runtime(dt_jobj *root, dt_plan *p, dt_error *err) {
    dt_runtime *rt = &p->runtime;
    dt_runtime_defaults(DT_RUNTIME_DTRUN, &p->model, rt);
    if (!dt_jobj_has(root, "runtime")) return;
    dt_jobj r;
    int v = 0;
    if (dt_jobj_open(&r, root, "runtime", err)) return;
    if (!dt_jobj_enum(&r, "kind", k_runtime_names, N_OF(k_runtime_names), &v, err)) rt->kind = (dt_runtime_kind)v;
    if (!dt_jobj_enum(&r, "attention", k_kernel_names, N_OF(k_kernel_names), &v, err))
        rt->attention = (dt_attn_kernel)v;
    dt_jobj_bool(&r, "dropout", &rt->dropout, err);
    dt_jobj_bool(&r, "upcast_logits", &rt->upcast_logits, err);
    dt_jobj_bool(&r, "fused_loss", &rt->fused_loss, err);
    dt_jobj_bool(&r, "upcast_norm", &rt->upcast_norm, err);
    dt_jobj_bool(&r, "upcast_softmax", &rt->upcast_softmax, err);
    dt_jobj_bool(&r, "unfused_act", &rt->unfused_act, err);
    if (!dt_jobj_enum(&r, "largest_layer", k_largest_names, N_OF(k_largest_names), &v, err))
        rt->largest_layer = (dt_largest_layer)v;
    dt_jobj_num(&r, "fetch_overhead_s", DT_JNUM_NONNEG, &rt->fetch_overhead_s, err);
    dt_jobj_int(&r, "max_reuse_distance", 0, INT64_MAX, &rt->max_reuse_distance, err);
    dt_jobj_int(&r, "persistence_threshold", 0, INT64_MAX, &rt->persistence_threshold, err);
    if (rt->kind != DT_RUNTIME_DTRUN) rt->offload_ratio = 1.0, rt->hpz_partition = 1;   /* absent: DeepSpeed's */
    if (dt_jobj_has(&r, "offload_ratio")) dt_jobj_num(&r, "offload_ratio", DT_JNUM_UNIT, &rt->offload_ratio, err);
    if (dt_jobj_has(&r, "hpz_partition_size"))
        dt_jobj_int(&r, "hpz_partition_size", 1, MAX_RANKS, &rt->hpz_partition, err);
    if (dt_jobj_has(&r, "quantized_weights")) dt_jobj_bool(&r, "quantized_weights", &rt->quantized_weights, err);
    if (dt_jobj_has(&r, "quantized_gradients"))
        dt_jobj_bool(&r, "quantized_gradients", &rt->quantized_gradients, err);
    if (dt_jobj_has(&r, "reduce_scatter")) {
        int rs = 1;
        if (!dt_jobj_bool(&r, "reduce_scatter", &rs, err)) rt->grads_allreduce = !rs;
    }
    if (dt_jobj_has(&r, "communication_data_type")) {
        static const char *const k_dtypes[] = {"fp32", "bf16", "fp16"};
        if (!dt_jobj_enum(&r, "communication_data_type", k_dtypes, N_OF(k_dtypes), &v, err))
            rt->comm_dtype = (dt_dtype)v, rt->comm_dtype_set = 1;
    }
    if (!r.failed && rt->kind == DT_RUNTIME_DTRUN)
        r.failed = dt_errorf(err, DT_EINVAL,
                             "$.runtime.kind: \"dtrun\" plans carry no runtime section (delete it, or name "
                             "deepspeed or fsdp)");
    if (dt_jobj_close(&r, err)) root->failed = r.failed;
}

static void read_training(dt_jobj *root, dt_plan *p, dt_error *err) {
    dt_jobj r;
    int v = 0;
    if (!dt_jobj_open(&r, root, "activations", err)) {
        dt_jobj_int(&r, "ckpt_layers", 0, INT64_MAX, &p->activations.ckpt_layers, err);
        if (!dt_jobj_enum(&r, "attention", k_attention_names, N_OF(k_attention_names), &v, err))
            p->activations.attention = (dt_attention)v;
        if (!r.failed && dt_jobj_has(&r, "selective_recompute"))   /* optional: written only when true */
            dt_jobj_bool(&r, "selective_recompute", &p->activations.selective, err);
        if (dt_jobj_close(&r, err)) root->failed = r.failed;
    }
    if (root->failed) return;
    read_runtime(root, p, err);
    if (!root->failed) dt_layout_read(root, p, err);
    if (root->failed) return;
    dt_optimizer *o = &p->optimizer;
    if (!dt_jobj_open(&r, root, "optimizer", err)) {
        dt_jobj_num(&r, "lr", DT_JNUM_POS, &o->lr, err);
        dt_jobj_num(&r, "beta1", DT_JNUM_UNIT_OPEN, &o->beta1, err);
        dt_jobj_num(&r, "beta2", DT_JNUM_UNIT_OPEN, &o->beta2, err);
        dt_jobj_num(&r, "eps", DT_JNUM_POS, &o->eps, err);
        dt_jobj_num(&r, "weight_decay", DT_JNUM_NONNEG, &o->weight_decay, err);
        dt_jobj_num(&r, "grad_clip", DT_JNUM_NONNEG, &o->grad_clip, err);
        if (dt_jobj_close(&r, err)) root->failed = r.failed;
    }
    if (root->failed) return;
    dt_schedule *s = &p->schedule;
    if (!dt_jobj_open(&r, root, "schedule", err)) {
        if (!dt_jobj_enum(&r, "kind", k_sched_names, N_OF(k_sched_names), &v, err))
            s->kind = (dt_sched_kind)v;
        dt_jobj_int(&r, "total_steps", 1, INT64_MAX, &s->total_steps, err);
        dt_jobj_int(&r, "warmup_steps", 0, INT64_MAX, &s->warmup_steps, err);
        dt_jobj_enum(&r, "warmup_type", k_warmup_names, N_OF(k_warmup_names), &s->warmup_linear, err);
        dt_jobj_num(&r, "warmup_min_lr", DT_JNUM_NONNEG, &s->warmup_min_lr, err);
        dt_jobj_num(&r, "cos_min_ratio", DT_JNUM_UNIT, &s->cos_min_ratio, err);
        if (dt_jobj_close(&r, err)) root->failed = r.failed;
    }
}

static void read_io(dt_jobj *root, dt_plan *p, dt_error *err) {
    dt_jobj r;
    int v = 0;
    dt_data *d = &p->data;
    if (!dt_jobj_open(&r, root, "data", err)) {
        int64_t seed = 0;
        /* absent or "": the plan names no training data (dtrun then asks for --data) */
        if (dt_jobj_has(&r, "train")) dt_jobj_str(&r, "train", 1, d->train, sizeof d->train, err);
        dt_jobj_str(&r, "valid", 1, d->valid, sizeof d->valid, err);
        if (!dt_jobj_enum(&r, "format", k_format_names, N_OF(k_format_names), &v, err))
            snprintf(d->format, sizeof d->format, "%s", k_format_names[v]);
        if (!dt_jobj_enum(&r, "tokenizer", k_tokenizer_names, N_OF(k_tokenizer_names), &v, err))
            snprintf(d->tokenizer, sizeof d->tokenizer, "%s", k_tokenizer_names[v]);
        dt_jobj_num(&r, "valid_fraction", DT_JNUM_UNIT_OPEN, &d->valid_fraction, err);
        dt_jobj_int(&r, "eval_interval", 0, INT64_MAX, &d->eval_interval, err);
        dt_jobj_int(&r, "eval_batches", 0, INT64_MAX, &d->eval_batches, err);
        if (!dt_jobj_int(&r, "seed", 0, DT_JSON_MAX_EXACT_INT, &seed, err)) d->seed = (uint64_t)seed;
        if (!r.failed && dt_jobj_has(&r, "tokenizer_fingerprint")) {   /* optional (dtplan solve --data) */
            dt_jobj_str(&r, "tokenizer_fingerprint", 0, d->tokenizer_fingerprint, sizeof d->tokenizer_fingerprint,
                        err);
            dt_jobj_str(&r, "tokenizer_path", 1, d->tokenizer_path, sizeof d->tokenizer_path, err);
        }
        if (!r.failed && dt_jobj_has(&r, "loss_mask")) dt_jobj_bool(&r, "loss_mask", &d->loss_mask, err);
        if (dt_jobj_close(&r, err)) root->failed = r.failed;
    }
    if (root->failed) return;
    dt_output *o = &p->output;
    if (!dt_jobj_open(&r, root, "output", err)) {
        dt_jobj_str(&r, "dir", 0, o->dir, sizeof o->dir, err);
        dt_jobj_int(&r, "save_interval", 0, INT64_MAX, &o->save_interval, err);
        dt_jobj_int(&r, "keep_last", 1, INT64_MAX, &o->keep_last, err);
        dt_jobj_str(&r, "init", 1, o->init, sizeof o->init, err);
        if (dt_jobj_close(&r, err)) root->failed = r.failed;
    }
}

/* The prediction section is optional; with "valid": false its sub-objects may be
 * left out (they read as zero), with "valid": true all of it is required. */
static void read_prediction(dt_jobj *root, dt_prediction *pr, dt_error *err) {
    memset(pr, 0, sizeof *pr);
    if (!dt_jobj_has(root, "prediction")) return;
    dt_jobj r, s;
    if (dt_jobj_open(&r, root, "prediction", err)) return;
    dt_jobj_bool(&r, "valid", &pr->valid, err);
    int need = pr->valid;
    if (!r.failed && (need || dt_jobj_has(&r, "memory")) && !dt_jobj_open(&s, &r, "memory", err)) {
        dt_mem_breakdown *m = &pr->memory;
        const char *keys[] = {"params", "grads", "optimizer", "activations", "buffers", "reserve",
                              "total", "host_params", "host_optimizer", "host_buffers",
                              "host_total", "nvme"};
        int64_t *vals[] = {&m->params, &m->grads, &m->optimizer, &m->activations, &m->buffers,
                           &m->reserve, &m->total, &m->host_params, &m->host_optimizer,
                           &m->host_buffers, &m->host_total, &m->nvme};
        for (int i = 0; i < N_OF(keys); i++) dt_jobj_int(&s, keys[i], 0, INT64_MAX, vals[i], err);
        if (dt_jobj_close(&s, err)) r.failed = s.failed;
    }
    if (!r.failed && (need || dt_jobj_has(&r, "time")) && !dt_jobj_open(&s, &r, "time", err)) {
        dt_time_breakdown *t = &pr->time;
        const char *keys[] = {"compute_s", "recompute_s", "comm_s", "comm_exposed_s", "offload_s",
                              "optimizer_s", "step_s", "tokens_per_s", "mfu"};
        double *vals[] = {&t->compute_s, &t->recompute_s, &t->comm_s, &t->comm_exposed_s,
                          &t->offload_s, &t->optimizer_s, &t->step_s, &t->tokens_per_s, &t->mfu};
        for (int i = 0; i < N_OF(keys); i++) dt_jobj_num(&s, keys[i], DT_JNUM_NONNEG, vals[i], err);
        if (dt_jobj_close(&s, err)) r.failed = s.failed;
    }
    if (!r.failed && (need || dt_jobj_has(&r, "comm_bytes")) &&
        !dt_jobj_open(&s, &r, "comm_bytes", err)) {
        for (int c = 0; c < DT_COLL_COUNT; c++)
            dt_jobj_int(&s, k_collective_names[c], 0, INT64_MAX, &pr->comm_bytes[c], err);
        if (dt_jobj_close(&s, err)) r.failed = s.failed;
    }
    if (dt_jobj_close(&r, err)) root->failed = r.failed;
}

/* Files users give where a plan is expected: a DeepSpeed config or a Hugging Face
 * config.json. Named, with the command that makes a plan from them, instead of
 * "$.format: missing required key". */
static int not_a_plan(const cJSON *tree, const char *what, dt_error *err) {
    if (!cJSON_IsObject(tree) || cJSON_GetObjectItemCaseSensitive(tree, "format")) return DT_OK;
    static const char *const ds_keys[] = {"zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu",
                                          "gradient_accumulation_steps", "bf16", "fp16"};
    const char *file = strcmp(what, "plan") ? what : "FILE";
    for (size_t i = 0; i < sizeof ds_keys / sizeof ds_keys[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(tree, ds_keys[i]))
            return dt_errorf(err, DT_EINVAL,
                             "this is a DeepSpeed config (it has \"%s\"), not a plan; see what it needs with: "
                             "dtplan estimate --deepspeed %s --model NAME; make a plan with: dtplan solve "
                             "--model NAME --mem 80G -o plan.json",
                             ds_keys[i], file);
    if (cJSON_GetObjectItemCaseSensitive(tree, "model_type"))
        return dt_errorf(err, DT_EINVAL,
                         "this is a Hugging Face model config.json (it has \"model_type\"), not a plan; make a "
                         "plan with: dtplan solve --model %s --mem 80G -o plan.json",
                         file);
    return DT_OK;
}

static int plan_parse_named(const char *json, const char *what, dt_plan *out, dt_error *err) {
    cJSON *tree = NULL;
    int rc = dt_json_parse(json, what, &tree, err);
    if (rc) return rc;
    if ((rc = not_a_plan(tree, what, err))) {
        cJSON_Delete(tree);
        return rc;
    }
    dt_plan p;
    memset(&p, 0, sizeof p);
    dt_jobj root;
    char format[64] = "";
    if (!dt_jobj_init(&root, tree, "$", err) &&
        !dt_jobj_str(&root, "format", 0, format, sizeof format, err) &&
        strcmp(format, DT_PLAN_FORMAT) != 0) {
        root.failed = dt_errorf(err, DT_EINVAL,
                                "$.format: expected \"%s\", got \"%s\" (not a plan this version "
                                "reads; regenerate it with dtplan solve)", DT_PLAN_FORMAT, format);
    }
    if (!root.failed) read_model(&root, &p.model, &p.vlm, err);
    if (!root.failed) read_cluster(&root, &p.cluster, err);
    if (!root.failed) read_parallel(&root, &p.parallel, err);
    if (!root.failed) read_batch(&root, &p.batch, err);
    int64_t declared_bytes[3] = {0, 0, 0};
    if (!root.failed) read_precision(&root, &p.precision, declared_bytes, err);
    if (!root.failed) read_training(&root, &p, err);
    if (!root.failed) read_io(&root, &p, err);
    if (!root.failed) read_prediction(&root, &p.prediction, err);
    if (!root.failed) dt_finetune_read_json(&root, &p.finetune, err);
    if (!root.failed) dt_objective_read_json(&root, &p.objective, err);
    if (!root.failed) dt_jobj_close(&root, err);
    cJSON_Delete(tree);
    if (root.failed) return root.failed;
    rc = dt_plan_validate(&p, err);
    if (rc) return rc;
    const dt_precision *pr = &p.precision;
    const int64_t implied[3] = {dt_precision_param_bytes(pr), dt_precision_grad_bytes(pr),
                                dt_precision_optimizer_bytes(pr)};
    char from[3][96];   /* the keys each byte count follows from */
    snprintf(from[0], sizeof from[0], "$.precision.param = \"%s\"", dt_dtype_name(pr->param));
    snprintf(from[1], sizeof from[1], "$.precision.grad = \"%s\"", dt_dtype_name(pr->grad));
    if (pr->has_master)
        snprintf(from[2], sizeof from[2], "$.precision.master = \"%s\" + 2 x $.precision.moment = \"%s\"",
                 dt_dtype_name(pr->master), dt_dtype_name(pr->moment));
    else
        snprintf(from[2], sizeof from[2], "$.precision.has_master = false + 2 x $.precision.moment = \"%s\"",
                 dt_dtype_name(pr->moment));
    for (int i = 0; i < 3; i++)
        if (declared_bytes[i] && declared_bytes[i] != implied[i])
            return dt_errorf(err, DT_EINVAL,
                             "$.precision.bytes_per_param.%s = %" PRId64 " contradicts %s (%" PRId64
                             " bytes per parameter, preset %s): fix one, or delete bytes_per_param",
                             k_bytes_keys[i], declared_bytes[i], from[i], implied[i],
                             dt_precision_preset_name(pr->preset));
    memcpy(out, &p, sizeof p); /* padding included, so equal plans compare equal */
    return DT_OK;
}

int dt_plan_parse(const char *json, dt_plan *out, dt_error *err) {
    return plan_parse_named(json, "plan", out, err);
}

int dt_plan_load(const char *path, dt_plan *out, dt_error *err) {
    char *text = NULL;
    int rc = dt_json_read_file(path, &text, NULL, err);
    if (rc) return rc;
    rc = plan_parse_named(text, path, out, err);
    free(text);
    if (rc && err && strncmp(err->msg, path, strlen(path)) != 0) dt_error_prefix(err, "%s", path);
    return rc;
}
