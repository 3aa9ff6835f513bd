#!/usr/bin/env bash
# dtplan estimate end to end: the users' 32B / 8-GPU table (docs/memory-model.md),
# the ZeRO paper example, JSON,
# --compare deepspeed, DeepSpeed configs, --plan, and every bad-input path
# (exit 2 + one line on stderr). Usage: test_estimate_cli.sh DTPLAN DTRUN SRCDIR
set -u
DTPLAN=$1
SRC=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# ok ARGS... : exit 0; stdout in $TMP/out
ok() {
    "$DTPLAN" estimate "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    [ $rc -eq 0 ] || fail "estimate $* exited $rc: $(cat "$TMP/err")"
}
# has REGEX : stdout matches
has() { grep -Eq -- "$1" "$TMP/out" || fail "output lacks /$1/ ($LAST)"; }
# bad REGEX ARGS... : exit 2 and exactly one stderr line matching REGEX
bad() {
    local re=$1
    shift
    "$DTPLAN" estimate "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    [ $rc -eq 2 ] || fail "estimate $* exited $rc, expected 2"
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "estimate $*: expected one stderr line, got: $(cat "$TMP/err")"
    grep -Eq -- "$re" "$TMP/err" || fail "estimate $*: stderr '$(cat "$TMP/err")' lacks /$re/"
}

# --- the users' table (docs/memory-model.md): 32B on 8 GPUs, 2-byte everything, GB ---
LAST="users' 32B table"
ok --params 32B --gpus 8 --precision pure-bf16 --units GB
# columns: params grads optimizer | states
has '^  0   none/none  \|    64\.00    64\.00    128\.00 \|   256\.00 \|'
has '^  1   none/none  \|    64\.00    64\.00     16\.00 \|   144\.00 \|'
has '^  2   none/none  \|    64\.00     8\.00     16\.00 \|    88\.00 \|'
has '^  2   cpu/none   \|    64\.00     8\.00      0\.00 \|    72\.00 \|'
has '^  3   none/none  \|     8\.00     8\.00     16\.00 \|    32\.00 \|'
has '^  3   cpu/none   \|     8\.00     8\.00      0\.00 \|    16\.00 \|'
has '64 layers, hidden 5120, 40 heads, 8 kv heads, head dim 128, ffn 27648, vocab 152064'
has 'params +32000000000 as requested'   # issue 18: the one parameter-count rule's wording
has 'GB = 10\^9 bytes'
[ "$(grep -c '^  [0-3]   ' "$TMP/out")" -eq 14 ] || fail "expected 14 stage x offload rows"

# --- ZeRO paper: 7.5B on 64 GPUs, mixed precision (default) ---
LAST="zero paper"
ok --params 7.5B --gpus 64 --nodes 8 --units GB
has '^  0   none/none  \|.*\|   120\.00 \|'
has '^  1   none/none  \|.*\|    31\.41 \|'
has '^  2   none/none  \|.*\|    16\.64 \|'
has '^  3   none/none  \|.*\|     1\.88 \|'
has '8 nodes x 8 GPUs = 64 data-parallel ranks'

# --- JSON: integers in bytes, fits with --mem ---
LAST="json"
ok --params 32B --gpus 8 --precision pure-bf16 --json --mem 80GB --zero-stage 2
has '"params": 32000000000'
has '"zero_stage": 2, "offload_optimizer": "cpu", "offload_param": "none"'
has '"per_gpu": \{"params": 64000000000, "grads": 8000000000, "optimizer": 0,'
has '"fits": false'
has '"mem_limit": 80000000000'
if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["rows"])==2; assert all(isinstance(v,int) for r in d["rows"] for v in r["per_gpu"].values())' "$TMP/out" ||
        fail "JSON does not parse or has non-integer bytes"
fi
ok --model gpt2 --json --mem 80G
has '"fits": true'

# --- checkpointing lowers activations, materialized attention raises them ---
LAST="ckpt"
ok --model llama-2-7b --gpus 8 --zero-stage 3 --offload-optimizer none --offload-param none --json
none=$(grep -o '"activations": [0-9]*' "$TMP/out" | grep -o '[0-9]*')
ok --model llama-2-7b --gpus 8 --zero-stage 3 --offload-optimizer none --offload-param none --json --ckpt full
full=$(grep -o '"activations": [0-9]*' "$TMP/out" | grep -o '[0-9]*')
ok --model llama-2-7b --gpus 8 --zero-stage 3 --offload-optimizer none --offload-param none --json --ckpt 16
half=$(grep -o '"activations": [0-9]*' "$TMP/out" | grep -o '[0-9]*')
ok --model llama-2-7b --gpus 8 --zero-stage 3 --offload-optimizer none --offload-param none --json --attention materialized
mat=$(grep -o '"activations": [0-9]*' "$TMP/out" | grep -o '[0-9]*')
[ "$full" -lt "$half" ] && [ "$half" -lt "$none" ] && [ "$none" -lt "$mat" ] ||
    fail "activations not ordered full < 16 < none < materialized: $full $half $none $mat"

# --- dtype overrides: fp32 gradients double the grads column ---
LAST="dtype"
ok --params 32B --gpus 8 --grad-dtype fp32 --zero-stage 0 --json
has '"grads": 128000000000'
ok --params 32B --gpus 8 --master-dtype none --moment-dtype bf16 --zero-stage 0 --json
has '"optimizer": 128000000000'

# --- --compare deepspeed ---
LAST="compare"
ok --params 32B --gpus 8 --compare deepspeed
has '^SW: Model with 32000M total params, 778M largest layer params\.$'
has '^  per CPU  \|  per GPU \|   Options$'
has '^ +[0-9]+\.[0-9]{2}GB \| +[0-9]+\.[0-9]{2}GB \| offload_param=cpu , offload_optimizer=cpu , zero_init=1$'
has 'offload_optimizer=none$'
has '^why ours differ: '

# --- DeepSpeed configs as the user documents show them ---
LAST="deepspeed"
ok --params 32B --deepspeed "$SRC/configs/deepspeed/zero3.json" --units GB
has '^  3   cpu/cpu    \|'
has 'reduce_bucket_size "auto" -> hidden\^2 = 26214400'
has 'mixed-fp16'
ok --model qwen3-0.6b --deepspeed "$SRC/configs/deepspeed/zero2.json"
has '^  2   none/none  \|'
[ "$(grep -c '^  [0-3]   ' "$TMP/out")" -eq 1 ] || fail "a config gives exactly one row"
bad 'train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size 32 != 4 \* 8 \* 8' \
    --params 32B --gpus 8 --deepspeed "$SRC/configs/deepspeed/zero3.json"
bad 'ds train_micro_batch_size_per_gpu=4 vs --micro-batch 2' \
    --params 32B --micro-batch 2 --deepspeed "$SRC/configs/deepspeed/zero1.json"
bad 'ds fp16.enabled=true vs --precision mixed-bf16' \
    --params 32B --precision mixed-bf16 --deepspeed "$SRC/configs/deepspeed/zero1.json"
printf '{"zero_optimization": {"stage": 5}, "train_micro_batch_size_per_gpu": 1}' >"$TMP/s5.json"
bad 'Maximum supported ZeRO stage is 3' --params 1B --deepspeed "$TMP/s5.json"
printf '{"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}, "train_micro_batch_size_per_gpu": 1}' >"$TMP/op.json"
bad 'offload_param device "cpu" needs ZeRO stage 3' --params 1B --deepspeed "$TMP/op.json"
printf '{"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}, "train_micro_batch_size_per_gpu": 1}' >"$TMP/nv.json"
bad 'offload_optimizer device "nvme" needs ZeRO stage 3' --params 1B --deepspeed "$TMP/nv.json"
printf '{"zero_optimization": {"stage": 2, "bucket": 1}, "train_micro_batch_size_per_gpu": 1}' >"$TMP/uk.json"
bad '\$\.zero_optimization\.bucket: unknown key' --params 1B --deepspeed "$TMP/uk.json"
printf '{"train_micro_batch_size_per_gpu": 1, "train_micro_batch_size_per_gpu": 2}' >"$TMP/dup.json"
bad 'duplicate key' --params 1B --deepspeed "$TMP/dup.json"
bad 'cannot open' --params 1B --deepspeed "$TMP/missing.json"
# partial offload and ZeRO++: modelled under --runtime deepspeed, noted under dtrun, refused as
# DeepSpeed refuses them (docs/memory-model.md "Partial offload and ZeRO++")
LAST="zero++"
printf '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "sub_group_size": 1e8, "offload_optimizer": {"device": "cpu", "ratio": 0.3}, "zero_hpz_partition_size": 8, "zero_quantized_weights": true}}' >"$TMP/zpp.json"
ok --model llama-2-7b --gpus 16 --nodes 2 --deepspeed "$TMP/zpp.json" --runtime deepspeed
# Llama-2-7B / 16: 3 of 5 sub-groups of 1e8 on the GPU (3.35 GiB of optimizer, 1.12 GiB of fp32
# gradients), hpZ's secondary partition on top of the 0.78 GiB primary
has '^  3   cpu/none   \|     2\.35     1\.12      3\.35 \|'
has '\| +14\.44 +0\.00 \| backward start'
has '^zero-3     offload_optimizer.ratio 0.3; ZeRO\+\+: hpZ group 8, qwZ on, qgZ off'
# one configuration: its predicted step too; hpZ + qwZ + partial offload shorten it
has '^time       step [0-9.e+-]+ s = compute '
step_zpp=$(sed -n 's/^time       step \([0-9.e+-]*\) s.*/\1/p' "$TMP/out")
printf '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "sub_group_size": 1e8, "offload_optimizer": {"device": "cpu"}}}' >"$TMP/z3off.json"
ok --model llama-2-7b --gpus 16 --nodes 2 --deepspeed "$TMP/z3off.json" --runtime deepspeed
step_plain=$(sed -n 's/^time       step \([0-9.e+-]*\) s.*/\1/p' "$TMP/out")
awk -v a="$step_zpp" -v b="$step_plain" 'BEGIN { exit !(a > 0 && b > 0 && a < b) }' ||
    fail "ZeRO++ + partial offload step ($step_zpp s) not below the plain offload's ($step_plain s)"
ok --model llama-2-7b --gpus 16 --nodes 2 --deepspeed "$TMP/zpp.json" --runtime deepspeed --json
has '"offload_ratio": 0.3, "hpz_partition_size": 8, "quantized_weights": true, "quantized_gradients": false, "reduce_scatter": true, "communication_data_type": null'
printf '{"train_micro_batch_size_per_gpu": 1, "communication_data_type": "fp32", "zero_optimization": {"stage": 2, "reduce_scatter": false}}' >"$TMP/comm.json"
ok --model llama-2-7b --gpus 16 --nodes 2 --deepspeed "$TMP/comm.json" --runtime deepspeed
has '^gradients  all-reduced \(reduce_scatter false\), communicated in fp32'
printf '{"train_micro_batch_size_per_gpu": 1, "communication_data_type": "int8"}' >"$TMP/int8.json"
bad "Invalid communication_data_type. Supported data types: \['fp16', 'bf16', 'fp32'\]. Got: int8" --params 1B \
    --deepspeed "$TMP/int8.json"
ok --model llama-2-7b --gpus 16 --nodes 2 --deepspeed "$TMP/zpp.json"
has "note       offload_optimizer.ratio 0.3: DeepSpeed's partial offload; dtrun's engine offloads the whole"
has "note       zero_hpz_partition_size / zero_quantized_weights / zero_quantized_gradients: ZeRO\+\+; dtrun's"
printf '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 3}}' >"$TMP/hpz3.json"
bad 'zero_hpz_partition_size 3 does not divide the world size 16' --model llama-2-7b --gpus 16 --nodes 2 \
    --deepspeed "$TMP/hpz3.json" --runtime deepspeed
printf '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "zero_quantized_gradients": 1}}' >"$TMP/qg.json"
bad 'zero_quantized_gradients' --model llama-2-7b --gpus 16 --nodes 2 --deepspeed "$TMP/qg.json"

# --- --plan: re-evaluate a committed plan ---
LAST="plan"
if [ -f "$SRC/configs/plans/tiny-cpu.json" ]; then
    ok --plan "$SRC/configs/plans/tiny-cpu.json"
    has '^  [0-3]   [a-z]+/[a-z]+ +\|'
    has 'prediction'
    bad '--plan fixes the configuration; --gpus' --plan "$SRC/configs/plans/tiny-cpu.json" --gpus 2
    # round trip: the plan's exported DeepSpeed config gives the same memory row
    # (sequence and hardware are not DeepSpeed settings, so they are passed)
    if "$DTPLAN" export --deepspeed "$SRC/configs/plans/tiny-cpu.json" -o "$TMP/ds.json" >/dev/null 2>&1; then
        LAST="round trip"
        ok --plan "$SRC/configs/plans/tiny-cpu.json" --json
        grep -o '"per_gpu": {[^}]*}' "$TMP/out" >"$TMP/row_plan"
        ok --model gpt2-tiny --deepspeed "$TMP/ds.json" --precision fp32 --hardware cpu --seq 64 --json
        grep -o '"per_gpu": {[^}]*}' "$TMP/out" >"$TMP/row_ds"
        cmp -s "$TMP/row_plan" "$TMP/row_ds" || fail "export -> estimate --deepspeed differs: $(cat "$TMP/row_plan") vs $(cat "$TMP/row_ds")"
    fi
fi

# --- bad input: one line, exit 2 ---
bad "unknown model|not a catalog|no such" --model no-such-model
bad "32X" --params 32X
bad "\-5" --params -5
bad "--params" --params 0
bad "--gpus 12 is not divisible by --nodes 5" --params 7B --gpus 12 --nodes 5
bad "--gpus" --params 7B --gpus 0
bad "--gpus: -8 is below the minimum 1 \(e.g. --gpus 8\)" --params 7B --gpus -8
bad "--micro-batch" --params 7B --micro-batch 0
bad "--seq 2048: gpt2 has 1024 learned positions" --model gpt2 --seq 2048
bad "--ckpt 99: .* has only 64 layers" --params 32B --ckpt 99
bad "--ckpt 'some'" --params 32B --ckpt some
bad "--mem" --params 32B --mem 0
bad "--mem" --params 32B --mem 80X
bad "--units" --params 32B --units MB
bad "--precision" --params 32B --precision fp8
bad "--param-dtype" --params 32B --param-dtype int8
bad "--attention 'sparse'" --params 32B --attention sparse
bad "--compare 'megatron'" --params 32B --compare megatron
bad "offload_param device \"cpu\" needs ZeRO stage 3 \(stage is 2\)" --params 32B --zero-stage 2 --offload-param cpu
bad "offload_optimizer device \"nvme\" needs ZeRO stage 3" --params 32B --zero-stage 1 --offload-optimizer nvme
bad "offload_optimizer device \"cpu\" needs ZeRO stage 1, 2 or 3" --params 32B --zero-stage 0 --offload-optimizer cpu
bad "--zero-stage '4'" --params 32B --zero-stage 4
bad "give --params COUNT" --gpus 8
bad "either --params or --model" --params 7B --model gpt2
bad "unknown option '--gpu'" --params 7B --gpu 8
bad "--gpus given twice" --params 7B --gpus 8 --gpus 4
bad "--hardware|profile" --params 7B --hardware no-such-gpu

# --- issue 17: runtime profiles ---
LAST="runtime deepspeed"
ok --model llama-2-7b --gpus 8 --runtime deepspeed
has '^runtime    deepspeed \(Hugging Face model code\): sdpa attention, dropout off, logits fp32, RMSNorm in fp32'
has '\| peak at$'
has '^  3   cpu/none   \|.*\| backward start$'
[ "$(grep -c '^  [0-3]   ' "$TMP/out")" -eq 14 ] || fail "deepspeed: expected 14 stage x offload rows"
# offload placement: with offload_optimizer the device keeps no gradient partition
has '^  2   cpu/none   \|    12\.55     0\.00      0\.00 \|'
LAST="runtime fsdp rows"
ok --model gpt2 --gpus 8 --runtime fsdp --micro-batch 8 --units GB
[ "$(grep -c '^  [0-3]   ' "$TMP/out")" -eq 4 ] || fail "fsdp: expected stages 0, 2, 3 and 3 cpu/cpu"
has '^  3   cpu/cpu    \|'
LAST="runtime json"
ok --model qwen3-0.6b --gpus 8 --runtime deepspeed --attention eager --recompute selective --json
has '"runtime": \{"kind": "deepspeed", "attention": "eager", "selective_recompute": true'
has '"peak_phase": "backward start"'
LAST="largest layer"
ok --model llama-2-7b --gpus 8 --compare deepspeed --largest-layer block_matrix --zero-stage 3
has "largest layer = a block's largest matrix, --largest-layer block_matrix"
has 'SW: Model with 6738M total params, 45M largest layer params'
LAST="dtrun stays the default"
ok --model gpt2 --gpus 8
grep -q 'peak at\|^runtime ' "$TMP/out" && fail "the dtrun table grew a runtime line or a phase column"

# issue 34: --runtime deepspeed / fsdp on CPU ranks with a profile holding the measured footprint
sed -e 's/"name": "cpu"/"name": "cpu-hf"/' \
    -e 's/"reserve_bytes": 268435456,/"reserve_bytes": 268435456, "deepspeed_runtime_bytes": [800000000, 850000000, 851000000, 860000000], "torch_runtime_bytes": 700000000,/' \
    "$SRC/configs/hardware/cpu.json" >"$TMP/cpu-hf.json"
LAST="deepspeed on CPU ranks"
ok --model gpt2 --gpus 2 --runtime deepspeed --hardware "$TMP/cpu-hf.json" --zero-stage 2 --json
has '"reserve": 851000000,'
has '"phase_totals": \{"backward start": [0-9]+, "backward end": [0-9]+, "optimizer step": [0-9]+\}'
ok --model gpt2 --gpus 2 --runtime deepspeed --hardware "$TMP/cpu-hf.json" --zero-stage 3
has 'runtime footprint \(measured\) 0.75 GiB / 0.79 GiB / 0.79 GiB / 0.80 GiB at ZeRO 0/1/2/3'
LAST="fsdp on CPU ranks"
ok --model gpt2 --gpus 2 --runtime fsdp --hardware "$TMP/cpu-hf.json" --zero-stage 0 --json
has '"reserve": 700000000,'

"$DTPLAN" estimate --help >"$TMP/out" 2>&1 || fail "--help exits non-zero"
grep -q -- '--deepspeed' "$TMP/out" || fail "--help lacks --deepspeed"

if [ $fails -ne 0 ]; then
    echo "$fails check(s) failed" >&2
    exit 1
fi
echo ok
