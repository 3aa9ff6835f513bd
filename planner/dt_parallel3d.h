/* dt_parallel3d.h — memory and time of plans with a layout (tensor, sequence, context and
 * pipeline parallelism next to DP x ZeRO; dt_layout.h). Formulas and sources:
 * docs/parallelism.md. Bytes per rank unless a name says otherwise; seconds for time. */
#ifndef DT_PARALLEL3D_H
#define DT_PARALLEL3D_H

#include <stddef.h>
#include <stdint.h>

#include "dt_plan.h"
#include "dt_solve.h"

/* ---- activations of one transformer layer, Korthikanti et al. 2022 ----
 * What one micro-batch keeps for one layer's backward on one rank, bytes, built tensor by
 * tensor from §4.1 (attention 11sbh + 5as^2b, MLP 19sbh, two LayerNorm inputs 4sbh at F = 4h,
 * 16-bit activations, 1-byte dropout masks), generalised to the model's shape (GQA's K/V
 * width, SwiGLU's three F-wide tensors, no dropout masks when dropout is off, FlashAttention
 * keeping no s x s tensor). seq is the tokens the rank holds (s / cp). */
typedef struct dt_p3_layer_in {
    int64_t seq, micro, hidden, heads, kv_heads, head_dim, ffn;
    int swiglu;          /* three F-wide saved tensors (gate|up and the product) instead of GeLU's two */
    int dropout;         /* attention-probability, attention-output and MLP dropout masks kept */
    int materialized;    /* the a x s x s scores are kept (no flash attention) */
    int64_t act_bytes;   /* bytes per activation element (2 in the paper) */
    int64_t tp;          /* tensor-parallel size t */
    int sp;              /* sequence parallelism: the replicated 10sbh split over t */
    int selective;       /* selective recompute: the attention core's s x s tensors dropped */
    int full;            /* full recompute: the layer input only */
} dt_p3_layer_in;
int64_t dt_p3_layer_act_bytes(const dt_p3_layer_in *in);
/* The same inputs from a plan (its model, runtime, precision, batch, layout). */
void dt_p3_layer_in_of(const dt_plan *p, int full, dt_p3_layer_in *out);

/* ---- memory of one pipeline stage ---- */
typedef struct dt_p3_stage_mem {
    int64_t layers;          /* blocks on the stage (all chunks) */
    int64_t params_elems;    /* parameters the rank holds before ZeRO (its TP shard of its stage) */
    double in_flight;        /* micro-batches' activations kept (layer-equivalents / layers) */
    dt_mem_breakdown mem;    /* the rank's bytes */
} dt_p3_stage_mem;
/* Stage s (0 .. pp-1) of a layout plan; n_params as dt_memory_estimate_n. */
int dt_p3_stage_memory(const dt_plan *p, int64_t n_params, int64_t s, dt_p3_stage_mem *out, dt_error *err);
/* The binding stage (the largest device total; the first on ties) and its breakdown. */
int dt_p3_memory(const dt_plan *p, int64_t n_params, int64_t *stage, dt_mem_breakdown *out, dt_error *err);

/* ---- time ---- */
typedef struct dt_p3_time {
    double stage_fwd_s, stage_bwd_s;  /* one micro-batch through the slowest stage (compute) */
    double tp_comm_s;                 /* its TP collectives per micro-batch (exposed) */
    double cp_comm_s, cp_exposed_s;   /* its CP ring exchanges per micro-batch, the part not hidden */
    double p2p_s;                     /* one activation send between stages */
    double bubble_s;                  /* (p - 1) / v micro-batch slots idle */
    double dp_comm_s, dp_exposed_s;   /* DP / ZeRO collectives per step */
    int tp_inter, cp_inter, dp_inter, pp_inter;   /* 1: the group crosses nodes */
} dt_p3_time;
/* The time terms of a layout plan (affine in the checkpointed layers K) and the parts. */
int dt_p3_time_terms(const dt_plan *p, dt_time_terms *t, dt_p3_time *parts, dt_error *err);
/* Bytes per rank per step by collective (dt_collective convention), TP + CP + DP. */
int dt_p3_comm_bytes(const dt_plan *p, int64_t out[DT_COLL_COUNT], dt_error *err);

/* ---- one step's pipeline schedule, stage by stage ----
 * Megatron-LM's order of forward (F) and backward (B) passes per pipeline rank
 * (schedules.py: 1F1B's p - s - 1 warm-up forwards; interleaved, 2(p - s - 1) + (v - 1) p
 * warm-up chunk forwards, then one forward and one backward alternately, then the cool-down
 * backwards), each pass waiting for its neighbour's and one p2p send; durations are the time
 * model's per stage (dt_p3_time_terms). One event per pass per chunk per micro-batch. */
typedef struct dt_p3_pass {
    int stage, chunk, micro, backward;
    double t0_s, t1_s;
} dt_p3_pass;
typedef struct dt_p3_pipe {
    int n_pass;
    dt_p3_pass *pass;      /* by stage, then in the stage's order (free with dt_p3_pipe_free) */
    double step_s;         /* the last pass's end: the compute part of the step */
    double busy_s[2];      /* stage 0's busy time, the busiest stage's */
    double bubble_frac;    /* stage 0's idle share of step_s */
} dt_p3_pipe;
/* Fails (DT_EINVAL) on a plan without pipeline parallelism or beyond 2^20 passes. */
int dt_p3_pipeline(const dt_plan *p, dt_p3_pipe *out, dt_error *err);
void dt_p3_pipe_free(dt_p3_pipe *pp);

/* ---- the solver's layouts ----
 * The layouts dtplan solve weighs for base (its model, cluster, seq_len, global batch) when
 * planned for runtime kind: out[0] is no layout (DP x ZeRO); then every tp dividing the GPUs
 * of a node and the heads and KV heads (SP on), cp (fsdp only) with tp x cp inside a node and
 * dividing the sequence, pp dividing the layers, v in {1, 2, 4} dividing the layers per stage
 * (pp >= 3), tp x cp x pp dividing the world and the global batch a multiple of dp. Returns the
 * count (at most max). Batch-dependent rules (interleaving's micro-batch count, DeepSpeed's
 * ZeRO limit with pipelines) are dt_plan_validate's, per candidate. */
/* Runtime dtrun (CPU device only): tp = 2 .. ranks per node without SP, CP or PP, where
 * dt_p3_dtrun_tp_refusal accepts it. */
#define DT_P3_MAX_LAYOUTS 512
/* Why dtrun's engine cannot run base at tensor-parallel degree tp (engine/model/lm_tp.c
 * dt_lm_check_tp: tp divides the heads, KV heads, ffn and vocabulary; inside a node; the
 * global batch a multiple of dp): 0 when it can, else 1 with one line in why (n bytes; why
 * may be NULL). */
int dt_p3_dtrun_tp_refusal(const dt_plan *base, int64_t tp, char *why, size_t n);
int dt_p3_layout_candidates(const dt_plan *base, dt_runtime_kind kind, dt_layout *out, int max);

/* One line for people: "TP 8 (sequence parallel) x CP 1 x PP 4 (1f1b, 20 layers per stage) x DP 2
 * = 64 ranks; TP inside a node, PP across nodes" (no trailing newline); "" without a layout. */
void dt_p3_describe(const dt_plan *p, char *buf, size_t n);

#endif
