/* lm.c — the decoder's driver on a device backend (dt_device.h): creation, the
 * parameter groups and their binding, hooks, the forward / backward passes
 * (embedding, blocks, final norm, classifier, loss), activation checkpointing and
 * 16-bit storage. Everything a family decides — its tensors and their flags, saved
 * activations, block, final norm — comes through its lm_family (lm_gpt2.c,
 * lm_llama.c), chosen once in family_of; the families build on lm_layer.c; the
 * init is lm_init.c (lm_internal.h lists the files). See dt_lm.h for the API and
 * docs/engine.md for the design; docs/activations.md is the list of saved tensors
 * this file allocates (category activations).
 *
 * Dimension letters: B batch, T time, C channels, H heads, hs = C / H, F ffn, V
 * vocab, L layers, N = B * T token rows.
 *
 * Every op, copy and allocation goes through g->dev (dt_device.h), so the same
 * code runs on the CPU (synchronous, host pointers) and on CUDA (device
 * pointers, one compute stream). Host-side work is limited to token checks and
 * the token-position chains of the 16-bit encoder backward (built on the host
 * copy of the inputs, then uploaded). */
#include "dt_lm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_memtrack.h"
#include "lm_internal.h"

/* GPT-2's layer_norm_epsilon when a model description carries none (HF GPT2Config);
 * the llama family's configs always carry rms_norm_eps. */
#define DT_GPT2_LN_EPS 1e-5f

/* The family table: the one place a family is chosen (lm_internal.h lm_family). */
static const lm_family *family_of(dt_family f) {
    switch (f) {
    case DT_FAMILY_GPT2: return &lm_family_gpt2;
    case DT_FAMILY_LLAMA: return &lm_family_llama;
    }
    return NULL;
}

/* ----------------------------------------------------------------------------
 * small helpers */

/* the storage of the tensor at slot s of group grp (its set's dtype, lm_slot_dtype): the
 * bound trained group, or the base set's */
static void *slot_ptr(const dt_lm *g, int grp, lm_slot s) {
    void *base = s.set == DT_LM_SET_BASE ? lm_tensor_ptr(g->base, g->bgroup_off[grp], g->bsz) : g->gparams[grp];
    return lm_tensor_ptr(base, s.off, s.set == DT_LM_SET_BASE ? g->bsz : g->psz);
}

/* the block slots of group grp (NULL outside the blocks) */
static const lm_slot *group_slots(const dt_lm *g, int grp) {
    return grp >= 1 && grp <= g->L ? g->slots + (size_t)(grp - 1) * (size_t)g->family->block_kinds : NULL;
}





static int hook(const dt_lm *g, int (*fn)(void *, int), int group, dt_error *err,
                const char *what) {
    if (!fn) return 0;
    int rc = fn(g->hooks.ctx, group);
    if (rc && err && err->code == DT_OK)
        dt_errorf(err, rc, "model: %s hook failed for group %d", what, group);
    return rc;
}

/* A group's parameters for the blocks (lm_params): the bound fp32 storage; with
 * 16-bit params the group converted into pw, or with gemm16 only its vectors
 * (each at its own offset in pw; the matrices are read from storage). */
/* One set's part of a group as fp32 (16-bit params): the whole of src (numel elements)
 * into view, or with gemm16 only its vectors (tensors t[0 .. n) of the set, group_off their
 * group's start in the set). */
static void set_params_f32(dt_lm *g, int group, float *view, const void *src, dt_dtype dt, size_t numel,
                           const dt_tensor_info *t, int n, size_t group_off) {
    if (!g->gemm16) {
        g->dev->convert(view, DT_DTYPE_FP32, src, dt, numel);
        return;
    }
    for (int i = 0; i < n; i++) {
        if (t[i].group != group || t[i].ndim != 1) continue;
        size_t off = t[i].offset - group_off;
        g->dev->convert(view + off, DT_DTYPE_FP32, lm_tensor_ptr((void *)src, off, dt_dtype_size(dt)), dt,
                        t[i].numel);
    }
}

static lm_params group_params(dt_lm *g, int group) {
    void *base = g->bgroup_numel[group] ? lm_tensor_ptr(g->base, g->bgroup_off[group], g->bsz) : NULL;
    lm_params p = {g->gparams[group], NULL, base, NULL, group_slots(g, group), group >= 1 && group <= g->L ? group - 1 : -1};
    if (g->pt == DT_DTYPE_FP32 && (!base || g->bt == DT_DTYPE_FP32)) return p;
    lm_prof_mark m = lm_prof_begin(g);
    if (g->pt != DT_DTYPE_FP32) {   /* else the trained set is read where it is bound */
        p.f32 = g->pw;
        set_params_f32(g, group, g->pw, g->gparams[group], g->pt, g->group_numel[group], g->tensors,
                       g->ntensors, g->group_off[group]);
    }
    if (base && g->bt != DT_DTYPE_FP32) {
        p.base32 = g->pwb;
        set_params_f32(g, group, g->pwb, base, g->bt, g->bgroup_numel[group], g->btensors, g->nbase,
                       g->bgroup_off[group]);
    }
    if (g->gemm16) {
        p.w16 = g->gparams[group];
        p.base16 = base;
    }
    lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
    return p;
}

/* Elements of the final norm at the start of group L+1 (gpt2: weight and bias). */
static size_t norm_numel(const dt_lm *g) { return g->norm_numel; }

/* fp32 parameters of the final norm (the start of group L+1; an untied lm_head
 * after it is converted in row chunks by the classifier) */
static float *norm_params_f32(dt_lm *g) {
    void *w = slot_ptr(g, (int)g->L + 1, g->norm_w);
    const dt_dtype dt = lm_slot_dtype(g, g->norm_w);
    if (dt == DT_DTYPE_FP32) return w;
    g->dev->convert(g->pw, DT_DTYPE_FP32, w, dt, norm_numel(g));
    return g->pw;
}

/* fp32 gradient accumulator of a group: the bound grads, or gw zeroed */
static float *group_grads_f32(dt_lm *g, int group) {
    if (g->gt == DT_DTYPE_FP32) return g->ggrads[group];
    g->dev->memset0(g->gw, g->group_numel[group] * sizeof(float));
    return g->gw;
}

/* 16-bit grads: grads[off .. off+n) += acc (rounded once per element) */
static void grads_add_16(dt_lm *g, int group, size_t off, const float *acc, size_t n) {
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->accumulate_16((uint16_t *)g->ggrads[group] + off, g->gt, acc, n);
    lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
}

static void group_grads_commit(dt_lm *g, int group) {
    if (g->gt != DT_DTYPE_FP32) grads_add_16(g, group, 0, g->gw, g->group_numel[group]);
}

/* ----------------------------------------------------------------------------
 * per-op profile (the clock: lm_layer.c) */

void dt_lm_set_profile(dt_lm *g, dt_lm_profile *p) { g->prof = p; }

const char *dt_lm_op_name(const dt_lm *g, dt_lm_op op) {
    if ((int)op < 0 || op >= DT_LM_OP_COUNT) return "?";
    return g->family->op_names[op];
}

/* ----------------------------------------------------------------------------
 * create / free */

/* The tensor table, group by group, from models/' description d of the family
 * (lm_layer.c), and the offsets of the block's tensor kinds. */
static void group_begin(dt_lm *g, int grp, const lm_layout *lo) {
    g->group_off[grp] = lo->off;
    g->bgroup_off[grp] = lo->boff;
}

static void group_end(dt_lm *g, int grp, const lm_layout *lo) {
    g->group_numel[grp] = lo->off - g->group_off[grp];
    g->bgroup_numel[grp] = lo->boff - g->bgroup_off[grp];
}

static int build_layout(dt_lm *g, const dt_model_desc *d, dt_error *err) {
    lm_layout lo = {0};
    group_begin(g, 0, &lo);
    lm_layout_embed(g, d, &lo);
    lm_layout_extra(g, &lo);
    group_end(g, 0, &lo);
    for (int l = 0; l < g->L; l++) {
        group_begin(g, 1 + l, &lo);
        lm_layout_block(g, d, l, &lo);
        group_end(g, 1 + l, &lo);
    }
    int last = (int)g->L + 1;
    group_begin(g, last, &lo);
    g->full_head_off = lo.foff;
    lm_layout_head(g, d, &lo);
    group_end(g, last, &lo);
    g->nparams = lo.off;
    g->ntensors = lo.i;
    g->nbase_params = lo.boff;
    g->nbase = lo.bi;
    return lm_layout_kinds(g, err);
}

/* Lays out (or, with base == NULL, just measures) the saved activations. */
/* Blocks below it write their activations into the shared area: checkpointed blocks
 * (recomputed there in backward) and the blocks below the first trained one (no backward
 * reads them: nothing is kept for them, as autograd keeps nothing where no tensor requires
 * a gradient). */
static int64_t shared_blocks(const dt_lm *g) { return g->K > g->first_trained ? g->K : g->first_trained; }

/* 1 when block l's input x[l] is read after its forward: by its backward (the first norm's
 * input gradient or weight gradient: lm_block_input_grad) or by its recompute (l < K). */
static int block_reads_input(const dt_lm *g, int64_t l) {
    const lm_slot norm = g->slots[l * g->family->block_kinds + g->family->first_norm_kind];
    return l < g->K || l != g->first_trained || g->embed_trained || g->input_grad || lm_slot_trained(norm);
}

/* The residual stream's first x[l] that backward reads (x[0 .. u) serve only the forward). */
static int64_t first_read_input(const dt_lm *g) {
    const int64_t F = g->first_trained;
    if (F >= g->L) return g->L;
    return block_reads_input(g, F) ? F : F + 1;
}

/* Adapter `mod` of block l exists (the family's LoRA kinds are its last 2 x lora_mods, A then
 * B per module in module order: lm_gpt2.c, lm_llama.c) */
static int block_adapted(const dt_lm *g, int64_t l, int mod) {
    const int k = g->family->block_kinds - 2 * g->lora_mods + 2 * mod;
    return g->slots[l * g->family->block_kinds + k].off != SIZE_MAX;
}

/* 1 when a saved block (S .. L-1) leaves a tensor of its record to the shared one: its
 * record measured with and without sharing (base NULL: nothing is written but pointers of
 * the shared record, laid out afterwards) */
static int any_block_shares(dt_lm *g, int64_t S) {
    for (int64_t l = S; l < g->L; l++) {
        size_t own = 0, kept = 0;
        g->family->layout_block_acts(g, l, g->recompute, NULL, &own, NULL);
        g->family->layout_block_acts(g, l, g->recompute, NULL, &kept, g->recompute);
        if (kept < own) return 1;
    }
    return 0;
}

static size_t layout_acts(dt_lm *g, char *base) {
    int64_t N = g->B * g->T, C = g->C;
    size_t a = (size_t)g->asz, off = 0;
    /* the residual stream: the inputs no backward reads (those of the blocks below the first
     * trained one, and that block's own when its backward does not read it) only pass from
     * one block's forward to the next, so they alternate between two buffers (x[0], x[1]) */
    const int64_t u = first_read_input(g);
    for (int64_t l = 0; l <= g->L; l++)
        g->x[l] = l < u && l >= 2 ? g->x[l % 2] : lm_take(base, &off, a * N * C);
    const int64_t S = shared_blocks(g);
    /* the shared record, first: the blocks below S run their forward there (a checkpointed
     * block's recompute too), and the saved blocks S..L-1 put there what their backward does
     * not read */
    const int shared = S > 0 || any_block_shares(g, S);
    char *shared_at = shared && base ? base + off : NULL;   /* its first byte */
    if (shared) g->family->layout_block_acts(g, -1, g->recompute, base, &off, NULL);
    for (int64_t l = S; l < g->L; l++)
        g->family->layout_block_acts(g, l, g->blocks + (size_t)l * g->family->acts_size, base, &off,
                                     shared ? g->recompute : NULL);
    /* the final norm's output is kept only for a trained classifier's weight gradient; else
     * it passes to the classifier's forward through the shared area (free by then: a
     * recompute fills it only after the classifier's backward) */
    g->lnf = shared && !lm_slot_trained(g->cls) ? shared_at : lm_take(base, &off, a * N * C);
    g->family->layout_norm_stats(g, base, &off);
    /* LoRA: each adapter's x·Aᵀ [N, r] fp32 (PEFT keeps the adapters fp32), adapted modules only */
    for (int64_t l = 0; l < g->L; l++)
        for (int mod = 0; mod < g->lora_mods; mod++)
            g->lora_xa_at[l * g->lora_mods + mod] =
                block_adapted(g, l, mod) ? lm_take(base, &off, sizeof(float) * (size_t)(N * g->lora_r)) : NULL;
    return off;
}

static void *buf(const dt_lm *g, size_t bytes) {
    return g->dev->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, bytes);
}


/* fp32 working copies of one block's activations (16-bit activation dtypes): the
 * ones every block has, the family's own, the materialized probabilities. */
static int alloc_f32_views(dt_lm *g) {
    int64_t N = g->B * g->T, C = g->C;
    size_t f = sizeof(float);
    block_f32 *w = &g->w32;
    int ok = (w->x = buf(g, f * N * C)) && (w->ln1 = buf(g, f * N * C)) &&
             (w->att = buf(g, f * N * g->QD)) && (w->res1 = buf(g, f * N * C)) &&
             (w->ln2 = buf(g, f * N * C)) && (w->xout = buf(g, f * N * C));
    ok = ok && g->family->alloc_views(g);
    if (g->attn == DT_ATTN_MATERIALIZED) ok = ok && (w->probs = buf(g, f * g->B * g->H * g->T * g->T));
    return ok;
}

/* gemm16 (lm_internal.h) with bf16 params and activations: the linears' 16-bit
 * GEMMs read the stored tensors. Its activation-gradient scratch d16 is the fp32
 * view of the MLP's GEMM-only activation (GPT-2 gelu, llama act: [N, F] fp32,
 * 2 N F bf16 elements), which nothing reads in backward once the linears read
 * storage; nothing is allocated for it. fp16 keeps the widened fp32 path: the CPU
 * has no fp16 GEMM kernel (dt_gemm_cpu.h). */
static void set_gemm16(dt_lm *g) {
    g->gemm16 = 0;
    /* every linear's weight bf16: all of them when the trained set is, else (fp32 adapters,
     * dt_lm_trained_precision) the base holds them all */
    if (g->bt != DT_DTYPE_BF16 || g->at != DT_DTYPE_BF16) return;
    if (g->pt != DT_DTYPE_BF16 && !g->lora_r) return;
    float *view = g->family->gemm16_view(g);
    /* bf16 elements in the [N, F] fp32 view */
    size_t cap = (size_t)(g->B * g->T * g->F) * (sizeof(float) / sizeof(uint16_t));
    if ((size_t)g->family->widest_linear(g) > cap) return;      /* not even one row: keep the fp32 path */
    g->d16 = (uint16_t *)view;
    g->d16_cap = cap;
    g->gemm16 = 1;
}

/* What this engine runs of a model description: one line naming what it cannot. */
static int check_model(const dt_model *m, dt_error *err) {
    int rc = dt_model_validate(m, err);
    if (rc) return rc;
    const lm_family *f = family_of(m->family);
    if (!f) return dt_errorf(err, DT_EINVAL, "model: model '%s' has a family this engine does not run", m->name);
    return f->check(m, err);
}

int dt_lm_create(const dt_model *m, const dt_precision *prec, int64_t B, int64_t T,
                   int64_t ckpt_layers, dt_attention attn, dt_lm **out, dt_error *err) {
    return dt_lm_create_on(m, prec, B, T, ckpt_layers, attn, DT_DEVICE_CPU, 0, out, err);
}

int dt_lm_create_on(const dt_model *m, const dt_precision *prec, int64_t B, int64_t T,
                      int64_t ckpt_layers, dt_attention attn, dt_device device, int ordinal,
                      dt_lm **out, dt_error *err) {
    const dt_lm_options o = {.B = B, .T = T, .ckpt_layers = ckpt_layers, .attn = attn, .device = device,
                             .ordinal = ordinal, .flags = 0};
    return dt_lm_create_opts(m, prec, &o, out, err);
}

/* The options against the model: one line naming what is out of range. */
static int check_options(const dt_model *m, const dt_lm_options *o, dt_error *err) {
    if (o->B < 1 || o->T < 1 || o->T > m->max_pos)
        return dt_errorf(err, DT_EINVAL,
                         "model: batch %lld x sequence %lld invalid: need B >= 1 and 1 <= T <= %lld "
                         "(the model's positions)",
                         (long long)o->B, (long long)o->T, (long long)m->max_pos);
    if (o->ckpt_layers < 0 || o->ckpt_layers > m->n_layer)
        return dt_errorf(err, DT_EINVAL, "model: checkpointed layers %lld outside 0..%lld",
                         (long long)o->ckpt_layers, (long long)m->n_layer);
    if (m->num_labels > 0 && m->family != DT_FAMILY_LLAMA)
        return dt_errorf(err, DT_EINVAL, "model: a sequence classifier (num_labels %lld, a reward model) is built for "
                         "the llama family (Llama, Qwen2, Qwen3) only, not %s", (long long)m->num_labels,
                         dt_family_name(m->family));
    if (o->attn != DT_ATTN_FLASH && o->attn != DT_ATTN_MATERIALIZED)
        return dt_errorf(err, DT_EINVAL, "model: unknown attention kind %d", (int)o->attn);
    return DT_OK;
}

/* The dimensions, options and dtypes of g from the description (the family's
 * own through its configure). */
static void configure(dt_lm *g, const dt_model *m, const dt_precision *prec, const dt_lm_options *o) {
    g->B = o->B;
    g->T = o->T;
    g->fam = m->family;
    g->family = family_of(m->family);
    g->C = m->hidden;
    g->H = m->n_head;
    g->Hkv = m->n_kv_head;
    g->family->configure(g, m);
    g->seq_cls = m->num_labels > 0;
    if (g->seq_cls) g->tied = 0;   /* a sequence classifier's score is its own matrix */
    g->QD = g->H * g->D;
    g->KVD = g->Hkv * g->D;
    g->F = m->ffn;
    g->V = m->vocab;
    g->tp = o->tp;
    lm_tp_configure(g);
    g->Vout = m->num_labels > 0 ? m->num_labels : g->V;   /* after the TP split: this rank's rows */
    g->L = m->n_layer;
    g->maxT = m->max_pos;
    g->K = o->ckpt_layers;
    g->eps = m->norm_eps > 0 ? (float)m->norm_eps : DT_GPT2_LN_EPS;
    g->attn = o->attn;
    dt_precision trained;
    dt_lm_trained_precision(prec, o->finetune, &trained);
    g->pt = trained.param;
    g->gt = trained.grad;
    g->bt = prec->param;
    g->at = prec->activation;
    g->psz = dt_dtype_size(g->pt);
    g->bsz = dt_dtype_size(g->bt);
    g->gsz = dt_dtype_size(g->gt);
    g->asz = dt_dtype_size(g->at);
}

int dt_lm_check_method(const dt_precision *prec, dt_device device, const dt_finetune *ft, dt_error *err) {
    const char *no = NULL;
    if (!ft || ft->method == DT_FT_FULL || ft->method == DT_FT_FREEZE) return DT_OK;
    /* LoRA runs on every device (its ops are the device's, dt_device_ops); QLoRA's base by
     * lm_qbase_check's rules (NF4 / FP4 on the CPU; fp32 compute on fp32, bf16 on mixed-bf16) */
    if (ft->method == DT_FT_QLORA && lm_qbase_check(prec, ft, device, err)) return err->code;
    if (ft->adapter_dtype != DT_DTYPE_FP32) no = "LoRA with 16-bit adapters (--adapter-dtype)";
    else if (prec->param != DT_DTYPE_FP32 && ft->modules_to_save.n > 0)
        no = "LoRA with --modules-to-save under a 16-bit precision";
    if (!no) return DT_OK;
    return dt_errorf(err, DT_EINVAL,
                     "model: %s is not built in this engine yet; it trains full, freeze, LoRA with fp32 "
                     "adapters and QLoRA with fp32 or bf16 compute (run the plan with PEFT and DeepSpeed: dtplan export)", no);
}

void dt_lm_trained_precision(const dt_precision *prec, const dt_finetune *ft, dt_precision *out) {
    *out = *prec;
    if (!ft || !dt_ft_is_lora(ft) || ft->adapter_dtype != DT_DTYPE_FP32 || prec->param == DT_DTYPE_FP32) return;
    /* PEFT's autocast_adapter_dtype: fp32 weights, fp32 gradients, no master copy */
    out->param = DT_DTYPE_FP32;
    out->grad = DT_DTYPE_FP32;
    out->has_master = 0;
}

/* The fine-tuning method's parameter groups (models/dt_pgroup.h), which decide every
 * tensor's set: none for full fine-tuning. */
static int setup_method(dt_lm *g, const dt_model *m, const dt_precision *prec, const dt_finetune *ft,
                        dt_error *err) {
    g->first_trained = 0;
    g->embed_trained = 1;
    if (!ft || ft->method == DT_FT_FULL) return DT_OK;
    int rc = dt_lm_check_method(prec, g->dev->kind, ft, err);
    if (rc) return rc;
    if (dt_ft_is_lora(ft)) {
        g->lora_r = ft->lora_rank;
        g->lora_s = (float)dt_ft_lora_scale(ft);
        g->lora_mods = g->family->lora_mods;
        g->lora_p = (float)ft->lora_dropout;
    }
    if ((rc = lm_qbase_setup(g, m, ft, err))) return rc;   /* QLoRA's quantised base */
    if (!(g->pg = malloc(sizeof *g->pg))) return dt_errorf(err, DT_ENOMEM, "model: out of memory");
    rc = dt_model_pgroups(m, ft, prec->param, DT_ROLE_POLICY, g->pg, err);
    if (rc) return rc;
    g->first_trained = dt_pgroups_first_trained_layer(g->pg);
    g->embed_trained = dt_pgroups_embedding_trained(g->pg);
    return DT_OK;
}

/* A vision-language model's language model (dt_lm_options.embeds, DT_LM_FROZEN): every tensor
 * frozen when asked (LLaVA's pretrain); the input embeddings' gradient makes backward reach
 * block 0 (every block's backward runs, frozen weights getting no gradient). */
static int setup_embeds(dt_lm *g, const dt_model *m, const dt_precision *prec, const dt_lm_options *o,
                        dt_error *err) {
    if (o->embeds) g->embeds = *o->embeds;
    if (o->nextra < 0 || (o->nextra && !o->extra)) return dt_errorf(err, DT_EINVAL, "model: bad extra tensors");
    if (o->nextra && !(g->extra_off = calloc((size_t)o->nextra, sizeof *g->extra_off)))
        return dt_errorf(err, DT_ENOMEM, "model: out of memory");
    g->extra = o->extra, g->nextra = o->nextra;
    g->input_grad = o->embeds && o->embeds->backward;
    if (o->embeds && (o->device != DT_DEVICE_CPU || prec->activation != DT_DTYPE_FP32 || o->tp))
        return dt_errorf(err, DT_EINVAL, "model: input embeddings (a vision-language model) are built for the CPU "
                         "with fp32 activations and no tensor parallelism (use --device cpu --precision fp32)");
    if (o->flags & DT_LM_FROZEN) {
        if (g->pg) return dt_errorf(err, DT_EINVAL, "model: a frozen language model takes no fine-tuning method");
        if (!(g->pg = malloc(sizeof *g->pg))) return dt_errorf(err, DT_ENOMEM, "model: out of memory");
        const dt_finetune full = {0};
        int rc = dt_model_pgroups(m, &full, prec->param, DT_ROLE_POLICY, g->pg, err);
        if (rc) return rc;
        for (int i = 0; i < g->pg->n; i++) g->pg->g[i].train = DT_TRAIN_FROZEN;
        g->first_trained = dt_pgroups_first_trained_layer(g->pg);
        g->embed_trained = 0;
    }
    if (g->input_grad) g->first_trained = 0;
    return DT_OK;
}

int dt_lm_create_opts(const dt_model *m, const dt_precision *prec, const dt_lm_options *o, dt_lm **out,
                      dt_error *err) {
    *out = NULL;
    if (!o) return dt_errorf(err, DT_EINVAL, "model: creation options are required");
    const dt_device_ops *dev = NULL;
    int drc = dt_device_get(o->device, o->ordinal, &dev, err);
    if (drc) return drc;
    if (!m || !prec) return dt_errorf(err, DT_EINVAL, "model: model and precision are required");
    int rc = check_model(m, err);
    if (rc) return rc;
    if ((rc = check_options(m, o, err))) return rc;
    if (o->tp && (rc = dt_lm_check_tp(m, o->tp->size, o->device, o->finetune, err))) return rc;
    const int64_t B = o->B, T = o->T;

    dt_lm *g = calloc(1, sizeof *g);
    if (!g) return dt_errorf(err, DT_ENOMEM, "model: out of memory");
    g->dev = dev;
    configure(g, m, prec, o);

    g->ngroups = (int)g->L + 2;
    if ((rc = setup_method(g, m, prec, o->finetune, err)) || (rc = setup_embeds(g, m, prec, o, err))) {
        dt_lm_free(g);
        return rc;
    }
    dt_model_desc desc;   /* the family's modules, as models/ counts them */
    dt_model_describe(m, &desc);
    lm_tp_shard_desc(g, &desc);   /* tensor parallelism: this rank's shard */
    /* either set may hold them all; LoRA adds an A and a B to each linear of the blocks */
    const int linears = desc.block.attn.n_in + 1 + desc.block.mlp.n_in + 1;
    const int all = lm_layout_count(&desc, g->L, g->tied) + (g->lora_r ? 2 * linears * (int)g->L : 0) + g->nextra;
    g->tensors = calloc((size_t)all, sizeof *g->tensors);
    g->names = calloc((size_t)all, sizeof *g->names);
    g->btensors = calloc((size_t)all, sizeof *g->btensors);
    g->bnames = calloc((size_t)all, sizeof *g->bnames);
    g->slots = calloc((size_t)g->L * (size_t)g->family->block_kinds + 1, sizeof *g->slots);
    g->group_off = calloc((size_t)g->ngroups, sizeof(size_t));
    g->group_numel = calloc((size_t)g->ngroups, sizeof(size_t));
    g->bgroup_off = calloc((size_t)g->ngroups, sizeof(size_t));
    g->bgroup_numel = calloc((size_t)g->ngroups, sizeof(size_t));
    g->gparams = calloc((size_t)g->ngroups, sizeof(void *));
    g->ggrads = calloc((size_t)g->ngroups, sizeof(void *));
    g->x = calloc((size_t)g->L + 1, sizeof(void *));
    g->blocks = calloc((size_t)g->L, g->family->acts_size);
    g->lora_xa_at = calloc((size_t)g->L * (size_t)g->lora_mods + 1, sizeof *g->lora_xa_at);
    g->recompute = calloc(1, g->family->acts_size);
    g->fviews = calloc(1, g->family->views_size);
    if (!g->tensors || !g->names || !g->btensors || !g->bnames || !g->slots || !g->group_off ||
        !g->group_numel || !g->bgroup_off || !g->bgroup_numel || !g->gparams || !g->ggrads || !g->x ||
        (g->L && !g->blocks) || !g->recompute || !g->fviews || !g->lora_xa_at) {
        dt_lm_free(g);
        return dt_errorf(err, DT_ENOMEM, "model: out of memory for the layout tables");
    }
    if (!(rc = build_layout(g, &desc, err)) && g->wpe.off != SIZE_MAX && g->wpe.set != g->wte.set)
        rc = dt_errorf(err, DT_EINVAL,
                       "model: %s trains one of wte and wpe; the engine's encoder trains both or neither "
                       "(--trainable-modules wte,wpe)", m->name);
    if (rc) {
        dt_lm_free(g);
        return rc;
    }

    int64_t N = B * T, C = g->C, V = g->V, Vout = g->Vout;
    const int flat = !(o->flags & DT_LM_NO_FLAT);
    g->forward_only = (o->flags & DT_LM_FORWARD_ONLY) != 0;
    if (flat && g->nparams) {   /* none: every tensor frozen (DT_LM_FROZEN) */
        g->params = dev->alloc(DT_POOL_DEVICE, DT_MEM_PARAMS, g->nparams * (size_t)g->psz);
        if (!g->forward_only) g->grads = dev->alloc(DT_POOL_DEVICE, DT_MEM_GRADS, g->nparams * (size_t)g->gsz);
    }
    /* the base set: replicated, never rebound (DT_MEM_PARAMS) */
    if (g->nbase_params) g->base = dev->alloc(DT_POOL_DEVICE, DT_MEM_PARAMS, g->nbase_params * (size_t)g->bsz);
    g->act_bytes = layout_acts(g, NULL);
    g->act_mem = dev->alloc(DT_POOL_DEVICE, DT_MEM_ACTIVATIONS, g->act_bytes);
    int ok = (!flat || !g->nparams || (g->params && (g->grads || g->forward_only))) && g->act_mem && (!g->nbase_params || g->base) &&
             lm_qbase_alloc(g);
    if (ok) layout_acts(g, g->act_mem);
    for (int grp = 0; grp < g->ngroups && flat; grp++) {   /* else unbound until dt_lm_bind_group */
        g->gparams[grp] = lm_tensor_ptr(g->params, g->group_off[grp], g->psz);
        g->ggrads[grp] = g->grads ? lm_tensor_ptr(g->grads, g->group_off[grp], g->gsz) : NULL;
    }

    g->logits = buf(g, sizeof(float) * N * Vout);   /* [N, Vout] */
    g->ce_lse = buf(g, sizeof(float) * N);
    g->ce_losses = buf(g, sizeof(float) * N);
    g->inputs = buf(g, sizeof(int32_t) * N);
    g->targets = buf(g, sizeof(int32_t) * N);
    g->dres = buf(g, sizeof(float) * N * C);
    g->dC = buf(g, sizeof(float) * N * C);
    ok = ok && g->logits && g->ce_lse && g->ce_losses && g->inputs && g->targets && g->dres && g->dC &&
         g->family->alloc_scratch(g, m);
    if (g->lora_r) ok = ok && (g->lora_t = buf(g, sizeof(float) * (size_t)(N * g->lora_r)));   /* [N, r] */
    /* dropout(x) of the widest adapted input (llama: QD or F; gpt2: F) */
    const int64_t widest_in = g->F > g->QD ? (g->F > C ? g->F : C) : (g->QD > C ? g->QD : C);
    if (g->lora_p > 0.0f) ok = ok && (g->lora_xd = buf(g, sizeof(float) * (size_t)(N * widest_in)));
    /* bf16 linears (gemm16) keep no fp32 input: the adapters read it widened here */
    if (g->lora_r && g->at == DT_DTYPE_BF16 && g->bt == DT_DTYPE_BF16)
        ok = ok && (g->lora_x32 = buf(g, sizeof(float) * (size_t)(N * widest_in)));

    /* groups converted whole: blocks, the final norm, wpe; the embedding and
     * lm_head matrices are converted in row chunks */
    /* a whole block, both sets (the same for every block): no block's trained part exceeds it */
    g->max_group_numel = g->group_numel[1] + g->bgroup_numel[1];
    if (g->family->has_wpe && (size_t)(g->maxT * C) > g->max_group_numel)
        g->max_group_numel = (size_t)(g->maxT * C);
    if (norm_numel(g) > g->max_group_numel) g->max_group_numel = norm_numel(g);
    g->vchunk = (int64_t)(g->max_group_numel / (size_t)C);
    if (g->vchunk > Vout) g->vchunk = Vout;
    for (int grp = 0; grp < g->ngroups; grp++)   /* the base part of each group converted whole */
        if (g->bgroup_numel[grp] > g->max_bgroup_numel) g->max_bgroup_numel = g->bgroup_numel[grp];
    if (g->pt != DT_DTYPE_FP32 || (g->nbase_params && g->bt != DT_DTYPE_FP32))
        ok = ok && (g->pw = buf(g, sizeof(float) * g->max_group_numel));
    if (g->bt != DT_DTYPE_FP32 && g->max_bgroup_numel)
        ok = ok && (g->pwb = buf(g, sizeof(float) * g->max_bgroup_numel));
    if (g->gt != DT_DTYPE_FP32) {
        ok = ok && (g->gw = buf(g, sizeof(float) * g->max_group_numel)) &&
             (g->tok_head = buf(g, sizeof(int32_t) * V)) && (g->tok_next = buf(g, sizeof(int32_t) * N));
    }
    /* host copies of what the host reads or builds (token checks, chains) */
    g->h_inputs = g->inputs;
    g->h_tok_head = g->tok_head;
    g->h_tok_next = g->tok_next;
    if (!dev->host_addressable && ok) {
        g->h_inputs = dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, sizeof(int32_t) * N);
        ok = g->h_inputs != NULL;
        if (g->gt != DT_DTYPE_FP32)
            ok = ok && (g->h_tok_head = dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, sizeof(int32_t) * V)) &&
                 (g->h_tok_next = dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, sizeof(int32_t) * N));
    }
    ok = ok && lm_tp_alloc(g);
    if (ok && g->h_tok_head)
        for (int64_t v = 0; v < V; v++) g->h_tok_head[v] = -1;
    if (g->at != DT_DTYPE_FP32) ok = ok && alloc_f32_views(g);
    if (ok) set_gemm16(g);
    if (ok && (rc = lm_qbase_ready(g, err))) {   /* QLoRA's bf16 compute needs gemm16 */
        dt_lm_free(g);
        return rc;
    }
    if (!ok) {
        dt_lm_free(g);
        return dt_errorf(err, DT_ENOMEM,
                         "model: out of memory allocating %s (B=%lld, T=%lld); a smaller micro-batch "
                         "or more checkpointed layers would need less",
                         m->name, (long long)B, (long long)T);
    }
    *out = g;
    return DT_OK;
}

void dt_lm_free(dt_lm *g) {
    if (!g) return;
    const dt_device_ops *dev = g->dev;
    lm_tp_free(g);
    if (!dev->host_addressable) {
        dev->free(g->h_inputs);
        dev->free(g->h_tok_head);
        dev->free(g->h_tok_next);
    }
    dev->free(g->params);
    dev->free(g->grads);
    dev->free(g->base);
    dev->free(g->act_mem);
    void *bufs[] = {g->logits,   g->ce_lse,   g->ce_losses, g->inputs,    g->targets,  g->dres,
                    g->dC,       g->dQKV,     g->dF,        g->pw,        g->gw,       g->w32.x,
                    g->w32.ln1,  g->w32.probs, g->w32.att,  g->w32.res1,  g->w32.ln2,  g->w32.xout,
                    g->tok_head, g->tok_next, g->dA,        g->rope_cos,  g->rope_sin,
                    g->pwb,      g->lora_t,   g->lora_xd,   g->lora_x32};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev->free(bufs[i]);
    /* the family's views: a struct of float pointers (lm_family.views_size) */
    float **fv = g->fviews;
    for (size_t i = 0; fv && i < g->family->views_size / sizeof(float *); i++) dev->free(fv[i]);
    free(g->fviews);
    lm_qbase_free(g);
    free(g->recompute);
    free(g->tensors);
    free(g->names);
    free(g->btensors);
    free(g->bnames);
    free(g->slots);
    free(g->pg);
    free(g->extra_off);
    free(g->group_off);
    free(g->group_numel);
    free(g->bgroup_off);
    free(g->bgroup_numel);
    free(g->gparams);
    free(g->ggrads);
    free(g->x);
    free(g->blocks);
    free(g->lora_xa_at);
    free(g);
}

/* ----------------------------------------------------------------------------
 * layout queries */

int dt_lm_num_tensors(const dt_lm *g) { return g->ntensors; }
const dt_tensor_info *dt_lm_tensor(const dt_lm *g, int i) {
    return i >= 0 && i < g->ntensors ? &g->tensors[i] : NULL;
}
int dt_lm_num_groups(const dt_lm *g) { return g->ngroups; }
int dt_lm_tied(const dt_lm *g) { return g->tied; }
const char *dt_lm_hf_prefix(const dt_lm *g) { return g->family->hf_prefix; }
dt_family dt_lm_family(const dt_lm *g) { return g->fam; }
size_t dt_lm_group_offset(const dt_lm *g, int group) {
    return group >= 0 && group < g->ngroups ? g->group_off[group] : 0;
}
size_t dt_lm_group_numel(const dt_lm *g, int group) {
    return group >= 0 && group < g->ngroups ? g->group_numel[group] : 0;
}
size_t dt_lm_num_params(const dt_lm *g) { return g->nparams; }
int dt_lm_num_base_tensors(const dt_lm *g) { return g->nbase; }
const dt_tensor_info *dt_lm_base_tensor(const dt_lm *g, int i) {
    return i >= 0 && i < g->nbase ? &g->btensors[i] : NULL;
}
size_t dt_lm_num_base_params(const dt_lm *g) { return g->nbase_params; }
void *dt_lm_base_params(dt_lm *g) { return g->base; }
dt_dtype dt_lm_base_dtype(const dt_lm *g) { return g->bt; }
int64_t dt_lm_first_trained_layer(const dt_lm *g) { return g->first_trained; }
float *dt_lm_extra_params(dt_lm *g, int i) { return (float *)g->gparams[0] + g->extra_off[i]; }
float *dt_lm_extra_grads(dt_lm *g, int i) { return g->ggrads[0] ? (float *)g->ggrads[0] + g->extra_off[i] : NULL; }
void dt_lm_set_dropout(dt_lm *g, int on, uint64_t key) {
    g->drop_on = on;
    g->drop_key = key;
}
uint64_t dt_lm_dropout_key(uint64_t seed, int64_t step, int64_t micro) {
    return lm_splitmix64_at(lm_splitmix64_at(seed, (uint64_t)step + 1), (uint64_t)micro + 1);
}
void *dt_lm_params(dt_lm *g) { return g->params; }
void *dt_lm_grads(dt_lm *g) { return g->grads; }
const float *dt_lm_logits(const dt_lm *g) { return g->logits; }
size_t dt_lm_activation_bytes(const dt_lm *g) { return g->act_bytes; }
dt_device dt_lm_device(const dt_lm *g) { return g->dev->kind; }
const dt_device_ops *dt_lm_device_ops(const dt_lm *g) { return g->dev; }

void dt_lm_set_hooks(dt_lm *g, const dt_lm_hooks *hooks) {
    if (hooks) g->hooks = *hooks;
    else memset(&g->hooks, 0, sizeof g->hooks);
}

int dt_lm_bind_group(dt_lm *g, int group, void *params, void *grads) {
    if (group < 0 || group >= g->ngroups) return DT_EINVAL;
    if ((!params && !g->params) || (!grads && !g->grads)) return DT_EINVAL; /* released flat buffer */
    g->gparams[group] = params ? params : lm_tensor_ptr(g->params, g->group_off[group], g->psz);
    g->ggrads[group] = grads ? grads : lm_tensor_ptr(g->grads, g->group_off[group], g->gsz);
    return DT_OK;
}

/* does any group still point into [base, base + bytes)? */
static int flat_in_use(void *const *ptrs, int n, const void *base, size_t bytes) {
    const char *lo = base, *hi = lo + bytes;
    for (int i = 0; i < n; i++)
        if ((const char *)ptrs[i] >= lo && (const char *)ptrs[i] < hi) return 1;
    return 0;
}

int dt_lm_release_flat(dt_lm *g, int params, int grads, dt_error *err) {
    if (params && g->params && flat_in_use(g->gparams, g->ngroups, g->params, g->nparams * (size_t)g->psz))
        return dt_errorf(err, DT_EINVAL, "model: cannot release the flat parameters while a group uses them");
    if (grads && g->grads && flat_in_use(g->ggrads, g->ngroups, g->grads, g->nparams * (size_t)g->gsz))
        return dt_errorf(err, DT_EINVAL, "model: cannot release the flat gradients while a group uses them");
    if (params) {
        g->dev->free(g->params);
        g->params = NULL;
    }
    if (grads) {
        g->dev->free(g->grads);
        g->grads = NULL;
    }
    return DT_OK;
}

int dt_lm_restore_flat(dt_lm *g, int params, int grads, dt_mem_category cat, dt_error *err) {
    if (params && !g->params && !(g->params = g->dev->alloc(DT_POOL_DEVICE, cat, g->nparams * (size_t)g->psz)))
        return dt_errorf(err, DT_ENOMEM, "model: out of memory restoring the flat parameters (%zu elements)",
                         g->nparams);
    if (grads && !g->grads && !(g->grads = g->dev->alloc(DT_POOL_DEVICE, cat, g->nparams * (size_t)g->gsz)))
        return dt_errorf(err, DT_ENOMEM, "model: out of memory restoring the flat gradients (%zu elements)",
                         g->nparams);
    return DT_OK;
}

void *dt_lm_group_params(dt_lm *g, int group) {
    return group >= 0 && group < g->ngroups ? g->gparams[group] : NULL;
}
void *dt_lm_group_grads(dt_lm *g, int group) {
    return group >= 0 && group < g->ngroups ? g->ggrads[group] : NULL;
}

/* ----------------------------------------------------------------------------
 * forward */

/* block l's saved activations: its record, or the shared recompute area */
static void *acts_of(dt_lm *g, int l) {
    return l < shared_blocks(g) ? g->recompute : g->blocks + (size_t)l * g->family->acts_size;
}

/* The classifier matrix [V, C] (the embedding, or lm_head) in param dtype. */
static const void *cls_params(const dt_lm *g) { return slot_ptr(g, g->cls_group, g->cls); }
static dt_dtype cls_dtype(const dt_lm *g) { return lm_slot_dtype(g, g->cls); }

/* logits[N, V] = lnf[N, C] @ W[V, C]^T, W the embedding (tied) or lm_head. lnf:
 * the saved activation, lnf32 its fp32 view (unused with gemm16). */
static int classifier_forward_run(dt_lm *g, const void *lnf, const float *lnf32) {
    int64_t N = g->B * g->T, C = g->C, V = g->Vout;
    if (g->gemm16)   /* one bf16 GEMM on the stored lnf and matrix */
        return g->dev->gemm_ex(0, 1, N, V, C, 1.0f, lnf, g->at, C, cls_params(g), cls_dtype(g), C, 0.0f,
                               g->logits, DT_DTYPE_FP32, V);
    if (cls_dtype(g) == DT_DTYPE_FP32) {
        g->dev->gemm(0, 1, N, V, C, 1.0f, lnf32, C, cls_params(g), C, 0.0f, g->logits, V);
        return DT_OK;
    }
    for (int64_t v0 = 0; v0 < V; v0 += g->vchunk) {
        int64_t nv = v0 + g->vchunk <= V ? g->vchunk : V - v0;
        g->dev->convert(g->pw, DT_DTYPE_FP32, (const uint16_t *)cls_params(g) + v0 * C, cls_dtype(g),
                        (size_t)(nv * C));
        g->dev->gemm(0, 1, N, nv, C, 1.0f, lnf32, C, g->pw, C, 0.0f, g->logits + v0, V);
    }
    return DT_OK;
}

/* classifier_forward_run, booked to the profile's classifier */
static int classifier_forward(dt_lm *g, const void *lnf, const float *lnf32) {
    lm_prof_mark m = lm_prof_begin(g);
    int rc = classifier_forward_run(g, lnf, lnf32);
    lm_prof_end(g, DT_LM_OP_CLASSIFIER, m, 2.0 * (double)(g->B * g->T) * (double)g->C * (double)g->Vout);
    return rc;
}

/* One block forward, whichever the family. */
static int any_block_forward(dt_lm *g, int l, void *A, void *xout, const lm_params *P) {
    return g->family->block_forward(g, l, A, xout, P);
}

/* A GEMM's error (gemm_ex: out of scratch memory, the library failed) as one
 * line; l: the block, or -1 for the classifier. */
static int gemm_failed(const dt_lm *g, dt_error *err, int rc, const char *pass, int l) {
    if (g->tp_err.code) return dt_errorf(err, rc, "model: %s", g->tp_err.msg);   /* a TP collective failed */
    if (l < 0)
        return dt_errorf(err, rc, "model: a %s GEMM of the classifier failed on the %s device",
                         pass, g->dev->name);
    return dt_errorf(err, rc, "model: a %s GEMM of block %d failed on the %s device", pass, l,
                     g->dev->name);
}

/* Every token inside the vocabulary; targets may also be DT_IGNORE_INDEX. *counted
 * (may be NULL): the tokens that are not ignored. */
static int check_tokens(const dt_lm *g, const int32_t *tok, const char *what, int64_t *counted,
                        dt_error *err) {
    const int allow_ignore = counted != NULL;
    int64_t c = 0;
    for (int64_t n = 0; n < g->B * g->T; n++) {
        if (allow_ignore && tok[n] == DT_IGNORE_INDEX) continue;
        if (tok[n] < 0 || tok[n] >= g->Vfull)
            return dt_errorf(err, DT_EINVAL,
                             "model: %s token %d at position %lld is outside the vocabulary 0..%lld%s",
                             what, tok[n], (long long)n, (long long)(g->Vfull - 1),
                             allow_ignore ? " (or -100: no loss)" : "");
        c++;
    }
    if (counted) *counted = c;
    return DT_OK;
}

/* tensor parallelism: x0 (this rank's rows of wte) summed over the group, then wpe */
static int encoder_tp_reduce(dt_lm *g, float *x0) {
    const void *wpe = NULL;
    if (g->family->has_wpe) {
        wpe = slot_ptr(g, 0, g->wpe);
        if (g->pt != DT_DTYPE_FP32) {
            g->dev->convert(g->pw, DT_DTYPE_FP32, wpe, g->pt, (size_t)(g->T * g->C));
            wpe = g->pw;
        }
    }
    return lm_tp_encoder_reduce(g, x0, wpe);
}

int dt_lm_forward(dt_lm *g, const int32_t *inputs, const int32_t *targets, float *loss,
                    dt_error *err) {
    int64_t B = g->B, T = g->T, C = g->C, N = B * T, V = g->Vout;
    int rc;
    if (!inputs) return dt_errorf(err, DT_EINVAL, "model: forward needs input tokens");
    int64_t counted = N;
    if ((rc = check_tokens(g, inputs, "input", NULL, err))) return rc;
    if (targets && (rc = check_tokens(g, targets, "target", &counted, err))) return rc;
    /* host copy (for the 16-bit encoder backward's chains), then the device's;
     * the upload runs on the h2d stream and is handed to compute by an event */
    size_t tok_bytes = sizeof(int32_t) * (size_t)N;
    g->dev->stream_sync(DT_STREAM_H2D);   /* the last upload has read h_inputs */
    memcpy(g->h_inputs, inputs, tok_bytes);
    /* write-after-read: the previous micro-batch's backward, possibly still
     * queued on the compute stream, reads g->targets (cross-entropy) and
     * g->inputs (encoder); the uploads below must wait for it */
    g->dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_H2D);
    if (g->inputs != g->h_inputs)
        g->dev->memcpy(g->inputs, g->h_inputs, tok_bytes, DT_COPY_H2D, DT_STREAM_H2D);
    if (targets) g->dev->memcpy(g->targets, targets, tok_bytes, DT_COPY_H2D, DT_STREAM_H2D);
    g->dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
    g->have_targets = 0;
    lm_tp_localize_inputs(g);   /* tensor parallelism: this rank's vocabulary rows */
    g->have_forward = 0;

    /* group 0: encoder x[0] = wte[tokens] + wpe[0..T) */
    if ((rc = hook(g, g->hooks.before_forward, 0, err, "before_forward"))) return rc;
    float *x0 = lm_act_f32(g, g->x[0], g->w32.xout);
    /* learned positions; llama: RoPE in the blocks. Tensor parallelism adds them after the sum */
    const int has_wpe = g->family->has_wpe && !g->tp;
    g->prof_pass = DT_LM_PASS_FWD;
    lm_prof_mark m = lm_prof_begin(g);
    const dt_dtype et = lm_slot_dtype(g, g->wte);   /* wpe is in wte's set (dt_lm_create_opts) */
    if (et == DT_DTYPE_FP32) {
        g->dev->encoder_forward(x0, g->inputs, slot_ptr(g, 0, g->wte), has_wpe ? slot_ptr(g, 0, g->wpe) : NULL,
                                B, T, C);
    } else {
        float *wpe = NULL;
        if (has_wpe) {
            wpe = g->pw;
            g->dev->convert(wpe, DT_DTYPE_FP32, slot_ptr(g, 0, g->wpe), et, (size_t)(T * C));
        }
        g->dev->encoder_forward_cast(x0, g->inputs, slot_ptr(g, 0, g->wte), et, wpe, B, T, C);
    }
    if (g->tp && (rc = encoder_tp_reduce(g, x0))) return gemm_failed(g, err, rc, "forward", -1);
    if (g->embeds.forward && (rc = g->embeds.forward(g->embeds.ctx, g->h_inputs, x0, err))) return rc;
    lm_prof_end(g, DT_LM_OP_ENCODER, m, 0.0);
    lm_act_commit(g, g->x[0], x0, (size_t)(N * C));
    if ((rc = hook(g, g->hooks.after_forward, 0, err, "after_forward"))) return rc;

    for (int l = 0; l < g->L; l++) {
        if ((rc = hook(g, g->hooks.before_forward, 1 + l, err, "before_forward"))) return rc;
        lm_params P = group_params(g, 1 + l);
        if ((rc = any_block_forward(g, l, acts_of(g, l), g->x[l + 1], &P)))
            return gemm_failed(g, err, rc, "forward", l);
        if ((rc = hook(g, g->hooks.after_forward, 1 + l, err, "after_forward"))) return rc;
    }

    /* final norm (and an untied lm_head, in the same group) */
    int last = (int)g->L + 1;
    if ((rc = hook(g, g->hooks.before_forward, last, err, "before_forward"))) return rc;
    const float *P = norm_params_f32(g);
    const float *xL = lm_act_load(g, g->x[g->L], g->w32.x, (size_t)(N * C));
    float *lnf = lm_act_f32(g, g->lnf, g->w32.ln1);
    m = lm_prof_begin(g);
    g->family->norm_forward(g, lnf, xL, P);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    lm_act_commit_lin(g, g->lnf, lnf, (size_t)(N * C));
    if (!g->tied && (rc = classifier_forward(g, g->lnf, lnf)))
        return gemm_failed(g, err, rc, "forward", -1);
    if ((rc = hook(g, g->hooks.after_forward, last, err, "after_forward"))) return rc;

    /* tied: group 0 again for the classifier; then the loss */
    if (g->tied) {
        if ((rc = hook(g, g->hooks.before_forward, 0, err, "before_forward"))) return rc;
        if ((rc = classifier_forward(g, g->lnf, lnf))) return gemm_failed(g, err, rc, "forward", -1);
        if ((rc = hook(g, g->hooks.after_forward, 0, err, "after_forward"))) return rc;
    }
    m = lm_prof_begin(g);
    double mean = 0.0;
    if (g->tp) {
        if ((rc = lm_tp_xent_forward(g, targets != NULL, &mean))) return gemm_failed(g, err, rc, "forward", -1);
    } else {
        mean = g->dev->crossentropy_forward(g->ce_lse, g->ce_losses, g->logits, targets ? g->targets : NULL, N, V);
    }
    lm_prof_end(g, DT_LM_OP_XENT, m, 0.0);
    if (targets) {
        /* the op's mean is over all N rows, ignored ones at 0: the mean over the counted */
        if (counted < N) mean = counted > 0 ? mean * (double)N / (double)counted : 0.0;
        if (loss) *loss = (float)mean;
        g->counted = counted;
        g->have_targets = 1;
    }
    g->have_forward = 1;
    return DT_OK;
}

/* ----------------------------------------------------------------------------
 * backward */

/* classifier backward, dlogits in g->logits: dlnf[N, C] = dlogits @ W; dW +=
 * dlogits^T @ lnf (W [V, C]). lnf: the saved activation, lnf32 its fp32 view
 * (unused with gemm16). DT_OK or a GEMM's error. */
static int classifier_backward(dt_lm *g, const void *lnf, const float *lnf32, float *dlnf) {
    int64_t N = g->B * g->T, C = g->C, V = g->Vout;
    const int grp = g->cls_group;
    const size_t off = g->cls.off;
    const int trained = g->cls.set == DT_LM_SET_TRAINED;   /* a frozen matrix: no dW GEMM */
    /* dlnf and (trained) dW: 2 N C each per vocab row */
    const double flops_per_v = (trained ? 4.0 : 2.0) * (double)N * (double)C;
    lm_prof_mark m = lm_prof_begin(g);
    if (cls_dtype(g) == DT_DTYPE_FP32 && g->gt == DT_DTYPE_FP32) {
        g->dev->gemm(0, 0, N, C, V, 1.0f, g->logits, V, cls_params(g), C, 0.0f, dlnf, C);
        if (trained)
            g->dev->gemm(1, 0, V, C, N, 1.0f, g->logits, V, lnf32, C, 1.0f, (float *)g->ggrads[grp] + off, C);
        lm_prof_end(g, DT_LM_OP_CLASSIFIER, m, flops_per_v * (double)V);
        return DT_OK;
    }
    /* chunks over V: gemm16 rounds each dlogits chunk [N, nv] to bf16 into d16 */
    int64_t vchunk = g->vchunk;
    if (g->gemm16 && (size_t)(N * vchunk) > g->d16_cap) vchunk = (int64_t)(g->d16_cap / (size_t)N);
    int rc = DT_OK;
    for (int64_t v0 = 0; v0 < V && !rc; v0 += vchunk) {
        int64_t nv = v0 + vchunk <= V ? vchunk : V - v0;
        const float dlnf_beta = v0 ? 1.0f : 0.0f;   /* the chunks' sums over V accumulate */
        float *dw = g->gt == DT_DTYPE_FP32 && trained ? (float *)g->ggrads[grp] + off + v0 * C : g->gw;
        const float dw_beta = g->gt == DT_DTYPE_FP32 ? 1.0f : 0.0f;   /* gw: a fresh chunk */
        m = lm_prof_begin(g);   /* the chunk's weight conversion (16-bit, not gemm16) is booked with it */
        if (g->gemm16) {
            const void *w = lm_tensor_ptr((void *)cls_params(g), (size_t)(v0 * C), dt_dtype_size(cls_dtype(g)));   /* [nv, C] */
            m = lm_prof_begin(g);
            g->dev->convert_2d(g->d16, DT_DTYPE_BF16, nv, g->logits + v0, DT_DTYPE_FP32, V, N, nv);
            lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
            m = lm_prof_begin(g);
            rc = g->dev->gemm_ex(0, 0, N, C, nv, 1.0f, g->d16, DT_DTYPE_BF16, nv, w, cls_dtype(g), C,
                                 dlnf_beta, dlnf, DT_DTYPE_FP32, C);
            if (!rc && trained)
                rc = g->dev->gemm_ex(1, 0, nv, C, N, 1.0f, g->d16, DT_DTYPE_BF16, nv, lnf, g->at,
                                     C, dw_beta, dw, DT_DTYPE_FP32, C);
        } else {
            const float *w;   /* [nv, C] */
            if (cls_dtype(g) == DT_DTYPE_FP32) {
                w = (const float *)cls_params(g) + v0 * C;
            } else {
                g->dev->convert(g->pw, DT_DTYPE_FP32, (const uint16_t *)cls_params(g) + v0 * C,
                                cls_dtype(g), (size_t)(nv * C));
                w = g->pw;
            }
            g->dev->gemm(0, 0, N, C, nv, 1.0f, g->logits + v0, V, w, C, dlnf_beta, dlnf, C);
            if (trained) g->dev->gemm(1, 0, nv, C, N, 1.0f, g->logits + v0, V, lnf32, C, dw_beta, dw, C);
        }
        lm_prof_end(g, DT_LM_OP_CLASSIFIER, m, flops_per_v * (double)nv);
        if (!rc && trained && g->gt != DT_DTYPE_FP32) grads_add_16(g, grp, off + (size_t)(v0 * C), g->gw, (size_t)(nv * C));
    }
    return rc;
}

/* Final norm backward into group L+1's first elements: on entry g->dC holds
 * d loss / d lnf; on exit g->dres = d loss / d x[L]. */
static void final_norm_backward(dt_lm *g) {
    int64_t N = g->B * g->T, C = g->C;
    int last = (int)g->L + 1;
    const float *P = norm_params_f32(g);
    const int trained = g->norm_w.set == DT_LM_SET_TRAINED;   /* frozen: G NULL, no weight gradient */
    const int w16 = g->gt != DT_DTYPE_FP32 && trained;
    float *G = !trained ? NULL : w16 ? g->gw : (float *)g->ggrads[last] + g->norm_w.off;
    if (w16) g->dev->memset0(g->gw, norm_numel(g) * sizeof(float));
    const float *xL = lm_act_load(g, g->x[g->L], g->w32.x, (size_t)(N * C));
    g->dev->memset0(g->dres, sizeof(float) * (size_t)(N * C));
    lm_prof_mark m = lm_prof_begin(g);
    g->family->norm_backward(g, g->dC, xL, P, G);
    lm_prof_end(g, DT_LM_OP_NORM, m, 0.0);
    if (w16) grads_add_16(g, last, g->norm_w.off, g->gw, norm_numel(g));
}

/* One block backward, whichever the family. */
static int any_block_backward(dt_lm *g, int l, const void *A, const lm_params *P, float *G) {
    return g->family->block_backward(g, l, A, P, G);
}

/* group 0's gradient of the tensor at slot s (grad dtype), NULL when it has none / is frozen */
static void *lm_slot_grad_any(const dt_lm *g, lm_slot s) {
    return lm_slot_trained(s) ? lm_tensor_ptr(g->ggrads[0], s.off, g->gsz) : NULL;
}

/* encoder backward into group 0's grads (any grad dtype) */
static void encoder_backward(dt_lm *g) {
    int64_t B = g->B, T = g->T, C = g->C, N = B * T;
    if (g->gt == DT_DTYPE_FP32) {
        float *G = g->ggrads[0];
        g->dev->encoder_backward(G + g->wte.off, g->tp ? NULL : lm_slot_grad(G, g->wpe),
                                 g->dres, g->inputs, B, T,
                               C);
        return;
    }
    /* 16-bit grads: sum each wte row's contributions in fp32 first (tokens in
     * order, so deterministic), then round into storage once per row. Chain the
     * positions of each token in order on the host: tok_head[tok] = first
     * position, tok_next[n] = next position with the same token (-1 ends). */
    for (int64_t n = N - 1; n >= 0; n--) {
        g->h_tok_next[n] = g->h_tok_head[g->h_inputs[n]];
        g->h_tok_head[g->h_inputs[n]] = (int32_t)n;
    }
    if (g->tok_head != g->h_tok_head) {
        /* write-after-read: the last encoder_backward_16 on the compute stream
         * reads tok_head / tok_next (not ordered otherwise: nothing between two
         * calls is guaranteed to wait for the compute stream) */
        g->dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_H2D);
        g->dev->memcpy(g->tok_head, g->h_tok_head, sizeof(int32_t) * (size_t)g->V, DT_COPY_H2D,
                       DT_STREAM_H2D);
        g->dev->memcpy(g->tok_next, g->h_tok_next, sizeof(int32_t) * (size_t)N, DT_COPY_H2D,
                       DT_STREAM_H2D);
        g->dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
    }
    void *G = g->ggrads[0];
    g->dev->encoder_backward_16(lm_tensor_ptr(G, g->wte.off, g->gsz),
                                lm_slot_trained(g->wpe) && !g->tp ? lm_tensor_ptr(G, g->wpe.off, g->gsz) : NULL,
                                g->gt, g->dres, g->inputs,
                                g->tok_head, g->tok_next, g->gw, B, T, C);
    /* reset the host head table for the next call, once the upload has read it */
    g->dev->stream_sync(DT_STREAM_H2D);
    for (int64_t n = 0; n < N; n++) g->h_tok_head[g->h_inputs[n]] = -1;
}

static int backward_from_dlogits(dt_lm *g, dt_error *err);

int dt_lm_backward(dt_lm *g, float grad_scale, dt_error *err) {
    int64_t N = g->B * g->T, V = g->Vout;
    if (!g->have_targets)
        return dt_errorf(err, DT_EINVAL,
                         "model: backward needs a preceding forward with targets");
    g->have_targets = 0;   /* the logits buffer becomes dlogits */

    /* mean loss over N tokens, times the caller's scale (1/accum, loss scale) */
    float dloss = g->counted > 0 ? grad_scale / (float)g->counted : 0.0f;
    g->prof_pass = DT_LM_PASS_BWD;
    lm_prof_mark m = lm_prof_begin(g);
    if (g->tp) lm_tp_xent_backward(g, dloss);
    else g->dev->crossentropy_backward_inplace(g->logits, g->ce_lse, g->targets, dloss, N, V);
    lm_prof_end(g, DT_LM_OP_XENT, m, 0.0);
    return backward_from_dlogits(g, err);
}

float *dt_lm_logits_mut(dt_lm *g) { return g->logits; }
int64_t dt_lm_logits_width(const dt_lm *g) { return g->Vout; }

void dt_lm_set_adapters(dt_lm *g, int on) { g->lora_off = !on; }

int dt_lm_backward_logits(dt_lm *g, dt_error *err) {
    if (!g->have_forward)
        return dt_errorf(err, DT_EINVAL, "model: backward needs a preceding forward");
    g->have_targets = 0;
    g->prof_pass = DT_LM_PASS_BWD;
    return backward_from_dlogits(g, err);
}

/* The backward below the loss: g->logits holds dL/dlogits [N, Vout]. */
static int backward_from_dlogits(dt_lm *g, dt_error *err) {
    int64_t N = g->B * g->T, C = g->C;
    int rc;
    lm_prof_mark m;
    g->have_forward = 0;
    if (g->forward_only) return dt_errorf(err, DT_EINVAL, "model: a forward-only model has no backward");
    if (g->lora_off) return dt_errorf(err, DT_EINVAL, "model: no backward of a forward with the adapters off");
    const float *lnf = lm_act_load_lin(g, g->lnf, g->w32.ln1, (size_t)(N * C));   /* [N, C] */
    int last = (int)g->L + 1;
    if (g->tied) {   /* group 0 first: the classifier is the embedding */
        if ((rc = hook(g, g->hooks.before_backward, 0, err, "before_backward"))) return rc;
        if ((rc = classifier_backward(g, g->lnf, lnf, g->dC)))
            return gemm_failed(g, err, rc, "backward", -1);
        if ((rc = hook(g, g->hooks.before_backward, last, err, "before_backward"))) return rc;
    } else {         /* lm_head lives in group L+1 with the final norm */
        if ((rc = hook(g, g->hooks.before_backward, last, err, "before_backward"))) return rc;
        if ((rc = classifier_backward(g, g->lnf, lnf, g->dC)))
            return gemm_failed(g, err, rc, "backward", -1);
    }
    /* tensor parallelism: the classifier's input gradient summed over the group (f) */
    if ((rc = lm_tp_allreduce(g, g->dC, (size_t)(N * C)))) return gemm_failed(g, err, rc, "backward", -1);
    final_norm_backward(g);
    if ((rc = hook(g, g->hooks.after_backward, last, err, "after_backward"))) return rc;

    for (int l = (int)g->L - 1; l >= 0; l--) {
        if ((rc = hook(g, g->hooks.before_backward, 1 + l, err, "before_backward"))) return rc;
        if (l < g->first_trained) {   /* nothing trained here or below: no backward (its group is empty) */
            if ((rc = hook(g, g->hooks.after_backward, 1 + l, err, "after_backward"))) return rc;
            continue;
        }
        lm_params Pl = group_params(g, 1 + l);
        if (l < g->K) {   /* recompute */
            g->prof_pass = DT_LM_PASS_RECOMPUTE;
            rc = any_block_forward(g, l, g->recompute, NULL, &Pl);
            g->prof_pass = DT_LM_PASS_BWD;
            if (rc) return gemm_failed(g, err, rc, "recompute", l);
        }
        float *Gl = group_grads_f32(g, 1 + l);
        lm_tp_partial_save(g, l, Gl);
        if ((rc = any_block_backward(g, l, acts_of(g, l), &Pl, Gl)) || (rc = lm_tp_partial_reduce(g, l, Gl)))
            return gemm_failed(g, err, rc, "backward", l);
        group_grads_commit(g, 1 + l);
        if ((rc = hook(g, g->hooks.after_backward, 1 + l, err, "after_backward"))) return rc;
    }

    /* untied: group 0 is entered here for the first time in this pass */
    if (!g->tied && (rc = hook(g, g->hooks.before_backward, 0, err, "before_backward"))) return rc;
    if (g->input_grad && (rc = g->embeds.backward(g->embeds.ctx, g->h_inputs, g->dres, err))) return rc;
    if (g->embed_trained) {
        m = lm_prof_begin(g);
        lm_tp_encoder_backward_prep(g, g->tp ? lm_slot_grad_any(g, g->wpe) : NULL);
        encoder_backward(g);
        lm_prof_end(g, DT_LM_OP_ENCODER, m, 0.0);
    }
    if ((rc = hook(g, g->hooks.after_backward, 0, err, "after_backward"))) return rc;
    return DT_OK;
}

void dt_lm_zero_grad(dt_lm *g) {
    for (int grp = 0; grp < g->ngroups; grp++)
        g->dev->memset0(g->ggrads[grp], g->group_numel[grp] * (size_t)g->gsz);
}

/* ----------------------------------------------------------------------------
 * gradient checks */

int dt_lm_grads_finite(const dt_lm *g) {
    for (int grp = 0; grp < g->ngroups; grp++)
        if (!g->dev->all_finite(g->ggrads[grp], g->gt, g->group_numel[grp])) return 0;
    return 1;
}

double dt_lm_grad_sumsq(const dt_lm *g) {
    /* per group in fixed chunks (dt_devmath.h), groups in order */
    double total = 0.0;
    for (int grp = 0; grp < g->ngroups; grp++)
        total += g->dev->sumsq(g->ggrads[grp], g->gt, g->group_numel[grp]);
    return total;
}
