#!/usr/bin/env bash
# bench/vs_pytorch.sh — our forward + backward of a catalog model (bench/bench_gpt2
# --model; default GPT-2 124M, `--model qwen3-0.6b` for the Llama family) against
# PyTorch eager's (transformers' class for the same config.json, models/catalog/NAME.json,
# bench/torch_lm_step.py), fp32 and
# bf16 (ours: mixed-bf16; PyTorch: autocast to bf16), 2 threads each, runs interleaved
# (ours, PyTorch, ours, ...: a busy moment hits both), once with OPENBLAS_CORETYPE as
# the environment sets it and once forced to Haswell. Prints each side's median
# step (the median over runs of each run's mean step) and its best step (the fastest
# single step of any run: on a shared machine the least disturbed one), the ratio of
# each, naming the CPU, the OpenBLAS core and the GEMM kernels ours chose
# (engine/device/dt_gemm_cpu.h). PyTorch uses MKL and its own oneDNN, whatever
# OPENBLAS_CORETYPE says. OPENBLAS_CORETYPE is never unset.
#
# --clock cpu (for a machine shared with other jobs) compares CPU time per step and
# thread instead: PyTorch's process CPU time over its timed steps; ours the CPU time of
# a run of 1 + N steps minus that of a run of 1 step (GNU time; the set-up cancels), both
# divided by the thread count. It leaves out the time a process was preempted; it
# still counts the OpenMP threads' spin-waiting (libgomp on both sides).
#
# --optimizer: each step a full training step (bench_gpt2 --optimizer: clip + AdamW,
# dt_optim.h; torch_lm_step.py --optimizer: clip_grad_norm_ + torch.optim.AdamW with the
# same settings); both rows are printed, "fwd+bwd" (inside the training step) and
# "train step". With --clock cpu the one figure is the training step's.
#
# Dev time only: needs a Python with torch and transformers (--python, default
# /tmp/hfvenv/bin/python). Results: docs/benchmarks.md "Against PyTorch".
#
# Usage: bench/vs_pytorch.sh [--build DIR] [--python PY] [--model NAME] [--batch B] [--seq T]
#                            [--steps N] [--rounds R] [--threads N] [--clock wall|cpu]
#                            [--optimizer]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=build PY=/tmp/hfvenv/bin/python MODEL=gpt2 B=4 T=64 STEPS=3 ROUNDS=3 THREADS=2 CLOCK=wall
OPT=()
while [ $# -gt 0 ]; do
  case "$1" in
    --optimizer) OPT=(--optimizer); shift; continue ;;
    --build) BUILD=$2 ;; --python) PY=$2 ;; --model) MODEL=$2 ;; --batch) B=$2 ;; --seq) T=$2 ;;
    --steps) STEPS=$2 ;; --rounds) ROUNDS=$2 ;; --threads) THREADS=$2 ;; --clock) CLOCK=$2 ;;
    *) echo "vs_pytorch.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
OURS="$BUILD/bench/bench_gpt2"
[ -x "$OURS" ] || { echo "vs_pytorch.sh: $OURS not built" >&2; exit 2; }
CONFIG="$HERE/../models/catalog/$MODEL.json"
[ -f "$CONFIG" ] || { echo "vs_pytorch.sh: no catalog model '$MODEL' ($CONFIG); see models/catalog/" >&2; exit 2; }
"$PY" -c 'import torch, transformers' 2>/dev/null ||
  { echo "vs_pytorch.sh: $PY lacks torch / transformers (pip install torch transformers)" >&2; exit 2; }

# "fwd+bwd: mean M ms (best B ms) ..." and, with --optimizer, "train step: mean M ms
# (best B ms) ..." -> "M B [SM SB]" (one line)
mean_best() {
  sed -n -e 's/^fwd+bwd: mean \([0-9.]*\) ms (best \([0-9.]*\) ms).*/\1 \2/p' \
         -e 's/^train step: mean \([0-9.]*\) ms (best \([0-9.]*\) ms).*/\1 \2/p' | paste -sd' '
}
# ours, CPU ms per step and thread: (CPU of 1 + STEPS steps - CPU of 1 step) / STEPS / THREADS
ours_cpu() {   # env... -- bench_gpt2 args (without --steps)
  local c1 c2
  c1=$(/usr/bin/time -f '%U %S' "$@" --steps 1 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}')
  c2=$(/usr/bin/time -f '%U %S' "$@" --steps $((1 + STEPS)) 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}')
  awk -v a="$c1" -v b="$c2" -v s="$STEPS" -v t="$THREADS" 'BEGIN {printf "%.1f", (b - a) / s / t * 1e3}'
}
ratio() { awk -v o="$1" -v p="$2" 'BEGIN {r = p / o; printf (r >= 1 ? "ours %.2fx" : "torch %.2fx"), (r >= 1 ? r : 1 / r)}'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cpus)"
echo "load before: $(uptime | sed 's/.*load average/load average/')"
WHAT=$([ ${#OPT[@]} -gt 0 ] && echo "fwd+bwd and train step (clip + AdamW)" || echo fwd+bwd)
echo "$MODEL, B=$B T=$T, $WHAT, $THREADS threads each, median of $ROUNDS interleaved runs of $STEPS steps"
if [ "$CLOCK" = cpu ]; then
  echo "CPU time per step and thread (ms), median of $ROUNDS interleaved rounds"
  printf '%-9s %-10s %-18s %9s %9s %-12s\n' precision row "coretype(core)" "ours cpu" "torch cpu" "ratio"
else
  printf '%-9s %-10s %-18s %9s %9s %-12s %9s %9s %-12s\n' precision row "coretype(core)" "ours med" "torch med" "ratio" "ours best" "torch best" "ratio"
fi
# one row: precision, label, core, then the per-run means and bests of each side
row() {   # prec label core "ours means" "torch means" "ours bests" "torch bests"
  local om pm obb pbb
  om=$(printf '%s\n' $4 | median) pm=$(printf '%s\n' $5 | median)
  obb=$(printf '%s\n' $6 | sort -g | head -1) pbb=$(printf '%s\n' $7 | sort -g | head -1)
  printf '%-9s %-10s %-18s %9.1f %9.1f %-12s %9.1f %9.1f %-12s\n' "$1" "$2" "$3" "$om" "$pm" "$(ratio "$om" "$pm")" "$obb" "$pbb" "$(ratio "$obb" "$pbb")"
}
for ct in asis Haswell; do
  if [ "$ct" = asis ]; then envs=(); ctname=${OPENBLAS_CORETYPE:-unset}; else envs=(OPENBLAS_CORETYPE=Haswell); ctname=Haswell; fi
  gemm=$(env "${envs[@]}" "$BUILD/bench/bench_gemm" --describe | sed 's/^gemm: //')
  core=$(echo "$gemm" | sed -n 's/.*openblas \([A-Za-z0-9_]*\),.*/\1/p')
  for prec in fp32 bf16; do
    ours_prec=$([ $prec = fp32 ] && echo fp32 || echo mixed-bf16)
    o=() p=() ob=() pb=()
    if [ "$CLOCK" = cpu ]; then
      for r in $(seq "$ROUNDS"); do
        o+=("$(ours_cpu env "${envs[@]}" OMP_NUM_THREADS=$THREADS "$OURS" --model "$MODEL" --precision "$ours_prec" --batch "$B" --seq "$T" "${OPT[@]}")")
        p+=("$(env "${envs[@]}" OMP_NUM_THREADS=$THREADS "$PY" "$HERE/torch_lm_step.py" --config "$CONFIG" --precision $prec --batch "$B" --seq "$T" --steps "$STEPS" --threads "$THREADS" "${OPT[@]}" 2>/dev/null | sed -n 's/^cpu per thread: \([0-9.]*\) ms.*/\1/p')")
      done
      om=$(printf '%s\n' "${o[@]}" | median) pm=$(printf '%s\n' "${p[@]}" | median)
      label=$([ ${#OPT[@]} -gt 0 ] && echo "train step" || echo fwd+bwd)
      printf '%-9s %-10s %-18s %9.1f %9.1f %-12s\n' "$prec" "$label" "$ctname($core)" "$om" "$pm" "$(ratio "$om" "$pm")"
      echo "          ours ($ours_prec; $(echo "$gemm" | sed 's/ (.*//')): ${o[*]} ms; torch ${p[*]} ms"
      continue
    fi
    so=() sp=() sob=() spb=()
    for r in $(seq "$ROUNDS"); do
      read -r m b sm sb < <(env "${envs[@]}" OMP_NUM_THREADS=$THREADS "$OURS" --model "$MODEL" --precision "$ours_prec" --batch "$B" --seq "$T" --steps "$STEPS" "${OPT[@]}" | mean_best)
      o+=("$m") ob+=("$b") so+=("${sm:-}") sob+=("${sb:-}")
      read -r m b sm sb < <(env "${envs[@]}" OMP_NUM_THREADS=$THREADS "$PY" "$HERE/torch_lm_step.py" --config "$CONFIG" --precision $prec --batch "$B" --seq "$T" --steps "$STEPS" --threads "$THREADS" "${OPT[@]}" 2>/dev/null | mean_best)
      p+=("$m") pb+=("$b") sp+=("${sm:-}") spb+=("${sb:-}")
    done
    row "$prec" fwd+bwd "$ctname($core)" "${o[*]}" "${p[*]}" "${ob[*]}" "${pb[*]}"
    [ ${#OPT[@]} -gt 0 ] && row "$prec" "train step" "$ctname($core)" "${so[*]}" "${sp[*]}" "${sob[*]}" "${spb[*]}"
    echo "          ours ($ours_prec; $(echo "$gemm" | sed 's/ (.*//')): means ${o[*]} ms${OPT:+, train steps ${so[*]} ms}; torch means ${p[*]} ms${OPT:+, train steps ${sp[*]} ms}"
  done
done
echo "load after: $(uptime | sed 's/.*load average/load average/')"
