#!/bin/bash
# A ZeRO-3 plan under a per-rank memory limit that a rank holding the whole
# model breaks (issue 20; docs/dtrun.md "Running under a memory limit"): passes
# only if start-up from output.init, the checkpoint save and the resume all
# complete under it.
#
# Model: GPT-2 layout, 12 layers x 768, vocab 256, seq 16, micro-batch 1 — 85.3M
# parameters whose fp32 states (16 B each: 1.36 GB; 682 MB of flat parameters +
# gradients) dominate a step that computes little; 2 ranks, 1 OpenMP thread.
# Limit: RLIMIT_DATA (ulimit -d, inherited by the ranks dtrun starts) = the
# ranks' steady real peak (forward / backward / optimizer, measured by a first
# run without a limit) + HEADROOM_MIB. RLIMIT_DATA counts private writable
# mappings (Linux >= 4.7, getrlimit(2)) whether touched or not, so the headroom
# covers what is reserved but not resident: OpenBLAS's GEMM buffers (two 128 MiB
# regions, blas_memory_alloc), a glibc malloc arena, MPI — 336 MiB of untouched
# private mappings measured in a rank's /proc/PID/smaps — and one
# DT_IO_CHUNK_BYTES (64 MiB) staging buffer. Measured on the test machine (VmData
# sampled every 10 ms): a ZeRO-3 rank needs 1100 MiB at most, the limit is
# ~1240 MiB, a rank that materialises the whole model needs 1534 (the old
# start-up from a checkpoint) or 1364 (the old save's copy of m and v).
# Checks:
#   1. ZeRO-3 from output.init (each rank reads its shards of the file), 2 steps
#      and a checkpoint, under the limit: completes;
#   2. --resume (checkpoint load) for a third step and its checkpoint: completes;
#   3. their reports: start-up, checkpoint load and save peak no higher than the
#      steady peak + one DT_IO_CHUNK_BYTES (nothing model-sized is materialised);
#   4. control: the same model at ZeRO-0 (every rank holds all 16 B/parameter)
#      under the same limit fails — the limit binds.
# A run is stopped after RUN_TIMEOUT_S: when an allocation inside OpenBLAS fails
# it retries for ever instead of returning (a timeout counts as a failure).
# Usage: test_zero3_memlimit.sh DTPLAN DTRUN SRCDIR
set -u
DTRUN=$2
SRC=$3
for tool in python3 mpirun timeout; do
    command -v $tool >/dev/null || { echo "FAIL: $tool missing (scripts/setup.sh installs it)"; exit 1; }
done
. "$(dirname "$0")/../lib.sh"
dt_need_fortunes
# the headroom was measured with one OpenMP thread (OpenBLAS's buffers follow the thread count)
export OMP_NUM_THREADS=1
HEADROOM_MIB=448
RUN_TIMEOUT_S=150
IO_CHUNK_MIB=64    # DT_IO_CHUNK_BYTES (engine/dist/dt_zero.h)
TMP=$(mktemp -d /tmp/dt_test_memlimit_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
FAIL=0
T0=$(date +%s)

# plan STAGE OUT [INIT]
plan() {
    python3 - "$SRC/configs/plans/tiny-cpu.json" "$@" <<'PY'
import json, sys
src, stage, out = sys.argv[1:4]
init = sys.argv[4] if len(sys.argv) > 4 else ""
p = json.load(open(src))
p["model"].update(name="memlimit-gpt2", n_layer=12, hidden=768, n_head=12, n_kv_head=12, head_dim=64, ffn=3072,
                  vocab=256, max_pos=64)
p["parallel"].update(zero_stage=int(stage), world_size=2)
p["cluster"]["gpus_per_node"] = 2
p["batch"].update(micro_batch=1, grad_accum=1, global_batch=2, seq_len=16)
p["schedule"].update(total_steps=3, warmup_steps=1)
p["data"]["eval_interval"] = 0
p["output"].update(save_interval=0, keep_last=1, init=init)
p["prediction"] = {"valid": False}
json.dump(p, open(out, "w"), indent=2)
PY
}

# A sanitized build (DT_TEST_SANITIZED=1, set by tests/engine/CMakeLists.txt) cannot run
# under RLIMIT_DATA: AddressSanitizer maps terabytes of shadow memory at start-up, and its
# quarantine keeps freed memory resident. There the runs go without the limit and the
# memory checks (3, 4) are left to the Release build of the same suite, which CI runs first.
SANITIZED=${DT_TEST_SANITIZED:-0}
[ "$SANITIZED" = 1 ] && echo "sanitized build: the runs must complete; the limit and peak checks run in the Release build"

# limited LIMIT_KIB LOG dtrun-args...: dtrun (which starts both ranks) under RLIMIT_DATA
limited() {
    local kib=$1 log=$2
    shift 2
    if [ "$SANITIZED" = 1 ]; then
        timeout "$((RUN_TIMEOUT_S * 5))" "$DTRUN" "$@" --no-progress >"$log" 2>&1
        return
    fi
    ( ulimit -d "$kib" && exec timeout "$RUN_TIMEOUT_S" "$DTRUN" "$@" --no-progress ) >"$log" 2>&1
}

# the reference, without a limit: the weights file for output.init and the steady peak
plan 3 "$TMP/ref.json"
"$DTRUN" "$TMP/ref.json" --out "$TMP/ref" --max-steps 1 --no-progress >"$TMP/ref.log" 2>&1 ||
    { echo "FAIL: the reference run without a limit: $(tail -3 "$TMP/ref.log")"; exit 1; }
STEADY=$(python3 - "$TMP/ref" <<'PY'
import json, sys
d = sys.argv[1]
peak = 0
for name in ("run-report.json", "run-report-rank00001.json"):
    ph = json.load(open(f"{d}/{name}"))["real_memory"]["phases"]
    peak = max([peak] + [ph[p]["real_peak_rss"] or 0 for p in ("forward", "backward", "optimizer")])
print(peak)
PY
) || { echo "FAIL: no real peak in the reference reports"; exit 1; }
LIMIT_KIB=$((STEADY / 1024 + HEADROOM_MIB * 1024))
echo "steady real peak $((STEADY >> 20)) MiB per rank; limit (RLIMIT_DATA) $((LIMIT_KIB / 1024)) MiB per rank"

# 1. start-up from output.init, 2 steps, checkpoint
plan 3 "$TMP/z3.json" "$TMP/ref/ckpt-00000001/model.safetensors"
limited "$LIMIT_KIB" "$TMP/run1.log" "$TMP/z3.json" --out "$TMP/z3" --max-steps 2
rc=$?
if [ $rc = 0 ]; then
    echo "ok   ZeRO-3 from output.init, 2 steps and a checkpoint under the limit"
    mkdir -p "$TMP/z3/first" && cp "$TMP"/z3/run-report*.json "$TMP/z3/first/"
else
    echo "FAIL ZeRO-3 from output.init under the limit (exit $rc): $(grep -m2 -i 'error\|fail\|cannot\|memory' "$TMP/run1.log")"
    FAIL=1
fi

# 2. resume: checkpoint load, a step, checkpoint
if [ "$FAIL" = 0 ]; then
    limited "$LIMIT_KIB" "$TMP/run2.log" "$TMP/z3.json" --out "$TMP/z3" --resume --max-steps 3
    rc=$?
    if [ $rc = 0 ]; then
        echo "ok   ZeRO-3 --resume (checkpoint load), a step and a checkpoint under the limit"
    else
        echo "FAIL ZeRO-3 --resume under the limit (exit $rc): $(grep -m2 -i 'error\|fail\|cannot\|memory' "$TMP/run2.log")"
        FAIL=1
    fi
fi

# 3. no phase materialises the model: start-up, load, save within a chunk of the steady peak
if [ "$FAIL" = 0 ] && [ "$SANITIZED" = 0 ]; then
    python3 - "$TMP/z3" "$IO_CHUNK_MIB" <<'PY' || FAIL=1
import json, sys
d, chunk = sys.argv[1], int(sys.argv[2]) << 20
bad, rows = [], []
for run, phases in (("first", ("startup", "ckpt_save", "export")), ("resumed", ("startup", "ckpt_load", "ckpt_save"))):
    for r, name in enumerate(("run-report.json", "run-report-rank00001.json")):
        ph = json.load(open(f"{d}/first/{name}" if run == "first" else f"{d}/{name}"))["real_memory"]["phases"]
        steady = max(ph[p]["real_peak_rss"] or 0 for p in ("forward", "backward", "optimizer"))
        for p in phases:
            real = ph[p]["real_peak_rss"] or 0
            rows.append(f"{p} {real >> 20}")
            if real > steady + chunk:
                bad.append(f"{run} run, rank {r}: {p} peaked at {real >> 20} MiB, steady {steady >> 20} MiB + a chunk")
if bad:
    print("FAIL transient phases above the steady peak:\n  " + "\n  ".join(bad))
    sys.exit(1)
print("ok   start-up, checkpoint save and load within one I/O chunk of the steady peak (MiB, rank 0 first run: "
      + ", ".join(rows[:3]) + "; resumed: " + ", ".join(rows[6:9]) + ")")
PY
fi

# 4. control: ZeRO-0 keeps every state whole on each rank and must not fit
if [ "$SANITIZED" = 1 ]; then echo "$(($(date +%s) - T0)) s"; exit $FAIL; fi
plan 0 "$TMP/z0.json" "$TMP/ref/ckpt-00000001/model.safetensors"
limited "$LIMIT_KIB" "$TMP/run0.log" "$TMP/z0.json" --out "$TMP/z0" --max-steps 1
rc=$?
if [ $rc = 0 ]; then
    echo "FAIL control: ZeRO-0 (the whole model state per rank) completed under the limit: the limit does not bind"
    FAIL=1
else
    echo "ok   control: ZeRO-0 fails under the same limit (exit $rc: $(grep -m1 -o 'cannot allocate[^;]*\|out of memory[^;]*' "$TMP/run0.log"))"
fi
echo "$(($(date +%s) - T0)) s"
exit $FAIL
