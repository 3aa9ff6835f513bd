#!/bin/bash
# Tensor parallelism in dtrun (docs/parallelism.md "In dtrun"): the same plan trained at
# tp 1 and at tp 2 (Megatron's split over 2 MPI ranks) must give the same per-step loss
# and gradient norm within fp32 tolerance (relative 1e-5: different summation orders
# only), for gpt2-tiny (packed c_attn, learned positions, tied classifier), qwen3-tiny
# (GQA, RoPE, q/k norms, tied), llama-tiny (untied lm_head) and a Qwen2-shaped model (q/k/v
# biases), and gpt2-tiny in mixed-bf16; tp 2 x dp 2 (4 ranks) with ZeRO-1 and ZeRO-3
# against dp 4 at tp 1; the final weights of each pair within fp32 tolerance;
# checkpoints independent of the TP degree: tp 2 resumed at tp 2 bit for bit, a tp 2
# checkpoint resumed at tp 1 and a tp 1 one at tp 2 (and tp 2 x dp 2 ZeRO-3 at dp 4) on
# the curve of the uninterrupted run; and the refusals (one line, exit 2, nothing written):
# tp not dividing the heads or the vocabulary, LoRA at tp 2, output.init at tp 2.
# Usage: test_tp.sh DTPLAN DTRUN SRCDIR
set -u
DTPLAN=$1
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3 mpirun jq
export OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/dt_test_tp_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
FAIL=0
STEPS=12

model_json() {   # MODEL OUT: the catalog model's description as dtplan resolves it
    "$DTPLAN" solve --model "$1" --gpus 1 --mem 2G --hardware cpu --stages 0 -o "$2" >/dev/null ||
        { echo "FAIL: dtplan cannot plan $1"; exit 1; }
}
model_json qwen3-tiny "$TMP/qwen3.json"
model_json llama-tiny "$TMP/llama.json"
# Qwen2's shape: q/k/v biases (split with their columns), no q/k norm
jq '.model |= (.name = "qwen2-tiny" | .qk_norm = false | .qkv_bias = true)' "$TMP/qwen3.json" >"$TMP/qwen2.json"

# plan MODEL_JSON|"" STAGE WORLD TP OUT: tiny-cpu.json at a global batch of 16 sequences
plan() {
    python3 - "$SRC/configs/plans/tiny-cpu.json" "$@" <<'PY'
import json, sys
src, model, stage, world, tp, out = sys.argv[1:]
p = json.load(open(src))
if model: p["model"] = json.load(open(model))["model"]
w, t = int(world), int(tp)
dp = w // t
p["parallel"].update(zero_stage=int(stage), world_size=w)
p["cluster"]["gpus_per_node"] = w
p["batch"].update(micro_batch=4, grad_accum=16 // 4 // dp, global_batch=16)
p["data"]["eval_interval"] = 0
p["output"]["save_interval"] = 6   # checkpoints at steps 6 and 12
p.pop("layout", None)
if t > 1: p["layout"] = {"tp": t, "cp": 1, "pp": 1, "sequence_parallel": False}
json.dump(p, open(out, "w"), indent=2)
PY
}

# same OUT BASE LABEL: per-step loss and grad_norm within fp32 tolerance
same() {
    { echo "$dt_metrics_close"; cat <<'PY'; } | python3 - "$@" || { echo "FAIL: $3"; FAIL=1; }
import sys
out, base, label = sys.argv[1:]
bad = []
import os
metrics_close(out, base, bad, rel=float(os.environ.get("REL", "1e-5")))
for b in bad: print(f"{label}: {b}")
sys.exit(1 if bad else 0)
PY
}

# weights OUT BASE LABEL: the last checkpoints' model.safetensors (fp32), every tensor with
# the same name and shape, within 1e-5 (absolute, plus relative to the element)
weights() {
    python3 - "$@" <<'PY' || { echo "FAIL: $3 (weights)"; FAIL=1; }
import glob, json, struct, sys
out, base, label = sys.argv[1:]
def load(d):
    path = sorted(glob.glob(d + "/ckpt-*/model.safetensors"))[-1]
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["shape"], struct.unpack(f"<{(v['data_offsets'][1] - v['data_offsets'][0]) // 4}f",
                                          b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]))
            for k, v in h.items() if v["dtype"] == "F32"}
a, b = load(base), load(out)
bad = [k for k in a if k not in b or a[k][0] != b[k][0]] + [k for k in b if k not in a]
worst = max(abs(x - y) / (1 + abs(x)) for k in a if k in b for x, y in zip(a[k][1], b[k][1]))
if bad or worst > 1e-5 or not a: print(f"{label}: tensors differ {bad[:3]}, worst {worst:.3g}"); sys.exit(1)
PY
}

train() {   # NAME MODEL_JSON STAGE WORLD TP
    plan "$2" "$3" "$4" "$5" "$TMP/$1.json" || { echo "FAIL: plan $1"; FAIL=1; return 1; }
    dt_run_ranks "$DTRUN" "$4" "$TMP/$1.json" "$TMP/$1" --max-steps "$STEPS" >"$TMP/$1.log" 2>&1 ||
        { echo "FAIL: dtrun $1"; cat "$TMP/$1.log"; FAIL=1; return 1; }
}

for m in gpt2 qwen3 llama qwen2; do   # llama-tiny: untied lm_head split by vocabulary rows
    mj=""
    [ $m != gpt2 ] && mj="$TMP/$m.json"
    train $m-tp1 "$mj" 0 1 1 && train $m-tp2 "$mj" 0 2 2 && same "$TMP/$m-tp2" "$TMP/$m-tp1" "$m tp 2 vs tp 1" &&
        weights "$TMP/$m-tp2" "$TMP/$m-tp1" "$m tp 2 vs tp 1"
done
# mixed-bf16 (the default preset: bf16 parameters, gradients and GEMMs): the sums run in
# another order, so the bf16 roundings differ; within the bf16 bound of test_bf16.sh
python3 - "$TMP/gpt2-tp1.json" "$TMP/gpt2-tp2.json" "$TMP/bf1.json" "$TMP/bf2.json" <<'PY'
import json, sys
for src, dst in ((sys.argv[1], sys.argv[3]), (sys.argv[2], sys.argv[4])):
    p = json.load(open(src))
    p["precision"] = {k: v for k, v in p["precision"].items() if k != "bytes_per_param"}
    p["precision"].update(preset="mixed-bf16", param="bf16", grad="bf16", activation="bf16", has_master=True,
                          master="fp32", moment="fp32")
    json.dump(p, open(dst, "w"))
PY
dt_run_ranks "$DTRUN" 1 "$TMP/bf1.json" "$TMP/bf1" --max-steps "$STEPS" >"$TMP/bf1.log" 2>&1 &&
    dt_run_ranks "$DTRUN" 2 "$TMP/bf2.json" "$TMP/bf2" --max-steps "$STEPS" >"$TMP/bf2.log" 2>&1 ||
    { echo "FAIL: dtrun mixed-bf16"; cat "$TMP/bf1.log" "$TMP/bf2.log"; FAIL=1; }
REL=2e-3 same "$TMP/bf2" "$TMP/bf1" "gpt2 mixed-bf16 tp 2 vs tp 1"

# tp 2 x dp 2 with ZeRO-1 and ZeRO-3 against dp 4 (tp 1)
for s in 1 3; do
    train gpt2-dp4-z$s "" $s 4 1 && train gpt2-tp2dp2-z$s "" $s 4 2 &&
        same "$TMP/gpt2-tp2dp2-z$s" "$TMP/gpt2-dp4-z$s" "gpt2 tp 2 x dp 2 vs dp 4, ZeRO-$s"
done
train qwen3-dp4-z3 "$TMP/qwen3.json" 3 4 1 && train qwen3-tp2dp2-z3 "$TMP/qwen3.json" 3 4 2 &&
    same "$TMP/qwen3-tp2dp2-z3" "$TMP/qwen3-dp4-z3" "qwen3 tp 2 x dp 2 vs dp 4, ZeRO-3"

weights "$TMP/gpt2-tp2dp2-z3" "$TMP/gpt2-dp4-z3" "gpt2 tp 2 x dp 2 vs dp 4, ZeRO-3"
weights "$TMP/qwen3-tp2dp2-z3" "$TMP/qwen3-dp4-z3" "qwen3 tp 2 x dp 2 vs dp 4, ZeRO-3"

# resume FROM PLAN WORLD NAME: FROM's run cut back to its step-6 checkpoint, resumed to 12
# with PLAN on WORLD ranks
resume() {
    rm -rf "$TMP/$4"
    cp -r "$TMP/$1" "$TMP/$4" && rm -rf "$TMP/$4/ckpt-00000012" &&
        dt_run_ranks "$DTRUN" "$3" "$TMP/$2.json" "$TMP/$4" --max-steps "$STEPS" --resume >"$TMP/$4.log" 2>&1 ||
        { echo "FAIL: resume $4"; cat "$TMP/$4.log"; FAIL=1; return 1; }
}
# the same TP degree: bit for bit (every step's printed loss and norm, the final weights' bytes)
if resume gpt2-tp2 gpt2-tp2 2 re-tp2; then
    cmp -s "$TMP/re-tp2/ckpt-00000012/model.safetensors" "$TMP/gpt2-tp2/ckpt-00000012/model.safetensors" &&
        diff <(cut -d, -f1-2,6 "$TMP/re-tp2/metrics.jsonl") <(cut -d, -f1-2,6 "$TMP/gpt2-tp2/metrics.jsonl") >/dev/null ||
        { echo "FAIL: tp 2 resumed at tp 2 is not bit for bit the uninterrupted run"; FAIL=1; }
fi
resume gpt2-tp2 gpt2-tp1 1 re-tp2-tp1 && same "$TMP/re-tp2-tp1" "$TMP/gpt2-tp1" "gpt2 tp 2 checkpoint at tp 1" &&
    weights "$TMP/re-tp2-tp1" "$TMP/gpt2-tp1" "gpt2 tp 2 checkpoint at tp 1"
resume gpt2-tp1 gpt2-tp2 2 re-tp1-tp2 && same "$TMP/re-tp1-tp2" "$TMP/gpt2-tp1" "gpt2 tp 1 checkpoint at tp 2" &&
    weights "$TMP/re-tp1-tp2" "$TMP/gpt2-tp1" "gpt2 tp 1 checkpoint at tp 2"
resume qwen3-tp2 qwen3-tp1 1 re-q-tp2-tp1 && same "$TMP/re-q-tp2-tp1" "$TMP/qwen3-tp1" "qwen3 tp 2 checkpoint at tp 1"
resume gpt2-tp2dp2-z3 gpt2-dp4-z3 4 re-z3 && same "$TMP/re-z3" "$TMP/gpt2-dp4-z3" "gpt2 tp 2 x dp 2 ZeRO-3 checkpoint at dp 4"

# refusals: one line, exit 2, nothing written
python3 - "$TMP/gpt2-tp2.json" "$TMP/bad-tp3.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["layout"]["tp"] = 3; p["parallel"]["world_size"] = 3; p["cluster"]["gpus_per_node"] = 3
json.dump(p, open(sys.argv[2], "w"))
PY
mpirun -n 3 --oversubscribe "$DTRUN" "$TMP/bad-tp3.json" --out "$TMP/bad3" --quiet >"$TMP/bad3.log" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "does not divide the model's 4 attention heads" "$TMP/bad3.log" || [ -e "$TMP/bad3" ]; then
    echo "FAIL: tp 3 over 4 heads: rc $rc, want 2, one line, nothing written"; cat "$TMP/bad3.log"; FAIL=1
fi
jq '.model.vocab = 257' "$TMP/gpt2-tp2.json" >"$TMP/v257.json"
mpirun -n 2 --oversubscribe "$DTRUN" "$TMP/v257.json" --out "$TMP/v257" --quiet >"$TMP/v257.log" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "layout.tp 2 does not divide the model's ffn size 256 and vocabulary 257" "$TMP/v257.log" ||
    [ -e "$TMP/v257" ]; then
    echo "FAIL: tp 2 over a vocabulary of 257: rc $rc, want 2, the refusal, nothing written"; cat "$TMP/v257.log"; FAIL=1
fi
# a fine-tuning method with tp > 1: refused by name (dtrun's TP trains full fine-tuning)
"$DTPLAN" solve --model gpt2-tiny --hardware cpu --mem 2G --gpus 2 --finetune lora --precision fp32 --global-batch 16 \
    -o "$TMP/lora.json" >/dev/null 2>&1 || { echo "FAIL: dtplan cannot plan LoRA"; FAIL=1; }
jq '.layout = {tp: 2, cp: 1, pp: 1, sequence_parallel: false} | .batch.grad_accum *= 2 | del(.prediction)' \
    "$TMP/lora.json" >"$TMP/lora-tp2.json"
"$DTRUN" "$TMP/lora-tp2.json" --out "$TMP/lora" --quiet >"$TMP/lora.log" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "with finetune.method lora" "$TMP/lora.log" || [ -e "$TMP/lora" ]; then
    echo "FAIL: LoRA at tp 2: rc $rc, want 2, the refusal, nothing written"; cat "$TMP/lora.log"; FAIL=1
fi
jq '.output.init = "'"$TMP"'/gpt2-tp1/ckpt-00000012"' "$TMP/gpt2-tp2.json" >"$TMP/init-tp2.json"
mpirun -n 2 --oversubscribe "$DTRUN" "$TMP/init-tp2.json" --out "$TMP/init" --quiet >"$TMP/init.log" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "layout.tp 2 with output.init" "$TMP/init.log" || [ -e "$TMP/init" ]; then
    echo "FAIL: output.init at tp 2: rc $rc, want 2, the refusal, nothing written"; cat "$TMP/init.log"; FAIL=1
fi
[ $FAIL = 0 ] && echo "tp: ok"
exit $FAIL
