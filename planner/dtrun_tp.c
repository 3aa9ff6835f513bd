/* dtrun_tp.c — dtrun's terms for a tensor-parallel plan on CPU ranks (dt_dtrun_tp.h;
 * docs/parallelism.md "In dtrun: what the planner predicts"). */
#include "dt_dtrun_tp.h"

#include <string.h>

#include "dt_layout.h"

/* engine/model/lm_tp.c lm_tp_alloc, per token: tp_out (1-byte "target on this rank"),
 * tp_tgt (int32 local target), tp_red (2 fp32: sum of exponentials, target logit); per
 * token and TP rank: tp_max (fp32 row maxima, all-gathered); per partial element:
 * tp_saved (2 fp32). */
#define TP_MASK_BYTES 1
#define TP_TARGET_BYTES 4
#define TP_REDUCED_FP32 2
#define TP_GATHERED_FP32 1
#define TP_PARTIAL_COPIES 2
#define TP_FP32 4

int dt_dtrun_tp_active(const dt_plan *p) {
    const dt_layout l = dt_layout_of(p);
    return p->runtime.kind == DT_RUNTIME_DTRUN && p->cluster.device == DT_DEVICE_CPU && l.tp > 1 && l.cp == 1 &&
           l.pp == 1 && !l.sp;
}

void dt_dtrun_tp_shard_plan(const dt_plan *p, dt_plan *out) {
    const int64_t tp = dt_layout_of(p).tp, dp = dt_layout_dp(p);
    *out = *p;
    dt_model *m = &out->model;
    m->n_head /= tp;
    m->n_kv_head /= tp;
    m->ffn /= tp;
    m->vocab /= tp;
    m->requested_params = 0;   /* the shard's own counts size its states */
    memset(&out->layout, 0, sizeof out->layout);
    out->parallel.world_size = dp;
    out->cluster.nodes = 1;
    out->cluster.gpus_per_node = dp;
}

int64_t dt_dtrun_tp_buffers(const dt_plan *p) {
    const int64_t tp = dt_layout_of(p).tp, N = p->batch.micro_batch * p->batch.seq_len;
    /* Qwen3's q_norm and k_norm weights see only the rank's heads: their gradients are
     * partial (summed over the group), [head_dim] each */
    const int64_t partial = p->model.qk_norm ? 2 * p->model.head_dim : 0;
    return N * (TP_MASK_BYTES + TP_TARGET_BYTES + TP_REDUCED_FP32 * TP_FP32 + TP_GATHERED_FP32 * TP_FP32 * tp) +
           TP_PARTIAL_COPIES * TP_FP32 * partial;
}

int64_t dt_dtrun_tp_allreduce_bytes(const dt_plan *p) {
    return TP_FP32 * p->batch.micro_batch * p->batch.seq_len * p->model.hidden;
}
