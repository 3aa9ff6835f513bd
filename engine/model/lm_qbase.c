/* lm_qbase.c — QLoRA's quantised base (lm_internal.h "QLoRA's quantised base", dt_lm.h
 * DT_LM_SET_QUANT): the frozen linears of the blocks stored as bitsandbytes stores them and
 * dequantised per use.
 *
 * What is quantised is what transformers' bitsandbytes integration quantises
 * (integrations/bitsandbytes.py replace_with_bnb_linear: every nn.Linear / Conv1D but the
 * modules_to_not_convert, lm_head by default: quantizer_bnb_4bit.py get_modules_to_not_convert;
 * models/pgroup.c base_storage is the same rule): the weights of the blocks' linears. Embeddings,
 * norms, biases and lm_head stay in the base set, in the param dtype: fp32 with fp32 compute (what
 * PEFT's prepare_model_for_kbit_training casts every non-Params4bit parameter to, peft 0.21.2
 * utils/other.py), bf16 with bf16 compute (mixed-bf16: what transformers loads with
 * dtype=torch.bfloat16 and LLaMA-Factory trains, as it does not call prepare_model_for_kbit_training;
 * its upcast_layernorm is off by default). The bytes are bitsandbytes.functional.quantize_4bit's
 * for the weight's values in the param dtype (transformers rounds the checkpoint to the dtype it
 * loads in before Bnb4bitQuantize; bitsandbytes' default back-end quantises A.float(), so a bf16
 * checkpoint gives the same codes; engine/device/quant4.c), in the [out, in] orientation
 * bitsandbytes holds (GPT-2's Conv1D weight transposed first, as transformers' Bnb4bitQuantize does).
 *
 * Storage: one DT_MEM_PARAMS allocation of exactly dt_storage_tensor_bytes per tensor (the
 * planner's frozen-weight term, common/quant.c): every tensor's fp32 part (code book, then the
 * absmax or, double-quantised, the nested absmax, the dynamic map and the offset), then every
 * tensor's byte part (the 8-bit absmax codes when double-quantised, then the packed codes), so
 * each fp32 field is aligned. Each tensor holds its own code book and map, as the quantised
 * model transformers loads does (tests/models/golden/qlora_bytes.txt counts them per tensor).
 *
 * Use: bitsandbytes' MatMul4Bit (autograd/_functions.py) dequantises the whole weight into the
 * compute dtype for the forward GEMM (backends/default/ops.py _gemm_4bit_default_impl) and again
 * for the input gradient in backward, one weight at a time; here into one transient buffer of the
 * largest quantised weight in the compute dtype (fp32, or bf16 rounded to nearest even as
 * bitsandbytes' CPU dequantize_4bit kernel writes it; DT_MEM_BUFFERS: the planner's "dequantised
 * weight" term, planner/finetune.c), read by the fp32 GEMMs, or with bf16 compute by the linears'
 * bf16 x bf16 -> fp32 GEMMs on the stored bf16 activations (dt_lm.gemm16, as LoRA under
 * mixed-bf16: lm_layer.c), and a fused GEMM (llama's q | k, gate | up) runs as one GEMM per
 * quantised tensor onto its output columns, so the buffer never holds more than one weight.
 * bitsandbytes also materialises the double-quantised absmax (nb fp32) per use; here each
 * block's absmax is undoubled as it is used (dt_quant4_dequantize_nested), bit for bit the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_finetune.h"
#include "dt_quant.h"
#include "dt_quant4.h"
#include "lm_internal.h"

#define FP32_BYTES 4

/* where a tensor's fp32 part and byte part start in the storage (bytes) */
typedef struct {
    size_t fbyte, bbyte;
} qb_place;

struct lm_qbase {
    dt_storage fmt;            /* DT_STORAGE_NF4 or DT_STORAGE_FP4 */
    dt_dtype cdt;              /* the compute dtype: DT_DTYPE_FP32 or DT_DTYPE_BF16 */
    dt_dtype pdt;              /* the model's param dtype: the weights' values before quantising */
    int dq;                    /* double quantisation of the absmax */
    int64_t block;             /* absmax block (elements) */
    dt_ft_names skip;          /* modules kept unquantised (llm_int8_skip_modules) */
    int n, cap;
    dt_tensor_info *t;         /* [cap] */
    char (*names)[DT_TENSOR_NAME_MAX];
    qb_place *at;              /* [cap] */
    size_t voff;               /* the set's fp32-view element counter */
    size_t fbytes, bbytes;     /* the storage's two parts */
    size_t largest;            /* the largest tensor's elements */
    char *mem;                 /* [fbytes + bbytes] DT_MEM_PARAMS */
    void *buf;                 /* [largest] of cdt, DT_MEM_BUFFERS: the dequantised weight */
};

int lm_qbase_check(const dt_precision *prec, const dt_finetune *ft, dt_device device, dt_error *err) {
    if (ft->quant == DT_STORAGE_INT8)
        return dt_errorf(err, DT_EINVAL,
                         "model: QLoRA over an 8-bit base (--quant int8, bitsandbytes LLM.int8) is not built in this "
                         "engine; plan --quant nf4 or fp4 (QLoRA's 4-bit base), or run the int8 plan with PEFT + "
                         "bitsandbytes (dtplan export)");
    if (ft->quant != DT_STORAGE_NF4 && ft->quant != DT_STORAGE_FP4)
        return dt_errorf(err, DT_EINVAL, "model: QLoRA needs a 4-bit base (--quant nf4 or fp4), not %s",
                         dt_storage_name(ft->quant));
    /* bf16 compute over the mixed-bf16 model LLaMA-Factory trains (base, embeddings, norms, lm_head
     * bf16, activations bf16); fp32 compute over an fp32 model */
    if (ft->compute_dtype == DT_DTYPE_BF16 &&
        (prec->param != DT_DTYPE_BF16 || prec->activation != DT_DTYPE_BF16))
        return dt_errorf(err, DT_EINVAL,
                         "model: QLoRA with bf16 compute over %s parameters is not built in this engine (PEFT's "
                         "prepare_model_for_kbit_training upcast of the unquantised parameters); plan --precision "
                         "mixed-bf16 (the base bf16, as LLaMA-Factory loads it) or --compute-dtype fp32",
                         dt_dtype_name(prec->param));
    if (ft->upcast_unquantized && prec->param != DT_DTYPE_FP32)
        return dt_errorf(err, DT_EINVAL,
                         "model: QLoRA with PEFT's prepare_model_for_kbit_training upcast (--prepare-kbit) over %s "
                         "parameters is not built in this engine; drop --prepare-kbit (the unquantised parameters in "
                         "%s, as LLaMA-Factory loads them) or plan --precision fp32 --compute-dtype fp32",
                         dt_dtype_name(prec->param), dt_dtype_name(prec->param));
    if (ft->compute_dtype != DT_DTYPE_BF16 && ft->compute_dtype != DT_DTYPE_FP32)
        return dt_errorf(err, DT_EINVAL,
                         "model: QLoRA with %s compute (--compute-dtype %s) is not built in this engine yet; plan "
                         "--compute-dtype bf16 (with --precision mixed-bf16) or fp32",
                         dt_dtype_name(ft->compute_dtype), dt_dtype_name(ft->compute_dtype));
    if (ft->compute_dtype == DT_DTYPE_FP32 && prec->param != DT_DTYPE_FP32)
        return dt_errorf(err, DT_EINVAL,
                         "model: QLoRA with fp32 compute over %s parameters is not built in this engine; plan "
                         "--compute-dtype bf16 with --precision mixed-bf16, or --precision fp32 (the adapters and the "
                         "rest fp32 as prepare_model_for_kbit_training makes them)", dt_dtype_name(prec->param));
    if (device != DT_DEVICE_CPU)
        return dt_errorf(err, DT_EINVAL,
                         "model: QLoRA on the CUDA device is not built in this engine; plan it for the CPU "
                         "(--hardware cpu) or run it with PEFT + bitsandbytes (dtplan export)");
    return DT_OK;
}

int lm_qbase_setup(dt_lm *g, const dt_model *m, const dt_finetune *ft, dt_error *err) {
    if (!ft || ft->method != DT_FT_QLORA) return DT_OK;
    dt_model_desc desc;
    dt_model_describe(m, &desc);
    if (!g->tied && !dt_ft_names_has(&ft->quant_skip, desc.lm_head.name))
        return dt_errorf(err, DT_EINVAL,
                         "model: QLoRA with %s quantised is not built in this engine; keep it 16-bit as transformers "
                         "does by default (--quant-skip %s)", desc.lm_head.name, desc.lm_head.name);
    lm_qbase *q = calloc(1, sizeof *q);
    if (!q) return dt_errorf(err, DT_ENOMEM, "model: out of memory");
    g->qb = q;
    q->fmt = ft->quant;
    q->cdt = ft->compute_dtype;
    q->pdt = g->bt;
    q->dq = ft->double_quant != 0;
    q->block = ft->quant_block > 0 ? ft->quant_block : DT_QUANT_BLOCK;
    q->skip = ft->quant_skip;
    /* the blocks' linears, the only tensors quantised */
    q->cap = (int)m->n_layer * (desc.block.attn.n_in + 1 + desc.block.mlp.n_in + 1);
    q->t = calloc((size_t)q->cap, sizeof *q->t);
    q->names = calloc((size_t)q->cap, sizeof *q->names);
    q->at = calloc((size_t)q->cap, sizeof *q->at);
    if (!q->t || !q->names || !q->at) return dt_errorf(err, DT_ENOMEM, "model: out of memory for the quantised set");
    return DT_OK;
}

/* v as the model holds it in dtype dt (fp32, or rounded to bf16 / fp16) */
static float round_to(dt_dtype dt, float v) {
    if (dt == DT_DTYPE_BF16) return dt_bf16_to_f32(dt_f32_to_bf16(v));
    return dt == DT_DTYPE_FP16 ? dt_fp16_to_f32(dt_f32_to_fp16(v)) : v;
}

/* [rows = out, cols = in] of a weight of shape [d0, d1] in the family's layout */
static void out_in(const dt_lm *g, const dt_tensor_info *t, int64_t *rows, int64_t *cols) {
    const int in_out = g->family->weight_layout == LM_W_IN_OUT;
    *rows = in_out ? t->shape[1] : t->shape[0];
    *cols = in_out ? t->shape[0] : t->shape[1];
}

static int64_t nested_blocks(const lm_qbase *q, int64_t nb) { return q->dq ? dt_quant_blocks(nb, DT_QUANT_NESTED_BLOCK) : 0; }

/* fp32 values of a tensor's fp32 part: code book, then nested absmax + map + offset, or absmax */
static size_t f32_part(const lm_qbase *q, int64_t nb) {
    return DT_QUANT_4BIT_CODES + (q->dq ? (size_t)nested_blocks(q, nb) + DT_QUANT_DYNAMIC_CODES + 1 : (size_t)nb);
}

int lm_qbase_add(dt_lm *g, lm_layout *lo, int group, const lm_tensor_decl *d) {
    lm_qbase *q = g->qb;
    if (!q || d->adapter || d->layer < 0 || d->ndim != 2 || strcmp(d->tensor, "weight") ||
        dt_ft_names_has(&q->skip, d->module) || q->n >= q->cap)
        return 0;
    const int i = q->n++;
    dt_tensor_info *t = &q->t[i];
    snprintf(q->names[i], DT_TENSOR_NAME_MAX, "%s", d->name);
    t->name = q->names[i];
    t->group = group;
    t->set = DT_LM_SET_QUANT;
    t->offset = q->voff;
    t->full_offset = lo->foff;
    t->ndim = 2;
    t->shape[0] = d->d0;
    t->shape[1] = d->d1;
    t->numel = (size_t)(d->d0 * d->d1);
    t->flags = d->flags & ~DT_TENSOR_TRAINABLE;
    t->init = d->init;
    const int64_t n = (int64_t)t->numel, nb = dt_quant_blocks(n, q->block);
    q->at[i].fbyte = q->fbytes;
    q->at[i].bbyte = q->bbytes;
    q->fbytes += FP32_BYTES * f32_part(q, nb);
    q->bbytes += (size_t)(q->dq ? nb : 0) + (size_t)((n + 1) / 2);
    if (t->numel > q->largest) q->largest = t->numel;
    q->voff += t->numel;
    lo->foff += t->numel;
    return 1;
}

int lm_qbase_find(const dt_lm *g, int grp, const char *name, lm_slot *s) {
    const lm_qbase *q = g->qb;
    for (int i = 0; q && i < q->n; i++)
        if (q->t[i].group == grp && !strcmp(q->t[i].name, name)) {
            s->off = (size_t)i;
            s->set = DT_LM_SET_QUANT;
            return 1;
        }
    return 0;
}

int dt_lm_num_quant_tensors(const dt_lm *g) { return g->qb ? g->qb->n : 0; }
size_t dt_lm_num_quant_params(const dt_lm *g) { return g->qb ? g->qb->voff : 0; }
size_t dt_lm_quant_bytes(const dt_lm *g) { return g->qb ? g->qb->fbytes + g->qb->bbytes : 0; }

const dt_tensor_info *dt_lm_quant_tensor(const dt_lm *g, int i) {
    return g->qb && i >= 0 && i < g->qb->n ? &g->qb->t[i] : NULL;
}

int dt_lm_quant_state(dt_lm *g, int i, dt_lm_qstate *s) {
    const lm_qbase *q = g->qb;
    memset(s, 0, sizeof *s);
    if (!q || !q->mem || i < 0 || i >= q->n) return DT_EINVAL;
    s->fmt = q->fmt;
    s->double_quant = q->dq;
    s->block = q->block;
    out_in(g, &q->t[i], &s->rows, &s->cols);
    s->n = s->rows * s->cols;
    s->nb = dt_quant_blocks(s->n, q->block);
    s->nnb = nested_blocks(q, s->nb);
    float *f = (float *)(q->mem + q->at[i].fbyte);
    uint8_t *b = (uint8_t *)(q->mem + q->fbytes + q->at[i].bbyte);
    s->code = f;
    f += DT_QUANT_4BIT_CODES;
    if (q->dq) {
        s->nested_absmax = f;
        s->map = f + s->nnb;
        s->offset = s->map + DT_QUANT_DYNAMIC_CODES;
        s->qabsmax = b;
        b += s->nb;
    } else {
        s->absmax = f;
    }
    s->packed = b;
    return DT_OK;
}

int lm_qbase_alloc(dt_lm *g) {
    lm_qbase *q = g->qb;
    if (!q) return 1;
    q->mem = g->dev->alloc(DT_POOL_DEVICE, DT_MEM_PARAMS, q->fbytes + q->bbytes);
    q->buf = g->dev->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, dt_dtype_size(q->cdt) * q->largest);
    if (!q->mem || !q->buf) return 0;
    memset(q->mem, 0, q->fbytes + q->bbytes);
    for (int i = 0; i < q->n; i++) {   /* what each tensor's state holds besides its codes */
        dt_lm_qstate s;
        dt_lm_quant_state(g, i, &s);
        dt_quant4_code(q->fmt, s.code);
        if (q->dq) dt_quant_dynamic_map(s.map);
    }
    return 1;
}

void lm_qbase_free(dt_lm *g) {
    lm_qbase *q = g->qb;
    if (!q) return;
    g->dev->free(q->mem);
    g->dev->free(q->buf);
    free(q->t);
    free(q->names);
    free(q->at);
    free(q);
    g->qb = NULL;
}

int dt_lm_quant_set(dt_lm *g, int i, const float *w, dt_error *err) {
    dt_lm_qstate s;
    if (dt_lm_quant_state(g, i, &s)) return dt_errorf(err, DT_EINVAL, "model: no quantised tensor %d", i);
    const dt_storage fmt = (dt_storage)s.fmt;
    float *xt = NULL, *am = NULL;
    const float *x = w;
    const int conv1d = g->family->weight_layout == LM_W_IN_OUT, round = g->qb->pdt != DT_DTYPE_FP32;
    if (conv1d || round) {
        if (!(xt = malloc(sizeof(float) * (size_t)s.n))) return dt_errorf(err, DT_ENOMEM, "model: out of memory");
        for (int64_t r = 0; r < s.rows; r++)   /* Conv1D [in, out] -> [out, in] */
            for (int64_t c = 0; c < s.cols; c++) xt[r * s.cols + c] = conv1d ? w[c * s.rows + r] : w[r * s.cols + c];
        /* the values the model holds in its param dtype, as transformers loads them before quantising */
        for (int64_t k = 0; k < s.n && round; k++) xt[k] = round_to(g->qb->pdt, xt[k]);
        x = xt;
    }
    if (s.double_quant && !(am = malloc(sizeof(float) * (size_t)s.nb))) {
        free(xt);
        return dt_errorf(err, DT_ENOMEM, "model: out of memory");
    }
    dt_quant4_quantize(x, s.n, fmt, s.block, s.packed, s.double_quant ? am : s.absmax);
    if (s.double_quant) dt_quant4_double(am, s.nb, s.qabsmax, s.nested_absmax, s.offset);
    free(xt);
    free(am);
    return DT_OK;
}

/* tensor i dequantised into out [out, in] of dtype dt */
static void dequant_into(dt_lm *g, int i, dt_dtype dt, void *out) {
    dt_lm_qstate s;
    dt_lm_quant_state(g, i, &s);
    if (s.double_quant)
        dt_quant4_dequantize_nested_as(s.packed, s.qabsmax, s.nested_absmax, *s.offset, s.map, s.n,
                                       (dt_storage)s.fmt, s.block, dt, out);
    else
        dt_quant4_dequantize_as(s.packed, s.absmax, s.n, (dt_storage)s.fmt, s.block, dt, out);
}

/* tensor i dequantised into the transient buffer ([out, in] in the compute dtype) */
static const void *dequant(dt_lm *g, int i) {
    dequant_into(g, i, g->qb->cdt, g->qb->buf);
    return g->qb->buf;
}

int dt_lm_quant_get(dt_lm *g, int i, float *w, dt_error *err) {
    dt_lm_qstate s;
    if (dt_lm_quant_state(g, i, &s)) return dt_errorf(err, DT_EINVAL, "model: no quantised tensor %d", i);
    if (g->family->weight_layout != LM_W_IN_OUT) {
        dequant_into(g, i, DT_DTYPE_FP32, w);
        return DT_OK;
    }
    float *t = malloc(sizeof(float) * (size_t)s.n);   /* [out, in] -> Conv1D [in, out] */
    if (!t) return dt_errorf(err, DT_ENOMEM, "model: out of memory dequantising tensor %d", i);
    dequant_into(g, i, DT_DTYPE_FP32, t);
    for (int64_t r = 0; r < s.rows; r++)
        for (int64_t c = 0; c < s.cols; c++) w[c * s.rows + r] = t[r * s.cols + c];
    free(t);
    return DT_OK;
}

/* The quantised tensors lin's GEMM covers, from its first (lin->w.off) on, each [rows, IC] onto
 * output columns [col, col + rows): DT_EINTERNAL unless they tile [0, OC) exactly. */
typedef int (*seg_fn)(dt_lm *g, const lm_linear *lin, const void *w, int64_t col, int64_t rows, void *ctx);

static int each_segment(dt_lm *g, const lm_linear *lin, seg_fn fn, void *ctx) {
    const lm_qbase *q = g->qb;
    int64_t col = 0;
    for (int i = (int)lin->w.off; q && i < q->n && col < lin->OC; i++) {
        int64_t rows, cols;
        out_in(g, &q->t[i], &rows, &cols);
        if (cols != lin->IC || col + rows > lin->OC) return DT_EINTERNAL;
        int rc = fn(g, lin, dequant(g, i), col, rows, ctx);
        if (rc) return rc;
        col += rows;
    }
    return col == lin->OC ? DT_OK : DT_EINTERNAL;
}

typedef struct {
    float *y;            /* forward: out [N, OC]; backward: dinp [N, IC] */
    const void *x;       /* forward: x [N, IC]; backward: dout [N, OC] (fp32), or with bf16 compute
                            the bf16 x [N, IC] / the bf16 dout rows [N, OC] (g->d16) */
    int64_t N;
    float beta;          /* the first segment's: 0 sets, 1 adds */
} seg_args;

/* out[:, col : col + rows] (+)= x W_seg^T */
static int seg_forward(dt_lm *g, const lm_linear *lin, const void *w, int64_t col, int64_t rows, void *ctx) {
    const seg_args *a = ctx;
    g->dev->gemm(0, 1, a->N, rows, lin->IC, 1.0f, a->x, lin->IC, w, lin->IC, a->beta, a->y + col, lin->OC);
    return DT_OK;
}

/* dinp (+)= dout[:, col : col + rows] W_seg; later segments add */
static int seg_backward(dt_lm *g, const lm_linear *lin, const void *w, int64_t col, int64_t rows, void *ctx) {
    seg_args *a = ctx;
    g->dev->gemm(0, 0, a->N, lin->IC, rows, 1.0f, (const float *)a->x + col, lin->OC, w, lin->IC, a->beta, a->y,
                 lin->IC);
    a->beta = 1.0f;
    return DT_OK;
}

/* bf16 compute: out[:, col : col + rows] (+)= x W_seg^T, bf16 x bf16 -> fp32 */
static int seg_forward16(dt_lm *g, const lm_linear *lin, const void *w, int64_t col, int64_t rows, void *ctx) {
    const seg_args *a = ctx;
    return g->dev->gemm_ex(0, 1, a->N, rows, lin->IC, 1.0f, a->x, DT_DTYPE_BF16, lin->IC, w, DT_DTYPE_BF16, lin->IC,
                           a->beta, a->y + col, DT_DTYPE_FP32, lin->OC);
}

/* bf16 compute: dinp (+)= d16[:, col : col + rows] W_seg, bf16 x bf16 -> fp32; later segments add */
static int seg_backward16(dt_lm *g, const lm_linear *lin, const void *w, int64_t col, int64_t rows, void *ctx) {
    seg_args *a = ctx;
    const void *d = lm_tensor_ptr((void *)a->x, (size_t)col, sizeof(dt_bf16));   /* [N, rows] of [N, OC] */
    int rc = g->dev->gemm_ex(0, 0, a->N, lin->IC, rows, 1.0f, d, DT_DTYPE_BF16, lin->OC, w, DT_DTYPE_BF16, lin->IC,
                             a->beta, a->y, DT_DTYPE_FP32, lin->IC);
    a->beta = 1.0f;
    return rc;
}

int lm_qbase_forward(dt_lm *g, const lm_linear *lin, const lm_params *P, float *out, const float *x, int64_t N) {
    const float *bias = lm_slot_f32(P, lin->b);   /* [OC] or NULL */
    seg_args a = {out, x, N, 0.0f};
    if (bias) {   /* the GEMMs add onto the broadcast bias */
        g->dev->broadcast_rows(out, bias, N, lin->OC);
        a.beta = 1.0f;
    }
    return each_segment(g, lin, seg_forward, &a);
}

int lm_qbase_backward(dt_lm *g, const lm_linear *lin, float *G, float *dinp, lm_dinp_mode mode, const float *dout,
                      int64_t N) {
    float *dbias = lm_slot_grad(G, lin->b);   /* a trained bias; the weight is frozen */
    if (dbias) g->dev->bias_backward(dbias, dout, N, lin->OC);
    if (!dinp) return DT_OK;
    seg_args a = {dinp, dout, N, mode == LM_DINP_ADD ? 1.0f : 0.0f};
    return each_segment(g, lin, seg_backward, &a);
}

int lm_qbase_ready(const dt_lm *g, dt_error *err) {
    if (!g->qb || g->qb->cdt != DT_DTYPE_BF16 || g->gemm16) return DT_OK;
    return dt_errorf(err, DT_EINVAL,
                     "model: QLoRA with bf16 compute needs the bf16 GEMM path, which this shape cannot take (the "
                     "widest linear's row exceeds the MLP activation's scratch); plan --compute-dtype fp32 with "
                     "--precision fp32");
}

int lm_qbase_forward16(dt_lm *g, const lm_linear *lin, float *out, const void *x, int64_t N, float beta) {
    seg_args a = {out, x, N, beta};
    return each_segment(g, lin, seg_forward16, &a);
}

int lm_qbase_backward16(dt_lm *g, const lm_linear *lin, float *dinp, lm_dinp_mode mode, const float *dout,
                        int64_t N) {
    /* rows of dout per bf16 chunk, as lm_linear_backward's: all N unless OC > d16_cap / N */
    int64_t rows = (int64_t)(g->d16_cap / (size_t)lin->OC);
    if (rows > N) rows = N;
    int rc = DT_OK;
    for (int64_t r0 = 0; r0 < N && !rc; r0 += rows) {
        const int64_t nr = r0 + rows <= N ? rows : N - r0;
        g->dev->convert(g->d16, DT_DTYPE_BF16, dout + r0 * lin->OC, DT_DTYPE_FP32, (size_t)(nr * lin->OC));
        seg_args a = {dinp + r0 * lin->IC, g->d16, nr, mode == LM_DINP_ADD ? 1.0f : 0.0f};
        rc = each_segment(g, lin, seg_backward16, &a);
    }
    return rc;
}
