/* memory.c — the memory model: bytes per rank (device), per node (host) and per
 * node on NVMe. Every formula and its source: docs/memory-model.md.
 *
 * Notation (as docs/activations.md): Ψ model-state parameters, N data-parallel
 * ranks, n ranks per node, B micro-batch, T sequence, C hidden, F ffn, H / Hkv
 * query / kv heads, d head dim, V vocab, L blocks, K checkpointed blocks,
 * a activation bytes. shard = ceil(Ψ / N) (partitions padded to equal size). */
#include "dt_memory.h"

#include "dt_dtrun_tp.h"
#include "dt_layout.h"
#include "dt_parallel3d.h"
#include "dt_consts.h"
#include "dt_model.h"
#include "dt_pgroup.h"

#include <stdint.h>
#include <string.h>

#include "dt_dsconfig.h"
#include "dt_ftplan.h"
#include "dt_vlmplan.h"
#include "dt_objplan.h"
#include "memory_internal.h"

/* fp32 logits and losses, int32 token ids: docs/activations.md. */
#define LOGIT_BYTES 4
#define TOKEN_ID_BYTES 4
#define LOSS_BYTES 4

/* The recompute area of a checkpointed block: a full block less its input (recomputed
 * whole: dtrun's engine and torch.utils.checkpoint alike; with selective recompute the
 * attention core is recomputed inside it too). */
static int64_t recompute_area(const dt_plan *p) {
    return dt_memory_activations_per_block(p, 0) - dt_memory_activations_per_block(p, 1);
}

int64_t dt_memory_activations(const dt_plan *p, int64_t ckpt_layers) {
    dt_ftplan ft;
    dt_error ignored;
    if (dt_ftplan_active(p) && !dt_ftplan_of(p, &ft, &ignored))   /* fine-tuning: planner/finetune.c */
        return dt_ftplan_activations(p, &ft, ckpt_layers);
    const int64_t L = p->model.n_layer;
    int64_t K = ckpt_layers < 0 ? 0 : (ckpt_layers > L ? L : ckpt_layers);
    const int64_t full = dt_memory_activations_per_block(p, 0), kept = dt_memory_activations_per_block(p, 1);
    int64_t total = smul(L - K, full);
    total = sadd(total, smul(K, kept));
    if (K > 0) total = sadd(total, recompute_area(p)); /* the one shared recompute area */
    return sadd(total, dt_memory_head_activations(p));
}

/* Largest unit the stage-3 engine gathers at once: one transformer block, or the
 * embedding / head when those are bigger (they are for LLM vocabularies). */
static int64_t gather_unit(const dt_model *m) {
    return imax(dt_model_block_params(m),
                imax(dt_model_embedding_params(m), dt_model_head_params(m)));
}

/* A Hugging Face run (runtime deepspeed / fsdp) on CPU ranks (issue 34): DeepSpeed's CPU
 * accelerator and PyTorch on gloo allocate the same partitions, buckets, gradient buffers,
 * optimizer states and activations as on GPUs, so every term is the GPU code's; the
 * reserve is the process's own measured footprint (the profile's deepspeed_runtime_bytes /
 * torch_runtime_bytes), and what DeepSpeed "offloads" to the host stays in the same
 * process: the rank's share of the host terms is in its total (docs/memory-model.md
 * "Hugging Face runs on CPU ranks"). */
int dt_memory_hf_on_cpu(const dt_plan *p) { return p->cluster.device == DT_DEVICE_CPU && hf_runtime(p); }

/* fp32 elements per token of the CPU engine's backward scratch (engine/model/lm.c
 * create): gpt2 dres, dC [C] each, dQKV [3·QD], dF [F]; llama dres, dC [C] each,
 * dQKV [QK + KVD] (q | k, then v), dF [2F] (gate | up), dA [max(QD, F)]. QD = heads x
 * head_dim is C for a whole GPT-2 and C / tp for its TP shard (planner/dtrun_tp.c). */
static int64_t cpu_scratch_per_token(const dt_model *m) {
    const int64_t C = m->hidden, F = m->ffn;
    const int64_t QD = m->n_head * m->head_dim, KVD = m->n_kv_head * m->head_dim;
    if (m->family == DT_FAMILY_GPT2) return 2 * C + 3 * QD + F;
    return 2 * C + (QD + 2 * KVD) + 2 * F + imax(QD, F);
}

/* fp32 elements per token of one block's working copies when activations are
 * 16-bit (lm.c alloc_f32_views): gpt2 x ln1 res1 ln2 xout [C], att [QD], qkv [3·QD],
 * fch gelu [F]; llama x ln1 res1 ln2 xout [C], att [QD], qk [QK], v [KVD],
 * gate | up [2F], act [F], and (q/k norm) the raw qk [QK]. */
static int64_t cpu_views_per_token(const dt_model *m) {
    const int64_t C = m->hidden, F = m->ffn;
    const int64_t QD = m->n_head * m->head_dim, KVD = m->n_kv_head * m->head_dim, QK = QD + KVD;
    if (m->family == DT_FAMILY_GPT2) return 5 * C + QD + 3 * QD + 2 * F;
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
        dt_ftplan ft;
        dt_error ignored = {0};
        /* freeze / LoRA: the trained and base sets have their own dtypes and widened copies
         * (planner/finetune.c dt_ftplan_dtrun_convert_bytes) */
        if (dt_ftplan_active(p) && !dt_ftplan_of(p, &ft, &ignored)) {
            bytes = sadd(bytes, dt_ftplan_dtrun_convert_bytes(p, &ft));
        } else {
            if (p->precision.param != DT_DTYPE_FP32) bytes = sadd(bytes, smul(f32, group));
            if (p->precision.grad != DT_DTYPE_FP32)
                bytes = sadd(bytes, sadd(smul(f32, group), sadd(smul(TOKEN_ID_BYTES, V), smul(TOKEN_ID_BYTES, BT))));
        }
        if (p->precision.activation != DT_DTYPE_FP32) {
            bytes = sadd(bytes, smul3(f32, BT, cpu_views_per_token(m)));
            if (p->activations.attention == DT_ATTN_MATERIALIZED)
                bytes = sadd(bytes, smul(f32, smul3(B, m->n_head, smul(T, T))));
        }
        return bytes;
    }
    /* the residual gradient in and out, and the widest in-linear gradient (q/k/v or
     * gate/up, from the family description); on a GPU the engine's cuBLAS workspace */
    bytes = sadd(bytes, smul3(a, BT, 2 * C + dt_model_block_widest_in(m)));
    return p->cluster.device == DT_DEVICE_CUDA ? sadd(bytes, DT_CUDA_GEMM_WORKSPACE_BYTES) : bytes;
}


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
/* Under a fine-tuning method the units hold only what is trained (a frozen unit's buffer
 * is one element: engine/dist/zero.c unit_buf_elems), E and U are their trained parts
 * (dt_model_zero_units). */
static int64_t cpu_engine_comm_buffers(const dt_plan *p, int64_t pb, int64_t gb) {
    const dt_parallel *z = &p->parallel;
    const int64_t N = z->zero_stage == 0 ? 1 : z->world_size;
    const int64_t k = z->overlap_comm ? 2 : 1, r = z->overlap_comm ? 3 : 1;
    int64_t E, U, state;
    dt_model_zero_units(&p->model, &p->finetune, N, &E, &U, &state);
    const int64_t Pmax = imax(E, U), S = Pmax / N, units = sadd(imax(E, 1), smul(k, imax(U, 1)));
    switch (z->zero_stage) {
    case 0: return 0;
    case 1: return sadd(smul3(k, Pmax, gb), smul(Pmax, pb));
    case 2: return sadd(sadd(smul(units, gb), smul3(r, S, gb)), smul(Pmax, pb));
    default: return sadd(smul(units, pb + gb), smul3(r, S, gb));
    }
}

/* One optimizer tile (ZeRO-3, elements): the plan's sub_group_size, never less than the
 * largest unit's shard (DeepSpeed: a parameter larger than sub_group_size is a sub-group
 * of its own, deepspeed/runtime/zero/stage3.py _create_fp16_sub_groups; the engine steps
 * one unit at a time, engine/dist/zero.c) and never more than the rank's shard. */
static int64_t optimizer_tile(const dt_plan *p, int64_t shard) {
    const int64_t N = p->parallel.world_size;
    int64_t E, U, state;
    dt_model_zero_units(&p->model, &p->finetune, N, &E, &U, &state);
    return imin(shard, imax(p->parallel.sub_group_elems, imax(E, U) / N));
}

/* ---- the CPU runtime term (docs/memory-model.md "The CPU runtime term") ----
 * What a CPU rank's process holds beyond what the engine allocates (and tracks):
 * the runtime itself (code, libraries, OpenMP / OpenBLAS, MPI), the MPI library's
 * temporaries of the gradient collectives, and the checkpoint I/O chunk. */

/* Bytes of one MPI library call of an all-reduce / reduce-scatter: engine/dist/dt_comm.h
 * DT_COMM_PIECE_BYTES (tests/engine/test_runtime_term.c checks that the two agree). Open
 * MPI's non-blocking collectives (libnbc) allocate a temporary of the whole call: an
 * in-place all-reduce on every rank, a reduce-scatter on rank 0 (measured on Open MPI
 * 4.1: +100 % of the call, docs/memory-model.md). */
#define CPU_COMM_PIECE_BYTES ((int64_t)32 << 20)
/* Bytes of the checkpoint / weights transfer buffer: engine/dist/dt_zero.h
 * DT_IO_CHUNK_BYTES (docs/dtrun.md "Bounded checkpoint I/O"). */
#define CPU_IO_CHUNK_BYTES ((int64_t)64 << 20)
/* Block reduce-scatters in flight beside the embedding's with overlap_comm
 * (engine/dist/zero.c): stage 1 has two send buckets, one of them the embedding's;
 * stages 2/3 the embedding's own gradient buffer and two block buffers. */
#define CPU_RS_BLOCKS_STAGE1 1
#define CPU_RS_BLOCKS_STAGE23 2

/* Rank 0's share of one reduce-scatter of `call` bytes: libnbc's temporary of the call,
 * or of a piece and the piece's packed send blocks when the call exceeds a piece. */
static int64_t cpu_rs_temporary(int64_t call) {
    return call <= CPU_COMM_PIECE_BYTES ? call : 2 * CPU_COMM_PIECE_BYTES;
}

/* The MPI temporaries alive in backward / the optimizer step on the rank that holds
 * the most (rank 0 receives every reduce-scatter's reduction first). */
static int64_t cpu_comm_temporaries(const dt_plan *p, int64_t psi) {
    const dt_parallel *z = &p->parallel;
    const int64_t W = z->world_size;
    dt_precision tp;   /* the trained set's (dtrun: LoRA's fp32 adapters) */
    dt_ftplan_dtrun_trained_precision(p, &tp);
    const int64_t gb = dt_precision_grad_bytes(&tp);
    if (W <= 1) return 0;   /* the "self" backend: local copies */
    if (z->zero_stage == 0) {
        const int64_t bucket = imin(z->reduce_bucket_elems, psi);
        const int64_t inflight = z->overlap_comm ? ceil_div(psi, bucket) : 1;
        return smul(inflight, imin(smul(gb, bucket), CPU_COMM_PIECE_BYTES));
    }
    int64_t E, U, state;   /* the trained parts under a fine-tuning method */
    dt_model_zero_units(&p->model, &p->finetune, W, &E, &U, &state);
    const int64_t te = cpu_rs_temporary(smul(gb, E)), tu = cpu_rs_temporary(smul(gb, U));
    if (!z->overlap_comm) return imax(te, tu);   /* one collective at a time */
    return sadd(te, smul(z->zero_stage == 1 ? CPU_RS_BLOCKS_STAGE1 : CPU_RS_BLOCKS_STAGE23, tu));
}

int dt_memory_cpu_runtime(const dt_plan *p, int64_t n_params, dt_mem_runtime *out) {
    memset(out, 0, sizeof *out);
    if (dt_dtrun_tp_active(p)) {   /* the TP shard over its DP group, the runtime of the whole world */
        dt_plan q;
        dt_dtrun_tp_shard_plan(p, &q);
        dt_memory_cpu_runtime(&q, 0, out);
        out->base = dt_hardware_runtime_bytes(&p->cluster.hw, p->parallel.world_size);
        /* the TP all-reduce's temporary (libnbc: the whole in-place call), alive beside the
         * DP group's in backward */
        out->comm = sadd(out->comm, imin(dt_dtrun_tp_allreduce_bytes(p), CPU_COMM_PIECE_BYTES));
        return 1;
    }
    if (!cpu_engine_layout(p) || hf_runtime(p)) return 0;
    const int64_t psi = n_params > 0 ? n_params : dt_model_params(&p->model);
    out->base = dt_hardware_runtime_bytes(&p->cluster.hw, p->parallel.world_size);
    out->comm = cpu_comm_temporaries(p, psi);
    /* the widest transfer: the optimizer state's fp32 pieces, the weights' */
    const int64_t shard = ceil_div(psi, p->parallel.zero_stage >= 1 ? p->parallel.world_size : 1);
    out->io = imin(CPU_IO_CHUNK_BYTES, smul(4, imax(shard, 1)));
    return 1;
}

/* Device temporaries alive at the peak (the start of backward), bytes per rank. */
static int64_t buffers_bytes(const dt_plan *p, int64_t psi) {
    const dt_parallel *z = &p->parallel;
    const dt_model *m = &p->model;
    const int64_t pb = dt_precision_param_bytes(&p->precision);
    const int64_t gb = dt_precision_grad_bytes(&p->precision);
    int64_t bytes = 0;

    if (cpu_engine_layout(p)) {   /* ZeRO's unit buffers hold the trained set, in its precision */
        dt_precision tp;
        dt_ftplan_dtrun_trained_precision(p, &tp);
        return sadd(cpu_engine_comm_buffers(p, dt_precision_param_bytes(&tp), dt_precision_grad_bytes(&tp)),
                    compute_buffers(p));
    }
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

/* Host per node and NVMe: the n local ranks' offloaded shards and pinned staging. FSDP's
 * CPUOffload keeps no 16-bit copy on the host: its fp32 sharded parameters are the
 * optimizer's master, counted with the optimizer. */
static void host_terms(const dt_plan *p, int64_t psi, int64_t shard, dt_mem_breakdown *out) {
    const dt_parallel *z = &p->parallel;
    const dt_precision *pr = &p->precision;
    const int64_t n = p->cluster.gpus_per_node;
    const int64_t pb = dt_precision_param_bytes(pr), gb = dt_precision_grad_bytes(pr);
    const int64_t ob = dt_precision_optimizer_bytes(pr);
    /* partial offload keeps the first sub-groups' states and fp32 gradients on the GPU */
    const int64_t host_shard = shard - dt_memory_ds_gpu_opt_elems(p, shard);
    if (z->offload_optimizer == DT_OFFLOAD_CPU) out->host_optimizer = smul3(n, ob, host_shard);
    if (p->runtime.kind == DT_RUNTIME_DEEPSPEED && z->offload_optimizer == DT_OFFLOAD_CPU &&
        (z->zero_stage == 1 || z->zero_stage == 2)) {
        /* stage_1_and_2.py DeepSpeedZeroOptimizer.__init__ with cpu_offload: the fp32 clone of
         * the partition is made whatever the model's dtype (single_partition_of_fp32_groups;
         * counted above only with a master), and a partition-sized buffer of the model's dtype
         * stages the updated weights back (param_buffer_of_bit16_for_cpu_offload_groups) */
        if (!pr->has_master) out->host_optimizer = sadd(out->host_optimizer, smul3(n, FP32_BYTES, host_shard));
        out->host_buffers = sadd(out->host_buffers, smul3(n, pb, host_shard));
    }
    if (z->offload_param == DT_OFFLOAD_CPU && p->runtime.kind != DT_RUNTIME_FSDP) {
        out->host_params = smul3(n, pb, shard);
        /* hpZ's secondary partition lives where the primary does (the remote device) */
        out->host_params = sadd(out->host_params, smul3(n, pb, dt_memory_ds_hpz_elems(p, psi)));
    }
    if (z->offload_optimizer != DT_OFFLOAD_NONE && !dt_memory_cpu_grads_in_place(p)) {
        /* the CPU optimizer reads an upcast gradient partition (fp32 with a master) */
        const int64_t hg = pr->has_master ? dt_dtype_size(pr->master) : gb;
        out->host_buffers = sadd(out->host_buffers, smul3(n, hg, host_shard));
    }
    if (z->offload_optimizer == DT_OFFLOAD_NVME) {
        const int64_t w = dt_dtype_size(pr->has_master ? pr->master : pr->moment);
        out->host_buffers = sadd(out->host_buffers,
                                 smul3(n, DT_DS_OPT_SWAP_BUFFERS, smul(optimizer_tile(p, shard), w)));
        out->nvme = sadd(out->nvme, smul3(n, ob, shard));
    }
    if (z->offload_param == DT_OFFLOAD_NVME) {
        out->host_buffers = sadd(out->host_buffers,
                                 smul3(n, DT_DS_PARAM_SWAP_BUFFERS, smul(imin(DT_DS_PARAM_BUFFER_ELEMS, shard), pb)));
        out->nvme = sadd(out->nvme, smul3(n, pb, shard));
    }
    out->host_total = sadd(sadd(out->host_params, out->host_optimizer), out->host_buffers);
}

static int saturated(const dt_plan *p, const dt_mem_breakdown *m, dt_error *err) {
    if (m->total < MEM_SATURATE && m->host_total < MEM_SATURATE) return DT_OK;
    return dt_errorf(err, DT_EINVAL,
                     "the request needs more than 2^60 bytes per GPU or node (micro-batch %lld, "
                     "sequence %lld): use smaller sizes",
                     (long long)p->batch.micro_batch, (long long)p->batch.seq_len);
}

/* ---- runtimes deepspeed / fsdp: what is live in each phase of the step ---- */

/* HF's causal-LM loss (transformers loss_utils.py ForCausalLMLoss: logits.float(), then
 * cross_entropy = log_softmax, which keeps its result, + nll_loss). In the loss backward the
 * kept log-probabilities, nll_loss's gradient and log_softmax's input gradient exist
 * together: 3 tensors of B·T·V, fp32 with upcast_logits (the forward's logits + fp32 copy +
 * log-probabilities, a + 8 bytes, are fewer), the activation dtype without. */
#define LOSS_BWD_TENSORS 3
/* Megatron-LM's _VocabParallelCrossEntropy (megatron/mpu/cross_entropy.py) turns the fp32
 * logits into the softmax in place, keeps that one buffer and writes the gradient into it
 * in backward: one tensor of B·T·V besides the 16-bit logits it was cast from. */
#define FUSED_LOSS_TENSORS 1
/* reduce_dtype of the FSDP mixed-precision policy (torchtitan: MixedPrecisionPolicy(
 * param_dtype=bfloat16, reduce_dtype=float32), torchtitan/models/llama3/infra/parallelize.py):
 * a unit's gradient is cast to fp32 before its reduce-scatter. */
#define FSDP_REDUCE_BYTES 4
/* FSDP keeps a unit gathered ahead of the one computing: the last block is not resharded
 * after forward and the next is prefetched in backward (torch.distributed.fsdp fully_shard,
 * default backward prefetch of one module). */
#define FSDP_LIVE_BLOCKS 2
/* FP16_Optimizer.step's gradient move (deepspeed/runtime/fp16/fused_optimizer.py): the
 * per-parameter fp32 copies and their flat concatenation, both alive at once */
#define FP16_OPT_FP32_GRAD_COPIES 2
/* the turn from forward to backward passes every later module twice (its forward, then
 * its backward) before a block is used again */
#define REUSE_PASSES 2

static int64_t hf_workspace(const dt_plan *p, int loss) {
    const dt_model *m = &p->model;
    const int64_t BT = smul(p->batch.micro_batch, p->batch.seq_len), a = act_bytes(p);
    /* token ids (int32 inputs and labels) live through the step */
    int64_t bytes = smul3(2, TOKEN_ID_BYTES, BT);
    /* the residual gradient in and out and the widest in-linear gradient */
    bytes = sadd(bytes, smul3(a, BT, 2 * m->hidden + dt_model_block_widest_in(m)));
    if (loss) {
        const int64_t e = p->runtime.upcast_logits ? FP32_BYTES : a;
        const int64_t per = p->runtime.fused_loss ? FUSED_LOSS_TENSORS * e + (p->runtime.upcast_logits ? a : 0)
                                                  : LOSS_BWD_TENSORS * e;
        bytes = sadd(bytes, smul3(per, BT, m->vocab));
        bytes = sadd(bytes, smul(LOSS_BYTES, BT));
    }
    return bytes;
}

int64_t dt_memory_hf_workspace(const dt_plan *p) { return hf_workspace(p, 1); }

/* DeepSpeed ZeRO-3 keeps a fetched module gathered while the trace says it is used again
 * within stage3_max_reuse_distance elements (partitioned_param_coordinator.py
 * __params_to_release: the upcoming modules' elements are counted until the distance is
 * reached). At the turn from forward to backward block j's next use comes after the
 * blocks behind it and the head, forward and backward: 2·((L - j)·U + head) elements, so
 * the last k blocks with 2·((k - 1)·U + head) < R stay gathered. */
static int64_t ds_reuse_blocks(int64_t R, int64_t L, int64_t unit, int64_t head) {
    if (unit <= 0 || R <= REUSE_PASSES * head) return 0;
    int64_t k = (R - REUSE_PASSES * head - 1) / (REUSE_PASSES * unit) + 1;
    return k < L ? k : L;
}

typedef struct {
    int64_t psi, shard, pb, gb, ob, w; /* w: the sharded fp32 copy's width (master, else params) */
    int64_t A, L, K, W;
    int stage;
    dt_offload oo, op;
} hf_sizes;

static void hf_sizes_of(const dt_plan *p, int64_t psi, hf_sizes *z) {
    const dt_precision *pr = &p->precision;
    z->psi = psi;
    z->W = p->parallel.world_size;
    z->shard = ceil_div(psi, z->W);
    z->pb = dt_precision_param_bytes(pr);
    z->gb = dt_precision_grad_bytes(pr);
    z->ob = dt_precision_optimizer_bytes(pr);
    z->w = pr->has_master ? dt_dtype_size(pr->master) : z->pb;
    z->A = p->batch.grad_accum;
    z->L = p->model.n_layer;
    z->K = p->activations.ckpt_layers;
    z->stage = p->parallel.zero_stage;
    z->oo = p->parallel.offload_optimizer;
    z->op = p->parallel.offload_param;
}

/* The start of backward is two moments: the loss backward (every activation, the loss's
 * B·T·V buffers) and, right after it, the last block's backward (the loss buffers freed; the
 * block recomputed into the shared area when it is checkpointed, K = L). The phase is the
 * larger; at the embedding's backward only block 1's activations remain, recomputed when
 * checkpointed: one full block. */
static void hf_start_phase(const dt_plan *p, const hf_sizes *z, int64_t *act, int64_t *ws) {
    int64_t base = dt_memory_activations(p, z->K);
    if (z->K > 0) base -= recompute_area(p);
    const int64_t loss = sadd(base, hf_workspace(p, 1));
    const int64_t last_block = sadd(sadd(base, z->K == z->L ? recompute_area(p) : 0), hf_workspace(p, 0));
    *act = loss >= last_block ? base : sadd(base, z->K == z->L ? recompute_area(p) : 0);
    *ws = loss >= last_block ? hf_workspace(p, 1) : hf_workspace(p, 0);
}

/* Elements of one block ZeRO-3 fetches (its tensors above the persistence threshold). */
#define MAX_BLOCK_MODULES 16
static int64_t block_fetched(const dt_model *m, int64_t threshold) {
    int64_t sizes[MAX_BLOCK_MODULES], n = 0;
    int k = dt_model_block_fetch_sizes(m, threshold, sizes, MAX_BLOCK_MODULES);
    for (int i = 0; i < k && i < MAX_BLOCK_MODULES; i++) n += sizes[i];
    return n;
}

/* DeepSpeed (stage_1_and_2.py, stage3.py; DeepSpeed 0.16.5): the device terms per phase. */
static void ds_phases(const dt_plan *p, const hf_sizes *z, dt_mem_breakdown ph[DT_MEM_PHASE_COUNT]) {
    const dt_parallel *q = &p->parallel;
    const dt_model *m = &p->model;
    dt_mem_breakdown *s = &ph[DT_MEM_PHASE_BWD_START], *e = &ph[DT_MEM_PHASE_BWD_END], *st = &ph[DT_MEM_PHASE_STEP];
    const int64_t reduce = imin(q->reduce_bucket_elems, z->psi), gather = imin(q->allgather_bucket_elems, z->psi);
    /* params: stage 3 partitions all but the tensors under stage3_param_persistence_threshold */
    int64_t params = smul(z->pb, z->psi);
    if (z->stage == 3) {
        const int64_t persist = imin(dt_model_small_tensor_params(m, p->runtime.persistence_threshold), z->psi);
        params = z->op != DT_OFFLOAD_NONE ? smul(z->pb, persist)
                                          : smul(z->pb, sadd(ceil_div(z->psi - persist, z->W), persist));
        if (z->op == DT_OFFLOAD_NONE) params = sadd(params, smul(z->pb, dt_memory_ds_hpz_elems(p, z->psi)));
    }
    /* partial offload (stage3.py subgroup_to_device): the GPU's sub-groups keep their fp32
     * master, moments and fp32 gradient on the device from initialisation
     * (initialize_optimizer_states: the sub-group's gradient buffer .to(subgroup_to_device[i])) */
    const int64_t gpu_opt = dt_memory_ds_gpu_opt_elems(p, z->shard);
    int64_t opt = z->oo != DT_OFFLOAD_NONE ? smul(z->ob, gpu_opt)
                                           : smul(z->ob, z->stage >= 1 ? z->shard : z->psi);
    /* ZeRO-1/2 clone the partition the optimizer steps on into fp32 also when the model is
     * fp32 (no master in the precision): stage_1_and_2.py DeepSpeedZeroOptimizer.__init__,
     * single_partition_of_fp32_groups = the partition .detach().clone().to(
     * master_weights_and_grads_dtype); ZeRO-3 shares the flat partition when the dtypes
     * match (stage3.py _create_fp32_partitions). Measured on CPU ranks (issue 34). */
    if ((z->stage == 1 || z->stage == 2) && !p->precision.has_master && z->oo == DT_OFFLOAD_NONE)
        opt = sadd(opt, smul(FP32_BYTES, z->shard));
    /* gradients: with offload_optimizer the reduced partition goes to pinned host memory
     * (self.device = cpu: stage_1_and_2.py single_partition_of_fp32_groups[i].grad,
     * stage3.py grad_partitions_flat_buffer); without, it stays on the device. Stage 1
     * accumulates whole param.grad between boundaries and reduces into its partition at
     * the boundary (reduce_ready_partitions_and_remove_grads: "if self.partition_gradients
     * or self.is_gradient_accumulation_boundary"); stage 2 reduces every micro-step; stage
     * 3's partition buffer exists from initialisation. */
    const int64_t part = z->oo != DT_OFFLOAD_NONE ? smul(z->w, gpu_opt) : smul(z->gb, z->shard);
    const int64_t full = smul(z->gb, z->psi), accum = z->A > 1;
    int64_t g_start = 0, g_end = part;
    switch (z->stage) {
    case 0: g_start = accum ? full : 0, g_end = full; break;
    case 1: g_start = accum ? full : 0; break;
    case 2: g_start = accum ? part : 0; break;
    default: g_start = part; break;
    }
    int64_t a_start, b_start, b_end = hf_workspace(p, 0), b_step = 0;
    hf_start_phase(p, z, &a_start, &b_start);
    /* the fp32 copy of the gradient partition the optimizer steps on (stage_1_and_2.py
     * step: single_grad_partition; stage3.py _prepare_fp32_grad_for_sub_group, one
     * sub_group_size tile at a time) */
    const int64_t fp32_part = z->oo != DT_OFFLOAD_NONE ? 0 : smul(z->w, z->stage == 3 ? optimizer_tile(p, z->shard) : z->shard);
    switch (z->stage) {
    case 0: /* engine.allreduce_gradients: flat buckets after backward; the step moves the 16-bit
             * gradients to the master (deepspeed/runtime/fp16/fused_optimizer.py FP16_Optimizer.step:
             * _flatten_dense_tensors([p.grad.to(fp32) for p in group]) holds the per-parameter fp32
             * copies and their flat concatenation at once, before p.grad is released) */
        if (z->W > 1) b_end = sadd(b_end, smul(z->gb, reduce));
        if (p->precision.has_master) b_step = smul3(FP16_OPT_FP32_GRAD_COPIES, z->w, z->psi);
        break;
    case 1:
    case 2: { /* ipg buffers during backward (two with overlap_comm); the updated 16-bit params are
               * all-gathered in allgather_bucket_size pieces after the step */
        const int64_t ipg = smul3(q->overlap_comm ? 2 : 1, reduce, z->gb);
        b_start = sadd(b_start, ipg);
        b_end = sadd(b_end, ipg);
        b_step = imax(fp32_part, z->W > 1 ? smul(z->pb, gather) : 0);
        break;
    }
    default: { /* stage 3: the ipg bucket (allocated at initialisation), the gathered modules,
                * one module's full-size gradient before it enters the bucket */
        const int64_t unit = block_fetched(m, p->runtime.persistence_threshold);
        const int64_t head = m->hidden * m->vocab, emb = dt_model_embedding_params(m);
        const int64_t largest = p->runtime.largest_layer == DT_LARGEST_BLOCK_MATRIX ? dt_model_largest_block_matrix_params(m)
                                                                                 : dt_model_largest_module_params(m);
        const int64_t kept = ds_reuse_blocks(p->runtime.max_reuse_distance, z->L, unit, head);
        const int64_t prefetch = imin(q->prefetch_bucket_elems, unit);
        const int64_t shape = dt_model_params(m);
        const int64_t ipg = smul(z->gb, reduce), tgrad = smul(z->gb, imin(largest, z->psi));
        b_start = sadd(b_start, sadd(ipg, tgrad));
        b_start = sadd(b_start, smul(z->pb, imin(shape, sadd(head, sadd(smul(kept, unit), prefetch)))));
        b_end = sadd(b_end, sadd(ipg, tgrad));
        b_end = sadd(b_end, smul(z->pb, imin(shape, emb)));
        b_step = sadd(ipg, fp32_part);
        break;
    }
    }
    const int64_t a_end = dt_memory_activations_per_block(p, 0);
    for (int i = DT_MEM_PHASE_BWD_START; i < DT_MEM_PHASE_COUNT; i++) ph[i].params = params, ph[i].optimizer = opt;
    s->grads = g_start, e->grads = g_end, st->grads = g_end;
    s->activations = a_start, e->activations = a_end;
    s->buffers = b_start, e->buffers = b_end, st->buffers = b_step;
}
/* PyTorch FSDP (fully_shard with bf16 compute, fp32 sharded parameters; stage 3 =
 * FULL_SHARD, 2 = SHARD_GRAD_OP (no reshard after forward), 0 = DDP with autocast): the
 * sharded fp32 parameters are the optimizer's master, so the states are w + w + m + v per
 * parameter; units (a block; the root: embeddings, final norm, lm_head) are gathered in
 * the compute dtype. */
static void fsdp_phases(const dt_plan *p, const hf_sizes *z, dt_mem_breakdown ph[DT_MEM_PHASE_COUNT]) {
    const dt_model *m = &p->model;
    dt_mem_breakdown *s = &ph[DT_MEM_PHASE_BWD_START], *e = &ph[DT_MEM_PHASE_BWD_END], *st = &ph[DT_MEM_PHASE_STEP];
    const int64_t moments = z->ob - (p->precision.has_master ? z->w : 0);
    const int off = z->oo != DT_OFFLOAD_NONE;   /* CPUOffload: params, grads and the step on the host */
    const int64_t n_res = z->stage == 0 ? z->psi : z->shard;
    const int64_t params = off ? 0 : smul(z->w, n_res), opt = off ? 0 : smul(moments, n_res);
    const int64_t grads = off ? 0 : smul(z->w, n_res);
    /* torch.optim.AdamW(foreach=True) allocates one temporary the size of the state
     * (torch/optim/adam.py _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(...)) */
    const int64_t step_tmp = off ? 0 : smul(z->w, n_res);
    int64_t a_start, b_start, b_end = hf_workspace(p, 0), b_step = step_tmp;
    hf_start_phase(p, z, &a_start, &b_start);
    if (z->stage == 0) {
        /* DDP: gradient buckets as large as the gradients (gradient_as_bucket_view=False,
         * torch.nn.parallel.DistributedDataParallel's default), allocated at construction;
         * autocast's 16-bit weight copies, kept by the linears for backward */
        const int64_t buckets = z->W > 1 ? smul(z->w, z->psi) : 0;
        const int64_t casts = z->w != z->pb ? smul(z->pb, z->psi) : 0;
        b_start = sadd(b_start, sadd(buckets, casts));
        b_end = sadd(b_end, buckets);
        b_step = sadd(b_step, buckets);
    } else {
        const int64_t unit = dt_model_block_params(m), shape = dt_model_params(m);
        const int64_t root = dt_model_embedding_params(m) + dt_model_head_params(m);
        const int64_t live = z->stage == 2 ? shape : imin(shape, sadd(root, smul(FSDP_LIVE_BLOCKS, unit)));
        b_start = sadd(b_start, sadd(smul(z->pb, live), smul(z->pb, root)));   /* + the root's 16-bit grads */
        b_end = sadd(b_end, smul(z->pb, imin(shape, sadd(root, unit))));
        b_end = sadd(b_end, smul(z->pb + FSDP_REDUCE_BYTES, root));   /* the root's grads and their fp32 cast */
    }
    const int64_t a_end = dt_memory_activations_per_block(p, 0);
    for (int i = DT_MEM_PHASE_BWD_START; i < DT_MEM_PHASE_COUNT; i++) ph[i].params = params, ph[i].optimizer = opt;
    s->grads = z->A > 1 ? grads : 0, e->grads = grads, st->grads = grads;
    s->activations = a_start, e->activations = a_end;
    s->buffers = b_start, e->buffers = b_end, st->buffers = b_step;
}

const char *dt_mem_phase_name(dt_mem_phase ph) {
    static const char *const names[DT_MEM_PHASE_COUNT] = {"all terms", "backward start", "backward end",
                                                          "optimizer step"};
    return (unsigned)ph < DT_MEM_PHASE_COUNT ? names[ph] : "?";
}

/* dtrun: every term at once (its engine allocates its buffers up front). */
static void dtrun_sum(const dt_plan *p, int64_t psi, dt_mem_breakdown *out) {
    const dt_parallel *z = &p->parallel;
    const dt_precision *pr = &p->precision;
    const int64_t N = z->world_size;
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
}

static void total_of(dt_mem_breakdown *m) {
    m->total = m->params;
    m->total = sadd(m->total, m->grads);
    m->total = sadd(m->total, m->optimizer);
    m->total = sadd(m->total, m->activations);
    m->total = sadd(m->total, m->buffers);
    m->total = sadd(m->total, m->reserve);
}

static int checked_phases(const dt_plan *p, int64_t n_params, dt_mem_phases *out, dt_error *err);

/* A dtrun TP plan on CPU ranks (planner/dtrun_tp.c): the engine's TP shard on its DP group,
 * plus the TP group's buffers; the runtime term of the whole world. */
static int dtrun_tp_phases(const dt_plan *p, dt_mem_phases *out, dt_error *err) {
    if (p->finetune.method != DT_FT_FULL)
        return dt_errorf(err, DT_EINVAL, "layout.tp %lld with finetune.method %s: dtrun's tensor parallelism trains "
                         "full fine-tuning only; plan the method with tp 1 (dtplan solve --no-layouts)",
                         (long long)dt_layout_of(p).tp, dt_ft_method_name(p->finetune.method));
    dt_plan q;   /* the shard's shape is the engine's, not a model of its own (gpt2: heads x head_dim < hidden) */
    dt_dtrun_tp_shard_plan(p, &q);
    int rc = checked_phases(&q, 0, out, err);
    if (rc) return rc;
    dt_mem_runtime rt;
    dt_memory_cpu_runtime(p, 0, &rt);
    dt_mem_breakdown *m = &out->at[out->peak];
    m->buffers = sadd(m->buffers, dt_dtrun_tp_buffers(p));
    m->reserve = sadd(rt.base, imax(rt.comm, rt.io));
    total_of(m);
    return saturated(p, m, err);
}

void dt_memory_objective_terms(const dt_plan *p, dt_obj_terms *t) {
    dt_objplan_terms(p, t);
    if (!t->ref_held || p->runtime.kind != DT_RUNTIME_DTRUN) return;
    /* dtrun's reference (engine/run/objective_pairs.c objrun_reference_open): a dt_lm of the
     * policy's rows without checkpointing or a fine-tuning method, forward only (no gradient
     * buffer; the activation and scratch layout of a trained model all the same) */
    dt_plan ref;
    int64_t n = 0;
    if (!dt_objplan_shape(p, &n, &ref)) ref = *p;
    dt_finetune_defaults(DT_FT_FULL, &ref.finetune);
    ref.activations.ckpt_layers = 0;
    t->ref_activations = dt_memory_activations(&ref, 0);
    t->ref_buffers = compute_buffers(&ref);
}

int dt_memory_phases(const dt_plan *p, int64_t n_params, dt_mem_phases *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    int rc = check_plan(p, err);
    if (rc) return rc;
    if (dt_dtrun_tp_active(p)) return dtrun_tp_phases(p, out, err);   /* dtrun's own TP terms */
    return checked_phases(p, n_params, out, err);
}

/* dt_memory_phases on a plan whose shape is checked (the caller's, or the engine's TP shard). */
static int checked_phases(const dt_plan *p, int64_t n_params, dt_mem_phases *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    /* objectives (planner/objective.c): the policy's shape under pairs / a score head, the
     * other models' persistent terms per phase, the generation phase after */
    const dt_plan *orig = p;
    dt_plan shaped;
    dt_obj_terms ot;
    const int obj = dt_objplan_active(p);
    if (obj && dt_objplan_shape(orig, &n_params, &shaped)) p = &shaped;
    if (obj) dt_memory_objective_terms(orig, &ot);
    int rc = dt_vlmplan_check(p, err);
    if (rc) return rc;
    if (dt_layout_active(p)) {   /* TP / CP / PP: the binding pipeline stage (planner/parallel3d.c) */
        if (p->finetune.method != DT_FT_FULL)
            return dt_errorf(err, DT_EINVAL, "a layout (TP / CP / PP) with finetune.method %s is not modelled yet: "
                             "plan the method without a layout (dtplan solve --no-layouts), or full fine-tuning",
                             dt_ft_method_name(p->finetune.method));
        out->peak = DT_MEM_PHASE_SUM;
        if ((rc = dt_p3_memory(p, n_params, NULL, &out->at[DT_MEM_PHASE_SUM], err))) return rc;
        return saturated(p, &out->at[DT_MEM_PHASE_SUM], err);
    }
    int64_t psi = n_params > 0 ? n_params : dt_model_params(&p->model);
    /* fine-tuning (planner/finetune.c): the state terms below count the parameters with a
     * gradient and optimizer state; the frozen base and the adapters' dtype are added after */
    dt_ftplan ft;
    dt_ft_terms ftt;
    const int fine = dt_ftplan_active(p);
    if (fine && ((rc = dt_ftplan_of(p, &ft, err)) || (rc = dt_ftplan_terms(p, &ft, &ftt)))) return rc;
    if (fine) psi = ft.trained + ft.adapter;
    dt_mem_breakdown host;
    memset(&host, 0, sizeof host);
    host_terms(p, psi, ceil_div(psi, p->parallel.world_size), &host);
    if (fine) host.host_params = sadd(host.host_params, ftt.frozen_host), host.host_total = sadd(host.host_total, ftt.frozen_host);
    int first = DT_MEM_PHASE_SUM, last = DT_MEM_PHASE_SUM;
    dt_mem_runtime rt;
    const int cpu_rt = dt_memory_cpu_runtime(p, psi, &rt);
    if (!hf_runtime(p)) {
        dtrun_sum(p, psi, &out->at[DT_MEM_PHASE_SUM]);
    } else {
        hf_sizes z;
        hf_sizes_of(p, psi, &z);
        if (p->runtime.kind == DT_RUNTIME_FSDP) fsdp_phases(p, &z, out->at);
        else ds_phases(p, &z, out->at);
        first = DT_MEM_PHASE_BWD_START, last = DT_MEM_PHASE_STEP;
    }
    out->peak = (dt_mem_phase)first;
    for (int i = first; i <= last; i++) {
        dt_mem_breakdown *m = &out->at[i];
        /* CPU ranks: the runtime term, at its largest phase (collectives or I/O) */
        m->reserve = cpu_rt ? sadd(rt.base, imax(rt.comm, rt.io)) : p->cluster.hw.reserve_bytes;
        if (dt_memory_hf_on_cpu(p))
            m->reserve = dt_hardware_hf_runtime_bytes(&p->cluster.hw, p->runtime.kind == DT_RUNTIME_DEEPSPEED,
                                                      p->parallel.zero_stage);
        if (fine) dt_ftplan_add_memory(p, &ft, m);
        if (obj) dt_objplan_add_phase(&ot, m);
        total_of(m);
        m->host_params = host.host_params, m->host_optimizer = host.host_optimizer;
        m->host_buffers = host.host_buffers, m->host_total = host.host_total, m->nvme = host.nvme;
        if (dt_memory_hf_on_cpu(p))   /* the offloaded states live in the rank's own process */
            m->total = sadd(m->total, ceil_div(host.host_total, p->cluster.gpus_per_node));
        if ((rc = saturated(p, m, err))) return rc;
        if (m->total > out->at[out->peak].total) out->peak = (dt_mem_phase)i;
    }
    if (obj) dt_objplan_generation(orig, &ot, out, 1);
    return DT_OK;
}

int dt_memory_estimate_n(const dt_plan *p, int64_t n_params, dt_mem_breakdown *out, dt_error *err) {
    dt_mem_phases ph;
    memset(out, 0, sizeof *out);
    int rc = dt_memory_phases(p, n_params, &ph, err);
    if (rc) return rc;
    *out = ph.at[ph.peak];
    return DT_OK;
}

int dt_memory_estimate(const dt_plan *p, dt_mem_breakdown *out, dt_error *err) {
    /* one rule (docs/models.md): a derived shape's model states use the requested count */
    return dt_memory_estimate_n(p, p->model.requested_params, out, err);
}
