/* dt_isaprobe.h — what the CPU's vector units deliver, measured, for the GEMM
 * kernel choice (dt_gemm_cpu.h; docs/engine.md "GEMM kernels").
 *
 * A bf16 GEMM only pays where the core's bf16 dot product (AVX512-BF16
 * VDPBF16PS: 32 bf16 multiply-adds into 16 fp32 lanes, 64 FLOPs) delivers clearly
 * more FLOPs than its fp32 FMA (VFMADD231PS zmm: 32 FLOPs), i.e. issues at well
 * over half the FMA's rate. That rate is a
 * property of the microarchitecture that CPUID does not report: on the AMD Zen 4
 * development machine oneDNN's bf16 matmul ran at 1.8-2.0x its sgemm, on an
 * Intel Xeon (Emerald Rapids, no AMX) VDPBF16PS issues once per 2 cycles against
 * two FMAs per cycle and the bf16 matmul ran at 0.5x (docs/benchmarks.md "CPU
 * GEMM kernels"). */
#ifndef DT_ISAPROBE_H
#define DT_ISAPROBE_H

/* FLOPs per second of VDPBF16PS zmm over those of VFMADD231PS zmm, both as
 * independent register-only chains on the calling thread, timed on its CPU
 * clock (CLOCK_THREAD_CPUTIME_ID: preemption does not count), best of a few
 * interleaved tries (~5 ms in all). 0 where the CPU has no AVX512-BF16 (or is not
 * x86-64). Measured 0.49-0.50 on the Intel core above, also with other
 * processes busy on its cores; a core whose bf16 GEMM runs at twice its sgemm
 * (Zen 4's 1.8-2.0x) must read about 2. Both are far from the threshold a caller
 * uses, so the answer is the same run to run. Never fails, never prints. */
double dt_isa_bf16_dot_vs_fma(void);

#endif
