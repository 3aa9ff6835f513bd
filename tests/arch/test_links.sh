#!/bin/bash
# What each program loads at start-up (docs/architecture.md "Libraries follow the
# rooms"): dtplan needs no MPI, OpenBLAS, oneDNN, CUDA or NCCL; dtrun needs no plotting and
# no CUDA; the CUDA back-end module, when built, finds every engine function it
# calls among dtrun's exported symbols (otherwise dlopen would fail on a GPU box).
# Usage: test_links.sh DTPLAN DTRUN SRCDIR
set -u
DTPLAN=$1
DTRUN=$2
fails=0
for tool in readelf nm; do
    command -v $tool >/dev/null || { echo "FAIL: $tool (binutils) is missing"; exit 1; }
done
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
forbid() {   # forbid PROGRAM REGEX WHY
    local bad
    bad=$(needed "$1" | grep -E "$2")
    if [ -n "$bad" ]; then echo "FAIL: $(basename "$1") needs $(echo $bad) ($3)"; fails=1
    else echo "ok: $(basename "$1") needs none of $2"; fi
}
[ -n "$(needed "$DTPLAN")" ] || { echo "FAIL: readelf shows no NEEDED entries for $DTPLAN"; exit 1; }
forbid "$DTPLAN" '^lib(mpi|open-rte|open-pal|openblas|gomp|dnnl|cudart|cublas|cublasLt|nccl|nettle|isal)\.' \
    "dtplan plans; it links no engine, MPI, CUDA or hashing library"
forbid "$DTRUN" '^lib(plot|cudart|cublas|cublasLt|nccl)\.' \
    "dtrun draws nothing and loads CUDA only for a CUDA plan"
MOD="$(dirname "$DTRUN")/libdtcuda.so"
if [ -e "$MOD" ]; then
    missing=0
    for s in $(nm -D --undefined-only "$MOD" | awk '$2 ~ /^dt_/ {print $2}'); do
        nm -D --defined-only "$DTRUN" | awk '{print $3}' | grep -qx "$s" ||
            { echo "FAIL: libdtcuda.so needs $s, which dtrun does not export"; missing=1; fails=1; }
    done
    [ $missing -eq 0 ] && echo "ok: every engine symbol libdtcuda.so needs is exported by dtrun"
    needed "$MOD" | grep -q '^libcudart\.' || { echo "FAIL: libdtcuda.so does not link cudart"; fails=1; }
else
    echo "ok: no CUDA back-end in this build (nothing to check for the module)"
fi
[ $fails -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fails
