#!/usr/bin/env bash
# Whole-process cost of the planner: `dtplan solve --mem 80G --params 32B --gpus 8`
# wall time (median of N runs, target < 20 ms) and `dtplan --help` peak RSS (target
# < 10 MB), measured by the OS (GNU time: elapsed, max RSS). With a second build
# directory, the same figures for it side by side (e.g. a build of an older commit).
# Usage: bash bench/bench_startup.sh [BUILD_DIR] [OTHER_BUILD_DIR] [N]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
OTHER=${2:-}
N=${3:-21}
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "bench_startup: $TIME missing (apt-get install time)" >&2; exit 2; }
[ -x "$B/dtplan" ] || { echo "bench_startup: no $B/dtplan: build first" >&2; exit 2; }
TMPF=$(mktemp)
trap 'rm -f "$TMPF"' EXIT

# median wall ms and max RSS MiB over N runs of a command
measure() {
    local ms=() kb=() i out
    for ((i = 0; i < N; i++)); do
        "$TIME" -o "$TMPF" -f '%e %M' "$@" >/dev/null 2>&1 || true
        out=$(tail -1 "$TMPF")
        ms+=("$(awk '{printf "%.1f", $1 * 1000}' <<<"$out")")
        kb+=("$(awk '{print $2}' <<<"$out")")
    done
    local med_ms med_kb
    med_ms=$(printf '%s\n' "${ms[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    med_kb=$(printf '%s\n' "${kb[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "$med_ms $(awk -v k="$med_kb" 'BEGIN {printf "%.1f", k / 1024}')"
}
# GNU time's %e has 10 ms resolution: time the solve with the shell's clock too
wall_ms() {
    local i t0 t1 v=()
    for ((i = 0; i < N; i++)); do
        t0=$(date +%s%N); "$@" >/dev/null 2>&1; t1=$(date +%s%N)
        v+=("$(( (t1 - t0) / 1000 ))")
    done
    printf '%s\n' "${v[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)] / 1000}'
}
row() {   # row LABEL BUILD
    local b=$2 solve help
    solve=$(wall_ms "$b/dtplan" solve --mem 80G --params 32B --gpus 8)
    help=$(measure "$b/dtplan" --help)
    printf '%-10s %18s %18s %16s\n' "$1" "$solve" "$(awk '{print $2}' <<<"$help")" \
        "$(readelf -d "$b/dtplan" | grep -c NEEDED)"
}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "median of $N runs; solve = whole process, fork to exit"
printf '%-10s %18s %18s %16s\n' build "solve 32B/8 (ms)" "--help RSS (MiB)" "NEEDED libs"
row this "$B"
[ -n "$OTHER" ] && row other "$OTHER"
printf '%-10s %18s %18s\n' target "< 20" "< 10"
