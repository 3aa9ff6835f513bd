#!/bin/bash
# plan -> `dtplan export --deepspeed` -> `dtplan estimate --deepspeed` gives the same
# memory rows as `dtplan estimate --plan` on the plan itself (docs/plan-format.md,
# "DeepSpeed export", round trip).
# Skips (77) only while `dtplan estimate` is not built yet; once both commands
# exist, any failure is a failure.
# args: dtplan dtrun source-dir
set -u
DTPLAN=$1
SRC=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
# the memory rows of `estimate --json`, in bytes (the table rounds to 0.01 GiB)
rows() { sed -n '/"rows": \[/,/^  \]/p' "$1"; }

# plan  model  gpus  nodes  seq  ckpt  hardware  extra estimate flags
check() {
    local plan=$1 model=$2 gpus=$3 nodes=$4 seq=$5 ckpt=$6 hw=$7; shift 7
    local name; name=$(basename "$plan" .json)
    "$DTPLAN" export --deepspeed "$plan" -o "$T/$name.ds.json" >/dev/null || { bad "export $plan"; return; }
    "$DTPLAN" estimate --json --plan "$plan" >"$T/$name.plan.txt" 2>&1 || { bad "estimate --plan $plan: $(cat "$T/$name.plan.txt")"; return; }
    "$DTPLAN" estimate --json --deepspeed "$T/$name.ds.json" --model "$model" --gpus "$gpus" --nodes "$nodes" \
        --seq "$seq" --ckpt "$ckpt" --hardware "$hw" "$@" >"$T/$name.ds.txt" 2>&1 \
        || { bad "estimate --deepspeed for $plan: $(cat "$T/$name.ds.txt")"; return; }
    rows "$T/$name.plan.txt" >"$T/$name.a"
    rows "$T/$name.ds.txt" >"$T/$name.b"
    [ -s "$T/$name.a" ] || bad "no memory rows from estimate --plan $plan"
    diff "$T/$name.a" "$T/$name.b" >&2 || bad "memory rows differ for $plan (plan vs exported DeepSpeed config)"
}

check "$SRC/tests/plan/fixtures/gpt2-2x4-zero3.json" gpt2 8 2 1024 6 H100-SXM-80GB
check "$SRC/configs/plans/tiny-cpu.json" gpt2-tiny 1 1 64 0 cpu
# a stage-2 bf16 variant with non-default buckets
sed -e 's/"zero_stage": 3/"zero_stage": 2/' -e 's/"offload_param": "cpu"/"offload_param": "none"/' \
    -e 's/"preset": "mixed-fp16"/"preset": "mixed-bf16"/' -e 's/\(": \)"fp16"/\1"bf16"/g' \
    -e 's/"loss_scale": 0,/"loss_scale": 1,/' -e 's/"initial_scale_power": 16,/"initial_scale_power": 0,/' \
    -e 's/"reduce_bucket_elems": 500000000/"reduce_bucket_elems": 200000000/' \
    -e 's/"allgather_bucket_elems": 500000000/"allgather_bucket_elems": 200000000/' \
    -e '/"prediction": {/,$d' "$SRC/tests/plan/fixtures/gpt2-2x4-zero3.json" >"$T/z2.json"
# the sed above cut the prediction section; close the JSON again
sed -i '$ s/,$//' "$T/z2.json" && echo "}" >>"$T/z2.json"
check "$T/z2.json" gpt2 8 2 1024 6 H100-SXM-80GB
# issue 17: a deepspeed-runtime plan carries stage3_max_reuse_distance and the persistence
# threshold into the config, and --runtime deepspeed reads them back
"$DTPLAN" solve --model qwen3-0.6b --mem 20G --gpus 8 --runtime deepspeed --attention eager --stages 3 --seq 2048 \
    -o "$T/rt.json" >/dev/null 2>&1 || bad "solve --runtime deepspeed"
sed -i 's/"max_reuse_distance": 1000000000/"max_reuse_distance": 300000000/' "$T/rt.json"
"$DTPLAN" show "$T/rt.json" >/dev/null 2>&1 || bad "show a deepspeed-runtime plan"
check "$T/rt.json" qwen3-0.6b 8 1 2048 "$(grep -o '"ckpt_layers": [0-9]*' "$T/rt.json" | grep -o '[0-9]*$')" H100-SXM-80GB \
    --runtime deepspeed --attention eager \
    $(grep -q '"selective_recompute": true' "$T/rt.json" && echo --recompute selective)

# partial offload and ZeRO++ travel into the config and back (docs/memory-model.md "Partial
# offload and ZeRO++"): the same plan with offload_optimizer cpu, ratio 0.5 and hpZ groups of 4
python3 - "$T/rt.json" "$T/zpp.json" <<'PY' || bad "editing the ZeRO++ plan"
import json, sys
p = json.load(open(sys.argv[1]))
p["parallel"]["offload_optimizer"] = "cpu"
p["parallel"]["sub_group_elems"] = 10000000
p["runtime"].update(offload_ratio=0.5, hpz_partition_size=4, quantized_weights=True, communication_data_type="fp32")
p["prediction"] = {"valid": False}
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
"$DTPLAN" export --deepspeed "$T/zpp.json" -o "$T/zpp.ds.json" >/dev/null 2>&1 || bad "export the ZeRO++ plan"
grep -q '"ratio": 0.5' "$T/zpp.ds.json" && grep -q '"zero_hpz_partition_size": 4' "$T/zpp.ds.json" &&
    grep -q '"zero_quantized_weights": true' "$T/zpp.ds.json" && grep -q '"communication_data_type": "fp32"' "$T/zpp.ds.json" ||
    bad "export lost ratio / hpZ / qwZ / the comm dtype: $(cat "$T/zpp.ds.json")"
check "$T/zpp.json" qwen3-0.6b 8 1 2048 "$(grep -o '"ckpt_layers": [0-9]*' "$T/rt.json" | grep -o '[0-9]*$')" H100-SXM-80GB \
    --runtime deepspeed --attention eager \
    $(grep -q '"selective_recompute": true' "$T/rt.json" && echo --recompute selective)

[ $fails -eq 0 ] && echo ok
exit $((fails > 0))
