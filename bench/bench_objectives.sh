#!/bin/bash
# bench_objectives.sh — dtrun's dpo and grpo against TRL 1.16's DPOTrainer and GRPOTrainer on
# this CPU, side by side in one run (issue 33 item 6; docs/benchmarks.md "Objectives: dtrun
# against TRL"): the same model directory (bench/objectives_model.py: Qwen3-0.6B's block x 8,
# 129 M parameters, transformers' initialisation, fp32), the same synthetic JSONL
# (bench/objectives_data.py) through the same tokenizer (qwen2-mini, 1500 ids), the same batch,
# sequence, steps, learning rate and objective settings, the same threads:
#   dpo: 4 pairs per step (micro-batch 4), beta 0.1, sigmoid loss, reference = a frozen copy;
#   grpo: one group of G 4 completions of 32 new tokens per step (micro-batch 4), temperature 1,
#   beta 0.04 (a frozen reference), the exact-answer reward.
# A step's figure is the mean wall time of the optimizer steps after the first (dtrun: its run
# report's measured step_time_s, its clock around each step; TRL: torch's perf_counter around
# each step in a TrainerCallback). Examples per second = examples per step / that; tokens per
# second = examples per second x the data's mean tokens per example (prompt + chosen + prompt +
# rejected for dpo; prompt + max completion for grpo, with each side's measured mean completion
# length beside it), the same count for both, so the ratio is the ratio of step times. Beside it
# the CPU time of a step (every thread's; dtrun: metrics.jsonl cpu_ms, CLOCK_PROCESS_CPUTIME_ID; TRL: Python's
# process_time), which a shared machine's load distorts less than the wall time.
#
# usage: bench/bench_objectives.sh [BUILD_DIR] [--objectives "dpo grpo"] [--steps N]
#                                  [--threads K] [--python PY]
#   BUILD_DIR   where dtplan and dtrun are (default build)
#   --steps N   optimizer steps of each run (default 4; the first is not timed)
#   --threads K OpenMP / torch threads for both (default: the CPUs)
#   --python PY the interpreter with torch, transformers, trl 1.16, datasets (default
#               /tmp/hfvenv/bin/python3)
# Writes OUT/table.md and OUT/*.json (OUT = $DT_BENCH_OUT or a temporary directory).
set -u
BUILD=build STEPS=4 OBJECTIVES="dpo grpo" THREADS=$(nproc) PY=/tmp/hfvenv/bin/python3
while [ $# -gt 0 ]; do
    case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --objectives) OBJECTIVES=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    -h | --help) sed -n '2,29p' "$0"; exit 0 ;;
    -*) echo "bench_objectives.sh: unknown option '$1'" >&2; exit 2 ;;
    *) BUILD=$1; shift ;;
    esac
done
SRC=$(cd "$(dirname "$0")/.." && pwd)
DTPLAN=$BUILD/dtplan DTRUN=$BUILD/dtrun
for b in "$DTPLAN" "$DTRUN"; do [ -x "$b" ] || { echo "bench_objectives.sh: $b not built" >&2; exit 2; }; done
"$PY" -c "import trl, transformers, torch, datasets" 2>/dev/null ||
    { echo "bench_objectives.sh: $PY lacks torch / transformers / trl / datasets (give --python)" >&2; exit 2; }
OUT=${DT_BENCH_OUT:-$(mktemp -d /tmp/dt_bench_objectives_XXXXXX)}
mkdir -p "$OUT"
TOK=$SRC/tests/tokenizer/data/qwen2-mini.json
G=4 COMPLETION=32 MICRO=4
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE
echo "bench_objectives: $(date -u +%FT%TZ), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"\
     "$THREADS threads each, load $(cut -d' ' -f1-3 /proc/loadavg), $STEPS steps, out $OUT"
"$PY" "$SRC/bench/objectives_model.py" "$OUT/model" --weights --tokenizer "$TOK" ||
    { echo "bench_objectives.sh: cannot write the model" >&2; exit 2; }

# the cpu profile with this machine's memory as the device's (the 4 GiB default refuses the plan)
python3 - "$SRC/configs/hardware/cpu.json" "$OUT/cpu-here.json" <<'PY' || exit 2
import json, sys
h = json.load(open(sys.argv[1]))
kib = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal:"))
h.update(name="cpu-here", device_mem_bytes=kib * 1024, host_mem_bytes=kib * 1024)
json.dump(h, open(sys.argv[2], "w"), indent=2)
PY
# seq: dpo's pair sides fit 128 tokens; grpo's prompt (~40) + 32 new tokens fit 96
seq_of() { [ "$1" = dpo ] && echo 128 || echo 96; }
run_dtrun() {   # run_dtrun KIND: plan, train, the run report's step time
    local k=$1 seq; seq=$(seq_of "$1")
    local fmt=pairs flags="--objective dpo"
    [ "$k" = grpo ] && fmt=prompts flags="--objective grpo --num-generations $G --max-completion-length $COMPLETION --kl-coef 0.04"
    "$DTRUN" prepare --format $fmt --tokenizer "$TOK" --out "$OUT/data-$k" --val-fraction 0 --seq "$seq" --quiet \
        "$OUT/$k.jsonl" || return 1
    "$DTPLAN" solve --model "$OUT/model/config.json" --gpus 1 --mem 16G --hardware "$OUT/cpu-here.json" --stages 0 $flags \
        --data "$OUT/data-$k" --seq "$seq" --global-batch $MICRO --steps "$STEPS" --warmup 0 --precision fp32 \
        --lr 1e-6 -o "$OUT/$k.plan.json" >/dev/null || return 1
    python3 - "$OUT/$k.plan.json" $MICRO <<'PY' || return 1
import json, sys
p = json.load(open(sys.argv[1]))
p["batch"].update(micro_batch=int(sys.argv[2]), grad_accum=1)
p["activations"]["ckpt_layers"] = 0
p["data"]["eval_interval"] = 0
p["output"]["save_interval"] = 0
p.pop("prediction", None)
json.dump(p, open(sys.argv[1], "w"), indent=2)
PY
    rm -rf "$OUT/run-$k"
    "$DTRUN" "$OUT/$k.plan.json" --init "$OUT/model" --out "$OUT/run-$k" --no-progress >"$OUT/dtrun-$k.log" 2>&1 ||
        { tail -2 "$OUT/dtrun-$k.log"; return 1; }
    python3 - "$OUT/run-$k" <<'PY' >"$OUT/dtrun-$k.json"
import json, sys
d = sys.argv[1]
rep = json.load(open(d + "/run-report.json"))
m = [json.loads(l) for l in open(d + "/metrics.jsonl")]
lens = [x["completions/mean_length"] for x in m if "completions/mean_length" in x]
cpu = [x["cpu_ms"] / 1000 for x in m[1:]] or [x["cpu_ms"] / 1000 for x in m]   # the first step excluded, as step_s
print(json.dumps({"step_s": rep["measured"]["step_time_s"], "cpu_s": sum(cpu) / len(cpu),
                  "mean_completion_length": sum(lens) / len(lens) if lens else None}))
PY
}
run_trl() {   # run_trl KIND
    local k=$1
    "$PY" "$SRC/bench/trl_objectives.py" "$k" "$OUT/model" "$OUT/$k.jsonl" --micro $MICRO --accum 1 --steps "$STEPS" \
        --seq "$(seq_of "$k")" --threads "$THREADS" --completion $COMPLETION --generations $G --beta 0.04 \
        2>"$OUT/trl-$k.log" | tail -1 >"$OUT/trl-$k.json"
    [ -s "$OUT/trl-$k.json" ] || { tail -3 "$OUT/trl-$k.log"; return 1; }
}
for k in $OBJECTIVES; do
    python3 "$SRC/bench/objectives_data.py" "$k" "$OUT/$k.jsonl" 64 || exit 2
    t0=$(date +%s)
    run_dtrun "$k" || { echo "$k: dtrun failed"; continue; }
    echo "$k: dtrun done in $(( $(date +%s) - t0 )) s, load $(cut -d' ' -f1 /proc/loadavg)"
    t0=$(date +%s)
    run_trl "$k" || { echo "$k: TRL failed"; continue; }
    echo "$k: TRL done in $(( $(date +%s) - t0 )) s, load $(cut -d' ' -f1 /proc/loadavg)"
done
"$PY" - "$OUT" "$TOK" "$COMPLETION" $OBJECTIVES <<'PY' | tee "$OUT/table.md"
import json, os, sys
from transformers import PreTrainedTokenizerFast
out, tok, C, kinds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
t = PreTrainedTokenizerFast(tokenizer_file=tok)
n = lambda s: len(t(s)["input_ids"])
print("| objective | examples / step | tokens / example | dtrun s / step | TRL s / step | dtrun tokens/s | TRL tokens/s "
      "| dtrun / TRL | CPU s / step dtrun / TRL | by CPU time | mean completion dtrun / TRL |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for k in kinds:
    try:
        d, r = (json.load(open(f"{out}/{w}-{k}.json")) for w in ("dtrun", "trl"))
    except (OSError, ValueError):
        print(f"| {k} | (a side failed: {out}/dtrun-{k}.log, trl-{k}.log) |"); continue
    recs = [json.loads(l) for l in open(f"{out}/{k}.jsonl")]
    if k == "dpo": per = sum(2 * n(x["prompt"]) + n(x["chosen"]) + n(x["rejected"]) for x in recs) / len(recs)
    else: per = sum(n(x["prompt"]) for x in recs) / len(recs) + C
    ex = r["examples_per_step"]
    td, tt = ex * per / d["step_s"], ex * per / r["step_s"]
    lens = "-" if d["mean_completion_length"] is None else f"{d['mean_completion_length']:.1f} / {r['mean_completion_length']:.1f}"
    cs = f"{d['cpu_s']:.2f} / {r['cpu_s']:.2f} | {r['cpu_s'] / d['cpu_s']:.2f}x" if "cpu_s" in r else "- | -"
    print(f"| {k} | {ex} | {per:.1f} | {d['step_s']:.2f} | {r['step_s']:.2f} | {td:.0f} | {tt:.0f} | {td / tt:.2f}x | {cs} | {lens} |")
PY
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
