/* gpu_test_util.h — what the GPU tests share: the two devices, a seeded
 * generator, host <-> device copies and the CPU-vs-GPU comparison (relative to
 * max(1, the CPU output's largest magnitude), printed and checked). Static
 * functions: include it once per test program. */
#ifndef DT_GPU_TEST_UTIL_H
#define DT_GPU_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dt_device.h"
#include "dt_test.h"

#define SKIP 77   /* ctest's SKIP_RETURN_CODE: no GPU here */
#define TWO_POW_53 9007199254740992.0

static const dt_device_ops *cpu, *gpu;

/* xorshift64 (Marsaglia 2003), seeded: the same inputs on every run */
static uint64_t rng = 88172645463325252ULL;
static float urand(float lo, float hi) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (float)((rng >> 11) * (1.0 / TWO_POW_53)) * (hi - lo);
}

static float *rnd(size_t n, float lo, float hi) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = urand(lo, hi);
    return x;
}

static void *up(const void *h, size_t bytes) {
    void *d = gpu->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, bytes);
    gpu->memcpy(d, h, bytes, DT_COPY_H2D, DT_STREAM_H2D);
    gpu->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
    return d;
}

static void *down(const void *d, size_t bytes) {
    void *h = malloc(bytes);
    gpu->handoff(DT_STREAM_COMPUTE, DT_STREAM_D2H);
    gpu->memcpy(h, d, bytes, DT_COPY_D2H, DT_STREAM_D2H);
    gpu->stream_sync(DT_STREAM_D2H);
    return h;
}

/* max |a - b| / max(1, max |a|) over n (a on the host: the CPU's; b on the GPU) */
static double cmp(const char *what, const float *a, const float *dev_b, size_t n, double tol) {
    float *b = down(dev_b, n * sizeof(float));
    double scale = 1.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(a[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]) / scale);
    printf("%-44s max rel diff %.3g (tol %.1g)\n", what, worst, tol);
    if (!(worst <= tol)) fprintf(stderr, "%s: GPU differs from CPU by %.3g\n", what, worst);
    CHECK(worst <= tol);
    free(b);
    return worst;
}

#endif
