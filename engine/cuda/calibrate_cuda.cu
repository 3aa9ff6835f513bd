/* calibrate_cuda.cu — the GPU measurements of dt_gpucal.h (dtplan calibrate --device cuda).
 *
 * On the GPU the engine binds (dt_device_cuda_get), on its compute stream, with a cuBLAS
 * handle of its own (default math mode: no TF32), every figure a median of CAL_REPS repeats
 * timed between CUDA events:
 *   GEMM    C = A B, square N x N in fp32, bf16 and fp16 (fp32 accumulation, CUBLAS_COMPUTE_32F),
 *           operands filled with pseudo-random values in [-1, 1) (all-zero operands draw less
 *           power and run faster than real ones), CAL_GEMM_CALLS calls per repeat, for each N of
 *           k_sizes that fits in a quarter of the free memory; the best N's median counts, as in
 *           the "maximum achievable matmul FLOPS" DT_GEMM_PEAK_CAP cites (planner/dt_gemmtime.h).
 *   copy    cudaMemcpyAsync device to device of CAL_COPY_MAX bytes (less when memory is short):
 *           bytes read + written per second, the quantity DT_HBM_EFFICIENCY cites.
 *   launch  CAL_LAUNCHES empty kernels back to back, per kernel: DT_GPU_LAUNCH_S's quantity. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_gpucal.h"
}
#include "dt_cuda_internal.h"

#define CAL_REPS 7
#define CAL_GEMM_CALLS 5
#define CAL_LAUNCHES 1000
#define CAL_COPY_MAX ((size_t)1 << 30)
#define CAL_MEM_SHARE 4            /* the buffers of one measurement take at most free / 4 */
#define CAL_FILL_SEED 0x9e3779b9u
extern "C" int dt_device_cuda_get(int ordinal, const dt_device_ops **out, dt_error *err);   /* device_cuda.cu */

static const int64_t k_sizes[] = {1024, 2048, 4096, 6144, 8192, 12288, 16384};

__global__ void k_cal_nop(void) {}

/* x[i] = a value in [-1, 1) from a hash of (seed, i), stored as dtype t */
__global__ void k_cal_fill(void *x, int t, size_t n, unsigned seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 16, h *= 0x85ebca6bu, h ^= h >> 13, h *= 0xc2b2ae35u, h ^= h >> 16;
    float v = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
    if (t == DT_DTYPE_FP32) ((float *)x)[i] = v;
    else if (t == DT_DTYPE_BF16) ((__nv_bfloat16 *)x)[i] = __float2bfloat16(v);
    else ((__half *)x)[i] = __float2half(v);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

typedef struct {
    cudaStream_t s;
    cudaEvent_t e0, e1;
    cublasHandle_t blas;
} cal_ctx;

/* seconds between two events around what the caller queued */
static int elapsed(cal_ctx *c, double *s) {
    float ms = 0;
    if (cudaEventSynchronize(c->e1) != cudaSuccess || cudaEventElapsedTime(&ms, c->e0, c->e1) != cudaSuccess)
        return 1;
    *s = ms * 1e-3;
    return 0;
}

static cudaDataType_t cal_type(int t) {
    return t == DT_DTYPE_FP32 ? CUDA_R_32F : t == DT_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* Median FLOP/s of N x N x N GEMMs in dtype t; 0 when cuBLAS refuses the dtype; -1 on a
 * CUDA error (err set). */
static double gemm_rate(cal_ctx *c, int t, int64_t N, dt_error *err) {
    const size_t e = dt_dtype_size((dt_dtype)t), n = (size_t)(N * N);
    void *buf = NULL;
    if (cudaMalloc(&buf, 3 * n * e) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0.0;   /* this size does not fit after all: the caller keeps the others */
    }
    char *A = (char *)buf, *B = A + n * e, *C = B + n * e;
    const unsigned blocks = (unsigned)((2 * n + DT_CU_THREADS - 1) / DT_CU_THREADS);
    k_cal_fill<<<blocks, DT_CU_THREADS, 0, c->s>>>(A, t, 2 * n, CAL_FILL_SEED);
    const float one = 1.0f, zero = 0.0f;
    double warm = 0.0, times[CAL_REPS];   /* warm: the untimed first repeat */
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    for (int r = -1; r < CAL_REPS && st == CUBLAS_STATUS_SUCCESS; r++) {   /* r = -1: warm-up */
        cudaEventRecord(c->e0, c->s);
        for (int k = 0; k < CAL_GEMM_CALLS && st == CUBLAS_STATUS_SUCCESS; k++)
            st = cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)N, (int)N, &one, A, cal_type(t),
                              (int)N, B, cal_type(t), (int)N, &zero, C, cal_type(t), (int)N, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT);
        cudaEventRecord(c->e1, c->s);
        if (st == CUBLAS_STATUS_SUCCESS && elapsed(c, r >= 0 ? &times[r] : &warm)) {
            dt_errorf(err, DT_ERUNTIME, "cuda: calibrate: timing %s GEMMs (N=%lld) failed: %s",
                      dt_dtype_name((dt_dtype)t), (long long)N, cudaGetErrorString(cudaGetLastError()));
            cudaFree(buf);
            return -1.0;
        }
    }
    cudaStreamSynchronize(c->s);
    cudaFree(buf);
    if (st != CUBLAS_STATUS_SUCCESS) return 0.0;   /* e.g. bf16 on a GPU without it */
    const double t_med = median(times, CAL_REPS);
    return t_med > 0 ? 2.0 * (double)N * (double)N * (double)N * CAL_GEMM_CALLS / t_med : 0.0;
}

static int measure_gemms(cal_ctx *c, size_t free_bytes, dt_gpucal *out, dt_error *err) {
    for (int t = 0; t < 3; t++) {
        const size_t e = dt_dtype_size((dt_dtype)t);
        for (size_t i = 0; i < sizeof k_sizes / sizeof k_sizes[0]; i++) {
            const int64_t N = k_sizes[i];
            if (3.0 * (double)N * (double)N * (double)e > (double)free_bytes / CAL_MEM_SHARE) break;
            const double r = gemm_rate(c, t, N, err);
            if (r < 0) return err->code;
            if (r > out->gemm_flops[t]) out->gemm_flops[t] = r, out->gemm_n[t] = N;
        }
    }
    return DT_OK;
}

static int measure_copy(cal_ctx *c, size_t free_bytes, dt_gpucal *out, dt_error *err) {
    size_t bytes = CAL_COPY_MAX;
    while (bytes > ((size_t)1 << 20) && 2 * bytes > free_bytes / CAL_MEM_SHARE) bytes /= 2;
    void *buf = NULL;
    if (cudaMalloc(&buf, 2 * bytes) != cudaSuccess)
        return dt_errorf(err, DT_ERUNTIME, "cuda: calibrate: cannot allocate 2 x %zu MiB for the copy",
                         bytes >> 20);
    char *src = (char *)buf, *dst = src + bytes;
    cudaMemsetAsync(src, 1, bytes, c->s);
    double times[CAL_REPS], warm = 0;
    int bad = 0;
    for (int r = -1; r < CAL_REPS && !bad; r++) {
        cudaEventRecord(c->e0, c->s);
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->s);
        cudaEventRecord(c->e1, c->s);
        bad = elapsed(c, r >= 0 ? &times[r] : &warm);
    }
    cudaFree(buf);
    if (bad) return dt_errorf(err, DT_ERUNTIME, "cuda: calibrate: timing the copy failed: %s",
                              cudaGetErrorString(cudaGetLastError()));
    out->copy_bytes = (int64_t)bytes;
    out->copy_bw = 2.0 * (double)bytes / median(times, CAL_REPS);
    return DT_OK;
}

static int measure_launch(cal_ctx *c, dt_gpucal *out, dt_error *err) {
    double times[CAL_REPS], warm = 0;
    for (int r = -1; r < CAL_REPS; r++) {
        cudaEventRecord(c->e0, c->s);
        for (int k = 0; k < CAL_LAUNCHES; k++) k_cal_nop<<<1, 1, 0, c->s>>>();
        cudaEventRecord(c->e1, c->s);
        if (elapsed(c, r >= 0 ? &times[r] : &warm))
            return dt_errorf(err, DT_ERUNTIME, "cuda: calibrate: timing kernel launches failed: %s",
                             cudaGetErrorString(cudaGetLastError()));
    }
    out->launch_s = median(times, CAL_REPS) / CAL_LAUNCHES;
    return DT_OK;
}

extern "C" int dt_cuda_calibrate(int ordinal, dt_gpucal *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    const dt_device_ops *ops = NULL;
    if (dt_device_cuda_get(ordinal, &ops, err)) return err->code;
    out->ordinal = dt_cuda_ordinal();
    out->reps = CAL_REPS;
    cudaDeviceProp prop;
    size_t free_b = 0, total_b = 0;
    if (cudaGetDeviceProperties(&prop, out->ordinal) != cudaSuccess ||
        cudaDeviceGetAttribute(&out->sm_count, cudaDevAttrMultiProcessorCount, out->ordinal) != cudaSuccess ||
        cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        return dt_errorf(err, DT_ERUNTIME, "cuda: calibrate: reading GPU %d's properties failed: %s", out->ordinal,
                         cudaGetErrorString(cudaGetLastError()));
    snprintf(out->gpu_name, sizeof out->gpu_name, "%s", prop.name);
    out->total_mem_bytes = (int64_t)total_b;
    cal_ctx c;
    c.s = (cudaStream_t)dt_cuda_stream(DT_STREAM_COMPUTE);
    if (cudaEventCreate(&c.e0) != cudaSuccess || cudaEventCreate(&c.e1) != cudaSuccess)
        return dt_errorf(err, DT_ERUNTIME, "cuda: calibrate: cudaEventCreate failed");
    if (cublasCreate(&c.blas) != CUBLAS_STATUS_SUCCESS) {
        cudaEventDestroy(c.e0), cudaEventDestroy(c.e1);
        return dt_errorf(err, DT_ERUNTIME, "cuda: calibrate: cublasCreate failed");
    }
    cublasSetStream(c.blas, c.s);
    int rc = measure_launch(&c, out, err);
    if (!rc) rc = measure_copy(&c, free_b, out, err);
    if (!rc) rc = measure_gemms(&c, free_b, out, err);
    cublasDestroy(c.blas);
    cudaEventDestroy(c.e0), cudaEventDestroy(c.e1);
    if (!rc && out->gemm_flops[DT_DTYPE_FP32] <= 0)
        rc = dt_errorf(err, DT_ERUNTIME, "cuda: calibrate: no fp32 GEMM could be timed on GPU %d (free memory %zu MiB)",
                       out->ordinal, free_b >> 20);
    return rc;
}
