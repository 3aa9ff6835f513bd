#!/bin/bash
# dtrun on the CUDA device against the CPU device (docs/cuda.md "Training on
# CUDA"; needs a GPU, exits
# 77 without one). The committed tiny plan (gpt2-tiny) is trained for a few
# steps twice, "device": "cpu" and "device": "cuda", same seed, data and batch:
#   - ZeRO stages 0-3 at world 1, fp32: every step's loss and grad norm within
#     1e-5 relative of the CPU's (GEMM and reduction order differ, nothing else);
#   - mixed-bf16, stages 0 and 3: within BF16_BOUND (docs/cuda.md);
#   - offload_optimizer cpu (stage 2) and offload_param cpu (stage 3): the
#     host-side AdamW through pinned staging, fp32 bound;
#   - the cuda run's measured device memory per category (params, grads,
#     optimizer, activations) within 2 % of the plan's prediction (run-report);
#   - resume on cuda from the step-2 checkpoint gives the continuous run's
#     step 3-4 losses bitwise (checkpoint staging through host buffers);
#   - with >= 2 GPUs and mpirun: stages 1-3 at world 2 (NCCL) against the CPU
#     at world 1, fp32 bound.
# Usage: test_cuda_train.sh DTPLAN DTRUN SRCDIR
set -u
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3
export OMP_NUM_THREADS=2
TMP=$(mktemp -d /tmp/dt_test_cuda_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
FAIL=0
STEPS=4
# CPU vs GPU mixed-bf16: one different fp32 rounding can flip a bf16 rounding
# (2^-8 relative) of a weight or activation, so trajectories separate faster
# than in fp32; the fp32 master weights keep the loss close. Bound chosen
# before any GPU run (docs/cuda.md), to be confirmed on one.
BF16_BOUND=5e-3

# plan DEVICE STAGE WORLD OFFLOAD_OPT OFFLOAD_PARAM PRECISION OUT
plan() {
    python3 - "$SRC/configs/plans/tiny-cpu.json" "$@" <<'PY'
import json, sys
src, dev, stage, world, oo, op, prec, out = sys.argv[1:]
p = json.load(open(src))
w = int(world)
p["cluster"]["device"] = dev
p["cluster"]["hardware"]["device"] = dev
p["cluster"]["gpus_per_node"] = w
p["parallel"].update(zero_stage=int(stage), world_size=w, offload_optimizer=oo, offload_param=op,
                     overlap_comm=False, nvme_path="")
p["batch"].update(micro_batch=4, grad_accum=8 // 4 // w, global_batch=8)
p["data"]["eval_interval"] = 0
p["schedule"].update(total_steps=4, warmup_steps=2)
p["output"].update(save_interval=2, keep_last=3)
if prec == "bf16":
    p["precision"].update(preset="mixed-bf16", param="bf16", grad="bf16", has_master=True, master="fp32",
                          moment="fp32", activation="bf16")
p["precision"].pop("bytes_per_param", None)
p.pop("prediction", None)   # recomputed by dtrun for the device and precision
json.dump(p, open(out, "w"), indent=2)
PY
}

run() { dt_run_ranks "$DTRUN" "$@"; }  # WORLD PLAN OUT [args]

# is there a GPU? a one-step cuda run answers it (no output dir is made without one)
plan cuda 0 1 none none fp32 "$TMP/probe.json"
dt_cuda_probe "$DTRUN" "$TMP/probe.json" "$TMP"

# compare CPU_OUT CUDA_OUT BOUND LABEL: losses / norms, and the cuda run's memory
compare() {
    python3 - "$@" <<'PY' || return 1
import json, sys, glob
cpu, gpu, bound, label = sys.argv[1:]
bound = float(bound)
def series(d, k):
    return [json.loads(l)[k] for l in open(d + "/metrics.jsonl")]
bad = []
for k in ("loss", "grad_norm"):
    a, b = series(cpu, k), series(gpu, k)
    if len(a) != len(b) or not a:
        bad.append(f"{k}: {len(b)} steps vs {len(a)}")
        continue
    d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    print(f"{label}: {k} max relative difference {d:.3g} (bound {bound:g})")
    if d > bound: bad.append(f"{k} relative difference {d:.3g} > {bound:g}")
for rp in sorted(glob.glob(gpu + "/run-report*.json")):
    r = json.load(open(rp))
    for cat in ("params", "grads", "optimizer", "activations"):
        pred, meas = r["predicted"][cat], r["measured"][cat]
        if pred == 0 and meas == 0: continue
        if pred == 0 or abs(meas - pred) / pred > 0.02:
            bad.append(f"{rp}: device {cat} measured {meas} vs predicted {pred}")
    print(f"{label}: {rp.split('/')[-1]} device buffers measured {r['measured']['buffers']} "
          f"predicted {r['predicted']['buffers']} (DeepSpeed buckets in GPU plans; not checked)")
    if not r["comm"]["equal"]:
        bad.append(f"{rp}: comm measured {r['comm']['measured_bytes_per_step']} != predicted")
if bad:
    print(f"FAIL {label}: " + "; ".join(bad))
    sys.exit(1)
PY
}

# case STAGE WORLD OO OP PREC BOUND
case_() {
    local s=$1 w=$2 oo=$3 op=$4 pr=$5 bound=$6 name="s$1-w$2-$3-$4-$5"
    plan cpu "$s" 1 "$oo" "$op" "$pr" "$TMP/$name-cpu.json"
    plan cuda "$s" "$w" "$oo" "$op" "$pr" "$TMP/$name-cuda.json"
    if ! run 1 "$TMP/$name-cpu.json" "$TMP/$name-cpu" 2>"$TMP/err"; then
        echo "FAIL $name: cpu run: $(cat "$TMP/err")"; FAIL=1; return
    fi
    if ! run "$w" "$TMP/$name-cuda.json" "$TMP/$name-cuda" 2>"$TMP/err"; then
        echo "FAIL $name: cuda run: $(cat "$TMP/err")"; FAIL=1; return
    fi
    compare "$TMP/$name-cpu" "$TMP/$name-cuda" "$bound" "$name" || FAIL=1
}

for s in 0 1 2 3; do case_ "$s" 1 none none fp32 1e-5; done
case_ 0 1 none none bf16 "$BF16_BOUND"
case_ 3 1 none none bf16 "$BF16_BOUND"
case_ 2 1 cpu none fp32 1e-5
case_ 3 1 cpu cpu fp32 1e-5

# resume on cuda: steps 3-4 from ckpt-2 equal the continuous run's, bitwise
name=s3-w1-none-none-fp32
R="$TMP/resume"
mkdir -p "$R"
cp -r "$TMP/$name-cuda/ckpt-00000002" "$R/"
if run 1 "$TMP/$name-cuda.json" "$R" --resume 2>"$TMP/err"; then
    python3 - "$TMP/$name-cuda" "$R" <<'PY' || FAIL=1
import json, sys
a = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(sys.argv[1] + "/metrics.jsonl")}
b = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(sys.argv[2] + "/metrics.jsonl")}
bad = [s for s in (3, 4) if a.get(s) != b.get(s)]
print("resume on cuda: steps 3-4", "bitwise equal" if not bad else f"differ at {bad}: {a} vs {b}")
sys.exit(1 if bad else 0)
PY
else
    echo "FAIL resume: $(cat "$TMP/err")"; FAIL=1
fi

# world 2 over NCCL, when two GPUs and mpirun are there
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
if [ "$ngpu" -ge 2 ] && command -v mpirun >/dev/null; then
    for s in 1 2 3; do case_ "$s" 2 none none fp32 1e-5; done
else
    echo "world 2: skipped ($ngpu GPU(s) visible or no mpirun)"
fi
exit $FAIL
