/* test_optim.c — AdamW against values computed by hand (torch.optim.AdamW's
 * formula evaluated in double precision, outside this code base), DeepSpeed's
 * LR schedules at chosen steps, clipping, the fp16 loss-scaler state machine and
 * the deterministic gradient norm. */
#include <math.h>
#include <stdint.h>

#include "dt_dtype.h"
#include "dt_memtrack.h"
#include "dt_optim.h"
#include "dt_test.h"

static dt_precision preset(dt_precision_preset p) {
    dt_precision pr;
    dt_precision_from_preset(p, &pr);
    return pr;
}

/* Expected p after steps 1..3 of AdamW(lr, betas, eps, wd) from p0 with the given
 * gradients; computed in double precision with torch's formula:
 *   p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *   p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) */
static const double P0[2] = {0.5, -1.25};
static const float G[3][2] = {{0.1f, 2.0f}, {-0.2f, 2.0f}, {0.3f, -1.0f}};
static const double EXPECT_A[3] = {0.4895000009999999, 0.49267153603784886, 0.4887464538577364};
static const double EXPECT_B[3] = {-1.3499999995, -1.449999999, -1.5020068910814046};

static void test_adamw_fp32(void) {
    dt_precision pr = preset(DT_PREC_FP32);
    dt_optim *o;
    dt_error err;
    CHECK(dt_optim_create(&pr, 2, &o, &err) == DT_OK);
    CHECK_EQ_I64(dt_mem_current(DT_POOL_DEVICE, DT_MEM_OPTIMIZER), 2 * 2 * 4);   /* m + v fp32 */
    CHECK(!dt_optim_has_master(o));
    float p[2] = {(float)P0[0], (float)P0[1]};
    for (int t = 1; t <= 3; t++) {
        float g[2] = {G[t - 1][0], G[t - 1][1]};
        /* element 0: lr 1e-2, betas (0.9, 0.999), wd 0.1; element 1: lr 0.1, betas (0.9, 0.95), no decay */
        dt_adamw a = {1e-2, 0.9, 0.999, 1e-8, 0.1};
        dt_adamw b = {1e-1, 0.9, 0.95, 1e-8, 0.0};
        dt_optim_update(o, p, g, 0, 1, &a, 1.0, 1, t);
        dt_optim_update(o, p, g, 1, 1, &b, 1.0, 0, t);
        CHECK_NEAR(p[0], EXPECT_A[t - 1], 1e-6);
        CHECK_NEAR(p[1], EXPECT_B[t - 1], 1e-6);
    }
    dt_optim_free(o);
    CHECK_EQ_I64(dt_mem_current(DT_POOL_DEVICE, DT_MEM_OPTIMIZER), 0);
}

/* grad_mul scales the gradient before the update: g * 0.5 with grads 2x gives the same result */
static void test_grad_mul(void) {
    dt_precision pr = preset(DT_PREC_FP32);
    dt_optim *o;
    dt_error err;
    CHECK(dt_optim_create(&pr, 1, &o, &err) == DT_OK);
    float p = (float)P0[0];
    for (int t = 1; t <= 3; t++) {
        float g = 2.0f * G[t - 1][0];
        dt_adamw a = {1e-2, 0.9, 0.999, 1e-8, 0.1};
        dt_optim_update(o, &p, &g, 0, 1, &a, 0.5, 1, t);
        CHECK_NEAR(p, EXPECT_A[t - 1], 1e-6);
    }
    dt_optim_free(o);
}

/* mixed-bf16: the fp32 master follows the fp32 trajectory; the bf16 params are
 * the master rounded to nearest even. */
static void test_adamw_mixed(void) {
    dt_precision pr = preset(DT_PREC_MIXED_BF16);
    dt_optim *o;
    dt_error err;
    CHECK(dt_optim_create(&pr, 2, &o, &err) == DT_OK);
    CHECK(dt_optim_has_master(o));
    CHECK_EQ_I64(dt_mem_current(DT_POOL_DEVICE, DT_MEM_OPTIMIZER), 2 * 12);   /* K = 12 bytes/param */
    dt_bf16 p[2] = {dt_f32_to_bf16((float)P0[0]), dt_f32_to_bf16((float)P0[1])};
    dt_optim_init_master(o, p);
    CHECK(dt_optim_master(o)[1] == -1.25f);
    for (int t = 1; t <= 3; t++) {
        dt_bf16 g[2] = {dt_f32_to_bf16(G[t - 1][0]), dt_f32_to_bf16(G[t - 1][1])};
        dt_adamw a = {1e-2, 0.9, 0.999, 1e-8, 0.1};
        dt_adamw b = {1e-1, 0.9, 0.95, 1e-8, 0.0};
        dt_optim_update(o, p, g, 0, 1, &a, 1.0, 1, t);
        dt_optim_update(o, p, g, 1, 1, &b, 1.0, 0, t);
        /* bf16 gradients 0.1 -> 0.10009765625 etc.: a looser tolerance on the master */
        CHECK_NEAR(dt_optim_master(o)[0], EXPECT_A[t - 1], 2e-4);
        CHECK_NEAR(dt_optim_master(o)[1], EXPECT_B[t - 1], 1e-5);
        CHECK(p[0] == dt_f32_to_bf16(dt_optim_master(o)[0]));
        CHECK(p[1] == dt_f32_to_bf16(dt_optim_master(o)[1]));
    }
    dt_optim_free(o);
}

/* pure-bf16: bf16 moments (4 bytes/param), no master, params updated in place */
static void test_adamw_pure_bf16(void) {
    dt_precision pr = preset(DT_PREC_PURE_BF16);
    dt_optim *o;
    dt_error err;
    CHECK(dt_optim_create(&pr, 2, &o, &err) == DT_OK);
    CHECK(!dt_optim_has_master(o));
    CHECK(dt_optim_moment_dtype(o) == DT_DTYPE_BF16);
    CHECK_EQ_I64(dt_mem_current(DT_POOL_DEVICE, DT_MEM_OPTIMIZER), 2 * 4);
    dt_bf16 p[2] = {dt_f32_to_bf16((float)P0[0]), dt_f32_to_bf16((float)P0[1])};
    for (int t = 1; t <= 3; t++) {
        dt_bf16 g[2] = {dt_f32_to_bf16(G[t - 1][0]), dt_f32_to_bf16(G[t - 1][1])};
        dt_adamw b = {1e-1, 0.9, 0.95, 1e-8, 0.0};
        dt_optim_update(o, p, g, 0, 2, &b, 1.0, 0, t);
        /* element 1 moves by ~0.1 per step: visible at bf16 resolution (2^-7 relative) */
        CHECK_NEAR(dt_bf16_to_f32(p[1]), EXPECT_B[t - 1], 1.5e-2);
    }
    dt_optim_free(o);
}

static void test_create_errors(void) {
    dt_precision pr = preset(DT_PREC_FP32);
    dt_optim *o;
    dt_error err;
    CHECK(dt_optim_create(&pr, 0, &o, &err) == DT_EINVAL);
    pr.param = DT_DTYPE_FP16;   /* fp16 params without a master cannot be updated precisely */
    CHECK(dt_optim_create(&pr, 4, &o, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "mixed-fp16") != NULL);
}

/* ---- schedules: deepspeed/runtime/lr_schedules.py formulas, values computed by hand ----
 * Step t (t steps applied before it) uses the scheduler's value at last_batch_iteration t - 1
 * (engine.py _take_model_step steps it after the optimizer); t = 0 gets what __init__ set.
 * Every step against DeepSpeed's own classes: test_lr_golden.c. */
static void test_schedules(void) {
    dt_schedule s = {DT_SCHED_WARMUP_LR, 100, 10, 0, 1e-5, 0.0};
    const int64_t t1[] = {0, 1, 2, 6, 10, 11, 51};
    const double e1[] = {1e-5, 1e-5, 0.0003080196957073414, 0.0007803697378798071, 1e-3, 1e-3, 1e-3};
    for (int i = 0; i < 7; i++) CHECK_NEAR(dt_schedule_lr(&s, 1e-3, t1[i]), e1[i], 1e-12);

    s = (dt_schedule){DT_SCHED_WARMUP_DECAY_LR, 100, 10, 1, 0.0, 0.0};
    const int64_t t2[] = {0, 1, 6, 11, 56, 101, 121};
    const double e2[] = {0.0, 0.0, 5e-4, 1e-3, 5e-4, 0.0, 0.0};
    for (int i = 0; i < 7; i++) CHECK_NEAR(dt_schedule_lr(&s, 1e-3, t2[i]), e2[i], 1e-12);

    /* WarmupCosineLR: __init__ sets ratio 0 (not warmup_min_ratio); the ratio stays at
     * cos_min_ratio from the end on (cosine progress clamped to 1) */
    s = (dt_schedule){DT_SCHED_WARMUP_COSINE_LR, 100, 10, 1, 0.1, 0.01};
    const int64_t t3[] = {0, 1, 6, 11, 12, 56, 100, 101, 150};
    const double e3[] = {0.0, 1e-4, 5.5e-4, 0.0009996984593744526, 0.0009987942048786129,
                         0.00048772474913226217, 1e-5, 1e-5, 1e-5};
    for (int i = 0; i < 9; i++) CHECK_NEAR(dt_schedule_lr(&s, 1e-3, t3[i]), e3[i], 1e-12);

    s = (dt_schedule){DT_SCHED_CONSTANT, 100, 10, 1, 0.0, 0.0};
    CHECK_NEAR(dt_schedule_lr(&s, 3e-4, 0), 3e-4, 1e-15);
    CHECK_NEAR(dt_schedule_lr(&s, 3e-4, 99), 3e-4, 1e-15);

    /* warmup_num_steps is clamped to 2: W = 0 still warms up over 2 steps */
    s = (dt_schedule){DT_SCHED_WARMUP_LR, 100, 0, 1, 0.0, 0.0};
    CHECK_NEAR(dt_schedule_lr(&s, 1e-3, 0), 0.0, 1e-15);
    CHECK_NEAR(dt_schedule_lr(&s, 1e-3, 1), 0.0, 1e-15);
    CHECK_NEAR(dt_schedule_lr(&s, 1e-3, 2), 5e-4, 1e-15);
    CHECK_NEAR(dt_schedule_lr(&s, 1e-3, 3), 1e-3, 1e-15);
    CHECK_STR(dt_schedule_name(DT_SCHED_WARMUP_COSINE_LR), "WarmupCosineLR");
}

static void test_clip(void) {
    /* no clipping below the threshold: divisor = loss scale */
    CHECK_NEAR(dt_clip_divisor(0.5, 1.0, 1.0), 1.0, 1e-15);
    /* norm 4 (unscaled), max 1: clip = 4 + 1e-6 */
    CHECK_NEAR(dt_clip_divisor(4.0, 1.0, 1.0), 4.000001, 1e-12);
    /* scaled norm 4096 at scale 1024 = unscaled 4, max 2: clip = (4 + 1e-6) / 2 */
    CHECK_NEAR(dt_clip_divisor(4096.0, 1024.0, 2.0), 1024.0 * 2.0000005, 1e-9);
    /* max_norm 0 disables clipping */
    CHECK_NEAR(dt_clip_divisor(1e6, 8.0, 0.0), 8.0, 1e-15);
}

/* DynamicLossScaler: initial 2^4, window 3, hysteresis 2, min 1 */
static void test_loss_scaler(void) {
    dt_precision pr = preset(DT_PREC_MIXED_FP16);
    pr.loss_scale = 0;
    pr.initial_scale_power = 4;
    pr.loss_scale_window = 3;
    pr.hysteresis = 2;
    pr.min_loss_scale = 1;
    dt_loss_scaler s;
    dt_loss_scaler_init(&s, &pr);
    CHECK(s.dynamic);
    CHECK_NEAR(s.cur_scale, 16.0, 0);
    char msg[256];
    dt_error err;
    /* iter 0: overflow with hysteresis 2 -> hysteresis 1, scale kept */
    CHECK(dt_loss_scaler_update(&s, 1, msg, sizeof msg, &err) == DT_OK);
    CHECK_NEAR(s.cur_scale, 16.0, 0);
    CHECK_EQ_I64(s.cur_hysteresis, 1);
    CHECK(strstr(msg, "Reducing hysteresis to 1") != NULL);
    /* iter 1: overflow again -> halve */
    CHECK(dt_loss_scaler_update(&s, 1, msg, sizeof msg, &err) == DT_OK);
    CHECK_NEAR(s.cur_scale, 8.0, 0);
    CHECK(strstr(msg, "Attempted loss scale: 16, reducing to 8") != NULL);
    /* iters 2, 3: clean, (iter - last_overflow 1) % 3 != 0 -> unchanged */
    CHECK(dt_loss_scaler_update(&s, 0, msg, sizeof msg, &err) == DT_OK);
    CHECK(msg[0] == '\0');
    CHECK(dt_loss_scaler_update(&s, 0, msg, sizeof msg, &err) == DT_OK);
    CHECK_NEAR(s.cur_scale, 8.0, 0);
    CHECK_EQ_I64(s.cur_hysteresis, 1);
    /* iter 4: 4 - 1 = 3 -> double, hysteresis restored */
    CHECK(dt_loss_scaler_update(&s, 0, msg, sizeof msg, &err) == DT_OK);
    CHECK_NEAR(s.cur_scale, 16.0, 0);
    CHECK_EQ_I64(s.cur_hysteresis, 2);
    /* iter 7: next doubling */
    for (int i = 0; i < 3; i++) dt_loss_scaler_update(&s, 0, msg, sizeof msg, &err);
    CHECK_NEAR(s.cur_scale, 32.0, 0);
    CHECK_EQ_I64(s.cur_iter, 8);

    /* at the minimum scale an overflow is an error, as DeepSpeed raises */
    pr.initial_scale_power = 0;
    pr.hysteresis = 1;
    dt_loss_scaler_init(&s, &pr);
    CHECK(dt_loss_scaler_update(&s, 1, msg, sizeof msg, &err) == DT_ERUNTIME);
    CHECK(strstr(err.msg, "minimum") != NULL);

    /* bf16 / fp32: static 1.0 */
    pr = preset(DT_PREC_MIXED_BF16);
    dt_loss_scaler_init(&s, &pr);
    CHECK(!s.dynamic);
    CHECK_NEAR(s.cur_scale, 1.0, 0);
    /* fp16 with a static scale */
    pr = preset(DT_PREC_MIXED_FP16);
    pr.loss_scale = 128;
    dt_loss_scaler_init(&s, &pr);
    CHECK(!s.dynamic);
    CHECK_NEAR(s.cur_scale, 128.0, 0);
}

static void test_grad_sumsq(void) {
    enum { N = 10007 };
    static float g[N];
    double expect = 0;
    for (int i = 0; i < N; i++) {
        g[i] = (float)((i % 13) - 6) * 0.01f;
        expect += (double)g[i] * g[i];
    }
    int nf = 1;
    CHECK_NEAR(dt_grad_sumsq(g, DT_DTYPE_FP32, N, &nf), expect, 1e-12);
    CHECK(nf == 0);
    g[5000] = INFINITY;
    dt_grad_sumsq(g, DT_DTYPE_FP32, N, &nf);
    CHECK(nf == 1);
    g[5000] = NAN;
    dt_grad_sumsq(g, DT_DTYPE_FP32, N, &nf);
    CHECK(nf == 1);
    static dt_fp16 h[N];
    for (int i = 0; i < N; i++) h[i] = dt_f32_to_fp16(1.0f);
    CHECK_NEAR(dt_grad_sumsq(h, DT_DTYPE_FP16, N, &nf), (double)N, 1e-12);
    CHECK(nf == 0);
    h[3] = 0x7c00;   /* fp16 +inf */
    dt_grad_sumsq(h, DT_DTYPE_FP16, N, &nf);
    CHECK(nf == 1);
}

int main(void) {
    test_adamw_fp32();
    test_grad_mul();
    test_adamw_mixed();
    test_adamw_pure_bf16();
    test_create_errors();
    test_schedules();
    test_clip();
    test_loss_scaler();
    test_grad_sumsq();
    TEST_MAIN_END();
}
