/* ops_cpu_internal.h — what the CPU kernel files share (ops_cpu.c: the GPT-2 ops;
 * ops_cpu_llama.c: the llama family's; attention_cpu.c: attention; convert_cpu.c:
 * 16-bit conversions), so they tile and reduce the same way without reaching into
 * each other: the column band of the deterministic column sums, the key tile of
 * the flash attention, the dot product the attention kernels use, and the size
 * below which a loop runs on one thread. Internal to engine/device/; not part of
 * the device interface. */
#ifndef DT_OPS_CPU_INTERNAL_H
#define DT_OPS_CPU_INTERNAL_H

#include <stdint.h>

/* Column band for column-parallel reductions: 64 floats = 4 AVX-512 vectors, one
 * 256-byte run per row, so a band stays in L1 while rows stream past. Bands are
 * the parallel unit and rows are summed in order inside a band, so column sums
 * do not depend on the thread count. */
#define DT_COL_BAND 64
/* The attention kernels work on blocks of DT_ATT_ROWS query rows against tiles of
 * DT_ATT_KEYS keys: a block's queries (and output gradients) are transposed to [D][rows],
 * so one vector holds a score for each row of the block, every key's score vector is a
 * chain of D fused multiply-adds with the key's elements broadcast, and the softmax's
 * max, exp and sums run down the vectors (one lane per row: no horizontal reductions).
 * 16 = one AVX-512 vector of fp32; a tile's 16 score vectors are independent chains. The
 * key tile is also the online softmax's update step. */
#define DT_ATT_ROWS 16
#define DT_ATT_KEYS 16

/* Arrays shorter than this are converted (and scaled, checked) on one thread
 * (thread start-up would cost more than the work). */
#define DT_PAR_MIN 32768

/* a[n] . b[n] in fp32 (vectorised reduction; fixed order for a given build) */
static inline float dt_cpu_dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

#endif
