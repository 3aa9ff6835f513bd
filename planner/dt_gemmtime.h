/* dt_gemmtime.h — the shape-aware GPU model's primitives: one GEMM timed on its shape
 * (tile and wave quantisation, the HBM roofline, a launch), and the GPU figures of a
 * profile it uses. The time model (dt_timeterms.h) and fine-tuning's frozen and LoRA
 * GEMMs (dt_ftplan.h) both price GEMMs with these. Seconds; FLOP/s; bytes/s. */
#ifndef DT_GEMMTIME_H
#define DT_GEMMTIME_H

#include "dt_plan.h"

/* Shape-aware GPU compute (docs/time-model.md "Shape-aware GPU compute", issue 17).
 * Every GEMM of a block is timed on its own shape:
 *   t = max(FLOPs / (peak x DT_GEMM_PEAK_CAP x tile eff x wave eff), bytes / mem_bw) + launch
 * Tile and wave quantisation as NVIDIA's "Matrix Multiplication Background User's Guide"
 * (docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication, §3.1
 * "Tile Quantization", §3.2 "Wave Quantization"): the output is cut into DT_GEMM_TILE x
 * DT_GEMM_TILE tiles (§2.3: 128x128 is a typical cuBLAS tensor-core tile on V100 / A100),
 * one thread block per tile, and the tiles run in waves of sm_count; a partial wave costs
 * a whole one. Arithmetic intensity (§2): a GEMM reading A and B and writing C moves
 * bytes = e (MK + KN + MN); below the GPU's FLOP:byte ratio it is memory-bound. */
#define DT_GEMM_TILE 128.0
/* The shape-aware GPU model's defaults, used where a profile carries no measured value
 * (gemm_peak_fraction, mem_bw_fraction, op_overhead_s: dtplan calibrate --device cuda). */
/* The fraction of dense peak the best-shaped cuBLAS GEMM reaches: 0.80 = H100 SXM's
 * measured maximum achievable matmul FLOPS, 792.1 of 989 TFLOP/s bf16 (80.1 %; A100 SXM
 * 267.9 of 312, 85.9 %): Stas Bekman, ml-engineering, compute/accelerator/README.md,
 * "Maximum Achievable Matmul FLOPS comparison table" (mamf-finder.py, CUDA 12.1). One
 * constant for every profile; not fitted to the validation suite. */
#define DT_GEMM_PEAK_CAP 0.80
/* Fixed cost per GPU kernel: 3.8 us per kernel launched back to back from a stream
 * (NVIDIA technical blog "Getting Started with CUDA Graphs", A. Gray, 2019: a 2.9 us kernel
 * takes 3.8 us per launch without synchronisation between launches). */
#define DT_GPU_LAUNCH_S 3.8e-6
/* Achievable fraction of the datasheet HBM bandwidth for streaming kernels: on a V100
 * "Theoretical device memory bandwidth of 900GB/s. Using cudaMemcpy we measure achievable
 * memory bandwidth of 790GB/s" (T. Warburton, "Rough-n-Ready Roofline: NVIDIA V100 edition",
 * paranumal.com, 2018-02-08) = 0.88. One constant for every profile, as DT_GEMM_PEAK_CAP
 * ([A] for A100 / H100 / H200, not measured here). */
#define DT_HBM_EFFICIENCY 0.88
/* GPU plans whose profile states sm_count (dt_hardware_sm_count > 0) and a peak for the
 * compute dtype are timed per GEMM on its shape instead of at the flat achievable_flops
 * (docs/time-model.md "Shape-aware GPU compute"); CPU plans never are. */
int dt_time_gpu_shape_model(const dt_plan *p);
/* One GEMM (batch x [M x K] . [K x N]) on a GPU: max(FLOPs / (peak x cap x tile and wave
 * efficiency), bytes moved / hbm_bw) + the launch overhead, seconds. */
double dt_time_gemm_s(double peak_flops, double sm_count, double hbm_bw, double elem_bytes, double M,
                      double N, double K, double batch);
/* A GPU's figures as the shape model prices them: the profile's measured values where
 * dtplan calibrate --device cuda wrote them, else the cited constants above
 * (docs/hardware.md "Calibrating a GPU"). */
typedef struct dt_time_gpu {
    double peak;     /* dense peak FLOP/s of the compute dtype */
    double cap;      /* the fraction of it the best-shaped GEMM reaches: the profile's measured
                      * gemm_peak_fraction, else DT_GEMM_PEAK_CAP */
    double bw;       /* achievable HBM bytes/s: mem_bw x (mem_bw_fraction, else DT_HBM_EFFICIENCY) */
    double launch;   /* s per kernel: the profile's measured op_overhead_s, else DT_GPU_LAUNCH_S */
    double sm;       /* SMs */
    double e;        /* bytes per element of the compute dtype */
} dt_time_gpu;
void dt_time_gpu_of(const dt_hardware *hw, dt_dtype t, dt_time_gpu *g);
/* Achievable HBM bytes/s: mem_bw x (the profile's mem_bw_fraction, else DT_HBM_EFFICIENCY). */
double dt_time_gpu_hbm_bw(const dt_hardware *hw);
/* dt_time_gemm_s on g's figures (its cap and launch included), seconds. */
double dt_time_gpu_gemm_s(const dt_time_gpu *g, double M, double N, double K, double batch);

#endif
