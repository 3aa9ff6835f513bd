#!/usr/bin/env bash
# Runs every CPU benchmark in one go and prints figures and ratios side by side.
# Usage: bash bench/run.sh [BUILD_DIR]   (default: build; build it first)
# Record results in docs/benchmarks.md with this command and the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
BB=$B/bench   # bench/CMakeLists.txt puts the benchmark binaries in BUILD/bench
[ -x "$BB/bench_estimate" ] || BB=$B
[ -x "$BB/bench_estimate" ] || { echo "bench/run.sh: no $B/bench/bench_estimate: build first (cmake --build $B)" >&2; exit 2; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/{print $2}') GiB"
echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo "== dtplan estimate: all rows of the 32B / 8-GPU table (target < 10 ms) =="
"$BB/bench_estimate"
echo
echo "== dtplan solve: 32B / 8 x H100 / 80G (target < 50 ms) =="
"$BB/bench_solve"
echo
echo "== dtplan as a whole process: solve 32B/8 (target < 20 ms), --help RSS (target < 10 MB) =="
bash bench/bench_startup.sh "$B"
echo
echo "== dtrun CPU: GPT-2 124M, B=4, T=64, fp32 vs this machine's GEMM ceiling (target >= 60%) =="
"$BB/bench_gpt2"
echo
echo "== dtrun ZeRO: GPT-2 124M on 2 CPU ranks, step time and comm share per stage, predicted vs measured =="
bash bench/bench_zero.sh "$B"
