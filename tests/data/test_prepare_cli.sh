#!/usr/bin/env bash
# `dtrun prepare` (docs/data.md): a run of each format; the summary on stdout and no
# progress line off a terminal (and one on a terminal, through script(1)); every bad input
# exits 2 with one "dtrun prepare: ..." line and writes nothing; a run killed with -9 leaves
# no shard under train/ or val/ and no prepare.json, and the next run clears what it staged;
# SIGINT and a full disk (ulimit -f) exit 1 with one line and leave the previous output whole.
# Usage: test_prepare_cli.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTRUN=$2
SRC=$3
TOK=$SRC/tests/tokenizer/data
TMP=$(mktemp -d /tmp/dt_test_prepare_cli_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

. "$(dirname "$0")/prepare_lib.sh"

# ---- formats ---------------------------------------------------------------------------------
mkdir -p "$TMP/text/sub"
printf 'The first document.\n' >"$TMP/text/a.txt"
printf 'The second one,\nin a folder.\n' >"$TMP/text/sub/b.txt"
printf 'x\0y' >"$TMP/text/sub/index.dat"
"$DTRUN" prepare --tokenizer "$TOK/gpt2-mini.json" --out "$TMP/o-text" --val-fraction 0.5 "$TMP/text" \
  >"$TMP/out" 2>"$TMP/err" || fail "text: exited $?: $(cat "$TMP/err")"
[ ! -s "$TMP/err" ] || fail "text: stderr off a terminal: $(cat "$TMP/err")"
grep -q "^dtrun prepare: $TMP/o-text: train 1 documents.*val 1 documents.*uint16 tokens, vocab 1200" "$TMP/out" ||
  fail "text: summary: $(cat "$TMP/out")"
[ -f "$TMP/o-text/prepare.json" ] && [ -f "$TMP/o-text/train/train-000000.bin" ] &&
  [ -f "$TMP/o-text/val/val-000000.bin" ] && [ ! -e "$TMP/o-text/.prepare-tmp" ] &&
  ok "text: prepare.json, train/train-000000.bin, val/val-000000.bin" || fail "text: files: $(find "$TMP/o-text")"
jq -e '.format == "dtrun-prepare" and .splits.train.documents == 1 and .splits.val.documents == 1 and
       .skipped_files == 1 and (.tokenizer.fingerprint | length) == 64' "$TMP/o-text/prepare.json" >/dev/null ||
  fail "text: prepare.json: $(cat "$TMP/o-text/prepare.json")"
head -c 4 "$TMP/o-text/train/train-000000.bin" | grep -q '^DTSH$' || fail "text: shard magic"

printf '{"text": "one"}\n\n{"text": "two", "id": 2}\r\n{"text": ""}\n' >"$TMP/a.jsonl"
"$DTRUN" prepare --tokenizer "$TOK/llama2-mini.model" --out "$TMP/o-jsonl" --format jsonl --val-fraction 0 \
  "$TMP/a.jsonl" >"$TMP/out" 2>"$TMP/err" || fail "jsonl: exited $?: $(cat "$TMP/err")"
grep -q "train 2 documents.*vocab 1000.*1 document(s) with nothing to train on" "$TMP/out" ||
  fail "jsonl: summary: $(cat "$TMP/out")"
jq -e '.tokenizer.kind == "sentencepiece" and .tokenizer.eot_id == 2' "$TMP/o-jsonl/prepare.json" >/dev/null ||
  fail "jsonl: prepare.json: $(cat "$TMP/o-jsonl/prepare.json")"

"$DTRUN" prepare --tokenizer "$TOK/llama3-mini.json" --out "$TMP/o-chat" --format chat --chat-template llama3 \
  --val-fraction 0 --quiet "$SRC/tests/data/chat.jsonl" >"$TMP/out" 2>"$TMP/err" ||
  fail "chat: exited $?: $(cat "$TMP/err")"
[ ! -s "$TMP/out" ] || fail "chat: --quiet printed: $(cat "$TMP/out")"
jq -e '.loss_mask and .chat_template == "llama3" and .splits.train.documents == 7 and
       .splits.train.trained_tokens < .splits.train.tokens' "$TMP/o-chat/prepare.json" >/dev/null ||
  fail "chat: prepare.json: $(cat "$TMP/o-chat/prepare.json")"
ok "jsonl (SentencePiece) and chat (llama3 template, loss mask)"

# a progress line on a terminal (script(1) gives the command one), never off one
if command -v script >/dev/null; then
  script -qec "$DTRUN prepare --tokenizer $TOK/gpt2-mini.json --out $TMP/o-tty $TMP/text" /dev/null >"$TMP/tty" 2>&1
  grep -q "prepare: .*MiB.*tokens.*tok/s.*ETA" "$TMP/tty" && ok "progress line on a terminal" ||
    fail "no progress line on a terminal: $(cat -v "$TMP/tty" | head -3)"
fi

# ---- bad input: exit 2, one line, nothing written -----------------------------------------------
"$DTRUN" prepare --help 2>"$TMP/err" | grep -q "^usage: dtrun prepare" && [ ! -s "$TMP/err" ] || fail "--help"
expect 2 "^dtrun prepare: .*--tokenizer" --out "$TMP/x" "$TMP/text"
expect 2 "^dtrun prepare: .*--out DIR is required" --tokenizer "$TOK/gpt2-mini.json" "$TMP/text"
expect 2 "^dtrun prepare: no INPUT" --tokenizer "$TOK/gpt2-mini.json" --out "$TMP/x"
expect 2 "^dtrun prepare: .*--bogus" --tokenizer "$TOK/gpt2-mini.json" --out "$TMP/x" --bogus "$TMP/text"
expect 2 "^dtrun prepare: --format 'xml'" --tokenizer "$TOK/gpt2-mini.json" --out "$TMP/x" --format xml "$TMP/text"
expect 2 "^dtrun prepare: --val-fraction '1.5'" --tokenizer "$TOK/gpt2-mini.json" --out "$TMP/x" --val-fraction 1.5 "$TMP/text"
expect 2 "^dtrun prepare: --shard-tokens '0'" --tokenizer "$TOK/gpt2-mini.json" --out "$TMP/x" --shard-tokens 0 "$TMP/text"
expect 2 "^dtrun prepare: --seed '-3'" --tokenizer "$TOK/gpt2-mini.json" --out "$TMP/x" --seed -3 "$TMP/text"
printf '{"text": "fine"}\n{"text": "fine"}\n{"text": broken}\n' >"$TMP/bad.jsonl"
expect 2 "^dtrun prepare: $TMP/bad.jsonl:3:[0-9]*: invalid JSON" --tokenizer "$TOK/gpt2-mini.json" --out "$TMP/x" \
  --format jsonl "$TMP/bad.jsonl"
printf '{"messages": [{"role": "bot", "content": "hi"}]}\n' >"$TMP/role.jsonl"
expect 2 "^dtrun prepare: $TMP/role.jsonl:1: \$.messages\[0\].role: \"bot\"" --tokenizer "$TOK/qwen2-mini.json" \
  --out "$TMP/x" --format chat "$TMP/role.jsonl"
printf 'ok\nbad \xff byte\n' >"$TMP/latin.txt"
expect 2 "^dtrun prepare: $TMP/latin.txt:2: not UTF-8 (byte 0xFF" --tokenizer "$TOK/gpt2-mini.json" --out "$TMP/x" \
  "$TMP/latin.txt"
printf '{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}' >"$TMP/ug.json"
expect 2 "^dtrun prepare: .*ug.json: .*Unigram" --tokenizer "$TMP/ug.json" --out "$TMP/x" "$TMP/text"
expect 2 "^dtrun prepare: .*no <|im_start|> token" --tokenizer "$TOK/llama2-mini.model" --out "$TMP/x" --format chat \
  "$SRC/tests/data/chat.jsonl"
expect 2 "^dtrun prepare: $TMP/missing: cannot read" --tokenizer "$TOK/gpt2-mini.json" --out "$TMP/x" "$TMP/missing"
[ ! -e "$TMP/x" ] && ok "bad inputs: exit 2, one line, no output directory" || fail "a refused run left $TMP/x"
mkdir -p "$TMP/mine" && echo "my notes" >"$TMP/mine/notes.txt"
before=$(listing "$TMP/mine")
expect 2 "^dtrun prepare: $TMP/mine: the output directory holds notes.txt, which dtrun prepare did not write" \
  --tokenizer "$TOK/gpt2-mini.json" --out "$TMP/mine" "$TMP/text"
[ "$before" = "$(listing "$TMP/mine")" ] || fail "a refused --out was changed"

# ---- interrupted runs ---------------------------------------------------------------------------
# a corpus long enough to be caught in pass 2 (SentencePiece is the slowest tokenizer here)
for i in $(seq 1 4000); do cat "$TOK/corpus.txt"; done >"$TMP/big.txt"
for i in 1 2 3 4; do cp "$TMP/big.txt" "$TMP/text/big$i.txt"; done
K=$TMP/o-killed
cp -r "$TMP/o-text" "$K"
before=$(listing "$K")
"$DTRUN" prepare --tokenizer "$TOK/llama2-mini.model" --out "$K" --shard-tokens 20000 --quiet "$TMP/text" 2>/dev/null &
pid=$!
for _ in $(seq 1 3000); do   # until a shard is complete in the staging folder
  ls "$K/.prepare-tmp/train/"*.bin >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.01
done
if kill -9 $pid 2>/dev/null; then
  wait $pid 2>/dev/null
  [ "$before" = "$(listing "$K" | grep -v '\./\.prepare-tmp/')" ] &&
    ok "kill -9 in pass 2: train/, val/ and prepare.json are the previous run's, byte for byte" ||
    fail "kill -9 changed the previous output: $(diff <(echo "$before") <(listing "$K") | head -5)"
  "$DTRUN" prepare --tokenizer "$TOK/gpt2-mini.json" --out "$K" --quiet "$TMP/text/a.txt" 2>"$TMP/err" ||
    fail "the run after kill -9 exited $?: $(cat "$TMP/err")"
  [ ! -e "$K/.prepare-tmp" ] && ok "the next run cleared the staging folder" || fail "staging folder left: $(ls -a "$K")"
else
  wait $pid
  echo "     (the run finished before it could be killed: nothing to check)"
fi
I=$TMP/o-int
cp -r "$TMP/o-text" "$I"
before=$(listing "$I")
"$DTRUN" prepare --tokenizer "$TOK/llama2-mini.model" --out "$I" --quiet "$TMP/text" 2>"$TMP/err" &
pid=$!
for _ in $(seq 1 3000); do
  [ -d "$I/.prepare-tmp" ] && break
  sleep 0.01
done
sleep 0.2
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
if [ $rc -eq 0 ]; then
  echo "     (the run finished before SIGINT: nothing to check)"
else
  [ $rc -eq 1 ] || fail "SIGINT: exit $rc, expected 1"
  [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "^dtrun prepare: interrupted: nothing was written to $I" "$TMP/err" ||
    fail "SIGINT: stderr: $(cat "$TMP/err")"
  [ "$before" = "$(listing "$I")" ] && [ ! -e "$I/.prepare-tmp" ] &&
    ok "SIGINT: exit 1, one line, the previous output whole, nothing staged left" || fail "SIGINT changed $I"
fi

# ---- a full disk: every file limited to 64 KiB ------------------------------------------------
F=$TMP/o-full
cp -r "$TMP/o-text" "$F"
before=$(listing "$F")
(trap '' XFSZ; ulimit -f 64; exec "$DTRUN" prepare --tokenizer "$TOK/gpt2-mini.json" --out "$F" --quiet \
  "$TMP/text/big1.txt" "$TMP/text/a.txt") 2>"$TMP/err"
rc=$?
[ $rc -eq 1 ] || fail "full disk: exit $rc, expected 1: $(cat "$TMP/err")"
[ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "^dtrun prepare: .*cannot write: File too large" "$TMP/err" ||
  fail "full disk: stderr: $(cat "$TMP/err")"
[ "$before" = "$(listing "$F")" ] && [ ! -e "$F/.prepare-tmp" ] &&
  ok "full disk: exit 1, one line, the previous output whole" || fail "full disk changed $F: $(ls -a "$F")"

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s)" >&2
  exit 1
fi
echo "ok"
