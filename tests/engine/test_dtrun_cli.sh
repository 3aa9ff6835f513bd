#!/usr/bin/env bash
# dtrun's command line: bad input exits 2 with one "dtrun: ..." line; the
# committed tiny-cpu plan trains on the fortunes corpus and the loss falls;
# metrics.jsonl, run-report.json and a checkpoint appear; 'dtrun sample' prints.
# Usage: test_dtrun_cli.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTPLAN=$1
DTRUN=$2
SRC=$3
PLAN=$SRC/configs/plans/tiny-cpu.json
TMP=$(mktemp -d /tmp/dt_test_cli_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# expect_exit CODE PATTERN -- command...: exit code, and stderr is one line matching PATTERN
expect_exit() {
  local code=$1 pat=$2
  shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ "$rc" -eq "$code" ] || fail "$* exited $rc, expected $code: $(cat "$TMP/err")"
  if [ -n "$pat" ]; then
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "$*: expected one stderr line, got: $(cat "$TMP/err")"
    grep -q -- "$pat" "$TMP/err" || fail "$*: stderr lacks '$pat': $(cat "$TMP/err")"
  fi
}

expect_exit 0 "" -- "$DTRUN" --help
expect_exit 2 "" -- "$DTRUN"
expect_exit 2 "^dtrun: .*missing.json" -- "$DTRUN" "$TMP/missing.json"
expect_exit 2 "^dtrun: unknown option '--bogus'" -- "$DTRUN" "$PLAN" --bogus
expect_exit 2 "^dtrun: --max-steps expects an integer" -- "$DTRUN" "$PLAN" --max-steps zero
expect_exit 2 "^dtrun: sample needs a checkpoint directory" -- "$DTRUN" sample
expect_exit 2 "^dtrun: .*no checkpoint here" -- "$DTRUN" sample "$TMP"

# a plan that fails validation: the batch triple no longer multiplies out
sed 's/"global_batch": 16/"global_batch": 17/' "$PLAN" >"$TMP/bad-batch.json"
expect_exit 2 "^dtrun: .*" -- "$DTRUN" "$TMP/bad-batch.json"
# unknown key
sed 's/"micro_batch": 8/"micro_batch": 8, "micro_bach": 8/' "$PLAN" >"$TMP/bad-key.json"
expect_exit 2 "^dtrun: .*micro_bach" -- "$DTRUN" "$TMP/bad-key.json"
# launch options (docs/launch.md): bad values and worlds that disagree with the plan, before any rank starts
sed -e 's/"gpus_per_node": 1/"gpus_per_node": 2/' -e 's/"world_size": 1/"world_size": 2/' \
    -e 's/"global_batch": 16/"global_batch": 32/' "$PLAN" >"$TMP/two-ranks.json"
expect_exit 2 "^dtrun: --timeout expects a number of seconds > 0, got '0'" -- "$DTRUN" "$PLAN" --timeout 0
expect_exit 2 "^dtrun: --timeout expects a number of seconds > 0, got 'soon'" -- "$DTRUN" "$PLAN" --timeout soon
expect_exit 2 "^dtrun: .*nnodes" -- "$DTRUN" --nnodes two "$PLAN"
expect_exit 2 "the plan wants world_size 2 (1 node(s) x 2 ranks) but dtrun's launch flags give 3" -- \
  "$DTRUN" --nproc-per-node 3 "$TMP/two-ranks.json" --out "$TMP/x"
# a torchrun rank whose peer never comes: rank 1 is named within --timeout
# (tests/dist/test_multinode.sh runs the working multi-node launches and the
# node agents' failure lines)
expect_exit 1 "^dtrun: rank 1 did not connect to 127.0.0.1:30000 within 2 s" -- \
  env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 \
  "$DTRUN" "$TMP/two-ranks.json" --out "$TMP/x" --timeout 2
expect_exit 2 "the plan wants world_size 2 .* but torchrun started 1 rank" -- \
  env RANK=0 WORLD_SIZE=1 "$DTRUN" "$TMP/two-ranks.json" --out "$TMP/x"
# a DT_GEMM value the kernel layer cannot parse is refused before anything runs
expect_exit 2 "^dtrun: DT_GEMM='bf16=foo': bad part 'bf16=foo'.*unset DT_GEMM" -- \
  env DT_GEMM=bf16=foo "$DTRUN" "$PLAN" --out "$TMP/x"
expect_exit 2 "^dtrun: DT_GEMM='fp32=openblas,': nothing after the last comma" -- \
  env DT_GEMM=fp32=openblas, "$DTRUN" "$PLAN" --out "$TMP/x"
[ -e "$TMP/x" ] && fail "a refused launch created its output directory"
# a data path with no text
mkdir -p "$TMP/empty"
expect_exit 2 "^dtrun: .*empty.*no text" -- "$DTRUN" "$PLAN" --out "$TMP/y" --data "$TMP/empty"

# end to end on the plan's corpus (a Debian package: fortunes-min / fortunes)
if [ ! -d /usr/share/games/fortunes ]; then
  echo "FAIL: /usr/share/games/fortunes is not installed (scripts/setup.sh installs fortunes-min)" >&2
  exit 1
fi
OUT=$TMP/run
"$DTRUN" "$PLAN" --out "$OUT" --max-steps 40 --no-progress 2>"$TMP/train.log" || fail "training exited $?: $(tail -3 "$TMP/train.log")"
[ -f "$OUT/metrics.jsonl" ] || fail "no metrics.jsonl"
grep -q '^dtrun: done: step 40, .* step [0-9.]* ms (predicted [0-9.]* ms)$' "$TMP/train.log" ||
  fail "the end-of-run line lacks the measured and predicted step time: $(grep 'done' "$TMP/train.log")"
[ "$(wc -l <"$OUT/metrics.jsonl")" -eq 40 ] || fail "metrics.jsonl has $(wc -l <"$OUT/metrics.jsonl") lines, expected 40"
for k in step loss lr tokens_per_s cpu_ms grad_norm loss_scale mem; do
  grep -q "\"$k\": " "$OUT/metrics.jsonl" || fail "metrics.jsonl lacks $k"
done
# cpu_ms is the kernel's CPU time of the step: some, and never more than every core for the step's wall time
sed 's/.*"step_ms": \([0-9.e+-]*\).*"cpu_ms": \([0-9.e+-]*\).*/\1 \2/' "$OUT/metrics.jsonl" |
  awk -v n="$(nproc)" '{ if ($2 < 0 || $2 > $1 * n * 1.05 + 1) bad = bad " " NR ": " $2 " ms CPU in " $1 " ms"; sum += $2 }
       END { if (bad != "" || sum <= 0) { print "cpu_ms out of range:" bad " (sum " sum ")"; exit 1 } }' >"$TMP/cpu.txt" ||
  fail "$(cat "$TMP/cpu.txt")"
first=$(head -1 "$OUT/metrics.jsonl" | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/')
last=$(tail -1 "$OUT/metrics.jsonl" | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/')
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f - 1.0) }' || fail "loss did not fall by 1 nat: $first -> $last"
echo "loss $first -> $last over 40 steps"
# the schedule is the plan's (300 steps, 30 linear warmup): lr at step 40 is past warmup, not at the end
lr40=$(tail -1 "$OUT/metrics.jsonl" | sed 's/.*"lr": \([0-9.e+-]*\).*/\1/')
awk -v x="$lr40" 'BEGIN { exit !(x > 9.5e-4 && x < 1e-3) }' || fail "lr at step 40 is $lr40, expected the planned cosine schedule (just under 1e-3)"
R=$OUT/run-report.json
[ -f "$R" ] || fail "no run-report.json"
for k in predicted measured diff_pct params grads optimizer activations buffers total peak_rss_bytes step_time_s tokens_per_s; do
  grep -q "\"$k\"" "$R" || fail "run-report.json lacks $k"
done
[ -f "$OUT/ckpt-00000040/model.safetensors" ] || fail "no final checkpoint"
[ -f "$OUT/ckpt-00000040/config.json" ] || fail "no config.json in the checkpoint"
"$DTRUN" sample "$OUT" --tokens 40 --seed 3 --prompt "Q: " >"$TMP/sample.txt" 2>"$TMP/sample.err" || fail "sample exited $?: $(cat "$TMP/sample.err")"
[ "$(wc -c <"$TMP/sample.txt")" -ge 40 ] || fail "sample printed too little"
"$DTRUN" sample "$OUT" --tokens 40 --seed 3 --prompt "Q: " >"$TMP/sample2.txt" 2>/dev/null
cmp -s "$TMP/sample.txt" "$TMP/sample2.txt" || fail "sampling with the same seed is not deterministic"
"$DTRUN" sample "$OUT" --tokens 40 --seed 4 --prompt "Q: " >"$TMP/sample3.txt" 2>/dev/null
cmp -s "$TMP/sample.txt" "$TMP/sample3.txt" && fail "sampling with another seed printed the same text"
# past the model's 64 positions: the generator's window, then one token at a time; every byte printed
"$DTRUN" sample "$OUT" --tokens 150 --seed 3 --prompt "Q: " >"$TMP/sample4.txt" 2>"$TMP/sample.err" ||
  fail "sample of 150 tokens exited $?: $(cat "$TMP/sample.err")"
[ "$(wc -c <"$TMP/sample4.txt")" -eq 154 ] || fail "sample of 150 tokens printed $(wc -c <"$TMP/sample4.txt") bytes, not 3 + 150 + 1"
# resume from step 40 for 5 more steps: metrics continue at 41
"$DTRUN" "$PLAN" --out "$OUT" --max-steps 45 --resume --quiet || fail "resume exited $?"
tail -1 "$OUT/metrics.jsonl" | grep -q '"step": 45' || fail "resume did not reach step 45"
[ "$(wc -l <"$OUT/metrics.jsonl")" -eq 45 ] || fail "metrics.jsonl not appended on resume"

# --max-steps beyond the plan: said, not silent; a data folder's subfolders: said to be unread
mkdir -p "$TMP/data/sub"
head -c 200000 /usr/share/games/fortunes/fortunes >"$TMP/data/top.txt"
head -c 1000 /usr/share/games/fortunes/fortunes >"$TMP/data/sub/unread.txt"
python3 - "$PLAN" "$TMP/short.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["schedule"]["total_steps"] = 3
p["schedule"]["warmup_steps"] = 1
p["output"]["save_interval"] = 0
p["data"]["eval_interval"] = 0
p.pop("prediction", None)
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
"$DTRUN" "$TMP/short.json" --out "$TMP/short" --data "$TMP/data" --max-steps 9 --no-progress 2>"$TMP/short.log" ||
  fail "the short run exited $?: $(tail -3 "$TMP/short.log")"
grep -q "^dtrun: warning: --max-steps 9 is beyond the plan's 3 steps; stopping at 3" "$TMP/short.log" ||
  fail "--max-steps beyond the plan was not said: $(cat "$TMP/short.log")"
[ "$(wc -l <"$TMP/short/metrics.jsonl")" -eq 3 ] || fail "the short run did not stop at the plan's 3 steps"
grep -q "^dtrun: data: 1 file(s) of $TMP/data read; its 1 subfolder(s) are not" "$TMP/short.log" ||
  fail "the unread data subfolder was not said: $(cat "$TMP/short.log")"

# --init: a path that is not there, a FIFO, and a Hugging Face directory of another model
# (the llama golden: one line naming both shapes) are refused before training;
# a checkpoint directory of this plan's model starts the run from its weights
expect_exit 2 "^dtrun: --init $TMP/nowhere: No such file" -- "$DTRUN" "$TMP/short.json" --init "$TMP/nowhere" --out "$TMP/i0"
mkfifo "$TMP/fifo"
expect_exit 2 "^dtrun: --init $TMP/fifo: not a directory or a regular file" -- "$DTRUN" "$TMP/short.json" --init "$TMP/fifo" --out "$TMP/i1"
expect_exit 2 "the model directory's model (llama .*) is not the plan's (gpt2 " -- \
  "$DTRUN" "$TMP/short.json" --init "$SRC/tests/kernels/golden/llama/llama" --out "$TMP/i2" --data "$TMP/data" --no-progress --quiet
[ -e "$TMP/i2/metrics.jsonl" ] && fail "a refused --init wrote metrics"
python3 - "$TMP/short.json" "$TMP/save.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["output"]["save_interval"] = 3
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
"$DTRUN" "$TMP/save.json" --out "$TMP/i3" --data "$TMP/data" --quiet || fail "the run to start from exited $?"
"$DTRUN" "$TMP/short.json" --out "$TMP/i4" --data "$TMP/data" --init "$TMP/i3/ckpt-00000003" --quiet --max-steps 1 ||
  fail "--init from a checkpoint directory exited $?"
python3 - "$TMP/i3/metrics.jsonl" "$TMP/i4/metrics.jsonl" "$TMP/short/metrics.jsonl" <<'PY' || fail "--init did not start from the checkpoint's weights"
import json, sys
last = [json.loads(l)["loss"] for l in open(sys.argv[1])][-1]
first = json.loads(open(sys.argv[2]).readline())["loss"]
fresh = json.loads(open(sys.argv[3]).readline())["loss"]
# trained weights: the first loss is near the trained run's last, not the fresh start's
sys.exit(0 if abs(first - last) < abs(first - fresh) else 1)
PY

# a plan predicting a DeepSpeed run is not trained by dtrun: one line, exit 2, nothing written
"$DTPLAN" solve --model gpt2 --mem 80G --gpus 8 --runtime deepspeed -o "$TMP/ds.json" >/dev/null ||
  fail "dtplan solve --runtime deepspeed exited $?"
expect_exit 2 "^dtrun: .*ds.json predicts a deepspeed run (runtime.kind); dtrun trains plans made for itself" -- \
  "$DTRUN" "$TMP/ds.json" --out "$TMP/ds-run"
[ -e "$TMP/ds-run" ] && fail "a refused deepspeed plan created its output directory"

# sample through a tokenizer with more ids than the model has: one line, exit 2
expect_exit 2 "^dtrun: sample: the tokenizer has 1500 ids but the model's vocab is 256: give the model's own --tokenizer" -- \
  "$DTRUN" sample "$TMP/i3" --tokenizer "$SRC/tests/tokenizer/data/qwen2-mini.json"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo ok
