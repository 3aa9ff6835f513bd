#!/bin/bash
# validate_ds_export.sh — what `dtplan export --deepspeed` writes runs in the real DeepSpeed
# (issue 34 item 8; docs/validation.md "Exported configs in the real DeepSpeed").
#
# For every configuration below it writes a plan (`dtplan solve --runtime deepspeed`, then
# the plan's stage / offload / precision / schedule / ZeRO++ fields set), exports it with
# `dtplan export --deepspeed`, and trains a tiny Hugging Face GPT-2 (random init) with that
# file under torchrun on 2 CPU ranks: deepspeed.initialize and STEPS optimizer steps
# (bench/runtimes/hf_train.py, the config passed as is). DeepSpeed selects its CPU
# accelerator and gloo when no GPU is present. Outcomes, one line per configuration:
#   pass   deepspeed.initialize and every step ran, every loss finite
#   host   DeepSpeed refused for a reason of this host, not of the file, in its own words:
#          fp16 on a CPU without AVX512-FP16 / AMX-FP16 ("Type fp16 is not supported on your
#          device", engine.py); an op its CPU accelerator lacks, e.g. ZeRO++'s quantizer
#          ("This op had not been implemented on CPU backend", op_builder/cpu/no_impl.py);
#          the reason is printed
#   FAIL   anything else: the export is wrong (exit status 1)
# Dev time only (a Python venv with torch, transformers, deepspeed: $DT_HFVENV, default
# /tmp/hfvenv); never a build or test dependency.
#
# usage: bench/validate_ds_export.sh [BUILD_DIR] [--steps N] [--only REGEX] [--keep]
# Writes OUT/results.tsv (name, outcome, reason) and OUT/<name>/ (plan, config, log);
# OUT = $DT_VALIDATE_OUT or a temporary directory.
set -u
BUILD=build STEPS=3 ONLY="" KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "validate_ds_export.sh: unknown option '$1'" >&2; exit 2 ;;
    *) BUILD=$1; shift ;;
    esac
done
SRC=$(cd "$(dirname "$0")/.." && pwd)
VENV=${DT_HFVENV:-/tmp/hfvenv}
PY=$VENV/bin/python TORCHRUN=$VENV/bin/torchrun
DTPLAN=$BUILD/dtplan
[ -x "$DTPLAN" ] || { echo "validate_ds_export.sh: $DTPLAN not built" >&2; exit 2; }
"$PY" -c "import deepspeed, transformers" 2>/dev/null ||
    { echo "validate_ds_export.sh: $PY cannot import deepspeed and transformers (set DT_HFVENV)" >&2; exit 2; }
OUT=${DT_VALIDATE_OUT:-$(mktemp -d /tmp/dt_ds_export_XXXXXX)}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore
RANKS=2 MICRO=2 SEQ=64 PORT=$((29700 + RANDOM % 200))

# the tiny GPT-2 the configs train (HF GPT2Config keys; 2 blocks of 64, vocab 1024)
cat >"$OUT/gpt2-tiny.json" <<'EOF'
{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 1024, "n_positions": 256,
 "n_embd": 64, "n_layer": 2, "n_head": 2, "bos_token_id": 0, "eos_token_id": 0}
EOF

echo "validate_ds_export: $(date -u +%FT%TZ), $(nproc --all) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"\
     "load $(cut -d' ' -f1-3 /proc/loadavg), $("$PY" -c 'import torch, deepspeed; print("torch", torch.__version__, "deepspeed", deepspeed.__version__)' 2>/dev/null | tail -1), out $OUT"
printf 'name\toutcome\treason\n' >"$OUT/results.tsv"

# name  stage  offload(none|opt|param|ratio)  precision  schedule  extra(none|zpp-hpz|zpp-qw|zpp-qg|allreduce|comm-fp32)
CONFIGS="
s0-fp32-warmup0     0 none  fp32        WarmupLR       none
s0-bf16             0 none  mixed-bf16  WarmupLR       none
s1-bf16             1 none  mixed-bf16  WarmupDecayLR  none
s1-bf16-offload     1 opt   mixed-bf16  WarmupLR       none
s2-bf16-warmup0     2 none  mixed-bf16  WarmupLR       none
s2-fp32-cosine      2 none  fp32        WarmupCosineLR none
s2-fp16             2 none  mixed-fp16  WarmupLR       none
s2-bf16-offload     2 opt   mixed-bf16  WarmupLR       none
s2-bf16-allreduce   2 none  mixed-bf16  constant       allreduce
s2-pure-bf16        2 none  pure-bf16   WarmupLR       none
s3-bf16             3 none  mixed-bf16  WarmupCosineLR none
s3-fp32-decay       3 none  fp32        WarmupDecayLR  none
s3-fp16             3 none  mixed-fp16  WarmupLR       none
s3-bf16-offload-opt 3 opt   mixed-bf16  WarmupLR       none
s3-bf16-offload-all 3 param mixed-bf16  WarmupLR       none
s3-bf16-ratio       3 ratio mixed-bf16  WarmupLR       none
s3-bf16-comm-fp32   3 none  mixed-bf16  WarmupLR       comm-fp32
s3-bf16-hpz         3 none  mixed-bf16  WarmupLR       zpp-hpz
s3-bf16-qw          3 none  mixed-bf16  WarmupLR       zpp-qw
s3-bf16-qg          3 none  mixed-bf16  WarmupLR       zpp-qg
"

# host-side refusals: DeepSpeed's own messages for what this CPU or its CPU accelerator lacks
HOST_RE='Type fp16 is not supported on your device|This op had not been implemented on CPU backend'

fails=0 n=0
while read -r name stage off prec sched extra; do
    [ -n "$name" ] || continue
    [ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]] && continue
    n=$((n + 1))
    d=$OUT/$name
    mkdir -p "$d"
    # a short run: --steps STEPS with no --warmup gives the plan's warmup 0 (the issue's case)
    "$DTPLAN" solve --mem 80G --model gpt2 --gpus $RANKS --global-batch $((RANKS * MICRO)) --seq $SEQ \
        --runtime deepspeed --precision "$prec" --steps "$STEPS" --schedule "$sched" -o "$d/plan.json" \
        >"$d/solve.log" 2>&1 || { echo "$name: solve failed: $(tail -1 "$d/solve.log")"; printf '%s\tFAIL\tsolve\n' "$name" >>"$OUT/results.tsv"; fails=$((fails + 1)); continue; }
    "$PY" - "$d/plan.json" "$stage" "$off" "$extra" "$MICRO" <<'PY' || { echo "$name: plan edit failed"; fails=$((fails + 1)); continue; }
import json, sys
f, stage, off, extra, micro = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
p = json.load(open(f))
z, r = p["parallel"], p["runtime"]
z["zero_stage"] = stage
z["offload_optimizer"] = "cpu" if off in ("opt", "param", "ratio") else "none"
z["offload_param"] = "cpu" if off == "param" else "none"
if off == "ratio":
    r["offload_ratio"] = 0.5
if extra == "zpp-hpz":
    r["hpz_partition_size"] = 2
if extra == "zpp-qw":
    r["quantized_weights"] = True
if extra == "zpp-qg":
    r["quantized_gradients"] = True
if extra == "allreduce":
    r["reduce_scatter"] = False
if extra == "comm-fp32":
    r["communication_data_type"] = "fp32"
p["batch"].update(micro_batch=micro, grad_accum=1, global_batch=micro * z["world_size"])
p["prediction"] = {"valid": False}
json.dump(p, open(f, "w"), indent=2)
PY
    "$DTPLAN" export --deepspeed "$d/plan.json" -o "$d/ds_config.json" >"$d/export.log" 2>&1 ||
        { echo "$name: export failed: $(tail -1 "$d/export.log")"; printf '%s\tFAIL\texport: %s\n' "$name" "$(tail -1 "$d/export.log")" >>"$OUT/results.tsv"; fails=$((fails + 1)); continue; }
    PORT=$((PORT + 1))
    timeout 900 "$TORCHRUN" --nproc_per_node $RANKS --master_port $PORT "$SRC/bench/runtimes/hf_train.py" \
        --ds-config "$d/ds_config.json" --model-config "$OUT/gpt2-tiny.json" --seq $SEQ --steps "$STEPS" \
        --label "$name" --out "$d/rows.jsonl" >"$d/run.log" 2>&1
    rc=$?
    steps_done=$(grep -c '"phase": "step"' "$d/rows.jsonl" 2>/dev/null)
    steps_done=${steps_done:-0}
    if [ $rc -eq 0 ] && [ "$steps_done" -eq $((STEPS * RANKS)) ]; then
        outcome=pass reason="$STEPS steps on $RANKS ranks, loss $(grep '"phase": "forward"' "$d/rows.jsonl" | tail -1 | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/')"
    else
        # the Python exception a rank raised ("[rank0]: ValueError: ...")
        why=$(grep -E "^(\[rank[0-9]+\]: )?[A-Za-z_.]*(Error|Exception): " "$d/run.log" | grep -v ChildFailedError |
              head -1 | sed 's/^\[rank[0-9]*\]: //' | cut -c1-220)
        if grep -Eq "$HOST_RE" "$d/run.log"; then outcome=host; else outcome=FAIL; fails=$((fails + 1)); fi
        reason="rc $rc, $steps_done/$((STEPS * RANKS)) rank-steps: ${why:-see $d/run.log}"
    fi
    printf '%-20s %-4s %s\n' "$name" "$outcome" "$reason"
    printf '%s\t%s\t%s\n' "$name" "$outcome" "$reason" >>"$OUT/results.tsv"
    [ $KEEP -eq 1 ] || rm -rf "$d/ckpt"
done <<<"$CONFIGS"
echo "validate_ds_export: $n configurations, $fails FAIL; load $(cut -d' ' -f1-3 /proc/loadavg); table $OUT/results.tsv"
exit $((fails > 0))
