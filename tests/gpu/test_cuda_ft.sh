#!/bin/bash
# The freeze and LoRA methods trained by dtrun on the CUDA device against the CPU device
# (docs/finetune.md "In dtrun"; needs a GPU, exits 77 without one): the CPU's
# tests/dist/test_ft_dtrun.sh, one rank. For MODEL (qwen3-tiny, gpt2-tiny), METHOD (freeze:
# the last block; lora: r 8, alpha 16 on every linear) and precision (fp32, mixed-bf16), the
# same plan with "device": "cpu" and "cuda", same seed, data and batch:
#   - ZeRO stage 0, stage 3, and stage 3 with optimizer and parameters offloaded: every step's
#     loss and grad norm within 1e-5 relative of the CPU's in fp32 (GEMM and reduction order
#     differ, nothing else), within test_cuda_train.sh's BF16_BOUND in mixed-bf16;
#   - LoRA with dropout 0.1 (the device's counter-based masks, dt_device_ops.dropout_mask):
#     the fp32 bound, so the GPU draws the CPU's masks;
#   - the cuda run's params, gradients and optimizer state on the device within 2 % of the
#     plan's prediction (run-report; the method's activations are not yet the planner's);
#   - the frozen tensors of the cuda run's final model.safetensors bitwise the CPU run's
#     (both from the same seed: the base is never updated on either device);
#   - resume on cuda from the step-2 checkpoint: steps 3-4 bitwise the continuous run's.
# Usage: test_cuda_ft.sh DTPLAN DTRUN SRCDIR
set -u
DTPLAN=$1
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3
export OMP_NUM_THREADS=2
dt_scratch dt_test_cuda_ft
FAIL=0
BF16_BOUND=5e-3   # tests/gpu/test_cuda_train.sh's, chosen there before any GPU run

# plan MODEL_PLAN DEVICE STAGE OFFLOAD PRECISION DROPOUT OUT: the solved method on tiny-cpu.json
plan() {
    python3 - "$SRC/configs/plans/tiny-cpu.json" "$@" <<'PY'
import json, sys
src, solved, dev, stage, off, prec, drop, out = sys.argv[1:]
p = json.load(open(src))
s = json.load(open(solved))
p["model"], p["finetune"] = s["model"], s["finetune"]
if prec != "fp32":
    p["precision"] = s["precision"]
p["cluster"]["device"] = dev
p["cluster"]["hardware"]["device"] = dev
p["cluster"]["gpus_per_node"] = 1
p["parallel"].update(zero_stage=int(stage), world_size=1, offload_optimizer=off,
                     offload_param=off if int(stage) == 3 else "none", overlap_comm=False, nvme_path="")
p["batch"].update(micro_batch=4, grad_accum=2, global_batch=8, seq_len=29)
p["data"]["eval_interval"] = 0
p["schedule"].update(total_steps=4, warmup_steps=2)
p["output"].update(save_interval=2, keep_last=3)
p["precision"].pop("bytes_per_param", None)
p.pop("prediction", None)   # recomputed by dtrun for the device and precision
if float(drop) > 0:
    p["finetune"]["lora"]["dropout"] = float(drop)
json.dump(p, open(out, "w"), indent=2)
PY
}

# is there a GPU? a one-step cuda run of a LoRA plan answers it (no output dir is made without one)
"$DTPLAN" solve --model qwen3-tiny --gpus 1 --mem 2G --hardware cpu --stages 0 --finetune lora --precision fp32 \
    -o "$TMP/probe-plan.json" >/dev/null || { echo "FAIL: dtplan cannot plan the probe"; exit 1; }
plan "$TMP/probe-plan.json" cuda 0 none fp32 0 "$TMP/probe.json"
dt_cuda_probe "$DTRUN" "$TMP/probe.json" "$TMP"

# compare CPU_OUT CUDA_OUT BOUND LABEL METHOD MODEL: losses / norms, the cuda run's model states, the frozen base
compare() {
    { echo "$dt_metrics_close"; cat <<'PY'; } | python3 - "$@" || return 1
import glob, json, struct, sys
cpu, gpu, bound, label, method, model = sys.argv[1:]
bad = []
metrics_close(gpu, cpu, bad, float(bound))
for rp, r in run_reports(gpu, 1, bad):
    for cat in ("params", "grads", "optimizer"):
        pred, meas = r["predicted"][cat], r["measured"][cat]
        if pred == 0 and meas == 0: continue
        if pred == 0 or abs(meas - pred) / pred > 0.02: bad.append(f"{rp}: device {cat} measured {meas} vs predicted {pred}")
def tensors(path):
    f = open(path, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
last = lambda d: sorted(glob.glob(d + "/ckpt-*/model.safetensors"))[-1]
a, b = tensors(last(cpu)), tensors(last(gpu))
last_block = "h.1." if model.startswith("gpt2") else "model.layers.1."   # --trainable-layers 1 of 2
trained = (lambda k: ".lora_" in k) if method == "lora" else (lambda k: last_block in k)
frozen_bad = [k for k in a if not trained(k) and a[k] != b.get(k)]
if set(a) != set(b) or frozen_bad: bad.append("frozen tensors differ from the CPU run's: " + ", ".join(frozen_bad[:4]))
if bad:
    print(f"FAIL {label}: " + "; ".join(bad)); sys.exit(1)
print(f"ok   {label}")
PY
}

# case MODEL METHOD PREC STAGE OFFLOAD BOUND [LORA_DROPOUT]
case_() {
    local model=$1 method=$2 pr=$3 st=$4 off=$5 bound=$6 drop=${7:-0}
    local name="$model-$method-$pr-s$st-$off${7:+-drop}" args="--finetune freeze --trainable-layers 1"
    [ "$method" = lora ] && args="--finetune lora"
    # shellcheck disable=SC2086
    "$DTPLAN" solve --model "$model" --gpus 1 --mem 2G --hardware cpu --stages 0 $args --precision "$pr" \
        -o "$TMP/$name-solved.json" >/dev/null || { echo "FAIL $name: dtplan solve"; FAIL=1; return; }
    for dev in cpu cuda; do
        plan "$TMP/$name-solved.json" "$dev" "$st" "$off" "$pr" "$drop" "$TMP/$name-$dev.json"
        if ! "$DTRUN" "$TMP/$name-$dev.json" --out "$TMP/$name-$dev" --quiet 2>"$TMP/err"; then
            echo "FAIL $name: $dev run: $(cat "$TMP/err")"; FAIL=1; return
        fi
    done
    compare "$TMP/$name-cpu" "$TMP/$name-cuda" "$bound" "$name" "$method" "$model" || FAIL=1
}

for model in qwen3-tiny gpt2-tiny; do
    for method in freeze lora; do
        case_ "$model" "$method" fp32 0 none 1e-5
        case_ "$model" "$method" fp32 3 cpu 1e-5
        case_ "$model" "$method" mixed-bf16 0 none "$BF16_BOUND"
        case_ "$model" "$method" mixed-bf16 3 none "$BF16_BOUND"
    done
    case_ "$model" lora fp32 0 none 1e-5 0.1
done

# resume on cuda (LoRA, mixed-bf16, stage 3): steps 3-4 from ckpt-2 equal the continuous run's, bitwise
name=qwen3-tiny-lora-mixed-bf16-s3-none
R="$TMP/resume"
mkdir -p "$R"
cp -r "$TMP/$name-cuda/ckpt-00000002" "$R/"
if "$DTRUN" "$TMP/$name-cuda.json" --out "$R" --quiet --resume 2>"$TMP/err"; then
    python3 - "$TMP/$name-cuda" "$R" <<'PY' || FAIL=1
import json, sys
a = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(sys.argv[1] + "/metrics.jsonl")}
b = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(sys.argv[2] + "/metrics.jsonl")}
bad = [s for s in (3, 4) if a.get(s) != b.get(s)]
print("ok   LoRA resume on cuda: steps 3-4 bitwise" if not bad else f"FAIL LoRA resume on cuda: differ at {bad}")
sys.exit(1 if bad else 0)
PY
else
    echo "FAIL LoRA resume on cuda: $(cat "$TMP/err")"; FAIL=1
fi
[ $FAIL -eq 0 ] && echo "ok   freeze and LoRA on cuda"
exit $FAIL
