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

# fine-tuning keys (docs/configs.md "Fine-tuning keys"): LLaMA-Factory's full / LoRA / QLoRA SFT examples
# under configs/training (ZeRO-2 and -3) give the estimate of the --finetune options they stand for, byte for
# byte, and a plan that keeps the method. Their deepspeed: paths are relative to the checkout, as the Trainer
# opens them from the working directory.
TR=configs/training
COMMON="--gpus 8 --seq 2048 --precision mixed-bf16 --runtime deepspeed --attention sdpa --micro-batch 1 --ckpt full"
ftsame() {   # name config flags...: estimate --json --config == estimate --json flags; solve keeps the method
    local n=$1 cfg=$2; shift 2
    cd "$SRC" || exit 1
    ok "$n.cfg" "$DTPLAN" estimate --json --config "$cfg" --gpus 8
    # shellcheck disable=SC2086
    ok "$n.flags" "$DTPLAN" estimate --json $COMMON "$@"
    cmp -s "$T/$n.cfg.out" "$T/$n.flags.out" || bad "$n: --config differs from its options: $(diff "$T/$n.cfg.out" "$T/$n.flags.out" | head -5)"
    ok "$n.solve" "$DTPLAN" solve --config "$cfg" --gpus 8 --mem 24G -o "$T/$n.plan.json"
    cd "$C" || exit 1
    local m; m=$(sed -n 's/^  *"method": "\(.*\)",*$/\1/p' "$T/$n.plan.json" | head -1)
    if grep -q '"finetune": {"method": "' "$T/$n.cfg.out"; then
        grep -q "\"method\": \"$m\"" "$T/$n.cfg.out" && [ -n "$m" ] || bad "$n: the solved plan's method '$m' is not the config's"
    else
        [ -z "$m" ] || [ "$m" = full ] || bad "$n: a full fine-tune solved as '$m'"
    fi
}
ftsame lora3 $TR/llama3.1-8b_lora_sft_ds3.yaml --model llama-3.1-8b --grad-accum 2 --finetune lora --lora-target all \
    --deepspeed $TR/ds_z3_config.json
ftsame lora2 $TR/qwen2.5-7b_lora_sft_ds2.yaml --model qwen2.5-7b --grad-accum 2 --finetune lora --lora-rank 16 \
    --lora-dropout 0.05 --deepspeed $TR/ds_z2_config.json
ftsame qlora2 $TR/qwen2.5-7b_qlora_sft_ds2.yaml --model qwen2.5-7b --grad-accum 8 --finetune qlora --quant nf4 \
    --double-quant on --compute-dtype bf16 --deepspeed $TR/ds_z2_config.json
ftsame qlora3 $TR/llama3.1-8b_qlora_sft_ds3.yaml --model llama-3.1-8b --grad-accum 8 --finetune qlora \
    --deepspeed $TR/ds_z3_config.json
ftsame full3 $TR/qwen2.5-7b_full_sft_ds3.yaml --model qwen2.5-7b --grad-accum 2 --deepspeed $TR/ds_z3_config.json
grep -q '"finetune"' "$T/full3.cfg.out" && bad "a full fine-tune printed a fine-tuning section"
# the stage examples (issue 31): full DPO on ZeRO-3 and a LoRA reward model on ZeRO-2 give the estimate of
# their --objective options and a plan that keeps the objective
ftsame dpo3 $TR/qwen2.5-7b_full_dpo_ds3.yaml --model qwen2.5-7b --grad-accum 8 --objective dpo --pref-loss sigmoid \
    --pref-beta 0.1 --deepspeed $TR/ds_z3_config.json
ftsame rm2 $TR/qwen2.5-7b_lora_rm_ds2.yaml --model qwen2.5-7b --grad-accum 8 --finetune lora --lora-target all \
    --objective rm --rm-head value --deepspeed $TR/ds_z2_config.json
grep -q '"objective": {"kind": "dpo", "reference": true' "$T/dpo3.cfg.out" || bad "dpo3: $(grep objective "$T/dpo3.cfg.out")"
grep -q '"objective": {"kind": "rm"' "$T/rm2.cfg.out" || bad "rm2: $(grep objective "$T/rm2.cfg.out")"
grep -q '"kind": "dpo"' "$T/dpo3.plan.json" && grep -q '"kind": "rm"' "$T/rm2.plan.json" ||
    bad "the stage examples' plans lost the objective: $(grep -A2 '"objective"' "$T/dpo3.plan.json" "$T/rm2.plan.json")"
cd "$SRC" || exit 1
ok lora2_txt "$DTPLAN" estimate --config $TR/qwen2.5-7b_lora_sft_ds2.yaml --gpus 8
has lora2_txt "lora_rank                        line 13   used      LoRA rank 16"
has lora2_txt "lora_dropout                     line 14   used      dropout(x) and its mask kept per adapted linear"
has lora2_txt "finetune   lora r 16 alpha 32 dropout 0.05 on all"
ok qlora_txt "$DTPLAN" estimate --config $TR/qwen2.5-7b_qlora_sft_ds2.yaml --gpus 8
cd "$C" || exit 1
has qlora_txt "quantization_bit                 line 7    used      QLoRA: 4-bit base (nf4), dequantised to bf16 per use"
has qlora_txt "quantization_method              line 8    used      bitsandbytes quantises the base"
# LLaMA-Factory's default finetuning_type is lora (r 8, alpha 16, all linears)
grep -v finetuning_type lf_qwen25_lora.yaml >"$T/default_ft.yaml"
ok default_ft "$DTPLAN" estimate --config "$T/default_ft.yaml" --gpus 8
has default_ft "finetune   lora r 8 alpha 16 dropout 0 on all"
# freeze: the last / first N blocks, block modules and freeze_extra_modules, as --trainable-modules
mkf() { sed -e 's/^finetuning_type: lora$/finetuning_type: freeze/' -e '/^lora_/d' lf_qwen25_lora.yaml >"$T/$1.yaml"; printf '%s\n' "${@:2}" >>"$T/$1.yaml"; }
mkf frz "freeze_trainable_layers: -3" "freeze_trainable_modules: mlp, self_attn" "freeze_extra_modules: [embed_tokens, lm_head]"
ok frz_cfg "$DTPLAN" estimate --json --config "$T/frz.yaml" --gpus 8
# shellcheck disable=SC2086
ok frz_flags "$DTPLAN" estimate --json $COMMON --model qwen2.5-7b --grad-accum 2 --zero-stage 0 --finetune freeze \
    --trainable-layers -3 --trainable-modules mlp,self_attn,embed_tokens,lm_head
cmp -s "$T/frz_cfg.out" "$T/frz_flags.out" || bad "freeze: --config differs from its options: $(diff "$T/frz_cfg.out" "$T/frz_flags.out" | head -5)"
mkf frz99 "freeze_trainable_layers: 99"
ok frz99 "$DTPLAN" estimate --config "$T/frz99.yaml" --gpus 8
has frz99 "freeze_trainable_layers 99: qwen2.5-7b has 28 blocks; LLaMA-Factory trains all of them"
has frz99 "--finetune freeze --trainable-layers 28"
# pure_bf16 keeps LoRA's adapters in bf16 (LLaMA-Factory casts trainable parameters to fp32 otherwise)
sed -e 's/^bf16: true/pure_bf16: true/' lf_qwen25_lora.yaml >"$T/pure.yaml"
ok pure "$DTPLAN" estimate --config "$T/pure.yaml" --gpus 8
has pure "--finetune lora --lora-rank 8 --lora-dropout 0 --lora-target all --adapter-dtype bf16"
# the command line's --finetune replaces the config's method
ok ft_cli "$DTPLAN" estimate --config lf_qwen25_lora.yaml --gpus 8 --finetune full
has ft_cli "finetuning_type lora from the config: the command line's --finetune full wins"
grep -q "^finetune " "$T/ft_cli.out" && bad "--finetune full on the command line still planned lora"
ok ft_cli_rank "$DTPLAN" estimate --config lf_qwen25_lora.yaml --gpus 8 --lora-rank 32
has ft_cli_rank "--lora-rank 8 from the config: the command line's --lora-rank 32 wins"
has ft_cli_rank "finetune   lora r 32"
# a lora key with finetuning_type full is without effect, as LLaMA-Factory ignores it
sed -e 's/^finetuning_type: lora/finetuning_type: full/' lf_qwen25_lora.yaml >"$T/full_keys.yaml"
ok full_keys "$DTPLAN" estimate --config "$T/full_keys.yaml" --gpus 8
has full_keys "lora_rank                        line 9    no effect used only with finetuning_type lora (this config: full)"

# what is not modelled yet, or not LLaMA-Factory's: refused by name with file:line
# lrefuse NAME SED PATTERN: the LoRA example edited by SED is refused with one line matching PATTERN
lrefuse() { sed -e "$2" lf_qwen25_lora.yaml >"$T/$1.yaml"; refuse "$1" "$3" "$DTPLAN" estimate --config "$T/$1.yaml"; }
lrefuse rank0 's/^lora_rank: 8/lora_rank: 0/' "rank0.yaml:9: lora_rank: 0: a LoRA rank is at least 1"
lrefuse target 's/^lora_target: all/lora_target: q_proj,c_attn/' \
    "target.yaml:10: lora_target c_attn: qwen2.5-7b \(llama family\) has no linear 'c_attn'"
lrefuse dora 's/^lora_rank: 8/lora_rank: 8\nuse_dora: true/' "dora.yaml:10: use_dora: DoRA's magnitude vectors"
lrefuse pissa 's/^lora_rank: 8/lora_rank: 8\npissa_init: true/' "pissa.yaml:10: pissa_init: PiSSA's SVD initialisation"
lrefuse loraplus 's/^lora_rank: 8/lora_rank: 8\nloraplus_lr_ratio: 16.0/' \
    "loraplus.yaml:10: loraplus_lr_ratio: LoRA\+ trains lora_B at its own learning rate"
lrefuse oft 's/^finetuning_type: lora/finetuning_type: oft/' "finetuning_type: oft is not modelled yet"
lrefuse adapter 's/^lora_rank: 8/lora_rank: 8\nadapter_name_or_path: saves\/lora/' \
    "adapter.yaml:10: adapter_name_or_path: a saved adapter's rank and targets live in its adapter_config.json"
sed -e 's/^quantization_bit: 4/quantization_bit: 3/' lf_qwen25_qlora.yaml >"$T/q3.yaml"
refuse qbit3 "q3.yaml:9: quantization_bit: 3: bitsandbytes quantises the base to 4 or 8 bits" \
    "$DTPLAN" estimate --config "$T/q3.yaml"
sed -e 's/^quantization_bit: 4/quantization_bit: 4\nquantization_method: hqq/' lf_qwen25_qlora.yaml >"$T/hqq.yaml"
refuse hqq "hqq.yaml:10: quantization_method: 'hqq' is not modelled \(HQQ" "$DTPLAN" estimate --config "$T/hqq.yaml"
sed -e 's/^quantization_bit: 4/quantization_bit: 8/' "$SRC/configs/training/llama3.1-8b_qlora_sft_ds3.yaml" >"$T/q8z3.yaml"
cd "$SRC" || exit 1
refuse q8z3 "q8z3.yaml:7: quantization_bit: 8 with DeepSpeed ZeRO-3 \(configs/training/ds_z3_config.json\): LLaMA-Factory loads only a 4-bit base" \
    "$DTPLAN" estimate --config "$T/q8z3.yaml"
cd "$C" || exit 1
sed -e 's/^finetuning_type: lora/finetuning_type: full/' lf_qwen25_qlora.yaml >"$T/q4.yaml"
refuse qbit "quantization_bit: 4 with finetuning_type full: a quantised base trains only adapters" \
    "$DTPLAN" estimate --config "$T/q4.yaml"
mkf frz0 "freeze_trainable_layers: 0"
refuse frz0 "frz0.yaml:[0-9]+: freeze_trainable_layers: 0 trains no block" "$DTPLAN" estimate --config "$T/frz0.yaml"
mkf frzx "freeze_extra_modules: lm_headx"
refuse frzx "frzx.yaml:[0-9]+: freeze_extra_modules lm_headx: qwen2.5-7b .* has no module 'lm_headx'" \
    "$DTPLAN" estimate --config "$T/frzx.yaml"
printf 'per_device_train_batch_size: 2\nlora_rank: 8\n' >"$T/hf_lora.yaml"
refuse hf_lora "hf_lora.yaml:2: 'lora_rank' is LLaMA-Factory's; TrainingArguments has no fine-tuning keys \(PEFT's LoraConfig" \
    "$DTPLAN" estimate --config "$T/hf_lora.yaml" --config-format hf --model gpt2
# LLaMA-Factory's stages (issue 31): rm and dpo map onto the plan's objective, every RLHF key
# used, named as not affecting the prediction, or refused with what is missing
stg() {   # stg NAME STAGE LINE...: the full-SFT example with stage STAGE, no DeepSpeed file, LINEs appended
    local n=$1
    sed -e "s/^stage: sft/stage: $2/" -e '/^deepspeed/d' lf_qwen25_full_ds3.yaml >"$T/$n.yaml"
    shift 2
    [ $# -eq 0 ] || printf '%s\n' "$@" >>"$T/$n.yaml"
}
stg dpo dpo "pref_beta: 0.2" "pref_ftx: 0.1" "dpo_label_smoothing: 0.1" "kto_chosen_weight: 1.0" "ppo_epochs: 2" "reward_model: x"
ok dpo "$DTPLAN" estimate --config "$T/dpo.yaml" --gpus 8
has dpo "stage                            line 6    used      dpo: policy, reference, pairs"
has dpo "pref_beta                        line 34   used      the plan's dpo beta (no effect on memory or time)"
has dpo "pref_ftx                         line 35   no effect an SFT term on the chosen responses' log-probs"
has dpo "kto_chosen_weight                line 37   no effect used only by stage kto (this config: dpo)"
has dpo "ppo_epochs                       line 38   no effect used only by stage ppo (this config: dpo)"
has dpo "--objective dpo --pref-loss sigmoid --pref-beta 0.2 --label-smoothing 0.1"
has dpo "dpo_label_smoothing              line 36   used      the plan's dpo label smoothing"
has dpo "objective  dpo (sigmoid loss): policy + frozen reference"
stg rm rm "pref_beta: 0.2"
ok rm "$DTPLAN" estimate --config "$T/rm.yaml" --gpus 8
has rm "pref_beta                        line 34   no effect used only by stage dpo (this config: rm)"
has rm "--objective rm --rm-head value"
has rm "objective  rm: the model + a value head (h -> 1; the LM head and its logits stay)"
stg ppo ppo "reward_model: saves/rm"
refuse ppo "stage: ppo is not modelled for LLaMA-Factory yet: its PPO .*value head on the policy's own backbone.*ppo_epochs" \
    "$DTPLAN" estimate --config "$T/ppo.yaml"
stg kto kto
refuse kto "stage: kto is not modelled yet \(KTO's unpaired .*pref_loss: kto_pair" "$DTPLAN" estimate --config "$T/kto.yaml"
stg dpoloss dpo "pref_loss: dpop"
refuse dpoloss "dpoloss.yaml:34: pref_loss: 'dpop' is not a dpo loss \(sigmoid, hinge, ipo, kto_pair, orpo or simpo\)" \
    "$DTPLAN" estimate --config "$T/dpoloss.yaml"
stg smooth dpo "pref_loss: hinge" "dpo_label_smoothing: 0.1"
refuse smooth "smooth.yaml:35: dpo_label_smoothing: only valid with pref_loss: sigmoid" "$DTPLAN" estimate --config "$T/smooth.yaml"
stg refq dpo "ref_model: Qwen/Qwen2.5-7B" "ref_model_quantization_bit: 4"
refuse refq "refq.yaml:35: ref_model_quantization_bit: a bitsandbytes-quantised reference is not modelled" \
    "$DTPLAN" estimate --config "$T/refq.yaml"
stg refshape dpo "ref_model: Qwen/Qwen2.5-0.5B"
refuse refshape "refshape.yaml:34: ref_model Qwen/Qwen2.5-0.5B \(24 layers, hidden 896, .*is not shaped as the policy qwen2.5-7b" \
    "$DTPLAN" estimate --config "$T/refshape.yaml"
stg refnone dpo "ref_model: /nonexistent/sft-out"
refuse refnone "refnone.yaml:34: ref_model: .*sft-out" "$DTPLAN" estimate --config "$T/refnone.yaml"
sed -e 's/stage: sft/stage: dpo/' -e '/^deepspeed/d' lf_qwen25_lora.yaml >"$T/reflora.yaml"
echo "ref_model: Qwen/Qwen2.5-7B" >>"$T/reflora.yaml"
refuse reflora "reflora.yaml:[0-9]+: ref_model: a separate reference beside a LoRA policy is not modelled" \
    "$DTPLAN" estimate --config "$T/reflora.yaml"
stg refsimpo dpo "pref_loss: orpo" "ref_model: Qwen/Qwen2.5-0.5B"
ok refsimpo "$DTPLAN" estimate --config "$T/refsimpo.yaml" --gpus 8
has refsimpo "ref_model                        line 35   no effect pref_loss orpo uses no reference"

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

# The data a config names (issue 31): LLaMA-Factory's one dataset as the dtrun prepare output
# DATASET_DIR/NAME, the hf format's train_file; else the plan names no data (a real vocabulary
# reads no demo text) and the report says how to give it
DTRUN=$2
mkdir -p "$T/lfdata"
"$DTRUN" prepare --tokenizer "$SRC/tests/tokenizer/data/qwen2-mini.json" --out "$T/lfdata/mysft" --format chat \
  --chat-template chatml --val-fraction 0 --quiet "$SRC/tests/data/chat.jsonl" || bad "dtrun prepare exited $?"
lfdata() {   # lfdata FILE DATASET DATASET_DIR
    printf 'model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\nfinetuning_type: full\ndataset: %s\ndataset_dir: %s\ncutoff_len: 512\nper_device_train_batch_size: 2\nmax_steps: 10\nbf16: true\n' \
        "$2" "$3" >"$1"
}
lfdata "$T/data.yaml" mysft "$T/lfdata"
ok lf_data "$DTPLAN" solve --config "$T/data.yaml" --hardware A100-80GB --mem 80G -o "$T/data-plan.json"
has lf_data "dataset mysft: the dtrun prepare output $T/lfdata/mysft is the plan's data"
has lf_data "data: dtrun prepare output $T/lfdata/mysft:"
[ "$(jq -r .data.train "$T/data-plan.json")" = "$T/lfdata/mysft/train" ] && [ "$(jq -r .data.format "$T/data-plan.json")" = llmc ] ||
    bad "the config's dataset is not the plan's data: $(jq -c .data "$T/data-plan.json")"
lfdata "$T/nodata.yaml" alpaca_en_demo "$T/lfdata"
ok lf_nodata "$DTPLAN" solve --config "$T/nodata.yaml" --hardware A100-80GB --mem 80G -o "$T/nodata-plan.json"
has lf_nodata "dataset alpaca_en_demo: $T/lfdata/alpaca_en_demo holds no dtrun prepare output, so the plan names no training data"
has lf_nodata "data: none named: qwen2.5-0.5b has a 151936-token vocabulary"
[ "$(jq -r '.data | has("train")' "$T/nodata-plan.json")" = false ] || bad "a plan without data names some: $(jq -c .data "$T/nodata-plan.json")"
# --data on the command line wins over the config's dataset
ok lf_data_cli "$DTPLAN" solve --config "$T/data.yaml" --hardware A100-80GB --mem 80G --data "$T/lfdata/mysft" -o "$T/cli-plan.json"
[ "$(jq -r .data.train "$T/cli-plan.json")" = "$T/lfdata/mysft/train" ] || bad "--data with --config: $(jq -c .data "$T/cli-plan.json")"
printf '{"train_file": "%s", "per_device_train_batch_size": 2, "max_steps": 10}\n' \
    "$T/lfdata/mysft" >"$T/hfdata.json"
ok hf_data "$DTPLAN" solve --config "$T/hfdata.json" --config-format hf --model qwen2.5-0.5b --hardware A100-80GB --mem 80G -o "$T/hf-plan.json"
has hf_data "train_file $T/lfdata/mysft: the dtrun prepare output $T/lfdata/mysft is the plan's data"
[ "$(jq -r .data.train "$T/hf-plan.json")" = "$T/lfdata/mysft/train" ] || bad "hf train_file: $(jq -c .data "$T/hf-plan.json")"

[ $fails -eq 0 ] && echo "config_cli: all checks passed"
exit $((fails > 0))
