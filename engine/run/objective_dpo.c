/* objective_dpo.c — DPO in dtrun (docs/objectives.md "In dtrun"): the policy trained on pairs
 * against a frozen reference, TRL 1.16's DPOTrainer step:
 *   the reference's per-sequence log-probs under no gradient, once per micro-batch: a separate
 *   replicated, forward-only copy of the model the policy starts from (output.init, or the
 *   seed's initialisation), or under LoRA the policy itself with its adapters off (TRL's
 *   null_ref_context / PEFT's disable_adapter: no second model);
 *   the policy's forward over the 2B rows (chosen, then rejected), dt_dpo_loss (sigmoid with
 *   label smoothing, hinge, ipo), the gradient through dt_obj_token_logps_backward into the
 *   policy's dL/dlogits, its backward; TRL's metrics (rewards/chosen, rewards/rejected,
 *   rewards/margins, rewards/accuracies, logps/chosen, logps/rejected).
 * With objective.precompute_ref (TRL's precompute_ref_log_probs) no reference is held: before the
 * first step the reference's log-probs of every training and held-out pair are computed once
 * (each rank its share of the pairs in file order, B at a time, then summed over the ranks: every
 * rank keeps the whole table in memory, indexed by the pair's place in its split, so any rank and
 * any data position finds them) by the policy as it starts (TRL's _precompute_ref_logps uses the
 * model before training) — under LoRA with its adapters off; a resumed run, whose policy has
 * moved, reads the starting model into a temporary copy for it and frees it before the step. */
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
    /* precompute_ref: [pairs, 2] the reference's chosen / rejected log-probs per pair of each split */
    int precompute, precomputed, resumed;
    float *pre_train, *pre_valid;
    const float *pre_cur;       /* the table of the batch forward_pair scores (train or valid) */
    dt_objrun_ctx ctx;          /* a resumed run's temporary reference is opened from it */
};

static int dpo_check(const dt_plan *p, dt_error *err) {
    const dt_objective *o = &p->objective;
    if (o->pref_loss != DT_PREF_SIGMOID && o->pref_loss != DT_PREF_HINGE && o->pref_loss != DT_PREF_IPO)
        return dt_errorf(err, DT_EINVAL, "objective.pref_loss %s is not built in dtrun's dpo (sigmoid, hinge, ipo "
                         "are): re-plan with --pref-loss sigmoid, or run it with TRL / LLaMA-Factory (dtplan export)",
                         dt_pref_loss_name(o->pref_loss));
    if (p->cluster.device != DT_DEVICE_CPU)
        return dt_errorf(err, DT_EINVAL, "dtrun's dpo runs on the CPU device only in this build; re-plan with "
                         "--device cpu or run it with TRL (dtplan export)");
    return DT_OK;
}

static void dpo_configure(const dt_plan *p, dt_model *m) { (void)p, (void)m; }

/* The reference (objrun_reference_open), none under LoRA (the policy with its adapters off) or
 * with the log-probs precomputed. */
static int open_reference(dt_objrun *o, const dt_objrun_ctx *c, dt_error *err) {
    if (dt_ft_is_lora(&c->plan->finetune) || o->precompute) return DT_OK;
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
    o->ctx = *c;
    o->precompute = ob->precompute_ref;
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

/* The reference's per-row log-prob sums of the batch into o->lp_ref: ref's forward (the policy g
 * itself: its adapters off). */
static int reference_logps(dt_objrun *o, dt_lm *ref, dt_lm *g, dt_error *err) {
    dt_lm_set_adapters(g, ref != g);   /* LoRA: the reference is the base, adapters off */
    int rc = dt_lm_forward(ref, o->p.ids, NULL, NULL, err);
    dt_lm_set_adapters(g, 1);
    return rc ? rc : objpairs_seq_logps(&o->p, ref, o->lp_ref, NULL, err);
}

/* One split's table [n, 2]: this rank's batches of B pairs in file order (b = rank, rank +
 * world, ...), then summed over the ranks (each entry written by one rank, the others 0). */
static int precompute_set(dt_objrun *o, dt_lm *ref, dt_lm *g, const dt_pairset *s, float **out, dt_error *err) {
    const int64_t n = dt_pairset_count(s), B = o->p.B, nb = (n + B - 1) / B;
    float *t = calloc((size_t)(2 * n) + 1, sizeof *t);   /* [n, 2] */
    *out = t;
    if (!t) return dt_errorf(err, DT_ENOMEM, "out of memory for the reference log-probs of %lld pairs", (long long)n);
    for (int64_t b = o->p.rank; b < nb; b += o->p.world) {
        if (objpairs_range_batch(&o->p, s, b * B, err) || reference_logps(o, ref, g, err)) return err->code;
        for (int64_t i = 0; i < B && b * B + i < n; i++) {
            t[2 * (b * B + i)] = (float)o->lp_ref[i];
            t[2 * (b * B + i) + 1] = (float)o->lp_ref[B + i];
        }
    }
    if (o->p.world > 1 && dt_comm_allreduce(o->p.comm, t, (size_t)(2 * n), DT_DTYPE_FP32, DT_RED_SUM, err))
        return err->code;
    return DT_OK;
}

/* The tables, once, before the first step or evaluation (collective). */
static int ensure_precomputed(dt_objrun *o, dt_lm *g, dt_error *err) {
    if (!o->precompute || o->precomputed) return DT_OK;
    dt_lm *ref = g, *tmp = NULL;
    if (o->resumed && !dt_ft_is_lora(&o->ctx.plan->finetune)) {   /* the policy has moved: the starting model */
        if (objrun_reference_open(&o->ctx, 2 * o->p.B, &tmp, err)) return err->code;
        ref = tmp;
    }
    int rc = precompute_set(o, ref, g, o->p.train, &o->pre_train, err);
    if (!rc && o->p.valid) rc = precompute_set(o, ref, g, o->p.valid, &o->pre_valid, err);
    const int reread = tmp != NULL;
    dt_lm_free(tmp);
    if (rc) return dt_error_prefix(err, "precompute_ref");
    if (o->ctx.log)
        fprintf(o->ctx.log, "dtrun: dpo: reference log-probs of %lld training and %lld held-out pairs precomputed%s; "
                "no reference model is held\n", (long long)dt_pairset_count(o->p.train),
                (long long)(o->p.valid ? dt_pairset_count(o->p.valid) : 0),
                reread ? " (from the starting model, read again for the resumed run)" : "");
    o->precomputed = 1;
    return DT_OK;
}

/* Reference and policy forwards over the batch, the loss and its gradient wrt the policy's sums. */
static int forward_pair(dt_objrun *o, dt_lm *g, dt_dpo_metrics *m, dt_error *err) {
    const int64_t B = o->p.B;
    float *no_loss = NULL;
    if (o->precompute) {   /* the batch's pairs' rows of the table */
        for (int64_t i = 0; i < B; i++) {
            o->lp_ref[i] = o->pre_cur[2 * o->p.idx[i]];
            o->lp_ref[B + i] = o->pre_cur[2 * o->p.idx[i] + 1];
        }
    } else if (reference_logps(o, o->ref ? o->ref : g, g, err)) {
        return err->code;
    }
    if (dt_lm_forward(g, o->p.ids, NULL, no_loss, err) ||
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
    if (ensure_precomputed(o, g, err)) return err->code;
    o->pre_cur = o->pre_train;
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
    if (ensure_precomputed(o, g, err)) return err->code;
    o->pre_cur = o->pre_valid;
    return objpairs_evaluate(o, g, eval_batch, DPO_NMETRICS, k_eval_names, loss, out, err);
}

/* A resume: the data position, and the precompute must read the starting model again. */
static int dpo_set_pos(dt_objrun *o, dt_loader_pos pos, dt_error *err) {
    o->resumed = 1;
    return objpairs_set_pos(o, pos, err);
}

static void dpo_free(dt_objrun *o) {
    if (!o) return;
    objpairs_free(&o->p);
    dt_lm_free(o->ref);
    free(o->lp_ref);
    free(o->lp_pol);
    free(o->ntok);
    free(o->dlogp);
    free(o->pre_train);
    free(o->pre_valid);
    for (int s = 0; s < 2; s++) free(o->pol[s]), free(o->ref_[s]), free(o->d[s]);
    free(o);
}

const dt_objrun_ops dt_objrun_dpo = {
    .kind = DT_OBJ_DPO, .rows_per_example = 2, .check = dpo_check, .configure = dpo_configure, .open = dpo_open,
    .micro = dpo_micro, .step_metrics = dpo_step_metrics, .evaluate = dpo_evaluate, .examples = objpairs_examples,
    .get_pos = objpairs_get_pos, .set_pos = dpo_set_pos, .data_fingerprint = objpairs_fingerprint, .free = dpo_free};
