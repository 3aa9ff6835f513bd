/* test_family.c — the family description (dt_model_describe) is the one source of the
 * parameter counts, the saved activations and the FLOPs: for every catalog model (and
 * derived shapes) it is checked against
 *   - an independent count per tensor, written here from the HF module structure
 *     (modeling_gpt2.py GPT2Block / GPT2Model; modeling_llama.py LlamaDecoderLayer,
 *     modeling_qwen2.py Qwen2Attention's q/k/v bias, modeling_qwen3.py q_norm / k_norm);
 *   - the saved tensors of Korthikanti et al. 2022 §4.1, listed op by op;
 *   - what the memory model (dt_memory_activations_per_block) and the time model
 *     (dt_time_compute_micro, on a profile of 1 FLOP/s for GEMMs and 2 for attention)
 *     compute from it. */
#include <math.h>
#include <stdint.h>

#include "dt_memory.h"
#include "dt_model.h"
#include "dt_test.h"
#include "dt_timemodel.h"

#define MAX_TENSORS 32

typedef struct {
    char name[64];   /* HF state-dict name within the block / model */
    int64_t numel;
    int ndim;
} tensor;

typedef struct {
    tensor t[MAX_TENSORS];
    int n;
} tensor_list;

static void add(tensor_list *l, const char *name, int ndim, int64_t d0, int64_t d1) {
    if (l->n >= MAX_TENSORS) {
        fprintf(stderr, "too many tensors\n");
        exit(1);
    }
    tensor *t = &l->t[l->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->numel = ndim == 1 ? d0 : d0 * d1;
}

/* One block's parameters as HF's modules create them. */
static void hf_block(const dt_model *m, tensor_list *l) {
    const int64_t h = m->hidden, f = m->ffn, a = m->n_head, k = m->n_kv_head, d = m->head_dim;
    l->n = 0;
    if (m->family == DT_FAMILY_GPT2) {
        /* GPT2Block: ln_1 = LayerNorm(h); GPT2Attention: c_attn = Conv1D(3 * embed_dim,
         * embed_dim), c_proj = Conv1D(embed_dim, embed_dim); ln_2; GPT2MLP: c_fc =
         * Conv1D(intermediate, h), c_proj = Conv1D(h, intermediate). Conv1D has a bias. */
        add(l, "ln_1.weight", 1, h, 0);
        add(l, "ln_1.bias", 1, h, 0);
        add(l, "attn.c_attn.weight", 2, h, 3 * h);
        add(l, "attn.c_attn.bias", 1, 3 * h, 0);
        add(l, "attn.c_proj.weight", 2, h, h);
        add(l, "attn.c_proj.bias", 1, h, 0);
        add(l, "ln_2.weight", 1, h, 0);
        add(l, "ln_2.bias", 1, h, 0);
        add(l, "mlp.c_fc.weight", 2, h, f);
        add(l, "mlp.c_fc.bias", 1, f, 0);
        add(l, "mlp.c_proj.weight", 2, f, h);
        add(l, "mlp.c_proj.bias", 1, h, 0);
        return;
    }
    /* LlamaDecoderLayer: input_layernorm = LlamaRMSNorm(h); LlamaAttention: q_proj =
     * Linear(h, a * d), k_proj / v_proj = Linear(h, k * d), o_proj = Linear(a * d, h),
     * bias=False (Qwen2Attention: q/k/v bias=True); Qwen3Attention: q_norm / k_norm =
     * RMSNorm(d); post_attention_layernorm; LlamaMLP: gate_proj / up_proj = Linear(h, f),
     * down_proj = Linear(f, h), no bias. */
    add(l, "input_layernorm.weight", 1, h, 0);
    add(l, "self_attn.q_proj.weight", 2, a * d, h);
    add(l, "self_attn.k_proj.weight", 2, k * d, h);
    add(l, "self_attn.v_proj.weight", 2, k * d, h);
    if (m->qkv_bias) {
        add(l, "self_attn.q_proj.bias", 1, a * d, 0);
        add(l, "self_attn.k_proj.bias", 1, k * d, 0);
        add(l, "self_attn.v_proj.bias", 1, k * d, 0);
    }
    if (m->qk_norm) {
        add(l, "self_attn.q_norm.weight", 1, d, 0);
        add(l, "self_attn.k_norm.weight", 1, d, 0);
    }
    add(l, "self_attn.o_proj.weight", 2, h, a * d);
    add(l, "post_attention_layernorm.weight", 1, h, 0);
    add(l, "mlp.gate_proj.weight", 2, f, h);
    add(l, "mlp.up_proj.weight", 2, f, h);
    add(l, "mlp.down_proj.weight", 2, h, f);
}

/* The model's parameters outside the blocks: embeddings, then the head. */
static void hf_outer(const dt_model *m, tensor_list *emb, tensor_list *head) {
    const int64_t h = m->hidden, V = m->vocab;
    emb->n = head->n = 0;
    if (m->family == DT_FAMILY_GPT2) {
        add(emb, "wte.weight", 2, V, h);
        add(emb, "wpe.weight", 2, m->max_pos, h);
        add(head, "ln_f.weight", 1, h, 0);
        add(head, "ln_f.bias", 1, h, 0);
    } else {
        add(emb, "embed_tokens.weight", 2, V, h);
        add(head, "norm.weight", 1, h, 0);
    }
    if (!m->tied_embeddings) add(head, "lm_head.weight", 2, V, h);
}

static int64_t sum(const tensor_list *l, int only_2d) {
    int64_t n = 0;
    for (int i = 0; i < l->n; i++)
        if (!only_2d || l->t[i].ndim == 2) n += l->t[i].numel;
    return n;
}

static const tensor *find(const tensor_list *l, const char *module, const char *what) {
    char name[96];
    snprintf(name, sizeof name, "%s.%s", module, what);
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->t[i].name, name)) return &l->t[i];
    return NULL;
}

/* A module's own parameters (DeepSpeed's "largest layer" unit). */
static int64_t module_params(const tensor_list *l, const char *module) {
    const tensor *w = find(l, module, "weight"), *b = find(l, module, "bias");
    return (w ? w->numel : 0) + (b ? b->numel : 0);
}

/* Every linear and norm of the description is an HF module with these tensors, and
 * the description accounts for every HF tensor of the block. */
static void check_modules(const char *model, const dt_sublayer_desc *s, const tensor_list *l, int *tensors) {
    const dt_linear_desc *lin[DT_SUBLAYER_MAX_IN + 1];
    int nl = 0;
    for (int i = 0; i < s->n_in; i++) lin[nl++] = &s->in[i];
    lin[nl++] = &s->out;
    for (int i = 0; i < nl; i++) {
        const tensor *w = find(l, lin[i]->name, "weight"), *b = find(l, lin[i]->name, "bias");
        if (!w || w->numel != lin[i]->in * lin[i]->out || !b != !lin[i]->bias || (b && b->numel != lin[i]->out))
            fprintf(stderr, "%s: linear %s does not match HF's tensors\n", model, lin[i]->name);
        CHECK(w && w->numel == lin[i]->in * lin[i]->out);
        CHECK(!b == !lin[i]->bias);
        CHECK(!b || b->numel == lin[i]->out);
        *tensors += 1 + (b != NULL);
    }
    const dt_norm_desc *nrm[DT_SUBLAYER_MAX_IN_NORM + 1];
    int nn = 0;
    nrm[nn++] = &s->norm;
    for (int i = 0; i < s->n_in_norm; i++) nrm[nn++] = &s->in_norm[i];
    for (int i = 0; i < nn; i++) {
        const tensor *w = find(l, nrm[i]->name, "weight"), *b = find(l, nrm[i]->name, "bias");
        if (!w || w->numel != nrm[i]->width) fprintf(stderr, "%s: norm %s does not match\n", model, nrm[i]->name);
        CHECK(w && w->numel == nrm[i]->width);
        CHECK(!b == (nrm[i]->kind == DT_NORM_RMSNORM));   /* LayerNorm has a bias, RMSNorm none */
        CHECK(!b || b->numel == nrm[i]->width);
        *tensors += 1 + (b != NULL);
    }
}

static void check_counts(const dt_model *m) {
    dt_model_desc d;
    tensor_list blk, emb, head;
    dt_model_describe(m, &d);
    hf_block(m, &blk);
    hf_outer(m, &emb, &head);

    int tensors = 0;
    check_modules(m->name, &d.block.attn, &blk, &tensors);
    check_modules(m->name, &d.block.mlp, &blk, &tensors);
    if (tensors != blk.n) fprintf(stderr, "%s: the description has %d tensors, HF %d\n", m->name, tensors, blk.n);
    CHECK_EQ_I64(tensors, blk.n);

    CHECK_EQ_I64(dt_model_block_params(m), sum(&blk, 0));
    CHECK_EQ_I64(dt_model_block_matmul_params(m), sum(&blk, 1));   /* the 2-D tensors: the GEMMs */
    CHECK_EQ_I64(dt_model_embedding_params(m), sum(&emb, 0));
    CHECK_EQ_I64(dt_model_head_params(m), sum(&head, 0));
    CHECK_EQ_I64(dt_model_params(m), sum(&emb, 0) + m->n_layer * sum(&blk, 0) + sum(&head, 0));
    CHECK_EQ_I64(d.n_embed, emb.n);
    CHECK_EQ_I64(d.lm_head_tied, m->tied_embeddings);

    /* largest module over the HF modules (weight + bias of each) */
    static const char *const mods[] = {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj",
                                       "input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                                       "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm",
                                       "self_attn.k_norm", "post_attention_layernorm", "mlp.gate_proj",
                                       "mlp.up_proj", "mlp.down_proj"};
    static const char *const outer[] = {"wte", "wpe", "embed_tokens", "ln_f", "norm", "lm_head"};
    int64_t best = 0;
    for (size_t i = 0; i < sizeof mods / sizeof mods[0]; i++) {
        int64_t n = module_params(&blk, mods[i]);
        best = n > best ? n : best;
    }
    for (size_t i = 0; i < sizeof outer / sizeof outer[0]; i++) {
        int64_t n = module_params(&emb, outer[i]) + module_params(&head, outer[i]);
        best = n > best ? n : best;
    }
    CHECK_EQ_I64(dt_model_largest_module_params(m), best);
}

/* Korthikanti et al. 2022 §4.1, op by op (no dropout), per token, elements:
 *   attention: norm input h, q/k/v projections' input h (the norm output), [Qwen3:
 *   q/k norm inputs a·d + k·d], attention inputs q, k, v, the output projection's
 *   input a·d; MLP: norm input h, first linear(s) input h, activation input (GELU: f;
 *   SwiGLU: gate and up, 2f), the down projection's input f.
 *   Statistics (fp32): LayerNorm mean + rstd, RMSNorm rstd, per normalised row. */
static void check_saved(const dt_model *m) {
    const int64_t h = m->hidden, f = m->ffn, q = m->n_head * m->head_dim, kv = m->n_kv_head * m->head_dim;
    int64_t elems, stats;
    if (m->family == DT_FAMILY_GPT2) {
        elems = (h + h + (q + 2 * kv) + q) + (h + h + f + f);
        stats = 2 + 2;
    } else {
        elems = (h + h + (q + 2 * kv) + q) + (h + h + 2 * f + f);
        stats = 1 + 1;
        if (m->qk_norm) {
            elems += q + kv;
            stats += m->n_head + m->n_kv_head;
        }
    }
    dt_saved s, hs;
    dt_model_block_saved(m, &s);
    dt_model_head_saved(m, &hs);
    CHECK_EQ_I64(s.elems, elems);
    CHECK_EQ_I64(s.stats, stats);
    CHECK_EQ_I64(s.attn_rows, m->n_head);
    CHECK_EQ_I64(hs.elems, 2 * h);   /* the final norm's input and the lm_head's input */
    CHECK_EQ_I64(hs.stats, m->family == DT_FAMILY_GPT2 ? 2 : 1);
    CHECK_EQ_I64(dt_model_block_widest_in(m), (q + 2 * kv) > (m->family == DT_FAMILY_GPT2 ? f : 2 * f)
                                                  ? (q + 2 * kv)
                                                  : (m->family == DT_FAMILY_GPT2 ? f : 2 * f));

    /* the memory model's bytes are exactly the description's elements x bytes */
    static const dt_precision_preset presets[] = {DT_PREC_MIXED_BF16, DT_PREC_FP32};
    for (size_t pi = 0; pi < sizeof presets / sizeof presets[0]; pi++)
        for (int attn = 0; attn < 2; attn++) {
            dt_plan p;
            dt_plan_defaults(&p);
            p.model = *m;
            dt_precision_from_preset(presets[pi], &p.precision);
            p.activations.attention = attn ? DT_ATTN_MATERIALIZED : DT_ATTN_FLASH;
            const int64_t B = 3, T = m->max_pos < 256 ? m->max_pos : 256;
            p.batch.micro_batch = B;
            p.batch.global_batch = B;
            p.batch.seq_len = T;
            const int64_t a = dt_dtype_size(p.precision.activation), fp32 = 4;
            const int64_t attn_state = attn ? a * B * m->n_head * T * T : fp32 * B * m->n_head * T;
            const int64_t block = a * B * T * elems + fp32 * B * T * stats + attn_state;
            CHECK_EQ_I64(dt_memory_activations_per_block(&p, 0), block);
            CHECK_EQ_I64(dt_memory_activations_per_block(&p, 1), a * B * T * h);   /* its input only */
            CHECK_EQ_I64(dt_memory_activations(&p, 0),
                         m->n_layer * block + a * B * T * 2 * h + fp32 * B * T * hs.stats);
        }
}

#define REL 1e-12

/* The time model's FLOPs are the description's: on a profile of 1 GEMM FLOP/s and 2
 * attention FLOP/s, no per-op or element-wise terms, its seconds are FLOPs. */
static void check_flops(const dt_model *m) {
    const int64_t h = m->hidden, f = m->ffn, V = m->vocab, q = m->n_head * m->head_dim;
    tensor_list blk;
    hf_block(m, &blk);
    static const int64_t seqs[] = {1, 7, 128, 4096};
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        const double T = (double)seqs[i];
        dt_block_flops fl;
        dt_model_block_fwd_flops(m, seqs[i], &fl);
        CHECK(fl.matmul == 2.0 * (double)sum(&blk, 1) * T);   /* 2 FLOPs per multiply-add */
        CHECK(fl.attention == 4.0 * T * T * (double)q);        /* QK^T and PV, full square */
        CHECK(fl.mlp_out == 2.0 * (double)(f * h) * T);       /* down_proj / mlp.c_proj */
        CHECK(dt_model_block_fwd_flops_per_seq(m, seqs[i]) == fl.matmul + fl.attention);
        const double lm_head = 2.0 * (double)(V * h) * T;
        CHECK_NEAR(dt_model_train_flops_per_seq(m, seqs[i]),
                   3.0 * ((double)m->n_layer * (fl.matmul + fl.attention) + lm_head), REL);
        if (seqs[i] > m->max_pos) continue;

        dt_plan p;
        dt_error err = {0};
        dt_plan_defaults(&p);
        p.model = *m;
        const int64_t B = 2;
        p.batch.micro_batch = B;
        p.batch.global_batch = B;
        p.batch.seq_len = seqs[i];
        dt_hardware *hw = &p.cluster.hw;
        for (int t = 0; t < 3; t++) hw->achievable_flops[t] = 1.0;
        hw->attention_flops = 2.0;
        hw->op_overhead_s = 0;
        hw->elementwise_bw = 0;
        dt_time_compute c;
        int rc = dt_time_compute_micro(&p, &c, &err);
        if (rc) fprintf(stderr, "%s: %s\n", m->name, err.msg);
        CHECK_EQ_I64(rc, DT_OK);
        const double b = (double)B, L = (double)m->n_layer;
        CHECK_NEAR(c.block_fwd_s, b * fl.matmul + b * fl.attention / 2.0, REL);
        CHECK_NEAR(c.block_recompute_s, b * (fl.matmul - fl.mlp_out) + b * fl.attention / 2.0, REL);
        CHECK_NEAR(c.fwd_s, b * (L * fl.matmul + lm_head) + L * b * fl.attention / 2.0, REL);
        CHECK_NEAR(c.bwd_s, 2.0 * c.fwd_s, REL);
    }
}

static void check_model(const dt_model *m) {
    check_counts(m);
    check_saved(m);
    check_flops(m);
}

int main(void) {
    dt_error err = {0};
    dt_model m;
    int n = dt_model_catalog_count();
    CHECK(n >= 14);
    for (int i = 0; i < n; i++) {
        dt_vlm v;   /* LLaVA entries: their language model */
        CHECK_EQ_I64(dt_model_resolve_vlm(dt_model_catalog_name(i), &m, &v, &err), DT_OK);
        check_model(&m);
    }
    /* derived shapes (--params), and the llama variants on a catalog shape */
    static const int64_t counts[] = {INT64_C(125000000), INT64_C(1300000000), INT64_C(32000000000),
                                     INT64_C(175000000000)};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        CHECK_EQ_I64(dt_model_for_params(counts[i], &m, &err), DT_OK);
        check_model(&m);
    }
    CHECK_EQ_I64(dt_model_resolve("llama-tiny", &m, &err), DT_OK);
    for (int v = 0; v < 8; v++) {   /* qkv bias x qk norm x tied */
        dt_model x = m;
        x.qkv_bias = v & 1;
        x.qk_norm = (v >> 1) & 1;
        x.tied_embeddings = (v >> 2) & 1;
        check_model(&x);
    }

    /* what the description says for two models, spelled out */
    dt_model_desc d;
    CHECK_EQ_I64(dt_model_resolve("qwen3-0.6b", &m, &err), DT_OK);
    dt_model_describe(&m, &d);
    CHECK_EQ_I64(d.block.attn.n_in, 3);
    CHECK_STR(d.block.attn.in[0].name, "self_attn.q_proj");
    CHECK_EQ_I64(d.block.attn.in[0].out, 16 * 128);
    CHECK_EQ_I64(d.block.attn.n_in_norm, 2);
    CHECK_STR(d.block.attn.in_norm[1].name, "self_attn.k_norm");
    CHECK_EQ_I64(d.block.attn.in_norm[1].rows, 8);
    CHECK(d.block.act == DT_MLP_SWIGLU && d.block.mlp.norm.kind == DT_NORM_RMSNORM);
    CHECK(d.lm_head_tied == 1 && d.n_embed == 1);
    CHECK_EQ_I64(dt_model_resolve("gpt2", &m, &err), DT_OK);
    dt_model_describe(&m, &d);
    CHECK_EQ_I64(d.block.attn.n_in, 1);
    CHECK_STR(d.block.attn.in[0].name, "attn.c_attn");
    CHECK(d.block.attn.in[0].out == 3 * 768 && d.block.attn.in[0].bias);
    CHECK(d.block.act == DT_MLP_GELU && d.block.attn.norm.kind == DT_NORM_LAYERNORM);
    CHECK(d.n_embed == 2 && d.embed[1].rows == 1024);
    CHECK_STR(d.final_norm.name, "ln_f");

    TEST_MAIN_END();
}
