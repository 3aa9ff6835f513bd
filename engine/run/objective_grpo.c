/* objective_grpo.c — see dt_grpo.h: a GRPO step's rollout, per-token log-probs, loss
 * gradient and its backward, as TRL's GRPOTrainer (grpo_trainer.py:
 * _generate_and_score_completions, _compute_loss). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_grpo.h"
#include "dt_reward.h"

/* TRL's frac_reward_zero_std: a group whose std is within torch.isclose's default tolerance of 0 */
#define DT_GRPO_ZERO_STD_ATOL 1e-8
/* dt_grpo_backward_rows: d_logp equal across a row's tokens to this relative tolerance */
#define DT_GRPO_ROW_UNIFORM_RTOL 1e-6

void dt_grpo_rollout_free(dt_grpo_rollout *r) {
    free(r->ids), free(r->labels), free(r->mask), free(r->plen), free(r->clen), free(r->rewards), free(r->adv);
    memset(r, 0, sizeof *r);
}

static int rollout_alloc(dt_grpo_rollout *r, int64_t n, int64_t T, dt_error *err) {
    memset(r, 0, sizeof *r);
    r->n = n, r->T = T;
    const size_t nt = (size_t)(n * T);
    r->ids = malloc(nt * sizeof *r->ids);
    r->labels = malloc(nt * sizeof *r->labels);
    r->mask = calloc(nt, sizeof *r->mask);
    r->plen = calloc((size_t)n, sizeof *r->plen);
    r->clen = calloc((size_t)n, sizeof *r->clen);
    r->rewards = calloc((size_t)n, sizeof *r->rewards);
    r->adv = calloc((size_t)n, sizeof *r->adv);
    if (r->ids && r->labels && r->mask && r->plen && r->clen && r->rewards && r->adv) return DT_OK;
    dt_grpo_rollout_free(r);
    return dt_errorf(err, DT_ENOMEM, "grpo: out of memory for %lld completions of %lld tokens", (long long)n,
                     (long long)T);
}

/* Row i = prompt ‖ its completion, pad after; labels and mask on the completion. */
static void fill_row(dt_grpo_rollout *r, int64_t i, const dt_grpo_prompt *p, const int32_t *comp, int64_t clen,
                     int32_t pad) {
    const int64_t T = r->T;
    int32_t *ids = r->ids + i * T, *lab = r->labels + i * T;
    float *mask = r->mask + i * T;
    for (int64_t t = 0; t < T; t++) {
        ids[t] = t < p->n ? p->ids[t] : t < p->n + clen ? comp[t - p->n] : pad;
        lab[t] = DT_OBJ_IGNORE_LABEL;
    }
    for (int64_t t = p->n - 1; t < p->n + clen - 1; t++) {
        lab[t] = ids[t + 1];
        mask[t] = 1.0f;
    }
    r->plen[i] = p->n;
    r->clen[i] = clen;
}

/* The rewards of the n completions: the command's or the exact answer's. */
static int score(const dt_grpo_opts *o, const dt_grpo_prompt *p, dt_grpo_rollout *r, const int32_t *out,
                 const int64_t *olen, dt_grpo_decode_fn decode, void *dctx, dt_error *err) {
    const int64_t n = r->n, G = o->G, NEW = o->gen.max_new_tokens;
    dt_reward_item *items = calloc((size_t)n, sizeof *items);
    char **texts = calloc((size_t)n, sizeof *texts);
    double *rw = calloc((size_t)n, sizeof *rw);
    int rc = items && texts && rw ? DT_OK : dt_errorf(err, DT_ENOMEM, "grpo: out of memory for the rewards");
    for (int64_t i = 0; i < n && !rc; i++) {
        rc = decode(dctx, out + i * NEW, olen[i], &texts[i], err);
        items[i] = (dt_reward_item){p[i / G].text, texts[i], p[i / G].answer};
    }
    if (!rc)
        rc = o->reward_cmd ? dt_reward_command(o->reward_cmd, items, n, o->reward_timeout_s, rw, err)
                           : dt_reward_exact(items, n, rw, err);
    for (int64_t i = 0; i < n && !rc; i++) r->rewards[i] = (float)rw[i];
    for (int64_t i = 0; texts && i < n; i++) free(texts[i]);
    free(texts), free(items), free(rw);
    return rc;
}

/* Bessel-corrected std of v[0], v[stride], ... (n values; torch.std / TRL's nanstd) */
static double bessel_std(const float *v, int64_t n) {
    double mu = 0, ss = 0;
    for (int64_t k = 0; k < n; k++) mu += v[k];
    mu /= (double)n;
    for (int64_t k = 0; k < n; k++) ss += (v[k] - mu) * (v[k] - mu);
    return n > 1 ? sqrt(ss / (double)(n - 1)) : 0.0;
}

void dt_grpo_reward_stats(const float *rewards, int64_t n, double *mean, double *std) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += rewards[i];
    *mean = n > 0 ? sum / (double)n : 0.0;
    *std = bessel_std(rewards, n);
}

/* 1 when completion i ended with one of the EOS ids */
static int terminated(const dt_grpo_opts *o, const dt_grpo_rollout *r, const int32_t *out, int64_t i) {
    const int64_t NEW = o->gen.max_new_tokens;
    for (int e = 0; e < o->gen.n_eos && r->clen[i] > 0; e++)
        if (out[i * NEW + r->clen[i] - 1] == o->gen.eos[e]) return 1;
    return 0;
}

/* TRL's rollout metrics from the rewards and lengths. */
static void rollout_metrics(const dt_grpo_opts *o, dt_grpo_rollout *r, const int32_t *out) {
    const int64_t n = r->n, G = o->G;
    dt_grpo_rollout_metrics *m = &r->m;
    double sum = 0, lsum = 0, zero = 0, tsum = 0, nterm = 0;
    m->min_length = m->min_terminated_length = INFINITY, m->max_length = m->max_terminated_length = 0;
    for (int64_t i = 0; i < n; i++) {
        const double len = (double)r->clen[i];
        sum += r->rewards[i];
        lsum += len;
        m->min_length = fmin(m->min_length, len), m->max_length = fmax(m->max_length, len);
        if (!terminated(o, r, out, i)) continue;
        nterm++, tsum += len;
        m->min_terminated_length = fmin(m->min_terminated_length, len);
        m->max_terminated_length = fmax(m->max_terminated_length, len);
    }
    m->reward_std = bessel_std(r->rewards, n);
    if (o->scale == DT_GRPO_SCALE_BATCH) zero = m->reward_std <= DT_GRPO_ZERO_STD_ATOL ? (double)n : 0.0;
    else
        for (int64_t g = 0; g < n / G; g++) zero += bessel_std(r->rewards + g * G, G) <= DT_GRPO_ZERO_STD_ATOL ? G : 0;
    m->reward = sum / (double)n;
    m->frac_reward_zero_std = zero / (double)n;
    m->mean_length = lsum / (double)n;
    m->clipped_ratio = 1.0 - nterm / (double)n;
    if (nterm > 0) m->mean_terminated_length = tsum / nterm;
    else m->mean_terminated_length = m->min_terminated_length = m->max_terminated_length = 0;
}

int dt_grpo_rollout_run(dt_gen *gen, const dt_grpo_opts *o, const dt_grpo_prompt *p, int64_t np,
                        dt_grpo_decode_fn decode, void *dctx, dt_grpo_rollout *r, dt_error *err) {
    const int64_t G = o->G, n = np * G, NEW = o->gen.max_new_tokens;
    if (G < 2) return dt_errorf(err, DT_EINVAL, "grpo: num_generations %lld: a group needs at least 2", (long long)G);
    for (int64_t i = 0; i < np; i++)
        if (p[i].n < 1 || p[i].n + NEW > o->T)
            return dt_errorf(err, DT_EINVAL, "%s: the prompt has %lld tokens; with max_completion_length %lld that "
                             "exceeds the plan's sequence length %lld: shorten the prompt or raise --seq",
                             p[i].where, (long long)p[i].n, (long long)NEW, (long long)o->T);
    int rc = rollout_alloc(r, n, o->T, err);
    if (rc) return rc;
    int32_t *out = malloc((size_t)(n * NEW) * sizeof *out);
    int64_t *olen = malloc((size_t)n * sizeof *olen), *plen = malloc((size_t)n * sizeof *plen);
    const int32_t **prompts = malloc((size_t)n * sizeof *prompts);
    if (!out || !olen || !plen || !prompts) rc = dt_errorf(err, DT_ENOMEM, "grpo: out of memory for %lld completions",
                                                           (long long)n);
    for (int64_t i = 0; i < n && !rc; i++) prompts[i] = p[i / G].ids, plen[i] = p[i / G].n;
    if (!rc) rc = dt_gen_run(gen, &o->gen, n, prompts, plen, out, olen, NULL, err);
    for (int64_t i = 0; i < n && !rc; i++) fill_row(r, i, &p[i / G], out + i * NEW, olen[i], o->pad_id);
    if (!rc) rc = score(o, p, r, out, olen, decode, dctx, err);
    if (!rc) rc = dt_grpo_advantages(r->rewards, n, G, o->scale, r->adv, err);
    if (!rc) rollout_metrics(o, r, out);
    free(out), free(olen), free(plen), free(prompts);
    if (rc) dt_grpo_rollout_free(r);
    return rc;
}

int dt_grpo_token_logps(const dt_grpo_rollout *r, int64_t r0, int64_t rows, const float *logits, int64_t V,
                        float *logp, dt_error *err) {
    return dt_obj_token_logps(logits, r->labels + r0 * r->T, rows * r->T, V, logp, err);
}

int dt_grpo_loss_rows(const dt_grpo_config *cfg, const dt_grpo_rollout *r, const float *logp, const float *ref_logp,
                      float *d_logp, dt_grpo_metrics *m, dt_error *err) {
    return dt_grpo_loss(cfg, r->n, r->T, logp, NULL, ref_logp, r->adv, r->mask, d_logp, m, err);
}

int dt_grpo_dlogits(const dt_grpo_rollout *r, int64_t r0, int64_t rows, const float *logits, int64_t V,
                    const float *d_logp, float *dlogits, dt_error *err) {
    return dt_obj_token_logps_backward(logits, r->labels + r0 * r->T, rows * r->T, V, d_logp + r0 * r->T, dlogits,
                                       err);
}

int dt_grpo_backward_rows(dt_lm *lm, const dt_grpo_rollout *r, const float *d_logp, float grad_scale,
                          dt_error *err) {
    const int64_t T = r->T;
    for (int64_t i = 0; i < r->n; i++) {
        if (r->clen[i] == 0) continue;
        const float *d = d_logp + i * T;
        const float d0 = d[r->plen[i] - 1];
        for (int64_t t = 0; t < T; t++)
            if (r->mask[i * T + t] > 0 && fabsf(d[t] - d0) > DT_GRPO_ROW_UNIFORM_RTOL * fabsf(d0))
                return dt_errorf(err, DT_EINVAL, "grpo: completion %lld's loss gradient differs between its tokens "
                                 "(a KL term or clipping): it needs the logits backward", (long long)i);
        if (d0 == 0.0f) continue;
        float loss;
        int rc = dt_lm_forward(lm, r->ids + i * T, r->labels + i * T, &loss, err);
        /* cross-entropy's mean over the row's clen tokens: dL/dz = s/clen (softmax − onehot);
         * GRPO's: d0 (onehot − softmax), so s = −d0 · clen */
        if (!rc) rc = dt_lm_backward(lm, -d0 * (float)r->clen[i] * grad_scale, err);
        if (rc) return rc;
    }
    return DT_OK;
}
