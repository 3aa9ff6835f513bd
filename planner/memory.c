/* memory.c — the memory model: bytes per rank (device), per node (host) and per
 * node on NVMe. Every formula and its source: docs/memory-model.md.
 *
 * Notation (as docs/activations.md): Ψ model-state parameters, N data-parallel
 * ranks, n ranks per node, B micro-batch, T sequence, C hidden, F ffn, H / Hkv
 * query / kv heads, d head dim, V vocab, L blocks, K checkpointed blocks,
 * a activation bytes. shard = ceil(Ψ / N) (partitions padded to equal size). */
#include "dt_memory.h"
#include "dt_model.h"

#include <stdint.h>
#include <string.h>

#include "dt_dsconfig.h"

/* fp32 statistics (LayerNorm mean/rstd, RMSNorm rstd, softmax log-sum-exp) and
 * fp32 logits, int32 token ids: docs/activations.md. */
#define STAT_BYTES 4
#define LOGIT_BYTES 4
#define TOKEN_ID_BYTES 4
#define LOSS_BYTES 4

/* DeepSpeed code defaults the plan does not carry (deepspeed/runtime/zero/
 * offload_config.py, zero/config.py; docs/memory-model.md "Host memory and NVMe"):
 * offload_optimizer.buffer_count (NVMe swap buffers), sub_group_size (elements per
 * optimizer tile), offload_param.buffer_count and buffer_size (elements). */
#define DS_OPT_SWAP_BUFFERS 4
#define DS_SUB_GROUP_ELEMS 1000000000LL
#define DS_PARAM_SWAP_BUFFERS 5
#define DS_PARAM_BUFFER_ELEMS 100000000LL

/* Anything above 2^60 bytes (an exabyte) per rank is a nonsensical request; the
 * arithmetic below saturates there instead of overflowing. */
#define MEM_SATURATE ((int64_t)1 << 60)

static int64_t smul(int64_t a, int64_t b) {
    if (a <= 0 || b <= 0) return 0;
    if (a > MEM_SATURATE / b) return MEM_SATURATE;
    return a * b;
}
static int64_t smul3(int64_t a, int64_t b, int64_t c) { return smul(smul(a, b), c); }
static int64_t sadd(int64_t a, int64_t b) {
    int64_t s = a + b;
    return s > MEM_SATURATE ? MEM_SATURATE : s;
}
static int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; }

static int64_t act_bytes(const dt_plan *p) { return dt_dtype_size(p->precision.activation); }

/* Attention bytes kept for backward in one block: flash keeps the fp32
 * log-sum-exp (B·H·T), materialized keeps the probabilities (B·H·T·T), with H the
 * query heads (dt_saved.attn_rows). */
static int64_t attention_saved(const dt_plan *p, int64_t H) {
    const int64_t B = p->batch.micro_batch, T = p->batch.seq_len;
    if (p->activations.attention == DT_ATTN_MATERIALIZED) return smul(smul3(act_bytes(p), B, H), smul(T, T));
    return smul3(STAT_BYTES, smul(B, H), T);
}

/* Per-token elements and statistics of dt_model_block_saved / dt_model_head_saved as
 * bytes for the plan's B·T tokens (docs/activations.md). */
static int64_t saved_bytes(const dt_plan *p, const dt_saved *s) {
    const int64_t BT = smul(p->batch.micro_batch, p->batch.seq_len);
    return sadd(smul3(act_bytes(p), BT, s->elems), smul3(s->stats, STAT_BYTES, BT));
}

/* One full (not checkpointed) block: what the family description says its modules
 * keep (models/family.c), plus the attention kernel's own state. */
static int64_t full_block(const dt_plan *p) {
    dt_saved s;
    dt_model_block_saved(&p->model, &s);
    return sadd(saved_bytes(p, &s), attention_saved(p, s.attn_rows));
}

/* Head: the final norm's input (the last residual) and statistics, and the lm_head's
 * input (the final norm's output). */
static int64_t head_saved(const dt_plan *p) {
    dt_saved s;
    dt_model_head_saved(&p->model, &s);
    return saved_bytes(p, &s);
}

int64_t dt_memory_activations_per_block(const dt_plan *p, int checkpointed) {
    if (checkpointed) /* a checkpointed block keeps only its input x */
        return smul3(act_bytes(p), smul(p->batch.micro_batch, p->batch.seq_len), p->model.hidden);
    return full_block(p);
}

int64_t dt_memory_activations(const dt_plan *p, int64_t ckpt_layers) {
    const int64_t L = p->model.n_layer;
    int64_t K = ckpt_layers < 0 ? 0 : (ckpt_layers > L ? L : ckpt_layers);
    const int64_t full = full_block(p), kept = dt_memory_activations_per_block(p, 1);
    int64_t total = smul(L - K, full);
    total = sadd(total, smul(K, kept));
    if (K > 0) total = sadd(total, full - kept); /* the one shared recompute area */
    return sadd(total, head_saved(p));
}

/* Largest unit the stage-3 engine gathers at once: one transformer block, or the
 * embedding / head when those are bigger (they are for LLM vocabularies). */
static int64_t gather_unit(const dt_model *m) {
    return imax(dt_model_block_params(m),
                imax(dt_model_embedding_params(m), dt_model_head_params(m)));
}

/* The CPU device runs the engine's own model code (engine/model/lm.c), which
 * implements the gpt2 family: its allocations are mirrored as it makes them (the
 * engine's layout, docs/engine.md "Memory", not the family description). Other
 * devices and families get DeepSpeed's and the description's terms. */
static int cpu_engine_layout(const dt_plan *p) { return p->cluster.device == DT_DEVICE_CPU; }

/* fp32 elements per token of the CPU engine's backward scratch (engine/model/lm.c
 * create): gpt2 dres, dC [C] each, dQKV [3C], dF [F]; llama dres, dC [C] each,
 * dQKV [QK + KVD] (q | k, then v), dF [2F] (gate | up), dA [max(QD, F)]. */
static int64_t cpu_scratch_per_token(const dt_model *m) {
    const int64_t C = m->hidden, F = m->ffn;
    if (m->family == DT_FAMILY_GPT2) return 2 * C + 3 * C + F;
    const int64_t QD = m->n_head * m->head_dim, KVD = m->n_kv_head * m->head_dim;
    return 2 * C + (QD + 2 * KVD) + 2 * F + imax(QD, F);
}

/* fp32 elements per token of one block's working copies when activations are
 * 16-bit (lm.c alloc_f32_views): gpt2 x ln1 att res1 ln2 xout [C], qkv [3C],
 * fch gelu [F]; llama x ln1 res1 ln2 xout [C], att [QD], qk [QK], v [KVD],
 * gate | up [2F], act [F], and (q/k norm) the raw qk [QK]. */
static int64_t cpu_views_per_token(const dt_model *m) {
    const int64_t C = m->hidden, F = m->ffn;
    if (m->family == DT_FAMILY_GPT2) return 9 * C + 2 * F;
    const int64_t QD = m->n_head * m->head_dim, KVD = m->n_kv_head * m->head_dim, QK = QD + KVD;
    return 5 * C + QD + QK + KVD + 3 * F + (m->qk_norm ? QK : 0);
}

/* Compute temporaries of the step itself (not communication), bytes per rank.
 * Common to every backend: fp32 logits B·T·V (reused for their gradient),
 * per-token losses, int32 token ids. The CPU device's GPT-2 (engine/model/lm.c,
 * docs/engine.md "Memory") adds what it really allocates: per-token log-sum-exp,
 * fp32 activation-gradient scratch [N,C]x2 + [N,3C] + [N,F], and with 16-bit
 * storage the fp32 working copies (one parameter group, one gradient group plus
 * the token index for the embedding gradient, one block's activations). Other
 * backends: residual-stream gradient in and out plus the widest per-block
 * gradient in the activation dtype. */
static int64_t compute_buffers(const dt_plan *p) {
    const dt_model *m = &p->model;
    const int64_t a = act_bytes(p), B = p->batch.micro_batch, T = p->batch.seq_len;
    const int64_t BT = smul(B, T), C = m->hidden, V = m->vocab;
    int64_t bytes = smul3(LOGIT_BYTES, BT, V);
    bytes = sadd(bytes, smul(LOSS_BYTES, BT));
    bytes = sadd(bytes, smul3(2, TOKEN_ID_BYTES, BT));
    if (cpu_engine_layout(p)) {
        const int64_t f32 = 4; /* the CPU backend computes every op in fp32 */
        bytes = sadd(bytes, smul(f32, BT));                                  /* log-sum-exp per token */
        bytes = sadd(bytes, smul3(f32, BT, cpu_scratch_per_token(m)));       /* backward scratch */
        if (m->family == DT_FAMILY_LLAMA)
            bytes = sadd(bytes, smul3(f32, T, m->head_dim));                 /* RoPE cos, sin [T, D/2] */
        /* groups converted whole: a block, gpt2's wpe (the final norm is smaller) */
        const int64_t group = m->family == DT_FAMILY_GPT2 ? imax(dt_model_block_params(m), smul(m->max_pos, C))
                                                          : dt_model_block_params(m);
        if (p->precision.param != DT_DTYPE_FP32) bytes = sadd(bytes, smul(f32, group));
        if (p->precision.grad != DT_DTYPE_FP32)
            bytes = sadd(bytes, sadd(smul(f32, group), sadd(smul(TOKEN_ID_BYTES, V), smul(TOKEN_ID_BYTES, BT))));
        if (p->precision.activation != DT_DTYPE_FP32) {
            bytes = sadd(bytes, smul3(f32, BT, cpu_views_per_token(m)));
            if (p->activations.attention == DT_ATTN_MATERIALIZED)
                bytes = sadd(bytes, smul(f32, smul3(B, m->n_head, smul(T, T))));
        }
        return bytes;
    }
    /* the residual gradient in and out, and the widest in-linear gradient (q/k/v or
     * gate/up, from the family description) */
    return sadd(bytes, smul3(a, BT, 2 * C + dt_model_block_widest_in(m)));
}

/* Units are padded to a multiple of the world size (docs/time-model.md "Units"). */
static int64_t pad_to(int64_t n, int64_t w) { return smul(ceil_div(n, w), w); }

/* The CPU device's ZeRO engine (engine/dist/zero.c, docs/zero.md "Buffers") does not
 * use DeepSpeed's flat buckets: it communicates per unit (embeddings, each
 * block, the final norm), so its buffers are sized by the padded units. With
 * E the padded embedding unit, U the largest padded block / final-norm unit,
 * Pmax = max(E, U), S = Pmax / N its shard, k = 2 block buffers with
 * overlap_comm (the one computing and the one still communicating / being
 * prefetched) else 1, r = 3 reduce-scatter receives with overlap_comm (every
 * unit buffer may have one in flight at the end of backward) else 1:
 *   stage 0: nothing (the flat gradient is all-reduced in place)
 *   stage 1: k·Pmax grads (reduce-scatter send) + Pmax params (all-gather)
 *   stage 2: (E + k·U) unit grads + r·S receives + Pmax params (all-gather)
 *   stage 3: (E + k·U) gathered params + (E + k·U) unit grads + r·S receives
 * The embedding unit has its own buffers: the tied classifier keeps it in use
 * from the start of forward's head through the end of backward. A world of
 * one allocates the same (copies replace the collectives). */
static int64_t cpu_engine_comm_buffers(const dt_plan *p, int64_t pb, int64_t gb) {
    const dt_parallel *z = &p->parallel;
    const dt_model *m = &p->model;
    const int64_t N = z->zero_stage == 0 ? 1 : z->world_size;
    const int64_t k = z->overlap_comm ? 2 : 1, r = z->overlap_comm ? 3 : 1;
    const int64_t E = pad_to(dt_model_embedding_params(m), N);
    const int64_t U = imax(pad_to(dt_model_block_params(m), N), pad_to(dt_model_head_params(m), N));
    const int64_t Pmax = imax(E, U), S = Pmax / N, units = sadd(E, smul(k, U));
    switch (z->zero_stage) {
    case 0: return 0;
    case 1: return sadd(smul3(k, Pmax, gb), smul(Pmax, pb));
    case 2: return sadd(sadd(smul(units, gb), smul3(r, S, gb)), smul(Pmax, pb));
    default: return sadd(smul(units, pb + gb), smul3(r, S, gb));
    }
}

/* Device temporaries alive at the peak (the start of backward), bytes per rank. */
static int64_t buffers_bytes(const dt_plan *p, int64_t psi) {
    const dt_parallel *z = &p->parallel;
    const dt_model *m = &p->model;
    const int64_t pb = dt_precision_param_bytes(&p->precision);
    const int64_t gb = dt_precision_grad_bytes(&p->precision);
    int64_t bytes = 0;

    if (cpu_engine_layout(p))
        return sadd(cpu_engine_comm_buffers(p, pb, gb), compute_buffers(p));
    /* DeepSpeed (GPU backends): */

    /* communication buckets, each bounded by the model size; a world of one
     * communicates nothing and allocates none */
    if (z->world_size == 1) return compute_buffers(p);
    const int64_t reduce = imin(z->reduce_bucket_elems, psi);
    const int64_t gather = imin(z->allgather_bucket_elems, psi);
    switch (z->zero_stage) {
    case 0: /* DDP-style all-reduce of one flattened bucket */
        bytes = smul(reduce, gb);
        break;
    case 1:
    case 2: /* ipg buffers: two when overlap_comm (double-buffered), plus the
             * all-gather of updated 16-bit params at the step */
        bytes = sadd(smul3(z->overlap_comm ? 2 : 1, reduce, gb), smul(gather, pb));
        break;
    default: { /* stage 3 */
        const int64_t unit = gather_unit(m);
        int64_t live = unit + imin(z->prefetch_bucket_elems, unit); /* current + prefetch */
        live = imin(live, imax(unit, z->max_live_params));          /* capped by max_live */
        live = imin(live, psi);
        bytes = smul(reduce, gb);                  /* one reduce-scatter bucket */
        bytes = sadd(bytes, smul(live, pb));       /* gathered 16-bit params */
        bytes = sadd(bytes, smul(imin(unit, psi), gb)); /* full-size grads of the unit */
        break;
    }
    }

    return sadd(bytes, compute_buffers(p));
}

static int check_plan(const dt_plan *p, dt_error *err) {
    const dt_parallel *z = &p->parallel;
    const dt_cluster *c = &p->cluster;
    int rc = dt_model_validate(&p->model, err);
    if (rc) return rc;
    if (c->nodes < 1 || c->gpus_per_node < 1)
        return dt_errorf(err, DT_EINVAL, "cluster: nodes (%lld) and gpus per node (%lld) must be >= 1",
                         (long long)c->nodes, (long long)c->gpus_per_node);
    if (z->world_size != c->nodes * c->gpus_per_node)
        return dt_errorf(err, DT_EINVAL,
                         "parallel.world_size %lld != nodes %lld x gpus_per_node %lld",
                         (long long)z->world_size, (long long)c->nodes,
                         (long long)c->gpus_per_node);
    if (z->zero_stage < 0 || z->zero_stage > 3)
        return dt_errorf(err, DT_EINVAL, "zero_stage %d: must be 0, 1, 2 or 3", z->zero_stage);
    rc = dt_ds_check_offload(z->zero_stage, z->offload_optimizer, z->offload_param, err);
    if (rc) return rc;
    if (z->reduce_bucket_elems < 1 || z->allgather_bucket_elems < 1 || z->prefetch_bucket_elems < 0 ||
        z->max_live_params < 0)
        return dt_errorf(err, DT_EINVAL,
                         "bucket sizes must be positive (reduce %lld, allgather %lld elements)",
                         (long long)z->reduce_bucket_elems, (long long)z->allgather_bucket_elems);
    if (p->batch.micro_batch < 1 || p->batch.seq_len < 1)
        return dt_errorf(err, DT_EINVAL, "micro-batch (%lld) and sequence length (%lld) must be >= 1",
                         (long long)p->batch.micro_batch, (long long)p->batch.seq_len);
    if (p->activations.ckpt_layers < 0 || p->activations.ckpt_layers > p->model.n_layer)
        return dt_errorf(err, DT_EINVAL, "checkpointed layers %lld: must be between 0 and %lld (the model's layers)",
                         (long long)p->activations.ckpt_layers, (long long)p->model.n_layer);
    return DT_OK;
}

int dt_memory_estimate_n(const dt_plan *p, int64_t n_params, dt_mem_breakdown *out,
                         dt_error *err) {
    memset(out, 0, sizeof *out);
    int rc = check_plan(p, err);
    if (rc) return rc;
    const dt_parallel *z = &p->parallel;
    const dt_precision *pr = &p->precision;
    const int64_t psi = n_params > 0 ? n_params : dt_model_params(&p->model);
    const int64_t N = z->world_size, n = p->cluster.gpus_per_node;
    const int64_t shard = ceil_div(psi, N);
    const int64_t pb = dt_precision_param_bytes(pr), gb = dt_precision_grad_bytes(pr);
    const int64_t ob = dt_precision_optimizer_bytes(pr);
    const int stage = z->zero_stage;

    /* model states on the device: ZeRO paper §5 (Ψ replicated or Ψ/N sharded) */
    out->params = z->offload_param != DT_OFFLOAD_NONE ? 0 : smul(pb, stage >= 3 ? shard : psi);
    out->grads = smul(gb, stage >= 2 ? shard : psi);
    out->optimizer = z->offload_optimizer != DT_OFFLOAD_NONE ? 0 : smul(ob, stage >= 1 ? shard : psi);
    out->activations = dt_memory_activations(p, p->activations.ckpt_layers);
    out->buffers = buffers_bytes(p, psi);
    out->reserve = p->cluster.hw.reserve_bytes;
    out->total = out->params;
    out->total = sadd(out->total, out->grads);
    out->total = sadd(out->total, out->optimizer);
    out->total = sadd(out->total, out->activations);
    out->total = sadd(out->total, out->buffers);
    out->total = sadd(out->total, out->reserve);

    /* host per node: the n local ranks' offloaded shards and pinned staging */
    if (z->offload_optimizer == DT_OFFLOAD_CPU) out->host_optimizer = smul3(n, ob, shard);
    if (z->offload_param == DT_OFFLOAD_CPU) out->host_params = smul3(n, pb, shard);
    if (z->offload_optimizer != DT_OFFLOAD_NONE) {
        /* the CPU optimizer reads an upcast gradient partition (fp32 with a master) */
        const int64_t hg = pr->has_master ? dt_dtype_size(pr->master) : gb;
        out->host_buffers = sadd(out->host_buffers, smul3(n, hg, shard));
    }
    if (z->offload_optimizer == DT_OFFLOAD_NVME) {
        const int64_t w = dt_dtype_size(pr->has_master ? pr->master : pr->moment);
        out->host_buffers = sadd(out->host_buffers,
                                 smul3(n, DS_OPT_SWAP_BUFFERS, smul(imin(DS_SUB_GROUP_ELEMS, shard), w)));
        out->nvme = sadd(out->nvme, smul3(n, ob, shard));
    }
    if (z->offload_param == DT_OFFLOAD_NVME) {
        out->host_buffers = sadd(out->host_buffers,
                                 smul3(n, DS_PARAM_SWAP_BUFFERS, smul(imin(DS_PARAM_BUFFER_ELEMS, shard), pb)));
        out->nvme = sadd(out->nvme, smul3(n, pb, shard));
    }
    out->host_total = sadd(sadd(out->host_params, out->host_optimizer), out->host_buffers);
    if (out->total >= MEM_SATURATE || out->host_total >= MEM_SATURATE)
        return dt_errorf(err, DT_EINVAL,
                         "the request needs more than 2^60 bytes per GPU or node (micro-batch %lld, "
                         "sequence %lld): use smaller sizes",
                         (long long)p->batch.micro_batch, (long long)p->batch.seq_len);
    return DT_OK;
}

int dt_memory_estimate(const dt_plan *p, dt_mem_breakdown *out, dt_error *err) {
    /* one rule (docs/models.md): a derived shape's model states use the requested count */
    return dt_memory_estimate_n(p, p->model.requested_params, out, err);
}
