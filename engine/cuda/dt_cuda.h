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
 * (0 = none); fills err with the failing call's name. Clears it. */
int dt_cuda_take_error(dt_error *err);

#ifdef __cplusplus
}
#endif

#endif
