/* dt_objrun.h — the objectives the trainer runs besides next-token prediction (docs/objectives.md
 * "In dtrun"): one table of operations per objective kind, which train.c dispatches on the plan's
 * objective.kind. pt / sft have none (the trainer's own cross-entropy); rm and dpo are
 * objective_rm.c and objective_dpo.c over the preference pairs of objective_pairs.c, grpo
 * objective_grpo_run.c over its prompt records. A new objective adds its own table and one
 * line to dt_objrun_for.
 *
 * The trainer keeps what every objective shares: the policy (dt_lm, ZeRO, optimizer, clipping,
 * schedule, checkpoints of the trained set), the step loop and the files it writes. An objective
 * owns its data, any extra model (dpo's frozen reference), its loss and its metrics: per
 * micro-batch it fills the policy's dL/dlogits and calls dt_lm_backward_logits. */
#ifndef DT_OBJRUN_H
#define DT_OBJRUN_H

#include <stdint.h>
#include <stdio.h>

#include "dt_comm.h"
#include "dt_data.h"
#include "dt_error.h"
#include "dt_lm.h"
#include "dt_objective.h"
#include "dt_plan.h"

/* What the trainer hands an objective when it opens. */
struct dt_zero;

typedef struct dt_objrun_ctx {
    const dt_plan *plan;
    dt_model *model;                 /* the policy's model (after configure); rm records the data's pad
                                      * id in it (its export's pad_token_id) */
    dt_comm *comm;
    struct dt_zero *zero;            /* the policy's ZeRO engine (grpo gathers a stage-3 policy through it) */
    int rank, world;
    const char *train_path;          /* the training data (plan data.train or --data) */
    const char *valid_path;          /* held-out data, "" none */
    const unsigned char *fingerprint;   /* the tokenizer the data must carry, or NULL */
    const char *fingerprint_hint;
    FILE *log;                       /* rank 0's human log, else NULL */
    const char *reward_cmd;          /* grpo: the user's reward command (dt_reward.h), NULL: exact answer */
    double reward_timeout_s;         /* grpo: its wall-clock limit per call */
    struct dt_vlmrun *vlm;           /* a VLM plan's model (dt_vlmtrain.h), else NULL */
} dt_objrun_ctx;

/* Metrics of a step or of an evaluation, under TRL's names. */
#define DT_OBJRUN_MAX_METRICS 8
typedef struct dt_objrun_metrics {
    int n;
    const char *name[DT_OBJRUN_MAX_METRICS];
    double value[DT_OBJRUN_MAX_METRICS];
} dt_objrun_metrics;

typedef struct dt_objrun dt_objrun;

typedef struct dt_objrun_ops {
    dt_obj_kind kind;
    /* the policy's rows per micro-batch example (pairs: 2, chosen and rejected in one batch,
     * as TRL's concatenated forward) */
    int64_t rows_per_example;
    /* The plan's settings this engine does not train: DT_EINVAL with one line. */
    int (*check)(const dt_plan *p, dt_error *err);
    /* The policy's model before it is built (rm: a sequence classifier). */
    void (*configure)(const dt_plan *p, dt_model *m);
    /* Opens the data (and a reference model, dpo) once the policy exists; collective. The
     * policy's weights are not loaded yet: what needs them happens in the first micro. */
    int (*open)(const dt_objrun_ctx *c, dt_lm *policy, dt_objrun **out, dt_error *err);
    /* One micro-batch: the next examples, the policy's forward, the loss, dL/dlogits times
     * grad_scale (1/accum · loss scale) and the policy's backward. *loss: this rank's loss. */
    int (*micro)(dt_objrun *o, dt_lm *g, float grad_scale, double *loss, dt_error *err);
    /* The step's metrics, the mean over its micro-batches and the ranks (collective); resets. */
    int (*step_metrics)(dt_objrun *o, dt_objrun_metrics *m, dt_error *err);
    /* Evaluation on the held-out data (every rank the same batches: collective under ZeRO-3);
     * *loss and m (names prefixed "eval_" as TRL logs them). DT_OK with *loss NAN when there is
     * no held-out data. */
    int (*evaluate)(dt_objrun *o, dt_lm *g, double *loss, dt_objrun_metrics *m, dt_error *err);
    /* Training examples, and the data position a checkpoint keeps. */
    int64_t (*examples)(const dt_objrun *o);
    dt_loader_pos (*get_pos)(const dt_objrun *o);
    int (*set_pos)(dt_objrun *o, dt_loader_pos pos, dt_error *err);
    /* Optional (NULL: any step): checks that a resume at this optimizer step can continue
     * (grpo: not inside a rollout's num_iterations steps); DT_EINVAL with the fix. */
    int (*resume_step)(dt_objrun *o, int64_t step, dt_error *err);
    /* The tokenizer fingerprint of the data (hex, for checkpoints), "" none. */
    const char *(*data_fingerprint)(const dt_objrun *o);
    void (*free)(dt_objrun *o);
} dt_objrun_ops;

/* The table of kind, NULL for pt / sft / auto (the trainer's cross-entropy). ppo: NULL too
 * until built (dtrun refuses it before the trainer starts). */
const dt_objrun_ops *dt_objrun_for(dt_obj_kind kind);

#endif
