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
[ $fails -eq 0 ] && echo "check_configs_real_tools: all accepted" || echo "check_configs_real_tools: $fails rejected"
exit $fails
