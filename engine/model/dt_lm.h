/* dt_lm.h — the decoder-only language model on a device backend: parameter
 * layout, forward, backward, activation checkpointing, for both families of
 * common/dt_arch.h (docs/engine.md):
 *   gpt2  : LayerNorm with bias, learned positions, multi-head attention on a
 *           packed qkv, GELU MLP, tied classifier;
 *   llama : RMSNorm, RoPE (rope_theta, rope_scaling), grouped-query attention with
 *           an independent head_dim, optional q/k/v bias (Qwen2) and per-head q/k
 *           RMSNorm (Qwen3), SwiGLU MLP, tied or untied lm_head.
 *
 * Parameters live in one flat buffer (param dtype) with an offset table, grouped
 * per layer so ZeRO can gather / reduce-scatter one group at a time:
 *   gpt2   group 0     : wte [V, C], wpe [maxT, C]
 *          group 1 + l : block l: ln_1.{weight,bias} [C], attn.c_attn.{weight [C, 3C], bias [3C]},
 *                        attn.c_proj.{weight [C, C], bias [C]}, ln_2.{weight,bias} [C],
 *                        mlp.c_fc.{weight [C, 4C], bias [4C]}, mlp.c_proj.{weight [4C, C], bias [C]}
 *          group L + 1 : ln_f.{weight,bias} [C]
 *          (weights [in, out] as Hugging Face's Conv1D stores them)
 *   llama  group 0     : model.embed_tokens.weight [V, C]
 *          group 1 + l : model.layers.l.: input_layernorm.weight [C],
 *                        self_attn.{q_proj [QD, C], k_proj [KVD, C], v_proj [KVD, C]}.weight,
 *                        (Qwen2) their biases, (Qwen3) self_attn.{q_norm, k_norm}.weight [D],
 *                        self_attn.o_proj.weight [C, QD], post_attention_layernorm.weight [C],
 *                        mlp.{gate_proj [F, C], up_proj [F, C], down_proj [C, F]}.weight
 *          group L + 1 : model.norm.weight [C], (untied) lm_head.weight [V, C]
 *          (weights [out, in] as torch.nn.Linear stores them; QD = heads x head_dim,
 *          KVD = kv heads x head_dim)
 * Gradients use the same layout in the grad dtype. The model touches a group's
 * parameters / gradients only through dt_lm_group_params/_grads pointers, which
 * the distributed runtime may rebind, and calls the hooks around each group. */
#ifndef DT_LM_H
#define DT_LM_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_memtrack.h"
#include "dt_model.h"
#include "dt_plan.h"
#include "dt_precision.h"

typedef struct dt_lm dt_lm;

/* Per-tensor flags, declared by the family when the layout is built (never
 * inferred downstream from a tensor's rank or name; DT_TENSOR_ADAPTER below):
 *   DT_TENSOR_TRAINABLE: the optimizer updates it (a frozen weight has it clear:
 *                        ZeRO's step leaves its values and moments as they are);
 *   DT_TENSOR_DECAY:     AdamW's weight decay applies (matrices: embeddings,
 *                        linears, the classifier; not norms or biases, as
 *                        DeepSpeed / HF Trainer group them). */
#define DT_TENSOR_TRAINABLE 1u
#define DT_TENSOR_DECAY 2u
/* DT_TENSOR_ADAPTER: a LoRA tensor ("<module>.lora_A.weight" [r, in] or ".lora_B.weight"
 * [out, r], PEFT's shapes), in the trained set; PEFT's state-dict key is "base_model.model."
 * + dt_lm_hf_prefix + name, its values dt_lm_params + offset (fp32: LoRA trains fp32
 * parameters). */
#define DT_TENSOR_ADAPTER 4u

/* How a tensor starts (dt_lm_init_random): a constant 0 (biases, LoRA's B) or 1 (norm
 * weights), N(0, std²), or U(-b, b) (LoRA's A: PEFT's kaiming_uniform_(a=sqrt(5)), b = 1/sqrt(in)). */
typedef enum { DT_INIT_ZERO = 0, DT_INIT_ONE = 1, DT_INIT_NORMAL = 2, DT_INIT_UNIFORM = 3 } dt_init_kind;
typedef struct {
    dt_init_kind kind;
    double std;           /* DT_INIT_NORMAL: the standard deviation; DT_INIT_UNIFORM: the bound b of U(-b, b) */
} dt_init_rule;

/* The two parameter sets (docs/architecture.md "Parameter groups"): TRAINED is what the
 * flat params / grads buffers, the groups, the optimizer, ZeRO and checkpoints see (under
 * full fine-tuning every tensor); BASE holds the frozen tensors of a freeze (or LoRA) plan:
 * their own flat buffer in the param dtype with per-group offsets, read-only, no gradient,
 * no optimizer state, never partitioned or rebound (replicated on every rank). */
#define DT_LM_SET_TRAINED 0
#define DT_LM_SET_BASE 1
/* QLoRA (finetune method qlora): the base set's linears of the blocks are stored quantised
 * instead (NF4 / FP4 as bitsandbytes stores them: dt_lm_quant_state), a third set with its own
 * tensor table (dt_lm_quant_tensor: offset counts elements of the set's fp32 view, which is
 * never allocated; shape as the family lays the weight out) and no gradient. */
#define DT_LM_SET_QUANT 2

/* Tensor parallelism (Megatron-LM: Shoeybi et al. 2019 §3; docs/parallelism.md "In dtrun"):
 * how a rank's tensor is a slice of the whole. split: 0 replicated (every TP rank holds it
 * whole), 1 or 2: dimension 0 or 1 is split into `size` equal slices, rank `rank` holding
 * slice `rank` of each of `pack` equal segments along it (GPT-2's packed c_attn: q | k | v,
 * pack 3; else 1). full: the whole tensor's shape. partial: replicated, but each TP rank's
 * gradient is a partial sum (Qwen3's q/k norms see only the rank's heads), summed over TP. */
typedef struct dt_tp_split {
    int split, pack, rank, size, partial;
    int64_t full[2];
} dt_tp_split;

typedef struct dt_tensor_info {
    const char *name;     /* Hugging Face name after dt_lm_hf_prefix: gpt2 "h.3.attn.c_attn.weight",
                           * llama "model.layers.3.self_attn.q_proj.weight", "lm_head.weight" */
    int group;            /* 0 .. L+1 */
    int set;              /* DT_LM_SET_TRAINED (dt_lm_tensor) or DT_LM_SET_BASE (dt_lm_base_tensor) */
    size_t offset;        /* elements from the start of its set's flat buffer */
    size_t full_offset;   /* its offset were every tensor trained (the init's counter: dt_lm_init_slice) */
    size_t numel;
    int ndim;             /* 1 or 2 */
    int64_t shape[2];
    unsigned flags;       /* DT_TENSOR_TRAINABLE | DT_TENSOR_DECAY */
    dt_init_rule init;
    dt_tp_split tp;       /* under tensor parallelism: how this rank's tensor sits in the whole */
} dt_tensor_info;

/* Called by the model around each parameter group; any may be NULL. A non-zero
 * return aborts the pass with that code (err filled by the hook's owner). */
typedef struct dt_lm_hooks {
    void *ctx;
    int (*before_forward)(void *ctx, int group);
    int (*after_forward)(void *ctx, int group);
    int (*before_backward)(void *ctx, int group);
    int (*after_backward)(void *ctx, int group);   /* group's grads complete for this micro-step */
} dt_lm_hooks;

/* B: micro-batch, T: sequence length (<= max_pos). ckpt_layers: the first
 * ckpt_layers blocks keep only their input and are recomputed in backward.
 * Allocates params (DT_MEM_PARAMS), grads (DT_MEM_GRADS), saved activations
 * (DT_MEM_ACTIVATIONS) and scratch/logits (DT_MEM_BUFFERS) through dt_memtrack. */
int dt_lm_create(const dt_model *m, const dt_precision *prec, int64_t B, int64_t T,
                   int64_t ckpt_layers, dt_attention attn, dt_lm **out, dt_error *err);
/* The same on a device (dt_device.h): DT_DEVICE_CPU is dt_lm_create;
 * DT_DEVICE_CUDA binds this process to GPU `ordinal` (LOCAL_RANK) and fails with
 * DT_ERUNTIME when the build has no CUDA or no GPU is visible. On CUDA every
 * pointer this API returns or accepts (params, grads, logits, group pointers,
 * dt_lm_bind_group storage) is DEVICE memory from the device's alloc, and
 * hooks run on the host between kernels enqueued on the compute stream. */
int dt_lm_create_on(const dt_model *m, const dt_precision *prec, int64_t B, int64_t T,
                      int64_t ckpt_layers, dt_attention attn, dt_device device, int ordinal,
                      dt_lm **out, dt_error *err);
/* The tensor-parallel group a model shard runs in (dt_lm_options.tp): this rank in it, its
 * size (>= 2), and the two collectives the shard issues over it, both on host fp32 memory,
 * in place, every rank of the group calling them in the same order: the sum of n elements,
 * and recv[size * n] = every rank's send[n] in rank order. engine/dist/dt_tpgroup.h builds
 * one over an MPI sub-communicator. */
typedef struct dt_lm_tp {
    int rank, size;
    void *ctx;
    int (*allreduce_sum)(void *ctx, float *buf, size_t n, dt_error *err);
    int (*allgather)(void *ctx, const float *send, float *recv, size_t n, dt_error *err);
} dt_lm_tp;

/* Creation flags (dt_lm_options.flags). DT_LM_NO_FLAT: the flat parameter and
 * gradient buffers are not allocated (as after dt_lm_release_flat); every group
 * must be bound (dt_lm_bind_group) before a pass, as a ZeRO-3 engine does, so the
 * process never holds the whole model (dt_zero_init_random). */
#define DT_LM_NO_FLAT 1u
/* DT_LM_FORWARD_ONLY: a frozen model that only runs forwards (dpo's reference): no gradient
 * buffer is allocated and dt_lm_backward / _backward_logits are DT_EINVAL. */
#define DT_LM_FORWARD_ONLY 2u
/* DT_LM_FROZEN: every tensor is frozen (the base set; no trained set), as a vision-language
 * model's language model in LLaVA's stage pretrain (docs/vlm.md "In dtrun"); with embeds (below)
 * its backward still runs every block for the gradient of the input embeddings. */
#define DT_LM_FROZEN 4u
/* The input embeddings of a vision-language model (transformers' LlavaModel: inputs_embeds =
 * embed_tokens(input_ids).masked_scatter(input_ids == image_token_id, image_features)). After
 * the token embedding, forward(ctx, inputs, x0) may overwrite rows of x0 [B*T, C] (fp32, host
 * memory); in backward, before the embedding's gradient, backward(ctx, inputs, dx0) reads
 * dL/dx0 [B*T, C] (fp32, host, scaled as the parameter gradients) and zeroes the rows its
 * forward overwrote (they never reached embed_tokens). Setting backward makes every block run
 * its backward down to x0, frozen or not. CPU, fp32 activations only (dt_lm_create_opts says so
 * in one line otherwise). A non-zero return aborts the pass with that code. */
typedef struct dt_lm_embeds {
    void *ctx;
    int (*forward)(void *ctx, const int32_t *inputs, float *x0, dt_error *err);
    int (*backward)(void *ctx, const int32_t *inputs, float *dx0, dt_error *err);
} dt_lm_embeds;
/* A tensor outside the language model that its group 0 holds (dt_lm_options.extra): a
 * vision-language model's projector (docs/vlm.md "In dtrun"), so ZeRO, the optimizer,
 * clipping and checkpoints treat it as the model's own. Always trained (whatever the method
 * freezes), laid out after the embeddings in the order given; [d0] (d1 0) or [d0, d1]; drawn
 * N(0, init_std^2) (0: zeros); decay: AdamW's weight decay applies. The input-embeddings hook
 * reads them through dt_lm_extra_params / _grads, inside group 0's hooks. */
typedef struct dt_lm_extra {
    const char *name;
    int64_t d0, d1;
    double init_std;
    int decay;
} dt_lm_extra;
/* Everything dt_lm_create_opts takes besides the model and precision. */
typedef struct dt_lm_options {
    int64_t B, T;               /* micro-batch, sequence length (<= max_pos) */
    int64_t ckpt_layers;        /* the first ckpt_layers blocks are recomputed in backward */
    dt_attention attn;
    dt_device device;           /* DT_DEVICE_CPU or DT_DEVICE_CUDA */
    int ordinal;                /* the GPU (LOCAL_RANK); 0 on the CPU */
    unsigned flags;             /* DT_LM_NO_FLAT */
    /* the plan's fine-tuning method (common/dt_finetune.h); NULL or full: every tensor
     * trained. freeze: the tensors models/dt_pgroup.h's dt_model_pgroups says are frozen
     * go to the base set and backward stops at its first trained layer; lora: the adapted
     * linears' weights go to the base set too and their adapters (lora_A, lora_B) are the
     * trained set (dt_lm_check_method says what is not built). */
    const struct dt_finetune *finetune;
    /* NULL: the whole model. Else this rank's shard of Megatron's split over tp->size ranks:
     * q/k/v (GPT-2's c_attn per q, k, v) and gate/up (c_fc) split by output (whole heads),
     * o_proj / down (attn / mlp c_proj) by input, their outputs summed over the group in
     * forward and the column linears' input gradients in backward; the embedding and
     * lm_head split by vocabulary rows (vocab-parallel cross-entropy: row max gathered,
     * sum-exp and target logit summed, never the full logits on one rank); norms and the
     * out linears' biases replicated, their gradients computed redundantly from the summed
     * tensors (identical on every rank, as Megatron without sequence parallelism). CPU,
     * full fine-tuning only (dt_lm_check_tp). Tensor names stay the Hugging Face names;
     * dt_tensor_info.tp says where each sits in the whole. */
    const dt_lm_tp *tp;
    const dt_lm_embeds *embeds;   /* NULL: the token embedding alone (a text model) */
    const dt_lm_extra *extra;     /* nextra tensors group 0 holds besides the embeddings */
    int nextra;
} dt_lm_options;
/* Extra tensor i's fp32 values and gradient where group 0 is bound now (the flat buffers, or
 * a ZeRO engine's binding inside group 0's hooks); NULL without a gradient buffer. */
float *dt_lm_extra_params(dt_lm *g, int i);
float *dt_lm_extra_grads(dt_lm *g, int i);
/* What of tensor parallelism over tp ranks this engine runs for m: DT_EINVAL, one line
 * naming the dimension tp does not divide (heads, KV heads, ffn, vocabulary), or what is
 * not built (a device other than the CPU, freeze / LoRA / QLoRA). */
int dt_lm_check_tp(const dt_model *m, int64_t tp, dt_device device, const struct dt_finetune *ft, dt_error *err);
/* Element e (row-major) of t, this rank's slice, as an element index of the whole tensor
 * (t->tp.full); e itself for a replicated tensor. */
size_t dt_lm_tp_full_elem(const dt_tensor_info *t, size_t e);
/* The whole vocabulary (dt_lm_options.tp: this rank holds V / tp rows of it). */
int64_t dt_lm_vocab(const dt_lm *g);
/* What of a fine-tuning method this engine trains (dt_lm_options.finetune): full, freeze
 * (every precision), and LoRA with fp32 adapters under every precision (a 16-bit one
 * without --modules-to-save), on every device. DT_EINVAL with one line naming what is not
 * built (QLoRA, 16-bit adapters); DT_OK otherwise (the method's checks against the model
 * are dt_model_pgroups'). */
int dt_lm_check_method(const dt_precision *prec, dt_device device, const struct dt_finetune *ft, dt_error *err);
/* The precision of the trained set (dt_lm_params, dt_lm_grads, the optimizer's state) under
 * method ft: prec itself, except LoRA with fp32 adapters (PEFT autocast_adapter_dtype, the
 * default) under a 16-bit precision: fp32 params and grads, no master copy, prec's moments
 * and loss scaling. The base set stays in prec's param dtype, activations in prec's. What
 * the planner counts for the dtrun runtime (planner/finetune.c adapter_bytes). */
void dt_lm_trained_precision(const dt_precision *prec, const struct dt_finetune *ft, dt_precision *out);
int dt_lm_create_opts(const dt_model *m, const dt_precision *prec, const dt_lm_options *o, dt_lm **out,
                      dt_error *err);
dt_device dt_lm_device(const dt_lm *g);
/* The device's operation table (copies, allocation, sync) for callers that
 * move data in and out of the model's storage. */
const struct dt_device_ops *dt_lm_device_ops(const dt_lm *g);
void dt_lm_free(dt_lm *g);

int dt_lm_num_tensors(const dt_lm *g);
const dt_tensor_info *dt_lm_tensor(const dt_lm *g, int i);
int dt_lm_num_groups(const dt_lm *g);                  /* L + 2 */
size_t dt_lm_group_offset(const dt_lm *g, int group);  /* elements */
size_t dt_lm_group_numel(const dt_lm *g, int group);
size_t dt_lm_num_params(const dt_lm *g);

void *dt_lm_params(dt_lm *g);   /* flat, param dtype, num_params elements */

/* The base set (frozen tensors; empty under full fine-tuning): its tensors, in layout
 * order, their flat buffer (the precision's param dtype, num_base_params elements, host-addressable or
 * device memory as the params), per-group ranges. */
int dt_lm_num_base_tensors(const dt_lm *g);
const dt_tensor_info *dt_lm_base_tensor(const dt_lm *g, int i);
size_t dt_lm_num_base_params(const dt_lm *g);
void *dt_lm_base_params(dt_lm *g);
dt_dtype dt_lm_base_dtype(const dt_lm *g);   /* the base set's dtype: the precision's param dtype */
/* The first block whose backward runs (blocks below it hold nothing trained: their
 * backward, and the encoder's, are skipped); 0 under full fine-tuning. */
int64_t dt_lm_first_trained_layer(const dt_lm *g);
/* The quantised set (QLoRA; empty otherwise) and each tensor's quantisation state, host memory:
 * its weight as bitsandbytes quantises it, [rows = out, cols = in] (nn.Linear's layout; GPT-2's
 * Conv1D weight transposed, as transformers' Bnb4bitQuantize transposes it), n = rows x cols
 * codes two a byte (the first in the high nibble), nb = ceil(n / block) absmax; fp32 absmax, or
 * with double quantisation their 8-bit codes, the fp32 absmax per 256 of them and the offset;
 * the 16-value code book and (double quantisation) the 256-value dynamic map it holds. */
int dt_lm_num_quant_tensors(const dt_lm *g);
size_t dt_lm_num_quant_params(const dt_lm *g);   /* their elements */
size_t dt_lm_quant_bytes(const dt_lm *g);        /* their storage: dt_storage_tensor_bytes each (DT_MEM_PARAMS) */
const dt_tensor_info *dt_lm_quant_tensor(const dt_lm *g, int i);
typedef struct dt_lm_qstate {
    int fmt;                    /* dt_storage: DT_STORAGE_NF4 or DT_STORAGE_FP4 */
    int double_quant;
    int64_t block, rows, cols, n, nb, nnb;   /* nnb: nested blocks (double_quant), else 0 */
    uint8_t *packed;            /* [(n + 1) / 2] */
    float *absmax;              /* [nb] (double_quant 0), else NULL */
    uint8_t *qabsmax;           /* [nb] (double_quant 1), else NULL */
    float *nested_absmax;       /* [nnb] (double_quant 1) */
    float *offset;              /* [1] (double_quant 1) */
    float *code;                /* [16] */
    float *map;                 /* [256] (double_quant 1) */
} dt_lm_qstate;
/* Tensor i's state (pointers into the model's storage); DT_EINVAL for i out of range. */
int dt_lm_quant_state(dt_lm *g, int i, dt_lm_qstate *out);
/* Quantises tensor i from its values w (fp32, the tensor's shape in the family's layout:
 * dt_lm_quant_tensor(g, i)->shape), as bitsandbytes.functional.quantize_4bit does. */
int dt_lm_quant_set(dt_lm *g, int i, const float *w, dt_error *err);
/* Its inverse: tensor i dequantised into w (fp32, the same shape and layout; the values the
 * training forward multiplies by, bitsandbytes' dequantize_4bit). */
int dt_lm_quant_get(dt_lm *g, int i, float *w, dt_error *err);
/* LoRA dropout (dt_finetune.lora_dropout > 0) for the following passes: on (training, the
 * masks of key) or off (evaluation, as PEFT under model.eval()). Off at creation. A forward
 * and its backward must see the same key: the backward regenerates the masks from it. */
void dt_lm_set_dropout(dt_lm *g, int on, uint64_t key);
/* LoRA adapters on (default) or off for the following forwards: off, a LoRA model computes its
 * frozen base alone (PEFT's disable_adapter(), the reference of TRL's DPO under LoRA); a
 * backward after a forward with them off is DT_EINVAL. No effect without LoRA. */
void dt_lm_set_adapters(dt_lm *g, int on);
/* The key of micro-batch `micro` (0-based, this rank's) of optimizer step `step` (0-based)
 * under seed: splitmix64(splitmix64(seed, step + 1), micro + 1). */
uint64_t dt_lm_dropout_key(uint64_t seed, int64_t step, int64_t micro);
/* Initialises the base set from seed, each element by its full_offset, so a frozen
 * tensor starts bitwise as the same tensor of a full run with that seed (a quantised tensor:
 * those values, quantised). */
int dt_lm_init_base_random(dt_lm *g, uint64_t seed, dt_error *err);
void *dt_lm_grads(dt_lm *g);    /* flat, grad dtype */
void dt_lm_set_hooks(dt_lm *g, const dt_lm_hooks *hooks);

/* Hook order. Forward: before/after_forward(0) around the encoder, then
 * before/after_forward(1 + l) for each block l, before/after_forward(L + 1) around
 * the final norm (and an untied lm_head, which lives in group L + 1), then, tied
 * only, before/after_forward(0) AGAIN around the classifier (the embedding).
 * Backward: tied: before_backward(0) (classifier), then before/after_backward(L + 1);
 * untied: before/after_backward(L + 1) (lm_head, norm). Then
 * before/after_backward(1 + l) for l = L-1 .. 0 (a checkpointed block is
 * recomputed inside its pair), encoder, after_backward(0) (untied: preceded by
 * its own before_backward(0)). Group 0's grads are complete only at
 * after_backward(0), the last call. */
/* 1 when the classifier is the embedding (group 0 used twice per pass: gpt2
 * always, llama with tie_word_embeddings), 0 when lm_head is its own tensor. */
int dt_lm_tied(const dt_lm *g);
/* What precedes a tensor name to make the Hugging Face state-dict key:
 * "transformer." for gpt2 (GPT2LMHeadModel), "" for llama (names are whole keys). */
const char *dt_lm_hf_prefix(const dt_lm *g);
dt_family dt_lm_family(const dt_lm *g);

/* Per-group storage, as the model sees it: the base of a group's parameters
 * (param dtype) and gradients (grad dtype), group_numel elements each. By
 * default they point into the flat buffers. */
void *dt_lm_group_params(dt_lm *g, int group);
void *dt_lm_group_grads(dt_lm *g, int group);
/* Rebinds a group's parameter and gradient storage (e.g. a ZeRO-3 gather buffer
 * or a ZeRO-2 bucket); NULL restores the default (the flat buffer). The memory
 * must hold group_numel elements of the param / grad dtype and outlive its use.
 * Returns DT_EINVAL for a group outside 0 .. L+1. */
int dt_lm_bind_group(dt_lm *g, int group, void *params, void *grads);
/* Frees the flat parameter and/or gradient buffer once every group has been
 * rebound to the caller's storage (ZeRO-2 keeps gradients only per unit, ZeRO-3
 * parameters too), so a rank holds what its stage says and nothing more.
 * DT_EINVAL (nothing freed) while any group still points into that buffer.
 * Afterwards dt_lm_params / dt_lm_grads return NULL and binding a group
 * back to the released buffer (NULL) fails, until dt_lm_restore_flat. */
int dt_lm_release_flat(dt_lm *g, int params, int grads, dt_error *err);
/* Re-allocates a released flat buffer (contents undefined) in category cat (e.g.
 * DT_MEM_BUFFERS for a checkpoint's transient consolidation); groups keep their
 * bindings. A buffer that was never released is left as it is. */
int dt_lm_restore_flat(dt_lm *g, int params, int grads, dt_mem_category cat, dt_error *err);

/* Init from seed by each tensor's declared rule (dt_tensor_info.init), as Hugging
 * Face initialises each family: gpt2 N(0, 0.02), residual projections (c_proj)
 * N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1; llama N(0, 0.02) for every
 * matrix, biases 0, RMSNorm weights 1. Each element's value depends only on
 * (seed, its flat index), so a slice can be drawn alone and equals the same
 * elements of the whole. DT_EINVAL when there is no flat parameter buffer
 * (DT_LM_NO_FLAT, released: draw slices with dt_lm_init_slice), DT_ENOMEM when
 * the host staging copy (a device that is not host-addressable) cannot be had. */
int dt_lm_init_random(dt_lm *g, uint64_t seed, dt_error *err);
/* The initial values of flat elements [lo, lo + n) (clipped to the model),
 * stored as dtype dt into HOST memory dst[0 .. n). */
void dt_lm_init_slice(const dt_lm *g, uint64_t seed, size_t lo, size_t n, void *dst, dt_dtype dt);

/* inputs, targets: [B, T] token ids. targets may be NULL (logits only); a target
 * DT_IGNORE_INDEX (-100, dt_devmath.h) carries no loss (an SFT prompt token).
 * *loss = mean cross-entropy over the targets that count (fp32; 0 when none do). */
int dt_lm_forward(dt_lm *g, const int32_t *inputs, const int32_t *targets, float *loss,
                    dt_error *err);
/* Tokens outside 0..V-1 are DT_EINVAL. Without targets *loss is not written. */
/* Backward of the last forward (which must have had targets); gradients are
 * ACCUMULATED into the grad buffer: grad_scale times those of that mean loss
 * (grad_scale = 1/accum * loss scale, or a token-weighted share of the step). */
int dt_lm_backward(dt_lm *g, float grad_scale, dt_error *err);
void dt_lm_zero_grad(dt_lm *g);
/* fp32 logits [B, T, V] of the last forward (after dt_lm_backward the buffer
 * holds the logit gradients instead). V is the vocabulary, or a sequence classifier's
 * num_labels (dt_model.num_labels: the head DT_LM_SCORE_HEAD); under tensor
 * parallelism this rank's vocabulary columns [B, T, V / tp]. */
const float *dt_lm_logits(const dt_lm *g);
/* A loss of the caller's own (docs/objectives.md "In dtrun"): after a forward (targets
 * may be NULL) the caller overwrites the logits buffer with dL/dlogits [B, T, V] (fp32,
 * already scaled by 1/accum and the loss scale; host memory on the CPU, device memory
 * elsewhere) and dt_lm_backward_logits back-propagates it, gradients accumulated as
 * dt_lm_backward's. DT_EINVAL without a preceding forward. */
float *dt_lm_logits_mut(dt_lm *g);
/* The logits' last dimension: the vocabulary, or num_labels of a sequence classifier. */
int64_t dt_lm_logits_width(const dt_lm *g);
int dt_lm_backward_logits(dt_lm *g, dt_error *err);
/* The sequence classifier's head module (transformers' LlamaForSequenceClassification.score). */
#define DT_LM_SCORE_HEAD "score"

/* 1 if every gradient (through the bound group pointers) is finite, 0 if any is
 * inf or NaN: the overflow test of fp16 dynamic loss scaling. */
int dt_lm_grads_finite(const dt_lm *g);
/* Sum of squared gradients over all groups, in double, in an order independent
 * of the thread count (global-norm clipping: norm = sqrt(sumsq) / loss scale). */
double dt_lm_grad_sumsq(const dt_lm *g);
/* ---- per-op profile of a pass (bench/bench_gpt2 --breakdown) ----
 * The op kinds the model's driver times: the linears by layer kind (llama:
 * qkv = the q | k and v projections, attn_proj = o_proj, fc = gate | up,
 * fc_proj = down_proj; their bias broadcast / bias gradient included), the
 * classifier GEMMs, attention, the norms (GPT-2 LayerNorm; llama RMSNorm, q/k
 * norm included), RoPE, the activation (GELU / SwiGLU), residual adds,
 * cross-entropy, the encoder, and every dtype conversion the driver issues
 * (activations to / from 16-bit, a 16-bit group's parameters to fp32, a
 * gradient rounded to bf16 for the 16-bit GEMMs, 16-bit gradient commits). */
typedef enum {
    DT_LM_OP_QKV = 0,
    DT_LM_OP_ATTN_PROJ,
    DT_LM_OP_FC,
    DT_LM_OP_FC_PROJ,
    DT_LM_OP_CLASSIFIER,
    DT_LM_OP_ATTENTION,
    DT_LM_OP_NORM,
    DT_LM_OP_ROPE,
    DT_LM_OP_ACT,
    DT_LM_OP_RESIDUAL,
    DT_LM_OP_XENT,
    DT_LM_OP_ENCODER,
    DT_LM_OP_CONVERT,
    DT_LM_OP_COUNT
} dt_lm_op;
/* forward; backward; the forward of checkpointed blocks re-run in backward */
typedef enum { DT_LM_PASS_FWD = 0, DT_LM_PASS_BWD = 1, DT_LM_PASS_RECOMPUTE = 2, DT_LM_PASS_COUNT } dt_lm_pass;
/* Accumulated (never reset by the model; zero it to start over). wall: seconds
 * of CLOCK_MONOTONIC around each op after the compute stream drained (so a
 * device's asynchronous kernels are timed, at the cost of a sync per op);
 * cpu: the process's CPU time over the same span (all threads); flops: the
 * op's arithmetic (GEMMs 2·M·N·K each; attention 4·D per causal (query, key)
 * pair and head forward, twice that backward — the convention bench_gpt2's
 * total uses), 0 for the memory-bound ops; calls: times the op ran. */
typedef struct dt_lm_profile {
    double wall[DT_LM_PASS_COUNT][DT_LM_OP_COUNT];
    double cpu[DT_LM_PASS_COUNT][DT_LM_OP_COUNT];
    double flops[DT_LM_PASS_COUNT][DT_LM_OP_COUNT];
    int64_t calls[DT_LM_PASS_COUNT][DT_LM_OP_COUNT];
} dt_lm_profile;
/* Starts (p) or stops (NULL) accumulating into p. Off by default; when off the
 * driver pays one predictable branch per op and reads no clock. */
void dt_lm_set_profile(dt_lm *g, dt_lm_profile *p);
/* The op kind's name for g's family: "qkv" / "q|k|v proj", "gelu" / "swiglu", ... */
const char *dt_lm_op_name(const dt_lm *g, dt_lm_op op);

/* Bytes of the saved-activation allocation (DT_MEM_ACTIVATIONS), the quantity
 * docs/activations.md defines. */
size_t dt_lm_activation_bytes(const dt_lm *g);

#endif
