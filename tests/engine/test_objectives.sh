#!/bin/bash
# rm / dpo in dtrun on one rank (docs/objectives.md "In dtrun", docs/data.md "Pair shards"):
#   - a DPO run on a tiny Qwen3 whose held-out rewards/accuracies rises: preference pairs whose
#     chosen side carries words of one made-up set and whose rejected side carries words of
#     another (40 each, two per side among filler), 192 pairs trained, 48 held out; the held-out
#     accuracy of the last evaluations must exceed the first evaluation's, and the held-out loss
#     fall (no fixed number: the curve goes up);
#   - rm under freeze trains and checkpoints the score head; rm from a causal LM (the dpo run's
#     checkpoint: its score head drawn from the seed) learns,
#     and rm from its own sequence-classification checkpoint (score.weight read) starts below the
#     fresh head on the same first pairs;
#   - bad input, one line and exit 2, nothing half-written: rm under LoRA at bf16; a pair with an empty side and a
#     prompt of --seq tokens (prepare names FILE:LINE; a previous output stays whole), a folder
#     given to --format pairs, a plan whose seq_len the prompts fill (dtrun names the input line
#     before any step), a damaged pair shard (its CRC), token shards given to a dpo plan.
# Usage: test_objectives.sh DTPLAN DTRUN SRCDIR
set -u
DTPLAN=$1
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3
export OMP_NUM_THREADS=1
dt_scratch dt_test_objectives
T=$TMP
FAIL=0
TOK="$SRC/tests/tokenizer/data/qwen2-mini.json"

python3 - "$SRC/models/catalog/qwen3-tiny.json" "$TMP" <<'PY'
import json, random, sys
c = json.load(open(sys.argv[1]))
c.update(vocab_size=1500, _name_or_path="qwen3-pairs-tiny")
json.dump(c, open(sys.argv[2] + "/config.json", "w"), indent=2)
r = random.Random(11)
syl = ["ba", "de", "fi", "go", "hu", "ja", "ke", "li", "mo", "nu", "pa", "re", "si", "to", "vu", "wa", "xe", "yi",
       "zo", "qu"]
words = sorted({r.choice(syl) + r.choice(syl) + r.choice(syl) for _ in range(400)})[:120]
r.shuffle(words)
good, bad, filler = words[:40], words[40:80], words[80:]
def side(cue):
    w = r.sample(filler, 2) + r.sample(cue, 2)
    r.shuffle(w)
    return " " + " ".join(w) + "."
with open(sys.argv[2] + "/prefs.jsonl", "w") as f:
    for i in range(240):
        f.write(json.dumps({"prompt": "Say: " + " ".join(r.sample(filler, 3)), "chosen": side(good),
                            "rejected": side(bad)}) + "\n")
PY

# ---- a DPO run whose held-out accuracy rises ----
"$DTRUN" prepare --format pairs --tokenizer "$TOK" --out "$T/prefs" --val-fraction 0.2 --seq 40 --quiet \
    "$T/prefs.jsonl" || { echo "FAIL: prepare --format pairs"; exit 1; }
"$DTPLAN" solve --model "$T/config.json" --gpus 1 --mem 2G --hardware cpu --stages 0 --objective dpo --data "$T/prefs" \
    --seq 40 --global-batch 8 --steps 60 --warmup 0 --precision fp32 --lr 2e-3 -o "$T/dpo.json" >/dev/null ||
    { echo "FAIL: plan dpo"; exit 1; }
python3 - "$T/dpo.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["data"].update(eval_interval=4, eval_batches=10)
p["batch"].update(micro_batch=4, grad_accum=2)
p["output"]["save_interval"] = 0
p.pop("prediction", None)
json.dump(p, open(sys.argv[1], "w"), indent=2)
PY
if "$DTRUN" "$T/dpo.json" --out "$T/dpo" --no-progress 2>"$T/dpo.log"; then
    python3 - "$T/dpo/metrics.jsonl" "$T/dpo.log" <<'PY' || FAIL=1
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if "eval_rewards/accuracies" in l]
acc = [e["eval_rewards/accuracies"] for e in ev]
loss = [e["eval_loss"] for e in ev]
log = open(sys.argv[2]).read()
bad = []
if len(acc) < 10: bad.append(f"{len(acc)} evaluations")
elif not (sum(acc[-3:]) / 3 > acc[0] + 0.1): bad.append(f"held-out accuracy did not rise: {acc}")
if len(loss) >= 2 and not loss[-1] < loss[0]: bad.append(f"held-out loss did not fall: {loss}")
for k in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen"):
    if k not in ev[-1]: bad.append(f"metrics.jsonl has no {k}")
if "eval_rewards/accuracies" not in log: bad.append("the log does not show the held-out accuracy")
if bad: print("FAIL dpo accuracy:\n  " + "\n  ".join(bad)); sys.exit(1)
print(f"ok   dpo held-out rewards/accuracies {acc[0]:.3f} -> {sum(acc[-3:]) / 3:.3f} (last three), "
      f"eval_loss {loss[0]:.4f} -> {loss[-1]:.4f}: " + " ".join(f"{a:.2f}" for a in acc))
PY
else
    echo "FAIL: dpo run: $(tail -3 "$T/dpo.log")"; FAIL=1
fi

# ---- rm from a causal LM (its score head drawn from the seed) and from its own export ----
"$DTPLAN" solve --model "$T/config.json" --gpus 1 --mem 2G --hardware cpu --stages 0 --objective rm --data "$T/prefs" \
    --seq 40 --global-batch 8 --steps 24 --warmup 0 --precision fp32 --lr 2e-3 -o "$T/rm.json" >/dev/null ||
    { echo "FAIL: plan rm"; exit 1; }
DPO_CKPT=$(ls -d "$T"/dpo/ckpt-* | tail -1)
if "$DTRUN" "$T/rm.json" --init "$DPO_CKPT" --out "$T/rm1" --quiet &&
   "$DTRUN" "$T/rm.json" --init "$(ls -d "$T"/rm1/ckpt-* | tail -1)" --out "$T/rm2" --quiet; then
    python3 - "$T/rm1" "$T/rm2" <<'PY' || FAIL=1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
b = [json.loads(l) for l in open(sys.argv[2] + "/metrics.jsonl")]
c = json.load(open(sorted(__import__("glob").glob(sys.argv[1] + "/ckpt-*"))[-1] + "/config.json"))
bad = []
if c["architectures"] != ["Qwen3ForSequenceClassification"]: bad.append(f"rm checkpoint is {c['architectures']}")
# both runs start on the same pairs (one seed, one order): the trained export scores them better
if not b[0]["loss"] < 0.75 * a[0]["loss"]:
    bad.append(f"from its own export the first batch's loss is {b[0]['loss']}, not below the fresh head's "
               f"{a[0]['loss']} on the same pairs")
first, last = (sum(x["loss"] for x in a[:4]) / 4, sum(x["loss"] for x in a[-4:]) / 4)
if not last < first: bad.append(f"rm loss did not fall: first four steps {first}, last four {last}")
if bad: print("FAIL rm init:\n  " + "\n  ".join(bad)); sys.exit(1)
print(f"ok   rm from the dpo model (score drawn): mean loss {first:.4f} -> {last:.4f}; from its own "
      f"sequence-classification export: starts at {b[0]['loss']:.4f}")
PY
else
    echo "FAIL: rm runs from --init"; FAIL=1
fi

# rm under freeze (the last block trained): the score head is trained with it, and checkpointed
"$DTPLAN" solve --model "$T/config.json" --gpus 1 --mem 2G --hardware cpu --stages 0 --objective rm --finetune freeze \
    --trainable-layers 1 --data "$T/prefs" --seq 40 --global-batch 8 --steps 8 --warmup 0 --precision fp32 --lr 2e-3 \
    -o "$T/rm-freeze.json" >/dev/null || { echo "FAIL: plan freeze rm"; FAIL=1; }
python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); p["output"].update(save_interval=1, keep_last=8)
json.dump(p, open(sys.argv[1], "w"))' "$T/rm-freeze.json"
if "$DTRUN" "$T/rm-freeze.json" --out "$T/rmf" --no-progress 2>"$T/rmf.log"; then
    python3 - "$T/rmf" "$T/rmf.log" <<'PY' || FAIL=1
import glob, json, struct, sys
def tensors(d):
    f = open(d + "/model.safetensors", "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
    data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
ck = sorted(glob.glob(sys.argv[1] + "/ckpt-*"))
first, last = tensors(ck[0]), tensors(ck[-1])   # step 1 (learning rate 0: the initial values), the last step
m = [json.loads(l)["loss"] for l in open(sys.argv[1] + "/metrics.jsonl")]
frozen = "model.layers.0.mlp.up_proj.weight"
if "score.weight" not in last or first["score.weight"] == last["score.weight"] or first[frozen] != last[frozen] \
        or "freeze fine-tune" not in open(sys.argv[2]).read():
    print("FAIL freeze rm: score.weight not trained, or block 0 not frozen"); sys.exit(1)
print(f"ok   rm under freeze: the score head moved with the last block, block 0 as initialised, "
      f"loss {m[0]:.4f} -> {m[-1]:.4f}")
PY
else
    echo "FAIL: freeze rm run: $(tail -2 "$T/rmf.log")"; FAIL=1
fi

# ---- bad input ----
# bad WANT_RC PATTERN LABEL CMD...: exit WANT_RC, one line on stderr matching PATTERN
bad() {
    local want=$1 pat=$2 label=$3
    shift 3
    "$@" >"$T/out" 2>"$T/err"
    local rc=$? n
    n=$(grep -c . "$T/err")
    if [ "$rc" != "$want" ] || [ "$n" != 1 ] || ! grep -qE -- "$pat" "$T/err"; then
        echo "FAIL $label: exit $rc, $n line(s): $(head -3 "$T/err")"; FAIL=1; return 1
    fi
    echo "ok   $label: $(cat "$T/err")"
}
printf '%s\n' '{"prompt": "a", "chosen": " b", "rejected": " c"}' '{"prompt": "a", "chosen": "", "rejected": " c"}' \
    >"$T/empty.jsonl"
bad 2 'empty.jsonl:2: .*chosen.*empty' "a pair with an empty side" \
    "$DTRUN" prepare --format pairs --tokenizer "$TOK" --out "$T/bad1" "$T/empty.jsonl"
[ -e "$T/bad1" ] && { echo "FAIL: a refused prepare left $T/bad1"; FAIL=1; }
python3 -c 'import json; print(json.dumps({"prompt": " ".join(["word"] * 60), "chosen": " yes", "rejected": " no"}))' \
    >"$T/long.jsonl"
bad 2 'long.jsonl:1: .*prompt is [0-9]+ tokens, --seq 16' "a prompt of --seq tokens" \
    "$DTRUN" prepare --format pairs --tokenizer "$TOK" --out "$T/prefs" --seq 16 "$T/long.jsonl"
python3 - "$T/prefs/prepare.json" <<'PY' || FAIL=1
import json, sys
m = json.load(open(sys.argv[1]))
if m["input_format"] != "pairs" or m["splits"]["train"]["pairs"] != 192:
    print("FAIL: a refused prepare changed the previous output"); sys.exit(1)
print("ok   the previous prepare output is whole after a refused one")
PY
bad 2 'a folder; --format pairs reads JSONL files' "a folder given to --format pairs" \
    "$DTRUN" prepare --format pairs --tokenizer "$TOK" --out "$T/bad2" "$T/prefs"
# a plan whose seq_len the prompts fill: named before any step
python3 - "$T/dpo.json" "$T/short.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["batch"]["seq_len"] = 6
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
bad 2 'input #0 line [0-9]+ .*prompt is [0-9]+ tokens, the plan.s seq_len 6' "prompts that fill the plan's seq_len" \
    "$DTRUN" "$T/short.json" --out "$T/short" --quiet
[ -e "$T/short/metrics.jsonl" ] && { echo "FAIL: a refused run wrote metrics.jsonl"; FAIL=1; }
# a damaged shard: its CRC
cp -r "$T/prefs" "$T/damaged"
python3 - "$T/damaged/train/train-000000.bin" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-5] ^= 0x40
open(sys.argv[1], "wb").write(bytes(b))
PY
bad 2 'train-000000.bin: payload CRC mismatch' "a damaged pair shard" \
    "$DTRUN" "$T/dpo.json" --data "$T/damaged/train" --out "$T/dmg" --quiet
# rm under LoRA with 16-bit parameters: one line before anything runs (LoRA rm trains at fp32)
"$DTPLAN" solve --model "$T/config.json" --gpus 1 --mem 2G --hardware cpu --stages 0 --objective rm --finetune lora \
    --data "$T/prefs" --seq 40 --global-batch 8 --steps 4 --precision mixed-bf16 -o "$T/rm-lora.json" >/dev/null ||
    { echo "FAIL: plan LoRA rm"; FAIL=1; }
bad 2 "rm trains LoRA with fp32 parameters .* not LoRA at bf16" "rm under LoRA at bf16" \
    "$DTRUN" "$T/rm-lora.json" --out "$T/rmlora" --quiet
[ -e "$T/rmlora" ] && { echo "FAIL: a refused rm LoRA run left $T/rmlora"; FAIL=1; }
# token shards to a dpo plan: the command that makes pairs
printf '%s\n' '{"text": "hello there, general text"}' '{"text": "more text for a second document"}' >"$T/text.jsonl"
"$DTRUN" prepare --format jsonl --tokenizer "$TOK" --out "$T/tok" --val-fraction 0 --quiet "$T/text.jsonl" ||
    { echo "FAIL: prepare jsonl"; FAIL=1; }
bad 2 'not a pair shard .*dtrun prepare --format pairs' "token shards given to a dpo plan" \
    "$DTRUN" "$T/dpo.json" --data "$T/tok/train" --out "$T/tokrun" --quiet
[ "$FAIL" = 0 ] && echo "PASS"
exit $FAIL
