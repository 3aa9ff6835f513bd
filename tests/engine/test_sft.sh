#!/usr/bin/env bash
# SFT end to end (docs/data.md, docs/dtrun.md "Data"): `dtrun prepare --format chat` writes
# masked token shards with the model's tokenizer (the qwen2-mini test tokenizer, vocab 1500),
# a Qwen3-shaped plan with that vocabulary trains on them, the run says the loss mask is
# applied, and the loss falls. The mask's arithmetic is tested in tests/kernels/test_llama.c
# (check_ignore_index). Usage: test_sft.sh DTPLAN DTRUN SOURCE_DIR
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
echo "ok: SFT on masked shards, loss $first -> $last"
