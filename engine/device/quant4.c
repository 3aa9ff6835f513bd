/* quant4.c — bitsandbytes' NF4 / FP4 blockwise quantisation and the double
 * quantisation of the absmax, as its CPU back-end computes them (dt_quant4.h). Every
 * rounding step follows the source named beside it, so the bytes and values are the
 * same as bitsandbytes' (tests/kernels/test_quant4.c, goldens from
 * scripts/gen_quant_goldens.py: bitsandbytes 0.50.2, torch 2.15 CPU). */
#include "dt_quant4.h"

#include <math.h>
#include <string.h>

/* ---- code books ---- */

/* NF4: quantiles of N(0, 1) normalised to [-1, 1] (Dettmers et al. 2023, "QLoRA", §3;
 * bitsandbytes functional.py get_4bit_type("nf4"), create_normal_map(offset=0.9677083)). */
static const float k_nf4[DT_QUANT_4BIT_CODES] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
    0.7229568362236023f, 1.0f};
/* FP4 (1 sign, 2 exponent, 1 mantissa bits, exponent bias 2) in bit-pattern order, before
 * get_4bit_type divides them by their largest magnitude. Code 8 (sign bit, zero) is +0:
 * the Python list writes it as the integer -0, which is 0. */
static const float k_fp4_raw[DT_QUANT_4BIT_CODES] = {0.0f, 0.0625f, 8.0f, 12.0f, 4.0f, 6.0f, 2.0f, 3.0f,
                                                     0.0f, -0.0625f, -8.0f, -12.0f, -4.0f, -6.0f, -2.0f, -3.0f};
#define FP4_MAX 12.0f

void dt_quant4_code(dt_storage fmt, float code[DT_QUANT_4BIT_CODES]) {
    for (int i = 0; i < DT_QUANT_4BIT_CODES; i++) code[i] = fmt == DT_STORAGE_FP4 ? k_fp4_raw[i] / FP4_MAX : k_nf4[i];
}

/* create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for exponent i in
 * 0..6, the midpoints of torch.linspace(0.1, 1, 2^i + 1) (float32: the step rounded to
 * float once, each point start + step * k rounded once; the second half from the end)
 * times 10^(i - 6) in float32, with both signs; then 0 and 1, sorted. */
#define DYN_EXPONENTS 7
#define DYN_LINSPACE_START 0.1f
#define DYN_LINSPACE_END 1.0f
#define DYN_MAX_STEPS ((1 << (DYN_EXPONENTS - 1)) + 1)

static void sort_floats(float *v, int n) {   /* insertion sort: stable, n <= 256 */
    for (int i = 1; i < n; i++) {
        float x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) v[j + 1] = v[j], j--;
        v[j + 1] = x;
    }
}

void dt_quant_dynamic_map(float map[DT_QUANT_DYNAMIC_CODES]) {
    int n = 0;
    for (int i = 0; i < DYN_EXPONENTS; i++) {
        const int steps = (1 << i) + 1, half = steps / 2;
        const double start = DYN_LINSPACE_START, end = DYN_LINSPACE_END;
        const float step = (float)((end - start) / (double)(steps - 1));
        float b[DYN_MAX_STEPS];
        for (int k = 0; k < steps; k++)
            b[k] = (float)(k < half ? start + (double)step * k : end - (double)step * (steps - k - 1));
        const float scale = (float)pow(10.0, (double)(i - (DYN_EXPONENTS - 1)));
        for (int k = 0; k + 1 < steps; k++) {
            const float mid = (b[k] + b[k + 1]) / 2.0f;
            map[n++] = scale * mid;
            map[n++] = -scale * mid;
        }
    }
    map[n++] = 0.0f;
    map[n++] = 1.0f;
    sort_floats(map, n);
}

int64_t dt_quant_blocks(int64_t n, int64_t block) { return block > 0 ? (n + block - 1) / block : 0; }

/* ---- 4-bit ---- */

/* The smallest absmax the default back-end divides by (backends/default/ops.py
 * quantize_4bit: absmax.clamp(min=1e-38)). */
#define ABSMAX_FLOOR 1e-38f

/* bucketize(x, bounds): the number of bounds below x (torch.bucketize, right=False). */
static int bucketize(float x, const float *bounds, int nb) {
    int i = 0;
    while (i < nb && bounds[i] < x) i++;
    return i;
}

/* The code book sorted stably (torch.argsort on CPU keeps FP4's +0 before -0) and the
 * midpoints between neighbours: backends/default/ops.py _get_4bit_quantize_bounds. */
static void quantize_bounds(dt_storage fmt, float bounds[DT_QUANT_4BIT_CODES - 1], uint8_t order[DT_QUANT_4BIT_CODES]) {
    float code[DT_QUANT_4BIT_CODES];
    dt_quant4_code(fmt, code);
    for (int i = 0; i < DT_QUANT_4BIT_CODES; i++) order[i] = (uint8_t)i;
    for (int i = 1; i < DT_QUANT_4BIT_CODES; i++) {
        uint8_t o = order[i];
        int j = i - 1;
        while (j >= 0 && code[order[j]] > code[o]) order[j + 1] = order[j], j--;
        order[j + 1] = o;
    }
    for (int i = 0; i + 1 < DT_QUANT_4BIT_CODES; i++) bounds[i] = (code[order[i]] + code[order[i + 1]]) / 2.0f;
}

static float clamp1(float v) { return v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v; }

/* backends/default/ops.py quantize_4bit: full blocks are scaled by x * (1 / absmax), the
 * partial last block by x / absmax; codes packed high nibble first, an odd count padded
 * with the code of 0. */
void dt_quant4_quantize(const float *x, int64_t n, dt_storage fmt, int64_t block, uint8_t *packed, float *absmax) {
    float bounds[DT_QUANT_4BIT_CODES - 1];
    uint8_t order[DT_QUANT_4BIT_CODES];
    quantize_bounds(fmt, bounds, order);
    const int64_t nb = dt_quant_blocks(n, block), full = n / block;
    memset(packed, 0, (size_t)((n + 1) / 2));
    for (int64_t b = 0; b < nb; b++) {
        const int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        float am = 0.0f;
        for (int64_t i = lo; i < hi; i++) am = fmaxf(am, fabsf(x[i]));
        absmax[b] = am;
        const float d = am > ABSMAX_FLOOR ? am : ABSMAX_FLOOR, inv = 1.0f / d;
        for (int64_t i = lo; i < hi; i++) {
            const float s = clamp1(b < full ? x[i] * inv : x[i] / d);
            const uint8_t q = order[bucketize(s, bounds, DT_QUANT_4BIT_CODES - 1)];
            packed[i / 2] |= (uint8_t)(i % 2 ? q : q << 4);
        }
    }
    if (n % 2) packed[n / 2] |= order[bucketize(0.0f, bounds, DT_QUANT_4BIT_CODES - 1)];
}

/* The value of code q as the dequantisation kernels compute it (csrc/cpu_ops.cpp fp4_lut,
 * csrc/kernels.cu dDequantizeFP4Tree: sign x magnitude): FP4's code 8 is -0.0 there, +0.0
 * in get_4bit_type's table (and in bitsandbytes' PyTorch fallback, used for an odd number
 * of columns). */
#define FP4_NEG_ZERO_CODE 8

/* fmt's code book as the dequantisation kernels hold it */
static void dequant_code(dt_storage fmt, float code[DT_QUANT_4BIT_CODES]) {
    dt_quant4_code(fmt, code);
    if (fmt == DT_STORAGE_FP4) code[FP4_NEG_ZERO_CODE] = -0.0f;
}

/* out[lo .. hi) = code[q] x am, in fp32 or (bf16) the fp32 product rounded to nearest even:
 * bitsandbytes' CPU kernel cdequantize_blockwise_cpu_{nf4,fp4}_bf16 gives the same values as
 * its fp32 product cast with .to(torch.bfloat16) (scripts/gen_qlora_goldens.py asserts it for
 * every weight of its bf16 goldens) */
static void dequant_range(const float *code, const uint8_t *packed, int64_t lo, int64_t hi, float am, dt_dtype dt,
                          void *out) {
    float *o32 = out;
    dt_bf16 *o16 = out;
    for (int64_t i = lo; i < hi; i++) {
        const uint8_t q = i % 2 ? packed[i / 2] & 0x0F : packed[i / 2] >> 4;
        const float v = code[q] * am;
        if (dt == DT_DTYPE_BF16) o16[i] = dt_f32_to_bf16(v);
        else o32[i] = v;
    }
}

void dt_quant4_dequantize_as(const uint8_t *packed, const float *absmax, int64_t n, dt_storage fmt, int64_t block,
                             dt_dtype dt, void *out) {
    float code[DT_QUANT_4BIT_CODES];
    dequant_code(fmt, code);
    const int64_t nb = dt_quant_blocks(n, block);
    for (int64_t b = 0; b < nb; b++)
        dequant_range(code, packed, b * block, b + 1 < nb ? (b + 1) * block : n, absmax[b], dt, out);
}

void dt_quant4_dequantize(const uint8_t *packed, const float *absmax, int64_t n, dt_storage fmt, int64_t block,
                          float *out) {
    dt_quant4_dequantize_as(packed, absmax, n, fmt, block, DT_DTYPE_FP32, out);
}

/* ---- the absmax's double quantisation ---- */

/* torch.mean of a float32 vector on the CPU, single-threaded: at::native cascade_sum
 * (aten/src/ATen/native/cpu/SumKernel.cpp, vectorized_inner_sum over 8-float vectors:
 * row_sum with 4 interleaved accumulators, multi_row_sum's 4 levels of 2^4 steps, the
 * leftover vectors into the first, then the scalar tail and the 8 lanes in order), divided
 * by n in float. torch splits a reduction over threads beyond 32768 elements (GRAIN_SIZE),
 * which changes the last bits: absmax vectors that long (weights above 2M elements) match
 * bitsandbytes run with torch.set_num_threads(1). */
#define SUM_LANES 8
#define SUM_ILP 4
#define SUM_LEVELS 4
#define SUM_MIN_LEVEL_POWER 4

static int64_t ceil_log2(int64_t x) {
    int64_t p = 0;
    while (((int64_t)1 << p) < x) p++;
    return p;
}

typedef struct { float v[SUM_LANES]; } lanes;

static void lanes_add(lanes *a, const lanes *b) {
    for (int l = 0; l < SUM_LANES; l++) a->v[l] += b->v[l];
}

static void lanes_load(lanes *a, const float *x) { memcpy(a->v, x, sizeof a->v); }

/* multi_row_sum over `rows` rows of SUM_ILP vectors each (vector r * SUM_ILP + k). */
static void multi_row_sum(const float *x, int64_t rows, lanes out[SUM_ILP]) {
    const int64_t lp = ceil_log2(rows) / SUM_LEVELS > SUM_MIN_LEVEL_POWER ? ceil_log2(rows) / SUM_LEVELS
                                                                         : SUM_MIN_LEVEL_POWER;
    const int64_t step = (int64_t)1 << lp, mask = step - 1;
    lanes acc[SUM_LEVELS][SUM_ILP];
    memset(acc, 0, sizeof acc);
    lanes t;
    int64_t i = 0;
    while (i + step <= rows) {
        for (int64_t j = 0; j < step; j++, i++)
            for (int k = 0; k < SUM_ILP; k++) lanes_load(&t, x + (i * SUM_ILP + k) * SUM_LANES), lanes_add(&acc[0][k], &t);
        for (int j = 1; j < SUM_LEVELS; j++) {
            for (int k = 0; k < SUM_ILP; k++) lanes_add(&acc[j][k], &acc[j - 1][k]), memset(&acc[j - 1][k], 0, sizeof t);
            if (i & (mask << (j * lp))) break;
        }
    }
    for (; i < rows; i++)
        for (int k = 0; k < SUM_ILP; k++) lanes_load(&t, x + (i * SUM_ILP + k) * SUM_LANES), lanes_add(&acc[0][k], &t);
    for (int j = 1; j < SUM_LEVELS; j++)
        for (int k = 0; k < SUM_ILP; k++) lanes_add(&acc[0][k], &acc[j][k]);
    memcpy(out, acc[0], sizeof acc[0]);
}

static float torch_mean(const float *x, int64_t n) {
    float sum = 0.0f;
    if (n < SUM_LANES) {   /* too short for a vector: the scalar row_sum, 4 interleaved accumulators */
        float acc[SUM_ILP] = {0};
        const int64_t rows = n / SUM_ILP;
        for (int64_t i = 0; i < rows; i++)
            for (int k = 0; k < SUM_ILP; k++) acc[k] += x[i * SUM_ILP + k];
        for (int64_t i = rows * SUM_ILP; i < n; i++) acc[0] += x[i];
        for (int k = 1; k < SUM_ILP; k++) acc[0] += acc[k];
        return acc[0] / (float)n;
    }
    const int64_t nv = n / SUM_LANES, rows = nv / SUM_ILP;
    lanes ps[SUM_ILP], t;
    multi_row_sum(x, rows, ps);
    for (int64_t i = rows * SUM_ILP; i < nv; i++) lanes_load(&t, x + i * SUM_LANES), lanes_add(&ps[0], &t);
    for (int k = 1; k < SUM_ILP; k++) lanes_add(&ps[0], &ps[k]);
    for (int64_t k = nv * SUM_LANES; k < n; k++) sum += x[k];
    for (int l = 0; l < SUM_LANES; l++) sum += ps[0].v[l];
    return sum / (float)n;
}

/* bitsandbytes csrc/cpu_ops.cpp quantize_cpu_impl: each value times 1 / absmax picks its
 * code through a 65536-entry table of the nearest code over [-1, 1] (build_quantize_lut:
 * bin i at -1 + 2i / 65535, the first code whose upper midpoint is not below it; a value's
 * bin (v + 1) x 0.5 x 65535 + 0.5, truncated); an all-zero block gets code 0. */
#define LUT_SIZE 65536

static void build_lut(const float *map, uint8_t *lut) {
    int idx = 0;
    for (int i = 0; i < LUT_SIZE; i++) {
        const float val = -1.0f + (2.0f * (float)i) / (float)(LUT_SIZE - 1);
        while (idx < DT_QUANT_DYNAMIC_CODES - 1 && 0.5f * (map[idx] + map[idx + 1]) < val) idx++;
        lut[i] = (uint8_t)idx;
    }
}

static uint8_t lut_code(const uint8_t *lut, float v) {
    v = clamp1(v);
    return lut[(uint16_t)((v + 1.0f) * 0.5f * (float)(LUT_SIZE - 1) + 0.5f)];
}

void dt_quant4_double(const float *absmax, int64_t nb, uint8_t *qabsmax, float *nested_absmax, float *offset) {
    float map[DT_QUANT_DYNAMIC_CODES];
    uint8_t lut[LUT_SIZE];   /* [65536] nearest code per bin */
    dt_quant_dynamic_map(map);
    build_lut(map, lut);
    const float off = torch_mean(absmax, nb);
    *offset = off;
    const int64_t nn = dt_quant_blocks(nb, DT_QUANT_NESTED_BLOCK);
    for (int64_t b = 0; b < nn; b++) {
        const int64_t lo = b * DT_QUANT_NESTED_BLOCK, hi = lo + DT_QUANT_NESTED_BLOCK < nb ? lo + DT_QUANT_NESTED_BLOCK : nb;
        float am = 0.0f;
        for (int64_t i = lo; i < hi; i++) am = fmaxf(am, fabsf(absmax[i] - off));
        nested_absmax[b] = am;
        const float inv = am != 0.0f ? 1.0f / am : 0.0f;
        for (int64_t i = lo; i < hi; i++) qabsmax[i] = am != 0.0f ? lut_code(lut, (absmax[i] - off) * inv) : 0;
    }
}

/* dequantize_blockwise (csrc/cpu_ops.cpp dequantize_cpu: code x absmax), then
 * functional.py dequantize_4bit's absmax += offset: block i's absmax. */
static float undouble_one(const float *map, const uint8_t *qabsmax, const float *nested_absmax, float offset, int64_t i) {
    const float v = map[qabsmax[i]] * nested_absmax[i / DT_QUANT_NESTED_BLOCK];   /* rounded, then added */
    return v + offset;
}

void dt_quant4_undouble(const uint8_t *qabsmax, const float *nested_absmax, float offset, int64_t nb, float *absmax) {
    float map[DT_QUANT_DYNAMIC_CODES];
    dt_quant_dynamic_map(map);
    for (int64_t i = 0; i < nb; i++) absmax[i] = undouble_one(map, qabsmax, nested_absmax, offset, i);
}

void dt_quant4_dequantize_nested_as(const uint8_t *packed, const uint8_t *qabsmax, const float *nested_absmax,
                                    float offset, const float map[DT_QUANT_DYNAMIC_CODES], int64_t n, dt_storage fmt,
                                    int64_t block, dt_dtype dt, void *out) {
    float code[DT_QUANT_4BIT_CODES];
    dequant_code(fmt, code);
    const int64_t nb = dt_quant_blocks(n, block);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nb; b++)
        dequant_range(code, packed, b * block, b + 1 < nb ? (b + 1) * block : n,
                      undouble_one(map, qabsmax, nested_absmax, offset, b), dt, out);
}

void dt_quant4_dequantize_nested(const uint8_t *packed, const uint8_t *qabsmax, const float *nested_absmax, float offset,
                                 const float map[DT_QUANT_DYNAMIC_CODES], int64_t n, dt_storage fmt, int64_t block,
                                 float *out) {
    dt_quant4_dequantize_nested_as(packed, qabsmax, nested_absmax, offset, map, n, fmt, block, DT_DTYPE_FP32, out);
}
