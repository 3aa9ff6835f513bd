/* dt_objective.h — the training objective a plan carries (plan.json "objective",
 * docs/plan-format.md, docs/objectives.md): which models a step holds (a policy, a frozen
 * reference, a critic, a reward model), how many sequences each example becomes, and
 * whether the step generates text. A zeroed struct is DT_OBJ_AUTO: pre-training, or SFT
 * when the data carries a loss mask (dtrun prepare's chat shards); every plan without the
 * section means it and predicts as before.
 *
 * Names and defaults follow TRL (DPOConfig, GRPOConfig, RewardConfig) and LLaMA-Factory's
 * stage names (pt, sft, rm, dpo, ppo); grpo is TRL's. */
#ifndef DT_OBJECTIVE_H
#define DT_OBJECTIVE_H

#include <stdint.h>

#include "dt_error.h"

typedef enum {
    DT_OBJ_AUTO = 0,   /* pt, or sft for masked (chat) data: the default */
    DT_OBJ_PT = 1,     /* next-token prediction on every token */
    DT_OBJ_SFT = 2,    /* next-token prediction on the response tokens */
    DT_OBJ_RM = 3,     /* reward model: a scalar score head, chosen / rejected pairs */
    DT_OBJ_DPO = 4,    /* policy + frozen reference, chosen / rejected pairs */
    DT_OBJ_GRPO = 5,   /* policy (+ reference when beta != 0), G completions per prompt */
    DT_OBJ_PPO = 6     /* actor + critic trained, reference + reward frozen, rollouts */
} dt_obj_kind;
#define DT_OBJ_COUNT 7

/* PPO's models: all on every GPU (DeepSpeed-Chat's hybrid engine), or the trained and the
 * frozen models on separate GPU groups (OpenRLHF / verl without colocation). */
typedef enum { DT_PLACE_COLOCATED = 0, DT_PLACE_SPLIT = 1 } dt_placement;

/* dpo: the preference loss (LLaMA-Factory pref_loss; TRL DPOConfig loss_type for the first
 * four). orpo and simpo need no reference model (LLaMA-Factory finetuning_args.py:
 * use_ref_model = stage == "dpo" and pref_loss not in ["orpo", "simpo"]). */
typedef enum {
    DT_PREF_SIGMOID = 0, DT_PREF_HINGE = 1, DT_PREF_IPO = 2, DT_PREF_KTO_PAIR = 3, DT_PREF_ORPO = 4, DT_PREF_SIMPO = 5
} dt_pref_loss;
#define DT_PREF_COUNT 6
/* LLaMA-Factory pref_beta / TRL DPOConfig beta default */
#define DT_OBJ_DEFAULT_PREF_BETA 0.1

/* rm: the reward model's head. score: a sequence classifier's h -> 1 head in place of the LM
 * head (TRL RewardTrainer, AutoModelForSequenceClassification); value: a value head (h -> 1,
 * with bias) on the causal LM, whose LM head and logits stay (LLaMA-Factory's rm stage: trl
 * AutoModelForCausalLMWithValueHead). */
typedef enum { DT_RM_HEAD_SCORE = 0, DT_RM_HEAD_VALUE = 1 } dt_rm_head;

/* TRL GRPOConfig defaults (trl 1.16 trainer/grpo_config.py): num_generations 8,
 * max_completion_length 512, beta 0.0 (no reference loaded), temperature 1.0, top_p 1.0. */
#define DT_OBJ_DEFAULT_GENERATIONS 8
#define DT_OBJ_DEFAULT_COMPLETION 512
#define DT_OBJ_DEFAULT_TEMPERATURE 1.0
#define DT_OBJ_DEFAULT_TOP_P 1.0
/* TRL GRPOConfig num_iterations default (trl 1.16 trainer/grpo_config.py; the GRPO paper's mu,
 * DeepSeekMath section 4.1.2): one optimizer step per rollout */
#define DT_OBJ_DEFAULT_ITERATIONS 1

typedef struct dt_objective {
    dt_obj_kind kind;
    /* dpo: the reference's log-probs computed before training (TRL precompute_ref_log_probs):
     * no reference model in the step */
    int precompute_ref;
    /* grpo / ppo: completions per prompt (grpo G; ppo 1), tokens generated per completion
     * (max_completion_length; the prompt is the plan's seq_len minus this), the KL
     * coefficient (beta: a reference is held when != 0; ppo always holds one), sequences
     * decoded at once per rank (the generation micro-batch; 0 = every completion of the
     * rank's rollout batch at once, as TRL's generate call does) */
    int64_t num_generations;
    int64_t completion_len;
    double kl_coef;
    int64_t gen_batch;
    /* grpo: the sampler's temperature (> 0) and nucleus top_p (in (0, 1]; 1 keeps every token),
     * TRL GRPOConfig temperature / top_p; 0 for the other objectives */
    double temperature, top_p;
    /* grpo: optimizer steps per rollout (TRL GRPOConfig num_iterations, >= 1): a rollout and the
     * per-token log-probs of the policy that generated it serve that many steps; 0 for the others */
    int64_t num_iterations;
    /* ppo: placement; a separate generation engine's share of each GPU's memory (vLLM's
     * gpu_memory_utilization; 0 = generation in the training engine) */
    dt_placement placement;
    double gen_mem_fraction;
    /* dpo: the loss and its beta (no effect on memory or time, except that orpo / simpo hold
     * no reference); rm: the head */
    dt_pref_loss pref_loss;
    double pref_beta;
    /* dpo sigmoid: the label smoothing ε of conservative DPO (TRL DPOConfig label_smoothing,
     * LLaMA-Factory dpo_label_smoothing), in [0, 0.5); 0 = standard DPO */
    double label_smoothing;
    dt_rm_head rm_head;
} dt_objective;

const char *dt_obj_name(dt_obj_kind k);   /* "auto" | "pt" | "sft" | "rm" | "dpo" | "grpo" | "ppo" */
/* An unknown name is one line naming it and the choices. */
int dt_obj_parse(const char *s, dt_obj_kind *out, dt_error *err);
/* The objective a plan runs: kind, or for DT_OBJ_AUTO sft when the data is masked, else pt. */
dt_obj_kind dt_obj_effective(const dt_objective *o, int loss_mask);
const char *dt_pref_loss_name(dt_pref_loss l);   /* "sigmoid" | "hinge" | ... as LLaMA-Factory spells them */
int dt_pref_loss_parse(const char *s, dt_pref_loss *out, dt_error *err);
/* 1: a dpo loss that needs no reference model (orpo, simpo). */
int dt_pref_loss_ref_free(dt_pref_loss l);
const char *dt_rm_head_name(dt_rm_head h);          /* "score" | "value" */
int dt_rm_head_parse(const char *s, dt_rm_head *out, dt_error *err);
/* Defaults for kind k: grpo G 8, completion 512, beta 0, temperature 1, top_p 1, 1 iteration; ppo 1 generation, completion 512,
 * beta 0.05 (TRL PPOConfig kl_coef); dpo loss sigmoid, pref_beta 0.1; rm score head; the rest
 * zero. */
void dt_objective_defaults(dt_obj_kind k, dt_objective *out);
/* 1: pairs (rm, dpo) — two sequences per example in one batch. */
int dt_obj_pairs(dt_obj_kind k);
/* 1: text generated inside the step (grpo, ppo). */
int dt_obj_generates(dt_obj_kind k);
/* Checks that need no model: settings without the objective they belong to, ranges, the
 * completion shorter than seq_len, G dividing the rollout batch (TRL: generation_batch_size
 * = micro x world x accumulation must be divisible by num_generations). where prefixes the
 * message. */
int dt_objective_check(const dt_objective *o, int64_t seq_len, int64_t rollout_batch, const char *where,
                       dt_error *err);

#endif
