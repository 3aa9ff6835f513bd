/* refresh.c — dtrun's re-check of a plan's stored prediction against what the
 * plan's settings give today (dt_timemodel.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dt_timemodel.h"

int dt_plan_refresh_prediction(dt_plan *plan, int *stale, char *what, size_t what_len, dt_error *err) {
    dt_plan fresh = *plan;
    *stale = 0;
    if (what_len) what[0] = '\0';
    if (dt_predict(&fresh, err)) return err->code;
    if (plan->prediction.valid) {
        const dt_prediction *a = &plan->prediction, *b = &fresh.prediction;
        const char *bad = NULL;
        if (memcmp(&a->memory, &b->memory, sizeof a->memory) != 0) bad = "memory per category";
        else if (memcmp(a->comm_bytes, b->comm_bytes, sizeof a->comm_bytes) != 0) bad = "bytes per collective";
        else if (fabs(a->time.step_s - b->time.step_s) > 1e-9 * fabs(b->time.step_s)) bad = "step time";
        if (bad) {
            *stale = 1;
            snprintf(what, what_len, "its %s differ from what this plan's settings give", bad);
        }
    }
    plan->prediction = fresh.prediction;
    return DT_OK;
}
