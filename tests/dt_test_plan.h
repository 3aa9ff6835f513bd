/* dt_test_plan.h — the plan the engine tests start from: configs/plans/tiny-cpu.json
 * (gpt2-tiny on one CPU rank), or another plan of the tree, found through DT_SOURCE_DIR (ctest sets it) or the
 * current directory. A test that cannot load it cannot test anything: it exits 1
 * naming the file. */
#ifndef DT_TEST_PLAN_H
#define DT_TEST_PLAN_H

#include <stdio.h>
#include <stdlib.h>

#include "dt_plan.h"

/* The plan at rel (from the source tree's root). */
static inline dt_plan dt_test_load_plan(const char *rel) {
    dt_plan p;
    dt_error err;
    char path[1024];
    const char *src = getenv("DT_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
    if (dt_plan_load(path, &p, &err)) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.msg);
        exit(1);
    }
    return p;
}

static inline dt_plan dt_test_tiny_plan(void) { return dt_test_load_plan("configs/plans/tiny-cpu.json"); }

#endif
