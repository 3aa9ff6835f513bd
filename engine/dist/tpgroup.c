/* tpgroup.c — TP and DP sub-communicators (dt_tpgroup.h). */
#include "dt_tpgroup.h"

#include <stdlib.h>

struct dt_tpgroup {
    dt_comm *tp, *dp;
    dt_lm_tp model;
};

static int tp_allreduce(void *ctx, float *buf, size_t n, dt_error *err) {
    return dt_comm_allreduce(ctx, buf, n, DT_DTYPE_FP32, DT_RED_SUM, err);
}

static int tp_allgather(void *ctx, const float *send, float *recv, size_t n, dt_error *err) {
    return dt_comm_allgather(ctx, send, recv, n, DT_DTYPE_FP32, err);
}

int dt_tpgroup_create(dt_comm *world, int tp, dt_tpgroup **out, dt_error *err) {
    *out = NULL;
    const int W = dt_comm_size(world), r = dt_comm_rank(world);
    if (tp < 1 || W % tp)
        return dt_errorf(err, DT_EINVAL,
                         "layout.tp %d does not divide the %d ranks launched (world = dp x tp); launch a "
                         "multiple of tp ranks",
                         tp, W);
    dt_tpgroup *t = calloc(1, sizeof *t);
    if (!t) return dt_errorf(err, DT_ENOMEM, "out of memory creating the tensor-parallel groups");
    /* TP: consecutive ranks (color dp_rank); DP: the same tp_rank in every TP group */
    int rc = dt_comm_split(world, r / tp, r % tp, &t->tp, err);
    if (!rc) rc = dt_comm_split(world, r % tp, r / tp, &t->dp, err);
    if (rc) {
        dt_tpgroup_free(t);
        return rc;
    }
    t->model = (dt_lm_tp){dt_comm_rank(t->tp), dt_comm_size(t->tp), t->tp, tp_allreduce, tp_allgather};
    *out = t;
    return DT_OK;
}

void dt_tpgroup_free(dt_tpgroup *t) {
    if (!t) return;
    dt_comm_free(t->dp);
    dt_comm_free(t->tp);
    free(t);
}

dt_comm *dt_tpgroup_tp(const dt_tpgroup *t) { return t->tp; }
dt_comm *dt_tpgroup_dp(const dt_tpgroup *t) { return t->dp; }
const dt_lm_tp *dt_tpgroup_model(const dt_tpgroup *t) { return &t->model; }
