/* lora_golden.h — what the C tests against PEFT's LoRA / QLoRA goldens share
 * (tests/kernels/test_lora.c, test_qlora.c; scripts/gen_lora_goldens.py, gen_qlora_goldens.py):
 * the golden's tensors and metadata, the micro-batches, and the checks of the forward (logits,
 * loss, every adapter gradient) and of the training loop (accumulation, global-norm clipping,
 * WarmupDecayLR, AdamW with decay on the adapters: the loop engine/run/train.c runs).
 * Include after dt_test.h. Tolerances as test_llama.c's (fp32 against torch's fp32): logits 2e-5
 * abs, losses and norms 1e-5 relative, gradients 1e-4 of each tensor's largest, adapters after the
 * steps 1e-4 abs. */
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

/* What a case runs: the golden, its batch, and LoRA dropout's key seed (dropping: on). */
typedef struct {
    dt_st_file *f;
    const char *label;
    int64_t B, T, V, steps, accum;
    const int32_t *seq;   /* [steps, accum, B, T+1] */
    uint64_t drop_seed;
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
    lg_case c = {f, label, (int64_t)lg_meta(f, "B"), (int64_t)lg_meta(f, "T"), m->vocab, (int64_t)lg_meta(f, "steps"),
                 (int64_t)lg_meta(f, "accum"), NULL, 0};
    c.seq = lg_tensor(f, "seq", (uint64_t)(c.steps * c.accum * c.B * (c.T + 1)));
    const char *ds = dt_st_metadata(f, "drop_seed");
    c.drop_seed = ds ? strtoull(ds, NULL, 10) : 0;
    return c;
}

/* The forward of micro-batch (0, 0): logits and loss; its backward: every adapter's gradient. */
static inline void lg_check_forward(dt_lm *g, const lg_case *c, int32_t *in, int32_t *tg) {
    dt_error err = {0};
    float loss = 0.0f;
    lg_micro(c->seq, c->accum, c->B, c->T, 0, 0, in, tg);
    dt_lm_zero_grad(g);
    dt_lm_set_dropout(g, 1, dt_lm_dropout_key(c->drop_seed, 0, 0));
    CHECK(dt_lm_forward(g, in, tg, &loss, &err) == DT_OK);
    double rm;
    const size_t nl = (size_t)(c->B * c->T * c->V);
    const double le = golden_max_abs_diff(dt_lm_logits(g), lg_tensor(c->f, "logits", nl), nl, &rm);
    const float gl = ((const float *)lg_tensor(c->f, "loss", 1))[0];
    CHECK(le <= LG_LOGIT_TOL);
    CHECK(fabs(loss - gl) <= LG_LOSS_RTOL * fabs(gl));
    CHECK(dt_lm_backward(g, 1.0f, &err) == DT_OK);
    const double ge = lg_worst_vs(g, dt_lm_grads(g), c->f, "grad", 1);
    CHECK(ge <= LG_GRAD_RTOL);
    printf("%s: logits |diff| %.3g, loss %.7f vs %.7f, adapter gradients worst %.3g of each tensor's largest\n",
           c->label, le, loss, gl, ge);
}

/* The training loop: step_losses, step_norms and the adapters after the steps. */
static inline void lg_check_training(dt_lm *g, const lg_case *c, const dt_precision *pr, int32_t *in, int32_t *tg) {
    dt_error err = {0};
    float *params = dt_lm_params(g), *grads = dt_lm_grads(g);
    dt_optim *opt;
    CHECK(dt_optim_create(pr, dt_lm_num_params(g), &opt, &err) == DT_OK);
    dt_optim_init_master(opt, params);
    dt_schedule sched = {.kind = DT_SCHED_WARMUP_DECAY_LR, .total_steps = c->steps,
                         .warmup_steps = (int64_t)lg_meta(c->f, "warmup"), .warmup_linear = 1};
    const double lr = lg_meta(c->f, "lr"), max_norm = lg_meta(c->f, "max_norm");
    const float *want = lg_tensor(c->f, "step_losses", (uint64_t)c->steps);
    const float *want_norm = lg_tensor(c->f, "step_norms", (uint64_t)c->steps);
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
    const double ae = lg_worst_vs(g, params, c->f, "after", 0);
    printf("%s: %lld steps x %lld micro-batches: losses worst %.3g relative, norms %.3g, adapters after %.3g\n",
           c->label, (long long)c->steps, (long long)c->accum, worst_loss, worst_norm, ae);
    CHECK(worst_loss <= LG_LOSS_RTOL);
    CHECK(worst_norm <= LG_LOSS_RTOL);
    CHECK(ae <= LG_AFTER_TOL);
    dt_optim_free(opt);
}

#endif
