#!/usr/bin/env bash
# Regenerates the example charts docs/reports.md shows, from the commands a user
# runs first, at their default size: the estimate table as stacked bars, the
# solver's candidates, a simulated step, and a CPU run's report (loss,
# throughput, memory, step time). Usage: bash scripts/make_doc_charts.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
IMG=docs/img
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
P="$B/dtplan"
R="$B/dtrun"
"$P" estimate --params 32B --gpus 8 --mem 80G --plot "$T/mem.png" >/dev/null
"$P" solve --params 32B --gpus 8 --mem 80G --plot "$T/cands.png" -o "$T/p32.json" >/dev/null
"$P" solve --model gpt2 --gpus 8 --mem 80G --stages 3 -o "$T/s3.json" >/dev/null
"$P" simulate "$T/s3.json" --plot "$T/timeline.png" >/dev/null
# a CPU run on this machine: 2 ranks, ZeRO-2, 60 steps of gpt2-tiny on fortunes
"$P" solve --mem 1G --model gpt2-tiny --hardware cpu --gpus 2 --stages 2 --seq 64 --global-batch 16 \
    --precision fp32 --steps 60 --warmup 6 --lr 1.5e-3 --schedule WarmupCosineLR --save-interval 30 \
    --out "$T/run" -o "$T/tiny.json" >/dev/null
"$R" "$T/tiny.json" --quiet
"$P" report "$T/run" -o "$T/report" >/dev/null
cp "$T/mem.png" "$IMG/estimate-32b-8gpu-memory.png"
cp "$T/cands.png" "$IMG/solve-32b-8gpu-candidates.png"
cp "$T/timeline.png" "$IMG/simulate-gpt2-zero3.png"
for c in loss throughput memory steptime; do cp "$T/report/$c.png" "$IMG/run-report-$c.png"; done
echo "wrote $IMG/{estimate-32b-8gpu-memory,solve-32b-8gpu-candidates,simulate-gpt2-zero3,run-report-*}.png"
