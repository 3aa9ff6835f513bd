/* dt_cuda.h — CUDA-only extras of the device backend (engine/cuda/), for the
 * NCCL communicator, the GPU tests and the GPU benchmark. Only built (and only
 * to be included) when DT_HAVE_CUDA is defined. The cudaStream_t values are
 * returned as void * so C callers need no CUDA headers. */
#ifndef DT_CUDA_H
#define DT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "dt_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA stream behind a dt_stream_id of the bound GPU (NULL before
 * dt_device_get(DT_DEVICE_CUDA, ...) succeeded). */
void *dt_cuda_stream(dt_stream_id s);
/* The GPU this process is bound to (-1 before binding). */
int dt_cuda_ordinal(void);
/* cudaMemGetInfo of the bound GPU: bytes free / total now, and the free bytes
 * measured when the device was bound (before any dt allocation), so
 * used_by_process = free_at_bind - free_now. 0 on success. */
int dt_cuda_meminfo(size_t *free_now, size_t *total, size_t *free_at_bind);
/* First CUDA / cuBLAS error seen by an asynchronous op since the last call
 * (0 = none); fills err with one line "cuda: <call> failed: <reason>". Clears it. */
int dt_cuda_take_error(dt_error *err);
/* Records an error as the ops do (the first one since the last take wins;
 * newlines in the texts become spaces). Needs no GPU: the tests use it. */
void dt_cuda_note_error(const char *what, const char *detail);

/* Threads per block of an attention kernel that keeps `vectors` fp32 vectors
 * of hs elements per thread in smem_bytes of shared memory: as many as fit, at
 * most max_threads, rounded down to whole warps when a warp fits; 0 when not
 * even one thread's vectors fit (or hs, vectors < 1). Pure (tested on the CPU). */
static inline int dt_cuda_att_threads(int64_t hs, int vectors, int64_t smem_bytes,
                                      int max_threads, int warp) {
    if (hs < 1 || vectors < 1 || max_threads < 1) return 0;
    int64_t per = hs * (int64_t)vectors * (int64_t)sizeof(float);
    int64_t n = smem_bytes / per;
    if (n > max_threads) n = max_threads;
    if (warp > 0 && n >= warp) n -= n % warp;
    return (int)n;
}

#ifdef __cplusplus
}
#endif

#endif
