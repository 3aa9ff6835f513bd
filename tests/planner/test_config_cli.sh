#!/bin/bash
# dtplan estimate | solve | simulate --config (docs/configs.md): LLaMA-Factory YAML, HF
# TrainingArguments JSON, the runbooks' training: block; every key reported; each bad
# input one line and exit 2.
# args: dtplan dtrun source-dir
set -u
DTPLAN=$1
SRC=$3
C=$SRC/tests/planner/configs
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
# ok NAME CMD...: exit 0
ok() { local n=$1; shift; "$@" >"$T/$n.out" 2>"$T/$n.err" || bad "$n: exit $? $(cat "$T/$n.err")"; }
has() { grep -qF -- "$2" "$T/$1.out" || bad "$1: no '$2' in: $(head -c 3000 "$T/$1.out")"; }
# refuse NAME PATTERN CMD...: exit 2, one line on stderr matching PATTERN, nothing on stdout's table
refuse() {
    local n=$1 pat=$2; shift 2
    "$@" >"$T/$n.out" 2>"$T/$n.err"; local rc=$?
    [ $rc -eq 2 ] || bad "$n: exit $rc, want 2 ($(cat "$T/$n.err"))"
    [ "$(wc -l <"$T/$n.err")" -eq 1 ] || bad "$n: stderr is not one line: $(cat "$T/$n.err")"
    grep -qE -- "$pat" "$T/$n.err" || bad "$n: stderr '$(cat "$T/$n.err")' does not match '$pat'"
    grep -q "ZeRO  offload" "$T/$n.out" && bad "$n: printed a table before refusing"
}
cd "$C" || exit 1

# LLaMA-Factory, full SFT, ZeRO-3 from its deepspeed: file; the hub id resolves to the catalog
ok lf_est "$DTPLAN" estimate --config lf_qwen25_full_ds3.yaml --gpus 8
has lf_est "config lf_qwen25_full_ds3.yaml (llamafactory): 25 keys"
has lf_est "model      qwen2.5-7b"
has lf_est "micro-batch 1, sequence 2048, checkpointed layers 28 of 28, sdpa attention"
has lf_est "  3   none/none"
has lf_est "template                         line 13   no effect"
has lf_est "time       step"
# the same as the options it stands for
ok lf_flags "$DTPLAN" estimate --json --model qwen2.5-7b --gpus 8 --seq 2048 --precision mixed-bf16 --runtime deepspeed \
    --attention sdpa --micro-batch 1 --grad-accum 2 --ckpt full --deepspeed ds_z3_config.json
ok lf_json "$DTPLAN" estimate --json --config lf_qwen25_full_ds3.yaml --gpus 8
cmp -s "$T/lf_flags.out" "$T/lf_json.out" || bad "estimate --config differs from its options: $(diff "$T/lf_flags.out" "$T/lf_json.out" | head)"
grep -q "^config " "$T/lf_json.err" || bad "--json: the key report belongs on stderr"
# the command line wins over the config, and says so
ok lf_cli "$DTPLAN" estimate --config lf_qwen25_full_ds3.yaml --gpus 8 --seq 1024
has lf_cli "--seq 2048 from the config: the command line's --seq 1024 wins"
has lf_cli "sequence 1024"

# solve: the config's own configuration next to solve's choice; learning-rate scaling
ok lf_solve "$DTPLAN" solve --config lf_qwen25_full_ds3.yaml --gpus 8 --mem 80G --global-batch 64 --lr-scaling sqrt -o "$T/p.json"
has lf_solve "config as written        ZeRO-3, offload none/none, global batch 16 = micro-batch 1 x accumulation 2 x 8 GPUs"
has lf_solve "solve's choice"
has lf_solve "linear scaling 4e-05, square-root 2e-05; the plan keeps 2e-05 (--lr-scaling sqrt)"
grep -q '"lr": 2e-05' "$T/p.json" || bad "the plan does not keep the square-root scaled lr: $(grep '"lr"' "$T/p.json")"
ok lf_solve_lin "$DTPLAN" solve --config lf_qwen25_full_ds3.yaml --gpus 8 --mem 80G --global-batch 64 --lr-scaling linear -o "$T/p2.json"
grep -q '"lr": 4e-05' "$T/p2.json" || bad "the plan does not keep the linearly scaled lr"
ok lf_solve_same "$DTPLAN" solve --config lf_qwen25_full_ds3.yaml --gpus 8 --mem 80G -o "$T/p3.json"
grep -q '"lr": 1e-05' "$T/p3.json" || bad "an unchanged global batch keeps the config's lr"
grep -q "learning rate:" "$T/lf_solve_same.out" && bad "no scaling line when the global batch is the config's"

# a ZeRO-2 example (Qwen3-8B, fa2): an estimate and a plan
ok lf2_est "$DTPLAN" estimate --config lf_qwen3_8b_full_ds2.yaml --gpus 8
has lf2_est "  2   none/none"
has lf2_est "micro-batch 2, sequence 4096, checkpointed layers 36 of 36, flash attention"
ok lf2_solve "$DTPLAN" solve --config lf_qwen3_8b_full_ds2.yaml --gpus 8 --mem 80G -o "$T/p2b.json"
has lf2_solve "config as written        ZeRO-2, offload none/none, global batch 64 = micro-batch 2 x accumulation 4 x 8 GPUs, 36/36"
[ -s "$T/p2b.json" ] || bad "no plan from the ZeRO-2 example"

# num_train_epochs becomes steps with --data's token count (a dtrun prepare output)
mkdir -p "$T/prep/train"
cat >"$T/prep/prepare.json" <<JSON
{"format": "dtrun-prepare", "tokenizer": {"vocab_size": 151643, "path": "tokenizer.json",
 "fingerprint": "$(printf '0%.0s' $(seq 64))"}, "splits": {"train": {"tokens": 3276800}, "val": {"tokens": 0}}}
JSON
ok lf_epochs "$DTPLAN" solve --config lf_qwen25_full_ds3.yaml --gpus 8 --mem 80G --data "$T/prep" -o "$T/pe.json"
# 3 epochs x 3276800 tokens / (16 sequences x 2048 tokens) = 300 steps; warmup_ratio 0.1 -> 30
has lf_epochs "num_train_epochs 3 x 3276800 training tokens"
has lf_epochs "= 300 steps"
grep -q '"total_steps": 300' "$T/pe.json" || bad "the plan does not take the epochs' steps: $(grep total_steps "$T/pe.json")"
grep -q '"warmup_steps": 30' "$T/pe.json" || bad "warmup_ratio not applied to the epochs' steps"
ok lf_noepochs "$DTPLAN" solve --config lf_qwen25_full_ds3.yaml --gpus 8 --mem 80G
has lf_noepochs "num_train_epochs 3: give --steps, or --data naming a prepare output"

# simulate the config's configuration
ok lf_sim "$DTPLAN" simulate --config lf_qwen25_full_ds3.yaml --gpus 8 --json
grep -q '"step_s"' "$T/lf_sim.out" || bad "simulate --config: no JSON summary"

# HF TrainingArguments JSON (no model key: --model); gradient_checkpointing, fp32 otherwise
ok hf_est "$DTPLAN" estimate --config hf_training_args.json --model qwen2.5-0.5b --gpus 2
has hf_est "config hf_training_args.json (hf): 12 keys"
has hf_est "micro-batch 4, sequence 1024, checkpointed layers 24 of 24"
has hf_est "  0   none/none"
ok lf_model "$DTPLAN" estimate --config lf_qwen25_full_ds3.yaml --gpus 8 --model qwen2.5-3b
has lf_model "model_name_or_path Qwen/Qwen2.5-7B from the config: the command line's --model qwen2.5-3b wins"
has lf_model "model      qwen2.5-3b"
refuse hf_nomodel "names no model" "$DTPLAN" estimate --config hf_training_args.json

# the runbook: total batch over the GPUs, the auto rule next to solve's choice
ok rb_est "$DTPLAN" estimate --config runbook_vlm.yaml --gpus 4
has rb_est "distributed_strategy: auto: qwen2.5-7b has 7.62B parameters -> ZeRO-3"
has rb_est "micro-batch 8"
has rb_est "  3   none/none"
has rb_est "data                             line 11   no effect section not read"
ok rb_solve "$DTPLAN" solve --config runbook_vlm.yaml --gpus 4 --mem 80G
has rb_solve "runbook rule (auto)      ZeRO-3, offload none/none, global batch 128 = micro-batch 8 x accumulation 4 x 4 GPUs"
has rb_solve "solve's choice"
refuse rb_divide "batch_size 32 \(the total over the GPUs\) does not divide by --gpus 3" \
    "$DTPLAN" estimate --config runbook_vlm.yaml --gpus 3
ok rb_ddp "$DTPLAN" estimate --config runbook_ddp.yaml --gpus 2
has rb_ddp "  0   none/none"
has rb_ddp "micro-batch 8"
ok rb_fmt "$DTPLAN" estimate --config runbook_ddp.yaml --config-format runbook --gpus 2
refuse twice "--config given twice" "$DTPLAN" estimate --config runbook_ddp.yaml --config runbook_vlm.yaml
refuse scaling_alone "--lr-scaling needs --config FILE" "$DTPLAN" solve --mem 80G --model gpt2 --lr-scaling sqrt
refuse fmt_bad "--config-format 'yaml': expected llamafactory, hf or runbook" \
    "$DTPLAN" estimate --config runbook_ddp.yaml --config-format yaml

# methods not modelled yet: refused by name
refuse lora "finetuning_type: lora is not modelled yet" "$DTPLAN" estimate --config lf_qwen25_lora.yaml
refuse qlora "finetuning_type: lora is not modelled yet" "$DTPLAN" estimate --config lf_qwen25_qlora.yaml
sed -e 's/finetuning_type: lora/finetuning_type: full/' lf_qwen25_qlora.yaml >"$T/q4.yaml"
refuse qbit "quantization_bit: 4 is not modelled yet" "$DTPLAN" estimate --config "$T/q4.yaml"
grep -v finetuning_type lf_qwen25_lora.yaml >"$T/default_ft.yaml"
refuse default_ft "finetuning_type: lora \(LLaMA-Factory's default" "$DTPLAN" estimate --config "$T/default_ft.yaml"
sed -e 's/stage: sft/stage: dpo/' -e '/^deepspeed/d' lf_qwen25_full_ds3.yaml >"$T/dpo.yaml"
refuse dpo "stage: dpo is not modelled yet" "$DTPLAN" estimate --config "$T/dpo.yaml"

# bad input: one line each, exit 2
mk() { sed -e "$2" lf_qwen25_full_ds3.yaml >"$T/$1.yaml"; }
mk syntax 's/^cutoff_len: 2048/cutoff_len: [2048/'
refuse syntax "syntax.yaml:[0-9]+:[0-9]+: YAML syntax error" "$DTPLAN" estimate --config "$T/syntax.yaml"
mk wrongtype 's/^per_device_train_batch_size: 1/per_device_train_batch_size: one/'
refuse wrongtype "wrongtype.yaml:27: 'per_device_train_batch_size' must be a whole number, not a string 'one'" \
    "$DTPLAN" estimate --config "$T/wrongtype.yaml"
mk lrstr 's/^learning_rate: 1.0e-5/learning_rate: 1e-5/'
refuse lrstr "'learning_rate' must be a number, not a string '1e-5' \(YAML 1.1" "$DTPLAN" estimate --config "$T/lrstr.yaml"
mk stage 's/^stage: sft/stage: sfft/'
refuse stage "stage 'sfft' is not a LLaMA-Factory stage" "$DTPLAN" estimate --config "$T/stage.yaml"
mk both 's/^bf16: true/bf16: true\nfp16: true/'
refuse both "bf16: true and fp16: true contradict" "$DTPLAN" estimate --config "$T/both.yaml"
mk nods 's/^deepspeed: ds_z3_config.json/deepspeed: missing_ds.json/'
refuse nods "deepspeed: 'missing_ds.json' does not exist" "$DTPLAN" estimate --config "$T/nods.yaml"
mk unknown 's/^template: qwen/templat: qwen/'
refuse unknown "unknown key 'templat'" "$DTPLAN" estimate --config "$T/unknown.yaml"
mk dup 's/^template: qwen/template: qwen\ntemplate: llama3/'
refuse dup "'template' is given twice" "$DTPLAN" estimate --config "$T/dup.yaml"
mk nomodel 's|^model_name_or_path: .*|model_name_or_path: acme/Not-A-Model-7B|'
HF_HOME=$T/hf refuse nomodel "acme/Not-A-Model-7B': not in the Hugging Face cache .*dtplan never downloads" \
    "$DTPLAN" estimate --config "$T/nomodel.yaml"
refuse nofile "--config: .*missing.yaml" "$DTPLAN" estimate --config "$T/missing.yaml"
printf '' >"$T/empty.yaml"
refuse empty "the config is empty" "$DTPLAN" estimate --config "$T/empty.yaml"

# a hub id found in the Hugging Face cache (never downloaded)
mkdir -p "$T/hf/hub/models--acme--Tiny/snapshots/0123abc"
cp "$SRC/models/catalog/llama-tiny.json" "$T/hf/hub/models--acme--Tiny/snapshots/0123abc/config.json"
mk cached 's|^model_name_or_path: .*|model_name_or_path: acme/Tiny|'
HF_HOME=$T/hf ok cached "$DTPLAN" estimate --config "$T/cached.yaml" --gpus 8 --seq 64
has cached "models--acme--Tiny/snapshots/0123abc/config.json"
# a local directory with config.json
mkdir -p "$T/localmodel"
cp "$SRC/models/catalog/qwen3-tiny.json" "$T/localmodel/config.json"
sed -e "s|^model_name_or_path: .*|model_name_or_path: $T/localmodel|" -e 's/^cutoff_len: 2048/cutoff_len: 64/' \
    lf_qwen25_full_ds3.yaml >"$T/local.yaml"
ok local "$DTPLAN" estimate --config "$T/local.yaml" --gpus 8
has local "model      localmodel"

[ $fails -eq 0 ] && echo "config_cli: all checks passed"
exit $((fails > 0))
