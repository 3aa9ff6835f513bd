#!/usr/bin/env bash
# `dtrun tokenize` (docs/tokenizers.md): each corpus line's ids equal the goldens of
# `tokenizers` / `sentencepiece` (single-line cases), --decode gives the lines back, and bad input exits 2
# with one "dtrun tokenize: ..." line.
# Usage: test_tokenize_cli.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTRUN=$2
DATA=$3/tests/tokenizer/data
TMP=$(mktemp -d /tmp/dt_test_tok_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# expect_exit CODE PATTERN -- command... (stdin from $TMP/in): exit code, one stderr line
expect_exit() {
  local code=$1 pat=$2
  shift 3
  "$@" <"$TMP/in" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ "$rc" -eq "$code" ] || fail "$* exited $rc, expected $code: $(cat "$TMP/err")"
  if [ -n "$pat" ]; then
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "$*: expected one stderr line, got: $(cat "$TMP/err")"
    grep -q -- "$pat" "$TMP/err" || fail "$*: stderr lacks '$pat': $(cat "$TMP/err")"
  fi
}

for file in gpt2-mini.json qwen2-mini.json llama3-mini.json llama2-mini.model; do
  name=${file%.*}
  # the corpus lines without escapes are single-line cases: their ids are the goldens'
  paste -d $'\x01' "$DATA/corpus.txt" "$DATA/$name.ids" | grep -v '\\' >"$TMP/pairs"
  cut -d $'\x01' -f1 "$TMP/pairs" >"$TMP/text"
  cut -d $'\x01' -f2 "$TMP/pairs" >"$TMP/want"
  [ "$(wc -l <"$TMP/text")" -ge 20 ] || fail "$name: too few single-line cases"
  "$DTRUN" tokenize --tokenizer "$DATA/$file" <"$TMP/text" >"$TMP/ids" 2>"$TMP/err" ||
    fail "$name: tokenize exited $?: $(cat "$TMP/err")"
  cmp -s "$TMP/ids" "$TMP/want" || fail "$name: ids differ from the goldens: $(diff "$TMP/ids" "$TMP/want" | head -5)"
  "$DTRUN" tokenize --tokenizer "$DATA/$file" --decode <"$TMP/ids" >"$TMP/back" 2>"$TMP/err" ||
    fail "$name: --decode exited $?: $(cat "$TMP/err")"
  if [ "$name" = qwen2-mini ]; then
    # NFC: decoding gives the composed text, which encodes to the same ids
    "$DTRUN" tokenize --tokenizer "$DATA/$file" <"$TMP/back" >"$TMP/again" 2>"$TMP/err"
    cmp -s "$TMP/again" "$TMP/want" || fail "$name: encode(decode(ids)) != ids: $(diff "$TMP/again" "$TMP/want" | head -5)"
    [ "$(cmp -l "$TMP/back" "$TMP/text" 2>/dev/null | wc -l)" -gt 0 ] || fail "$name: no case was changed by NFC"
  else
    cmp -s "$TMP/back" "$TMP/text" || fail "$name: decode(encode(x)) != x: $(diff "$TMP/back" "$TMP/text" | head -5)"
  fi
done

# --no-special: the special token's text is ordinary text
printf '<|endoftext|>\n' >"$TMP/in"
expect_exit 0 "" -- "$DTRUN" tokenize --tokenizer "$DATA/gpt2-mini.json"
[ "$(cat "$TMP/out")" = "0" ] || fail "<|endoftext|> should be id 0, got $(cat "$TMP/out")"
expect_exit 0 "" -- "$DTRUN" tokenize --tokenizer "$DATA/gpt2-mini.json" --no-special
[ "$(wc -w <"$TMP/out")" -gt 1 ] || fail "--no-special: expected several ids, got $(cat "$TMP/out")"

# bad input: exit 2, one line
: >"$TMP/in"
expect_exit 0 "" -- "$DTRUN" tokenize --help
expect_exit 2 "^dtrun tokenize: .*--tokenizer" -- "$DTRUN" tokenize
expect_exit 2 "^dtrun tokenize: .*--bogus" -- "$DTRUN" tokenize --tokenizer "$DATA/gpt2-mini.json" --bogus
expect_exit 2 "^dtrun tokenize: .*missing.json" -- "$DTRUN" tokenize --tokenizer "$TMP/missing.json"
printf '{"model": {"type": "BPE", "vocab": {' >"$TMP/broken.json"
expect_exit 2 "^dtrun tokenize: .*broken.json.*invalid JSON" -- "$DTRUN" tokenize --tokenizer "$TMP/broken.json"
printf '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}' >"$TMP/wp.json"
expect_exit 2 "WordPiece.*byte-level BPE tokenizer.json (GPT-2, Llama-3, Qwen2) is supported" -- \
  "$DTRUN" tokenize --tokenizer "$TMP/wp.json"
printf '{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}' >"$TMP/ug.json"
expect_exit 2 "Unigram.*is supported" -- "$DTRUN" tokenize --tokenizer "$TMP/ug.json"
expect_exit 2 "^dtrun tokenize: .*directory" -- "$DTRUN" tokenize --tokenizer "$TMP"
printf '1 2 3\n5 999999\n' >"$TMP/in"
expect_exit 2 "^dtrun tokenize: line 2: token id 999999 is out of range" -- \
  "$DTRUN" tokenize --tokenizer "$DATA/gpt2-mini.json" --decode
printf '1 x2\n' >"$TMP/in"
expect_exit 2 "^dtrun tokenize: line 1: expected token ids" -- "$DTRUN" tokenize --tokenizer "$DATA/gpt2-mini.json" --decode
printf '1 -4\n' >"$TMP/in"
expect_exit 2 "^dtrun tokenize: line 1:" -- "$DTRUN" tokenize --tokenizer "$DATA/gpt2-mini.json" --decode
printf 'hello world' >"$TMP/notamodel.model"
expect_exit 2 "^dtrun tokenize: .*notamodel.model: neither a tokenizer.json .* nor a SentencePiece" -- \
  "$DTRUN" tokenize --tokenizer "$TMP/notamodel.model"
head -c 2000 "$DATA/llama2-mini.model" >"$TMP/cut.model"
expect_exit 2 "^dtrun tokenize: .*cut.model: .*SentencePiece" -- "$DTRUN" tokenize --tokenizer "$TMP/cut.model"
printf '5 1000\n' >"$TMP/in"
expect_exit 2 "^dtrun tokenize: line 1: token id 1000 is out of range" -- \
  "$DTRUN" tokenize --tokenizer "$DATA/llama2-mini.model" --decode
printf 'ok\nbad \377 byte\n' >"$TMP/in"
expect_exit 2 "^dtrun tokenize: line 2: input is not UTF-8" -- "$DTRUN" tokenize --tokenizer "$DATA/llama2-mini.model"
printf 'ok\nbad \377 byte\n' >"$TMP/in"
expect_exit 2 "^dtrun tokenize: line 2: input is not UTF-8" -- "$DTRUN" tokenize --tokenizer "$DATA/gpt2-mini.json"

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s)" >&2
  exit 1
fi
echo ok
