/* dt_plan.h — the plan: the contract between dtplan (which writes it) and dtrun
 * (which executes it unchanged). JSON format "dtplan.plan/1": docs/plan-format.md.
 *
 * Every size is in the unit its name says: *_bytes in bytes, *_elems in elements,
 * *_s in seconds, *_bw in bytes/s. A plan read from disk is checked completely:
 * unknown keys, missing keys and wrong types are errors naming the JSON path
 * ("$.batch.micro_batch: expected a positive integer"). */
#ifndef DT_PLAN_H
#define DT_PLAN_H

#include <stdint.h>

#include "dt_error.h"
#include "dt_hardware.h"
#include "dt_arch.h"
#include "dt_precision.h"
#include "dt_finetune.h"
#include "dt_objective.h"
#include "dt_vlm.h"

#define DT_PLAN_FORMAT "dtplan.plan/1"
#define DT_PATH_MAX 512
/* a tokenizer fingerprint (SHA-256, dt_tok_fingerprint) in hex digits */
#define DT_PLAN_FINGERPRINT_HEX 64

typedef enum { DT_OFFLOAD_NONE = 0, DT_OFFLOAD_CPU = 1, DT_OFFLOAD_NVME = 2 } dt_offload;
#define DT_OFFLOAD_KINDS 3
extern const char *const dt_offload_names[DT_OFFLOAD_KINDS];   /* "none", "cpu", "nvme" (offload.c) */
typedef enum { DT_ATTN_FLASH = 0, DT_ATTN_MATERIALIZED = 1 } dt_attention;

/* Collectives, for byte counters. The byte count of one call is the size of the
 * full (unsharded) logical buffer, nccl-tests' "size" convention:
 *   all-reduce: count * elem;  reduce-scatter: recvcount * world * elem;
 *   all-gather: sendcount * world * elem;  broadcast: count * elem. */
typedef enum {
    DT_COLL_ALLREDUCE = 0,
    DT_COLL_REDUCE_SCATTER = 1,
    DT_COLL_ALLGATHER = 2,
    DT_COLL_BROADCAST = 3,
    DT_COLL_COUNT = 4
} dt_collective;

typedef struct dt_cluster {
    int64_t nodes;
    int64_t gpus_per_node;     /* ranks per node */
    dt_device device;
    dt_hardware hw;            /* the profile numbers the prediction used */
} dt_cluster;

typedef struct dt_parallel {
    int64_t world_size;        /* == nodes * gpus_per_node (data parallel only) */
    int zero_stage;            /* 0 (DDP) .. 3 */
    dt_offload offload_optimizer;  /* stages 1..3 */
    dt_offload offload_param;      /* stage 3 only */
    char nvme_path[DT_PATH_MAX];   /* directory for nvme offload files ("" if unused) */
    int64_t reduce_bucket_elems;   /* DeepSpeed reduce_bucket_size (code default 5e8) */
    int64_t allgather_bucket_elems;/* allgather_bucket_size (5e8) */
    int64_t prefetch_bucket_elems; /* stage3_prefetch_bucket_size (code default 5e7) */
    int64_t max_live_params;       /* stage3_max_live_parameters (1e9) */
    int64_t sub_group_elems;       /* sub_group_size (1e9): elements per optimizer tile; with
                                    * NVMe optimizer offload, the size of each host swap buffer */
    int overlap_comm;              /* overlap reduction / gathers with compute */
} dt_parallel;

typedef struct dt_batch {
    int64_t micro_batch;       /* sequences per rank per micro-step */
    int64_t grad_accum;        /* micro-steps per optimizer step */
    int64_t global_batch;      /* == micro_batch * grad_accum * world_size */
    int64_t seq_len;           /* tokens per sequence */
} dt_batch;

typedef struct dt_activations {
    int64_t ckpt_layers;       /* 0..n_layer blocks whose activations are recomputed */
    dt_attention attention;
    int selective;             /* 1: the attention core of every other block is recomputed
                                * (Korthikanti et al. 2022 §5, "selective"); runtimes
                                * deepspeed / fsdp only. Written only when 1. */
} dt_activations;

/* ---- the runtime the prediction describes (docs/memory-model.md "Runtime profiles") ----
 * dtrun: this repository's engine, the planner's formulas as they were before profiles
 * existed (the default; its plans are exact for dtrun's CPU engine). deepspeed: Hugging
 * Face Transformers model code under DeepSpeed ZeRO. fsdp: the same model code under
 * PyTorch FSDP (fully_shard, bf16 compute with fp32 sharded params). The other fields
 * are the run's choices; for dtrun they are all zero (a zeroed struct is the dtrun profile). */
/* What runs the plan: dtrun; DeepSpeed or FSDP running Hugging Face model code; Megatron-LM
 * running its own fused GPT / Llama (docs/parallelism.md "Runtimes"). */
typedef enum { DT_RUNTIME_DTRUN = 0, DT_RUNTIME_DEEPSPEED = 1, DT_RUNTIME_FSDP = 2, DT_RUNTIME_MEGATRON = 3 } dt_runtime_kind;
/* The attention kernel the framework runs: eager (HF's matmul-softmax-matmul, keeps the
 * s x s probabilities), sdpa (torch scaled_dot_product_attention, its flash or
 * memory-efficient back-end on GPUs), flash (flash-attn 2). */
typedef enum { DT_KERNEL_FLASH = 0, DT_KERNEL_SDPA = 1, DT_KERNEL_EAGER = 2 } dt_attn_kernel;
/* What "largest layer" means for ZeRO-3's transient full-size gradient and DeepSpeed's
 * estimator: the largest module's own parameters (DeepSpeed model_to_params: for LLMs
 * the V x h embedding / lm_head), or the largest weight matrix inside a block. */
typedef enum { DT_LARGEST_MODULE = 0, DT_LARGEST_BLOCK_MATRIX = 1 } dt_largest_layer;

typedef struct dt_runtime {
    dt_runtime_kind kind;
    dt_attn_kernel attention;      /* must agree with activations.attention (eager = materialized) */
    int dropout;                   /* dropout layers active in training (HF config's p > 0) */
    int upcast_logits;             /* the loss upcasts the B x T x V logits to fp32 */
    int fused_loss;                /* the loss keeps one B x T x V buffer and writes its gradient in place
                                    * (Megatron-LM's vocab-parallel cross entropy), not three */
    int upcast_norm;               /* RMSNorm computes in fp32 (keeps an fp32 copy of its input) */
    int upcast_softmax;            /* eager attention's softmax in fp32 */
    int unfused_act;               /* the MLP activation is composed of element-wise ops that each keep a tensor */
    dt_largest_layer largest_layer;
    double fetch_overhead_s;       /* ZeRO-3: fixed cost per fetched module beyond the collective, s */
    int64_t max_reuse_distance;    /* stage3_max_reuse_distance, elements */
    int64_t persistence_threshold; /* stage3_param_persistence_threshold, elements */
    /* DeepSpeed only (1 / 0 elsewhere; docs/memory-model.md "DeepSpeed configs"): */
    double offload_ratio;          /* offload_optimizer.ratio: with stage 3 and a CPU-offloaded
                                    * optimizer, the optimizer sub-groups from index
                                    * int((1 - ratio) x count) on live on the host, the first ones
                                    * stay on the GPU (stage3.py subgroup_to_device); 1 = all on the host */
    int64_t hpz_partition;         /* zero_hpz_partition_size (ZeRO++ hpZ): a secondary partition of
                                    * the 16-bit parameters over groups of this many ranks; 1 = off */
    int quantized_weights;         /* zero_quantized_weights (ZeRO++ qwZ): int8 forward all-gathers */
    int quantized_gradients;       /* zero_quantized_gradients (ZeRO++ qgZ): int4 gradient reduce-scatter */
    int grads_allreduce;           /* zero_optimization.reduce_scatter false: stages 1-2 all-reduce the
                                    * gradients (stage_1_and_2.py average_tensor) */
    int comm_dtype_set;            /* communication_data_type given: the gradients cross the network */
    dt_dtype comm_dtype;           /* in this dtype (DeepSpeed casts each bucket before reducing) */
} dt_runtime;

/* ---- the layout beyond data parallelism (docs/parallelism.md) ----
 * Tensor (tp, with or without sequence parallelism), context (cp) and pipeline (pp, with v
 * virtual stages per rank) parallelism; the data-parallel size is what is left:
 * dp = world_size / (tp x cp x pp), and ZeRO shards over it. Ranks are ordered TP innermost,
 * then CP, DP, PP (Megatron-LM's default order tp-cp-ep-dp-pp, parallel_state.py). An all-zero
 * struct means tp = cp = pp = v = 1 (no layout): such plans carry no "layout" section. */
typedef enum { DT_PP_1F1B = 0, DT_PP_INTERLEAVED = 1 } dt_pp_schedule;
typedef struct dt_layout {
    int64_t tp, cp, pp;        /* degrees, 1 = off (0 read as 1) */
    int64_t vpp;               /* model chunks per pipeline rank (interleaved schedule), 1 = off */
    int sp;                    /* sequence parallelism over the TP group (Korthikanti et al. 2022) */
    dt_pp_schedule schedule;   /* 1F1B, or interleaved 1F1B when vpp > 1 */
    int64_t first_stage_layers, last_stage_layers;   /* uneven split; 0 = L / pp on every stage */
} dt_layout;

typedef struct dt_optimizer {
    double lr;                 /* peak learning rate */
    double beta1, beta2, eps;
    double weight_decay;
    double grad_clip;          /* global-norm clip; 0 disables (DeepSpeed semantics) */
} dt_optimizer;

typedef enum {
    DT_SCHED_CONSTANT = 0,
    DT_SCHED_WARMUP_LR = 1,          /* DeepSpeed WarmupLR: warmup then constant */
    DT_SCHED_WARMUP_DECAY_LR = 2,    /* WarmupDecayLR: warmup then linear decay to 0 */
    DT_SCHED_WARMUP_COSINE_LR = 3    /* WarmupCosineLR: warmup then cosine to cos_min_ratio */
} dt_sched_kind;

typedef struct dt_schedule {
    dt_sched_kind kind;
    int64_t total_steps;       /* optimizer steps the run is planned for */
    int64_t warmup_steps;
    int warmup_linear;         /* 1 linear warmup, 0 DeepSpeed's default log warmup */
    double warmup_min_lr;      /* WarmupLR/WarmupDecayLR start value; WarmupCosineLR: ratio */
    double cos_min_ratio;      /* WarmupCosineLR floor as a fraction of lr */
} dt_schedule;

typedef struct dt_data {
    char train[DT_PATH_MAX];   /* directory of text files or llm.c shards, or one file;
                                * "" = none named (dtrun needs --data) */
    char valid[DT_PATH_MAX];   /* "" = split off valid_fraction of train */
    char format[16];           /* "text" (byte tokenizer) | "llmc" (uint16 token shards) */
    char tokenizer[16];        /* "byte" */
    double valid_fraction;
    int64_t eval_interval;     /* steps between validation passes, 0 = never */
    int64_t eval_batches;      /* micro-batches per validation pass */
    uint64_t seed;
    /* dtplan solve --data of a `dtrun prepare` output (its prepare.json, docs/data.md):
     * the tokenizer the shards were prepared with, which dtrun then requires of them,
     * and whether they carry an SFT loss mask. "" / 0 when unknown (text, llm.c shards,
     * plans from before these keys). */
    char tokenizer_fingerprint[DT_PLAN_FINGERPRINT_HEX + 1];   /* SHA-256, lowercase hex */
    char tokenizer_path[DT_PATH_MAX];   /* prepare.json's tokenizer.path, for messages */
    int loss_mask;                      /* 1: masked shards (one more all-reduce per step) */
} dt_data;

typedef struct dt_output {
    char dir[DT_PATH_MAX];
    int64_t save_interval;     /* steps between checkpoints, 0 = only at the end */
    int64_t keep_last;         /* checkpoints kept, >= 1 */
    char init[DT_PATH_MAX];    /* "" = random init from seed; or .safetensors / llm.c .bin */
} dt_output;

/* The cuBLAS workspace the CUDA engine hands to cuBLAS (cublasSetWorkspace) when it binds a
 * GPU, allocated and tracked as `buffers`, so the plan counts it instead of leaving it to
 * the reserve: 32 MiB, the size the cuBLAS Library User Guide recommends for Hopper
 * ("cublasSetWorkspace()": 32 MiB for Hopper, 4 MiB for other architectures), used on
 * every GPU so one plan fits any of them. */
#define DT_CUDA_GEMM_WORKSPACE_BYTES ((int64_t)32 << 20)

typedef struct dt_mem_breakdown {
    /* per rank, device pool, bytes */
    int64_t params, grads, optimizer, activations, buffers, reserve, total;
    /* per node, host pool, bytes */
    int64_t host_params, host_optimizer, host_buffers, host_total;
    /* per node, NVMe, bytes */
    int64_t nvme;
} dt_mem_breakdown;

typedef struct dt_time_breakdown {
    double compute_s;          /* forward + backward over all micro-steps */
    double recompute_s;        /* checkpointed-layer forward recompute */
    double comm_s;             /* all communication time, overlapped or not */
    double comm_exposed_s;     /* the part not hidden behind compute */
    double offload_s;          /* exposed host/NVMe transfers */
    double optimizer_s;        /* optimizer step (device or CPU) */
    double step_s;             /* the predicted wall time of one optimizer step */
    double tokens_per_s;       /* global tokens per second */
    double mfu;                /* model FLOPs utilisation vs peak, 0..1 */
} dt_time_breakdown;

typedef struct dt_prediction {
    int valid;                 /* 0: no prediction stored (or stale) */
    dt_mem_breakdown memory;
    dt_time_breakdown time;
    int64_t comm_bytes[DT_COLL_COUNT]; /* per rank per optimizer step, see dt_collective */
} dt_prediction;

typedef struct dt_plan {
    dt_model model;
    dt_cluster cluster;
    dt_parallel parallel;
    dt_batch batch;
    dt_precision precision;
    dt_activations activations;
    dt_runtime runtime;
    dt_layout layout;
    dt_optimizer optimizer;
    dt_schedule schedule;
    dt_data data;
    dt_output output;
    dt_prediction prediction;
    dt_finetune finetune;      /* the method (dt_finetune.h); zero = full fine-tuning */
    dt_objective objective;    /* the objective (dt_objective.h); zero = pt, or sft for masked data */
    dt_vlm vlm;                /* a vision tower + projector before the model (dt_vlm.h); zero = text only */
} dt_plan;

/* Defaults for everything but the model: 1 node x 1 rank, cpu profile, stage 0,
 * DeepSpeed's bucket defaults, mixed-bf16, micro 1, accum 1, seq 1024, no ckpt,
 * flash attention, AdamW (lr 2e-4 betas 0.9/0.999 eps 1e-8 wd 0.01, clip 1.0:
 * docs/plan-format.md "optimizer"), WarmupLR. */
void dt_plan_defaults(dt_plan *p);

/* dt_plan_defaults' data.train is the byte-level demo text (Debian's fortunes), which only
 * the byte-level test models read (vocab 256: the byte tokenizer's ids). Called once
 * p->model is set: a model with a real vocabulary (vocab > 256) reads no demo text, so
 * data.train becomes "" (the plan names no training data until --data, a config or a
 * dtrun prepare output names it; dtrun then asks for --data). Any other data.train stays. */
void dt_plan_drop_demo_data(dt_plan *p);

/* Consistency: world == nodes * gpus_per_node, batch triple (DeepSpeed's wording
 * on mismatch), stage/offload combinations DeepSpeed allows, ckpt_layers <= L. */
int dt_plan_validate(const dt_plan *p, dt_error *err);

int dt_plan_parse(const char *json, dt_plan *out, dt_error *err);
int dt_plan_load(const char *path, dt_plan *out, dt_error *err);
/* Returns a malloc'd, pretty-printed JSON text (caller frees with free()). */
char *dt_plan_to_json(const dt_plan *p, dt_error *err);
/* Atomic: writes path.tmp, fsyncs, renames over path. */
int dt_plan_save(const char *path, const dt_plan *p, dt_error *err);

const char *dt_offload_name(dt_offload o);        /* "none" | "cpu" | "nvme" */
const char *dt_runtime_name(dt_runtime_kind k);   /* "dtrun" | "deepspeed" | "fsdp" | "megatron" */
/* Whose model code the runtime runs, for show / estimate: "Hugging Face model code",
 * "Megatron-LM's own model code", "dtrun's engine". */
const char *dt_runtime_code(dt_runtime_kind k);
/* "--runtime VALUE" text; an unknown name is one line naming it and the choices. */
int dt_runtime_parse(const char *s, dt_runtime_kind *out, dt_error *err);
const char *dt_attn_kernel_name(dt_attn_kernel k);   /* "flash" | "sdpa" | "eager" */
const char *dt_largest_layer_name(dt_largest_layer l); /* "module" | "block_matrix" */
/* The profile's defaults for the model m (docs/memory-model.md "Runtime profiles"):
 * dtrun: all zero (flash, no dropout, no upcasts); deepspeed / fsdp: Hugging Face Transformers'
 * defaults (sdpa, dropout as the family's config.json has it, fp32 logits, fp32
 * RMSNorm and eager softmax for llama), DeepSpeed's code defaults for the ZeRO-3 keys. */
void dt_runtime_defaults(dt_runtime_kind kind, const dt_model *m, dt_runtime *out);
/* Sets p->runtime to kind's defaults for p->model and p->activations.attention to the
 * kernel's storage (eager: materialized, else flash); dtrun keeps the plan's attention. */
void dt_plan_set_runtime(dt_plan *p, dt_runtime_kind kind);
/* Sets the attention by name, for p's runtime: dtrun "flash" | "materialized"; deepspeed /
 * fsdp the kernel "sdpa" | "flash" | "eager" ("materialized" = eager), with
 * activations.attention to match. what names the option in the one-line error. */
int dt_plan_set_attention(dt_plan *p, const char *name, const char *what, dt_error *err);
int dt_offload_parse(const char *s, dt_offload *out, dt_error *err);
const char *dt_collective_name(dt_collective c);  /* "allreduce", "reduce_scatter", ... */

#endif
