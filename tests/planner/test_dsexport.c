/* test_dsexport.c — `dtplan export --deepspeed` writes only what the real DeepSpeed
 * accepts (issue 34 item 8): every scheduler's arguments satisfy the checks in
 * deepspeed/runtime/lr_schedules.py (0.19.8) for every warmup length a plan may hold,
 * including 0 (a short `dtplan solve --steps 4` plan), and the file imports back into
 * a plan that runs the same schedule. The end-to-end check — deepspeed.initialize and
 * a few steps on every exported configuration — is bench/validate_ds_export.sh. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "dt_dsconfig.h"
#include "dt_dsexport.h"
#include "dt_json.h"
#include "dt_test.h"
#include "plan_fixture.h"

/* DeepSpeed runs every warmup with max(2, W) steps (WarmupLR.__init__, WarmupCosineLR.__init__) */
#define DS_EFFECTIVE_MIN_WARMUP 2

static int64_t ds_effective(int64_t w) { return w > DS_EFFECTIVE_MIN_WARMUP ? w : DS_EFFECTIVE_MIN_WARMUP; }

/* a JSON number DeepSpeed's `isinstance(v, int) and v > 0` accepts: integral, printed
 * without a fraction or exponent (Python's json reads "1.0" and "1e3" as float) */
static int is_positive_python_int(const cJSON *v) {
    if (!cJSON_IsNumber(v) || v->valuedouble <= 0 || v->valuedouble != floor(v->valuedouble)) return 0;
    char *text = cJSON_PrintUnformatted(v);
    int ok = text && !strpbrk(text, ".eE");
    free(text);
    return ok;
}

#define RANKS 2

/* a 2-rank gpt2 plan, one sequence per rank, whose run is total optimizer steps */
static void short_plan(dt_plan *p, int64_t total) {
    fixture_plan(p, "gpt2", 0, RANKS);
    p->batch.micro_batch = 1, p->batch.grad_accum = 1, p->batch.global_batch = RANKS;
    p->schedule.total_steps = total;
}

static void check_one(dt_sched_kind kind, int64_t warmup, int64_t total) {
    dt_plan p;
    dt_error e = {0};
    short_plan(&p, total);
    p.schedule.kind = kind;
    p.schedule.warmup_steps = warmup;
    char *text = dt_dsexport_config(&p, &e);
    if (!text) fprintf(stderr, "export (kind %d, W %lld, T %lld): %s\n", kind, (long long)warmup, (long long)total, e.msg);
    CHECK(text != NULL);
    if (!text) return;
    cJSON *root = cJSON_Parse(text);
    CHECK(root != NULL);
    const cJSON *sch = cJSON_GetObjectItemCaseSensitive(root, "scheduler");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(sch, "params");
    CHECK(params != NULL);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(params, "warmup_num_steps");
    if (!is_positive_python_int(w))
        fprintf(stderr, "kind %d W %lld: warmup_num_steps %g is not a positive integer (DeepSpeed refuses it)\n",
                kind, (long long)warmup, w ? w->valuedouble : -1.0);
    CHECK(is_positive_python_int(w));
    if (kind != DT_SCHED_WARMUP_LR) {
        /* required positional argument of WarmupDecayLR / WarmupCosineLR */
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(params, "total_num_steps");
        CHECK(is_positive_python_int(t));
        CHECK(t && t->valuedouble == (double)total);
    }
    /* DeepSpeed runs the exported warmup exactly as the plan's */
    CHECK_EQ_I64(ds_effective((int64_t)w->valuedouble), ds_effective(warmup));

    /* and the file comes back into a valid plan with the same schedule */
    dt_dsconfig c;
    int rc = dt_dsconfig_parse(text, "exported.json", &c, &e);
    if (rc) fprintf(stderr, "re-import: %s\n%s", e.msg, text);
    CHECK(rc == DT_OK);
    dt_plan q;
    short_plan(&q, total);
    rc = rc ? rc : dt_dsconfig_apply(&c, &q, NULL, &e);
    CHECK(rc == DT_OK);
    CHECK(q.schedule.kind == kind);
    CHECK_EQ_I64(ds_effective(q.schedule.warmup_steps), ds_effective(warmup));
    CHECK(dt_plan_validate(&q, &e) == DT_OK);
    cJSON_Delete(root);
    free(text);
}

static void test_every_schedule_and_warmup(void) {
    const dt_sched_kind kinds[] = {DT_SCHED_WARMUP_LR, DT_SCHED_WARMUP_DECAY_LR, DT_SCHED_WARMUP_COSINE_LR};
    /* (W, T): a --steps 4 plan (W 0), W 1 with a one-step run, the clamp's edge, a long run */
    const int64_t cases[][2] = {{0, 4}, {0, 1}, {1, 1}, {1, 4}, {2, 4}, {3, 4}, {100, 1000}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_one(kinds[k], cases[i][0], cases[i][1]);
}

static void expect_import_error(const char *json, const char *needle) {
    dt_dsconfig c;
    dt_error e = {0};
    int rc = dt_dsconfig_parse(json, "cfg.json", &c, &e);
    if (rc != DT_EINVAL || !strstr(e.msg, needle))
        fprintf(stderr, "config %s\n  expected an error containing \"%s\", got rc %d: %s\n", json, needle, rc, e.msg);
    CHECK(rc == DT_EINVAL && strstr(e.msg, needle) != NULL);
}

/* what DeepSpeed refuses at deepspeed.initialize, `dtplan estimate --deepspeed` refuses too */
static void test_import_refuses_what_deepspeed_refuses(void) {
    expect_import_error("{\"train_micro_batch_size_per_gpu\": 1, \"scheduler\": {\"type\": \"WarmupLR\", "
                        "\"params\": {\"warmup_num_steps\": 0}}}",
                        "$.scheduler.params.warmup_num_steps: expected an integer >= 1");
    expect_import_error("{\"train_micro_batch_size_per_gpu\": 1, \"scheduler\": {\"type\": \"WarmupCosineLR\", "
                        "\"params\": {\"warmup_num_steps\": 10}}}",
                        "$.scheduler.params.total_num_steps: required by WarmupCosineLR");
    expect_import_error("{\"train_micro_batch_size_per_gpu\": 1, \"scheduler\": {\"type\": \"WarmupDecayLR\"}}",
                        "$.scheduler.params.total_num_steps: required by WarmupDecayLR");
}

int main(void) {
    test_every_schedule_and_warmup();
    test_import_refuses_what_deepspeed_refuses();
    TEST_MAIN_END();
}
