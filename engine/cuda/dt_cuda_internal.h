/* dt_cuda_internal.h — what the CUDA back-end's translation units share
 * (device_cuda.cu: allocator, streams, cuBLAS, the GPT-2 kernels;
 * kernels_llama.cu: the llama-family kernels), so neither reaches into the
 * other: device_cuda.cu calls kernels_llama.cu's entry points and hands it the
 * host services it needs (dt_cu_host); kernels_llama.cu calls nothing of
 * device_cuda.cu. nvcc only (C++ and device code); nothing outside engine/cuda/
 * includes it. */
#ifndef DT_CUDA_INTERNAL_H
#define DT_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "dt_cuda.h"
#include "dt_device.h"
}

/* threads per block of the element-wise kernels */
#define DT_CU_THREADS 256
/* a warp (rows reduced by one warp) */
#define DT_CU_WARP 32
/* every lane of a warp takes part in a shuffle */
#define DT_CU_FULL_MASK 0xffffffffu

/* ---- the host services device_cuda.cu hands to kernels_llama.cu ---- */
typedef struct {
    /* the compute stream of the bound GPU (every op is queued on it) */
    cudaStream_t (*compute_stream)(void);
    /* the tracked allocator (the device's alloc / free entries): zero-filled, NULL on failure */
    void *(*alloc)(dt_mem_pool pool, dt_mem_category cat, size_t bytes);
    void (*free)(void *p);
} dt_cu_host;

/* Records a failed launch of `kernel` (cudaGetLastError: a bad launch
 * configuration, too much shared memory) through the first-error path that
 * synchronize() reports (dt_cuda_note_error); errors of the running kernel
 * surface at synchronize() from cudaDeviceSynchronize. */
static inline void dt_cu_check_launch(const char *kernel) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) dt_cuda_note_error(kernel, cudaGetErrorString(e));
}

/* ---- device helpers: warp reductions over all 32 lanes, butterfly order
 * (every lane ends with the same value; the order is fixed, so deterministic) */
static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = DT_CU_WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(DT_CU_FULL_MASK, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
    for (int o = DT_CU_WARP / 2; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(DT_CU_FULL_MASK, v, o));
    return v;
}

/* ---- entry points of kernels_llama.cu ---- */

/* Fills the llama-family entries of the CUDA table that kernels_llama.cu
 * implements (rmsnorm, rope, swiglu, attention_gqa); linear_t lives in
 * device_cuda.cu beside the GPT-2 linear (cuBLAS). host: the stream and
 * allocator its kernels and scratch use (copied; set before any op runs). */
void dt_cu_llama_fill_ops(dt_device_ops *o, const dt_cu_host *host);

/* db[c] += sum_n x[n, c] over x [N, C] (row stride C), deterministic: fixed
 * row chunks summed per block, then the chunks added in order per column (no
 * atomics); the order depends only on N and C. */
void dt_cu_colsum_det(float *db, const float *x, int64_t N, int64_t C);

#endif
