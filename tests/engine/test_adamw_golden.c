/* test_adamw_golden.c — three AdamW steps of the whole tiny GPT-2 against the
 * float64 NumPy reference in tests/kernels/golden/gpt2_golden.bin (written by
 * scripts/gen_golden.py: same batch each step, constant lr, weight decay on
 * every tensor, no clipping). fp32 preset, and mixed-bf16 through the fp32
 * master (looser: bf16 forward/backward).
 * Usage: test_engine_adamw_golden GOLDEN_FILE */
#include <stdint.h>

#include "dt_dtype.h"
#include "dt_lm.h"
#include "dt_optim.h"
#include "dt_test.h"

/* DTGOLD01 layout (scripts/gen_golden.py): magic[8], i32[10] dims, f32[6] hyper-
 * parameters, then i32 inputs/targets [B*T], f32 params [P], logits [B*T*V],
 * loss, grads [P], step losses [S], params after S steps [P]. */
enum { D_L, D_C, D_H, D_V, D_MAXT, D_F, D_B, D_T, D_STEPS, D_P, D_COUNT };
enum { H_LN_EPS, H_LR, H_BETA1, H_BETA2, H_EPS, H_WD, H_COUNT };
#define GOLD_MAGIC "DTGOLD01"
#define GOLD_MAGIC_LEN 8

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len);
    if (fread(b, 1, *len, f) != *len) *len = 0;
    fclose(f);
    return b;
}

/* Runs the golden's S steps under preset; returns the largest |param - reference|
 * and (mean) the mean one. */
static double run(const unsigned char *buf, dt_precision_preset preset, double loss_tol, double *mean) {
    int32_t d[D_COUNT];
    float h[H_COUNT];
    memcpy(d, buf + GOLD_MAGIC_LEN, sizeof d);
    memcpy(h, buf + GOLD_MAGIC_LEN + sizeof d, sizeof h);
    const size_t N = (size_t)d[D_B] * d[D_T], P = (size_t)d[D_P];
    const unsigned char *p = buf + GOLD_MAGIC_LEN + sizeof d + sizeof h;
    const int32_t *inputs = (const int32_t *)p, *targets = inputs + N;
    const float *params0 = (const float *)(targets + N);
    const float *step_losses = params0 + P + N * (size_t)d[D_V] + 1 + P;
    const float *params_after = step_losses + d[D_STEPS];

    dt_model m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "golden-gpt2");
    m.family = DT_FAMILY_GPT2;
    m.n_layer = d[D_L];
    m.hidden = d[D_C];
    m.n_head = m.n_kv_head = d[D_H];
    m.head_dim = d[D_C] / d[D_H];
    m.ffn = d[D_F];
    m.vocab = d[D_V];
    m.max_pos = d[D_MAXT];
    m.tied_embeddings = 1;
    m.qkv_bias = 1;
    m.norm_eps = h[H_LN_EPS];
    dt_precision pr;
    dt_precision_from_preset(preset, &pr);
    dt_lm *g;
    dt_optim *o;
    dt_error err;
    if (dt_lm_create(&m, &pr, d[D_B], d[D_T], 0, DT_ATTN_FLASH, &g, &err) ||
        dt_optim_create(&pr, P, &o, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        exit(1);
    }
    CHECK_EQ_I64(dt_lm_num_params(g), P);
    dt_convert(dt_lm_params(g), pr.param, params0, DT_DTYPE_FP32, P);
    dt_optim_init_master(o, dt_lm_params(g));
    dt_adamw hp = {h[H_LR], h[H_BETA1], h[H_BETA2], h[H_EPS], h[H_WD]};
    for (int t = 1; t <= d[D_STEPS]; t++) {
        float loss;
        dt_lm_zero_grad(g);
        CHECK(dt_lm_forward(g, inputs, targets, &loss, &err) == DT_OK);
        CHECK(dt_lm_backward(g, 1.0f, &err) == DT_OK);
        CHECK_NEAR(loss, step_losses[t - 1], loss_tol);
        dt_optim_update(o, dt_lm_params(g), dt_lm_grads(g), 0, P, &hp, 1.0, 1, t);
    }
    float *after = malloc(P * sizeof(float));
    if (dt_optim_has_master(o)) memcpy(after, dt_optim_master(o), P * sizeof(float));
    else dt_convert(after, DT_DTYPE_FP32, dt_lm_params(g), pr.param, P);
    double worst = 0, sum = 0;
    for (size_t i = 0; i < P; i++) {
        double e = fabs((double)after[i] - (double)params_after[i]);
        if (e > worst) worst = e;
        sum += e;
    }
    *mean = sum / (double)P;
    free(after);
    dt_optim_free(o);
    dt_lm_free(g);
    return worst;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_engine_adamw_golden GOLDEN_FILE\n");
        return 2;
    }
    size_t len = 0;
    unsigned char *buf = slurp(argv[1], &len);
    if (!buf || len < GOLD_MAGIC_LEN || memcmp(buf, GOLD_MAGIC, GOLD_MAGIC_LEN) != 0) {
        fprintf(stderr, "%s: missing or not a %s file\n", argv[1], GOLD_MAGIC);
        return 1;
    }
    /* Each step moves a parameter by about lr = 1e-2 whatever the gradient's size
     * (Adam normalises), so a parameter whose gradient is tiny amplifies fp32
     * rounding: allow 1% of one step in the worst element, 0.01% on average. */
    double m32, m16;
    double e32 = run(buf, DT_PREC_FP32, 1e-5, &m32);
    printf("fp32: |param - reference| after 3 steps: max %.3g, mean %.3g\n", e32, m32);
    CHECK(e32 < 1e-4);
    CHECK(m32 < 1e-6);
    /* bf16 forward/backward: the fp32 master follows the reference on average */
    double e16 = run(buf, DT_PREC_MIXED_BF16, 2e-2, &m16);
    printf("mixed-bf16 master: max %.3g, mean %.3g\n", e16, m16);
    CHECK(e16 < 3e-2);
    CHECK(m16 < 1e-3);
    free(buf);
    TEST_MAIN_END();
}
