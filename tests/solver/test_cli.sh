#!/usr/bin/env bash
# `dtplan solve` from the command line: a real solve (and its plan file), the
# infeasible report, and every bad input -> exit 2 with one "dtplan: ..." line.
# usage: test_cli.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTPLAN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# expect_bad "what the message must contain" args...
expect_bad() {
    local want=$1; shift
    "$DTPLAN" solve "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    [ $rc -eq 2 ] || fail "solve $* -> exit $rc (want 2)"
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "solve $* -> stderr not one line: $(cat "$TMP/err")"
    grep -q '^dtplan: ' "$TMP/err" || fail "solve $* -> stderr lacks 'dtplan: ' prefix"
    grep -qF -- "$want" "$TMP/err" || fail "solve $* -> '$(cat "$TMP/err")' lacks '$want'"
}

# a real solve: 32B on 8 x H100 at 80G
"$DTPLAN" solve --mem 80G --params 32B --gpus 8 -o "$TMP/plan.json" >"$TMP/out" 2>"$TMP/err" \
    || fail "32B solve exited $?: $(cat "$TMP/err")"
grep -q '^chosen: ZeRO-3' "$TMP/out" || fail "32B/8xH100/80G should choose ZeRO-3: $(cat "$TMP/out")"
grep -q 'tokens/s, MFU' "$TMP/out" || fail "no tokens/s and MFU line"
grep -q 'DDP (stage 0)  lost on memory' "$TMP/out" || fail "DDP should lose on memory"
[ "$(grep -c 'lost on' "$TMP/out")" -eq 3 ] || fail "want one 'lost on' line per other stage"
[ -s "$TMP/plan.json" ] || fail "no plan written"
grep -q '"zero_stage": 3' "$TMP/plan.json" || fail "plan.json lacks zero_stage 3"

# small model, large memory: the model's choice on fast NVLink
"$DTPLAN" solve --mem 80G --model gpt2 --gpus 8 --hardware A100-80GB >"$TMP/out" 2>&1 || fail "gpt2 solve: $(cat "$TMP/out")"
grep -q '^chosen: ' "$TMP/out" || fail "gpt2 solve printed no choice"

# infeasible: the smallest memory that fits, exit 2
expect_bad "smallest memory that fits" --mem 4G --params 70B --gpus 2 --no-offload
grep -q 'as DeepSpeed runs it' "$TMP/err" && fail "a DeepSpeed hint where DeepSpeed cannot fit either: $(cat "$TMP/err")"
# 70B on one 80G GPU: dtrun's engine keeps the gradient partition on the device, DeepSpeed's
# optimizer offload keeps gradients on the host: the one line says what fits under deepspeed
expect_bad "; as DeepSpeed runs it (--runtime deepspeed: an offloaded optimizer's gradients stay in host memory) it fits: ZeRO-3, offload optimizer cpu" \
    --mem 80G --params 70B --gpus 1 -o "$TMP/p70.json"
[ -e "$TMP/p70.json" ] && fail "an infeasible solve wrote its plan"
"$DTPLAN" solve --mem 80G --params 70B --gpus 1 --runtime deepspeed >"$TMP/out" 2>&1 &&
    grep -q '^chosen: ZeRO-3, offload optimizer cpu' "$TMP/out" || fail "the hinted deepspeed solve: $(cat "$TMP/out")"
# bad inputs
expect_bad "--mem is required" --params 7B
expect_bad "--mem" --mem 80X --params 7B
expect_bad "exactly one of --model" --mem 80G
expect_bad "unknown hardware 'B300'" --mem 80G --params 7B --hardware B300
expect_bad "no interconnect '7Gb'" --mem 80G --params 7B --interconnect 7Gb --nodes 2 --gpus 16
expect_bad "--stages" --mem 80G --params 7B --stages 0,4
expect_bad "not divisible by --nodes" --mem 80G --params 7B --gpus 6 --nodes 4
expect_bad "--global-batch 10 is not a multiple of the world size 4 (--gpus)" --mem 80G --params 7B --gpus 4 --global-batch 10
expect_bad "unknown option '--colour'" --mem 80G --params 7B --colour red
expect_bad "needs a value" --mem 80G --params
expect_bad "reserve" --mem 1G --params 7B
expect_bad "bf16" --mem 32G --model gpt2 --hardware V100-32GB
expect_bad "precision" --mem 80G --params 7B --precision fp8

"$DTPLAN" solve --help >/dev/null || fail "--help should exit 0"

# NVMe offload: a candidate only with --nvme-path; its host swap buffers follow
# --sub-group-size. GPT-2 XL fp32 on 2 CPU ranks of a 24105 MiB node (the node's
# memory is every rank's): only ZeRO-3 with the optimizer on NVMe fits, and only
# with sub-groups below DeepSpeed's 1e9 (4 x 1e9-capped-at-the-shard x 4 B per rank)
SRC=$3
python3 - "$SRC/configs/hardware/cpu.json" "$TMP/node.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))
h["name"] = "cpu-24g"
h["device_mem_bytes"] = h["host_mem_bytes"] = 24105 * 2**20
json.dump(h, open(sys.argv[2], "w"))
PY
XL="--mem 23G --hardware $TMP/node.json --model gpt2-xl --seq 128 --precision fp32 --gpus 2 --global-batch 2"
expect_bad "a candidate only with --nvme-path DIR" $XL --sub-group-size 5e7
expect_bad "nothing fits" $XL --nvme-path "$TMP/nv"
"$DTPLAN" solve $XL --nvme-path "$TMP/nv" --sub-group-size 5e7 -o "$TMP/xl.json" >"$TMP/out" 2>&1 ||
    fail "XL with NVMe and 5e7 sub-groups: $(cat "$TMP/out")"
grep -q '^chosen: ZeRO-3, offload optimizer nvme' "$TMP/out" || fail "XL should offload the optimizer to NVMe: $(cat "$TMP/out")"
for kv in '"offload_optimizer": "nvme"' "\"nvme_path\": \"$TMP/nv\"" '"sub_group_elems": 50000000'; do
    grep -qF -- "$kv" "$TMP/xl.json" || fail "XL plan lacks $kv"
done
expect_bad "--sub-group-size" $XL --sub-group-size 5X
# a plan that does not offload to NVMe carries no path
"$DTPLAN" solve --mem 1G --model gpt2-tiny --hardware cpu --nvme-path "$TMP/nv" -o "$TMP/tiny.json" >/dev/null 2>&1 ||
    fail "tiny solve with --nvme-path"
grep -qF '"nvme_path": ""' "$TMP/tiny.json" || fail "a plan without NVMe offload keeps an nvme_path"

# training settings travel into the plan unchanged (dtrun reads them)
"$DTPLAN" solve --mem 1G --model gpt2-tiny --hardware cpu --seq 64 --global-batch 16 --precision fp32 \
    --data /some/text --steps 300 --warmup 20 --lr 1e-3 --schedule WarmupCosineLR --out "$TMP/run" \
    --eval-interval 50 --save-interval 100 -o "$TMP/cpu.json" >"$TMP/out" 2>&1 || fail "cpu solve: $(cat "$TMP/out")"
for kv in '"train": "/some/text"' '"total_steps": 300' '"warmup_steps": 20' '"lr": 0.001' \
          '"kind": "WarmupCosineLR"' "\"dir\": \"$TMP/run\"" '"eval_interval": 50' '"save_interval": 100'; do
    grep -qF -- "$kv" "$TMP/cpu.json" || fail "plan lacks $kv"
done
expect_bad "--lr" --mem 1G --model gpt2-tiny --hardware cpu --lr abc
expect_bad "--lr" --mem 1G --model gpt2-tiny --hardware cpu --lr -1
expect_bad "--schedule" --mem 1G --model gpt2-tiny --hardware cpu --schedule Foo
expect_bad "--steps" --mem 1G --model gpt2-tiny --hardware cpu --steps 0
expect_bad "exceeds --steps" --mem 1G --model gpt2-tiny --hardware cpu --steps 10 --warmup 20

# calibrate: writes a profile dt_hardware_load accepts, usable by solve
"$DTPLAN" calibrate --no-mpi -o "$TMP/local.json" >"$TMP/out" 2>&1 || fail "calibrate: $(cat "$TMP/out")"
grep -q '"achievable_flops"' "$TMP/local.json" || fail "calibrate wrote no achievable_flops"
grep -q "^dtplan: calibrate: timing the engine's kernels (GPT-2 124M shapes" "$TMP/out" ||
    fail "calibrate did not say what it is measuring before the wait: $(head -2 "$TMP/out")"
"$DTPLAN" solve --mem 2G --model gpt2-tiny --gpus 2 --seq 64 --hardware "$TMP/local.json" >"$TMP/out" 2>&1 \
    || fail "solve on the calibrated profile: $(cat "$TMP/out")"
"$DTPLAN" calibrate --no-mpi -o "$TMP/no/such/folder/x.json" >/dev/null 2>"$TMP/err"
[ $? -eq 2 ] || fail "calibrate into a missing folder should exit 2 before measuring"
grep -q "^dtplan: calibrate: -o $TMP/no/such/folder/x.json: cannot write into '$TMP/no/such/folder'" "$TMP/err" &&
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "calibrate into a missing folder: $(cat "$TMP/err")"
grep -q 'timing the engine' "$TMP/err" && fail "calibrate measured before refusing the output folder"
"$DTPLAN" calibrate >/dev/null 2>"$TMP/err"; [ $? -eq 2 ] || fail "calibrate without -o should exit 2"
grep -q '^dtplan: calibrate: -o PATH is required' "$TMP/err" || fail "calibrate message: $(cat "$TMP/err")"
[ $fails -eq 0 ] && echo ok
exit $((fails > 0))
