#!/usr/bin/env bash
# SFT end to end (docs/data.md, docs/dtrun.md "Data"): `dtrun prepare --format chat` writes
# masked token shards with the model's tokenizer (the qwen2-mini test tokenizer, vocab 1500),
# a Qwen3-shaped plan with that vocabulary trains on them, the run says the loss mask is
# applied, and the loss falls. The mask's arithmetic is tested in tests/kernels/test_llama.c
# (check_ignore_index). The same model planned without --data names no data, and dtrun asks for
# --data in one line. Usage: test_sft.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTPLAN=$1
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need jq
TMP=$(mktemp -d /tmp/dt_test_sft_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# twenty copies of the test conversations: enough windows for 20 steps
for i in $(seq 20); do cat "$SRC/tests/data/chat.jsonl"; done >"$TMP/chat.jsonl"
"$DTRUN" prepare --tokenizer "$SRC/tests/tokenizer/data/qwen2-mini.json" --out "$TMP/sft" --format chat \
  --chat-template chatml --val-fraction 0 --quiet "$TMP/chat.jsonl" || fail "prepare exited $?"
jq '.vocab_size = 1500 | .max_position_embeddings = 64' "$SRC/models/catalog/qwen3-tiny.json" >"$TMP/model.json"
# --data names prepare's output: the plan reads its shards (format llmc) and says what they hold
"$DTPLAN" solve --model "$TMP/model.json" --hardware cpu --mem 2G --seq 32 --steps 20 --data "$TMP/sft" \
  -o "$TMP/p0.json" >"$TMP/solve.out" || fail "dtplan solve exited $?"
grep -q "^data: dtrun prepare output $TMP/sft: .* training tokens (SFT: the loss on the assistant's tokens only)" \
  "$TMP/solve.out" || fail "dtplan solve did not describe the prepared data: $(cat "$TMP/solve.out")"
[ "$(jq -r .data.format "$TMP/p0.json")" = llmc ] && [ "$(jq -r .data.train "$TMP/p0.json")" = "$TMP/sft/train" ] ||
  fail "the plan does not read the shards: $(jq -c .data "$TMP/p0.json")"
# a model whose vocabulary cannot hold the tokenizer's: one line, exit 2, no plan
"$DTPLAN" solve --model qwen3-tiny --hardware cpu --mem 2G --data "$TMP/sft" -o "$TMP/bad.json" >/dev/null 2>"$TMP/err"
rc=$?
{ [ "$rc" -eq 2 ] && [ ! -e "$TMP/bad.json" ] && grep -q "its tokenizer has 1500 ids but the model qwen3-tiny has a vocabulary of 256" "$TMP/err"; } ||
  fail "a too-small vocabulary: exit $rc, $(cat "$TMP/err")"
jq '.data.eval_interval = 0 | .output.save_interval = 0' "$TMP/p0.json" >"$TMP/plan.json"
"$DTRUN" "$TMP/plan.json" --out "$TMP/run" --no-progress 2>"$TMP/log" || fail "dtrun exited $?: $(tail -3 "$TMP/log")"
grep -q "^dtrun: data: SFT loss mask" "$TMP/log" || fail "the run did not say it applies the loss mask: $(cat "$TMP/log")"
first=$(head -1 "$TMP/run/metrics.jsonl" | jq .loss) last=$(tail -1 "$TMP/run/metrics.jsonl" | jq .loss)
jq -n --argjson a "$first" --argjson b "$last" '$b < $a' | grep -q true || fail "the SFT loss does not fall: $first -> $last"
# sampling speaks the model's tokens: the prompt encoded, the output decoded, with its tokenizer
out=$("$DTRUN" sample "$TMP/run" --tokenizer "$SRC/tests/tokenizer/data/qwen2-mini.json" --tokens 8 \
      --prompt "<|im_start|>user
Hello there<|im_end|>
<|im_start|>assistant
" 2>"$TMP/err") || fail "sample with the tokenizer exited $?: $(cat "$TMP/err")"
printf '%s' "$out" | head -1 | grep -qx "<|im_start|>user" || fail "sample did not echo the prompt: $out"
"$DTRUN" sample "$TMP/run" --tokenizer "$TMP/missing.json" >/dev/null 2>"$TMP/err"; rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "a missing tokenizer: exit $rc, $(cat "$TMP/err")"

# The same model planned without --data (issue 31; docs/plan-format.md "data", docs/dtrun.md):
# a real vocabulary gets no byte-level demo text, so the plan names no data; dtrun refuses it in
# one line, exit 2, writing nothing, and `dtrun --data PREPARED_DIR` trains on these shards. A
# byte-level model keeps the demo text; "train": "" is the same as no key.
"$DTPLAN" solve --model "$TMP/model.json" --hardware cpu --mem 2G --seq 32 --steps 6 --global-batch 4 \
  -o "$TMP/nd0.json" >"$TMP/nd.out" || fail "dtplan solve exited $?: $(cat "$TMP/nd.out")"
[ "$(jq -r '.data | has("train")' "$TMP/nd0.json")" = false ] ||
  fail "a real-vocabulary plan names data it was not given: $(jq -c .data "$TMP/nd0.json")"
grep -q "^data: none named: .* 1500-token vocabulary" "$TMP/nd.out" ||
  fail "solve did not say the plan names no data: $(cat "$TMP/nd.out")"
jq '.data.eval_interval = 0 | .output.save_interval = 0' "$TMP/nd0.json" >"$TMP/nd.json"

# without --data: one line naming the plan and --data, exit 2, no output directory
( cd "$TMP" && "$DTRUN" nd.json --out ndrun ) >"$TMP/out" 2>"$TMP/err"; rc=$?
{ [ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && [ ! -e "$TMP/ndrun" ] && [ ! -s "$TMP/out" ] &&
  grep -q "^dtrun: nd.json names no training data (data.train): pass --data PREPARED_DIR .*dtrun prepare --tokenizer" "$TMP/err"; } ||
  fail "dtrun without data: exit $rc, $(cat "$TMP/err"), run dir: $(ls "$TMP/ndrun" 2>&1)"
# "train": "" is the same plan
jq '.data.train = ""' "$TMP/nd.json" >"$TMP/empty.json"
"$DTRUN" "$TMP/empty.json" --out "$TMP/ndrun" >/dev/null 2>"$TMP/err"; rc=$?
{ [ "$rc" -eq 2 ] && [ ! -e "$TMP/ndrun" ] && grep -q "names no training data" "$TMP/err"; } ||
  fail "data.train \"\": exit $rc, $(cat "$TMP/err")"
# --data that does not exist: one line, exit 2, nothing written
"$DTRUN" "$TMP/nd.json" --data "$TMP/missing" --out "$TMP/ndrun" >/dev/null 2>"$TMP/err"; rc=$?
{ [ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && [ ! -e "$TMP/ndrun" ] && grep -q "$TMP/missing" "$TMP/err"; } ||
  fail "--data missing: exit $rc, $(cat "$TMP/err"), run dir: $(ls "$TMP/ndrun" 2>&1)"
# --data PREPARED_DIR: the shards (masked SFT data) train the plan
"$DTRUN" "$TMP/nd.json" --data "$TMP/sft" --out "$TMP/ndrun" --no-progress 2>"$TMP/ndlog" ||
  fail "dtrun --data exited $?: $(tail -3 "$TMP/ndlog")"
grep -q "^dtrun: data: SFT loss mask" "$TMP/ndlog" || fail "the run did not read the prepared shards: $(cat "$TMP/ndlog")"
[ "$(wc -l <"$TMP/ndrun/metrics.jsonl")" -ge 6 ] || fail "the run did not train 6 steps: $(cat "$TMP/ndrun/metrics.jsonl")"

# a byte-level demo model keeps the demo text by default (the quickstart's path)
"$DTPLAN" solve --model gpt2-tiny --hardware cpu --mem 1G --seq 32 -o "$TMP/byte.json" >/dev/null ||
  fail "dtplan solve gpt2-tiny exited $?"
[ "$(jq -r .data.train "$TMP/byte.json")" = /usr/share/games/fortunes ] ||
  fail "the byte model lost its demo text: $(jq -c .data "$TMP/byte.json")"
# a catalog model with a real vocabulary: no demo text; --data names it
"$DTPLAN" solve --model qwen2.5-0.5b --mem 80G --hardware A100-80GB -o "$TMP/q.json" >/dev/null || fail "solve qwen2.5-0.5b"
[ "$(jq -r '.data | has("train")' "$TMP/q.json")" = false ] || fail "qwen2.5-0.5b got data: $(jq -c .data "$TMP/q.json")"
echo "ok: SFT on masked shards, loss $first -> $last; a plan naming no data asks for --data and trains with it"
