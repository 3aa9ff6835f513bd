#!/bin/bash
# validate_runtimes.sh — what the real DeepSpeed and PyTorch hold, per rank and per phase, on
# 2 CPU ranks under torchrun (issue 34 item 1; docs/validation.md "DeepSpeed and PyTorch on
# CPU ranks"). Dev time only: a Python venv with torch, transformers and deepspeed
# ($DT_HFVENV, default /tmp/hfvenv); never a build or test dependency.
#
# Models (bench/runtimes/matrix.py, HF config.json, random init): gpt2-s (GPT-2's vocabulary,
# 4 x 256, 16.5 M), qwen3-s and llama-s (4 x 256, vocab 32000), gpt2 (124 M, on request).
# Per model: DeepSpeed ZeRO 0/1/2/3 fp32 with its default buckets; ZeRO 2/3 bf16; ZeRO 2/3
# with small buckets (5e5 elements); optimizer offload to cpu at stages 1-3 and parameter
# offload at stage 3; activation checkpointing (HF gradient_checkpointing) at stages 2/3;
# zero.Init at stage 3; PyTorch DDP fp32 / bf16 (autocast) / checkpointed; FSDP2
# (fully_shard per block and the root) fp32 / bf16. Micro-batch 4 x 128 tokens per rank.
#
# Each rank measures itself (bench/runtimes/hf_train.py): per phase — import + process group,
# model build, deepspeed.initialize (or DDP / fully_shard + AdamW), forward, backward,
# optimizer step, checkpoint save — the kernel's peak resident set (VmHWM reset through
# /proc/self/clear_refs "5" at the phase's start, as engine/device/memprobe.c does; a kernel
# that ignores the reset stops the run) and the wall time. Once per run, the runtime's own
# footprint per runtime and stage: the peak of the same run with a 0.18 M-parameter model
# (the CPU profile's deepspeed_runtime_bytes / torch_runtime_bytes).
#
# usage: bench/validate_runtimes.sh [--models "gpt2-s qwen3-s"] [--steps N] [--only REGEX] [--quick]
#                                   [--fixed-mmap-threshold]
#   --quick   stages 0-3 fp32, DDP and FSDP2 fp32 only
#   --fixed-mmap-threshold  every run with MALLOC_MMAP_THRESHOLD_=131072: glibc's threshold fixed
#             at its 128 KiB start, so freed tensors above it go back to the kernel instead of
#             staying in the heap (docs/validation.md: separates the allocator's retention from
#             what the libraries hold)
# Writes OUT/rows.jsonl (every rank, phase and step, as measured), OUT/runs.tsv (one line per
# configuration: its settings and the load average before it), OUT/cfg/*.json (the DeepSpeed
# configs, for `dtplan estimate --deepspeed`), OUT/models/*.json, OUT/footprint.csv and
# OUT/runtimes.csv (columns: config, model, runtime, stage, offload, precision, buckets, ckpt,
# zero_init, rank, phase, peak_bytes, rss_end_bytes, seconds, step_seconds, steps, load1) —
# the table bench/compare_runtimes.sh reads. OUT = $DT_VALIDATE_OUT or a temporary directory.
set -u
MODELS="gpt2-s qwen3-s" STEPS=3 ONLY="" QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
    --models) MODELS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --fixed-mmap-threshold) export MALLOC_MMAP_THRESHOLD_=131072; shift ;;   # malloc(3) M_MMAP_THRESHOLD
    -h | --help) sed -n '2,35p' "$0"; exit 0 ;;
    -*) echo "validate_runtimes.sh: unknown option '$1'" >&2; exit 2 ;;
    *) echo "validate_runtimes.sh: unexpected argument '$1'" >&2; exit 2 ;;
    esac
done
SRC=$(cd "$(dirname "$0")/.." && pwd)
VENV=${DT_HFVENV:-/tmp/hfvenv}
PY=$VENV/bin/python TORCHRUN=$VENV/bin/torchrun
"$PY" -c "import deepspeed, transformers" 2>/dev/null ||
    { echo "validate_runtimes.sh: $PY cannot import deepspeed and transformers (set DT_HFVENV)" >&2; exit 2; }
OUT=${DT_VALIDATE_OUT:-$(mktemp -d /tmp/dt_runtimes_XXXXXX)}
mkdir -p "$OUT"
NCPU=$(nproc --all)
export OMP_NUM_THREADS=$((NCPU / 2 > 0 ? NCPU / 2 : 1)) PYTHONWARNINGS=ignore
RANKS=2 SEQ=128 PORT=$((29900 + RANDOM % 90))
load() { cut -d' ' -f1 /proc/loadavg; }
VERS=$("$PY" -c 'import torch, transformers, deepspeed; print("torch", torch.__version__, "transformers", transformers.__version__, "deepspeed", deepspeed.__version__)' 2>/dev/null | tail -1)
echo "validate_runtimes: $(date -u +%FT%TZ), $NCPU CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"\
     "$(awk '/^MemTotal:/ {printf "%d MiB", $2 / 1024}' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg), $VERS,"\
     "$OMP_NUM_THREADS thread(s) per rank, glibc mmap threshold ${MALLOC_MMAP_THRESHOLD_:-dynamic}, out $OUT"

"$PY" "$SRC/bench/runtimes/matrix.py" configs "$OUT" "$MODELS" $QUICK >"$OUT/matrix.txt" || exit 2

# The runtime's own footprint, once per machine, per runtime and stage: the peak of a rank
# training the 0.18 M-parameter "calib" GPT-2 (2 x 64, vocab 1024; its states and
# activations are under 4 MiB) two steps, micro-batch 1 x 16 tokens — Python, torch,
# transformers, DeepSpeed's engine and optimizer, gloo, every library buffer — the
# profile's deepspeed_runtime_bytes / torch_runtime_bytes (bench/compare_runtimes.sh).
echo "runtime,stage,rank,peak_bytes,load1" >"$OUT/footprint.csv"
for c in deepspeed:0 deepspeed:1 deepspeed:2 deepspeed:3 ddp:0 fsdp:3; do
    rt=${c%:*} st=${c#*:}
    PORT=$((PORT + 1))
    l=$(load)
    cfg=()
    [ "$rt" = deepspeed ] && cfg=(--ds-config "$OUT/cfg/calib-z$st.json") || cfg=(--micro 1)
    rm -f "$OUT/calib-$rt-$st.jsonl"
    "$TORCHRUN" --nproc_per_node $RANKS --master_port $PORT "$SRC/bench/runtimes/hf_train.py" --runtime "$rt" \
        --model-config "$OUT/models/calib.json" --seq 16 --steps 2 --label "calib-$rt-$st" "${cfg[@]}" \
        --out "$OUT/calib-$rt-$st.jsonl" >"$OUT/calib-$rt-$st.log" 2>&1 ||
        { echo "validate_runtimes.sh: the calibration run $rt stage $st failed: $(tail -1 "$OUT/calib-$rt-$st.log")" >&2; exit 1; }
    "$PY" -c 'import json, sys
peak = {}
for l in open(sys.argv[1]):
    r = json.loads(l); peak[r["rank"]] = max(peak.get(r["rank"], 0), r["peak"])
for k in sorted(peak): print(f"{sys.argv[2]},{sys.argv[3]},{k},{peak[k]},{sys.argv[4]}")' \
        "$OUT/calib-$rt-$st.jsonl" "$rt" "$st" "$l" >>"$OUT/footprint.csv"
done
cat "$OUT/footprint.csv"

: >"$OUT/runs.tsv"
fails=0
while read -r name model rt stage off prec bk ck zi; do
    [ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]] && continue
    PORT=$((PORT + 1))
    l=$(load)
    extra=()
    [ "$ck" = 1 ] && extra+=(--grad-ckpt)
    [ "$zi" = 1 ] && extra+=(--zero-init)
    [ "$rt" = deepspeed ] && extra+=(--ds-config "$OUT/cfg/$name.json") || extra+=(--micro 4 --precision "$prec")
    mkdir -p "$OUT/ckpt/$name"
    t0=$(date +%s)
    timeout 1200 "$TORCHRUN" --nproc_per_node $RANKS --master_port $PORT "$SRC/bench/runtimes/hf_train.py" \
        --runtime "$rt" --model-config "$OUT/models/$model.json" --seq $SEQ --steps "$STEPS" \
        --save "$OUT/ckpt/$name" --label "$name" --out "$OUT/rows.jsonl" "${extra[@]}" >"$OUT/$name.log" 2>&1
    rc=$?
    rm -rf "$OUT/ckpt/$name"
    if [ $rc -ne 0 ]; then
        fails=$((fails + 1))
        # the Python exception a rank raised ("[rank0]: TypeError: ...")
        echo "$name: FAILED (rc $rc): $(grep -E '^(\[rank[0-9]+\]: )?[A-Za-z_.]*(Error|Exception): ' "$OUT/$name.log" |
            grep -v ChildFailedError | head -1 | sed 's/^\[rank[0-9]*\]: //' | cut -c1-200)"
        continue
    fi
    printf '%s %s %s %s %s %s %s %s %s %s\n' "$name" "$model" "$rt" "$stage" "$off" "$prec" "$bk" "$ck" "$zi" "$l" >>"$OUT/runs.tsv"
    echo "$name: $(($(date +%s) - t0)) s, load $l -> $(load)"
done <"$OUT/matrix.txt"
"$PY" "$SRC/bench/runtimes/matrix.py" table "$OUT" || exit 1
echo "validate_runtimes: $(wc -l <"$OUT/runs.tsv") configurations measured, $fails failed; load $(cut -d' ' -f1-3 /proc/loadavg); table $OUT/runtimes.csv"
exit $((fails > 0))
