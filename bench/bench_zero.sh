#!/bin/bash
# bench_zero.sh — docs/benchmarks.md's ZeRO-per-stage figure: GPT-2 124M on 2 CPU
# ranks, per ZeRO stage, the
# measured step time and communication share beside the planner's predicted
# ones (run-report.json) and the error in %.
#
# usage: bench/bench_zero.sh [BUILD_DIR] [--steps N] [--seq T] [--micro B] [--profile P]
#   --steps N   optimizer steps per stage (default 3; the first is excluded, the
#               median of the rest is the measured step time)
#   --seq T     tokens per sequence (default 128), --micro B sequences per rank (default 2)
#   --profile   hardware profile for the prediction (default: `dtplan calibrate
#               --plan` now, at this run's shapes)
# fp32, one micro-step per step, the solver's overlap setting, no offload.
# Minutes on 2 cores: GPT-2 124M's attention and GEMMs run on the CPU engine.
set -u
BUILD=build STEPS=3 SEQ=128 MICRO=2 PROFILE=""
while [ $# -gt 0 ]; do
    case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;;
    --micro) MICRO=$2; shift 2 ;;
    --profile) PROFILE=$2; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "bench_zero.sh: unknown option '$1'" >&2; exit 2 ;;
    *) BUILD=$1; shift ;;
    esac
done
DTPLAN=$BUILD/dtplan DTRUN=$BUILD/dtrun
for b in "$DTPLAN" "$DTRUN"; do [ -x "$b" ] || { echo "bench_zero.sh: no $b (build first)" >&2; exit 2; }; done
for n in "$STEPS" "$SEQ" "$MICRO"; do
    case "$n" in '' | *[!0-9]*) echo "bench_zero.sh: --steps/--seq/--micro need positive numbers" >&2; exit 2 ;; esac
done
[ "$STEPS" -ge 2 ] || { echo "bench_zero.sh: --steps must be >= 2 (the first step is excluded)" >&2; exit 2; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
# the solver writes the GPT-2 124M plan (model, units, buckets); with no --profile,
# calibrate then times the engine's kernels at this plan's shapes (B x T tokens,
# GPT-2's widths) and the plan is solved again on the measured profile
solve() { # PROFILE OUT
    "$DTPLAN" solve --mem 4G --model gpt2 --gpus 2 --hardware "$1" --precision fp32 --seq "$SEQ" \
        --global-batch $((2 * MICRO)) --stages 0 --no-offload -o "$2" >/dev/null ||
        { echo "bench_zero.sh: dtplan solve failed" >&2; exit 1; }
}
if [ -z "$PROFILE" ]; then
    solve cpu "$OUT/shape.json"
    jq --argjson m "$MICRO" '.batch.micro_batch=$m | .batch.grad_accum=1' "$OUT/shape.json" > "$OUT/shape-b.json"
    PROFILE=$OUT/local.json
    "$DTPLAN" calibrate -o "$PROFILE" --plan "$OUT/shape-b.json" || { echo "bench_zero.sh: calibrate failed" >&2; exit 1; }
fi
solve "$PROFILE" "$OUT/base.json"
printf "GPT-2 124M, 2 CPU ranks, B=%d T=%d fp32, %d steps (first excluded)\n" "$MICRO" "$SEQ" "$STEPS"
printf "%-5s %12s %13s %8s %11s %12s\n" stage measured_s predicted_s error comm_share pred_share
for S in 0 1 2 3; do
    jq --argjson s "$S" --argjson m "$MICRO" '.parallel.zero_stage=$s | .batch.micro_batch=$m | .batch.grad_accum=1
        | .activations.ckpt_layers=0 | .schedule.total_steps=100 | .output.save_interval=0
        | .data.eval_interval=0 | .prediction={"valid":false}' "$OUT/base.json" > "$OUT/s$S.json"
    if ! "$DTRUN" "$OUT/s$S.json" --out "$OUT/r$S" --max-steps "$STEPS" --quiet 2>"$OUT/err$S"; then
        echo "stage $S: dtrun failed: $(tail -1 "$OUT/err$S")"
        continue
    fi
    # measured: median step of steps 2..N (metrics.jsonl, rank 0; the first warms up)
    meas=$(jq -r 'select(.step > 1) | .step_ms / 1000' "$OUT/r$S/metrics.jsonl" | sort -g |
        awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    jq -r --argjson s "$S" --arg meas "$meas" '
        "\($s)|\($meas)|\(.predicted.step_time_s)|\(.comm.share_of_step // 0)|\(.comm.predicted_share_of_step // 0)"' \
        "$OUT/r$S/run-report.json" |
        awk -F'|' '{ printf "%-5s %12.3f %13.3f %+7.1f%% %10.1f%% %11.1f%%\n", $1, $2, $3, ($3 - $2) / $2 * 100, $4 * 100, $5 * 100 }'
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
