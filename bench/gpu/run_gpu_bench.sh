#!/usr/bin/env bash
# Runs the one-GPU training benchmark (bench/gpu/bench_gpu.c) for GPT-2 124M,
# GPT-2 350M and the Qwen3-0.6B-shaped GPT-2, fp32 GEMMs and then TF32, and
# keeps the output under bench/gpu/results-<host>-<date>.txt.
# usage: bench/gpu/run_gpu_bench.sh [BUILD_DIR] [HW_PROFILE]   (exit 77: no GPU)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../../build}"
hw="${2:-H100-SXM-80GB}"
bin="$build/tests/gpu/bench_gpu"
[[ -x "$bin" ]] || { echo "run_gpu_bench: $bin not built (configure with the CUDA toolkit, build target bench_gpu)" >&2; exit 2; }
out="$here/results-$(hostname)-$(date +%Y%m%d-%H%M).txt"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  echo "# fp32 GEMMs"
  "$bin" --hw "$hw" --steps 10 --batch 8 --seq 1024
  echo "# TF32 GEMMs (DT_CUDA_TF32=1)"
  DT_CUDA_TF32=1 "$bin" --hw "$hw" --steps 10 --batch 8 --seq 1024
} | tee "$out"
