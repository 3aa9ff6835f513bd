#!/usr/bin/env bash
# Issue 35, the planner's half: a LLaVA model (catalog or config.json) through estimate,
# solve, show, simulate and export; every term with the vision tower, projector and language
# model rows named; the stages' freezing (pretrain < sft < full); the runbook's workflow (4 GPUs,
# total batch 32 as 8 per GPU, the learning rate scaled linear / sqrt by the GPU count) as one
# solve; bad input one line, exit 2, nothing on stdout; dtrun refuses a GPU VLM plan in one line.
# usage: test_vlm_cli.sh DTPLAN DTRUN SOURCE_DIR
set -u
. "$(dirname "$0")/../lib.sh"
DTPLAN=$1 DTRUN=$2 SRC=$3 T=$(mktemp -d) fails=0
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { "$DTPLAN" "$@" >"$T/out" 2>"$T/err" || fail "dtplan $* -> exit $?: $(cat "$T/err")"; }
has() { grep -qF -- "$1" "$T/out" || fail "'$1' missing from: dtplan ${*:2}"; }
bad() { local want=$1; shift; dt_bad "$want" "$DTPLAN" "$@"; }

# the acceptance command: every term, the three parts named
ok estimate --model llava-1.5-7b --vlm-stage sft --gpus 8 --micro-batch 16
for term in "vision     clip ViT (303.51M params) 24 blocks" "576 image tokens per image x 1 = 576 of --seq 1024" \
    "stage sft trains the projector + language model (tower frozen)" "vision-language terms, stage sft" \
    "vision tower" "projector" "language model" "params" "grads" "optimizer" "activations" "buffers" "reserve" "total"; do
    has "$term" estimate sft
done
grep -qE "^  vision tower +0 +303\.51M +0\.57 GiB +0\.00 GiB +0\.00 GiB +0\.00 GiB" "$T/out" ||
    fail "sft: the frozen tower is bf16 weights only: $(grep 'vision tower' "$T/out")"
grep -qE "^  projector +20\.98M +0 " "$T/out" || fail "sft projector: $(grep '^  projector' "$T/out")"
grep -qE "^  language model +6\.74B +0 " "$T/out" || fail "sft LLM: $(grep '^  language model' "$T/out")"

# the stages: what each trains, and the totals in order (ZeRO-0 row)
row0() { grep -E "^  0   none/none" "$T/out" | awk -F'|' '{print $5}' | tr -d ' '; }
declare -A tot
for st in pretrain sft full; do
    ok estimate --model llava-1.5-7b --vlm-stage $st --gpus 8 --micro-batch 4 --seq 2048
    tot[$st]=$(row0)
    case $st in
    pretrain) grep -qE "^  language model +0 +6\.74B .* 0\.00 GiB +0\.00 GiB" "$T/out" || fail "pretrain LLM: $(grep '^  language model' "$T/out")"
              has "frozen, backward still runs through it to the image features" estimate pretrain ;;
    full) grep -qE "^  vision tower +303\.51M +0 " "$T/out" || fail "full tower: $(grep 'vision tower' "$T/out")"
          has "images x 577 tokens (patches + class), blocks 0..22" estimate full ;;
    esac
done
awk -v a="${tot[pretrain]}" -v b="${tot[sft]}" -v c="${tot[full]}" 'BEGIN { exit !(a < b && b < c) }' ||
    fail "totals not pretrain < sft < full: ${tot[pretrain]} ${tot[sft]} ${tot[full]}"
# --json carries the vision side (llava-1.5-7b's counts, 576 tokens, full: the tower's activations)
ok estimate --model llava-1.5-7b --vlm-stage full --zero-stage 0 --json
grep -qE '"vision": \{"tower": "clip", "stage": "full", "tower_params": 303507456, "projector_params": 20979712, "image_tokens_per_image": 576, "images_per_sample": 1, "tower_activation_bytes": [1-9]' \
    "$T/out" || fail "estimate --json: $(grep vision "$T/out")"
# a runtime whose peak phase holds no gradients yet (DeepSpeed at the start of backward): no part's
# row goes negative
ok estimate --model llava-1.5-7b --vlm-stage sft --gpus 8 --micro-batch 4 --zero-stage 2 --runtime deepspeed
grep -A4 "vision-language terms" "$T/out" | grep -qE " -[0-9]" && fail "deepspeed rows: $(grep -A4 'vision-language terms' "$T/out")"
# two images per sample: twice the image tokens in the same --seq
ok estimate --model llava-1.5-7b --vlm-stage sft --images-per-sample 2 --seq 2048
has "576 image tokens per image x 2 = 1152 of --seq 2048 (896 text)" estimate images 2
# LLaVA's LoRA recipe: LoRA on the language model + the projector trained whole
ok estimate --model llava-1.5-7b --vlm-stage sft --finetune lora --lora-rank 128 --lora-alpha 256 --gpus 8
grep -qE "^  projector +20\.98M" "$T/out" || fail "lora: projector: $(grep '^  projector' "$T/out")"
has "adapter weights" estimate lora
ok solve --model llava-1.5-7b --vlm-stage sft --finetune lora --lora-rank 128 --lora-alpha 256 --gpus 8 --mem 80G \
    --seq 2048 -o "$T/lora.json"
ok export --deepspeed "$T/lora.json" -o "$T/ds-lora.json"
has "--lora_enable True --lora_r 128 --lora_alpha 256" export lora
# a LLaVA config.json as --model, and the same numbers as the catalog's
cp "$SRC/models/catalog/llava-1.5-7b.json" "$T/config.json"
ok estimate --model "$T/config.json" --vlm-stage sft --gpus 8 --micro-batch 16
grep -E "^  0   none/none" "$T/out" >"$T/a"
ok estimate --model llava-1.5-7b --vlm-stage sft --gpus 8 --micro-batch 16
grep -E "^  0   none/none" "$T/out" >"$T/b"
cmp -s "$T/a" "$T/b" || fail "config.json and catalog differ: $(cat "$T/a" "$T/b")"

# the runbook's workflow: one solve (docs/vlm.md)
for rule in linear:0.0016 sqrt:0.0008; do
    ok solve --config "$SRC/configs/training/vlm_pretrain.yaml" --vlm-stage pretrain --gpus 4 --global-batch 32 \
        --lr-scaling "${rule%%:*}" --mem 80G --seq 2048 -o "$T/plan.json"
    has "learning rate: global batch 32 (the config's 8): linear scaling 0.0016, square-root 0.0008; the plan keeps ${rule##*:}" solve $rule
    has "vision: clip ViT" solve $rule
    grep -qE "chosen: .*micro-batch [0-9]+ x accumulation [0-9]+" "$T/out" || fail "solve: $(grep chosen "$T/out")"
    grep -qF "\"lr\": ${rule##*:}," "$T/plan.json" || fail "plan lr: $(grep '"lr"' "$T/plan.json")"
done
grep -qF '"stage": "pretrain"' "$T/plan.json" || fail "plan.json has no model.vision stage"
grep -qF '"image_size": 336' "$T/plan.json" || fail "plan.json has no model.vision"
# micro x accumulation x 4 = 32, with 8 per GPU when it fits (accumulation only when it does not)
micro=$(grep -oE '"micro_batch": [0-9]+' "$T/plan.json" | grep -oE '[0-9]+')
accum=$(grep -oE '"grad_accum": [0-9]+' "$T/plan.json" | grep -oE '[0-9]+')
[ $((micro * accum * 4)) -eq 32 ] || fail "batch split: micro $micro x accum $accum x 4 != 32"
ok show "$T/plan.json"
has "vision-language terms, stage pretrain" show
ok simulate "$T/plan.json"
has "vision          clip ViT" simulate
ok export --deepspeed "$T/plan.json" -o "$T/ds.json" --slurm "$T/launch.slurm"
has "--tune_mm_mlp_adapter True" export
has "--mm_vision_select_layer -2" export
has "# dtrun: trains VLM plans on the CPU in fp32 only, ZeRO 0-2" export
grep -qF -- "--tune_mm_mlp_adapter True" "$T/launch.slurm" || fail "sbatch lacks the stage's arguments"
grep -qF '"train_batch_size": 32' "$T/ds.json" || fail "ds config batch: $(head -3 "$T/ds.json")"

# nothing fits: the cheaper method's command keeps the stage and the images
"$DTPLAN" solve --model llava-1.5-13b --vlm-stage sft --images-per-sample 2 --mem 24G --gpus 1 --seq 2048 >"$T/out" 2>"$T/err"
# (dtrun keeps a frozen base whole, so the cheapest method may be lora or qlora: docs/finetune.md)
grep -qE -- "dtplan solve --model llava-1.5-13b --vlm-stage sft --images-per-sample 2 --mem 24G --gpus 1 --seq 2048 --finetune q?lora" \
    "$T/err" || fail "solve hint: $(cat "$T/err")"

# dtrun trains VLM plans on the CPU only (tests/dist/test_vlm_dtrun.sh): this GPU plan is one line, exit 2
dt_bad "plans a vision-language model (clip tower, stage pretrain): vlm: dtrun's vision-language engine runs on the CPU only" \
  "$DTRUN" "$T/plan.json"

# bad input
bad "gpt2 is a text model" estimate --model gpt2 --vlm-stage sft
bad "qwen3-0.6b is a text model" solve --model qwen3-0.6b --images-per-sample 2 --mem 80G
bad "--images-per-sample '0': a sample holds at least one image" estimate --model llava-1.5-7b --images-per-sample 0
bad "--vlm-stage 'stage2': not a stage" estimate --model llava-1.5-7b --vlm-stage stage2
bad "--finetune lora has nothing to train there" estimate --model llava-1.5-7b --vlm-stage pretrain --finetune lora
bad "holds no text beside 1152 image tokens" estimate --model llava-1.5-7b --images-per-sample 2 --seq 1024
printf '{"model_type": "llava", "text_config": {"model_type": "llama"}}\n' >"$T/novision.json"
bad "needs a 'vision_config' object" estimate --model "$T/novision.json"
printf '{"model_type": "llava", "vision_config": {"hidden_size": 1024, "patch_size": 14}}\n' >"$T/partial.json"
bad "vision_config has no 'image_size'" estimate --model "$T/partial.json"
sed 's/"stage": "pretrain"/"stage": "stage1"/' "$T/plan.json" >"$T/badstage.json"
bad "stage" show "$T/badstage.json"

# CPU ranks under dtrun: solve keeps to what dtrun's VLM trainer runs (ZeRO 0-2, no offload, no
# TP layout weighed by default), so a default solve over 2 ranks gives a plan dtrun trains
jq '.text_config.vocab_size = 1536 | .image_token_index = 1500' "$SRC/models/catalog/llava-tiny.json" >"$T/tiny.json"
ok solve --model "$T/tiny.json" --vlm-stage pretrain --hardware cpu --mem 2G --seq 96 --gpus 2 --precision fp32 \
    -o "$T/cpu2.json"
has "ZeRO-3         not in dtrun's VLM trainer yet" solve cpu 2 ranks
st=$(jq -r '.parallel.zero_stage' "$T/cpu2.json") oo=$(jq -r '.parallel.offload_optimizer' "$T/cpu2.json")
{ [ "$st" -le 2 ] && [ "$oo" = none ] && ! jq -e '.layout' "$T/cpu2.json" >/dev/null; } ||
    fail "cpu VLM solve: stage $st, offload $oo, layout $(jq -c '.layout' "$T/cpu2.json")"
bad "dtrun's VLM trainer runs ZeRO 0-2" solve --model "$T/tiny.json" --vlm-stage sft --hardware cpu --mem 2G \
    --seq 96 --stages 3 -o "$T/cpu3.json"
[ -e "$T/cpu3.json" ] && fail "refused --stages 3 wrote a plan"

[ $fails -eq 0 ] && echo ok
exit $((fails > 0))
