/* gemm_cpu.c — the CPU GEMM kernels of dt_gemm_cpu.h (OpenBLAS, oneDNN, bf16
 * widened to fp32) and the start-up choice among them.
 *
 * oneDNN's bf16 GEMM is its matmul primitive over strided plain memory
 * descriptors, alpha an eltwise "linear" post-op and beta a "sum" post-op (oneDNN
 * Developer Guide, "Matrix Multiplication", "Primitive Attributes: Post-ops"; the
 * oneDNN 2 and 3 C APIs both, below). Primitives are JIT-compiled, so they are kept in a small
 * cache keyed by everything that defines them; each primitive runs in user
 * scratchpad mode with a scratchpad and a stream per calling thread, the mode the
 * guide states is thread-safe ("Primitive Attributes: Scratchpad"). */
#include "dt_gemm_cpu.h"

#include <cblas.h>
#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_devmath.h"
#include "dt_dtype.h"
#include "dt_isaprobe.h"

/* Matmul primitives kept (a GPT-2 or llama step uses about 20 distinct GEMMs: 3 per
 * linear and the classifier's chunks); when full, a primitive is made per call
 * (oneDNN's own primitive cache still spares the JIT). */
#define DT_MM_CACHE 128
/* oneDNN names its reference (scalar C++) implementations "ref..."; those are
 * orders of magnitude slower than the widened sgemm, so they are never run. */
#define DT_MM_REF_PREFIX "ref"
/* oneDNN's dnnl_cpu_isa_t values are bit sets: an ISA includes another when it
 * has all its bits (dnnl_types.h). */
#define DT_ISA_HAS(isa, want) (((unsigned)(isa) & (unsigned)(want)) == (unsigned)(want))
/* Scratch alignment: one cache line / one AVX-512 vector. */
#define DT_GEMM_ALIGN 64

/* ----------------------------------------------------------------------------
 * names and DT_GEMM */

static const char *const kernel_names[DT_GEMM_KERNEL_COUNT] = {"openblas", "onednn", "widen"};

const char *dt_gemm_kernel_name(dt_gemm_kernel k) {
    return (unsigned)k < DT_GEMM_KERNEL_COUNT ? kernel_names[k] : NULL;
}

static int kernel_lookup(const char *s, size_t n, dt_gemm_kernel *k) {
    for (int i = 0; i < DT_GEMM_KERNEL_COUNT; i++)
        if (strlen(kernel_names[i]) == n && !strncmp(s, kernel_names[i], n)) {
            *k = (dt_gemm_kernel)i;
            return 1;
        }
    return 0;
}

int dt_gemm_parse(const char *s, dt_gemm_kernel *f32, dt_gemm_kernel *bf16, int *forced_f32,
                  int *forced_bf16, dt_error *err) {
    *forced_f32 = *forced_bf16 = 0;
    if (!s || !*s || !strcmp(s, "auto")) return DT_OK;
    dt_gemm_kernel k;
    if (!strchr(s, '=')) {   /* one kernel for both precisions */
        if (!kernel_lookup(s, strlen(s), &k) || k == DT_GEMM_WIDEN)
            return dt_errorf(err, DT_EINVAL,
                             "DT_GEMM='%s': expected auto, openblas, onednn or "
                             "fp32=KERNEL,bf16=KERNEL",
                             s);
        *f32 = k;
        *bf16 = k == DT_GEMM_ONEDNN ? DT_GEMM_ONEDNN : DT_GEMM_WIDEN;
        *forced_f32 = *forced_bf16 = 1;
        return DT_OK;
    }
    for (const char *p = s; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        size_t kn = eq ? (size_t)(eq - p) : 0;
        int is_f32 = eq && kn == 4 && !strncmp(p, "fp32", 4);
        int is_bf16 = eq && kn == 4 && !strncmp(p, "bf16", 4);
        int ok = (is_f32 || is_bf16) && kernel_lookup(eq + 1, n - kn - 1, &k);
        if (ok && is_f32 && k == DT_GEMM_WIDEN) ok = 0;
        if (ok && is_bf16 && k == DT_GEMM_OPENBLAS) ok = 0;
        if (!ok)
            return dt_errorf(err, DT_EINVAL,
                             "DT_GEMM='%s': bad part '%.*s' (fp32=openblas|onednn, "
                             "bf16=onednn|widen)",
                             s, (int)n, p);
        if (is_f32) {
            *f32 = k;
            *forced_f32 = 1;
        } else {
            *bf16 = k;
            *forced_bf16 = 1;
        }
        if (end && !end[1])
            return dt_errorf(err, DT_EINVAL, "DT_GEMM='%s': nothing after the last comma", s);
        p = end ? end + 1 : p + n;
    }
    return DT_OK;
}

/* ----------------------------------------------------------------------------
 * process state */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dt_gemm_choice g_choice;
static dt_error g_init_err;         /* the first init's outcome, replayed to later callers */
static dnnl_engine_t g_engine;      /* NULL: oneDNN unusable (the init error says why) */
static pthread_mutex_t g_mm_lock = PTHREAD_MUTEX_INITIALIZER;

/* per thread: a oneDNN stream and the scratchpad of the primitive it runs */
typedef struct {
    dnnl_stream_t stream;
    void *scratch;
    size_t scratch_bytes;
} thread_ctx;
static pthread_key_t g_tls_key;

static void thread_ctx_free(void *p) {
    thread_ctx *t = p;
    if (!t) return;
    if (t->stream) dnnl_stream_destroy(t->stream);
    free(t->scratch);
    free(t);
}

static thread_ctx *thread_ctx_get(void) {
    thread_ctx *t = pthread_getspecific(g_tls_key);
    if (t) return t;
    t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (dnnl_stream_create(&t->stream, g_engine, dnnl_stream_default_flags) != dnnl_success ||
        pthread_setspecific(g_tls_key, t)) {
        thread_ctx_free(t);
        return NULL;
    }
    return t;
}

/* ----------------------------------------------------------------------------
 * fp32 kernels */

static int openblas_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                          float *C, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta,
                C, (blasint)ldc);
    return DT_OK;
}

static int onednn_sgemm_1(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                          float *C, int64_t ldc) {
    return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C,
                      ldc) == dnnl_success
               ? DT_OK
               : DT_ERUNTIME;
}

/* oneDNN 2.6's sgemm with a transposed B and few rows does not use its threads: a
 * linear's input gradient (128 x 768 x 3072, N,T) ran at 89 GFLOP/s on 1 thread and 105
 * on 2, where the same shape untransposed reached 221 (bench/bench_gemm --rows 128;
 * docs/benchmarks.md "oneDNN's transposed-B sgemm"). Such a call is cut into one column
 * block of C per thread, each a single-threaded sgemm over the whole K (every element
 * sums in the same order for a given thread count, so runs repeat bit for bit). */
#define SPLIT_MIN_MACS ((int64_t)1 << 21)   /* below ~2 M multiply-adds a fork costs more */
static int onednn_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                        float *C, int64_t ldc) {
    const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (ta || !tb || nt < 2 || N < nt || M * N * K < SPLIT_MIN_MACS)
        return onednn_sgemm_1(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    int bad = 0;
#pragma omp parallel num_threads(nt) reduction(| : bad)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        const int64_t n0 = N * t / n, n1 = N * (t + 1) / n;
        if (n1 > n0)   /* op(B) = B^T: C's columns n0..n1 are B's rows n0..n1 */
            bad |= onednn_sgemm_1(0, 1, M, n1 - n0, K, alpha, A, lda, B + n0 * ldb, ldb, beta, C + n0, ldc) != DT_OK;
    }
    return bad ? DT_ERUNTIME : DT_OK;
}

/* C = beta * C for an empty product (K = 0); beta = 0 writes zeros (never reads C) */
static void scale_c(int64_t M, int64_t N, float beta, void *C, dt_dtype ct, int64_t ldc) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            size_t i = (size_t)(m * ldc + n);
            float v = beta == 0.0f ? 0.0f : beta * dt_load(C, ct, i);
            dt_store(C, ct, i, v);
        }
}

static int f32_on(dt_gemm_kernel k, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc) {
    if (M < 0 || N < 0 || K < 0) return DT_EINVAL;
    if (M == 0 || N == 0) return DT_OK;
    if (K == 0) {
        scale_c(M, N, beta, C, DT_DTYPE_FP32, ldc);
        return DT_OK;
    }
    switch (k) {
    case DT_GEMM_OPENBLAS:
        return openblas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    case DT_GEMM_ONEDNN:
        if (!g_engine) return DT_ERUNTIME;
        return onednn_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    default:
        return DT_EINVAL;
    }
}

/* ----------------------------------------------------------------------------
 * bf16: widened */

/* The widened copy of op(B) is made and used this many bytes at a time: one block of
 * C's columns per pass (each element of C still summed by one fp32 kernel call over the
 * whole K, so the block size moves no bits). Bounded so that a product with a large
 * matrix (the tied classifier's V x C embedding: 151936 x 1024 for Qwen3, 620 MB
 * widened) never holds a model-sized transient the memory model does not plan
 * (docs/engine.md "GEMM kernels"). 32 MiB holds every block linear of GPT-2 124M-774M
 * and Qwen3-0.6B whole (the largest, Qwen3's gate|up, 6144 x 1024: 24 MiB), so only the
 * classifier is cut (GPT-2's forward into 5 blocks of up to 10922 rows of wte); measured on
 * Qwen3-0.6B mixed-bf16, B 1, T 64: its lm_head 936 -> 381 ms per step, the whole
 * matrix's fresh pages no longer faulted in on every call (docs/benchmarks.md). */
#define DT_WIDEN_B_BYTES ((size_t)32 << 20)

/* dst[r * dst_ld + c] = widen(src[r * src_ld + c]), rows x cols, rows in parallel */
static void widen_rows(float *dst, int64_t dst_ld, const uint16_t *src, int64_t src_ld, int64_t rows,
                       int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= (int64_t)1 << 16)
    for (int64_t r = 0; r < rows; r++)
        dt_bf16_to_f32_n(dst + r * dst_ld, (const dt_bf16 *)(src + r * src_ld), (size_t)cols);
}

/* C's columns j0..j0+n (M rows, its dtype ct) -> fp32 rows of width n at c32, or back */
static void c_block(float *c32, void *C, dt_dtype ct, int64_t ldc, int64_t j0, int64_t M, int64_t n,
                    int to_c) {
    const size_t es = (size_t)dt_dtype_size(ct);
#pragma omp parallel for schedule(static) if (M * n >= (int64_t)1 << 16)
    for (int64_t i = 0; i < M; i++) {
        char *row = (char *)C + ((size_t)(i * ldc + j0)) * es;
        if (to_c) dt_convert(row, ct, c32 + i * n, DT_DTYPE_FP32, (size_t)n);
        else dt_convert(c32 + i * n, DT_DTYPE_FP32, row, ct, (size_t)n);
    }
}

/* Elements a strided rows x cols matrix spans: a sub-matrix of a wider one (a column offset, ld
 * the wider row) ends at its last row's last column, not at rows x ld, which would read (or
 * write) past the end of the caller's buffer. */
static size_t strided_span(int64_t rows, int64_t cols, int64_t ld) {
    return rows > 0 && cols > 0 ? (size_t)((rows - 1) * ld + cols) : 0;
}

/* op(B) fits one block: B and C widened whole, their strides kept */
static int widen_whole(dt_gemm_kernel fk, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *a32, int64_t lda, const uint16_t *B, int64_t ldb, float *b32,
                       float beta, void *C, dt_dtype ct, float *c32, int64_t ldc) {
    dt_convert(b32, DT_DTYPE_FP32, B, DT_DTYPE_BF16, strided_span(tb ? N : K, tb ? K : N, ldb));
    if (c32) dt_convert(c32, DT_DTYPE_FP32, C, ct, strided_span(M, N, ldc));
    int rc = f32_on(fk, ta, tb, M, N, K, alpha, a32, lda, b32, ldb, beta, c32 ? c32 : (float *)C, ldc);
    if (rc == DT_OK && c32) dt_convert(C, ct, c32, DT_DTYPE_FP32, strided_span(M, N, ldc));
    return rc;
}

/* op(B) nb columns at a time into b32 (nb x K or K x nb), C's matching columns via c32 */
static int widen_blocks(dt_gemm_kernel fk, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *a32, int64_t lda, const uint16_t *B, int64_t ldb, float *b32,
                        int64_t nb, float beta, void *C, dt_dtype ct, float *c32, int64_t ldc) {
    int rc = DT_OK;
    for (int64_t j0 = 0; j0 < N && rc == DT_OK; j0 += nb) {
        const int64_t n = N - j0 < nb ? N - j0 : nb;
        /* op(B)'s columns j0..j0+n: B's columns (K x n, strided) or, transposed, B's rows (n x K) */
        if (tb) widen_rows(b32, K, B + j0 * ldb, ldb, n, K);
        else widen_rows(b32, n, B + j0, ldb, K, n);
        const int64_t bld = tb ? K : n;
        if (!c32) {
            rc = f32_on(fk, ta, tb, M, n, K, alpha, a32, lda, b32, bld, beta, (float *)C + j0, ldc);
            continue;
        }
        c_block(c32, C, ct, ldc, j0, M, n, 0);
        rc = f32_on(fk, ta, tb, M, n, K, alpha, a32, lda, b32, bld, beta, c32, n);
        if (rc == DT_OK) c_block(c32, C, ct, ldc, j0, M, n, 1);
    }
    return rc;
}

static int bf16_widen(dt_gemm_kernel fk, int ta, int tb, int64_t M, int64_t N, int64_t K,
                      float alpha, const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                      float beta, void *C, dt_dtype ct, int64_t ldc) {
    if (M < 0 || N < 0 || K < 0) return DT_EINVAL;
    if (M == 0 || N == 0) return DT_OK;
    /* A whole (rows x leading dimension); op(B) nb columns at a time */
    const int64_t arows = ta ? K : M, kk = K > 0 ? K : 1;
    int64_t nb = (int64_t)(DT_WIDEN_B_BYTES / (sizeof(float) * (size_t)kk));
    if (nb < 1) nb = 1;
    if (nb > N) nb = N;
    const int one = nb == N;
    float *a32 = malloc((size_t)(arows * lda) * sizeof(float));
    float *b32 = malloc((one ? (size_t)((tb ? N : K) * ldb) : (size_t)(nb * kk)) * sizeof(float));
    float *c32 = ct == DT_DTYPE_FP32 ? NULL : malloc((one ? (size_t)(M * ldc) : (size_t)(M * nb)) * sizeof(float));
    int rc = DT_ENOMEM;
    if (a32 && b32 && (ct == DT_DTYPE_FP32 || c32)) {
        dt_convert(a32, DT_DTYPE_FP32, A, DT_DTYPE_BF16, strided_span(arows, ta ? M : K, lda));
        rc = one ? widen_whole(fk, ta, tb, M, N, K, alpha, a32, lda, B, ldb, b32, beta, C, ct, c32, ldc)
                 : widen_blocks(fk, ta, tb, M, N, K, alpha, a32, lda, B, ldb, b32, nb, beta, C, ct, c32, ldc);
    }
    free(a32);
    free(b32);
    free(c32);
    return rc;
}

/* ----------------------------------------------------------------------------
 * bf16: oneDNN matmul
 *
 * Written against both C APIs: oneDNN 2.x (Debian 12's libdnnl 2.6: memory
 * descriptors are structs, a matmul op descriptor precedes the primitive
 * descriptor) and oneDNN 3.x (descriptors are handles created and destroyed,
 * dnnl_matmul_primitive_desc_create). alpha is an eltwise "linear" post-op and
 * beta a "sum" post-op, in that order: C = beta * C + alpha * (A B), which both
 * APIs express the same way. */

#if DNNL_VERSION_MAJOR >= 3
typedef dnnl_memory_desc_t md_t;   /* a handle */
#define MD(x) (x)
static void md_free(md_t *m) {
    if (*m) dnnl_memory_desc_destroy(*m);
    *m = NULL;
}
static int md_strided(md_t *m, const dnnl_dims_t dims, dnnl_data_type_t dt,
                      const dnnl_dims_t strides) {
    return dnnl_memory_desc_create_with_strides(m, 2, dims, dt, strides) != dnnl_success;
}
static int md_from_pd(md_t *m, const_dnnl_primitive_desc_t pd, dnnl_query_t what) {
    return dnnl_memory_desc_clone(m, dnnl_primitive_desc_query_md(pd, what, 0)) != dnnl_success;
}
static int matmul_pd(dnnl_primitive_desc_t *pd, md_t a, md_t b, md_t c,
                     const_dnnl_primitive_attr_t attr) {
    return dnnl_matmul_primitive_desc_create(pd, g_engine, a, b, NULL, c, attr) != dnnl_success;
}
static int po_linear(dnnl_post_ops_t po, float alpha) {
    return dnnl_post_ops_append_eltwise(po, dnnl_eltwise_linear, alpha, 0.0f) != dnnl_success;
}
static int po_sum(dnnl_post_ops_t po, float beta) {
    return dnnl_post_ops_append_sum(po, beta, 0, dnnl_data_type_undef) != dnnl_success;
}
#else
typedef dnnl_memory_desc_t md_t;   /* a struct */
#define MD(x) (&(x))
static void md_free(md_t *m) { (void)m; }
static int md_strided(md_t *m, const dnnl_dims_t dims, dnnl_data_type_t dt,
                      const dnnl_dims_t strides) {
    return dnnl_memory_desc_init_by_strides(m, 2, dims, dt, strides) != dnnl_success;
}
static int md_from_pd(md_t *m, const_dnnl_primitive_desc_t pd, dnnl_query_t what) {
    const dnnl_memory_desc_t *q = dnnl_primitive_desc_query_md(pd, what, 0);
    if (!q) return 1;
    *m = *q;
    return 0;
}
static int matmul_pd(dnnl_primitive_desc_t *pd, md_t a, md_t b, md_t c,
                     const_dnnl_primitive_attr_t attr) {
    dnnl_matmul_desc_t d;
    if (dnnl_matmul_desc_init(&d, &a, &b, NULL, &c) != dnnl_success) return 1;
    return dnnl_primitive_desc_create(pd, &d, attr, g_engine, NULL) != dnnl_success;
}
static int po_linear(dnnl_post_ops_t po, float alpha) {
    return dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_linear, alpha, 0.0f) !=
           dnnl_success;
}
static int po_sum(dnnl_post_ops_t po, float beta) {
    return dnnl_post_ops_append_sum(po, beta) != dnnl_success;
}
#endif

typedef struct {
    int ta, tb, ct, nthr;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
} mm_key;

typedef struct {
    int used;
    mm_key key;
    dnnl_primitive_t prim;   /* NULL: no non-reference implementation (run widened) */
    md_t a_md, b_md, c_md, s_md;
    size_t scratch_bytes;
} mm_entry;

static mm_entry g_mm[DT_MM_CACHE];

static int mm_key_eq(const mm_key *a, const mm_key *b) {
    return a->ta == b->ta && a->tb == b->tb && a->ct == b->ct && a->nthr == b->nthr &&
           a->M == b->M && a->N == b->N && a->K == b->K && a->lda == b->lda && a->ldb == b->ldb &&
           a->ldc == b->ldc && !memcmp(&a->alpha, &b->alpha, sizeof(float)) &&
           !memcmp(&a->beta, &b->beta, sizeof(float));
}

/* Releases what mm_create made (the primitive and the descriptors). */
static void mm_release(mm_entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    e->prim = NULL;
    md_free(&e->a_md);
    md_free(&e->b_md);
    md_free(&e->c_md);
    md_free(&e->s_md);
}

/* Builds e's primitive for e->key. DT_OK with e->prim NULL when oneDNN has only a
 * reference implementation (or none) for it; impl: the implementation's name. */
static int mm_create(mm_entry *e, char *impl, size_t impl_n) {
    const mm_key *k = &e->key;
    const dnnl_dims_t da = {k->M, k->K}, db = {k->K, k->N}, dc = {k->M, k->N};
    const dnnl_dims_t sa = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1};
    const dnnl_dims_t sb = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1};
    const dnnl_dims_t sc = {k->ldc, 1};
    const dnnl_data_type_t cdt = k->ct == DT_DTYPE_BF16 ? dnnl_bf16 : dnnl_f32;
    md_t a, b, c;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    e->prim = NULL;
    if (impl_n) impl[0] = '\0';
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int rc = DT_OK;   /* descriptors oneDNN refuses: no implementation, run widened */
    if (md_strided(&a, da, dnnl_bf16, sa) || md_strided(&b, db, dnnl_bf16, sb) ||
        md_strided(&c, dc, cdt, sc))
        goto out;
    rc = DT_ERUNTIME;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success ||
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success)
        goto out;
    if (k->alpha != 1.0f || k->beta != 0.0f) {
        if (dnnl_post_ops_create(&po) != dnnl_success) goto out;
        if (k->alpha != 1.0f && po_linear(po, k->alpha)) goto out;
        if (k->beta != 0.0f && po_sum(po, k->beta)) goto out;
        if (dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success) goto out;
    }
    rc = DT_OK;
    if (matmul_pd(&pd, a, b, c, attr)) goto out;   /* no implementation: widened */
    const char *name = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success || !name)
        name = "";
    if (impl_n) snprintf(impl, impl_n, "%s", name);
    if (!strncmp(name, DT_MM_REF_PREFIX, strlen(DT_MM_REF_PREFIX))) goto out;
    rc = DT_ERUNTIME;
    if (md_from_pd(&e->a_md, pd, dnnl_query_src_md) ||
        md_from_pd(&e->b_md, pd, dnnl_query_weights_md) ||
        md_from_pd(&e->c_md, pd, dnnl_query_dst_md) ||
        md_from_pd(&e->s_md, pd, dnnl_query_scratchpad_md) ||
        dnnl_primitive_create(&e->prim, pd) != dnnl_success) {
        e->prim = NULL;
        mm_release(e);
        goto out;
    }
    e->scratch_bytes = dnnl_memory_desc_get_size(MD(e->s_md));
    rc = DT_OK;
out:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    md_free(&a);
    md_free(&b);
    md_free(&c);
    return rc;
}

/* Runs e's primitive on the calling thread's stream and scratchpad. */
static int mm_execute(const mm_entry *e, const uint16_t *A, const uint16_t *B, void *C) {
    thread_ctx *t = thread_ctx_get();
    if (!t) return DT_ENOMEM;
    if (t->scratch_bytes < e->scratch_bytes) {
        free(t->scratch);
        size_t bytes = (e->scratch_bytes + DT_GEMM_ALIGN - 1) / DT_GEMM_ALIGN * DT_GEMM_ALIGN;
        t->scratch = aligned_alloc(DT_GEMM_ALIGN, bytes);
        t->scratch_bytes = t->scratch ? bytes : 0;
        if (!t->scratch) return DT_ENOMEM;
    }
    dnnl_memory_t m[4] = {NULL, NULL, NULL, NULL};
    int rc = DT_ERUNTIME;
    if (dnnl_memory_create(&m[0], MD(e->a_md), g_engine, (void *)A) ||
        dnnl_memory_create(&m[1], MD(e->b_md), g_engine, (void *)B) ||
        dnnl_memory_create(&m[2], MD(e->c_md), g_engine, C))
        goto out;
    int nargs = 3;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}};
    if (e->scratch_bytes) {
        if (dnnl_memory_create(&m[3], MD(e->s_md), g_engine, t->scratch)) goto out;
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m[3]};
    }
    if (dnnl_primitive_execute(e->prim, t->stream, nargs, args) == dnnl_success &&
        dnnl_stream_wait(t->stream) == dnnl_success)
        rc = DT_OK;
out:
    for (int i = 0; i < 4; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    return rc;
}

/* impl (optional): the implementation oneDNN chose ("" when run widened) */
static int bf16_onednn(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                       const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta,
                       void *C, dt_dtype ct, int64_t ldc, char *impl, size_t impl_n) {
    if (!g_engine) return DT_ERUNTIME;
    mm_key key = {ta ? 1 : 0, tb ? 1 : 0, (int)ct, omp_in_parallel() ? 1 : omp_get_max_threads(),
                  M, N, K, lda, ldb, ldc, alpha, beta};
    mm_entry *e = NULL, local;
    int rc = DT_OK;
    pthread_mutex_lock(&g_mm_lock);
    for (int i = 0; i < DT_MM_CACHE && g_mm[i].used; i++)
        if (mm_key_eq(&g_mm[i].key, &key)) {
            e = &g_mm[i];
            break;
        }
    if (!e) {
        int slot = -1;
        for (int i = 0; i < DT_MM_CACHE; i++)
            if (!g_mm[i].used) {
                slot = i;
                break;
            }
        e = slot >= 0 ? &g_mm[slot] : &local;
        memset(e, 0, sizeof *e);
        e->key = key;
        rc = mm_create(e, impl, impl_n);
        if (rc == DT_OK && slot >= 0) e->used = 1;   /* entries are never evicted */
    } else if (impl_n) {
        impl[0] = '\0';   /* only reported on creation */
    }
    pthread_mutex_unlock(&g_mm_lock);
    if (rc) return rc;
    if (!e->prim) {   /* no fast implementation for this shape: widened on the fp32 kernel */
        if (e == &local) mm_release(&local);
        return bf16_widen(g_choice.f32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ct, ldc);
    }
    rc = mm_execute(e, A, B, C);
    if (e == &local) mm_release(&local);
    return rc;
}

static int bf16_on(dt_gemm_kernel k, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta,
                   void *C, dt_dtype ct, int64_t ldc, char *impl, size_t impl_n) {
    if (M < 0 || N < 0 || K < 0 || (ct != DT_DTYPE_FP32 && ct != DT_DTYPE_BF16)) return DT_EINVAL;
    if (M == 0 || N == 0) return DT_OK;
    if (K == 0) {
        scale_c(M, N, beta, C, ct, ldc);
        return DT_OK;
    }
    switch (k) {
    case DT_GEMM_ONEDNN:
        return bf16_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ct, ldc, impl, impl_n);
    case DT_GEMM_WIDEN:
        return bf16_widen(g_choice.f32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ct, ldc);
    default:
        return DT_EINVAL;
    }
}

/* ----------------------------------------------------------------------------
 * the start-up self-check: small integers, so every product and every partial sum
 * is an integer below 2^24 (exact in fp32 in any order) and, for a bf16 C, below
 * 2^8 (exact in bf16): a correct kernel matches the exact result bit for bit. */

/* (M, N, K): odd sizes, one below and one above the usual 16 / 48-wide register
 * blocks and the small-matrix paths, each with all four transpositions. */
static const int64_t check_shapes[][3] = {{5, 3, 7}, {67, 45, 129}, {130, 97, 66}};
#define DT_CHECK_PAD 3   /* leading dimensions exceed the rows by this (strides) */
#define DT_CHECK_NAN_BETA0 1   /* beta = 0 must not read C: C starts as NaN */

static float check_val(int64_t i, int span) { return (float)((i * 7 + 3) % (2 * span + 1) - span); }

/* 1: kernel k (fp32, or bf16 with is_bf16) gives the exact result on every case */
static int self_check(dt_gemm_kernel k, int is_bf16) {
    int ok = 1;
    for (size_t s = 0; ok && s < sizeof check_shapes / sizeof check_shapes[0]; s++)
        for (int t = 0; ok && t < 4; t++) {
            const int ta = t & 1, tb = t >> 1;
            const int64_t M = check_shapes[s][0], N = check_shapes[s][1], K = check_shapes[s][2];
            const int64_t lda = (ta ? M : K) + DT_CHECK_PAD, ldb = (tb ? K : N) + DT_CHECK_PAD;
            const int64_t ldc = N + DT_CHECK_PAD;
            const size_t na = (size_t)((ta ? K : M) * lda), nb = (size_t)((tb ? N : K) * ldb);
            const size_t nc = (size_t)(M * ldc);
            /* bf16 C must hold the sums exactly: entries in [-1, 1] keep them below 2^8 */
            const int span = is_bf16 ? 1 : 3;
            const float beta = t == 3 ? 0.0f : 1.0f, alpha = t == 1 ? 2.0f : 1.0f;
            const dt_dtype ct = is_bf16 && s == 1 ? DT_DTYPE_BF16 : DT_DTYPE_FP32;
            float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
            float *c = malloc(nc * sizeof(float));
            uint16_t *a16 = malloc(na * sizeof(uint16_t)), *b16 = malloc(nb * sizeof(uint16_t));
            uint16_t *c16 = malloc(nc * sizeof(uint16_t));
            if (!a || !b || !c || !a16 || !b16 || !c16) {
                ok = 0;
            } else {
                for (size_t i = 0; i < na; i++) a[i] = check_val((int64_t)i, span);
                for (size_t i = 0; i < nb; i++) b[i] = check_val((int64_t)i * 3 + 1, span);
                for (size_t i = 0; i < nc; i++)
                    c[i] = beta == 0.0f && DT_CHECK_NAN_BETA0 ? NAN : check_val((int64_t)i, 2);
                dt_convert(a16, DT_DTYPE_BF16, a, DT_DTYPE_FP32, na);
                dt_convert(b16, DT_DTYPE_BF16, b, DT_DTYPE_FP32, nb);
                dt_convert(c16, DT_DTYPE_BF16, c, DT_DTYPE_FP32, nc);
                int rc = is_bf16 ? bf16_on(k, ta, tb, M, N, K, alpha, a16, lda, b16, ldb, beta,
                                           ct == DT_DTYPE_BF16 ? (void *)c16 : (void *)c, ct,
                                           ldc, NULL, 0)
                                 : f32_on(k, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
                ok = rc == DT_OK;
                for (int64_t m = 0; ok && m < M; m++)
                    for (int64_t n = 0; ok && n < N; n++) {
                        double want = 0.0;
                        for (int64_t kk = 0; kk < K; kk++)
                            want += (double)a[ta ? kk * lda + m : m * lda + kk] *
                                    (double)b[tb ? n * ldb + kk : kk * ldb + n];
                        want *= alpha;
                        if (beta != 0.0f) want += beta * (double)check_val(m * ldc + n, 2);
                        size_t i = (size_t)(m * ldc + n);
                        double got = ct == DT_DTYPE_BF16 ? dt_bf16_to_f32(c16[i]) : c[i];
                        ok = got == want;
                    }
            }
            free(a);
            free(b);
            free(c);
            free(a16);
            free(b16);
            free(c16);
        }
    return ok;
}

/* ----------------------------------------------------------------------------
 * the choice */

/* The implementation oneDNN picks for a dense bf16 x bf16 -> fp32 product of the
 * model's kind (a linear forward: no transposes, beta 0), for the description. */
#define DT_IMPL_PROBE_DIM 256
static void impl_name(char *buf, size_t n) {
    mm_entry e;
    memset(&e, 0, sizeof e);
    e.key = (mm_key){0, 0, (int)DT_DTYPE_FP32, omp_in_parallel() ? 1 : omp_get_max_threads(),
                     DT_IMPL_PROBE_DIM, DT_IMPL_PROBE_DIM, DT_IMPL_PROBE_DIM, DT_IMPL_PROBE_DIM,
                     DT_IMPL_PROBE_DIM, DT_IMPL_PROBE_DIM, 1.0f, 0.0f};
    if (mm_create(&e, buf, n) == DT_OK) mm_release(&e);
}

/* oneDNN's effective ISA, named by the widest capability it includes (the enum's
 * values differ between oneDNN 2 and 3; these names exist in both) */
static const char *isa_name(dnnl_cpu_isa_t isa) {
    static const struct {
        dnnl_cpu_isa_t isa;
        const char *name;
    } names[] = {{dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
                 {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
                 {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
                 {dnnl_cpu_isa_avx512_core, "avx512_core"},
                 {dnnl_cpu_isa_avx2, "avx2"},
                 {dnnl_cpu_isa_avx, "avx"},
                 {dnnl_cpu_isa_sse41, "sse41"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (DT_ISA_HAS(isa, names[i].isa)) return names[i].name;
    return "none";
}

static void choose(void) {
    dt_gemm_choice *c = &g_choice;
    dt_error_clear(&g_init_err);
    memset(c, 0, sizeof *c);
    snprintf(c->openblas_core, sizeof c->openblas_core, "%s", openblas_get_corename());
    const dnnl_version_t *v = dnnl_version();
    snprintf(c->onednn_version, sizeof c->onednn_version, "%d.%d.%d", v->major, v->minor,
             v->patch);
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    snprintf(c->onednn_isa, sizeof c->onednn_isa, "%s", isa_name(isa));
    if (pthread_key_create(&g_tls_key, thread_ctx_free) ||
        dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) {
        g_engine = NULL;
        dt_errorf(&g_init_err, DT_ERUNTIME,
                  "gemm: oneDNN could not create its CPU engine; running OpenBLAS only");
    }

    /* the fp32 kernel the widen kernel runs on during the checks: OpenBLAS */
    c->f32 = DT_GEMM_OPENBLAS;
    if (!self_check(DT_GEMM_OPENBLAS, 0)) c->bad_f32 |= 1u << DT_GEMM_OPENBLAS;
    if (!g_engine || !self_check(DT_GEMM_ONEDNN, 0)) c->bad_f32 |= 1u << DT_GEMM_ONEDNN;
    if (!g_engine || !self_check(DT_GEMM_ONEDNN, 1))
        c->bad_bf16 |= 1u << DT_GEMM_ONEDNN;
    if (g_engine) impl_name(c->onednn_bf16_impl, sizeof c->onednn_bf16_impl);

    /* The rule (measurements: docs/benchmarks.md "CPU GEMM kernels"):
     *  fp32: oneDNN's sgemm where its dispatcher runs an AVX-512 kernel (at least
     *        avx512_core), OpenBLAS otherwise (AVX2 and older, where both run
     *        Haswell-class kernels); a kernel that failed its check is skipped.
     *  bf16: oneDNN's matmul where the CPU has AMX, or AVX512-BF16 whose dot
     *        product delivers at least DT_GEMM_BF16_DOT_MIN_RATIO x the FMA's FLOPs;
     *        else widened to fp32 (the fp32 kernel's rate, the operands exact). */
    int onednn_f32_ok = !(c->bad_f32 & (1u << DT_GEMM_ONEDNN));
    int openblas_ok = !(c->bad_f32 & (1u << DT_GEMM_OPENBLAS));
    if (onednn_f32_ok && (DT_ISA_HAS(isa, dnnl_cpu_isa_avx512_core) || !openblas_ok))
        c->f32 = DT_GEMM_ONEDNN;
    else
        c->f32 = DT_GEMM_OPENBLAS;
    int onednn_bf16_ok = !(c->bad_bf16 & (1u << DT_GEMM_ONEDNN));
    c->bf16_dot_ratio = dt_isa_bf16_dot_vs_fma();
    int native_bf16 = DT_ISA_HAS(isa, dnnl_cpu_isa_avx512_core_amx) ||
                      (DT_ISA_HAS(isa, dnnl_cpu_isa_avx512_core_bf16) &&
                       c->bf16_dot_ratio >= DT_GEMM_BF16_DOT_MIN_RATIO);
    c->bf16 = onednn_bf16_ok && native_bf16 ? DT_GEMM_ONEDNN : DT_GEMM_WIDEN;

    /* DT_GEMM overrides the rule (benchmarks, tests), even a kernel that failed
     * its check: the description then says so */
    dt_gemm_kernel f = c->f32, b = c->bf16;
    int ff = 0, fb = 0;
    if (dt_gemm_parse(getenv("DT_GEMM"), &f, &b, &ff, &fb, &g_init_err) == DT_OK) {
        if (!g_engine && f == DT_GEMM_ONEDNN) f = DT_GEMM_OPENBLAS;
        if (!g_engine && b == DT_GEMM_ONEDNN) b = DT_GEMM_WIDEN;
        c->f32 = f;
        c->bf16 = b;
        c->forced = ff || fb;
    }
}

static void choose_once(void) { choose(); }

int dt_gemm_cpu_init(dt_error *err) {
    pthread_once(&g_once, choose_once);
    if (g_init_err.code && err) {
        err->code = g_init_err.code;
        memcpy(err->msg, g_init_err.msg, sizeof err->msg);
    }
    return g_init_err.code;
}

const dt_gemm_choice *dt_gemm_cpu_choice(void) {
    pthread_once(&g_once, choose_once);
    return &g_choice;
}

char *dt_gemm_cpu_describe(char *buf, size_t n) {
    const dt_gemm_choice *c = dt_gemm_cpu_choice();
    char bad[96] = "";
    if (c->bad_f32 || c->bad_bf16)
        snprintf(bad, sizeof bad, "; failed the self-check:%s%s%s",
                 c->bad_f32 & (1u << DT_GEMM_OPENBLAS) ? " openblas sgemm" : "",
                 c->bad_f32 & (1u << DT_GEMM_ONEDNN) ? " onednn sgemm" : "",
                 c->bad_bf16 & (1u << DT_GEMM_ONEDNN) ? " onednn bf16 matmul" : "");
    char dot[48] = "";
    if (c->bf16_dot_ratio > 0) snprintf(dot, sizeof dot, ", bf16 dot %.2fx fma", c->bf16_dot_ratio);
    snprintf(buf, n, "fp32 %s sgemm, bf16 %s%s%s (%s; openblas %s, onednn %s %s%s%s)",
             dt_gemm_kernel_name(c->f32), dt_gemm_kernel_name(c->bf16),
             c->bf16 == DT_GEMM_ONEDNN ? " matmul " : " to fp32",
             c->bf16 == DT_GEMM_ONEDNN ? c->onednn_bf16_impl : "",
             c->forced ? "forced by DT_GEMM" : "rule", c->openblas_core, c->onednn_version,
             c->onednn_isa, dot, bad);
    return buf;
}

/* ----------------------------------------------------------------------------
 * public entry points */

int dt_gemm_cpu_f32(dt_gemm_kernel k, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                    float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                    float beta, float *C, int64_t ldc) {
    pthread_once(&g_once, choose_once);
    return f32_on(k, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

int dt_gemm_cpu_bf16(dt_gemm_kernel k, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                     float alpha, const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                     float beta, void *C, dt_dtype ct, int64_t ldc) {
    pthread_once(&g_once, choose_once);
    return bf16_on(k, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ct, ldc, NULL, 0);
}
