/* test_gpu_llama_ops.c — the CUDA device's llama-family ops against the CPU
 * device's (dt_ops.h "the llama family"; needs a GPU, exits 77 without one):
 * linear_t, RMSNorm (whole rows and per-head groups inside packed rows, in
 * place), RoPE, SwiGLU, grouped-query attention (flash and materialized, packed
 * and separate strided q / k / v; Hq = 4 / Hkv = 2 at D = 64 and 128 with
 * T = 300 over several tiles, plus odd head sizes, D = 256 and plain MHA), and
 * the encoder without learned positions (wpe / dwpe NULL). Then bitwise
 * run-to-run determinism of the RMSNorm weight gradient and of the attention
 * backward (dq, dk, dv), and the one-line errors for shapes outside the
 * contract.
 *
 * Tolerances, relative to max(1, the CPU output's largest magnitude)
 * (docs/cuda.md "GPU tests"):
 *   TOL_F32     1e-5  fp32 ops: sums in another order, FMA contraction differs
 *                     (linear_t, RMSNorm, RoPE, SwiGLU, attention forward, lse,
 *                     probabilities);
 *   TOL_ATT_BWD 1e-4  attention backward: reductions over up to T keys / queries
 *                     and the group's heads, p recomputed from lse;
 *   TOL_LONG_SUM 1e-4 the RMSNorm dw over 70,000 rows: the CPU's sequential fp32
 *                     sum alone is off by ~ eps sigma n / sqrt(2) ~ 2e-3 of a
 *                     column's ~400 (a few 1e-6), the GPU's chunked sum less;
 *   exact             the encoder without positions (the same sums in the same
 *                     order) and every determinism check (memcmp). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_test.h"
#include "gpu_test_util.h"

#define TOL_F32 1e-5
#define TOL_ATT_BWD 1e-4
#define TOL_LONG_SUM 1e-4
#define TOL_EXACT 0.0
/* RMSNorm epsilon (Llama's rms_norm_eps) and the RoPE base (Llama's rope_theta) */
#define RMS_EPS 1e-5f
#define ROPE_THETA 10000.0
/* rows of the large RMSNorm determinism case: more than 256 chunks of 256
 * rows, so the CUDA column sum uses its longer chunks */
#define RMS_DET_ROWS 70000

static float *copyf(const float *x, size_t n) {
    float *y = malloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}


/* two device arrays bitwise equal (run-to-run determinism) */
static void same_bits(const char *what, const void *dev_a, const void *dev_b, size_t bytes) {
    void *a = down(dev_a, bytes), *b = down(dev_b, bytes);
    int same = memcmp(a, b, bytes) == 0;
    printf("%-44s %s\n", what, same ? "bitwise equal" : "DIFFERS");
    if (!same) fprintf(stderr, "%s: two runs differ\n", what);
    CHECK(same);
    free(a);
    free(b);
}

/* ---------------------------------------------------------------------------- */

static void test_linear_t(void) {
    const int64_t N = 600, IC = 80, OC = 112;   /* N > 256: several column-sum chunks */
    float *x = rnd(N * IC, -2, 2);              /* [N, IC] */
    float *w = rnd(OC * IC, -0.5f, 0.5f);       /* [OC, IC] (nn.Linear) */
    float *bias = rnd(OC, -1, 1);               /* [OC] */
    float *dout = rnd(N * OC, -1, 1);           /* [N, OC] */
    float *out = rnd(N * OC, -1, 1);            /* [N, OC] */
    float *dinp = rnd(N * IC, -1, 1);           /* [N, IC] */
    float *dw = rnd(OC * IC, -1, 1);            /* [OC, IC] */
    float *db = rnd(OC, -1, 1);                 /* [OC] */
    float *gx = up(x, N * IC * 4), *gw = up(w, OC * IC * 4), *gbias = up(bias, OC * 4);
    float *gdout = up(dout, N * OC * 4), *gout = up(out, N * OC * 4);
    float *gdinp = up(dinp, N * IC * 4), *gdw = up(dw, OC * IC * 4), *gdb = up(db, OC * 4);

    cpu->linear_t_forward(out, x, w, bias, N, IC, OC);
    gpu->linear_t_forward(gout, gx, gw, gbias, N, IC, OC);
    cmp("linear_t_forward (bias)", out, gout, (size_t)(N * OC), TOL_F32);
    cpu->linear_t_forward(out, x, w, NULL, N, IC, OC);
    gpu->linear_t_forward(gout, gx, gw, NULL, N, IC, OC);
    cmp("linear_t_forward (no bias)", out, gout, (size_t)(N * OC), TOL_F32);

    cpu->linear_t_backward(dinp, dw, db, dout, x, w, N, IC, OC, 1);
    gpu->linear_t_backward(gdinp, gdw, gdb, gdout, gx, gw, N, IC, OC, 1);
    cmp("linear_t_backward dinp (+=)", dinp, gdinp, (size_t)(N * IC), TOL_F32);
    cmp("linear_t_backward dw (+=)", dw, gdw, (size_t)(OC * IC), TOL_F32);
    cmp("linear_t_backward dbias (+=)", db, gdb, (size_t)OC, TOL_F32);
    cpu->linear_t_backward(dinp, dw, NULL, dout, x, w, N, IC, OC, 0);
    gpu->linear_t_backward(gdinp, gdw, NULL, gdout, gx, gw, N, IC, OC, 0);
    cmp("linear_t_backward dinp (=), no dbias", dinp, gdinp, (size_t)(N * IC), TOL_F32);
    cmp("linear_t_backward dw, second pass", dw, gdw, (size_t)(OC * IC), TOL_F32);
    cpu->linear_t_backward(NULL, dw, db, dout, x, w, N, IC, OC, 0);
    gpu->linear_t_backward(NULL, gdw, gdb, gdout, gx, gw, N, IC, OC, 0);
    cmp("linear_t_backward dw (dinp NULL)", dw, gdw, (size_t)(OC * IC), TOL_F32);
    cmp("linear_t_backward dbias (dinp NULL)", db, gdb, (size_t)OC, TOL_F32);

    float *bufs[] = {x, w, bias, dout, out, dinp, dw, db};
    float *gbufs[] = {gx, gw, gbias, gdout, gout, gdinp, gdw, gdb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        free(bufs[i]);
        gpu->free(gbufs[i]);
    }
}

/* RMSNorm forward and backward on N rows of `stride` elements holding nh
 * groups of D at offset `off` (the CPU and the GPU get the same inputs) */
static void rmsnorm_case(const char *name, int64_t N, int64_t nh, int64_t D, int64_t stride,
                         int64_t off, int in_place) {
    char what[96];
    const size_t nrow = (size_t)(N * stride);
    float *x = rnd(nrow, -2, 2);              /* [N, stride] */
    float *w = rnd((size_t)D, 0.5f, 1.5f);    /* [D] */
    float *out = rnd(nrow, -1, 1);            /* [N, stride]: outside the groups untouched */
    float *rstd = rnd((size_t)(N * nh), 0, 1);    /* [N, nh] */
    float *dout = rnd(nrow, -1, 1);           /* [N, stride] */
    float *dinp = rnd(nrow, -1, 1);           /* [N, stride] */
    float *dw = rnd((size_t)D, -1, 1);        /* [D] */
    float *gx = up(x, nrow * 4), *gw = up(w, (size_t)D * 4), *gout = up(out, nrow * 4);
    float *grstd = up(rstd, (size_t)(N * nh) * 4), *gdout = up(dout, nrow * 4);
    float *gdinp = up(dinp, nrow * 4), *gdw = up(dw, (size_t)D * 4);

    /* forward (into out, or in place on a copy of x) */
    float *xc = copyf(x, nrow), *gxc = up(x, nrow * 4);
    float *o = in_place ? xc : out, *go = in_place ? gxc : gout;
    cpu->rmsnorm_forward(o + off, rstd, xc + off, w, N, nh, D, stride, RMS_EPS);
    gpu->rmsnorm_forward(go + off, grstd, gxc + off, gw, N, nh, D, stride, RMS_EPS);
    snprintf(what, sizeof what, "rmsnorm_forward %s%s", name, in_place ? " (in place)" : "");
    cmp(what, o, go, nrow, TOL_F32);
    snprintf(what, sizeof what, "rmsnorm rstd %s", name);
    cmp(what, rstd, grstd, (size_t)(N * nh), TOL_F32);

    /* backward, accumulating into dinp, then written in place over dout */
    cpu->rmsnorm_backward(dinp + off, dw, dout + off, x + off, w, rstd, N, nh, D, stride, 1);
    gpu->rmsnorm_backward(gdinp + off, gdw, gdout + off, gx + off, gw, grstd, N, nh, D, stride,
                          1);
    snprintf(what, sizeof what, "rmsnorm_backward dinp (+=) %s", name);
    cmp(what, dinp, gdinp, nrow, TOL_F32);
    snprintf(what, sizeof what, "rmsnorm_backward dw %s", name);
    cmp(what, dw, gdw, (size_t)D, TOL_F32);
    cpu->rmsnorm_backward(dout + off, dw, dout + off, x + off, w, rstd, N, nh, D, stride, 0);
    gpu->rmsnorm_backward(gdout + off, gdw, gdout + off, gx + off, gw, grstd, N, nh, D, stride,
                          0);
    snprintf(what, sizeof what, "rmsnorm_backward dinp (= dout) %s", name);
    cmp(what, dout, gdout, nrow, TOL_F32);
    snprintf(what, sizeof what, "rmsnorm_backward dw, second pass %s", name);
    cmp(what, dw, gdw, (size_t)D, TOL_F32);

    float *bufs[] = {x, w, out, rstd, dout, dinp, dw, xc};
    float *gbufs[] = {gx, gw, gout, grstd, gdout, gdinp, gdw, gxc};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        free(bufs[i]);
        gpu->free(gbufs[i]);
    }
}

static void test_rmsnorm(void) {
    /* whole rows, D not a multiple of the warp */
    rmsnorm_case("rows C=200", 600, 1, 200, 200, 0, 0);
    rmsnorm_case("rows C=200", 600, 1, 200, 200, 0, 1);
    /* Qwen3's per-head q / k norm inside packed qkv rows: Hq = 4, Hkv = 2, D = 64 */
    const int64_t Hq = 4, Hkv = 2, D = 64, R = (Hq + 2 * Hkv) * D;
    rmsnorm_case("q heads of packed qkv", 600, Hq, D, R, 0, 1);
    rmsnorm_case("k heads of packed qkv", 600, Hkv, D, R, Hq * D, 1);
}

/* cos / sin [T, D/2] of HF's default rotary embedding: angle t / theta^(2i/D) */
static void rope_tables(float *c, float *s, int64_t T, int64_t D) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < D / 2; i++) {
            double a = (double)t / pow(ROPE_THETA, (double)(2 * i) / (double)D);
            c[t * (D / 2) + i] = (float)cos(a);
            s[t * (D / 2) + i] = (float)sin(a);
        }
}

static void test_rope(void) {
    const int64_t B = 2, T = 300, Hq = 4, Hkv = 2, D = 64, R = (Hq + 2 * Hkv) * D;
    const size_t n = (size_t)(B * T * R), nt = (size_t)(T * D / 2);
    float *c = malloc(nt * 4), *s = malloc(nt * 4);   /* [T, D/2] */
    rope_tables(c, s, T, D);
    float *x = rnd(n, -2, 2);    /* packed qkv [B, T, R] */
    float *g = rnd(n, -1, 1);    /* its gradient [B, T, R] */
    float *gc = up(c, nt * 4), *gs = up(s, nt * 4), *gx = up(x, n * 4), *gg = up(g, n * 4);
    /* q heads, then k heads (v untouched) */
    cpu->rope_forward(x, c, s, B, T, Hq, D, R);
    gpu->rope_forward(gx, gc, gs, B, T, Hq, D, R);
    cpu->rope_forward(x + Hq * D, c, s, B, T, Hkv, D, R);
    gpu->rope_forward(gx + Hq * D, gc, gs, B, T, Hkv, D, R);
    cmp("rope_forward (q and k of packed qkv)", x, gx, n, TOL_F32);
    cpu->rope_backward(g, c, s, B, T, Hq, D, R);
    gpu->rope_backward(gg, gc, gs, B, T, Hq, D, R);
    cpu->rope_backward(g + Hq * D, c, s, B, T, Hkv, D, R);
    gpu->rope_backward(gg + Hq * D, gc, gs, B, T, Hkv, D, R);
    cmp("rope_backward", g, gg, n, TOL_F32);
    /* the backward is the inverse rotation: it brings the forward's output back */
    float *x0 = copyf(x, n);
    gpu->rope_forward(gx, gc, gs, B, T, Hq + Hkv, D, R);
    gpu->rope_backward(gx, gc, gs, B, T, Hq + Hkv, D, R);
    cmp("rope_backward(rope_forward(x)) = x", x0, gx, n, TOL_F32);
    free(c);
    free(s);
    free(x);
    free(g);
    free(x0);
    gpu->free(gc);
    gpu->free(gs);
    gpu->free(gx);
    gpu->free(gg);
}

static void test_swiglu(void) {
    const int64_t N = 96, F = 200;
    float *gu = rnd((size_t)(N * 2 * F), -4, 4);     /* [N, 2F] gate | up */
    float *out = rnd((size_t)(N * F), -1, 1);        /* [N, F] */
    float *dout = rnd((size_t)(N * F), -1, 1);       /* [N, F] */
    float *dgu = rnd((size_t)(N * 2 * F), -1, 1);    /* [N, 2F] */
    float *ggu = up(gu, (size_t)(N * 2 * F) * 4), *gout = up(out, (size_t)(N * F) * 4);
    float *gdout = up(dout, (size_t)(N * F) * 4), *gdgu = up(dgu, (size_t)(N * 2 * F) * 4);
    cpu->swiglu_forward(out, gu, N, F);
    gpu->swiglu_forward(gout, ggu, N, F);
    cmp("swiglu_forward", out, gout, (size_t)(N * F), TOL_F32);
    cpu->swiglu_backward(dgu, dout, gu, N, F);
    gpu->swiglu_backward(gdgu, gdout, ggu, N, F);
    cmp("swiglu_backward", dgu, gdgu, (size_t)(N * 2 * F), TOL_F32);
    free(gu);
    free(out);
    free(dout);
    free(dgu);
    gpu->free(ggu);
    gpu->free(gout);
    gpu->free(gdout);
    gpu->free(gdgu);
}

/* ---------------------------------------------------------------------------- */

typedef struct {
    int64_t B, T, Hq, Hkv, D;
    int packed;   /* 1: one qkv buffer; 0: separate q, k, v with padded strides */
} att_case;

/* padding of the separate q / k / v rows (elements past the heads, untouched) */
#define PAD_Q 16
#define PAD_K 8
#define PAD_V 24

static void attention_case(const att_case *ac) {
    const int64_t B = ac->B, T = ac->T, Hq = ac->Hq, Hkv = ac->Hkv, D = ac->D;
    char tag[64], what[128];
    snprintf(tag, sizeof tag, "B%lld T%lld Hq%lld Hkv%lld D%lld %s", (long long)B, (long long)T,
             (long long)Hq, (long long)Hkv, (long long)D, ac->packed ? "packed" : "strided");
    /* row strides and offsets of q, k, v inside their buffers */
    int64_t sq, sk, sv, ok = 0, ov = 0;
    if (ac->packed) {
        sq = sk = sv = (Hq + 2 * Hkv) * D;
        ok = Hq * D;
        ov = (Hq + Hkv) * D;
    } else {
        sq = Hq * D + PAD_Q;
        sk = Hkv * D + PAD_K;
        sv = Hkv * D + PAD_V;
    }
    const size_t nq = (size_t)(B * T * sq), nk = (size_t)(B * T * sk), nv = (size_t)(B * T * sv);
    const size_t no = (size_t)(B * T * Hq * D), nl = (size_t)(B * Hq * T);
    const size_t np = (size_t)(B * Hq * T * T);
    /* packed: one buffer [B, T, (Hq + 2 Hkv) D] that q, k, v (and dq, dk, dv) point into;
     * strided: q [B, T, sq], k [B, T, sk], v [B, T, sv] (gradients alike) */
    float *qb = rnd(nq, -1, 1), *kb = ac->packed ? qb : rnd(nk, -1, 1);
    float *vb = ac->packed ? qb : rnd(nv, -1, 1);
    const float *q = qb, *k = kb + ok, *v = vb + ov;
    float *dqb = rnd(nq, -1, 1), *dkb = ac->packed ? dqb : rnd(nk, -1, 1);
    float *dvb = ac->packed ? dqb : rnd(nv, -1, 1);
    float *out = rnd(no, -1, 1), *lse = rnd(nl, -1, 1), *probs = rnd(np, -1, 1);
    float *dout = rnd(no, -1, 1);   /* [B, T, Hq D] */
    /* device copies (the gradient buffers start equal, so untouched padding compares) */
    float *gqb = up(qb, nq * 4), *gkb = ac->packed ? gqb : up(kb, nk * 4);
    float *gvb = ac->packed ? gqb : up(vb, nv * 4);
    const float *gq = gqb, *gk = gkb + ok, *gv = gvb + ov;
    float *gdqb = up(dqb, nq * 4), *gdkb = ac->packed ? gdqb : up(dkb, nk * 4);
    float *gdvb = ac->packed ? gdqb : up(dvb, nv * 4);
    float *gout = up(out, no * 4), *glse = up(lse, nl * 4), *gprobs = up(probs, np * 4);
    float *gdout = up(dout, no * 4);

    /* flash */
    cpu->attention_gqa_forward_flash(out, lse, q, sq, k, sk, v, sv, B, T, Hq, Hkv, D);
    gpu->attention_gqa_forward_flash(gout, glse, gq, sq, gk, sk, gv, sv, B, T, Hq, Hkv, D);
    snprintf(what, sizeof what, "gqa flash out %s", tag);
    cmp(what, out, gout, no, TOL_F32);
    snprintf(what, sizeof what, "gqa flash lse %s", tag);
    cmp(what, lse, glse, nl, TOL_F32);
    cpu->attention_gqa_backward_flash(dqb, dkb + ok, dvb + ov, dout, q, sq, k, sk, v, sv, out, lse,
                                      B, T, Hq, Hkv, D);
    gpu->attention_gqa_backward_flash(gdqb, gdkb + ok, gdvb + ov, gdout, gq, sq, gk, sk, gv, sv,
                                      gout, glse, B, T, Hq, Hkv, D);
    snprintf(what, sizeof what, "gqa flash backward %s", tag);
    cmp(what, dqb, gdqb, nq, TOL_ATT_BWD);
    if (!ac->packed) {
        cmp("  ... dk", dkb, gdkb, nk, TOL_ATT_BWD);
        cmp("  ... dv", dvb, gdvb, nv, TOL_ATT_BWD);
    }
    /* determinism: a second backward into fresh buffers is bitwise the first */
    float *hdq2 = rnd(nq, -1, 1);
    float *g2q = up(hdq2, nq * 4), *g2k = ac->packed ? g2q : up(dkb, nk * 4);
    float *g2v = ac->packed ? g2q : up(dvb, nv * 4);
    if (ac->packed) {   /* the same starting bytes in both (nothing of it is left unwritten) */
        gpu->memcpy(g2q, gdqb, nq * 4, DT_COPY_D2D, DT_STREAM_COMPUTE);
    } else {
        gpu->memcpy(g2q, gdqb, nq * 4, DT_COPY_D2D, DT_STREAM_COMPUTE);
        gpu->memcpy(g2k, gdkb, nk * 4, DT_COPY_D2D, DT_STREAM_COMPUTE);
        gpu->memcpy(g2v, gdvb, nv * 4, DT_COPY_D2D, DT_STREAM_COMPUTE);
    }
    gpu->memset0(gdqb, nq * 4);
    if (!ac->packed) {
        gpu->memset0(gdkb, nk * 4);
        gpu->memset0(gdvb, nv * 4);
    }
    gpu->attention_gqa_backward_flash(gdqb, gdkb + ok, gdvb + ov, gdout, gq, sq, gk, sk, gv, sv,
                                      gout, glse, B, T, Hq, Hkv, D);
    gpu->attention_gqa_backward_flash(g2q, g2k + ok, g2v + ov, gdout, gq, sq, gk, sk, gv, sv,
                                      gout, glse, B, T, Hq, Hkv, D);
    if (ac->packed) {
        snprintf(what, sizeof what, "gqa flash dq|dk|dv rerun %s", tag);
        same_bits(what, gdqb, g2q, nq * 4);
    } else {
        /* the padding differs (zeroed vs kept); compare the written heads row by row */
        float *a = down(gdqb, nq * 4), *b = down(g2q, nq * 4);
        float *ak = down(gdkb, nk * 4), *bk = down(g2k, nk * 4);
        float *av = down(gdvb, nv * 4), *bv = down(g2v, nv * 4);
        int same = 1;
        for (int64_t r = 0; r < B * T; r++) {
            same &= !memcmp(a + r * sq, b + r * sq, (size_t)(Hq * D) * 4);
            same &= !memcmp(ak + r * sk, bk + r * sk, (size_t)(Hkv * D) * 4);
            same &= !memcmp(av + r * sv, bv + r * sv, (size_t)(Hkv * D) * 4);
        }
        printf("%-44s %s\n", "gqa flash dq, dk, dv rerun (strided)", same ? "bitwise equal" : "DIFFERS");
        CHECK(same);
        free(a);
        free(b);
        free(ak);
        free(bk);
        free(av);
        free(bv);
    }

    /* materialized */
    cpu->attention_gqa_forward_probs(out, probs, q, sq, k, sk, v, sv, B, T, Hq, Hkv, D);
    gpu->attention_gqa_forward_probs(gout, gprobs, gq, sq, gk, sk, gv, sv, B, T, Hq, Hkv, D);
    snprintf(what, sizeof what, "gqa probs out %s", tag);
    cmp(what, out, gout, no, TOL_F32);
    snprintf(what, sizeof what, "gqa probs %s", tag);
    cmp(what, probs, gprobs, np, TOL_F32);
    cpu->attention_gqa_backward_probs(dqb, dkb + ok, dvb + ov, dout, q, sq, k, sk, v, sv, probs,
                                      B, T, Hq, Hkv, D);
    gpu->attention_gqa_backward_probs(gdqb, gdkb + ok, gdvb + ov, gdout, gq, sq, gk, sk, gv, sv,
                                      gprobs, B, T, Hq, Hkv, D);
    snprintf(what, sizeof what, "gqa probs backward %s", tag);
    if (ac->packed) {
        cmp(what, dqb, gdqb, nq, TOL_ATT_BWD);
        gpu->attention_gqa_backward_probs(g2q, g2k + ok, g2v + ov, gdout, gq, sq, gk, sk, gv, sv,
                                          gprobs, B, T, Hq, Hkv, D);
        snprintf(what, sizeof what, "gqa probs dq|dk|dv rerun %s", tag);
        same_bits(what, gdqb, g2q, nq * 4);
    } else {
        /* the GPU padding was zeroed above and the CPU's kept: compare the heads only */
        float *a = down(gdqb, nq * 4), *ak = down(gdkb, nk * 4), *av = down(gdvb, nv * 4);
        double scale = 1.0, worst = 0.0;
        for (int64_t r = 0; r < B * T; r++)
            for (int64_t c = 0; c < Hq * D; c++) scale = fmax(scale, fabs(dqb[r * sq + c]));
        for (int64_t r = 0; r < B * T; r++) {
            for (int64_t c = 0; c < Hq * D; c++)
                worst = fmax(worst, fabs((double)dqb[r * sq + c] - a[r * sq + c]) / scale);
            for (int64_t c = 0; c < Hkv * D; c++) {
                worst = fmax(worst, fabs((double)dkb[r * sk + c] - ak[r * sk + c]) / scale);
                worst = fmax(worst, fabs((double)dvb[r * sv + c] - av[r * sv + c]) / scale);
            }
        }
        printf("%-44s max rel diff %.3g (tol %.1g)\n", what, worst, TOL_ATT_BWD);
        CHECK(worst <= TOL_ATT_BWD);
        free(a);
        free(ak);
        free(av);
    }

    free(qb);
    free(dqb);
    if (!ac->packed) {
        free(kb);
        free(vb);
        free(dkb);
        free(dvb);
        gpu->free(gkb);
        gpu->free(gvb);
        gpu->free(gdkb);
        gpu->free(gdvb);
        gpu->free(g2k);
        gpu->free(g2v);
    }
    free(out);
    free(lse);
    free(probs);
    free(dout);
    free(hdq2);
    gpu->free(gqb);
    gpu->free(gdqb);
    gpu->free(g2q);
    gpu->free(gout);
    gpu->free(glse);
    gpu->free(gprobs);
    gpu->free(gdout);
}

static void test_attention(void) {
    const att_case cases[] = {
        {2, 300, 4, 2, 64, 1},    /* GQA, several query / key tiles of every kernel */
        {1, 300, 4, 2, 128, 1},   /* Llama / Qwen head size */
        {1, 300, 4, 2, 128, 0},   /* separate strided q, k, v */
        {1, 77, 3, 1, 80, 0},     /* head size not a multiple of the warp, group of 3 */
        {1, 70, 2, 1, 256, 1},    /* the largest head size: the smallest tiles */
        {2, 33, 4, 4, 32, 1},     /* plain multi-head attention */
        {1, 1, 2, 1, 64, 1},      /* a single token */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) attention_case(&cases[i]);
}

/* RMSNorm dw over many rows, twice from the same state: bitwise equal */
static void test_rmsnorm_determinism(void) {
    const int64_t N = RMS_DET_ROWS, D = 64;
    const size_t n = (size_t)(N * D);
    float *x = rnd(n, -2, 2), *d = rnd(n, -1, 1), *w = rnd((size_t)D, 0.5f, 1.5f);   /* [N, D] */
    float *dw0 = rnd((size_t)D, -1, 1);                                            /* [D] */
    float *gx = up(x, n * 4), *gd = up(d, n * 4), *gw = up(w, (size_t)D * 4);
    float *grstd = gpu->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, (size_t)N * 4);   /* [N] */
    float *gy = gpu->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, n * 4);             /* [N, D] */
    float *gdi = gpu->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, n * 4);            /* [N, D] */
    float *gdw1 = up(dw0, (size_t)D * 4), *gdw2 = up(dw0, (size_t)D * 4);
    gpu->rmsnorm_forward(gy, grstd, gx, gw, N, 1, D, D, RMS_EPS);
    gpu->rmsnorm_backward(gdi, gdw1, gd, gx, gw, grstd, N, 1, D, D, 0);
    gpu->rmsnorm_backward(gdi, gdw2, gd, gx, gw, grstd, N, 1, D, D, 0);
    same_bits("rmsnorm dw rerun (70000 rows)", gdw1, gdw2, (size_t)D * 4);
    /* and against the CPU */
    float *rstd = malloc((size_t)N * 4), *y = malloc(n * 4), *di = malloc(n * 4);
    cpu->rmsnorm_forward(y, rstd, x, w, N, 1, D, D, RMS_EPS);
    cpu->rmsnorm_backward(di, dw0, d, x, w, rstd, N, 1, D, D, 0);
    cmp("rmsnorm dw (70000 rows)", dw0, gdw1, (size_t)D, TOL_LONG_SUM);
    free(x);
    free(d);
    free(w);
    free(dw0);
    free(rstd);
    free(y);
    free(di);
    gpu->free(gx);
    gpu->free(gd);
    gpu->free(gw);
    gpu->free(grstd);
    gpu->free(gy);
    gpu->free(gdi);
    gpu->free(gdw1);
    gpu->free(gdw2);
}

/* the encoder without learned positions: wpe / dwpe NULL (host reference) */
static void test_encoder_no_positions(void) {
    const int64_t B = 2, T = 70, C = 48, V = 50, N = B * T;
    int32_t tok[2 * 70];
    for (int64_t i = 0; i < N; i++) tok[i] = (int32_t)((i * 7) % 13 + (i % 3) * 17);
    float *wte = rnd((size_t)(V * C), -1, 1);    /* [V, C] */
    float *dout = rnd((size_t)(N * C), -1, 1);   /* [N, C] */
    float *dwte = rnd((size_t)(V * C), -1, 1);   /* [V, C] */
    float *out = rnd((size_t)(N * C), -1, 1);    /* [N, C] */
    int32_t *gtok = up(tok, sizeof tok);
    float *gwte = up(wte, (size_t)(V * C) * 4), *gdout = up(dout, (size_t)(N * C) * 4);
    float *gdwte = up(dwte, (size_t)(V * C) * 4), *gout = up(out, (size_t)(N * C) * 4);
    for (int64_t n = 0; n < N; n++) memcpy(out + n * C, wte + tok[n] * C, (size_t)C * 4);
    gpu->encoder_forward(gout, gtok, gwte, NULL, B, T, C);
    cmp("encoder_forward (wpe NULL)", out, gout, (size_t)(N * C), TOL_EXACT);
    /* bf16 wte */
    uint16_t *w16 = malloc((size_t)(V * C) * 2);
    dt_convert(w16, DT_DTYPE_BF16, wte, DT_DTYPE_FP32, (size_t)(V * C));
    void *gw16 = up(w16, (size_t)(V * C) * 2);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) out[n * C + c] = dt_bf16_to_f32(w16[tok[n] * C + c]);
    gpu->encoder_forward_cast(gout, gtok, gw16, DT_DTYPE_BF16, NULL, B, T, C);
    cmp("encoder_forward_cast bf16 (wpe NULL)", out, gout, (size_t)(N * C), TOL_EXACT);
    /* fp32 grads: tokens in order, as the GPU's per-channel walk */
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) dwte[tok[n] * C + c] += dout[n * C + c];
    gpu->encoder_backward(gdwte, NULL, gdout, gtok, B, T, C);
    cmp("encoder_backward (dwpe NULL)", dwte, gdwte, (size_t)(V * C), TOL_EXACT);
    /* bf16 grads: each token's positions summed in fp32 in order, one rounding */
    int32_t head[50], next[140];
    for (int64_t t = 0; t < V; t++) head[t] = -1;
    for (int64_t i = N - 1; i >= 0; i--) {
        next[i] = head[tok[i]];
        head[tok[i]] = (int32_t)i;
    }
    uint16_t *g16 = calloc((size_t)(V * C), 2);
    void *gg16 = up(g16, (size_t)(V * C) * 2);
    int32_t *ghead = up(head, sizeof head), *gnext = up(next, sizeof next);
    for (int64_t t = 0; t < V; t++)
        for (int64_t c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int32_t p = head[t]; p >= 0; p = next[p]) acc += dout[(int64_t)p * C + c];
            if (head[t] >= 0) g16[t * C + c] = dt_add_16(g16[t * C + c], acc, 1);
        }
    gpu->encoder_backward_16(gg16, NULL, DT_DTYPE_BF16, gdout, gtok, ghead, gnext, NULL, B, T, C);
    uint16_t *back = down(gg16, (size_t)(V * C) * 2);
    int same = memcmp(back, g16, (size_t)(V * C) * 2) == 0;
    printf("%-44s %s\n", "encoder_backward_16 bf16 (dwpe NULL)", same ? "bitwise equal" : "DIFFERS");
    CHECK(same);
    free(wte);
    free(dout);
    free(dwte);
    free(out);
    free(w16);
    free(g16);
    free(back);
    gpu->free(gtok);
    gpu->free(gwte);
    gpu->free(gdout);
    gpu->free(gdwte);
    gpu->free(gout);
    gpu->free(gw16);
    gpu->free(gg16);
    gpu->free(ghead);
    gpu->free(gnext);
}

/* shapes outside the attention contract: nothing runs, synchronize reports one line */
static void test_errors(void) {
    dt_error err = {0};
    float *buf = gpu->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, 4096);
    CHECK(gpu->synchronize(&err) == DT_OK);
    gpu->attention_gqa_forward_flash(buf, buf, buf, 1, buf, 1, buf, 1, 1, 1, 2, 1, 300);
    CHECK(gpu->synchronize(&err) == DT_ERUNTIME);
    printf("head_dim 300: %s\n", err.msg);
    CHECK(strstr(err.msg, "head_dim 300") != NULL);
    memset(&err, 0, sizeof err);
    gpu->attention_gqa_forward_flash(buf, buf, buf, 1, buf, 1, buf, 1, 1, 1, 3, 2, 8);
    CHECK(gpu->synchronize(&err) == DT_ERUNTIME);
    printf("Hq 3, Hkv 2: %s\n", err.msg);
    CHECK(strstr(err.msg, "Hkv 2") != NULL);
    CHECK(gpu->synchronize(&err) == DT_OK);   /* reported once */
    gpu->free(buf);
}

int main(void) {
    if (dt_device_cuda_count() == 0) {
        printf("no CUDA GPU visible: skipped\n");
        return SKIP;
    }
    dt_error err = {0};
    cpu = dt_device_cpu();
    if (dt_device_get(DT_DEVICE_CUDA, 0, &gpu, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    /* both tables carry every llama-family op */
#define HAS(op) {#op, cpu->op != NULL, gpu->op != NULL}
    const struct { const char *name; int cpu, gpu; } ops[] = {
        HAS(linear_t_forward), HAS(linear_t_backward), HAS(rmsnorm_forward),
        HAS(rmsnorm_backward), HAS(rope_forward), HAS(rope_backward), HAS(swiglu_forward),
        HAS(swiglu_backward), HAS(attention_gqa_forward_flash), HAS(attention_gqa_backward_flash),
        HAS(attention_gqa_forward_probs), HAS(attention_gqa_backward_probs),
    };
#undef HAS
    int missing = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!ops[i].cpu || !ops[i].gpu) {
            fprintf(stderr, "%s is missing from the %s table\n", ops[i].name,
                    ops[i].cpu ? "cuda" : "cpu");
            missing = 1;
        }
    if (missing) return 1;
    test_linear_t();
    test_rmsnorm();
    test_rope();
    test_swiglu();
    test_attention();
    test_rmsnorm_determinism();
    test_encoder_no_positions();
    CHECK(gpu->synchronize(&err) == DT_OK);
    if (err.code) fprintf(stderr, "%s\n", err.msg);
    test_errors();
    TEST_MAIN_END();
}
