/* lora_golden.h — what the C tests against PEFT's LoRA / QLoRA goldens share
 * (tests/kernels/test_lora.c, test_qlora.c; scripts/gen_lora_goldens.py, gen_qlora_goldens.py):
 * the golden's tensors and metadata, the micro-batches, and the checks of the forward (logits,
 * loss, every adapter gradient) and of the training loop (accumulation, global-norm clipping,
 * WarmupDecayLR, AdamW with decay on the adapters: the loop engine/run/train.c runs).
 * Include after dt_test.h. Tolerances as test_llama.c's (fp32 against torch's fp32): logits 2e-5
 * abs, losses and norms 1e-5 relative, gradients 1e-4 of each tensor's largest, adapters after the
 * steps 1e-4 abs. A golden run in bf16 (lg_case.bf16: the "-bf16" files, which hold ref.*, the same
 * model in fp32 on the same bf16 values) is held to accuracy instead (test_lora.c's header states
 * the reasoning): every quantity within LG_BF16_VS_PEFT (2) times PEFT + autocast's own distance
 * from ref.*, and within LG_BF16_REL_CAP (8 x bf16's unit roundoff 2^-8) of its size. */
#ifndef DT_LORA_GOLDEN_H
#define DT_LORA_GOLDEN_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_lm.h"
#include "dt_optim.h"
#include "dt_safetensors.h"
#include "golden_util.h"

#define LG_LOGIT_TOL 2e-5
#define LG_LOSS_RTOL 1e-5
#define LG_GRAD_RTOL 1e-4
#define LG_AFTER_TOL 1e-4
#define LG_BF16_VS_PEFT 2.0            /* dtrun's distance from the exact answer / PEFT's */
#define LG_BF16_REL_CAP (8.0 / 256.0)  /* 8 x bf16's unit roundoff 2^-8, of the quantity's largest */

/* the golden's tensor name (numel 0: any size); exits the test when it is missing */
static inline const void *lg_tensor(dt_st_file *f, const char *name, uint64_t numel) {
    const dt_st_tensor *t = dt_st_find(f, name);
    if (!t || (numel && dt_st_numel(t) != numel)) {
        fprintf(stderr, "golden: tensor %s missing or of another size\n", name);
        exit(1);
    }
    return dt_st_data(f, t);
}

static inline double lg_meta(dt_st_file *f, const char *key) {
    const char *v = dt_st_metadata(f, key);
    if (!v) {
        fprintf(stderr, "golden: metadata %s missing\n", key);
        exit(1);
    }
    return atof(v);
}

/* every trained tensor against the golden's prefix.<name>: max abs diff (rel: of each
 * tensor's largest reference) */
static inline double lg_worst_vs(const dt_lm *g, const float *flat, dt_st_file *f, const char *prefix, int rel) {
    double worst = 0;
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        char name[DT_ST_NAME_MAX];
        snprintf(name, sizeof name, "%s.%s", prefix, t->name);
        double rm;
        double e = golden_max_abs_diff(flat + t->offset, lg_tensor(f, name, t->numel), t->numel, &rm);
        if (rel) e /= rm > 0 ? rm : 1.0;
        if (e > worst) worst = e;
    }
    return worst;
}

/* the golden's tensor prefix + name */
static inline const float *lg_ref(dt_st_file *f, const char *prefix, const char *name, uint64_t numel) {
    char key[DT_ST_NAME_MAX];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    return lg_tensor(f, key, numel);
}

/* every trained tensor's golden a.<name> against b.<name>: max abs diff (rel: of each of b's largest) */
static inline double lg_worst_golden(const dt_lm *g, dt_st_file *f, const char *a, const char *b, int rel) {
    double worst = 0;
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        char na[DT_ST_NAME_MAX], nb[DT_ST_NAME_MAX];
        snprintf(na, sizeof na, "%s.%s", a, t->name);
        snprintf(nb, sizeof nb, "%s.%s", b, t->name);
        double rm;
        double e = golden_max_abs_diff(lg_tensor(f, na, t->numel), lg_tensor(f, nb, t->numel), t->numel, &rm);
        if (rel) e /= rm > 0 ? rm : 1.0;
        if (e > worst) worst = e;
    }
    return worst;
}

/* largest |x| over n */
static inline double lg_max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* worst relative difference of a[0..n) (b64, or b) from it */
static inline double lg_worst_rel(const float *a, const double *b64, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = b64 ? b64[i] : (double)b[i], e = fabs(x - a[i]) / fabs(a[i]);
        w = e > w ? e : w;
    }
    return w;
}

/* bf16: dtrun's error `ours` and PEFT + autocast's `peft`, both against the fp32 run on the same
 * bf16 values, of a quantity whose largest reference magnitude is `scale` */
static inline void lg_check_bf16(const char *what, double ours, double peft, double scale) {
    printf("  bf16 %-22s dtrun %.3g, PEFT+autocast %.3g from the exact (bound %.3g)\n", what, ours, peft,
           LG_BF16_VS_PEFT * peft);
    CHECK(ours <= LG_BF16_VS_PEFT * peft);
    CHECK(ours <= LG_BF16_REL_CAP * scale);
}

/* micro-batch (s, a) of seq [steps, accum, B, T+1] into inputs / targets [B, T] */
static inline void lg_micro(const int32_t *seq, int64_t accum, int64_t B, int64_t T, int64_t s, int64_t a,
                            int32_t *in, int32_t *tg) {
    const int32_t *q = seq + ((s * accum + a) * B) * (T + 1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            in[b * T + t] = q[b * (T + 1) + t];
            tg[b * T + t] = q[b * (T + 1) + t + 1];
        }
}

/* The trained set (the adapters) in params (host memory laid out as g's trained set) set to
 * the golden's init.<name>. */
static inline void lg_set_adapters_into(const dt_lm *g, dt_st_file *f, float *params) {
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        char key[DT_ST_NAME_MAX];
        snprintf(key, sizeof key, "init.%s", t->name);
        CHECK(strstr(t->name, ".lora_A.weight") || strstr(t->name, ".lora_B.weight"));
        CHECK(t->flags & DT_TENSOR_ADAPTER);
        memcpy(params + t->offset, lg_tensor(f, key, t->numel), t->numel * sizeof(float));
    }
}

/* The same into g's own parameters (host-addressable). */
static inline void lg_set_adapters(dt_lm *g, dt_st_file *f) { lg_set_adapters_into(g, f, dt_lm_params(g)); }

/* What a case runs: the golden, its batch, LoRA dropout's key seed (dropping: on), and whether it
 * ran in bf16 (metadata compute_dtype "bf16": checked against ref.*). */
typedef struct {
    dt_st_file *f;
    const char *label;
    int64_t B, T, V, steps, accum;
    const int32_t *seq;   /* [steps, accum, B, T+1] */
    uint64_t drop_seed;
    int bf16;
} lg_case;

/* The case of golden file `file` over the base model directory dir (*m its config.json); exits
 * the test when either cannot be read. Close c.f with dt_st_close. */
static inline lg_case lg_open(const char *dir, const char *file, const char *label, dt_model *m) {
    golden_model_of(dir, m);
    dt_error err = {0};
    dt_st_file *f;
    if (dt_st_open(file, &f, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    const char *cd = dt_st_metadata(f, "compute_dtype");
    lg_case c = {f, label, (int64_t)lg_meta(f, "B"), (int64_t)lg_meta(f, "T"), m->vocab, (int64_t)lg_meta(f, "steps"),
                 (int64_t)lg_meta(f, "accum"), NULL, 0, cd && !strcmp(cd, "bf16")};
    c.seq = lg_tensor(f, "seq", (uint64_t)(c.steps * c.accum * c.B * (c.T + 1)));
    const char *ds = dt_st_metadata(f, "drop_seed");
    c.drop_seed = ds ? strtoull(ds, NULL, 10) : 0;
    return c;
}

/* The forward of micro-batch (0, 0): logits and loss; its backward: every adapter's gradient.
 * Returns the loss's relative error (bf16: from ref.*, which the training check adds to its losses). */
static inline double lg_check_forward(dt_lm *g, const lg_case *c, int32_t *in, int32_t *tg) {
    dt_error err = {0};
    float loss = 0.0f;
    const char *ref = c->bf16 ? "ref." : "";
    lg_micro(c->seq, c->accum, c->B, c->T, 0, 0, in, tg);
    dt_lm_zero_grad(g);
    dt_lm_set_dropout(g, 1, dt_lm_dropout_key(c->drop_seed, 0, 0));
    CHECK(dt_lm_forward(g, in, tg, &loss, &err) == DT_OK);
    double rm;
    const size_t nl = (size_t)(c->B * c->T * c->V);
    const float *want = lg_ref(c->f, ref, "logits", nl);
    const double le = golden_max_abs_diff(dt_lm_logits(g), want, nl, &rm);
    const float gl = lg_ref(c->f, ref, "loss", 1)[0];
    CHECK(dt_lm_backward(g, 1.0f, &err) == DT_OK);
    const double ge = lg_worst_vs(g, dt_lm_grads(g), c->f, c->bf16 ? "ref.grad" : "grad", 1);
    printf("%s: logits |diff| %.3g, loss %.7f vs %.7f, adapter gradients worst %.3g of each tensor's largest\n",
           c->label, le, loss, gl, ge);
    if (c->bf16) {
        lg_check_bf16("logits", le, golden_max_abs_diff(lg_tensor(c->f, "logits", nl), want, nl, &rm),
                      lg_max_abs(want, nl));
        lg_check_bf16("gradients (relative)", ge, lg_worst_golden(g, c->f, "grad", "ref.grad", 1), 1.0);
    } else {
        CHECK(le <= LG_LOGIT_TOL);
        CHECK(fabs(loss - gl) <= LG_LOSS_RTOL * fabs(gl));
        CHECK(ge <= LG_GRAD_RTOL);
    }
    return fabs(loss - gl) / fabs(gl);
}

/* The training loop: step_losses, step_norms and the adapters after the steps. pr: the trained
 * set's precision (dt_lm_trained_precision); loss0: lg_check_forward's loss error. */
static inline void lg_check_training(dt_lm *g, const lg_case *c, const dt_precision *pr, double loss0, int32_t *in,
                                     int32_t *tg) {
    dt_error err = {0};
    float *params = dt_lm_params(g), *grads = dt_lm_grads(g);
    dt_optim *opt;
    CHECK(dt_optim_create(pr, dt_lm_num_params(g), &opt, &err) == DT_OK);
    dt_optim_init_master(opt, params);
    dt_schedule sched = {.kind = DT_SCHED_WARMUP_DECAY_LR, .total_steps = c->steps,
                         .warmup_steps = (int64_t)lg_meta(c->f, "warmup"), .warmup_linear = 1};
    const double lr = lg_meta(c->f, "lr"), max_norm = lg_meta(c->f, "max_norm");
    const char *ref = c->bf16 ? "ref." : "";
    const float *want = lg_ref(c->f, ref, "step_losses", (uint64_t)c->steps);
    const float *want_norm = lg_ref(c->f, ref, "step_norms", (uint64_t)c->steps);
    double worst_loss = 0, worst_norm = 0;
    for (int64_t s = 0; s < c->steps; s++) {
        dt_lm_zero_grad(g);
        double total = 0;
        for (int64_t a = 0; a < c->accum; a++) {
            float loss = 0.0f;
            lg_micro(c->seq, c->accum, c->B, c->T, s, a, in, tg);
            dt_lm_set_dropout(g, 1, dt_lm_dropout_key(c->drop_seed, s, a));
            CHECK(dt_lm_forward(g, in, tg, &loss, &err) == DT_OK);
            CHECK(dt_lm_backward(g, 1.0f / (float)c->accum, &err) == DT_OK);
            total += loss;
        }
        const double norm = sqrt(dt_lm_grad_sumsq(g));
        const double el = fabs(total / (double)c->accum - want[s]) / fabs(want[s]);
        const double en = fabs(norm - want_norm[s]) / want_norm[s];
        worst_loss = el > worst_loss ? el : worst_loss;
        worst_norm = en > worst_norm ? en : worst_norm;
        dt_adamw hp = {dt_schedule_lr(&sched, lr, s), lg_meta(c->f, "beta1"), lg_meta(c->f, "beta2"),
                       lg_meta(c->f, "eps"), lg_meta(c->f, "weight_decay")};
        const double div = dt_clip_divisor(norm, 1.0, max_norm);
        for (int i = 0; i < dt_lm_num_tensors(g); i++) {
            const dt_tensor_info *t = dt_lm_tensor(g, i);
            dt_optim_update(opt, params, grads, t->offset, t->numel, &hp, 1.0 / div, (t->flags & DT_TENSOR_DECAY) != 0,
                            s + 1);
        }
    }
    const double ae = lg_worst_vs(g, params, c->f, c->bf16 ? "ref.after" : "after", c->bf16);
    printf("%s: %lld steps x %lld micro-batches: losses worst %.3g relative, norms %.3g, adapters after %.3g\n",
           c->label, (long long)c->steps, (long long)c->accum, worst_loss, worst_norm, ae);
    if (c->bf16) {
        /* the first micro-batch's loss joins the steps' (test_lora.c: the worst of many is PEFT's error's scale) */
        const size_t n = (size_t)c->steps;
        lg_check_bf16("losses (relative)", loss0 > worst_loss ? loss0 : worst_loss,
                      lg_worst_rel(want, NULL, lg_tensor(c->f, "step_losses", n), n), 1.0);
        lg_check_bf16("step norms (relative)", worst_norm,
                      lg_worst_rel(want_norm, NULL, lg_tensor(c->f, "step_norms", n), n), 1.0);
        lg_check_bf16("adapters after (relative)", ae, lg_worst_golden(g, c->f, "after", "ref.after", 1), 1.0);
    } else {
        CHECK(worst_loss <= LG_LOSS_RTOL);
        CHECK(worst_norm <= LG_LOSS_RTOL);
        CHECK(ae <= LG_AFTER_TOL);
    }
    dt_optim_free(opt);
}

#endif
