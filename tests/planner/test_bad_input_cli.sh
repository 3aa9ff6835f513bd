#!/usr/bin/env bash
# Issue 16, "nothing bad gets in": every bad input to dtplan is refused with exit 2,
# nothing on stdout (nothing half-written), exactly one "dtplan: ..." line on stderr
# that contains the option or file at fault, and whose hints name only options that
# exist in that command's --help. Then: the hints given really work, FIFOs and
# devices never block or fill memory, and a huge --global-batch fails fast.
# usage: test_bad_input_cli.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTPLAN=$1 SRC=$3 T=$(mktemp -d) fails=0 n=0
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

for c in estimate solve show export simulate compare report validate; do "$DTPLAN" "$c" --help >"$T/help.$c" 2>&1; done

# bad WANT CMD ARGS...: the checks above; WANT is a fixed string the line must contain
bad() {
    local want=$1 cmd=$2
    shift
    n=$((n + 1))
    timeout 20 "$DTPLAN" "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    local line
    line=$(head -n 1 "$T/err")
    [ $rc -eq 2 ] || { fail "dtplan $* -> exit $rc (want 2): $(cat "$T/err")"; return; }
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "dtplan $* -> stderr is not one line: $(cat "$T/err")"
    [ -s "$T/out" ] && fail "dtplan $* -> wrote to stdout before failing: $(head -c 200 "$T/out")"
    case "$line" in "dtplan: "*) ;; *) fail "dtplan $* -> no 'dtplan: ' prefix: $line" ;; esac
    grep -qF -- "$want" "$T/err" || fail "dtplan $* -> '$line' lacks '$want'"
    # options the message names (outside quoted user text) must exist in this command
    local f
    for f in $(sed "s/'[^']*'//g" "$T/err" | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u); do
        [ "$f" = --help ] && continue   # every command has it
        grep -qE -- "(^|[^a-z-])$f([^a-z-]|$)" "$T/help.$cmd" ||
            fail "dtplan $* -> hint names $f, which 'dtplan $cmd --help' does not list: $line"
    done
    # the same prefix twice ("--units: --units: ...") is noise
    echo "$line" | grep -qE -- '(--[a-z-]+: )\1' && fail "dtplan $* -> repeated prefix: $line"
    # a hint for another option's value ("--gpus 0 ... e.g. 32B")
    case "$*" in *--params*) ;; *) grep -qF 'e.g. 32B' "$T/err" && fail "dtplan $* -> --params' example in: $line" ;; esac
}

plan=$SRC/configs/plans/tiny-cpu.json
P="--params 7B"

# ---- 1. a size without a unit, for every size option ----
bad "--mem: '80' has no unit; write 80G (GiB) or 80GB (10^9 bytes)" estimate $P --mem 80
bad "--mem: '80' has no unit" solve $P --mem 80
bad "--host-mem: '512' has no unit; write 512G" solve $P --mem 80G --host-mem 512
bad "--nvme: '2' has no unit" solve $P --mem 80G --nvme 2
bad "--mem" solve $P --mem 80X
bad "--sub-group-size" solve $P --mem 80G --sub-group-size 5X
bad "--sub-group-size" estimate $P --sub-group-size 0
bad "--nvme-path: longer than 511 bytes" solve $P --mem 80G --nvme-path "$(printf 'd%.0s' $(seq 600))"
echo '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "sub_group_size": 1e8}}' >"$T/sg.json"
bad "give it in one place" estimate $P --deepspeed "$T/sg.json" --sub-group-size 5e7
bad "--mem" estimate $P --mem 0G

# ---- 2. --mem above the device's memory ----
bad "--mem 100G is above the 80.00 GiB per device of hardware profile H100-SXM-80GB; give --mem 80G or less, or --hardware H200" \
    estimate $P --mem 100G
bad "--mem 81G is above the 80.00 GiB" solve $P --mem 81G
bad "give --mem 141GB or less" solve $P --mem 200G --hardware H200
bad "--mem 5G is above the 4.00 GiB per device of hardware profile cpu; give --mem 4G or less" estimate --plan "$plan" --mem 5G
grep -qF -- '--hardware' "$T/err" && fail "with --plan the --mem hint must not suggest --hardware: $(cat "$T/err")"

# ---- 3. --stages ----
for s in "1," ",1" "1,,2" "1,1" "4" "0,4" "a" "2 ,3" "23"; do
    bad "--stages '$s'" solve $P --mem 80G --stages "$s"
done
bad "--stages: empty value (e.g. --stages 2,3)" solve $P --mem 80G --stages ""

# ---- 5. inputs that are not regular files, or too large ----
mkfifo "$T/fifo.json"
mkdir "$T/dir.json"
truncate -s 65M "$T/huge.json"
for f in "$T/fifo.json" /dev/zero "$T/dir.json"; do
    bad "--plan: $f: is " estimate --plan "$f"
    bad "--deepspeed: $f: is " estimate $P --deepspeed "$f"
    bad "--model: $f: is " estimate --model "$f"
    bad "--hardware: $f: is " solve $P --mem 80G --hardware "$f"
    bad "$f: is " show "$f"
    bad "$f: is " export --deepspeed "$f"
    bad "$f: is " simulate "$f"
    bad "$f: is " compare "$f" "$f"
done
bad "/dev/zero: is a character device, not a regular file" show /dev/zero
bad "is a FIFO, not a regular file" estimate --plan "$T/fifo.json"
bad "is a directory, not a regular file" show "$T/dir.json"
bad "'$T/huge.json' is larger than the 64 MiB this input may have" estimate --plan "$T/huge.json"
bad "is larger than the 64 MiB" estimate $P --deepspeed "$T/huge.json"

# ---- 4. JSON that RFC 8259 rejects, in every kind of input file ----
printf '{"format": "dtplan.plan/1", "model": {"n_layer": 01}}' >"$T/lead0.json"
bad "$T/lead0.json:1:50: invalid JSON near '01}}': a number with a leading zero" show "$T/lead0.json"
printf '{"train_micro_batch_size_per_gpu": 1,}' >"$T/comma.json"
bad "--deepspeed: $T/comma.json:1:38: invalid JSON near '}': a trailing comma" estimate $P --deepspeed "$T/comma.json"
printf '{"model_type": "gpt2", "n_embd": 64 /* c */}' >"$T/cfg.json"
bad "--model: cfg:1:37: invalid JSON near '/* c */}': comments are not JSON" estimate --model "$T/cfg.json"
printf '{"format": "dtplan.hardware/1", "name": "x\ty"}' >"$T/hw.json"
bad "raw control character U+0009 inside a string" solve $P --mem 80G --hardware "$T/hw.json"
printf '{"traceEvents": [NaN]}' >"$T/tr.json"
bad "$T/tr.json:1:18: invalid JSON near 'NaN]}': NaN and Infinity are not JSON numbers" compare "$T/tr.json" "$T/tr.json"

# ---- 6. a huge --global-batch fails fast, naming the flag to lower ----
start=$(date +%s)
bad "lower --global-batch to 524288 or less" solve $P --mem 80G --gpus 8 --global-batch 1000000000000
[ $(($(date +%s) - start)) -le 5 ] || fail "solve --global-batch 1e12 took $(($(date +%s) - start)) s"
bad "--global-batch 10 is not a multiple of the world size 4 (--gpus)" solve $P --mem 80G --gpus 4 --global-batch 10

# ---- 7. plans that would silently behave differently ----
edit() { # OUT PYTHON-STATEMENTS: a copy of tiny-cpu.json with p edited
    python3 - "$plan" "$1" "$2" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
}
if command -v python3 >/dev/null; then
    edit "$T/untied.json" 'p["model"]["tied_embeddings"] = False'
    bad "tied_embeddings = false, but gpt2 always ties lm_head to wte" show "$T/untied.json"
    edit "$T/bytes.json" 'p["precision"]["bytes_per_param"]["grad"] = 2'
    bad "\$.precision.bytes_per_param.grad = 2 contradicts \$.precision.grad = \"fp32\"" show "$T/bytes.json"
    edit "$T/scale.json" 'p["precision"]["loss_scale"] = 0'
    bad "precision.loss_scale = 0, initial_scale_power = 0 contradict precision.preset = fp32" show "$T/scale.json"
    edit "$T/master.json" 'p["precision"]["master"] = "bf16"'
    bad "precision.master = bf16 contradicts precision.has_master = false" estimate --plan "$T/master.json"
fi

# ---- 8. DeepSpeed configs with nonsense values ----
ds() { printf '%s' "$2" >"$T/$1.json"; }
ds stage7 '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 7}}'
bad "--deepspeed: $T/stage7.json: \$.zero_optimization.stage: 7: Maximum supported ZeRO stage is 3" estimate $P --deepspeed "$T/stage7.json"
ds negb '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "reduce_bucket_size": -1}}'
bad "reduce_bucket_size: expected an integer >= 1" estimate $P --deepspeed "$T/negb.json"
ds lr0 '{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0}}}'
bad "\$.optimizer.params.lr: expected a number > 0" estimate $P --deepspeed "$T/lr0.json"
ds mb0 '{"train_micro_batch_size_per_gpu": 0}'
bad "Micro batch size per gpu: 0 has to be greater than 0" estimate $P --deepspeed "$T/mb0.json"
ds tb '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8}'
bad "32 != 4 * 8 * 8 (world_size is dtplan's --gpus: use --gpus 1 with this config" estimate $P --gpus 8 --deepspeed "$T/tb.json"
ds off '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}'
bad "ds zero_optimization.offload_optimizer.device=none vs --offload-optimizer cpu mismatch" \
    estimate $P --deepspeed "$T/off.json" --offload-optimizer cpu

# ---- 9. HF config.json keys that change the architecture ----
hf() { printf '{"model_type": "%s", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256, "max_position_embeddings": 128, %s}' "$2" "$3" >"$T/$1.json"; }
hf sw qwen2 '"use_sliding_window": true, "sliding_window": 64'
bad "--model: sw: config.json 'sliding_window': 64 with 'use_sliding_window': true is not modelled" estimate --model "$T/sw.json"
hf moe llama '"num_local_experts": 8'
bad "'num_local_experts': 8 (a mixture of experts) is not modelled" estimate --model "$T/moe.json"
hf yarn llama '"rope_scaling": {"rope_type": "yarn", "factor": 4.0}'
bad "'rope_scaling': rope_type \"yarn\" is not modelled" solve --mem 80G --model "$T/yarn.json"
hf ab llama '"attention_bias": true'
bad "'attention_bias': true" estimate --model "$T/ab.json"
printf '{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 256, "n_positions": 64, "tie_word_embeddings": false}' >"$T/g2.json"
bad "'tie_word_embeddings': false is not supported for gpt2" estimate --model "$T/g2.json"

# ---- 10. messages: the option named, its own example, no doubled prefix ----
bad "--gpus: 0 is below the minimum 1 (e.g. --gpus 8)" estimate $P --gpus 0
bad "--gpus: 0 is below the minimum 1 (e.g. --gpus 8)" solve $P --mem 80G --gpus 0
bad "--gpus: '8B' is not a whole number" solve $P --mem 80G --gpus 8B
bad "--nodes: 0 is below the minimum 1" solve $P --mem 80G --nodes 0
bad "--seq: 0 is below the minimum 1 (e.g. --seq 1024)" solve $P --mem 80G --seq 0
bad "--global-batch: 'x' is not a whole number" solve $P --mem 80G --global-batch x
bad "--steps: 0 is below the minimum 1 (e.g. --steps 1000)" solve $P --mem 80G --steps 0
bad "--warmup: -1 is below the minimum 0" solve $P --mem 80G --warmup -1
bad "--eval-interval: 'x' is not a whole number" solve $P --mem 80G --eval-interval x
bad "--save-interval: 'x' is not a whole number" solve $P --mem 80G --save-interval x
bad "--lr: '0' is not a learning rate in (0, 1] (e.g. --lr 3e-4)" solve $P --mem 80G --lr 0
bad "--warmup 2000 exceeds --steps 1000" solve $P --mem 80G --warmup 2000
bad "--units: unknown unit 'MB'" estimate $P --units MB
bad "--units: unknown unit 'MB'" solve $P --mem 80G --units MB
bad "--units: unknown unit 'MB'" show "$plan" --units MB
bad "--precision: unknown preset 'fp8'" estimate $P --precision fp8
bad "--precision: unknown preset 'fp8'" solve $P --mem 80G --precision fp8
bad "-o: empty value (e.g. -o plan.json)" solve $P --mem 80G -o ""
bad "--out: empty value (e.g. --out run/)" solve $P --mem 80G --out ""
bad "--data: empty value" solve $P --mem 80G --data ""
bad "--mem needs a value (e.g. --mem 80G)" solve $P --mem
bad "--mem is required (e.g. --mem 80G)" solve $P
bad "--gpus given twice" solve $P --mem 80G --gpus 8 --gpus 4
bad "unknown option '--world'" solve $P --mem 80G --world 8
bad "--plot: '$T/x.gif' must end in .png or .svg (e.g. --plot candidates.png)" solve $P --mem 80G --plot "$T/x.gif"
bad "--plot: 'x.txt' must end in .png or .svg" estimate $P --plot x.txt
bad "--plot: 'x.txt' must end in .png or .svg" simulate "$plan" --plot x.txt
bad "--mem 1M is not above hardware profile H100-SXM-80GB's runtime reserve" solve $P --mem 1M
bad "--params: empty value" estimate --params ""
bad "--model: empty value" estimate --model ""
bad "--gpus: 0 is below the minimum 1" estimate $P --gpus 0
bad "--micro-batch: 0 is below the minimum 1 (e.g. --micro-batch 4)" estimate $P --micro-batch 0
bad "--grad-accum: 'x' is not a whole number (e.g. --grad-accum 8)" estimate $P --grad-accum x
bad "--plan fixes the configuration; --grad-accum cannot be combined with it" estimate --plan "$plan" --grad-accum 2
bad "--plan fixes the configuration; --offload-optimizer cannot be combined with it" estimate --plan "$plan" --offload-optimizer cpu
bad "--master-port '0'" export --deepspeed "$plan" --master-port 0
bad "compare: needs two traces" compare "$T/tr.json"
bad "-o: empty value" export --deepspeed "$plan" -o ""
bad "--slurm: empty value" export --deepspeed "$plan" --slurm ""
bad "simulate: --trace needs a value" simulate "$plan" --trace ""
bad "-o needs a value" report "$T" -o ""

# ---- issue 17: the runtime profile and the validation suite ----
bad "--runtime 'megatron-lm': unknown runtime (use dtrun, deepspeed, fsdp or megatron" estimate $P --runtime megatron-lm
bad "--runtime megatron: hardware cpu is a CPU profile and Megatron-LM runs on CUDA GPUs only" estimate $P --runtime megatron --hardware cpu
bad "solve: --runtime megatron: hardware cpu is a CPU profile and Megatron-LM runs on CUDA GPUs only" solve $P --mem 2G --runtime megatron --hardware cpu
bad "--attention 'sdpa': expected flash or eager (= materialized: Megatron-LM's unfused attention" solve $P --mem 80G --runtime megatron --attention sdpa
bad "solve: --stages 0,1,2 with --runtime megatron: Megatron-LM has no ZeRO-2 or ZeRO-3" solve $P --mem 80G --runtime megatron --stages 0,1,2
bad "--runtime 'bogus': unknown runtime" solve $P --mem 80G --runtime bogus
bad "--runtime 'DeepSpeed': unknown runtime" simulate "$plan" --runtime DeepSpeed
bad "--runtime deepspeed on CPU ranks needs the CPU profile's measured deepspeed_runtime_bytes; hardware cpu has none" estimate $P --runtime deepspeed --hardware cpu
bad "--runtime fsdp on CPU ranks needs the CPU profile's measured torch_runtime_bytes" solve $P --mem 1G --runtime fsdp --hardware cpu
bad "--runtime deepspeed cannot run" simulate "$plan" --runtime deepspeed
bad "--attention 'sdpa': expected flash or materialized" estimate $P --attention sdpa
bad "--attention 'paged': expected sdpa, flash or eager" estimate $P --runtime deepspeed --attention paged
bad "--attention 'eager': expected flash or materialized" solve $P --mem 80G --attention eager
bad "--recompute selective: dtrun's engine recomputes whole blocks only" estimate $P --recompute selective
bad "--recompute 'attention': expected selective or none" estimate $P --runtime fsdp --recompute attention
bad "--largest-layer 'matrix': expected module or block_matrix" estimate $P --runtime deepspeed --largest-layer matrix
bad "--largest-layer applies to --runtime deepspeed / fsdp and to --compare deepspeed" estimate $P --largest-layer module
bad "--runtime fsdp with --deepspeed" estimate $P --runtime fsdp --deepspeed "$SRC/configs/deepspeed/zero2.json"
bad "--plan fixes the configuration; --runtime cannot be combined with it" estimate --plan "$plan" --runtime deepspeed
printf '{"format": "dtplan.validation/1", "name": "x"}\n' >"$T/case.json"
bad "validate: $T/case.json: \$.source: missing required key" validate "$T/case.json"
bad "validate: cannot read '$T/none.json'" validate "$T/none.json"
bad "validate: unknown option '--strict'" validate --strict
# a case's reduce_scatter (DeepSpeed's key, as in a plan's runtime): a boolean, deepspeed only
jq '.config.reduce_scatter = "no"' "$SRC/tests/validation/cases/autotune-gpt2-z1-mbs8.json" >"$T/rs.json"
bad "validate: $T/rs.json: \$.config.reduce_scatter: expected true or false, got \"no\"" validate "$T/rs.json"
jq '.config.reduce_scatter = false | .config.runtime = "fsdp"' "$SRC/tests/validation/cases/autotune-gpt2-z1-mbs8.json" >"$T/rs.json"
bad "validate: $T/rs.json: \$.config: runtime.offload_ratio / hpz_partition_size / quantized_* / reduce_scatter" validate "$T/rs.json"
bad "validate: --max-memory-error 'ten': expected a percentage" validate --max-memory-error ten
# a case's layout (issue 36): strict keys, the layout's own rules
B="$SRC/tests/validation/cases/bloom-176b-tp4-pp12-dp8-a100x384.json"
jq '.config.layout.dp = 8' "$B" >"$T/lay.json"
bad "validate: $T/lay.json: \$.config.layout.dp: unknown key" validate "$T/lay.json"
jq '.config.layout.tp = 5' "$B" >"$T/lay.json"
bad "validate: $T/lay.json: \$.config: layout.tp 5 does not divide the model's 112 attention heads" validate "$T/lay.json"

# nothing was written where -o pointed
"$DTPLAN" solve $P --mem 80 -o "$T/never.json" >/dev/null 2>&1
[ -e "$T/never.json" ] && fail "a refused solve wrote its -o file"

# ---- the hints work: run what the messages suggest ----
"$DTPLAN" estimate $P --mem 80G >/dev/null 2>&1 || fail "the suggested --mem 80G is refused"
"$DTPLAN" estimate $P --mem 100G --hardware H200 >/dev/null 2>&1 || fail "the suggested --hardware H200 is refused"
"$DTPLAN" solve $P --mem 141GB --hardware H200 >/dev/null 2>&1 || fail "the suggested --mem 141GB on H200 is refused"
"$DTPLAN" solve $P --mem 80G --stages 2,3 >/dev/null 2>&1 || fail "the suggested --stages 2,3 is refused"
"$DTPLAN" solve $P --mem 80G --gpus 8 --global-batch 524288 >/dev/null 2>&1 ||
    fail "the suggested --global-batch 524288 on 8 GPUs is refused"
"$DTPLAN" estimate $P --gpus 1 --deepspeed "$T/tb.json" >/dev/null 2>&1 || fail "the suggested --gpus 1 is refused"
"$DTPLAN" estimate $P --mem 80GB >/dev/null 2>&1 || fail "80GB (10^9 bytes) is refused"

echo "$n bad inputs checked"
[ $fails -eq 0 ] && echo ok
exit $((fails > 0))
