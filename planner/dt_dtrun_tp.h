/* dt_dtrun_tp.h — dtrun's own terms for a tensor-parallel plan on CPU ranks (runtime dtrun,
 * layout tp > 1, no SP / CP / PP: docs/parallelism.md "In dtrun"). The engine runs such a
 * plan as the model's TP shard (engine/model/lm_tp.c lm_tp_configure: heads, KV heads, ffn
 * and vocabulary divided by tp, head_dim and hidden whole) with ZeRO over the DP group, so
 * its memory is the dtrun model of that shard on dp ranks plus the TP group's own buffers.
 * Bytes per rank. */
#ifndef DT_DTRUN_TP_H
#define DT_DTRUN_TP_H

#include <stdint.h>

#include "dt_plan.h"

/* 1 when p is such a plan (runtime dtrun, layout tp > 1, cp 1, pp 1, no SP, CPU device). */
int dt_dtrun_tp_active(const dt_plan *p);
/* The rank's shard as a plan without a layout: the model's TP shard (the shape dt_lm builds
 * on one TP rank), world_size = dp on one node of dp ranks. p must be dt_dtrun_tp_active. */
void dt_dtrun_tp_shard_plan(const dt_plan *p, dt_plan *out);
/* The TP group's buffers the engine allocates besides the shard's (lm_tp.c lm_tp_alloc):
 * per token a byte mask, an int32 local target, 2 fp32 reductions and tp gathered fp32 row
 * maxima; 2 fp32 copies of a block's partial-gradient tensors (Qwen3's q/k norms). */
int64_t dt_dtrun_tp_buffers(const dt_plan *p);
/* Bytes of one TP all-reduce of the residual stream [B·T, hidden] in fp32 (the engine's
 * Megatron f / g, lm_tp.c lm_tp_allreduce). */
int64_t dt_dtrun_tp_allreduce_bytes(const dt_plan *p);

#endif
