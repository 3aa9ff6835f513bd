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

# fine-tuning plans (freeze, LoRA, QLoRA) round-trip through LLaMA-Factory's keys: the estimate of the
# exported file is the plan's, byte for byte
printf '%s\n' "finetuning_type: freeze" "freeze_trainable_layers: -3" "freeze_trainable_modules: mlp" \
    "freeze_extra_modules: embed_tokens,lm_head" >frz_keys.yaml
grep -v "^finetuning_type" "$C/lf_qwen25_lora.yaml" | grep -v "^lora_" >frz_in.yaml
cat frz_keys.yaml >>frz_in.yaml
ftround() {   # name config estimate-args...
    local n=$1 cfg=$2; shift 2
    "$DTPLAN" solve --config "$cfg" --gpus 8 --mem 80G "$@" -o "$n.json" >"$n.mk" 2>&1 || { bad "plan $n: $(tail -1 "$n.mk")"; return; }
    "$DTPLAN" export --llamafactory "$n.json" -o "$n.yaml" >"$n.log" 2>&1 || { bad "export $n: $(cat "$n.log")"; return; }
    "$DTPLAN" estimate --json --plan "$n.json" >"$n.want" 2>&1
    "$DTPLAN" estimate --json --config "$n.yaml" --gpus 8 >"$n.got" 2>"$n.err" || { bad "read back $n: $(tail -1 "$n.err")"; return; }
    grep -q '"finetune": {"method": "' "$n.want" || bad "$n: the plan is not a fine-tuning plan"
    cmp -s "$n.want" "$n.got" || bad "$n: round trip differs: $(diff "$n.want" "$n.got" | head -6)"
}
ftround frz frz_in.yaml
grep -q '^freeze_trainable_layers: -3$' frz.yaml || bad "frz: $(cat frz.yaml)"
grep -qE '^freeze_extra_modules: "?embed_tokens,lm_head"?$' frz.yaml || bad "freeze: extra modules not split out: $(grep freeze_ frz.yaml)"
grep -q '^freeze_trainable_modules: mlp$' frz.yaml || bad "freeze: block modules: $(grep freeze_ frz.yaml)"
grep -q "LLaMA-Factory: finetuning_type: freeze, freeze_trainable_layers: -3, freeze_trainable_modules: mlp, freeze_extra_modules: embed_tokens,lm_head" frz.log \
    || bad "freeze: the printed LLaMA-Factory keys: $(cat frz.log)"
ftround lora "$C/lf_qwen25_lora.yaml" --lora-rank 16 --lora-alpha 24 --lora-dropout 0.1 --lora-target q_proj,v_proj \
    --modules-to-save lm_head --use-rslora
grep -qE '^lora_target: "?q_proj,v_proj"?$' lora.yaml && grep -q '^additional_target: lm_head$' lora.yaml \
    && grep -q '^lora_alpha: 24$' lora.yaml && grep -q '^use_rslora: true$' lora.yaml || bad "lora keys: $(grep lora lora.yaml)"
ftround qlora "$C/lf_qwen25_qlora.yaml" --quant fp4 --double-quant off
grep -q '^quantization_bit: 4$' qlora.yaml && grep -q '^quantization_type: fp4$' qlora.yaml \
    && grep -q '^double_quantization: false$' qlora.yaml || bad "qlora keys: $(grep quantiz qlora.yaml)"
ftround q8 "$C/lf_qwen25_qlora.yaml" --quant int8
grep -q '^quantization_bit: 8$' q8.yaml || bad "8-bit: $(grep quantiz q8.yaml)"
grep -q "PEFT: LoraConfig(r=16" lora.log || bad "no PEFT line: $(cat lora.log)"
# what LLaMA-Factory has no key for is said, not dropped
"$DTPLAN" solve --config "$C/lf_qwen25_qlora.yaml" --gpus 8 --mem 80G --quant-block 128 -o qb.json >/dev/null 2>&1 || bad "plan qb"
"$DTPLAN" export --llamafactory qb.json -o qb.yaml >qb.log 2>&1 || bad "export qb"
grep -q "note: bitsandbytes' block size through LLaMA-Factory is 64" qb.log || bad "no note on the block size: $(cat qb.log)"
# TrainingArguments and the runbook have no fine-tuning keys: said, and the options read them back
"$DTPLAN" export --hf-trainer lora.json -o lora_hf.yaml >lh.log 2>&1 || bad "export lora hf: $(cat lh.log)"
grep -q "note: TrainingArguments has no fine-tuning keys (PEFT's LoraConfig" lh.log || bad "hf: no note: $(cat lh.log)"
grep -qE "^(lora_|finetuning_type|quantization)" lora_hf.yaml && bad "LoRA keys written into TrainingArguments: $(cat lora_hf.yaml)"
"$DTPLAN" estimate --json --config lora_hf.yaml --gpus 8 --model qwen2.5-7b --seq 2048 --attention sdpa --finetune lora \
    --lora-rank 16 --lora-alpha 24 --lora-dropout 0.1 --lora-target q_proj,v_proj --modules-to-save lm_head --use-rslora \
    >lh.got 2>lh.err || bad "hf read back: $(tail -1 lh.err)"
cmp -s lora.want lh.got || bad "hf + options round trip differs: $(diff lora.want lh.got | head -4)"
"$DTPLAN" export --runbook lora.json -o lora_rb.yaml >lr.log 2>&1 || bad "export lora runbook"
grep -q "note: the runbook's training: block has no fine-tuning keys" lr.log || bad "runbook: no note: $(cat lr.log)"
# the user's own file: a qlora plan of rank 16 edits lora_rank (its lora_alpha follows the rank, as
# LLaMA-Factory's default does: not added) and what solve changed; comments and all else kept
cp "$C/lf_qwen25_qlora.yaml" mineq.yaml
"$DTPLAN" solve --config mineq.yaml --gpus 8 --mem 80G --lora-rank 16 -o q16.json >/dev/null 2>&1 || bad "plan q16"
"$DTPLAN" export --llamafactory q16.json -o mineq2.yaml --config mineq.yaml >mq.log 2>&1 || bad "export mine qlora: $(cat mq.log)"
diff mineq.yaml mineq2.yaml >mq.diff
grep -q '^> lora_rank: 16$' mq.diff || bad "qlora --config: lora_rank not written: $(cat mq.diff)"
grep -E '^[<>]' mq.diff | grep -vE '^[<>] (lora_rank|deepspeed|per_device_train_batch_size|gradient_accumulation_steps|disable_gradient_checkpointing): ' \
    && bad "qlora --config changed other lines: $(cat mq.diff)"
"$DTPLAN" estimate --json --plan q16.json >q16.want 2>&1
"$DTPLAN" estimate --json --config mineq2.yaml --gpus 8 >q16.got 2>q16.err || bad "mineq2 read back: $(tail -1 q16.err)"
cmp -s q16.want q16.got || bad "qlora --config round trip differs: $(diff q16.want q16.got | head -4)"
# ... and a full plan on a LoRA file says so in the file (finetuning_type full, quantization_bit null)
"$DTPLAN" export --llamafactory p1.json -o mineq3.yaml --config mineq.yaml >mq3.log 2>&1 || bad "export full on qlora: $(cat mq3.log)"
grep -q '^finetuning_type: full$' mineq3.yaml && grep -q '^quantization_bit: null$' mineq3.yaml || bad "full on a qlora file: $(cat mineq3.yaml)"
"$DTPLAN" estimate --config mineq3.yaml --gpus 8 >/dev/null 2>mq3.err || bad "full-on-qlora file does not read back: $(cat mq3.err)"

# LLaMA-Factory's stages rm and dpo (issue 31): the plan's objective written back as stage and its
# keys, read back to the same estimate (the objective's pref_loss / pref_beta / rm_head included)
objround() {   # name config kind estimate-args...
    local n=$1 cfg=$2 kind=$3; shift 3
    "$DTPLAN" solve --config "$cfg" --gpus 8 --mem 80G "$@" -o "$n.json" >"$n.mk" 2>&1 || { bad "plan $n: $(tail -1 "$n.mk")"; return; }
    "$DTPLAN" export --llamafactory "$n.json" -o "$n.yaml" >"$n.log" 2>&1 || { bad "export $n: $(cat "$n.log")"; return; }
    grep -q "^stage: $kind$" "$n.yaml" || bad "$n: stage not written: $(grep stage "$n.yaml")"
    "$DTPLAN" estimate --json --plan "$n.json" >"$n.want" 2>&1
    "$DTPLAN" estimate --json --config "$n.yaml" --gpus 8 >"$n.got" 2>"$n.err" || { bad "read back $n: $(tail -1 "$n.err")"; return; }
    grep -q "\"objective\": {\"kind\": \"$kind\"" "$n.want" || bad "$n: the plan is not a $kind plan: $(grep objective "$n.want")"
    cmp -s "$n.want" "$n.got" || bad "$n: round trip differs: $(diff "$n.want" "$n.got" | head -6)"
}
stagecfg() {   # out stage finetuning_type extra-lines...
    local out=$1 stage=$2 ft=$3; shift 3
    grep -vE "^(stage|finetuning_type):" "$C/lf_qwen25_full_ds3.yaml" >"$out"
    printf '%s\n' "stage: $stage" "finetuning_type: $ft" "$@" >>"$out"
}
stagecfg rm_full_in.yaml rm full
objround rm_full rm_full_in.yaml rm
grep -q '"rm_head": "value"' rm_full.want || bad "rm: LLaMA-Factory's value head not planned: $(grep objective rm_full.want)"
stagecfg rm_lora_in.yaml rm lora "lora_rank: 16"
objround rm_lora rm_lora_in.yaml rm
stagecfg dpo_full_in.yaml dpo full "pref_beta: 0.25" "pref_loss: sigmoid" "pref_ftx: 0.5" "ref_model: Qwen/Qwen2.5-7B"
objround dpo_full dpo_full_in.yaml dpo
grep -q '^pref_beta: 0.25$' dpo_full.yaml && grep -q '"pref_beta": 0.25' dpo_full.want && grep -q '"reference": true' dpo_full.want ||
    bad "dpo: beta / reference: $(grep objective dpo_full.want)"
stagecfg dpo_simpo_in.yaml dpo full "pref_loss: simpo" "simpo_gamma: 0.5"
objround dpo_simpo dpo_simpo_in.yaml dpo
grep -q '^pref_loss: simpo$' dpo_simpo.yaml && grep -q '"reference": false' dpo_simpo.want ||
    bad "simpo holds no reference: $(grep objective dpo_simpo.want)"
stagecfg dpo_lora_in.yaml dpo lora "pref_loss: ipo"
objround dpo_lora dpo_lora_in.yaml dpo
# the user's own sft file edited for a dpo plan: stage and the dpo keys change, the rest stays
cp "$C/lf_qwen25_full_ds3.yaml" mydpo.yaml
"$DTPLAN" export --llamafactory dpo_full.json -o mydpo2.yaml --config mydpo.yaml >md.log 2>&1 || bad "export dpo on sft file: $(cat md.log)"
diff mydpo.yaml mydpo2.yaml >md.diff
grep -q '^> stage: dpo$\|^> pref_beta: 0.25$' md.diff && grep -q '^> pref_beta: 0.25$' md.diff || bad "dpo on the sft file: $(cat md.diff)"
"$DTPLAN" estimate --json --config mydpo2.yaml --gpus 8 >md.got 2>md.err || bad "mydpo2 read back: $(tail -1 md.err)"
cmp -s dpo_full.want md.got || bad "dpo on the user's file: round trip differs: $(diff dpo_full.want md.got | head -4)"
# ... and an sft plan on the user's dpo file says stage: sft (pt / sft files keep theirs)
"$DTPLAN" export --llamafactory p1.json -o mysft.yaml --config mydpo2.yaml >ms.log 2>&1 || bad "export sft on dpo file: $(cat ms.log)"
grep -q '^stage: sft$' mysft.yaml || bad "an sft plan on a dpo file: $(grep stage mysft.yaml)"
sed -e 's/^stage: sft/stage: pt/' "$C/lf_qwen25_full_ds3.yaml" >mypt.yaml
"$DTPLAN" export --llamafactory p1.json -o mypt2.yaml --config mypt.yaml >mp.log 2>&1 || bad "export on pt file: $(cat mp.log)"
grep -q '^stage: pt$' mypt2.yaml || bad "a pt file's stage changed: $(grep stage mypt2.yaml)"
# ppo / grpo plans have no LLaMA-Factory stage: one line, nothing written
"$DTPLAN" solve --model qwen2.5-7b --gpus 8 --mem 80G --objective grpo --runtime deepspeed -o grpo.json >/dev/null 2>&1 || bad "plan grpo"
"$DTPLAN" export --llamafactory grpo.json -o grpo.yaml >grpo.out 2>grpo.err; rc=$?
[ $rc -eq 2 ] && [ ! -e grpo.yaml ] && [ "$(wc -l <grpo.err)" -eq 1 ] && grep -q "no LLaMA-Factory stage" grpo.err ||
    bad "grpo export: exit $rc, $(cat grpo.err)"

[ $fails -eq 0 ] && echo "config_export: all checks passed"
exit $((fails > 0))
