/* gpt2.c — the GPT-2 family on a device backend (dt_device.h): parameter layout,
 * forward, backward, activation checkpointing, 16-bit storage. See dt_gpt2.h
 * for the API and docs/engine.md for the design; docs/activations.md is the
 * list of saved tensors this file allocates (category activations).
 *
 * Dimension letters: B batch, T time, C channels, H heads, hs = C / H, F = 4C
 * (ffn), V vocab, L layers, N = B * T token rows.
 *
 * Every op, copy and allocation goes through g->dev (dt_device.h), so the same
 * code runs on the CPU (synchronous, host pointers) and on CUDA (device
 * pointers, one compute stream). Host-side work is limited to token checks and
 * the token-position chains of the 16-bit encoder backward (built on the host
 * copy of the inputs, then uploaded). */
#include "dt_gpt2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_memtrack.h"

/* ----------------------------------------------------------------------------
 * parameter layout */

/* per-block tensors, in Hugging Face order */
enum {
    P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPW, P_ATTPB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPW,
    P_FCPB, P_BLOCK_COUNT
};
static const char *const block_names[P_BLOCK_COUNT] = {
    "ln_1.weight",      "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",      "ln_2.bias",
    "mlp.c_fc.weight",  "mlp.c_fc.bias",  "mlp.c_proj.weight",  "mlp.c_proj.bias"};

#define DT_TENSOR_NAME_MAX 48

/* GPT-2 init (Radford et al. 2019 §2.3; HF GPT2PreTrainedModel._init_weights):
 * N(0, 0.02) weights, residual projections scaled by 1/sqrt(2L). */
#define DT_GPT2_INIT_STD 0.02

/* One block's saved activations (docs/activations.md). Pointers into the
 * activations allocation, act dtype unless float*. */
typedef struct {
    void *ln1;        /* [N, C] */
    float *ln1_mean;  /* [N] */
    float *ln1_rstd;  /* [N] */
    void *qkv;        /* [N, 3C] */
    float *lse;       /* [B, H, T] (flash) or NULL */
    void *probs;      /* [B, H, T, T] (materialized) or NULL */
    void *att;        /* [N, C]  attention output = c_proj input */
    void *res1;       /* [N, C]  residual after attention */
    void *ln2;        /* [N, C] */
    float *ln2_mean;  /* [N] */
    float *ln2_rstd;  /* [N] */
    void *fch;        /* [N, F]  c_fc output */
    void *gelu;       /* [N, F]  GELU output = c_proj input */
} block_acts;

/* fp32 views of one block's activations, used only when the activation dtype is
 * 16-bit (buffers). Same shapes as block_acts plus the block input x. */
typedef struct {
    float *x, *ln1, *qkv, *probs, *att, *res1, *ln2, *fch, *gelu, *xout;
} block_f32;

struct dt_gpt2 {
    const dt_device_ops *dev;   /* where storage lives and ops run */
    int64_t B, T, C, H, F, V, L, maxT, K;
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
    size_t max_group_numel;   /* largest group that is converted whole (blocks, ln_f, wpe) */

    /* storage */
    void *params, *grads;            /* flat, DT_MEM_PARAMS / DT_MEM_GRADS */
    void **gparams, **ggrads;        /* per-group bases (rebindable) */
    dt_gpt2_hooks hooks;

    /* activations (DT_MEM_ACTIVATIONS), one allocation */
    void *act_mem;
    size_t act_bytes;
    void **x;                 /* [L + 1] residual stream: x[l] block l input, x[L] ln_f input */
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
    float *dQKV;              /* [N, 3C] */
    float *dF;                /* [N, F] */
    float *pw;                /* fp32 params of the current group (16-bit params) */
    float *gw;                /* fp32 grads of the current group (16-bit grads) */
    block_f32 w32;            /* 16-bit activations only */
    int64_t vchunk;           /* classifier rows per chunk when wte is converted */
    int32_t *tok_head;        /* [V] 16-bit grads: first position of each token, or -1 */
    int32_t *tok_next;        /* [N] next position with the same token, or -1 */
    /* host copies (host pool) when the device is not host-addressable; else
     * aliases of inputs / tok_head / tok_next */
    int32_t *h_inputs, *h_tok_head, *h_tok_next;

    int have_targets;         /* last forward had targets */
};

/* ----------------------------------------------------------------------------
 * small helpers */

static void *tensor_ptr(void *base, size_t elem_off, int esz) {
    return (char *)base + elem_off * (size_t)esz;
}

/* element offset of tensor i inside its group */
static size_t in_group(const dt_gpt2 *g, int i) {
    return g->tensors[i].offset - g->group_off[g->tensors[i].group];
}

static int block_tensor(int l, int k) { return 2 + l * P_BLOCK_COUNT + k; }

/* fp32 view of an activation: the tensor itself in fp32, else its fp32 buffer */
static float *act_f32(const dt_gpt2 *g, void *act, float *view) {
    return g->at == DT_DTYPE_FP32 ? (float *)act : view;
}

/* An op wrote f32 (the view); store it in the activation's dtype and round the
 * view to exactly the stored values, so later ops see what backward will see. */
static void act_commit(const dt_gpt2 *g, void *act, float *f32, size_t n) {
    if (g->at == DT_DTYPE_FP32) return;
    g->dev->convert(act, g->at, f32, DT_DTYPE_FP32, n);
    g->dev->convert(f32, DT_DTYPE_FP32, act, g->at, n);
}

/* fp32 view of a saved activation for reading */
static const float *act_load(const dt_gpt2 *g, const void *act, float *view, size_t n) {
    if (g->at == DT_DTYPE_FP32) return act;
    g->dev->convert(view, DT_DTYPE_FP32, act, g->at, n);
    return view;
}

static int hook(const dt_gpt2 *g, int (*fn)(void *, int), int group, dt_error *err,
                const char *what) {
    if (!fn) return 0;
    int rc = fn(g->hooks.ctx, group);
    if (rc && err && err->code == DT_OK)
        dt_errorf(err, rc, "gpt2: %s hook failed for group %d", what, group);
    return rc;
}

/* fp32 parameters of a group: the bound storage itself, or converted into pw */
static float *group_params_f32(dt_gpt2 *g, int group) {
    if (g->pt == DT_DTYPE_FP32) return g->gparams[group];
    g->dev->convert(g->pw, DT_DTYPE_FP32, g->gparams[group], g->pt, g->group_numel[group]);
    return g->pw;
}

/* fp32 gradient accumulator of a group: the bound grads, or gw zeroed */
static float *group_grads_f32(dt_gpt2 *g, int group) {
    if (g->gt == DT_DTYPE_FP32) return g->ggrads[group];
    g->dev->memset0(g->gw, g->group_numel[group] * sizeof(float));
    return g->gw;
}

/* 16-bit grads: grads[off .. off+n) += acc (rounded once per element) */
static void grads_add_16(dt_gpt2 *g, int group, size_t off, const float *acc, size_t n) {
    g->dev->accumulate_16((uint16_t *)g->ggrads[group] + off, g->gt, acc, n);
}

static void group_grads_commit(dt_gpt2 *g, int group) {
    if (g->gt != DT_DTYPE_FP32) grads_add_16(g, group, 0, g->gw, g->group_numel[group]);
}

/* ----------------------------------------------------------------------------
 * create / free */

static void set_tensor(dt_gpt2 *g, int i, const char *name, int group, size_t *off, int ndim,
                       int64_t d0, int64_t d1) {
    dt_tensor_info *t = &g->tensors[i];
    snprintf(g->names[i], DT_TENSOR_NAME_MAX, "%s", name);
    t->name = g->names[i];
    t->group = group;
    t->offset = *off;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 0;
    t->numel = (size_t)(ndim == 2 ? d0 * d1 : d0);
    *off += t->numel;
}

static void build_layout(dt_gpt2 *g) {
    int64_t C = g->C, F = g->F;
    size_t off = 0;
    int i = 0;
    g->group_off[0] = off;
    set_tensor(g, i++, "wte.weight", 0, &off, 2, g->V, C);
    set_tensor(g, i++, "wpe.weight", 0, &off, 2, g->maxT, C);
    g->group_numel[0] = off - g->group_off[0];
    for (int l = 0; l < g->L; l++) {
        int grp = 1 + l;
        g->group_off[grp] = off;
        /* shapes [in, out] as HF Conv1D */
        int64_t shp[P_BLOCK_COUNT][2] = {{C, 0}, {C, 0},     {C, 3 * C}, {3 * C, 0},
                                         {C, C}, {C, 0},     {C, 0},     {C, 0},
                                         {C, F}, {F, 0},     {F, C},     {C, 0}};
        for (int k = 0; k < P_BLOCK_COUNT; k++) {
            char name[DT_TENSOR_NAME_MAX];
            snprintf(name, sizeof name, "h.%d.%s", l, block_names[k]);
            set_tensor(g, i++, name, grp, &off, shp[k][1] ? 2 : 1, shp[k][0], shp[k][1]);
        }
        g->group_numel[grp] = off - g->group_off[grp];
    }
    int last = g->L + 1;
    g->group_off[last] = off;
    set_tensor(g, i++, "ln_f.weight", last, &off, 1, C, 0);
    set_tensor(g, i++, "ln_f.bias", last, &off, 1, C, 0);
    g->group_numel[last] = off - g->group_off[last];
    g->nparams = off;
}

/* Lays out (or, with base == NULL, just measures) the saved activations. */
static size_t layout_acts(dt_gpt2 *g, char *base) {
    int64_t B = g->B, T = g->T, C = g->C, H = g->H, F = g->F, N = B * T;
    size_t a = (size_t)g->asz, off = 0;
#define TAKE(bytes) (base ? (void *)(base + (off += (bytes)) - (bytes)) : (off += (bytes), NULL))
    for (int64_t l = 0; l <= g->L; l++) g->x[l] = TAKE(a * N * C);
    int64_t nblocks = g->L - g->K + (g->K > 0 ? 1 : 0);
    for (int64_t s = 0; s < nblocks; s++) {
        /* saved blocks K..L-1 first, then the shared recompute area */
        block_acts *ba = s < g->L - g->K ? &g->blocks[g->K + s] : &g->recompute;
        ba->ln1 = TAKE(a * N * C);
        ba->ln1_mean = TAKE(sizeof(float) * N);
        ba->ln1_rstd = TAKE(sizeof(float) * N);
        ba->qkv = TAKE(a * N * 3 * C);
        if (g->attn == DT_ATTN_FLASH) ba->lse = TAKE(sizeof(float) * B * H * T);
        else ba->probs = TAKE(a * B * H * T * T);
        ba->att = TAKE(a * N * C);
        ba->res1 = TAKE(a * N * C);
        ba->ln2 = TAKE(a * N * C);
        ba->ln2_mean = TAKE(sizeof(float) * N);
        ba->ln2_rstd = TAKE(sizeof(float) * N);
        ba->fch = TAKE(a * N * F);
        ba->gelu = TAKE(a * N * F);
    }
    g->lnf = TAKE(a * N * C);
    g->lnf_mean = TAKE(sizeof(float) * N);
    g->lnf_rstd = TAKE(sizeof(float) * N);
#undef TAKE
    return off;
}

static void *buf(const dt_gpt2 *g, size_t bytes) {
    return g->dev->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, bytes);
}

int dt_gpt2_create(const dt_model *m, const dt_precision *prec, int64_t B, int64_t T,
                   int64_t ckpt_layers, dt_attention attn, dt_gpt2 **out, dt_error *err) {
    return dt_gpt2_create_on(m, prec, B, T, ckpt_layers, attn, DT_DEVICE_CPU, 0, out, err);
}

int dt_gpt2_create_on(const dt_model *m, const dt_precision *prec, int64_t B, int64_t T,
                      int64_t ckpt_layers, dt_attention attn, dt_device device, int ordinal,
                      dt_gpt2 **out, dt_error *err) {
    *out = NULL;
    const dt_device_ops *dev = NULL;
    int drc = dt_device_get(device, ordinal, &dev, err);
    if (drc) return drc;
    if (!m || !prec) return dt_errorf(err, DT_EINVAL, "gpt2: model and precision are required");
    if (m->family != DT_FAMILY_GPT2)
        return dt_errorf(err, DT_EINVAL,
                         "gpt2: model '%s' is of the %s family; this engine runs gpt2 models only",
                         m->name, dt_family_name(m->family));
    if (m->n_layer < 1 || m->hidden < 1 || m->n_head < 1 || m->vocab < 1 || m->max_pos < 1 ||
        m->ffn < 1 || m->hidden % m->n_head != 0)
        return dt_errorf(err, DT_EINVAL,
                         "gpt2: model '%s' has an invalid shape (layers %lld, hidden %lld, heads "
                         "%lld): hidden must be a positive multiple of heads",
                         m->name, (long long)m->n_layer, (long long)m->hidden,
                         (long long)m->n_head);
    if (m->hidden / m->n_head > 256)
        return dt_errorf(err, DT_EINVAL, "gpt2: head size %lld exceeds the supported 256",
                         (long long)(m->hidden / m->n_head));
    if (B < 1 || T < 1 || T > m->max_pos)
        return dt_errorf(err, DT_EINVAL,
                         "gpt2: batch %lld x sequence %lld invalid: need B >= 1 and 1 <= T <= %lld "
                         "(the model's positions)",
                         (long long)B, (long long)T, (long long)m->max_pos);
    if (ckpt_layers < 0 || ckpt_layers > m->n_layer)
        return dt_errorf(err, DT_EINVAL, "gpt2: checkpointed layers %lld outside 0..%lld",
                         (long long)ckpt_layers, (long long)m->n_layer);
    if (attn != DT_ATTN_FLASH && attn != DT_ATTN_MATERIALIZED)
        return dt_errorf(err, DT_EINVAL, "gpt2: unknown attention kind %d", (int)attn);

    dt_gpt2 *g = calloc(1, sizeof *g);
    if (!g) return dt_errorf(err, DT_ENOMEM, "gpt2: out of memory");
    g->dev = dev;
    g->B = B;
    g->T = T;
    g->C = m->hidden;
    g->H = m->n_head;
    g->F = m->ffn;
    g->V = m->vocab;
    g->L = m->n_layer;
    g->maxT = m->max_pos;
    g->K = ckpt_layers;
    g->eps = m->norm_eps > 0 ? (float)m->norm_eps : 1e-5f;   /* GPT-2 layer_norm_epsilon */
    g->attn = attn;
    g->pt = prec->param;
    g->gt = prec->grad;
    g->at = prec->activation;
    g->psz = dt_dtype_size(g->pt);
    g->gsz = dt_dtype_size(g->gt);
    g->asz = dt_dtype_size(g->at);

    g->ngroups = (int)g->L + 2;
    g->ntensors = 2 + (int)g->L * P_BLOCK_COUNT + 2;
    g->tensors = calloc((size_t)g->ntensors, sizeof *g->tensors);
    g->names = calloc((size_t)g->ntensors, sizeof *g->names);
    g->group_off = calloc((size_t)g->ngroups, sizeof(size_t));
    g->group_numel = calloc((size_t)g->ngroups, sizeof(size_t));
    g->gparams = calloc((size_t)g->ngroups, sizeof(void *));
    g->ggrads = calloc((size_t)g->ngroups, sizeof(void *));
    g->x = calloc((size_t)g->L + 1, sizeof(void *));
    g->blocks = calloc((size_t)g->L, sizeof(block_acts));
    if (!g->tensors || !g->names || !g->group_off || !g->group_numel || !g->gparams ||
        !g->ggrads || !g->x || !g->blocks) {
        dt_gpt2_free(g);
        return dt_errorf(err, DT_ENOMEM, "gpt2: out of memory for the layout tables");
    }
    build_layout(g);

    int64_t N = B * T, C = g->C, F = g->F, V = g->V;
    g->params = dev->alloc(DT_POOL_DEVICE, DT_MEM_PARAMS, g->nparams * (size_t)g->psz);
    g->grads = dev->alloc(DT_POOL_DEVICE, DT_MEM_GRADS, g->nparams * (size_t)g->gsz);
    g->act_bytes = layout_acts(g, NULL);
    g->act_mem = dev->alloc(DT_POOL_DEVICE, DT_MEM_ACTIVATIONS, g->act_bytes);
    int ok = g->params && g->grads && g->act_mem;
    if (ok) layout_acts(g, g->act_mem);
    for (int grp = 0; grp < g->ngroups; grp++) {
        g->gparams[grp] = tensor_ptr(g->params, g->group_off[grp], g->psz);
        g->ggrads[grp] = tensor_ptr(g->grads, g->group_off[grp], g->gsz);
    }

    g->logits = buf(g, sizeof(float) * N * V);
    g->ce_lse = buf(g, sizeof(float) * N);
    g->ce_losses = buf(g, sizeof(float) * N);
    g->inputs = buf(g, sizeof(int32_t) * N);
    g->targets = buf(g, sizeof(int32_t) * N);
    g->dres = buf(g, sizeof(float) * N * C);
    g->dC = buf(g, sizeof(float) * N * C);
    g->dQKV = buf(g, sizeof(float) * N * 3 * C);
    g->dF = buf(g, sizeof(float) * N * F);
    ok = ok && g->logits && g->ce_lse && g->ce_losses && g->inputs && g->targets && g->dres &&
         g->dC && g->dQKV && g->dF;

    /* groups converted whole: blocks, ln_f, wpe; wte is converted in row chunks */
    g->max_group_numel = g->group_numel[1];
    if ((size_t)(g->maxT * C) > g->max_group_numel) g->max_group_numel = (size_t)(g->maxT * C);
    g->vchunk = (int64_t)(g->max_group_numel / (size_t)C);
    if (g->vchunk > V) g->vchunk = V;
    if (g->pt != DT_DTYPE_FP32) ok = ok && (g->pw = buf(g, sizeof(float) * g->max_group_numel));
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
    if (ok && g->h_tok_head)
        for (int64_t v = 0; v < V; v++) g->h_tok_head[v] = -1;
    if (g->at != DT_DTYPE_FP32) {
        block_f32 *w = &g->w32;
        ok = ok && (w->x = buf(g, sizeof(float) * N * C)) && (w->ln1 = buf(g, sizeof(float) * N * C)) &&
             (w->qkv = buf(g, sizeof(float) * N * 3 * C)) && (w->att = buf(g, sizeof(float) * N * C)) &&
             (w->res1 = buf(g, sizeof(float) * N * C)) && (w->ln2 = buf(g, sizeof(float) * N * C)) &&
             (w->fch = buf(g, sizeof(float) * N * F)) && (w->gelu = buf(g, sizeof(float) * N * F)) &&
             (w->xout = buf(g, sizeof(float) * N * C));
        if (attn == DT_ATTN_MATERIALIZED)
            ok = ok && (w->probs = buf(g, sizeof(float) * B * g->H * T * T));
    }
    if (!ok) {
        dt_gpt2_free(g);
        return dt_errorf(err, DT_ENOMEM,
                         "gpt2: out of memory allocating %s (B=%lld, T=%lld); a smaller micro-batch "
                         "or more checkpointed layers would need less",
                         m->name, (long long)B, (long long)T);
    }
    *out = g;
    return DT_OK;
}

void dt_gpt2_free(dt_gpt2 *g) {
    if (!g) return;
    const dt_device_ops *dev = g->dev;
    if (!dev->host_addressable) {
        dev->free(g->h_inputs);
        dev->free(g->h_tok_head);
        dev->free(g->h_tok_next);
    }
    dev->free(g->params);
    dev->free(g->grads);
    dev->free(g->act_mem);
    void *bufs[] = {g->logits, g->ce_lse,   g->ce_losses, g->inputs,   g->targets,
                    g->dres,   g->dC,       g->dQKV,      g->dF,       g->pw,
                    g->gw,     g->w32.x,    g->w32.ln1,   g->w32.qkv,  g->w32.probs,
                    g->w32.att, g->w32.res1, g->w32.ln2,  g->w32.fch,  g->w32.gelu,
                    g->w32.xout, g->tok_head, g->tok_next};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev->free(bufs[i]);
    free(g->tensors);
    free(g->names);
    free(g->group_off);
    free(g->group_numel);
    free(g->gparams);
    free(g->ggrads);
    free(g->x);
    free(g->blocks);
    free(g);
}

/* ----------------------------------------------------------------------------
 * layout queries */

int dt_gpt2_num_tensors(const dt_gpt2 *g) { return g->ntensors; }
const dt_tensor_info *dt_gpt2_tensor(const dt_gpt2 *g, int i) {
    return i >= 0 && i < g->ntensors ? &g->tensors[i] : NULL;
}
int dt_gpt2_num_groups(const dt_gpt2 *g) { return g->ngroups; }
size_t dt_gpt2_group_offset(const dt_gpt2 *g, int group) {
    return group >= 0 && group < g->ngroups ? g->group_off[group] : 0;
}
size_t dt_gpt2_group_numel(const dt_gpt2 *g, int group) {
    return group >= 0 && group < g->ngroups ? g->group_numel[group] : 0;
}
size_t dt_gpt2_num_params(const dt_gpt2 *g) { return g->nparams; }
void *dt_gpt2_params(dt_gpt2 *g) { return g->params; }
void *dt_gpt2_grads(dt_gpt2 *g) { return g->grads; }
const float *dt_gpt2_logits(const dt_gpt2 *g) { return g->logits; }
size_t dt_gpt2_activation_bytes(const dt_gpt2 *g) { return g->act_bytes; }
dt_device dt_gpt2_device(const dt_gpt2 *g) { return g->dev->kind; }
const dt_device_ops *dt_gpt2_device_ops(const dt_gpt2 *g) { return g->dev; }

void dt_gpt2_set_hooks(dt_gpt2 *g, const dt_gpt2_hooks *hooks) {
    if (hooks) g->hooks = *hooks;
    else memset(&g->hooks, 0, sizeof g->hooks);
}

int dt_gpt2_bind_group(dt_gpt2 *g, int group, void *params, void *grads) {
    if (group < 0 || group >= g->ngroups) return DT_EINVAL;
    if ((!params && !g->params) || (!grads && !g->grads)) return DT_EINVAL; /* released flat buffer */
    g->gparams[group] = params ? params : tensor_ptr(g->params, g->group_off[group], g->psz);
    g->ggrads[group] = grads ? grads : tensor_ptr(g->grads, g->group_off[group], g->gsz);
    return DT_OK;
}

/* does any group still point into [base, base + bytes)? */
static int flat_in_use(void *const *ptrs, int n, const void *base, size_t bytes) {
    const char *lo = base, *hi = lo + bytes;
    for (int i = 0; i < n; i++)
        if ((const char *)ptrs[i] >= lo && (const char *)ptrs[i] < hi) return 1;
    return 0;
}

int dt_gpt2_release_flat(dt_gpt2 *g, int params, int grads, dt_error *err) {
    if (params && g->params && flat_in_use(g->gparams, g->ngroups, g->params, g->nparams * (size_t)g->psz))
        return dt_errorf(err, DT_EINVAL, "gpt2: cannot release the flat parameters while a group uses them");
    if (grads && g->grads && flat_in_use(g->ggrads, g->ngroups, g->grads, g->nparams * (size_t)g->gsz))
        return dt_errorf(err, DT_EINVAL, "gpt2: cannot release the flat gradients while a group uses them");
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

int dt_gpt2_restore_flat(dt_gpt2 *g, int params, int grads, dt_mem_category cat, dt_error *err) {
    if (params && !g->params && !(g->params = g->dev->alloc(DT_POOL_DEVICE, cat, g->nparams * (size_t)g->psz)))
        return dt_errorf(err, DT_ENOMEM, "gpt2: out of memory restoring the flat parameters (%zu elements)",
                         g->nparams);
    if (grads && !g->grads && !(g->grads = g->dev->alloc(DT_POOL_DEVICE, cat, g->nparams * (size_t)g->gsz)))
        return dt_errorf(err, DT_ENOMEM, "gpt2: out of memory restoring the flat gradients (%zu elements)",
                         g->nparams);
    return DT_OK;
}

void *dt_gpt2_group_params(dt_gpt2 *g, int group) {
    return group >= 0 && group < g->ngroups ? g->gparams[group] : NULL;
}
void *dt_gpt2_group_grads(dt_gpt2 *g, int group) {
    return group >= 0 && group < g->ngroups ? g->ggrads[group] : NULL;
}

/* ----------------------------------------------------------------------------
 * init */

/* splitmix64 (Steele, Lea, Flood 2014): a small, well-mixed 64-bit generator */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* uniform in (0, 1): 53 random bits, never 0 */
static double uniform01(uint64_t *s) { return ((double)(splitmix64(s) >> 11) + 0.5) / 9007199254740992.0; }

/* Box–Muller: one (u1, u2) pair gives two independent normals; the second is
 * kept for the next call. */
typedef struct { uint64_t s; int have; double spare; } normal_rng;
static double normal01(normal_rng *r) {
    if (r->have) {
        r->have = 0;
        return r->spare;
    }
    double u1 = uniform01(&r->s), u2 = uniform01(&r->s);
    double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
    r->spare = rad * sin(th);
    r->have = 1;
    return rad * cos(th);
}

void dt_gpt2_init_random(dt_gpt2 *g, uint64_t seed) {
    normal_rng s = {seed, 0, 0.0};
    /* drawn on the host: into the params directly, or into a host staging copy */
    size_t bytes = g->nparams * (size_t)g->psz;
    void *host = g->dev->host_addressable ? g->params
                                          : g->dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, bytes);
    if (!host) return;   /* out of host memory: params stay zero (reported by the caller's loss) */
    double proj_std = DT_GPT2_INIT_STD / sqrt(2.0 * (double)g->L);
    for (int i = 0; i < g->ntensors; i++) {
        const dt_tensor_info *t = &g->tensors[i];
        const char *nm = t->name;
        size_t len = strlen(nm);
        int is_bias = len > 5 && strcmp(nm + len - 5, ".bias") == 0;
        int is_ln = strstr(nm, "ln_") != NULL;
        int is_proj = strstr(nm, "c_proj.weight") != NULL;
        for (size_t k = 0; k < t->numel; k++) {
            float v;
            if (is_bias) v = 0.0f;
            else if (is_ln) v = 1.0f;
            else v = (float)(normal01(&s) * (is_proj ? proj_std : DT_GPT2_INIT_STD));
            dt_store(host, g->pt, t->offset + k, v);
        }
    }
    if (host != g->params) {
        g->dev->memcpy(g->params, host, bytes, DT_COPY_H2D, DT_STREAM_H2D);
        g->dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
        /* the upload is done once the compute stream passed the hand-off; a
         * pending asynchronous error stays recorded for the caller's next
         * synchronize (synchronize(NULL) would clear it unreported) */
        g->dev->stream_sync(DT_STREAM_COMPUTE);
        g->dev->free(host);
    }
}

/* ----------------------------------------------------------------------------
 * forward */

/* off[k]: element offset of block l's tensor k (P_*) inside the group's fp32 view */
static void block_offsets(const dt_gpt2 *g, int l, size_t off[P_BLOCK_COUNT]) {
    for (int k = 0; k < P_BLOCK_COUNT; k++) off[k] = in_group(g, block_tensor(l, k));
}

/* One block forward from x[l]. A: where its activations go. xout: x[l + 1], or
 * NULL when recomputing for backward (the block output is not needed then). */
static void block_forward(dt_gpt2 *g, int l, block_acts *A, void *xout, const float *P) {
    int64_t B = g->B, T = g->T, C = g->C, H = g->H, F = g->F, N = B * T;
    block_f32 *w = &g->w32;
    size_t o[P_BLOCK_COUNT];
    block_offsets(g, l, o);
    const float *x = act_load(g, g->x[l], w->x, (size_t)(N * C));

    float *ln1 = act_f32(g, A->ln1, w->ln1);
    g->dev->layernorm_forward(ln1, A->ln1_mean, A->ln1_rstd, x, P + o[P_LN1W], P + o[P_LN1B], N, C,
                            g->eps);
    act_commit(g, A->ln1, ln1, (size_t)(N * C));

    float *qkv = act_f32(g, A->qkv, w->qkv);
    g->dev->linear_forward(qkv, ln1, P + o[P_QKVW], P + o[P_QKVB], N, C, 3 * C);
    act_commit(g, A->qkv, qkv, (size_t)(N * 3 * C));

    float *att = act_f32(g, A->att, w->att);
    if (g->attn == DT_ATTN_FLASH) {
        g->dev->attention_forward_flash(att, A->lse, qkv, B, T, C, H);
    } else {
        float *probs = act_f32(g, A->probs, w->probs);
        g->dev->attention_forward_probs(att, probs, qkv, B, T, C, H);
        act_commit(g, A->probs, probs, (size_t)(B * H * T * T));
    }
    act_commit(g, A->att, att, (size_t)(N * C));

    float *proj = g->dC;   /* [N, C] c_proj output, not saved */
    g->dev->linear_forward(proj, att, P + o[P_ATTPW], P + o[P_ATTPB], N, C, C);
    float *res1 = act_f32(g, A->res1, w->res1);
    g->dev->residual_forward(res1, x, proj, N * C);
    act_commit(g, A->res1, res1, (size_t)(N * C));

    float *ln2 = act_f32(g, A->ln2, w->ln2);
    g->dev->layernorm_forward(ln2, A->ln2_mean, A->ln2_rstd, res1, P + o[P_LN2W], P + o[P_LN2B], N,
                            C, g->eps);
    act_commit(g, A->ln2, ln2, (size_t)(N * C));

    float *fch = act_f32(g, A->fch, w->fch);
    g->dev->linear_forward(fch, ln2, P + o[P_FCW], P + o[P_FCB], N, C, F);
    act_commit(g, A->fch, fch, (size_t)(N * F));
    float *gelu = act_f32(g, A->gelu, w->gelu);
    g->dev->gelu_forward(gelu, fch, N * F);
    act_commit(g, A->gelu, gelu, (size_t)(N * F));

    if (!xout) return;
    g->dev->linear_forward(proj, gelu, P + o[P_FCPW], P + o[P_FCPB], N, F, C);
    float *xo = act_f32(g, xout, w->xout);
    g->dev->residual_forward(xo, res1, proj, N * C);
    act_commit(g, xout, xo, (size_t)(N * C));
}

static block_acts *acts_of(dt_gpt2 *g, int l) { return l < g->K ? &g->recompute : &g->blocks[l]; }

/* logits[N, V] = lnf[N, C] @ wte[V, C]^T */
static void classifier_forward(dt_gpt2 *g, const float *lnf) {
    int64_t N = g->B * g->T, C = g->C, V = g->V;
    if (g->pt == DT_DTYPE_FP32) {
        g->dev->gemm(0, 1, N, V, C, 1.0f, lnf, C, g->gparams[0], C, 0.0f, g->logits, V);
        return;
    }
    for (int64_t v0 = 0; v0 < V; v0 += g->vchunk) {
        int64_t nv = v0 + g->vchunk <= V ? g->vchunk : V - v0;
        g->dev->convert(g->pw, DT_DTYPE_FP32, (const uint16_t *)g->gparams[0] + v0 * C, g->pt,
                   (size_t)(nv * C));
        g->dev->gemm(0, 1, N, nv, C, 1.0f, lnf, C, g->pw, C, 0.0f, g->logits + v0, V);
    }
}

static int check_tokens(const dt_gpt2 *g, const int32_t *tok, const char *what, dt_error *err) {
    for (int64_t n = 0; n < g->B * g->T; n++)
        if (tok[n] < 0 || tok[n] >= g->V)
            return dt_errorf(err, DT_EINVAL,
                             "gpt2: %s token %d at position %lld is outside the vocabulary 0..%lld",
                             what, tok[n], (long long)n, (long long)(g->V - 1));
    return DT_OK;
}

int dt_gpt2_forward(dt_gpt2 *g, const int32_t *inputs, const int32_t *targets, float *loss,
                    dt_error *err) {
    int64_t B = g->B, T = g->T, C = g->C, N = B * T, V = g->V;
    int rc;
    if (!inputs) return dt_errorf(err, DT_EINVAL, "gpt2: forward needs input tokens");
    if ((rc = check_tokens(g, inputs, "input", err))) return rc;
    if (targets && (rc = check_tokens(g, targets, "target", err))) return rc;
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

    /* group 0: encoder x[0] = wte[tokens] + wpe[0..T) */
    if ((rc = hook(g, g->hooks.before_forward, 0, err, "before_forward"))) return rc;
    float *x0 = act_f32(g, g->x[0], g->w32.xout);
    if (g->pt == DT_DTYPE_FP32) {
        const float *P = g->gparams[0];
        g->dev->encoder_forward(x0, g->inputs, P + in_group(g, 0), P + in_group(g, 1), B, T, C);
    } else {
        float *wpe = g->pw;
        g->dev->convert(wpe, DT_DTYPE_FP32, tensor_ptr(g->gparams[0], in_group(g, 1), g->psz),
                        g->pt, (size_t)(T * C));
        g->dev->encoder_forward_cast(x0, g->inputs, g->gparams[0], g->pt, wpe, B, T, C);
    }
    act_commit(g, g->x[0], x0, (size_t)(N * C));
    if ((rc = hook(g, g->hooks.after_forward, 0, err, "after_forward"))) return rc;

    for (int l = 0; l < g->L; l++) {
        if ((rc = hook(g, g->hooks.before_forward, 1 + l, err, "before_forward"))) return rc;
        block_forward(g, l, acts_of(g, l), g->x[l + 1], group_params_f32(g, 1 + l));
        if ((rc = hook(g, g->hooks.after_forward, 1 + l, err, "after_forward"))) return rc;
    }

    /* ln_f */
    int last = (int)g->L + 1;
    if ((rc = hook(g, g->hooks.before_forward, last, err, "before_forward"))) return rc;
    const float *P = group_params_f32(g, last);
    const float *xL = act_load(g, g->x[g->L], g->w32.x, (size_t)(N * C));
    float *lnf = act_f32(g, g->lnf, g->w32.ln1);
    g->dev->layernorm_forward(lnf, g->lnf_mean, g->lnf_rstd, xL, P, P + C, N, C, g->eps);
    act_commit(g, g->lnf, lnf, (size_t)(N * C));
    if ((rc = hook(g, g->hooks.after_forward, last, err, "after_forward"))) return rc;

    /* group 0 again: tied classifier, then the loss */
    if ((rc = hook(g, g->hooks.before_forward, 0, err, "before_forward"))) return rc;
    classifier_forward(g, lnf);
    if ((rc = hook(g, g->hooks.after_forward, 0, err, "after_forward"))) return rc;
    double mean = g->dev->crossentropy_forward(g->ce_lse, g->ce_losses, g->logits,
                                             targets ? g->targets : NULL, N, V);
    if (targets) {
        if (loss) *loss = (float)mean;
        g->have_targets = 1;
    }
    return DT_OK;
}

/* ----------------------------------------------------------------------------
 * backward */

/* Block l backward. On entry g->dres = dL/dx[l+1]; on exit dL/dx[l]. */
static void block_backward(dt_gpt2 *g, int l, const block_acts *A, const float *P, float *G) {
    int64_t B = g->B, T = g->T, C = g->C, H = g->H, F = g->F, N = B * T;
    block_f32 *w = &g->w32;
    size_t o[P_BLOCK_COUNT];
    block_offsets(g, l, o);
    const float *x = act_load(g, g->x[l], w->x, (size_t)(N * C));
    const float *ln1 = act_load(g, A->ln1, w->ln1, (size_t)(N * C));
    const float *qkv = act_load(g, A->qkv, w->qkv, (size_t)(N * 3 * C));
    const float *att = act_load(g, A->att, w->att, (size_t)(N * C));
    const float *res1 = act_load(g, A->res1, w->res1, (size_t)(N * C));
    const float *ln2 = act_load(g, A->ln2, w->ln2, (size_t)(N * C));
    const float *fch = act_load(g, A->fch, w->fch, (size_t)(N * F));
    const float *gelu = act_load(g, A->gelu, w->gelu, (size_t)(N * F));
    float *dres = g->dres, *dC = g->dC, *dF = g->dF, *dQKV = g->dQKV;

    /* MLP: x[l+1] = res1 + gelu @ Wp + bp */
    g->dev->linear_backward(dF, G + o[P_FCPW], G + o[P_FCPB], dres, gelu, P + o[P_FCPW], N, F, C, 0);
    g->dev->gelu_backward(dF, fch, dF, N * F);
    g->dev->linear_backward(dC, G + o[P_FCW], G + o[P_FCB], dF, ln2, P + o[P_FCW], N, C, F, 0);
    g->dev->layernorm_backward(dres, G + o[P_LN2W], G + o[P_LN2B], dC, res1, P + o[P_LN2W],
                             A->ln2_mean, A->ln2_rstd, N, C);
    /* attention: res1 = x + att @ Wap + bap */
    g->dev->linear_backward(dC, G + o[P_ATTPW], G + o[P_ATTPB], dres, att, P + o[P_ATTPW], N, C, C,
                          0);
    if (g->attn == DT_ATTN_FLASH) {
        g->dev->attention_backward_flash(dQKV, dC, qkv, att, A->lse, B, T, C, H);
    } else {
        const float *probs = act_load(g, A->probs, w->probs, (size_t)(B * H * T * T));
        g->dev->attention_backward_probs(dQKV, dC, qkv, probs, B, T, C, H);
    }
    g->dev->linear_backward(dC, G + o[P_QKVW], G + o[P_QKVB], dQKV, ln1, P + o[P_QKVW], N, C, 3 * C,
                          0);
    g->dev->layernorm_backward(dres, G + o[P_LN1W], G + o[P_LN1B], dC, x, P + o[P_LN1W],
                             A->ln1_mean, A->ln1_rstd, N, C);
}

/* classifier backward: dlnf[N, C] = dlogits @ wte; dwte += dlogits^T @ lnf */
static void classifier_backward(dt_gpt2 *g, const float *lnf, float *dlnf) {
    int64_t N = g->B * g->T, C = g->C, V = g->V;
    if (g->pt == DT_DTYPE_FP32 && g->gt == DT_DTYPE_FP32) {
        g->dev->gemm(0, 0, N, C, V, 1.0f, g->logits, V, g->gparams[0], C, 0.0f, dlnf, C);
        g->dev->gemm(1, 0, V, C, N, 1.0f, g->logits, V, lnf, C, 1.0f, g->ggrads[0], C);
        return;
    }
    for (int64_t v0 = 0; v0 < V; v0 += g->vchunk) {
        int64_t nv = v0 + g->vchunk <= V ? g->vchunk : V - v0;
        const float *wte;
        if (g->pt == DT_DTYPE_FP32) {
            wte = (const float *)g->gparams[0] + v0 * C;
        } else {
            g->dev->convert(g->pw, DT_DTYPE_FP32, (const uint16_t *)g->gparams[0] + v0 * C, g->pt,
                       (size_t)(nv * C));
            wte = g->pw;
        }
        g->dev->gemm(0, 0, N, C, nv, 1.0f, g->logits + v0, V, wte, C, v0 ? 1.0f : 0.0f, dlnf, C);
        if (g->gt == DT_DTYPE_FP32) {
            g->dev->gemm(1, 0, nv, C, N, 1.0f, g->logits + v0, V, lnf, C, 1.0f,
                       (float *)g->ggrads[0] + v0 * C, C);
        } else {
            g->dev->gemm(1, 0, nv, C, N, 1.0f, g->logits + v0, V, lnf, C, 0.0f, g->gw, C);
            grads_add_16(g, 0, (size_t)(v0 * C), g->gw, (size_t)(nv * C));
        }
    }
}

/* encoder backward into group 0's grads (any grad dtype) */
static void encoder_backward(dt_gpt2 *g) {
    int64_t B = g->B, T = g->T, C = g->C, N = B * T;
    if (g->gt == DT_DTYPE_FP32) {
        float *G = g->ggrads[0];
        g->dev->encoder_backward(G + in_group(g, 0), G + in_group(g, 1), g->dres, g->inputs, B, T,
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
    g->dev->encoder_backward_16(tensor_ptr(G, in_group(g, 0), g->gsz),
                                tensor_ptr(G, in_group(g, 1), g->gsz), g->gt, g->dres, g->inputs,
                                g->tok_head, g->tok_next, g->gw, B, T, C);
    /* reset the host head table for the next call, once the upload has read it */
    g->dev->stream_sync(DT_STREAM_H2D);
    for (int64_t n = 0; n < N; n++) g->h_tok_head[g->h_inputs[n]] = -1;
}

int dt_gpt2_backward(dt_gpt2 *g, float grad_scale, dt_error *err) {
    int64_t B = g->B, T = g->T, C = g->C, N = B * T, V = g->V;
    int rc;
    if (!g->have_targets)
        return dt_errorf(err, DT_EINVAL,
                         "gpt2: backward needs a preceding forward with targets");
    g->have_targets = 0;   /* the logits buffer becomes dlogits */

    /* mean loss over N tokens, times the caller's scale (1/accum, loss scale) */
    float dloss = grad_scale / (float)N;
    g->dev->crossentropy_backward_inplace(g->logits, g->ce_lse, g->targets, dloss, N, V);

    if ((rc = hook(g, g->hooks.before_backward, 0, err, "before_backward"))) return rc;
    const float *lnf = act_load(g, g->lnf, g->w32.ln1, (size_t)(N * C));
    classifier_backward(g, lnf, g->dC);

    int last = (int)g->L + 1;
    if ((rc = hook(g, g->hooks.before_backward, last, err, "before_backward"))) return rc;
    const float *P = group_params_f32(g, last);
    float *G = group_grads_f32(g, last);
    const float *xL = act_load(g, g->x[g->L], g->w32.x, (size_t)(N * C));
    g->dev->memset0(g->dres, sizeof(float) * (size_t)(N * C));
    g->dev->layernorm_backward(g->dres, G, G + C, g->dC, xL, P, g->lnf_mean, g->lnf_rstd, N, C);
    group_grads_commit(g, last);
    if ((rc = hook(g, g->hooks.after_backward, last, err, "after_backward"))) return rc;

    for (int l = (int)g->L - 1; l >= 0; l--) {
        if ((rc = hook(g, g->hooks.before_backward, 1 + l, err, "before_backward"))) return rc;
        const float *Pl = group_params_f32(g, 1 + l);
        if (l < g->K) block_forward(g, l, &g->recompute, NULL, Pl);   /* recompute */
        float *Gl = group_grads_f32(g, 1 + l);
        block_backward(g, l, acts_of(g, l), Pl, Gl);
        group_grads_commit(g, 1 + l);
        if ((rc = hook(g, g->hooks.after_backward, 1 + l, err, "after_backward"))) return rc;
    }

    encoder_backward(g);
    if ((rc = hook(g, g->hooks.after_backward, 0, err, "after_backward"))) return rc;
    return DT_OK;
}

void dt_gpt2_zero_grad(dt_gpt2 *g) {
    for (int grp = 0; grp < g->ngroups; grp++)
        g->dev->memset0(g->ggrads[grp], g->group_numel[grp] * (size_t)g->gsz);
}

/* ----------------------------------------------------------------------------
 * gradient checks */

int dt_gpt2_grads_finite(const dt_gpt2 *g) {
    for (int grp = 0; grp < g->ngroups; grp++)
        if (!g->dev->all_finite(g->ggrads[grp], g->gt, g->group_numel[grp])) return 0;
    return 1;
}

double dt_gpt2_grad_sumsq(const dt_gpt2 *g) {
    /* per group in fixed chunks (dt_devmath.h), groups in order */
    double total = 0.0;
    for (int grp = 0; grp < g->ngroups; grp++)
        total += g->dev->sumsq(g->ggrads[grp], g->gt, g->group_numel[grp]);
    return total;
}
