/* dt_gemm_cpu.h — the CPU device's GEMM kernels and the one choice among them
 * (docs/engine.md "GEMM kernels").
 *
 * Kernels (dt_gemm_kernel):
 *   openblas : cblas_sgemm. OpenBLAS picks its core by CPUID, or the one
 *              OPENBLAS_CORETYPE names (which is never unset here: it is set where
 *              an older OpenBLAS computes wrong results on that processor).
 *   onednn   : oneDNN (libdnnl, the library PyTorch's CPU GEMMs use). fp32:
 *              dnnl_sgemm, dispatched by oneDNN's own CPUID check (AVX-512 where
 *              present), not bound by OPENBLAS_CORETYPE. bf16: the matmul
 *              primitive on bf16 A and B with fp32 accumulation into an fp32 or bf16
 *              C (AVX512-BF16 VDPBF16PS or AMX where oneDNN's dispatcher finds them;
 *              oneDNN Developer Guide, "Matrix Multiplication" and "CPU Dispatcher
 *              Control").
 *   widen    : bf16 only: A and B widened to fp32 scratch (exact), the chosen fp32
 *              kernel, C rounded once into its dtype.
 *
 * The choice is made once per process, on first use or at dt_gemm_cpu_init: the
 * environment variable DT_GEMM forces it (dt_gemm_parse); otherwise a fixed rule
 * over what oneDNN's dispatcher reports, a start-up self-check (each candidate
 * on small integer matrices whose products and sums are exact in fp32, compared
 * bit for bit with the exact result: a kernel that computes wrong results there
 * is never chosen) and, for bf16 on AVX512-BF16 without AMX, the ratio of the
 * core's bf16 dot-product rate to its FMA rate (dt_isaprobe.h) against a
 * threshold far from every measured core. No kernel is timed against another,
 * so a machine makes the same choice on every run and results repeat bit for
 * bit run to run.
 *
 * Determinism: each kernel, for a given shape, strides and thread count, gives
 * bitwise the same C on every call (OpenBLAS and oneDNN split K, when they do, by
 * the thread count only). Different kernels sum in different orders: their fp32
 * results differ within rounding (tolerances in docs/engine.md "GEMM kernels").
 *
 * Thread safety: every function may be called from several threads at once,
 * also from inside an OpenMP parallel region (the kernels then run on the
 * calling thread). */
#ifndef DT_GEMM_CPU_H
#define DT_GEMM_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_precision.h"

typedef enum {
    DT_GEMM_OPENBLAS = 0,
    DT_GEMM_ONEDNN = 1,
    DT_GEMM_WIDEN = 2,   /* bf16 only */
    DT_GEMM_KERNEL_COUNT = 3
} dt_gemm_kernel;

#define DT_GEMM_NAME_MAX 48

/* The bf16 matmul is chosen over the widened sgemm only where the core's bf16 dot
 * product delivers at least this many times the FLOPs of its fp32 FMA
 * (dt_isaprobe.h; the rule of dt_gemm_cpu_init): measured 0.49 on an Intel Emerald Rapids core without AMX, where
 * oneDNN's bf16 matmul ran at ~0.5x the widened sgemm; on AMD Zen 4 the bf16 matmul
 * ran at 1.8-2.0x the sgemm, so its ratio must be about 2 (the probe was not run
 * there: docs/benchmarks.md "CPU GEMM kernels"). 1.5 is halfway: the
 * bf16 kernel's own costs (B re-laid out in VNNI pairs, C converted) need a
 * margin over 1, and neither known core is near it, so the choice does not move
 * from run to run. */
#define DT_GEMM_BF16_DOT_MIN_RATIO 1.5

typedef struct {
    dt_gemm_kernel f32;    /* DT_GEMM_OPENBLAS | DT_GEMM_ONEDNN */
    dt_gemm_kernel bf16;   /* DT_GEMM_ONEDNN | DT_GEMM_WIDEN */
    int forced;            /* 1: DT_GEMM named the kernels */
    /* 1 << kernel for each kernel whose start-up self-check failed (fp32 and bf16) */
    unsigned bad_f32, bad_bf16;
    char openblas_core[DT_GEMM_NAME_MAX];   /* openblas_get_corename(): "Cooperlake", "Haswell" */
    char onednn_isa[DT_GEMM_NAME_MAX];      /* oneDNN's effective ISA: "avx512_core_bf16" */
    char onednn_bf16_impl[DT_GEMM_NAME_MAX];/* the matmul implementation: "brg:avx512_core_bf16" */
    char onednn_version[DT_GEMM_NAME_MAX];  /* "2.6.3" */
    double bf16_dot_ratio;  /* dt_isa_bf16_dot_vs_fma(): 0 without AVX512-BF16 */
} dt_gemm_choice;

/* "openblas" | "onednn" | "widen" (NULL outside the enum) */
const char *dt_gemm_kernel_name(dt_gemm_kernel k);

/* Parses DT_GEMM's syntax: "auto" (or empty: the rule decides, *forced = 0), one
 * kernel for both precisions ("onednn"; "openblas" = OpenBLAS sgemm and bf16
 * widened, since Debian's OpenBLAS has no exported sbgemm), or per precision
 * "fp32=openblas,bf16=onednn" (either part may be left out: the rule decides it).
 * DT_EINVAL with a one-line message naming the bad part. Pure. */
int dt_gemm_parse(const char *s, dt_gemm_kernel *f32, dt_gemm_kernel *bf16, int *forced_f32,
                  int *forced_bf16, dt_error *err);

/* Makes the choice (once per process; later calls return the first result).
 * DT_EINVAL when DT_GEMM cannot be parsed (the rule's choice is used then, so
 * GEMMs still run), DT_ERUNTIME when oneDNN cannot create its CPU engine (the
 * OpenBLAS and widen kernels are used then). */
int dt_gemm_cpu_init(dt_error *err);

/* The choice (initialising on first use). Never NULL. */
const dt_gemm_choice *dt_gemm_cpu_choice(void);

/* One line for run reports and benchmarks, e.g. "fp32 onednn sgemm, bf16 onednn
 * matmul brg:avx512_core_bf16 (rule; openblas Cooperlake, onednn 2.6.3
 * avx512_core_bf16, bf16 dot 0.49x fma)". Returns buf. */
char *dt_gemm_cpu_describe(char *buf, size_t n);

/* C = alpha * op(A) op(B) + beta * C, fp32, row-major, strides in elements, on
 * kernel k (DT_GEMM_OPENBLAS or DT_GEMM_ONEDNN). DT_EINVAL for another kernel or a
 * negative dimension, DT_ERUNTIME when the library refuses. */
int dt_gemm_cpu_f32(dt_gemm_kernel k, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                    float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                    float beta, float *C, int64_t ldc);

/* The same with bf16 A and B (uint16_t bits), fp32 accumulation, C fp32 or bf16
 * (ct), rounded once into C. Kernel k: DT_GEMM_ONEDNN (the matmul primitive; where
 * oneDNN has no implementation for these strides it runs the widen kernel) or
 * DT_GEMM_WIDEN (scratch of the widened operands, the chosen fp32 kernel).
 * Tolerance against the exact product: |C - C_exact| <= K * 2^-24 * sum_k |a_ik b_kj|
 * plus C's own rounding (bf16 C: 2^-8 relative), plus, for oneDNN, products and
 * sums below 2^-126 flushed to zero (VDPBF16PS ignores MXCSR, denormals are
 * zero: Intel SDM vol. 2C, VDPBF16PS). DT_EINVAL for another kernel or dtype,
 * DT_ENOMEM when scratch cannot be allocated, DT_ERUNTIME when oneDNN fails. */
int dt_gemm_cpu_bf16(dt_gemm_kernel k, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                     float alpha, const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                     float beta, void *C, dt_dtype ct, int64_t ldc);

#endif
