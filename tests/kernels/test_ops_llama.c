/* test_ops_llama.c — the llama family's device ops (dt_ops.h, "the llama family";
 * CPU: engine/device/ops_cpu_llama.c) and the encoder without learned positions.
 *
 * Every forward is checked against a plain double-precision reference written
 * here from the contract; every backward against central finite differences of
 * that double reference (loss = sum(R * out) for a fixed random R = dout), so
 * the numerical gradient is accurate to ~1e-9 and the tolerance can be tight.
 * Independent cross-checks: GQA with Hq = Hkv against GPT-2's attention op, GQA
 * with Hkv < Hq against GPT-2's attention on repeated k / v heads (HF's
 * repeat_kv), RoPE's rotate-half on a hand-made quarter turn. Ops with
 * reductions (RMSNorm dw, attention dk / dv, linear bias grad) must give bitwise
 * the same result on 1 and 2 OpenMP threads. */
#include <float.h>
#include <omp.h>
#include <stdint.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_ops.h"
#include "dt_test.h"

/* fp32 op vs the double reference: |op - ref| <= FWD_TOL * max(1, |ref|) (seen:
 * up to 2.5e-7) */
#define FWD_TOL 1e-5
/* central-difference step on the double reference (truncation ~ step^2 ~ 1e-10,
 * cancellation ~ 1e-16 / step ~ 1e-11) */
#define FD_STEP 1e-5
/* fp32 analytic gradient vs the numerical one: ||num - ana|| / ||num|| (seen:
 * 2e-8 .. 5e-7) */
#define FD_TOL 1e-5
/* coordinates per tensor the finite differences visit (all when fewer) */
#define FD_MAX_COORDS 160
/* GQA with Hq = Hkv = H vs dt_op_attention_*: same algorithm, same tiles */
#define MHA_TOL 1e-6
/* GQA dk / dv (summed in one buffer over the group) vs the MHA heads summed apart */
#define REPEAT_KV_TOL 1e-5
/* flash vs materialized attention (exp of recomputed scores vs stored probs) */
#define FLASH_PROBS_TOL 1e-5
/* RoPE backward(forward(x)) = x up to fp32 rounding of two rotations */
#define ROPE_ID_TOL 1e-6
/* Llama / Qwen rms_norm_eps (HF LlamaConfig default 1e-6) */
#define RMS_EPS 1e-6f
/* RoPE base (Su et al. 2021, RoFormer; HF LlamaConfig rope_theta default) */
#define ROPE_THETA 10000.0
/* the attention's query block and key tile of engine/device/ops_cpu_internal.h
 * (DT_ATT_ROWS = DT_ATT_KEYS = 16): T is chosen to span several, the last one partial */
#define ATT_TILE 16
/* a value no op writes: elements outside what an op addresses must keep it */
#define SENTINEL 12345.0f
/* thread counts of the determinism checks */
#define THREADS_ONE 1
#define THREADS_TWO 2

/* ---------------------------------------------------------------------------
 * helpers */

static uint64_t g_rng = 88172645463325252ULL;
static double urand(void) {   /* uniform in [0, 1) (xorshift64) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}
static float frand(void) { return (float)(urand() * 2.0 - 1.0); }   /* [-1, 1) */
static float *rnd(int64_t n, float scale) {   /* [n] */
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}
static float *filled(int64_t n, float v) {   /* [n] */
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = v;
    return p;
}
static float *zeros(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(float)); }
static float *copy_f(const float *a, int64_t n) {   /* [n] */
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    memcpy(p, a, sizeof(float) * (size_t)n);
    return p;
}
static double *to_double(const float *a, int64_t n) {   /* [n] */
    double *p = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = a[i];
    return p;
}
static int same_bits(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

/* max over i of |a[i] - ref[i]| / max(1, |ref[i]|) */
static double max_err(const float *a, const double *ref, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(a[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
        m = e > m || isnan(e) ? e : m;
    }
    return m;
}
static double max_err_ff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
        m = e > m || isnan(e) ? e : m;
    }
    return m;
}
/* reports and counts a tolerance failure (NaN fails) */
static void check_tol(const char *what, double err, double tol) {
    if (!(err <= tol)) fprintf(stderr, "%s: error %.3g > tolerance %.3g\n", what, err, tol);
    CHECK(err <= tol);
}

/* the indices of a strided set: rows [rows, stride] holding width used elements each */
static int64_t strided_coords(int64_t *idx, int64_t rows, int64_t width, int64_t stride) {
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < width; c++) idx[n++] = r * stride + c;
    return n;
}
/* keeps at most FD_MAX_COORDS of idx [n], picked at random (partial Fisher-Yates) */
static int64_t sample_coords(int64_t *idx, int64_t n) {
    if (n <= FD_MAX_COORDS) return n;
    for (int64_t k = 0; k < FD_MAX_COORDS; k++) {
        int64_t j = k + (int64_t)(urand() * (double)(n - k));
        int64_t t = idx[k];
        idx[k] = idx[j];
        idx[j] = t;
    }
    return FD_MAX_COORDS;
}

typedef double (*ref_loss_fn)(void *ctx);

/* ana (d loss / d x, fp32) against central differences of the double reference
 * loss, perturbing x[idx[k]] in place; fails when the relative vector error
 * exceeds FD_TOL or the gradient seen is 0. */
static void fd_check(const char *what, ref_loss_fn loss, void *ctx, double *x, const float *ana,
                     const int64_t *idx, int64_t nidx) {
    double num2 = 0, diff2 = 0;
    for (int64_t k = 0; k < nidx; k++) {
        int64_t i = idx[k];
        double x0 = x[i];
        x[i] = x0 + FD_STEP;
        double lp = loss(ctx);
        x[i] = x0 - FD_STEP;
        double lm = loss(ctx);
        x[i] = x0;
        double num = (lp - lm) / (2.0 * FD_STEP);
        num2 += num * num;
        diff2 += (num - ana[i]) * (num - ana[i]);
    }
    double rel = sqrt(diff2) / fmax(sqrt(num2), DBL_MIN);
    check_tol(what, rel, FD_TOL);
    CHECK(num2 > 0);   /* the check saw a real gradient */
}
/* fd_check over every coordinate 0..n-1 (sampled) */
static void fd_check_all(const char *what, ref_loss_fn loss, void *ctx, double *x,
                         const float *ana, int64_t n) {
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)n);
    int64_t m = sample_coords(idx, strided_coords(idx, 1, n, n));
    fd_check(what, loss, ctx, x, ana, idx, m);
    free(idx);
}

static double dot_dd(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---------------------------------------------------------------------------
 * the device table holds every llama-family op */

static void test_registration(void) {
    const dt_device_ops *cpu = dt_device_cpu();
    CHECK(cpu->linear_t_forward == dt_op_linear_t_forward);
    CHECK(cpu->linear_t_backward == dt_op_linear_t_backward);
    CHECK(cpu->rmsnorm_forward == dt_op_rmsnorm_forward);
    CHECK(cpu->rmsnorm_backward == dt_op_rmsnorm_backward);
    CHECK(cpu->rope_forward == dt_op_rope_forward);
    CHECK(cpu->rope_backward == dt_op_rope_backward);
    CHECK(cpu->swiglu_forward == dt_op_swiglu_forward);
    CHECK(cpu->swiglu_backward == dt_op_swiglu_backward);
    CHECK(cpu->attention_gqa_forward_flash == dt_op_attention_gqa_forward_flash);
    CHECK(cpu->attention_gqa_backward_flash == dt_op_attention_gqa_backward_flash);
    CHECK(cpu->attention_gqa_forward_probs == dt_op_attention_gqa_forward_probs);
    CHECK(cpu->attention_gqa_backward_probs == dt_op_attention_gqa_backward_probs);
}

/* ---------------------------------------------------------------------------
 * linear, nn.Linear layout: out[N, OC] = inp[N, IC] @ w[OC, IC]^T + bias */

typedef struct {
    double *inp, *w, *b;   /* [N, IC], [OC, IC], [OC] or NULL */
    double *out, *R;       /* [N, OC] */
    int64_t N, IC, OC;
} lin_ref;

static void ref_linear_t(double *out, const double *inp, const double *w, const double *b,
                         int64_t N, int64_t IC, int64_t OC) {
    /* out [N, OC], inp [N, IC], w [OC, IC], b [OC] or NULL */
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < OC; o++)
            out[n * OC + o] = (b ? b[o] : 0.0) + dot_dd(inp + n * IC, w + o * IC, IC);
}
static double lin_loss(void *p) {
    lin_ref *c = p;
    ref_linear_t(c->out, c->inp, c->w, c->b, c->N, c->IC, c->OC);
    return dot_dd(c->out, c->R, c->N * c->OC);
}

static void test_linear_t(void) {
    int64_t N = 5, IC = 7, OC = 6;
    float *inp = rnd(N * IC, 1), *w = rnd(OC * IC, 1), *b = rnd(OC, 1), *R = rnd(N * OC, 1);
    float *out = filled(N * OC, NAN);   /* written (=), also without bias */
    lin_ref c = {to_double(inp, N * IC), to_double(w, OC * IC), to_double(b, OC),
                 malloc(sizeof(double) * N * OC), to_double(R, N * OC), N, IC, OC};
    /* forward, with and without bias */
    dt_op_linear_t_forward(out, inp, w, b, N, IC, OC);
    ref_linear_t(c.out, c.inp, c.w, c.b, N, IC, OC);
    check_tol("linear_t forward", max_err(out, c.out, N * OC), FWD_TOL);
    for (int64_t i = 0; i < N * OC; i++) out[i] = NAN;
    dt_op_linear_t_forward(out, inp, w, NULL, N, IC, OC);
    ref_linear_t(c.out, c.inp, c.w, NULL, N, IC, OC);
    check_tol("linear_t forward, no bias", max_err(out, c.out, N * OC), FWD_TOL);
    /* backward vs finite differences; dinp written over NaN */
    float *dinp = filled(N * IC, NAN), *dw = zeros(OC * IC), *db = zeros(OC);
    dt_op_linear_t_backward(dinp, dw, db, R, inp, w, N, IC, OC, 0);
    fd_check_all("linear_t dinp", lin_loss, &c, c.inp, dinp, N * IC);
    fd_check_all("linear_t dw", lin_loss, &c, c.w, dw, OC * IC);
    fd_check_all("linear_t dbias", lin_loss, &c, c.b, db, OC);
    /* parameter grads accumulate; accumulate_dinp adds; dinp / dbias NULL skip */
    float *dw1 = copy_f(dw, OC * IC), *db1 = copy_f(db, OC), *dinp1 = copy_f(dinp, N * IC);
    dt_op_linear_t_backward(dinp, dw, db, R, inp, w, N, IC, OC, 1);
    double e = 0;
    for (int64_t i = 0; i < OC * IC; i++) e = fmax(e, fabs(dw[i] - 2 * dw1[i]));
    for (int64_t i = 0; i < OC; i++) e = fmax(e, fabs(db[i] - 2 * db1[i]));
    for (int64_t i = 0; i < N * IC; i++) e = fmax(e, fabs(dinp[i] - 2 * dinp1[i]));
    check_tol("linear_t accumulation (second call doubles)", e, FWD_TOL);
    memcpy(dw, dw1, sizeof(float) * OC * IC);
    memcpy(db, db1, sizeof(float) * OC);
    dt_op_linear_t_backward(NULL, dw, NULL, R, inp, w, N, IC, OC, 0);
    e = 0;
    for (int64_t i = 0; i < OC * IC; i++) e = fmax(e, fabs(dw[i] - 2 * dw1[i]));
    check_tol("linear_t dw with dinp and dbias NULL", e, FWD_TOL);
    CHECK(same_bits(db, db1, OC));   /* dbias NULL: nothing else written */
    free(inp); free(w); free(b); free(R); free(out); free(dinp); free(dw); free(db);
    free(dw1); free(db1); free(dinp1);
    free(c.inp); free(c.w); free(c.b); free(c.out); free(c.R);
}

/* the bias gradient is a column sum: bitwise the same on 1 and 2 threads */
static void test_linear_t_threads(void) {
    int64_t N = 33, IC = 5, OC = 200;   /* OC spans several 64-column bands */
    float *inp = rnd(N * IC, 1), *w = rnd(OC * IC, 1), *dout = rnd(N * OC, 1);
    float *db[2], *dw = zeros(OC * IC);
    int threads[2] = {THREADS_ONE, THREADS_TWO};
    for (int k = 0; k < 2; k++) {
        db[k] = filled(OC, 0.5f);
        omp_set_num_threads(threads[k]);
        dt_op_linear_t_backward(NULL, dw, db[k], dout, inp, w, N, IC, OC, 0);
    }
    CHECK(same_bits(db[0], db[1], OC));
    free(inp); free(w); free(dout); free(db[0]); free(db[1]); free(dw);
}

/* ---------------------------------------------------------------------------
 * RMSNorm over strided groups */

typedef struct {
    double *inp, *w;    /* [N, stride], [D] */
    double *out, *R;    /* [N, stride] (groups only) */
    int64_t N, nh, D, stride;
} rms_ref;

static void ref_rmsnorm(double *out, double *rstd, const double *inp, const double *w, int64_t N,
                        int64_t nh, int64_t D, int64_t stride) {
    /* out, inp [N, stride] (groups [N, nh, D] inside), rstd [N, nh] or NULL, w [D] */
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < nh; h++) {
            const double *x = inp + n * stride + h * D;
            double r = 1.0 / sqrt(dot_dd(x, x, D) / (double)D + RMS_EPS);
            for (int64_t d = 0; d < D; d++) out[n * stride + h * D + d] = x[d] * r * w[d];
            if (rstd) rstd[n * nh + h] = r;
        }
}
static double rms_loss(void *p) {
    rms_ref *c = p;
    ref_rmsnorm(c->out, NULL, c->inp, c->w, c->N, c->nh, c->D, c->stride);
    double s = 0;
    for (int64_t n = 0; n < c->N; n++)
        s += dot_dd(c->out + n * c->stride, c->R + n * c->stride, c->nh * c->D);
    return s;
}
/* 1 when every element of a [N, stride] array outside the groups [nh D] holds v */
static int outside_groups_hold(const float *a, int64_t N, int64_t nh, int64_t D, int64_t stride,
                               float v) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = nh * D; c < stride; c++)
            if (a[n * stride + c] != v) return 0;
    return 1;
}

static void test_rmsnorm(void) {
    /* three groups per row, a row stride with 5 elements past them (like q / k
     * norm inside a packed qkv row); D > one 64-column band */
    int64_t N = 5, nh = 3, D = 80, stride = nh * D + 5, NS = N * stride;
    float *inp = rnd(NS, 2), *w = rnd(D, 1), *R = rnd(NS, 1);
    for (int64_t n = 0; n < N; n++)   /* elements outside the groups: sentinel */
        for (int64_t c = nh * D; c < stride; c++) inp[n * stride + c] = R[n * stride + c] = SENTINEL;
    float *out = filled(NS, SENTINEL), *rstd = zeros(N * nh);
    rms_ref c = {to_double(inp, NS), to_double(w, D), malloc(sizeof(double) * NS),
                 to_double(R, NS), N, nh, D, stride};
    double *rstd_ref = malloc(sizeof(double) * N * nh);
    dt_op_rmsnorm_forward(out, rstd, inp, w, N, nh, D, stride, RMS_EPS);
    ref_rmsnorm(c.out, rstd_ref, c.inp, c.w, N, nh, D, stride);
    double e = 0;
    for (int64_t n = 0; n < N; n++)
        e = fmax(e, max_err(out + n * stride, c.out + n * stride, nh * D));
    check_tol("rmsnorm forward", e, FWD_TOL);
    check_tol("rmsnorm rstd", max_err(rstd, rstd_ref, N * nh), FWD_TOL);
    CHECK(outside_groups_hold(out, N, nh, D, stride, SENTINEL));
    /* in place (out == inp) gives the same bits */
    float *inplace = copy_f(inp, NS), *rstd2 = zeros(N * nh);
    dt_op_rmsnorm_forward(inplace, rstd2, inplace, w, N, nh, D, stride, RMS_EPS);
    CHECK(outside_groups_hold(inplace, N, nh, D, stride, SENTINEL));
    for (int64_t n = 0; n < N; n++) CHECK(same_bits(inplace + n * stride, out + n * stride, nh * D));

    /* backward: dinp written over NaN in the groups, sentinel outside kept */
    float *dinp = filled(NS, NAN), *dw = zeros(D);
    for (int64_t n = 0; n < N; n++)
        for (int64_t cc = nh * D; cc < stride; cc++) dinp[n * stride + cc] = SENTINEL;
    dt_op_rmsnorm_backward(dinp, dw, R, inp, w, rstd, N, nh, D, stride, 0);
    CHECK(outside_groups_hold(dinp, N, nh, D, stride, SENTINEL));
    int64_t *idx = malloc(sizeof(int64_t) * NS);
    int64_t m = sample_coords(idx, strided_coords(idx, N, nh * D, stride));
    fd_check("rmsnorm dinp", rms_loss, &c, c.inp, dinp, idx, m);
    fd_check_all("rmsnorm dw", rms_loss, &c, c.w, dw, D);
    /* accumulate_dinp: += onto what is there; dw += */
    float *dinp_acc = filled(NS, 0.25f), *dw2 = copy_f(dw, D);
    dt_op_rmsnorm_backward(dinp_acc, dw2, R, inp, w, rstd, N, nh, D, stride, 1);
    e = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t cc = 0; cc < nh * D; cc++)
            e = fmax(e, fabs(dinp_acc[n * stride + cc] - (0.25f + dinp[n * stride + cc])));
    for (int64_t d = 0; d < D; d++) e = fmax(e, fabs(dw2[d] - 2 * dw[d]));
    check_tol("rmsnorm accumulate_dinp / dw accumulation", e, FWD_TOL);
    CHECK(outside_groups_hold(dinp_acc, N, nh, D, stride, 0.25f));
    /* dinp == dout (accumulate 0): the same bits as out of place, dw included */
    float *alias = copy_f(R, NS), *dw3 = zeros(D);
    dt_op_rmsnorm_backward(alias, dw3, alias, inp, w, rstd, N, nh, D, stride, 0);
    for (int64_t n = 0; n < N; n++) CHECK(same_bits(alias + n * stride, dinp + n * stride, nh * D));
    CHECK(same_bits(dw3, dw, D));
    free(inp); free(w); free(R); free(out); free(rstd); free(rstd_ref); free(inplace); free(rstd2);
    free(dinp); free(dw); free(idx); free(dinp_acc); free(dw2); free(alias); free(dw3);
    free(c.inp); free(c.w); free(c.out); free(c.R);
}

/* dw is a sum over rows and groups: bitwise the same on 1 and 2 threads */
static void test_rmsnorm_threads(void) {
    int64_t N = 9, nh = 2, D = 200, stride = nh * D;   /* D spans 4 column bands */
    float *inp = rnd(N * stride, 2), *w = rnd(D, 1), *dout = rnd(N * stride, 1);
    float *out = zeros(N * stride), *rstd = zeros(N * nh);
    dt_op_rmsnorm_forward(out, rstd, inp, w, N, nh, D, stride, RMS_EPS);
    float *dw[2], *dinp[2];
    int threads[2] = {THREADS_ONE, THREADS_TWO};
    for (int k = 0; k < 2; k++) {
        dw[k] = filled(D, 0.5f);
        dinp[k] = zeros(N * stride);
        omp_set_num_threads(threads[k]);
        dt_op_rmsnorm_backward(dinp[k], dw[k], dout, inp, w, rstd, N, nh, D, stride, 0);
    }
    CHECK(same_bits(dw[0], dw[1], D));
    CHECK(same_bits(dinp[0], dinp[1], N * stride));
    free(inp); free(w); free(dout); free(out); free(rstd);
    for (int k = 0; k < 2; k++) { free(dw[k]); free(dinp[k]); }
}

/* ---------------------------------------------------------------------------
 * RoPE, rotate-half */

/* HF LlamaRotaryEmbedding (default rope type): angle(t, i) = t * theta^(-2i / D) */
static void rope_tables(float *cos_tab, float *sin_tab, int64_t T, int64_t D) {
    /* cos_tab, sin_tab [T, D/2] */
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < D / 2; i++) {
            double a = (double)t * pow(ROPE_THETA, -2.0 * (double)i / (double)D);
            cos_tab[t * (D / 2) + i] = (float)cos(a);
            sin_tab[t * (D / 2) + i] = (float)sin(a);
        }
}

typedef struct {
    double *x, *out, *R;   /* [B, T, stride] */
    const float *cos_tab, *sin_tab;   /* [T, D/2] */
    int64_t B, T, nh, D, stride;
} rope_ref;

/* the contract's formula, out of place; elements past the first nh heads copied */
static void ref_rope(double *out, const double *x, const float *cos_tab, const float *sin_tab,
                     int64_t B, int64_t T, int64_t nh, int64_t D, int64_t stride) {
    /* out, x [B, T, stride], cos_tab, sin_tab [T, D/2] */
    int64_t half = D / 2;
    memcpy(out, x, sizeof(double) * (size_t)(B * T * stride));
    for (int64_t n = 0; n < B * T; n++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < half; i++) {
                double c = cos_tab[(n % T) * half + i], s = sin_tab[(n % T) * half + i];
                const double *xh = x + n * stride + h * D;
                out[n * stride + h * D + i] = xh[i] * c - xh[i + half] * s;
                out[n * stride + h * D + i + half] = xh[i + half] * c + xh[i] * s;
            }
}
static double rope_loss(void *p) {
    rope_ref *c = p;
    ref_rope(c->out, c->x, c->cos_tab, c->sin_tab, c->B, c->T, c->nh, c->D, c->stride);
    return dot_dd(c->out, c->R, c->B * c->T * c->stride);
}

static void test_rope(void) {
    /* rows of 4 heads plus 3 extra elements; only the first nh = 3 heads rotate */
    int64_t B = 2, T = 6, nh = 3, D = 16, stride = 4 * D + 3, n = B * T * stride;
    float *cos_tab = zeros(T * D / 2), *sin_tab = zeros(T * D / 2);
    rope_tables(cos_tab, sin_tab, T, D);
    float *x0 = rnd(n, 1), *x = copy_f(x0, n), *R = rnd(n, 1);
    rope_ref c = {to_double(x0, n), malloc(sizeof(double) * n), to_double(R, n), cos_tab, sin_tab,
                  B, T, nh, D, stride};
    dt_op_rope_forward(x, cos_tab, sin_tab, B, T, nh, D, stride);
    ref_rope(c.out, c.x, cos_tab, sin_tab, B, T, nh, D, stride);
    check_tol("rope forward", max_err(x, c.out, n), FWD_TOL);
    for (int64_t r = 0; r < B * T; r++)   /* past the first nh heads: untouched */
        CHECK(same_bits(x + r * stride + nh * D, x0 + r * stride + nh * D, stride - nh * D));
    CHECK(same_bits(x, x0, nh * D));   /* position 0: the identity rotation */
    /* backward(forward(x)) = x */
    dt_op_rope_backward(x, cos_tab, sin_tab, B, T, nh, D, stride);
    check_tol("rope backward o forward = identity", max_err_ff(x, x0, n), ROPE_ID_TOL);
    /* backward vs finite differences: the gradient is backward(R) */
    float *dx = copy_f(R, n);
    dt_op_rope_backward(dx, cos_tab, sin_tab, B, T, nh, D, stride);
    fd_check_all("rope dx", rope_loss, &c, c.x, dx, n);
    /* rotate-half by hand: a quarter turn (c = 0, s = 1) maps (a, b) to (-b, a) */
    float quarter_c[2] = {0.0f, 0.0f}, quarter_s[2] = {1.0f, 1.0f};
    float h4[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    dt_op_rope_forward(h4, quarter_c, quarter_s, 1, 1, 1, 4, 4);
    CHECK(h4[0] == -3.0f && h4[1] == -4.0f && h4[2] == 1.0f && h4[3] == 2.0f);
    free(cos_tab); free(sin_tab); free(x0); free(x); free(R); free(dx);
    free(c.x); free(c.out); free(c.R);
}

/* ---------------------------------------------------------------------------
 * SwiGLU on gu [N, 2F] = gate | up */

typedef struct {
    double *gu, *out, *R;   /* [N, 2F], [N, F], [N, F] */
    int64_t N, F;
} swiglu_ref;

static void ref_swiglu(double *out, const double *gu, int64_t N, int64_t F) {
    /* out [N, F], gu [N, 2F] */
    for (int64_t n = 0; n < N; n++)
        for (int64_t f = 0; f < F; f++) {
            double g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f];
            out[n * F + f] = g / (1.0 + exp(-g)) * u;
        }
}
static double swiglu_loss(void *p) {
    swiglu_ref *c = p;
    ref_swiglu(c->out, c->gu, c->N, c->F);
    return dot_dd(c->out, c->R, c->N * c->F);
}

static void test_swiglu(void) {
    int64_t N = 4, F = 37;
    float *gu = rnd(N * 2 * F, 4), *R = rnd(N * F, 1), *out = filled(N * F, NAN);
    gu[0] = -30.0f;   /* saturated sigmoid both ways */
    gu[1] = 30.0f;
    swiglu_ref c = {to_double(gu, N * 2 * F), malloc(sizeof(double) * N * F), to_double(R, N * F),
                    N, F};
    dt_op_swiglu_forward(out, gu, N, F);
    ref_swiglu(c.out, c.gu, N, F);
    check_tol("swiglu forward", max_err(out, c.out, N * F), FWD_TOL);
    float *dgu = filled(N * 2 * F, NAN);   /* written (=) */
    dt_op_swiglu_backward(dgu, R, gu, N, F);
    fd_check_all("swiglu dgu", swiglu_loss, &c, c.gu, dgu, N * 2 * F);
    free(gu); free(R); free(out); free(dgu); free(c.gu); free(c.out); free(c.R);
}

/* ---------------------------------------------------------------------------
 * grouped-query attention */

typedef struct {
    int64_t B, T, Hq, Hkv, D;
    int packed;   /* 1: q, k, v in one packed row [q | k | v]; 0: separate, padded rows */
} gqa_cfg;

/* q, k, v (or their gradients) as the op addresses them */
typedef struct {
    float *mem[3];                 /* the allocations (packed: mem[0] only) */
    float *q, *k, *v;              /* [B, T, sq], [B, T, sk], [B, T, sv] */
    int64_t sq, sk, sv;
} qkv_bufs;

/* row padding of the separate layout: strides wider than the heads */
#define PAD_Q 3
#define PAD_K 5
#define PAD_V 1

/* heads hold `head`, padding holds `pad` (inputs: random heads, sentinel padding) */
static void qkv_fill(float *p, int64_t rows, int64_t width, int64_t stride, int random_heads,
                     float head, float pad) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < stride; c++)
            p[r * stride + c] = c < width ? (random_heads ? frand() * head : head) : pad;
}
static qkv_bufs qkv_alloc(const gqa_cfg *g, int random_heads, float head) {
    qkv_bufs s = {{NULL, NULL, NULL}, NULL, NULL, NULL, 0, 0, 0};
    int64_t rows = g->B * g->T, wq = g->Hq * g->D, wkv = g->Hkv * g->D;
    if (g->packed) {
        int64_t W = wq + 2 * wkv;
        s.mem[0] = malloc(sizeof(float) * (size_t)(rows * W));
        qkv_fill(s.mem[0], rows, W, W, random_heads, head, SENTINEL);
        s.q = s.mem[0];
        s.k = s.mem[0] + wq;
        s.v = s.mem[0] + wq + wkv;
        s.sq = s.sk = s.sv = W;
    } else {
        s.sq = wq + PAD_Q;
        s.sk = wkv + PAD_K;
        s.sv = wkv + PAD_V;
        s.mem[0] = s.q = malloc(sizeof(float) * (size_t)(rows * s.sq));
        s.mem[1] = s.k = malloc(sizeof(float) * (size_t)(rows * s.sk));
        s.mem[2] = s.v = malloc(sizeof(float) * (size_t)(rows * s.sv));
        qkv_fill(s.q, rows, wq, s.sq, random_heads, head, SENTINEL);
        qkv_fill(s.k, rows, wkv, s.sk, random_heads, head, SENTINEL);
        qkv_fill(s.v, rows, wkv, s.sv, random_heads, head, SENTINEL);
    }
    return s;
}
static void qkv_free(qkv_bufs *s) {
    for (int i = 0; i < 3; i++) free(s->mem[i]);
}
/* elements of q's allocation (packed: sq = W, so the whole qkv) */
static int64_t qkv_extent(const gqa_cfg *g, const qkv_bufs *s) { return g->B * g->T * s->sq; }
/* double copies of a set, the same layout (packed: k and v are views again) */
static void qkv_to_double(double **q, double **k, double **v, const gqa_cfg *g,
                          const qkv_bufs *s) {
    int64_t rows = g->B * g->T;
    *q = to_double(s->q, qkv_extent(g, s));
    *k = g->packed ? *q + (s->k - s->q) : to_double(s->k, rows * s->sk);
    *v = g->packed ? *q + (s->v - s->q) : to_double(s->v, rows * s->sv);
}

/* double reference, from the contract: out [B, T, Hq D], lse [B, Hq, T] and
 * probs [B, Hq, T, T] optional */
static void ref_gqa(double *out, double *lse, double *probs, const double *q, int64_t sq,
                    const double *k, int64_t sk, const double *v, int64_t sv, const gqa_cfg *g) {
    /* q [B, T, sq], k [B, T, sk], v [B, T, sv] (heads [Hq | Hkv, D] at the row start) */
    int64_t T = g->T, D = g->D, group = g->Hq / g->Hkv;
    double *s = malloc(sizeof(double) * (size_t)T);
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t h = 0; h < g->Hq; h++)
            for (int64_t i = 0; i < T; i++) {
                const double *qi = q + (b * T + i) * sq + h * D;
                int64_t kvc = h / group * D;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= i; j++) {
                    s[j] = dot_dd(qi, k + (b * T + j) * sk + kvc, D) / sqrt((double)D);
                    mx = fmax(mx, s[j]);
                }
                for (int64_t j = 0; j <= i; j++) sum += exp(s[j] - mx);
                double *o = out + (b * T + i) * g->Hq * D + h * D;
                for (int64_t d = 0; d < D; d++) o[d] = 0;
                for (int64_t j = 0; j <= i; j++) {
                    double p = exp(s[j] - mx) / sum;
                    for (int64_t d = 0; d < D; d++) o[d] += p * v[(b * T + j) * sv + kvc + d];
                    if (probs) probs[((b * g->Hq + h) * T + i) * T + j] = p;
                }
                if (probs)
                    for (int64_t j = i + 1; j < T; j++) probs[((b * g->Hq + h) * T + i) * T + j] = 0;
                if (lse) lse[(b * g->Hq + h) * T + i] = mx + log(sum);
            }
    free(s);
}

typedef struct {
    const gqa_cfg *g;
    double *q, *k, *v;    /* double copies of the inputs, same layout */
    int64_t sq, sk, sv;
    double *out, *R;      /* [B, T, Hq D] */
} gqa_ref;

static double gqa_loss(void *p) {
    gqa_ref *c = p;
    ref_gqa(c->out, NULL, NULL, c->q, c->sq, c->k, c->sk, c->v, c->sv, c->g);
    return dot_dd(c->out, c->R, c->g->B * c->g->T * c->g->Hq * c->g->D);
}

/* the op's four entry points on one input set */
static void gqa_forward(float *out, float *aux, const qkv_bufs *x, const gqa_cfg *g, int flash) {
    if (flash)
        dt_op_attention_gqa_forward_flash(out, aux, x->q, x->sq, x->k, x->sk, x->v, x->sv, g->B,
                                          g->T, g->Hq, g->Hkv, g->D);
    else
        dt_op_attention_gqa_forward_probs(out, aux, x->q, x->sq, x->k, x->sk, x->v, x->sv, g->B,
                                          g->T, g->Hq, g->Hkv, g->D);
}
static void gqa_backward(qkv_bufs *dx, const float *dout, const qkv_bufs *x, const float *out,
                         const float *aux, const gqa_cfg *g, int flash) {
    if (flash)
        dt_op_attention_gqa_backward_flash(dx->q, dx->k, dx->v, dout, x->q, x->sq, x->k, x->sk,
                                           x->v, x->sv, out, aux, g->B, g->T, g->Hq, g->Hkv,
                                           g->D);
    else
        dt_op_attention_gqa_backward_probs(dx->q, dx->k, dx->v, dout, x->q, x->sq, x->k, x->sk,
                                           x->v, x->sv, aux, g->B, g->T, g->Hq, g->Hkv, g->D);
}

static int padding_holds(const float *a, int64_t rows, int64_t width, int64_t stride, float v) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = width; c < stride; c++)
            if (a[r * stride + c] != v) return 0;
    return 1;
}

/* Forward vs the double reference, flash vs materialized, backward vs finite
 * differences, gradients written (=) and padding untouched. */
static void gqa_check_numerics(const gqa_cfg *g, const char *name) {
    int64_t rows = g->B * g->T, OW = g->Hq * g->D, wkv = g->Hkv * g->D;
    int64_t nlse = g->B * g->Hq * g->T, nprobs = nlse * g->T;
    char what[160];
    qkv_bufs x = qkv_alloc(g, 1, 1.5f);
    float *R = rnd(rows * OW, 1);
    float *out_f = filled(rows * OW, NAN), *lse = zeros(nlse);
    float *out_p = filled(rows * OW, NAN), *probs = filled(nprobs, NAN);
    gqa_forward(out_f, lse, &x, g, 1);
    gqa_forward(out_p, probs, &x, g, 0);
    gqa_ref c = {g, NULL, NULL, NULL, x.sq, x.sk, x.sv,
                 malloc(sizeof(double) * (size_t)(rows * OW)), to_double(R, rows * OW)};
    qkv_to_double(&c.q, &c.k, &c.v, g, &x);
    double *lse_ref = malloc(sizeof(double) * (size_t)nlse);
    double *probs_ref = malloc(sizeof(double) * (size_t)nprobs);
    ref_gqa(c.out, lse_ref, probs_ref, c.q, c.sq, c.k, c.sk, c.v, c.sv, g);
    snprintf(what, sizeof what, "%s flash out", name);
    check_tol(what, max_err(out_f, c.out, rows * OW), FWD_TOL);
    snprintf(what, sizeof what, "%s flash lse", name);
    check_tol(what, max_err(lse, lse_ref, nlse), FWD_TOL);
    snprintf(what, sizeof what, "%s materialized out", name);
    check_tol(what, max_err(out_p, c.out, rows * OW), FWD_TOL);
    snprintf(what, sizeof what, "%s materialized probs (0 above the diagonal)", name);
    check_tol(what, max_err(probs, probs_ref, nprobs), FWD_TOL);
    snprintf(what, sizeof what, "%s flash vs materialized out", name);
    check_tol(what, max_err_ff(out_f, out_p, rows * OW), FLASH_PROBS_TOL);

    /* backward: written (=) over NaN heads, padding sentinel kept */
    qkv_bufs dxf = qkv_alloc(g, 0, NAN), dxp = qkv_alloc(g, 0, NAN);
    gqa_backward(&dxf, R, &x, out_f, lse, g, 1);
    gqa_backward(&dxp, R, &x, NULL, probs, g, 0);
    if (!g->packed) {
        CHECK(padding_holds(dxf.q, rows, OW, dxf.sq, SENTINEL));
        CHECK(padding_holds(dxf.k, rows, wkv, dxf.sk, SENTINEL));
        CHECK(padding_holds(dxf.v, rows, wkv, dxf.sv, SENTINEL));
        CHECK(padding_holds(dxp.q, rows, OW, dxp.sq, SENTINEL));
        CHECK(padding_holds(dxp.k, rows, wkv, dxp.sk, SENTINEL));
        CHECK(padding_holds(dxp.v, rows, wkv, dxp.sv, SENTINEL));
    }
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(rows * x.sq));
    double *xs[3] = {c.q, c.k, c.v};
    const float *ana_f[3] = {dxf.q, dxf.k, dxf.v}, *ana_p[3] = {dxp.q, dxp.k, dxp.v};
    int64_t widths[3] = {OW, wkv, wkv}, strides[3] = {x.sq, x.sk, x.sv};
    const char *names[3] = {"dq", "dk", "dv"};
    for (int t = 0; t < 3; t++) {
        /* the flash gradient vs finite differences; the materialized one vs flash */
        int64_t m = sample_coords(idx, strided_coords(idx, rows, widths[t], strides[t]));
        snprintf(what, sizeof what, "%s flash %s", name, names[t]);
        fd_check(what, gqa_loss, &c, xs[t], ana_f[t], idx, m);
        double e = 0;
        for (int64_t r = 0; r < rows; r++)
            e = fmax(e, max_err_ff(ana_p[t] + r * strides[t], ana_f[t] + r * strides[t], widths[t]));
        snprintf(what, sizeof what, "%s materialized vs flash %s", name, names[t]);
        check_tol(what, e, FLASH_PROBS_TOL);
    }
    free(idx); free(R); free(out_f); free(lse); free(out_p); free(probs);
    free(lse_ref); free(probs_ref); free(c.out); free(c.R);
    free(c.q);
    if (!g->packed) { free(c.k); free(c.v); }
    qkv_free(&x); qkv_free(&dxf); qkv_free(&dxp);
}

/* GQA against GPT-2's attention op on k / v heads repeated for every query head
 * (HF repeat_kv): the same out and lse, dq the same, dk / dv of a kv head the
 * sum of its query heads' k / v gradients. */
static void gqa_check_repeat_kv(const gqa_cfg *g, const char *name) {
    int64_t rows = g->B * g->T, D = g->D, Hq = g->Hq, C = Hq * D, group = Hq / g->Hkv;
    char what[160];
    qkv_bufs x = qkv_alloc(g, 1, 1.5f);
    float *qkv_m = zeros(rows * 3 * C);   /* [B, T, 3C] MHA packing */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t d = 0; d < D; d++) {
                qkv_m[r * 3 * C + h * D + d] = x.q[r * x.sq + h * D + d];
                qkv_m[r * 3 * C + C + h * D + d] = x.k[r * x.sk + h / group * D + d];
                qkv_m[r * 3 * C + 2 * C + h * D + d] = x.v[r * x.sv + h / group * D + d];
            }
    float *R = rnd(rows * C, 1);
    float *out = zeros(rows * C), *lse = zeros(g->B * Hq * g->T);
    float *out_m = zeros(rows * C), *lse_m = zeros(g->B * Hq * g->T);
    gqa_forward(out, lse, &x, g, 1);
    dt_op_attention_forward_flash(out_m, lse_m, qkv_m, g->B, g->T, C, Hq);
    snprintf(what, sizeof what, "%s vs repeated-kv MHA out", name);
    check_tol(what, max_err_ff(out, out_m, rows * C), MHA_TOL);
    snprintf(what, sizeof what, "%s vs repeated-kv MHA lse", name);
    check_tol(what, max_err_ff(lse, lse_m, g->B * Hq * g->T), MHA_TOL);
    qkv_bufs dx = qkv_alloc(g, 0, NAN);
    float *dqkv_m = zeros(rows * 3 * C);
    gqa_backward(&dx, R, &x, out, lse, g, 1);
    dt_op_attention_backward_flash(dqkv_m, R, qkv_m, out_m, lse_m, g->B, g->T, C, Hq);
    double eq = 0, ekv = 0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < C; c++)
            eq = fmax(eq, fabs(dx.q[r * dx.sq + c] - dqkv_m[r * 3 * C + c]));
        for (int64_t kh = 0; kh < g->Hkv; kh++)
            for (int64_t d = 0; d < D; d++) {
                double sk = 0, sv = 0;
                for (int64_t h = kh * group; h < (kh + 1) * group; h++) {
                    sk += dqkv_m[r * 3 * C + C + h * D + d];
                    sv += dqkv_m[r * 3 * C + 2 * C + h * D + d];
                }
                ekv = fmax(ekv, fabs(dx.k[r * dx.sk + kh * D + d] - sk));
                ekv = fmax(ekv, fabs(dx.v[r * dx.sv + kh * D + d] - sv));
            }
    }
    snprintf(what, sizeof what, "%s vs repeated-kv MHA dq", name);
    check_tol(what, eq, group == 1 ? MHA_TOL : REPEAT_KV_TOL);
    snprintf(what, sizeof what, "%s vs repeated-kv MHA dk, dv (group sums)", name);
    check_tol(what, ekv, REPEAT_KV_TOL);
    free(qkv_m); free(R); free(out); free(lse); free(out_m); free(lse_m); free(dqkv_m);
    qkv_free(&x); qkv_free(&dx);
}

/* forward and backward bitwise the same on 1 and 2 threads (dk / dv sum over a group) */
static void gqa_check_threads(const gqa_cfg *g, const char *name) {
    int64_t rows = g->B * g->T, OW = g->Hq * g->D;
    int64_t nlse = g->B * g->Hq * g->T, nprobs = nlse * g->T;
    qkv_bufs x = qkv_alloc(g, 1, 1.5f);
    float *R = rnd(rows * OW, 1);
    int threads[2] = {THREADS_ONE, THREADS_TWO};
    for (int flash = 0; flash < 2; flash++) {
        float *out[2], *aux[2];
        qkv_bufs dx[2];
        for (int k = 0; k < 2; k++) {
            omp_set_num_threads(threads[k]);
            out[k] = zeros(rows * OW);
            aux[k] = zeros(flash ? nlse : nprobs);
            dx[k] = qkv_alloc(g, 0, NAN);
            gqa_forward(out[k], aux[k], &x, g, flash);
            gqa_backward(&dx[k], R, &x, flash ? out[k] : NULL, aux[k], g, flash);
        }
        int same = same_bits(out[0], out[1], rows * OW) &&
                   same_bits(aux[0], aux[1], flash ? nlse : nprobs) &&
                   same_bits(dx[0].q, dx[1].q, qkv_extent(g, &dx[0]));
        if (!g->packed)
            same = same && same_bits(dx[0].k, dx[1].k, rows * dx[0].sk) &&
                   same_bits(dx[0].v, dx[1].v, rows * dx[0].sv);
        if (!same) fprintf(stderr, "%s %s: 1 and 2 threads differ\n", name,
                           flash ? "flash" : "materialized");
        CHECK(same);
        for (int k = 0; k < 2; k++) { free(out[k]); free(aux[k]); qkv_free(&dx[k]); }
    }
    free(R);
    qkv_free(&x);
}

/* GQA with Hq = Hkv = H and D = C / H on a packed qkv is GPT-2's attention op */
static void test_gqa_is_mha(void) {
    gqa_cfg g = {.B = 2, .T = 70, .Hq = 2, .Hkv = 2, .D = 8, .packed = 1};
    int64_t C = g.Hq * g.D, rows = g.B * g.T, nlse = g.B * g.Hq * g.T, nprobs = nlse * g.T;
    CHECK(g.T > ATT_TILE);   /* several blocks and key tiles, the last partial */
    qkv_bufs x = qkv_alloc(&g, 1, 1.5f);
    float *R = rnd(rows * C, 1);
    for (int flash = 0; flash < 2; flash++) {
        int64_t naux = flash ? nlse : nprobs;
        float *out = zeros(rows * C), *aux = zeros(naux);
        float *out_m = zeros(rows * C), *aux_m = zeros(naux);
        float *dqkv_m = zeros(rows * 3 * C);
        qkv_bufs dx = qkv_alloc(&g, 0, NAN);
        gqa_forward(out, aux, &x, &g, flash);
        gqa_backward(&dx, R, &x, flash ? out : NULL, aux, &g, flash);
        if (flash) {
            dt_op_attention_forward_flash(out_m, aux_m, x.q, g.B, g.T, C, g.Hq);
            dt_op_attention_backward_flash(dqkv_m, R, x.q, out_m, aux_m, g.B, g.T, C, g.Hq);
        } else {
            dt_op_attention_forward_probs(out_m, aux_m, x.q, g.B, g.T, C, g.Hq);
            dt_op_attention_backward_probs(dqkv_m, R, x.q, aux_m, g.B, g.T, C, g.Hq);
        }
        check_tol(flash ? "gqa = mha flash out" : "gqa = mha materialized out",
                  max_err_ff(out, out_m, rows * C), MHA_TOL);
        check_tol(flash ? "gqa = mha flash lse" : "gqa = mha materialized probs",
                  max_err_ff(aux, aux_m, naux), MHA_TOL);
        check_tol(flash ? "gqa = mha flash dqkv" : "gqa = mha materialized dqkv",
                  max_err_ff(dx.q, dqkv_m, rows * 3 * C), MHA_TOL);
        free(out); free(aux); free(out_m); free(aux_m); free(dqkv_m);
        qkv_free(&dx);
    }
    free(R);
    qkv_free(&x);
}

static void test_gqa(void) {
    /* every (Hkv in {2, 1}) x (D in {8, 16}); T spans 2 or 3 key tiles; packed
     * rows and separate padded tensors */
    gqa_cfg cfgs[4] = {
        {.B = 2, .T = 70, .Hq = 4, .Hkv = 2, .D = 8, .packed = 1},
        {.B = 1, .T = 130, .Hq = 4, .Hkv = 1, .D = 16, .packed = 0},
        {.B = 2, .T = 70, .Hq = 4, .Hkv = 1, .D = 8, .packed = 0},
        {.B = 1, .T = 70, .Hq = 4, .Hkv = 2, .D = 16, .packed = 1},
    };
    const char *names[4] = {"gqa Hq4 Hkv2 D8 packed", "gqa Hq4 Hkv1 D16 separate",
                            "gqa Hq4 Hkv1 D8 separate", "gqa Hq4 Hkv2 D16 packed"};
    for (int i = 0; i < 4; i++) {
        CHECK(cfgs[i].T > ATT_TILE);
        gqa_check_numerics(&cfgs[i], names[i]);
        gqa_check_repeat_kv(&cfgs[i], names[i]);
        gqa_check_threads(&cfgs[i], names[i]);
    }
}

/* ---------------------------------------------------------------------------
 * encoder without learned positions (wpe / dwpe NULL), ops and CPU device */

static void test_encoder_no_wpe(void) {
    int64_t B = 2, T = 5, C = 70, V = 6, N = B * T;
    int32_t tok[10] = {1, 3, 3, 0, 5, 3, 1, 2, 2, 4};   /* repeats accumulate */
    float *wte = rnd(V * C, 1), *dout = rnd(N * C, 1), *out = filled(N * C, NAN);
    dt_op_encoder_forward(out, tok, wte, NULL, B, T, C);
    int same = 1;
    for (int64_t n = 0; n < N; n++) same = same && same_bits(out + n * C, wte + tok[n] * C, C);
    CHECK(same);
    /* dwte[v] += sum of dout over the positions holding v, positions in order */
    float *dwte = filled(V * C, 0.5f);
    double *ref = malloc(sizeof(double) * (size_t)(V * C));
    for (int64_t i = 0; i < V * C; i++) ref[i] = 0.5;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) ref[tok[n] * C + c] += dout[n * C + c];
    dt_op_encoder_backward(dwte, NULL, dout, tok, B, T, C);
    check_tol("encoder backward, dwpe NULL", max_err(dwte, ref, V * C), FWD_TOL);

    /* the CPU device's cast forward (fp32 and bf16 wte) and 16-bit backward */
    const dt_device_ops *cpu = dt_device_cpu();
    for (int64_t i = 0; i < N * C; i++) out[i] = NAN;
    cpu->encoder_forward_cast(out, tok, wte, DT_DTYPE_FP32, NULL, B, T, C);
    same = 1;
    for (int64_t n = 0; n < N; n++) same = same && same_bits(out + n * C, wte + tok[n] * C, C);
    CHECK(same);
    uint16_t *wte16 = malloc(sizeof(uint16_t) * (size_t)(V * C));
    for (int64_t i = 0; i < V * C; i++) wte16[i] = dt_f32_to_bf16(wte[i]);
    cpu->encoder_forward_cast(out, tok, wte16, DT_DTYPE_BF16, NULL, B, T, C);
    same = 1;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            same = same && out[n * C + c] == dt_bf16_to_f32(wte16[tok[n] * C + c]);
    CHECK(same);
    /* token chains: tok_head [V] first position (-1 absent), tok_next [N] (-1 ends) */
    int32_t tok_head[6], tok_next[10];
    for (int64_t v = 0; v < V; v++) tok_head[v] = -1;
    for (int64_t n = N - 1; n >= 0; n--) {
        tok_next[n] = tok_head[tok[n]];
        tok_head[tok[n]] = (int32_t)n;
    }
    uint16_t *dwte16 = calloc((size_t)(V * C), sizeof(uint16_t));
    float *acc = zeros(T * C);
    cpu->encoder_backward_16(dwte16, NULL, DT_DTYPE_BF16, dout, tok, tok_head, tok_next, acc, B,
                             T, C);
    /* each row: the fp32 sum over its positions in order, rounded once */
    same = 1;
    for (int64_t v = 0; v < V; v++)
        for (int64_t c = 0; c < C; c++) {
            float sum = 0.0f;
            for (int64_t n = 0; n < N; n++)
                if (tok[n] == v) sum += dout[n * C + c];
            same = same && dwte16[v * C + c] == dt_f32_to_bf16(sum);
        }
    CHECK(same);
    free(wte); free(dout); free(out); free(dwte); free(ref); free(wte16); free(dwte16); free(acc);
}

int main(void) {
    int threads0 = omp_get_max_threads();
    test_registration();
    test_linear_t();
    test_linear_t_threads();
    test_rmsnorm();
    test_rmsnorm_threads();
    test_rope();
    test_swiglu();
    omp_set_num_threads(threads0);
    test_gqa_is_mha();
    test_gqa();
    test_encoder_no_wpe();
    omp_set_num_threads(threads0);
    TEST_MAIN_END();
}
