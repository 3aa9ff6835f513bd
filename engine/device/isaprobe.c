/* isaprobe.c — dt_isaprobe.h: the bf16 dot product's FLOP rate against the fp32
 * FMA's, each as DT_PROBE_CHAINS independent accumulator chains in registers.
 *
 * Enough chains to keep the units busy across the instructions' latency (a few
 * cycles) at up to two issues per cycle; on the Intel VM of docs/benchmarks.md
 * "On an Intel Xeon without AMX" 6 chains and 12 gave the same bf16 rate, so it is
 * the issue rate that is timed, not the latency. Each chain starts from its own
 * value. */
#include "dt_isaprobe.h"

#include <time.h>

#define DT_PROBE_CHAINS 12
#define DT_PROBE_ITERS 100000L   /* 1.2 M instructions per try: ~0.5-1 ms at 0.5 per cycle */
#define DT_PROBE_TRIES 3
#define DT_BF16_DOT_FLOPS 64.0   /* VDPBF16PS zmm: 32 pairs, a multiply and an add each */
#define DT_FMA_FLOPS 32.0        /* VFMADD231PS zmm: 16 lanes, a multiply and an add each */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

static double thread_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* a sink the optimiser cannot see through, so the chains' results are used */
static volatile float g_probe_sink;

/* The timed loops are written in assembly so that what is timed is exactly
 * DT_PROBE_CHAINS independent instructions per iteration on register operands
 * (a C loop over an array of accumulators was compiled with a load and a store
 * per instruction). AT&T order: sources, then the accumulator. */
__attribute__((target("avx512f"))) static double chains_sum(__m512 a0, __m512 a1, __m512 a2, __m512 a3,
                                                           __m512 a4, __m512 a5, __m512 a6, __m512 a7,
                                                           __m512 a8, __m512 a9, __m512 a10, __m512 a11) {
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return (double)_mm512_reduce_add_ps(s);
}

/* INSTR on DT_PROBE_CHAINS accumulators %[a0]..%[a11] from the sources %[x], %[y] */
#define DT_PROBE_ASM(instr)                                                                       \
    instr " %[x], %[y], %[a0]\n\t" instr " %[x], %[y], %[a1]\n\t" instr " %[x], %[y], %[a2]\n\t"   \
    instr " %[x], %[y], %[a3]\n\t" instr " %[x], %[y], %[a4]\n\t" instr " %[x], %[y], %[a5]\n\t"   \
    instr " %[x], %[y], %[a6]\n\t" instr " %[x], %[y], %[a7]\n\t" instr " %[x], %[y], %[a8]\n\t"   \
    instr " %[x], %[y], %[a9]\n\t" instr " %[x], %[y], %[a10]\n\t" instr " %[x], %[y], %[a11]\n\t"
#define DT_PROBE_INIT(k) _mm512_set1_ps((float)(k))

/* FLOPs per second of VDPBF16PS (bf16 != 0: x, y hold bf16 pairs 1.0 and 0.5) or of
 * VFMADD231PS (fp32 lanes 1.0 and 0.5) over the chains; the results only feed the sink */
__attribute__((target("avx512f,avx512bf16"))) static double chain_flops(int bf16) {
    __m512 a0 = DT_PROBE_INIT(0), a1 = DT_PROBE_INIT(1), a2 = DT_PROBE_INIT(2), a3 = DT_PROBE_INIT(3);
    __m512 a4 = DT_PROBE_INIT(4), a5 = DT_PROBE_INIT(5), a6 = DT_PROBE_INIT(6), a7 = DT_PROBE_INIT(7);
    __m512 a8 = DT_PROBE_INIT(8), a9 = DT_PROBE_INIT(9), a10 = DT_PROBE_INIT(10), a11 = DT_PROBE_INIT(11);
    __m512 x = bf16 ? _mm512_castsi512_ps(_mm512_set1_epi16(0x3f80)) : _mm512_set1_ps(1.0f);
    __m512 y = bf16 ? _mm512_castsi512_ps(_mm512_set1_epi16(0x3f00)) : _mm512_set1_ps(0.5f);
    double t0 = thread_s();
    if (bf16)
        for (long n = 0; n < DT_PROBE_ITERS; n++)
            __asm__ volatile(DT_PROBE_ASM("vdpbf16ps") : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5), [a6] "+v"(a6), [a7] "+v"(a7), [a8] "+v"(a8), [a9] "+v"(a9), [a10] "+v"(a10), [a11] "+v"(a11) : [x] "v"(x), [y] "v"(y));
    else
        for (long n = 0; n < DT_PROBE_ITERS; n++)
            __asm__ volatile(DT_PROBE_ASM("vfmadd231ps") : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5), [a6] "+v"(a6), [a7] "+v"(a7), [a8] "+v"(a8), [a9] "+v"(a9), [a10] "+v"(a10), [a11] "+v"(a11) : [x] "v"(x), [y] "v"(y));
    double t = thread_s() - t0;
    g_probe_sink = (float)chains_sum(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11);
    const double flops = bf16 ? DT_BF16_DOT_FLOPS : DT_FMA_FLOPS;
    return t > 0 ? (double)DT_PROBE_ITERS * DT_PROBE_CHAINS * flops / t : 0.0;
}

double dt_isa_bf16_dot_vs_fma(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) return 0.0;
    double best_dot = 0.0, best_fma = 0.0;
    for (int r = 0; r < DT_PROBE_TRIES; r++) {   /* interleaved: a clock ramp hits both */
        double f = chain_flops(0), d = chain_flops(1);
        if (f > best_fma) best_fma = f;
        if (d > best_dot) best_dot = d;
    }
    return best_fma > 0 ? best_dot / best_fma : 0.0;
}

#else
double dt_isa_bf16_dot_vs_fma(void) { return 0.0; }
#endif
