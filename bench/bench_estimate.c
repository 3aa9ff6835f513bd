/* bench_estimate.c — time of `dtplan estimate`'s core: the memory model for all
 * 14 stage x offload rows of the 32B / 8-GPU case (target: well under 10 ms).
 * Prints the mean time per full table over many repetitions. */
#include <stdio.h>
#include <time.h>

#include "dt_dsconfig.h"
#include "dt_model.h"
#include "dt_memory.h"
#include "dt_clock.h"

#define REPS 20000

int main(void) {
    dt_plan p;
    dt_error e = {0};
    const int64_t n_params = 32000000000LL;
    dt_plan_defaults(&p);
    if (dt_model_for_params(n_params, &p.model, &e) || dt_hardware_load("H100-SXM-80GB", NULL, &p.cluster.hw, &e)) {
        fprintf(stderr, "bench_estimate: %s\n", e.msg);
        return 1;
    }
    p.cluster.nodes = 1;
    p.cluster.gpus_per_node = 8;
    p.parallel.world_size = 8;
    int64_t sink = 0;
    int rows = 0;
    double t0 = dt_clock_s();
    for (int r = 0; r < REPS; r++) {
        rows = 0;
        for (int stage = 0; stage <= 3; stage++)
            for (int o = 0; o <= 2; o++)
                for (int q = 0; q <= 2; q++) {
                    if (dt_ds_check_offload(stage, (dt_offload)o, (dt_offload)q, NULL)) continue;
                    dt_mem_breakdown m;
                    p.parallel.zero_stage = stage;
                    p.parallel.offload_optimizer = (dt_offload)o;
                    p.parallel.offload_param = (dt_offload)q;
                    if (dt_memory_estimate_n(&p, n_params, &m, &e)) {
                        fprintf(stderr, "bench_estimate: %s\n", e.msg);
                        return 1;
                    }
                    sink += m.total;
                    rows++;
                }
    }
    double dt = (dt_clock_s() - t0) / REPS;
    printf("estimate, 32B / 8 GPUs, %d rows: %.3f us per table (%.2e ms; target < 10 ms) [checksum %lld]\n",
           rows, dt * 1e6, dt * 1e3, (long long)(sink % 1000));
    return 0;
}
