#!/usr/bin/env bash
# Issue 32, the planner's half: --finetune full|freeze|lora|qlora in estimate, solve,
# simulate, show, export and report's prediction; every term printed; solve keeps the
# method and, when nothing fits, names the first cheaper method that does with a command
# that works; bad settings are one line, exit 2, nothing on stdout; dtrun refuses a
# fine-tuning plan it cannot train; a plan without the method is unchanged.
# usage: test_finetune_cli.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTPLAN=$1 DTRUN=$2 T=$(mktemp -d) fails=0
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { "$DTPLAN" "$@" >"$T/out" 2>"$T/err" || fail "dtplan $* -> exit $?: $(cat "$T/err")"; }
has() { grep -qF -- "$1" "$T/out" || fail "'$1' missing from: dtplan ${*:2}"; }

# the acceptance commands
ok estimate --model llama-3.1-8b --finetune qlora --lora-rank 16 --gpus 1
for term in "finetune   qlora r 16 alpha 32" "frozen weights" "adapter weights" "adapter gradients" \
    "adapter optimizer" "activations" "not kept: early blocks" "not kept: frozen" "LoRA x A^T" "LoRA dropout" \
    "fp32 logits" "dequantised weight" "buffers" "reserve" "total" "backward reaches blocks 0..31 of 32"; do
    has "$term" estimate qlora
done
# the frozen base: 6.98B linear weights in NF4 + double quantisation, 1.05B bf16: 5.31 GiB
grep -E "frozen weights +5\.3[0-9] GiB" "$T/out" >/dev/null || fail "qlora frozen weights: $(grep 'frozen weights' "$T/out")"
ok solve --mem 24G --model qwen2.5-7b --finetune lora
has "finetune: lora r 8 alpha 16 dropout 0 on all: 20.19M trainable" solve lora
has "chosen: " solve lora
grep -qE "per GPU total [0-9.]+ GiB of 24.00 GiB" "$T/out" || fail "solve lora: no total: $(cat "$T/out")"

# --json carries the method and its group sums (frozen bytes: 6.98B NF4 + DQ, 1.05B bf16)
ok estimate --model llama-3.1-8b --finetune qlora --zero-stage 0 --json
grep -qE '"finetune": \{"method": "qlora", "trained": 0, "adapter": 20971520, "frozen": 8030261248, "frozen_bytes": 5702540160' \
    "$T/out" || fail "estimate --json: $(grep finetune "$T/out")"

# the method changes what it should, against full fine-tuning of the same model
"$DTPLAN" estimate --model llama-2-7b --zero-stage 0 --json >"$T/full.json" || fail "estimate full"
"$DTPLAN" estimate --model llama-2-7b --zero-stage 0 --json --finetune lora --lora-target q_proj,v_proj \
    >"$T/lora.json" || fail "estimate lora"
total() { grep -oE '"total": [0-9]+' "$1" | head -n 1 | grep -oE '[0-9]+'; }
[ "$(total "$T/lora.json")" -lt "$(total "$T/full.json")" ] || fail "lora q,v total not below full's"
ok estimate --model llama-2-7b --zero-stage 0 --finetune freeze --trainable-layers 2
has "freeze, the last 2 blocks trained" estimate freeze
has "backward reaches blocks 30..31 of 32" estimate freeze
has "not kept: early blocks" estimate freeze
grep -E "not kept: early blocks +0\.00 GiB" "$T/out" >/dev/null && fail "freeze: nothing skipped below block 30"

# solve keeps the method; show, simulate, export and estimate --plan read it back
ok solve --mem 40G --model qwen3-0.6b --gpus 2 --finetune qlora --lora-rank 32 --lora-dropout 0.05 -o "$T/q.json"
grep -q '"method": "qlora"' "$T/q.json" || fail "solve -o: no finetune section"
ok show "$T/q.json"
has "finetune     qlora r 32" show
has "fine-tuning terms" show
ok simulate "$T/q.json"
has "finetune        qlora r 32" simulate
ok export --deepspeed "$T/q.json" -o "$T/ds.json"
has 'LoraConfig(r=32, lora_alpha=64, lora_dropout=0.05, target_modules="all-linear"' export
has 'bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True' export
ok estimate --plan "$T/q.json"
has "the plan's stored memory prediction matches this estimate" estimate --plan
ok simulate "$T/q.json" --finetune lora --lora-rank 8
has "finetune        lora r 8" simulate --finetune lora

# a plan without the method: no section, no line
ok solve --mem 40G --model qwen3-0.6b -o "$T/full.json"
grep -q finetune "$T/full.json" && fail "a full plan carries a finetune section"
grep -q "^finetune" "$T/out" && fail "solve printed a finetune line for a full plan"

# nothing fits full: the one line names lora and a command that works
"$DTPLAN" solve --mem 24G --model llama-3.1-8b --no-offload >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 2 ] || fail "infeasible full: exit $rc"
[ "$(wc -l <"$T/err")" -eq 1 ] || fail "infeasible: not one line: $(cat "$T/err")"
grep -qF -- "--finetune lora fits at micro-batch" "$T/err" || fail "infeasible: no cheaper method: $(cat "$T/err")"
cmd=$(sed -n 's/.*: dtplan \(solve .*--finetune lora\)$/\1/p' "$T/err")
[ -n "$cmd" ] || fail "infeasible: no command in: $(cat "$T/err")"
# shellcheck disable=SC2086
[ -n "$cmd" ] && { "$DTPLAN" $cmd >"$T/out" 2>&1 || fail "the suggested 'dtplan $cmd' fails: $(cat "$T/out")"; }

# bad settings: one line, exit 2, nothing on stdout
bad() {
    local want=$1
    shift
    "$DTPLAN" "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    [ $rc -eq 2 ] || fail "dtplan $* -> exit $rc (want 2)"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "dtplan $* -> not one line: $(cat "$T/err")"
    [ -s "$T/out" ] && fail "dtplan $* -> wrote to stdout"
    grep -qF -- "$want" "$T/err" || fail "dtplan $* -> '$(cat "$T/err")' lacks '$want'"
}
bad "--lora-rank 0" estimate --model llama-tiny --finetune lora --lora-rank 0
bad "above min(in, out) = 32" estimate --model llama-tiny --finetune lora --lora-rank 33
bad "--lora-target c_attn: llama-3.1-8b (llama family) has no linear 'c_attn'" \
    solve --mem 80G --model llama-3.1-8b --finetune lora --lora-target q_proj,c_attn
bad "--lora-target q_proj: gpt2 (gpt2 family)" estimate --model gpt2 --finetune lora --lora-target q_proj
bad "--trainable-layers 40: llama-3.1-8b has 32 blocks" estimate --model llama-3.1-8b --finetune freeze --trainable-layers 40
bad "--trainable-layers -33" solve --mem 80G --model llama-3.1-8b --finetune freeze --trainable-layers -33
bad "--trainable-modules attn" estimate --model llama-tiny --finetune freeze --trainable-modules attn
# layouts (TP / CP / PP) are modelled for full fine-tuning: solve plans a method with DP x ZeRO
# where it would weigh layouts by default, and refuses --layouts with one
bad "--layouts with --finetune lora" solve --mem 80G --model llama-3.1-8b --gpus 16 --nodes 2 --finetune lora --layouts
ok solve --mem 80G --model llama-3.1-8b --gpus 16 --nodes 2 --global-batch 64 --finetune lora
grep -q "^layouts weighed" "$T/out" && fail "solve --finetune lora over 2 nodes weighed layouts"
grep -q "^chosen: ZeRO" "$T/out" || fail "solve --finetune lora over 2 nodes chose no DP x ZeRO plan: $(cat "$T/out")"
bad "--lora-rank belongs to --finetune lora or qlora" estimate --model gpt2 --lora-rank 8
bad "--quant belongs to --finetune qlora" estimate --model gpt2 --finetune lora --quant nf4
bad "--quant 'bf16'" estimate --model gpt2 --finetune qlora --quant bf16
bad "--finetune 'dora'" estimate --model gpt2 --finetune dora
bad "LoRA dropout 1.5 is not in [0, 1)" estimate --model gpt2 --finetune lora --lora-dropout 1.5
bad "--double-quant 'yes'" estimate --model gpt2 --finetune qlora --double-quant yes
bad "--finetune given twice" estimate --model gpt2 --finetune lora --finetune qlora
bad "fine-tuning options cannot be combined" estimate --plan "$T/q.json" --finetune lora

# a plan whose method the model cannot take (hand-edited): show and estimate --plan refuse it
sed 's/"all"/"c_attn"/' "$T/q.json" >"$T/bad.json"
bad "--lora-target c_attn" show "$T/bad.json"
bad "--lora-target c_attn" estimate --plan "$T/bad.json"

# dtrun trains full and freeze plans; a qlora plan is refused, nothing started
"$DTRUN" "$T/q.json" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 2 ] || fail "dtrun on a qlora plan: exit $rc: $(cat "$T/err")"
grep -qF "plans a qlora fine-tune" "$T/err" || fail "dtrun: $(cat "$T/err")"

[ $fails -eq 0 ] && echo ok
exit $((fails > 0))
