/* dt_device.h — the device abstraction the GPT-2 engine runs on: memory
 * (tracked by pool and category), copies, streams and events, and every
 * operation lm.c uses, behind one table of function pointers.
 *
 *   cpu  : device_cpu.c — dt_ops.h (ops_cpu.c; GEMMs: gemm_cpu.c, oneDNN or OpenBLAS
 *          as dt_gemm_cpu.h chooses; OpenMP), dt_memtrack,
 *          synchronous; "device" pointers are host pointers.
 *   cuda : engine/cuda/device_cuda.cu — cudaMalloc (device pool) / cudaMallocHost
 *          (host pool: pinned, for offload), cuBLAS GEMMs with fp32 accumulation,
 *          one kernel per op whose per-element math is dt_devmath.h.
 *
 * Every op has the signature and semantics of its dt_op_* namesake in dt_ops.h
 * (fp32 arrays, shapes in elements, parameter gradients accumulated), on
 * pointers the device's alloc returned. Ops are enqueued on the compute stream
 * in program order; copies name their stream. A hand-off between streams is
 * always explicit: handoff(from, to) records an event on `from` and makes `to`
 * wait for it (no implicit cross-stream ordering is assumed anywhere).
 * On the CPU all streams are the calling thread, so handoff is a no-op. */
#ifndef DT_DEVICE_H
#define DT_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "dt_devmath.h"
#include "dt_error.h"
#include "dt_hardware.h"
#include "dt_memtrack.h"
#include "dt_precision.h"

typedef enum { DT_COPY_H2D = 0, DT_COPY_D2H = 1, DT_COPY_D2D = 2, DT_COPY_H2H = 3 } dt_copy_kind;

/* compute: kernels and GEMMs; comm: collectives; h2d / d2h: host transfers */
typedef enum {
    DT_STREAM_COMPUTE = 0,
    DT_STREAM_COMM = 1,
    DT_STREAM_H2D = 2,
    DT_STREAM_D2H = 3,
    DT_STREAM_COUNT = 4
} dt_stream_id;

/* The driver's view of the device's memory: what the driver measured, never a
 * count of ours (docs/dtrun.md "Real memory per phase"). */
typedef struct {
    int applicable;           /* 0: the device has no driver-side view (the CPU: its memory is
                               * the process's RSS, dt_memprobe.h); the fields below are 0 */
    int64_t total;            /* the device's capacity */
    int64_t used;             /* total - free now: every context and process on the device */
    int64_t used_at_bind;     /* used when this process bound the device (its context created) */
    int64_t peak_used;        /* the highest `used` sampled since the last reset: after each of
                               * the device's own allocations and at each meminfo call */
    int64_t tracked_at_peak;  /* the device pool's tracked bytes when peak_used was sampled */
} dt_device_meminfo;

typedef struct dt_device_ops {
    const char *name;            /* "cpu" | "cuda" */
    dt_device kind;
    int host_addressable;        /* 1: device-pool pointers may be dereferenced on the host */

    /* ---- memory. Device pool: device memory; host pool: host memory the device
     * can copy from asynchronously (pinned on CUDA). Zero-filled, 64-byte (CPU) or
     * 256-byte (CUDA) aligned; NULL on failure or bytes == 0. Counters as dt_memtrack. */
    void *(*alloc)(dt_mem_pool pool, dt_mem_category cat, size_t bytes);
    void (*free)(void *p);
    int64_t (*mem_current)(dt_mem_pool pool, dt_mem_category cat);
    int64_t (*mem_peak)(dt_mem_pool pool, dt_mem_category cat);
    int64_t (*mem_peak_total)(dt_mem_pool pool);
    void (*mem_reset_peaks)(void);
    /* The driver's figures (dt_device_meminfo); reset_peak: after reading, peak_used
     * restarts from `used` now. DT_OK (applicable 0 on the CPU), DT_ERUNTIME when
     * the driver cannot be asked. */
    int (*meminfo)(dt_device_meminfo *out, int reset_peak);

    /* ---- copies and streams. memcpy is asynchronous on its stream for H2D / D2H
     * with pinned host memory (synchronous otherwise); memset0 and convert run
     * on the compute stream. convert: n elements, any dtype pair (dt_convert). */
    void (*memcpy)(void *dst, const void *src, size_t bytes, dt_copy_kind kind, dt_stream_id s);
    void (*memset0)(void *p, size_t bytes);
    void (*convert)(void *dst, dt_dtype dst_t, const void *src, dt_dtype src_t, size_t n);
    /* convert_2d: a rows x cols block, row strides ldd / lds in elements (a column
     * chunk of a row-major matrix); each element as convert. */
    void (*convert_2d)(void *dst, dt_dtype dst_t, int64_t ldd, const void *src, dt_dtype src_t,
                       int64_t lds, int64_t rows, int64_t cols);
    /* store_round: dst (dtype t) = x rounded, and x = those values in fp32, in one
     * pass (dt_op_store_round; bitwise the two converts it replaces) */
    void (*store_round)(void *dst, dt_dtype t, float *x, size_t n);
    void (*handoff)(dt_stream_id from, dt_stream_id to);
    /* The host waits for one stream (e.g. before reusing a host buffer an
     * asynchronous copy reads). */
    void (*stream_sync)(dt_stream_id s);
    /* Waits for every stream; reports (and clears) the first asynchronous error
     * recorded since the last call (CUDA: a failed kernel launch, cuBLAS call or
     * copy, one line naming the call). The trainer calls it once per step. */
    int (*synchronize)(dt_error *err);

    /* ---- GEMM, fp32 (dt_op_gemm) and mixed: A, B, C each fp32, bf16 or fp16
     * (any combination), fp32 accumulation and alpha / beta; row-major, strides
     * in elements. The result is that of an fp32 GEMM on the operands widened to
     * fp32, rounded once into C's dtype, up to the summation order: 16-bit
     * products are exact in fp32, the sums are fp32 in the library's order, so
     * |C - exact| <= K * 2^-24 * sum_k |a_ik b_kj| plus C's one rounding (CPU bf16
     * kernels also flush values below 2^-126 to zero; dt_gemm_cpu.h). Combinations
     * a library lacks go through exact conversions (CUDA: dt_gemm_ex_plan_for;
     * CPU: bf16 x bf16 -> fp32 / bf16 runs 16-bit on the kernel dt_gemm_cpu.h
     * chose, everything else widened). Results repeat bit for bit for a given
     * shape and thread count. gemm_ex returns DT_EINVAL
     * for a dtype outside the three, DT_ENOMEM when its conversion scratch cannot
     * be allocated, DT_ERUNTIME when the GEMM library fails (CUDA; the error is
     * also what synchronize reports). */
    void (*gemm)(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc);
    int (*gemm_ex)(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const void *A, dt_dtype at, int64_t lda, const void *B, dt_dtype bt,
                   int64_t ldb, float beta, void *C, dt_dtype ct, int64_t ldc);
    void (*linear_forward)(float *out, const float *inp, const float *w, const float *bias,
                           int64_t N, int64_t IC, int64_t OC);
    /* The backwards below (linear, LayerNorm, RMSNorm) take dw (and db) NULL for a frozen
     * weight (dt_lm.h "Two parameter sets"): its gradient is not computed; dinp NULL: no
     * input gradient. */
    void (*linear_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int64_t N, int64_t IC, int64_t OC,
                            int accumulate_dinp);
    void (*bias_backward)(float *db, const float *dout, int64_t N, int64_t OC);
    void (*broadcast_rows)(float *out, const float *bias, int64_t N, int64_t OC);

    /* ---- encoder. encoder_forward_cast: wte of dtype wte_t (rows converted on
     * the fly), wpe fp32; wpe / dwpe may be NULL (no learned positions).
     * encoder_backward_16: 16-bit grads (gt), each wte row's
     * contributions summed in fp32 in position order then added with one rounding;
     * tok_head [V] = first position of each token (-1: absent), tok_next [N] = next
     * position with the same token (-1 ends); acc: fp32 scratch of T*C elements. */
    void (*encoder_forward)(float *out, const int32_t *tokens, const float *wte,
                            const float *wpe, int64_t B, int64_t T, int64_t C);
    void (*encoder_forward_cast)(float *out, const int32_t *tokens, const void *wte,
                                 dt_dtype wte_t, const float *wpe, int64_t B, int64_t T,
                                 int64_t C);
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                             int64_t B, int64_t T, int64_t C);
    void (*encoder_backward_16)(void *dwte, void *dwpe, dt_dtype gt, const float *dout,
                                const int32_t *tokens, const int32_t *tok_head,
                                const int32_t *tok_next, float *acc, int64_t B, int64_t T,
                                int64_t C);

    /* ---- LayerNorm, attention, GELU, residual (dt_ops.h) */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int64_t N, int64_t C, float eps);
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int64_t N, int64_t C);
    void (*attention_forward_flash)(float *out, float *lse, const float *qkv, int64_t B,
                                    int64_t T, int64_t C, int64_t H);
    void (*attention_backward_flash)(float *dqkv, const float *dout, const float *qkv,
                                     const float *out, const float *lse, int64_t B, int64_t T,
                                     int64_t C, int64_t H);
    void (*attention_forward_probs)(float *out, float *probs, const float *qkv, int64_t B,
                                    int64_t T, int64_t C, int64_t H);
    void (*attention_backward_probs)(float *dqkv, const float *dout, const float *qkv,
                                     const float *probs, int64_t B, int64_t T, int64_t C,
                                     int64_t H);
    void (*gelu_forward)(float *out, const float *inp, int64_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, int64_t n);
    void (*residual_forward)(float *out, const float *a, const float *b, int64_t n);
    /* LoRA's dropout (engine/model lm_layer.c): y[e] = dt_dropout_at(stream, e, p,
     * float(1 / (1 - p)), x[e]) over n elements (dt_devmath.h; y may be x) */
    void (*dropout_mask)(float *y, const float *x, int64_t n, uint64_t stream, double p);

    /* ---- the llama family (dt_ops.h): nn.Linear-layout linears, RMSNorm, RoPE,
     * SwiGLU, grouped-query attention on separate q, k, v */
    void (*linear_t_forward)(float *out, const float *inp, const float *w, const float *bias,
                             int64_t N, int64_t IC, int64_t OC);
    void (*linear_t_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                              const float *inp, const float *w, int64_t N, int64_t IC,
                              int64_t OC, int accumulate_dinp);
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *w, int64_t N,
                            int64_t nh, int64_t D, int64_t stride, float eps);
    void (*rmsnorm_backward)(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, int64_t N, int64_t nh, int64_t D,
                             int64_t stride, int accumulate_dinp);
    void (*rope_forward)(float *x, const float *cos, const float *sin, int64_t B, int64_t T,
                         int64_t nh, int64_t D, int64_t stride);
    void (*rope_backward)(float *dx, const float *cos, const float *sin, int64_t B, int64_t T,
                          int64_t nh, int64_t D, int64_t stride);
    void (*swiglu_forward)(float *out, const float *gu, int64_t N, int64_t F);
    void (*swiglu_backward)(float *dgu, const float *dout, const float *gu, int64_t N, int64_t F);
    /* separate q, k, v with row strides (dt_ops.h) */
    void (*attention_gqa_forward_flash)(float *out, float *lse, const float *q, int64_t sq,
                                        const float *k, int64_t sk, const float *v, int64_t sv,
                                        int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
    void (*attention_gqa_backward_flash)(float *dq, float *dk, float *dv, const float *dout,
                                         const float *q, int64_t sq, const float *k, int64_t sk,
                                         const float *v, int64_t sv, const float *out,
                                         const float *lse, int64_t B, int64_t T, int64_t Hq,
                                         int64_t Hkv, int64_t D);
    void (*attention_gqa_forward_probs)(float *out, float *probs, const float *q, int64_t sq,
                                        const float *k, int64_t sk, const float *v, int64_t sv,
                                        int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
    void (*attention_gqa_backward_probs)(float *dq, float *dk, float *dv, const float *dout,
                                         const float *q, int64_t sq, const float *k, int64_t sk,
                                         const float *v, int64_t sv, const float *probs,
                                         int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                         int64_t D);

    /* ---- fused classifier loss (dt_ops.h); the forward returns the mean loss to
     * the host (it waits for the compute stream). */
    double (*crossentropy_forward)(float *lse, float *losses, const float *logits,
                                   const int32_t *targets, int64_t N, int64_t V);
    void (*crossentropy_backward_inplace)(float *logits, const float *lse,
                                          const int32_t *targets, float dloss, int64_t N,
                                          int64_t V);

    /* ---- gradient arithmetic, loss-scale checks, optimizer */
    void (*axpy)(float *y, const float *x, float alpha, int64_t n);
    /* dst (16-bit, t) += acc, one rounding per element */
    void (*accumulate_16)(void *dst, dt_dtype t, const float *acc, size_t n);
    /* dst += src, both n elements of dtype t, through fp32 with one rounding per
     * element (dt_add_16): the ZeRO engine's gradient-shard accumulation */
    void (*add)(void *dst, const void *src, dt_dtype t, size_t n);
    /* 1 if all n elements of x (dtype t) are finite; waits for the result */
    int (*all_finite)(const void *x, dt_dtype t, size_t n);
    /* sum of squares in double, DT_SUMSQ_CHUNK chunks in order (see dt_devmath.h),
     * so deterministic on each device (bitwise where both devices round every
     * product and sum separately; see dt_devmath.h); waits for the result */
    double (*sumsq)(const void *x, dt_dtype t, size_t n);
    /* AdamW on n elements (dt_adamw_elem): params (pt), optional fp32 master,
     * moments m, v (mt), grads (gt). */
    void (*adamw)(void *params, dt_dtype pt, float *master, void *m, void *v, dt_dtype mt,
                  const void *grads, dt_dtype gt, size_t n, const dt_adamw_scalars *s);
} dt_device_ops;

/* How the CUDA device runs gemm_ex(at, bt, ct). cublasGemmEx with the fp32
 * compute type takes A and B of ONE dtype and C of that dtype or fp32 (no
 * bf16 x fp32, no fp32 -> bf16 output, no bf16 -> fp16); the TF32 fast mode
 * (DT_CUDA_TF32=1) only fp32 A, B and C (NVIDIA cuBLAS documentation,
 * cublasGemmEx "supported combinations"). So:
 *   ab   : the dtype A and B are handed over in: their own when equal, else
 *          fp32 (the 16-bit one is widened into scratch: exact);
 *   c    : the dtype the GEMM writes: ct when ct is fp32 or ab, else fp32
 *          scratch rounded into ct afterwards (one rounding, as the CPU);
 *   tf32 : the TF32 fast mode is used (requested, and ab and c are fp32).
 * DT_EINVAL when a dtype is not fp32, bf16 or fp16. Pure: the CPU tests
 * check the table (tests/gpu/test_devmath.c). */
typedef struct {
    dt_dtype ab, c;
    int tf32;
} dt_gemm_ex_plan;

static inline int dt_gemm_dtype_ok(dt_dtype t) {
    return t == DT_DTYPE_FP32 || t == DT_DTYPE_BF16 || t == DT_DTYPE_FP16;
}

static inline int dt_gemm_ex_plan_for(dt_dtype at, dt_dtype bt, dt_dtype ct, int want_tf32,
                                      dt_gemm_ex_plan *p) {
    if (!dt_gemm_dtype_ok(at) || !dt_gemm_dtype_ok(bt) || !dt_gemm_dtype_ok(ct)) return DT_EINVAL;
    p->ab = at == bt ? at : DT_DTYPE_FP32;
    p->c = ct == DT_DTYPE_FP32 || ct == p->ab ? ct : DT_DTYPE_FP32;
    p->tf32 = want_tf32 && p->ab == DT_DTYPE_FP32 && p->c == DT_DTYPE_FP32;
    return DT_OK;
}

/* The CUDA ordinal a rank with local rank `local_rank` binds to when
 * `visible` GPUs are visible: local_rank modulo visible. One GPU per rank on a
 * node (LOCAL_RANK < visible) keeps LOCAL_RANK; a launcher that gives each task
 * its own GPU (srun --gpus-per-task=1, a per-rank CUDA_VISIBLE_DEVICES) shows
 * every rank one GPU, ordinal 0. -1 when local_rank < 0 or visible < 1. */
static inline int dt_cuda_ordinal_for(int local_rank, int visible) {
    if (local_rank < 0 || visible < 1) return -1;
    return local_rank % visible;
}

/* The CPU device (always available). */
const dt_device_ops *dt_device_cpu(void);

/* The device of a kind: cpu always; cuda when built with CUDA (DT_HAVE_CUDA)
 * and a GPU is visible, after binding this process to GPU
 * dt_cuda_ordinal_for(ordinal, visible GPUs) (cudaSetDevice; pass LOCAL_RANK).
 * DT_ERUNTIME otherwise, with a message saying why (not built with CUDA / no
 * GPU / driver error). */
int dt_device_get(dt_device kind, int ordinal, const dt_device_ops **out, dt_error *err);

/* Number of visible CUDA GPUs (0 without CUDA, without a driver or on error). */
int dt_device_cuda_count(void);

const char *dt_device_kind_name(dt_device kind);   /* "cpu" | "cuda" */

/* AdamW scalars exactly as engine/model/optim.c derives them for step t (1-based):
 * fp32 casts of the double hyper-parameters, bias corrections from pow(). */
dt_adamw_scalars dt_adamw_make_scalars(double lr, double beta1, double beta2, double eps,
                                       double weight_decay, double grad_mul, int decay,
                                       int64_t t);

#endif
