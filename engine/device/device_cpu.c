/* device_cpu.c — the CPU device of dt_device.h: the ops of ops_cpu.c (GEMMs on
 * the kernels of gemm_cpu.c: oneDNN or OpenBLAS; OpenMP for the rest), dt_memtrack
 * for memory, plain memcpy for copies; every call is synchronous on the calling
 * thread, so streams and hand-offs are no-ops. Also the device lookup
 * (dt_device_get) and the host-side helpers the CUDA backend shares
 * (dt_adamw_make_scalars). */
#include "dt_device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_backend.h"
#include "dt_dtype.h"
#include "dt_gemm_cpu.h"
#include "dt_ops.h"

/* Arrays shorter than this are handled on one thread (as ops_cpu.c). */
#define DT_CPU_PAR_MIN 32768

static void cpu_memcpy(void *dst, const void *src, size_t bytes, dt_copy_kind kind,
                       dt_stream_id s) {
    (void)kind;
    (void)s;
    if (bytes) memcpy(dst, src, bytes);
}

static void cpu_memset0(void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}

static void cpu_handoff(dt_stream_id from, dt_stream_id to) {
    (void)from;
    (void)to;
}

static void cpu_stream_sync(dt_stream_id s) { (void)s; }

static int cpu_synchronize(dt_error *err) {
    (void)err;
    return DT_OK;
}

/* dst [rows, ldd] <- src [rows, lds], the first cols of each row (dt_convert per row) */
static void cpu_convert_2d(void *dst, dt_dtype dst_t, int64_t ldd, const void *src,
                           dt_dtype src_t, int64_t lds, int64_t rows, int64_t cols) {
    size_t dsz = (size_t)dt_dtype_size(dst_t), ssz = (size_t)dt_dtype_size(src_t);
#pragma omp parallel for schedule(static) if (rows * cols >= DT_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        dt_convert((char *)dst + (size_t)(r * ldd) * dsz, dst_t,
                   (const char *)src + (size_t)(r * lds) * ssz, src_t, (size_t)cols);
}

/* bf16 A and B with an fp32 or bf16 C: the bf16 kernel chosen at start-up
 * (dt_gemm_cpu.h: oneDNN's matmul with fp32 accumulation, or widened). Every other
 * combination: the 16-bit operands widened to fp32 scratch, then one sgemm on the
 * chosen fp32 kernel; a 16-bit C is read, updated and rounded. */
static int cpu_gemm_ex(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const void *A, dt_dtype at, int64_t lda, const void *B, dt_dtype bt,
                        int64_t ldb, float beta, void *C, dt_dtype ct, int64_t ldc) {
    dt_gemm_ex_plan plan;   /* only its dtype check: the CUDA device's table */
    if (dt_gemm_ex_plan_for(at, bt, ct, 0, &plan)) return DT_EINVAL;
    if (at == DT_DTYPE_BF16 && bt == DT_DTYPE_BF16 && ct != DT_DTYPE_FP16)
        return dt_gemm_cpu_bf16(dt_gemm_cpu_choice()->bf16, ta, tb, M, N, K, alpha, A, lda, B,
                                ldb, beta, C, ct, ldc);
    size_t na = (size_t)((ta ? K : M) * lda), nb = (size_t)((tb ? N : K) * ldb);
    size_t nc = (size_t)(M * ldc);
    float *a32 = at == DT_DTYPE_FP32 ? (float *)A : malloc(na * sizeof(float));
    float *b32 = bt == DT_DTYPE_FP32 ? (float *)B : malloc(nb * sizeof(float));
    float *c32 = ct == DT_DTYPE_FP32 ? (float *)C : malloc(nc * sizeof(float));
    if (!a32 || !b32 || !c32) {
        if (at != DT_DTYPE_FP32) free(a32);
        if (bt != DT_DTYPE_FP32) free(b32);
        if (ct != DT_DTYPE_FP32) free(c32);
        return DT_ENOMEM;
    }
    if (at != DT_DTYPE_FP32) dt_convert(a32, DT_DTYPE_FP32, A, at, na);
    if (bt != DT_DTYPE_FP32) dt_convert(b32, DT_DTYPE_FP32, B, bt, nb);
    if (ct != DT_DTYPE_FP32) dt_convert(c32, DT_DTYPE_FP32, C, ct, nc);
    dt_op_gemm(ta, tb, M, N, K, alpha, a32, lda, b32, ldb, beta, c32, ldc);
    if (ct != DT_DTYPE_FP32) {
        dt_convert(C, ct, c32, DT_DTYPE_FP32, nc);
        free(c32);
    }
    if (at != DT_DTYPE_FP32) free(a32);
    if (bt != DT_DTYPE_FP32) free(b32);
    return DT_OK;
}

/* out [B*T, C] = wte [V, C] (dtype wte_t) rows + wpe [maxT, C] (fp32; NULL: none) */
static void cpu_encoder_forward_cast(float *out, const int32_t *tokens, const void *wte,
                                     dt_dtype wte_t, const float *wpe, int64_t B, int64_t T,
                                     int64_t C) {
    size_t esz = (size_t)dt_dtype_size(wte_t);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < B * T; n++) {
        dt_convert(out + n * C, DT_DTYPE_FP32, (const char *)wte + (size_t)tokens[n] * C * esz,
                   wte_t, (size_t)C);
        if (!wpe) continue;   /* no learned positions (the llama family) */
        const float *pe = wpe + (n % T) * C;   /* [C] */
        for (int64_t c = 0; c < C; c++) out[n * C + c] += pe[c];
    }
}

static void cpu_accumulate_16(void *dst, dt_dtype t, const float *acc, size_t n) {
    dt_op_accumulate_16(dst, t, acc, n);
}

static void cpu_add(void *dst, const void *src, dt_dtype t, size_t n) {
    if (t == DT_DTYPE_FP32) {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++) d[i] += s[i];
        return;
    }
    uint16_t *d = dst;
    int bf = t == DT_DTYPE_BF16;
#pragma omp parallel for schedule(static) if (n >= DT_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) d[i] = dt_add_16(d[i], dt_load(src, t, i), bf);
}

static void cpu_encoder_backward_16(void *dwte, void *dwpe, dt_dtype gt, const float *dout,
                                    const int32_t *tokens, const int32_t *tok_head,
                                    const int32_t *tok_next, float *acc, int64_t B, int64_t T,
                                    int64_t C) {
    int64_t N = B * T;
    if (dwpe) {   /* NULL: no learned positions (the llama family) */
        memset(acc, 0, sizeof(float) * (size_t)(T * C));
        for (int64_t n = 0; n < N; n++) dt_op_axpy(acc + (n % T) * C, dout + n * C, 1.0f, C);
        cpu_accumulate_16(dwpe, gt, acc, (size_t)(T * C));
    }
    size_t esz = (size_t)dt_dtype_size(gt);
    for (int64_t n = 0; n < N; n++) {
        int32_t tok = tokens[n];
        if (tok_head[tok] != n) continue;   /* not the token's first position */
        memset(acc, 0, sizeof(float) * (size_t)C);
        for (int32_t k = (int32_t)n; k >= 0; k = tok_next[k])
            dt_op_axpy(acc, dout + (int64_t)k * C, 1.0f, C);
        cpu_accumulate_16((char *)dwte + (size_t)tok * (size_t)C * esz, gt, acc, (size_t)C);
    }
}

static int cpu_all_finite(const void *x, dt_dtype t, size_t n) {
    if (t == DT_DTYPE_FP32) return dt_op_all_finite(x, (int64_t)n);
    const uint16_t *h = x;
    int bf = t == DT_DTYPE_BF16, bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n >= DT_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) bad |= dt_nonfinite_16(h[i], bf);
    return !bad;
}

static double cpu_sumsq(const void *x, dt_dtype t, size_t n) {
    size_t nchunks = (n + DT_SUMSQ_CHUNK - 1) / DT_SUMSQ_CHUNK;
    double *part = malloc((nchunks ? nchunks : 1) * sizeof(double));
    if (!part) return NAN;
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < nchunks; k++) {
        size_t i1 = (k + 1) * DT_SUMSQ_CHUNK < n ? (k + 1) * DT_SUMSQ_CHUNK : n;
        double a = 0.0;
        for (size_t i = k * DT_SUMSQ_CHUNK; i < i1; i++) {
            double v = dt_load(x, t, i);
            a += v * v;
        }
        part[k] = a;
    }
    double s = 0.0;
    for (size_t k = 0; k < nchunks; k++) s += part[k];
    free(part);
    return s;
}

/* The scalars by value in every thread (firstprivate): read through the caller's pointer,
 * which the compiler cannot prove apart from the arrays the loop writes, they were
 * reloaded per element and the loop stayed scalar — 263 ms for GPT-2 124M's fp32 AdamW
 * on 2 threads where the vectorised loop takes 39 (docs/benchmarks.md "AdamW"). The
 * arithmetic per element is dt_adamw_elem's either way, bit for bit. */
static void adamw_f32(float *restrict p, float *restrict m, float *restrict v, const float *restrict g, size_t n,
                      dt_adamw_scalars sc) {
#pragma omp parallel for schedule(static) firstprivate(sc)
    for (size_t i = 0; i < n; i++) {
        float mm = m[i], vv = v[i];
        p[i] = dt_adamw_elem(p[i], g[i], &mm, &vv, &sc);
        m[i] = mm;
        v[i] = vv;
    }
}

static void cpu_adamw(void *params, dt_dtype pt, float *master, void *m, void *v, dt_dtype mt,
                      const void *grads, dt_dtype gt, size_t n, const dt_adamw_scalars *s) {
    const dt_adamw_scalars sc = *s;
    if (!master && pt == DT_DTYPE_FP32 && mt == DT_DTYPE_FP32 && gt == DT_DTYPE_FP32) {
        adamw_f32(params, m, v, grads, n, sc);
        return;
    }
#pragma omp parallel for schedule(static) firstprivate(sc)
    for (size_t i = 0; i < n; i++) {
        float mm = dt_load(m, mt, i), vv = dt_load(v, mt, i);
        float p = master ? master[i] : dt_load(params, pt, i);
        p = dt_adamw_elem(p, dt_load(grads, gt, i), &mm, &vv, &sc);
        dt_store(m, mt, i, mm);
        dt_store(v, mt, i, vv);
        if (master) master[i] = p;
        dt_store(params, pt, i, p);
    }
}

static void *cpu_alloc(dt_mem_pool pool, dt_mem_category cat, size_t bytes) {
    return dt_mem_alloc(pool, cat, bytes);
}

/* Not applicable: the CPU device's memory is the process's RSS (dt_memprobe.h). */
static int cpu_meminfo(dt_device_meminfo *out, int reset_peak) {
    (void)reset_peak;
    memset(out, 0, sizeof *out);
    return DT_OK;
}

static const dt_device_ops cpu_ops = {
    .name = "cpu",
    .kind = DT_DEVICE_CPU,
    .host_addressable = 1,
    .alloc = cpu_alloc,
    .free = dt_mem_free,
    .mem_current = dt_mem_current,
    .mem_peak = dt_mem_peak,
    .mem_peak_total = dt_mem_peak_total,
    .mem_reset_peaks = dt_mem_reset_peaks,
    .meminfo = cpu_meminfo,
    .memcpy = cpu_memcpy,
    .memset0 = cpu_memset0,
    .convert = dt_convert,
    .convert_2d = cpu_convert_2d,
    .store_round = dt_op_store_round,
    .handoff = cpu_handoff,
    .stream_sync = cpu_stream_sync,
    .synchronize = cpu_synchronize,
    .gemm = dt_op_gemm,
    .gemm_ex = cpu_gemm_ex,
    .linear_forward = dt_op_linear_forward,
    .linear_backward = dt_op_linear_backward,
    .bias_backward = dt_op_bias_backward,
    .broadcast_rows = dt_op_broadcast_rows,
    .encoder_forward = dt_op_encoder_forward,
    .encoder_forward_cast = cpu_encoder_forward_cast,
    .encoder_backward = dt_op_encoder_backward,
    .encoder_backward_16 = cpu_encoder_backward_16,
    .layernorm_forward = dt_op_layernorm_forward,
    .layernorm_backward = dt_op_layernorm_backward,
    .attention_forward_flash = dt_op_attention_forward_flash,
    .attention_backward_flash = dt_op_attention_backward_flash,
    .attention_forward_probs = dt_op_attention_forward_probs,
    .attention_backward_probs = dt_op_attention_backward_probs,
    .gelu_forward = dt_op_gelu_forward,
    .gelu_backward = dt_op_gelu_backward,
    .residual_forward = dt_op_residual_forward,
    .dropout_mask = dt_op_dropout_mask,
    .linear_t_forward = dt_op_linear_t_forward,
    .linear_t_backward = dt_op_linear_t_backward,
    .rmsnorm_forward = dt_op_rmsnorm_forward,
    .rmsnorm_backward = dt_op_rmsnorm_backward,
    .rope_forward = dt_op_rope_forward,
    .rope_backward = dt_op_rope_backward,
    .swiglu_forward = dt_op_swiglu_forward,
    .swiglu_backward = dt_op_swiglu_backward,
    .attention_gqa_forward_flash = dt_op_attention_gqa_forward_flash,
    .attention_gqa_backward_flash = dt_op_attention_gqa_backward_flash,
    .attention_gqa_forward_probs = dt_op_attention_gqa_forward_probs,
    .attention_gqa_backward_probs = dt_op_attention_gqa_backward_probs,
    .crossentropy_forward = dt_op_crossentropy_forward,
    .crossentropy_backward_inplace = dt_op_crossentropy_backward_inplace,
    .axpy = dt_op_axpy,
    .accumulate_16 = cpu_accumulate_16,
    .add = cpu_add,
    .all_finite = cpu_all_finite,
    .sumsq = cpu_sumsq,
    .adamw = cpu_adamw,
};

const dt_device_ops *dt_device_cpu(void) { return &cpu_ops; }

const char *dt_device_kind_name(dt_device kind) { return kind == DT_DEVICE_CUDA ? "cuda" : "cpu"; }

/* engine/cuda/device_cuda.cu, reached through the loaded back-end (dt_backend.h) */
typedef int (*cuda_get_fn)(int ordinal, const dt_device_ops **out, dt_error *err);
typedef int (*cuda_count_fn)(void);

int dt_device_cuda_count(void) {
#ifdef DT_HAVE_CUDA
    dt_error e;
    dt_error_clear(&e);
    cuda_count_fn fn = (cuda_count_fn)dt_backend_cuda_sym("dt_device_cuda_count_impl", &e);
    return fn ? fn() : 0;
#else
    return 0;
#endif
}

int dt_device_get(dt_device kind, int ordinal, const dt_device_ops **out, dt_error *err) {
    *out = NULL;
    if (kind == DT_DEVICE_CPU) {
        *out = &cpu_ops;
        return DT_OK;
    }
    if (kind != DT_DEVICE_CUDA)
        return dt_errorf(err, DT_EINVAL, "device: unknown device kind %d (cpu or cuda)", (int)kind);
#ifdef DT_HAVE_CUDA
    cuda_get_fn get = (cuda_get_fn)dt_backend_cuda_sym("dt_device_cuda_get", err);
    return get ? get(ordinal, out, err) : err->code;
#else
    (void)ordinal;
    return dt_errorf(err, DT_ERUNTIME,
                     "device: this build has no CUDA backend (configure with the CUDA toolkit and "
                     "NCCL installed and -DDT_WITH_CUDA=ON), so 'device: cuda' plans cannot run");
#endif
}

dt_adamw_scalars dt_adamw_make_scalars(double lr, double beta1, double beta2, double eps,
                                       double weight_decay, double grad_mul, int decay,
                                       int64_t t) {
    dt_adamw_scalars s;
    s.b1 = (float)beta1;
    s.b2 = (float)beta2;
    s.eps = (float)eps;
    s.lr = (float)lr;
    s.grad_mul = (float)grad_mul;
    s.bc1 = (float)(1.0 - pow(beta1, (double)t));
    s.bc2 = (float)(1.0 - pow(beta2, (double)t));
    s.shrink = decay ? (float)(1.0 - lr * weight_decay) : 1.0f;
    return s;
}
