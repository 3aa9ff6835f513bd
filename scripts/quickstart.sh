#!/usr/bin/env bash
# Installs what is needed, builds, and runs the main job on a default that needs
# no GPU: the 32B / 8-GPU memory table. Usage: bash scripts/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc 2>/dev/null || echo 2)"
echo
echo "== dtplan estimate --params 32B --gpus 8 =="
./build/dtplan estimate --params 32B --gpus 8
