/* parallel3d.c — memory and time of layout plans (dt_parallel3d.h; docs/parallelism.md).
 *
 * Sources: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
 * Models" (arXiv 2205.05198) §4 and Table 2 (activations), §4.2.3 (pipeline in-flight
 * micro-batches); Narayanan et al. SC'21 (arXiv 2104.04473) §2.2 (bubble (p-1)/(v m)), §3.2
 * (TP traffic 4 collectives of b s h per layer per micro-batch), §4.1 (p2p); ZeRO (arXiv
 * 1910.02054) §7 (DP volumes); Megatron-LM megatron/core/pipeline_parallel/schedules.py
 * (warm-up micro-batches per rank) and docs context_parallel.md (K/V ring). */
#include "dt_parallel3d.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_dtrun_tp.h"
#include "dt_layout.h"
#include "dt_megatron.h"
#include "dt_model.h"
#include "dt_timeterms.h"

/* Korthikanti §4.1: dropout masks are stored as one byte per element. */
#define DT_P3_MASK_BYTES 1
/* FlashAttention keeps one fp32 log-sum-exp per query row and head (Dao et al. 2022, §3.1). */
#define DT_P3_LSE_BYTES 4
/* Receive buffers a pipeline stage keeps per micro-batch in flight: one activation, one
 * gradient (Megatron-LM schedules.py recv_forward / recv_backward). */
#define DT_P3_P2P_BUFFERS 2
/* Narayanan §3.2: per layer per micro-batch, 2 all-reduces of b s h in the forward (attention
 * and MLP output) and 2 in the backward; with SP each becomes a reduce-scatter + all-gather of
 * the same volume (Korthikanti §4.2.2). */
#define DT_P3_TP_COLL_FWD 2
#define DT_P3_TP_COLL_BWD 2
/* Megatron-LM context parallelism (context_parallel.md): K and V circulate the ring in the
 * forward (c - 1 steps); the backward circulates K, V again and dK, dV: 3 x the forward. */
#define DT_P3_CP_BWD_FACTOR 2
/* dtrun's TP on CPU ranks (engine/model/lm_tp.c): its collectives are fp32 whatever the
 * activations' dtype; besides the blocks' 2 + 2 all-reduces of [B·T, C], per micro-batch the
 * vocabulary-parallel embedding's sum (forward) and the classifier's input gradient (backward)
 * are one all-reduce of [B·T, C] each, and the cross-entropy all-gathers one fp32 row maximum
 * per token and all-reduces 2 fp32 per token (sum of exponentials, target logit). */
#define DT_P3_DTRUN_TP_FP32 4
#define DT_P3_DTRUN_TP_HEAD_ALLREDUCES 2
#define DT_P3_DTRUN_TP_LOSS_REDUCED 2
/* Backward FLOPs are twice the forward's (Narayanan Eq. 3's 3 = 1 forward + 2 backward). */
#define DT_P3_BWD_OVER_FWD 2.0

static int64_t sdiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; }
static int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

/* ------------------------------------------------------------ activations */

int64_t dt_p3_layer_act_bytes(const dt_p3_layer_in *in) {
    const int64_t s = in->seq, b = in->micro, h = in->hidden, e = in->act_bytes, t = in->tp > 0 ? in->tp : 1;
    const int64_t rep = in->sp ? t : 1;   /* the tensors TP alone leaves replicated */
    const int64_t sbh = s * b * h;
    const int64_t q = s * b * in->heads * in->head_dim, kv = s * b * in->kv_heads * in->head_dim;
    const int64_t sbf = s * b * in->ffn, scores = in->heads * s * s * b;
    if (in->full) return e * sbh / rep;   /* Table 2: the layer input only */
    int64_t rep_bytes = 0, split_bytes = 0;
    /* attention (§4.1): the LayerNorm input, the QKV input (LN output), Q, K, V, the
     * projection input, the output dropout mask */
    rep_bytes += 2 * e * sbh;
    split_bytes += e * (q + 2 * kv) + e * q;
    if (in->dropout) rep_bytes += DT_P3_MASK_BYTES * sbh;
    if (in->materialized && !in->selective) {
        split_bytes += e * scores;                                          /* softmax output */
        if (in->dropout) split_bytes += DT_P3_MASK_BYTES * scores + e * scores;   /* mask, dropout output */
    } else if (!in->materialized) {
        split_bytes += DT_P3_LSE_BYTES * s * b * in->heads;                 /* flash: log-sum-exp */
    }
    /* MLP: the LayerNorm input, the MLP input, the F-wide tensors, the dropout mask */
    rep_bytes += 2 * e * sbh;
    split_bytes += (in->swiglu ? 3 : 2) * e * sbf;
    if (in->dropout) rep_bytes += DT_P3_MASK_BYTES * sbh;
    return rep_bytes / rep + split_bytes / t;
}

void dt_p3_layer_in_of(const dt_plan *p, int full, dt_p3_layer_in *out) {
    const dt_layout l = dt_layout_of(p);
    const dt_model *m = &p->model;
    memset(out, 0, sizeof *out);
    out->seq = p->batch.seq_len / l.cp;
    out->micro = p->batch.micro_batch;
    out->hidden = m->hidden, out->heads = m->n_head, out->kv_heads = m->n_kv_head;
    out->head_dim = m->head_dim, out->ffn = m->ffn;
    out->swiglu = m->family == DT_FAMILY_LLAMA;
    out->dropout = p->runtime.dropout;
    out->materialized = p->activations.attention == DT_ATTN_MATERIALIZED;
    out->act_bytes = dt_dtype_size(p->precision.activation);
    out->tp = l.tp, out->sp = l.sp;
    out->selective = p->activations.selective;
    out->full = full;
}

/* Layer-equivalents of activations stage s keeps at the peak, per layer of the stage:
 * 1F1B rank s holds min(p - s, m) micro-batches (schedules.py: p - s - 1 warm-up forwards
 * + 1); interleaved, min(m v, 2(p - s - 1) + (v - 1) p + 1) model chunks of layers / v
 * (Korthikanti §4.2.3: stage 0 = L (1 + (p - 1)/(p v)) layers). */
static double in_flight(const dt_plan *p, int64_t s) {
    const dt_layout l = dt_layout_of(p);
    const int64_t m = p->batch.grad_accum;
    if (l.pp == 1) return 1.0;
    if (l.vpp == 1) return (double)imin(l.pp - s, m);
    const int64_t chunks = imin(m * l.vpp, 2 * (l.pp - s - 1) + (l.vpp - 1) * l.pp + 1);
    return (double)chunks / (double)l.vpp;
}

static int64_t stage_ckpt_layers(const dt_plan *p, int64_t layers) {
    const int64_t K = p->activations.ckpt_layers, L = p->model.n_layer;
    return imin(layers, sdiv(K * layers, L));
}

/* ------------------------------------------------------------ parameters */

/* Elements of stage s's parameters on one TP rank: the linears' weights split by t
 * (column- and row-parallel), the norms and biases counted replicated (the column-parallel
 * biases' (t-1)/t share is the over-count); the vocabulary-parallel embedding on stage 0
 * (gpt2's position table replicated), the final norm and the vocabulary-parallel head on
 * the last (a tied head with pp > 1 keeps its own copy of the embedding there, Megatron-LM's
 * shared embedding). */
static int64_t stage_params(const dt_plan *p, int64_t s, int64_t layers) {
    const dt_layout l = dt_layout_of(p);
    const dt_model *m = &p->model;
    const int64_t t = l.tp;
    const int64_t mat = dt_model_block_matmul_params(m), other = dt_model_block_params(m) - mat;
    const int64_t wte = m->vocab * m->hidden;
    int64_t n = layers * (sdiv(mat, t) + other);
    if (s == 0) n += sdiv(wte, t) + (dt_model_embedding_params(m) - wte);
    if (s == l.pp - 1) {
        const int64_t head = dt_model_head_params(m);   /* final norm + untied lm_head */
        const int64_t lm = m->tied_embeddings ? 0 : wte;
        n += sdiv(lm, t) + (head - lm);
        if (m->tied_embeddings && l.pp > 1) n += sdiv(wte, t);
    }
    return n;
}

/* ------------------------------------------------------------ memory */

/* ZeRO over dp on the rank's TP x PP shard (ZeRO §5); a layout has no offload
 * (dt_layout_validate), so nothing lives on the host. */
static void model_states(const dt_plan *p, int64_t psi, dt_mem_breakdown *out) {
    const dt_parallel *z = &p->parallel;
    const dt_precision *pr = &p->precision;
    const int64_t d = dt_layout_dp(p), shard = sdiv(psi, d);
    const int64_t pb = dt_precision_param_bytes(pr), gb = dt_mg_grad_bytes(p);
    const int64_t ob = dt_precision_optimizer_bytes(pr);
    const int st = z->zero_stage;
    const int64_t p_elems = st >= 3 ? shard : psi, o_elems = st >= 1 ? shard : psi;
    out->params = pb * p_elems;
    out->grads = gb * (st >= 2 ? shard : psi);
    out->optimizer = ob * o_elems;
}

/* The stage's communication buffers: pipeline receive buffers, SP's all-gathered layer
 * input (Megatron-LM's global memory buffer), ZeRO's gradient bucket (stages 1-2) or the
 * gathered block and its prefetch (stage 3). */
static int64_t stage_buffers(const dt_plan *p, int64_t psi) {
    const dt_layout l = dt_layout_of(p);
    const int64_t e = dt_dtype_size(p->precision.activation);
    const int64_t sbh = p->batch.seq_len / l.cp * p->batch.micro_batch * p->model.hidden;
    int64_t buf = 0;
    if (l.pp > 1) buf += DT_P3_P2P_BUFFERS * e * sbh / dt_mg_p2p_split(p, l.tp, l.sp);
    if (l.sp) buf += e * sbh;
    const int st = p->parallel.zero_stage;
    buf += dt_mg_bucket_bytes(p, psi);
    if (st == 3)
        buf += 2 * dt_precision_param_bytes(&p->precision) * sdiv(dt_model_block_matmul_params(&p->model), l.tp);
    return buf;
}

static int64_t stage_activations(const dt_plan *p, int64_t s, int64_t layers, double *flight) {
    const dt_layout l = dt_layout_of(p);
    dt_p3_layer_in in;
    dt_p3_layer_in_of(p, 0, &in);
    const int64_t act = dt_p3_layer_act_bytes(&in);
    in.full = 1;
    const int64_t act_ckpt = dt_p3_layer_act_bytes(&in);
    const int64_t K = stage_ckpt_layers(p, layers);
    *flight = in_flight(p, s);
    double bytes = *flight * (double)(K * act_ckpt + (layers - K) * act);
    if (K > 0) bytes += (double)act;   /* the recomputed layer's working set in the backward */
    const int64_t e = in.act_bytes, rep = l.sp ? l.tp : 1;
    const int64_t sbh = in.seq * in.micro * in.hidden, sbv = in.seq * in.micro * p->model.vocab;
    if (s == 0 && in.dropout) bytes += *flight * (double)(DT_P3_MASK_BYTES * sbh / rep);   /* embedding dropout */
    if (s == l.pp - 1) {
        /* the final norm's and the output layer's inputs; the logits (vocabulary-parallel),
         * with their fp32 copy when the loss upcasts (§4.3: 4 s b V / t) */
        bytes += (double)(2 * e * sbh / rep);
        bytes += (double)(dt_mg_logit_bytes(p, e) * sbv / l.tp);
    }
    return (int64_t)ceil(bytes);
}

int dt_p3_stage_memory(const dt_plan *p, int64_t n_params, int64_t s, dt_p3_stage_mem *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    const dt_layout l = dt_layout_of(p);
    if (s < 0 || s >= l.pp) return dt_errorf(err, DT_EINVAL, "pipeline stage %lld: not in 0..%lld",
                                              (long long)s, (long long)(l.pp - 1));
    out->layers = dt_layout_stage_layers(p, s);
    int64_t psi = stage_params(p, s, out->layers);
    const int64_t full = dt_model_params(&p->model);
    if (n_params > 0 && full > 0 && n_params != full)   /* a derived shape's requested count */
        psi = (int64_t)((double)psi * (double)n_params / (double)full);
    out->params_elems = psi;
    dt_mem_breakdown *m = &out->mem;
    model_states(p, psi, m);
    m->activations = stage_activations(p, s, out->layers, &out->in_flight);
    m->buffers = stage_buffers(p, psi);
    m->reserve = p->cluster.hw.reserve_bytes;
    m->total = m->params + m->grads + m->optimizer + m->activations + m->buffers + m->reserve;
    return DT_OK;
}

int dt_p3_memory(const dt_plan *p, int64_t n_params, int64_t *stage, dt_mem_breakdown *out, dt_error *err) {
    const dt_layout l = dt_layout_of(p);
    int64_t best = 0;
    memset(out, 0, sizeof *out);
    for (int64_t s = 0; s < l.pp; s++) {
        dt_p3_stage_mem sm;
        if (dt_p3_stage_memory(p, n_params, s, &sm, err)) return err->code;
        if (s == 0 || sm.mem.total > out->total) *out = sm.mem, best = s;
    }
    if (stage) *stage = best;
    return DT_OK;
}

/* ------------------------------------------------------------ time */

/* A ring collective of `bytes` (nccl-tests' size) over n ranks at bus bandwidth bw. */
static double coll_s(double bytes, int64_t n, double bw, double alpha, int allreduce) {
    if (n <= 1 || bw <= 0) return 0.0;
    const double steps = (double)(n - 1) * (allreduce ? 2.0 : 1.0);
    return steps * alpha + bytes * steps / (double)n / bw;
}

typedef struct {
    double bw, alpha;
} p3_link;

/* Ranks are ordered TP, CP, DP, PP from the innermost (Megatron-LM's tp-cp-ep-dp-pp): a
 * group stays inside a node when the span of consecutive ranks it covers fits one. */
static p3_link link_for(const dt_plan *p, int64_t span, int *inter) {
    const dt_hardware *hw = &p->cluster.hw;
    p3_link k;
    *inter = span > p->cluster.gpus_per_node && p->cluster.nodes > 1;
    k.bw = *inter ? hw->inter_busbw : hw->intra_busbw;
    k.alpha = *inter ? hw->inter_alpha_s : hw->intra_alpha_s;
    return k;
}

/* Compute of one micro-batch on the plan's model without a layout, at the rank's sequence
 * slice; a shadow plan so dt_time_compute_micro's GEMM and attention model prices it. */
static int shadow_compute(const dt_plan *p, dt_time_compute *cm, dt_plan *q, dt_error *err) {
    const dt_layout l = dt_layout_of(p);
    *q = *p;
    memset(&q->layout, 0, sizeof q->layout);
    q->batch.seq_len = p->batch.seq_len / l.cp;
    q->batch.global_batch = q->batch.micro_batch * q->batch.grad_accum * q->parallel.world_size;
    return dt_time_compute_micro(q, cm, err);
}

int dt_p3_time_terms(const dt_plan *p, dt_time_terms *t, dt_p3_time *parts, dt_error *err) {
    memset(t, 0, sizeof *t);
    memset(parts, 0, sizeof *parts);
    const dt_layout l = dt_layout_of(p);
    const int64_t L = p->model.n_layer, m = p->batch.grad_accum, d = dt_layout_dp(p);
    dt_plan q;
    dt_time_compute cm;
    if (shadow_compute(p, &cm, &q, err)) return err->code;
    const double blk_f = cm.block_fwd_s, blk_b = cm.bwd_s * ((double)L * cm.block_fwd_s / cm.fwd_s);
    const double head_f = cm.fwd_s - (double)L * blk_f, head_b = cm.bwd_s - blk_b;
    const double blk_b1 = blk_b / (double)L;
    /* CP: each rank's queries meet all c key slices (the shadow priced s/c x s/c) */
    const double attn_extra = cm.attn_core_s * (double)(l.cp - 1);
    const int dtrun_tp = dt_dtrun_tp_active(p);
    const int64_t e = dtrun_tp ? DT_P3_DTRUN_TP_FP32 : dt_dtype_size(p->precision.activation);
    const double sb = (double)(p->batch.seq_len / l.cp) * (double)p->batch.micro_batch, sbh = sb * (double)p->model.hidden;
    p3_link tpl = link_for(p, l.tp, &parts->tp_inter);
    p3_link cpl = link_for(p, l.tp * l.cp, &parts->cp_inter);
    p3_link dpl = link_for(p, l.tp * l.cp * d, &parts->dp_inter);
    p3_link ppl = link_for(p, l.tp * l.cp * d + 1, &parts->pp_inter);
    /* TP: each collective moves b s h activations; all-reduce, or RS + AG of the same volume */
    const double tp1 = l.sp ? 2.0 * coll_s((double)e * sbh, l.tp, tpl.bw, tpl.alpha, 0)
                            : coll_s((double)e * sbh, l.tp, tpl.bw, tpl.alpha, 1);
    /* dtrun: the embedding's and the classifier's all-reduces, the loss's two collectives */
    const double tp_head = !dtrun_tp ? 0.0
                                     : DT_P3_DTRUN_TP_HEAD_ALLREDUCES * tp1 +
                                           coll_s((double)e * sb * (double)l.tp, l.tp, tpl.bw, tpl.alpha, 0) +
                                           coll_s((double)e * sb * DT_P3_DTRUN_TP_LOSS_REDUCED, l.tp, tpl.bw, tpl.alpha, 1);
    /* CP ring: K and V slices of the rank, c - 1 steps, hidden behind the attention core */
    const double kv = 2.0 * (double)e * (double)(p->batch.seq_len / l.cp) * (double)p->batch.micro_batch *
                      (double)(p->model.n_kv_head * p->model.head_dim) / (double)l.tp;
    const double cp_fwd = l.cp > 1 ? (double)(l.cp - 1) * (cpl.alpha + kv / cpl.bw) : 0.0;
    const double cp_layer = cp_fwd * (1.0 + DT_P3_CP_BWD_FACTOR);
    const double attn_layer = (cm.attn_core_s + attn_extra) * (1.0 + DT_P3_BWD_OVER_FWD) / (double)l.tp;
    const double cp_exp_layer = cp_layer > attn_layer ? cp_layer - attn_layer : 0.0;
    /* the slowest stage's micro-batch (stage compute, TP collectives, exposed CP) */
    double slot = 0.0, slot_layers = 0.0;
    for (int64_t s = 0; s < l.pp; s++) {
        const double Ls = (double)dt_layout_stage_layers(p, s);
        double f = Ls * (blk_f + attn_extra) / (double)l.tp, b = Ls * (blk_b1 + DT_P3_BWD_OVER_FWD * attn_extra) / (double)l.tp;
        if (s == l.pp - 1) f += head_f / (double)l.tp, b += head_b / (double)l.tp;
        const double tp = Ls * (DT_P3_TP_COLL_FWD + DT_P3_TP_COLL_BWD) * tp1 + tp_head, cp = Ls * cp_exp_layer;
        if (f + b + tp + cp > slot) {
            slot = f + b + tp + cp, slot_layers = Ls;
            parts->stage_fwd_s = f, parts->stage_bwd_s = b, parts->tp_comm_s = tp;
            parts->cp_comm_s = Ls * cp_layer, parts->cp_exposed_s = cp;
        }
    }
    /* p2p: one activation (1/t of it with SP's scatter or Megatron-LM's scatter-gather) per
     * micro-batch per boundary, each way */
    parts->p2p_s = l.pp > 1 ? ppl.alpha + (double)e * sbh / (double)dt_mg_p2p_split(p, l.tp, l.sp) / ppl.bw : 0.0;
    const double slots = (double)m + (double)(l.pp - 1) / (double)l.vpp;   /* Narayanan §2.2.2 */
    parts->bubble_s = (double)(l.pp - 1) / (double)l.vpp * slot;
    const double p2p_total = 2.0 * parts->p2p_s * ((double)(m * l.vpp) + (double)(l.pp - 1));
    /* DP / ZeRO over d ranks on the stage's TP shard (ZeRO §7): reduce-scatter (all-reduce
     * at stage 0) of the gradients, all-gather of the parameters (stages 1-2 once, stage 3
     * twice per micro-batch); hidden behind the last micro-batch's backward (stages 0-2) or
     * each micro-batch's compute (stage 3) when overlap_comm */
    dt_p3_stage_mem sm;
    if (dt_p3_stage_memory(p, 0, 0, &sm, err)) return err->code;
    const double psi = (double)sm.params_elems;
    const double pb = (double)dt_precision_param_bytes(&p->precision), gb = (double)dt_mg_grad_bytes(p);
    const int st = p->parallel.zero_stage;
    double dp = 0.0, hide = 0.0;
    if (st < 3) {
        dp = coll_s(gb * psi, d, dpl.bw, dpl.alpha, st == 0) + (st >= 1 ? coll_s(pb * psi, d, dpl.bw, dpl.alpha, 0) : 0.0);
        hide = p->parallel.overlap_comm ? parts->stage_bwd_s : 0.0;
        parts->dp_exposed_s = dp > hide ? dp - hide : 0.0;
    } else {
        const double per_mb = 2.0 * coll_s(pb * psi, d, dpl.bw, dpl.alpha, 0) + coll_s(gb * psi, d, dpl.bw, dpl.alpha, 0);
        dp = (double)m * per_mb;
        hide = p->parallel.overlap_comm ? parts->stage_fwd_s + parts->stage_bwd_s : 0.0;
        parts->dp_exposed_s = (double)m * (per_mb > hide ? per_mb - hide : 0.0);
    }
    parts->dp_comm_s = dp;
    /* the optimizer step: the shadow's per-element cost times this rank's shard */
    dt_time_terms qt;
    if (dt_time_terms_dp(&q, &qt, err)) return err->code;
    const double q_shard = (double)(st >= 1 ? sdiv(dt_model_params(&p->model), q.parallel.world_size) : dt_model_params(&p->model));
    const double shard = st >= 1 ? ceil(psi / (double)d) : psi;
    t->optimizer_s = q_shard > 0 ? qt.optimizer_s * shard / q_shard : 0.0;
    /* recompute: full recompute of a checkpointed layer repeats its forward and its TP
     * collectives; selective repeats the attention core */
    const double sel = p->activations.selective ? (cm.attn_core_s + attn_extra) / (double)l.tp * slot_layers : 0.0;
    const double rec_layer = (blk_f + attn_extra) / (double)l.tp + DT_P3_TP_COLL_FWD * tp1;
    /* the step: m + (p - 1)/v slots of the slowest stage's micro-batch; the (p - 1)/v idle
     * slots (the bubble) are counted as exposed communication: the stage waits on its
     * neighbours' sends (docs/parallelism.md "Time") */
    t->compute_s = (double)m * (parts->stage_fwd_s + parts->stage_bwd_s);
    t->recompute_base_s = slots * sel;
    /* K of the L layers checkpointed: K x stage layers / L on the slowest stage */
    t->per_ckpt_s = slots * rec_layer * slot_layers / (double)L;
    t->recompute_per_layer_s = t->per_ckpt_s;
    const double idle = (slots - (double)m) * (parts->stage_fwd_s + parts->stage_bwd_s);
    t->comm_total_s = slots * (parts->tp_comm_s + parts->cp_comm_s) + p2p_total + dp + idle;
    t->comm_fixed_exposed_s = slots * (parts->tp_comm_s + parts->cp_exposed_s) + p2p_total + parts->dp_exposed_s + idle;
    t->base_s = t->compute_s + t->recompute_base_s + t->comm_fixed_exposed_s + t->optimizer_s;
    return DT_OK;
}

int dt_p3_comm_bytes(const dt_plan *p, int64_t out[DT_COLL_COUNT], dt_error *err) {
    memset(out, 0, sizeof(int64_t) * DT_COLL_COUNT);
    const dt_layout l = dt_layout_of(p);
    const int64_t m = p->batch.grad_accum, d = dt_layout_dp(p), e = dt_dtype_size(p->precision.activation);
    dt_p3_stage_mem sm;
    if (dt_p3_stage_memory(p, 0, 0, &sm, err)) return err->code;
    const int64_t sbh = p->batch.seq_len / l.cp * p->batch.micro_batch * p->model.hidden;
    const int64_t tp_bytes = l.tp > 1 ? m * sm.layers * (DT_P3_TP_COLL_FWD + DT_P3_TP_COLL_BWD) * e * sbh : 0;
    if (l.sp) out[DT_COLL_REDUCE_SCATTER] += tp_bytes, out[DT_COLL_ALLGATHER] += tp_bytes;
    else out[DT_COLL_ALLREDUCE] += tp_bytes;
    if (d > 1) {
        const int64_t psi = sm.params_elems, st = p->parallel.zero_stage;
        const int64_t pb = dt_precision_param_bytes(&p->precision), gb = dt_precision_grad_bytes(&p->precision);
        if (st == 0) out[DT_COLL_ALLREDUCE] += gb * psi;
        else if (st < 3) out[DT_COLL_REDUCE_SCATTER] += gb * psi, out[DT_COLL_ALLGATHER] += pb * psi;
        else out[DT_COLL_REDUCE_SCATTER] += m * gb * psi, out[DT_COLL_ALLGATHER] += 2 * m * pb * psi;
    }
    return DT_OK;
}

void dt_p3_describe(const dt_plan *p, char *buf, size_t n) {
    if (!n) return;
    buf[0] = '\0';
    if (!dt_layout_active(p)) return;
    const dt_layout l = dt_layout_of(p);
    char split[96];
    if (l.first_stage_layers)
        snprintf(split, sizeof split, "%lld / %lld / %lld layers on first / middle / last stages",
                 (long long)l.first_stage_layers, (long long)(l.pp > 2 ? dt_layout_stage_layers(p, 1) : 0),
                 (long long)l.last_stage_layers);
    else
        snprintf(split, sizeof split, "%lld layers per stage", (long long)dt_layout_stage_layers(p, 0));
    char pp[192] = "";
    if (l.pp > 1 && l.vpp > 1)
        snprintf(pp, sizeof pp, " (interleaved, %lld model chunks per rank, %s)", (long long)l.vpp, split);
    else if (l.pp > 1)
        snprintf(pp, sizeof pp, " (1f1b, %s)", split);
    int tp_in = 0, dp_in = 0, pp_in = 0;
    link_for(p, l.tp, &tp_in);
    link_for(p, l.tp * l.cp * dt_layout_dp(p), &dp_in);
    link_for(p, l.tp * l.cp * dt_layout_dp(p) + 1, &pp_in);
    snprintf(buf, n, "TP %lld%s x CP %lld x PP %lld%s x DP %lld = %lld ranks; TP %s a node, DP %s, PP %s",
             (long long)l.tp, l.sp ? " (sequence parallel)" : "", (long long)l.cp, (long long)l.pp, pp,
             (long long)dt_layout_dp(p), (long long)p->parallel.world_size, tp_in ? "across" : "inside",
             dp_in ? "across nodes" : "inside a node", l.pp == 1 ? "off" : pp_in ? "across nodes" : "inside a node");
}

/* Virtual stages the solver tries (Narayanan §2.2.2: v = 2 .. 4 in the paper's runs). */
static const int64_t k_solver_vpp[] = {1, 2, 4};
#define N_SOLVER_VPP ((int)(sizeof k_solver_vpp / sizeof k_solver_vpp[0]))

static int push_layout(const dt_plan *base, int64_t tp, int sp, int64_t cp, int64_t pp, int64_t v, dt_layout *out,
                       int n, int max) {
    if (n >= max) return n;
    dt_plan q = *base;
    dt_layout_set(&q, tp, sp, cp, pp, v);
    if (base->batch.global_batch % dt_layout_dp(&q)) return n;
    out[n] = q.layout;
    return n + 1;
}

int dt_p3_dtrun_tp_refusal(const dt_plan *base, int64_t tp, char *why, size_t n) {
    const dt_model *m = &base->model;
    const int64_t G = base->cluster.gpus_per_node;
    const struct {
        const char *what;
        int64_t n;
    } dims[] = {{"ranks per node", G},   {"attention heads", m->n_head}, {"KV heads", m->n_kv_head},
                {"ffn size", m->ffn},    {"vocabulary", m->vocab}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].n % tp) {
            if (why) snprintf(why, n, "tp %lld does not divide the %s (%lld)", (long long)tp, dims[i].what, (long long)dims[i].n);
            return 1;
        }
    if (base->batch.global_batch % (base->parallel.world_size / tp)) {
        if (why) snprintf(why, n, "the global batch %lld is not a multiple of dp = %lld", (long long)base->batch.global_batch,
                          (long long)(base->parallel.world_size / tp));
        return 1;
    }
    return 0;
}

int dt_p3_layout_candidates(const dt_plan *base, dt_runtime_kind kind, dt_layout *out, int max) {
    if (max < 1) return 0;
    memset(&out[0], 0, sizeof out[0]);
    int n = 1;
    const dt_model *m = &base->model;
    const int64_t G = base->cluster.gpus_per_node, W = base->cluster.nodes * G, L = m->n_layer;
    if (kind == DT_RUNTIME_DTRUN) {   /* dtrun: TP without SP on CPU ranks (engine/model/lm_tp.c) */
        if (base->cluster.device != DT_DEVICE_CPU) return n;
        for (int64_t tp = 2; tp <= G; tp++)
            if (!dt_p3_dtrun_tp_refusal(base, tp, NULL, 0)) n = push_layout(base, tp, 0, 1, 1, 1, out, n, max);
        return n;
    }
    for (int64_t tp = 1; tp <= G; tp++) {
        if (G % tp || m->n_head % tp || m->n_kv_head % tp) continue;
        for (int64_t cp = 1; tp * cp <= G; cp++) {
            if (G % (tp * cp) || base->batch.seq_len % cp || (cp > 1 && kind != DT_RUNTIME_FSDP && kind != DT_RUNTIME_MEGATRON)) continue;
            for (int64_t pp = 1; pp <= L && tp * cp * pp <= W; pp++) {
                if (L % pp || W % (tp * cp * pp) || (tp * cp * pp == 1)) continue;
                for (int i = 0; i < N_SOLVER_VPP; i++) {
                    const int64_t v = k_solver_vpp[i];
                    if (v > 1 && (pp < DT_LAYOUT_MIN_PP_INTERLEAVED || (L / pp) % v)) continue;
                    n = push_layout(base, tp, 1, cp, pp, v, out, n, max);
                }
            }
        }
    }
    return n;
}

/* ------------------------------------------------------------ pipeline schedule */

#define DT_P3_MAX_PASSES (1 << 20)

/* The k-th forward (or backward) of rank s in Megatron-LM's interleaved order
 * (schedules.py get_model_chunk_id / get_microbatch_id_in_model_chunk with group size p):
 * chunk (k / p) mod v, reversed for backwards; micro-batch (k / (p v)) p + k mod p. With
 * v = 1 it is micro-batch k, chunk 0. */
static void pass_ids(int64_t k, int64_t p, int64_t v, int backward, int *chunk, int *micro) {
    int64_t c = (k / p) % v;
    *chunk = (int)(backward ? v - 1 - c : c);
    *micro = (int)((k / (p * v)) * p + k % p);
}

typedef struct {
    int64_t p, v, m;
    double *done;    /* [stage][chunk][micro][fwd/bwd] end times, < 0 = not yet */
} p3_deps;

static double *dep_slot(const p3_deps *d, int s, int c, int mb, int bwd) {
    return &d->done[(((int64_t)s * d->v + c) * d->m + mb) * 2 + bwd];
}

/* When a pass may start: its input arrived (the previous stage's forward of the same chunk,
 * or the last stage's forward of the previous chunk), or its output gradient (the next
 * stage's backward, or stage 0's backward of the next chunk; the model's last chunk on the
 * last stage waits on its own forward). < 0: not ready. */
static double ready_at(const p3_deps *d, const dt_p3_pass *ps, double p2p) {
    const int s = ps->stage, c = ps->chunk, mb = ps->micro;
    const int last = s == d->p - 1, first = s == 0;
    double t;
    if (!ps->backward) {
        if (first && c == 0) return 0.0;
        t = first ? *dep_slot(d, (int)d->p - 1, c - 1, mb, 0) : *dep_slot(d, s - 1, c, mb, 0);
    } else if (last && c == d->v - 1) {
        return *dep_slot(d, s, c, mb, 0);
    } else {
        t = last ? *dep_slot(d, 0, c + 1, mb, 1) : *dep_slot(d, s + 1, c, mb, 1);
    }
    return t < 0 ? -1.0 : t + p2p;
}

/* Rank s's passes in Megatron-LM's order: warm-up forwards, 1F1B, cool-down backwards. */
static int rank_order(const p3_deps *d, int s, dt_p3_pass *out) {
    const int64_t total = d->m * d->v;
    int64_t warm = d->v == 1 ? d->p - s - 1 : 2 * (d->p - s - 1) + (d->v - 1) * d->p;
    if (warm > total) warm = total;
    int n = 0;
    int64_t f = 0, b = 0;
    for (; f < warm; f++, n++) out[n].backward = 0, pass_ids(f, d->p, d->v, 0, &out[n].chunk, &out[n].micro);
    while (f < total) {
        pass_ids(f++, d->p, d->v, 0, &out[n].chunk, &out[n].micro), out[n++].backward = 0;
        pass_ids(b++, d->p, d->v, 1, &out[n].chunk, &out[n].micro), out[n++].backward = 1;
    }
    while (b < total) pass_ids(b++, d->p, d->v, 1, &out[n].chunk, &out[n].micro), out[n++].backward = 1;
    for (int i = 0; i < n; i++) out[i].stage = s;
    return n;
}

void dt_p3_pipe_free(dt_p3_pipe *pp) {
    free(pp->pass);
    memset(pp, 0, sizeof *pp);
}

int dt_p3_pipeline(const dt_plan *p, dt_p3_pipe *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    const dt_layout l = dt_layout_of(p);
    if (l.pp < 2) return dt_errorf(err, DT_EINVAL, "pipeline schedule: the plan has no pipeline parallelism (pp 1)");
    const int64_t per_rank = 2 * p->batch.grad_accum * l.vpp;
    if (per_rank * l.pp > DT_P3_MAX_PASSES)
        return dt_errorf(err, DT_EINVAL, "pipeline schedule: %lld passes, more than the %d drawn",
                         (long long)(per_rank * l.pp), DT_P3_MAX_PASSES);
    dt_time_terms tt;
    dt_p3_time parts;
    if (dt_p3_time_terms(p, &tt, &parts, err)) return err->code;
    p3_deps d = {l.pp, l.vpp, p->batch.grad_accum, NULL};
    d.done = malloc((size_t)(l.pp * l.vpp * d.m * 2) * sizeof *d.done);
    out->pass = malloc((size_t)(per_rank * l.pp) * sizeof *out->pass);
    int *next = calloc((size_t)l.pp, sizeof *next);
    double *free_at = calloc((size_t)l.pp, sizeof *free_at);
    if (!d.done || !out->pass || !next || !free_at) {
        free(d.done), free(next), free(free_at), dt_p3_pipe_free(out);
        return dt_errorf(err, DT_ENOMEM, "pipeline schedule: out of memory");
    }
    for (int64_t i = 0; i < l.pp * l.vpp * d.m * 2; i++) d.done[i] = -1.0;
    for (int s = 0; s < l.pp; s++) rank_order(&d, s, out->pass + s * per_rank);
    out->n_pass = (int)(per_rank * l.pp);
    /* each pass of a stage at the slowest stage's micro-batch time (its TP collectives
     * included) scaled by its layers, a chunk's share of it with v chunks */
    const double slot_f = parts.stage_fwd_s + parts.tp_comm_s / 2, slot_b = parts.stage_bwd_s + parts.tp_comm_s / 2;
    int64_t max_layers = 1;
    for (int s = 0; s < l.pp; s++)
        if (dt_layout_stage_layers(p, s) > max_layers) max_layers = dt_layout_stage_layers(p, s);
    int64_t scheduled = 0;
    int progress = 1;
    while (scheduled < out->n_pass && progress) {
        progress = 0;
        for (int s = 0; s < l.pp; s++) {
            while (next[s] < per_rank) {
                dt_p3_pass *ps = &out->pass[s * per_rank + next[s]];
                double r = ready_at(&d, ps, parts.p2p_s);
                if (r < 0) break;
                const double share = (double)dt_layout_stage_layers(p, s) / (double)max_layers;
                const double dur = (ps->backward ? slot_b : slot_f) * share / (double)l.vpp;
                ps->t0_s = r > free_at[s] ? r : free_at[s];
                ps->t1_s = ps->t0_s + dur;
                free_at[s] = ps->t1_s;
                *dep_slot(&d, s, ps->chunk, ps->micro, ps->backward) = ps->t1_s;
                next[s]++, scheduled++, progress = 1;
            }
        }
    }
    free(d.done), free(next), free(free_at);
    if (scheduled < out->n_pass) {
        dt_p3_pipe_free(out);
        return dt_errorf(err, DT_EINTERNAL, "pipeline schedule: the passes' order deadlocks");
    }
    for (int i = 0; i < out->n_pass; i++) {
        const dt_p3_pass *ps = &out->pass[i];
        if (ps->t1_s > out->step_s) out->step_s = ps->t1_s;
    }
    for (int s = 0; s < l.pp; s++) {
        double busy = 0.0;
        for (int64_t k = 0; k < per_rank; k++) busy += out->pass[s * per_rank + k].t1_s - out->pass[s * per_rank + k].t0_s;
        if (s == 0) out->busy_s[0] = busy;
        if (busy > out->busy_s[1]) out->busy_s[1] = busy;
    }
    out->bubble_frac = out->step_s > 0 ? 1.0 - out->busy_s[0] / out->step_s : 0.0;
    return DT_OK;
}
