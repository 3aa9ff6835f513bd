#!/usr/bin/env bash
# The training loop against transformers + torch.optim.AdamW (docs/engine.md "Training-loop
# golden"): dtrun runs each committed plan of tests/kernels/golden/train/ (GPT-2 and Qwen3,
# fp32, T = 160 over several attention tiles, micro-batch 2 x accumulation 2, clipping that
# bites in some steps, warmup + decay over 20 steps, 2 of 3 layers checkpointed, an epoch
# boundary inside step 17) and train_golden_cmp compares metrics.jsonl (loss, grad_norm, lr
# per step) and the final checkpoint's parameters with <case>.golden.safetensors, written by
# scripts/gen_train_golden.py. Then a negative control: the gpt2 plan with another grad_clip
# must fail the comparison.
# Usage: test_train_golden.sh DTPLAN DTRUN SOURCE_DIR   (DT_TRAIN_GOLDEN_CMP: the comparator)
set -u
DTRUN=$2
SRC=$3
CMP=${DT_TRAIN_GOLDEN_CMP:-}
GOLD=$SRC/tests/kernels/golden/train
TMP=$(mktemp -d /tmp/dt_test_train_golden_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

[ -x "$CMP" ] || { echo "FAIL: DT_TRAIN_GOLDEN_CMP ('$CMP') is not the comparator executable" >&2; exit 1; }
command -v jq >/dev/null || { echo "FAIL: jq is needed" >&2; exit 1; }

# The plans name their data and initial weights relative to the repository root: made
# absolute here, so the test runs from any directory. $2: extra jq edit.
plan_for() {
  jq --arg src "$SRC" ".data.train = \$src + \"/\" + .data.train | .output.init = \$src + \"/\" + .output.init ${2:-}" \
    "$GOLD/$1.plan.json" >"$TMP/$1.plan.json"
}

# run CASE OUTNAME [JQ_EDIT]: dtrun on the case's plan; the step lines for the comparator
run() {
  local c=$1 out=$TMP/$2
  plan_for "$c" "${3:-}" || { fail "$c: cannot prepare the plan"; return 1; }
  if ! "$DTRUN" "$TMP/$c.plan.json" --out "$out" --quiet 2>"$TMP/$2.err"; then
    fail "$c: dtrun failed: $(cat "$TMP/$2.err")"
    return 1
  fi
  jq -r '"\(.step) \(.loss) \(.grad_norm) \(.lr)"' "$out/metrics.jsonl" >"$out/steps.txt"
}

for c in gpt2 qwen3; do
  t0=$(date +%s.%N)
  run "$c" "$c" || continue
  t1=$(date +%s.%N)
  echo "== $c (dtrun $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s)"
  "$CMP" "$GOLD/$c.golden.safetensors" "$TMP/$c/steps.txt" "$TMP/$c/ckpt-00000020/model.safetensors" \
    --loss-rel 1e-5 --norm-rel 1e-5 --lr-rel 1e-6 --param-lr 1e-3 || fail "$c: dtrun differs from the golden"
done

# Negative control: grad_clip 1.4 -> 1.3 (steps 1-6 and 8 clip harder, step 7 clips too) must be caught.
if run gpt2 gpt2-clip '| .optimizer.grad_clip = 1.3'; then
  if "$CMP" "$GOLD/gpt2.golden.safetensors" "$TMP/gpt2-clip/steps.txt" \
      "$TMP/gpt2-clip/ckpt-00000020/model.safetensors" >"$TMP/clip.out"; then
    fail "the comparator accepted a run with grad_clip 1.3 instead of 1.4"
  else
    echo "== gpt2 with grad_clip 1.3 (negative control): rejected as it must be"
    grep -E '^(loss|params) ' "$TMP/clip.out"
  fi
fi

[ "$fails" -eq 0 ] && echo "PASS" || echo "$fails failure(s)"
[ "$fails" -eq 0 ]
