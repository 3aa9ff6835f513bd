/* lm_layer.c — what every block family of dt_lm builds with (lm_internal.h): the
 * tensor table (each tensor declared with its flags and init rule), the activation
 * allocator's cursor, the linears (the fp32 device ops, or with bf16 params and
 * activations bf16 x bf16 -> fp32 GEMMs on the stored tensors: docs/engine.md
 * "Precision") and the per-op profile's clock. It calls no family and not the
 * driver (lm.c), so the families and the driver stand on it, not on each other. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "lm_internal.h"

/* ----------------------------------------------------------------------------
 * the tensor table and the activation cursor */

/* 1 when the method trains the tensor d declares (every tensor under full fine-tuning) */
static int decl_trained(const dt_lm *g, const lm_tensor_decl *d) {
    if (d->layer == LM_LAYER_EXTRA) return 1;
    /* a sequence classifier's head is new: always trained (PEFT's SEQ_CLS modules_to_save) */
    if (g->seq_cls && !strcmp(d->module, DT_LM_SCORE_HEAD)) return 1;
    return !g->pg || dt_pgroups_tensor_trained(g->pg, d->module, d->tensor, d->layer);
}

void lm_layout_add(dt_lm *g, lm_layout *lo, int group, const lm_tensor_decl *d) {
    const int trained = d->adapter || decl_trained(g, d);
    if (!trained && lm_qbase_add(g, lo, group, d)) return;   /* QLoRA: quantised instead */
    const int i = trained ? lo->i++ : lo->bi++;
    dt_tensor_info *t = trained ? &g->tensors[i] : &g->btensors[i];
    char *name = trained ? g->names[i] : g->bnames[i];
    size_t *off = trained ? &lo->off : &lo->boff;
    snprintf(name, DT_TENSOR_NAME_MAX, "%s", d->name);
    t->name = name;
    t->group = group;
    t->set = trained ? DT_LM_SET_TRAINED : DT_LM_SET_BASE;
    t->offset = *off;
    t->full_offset = d->adapter ? DT_LORA_INIT_COUNTER + lo->aoff : lo->foff;
    t->ndim = d->ndim;
    t->shape[0] = d->d0;
    t->shape[1] = d->ndim == 2 ? d->d1 : 0;
    t->numel = (size_t)(d->ndim == 2 ? d->d0 * d->d1 : d->d0);
    t->flags = trained ? d->flags : d->flags & ~DT_TENSOR_TRAINABLE;
    t->init = d->init;
    *off += t->numel;
    /* the init's counter runs over the whole model (tensor parallelism: the whole tensor) */
    const size_t whole = lm_tp_mark(g, t, d->module, d->tensor);
    if (d->adapter) lo->aoff += t->numel;
    else lo->foff += whole;
}

int lm_check_head_dim(int64_t D, dt_error *err) {
    if (D > DT_LM_MAX_HEAD_DIM)
        return dt_errorf(err, DT_EINVAL, "model: head size %lld exceeds the supported %d", (long long)D,
                         DT_LM_MAX_HEAD_DIM);
    return DT_OK;
}

/* ---- the layout from models/' description ---- */

/* Who a tensor is for models/dt_pgroup.h: module (in-block path, or outside), block (-1 outside). */
typedef struct {
    const char *module;
    int64_t layer;
} lm_owner;

/* a matrix [d0, d1], N(0, std): trained, decayed */
static void add_matrix(dt_lm *g, lm_layout *lo, int group, const char *name, lm_owner w, int64_t d0, int64_t d1,
                       double std) {
    const lm_tensor_decl d = {name, 2, d0, d1, DT_TENSOR_TRAINABLE | DT_TENSOR_DECAY, {DT_INIT_NORMAL, std}, 0,
                              w.module, "weight", w.layer};
    lm_layout_add(g, lo, group, &d);
}

/* a vector [n] starting at 0 (biases) or 1 (norm weights): trained, not decayed */
static void add_vector(dt_lm *g, lm_layout *lo, int group, const char *name, lm_owner w, int64_t n,
                       dt_init_kind init) {
    const lm_tensor_decl d = {name, 1, n, 0, DT_TENSOR_TRAINABLE, {init, 0.0}, 0, w.module,
                              init == DT_INIT_ONE ? "weight" : "bias", w.layer};
    lm_layout_add(g, lo, group, &d);
}

static void add_norm(dt_lm *g, lm_layout *lo, int group, const char *prefix, int64_t layer, const dt_norm_desc *n) {
    char name[DT_TENSOR_NAME_MAX];
    const lm_owner w = {n->name, layer};
    snprintf(name, sizeof name, "%s%s.weight", prefix, n->name);
    add_vector(g, lo, group, name, w, n->width, DT_INIT_ONE);
    if (n->kind != DT_NORM_LAYERNORM) return;
    snprintf(name, sizeof name, "%s%s.bias", prefix, n->name);
    add_vector(g, lo, group, name, w, n->width, DT_INIT_ZERO);
}

/* LoRA's A [r, in] (PEFT: kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in))) and
 * B [out, r] (zeros) of a linear the method adapts: trained, decayed (HF Trainer decays every
 * matrix), named "<module>.lora_A.weight" / ".lora_B.weight" after the base weight */
static void add_adapter(dt_lm *g, lm_layout *lo, int group, const char *prefix, int64_t layer,
                        const dt_linear_desc *li) {
    int trained = 0, adapted = 0;
    if (!g->pg || layer < 0) return;
    dt_pgroups_module_state(g->pg, li->name, layer, &trained, &adapted);
    if (!adapted) return;
    char name[DT_TENSOR_NAME_MAX];
    const unsigned fl = DT_TENSOR_TRAINABLE | DT_TENSOR_DECAY | DT_TENSOR_ADAPTER;
    snprintf(name, sizeof name, "%s%s.lora_A.weight", prefix, li->name);
    const lm_tensor_decl a = {name, 2, g->lora_r, li->in, fl, {DT_INIT_UNIFORM, 1.0 / sqrt((double)li->in)}, 1,
                              li->name, "lora_A.weight", layer};
    lm_layout_add(g, lo, group, &a);
    snprintf(name, sizeof name, "%s%s.lora_B.weight", prefix, li->name);
    const lm_tensor_decl b = {name, 2, li->out, g->lora_r, fl, {DT_INIT_ZERO, 0.0}, 1, li->name, "lora_B.weight",
                              layer};
    lm_layout_add(g, lo, group, &b);
}

/* a linear's weight in the family's layout, then its adapter when the method adapts it */
static void add_weight(dt_lm *g, lm_layout *lo, int group, const char *prefix, int64_t layer,
                       const dt_linear_desc *li, double std) {
    char name[DT_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "%s%s.weight", prefix, li->name);
    const int in_out = g->family->weight_layout == LM_W_IN_OUT;
    const lm_owner w = {li->name, layer};
    add_matrix(g, lo, group, name, w, in_out ? li->in : li->out, in_out ? li->out : li->in, std);
    add_adapter(g, lo, group, prefix, layer, li);
}

static void add_bias(dt_lm *g, lm_layout *lo, int group, const char *prefix, int64_t layer,
                     const dt_linear_desc *li) {
    if (!li->bias) return;
    char name[DT_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "%s%s.bias", prefix, li->name);
    const lm_owner w = {li->name, layer};
    add_vector(g, lo, group, name, w, li->out, DT_INIT_ZERO);
}

/* norm; in-linears' weights, their biases; in-norms; out weight and bias */
static void add_sublayer(dt_lm *g, lm_layout *lo, int group, const char *prefix, int64_t layer,
                         const dt_sublayer_desc *s, double out_std) {
    const double std = g->family->init_std;
    add_norm(g, lo, group, prefix, layer, &s->norm);
    for (int i = 0; i < s->n_in; i++) add_weight(g, lo, group, prefix, layer, &s->in[i], std);
    for (int i = 0; i < s->n_in; i++) add_bias(g, lo, group, prefix, layer, &s->in[i]);
    for (int i = 0; i < s->n_in_norm; i++) add_norm(g, lo, group, prefix, layer, &s->in_norm[i]);
    add_weight(g, lo, group, prefix, layer, &s->out, out_std);
    add_bias(g, lo, group, prefix, layer, &s->out);
}

static int norm_tensors(const dt_norm_desc *n) { return n->kind == DT_NORM_LAYERNORM ? 2 : 1; }

static int sublayer_tensors(const dt_sublayer_desc *s) {
    int n = norm_tensors(&s->norm) + 1 + (s->out.bias != 0);
    for (int i = 0; i < s->n_in; i++) n += 1 + (s->in[i].bias != 0);
    for (int i = 0; i < s->n_in_norm; i++) n += norm_tensors(&s->in_norm[i]);
    return n;
}

int lm_layout_count(const dt_model_desc *d, int64_t L, int tied) {
    const int block = sublayer_tensors(&d->block.attn) + sublayer_tensors(&d->block.mlp);
    return d->n_embed + (int)L * block + norm_tensors(&d->final_norm) + !tied;
}

void lm_layout_embed(dt_lm *g, const dt_model_desc *d, lm_layout *lo) {
    for (int i = 0; i < d->n_embed; i++) {
        char name[DT_TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "%s%s.weight", g->family->model_prefix, d->embed[i].name);
        const lm_owner w = {d->embed[i].name, -1};
        add_matrix(g, lo, 0, name, w, d->embed[i].rows, d->embed[i].width, g->family->init_std);
    }
}

void lm_layout_extra(dt_lm *g, lm_layout *lo) {
    g->extra_foff = lo->foff;
    for (int i = 0; i < g->nextra; i++) {
        const dt_lm_extra *e = &g->extra[i];
        const lm_tensor_decl d = {e->name, e->d1 ? 2 : 1, e->d0, e->d1,
                                  DT_TENSOR_TRAINABLE | (e->decay ? DT_TENSOR_DECAY : 0u),
                                  {e->init_std > 0 ? DT_INIT_NORMAL : DT_INIT_ZERO, e->init_std}, 0, e->name, "weight",
                                  LM_LAYER_EXTRA};
        g->extra_off[i] = lo->off - g->group_off[0];
        lm_layout_add(g, lo, 0, &d);
    }
}

void lm_layout_block(dt_lm *g, const dt_model_desc *d, int l, lm_layout *lo) {
    const lm_family *f = g->family;
    char prefix[DT_TENSOR_NAME_MAX];
    snprintf(prefix, sizeof prefix, f->block_prefix, l);
    /* GPT-2 (Radford et al. 2019 §2.3): the residual branches' last linears scaled by 1/sqrt(2L) */
    const double out_std = f->scale_out_init ? f->init_std / sqrt(2.0 * (double)g->L) : f->init_std;
    add_sublayer(g, lo, 1 + l, prefix, l, &d->block.attn, out_std);
    add_sublayer(g, lo, 1 + l, prefix, l, &d->block.mlp, out_std);
}

void lm_layout_head(dt_lm *g, const dt_model_desc *d, lm_layout *lo) {
    const int last = (int)g->L + 1;
    const size_t base = lo->foff;
    add_norm(g, lo, last, g->family->model_prefix, -1, &d->final_norm);
    g->norm_numel = lo->foff - base;
    /* the classifier matrix [V, C]: the embedding (tied) or lm_head after the norm */
    g->cls_group = g->tied ? 0 : last;
    if (!g->tied) {   /* a sequence classifier's head: transformers' "score" [num_labels, C], no bias */
        const char *head = g->seq_cls ? DT_LM_SCORE_HEAD : d->lm_head.name;
        char name[DT_TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "%s.weight", head);
        const lm_owner w = {head, -1};
        add_matrix(g, lo, last, name, w, g->Vout, d->lm_head.in, g->family->init_std);
    }
}

/* the slot of the tensor named `name` in group grp (off SIZE_MAX: none) */
static lm_slot find_slot(const dt_lm *g, int grp, const char *name) {
    lm_slot s = {SIZE_MAX, DT_LM_SET_TRAINED};
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].group == grp && strcmp(g->tensors[i].name, name) == 0)
            s.off = g->tensors[i].offset - g->group_off[grp];
    for (int i = 0; i < g->nbase; i++)
        if (g->btensors[i].group == grp && strcmp(g->btensors[i].name, name) == 0) {
            s.off = g->btensors[i].offset - g->bgroup_off[grp];
            s.set = DT_LM_SET_BASE;
        }
    lm_qbase_find(g, grp, name, &s);
    return s;
}

/* one of block l's tensors (set, index) that no kind of the family names, or -1 */
static int unknown_block_tensor(const dt_lm *g, int l, const dt_tensor_info *t, int n) {
    const lm_slot *sl = g->slots + (size_t)l * (size_t)g->family->block_kinds;
    for (int i = 0; i < n; i++) {
        if (t[i].group != 1 + l) continue;
        const size_t off = t[i].offset - (t[i].set == DT_LM_SET_BASE ? g->bgroup_off : g->group_off)[1 + l];
        int known = 0;
        for (int k = 0; k < g->family->block_kinds; k++) known |= sl[k].off == off && sl[k].set == t[i].set;
        if (!known) return i;
    }
    return -1;
}

int lm_layout_kinds(dt_lm *g, dt_error *err) {
    const lm_family *f = g->family;
    char prefix[DT_TENSOR_NAME_MAX], name[DT_TENSOR_NAME_MAX * 2];
    for (int l = 0; l < g->L; l++) {
        lm_slot *sl = g->slots + (size_t)l * (size_t)f->block_kinds;
        snprintf(prefix, sizeof prefix, f->block_prefix, l);
        for (int k = 0; k < f->block_kinds; k++) {
            snprintf(name, sizeof name, "%s%s", prefix, f->kind_names[k]);
            sl[k] = find_slot(g, 1 + l, name);
        }
        int i = unknown_block_tensor(g, l, g->tensors, g->ntensors);
        const char *bad = i >= 0 ? g->tensors[i].name : NULL;
        if (!bad && (i = unknown_block_tensor(g, l, g->btensors, g->nbase)) >= 0) bad = g->btensors[i].name;
        if (bad)
            return dt_errorf(err, DT_EINVAL, "model: the block has a tensor %s the engine's %s block does not use",
                             bad, f->name);
        for (int k = 0; k < f->n_fused; k++) {
            const lm_slot a = sl[f->fused[k][0]], b = sl[f->fused[k][1]];
            if (a.off != SIZE_MAX && b.off != SIZE_MAX && a.set != b.set)
                return dt_errorf(err, DT_EINVAL,
                                 "model: %s%s and %s are one GEMM in the engine's %s block; train both or neither "
                                 "(--trainable-modules naming their common parent, e.g. self_attn or mlp)",
                                 prefix, f->kind_names[f->fused[k][0]], f->kind_names[f->fused[k][1]], f->name);
        }
    }
    const int last = (int)g->L + 1;
    /* group 0: the token embedding first, learned positions (gpt2) second; group L+1: the
     * final norm first, then (untied) lm_head: the first tensor of each in layout order */
    g->wte = g->wpe = g->cls = g->norm_w = (lm_slot){SIZE_MAX, DT_LM_SET_TRAINED};
    for (int pass = 0; pass < 2; pass++) {
        const dt_tensor_info *t = pass ? g->btensors : g->tensors;
        const int n = pass ? g->nbase : g->ntensors;
        const size_t *go = pass ? g->bgroup_off : g->group_off;
        for (int i = 0; i < n; i++) {
            const lm_slot s = {t[i].offset - go[t[i].group], pass ? DT_LM_SET_BASE : DT_LM_SET_TRAINED};
            if (t[i].group == 0 && t[i].full_offset == 0) g->wte = s;
            else if (t[i].group == 0 && t[i].full_offset < g->extra_foff) g->wpe = s;   /* not an extra */
            if (t[i].group == last && t[i].full_offset == g->full_head_off) g->norm_w = s;
            if (t[i].group == last && t[i].full_offset == g->full_head_off + g->norm_numel) g->cls = s;
        }
    }
    if (g->tied) g->cls = g->wte;
    return DT_OK;
}

void *lm_take(char *base, size_t *off, size_t bytes) {
    void *p = base ? base + *off : NULL;
    *off += bytes;
    return p;
}

/* ----------------------------------------------------------------------------
 * per-op profile (dt_lm_set_profile, lm_internal.h) */

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

lm_prof_mark lm_prof_now(const dt_lm *g) {
    g->dev->stream_sync(DT_STREAM_COMPUTE);   /* a no-op on the CPU */
    lm_prof_mark m = {clock_s(CLOCK_MONOTONIC), clock_s(CLOCK_PROCESS_CPUTIME_ID)};
    return m;
}

void lm_prof_record(const dt_lm *g, dt_lm_op op, lm_prof_mark m, double flops) {
    lm_prof_mark e = lm_prof_now(g);
    dt_lm_profile *p = g->prof;
    p->wall[g->prof_pass][op] += e.wall - m.wall;
    p->cpu[g->prof_pass][op] += e.cpu - m.cpu;
    p->flops[g->prof_pass][op] += flops;
    p->calls[g->prof_pass][op]++;
}

/* ----------------------------------------------------------------------------
 * linears (lm_internal.h lm_linear): fp32 device ops, or bf16 x bf16 -> fp32 GEMMs */

void lm_linear_add_lora(const dt_lm *g, const lm_params *P, lm_linear *lin, int mod, int ka, int kb, int64_t seg,
                        int64_t width) {
    if (P->slot[ka].off == SIZE_MAX || lin->nlora >= LM_LORA_MAX) return;
    lm_lora *a = &lin->lora[lin->nlora++];
    a->a = P->slot[ka];
    a->b = P->slot[kb];
    a->seg = seg;
    a->width = width;
    a->id = (uint64_t)P->layer * (uint64_t)g->lora_mods + (uint64_t)mod;
    a->xa = g->lora_xa_at[a->id];   /* [N, r], laid out for each adapted module (lm.c) */
}

/* LoRA dropout's mask (dt_lm_set_dropout): element e of adapter a's input is kept when the
 * uniform at counter e + 1 of the stream splitmix64(key, id + 1) is >= p (torch's
 * bernoulli(1 - p)), and kept elements are scaled by 1 / (1 - p) as nn.Dropout does. The
 * mask is a function of (key, block, module, element) alone, so the backward regenerates it
 * instead of keeping it (scripts/gen_lora_goldens.py reproduces it). */
static int lora_dropping(const dt_lm *g) { return g->drop_on && g->lora_p > 0.0f; }

/* y[e] = mask(e) · x[e] / (1 - p) over n elements (y may be x), on the device */
static void lora_mask(const dt_lm *g, const lm_lora *a, float *y, const float *x, int64_t n) {
    g->dev->dropout_mask(y, x, n, lm_splitmix64_at(g->drop_key, a->id + 1), g->lora_p);
}

/* the adapter's input: x, or dropout(x) in g->lora_xd [N, IC] */
static const float *lora_input(const dt_lm *g, const lm_lora *a, const float *x, int64_t N, int64_t IC) {
    if (!lora_dropping(g)) return x;
    lora_mask(g, a, g->lora_xd, x, N * IC);
    return g->lora_xd;
}

/* LoRA's GEMMs of one pass through lin's adapters: x·Aᵀ and (x·Aᵀ)·Bᵀ, 2·N·r·(IC + width) */
static double lora_flops(const dt_lm *g, const lm_linear *lin, int64_t N) {
    double f = 0.0;
    for (int i = 0; i < lin->nlora; i++)
        f += 2.0 * (double)N * (double)g->lora_r * (double)(lin->IC + lin->lora[i].width);
    return f;
}

/* out[:, seg : seg + width] += s · (dropout(x) Aᵀ) Bᵀ for each adapter (PEFT lora.Linear.forward),
 * keeping dropout(x) Aᵀ [N, r] for lora_B's gradient. x: inp32 [N, IC]. */
static void lora_forward(dt_lm *g, const lm_linear *lin, const lm_params *P, float *out, const float *x,
                         int64_t N) {
    const int64_t r = g->lora_r, IC = lin->IC, OC = lin->OC;
    if (g->lora_off) return;   /* dt_lm_set_adapters: the base model alone (dpo's reference) */
    for (int i = 0; i < lin->nlora; i++) {
        const lm_lora *a = &lin->lora[i];
        const float *A = lm_slot_f32(P, a->a), *B = lm_slot_f32(P, a->b);   /* [r, IC], [width, r] */
        const float *xd = lora_input(g, a, x, N, IC);                           /* [N, IC] */
        g->dev->gemm(0, 1, N, r, IC, 1.0f, xd, IC, A, IC, 0.0f, a->xa, r);
        g->dev->gemm(0, 1, N, a->width, r, g->lora_s, a->xa, r, B, r, 1.0f, out + a->seg, OC);
    }
}

/* The adapters' backward, dy = dout[:, seg : seg + width] (fp32 [N, OC] strided), xd = dropout(x)
 * (regenerated from its key), M its mask / (1 - p):
 *   dB [width, r] += s · dyᵀ (xd Aᵀ);  t [N, r] = s · dy B;  dA [r, IC] += tᵀ xd;  dinp += M ⊙ (t A)
 * (PEFT's autograd through lora_B(lora_A(x)) * scaling; dinp adds to the base's). */
static void lora_backward(dt_lm *g, const lm_linear *lin, const lm_params *P, float *G, float *dinp,
                          const float *dout, const float *x, int64_t N) {
    const int64_t r = g->lora_r, IC = lin->IC, OC = lin->OC;
    float *t = g->lora_t;   /* [N, r] */
    for (int i = 0; i < lin->nlora; i++) {
        const lm_lora *a = &lin->lora[i];
        const float *A = lm_slot_f32(P, a->a), *B = lm_slot_f32(P, a->b);
        float *dA = lm_slot_grad(G, a->a), *dB = lm_slot_grad(G, a->b);
        const float *dy = dout + a->seg;   /* [N, width], row stride OC */
        g->dev->gemm(1, 0, a->width, r, N, g->lora_s, dy, OC, a->xa, r, 1.0f, dB, r);
        g->dev->gemm(0, 0, N, r, a->width, g->lora_s, dy, OC, B, r, 0.0f, t, r);
        g->dev->gemm(1, 0, r, IC, N, 1.0f, t, r, lora_input(g, a, x, N, IC), IC, 1.0f, dA, IC);
        if (!dinp) continue;
        if (!lora_dropping(g)) {
            g->dev->gemm(0, 0, N, IC, r, 1.0f, t, r, A, IC, 1.0f, dinp, IC);
            continue;
        }
        /* through the dropout: dinp += mask · (t A) / (1 - p) */
        float *u = g->lora_xd;   /* [N, IC] */
        g->dev->gemm(0, 0, N, IC, r, 1.0f, t, r, A, IC, 0.0f, u, IC);
        lora_mask(g, a, u, u, N * IC);
        g->dev->residual_forward(dinp, dinp, u, N * IC);
    }
}

/* the 16-bit storage of the tensor at slot s of P's group */
static const void *slot_w16(const dt_lm *g, const lm_params *P, lm_slot s) {
    return lm_tensor_ptr((void *)(s.set == DT_LM_SET_BASE ? P->base16 : P->w16), s.off,
                         dt_dtype_size(lm_slot_dtype(g, s)));
}

/* gemm16: the adapters' input, the stored bf16 inp [N, IC] widened into g->lora_x32 (the
 * values autocast's lora_A reads), or NULL when lin has no adapter */
static const float *lora_input16(dt_lm *g, const lm_linear *lin, const void *inp, int64_t N) {
    if (!lin->nlora) return NULL;
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->convert(g->lora_x32, DT_DTYPE_FP32, inp, g->at, (size_t)(N * lin->IC));
    lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
    return g->lora_x32;
}

int lm_linear_forward(dt_lm *g, const lm_linear *lin, const lm_params *P, float *out, const void *inp,
                      const float *inp32, int64_t N) {
    const int64_t IC = lin->IC, OC = lin->OC;
    const dt_lm_op kind = lin->kind;
    const lm_wlayout lay = lin->lay;
    const float *bias = lm_slot_f32(P, lin->b);   /* [OC] or NULL */
    const double flops = 2.0 * (double)N * (double)IC * (double)OC;
    lm_prof_mark m = lm_prof_begin(g);
    if (!g->gemm16) {
        const float *w = lm_slot_f32(P, lin->w);
        int rc = DT_OK;
        if (lm_linear_quantized(lin)) rc = lm_qbase_forward(g, lin, P, out, inp32, N);   /* QLoRA's base */
        else if (lay == LM_W_IN_OUT) g->dev->linear_forward(out, inp32, w, bias, N, IC, OC);
        else g->dev->linear_t_forward(out, inp32, w, bias, N, IC, OC);
        if (rc) return rc;
        lora_forward(g, lin, P, out, inp32, N);
        lm_prof_end(g, kind, m, flops + lora_flops(g, lin, N));
        return DT_OK;
    }
    const int wt = lay == LM_W_OUT_IN;
    const void *w = lm_linear_quantized(lin) ? NULL : slot_w16(g, P, lin->w);   /* [IC, OC] or [OC, IC] */
    float beta = 0.0f;
    if (bias) {   /* as the fp32 ops: the GEMM adds onto the broadcast bias */
        g->dev->broadcast_rows(out, bias, N, OC);
        beta = 1.0f;
    }
    /* out[N, OC] (+)= inp[N, IC] @ w (Conv1D) or w^T (nn.Linear); QLoRA's base dequantised to bf16 */
    int rc = lm_linear_quantized(lin) ? lm_qbase_forward16(g, lin, out, inp, N, beta)
                                      : g->dev->gemm_ex(0, wt, N, OC, IC, 1.0f, inp, g->at, IC, w,
                                                        lm_slot_dtype(g, lin->w), wt ? IC : OC, beta, out,
                                                        DT_DTYPE_FP32, OC);
    lm_prof_end(g, kind, m, flops);
    if (rc || !lin->nlora) return rc;
    const float *x32 = lora_input16(g, lin, inp, N);
    m = lm_prof_begin(g);
    lora_forward(g, lin, P, out, x32, N);
    lm_prof_end(g, kind, m, lora_flops(g, lin, N));
    return DT_OK;
}

int lm_linear_backward(dt_lm *g, const lm_linear *lin, const lm_params *P, float *G, float *dinp,
                       lm_dinp_mode mode, const float *dout, const void *inp, const float *inp32, int64_t N) {
    const int64_t IC = lin->IC, OC = lin->OC;
    const dt_lm_op kind = lin->kind;
    const lm_wlayout lay = lin->lay;
    const int accumulate_dinp = mode == LM_DINP_ADD;
    float *dw = lm_slot_grad(G, lin->w);     /* W's layout; NULL: frozen, no weight gradient */
    float *dbias = lm_slot_grad(G, lin->b);  /* [OC], or NULL: none or frozen */
    /* dinp (when asked) and dw (when trained): one 2 N IC OC GEMM each */
    const double gemm_flops = 2.0 * (double)N * (double)IC * (double)OC;
    const double flops = ((dinp ? 1.0 : 0.0) + (dw ? 1.0 : 0.0)) * gemm_flops;
    lm_prof_mark m = lm_prof_begin(g);
    if (!g->gemm16) {
        const float *w = lm_slot_f32(P, lin->w);
        int rc = DT_OK;
        if (lm_linear_quantized(lin)) rc = lm_qbase_backward(g, lin, G, dinp, mode, dout, N);   /* QLoRA's base */
        else if (lay == LM_W_IN_OUT)
            g->dev->linear_backward(dinp, dw, dbias, dout, inp32, w, N, IC, OC, accumulate_dinp);
        else
            g->dev->linear_t_backward(dinp, dw, dbias, dout, inp32, w, N, IC, OC, accumulate_dinp);
        if (rc) return rc;
        lora_backward(g, lin, P, G, dinp, dout, inp32, N);
        lm_prof_end(g, kind, m, flops + 2.0 * lora_flops(g, lin, N));
        return DT_OK;
    }
    const int wt = lay == LM_W_OUT_IN;
    const void *w = lm_linear_quantized(lin) ? NULL : slot_w16(g, P, lin->w);   /* [IC, OC] or [OC, IC] */
    if (dbias) g->dev->bias_backward(dbias, dout, N, OC);   /* from the fp32 gradient */
    lm_prof_end(g, kind, m, 0.0);
    /* rows of dout per bf16 chunk: all N unless OC > d16_cap / N (dt_lm_create
     * guarantees one row fits); fixed by the shapes, so recompute stays bitwise */
    int64_t rows = (int64_t)(g->d16_cap / (size_t)OC);
    if (rows > N) rows = N;
    int rc = DT_OK;
    if (lm_linear_quantized(lin)) {   /* QLoRA's base: frozen, dinp only, on the weight dequantised to bf16 */
        m = lm_prof_begin(g);
        if (dinp) rc = lm_qbase_backward16(g, lin, dinp, mode, dout, N);
        lm_prof_end(g, kind, m, flops);
    }
    /* the stored 16-bit weight's chunks (none for a quantised one) */
    for (int64_t r0 = lm_linear_quantized(lin) ? N : 0; r0 < N && !rc; r0 += rows) {
        int64_t nr = r0 + rows <= N ? rows : N - r0;
        const void *x = lm_tensor_ptr((void *)inp, (size_t)(r0 * IC), g->asz);   /* [nr, IC] */
        m = lm_prof_begin(g);
        g->dev->convert(g->d16, DT_DTYPE_BF16, dout + r0 * OC, DT_DTYPE_FP32, (size_t)(nr * OC));
        lm_prof_end(g, DT_LM_OP_CONVERT, m, 0.0);
        m = lm_prof_begin(g);
        /* dinp[nr, IC] (+)= d16[nr, OC] @ w^T (Conv1D) or w (nn.Linear) */
        if (dinp)
            rc = g->dev->gemm_ex(0, !wt, nr, IC, OC, 1.0f, g->d16, DT_DTYPE_BF16, OC, w, lm_slot_dtype(g, lin->w),
                                 wt ? IC : OC, accumulate_dinp ? 1.0f : 0.0f, dinp + r0 * IC,
                                 DT_DTYPE_FP32, IC);
        /* dw += x^T @ d16 ([IC, OC], Conv1D) or d16^T @ x ([OC, IC], nn.Linear) */
        if (!rc && !dw) {
            /* frozen weight: no weight gradient */
        } else if (!rc && wt)
            rc = g->dev->gemm_ex(1, 0, OC, IC, nr, 1.0f, g->d16, DT_DTYPE_BF16, OC, x, g->at, IC,
                                 1.0f, dw, DT_DTYPE_FP32, IC);
        else if (!rc)
            rc = g->dev->gemm_ex(1, 0, IC, OC, nr, 1.0f, x, g->at, IC, g->d16, DT_DTYPE_BF16, OC,
                                 1.0f, dw, DT_DTYPE_FP32, OC);
        lm_prof_end(g, kind, m, flops * (double)nr / (double)N);
    }
    if (rc || !lin->nlora) return rc;
    /* the adapters in fp32 on the fp32 dout and the widened input, after the base's dinp */
    const float *x32 = lora_input16(g, lin, inp, N);
    m = lm_prof_begin(g);
    lora_backward(g, lin, P, G, dinp, dout, x32, N);
    lm_prof_end(g, kind, m, 2.0 * lora_flops(g, lin, N));
    return DT_OK;
}

int lm_linear_residual(dt_lm *g, const lm_linear *lin, const lm_params *P, const void *inp, const float *inp32,
                       const float *resid, void *act, float *view, float **out) {
    const int64_t N = g->B * g->T, n = N * g->C;
    float *proj = g->dC;   /* [N, C] the projection, not saved */
    /* tensor parallelism: a row-parallel linear's partial sums, summed over the group, then
     * its bias once */
    lm_linear whole = *lin;
    if (g->tp) whole.b.off = SIZE_MAX;
    int rc = lm_linear_forward(g, &whole, P, proj, inp, inp32, N);
    if (!rc && g->tp) rc = lm_tp_row_output(g, proj, lm_slot_f32(P, lin->b), N, g->C);
    if (rc) return rc;
    float *sum = lm_act_f32(g, act, view);   /* [N, C] */
    lm_prof_mark m = lm_prof_begin(g);
    g->dev->residual_forward(sum, resid, proj, n);
    lm_prof_end(g, DT_LM_OP_RESIDUAL, m, 0.0);
    lm_act_commit(g, act, sum, (size_t)n);
    *out = sum;
    return DT_OK;
}
