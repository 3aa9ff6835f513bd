/* test_grpo.c — the GRPO step's pieces (engine/run/dt_grpo.h) on a tiny Llama-family model:
 *   rollout rows: prompt ‖ completion ids, labels on the completion only, mask, advantages with
 *   zero group means, metrics equal to their definitions;
 *   bad input: a prompt longer than the sequence allows (one line naming its record), a
 *   reward command that fails, hangs past its timeout or prints a non-number (one line naming
 *   the command), the rollout left empty;
 *   the gradient: dt_grpo_backward_rows equals central finite differences of the surrogate
 *   −Σ A·logp / normalizer whose gradient GRPO's loss has at ratio 1 (beta 0);
 *   learning: GRPO with the exact-answer reward teaches the model the successor of a digit
 *   ("3=" → "4") from random weights: the mean reward of the last steps exceeds the first
 *   steps' by LEARN_MARGIN (printed per step: the reward curve). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_generate.h"
#include "dt_grpo.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_optim.h"
#include "dt_test.h"

/* the task's tokens: digits 0-9, '=', EOS, letters a-d */
#define TOK_EQ 10
#define TOK_EOS 11
#define VOCAB 16
#define SEQ 6
#define NGEN 16
#define NPROMPT 10
#define STEPS 40
#define WINDOW 5
#define LEARN_MARGIN 0.3
#define LR 1e-2
#define FD_H 1e-2
#define FD_RTOL 1e-3   /* of the largest gradient: fp32 central differences at h 1e-2 */

static const char k_config[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":32,"
    "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
    "\"head_dim\":16,\"vocab_size\":16,\"max_position_embeddings\":16,\"rms_norm_eps\":1e-5,"
    "\"rope_theta\":10000.0,\"tie_word_embeddings\":false}";

static int decode(void *ctx, const int32_t *ids, int64_t n, char **text, dt_error *err) {
    (void)ctx;
    char *s = malloc((size_t)n + 1);
    if (!s) return dt_errorf(err, DT_ENOMEM, "out of memory");
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 10) s[k++] = (char)('0' + ids[i]);
        else if (ids[i] == TOK_EQ) s[k++] = '=';
        else if (ids[i] > TOK_EOS) s[k++] = (char)('a' + ids[i] - TOK_EOS - 1);
    }
    s[k] = 0;
    *text = s;
    return DT_OK;
}

typedef struct {
    int32_t ids[NPROMPT][2];
    char text[NPROMPT][4], answer[NPROMPT][4], where[NPROMPT][32];
    dt_grpo_prompt p[NPROMPT];
} task;

static void make_task(task *t) {
    for (int d = 0; d < NPROMPT; d++) {
        t->ids[d][0] = d, t->ids[d][1] = TOK_EQ;
        snprintf(t->text[d], sizeof t->text[d], "%d=", d);
        snprintf(t->answer[d], sizeof t->answer[d], "%d", (d + 1) % 10);
        snprintf(t->where[d], sizeof t->where[d], "prompts.jsonl:%d", d + 1);
        t->p[d] = (dt_grpo_prompt){t->ids[d], 2, t->text[d], t->answer[d], t->where[d]};
    }
}

static dt_grpo_opts opts(uint64_t seed) {
    dt_grpo_opts o = {.G = NGEN, .T = SEQ, .pad_id = TOK_EOS, .scale = DT_GRPO_SCALE_GROUP, .reward_timeout_s = 5};
    o.gen = (dt_gen_params){.max_new_tokens = 2, .temperature = 1.0, .top_p = 1.0, .seed = seed, .n_eos = 1};
    o.gen.eos[0] = TOK_EOS;
    return o;
}

static void check_rows(const dt_grpo_rollout *r) {
    double sum = 0;
    for (int64_t i = 0; i < r->n; i++) {
        int64_t counted = 0;
        for (int64_t t = 0; t < r->T; t++) {
            const int in = t >= r->plen[i] - 1 && t < r->plen[i] + r->clen[i] - 1;
            counted += r->mask[i * r->T + t] > 0;
            CHECK(in == (r->mask[i * r->T + t] > 0));
            CHECK(in ? r->labels[i * r->T + t] == r->ids[i * r->T + t + 1] : r->labels[i * r->T + t] == -100);
        }
        CHECK_EQ_I64(counted, r->clen[i]);
        sum += r->rewards[i];
    }
    CHECK_NEAR(r->m.reward, sum / (double)r->n, 1e-12);
    double ss = 0;
    for (int64_t i = 0; i < r->n; i++) ss += (r->rewards[i] - r->m.reward) * (r->rewards[i] - r->m.reward);
    CHECK_NEAR(r->m.reward_std, sqrt(ss / (double)(r->n - 1)), 1e-9);
    CHECK(r->m.min_length <= r->m.mean_length && r->m.mean_length <= r->m.max_length);
    CHECK(r->m.clipped_ratio >= 0 && r->m.clipped_ratio <= 1 && r->m.frac_reward_zero_std <= 1);
    for (int64_t g = 0; g < r->n / NGEN; g++) {
        double a = 0;
        for (int64_t k = 0; k < NGEN; k++) a += r->adv[g * NGEN + k];
        CHECK(fabs(a) < 1e-4);
    }
}

static void check_bad_input(dt_gen *gen, task *t) {
    dt_grpo_opts o = opts(1);
    dt_grpo_rollout r = {0};
    dt_error err;
    dt_grpo_prompt longp = t->p[3];
    const int32_t many[SEQ] = {1, 2, 3, 4, 5, TOK_EQ};
    longp.ids = many, longp.n = SEQ;
    CHECK(dt_grpo_rollout_run(gen, &o, &longp, 1, decode, NULL, &r, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "prompts.jsonl:4") && strstr(err.msg, "sequence length") && !strchr(err.msg, '\n'));
    CHECK(r.ids == NULL);
    const char *cmds[][2] = {{"cat >/dev/null; exit 3", "exit"}, {"sleep 10", "did not finish"},
                             {"cat >/dev/null; yes nan-ish | head -n 32", "not a"}};
    o.reward_timeout_s = 0.5;
    for (int k = 0; k < 3; k++) {
        o.reward_cmd = cmds[k][0];
        dt_error_clear(&err);
        CHECK(dt_grpo_rollout_run(gen, &o, t->p, 2, decode, NULL, &r, &err) != DT_OK);
        if (!strstr(err.msg, cmds[k][1]) || !strstr(err.msg, cmds[k][0]) || strchr(err.msg, '\n'))
            fprintf(stderr, "  reward command '%s': %s\n", cmds[k][0], err.msg);
        CHECK(strstr(err.msg, cmds[k][0]) != NULL && strstr(err.msg, cmds[k][1]) != NULL && !strchr(err.msg, '\n'));
        CHECK(r.ids == NULL);
    }
}

/* the surrogate −Σ adv·logp·mask / N (N: completion tokens; dapo's normalizer at one process) */
static double surrogate(dt_lm *lm, const dt_grpo_rollout *r, float *logp) {
    dt_error err;
    double s = 0, ntok = 0;
    for (int64_t i = 0; i < r->n; i++) {
        float loss;
        dt_lm_forward(lm, r->ids + i * r->T, NULL, &loss, &err);
        dt_grpo_token_logps(r, i, 1, dt_lm_logits(lm), VOCAB, logp, &err);
        for (int64_t t = 0; t < r->T; t++) {
            s -= r->adv[i] * logp[t] * r->mask[i * r->T + t];
            ntok += r->mask[i * r->T + t];
        }
    }
    return s / ntok;
}

static dt_grpo_config loss_cfg(const dt_grpo_rollout *r) {
    double ntok = 0;
    for (int64_t i = 0; i < r->n * r->T; i++) ntok += r->mask[i];
    return (dt_grpo_config){.type = DT_GRPO_LOSS_DAPO, .eps_low = 0.2, .eps_high = 0.2, .beta = 0.0,
                            .max_completion_length = 2, .grad_accum = 1, .num_items_in_batch = ntok,
                            .num_processes = 1, .steps_per_generation = 1};
}

/* the rollout's loss gradient into lm's grads; *reward its mean reward */
static int grpo_grads(dt_lm *lm, const dt_grpo_rollout *r, float *logp, float *dlogp, dt_error *err) {
    for (int64_t i = 0; i < r->n; i++) {
        float loss;
        int rc = dt_lm_forward(lm, r->ids + i * r->T, NULL, &loss, err);
        if (!rc) rc = dt_grpo_token_logps(r, i, 1, dt_lm_logits(lm), VOCAB, logp + i * r->T, err);
        if (rc) return rc;
    }
    const dt_grpo_config cfg = loss_cfg(r);
    dt_grpo_metrics m;
    int rc = dt_grpo_loss_rows(&cfg, r, logp, NULL, dlogp, &m, err);
    dt_lm_zero_grad(lm);
    return rc ? rc : dt_grpo_backward_rows(lm, r, dlogp, 1.0f, err);
}

static void check_gradient(dt_lm *lm, dt_gen *gen, task *t) {
    dt_grpo_opts o = opts(5);
    dt_grpo_rollout r;
    dt_error err;
    CHECK(dt_gen_load(gen, lm, NULL, 0, &err) == DT_OK);
    CHECK(dt_grpo_rollout_run(gen, &o, t->p, NPROMPT, decode, NULL, &r, &err) == DT_OK);
    check_rows(&r);
    float *logp = malloc((size_t)(r.n * r.T) * sizeof *logp), *dlogp = malloc((size_t)(r.n * r.T) * sizeof *dlogp);
    CHECK(grpo_grads(lm, &r, logp, dlogp, &err) == DT_OK);
    float *P = dt_lm_params(lm);
    const float *Gr = dt_lm_grads(lm);
    const size_t np = dt_lm_num_params(lm);
    double worst = 0, gmax = 0;
    for (size_t k = 0; k < np; k++) gmax = fmax(gmax, fabs(Gr[k]));
    for (size_t k = 7; k < np; k += np / 23) {   /* a spread of parameters */
        const float p0 = P[k];
        P[k] = p0 + (float)FD_H;
        const double up = surrogate(lm, &r, logp);
        P[k] = p0 - (float)FD_H;
        const double dn = surrogate(lm, &r, logp);
        P[k] = p0;
        worst = fmax(worst, fabs((up - dn) / (2 * FD_H) - Gr[k]));
    }
    printf("grpo gradient vs finite differences: worst %.2e of max |g| %.2e\n", worst, gmax);
    CHECK(worst < FD_RTOL * gmax);
    free(logp), free(dlogp);
    dt_grpo_rollout_free(&r);
}

/* GRPO from random weights on the successor task; the per-step mean reward into curve. */
static void learn(dt_lm *lm, dt_gen *gen, task *t, double *curve) {
    dt_precision pr;
    dt_precision_from_preset(DT_PREC_FP32, &pr);
    const size_t np = dt_lm_num_params(lm);
    dt_optim *opt = NULL;
    dt_error err;
    CHECK(dt_optim_create(&pr, np, &opt, &err) == DT_OK);
    dt_optim_init_master(opt, dt_lm_params(lm));
    const dt_adamw hp = {LR, 0.9, 0.999, 1e-8, 0.0};
    float *logp = malloc((size_t)(NPROMPT * NGEN * SEQ) * sizeof *logp);
    float *dlogp = malloc((size_t)(NPROMPT * NGEN * SEQ) * sizeof *dlogp);
    for (int s = 0; s < STEPS; s++) {
        dt_grpo_opts o = opts(1000 + (uint64_t)s);
        dt_grpo_rollout r;
        if (dt_gen_load(gen, lm, NULL, 0, &err) || dt_grpo_rollout_run(gen, &o, t->p, NPROMPT, decode, NULL, &r, &err) ||
            grpo_grads(lm, &r, logp, dlogp, &err)) {
            fprintf(stderr, "step %d: %s\n", s, err.msg);
            CHECK(0);
            break;
        }
        curve[s] = r.m.reward;
        printf("step %2d reward %.3f reward_std %.3f completions/mean_length %.2f clipped_ratio %.2f\n", s, r.m.reward,
               r.m.reward_std, r.m.mean_length, r.m.clipped_ratio);
        dt_optim_update(opt, dt_lm_params(lm), dt_lm_grads(lm), 0, np, &hp, 1.0, 0, s + 1);
        dt_grpo_rollout_free(&r);
    }
    free(logp), free(dlogp);
    dt_optim_free(opt);
}

int main(void) {
    dt_model m;
    dt_error err;
    dt_precision pr;
    dt_precision_from_preset(DT_PREC_FP32, &pr);
    dt_lm *lm = NULL;
    dt_gen *gen = NULL;
    if (dt_model_from_config_json(k_config, "grpo-tiny", &m, &err) ||
        dt_lm_create(&m, &pr, 1, SEQ, 0, DT_ATTN_FLASH, &lm, &err) || dt_lm_init_random(lm, 42, &err) ||
        dt_gen_create(&m, NPROMPT * NGEN, SEQ, &gen, &err) || dt_gen_load(gen, lm, NULL, 0, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    task t;
    make_task(&t);
    check_bad_input(gen, &t);
    check_gradient(lm, gen, &t);
    double curve[STEPS] = {0}, first = 0, last = 0;
    learn(lm, gen, &t, curve);
    for (int s = 0; s < WINDOW; s++) first += curve[s] / WINDOW, last += curve[STEPS - 1 - s] / WINDOW;
    printf("mean reward: first %d steps %.3f, last %d steps %.3f (must rise by %.2f)\n", WINDOW, first, WINDOW, last,
           LEARN_MARGIN);
    CHECK(last >= first + LEARN_MARGIN);
    dt_gen_free(gen);
    dt_lm_free(lm);
    TEST_MAIN_END();
}
