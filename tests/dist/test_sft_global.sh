#!/usr/bin/env bash
# SFT loss averaged over the whole global batch (docs/data.md "What the trainer does with
# them"; transformers' Trainer with average_tokens_across_devices=True): masked chat shards
# trained on 1 rank x accumulation 2 and on 2 ranks x accumulation 1, micro-batch 2, the same
# global batch of 4 windows per step, must give the same loss and gradient-norm curves to fp32
# reduction-order tolerance (relative 1e-5, as tests/dist/test_zero.sh). With each rank
# weighting by its own counted targets (the ranks hold different numbers of assistant tokens)
# the curves differ (measured: loss by 8e-3, gradient norm by 0.7, relative). The 2-rank run's
# report must also find the plan's bytes per collective exact: the plan (dtplan solve --data,
# data.loss_mask) counts the step's 8-byte token-count all-reduce.
# Usage: test_sft_global.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTPLAN=$1
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need jq python3 mpirun
export OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/dt_test_sft_global_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
STEPS=10

for i in $(seq 20); do cat "$SRC/tests/data/chat.jsonl"; done >"$TMP/chat.jsonl"
"$DTRUN" prepare --tokenizer "$SRC/tests/tokenizer/data/qwen2-mini.json" --out "$TMP/sft" --format chat \
  --chat-template chatml --val-fraction 0 --quiet "$TMP/chat.jsonl" || fail "prepare exited $?"
jq '.vocab_size = 1500 | .max_position_embeddings = 64' "$SRC/models/catalog/qwen3-tiny.json" >"$TMP/model.json"
"$DTPLAN" solve --model "$TMP/model.json" --hardware cpu --mem 2G --seq 32 --steps $STEPS --data "$TMP/sft" \
  --stages 1 --precision fp32 -o "$TMP/p0.json" >/dev/null || fail "dtplan solve exited $?"
[ "$(jq -r .data.loss_mask "$TMP/p0.json")" = true ] || fail "the plan does not say the loss is masked"
# WORLD ACCUM OUT: the same global batch of 4 windows (dtrun recomputes the stale prediction)
plan() {
  jq --argjson w "$1" --argjson a "$2" '.parallel.world_size = $w | .cluster.gpus_per_node = $w | .cluster.nodes = 1
    | .batch.micro_batch = 2 | .batch.grad_accum = $a | .batch.global_batch = 4
    | .data.eval_interval = 0 | .output.save_interval = 0' "$TMP/p0.json" >"$3"
}
plan 1 2 "$TMP/w1.json"
plan 2 1 "$TMP/w2.json"
"$DTRUN" "$TMP/w1.json" --out "$TMP/r1" --quiet || fail "1 rank x accumulation 2 exited $?"
mpirun -n 2 --oversubscribe "$DTRUN" "$TMP/w2.json" --out "$TMP/r2" --quiet 2>"$TMP/err" ||
  fail "2 ranks x accumulation 1 exited $?: $(tail -3 "$TMP/err")"
python3 - "$TMP/r1" "$TMP/r2" <<'PY' || exit 1
import json, sys
a, b = sys.argv[1:]
def series(d, k):
    return [json.loads(l)[k] for l in open(d + "/metrics.jsonl")]
bad = []
for k in ("loss", "grad_norm"):
    x, y = series(a, k), series(b, k)
    if len(x) != len(y): bad.append(f"{k}: {len(y)} steps vs {len(x)}")
    d = max(abs(p - q) / abs(p) for p, q in zip(x, y))
    print(f"     {k}: largest relative difference {d:.3g}")
    if d > 1e-5: bad.append(f"{k}: relative difference {d:.3g} > 1e-5 ({x[:3]} vs {y[:3]})")
c = json.load(open(b + "/run-report.json"))["comm"]
if not c["equal"]:
    bad.append(f"comm measured {c['measured_bytes_per_step']} != predicted {c['predicted_bytes_per_step']}")
if bad:
    print("FAIL: " + "; ".join(bad)); sys.exit(1)
PY
echo "ok: SFT loss over the global batch: 1 rank x accum 2 == 2 ranks x accum 1"
