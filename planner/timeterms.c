/* timeterms.c — the time model's terms of a plan without a layout (dt_timeterms.h).
 * This file is the engine's schedule written as arithmetic; docs/time-model.md
 * states the same rules in prose and cites the constants.
 *
 * Notation: W world size, N nodes, G ranks per node, A gradient accumulation
 * (micro-steps per optimizer step), b micro-batch, s sequence length, L blocks,
 * K checkpointed blocks, pb/gb bytes per param/grad element. */
#include "dt_timeterms.h"
#include "dt_ftplan.h"
#include "dt_vlmplan.h"
#include "dt_model.h"

#include <math.h>
#include <string.h>

#include "dt_placement.h"

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
/* SFT data (data.loss_mask): the step's loss-carrying target count, summed over the
 * ranks before the first micro-batch as two fp32 limbs (engine/run/train.c global_counted) */
#define DT_TOKEN_COUNT_SCALARS 2

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
    double busbw[DT_COLL_COUNT];   /* bytes/s per collective */
    double alpha;   /* s per ring step */
} dt_net;

double dt_time_busbw(const dt_plan *p, dt_collective c) {
    const dt_hardware *hw = &p->cluster.hw;
    if (p->cluster.nodes > 1) return hw->inter_busbw;
    /* one node: the reduce-scatter's and the all-gather's own rates where the profile
     * measured them (dtplan calibrate, through the engine's collectives) */
    if (c == DT_COLL_REDUCE_SCATTER && hw->intra_busbw_rs > 0) return hw->intra_busbw_rs;
    if (c == DT_COLL_ALLGATHER && hw->intra_busbw_ag > 0) return hw->intra_busbw_ag;
    return hw->intra_busbw;
}

static dt_net net_of(const dt_plan *p) {
    dt_net net;
    net.n = p->parallel.world_size;
    for (int c = 0; c < DT_COLL_COUNT; c++) net.busbw[c] = dt_time_busbw(p, (dt_collective)c);
    net.alpha = p->cluster.nodes > 1 ? p->cluster.hw.inter_alpha_s : p->cluster.hw.intra_alpha_s;
    return net;
}

/* ZeRO++ hpZ: the backward all-gathers of DeepSpeed ZeRO-3 run within groups of
 * runtime.hpz_partition consecutive ranks (utils/groups.py _create_zero_param_parallel_group),
 * on the intra-node links when a group lies within a node. Otherwise the plan's network. */
static dt_net hpz_net(const dt_plan *p) {
    dt_net net = net_of(p);
    const int64_t h = p->runtime.hpz_partition, G = p->cluster.gpus_per_node;
    if (p->runtime.kind != DT_RUNTIME_DEEPSPEED || h <= 1) return net;
    net.n = h;
    if (G % h == 0) {
        const dt_hardware *hw = &p->cluster.hw;
        for (int c = 0; c < DT_COLL_COUNT; c++) net.busbw[c] = hw->intra_busbw;
        if (hw->intra_busbw_ag > 0) net.busbw[DT_COLL_ALLGATHER] = hw->intra_busbw_ag;
        net.alpha = hw->intra_alpha_s;
    }
    return net;
}

/* bytes = the full logical buffer (dt_collective convention). */
static double t_coll(const dt_net *net, dt_collective c, double bytes) {
    if (net->n <= 1 || bytes <= 0) return 0.0;
    double n = (double)net->n;
    if (c == DT_COLL_ALLREDUCE)
        return 2.0 * (n - 1.0) * net->alpha + 2.0 * (n - 1.0) / n * bytes / net->busbw[c];
    /* reduce-scatter, all-gather */
    return (n - 1.0) * net->alpha + (n - 1.0) / n * bytes / net->busbw[c];
}

/* Sum over units of one collective per unit. */
static double t_units(const dt_net *net, const dt_units_layout *u, int64_t L, dt_collective c,
                      double elem_bytes) {
    double t = t_coll(net, c, (double)u->emb_pad * elem_bytes) +
               (double)L * t_coll(net, c, (double)u->block_pad * elem_bytes);
    if (u->head > 0) t += t_coll(net, c, (double)u->head_pad * elem_bytes);
    return t;
}

/* The unit whose collective runs first in backward (and last in forward). */
static int64_t last_unit_pad(const dt_units_layout *u) { return u->head > 0 ? u->head_pad : u->block_pad; }

int dt_time_check(const dt_plan *p, dt_error *err) {
    if (dt_vlmplan_check(p, err)) return err->code;
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

/* Threads of one CPU rank (docs/time-model.md "Threads of one rank"): the profile's
 * compute rates are single-thread rates summed over the cores, but a rank's
 * floor(cores / G) OpenMP threads share every op (fork / join, serial parts, GEMMs
 * split into thinner pieces). dtplan calibrate measures the fraction of the summed
 * rate one rank keeps on thread_cores threads; between 1 thread (no loss) and
 * thread_cores it is interpolated geometrically (a constant loss per doubling). */
static double thread_factor(const dt_plan *p) {
    const dt_hardware *hw = &p->cluster.hw;
    if (hw->device != DT_DEVICE_CPU || hw->thread_efficiency <= 0 || hw->thread_cores < 2) return 1.0;
    const double t = floor(hw->thread_cores / (double)p->cluster.gpus_per_node);
    if (t <= 1.0) return 1.0;
    if (t >= hw->thread_cores) return hw->thread_efficiency;
    return pow(hw->thread_efficiency, log(t) / log(hw->thread_cores));
}

/* FlashAttention-2 (Dao 2023, arXiv 2307.08691): one thread block per (sequence, head,
 * DT_GEMM_TILE queries); causal masking skips the blocks above the diagonal (half the
 * square's work, §3.1); the backward runs 5 matmuls against the forward's 2 (it recomputes
 * QK^T): 2.5x the forward's FLOPs. */
#define DT_FLASH_CAUSAL_SHARE 0.5
#define DT_FLASH_BWD_OVER_FWD 2.5
/* Element-wise kernels per pass on a GPU, beyond the GEMMs and attention (Hugging Face's
 * block: 2 norms, the activation, 2 residual adds; backward the same plus one bias-gradient
 * reduction per linear with a bias; outside: embedding gather(s) + add, final norm, log-softmax
 * and NLL forward and backward). An unfused GELU (HF NewGELUActivation:
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))) is 8 kernels reading 10F and writing 8F
 * elements per token forward (vs 1 kernel, 2F fused) and, through autograd, about twice
 * that backward [A]; an unfused SwiGLU is silu then a product (+3F forward, +5F backward). */
#define DT_GPU_EW_BLK_FWD 5.0
#define DT_GPU_EW_BLK_BWD 5.0
#define DT_GPU_EW_OUT_FWD 5.0
#define DT_GPU_EW_OUT_BWD 5.0
#define DT_GELU_NEW_KERNELS 8.0
#define DT_GELU_NEW_FWD_F 18.0
/* HF eager attention over the b x heads x s x s scores: forward scale, causal mask, softmax
 * (+ dropout), each reading and writing the scores; backward the same in reverse, softmax's
 * backward reading two tensors (modeling_gpt2.py _attn; modeling_llama.py eager_attention_forward). */
#define DT_EAGER_FWD_PASSES 3.0
#define DT_EAGER_BWD_PASSES 3.0
/* Hugging Face's GPT-2 eager attention applies the causal mask with torch.where AND adds the
 * additive padding mask, (1 - attention_mask) * -10000, as a second pass over the scores
 * (transformers v4.12 models/gpt2/modeling_gpt2.py GPT2Attention._attn:
 * "attn_weights = attn_weights + attention_mask"); run_clm.py's group_texts keeps the
 * tokenizer's attention_mask, so the training forward passes it. The add's backward is the
 * identity (no pass). Llama's eager_attention_forward has one mask add (the count above). */
#define DT_EAGER_GPT2_MASK_PASSES 1.0
/* Dropout on the scores also writes its keep-mask forward and reads it backward, one byte per
 * element (PyTorch's native_dropout returns the output and a bool mask). */
#define DT_DROPOUT_MASK_BYTES 1.0
/* The loss under the deepspeed / fsdp runtimes, in logits (V-wide) element passes per token:
 * F.cross_entropy = log_softmax (read + write) + nll_loss forward; backward nll_loss writes a
 * dense V-wide gradient, log_softmax's backward reads output and gradient and writes one
 * (PyTorch aten LogSoftmax / NLLLoss). HF GPT2LMHeadModel shifts the labels with
 * lm_logits[..., :-1, :].contiguous() (a copy: read + write) and the slice's backward fills a
 * zero gradient and copies into it (write, read, write) (transformers v4.12
 * models/gpt2/modeling_gpt2.py GPT2LMHeadModel.forward). */
#define DT_CE_FWD_V 2.0
#define DT_CE_BWD_V 4.0
#define DT_SHIFT_FWD_V 2.0
#define DT_SHIFT_BWD_V 3.0
/* FlashAttention-2 reaches "50-73% of the theoretical maximum FLOPs/s on A100" (Dao 2023,
 * arXiv 2307.08691, abstract and §4.1, forward + backward): the flash kernel of the
 * deepspeed / fsdp runtimes (flash-attn, SDPA) runs at the top of that range, not at the
 * cuBLAS GEMM cap. dtrun's own flash kernel keeps DT_GEMM_PEAK_CAP. */
#define DT_FLASH_PEAK_CAP 0.73
/* RMSNorm in fp32 under the deepspeed / fsdp runtimes (runtime.upcast_norm; HF LlamaRMSNorm
 * and torchtitan's RMSNorm: x.float(); x.pow(2).mean(-1); x * rsqrt(var + eps); .type_as(x);
 * * weight): forward kernels cast (read e, write 4), pow (4 + 4), mean (read 4), mul (4 + 4),
 * cast back (4 + e), weight mul (e + e) = 28 + 4e bytes per normalised element, 6 kernels,
 * against the fused norm's 2e and 1 kernel the element counts price; backward (autograd
 * through the same ops: weight mul, cast, mul with its rsqrt branch, mean, pow, the sum of
 * the two input-gradient branches, cast) ~ 48 + 6e bytes, 10 kernels, against 4e [A, counted
 * from the expression]. */
#define DT_RMS_UPCAST_FWD_FIXED 28.0
#define DT_RMS_UPCAST_FWD_PER_E 4.0
#define DT_RMS_UPCAST_BWD_FIXED 48.0
#define DT_RMS_UPCAST_BWD_PER_E 6.0
#define DT_RMS_UPCAST_FWD_KERNELS 6.0
#define DT_RMS_UPCAST_BWD_KERNELS 10.0
/* Rotary embeddings of the eager Llama code (torchtitan apply_rotary_emb: q.float() as
 * complex, times freqs_cis, back to the compute dtype; HF's rotate_half form moves about the
 * same): per element of q and k, forward cast (e + 4), complex product (4 + 4), cast back
 * (4 + e) = 16 + 2e bytes in 3 kernels, backward the same [A, counted from the expression].
 * Not in dt_time_elementwise_elems (the engine's GPT-2 block has none). */
#define DT_ROPE_FIXED 16.0
#define DT_ROPE_PER_E 2.0
#define DT_ROPE_KERNELS 3.0


/* a memory-bound kernel set: elems read + written at bytes each, plus its launches */
static double g_ew(const dt_time_gpu *g, double bytes, double kernels) { return bytes / g->bw + kernels * g->launch; }

static double lin_fwd(const dt_time_gpu *g, const dt_linear_desc *l, double T) {
    return dt_time_gpu_gemm_s(g, T, (double)l->out, (double)l->in, 1.0);
}
static double lin_bwd(const dt_time_gpu *g, const dt_linear_desc *l, double T) {   /* dX = dY W^T, dW = X^T dY */
    return dt_time_gpu_gemm_s(g, T, (double)l->in, (double)l->out, 1.0) + dt_time_gpu_gemm_s(g, (double)l->in, (double)l->out, T, 1.0);
}

/* DDP under autocast (runtime fsdp, stage 0, a master precision): every forward casts each
 * fp32 weight to the compute dtype (read 4, write e; autocast's cache keeps one cast per
 * forward), the cast's backward casts the weight gradient back to fp32 (read e, write 4) and
 * AccumulateGrad adds it into .grad (read 4 + 4, write 4): per parameter per micro-step
 * (PyTorch documentation, "Automatic Mixed Precision package - torch.amp": "CUDA Ops that can
 * autocast to float16", linear / matmul cast their inputs). */
#define DT_AMP_CAST_FIXED 20.0
#define DT_AMP_CAST_PER_E 2.0

static int gpu_compute_micro(const dt_plan *p, dt_time_compute *out) {
    const dt_hardware *hw = &p->cluster.hw;
    dt_time_gpu g;
    dt_time_gpu_of(hw, p->precision.param, &g);
    dt_model_desc d;
    dt_model_describe(&p->model, &d);
    const dt_block_desc *bd = &d.block;
    const double b = (double)p->batch.micro_batch, s = (double)p->batch.seq_len, T = b * s;
    const double L = (double)p->model.n_layer, C = (double)p->model.hidden, F = (double)p->model.ffn,
                 V = (double)p->model.vocab;
    const dt_runtime *rt = &p->runtime;
    const int hf = rt->kind != DT_RUNTIME_DTRUN;   /* deepspeed / fsdp: PyTorch eager code */
    const int dropout = hf && rt->dropout;

    /* the block's linears */
    double lf = 0, lb = 0, n_bias = 0;
    const dt_sublayer_desc *subs[2] = {&bd->attn, &bd->mlp};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < subs[k]->n_in; i++) {
            lf += lin_fwd(&g, &subs[k]->in[i], T);
            lb += lin_bwd(&g, &subs[k]->in[i], T);
            n_bias += subs[k]->in[i].bias;
        }
        lf += lin_fwd(&g, &subs[k]->out, T);
        lb += lin_bwd(&g, &subs[k]->out, T);
        n_bias += subs[k]->out.bias;
    }
    const double down_fwd = lin_fwd(&g, &bd->mlp.out, T);

    /* the attention core */
    const double nh = (double)bd->n_head, nkv = (double)(bd->n_kv_head > 0 ? bd->n_kv_head : bd->n_head),
                 hd = (double)bd->head_dim;
    double af, ab;
    if (p->activations.attention == DT_ATTN_MATERIALIZED || (rt->kind != DT_RUNTIME_DTRUN && rt->attention == DT_KERNEL_EAGER)) {
        const double heads = b * nh, scores = heads * s * s;
        const double sm_bytes = rt->upcast_softmax ? g.e + 4.0 + 4.0 + g.e : 2.0 * g.e;   /* fp32 softmax + cast back */
        const double mask_f = hf && p->model.family == DT_FAMILY_GPT2 ? DT_EAGER_GPT2_MASK_PASSES : 0.0;
        const double passes_f = DT_EAGER_FWD_PASSES + mask_f + dropout, passes_b = DT_EAGER_BWD_PASSES + dropout;
        af = dt_time_gpu_gemm_s(&g, s, s, hd, heads) + dt_time_gpu_gemm_s(&g, s, hd, s, heads) +                   /* QK^T, PV */
             g_ew(&g, scores * ((passes_f - 1.0) * 2.0 * g.e + sm_bytes + dropout * DT_DROPOUT_MASK_BYTES), passes_f);
        ab = 3.0 * dt_time_gpu_gemm_s(&g, s, hd, s, heads) + dt_time_gpu_gemm_s(&g, s, s, hd, heads) +            /* dV, dQ, dK; dP */
             g_ew(&g, scores * ((passes_b - 1.0) * 2.0 * g.e + 3.0 * g.e + dropout * DT_DROPOUT_MASK_BYTES), passes_b);
    } else {
        const double tiles = b * nh * ceil(s / DT_GEMM_TILE);
        const double per_tile = 4.0 * DT_GEMM_TILE * s * hd * DT_FLASH_CAUSAL_SHARE;    /* QK^T + PV */
        const double cap = hf ? DT_FLASH_PEAK_CAP : g.cap;
        const double t_math = ceil(tiles / g.sm) * per_tile / (g.peak * cap / g.sm);
        const double io = g.e * T * hd * (2.0 * nh + 2.0 * nkv);                          /* q, k, v, o */
        const double t_mem = io / g.bw;
        af = (t_math > t_mem ? t_math : t_mem) + g.launch;
        const double tb_math = DT_FLASH_BWD_OVER_FWD * t_math, tb_mem = 2.0 * t_mem;
        ab = (tb_math > tb_mem ? tb_math : tb_mem) + g.launch;
    }

    /* element-wise kernels, memory-bound at mem_bw: the engine's element counts per token
     * (dt_time_elementwise_elems) in the compute dtype, plus dropout and unfused activations */
    dt_time_ew_elems ew;
    dt_time_elementwise_elems(p->model.hidden, p->model.ffn, p->model.vocab, &ew);
    double ef = ew.block_fwd, eb = ew.block_bwd, er = ew.block_recompute, kf = DT_GPU_EW_BLK_FWD,
           kb = DT_GPU_EW_BLK_BWD + n_bias, kr = DT_GPU_EW_BLK_FWD - 1.0;
    if (dropout) {   /* each residual dropout reads, writes and keeps a mask */
        ef += 3.0 * C * bd->resid_dropouts, eb += 3.0 * C * bd->resid_dropouts;
        kf += bd->resid_dropouts, kb += bd->resid_dropouts;
    }
    if (rt->kind != DT_RUNTIME_DTRUN && rt->unfused_act) {
        if (bd->act == DT_MLP_GELU) {
            ef += (DT_GELU_NEW_FWD_F - 2.0) * F, eb += (2.0 * DT_GELU_NEW_FWD_F - 3.0) * F;
            er += (DT_GELU_NEW_FWD_F - 2.0) * F;
            kf += DT_GELU_NEW_KERNELS - 1.0, kb += 2.0 * DT_GELU_NEW_KERNELS - 1.0, kr += DT_GELU_NEW_KERNELS - 1.0;
        } else {
            ef += 3.0 * F, eb += 5.0 * F, er += 3.0 * F, kf += 1.0, kb += 1.0, kr += 1.0;
        }
    }
    if (hf && rt->upcast_norm) {   /* fp32 RMSNorm: the 2 block norms' extra traffic and kernels */
        const double xf = DT_RMS_UPCAST_FWD_FIXED + DT_RMS_UPCAST_FWD_PER_E * g.e - 2.0 * g.e,
                     xb = DT_RMS_UPCAST_BWD_FIXED + DT_RMS_UPCAST_BWD_PER_E * g.e - 4.0 * g.e;
        const double w = (double)(bd->attn.norm.width + bd->mlp.norm.width);
        ef += w * xf / g.e, eb += w * xb / g.e, er += w * xf / g.e;
        kf += 2.0 * (DT_RMS_UPCAST_FWD_KERNELS - 1.0), kr += 2.0 * (DT_RMS_UPCAST_FWD_KERNELS - 1.0);
        kb += 2.0 * (DT_RMS_UPCAST_BWD_KERNELS - 1.0);
    }
    if (hf && p->model.family == DT_FAMILY_LLAMA) {   /* rotary embeddings on q and k */
        const double qk = (nh + nkv) * hd, rb = DT_ROPE_FIXED + DT_ROPE_PER_E * g.e;
        ef += qk * rb / g.e, eb += qk * rb / g.e, er += qk * rb / g.e;
        kf += 2.0 * DT_ROPE_KERNELS, kb += 2.0 * DT_ROPE_KERNELS, kr += 2.0 * DT_ROPE_KERNELS;
    }
    const double vbytes = rt->upcast_logits ? 4.0 : g.e;
    const double of = ew.outer_fwd - V, ob = ew.outer_bwd - 2.0 * V;   /* the logits' share apart */
    double blk_ew_f = g_ew(&g, T * ef * g.e, kf), blk_ew_b = g_ew(&g, T * eb * g.e, kb),
           blk_ew_r = g_ew(&g, T * er * g.e, kr);
    /* the loss over the B x T x V logits: the engine's element counts (V forward, 2V backward),
     * or PyTorch's cross_entropy under the deepspeed / fsdp runtimes (log_softmax reads and
     * writes the logits, nll_loss's backward writes a dense gradient, log_softmax's backward
     * reads two tensors and writes one) and HF GPT-2's label shift (its contiguous copy forward,
     * the slice's zero-filled gradient backward); Megatron's fused loss (fused_loss) keeps the
     * engine's counts */
    double lv_f = 1.0, lv_b = 2.0, lk_f = 0.0, lk_b = 0.0;
    if (hf && !rt->fused_loss) {
        lv_f = DT_CE_FWD_V, lv_b = DT_CE_BWD_V, lk_f = 1.0, lk_b = 1.0;
        if (p->model.family == DT_FAMILY_GPT2) lv_f += DT_SHIFT_FWD_V, lv_b += DT_SHIFT_BWD_V, lk_f += 1.0, lk_b += 2.0;
    }
    double out_f = dt_time_gpu_gemm_s(&g, T, V, C, 1.0) +
                   g_ew(&g, T * (of * g.e + lv_f * V * vbytes) + (dropout ? 3.0 * T * C * g.e : 0.0),
                        DT_GPU_EW_OUT_FWD + dropout + lk_f);
    double out_b = dt_time_gpu_gemm_s(&g, T, C, V, 1.0) + dt_time_gpu_gemm_s(&g, C, V, T, 1.0) +
                   g_ew(&g, T * (ob * g.e + lv_b * V * vbytes) + (dropout ? 3.0 * T * C * g.e : 0.0),
                        DT_GPU_EW_OUT_BWD + dropout + lk_b);

    if (rt->kind == DT_RUNTIME_FSDP && p->parallel.zero_stage == 0 && p->precision.has_master) {
        /* DDP + autocast: the weight casts forward, the gradient casts and accumulation backward */
        const double n = (double)dt_model_params(&p->model);
        out_f += n * (4.0 + g.e) / g.bw;
        out_b += n * (DT_AMP_CAST_FIXED + DT_AMP_CAST_PER_E * g.e - 4.0 - g.e) / g.bw;
    }
    const double blk_f = lf + af + blk_ew_f, blk_b = lb + ab + blk_ew_b;
    out->fwd_s = L * blk_f + out_f;
    out->bwd_s = L * blk_b + out_b;
    out->block_fwd_s = blk_f;
    out->attn_core_s = af;
    out->block_recompute_s = rt->kind == DT_RUNTIME_DTRUN ? lf - down_fwd + af + blk_ew_r : blk_f;
    return DT_OK;
}

/* Fine-tuning (planner/finetune.c, docs/finetune.md "Time"): the compute of the method on
 * top of the full model's. Full plans pass through untouched. */
static int finetune_compute(const dt_plan *p, dt_time_compute *out, int rc, dt_error *err) {
    dt_ftplan ft;
    if (rc || !dt_ftplan_active(p)) return rc;
    if ((rc = dt_ftplan_of(p, &ft, err))) return rc;
    dt_ftplan_adjust_compute(p, &ft, out);
    dt_vlmplan_adjust_compute(p, out);   /* a vision tower and projector (planner/vlm.c) */
    return DT_OK;
}

/* The share of the parameters that carries gradients and optimizer state: 1 for full
 * fine-tuning (every product below is then exact and unchanged). */
static double state_fraction(const dt_plan *p, const dt_units_layout *u) {
    const int64_t n = dt_ftplan_state_elems(p);
    return dt_ftplan_active(p) && u->total > 0 ? (double)n / (double)u->total : 1.0;
}

int dt_time_compute_micro(const dt_plan *p, dt_time_compute *out, dt_error *err) {
    if (dt_time_check(p, err)) return err->code;
    if (dt_time_gpu_shape_model(p)) return finetune_compute(p, out, gpu_compute_micro(p, out), err);
    const dt_hardware *hw = &p->cluster.hw;
    const double share = node_share(p) * thread_factor(p);
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
    return finetune_compute(p, out, DT_OK, err);
}

/* ZeRO++ (Wang et al. 2023, "ZeRO++: Extremely Efficient Collective Communication for Giant
 * Model Training", arXiv:2306.10209, §3; DeepSpeed zero_quantized_weights /
 * zero_quantized_gradients): qwZ all-gathers the forward's weights block-quantized to INT8,
 * qgZ reduce-scatters the gradients quantized to INT4 (by all-to-alls, node then world;
 * priced here as a reduce-scatter of the INT4 bytes). Bytes per element on the wire; the
 * per-block scales and the (de)quantisation kernels are not counted. */
#define DT_ZEROPP_QW_BYTES 1.0
#define DT_ZEROPP_QG_BYTES 0.5

/* Bytes per gradient element on the wire: FSDP reduces in fp32 (MixedPrecisionPolicy
 * reduce_dtype, torchtitan's; DDP under autocast all-reduces the fp32 gradients), everyone
 * else in the gradient dtype. */
static int wire_grad_bytes(const dt_plan *p) {
    if (p->runtime.kind != DT_RUNTIME_FSDP) return dt_dtype_size(p->precision.grad);
    return p->precision.has_master ? dt_dtype_size(p->precision.master) : dt_dtype_size(p->precision.param);
}

/* Bytes per gradient element in the gradient collectives: DeepSpeed's
 * communication_data_type where the plan states it (each bucket is cast before it is
 * reduced), else wire_grad_bytes. */
static int comm_grad_bytes(const dt_plan *p) {
    const dt_runtime *r = &p->runtime;
    if (r->kind == DT_RUNTIME_DEEPSPEED && r->comm_dtype_set) return dt_dtype_size(r->comm_dtype);
    return wire_grad_bytes(p);
}

/* DeepSpeed stages 1-2 with reduce_scatter off all-reduce each gradient bucket
 * (stage_1_and_2.py average_tensor: gradient_reduction_w_predivide) instead of reducing it
 * to its owners; stage 3 reduce-scatters whatever the key says. */
static dt_collective grad_collective(const dt_plan *p) {
    const int stage = p->parallel.zero_stage;
    return p->runtime.kind == DT_RUNTIME_DEEPSPEED && p->runtime.grads_allreduce && (stage == 1 || stage == 2)
               ? DT_COLL_ALLREDUCE
               : DT_COLL_REDUCE_SCATTER;
}

void dt_time_zeropp_wire(const dt_plan *p, dt_time_zeropp *out) {
    const dt_runtime *r = &p->runtime;
    const int ds3 = r->kind == DT_RUNTIME_DEEPSPEED && p->parallel.zero_stage == 3;
    out->fwd_gather_bytes =
        ds3 && r->quantized_weights ? DT_ZEROPP_QW_BYTES : (double)dt_dtype_size(p->precision.param);
    out->grad_bytes = ds3 && r->quantized_gradients ? DT_ZEROPP_QG_BYTES : (double)comm_grad_bytes(p);
    out->grad_coll = grad_collective(p);
    out->bwd_gather_ranks = ds3 && r->hpz_partition > 1 ? r->hpz_partition : p->parallel.world_size;
}

/* Host-side cost of one DeepSpeed ZeRO-3 module fetch, on the critical path whatever the
 * prefetch hides of the collective: the pre-forward / pre-backward hook's Python work, the
 * partition bookkeeping and the device synchronisation of the fetch ("each all_gather calls
 * torch.cuda.synchronize()", DeepSpeed PR #1188, which made the fetch synchronous). Derived
 * from that PR's own measurement, not from the validation suite: a 5.1B-parameter BERT
 * (64 layers, hidden 2560; 6 fetched linears per layer + 2 embeddings + 2 head modules = 388
 * fetches per forward) on 8 A100 (p4d.24xlarge) ran its forward in 270 ms under ZeRO-3
 * against 60 ms under ZeRO-2 (issue #1174): (270 - 60) ms / 388 = 0.54 ms per fetch, all of
 * the difference counted as per-fetch cost. runtime.fetch_overhead_s > 0 replaces it. */
#define DT_DS_FETCH_REF_MS_Z3 270.0
#define DT_DS_FETCH_REF_MS_Z2 60.0
#define DT_DS_FETCH_REF_FETCHES 388.0
#define DT_DS_FETCH_HOST_S ((DT_DS_FETCH_REF_MS_Z3 - DT_DS_FETCH_REF_MS_Z2) * 1e-3 / DT_DS_FETCH_REF_FETCHES)
static double ds_fetch_host_s(const dt_plan *p) {
    return p->runtime.fetch_overhead_s > 0 ? p->runtime.fetch_overhead_s : DT_DS_FETCH_HOST_S;
}
/* Modules DeepSpeed fetches per pass: the block's (dt_model_block_fetch_sizes) in every block,
 * the embeddings, and the lm_head (a module of its own even when tied: its pre-forward hook
 * gathers the shared weight again). */
static double ds_fetches_per_pass(const dt_plan *p) {
    int64_t sizes[16];
    int n = dt_model_block_fetch_sizes(&p->model, p->runtime.persistence_threshold, sizes, 16);
    dt_model_desc d;
    dt_model_describe(&p->model, &d);
    return (double)p->model.n_layer * (double)(n > 0 ? n : 0) + (double)d.n_embed + 1.0;
}

double dt_time_ds_fetch_host_s(const dt_plan *p, double *block_fetches, double *outer_fetches) {
    double blk = 0.0, out = 0.0, host = 0.0;
    if (p->runtime.kind == DT_RUNTIME_DEEPSPEED && p->parallel.zero_stage == 3) {
        int64_t sizes[16];
        int n = dt_model_block_fetch_sizes(&p->model, p->runtime.persistence_threshold, sizes, 16);
        blk = n > 0 ? (double)n : 0.0;
        out = ds_fetches_per_pass(p) - (double)p->model.n_layer * blk;
        host = ds_fetch_host_s(p);
    }
    if (block_fetches) *block_fetches = blk;
    if (outer_fetches) *outer_fetches = out;
    return host;
}

/* DeepSpeed ZeRO-3 fetches module by module (parameter_offload.py pre-forward / pre-backward
 * hooks per submodule), each an all-gather of the module's partitioned tensors on the
 * communication stream (its host-side cost stalls the compute stream instead:
 * ds_fetch_host_s); tensors under stage3_param_persistence_threshold are never fetched.
 * dtrun and FSDP gather a whole unit (block) at once. Returns the communication time of one
 * pass's gathers of a block. */
#define MAX_FETCH_MODULES 16
static double ds_block_fetch_s(const dt_plan *p, const dt_net *net, double pb) {
    int64_t sizes[MAX_FETCH_MODULES];
    const int64_t W = p->parallel.world_size;
    int n = dt_model_block_fetch_sizes(&p->model, p->runtime.persistence_threshold, sizes, MAX_FETCH_MODULES);
    double t = 0.0;
    for (int i = 0; i < n && i < MAX_FETCH_MODULES; i++)
        t += t_coll(net, DT_COLL_ALLGATHER, (double)round_up(sizes[i], W) * pb);
    return t;
}

/* DeepSpeed ZeRO-3's per-module critical path for one pass over the blocks: module j's
 * all-gather f_j (its ring all-gather, (n - 1) alpha + bytes / busbw) is issued ahead of use
 * only as far as DeepSpeed's prefetch allows (PartitionedParameterCoordinator.fetch_sub_module: after the current module's fetch it
 * prefetches the next modules of the recorded trace while the elements in flight stay under
 * stage3_prefetch_bucket_size, at least one, and only while the gathered parameters stay
 * within stage3_max_live_parameters; docs/time-model.md "ZeRO-3 fetch"). A prefetched fetch
 * hides behind the compute of the modules issued before it, d of them (the lookahead the
 * bucket allows); a fetch that is not prefetched (bucket 0, or the live limit reached) waits
 * whole. Module j's compute is the block pass's compute times its share of the block's
 * fetched parameters (its GEMMs' share; the attention core and element-wise kernels spread
 * the same way [A]). Returns the exposed fetch time of one block in that pass (the modules
 * wrap around into the next block). */
static double ds_block_fetch_exposed_s(const dt_plan *p, const dt_net *net, double pb, double block_compute_s,
                                       int reverse) {
    int64_t sizes[MAX_FETCH_MODULES];
    const int64_t W = p->parallel.world_size;
    int n = dt_model_block_fetch_sizes(&p->model, p->runtime.persistence_threshold, sizes, MAX_FETCH_MODULES);
    if (n <= 0 || W <= 1) return 0.0;
    if (n > MAX_FETCH_MODULES) n = MAX_FETCH_MODULES;
    if (reverse)   /* backward visits the modules in the reverse order */
        for (int i = 0; i < n / 2; i++) {
            int64_t x = sizes[i];
            sizes[i] = sizes[n - 1 - i], sizes[n - 1 - i] = x;
        }
    double total = 0.0;
    for (int i = 0; i < n; i++) total += (double)sizes[i];
    const double bucket = (double)p->parallel.prefetch_bucket_elems, live = (double)p->parallel.max_live_params;
    double exposed = 0.0;
    for (int j = 0; j < n; j++) {
        const double f = t_coll(net, DT_COLL_ALLGATHER, (double)round_up(sizes[j], W) * pb);
        const int prev = (j + n - 1) % n;
        int prefetched = bucket > 0 && (double)sizes[prev] + (double)sizes[j] <= live;
        double hide = 0.0;
        if (prefetched) {   /* lookahead: modules j-d .. j-1 compute while j's gather is in flight */
            double in_flight = (double)sizes[j];
            for (int d = 1; d < n; d++) {
                const int i = (j + n - d) % n;
                hide += block_compute_s * (double)sizes[i] / total;
                const int i2 = (j + n - d - 1) % n;
                in_flight += (double)sizes[i];
                if (in_flight >= bucket || in_flight + (double)sizes[i2] > live) break;
            }
        }
        exposed += f > hide ? f - hide : 0.0;
    }
    return exposed;
}

/* The optimizer step of the deepspeed / fsdp runtimes on a GPU. Neither runs a fused AdamW
 * here: Hugging Face Trainer's AdamW (transformers v4.12 optimization.py AdamW.step, the
 * client optimizer DeepSpeed wraps when its config names none, as the DeepSpeedExamples
 * autotuning configs do) and torch.optim.AdamW's foreach path (torchtitan) run the same
 * element-wise sequence over fp32 tensors: exp_avg mul_ (read + write 4 + 4) and add_ (read
 * 4 + 4, write 4), exp_avg_sq mul_ (8) and addcmul_ (12), sqrt (8), add_ eps (8), the
 * parameter's addcdiv_ (read 12, write 4) and weight decay (8) = 20 fp32 accesses = 80 bytes
 * per parameter. Around it: clip_grad_norm_ reads the gradients for the norm and scales
 * them (4 + 8), AMP's GradScaler unscale_ reads and writes them (8); DeepSpeed's fp16
 * optimizers compute the norm / overflow check (4), unscale and clip in place (8), copy the
 * 16-bit gradients into the fp32 partition and the updated fp32 parameters back to 16 bits
 * (stage_1_and_2.py, fused_optimizer.py). */
#define DT_ADAMW_UNFUSED_BYTES 80.0
#define DT_CLIP_BYTES 12.0
#define DT_UNSCALE_BYTES 8.0
#define DT_NORM_BYTES 4.0

/* The CPU engine's per-step streams over the parameter-sized buffers, beside AdamW (engine/dist/
 * zero.c dt_zero_begin_step, dt_zero_reduce_scalars, dt_zero_optimizer_step; docs/time-model.md
 * "At GPT-2 124M-774M", item 3): zeroing the gradients (the whole flat gradient at
 * stages 0-1, dt_lm_zero_grad; the shard at 2-3), the squared gradient norm (a read of the
 * whole gradient at stage 0, of the shard at 1-3) and, at stages 1-2, the shard staged out of
 * the flat parameters (zero the staging shard, copy in: read + write) and every unit's
 * all-gathered parameters copied back into the flat copy (read + write of every parameter).
 * Per micro-step, beside those per step: at stage 1 the last micro-step copies the flat
 * gradient into the reduce buffers (hook_after_backward, stage 1: read + write of every
 * gradient); at stages 2-3 every unit's gradient buffer is zeroed before its backward
 * (hook_before_backward: one write of every gradient) and the reduce-scattered shard is added
 * into the gradient shard (finish_rs: read both, write one); at stage 3 every unit's shard is
 * copied into its gather buffer before each of the two all-gathers, forward and backward
 * (gather: read + write of the shard).
 * Bytes per rank per step; the time model streams them at the node's memory bandwidth mem_bw
 * (dtplan calibrate: memcpy) shared by its ranks. Negligible at tiny-cpu's 120k parameters
 * (< 0.3 % of its step), 10-20 % of the step at GPT-2 124M-355M (docs/benchmarks.md). */
#define DT_CPU_ZERO_PASSES 1.0     /* memset: one write */
#define DT_CPU_NORM_PASSES 1.0     /* sum of squares: one read */
#define DT_CPU_STAGE_IN_PASSES 3.0 /* zero the staging shard (write), copy the shard in (read + write) */
#define DT_CPU_COPY_BACK_PASSES 2.0/* gathered unit -> flat parameters: read + write */
#define DT_CPU_RS_COPY_PASSES 2.0  /* stage 1: flat gradient -> reduce buffer: read + write */
#define DT_CPU_GBUF_ZERO_PASSES 1.0/* stages 2-3: a unit's gradient buffer zeroed: one write */
#define DT_CPU_RS_ADD_PASSES 3.0   /* stages 2-3: gshard += received shard: two reads, one write */
#define DT_CPU_GATHERS 2.0         /* stage 3: all-gathers per unit per micro-step (forward, backward) */
#define DT_CPU_GATHER_PASSES 2.0   /* stage 3: the shard -> the gather buffer: read + write */
static double cpu_step_stream_bytes(const dt_plan *p, const dt_units_layout *u, double shard) {
    const int stage = p->parallel.zero_stage;
    const double gb = (double)wire_grad_bytes(p), pb = (double)dt_dtype_size(p->precision.param);
    const double total = (double)u->total;
    double bytes = DT_CPU_ZERO_PASSES * (stage <= 1 ? total : shard) * gb;
    bytes += DT_CPU_NORM_PASSES * (stage == 0 ? total : shard) * gb;
    if (stage == 1 || stage == 2) bytes += (DT_CPU_STAGE_IN_PASSES * shard + DT_CPU_COPY_BACK_PASSES * total) * pb;
    if (stage == 1) bytes += DT_CPU_RS_COPY_PASSES * total * gb;
    const double A = (double)p->batch.grad_accum;
    if (stage >= 2) bytes += A * (DT_CPU_GBUF_ZERO_PASSES * total + DT_CPU_RS_ADD_PASSES * shard) * gb;
    if (stage == 3) bytes += A * DT_CPU_GATHERS * DT_CPU_GATHER_PASSES * shard * pb;
    return bytes;
}

/* The optimizer step on the rank's device over `shard` elements, s. */
static double device_optimizer_s(const dt_plan *p, double shard) {
    const dt_hardware *hw = &p->cluster.hw;
    const dt_precision *pr = &p->precision;
    const int pb = dt_dtype_size(pr->param), gb = wire_grad_bytes(p), ob = dt_precision_optimizer_bytes(pr);
    const double share = node_share(p);
    if (hw->device == DT_DEVICE_CPU) {
        /* a CPU device's AdamW is the host AdamW kernel (engine/model/optim.c) on the
         * node's cores, shared by its G ranks: the rate dtplan calibrate times */
        return shard * (double)p->cluster.gpus_per_node / hw->cpu_adam_params_per_s;
    }
    if (p->runtime.kind != DT_RUNTIME_DTRUN && dt_time_gpu_shape_model(p)) {
        /* PyTorch's AdamW as element-wise kernels over the fp32 state (docs/time-model.md
         * "Optimizer step of the deepspeed / fsdp runtimes"), at the achievable HBM bandwidth,
         * plus what the mixed-precision wrapper streams around it */
        double bytes = DT_ADAMW_UNFUSED_BYTES;
        if (p->runtime.kind == DT_RUNTIME_FSDP) {
            if (p->optimizer.grad_clip > 0) bytes += DT_CLIP_BYTES;            /* clip_grad_norm_ */
            if (pr->param == DT_DTYPE_FP16) bytes += DT_UNSCALE_BYTES;                /* GradScaler.unscale_ */
        } else {
            bytes += DT_NORM_BYTES + DT_UNSCALE_BYTES;   /* overflow check / norm, unscale and clip */
            if (pr->has_master)   /* 16-bit grads into the fp32 partition, updated fp32 back to 16-bit */
                bytes += (double)dt_dtype_size(pr->grad) + 4.0 + 4.0 + (double)pb;
        }
        return shard * bytes / dt_time_gpu_hbm_bw(hw);
    }
    if (p->runtime.kind == DT_RUNTIME_FSDP) {
        /* FSDP's AdamW steps the fp32 sharded params themselves: grads read twice, m and v
         * read and written, params read and written (no 16-bit copy to refresh) */
        const double w = (double)gb, moments = (double)ob - (pr->has_master ? w : 0.0);
        return shard * (2.0 * w + 2.0 * moments + 2.0 * w) / (hw->mem_bw * share);
    }
    /* device AdamW is memory-bound: grads read twice (norm, update), optimizer
     * state read and written, params written (and read when there is no master) */
    const double bytes = 2.0 * gb + 2.0 * ob + (double)pb * (pr->has_master ? 1.0 : 2.0);
    return shard * bytes / (hw->mem_bw * share);
}

/* One pass's parameter all-gathers over every unit at elem_bytes per element; DeepSpeed
 * ZeRO-3 (ds3) gathers a block module by module (ds_block_fetch_s), the embedding and
 * head units whole. */
static double stage_gathers_s(const dt_plan *p, const dt_net *net, const dt_units_layout *u, double elem_bytes,
                              int ds3) {
    double ag = t_units(net, u, p->model.n_layer, DT_COLL_ALLGATHER, elem_bytes);
    if (ds3)
        ag += (double)p->model.n_layer * (ds_block_fetch_s(p, net, elem_bytes) -
                                          t_coll(net, DT_COLL_ALLGATHER, (double)u->block_pad * elem_bytes));
    return ag;
}

int dt_time_terms_dp(const dt_plan *p, dt_time_terms *t, dt_error *err) {
    if (dt_time_check(p, err)) return err->code;
    memset(t, 0, sizeof *t);
    const dt_hardware *hw = &p->cluster.hw;
    const dt_precision *pr = &p->precision;
    const int stage = p->parallel.zero_stage;
    const int64_t L = p->model.n_layer, W = p->parallel.world_size, G = p->cluster.gpus_per_node;
    const double A = (double)p->batch.grad_accum;
    const int pb = dt_dtype_size(pr->param), gb = wire_grad_bytes(p);
    const int ob = dt_precision_optimizer_bytes(pr);
    const double share = node_share(p);
    const int ds3 = p->runtime.kind == DT_RUNTIME_DEEPSPEED && stage == 3;

    /* ---- compute, per micro-step ---- */
    dt_time_compute cm;
    if (dt_time_compute_micro(p, &cm, err)) return err->code;
    /* selective recompute repeats every block's attention core in backward; a checkpointed
     * block's full recompute already includes it */
    const double t_sel = p->activations.selective ? cm.attn_core_s : 0.0;
    const double t_fwd = cm.fwd_s, t_bwd = cm.bwd_s + (double)L * t_sel, t_rec = cm.block_recompute_s - t_sel;
    t->compute_s = A * (t_fwd + cm.bwd_s);
    /* DeepSpeed ZeRO-3: every module fetch's host-side cost, forward and backward, every
     * micro-step: it stalls the compute stream (counted with compute; the hooks run whatever
     * the world size) while the communication stream goes on (hiding compute below) */
    const double ds3_host = ds3 ? ds_fetches_per_pass(p) * ds_fetch_host_s(p) : 0.0;
    t->compute_s += A * 2.0 * ds3_host;
    t->recompute_base_s = A * (double)L * t_sel;
    t->per_ckpt_s = A * t_rec;
    t->recompute_per_layer_s = t->per_ckpt_s;

    /* ---- communication ---- */
    dt_units_layout u;
    layout_of(p, &u);
    const dt_net net = net_of(p);
    const int overlap = p->parallel.overlap_comm != 0;
    const double sf = state_fraction(p, &u);   /* fine-tuning: only trained state is reduced and stepped */
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
            int64_t B = p->parallel.reduce_bucket_elems, total = dt_ftplan_active(p) ? dt_ftplan_state_elems(p) : u.total;
            int64_t nb = (total + B - 1) / B, last = total - (nb - 1) * B;
            const int64_t gw = comm_grad_bytes(p);
            double c = (double)(nb - 1) * t_coll(&net, DT_COLL_ALLREDUCE, (double)(B * gw)) +
                       t_coll(&net, DT_COLL_ALLREDUCE, (double)(last * gw));
            ph[nph++] = (dt_time_phase){1.0, t_coll(&net, DT_COLL_ALLREDUCE, (double)(last * gw)), c,
                                        t_bwd, t_rec};
        } else {
            /* ZeRO++ under DeepSpeed ZeRO-3 (zeropp_wire): qwZ's forward gathers in int8, hpZ's
             * backward gathers within the hpZ group, qgZ's gradients in int4 */
            dt_time_zeropp zpp;
            dt_time_zeropp_wire(p, &zpp);
            const dt_net bnet = ds3 ? hpz_net(p) : net;
            const double pf = zpp.fwd_gather_bytes, gr = zpp.grad_bytes;
            const dt_collective gc = grad_collective(p);   /* all-reduce where DeepSpeed's reduce_scatter is off */
            double rs = sf * t_units(&net, &u, L, gc, gr);
            double rs_tail = sf * t_coll(&net, gc, (double)u.emb_pad * gr);
            double ag = (stage == 3 ? 1.0 : sf) * stage_gathers_s(p, &net, &u, pb, ds3),
                   ag_f = stage_gathers_s(p, &net, &u, pf, ds3),
                   ag_b = stage_gathers_s(p, &bnet, &u, pb, ds3);
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
                double ag_first_fwd = t_coll(&net, DT_COLL_ALLGATHER, (double)u.emb_pad * pf);
                double ag_first_bwd = t_coll(&bnet, DT_COLL_ALLGATHER, (double)last_unit_pad(&u) * pb);
                if (ds3) {
                    /* the fetches the prefetch cannot hide, block by block (above), and the
                     * gradients reduce-scattered in reduce_bucket_size buckets as they fill
                     * (stage3.py): the last bucket's reduce-scatter starts after the last
                     * gradient, with nothing left to hide behind */
                    const double bwd_blk = cm.fwd_s > 0 ? cm.block_fwd_s * cm.bwd_s / cm.fwd_s : 0.0;
                    ag_first_fwd += (double)L * ds_block_fetch_exposed_s(p, &net, pf, cm.block_fwd_s, 0);
                    ag_first_bwd += (double)L * ds_block_fetch_exposed_s(p, &bnet, pb, bwd_blk, 1);
                    const int64_t B = p->parallel.reduce_bucket_elems > 0 ? p->parallel.reduce_bucket_elems
                                                                          : u.total_pad;
                    const int64_t last_bucket = u.total_pad - (u.total_pad - 1) / B * B;
                    const double rs_last = t_coll(&net, DT_COLL_REDUCE_SCATTER, (double)last_bucket * gr);
                    if (rs_last > rs_tail) rs_tail = rs_last;
                }
                ph[nph++] = (dt_time_phase){A, ag_first_fwd, ag_f, t_fwd + ds3_host, 0.0};
                ph[nph++] = (dt_time_phase){A, ag_first_bwd + rs_tail, ag_b + rs, t_bwd + ds3_host, t_rec};
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
    const double shard = sf * (stage == 0 ? (double)u.total : (double)u.total_pad / (double)W);
    const double node_shard = shard * (double)G;   /* what one node's CPU / NVMe serves */
    double off = 0.0, opt;
    dt_offload oo = stage >= 1 ? p->parallel.offload_optimizer : DT_OFFLOAD_NONE;
    dt_offload op = stage == 3 ? p->parallel.offload_param : DT_OFFLOAD_NONE;
    if (oo != DT_OFFLOAD_NONE) {
        /* DeepSpeed's partial offload steps its GPU sub-groups on the GPU, one after the
         * other with the CPU's (stage3.py step: the sub-group loop) */
        const double gpu = (double)dt_memory_ds_gpu_opt_elems(p, (int64_t)ceil(shard));
        const double host = (shard - gpu) / shard;   /* share of the shard on the host */
        if (!dt_memory_cpu_grads_in_place(p)) off += host * shard * gb / hw->h2d_bw; /* grads D2H once per step */
        if (op == DT_OFFLOAD_NONE) off += host * shard * pb / hw->h2d_bw; /* updated params H2D */
        if (oo == DT_OFFLOAD_NVME)
            off += 2.0 * node_shard * ob / hw->nvme_bw;       /* optimizer state read + write */
        opt = host * node_shard / hw->cpu_adam_params_per_s + (gpu > 0 ? device_optimizer_s(p, gpu) : 0.0);
    } else {
        opt = device_optimizer_s(p, shard);
    }
    if (op != DT_OFFLOAD_NONE) {
        /* each gather (forward and backward, every micro-step) first brings the
         * rank's shard of the unit to the device; fine-tuning: the frozen partitions as
         * stored too, only the trained ones are written back */
        if (!dt_ftplan_active(p)) {
            off += 2.0 * A * shard * pb / hw->h2d_bw;
            if (op == DT_OFFLOAD_NVME)
                off += (2.0 * A + 1.0) * node_shard * pb / hw->nvme_bw; /* reads + one write */
        } else {
            const double fetched = (double)dt_ftplan_param_bytes(p) / (double)W;
            off += 2.0 * A * fetched / hw->h2d_bw;
            if (op == DT_OFFLOAD_NVME) off += (2.0 * A * fetched * (double)G + node_shard * pb) / hw->nvme_bw;
        }
    }
    if (hw->device == DT_DEVICE_CPU && p->runtime.kind == DT_RUNTIME_DTRUN)
        opt += cpu_step_stream_bytes(p, &u, shard) / (hw->mem_bw * share);
    t->offload_s = off;
    t->optimizer_s = opt;
    t->base_s = t->compute_s + t->recompute_base_s + fixed + off + opt;
    return DT_OK;
}

int dt_time_comm_bytes_dp(const dt_plan *p, int64_t out[DT_COLL_COUNT], dt_error *err) {
    memset(out, 0, sizeof(int64_t) * DT_COLL_COUNT);
    if (dt_time_check(p, err)) return err->code;
    if (p->parallel.world_size <= 1) return DT_OK;
    dt_units_layout u;
    layout_of(p, &u);
    const int stage = p->parallel.zero_stage;
    const int64_t A = p->batch.grad_accum;
    dt_time_zeropp z;
    dt_time_zeropp_wire(p, &z);
    const int64_t pb = dt_dtype_size(p->precision.param), gb = comm_grad_bytes(p);
    /* ZeRO++'s fractional widths (INT4 gradients): bytes rounded to whole bytes */
    /* fine-tuning: gradients and the updated parameters of the trained state only; ZeRO-3
     * gathers every parameter, frozen ones too */
    const int64_t st = dt_ftplan_active(p) ? dt_ftplan_state_elems(p) : u.total;
    const int64_t st_pad = dt_ftplan_active(p) ? round_up(st, p->parallel.world_size) : u.total_pad;
    const int64_t pf = (int64_t)((double)u.total_pad * z.fwd_gather_bytes),
                  gr = (int64_t)((double)st_pad * z.grad_bytes);
    const dt_collective gc = grad_collective(p);
    switch (stage) {
    case 0:
        out[DT_COLL_ALLREDUCE] = st * gb + DT_SCALAR_BYTES * DT_LOSS_SCALARS;
        break;
    case 1:
    case 2:
        out[gc] += (stage == 1 ? 1 : A) * st_pad * gb;
        out[DT_COLL_ALLGATHER] = st_pad * pb;
        out[DT_COLL_ALLREDUCE] += DT_SCALAR_BYTES * DT_LOSS_NORM_SCALARS;
        break;
    default:
        out[DT_COLL_ALLGATHER] = A * (pf + u.total_pad * pb);   /* forward (qwZ: INT8) and backward gathers */
        out[DT_COLL_REDUCE_SCATTER] = A * gr;
        out[DT_COLL_ALLREDUCE] = DT_SCALAR_BYTES * DT_LOSS_NORM_SCALARS;
        break;
    }
    if (p->data.loss_mask) out[DT_COLL_ALLREDUCE] += DT_SCALAR_BYTES * DT_TOKEN_COUNT_SCALARS;
    return DT_OK;
}
