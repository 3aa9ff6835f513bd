/* dt_timeterms.h — the time model's terms of a plan without a layout (DP x ZeRO): one
 * micro-step's compute (fine-tuning's methods included, planner/finetune.c), the
 * collectives, offload and the optimizer step, as the affine terms in the checkpointed
 * blocks K that dt_time_terms_eval turns into a step (dt_solve.h). planner/parallel3d.c
 * prices a layout's stages with these; dt_timemodel.h's estimate dispatches to both.
 * Formulas and sources: docs/time-model.md. Seconds; bytes. */
#ifndef DT_TIMETERMS_H
#define DT_TIMETERMS_H

#include <stdint.h>

#include "dt_gemmtime.h"
#include "dt_plan.h"
#include "dt_solve.h"

/* The plan's settings the time model needs (world = nodes x GPUs, positive batch, a ZeRO
 * stage 0..3, the precision's arithmetic and every bandwidth on the hardware); DT_EINVAL
 * naming the first that is not. */
int dt_time_check(const dt_plan *p, dt_error *err);
/* The bus bandwidth (bytes/s, nccl-tests' busbw) collective c runs at in this plan: the
 * inter-node link's across nodes, else the profile's intra-node figure for c. */
double dt_time_busbw(const dt_plan *p, dt_collective c);
/* Compute time of one micro-step on one rank, seconds: the forward, the backward,
 * one block's forward, and what recomputing a checkpointed block costs (its
 * forward less the MLP down projection and the second residual add: the engine
 * stops there, engine/model/lm.c). GEMM FLOPs at achievable_flops, attention FLOPs
 * at attention_flops, a fixed op_overhead_s per engine op, element-wise bytes at
 * elementwise_bw, and on a CPU device the node's cores shared by its
 * gpus_per_node ranks (docs/time-model.md). Under runtimes deepspeed / fsdp a
 * checkpointed block is recomputed whole (torch.utils.checkpoint reruns its forward). */
typedef struct dt_time_compute {
    double fwd_s, bwd_s, block_fwd_s, block_recompute_s;
    double attn_core_s;   /* one block's attention core (QK^T, softmax, PV): what selective
                           * recompute repeats (runtimes deepspeed / fsdp) */
} dt_time_compute;
int dt_time_compute_micro(const dt_plan *p, dt_time_compute *out, dt_error *err);
/* DeepSpeed ZeRO-3 (runtime deepspeed, stage 3): the host-side cost of one module fetch, s
 * (runtime.fetch_overhead_s when > 0, else the cited DT_DS_FETCH_HOST_S; docs/time-model.md
 * "ZeRO-3 under DeepSpeed"), and the modules fetched per pass in one block and outside the
 * blocks (embeddings + lm_head). Returns 0 (and 0 counts) for every other plan. */
double dt_time_ds_fetch_host_s(const dt_plan *p, double *block_fetches, double *outer_fetches);
/* What crosses the network as DeepSpeed's config has it (runtime deepspeed; docs/time-model.md
 * "ZeRO++ and partial offload", "The gradients' collective"): bytes per element of the forward
 * parameter all-gathers (qwZ: INT8) and of the gradient collectives (qgZ: INT4, else
 * communication_data_type's width), the gradients' collective at stages 1-2 (all-reduce when
 * reduce_scatter is off), and the ranks of the backward all-gathers' group (hpZ:
 * runtime.hpz_partition). Otherwise: the parameter and gradient widths, a reduce-scatter, the
 * world size. */
typedef struct dt_time_zeropp {
    double fwd_gather_bytes, grad_bytes;
    dt_collective grad_coll;
    int64_t bwd_gather_ranks;
} dt_time_zeropp;
void dt_time_zeropp_wire(const dt_plan *p, dt_time_zeropp *out);
/* Activation elements the engine's element-wise kernels (LayerNorm, GELU,
 * residual adds, cross-entropy, encoder) read + write per token, by pass, for
 * hidden C, ffn F and vocab V; bytes_per_elem = 4 (they work on fp32). The time
 * model prices them at elementwise_bw and dtplan calibrate divides the same
 * counts by its probe's time, so both use one definition (docs/time-model.md). */
typedef struct dt_time_ew_elems {
    double block_fwd, block_recompute, block_bwd, outer_fwd, outer_bwd;   /* elements per token */
    double bytes_per_elem;
} dt_time_ew_elems;
void dt_time_elementwise_elems(int64_t C, int64_t F, int64_t V, dt_time_ew_elems *out);
/* The terms of a plan without a layout (its layout, if any, is not looked at). */
int dt_time_terms_dp(const dt_plan *p, dt_time_terms *t, dt_error *err);
/* dt_time_comm_bytes of a plan without a layout. */
int dt_time_comm_bytes_dp(const dt_plan *p, int64_t out[DT_COLL_COUNT], dt_error *err);

#endif
