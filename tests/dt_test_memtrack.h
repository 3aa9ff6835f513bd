/* dt_test_memtrack.h — the engine's tracked bytes per category (dt_memtrack, both pools)
 * against a plan's terms (dt_mem_breakdown), for the tests that hold the engine to the
 * planner category by category (engine_ft_memory, dist_tp_memory). */
#ifndef DT_TEST_MEMTRACK_H
#define DT_TEST_MEMTRACK_H

#include <stdio.h>

#include "dt_memory.h"
#include "dt_memtrack.h"
#include "dt_test.h"

static inline int64_t dt_test_tracked(dt_mem_category c) {
    return dt_mem_current(DT_POOL_DEVICE, c) + dt_mem_current(DT_POOL_HOST, c);
}

/* before[k]: the tracked bytes of category k now (call before building the engine). */
static inline void dt_test_tracked_snapshot(int64_t before[DT_MEM_CAT_COUNT]) {
    for (int k = 0; k < DT_MEM_CAT_COUNT; k++) before[k] = dt_test_tracked((dt_mem_category)k);
}

/* What the engine added since before equals m's params, grads, optimizer, activations and
 * buffers, each; a mismatch prints label, the category and both figures. */
static inline void dt_test_tracked_check(const int64_t before[DT_MEM_CAT_COUNT], const dt_mem_breakdown *m,
                                         const char *label) {
    const int64_t want[DT_MEM_CAT_COUNT] = {m->params, m->grads, m->optimizer, m->activations, m->buffers};
    for (int k = 0; k < DT_MEM_CAT_COUNT; k++) {
        const int64_t got = dt_test_tracked((dt_mem_category)k) - before[k];
        if (got != want[k])
            fprintf(stderr, "%s %s: engine %lld, planner %lld (%+lld)\n", label,
                    dt_mem_category_name((dt_mem_category)k), (long long)got, (long long)want[k],
                    (long long)(got - want[k]));
        CHECK_EQ_I64(got, want[k]);
    }
}

#endif
