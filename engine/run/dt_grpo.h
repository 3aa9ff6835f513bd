/* dt_grpo.h — one GRPO step's pieces (TRL GRPOTrainer; docs/objectives.md "GRPO in the
 * engine"), between the generator (engine/model/dt_generate.h), the rewards (dt_reward.h) and
 * the losses (dt_objloss.h):
 *   dt_grpo_rollout   G sampled completions per prompt, their rewards (the user's command or
 *                     the built-in exact answer), group-normalised advantages, and the training
 *                     rows: prompt ‖ completion ids [n, T], shifted labels on the completion
 *                     tokens only, the completion mask, TRL's rollout metrics;
 *   dt_grpo_token_logps / dt_grpo_dlogits
 *                     per-token log-probs of a policy or reference forward over those rows, and
 *                     the loss's dL/dlogits (dt_grpo_loss, then dt_obj_token_logps_backward).
 * dt_grpo_backward_rows back-propagates through a dt_lm that has only the cross-entropy
 * backward (dt_lm_backward): exact where dL/dlogp is the same on every token of a completion
 * (beta 0 and one iteration per generation, TRL's defaults: ratio 1, nothing clipped), refused
 * otherwise. dtrun's grpo (objective_grpo_run.c) uses dt_grpo_dlogits with the logits backward. */
#ifndef DT_GRPO_H
#define DT_GRPO_H

#include <stdint.h>

#include "dt_error.h"
#include "dt_generate.h"
#include "dt_lm.h"
#include "dt_objloss.h"

typedef struct dt_grpo_opts {
    int64_t G;                 /* num_generations: completions per prompt (>= 2) */
    int64_t T;                 /* the plan's sequence length: prompt + completion <= T */
    dt_gen_params gen;         /* max_new_tokens, temperature, top_k, top_p, seed, EOS ids */
    int32_t pad_id;            /* written after a completion in ids */
    const char *reward_cmd;    /* NULL: the built-in exact answer (dt_reward_exact) */
    double reward_timeout_s;
    dt_grpo_scale scale;       /* scale_rewards: group (TRL's default), batch, none */
} dt_grpo_opts;

/* One prompt record: its ids, its text as rendered (what a reward command reads), its answer
 * (NULL: none) and where it came from ("prompts.jsonl:12", for messages). */
typedef struct dt_grpo_prompt {
    const int32_t *ids;
    int64_t n;
    const char *text, *answer, *where;
} dt_grpo_prompt;

/* Decodes generated ids into text (the tokenizer's, or the caller's); *text malloc'd. */
typedef int (*dt_grpo_decode_fn)(void *ctx, const int32_t *ids, int64_t n, char **text, dt_error *err);

/* TRL's logged rollout metrics (TRL 1.16 GRPOTrainer._generate_and_score_completions). */
typedef struct dt_grpo_rollout_metrics {
    double reward, reward_std;                  /* "reward", "reward_std": the batch's mean and
                                                 * Bessel-corrected std (nanstd) */
    double frac_reward_zero_std;                /* "frac_reward_zero_std": completions whose std (their
                                                 * group's, or the batch's under scale batch) is 0 */
    double mean_length, min_length, max_length; /* "completions/mean_length", ".../min_length", ".../max_length" */
    double clipped_ratio;                       /* "completions/clipped_ratio": the last id is no EOS */
    double mean_terminated_length, min_terminated_length, max_terminated_length;
                                                /* "completions/{mean,min,max}_terminated_length": those that ended
                                                 * with an EOS (all 0 when none did, as TRL) */
} dt_grpo_rollout_metrics;

typedef struct dt_grpo_rollout {
    int64_t n, T;          /* completions (prompts x G), positions per row */
    int32_t *ids;          /* [n, T] prompt ‖ completion, pad_id after */
    int32_t *labels;       /* [n, T] labels[t] = ids[t + 1] on completion tokens, else -100 */
    float *mask;           /* [n, T] 1 where labels count */
    int64_t *plen, *clen;  /* [n] prompt and completion lengths */
    float *rewards, *adv;  /* [n] */
    dt_grpo_rollout_metrics m;
} dt_grpo_rollout;

/* Runs the rollout of np prompts (np * G <= the generator's batch) with gen's current weights.
 * DT_EINVAL naming the prompt (its where) when prompt + max_new_tokens exceed T; the reward
 * command's errors as dt_reward_command says them (one line naming the command and the
 * record). r is allocated here (dt_grpo_rollout_free). */
int dt_grpo_rollout_run(dt_gen *gen, const dt_grpo_opts *o, const dt_grpo_prompt *p, int64_t np,
                        dt_grpo_decode_fn decode, void *dctx, dt_grpo_rollout *r, dt_error *err);
void dt_grpo_rollout_free(dt_grpo_rollout *r);
/* TRL's logged reward and reward_std of n rewards (torch.nanmean, Bessel-corrected nanstd),
 * summed in index order (double): over the rewards of every rank gathered in rank order, a run
 * logs the same on any number of ranks. */
void dt_grpo_reward_stats(const float *rewards, int64_t n, double *mean, double *std);

/* logp [rows, T] of rows [r0, r0 + rows) of r from their forward's logits [rows, T, V]. */
int dt_grpo_token_logps(const dt_grpo_rollout *r, int64_t r0, int64_t rows, const float *logits, int64_t V,
                        float *logp, dt_error *err);

/* The loss over all n rows given their logp (and ref_logp when cfg->beta != 0): d_logp [n, T]
 * and the metrics (dt_grpo_loss), mean loss in m->loss. */
int dt_grpo_loss_rows(const dt_grpo_config *cfg, const dt_grpo_rollout *r, const float *logp, const float *ref_logp,
                      float *d_logp, dt_grpo_metrics *m, dt_error *err);

/* dlogits [rows, T, V] = d_logp · (onehot − softmax) for rows [r0, r0 + rows). */
int dt_grpo_dlogits(const dt_grpo_rollout *r, int64_t r0, int64_t rows, const float *logits, int64_t V,
                    const float *d_logp, float *dlogits, dt_error *err);

/* Accumulates the loss's gradient into lm's gradients, one row at a time through lm's
 * cross-entropy backward (lm built with B = 1, T = r->T): a row whose d_logp differs between
 * its completion tokens is DT_EINVAL (use dt_grpo_dlogits with a logits backward there). */
int dt_grpo_backward_rows(dt_lm *lm, const dt_grpo_rollout *r, const float *d_logp, float grad_scale,
                          dt_error *err);

#endif
