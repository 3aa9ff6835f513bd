/* test_ops.c — every device op's backward against central finite differences
 * of its forward (loss = sum(out * R) for a fixed random R, accumulated in
 * double), plus forward checks against direct double-precision formulas. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dt_devmath.h"
#include "dt_dtype.h"
#include "dt_ops.h"
#include "dt_test.h"

/* relative error of a gradient vector: ||num - ana|| / ||num|| */
#define FD_TOL 1e-2
#define FD_STEP 1e-2f
#define FD_MAX_COORDS 240

static uint64_t g_rng = 88172645463325252ULL;
static float frand(void) {   /* uniform in [-1, 1) (xorshift64) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static float *rnd(int64_t n, float scale) {
    float *p = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}
static float *zeros(int64_t n) { return calloc((size_t)n, sizeof(float)); }

typedef double (*loss_fn)(void *ctx);

/* Compares ana (d loss / d x) with central differences, perturbing x in place. */
static double fd_check(const char *what, loss_fn f, void *ctx, float *x, const float *ana,
                       int64_t n) {
    double num2 = 0, diff2 = 0;
    int64_t stride = n > FD_MAX_COORDS ? n / FD_MAX_COORDS : 1;
    for (int64_t i = 0; i < n; i += stride) {
        float x0 = x[i];
        x[i] = x0 + FD_STEP;
        double lp = f(ctx);
        x[i] = x0 - FD_STEP;
        double lm = f(ctx);
        x[i] = x0;
        double num = (lp - lm) / (2.0 * (double)FD_STEP);
        num2 += num * num;
        diff2 += (num - ana[i]) * (num - ana[i]);
    }
    double rel = sqrt(diff2) / (sqrt(num2) > 1e-12 ? sqrt(num2) : 1e-12);
    if (!(rel <= FD_TOL)) fprintf(stderr, "%s: relative gradient error %.3g\n", what, rel);
    CHECK(rel <= FD_TOL);
    CHECK(num2 > 0);   /* the check saw a real gradient */
    return rel;
}

static double dot_d(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* ---- linear ---- */
typedef struct { float *out, *inp, *w, *b, *R; int64_t N, IC, OC; } lin_ctx;
static double lin_loss(void *p) {
    lin_ctx *c = p;
    dt_op_linear_forward(c->out, c->inp, c->w, c->b, c->N, c->IC, c->OC);
    return dot_d(c->out, c->R, c->N * c->OC);
}
static void test_linear(void) {
    lin_ctx c = {.N = 5, .IC = 7, .OC = 6};
    c.inp = rnd(c.N * c.IC, 1);
    c.w = rnd(c.IC * c.OC, 1);
    c.b = rnd(c.OC, 1);
    c.R = rnd(c.N * c.OC, 1);
    c.out = zeros(c.N * c.OC);
    /* forward vs the definition */
    lin_loss(&c);
    double maxe = 0;
    for (int64_t n = 0; n < c.N; n++)
        for (int64_t o = 0; o < c.OC; o++) {
            double s = c.b[o];
            for (int64_t i = 0; i < c.IC; i++) s += (double)c.inp[n * c.IC + i] * c.w[i * c.OC + o];
            maxe = fmax(maxe, fabs(s - c.out[n * c.OC + o]));
        }
    CHECK(maxe < 1e-5);
    float *dinp = zeros(c.N * c.IC), *dw = zeros(c.IC * c.OC), *db = zeros(c.OC);
    dt_op_linear_backward(dinp, dw, db, c.R, c.inp, c.w, c.N, c.IC, c.OC, 0);
    fd_check("linear dinp", lin_loss, &c, c.inp, dinp, c.N * c.IC);
    fd_check("linear dw", lin_loss, &c, c.w, dw, c.IC * c.OC);
    fd_check("linear db", lin_loss, &c, c.b, db, c.OC);
    /* parameter grads accumulate: a second call doubles them */
    float dw0 = dw[3], db0 = db[2];
    dt_op_linear_backward(dinp, dw, db, c.R, c.inp, c.w, c.N, c.IC, c.OC, 0);
    CHECK_NEAR(dw[3], 2 * dw0, 1e-6);
    CHECK_NEAR(db[2], 2 * db0, 1e-6);
    free(c.inp); free(c.w); free(c.b); free(c.R); free(c.out); free(dinp); free(dw); free(db);
}

/* ---- GEMM transposes and leading dimensions vs a naive product ---- */
static void test_gemm(void) {
    int64_t M = 5, N = 4, K = 3, ld = 9;
    float *A = rnd(ld * ld, 1), *B = rnd(ld * ld, 1), *C = rnd(ld * ld, 1), *C0 = malloc(sizeof(float) * ld * ld);
    memcpy(C0, C, sizeof(float) * ld * ld);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            memcpy(C, C0, sizeof(float) * ld * ld);
            dt_op_gemm(ta, tb, M, N, K, 0.5f, A, ld, B, ld, 2.0f, C, ld);
            double maxe = 0;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double s = 0;
                    for (int64_t k = 0; k < K; k++)
                        s += (double)(ta ? A[k * ld + i] : A[i * ld + k]) * (tb ? B[j * ld + k] : B[k * ld + j]);
                    maxe = fmax(maxe, fabs(0.5 * s + 2.0 * C0[i * ld + j] - C[i * ld + j]));
                }
            CHECK(maxe < 1e-5);
            CHECK(C[M * ld] == C0[M * ld]);   /* rows past M untouched */
        }
    free(A); free(B); free(C); free(C0);
}

/* ---- layernorm ---- */
typedef struct { float *out, *mean, *rstd, *inp, *w, *b, *R; int64_t N, C; } ln_ctx;
static double ln_loss(void *p) {
    ln_ctx *c = p;
    dt_op_layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C, 1e-5f);
    return dot_d(c->out, c->R, c->N * c->C);
}
static void test_layernorm(void) {
    ln_ctx c = {.N = 4, .C = 80};   /* C > one 64-column band */
    c.inp = rnd(c.N * c.C, 2);
    c.w = rnd(c.C, 1);
    c.b = rnd(c.C, 1);
    c.R = rnd(c.N * c.C, 1);
    c.out = zeros(c.N * c.C);
    c.mean = zeros(c.N);
    c.rstd = zeros(c.N);
    ln_loss(&c);
    /* forward: normalised rows have mean b-ish: check against double */
    for (int64_t n = 0; n < c.N; n++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < c.C; i++) m += c.inp[n * c.C + i];
        m /= c.C;
        for (int64_t i = 0; i < c.C; i++) v += (c.inp[n * c.C + i] - m) * (c.inp[n * c.C + i] - m);
        v /= c.C;
        CHECK_NEAR(c.mean[n], m, 1e-5);
        CHECK_NEAR(c.rstd[n], 1.0 / sqrt(v + 1e-5), 1e-5);
        double o = (c.inp[n * c.C + 7] - m) / sqrt(v + 1e-5) * c.w[7] + c.b[7];
        CHECK_NEAR(c.out[n * c.C + 7], o, 1e-5);
    }
    float *dinp = zeros(c.N * c.C), *dw = zeros(c.C), *db = zeros(c.C);
    dt_op_layernorm_backward(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    fd_check("layernorm dinp", ln_loss, &c, c.inp, dinp, c.N * c.C);
    fd_check("layernorm dw", ln_loss, &c, c.w, dw, c.C);
    fd_check("layernorm db", ln_loss, &c, c.b, db, c.C);
    free(c.inp); free(c.w); free(c.b); free(c.R); free(c.out); free(c.mean); free(c.rstd);
    free(dinp); free(dw); free(db);
}

/* ---- attention ---- */
typedef struct { float *out, *aux, *qkv, *R; int64_t B, T, C, H; int flash; } att_ctx;
static double att_loss(void *p) {
    att_ctx *c = p;
    if (c->flash) dt_op_attention_forward_flash(c->out, c->aux, c->qkv, c->B, c->T, c->C, c->H);
    else dt_op_attention_forward_probs(c->out, c->aux, c->qkv, c->B, c->T, c->C, c->H);
    return dot_d(c->out, c->R, c->B * c->T * c->C);
}
static void test_attention(void) {
    /* T = 70 spans two key tiles of the flash kernel */
    att_ctx c = {.B = 2, .T = 70, .C = 16, .H = 2};
    int64_t N = c.B * c.T;
    c.qkv = rnd(N * 3 * c.C, 1.5f);
    c.R = rnd(N * c.C, 1);
    c.out = zeros(N * c.C);
    float *out2 = zeros(N * c.C), *lse = zeros(c.B * c.H * c.T), *probs = zeros(c.B * c.H * c.T * c.T);
    dt_op_attention_forward_flash(c.out, lse, c.qkv, c.B, c.T, c.C, c.H);
    dt_op_attention_forward_probs(out2, probs, c.qkv, c.B, c.T, c.C, c.H);
    double maxe = 0;
    for (int64_t i = 0; i < N * c.C; i++) maxe = fmax(maxe, fabs(c.out[i] - out2[i]));
    CHECK(maxe < 1e-5);
    /* direct double-precision reference for one row: b=1, h=1, i=66 */
    {
        int64_t b = 1, h = 1, i = 66, hs = c.C / c.H;
        double s[70], mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; j++) {
            s[j] = dot_d(c.qkv + (b * c.T + i) * 3 * c.C + h * hs, c.qkv + (b * c.T + j) * 3 * c.C + c.C + h * hs, hs) / sqrt((double)hs);
            mx = fmax(mx, s[j]);
        }
        for (int64_t j = 0; j <= i; j++) sum += exp(s[j] - mx);
        CHECK_NEAR(lse[(b * c.H + h) * c.T + i], mx + log(sum), 1e-5);
        double o = 0;
        for (int64_t j = 0; j <= i; j++) o += exp(s[j] - mx) / sum * c.qkv[(b * c.T + j) * 3 * c.C + 2 * c.C + h * hs + 3];
        CHECK_NEAR(c.out[(b * c.T + i) * c.C + h * hs + 3], o, 1e-5);
        CHECK(probs[((b * c.H + h) * c.T + i) * c.T + i + 1] == 0.0f);   /* causal */
    }
    float *dqkv = zeros(N * 3 * c.C), *dqkv2 = zeros(N * 3 * c.C);
    dt_op_attention_backward_flash(dqkv, c.R, c.qkv, c.out, lse, c.B, c.T, c.C, c.H);
    dt_op_attention_backward_probs(dqkv2, c.R, c.qkv, probs, c.B, c.T, c.C, c.H);
    c.flash = 1;
    c.aux = lse;
    fd_check("attention flash dqkv", att_loss, &c, c.qkv, dqkv, N * 3 * c.C);
    c.flash = 0;
    c.aux = probs;
    fd_check("attention materialized dqkv", att_loss, &c, c.qkv, dqkv2, N * 3 * c.C);
    maxe = 0;
    for (int64_t i = 0; i < N * 3 * c.C; i++) maxe = fmax(maxe, fabs(dqkv[i] - dqkv2[i]));
    CHECK(maxe < 1e-4);
    free(c.qkv); free(c.R); free(c.out); free(out2); free(lse); free(probs); free(dqkv); free(dqkv2);
}

/* ---- GELU ---- */
typedef struct { float *out, *inp, *R; int64_t n; } gelu_ctx;
static double gelu_loss(void *p) {
    gelu_ctx *c = p;
    dt_op_gelu_forward(c->out, c->inp, c->n);
    return dot_d(c->out, c->R, c->n);
}
static void test_gelu(void) {
    gelu_ctx c = {.n = 300};
    c.inp = rnd(c.n, 6);
    c.inp[0] = 0.0f;
    c.inp[1] = -20.0f;
    c.inp[2] = 20.0f;
    c.R = rnd(c.n, 1);
    c.out = zeros(c.n);
    gelu_loss(&c);
    double maxe = 0;
    for (int64_t i = 0; i < c.n; i++) {
        double x = c.inp[i];
        double ref = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        maxe = fmax(maxe, fabs(ref - c.out[i]));
    }
    CHECK(maxe < 1e-5);
    float *dinp = zeros(c.n);
    dt_op_gelu_backward(dinp, c.inp, c.R, c.n);
    fd_check("gelu dinp", gelu_loss, &c, c.inp, dinp, c.n);
    free(c.inp); free(c.R); free(c.out); free(dinp);
}

/* ---- encoder ---- */
typedef struct { float *out, *wte, *wpe, *R; int32_t *tok; int64_t B, T, C; } enc_ctx;
static double enc_loss(void *p) {
    enc_ctx *c = p;
    dt_op_encoder_forward(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
    return dot_d(c->out, c->R, c->B * c->T * c->C);
}
static void test_encoder(void) {
    enc_ctx c = {.B = 2, .T = 5, .C = 70};
    int64_t V = 6, maxT = 8, N = c.B * c.T;
    int32_t tok[10] = {1, 3, 3, 0, 5, 3, 1, 2, 2, 4};   /* repeats accumulate */
    c.tok = tok;
    c.wte = rnd(V * c.C, 1);
    c.wpe = rnd(maxT * c.C, 1);
    c.R = rnd(N * c.C, 1);
    c.out = zeros(N * c.C);
    enc_loss(&c);
    CHECK(c.out[(1 * 5 + 2) * 70 + 9] == c.wte[2 * 70 + 9] + c.wpe[2 * 70 + 9]);
    float *dwte = zeros(V * c.C), *dwpe = zeros(maxT * c.C);
    dt_op_encoder_backward(dwte, dwpe, c.R, c.tok, c.B, c.T, c.C);
    fd_check("encoder dwte", enc_loss, &c, c.wte, dwte, V * c.C);
    fd_check("encoder dwpe", enc_loss, &c, c.wpe, dwpe, c.T * c.C);
    CHECK(dwpe[c.T * c.C] == 0.0f);   /* positions >= T get nothing */
    free(c.wte); free(c.wpe); free(c.R); free(c.out); free(dwte); free(dwpe);
}

/* ---- cross-entropy ---- */
typedef struct { float *logits, *lse, *losses; int32_t *tgt; int64_t N, V; } ce_ctx;
static double ce_loss(void *p) {
    ce_ctx *c = p;
    return dt_op_crossentropy_forward(c->lse, c->losses, c->logits, c->tgt, c->N, c->V);
}
static void test_crossentropy(void) {
    ce_ctx c = {.N = 3, .V = 300};
    int32_t tgt[3] = {0, 299, 17};
    c.tgt = tgt;
    c.logits = rnd(c.N * c.V, 4);
    c.logits[5] = 95.0f;   /* large logit: the max-shift must keep it finite */
    c.lse = zeros(c.N);
    c.losses = zeros(c.N);
    double loss = ce_loss(&c), ref = 0;
    for (int64_t n = 0; n < c.N; n++) {
        double mx = -1e300, s = 0;
        for (int64_t v = 0; v < c.V; v++) mx = fmax(mx, c.logits[n * c.V + v]);
        for (int64_t v = 0; v < c.V; v++) s += exp(c.logits[n * c.V + v] - mx);
        ref += mx + log(s) - c.logits[n * c.V + tgt[n]];
    }
    ref /= c.N;
    CHECK_NEAR(loss, ref, 1e-5);
    float *d = malloc(sizeof(float) * c.N * c.V);
    memcpy(d, c.logits, sizeof(float) * c.N * c.V);
    dt_op_crossentropy_backward_inplace(d, c.lse, c.tgt, 1.0f / c.N, c.N, c.V);
    fd_check("crossentropy dlogits", ce_loss, &c, c.logits, d, c.N * c.V);
    /* rows of dlogits sum to 0 (softmax sums to 1) */
    double rs = 0;
    for (int64_t v = 0; v < c.V; v++) rs += d[c.V + v];
    CHECK(fabs(rs) < 1e-6);
    /* logits only: no targets, lse still computed, returns 0 */
    CHECK(dt_op_crossentropy_forward(c.lse, c.losses, c.logits, NULL, c.N, c.V) == 0.0);
    free(c.logits); free(c.lse); free(c.losses); free(d);
}

/* ---- small ones ---- */
static void test_misc(void) {
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {5, 4, 3, 2, 1}, o[5];
    dt_op_residual_forward(o, a, b, 5);
    for (int i = 0; i < 5; i++) CHECK(o[i] == 6.0f);
    dt_op_axpy(o, a, -2.0f, 5);
    CHECK(o[4] == -4.0f);
    CHECK(dt_op_all_finite(o, 5));
    o[3] = INFINITY;
    CHECK(!dt_op_all_finite(o, 5));
    o[3] = NAN;
    CHECK(!dt_op_all_finite(o, 5));
    float db[3] = {1, 1, 1}, dout[6] = {1, 2, 3, 4, 5, 6};
    dt_op_bias_backward(db, dout, 2, 3);
    CHECK(db[0] == 6.0f && db[1] == 8.0f && db[2] == 10.0f);
}

/* ---- store_round: bit for bit the two conversions it fuses (dt_convert to the
 * 16-bit dtype, then back), for bf16 and fp16, on random values plus the special
 * ones (RNE ties, NaN, inf, fp16 overflow and subnormals, bf16's largest finite
 * rounding up), with a length that is not a multiple of the vector width both
 * below and above the size where the op goes parallel ---- */
#define SR_SMALL 1037   /* < DT_PAR_MIN (ops_cpu.c), odd: the scalar tail runs */
#define SR_LARGE 70001  /* > 2 * DT_PAR_MIN: both threads' vector loops and a tail */
static const float k_special16[] = {0.0f, -0.0f, 1.0f, 1.00390625f /* bf16 tie */, 1.01171875f,
                                    65504.0f, 65520.0f /* fp16 overflow */, 5.96e-8f, 3e-8f,
                                    1e-40f /* fp32 subnormal */, 3.3895314e38f /* bf16 max rounds up */,
                                    INFINITY, -INFINITY, NAN, -NAN, 1.0009765625f /* fp16 tie */};
#define N_SPECIAL16 (sizeof k_special16 / sizeof k_special16[0])

/* fn for bf16 and fp16, each at SR_SMALL and SR_LARGE elements */
static void each_16bit_case(void (*fn)(dt_dtype t, size_t n)) {
    const dt_dtype types[] = {DT_DTYPE_BF16, DT_DTYPE_FP16};
    const size_t sizes[] = {SR_SMALL, SR_LARGE};
    for (size_t k = 0; k < 2; k++)
        for (size_t z = 0; z < 2; z++) fn(types[k], sizes[z]);
}

static void store_round_case(dt_dtype t, size_t n) {
    float *x = rnd((int64_t)n, 100.0f), *ref = malloc(n * sizeof(float));
    uint16_t *d = malloc(n * sizeof(uint16_t)), *dref = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < N_SPECIAL16; i++) x[i * 7 % n] = k_special16[i];   /* spread over the vectors */
    x[n - 1] = k_special16[3];                                                 /* and in the tail */
    memcpy(ref, x, n * sizeof(float));
    dt_convert(dref, t, ref, DT_DTYPE_FP32, n);
    dt_convert(ref, DT_DTYPE_FP32, dref, t, n);
    dt_op_store_round(d, t, x, n);
    CHECK(memcmp(d, dref, n * sizeof(uint16_t)) == 0);
    CHECK(memcmp(x, ref, n * sizeof(float)) == 0);
    free(x);
    free(ref);
    free(d);
    free(dref);
}

static void test_store_round(void) {
    each_16bit_case(store_round_case);
    float a[3] = {1.5f, -2.0f, 3.25f}, b[3] = {0, 0, 0};   /* fp32: a copy, x unchanged */
    dt_op_store_round(b, DT_DTYPE_FP32, a, 3);
    CHECK(b[0] == 1.5f && b[1] == -2.0f && b[2] == 3.25f && a[2] == 3.25f);
}

/* ---- accumulate_16: bit for bit widen (dt_convert), fp32 add, round (dt_convert), and
 * dt_add_16 wherever the sum is not NaN (fp16 NaN payloads follow VCVTPS2PH as dt_convert
 * does), at the sizes of store_round, with its special values on both operands ---- */
static void accumulate_case(dt_dtype t, size_t n) {
    float *start = rnd((int64_t)n, 50.0f), *acc = rnd((int64_t)n, 50.0f), *w = malloc(n * sizeof(float));
    uint16_t *d = malloc(n * sizeof(uint16_t)), *dref = malloc(n * sizeof(uint16_t));
    uint16_t *scalar = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < N_SPECIAL16; i++) {
        acc[i * 11 % n] = k_special16[i];
        start[(i * 13 + 5) % n] = k_special16[i];
    }
    acc[n - 1] = k_special16[3];
    dt_convert(d, t, start, DT_DTYPE_FP32, n);
    memcpy(dref, d, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) scalar[i] = dt_add_16(d[i], acc[i], t == DT_DTYPE_BF16);
    dt_convert(w, DT_DTYPE_FP32, dref, t, n);
    for (size_t i = 0; i < n; i++) w[i] += acc[i];
    dt_convert(dref, t, w, DT_DTYPE_FP32, n);
    dt_op_accumulate_16(d, t, acc, n);
    CHECK(memcmp(d, dref, n * sizeof(uint16_t)) == 0);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += !isnan(w[i]) && d[i] != scalar[i];
    CHECK(differ == 0);
    free(start);
    free(acc);
    free(w);
    free(d);
    free(dref);
    free(scalar);
}

static void test_accumulate_16(void) { each_16bit_case(accumulate_case); }

int main(void) {
    test_store_round();
    test_accumulate_16();
    test_gemm();
    test_linear();
    test_layernorm();
    test_attention();
    test_gelu();
    test_encoder();
    test_crossentropy();
    test_misc();
    TEST_MAIN_END();
}
