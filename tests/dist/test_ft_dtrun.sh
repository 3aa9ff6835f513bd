#!/bin/bash
# The freeze and LoRA methods trained by dtrun (docs/finetune.md "In dtrun"): the frozen
# tensors live in the model's base set (replicated, no gradient, no optimizer state), what is
# trained (freeze: the last block, --trainable-layers 1; lora: r 8, alpha 16 adapters on every
# linear of the blocks) goes through ZeRO as in full fine-tuning. For MODEL (gpt2-tiny: tied,
# LayerNorm; qwen3-tiny: tied, q/k norm) and METHOD (freeze | lora):
#   - world 2, ZeRO stages 0-3 (and stage 3 with optimizer and parameters offloaded) give the
#     world-1 stage-0 losses and grad norms (relative 1e-5, as test_zero.sh), every rank's
#     parameters, gradients, optimizer state, activations and buffers as the planner
#     predicts them (2 %), the
#     frozen base counted whole on every rank, and gradients for the trained tensors only
#     (stage 0's gradient bytes = 4 x the trained count);
#   - the frozen tensors in the final model.safetensors are bitwise their initial values,
#     every trained tensor moved; the file holds the whole model (the base by its Hugging Face
#     names, and the adapters), which `dtrun sample` reads with the method;
#   - resume (stage 2, world 2; LoRA with dropout 0.1) is bitwise; a resume whose frozen base
#     differs (another seed) is one line, exit 2;
#   - a hand-edited plan with trainable_layers out of range, or a QLoRA plan (not built yet):
#     one line, exit 2, no output directory.
# Usage: test_ft_dtrun.sh DTPLAN DTRUN SRCDIR MODEL METHOD
set -u
DTRUN=$2
SRC=$3
MODEL=$4
METHOD=$5
. "$(dirname "$0")/../lib.sh"
dt_need python3 mpirun
dt_need_fortunes
export OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/dt_test_ft_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
FAIL=0
STEPS=12

FT_ARGS="--finetune freeze --trainable-layers 1"
[ "$METHOD" = lora ] && FT_ARGS="--finetune lora"
# shellcheck disable=SC2086
"$1" solve --model "$MODEL" --gpus 1 --mem 2G --hardware cpu --stages 0 $FT_ARGS -o "$TMP/model-plan.json" \
    >/dev/null || { echo "FAIL: dtplan cannot plan $MODEL with $FT_ARGS"; exit 1; }

# plan STAGE WORLD OFFLOAD OUT [key=json ...]: MODEL under METHOD, 16 sequences a step
plan() {
    python3 - "$SRC/configs/plans/tiny-cpu.json" "$TMP/model-plan.json" "$@" <<'PY'
import json, sys
src, model, stage, world, off, out = sys.argv[1:7]
p = json.load(open(src))
solved = json.load(open(model))
p["model"], p["finetune"] = solved["model"], solved["finetune"]
w = int(world)
p["parallel"].update(zero_stage=int(stage), world_size=w, offload_optimizer=off,
                     offload_param=off if int(stage) == 3 else "none")
p["cluster"]["gpus_per_node"] = w
p["batch"].update(micro_batch=4, grad_accum=16 // 4 // w, global_batch=16, seq_len=29)
p["data"]["eval_interval"] = 0
p["output"]["save_interval"] = 0
p.pop("prediction", None)
for kv in sys.argv[7:]:
    k, v = kv.split("=", 1)
    d = p
    for part in k.split(".")[:-1]: d = d[part]
    d[k.split(".")[-1]] = json.loads(v)
json.dump(p, open(out, "w"), indent=2)
PY
}

run() { dt_run_ranks "$DTRUN" "$@"; }  # WORLD PLAN OUT [args]

# check OUT BASE WORLD LABEL TRAINED: losses / norms vs BASE, memory per category per rank
check() {
    { echo "$dt_metrics_close"; cat <<'PY'; } | python3 - "$@" || return 1
import json, sys
out, base, world, label, trained = sys.argv[1:]
bad = []
metrics_close(out, base, bad)
for rp, r in run_reports(out, world, bad):
    # every category as predicted, as full fine-tuning's (test_zero.sh): the model states, the
    # activations the engine keeps for the method and ZeRO's unit buffers over the trained
    # part of each unit (docs/finetune.md "In dtrun"; exact per term: engine_ft_memory)
    for cat in ("params", "grads", "optimizer", "activations", "buffers"):
        pred, meas = r["predicted"][cat], r["measured"][cat]
        if pred == 0 and meas == 0: continue
        if pred == 0 or abs(meas - pred) / pred > 0.02: bad.append(f"{rp}: {cat} measured {meas} vs predicted {pred}")
    if r["zero_stage"] == 0 and r["measured"]["grads"] != 4 * int(trained):
        bad.append(f"{rp}: stage 0 gradients {r['measured']['grads']} bytes, not 4 x {trained} trained")
if bad:
    print(f"FAIL {label}:\n  " + "\n  ".join(bad)); sys.exit(1)
print(f"ok   {label}")
PY
}

plan 0 1 none "$TMP/base.json"
"$DTRUN" "$TMP/base.json" --out "$TMP/base" --max-steps $STEPS 2>"$TMP/base.log" >/dev/null ||
    { echo "FAIL: baseline run: $(tail -2 "$TMP/base.log")"; exit 1; }
line=$(grep "fine-tune:" "$TMP/base.log")
TRAINED=$(echo "$line" | sed -n "s/.*$METHOD fine-tune: \([0-9]*\) params trained, \([0-9]*\) frozen.*/\1/p")
[ -n "$TRAINED" ] || { echo "FAIL: dtrun did not say what it trains: $(head -3 "$TMP/base.log")"; exit 1; }
echo "ok   $line"

for cfg in 0:none 1:none 2:none 3:none 3:cpu; do
    IFS=: read -r st off <<<"$cfg"
    pl="$TMP/p-$st-$off.json" out="$TMP/o-$st-$off"
    plan "$st" 2 "$off" "$pl"
    if ! run 2 "$pl" "$out" --max-steps $STEPS; then echo "FAIL stage $st offload $off: run failed"; FAIL=1; continue; fi
    check "$out" "$TMP/base" 2 "$METHOD stage $st world 2 offload $off" "$TRAINED" || FAIL=1
done

# frozen tensors as initialised, trained ones moved: step 1's checkpoint vs step STEPS's
plan 0 1 none "$TMP/s1.json" output.save_interval=1 output.keep_last=5
"$DTRUN" "$TMP/s1.json" --out "$TMP/s1" --max-steps 1 --quiet || { echo "FAIL: one-step run"; FAIL=1; }
python3 - "$TMP/s1/ckpt-00000001/model.safetensors" "$TMP/o-3-none/ckpt-$(printf %08d $STEPS)/model.safetensors" \
    "$METHOD" "$MODEL" <<'PY' || FAIL=1
import json, struct, sys
def tensors(path):
    f = open(path, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
trained = (lambda k: ".lora_" in k) if sys.argv[3] == "lora" else \
    (lambda k: ("h.1." if sys.argv[4].startswith("gpt2") else "model.layers.1.") in k)
bad = [k for k in a if trained(k) == (a[k] == b[k])]
if set(a) != set(b) or bad:
    print("FAIL frozen / trained tensors: " + ", ".join(bad[:6])); sys.exit(1)
print(f"ok   {len(a)} tensors in model.safetensors: the {sum(map(trained, a))} trained moved, "
      "every frozen one bitwise as initialised")
PY

# resume, stage 2 world 2: bitwise (LoRA with dropout 0.1: the masks are the step's, resumed too)
DROP=()
[ "$METHOD" = lora ] && DROP=(finetune.lora.dropout=0.1)
plan 2 2 none "$TMP/r.json" output.save_interval=6 "${DROP[@]}"
run 2 "$TMP/r.json" "$TMP/r-straight" --max-steps $STEPS >/dev/null
run 2 "$TMP/r.json" "$TMP/r-split" --max-steps 6 >/dev/null
run 2 "$TMP/r.json" "$TMP/r-split" --max-steps $STEPS --resume >/dev/null
ck=ckpt-$(printf %08d $STEPS)
if cmp -s <(cut -d, -f1-2 "$TMP/r-straight/metrics.jsonl") <(cut -d, -f1-2 "$TMP/r-split/metrics.jsonl") &&
   cmp -s "$TMP/r-straight/$ck/model.safetensors" "$TMP/r-split/$ck/model.safetensors"; then
    echo "ok   $METHOD resume stage 2 world 2: bitwise"
else echo "FAIL $METHOD resume stage 2 world 2: not bitwise"; FAIL=1; fi

# a resume whose frozen base is not the checkpoint's: one line, exit 2
plan 0 1 none "$TMP/seed.json" output.save_interval=6 data.seed=7
rm -rf "$TMP/r-split/$ck"
"$DTRUN" "$TMP/seed.json" --out "$TMP/r-split" --resume --quiet >/dev/null 2>"$TMP/err"; rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "the frozen base differs" "$TMP/err"; } ||
    { echo "FAIL a resume over another base: exit $rc: $(cat "$TMP/err")"; FAIL=1; }

# hand-edited plans the engine must refuse: one line, exit 2, nothing written
plan 0 1 none "$TMP/range.json" 'finetune={"method":"freeze","trainable_layers":9,"trainable_modules":[]}' 
"$1" solve --model "$MODEL" --gpus 1 --mem 2G --hardware cpu --stages 0 --finetune qlora -o "$TMP/qlora-plan.json" \
    >/dev/null || { echo "FAIL: dtplan cannot plan $MODEL with QLoRA"; exit 1; }
plan 0 1 none "$TMP/qlora.json" "finetune=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["finetune"]))' "$TMP/qlora-plan.json")"
for bad in "range:--trainable-layers 9" "qlora:QLoRA (a quantised base) is not built"; do
    name=${bad%%:*} want=${bad#*:}
    "$DTRUN" "$TMP/$name.json" --out "$TMP/out-$name" >/dev/null 2>"$TMP/err"; rc=$?
    { [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -qF -- "$want" "$TMP/err" && [ ! -e "$TMP/out-$name" ]; } ||
        { echo "FAIL hand-edited $name plan: exit $rc: $(cat "$TMP/err")"; FAIL=1; }
done
# sample reads the checkpoint with its method (the adapters applied)
"$DTRUN" sample "$TMP/o-0-none" --tokens 4 --prompt "Hi" >/dev/null 2>"$TMP/err" ||
    { echo "FAIL sample: $(cat "$TMP/err")"; FAIL=1; }
[ $FAIL -eq 0 ] && echo "ok   $METHOD on $MODEL"
exit $FAIL
