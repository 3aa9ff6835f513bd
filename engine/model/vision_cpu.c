/* vision_cpu.c — the CLIP vision tower's forward and the LLaVA projector on the CPU, fp32
 * (dt_vit.h). Semantics of transformers 5's CLIPVisionTransformer and LlavaMultiModalProjector:
 *   patches  the strided Conv2d (no bias) as one GEMM over the unfolded patches
 *            [n * P2, ch * p * p] (element order channel, row, column: the weight's)
 *   x0       [n, S, D] = (class_embedding | patches @ Wpᵀ) + position_embedding, S = P2 + 1
 *   h[0]     pre_layrnorm(x0)            (hidden_states[0])
 *   block    h += out_proj(attn(LN1(h))); h += fc2(quick_gelu(fc1(LN2(h))))
 *            attn: bidirectional softmax(q kᵀ / sqrt(hd)) v per head
 *   features hidden_states[select] without the class token (strategy "default")
 *   proj     linear_2(gelu(linear_1(features)))   (gelu: the erf form, ACT2FN["gelu"])
 * Blocks above the feature layer never reach the loss and are not run (their weights are held
 * for the checkpoint). The frozen tower keeps nothing for a backward; the projector keeps its
 * input, linear_1's output and the GELU's for its own; its weights are the caller's (dt_lm's
 * group 0 in a vision-language model: dt_lm_extra). */
#include "dt_vit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_memtrack.h"
#include "dt_ops.h"

/* CLIPVisionConfig.layer_norm_eps default (transformers configuration_clip.py) */
#define CLIP_LN_EPS 1e-5f
/* quick_gelu(x) = x * sigmoid(1.702 x) (transformers activations.py QuickGELUActivation) */
#define QUICK_GELU_K 1.702f
/* tensors of one CLIP block: q, k, v, out_proj (weight, bias), 2 LayerNorms, fc1, fc2 */
#define CLIP_BLOCK_TENSORS 16
/* before the blocks: class, patch, position embeddings, pre_layrnorm (weight, bias); after
 * them: post_layernorm */
#define CLIP_PRE_TENSORS 5
#define CLIP_POST_TENSORS 2
#define PROJ_TENSORS 4
/* a block's tensors in Hugging Face's order (layout_tower) */
enum { BK_KW, BK_KB, BK_VW, BK_VB, BK_QW, BK_QB, BK_OW, BK_OB, BK_LN1W, BK_LN1B, BK_FC1W, BK_FC1B, BK_FC2W, BK_FC2B,
       BK_LN2W, BK_LN2B };

struct dt_vit {
    int64_t cap, n, ch, img, p, G, P2, S, D, H, hd, F, L, used, C, tok, keep_cls;
    dt_vit_tensor *tt, pt[PROJ_TENSORS];   /* tower tensors [ntt], projector's */
    int ntt;
    size_t nt;                              /* the tower's elements */
    float *tw;                              /* the tower's params */
    /* tower scratch: patches [n*P2, ch*p*p], h [n*S, D], x [n*S, D], q k v o [n*S, D] each,
     * f [n*S, F], mean / rstd [n*S], scores [S, S] */
    float *patches, *h, *x, *q, *k, *vv, *o, *f, *mean, *rstd, *sc;
    /* projector: feat [M, D], a1 [M, C] (linear_1's output), g1 [M, C] (GELU's), d1 [M, C]
     * (backward scratch); M = n * tok */
    float *feat, *a1, *g1, *d1;
};

/* ---- the tensor table ---- */

static dt_vit_tensor *add(dt_vit_tensor *t, size_t *off, const char *name, int ndim, int64_t d0, int64_t d1,
                          int64_t d2, int64_t d3) {
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0, t->shape[1] = d1, t->shape[2] = d2, t->shape[3] = d3;
    t->numel = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1) * (size_t)(ndim > 2 ? d2 : 1) * (size_t)(ndim > 3 ? d3 : 1);
    t->offset = *off;
    t->decay = ndim >= 2;
    *off += t->numel;
    return t + 1;
}

/* a linear's weight [out, in] and bias [out] under prefix */
static dt_vit_tensor *add_linear(dt_vit_tensor *t, size_t *off, const char *prefix, int64_t out, int64_t in) {
    char n[DT_VIT_NAME_MAX];
    snprintf(n, sizeof n, "%.80s.weight", prefix);
    t = add(t, off, n, 2, out, in, 0, 0);
    snprintf(n, sizeof n, "%.80s.bias", prefix);
    return add(t, off, n, 1, out, 0, 0, 0);
}

static dt_vit_tensor *add_norm(dt_vit_tensor *t, size_t *off, const char *prefix, int64_t D) {
    char n[DT_VIT_NAME_MAX];
    snprintf(n, sizeof n, "%.80s.weight", prefix);
    t = add(t, off, n, 1, D, 0, 0, 0);
    snprintf(n, sizeof n, "%.80s.bias", prefix);
    return add(t, off, n, 1, D, 0, 0, 0);
}

/* Hugging Face's order (CLIPVisionTransformer's state dict) */
static void layout_tower(dt_vit *t) {
    size_t off = 0;
    dt_vit_tensor *p = t->tt;
    p = add(p, &off, "embeddings.class_embedding", 1, t->D, 0, 0, 0);
    p = add(p, &off, "embeddings.patch_embedding.weight", 4, t->D, t->ch, t->p, t->p);
    p = add(p, &off, "embeddings.position_embedding.weight", 2, t->S, t->D, 0, 0);
    p = add_norm(p, &off, "pre_layrnorm", t->D);
    static const char *attn[4] = {"k_proj", "v_proj", "q_proj", "out_proj"};
    for (int64_t l = 0; l < t->L; l++) {
        char n[DT_VIT_NAME_MAX];
        for (int i = 0; i < 4; i++) {
            snprintf(n, sizeof n, "encoder.layers.%lld.self_attn.%s", (long long)l, attn[i]);
            p = add_linear(p, &off, n, t->D, t->D);
        }
        snprintf(n, sizeof n, "encoder.layers.%lld.layer_norm1", (long long)l);
        p = add_norm(p, &off, n, t->D);
        snprintf(n, sizeof n, "encoder.layers.%lld.mlp.fc1", (long long)l);
        p = add_linear(p, &off, n, t->F, t->D);
        snprintf(n, sizeof n, "encoder.layers.%lld.mlp.fc2", (long long)l);
        p = add_linear(p, &off, n, t->D, t->F);
        snprintf(n, sizeof n, "encoder.layers.%lld.layer_norm2", (long long)l);
        p = add_norm(p, &off, n, t->D);
    }
    add_norm(p, &off, "post_layernorm", t->D);
    t->nt = off;
    size_t po = 0;
    add_linear(add_linear(t->pt, &po, "linear_1", t->C, t->D), &po, "linear_2", t->C, t->C);
}

static const float *tw(const dt_vit *t, int i) { return t->tw + t->tt[i].offset; }

/* ---- creation ---- */

static float *take(int64_t n, dt_mem_category cat, int *ok) {
    float *p = dt_mem_alloc(DT_POOL_HOST, cat, sizeof(float) * (size_t)n);
    if (!p) *ok = 0;
    return p;
}

int dt_vit_create(const dt_vlm *v, const dt_model *lm, int64_t n_images, dt_vit **out, dt_error *err) {
    *out = NULL;
    if (v->tower.kind != DT_VIT_CLIP)
        return dt_errorf(err, DT_EINVAL, "vision tower: dtrun's engine runs CLIP towers; a %s tower is not built yet",
                         dt_vit_kind_name(v->tower.kind));
    if (v->projector != DT_PROJ_MLP2X)
        return dt_errorf(err, DT_EINVAL, "projector: dtrun's engine runs LLaVA's mlp2x_gelu projector; %s is not "
                         "built yet", dt_projector_name(v->projector));
    int rc = dt_vlm_check(v, "vision", err);
    if (rc) return rc;
    if (n_images < 1) return dt_errorf(err, DT_EINVAL, "vision tower: %lld images per pass", (long long)n_images);
    dt_vit *t = calloc(1, sizeof *t);
    if (!t) return dt_errorf(err, DT_ENOMEM, "vision tower: out of memory");
    t->cap = t->n = n_images, t->ch = v->tower.channels, t->img = v->tower.image_size, t->p = v->tower.patch;
    t->G = t->img / t->p, t->P2 = t->G * t->G, t->S = t->P2 + 1;
    t->D = v->tower.hidden, t->H = v->tower.n_head, t->hd = t->D / t->H, t->F = v->tower.ffn;
    t->L = v->tower.n_layer, t->used = dt_vlm_used_layers(v), t->C = lm->hidden;
    t->keep_cls = v->tower.keep_cls, t->tok = dt_vlm_image_tokens(v);
    t->ntt = CLIP_PRE_TENSORS + CLIP_POST_TENSORS + CLIP_BLOCK_TENSORS * (int)t->L;
    t->tt = calloc((size_t)t->ntt, sizeof *t->tt);
    if (!t->tt) {
        dt_vit_free(t);
        return dt_errorf(err, DT_ENOMEM, "vision tower: out of memory");
    }
    layout_tower(t);
    const int64_t nS = t->n * t->S, M = t->n * t->tok;
    int ok = 1;
    t->tw = take((int64_t)t->nt, DT_MEM_PARAMS, &ok);
    t->patches = take(t->n * t->P2 * t->ch * t->p * t->p, DT_MEM_BUFFERS, &ok);
    t->h = take(nS * t->D, DT_MEM_BUFFERS, &ok);
    t->x = take(nS * t->D, DT_MEM_BUFFERS, &ok);
    t->q = take(nS * t->D, DT_MEM_BUFFERS, &ok);
    t->k = take(nS * t->D, DT_MEM_BUFFERS, &ok);
    t->vv = take(nS * t->D, DT_MEM_BUFFERS, &ok);
    t->o = take(nS * t->D, DT_MEM_BUFFERS, &ok);
    t->f = take(nS * t->F, DT_MEM_BUFFERS, &ok);
    t->mean = take(nS, DT_MEM_BUFFERS, &ok);
    t->rstd = take(nS, DT_MEM_BUFFERS, &ok);
    t->sc = take(t->S * t->S, DT_MEM_BUFFERS, &ok);
    t->feat = take(M * t->D, DT_MEM_ACTIVATIONS, &ok);
    t->a1 = take(M * t->C, DT_MEM_ACTIVATIONS, &ok);
    t->g1 = take(M * t->C, DT_MEM_ACTIVATIONS, &ok);
    t->d1 = take(M * t->C, DT_MEM_BUFFERS, &ok);
    if (!ok) {
        dt_vit_free(t);
        return dt_errorf(err, DT_ENOMEM, "vision tower: out of memory for %lld images of %lld px",
                         (long long)n_images, (long long)v->tower.image_size);
    }
    *out = t;
    return DT_OK;
}

void dt_vit_free(dt_vit *t) {
    if (!t) return;
    float *bufs[] = {t->tw, t->patches, t->h, t->x, t->q, t->k, t->vv, t->o, t->f,
                     t->mean, t->rstd, t->sc, t->feat, t->a1, t->g1, t->d1};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dt_mem_free(bufs[i]);
    free(t->tt);
    free(t);
}

int dt_vit_num_tensors(const dt_vit *t, int part) { return part == DT_VIT_TOWER ? t->ntt : PROJ_TENSORS; }
const dt_vit_tensor *dt_vit_tensor_at(const dt_vit *t, int part, int i) {
    return part == DT_VIT_TOWER ? &t->tt[i] : &t->pt[i];
}
size_t dt_vit_tower_numel(const dt_vit *t) { return t->nt; }
float *dt_vit_tower_params(dt_vit *t) { return t->tw; }
int64_t dt_vit_tokens(const dt_vit *t) { return t->tok; }
int64_t dt_vit_width(const dt_vit *t) { return t->C; }
const float *dt_vit_features(const dt_vit *t) { return t->feat; }

/* ---- the tower's forward ---- */

/* out[N, OC] = inp[N, IC] @ w[OC, IC]ᵀ + b[OC] (nn.Linear) */
static void linear(float *out, const float *inp, const float *w, const float *b, int64_t N, int64_t IC, int64_t OC) {
    dt_op_gemm(0, 1, N, OC, IC, 1.0f, inp, IC, w, IC, 0.0f, out, OC);
    if (!b) return;
    for (int64_t r = 0; r < N; r++)
        for (int64_t c = 0; c < OC; c++) out[r * OC + c] += b[c];
}

/* patches [n * P2, ch * p * p] from pixels [n, ch, img, img] */
static void unfold(const dt_vit *t, const float *px, float *pat) {
    const int64_t K = t->ch * t->p * t->p;
    for (int64_t i = 0; i < t->n; i++)
        for (int64_t gy = 0; gy < t->G; gy++)
            for (int64_t gx = 0; gx < t->G; gx++) {
                float *row = pat + ((i * t->P2) + gy * t->G + gx) * K;
                for (int64_t c = 0; c < t->ch; c++)
                    for (int64_t y = 0; y < t->p; y++)
                        memcpy(row + (c * t->p + y) * t->p,
                               px + ((i * t->ch + c) * t->img + gy * t->p + y) * t->img + gx * t->p,
                               sizeof(float) * (size_t)t->p);
            }
}

/* h [n, S, D] = pre_layrnorm(class | patch embeddings + positions) */
static void embed(dt_vit *t, const float *px) {
    const int64_t D = t->D, K = t->ch * t->p * t->p;
    unfold(t, px, t->patches);
    dt_op_gemm(0, 1, t->n * t->P2, D, K, 1.0f, t->patches, K, tw(t, 1), K, 0.0f, t->o, D);   /* [n*P2, D] */
    const float *cls = tw(t, 0), *pos = tw(t, 2);
    for (int64_t i = 0; i < t->n; i++)
        for (int64_t s = 0; s < t->S; s++) {
            float *x = t->x + (i * t->S + s) * D;
            const float *e = s == 0 ? cls : t->o + (i * t->P2 + s - 1) * D;
            for (int64_t d = 0; d < D; d++) x[d] = e[d] + pos[s * D + d];
        }
    dt_op_layernorm_forward(t->h, t->mean, t->rstd, t->x, tw(t, 3), tw(t, 4), t->n * t->S, D, CLIP_LN_EPS);
}

/* o [n*S, D] = softmax(q kᵀ / sqrt(hd)) v per image and head, every token seeing every token */
static void attention(dt_vit *t) {
    const int64_t S = t->S, D = t->D, hd = t->hd;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t i = 0; i < t->n; i++)
        for (int64_t hh = 0; hh < t->H; hh++) {
            const size_t at = (size_t)(i * S * D + hh * hd);
            dt_op_gemm(0, 1, S, S, hd, scale, t->q + at, D, t->k + at, D, 0.0f, t->sc, S);   /* [S, S] */
            for (int64_t r = 0; r < S; r++) {
                float *row = t->sc + r * S, mx = row[0];
                for (int64_t c = 1; c < S; c++) mx = row[c] > mx ? row[c] : mx;
                double sum = 0.0;
                for (int64_t c = 0; c < S; c++) sum += (row[c] = expf(row[c] - mx));
                const float inv = (float)(1.0 / sum);
                for (int64_t c = 0; c < S; c++) row[c] *= inv;
            }
            dt_op_gemm(0, 0, S, hd, S, 1.0f, t->sc, S, t->vv + at, D, 0.0f, t->o + at, D);
        }
}

/* block l on h in place */
static void block(dt_vit *t, int64_t l) {
    const int base = CLIP_PRE_TENSORS + CLIP_BLOCK_TENSORS * (int)l;
    const int64_t N = t->n * t->S, D = t->D, F = t->F;
    dt_op_layernorm_forward(t->x, t->mean, t->rstd, t->h, tw(t, base + BK_LN1W), tw(t, base + BK_LN1B), N, D, CLIP_LN_EPS);
    linear(t->k, t->x, tw(t, base + BK_KW), tw(t, base + BK_KB), N, D, D);
    linear(t->vv, t->x, tw(t, base + BK_VW), tw(t, base + BK_VB), N, D, D);
    linear(t->q, t->x, tw(t, base + BK_QW), tw(t, base + BK_QB), N, D, D);
    attention(t);
    linear(t->x, t->o, tw(t, base + BK_OW), tw(t, base + BK_OB), N, D, D);
    for (int64_t e = 0; e < N * D; e++) t->h[e] += t->x[e];
    dt_op_layernorm_forward(t->x, t->mean, t->rstd, t->h, tw(t, base + BK_LN2W), tw(t, base + BK_LN2B), N, D, CLIP_LN_EPS);
    linear(t->f, t->x, tw(t, base + BK_FC1W), tw(t, base + BK_FC1B), N, D, F);
    for (int64_t e = 0; e < N * F; e++) t->f[e] = t->f[e] / (1.0f + expf(-QUICK_GELU_K * t->f[e]));
    linear(t->x, t->f, tw(t, base + BK_FC2W), tw(t, base + BK_FC2B), N, F, D);
    for (int64_t e = 0; e < N * D; e++) t->h[e] += t->x[e];
}

/* ---- the projector ---- */

/* gelu(x) = x Φ(x) = 0.5 x (1 + erf(x / sqrt 2)) and its derivative Φ(x) + x φ(x) */
static float gelu(float x) { return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2)); }
static float gelu_grad(float x) {
    const float cdf = 0.5f * (1.0f + erff(x * (float)M_SQRT1_2));
    return cdf + x * expf(-0.5f * x * x) * (float)(0.5 * M_2_SQRTPI * M_SQRT1_2);
}

int dt_vit_tower_forward(dt_vit *t, const float *pixels, int64_t n, dt_error *err) {
    if (n < 0 || n > t->cap || (n && !pixels))
        return dt_errorf(err, DT_EINVAL, "vision tower: %lld images for a pass of at most %lld", (long long)n,
                         (long long)t->cap);
    t->n = n;   /* this pass's images (the scratch holds cap) */
    if (!n) return DT_OK;
    embed(t, pixels);
    for (int64_t l = 0; l < t->used; l++) block(t, l);
    const int64_t D = t->D, skip = t->keep_cls ? 0 : 1;
    for (int64_t i = 0; i < t->n; i++)
        memcpy(t->feat + i * t->tok * D, t->h + (i * t->S + skip) * D, sizeof(float) * (size_t)(t->tok * D));
    return DT_OK;
}

/* the projector's tensors in dt_vit_tensor_at's order */
enum { PJ_W1, PJ_B1, PJ_W2, PJ_B2 };

void dt_vit_project(dt_vit *t, const float *const w[4], float *embeds) {
    const int64_t D = t->D, C = t->C, M = t->n * t->tok;
    if (!M) return;
    linear(t->a1, t->feat, w[PJ_W1], w[PJ_B1], M, D, C);
    for (int64_t e = 0; e < M * C; e++) t->g1[e] = gelu(t->a1[e]);
    linear(embeds, t->g1, w[PJ_W2], w[PJ_B2], M, C, C);
}

/* dw[OC, IC] += dout[N, OC]ᵀ @ inp[N, IC]; db[OC] += Σ_n dout (rows in order) */
static void linear_wgrad(float *dw, float *db, const float *dout, const float *inp, int64_t N, int64_t IC,
                         int64_t OC) {
    dt_op_gemm(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
    for (int64_t r = 0; r < N; r++)
        for (int64_t c = 0; c < OC; c++) db[c] += dout[r * OC + c];
}

void dt_vit_project_backward(dt_vit *t, const float *const w[4], float *const g[4], const float *dembeds) {
    const int64_t D = t->D, C = t->C, M = t->n * t->tok;
    if (!M) return;
    linear_wgrad(g[PJ_W2], g[PJ_B2], dembeds, t->g1, M, C, C);
    dt_op_gemm(0, 0, M, C, C, 1.0f, dembeds, C, w[PJ_W2], C, 0.0f, t->d1, C);   /* d g1 [M, C] */
    for (int64_t e = 0; e < M * C; e++) t->d1[e] *= gelu_grad(t->a1[e]);
    linear_wgrad(g[PJ_W1], g[PJ_B1], t->d1, t->feat, M, D, C);
}
