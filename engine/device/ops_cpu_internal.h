/* ops_cpu_internal.h — what the CPU op files share (ops_cpu.c: the GPT-2 ops;
 * ops_cpu_llama.c: the llama family), so both tile and reduce the same way:
 * the column band of the deterministic column sums, the key tile of the flash
 * attention, and the dot product the attention kernels use. Internal to
 * engine/device/; not part of the device interface. */
#ifndef DT_OPS_CPU_INTERNAL_H
#define DT_OPS_CPU_INTERNAL_H

#include <stdint.h>

/* Column band for column-parallel reductions: 64 floats = 4 AVX-512 vectors, one
 * 256-byte run per row, so a band stays in L1 while rows stream past. Bands are
 * the parallel unit and rows are summed in order inside a band, so column sums
 * do not depend on the thread count. */
#define DT_COL_BAND 64
/* Key tile of the flash attention forward (keys per online-softmax update). */
#define DT_ATT_TILE 64

/* a[n] . b[n] in fp32 (vectorised reduction; fixed order for a given build) */
static inline float dt_cpu_dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

#endif
