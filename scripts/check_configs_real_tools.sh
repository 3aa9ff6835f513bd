#!/usr/bin/env bash
# Dev-time check (not CI; docs/configs.md "Checked against the real tools"): LLaMA-Factory's
# and Hugging Face's own argument parsers accept the files `dtplan export --llamafactory` /
# `--hf-trainer` write. Installs nothing: give it Pythons that have transformers (+ deepspeed)
# and llamafactory.
# Usage: bash scripts/check_configs_real_tools.sh [BUILD_DIR]
#   HF_PYTHON (default /tmp/hfvenv/bin/python): transformers, accelerate, deepspeed
#   LF_PYTHON (default $HF_PYTHON): llamafactory importable (DISABLE_VERSION_CHECK=1 is set,
#             so a newer transformers than LLaMA-Factory pins is accepted; say so when reporting)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
HF_PYTHON=${HF_PYTHON:-/tmp/hfvenv/bin/python}
LF_PYTHON=${LF_PYTHON:-$HF_PYTHON}
for p in "$HF_PYTHON" "$LF_PYTHON"; do [ -x "$p" ] || { echo "check: $p not found (set HF_PYTHON / LF_PYTHON)" >&2; exit 1; }; done
SRC=$PWD
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
cp "$SRC/configs/training/qwen2.5-7b_full_sft_ds3.yaml" mine.yaml
mkdir -p configs/training && cp "$SRC/configs/training/ds_z3_config.json" configs/training/
D=$SRC/$B/dtplan
"$D" solve --config mine.yaml --gpus 8 --mem 80G -o p1.json >/dev/null          # ZeRO-1 / 2 by the solver
sed -e 's/"zero_stage": [0-9]/"zero_stage": 3/' p1.json >p3.json                  # and a ZeRO-3 variant
# transformers 5 dropped TrainingArguments.warmup_ratio (LLaMA-Factory's examples still write it):
# the user's file is also tried with warmup_steps, so that the rest is what is checked
sed -e 's/^warmup_ratio: 0.1/warmup_steps: 100/' mine.yaml >mine_steps.yaml
for p in p1 p3; do
    "$D" export --llamafactory $p.json -o lf_$p.yaml --config mine.yaml >/dev/null
    "$D" export --llamafactory $p.json -o lf_steps_$p.yaml --config mine_steps.yaml >/dev/null
    "$D" export --llamafactory $p.json -o lf_new_$p.yaml >/dev/null
    "$D" export --hf-trainer $p.json -o hf_$p.yaml >/dev/null
done
fails=0
for f in hf_p1.yaml hf_p3.yaml; do
    if "$HF_PYTHON" - "$f" <<'PY'
import sys, transformers
import yaml
from transformers import HfArgumentParser, TrainingArguments
cfg = yaml.safe_load(open(sys.argv[1]))
# On a machine without a GPU the Trainer refuses bf16 unless use_cpu; set it here only, so
# the rest of __post_init__ (the DeepSpeed config with its "auto" values) runs too.
cfg["use_cpu"] = True
(args,) = HfArgumentParser(TrainingArguments).parse_dict(cfg, allow_extra_keys=False)
print(f"{sys.argv[1]}: accepted by transformers {transformers.__version__} TrainingArguments: "
      f"per_device_train_batch_size={args.per_device_train_batch_size} "
      f"gradient_accumulation_steps={args.gradient_accumulation_steps} deepspeed={args.deepspeed}")
PY
    then :; else echo "FAIL: $f"; fails=$((fails + 1)); fi
done
lf_files="lf_steps_p1.yaml lf_steps_p3.yaml lf_new_p1.yaml lf_new_p3.yaml"
if "$LF_PYTHON" -c 'import sys, transformers; sys.exit(int(transformers.__version__.split(".")[0]) >= 5)'; then
    lf_files="lf_p1.yaml lf_p3.yaml $lf_files"
else
    echo "lf_p1.yaml, lf_p3.yaml: skipped: transformers >= 5 has no warmup_ratio, which the user's file (LLaMA-Factory's example) sets"
fi
for f in $lf_files; do
    # as one torchrun rank (LLaMA-Factory refuses DeepSpeed outside torchrun: FORCE_TORCHRUN=1 in the launch line)
    if DISABLE_VERSION_CHECK=1 RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
        "$LF_PYTHON" - "$f" <<'PY'
import sys, yaml
import llamafactory
from llamafactory.hparams import get_train_args
cfg = yaml.safe_load(open(sys.argv[1]))
cfg["use_cpu"] = True   # as above: the bf16 hardware check only
if "lf_new_" in sys.argv[1]:
    # a new file from a plan names no data (export says so): the user adds theirs
    cfg.setdefault("dataset", "identity")
    cfg.setdefault("template", "qwen")
model_args, data_args, training_args, finetuning_args, _ = get_train_args(cfg)
print(f"{sys.argv[1]}: accepted by LLaMA-Factory {llamafactory.__version__} get_train_args: "
      f"stage={finetuning_args.stage} finetuning_type={finetuning_args.finetuning_type} "
      f"cutoff_len={data_args.cutoff_len} per_device_train_batch_size={training_args.per_device_train_batch_size} "
      f"gradient_accumulation_steps={training_args.gradient_accumulation_steps} deepspeed={training_args.deepspeed}")
PY
    then :; else echo "FAIL: $f"; fails=$((fails + 1)); fi
done
# fine-tuning plans (freeze, LoRA, QLoRA) exported as new files: LLaMA-Factory's own parser reads
# back the plan's method (its FinetuningArguments / ModelArguments after __post_init__)
cp "$SRC/configs/training/qwen2.5-7b_lora_sft_ds2.yaml" "$SRC/configs/training/qwen2.5-7b_qlora_sft_ds2.yaml" .
cp "$SRC/configs/training/ds_z2_config.json" configs/training/
"$D" solve --config qwen2.5-7b_lora_sft_ds2.yaml --gpus 8 --mem 80G --finetune freeze --trainable-layers -3 \
    --trainable-modules mlp,embed_tokens -o ft_freeze.json >/dev/null
"$D" solve --config qwen2.5-7b_lora_sft_ds2.yaml --gpus 8 --mem 80G --lora-alpha 24 --lora-target q_proj,v_proj \
    --modules-to-save lm_head --use-rslora -o ft_lora.json >/dev/null
"$D" solve --config qwen2.5-7b_qlora_sft_ds2.yaml --gpus 8 --mem 80G --quant fp4 --double-quant off -o ft_qlora.json >/dev/null
want_freeze="freeze freeze_trainable_layers=-3 freeze_trainable_modules=['mlp'] freeze_extra_modules=['embed_tokens']"
want_lora="lora lora_rank=16 lora_alpha=24 lora_dropout=0.05 lora_target=['q_proj', 'v_proj'] additional_target=['lm_head'] use_rslora=True quantization_bit=None"
want_qlora="lora lora_rank=8 lora_alpha=16 lora_target=['all'] quantization_bit=4 quantization_method=bnb quantization_type=fp4 double_quantization=False compute_dtype=torch.bfloat16"
for m in freeze lora qlora; do
    "$D" export --llamafactory ft_$m.json -o lf_ft_$m.yaml >/dev/null
    want_var=want_$m
    if DISABLE_VERSION_CHECK=1 RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
        "$LF_PYTHON" - lf_ft_$m.yaml "${!want_var}" <<'PY'
import sys, yaml
import llamafactory
from llamafactory.hparams import get_train_args
cfg = yaml.safe_load(open(sys.argv[1]))
cfg["use_cpu"] = True
cfg.setdefault("dataset", "identity")
cfg.setdefault("template", "qwen")
m, d, t, f, _ = get_train_args(cfg)
have = {"freeze_trainable_layers": f.freeze_trainable_layers, "freeze_trainable_modules": f.freeze_trainable_modules,
        "freeze_extra_modules": f.freeze_extra_modules, "lora_rank": f.lora_rank, "lora_alpha": f.lora_alpha,
        "lora_dropout": f.lora_dropout, "lora_target": f.lora_target, "additional_target": f.additional_target,
        "use_rslora": f.use_rslora, "quantization_bit": m.quantization_bit,
        "quantization_method": m.quantization_method, "quantization_type": m.quantization_type,
        "double_quantization": m.double_quantization, "compute_dtype": m.compute_dtype}
want = sys.argv[2].split(" ", 1)
bad = [] if f.finetuning_type == want[0] else [f"finetuning_type={f.finetuning_type}"]
for item in want[1].replace(", ", ",").split(" "):
    k, v = item.split("=", 1)
    got = str(have[k]).replace(", ", ",")
    if got != v.replace(", ", ","):
        bad.append(f"{k}={have[k]} (want {v})")
print(f"{sys.argv[1]}: LLaMA-Factory {llamafactory.__version__} reads finetuning_type={f.finetuning_type} "
      + " ".join(f"{k}={have[k]}" for k in (i.split("=")[0] for i in want[1].replace(', ', ',').split(" "))))
if bad:
    print("  differs from the plan: " + "; ".join(bad))
sys.exit(1 if bad else 0)
PY
    then :; else echo "FAIL: lf_ft_$m.yaml"; fails=$((fails + 1)); fi
done
[ $fails -eq 0 ] && echo "check_configs_real_tools: all accepted" || echo "check_configs_real_tools: $fails rejected"
exit $fails
