/* device_cuda.cu — the CUDA device of dt_device.h.
 *
 * Memory: cudaMalloc (device pool) and cudaMallocHost (host pool: pinned, so
 * offload copies are asynchronous DMA), zero-filled, tracked per pool and
 * category like dt_memtrack (current, peak, peak of the total), plus the
 * driver's view through cudaMemGetInfo (dt_cuda_meminfo).
 * Streams: four non-blocking streams (compute, comm, h2d, d2h); handoff records
 * a fresh event on one and makes the other wait (cudaStreamWaitEvent).
 * GEMMs: cuBLAS cublasGemmEx, fp32 accumulation (CUBLAS_COMPUTE_32F; TF32 only
 * if DT_CUDA_TF32=1), row-major through the usual transpose identity
 * C^T = op(B)^T op(A)^T in cuBLAS's column-major view.
 * Kernels: one per op, deliberately simple (one thread per output element, row
 * or query; one warp per row for row reductions); the per-element formulas
 * come from dt_devmath.h, the same inline functions the CPU backend runs.
 * Reductions over rows that the CPU does in a fixed order (bias / LayerNorm
 * weight gradients, encoder gradients, sum of squares) are done in the same
 * order here (one thread per column walking the rows), so they are
 * deterministic; the attention backward computes dq, and dk/dv, in separate
 * kernels with one thread per output row (no atomics).
 *
 * Attention keeps its per-thread fp32 vectors (the flash accumulator, dq,
 * dk / dv) in dynamic shared memory, not in per-thread arrays: a local array
 * makes the driver reserve frame x resident threads x SMs of local memory for
 * the context (2 KiB x 2048 x 132 = 528 MiB on an H100) outside dt's
 * accounting and the plan; shared memory is per block and reserves nothing.
 *
 * The llama family (RMSNorm, RoPE, SwiGLU, grouped-query attention with a
 * tiled flash kernel) is in kernels_llama.cu; linear_t (nn.Linear layout) is
 * here beside the GPT-2 linear. Both files share dt_cuda_internal.h.
 *
 * Errors: ops have no return code (same signatures as the CPU); the first
 * failing CUDA / cuBLAS call is remembered and reported by synchronize() (the
 * trainer calls it once per step) as one line naming the call (a failed
 * launch names the kernel). */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "dt_backend.h"
#include "dt_cuda.h"
#include "dt_device.h"
#include "dt_devmath.h"
#include "dt_plan.h"   /* DT_CUDA_GEMM_WORKSPACE_BYTES */
#include "dt_dtype.h"
}
#include "dt_cuda_internal.h"   /* DT_CU_THREADS, DT_CU_WARP, warp_sum / warp_max */
/* dynamic shared memory an attention block asks for at most (bytes); the
 * GPU's opt-in limit per block is 163 KiB on sm_80 and 227 KiB on sm_90
 * (CUDA C++ Programming Guide, "Compute capabilities", table of technical
 * specifications), 99 KiB on sm_86 / sm_89, so 96 KiB fits every target */
#define DT_CU_ATT_SMEM_MAX (96 * 1024)
/* cudaMalloc alignment the tracker reports (cudaMalloc guarantees 256 bytes) */
#define DT_CU_ALIGN 256

/* ---------------------------------------------------------------------------
 * state of the bound GPU */

static int g_ordinal = -1;
static cudaStream_t g_stream[DT_STREAM_COUNT];
static cublasHandle_t g_blas;
static cublasComputeType_t g_compute = CUBLAS_COMPUTE_32F;
static size_t g_free_at_bind;
static char g_err_msg[256];
static int g_err_code;
static double *g_part_dev, *g_part_host;   /* sum-of-squares partials */
static size_t g_part_cap;
static int *g_flag_dev, *g_flag_host;      /* all_finite flag */
static float *g_loss_host;                 /* cross-entropy losses on the host */
static size_t g_loss_cap;
static int g_att_smem;                     /* shared-memory bytes an attention block may use */

static void note_error(const char *what, const char *detail) {
    if (g_err_code) return;
    g_err_code = DT_ERUNTIME;
    snprintf(g_err_msg, sizeof g_err_msg, "cuda: %s failed: %s", what, detail);
    for (char *c = g_err_msg; *c; c++)   /* one line, whatever the call text held */
        if (*c == '\n' || *c == '\r') *c = ' ';
}

extern "C" void dt_cuda_note_error(const char *what, const char *detail) {
    note_error(what ? what : "?", detail ? detail : "?");
}

#define CU(call)                                                   \
    do {                                                           \
        cudaError_t e_ = (call);                                   \
        if (e_ != cudaSuccess) note_error(#call, cudaGetErrorString(e_)); \
    } while (0)
#define BLAS(call)                                                 \
    do {                                                           \
        cublasStatus_t s_ = (call);                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) note_error(#call, cublasGetStatusString(s_)); \
    } while (0)
#define LAUNCHED(name) dt_cu_check_launch(#name)

static cudaStream_t cs(void) { return g_stream[DT_STREAM_COMPUTE]; }
static unsigned grid_for(size_t n) { return (unsigned)((n + DT_CU_THREADS - 1) / DT_CU_THREADS); }

/* ---------------------------------------------------------------------------
 * tracked allocator: a list of live blocks (a run has a few dozen) */

typedef struct blk {
    void *p;
    size_t bytes;
    dt_mem_pool pool;
    dt_mem_category cat;
    struct blk *next;
} blk;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static blk *g_blocks;
static int64_t g_cur[DT_POOL_COUNT][DT_MEM_CAT_COUNT], g_peak[DT_POOL_COUNT][DT_MEM_CAT_COUNT];
static int64_t g_tcur[DT_POOL_COUNT], g_tpeak[DT_POOL_COUNT];
/* the driver's view (cu_meminfo): the highest total - free sampled since the
 * last reset, and the device pool's tracked bytes at that sample; -1: none yet */
static int64_t g_drv_peak = -1, g_drv_peak_tracked;

static void account(dt_mem_pool pool, dt_mem_category cat, int64_t delta) {
    g_cur[pool][cat] += delta;
    g_tcur[pool] += delta;
    if (g_cur[pool][cat] > g_peak[pool][cat]) g_peak[pool][cat] = g_cur[pool][cat];
    if (g_tcur[pool] > g_tpeak[pool]) g_tpeak[pool] = g_tcur[pool];
}

/* One reading of the driver's used bytes (cudaMemGetInfo: total - free) into
 * the peak; 0 on success. Called after each device allocation, so the driver's
 * peak is seen where our allocations raise it. */
static int drv_sample(int64_t *used_out, int64_t *total_out) {
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        (void)cudaGetLastError();   /* a reading that failed is no sticky error */
        return DT_ERUNTIME;
    }
    int64_t used = (int64_t)t - (int64_t)f;
    pthread_mutex_lock(&g_lock);
    if (used > g_drv_peak) {
        g_drv_peak = used;
        g_drv_peak_tracked = g_tcur[DT_POOL_DEVICE];
    }
    pthread_mutex_unlock(&g_lock);
    if (used_out) *used_out = used;
    if (total_out) *total_out = (int64_t)t;
    return DT_OK;
}

static void *cu_alloc(dt_mem_pool pool, dt_mem_category cat, size_t bytes) {
    if (bytes == 0 || (int)pool < 0 || pool >= DT_POOL_COUNT || (int)cat < 0 ||
        cat >= DT_MEM_CAT_COUNT)
        return NULL;
    blk *b = (blk *)calloc(1, sizeof *b);
    if (!b) return NULL;
    void *p = NULL;
    if (pool == DT_POOL_DEVICE) {
        /* zero-filled on the compute stream and finished before returning, so
         * every later op on any stream comes after it (a plain cudaMemset runs on
         * the legacy default stream, which the non-blocking streams do not wait for) */
        if (cudaMalloc(&p, bytes) != cudaSuccess) p = NULL;
        else if (cudaMemsetAsync(p, 0, bytes, cs()) != cudaSuccess ||
                 cudaStreamSynchronize(cs()) != cudaSuccess) {
            cudaFree(p);
            p = NULL;
        }
    } else {
        if (cudaMallocHost(&p, bytes) != cudaSuccess) p = NULL;
        else memset(p, 0, bytes);
    }
    if (!p) {
        (void)cudaGetLastError();   /* an OOM is reported by the NULL, not as a sticky error */
        free(b);
        return NULL;
    }
    b->p = p;
    b->bytes = bytes;
    b->pool = pool;
    b->cat = cat;
    pthread_mutex_lock(&g_lock);
    b->next = g_blocks;
    g_blocks = b;
    account(pool, cat, (int64_t)bytes);
    pthread_mutex_unlock(&g_lock);
    if (pool == DT_POOL_DEVICE) (void)drv_sample(NULL, NULL);
    return p;
}

static void cu_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_lock);
    blk **pp = &g_blocks;
    while (*pp && (*pp)->p != p) pp = &(*pp)->next;
    blk *b = *pp;
    if (b) {
        *pp = b->next;
        account(b->pool, b->cat, -(int64_t)b->bytes);
    }
    pthread_mutex_unlock(&g_lock);
    if (!b) {
        note_error("dt free", "pointer not allocated by the CUDA device");
        return;
    }
    /* the memory may still be in use by queued work: wait for it first */
    CU(cudaDeviceSynchronize());
    if (b->pool == DT_POOL_DEVICE) CU(cudaFree(p));
    else CU(cudaFreeHost(p));
    free(b);
}


static int64_t cu_mem_current(dt_mem_pool pool, dt_mem_category cat) {
    pthread_mutex_lock(&g_lock);
    int64_t v = g_cur[pool][cat];
    pthread_mutex_unlock(&g_lock);
    return v;
}
static int64_t cu_mem_peak(dt_mem_pool pool, dt_mem_category cat) {
    pthread_mutex_lock(&g_lock);
    int64_t v = g_peak[pool][cat];
    pthread_mutex_unlock(&g_lock);
    return v;
}
static int64_t cu_mem_peak_total(dt_mem_pool pool) {
    pthread_mutex_lock(&g_lock);
    int64_t v = g_tpeak[pool];
    pthread_mutex_unlock(&g_lock);
    return v;
}
static void cu_mem_reset_peaks(void) {
    pthread_mutex_lock(&g_lock);
    for (int p = 0; p < DT_POOL_COUNT; p++) {
        g_tpeak[p] = g_tcur[p];
        for (int c = 0; c < DT_MEM_CAT_COUNT; c++) g_peak[p][c] = g_cur[p][c];
    }
    pthread_mutex_unlock(&g_lock);
}

static int cu_meminfo(dt_device_meminfo *out, int reset_peak) {
    memset(out, 0, sizeof *out);
    int64_t used = 0, total = 0;
    if (g_ordinal < 0 || drv_sample(&used, &total)) return DT_ERUNTIME;
    out->applicable = 1;
    out->total = total;
    out->used = used;
    out->used_at_bind = total - (int64_t)g_free_at_bind;
    pthread_mutex_lock(&g_lock);
    out->peak_used = g_drv_peak;
    out->tracked_at_peak = g_drv_peak_tracked;
    if (reset_peak) {
        g_drv_peak = used;
        g_drv_peak_tracked = g_tcur[DT_POOL_DEVICE];
    }
    pthread_mutex_unlock(&g_lock);
    return DT_OK;
}

/* ---------------------------------------------------------------------------
 * copies, streams */

static void cu_memcpy(void *dst, const void *src, size_t bytes, dt_copy_kind kind, dt_stream_id s) {
    if (!bytes) return;
    static const cudaMemcpyKind k[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                       cudaMemcpyDeviceToDevice, cudaMemcpyHostToHost};
    CU(cudaMemcpyAsync(dst, src, bytes, k[kind], g_stream[s]));
}

static void cu_memset0(void *p, size_t bytes) {
    if (bytes) CU(cudaMemsetAsync(p, 0, bytes, cs()));
}

static void cu_handoff(dt_stream_id from, dt_stream_id to) {
    if (from == to) return;
    cudaEvent_t ev;
    CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CU(cudaEventRecord(ev, g_stream[from]));
    CU(cudaStreamWaitEvent(g_stream[to], ev, 0));
    CU(cudaEventDestroy(ev));   /* released once the wait is satisfied */
}

static void cu_stream_sync(dt_stream_id s) { CU(cudaStreamSynchronize(g_stream[s])); }

static int cu_synchronize(dt_error *err) {
    CU(cudaDeviceSynchronize());
    return dt_cuda_take_error(err);
}

/* ---------------------------------------------------------------------------
 * element-wise kernels */

__global__ void k_convert(void *dst, dt_dtype dt, const void *src, dt_dtype st, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dt_store(dst, dt, i, dt_load(src, st, i));
}

static void cu_convert(void *dst, dt_dtype dt, const void *src, dt_dtype st, size_t n) {
    if (!n) return;
    if (dt == st) {
        CU(cudaMemcpyAsync(dst, src, n * (size_t)dt_dtype_size(dt), cudaMemcpyDeviceToDevice, cs()));
        return;
    }
    k_convert<<<grid_for(n), DT_CU_THREADS, 0, cs()>>>(dst, dt, src, st, n);
    LAUNCHED(k_convert);
}

/* dst (dtype t) = x rounded, x = the stored values in fp32 (dt_op_store_round) */
__global__ void k_store_round(void *dst, dt_dtype t, float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    dt_store(dst, t, i, x[i]);
    x[i] = dt_load(dst, t, i);
}

static void cu_store_round(void *dst, dt_dtype t, float *x, size_t n) {
    if (!n) return;
    if (t == DT_DTYPE_FP32) {
        if (dst != x) CU(cudaMemcpyAsync(dst, x, n * sizeof(float), cudaMemcpyDeviceToDevice, cs()));
        return;
    }
    k_store_round<<<grid_for(n), DT_CU_THREADS, 0, cs()>>>(dst, t, x, n);
    LAUNCHED(k_store_round);
}

/* dst [rows, ldd] <- src [rows, lds], the first cols of each row; one thread per element */
__global__ void k_convert_2d(void *dst, dt_dtype dt, int64_t ldd, const void *src, dt_dtype st,
                             int64_t lds, int64_t rows, int64_t cols) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    int64_t r = i / cols, c = i % cols;
    dt_store(dst, dt, (size_t)(r * ldd + c), dt_load(src, st, (size_t)(r * lds + c)));
}

static void cu_convert_2d(void *dst, dt_dtype dt, int64_t ldd, const void *src, dt_dtype st,
                          int64_t lds, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    k_convert_2d<<<grid_for((size_t)(rows * cols)), DT_CU_THREADS, 0, cs()>>>(dst, dt, ldd, src, st,
                                                                              lds, rows, cols);
    LAUNCHED(k_convert_2d);
}

__global__ void k_gelu_fwd(float *out, const float *inp, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = dt_gelu(inp[i]);
}
__global__ void k_gelu_bwd(float *dinp, const float *inp, const float *dout, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dinp[i] = dt_gelu_grad(inp[i]) * dout[i];
}
__global__ void k_residual(float *out, const float *a, const float *b, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
__global__ void k_dropout_mask(float *y, const float *x, int64_t n, uint64_t stream, double p, float inv) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = dt_dropout_at(stream, (uint64_t)i, p, inv, x[i]);
}
__global__ void k_axpy(float *y, const float *x, float alpha, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += alpha * x[i];
}
__global__ void k_acc16(uint16_t *dst, int bf, const float *acc, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = dt_add_16(dst[i], acc[i], bf);
}

static void cu_gelu_forward(float *out, const float *inp, int64_t n) {
    if (n <= 0) return;
    k_gelu_fwd<<<grid_for((size_t)n), DT_CU_THREADS, 0, cs()>>>(out, inp, n);
    LAUNCHED(k_gelu_fwd);
}
static void cu_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n) {
    if (n <= 0) return;
    k_gelu_bwd<<<grid_for((size_t)n), DT_CU_THREADS, 0, cs()>>>(dinp, inp, dout, n);
    LAUNCHED(k_gelu_bwd);
}
static void cu_residual(float *out, const float *a, const float *b, int64_t n) {
    if (n <= 0) return;
    k_residual<<<grid_for((size_t)n), DT_CU_THREADS, 0, cs()>>>(out, a, b, n);
    LAUNCHED(k_residual);
}
static void cu_dropout_mask(float *y, const float *x, int64_t n, uint64_t stream, double p) {
    if (n <= 0) return;
    k_dropout_mask<<<grid_for((size_t)n), DT_CU_THREADS, 0, cs()>>>(y, x, n, stream, p, (float)(1.0 / (1.0 - p)));
    LAUNCHED(k_dropout_mask);
}
static void cu_axpy(float *y, const float *x, float alpha, int64_t n) {
    if (n <= 0) return;
    k_axpy<<<grid_for((size_t)n), DT_CU_THREADS, 0, cs()>>>(y, x, alpha, n);
    LAUNCHED(k_axpy);
}
static void cu_accumulate_16(void *dst, dt_dtype t, const float *acc, size_t n) {
    if (!n) return;
    k_acc16<<<grid_for(n), DT_CU_THREADS, 0, cs()>>>((uint16_t *)dst, t == DT_DTYPE_BF16, acc, n);
    LAUNCHED(k_acc16);
}

/* dst += src (dtype t): fp32 adds in fp32, 16-bit through dt_add_16 (one rounding) */
__global__ void k_add(void *dst, const void *src, dt_dtype t, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (t == DT_DTYPE_FP32) ((float *)dst)[i] += ((const float *)src)[i];
    else ((uint16_t *)dst)[i] = dt_add_16(((uint16_t *)dst)[i], dt_load(src, t, i), t == DT_DTYPE_BF16);
}
static void cu_add(void *dst, const void *src, dt_dtype t, size_t n) {
    if (!n) return;
    k_add<<<grid_for(n), DT_CU_THREADS, 0, cs()>>>(dst, src, t, n);
    LAUNCHED(k_add);
}

/* ---------------------------------------------------------------------------
 * GEMM (cuBLAS) */

static cudaDataType_t cu_type(dt_dtype t) {
    return t == DT_DTYPE_FP32 ? CUDA_R_32F : t == DT_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* Row-major C[M,N] = alpha op(A) op(B) + beta C is column-major
 * C^T[N,M] = alpha op(B)^T op(A)^T + beta C^T: swap the operands, keep the ops. */
/* elements a row-major rows x cols operand with leading dimension ld spans */
static size_t span(int64_t rows, int64_t cols, int64_t ld) {
    return rows > 0 && cols > 0 ? (size_t)((rows - 1) * ld + cols) : 0;
}

/* fp32 or 16-bit device scratch for an operand converted from src (n
 * elements; at least one so an empty operand still has a typed pointer) */
static void *gemm_scratch(dt_dtype t, const void *src, dt_dtype st, size_t n, int fill) {
    void *p = cu_alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, (n ? n : 1) * (size_t)dt_dtype_size(t));
    if (p && fill) cu_convert(p, t, src, st, n);
    return p;
}

/* Dtype combinations cuBLAS lacks go through exact conversions into scratch
 * (dt_gemm_ex_plan_for, dt_device.h); the TF32 fast mode only where cuBLAS
 * accepts it (fp32 A, B, C). */
static int cu_gemm_ex(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                      dt_dtype at, int64_t lda, const void *B, dt_dtype bt, int64_t ldb,
                      float beta, void *C, dt_dtype ct, int64_t ldc) {
    dt_gemm_ex_plan pl;
    if (dt_gemm_ex_plan_for(at, bt, ct, g_compute == CUBLAS_COMPUTE_32F_FAST_TF32, &pl)) {
        char d[96];
        snprintf(d, sizeof d, "dtype codes A %d, B %d, C %d; each must be fp32, bf16 or fp16",
                 (int)at, (int)bt, (int)ct);
        note_error("gemm_ex", d);
        return DT_EINVAL;
    }
    if (M <= 0 || N <= 0) return DT_OK;
    const void *a = A, *b = B;
    void *c = C, *sa = NULL, *sb = NULL, *sc = NULL;
    int rc = DT_OK;
    if (at != pl.ab && !(a = sa = gemm_scratch(pl.ab, A, at, span(ta ? K : M, ta ? M : K, lda), 1)))
        rc = DT_ENOMEM;
    if (!rc && bt != pl.ab &&
        !(b = sb = gemm_scratch(pl.ab, B, bt, span(tb ? N : K, tb ? K : N, ldb), 1)))
        rc = DT_ENOMEM;
    /* C is read only when beta != 0 (BLAS semantics) */
    if (!rc && ct != pl.c && !(c = sc = gemm_scratch(pl.c, C, ct, span(M, N, ldc), beta != 0.0f)))
        rc = DT_ENOMEM;
    if (!rc) {
        cublasStatus_t st = cublasGemmEx(
            g_blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
            (int)K, &alpha, b, cu_type(pl.ab), (int)ldb, a, cu_type(pl.ab), (int)lda, &beta, c,
            cu_type(pl.c), (int)ldc, pl.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) {
            char what[96];
            snprintf(what, sizeof what, "cublasGemmEx (gemm M=%lld N=%lld K=%lld)", (long long)M,
                     (long long)N, (long long)K);
            note_error(what, cublasGetStatusString(st));
            rc = DT_ERUNTIME;
        } else if (sc) {
            cu_convert(C, ct, sc, pl.c, span(M, N, ldc));
        }
    }
    cu_free(sa);   /* cu_free waits for the queued GEMM first */
    cu_free(sb);
    cu_free(sc);
    return rc;
}

static void cu_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    cu_gemm_ex(ta, tb, M, N, K, alpha, A, DT_DTYPE_FP32, lda, B, DT_DTYPE_FP32, ldb, beta, C,
               DT_DTYPE_FP32, ldc);
}

__global__ void k_bias_rows(float *out, const float *bias, int64_t N, int64_t OC) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N * OC) out[i] = bias[i % OC];
}

/* db[c] += sum_n dout[n, c], one thread per column, rows in order (as the CPU) */
__global__ void k_colsum(float *db, const float *dout, int64_t N, int64_t OC) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= OC) return;
    float acc = 0.0f;
    for (int64_t n = 0; n < N; n++) acc += dout[n * OC + c];
    db[c] += acc;
}

/* out[n, :] = bias for n < N (dt_ops.h dt_op_broadcast_rows) */
static void cu_broadcast_rows(float *out, const float *bias, int64_t N, int64_t OC) {
    if (N <= 0 || OC <= 0) return;
    k_bias_rows<<<grid_for((size_t)(N * OC)), DT_CU_THREADS, 0, cs()>>>(out, bias, N, OC);
    LAUNCHED(k_bias_rows);
}

static void cu_linear_forward(float *out, const float *inp, const float *w, const float *bias,
                              int64_t N, int64_t IC, int64_t OC) {
    float beta = 0.0f;
    if (bias) {
        cu_broadcast_rows(out, bias, N, OC);
        beta = 1.0f;
    }
    cu_gemm(0, 0, N, OC, IC, 1.0f, inp, IC, w, OC, beta, out, OC);
}

static void cu_bias_backward(float *db, const float *dout, int64_t N, int64_t OC) {
    k_colsum<<<grid_for((size_t)OC), DT_CU_THREADS, 0, cs()>>>(db, dout, N, OC);
    LAUNCHED(k_colsum);
}

static void cu_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                               const float *inp, const float *w, int64_t N, int64_t IC, int64_t OC,
                               int accumulate_dinp) {
    if (dinp)
        cu_gemm(0, 1, N, IC, OC, 1.0f, dout, OC, w, OC, accumulate_dinp ? 1.0f : 0.0f, dinp, IC);
    if (dw) cu_gemm(1, 0, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dw, OC);
    if (dbias) cu_bias_backward(dbias, dout, N, OC);
}

/* Linear with torch.nn.Linear's weight layout (the llama family), dt_ops.h:
 *   out[N, OC] = inp[N, IC] @ w[OC, IC]^T + bias[OC]
 * The bias is broadcast into out first and the GEMM adds (beta = 1), as the
 * Conv1D linear above; w enters the row-major GEMM transposed (ldb = IC). */
static void cu_linear_t_forward(float *out, const float *inp, const float *w, const float *bias,
                                int64_t N, int64_t IC, int64_t OC) {
    if (N <= 0 || OC <= 0) return;
    float beta = 0.0f;
    if (bias) {
        cu_broadcast_rows(out, bias, N, OC);
        beta = 1.0f;
    }
    cu_gemm(0, 1, N, OC, IC, 1.0f, inp, IC, w, IC, beta, out, OC);
}

/* dinp[N, IC] = (or +=) dout[N, OC] @ w[OC, IC];  dw[OC, IC] += dout^T @ inp[N, IC];
 * dbias[OC] += column sums of dout, deterministic (dt_cu_colsum_det) */
static void cu_linear_t_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                 const float *inp, const float *w, int64_t N, int64_t IC,
                                 int64_t OC, int accumulate_dinp) {
    if (N <= 0 || OC <= 0 || IC <= 0) return;
    if (dinp)
        cu_gemm(0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, accumulate_dinp ? 1.0f : 0.0f, dinp, IC);
    if (dw) cu_gemm(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
    if (dbias) dt_cu_colsum_det(dbias, dout, N, OC);
}

/* ---------------------------------------------------------------------------
 * encoder */

__global__ void k_encoder_fwd(float *out, const int32_t *tok, const void *wte, dt_dtype wt,
                              const float *wpe, int64_t B, int64_t T, int64_t C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * T * C) return;
    int64_t n = i / C, c = i % C;
    float v = dt_load(wte, wt, (size_t)tok[n] * (size_t)C + (size_t)c);
    if (wpe) v += wpe[(n % T) * C + c];   /* NULL: no learned positions (llama family) */
    out[i] = v;
}

/* fp32 grads: one thread per channel walks the tokens in order (the CPU's order) */
__global__ void k_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                              int64_t N, int64_t T, int64_t C) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int64_t n = 0; n < N; n++) {
        float d = dout[n * C + c];
        dwte[(int64_t)tok[n] * C + c] += d;
        if (dwpe) dwpe[(n % T) * C + c] += d;
    }
}

/* 16-bit wpe grads: thread (t, c) sums positions t, t+T, ... in order */
__global__ void k_encoder_bwd16_wpe(uint16_t *dwpe, int bf, const float *dout, int64_t N,
                                    int64_t T, int64_t C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * C) return;
    int64_t t = i / C, c = i % C;
    float acc = 0.0f;
    for (int64_t n = t; n < N; n += T) acc += dout[n * C + c];
    dwpe[i] = dt_add_16(dwpe[i], acc, bf);
}

/* 16-bit wte grads: thread (n, c) for the first position n of each token
 * follows the token's position chain */
__global__ void k_encoder_bwd16_wte(uint16_t *dwte, int bf, const float *dout, const int32_t *tok,
                                    const int32_t *head, const int32_t *next, int64_t N,
                                    int64_t C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * C) return;
    int64_t n = i / C, c = i % C;
    int32_t t = tok[n];
    if (head[t] != n) return;
    float acc = 0.0f;
    for (int32_t k = (int32_t)n; k >= 0; k = next[k]) acc += dout[(int64_t)k * C + c];
    size_t o = (size_t)t * (size_t)C + (size_t)c;
    dwte[o] = dt_add_16(dwte[o], acc, bf);
}

static void cu_encoder_forward_cast(float *out, const int32_t *tok, const void *wte, dt_dtype wt,
                                    const float *wpe, int64_t B, int64_t T, int64_t C) {
    k_encoder_fwd<<<grid_for((size_t)(B * T * C)), DT_CU_THREADS, 0, cs()>>>(out, tok, wte, wt,
                                                                            wpe, B, T, C);
    LAUNCHED(k_encoder_fwd);
}
static void cu_encoder_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                               int64_t B, int64_t T, int64_t C) {
    cu_encoder_forward_cast(out, tok, wte, DT_DTYPE_FP32, wpe, B, T, C);
}
static void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                                int64_t B, int64_t T, int64_t C) {
    k_encoder_bwd<<<grid_for((size_t)C), DT_CU_THREADS, 0, cs()>>>(dwte, dwpe, dout, tok, B * T,
                                                                  T, C);
    LAUNCHED(k_encoder_bwd);
}
static void cu_encoder_backward_16(void *dwte, void *dwpe, dt_dtype gt, const float *dout,
                                   const int32_t *tok, const int32_t *head, const int32_t *next,
                                   float *acc, int64_t B, int64_t T, int64_t C) {
    (void)acc;
    int bf = gt == DT_DTYPE_BF16;
    if (dwpe) {   /* NULL: no learned positions (llama family) */
        k_encoder_bwd16_wpe<<<grid_for((size_t)(T * C)), DT_CU_THREADS, 0, cs()>>>(
            (uint16_t *)dwpe, bf, dout, B * T, T, C);
        LAUNCHED(k_encoder_bwd16_wpe);
    }
    k_encoder_bwd16_wte<<<grid_for((size_t)(B * T * C)), DT_CU_THREADS, 0, cs()>>>(
        (uint16_t *)dwte, bf, dout, tok, head, next, B * T, C);
    LAUNCHED(k_encoder_bwd16_wte);
}

/* ---------------------------------------------------------------------------
 * LayerNorm: one warp per row */

__global__ void k_ln_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                         const float *b, int64_t N, int64_t C, float eps) {
    int64_t n = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / DT_CU_WARP;
    int lane = threadIdx.x % DT_CU_WARP;
    if (n >= N) return;
    const float *x = inp + n * C;
    float s = 0.0f;
    for (int64_t c = lane; c < C; c += DT_CU_WARP) s += x[c];
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int64_t c = lane; c < C; c += DT_CU_WARP) v += (x[c] - m) * (x[c] - m);
    float r = 1.0f / sqrtf(warp_sum(v) / (float)C + eps);
    for (int64_t c = lane; c < C; c += DT_CU_WARP) out[n * C + c] = dt_ln_out(x[c], m, r, w[c], b[c]);
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = r;
    }
}

__global__ void k_ln_bwd_dinp(float *dinp, const float *dout, const float *inp, const float *w,
                              const float *mean, const float *rstd, int64_t N, int64_t C) {
    int64_t n = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / DT_CU_WARP;
    int lane = threadIdx.x % DT_CU_WARP;
    if (n >= N) return;
    const float *x = inp + n * C, *d = dout + n * C;
    float m = mean[n], r = rstd[n], s1 = 0.0f, s2 = 0.0f;
    for (int64_t c = lane; c < C; c += DT_CU_WARP) {
        float dx = d[c] * w[c];
        s1 += dx;
        s2 += dx * (x[c] - m) * r;
    }
    s1 = warp_sum(s1) / (float)C;
    s2 = warp_sum(s2) / (float)C;
    for (int64_t c = lane; c < C; c += DT_CU_WARP)
        dinp[n * C + c] += dt_ln_dinp(x[c], m, r, w[c], d[c], s1, s2);
}

/* dw, db: one thread per column, rows in order (as the CPU's column bands) */
__global__ void k_ln_bwd_dw(float *dw, float *db, const float *dout, const float *inp,
                            const float *mean, const float *rstd, int64_t N, int64_t C) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float aw = 0.0f, ab = 0.0f;
    for (int64_t n = 0; n < N; n++) {
        float d = dout[n * C + c];
        aw += d * (inp[n * C + c] - mean[n]) * rstd[n];
        ab += d;
    }
    dw[c] += aw;
    db[c] += ab;
}

static unsigned warp_rows_grid(int64_t rows) {
    return (unsigned)((rows * DT_CU_WARP + DT_CU_THREADS - 1) / DT_CU_THREADS);
}

static void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                 const float *w, const float *b, int64_t N, int64_t C, float eps) {
    k_ln_fwd<<<warp_rows_grid(N), DT_CU_THREADS, 0, cs()>>>(out, mean, rstd, inp, w, b, N, C, eps);
    LAUNCHED(k_ln_fwd);
}
static void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                  const float *inp, const float *w, const float *mean,
                                  const float *rstd, int64_t N, int64_t C) {
    k_ln_bwd_dinp<<<warp_rows_grid(N), DT_CU_THREADS, 0, cs()>>>(dinp, dout, inp, w, mean, rstd,
                                                               N, C);
    LAUNCHED(k_ln_bwd_dinp);
    if (!dw) return;   /* a frozen LayerNorm: no weight / bias gradient */
    k_ln_bwd_dw<<<grid_for((size_t)C), DT_CU_THREADS, 0, cs()>>>(dw, db, dout, inp, mean, rstd, N,
                                                               C);
    LAUNCHED(k_ln_bwd_dw);
}

/* ---------------------------------------------------------------------------
 * attention. Thread per (b, h, i) query row (forward, dq) or key row (dk, dv);
 * the flash forward never stores a [T, T] score matrix: it streams the keys
 * with an online softmax (running max mx, denominator l, accumulator acc). */

__device__ float dotv(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The (b, h, row) a thread of an attention kernel owns, with the sizes every
 * attention kernel needs; false for the threads past the last row. */
typedef struct {
    int64_t idx, b, h, i, hs, C3;
    float scale;
} att_row;

__device__ bool att_row_at(att_row *r, int64_t B, int64_t T, int64_t C, int64_t H) {
    r->idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r->idx >= B * H * T) return false;
    r->i = r->idx % T;
    r->h = (r->idx / T) % H;
    r->b = r->idx / (T * H);
    r->hs = C / H;
    r->C3 = 3 * C;
    r->scale = 1.0f / sqrtf((float)r->hs);
    return true;
}

/* Element d of this thread's per-thread vector k (of hs elements) in the
 * block's dynamic shared memory: [k][d][thread], so a warp touching the same
 * (k, d) hits consecutive banks. The launch gives vectors * hs * blockDim.x
 * floats (att_launch). */
__device__ __forceinline__ float &att_vec(float *sh, int64_t hs, int k, int64_t d) {
    return sh[((size_t)k * (size_t)hs + (size_t)d) * blockDim.x + threadIdx.x];
}

__global__ void k_att_fwd_flash(float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                                int64_t C, int64_t H) {
    extern __shared__ float att_sh[];
    att_row r;
    if (!att_row_at(&r, B, T, C, H)) return;
    int64_t i = r.i, h = r.h, b = r.b, hs = r.hs, C3 = r.C3;
    float scale = r.scale;
    const float *base = qkv + b * T * C3;
    const float *q = base + i * C3 + h * hs;
#define acc(d) att_vec(att_sh, hs, 0, d)
    for (int64_t d = 0; d < hs; d++) acc(d) = 0.0f;
    float mx = -INFINITY, l = 0.0f;
    for (int64_t j = 0; j <= i; j++) {
        float s = dotv(q, base + j * C3 + C + h * hs, hs) * scale;
        float mnew = s > mx ? s : mx;
        float corr = dt_fast_expf(mx - mnew);   /* 0 on the first key */
        float p = dt_fast_expf(s - mnew);
        l = l * corr + p;
        const float *v = base + j * C3 + 2 * C + h * hs;
        for (int64_t d = 0; d < hs; d++) acc(d) = acc(d) * corr + p * v[d];
        mx = mnew;
    }
    float inv = 1.0f / l;
    float *o = out + (b * T + i) * C + h * hs;
    for (int64_t d = 0; d < hs; d++) o[d] = acc(d) * inv;
    lse[(b * H + h) * T + i] = mx + logf(l);
#undef acc
}

__global__ void k_att_fwd_probs(float *out, float *probs, const float *qkv, int64_t B, int64_t T,
                                int64_t C, int64_t H) {
    att_row r;
    if (!att_row_at(&r, B, T, C, H)) return;
    int64_t i = r.i, h = r.h, b = r.b, hs = r.hs, C3 = r.C3;
    float scale = r.scale;
    const float *base = qkv + b * T * C3;
    const float *q = base + i * C3 + h * hs;
    float *p = probs + ((b * H + h) * T + i) * T;
    float mx = -INFINITY;
    for (int64_t j = 0; j <= i; j++) {
        p[j] = dotv(q, base + j * C3 + C + h * hs, hs) * scale;
        mx = p[j] > mx ? p[j] : mx;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j <= i; j++) {
        p[j] = dt_fast_expf(p[j] - mx);
        sum += p[j];
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j <= i; j++) p[j] *= inv;
    for (int64_t j = i + 1; j < T; j++) p[j] = 0.0f;
    float *o = out + (b * T + i) * C + h * hs;
    for (int64_t d = 0; d < hs; d++) {
        float a = 0.0f;
        for (int64_t j = 0; j <= i; j++) a += p[j] * base[j * C3 + 2 * C + h * hs + d];
        o[d] = a;
    }
}

/* p_ij from the saved lse (flash) or the saved probabilities */
__device__ float att_p(const float *qkv_b, const float *lse, const float *probs, int64_t b,
                       int64_t h, int64_t i, int64_t j, int64_t T, int64_t C, int64_t H,
                       float scale) {
    int64_t hs = C / H, C3 = 3 * C;
    if (probs) return probs[((b * H + h) * T + i) * T + j];
    float s = dotv(qkv_b + i * C3 + h * hs, qkv_b + j * C3 + C + h * hs, hs) * scale;
    return dt_fast_expf(s - lse[(b * H + h) * T + i]);
}

/* D_i = dout_i . out_i (flash) or sum_j p_ij (dout_i . v_j) (materialized) */
__global__ void k_att_bwd_D(float *Dbuf, const float *dout, const float *qkv, const float *out,
                            const float *probs, int64_t B, int64_t T, int64_t C, int64_t H) {
    att_row r;
    if (!att_row_at(&r, B, T, C, H)) return;
    int64_t idx = r.idx, i = r.i, h = r.h, b = r.b, hs = r.hs, C3 = r.C3;
    const float *dout_i = dout + (b * T + i) * C + h * hs;
    float D = 0.0f;
    if (out) {
        D = dotv(dout_i, out + (b * T + i) * C + h * hs, hs);
    } else {
        const float *base = qkv + b * T * C3;
        for (int64_t j = 0; j <= i; j++)
            D += probs[((b * H + h) * T + i) * T + j] * dotv(dout_i, base + j * C3 + 2 * C + h * hs, hs);
    }
    Dbuf[idx] = D;
}

/* dq_i = scale sum_{j<=i} p_ij (dp_ij - D_i) k_j */
__global__ void k_att_bwd_dq(float *dqkv, const float *dout, const float *qkv, const float *lse,
                             const float *probs, const float *Dbuf, int64_t B, int64_t T,
                             int64_t C, int64_t H) {
    extern __shared__ float att_sh[];
    att_row r;
    if (!att_row_at(&r, B, T, C, H)) return;
    int64_t idx = r.idx, i = r.i, h = r.h, b = r.b, hs = r.hs, C3 = r.C3;
    float scale = r.scale;
    const float *base = qkv + b * T * C3;
    const float *dout_i = dout + (b * T + i) * C + h * hs;
#define acc(d) att_vec(att_sh, hs, 0, d)
    for (int64_t d = 0; d < hs; d++) acc(d) = 0.0f;
    for (int64_t j = 0; j <= i; j++) {
        float p = att_p(base, lse, probs, b, h, i, j, T, C, H, scale);
        float ds = p * (dotv(dout_i, base + j * C3 + 2 * C + h * hs, hs) - Dbuf[idx]) * scale;
        const float *k = base + j * C3 + C + h * hs;
        for (int64_t d = 0; d < hs; d++) acc(d) += ds * k[d];
    }
    float *dq = dqkv + b * T * C3 + i * C3 + h * hs;
    for (int64_t d = 0; d < hs; d++) dq[d] = acc(d);
#undef acc
}

/* dk_j = scale sum_{i>=j} ds_ij q_i; dv_j = sum_{i>=j} p_ij dout_i */
__global__ void k_att_bwd_dkv(float *dqkv, const float *dout, const float *qkv, const float *lse,
                              const float *probs, const float *Dbuf, int64_t B, int64_t T,
                              int64_t C, int64_t H) {
    extern __shared__ float att_sh[];
    att_row r;
    if (!att_row_at(&r, B, T, C, H)) return;
    int64_t j = r.i, h = r.h, b = r.b, hs = r.hs, C3 = r.C3;   /* this thread owns key row j */
    float scale = r.scale;
    const float *base = qkv + b * T * C3;
    const float *v = base + j * C3 + 2 * C + h * hs;
#define dk(d) att_vec(att_sh, hs, 0, d)
#define dv(d) att_vec(att_sh, hs, 1, d)
    for (int64_t d = 0; d < hs; d++) dk(d) = dv(d) = 0.0f;
    for (int64_t i = j; i < T; i++) {
        const float *dout_i = dout + (b * T + i) * C + h * hs;
        const float *q = base + i * C3 + h * hs;
        float p = att_p(base, lse, probs, b, h, i, j, T, C, H, scale);
        float ds = p * (dotv(dout_i, v, hs) - Dbuf[(b * H + h) * T + i]) * scale;
        for (int64_t d = 0; d < hs; d++) {
            dk(d) += ds * q[d];
            dv(d) += p * dout_i[d];
        }
    }
    float *dkp = dqkv + b * T * C3 + j * C3 + C + h * hs;
    for (int64_t d = 0; d < hs; d++) {
        dkp[d] = dk(d);
        dkp[C + d] = dv(d);
    }
#undef dk
#undef dv
}

/* Launch shape of an attention kernel with `vectors` per-thread vectors in
 * shared memory (dt_cuda_att_threads); false (error noted) when one thread's
 * vectors do not fit. */
typedef struct {
    unsigned grid, threads;
    size_t smem;
} att_shape;

static bool att_launch(const char *kernel, int vectors, int64_t rows, int64_t C, int64_t H,
                       att_shape *sh) {
    int64_t hs = C / H;
    int th = dt_cuda_att_threads(hs, vectors, g_att_smem, DT_CU_THREADS, DT_CU_WARP);
    if (th <= 0) {
        char d[128];
        snprintf(d, sizeof d, "head size %lld needs %lld bytes of shared memory per thread; "
                 "%d available per block", (long long)hs, (long long)(hs * vectors * 4), g_att_smem);
        note_error(kernel, d);
        return false;
    }
    sh->threads = (unsigned)th;
    sh->grid = (unsigned)((rows + th - 1) / th);
    sh->smem = (size_t)th * (size_t)vectors * (size_t)hs * sizeof(float);
    return true;
}

static float *att_scratch(int64_t n) {
    static float *buf;
    static int64_t cap;
    if (n > cap) {
        cu_free(buf);
        buf = (float *)cu_alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, (size_t)n * sizeof(float));
        cap = buf ? n : 0;
        if (!buf) note_error("attention scratch", "out of device memory");
    }
    return buf;
}

static void att_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                         const float *lse, const float *probs, int64_t B, int64_t T, int64_t C,
                         int64_t H) {
    int64_t rows = B * H * T;
    float *D = att_scratch(rows);
    if (!D) return;
    k_att_bwd_D<<<grid_for((size_t)rows), DT_CU_THREADS, 0, cs()>>>(D, dout, qkv, out, probs, B, T,
                                                                  C, H);
    LAUNCHED(k_att_bwd_D);
    att_shape s1, s2;
    if (!att_launch("k_att_bwd_dq", 1, rows, C, H, &s1) ||
        !att_launch("k_att_bwd_dkv", 2, rows, C, H, &s2))
        return;
    k_att_bwd_dq<<<s1.grid, s1.threads, s1.smem, cs()>>>(dqkv, dout, qkv, lse, probs, D, B, T, C, H);
    LAUNCHED(k_att_bwd_dq);
    k_att_bwd_dkv<<<s2.grid, s2.threads, s2.smem, cs()>>>(dqkv, dout, qkv, lse, probs, D, B, T, C,
                                                         H);
    LAUNCHED(k_att_bwd_dkv);
}

static void cu_att_fwd_flash(float *out, float *lse, const float *qkv, int64_t B, int64_t T,
                             int64_t C, int64_t H) {
    att_shape sh;
    if (!att_launch("k_att_fwd_flash", 1, B * H * T, C, H, &sh)) return;
    k_att_fwd_flash<<<sh.grid, sh.threads, sh.smem, cs()>>>(out, lse, qkv, B, T, C, H);
    LAUNCHED(k_att_fwd_flash);
}
static void cu_att_fwd_probs(float *out, float *probs, const float *qkv, int64_t B, int64_t T,
                             int64_t C, int64_t H) {
    k_att_fwd_probs<<<grid_for((size_t)(B * H * T)), DT_CU_THREADS, 0, cs()>>>(out, probs, qkv, B,
                                                                             T, C, H);
    LAUNCHED(k_att_fwd_probs);
}
static void cu_att_bwd_flash(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse, int64_t B, int64_t T, int64_t C, int64_t H) {
    att_backward(dqkv, dout, qkv, out, lse, NULL, B, T, C, H);
}
static void cu_att_bwd_probs(float *dqkv, const float *dout, const float *qkv, const float *probs,
                             int64_t B, int64_t T, int64_t C, int64_t H) {
    att_backward(dqkv, dout, qkv, NULL, NULL, probs, B, T, C, H);
}

/* ---------------------------------------------------------------------------
 * cross-entropy: one warp per row */

__global__ void k_ce_fwd(float *lse, float *losses, const float *logits, const int32_t *targets,
                         int64_t N, int64_t V) {
    int64_t n = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / DT_CU_WARP;
    int lane = threadIdx.x % DT_CU_WARP;
    if (n >= N) return;
    const float *z = logits + n * V;
    float mx = -INFINITY;
    for (int64_t v = lane; v < V; v += DT_CU_WARP) mx = fmaxf(mx, z[v]);
    mx = warp_max(mx);
    float s = 0.0f;
    for (int64_t v = lane; v < V; v += DT_CU_WARP) s += dt_fast_expf(z[v] - mx);
    s = warp_sum(s);
    if (lane == 0) {
        lse[n] = mx + logf(s);
        if (targets) losses[n] = targets[n] == DT_IGNORE_INDEX ? 0.0f : lse[n] - z[targets[n]];
    }
}

__global__ void k_ce_bwd(float *logits, const float *lse, const int32_t *targets, float dloss, int64_t N,
                         int64_t V) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * V) return;
    /* a DT_IGNORE_INDEX target: no loss, a zero gradient row */
    logits[i] = targets[i / V] == DT_IGNORE_INDEX ? 0.0f : dt_ce_dlogit(logits[i], lse[i / V], dloss);
}
__global__ void k_ce_bwd_target(float *logits, const int32_t *targets, float dloss, int64_t N,
                                int64_t V) {
    int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N && targets[n] != DT_IGNORE_INDEX) logits[n * V + targets[n]] -= dloss;
}

static double cu_ce_forward(float *lse, float *losses, const float *logits, const int32_t *targets,
                            int64_t N, int64_t V) {
    k_ce_fwd<<<warp_rows_grid(N), DT_CU_THREADS, 0, cs()>>>(lse, losses, logits, targets, N, V);
    LAUNCHED(k_ce_fwd);
    if (!targets) return 0.0;
    if ((size_t)N > g_loss_cap) {
        cu_free(g_loss_host);
        g_loss_host = (float *)cu_alloc(DT_POOL_HOST, DT_MEM_BUFFERS, (size_t)N * sizeof(float));
        g_loss_cap = g_loss_host ? (size_t)N : 0;
        if (!g_loss_host) {
            note_error("loss staging", "out of pinned host memory");
            return 0.0;
        }
    }
    CU(cudaMemcpyAsync(g_loss_host, losses, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost, cs()));
    CU(cudaStreamSynchronize(cs()));
    double total = 0.0;   /* in order, in double, as the CPU */
    for (int64_t n = 0; n < N; n++) total += g_loss_host[n];
    return total / (double)N;
}

static void cu_ce_backward(float *logits, const float *lse, const int32_t *targets, float dloss,
                           int64_t N, int64_t V) {
    k_ce_bwd<<<grid_for((size_t)(N * V)), DT_CU_THREADS, 0, cs()>>>(logits, lse, targets, dloss, N, V);
    LAUNCHED(k_ce_bwd);
    k_ce_bwd_target<<<grid_for((size_t)N), DT_CU_THREADS, 0, cs()>>>(logits, targets, dloss, N, V);
    LAUNCHED(k_ce_bwd_target);
}

/* ---------------------------------------------------------------------------
 * loss-scale checks, norms, AdamW */

__global__ void k_nonfinite(int *flag, const void *x, dt_dtype t, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int bad = t == DT_DTYPE_FP32 ? dt_nonfinite_f32(((const float *)x)[i])
                                 : dt_nonfinite_16(((const uint16_t *)x)[i], t == DT_DTYPE_BF16);
    if (bad) atomicOr(flag, 1);   /* order-free: any writer sets the same bit */
}

/* thread k sums chunk k in double, in index order; the product and the sum
 * are rounded separately (__dmul_rn / __dadd_rn: nvcc would otherwise contract
 * them into one fused multiply-add), as a CPU build without FMA contraction does */
__global__ void k_sumsq_chunks(double *part, const void *x, dt_dtype t, size_t n) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t i0 = k * DT_SUMSQ_CHUNK;
    if (i0 >= n) return;
    size_t i1 = i0 + DT_SUMSQ_CHUNK < n ? i0 + DT_SUMSQ_CHUNK : n;
    double a = 0.0;
    for (size_t i = i0; i < i1; i++) {
        double v = dt_load(x, t, i);
        a = __dadd_rn(a, __dmul_rn(v, v));
    }
    part[k] = a;
}

__global__ void k_adamw(void *params, dt_dtype pt, float *master, void *m, void *v, dt_dtype mt,
                        const void *grads, dt_dtype gt, size_t n, dt_adamw_scalars s) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float mm = dt_load(m, mt, i), vv = dt_load(v, mt, i);
    float p = master ? master[i] : dt_load(params, pt, i);
    p = dt_adamw_elem(p, dt_load(grads, gt, i), &mm, &vv, &s);
    dt_store(m, mt, i, mm);
    dt_store(v, mt, i, vv);
    if (master) master[i] = p;
    dt_store(params, pt, i, p);
}

static int cu_all_finite(const void *x, dt_dtype t, size_t n) {
    if (!n) return 1;
    CU(cudaMemsetAsync(g_flag_dev, 0, sizeof(int), cs()));
    k_nonfinite<<<grid_for(n), DT_CU_THREADS, 0, cs()>>>(g_flag_dev, x, t, n);
    LAUNCHED(k_nonfinite);
    CU(cudaMemcpyAsync(g_flag_host, g_flag_dev, sizeof(int), cudaMemcpyDeviceToHost, cs()));
    CU(cudaStreamSynchronize(cs()));
    return *g_flag_host == 0;
}

static double cu_sumsq(const void *x, dt_dtype t, size_t n) {
    size_t nchunks = (n + DT_SUMSQ_CHUNK - 1) / DT_SUMSQ_CHUNK;
    if (!nchunks) return 0.0;
    if (nchunks > g_part_cap) {
        cu_free(g_part_dev);
        cu_free(g_part_host);
        g_part_dev = (double *)cu_alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, nchunks * sizeof(double));
        g_part_host = (double *)cu_alloc(DT_POOL_HOST, DT_MEM_BUFFERS, nchunks * sizeof(double));
        g_part_cap = g_part_dev && g_part_host ? nchunks : 0;
        if (!g_part_cap) return NAN;
    }
    k_sumsq_chunks<<<grid_for(nchunks), DT_CU_THREADS, 0, cs()>>>(g_part_dev, x, t, n);
    LAUNCHED(k_sumsq_chunks);
    CU(cudaMemcpyAsync(g_part_host, g_part_dev, nchunks * sizeof(double), cudaMemcpyDeviceToHost,
                       cs()));
    CU(cudaStreamSynchronize(cs()));
    double s = 0.0;
    for (size_t k = 0; k < nchunks; k++) s += g_part_host[k];
    return s;
}

static void cu_adamw(void *params, dt_dtype pt, float *master, void *m, void *v, dt_dtype mt,
                     const void *grads, dt_dtype gt, size_t n, const dt_adamw_scalars *s) {
    if (!n) return;
    k_adamw<<<grid_for(n), DT_CU_THREADS, 0, cs()>>>(params, pt, master, m, v, mt, grads, gt, n, *s);
    LAUNCHED(k_adamw);
}

/* ---------------------------------------------------------------------------
 * the table, binding */

static dt_device_ops g_ops;

static void fill_ops(void) {
    dt_device_ops o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.kind = DT_DEVICE_CUDA;
    o.host_addressable = 0;
    o.alloc = cu_alloc;
    o.free = cu_free;
    o.mem_current = cu_mem_current;
    o.mem_peak = cu_mem_peak;
    o.mem_peak_total = cu_mem_peak_total;
    o.mem_reset_peaks = cu_mem_reset_peaks;
    o.meminfo = cu_meminfo;
    o.memcpy = cu_memcpy;
    o.memset0 = cu_memset0;
    o.convert = cu_convert;
    o.convert_2d = cu_convert_2d;
    o.store_round = cu_store_round;
    o.handoff = cu_handoff;
    o.stream_sync = cu_stream_sync;
    o.synchronize = cu_synchronize;
    o.gemm = cu_gemm;
    o.gemm_ex = cu_gemm_ex;
    o.linear_forward = cu_linear_forward;
    o.linear_backward = cu_linear_backward;
    o.bias_backward = cu_bias_backward;
    o.broadcast_rows = cu_broadcast_rows;
    o.encoder_forward = cu_encoder_forward;
    o.encoder_forward_cast = cu_encoder_forward_cast;
    o.encoder_backward = cu_encoder_backward;
    o.encoder_backward_16 = cu_encoder_backward_16;
    o.layernorm_forward = cu_layernorm_forward;
    o.layernorm_backward = cu_layernorm_backward;
    o.attention_forward_flash = cu_att_fwd_flash;
    o.attention_backward_flash = cu_att_bwd_flash;
    o.attention_forward_probs = cu_att_fwd_probs;
    o.attention_backward_probs = cu_att_bwd_probs;
    o.gelu_forward = cu_gelu_forward;
    o.gelu_backward = cu_gelu_backward;
    o.residual_forward = cu_residual;
    o.dropout_mask = cu_dropout_mask;
    o.crossentropy_forward = cu_ce_forward;
    o.crossentropy_backward_inplace = cu_ce_backward;
    o.axpy = cu_axpy;
    o.accumulate_16 = cu_accumulate_16;
    o.add = cu_add;
    o.all_finite = cu_all_finite;
    o.sumsq = cu_sumsq;
    o.adamw = cu_adamw;
    /* the llama family: linear_t here (cuBLAS), the rest in kernels_llama.cu */
    o.linear_t_forward = cu_linear_t_forward;
    o.linear_t_backward = cu_linear_t_backward;
    const dt_cu_host host = {cs, cu_alloc, cu_free};   /* for kernels_llama.cu */
    dt_cu_llama_fill_ops(&o, &host);
    g_ops = o;
}

/* The interface version the engine checks when it loads this module (dt_backend.h). */
extern "C" const int dt_cuda_backend_abi = DT_CUDA_BACKEND_ABI;

extern "C" int dt_device_cuda_count_impl(void) {
    int n = 0;   /* cudaGetDeviceCount leaves n untouched on error (no driver) */
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int dt_device_cuda_get(int ordinal, const dt_device_ops **out, dt_error *err) {
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return dt_errorf(err, DT_ERUNTIME, "cuda: no usable GPU (%s); run on a CUDA machine, or plan for the CPU "
                         "(dtplan solve ... --hardware cpu)", cudaGetErrorString(e));
    }
    if (n == 0)
        return dt_errorf(err, DT_ERUNTIME, "cuda: no GPU visible (check CUDA_VISIBLE_DEVICES)");
    if (ordinal < 0)
        return dt_errorf(err, DT_EINVAL, "cuda: LOCAL_RANK %d is negative", ordinal);
    /* LOCAL_RANK modulo the visible GPUs: a launcher that gives each task its
     * own GPU (srun --gpus-per-task=1, per-rank CUDA_VISIBLE_DEVICES) shows one */
    ordinal = dt_cuda_ordinal_for(ordinal, n);
    if (g_ordinal >= 0) {
        if (g_ordinal != ordinal)
            return dt_errorf(err, DT_EINVAL,
                             "cuda: this process is bound to GPU %d; one GPU per process", g_ordinal);
        *out = &g_ops;
        return DT_OK;
    }
    if ((e = cudaSetDevice(ordinal)) != cudaSuccess)
        return dt_errorf(err, DT_ERUNTIME, "cuda: cudaSetDevice(%d) failed: %s", ordinal,
                         cudaGetErrorString(e));
    size_t fr = 0, tot = 0;
    if ((e = cudaMemGetInfo(&fr, &tot)) != cudaSuccess)
        return dt_errorf(err, DT_ERUNTIME, "cuda: cudaMemGetInfo failed: %s", cudaGetErrorString(e));
    g_free_at_bind = fr;
    for (int s = 0; s < DT_STREAM_COUNT; s++)
        if ((e = cudaStreamCreateWithFlags(&g_stream[s], cudaStreamNonBlocking)) != cudaSuccess)
            return dt_errorf(err, DT_ERUNTIME, "cuda: cudaStreamCreate failed: %s",
                             cudaGetErrorString(e));
    cublasStatus_t bs = cublasCreate(&g_blas);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return dt_errorf(err, DT_ERUNTIME, "cuda: cublasCreate failed: %s", cublasGetStatusString(bs));
    cublasSetStream(g_blas, g_stream[DT_STREAM_COMPUTE]);
    /* cuBLAS's workspace from the tracked allocator (buffers), so the run's memory report
     * and the plan count it (DT_CUDA_GEMM_WORKSPACE_BYTES, dt_plan.h) */
    void *ws = cu_alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, (size_t)DT_CUDA_GEMM_WORKSPACE_BYTES);
    if (!ws)
        return dt_errorf(err, DT_ENOMEM, "cuda: cannot allocate the %lld MiB cuBLAS workspace",
                         (long long)(DT_CUDA_GEMM_WORKSPACE_BYTES >> 20));
    if ((bs = cublasSetWorkspace(g_blas, ws, (size_t)DT_CUDA_GEMM_WORKSPACE_BYTES)) != CUBLAS_STATUS_SUCCESS)
        return dt_errorf(err, DT_ERUNTIME, "cuda: cublasSetWorkspace failed: %s", cublasGetStatusString(bs));
    const char *tf32 = getenv("DT_CUDA_TF32");
    g_compute = tf32 && strcmp(tf32, "1") == 0 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    if (cudaMalloc(&g_flag_dev, sizeof(int)) != cudaSuccess ||
        cudaMallocHost(&g_flag_host, sizeof(int)) != cudaSuccess)
        return dt_errorf(err, DT_ENOMEM, "cuda: cannot allocate the finiteness flag");
    /* attention vectors in shared memory: up to DT_CU_ATT_SMEM_MAX per block,
     * which needs the opt-in above the default 48 KiB */
    int optin = 0;
    if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal)) !=
        cudaSuccess)
        return dt_errorf(err, DT_ERUNTIME, "cuda: cudaDeviceGetAttribute(shared memory) failed: %s",
                         cudaGetErrorString(e));
    g_att_smem = optin < DT_CU_ATT_SMEM_MAX ? optin : DT_CU_ATT_SMEM_MAX;
    const void *att_kernels[] = {(const void *)k_att_fwd_flash, (const void *)k_att_bwd_dq,
                                 (const void *)k_att_bwd_dkv};
    for (const void *k : att_kernels)
        if ((e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, g_att_smem)) !=
            cudaSuccess)
            return dt_errorf(err, DT_ERUNTIME, "cuda: cudaFuncSetAttribute(shared memory %d B) "
                             "failed: %s", g_att_smem, cudaGetErrorString(e));
    fill_ops();
    g_ordinal = ordinal;
    *out = &g_ops;
    return DT_OK;
}

extern "C" void *dt_cuda_stream(dt_stream_id s) {
    return g_ordinal >= 0 && (int)s >= 0 && s < DT_STREAM_COUNT ? (void *)g_stream[s] : NULL;
}
extern "C" int dt_cuda_ordinal(void) { return g_ordinal; }

extern "C" int dt_cuda_meminfo(size_t *free_now, size_t *total, size_t *free_at_bind) {
    size_t f = 0, t = 0;
    if (g_ordinal < 0 || cudaMemGetInfo(&f, &t) != cudaSuccess) return DT_ERUNTIME;
    if (free_now) *free_now = f;
    if (total) *total = t;
    if (free_at_bind) *free_at_bind = g_free_at_bind;
    return DT_OK;
}

extern "C" int dt_cuda_take_error(dt_error *err) {
    if (!g_err_code) return DT_OK;
    int rc = g_err_code;
    if (err) dt_errorf(err, rc, "%s", g_err_msg);
    g_err_code = 0;
    g_err_msg[0] = 0;
    return rc;
}
