/* objective_loss.c — the rm / dpo / grpo losses, their gradients and TRL's metrics
 * (dt_objloss.h). Each function reads its fp32 inputs, accumulates in double in index order
 * and writes fp32 gradients; nothing is allocated. */
#include <math.h>
#include <stddef.h>

#include "dt_objloss.h"

const char *const dt_dpo_metric_names[6] = {"rewards/chosen",     "rewards/rejected", "rewards/margins",
                                            "rewards/accuracies", "logps/chosen",     "logps/rejected"};

/* log σ(x), without overflow on either side */
static double log_sigmoid(double x) { return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }
/* σ(x) */
static double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

static int check_count(int64_t n, const char *what, dt_error *err) {
    if (n <= 0) return dt_errorf(err, DT_EINVAL, "%s: %lld items; the loss needs at least one", what, (long long)n);
    return 0;
}

/* ---- per-token log-probabilities ---- */

/* the row's max and log-sum-exp (double) */
static double row_logsumexp(const float *row, int64_t vocab) {
    double mx = row[0];
    for (int64_t v = 1; v < vocab; v++)
        if (row[v] > mx) mx = row[v];
    double s = 0;
    for (int64_t v = 0; v < vocab; v++) s += exp((double)row[v] - mx);
    return mx + log(s);
}

static int check_label(int32_t label, int64_t row, int64_t vocab, dt_error *err) {
    if (label == DT_OBJ_IGNORE_LABEL || (label >= 0 && label < vocab)) return 0;
    return dt_errorf(err, DT_EINVAL, "label %d at row %lld is outside the vocabulary [0, %lld) and not the ignore label %d",
                     (int)label, (long long)row, (long long)vocab, DT_OBJ_IGNORE_LABEL);
}

int dt_obj_token_logps(const float *logits, const int32_t *labels, int64_t n, int64_t vocab, float *logp,
                       dt_error *err) {
    if (vocab <= 0) return dt_errorf(err, DT_EINVAL, "token log-probs: vocabulary size %lld", (long long)vocab);
    for (int64_t r = 0; r < n; r++) {
        if (check_label(labels[r], r, vocab, err)) return err ? err->code : DT_EINVAL;
        if (labels[r] == DT_OBJ_IGNORE_LABEL) { logp[r] = 0; continue; }
        const float *row = logits + r * vocab; /* (vocab) */
        logp[r] = (float)((double)row[labels[r]] - row_logsumexp(row, vocab));
    }
    return 0;
}

int dt_obj_seq_logps(const float *logits, const int32_t *labels, int64_t nseq, int64_t T, int64_t vocab,
                     double *seq_logp, int64_t *ntok, dt_error *err) {
    if (vocab <= 0) return dt_errorf(err, DT_EINVAL, "sequence log-probs: vocabulary size %lld", (long long)vocab);
    for (int64_t b = 0; b < nseq; b++) {
        double s = 0;
        int64_t k = 0;
        for (int64_t t = 0; t < T; t++) {
            int64_t r = b * T + t;
            if (check_label(labels[r], r, vocab, err)) return err ? err->code : DT_EINVAL;
            if (labels[r] == DT_OBJ_IGNORE_LABEL) continue;
            const float *row = logits + r * vocab; /* (vocab) */
            s += (double)row[labels[r]] - row_logsumexp(row, vocab);
            k++;
        }
        seq_logp[b] = s;
        if (ntok) ntok[b] = k;
    }
    return 0;
}

int dt_obj_token_logps_backward(const float *logits, const int32_t *labels, int64_t n, int64_t vocab,
                                const float *dlogp, float *dlogits, dt_error *err) {
    if (vocab <= 0) return dt_errorf(err, DT_EINVAL, "token log-probs backward: vocabulary size %lld", (long long)vocab);
    for (int64_t r = 0; r < n; r++) {
        if (check_label(labels[r], r, vocab, err)) return err ? err->code : DT_EINVAL;
        const float *row = logits + r * vocab; /* (vocab) */
        float *drow = dlogits + r * vocab;     /* (vocab) */
        if (labels[r] == DT_OBJ_IGNORE_LABEL) {
            for (int64_t v = 0; v < vocab; v++) drow[v] = 0;
            continue;
        }
        double lse = row_logsumexp(row, vocab), g = dlogp[r];
        for (int64_t v = 0; v < vocab; v++)
            drow[v] = (float)(g * ((v == labels[r] ? 1.0 : 0.0) - exp((double)row[v] - lse)));
    }
    return 0;
}

/* ---- reward model ---- */

int64_t dt_obj_last_nonpad(const int32_t *ids, int64_t T, int32_t pad_id) {
    if (pad_id < 0) return T - 1;
    for (int64_t t = T - 1; t > 0; t--)
        if (ids[t] != pad_id) return t;
    return 0;
}

int dt_rm_loss(const float *r_chosen, const float *r_rejected, const float *margin, int64_t n, double center,
               float *d_chosen, float *d_rejected, dt_rm_metrics *m, dt_error *err) {
    if (check_count(n, "reward-model loss", err)) return err ? err->code : DT_EINVAL;
    double loss = 0, center_sum = 0, acc = 0, marg = 0, sum = 0;
    double mn = r_chosen[0], mx = r_chosen[0];
    for (int64_t i = 0; i < n; i++) {
        double c = r_chosen[i], r = r_rejected[i], d = c - r - (margin ? margin[i] : 0.0);
        loss -= log_sigmoid(d);
        double dd = -sigmoid(-d) / (double)n; /* d(-log σ(d))/dd = -σ(-d), mean over n */
        double dc = 2.0 * center * (c + r) / (double)n;
        d_chosen[i] = (float)(dd + dc);
        d_rejected[i] = (float)(-dd + dc);
        center_sum += (c + r) * (c + r);
        acc += c > r ? 1.0 : 0.0;
        marg += c - r;
        sum += c + r;
        mn = fmin(mn, fmin(c, r));
        mx = fmax(mx, fmax(c, r));
    }
    m->loss = loss / (double)n + center * center_sum / (double)n;
    m->accuracy = acc / (double)n;
    m->margin = marg / (double)n;
    m->min_reward = mn, m->max_reward = mx, m->mean_reward = sum / (double)(2 * n);
    return 0;
}

/* ---- DPO ---- */

/* one pair's loss and its derivative with respect to delta = Δc - Δr (or, for IPO, to the
 * length-normalised delta) */
static double dpo_pair(const dt_dpo_config *cfg, double delta, double *dldelta) {
    double b = cfg->beta, e = cfg->label_smoothing, x = b * delta;
    switch (cfg->type) {
    case DT_DPO_SIGMOID:
        *dldelta = b * (-(1 - e) * sigmoid(-x) + e * sigmoid(x));
        return -(1 - e) * log_sigmoid(x) - e * log_sigmoid(-x);
    case DT_DPO_ROBUST:
        *dldelta = b * (-(1 - e) * sigmoid(-x) - e * sigmoid(x)) / (1 - 2 * e);
        return (-(1 - e) * log_sigmoid(x) + e * log_sigmoid(-x)) / (1 - 2 * e);
    case DT_DPO_HINGE:
        *dldelta = 1 - x > 0 ? -b : 0;
        return 1 - x > 0 ? 1 - x : 0;
    case DT_DPO_IPO: {
        double u = delta - 1 / (2 * b);
        *dldelta = 2 * u;
        return u * u;
    }
    }
    *dldelta = 0;
    return NAN;
}

static int dpo_check(const dt_dpo_config *cfg, int64_t n, const float *ref_c, const int64_t *len_c,
                     const int64_t *len_r, dt_error *err) {
    if (check_count(n, "DPO loss", err)) return err ? err->code : DT_EINVAL;
    if (!(cfg->beta > 0)) return dt_errorf(err, DT_EINVAL, "DPO beta %g: must be > 0", cfg->beta);
    if (cfg->type == DT_DPO_ROBUST && !(cfg->label_smoothing >= 0 && cfg->label_smoothing < 0.5))
        return dt_errorf(err, DT_EINVAL, "DPO robust loss: label_smoothing %g must lie in [0, 0.5) (TRL's check)",
                         cfg->label_smoothing);
    if (!(cfg->label_smoothing >= 0 && cfg->label_smoothing <= 0.5))
        return dt_errorf(err, DT_EINVAL, "DPO label_smoothing %g must lie in [0, 0.5]", cfg->label_smoothing);
    if (!cfg->reference_free && !ref_c)
        return dt_errorf(err, DT_EINVAL, "DPO loss: no reference log-probs and the loss is not reference-free");
    if (cfg->type == DT_DPO_IPO && (!len_c || !len_r))
        return dt_errorf(err, DT_EINVAL, "DPO ipo loss needs each completion's token count");
    return 0;
}

int dt_dpo_loss(const dt_dpo_config *cfg, int64_t n, const float *pol_c, const float *pol_r, const float *ref_c,
                const float *ref_r, const int64_t *len_c, const int64_t *len_r, float *d_pol_c, float *d_pol_r,
                dt_dpo_metrics *m, dt_error *err) {
    if (dpo_check(cfg, n, ref_c, len_c, len_r, err)) return err ? err->code : DT_EINVAL;
    double loss = 0, rc_sum = 0, rr_sum = 0, acc = 0, lc = 0, lr = 0;
    for (int64_t i = 0; i < n; i++) {
        double rc = cfg->reference_free ? 0.0 : ref_c[i], rr = cfg->reference_free ? 0.0 : ref_r[i];
        double dc = pol_c[i] - rc, dr = pol_r[i] - rr; /* log ratios */
        double sc = 1, sr = 1; /* d delta / d log ratio: IPO divides by the lengths */
        if (cfg->type == DT_DPO_IPO) {
            sc = 1.0 / (double)(len_c[i] > 1 ? len_c[i] : 1);
            sr = 1.0 / (double)(len_r[i] > 1 ? len_r[i] : 1);
        }
        double g;
        loss += dpo_pair(cfg, sc * dc - sr * dr, &g);
        d_pol_c[i] = (float)(g * sc / (double)n);
        d_pol_r[i] = (float)(-g * sr / (double)n);
        double bc = cfg->beta * dc, br = cfg->beta * dr;
        rc_sum += bc, rr_sum += br, acc += bc > br ? 1.0 : 0.0;
        lc += pol_c[i], lr += pol_r[i];
    }
    m->loss = loss / (double)n;
    m->rewards_chosen = rc_sum / (double)n, m->rewards_rejected = rr_sum / (double)n;
    m->rewards_margins = (rc_sum - rr_sum) / (double)n, m->rewards_accuracies = acc / (double)n;
    m->logps_chosen = lc / (double)n, m->logps_rejected = lr / (double)n;
    return 0;
}

/* ---- GRPO ---- */

/* NaN-ignoring mean and Bessel-corrected std of x[0..n) (trl.trainer.utils.nanstd: NaN when
 * fewer than two values) */
static void nan_mean_std(const float *x, int64_t n, double *mean, double *std) {
    double s = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(x[i])) s += x[i], k++;
    *mean = k ? s / (double)k : NAN;
    double v = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(x[i])) v += ((double)x[i] - *mean) * ((double)x[i] - *mean);
    *std = k > 1 ? sqrt(v / (double)(k - 1)) : NAN;
}

int dt_grpo_advantages(const float *rewards, int64_t n, int64_t G, dt_grpo_scale scale, float *adv, dt_error *err) {
    if (check_count(n, "GRPO advantages", err)) return err ? err->code : DT_EINVAL;
    if (G <= 0 || n % G)
        return dt_errorf(err, DT_EINVAL, "GRPO advantages: %lld rewards are not whole groups of %lld generations",
                         (long long)n, (long long)G);
    double bmean, bstd;
    nan_mean_std(rewards, n, &bmean, &bstd);
    if (n == 1) bstd = 0; /* TRL: zeros when a single reward */
    for (int64_t g = 0; g < n / G; g++) {
        double mean, std;
        nan_mean_std(rewards + g * G, G, &mean, &std);
        if (G == 1) std = 0; /* TRL: zeros when num_generations is 1 */
        if (scale == DT_GRPO_SCALE_BATCH) std = bstd;
        for (int64_t j = g * G; j < (g + 1) * G; j++) {
            double a = (double)rewards[j] - mean;
            if (scale != DT_GRPO_SCALE_NONE) a /= std + DT_GRPO_STD_EPS;
            adv[j] = isnan(rewards[j]) ? 0.0f : (float)a;
        }
    }
    return 0;
}

static int grpo_check(const dt_grpo_config *cfg, const float *ref_logp, dt_error *err) {
    if (cfg->beta != 0 && !ref_logp)
        return dt_errorf(err, DT_EINVAL, "GRPO loss: beta %g needs the reference's per-token log-probs", cfg->beta);
    if (cfg->grad_accum <= 0)
        return dt_errorf(err, DT_EINVAL, "GRPO loss: gradient accumulation %lld", (long long)cfg->grad_accum);
    if (cfg->type == DT_GRPO_LOSS_DR_GRPO && cfg->max_completion_length <= 0)
        return dt_errorf(err, DT_EINVAL, "GRPO dr_grpo loss needs max_completion_length > 0");
    if (cfg->type == DT_GRPO_LOSS_DAPO && (cfg->num_processes <= 0 || cfg->steps_per_generation <= 0))
        return dt_errorf(err, DT_EINVAL, "GRPO dapo loss needs num_processes and steps_per_generation > 0");
    return 0;
}

/* the weight w of row b's tokens, with loss = sum over (b, t) of w · mask · token_loss, per
 * cfg->type (TRL 1.16 GRPOTrainer._compute_loss); msum: the whole mask's sum */
static double grpo_row_weight(const dt_grpo_config *cfg, int64_t B, int64_t T, const float *mask, double msum,
                              int64_t b) {
    double rowsum = 0, ga = (double)cfg->grad_accum;
    for (int64_t t = 0; t < T; t++) rowsum += mask[b * T + t];
    switch (cfg->type) {
    case DT_GRPO_LOSS_GRPO: return 1.0 / (fmax(rowsum, 1.0) * (double)B * ga);
    case DT_GRPO_LOSS_BNPO: return 1.0 / (fmax(msum, 1.0) * ga);
    case DT_GRPO_LOSS_DR_GRPO: return 1.0 / ((double)B * (double)cfg->max_completion_length * ga);
    case DT_GRPO_LOSS_DAPO:
        return 1.0 / (fmax(cfg->num_items_in_batch, 1.0) / (double)cfg->num_processes * ga /
                      (double)cfg->steps_per_generation);
    }
    return NAN;
}

int dt_grpo_loss(const dt_grpo_config *cfg, int64_t B, int64_t T, const float *logp, const float *old_logp,
                 const float *ref_logp, const float *adv, const float *mask, float *d_logp, dt_grpo_metrics *m,
                 dt_error *err) {
    if (check_count(B * T, "GRPO loss", err)) return err ? err->code : DT_EINVAL;
    if (grpo_check(cfg, ref_logp, err)) return err ? err->code : DT_EINVAL;
    double loss = 0, kl = 0, lo = 0, hi = 0, msum = 0;
    for (int64_t i = 0; i < B * T; i++) msum += mask[i];
    for (int64_t b = 0; b < B; b++) {
        double w = grpo_row_weight(cfg, B, T, mask, msum, b);
        double A = adv[b];
        for (int64_t t = 0; t < T; t++) {
            int64_t i = b * T + t;
            double lp = logp[i], mk = mask[i];
            double rho = old_logp ? exp(lp - (double)old_logp[i]) : 1.0;
            double clipped = fmin(fmax(rho, 1 - cfg->eps_low), 1 + cfg->eps_high);
            double u1 = rho * A, u2 = clipped * A;
            double tok = -fmin(u1, u2);
            /* d tok / d logp: through ρ (dρ/dlogp = ρ) on the unclipped branch, or on the
             * clipped one while ρ lies inside the clip range */
            int inside = rho >= 1 - cfg->eps_low && rho <= 1 + cfg->eps_high;
            double g = (u1 <= u2 || inside) ? -A * rho : 0.0;
            if (cfg->beta != 0) {
                double d = (double)ref_logp[i] - lp, k3 = exp(d) - d - 1;
                tok += cfg->beta * k3;
                g += cfg->beta * (1 - exp(d));
                kl += k3 * mk;
            }
            loss += w * mk * tok;
            d_logp[i] = (float)(w * mk * g);
            lo += (rho < 1 - cfg->eps_low && A < 0) ? mk : 0;
            hi += (rho > 1 + cfg->eps_high && A > 0) ? mk : 0;
        }
    }
    double den = fmax(msum, 1.0);
    m->loss = loss;
    m->kl = cfg->beta != 0 ? kl / den : 0;
    m->clip_low = lo / den, m->clip_high = hi / den, m->clip_region = (lo + hi) / den;
    return 0;
}
