#!/bin/bash
# A "device": "cuda" plan through dtrun on any machine. Without a usable GPU
# (no CUDA in the build, no driver, no device) dtrun exits non-zero with ONE
# stderr line naming the reason (dt_device_get's) and writes nothing; with a
# GPU the same plan trains two steps and writes its metrics.
# Usage: test_cuda_cli.sh DTPLAN DTRUN SRCDIR
set -u
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3
TMP=$(mktemp -d /tmp/dt_test_cudacli_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
python3 "$SRC/tests/gpu/make_cuda_plan.py" "$SRC/configs/plans/tiny-cpu.json" "$TMP/cuda.json" ||
    { echo "FAIL: could not write the cuda plan"; exit 1; }
"$DTRUN" "$TMP/cuda.json" --out "$TMP/out" --quiet --max-steps 2 >"$TMP/stdout" 2>"$TMP/err"
rc=$?
if [ "$rc" -eq 0 ]; then   # a GPU is there: the plan trained
    n=$(wc -l <"$TMP/out/metrics.jsonl" 2>/dev/null || echo 0)
    [ "$n" -eq 2 ] || { echo "FAIL: a GPU run wrote $n metrics lines, expected 2"; exit 1; }
    echo "GPU visible: the cuda plan trained 2 steps"
    exit 0
fi
fails=0
[ "$(wc -l <"$TMP/err")" -eq 1 ] || { echo "FAIL: expected one stderr line, got: $(cat "$TMP/err")"; fails=1; }
grep -q "^dtrun: .*\(cuda: no usable GPU\|cuda: no GPU visible\|no CUDA backend\)" "$TMP/err" ||
    { echo "FAIL: the line does not name the reason: $(cat "$TMP/err")"; fails=1; }
[ -e "$TMP/out" ] && { echo "FAIL: a refused cuda run created its output directory"; fails=1; }
echo "no usable GPU: dtrun exited $rc with: $(cat "$TMP/err")"
exit $fails
