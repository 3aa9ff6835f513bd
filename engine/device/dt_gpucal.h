/* dt_gpucal.h — measuring a GPU for its hardware profile (dtplan calibrate --device cuda;
 * docs/hardware.md "Calibrating a GPU").
 *
 * What is measured on the GPU (engine/cuda/calibrate_cuda.cu, through the CUDA back-end):
 * square cuBLAS GEMMs (cublasGemmEx, fp32 accumulation, no TF32) of random operands in fp32,
 * bf16 and fp16 over several sizes, the best size's median rate per dtype (the "maximum
 * achievable matmul FLOPS" the time model's DT_GEMM_PEAK_CAP cites); a device-to-device
 * cudaMemcpy's bytes read + written per second (DT_HBM_EFFICIENCY's measurement); and empty
 * kernels launched back to back (DT_GPU_LAUNCH_S's). Every figure is a median of timed repeats
 * between CUDA events. Units: FLOP/s, bytes/s, bytes, seconds. */
#ifndef DT_GPUCAL_H
#define DT_GPUCAL_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_hardware.h"

typedef struct {
    char gpu_name[256];        /* cudaDeviceProp.name */
    int ordinal;               /* the GPU measured */
    int64_t total_mem_bytes;   /* cudaMemGetInfo's total */
    int sm_count;              /* cudaDevAttrMultiProcessorCount */
    double gemm_flops[3];      /* indexed by dt_dtype: best median FLOP/s over the sizes; 0 = the
                                * GPU's cuBLAS refused that dtype */
    int64_t gemm_n[3];         /* the square size that reached it */
    double copy_bw;            /* device-to-device copy: bytes read + written per second */
    int64_t copy_bytes;        /* the copy's size */
    double launch_s;           /* one empty kernel in a back-to-back sequence, seconds */
    int reps;                  /* timed repeats behind each median */
} dt_gpucal;

/* Measures GPU `ordinal` (a few seconds). DT_ERUNTIME when there is no CUDA back-end or no
 * usable GPU (the message says which and what to do). */
int dt_gpucal_measure(int ordinal, dt_gpucal *out, dt_error *err);

/* The built-in cuda profile (configs/hardware/) of a GPU by its device name and memory:
 * the profiles of its family (V100, A100, H100, H200 in the name) whose memory is within
 * DT_GPUCAL_MEM_MATCH of total_mem_bytes, the nearest; a "PCIe" / "NVL" board only matches a
 * profile that says so. Writes the name to out; DT_EINVAL naming the GPU and the choices when
 * none matches (the caller then needs --base). */
int dt_gpucal_match_profile(const char *gpu_name, int64_t total_mem_bytes, char *out, size_t n,
                            dt_error *err);

/* The measured fractions of the base (datasheet) profile: gemm_frac[t] = gemm_flops[t] /
 * base->peak_flops[t] (0 where either is 0), bw_frac = copy_bw / base->mem_bw. DT_EINVAL when
 * a fraction is above 1 (a rate beyond the datasheet's: the base is another device) or the
 * base is not a cuda profile. */
int dt_gpucal_fractions(const dt_gpucal *m, const dt_hardware *base, double gemm_frac[3], double *bw_frac,
                        dt_error *err);

#endif
