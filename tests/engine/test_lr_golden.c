/* test_lr_golden.c — dt_schedule_lr against DeepSpeed's own schedulers.
 *
 * tests/engine/golden/lr_schedules.txt (scripts/gen_lr_schedule_goldens.py, DeepSpeed's
 * WarmupLR / WarmupDecayLR / WarmupCosineLR stepped as its engine steps them) holds, per
 * configuration, the learning rate of every applied optimizer step from the first to well past
 * total_num_steps. dtrun must give each one, to rounding: the warmup clamp (warmup_num_steps
 * < 2 runs as 2), log and linear warmups, warmup_min_lr / warmup_min_ratio, the decay's
 * max(1, T - W), the cosine progress clamped at the end (and T <= W), the first step's
 * __init__ value. A warmup of 0 (which DeepSpeed refuses; the export writes 1) runs as 1.
 * usage: test_lr_golden GOLDEN_FILE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "dt_test.h"
#include "dt_optim.h"

/* the golden's %.17g values against ours: the same double operations, so equal to a few ulps */
#define LR_REL_TOL 1e-14

static int parse_kind(const char *name, dt_sched_kind *k) {
    static const dt_sched_kind kinds[] = {DT_SCHED_WARMUP_LR, DT_SCHED_WARMUP_DECAY_LR, DT_SCHED_WARMUP_COSINE_LR};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(name, dt_schedule_name(kinds[i]))) return *k = kinds[i], 0;
    return -1;
}

/* one golden line: KIND TOTAL WARMUP TYPE WARMUP_MIN COS_MIN LR N v0 .. v(N-1) */
static int check_line(FILE *f, int *configs, int *values) {
    char kind[32], type[16];
    long long total, warmup, n;
    double wmin, cmin, lr;
    if (fscanf(f, "%31s %lld %lld %15s %lf %lf %lf %lld", kind, &total, &warmup, type, &wmin, &cmin, &lr, &n) != 8)
        return -1;
    dt_schedule s = {0};
    CHECK(parse_kind(kind, &s.kind) == 0);
    CHECK(!strcmp(type, "log") || !strcmp(type, "linear"));
    s.total_steps = total, s.warmup_steps = warmup, s.warmup_linear = !strcmp(type, "linear");
    s.warmup_min_lr = wmin, s.cos_min_ratio = cmin;
    dt_schedule s0 = s;   /* warmup 0 and 1 both run as DeepSpeed's clamp of 2 */
    s0.warmup_steps = 0;
    for (long long k = 0; k < n; k++) {
        double want;
        if (fscanf(f, "%lf", &want) != 1) return -1;
        double got = dt_schedule_lr(&s, lr, k);
        if (!(fabs(got - want) <= LR_REL_TOL * fabs(want))) {
            fprintf(stderr, "%s T=%lld W=%lld %s min=%g cos_min=%g: step %lld lr %.17g, DeepSpeed %.17g\n", kind,
                    total, warmup, type, wmin, cmin, k, got, want);
            CHECK(0);
        }
        if (warmup <= 1) CHECK(dt_schedule_lr(&s0, lr, k) == got);
        (*values)++;
    }
    (*configs)++;
    return 0;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    if (argc != 2) TEST_MAIN_END();
    FILE *f = fopen(argv[1], "r");
    CHECK(f != NULL);
    if (!f) TEST_MAIN_END();
    int configs = 0, values = 0, c;
    while ((c = fgetc(f)) != EOF) {
        if (c == '#') {   /* comment line */
            while ((c = fgetc(f)) != EOF && c != '\n') {}
            continue;
        }
        if (c == '\n' || c == ' ') continue;
        ungetc(c, f);
        if (check_line(f, &configs, &values)) {
            fprintf(stderr, "%s: malformed line after %d configurations\n", argv[1], configs);
            CHECK(0);
            break;
        }
    }
    fclose(f);
    CHECK(configs >= 15);   /* every configuration of the generator was read */
    printf("%d configurations, %d steps checked against DeepSpeed\n", configs, values);
    TEST_MAIN_END();
}
