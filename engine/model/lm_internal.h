/* lm_internal.h — the model object shared by lm.c (layout, storage, hooks,
 * init, the forward / backward drivers, the GPT-2 block) and lm_llama.c (the
 * llama-family block: Llama, Qwen2, Qwen3). Not a public header: everything
 * outside engine/model/ uses dt_lm.h.
 *
 * Dimension letters: B batch, T time, C channels (hidden), H query heads,
 * Hkv key/value heads, D head width, QD = H*D, KVD = Hkv*D, QK = QD + KVD,
 * F ffn, V vocab, L layers, N = B*T token rows. GPT-2: Hkv = H, D = C / H. */
#ifndef DT_LM_INTERNAL_H
#define DT_LM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_lm.h"

#define DT_TENSOR_NAME_MAX 64
#define DT_LM_MAX_BLOCK_TENSORS 16
/* The widest attention head the device kernels take: the CUDA flash kernel keeps
 * one head's q / k / v rows in shared memory (docs/cuda.md "Attention"). */
#define DT_LM_MAX_HEAD_DIM 256

/* One block's saved activations (docs/activations.md). Pointers into the
 * activations allocation, act dtype unless float*; a family uses its own
 * fields and leaves the others NULL. */
typedef struct {
    void *ln1;        /* [N, C]  first norm's output */
    float *ln1_mean;  /* [N]     gpt2 */
    float *ln1_rstd;  /* [N] */
    void *qkv;        /* [N, 3C] gpt2: packed q | k | v */
    void *qk_raw;     /* [N, QK] llama with q/k norm: the projection before the norm */
    float *qk_rstd;   /* [N, H] then [N, Hkv]: q / k norm statistics (q/k norm only) */
    void *qk;         /* [N, QK] llama: q | k after norm and RoPE (what attention reads) */
    void *v;          /* [N, KVD] llama */
    float *lse;       /* [B, H, T] (flash) or NULL */
    void *probs;      /* [B, H, T, T] (materialized) or NULL */
    void *att;        /* [N, QD] attention output = output projection input */
    void *res1;       /* [N, C]  residual after attention */
    void *ln2;        /* [N, C] */
    float *ln2_mean;  /* [N]     gpt2 */
    float *ln2_rstd;  /* [N] */
    void *fch;        /* [N, F]  gpt2: c_fc output */
    void *gelu;       /* [N, F]  gpt2: GELU output = c_proj input */
    void *gu;         /* [N, 2F] llama: gate | up projection output */
    void *act;        /* [N, F]  llama: silu(gate) * up = down_proj input */
} block_acts;

/* fp32 views of one block's activations, used only when the activation dtype is
 * 16-bit (buffers). Same shapes as block_acts plus the block input x. */
typedef struct {
    float *x, *ln1, *qkv, *qk_raw, *qk, *v, *probs, *att, *res1, *ln2, *fch, *gelu, *gu, *act,
        *xout;
} block_f32;

/* A group's parameters as the blocks read them. f32: the fp32 view at the
 * group's element offsets (the bound storage itself in fp32; with 16-bit
 * params the whole group converted into pw, or, when w16 is set, only its
 * vectors: norm weights and biases). w16: the group's 16-bit storage, which
 * the linears' 16-bit GEMMs read directly (dt_lm.gemm16), else NULL. */
typedef struct {
    const float *f32;
    const void *w16;
} lm_params;

/* Weight layout of a linear: GPT-2's Conv1D stores w [IC, OC], torch.nn.Linear
 * (the llama family) w [OC, IC]. */
typedef enum { LM_W_IN_OUT = 0, LM_W_OUT_IN = 1 } lm_wlayout;

struct dt_lm {
    const dt_device_ops *dev;   /* where storage lives and ops run */
    dt_family fam;
    int64_t B, T, C, H, Hkv, D, QD, KVD, F, V, L, maxT, K;
    int qk_norm, qkv_bias, tied;   /* llama family options (gpt2: 0, 1, 1) */
    float eps;
    dt_attention attn;
    dt_dtype pt, gt, at;    /* param, grad, activation dtypes */
    int psz, gsz, asz;      /* their sizes in bytes */

    /* layout */
    int ntensors;
    dt_tensor_info *tensors;
    char (*names)[DT_TENSOR_NAME_MAX];
    int ngroups;
    size_t *group_off, *group_numel;
    size_t nparams;
    size_t max_group_numel;   /* largest group that is converted whole (blocks, final norm, wpe) */
    /* element offset of each per-block tensor kind inside a block's group (the
     * same for every block; SIZE_MAX: the family / options have no such tensor) */
    size_t boff[DT_LM_MAX_BLOCK_TENSORS];
    int cls_group;            /* the group holding the classifier matrix [V, C]: 0 tied, L+1 untied */
    size_t cls_off;           /* its element offset inside that group */
    size_t norm_off;          /* the final norm's weight inside group L+1 */

    /* storage */
    void *params, *grads;            /* flat, DT_MEM_PARAMS / DT_MEM_GRADS */
    void **gparams, **ggrads;        /* per-group bases (rebindable) */
    dt_lm_hooks hooks;

    /* activations (DT_MEM_ACTIVATIONS), one allocation */
    void *act_mem;
    size_t act_bytes;
    void **x;                 /* [L + 1] residual stream: x[l] block l input, x[L] final norm input */
    block_acts *blocks;       /* [L]; checkpointed blocks have all-NULL entries */
    block_acts recompute;     /* shared area when K > 0 */
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
    float *pw;                /* fp32 params of the current group (16-bit params) */
    float *gw;                /* fp32 grads of the current group (16-bit grads) */
    block_f32 w32;            /* 16-bit activations only */
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
    int64_t counted;          /* its targets that carry loss (not DT_IGNORE_INDEX) */
};

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

/* ---- helpers shared by the families ---- */

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

/* ---- linears (lm.c): the fp32 device ops, or with gemm16 the 16-bit GEMMs ----
 * inp: the saved input activation (act dtype); inp32: its fp32 view (ignored,
 * may be NULL, with gemm16); w_off: the weight's element offset in the group;
 * bias / dbias fp32 or NULL; kind: the layer kind the profile books it to.
 * Shapes as dt_op_linear_* (out [N, OC], inp [N, IC]).
 * DT_OK, or gemm_ex's error. */
int lm_linear_forward(dt_lm *g, dt_lm_op kind, lm_wlayout lay, float *out, const void *inp, const float *inp32,
                      const lm_params *P, size_t w_off, const float *bias, int64_t N, int64_t IC,
                      int64_t OC);
/* dinp [N, IC] = (or += with accumulate_dinp) dout @ W; dw += (fp32, W's layout);
 * dbias [OC] += column sums of dout [N, OC] (fp32). With gemm16 dout is rounded
 * to bf16 once (in row chunks of d16), as PyTorch autocast's bf16 backward. */
int lm_linear_backward(dt_lm *g, dt_lm_op kind, lm_wlayout lay, float *dinp, float *dw, float *dbias,
                       const float *dout, const void *inp, const float *inp32, const lm_params *P,
                       size_t w_off, int64_t N, int64_t IC, int64_t OC, int accumulate_dinp);

/* ---- the llama family (lm_llama.c) ---- */

/* Appends block l's tensors (group 1 + l) to the table from tensor index *i and
 * element offset *off; on the first block also fills g->boff. */
void lm_llama_block_layout(dt_lm *g, int l, int *i, size_t *off);
/* Number of tensors per block for g's options. */
int lm_llama_block_tensors(const dt_lm *g);
/* Lays out one block's saved activations from *off (base NULL: measure only). */
void lm_llama_layout_block_acts(dt_lm *g, block_acts *ba, char *base, size_t *off);
/* cos / sin tables [T, D/2] on the host (fp32, as HF computes them) for the
 * model's rope_theta and rope_scaling. */
void lm_llama_rope_tables(const dt_model *m, int64_t T, float *cos_t, float *sin_t);
/* DT_OK, or a GEMM's error (lm_linear_forward / _backward) */
int lm_llama_block_forward(dt_lm *g, int l, block_acts *A, void *xout, const lm_params *P);
int lm_llama_block_backward(dt_lm *g, int l, const block_acts *A, const lm_params *P, float *G);

/* Sets a tensor's entry (lm.c). */
void lm_set_tensor(dt_lm *g, int i, const char *name, int group, size_t *off, int ndim, int64_t d0,
                   int64_t d1);

#endif
