#!/bin/sh
# Issue 33 (planner half): --objective pt|sft|rm|dpo|grpo|ppo in estimate: every model's rows,
# the reference's ZeRO-3 partitioning, LoRA / precompute-ref dropping the reference, GRPO's
# generation terms, and bad input: one line, exit 2.
set -u
DTPLAN="$1"
DTRUN="$2"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
M="--model qwen2.5-7b --gpus 8 --runtime deepspeed"

out=$("$DTPLAN" estimate $M --objective dpo --mem 80GiB) || fail "dpo estimate failed"
echo "$out" | grep -q '^  policy      weights' || fail "dpo: no policy row"
echo "$out" | grep -q '^  reference   weights' || fail "dpo: no reference row"
echo "$out" | grep -q '2 x micro-batch sequences' || fail "dpo: pairs not named"
# the reference replicated at ZeRO-1 and partitioned at ZeRO-3: params column grows by N pb resp. N pb / W
base1=$("$DTPLAN" estimate $M --zero-stage 1 --micro-batch 2 | awk '$1==1 && $2=="none/none" {print $4}')
dpo1=$("$DTPLAN" estimate $M --zero-stage 1 --objective dpo | awk '$1==1 && $2=="none/none" {print $4}')
awk -v a="$base1" -v b="$dpo1" 'BEGIN { exit !(b - a > 14.1 && b - a < 14.3) }' || fail "ZeRO-1 reference not 14.19 GiB: $base1 -> $dpo1"
base3=$("$DTPLAN" estimate $M --zero-stage 3 --micro-batch 2 | awk '$1==3 && $2=="none/none" {print $4}')
dpo3=$("$DTPLAN" estimate $M --zero-stage 3 --objective dpo | awk '$1==3 && $2=="none/none" {print $4}')
awk -v a="$base3" -v b="$dpo3" 'BEGIN { exit !(b - a > 1.7 && b - a < 1.8) }' || fail "ZeRO-3 reference not 1.77 GiB: $base3 -> $dpo3"
# no reference when precomputed, or for a LoRA policy (adapters off)
"$DTPLAN" estimate $M --objective dpo --precompute-ref | grep -q '^  reference' && fail "precompute-ref kept a reference"
"$DTPLAN" estimate $M --objective dpo --finetune lora | grep -q '^  reference' && fail "lora kept a reference"
# ... but the reference's forward still runs for a LoRA policy (adapters off): none when precomputed
# or for a reference-free loss (simpo)
rf() { "$DTPLAN" estimate $M "$@" --json | sed -n 's/.*"ref_fwd_s": \([^,]*\),.*/\1/p'; }
lora_rf=$(rf --objective dpo --finetune lora) pre_rf=$(rf --objective dpo --precompute-ref) simpo_rf=$(rf --objective dpo --pref-loss simpo)
awk -v a="$lora_rf" -v b="$pre_rf" -v c="$simpo_rf" 'BEGIN { exit !(a > 0 && b == 0 && c == 0) }' ||
    fail "reference forwards: lora $lora_rf (want > 0), precomputed $pre_rf, simpo $simpo_rf (want 0)"
# grpo: generation rows; beta 0 holds no reference, beta > 0 does
out=$("$DTPLAN" estimate $M --objective grpo --num-generations 8 --micro-batch 8 --zero-stage 3 --kl-coef 0.04) || fail "grpo failed"
for r in "policy      weights" "reference   weights" "generation  KV cache" "generation  logits" "generation  gathered" "generation  phase"; do
    echo "$out" | grep -q "^  $r" || fail "grpo: no '$r' row"
done
# KV cache = 2 L kv d bytes x seq x sequences = 2*28*4*128*2*1024*8 = 469762048 B
"$DTPLAN" estimate $M --objective grpo --micro-batch 8 --zero-stage 3 --json | grep -q '"kv_cache_bytes": 469762048' || fail "grpo KV cache"
"$DTPLAN" estimate $M --objective grpo --micro-batch 8 | grep -q '^  reference' && fail "grpo beta 0 kept a reference"
# decode, memory-bound: per token (N pb + KV per token x (P + C/2) x S) / (mem_bw x 0.88), C tokens;
# N = 7615616512 (Qwen2.5-7B), P = C = 512, S = 8, mem_bw from the H100 profile
SRC="$3"
bw=$(sed -n 's/.*"mem_bw": *\([0-9.e+]*\).*/\1/p' "$SRC/configs/hardware/H100-SXM-80GB.json")
dec=$("$DTPLAN" estimate $M --objective grpo --micro-batch 8 --json | sed -n 's/.*"decode_s": \([0-9.e+-]*\).*/\1/p')
awk -v bw="$bw" -v d="$dec" 'BEGIN { w = 7615616512 * 2; kv = 57344 * (512 + 256) * 8;
    e = 512 * (w + kv) / (bw * 0.88); r = d / e - 1; exit !(r < 1e-4 && r > -1e-4) }' || fail "decode time $dec s, bw $bw"
# grpo --num-iterations 4: one rollout per 4 steps, a quarter of its prefill and decode per step
# (the JSON prints 6 significant digits: 1e-5)
dec4=$("$DTPLAN" estimate $M --objective grpo --micro-batch 8 --num-iterations 4 --json |
    sed -n 's/.*"decode_s": \([0-9.e+-]*\).*/\1/p')
awk -v d="$dec" -v q="$dec4" 'BEGIN { r = 4 * q / d - 1; exit !(q > 0 && r < 1e-5 && r > -1e-5) }' ||
    fail "num-iterations 4: decode $dec4 s per step, not $dec / 4"
# a separate generation engine holds F x device memory and the KV cache inside it
"$DTPLAN" estimate $M --objective ppo --gen-mem-fraction 0.5 --json | grep -q '"gen_engine_bytes": 42949672960, "ref_fwd_s"' ||
    fail "gen-mem-fraction 0.5 of 80 GiB"
out=$("$DTPLAN" estimate $M --objective ppo --zero-stage 3) || fail "ppo failed"
for r in "actor       weights" "critic      optimizer" "reward      weights" "reference   weights"; do
    echo "$out" | grep -q "^  $r" || fail "ppo: no '$r' row"
done
# pt / sft print no objective rows
"$DTPLAN" estimate $M --objective sft | grep -q '^models (' && fail "sft printed model rows"

bad() {
    err=$("$DTPLAN" estimate $M "$@" 2>&1 >/dev/null); rc=$?
    [ "$rc" = 2 ] || fail "$* exited $rc, not 2"
    [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] || fail "$*: not one line: $err"
    printf '%s\n' "$err" | grep -q "$BADWORD" || fail "$*: message lacks '$BADWORD': $err"
}
BADWORD="unknown objective" bad --objective foo
BADWORD="does not divide" bad --objective grpo --num-generations 3
BADWORD="dpo setting" bad --objective grpo --precompute-ref
BADWORD="grpo / ppo setting" bad --objective dpo --num-generations 4
BADWORD="ppo setting" bad --objective grpo --placement split
BADWORD="max-completion-length" bad --objective grpo --max-completion-length 4096
BADWORD="needs --objective" bad --precompute-ref
BADWORD="one completion" bad --objective ppo --num-generations 4

# solve keeps the objective in the plan's optional section; show, simulate, export and report read it
"$DTPLAN" solve --mem 80G $M --objective dpo -o "$T/dpo.json" >"$T/solve.txt" || fail "solve --objective dpo failed"
grep -q '^objective: dpo' "$T/solve.txt" || fail "solve did not name the objective"
grep -q '"kind": "dpo"' "$T/dpo.json" || fail "plan lacks objective.kind"
"$DTPLAN" show "$T/dpo.json" | grep -q '^  reference   weights' || fail "show: no reference row"
"$DTPLAN" simulate "$T/dpo.json" | grep -q '^phases .*reference/reward/critic forwards' || fail "simulate: no phases line"
"$DTPLAN" export --deepspeed "$T/dpo.json" -o "$T/ds.json" 2>&1 | grep -q 'TRL DPOConfig' || fail "export: no TRL line"
"$DTPLAN" solve --mem 80G $M --objective grpo --num-generations 4 --global-batch 16 -o "$T/grpo.json" >/dev/null || fail "solve grpo"
"$DTPLAN" simulate "$T/grpo.json" | grep -q 'generation [0-9.]* ms (prefill' || fail "simulate grpo: no generation phase"
# the whole rollout (64 completions of 8192 tokens per GPU: 28 GiB of KV cache) does not fit in 30 GiB:
# solve picks the largest generation micro-batch that does, and the plan carries it
"$DTPLAN" solve --mem 30G $M --objective grpo --seq 8192 --max-completion-length 4096 --global-batch 512 \
    -o "$T/gen.json" >"$T/gen.txt" || fail "solve grpo at 30G"
grep -q '^generation: [0-9]* sequences decoded at once' "$T/gen.txt" || fail "solve did not pick a generation micro-batch"
gb=$(sed -n 's/.*"gen_batch": \([0-9]*\).*/\1/p' "$T/gen.json")
[ "$gb" -ge 1 ] && [ "$gb" -lt 64 ] || fail "plan gen_batch '$gb'"
"$DTPLAN" solve --mem 30G $M --objective grpo --seq 8192 --max-completion-length 4096 --global-batch 512 --gen-batch 64 \
    >/dev/null 2>&1 && fail "an explicit --gen-batch 64 was overridden to fit"
# a plan without the section has none after a round trip; a hand-edited section is strict
"$DTPLAN" solve --mem 80G $M -o "$T/sft.json" >/dev/null || fail "solve without objective"
grep -q '"objective"' "$T/sft.json" && fail "a default plan carries an objective section"
sed 's/"precompute_ref": false/"precompute_ref": false, "beta": 1/' "$T/dpo.json" >"$T/badkey.json"
err=$("$DTPLAN" show "$T/badkey.json" 2>&1 >/dev/null); rc=$?
[ "$rc" = 2 ] && printf '%s\n' "$err" | grep -q 'beta' || fail "unknown objective key not refused ($rc): $err"
sed 's/"kind": "dpo"/"kind": "auto"/' "$T/dpo.json" >"$T/auto.json"
"$DTPLAN" show "$T/auto.json" 2>&1 | grep -q 'carry no objective section' || fail "kind auto accepted"
# dtrun refuses what its engine cannot train yet (ppo), one line
"$DTPLAN" solve --mem 4G --model gpt2-tiny --gpus 1 --hardware cpu --objective ppo \
    --max-completion-length 16 -o "$T/cpu-ppo.json" >/dev/null || fail "solve a cpu ppo plan"
err=$("$DTRUN" "$T/cpu-ppo.json" 2>&1); rc=$?
[ "$rc" = 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && printf '%s\n' "$err" | grep -q 'objective.kind' ||
    fail "dtrun ran a ppo plan ($rc): $err"
# grpo in a precision dtrun's grpo does not train (fp32 only), one line
"$DTPLAN" solve --mem 4G --model gpt2-tiny --gpus 1 --hardware cpu --objective grpo --num-generations 4 \
    --max-completion-length 16 -o "$T/cpu-grpo.json" >/dev/null || fail "solve a cpu grpo plan"
err=$("$DTRUN" "$T/cpu-grpo.json" 2>&1); rc=$?
[ "$rc" = 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && printf '%s\n' "$err" | grep -q 'fp32' ||
    fail "dtrun ran a mixed-precision grpo plan ($rc): $err"
# a dpo plan trains pairs: on text data, one line naming the command that makes them
"$DTPLAN" solve --mem 4G --model gpt2-tiny --gpus 1 --hardware cpu --objective dpo -o "$T/cpu.json" >/dev/null ||
    fail "solve a cpu dpo plan"
err=$("$DTRUN" "$T/cpu.json" --out "$T/dpo-out" 2>&1); rc=$?
[ "$rc" = 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && printf '%s\n' "$err" | grep -q 'prepare --format pairs' ||
    fail "dtrun on a dpo plan with text data ($rc): $err"
echo "PASS"
