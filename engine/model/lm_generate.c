/* lm_generate.c — the generator of dt_generate.h: an fp32 inference forward over rows of
 * tokens, each row (sequence s, position p) writing its key and value into s's KV cache
 * and attending to s's cache 0 .. p, so one pass serves a prefill (a prompt's rows) and a
 * decode step (one row per running sequence) alike. The blocks compute as Hugging Face
 * transformers' eager modules do (GPT2Block; LlamaDecoderLayer / Qwen2 / Qwen3), with the
 * device ops of engine/device/dt_ops.h (the same kernels dt_lm's forward uses) and the
 * RoPE tables of lm_llama.c.
 *
 * Letters: L layers, C hidden, H query heads, Hkv kv heads, D head_dim, QD = H D,
 * KVD = Hkv D, QKV = QD + 2 KVD (one row of the fused q | k | v projection), F ffn,
 * V vocab, R rows of a pass, S = max_batch, M = max_len. */
#define _GNU_SOURCE   /* qsort_r */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_finetune.h"
#include "dt_generate.h"
#include "dt_memtrack.h"
#include "dt_ops.h"
#include "lm_internal.h"

#define GEN_NAME_MAX 96
/* The tensors of a block the generator reads (both families; a family leaves some absent). */
enum {
    GB_LN1W, GB_LN1B, GB_QKV, GB_QKVB, GB_QN, GB_KN, GB_O, GB_OB, GB_LN2W, GB_LN2B, GB_W1, GB_B1, GB_W2,
    GB_B2, GB_COUNT
};
/* Outside the blocks: embeddings, learned positions (GPT-2), final norm, untied lm_head. */
enum { GT_WTE, GT_WPE, GT_NFW, GT_NFB, GT_HEAD, GT_COUNT };

/* One Hugging Face tensor's place in the generator's weights: a contiguous run of numel
 * floats at off (a fused matrix holds several: q | k | v rows, gate | up rows), its
 * layout for a LoRA merge (linear [out, in] or Conv1D [in, out]). */
typedef struct {
    char name[GEN_NAME_MAX];
    size_t off, numel;
    int conv1d;
    int64_t out, in;
    int group;
    int filled;
} gen_slot;

struct dt_gen {
    dt_model m;
    int llama;
    int64_t L, C, H, Hkv, D, QD, KVD, QKV, F, V, S, M, R;
    float *w;                       /* weights, one allocation: nw floats */
    size_t nw;
    size_t blk[GB_COUNT];           /* block 0's offsets (SIZE_MAX: absent); block l adds l * blk_stride */
    size_t blk_stride;
    size_t top[GT_COUNT];           /* SIZE_MAX: absent (tied head: the embedding) */
    gen_slot *slots;
    int nslots;
    float *kc, *vc;                 /* [S, L, M, KVD] each */
    float *rope_cos, *rope_sin;     /* [M, D/2] (llama) */
    /* scratch, [R, ...]: */
    float *x, *n, *qkv, *att, *h1, *act, *tmp, *mean, *rstd, *qkrstd;
    float *sel, *logits;            /* [S, C], [S, V] */
    float *scores;                  /* [threads, M] */
    double *prob;                   /* [V] */
    int32_t *order;                 /* [V] */
    int nthreads;
    size_t bytes;
};

/* ----------------------------------------------------------------------------
 * layout */

static size_t gen_take(size_t *off, size_t n) {
    size_t o = *off;
    *off += n;
    return o;
}

static void add_slot(dt_gen *gen, int group, const char *name, size_t off, size_t numel, int conv1d,
                     int64_t out, int64_t in) {
    gen_slot *s = &gen->slots[gen->nslots++];
    *s = (gen_slot){.off = off, .numel = numel, .conv1d = conv1d, .out = out, .in = in, .group = group};
    snprintf(s->name, sizeof s->name, "%s", name);
}

/* Block l's tensor `suffix` by the family's naming ("model.layers.3." / "h.3." + suffix) into nm. */
static const char *bname(char *nm, const dt_gen *gen, int l, const char *suffix) {
    snprintf(nm, GEN_NAME_MAX, "%s%d.%s", gen->llama ? "model.layers." : "h.", l, suffix);
    return nm;
}

/* The offsets of block 0's tensors (the fused matrices whole) and its slots' names. */
static void layout_block(dt_gen *gen, int l, size_t base, int declare) {
    const int64_t C = gen->C, QD = gen->QD, KVD = gen->KVD, F = gen->F, QKV = gen->QKV;
    size_t off = 0, *b = gen->blk;
    char nm[GEN_NAME_MAX];
    const int grp = 1 + l;
    if (declare) {
        for (int k = 0; k < GB_COUNT; k++) b[k] = SIZE_MAX;
        b[GB_LN1W] = gen_take(&off, C);
        if (!gen->llama) b[GB_LN1B] = gen_take(&off, C);
        b[GB_QKV] = gen_take(&off, (size_t)(QKV * C));
        if (!gen->llama || gen->m.qkv_bias) b[GB_QKVB] = gen_take(&off, QKV);
        if (gen->llama && gen->m.qk_norm) {
            b[GB_QN] = gen_take(&off, gen->D);
            b[GB_KN] = gen_take(&off, gen->D);
        }
        b[GB_O] = gen_take(&off, (size_t)(C * QD));
        if (!gen->llama) b[GB_OB] = gen_take(&off, C);
        b[GB_LN2W] = gen_take(&off, C);
        if (!gen->llama) b[GB_LN2B] = gen_take(&off, C);
        b[GB_W1] = gen_take(&off, (size_t)((gen->llama ? 2 : 1) * F * C));
        if (!gen->llama) b[GB_B1] = gen_take(&off, F);
        b[GB_W2] = gen_take(&off, (size_t)(C * F));
        if (!gen->llama) b[GB_B2] = gen_take(&off, C);
        gen->blk_stride = off;
        return;
    }
    if (gen->llama) {
        add_slot(gen, grp, bname(nm, gen, l, "input_layernorm.weight"), base + b[GB_LN1W], C, 0, 0, 0);
        add_slot(gen, grp, bname(nm, gen, l, "self_attn.q_proj.weight"), base + b[GB_QKV], QD * C, 0, QD, C);
        add_slot(gen, grp, bname(nm, gen, l, "self_attn.k_proj.weight"), base + b[GB_QKV] + QD * C,
                 KVD * C, 0, KVD, C);
        add_slot(gen, grp, bname(nm, gen, l, "self_attn.v_proj.weight"),
                 base + b[GB_QKV] + (QD + KVD) * C, KVD * C, 0, KVD, C);
        if (b[GB_QKVB] != SIZE_MAX) {
            add_slot(gen, grp, bname(nm, gen, l, "self_attn.q_proj.bias"), base + b[GB_QKVB], QD, 0, 0, 0);
            add_slot(gen, grp, bname(nm, gen, l, "self_attn.k_proj.bias"), base + b[GB_QKVB] + QD, KVD, 0,
                     0, 0);
            add_slot(gen, grp, bname(nm, gen, l, "self_attn.v_proj.bias"), base + b[GB_QKVB] + QD + KVD,
                     KVD, 0, 0, 0);
        }
        if (b[GB_QN] != SIZE_MAX) {
            add_slot(gen, grp, bname(nm, gen, l, "self_attn.q_norm.weight"), base + b[GB_QN], gen->D, 0, 0, 0);
            add_slot(gen, grp, bname(nm, gen, l, "self_attn.k_norm.weight"), base + b[GB_KN], gen->D, 0, 0, 0);
        }
        add_slot(gen, grp, bname(nm, gen, l, "self_attn.o_proj.weight"), base + b[GB_O], C * QD, 0, C, QD);
        add_slot(gen, grp, bname(nm, gen, l, "post_attention_layernorm.weight"), base + b[GB_LN2W], C, 0, 0,
                 0);
        add_slot(gen, grp, bname(nm, gen, l, "mlp.gate_proj.weight"), base + b[GB_W1], F * C, 0, F, C);
        add_slot(gen, grp, bname(nm, gen, l, "mlp.up_proj.weight"), base + b[GB_W1] + F * C, F * C, 0, F, C);
        add_slot(gen, grp, bname(nm, gen, l, "mlp.down_proj.weight"), base + b[GB_W2], C * F, 0, C, F);
        return;
    }
    /* GPT-2: every tensor whole in its own place; Conv1D weights [in, out] */
    const struct {
        const char *suffix;
        int kind;
        int64_t out, in;   /* a weight's shape as a linear; 0 for vectors */
    } rows[] = {{"ln_1.weight", GB_LN1W, 0, 0},       {"ln_1.bias", GB_LN1B, 0, 0},
                {"attn.c_attn.weight", GB_QKV, QKV, C}, {"attn.c_attn.bias", GB_QKVB, 0, QKV},
                {"attn.c_proj.weight", GB_O, C, QD},    {"attn.c_proj.bias", GB_OB, 0, C},
                {"ln_2.weight", GB_LN2W, 0, 0},       {"ln_2.bias", GB_LN2B, 0, 0},
                {"mlp.c_fc.weight", GB_W1, F, C},       {"mlp.c_fc.bias", GB_B1, 0, F},
                {"mlp.c_proj.weight", GB_W2, C, F},     {"mlp.c_proj.bias", GB_B2, 0, C}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const int64_t numel = rows[i].out ? rows[i].out * rows[i].in : (rows[i].in ? rows[i].in : C);
        add_slot(gen, grp, bname(nm, gen, l, rows[i].suffix), base + b[rows[i].kind], (size_t)numel, rows[i].out != 0,
                 rows[i].out, rows[i].out ? rows[i].in : 0);
    }
}

/* Offsets of every tensor in gen->w and the slots naming them; returns the floats needed. */
static size_t layout_all(dt_gen *gen) {
    const int64_t C = gen->C, V = gen->V, L = gen->L;
    size_t off = 0;
    for (int k = 0; k < GT_COUNT; k++) gen->top[k] = SIZE_MAX;
    gen->top[GT_WTE] = gen_take(&off, (size_t)(V * C));
    add_slot(gen, 0, gen->llama ? "model.embed_tokens.weight" : "wte.weight", gen->top[GT_WTE], V * C, 0, 0, 0);
    if (!gen->llama) {
        gen->top[GT_WPE] = gen_take(&off, (size_t)(gen->m.max_pos * C));
        add_slot(gen, 0, "wpe.weight", gen->top[GT_WPE], gen->m.max_pos * C, 0, 0, 0);
    }
    layout_block(gen, 0, 0, 1);
    const size_t blocks = off;
    off += (size_t)L * gen->blk_stride;
    for (int l = 0; l < L; l++) layout_block(gen, l, blocks + (size_t)l * gen->blk_stride, 0);
    for (int k = 0; k < GB_COUNT; k++)
        if (gen->blk[k] != SIZE_MAX) gen->blk[k] += blocks;
    const int last = (int)L + 1;
    gen->top[GT_NFW] = gen_take(&off, C);
    add_slot(gen, last, gen->llama ? "model.norm.weight" : "ln_f.weight", gen->top[GT_NFW], C, 0, 0, 0);
    if (!gen->llama) {
        gen->top[GT_NFB] = gen_take(&off, C);
        add_slot(gen, last, "ln_f.bias", gen->top[GT_NFB], C, 0, 0, 0);
    }
    if (!gen->m.tied_embeddings) {
        gen->top[GT_HEAD] = gen_take(&off, (size_t)(V * C));
        add_slot(gen, last, "lm_head.weight", gen->top[GT_HEAD], V * C, 0, V, C);
    }
    return off;
}

/* ----------------------------------------------------------------------------
 * create / free */

/* Every buffer through dt_memtrack (category buffers, host pool: the generator computes on
 * the CPU), so a run's tracked bytes and the planner's generator term (docs/objectives.md
 * "Memory in dtrun") count it; zero-filled as calloc. */
static void *gen_track(dt_gen *gen, size_t bytes) {
    if (!bytes) bytes = sizeof(float);
    gen->bytes += bytes;
    return dt_mem_alloc(DT_POOL_HOST, DT_MEM_BUFFERS, bytes);
}

static float *gen_alloc(dt_gen *gen, size_t n) { return gen_track(gen, n * sizeof(float)); }

int dt_gen_create(const dt_model *m, int64_t max_batch, int64_t max_len, dt_gen **out, dt_error *err) {
    *out = NULL;
    if (max_batch < 1 || max_len < 1)
        return dt_errorf(err, DT_EINVAL, "generator: batch %lld and length %lld must be >= 1", (long long)max_batch,
                         (long long)max_len);
    if (m->family == DT_FAMILY_GPT2 && max_len > m->max_pos)
        return dt_errorf(err, DT_EINVAL, "generator: %lld tokens exceed %s's %lld learned positions",
                         (long long)max_len, m->name, (long long)m->max_pos);
    int rc = lm_check_head_dim(m->head_dim, err);
    if (rc) return rc;
    dt_gen *gen = calloc(1, sizeof *gen);
    if (!gen) return dt_errorf(err, DT_ENOMEM, "out of memory for the generator");
    gen->m = *m;
    gen->llama = m->family != DT_FAMILY_GPT2;
    gen->L = m->n_layer, gen->C = m->hidden, gen->H = m->n_head, gen->Hkv = m->n_kv_head;
    gen->D = gen->llama ? m->head_dim : m->hidden / m->n_head;
    gen->QD = gen->H * gen->D, gen->KVD = gen->Hkv * gen->D, gen->QKV = gen->QD + 2 * gen->KVD;
    gen->F = m->ffn, gen->V = m->vocab, gen->S = max_batch, gen->M = max_len;
    gen->R = max_len > max_batch ? max_len : max_batch;
    gen->nthreads = omp_get_max_threads();
    gen->slots = calloc((size_t)(16 * (gen->L + 1)), sizeof *gen->slots);
    if (!gen->slots) {
        free(gen);
        return dt_errorf(err, DT_ENOMEM, "out of memory for the generator");
    }
    gen->nw = layout_all(gen);
    const int64_t R = gen->R, S = gen->S, C = gen->C;
    const size_t cache = (size_t)(S * gen->L * gen->M * gen->KVD);
    const int64_t W1 = (gen->llama ? 2 : 1) * gen->F;
    gen->w = gen_alloc(gen, gen->nw);
    gen->kc = gen_alloc(gen, cache);
    gen->vc = gen_alloc(gen, cache);
    gen->x = gen_alloc(gen, (size_t)(R * C));
    gen->n = gen_alloc(gen, (size_t)(R * C));
    gen->tmp = gen_alloc(gen, (size_t)(R * C));
    gen->qkv = gen_alloc(gen, (size_t)(R * gen->QKV));
    gen->att = gen_alloc(gen, (size_t)(R * gen->QD));
    gen->h1 = gen_alloc(gen, (size_t)(R * W1));
    gen->act = gen_alloc(gen, (size_t)(R * gen->F));
    gen->mean = gen_alloc(gen, (size_t)R);
    gen->rstd = gen_alloc(gen, (size_t)R);
    gen->qkrstd = gen_alloc(gen, (size_t)(R * (gen->H + gen->Hkv)));
    gen->sel = gen_alloc(gen, (size_t)(S * C));
    gen->logits = gen_alloc(gen, (size_t)(S * gen->V));
    gen->scores = gen_alloc(gen, (size_t)(gen->nthreads * gen->M));
    gen->prob = gen_track(gen, (size_t)gen->V * sizeof *gen->prob);
    gen->order = gen_track(gen, (size_t)gen->V * sizeof *gen->order);
    int ok = gen->w && gen->kc && gen->vc && gen->x && gen->n && gen->tmp && gen->qkv && gen->att && gen->h1 &&
             gen->act && gen->mean && gen->rstd && gen->qkrstd && gen->sel && gen->logits && gen->scores &&
             gen->prob && gen->order;
    if (ok && gen->llama) {
        const size_t half = (size_t)(gen->D / 2);
        gen->rope_cos = gen_alloc(gen, (size_t)gen->M * half);
        gen->rope_sin = gen_alloc(gen, (size_t)gen->M * half);
        ok = gen->rope_cos && gen->rope_sin;
        if (ok) lm_rope_tables(m, gen->M, gen->rope_cos, gen->rope_sin);
    }
    if (!ok) {
        dt_gen_free(gen);
        return dt_errorf(err, DT_ENOMEM, "out of memory for the generator (%zu MiB)", (gen->bytes >> 20));
    }
    *out = gen;
    return DT_OK;
}

void dt_gen_free(dt_gen *gen) {
    if (!gen) return;
    float *bufs[] = {gen->w,   gen->kc,   gen->vc,  gen->x,      gen->n,      gen->tmp,    gen->qkv,
                     gen->att, gen->h1,   gen->act, gen->mean,   gen->rstd,   gen->qkrstd, gen->sel,
                     gen->logits, gen->scores, gen->rope_cos, gen->rope_sin};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_mem_free(bufs[i]);
    dt_mem_free(gen->prob);
    dt_mem_free(gen->order);
    free(gen->slots);
    free(gen);
}

size_t dt_gen_bytes(const dt_gen *gen) { return gen->bytes; }

/* ----------------------------------------------------------------------------
 * weights from a dt_lm */

static gen_slot *find_slot(dt_gen *gen, const char *name) {
    for (int i = 0; i < gen->nslots; i++)
        if (strcmp(gen->slots[i].name, name) == 0) return &gen->slots[i];
    return NULL;
}

/* The fp32 values of tensor t of lm (trained set through its group's bound storage). */
static const float *tensor_values(dt_lm *lm, const dt_tensor_info *t) {
    if (t->set == DT_LM_SET_BASE) return (const float *)dt_lm_base_params(lm) + t->offset;
    const float *gp = dt_lm_group_params(lm, t->group);
    return gp ? gp + (t->offset - dt_lm_group_offset(lm, t->group)) : NULL;
}

/* "<module>.lora_A.weight" -> "<module>.weight" in base (NULL when name is no lora_A) */
static int lora_module(const char *name, const char *which, char *base, size_t n) {
    const char *p = strstr(name, which);
    if (!p || strcmp(p + strlen(which), ".weight") != 0) return 0;
    snprintf(base, n, "%.*s.weight", (int)(p - name), name);
    return 1;
}

/* W (slot s) += scale · B [out, r] · A [r, in], in the slot's own layout. */
static void merge_lora(dt_gen *gen, const gen_slot *s, const float *A, const float *B, int64_t r, double scale) {
    float *W = gen->w + s->off;
    if (s->conv1d)   /* W [in, out] += scale · Aᵀ [in, r] · Bᵀ [r, out] */
        dt_op_gemm(1, 1, s->in, s->out, r, (float)scale, A, s->in, B, r, 1.0f, W, s->out);
    else
        dt_op_gemm(0, 0, s->out, s->in, r, (float)scale, B, r, A, s->in, 1.0f, W, s->in);
}

/* The adapters of group `group`, merged into their linears. */
static int merge_group_adapters(dt_gen *gen, dt_lm *lm, int group, double scale, dt_error *err) {
    const int nt = dt_lm_num_tensors(lm);
    char mod[GEN_NAME_MAX + 8], bname[GEN_NAME_MAX + 8];
    for (int i = 0; i < nt; i++) {
        const dt_tensor_info *a = dt_lm_tensor(lm, i);
        if (a->group != group || !(a->flags & DT_TENSOR_ADAPTER) || !lora_module(a->name, ".lora_A", mod, sizeof mod))
            continue;
        snprintf(bname, sizeof bname, "%.*s.lora_B.weight", (int)(strlen(mod) - strlen(".weight")), mod);
        const dt_tensor_info *b = NULL;
        for (int j = 0; j < nt && !b; j++)
            if (strcmp(dt_lm_tensor(lm, j)->name, bname) == 0) b = dt_lm_tensor(lm, j);
        gen_slot *s = find_slot(gen, mod);
        if (!b || !s || s->out == 0 || b->shape[0] != s->out || a->shape[1] != s->in)
            return dt_errorf(err, DT_EINVAL, "generator: adapter %s has no matching linear of %s", a->name,
                             gen->m.name);
        merge_lora(gen, s, tensor_values(lm, a), tensor_values(lm, b), a->shape[0], scale);
    }
    return DT_OK;
}

/* Copies the tensors of one set in group `group` into their slots. */
static int copy_set(dt_gen *gen, dt_lm *lm, int group, int set, dt_error *err) {
    const int nt = set == DT_LM_SET_TRAINED ? dt_lm_num_tensors(lm) : dt_lm_num_base_tensors(lm);
    for (int i = 0; i < nt; i++) {
        const dt_tensor_info *t = set == DT_LM_SET_TRAINED ? dt_lm_tensor(lm, i) : dt_lm_base_tensor(lm, i);
        if (t->group != group || (t->flags & DT_TENSOR_ADAPTER)) continue;
        gen_slot *s = find_slot(gen, t->name);
        if (!s || s->numel != t->numel)
            return dt_errorf(err, DT_EINVAL, "generator: tensor %s of the model has no place in %s's generator",
                             t->name, gen->m.name);
        const float *v = tensor_values(lm, t);
        if (!v)
            return dt_errorf(err, DT_EINVAL, "generator: group %d of the model is not bound (gather it first)",
                             group);
        memcpy(gen->w + s->off, v, t->numel * sizeof(float));
        s->filled = 1;
    }
    return DT_OK;
}

/* QLoRA's quantised linears of group `group`, dequantised into their slots (fp32, the values
 * the training forward uses: engine/model/lm_qbase.c). */
static int copy_quant(dt_gen *gen, dt_lm *lm, int group, dt_error *err) {
    const int nq = dt_lm_num_quant_tensors(lm);
    for (int i = 0; i < nq; i++) {
        const dt_tensor_info *t = dt_lm_quant_tensor(lm, i);
        if (t->group != group) continue;
        gen_slot *s = find_slot(gen, t->name);
        if (!s || s->numel != t->numel)
            return dt_errorf(err, DT_EINVAL, "generator: tensor %s of the model has no place in %s's generator",
                             t->name, gen->m.name);
        int rc = dt_lm_quant_get(lm, i, gen->w + s->off, err);
        if (rc) return rc;
        s->filled = 1;
    }
    return DT_OK;
}

int dt_gen_load_group(dt_gen *gen, dt_lm *lm, int group, const dt_finetune *ft, int adapters, dt_error *err) {
    if (dt_lm_family(lm) != gen->m.family || dt_lm_num_groups(lm) != gen->L + 2)
        return dt_errorf(err, DT_EINVAL, "generator: the model is not %s", gen->m.name);
    int rc = copy_set(gen, lm, group, DT_LM_SET_TRAINED, err);
    if (!rc) rc = copy_set(gen, lm, group, DT_LM_SET_BASE, err);
    if (!rc) rc = copy_quant(gen, lm, group, err);
    if (!rc && adapters && ft && dt_ft_is_lora(ft)) rc = merge_group_adapters(gen, lm, group, dt_ft_lora_scale(ft), err);
    return rc;
}

int dt_gen_load(dt_gen *gen, dt_lm *lm, const dt_finetune *ft, int adapters, dt_error *err) {
    for (int i = 0; i < gen->nslots; i++) gen->slots[i].filled = 0;
    for (int grp = 0; grp < gen->L + 2; grp++) {
        int rc = dt_gen_load_group(gen, lm, grp, ft, adapters, err);
        if (rc) return rc;
    }
    for (int i = 0; i < gen->nslots; i++)
        if (!gen->slots[i].filled)
            return dt_errorf(err, DT_EINVAL, "generator: the model has no tensor %s", gen->slots[i].name);
    return DT_OK;
}

/* ----------------------------------------------------------------------------
 * the forward over rows */

/* The rows of one pass: token, sequence (its cache) and position of each. */
typedef struct {
    int64_t R;
    const int32_t *tok;
    const int64_t *seq, *pos;
} gen_rows;

static float *cache_at(const dt_gen *gen, float *c, int64_t s, int64_t l, int64_t p) {
    return c + (((size_t)s * gen->L + l) * gen->M + p) * gen->KVD;
}

/* att [R, QD]: row r's query heads against its sequence's cached keys 0 .. pos[r]
 * (softmax in fp32 with the running max, scale 1/sqrt(D), as eager attention). */
static void attend(dt_gen *gen, int64_t l, const gen_rows *rw) {
    const int64_t H = gen->H, D = gen->D, grp = gen->H / gen->Hkv;
    const float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for schedule(dynamic)
    for (int64_t rh = 0; rh < rw->R * H; rh++) {
        const int64_t r = rh / H, h = rh % H, kvh = h / grp, n = rw->pos[r] + 1;
        float *sc = gen->scores + (size_t)omp_get_thread_num() * gen->M;
        const float *q = gen->qkv + r * gen->QKV + h * D;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            const float *k = cache_at(gen, gen->kc, rw->seq[r], l, j) + kvh * D;
            float dot = 0.0f;
            for (int64_t d = 0; d < D; d++) dot += q[d] * k[d];
            sc[j] = dot * scale;
            mx = fmaxf(mx, sc[j]);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) sum += (sc[j] = expf(sc[j] - mx));
        float *o = gen->att + r * gen->QD + h * D;
        for (int64_t d = 0; d < D; d++) o[d] = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            const float *v = cache_at(gen, gen->vc, rw->seq[r], l, j) + kvh * D;
            const float p = sc[j] / sum;
            for (int64_t d = 0; d < D; d++) o[d] += p * v[d];
        }
    }
}

static const float *bw(const dt_gen *gen, int k, int64_t l) { return gen->w + gen->blk[k] + (size_t)l * gen->blk_stride; }
static const float *Wopt(const dt_gen *gen, int k, int64_t l) {
    return gen->blk[k] == SIZE_MAX ? NULL : bw(gen, k, l);
}

/* x [R, C] += tmp [R, C] (the residual add) */
static void residual(dt_gen *gen, int64_t R) {
    const int64_t n = R * gen->C;
    for (int64_t i = 0; i < n; i++) gen->x[i] += gen->tmp[i];
}

/* A linear by the family's layout: out [R, OC] = inp [R, IC] · W (+ b). */
static void linear(const dt_gen *gen, float *out, const float *inp, const float *w, const float *b, int64_t R,
                   int64_t IC, int64_t OC) {
    if (gen->llama) dt_op_linear_t_forward(out, inp, w, b, R, IC, OC);
    else dt_op_linear_forward(out, inp, w, b, R, IC, OC);
}

/* A norm of the family over rows [R, C] (LayerNorm with bias, or RMSNorm). */
static void norm(dt_gen *gen, float *out, const float *inp, const float *w, const float *b, int64_t R) {
    const float eps = (float)gen->m.norm_eps;
    if (gen->llama) dt_op_rmsnorm_forward(out, gen->rstd, inp, w, R, 1, gen->C, gen->C, eps);
    else dt_op_layernorm_forward(out, gen->mean, gen->rstd, inp, w, b, R, gen->C, eps);
}

/* q / k norm (Qwen3) and RoPE on the rows' q | k, then their k, v into the cache. */
static void position_and_cache(dt_gen *gen, int64_t l, const gen_rows *rw) {
    const int64_t R = rw->R, H = gen->H, Hkv = gen->Hkv, D = gen->D, QKV = gen->QKV;
    if (gen->llama) {
        if (gen->blk[GB_QN] != SIZE_MAX) {
            const float eps = (float)gen->m.norm_eps;
            dt_op_rmsnorm_forward(gen->qkv, gen->qkrstd, gen->qkv, bw(gen, GB_QN, l), R, H, D, QKV, eps);
            dt_op_rmsnorm_forward(gen->qkv + gen->QD, gen->qkrstd, gen->qkv + gen->QD, bw(gen, GB_KN, l), R, Hkv, D,
                                  QKV, eps);
        }
        const int64_t half = D / 2;
        for (int64_t r = 0; r < R; r++)
            dt_op_rope_forward(gen->qkv + r * QKV, gen->rope_cos + rw->pos[r] * half, gen->rope_sin + rw->pos[r] * half,
                               1, 1, H + Hkv, D, QKV);
    }
    for (int64_t r = 0; r < R; r++) {
        memcpy(cache_at(gen, gen->kc, rw->seq[r], l, rw->pos[r]), gen->qkv + r * QKV + gen->QD,
               (size_t)gen->KVD * sizeof(float));
        memcpy(cache_at(gen, gen->vc, rw->seq[r], l, rw->pos[r]), gen->qkv + r * QKV + gen->QD + gen->KVD,
               (size_t)gen->KVD * sizeof(float));
    }
}

static void block(dt_gen *gen, int64_t l, const gen_rows *rw) {
    const int64_t R = rw->R, C = gen->C, F = gen->F;
    norm(gen, gen->n, gen->x, bw(gen, GB_LN1W, l), Wopt(gen, GB_LN1B, l), R);
    linear(gen, gen->qkv, gen->n, bw(gen, GB_QKV, l), Wopt(gen, GB_QKVB, l), R, C, gen->QKV);
    position_and_cache(gen, l, rw);
    attend(gen, l, rw);
    linear(gen, gen->tmp, gen->att, bw(gen, GB_O, l), Wopt(gen, GB_OB, l), R, gen->QD, C);
    residual(gen, R);
    norm(gen, gen->n, gen->x, bw(gen, GB_LN2W, l), Wopt(gen, GB_LN2B, l), R);
    if (gen->llama) {   /* down(silu(gate(n)) * up(n)) */
        dt_op_linear_t_forward(gen->h1, gen->n, bw(gen, GB_W1, l), NULL, R, C, 2 * F);
        dt_op_swiglu_forward(gen->act, gen->h1, R, F);
    } else {            /* c_proj(gelu_new(c_fc(n))) */
        dt_op_linear_forward(gen->h1, gen->n, bw(gen, GB_W1, l), bw(gen, GB_B1, l), R, C, F);
        dt_op_gelu_forward(gen->act, gen->h1, R * F);
    }
    linear(gen, gen->tmp, gen->act, bw(gen, GB_W2, l), Wopt(gen, GB_B2, l), R, F, C);
    residual(gen, R);
}

/* One pass over rows; logits [nsel, V] of the rows sel[0 .. nsel) (gen->logits). */
static void forward_rows(dt_gen *gen, const gen_rows *rw, const int64_t *sel, int64_t nsel) {
    const int64_t C = gen->C, V = gen->V;
    const float *wte = gen->w + gen->top[GT_WTE];
    for (int64_t r = 0; r < rw->R; r++) {
        float *x = gen->x + r * C;
        memcpy(x, wte + (size_t)rw->tok[r] * C, (size_t)C * sizeof(float));
        if (!gen->llama) {
            const float *p = gen->w + gen->top[GT_WPE] + (size_t)rw->pos[r] * C;
            for (int64_t c = 0; c < C; c++) x[c] += p[c];
        }
    }
    for (int64_t l = 0; l < gen->L; l++) block(gen, l, rw);
    for (int64_t i = 0; i < nsel; i++) memcpy(gen->tmp + i * C, gen->x + sel[i] * C, (size_t)C * sizeof(float));
    const float *nfb = gen->top[GT_NFB] == SIZE_MAX ? NULL : gen->w + gen->top[GT_NFB];
    norm(gen, gen->sel, gen->tmp, gen->w + gen->top[GT_NFW], nfb, nsel);
    const float *head = gen->w + (gen->top[GT_HEAD] == SIZE_MAX ? gen->top[GT_WTE] : gen->top[GT_HEAD]);
    dt_op_linear_t_forward(gen->logits, gen->sel, head, NULL, nsel, C, V);
}

/* ----------------------------------------------------------------------------
 * choosing the next token */

static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *v = ctx;
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (v[i] != v[j]) return v[i] > v[j] ? -1 : 1;
    return (i > j) - (i < j);
}

static int32_t argmax(const float *v, int64_t V) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (v[i] > v[best]) best = i;
    return (int32_t)best;
}

/* The warped logits' probabilities into gen->prob (0: removed): HF's temperature,
 * top-k (remove < the k-th largest), then top-p (ascending order: remove while the
 * cumulative probability <= 1 - top_p, keeping the most likely). */
static void warp(dt_gen *gen, const float *logits, const dt_gen_params *p, int64_t V, float *scaled) {
    for (int64_t v = 0; v < V; v++) scaled[v] = logits[v] / (float)p->temperature;
    if (p->top_k > 0 || p->top_p < 1.0) {
        for (int64_t v = 0; v < V; v++) gen->order[v] = (int32_t)v;
        qsort_r(gen->order, (size_t)V, sizeof *gen->order, cmp_desc, scaled);
    }
    if (p->top_k > 0 && p->top_k < V) {
        const float kth = scaled[gen->order[p->top_k - 1]];
        for (int64_t v = 0; v < V; v++)
            if (scaled[v] < kth) scaled[v] = -INFINITY;
    }
    double mx = -INFINITY, sum = 0.0;
    for (int64_t v = 0; v < V; v++) mx = fmax(mx, scaled[v]);
    for (int64_t v = 0; v < V; v++) sum += (gen->prob[v] = exp((double)scaled[v] - mx));
    if (p->top_p < 1.0) {
        double cum = 0.0;
        for (int64_t i = V - 1; i > 0; i--) {   /* ascending; order[0] (the most likely) always kept */
            const int32_t v = gen->order[i];
            cum += gen->prob[v] / sum;
            if (cum <= 1.0 - p->top_p) gen->prob[v] = 0.0;
            else break;
        }
    }
}

/* Sequence i's token at its step from logits [V]. */
static int32_t choose(dt_gen *gen, const float *logits, const dt_gen_params *p, int64_t i, int64_t step,
                      float *scaled) {
    const int64_t V = p->vocab_limit > 0 && p->vocab_limit < gen->V ? p->vocab_limit : gen->V;
    if (p->temperature <= 0.0) return argmax(logits, V);
    warp(gen, logits, p, V, scaled);
    double sum = 0.0;
    for (int64_t v = 0; v < V; v++) sum += gen->prob[v];
    const uint64_t stream = lm_splitmix64_at(p->seed, p->first_stream + (uint64_t)i + 1);
    double u = lm_uniform01_at(stream, (uint64_t)step) * sum;
    int32_t last = 0;
    for (int64_t v = 0; v < V; v++) {
        if (gen->prob[v] <= 0.0) continue;
        last = (int32_t)v;
        if (u < gen->prob[v]) return (int32_t)v;
        u -= gen->prob[v];
    }
    return last;
}

static int is_eos(const dt_gen_params *p, int32_t t) {
    for (int i = 0; i < p->n_eos; i++)
        if (p->eos[i] == t) return 1;
    return 0;
}

/* ----------------------------------------------------------------------------
 * run */

static int check_run(const dt_gen *gen, const dt_gen_params *p, int64_t n, const int32_t *const *prompts,
                     const int64_t *plen, dt_error *err) {
    if (n < 1 || n > gen->S)
        return dt_errorf(err, DT_EINVAL, "generator: %lld sequences, at most %lld", (long long)n, (long long)gen->S);
    if (p->max_new_tokens < 1 || !(p->temperature >= 0.0) || p->top_k < 0 || !(p->top_p > 0.0 && p->top_p <= 1.0) ||
        p->n_eos < 0 || p->n_eos > DT_GEN_MAX_EOS || p->vocab_limit < 0)
        return dt_errorf(err, DT_EINVAL, "generator: max_new_tokens >= 1, temperature >= 0, top_k >= 0, "
                                         "0 < top_p <= 1 expected");
    for (int64_t i = 0; i < n; i++) {
        if (plen[i] < 1)
            return dt_errorf(err, DT_EINVAL, "generator: prompt %lld is empty", (long long)i);
        if (plen[i] + p->max_new_tokens > gen->M)
            return dt_errorf(err, DT_EINVAL, "generator: prompt %lld has %lld tokens; with %lld new ones that "
                             "exceeds the generator's %lld", (long long)i, (long long)plen[i],
                             (long long)p->max_new_tokens, (long long)gen->M);
        for (int64_t t = 0; t < plen[i]; t++)
            if (prompts[i][t] < 0 || prompts[i][t] >= gen->V)
                return dt_errorf(err, DT_EINVAL, "generator: prompt %lld holds token %d outside the vocabulary "
                                 "of %lld", (long long)i, prompts[i][t], (long long)gen->V);
    }
    return DT_OK;
}

/* Records sequence i's step-t token chosen from logits row lrow. */
static void emit(dt_gen *gen, const dt_gen_params *p, int64_t i, int64_t t, const float *lrow, int32_t *out,
                 int64_t *out_len, float *logits, int *done, float *scaled) {
    const int64_t V = gen->V;
    if (logits) memcpy(logits + ((size_t)i * p->max_new_tokens + t) * V, lrow, (size_t)V * sizeof(float));
    const int32_t tok = choose(gen, lrow, p, i, t, scaled);
    out[i * p->max_new_tokens + t] = tok;
    out_len[i] = t + 1;
    done[i] = is_eos(p, tok) || t + 1 == p->max_new_tokens;
}

typedef struct {
    int32_t *tok;
    int64_t *seq, *pos, *sel, *owner;
} run_buf;

/* Prefill: prompts in chunks of at most R rows, the first token of each. */
static void prefill(dt_gen *gen, const dt_gen_params *p, int64_t n, const int32_t *const *prompts,
                    const int64_t *plen, run_buf *b, int32_t *out, int64_t *out_len, float *logits, int *done,
                    float *scaled) {
    for (int64_t i0 = 0; i0 < n;) {
        int64_t R = 0, nsel = 0, i = i0;
        for (; i < n && R + plen[i] <= gen->R; i++) {
            for (int64_t t = 0; t < plen[i]; t++, R++) {
                b->tok[R] = prompts[i][t];
                b->seq[R] = i;
                b->pos[R] = t;
            }
            b->sel[nsel] = R - 1;
            b->owner[nsel++] = i;
        }
        const gen_rows rw = {R, b->tok, b->seq, b->pos};
        forward_rows(gen, &rw, b->sel, nsel);
        for (int64_t k = 0; k < nsel; k++)
            emit(gen, p, b->owner[k], 0, gen->logits + k * gen->V, out, out_len, logits, done, scaled);
        i0 = i;
    }
}

int dt_gen_run(dt_gen *gen, const dt_gen_params *p, int64_t n, const int32_t *const *prompts, const int64_t *plen,
               int32_t *out, int64_t *out_len, float *logits, dt_error *err) {
    int rc = check_run(gen, p, n, prompts, plen, err);
    if (rc) return rc;
    run_buf b = {malloc((size_t)gen->R * sizeof(int32_t)), malloc((size_t)gen->R * sizeof(int64_t)),
                 malloc((size_t)gen->R * sizeof(int64_t)), malloc((size_t)gen->R * sizeof(int64_t)),
                 malloc((size_t)gen->R * sizeof(int64_t))};
    int *done = calloc((size_t)n, sizeof *done);
    float *scaled = malloc((size_t)gen->V * sizeof *scaled);
    if (!b.tok || !b.seq || !b.pos || !b.sel || !b.owner || !done || !scaled) {
        rc = dt_errorf(err, DT_ENOMEM, "generator: out of memory for %lld sequences", (long long)n);
        goto out;
    }
    for (int64_t i = 0; i < n * p->max_new_tokens; i++) out[i] = -1;
    prefill(gen, p, n, prompts, plen, &b, out, out_len, logits, done, scaled);
    for (int64_t t = 1; t < p->max_new_tokens; t++) {
        int64_t R = 0;
        for (int64_t i = 0; i < n; i++) {
            if (done[i]) continue;
            b.tok[R] = out[i * p->max_new_tokens + t - 1];
            b.seq[R] = i;
            b.pos[R] = plen[i] + t - 1;
            b.sel[R] = R;
            b.owner[R++] = i;
        }
        if (R == 0) break;
        const gen_rows rw = {R, b.tok, b.seq, b.pos};
        forward_rows(gen, &rw, b.sel, R);
        for (int64_t k = 0; k < R; k++)
            emit(gen, p, b.owner[k], t, gen->logits + k * gen->V, out, out_len, logits, done, scaled);
    }
out:
    free(b.tok), free(b.seq), free(b.pos), free(b.sel), free(b.owner);
    free(done);
    free(scaled);
    return rc;
}
