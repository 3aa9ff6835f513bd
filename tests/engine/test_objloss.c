/* test_objloss.c — engine/run/objective_loss.c against TRL 1.16's own loss code.
 *
 * tests/engine/golden/objloss.txt (scripts/gen_objloss_goldens.py: RewardTrainer.compute_loss,
 * DPOTrainer._compute_loss and GRPOTrainer._compute_loss called on fixed fp32 inputs in float64,
 * torch autograd for the gradients, the metrics from the trainers' own _metrics) holds, per case,
 * the inputs, the loss and metrics and the gradient. Tolerances: the inputs are the same fp32
 * values on both sides and both accumulate in double, so a double result (loss, metric) differs
 * only by summation order: LOSS_TOL 1e-9 relative (the order's effect is ~1e-15). A gradient or
 * log-prob is returned as fp32: one rounding of a double (2^-24 ≈ 6e-8 relative), so F32_TOL 1e-6.
 * TRL computes the accuracy and clip-ratio metrics through .float() (fp32 indicator means): one fp32
 * rounding again, so METRIC_TOL 1e-6 for every metric other than the loss.
 * Then the refusals: a label outside the vocabulary, beta <= 0, robust smoothing >= 0.5, a missing
 * reference, rewards that are not whole groups.
 * usage: test_objloss GOLDEN_FILE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "dt_test.h"
#include "dt_objloss.h"

#define LOSS_TOL 1e-9
#define F32_TOL 1e-6
#define METRIC_TOL 1e-6
#define MAX_ARRAYS 256

typedef struct { char name[64]; int64_t n; double *v; } golden_array;
static golden_array G[MAX_ARRAYS];
static int NG;

static int load(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1 << 17];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        if (NG == MAX_ARRAYS) break;
        golden_array *a = &G[NG++];
        char *p = line, *end;
        int used = 0;
        if (sscanf(p, "%63s %lld%n", a->name, (long long *)&a->n, &used) != 2) { fclose(f); return -1; }
        p += used;
        a->v = calloc((size_t)a->n + 1, sizeof(double));
        for (int64_t i = 0; i < a->n; i++, p = end) a->v[i] = strtod(p, &end);
    }
    fclose(f);
    return 0;
}

static const golden_array *get(const char *c, const char *field) {
    char name[64];
    snprintf(name, sizeof name, "%s.%s", c, field);
    for (int i = 0; i < NG; i++)
        if (!strcmp(G[i].name, name)) return &G[i];
    fprintf(stderr, "golden has no %s\n", name);
    exit(1);
}

static float *f32(const golden_array *a) {
    float *x = calloc((size_t)a->n + 1, sizeof(float));
    for (int64_t i = 0; i < a->n; i++) x[i] = (float)a->v[i];
    return x;
}

static void check_tokens(void) {
    const golden_array *lg = get("tok", "logits"), *lb = get("tok", "labels");
    int64_t n = lb->n, V = lg->n / n;
    float *logits = f32(lg), *dlogp = f32(get("tok", "dlogp")), *logp = calloc((size_t)n, 4),
          *dl = calloc((size_t)(n * V), 4);
    int32_t *labels = calloc((size_t)n, 4);
    for (int64_t i = 0; i < n; i++) labels[i] = (int32_t)lb->v[i];
    CHECK(dt_obj_token_logps(logits, labels, n, V, logp, NULL) == 0);
    for (int64_t i = 0; i < n; i++) CHECK_NEAR(logp[i], get("tok", "logp")->v[i], F32_TOL);
    CHECK(dt_obj_token_logps_backward(logits, labels, n, V, dlogp, dl, NULL) == 0);
    for (int64_t i = 0; i < n * V; i++) CHECK_NEAR(dl[i], get("tok", "dlogits")->v[i], F32_TOL);
    /* the sequence sum: all n rows as one sequence equals the golden's sum */
    double seq, want = 0;
    int64_t ntok;
    for (int64_t i = 0; i < n; i++) want += get("tok", "logp")->v[i];
    CHECK(dt_obj_seq_logps(logits, labels, 1, n, V, &seq, &ntok, NULL) == 0);
    CHECK_NEAR(seq, want, 1e-12 * n * 10);
    CHECK_EQ_I64(ntok, 5);
    dt_error err = {0};
    labels[0] = (int32_t)V;
    CHECK(dt_obj_token_logps(logits, labels, n, V, logp, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "outside the vocabulary") != NULL);
    free(logits), free(dlogp), free(logp), free(dl), free(labels);
}

static void check_rm(const char *c) {
    const golden_array *rcg = get(c, "rc"), *mg = get(c, "margin"), *mt = get(c, "metrics"), *d = get(c, "d");
    int64_t n = rcg->n;
    float *rc = f32(rcg), *rr = f32(get(c, "rr")), *margin = mg->n ? f32(mg) : NULL;
    float *dc = calloc((size_t)n, 4), *dr = calloc((size_t)n, 4);
    dt_rm_metrics m;
    CHECK(dt_rm_loss(rc, rr, margin, n, get(c, "center")->v[0], dc, dr, &m, NULL) == 0);
    double got[6] = {m.loss, m.accuracy, m.margin, m.min_reward, m.mean_reward, m.max_reward};
    for (int k = 0; k < 6; k++) CHECK_NEAR(got[k], mt->v[k], k == 0 ? LOSS_TOL : METRIC_TOL);
    for (int64_t i = 0; i < n; i++) {
        CHECK_NEAR(dc[i], d->v[i], F32_TOL);
        CHECK_NEAR(dr[i], d->v[n + i], F32_TOL);
    }
    free(rc), free(rr), free(margin), free(dc), free(dr);
}

static void check_dpo(const char *c) {
    const golden_array *cfgv = get(c, "cfg"), *pcg = get(c, "pc"), *mt = get(c, "metrics"), *d = get(c, "d");
    int64_t n = pcg->n;
    static const dt_dpo_loss_type types[] = {DT_DPO_SIGMOID, DT_DPO_ROBUST, DT_DPO_HINGE, DT_DPO_IPO};
    dt_dpo_config cfg = {types[(int)cfgv->v[0]], cfgv->v[1], cfgv->v[2], (int)cfgv->v[3]};
    float *pc = f32(pcg), *pr = f32(get(c, "pr")), *rc = f32(get(c, "rc")), *rr = f32(get(c, "rr"));
    int64_t *lc = calloc((size_t)n, 8), *lr = calloc((size_t)n, 8);
    for (int64_t i = 0; i < n; i++) lc[i] = (int64_t)get(c, "lc")->v[i], lr[i] = (int64_t)get(c, "lr")->v[i];
    float *dc = calloc((size_t)n, 4), *dr = calloc((size_t)n, 4);
    dt_dpo_metrics m;
    int rc_ = dt_dpo_loss(&cfg, n, pc, pr, cfg.reference_free ? NULL : rc, cfg.reference_free ? NULL : rr, lc, lr, dc,
                          dr, &m, NULL);
    CHECK(rc_ == 0);
    double got[7] = {m.loss, m.rewards_chosen, m.rewards_rejected, m.rewards_margins, m.rewards_accuracies,
                     m.logps_chosen, m.logps_rejected};
    for (int k = 0; k < 7; k++) {
        CHECK_NEAR(got[k], mt->v[k], k == 0 ? LOSS_TOL : METRIC_TOL);
    }
    for (int64_t i = 0; i < n; i++) {
        CHECK_NEAR(dc[i], d->v[i], F32_TOL);
        CHECK_NEAR(dr[i], d->v[n + i], F32_TOL);
    }
    free(pc), free(pr), free(rc), free(rr), free(lc), free(lr), free(dc), free(dr);
}

static void check_adv(const char *c) {
    const golden_array *cfgv = get(c, "cfg"), *r = get(c, "r"), *want = get(c, "adv");
    static const dt_grpo_scale scales[] = {DT_GRPO_SCALE_GROUP, DT_GRPO_SCALE_BATCH, DT_GRPO_SCALE_NONE};
    float *rw = f32(r), *adv = calloc((size_t)r->n, 4);
    CHECK(dt_grpo_advantages(rw, r->n, (int64_t)cfgv->v[0], scales[(int)cfgv->v[1]], adv, NULL) == 0);
    for (int64_t i = 0; i < r->n; i++) CHECK_NEAR(adv[i], want->v[i], F32_TOL);
    dt_error err = {0};
    CHECK(dt_grpo_advantages(rw, r->n - 1, (int64_t)cfgv->v[0], DT_GRPO_SCALE_GROUP, adv, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "whole groups") != NULL);
    free(rw), free(adv);
}

static void check_grpo(const char *c) {
    const golden_array *v = get(c, "cfg"), *mt = get(c, "metrics"), *d = get(c, "d");
    static const dt_grpo_loss_type types[] = {DT_GRPO_LOSS_GRPO, DT_GRPO_LOSS_BNPO, DT_GRPO_LOSS_DR_GRPO, DT_GRPO_LOSS_DAPO};
    dt_grpo_config cfg = {types[(int)v->v[0]], v->v[1], v->v[2], v->v[3], (int64_t)v->v[4], (int64_t)v->v[5],
                          v->v[6], (int64_t)v->v[7], (int64_t)v->v[8]};
    int64_t B = (int64_t)v->v[9], T = (int64_t)v->v[10];
    float *logp = f32(get(c, "logp")), *old = v->v[11] ? f32(get(c, "old")) : NULL, *ref = f32(get(c, "ref")),
          *adv = f32(get(c, "adv")), *mask = f32(get(c, "mask")), *dl = calloc((size_t)(B * T), 4);
    dt_grpo_metrics m;
    CHECK(dt_grpo_loss(&cfg, B, T, logp, old, cfg.beta != 0 ? ref : NULL, adv, mask, dl, &m, NULL) == 0);
    double got[5] = {m.loss, m.kl, m.clip_low, m.clip_high, m.clip_region};
    for (int k = 0; k < 5; k++) CHECK_NEAR(got[k], mt->v[k], k == 0 ? LOSS_TOL : METRIC_TOL);
    for (int64_t i = 0; i < B * T; i++) CHECK_NEAR(dl[i], d->v[i], F32_TOL);
    free(logp), free(old), free(ref), free(adv), free(mask), free(dl);
}

/* transformers' LlamaForSequenceClassification: argmax of position · (ids != pad) */
static void check_last_nonpad(void) {
    int32_t right[] = {5, 6, 7, 0, 0}, left[] = {0, 0, 5, 6, 7}, none[] = {5, 6, 7}, all[] = {0, 0, 0};
    CHECK_EQ_I64(dt_obj_last_nonpad(right, 5, 0), 2);
    CHECK_EQ_I64(dt_obj_last_nonpad(left, 5, 0), 4);
    CHECK_EQ_I64(dt_obj_last_nonpad(none, 3, 0), 2);
    CHECK_EQ_I64(dt_obj_last_nonpad(all, 3, 0), 0);
    CHECK_EQ_I64(dt_obj_last_nonpad(right, 5, -1), 4);
}

static void check_refusals(void) {
    float x[2] = {-1, -2}, d[2];
    dt_dpo_metrics m;
    dt_error err = {0};
    dt_dpo_config bad_beta = {DT_DPO_SIGMOID, 0, 0, 1};
    CHECK(dt_dpo_loss(&bad_beta, 2, x, x, NULL, NULL, NULL, NULL, d, d, &m, &err) == DT_EINVAL);
    dt_dpo_config robust = {DT_DPO_ROBUST, 0.1, 0.5, 1};
    CHECK(dt_dpo_loss(&robust, 2, x, x, NULL, NULL, NULL, NULL, d, d, &m, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "[0, 0.5)") != NULL);
    dt_dpo_config noref = {DT_DPO_SIGMOID, 0.1, 0, 0};
    CHECK(dt_dpo_loss(&noref, 2, x, x, NULL, NULL, NULL, NULL, d, d, &m, &err) == DT_EINVAL);
    dt_dpo_config ipo = {DT_DPO_IPO, 0.1, 0, 1};
    CHECK(dt_dpo_loss(&ipo, 2, x, x, NULL, NULL, NULL, NULL, d, d, &m, &err) == DT_EINVAL);
    dt_grpo_config g = {DT_GRPO_LOSS_GRPO, 0.2, 0.2, 0.04, 4, 1, 0, 1, 1};
    dt_grpo_metrics gm;
    float one[2] = {1, 1};
    CHECK(dt_grpo_loss(&g, 1, 2, x, NULL, NULL, one, one, d, &gm, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "reference") != NULL);
    dt_rm_metrics rm;
    CHECK(dt_rm_loss(x, x, NULL, 0, 0, d, d, &rm, &err) == DT_EINVAL);
}

int main(int argc, char **argv) {
    if (argc != 2 || load(argv[1])) {
        fprintf(stderr, "usage: test_objloss GOLDEN_FILE (a readable tests/engine/golden/objloss.txt)\n");
        return 1;
    }
    check_tokens();
    check_rm("rm0");
    check_rm("rm1");
    const char *dpo[] = {"dpo_sigmoid", "dpo_cdpo", "dpo_robust", "dpo_hinge", "dpo_ipo", "dpo_reffree"};
    for (size_t i = 0; i < sizeof dpo / sizeof dpo[0]; i++) check_dpo(dpo[i]);
    check_adv("adv_group");
    check_adv("adv_batch");
    check_adv("adv_none");
    const char *grpo[] = {"grpo_grpo", "grpo_bnpo", "grpo_drgrpo", "grpo_dapo", "grpo_onpolicy"};
    for (size_t i = 0; i < sizeof grpo / sizeof grpo[0]; i++) check_grpo(grpo[i]);
    check_last_nonpad();
    check_refusals();
    for (int i = 0; i < NG; i++) free(G[i].v);
    TEST_MAIN_END();
}
