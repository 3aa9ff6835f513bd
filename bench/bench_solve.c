/* bench_solve.c — time of `dtplan solve`'s core (dt_solve: candidate set, memory
 * model at every K, GLPK MILP with tie-break and per-stage alternatives) for the
 * issue's case: 32B on 8 x H100-SXM-80GB at 80 GiB per GPU. Target: well under
 * 50 ms. Prints min / median over repetitions (bench/, not a timed test). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dt_solve.h"
#include "dt_model.h"
#include "dt_clock.h"

#define REPS 21

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    dt_solve_request rq;
    dt_error err;
    memset(&rq, 0, sizeof rq);
    dt_plan_defaults(&rq.base);
    if (dt_model_for_params(32000000000LL, &rq.base.model, &err) ||
        dt_hardware_load("H100-SXM-80GB", NULL, &rq.base.cluster.hw, &err)) {
        fprintf(stderr, "bench_solve: %s\n", err.msg);
        return 1;
    }
    rq.base.cluster.device = DT_DEVICE_CUDA;
    rq.base.cluster.nodes = 1;
    rq.base.cluster.gpus_per_node = 8;
    rq.base.parallel.world_size = 8;
    rq.base.parallel.overlap_comm = 1;
    rq.base.batch.global_batch = 1 * 16 * 8; /* dtplan solve's default micro 1 x accumulation 16 (docs/solver.md) */
    rq.mem_limit_bytes = (int64_t)80 << 30;
    rq.host_limit_bytes = rq.base.cluster.hw.host_mem_bytes;
    rq.nvme_limit_bytes = rq.base.cluster.hw.nvme_bytes;
    rq.stage_mask = 0xF;
    rq.allow_offload = 1;
    dt_solve_result *r = malloc(sizeof *r);
    double ms[REPS];
    for (int i = 0; i < REPS; i++) {
        double t0 = (1e3 * dt_clock_s());
        if (dt_solve(&rq, r, &err)) {
            fprintf(stderr, "bench_solve: %s\n", err.msg);
            return 1;
        }
        ms[i] = (1e3 * dt_clock_s()) - t0;
    }
    qsort(ms, REPS, sizeof ms[0], cmp);
    printf("bench_solve: 32B (%s) / 8 x H100-SXM-80GB / 80 GiB: stage %d, micro %lld x accum %lld, ckpt %lld, "
           "%.3f s/step predicted\n",
           rq.base.model.name, r->best.zero_stage, (long long)r->best.micro_batch, (long long)r->best.grad_accum,
           (long long)r->best.ckpt_layers, r->best.step_s);
    printf("bench_solve: %d candidates, MILP %d cols x %d rows, %d GLPK solves; solve time min %.2f ms, "
           "median %.2f ms over %d runs (target < 50 ms)\n",
           r->n_candidates, r->n_columns, r->n_rows, r->milp_solves, ms[0], ms[REPS / 2], REPS);
    free(r);
    return 0;
}
