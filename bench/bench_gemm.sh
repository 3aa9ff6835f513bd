#!/usr/bin/env bash
# bench/bench_gemm.sh — the CPU GEMM kernels side by side (bench_gemm: GFLOP/s at GPT-2
# 124M's shapes, fp32 and bf16, 1 and 2 threads), once with OPENBLAS_CORETYPE as the
# environment sets it and once forced to Haswell, in one run. OpenBLAS reads
# OPENBLAS_CORETYPE when it loads, so each setting is its own process. The variable is
# never unset: where it is set, an older OpenBLAS computes wrong results without it.
#
# Usage: bench/bench_gemm.sh [BUILD_DIR] [bench_gemm options: --threads 1,2 --reps R --quick]
# Results: docs/benchmarks.md "CPU GEMM kernels".
set -euo pipefail
BUILD=${1:-build}
shift || true
BIN="$BUILD/bench/bench_gemm"
[ -x "$BIN" ] || { echo "bench_gemm.sh: $BIN not built (cmake --build $BUILD)" >&2; exit 2; }

echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cpus; $(grep -o -w -m1 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '))"
echo "load: $(uptime | sed 's/.*load average/load average/')"
echo
echo "== OPENBLAS_CORETYPE as set: ${OPENBLAS_CORETYPE:-(unset)}"
"$BIN" "$@"
echo
echo "== OPENBLAS_CORETYPE=Haswell (forced)"
OPENBLAS_CORETYPE=Haswell "$BIN" "$@"
echo
echo "load after: $(uptime | sed 's/.*load average/load average/')"
