/* dt_objplan.h — what a plan's objective (plan.objective, common/dt_objective.h) does to
 * memory and time: the models a step holds besides the policy (a frozen reference, a
 * critic, a reward model), the second sequence of each preference pair, and the text
 * grpo / ppo generate inside the step. Every term and its source: docs/objectives.md and
 * docs/memory-model.md "Objectives". memory.c and timemodel.c call these; plans whose
 * objective is pt or sft never reach them (their predictions are unchanged). */
#ifndef DT_OBJPLAN_H
#define DT_OBJPLAN_H

#include "dt_memory.h"
#include "dt_plan.h"

/* 1 when p's objective adds terms (rm, dpo, grpo, ppo). */
int dt_objplan_active(const dt_plan *p);

/* The policy's own shape under the objective, for the memory and time models:
 * pairs (rm, dpo) run chosen and rejected in one batch, micro-batch x 2 (TRL
 * concatenated_forward); rm's model is a sequence classifier whose score head (h -> 1)
 * replaces the LM head, so its loss workspace is B x T x 1 (full fine-tuning only: the
 * vocabulary otherwise stays, see docs/objectives.md) and *n_params its own count.
 * Returns 1 and fills out (a copy of p) when the shape changes, else 0. */
int dt_objplan_shape(const dt_plan *p, int64_t *n_params, dt_plan *out);

/* Elements of the policy as the objective holds it: rm's (score head, no untied LM head). */
int64_t dt_objplan_policy_params(const dt_plan *p);

/* The objective's terms, bytes per rank unless named; times in seconds per optimizer step. */
typedef struct dt_obj_terms {
    int ref_held;               /* a frozen reference model is in the step */
    int ref_fwd;                /* the reference's log-probs are computed in the step: a held reference,
                                 * or a LoRA policy with its adapters disabled (TRL null_ref_context) */
    int64_t ref_weights;        /* its weights (ZeRO-3: this rank's partition) */
    int64_t reward_weights;     /* ppo: the frozen reward model (ZeRO-3: partitioned) */
    double critic_ratio;        /* ppo: the critic's elements / the policy's (its states scale the policy's) */
    int split;                  /* ppo split placement: the frozen models live on their own GPUs */
    int64_t split_frozen;       /* ... bytes per GPU of that group (the plan's world of them) */
    int64_t gen_engine;         /* a separate generation engine's reservation (gen_mem_fraction x device) */
    /* generation in the training engine (grpo / ppo, gen_mem_fraction 0) */
    int64_t rollout_seqs;       /* completions a rank generates per optimizer step */
    int64_t gen_seqs;           /* decoded at once (the generation micro-batch) */
    int64_t kv_cache;           /* 2 L kv d bytes x seq_len x gen_seqs */
    int64_t sampler_logits;     /* gen_seqs x V x (activation bytes + fp32) */
    int64_t gathered;           /* ZeRO-3: the rest of the policy gathered for generate */
    int64_t gen_total;          /* the generation phase's device total */
    int64_t gen_excess;         /* what it adds above the training peak (0 when below) */
    /* the runtime dtrun, what its engine holds for the whole run (docs/objectives.md "Memory in
     * dtrun"; every other runtime leaves these 0): */
    int64_t ref_activations;    /* the reference's own activation buffer: a forward-only model
                                 * allocates the full-fine-tuning layout (dt_memory_objective_terms) */
    int64_t ref_buffers;        /* ... and its scratch (logits, loss, token ids) */
    int64_t generator;          /* grpo: the generator, created once: an fp32 copy of every weight,
                                 * the KV cache (kv_cache), the sampler's logits, scratch rows */
    int64_t gen_unit;           /* grpo ZeRO-3: one gathered group (the largest), fp32 */
    int64_t rollout_batch;      /* grpo: the step's rollout rows (ids, labels, mask) and per-row values */
    double ref_fwd_s;           /* reference (and ppo reward / critic value) forwards */
    double critic_s;            /* ppo: the critic's training */
    double prefill_s, decode_s; /* generation per step: prompts compute-bound, tokens memory-bound
                                 * (grpo: a rollout's over its num_iterations steps) */
} dt_obj_terms;

/* The memory terms for p (all zero for pt / sft; the generation phase needs the peak:
 * dt_objplan_generation). Under the runtime dtrun the reference's activations and scratch
 * stay 0 here: dt_memory_objective_terms (dt_memory.h) fills them. */
void dt_objplan_terms(const dt_plan *p, dt_obj_terms *out);
/* Adds the time terms (reference forwards, critic, prefill, decode) to out. */
int dt_objplan_time(const dt_plan *p, dt_obj_terms *out, dt_error *err);
/* Adds the persistent terms to one phase's breakdown (reference / reward weights into params,
 * the critic's states scaled from the policy's, a separate engine's reservation into buffers). */
void dt_objplan_add_phase(const dt_obj_terms *t, dt_mem_breakdown *m);
/* After every phase: the generation phase (persistent state + KV cache + sampler logits +
 * ZeRO-3's gathered weights + reserve); when it is above the training peak its excess is added
 * to the peak phase's buffers (apply 1), so the reported peak is max(training, generation).
 * Fills t's gen_total / gen_excess; apply 0 only measures. */
void dt_objplan_generation(const dt_plan *p, dt_obj_terms *t, dt_mem_phases *ph, int apply);
/* Seconds the objective adds to one optimizer step (reference forwards, critic, generation). */
double dt_objplan_step_s(const dt_obj_terms *t);

/* "dpo: policy + frozen reference (replicated), 2 sequences per example" — for headers. */
void dt_objplan_describe(const dt_plan *p, char *buf, size_t n);

#endif
