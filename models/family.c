/* family.c — the family description (dt_model_describe) and everything derived from
 * it: parameter counts, matmul FLOPs and the activations a block keeps for backward.
 * One table per family lists the modules of Hugging Face's block; nothing below the
 * table branches on the family. See dt_model.h and docs/models.md "Family description".
 *
 * Notation (docs/models.md): L layers, h hidden, a = n_head, k = n_kv_head,
 * d = head_dim, f = ffn, V = vocab, P = max_pos. Sizes are elements. */
#include "dt_model.h"

#include <string.h>

/* Sizes a table row names; resolved against a dt_model by size_of(). */
typedef enum {
    SZ_NONE = 0,   /* unused slot */
    SZ_ONE,        /* 1 */
    SZ_H,          /* h */
    SZ_F,          /* f */
    SZ_V,          /* V */
    SZ_P,          /* P (learned positions) */
    SZ_D,          /* d */
    SZ_A,          /* a (query heads) */
    SZ_K,          /* k (key/value heads) */
    SZ_Q,          /* a·d: the query width */
    SZ_KV,         /* k·d: the key (or value) width */
    SZ_QKV         /* (a + 2k)·d: q, k and v fused (GPT-2's c_attn) */
} dt_size_sym;

/* When a module (or a linear's bias) exists. */
typedef enum {
    ON_NEVER = 0,
    ON_ALWAYS,
    ON_QKV_BIAS,   /* dt_model.qkv_bias: Qwen2's q/k/v bias */
    ON_QK_NORM     /* dt_model.qk_norm: Qwen3's per-head q/k RMSNorm */
} dt_when;

typedef struct { const char *name; dt_size_sym in, out; dt_when bias; } linear_row;
typedef struct { const char *name; dt_norm_kind kind; dt_size_sym width, rows; dt_when on; } norm_row;
typedef struct {
    norm_row norm;
    linear_row in[DT_SUBLAYER_MAX_IN];
    norm_row in_norm[DT_SUBLAYER_MAX_IN_NORM];
    linear_row out;
} sublayer_rows;
typedef struct { const char *name; dt_size_sym rows; } embed_row;
typedef struct {
    sublayer_rows attn, mlp;
    dt_mlp_kind act;
    embed_row embed[DT_MODEL_MAX_EMBED];
    norm_row final_norm;
    const char *lm_head;
    int resid_dropouts;   /* nn.Dropout modules on the residual branch per block */
    int embed_dropout;    /* an nn.Dropout after the embeddings */
} family_rows;

/* The blocks, module by module, with Hugging Face's module names. */
static const family_rows k_family_rows[] = {
    /* modeling_gpt2.py: GPT2Block = ln_1, GPT2Attention (Conv1D c_attn h -> 3h, c_proj
     * h -> h, both with bias), ln_2, GPT2MLP (c_fc h -> f, GELU, c_proj f -> h);
     * GPT2Model: wte, wpe, ln_f; GPT2LMHeadModel: lm_head (tied to wte). */
    [DT_FAMILY_GPT2] = {
        .attn = {.norm = {"ln_1", DT_NORM_LAYERNORM, SZ_H, SZ_ONE, ON_ALWAYS},
                 .in = {{"attn.c_attn", SZ_H, SZ_QKV, ON_ALWAYS}},
                 .out = {"attn.c_proj", SZ_Q, SZ_H, ON_ALWAYS}},
        .mlp = {.norm = {"ln_2", DT_NORM_LAYERNORM, SZ_H, SZ_ONE, ON_ALWAYS},
                .in = {{"mlp.c_fc", SZ_H, SZ_F, ON_ALWAYS}},
                .out = {"mlp.c_proj", SZ_F, SZ_H, ON_ALWAYS}},
        .act = DT_MLP_GELU,
        .embed = {{"wte", SZ_V}, {"wpe", SZ_P}},
        .final_norm = {"ln_f", DT_NORM_LAYERNORM, SZ_H, SZ_ONE, ON_ALWAYS},
        .lm_head = "lm_head",
        /* GPT2Attention.resid_dropout and GPT2MLP.dropout (resid_pdrop), GPT2Model.drop
         * (embd_pdrop); the attention-probability dropout (attn_pdrop) is the kernel's */
        .resid_dropouts = 2,
        .embed_dropout = 1,
    },
    /* modeling_llama.py: LlamaDecoderLayer = input_layernorm (LlamaRMSNorm),
     * LlamaAttention (q_proj h -> a·d, k_proj / v_proj h -> k·d, o_proj a·d -> h, no bias),
     * post_attention_layernorm, LlamaMLP (gate_proj, up_proj h -> f, SiLU(gate)·up,
     * down_proj f -> h); LlamaModel: embed_tokens, norm; LlamaForCausalLM: lm_head.
     * modeling_qwen2.py Qwen2Attention: q/k/v_proj with bias=True (o_proj without).
     * modeling_qwen3.py Qwen3Attention: q_norm, k_norm = Qwen3RMSNorm(head_dim) on each
     * head of q and k before RoPE. Mistral's block is Llama's. */
    [DT_FAMILY_LLAMA] = {
        .attn = {.norm = {"input_layernorm", DT_NORM_RMSNORM, SZ_H, SZ_ONE, ON_ALWAYS},
                 .in = {{"self_attn.q_proj", SZ_H, SZ_Q, ON_QKV_BIAS},
                        {"self_attn.k_proj", SZ_H, SZ_KV, ON_QKV_BIAS},
                        {"self_attn.v_proj", SZ_H, SZ_KV, ON_QKV_BIAS}},
                 .in_norm = {{"self_attn.q_norm", DT_NORM_RMSNORM, SZ_D, SZ_A, ON_QK_NORM},
                             {"self_attn.k_norm", DT_NORM_RMSNORM, SZ_D, SZ_K, ON_QK_NORM}},
                 .out = {"self_attn.o_proj", SZ_Q, SZ_H, ON_NEVER}},
        .mlp = {.norm = {"post_attention_layernorm", DT_NORM_RMSNORM, SZ_H, SZ_ONE, ON_ALWAYS},
                .in = {{"mlp.gate_proj", SZ_H, SZ_F, ON_NEVER}, {"mlp.up_proj", SZ_H, SZ_F, ON_NEVER}},
                .out = {"mlp.down_proj", SZ_F, SZ_H, ON_NEVER}},
        .act = DT_MLP_SWIGLU,
        .embed = {{"embed_tokens", SZ_V}},
        .final_norm = {"norm", DT_NORM_RMSNORM, SZ_H, SZ_ONE, ON_ALWAYS},
        .lm_head = "lm_head",
        /* LlamaAttention's only dropout is on the attention probabilities (attention_dropout) */
        .resid_dropouts = 0,
        .embed_dropout = 0,
    },
};
#define DT_N_FAMILY_ROWS ((int)(sizeof k_family_rows / sizeof k_family_rows[0]))

/* Statistics a norm keeps per normalised row for backward (fp32): LayerNorm its mean
 * and reciprocal standard deviation, RMSNorm its reciprocal RMS. */
#define DT_LAYERNORM_STATS 2
#define DT_RMSNORM_STATS 1
/* Parameters per normalised element: LayerNorm weight + bias, RMSNorm weight. */
#define DT_LAYERNORM_PARAMS 2
#define DT_RMSNORM_PARAMS 1

static int64_t size_of(const dt_model *m, dt_size_sym s) {
    switch (s) {
    case SZ_NONE: return 0;
    case SZ_ONE: return 1;
    case SZ_H: return m->hidden;
    case SZ_F: return m->ffn;
    case SZ_V: return m->vocab;
    case SZ_P: return m->max_pos;
    case SZ_D: return m->head_dim;
    case SZ_A: return m->n_head;
    case SZ_K: return m->n_kv_head;
    case SZ_Q: return m->n_head * m->head_dim;
    case SZ_KV: return m->n_kv_head * m->head_dim;
    case SZ_QKV: return (m->n_head + 2 * m->n_kv_head) * m->head_dim;
    }
    return 0;
}

static int is_on(const dt_model *m, dt_when w) {
    switch (w) {
    case ON_NEVER: return 0;
    case ON_ALWAYS: return 1;
    case ON_QKV_BIAS: return m->qkv_bias != 0;
    case ON_QK_NORM: return m->qk_norm != 0;
    }
    return 0;
}

static dt_linear_desc linear_of(const dt_model *m, const linear_row *r) {
    dt_linear_desc l = {r->name, size_of(m, r->in), size_of(m, r->out), is_on(m, r->bias)};
    return l;
}

static dt_norm_desc norm_of(const dt_model *m, const norm_row *r) {
    dt_norm_desc n = {r->name, r->kind, size_of(m, r->width), size_of(m, r->rows)};
    return n;
}

static void sublayer_of(const dt_model *m, const sublayer_rows *r, dt_sublayer_desc *s) {
    memset(s, 0, sizeof *s);
    s->norm = norm_of(m, &r->norm);
    for (int i = 0; i < DT_SUBLAYER_MAX_IN && r->in[i].name; i++) s->in[s->n_in++] = linear_of(m, &r->in[i]);
    for (int i = 0; i < DT_SUBLAYER_MAX_IN_NORM && r->in_norm[i].name; i++)
        if (is_on(m, r->in_norm[i].on)) s->in_norm[s->n_in_norm++] = norm_of(m, &r->in_norm[i]);
    s->out = linear_of(m, &r->out);
}

void dt_model_describe(const dt_model *m, dt_model_desc *out) {
    memset(out, 0, sizeof *out);
    if (!m || (int)m->family < 0 || (int)m->family >= DT_N_FAMILY_ROWS) return;   /* all zero */
    const family_rows *f = &k_family_rows[m->family];
    sublayer_of(m, &f->attn, &out->block.attn);
    sublayer_of(m, &f->mlp, &out->block.mlp);
    out->block.n_head = m->n_head;
    out->block.n_kv_head = m->n_kv_head;
    out->block.head_dim = m->head_dim;
    out->block.act = f->act;
    out->block.resid_dropouts = f->resid_dropouts;
    out->embed_dropout = f->embed_dropout;
    for (int i = 0; i < DT_MODEL_MAX_EMBED && f->embed[i].name; i++) {
        dt_embed_desc e = {f->embed[i].name, size_of(m, f->embed[i].rows), m->hidden};
        out->embed[out->n_embed++] = e;
    }
    out->final_norm = norm_of(m, &f->final_norm);
    dt_linear_desc head = {f->lm_head, m->hidden, m->vocab, 0};
    out->lm_head = head;
    out->lm_head_tied = m->tied_embeddings != 0;
}

/* ------------------------------------------------------------ parameters */

static int64_t linear_params(const dt_linear_desc *l) { return l->in * l->out + (l->bias ? l->out : 0); }

/* A norm's weight (and bias) has `width` elements, shared by its rows (Qwen3RMSNorm(head_dim)
 * serves every head). */
static int64_t norm_params(const dt_norm_desc *n) {
    return n->width * (n->kind == DT_NORM_LAYERNORM ? DT_LAYERNORM_PARAMS : DT_RMSNORM_PARAMS);
}

static int64_t norm_stats(const dt_norm_desc *n) {
    return n->rows * (n->kind == DT_NORM_LAYERNORM ? DT_LAYERNORM_STATS : DT_RMSNORM_STATS);
}

static int64_t sublayer_params(const dt_sublayer_desc *s) {
    int64_t n = norm_params(&s->norm) + linear_params(&s->out);
    for (int i = 0; i < s->n_in; i++) n += linear_params(&s->in[i]);
    for (int i = 0; i < s->n_in_norm; i++) n += norm_params(&s->in_norm[i]);
    return n;
}

static int64_t sublayer_matmul(const dt_sublayer_desc *s) {
    int64_t n = s->out.in * s->out.out;
    for (int i = 0; i < s->n_in; i++) n += s->in[i].in * s->in[i].out;
    return n;
}

int64_t dt_model_block_params(const dt_model *m) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    return sublayer_params(&d.block.attn) + sublayer_params(&d.block.mlp);
}

int64_t dt_model_block_matmul_params(const dt_model *m) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    return sublayer_matmul(&d.block.attn) + sublayer_matmul(&d.block.mlp);
}

int64_t dt_model_embedding_params(const dt_model *m) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    int64_t n = 0;
    for (int i = 0; i < d.n_embed; i++) n += d.embed[i].rows * d.embed[i].width;
    return n;
}

int64_t dt_model_head_params(const dt_model *m) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    return norm_params(&d.final_norm) + (d.lm_head_tied ? 0 : linear_params(&d.lm_head));
}

int64_t dt_model_params(const dt_model *m) {
    return dt_model_embedding_params(m) + m->n_layer * dt_model_block_params(m) + dt_model_head_params(m);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static int64_t sublayer_largest(const dt_sublayer_desc *s) {
    int64_t best = max64(norm_params(&s->norm), linear_params(&s->out));
    for (int i = 0; i < s->n_in; i++) best = max64(best, linear_params(&s->in[i]));
    for (int i = 0; i < s->n_in_norm; i++) best = max64(best, norm_params(&s->in_norm[i]));
    return best;
}

int64_t dt_model_largest_module_params(const dt_model *m) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    int64_t best = max64(sublayer_largest(&d.block.attn), sublayer_largest(&d.block.mlp));
    for (int i = 0; i < d.n_embed; i++) best = max64(best, d.embed[i].rows * d.embed[i].width);
    best = max64(best, norm_params(&d.final_norm));
    if (!d.lm_head_tied) best = max64(best, linear_params(&d.lm_head));
    return best;
}

int64_t dt_model_largest_block_matrix_params(const dt_model *m) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    const dt_sublayer_desc *subs[2] = {&d.block.attn, &d.block.mlp};
    int64_t best = 0;
    for (int k = 0; k < 2; k++) {
        best = max64(best, subs[k]->out.in * subs[k]->out.out);
        for (int i = 0; i < subs[k]->n_in; i++) best = max64(best, subs[k]->in[i].in * subs[k]->in[i].out);
    }
    return best;
}

/* Elements of tensors below threshold (a tensor is a weight, a bias, or a norm's
 * weight / bias: DeepSpeed tests each parameter on its own, param.ds_numel <
 * param_persistence_threshold, deepspeed/runtime/zero/partition_parameters.py). */
static int64_t small(int64_t n, int64_t threshold) { return n < threshold ? n : 0; }
static int64_t linear_small(const dt_linear_desc *l, int64_t t) {
    return small(l->in * l->out, t) + (l->bias ? small(l->out, t) : 0);
}
static int64_t norm_small(const dt_norm_desc *n, int64_t t) {
    return (n->kind == DT_NORM_LAYERNORM ? DT_LAYERNORM_PARAMS : DT_RMSNORM_PARAMS) * small(n->width, t);
}
static int64_t sublayer_small(const dt_sublayer_desc *s, int64_t t) {
    int64_t n = norm_small(&s->norm, t) + linear_small(&s->out, t);
    for (int i = 0; i < s->n_in; i++) n += linear_small(&s->in[i], t);
    for (int i = 0; i < s->n_in_norm; i++) n += norm_small(&s->in_norm[i], t);
    return n;
}

int64_t dt_model_small_tensor_params(const dt_model *m, int64_t threshold) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    int64_t n = m->n_layer * (sublayer_small(&d.block.attn, threshold) + sublayer_small(&d.block.mlp, threshold));
    for (int i = 0; i < d.n_embed; i++) n += small(d.embed[i].rows * d.embed[i].width, threshold);
    n += norm_small(&d.final_norm, threshold);
    if (!d.lm_head_tied) n += linear_small(&d.lm_head, threshold);
    return n;
}

/* One fetch per module that owns a tensor of at least threshold elements: its norm, in
 * linears, in norms and out linear, each with its large tensors only. */
static void sublayer_fetch(const dt_sublayer_desc *s, int64_t t, int64_t *sizes, int max, int *n) {
    int64_t v[2 + DT_SUBLAYER_MAX_IN + DT_SUBLAYER_MAX_IN_NORM];
    int k = 0;
    v[k++] = norm_params(&s->norm) - norm_small(&s->norm, t);
    for (int i = 0; i < s->n_in; i++) v[k++] = linear_params(&s->in[i]) - linear_small(&s->in[i], t);
    for (int i = 0; i < s->n_in_norm; i++) v[k++] = norm_params(&s->in_norm[i]) - norm_small(&s->in_norm[i], t);
    v[k++] = linear_params(&s->out) - linear_small(&s->out, t);
    for (int i = 0; i < k; i++)
        if (v[i] > 0) {
            if (*n < max) sizes[*n] = v[i];
            ++*n;
        }
}

int dt_model_block_fetch_sizes(const dt_model *m, int64_t threshold, int64_t *sizes, int max) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    int n = 0;
    sublayer_fetch(&d.block.attn, threshold, sizes, max, &n);
    sublayer_fetch(&d.block.mlp, threshold, sizes, max, &n);
    return n;
}

/* Hugging Face's MLP activations are compositions of element-wise ops, each keeping a
 * tensor for backward (PyTorch tools/autograd/derivatives.yaml: tanh keeps its result,
 * a tensor-tensor mul keeps both operands, silu keeps its input):
 *   GELU (transformers activations.py NewGELUActivation, GPT-2's "gelu_new"):
 *     0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) keeps x (counted as the
 *     c_fc output), tanh's result, 0.5 * x and 1 + tanh: 3 tensors of F beyond it;
 *   SwiGLU (LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x))): the product keeps
 *     act(gate) besides up, and silu keeps gate: 1 tensor of F beyond the 3 counted.
 * A fused kernel (dtrun's engine, Liger, torch.compile) keeps none of these. */
#define DT_GELU_UNFUSED_EXTRA 3
#define DT_SWIGLU_UNFUSED_EXTRA 1

int64_t dt_model_block_act_unfused(const dt_model *m) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    const int64_t F = d.block.mlp.out.in;
    return (d.block.act == DT_MLP_GELU ? DT_GELU_UNFUSED_EXTRA : DT_SWIGLU_UNFUSED_EXTRA) * F;
}

/* ------------------------------------------------- saved for backward */

/* Korthikanti et al. 2022, §4.1: every op keeps its inputs for the backward. In a
 * pre-norm sublayer that is the norm's input (the residual) and statistics, the norm's
 * output (the in linears' one shared input), the q/k norms' inputs and statistics, the
 * core's inputs (the in linears' outputs: q, k, v or the activation's input) and the out
 * linear's input (the core's output). No dropout (p = 0 in every catalog model). The
 * attention core's own state (log-sum-exp or probabilities) is the memory model's. */
static void sublayer_saved(const dt_sublayer_desc *s, dt_saved *acc) {
    acc->elems += 2 * s->norm.width * s->norm.rows;   /* the norm's input and output */
    acc->stats += norm_stats(&s->norm);
    for (int i = 0; i < s->n_in_norm; i++) {
        acc->elems += s->in_norm[i].width * s->in_norm[i].rows;
        acc->stats += norm_stats(&s->in_norm[i]);
    }
    for (int i = 0; i < s->n_in; i++) acc->elems += s->in[i].out;
    acc->elems += s->out.in;
}

void dt_model_block_saved(const dt_model *m, dt_saved *out) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    memset(out, 0, sizeof *out);
    sublayer_saved(&d.block.attn, out);
    sublayer_saved(&d.block.mlp, out);
    out->attn_rows = d.block.n_head;
}

void dt_model_head_saved(const dt_model *m, dt_saved *out) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    memset(out, 0, sizeof *out);
    out->elems = d.final_norm.width * d.final_norm.rows + d.lm_head.in;   /* norm input, lm_head input */
    out->stats = norm_stats(&d.final_norm);
}

static int64_t sublayer_in_width(const dt_sublayer_desc *s) {
    int64_t n = 0;
    for (int i = 0; i < s->n_in; i++) n += s->in[i].out;
    return n;
}

int64_t dt_model_block_widest_in(const dt_model *m) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    return max64(sublayer_in_width(&d.block.attn), sublayer_in_width(&d.block.mlp));
}

/* ----------------------------------------------------------------- FLOPs */

/* Convention (docs/models.md "FLOPs convention"): a multiply-add is 2 FLOPs; forward
 * matmuls cost 2 · (matmul weights) · T, with the lm_head counted even when tied (the
 * product is computed); attention computes the full T x T square per query head, QK^T
 * and PV, 2 · 2 · T² · a · d per layer (no causal halving: what a simple engine does).
 * Norms, activations, softmax, biases and embedding lookups are not counted.
 * Backward = 2 x forward, so training = 3 x forward. */
#define DT_FLOPS_PER_MAC 2.0
#define DT_ATTN_MATMULS 2.0   /* QK^T and PV */
#define DT_TRAIN_OVER_FWD 3.0

void dt_model_block_fwd_flops(const dt_model *m, int64_t seq, dt_block_flops *out) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    const double T = (double)seq;
    const dt_block_desc *b = &d.block;
    const dt_linear_desc *down = &b->mlp.out;
    out->matmul = DT_FLOPS_PER_MAC * (double)(sublayer_matmul(&b->attn) + sublayer_matmul(&b->mlp)) * T;
    out->attention = DT_ATTN_MATMULS * DT_FLOPS_PER_MAC * T * T * (double)(b->n_head * b->head_dim);
    out->mlp_out = DT_FLOPS_PER_MAC * (double)(down->in * down->out) * T;
}

double dt_model_block_fwd_flops_per_seq(const dt_model *m, int64_t seq) {
    dt_block_flops f;
    dt_model_block_fwd_flops(m, seq, &f);
    return f.matmul + f.attention;
}

double dt_model_train_flops_per_seq(const dt_model *m, int64_t seq) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    double lm_head = DT_FLOPS_PER_MAC * (double)(d.lm_head.out * d.lm_head.in) * (double)seq;
    double fwd = (double)m->n_layer * dt_model_block_fwd_flops_per_seq(m, seq) + lm_head;
    return DT_TRAIN_OVER_FWD * fwd;
}
