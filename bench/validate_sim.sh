#!/bin/bash
# validate_sim.sh — issue 7's validation as a benchmark: on CPU runs with 2 and 4
# ranks, every ZeRO stage, with and without optimizer offload and activation
# checkpointing, the simulated step time (dtplan simulate) and the analytical one
# (dt_time_estimate, the plan's prediction in run-report.json) against the
# measured one (median step time from metrics.jsonl, the first step excluded),
# with a profile measured by `dtplan calibrate`. Target: simulated within 15 %.
#
# usage: bench/validate_sim.sh [BUILD_DIR] [--steps N] [--profile local.json] [--quick]
#   BUILD_DIR   where dtplan and dtrun are (default build)
#   --steps N   optimizer steps per run (default 5; the median is over steps 2..N)
#   --profile   use this hardware profile instead of calibrating now
#   --quick     2 ranks, offload none only (a smoke run)
# Prints one row per config and a summary; writes the table to OUT/table.md
# (OUT = $DT_VALIDATE_OUT or a temporary directory). The machine must be quiet:
# the load average is printed before and after, and a shared machine makes
# measured times (and so the errors) noisy. docs/benchmarks.md has a recorded run.
set -u
BUILD=build STEPS=5 PROFILE="" QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --profile) PROFILE=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "validate_sim.sh: unknown option '$1'" >&2; exit 2 ;;
    *) BUILD=$1; shift ;;
    esac
done
SRC=$(cd "$(dirname "$0")/.." && pwd)
DTPLAN=$BUILD/dtplan DTRUN=$BUILD/dtrun
for b in "$DTPLAN" "$DTRUN"; do [ -x "$b" ] || { echo "validate_sim.sh: no $b (build first)" >&2; exit 2; }; done
for t in jq mpirun; do command -v $t >/dev/null || { echo "validate_sim.sh: needs $t" >&2; exit 2; }; done
case "$STEPS" in '' | *[!0-9]*) echo "validate_sim.sh: --steps needs a number >= 2" >&2; exit 2 ;; esac
[ "$STEPS" -ge 2 ] || { echo "validate_sim.sh: --steps needs a number >= 2" >&2; exit 2; }
OUT=${DT_VALIDATE_OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -z "$PROFILE" ]; then
    PROFILE=$OUT/local.json
    "$DTPLAN" calibrate -o "$PROFILE" || { echo "validate_sim.sh: calibrate failed" >&2; exit 1; }
fi
jq -r '"profile: fp32 \(.achievable_flops.fp32/1e9|floor) GFLOP/s, attention \((.attention_flops//0)/1e9*10|floor/10) GFLOP/s, op \((.op_overhead_s//0)*1e6*100|floor/100) us, element-wise \((.elementwise_bw//0)/1e9*10|floor/10) GB/s, mem \(.mem_bw/1e9*10|floor/10) GB/s, busbw \(.intra_busbw/1e9*100|floor/100) GB/s"' "$PROFILE"

# The plan: configs/plans/tiny-cpu.json (GPT-2, 2 layers, C=64) with the profile's
# numbers, W ranks on one node, the stage / offload / checkpointing under test.
mkplan() { # W STAGE OFFLOAD CKPT OUT.json
    jq --slurpfile hw "$PROFILE" --argjson w "$1" --argjson s "$2" --arg off "$3" --argjson k "$4" '
      .parallel.world_size=$w | .cluster.gpus_per_node=$w | .parallel.zero_stage=$s
      | .parallel.offload_optimizer=$off
      | .batch.global_batch=(.batch.micro_batch*.batch.grad_accum*$w)
      | .activations.ckpt_layers=(if $k > 0 then .model.n_layer else 0 end)
      | .schedule.total_steps=100 | .output.save_interval=0 | .data.eval_interval=0
      | .cluster.hardware |= (. + ($hw[0] | {name, device_mem_bytes, reserve_bytes, peak_flops,
          achievable_flops, mem_bw, intra_busbw, intra_alpha_s, h2d_bw, host_mem_bytes,
          cpu_adam_params_per_s, nvme_bw, nvme_bytes, attention_flops, op_overhead_s, elementwise_bw}
          | with_entries(select(.value != null))))
      | .prediction={"valid":false}' "$SRC/configs/plans/tiny-cpu.json" > "$5"
}
pct() { awk -v a="$1" -v m="$2" 'BEGIN { printf "%+.1f", (a - m) / m * 100 }'; }

TABLE=$OUT/table.md
{
    echo "| W | stage | offload | ckpt | measured ms | simulated ms | sim err | analytical ms | ana err |"
    echo "|---|---|---|---|---|---|---|---|---|"
} > "$TABLE"
printf "%-2s %-5s %-7s %-4s %12s %13s %8s %14s %8s\n" W stage offload ckpt measured_ms simulated_ms sim_err analytic_ms ana_err
n=0 within=0 sum_abs=0
worlds="2 4" offs="none cpu"
[ "$QUICK" = 1 ] && worlds=2 offs=none
for W in $worlds; do
    for S in 0 1 2 3; do
        for OFF in $offs; do
            [ "$S" = 0 ] && [ "$OFF" != none ] && continue   # offload needs ZeRO >= 1
            for K in 0 1; do
                tag=w$W-s$S-$OFF-k$K
                plan=$OUT/$tag.json
                mkplan "$W" "$S" "$OFF" "$K" "$plan"
                if ! "$DTRUN" "$plan" --out "$OUT/$tag" --max-steps "$STEPS" --quiet 2>"$OUT/$tag.err"; then
                    echo "$tag: dtrun failed: $(tail -1 "$OUT/$tag.err")"
                    continue
                fi
                meas=$(jq -s '[.[1:][] | .step_ms] | sort | if length % 2 == 1 then .[length/2|floor]
                              else (.[length/2-1] + .[length/2]) / 2 end' "$OUT/$tag/metrics.jsonl")
                sim=$("$DTPLAN" simulate "$plan" --json | jq '.step_s * 1000')
                ana=$(jq '.predicted.step_time_s * 1000' "$OUT/$tag/run-report.json")
                es=$(pct "$sim" "$meas") ea=$(pct "$ana" "$meas")
                kname=$([ "$K" = 1 ] && echo all || echo 0)
                printf "%-2s %-5s %-7s %-4s %12.2f %13.2f %7s%% %14.2f %7s%%\n" "$W" "$S" "$OFF" "$kname" "$meas" "$sim" "$es" "$ana" "$ea"
                echo "| $W | $S | $OFF | $kname | $(printf %.2f "$meas") | $(printf %.2f "$sim") | $es % | $(printf %.2f "$ana") | $ea % |" >> "$TABLE"
                n=$((n + 1))
                awk -v e="$es" 'BEGIN { exit !(e <= 15 && e >= -15) }' && within=$((within + 1))
                sum_abs=$(awk -v s="$sum_abs" -v e="$es" 'BEGIN { print s + (e < 0 ? -e : e) }')
            done
        done
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$n" -gt 0 ] || { echo "validate_sim.sh: no run completed" >&2; exit 1; }
echo "simulated within 15% of measured: $within / $n configs; mean |error| $(awk -v s="$sum_abs" -v n="$n" 'BEGIN { printf "%.1f", s / n }')%"
echo "table: $TABLE"
