#!/usr/bin/env bash
# Installs what is needed, builds, and runs the main job on a default that needs
# no GPU:
#   1. dtplan estimate --params 32B --gpus 8   (the 32B / 8-GPU memory table)
#   2. dtplan solve for a small GPT-2 on the built-in cpu profile (another machine's
#      figures), then dtplan calibrate --plan times this machine's CPU at that plan's
#      shapes (a few seconds) and the plan is solved again on the measured profile, so
#      its predicted step and memory are this machine's
#   3. dtrun trains that plan on real English text (Debian's fortunes), loss falling,
#      and prints the measured step and memory next to the predicted ones
#   4. dtrun sample prints text from the trained checkpoint
# Usage: bash scripts/quickstart.sh      (outputs under out/quickstart/)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc 2>/dev/null || echo 2)"

OUT=out/quickstart
mkdir -p "$OUT"
echo
echo "== 1. dtplan estimate --params 32B --gpus 8 =="
./build/dtplan estimate --params 32B --gpus 8

echo
echo "== 2. dtplan solve: gpt2-tiny, 1 GiB per rank; calibrate this CPU at its shapes; solve again =="
SOLVE=(--mem 1G --model gpt2-tiny --seq 64 --global-batch 16 --precision fp32
       --data /usr/share/games/fortunes --steps 200 --warmup 20 --lr 1.5e-3
       --schedule WarmupCosineLR --out "$OUT/run")
./build/dtplan solve "${SOLVE[@]}" --hardware cpu -o "$OUT/plan-cpu.json" | grep -E '^(chosen|  step)'
# Re-running replaces only a profile calibrate wrote itself; a user's file there is refused.
./build/dtplan calibrate --plan "$OUT/plan-cpu.json" -o "$OUT/local.json"
./build/dtplan solve "${SOLVE[@]}" --hardware "$OUT/local.json" -o "$OUT/plan.json"

echo
echo "== 3. dtrun $OUT/plan.json =="
rm -rf "$OUT/run"
./build/dtrun "$OUT/plan.json"

echo
echo "== 4. dtrun sample $OUT/run =="
./build/dtrun sample "$OUT/run" --prompt "The " --tokens 200
