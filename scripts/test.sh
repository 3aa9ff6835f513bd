#!/usr/bin/env bash
# Builds and runs the whole test suite twice: an optimised build, then an
# AddressSanitizer + UndefinedBehaviorSanitizer build. GPU tests skip (exit 77)
# on machines without a GPU; any other skipped test fails the run
# (scripts/ci_skips.sh). Then every fuzz target runs for a bounded time
# (scripts/fuzz.sh). Usage: bash scripts/test.sh   (from the repo root)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)

echo "== build (Release) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
echo "== tests (Release) =="
ctest --test-dir build --output-on-failure --no-tests=error -j"$jobs" 2>&1 | tee build/ctest.log
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
bash scripts/ci_skips.sh build build/ctest.log

echo "== build (ASan + UBSan) =="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDT_SANITIZE=ON
cmake --build build-asan -j"$jobs"
echo "== tests (ASan + UBSan) =="
ctest --test-dir build-asan --output-on-failure --no-tests=error -j"$jobs" 2>&1 | tee build-asan/ctest.log
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
bash scripts/ci_skips.sh build-asan build-asan/ctest.log

echo "== fuzzing (libFuzzer, ASan + UBSan, ${DT_FUZZ_SECONDS:-45} s per target) =="
bash scripts/fuzz.sh "${DT_FUZZ_SECONDS:-45}"
