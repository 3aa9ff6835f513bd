/* objective_rm.c — reward-model training in dtrun (docs/objectives.md "In dtrun"), TRL 1.16's
 * RewardTrainer step on AutoModelForSequenceClassification(num_labels=1): the policy is the
 * model with transformers' sequence-classification head "score.weight" [1, C] (no bias) in
 * place of the LM head (dt_model.num_labels = 1), read from an HF sequence-classification
 * directory or, when output.init lacks it (a causal LM), drawn N(0, initializer_range) from the
 * plan's seed; a pair's score is the head's logit at the last token that is not the pad id
 * (LlamaForSequenceClassification), the loss -log σ(r_chosen - r_rejected) (dt_rm_loss), its
 * gradient put on those two logits. Metrics: TRL's accuracy, margin, min / mean / max reward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_finetune.h"
#include "dt_objloss.h"
#include "objective_pairs.h"

enum { RM_LOSS = 0, RM_NMETRICS = 6 };

struct dt_objrun {
    objpairs p;
    int64_t *last;              /* [2B] the scored position of each row */
    float *r[2], *d[2];         /* [B] chosen / rejected scores and dL/dscore */
};

static const char *const k_names[RM_NMETRICS] = {"loss", "accuracy", "margin", "min_reward", "mean_reward",
                                                 "max_reward"};
static const char *const k_eval_names[RM_NMETRICS] = {"eval_loss", "eval_accuracy", "eval_margin",
                                                      "eval_min_reward", "eval_mean_reward", "eval_max_reward"};

static int rm_check(const dt_plan *p, dt_error *err) {
    if (p->objective.rm_head != DT_RM_HEAD_SCORE)
        return dt_errorf(err, DT_EINVAL, "objective.rm_head %s (LLaMA-Factory's value head on the causal LM) is not "
                         "built in dtrun's rm, the score head (TRL's RewardTrainer) is: re-plan with --rm-head score, "
                         "or run it with LLaMA-Factory (dtplan export)", dt_rm_head_name(p->objective.rm_head));
    /* LoRA: the score head trained whole beside the adapters, PEFT's SEQ_CLS modules_to_save
     * (runadapter.c writes it so); QLoRA's quantised base and 16-bit parameters are not tested with it */
    if (p->finetune.method == DT_FT_QLORA ||
        (p->finetune.method == DT_FT_LORA && p->precision.param != DT_DTYPE_FP32))
        return dt_errorf(err, DT_EINVAL, "dtrun's rm trains LoRA with fp32 parameters (--precision fp32), not %s%s: "
                         "re-plan it so, or run it with TRL + PEFT (dtplan export)",
                         p->finetune.method == DT_FT_QLORA ? "QLoRA" : "LoRA at ",
                         p->finetune.method == DT_FT_QLORA ? "" : dt_dtype_name(p->precision.param));
    if (p->model.family != DT_FAMILY_LLAMA)
        return dt_errorf(err, DT_EINVAL, "dtrun's rm builds the sequence-classification head for the llama family "
                         "(Llama, Qwen2, Qwen3), not %s", dt_family_name(p->model.family));
    if (p->cluster.device != DT_DEVICE_CPU)
        return dt_errorf(err, DT_EINVAL, "dtrun's rm runs on the CPU device only in this build; re-plan with --device "
                         "cpu or run it with TRL (dtplan export)");
    return DT_OK;
}

/* AutoModelForSequenceClassification(num_labels=1): TRL's RewardTrainer model. */
static void rm_configure(const dt_plan *p, dt_model *m) {
    (void)p;
    m->num_labels = 1;
}

static int rm_open(const dt_objrun_ctx *c, dt_lm *policy, dt_objrun **out, dt_error *err) {
    (void)policy;
    dt_objrun *o = calloc(1, sizeof *o);
    if (!o) return dt_errorf(err, DT_ENOMEM, "out of memory");
    *out = o;
    int rc = objpairs_open(&o->p, c, err);
    if (rc) return rc;
    c->model->pad_token_id = dt_pairset_pad_id(o->p.train);   /* the scored position's pad, exported */
    const int64_t B = o->p.B;
    o->last = malloc((size_t)(2 * B) * sizeof *o->last);
    for (int s = 0; s < 2; s++) {
        o->r[s] = malloc((size_t)B * sizeof(float));
        o->d[s] = malloc((size_t)B * sizeof(float));
        if (!o->r[s] || !o->d[s]) return dt_errorf(err, DT_ENOMEM, "out of memory");
    }
    return o->last ? DT_OK : dt_errorf(err, DT_ENOMEM, "out of memory");
}

/* The forward over the batch and the loss; o->d holds dL/dscore. */
static int forward_pair(dt_objrun *o, dt_lm *g, dt_rm_metrics *m, dt_error *err) {
    const int64_t B = o->p.B, T = o->p.T;
    const int32_t pad = dt_pairset_pad_id(o->p.train);
    if (dt_lm_forward(g, o->p.ids, NULL, NULL, err)) return err->code;
    const float *score = dt_lm_logits(g);   /* [2B, T, 1] */
    for (int64_t row = 0; row < 2 * B; row++) {
        o->last[row] = dt_obj_last_nonpad(o->p.ids + row * T, T, pad);
        o->r[row / B][row % B] = score[row * T + o->last[row]];
    }
    return dt_rm_loss(o->r[0], o->r[1], NULL, B, 0.0, o->d[0], o->d[1], m, err);
}

static void metrics_row(const dt_rm_metrics *m, double *v) {
    const double row[RM_NMETRICS] = {m->loss, m->accuracy, m->margin, m->min_reward, m->mean_reward, m->max_reward};
    memcpy(v, row, sizeof row);
}

static int rm_micro(dt_objrun *o, dt_lm *g, float grad_scale, double *loss, dt_error *err) {
    dt_rm_metrics m;
    if (objpairs_next(&o->p, err) || forward_pair(o, g, &m, err)) return err->code;
    const int64_t B = o->p.B, T = o->p.T;
    float *dscore = dt_lm_logits_mut(g);   /* [2B, T, 1]: dL/dlogits, 0 but at the scored positions */
    memset(dscore, 0, (size_t)(2 * B * T) * sizeof(float));
    for (int64_t row = 0; row < 2 * B; row++) dscore[row * T + o->last[row]] = o->d[row / B][row % B] * grad_scale;
    if (dt_lm_backward_logits(g, err)) return err->code;
    double v[RM_NMETRICS];
    metrics_row(&m, v);
    objpairs_add(&o->p, v, RM_NMETRICS);
    *loss = m.loss;
    return DT_OK;
}

static int rm_step_metrics(dt_objrun *o, dt_objrun_metrics *m, dt_error *err) {
    return objpairs_step_metrics(&o->p, k_names, RM_NMETRICS, m, err);
}

/* One held-out batch's metrics (objpairs_evaluate). */
static int eval_batch(dt_objrun *o, dt_lm *g, double *v, dt_error *err) {
    dt_rm_metrics m;
    if (forward_pair(o, g, &m, err)) return err->code;
    metrics_row(&m, v);
    return DT_OK;
}

static int rm_evaluate(dt_objrun *o, dt_lm *g, double *loss, dt_objrun_metrics *out, dt_error *err) {
    return objpairs_evaluate(o, g, eval_batch, RM_NMETRICS, k_eval_names, loss, out, err);
}

static void rm_free(dt_objrun *o) {
    if (!o) return;
    objpairs_free(&o->p);
    free(o->last);
    for (int s = 0; s < 2; s++) free(o->r[s]), free(o->d[s]);
    free(o);
}

const dt_objrun_ops dt_objrun_rm = {
    .kind = DT_OBJ_RM, .rows_per_example = 2, .check = rm_check, .configure = rm_configure, .open = rm_open,
    .micro = rm_micro, .step_metrics = rm_step_metrics, .evaluate = rm_evaluate, .examples = objpairs_examples,
    .get_pos = objpairs_get_pos, .set_pos = objpairs_set_pos, .data_fingerprint = objpairs_fingerprint, .free = rm_free};
