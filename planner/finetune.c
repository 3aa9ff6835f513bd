/* finetune.c — memory and time of frozen / trained / adapter parameter groups
 * (dt_ftplan.h). Formulas and sources: docs/finetune.md, docs/memory-model.md
 * "Fine-tuning". Notation: B micro-batch, T sequence, a activation bytes, e compute
 * bytes, N ranks, r LoRA rank, L blocks, j0 the first block backward reaches. */
#include "dt_ftplan.h"
#include "dt_activations.h"
#include "dt_model.h"
#include "dt_vision.h"
#include "dt_vlmplan.h"

#include <stdio.h>
#include <string.h>

/* torch's native_dropout keeps a bool mask: one byte per element (aten Dropout.cpp; the fused
 * kernel the GPU runtimes take; on a CPU torch keeps the mask in the input's dtype). */
#define FT_MASK_BYTES 1
/* fp32 copies and statistics (RMSNorm's upcast input, its reciprocal RMS per row). */
#define FT_FP32_BYTES 4
#define FT_STAT_BYTES 4
/* int32 token ids (the engine's embedding-gradient chains, engine/model/lm.c tok_head / tok_next) */
#define FT_TOKEN_ID_BYTES 4
/* LoRA's kernels per adapted linear (peft tuners/lora/layer.py Linear.forward:
 * result + lora_B(lora_A(dropout(x))) * scaling): forward A, B, the scaled add; backward
 * through the add and the scale, B's two GEMMs (dX, dW), A's two; dropout adds one kernel
 * each way. */
#define LORA_FWD_KERNELS 3.0
#define LORA_BWD_KERNELS 6.0
/* A LoRA linear's FLOPs: forward 2 (in + out) r per token; backward twice that (the input
 * gradient through B then A, and both weight gradients). */
#define LORA_BWD_OVER_FWD 2.0
/* Backward of a linear whose weight is trained: dX and dW, each a forward's FLOPs; frozen:
 * dX only (derivatives of mm: mat2 needs no gradient). Attention's backward: 2 x forward. */
#define GEMMS_PER_TRAINED_BWD 2.0
#define ATTN_BWD_OVER_FWD 2.0
#define FLOPS_PER_MAC 2.0
/* A quantised weight is dequantised on every use (bitsandbytes MatMul4Bit.forward, and its
 * backward's dequantize_4bit for the input gradient): forward, backward, and the recompute
 * of a checkpointed block. Bytes per element: the packed 4 bits read (or 1 for int8) and
 * the compute-dtype copy written. */
#define DEQUANT_READ_4BIT 0.5
#define DEQUANT_READ_INT8 1.0
/* The fixed cost of one GPU kernel where the profile states none: dt_gemmtime.h's. */
#define FT_GPU_LAUNCH_S DT_GPU_LAUNCH_S

int dt_ftplan_active(const dt_plan *p) { return p->finetune.method != DT_FT_FULL || dt_vlm_active(&p->vlm); }

static int hf_runtime(const dt_plan *p) { return p->runtime.kind != DT_RUNTIME_DTRUN; }

/* The vision side's groups; the stage pretrain freezes the language model (LLaVA-1.5's
 * pretrain.sh: tune_mm_mlp_adapter, the rest requires_grad_(False)). */
static int vlm_groups(const dt_plan *p, dt_ftplan *out, dt_error *err) {
    if (!dt_vlm_trains_llm(&p->vlm)) {
        if (p->finetune.method != DT_FT_FULL)
            return dt_errorf(err, DT_EINVAL, "--vlm-stage pretrain trains the projector only (the language model is "
                             "frozen): --finetune %s has nothing to train there; use it with --vlm-stage sft (LLaVA's "
                             "finetune_lora.sh)", dt_ft_method_name(p->finetune.method));
        for (int i = 0; i < out->g.n; i++) out->g.g[i].train = DT_TRAIN_FROZEN;
    }
    return dt_vision_pgroups(&p->vlm, &p->model, p->precision.param, &out->tower, &out->projector, err);
}

int dt_ftplan_of(const dt_plan *p, dt_ftplan *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    int rc = dt_model_pgroups(&p->model, &p->finetune, p->precision.param, DT_ROLE_POLICY, &out->g, err);
    if (rc || (dt_vlm_active(&p->vlm) && (rc = vlm_groups(p, out, err)))) return rc;
    const dt_pgroups *all[3] = {&out->g, &out->tower, &out->projector};
    for (int i = 0; i < 3; i++) {
        out->trained += dt_pgroups_elems(all[i], DT_TRAIN_TRAINED);
        out->adapter += dt_pgroups_elems(all[i], DT_TRAIN_ADAPTER);
        out->frozen += dt_pgroups_elems(all[i], DT_TRAIN_FROZEN);
        out->frozen_bytes += dt_pgroups_bytes(all[i], DT_TRAIN_FROZEN);
    }
    out->first_layer = dt_pgroups_first_trained_layer(&out->g);
    out->grad_into_first = dt_pgroups_embedding_trained(&out->g);
    if (hf_runtime(p) && p->activations.ckpt_layers > 0) out->first_layer = 0, out->grad_into_first = 1;
    if (dt_vlm_active(&p->vlm)) out->first_layer = 0, out->grad_into_first = 1;   /* to the image features */
    out->dequant_elems = dt_pgroups_largest_quantized(&out->g);
    return DT_OK;
}

int64_t dt_ftplan_state_elems(const dt_plan *p) {
    dt_ftplan ft;
    dt_error e = {0};
    if (!dt_ftplan_active(p) || dt_ftplan_of(p, &ft, &e)) return 0;
    return ft.trained + ft.adapter;
}

static int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; }
static int64_t act_bytes(const dt_plan *p) { return dt_dtype_size(p->precision.activation); }
static int64_t tokens(const dt_plan *p) { return p->batch.micro_batch * p->batch.seq_len; }

/* ---- activations ---- */

/* Blocks whose groups are alike: the cut points of every group's layer range, and the
 * first block backward reaches on its own (no gradient may flow into its input). */
#define MAX_CUTS (2 * DT_PGROUPS_MAX + 4)
static int layer_cuts(const dt_pgroups *g, int64_t L, int64_t j0, int64_t *cuts) {
    int n = 0;
    cuts[n++] = 0;
    cuts[n++] = L;
    cuts[n++] = j0 < L ? j0 : L;
    cuts[n++] = j0 + 1 < L ? j0 + 1 : L;
    for (int i = 0; i < g->n; i++)
        if (g->g[i].in_block) cuts[n++] = g->g[i].first_layer, cuts[n++] = g->g[i].first_layer + g->g[i].n_layers;
    for (int i = 1; i < n; i++)   /* insertion sort, then unique */
        for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
            int64_t t = cuts[j];
            cuts[j] = cuts[j - 1], cuts[j - 1] = t;
        }
    int u = 0;
    for (int i = 0; i < n; i++)
        if (!u || cuts[i] != cuts[u - 1]) cuts[u++] = cuts[i];
    return u;
}

/* One block in the backward, not checkpointed: the full block's bytes less what is not kept,
 * plus LoRA's (dt_pgroups_block_saved). Split into its parts for dt_ftplan_terms. */
typedef struct { int64_t kept, dropped, lora, dropout; } block_bytes;

static block_bytes ft_block(const dt_plan *p, const dt_ftplan *ft, int64_t layer) {
    dt_ft_saved s;
    const int grad_in = layer > ft->first_layer || ft->grad_into_first;
    const int keeps_out = p->activations.attention != DT_ATTN_MATERIALIZED;   /* flash / sdpa keep their output */
    dt_pgroups_block_saved(&p->model, &ft->g, &p->finetune, layer, keeps_out, grad_in, &s);
    const int64_t a = act_bytes(p), BT = tokens(p);
    const int hf = hf_runtime(p), upcast = hf && p->runtime.upcast_norm && p->model.family == DT_FAMILY_LLAMA;
    block_bytes b;
    b.dropped = a * BT * s.dropped;
    /* Hugging Face's RMSNorm (hidden.to(fp32) ... weight * normalised.to(dtype)): a frozen
     * weight's product keeps only the weight, not the normalised tensor */
    if (hf && p->model.family == DT_FAMILY_LLAMA) b.dropped += a * BT * s.frozen_rms;
    /* no gradient into the block: the first norm keeps nothing for its input gradient (the
     * fp32 upcast copy and the reciprocal RMS under HF; the input and statistics otherwise,
     * unless a trained weight still reads them) */
    if (s.first_norm && upcast) b.dropped += BT * (FT_FP32_BYTES * s.first_norm + FT_STAT_BYTES);
    else if (s.first_norm && !s.first_norm_trained) b.dropped += BT * (a * s.first_norm + FT_STAT_BYTES);
    b.lora = a * BT * s.lora_rank;
    b.dropout = (a + FT_MASK_BYTES) * BT * s.lora_dropout_in - FT_MASK_BYTES * BT * s.masks_unkept;
    b.kept = dt_memory_activations_per_block(p, 0) - b.dropped + b.lora + b.dropout;
    return b;
}

typedef struct { int64_t total, skipped, dropped, lora, dropout; } act_sum;

static act_sum ft_activations(const dt_plan *p, const dt_ftplan *ft, int64_t K) {
    act_sum r = {0, 0, 0, 0, 0};
    const int64_t L = p->model.n_layer, full = dt_memory_activations_per_block(p, 0);
    const int64_t ck = dt_memory_activations_per_block(p, 1);
    int64_t cuts[MAX_CUTS], recompute = 0;
    const int nc = layer_cuts(&ft->g, L, ft->first_layer, cuts);
    for (int c = 0; c + 1 < nc; c++)
        for (int part = 0; part < 2; part++) {   /* the checkpointed first K, then the rest */
            int64_t lo = cuts[c], hi = cuts[c + 1];
            if (part == 0 && hi > K) hi = K;
            if (part == 1 && lo < K) lo = K;
            if (lo < ft->first_layer) lo = ft->first_layer < hi ? ft->first_layer : hi;
            const int64_t n = hi > lo ? hi - lo : 0;
            if (!n) continue;
            const block_bytes b = ft_block(p, ft, lo);
            if (part == 0) {
                r.total += n * ck;
                if (b.kept - ck > recompute) recompute = b.kept - ck;   /* the one shared recompute area */
                continue;
            }
            r.total += n * b.kept;
            r.dropped += n * b.dropped, r.lora += n * b.lora, r.dropout += n * b.dropout;
        }
    /* what full fine-tuning would keep in the blocks below j0: the checkpointed first K, the rest whole */
    const int64_t j0 = ft->first_layer;
    r.skipped = (K < j0 ? K : j0) * ck + (j0 > K ? j0 - K : 0) * full;
    const int64_t head_drop = act_bytes(p) * tokens(p) * dt_pgroups_head_dropped(&p->model, &ft->g);
    r.dropped += head_drop;
    r.total += recompute + dt_memory_head_activations(p) - head_drop;
    return r;
}

/* Elements per token of block `layer`'s record that dtrun's backward does not read: a
 * sublayer's norm output when none of its in-linears is trained or adapted, its out
 * linear's input when that linear is neither and the attention kernel does not read it
 * (materialized attention; flash reads its output). The norms' backward reads their input. */
static int64_t dtrun_block_unread(const dt_plan *p, const dt_ftplan *ft, const dt_model_desc *d, int64_t layer) {
    const dt_sublayer_desc *subs[2] = {&d->block.attn, &d->block.mlp};
    int64_t n = 0;
    for (int k = 0; k < 2; k++) {
        const dt_sublayer_desc *sub = subs[k];
        int read = 0, tr, ad;
        for (int i = 0; i < sub->n_in; i++) {
            dt_pgroups_module_state(&ft->g, sub->in[i].name, layer, &tr, &ad);
            read |= tr || ad;
        }
        if (!read) n += sub->norm.width * sub->norm.rows;
        dt_pgroups_module_state(&ft->g, sub->out.name, layer, &tr, &ad);
        const int core_reads_out = k == 0 && p->activations.attention != DT_ATTN_MATERIALIZED;
        if (!tr && !ad && !core_reads_out) n += sub->out.in;
    }
    return n;
}

/* Runtime dtrun: the engine's own layout (engine/model/lm.c layout_acts), which keeps what
 * its kernels read rather than what autograd saves. With j0 the first block backward
 * reaches, K the checkpointed blocks, S = max(K, j0):
 *   - the residual stream x[0..L] (a·BT·C each), except that the inputs backward never
 *     reads — x[0 .. u), u = j0, or j0 + 1 when block j0's backward does not read its input
 *     (no gradient into it, its first norm frozen, not recomputed) — pass from one block's
 *     forward to the next through two buffers;
 *   - blocks S .. L-1 keep their record (the block less its input) but what their backward
 *     does not read (dtrun_block_unread); blocks below S
 *     share one record (below j0: the forward's working area, as autograd's transients;
 *     checkpointed: the recompute area), so one record is added when S > 0;
 *   - the head: the final norm's input and statistics, and its output (lm_head's input)
 *     only when the classifier matrix is trained (else it passes through the shared
 *     record when there is one);
 *   - LoRA: x·Aᵀ [BT, r] fp32 per adapted linear. With dropout > 0 dtrun keeps the
 *     linear's input x (kept anyway: lora_A's weight gradient reads the dropped-out x,
 *     which the backward regenerates from the counter-based mask, engine/model/lm_layer.c)
 *     and neither dropout(x) nor a mask, where autograd keeps both (ft_block).
 * A reached block's tensors its backward does not read (dtrun_block_unread: a frozen,
 * unadapted linear's input) go to the shared record too, which then exists even when S = 0. */
static act_sum dtrun_activations(const dt_plan *p, const dt_ftplan *ft, int64_t K) {
    act_sum r = {0, 0, 0, 0, 0};
    const dt_model *m = &p->model;
    const int64_t L = m->n_layer, j0 = ft->first_layer, BT = tokens(p);
    const int64_t x = act_bytes(p) * BT * m->hidden;   /* one residual-stream tensor */
    const int64_t rec = dt_memory_activations_per_block(p, 0) - x;
    dt_model_desc d;
    dt_model_describe(m, &d);
    int norm_trained = 0, ad = 0;
    if (j0 < L) dt_pgroups_module_state(&ft->g, d.block.attn.norm.name, j0, &norm_trained, &ad);
    const int64_t u = j0 >= L ? L : (ft->grad_into_first || norm_trained || j0 < K ? j0 : j0 + 1);
    const int64_t S = K > j0 ? K : j0;
    const int keeps_lnf = dt_pgroups_classifier_trained(m, &ft->g);
    for (int64_t l = S; l < L; l++) r.dropped += act_bytes(p) * BT * dtrun_block_unread(p, ft, &d, l);
    const int shared = S > 0 || r.dropped > 0;
    r.total = x * (L + 1 - (u > 2 ? u - 2 : 0)) + rec * (L - S + (shared ? 1 : 0)) - r.dropped;
    r.total += dt_memory_head_activations(p) - 2 * x + (keeps_lnf || !shared ? x : 0);   /* stats, lnf */
    for (int64_t l = 0; l < L; l++) r.lora += FT_FP32_BYTES * BT * p->finetune.lora_rank * dt_pgroups_block_adapted(&ft->g, l);
    r.total += r.lora;
    /* what full fine-tuning would keep and this does not: the blocks below j0, the head's input */
    const int64_t Kc = K < L ? K : L;
    const int64_t full = (L - Kc) * (x + rec) + Kc * x + (Kc > 0 ? rec : 0) + dt_memory_head_activations(p);
    r.skipped = full + r.lora > r.total + r.dropped ? full + r.lora - r.total - r.dropped : 0;
    return r;
}

static act_sum method_activations(const dt_plan *p, const dt_ftplan *ft, int64_t K) {
    return hf_runtime(p) || dt_vlm_active(&p->vlm) ? ft_activations(p, ft, K) : dtrun_activations(p, ft, K);
}

int64_t dt_ftplan_activations(const dt_plan *p, const dt_ftplan *ft, int64_t ckpt_layers) {
    return method_activations(p, ft, ckpt_layers).total + dt_vlmplan_activation_bytes(p);   /* + the vision side's */
}

/* ---- model states ---- */

/* The adapters' own state under dtrun, PEFT's: weights and gradients in the adapter dtype,
 * AdamW's two moments in the precision's moment dtype, a master copy only when the adapters
 * are 16-bit and the precision keeps one (torch AdamW's states are zeros_like(param); peft
 * 0.21 tuners_utils.py cast_adapter_dtype upcasts bf16 / fp16 adapters to fp32 by default;
 * the engine keeps exactly this: engine/model/dt_lm.h dt_lm_trained_precision). The
 * deepspeed and fsdp runtimes cast the model to the precision's dtype (deepspeed 0.19.8
 * engine.py _configure_distributed_model -> _cast_module_mixed_precision, adapters included;
 * FSDP's fp32 sharded parameters), so their adapters cost what the trained parameters cost
 * and no delta is added. */
static void adapter_bytes(const dt_plan *p, int64_t per[3]) {
    const dt_precision *pr = &p->precision;
    const dt_dtype d = p->finetune.adapter_dtype;
    per[0] = dt_dtype_size(d);
    per[1] = dt_dtype_size(d);
    per[2] = 2 * dt_dtype_size(pr->moment) + (pr->has_master && d != DT_DTYPE_FP32 ? dt_dtype_size(pr->master) : 0);
}

/* The widest input of an adapted linear: max(C, QD, F) (engine/model/lm.c widest_in). */
static int64_t lora_widest_in(const dt_model *m) {
    const int64_t D = m->head_dim > 0 ? m->head_dim : m->hidden / m->n_head;
    int64_t widest = m->hidden > m->ffn ? m->hidden : m->ffn;
    return m->n_head * D > widest ? m->n_head * D : widest;
}

int dt_ftplan_terms(const dt_plan *p, const dt_ftplan *ft, dt_ft_terms *out) {
    memset(out, 0, sizeof *out);
    const dt_parallel *z = &p->parallel;
    const int64_t N = z->world_size, G = p->cluster.gpus_per_node;
    const int stage = z->zero_stage;
    /* frozen: replicated at stages 0-2 (ZeRO-1/2 partition only the trained state: the
     * optimizer and gradient partitions are built from the trainable parameters,
     * stage_1_and_2.py; FSDP SHARD_GRAD_OP / FULL_SHARD shard frozen parameters with the
     * rest, use_orig_params=True); stage 3 partitions every parameter, frozen too
     * (partition_parameters.py zero.Init). dtrun keeps the frozen base replicated on every
     * rank at every stage, never offloaded (its base set: engine/model/dt_lm.h, a stated
     * deviation from DeepSpeed, docs/finetune.md "In dtrun"). */
    const int dtrun = !hf_runtime(p);
    const int sharded = !dtrun && (stage == 3 || (p->runtime.kind == DT_RUNTIME_FSDP && stage >= 2));
    const int64_t part = sharded ? ceil_div(ft->frozen_bytes, N) : ft->frozen_bytes;
    if (!dtrun && stage == 3 && z->offload_param != DT_OFFLOAD_NONE) out->frozen_host = part * G;
    else out->frozen_weights = part;
    int64_t per[3];
    adapter_bytes(p, per);
    const int64_t shard[3] = {stage >= 3 ? ceil_div(ft->adapter, N) : ft->adapter,
                              stage >= 2 ? ceil_div(ft->adapter, N) : ft->adapter,
                              stage >= 1 ? ceil_div(ft->adapter, N) : ft->adapter};
    const int64_t prec[3] = {dt_precision_param_bytes(&p->precision), dt_precision_grad_bytes(&p->precision),
                             dt_precision_optimizer_bytes(&p->precision)};
    out->adapter_weights = shard[0] * (dtrun ? per[0] : prec[0]);
    out->adapter_grads = shard[1] * (dtrun ? per[1] : prec[1]);
    out->adapter_optimizer = shard[2] * (dtrun ? per[2] : prec[2]);
    if (z->offload_param != DT_OFFLOAD_NONE && stage == 3) out->adapter_weights = 0;
    if (z->offload_optimizer != DT_OFFLOAD_NONE) out->adapter_optimizer = 0;
    for (int i = 0; i < 3 && dtrun; i++) out->adapter_delta[i] = shard[i] * (per[i] - prec[i]);
    if (z->offload_param != DT_OFFLOAD_NONE && stage == 3) out->adapter_delta[0] = 0;
    if (z->offload_optimizer != DT_OFFLOAD_NONE) out->adapter_delta[2] = 0;
    const act_sum a = method_activations(p, ft, p->activations.ckpt_layers);
    out->act_skipped = a.skipped, out->act_dropped = a.dropped, out->act_lora = a.lora, out->act_dropout = a.dropout;
    out->dequant = ft->dequant_elems * dt_dtype_size(p->finetune.compute_dtype);
    if (dtrun && dt_ft_is_lora(&p->finetune))
        out->lora_scratch = FT_FP32_BYTES * tokens(p) *
                            (p->finetune.lora_rank + (p->finetune.lora_dropout > 0 ? lora_widest_in(&p->model) : 0));
    return DT_OK;
}

/* Elements of the engine's largest parameter group's frozen part (engine/model/lm.c: group 0
 * the embeddings, 1 .. L one block each, L+1 the final norm and an untied lm_head). QLoRA's
 * quantised weights are not in it: the engine keeps them in their own set, dequantised per use
 * and never widened with the group (engine/model/lm_qbase.c). */
static int64_t largest_frozen_group(const dt_pgroups *s, int64_t L) {
    int64_t emb = 0, head = 0, best = 0;
    for (int i = 0; i < s->n; i++) {
        const dt_pgroup *g = &s->g[i];
        if (g->in_block || g->train != DT_TRAIN_FROZEN || dt_storage_is_quantized(g->storage)) continue;
        *(g->embedding ? &emb : &head) += dt_pgroup_elems(g);
    }
    for (int64_t l = 0; l < L; l++) {
        int64_t n = 0;
        for (int i = 0; i < s->n; i++) {
            const dt_pgroup *g = &s->g[i];
            if (g->in_block && g->train == DT_TRAIN_FROZEN && !dt_storage_is_quantized(g->storage) &&
                l >= g->first_layer && l < g->first_layer + g->n_layers)
                n += g->rows * g->cols;
        }
        if (n > best) best = n;
    }
    return emb > best ? (emb > head ? emb : head) : (best > head ? best : head);
}

/* Elements of block 0's group, both sets (its weights and, under LoRA, its adapters; QLoRA's
 * quantised weights are a set of their own, as above). */
static int64_t block0_elems(const dt_pgroups *s) {
    int64_t n = 0;
    for (int i = 0; i < s->n; i++)
        if (s->g[i].in_block && s->g[i].first_layer == 0 && s->g[i].n_layers > 0 &&
            !dt_storage_is_quantized(s->g[i].storage))
            n += s->g[i].rows * s->g[i].cols;
    return n;
}

void dt_ftplan_dtrun_trained_precision(const dt_plan *p, dt_precision *out) {
    *out = p->precision;
    if (hf_runtime(p) || !dt_ft_is_lora(&p->finetune) || p->finetune.adapter_dtype != DT_DTYPE_FP32 ||
        p->precision.param == DT_DTYPE_FP32)
        return;
    out->param = out->grad = DT_DTYPE_FP32;
    out->has_master = 0;
}

int64_t dt_ftplan_dtrun_convert_bytes(const dt_plan *p, const dt_ftplan *ft) {
    const dt_model *m = &p->model;
    const dt_precision *pr = &p->precision;
    /* the trained set's dtypes (PEFT's fp32 adapters under a 16-bit base), the base's the plan's */
    dt_precision tp;
    dt_ftplan_dtrun_trained_precision(p, &tp);
    const dt_dtype pt = tp.param, gt = tp.grad, bt = pr->param;
    const int64_t BT = tokens(p);
    /* pw, gw: a whole block both sets (adapters included), or gpt2's wpe [max_pos, C] when
     * larger (the final norm is smaller than either) */
    int64_t group = block0_elems(&ft->g);
    if (m->family == DT_FAMILY_GPT2 && m->max_pos * m->hidden > group) group = m->max_pos * m->hidden;
    const int64_t frozen_group = largest_frozen_group(&ft->g, m->n_layer);
    int64_t bytes = 0;
    /* pw: the trained group widened, or (its trained set fp32) the base's norm, wpe and
     * classifier rows read in the base's 16-bit dtype */
    if (pt != DT_DTYPE_FP32 || (ft->frozen > 0 && bt != DT_DTYPE_FP32)) bytes += FT_FP32_BYTES * group;
    /* pwb: the base part of a group widened whole */
    if (bt != DT_DTYPE_FP32) bytes += FT_FP32_BYTES * frozen_group;
    /* gw and the embedding gradient's token chains: only when the trained gradients are 16-bit
     * (not for fp32 adapters) */
    if (gt != DT_DTYPE_FP32) bytes += FT_FP32_BYTES * group + FT_TOKEN_ID_BYTES * (m->vocab + BT);
    /* lora_x32: bf16 linears (gemm16) keep no fp32 input; the adapters read it widened, the
     * widest adapted input [BT, max(C, QD, F)] */
    if (dt_ft_is_lora(&p->finetune) && pr->activation == DT_DTYPE_BF16 && bt == DT_DTYPE_BF16)
        bytes += FT_FP32_BYTES * BT * lora_widest_in(m);
    return bytes;
}

void dt_ftplan_add_memory(const dt_plan *p, const dt_ftplan *ft, dt_mem_breakdown *m) {
    dt_ft_terms t;
    dt_ftplan_terms(p, ft, &t);
    m->params += t.frozen_weights + t.adapter_delta[0];
    m->grads += t.adapter_delta[1];
    m->optimizer += t.adapter_delta[2];
    m->buffers += t.dequant + t.lora_scratch;
}

/* ---- time ---- */

typedef struct {
    double bwd_full, bwd_ft, lora_macs, lora_linears, quant_elems;
    int head_trained;
} ft_work;

/* FLOPs of the backward, full fine-tuning vs the method, and LoRA's work, per sequence token. */
static ft_work ft_work_of(const dt_plan *p, const dt_ftplan *ft) {
    ft_work w = {0, 0, 0, 0, 0, 0};
    const dt_model *m = &p->model;
    const int64_t L = m->n_layer, T = p->batch.seq_len;
    dt_block_flops bf;
    dt_model_block_fwd_flops(m, T, &bf);
    const double M = (double)dt_model_block_matmul_params(m), att = bf.attention / (double)T;
    const double head = (double)(m->hidden * m->vocab);
    w.bwd_full = (double)L * (GEMMS_PER_TRAINED_BWD * FLOPS_PER_MAC * M + ATTN_BWD_OVER_FWD * att) +
                 GEMMS_PER_TRAINED_BWD * FLOPS_PER_MAC * head;
    int64_t cuts[MAX_CUTS];
    const int nc = layer_cuts(&ft->g, L, ft->first_layer, cuts);
    for (int c = 0; c + 1 < nc; c++) {
        const int64_t lo = cuts[c] < ft->first_layer ? ft->first_layer : cuts[c], hi = cuts[c + 1];
        if (hi <= lo) continue;
        const double n = (double)(hi - lo);
        const double Mt = (double)dt_pgroups_block_trained_matmul(m, &ft->g, lo);
        w.bwd_ft += n * (FLOPS_PER_MAC * (M + Mt) + ATTN_BWD_OVER_FWD * att);
    }
    for (int64_t c = 0; c + 1 < nc; c++) {
        const double n = (double)(cuts[c + 1] - cuts[c]);
        w.lora_macs += n * (double)dt_pgroups_block_lora_macs(&ft->g, cuts[c]);
        w.lora_linears += n * (double)dt_pgroups_block_adapted(&ft->g, cuts[c]);
    }
    /* the head: its input gradient when backward goes on into the blocks, its weight gradient
     * when lm_head (or the tied embedding) is trained */
    w.head_trained = dt_pgroups_head_dropped(m, &ft->g) == 0;
    w.bwd_ft += FLOPS_PER_MAC * head * ((ft->first_layer < L ? 1.0 : 0.0) + (w.head_trained ? 1.0 : 0.0));
    w.quant_elems = (double)dt_pgroups_quantized_elems(&ft->g);
    return w;
}

int64_t dt_ftplan_param_bytes(const dt_plan *p) {
    dt_ftplan ft;
    dt_error e = {0};
    if (!dt_ftplan_active(p) || dt_ftplan_of(p, &ft, &e)) return dt_model_params(&p->model) * dt_precision_param_bytes(&p->precision);
    return ft.frozen_bytes + (ft.trained + ft.adapter) * dt_precision_param_bytes(&p->precision);
}

double dt_ftplan_flops_ratio(const dt_plan *p) {
    dt_ftplan ft;
    dt_error e = {0};
    if (!dt_ftplan_active(p) || dt_ftplan_of(p, &ft, &e)) return 1.0;
    const ft_work w = ft_work_of(p, &ft);
    const dt_model *m = &p->model;
    dt_block_flops bf;
    dt_model_block_fwd_flops(m, p->batch.seq_len, &bf);
    /* per token: the forward (the blocks' matmuls and attention, the head), as ft_work counts */
    const double fwd = (double)m->n_layer * (FLOPS_PER_MAC * (double)dt_model_block_matmul_params(m) +
                                             bf.attention / (double)p->batch.seq_len) +
                       FLOPS_PER_MAC * (double)(m->hidden * m->vocab);
    const double lora = FLOPS_PER_MAC * w.lora_macs * (1.0 + LORA_BWD_OVER_FWD);
    return fwd + w.bwd_full > 0 ? (fwd + w.bwd_ft + lora) / (fwd + w.bwd_full) : 1.0;
}

/* One GEMM [M x K] . [K x N]: on its shape where the GPU model times GEMMs by shape
 * (dt_time_gemm_s), else its FLOPs at the device's achievable rate R. */
static double gemm_time(const dt_plan *p, double R, double M, double N, double K) {
    const dt_hardware *hw = &p->cluster.hw;
    if (!dt_time_gpu_shape_model(p)) return FLOPS_PER_MAC * M * N * K / R;
    return dt_time_gemm_s(hw->peak_flops[p->precision.param], dt_hardware_sm_count(hw), dt_time_gpu_hbm_bw(hw),
                          (double)dt_dtype_size(p->precision.param), M, N, K, 1.0);
}

/* The weight-gradient GEMMs (dW = X^T dY: [in x T] . [T x out]) of the frozen linears in the
 * blocks backward reaches, per micro-step. */
static double frozen_dw_s(const dt_plan *p, const dt_ftplan *ft, double R, double BT) {
    double t = 0;
    for (int i = 0; i < ft->g.n; i++) {
        const dt_pgroup *g = &ft->g.g[i];
        if (!g->in_block || !g->linear || g->train != DT_TRAIN_FROZEN || strcmp(g->tensor, "weight")) continue;
        const int64_t lo = g->first_layer > ft->first_layer ? g->first_layer : ft->first_layer;
        const int64_t n = g->first_layer + g->n_layers - lo;
        if (n > 0) t += (double)n * gemm_time(p, R, (double)g->cols, (double)g->rows, BT);
    }
    return t;
}

void dt_ftplan_adjust_compute(const dt_plan *p, const dt_ftplan *ft, dt_time_compute *c) {
    const dt_hardware *hw = &p->cluster.hw;
    const ft_work w = ft_work_of(p, ft);
    const double BT = (double)tokens(p), L = (double)p->model.n_layer;
    /* the device's rates, shared by the ranks of a CPU node */
    const double share = hw->device == DT_DEVICE_CPU ? 1.0 / (double)p->cluster.gpus_per_node : 1.0;
    const double R = hw->achievable_flops[p->precision.param] * share, bw = hw->mem_bw * share;
    const double launch = hw->op_overhead_s > 0 ? hw->op_overhead_s
                                                 : (hw->device == DT_DEVICE_CUDA ? FT_GPU_LAUNCH_S : 0.0);
    /* what the backward leaves out, from the full model's: the whole backward of the blocks
     * below j0 (one block's share of the blocks' backward each: the backward less the
     * lm_head's two GEMMs), the weight-gradient GEMMs of frozen linears in the blocks it
     * reaches, the lm_head's dW when the head is frozen (and its dX when no block is reached),
     * GEMMs at the device's achievable rate */
    if (R > 0 && L > 0) {
        const dt_model *m = &p->model;
        const double head_gemm = gemm_time(p, R, BT, (double)m->vocab, (double)m->hidden);
        double blocks_bwd = c->bwd_s - GEMMS_PER_TRAINED_BWD * head_gemm;
        if (blocks_bwd < 0) blocks_bwd = 0;
        double removed = (double)ft->first_layer * blocks_bwd / L + frozen_dw_s(p, ft, R, BT);
        if (!w.head_trained) removed += head_gemm * (ft->first_layer < p->model.n_layer ? 1.0 : 2.0);
        c->bwd_s = c->bwd_s > removed ? c->bwd_s - removed : 0.0;
    }
    /* LoRA: skinny GEMMs, at the roofline of FLOPs and the bytes of x, A, B and their outputs */
    const double e = (double)act_bytes(p), r = (double)p->finetune.lora_rank;
    const double drop = p->finetune.lora_dropout > 0 ? 1.0 : 0.0;
    double lf = 0, lb = 0;
    if (w.lora_linears > 0 && R > 0 && bw > 0) {
        const double flops = FLOPS_PER_MAC * BT * w.lora_macs;
        const double bytes = e * (BT * (w.lora_macs / r + 2.0 * r * w.lora_linears) + w.lora_macs);
        const double t = (flops / R > bytes / bw ? flops / R : bytes / bw);
        lf = t + w.lora_linears * (LORA_FWD_KERNELS + drop) * launch;
        lb = LORA_BWD_OVER_FWD * t + w.lora_linears * (LORA_BWD_KERNELS + drop) * launch;
    }
    /* dequantisation: every quantised weight read packed and written in the compute dtype on
     * each use */
    double dq = 0;
    if (w.quant_elems > 0 && bw > 0) {
        const double rd = p->finetune.quant == DT_STORAGE_INT8 ? DEQUANT_READ_INT8 : DEQUANT_READ_4BIT;
        dq = w.quant_elems * (rd + (double)dt_dtype_size(p->finetune.compute_dtype)) / bw;
    }
    const double in_bwd = L > 0 ? (L - (double)ft->first_layer) / L : 0.0;   /* blocks the backward reaches */
    c->fwd_s += lf + dq;
    c->bwd_s += in_bwd * (lb + dq);
    if (L > 0) {
        c->block_fwd_s += (lf + dq) / L;
        c->block_recompute_s += (lf + dq) / L;
    }
}

void dt_ftplan_describe(const dt_finetune *ft, char *buf, size_t n) {
    char targets[128] = "all";
    if (!ft->lora_target_all) {
        size_t used = 0;
        for (int i = 0; i < ft->lora_target.n && used < sizeof targets; i++)
            used += (size_t)snprintf(targets + used, sizeof targets - used, "%s%s", i ? "," : "", ft->lora_target.name[i]);
    }
    switch (ft->method) {
    case DT_FT_FULL: snprintf(buf, n, "full"); break;
    case DT_FT_FREEZE:
        snprintf(buf, n, "freeze, the %s %lld blocks trained%s", ft->trainable_layers > 0 ? "last" : "first",
                 (long long)(ft->trainable_layers > 0 ? ft->trainable_layers : -ft->trainable_layers),
                 ft->trainable_modules.n ? " (modules as listed)" : "");
        break;
    case DT_FT_LORA:
    case DT_FT_QLORA: {
        char q[64] = "";
        if (ft->method == DT_FT_QLORA)
            snprintf(q, sizeof q, " over %s%s", dt_storage_name(ft->quant), ft->double_quant ? "+double-quant" : "");
        snprintf(buf, n, "%s r %lld alpha %g%s dropout %g on %s%s", dt_ft_method_name(ft->method),
                 (long long)ft->lora_rank, ft->lora_alpha, ft->use_rslora ? " (rsLoRA)" : "", ft->lora_dropout,
                 targets, q);
        break;
    }
    }
}

/* ---- a vision-language plan's parts (dt_vlmplan.h; docs/vlm.md) ---- */

/* One part's model states per rank, as ZeRO partitions them (docs/memory-model.md: params at
 * stage 3, gradients from stage 2, optimizer from stage 1; frozen weights replicated below
 * stage 3, as planner/finetune.c's frozen base; offloaded states leave the device). */
static void part_states(const dt_plan *p, const dt_pgroups *g, dt_vlm_share *s) {
    const dt_parallel *z = &p->parallel;
    const int64_t N = z->world_size;
    const int st = z->zero_stage;
    s->trained = dt_pgroups_elems(g, DT_TRAIN_TRAINED);
    s->frozen = dt_pgroups_elems(g, DT_TRAIN_FROZEN);
    const int sharded = st == 3 || (p->runtime.kind == DT_RUNTIME_FSDP && st >= 2);
    const int64_t frozen = dt_pgroups_bytes(g, DT_TRAIN_FROZEN);
    const int param_off = st == 3 && z->offload_param != DT_OFFLOAD_NONE;
    s->params = param_off ? 0 : (sharded ? ceil_div(frozen, N) : frozen) +
                                    (st >= 3 ? ceil_div(s->trained, N) : s->trained) * dt_precision_param_bytes(&p->precision);
    s->grads = (st >= 2 ? ceil_div(s->trained, N) : s->trained) * dt_precision_grad_bytes(&p->precision);
    s->optimizer = z->offload_optimizer != DT_OFFLOAD_NONE
                       ? 0
                       : (st >= 1 ? ceil_div(s->trained, N) : s->trained) * dt_precision_optimizer_bytes(&p->precision);
}

int dt_vlmplan_shares(const dt_plan *p, const dt_mem_breakdown *m, dt_vlm_share out[DT_VLM_PARTS], dt_error *err) {
    memset(out, 0, sizeof(dt_vlm_share) * DT_VLM_PARTS);
    dt_ftplan ft;
    int rc = dt_ftplan_of(p, &ft, err);
    if (rc) return rc;
    dt_vlm_act a;
    dt_vlmplan_activations(p, &a);
    part_states(p, &ft.tower, &out[DT_VLM_PART_TOWER]);
    part_states(p, &ft.projector, &out[DT_VLM_PART_PROJECTOR]);
    out[DT_VLM_PART_TOWER].activations = a.tower;
    out[DT_VLM_PART_PROJECTOR].activations = a.projector;
    /* a runtime's peak phase may hold a term not at all yet (DeepSpeed's gradients at the start of
     * backward: dt_memory_phases): the vision parts then hold none of it either */
    int64_t *terms[3][2] = {{&out[0].params, &out[1].params}, {&out[0].grads, &out[1].grads},
                            {&out[0].optimizer, &out[1].optimizer}};
    const int64_t whole[3] = {m->params, m->grads, m->optimizer};
    for (int i = 0; i < 3; i++)
        if (*terms[i][0] + *terms[i][1] > whole[i]) *terms[i][0] = *terms[i][1] = 0;
    dt_vlm_share *lm = &out[DT_VLM_PART_LLM];
    lm->trained = dt_pgroups_elems(&ft.g, DT_TRAIN_TRAINED) + dt_pgroups_elems(&ft.g, DT_TRAIN_ADAPTER);
    lm->frozen = dt_pgroups_elems(&ft.g, DT_TRAIN_FROZEN);
    lm->params = m->params - out[0].params - out[1].params;
    lm->grads = m->grads - out[0].grads - out[1].grads;
    lm->optimizer = m->optimizer - out[0].optimizer - out[1].optimizer;
    lm->activations = m->activations - a.tower - a.projector;
    return DT_OK;
}
