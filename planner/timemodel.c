/* timemodel.c — predicted step time and bytes communicated (dt_timemodel.h).
 * This file is the engine's schedule written as arithmetic; docs/time-model.md
 * states the same rules in prose and cites the constants.
 *
 * Notation: W world size, N nodes, G ranks per node, A gradient accumulation
 * (micro-steps per optimizer step), b micro-batch, s sequence length, L blocks,
 * K checkpointed blocks, pb/gb bytes per param/grad element. */
#include "dt_timemodel.h"
#include "dt_model.h"

#include <math.h>
#include <string.h>

#include "dt_memory.h"
#include "dt_solve.h"

/* Backward costs twice the forward (weight- and input-gradient GEMMs), so the
 * forward is 1/3 of the training FLOPs (Kaplan et al. 2020, Narayanan et al. 2021). */
#define DT_FWD_SHARE (1.0 / 3.0)
#define DT_BWD_OVER_FWD 2.0
/* Engine ops (kernels / OpenMP regions) per pass, counted in engine/model/lm.c and
 * engine/device/ops_cpu.c (docs/time-model.md "Kernel-level terms"). A linear forward is
 * 2 ops (bias broadcast, GEMM), a linear backward 3 (input-gradient GEMM,
 * weight-gradient GEMM, bias sum). Block forward: 2 layernorms, 4 linears,
 * attention, GELU, 2 residual adds = 14. A checkpointed block's recompute
 * (block_forward with xout = NULL) stops after GELU: no MLP down projection
 * (linear F -> C) and no second residual add = 11. Block backward: 4 linear
 * backwards, GELU, 2 layernorms, attention = 16. Outside the blocks, forward:
 * encoder, final layernorm, classifier GEMM, cross-entropy = 4; backward:
 * cross-entropy, 2 classifier GEMMs, zeroing the residual gradient, final
 * layernorm, encoder = 6. */
#define DT_OPS_BLOCK_FWD 14
#define DT_OPS_BLOCK_RECOMPUTE 11
#define DT_OPS_BLOCK_BWD 16
#define DT_OPS_OUTER_FWD 4
#define DT_OPS_OUTER_BWD 6
/* Activation elements the element-wise kernels read + write per token (fp32:
 * the engine's ops work on fp32 arrays, engine/device/dt_ops.h), counted in
 * engine/model/lm.c with C = hidden, F = ffn, V = vocab. Attention's traffic is in
 * attention_flops' measurement and the linears' bias work (broadcast, bias
 * sums) in achievable_flops' (dtplan calibrate times the engine's whole linear
 * ops). Block forward: ln_1 and ln_2 (read + write C each), 2 residual adds
 * (read 2C, write C each), GELU (read + write F) = 10C + 2F; its recompute
 * skips the second residual add = 7C + 2F. Block backward: GELU (read inp and
 * dout, write: 3F), 2 layernorms (read dout and inp, read + write dinp: 4C
 * each) = 8C + 3F. Outside: forward encoder (read 2C, write C), ln_f (2C),
 * cross-entropy (read V) = 5C + V; backward cross-entropy (read + write V),
 * ln_f (4C), encoder (read C, add 2C) = 7C + 2V. */
#define DT_EW_BYTES 4.0
#define DT_EW_BLK_FWD_C 10.0
#define DT_EW_BLK_FWD_F 2.0
#define DT_EW_BLK_REC_C 7.0
#define DT_EW_BLK_REC_F 2.0
#define DT_EW_BLK_BWD_C 8.0
#define DT_EW_BLK_BWD_F 3.0
#define DT_EW_OUT_FWD_C 5.0
#define DT_EW_OUT_FWD_V 1.0
#define DT_EW_OUT_BWD_C 7.0
#define DT_EW_OUT_BWD_V 2.0

void dt_time_elementwise_elems(int64_t C, int64_t F, int64_t V, dt_time_ew_elems *out) {
    const double c = (double)C, f = (double)F, v = (double)V;
    out->block_fwd = DT_EW_BLK_FWD_C * c + DT_EW_BLK_FWD_F * f;
    out->block_recompute = DT_EW_BLK_REC_C * c + DT_EW_BLK_REC_F * f;
    out->block_bwd = DT_EW_BLK_BWD_C * c + DT_EW_BLK_BWD_F * f;
    out->outer_fwd = DT_EW_OUT_FWD_C * c + DT_EW_OUT_FWD_V * v;
    out->outer_bwd = DT_EW_OUT_BWD_C * c + DT_EW_OUT_BWD_V * v;
    out->bytes_per_elem = DT_EW_BYTES;
}

/* Scalars all-reduced once per step for the loss (all stages) and the partial
 * squared gradient norm (stages 1-3, whose gradients are sharded): fp32 each. */
#define DT_SCALAR_BYTES 4
#define DT_LOSS_SCALARS 1
#define DT_LOSS_NORM_SCALARS 2

/* The parameter layout every stage shares (docs/time-model.md "Units"): unit 0 =
 * embeddings, units 1..L = blocks, unit L+1 = final norm + untied head (if any).
 * Stages 1-3 pad each unit to a multiple of W so it splits into equal shards. */
typedef struct {
    int64_t n_units;
    int64_t emb, block, head;           /* elements, unpadded */
    int64_t emb_pad, block_pad, head_pad;
    int64_t total, total_pad;           /* sum over units */
} dt_units_layout;

static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

static void layout_of(const dt_plan *p, dt_units_layout *u) {
    int64_t W = p->parallel.world_size, L = p->model.n_layer;
    u->emb = dt_model_embedding_params(&p->model);
    u->block = dt_model_block_params(&p->model);
    u->head = dt_model_head_params(&p->model);
    u->emb_pad = round_up(u->emb, W);
    u->block_pad = round_up(u->block, W);
    u->head_pad = round_up(u->head, W);
    u->n_units = 1 + L + (u->head > 0);
    u->total = u->emb + L * u->block + u->head;
    u->total_pad = u->emb_pad + L * u->block_pad + u->head_pad;
}

/* ---- alpha-beta collectives, ring algorithm (nccl-tests doc/PERFORMANCE.md; docs/time-model.md) ---- */
typedef struct {
    int64_t n;      /* ranks */
    double busbw;   /* bytes/s */
    double alpha;   /* s per ring step */
} dt_net;

static dt_net net_of(const dt_plan *p) {
    dt_net net;
    net.n = p->parallel.world_size;
    int inter = p->cluster.nodes > 1;
    net.busbw = inter ? p->cluster.hw.inter_busbw : p->cluster.hw.intra_busbw;
    net.alpha = inter ? p->cluster.hw.inter_alpha_s : p->cluster.hw.intra_alpha_s;
    return net;
}

/* bytes = the full logical buffer (dt_collective convention). */
static double t_coll(const dt_net *net, dt_collective c, double bytes) {
    if (net->n <= 1 || bytes <= 0) return 0.0;
    double n = (double)net->n;
    if (c == DT_COLL_ALLREDUCE)
        return 2.0 * (n - 1.0) * net->alpha + 2.0 * (n - 1.0) / n * bytes / net->busbw;
    /* reduce-scatter, all-gather */
    return (n - 1.0) * net->alpha + (n - 1.0) / n * bytes / net->busbw;
}

/* Sum over units of one collective per unit. */
static double t_units(const dt_net *net, const dt_units_layout *u, int64_t L, dt_collective c,
                      int elem_bytes) {
    double t = t_coll(net, c, (double)(u->emb_pad * elem_bytes)) +
               (double)L * t_coll(net, c, (double)(u->block_pad * elem_bytes));
    if (u->head > 0) t += t_coll(net, c, (double)(u->head_pad * elem_bytes));
    return t;
}

/* The unit whose collective runs first in backward (and last in forward). */
static int64_t last_unit_pad(const dt_units_layout *u) { return u->head > 0 ? u->head_pad : u->block_pad; }

static int check_plan(const dt_plan *p, dt_error *err) {
    if (p->parallel.world_size < 1 || p->cluster.nodes < 1 || p->cluster.gpus_per_node < 1 ||
        p->parallel.world_size != p->cluster.nodes * p->cluster.gpus_per_node)
        return dt_errorf(err, DT_EINVAL, "time model: world_size %lld != nodes %lld x gpus_per_node %lld",
                         (long long)p->parallel.world_size, (long long)p->cluster.nodes,
                         (long long)p->cluster.gpus_per_node);
    if (p->batch.micro_batch < 1 || p->batch.grad_accum < 1 || p->batch.seq_len < 1)
        return dt_errorf(err, DT_EINVAL, "time model: micro_batch, grad_accum and seq_len must be positive");
    if (p->parallel.zero_stage < 0 || p->parallel.zero_stage > 3)
        return dt_errorf(err, DT_EINVAL, "time model: zero_stage %d is not 0..3", p->parallel.zero_stage);
    if (p->parallel.zero_stage == 0 && p->parallel.reduce_bucket_elems < 1)
        return dt_errorf(err, DT_EINVAL, "time model: reduce_bucket_elems must be positive");
    const dt_hardware *hw = &p->cluster.hw;
    int dt = (int)p->precision.param;
    if (dt < 0 || dt > 2 || hw->achievable_flops[dt] <= 0)
        return dt_errorf(err, DT_EINVAL,
                         "hardware %s has no %s arithmetic (achievable_flops.%s = 0); choose another --precision",
                         hw->name, dt_dtype_name(p->precision.param), dt_dtype_name(p->precision.param));
    if ((p->parallel.world_size > 1 && (hw->intra_busbw <= 0 || (p->cluster.nodes > 1 && hw->inter_busbw <= 0))) ||
        hw->mem_bw <= 0 || hw->h2d_bw <= 0 || hw->cpu_adam_params_per_s <= 0 || hw->nvme_bw <= 0)
        return dt_errorf(err, DT_EINVAL, "time model: hardware %s has a zero bandwidth or rate", hw->name);
    return DT_OK;
}

/* On a CPU device the ranks of a node share its cores (dtrun gives each rank
 * cores / ranks OpenMP threads, engine/dist/launch.c), and a profile's FLOP/s and
 * bandwidth are the whole node's (dtplan calibrate measures one process on
 * every core). A GPU rank owns its device. */
static double node_share(const dt_plan *p) {
    return p->cluster.hw.device == DT_DEVICE_CPU ? 1.0 / (double)p->cluster.gpus_per_node : 1.0;
}

int dt_time_compute_micro(const dt_plan *p, dt_time_compute *out, dt_error *err) {
    if (check_plan(p, err)) return err->code;
    const dt_hardware *hw = &p->cluster.hw;
    const double share = node_share(p);
    const double R = hw->achievable_flops[p->precision.param] * share;
    const double Ra = (hw->attention_flops > 0 ? hw->attention_flops : hw->achievable_flops[p->precision.param]) *
                      share;
    const double b = (double)p->batch.micro_batch, L = (double)p->model.n_layer, k = hw->op_overhead_s;
    const int64_t s = p->batch.seq_len;
    /* per micro-step forward: all FLOPs less attention at R, attention at Ra */
    const double f_fwd = b * DT_FWD_SHARE * dt_model_train_flops_per_seq(&p->model, s);
    dt_block_flops blk;   /* from the family description (models/family.c) */
    dt_model_block_fwd_flops(&p->model, s, &blk);
    const double f_attn_blk = b * blk.attention;
    const double f_blk = b * (blk.matmul + blk.attention);
    const double f_down = b * blk.mlp_out;
    const double t_fwd = (f_fwd - L * f_attn_blk) / R + L * f_attn_blk / Ra +
                         k * (L * DT_OPS_BLOCK_FWD + DT_OPS_OUTER_FWD);
    out->fwd_s = t_fwd;
    out->bwd_s = DT_BWD_OVER_FWD * (t_fwd - k * (L * DT_OPS_BLOCK_FWD + DT_OPS_OUTER_FWD)) +
                 k * (L * DT_OPS_BLOCK_BWD + DT_OPS_OUTER_BWD);
    out->block_fwd_s = (f_blk - f_attn_blk) / R + f_attn_blk / Ra + k * DT_OPS_BLOCK_FWD;
    out->attn_core_s = f_attn_blk / Ra;
    /* a checkpointed block's recompute: dtrun's engine stops before the MLP down
     * projection; torch.utils.checkpoint (deepspeed / fsdp) reruns the whole forward */
    double f_rec = p->runtime.kind == DT_RUNTIME_DTRUN ? f_blk - f_down : f_blk;
    if (f_rec < f_attn_blk) f_rec = f_attn_blk;
    out->block_recompute_s = (f_rec - f_attn_blk) / R + f_attn_blk / Ra + k * DT_OPS_BLOCK_RECOMPUTE;
    if (hw->elementwise_bw > 0) {   /* element-wise kernels stream activations */
        dt_time_ew_elems ew;
        dt_time_elementwise_elems(p->model.hidden, p->model.ffn, p->model.vocab, &ew);
        const double per_elem = b * (double)s * ew.bytes_per_elem / (hw->elementwise_bw * share);
        out->fwd_s += (L * ew.block_fwd + ew.outer_fwd) * per_elem;
        out->bwd_s += (L * ew.block_bwd + ew.outer_bwd) * per_elem;
        out->block_fwd_s += ew.block_fwd * per_elem;
        out->block_recompute_s += ew.block_recompute * per_elem;
    }
    return DT_OK;
}

/* Bytes per gradient element on the wire: FSDP reduces in fp32 (MixedPrecisionPolicy
 * reduce_dtype, torchtitan's; DDP under autocast all-reduces the fp32 gradients), everyone
 * else in the gradient dtype. */
static int wire_grad_bytes(const dt_plan *p) {
    if (p->runtime.kind != DT_RUNTIME_FSDP) return dt_dtype_size(p->precision.grad);
    return p->precision.has_master ? dt_dtype_size(p->precision.master) : dt_dtype_size(p->precision.param);
}

/* DeepSpeed ZeRO-3 fetches module by module (parameter_offload.py pre-forward / pre-backward
 * hooks per submodule), each an all-gather of the module's partitioned tensors plus the
 * profile's fixed fetch cost; tensors under stage3_param_persistence_threshold are never
 * fetched. dtrun and FSDP gather a whole unit (block) at once. Returns the time of one
 * pass's gathers of a block (per_block) and of the embedding and head units. */
#define MAX_FETCH_MODULES 16
static double ds_block_fetch_s(const dt_plan *p, const dt_net *net, int pb) {
    int64_t sizes[MAX_FETCH_MODULES];
    const int64_t W = p->parallel.world_size;
    int n = dt_model_block_fetch_sizes(&p->model, p->runtime.persistence_threshold, sizes, MAX_FETCH_MODULES);
    double t = 0.0;
    for (int i = 0; i < n && i < MAX_FETCH_MODULES; i++)
        t += t_coll(net, DT_COLL_ALLGATHER, (double)(round_up(sizes[i], W) * pb)) + p->runtime.fetch_overhead_s;
    return t;
}

int dt_time_terms_build(const dt_plan *p, dt_time_terms *t, dt_error *err) {
    if (check_plan(p, err)) return err->code;
    memset(t, 0, sizeof *t);
    const dt_hardware *hw = &p->cluster.hw;
    const dt_precision *pr = &p->precision;
    const int stage = p->parallel.zero_stage;
    const int64_t L = p->model.n_layer, W = p->parallel.world_size, G = p->cluster.gpus_per_node;
    const double A = (double)p->batch.grad_accum;
    const int pb = dt_dtype_size(pr->param), gb = wire_grad_bytes(p);
    const int ob = dt_precision_optimizer_bytes(pr);
    const double share = node_share(p);
    const int fsdp = p->runtime.kind == DT_RUNTIME_FSDP, ds3 = p->runtime.kind == DT_RUNTIME_DEEPSPEED && stage == 3;

    /* ---- compute, per micro-step ---- */
    dt_time_compute cm;
    if (dt_time_compute_micro(p, &cm, err)) return err->code;
    /* selective recompute repeats every block's attention core in backward; a checkpointed
     * block's full recompute already includes it */
    const double t_sel = p->activations.selective ? cm.attn_core_s : 0.0;
    const double t_fwd = cm.fwd_s, t_bwd = cm.bwd_s + (double)L * t_sel, t_rec = cm.block_recompute_s - t_sel;
    t->compute_s = A * (t_fwd + cm.bwd_s);
    t->recompute_base_s = A * (double)L * t_sel;
    t->per_ckpt_s = A * t_rec;
    t->recompute_per_layer_s = t->per_ckpt_s;

    /* ---- communication ---- */
    dt_units_layout u;
    layout_of(p, &u);
    const dt_net net = net_of(p);
    const int overlap = p->parallel.overlap_comm != 0;
    double fixed = 0.0;   /* comm that is always exposed */
    dt_time_phase ph[DT_TT_MAX_PHASES];
    int nph = 0;
    double comm_total = 0.0;

    if (W > 1) {
        /* metrics all-reduce once per step, after backward */
        double scal = t_coll(&net, DT_COLL_ALLREDUCE,
                             (double)DT_SCALAR_BYTES * (stage == 0 ? DT_LOSS_SCALARS : DT_LOSS_NORM_SCALARS));
        fixed += scal;
        comm_total += scal;
        if (stage == 0) {
            /* gradient all-reduce in buckets of reduce_bucket_elems, formed in backward
             * order, during the last micro-step's backward */
            int64_t B = p->parallel.reduce_bucket_elems;
            int64_t nb = (u.total + B - 1) / B, last = u.total - (nb - 1) * B;
            double c = (double)(nb - 1) * t_coll(&net, DT_COLL_ALLREDUCE, (double)(B * gb)) +
                       t_coll(&net, DT_COLL_ALLREDUCE, (double)(last * gb));
            ph[nph++] = (dt_time_phase){1.0, t_coll(&net, DT_COLL_ALLREDUCE, (double)(last * gb)), c,
                                        t_bwd, t_rec};
        } else {
            double rs = t_units(&net, &u, L, DT_COLL_REDUCE_SCATTER, gb);
            double rs_tail = t_coll(&net, DT_COLL_REDUCE_SCATTER, (double)(u.emb_pad * gb));
            double ag = t_units(&net, &u, L, DT_COLL_ALLGATHER, pb);
            if (ds3) /* module by module: the block's gathers, the embedding and head units as before */
                ag += (double)L * (ds_block_fetch_s(p, &net, pb) -
                                   t_coll(&net, DT_COLL_ALLGATHER, (double)(u.block_pad * pb)));
            if (stage == 1 || stage == 2) {
                /* stage 1: reduce-scatter per unit in the last micro-step's backward;
                 * stage 2: in every micro-step's backward. Updated params all-gathered
                 * per unit after the optimizer step (nothing left to overlap with). */
                ph[nph++] = (dt_time_phase){stage == 1 ? 1.0 : A, rs_tail, rs, t_bwd, t_rec};
                fixed += ag;
                comm_total += ag;
            } else {
                /* stage 3: forward gathers every unit (prefetching the next while the
                 * current computes); backward gathers every unit again and reduce-scatters
                 * its gradients, in every micro-step */
                double ag_first_fwd = t_coll(&net, DT_COLL_ALLGATHER, (double)(u.emb_pad * pb));
                double ag_first_bwd = t_coll(&net, DT_COLL_ALLGATHER, (double)(last_unit_pad(&u) * pb));
                ph[nph++] = (dt_time_phase){A, ag_first_fwd, ag, t_fwd, 0.0};
                ph[nph++] = (dt_time_phase){A, ag_first_bwd + rs_tail, ag + rs, t_bwd, t_rec};
            }
        }
    }
    for (int i = 0; i < nph; i++) {
        comm_total += ph[i].mult * ph[i].comm_s;
        if (!overlap) { /* nothing overlaps: the whole phase is exposed */
            fixed += ph[i].mult * ph[i].comm_s;
        } else {
            t->phase[t->n_phases++] = ph[i];
        }
    }
    t->comm_total_s = comm_total;
    t->comm_fixed_exposed_s = fixed;

    /* ---- offload transfers and the optimizer step (synchronous, exposed) ---- */
    const double shard = stage == 0 ? (double)u.total : (double)u.total_pad / (double)W;
    const double node_shard = shard * (double)G;   /* what one node's CPU / NVMe serves */
    double off = 0.0, opt;
    dt_offload oo = stage >= 1 ? p->parallel.offload_optimizer : DT_OFFLOAD_NONE;
    dt_offload op = stage == 3 ? p->parallel.offload_param : DT_OFFLOAD_NONE;
    if (oo != DT_OFFLOAD_NONE) {
        off += shard * gb / hw->h2d_bw;                       /* grads D2H once per step */
        if (op == DT_OFFLOAD_NONE) off += shard * pb / hw->h2d_bw; /* updated params H2D */
        if (oo == DT_OFFLOAD_NVME)
            off += 2.0 * node_shard * ob / hw->nvme_bw;       /* optimizer state read + write */
        opt = node_shard / hw->cpu_adam_params_per_s;
    } else if (hw->device == DT_DEVICE_CPU) {
        /* a CPU device's AdamW is the host AdamW kernel (engine/model/optim.c) on the
         * node's cores, shared by its G ranks: the rate dtplan calibrate times */
        opt = node_shard / hw->cpu_adam_params_per_s;
    } else if (fsdp) {
        /* FSDP's AdamW steps the fp32 sharded params themselves: grads read twice, m and v
         * read and written, params read and written (no 16-bit copy to refresh) */
        const double w = (double)gb, moments = (double)ob - (pr->has_master ? w : 0.0);
        opt = shard * (2.0 * w + 2.0 * moments + 2.0 * w) / (hw->mem_bw * share);
    } else {
        /* device AdamW is memory-bound: grads read twice (norm, update), optimizer
         * state read and written, params written (and read when there is no master) */
        double bytes = 2.0 * gb + 2.0 * ob + (double)pb * (pr->has_master ? 1.0 : 2.0);
        opt = shard * bytes / (hw->mem_bw * share);
    }
    if (op != DT_OFFLOAD_NONE) {
        /* each gather (forward and backward, every micro-step) first brings the
         * rank's shard of the unit to the device */
        off += 2.0 * A * shard * pb / hw->h2d_bw;
        if (op == DT_OFFLOAD_NVME)
            off += (2.0 * A + 1.0) * node_shard * pb / hw->nvme_bw; /* reads + one write */
    }
    t->offload_s = off;
    t->optimizer_s = opt;
    t->base_s = t->compute_s + t->recompute_base_s + fixed + off + opt;
    return DT_OK;
}

void dt_time_terms_eval(const dt_time_terms *t, int64_t K, dt_time_breakdown *out) {
    memset(out, 0, sizeof *out);
    double exposed = t->comm_fixed_exposed_s;
    for (int i = 0; i < t->n_phases; i++) {
        const dt_time_phase *ph = &t->phase[i];
        double e = ph->comm_s - ph->work0_s - ph->work_per_ckpt_s * (double)K;
        exposed += ph->mult * (e > ph->tail_s ? e : ph->tail_s);
    }
    out->compute_s = t->compute_s;
    out->recompute_s = t->recompute_base_s + t->per_ckpt_s * (double)K;
    out->comm_s = t->comm_total_s;
    out->comm_exposed_s = exposed;
    out->offload_s = t->offload_s;
    out->optimizer_s = t->optimizer_s;
    out->step_s = out->compute_s + out->recompute_s + exposed + out->offload_s + out->optimizer_s;
}

int dt_time_estimate(const dt_plan *p, dt_time_breakdown *out, dt_error *err) {
    dt_time_terms t;
    if (dt_time_terms_build(p, &t, err)) return err->code;
    int64_t K = p->activations.ckpt_layers;
    if (K < 0 || K > p->model.n_layer)
        return dt_errorf(err, DT_EINVAL, "time model: ckpt_layers %lld is not in 0..%lld", (long long)K,
                         (long long)p->model.n_layer);
    dt_time_terms_eval(&t, K, out);
    double tokens = (double)p->batch.global_batch * (double)p->batch.seq_len;
    double model_flops = (double)p->batch.global_batch *
                         dt_model_train_flops_per_seq(&p->model, p->batch.seq_len);
    double peak = p->cluster.hw.peak_flops[p->precision.param] * (double)p->parallel.world_size;
    out->tokens_per_s = out->step_s > 0 ? tokens / out->step_s : 0.0;
    out->mfu = out->step_s > 0 && peak > 0 ? model_flops / (out->step_s * peak) : 0.0;
    return DT_OK;
}

static int comm_bytes(const dt_plan *p, int64_t out[DT_COLL_COUNT], dt_error *err);

int dt_time_comm_bytes(const dt_plan *p, int64_t out[DT_COLL_COUNT], dt_error *err) {
    return comm_bytes(p, out, err);
}

static int comm_bytes(const dt_plan *p, int64_t out[DT_COLL_COUNT], dt_error *err) {
    memset(out, 0, sizeof(int64_t) * DT_COLL_COUNT);
    if (check_plan(p, err)) return err->code;
    if (p->parallel.world_size <= 1) return DT_OK;
    dt_units_layout u;
    layout_of(p, &u);
    const int stage = p->parallel.zero_stage;
    const int64_t A = p->batch.grad_accum;
    const int64_t pb = dt_dtype_size(p->precision.param), gb = wire_grad_bytes(p);
    switch (stage) {
    case 0:
        out[DT_COLL_ALLREDUCE] = u.total * gb + DT_SCALAR_BYTES * DT_LOSS_SCALARS;
        break;
    case 1:
        out[DT_COLL_REDUCE_SCATTER] = u.total_pad * gb;
        out[DT_COLL_ALLGATHER] = u.total_pad * pb;
        out[DT_COLL_ALLREDUCE] = DT_SCALAR_BYTES * DT_LOSS_NORM_SCALARS;
        break;
    case 2:
        out[DT_COLL_REDUCE_SCATTER] = A * u.total_pad * gb;
        out[DT_COLL_ALLGATHER] = u.total_pad * pb;
        out[DT_COLL_ALLREDUCE] = DT_SCALAR_BYTES * DT_LOSS_NORM_SCALARS;
        break;
    default:
        out[DT_COLL_ALLGATHER] = 2 * A * u.total_pad * pb;
        out[DT_COLL_REDUCE_SCATTER] = A * u.total_pad * gb;
        out[DT_COLL_ALLREDUCE] = DT_SCALAR_BYTES * DT_LOSS_NORM_SCALARS;
        break;
    }
    return DT_OK;
}

int dt_predict(dt_plan *p, dt_error *err) {
    dt_prediction pred;
    memset(&pred, 0, sizeof pred);
    if (dt_memory_estimate(p, &pred.memory, err)) return err->code;
    if (dt_time_estimate(p, &pred.time, err)) return err->code;
    if (comm_bytes(p, pred.comm_bytes, err)) return err->code;
    pred.valid = 1;
    p->prediction = pred;
    return DT_OK;
}
