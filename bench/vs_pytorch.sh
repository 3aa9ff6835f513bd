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
# --lora R: both sides train LoRA of rank R (alpha 2R, dropout 0) on every linear of the
# blocks over a frozen base (ours: bench_gpt2 --finetune lora --lora-rank R; PyTorch:
# PEFT's get_peft_model, torch_lm_step.py --lora R), the optimizer over the adapters only.
# Before timing, both sides' trainable and total parameter counts are printed and must
# agree (exit 1 otherwise). Each round also runs our full fine-tuning step at the same
# shapes (a third interleaved run), printed as rows "lora/full" (ours LoRA against ours
# full: "lora N.NNx" = LoRA's step N.NN times faster). fp32 only: the engine trains LoRA
# with fp32 parameters (a bf16 row would compare nothing of ours).
#
# Dev time only: needs a Python with torch and transformers, and peft for --lora
# (--python, default /tmp/hfvenv/bin/python). Results: docs/benchmarks.md "Against PyTorch".
#
# Usage: bench/vs_pytorch.sh [--build DIR] [--python PY] [--model NAME] [--batch B] [--seq T]
#                            [--steps N] [--rounds R] [--threads N] [--clock wall|cpu]
#                            [--optimizer] [--lora R]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=build PY=/tmp/hfvenv/bin/python MODEL=gpt2 B=4 T=64 STEPS=3 ROUNDS=3 THREADS=2 CLOCK=wall
OPT=() LORA=0
while [ $# -gt 0 ]; do
  case "$1" in
    --optimizer) OPT=(--optimizer); shift; continue ;;
    --build) BUILD=$2 ;; --python) PY=$2 ;; --model) MODEL=$2 ;; --batch) B=$2 ;; --seq) T=$2 ;;
    --steps) STEPS=$2 ;; --rounds) ROUNDS=$2 ;; --threads) THREADS=$2 ;; --clock) CLOCK=$2 ;;
    --lora) LORA=$2 ;;
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
case "$LORA" in ''|*[!0-9]*) echo "vs_pytorch.sh: --lora '$LORA': a rank, a positive integer (e.g. --lora 8)" >&2; exit 2 ;; esac
# the method's arguments of each side: ours (FT_OURS) and PyTorch's (FT_TORCH); empty: full
FT_OURS=() FT_TORCH=()
if [ "$LORA" -gt 0 ]; then
  "$PY" -c 'import peft' 2>/dev/null || { echo "vs_pytorch.sh: --lora: $PY lacks peft (pip install peft)" >&2; exit 2; }
  FT_OURS=(--finetune lora --lora-rank "$LORA") FT_TORCH=(--lora "$LORA")
fi
# ours trains LoRA with fp32 parameters only (engine/model/lm.c dt_lm_check_method)
PRECS=$([ "$LORA" -gt 0 ] && echo fp32 || echo "fp32 bf16")

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
ratio() {   # ours other [ours-label other-label]: which side is faster, by how much
  awk -v o="$1" -v p="$2" -v a="${3:-ours}" -v b="${4:-torch}" 'BEGIN {r = p / o; printf "%s %.2fx", (r >= 1 ? a : b), (r >= 1 ? r : 1 / r)}'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cpus)"
echo "load before: $(uptime | sed 's/.*load average/load average/')"
# "trainable params: N of M (...)" of each side at a one-step run; LoRA's sets must agree
if [ "$LORA" -gt 0 ]; then
  tr_o=$(OMP_NUM_THREADS=$THREADS "$OURS" --model "$MODEL" --batch 1 --seq 8 --steps 1 "${FT_OURS[@]}" | sed -n 's/^trainable params: //p')
  tr_p=$(OMP_NUM_THREADS=$THREADS "$PY" "$HERE/torch_lm_step.py" --config "$CONFIG" --batch 1 --seq 8 --steps 1 --threads "$THREADS" "${FT_TORCH[@]}" 2>/dev/null | sed -n 's/^trainable params: //p')
  echo "trainable params: ours $tr_o; torch $tr_p"
  [ "${tr_o%% (*}" = "${tr_p%% (*}" ] && [ -n "$tr_o" ] ||
    { echo "vs_pytorch.sh: --lora $LORA: the trainable / total parameter counts differ (ours '${tr_o%% (*}', torch '${tr_p%% (*}'): not the same model" >&2; exit 1; }
fi
WHAT=$([ ${#OPT[@]} -gt 0 ] && echo "fwd+bwd and train step (clip + AdamW)" || echo fwd+bwd)
[ "$LORA" -gt 0 ] && WHAT="LoRA r $LORA alpha $((2 * LORA)) (PEFT on torch's side; rows lora/full: ours LoRA vs ours full), $WHAT"
echo "$MODEL, B=$B T=$T, $WHAT, $THREADS threads each, median of $ROUNDS interleaved runs of $STEPS steps"
if [ "$CLOCK" = cpu ]; then
  echo "CPU time per step and thread (ms), median of $ROUNDS interleaved rounds"
  printf '%-9s %-10s %-18s %9s %9s %-12s\n' precision row "coretype(core)" "ours cpu" "torch cpu" "ratio"
else
  printf '%-9s %-10s %-18s %9s %9s %-12s %9s %9s %-12s\n' precision row "coretype(core)" "ours med" "torch med" "ratio" "ours best" "torch best" "ratio"
fi
# one row: precision, label, core, then the per-run means and bests of each side
row() {   # prec label core "ours means" "torch means" "ours bests" "torch bests" [ratio labels]
  local om pm obb pbb
  om=$(printf '%s\n' $4 | median) pm=$(printf '%s\n' $5 | median)
  obb=$(printf '%s\n' $6 | sort -g | head -1) pbb=$(printf '%s\n' $7 | sort -g | head -1)
  printf '%-9s %-10s %-18s %9.1f %9.1f %-12s %9.1f %9.1f %-12s\n' "$1" "$2" "$3" "$om" "$pm" "$(ratio "$om" "$pm" "${8:-}" "${9:-}")" "$obb" "$pbb" "$(ratio "$obb" "$pbb" "${8:-}" "${9:-}")"
}
for ct in asis Haswell; do
  if [ "$ct" = asis ]; then envs=(); ctname=${OPENBLAS_CORETYPE:-unset}; else envs=(OPENBLAS_CORETYPE=Haswell); ctname=Haswell; fi
  gemm=$(env "${envs[@]}" "$BUILD/bench/bench_gemm" --describe | sed 's/^gemm: //')
  core=$(echo "$gemm" | sed -n 's/.*openblas \([A-Za-z0-9_]*\),.*/\1/p')
  for prec in $PRECS; do
    ours_prec=$([ $prec = fp32 ] && echo fp32 || echo mixed-bf16)
    o=() p=() ob=() pb=() f=()
    if [ "$CLOCK" = cpu ]; then
      for r in $(seq "$ROUNDS"); do
        o+=("$(ours_cpu env "${envs[@]}" OMP_NUM_THREADS=$THREADS "$OURS" --model "$MODEL" --precision "$ours_prec" --batch "$B" --seq "$T" "${OPT[@]}" "${FT_OURS[@]}")")
        p+=("$(env "${envs[@]}" OMP_NUM_THREADS=$THREADS "$PY" "$HERE/torch_lm_step.py" --config "$CONFIG" --precision $prec --batch "$B" --seq "$T" --steps "$STEPS" --threads "$THREADS" "${OPT[@]}" "${FT_TORCH[@]}" 2>/dev/null | sed -n 's/^cpu per thread: \([0-9.]*\) ms.*/\1/p')")
        [ "$LORA" -eq 0 ] || f+=("$(ours_cpu env "${envs[@]}" OMP_NUM_THREADS=$THREADS "$OURS" --model "$MODEL" --precision "$ours_prec" --batch "$B" --seq "$T" "${OPT[@]}")")
      done
      om=$(printf '%s\n' "${o[@]}" | median) pm=$(printf '%s\n' "${p[@]}" | median)
      label=$([ ${#OPT[@]} -gt 0 ] && echo "train step" || echo fwd+bwd)
      printf '%-9s %-10s %-18s %9.1f %9.1f %-12s\n' "$prec" "$label" "$ctname($core)" "$om" "$pm" "$(ratio "$om" "$pm")"
      if [ "$LORA" -gt 0 ]; then
        fm=$(printf '%s\n' "${f[@]}" | median)
        printf '%-9s %-10s %-18s %9.1f %9.1f %-12s\n' "$prec" "lora/full" "$ctname($core)" "$om" "$fm" "$(ratio "$om" "$fm" lora full)"
      fi
      echo "          ours ($ours_prec; $(echo "$gemm" | sed 's/ (.*//')): ${o[*]} ms; torch ${p[*]} ms${f[*]:+; ours full ${f[*]} ms}"
      continue
    fi
    so=() sp=() sob=() spb=() fm=() fb=() fsm=() fsb=()
    for r in $(seq "$ROUNDS"); do
      read -r m b sm sb < <(env "${envs[@]}" OMP_NUM_THREADS=$THREADS "$OURS" --model "$MODEL" --precision "$ours_prec" --batch "$B" --seq "$T" --steps "$STEPS" "${OPT[@]}" "${FT_OURS[@]}" | mean_best)
      o+=("$m") ob+=("$b") so+=("${sm:-}") sob+=("${sb:-}")
      read -r m b sm sb < <(env "${envs[@]}" OMP_NUM_THREADS=$THREADS "$PY" "$HERE/torch_lm_step.py" --config "$CONFIG" --precision $prec --batch "$B" --seq "$T" --steps "$STEPS" --threads "$THREADS" "${OPT[@]}" "${FT_TORCH[@]}" 2>/dev/null | mean_best)
      p+=("$m") pb+=("$b") sp+=("${sm:-}") spb+=("${sb:-}")
      [ "$LORA" -gt 0 ] || continue
      read -r m b sm sb < <(env "${envs[@]}" OMP_NUM_THREADS=$THREADS "$OURS" --model "$MODEL" --precision "$ours_prec" --batch "$B" --seq "$T" --steps "$STEPS" "${OPT[@]}" | mean_best)
      fm+=("$m") fb+=("$b") fsm+=("${sm:-}") fsb+=("${sb:-}")
    done
    row "$prec" fwd+bwd "$ctname($core)" "${o[*]}" "${p[*]}" "${ob[*]}" "${pb[*]}"
    [ ${#OPT[@]} -gt 0 ] && row "$prec" "train step" "$ctname($core)" "${so[*]}" "${sp[*]}" "${sob[*]}" "${spb[*]}"
    if [ "$LORA" -gt 0 ]; then   # ours LoRA (the "ours" columns) against ours full (the "torch" columns)
      if [ ${#OPT[@]} -gt 0 ]; then
        row "$prec" "lora/full" "$ctname($core)" "${so[*]}" "${fsm[*]}" "${sob[*]}" "${fsb[*]}" lora full
      else
        row "$prec" "lora/full" "$ctname($core)" "${o[*]}" "${fm[*]}" "${ob[*]}" "${fb[*]}" lora full
      fi
    fi
    echo "          ours ($ours_prec; $(echo "$gemm" | sed 's/ (.*//')): means ${o[*]} ms${OPT:+, train steps ${so[*]} ms}; torch means ${p[*]} ms${OPT:+, train steps ${sp[*]} ms}${fm[*]:+; ours full means ${fm[*]} ms}${fm[*]:+${OPT:+, train steps ${fsm[*]} ms}}"
  done
done
echo "load after: $(uptime | sed 's/.*load average/load average/')"
