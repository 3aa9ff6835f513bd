#!/bin/bash
# `dtplan calibrate --device cuda` (docs/hardware.md "Calibrating a GPU") on any machine.
# Bad input is refused before any measuring: one line naming it, exit 2, nothing written
# (an unknown device, a CPU --base, a FIFO, a file calibrate did not write, a folder that
# cannot take a file). Without a usable GPU (no CUDA in the build, no driver, no device):
# exit 1, one line saying why, nothing written. With a GPU: the profile is written, loads,
# its measured fractions are in (0, 1], and dtplan estimate reads it.
# Usage: test_calibrate_cli.sh DTPLAN DTRUN SRCDIR
set -u
DTPLAN=$1
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3
TMP=$(mktemp -d /tmp/dt_test_calgpu_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=1; }

# refuses: args, want-regex
refuses() {
    local want=$1
    shift
    "$DTPLAN" calibrate "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    [ "$rc" -eq 2 ] || fail "calibrate $* exited $rc, expected 2"
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "calibrate $*: expected one stderr line, got: $(cat "$TMP/err")"
    grep -q "^dtplan: calibrate: .*$want" "$TMP/err" || fail "calibrate $*: the line does not say '$want': $(cat "$TMP/err")"
}
refuses "expected cpu (the default) or cuda" --device tpu -o "$TMP/p.json"
refuses "CPU profile" --device cuda -o "$TMP/p.json" --base cpu
refuses "unknown hardware" --device cuda -o "$TMP/p.json" --base no-such-gpu
refuses "unknown option '--plan'" --device cuda -o "$TMP/p.json" --plan x.json
refuses "expects an integer" --device cuda -o "$TMP/p.json" --gpu first
refuses "-o PATH is required" --device cuda
mkfifo "$TMP/fifo"
refuses "not a regular file" --device cuda -o "$TMP/fifo"
printf '{"mine": true}\n' >"$TMP/user.json"
refuses "not a profile calibrate wrote" --device cuda -o "$TMP/user.json"
[ "$(cat "$TMP/user.json")" = '{"mine": true}' ] || fail "the user's file at -o was changed"
refuses "cannot write into" --device cuda -o "$TMP/no-such-dir/p.json"
[ -e "$TMP/p.json" ] && fail "a refused calibrate wrote its profile"

"$DTPLAN" calibrate --device cuda -o "$TMP/p.json" >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 1 ] || fail "without a GPU calibrate exited $rc, expected 1"
    # the progress line, then the reason
    grep -q "^dtplan: calibrate: cuda: .*\(no usable GPU\|no GPU visible\|back-end cannot be loaded\)" "$TMP/err" ||
        fail "the failure does not name the reason: $(cat "$TMP/err")"
    [ "$(grep -c -v "timing GEMMs" "$TMP/err")" -eq 1 ] || fail "expected one error line, got: $(cat "$TMP/err")"
    [ -e "$TMP/p.json" ] && fail "a failed calibrate wrote its profile"
    ls "$TMP" | grep -q tmp && fail "a failed calibrate left a temporary file: $(ls "$TMP")"
    echo "no usable GPU: calibrate exited $rc with: $(grep -v "timing GEMMs" "$TMP/err")"
    exit $fails
fi
cat "$TMP/out"
python3 - "$TMP/p.json" <<'PY' || fail "the written profile's measured fields are out of range"
import json, sys
p = json.load(open(sys.argv[1]))
f = p["gemm_peak_fraction"]
assert 0 < f["fp32"] <= 1 and 0 <= f["bf16"] <= 1 and 0 <= f["fp16"] <= 1, f
assert 0 < p["mem_bw_fraction"] <= 1, p["mem_bw_fraction"]
assert 0 < p["op_overhead_s"] < 1e-3, p["op_overhead_s"]
assert p["sm_count"] >= 1 and p["device_mem_bytes"] > p["reserve_bytes"]
assert p["source"].startswith("dtplan calibrate --device cuda")
PY
"$DTPLAN" estimate --params 7B --gpus 8 --hardware "$TMP/p.json" >"$TMP/est" 2>&1 || fail "estimate cannot read the profile: $(cat "$TMP/est")"
# a second calibration replaces the profile the first one wrote
"$DTPLAN" calibrate --device cuda -o "$TMP/p.json" --name second >/dev/null 2>&1 || fail "recalibrating into its own profile failed"
grep -q '"name": "second"' "$TMP/p.json" || fail "the second calibration did not replace the profile"
exit $fails
