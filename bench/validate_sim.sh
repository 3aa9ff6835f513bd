#!/bin/bash
# validate_sim.sh — the time model's validation as a benchmark (docs/benchmarks.md
# "Simulated vs measured step time"): on CPU runs with 2 and 4
# ranks, every ZeRO stage, with and without optimizer offload and activation
# checkpointing, the simulated step time (dtplan simulate) and the analytical one
# (dt_time_estimate, the plan's prediction in run-report.json) against the
# measured one, with a profile measured by `dtplan calibrate --plan` (the engine's
# kernels at tiny-cpu's shapes, fitted in situ to its fwd + bwd). Target: simulated within 15 %.
#
# usage: bench/validate_sim.sh [BUILD_DIR] [--steps N] [--rounds R] [--profile P] [--quick]
#   BUILD_DIR   where dtplan and dtrun are (default build)
#   --steps N   optimizer steps per run (default 20; the first 2 are warm-up)
#   --rounds R  passes over all configs (default 3), round-robin, so a busy
#               minute lands on every config a little instead of on a few;
#               each round calibrates first and runs every config once
#   --profile   use this hardware profile in every round instead of calibrating
#   --quick     2 ranks, offload none only, 1 round (a smoke run)
# Per config: measured = median over rounds of the median step time of steps
# 3..N (metrics.jsonl, rank 0); simulated / analytical = median over rounds of
# each round's prediction; spread = (max - min) / median of the rounds' measured
# times, the noise the config saw. Prints one row per config and a summary;
# writes the table to OUT/table.md (OUT = $DT_VALIDATE_OUT or a temporary
# directory). The machine must be quiet: the load average is printed before and
# after every round. docs/benchmarks.md has a recorded run.
set -u
BUILD=build STEPS=20 ROUNDS=3 PROFILE="" QUICK=0
WARMUP=2   # steps excluded from the median: allocation, first-touch, thread start-up
while [ $# -gt 0 ]; do
    case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --profile) PROFILE=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
    -*) echo "validate_sim.sh: unknown option '$1'" >&2; exit 2 ;;
    *) BUILD=$1; shift ;;
    esac
done
SRC=$(cd "$(dirname "$0")/.." && pwd)
DTPLAN=$BUILD/dtplan DTRUN=$BUILD/dtrun
for b in "$DTPLAN" "$DTRUN"; do [ -x "$b" ] || { echo "validate_sim.sh: no $b (build first)" >&2; exit 2; }; done
for t in jq mpirun awk; do command -v $t >/dev/null || { echo "validate_sim.sh: needs $t" >&2; exit 2; }; done
for v in "$STEPS" "$ROUNDS"; do
    case "$v" in '' | *[!0-9]*) echo "validate_sim.sh: --steps and --rounds need numbers" >&2; exit 2 ;; esac
done
[ "$STEPS" -gt "$WARMUP" ] || { echo "validate_sim.sh: --steps must be > $WARMUP (the warm-up steps)" >&2; exit 2; }
[ "$ROUNDS" -ge 1 ] || { echo "validate_sim.sh: --rounds must be >= 1" >&2; exit 2; }
[ -z "$PROFILE" ] || [ -r "$PROFILE" ] || { echo "validate_sim.sh: cannot read profile $PROFILE" >&2; exit 2; }
OUT=${DT_VALIDATE_OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# This validation compares wall-clock steps with a profile calibrated a minute before each
# round: keep calibrate on the wall clock too (its default is thread CPU time, the machine
# without the others' load; bench/validate_sim_sizes.sh compares CPU-time steps against that).
export DT_CALIBRATE_CLOCK=${DT_CALIBRATE_CLOCK:-wall}
load() { cut -d' ' -f1-3 /proc/loadavg; }

# The plan: configs/plans/tiny-cpu.json (GPT-2, 2 layers, C=64) with the profile's
# numbers, W ranks on one node, the stage / offload / checkpointing under test.
mkplan() { # PROFILE W STAGE OFFLOAD CKPT OUT.json
    jq --slurpfile hw "$1" --argjson w "$2" --argjson s "$3" --arg off "$4" --argjson k "$5" '
      .parallel.world_size=$w | .cluster.gpus_per_node=$w | .parallel.zero_stage=$s
      | .parallel.offload_optimizer=$off
      | .batch.global_batch=(.batch.micro_batch*.batch.grad_accum*$w)
      | .activations.ckpt_layers=(if $k > 0 then .model.n_layer else 0 end)
      | .schedule.total_steps=100 | .output.save_interval=0 | .data.eval_interval=0
      | .cluster.hardware |= (. + ($hw[0] | {name, device_mem_bytes, reserve_bytes, peak_flops,
          achievable_flops, mem_bw, intra_busbw, intra_alpha_s, h2d_bw, host_mem_bytes,
          cpu_adam_params_per_s, nvme_bw, nvme_bytes, attention_flops, op_overhead_s, elementwise_bw,
          thread_efficiency, thread_cores, intra_busbw_reduce_scatter, intra_busbw_allgather}
          | with_entries(select(.value != null))))
      | .prediction={"valid":false}' "$SRC/configs/plans/tiny-cpu.json" > "$6"
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
pct() { awk -v a="$1" -v m="$2" 'BEGIN { printf "%+.1f", (a - m) / m * 100 }'; }

CONFIGS=()
worlds="2 4" offs="none cpu"
[ "$QUICK" = 1 ] && worlds=2 offs=none ROUNDS=1
for W in $worlds; do
    for S in 0 1 2 3; do
        for OFF in $offs; do
            [ "$S" = 0 ] && [ "$OFF" != none ] && continue   # offload needs ZeRO >= 1
            for K in 0 1; do CONFIGS+=("$W $S $OFF $K"); done
        done
    done
done

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); load before: $(load)"
echo "${#CONFIGS[@]} configs x $ROUNDS round(s), $STEPS steps each (median of steps $((WARMUP + 1))..$STEPS)"
for r in $(seq 1 "$ROUNDS"); do
    prof=$PROFILE
    if [ -z "$PROFILE" ]; then   # the shapes of the runs: tiny-cpu at 2 ranks, stage 0
        prof=$OUT/local-r$r.json
        mkplan "$SRC/configs/hardware/cpu.json" 2 0 none 0 "$OUT/shape.json"
        "$DTPLAN" calibrate -o "$prof" --plan "$OUT/shape.json" | sed "s/^/round $r: /" ||
            { echo "validate_sim.sh: calibrate failed" >&2; exit 1; }
    fi
    jq -r --arg r "$r" '"round \($r) profile: fp32 \(.achievable_flops.fp32/1e9|floor) GFLOP/s, attention \((.attention_flops//0)/1e9*10|floor/10) GFLOP/s, op \((.op_overhead_s//0)*1e6*100|floor/100) us, element-wise \((.elementwise_bw//0)/1e9*10|floor/10) GB/s, AdamW \(.cpu_adam_params_per_s/1e6|floor) M params/s, busbw \(.intra_busbw/1e9*100|floor/100) GB/s"' "$prof"
    for cfg in "${CONFIGS[@]}"; do
        set -- $cfg
        tag=w$1-s$2-$3-k$4
        plan=$OUT/$tag-r$r.json
        mkplan "$prof" "$1" "$2" "$3" "$4" "$plan"
        if ! "$DTRUN" "$plan" --out "$OUT/$tag-r$r" --overwrite --max-steps "$STEPS" --quiet 2>"$OUT/$tag-r$r.err"; then
            echo "round $r $tag: dtrun failed: $(tail -1 "$OUT/$tag-r$r.err")"
            continue
        fi
        meas=$(jq -r --argjson w "$WARMUP" 'select(.step > $w) | .step_ms' "$OUT/$tag-r$r/metrics.jsonl" | median)
        sim=$("$DTPLAN" simulate "$plan" --json | jq '.step_s * 1000')
        ana=$(jq '.predicted.step_time_s * 1000' "$OUT/$tag-r$r/run-report.json")
        echo "$meas $sim $ana" >> "$OUT/$tag.rounds"
    done
    echo "round $r done; load: $(load)"
done

TABLE=$OUT/table.md
{
    echo "| W | stage | offload | ckpt | measured ms | spread | simulated ms | sim err | analytical ms | ana err |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
} > "$TABLE"
printf "%-2s %-5s %-7s %-4s %12s %7s %13s %8s %14s %8s\n" W stage offload ckpt measured_ms spread simulated_ms sim_err analytic_ms ana_err
n=0 within=0 sum_abs=0
for cfg in "${CONFIGS[@]}"; do
    set -- $cfg
    f=$OUT/w$1-s$2-$3-k$4.rounds
    [ -s "$f" ] || continue
    meas=$(cut -d' ' -f1 "$f" | median) sim=$(cut -d' ' -f2 "$f" | median) ana=$(cut -d' ' -f3 "$f" | median)
    spread=$(cut -d' ' -f1 "$f" | sort -g | awk -v m="$meas" 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.0f%%", (hi - lo) / m * 100 }')
    es=$(pct "$sim" "$meas") ea=$(pct "$ana" "$meas")
    kname=$([ "$4" = 1 ] && echo all || echo 0)
    printf "%-2s %-5s %-7s %-4s %12.2f %7s %13.2f %7s%% %14.2f %7s%%\n" "$1" "$2" "$3" "$kname" "$meas" "$spread" "$sim" "$es" "$ana" "$ea"
    echo "| $1 | $2 | $3 | $kname | $(printf %.2f "$meas") | $spread | $(printf %.2f "$sim") | $es % | $(printf %.2f "$ana") | $ea % |" >> "$TABLE"
    n=$((n + 1))
    awk -v e="$es" 'BEGIN { exit !(e <= 15 && e >= -15) }' && within=$((within + 1))
    sum_abs=$(awk -v s="$sum_abs" -v e="$es" 'BEGIN { print s + (e < 0 ? -e : e) }')
done
echo "load after: $(load)"
[ "$n" -gt 0 ] || { echo "validate_sim.sh: no run completed" >&2; exit 1; }
summary="simulated within 15% of measured: $within / $n configs; mean |error| $(awk -v s="$sum_abs" -v n="$n" 'BEGIN { printf "%.1f", s / n }')%"
echo "$summary"
echo "$summary" >> "$TABLE"
echo "table: $TABLE"
