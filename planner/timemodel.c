/* timemodel.c — predicted step time and bytes communicated (dt_timemodel.h): the estimate
 * that dispatches a plan with a layout (TP / CP / PP) to planner/parallel3d.c and every
 * other plan to the terms of planner/timeterms.c, and the plan's whole prediction. */
#include "dt_timemodel.h"

#include <string.h>

#include "dt_ftplan.h"
#include "dt_vlmplan.h"
#include "dt_layout.h"
#include "dt_memory.h"
#include "dt_model.h"
#include "dt_objplan.h"
#include "dt_parallel3d.h"
#include "dt_solve.h"

int dt_time_terms_build(const dt_plan *p, dt_time_terms *t, dt_error *err) {
    if (dt_time_check(p, err)) return err->code;
    if (dt_layout_active(p)) {   /* TP / CP / PP (planner/parallel3d.c) */
        dt_p3_time parts;
        return dt_p3_time_terms(p, t, &parts, err);
    }
    return dt_time_terms_dp(p, t, err);
}

void dt_time_terms_eval(const dt_time_terms *t, int64_t K, dt_time_breakdown *out) {
    memset(out, 0, sizeof *out);
    double exposed = t->comm_fixed_exposed_s;
    for (int i = 0; i < t->n_phases; i++) {
        const dt_time_phase *ph = &t->phase[i];
        double e = ph->comm_s - ph->work0_s - ph->work_per_ckpt_s * (double)K;
        exposed += ph->mult * (e > ph->tail_s ? e : ph->tail_s);
    }
    out->compute_s = t->compute_s;
    out->recompute_s = t->recompute_base_s + t->per_ckpt_s * (double)K;
    out->comm_s = t->comm_total_s;
    out->comm_exposed_s = exposed;
    out->offload_s = t->offload_s;
    out->optimizer_s = t->optimizer_s;
    out->step_s = out->compute_s + out->recompute_s + exposed + out->offload_s + out->optimizer_s;
}

int dt_time_estimate(const dt_plan *p, dt_time_breakdown *out, dt_error *err) {
    /* objectives (planner/objective.c): the policy's step at its shape (pairs: 2 x micro),
     * then the reference / critic forwards and the generation */
    dt_obj_terms ot;
    dt_plan shaped;
    int64_t np = 0;
    const dt_plan *orig = p;
    if (dt_objplan_active(p) && dt_objplan_shape(orig, &np, &shaped)) p = &shaped;
    dt_time_terms t;
    if (dt_time_terms_build(p, &t, err)) return err->code;
    int64_t K = p->activations.ckpt_layers;
    if (K < 0 || K > p->model.n_layer)
        return dt_errorf(err, DT_EINVAL, "time model: ckpt_layers %lld is not in 0..%lld", (long long)K,
                         (long long)p->model.n_layer);
    dt_time_terms_eval(&t, K, out);
    if (dt_objplan_active(orig)) {
        dt_objplan_terms(orig, &ot);
        if (dt_objplan_time(orig, &ot, err)) return err->code;
        out->step_s += dt_objplan_step_s(&ot);
    }
    double tokens = (double)p->batch.global_batch * (double)p->batch.seq_len;
    double model_flops = (double)p->batch.global_batch *
                         dt_model_train_flops_per_seq(&p->model, p->batch.seq_len);
    if (dt_ftplan_active(p)) model_flops *= dt_ftplan_flops_ratio(p);   /* the method's own FLOPs */
    model_flops += (double)p->batch.global_batch * dt_vlmplan_flops_per_seq(p);   /* the tower's and projector's */
    double peak = p->cluster.hw.peak_flops[p->precision.param] * (double)p->parallel.world_size;
    out->tokens_per_s = out->step_s > 0 ? tokens / out->step_s : 0.0;
    out->mfu = out->step_s > 0 && peak > 0 ? model_flops / (out->step_s * peak) : 0.0;
    return DT_OK;
}

int dt_time_comm_bytes(const dt_plan *p, int64_t out[DT_COLL_COUNT], dt_error *err) {
    memset(out, 0, sizeof(int64_t) * DT_COLL_COUNT);
    if (dt_time_check(p, err)) return err->code;
    if (dt_layout_active(p)) return dt_p3_comm_bytes(p, out, err);
    return dt_time_comm_bytes_dp(p, out, err);
}

int dt_predict(dt_plan *p, dt_error *err) {
    dt_prediction pred;
    memset(&pred, 0, sizeof pred);
    if (dt_memory_estimate(p, &pred.memory, err)) return err->code;
    if (dt_time_estimate(p, &pred.time, err)) return err->code;
    if (dt_time_comm_bytes(p, pred.comm_bytes, err)) return err->code;
    pred.valid = 1;
    p->prediction = pred;
    return DT_OK;
}
