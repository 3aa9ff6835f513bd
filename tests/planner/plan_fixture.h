/* plan_fixture.h — a plan on gpus ranks of one node, no reserve, for the planner tests. */
#ifndef PLAN_FIXTURE_H
#define PLAN_FIXTURE_H

#include "dt_plan.h"
#include "dt_model.h"
#include "dt_test.h"

/* model: a catalog name, or NULL to derive the shape for n_params */
static void fixture_plan(dt_plan *p, const char *model, int64_t n_params, int64_t gpus) {
    dt_error e = {0};
    dt_plan_defaults(p);
    int rc = model ? dt_model_resolve(model, &p->model, &e) : dt_model_for_params(n_params, &p->model, &e);
    if (rc) fprintf(stderr, "fixture model: %s\n", e.msg);
    CHECK(rc == 0);
    p->cluster.nodes = 1;
    p->cluster.gpus_per_node = gpus;
    p->parallel.world_size = gpus;
    p->cluster.hw.reserve_bytes = 0;
}

#endif
