/* objective_grpo_run.c — GRPO in dtrun (docs/objectives.md "In dtrun: grpo"): the trainer's
 * table for objective.kind grpo over the step pieces of dt_grpo.h, as TRL 1.16's GRPOTrainer
 * with its defaults (num_iterations 1, loss_type "dapo", scale_rewards "group", epsilon 0.2,
 * temperature 1, top_p 1, no top_k):
 *   the prompt records of `dtrun prepare --format prompts` (dt_pairshard.h), walked as the pair
 *   objectives walk pairs: shuffled per epoch by the seed, each global batch split by rank;
 *   at each step's first micro-batch, the step's rollout on this rank (TRL's generation batch,
 *   steps_per_generation = accumulation): micro_batch x grad_accum / G prompts x G completions
 *   generated in one batch from the policy's current weights (LoRA merged; ZeRO-3: unit by unit
 *   from all-gathers), each completion drawing the stream of its place in the global batch so
 *   the rollout does not depend on the number of ranks; rewards from the user's command
 *   (dtrun --reward-command) or the built-in exact answer; group-normalised advantages; dapo's
 *   token count summed over the ranks;
 *   per micro-batch, its slice of rows: the reference's per-token log-probs when the KL
 *   coefficient is not 0 (a frozen replicated copy, or the policy with its adapters off under
 *   LoRA), the policy's forward, the loss's dL/dlogits and dt_lm_backward_logits.
 * num_iterations N (TRL's, the GRPO paper's mu): a rollout serves N optimizer steps, each walking
 * all its micro-batches (TRL 1.16 _prepare_inputs: generate_every = steps_per_generation x
 * num_iterations micro-batches); the data advances once per rollout. The first step's forwards
 * run on the generating weights, so their log-probs, detached, are the old_per_token_logps
 * (TRL computes them at generation time; ours come from the same weights and rows without an
 * extra forward) and its ratio is 1 as with N = 1; steps 2 .. N clip the ratio to them. A
 * checkpoint inside a rollout's N steps does not keep the rollout: its resume is refused.
 * The plan's temperature and top_p sample the completions, and the log-probs of the loss (policy
 * and reference) are those of logits / temperature, as TRL's fused LM head computes them. reward
 * and reward_std are TRL's over the rewards of every rank (TRL gathers them before normalising).
 * CUDA and precisions other than fp32 are refused in check. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_finetune.h"
#include "dt_generate.h"
#include "dt_grpo.h"
#include "dt_memprobe.h"
#include "dt_sha256.h"
#include "dt_tokenizer.h"
#include "dt_zero.h"
#include "objective_pairs.h"

/* TRL GRPOConfig's epsilon default (trl 1.16 trainer/grpo_config.py): the clip range */
#define GRPO_EPSILON 0.2
#define GRPO_WHERE_MAX 512

enum {
    GM_LOSS, GM_REWARD, GM_REWARD_STD, GM_ZERO_STD, GM_MEAN_LEN, GM_CLIPPED, GM_KL, GM_CLIP_REGION, GM_N
};
static const char *const k_names[GM_N] = {"loss", "reward", "reward_std", "frac_reward_zero_std",
                                          "completions/mean_length", "completions/clipped_ratio", "kl",
                                          "clip_ratio/region_mean"};

struct dt_objrun {
    objpairs p;                 /* first: the walk, metric sums, position (objpairs' shared entries) */
    dt_zero *zero;              /* the policy's ZeRO engine */
    float *unit;                /* ZeRO-3: one gathered unit [largest group], for the generator */
    int64_t P, G;               /* prompts per step on this rank, completions per prompt */
    int64_t B, k;               /* completion rows per micro-batch; this micro-batch's index in the step */
    int64_t iter;               /* this step's index among the rollout's num_iterations steps */
    dt_grpo_rollout roll;       /* the step's rollout on this rank: P x G rows */
    double rm[GM_N];            /* the step's rollout metrics (reward .. clipped_ratio) */
    dt_gen *gen;
    dt_lm *ref;                 /* beta != 0 without LoRA: the frozen reference */
    dt_tokenizer *tok;
    dt_grpo_opts go;
    dt_grpo_config cfg;
    dt_grpo_prompt *prompts;    /* [P] */
    char **text;                /* [P, 2] each prompt's text and answer (decoded ids) */
    char *where;                /* [P, GRPO_WHERE_MAX] */
    float *logp, *ref_logp, *d_logp;   /* [B, T] */
    float *old_logp;            /* num_iterations > 1: [P x G, T] the generating policy's log-probs */
    float *all_rewards;         /* [world, P x G] the step's rewards of every rank, in rank order */
};

static int grpo_check(const dt_plan *p, dt_error *err) {
    if (p->cluster.device != DT_DEVICE_CPU)
        return dt_errorf(err, DT_EINVAL, "dtrun's grpo runs on the CPU device only in this build; re-plan with "
                         "--device cpu or run it with TRL (dtplan export)");
    if (p->precision.param != DT_DTYPE_FP32 || p->precision.grad != DT_DTYPE_FP32)
        return dt_errorf(err, DT_EINVAL, "dtrun's grpo trains in fp32 only in this build (the generator reads fp32 "
                         "weights); re-plan with --precision fp32");
    const int64_t G = p->objective.num_generations, R = p->batch.micro_batch * p->batch.grad_accum;
    if (G < 2 || R % G != 0)
        return dt_errorf(err, DT_EINVAL, "objective.num_generations %lld must be >= 2 and divide a rank's rollout of "
                         "micro_batch x grad_accum = %lld completions (dtrun keeps each prompt's group on one rank); "
                         "re-plan with a global batch that is a multiple of num_generations x ranks",
                         (long long)G, (long long)R);
    if (p->objective.completion_len < 1 || p->objective.completion_len >= p->batch.seq_len)
        return dt_errorf(err, DT_EINVAL, "objective.completion_len %lld must be in [1, seq_len %lld)",
                         (long long)p->objective.completion_len, (long long)p->batch.seq_len);
    return DT_OK;
}

static void grpo_configure(const dt_plan *p, dt_model *m) { (void)p, (void)m; }

/* 1 when id stops a completion */
static int is_eos(const dt_objrun *o, int32_t id) {
    for (int e = 0; e < o->go.gen.n_eos; e++)
        if (o->go.gen.eos[e] == id) return 1;
    return 0;
}

/* Completion ids to text, its stop token left out (TRL decodes with skip_special_tokens). */
static int decode(void *ctx, const int32_t *ids, int64_t n, char **text, dt_error *err) {
    dt_objrun *o = ctx;
    while (n > 0 && is_eos(o, ids[n - 1])) n--;
    size_t len;
    return dt_tok_decode(o->tok, ids, (size_t)n, text, &len, err);
}

/* The tokenizer the prompts were prepared with (data.tokenizer_path), checked against the shards. */
static int open_tokenizer(dt_objrun *o, const dt_objrun_ctx *c, dt_error *err) {
    const char *path = c->plan->data.tokenizer_path;
    if (!path[0])
        return dt_errorf(err, DT_EINVAL, "grpo decodes completions for the rewards but the plan names no tokenizer "
                         "(data.tokenizer_path): plan with dtplan solve --data DIR of dtrun prepare --format prompts");
    if (dt_tok_load(path, &o->tok, err)) return dt_error_prefix(err, "grpo: data.tokenizer_path");
    unsigned char fp[DT_TOK_FINGERPRINT_BYTES];
    dt_tok_fingerprint(o->tok, fp);
    if (memcmp(fp, dt_pairset_fingerprint(o->p.train), sizeof fp))
        return dt_errorf(err, DT_EINVAL, "%s is not the tokenizer the prompts were prepared with: prepare them with "
                         "dtrun prepare --tokenizer %s", path, path);
    return DT_OK;
}

/* Every prompt leaves room for completion_len tokens: refused here, naming the record. */
static int check_prompts(dt_objrun *o, dt_error *err) {
    const dt_pairset *s = o->p.train;
    for (int64_t i = 0; i < dt_pairset_count(s); i++) {
        const int32_t *ids, *ans;
        int64_t n, na;
        int has;
        dt_pairset_prompt(s, i, &ids, &n, &ans, &na, &has, o->where, GRPO_WHERE_MAX);
        if (n + o->go.gen.max_new_tokens > o->p.T)
            return dt_errorf(err, DT_EINVAL, "%s: the prompt is %lld tokens; with completion_len %lld that exceeds the "
                             "plan's seq_len %lld: shorten it or re-plan with a longer --seq", o->where, (long long)n,
                             (long long)o->go.gen.max_new_tokens, (long long)o->p.T);
        if (!has && !o->go.reward_cmd)
            return dt_errorf(err, DT_EINVAL, "%s: no \"answer\" for the built-in exact-answer reward: add one, or give "
                             "dtrun --reward-command CMD", o->where);
    }
    return DT_OK;
}

static int alloc_buffers(dt_objrun *o, dt_error *err) {
    const size_t P = (size_t)o->P, BT = (size_t)(o->B * o->p.T);
    o->prompts = calloc(P, sizeof *o->prompts);
    o->text = calloc(2 * P, sizeof *o->text);
    o->where = malloc(P * GRPO_WHERE_MAX);
    o->logp = malloc(BT * sizeof(float));
    o->ref_logp = malloc(BT * sizeof(float));
    o->d_logp = malloc(BT * sizeof(float));
    o->all_rewards = malloc((size_t)(o->p.world * o->P * o->G) * sizeof(float));
    if (o->p.plan->objective.num_iterations > 1)
        o->old_logp = malloc((size_t)(o->P * o->G * o->p.T) * sizeof(float));
    if (!o->prompts || !o->text || !o->where || !o->logp || !o->ref_logp || !o->d_logp || !o->all_rewards ||
        (o->p.plan->objective.num_iterations > 1 && !o->old_logp))
        return dt_errorf(err, DT_ENOMEM, "grpo: out of memory for a step's %zu prompts", P);
    return DT_OK;
}

/* the chat templates' end-of-turn tokens (dt_prepdoc.h: chatml, llama3) */
static const char *const k_turn_end[] = {"<|im_end|>", "<|eot_id|>"};

static void set_options(dt_objrun *o, const dt_objrun_ctx *c) {
    const dt_plan *pl = c->plan;
    o->go = (dt_grpo_opts){.G = o->G, .T = o->p.T, .pad_id = dt_pairset_pad_id(o->p.train),
                           .reward_cmd = c->reward_cmd && c->reward_cmd[0] ? c->reward_cmd : NULL,
                           .reward_timeout_s = c->reward_timeout_s, .scale = DT_GRPO_SCALE_GROUP};
    o->go.gen = (dt_gen_params){.max_new_tokens = pl->objective.completion_len,
                                .temperature = pl->objective.temperature, .top_p = pl->objective.top_p,
                                .vocab_limit = dt_tok_vocab_size(o->tok), .n_eos = 1};
    o->go.gen.eos[0] = o->go.pad_id;
    /* a chat's turn ends with its template's end token (Qwen's generation_config stops at
     * <|im_end|>, Llama-3-Instruct's at <|eot_id|>): each the tokenizer has stops a completion too */
    for (size_t k = 0; k < sizeof k_turn_end / sizeof *k_turn_end; k++) {
        const int32_t id = dt_tok_token_id(o->tok, k_turn_end[k]);
        if (id >= 0 && id != o->go.pad_id && o->go.gen.n_eos < DT_GEN_MAX_EOS) o->go.gen.eos[o->go.gen.n_eos++] = id;
    }
    /* dapo's normalizer as TRL's: the generation batch's completion tokens over all ranks
     * (num_items_in_batch, set per step) / num_processes, here x 1 / steps_per_generation
     * (= accumulation) since the trainer scales each micro-batch by 1 / accumulation */
    o->cfg = (dt_grpo_config){.type = DT_GRPO_LOSS_DAPO, .eps_low = GRPO_EPSILON, .eps_high = GRPO_EPSILON,
                              .beta = pl->objective.kl_coef, .max_completion_length = pl->objective.completion_len,
                              .grad_accum = 1, .num_processes = c->world,
                              .steps_per_generation = pl->batch.grad_accum};
}

/* ZeRO-3: a host buffer for the largest parameter group, each gathered in turn into it. */
static int alloc_unit(dt_objrun *o, dt_lm *policy, dt_error *err) {
    size_t most = 0;
    for (int u = 0; u < dt_lm_num_groups(policy); u++)
        if (dt_lm_group_numel(policy, u) > most) most = dt_lm_group_numel(policy, u);
    o->unit = malloc(most * sizeof(float));
    return o->unit ? DT_OK : dt_errorf(err, DT_ENOMEM, "grpo: out of memory for a gathered unit of %zu params", most);
}

static int grpo_open(const dt_objrun_ctx *c, dt_lm *policy, dt_objrun **out, dt_error *err) {
    dt_objrun *o = calloc(1, sizeof *o);
    if (!o) return dt_errorf(err, DT_ENOMEM, "out of memory");
    *out = o;
    const dt_plan *pl = c->plan;
    o->zero = c->zero;
    o->G = pl->objective.num_generations;
    o->B = pl->batch.micro_batch;
    o->P = o->B * pl->batch.grad_accum / o->G;
    int rc = objpairs_open_records(&o->p, c, o->P, 1, err);
    if (!rc) rc = open_tokenizer(o, c, err);
    if (!rc) set_options(o, c);
    if (!rc) rc = alloc_buffers(o, err);
    if (!rc) rc = check_prompts(o, err);
    if (!rc) rc = dt_gen_create(c->model, o->P * o->G, o->p.T, &o->gen, err);
    if (!rc && pl->parallel.zero_stage == 3) rc = alloc_unit(o, policy, err);
    if (!rc && pl->objective.kl_coef != 0 && !dt_ft_is_lora(&pl->finetune))
        rc = objrun_reference_open(c, pl->batch.micro_batch, &o->ref, err);
    return rc;
}

/* The micro-batch's P prompts (their records, text and answers) from the next indices. */
static int load_prompts(dt_objrun *o, dt_error *err) {
    for (int64_t b = 0; b < o->P; b++) {
        dt_grpo_prompt *q = &o->prompts[b];
        char *where = o->where + b * GRPO_WHERE_MAX;
        const int32_t *ans;
        int64_t na;
        int has;
        dt_pairset_prompt(o->p.train, o->p.idx[b], &q->ids, &q->n, &ans, &na, &has, where, GRPO_WHERE_MAX);
        for (int k = 0; k < 2; k++) free(o->text[2 * b + k]), o->text[2 * b + k] = NULL;
        size_t len;
        if (dt_tok_decode(o->tok, q->ids, (size_t)q->n, &o->text[2 * b], &len, err) ||
            dt_tok_decode(o->tok, ans, (size_t)na, &o->text[2 * b + 1], &len, err))
            return dt_error_prefix(err, "%s", where);
        q->text = o->text[2 * b], q->answer = has ? o->text[2 * b + 1] : NULL, q->where = where;
    }
    return DT_OK;
}

/* A step's rollout seed: the data seed and the place of the global batch's first prompt in
 * the epoch's order (SplitMix64's finaliser mixes them), the same on any number of ranks. */
static uint64_t rollout_seed(const dt_objrun *o, int64_t place) {
    uint64_t z = o->p.plan->data.seed ^ ((uint64_t)o->p.pos.epoch << 40) ^ (uint64_t)place;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The per-token log-probs of lm's forward over rows [r0, r0 + B) of the step's rollout, at the
 * sampling temperature: its logits divided by it in place (TRL's add_fused_lm_head(temperature)). */
static int forward_logps(dt_objrun *o, dt_lm *lm, int64_t r0, float *logp, dt_error *err) {
    if (dt_lm_forward(lm, o->roll.ids + r0 * o->p.T, NULL, NULL, err)) return err->code;
    const double temp = o->go.gen.temperature;
    const int64_t V = dt_lm_logits_width(lm);
    float *logits = dt_lm_logits_mut(lm);   /* [B, T, V] */
    if (temp != 1.0)
        for (int64_t i = 0; i < o->B * o->p.T * V; i++) logits[i] = (float)(logits[i] / temp);
    return dt_grpo_token_logps(&o->roll, r0, o->B, logits, V, logp, err);
}

/* reward and reward_std over the rollouts of every rank (TRL's gathered rewards_per_func). */
static int gathered_reward_stats(dt_objrun *o, dt_error *err) {
    const int64_t n = o->roll.n;
    if (o->p.world > 1 &&
        dt_comm_allgather(o->p.comm, o->roll.rewards, o->all_rewards, (size_t)n, DT_DTYPE_FP32, err))
        return err->code;
    const float *all = o->p.world > 1 ? o->all_rewards : o->roll.rewards;
    dt_grpo_reward_stats(all, n * o->p.world, &o->rm[GM_REWARD], &o->rm[GM_REWARD_STD]);
    return DT_OK;
}

typedef struct {
    dt_objrun *o;
    dt_lm *g;
} unit_sink;

/* A piece of a gathered unit (flat_off: the model's flat offset); a whole unit goes into the
 * generator through the policy's group, bound to it for the copy. */
static int load_unit(void *ctx, int unit, size_t flat_off, size_t n, const void *params, dt_error *err) {
    unit_sink *k = ctx;
    const size_t off = dt_lm_group_offset(k->g, unit), un = dt_lm_group_numel(k->g, unit);
    memcpy(k->o->unit + (flat_off - off), params, n * sizeof(float));
    if (flat_off + n != off + un) return DT_OK;
    void *was = dt_lm_group_params(k->g, unit), *grads = dt_lm_group_grads(k->g, unit);
    int rc = dt_lm_bind_group(k->g, unit, k->o->unit, grads);
    if (!rc) rc = dt_gen_load_group(k->o->gen, k->g, unit, &k->o->p.plan->finetune, 1, err);
    dt_lm_bind_group(k->g, unit, was, grads);
    return rc;
}

/* The generator from the policy's current weights: whole on every rank at stages 0-2; at
 * stage 3 each unit all-gathered in turn (collective: every rank's first micro-batch of a step). */
static int load_generator(dt_objrun *o, dt_lm *g, dt_error *err) {
    if (!o->unit) return dt_gen_load(o->gen, g, &o->p.plan->finetune, 1, err);
    unit_sink k = {o, g};
    return dt_zero_consolidate_params(o->zero, load_unit, &k, err);
}

/* The step's rollout on this rank (TRL generates the generation batch once per step, its
 * steps_per_generation = accumulation): every prompt's group generated from the policy's
 * weights at the step's start in one batch, scored in one reward call, its advantages; dapo's
 * token count over all ranks. Sequence j of this rank draws the stream of its place in the
 * step's global order, so the completions do not depend on the number of ranks. */
static int step_rollout(dt_objrun *o, dt_lm *g, dt_error *err) {
    dt_grpo_rollout_free(&o->roll);
    if (load_generator(o, g, err) || objpairs_advance(&o->p) || load_prompts(o, err)) return err->code;
    /* this rank's first prompt's place in the global batch (objpairs_advance moved past it) */
    const int64_t first = o->p.pos.cursor - o->P * o->p.world + o->p.rank * o->P;
    o->go.gen.seed = rollout_seed(o, o->p.pos.cursor - o->P * o->p.world);
    o->go.gen.first_stream = (uint64_t)((first - (o->p.pos.cursor - o->P * o->p.world)) * o->G);
    dt_memprobe_begin(DT_PHASE_GENERATE);
    int rc = dt_grpo_rollout_run(o->gen, &o->go, o->prompts, o->P, decode, o, &o->roll, err);
    dt_memprobe_end(DT_PHASE_GENERATE);
    if (rc) return rc;
    const dt_grpo_rollout *r = &o->roll;
    const double v[GM_N] = {0, r->m.reward, r->m.reward_std, r->m.frac_reward_zero_std, r->m.mean_length,
                            r->m.clipped_ratio, 0, 0};
    memcpy(o->rm, v, sizeof v);
    if (gathered_reward_stats(o, err)) return err->code;
    float ntok = 0;   /* exact in fp32: far below 2^24 tokens */
    for (int64_t i = 0; i < r->n * r->T; i++) ntok += r->mask[i];
    if (o->p.world > 1 && dt_comm_allreduce(o->p.comm, &ntok, 1, DT_DTYPE_FP32, DT_RED_SUM, err)) return err->code;
    o->cfg.num_items_in_batch = ntok;
    return DT_OK;
}

/* The old log-probs the loss clips against: none in a rollout's first step (its forwards run
 * on the generating weights: TRL's per_token_logps.detach(), ratio 1), whose logp rows are
 * kept for steps 2 .. num_iterations. */
static const float *old_logps(dt_objrun *o, int64_t iter, int64_t r0) {
    float *old = o->old_logp ? o->old_logp + r0 * o->p.T : NULL;
    if (!old) return NULL;
    if (iter > 0) return old;
    memcpy(old, o->logp, (size_t)(o->B * o->p.T) * sizeof(float));
    return NULL;
}

/* The next micro-batch's place: k in the step, iter among the rollout's steps. */
static void next_micro(dt_objrun *o) {
    o->k = (o->k + 1) % o->p.plan->batch.grad_accum;
    if (o->k == 0) o->iter = (o->iter + 1) % o->p.plan->objective.num_iterations;
}

static int grpo_micro(dt_objrun *o, dt_lm *g, float grad_scale, double *loss, dt_error *err) {
    if (o->k == 0 && o->iter == 0 && step_rollout(o, g, err)) return err->code;
    const int64_t r0 = o->k * o->B, T = o->p.T, V = dt_lm_logits_width(g), iter = o->iter;
    next_micro(o);
    int rc = DT_OK;
    if (o->cfg.beta != 0) {   /* the reference: the frozen copy, or the policy's base (LoRA) */
        dt_lm_set_adapters(g, o->ref != NULL);
        rc = forward_logps(o, o->ref ? o->ref : g, r0, o->ref_logp, err);
        dt_lm_set_adapters(g, 1);
    }
    dt_grpo_metrics m = {0};
    if (!rc) rc = forward_logps(o, g, r0, o->logp, err);
    if (!rc) rc = dt_grpo_loss(&o->cfg, o->B, T, o->logp, old_logps(o, iter, r0),
                               o->cfg.beta != 0 ? o->ref_logp : NULL, o->roll.adv + r0, o->roll.mask + r0 * T,
                               o->d_logp, &m, err);
    /* d/dlogits = d/d(logits / temperature) / temperature */
    const float dscale = (float)(grad_scale / o->go.gen.temperature);
    for (int64_t i = 0; i < o->B * T && !rc; i++) o->d_logp[i] *= dscale;
    float *logits = dt_lm_logits_mut(g);   /* overwritten in place by dL/dlogits */
    if (!rc) rc = dt_obj_token_logps_backward(logits, o->roll.labels + r0 * T, o->B * T, V, o->d_logp, logits, err);
    if (!rc) rc = dt_lm_backward_logits(g, err);
    if (rc) return rc;
    o->rm[GM_LOSS] = m.loss, o->rm[GM_KL] = m.kl, o->rm[GM_CLIP_REGION] = m.clip_region;
    objpairs_add(&o->p, o->rm, GM_N);
    *loss = m.loss;
    return DT_OK;
}

/* A resume at step: inside a rollout's num_iterations steps the rollout is not in the checkpoint. */
static int grpo_resume_step(dt_objrun *o, int64_t step, dt_error *err) {
    const int64_t N = o->p.plan->objective.num_iterations;
    if (step % N == 0) return DT_OK;
    return dt_errorf(err, DT_EINVAL, "the checkpoint of step %lld is inside a grpo rollout's num_iterations %lld "
                     "steps (it ends the rollout's step %lld of %lld) and checkpoints keep no rollout: resume it with "
                     "a plan of --num-iterations 1, or save and stop at multiples of %lld (dtplan solve "
                     "--save-interval, dtrun --max-steps)",
                     (long long)step, (long long)N, (long long)(step % N), (long long)N, (long long)N);
}

static int grpo_step_metrics(dt_objrun *o, dt_objrun_metrics *m, dt_error *err) {
    return objpairs_step_metrics(&o->p, k_names, GM_N, m, err);
}

/* No held-out evaluation for grpo in this build (TRL's generates on the eval prompts). */
static int grpo_evaluate(dt_objrun *o, dt_lm *g, double *loss, dt_objrun_metrics *m, dt_error *err) {
    (void)o, (void)g, (void)err;
    m->n = 0;
    *loss = NAN;
    return DT_OK;
}

static void grpo_free(dt_objrun *o) {
    if (!o) return;
    objpairs_free(&o->p);
    dt_gen_free(o->gen);
    dt_grpo_rollout_free(&o->roll);
    free(o->unit);
    dt_lm_free(o->ref);
    dt_tok_free(o->tok);
    for (int64_t b = 0; o->text && b < 2 * o->P; b++) free(o->text[b]);
    free(o->text), free(o->prompts), free(o->where);
    free(o->logp), free(o->ref_logp), free(o->d_logp), free(o->all_rewards), free(o->old_logp);
    free(o);
}

const dt_objrun_ops dt_objrun_grpo = {
    .kind = DT_OBJ_GRPO, .rows_per_example = 1, .check = grpo_check, .configure = grpo_configure, .open = grpo_open,
    .micro = grpo_micro, .step_metrics = grpo_step_metrics, .evaluate = grpo_evaluate, .examples = objpairs_examples,
    .get_pos = objpairs_get_pos, .set_pos = objpairs_set_pos, .resume_step = grpo_resume_step,
    .data_fingerprint = objpairs_fingerprint, .free = grpo_free};
