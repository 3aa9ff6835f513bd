/* objective_pairs.h — what the pair objectives (rm, dpo) share: the preference pairs of the
 * training and held-out splits (dt_pairshard.h), the micro-batch of B pairs as 2B rows
 * (chosen rows first, as TRL's concatenated forward), the order they are walked in (the token
 * loader's: shuffled per epoch by the seed, each global batch of world x B pairs split by rank),
 * and the step's metric sums. Internal to engine/run. */
#ifndef DT_OBJECTIVE_PAIRS_H
#define DT_OBJECTIVE_PAIRS_H

#include "dt_objrun.h"
#include "dt_pairshard.h"

typedef struct objpairs {
    const dt_plan *plan;
    dt_comm *comm;
    int rank, world;
    FILE *log;
    dt_pairset *train, *valid;
    int64_t B, T;               /* pairs per micro-batch, sequence length */
    int64_t *perm;              /* [train pairs] this epoch's order */
    dt_loader_pos pos;
    int32_t *ids, *targets;     /* [2B, T] the batch: ids and shifted labels (-100 outside completions) */
    int64_t *idx;               /* [B] */
    int64_t truncated;          /* sides cut to T so far (rank 0 warns once) */
    double sums[DT_OBJRUN_MAX_METRICS];   /* the step's per-micro metrics, summed */
    int64_t nsum;
    char fp_hex[2 * DT_SHARD2_FINGERPRINT_BYTES + 1];
} objpairs;

/* The splits from c (a training set of fewer pairs than a global batch is refused). */
int objpairs_open(objpairs *p, const dt_objrun_ctx *c, dt_error *err);
void objpairs_free(objpairs *p);
/* The same for per_micro records per micro-batch (p->B), prompts: prompt shards (grpo). */
int objpairs_open_records(objpairs *p, const dt_objrun_ctx *c, int64_t per_micro, int prompts, dt_error *err);
/* The next training micro-batch into p->ids / p->targets. */
int objpairs_next(objpairs *p, dt_error *err);
/* Its indices only, into p->idx (objpairs_next without the batch). */
int objpairs_advance(objpairs *p);
/* A frozen, forward-only, replicated copy of the model the policy starts from (output.init, or
 * the seed's initialisation) with rows rows per forward: dpo's and grpo's reference. */
int objrun_reference_open(const dt_objrun_ctx *c, int64_t rows, dt_lm **ref, dt_error *err);
/* Held-out micro-batches (in file order, B pairs each, the last partial one left out; capped by
 * the plan's eval_batches when set), and batch b of them. */
int64_t objpairs_eval_batches(const objpairs *p);
int objpairs_eval_batch(objpairs *p, int64_t b, dt_error *err);
/* Pairs first .. first + B - 1 of set s in file order (an index past s's last repeats its last
 * pair), into the batch. */
int objpairs_range_batch(objpairs *p, const dt_pairset *s, int64_t first, dt_error *err);
/* An evaluation over the held-out batches (LoRA dropout off): batch(o, g, v, err) runs the
 * forwards of the batch objpairs_eval_batch loaded and fills its n metrics v (the first the
 * loss); out = their means under names, *loss the first; no held-out data: out->n 0, *loss
 * NAN. o: an objective whose state starts with its objpairs. */
typedef int (*objpairs_eval_fn)(dt_objrun *o, dt_lm *g, double *v, dt_error *err);
int objpairs_evaluate(dt_objrun *o, dt_lm *g, objpairs_eval_fn batch, int n, const char *const *names,
                      double *loss, dt_objrun_metrics *out, dt_error *err);
/* Adds a micro-batch's n metrics to the step's sums. */
void objpairs_add(objpairs *p, const double *v, int n);
/* The step's mean metrics over micro-batches and ranks into m (names given), sums reset. */
int objpairs_step_metrics(objpairs *p, const char *const *names, int n, dt_objrun_metrics *m, dt_error *err);
/* The reference / policy log-prob pass over the batch: row sums of the completion tokens'
 * log-probabilities from the logits of g's last forward; ntok: completion tokens per row. */
int objpairs_seq_logps(const objpairs *p, const dt_lm *g, double *lp, int64_t *ntok, dt_error *err);

/* The table entries every pair objective shares: o is an objective whose state starts with
 * its objpairs (the first member of rm's and dpo's struct dt_objrun). */
int64_t objpairs_examples(const dt_objrun *o);
dt_loader_pos objpairs_get_pos(const dt_objrun *o);
int objpairs_set_pos(dt_objrun *o, dt_loader_pos pos, dt_error *err);
const char *objpairs_fingerprint(const dt_objrun *o);

#endif
