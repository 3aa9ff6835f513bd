#!/bin/bash
# dtplan export --llamafactory | --hf-trainer | --runbook (docs/configs.md "Export"): the
# exported config read back with --config gives the plan's memory rows; the user's own file
# as the starting point changes only the keys whose value changes, comments kept; files
# this run did not write are never replaced.
# args: dtplan dtrun source-dir
set -u
DTPLAN=$1
SRC=$3
C=$SRC/tests/planner/configs
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
rows() { sed -n '/"rows": \[/,/^  \]/p' "$1"; }
cd "$T" || exit 1

# plans: ZeRO-1 without checkpointing (80G), ZeRO-3 with every layer checkpointed (the config's own)
"$DTPLAN" solve --config "$C/lf_qwen25_full_ds3.yaml" --gpus 8 --mem 80G -o p1.json >/dev/null 2>&1 || bad "solve p1"
"$DTPLAN" estimate --json --plan p1.json >p1.rows 2>&1 || bad "estimate --plan p1"
roundtrip() {   # plan format out extra-estimate-args...
    local plan=$1 flag=$2 out=$3; shift 3
    "$DTPLAN" export "$flag" "$plan" -o "$out" >"$out.log" 2>&1 || { bad "export $flag: $(cat "$out.log")"; return; }
    "$DTPLAN" estimate --json --plan "$plan" >"$out.want" 2>&1
    "$DTPLAN" estimate --json --config "$out" "$@" >"$out.got" 2>"$out.err" || { bad "estimate --config $out: $(tail -1 "$out.err")"; return; }
    rows "$out.want" >"$out.a"; rows "$out.got" >"$out.b"
    [ -s "$out.a" ] || bad "no rows for $plan"
    diff "$out.a" "$out.b" >&2 || bad "$flag round trip: memory rows differ ($out)"
}
roundtrip p1.json --llamafactory lf.yaml --gpus 8
roundtrip p1.json --hf-trainer hf.yaml --gpus 8 --model qwen2.5-7b --seq 2048 --attention sdpa
roundtrip p1.json --runbook rb.yaml --gpus 8 --seq 2048 --attention sdpa
grep -q "^per_device_train_batch_size: " lf.yaml || bad "lf.yaml has no batch key"
grep -q "^model_name_or_path: Qwen/Qwen2.5-7B$" lf.yaml || bad "lf.yaml does not name the hub id: $(grep model_name lf.yaml)"
grep -q "llamafactory-cli train lf.yaml" lf.yaml.log || bad "no llamafactory-cli launch line: $(cat lf.yaml.log)"
grep -q "torchrun --nnodes 1 --nproc_per_node 8" hf.yaml.log || bad "no torchrun line for --hf-trainer"

# a ZeRO-3 plan names its DeepSpeed JSON, written beside the config
"$DTPLAN" estimate --config "$C/lf_qwen25_full_ds3.yaml" --gpus 8 >/dev/null 2>&1 || bad "estimate the config"
sed -e 's/"zero_stage": 1/"zero_stage": 3/' p1.json >p3.json
roundtrip p3.json --llamafactory lf3.yaml --gpus 8
[ -f lf3_ds_config.json ] || bad "no DeepSpeed JSON beside lf3.yaml"
grep -q "^deepspeed: lf3_ds_config.json" lf3.yaml || bad "lf3.yaml does not name its DeepSpeed JSON: $(grep deepspeed lf3.yaml)"

# the user's own file: only what changes, comments kept
cp "$C/lf_qwen25_full_ds3.yaml" "$C/ds_z3_config.json" .
"$DTPLAN" export --llamafactory p1.json -o mine.yaml --config lf_qwen25_full_ds3.yaml >mine.log 2>&1 || bad "export --config: $(cat mine.log)"
diff lf_qwen25_full_ds3.yaml mine.yaml >mine.diff
# the plan (ZeRO-1, micro-batch 2 x 1, no checkpointing) changes exactly these keys
grep -E '^[<>]' mine.diff | grep -vE '^[<>] (deepspeed|per_device_train_batch_size|gradient_accumulation_steps|disable_gradient_checkpointing): ' \
    && bad "export --config changed other lines: $(cat mine.diff)"
grep -q '^> deepspeed: mine_ds_config.json  # choices' mine.diff || bad "the DeepSpeed key lost its comment: $(cat mine.diff)"
grep -q '^> disable_gradient_checkpointing: true' mine.diff || bad "checkpointing off not written: $(cat mine.diff)"
[ "$(grep -c '^>' mine.diff)" -eq 4 ] || bad "export --config: not 4 changed keys: $(cat mine.diff)"
# ... and the batch, when the plan's differs
sed -e 's/"micro_batch": [0-9]*/"micro_batch": 2/' -e 's/"grad_accum": [0-9]*/"grad_accum": 1/' p3.json >p4.json
"$DTPLAN" export --llamafactory p4.json -o mine4.yaml --config lf_qwen25_full_ds3.yaml >mine4.log 2>&1 || bad "export p4: $(cat mine4.log)"
grep -q "^per_device_train_batch_size: 2$" mine4.yaml || bad "micro-batch not rewritten in place"
grep -q "^### train$" mine4.yaml || bad "comment lost"
grep -q "^learning_rate: 1.0e-5$" mine4.yaml || bad "an unchanged value was rewritten: $(grep learning_rate mine4.yaml)"
"$DTPLAN" estimate --config mine4.yaml --gpus 8 >/dev/null 2>mine4.err || bad "the edited file does not read back: $(cat mine4.err)"

# a runbook with Chinese comments (libyaml counts characters, the edit bytes): values edited, comments kept
"$DTPLAN" export --runbook p1.json -o zh.yaml --config "$C/runbook_zh.yaml" >zh.log 2>&1 || bad "export zh: $(cat zh.log)"
grep -q "^  batch_size: 16  # 总batch size，会自动分配到各GPU$" zh.yaml || bad "zh: batch_size not edited in place: $(cat zh.yaml)"
grep -q "^  accumulation_steps: 1  # 累积4步$" zh.yaml || bad "zh: accumulation_steps not edited in place: $(cat zh.yaml)"
grep -q "^# 分布式训练配置（VLM 运行手册）$" zh.yaml || bad "zh: the first comment changed"
"$DTPLAN" estimate --config zh.yaml --gpus 8 >/dev/null 2>zh.err || bad "zh.yaml does not read back: $(cat zh.err)"

# never replaces a file it did not write; bad target combinations: one line, exit 2
"$DTPLAN" export --llamafactory p1.json -o mine.yaml >ex.out 2>ex.err; rc=$?
[ $rc -eq 2 ] && grep -q "'mine.yaml' exists; dtplan replaces no file it did not write" ex.err || bad "overwrote mine.yaml ($rc): $(cat ex.err)"
"$DTPLAN" export --llamafactory p1.json >ex.out 2>ex.err; [ $? -eq 2 ] && grep -q "\-o FILE is required" ex.err || bad "no -o: $(cat ex.err)"
"$DTPLAN" export --llamafactory --runbook p1.json -o x.yaml >ex.out 2>ex.err; [ $? -eq 2 ] || bad "two targets accepted"
[ -e x.yaml ] && bad "x.yaml written after a refusal"
"$DTPLAN" export --hf-trainer p1.json -o new.json >ex.out 2>ex.err; [ $? -eq 2 ] && grep -q "name it .yaml" ex.err || bad "a new .json accepted: $(cat ex.err)"
# a TrainingArguments JSON edited in place stays JSON (a new key goes before the closing brace)
"$DTPLAN" export --hf-trainer p1.json -o args.json --config "$C/hf_training_args.json" >hj.log 2>&1 || bad "export JSON: $(cat hj.log)"
jq -e '.per_device_train_batch_size > 0 and has("deepspeed")' args.json >/dev/null \
    || bad "the edited JSON is not JSON with the plan's keys: $(cat args.json)"
printf '{}' >empty.json
"$DTPLAN" export --hf-trainer p1.json -o empty2.json --config empty.json >he.log 2>&1 || bad "export {}: $(cat he.log)"
jq -e '.per_device_train_batch_size > 0' empty2.json >/dev/null || bad "keys added to {} are not JSON: $(cat empty2.json)"

[ $fails -eq 0 ] && echo "config_export: all checks passed"
exit $((fails > 0))
