/* kernels_llama.cu — the llama-family kernels of the CUDA device (dt_ops.h
 * "the llama family"): RMSNorm, RoPE, SwiGLU and causal grouped-query
 * attention (flash and materialized), plus the deterministic column sum the
 * RMSNorm weight gradient and the linear_t bias gradient use. linear_t itself
 * (cuBLAS) is in device_cuda.cu; both files share dt_cuda_internal.h.
 *
 * Per-element math comes from dt_devmath.h (dt_rms_out, dt_rms_dinp,
 * dt_swiglu, dt_swiglu_dgate, dt_swiglu_dup, dt_fast_expf), the functions the
 * CPU device runs. Every kernel is queued on the compute stream; a failed
 * launch is recorded through dt_cu_check_launch and reported by synchronize().
 *
 * Determinism: no float atomics anywhere. Column sums (RMSNorm dw, bias
 * grads) are per-block partial sums over fixed row chunks followed by one
 * thread per column adding the chunks in order; the attention dk / dv are
 * owned by one block per key tile that walks the group's query heads in head
 * order. Every order depends on the shapes only, so a rerun is bitwise equal.
 * docs/cuda.md "Llama-family kernels" has the tiling and the shared-memory
 * figures per kernel. */
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>

extern "C" {
#include "dt_devmath.h"
}
#include "dt_cuda_internal.h"

/* the host services of the device this file is part of (dt_cu_llama_fill_ops) */
static dt_cu_host g_host;
static cudaStream_t cs(void) { return g_host.compute_stream(); }
static unsigned ll_grid(int64_t n) { return (unsigned)((n + DT_CU_THREADS - 1) / DT_CU_THREADS); }
/* blocks of DT_CU_THREADS for one warp per row */
static unsigned ll_warp_rows_grid(int64_t rows) {
    return (unsigned)((rows * DT_CU_WARP + DT_CU_THREADS - 1) / DT_CU_THREADS);
}

/* ---------------------------------------------------------------------------
 * scratch: lazily grown device buffers (tracked as buffers), one per use, so
 * nothing is allocated after the first step. Growing frees the old buffer
 * (cu_free waits for queued work first). */

typedef enum {
    LL_SCRATCH_ATT_D,     /* attention backward: D_i = dout_i . out_i, [B, Hq, T] */
    LL_SCRATCH_ATT_LSE,   /* materialized attention forward: lse, [B, Hq, T] */
    LL_SCRATCH_COLPART,   /* column-sum partials, [chunks, C] */
    LL_SCRATCH_COUNT
} ll_scratch_slot;

static float *g_scr[LL_SCRATCH_COUNT];
static int64_t g_scr_cap[LL_SCRATCH_COUNT];
static const char *const g_scr_name[LL_SCRATCH_COUNT] = {
    "attention_gqa backward scratch", "attention_gqa_forward_probs scratch",
    "column-sum scratch"};

static float *ll_scratch(ll_scratch_slot s, int64_t n) {
    if (n > g_scr_cap[s]) {
        g_host.free(g_scr[s]);
        g_scr[s] = (float *)g_host.alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, (size_t)n * sizeof(float));
        g_scr_cap[s] = g_scr[s] ? n : 0;
        if (!g_scr[s]) dt_cuda_note_error(g_scr_name[s], "out of device memory");
    }
    return g_scr[s];
}

/* ---------------------------------------------------------------------------
 * deterministic column sums: dst[c] += sum_r val(r, c), r < rows, c < C.
 * Stage 1: block (column tile of one warp's width, row chunk) — lane lc owns
 * column c, row lane lr sums rows r0 + lr, r0 + lr + LL_RED_LANES, ... of
 * the chunk; the LL_RED_LANES partials are added in lane order in shared
 * memory and stored as part[chunk, c]. Stage 2: one thread per column adds
 * the chunks in order. Chunk rows depend on `rows` only. */

/* row lanes of a stage-1 block (DT_CU_WARP columns x LL_RED_LANES rows) */
#define LL_RED_LANES 8
#define LL_RED_THREADS (DT_CU_WARP * LL_RED_LANES)
/* rows of one chunk at least, and the most chunks (bounds the scratch to
 * LL_RED_CHUNKS_MAX x C floats and stage 2's serial sum) */
#define LL_RED_ROWS_MIN 256
#define LL_RED_CHUNKS_MAX 256

static int64_t ll_red_chunk_rows(int64_t rows) {
    int64_t per = (rows + LL_RED_CHUNKS_MAX - 1) / LL_RED_CHUNKS_MAX;
    return per < LL_RED_ROWS_MIN ? LL_RED_ROWS_MIN : per;
}

/* x[r, c] of a row-major [rows, C] matrix */
struct ll_rows_val {
    const float *x;
    int64_t C;
    __device__ float operator()(int64_t r, int64_t c) const { return x[r * C + c]; }
};

/* offset of RMSNorm group g: row g / nh, group g % nh of D elements */
static __device__ __forceinline__ int64_t ll_group_off(int64_t g, int64_t nh, int64_t D,
                                                       int64_t stride) {
    return (g / nh) * stride + (g % nh) * D;
}

/* d out / d w of RMSNorm, group g, element c: dout * x * rstd */
struct ll_rms_dw_val {
    const float *dout, *inp, *rstd;
    int64_t nh, D, stride;
    __device__ float operator()(int64_t g, int64_t c) const {
        int64_t o = ll_group_off(g, nh, D, stride) + c;
        return dout[o] * (inp[o] * rstd[g]);
    }
};

template <class V>
__global__ void __launch_bounds__(LL_RED_THREADS)
    k_colpart(float *part, V val, int64_t rows, int64_t C, int64_t chunk_rows, int64_t ctiles) {
    __shared__ float sh[LL_RED_LANES][DT_CU_WARP];   /* 1 KiB */
    const int lc = threadIdx.x % DT_CU_WARP, lr = threadIdx.x / DT_CU_WARP;
    const int64_t tile = (int64_t)blockIdx.x % ctiles, chunk = (int64_t)blockIdx.x / ctiles;
    const int64_t c = tile * DT_CU_WARP + lc;
    const int64_t r0 = chunk * chunk_rows;
    const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    float acc = 0.0f;
    if (c < C)
        for (int64_t r = r0 + lr; r < r1; r += LL_RED_LANES) acc += val(r, c);
    sh[lr][lc] = acc;
    __syncthreads();
    if (lr == 0 && c < C) {
        float s = 0.0f;
        for (int k = 0; k < LL_RED_LANES; k++) s += sh[k][lc];
        part[chunk * C + c] = s;
    }
}

/* dst[c] += sum over chunks k in order of part[k, c] */
__global__ void k_colpart_sum(float *dst, const float *part, int64_t chunks, int64_t C) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int64_t k = 0; k < chunks; k++) s += part[k * C + c];
    dst[c] += s;
}

template <class V>
static void ll_colsum(const char *kernel, float *dst, V val, int64_t rows, int64_t C) {
    if (rows <= 0 || C <= 0) return;
    const int64_t chunk_rows = ll_red_chunk_rows(rows);
    const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;   /* <= LL_RED_CHUNKS_MAX */
    const int64_t ctiles = (C + DT_CU_WARP - 1) / DT_CU_WARP;
    if (chunks * ctiles > INT_MAX) {
        dt_cuda_note_error(kernel, "too many columns for one grid");
        return;
    }
    float *part = ll_scratch(LL_SCRATCH_COLPART, chunks * C);   /* [chunks, C] */
    if (!part) return;
    k_colpart<<<(unsigned)(chunks * ctiles), LL_RED_THREADS, 0, cs()>>>(part, val, rows, C,
                                                                       chunk_rows, ctiles);
    dt_cu_check_launch(kernel);
    k_colpart_sum<<<ll_grid(C), DT_CU_THREADS, 0, cs()>>>(dst, part, chunks, C);
    dt_cu_check_launch("k_colpart_sum");
}

void dt_cu_colsum_det(float *db, const float *x, int64_t N, int64_t C) {
    ll_colsum("k_colpart (bias gradient)", db, ll_rows_val{x, C}, N, C);
}

/* ---------------------------------------------------------------------------
 * RMSNorm (Zhang & Sennrich 2019): one warp per group of D elements (G = N nh
 * groups; group g at row g / nh, offset (g % nh) D). */

/* out, inp: the groups of [N, stride] rows; rstd [G]; w [D] */
__global__ void k_rms_fwd(float *out, float *rstd, const float *inp, const float *w, int64_t G,
                          int64_t nh, int64_t D, int64_t stride, float eps) {
    const int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / DT_CU_WARP;
    const int lane = threadIdx.x % DT_CU_WARP;
    if (g >= G) return;   /* whole warps: blockDim is a multiple of the warp */
    const int64_t o = ll_group_off(g, nh, D, stride);
    const float *x = inp + o;
    float ss = 0.0f;
    for (int64_t c = lane; c < D; c += DT_CU_WARP) ss += x[c] * x[c];
    const float r = 1.0f / sqrtf(warp_sum(ss) / (float)D + eps);
    /* out may equal inp: each lane rewrites only the elements it read */
    for (int64_t c = lane; c < D; c += DT_CU_WARP) out[o + c] = dt_rms_out(x[c], r, w[c]);
    if (lane == 0) rstd[g] = r;
}

/* dinp (= or +=) = rstd (dout w - x rstd^2 s), s = mean(dout w x); dinp may
 * equal dout when not accumulating (each lane reads its elements before it
 * writes them) */
__global__ void k_rms_bwd(float *dinp, const float *dout, const float *inp, const float *w,
                          const float *rstd, int64_t G, int64_t nh, int64_t D, int64_t stride,
                          int accumulate) {
    const int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / DT_CU_WARP;
    const int lane = threadIdx.x % DT_CU_WARP;
    if (g >= G) return;
    const int64_t o = ll_group_off(g, nh, D, stride);
    const float *x = inp + o, *d = dout + o;
    const float r = rstd[g];
    float s = 0.0f;
    for (int64_t c = lane; c < D; c += DT_CU_WARP) s += d[c] * w[c] * x[c];
    s = warp_sum(s) / (float)D;
    for (int64_t c = lane; c < D; c += DT_CU_WARP) {
        float v = dt_rms_dinp(x[c], r, w[c], d[c], s);
        if (accumulate) dinp[o + c] += v;
        else dinp[o + c] = v;
    }
}

static void cu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w,
                               int64_t N, int64_t nh, int64_t D, int64_t stride, float eps) {
    const int64_t G = N * nh;
    if (G <= 0 || D <= 0) return;
    k_rms_fwd<<<ll_warp_rows_grid(G), DT_CU_THREADS, 0, cs()>>>(out, rstd, inp, w, G, nh, D,
                                                                stride, eps);
    dt_cu_check_launch("k_rms_fwd");
}

static void cu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                                const float *w, const float *rstd, int64_t N, int64_t nh,
                                int64_t D, int64_t stride, int accumulate_dinp) {
    const int64_t G = N * nh;
    if (G <= 0 || D <= 0) return;
    /* dw first: dinp may overwrite dout (dinp == dout, accumulate_dinp 0) */
    if (dw)
        ll_colsum("k_colpart (rmsnorm dw)", dw, ll_rms_dw_val{dout, inp, rstd, nh, D, stride}, G,
                  D);
    if (dinp) {
        k_rms_bwd<<<ll_warp_rows_grid(G), DT_CU_THREADS, 0, cs()>>>(dinp, dout, inp, w, rstd, G,
                                                                    nh, D, stride,
                                                                    accumulate_dinp);
        dt_cu_check_launch("k_rms_bwd");
    }
}

/* ---------------------------------------------------------------------------
 * RoPE (Su et al. 2021), rotate-half: one thread per (row, head, pair i < D/2);
 * inverse: the backward's rotation by -angle (sin negated). */
__global__ void k_rope(float *x, const float *cos, const float *sin, int inverse, int64_t N,
                       int64_t T, int64_t nh, int64_t D, int64_t stride) {
    const int64_t half = D / 2;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * nh * half) return;
    const int64_t i = idx % half, h = (idx / half) % nh, n = idx / (half * nh);
    const int64_t t = n % T;   /* row b*T + t is at position t */
    const float c = cos[t * half + i], s = inverse ? -sin[t * half + i] : sin[t * half + i];
    float *p = x + n * stride + h * D;
    const float x0 = p[i], x1 = p[i + half];
    p[i] = x0 * c - x1 * s;
    p[i + half] = x1 * c + x0 * s;
}

static void rope(int inverse, float *x, const float *cos, const float *sin, int64_t B, int64_t T,
                 int64_t nh, int64_t D, int64_t stride) {
    const int64_t n = B * T * nh * (D / 2);
    if (n <= 0) return;
    k_rope<<<ll_grid(n), DT_CU_THREADS, 0, cs()>>>(x, cos, sin, inverse, B * T, T, nh, D, stride);
    dt_cu_check_launch("k_rope");
}
static void cu_rope_forward(float *x, const float *cos, const float *sin, int64_t B, int64_t T,
                            int64_t nh, int64_t D, int64_t stride) {
    rope(0, x, cos, sin, B, T, nh, D, stride);
}
static void cu_rope_backward(float *dx, const float *cos, const float *sin, int64_t B, int64_t T,
                             int64_t nh, int64_t D, int64_t stride) {
    rope(1, dx, cos, sin, B, T, nh, D, stride);
}

/* ---------------------------------------------------------------------------
 * SwiGLU (Shazeer 2020) on the packed gate | up rows gu [N, 2F]: one thread
 * per (n, f) */
__global__ void k_swiglu_fwd(float *out, const float *gu, int64_t N, int64_t F) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * F) return;
    const int64_t n = idx / F, f = idx % F;
    const float *row = gu + n * 2 * F;
    out[idx] = dt_swiglu(row[f], row[F + f]);
}
__global__ void k_swiglu_bwd(float *dgu, const float *dout, const float *gu, int64_t N, int64_t F) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * F) return;
    const int64_t n = idx / F, f = idx % F;
    const float *row = gu + n * 2 * F;
    const float g = row[f], u = row[F + f], d = dout[idx];
    float *drow = dgu + n * 2 * F;
    drow[f] = dt_swiglu_dgate(g, u, d);
    drow[F + f] = dt_swiglu_dup(g, d);
}

static void cu_swiglu_forward(float *out, const float *gu, int64_t N, int64_t F) {
    if (N * F <= 0) return;
    k_swiglu_fwd<<<ll_grid(N * F), DT_CU_THREADS, 0, cs()>>>(out, gu, N, F);
    dt_cu_check_launch("k_swiglu_fwd");
}
static void cu_swiglu_backward(float *dgu, const float *dout, const float *gu, int64_t N,
                               int64_t F) {
    if (N * F <= 0) return;
    k_swiglu_bwd<<<ll_grid(N * F), DT_CU_THREADS, 0, cs()>>>(dgu, dout, gu, N, F);
    dt_cu_check_launch("k_swiglu_bwd");
}

/* ---------------------------------------------------------------------------
 * Causal grouped-query attention (Ainslie et al. 2023, GQA) on separate q, k,
 * v with row strides (dt_ops.h): q [B, T, sq] with heads [Hq, D] inside,
 * k [B, T, sk] and v [B, T, sv] with heads [Hkv, D] inside; query head h reads
 * kv head h / (Hq / Hkv). out [B, T, Hq D], lse [B, Hq, T]; dq, dk, dv use
 * the strides of q, k, v (one packed buffer is one case).
 *
 * Tiling after FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention
 * with Better Parallelism and Work Partitioning", Algorithms 1 and 2): a block
 * owns a tile of rows of one (batch, head) — query rows in the forward and
 * dq kernels, key rows in the dk / dv kernel — kept in shared memory, and
 * streams tiles of LL_FA_BC = 32 keys (queries for dk / dv) through one
 * shared buffer, lane j of every warp taking row j of the streamed tile.
 * Scores: lane j computes the full dot product of its streamed row with each
 * of the warp's own rows (own rows are read as shared-memory broadcasts, the
 * streamed rows with an odd row stride, so the 32 lanes hit 32 banks).
 * Accumulation (p V, ds K, ...): lane d' holds elements d = d' + 32 k of the
 * warp's accumulators in registers, and the tile's 32 weights come from their
 * lanes by shuffle, in lane order. K and V (Q and dout for dk / dv) pass
 * through the same buffer one after the other, so a block stays within the
 * default 48 KiB of shared memory for every head_dim up to 256 (no opt-in).
 *
 * The backward is FlashAttention-2's without atomics: D_i = dout_i . out_i
 * first, then dq by query tiles (every key tile up to the diagonal), and dk,
 * dv by key tiles (every query tile from the diagonal, for the group's query
 * heads in head order), each gradient row owned by one warp of one block. */

/* warps per attention block */
#define LL_FA_WARPS 4
#define LL_FA_THREADS (LL_FA_WARPS * DT_CU_WARP)
/* rows of a streamed tile: one per lane */
#define LL_FA_BC DT_CU_WARP
/* the largest head_dim; elements of a head one lane holds: d = lane + 32 k */
#define LL_FA_DMAX 256
#define LL_FA_KMAX (LL_FA_DMAX / DT_CU_WARP)
/* most rows per warp (register accumulators of LL_FA_KMAX floats each): the
 * forward and dq keep one accumulator per row, dk / dv two */
#define LL_FA_FWD_RPW 8
#define LL_FA_DQ_RPW 8
#define LL_FA_DKV_RPW 4
/* shared memory per block: the default limit without cudaFuncSetAttribute */
#define LL_FA_SMEM (48 * 1024)

/* the inputs of one call, by value into every attention kernel */
typedef struct {
    const float *q, *k, *v;   /* [B, T, sq], [B, T, sk], [B, T, sv] */
    int64_t sq, sk, sv;       /* row strides (elements between token rows) */
    int64_t T, Hq, Hkv, D;
} ll_gqa;

/* kv head of query head h */
static __device__ __forceinline__ int64_t ll_kv_head(const ll_gqa &a, int64_t h) {
    return h / (a.Hq / a.Hkv);
}

/* Load rows first .. first + nrows - 1 (zeros from row T on) of a strided
 * source: element d of row r at src[r * src_ld + d], d < D, into
 * dst[(r - first) * dst_ld + d]. All threads of the block take part. A tile
 * holds at most LL_FA_BC x LL_FA_DMAX elements, so its index is 32-bit
 * (cheaper division than 64-bit). */
static __device__ __forceinline__ void ll_load_rows(float *dst, int64_t dst_ld, const float *src,
                                                    int64_t src_ld, int64_t first, int64_t nrows,
                                                    int64_t T, int64_t D) {
    const int n = (int)(nrows * D), Di = (int)D;
    for (int e = threadIdx.x; e < n; e += blockDim.x) {
        const int r = e / Di, d = e % Di;
        const int64_t row = first + r;
        dst[r * dst_ld + d] = row < T ? src[row * src_ld + d] : 0.0f;
    }
}

/* s[r] = own[r] . mine for the warp's first `rows` own rows (own: [rows][D]
 * in shared memory, the same address for every lane: broadcast) and this
 * lane's streamed row `mine` (shared memory, odd stride across lanes) */
template <int RPW>
static __device__ __forceinline__ void ll_dots(float (&s)[RPW], const float *own, int64_t D,
                                               const float *mine, int rows) {
#pragma unroll
    for (int r = 0; r < RPW; r++) s[r] = 0.0f;
    for (int64_t d = 0; d < D; d++) {
        const float m = mine[d];
#pragma unroll
        for (int r = 0; r < RPW; r++)
            if (r < rows) s[r] += own[r * D + d] * m;
    }
}

/* acc[r][k] += sum over the tile's rows jj in lane order of w[r] (held by lane
 * jj) * tile[jj][lane + 32 k], for the warp's first `rows` rows */
template <int RPW>
static __device__ __forceinline__ void ll_accumulate(float (&acc)[RPW][LL_FA_KMAX],
                                                     const float (&w)[RPW], const float *tile,
                                                     int64_t ld, int64_t D, int rows) {
    const int lane = threadIdx.x % DT_CU_WARP;
    for (int jj = 0; jj < LL_FA_BC; jj++) {
        float t[LL_FA_KMAX];
#pragma unroll
        for (int k = 0; k < LL_FA_KMAX; k++) {
            const int64_t d = lane + (int64_t)k * DT_CU_WARP;
            t[k] = d < D ? tile[jj * ld + d] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < RPW; r++) {
            if (r >= rows) continue;   /* uniform over the block */
            const float wj = __shfl_sync(DT_CU_FULL_MASK, w[r], jj);
#pragma unroll
            for (int k = 0; k < LL_FA_KMAX; k++)
                if (k * DT_CU_WARP < D) acc[r][k] += wj * t[k];
        }
    }
}

/* Forward, one block per (query tile, b, h): out [B, T, Hq D], lse [B, Hq, T]
 * (max + log of the denominator, as dt_op_attention_forward_flash). scores
 * non-NULL (the materialized forward): the scaled scores q.k / sqrt(D) are
 * also stored there, [B, Hq, T, T] for keys j <= i. Shared memory:
 * q [rows][D], the K / V tile [LL_FA_BC][D | 1]. */
__global__ void __launch_bounds__(LL_FA_THREADS)
    k_gqa_fwd(float *out, float *lse, float *scores, ll_gqa a, int rpw, int64_t tiles,
              int64_t BH) {
    extern __shared__ float ll_sh[];
    const int warp = threadIdx.x / DT_CU_WARP, lane = threadIdx.x % DT_CU_WARP;
    const int64_t T = a.T, D = a.D, ld = D | 1;
    const int64_t rows = (int64_t)LL_FA_WARPS * rpw;
    /* the longest query tiles (latest rows, most keys) are scheduled first */
    const int64_t tile = tiles - 1 - (int64_t)blockIdx.x / BH, bh = (int64_t)blockIdx.x % BH;
    const int64_t b = bh / a.Hq, h = bh % a.Hq, kvh = ll_kv_head(a, h);
    const float *qh = a.q + b * T * a.sq + h * D;     /* query i at + i sq, [D] */
    const float *kh = a.k + b * T * a.sk + kvh * D;   /* key j at + j sk, [D] */
    const float *vh = a.v + b * T * a.sv + kvh * D;   /* value j at + j sv, [D] */
    float *Qs = ll_sh;              /* [rows][D] */
    float *KV = ll_sh + rows * D;   /* [LL_FA_BC][ld] */
    const int64_t i0 = tile * rows, iw = i0 + (int64_t)warp * rpw;   /* first row of the warp */
    const int64_t ilast = (i0 + rows < T ? i0 + rows : T) - 1;
    const float scale = 1.0f / sqrtf((float)D);
    ll_load_rows(Qs, D, qh, a.sq, i0, rows, T, D);
    float acc[LL_FA_FWD_RPW][LL_FA_KMAX], m[LL_FA_FWD_RPW], l[LL_FA_FWD_RPW];
#pragma unroll
    for (int r = 0; r < LL_FA_FWD_RPW; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int k = 0; k < LL_FA_KMAX; k++) acc[r][k] = 0.0f;
    }
    for (int64_t j0 = 0; j0 <= ilast; j0 += LL_FA_BC) {
        __syncthreads();   /* q loaded; the previous V tile's readers are done */
        ll_load_rows(KV, ld, kh, a.sk, j0, LL_FA_BC, T, D);
        __syncthreads();
        float s[LL_FA_FWD_RPW], p[LL_FA_FWD_RPW];
        ll_dots<LL_FA_FWD_RPW>(s, Qs + (iw - i0) * D, D, KV + lane * ld, rpw);
        const int64_t j = j0 + lane;   /* this lane's key */
#pragma unroll
        for (int r = 0; r < LL_FA_FWD_RPW; r++) {
            const int64_t i = iw + r;
            p[r] = 0.0f;
            if (r >= rpw || i >= T || j0 > i) continue;   /* uniform over the warp */
            const bool on = j <= i;                      /* causal */
            const float sc = s[r] * scale;
            if (scores && on) scores[(bh * T + i) * T + j] = sc;
            /* online softmax over the tile (FlashAttention-2 Algorithm 1) */
            const float mnew = fmaxf(m[r], warp_max(on ? sc : -INFINITY));
            const float corr = dt_fast_expf(m[r] - mnew);   /* 0 on the first tile */
            p[r] = on ? dt_fast_expf(sc - mnew) : 0.0f;
            l[r] = l[r] * corr + warp_sum(p[r]);
#pragma unroll
            for (int k = 0; k < LL_FA_KMAX; k++) acc[r][k] *= corr;
            m[r] = mnew;
        }
        __syncthreads();   /* K tile consumed */
        ll_load_rows(KV, ld, vh, a.sv, j0, LL_FA_BC, T, D);
        __syncthreads();
        ll_accumulate<LL_FA_FWD_RPW>(acc, p, KV, ld, D, rpw);
    }
#pragma unroll
    for (int r = 0; r < LL_FA_FWD_RPW; r++) {
        const int64_t i = iw + r;
        if (r >= rpw || i >= T) continue;
        const float inv = 1.0f / l[r];
        float *o = out + (b * T + i) * a.Hq * D + h * D;   /* [D] */
#pragma unroll
        for (int k = 0; k < LL_FA_KMAX; k++) {
            const int64_t d = lane + (int64_t)k * DT_CU_WARP;
            if (d < D) o[d] = acc[r][k] * inv;
        }
        if (lane == 0) lse[bh * T + i] = m[r] + logf(l[r]);
    }
}

/* The materialized forward's probabilities from the stored scores:
 * probs[bh, i, j] = exp(score - lse_i) for j <= i, 0 above the diagonal
 * (every element written). probs [B Hq T, T], lse [B Hq T]; n = B Hq T T. */
__global__ void k_gqa_probs(float *probs, const float *lse, int64_t T, int64_t n) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const int64_t row = idx / T, j = idx % T, i = row % T;
    probs[idx] = j <= i ? dt_fast_expf(probs[idx] - lse[row]) : 0.0f;
}

/* D_i, one warp per (b, h, i) row, into Dv [B, Hq, T]: dout_i . out_i (flash),
 * or sum_j p_ij (dout_i . v_j) (materialized: out NULL, probs [B, Hq, T, T]) */
__global__ void k_gqa_bwd_D(float *Dv, const float *dout, const float *out, const float *probs,
                            ll_gqa a, int64_t B) {
    const int64_t idx = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / DT_CU_WARP;
    const int lane = threadIdx.x % DT_CU_WARP;
    const int64_t T = a.T, D = a.D;
    if (idx >= B * a.Hq * T) return;   /* whole warps */
    const int64_t i = idx % T, bh = idx / T, b = bh / a.Hq, h = bh % a.Hq;
    const float *dO = dout + (b * T + i) * a.Hq * D + h * D;   /* [D] */
    float acc = 0.0f;
    if (out) {
        const float *o = out + (b * T + i) * a.Hq * D + h * D;   /* [D] */
        for (int64_t d = lane; d < D; d += DT_CU_WARP) acc += dO[d] * o[d];
    } else {
        const float *vh = a.v + b * T * a.sv + ll_kv_head(a, h) * D;   /* value j at + j sv */
        const float *p = probs + idx * T;                               /* [T] */
        for (int64_t d = lane; d < D; d += DT_CU_WARP) {
            float pv = 0.0f;   /* sum_j p_ij v_j[d] */
            for (int64_t j = 0; j <= i; j++) pv += p[j] * vh[j * a.sv + d];
            acc += dO[d] * pv;
        }
    }
    acc = warp_sum(acc);
    if (lane == 0) Dv[idx] = acc;
}

/* dq, one block per (query tile, b, h): dq_i = sum_{j<=i} ds_ij k_j with
 * ds_ij = p_ij (dout_i . v_j - D_i) / sqrt(D), p from lse (flash) or probs.
 * Shared memory: q and dout [rows][D] each, the V / K tile [LL_FA_BC][D | 1]. */
__global__ void __launch_bounds__(LL_FA_THREADS)
    k_gqa_bwd_dq(float *dq, const float *dout, const float *lse, const float *probs,
                 const float *Dv, ll_gqa a, int rpw, int64_t tiles, int64_t BH) {
    extern __shared__ float ll_sh[];
    const int warp = threadIdx.x / DT_CU_WARP, lane = threadIdx.x % DT_CU_WARP;
    const int64_t T = a.T, D = a.D, ld = D | 1, HD = a.Hq * D;
    const int64_t rows = (int64_t)LL_FA_WARPS * rpw;
    const int64_t tile = tiles - 1 - (int64_t)blockIdx.x / BH, bh = (int64_t)blockIdx.x % BH;
    const int64_t b = bh / a.Hq, h = bh % a.Hq, kvh = ll_kv_head(a, h);
    const float *kh = a.k + b * T * a.sk + kvh * D;   /* key j at + j sk, [D] */
    const float *vh = a.v + b * T * a.sv + kvh * D;   /* value j at + j sv, [D] */
    float *Qs = ll_sh;           /* [rows][D] */
    float *Os = Qs + rows * D;   /* [rows][D] dout */
    float *KV = Os + rows * D;   /* [LL_FA_BC][ld] */
    const int64_t i0 = tile * rows, iw = i0 + (int64_t)warp * rpw;
    const int64_t ilast = (i0 + rows < T ? i0 + rows : T) - 1;
    const float scale = 1.0f / sqrtf((float)D);
    ll_load_rows(Qs, D, a.q + b * T * a.sq + h * D, a.sq, i0, rows, T, D);
    ll_load_rows(Os, D, dout + b * T * HD + h * D, HD, i0, rows, T, D);
    float acc[LL_FA_DQ_RPW][LL_FA_KMAX], li[LL_FA_DQ_RPW], Di[LL_FA_DQ_RPW];
#pragma unroll
    for (int r = 0; r < LL_FA_DQ_RPW; r++) {
        const int64_t i = iw + r;
        const bool ok = r < rpw && i < T;
        li[r] = ok && lse ? lse[bh * T + i] : 0.0f;
        Di[r] = ok ? Dv[bh * T + i] : 0.0f;
#pragma unroll
        for (int k = 0; k < LL_FA_KMAX; k++) acc[r][k] = 0.0f;
    }
    for (int64_t j0 = 0; j0 <= ilast; j0 += LL_FA_BC) {
        float dp[LL_FA_DQ_RPW], s[LL_FA_DQ_RPW], ds[LL_FA_DQ_RPW];
        __syncthreads();   /* q, dout loaded; the previous K tile's readers are done */
        ll_load_rows(KV, ld, vh, a.sv, j0, LL_FA_BC, T, D);
        __syncthreads();
        ll_dots<LL_FA_DQ_RPW>(dp, Os + (iw - i0) * D, D, KV + lane * ld, rpw);   /* dout_i . v_j */
        __syncthreads();   /* V tile consumed */
        ll_load_rows(KV, ld, kh, a.sk, j0, LL_FA_BC, T, D);
        __syncthreads();
        if (!probs) ll_dots<LL_FA_DQ_RPW>(s, Qs + (iw - i0) * D, D, KV + lane * ld, rpw);
        const int64_t j = j0 + lane;
#pragma unroll
        for (int r = 0; r < LL_FA_DQ_RPW; r++) {
            const int64_t i = iw + r;
            ds[r] = 0.0f;
            if (r >= rpw || i >= T || j > i) continue;
            const float p = probs ? probs[(bh * T + i) * T + j] : dt_fast_expf(s[r] * scale - li[r]);
            ds[r] = p * (dp[r] - Di[r]) * scale;
        }
        ll_accumulate<LL_FA_DQ_RPW>(acc, ds, KV, ld, D, rpw);   /* += ds_ij k_j */
    }
#pragma unroll
    for (int r = 0; r < LL_FA_DQ_RPW; r++) {
        const int64_t i = iw + r;
        if (r >= rpw || i >= T) continue;
        float *dqi = dq + (b * T + i) * a.sq + h * D;   /* [D] */
#pragma unroll
        for (int k = 0; k < LL_FA_KMAX; k++) {
            const int64_t d = lane + (int64_t)k * DT_CU_WARP;
            if (d < D) dqi[d] = acc[r][k];
        }
    }
}

/* dk, dv, one block per (key tile, b, kv head): for the group's query heads
 * in head order, every query tile from the diagonal on:
 *   dv_j += sum_{i>=j} p_ij dout_i;  dk_j += sum_{i>=j} ds_ij q_i.
 * One warp owns each key row's accumulators: no atomics, a fixed order.
 * Shared memory: k and v [rows][D] each, the Q / dout tile [LL_FA_BC][D | 1]. */
__global__ void __launch_bounds__(LL_FA_THREADS)
    k_gqa_bwd_dkv(float *dk, float *dv, const float *dout, const float *lse, const float *probs,
                  const float *Dv, ll_gqa a, int rpw, int64_t tiles, int64_t BKV) {
    extern __shared__ float ll_sh[];
    const int warp = threadIdx.x / DT_CU_WARP, lane = threadIdx.x % DT_CU_WARP;
    const int64_t T = a.T, D = a.D, ld = D | 1, HD = a.Hq * D;
    const int64_t rows = (int64_t)LL_FA_WARPS * rpw;
    /* the earliest key tiles (most queries after them) are scheduled first */
    const int64_t tile = (int64_t)blockIdx.x / BKV, bkv = (int64_t)blockIdx.x % BKV;
    const int64_t b = bkv / a.Hkv, kvh = bkv % a.Hkv, group = a.Hq / a.Hkv;
    float *Ks = ll_sh;            /* [rows][D] */
    float *Vs = Ks + rows * D;    /* [rows][D] */
    float *QO = Vs + rows * D;    /* [LL_FA_BC][ld]: q, then dout, then q again */
    const int64_t j0 = tile * rows, jw = j0 + (int64_t)warp * rpw;   /* first key of the warp */
    const float scale = 1.0f / sqrtf((float)D);
    ll_load_rows(Ks, D, a.k + b * T * a.sk + kvh * D, a.sk, j0, rows, T, D);
    ll_load_rows(Vs, D, a.v + b * T * a.sv + kvh * D, a.sv, j0, rows, T, D);
    float dka[LL_FA_DKV_RPW][LL_FA_KMAX], dva[LL_FA_DKV_RPW][LL_FA_KMAX];
#pragma unroll
    for (int r = 0; r < LL_FA_DKV_RPW; r++)
#pragma unroll
        for (int k = 0; k < LL_FA_KMAX; k++) dka[r][k] = dva[r][k] = 0.0f;
    for (int64_t g = 0; g < group; g++) {   /* the group's query heads, in head order */
        const int64_t hq = kvh * group + g, bhq = b * a.Hq + hq;
        const float *qh = a.q + b * T * a.sq + hq * D;   /* query i at + i sq, [D] */
        const float *oh = dout + b * T * HD + hq * D;    /* dout i at + i HD, [D] */
        for (int64_t i0 = (j0 / LL_FA_BC) * LL_FA_BC; i0 < T; i0 += LL_FA_BC) {
            const int64_t i = i0 + lane;   /* this lane's query */
            const bool iv = i < T;
            const float li = iv && lse ? lse[bhq * T + i] : 0.0f;
            const float Di = iv ? Dv[bhq * T + i] : 0.0f;
            float s[LL_FA_DKV_RPW], p[LL_FA_DKV_RPW], dp[LL_FA_DKV_RPW], ds[LL_FA_DKV_RPW];
            __syncthreads();   /* k, v loaded; the previous tile's readers are done */
            ll_load_rows(QO, ld, qh, a.sq, i0, LL_FA_BC, T, D);
            __syncthreads();
            if (!probs) ll_dots<LL_FA_DKV_RPW>(s, Ks + (jw - j0) * D, D, QO + lane * ld, rpw);
#pragma unroll
            for (int r = 0; r < LL_FA_DKV_RPW; r++) {
                const int64_t j = jw + r;
                p[r] = 0.0f;
                if (r >= rpw || j >= T || !iv || i < j) continue;
                p[r] = probs ? probs[(bhq * T + i) * T + j] : dt_fast_expf(s[r] * scale - li);
            }
            __syncthreads();   /* Q tile consumed */
            ll_load_rows(QO, ld, oh, HD, i0, LL_FA_BC, T, D);
            __syncthreads();
            ll_dots<LL_FA_DKV_RPW>(dp, Vs + (jw - j0) * D, D, QO + lane * ld, rpw);   /* dout_i . v_j */
#pragma unroll
            for (int r = 0; r < LL_FA_DKV_RPW; r++) ds[r] = p[r] * (dp[r] - Di) * scale;
            ll_accumulate<LL_FA_DKV_RPW>(dva, p, QO, ld, D, rpw);   /* += p_ij dout_i */
            __syncthreads();   /* dout tile consumed */
            ll_load_rows(QO, ld, qh, a.sq, i0, LL_FA_BC, T, D);
            __syncthreads();
            ll_accumulate<LL_FA_DKV_RPW>(dka, ds, QO, ld, D, rpw);   /* += ds_ij q_i */
        }
    }
#pragma unroll
    for (int r = 0; r < LL_FA_DKV_RPW; r++) {
        const int64_t j = jw + r;
        if (r >= rpw || j >= T) continue;
        float *dkj = dk + (b * T + j) * a.sk + kvh * D;   /* [D] */
        float *dvj = dv + (b * T + j) * a.sv + kvh * D;   /* [D] */
#pragma unroll
        for (int k = 0; k < LL_FA_KMAX; k++) {
            const int64_t d = lane + (int64_t)k * DT_CU_WARP;
            if (d < D) {
                dkj[d] = dka[r][k];
                dvj[d] = dva[r][k];
            }
        }
    }
}

/* Launch shape of an attention kernel: rows per warp as many as fit in
 * LL_FA_SMEM beside the streamed tile (at most rpw_max), `vecs` fp32 vectors
 * of D per own row. */
typedef struct {
    int rpw;          /* rows per warp */
    int64_t tiles;    /* row tiles per (batch, head) */
    unsigned grid;    /* tiles x heads blocks */
    size_t smem;      /* dynamic shared memory, bytes */
} ll_fa_shape;

static bool ll_fa_shape_for(const char *kernel, int64_t T, int64_t D, int vecs, int rpw_max,
                            int64_t heads, ll_fa_shape *sh) {
    const size_t tile = (size_t)LL_FA_BC * (size_t)(D | 1) * sizeof(float);   /* streamed */
    const size_t per_row = (size_t)vecs * (size_t)D * sizeof(float);           /* own rows */
    int64_t rpw = tile < LL_FA_SMEM ? (int64_t)((LL_FA_SMEM - tile) / (per_row * LL_FA_WARPS)) : 0;
    if (rpw > rpw_max) rpw = rpw_max;
    char d[128];
    if (rpw < 1) {
        snprintf(d, sizeof d, "head_dim %lld does not fit %d bytes of shared memory per block",
                 (long long)D, LL_FA_SMEM);
        dt_cuda_note_error(kernel, d);
        return false;
    }
    const int64_t rows = LL_FA_WARPS * rpw;
    sh->rpw = (int)rpw;
    sh->tiles = (T + rows - 1) / rows;
    sh->smem = tile + (size_t)rows * per_row;
    if (sh->tiles * heads > INT_MAX) {
        snprintf(d, sizeof d, "%lld blocks exceed one grid", (long long)(sh->tiles * heads));
        dt_cuda_note_error(kernel, d);
        return false;
    }
    sh->grid = (unsigned)(sh->tiles * heads);
    return true;
}

/* The shape contract of the attention_gqa ops; false (error noted, or nothing
 * to do) otherwise. */
static bool ll_gqa_args(const char *op, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                        int64_t D) {
    char d[128];
    if (Hq < 1 || Hkv < 1 || Hq % Hkv) {
        snprintf(d, sizeof d, "Hq %lld is not a positive multiple of Hkv %lld", (long long)Hq,
                 (long long)Hkv);
        dt_cuda_note_error(op, d);
        return false;
    }
    if (D < 1 || D > LL_FA_DMAX) {
        snprintf(d, sizeof d, "head_dim %lld is outside 1..%d", (long long)D, LL_FA_DMAX);
        dt_cuda_note_error(op, d);
        return false;
    }
    return B > 0 && T > 0;
}

static ll_gqa ll_gqa_of(const float *q, int64_t sq, const float *k, int64_t sk, const float *v,
                        int64_t sv, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    ll_gqa a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.sq = sq;
    a.sk = sk;
    a.sv = sv;
    a.T = T;
    a.Hq = Hq;
    a.Hkv = Hkv;
    a.D = D;
    return a;
}

/* forward; scores non-NULL: also the scaled scores (materialized forward) */
static void ll_gqa_forward(float *out, float *lse, float *scores, const ll_gqa &a, int64_t B) {
    ll_fa_shape sh;
    if (!ll_fa_shape_for("k_gqa_fwd", a.T, a.D, 1, LL_FA_FWD_RPW, B * a.Hq, &sh)) return;
    k_gqa_fwd<<<sh.grid, LL_FA_THREADS, sh.smem, cs()>>>(out, lse, scores, a, sh.rpw, sh.tiles,
                                                         B * a.Hq);
    dt_cu_check_launch("k_gqa_fwd");
}

static void cu_gqa_fwd_flash(float *out, float *lse, const float *q, int64_t sq, const float *k,
                             int64_t sk, const float *v, int64_t sv, int64_t B, int64_t T,
                             int64_t Hq, int64_t Hkv, int64_t D) {
    if (!ll_gqa_args("attention_gqa_forward_flash", B, T, Hq, Hkv, D)) return;
    ll_gqa_forward(out, lse, NULL, ll_gqa_of(q, sq, k, sk, v, sv, T, Hq, Hkv, D), B);
}

static void cu_gqa_fwd_probs(float *out, float *probs, const float *q, int64_t sq, const float *k,
                             int64_t sk, const float *v, int64_t sv, int64_t B, int64_t T,
                             int64_t Hq, int64_t Hkv, int64_t D) {
    if (!ll_gqa_args("attention_gqa_forward_probs", B, T, Hq, Hkv, D)) return;
    float *lse = ll_scratch(LL_SCRATCH_ATT_LSE, B * Hq * T);   /* [B, Hq, T] */
    if (!lse) return;
    ll_gqa_forward(out, lse, probs, ll_gqa_of(q, sq, k, sk, v, sv, T, Hq, Hkv, D), B);
    const int64_t n = B * Hq * T * T;
    k_gqa_probs<<<ll_grid(n), DT_CU_THREADS, 0, cs()>>>(probs, lse, T, n);
    dt_cu_check_launch("k_gqa_probs");
}

/* backward: out and lse (flash) or probs (materialized) */
static void ll_gqa_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                            const float *lse, const float *probs, const ll_gqa &a, int64_t B) {
    ll_fa_shape sq, skv;
    if (!ll_fa_shape_for("k_gqa_bwd_dq", a.T, a.D, 2, LL_FA_DQ_RPW, B * a.Hq, &sq) ||
        !ll_fa_shape_for("k_gqa_bwd_dkv", a.T, a.D, 2, LL_FA_DKV_RPW, B * a.Hkv, &skv))
        return;
    const int64_t rows = B * a.Hq * a.T;
    float *Dv = ll_scratch(LL_SCRATCH_ATT_D, rows);   /* [B, Hq, T] */
    if (!Dv) return;
    k_gqa_bwd_D<<<ll_warp_rows_grid(rows), DT_CU_THREADS, 0, cs()>>>(Dv, dout, out, probs, a, B);
    dt_cu_check_launch("k_gqa_bwd_D");
    k_gqa_bwd_dq<<<sq.grid, LL_FA_THREADS, sq.smem, cs()>>>(dq, dout, lse, probs, Dv, a, sq.rpw,
                                                            sq.tiles, B * a.Hq);
    dt_cu_check_launch("k_gqa_bwd_dq");
    k_gqa_bwd_dkv<<<skv.grid, LL_FA_THREADS, skv.smem, cs()>>>(dk, dv, dout, lse, probs, Dv, a,
                                                               skv.rpw, skv.tiles, B * a.Hkv);
    dt_cu_check_launch("k_gqa_bwd_dkv");
}

static void cu_gqa_bwd_flash(float *dq, float *dk, float *dv, const float *dout, const float *q,
                             int64_t sq, const float *k, int64_t sk, const float *v, int64_t sv,
                             const float *out, const float *lse, int64_t B, int64_t T, int64_t Hq,
                             int64_t Hkv, int64_t D) {
    if (!ll_gqa_args("attention_gqa_backward_flash", B, T, Hq, Hkv, D)) return;
    ll_gqa_backward(dq, dk, dv, dout, out, lse, NULL,
                    ll_gqa_of(q, sq, k, sk, v, sv, T, Hq, Hkv, D), B);
}

static void cu_gqa_bwd_probs(float *dq, float *dk, float *dv, const float *dout, const float *q,
                             int64_t sq, const float *k, int64_t sk, const float *v, int64_t sv,
                             const float *probs, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                             int64_t D) {
    if (!ll_gqa_args("attention_gqa_backward_probs", B, T, Hq, Hkv, D)) return;
    ll_gqa_backward(dq, dk, dv, dout, NULL, NULL, probs,
                    ll_gqa_of(q, sq, k, sk, v, sv, T, Hq, Hkv, D), B);
}

/* ---------------------------------------------------------------------------
 * the table entries */

void dt_cu_llama_fill_ops(dt_device_ops *o, const dt_cu_host *host) {
    g_host = *host;
    o->rmsnorm_forward = cu_rmsnorm_forward;
    o->rmsnorm_backward = cu_rmsnorm_backward;
    o->rope_forward = cu_rope_forward;
    o->rope_backward = cu_rope_backward;
    o->swiglu_forward = cu_swiglu_forward;
    o->swiglu_backward = cu_swiglu_backward;
    o->attention_gqa_forward_flash = cu_gqa_fwd_flash;
    o->attention_gqa_backward_flash = cu_gqa_bwd_flash;
    o->attention_gqa_forward_probs = cu_gqa_fwd_probs;
    o->attention_gqa_backward_probs = cu_gqa_bwd_probs;
}
