#!/usr/bin/env bash
# Installs what is needed, builds, and runs the main job on a default that needs
# no GPU:
#   1. dtplan estimate --params 32B --gpus 8   (the 32B / 8-GPU memory table)
#   2. dtplan calibrate measures this machine's CPU (10-30 s), so the plan's
#      predicted step and memory are this machine's, not the built-in profile's
#   3. dtplan solve for a small GPT-2 on that profile, writing a plan
#   4. dtrun trains that plan on real English text (Debian's fortunes), loss falling,
#      and prints the measured step next to the predicted one
#   5. dtrun sample prints text from the trained checkpoint
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
echo "== 2. dtplan calibrate -o $OUT/local.json (this machine's CPU) =="
# Re-running replaces only a profile calibrate wrote itself; a user's file there is refused.
./build/dtplan calibrate -o "$OUT/local.json"

echo
echo "== 3. dtplan solve: gpt2-tiny on that profile, 1 GiB per rank =="
./build/dtplan solve --mem 1G --model gpt2-tiny --hardware "$OUT/local.json" --seq 64 --global-batch 16 \
    --precision fp32 --data /usr/share/games/fortunes --steps 200 --warmup 20 --lr 1.5e-3 \
    --schedule WarmupCosineLR --out "$OUT/run" -o "$OUT/plan.json"

echo
echo "== 4. dtrun $OUT/plan.json =="
rm -rf "$OUT/run"
./build/dtrun "$OUT/plan.json"

echo
echo "== 5. dtrun sample $OUT/run =="
./build/dtrun sample "$OUT/run" --prompt "The " --tokens 200
