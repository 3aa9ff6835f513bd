#!/usr/bin/env bash
# `dtrun prepare --format llava` (docs/vlm-images.md): a run over the committed LLaVA records
# and images prints its image counts; a bad image (truncated, missing, a FIFO, a bomb by
# --max-image-pixels) exits 2 with one line naming the JSON file, the record and its id and
# the image, and leaves the previous output as it was; --on-bad-image skip finishes, exits 0
# and says on stderr how many records it left out; bad flags exit 2.
# Usage: test_vlm_cli.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTRUN=$2
SRC=$3
TMP=$(mktemp -d /tmp/dt_test_vlm_cli_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
. "$(dirname "$0")/prepare_lib.sh"
ARGS=(--tokenizer "$SRC/tests/tokenizer/data/qwen2-mini.json" --format llava --image-token-id 1500
      --image-tokens 16 --image-size 56 --val-fraction 0 --image-folder "$TMP/imgs")
mkdir "$TMP/imgs"
cp "$SRC"/tests/data/images/*.jpg "$SRC"/tests/data/images/*.png "$TMP/imgs/"

"$DTRUN" prepare "${ARGS[@]}" --out "$TMP/o" "$SRC/tests/data/llava.json" >"$TMP/out" 2>"$TMP/err" ||
  fail "llava run exited $?: $(cat "$TMP/err")"
grep -q "images: 4 train, 0 val (56x56 crops in pixel shards)" "$TMP/out" || fail "summary: $(cat "$TMP/out")"
[ -f "$TMP/o/train/train-000000.px" ] || fail "no pixel shard"
grep -q '"pixel_shards": \["train/train-000000.px"\]' "$TMP/o/prepare.json" || fail "prepare.json lists no pixel shard"
before=$(listing "$TMP/o")

head -c 700 "$SRC/tests/data/images/cmyk-60x40.jpg" >"$TMP/imgs/cmyk-60x40.jpg"
expect 2 "llava.json: record 2 (id cmyk): image: .*cmyk-60x40.jpg: corrupt or truncated JPEG.*--on-bad-image skip" \
  "${ARGS[@]}" --out "$TMP/o" "$SRC/tests/data/llava.json"
[ "$(listing "$TMP/o")" = "$before" ] || fail "a failed run changed the previous output"
"$DTRUN" prepare "${ARGS[@]}" --on-bad-image skip --out "$TMP/o" "$SRC/tests/data/llava.json" >"$TMP/out" 2>"$TMP/err" ||
  fail "skip exited $?: $(cat "$TMP/err")"
grep -q "skipped 1 record(s) whose image could not be used.*record 2 (id cmyk)" "$TMP/err" || fail "skip: $(cat "$TMP/err")"
grep -q "images: 3 train" "$TMP/out" || fail "skip summary: $(cat "$TMP/out")"
rm "$TMP/imgs/cmyk-60x40.jpg"
expect 2 "record 2 (id cmyk): image: .*cmyk-60x40.jpg: cannot open" "${ARGS[@]}" --out "$TMP/o2" "$SRC/tests/data/llava.json"
mkfifo "$TMP/imgs/cmyk-60x40.jpg"
expect 2 "cmyk-60x40.jpg: is a FIFO" "${ARGS[@]}" --out "$TMP/o2" "$SRC/tests/data/llava.json"
[ ! -e "$TMP/o2" ] || fail "a failed first run left $TMP/o2"
expect 2 "pixels is above the limit of 100 (PIL's MAX_IMAGE_PIXELS)" "${ARGS[@]}" --max-image-pixels 100 --out "$TMP/o2" \
  "$SRC/tests/data/llava.json"
expect 2 "--on-bad-image 'maybe': use stop or skip" "${ARGS[@]}" --on-bad-image maybe --out "$TMP/o2" x.json
expect 2 "--image-aspect 'wide'" "${ARGS[@]}" --image-aspect wide --out "$TMP/o2" x.json
expect 2 "needs --image-folder" --tokenizer "$SRC/tests/tokenizer/data/qwen2-mini.json" --format llava --out "$TMP/o2" x.json
rm -f "$TMP/imgs/cmyk-60x40.jpg" && cp "$SRC/tests/data/images/cmyk-60x40.jpg" "$TMP/imgs/"
# the model's own files: llava-1.5's processor (336 px) and config (image token 32000, 576 of them)
"$DTRUN" prepare --tokenizer "$SRC/tests/tokenizer/data/qwen2-mini.json" --format llava --val-fraction 0 \
  --image-folder "$TMP/imgs" --processor-config "$SRC/tests/data/llava-hf/preprocessor_config.json" \
  --model-config "$SRC/tests/data/llava-hf/config.json" --out "$TMP/o3" "$SRC/tests/data/llava.json" >"$TMP/out" 2>"$TMP/err" ||
  fail "configs: exited $?: $(cat "$TMP/err")"
grep -q "(336x336 crops in pixel shards)" "$TMP/out" || fail "configs: $(cat "$TMP/out")"
"$DTRUN" prepare "${ARGS[@]}" --image-loader load_image --out "$TMP/o5" "$SRC/tests/data/llava.json" >"$TMP/out" 2>"$TMP/err" ||
  fail "load_image: exited $?: $(cat "$TMP/err")"
grep -q '"loader": "load_image"' "$TMP/o5/prepare.json" || fail "load_image: not in prepare.json"
expect 2 "--image-loader 'cv2'" "${ARGS[@]}" --image-loader cv2 --out "$TMP/o2" x.json
grep -q '"image_token_id": 32000' "$TMP/o3/prepare.json" && grep -q '"image_tokens": 576' "$TMP/o3/prepare.json" ||
  fail "configs: prepare.json lacks the model's image token: $(grep image_token "$TMP/o3/prepare.json")"
sed 's/"resample": 3/"resample": 2/' "$SRC/tests/data/llava-hf/preprocessor_config.json" >"$TMP/pp.json"
expect 2 "pp.json: \$.resample: only 3 (bicubic) is implemented" --tokenizer "$SRC/tests/tokenizer/data/qwen2-mini.json" \
  --format llava --image-folder "$TMP/imgs" --processor-config "$TMP/pp.json" --out "$TMP/o4" x.json
[ $fails -eq 0 ] && echo "ok" || echo "$fails failure(s)"
exit $((fails > 0))
