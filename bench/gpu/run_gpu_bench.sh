#!/usr/bin/env bash
# Runs the one-GPU training benchmark (bench/gpu/bench_gpu.c) for GPT-2 124M,
# GPT-2 350M and Qwen3-0.6B (Llama family): mixed-bf16 (16-bit GEMMs on the tensor
# cores), then fp32 with fp32 GEMMs and with TF32, and keeps the output under
# bench/gpu/results-<host>-<date>.txt.
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
  echo "# mixed-bf16: bf16 operands into cuBLAS, fp32 accumulation"
  "$bin" --hw "$hw" --steps 10 --batch 8 --seq 1024 --precision mixed-bf16
  echo "# fp32 GEMMs"
  "$bin" --hw "$hw" --steps 10 --batch 8 --seq 1024 --precision fp32
  echo "# TF32 GEMMs (DT_CUDA_TF32=1; MFU still against the fp32 peak)"
  DT_CUDA_TF32=1 "$bin" --hw "$hw" --steps 10 --batch 8 --seq 1024 --precision fp32
} | tee "$out"
