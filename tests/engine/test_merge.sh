#!/usr/bin/env bash
# `dtrun merge`: a PEFT adapter merged into its base (tests/engine/golden/adapter, written by
# scripts/gen_adapter_goldens.py; the values are checked against PEFT's merge by
# test_engine_adapter) gives a model directory with the base's files; every bad input exits 2
# with one "dtrun: ..." line naming the thing, and leaves nothing behind (no output directory,
# no temporary directory beside it).
# Usage: test_merge.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTRUN=$2
G=$3/tests/engine/golden/adapter
TMP=$(mktemp -d /tmp/dt_test_merge_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# bad CODE PATTERN OUT -- command...: exit code, one stderr line matching PATTERN, OUT absent
# afterwards and no OUT.tmp* left beside it
bad() {
  local code=$1 pat=$2 out=$3
  shift 4
  "$@" >"$TMP/stdout" 2>"$TMP/err"
  local rc=$?
  [ "$rc" -eq "$code" ] || fail "$* exited $rc, expected $code: $(cat "$TMP/err")"
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "$*: expected one stderr line, got: $(cat "$TMP/err")"
  grep -q -- "$pat" "$TMP/err" || fail "$*: stderr lacks '$pat': $(cat "$TMP/err")"
  [ -n "${SHOW:-}" ] && cat "$TMP/err"
  grep -q "^dtrun: " "$TMP/err" || fail "$*: stderr does not start with 'dtrun: '"
  [ ! -e "$out" ] || [ -z "$(ls -A "$out" 2>/dev/null)" ] || fail "$*: left $out behind"
  ls -d "$out".tmp* >/dev/null 2>&1 && fail "$*: left a temporary directory beside $out"
  return 0
}

# a good merge: config, tokenizer and generation files copied; sharded with an index
"$DTRUN" merge --base "$G/llama/base" --adapter "$G/llama/adapter" -o "$TMP/ok" --max-shard-size 20KB \
  >"$TMP/stdout" 2>"$TMP/err" || fail "merge failed: $(cat "$TMP/err")"
for f in config.json tokenizer_config.json generation_config.json model.safetensors.index.json \
         model-00001-of-00002.safetensors model-00002-of-00002.safetensors; do
  [ -f "$TMP/ok/$f" ] || fail "merge output lacks $f"
done
cmp -s "$G/llama/base/tokenizer_config.json" "$TMP/ok/tokenizer_config.json" || fail "tokenizer_config.json not copied as is"
grep -q '"model-00002-of-00002.safetensors"' "$TMP/ok/model.safetensors.index.json" || fail "index does not name shard 2"
grep -q '"total_size": 26944' "$TMP/ok/model.safetensors.index.json" || fail "index total_size is not 26944 bytes"
# default shard size: one model.safetensors, no index; --dtype bf16 sets config.json's dtype
"$DTRUN" merge --base "$G/gpt2/base" --adapter "$G/gpt2/adapter" -o "$TMP/one" --dtype bf16 >/dev/null 2>&1 \
  || fail "bf16 merge failed"
[ -f "$TMP/one/model.safetensors" ] && [ ! -e "$TMP/one/model.safetensors.index.json" ] || fail "not one file"
grep -q '"dtype": "bfloat16"' "$TMP/one/config.json" || fail "config.json dtype not bfloat16"
# a trailing slash names the same directory
"$DTRUN" merge --base "$G/gpt2/base/" --adapter "$G/gpt2/adapter/" -o "$TMP/slash/" >/dev/null 2>&1 \
  || fail "merge -o DIR/ failed"
[ -f "$TMP/slash/model.safetensors" ] || fail "merge -o DIR/ wrote no model.safetensors"
# an empty output directory is taken
mkdir "$TMP/empty"
"$DTRUN" merge --base "$G/qwen3/base" --adapter "$G/qwen3/adapter" -o "$TMP/empty" >/dev/null 2>&1 \
  || fail "merge into an empty directory failed"
[ -f "$TMP/empty/model.safetensors" ] || fail "empty directory not filled"

# ---- bad input: exit 2, one line, nothing left ----
M() { "$DTRUN" merge "$@"; }
# the output exists (and what is in it stays)
bad 2 "already exists" "$TMP/none" -- M --base "$G/llama/base" --adapter "$G/llama/adapter" -o "$TMP/ok"
[ -f "$TMP/ok/config.json" ] || fail "an existing output directory lost a file"
echo x >"$TMP/afile"
bad 2 "already exists" "$TMP/none" -- M --base "$G/llama/base" --adapter "$G/llama/adapter" -o "$TMP/afile"
[ "$(cat "$TMP/afile")" = x ] || fail "an existing file was changed"
# base and adapter of different models
bad 2 "another model\|no base tensor" "$TMP/o1" -- M --base "$G/qwen3/base" --adapter "$G/llama/adapter" -o "$TMP/o1"
bad 2 "no base tensor" "$TMP/o2" -- M --base "$G/gpt2/base" --adapter "$G/llama/adapter" -o "$TMP/o2"
# missing adapter files, a missing base shard, a truncated adapter, a truncated base shard
mkdir "$TMP/a_noconf" && cp "$G/llama/adapter/adapter_model.safetensors" "$TMP/a_noconf/"
bad 2 "no adapter_config.json" "$TMP/o3" -- M --base "$G/llama/base" --adapter "$TMP/a_noconf" -o "$TMP/o3"
mkdir "$TMP/a_noweights" && cp "$G/llama/adapter/adapter_config.json" "$TMP/a_noweights/"
bad 2 "no adapter_model.safetensors" "$TMP/o4" -- M --base "$G/llama/base" --adapter "$TMP/a_noweights" -o "$TMP/o4"
cp -r "$G/llama/merged" "$TMP/b_noshard" && rm "$TMP/b_noshard/model-00002-of-00002.safetensors"
bad 2 "model-00002-of-00002.safetensors" "$TMP/o5" -- M --base "$TMP/b_noshard" --adapter "$G/llama/adapter" -o "$TMP/o5"
cp -r "$G/llama/adapter" "$TMP/a_trunc"
head -c 10000 "$G/llama/adapter/adapter_model.safetensors" >"$TMP/a_trunc/adapter_model.safetensors"
bad 2 "adapter_model.safetensors" "$TMP/o6" -- M --base "$G/llama/base" --adapter "$TMP/a_trunc" -o "$TMP/o6"
cp -r "$G/llama/merged" "$TMP/b_trunc"
head -c 5000 "$G/llama/merged/model-00001-of-00002.safetensors" >"$TMP/b_trunc/model-00001-of-00002.safetensors"
bad 2 "model-00001-of-00002.safetensors: the header describes .* (truncated" "$TMP/o7" -- M --base "$TMP/b_trunc" --adapter "$G/llama/adapter" -o "$TMP/o7"
# a config that is not LoRA, a bad rank, a bad alpha
cp -r "$G/llama/adapter" "$TMP/a_ia3" && sed -i 's/"peft_type": "LORA"/"peft_type": "IA3"/' "$TMP/a_ia3/adapter_config.json"
bad 2 "peft_type is IA3" "$TMP/o8" -- M --base "$G/llama/base" --adapter "$TMP/a_ia3" -o "$TMP/o8"
cp -r "$G/llama/adapter" "$TMP/a_r0" && sed -i 's/"r": 8/"r": 0/' "$TMP/a_r0/adapter_config.json"
bad 2 "r must be a whole number >= 1" "$TMP/o9" -- M --base "$G/llama/base" --adapter "$TMP/a_r0" -o "$TMP/o9"
cp -r "$G/llama/adapter" "$TMP/a_r4" && sed -i 's/"r": 8/"r": 4/' "$TMP/a_r4/adapter_config.json"
bad 2 "r = 4" "$TMP/o10" -- M --base "$G/llama/base" --adapter "$TMP/a_r4" -o "$TMP/o10"
cp -r "$G/llama/adapter" "$TMP/a_alpha" && sed -i 's/"lora_alpha": 16/"lora_alpha": -1/' "$TMP/a_alpha/adapter_config.json"
bad 2 "lora_alpha must be a number > 0" "$TMP/o11" -- M --base "$G/llama/base" --adapter "$TMP/a_alpha" -o "$TMP/o11"
# a key for a module the family has no linear of (q_proj renamed in the header: same length,
# the file stays a valid safetensors)
cp -r "$G/llama/adapter" "$TMP/a_mod"
perl -0777 -pi -e 's/layers\.0\.self_attn\.q_proj\.lora_A/layers.0.self_attn.x_proj.lora_A/; s/layers\.0\.self_attn\.q_proj\.lora_B/layers.0.self_attn.x_proj.lora_B/' \
  "$TMP/a_mod/adapter_model.safetensors"
bad 2 "llama has no linear 'model.layers.0.self_attn.x_proj'" "$TMP/o19" -- M --base "$G/llama/base" --adapter "$TMP/a_mod" -o "$TMP/o19"
# GPT-2's tensors with fan_in_fan_out false
cp -r "$G/gpt2/adapter" "$TMP/a_fif" && sed -i 's/"fan_in_fan_out": true/"fan_in_fan_out": false/' "$TMP/a_fif/adapter_config.json"
bad 2 "fan_in_fan_out" "$TMP/o12" -- M --base "$G/gpt2/base" --adapter "$TMP/a_fif" -o "$TMP/o12"
# a FIFO where the adapter weights or a base file should be
mkdir "$TMP/a_fifo" && cp "$G/llama/adapter/adapter_config.json" "$TMP/a_fifo/" && mkfifo "$TMP/a_fifo/adapter_model.safetensors"
bad 2 "FIFO" "$TMP/o13" -- M --base "$G/llama/base" --adapter "$TMP/a_fifo" -o "$TMP/o13"
mkdir "$TMP/b_fifo" && cp "$G/llama/base/config.json" "$TMP/b_fifo/" && mkfifo "$TMP/b_fifo/model.safetensors"
bad 2 "FIFO" "$TMP/o14" -- M --base "$TMP/b_fifo" --adapter "$G/llama/adapter" -o "$TMP/o14"
# a base directory that does not exist; bad options
bad 2 "does not exist" "$TMP/o15" -- M --base "$TMP/nope" --adapter "$G/llama/adapter" -o "$TMP/o15"
bad 2 "no unit" "$TMP/o16" -- M --base "$G/llama/base" --adapter "$G/llama/adapter" -o "$TMP/o16" --max-shard-size 5
bad 2 "dtype" "$TMP/o17" -- M --base "$G/llama/base" --adapter "$G/llama/adapter" -o "$TMP/o17" --dtype int8
bad 2 "needs --base" "$TMP/o18" -- M --adapter "$G/llama/adapter" -o "$TMP/o18"
bad 2 "parent directory" "$TMP/x/y" -- M --base "$G/llama/base" --adapter "$G/llama/adapter" -o "$TMP/x/y"

# a reward model's SEQ_CLS adapter (PEFT's, scripts/gen_objective_goldens.py rmlora-qwen3: LoRA +
# the score head as modules_to_save) on its causal-LM base: a sequence-classification directory,
# bitwise PEFT's merge_and_unload() as save_pretrained writes it (score.weight, no lm_head)
command -v python3 >/dev/null || fail "python3 is needed to read the merged safetensors"
for fam in llama qwen3; do
O=$3/tests/engine/golden/objective/rmlora-$fam
"$DTRUN" merge --base "$3/tests/kernels/golden/llama/$fam" --adapter "$O/adapter" -o "$TMP/cls-$fam" >/dev/null 2>"$TMP/err" ||
  fail "SEQ_CLS merge ($fam) failed: $(cat "$TMP/err")"
python3 - "$TMP/cls-$fam" "$O/merged" <<'PY' || fail "SEQ_CLS merge ($fam) differs from PEFT's"
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack_from("<Q", b)[0]; h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
ours, peft = load(sys.argv[1] + "/model.safetensors"), load(sys.argv[2] + "/model.safetensors")
bad = []
if sorted(ours) != sorted(peft): bad.append(f"tensors {sorted(set(ours) ^ set(peft))} differ")
diff = [k for k in ours if k in peft and ours[k] != peft[k]]
if diff: bad.append(f"not bitwise PEFT's merge: {diff}")
c, pc = json.load(open(sys.argv[1] + "/config.json")), json.load(open(sys.argv[2] + "/config.json"))
if c["architectures"] != pc["architectures"] or c.get("id2label") != pc["id2label"] or "lm_head.weight" in ours:
    bad.append(f"config: {c['architectures']} {c.get('id2label')}, PEFT's {pc['architectures']} {pc['id2label']}")
if bad: print("FAIL SEQ_CLS merge: " + "; ".join(bad)); sys.exit(1)
print(f"ok   SEQ_CLS merge: {c['architectures'][0]}, {len(ours)} tensors bitwise PEFT's merge_and_unload")
PY
done
# ... on a base that is no causal LM: one line, nothing left (the shards were written first)
mkdir "$TMP/b_model" && cp "$3/tests/kernels/golden/llama/qwen3/"* "$TMP/b_model/" &&
  sed -i 's/Qwen3ForCausalLM/Qwen3Model/' "$TMP/b_model/config.json"
O=$3/tests/engine/golden/objective/rmlora-qwen3
bad 2 "not a \*ForCausalLM" "$TMP/o19" -- M --base "$TMP/b_model" --adapter "$O/adapter" -o "$TMP/o19"

[ "$fails" -eq 0 ] && echo ok
exit $((fails > 0))
