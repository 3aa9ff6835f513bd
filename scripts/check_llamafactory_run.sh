#!/usr/bin/env bash
# Dev-time check (not CI; docs/configs.md "Checked against the real tools"): LLaMA-Factory itself
# trains from the YAML `dtplan export --llamafactory` writes, on 2 CPU ranks, and its trainer's
# effective batch, accumulation, steps and logged learning rates are the plan's.
#
# Everything is made here, nothing is downloaded: a tiny Qwen2 model (transformers, random
# weights, the repository's qwen2-mini test tokenizer) and a 64-example alpaca-format dataset.
# A user's LLaMA-Factory file names them; `dtplan solve --config` plans a global batch of 8 on
# 2 ranks (DDP: --stages 0), and the plan is also run as micro-batch 1 x accumulation 4; each
# plan is exported onto the user's file and run with `llamafactory-cli train` (FORCE_TORCHRUN=1,
# 2 processes, gloo); a stage: dpo file on chosen / rejected pairs is planned and run the same way.
# Compared with the plan: the Trainer's "Instantaneous batch size per
# device", "Gradient Accumulation steps", "Total train batch size (w. parallel, distributed &
# accumulation)", "Total optimization steps", world size, trainer_state.json's global_step and
# every logged learning_rate against Hugging Face's cosine-with-warmup schedule of the plan's lr,
# warmup and steps (what the exported lr_scheduler_type: cosine means); the loss must fall.
#
# Usage: bash scripts/check_llamafactory_run.sh [BUILD_DIR]
#   HF_PYTHON  (default /tmp/hfvenv/bin/python): transformers, torch (makes the tiny model)
#   LF_PYTHON  (default /tmp/yc-lfvenv/bin/python): llamafactory importable
#   LF_PYTHONPATH (optional): prepended to PYTHONPATH for LLaMA-Factory, for a trl it can import
#              (LLaMA-Factory 0.9.5 needs trl <= 0.24 for AutoModelForCausalLMWithValueHead;
#              e.g. pip install --no-deps --target DIR trl==0.24.0)
# DISABLE_VERSION_CHECK=1 is set (LLaMA-Factory 0.9.5 pins older transformers / datasets /
# peft than the venv has; say so when reporting). ACCELERATE_USE_CPU=true makes the Trainer
# start a gloo process group on CPU ranks (without it each torchrun process trains alone); it is
# an environment variable, so the exported file is run as written.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
B=${1:-build}
D=$SRC/$B/dtplan
HF_PYTHON=${HF_PYTHON:-/tmp/hfvenv/bin/python}
LF_PYTHON=${LF_PYTHON:-/tmp/yc-lfvenv/bin/python}
for p in "$HF_PYTHON" "$LF_PYTHON" "$D"; do [ -x "$p" ] || { echo "check: $p not found" >&2; exit 1; }; done
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"

# LLaMA-Factory 0.9.5's data/mm_plugin.py imports torchaudio unconditionally; no audio is read
# here, so an empty module stands in when torchaudio is not installed
mkdir -p stub/torchaudio shim
"$LF_PYTHON" -c 'import torchaudio' 2>/dev/null || echo "# stand-in: no audio is read" >stub/torchaudio/__init__.py
export PYTHONPATH=$T/stub${LF_PYTHONPATH:+:$LF_PYTHONPATH}${PYTHONPATH:+:$PYTHONPATH}
# LLaMA-Factory runs `torchrun`: the one of its own interpreter
printf '#!/bin/sh\nexec "%s" -m torch.distributed.run "$@"\n' "$LF_PYTHON" >shim/torchrun
chmod +x shim/torchrun
"$LF_PYTHON" -c 'from trl import AutoModelForCausalLMWithValueHead' 2>/dev/null || {
    echo "check: LLaMA-Factory cannot import trl's AutoModelForCausalLMWithValueHead (trl > 0.24 moved it): set" \
         "LF_PYTHONPATH to a directory holding trl 0.24 (pip install --no-deps --target DIR trl==0.24.0)" >&2
    exit 1
}

# the tiny model (the qwen2-mini tokenizer: 1500 ids, ChatML tokens) and the dataset
"$HF_PYTHON" - "$T/tiny" "$SRC/tests/tokenizer/data/qwen2-mini.json" <<'PY' >/dev/null 2>&1
import sys, torch
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
out, tok_file = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
tok = PreTrainedTokenizerFast(tokenizer_file=tok_file, eos_token="<|im_end|>", pad_token="<|endoftext|>")
cfg = Qwen2Config(vocab_size=1536, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
Qwen2ForCausalLM(cfg).save_pretrained(out)
tok.save_pretrained(out)
PY
mkdir -p data
python3 - <<'PY'
import json, random
random.seed(0)
rows = []
for _ in range(64):
    a, b = random.randint(1, 50), random.randint(1, 50)
    rows.append({"instruction": f"What is {a} plus {b}?", "input": "", "output": f"{a} plus {b} is {a + b}."})
json.dump(rows, open("data/tiny.json", "w"), indent=1)
pairs = [{"instruction": r["instruction"], "input": "", "chosen": r["output"],
          "rejected": r["output"].replace(" is ", " is not ")} for r in rows]
json.dump(pairs, open("data/pairs.json", "w"), indent=1)
json.dump({"tiny": {"file_name": "tiny.json"},
           "pairs": {"file_name": "pairs.json", "ranking": True,
                     "columns": {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"}}},
          open("data/dataset_info.json", "w"), indent=1)
PY
cat >user.yaml <<EOF
### model
model_name_or_path: $T/tiny
### method
stage: sft
do_train: true
finetuning_type: full
### dataset
dataset: tiny
dataset_dir: data
template: qwen
cutoff_len: 64
overwrite_cache: true
preprocessing_num_workers: 1
### output
output_dir: out
logging_steps: 1
save_strategy: "no"
overwrite_output_dir: true
report_to: none
### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 1
learning_rate: 1.0e-3
max_steps: 6
lr_scheduler_type: cosine
warmup_steps: 2
ddp_timeout: 600
EOF
echo "dtplan solve --config user.yaml --hardware A100-80GB --gpus 2 --mem 80G --global-batch 8 --stages 0 -o plan_a.json"
"$D" solve --config user.yaml --hardware A100-80GB --gpus 2 --mem 80G --global-batch 8 --stages 0 -o plan_a.json >solve.log
# stage dpo on the pairs (LLaMA-Factory's full-parameter DPO: a frozen reference copy)
sed -e 's/^stage: sft/stage: dpo/' -e 's/^dataset: tiny/dataset: pairs/' user.yaml >user_d.yaml
printf 'pref_beta: 0.1\npref_loss: sigmoid\n' >>user_d.yaml
"$D" solve --config user_d.yaml --hardware A100-80GB --gpus 2 --mem 80G --global-batch 8 --stages 0 -o plan_d.json >solve_d.log
# the same plan as micro-batch 1 x accumulation 4 (the batch triple edited, then validated by export)
python3 - <<'PY'
import json
p = json.load(open("plan_a.json"))
p["batch"]["micro_batch"], p["batch"]["grad_accum"] = 1, 4
json.dump(p, open("plan_b.json", "w"), indent=2)
PY

fails=0
for c in a b d; do
    u=user.yaml fall=1
    [ $c = d ] && u=user_d.yaml fall=0   # DPO's loss on a random tiny model need not fall in 6 steps
    "$D" export --llamafactory plan_$c.json -o lf_$c.yaml --config $u >export_$c.log
    echo "== plan_$c ($(grep '^stage:' lf_$c.yaml)): $(diff $u lf_$c.yaml | grep '^>' | tr '\n' ' ')"
    rm -rf out
    if ! PATH=$T/shim:$PATH ACCELERATE_USE_CPU=true CUDA_VISIBLE_DEVICES= DISABLE_VERSION_CHECK=1 FORCE_TORCHRUN=1 \
        NNODES=1 NPROC_PER_NODE=2 NODE_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29540 + RANDOM % 400)) \
        OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
        timeout 600 "$LF_PYTHON" -m llamafactory.cli train lf_$c.yaml >run_$c.log 2>&1; then
        echo "FAIL: llamafactory-cli train lf_$c.yaml: $(grep -E 'Error' run_$c.log | tail -3)"
        fails=$((fails + 1))
        continue
    fi
    python3 - plan_$c.json run_$c.log out/trainer_state.json $fall <<'PY' || fails=$((fails + 1))
import json, math, re, sys
plan, log, state = json.load(open(sys.argv[1])), open(sys.argv[2]).read(), json.load(open(sys.argv[3]))
must_fall = sys.argv[4] == "1"
b, s, lr = plan["batch"], plan["schedule"], plan["optimizer"]["lr"]
def logged(label):
    v = set(re.findall(re.escape(label) + r" = (\d+)", log))
    return int(v.pop()) if len(v) == 1 else None
world = set(re.findall(r"world size: (\d+)", log))
rows = [("world size (ranks)", plan["parallel"]["world_size"], int(world.pop()) if len(world) == 1 else None),
        ("micro-batch per rank", b["micro_batch"], logged("Instantaneous batch size per device")),
        ("gradient accumulation", b["grad_accum"], logged("Gradient Accumulation steps")),
        ("global batch", b["global_batch"], logged("Total train batch size (w. parallel, distributed & accumulation)")),
        ("optimizer steps", s["total_steps"], logged("Total optimization steps")),
        ("steps run (trainer_state)", s["total_steps"], state["global_step"])]
# transformers get_cosine_schedule_with_warmup at the scheduler's step k (0-based), logged after step k+1
W, N = s["warmup_steps"], s["total_steps"]
def hf_cosine(k):
    if k < W: return lr * k / max(1, W)
    return lr * max(0.0, 0.5 * (1.0 + math.cos(math.pi * (k - W) / max(1, N - W))))
hist = [h for h in state["log_history"] if "learning_rate" in h]
lr_err = max(abs(h["learning_rate"] - hf_cosine(h["step"] - 1)) for h in hist) if hist else None
losses = [h["loss"] for h in hist]
ok = all(p == l for _, p, l in rows) and lr_err is not None and lr_err <= 1e-12 * lr and len(hist) == N \
     and (losses[-1] < losses[0] or not must_fall)
for name, p, l in rows:
    print(f"  {name:28s} plan {p!s:>6}  LLaMA-Factory {l!s:>6}  {'ok' if p == l else 'DIFFERS'}")
lrs = ", ".join("%.6g" % h["learning_rate"] for h in hist)
print(f"  learning rate, {len(hist)} logged steps: max |LLaMA-Factory - HF cosine(plan lr {lr:g}, warmup {W}, "
      f"steps {N})| = {lr_err:.3g}  ({lrs})")
print(f"  loss {losses[0]:.4f} -> {losses[-1]:.4f}" + ("" if must_fall else " (not required to fall)"))
print("  " + ("ok" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
done
[ "$fails" -eq 0 ] && echo "LLaMA-Factory trained the three exported plans as planned" || echo "FAIL: $fails case(s)"
exit $((fails > 0))
