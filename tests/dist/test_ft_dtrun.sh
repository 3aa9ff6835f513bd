#!/bin/bash
# The freeze, LoRA and QLoRA methods trained by dtrun (docs/finetune.md "In dtrun"): the frozen
# tensors live in the model's base set (replicated, no gradient, no optimizer state; QLoRA: the
# blocks' linears quantised, NF4 with double quantisation; fp32 compute, bf16 under mixed-bf16), what is trained (freeze:
# the last block, --trainable-layers 1; lora / qlora: r 8, alpha 16 adapters on every linear of the
# blocks) goes through ZeRO as in full fine-tuning. For MODEL (gpt2-tiny: tied, LayerNorm, Conv1D;
# qwen3-tiny: tied, q/k norm), METHOD (freeze | lora | qlora) and PRECISION (fp32, the default,
# or a dtplan preset such as mixed-bf16: the base stored in its 16-bit dtype, LoRA's adapters fp32
# with fp32 gradients and no master copy, PEFT's autocast_adapter_dtype, as the planner counts them
# for dtrun; QLoRA: fp32 with fp32 compute, or mixed-bf16 with bf16 compute, LLaMA-Factory's):
#   - world 2, ZeRO stages 0-3 (and stage 3 with optimizer and parameters offloaded) give the
#     world-1 stage-0 losses and grad norms (relative 1e-5, as test_zero.sh; 16-bit: 1e-4, as
#     test_bf16.sh, docs/zero.md "bf16 across world sizes": the fp32 sums' last-bit differences
#     across world sizes flip a bf16 activation's rounding after a few steps; grad norms
#     within 2^-8, bf16's relative spacing: every gradient is computed from 16-bit activations
#     whose rounding can flip so (LoRA's fp32 adapter gradients too), and a freeze plan's
#     16-bit gradients are rounded by world 1 after other partial sums than world 2), every rank's
#     parameters, gradients, optimizer state, activations and buffers as the planner
#     predicts them (2 %), the
#     frozen base counted whole on every rank, and gradients for the trained tensors only
#     (stage 0's gradient bytes = the trained count x the trained set's gradient bytes: 4 for
#     fp32 and for LoRA's adapters, the precision's otherwise);
#   - the frozen tensors in the final model.safetensors are bitwise their initial values,
#     every trained tensor moved (16-bit: every trained matrix; a norm weight at 1.0 may keep
#     its bf16 value, whose spacing there, 2^-7, exceeds what these steps add to it); the file holds the whole model (the base by its Hugging Face
#     names, QLoRA's quantised linears in bitsandbytes' serialised form, and the adapters), which
#     `dtrun sample` reads with the method;
#   - resume (stage 2, world 2; LoRA with dropout 0.1) is bitwise; a resume whose frozen base
#     differs (another seed) is one line, exit 2;
#   - QLoRA from a Hugging Face directory (--init): resume bitwise, a base with one linear's weight
#     changed refused on resume (the quantised bytes are the fingerprint);
#   - a hand-edited plan with trainable_layers out of range, or a QLoRA plan of what is not built
#     (bf16 compute over fp32 parameters, fp32 compute over 16-bit ones, an int8 base): one line,
#     exit 2, no output directory.
# Usage: test_ft_dtrun.sh DTPLAN DTRUN SRCDIR MODEL METHOD [PRECISION]
set -u
DTRUN=$2
SRC=$3
MODEL=$4
METHOD=$5
PREC=${6:-fp32}
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
QCOMPUTE=fp32   # QLoRA's compute dtype: the parameters' (bf16 under mixed-bf16)
[ "$PREC" = mixed-bf16 ] && QCOMPUTE=bf16
[ "$METHOD" = qlora ] && FT_ARGS="--finetune qlora --compute-dtype $QCOMPUTE"
# shellcheck disable=SC2086
"$1" solve --model "$MODEL" --gpus 1 --mem 2G --hardware cpu --stages 0 $FT_ARGS --precision "$PREC" \
    -o "$TMP/model-plan.json" >/dev/null || { echo "FAIL: dtplan cannot plan $MODEL with $FT_ARGS"; exit 1; }

# plan STAGE WORLD OFFLOAD OUT [key=json ...]: MODEL under METHOD, 16 sequences a step
plan() {
    python3 - "$SRC/configs/plans/tiny-cpu.json" "$TMP/model-plan.json" "$@" <<'PY'
import json, sys
src, model, stage, world, off, out = sys.argv[1:7]
p = json.load(open(src))
solved = json.load(open(model))
p["model"], p["finetune"] = solved["model"], solved["finetune"]
if solved["precision"]["preset"] != "fp32":   # else tiny-cpu's own fp32
    p["precision"] = solved["precision"]
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
out, base, world, label, trained, gbytes, rel, rel_norm = sys.argv[1:]
bad = []
metrics_close(out, base, bad, float(rel), float(rel_norm))
for rp, r in run_reports(out, world, bad):
    # every category as predicted, as full fine-tuning's (test_zero.sh): the model states, the
    # activations the engine keeps for the method and ZeRO's unit buffers over the trained
    # part of each unit (docs/finetune.md "In dtrun"; exact per term: engine_ft_memory)
    for cat in ("params", "grads", "optimizer", "activations", "buffers"):
        pred, meas = r["predicted"][cat], r["measured"][cat]
        if pred == 0 and meas == 0: continue
        if pred == 0 or abs(meas - pred) / pred > 0.02: bad.append(f"{rp}: {cat} measured {meas} vs predicted {pred}")
    if r["zero_stage"] == 0 and r["measured"]["grads"] != int(gbytes) * int(trained):
        bad.append(f"{rp}: stage 0 gradients {r['measured']['grads']} bytes, not {gbytes} x {trained} trained")
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
# the trained set's gradient bytes per element (dt_lm_trained_precision)
GBYTES=4
[ "$METHOD" = freeze ] && [ "$PREC" != fp32 ] && GBYTES=2
REL=1e-5
[ "$PREC" != fp32 ] && REL=1e-4
REL_NORM=$REL
[ "$PREC" != fp32 ] && REL_NORM=0.00390625   # 2^-8: gradients computed from 16-bit activations

for cfg in 0:none 1:none 2:none 3:none 3:cpu; do
    IFS=: read -r st off <<<"$cfg"
    pl="$TMP/p-$st-$off.json" out="$TMP/o-$st-$off"
    plan "$st" 2 "$off" "$pl"
    if ! run 2 "$pl" "$out" --max-steps $STEPS; then echo "FAIL stage $st offload $off: run failed"; FAIL=1; continue; fi
    check "$out" "$TMP/base" 2 "$METHOD $PREC stage $st world 2 offload $off" "$TRAINED" "$GBYTES" "$REL" "$REL_NORM" || FAIL=1
done

# frozen tensors as initialised, trained ones moved: step 1's checkpoint vs step STEPS's
plan 0 1 none "$TMP/s1.json" output.save_interval=1 output.keep_last=5
"$DTRUN" "$TMP/s1.json" --out "$TMP/s1" --max-steps 1 --quiet || { echo "FAIL: one-step run"; FAIL=1; }
python3 - "$TMP/s1/ckpt-00000001/model.safetensors" "$TMP/o-3-none/ckpt-$(printf %08d $STEPS)/model.safetensors" \
    "$METHOD" "$MODEL" "$GBYTES" <<'PY' || FAIL=1
import json, struct, sys
def tensors(path):
    f = open(path, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); data = f.read()
    return {k: (data[v["data_offsets"][0]:v["data_offsets"][1]], len(v["shape"])) for k, v in h.items()
            if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
trained = (lambda k: ".lora_" in k) if sys.argv[3] in ("lora", "qlora") else \
    (lambda k: ("h.1." if sys.argv[4].startswith("gpt2") else "model.layers.1.") in k)
must_move = lambda k: trained(k) and (sys.argv[5] == "4" or a[k][1] == 2)
bad = [k for k in a if (trained(k) and must_move(k) and a[k] == b[k]) or (not trained(k) and a[k] != b[k])]
if set(a) != set(b) or bad:
    print("FAIL frozen / trained tensors: " + ", ".join(bad[:6])); sys.exit(1)
print(f"ok   {len(a)} tensors in model.safetensors: the {sum(map(trained, a))} trained moved, "
      "every frozen one bitwise as initialised")
PY

# resume, stage 2 world 2: bitwise (LoRA with dropout 0.1: the masks are the step's, resumed too)
DROP=()
[ "$METHOD" != freeze ] && DROP=(finetune.lora.dropout=0.1)
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

# QLoRA from a Hugging Face directory (--init): the base quantised on load; a resume quantises it
# again and checks every byte against the checkpoint's (bitwise resume); a base with one linear's
# weight changed (its codes differ, its fp32 tensors do not) is refused on resume in one line
if [ "$METHOD" = qlora ]; then
    plan 0 1 none "$TMP/hf.json" output.save_interval=1   # full fine-tuning: no finetune section
    python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); p.pop("finetune"); json.dump(p,open(sys.argv[1],"w"))' \
        "$TMP/hf.json"
    "$DTRUN" "$TMP/hf.json" --out "$TMP/hf" --max-steps 1 --quiet || { echo "FAIL: base directory run"; FAIL=1; }
    HB=$TMP/hf/ckpt-00000001
    plan 0 1 none "$TMP/qi.json" output.save_interval=3
    "$DTRUN" "$TMP/qi.json" --out "$TMP/qi-straight" --init "$HB" --max-steps 6 --quiet &&
    "$DTRUN" "$TMP/qi.json" --out "$TMP/qi-split" --init "$HB" --max-steps 3 --quiet &&
    "$DTRUN" "$TMP/qi.json" --out "$TMP/qi-split" --init "$HB" --max-steps 6 --resume --quiet ||
        { echo "FAIL: QLoRA runs from --init"; FAIL=1; }
    if cmp -s "$TMP/qi-straight/ckpt-00000006/model.safetensors" "$TMP/qi-split/ckpt-00000006/model.safetensors"; then
        echo "ok   qlora from --init, resumed: bitwise"
    else echo "FAIL qlora from --init, resumed: not bitwise"; FAIL=1; fi
    cp -r "$HB" "$TMP/hb2"
    python3 - "$TMP/hb2/model.safetensors" <<'PY' || FAIL=1
import json, struct, sys
path = sys.argv[1]
b = bytearray(open(path, "rb").read()); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
k = next(k for k in h if k.endswith(("layers.0.self_attn.q_proj.weight", "h.0.attn.c_attn.weight")))
o = 8 + n + h[k]["data_offsets"][0]
if h[k]["dtype"] == "BF16":   # a mixed-bf16 run's base: element 0 as bf16 (the high half of an fp32)
    v = struct.unpack("<f", b"\0\0" + bytes(b[o:o + 2]))[0]
    b[o:o + 2] = struct.pack("<f", -4 * v - 0.5)[2:]
else:
    assert h[k]["dtype"] == "F32", h[k]
    struct.pack_into("<f", b, o, -4 * struct.unpack_from("<f", b, o)[0] - 0.5)   # element 0: another code and absmax
open(path, "wb").write(bytes(b))
PY
    rm -rf "$TMP/qi-split/ckpt-00000006"
    "$DTRUN" "$TMP/qi.json" --out "$TMP/qi-split" --init "$TMP/hb2" --max-steps 6 --resume --quiet >/dev/null 2>"$TMP/err"
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "the quantised base differs" "$TMP/err"; then
        echo "ok   a resume over another quantised base: $(cat "$TMP/err")"
    else echo "FAIL a resume over another quantised base: exit $rc: $(cat "$TMP/err")"; FAIL=1; fi
fi

# hand-edited plans the engine must refuse: one line, exit 2, nothing written
plan 0 1 none "$TMP/range.json" 'finetune={"method":"freeze","trainable_layers":9,"trainable_modules":[]}' 
# QLoRA's compute dtype against the parameters': bf16 over fp32 (PEFT's upcast, not built), fp32 over 16-bit
BADQ=bf16 BADQ_FIX="plan --precision mixed-bf16"
[ "$PREC" != fp32 ] && BADQ=fp32 BADQ_FIX="plan --compute-dtype bf16"
"$1" solve --model "$MODEL" --gpus 1 --mem 2G --hardware cpu --stages 0 --finetune qlora --compute-dtype $BADQ \
    -o "$TMP/qlora-plan.json" >/dev/null || { echo "FAIL: dtplan cannot plan $MODEL with QLoRA"; exit 1; }
ftjson() { python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["finetune"]))' "$1"; }
plan 0 1 none "$TMP/qlora.json" "finetune=$(ftjson "$TMP/qlora-plan.json")"
"$1" solve --model "$MODEL" --gpus 1 --mem 2G --hardware cpu --stages 0 --finetune qlora --quant int8 \
    -o "$TMP/int8-plan.json" >/dev/null || { echo "FAIL: dtplan cannot plan $MODEL with QLoRA int8"; exit 1; }
plan 0 1 none "$TMP/int8.json" "finetune=$(ftjson "$TMP/int8-plan.json")"
for bad in "range:--trainable-layers 9" "qlora:$BADQ_FIX" "int8:plan --quant nf4 or fp4"; do
    name=${bad%%:*} want=${bad#*:}
    "$DTRUN" "$TMP/$name.json" --out "$TMP/out-$name" >/dev/null 2>"$TMP/err"; rc=$?
    { [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -qF -- "$want" "$TMP/err" && [ ! -e "$TMP/out-$name" ]; } ||
        { echo "FAIL hand-edited $name plan: exit $rc: $(cat "$TMP/err")"; FAIL=1; }
done
# sample reads the checkpoint with its method (the adapters applied)
"$DTRUN" sample "$TMP/o-0-none" --tokens 4 --prompt "Hi" >/dev/null 2>"$TMP/err" ||
    { echo "FAIL sample: $(cat "$TMP/err")"; FAIL=1; }
[ $FAIL -eq 0 ] && echo "ok   $METHOD on $MODEL ($PREC)"
exit $FAIL
