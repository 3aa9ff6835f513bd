/* objective_pairs.c — see objective_pairs.h. */
#include "objective_pairs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_ckpt.h"
#include "dt_objloss.h"
#include "dt_sha256.h"

int objpairs_open(objpairs *p, const dt_objrun_ctx *c, dt_error *err) {
    return objpairs_open_records(p, c, c->plan->batch.micro_batch, 0, err);
}

int objpairs_open_records(objpairs *p, const dt_objrun_ctx *c, int64_t per_micro, int prompts, dt_error *err) {
    memset(p, 0, sizeof *p);
    p->plan = c->plan;
    p->comm = c->comm;
    p->rank = c->rank;
    p->world = c->world;
    p->log = c->log;
    p->B = per_micro;
    p->T = c->plan->batch.seq_len;
    const dt_pairset_opts o = {.vocab = c->model->vocab, .fingerprint = c->fingerprint,
                               .fingerprint_hint = c->fingerprint_hint, .prompts = prompts};
    if (dt_pairset_open(c->train_path, &o, &p->train, err)) return err->code;
    if (c->valid_path && c->valid_path[0] && dt_pairset_open(c->valid_path, &o, &p->valid, err))
        return dt_error_prefix(err, "held-out pairs");
    /* a pair whose prompt fills the sequence: refused here, before any step */
    if (dt_pairset_check_len(p->train, p->T, err) || (p->valid && dt_pairset_check_len(p->valid, p->T, err)))
        return err->code;
    dt_sha256_hex(dt_pairset_fingerprint(p->train), p->fp_hex);
    const int64_t n = dt_pairset_count(p->train), per_step = p->B * p->world;
    if (n < per_step)
        return dt_errorf(err, DT_EINVAL, "%s: %lld training %s, fewer than one global batch of %lld (%lld per micro-batch "
                         "x %d ranks): use more records or a smaller micro_batch", c->train_path, (long long)n,
                         prompts ? "prompts" : "pairs", (long long)per_step, (long long)p->B, p->world);
    const size_t rows = (size_t)(2 * p->B * p->T);
    p->perm = malloc((size_t)n * sizeof *p->perm);
    p->ids = malloc(rows * sizeof *p->ids);
    p->targets = malloc(rows * sizeof *p->targets);
    p->idx = malloc((size_t)p->B * sizeof *p->idx);
    if (!p->perm || !p->ids || !p->targets || !p->idx) return dt_errorf(err, DT_ENOMEM, "out of memory for the pairs");
    dt_epoch_perm(p->perm, n, 1, c->plan->data.seed, 0);
    return DT_OK;
}

void objpairs_free(objpairs *p) {
    dt_pairset_free(p->train);
    dt_pairset_free(p->valid);
    free(p->perm);
    free(p->ids);
    free(p->targets);
    free(p->idx);
}

/* The batch of pairs p->idx from set s; the first cut side is reported once (rank 0). */
static int fill(objpairs *p, const dt_pairset *s, dt_error *err) {
    int64_t cut = 0;
    if (dt_pairset_batch(s, p->idx, p->B, p->T, p->ids, p->targets, &cut, err)) return err->code;
    if (cut && !p->truncated && p->log)
        fprintf(p->log, "dtrun: data: a pair's side is longer than seq_len %lld and is cut to it (TRL's "
                        "truncation_mode keep_start); plan a longer --seq to keep it whole\n", (long long)p->T);
    p->truncated += cut;
    return DT_OK;
}

int objpairs_next(objpairs *p, dt_error *err) {
    objpairs_advance(p);
    return fill(p, p->train, err);
}

int objpairs_advance(objpairs *p) {
    const int64_t n = dt_pairset_count(p->train), per_step = p->B * p->world;
    if (p->pos.cursor + per_step > n) {
        p->pos.epoch++;
        p->pos.cursor = 0;
        dt_epoch_perm(p->perm, n, 1, p->plan->data.seed, p->pos.epoch);
    }
    for (int64_t b = 0; b < p->B; b++) p->idx[b] = p->perm[p->pos.cursor + p->rank * p->B + b];
    p->pos.cursor += per_step;
    return DT_OK;
}

int64_t objpairs_eval_batches(const objpairs *p) {
    if (!p->valid) return 0;
    int64_t nb = dt_pairset_count(p->valid) / p->B, cap = p->plan->data.eval_batches;
    return cap > 0 && cap < nb ? cap : nb;
}

int objpairs_range_batch(objpairs *p, const dt_pairset *s, int64_t first, dt_error *err) {
    const int64_t n = dt_pairset_count(s);
    for (int64_t i = 0; i < p->B; i++) p->idx[i] = first + i < n ? first + i : n - 1;
    return fill(p, s, err);
}

int objpairs_eval_batch(objpairs *p, int64_t b, dt_error *err) {
    for (int64_t i = 0; i < p->B; i++) p->idx[i] = b * p->B + i;
    return fill(p, p->valid, err);
}

int objpairs_evaluate(dt_objrun *o, dt_lm *g, objpairs_eval_fn batch, int n, const char *const *names,
                      double *loss, dt_objrun_metrics *out, dt_error *err) {
    objpairs *p = (objpairs *)(void *)o;
    const int64_t nb = objpairs_eval_batches(p);
    double sum[DT_OBJRUN_MAX_METRICS] = {0}, v[DT_OBJRUN_MAX_METRICS];
    for (int64_t b = 0; b < nb; b++) {
        dt_lm_set_dropout(g, 0, 0);   /* evaluation: no LoRA dropout */
        if (objpairs_eval_batch(p, b, err) || batch(o, g, v, err)) return err->code;
        for (int i = 0; i < n; i++) sum[i] += v[i];
    }
    out->n = nb > 0 ? n : 0;
    for (int i = 0; i < out->n; i++) {
        out->name[i] = names[i];
        out->value[i] = sum[i] / (double)nb;
    }
    *loss = out->n ? out->value[0] : NAN;
    return DT_OK;
}

void objpairs_add(objpairs *p, const double *v, int n) {
    for (int i = 0; i < n; i++) p->sums[i] += v[i];
    p->nsum++;
}

int objpairs_step_metrics(objpairs *p, const char *const *names, int n, dt_objrun_metrics *m, dt_error *err) {
    float buf[DT_OBJRUN_MAX_METRICS];
    for (int i = 0; i < n; i++) buf[i] = (float)(p->nsum ? p->sums[i] / (double)p->nsum : NAN);
    if (p->world > 1 && dt_comm_allreduce(p->comm, buf, (size_t)n, DT_DTYPE_FP32, DT_RED_SUM, err)) return err->code;
    m->n = n;
    for (int i = 0; i < n; i++) {
        m->name[i] = names[i];
        m->value[i] = (double)buf[i] / (double)p->world;
        p->sums[i] = 0;
    }
    p->nsum = 0;
    return DT_OK;
}

int objpairs_seq_logps(const objpairs *p, const dt_lm *g, double *lp, int64_t *ntok, dt_error *err) {
    return dt_obj_seq_logps(dt_lm_logits(g), p->targets, 2 * p->B, p->T, dt_lm_logits_width(g), lp, ntok, err);
}

/* the objpairs at the start of an objective's state */
static const objpairs *pairs_of(const dt_objrun *o) { return (const objpairs *)(const void *)o; }

int64_t objpairs_examples(const dt_objrun *o) { return dt_pairset_count(pairs_of(o)->train); }
dt_loader_pos objpairs_get_pos(const dt_objrun *o) { return pairs_of(o)->pos; }
const char *objpairs_fingerprint(const dt_objrun *o) { return pairs_of(o)->fp_hex; }

int objpairs_set_pos(dt_objrun *o, dt_loader_pos pos, dt_error *err) {
    objpairs *p = (objpairs *)(void *)o;
    const int64_t n = dt_pairset_count(p->train);
    if (pos.epoch < 0 || pos.cursor < 0 || pos.cursor > n)
        return dt_errorf(err, DT_EINVAL, "data position epoch %lld cursor %lld does not fit a set of %lld pairs (was "
                         "the data changed since the checkpoint?)", (long long)pos.epoch, (long long)pos.cursor,
                         (long long)n);
    p->pos = pos;
    dt_epoch_perm(p->perm, n, 1, p->plan->data.seed, p->pos.epoch);
    return DT_OK;
}

/* The reference: the model the policy starts from, every tensor, frozen (no hooks, no ZeRO:
 * replicated on every rank, as TRL prepares it outside DeepSpeed's stage-3). */
int objrun_reference_open(const dt_objrun_ctx *c, int64_t rows, dt_lm **ref, dt_error *err) {
    const dt_plan *pl = c->plan;
    dt_model m = *c->model;
    const dt_lm_options lo = {.B = rows, .T = pl->batch.seq_len, .ckpt_layers = 0, .attn = pl->activations.attention,
                              .device = pl->cluster.device, .ordinal = dt_comm_local_rank(c->comm),
                              .flags = DT_LM_FORWARD_ONLY, .finetune = NULL};
    const char *what = dt_obj_name(pl->objective.kind);
    if (dt_lm_create_opts(&m, &pl->precision, &lo, ref, err)) return dt_error_prefix(err, "%s reference", what);
    if (pl->output.init[0]) {
        if (dt_weights_load(*ref, &m, pl->precision.param, pl->output.init, err))
            return dt_error_prefix(err, "%s reference: output.init", what);
        return DT_OK;
    }
    return dt_lm_init_random(*ref, pl->data.seed, err);
}
