#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for a bounded
# time from its committed seed corpus (tests/fuzz/corpus/NAME). Fails on any
# finding (crash, sanitizer report, leak, timeout, out-of-memory); a finding's
# input is left under BUILD/fuzz-findings/ — add it to the corpus as a
# regression test once fixed. Prints executions per target.
# Usage: bash scripts/fuzz.sh [SECONDS_PER_TARGET] [BUILD_DIR]   (default 60, build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
B=${2:-build-fuzz}
TARGETS="json plan dsconfig userconfig userexport hfconfig safetensors weights shard tokenizer pairdoc ckpt_state adapter image pairshard"
command -v clang >/dev/null || { echo "fuzz: clang missing (scripts/setup.sh installs it)" >&2; exit 1; }
CC=clang cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDT_FUZZ=ON -DDT_SANITIZE=ON \
    -DDT_WITH_CUDA=OFF -DBUILD_TESTING=OFF >/dev/null
cmake --build "$B" -j"$(nproc 2>/dev/null || echo 2)" --target $(for t in $TARGETS; do printf 'fuzz_%s ' "$t"; done) \
    >"$B/build.log" 2>&1 || { tail -20 "$B/build.log"; echo "fuzz: build failed (log: $B/build.log)" >&2; exit 1; }
mkdir -p "$B/fuzz-findings"
fails=0
for t in $TARGETS; do
    work="$B/fuzz-corpus/$t"
    mkdir -p "$work"
    log="$B/fuzz-$t.log"
    # -rss_limit_mb: a reader that allocates by a number in the file must bound it
    if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 OMP_NUM_THREADS=1 \
        "$B/fuzz_$t" "$work" "tests/fuzz/corpus/$t" -max_total_time="$SECS" -timeout=10 \
        -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="$B/fuzz-findings/$t-" >"$log" 2>&1; then
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        echo "fuzz $t: ${execs:-?} executions in ${SECS} s, no findings"
    else
        echo "fuzz $t: FINDING (log: $log; input under $B/fuzz-findings/):"
        grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -5
        fails=$((fails + 1))
    fi
done
[ $fails -eq 0 ] && echo "$(echo $TARGETS | wc -w) passed, 0 failed" || echo "$(( $(echo $TARGETS | wc -w) - fails )) passed, $fails failed"
exit $fails
