/* lm_internal.h — the model object and the block interface of engine/model/.
 *
 * Files, each standing on its own (tests/arch/test_circles.py: none reaches into
 * another that reaches back):
 *   lm.c        the driver: creation, storage and group binding, hooks, the forward /
 *               backward passes (embedding, blocks, final norm, classifier, loss),
 *               activation checkpointing; it dispatches every family-specific step
 *               through the family table (lm_family, below) and nothing else;
 *   lm_gpt2.c   the GPT-2 family (lm_family_gpt2): its tensors, saved activations,
 *               block forward / backward, final LayerNorm;
 *   lm_llama.c  the llama family (lm_family_llama: Llama, Qwen2, Qwen3), the same;
 *   lm_layer.c  what the families build with: the tensor table, built from models/'
 *               description of the family's modules (dt_model_describe, the rows of
 *               models/family.c) with each tensor's flags and init rule declared
 *               there, the linears (fp32 ops or the 16-bit GEMMs), the profile clock;
 *   lm_init.c   initialisation from each tensor's declared init rule;
 *   lm_qbase.c  QLoRA's quantised base: the blocks' frozen linears stored as bitsandbytes
 *               stores them, dequantised per use (the linears call it; it calls no other file).
 * A new block family (a vision tower's block) is its row in models/family.c, one
 * more lm_family in its own file and its entry in lm.c's family table; a new kind of linear (a LoRA adapter)
 * is a layer kind beside lm_linear_* used by the blocks that have it, its tensors
 * declared with their own flags (docs/architecture.md "Where to add things").
 * Not a public header: everything outside engine/model/ uses dt_lm.h.
 *
 * Dimension letters: B batch, T time, C channels (hidden), H query heads,
 * Hkv key/value heads, D head width, QD = H*D, KVD = Hkv*D, QK = QD + KVD,
 * F ffn, V vocab, L layers, N = B*T token rows. GPT-2: Hkv = H, D = C / H. */
#ifndef DT_LM_INTERNAL_H
#define DT_LM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dt_device.h"
#include "dt_devmath.h"
#include "dt_dtype.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_pgroup.h"

#define DT_TENSOR_NAME_MAX 64
/* The widest attention head the device kernels take: the CUDA flash kernel keeps
 * one head's q / k / v rows in shared memory (docs/cuda.md "Attention"). */
#define DT_LM_MAX_HEAD_DIM 256

/* A block's saved activations (docs/activations.md) are its family's own struct
 * (gpt2_acts, llama_acts), which its layout_block_acts points into the activations
 * allocation; the driver keeps them as opaque records of family->acts_size bytes. */

/* fp32 views of the activations every pre-norm block has, used only when the
 * activation dtype is 16-bit (buffers, [N, ...] as the activation): the block input x,
 * the first norm's output (also the final norm's), the attention output, the residual
 * after attention, the second norm's output, the materialized probabilities, the block
 * output. A family keeps the views of its own activations in its own struct
 * (g->fviews, family->views_size bytes of float pointers, all NULL in fp32). */
typedef struct {
    float *x, *ln1, *att, *res1, *ln2, *probs, *xout;
} block_f32;

/* A group's parameters as the blocks read them. f32: the fp32 view at the
 * group's element offsets (the bound storage itself in fp32; with 16-bit
 * params the whole group converted into pw, or, when w16 is set, only its
 * vectors: norm weights and biases). w16: the group's 16-bit storage, which
 * the linears' 16-bit GEMMs read directly (dt_lm.gemm16), else NULL. */
typedef struct {
    const float *f32;
    const void *w16;
    /* the group's frozen tensors (the base set, dt_lm.h "Two parameter sets"), viewed as
     * f32 / w16 are for the trained set; NULL when the group has none */
    const float *base32;
    const void *base16;
    /* block groups: where each of the family's tensor kinds lives ([block_kinds]) */
    const struct lm_slot *slot;
    int64_t layer;      /* the block (group - 1), -1 outside the blocks */
} lm_params;

/* Where a block's tensor kind lives: its element offset inside the group of its set
 * (SIZE_MAX: the model has no such tensor) and the set (DT_LM_SET_TRAINED / _BASE). */
typedef struct lm_slot {
    size_t off;
    int set;
} lm_slot;

/* fp32 view of the tensor at slot s of P's group (NULL: off SIZE_MAX) */
static inline const float *lm_slot_f32(const lm_params *P, lm_slot s) {
    if (s.off == SIZE_MAX) return NULL;
    return (s.set == DT_LM_SET_BASE ? P->base32 : P->f32) + s.off;
}
/* fp32 view of kind k of P's block (NULL when the model has none) */
static inline const float *lm_w32(const lm_params *P, int k) { return lm_slot_f32(P, P->slot[k]); }
/* the fp32 gradient of kind k inside G (the group's trained-set layout), NULL when the
 * tensor is frozen or absent: its weight-gradient op is skipped */
static inline int lm_slot_trained(lm_slot s) { return s.off != SIZE_MAX && s.set == DT_LM_SET_TRAINED; }
static inline float *lm_slot_grad(float *G, lm_slot s) { return lm_slot_trained(s) ? G + s.off : NULL; }
static inline float *lm_g32(const lm_params *P, float *G, int k) { return lm_slot_grad(G, P->slot[k]); }

/* Weight layout of a linear: GPT-2's Conv1D stores w [IC, OC], torch.nn.Linear
 * (the llama family) w [OC, IC]. */
typedef enum { LM_W_IN_OUT = 0, LM_W_OUT_IN = 1 } lm_wlayout;

typedef struct lm_family lm_family;

struct dt_lm {
    const dt_device_ops *dev;   /* where storage lives and ops run */
    dt_family fam;
    const lm_family *family;    /* the family's layout, blocks and final norm (lm.c's table) */
    int64_t B, T, C, H, Hkv, D, QD, KVD, F, V, L, maxT, K;
    int64_t Vout;               /* the classifier's rows: V, or a sequence classifier's num_labels */
    int forward_only;           /* DT_LM_FORWARD_ONLY: no gradients */
    int lora_off;               /* dt_lm_set_adapters(g, 0): forwards skip the LoRA adapters */
    int seq_cls;                /* the classifier is a sequence classifier's score (dt_model.num_labels) */
    int qk_norm, qkv_bias, tied;   /* llama family options (gpt2: 0, 1, 1) */
    float eps;
    dt_attention attn;
    /* the trained set's param and grad dtypes (dt_lm_trained_precision), the base set's
     * param dtype (the precision's), the activation dtype */
    dt_dtype pt, gt, bt, at;
    int psz, gsz, bsz, asz;   /* their sizes in bytes */

    /* layout */
    int ntensors;
    dt_tensor_info *tensors;
    char (*names)[DT_TENSOR_NAME_MAX];
    int ngroups;
    size_t *group_off, *group_numel;
    size_t nparams;
    size_t max_group_numel;   /* largest group that is converted whole (blocks, final norm, wpe) */
    int cls_group;            /* the group holding the classifier matrix [V, C]: 0 tied, L+1 untied */
    size_t norm_numel;        /* the final norm's elements there (weight, and bias) */
    size_t full_head_off;     /* group L+1's first element in the full fine-tuning layout */

    /* the base set (dt_lm.h "Two parameter sets"): the frozen tensors, their own flat
     * buffer (DT_MEM_PARAMS, param dtype), never rebound; empty under full fine-tuning */
    int nbase;
    dt_tensor_info *btensors;
    char (*bnames)[DT_TENSOR_NAME_MAX];
    size_t *bgroup_off, *bgroup_numel;
    size_t nbase_params, max_bgroup_numel;
    void *base;
    /* the fine-tuning method's groups (models/dt_pgroup.h); NULL: full fine-tuning */
    dt_pgroups *pg;
    int64_t first_trained;    /* blocks below it run no backward (L: none trained) */
    int embed_trained;        /* the encoder's backward runs (wte / wpe trained) */
    dt_lm_embeds embeds;      /* dt_lm_options.embeds (zeroed: none); input_grad: its backward is set */
    int input_grad;
    const dt_lm_extra *extra; /* dt_lm_options.extra [nextra]: group 0's tensors after the embeddings, */
    int nextra;               /* from full offset extra_foff, at extra_off[i] in group 0 (fp32) */
    size_t extra_foff, *extra_off;
    lm_slot *slots;           /* [L][family->block_kinds] where block l's kinds live */
    lm_slot wte, wpe;         /* group 0's tensors (wpe off SIZE_MAX: none) */
    lm_slot cls, norm_w;      /* the classifier matrix (in cls_group), the final norm's first tensor */
    /* LoRA (dt_ft_is_lora): rank, scale alpha / r (rsLoRA alpha / sqrt(r)), the family's
     * adaptable modules per block, where each adapter's saved x·Aᵀ [N, r] fp32 is in the
     * activations ([L * lora_mods], by block then module; NULL: the module is not adapted) and
     * a [N, r] scratch for the backward's dy·B */
    int64_t lora_r;
    float lora_s;
    int lora_mods;
    float **lora_xa_at, *lora_t;
    /* LoRA dropout (dt_lm_set_dropout): p, whether it is on for the next passes, their key,
     * and a [N, max in] scratch for dropout(x) and the input gradient through it */
    float lora_p;
    int drop_on;
    uint64_t drop_key;
    float *lora_xd;
    /* gemm16 with adapters: the linear's bf16 input widened to fp32 for the adapters'
     * fp32 GEMMs ([N, max in]) */
    float *lora_x32;
    /* QLoRA: the base linears stored quantised (lm_qbase.c); NULL otherwise */
    struct lm_qbase *qb;

    /* storage */
    void *params, *grads;            /* flat, DT_MEM_PARAMS / DT_MEM_GRADS */
    void **gparams, **ggrads;        /* per-group bases (rebindable) */
    dt_lm_hooks hooks;

    /* activations (DT_MEM_ACTIVATIONS), one allocation */
    void *act_mem;
    size_t act_bytes;
    void **x;                 /* [L + 1] residual stream: x[l] block l input, x[L] final norm input */
    char *blocks;             /* [L] records of family->acts_size; checkpointed blocks all-NULL */
    void *recompute;          /* one record: the shared area when K > 0 */
    void *lnf;                /* [N, C] */
    float *lnf_mean, *lnf_rstd;

    /* buffers (DT_MEM_BUFFERS) */
    float *logits;            /* [N, V]; holds dlogits during backward */
    float *ce_lse, *ce_losses;/* [N] */
    int32_t *inputs, *targets;/* [N] */
    float *dres;              /* [N, C] gradient of the residual stream */
    float *dC;                /* [N, C] scratch (forward: projection outputs) */
    float *dQKV;              /* gpt2 [N, 3C]; llama [N, QK + KVD]: dqk then dv */
    float *dF;                /* gpt2 [N, F]; llama [N, 2F] (gate | up gradient) */
    float *dA;                /* llama [N, max(QD, F)]: attention-output / down_proj-input gradient */
    float *rope_cos, *rope_sin;   /* llama [T, D/2] */
    /* tensor parallelism (lm_tp.c; NULL tp: none): the whole vocabulary, this rank's first
     * vocabulary row, the module roles of the split (models/' names), per-row masks of the
     * tokens / targets outside this rank's rows, a [N] and [2N] fp32 scratch for the
     * vocab-parallel cross-entropy, the gathered row maxima [tp, N] */
    const dt_lm_tp *tp;
    int64_t Vfull, v0;
    const char *tp_col[2 * DT_SUBLAYER_MAX_IN], *tp_row[2], *tp_vocab[2], *tp_partial[DT_SUBLAYER_MAX_IN_NORM];
    int tp_col_pack[2 * DT_SUBLAYER_MAX_IN];
    uint8_t *tp_out;
    int32_t *tp_tgt;
    float *tp_red, *tp_max, *tp_saved;
    dt_error tp_err;
    float *pw;                /* fp32 params of the current group (16-bit params) */
    float *pwb;               /* fp32 base-set params of the current group (16-bit params) */
    float *gw;                /* fp32 grads of the current group (16-bit grads) */
    block_f32 w32;            /* 16-bit activations only */
    void *fviews;             /* the family's own fp32 views (family->views_size bytes) */
    /* bf16 params and activations: every linear and the classifier run bf16 x bf16
     * -> fp32 GEMMs (gemm_ex) on the stored tensors, the activation gradient
     * rounded to bf16 once per linear (docs/engine.md "Precision") */
    int gemm16;
    /* gemm16: the bf16 activation gradient of the linear being differentiated,
     * [rows, OC] with rows * OC <= d16_cap. It is the fp32 view of the MLP's
     * GEMM-only activation (w32.gelu / w32.act, [N, F] fp32 = 2 N F bf16), which
     * gemm16's backward never loads. */
    uint16_t *d16;
    size_t d16_cap;
    int64_t vchunk;           /* classifier rows per chunk when the matrix is converted */
    int32_t *tok_head;        /* [V] 16-bit grads: first position of each token, or -1 */
    int32_t *tok_next;        /* [N] next position with the same token, or -1 */
    /* host copies (host pool) when the device is not host-addressable; else
     * aliases of inputs / tok_head / tok_next */
    int32_t *h_inputs, *h_tok_head, *h_tok_next;

    /* per-op profile (dt_lm_set_profile): NULL when off; prof_pass is the pass
     * the driver is in, so an op is booked to forward, backward or recompute */
    dt_lm_profile *prof;
    dt_lm_pass prof_pass;

    int have_targets;         /* last forward had targets */
    int have_forward;         /* a forward ran since the last backward (dt_lm_backward_logits) */
    int64_t counted;          /* its targets that carry loss (not DT_IGNORE_INDEX) */
};

/* the dtype the tensor at slot s is stored in: its set's */
static inline dt_dtype lm_slot_dtype(const dt_lm *g, lm_slot s) { return s.set == DT_LM_SET_BASE ? g->bt : g->pt; }

/* ---- per-op profile (lm.c): around each op the driver issues ----
 * lm_prof_begin before the op, lm_prof_end after it with the op's kind and
 * arithmetic; both return at once (no clock read) when profiling is off. */
typedef struct {
    double wall, cpu;   /* s: CLOCK_MONOTONIC, CLOCK_PROCESS_CPUTIME_ID */
} lm_prof_mark;
/* the clocks, after the compute stream drained */
lm_prof_mark lm_prof_now(const dt_lm *g);
/* books now - m to op in the current pass */
void lm_prof_record(const dt_lm *g, dt_lm_op op, lm_prof_mark m, double flops);

static inline lm_prof_mark lm_prof_begin(const dt_lm *g) {
    lm_prof_mark m = {0.0, 0.0};
    if (g->prof) m = lm_prof_now(g);
    return m;
}
static inline void lm_prof_end(const dt_lm *g, dt_lm_op op, lm_prof_mark m, double flops) {
    if (g->prof) lm_prof_record(g, op, m, flops);
}
/* attention FLOPs of one block in pass `pass` (dt_lm_profile: 4·D per causal
 * pair and query head forward, twice that backward) */
static inline double lm_attention_flops(const dt_lm *g, dt_lm_pass pass) {
    const double pairs = (double)g->T * (double)(g->T + 1) / 2.0;
    const double fwd = 4.0 * (double)g->D * pairs * (double)(g->B * g->H);
    return pass == DT_LM_PASS_BWD ? 2.0 * fwd : fwd;
}

/* ---- counter-based random numbers (lm_init.c's init, LoRA's dropout masks) ----
 * splitmix64 at `counter` of the stream seeded with seed, and a uniform in (0, 1) from its
 * top 53 bits: any element drawn alone (dt_devmath.h, which the devices' dropout shares). */
static inline uint64_t lm_splitmix64_at(uint64_t seed, uint64_t counter) { return dt_splitmix64_at(seed, counter); }
static inline double lm_uniform01_at(uint64_t seed, uint64_t counter) { return dt_uniform01_at(seed, counter); }

/* ---- helpers shared by the families ---- */

/* 0 when block l's backward need not compute the gradient of its input nor of its first
 * norm's output (kind norm_kind's weight): l is the first block backward reaches, no
 * gradient flows below it (the embeddings are frozen) and that norm's weight is frozen —
 * then the first linears skip their input gradient and the norm its backward. */
static inline int lm_block_input_grad(const dt_lm *g, int l, const lm_params *P, int norm_kind) {
    return l != g->first_trained || g->embed_trained || g->input_grad || lm_slot_trained(P->slot[norm_kind]);
}

static inline void *lm_tensor_ptr(void *base, size_t elem_off, int esz) {
    return (char *)base + elem_off * (size_t)esz;
}

/* fp32 view of an activation: the tensor itself in fp32, else its fp32 buffer */
static inline float *lm_act_f32(const dt_lm *g, void *act, float *view) {
    return g->at == DT_DTYPE_FP32 ? (float *)act : view;
}

/* An op wrote f32 (the view); store it in the activation's dtype and round the
 * view to exactly the stored values, so later ops see what backward will see
 * (one fused pass: the device's store_round). */
static inline void lm_act_commit(const dt_lm *g, void *act, float *f32, size_t n) {
    if (g->at == DT_DTYPE_FP32) return;
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->store_round(act, g->at, f32, n);
    lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
}

/* fp32 view of a saved activation for reading */
static inline const float *lm_act_load(const dt_lm *g, const void *act, float *view, size_t n) {
    if (g->at == DT_DTYPE_FP32) return act;
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->convert(view, DT_DTYPE_FP32, act, g->at, n);
    lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
    return view;
}

/* lm_act_commit for an activation that only linears read afterwards: with
 * gemm16 they read the stored tensor, so the view is not rounded back. */
static inline void lm_act_commit_lin(const dt_lm *g, void *act, float *f32, size_t n) {
    if (!g->gemm16) {
        lm_act_commit(g, act, f32, n);
        return;
    }
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->convert(act, g->at, f32, DT_DTYPE_FP32, n);
    lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
}

/* lm_act_load for an activation that only linears read: NULL with gemm16
 * (nothing converted; the linears read the stored tensor) */
static inline const float *lm_act_load_lin(const dt_lm *g, const void *act, float *view, size_t n) {
    return g->gemm16 ? NULL : lm_act_load(g, act, view, n);
}

/* ---- linears (lm_layer.c): the fp32 device ops, or with gemm16 the 16-bit GEMMs ----
 * One linear layer of a block: its weight (and bias) inside the block's group and
 * its shape. This is where another kind of linear plugs in: a LoRA linear
 * (y = x Wᵀ + s·dropout(x) Aᵀ Bᵀ) is this description plus its adapter tensors'
 * offsets, rank and scale, run by the same two calls. */
/* A LoRA adapter on the output columns [seg, seg + width) of a linear (PEFT's per-module
 * adapter: llama's fused q | k carries q_proj's on [0, QD) and k_proj's on [QD, QK)):
 * A [r, IC] and B [width, r] in the trained set (PEFT's shapes), and its saved x·Aᵀ. */
typedef struct {
    lm_slot a, b;
    int64_t seg, width;
    float *xa;          /* [N, r] fp32: x·Aᵀ, what lora_B's gradient reads */
    uint64_t id;        /* block x the family's modules + module: its dropout mask's stream */
} lm_lora;
#define LM_LORA_MAX 2   /* adapters one of the families' linears carries (q | k, gate | up) */

typedef struct {
    dt_lm_op kind;      /* the layer kind the profile books it to */
    lm_wlayout lay;     /* Conv1D [IC, OC] or nn.Linear [OC, IC] */
    lm_slot w;          /* the weight: its element offset in the group of its set */
    lm_slot b;          /* the bias's [OC], or off SIZE_MAX: no bias */
    int64_t IC, OC;     /* input and output features */
    int nlora;          /* its adapters (lm_linear_add_lora), 0 without LoRA */
    lm_lora lora[LM_LORA_MAX];
} lm_linear;

/* Adds to lin the adapter of module `mod` (its index among the family's adaptable modules)
 * whose kinds ka (lora_A) and kb (lora_B) P's block has, on output columns [seg, seg +
 * width); nothing when the block has none (the module is not adapted). */
void lm_linear_add_lora(const dt_lm *g, const lm_params *P, lm_linear *lin, int mod, int ka, int kb, int64_t seg,
                        int64_t width);

/* out [N, OC] = inp [N, IC] @ W (+ bias). inp: the saved input activation (act
 * dtype); inp32: its fp32 view (ignored, may be NULL, with gemm16); P: the
 * group's parameters. DT_OK, or gemm_ex's error. */
int lm_linear_forward(dt_lm *g, const lm_linear *lin, const lm_params *P, float *out, const void *inp,
                      const float *inp32, int64_t N);
/* A residual branch's last linear and its add: act = resid + inp @ W (+ bias) over
 * [N, C], the projection through g->dC (not saved), the sum stored into act (a
 * saved activation, act dtype) as lm_act_commit does; *out: its fp32 view (view
 * itself, or act in fp32). inp / inp32 as lm_linear_forward. DT_OK or the GEMM's error. */
int lm_linear_residual(dt_lm *g, const lm_linear *lin, const lm_params *P, const void *inp, const float *inp32,
                       const float *resid, void *act, float *view, float **out);
/* How a backward writes the input gradient: dinp = (LM_DINP_SET) or += (LM_DINP_ADD). */
typedef enum { LM_DINP_SET = 0, LM_DINP_ADD = 1 } lm_dinp_mode;
/* dinp [N, IC] = (or += ) dout [N, OC] @ W (dinp NULL: skipped); the weight's
 * gradient += into G (fp32, the group's layout, W's layout), the bias's += column
 * sums of dout. With gemm16 dout is rounded to bf16 once (in row chunks of d16), as
 * PyTorch autocast's bf16 backward. */
int lm_linear_backward(dt_lm *g, const lm_linear *lin, const lm_params *P, float *G, float *dinp,
                       lm_dinp_mode mode, const float *dout, const void *inp, const float *inp32, int64_t N);

/* ---- QLoRA's quantised base (lm_qbase.c, dt_lm.h DT_LM_SET_QUANT) ----
 * The frozen linears of the blocks stored as bitsandbytes stores them (NF4 / FP4 codes,
 * absmax per block, optionally double-quantised), a third set beside the trained and base
 * sets: a slot of set DT_LM_SET_QUANT names its tensor by index (off), and a linear whose
 * weight is there runs on the weight dequantised per use into one transient buffer. */
typedef struct lm_qbase lm_qbase;
/* What of QLoRA this engine trains (dt_lm_check_method): NF4 / FP4 on the CPU, fp32 compute over
 * fp32 parameters or bf16 compute over mixed-bf16 (bf16 parameters and activations); DT_EINVAL
 * with one line naming the setting and the fix otherwise. */
int lm_qbase_check(const dt_precision *prec, const struct dt_finetune *ft, dt_device device, dt_error *err);
/* Sets up g->qb for a qlora method (nothing otherwise): DT_EINVAL naming what is not built. */
int lm_qbase_setup(dt_lm *g, const dt_model *m, const struct dt_finetune *ft, dt_error *err);
/* Takes d into the quantised set when the method quantises it (a frozen linear weight of a
 * block, not skipped): 1 taken (lo's full-layout counter advanced), 0 not. */
struct lm_tensor_decl;
struct lm_layout;
int lm_qbase_add(dt_lm *g, struct lm_layout *lo, int group, const struct lm_tensor_decl *d);
/* The slot of the quantised tensor named name in group grp: 1 found (*s set), 0 not. */
int lm_qbase_find(const dt_lm *g, int grp, const char *name, lm_slot *s);
/* The quantised storage (DT_MEM_PARAMS, exactly dt_storage_tensor_bytes per tensor) and the
 * transient dequantised weight (DT_MEM_BUFFERS, the largest tensor in the compute dtype): 1 ok,
 * 0 out of memory. */
int lm_qbase_alloc(dt_lm *g);
void lm_qbase_free(dt_lm *g);
/* After set_gemm16: bf16 compute runs on the 16-bit GEMM path only; DT_EINVAL in one line when
 * g could not take it, DT_OK otherwise (and without QLoRA). */
int lm_qbase_ready(const dt_lm *g, dt_error *err);
/* A linear whose weight is quantised: its base GEMMs on the dequantised weight (one tensor
 * at a time, each onto its output columns), bias, and no weight gradient (frozen). */
static inline int lm_linear_quantized(const lm_linear *lin) { return lin->w.set == DT_LM_SET_QUANT; }
int lm_qbase_forward(dt_lm *g, const lm_linear *lin, const lm_params *P, float *out, const float *x, int64_t N);
int lm_qbase_backward(dt_lm *g, const lm_linear *lin, float *G, float *dinp, lm_dinp_mode mode, const float *dout,
                      int64_t N);
/* bf16 compute (dt_lm.gemm16): out [N, OC] (+)= x W^T (beta 0 sets, 1 adds onto the broadcast bias)
 * with x the stored bf16 input [N, IC] and W dequantised to bf16; dinp [N, IC] (+)= dout W with dout
 * (fp32 [N, OC]) rounded to bf16 in g->d16 row chunks, as lm_linear_backward's 16-bit path. */
int lm_qbase_forward16(dt_lm *g, const lm_linear *lin, float *out, const void *x, int64_t N, float beta);
int lm_qbase_backward16(dt_lm *g, const lm_linear *lin, float *dinp, lm_dinp_mode mode, const float *dout,
                        int64_t N);

/* ---- the tensor table (lm_layer.c) ----
 * Built from models/' description of the family (dt_model_describe: the modules of
 * Hugging Face's block, k_family_rows in models/family.c) with the family's naming and
 * storage rules (lm_family), so the engine and the planner count the same tensors.
 * Each tensor is declared once, when the layout is built: its name, shape, flags
 * (DT_TENSOR_TRAINABLE, DT_TENSOR_DECAY: dt_lm.h) and init rule. Nothing downstream
 * (the optimizer, ZeRO, checkpoints, the init) infers them from a tensor's rank or
 * name. Order, per sublayer (attention, MLP): the norm (weight, LayerNorm's bias), the
 * in-linears' weights, their biases, the in-norms (Qwen3's q/k norm), the out-linear's
 * weight and bias — Hugging Face's order for both families, and q | k | v (gate | up)
 * adjacent so one GEMM covers them. */
typedef struct lm_tensor_decl {
    const char *name;     /* Hugging Face name after dt_lm_hf_prefix (copied) */
    int ndim;             /* 1 or 2 */
    int64_t d0, d1;       /* shape [d0] or [d0, d1] */
    unsigned flags;       /* DT_TENSOR_* */
    dt_init_rule init;
    int adapter;          /* a LoRA tensor: trained, its init counter apart from the model's */
    /* what models/dt_pgroup.h calls it, for its trainability: the module (in-block path
     * "self_attn.q_proj", or outside "embed_tokens"), "weight" | "bias", the block (-1 outside) */
    const char *module, *tensor;
    int64_t layer;        /* LM_LAYER_EXTRA: a dt_lm_extra, trained whatever the method freezes */
} lm_tensor_decl;
#define LM_LAYER_EXTRA (-2)

/* Where the next tensor goes: table index and element offset in each set (trained,
 * base), and its offset in the full fine-tuning layout (every tensor trained), which
 * the init's counter uses so a frozen tensor starts as it would in a full run. */
typedef struct lm_layout {
    int i, bi;
    size_t off, boff, foff;
    size_t aoff;          /* adapters' init counter (from DT_LORA_INIT_COUNTER) */
} lm_layout;
/* Where the adapters' init counters start: far past any model's elements, so adding
 * adapters changes no base tensor's initial value (lm_init.c). */
#define DT_LORA_INIT_COUNTER ((size_t)1 << 60)

/* Appends tensor d to group `group` at lo, advancing it: into the trained set unless
 * g->pg says it is frozen (then the base set). The tables must have room
 * (lm_layout_count). */
void lm_layout_add(dt_lm *g, lm_layout *lo, int group, const lm_tensor_decl *d);
/* Tensors of the whole model described by d (L blocks; tied: no lm_head tensor). */
int lm_layout_count(const dt_model_desc *d, int64_t L, int tied);
/* group 0's extra tensors (dt_lm_options.extra), after the embeddings */
void lm_layout_extra(dt_lm *g, lm_layout *lo);
/* Group 0 (the embeddings), block l's group 1 + l, group L + 1 (the final norm and,
 * untied, lm_head: sets g->norm_off, norm_numel, cls_group, cls_off), by d and
 * g->family's rules. */
void lm_layout_embed(dt_lm *g, const dt_model_desc *d, lm_layout *lo);
void lm_layout_block(dt_lm *g, const dt_model_desc *d, int l, lm_layout *lo);
void lm_layout_head(dt_lm *g, const dt_model_desc *d, lm_layout *lo);
/* g->slots: each block's kinds by the family's kind names (off SIZE_MAX: the model has
 * no such tensor), g->wte / wpe / cls / norm_w. DT_EINVAL naming the tensor when a block
 * has one the family's block does not use (a description this engine's block cannot run). */
int lm_layout_kinds(dt_lm *g, dt_error *err);

/* The widest head the device kernels take (DT_LM_MAX_HEAD_DIM): DT_EINVAL with one
 * line when D exceeds it. For the families' check. */
int lm_check_head_dim(int64_t D, dt_error *err);

/* Reserves bytes at *off of the activation allocation: its address when base is
 * given, NULL when only measuring. */
void *lm_take(char *base, size_t *off, size_t bytes);

/* ---- the block interface: one table per family, dispatched by lm.c ----
 * Every function receives the model with its dimensions and options set
 * (configure ran first). Blocks: on entry to backward g->dres = dL/dx[l+1], on exit
 * dL/dx[l]; a block reads its parameters through P and the slots of its tensor kinds
 * (lm_w32, lm_g32, P->slot), and accumulates fp32 gradients into G (the group's layout). */
struct lm_family {
    const char *name;                         /* "gpt2", "llama" (for messages) */
    const char *hf_prefix;                    /* dt_lm_hf_prefix */
    const char *op_names[DT_LM_OP_COUNT];     /* dt_lm_op_name */
    int has_wpe;      /* 1: learned positions, tensor 1 of group 0 (the encoder adds them) */
    /* how the family names and stores the modules of models/' description */
    const char *model_prefix;   /* before the embeddings and the final norm: "" | "model." */
    const char *block_prefix;   /* before a block's modules, %d its index: "h.%d." | "model.layers.%d." */
    lm_wlayout weight_layout;   /* Conv1D [in, out] | nn.Linear [out, in] */
    double init_std;            /* embeddings and linears N(0, init_std) (HF initializer_range) */
    int scale_out_init;         /* 1: a sublayer's out linear N(0, init_std / sqrt(2L)) (GPT-2) */
    /* the block's tensor kinds its forward / backward read, by name within the block
     * ([block_kinds]; P->slot[k] is where kind k lives, off SIZE_MAX when the model has none) */
    int block_kinds;
    const char *const *kind_names;
    int first_norm_kind;        /* the block's first norm weight (lm_block_input_grad's norm_kind) */
    /* the adaptable modules (PEFT's per-linear names inside the block, in layout order) */
    int lora_mods;
    /* pairs of kinds one GEMM reads as one matrix (adjacent in the layout): both must be
     * in one set, or creation fails naming them */
    const int (*fused)[2];
    int n_fused;
    /* the family's checks of a model description: one line naming what this
     * engine cannot run (DT_EINVAL), after dt_model_validate */
    int (*check)(const dt_model *m, dt_error *err);
    /* g->D, qk_norm, qkv_bias, tied from the description */
    void (*configure)(dt_lm *g, const dt_model *m);
    /* a block's saved activations: the family's record (acts_size bytes) laid out from
     * *off (base NULL: measure only), and the final norm's statistics (after lnf);
     * docs/activations.md lists them. views_size: the family's fp32 views struct,
     * float pointers only (dt_lm_free frees each) */
    size_t acts_size, views_size;
    /* block l's record; shared: the shared record (laid out already), where the tensors
     * block l's backward does not read go (a frozen, unadapted linear's input), or NULL:
     * every tensor its own (the shared record itself, measuring) */
    void (*layout_block_acts)(dt_lm *g, int64_t l, void *acts, char *base, size_t *off, const void *shared);
    void (*layout_norm_stats)(dt_lm *g, char *base, size_t *off);
    /* the family's scratch (dQKV, dF, dA, RoPE tables) and, with 16-bit activations,
     * its fp32 activation views; 1 on success, 0 when an allocation failed (what
     * was allocated is freed by dt_lm_free) */
    int (*alloc_scratch)(dt_lm *g, const dt_model *m);
    int (*alloc_views)(dt_lm *g);
    /* the widest linear output (OC) and the fp32 view gemm16 borrows (the MLP's
     * GEMM-only activation: docs/engine.md "Precision") */
    int64_t (*widest_linear)(const dt_lm *g);
    float *(*gemm16_view)(dt_lm *g);
    /* block l forward from x[l] into A (xout: x[l + 1], or NULL when recomputing) and
     * backward; DT_OK or a GEMM's error */
    int (*block_forward)(dt_lm *g, int l, void *acts, void *xout, const lm_params *P);
    int (*block_backward)(dt_lm *g, int l, const void *acts, const lm_params *P, float *G);
    /* the final norm: out [N, C] from x [N, C] (P: its fp32 parameters) into g->lnf's
     * statistics; backward: dres (=) from dout with G its fp32 gradient (+=) */
    void (*norm_forward)(dt_lm *g, float *out, const float *x, const float *P);
    void (*norm_backward)(dt_lm *g, const float *dout, const float *x, const float *P, float *G);
};

/* ---- tensor parallelism (lm_tp.c; dt_lm_options.tp) ----
 * Every function is a no-op returning DT_OK when g->tp is NULL. A failed collective
 * leaves its line in g->tp_err and returns its code. */
/* the description of this rank's shard (dims divided), the roles of its modules */
void lm_tp_shard_desc(dt_lm *g, dt_model_desc *d);
/* H, Hkv, QD, KVD, F, V of this rank's shard (after the family's configure) */
void lm_tp_configure(dt_lm *g);
/* t's split by its module's role; the whole tensor's elements (t->numel without TP) */
size_t lm_tp_mark(const dt_lm *g, dt_tensor_info *t, const char *module, const char *tensor);
/* the TP scratch (after the dims are set); 1 on success */
int lm_tp_alloc(dt_lm *g);
void lm_tp_free(dt_lm *g);
/* the group sum of buf[n] (Megatron's g in forward after a row-parallel linear, f in
 * backward at a column-parallel linear's input) */
int lm_tp_allreduce(dt_lm *g, float *buf, size_t n);
/* a row-parallel linear's output: the sum over the group, then its bias (NULL: none) once */
int lm_tp_row_output(dt_lm *g, float *out, const float *bias, int64_t N, int64_t OC);
/* forward: the input tokens (g->inputs, host) made local rows (0 where outside this rank's
 * slice, masked) before the encoder; after it, the masked rows zeroed, the sum over the
 * group, then wpe (fp32 [T, C] or NULL) added */
void lm_tp_localize_inputs(dt_lm *g);
int lm_tp_encoder_reduce(dt_lm *g, float *x0, const void *wpe);
/* backward: wpe's gradient (dwpe, grad dtype, NULL: none) from the whole g->dres, then the
 * rows of tokens outside this rank's slice zeroed for wte's */
void lm_tp_encoder_backward_prep(dt_lm *g, void *dwpe);
/* vocab-parallel cross-entropy over g->logits [N, V/tp]: *mean as the op's (over all N
 * rows, ignored at 0); backward turns the logits into dlogits in place */
int lm_tp_xent_forward(dt_lm *g, int has_targets, double *mean);
void lm_tp_xent_backward(dt_lm *g, float dloss);
/* block l's partial-gradient tensors (Qwen3's q/k norms): saved before its backward, the
 * micro-step's contribution summed over the group after */
void lm_tp_partial_save(dt_lm *g, int l, const float *G);
int lm_tp_partial_reduce(dt_lm *g, int l, float *G);
/* RoPE tables cos_t, sin_t [T, head_dim / 2] (fp32, positions 0 .. T-1) of a llama-family
 * model with its rope_theta and rope_scaling, as HF transformers computes them
 * (lm_llama.c; the generator's too). */
void lm_rope_tables(const dt_model *m, int64_t T, float *cos_t, float *sin_t);

/* The families (lm_gpt2.c, lm_llama.c); lm.c picks one by dt_family. */
extern const lm_family lm_family_gpt2;
extern const lm_family lm_family_llama;

/* ---- the saved records' layout (the families' layout_block_acts) ---- */

/* 1 when block l's backward reads the input of the linear whose weight is kind w (or -1) and
 * adapter A kinds a0, a1 (or -1): for the weight's gradient when it is trained, for lora_A's
 * when adapted. A frozen, unadapted linear's input is read by nothing: its dX needs the
 * weight alone. */
static inline int lm_reads_linear_input(const dt_lm *g, int64_t l, int w, int a0, int a1) {
    const lm_slot *o = g->slots + l * g->family->block_kinds;
    return (w >= 0 && lm_slot_trained(o[w])) || (a0 >= 0 && o[a0].off != SIZE_MAX) ||
           (a1 >= 0 && o[a1].off != SIZE_MAX);
}
/* *off's next bytes (lm_take), or, when the block does not keep it (keep 0, shared given),
 * the shared record's tensor */
static inline void *lm_take_kept(char *base, size_t *off, size_t bytes, int keep, const void *shared_t) {
    return keep ? lm_take(base, off, bytes) : (void *)shared_t;
}

#endif
