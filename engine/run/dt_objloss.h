/* dt_objloss.h — the losses of the preference and RL objectives (docs/objectives.md
 * "Engine pieces") as pure functions: fp32 in, double accumulation in a fixed order, each
 * returning the loss, its gradient with respect to its inputs and TRL's metrics under TRL's
 * names. Nothing here holds a model; the trainer feeds these the scores / log-probs its
 * forward produced and back-propagates the gradients they return.
 *
 * Formulas follow TRL 1.16 (trl/trainer/reward_trainer.py compute_loss, dpo_trainer.py
 * _compute_loss, grpo_trainer.py _compute_advantages / _compute_loss); goldens:
 * tests/engine/golden/objloss.txt from scripts/gen_objloss_goldens.py. */
#ifndef DT_OBJLOSS_H
#define DT_OBJLOSS_H

#include <stdint.h>

#include "dt_error.h"

/* The label value a masked position carries (PyTorch's CrossEntropyLoss ignore_index). */
#define DT_OBJ_IGNORE_LABEL (-100)

/* ---- per-token log-probabilities (DPO's and GRPO's policy / reference terms) ---- */

/* logp[r] = log_softmax(logits[r, :])[labels[r]] for each of n rows, 0 where labels[r] is
 * DT_OBJ_IGNORE_LABEL. logits: (n, vocab) fp32 row-major; labels: (n) already shifted (row r's
 * target is the token that follows position r); logp: (n). The softmax's max and sum in double.
 * DT_EINVAL when a label is outside [0, vocab) and not the ignore label. */
int dt_obj_token_logps(const float *logits, const int32_t *labels, int64_t n, int64_t vocab,
                       float *logp, dt_error *err);

/* Per-sequence sums: seq_logp[b] = sum over t of logp of sequence b's unmasked tokens, summed
 * in double in position order. logits: (nseq, T, vocab); labels: (nseq, T); seq_logp: (nseq);
 * ntok: (nseq) count of unmasked positions (NULL to skip). */
int dt_obj_seq_logps(const float *logits, const int32_t *labels, int64_t nseq, int64_t T, int64_t vocab,
                     double *seq_logp, int64_t *ntok, dt_error *err);

/* Backward of dt_obj_token_logps: dlogits[r, :] = dlogp[r] * (onehot(labels[r]) - softmax(logits[r, :])),
 * a zero row where the label is ignored. dlogits: (n, vocab), overwritten. A sequence sum's
 * gradient is the per-sequence dL/dseq_logp broadcast over its rows. */
int dt_obj_token_logps_backward(const float *logits, const int32_t *labels, int64_t n, int64_t vocab,
                                const float *dlogp, float *dlogits, dt_error *err);

/* ---- reward model (TRL RewardTrainer) ---- */

/* The position whose score a sequence-classification model reads, as transformers'
 * LlamaForSequenceClassification finds it: the rightmost token that is not pad_id (0 when every
 * token is pad, argmax of an all-zero row); T - 1 when pad_id < 0 (no pad token configured). */
int64_t dt_obj_last_nonpad(const int32_t *ids, int64_t T, int32_t pad_id);

typedef struct dt_rm_metrics {
    double loss;
    double accuracy;      /* mean of r_chosen > r_rejected */
    double margin;        /* mean of r_chosen - r_rejected */
    double min_reward, mean_reward, max_reward; /* over all 2n scores */
} dt_rm_metrics;

/* loss = mean_i -log σ(rc_i - rr_i - margin_i) + center · mean_i (rc_i + rr_i)² over n pairs.
 * margin: (n) or NULL; center: TRL's center_rewards_coefficient, 0 for none. d_chosen, d_rejected:
 * (n) dloss/dr, overwritten. */
int dt_rm_loss(const float *r_chosen, const float *r_rejected, const float *margin, int64_t n, double center,
               float *d_chosen, float *d_rejected, dt_rm_metrics *m, dt_error *err);

/* ---- DPO (TRL DPOTrainer, f_divergence reverse_kl) ---- */

typedef enum dt_dpo_loss_type {
    DT_DPO_SIGMOID, /* -(1-ε) log σ(βΔ) - ε log σ(-βΔ) (cDPO's smoothing; TRL 1.16's sigmoid at ε = 0) */
    DT_DPO_ROBUST,  /* (-(1-ε) log σ(βΔ) + ε log σ(-βΔ)) / (1 - 2ε), ε in [0, 0.5) */
    DT_DPO_HINGE,   /* relu(1 - βΔ) */
    DT_DPO_IPO      /* (Δc/len_c - Δr/len_r - 1/(2β))², lengths = completion tokens, clamped at 1 */
} dt_dpo_loss_type;

typedef struct dt_dpo_config {
    dt_dpo_loss_type type;
    double beta;            /* TRL's beta */
    double label_smoothing; /* ε, sigmoid and robust only */
    int reference_free;     /* 1: the reference log-probs are taken as 0 (ref_* may be NULL) */
} dt_dpo_config;

typedef struct dt_dpo_metrics {
    double loss;
    double rewards_chosen, rewards_rejected;  /* "rewards/chosen", "rewards/rejected": mean β(π - ref) */
    double rewards_margins, rewards_accuracies; /* "rewards/margins", "rewards/accuracies" */
    double logps_chosen, logps_rejected;      /* "logps/chosen", "logps/rejected": mean policy sums */
} dt_dpo_metrics;

/* Names of the metrics as TRL logs them, in struct order after loss. */
extern const char *const dt_dpo_metric_names[6];

/* n pairs; pol_c, pol_r, ref_c, ref_r: (n) per-sequence summed log-probs (chosen, rejected; policy,
 * reference); len_c, len_r: (n) completion token counts, TRL's completion_mask sums (IPO only,
 * else may be NULL). f_divergence_type reverse_kl (standard DPO), no ld_alpha, no use_weighting. d_pol_c,
 * d_pol_r: (n) dloss/dpolicy sums, overwritten. The loss is the mean over pairs. */
int dt_dpo_loss(const dt_dpo_config *cfg, int64_t n, const float *pol_c, const float *pol_r, const float *ref_c,
                const float *ref_r, const int64_t *len_c, const int64_t *len_r, float *d_pol_c, float *d_pol_r,
                dt_dpo_metrics *m, dt_error *err);

/* ---- GRPO (TRL GRPOTrainer) ---- */

typedef enum dt_grpo_scale { DT_GRPO_SCALE_GROUP, DT_GRPO_SCALE_BATCH, DT_GRPO_SCALE_NONE } dt_grpo_scale;

/* The epsilon TRL adds to the std before dividing (grpo_trainer.py: std_rewards + 1e-4). */
#define DT_GRPO_STD_EPS 1e-4

/* Group-normalised advantages of n = groups · G rewards (each prompt's G completions adjacent):
 * adv = r - mean(group), divided by (std + 1e-4) where std is the group's (GROUP) or the whole
 * batch's (BATCH) NaN-ignoring Bessel-corrected std; NONE leaves the difference. A NaN reward
 * (unscorable completion) is left out of the means and gets advantage 0. DT_EINVAL when n is not a
 * multiple of G. */
int dt_grpo_advantages(const float *rewards, int64_t n, int64_t G, dt_grpo_scale scale, float *adv, dt_error *err);

typedef enum dt_grpo_loss_type { DT_GRPO_LOSS_GRPO, DT_GRPO_LOSS_BNPO, DT_GRPO_LOSS_DR_GRPO, DT_GRPO_LOSS_DAPO } dt_grpo_loss_type;

typedef struct dt_grpo_config {
    dt_grpo_loss_type type;
    double eps_low, eps_high; /* TRL's epsilon and epsilon_high (set both to epsilon when unset) */
    double beta;              /* KL coefficient; 0: no reference term (ref may be NULL) */
    int64_t max_completion_length; /* dr_grpo's constant denominator */
    int64_t grad_accum;       /* current_gradient_accumulation_steps (train mode) */
    /* dapo: the normalizer is max(num_items_in_batch, 1) / num_processes · grad_accum / steps_per_generation */
    double num_items_in_batch; int64_t num_processes, steps_per_generation;
} dt_grpo_config;

typedef struct dt_grpo_metrics {
    double loss;        /* the loss returned to backward (after the accumulation normalizer) */
    double kl;          /* "kl": masked mean of the k3 estimator (0 when beta is 0) */
    double clip_low, clip_high, clip_region; /* "clip_ratio/low_mean", "/high_mean", "/region_mean" */
} dt_grpo_metrics;

/* B completions × T positions. logp, mask: (B, T) (mask 0/1); old_logp: (B, T) or NULL (then the
 * ratio is exp(logp - stop_grad(logp)) = 1, TRL's num_iterations = 1 path); ref_logp: (B, T),
 * needed when beta != 0; adv: (B). Token loss -min(ρA, clip(ρ, 1-εl, 1+εh)A) + β·k3,
 * k3 = exp(ref - logp) - (ref - logp) - 1, reduced by cfg->type. d_logp: (B, T), overwritten.
 * TRL's defaults only: importance_sampling_level "token", no delta (two-sided clip), no
 * use_bias_correction_kl, no entropy mask or bonus, no vLLM importance correction. */
int dt_grpo_loss(const dt_grpo_config *cfg, int64_t B, int64_t T, const float *logp, const float *old_logp,
                 const float *ref_logp, const float *adv, const float *mask, float *d_logp, dt_grpo_metrics *m,
                 dt_error *err);

#endif
