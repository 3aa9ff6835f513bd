#!/bin/bash
# One build runs CPU plans where the CUDA back-end cannot be loaded: with the
# module hidden (DT_CUDA_BACKEND names a file that is not there), dtrun trains a
# CPU plan, and a CUDA plan fails with one line that says why and what to do,
# exit non-zero, nothing written. Also: a module from another build (wrong
# interface version) is refused the same way.
# Usage: test_no_cuda.sh DTPLAN DTRUN SRCDIR
set -u
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3
TMP=$(mktemp -d /tmp/dt_test_nocuda_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0
export DT_CUDA_BACKEND="$TMP/hidden/libdtcuda.so"

# a CPU plan trains
if "$DTRUN" "$SRC/configs/plans/tiny-cpu.json" --out "$TMP/cpu" --quiet --max-steps 2 >"$TMP/cpu.out" 2>&1 &&
    [ "$(wc -l <"$TMP/cpu/metrics.jsonl")" -eq 2 ]; then
    echo "ok: a CPU plan trains with the CUDA back-end hidden"
else
    echo "FAIL: the CPU plan did not train with the back-end hidden: $(cat "$TMP/cpu.out")"; fails=1
fi

python3 "$SRC/tests/gpu/make_cuda_plan.py" "$SRC/configs/plans/tiny-cpu.json" "$TMP/cuda.json" ||
    { echo "FAIL: could not write the cuda plan"; exit 1; }
refused() {   # refused NAME PATTERN: the CUDA plan fails with one line matching PATTERN
    "$DTRUN" "$TMP/cuda.json" --out "$TMP/$1" --quiet --max-steps 2 >"$TMP/$1.stdout" 2>"$TMP/$1.err"
    local rc=$?
    if [ $rc -eq 0 ]; then echo "FAIL: $1: the CUDA plan ran"; fails=1; return; fi
    [ "$(wc -l <"$TMP/$1.err")" -eq 1 ] || { echo "FAIL: $1: expected one line, got: $(cat "$TMP/$1.err")"; fails=1; }
    grep -Eq "$2" "$TMP/$1.err" || { echo "FAIL: $1: the line does not say why: $(cat "$TMP/$1.err")"; fails=1; }
    [ -e "$TMP/$1" ] && { echo "FAIL: $1: a refused run created its output directory"; fails=1; }
    echo "ok: $1: exit $rc, $(cat "$TMP/$1.err")"
}
if "$DTRUN" --help 2>/dev/null | grep -q . && [ -e "$(dirname "$DTRUN")/libdtcuda.so" ]; then
    refused hidden "^dtrun: .*CUDA back-end cannot be loaded .*hidden/libdtcuda.so.*--hardware cpu"
    # a module of another interface version
    if command -v cc >/dev/null; then
        printf 'const int dt_cuda_backend_abi = 999;\n' >"$TMP/other.c"
        cc -shared -fPIC -o "$TMP/other.so" "$TMP/other.c"
        DT_CUDA_BACKEND="$TMP/other.so" refused other-build "^dtrun: .*from another build \(interface 999"
    else
        echo "FAIL: cc is missing (build-essential)"; fails=1
    fi
else
    refused no-backend "no CUDA backend"
fi
[ $fails -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fails
