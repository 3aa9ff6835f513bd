#!/usr/bin/env bash
# The trainer takes only shards of the model's tokenizer (docs/data.md "What the trainer does
# with them"): shards prepared with tokenizer A (qwen2-mini) against
#   - a plan made from them (dtplan solve --data: data.tokenizer_fingerprint) given shards of B,
#   - an --init Hugging Face directory that ships B's tokenizer.json (with and without the
#     plan naming A),
#   - a checkpoint trained on A resumed with B's shards (state.json data.tokenizer_fingerprint),
# each: exit 2, one line naming both fingerprints (16 hex digits each), nothing written. The
# matching cases train, and a plan without the keys (an older plan) still reads and trains;
# llm.c shards (no fingerprint) train against an --init tokenizer and are refused by a plan
# naming one; a malformed data.tokenizer_fingerprint is one line; an --init tokenizer.json dtrun
# cannot read gives way to its tokenizer.model, or to a warning when there is none.
# Usage: test_tokenizer_check.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTPLAN=$1
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need jq
TMP=$(mktemp -d /tmp/dt_test_tokck_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
TOK_A=$SRC/tests/tokenizer/data/qwen2-mini.json
TOK_B=$SRC/tests/tokenizer/data/gpt2-mini.json
SHOWN=16   # hex digits of a fingerprint in messages (DT_FINGERPRINT_SHOWN_HEX)

for i in $(seq 30); do cat "$SRC/tests/tokenizer/data/corpus.txt"; done >"$TMP/corpus.txt"
for t in a b; do
  tok=$TOK_A; [ $t = b ] && tok=$TOK_B
  "$DTRUN" prepare --tokenizer "$tok" --out "$TMP/$t" --val-fraction 0 --quiet "$TMP/corpus.txt" ||
    fail "prepare with $tok exited $?"
done
FP_A=$(jq -r .tokenizer.fingerprint "$TMP/a/prepare.json")
FP_B=$(jq -r .tokenizer.fingerprint "$TMP/b/prepare.json")
SHORT_A=${FP_A:0:$SHOWN} SHORT_B=${FP_B:0:$SHOWN}
[ "$FP_A" != "$FP_B" ] || fail "the two test tokenizers have one fingerprint"

jq '.vocab_size = 1500 | .max_position_embeddings = 64' "$SRC/models/catalog/qwen3-tiny.json" >"$TMP/model.json"
"$DTPLAN" solve --model "$TMP/model.json" --hardware cpu --mem 2G --seq 32 --steps 4 --data "$TMP/a" \
  -o "$TMP/p0.json" >"$TMP/solve.out" || fail "dtplan solve exited $?"
grep -q "^data: dtrun prepare output .*, fingerprint $SHORT_A (dtrun requires it of the shards)" "$TMP/solve.out" ||
  fail "dtplan solve does not name the data's tokenizer: $(cat "$TMP/solve.out")"
# (a) the plan records the data's tokenizer as prepare.json gives it
[ "$(jq -r .data.tokenizer_fingerprint "$TMP/p0.json")" = "$FP_A" ] &&
  [ "$(jq -r .data.tokenizer_path "$TMP/p0.json")" = "$TOK_A" ] ||
  fail "the plan does not record the data's tokenizer: $(jq -c .data "$TMP/p0.json")"
jq '.data.eval_interval = 0 | .output.save_interval = 0' "$TMP/p0.json" >"$TMP/plan.json"
# a plan from before the keys: the same without them
jq 'del(.data.tokenizer_fingerprint, .data.tokenizer_path, .data.loss_mask)' "$TMP/plan.json" >"$TMP/old.json"

# refused NAME OUT EXPECTED-TEXT -- dtrun args: exit 2, one line with both short fingerprints and
# EXPECTED-TEXT, and no file written under OUT
refused() {
  local name=$1 out=$2 want=$3
  shift 4
  "$DTRUN" "$@" --no-progress >/dev/null 2>"$TMP/err"
  local rc=$?
  [ "$rc" -eq 2 ] || fail "$name: exit $rc, not 2: $(cat "$TMP/err")"
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "$name: not one line: $(cat "$TMP/err")"
  grep -q "$SHORT_A" "$TMP/err" && grep -q "$SHORT_B" "$TMP/err" ||
    fail "$name: the line does not name both fingerprints ($SHORT_A, $SHORT_B): $(cat "$TMP/err")"
  grep -q -- "$want" "$TMP/err" || fail "$name: no '$want' in: $(cat "$TMP/err")"
  [ -z "$(find "$out" -type f 2>/dev/null)" ] || fail "$name: files written under $out: $(find "$out" -type f)"
  echo "ok   $name: $(cat "$TMP/err")"
}
trains() {   # NAME -- dtrun args
  local name=$1
  shift 2
  "$DTRUN" "$@" --no-progress 2>"$TMP/log" || fail "$name: exit $?: $(tail -3 "$TMP/log")"
  echo "ok   $name"
}

trains "shards of the plan's tokenizer" -- "$TMP/plan.json" --out "$TMP/run" --max-steps 2
[ "$(jq -r .data.tokenizer_fingerprint "$TMP/run/ckpt-00000002/state.json")" = "$FP_A" ] ||
  fail "the checkpoint does not record the data's tokenizer: $(jq -c .data "$TMP/run/ckpt-00000002/state.json")"
# (c) the plan names A, the shards are B's
refused "plan of A, shards of B" "$TMP/r1" "differs from $SHORT_A of the tokenizer the plan's data was prepared with" -- \
  "$TMP/plan.json" --out "$TMP/r1" --data "$TMP/b/train"
trains "an older plan (no tokenizer keys) on B's shards" -- "$TMP/old.json" --out "$TMP/r2" --data "$TMP/b/train" \
  --max-steps 1

# (b) an --init directory that ships a tokenizer: a checkpoint of the model, with A's or B's tokenizer.json
for t in a b; do
  cp -r "$TMP/run/ckpt-00000002" "$TMP/hf$t"
  rm -f "$TMP/hf$t"/optim-* "$TMP/hf$t/state.json"
done
cp "$TOK_A" "$TMP/hfa/tokenizer.json"
cp "$TOK_B" "$TMP/hfb/tokenizer.json"
refused "--init with B's tokenizer, shards of A" "$TMP/r3" "differs from $SHORT_B of the model's tokenizer $TMP/hfb/tokenizer.json" -- \
  "$TMP/old.json" --out "$TMP/r3" --init "$TMP/hfb"
refused "--init with B's tokenizer, plan of A" "$TMP/r4" "the model's tokenizer $TMP/hfb/tokenizer.json (fingerprint $SHORT_B)" -- \
  "$TMP/plan.json" --out "$TMP/r4" --init "$TMP/hfb"
trains "--init with A's tokenizer, shards of A" -- "$TMP/plan.json" --out "$TMP/r5" --init "$TMP/hfa" --max-steps 1
# a tokenizer.json dtrun cannot read (as Llama-2's byte-fallback one): tokenizer.model is the model's, else a warning
cp -r "$TMP/hfa" "$TMP/hfw"
echo '{"model": {"type": "WordPiece", "vocab": {}}}' >"$TMP/hfw/tokenizer.json"
trains "--init whose tokenizer cannot be read" -- "$TMP/old.json" --out "$TMP/r9" --init "$TMP/hfw" --max-steps 1
grep -q "^dtrun: warning: output.init: .*hfw/tokenizer.json: .*WordPiece.*; the shards are not checked" "$TMP/log" ||
  fail "no warning for an unreadable tokenizer.json: $(cat "$TMP/log")"
cp "$SRC/tests/tokenizer/data/llama2-mini.model" "$TMP/hfw/tokenizer.model"
"$DTRUN" "$TMP/old.json" --out "$TMP/r10" --init "$TMP/hfw" --no-progress >/dev/null 2>"$TMP/err"; rc=$?
{ [ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] &&
  grep -q "fingerprint $SHORT_A differs from .* of the model's tokenizer $TMP/hfw/tokenizer.model" "$TMP/err"; } ||
  fail "tokenizer.model after an unreadable tokenizer.json: exit $rc, $(cat "$TMP/err")"
echo "ok   tokenizer.model after an unreadable tokenizer.json: $(cat "$TMP/err")"

# llm.c shards name no tokenizer: read unchecked against an --init tokenizer, refused when the plan names one
mkdir "$TMP/llmc"
python3 - "$TMP/a/train/train-000000.bin" "$TMP/llmc/shard.bin" <<'PY' || fail "cannot write an llm.c shard"
import struct, sys
src = open(sys.argv[1], "rb").read()
count = struct.unpack_from("<Q", src, 32)[0]   # v2 header: token count at 32, uint16 tokens from 1024
header = struct.pack("<3i", 20240520, 1, count) + bytes(1024 - 12)
open(sys.argv[2], "wb").write(header + src[1024:1024 + 2 * count])
PY
trains "llm.c shards with --init's tokenizer" -- "$TMP/old.json" --out "$TMP/r6" --data "$TMP/llmc" --init "$TMP/hfa" \
  --max-steps 1
"$DTRUN" "$TMP/plan.json" --out "$TMP/r7" --data "$TMP/llmc" --no-progress >/dev/null 2>"$TMP/err"; rc=$?
{ [ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "llm.c shard carries no tokenizer fingerprint" "$TMP/err"; } ||
  fail "llm.c shards against the plan's tokenizer: exit $rc, $(cat "$TMP/err")"
echo "ok   llm.c shards against the plan's tokenizer: $(cat "$TMP/err")"
# a malformed fingerprint in the plan: one line naming the key
jq '.data.tokenizer_fingerprint = "XYZ"' "$TMP/plan.json" >"$TMP/badfp.json"
"$DTRUN" "$TMP/badfp.json" --out "$TMP/r8" >/dev/null 2>"$TMP/err"; rc=$?
{ [ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "data.tokenizer_fingerprint \"XYZ\" is not 64" "$TMP/err"; } ||
  fail "a malformed data.tokenizer_fingerprint: exit $rc, $(cat "$TMP/err")"

# (d) --resume of a run trained on A with B's shards: refused, the run as it was; with A's it goes on
cp "$TMP/run/metrics.jsonl" "$TMP/metrics.before"
refused "--resume with B's shards" "$TMP/none" "was trained on shards of tokenizer $SHORT_A but the data $TMP/b/train is of tokenizer $SHORT_B" -- \
  "$TMP/old.json" --out "$TMP/run" --resume --data "$TMP/b/train"
cmp -s "$TMP/run/metrics.jsonl" "$TMP/metrics.before" && [ "$(ls -d "$TMP/run"/ckpt-* | wc -l)" -eq 1 ] ||
  fail "the refused --resume changed the run: $(ls "$TMP/run")"
trains "--resume with A's shards" -- "$TMP/old.json" --out "$TMP/run" --resume
[ "$(wc -l <"$TMP/run/metrics.jsonl")" -eq 4 ] || fail "the resumed run did not reach step 4"
echo "ok: shards of another tokenizer refused (plan, --init, --resume); matching ones train"
