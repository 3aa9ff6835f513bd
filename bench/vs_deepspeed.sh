#!/bin/bash
# vs_deepspeed.sh — dtrun beside DeepSpeed on the same 2 CPU ranks, model, ZeRO stage and
# shapes, in one run (issue 34 item 5; docs/benchmarks.md "dtrun vs DeepSpeed on CPU ranks").
# Dev time only: DeepSpeed from the venv $DT_HFVENV (default /tmp/hfvenv).
#
# The model is a Hugging Face config.json (default: bench/runtimes/matrix.py's gpt2-s, GPT-2's
# vocabulary, 4 x 256, 16.5 M parameters), fp32, micro-batch 4 x 128 tokens per rank, one
# micro-step per step, ZeRO stage S (default 3), STEPS steps (default 4). dtrun runs the plan
# `dtplan solve` writes for that model (the cpu profile; tokenizer "byte" over the fortunes:
# every step computes the same shapes); DeepSpeed runs bench/runtimes/hf_train.py with a
# config of the same stage and batch (its default buckets), random tokens. Per rank: tokens/s
# (the median step after the first: dtrun's metrics.jsonl, hf_train's forward + backward +
# step wall time; and per CPU-second of the rank's process, dtrun's cpu_ms and hf_train's
# process time, which a loaded machine does not inflate) and the kernel's peak resident set (dtrun: the run report's peak_rss_bytes;
# DeepSpeed: the largest phase peak, imports included). The load average is printed before
# each. Goal (issue 34): dtrun >= 2x DeepSpeed's tokens/s at no more memory.
#
# usage: bench/vs_deepspeed.sh [BUILD_DIR] [--model-config F] [--stage S] [--steps N] [--threads T]
#   --threads T  OpenMP threads per rank for both (default: CPUs / 2)
set -u
BUILD=build STAGE=3 STEPS=4 MODEL="" THREADS=""
while [ $# -gt 0 ]; do
    case "$1" in
    --model-config) MODEL=$2; shift 2 ;;
    --stage) STAGE=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "vs_deepspeed.sh: unknown option '$1'" >&2; exit 2 ;;
    *) BUILD=$1; shift ;;
    esac
done
SRC=$(cd "$(dirname "$0")/.." && pwd)
VENV=${DT_HFVENV:-/tmp/hfvenv}
PY=$VENV/bin/python TORCHRUN=$VENV/bin/torchrun
for b in "$BUILD/dtplan" "$BUILD/dtrun"; do [ -x "$b" ] || { echo "vs_deepspeed.sh: $b not built" >&2; exit 2; }; done
"$PY" -c "import deepspeed, transformers" 2>/dev/null ||
    { echo "vs_deepspeed.sh: $PY cannot import deepspeed and transformers (set DT_HFVENV)" >&2; exit 2; }
OUT=${DT_VALIDATE_OUT:-$(mktemp -d /tmp/dt_vs_ds_XXXXXX)}
mkdir -p "$OUT"
NCPU=$(nproc --all)
export OMP_NUM_THREADS=${THREADS:-$((NCPU / 2 > 0 ? NCPU / 2 : 1))} OMP_WAIT_POLICY=PASSIVE PYTHONWARNINGS=ignore
if [ -z "$MODEL" ]; then
    "$PY" "$SRC/bench/runtimes/matrix.py" configs "$OUT" gpt2-s 1 >/dev/null || exit 2
    MODEL=$OUT/models/gpt2-s.json
fi
MICRO=4 SEQ=128 RANKS=2
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "vs_deepspeed: $(date -u +%FT%TZ), $NCPU CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"\
     "$OMP_NUM_THREADS thread(s) per rank, model $MODEL, ZeRO-$STAGE fp32, $RANKS ranks x $MICRO x $SEQ tokens, $STEPS steps, out $OUT"

# dtrun
"$BUILD/dtplan" solve --mem 4G --model "$MODEL" --gpus $RANKS --hardware cpu --precision fp32 --seq $SEQ \
    --global-batch $((RANKS * MICRO)) --steps "$STEPS" --stages "$STAGE" --no-offload -o "$OUT/plan.json" \
    >"$OUT/solve.log" 2>&1 || { echo "vs_deepspeed.sh: solve failed: $(tail -1 "$OUT/solve.log")" >&2; exit 1; }
"$PY" - "$OUT/plan.json" $MICRO <<'PY' || exit 1
import json, sys
p = json.load(open(sys.argv[1]))
p["batch"].update(micro_batch=int(sys.argv[2]), grad_accum=1, global_batch=int(sys.argv[2]) * p["parallel"]["world_size"])
p["activations"]["ckpt_layers"] = 0
json.dump(p, open(sys.argv[1], "w"), indent=2)
PY
l_dt=$(load)
"$BUILD/dtrun" "$OUT/plan.json" --out "$OUT/dtrun" --no-progress >"$OUT/dtrun.log" 2>&1 ||
    { echo "vs_deepspeed.sh: dtrun failed: $(tail -2 "$OUT/dtrun.log")" >&2; exit 1; }
# DeepSpeed
"$PY" - "$OUT/ds.json" "$STAGE" $MICRO $RANKS <<'PY' || exit 1
import json, sys
out, stage, micro, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
json.dump({"train_batch_size": micro * ranks, "train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1,
           "gradient_clipping": 1.0, "zero_optimization": {"stage": stage, "overlap_comm": stage == 3},
           "bf16": {"enabled": False},
           "optimizer": {"type": "AdamW", "params": {"lr": 2e-4, "weight_decay": 0.01}}}, open(out, "w"), indent=1)
PY
l_ds=$(load)
rm -f "$OUT/ds.jsonl"
"$TORCHRUN" --nproc_per_node $RANKS --master_port $((29600 + RANDOM % 100)) "$SRC/bench/runtimes/hf_train.py" \
    --runtime deepspeed --ds-config "$OUT/ds.json" --model-config "$MODEL" --seq $SEQ --steps "$STEPS" \
    --label ds --out "$OUT/ds.jsonl" >"$OUT/ds.log" 2>&1 ||
    { echo "vs_deepspeed.sh: DeepSpeed failed: $(tail -2 "$OUT/ds.log")" >&2; exit 1; }
"$PY" - "$OUT" $RANKS $MICRO $SEQ "$l_dt" "$l_ds" <<'PY'
import json, statistics, sys
out, ranks, micro, seq, l_dt, l_ds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
MIB = 1 << 20
dt = [json.loads(l) for l in open(out + "/dtrun/metrics.jsonl") if '"tokens_per_s"' in l]
dt_tps = statistics.median(r["tokens_per_s"] for r in dt[1:] or dt)
dt_peak = [json.load(open(out + ("/dtrun/run-report.json" if r == 0 else "/dtrun/run-report-rank%05d.json" % r)))
           ["measured"]["peak_rss_bytes"] for r in range(ranks)]
dt_cpu = ranks * micro * seq / (statistics.median(r["cpu_ms"] for r in dt[1:] or dt) / 1e3)
rows = [json.loads(l) for l in open(out + "/ds.jsonl")]
later = [r for r in rows if r["phase"] == "step" and r["rank"] == 0 and r["step"] > 0]
ds_tps = ranks * micro * seq / statistics.median(r["step_seconds"] for r in later)
ds_cpu = ranks * micro * seq / statistics.median(r["step_cpu_seconds"] for r in later)
ds_peak = [max(r["peak"] for r in rows if r["rank"] == k) for k in range(ranks)]
print(f"| runtime | tokens/s (wall) | tokens per CPU-second of rank 0 | peak per rank (MiB) | load before |")
print(f"|---|---|---|---|---|")
print(f"| dtrun | {dt_tps:.0f} | {dt_cpu:.0f} | {' / '.join(f'{p / MIB:.0f}' for p in dt_peak)} | {l_dt} |")
print(f"| DeepSpeed | {ds_tps:.0f} | {ds_cpu:.0f} | {' / '.join(f'{p / MIB:.0f}' for p in ds_peak)} | {l_ds} |")
print(f"dtrun / DeepSpeed: {dt_tps / ds_tps:.2f}x tokens/s (wall), {dt_cpu / ds_cpu:.2f}x tokens per CPU-second, "
      f"{max(dt_peak) / max(ds_peak):.2f}x peak memory (goal: >= 2x at <= 1x)")
PY
