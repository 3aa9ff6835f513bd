/* gemmtime.c — the shape-aware GPU model's primitives (dt_gemmtime.h): one GEMM on its
 * shape, the GPU figures of a profile. Sources: docs/time-model.md "Shape-aware GPU
 * compute"; the constants are cited in dt_gemmtime.h. */
#include "dt_gemmtime.h"

#include <math.h>

double dt_time_gpu_hbm_bw(const dt_hardware *hw) {
    return hw->mem_bw * (hw->mem_bw_fraction > 0 ? hw->mem_bw_fraction : DT_HBM_EFFICIENCY);
}
void dt_time_gpu_of(const dt_hardware *hw, dt_dtype t, dt_time_gpu *g) {
    g->peak = hw->peak_flops[t];
    g->cap = hw->gemm_peak_fraction[t] > 0 ? hw->gemm_peak_fraction[t] : DT_GEMM_PEAK_CAP;
    g->bw = dt_time_gpu_hbm_bw(hw);
    g->launch = hw->op_overhead_s > 0 ? hw->op_overhead_s : DT_GPU_LAUNCH_S;
    g->sm = dt_hardware_sm_count(hw);
    g->e = (double)dt_dtype_size(t);
}

int dt_time_gpu_shape_model(const dt_plan *p) {
    const dt_hardware *hw = &p->cluster.hw;
    return hw->device == DT_DEVICE_CUDA && dt_hardware_sm_count(hw) > 0 && hw->mem_bw > 0 &&
           hw->peak_flops[p->precision.param] > 0;
}

/* The tile side along a dimension of d: DT_GEMM_TILE, or for a dimension below it the
 * smallest power of two >= d, at least DT_GEMM_TILE_MIN: cuBLAS picks narrower tiles for
 * skinny GEMMs (the guide's §2.3 lists 64-wide tiles; below that [A], down to the
 * tensor-core MMA's 16 rows, mma.m16n8k16 in the PTX ISA), so an 8-row GEMM is not priced
 * as a padded 128-row one. */
#define DT_GEMM_TILE_MIN 16.0
static double gemm_tile(double d) {
    if (d >= DT_GEMM_TILE) return DT_GEMM_TILE;
    double t = DT_GEMM_TILE_MIN;
    while (t < d) t *= 2.0;
    return t;
}

static double gemm_s(double peak_flops, double cap, double launch, double sm_count, double hbm_bw,
                     double elem_bytes, double M, double N, double K, double batch) {
    if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return 0.0;
    const double tm = gemm_tile(M), tn = gemm_tile(N);
    const double tiles = ceil(M / tm) * ceil(N / tn) * batch;
    const double waves = ceil(tiles / sm_count);
    /* each SM computes one tm x tn x K tile per wave at peak x cap / sm_count */
    const double t_math = waves * 2.0 * tm * tn * K / (peak_flops * cap / sm_count);
    const double t_mem = batch * elem_bytes * (M * K + K * N + M * N) / hbm_bw;
    return (t_math > t_mem ? t_math : t_mem) + launch;
}

double dt_time_gemm_s(double peak_flops, double sm_count, double hbm_bw, double elem_bytes, double M,
                      double N, double K, double batch) {
    return gemm_s(peak_flops, DT_GEMM_PEAK_CAP, DT_GPU_LAUNCH_S, sm_count, hbm_bw, elem_bytes, M, N, K, batch);
}

double dt_time_gpu_gemm_s(const dt_time_gpu *g, double M, double N, double K, double batch) {
    return gemm_s(g->peak, g->cap, g->launch, g->sm, g->bw, g->e, M, N, K, batch);
}
