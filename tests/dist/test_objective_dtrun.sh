#!/bin/bash
# The rm and dpo objectives trained by dtrun on several ranks (docs/objectives.md "In dtrun"):
# a preference set prepared with `dtrun prepare --format pairs` (qwen2-mini's tokenizer, a tiny
# Qwen3 of its vocabulary; several shards), OBJECTIVE (rm | dpo) planned for 8 pairs a step, then
#   - world 2 at ZeRO stages 0-3 (and stage 3 with optimizer and parameters offloaded) gives the
#     world-1 stage-0 losses and grad norms (relative 1e-5, as test_zero.sh) and the same
#     step metrics (rewards/margins or margin: 1e-4 absolute);
#   - dpo under LoRA (reference = the policy with its adapters off): world 2 stage 2 gives world 1;
#   - rm under LoRA (the score head trained whole, PEFT's SEQ_CLS modules_to_save): world 2 at
#     stages 2 and 3 gives world 1; the checkpoint's adapter/ is SEQ_CLS with
#     base_model.model.score.weight; --init-adapter reads it back: a run from it at lr 1e-12
#     evaluates to the run's last eval_loss (1e-5);
#   - dpo with precompute_ref (TRL's precompute_ref_log_probs: no reference model) gives the
#     in-step reference's losses, grad norms and margins at world 1, world 2 stage 3, under LoRA,
#     and resumed (the starting model read again for the table); its tracked parameter bytes
#     are the policy's alone (the reference's gone) and its total below the in-step run's;
#   - the checkpoint is what the objective makes: rm a *ForSequenceClassification directory with
#     score.weight [1, C] and no lm_head, dpo a causal LM;
#   - resume (world 2, stage 1) continues the pair order: its losses equal the uninterrupted run's.
# Usage: test_objective_dtrun.sh DTPLAN DTRUN SRCDIR OBJECTIVE
set -u
DTPLAN=$1
DTRUN=$2
SRC=$3
OBJ=$4
. "$(dirname "$0")/../lib.sh"
dt_need python3 mpirun
export OMP_NUM_THREADS=1
dt_scratch dt_test_obj
FAIL=0
STEPS=8

# a tiny Qwen3 of qwen2-mini's 1500 ids, and 48 preference pairs (40 train, 8 held out)
python3 - "$SRC/models/catalog/qwen3-tiny.json" "$TMP" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(vocab_size=1500, _name_or_path="qwen3-pairs-tiny")
json.dump(c, open(sys.argv[2] + "/config.json", "w"), indent=2)
with open(sys.argv[2] + "/prefs.jsonl", "w") as f:
    for i in range(48):
        f.write(json.dumps({"prompt": f"Question {i}: what colour is the sky?",
                            "chosen": f" The sky is blue, number {i}.",
                            "rejected": f" Green {i * 7 % 13}, or maybe red."}) + "\n")
PY
"$DTRUN" prepare --format pairs --tokenizer "$SRC/tests/tokenizer/data/qwen2-mini.json" --out "$TMP/prefs" \
    --val-fraction 0.15 --seq 40 --shard-tokens 400 --quiet "$TMP/prefs.jsonl" || { echo "FAIL: prepare --format pairs"; exit 1; }
# several shards a split: the pair index runs across them
python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); sys.exit(len(m["splits"]["train"]["shards"]) < 3)' \
    "$TMP/prefs/prepare.json" || { echo "FAIL: --shard-tokens 400 did not split the pairs over shards"; exit 1; }
"$DTPLAN" solve --model "$TMP/config.json" --gpus 1 --mem 2G --hardware cpu --stages 0 --objective "$OBJ" \
    --data "$TMP/prefs" --seq 40 --global-batch 8 --steps $STEPS --precision fp32 --lr 1e-3 \
    -o "$TMP/solved.json" >/dev/null || { echo "FAIL: dtplan cannot plan $OBJ"; exit 1; }
"$DTPLAN" solve --model "$TMP/config.json" --gpus 1 --mem 2G --hardware cpu --stages 0 \
    --objective "$OBJ" --finetune lora --data "$TMP/prefs" --seq 40 --global-batch 8 --steps $STEPS --precision fp32 \
    --lr 1e-3 -o "$TMP/solved-lora.json" >/dev/null || { echo "FAIL: dtplan cannot plan LoRA $OBJ"; exit 1; }

# plan SOLVED STAGE WORLD OFFLOAD OUT: 8 pairs a step (micro-batch 2), evaluation and a checkpoint
# every 4 steps, the layout given
plan() {
    local st=$2 w=$3 off=$4 poff=none
    [ "$st" = 3 ] && poff=$off
    python3 - "$1" "$5" "{\"parallel\": {\"zero_stage\": $st, \"world_size\": $w, \"offload_optimizer\": \"$off\",
        \"offload_param\": \"$poff\"}, \"cluster\": {\"gpus_per_node\": $w},
        \"batch\": {\"micro_batch\": 2, \"grad_accum\": $((8 / 2 / w)), \"global_batch\": 8},
        \"data\": {\"eval_interval\": 4}, \"output\": {\"save_interval\": 4}}" <<'PY'
import json, sys
def merge(into, edits):   # edits' leaves replace into's, sections merge
    for k, v in edits.items():
        if isinstance(v, dict): merge(into.setdefault(k, {}), v)
        else: into[k] = v
p = json.load(open(sys.argv[1]))
p.pop("prediction", None)
merge(p, json.loads(sys.argv[3]))
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
}
run() { dt_run_ranks "$DTRUN" "$@"; }  # WORLD PLAN OUT [args]

MARGIN=rewards/margins
[ "$OBJ" = rm ] && MARGIN=margin
# check OUT BASE LABEL: losses, norms and the margin metric as BASE's
check() {
    { echo "$dt_metrics_close"; cat <<'PY'; } | python3 - "$@" "$MARGIN" || return 1
import json, sys
out, base, label, margin = sys.argv[1:]
bad = []
metrics_close(out, base, bad)
a, b = series(base, margin), series(out, margin)
d = max(abs(x - y) for x, y in zip(a, b))
if d > 1e-4: bad.append(f"{margin} differs by {d:.3g}")
ev = [json.loads(l) for l in open(out + "/metrics.jsonl") if "val_loss" in l]
if not ev or not any(k.startswith("eval_") for k in ev[-1]): bad.append("no held-out metrics (eval_*) logged")
if bad:
    print(f"FAIL {label}:\n  " + "\n  ".join(bad)); sys.exit(1)
print(f"ok   {label}: {len(a)} steps, loss {series(out, 'loss')[0]:.4f} -> {series(out, 'loss')[-1]:.4f}")
PY
}

plan "$TMP/solved.json" 0 1 none "$TMP/base.json"
run 1 "$TMP/base.json" "$TMP/base" 2>"$TMP/base.log" || { echo "FAIL: one-rank $OBJ run: $(tail -2 "$TMP/base.log")"; exit 1; }
for cfg in 0:none 1:none 2:none 3:none 3:cpu; do
    IFS=: read -r st off <<<"$cfg"
    pl="$TMP/p-$st-$off.json" out="$TMP/o-$st-$off"
    plan "$TMP/solved.json" "$st" 2 "$off" "$pl"
    if ! run 2 "$pl" "$out" 2>"$out.log"; then echo "FAIL stage $st offload $off: $(tail -2 "$out.log")"; FAIL=1; continue; fi
    check "$out" "$TMP/base" "$OBJ stage $st world 2 offload $off" || FAIL=1
done

if [ "$OBJ" = dpo ]; then
    plan "$TMP/solved-lora.json" 0 1 none "$TMP/lora-base.json"
    plan "$TMP/solved-lora.json" 2 2 none "$TMP/lora-2.json"
    if run 1 "$TMP/lora-base.json" "$TMP/lora-base" && run 2 "$TMP/lora-2.json" "$TMP/lora-2"; then
        check "$TMP/lora-2" "$TMP/lora-base" "LoRA dpo (reference = adapters off) stage 2 world 2" || FAIL=1
    else
        echo "FAIL: LoRA dpo runs"; FAIL=1
    fi
fi

if [ "$OBJ" = dpo ]; then
    # pc IN OUT: IN with objective.precompute_ref
    pc() { python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); p["objective"]["precompute_ref"] = True
json.dump(p, open(sys.argv[2], "w"), indent=2)' "$1" "$2"; }
    pc "$TMP/base.json" "$TMP/pc-1.json"
    plan "$TMP/solved.json" 3 2 none "$TMP/pc-3.tmp.json" && pc "$TMP/pc-3.tmp.json" "$TMP/pc-3.json"
    pc "$TMP/lora-base.json" "$TMP/pc-lora.json"
    for c in "1 pc-1 base" "2 pc-3 base" "1 pc-lora lora-base"; do
        read -r w name ref <<<"$c"
        if run "$w" "$TMP/$name.json" "$TMP/$name" 2>"$TMP/$name.log"; then
            check "$TMP/$name" "$TMP/$ref" "dpo precompute_ref ($name, world $w) = the in-step reference" || FAIL=1
        else
            echo "FAIL: dpo precompute_ref $name: $(tail -2 "$TMP/$name.log")"; FAIL=1
        fi
    done
    python3 - "$TMP/pc-1" "$TMP/base" <<'PY' || FAIL=1
import json, sys
pc, base = (json.load(open(d + "/run-report.json"))["tracked"] for d in sys.argv[1:])
if not (base["params"] == 2 * pc["params"] and pc["total"] < base["total"]):
    print(f"FAIL precompute_ref memory: tracked {pc} vs the in-step reference's {base}"); sys.exit(1)
print(f"ok   precompute_ref holds no reference: tracked params {pc['params']} B (in-step {base['params']} B), "
      f"total {pc['total']} B (in-step {base['total']} B)")
PY
    # resumed at step 4 (world 2, stage 1): the table from the starting model, read again (from
    # the policy at step 4 its losses would differ)
    plan "$TMP/solved.json" 1 2 none "$TMP/pcr.tmp.json" && pc "$TMP/pcr.tmp.json" "$TMP/pcr.json"
    if run 2 "$TMP/pcr.json" "$TMP/pcr" --max-steps 4 && run 2 "$TMP/pcr.json" "$TMP/pcr" --resume 2>"$TMP/pcr.log"; then
        check "$TMP/pcr" "$TMP/o-1-none" "dpo precompute_ref resumed at step 4 = the in-step run" || FAIL=1
    else
        echo "FAIL: dpo precompute_ref resume runs"; FAIL=1
    fi
fi

if [ "$OBJ" = rm ]; then
    plan "$TMP/solved-lora.json" 0 1 none "$TMP/rl-base.json"
    run 1 "$TMP/rl-base.json" "$TMP/rl-base" 2>"$TMP/rl-base.log" || { echo "FAIL: LoRA rm: $(tail -2 "$TMP/rl-base.log")"; FAIL=1; }
    for st in 2 3; do
        plan "$TMP/solved-lora.json" $st 2 none "$TMP/rl-$st.json"
        if run 2 "$TMP/rl-$st.json" "$TMP/rl-$st" 2>"$TMP/rl-$st.log"; then
            check "$TMP/rl-$st" "$TMP/rl-base" "LoRA rm (score head as modules_to_save) stage $st world 2" || FAIL=1
        else
            echo "FAIL: LoRA rm stage $st world 2: $(tail -2 "$TMP/rl-$st.log")"; FAIL=1
        fi
    done
    CK="$TMP/rl-3/ckpt-$(printf %08d $STEPS)"
    python3 - "$CK/adapter" <<'PY' || FAIL=1
import json, struct, sys
d = sys.argv[1]
c = json.load(open(d + "/adapter_config.json"))
f = open(d + "/adapter_model.safetensors", "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
ok = (c["task_type"] == "SEQ_CLS" and "score" in (c["modules_to_save"] or [])
      and h.get("base_model.model.score.weight", {}).get("shape") == [1, 64]
      and not any("lm_head" in k for k in h))
if not ok:
    print(f"FAIL LoRA rm adapter: task_type {c['task_type']}, modules_to_save {c['modules_to_save']}, "
          f"{sorted(k for k in h if 'layers' not in k)}"); sys.exit(1)
print("ok   LoRA rm adapter: SEQ_CLS, modules_to_save", c["modules_to_save"], "with base_model.model.score.weight")
PY
    # --init-adapter: the same model again (lr 1e-12 leaves it as read), evaluated after its first step
    python3 - "$TMP/rl-base.json" "$TMP/rl-read.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["optimizer"]["lr"] = 1e-12
p["data"]["eval_interval"] = 1
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
    if run 1 "$TMP/rl-read.json" "$TMP/rl-read" --init-adapter "$CK/adapter" --max-steps 1 2>"$TMP/rl-read.log"; then
        python3 - "$TMP/rl-read" "$TMP/rl-3" <<'PY' || FAIL=1
import json, sys
ev = lambda d: [json.loads(l)["eval_loss"] for l in open(d + "/metrics.jsonl") if "eval_loss" in l]
a, b = ev(sys.argv[1])[0], ev(sys.argv[2])[-1]
if abs(a - b) > 1e-5 * abs(b): print(f"FAIL --init-adapter: eval_loss {a} vs the run's last {b}"); sys.exit(1)
print(f"ok   --init-adapter of the LoRA rm adapter: eval_loss {a:.9g} = the run's last {b:.9g}")
PY
    else
        echo "FAIL: --init-adapter run: $(tail -2 "$TMP/rl-read.log")"; FAIL=1
    fi
fi

# the checkpoint the objective makes
python3 - "$TMP/o-3-none/ckpt-$(printf %08d $STEPS)" "$OBJ" <<'PY' || FAIL=1
import json, struct, sys
d, obj = sys.argv[1:]
c = json.load(open(d + "/config.json"))
f = open(d + "/model.safetensors", "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
arch = c["architectures"][0]
if obj == "rm":
    ok = (arch == "Qwen3ForSequenceClassification" and h.get("score.weight", {}).get("shape") == [1, c["hidden_size"]]
          and "lm_head.weight" not in h and len(c.get("id2label", {})) == 1 and "pad_token_id" in c)
else:
    ok = arch == "Qwen3ForCausalLM" and "score.weight" not in h
if not ok:
    print(f"FAIL checkpoint of {obj}: {arch}, tensors {sorted(k for k in h if 'layers' not in k)}"); sys.exit(1)
print(f"ok   {obj} checkpoint: {arch}")
PY

# resume: world 2 stage 1, stopped at step 4, continued to STEPS: the losses of the whole run
plan "$TMP/solved.json" 1 2 none "$TMP/r.json"
if run 2 "$TMP/r.json" "$TMP/r" --max-steps 4 && run 2 "$TMP/r.json" "$TMP/r" --resume; then
    python3 - "$TMP/r" "$TMP/o-1-none" <<'PY' || FAIL=1
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1] + "/metrics.jsonl")]
b = [json.loads(l)["loss"] for l in open(sys.argv[2] + "/metrics.jsonl")]
if a != b: print(f"FAIL resume: losses {a} vs the uninterrupted run's {b}"); sys.exit(1)
print(f"ok   resume at step 4: {len(a)} losses bitwise the uninterrupted run's")
PY
else
    echo "FAIL: resume runs"; FAIL=1
fi
[ "$FAIL" = 0 ] && echo "PASS"
exit $FAIL
