#!/bin/bash
# A LoRA run from a base model to a merged model (docs/finetune.md "A LoRA run, end to end"):
#   1. a base: gpt2-tiny / qwen3-tiny fully trained 2 steps (its checkpoint is a Hugging Face
#      directory: config.json + model.safetensors);
#   2. dtrun trains a LoRA plan (--finetune lora, fp32) from it (--init): the adapters start as
#      PEFT's (B = 0, lora_A from the seed); on 2 ranks at ZeRO-3
#      the same losses (relative 1e-5) as on 1 rank at stage 0;
#   3. every checkpoint holds adapter/ in PEFT's format (adapter_config.json with the plan's r,
#      alpha, targets and the base's absolute path and fingerprint; adapter_model.safetensors
#      with PEFT's keys, "base_model.model." + the base's key); keep_last prunes an old checkpoint
#      with its adapter; 2-rank ZeRO-3 writes the same adapter keys and shapes;
#   4. `dtrun merge --base BASE --adapter CKPT/adapter` gives a model whose logits equal the
#      LoRA checkpoint's (dtrun sample --dump-logits, 1e-5) and differ from the base's;
#   5. --init-adapter: a run started from that adapter saves it back bitwise (an lr too small to
#      move it); an adapter of another rank, a plan that is not LoRA, a missing directory: one
#      line, exit 2, no output directory;
#   6. the adapter merged onto another base (a different seed) is refused: one line, exit 2.
# Usage: test_lora_adapter.sh DTPLAN DTRUN SRCDIR MODEL
set -u
DTPLAN=$1
DTRUN=$2
MODEL=$4
. "$(dirname "$0")/../lib.sh"
dt_need python3 mpirun
dt_need_fortunes
dt_scratch dt_test_lora
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
export OMP_NUM_THREADS=1
cd "$TMP" || exit 1

solve() {   # solve OUT.json [args...]: MODEL on the CPU, 2 sequences of 32 tokens a step
    local out=$1
    shift
    "$DTPLAN" solve --model "$MODEL" --hardware cpu --gpus 1 --mem 2G --stages 0 --precision fp32 \
        --seq 32 --global-batch 2 "$@" -o "$out" >/dev/null || { echo "FAIL: dtplan solve $*"; exit 1; }
}
solve full.json --steps 2 --save-interval 2
solve full2.json --steps 2 --save-interval 2
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); p["data"]["seed"]=7; json.dump(p,open(sys.argv[1],"w"))' full2.json
"$DTRUN" full.json --out base --quiet || { echo "FAIL: base run"; exit 1; }
"$DTRUN" full2.json --out other --quiet || { echo "FAIL: other base run"; exit 1; }
BASE=$TMP/base/ckpt-00000002
solve lora.json --steps 4 --save-interval 2 --finetune lora --lr 1e-2
# keep one checkpoint: step 2's (with its adapter) is pruned when step 4's lands
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); p["output"]["keep_last"]=1; json.dump(p,open(sys.argv[1],"w"))' lora.json
"$DTRUN" lora.json --out run --init "$BASE" --quiet || fail "LoRA run from the base"
CK=run/ckpt-00000004
[ -d run/ckpt-00000002 ] && fail "keep_last 1 left run/ckpt-00000002: $(ls -R run/ckpt-00000002)"
for f in adapter_config.json adapter_model.safetensors; do [ -s "$CK/adapter/$f" ] || fail "no $CK/adapter/$f"; done

# the adapter files: PEFT's config and keys, the plan's rank, the base's path and fingerprint
python3 - "$TMP" <<'PY' || FAIL=1
import json, os, struct, sys
t = sys.argv[1]
def header(path):
    b = open(path, "rb").read(8)
    n = struct.unpack("<Q", b)[0]
    return json.loads(open(path, "rb").read(8 + n)[8:])
bad = []
cfg = json.load(open(t + "/run/ckpt-00000004/adapter/adapter_config.json"))
if cfg["peft_type"] != "LORA" or cfg["r"] != 8 or cfg["lora_alpha"] != 16:
    bad.append(f"adapter_config: {cfg['peft_type']} r {cfg['r']} alpha {cfg['lora_alpha']}")
if cfg["base_model_name_or_path"] != os.path.realpath(t + "/base/ckpt-00000002"):
    bad.append(f"base_model_name_or_path {cfg['base_model_name_or_path']}")
h = header(t + "/run/ckpt-00000004/adapter/adapter_model.safetensors")
meta = h.pop("__metadata__", {})
if not meta.get("dt_base_fingerprint"): bad.append(f"no base fingerprint in the metadata: {meta}")
keys = sorted(h)
if not keys or not all(k.startswith("base_model.model.") and (".lora_A." in k or ".lora_B." in k) for k in keys):
    bad.append(f"adapter keys: {keys[:4]}")
mods = {k.split(".lora_")[0][len("base_model.model."):] for k in keys}
if len(keys) != 2 * len(mods) or len(cfg["target_modules"]) != len(mods):
    bad.append(f"{len(keys)} tensors for {len(mods)} modules, {len(cfg['target_modules'])} targets")
for k, v in h.items():
    r = v["shape"][0] if ".lora_A." in k else v["shape"][1]
    if v["dtype"] != "F32" or r != 8: bad.append(f"{k}: {v['dtype']} {v['shape']}")
loss = lambda d: [json.loads(l)["loss"] for l in open(t + "/" + d + "/metrics.jsonl")]
if len(loss("run")) != 4: bad.append(f"{len(loss('run'))} LoRA steps")
print("\n".join("FAIL: " + b for b in bad) or f"adapter: {len(mods)} modules, PEFT keys, r 8; losses {loss('run')}")
sys.exit(1 if bad else 0)
PY

# 2 ranks, ZeRO-3: the same losses, the same adapter keys and shapes
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); p["parallel"].update(zero_stage=3, world_size=2); p["cluster"]["gpus_per_node"]=2; p["batch"].update(micro_batch=1, grad_accum=1); p.pop("prediction", None); json.dump(p,open(sys.argv[2],"w"))' lora.json lora-z3.json
dt_run_ranks "$DTRUN" 2 lora-z3.json run-z3 --init "$BASE" || fail "LoRA run at ZeRO-3 on 2 ranks"
python3 - "$TMP" <<PY || FAIL=1
$dt_metrics_close
import json, struct, sys
t = sys.argv[1]
bad = []
metrics_close(t + "/run-z3", t + "/run", bad)
def header(path):
    n = struct.unpack("<Q", open(path, "rb").read(8))[0]
    h = json.loads(open(path, "rb").read(8 + n)[8:]); h.pop("__metadata__", None)
    return {k: v["shape"] for k, v in h.items()}
if header(t + "/run/ckpt-00000004/adapter/adapter_model.safetensors") != \
        header(t + "/run-z3/ckpt-00000004/adapter/adapter_model.safetensors"):
    bad.append("ZeRO-3's adapter keys / shapes differ from stage 0's")
print("\n".join("FAIL: " + b for b in bad) or "ZeRO-3 x 2: the same losses and adapter")
sys.exit(1 if bad else 0)
PY

# merged = base + adapter: the checkpoint's logits, not the base's
"$DTRUN" merge --base "$BASE" --adapter "$CK/adapter" -o merged >/dev/null || fail "dtrun merge"
for d in lora:$CK merged:merged base:$BASE; do
    "$DTRUN" sample "${d#*:}" --prompt "Hello there, LoRA." --tokens 1 --dump-logits "${d%%:*}.bin" >/dev/null ||
        fail "dtrun sample ${d#*:}"
done
python3 - <<'PY' || FAIL=1
import struct, sys
def r(f):
    d = open(f, "rb").read()
    return struct.unpack("%df" % (len(d) // 4), d)
a, m, b = r("lora.bin"), r("merged.bin"), r("base.bin")
dm = max(abs(x - y) for x, y in zip(a, m)); db = max(abs(x - y) for x, y in zip(a, b))
scale = max(abs(x) for x in a)
ok = len(a) == len(m) == len(b) and dm <= 1e-5 * max(1.0, scale) and db > 1e-3
print(("" if ok else "FAIL: ") + f"merged vs LoRA checkpoint logits {dm:.3g}, vs the base {db:.3g} (scale {scale:.3g})")
sys.exit(0 if ok else 1)
PY

# --init-adapter: a LoRA run that starts from the adapter (an lr too small to move an fp32
# value: one step) saves it back bitwise; a plan of another rank, a plan that is not LoRA and a
# missing directory are one line, exit 2, no output directory
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); p["optimizer"]["lr"]=1e-30; p["schedule"]["total_steps"]=1; p["output"]["save_interval"]=1; json.dump(p,open(sys.argv[2],"w"))' lora.json lora-same.json
"$DTRUN" lora-same.json --out again --init "$BASE" --init-adapter "$CK/adapter" --quiet || fail "--init-adapter run"
python3 - <<'PY' || FAIL=1
import json, struct, sys
def tensors(path):
    d = open(path, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n]); h.pop("__metadata__", None)
    return {k: d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
a = tensors("again/ckpt-00000001/adapter/adapter_model.safetensors")
b = tensors("run/ckpt-00000004/adapter/adapter_model.safetensors")
ok = sorted(a) == sorted(b) and all(a[k] == b[k] for k in a)
print(("" if ok else "FAIL: ") + f"--init-adapter: {len(a)} tensors back {'bitwise' if ok else 'DIFFERENT'}")
sys.exit(0 if ok else 1)
PY
"$DTPLAN" solve --model "$MODEL" --hardware cpu --gpus 1 --mem 2G --stages 0 --precision fp32 --seq 32 \
    --global-batch 2 --steps 2 --finetune lora --lora-rank 4 -o r4.json >/dev/null || fail "solve --lora-rank 4"
bad() {   # bad WANT OUTDIR ARGS...: one line naming WANT, exit 2, OUTDIR not created
    local want=$1 out=$2
    shift 2
    "$DTRUN" "$@" --out "$out" >o.txt 2>e.txt
    local rc=$?
    [ $rc -eq 2 ] || fail "$* -> exit $rc (want 2)"
    [ "$(wc -l <e.txt)" -eq 1 ] || fail "$* -> not one line: $(cat e.txt)"
    grep -qF -- "$want" e.txt || fail "$* -> '$(cat e.txt)' lacks '$want'"
    [ -e "$out" ] && fail "$* -> left $out"
}
bad "--lora-rank 8" bad1 r4.json --init "$BASE" --init-adapter "$CK/adapter"
bad "--finetune lora" bad2 full.json --init-adapter "$CK/adapter"
bad "nowhere" bad3 lora.json --init-adapter nowhere

# another base: refused by the fingerprint, nothing written
"$DTRUN" merge --base "$TMP/other/ckpt-00000002" --adapter "$CK/adapter" -o wrong >out 2>err
rc=$?
[ $rc -eq 2 ] || fail "merge onto another base: exit $rc (want 2)"
[ "$(wc -l <err)" -eq 1 ] || fail "merge onto another base: not one line: $(cat err)"
grep -qi "fingerprint" err || fail "merge onto another base does not name the fingerprint: $(cat err)"
[ -e wrong ] && fail "merge onto another base left wrong/"
exit $FAIL
