/* objective_dpo.c — DPO in dtrun (docs/objectives.md "In dtrun"): the policy trained on pairs
 * against a frozen reference, TRL 1.16's DPOTrainer step:
 *   the reference's per-sequence log-probs under no gradient, once per micro-batch: a separate
 *   replicated, forward-only copy of the model the policy starts from (output.init, or the
 *   seed's initialisation), or under LoRA the policy itself with its adapters off (TRL's
 *   null_ref_context / PEFT's disable_adapter: no second model);
 *   the policy's forward over the 2B rows (chosen, then rejected), dt_dpo_loss (sigmoid with
 *   label smoothing, hinge, ipo), the gradient through dt_obj_token_logps_backward into the
 *   policy's dL/dlogits, its backward; TRL's metrics (rewards/chosen, rewards/rejected,
 *   rewards/margins, rewards/accuracies, logps/chosen, logps/rejected). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_ckpt.h"
#include "dt_finetune.h"
#include "dt_objloss.h"
#include "objective_pairs.h"

enum { DPO_LOSS = 0, DPO_NMETRICS = 7 };   /* loss, then dt_dpo_metric_names' six */

struct dt_objrun {
    objpairs p;
    dt_lm *ref;                 /* the frozen reference: flat, replicated, forward only */
    dt_dpo_config cfg;
    double *lp_ref, *lp_pol;    /* [2B] per-row log-prob sums */
    int64_t *ntok;              /* [2B] completion tokens per row */
    float *pol[2], *ref_[2], *d[2];   /* [B] chosen / rejected: policy, reference, dL/dpolicy */
    float *dlogp;               /* [2B, T] per-token dL/dlogp */
    const char *names[DPO_NMETRICS];
};

static int dpo_check(const dt_plan *p, dt_error *err) {
    const dt_objective *o = &p->objective;
    if (o->pref_loss != DT_PREF_SIGMOID && o->pref_loss != DT_PREF_HINGE && o->pref_loss != DT_PREF_IPO)
        return dt_errorf(err, DT_EINVAL, "objective.pref_loss %s is not built in dtrun's dpo (sigmoid, hinge, ipo "
                         "are): re-plan with --pref-loss sigmoid, or run it with TRL / LLaMA-Factory (dtplan export)",
                         dt_pref_loss_name(o->pref_loss));
    if (o->precompute_ref)
        return dt_errorf(err, DT_EINVAL, "objective.precompute_ref: dtrun's dpo computes the reference's log-probs in "
                         "the step (a frozen copy, or the base under LoRA); re-plan without --precompute-ref");
    if (p->cluster.device != DT_DEVICE_CPU)
        return dt_errorf(err, DT_EINVAL, "dtrun's dpo runs on the CPU device only in this build; re-plan with "
                         "--device cpu or run it with TRL (dtplan export)");
    return DT_OK;
}

static void dpo_configure(const dt_plan *p, dt_model *m) { (void)p, (void)m; }

/* The reference (objrun_reference_open), none under LoRA: the policy with its adapters off. */
static int open_reference(dt_objrun *o, const dt_objrun_ctx *c, dt_error *err) {
    if (dt_ft_is_lora(&c->plan->finetune)) return DT_OK;
    return objrun_reference_open(c, 2 * c->plan->batch.micro_batch, &o->ref, err);
}

static int dpo_open(const dt_objrun_ctx *c, dt_lm *policy, dt_objrun **out, dt_error *err) {
    (void)policy;
    dt_objrun *o = calloc(1, sizeof *o);
    if (!o) return dt_errorf(err, DT_ENOMEM, "out of memory");
    *out = o;
    int rc = objpairs_open(&o->p, c, err);
    if (rc) return rc;
    const dt_objective *ob = &c->plan->objective;
    o->cfg.type = ob->pref_loss == DT_PREF_HINGE ? DT_DPO_HINGE : ob->pref_loss == DT_PREF_IPO ? DT_DPO_IPO
                                                                                                : DT_DPO_SIGMOID;
    o->cfg.beta = ob->pref_beta;
    o->cfg.label_smoothing = ob->label_smoothing;
    const int64_t B = o->p.B, R = 2 * B, T = o->p.T;
    o->lp_ref = malloc((size_t)R * sizeof(double));
    o->lp_pol = malloc((size_t)R * sizeof(double));
    o->ntok = malloc((size_t)R * sizeof(int64_t));
    o->dlogp = malloc((size_t)(R * T) * sizeof(float));
    for (int s = 0; s < 2; s++) {
        o->pol[s] = malloc((size_t)B * sizeof(float));
        o->ref_[s] = malloc((size_t)B * sizeof(float));
        o->d[s] = malloc((size_t)B * sizeof(float));
        if (!o->pol[s] || !o->ref_[s] || !o->d[s]) return dt_errorf(err, DT_ENOMEM, "out of memory");
    }
    if (!o->lp_ref || !o->lp_pol || !o->ntok || !o->dlogp) return dt_errorf(err, DT_ENOMEM, "out of memory");
    o->names[DPO_LOSS] = "loss";
    for (int i = 0; i < 6; i++) o->names[1 + i] = dt_dpo_metric_names[i];
    return open_reference(o, c, err);
}

/* Reference and policy forwards over the batch, the loss and its gradient wrt the policy's sums. */
static int forward_pair(dt_objrun *o, dt_lm *g, dt_dpo_metrics *m, dt_error *err) {
    const int64_t B = o->p.B;
    float *no_loss = NULL;
    dt_lm *ref = o->ref ? o->ref : g;
    dt_lm_set_adapters(g, o->ref != NULL);   /* LoRA: the reference is the base, adapters off */
    int rc = dt_lm_forward(ref, o->p.ids, NULL, no_loss, err);
    dt_lm_set_adapters(g, 1);
    if (rc || objpairs_seq_logps(&o->p, ref, o->lp_ref, NULL, err) ||
        dt_lm_forward(g, o->p.ids, NULL, no_loss, err) ||
        objpairs_seq_logps(&o->p, g, o->lp_pol, o->ntok, err))
        return err->code;
    for (int s = 0; s < 2; s++)
        for (int64_t i = 0; i < B; i++) {
            o->pol[s][i] = (float)o->lp_pol[s * B + i];
            o->ref_[s][i] = (float)o->lp_ref[s * B + i];
        }
    return dt_dpo_loss(&o->cfg, B, o->pol[0], o->pol[1], o->ref_[0], o->ref_[1], o->ntok, o->ntok + B, o->d[0],
                       o->d[1], m, err);
}

static void metrics_row(const dt_dpo_metrics *m, double *v) {
    const double row[DPO_NMETRICS] = {m->loss, m->rewards_chosen, m->rewards_rejected, m->rewards_margins,
                                      m->rewards_accuracies, m->logps_chosen, m->logps_rejected};
    memcpy(v, row, sizeof row);
}

static int dpo_micro(dt_objrun *o, dt_lm *g, float grad_scale, double *loss, dt_error *err) {
    dt_dpo_metrics m;
    if (objpairs_next(&o->p, err) || forward_pair(o, g, &m, err)) return err->code;
    const int64_t B = o->p.B, T = o->p.T, V = dt_lm_logits_width(g);
    for (int64_t r = 0; r < 2 * B; r++) {
        const float d = o->d[r / B][r % B] * grad_scale;
        for (int64_t t = 0; t < T; t++) o->dlogp[r * T + t] = d;
    }
    float *logits = dt_lm_logits_mut(g);   /* overwritten in place by dL/dlogits */
    if (dt_obj_token_logps_backward(logits, o->p.targets, 2 * B * T, V, o->dlogp, logits, err) ||
        dt_lm_backward_logits(g, err))
        return err->code;
    double v[DPO_NMETRICS];
    metrics_row(&m, v);
    objpairs_add(&o->p, v, DPO_NMETRICS);
    *loss = m.loss;
    return DT_OK;
}

static int dpo_step_metrics(dt_objrun *o, dt_objrun_metrics *m, dt_error *err) {
    return objpairs_step_metrics(&o->p, o->names, DPO_NMETRICS, m, err);
}

static const char *const k_eval_names[DPO_NMETRICS] = {
    "eval_loss", "eval_rewards/chosen", "eval_rewards/rejected", "eval_rewards/margins", "eval_rewards/accuracies",
    "eval_logps/chosen", "eval_logps/rejected"};

/* One held-out batch's metrics (objpairs_evaluate). */
static int eval_batch(dt_objrun *o, dt_lm *g, double *v, dt_error *err) {
    dt_dpo_metrics m;
    if (forward_pair(o, g, &m, err)) return err->code;
    metrics_row(&m, v);
    return DT_OK;
}

static int dpo_evaluate(dt_objrun *o, dt_lm *g, double *loss, dt_objrun_metrics *out, dt_error *err) {
    return objpairs_evaluate(o, g, eval_batch, DPO_NMETRICS, k_eval_names, loss, out, err);
}

static void dpo_free(dt_objrun *o) {
    if (!o) return;
    objpairs_free(&o->p);
    dt_lm_free(o->ref);
    free(o->lp_ref);
    free(o->lp_pol);
    free(o->ntok);
    free(o->dlogp);
    for (int s = 0; s < 2; s++) free(o->pol[s]), free(o->ref_[s]), free(o->d[s]);
    free(o);
}

const dt_objrun_ops dt_objrun_dpo = {
    .kind = DT_OBJ_DPO, .rows_per_example = 2, .check = dpo_check, .configure = dpo_configure, .open = dpo_open,
    .micro = dpo_micro, .step_metrics = dpo_step_metrics, .evaluate = dpo_evaluate, .examples = objpairs_examples,
    .get_pos = objpairs_get_pos, .set_pos = objpairs_set_pos, .data_fingerprint = objpairs_fingerprint, .free = dpo_free};
