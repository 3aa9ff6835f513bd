#!/usr/bin/env bash
# CLI test for simulate --trace/--plot, estimate/solve --plot, compare and report,
# including every bad-input path (exit 2 and one line naming the problem).
# $1 = dtplan, $2 = dtrun, $3 = source dir. No python: structure is checked with
# grep/od and by reading traces back through `dtplan compare`.
set -u
DTPLAN=$1 DTRUN=$2 SRC=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
ok() { echo "ok: $*"; }

# is_png FILE: the 8-byte PNG signature, a 960x600 IHDR (the charts' default size)
# and more than a frame's worth of bytes.
is_png() {
    local sig dims size
    [ -s "$1" ] || { fail "$1: missing or empty"; return; }
    sig=$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')
    [ "$sig" = "89504e470d0a1a0a" ] || { fail "$1: not a PNG (signature $sig)"; return; }
    dims=$(od -An -tu1 -j16 -N8 "$1" | awk '{print $1*16777216+$2*65536+$3*256+$4 "x" $5*16777216+$6*65536+$7*256+$8}')
    [ "$dims" = "960x600" ] || { fail "$1: size $dims, expected 960x600"; return; }
    size=$(wc -c <"$1")
    [ "$size" -gt 4000 ] || { fail "$1: only $size bytes (blank chart?)"; return; }
    ok "$1 is a 960x600 PNG of $size bytes"
}
is_svg() {
    [ -s "$1" ] && grep -q "<svg" "$1" && grep -q "</svg>" "$1" && ok "$1 is SVG" || fail "$1: not a complete SVG"
}
# bad EXPECTED_SUBSTRING CMD...: exit 2, exactly one stderr line starting "dtplan: " containing the text
bad() {
    local want=$1
    shift
    "$@" >"$T/out" 2>"$T/err"
    local rc=$? lines
    lines=$(wc -l <"$T/err")
    if [ $rc -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -q "^dtplan: .*$want" "$T/err"; then
        fail "'$*': rc $rc, $lines stderr line(s), expected exit 2 and one line with '$want': $(cat "$T/err")"
    else
        ok "bad input '$want': $(cat "$T/err")"
    fi
}

# ---- plans: a stage-3 and a stage-2 gpt2 plan on 8 GPUs ----
"$DTPLAN" solve --model gpt2 --gpus 8 --mem 80G --stages 3 -o "$T/s3.json" >/dev/null || fail "solve stage 3"
"$DTPLAN" solve --model gpt2 --gpus 8 --mem 80G --stages 2 --no-offload -o "$T/s2.json" >/dev/null || fail "solve stage 2"

# ---- simulate --trace / --plot ----
"$DTPLAN" simulate "$T/s3.json" --trace "$T/s3.trace.json" --plot "$T/s3.png" >/dev/null || fail "simulate s3"
"$DTPLAN" simulate "$T/s2.json" --trace "$T/s2.trace.json" --plot "$T/s2.svg" >/dev/null || fail "simulate s2"
is_png "$T/s3.png"
is_svg "$T/s2.svg"
# trace structure: the envelope, spans with the documented names, the memory counter
tr="$T/s3.trace.json"
grep -q '"traceEvents"' "$tr" || fail "trace: no traceEvents"
for name in forward backward allgather reduce_scatter optimizer; do
    grep -q "\"name\": *\"$name\"" "$tr" || fail "trace: no '$name' span in a stage-3 step"
done
grep -q '"ph": *"X"' "$tr" && grep -q '"ph": *"C"' "$tr" && grep -q '"ph": *"M"' "$tr" || fail "trace: X/C/M events missing"
# a trace compared with itself: every phase and the step at +0.0%
"$DTPLAN" compare "$tr" "$tr" >"$T/self.txt" || fail "compare self"
n_rows=$(grep -c '%' "$T/self.txt")
n_zero=$(grep -c '+0\.0%' "$T/self.txt")
[ "$n_rows" -ge 6 ] && [ "$n_rows" -eq "$n_zero" ] && ok "compare self: $n_rows rows at +0.0%" ||
    fail "compare self: $n_zero of $n_rows rows at +0.0%: $(cat "$T/self.txt")"
grep -q 'allgather' "$T/self.txt" || fail "compare self: no allgather row"
# JSON form
"$DTPLAN" compare "$tr" "$tr" --json >"$T/self.json" || fail "compare --json"
grep -q '"phases"' "$T/self.json" && ! grep '"diff_pct"' "$T/self.json" | grep -vq '"diff_pct": 0,\?$' &&
    ok "compare --json self: all diff_pct 0" || fail "compare --json self: $(cat "$T/self.json")"
# two different plans: stage 3 gathers, stage 2 does not; the step times differ
"$DTPLAN" compare "$T/s2.trace.json" "$tr" >"$T/diff.txt" || fail "compare s2 s3"
grep -q '^  allgather .*only B\|^  allgather .*[1-9][0-9.]*%' "$T/diff.txt" || fail "compare: allgather shows no difference: $(cat "$T/diff.txt")"
step_line=$(grep '^  step time' "$T/diff.txt")
echo "$step_line" | grep -q '+0\.0%' && fail "compare: identical step times for stage 2 and 3: $step_line" ||
    ok "compare s2 vs s3: $step_line"

# ---- estimate / solve --plot ----
"$DTPLAN" estimate --params 32B --gpus 8 --mem 80G --plot "$T/mem.png" >/dev/null || fail "estimate --plot"
is_png "$T/mem.png"
"$DTPLAN" estimate --params 32B --gpus 8 --mem 80G --plot "$T/mem.svg" >/dev/null || fail "estimate --plot svg"
is_svg "$T/mem.svg"
"$DTPLAN" solve --params 32B --gpus 8 --mem 80G --plot "$T/cands.png" >/dev/null || fail "solve --plot"
is_png "$T/cands.png"
"$DTPLAN" solve --params 32B --gpus 8 --mem 80G --plot "$T/cands.svg" >/dev/null || fail "solve --plot svg"
is_svg "$T/cands.svg"
# a chart name that is not .png/.svg is refused before any work (nothing on stdout)
bad "--plot: '$T/mem.gif' must end in .png or .svg (e.g. --plot mem.png)" "$DTPLAN" estimate --params 32B --gpus 8 --plot "$T/mem.gif"
[ -s "$T/out" ] && fail "estimate --plot mem.gif printed the table before failing"
bad "--plot: '$T/c.gif' must end in .png or .svg" "$DTPLAN" solve --params 32B --gpus 8 --mem 80G --plot "$T/c.gif"
[ -s "$T/out" ] && fail "solve --plot c.gif printed before failing"

# ---- report on a real run ----
"$DTRUN" "$SRC/configs/plans/tiny-cpu.json" --out "$T/run" --max-steps 12 --no-progress --quiet >/dev/null 2>&1 ||
    fail "dtrun tiny-cpu"
# the same plan with its log: its profile (the built-in cpu) measured nothing of this machine,
# so a step further than 15 % from the prediction comes with one line on how to calibrate
"$DTRUN" "$SRC/configs/plans/tiny-cpu.json" --out "$T/runh" --max-steps 12 --no-progress >/dev/null 2>"$T/err" ||
    fail "dtrun tiny-cpu (logged): $(cat "$T/err")"
python3 - "$T/err" <<'PY' && ok "dtrun hints at calibrate exactly when an unmeasured profile missed the step by > 15 %" ||
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"step ([0-9.]+) ms \(predicted ([0-9.]+) ms\)", text)
assert m, "no done line: " + text
off = float(m.group(1)) / float(m.group(2)) - 1
h = re.search(r"the step was ([0-9]+)% (below|above) the prediction of profile 'cpu', which holds no measurement", text)
if abs(off) > 0.16:
    assert h and "dtplan calibrate -o local.json" in text, "no hint at %+.0f %%: %s" % (off * 100, text)
    assert abs(int(h.group(1)) - abs(off) * 100) < 2 and h.group(2) == ("below" if off < 0 else "above"), text
elif abs(off) < 0.14:
    assert not h, "hint at %+.0f %%: %s" % (off * 100, text)
PY
    fail "dtrun's calibrate hint: $(cat "$T/err")"
# deterministic: a copy of the built-in profile 1000x slower predicts ~1000x the step (still
# far above it under the sanitizers, which slow the run ~25x)
sed -e 's/"name": "cpu"/"name": "slowcpu"/' -e 's/"fp32": 1.2e11/"fp32": 1.2e8/' -e 's/"attention_flops": 2e10/"attention_flops": 2e7/' \
    -e 's/"elementwise_bw": 1.1e10/"elementwise_bw": 1.1e7/' "$SRC/configs/hardware/cpu.json" >"$T/slowcpu.json"
"$DTPLAN" solve --mem 1G --model gpt2-tiny --seq 64 --precision fp32 --steps 12 --hardware "$T/slowcpu.json" \
    --out "$T/runs" -o "$T/slowplan.json" >"$T/out" 2>&1 || fail "solve on slowcpu: $(cat "$T/out")"
"$DTRUN" "$T/slowplan.json" --no-progress >/dev/null 2>"$T/err" || fail "dtrun on slowcpu: $(cat "$T/err")"
grep -q "dtrun: the step was [0-9]*% below the prediction of profile 'slowcpu', which holds no measurement of this machine: \`dtplan calibrate -o local.json\`" "$T/err" &&
    ok "a run far faster than its unmeasured profile predicts says how to calibrate" ||
    fail "no calibrate hint for a far-off unmeasured profile: $(cat "$T/err")"
"$DTPLAN" report "$T/run" >"$T/report.out" || fail "report: $(cat "$T/report.out")"
for f in loss throughput memory steptime; do is_png "$T/run/report/$f.png"; done
md="$T/run/report/report.md"
for f in loss throughput memory steptime; do grep -q "($f.png)" "$md" || fail "report.md does not embed $f.png"; done
grep -q '^| activations (MiB) | [0-9.]* | [0-9.]* | [-+][0-9.]* % |$' "$md" || fail "report.md: no activations row"
grep -q '^| step time (ms) |' "$md" || fail "report.md: no step time row"
ok "report.md with table and 4 charts"
"$DTPLAN" report "$T/run" -o "$T/rep2" >/dev/null && [ -s "$T/rep2/report.md" ] && is_png "$T/rep2/loss.png" ||
    fail "report -o"

# ---- bad inputs ----
bad "needs two traces" "$DTPLAN" compare "$tr"
bad "nope.json" "$DTPLAN" compare "$T/nope.json" "$tr"
echo '{"a": 1}' >"$T/notrace.json"
bad "not a trace" "$DTPLAN" compare "$T/notrace.json" "$tr"
head -c 300 "$tr" >"$T/trunc.json"
bad "trunc.json" "$DTPLAN" compare "$tr" "$T/trunc.json"
echo '{"traceEvents": []}' >"$T/empty.json"
bad "no \"X\" spans" "$DTPLAN" compare "$T/empty.json" "$tr"
bad "unknown option" "$DTPLAN" compare --bogus "$tr" "$tr"
bad "not a directory" "$DTPLAN" report "$T/missing-dir"
bad "no run directory" "$DTPLAN" report
mkdir -p "$T/badrun"
bad "metrics.jsonl" "$DTPLAN" report "$T/badrun"
cp "$T/run/metrics.jsonl" "$T/badrun/metrics.jsonl"
cp "$T/run/run-report.json" "$T/badrun/run-report.json"
sed -i '3s/.*/{"step": 3, "loss": /' "$T/badrun/metrics.jsonl"
bad "metrics.jsonl:3:" "$DTPLAN" report "$T/badrun"
cp "$T/run/metrics.jsonl" "$T/badrun/metrics.jsonl"
sed -i '5s/"loss": [0-9.]*,//' "$T/badrun/metrics.jsonl"
bad "metrics.jsonl:5: .*numeric step, loss" "$DTPLAN" report "$T/badrun"
cp "$T/run/metrics.jsonl" "$T/badrun/metrics.jsonl"
head -c 200 "$T/run/run-report.json" >"$T/badrun/run-report.json"
bad "run-report.json" "$DTPLAN" report "$T/badrun"
echo '{"format": "x"}' >"$T/badrun/run-report.json"
bad "not a dtrun run report" "$DTPLAN" report "$T/badrun"

# ---- calibrate --plan: the engine's kernels at a plan's shapes (docs/hardware.md) ----
if "$DTPLAN" calibrate --no-mpi -o "$T/cal.json" --plan "$SRC/configs/plans/tiny-cpu.json" >"$T/out" 2>&1; then
    # every kernel-level field present and positive; the source names the plan's shapes
    if grep -q '"attention_flops"' "$T/cal.json" && grep -q '"elementwise_bw"' "$T/cal.json" &&
        grep -q '"op_overhead_s"' "$T/cal.json" && grep -q 'gpt2-tiny, 512 tokens' "$T/cal.json" &&
        grep -q 'B=8 T=64 C=64 H=4 F=256 V=256' "$T/cal.json"; then
        ok "calibrate --plan: $(cat "$T/out")"
    else
        fail "calibrate --plan wrote no kernel-level fields or other shapes: $(cat "$T/cal.json")"
    fi
    # in situ: the engine's forward + backward ran on every core and the rates were fitted to them
    # (calibrate itself checks that the composition with the fitted rates gives the measured times)
    NC=$(nproc)
    if grep -Eq "in situ: engine forward [0-9.]+ ms, backward [0-9.]+ ms on one core \\($NC of $NC cores fitted\\)" \
        "$T/cal.json" && grep -Eq 'FLOP-term times x[0-9]+\.[0-9]+, element-wise x[0-9]+\.[0-9]+' "$T/cal.json"; then
        ok "calibrate --plan fitted the rates to the engine's forward + backward on $NC cores"
    else
        fail "calibrate --plan: no in-situ fit on $NC cores in the source: $(grep -o '"source".*' "$T/cal.json")"
    fi
    # the probes are timed on each thread's CPU time (load-robust; docs/time-model.md "At GPT-2 124M-774M")
    grep -q 'interleaved repeats per core (thread CPU time)' "$T/cal.json" &&
        ok "calibrate timed the probes on thread CPU time" ||
        fail "calibrate: the source does not name the thread CPU clock: $(grep -o '"source".*' "$T/cal.json")"
    # threads of one rank: measured on every core (2+), an efficiency in (0, 1] with the core count
    if [ "$NC" -ge 2 ]; then
        python3 - "$T/cal.json" "$NC" <<'PY' && ok "calibrate measured the threads of one rank" ||
import json, re, sys
h, nc = json.load(open(sys.argv[1])), int(sys.argv[2])
e, c = h.get("thread_efficiency", 0), h.get("thread_cores", 0)
m = re.search(r"([0-9.]+) ms on 1 thread, ([0-9.]+) ms on (\d+) \(wall clock\), efficiency ([0-9.]+)", h["source"])
ok = 0 < e <= 1 and c == nc and m and int(m.group(3)) == nc and \
     abs(min(1.0, float(m.group(1)) / (nc * float(m.group(2)))) - e) < 2e-3
sys.exit(0 if ok else 1)
PY
            fail "calibrate: thread_efficiency / thread_cores / source wrong: $(grep -E 'thread_|ms on 1 thread' "$T/cal.json")"
    fi
    # the profile is usable: simulate the plan on it (through a solve on the profile)
    "$DTPLAN" solve --mem 2G --model gpt2-tiny --gpus 2 --seq 64 --hardware "$T/cal.json" -o "$T/calplan.json" \
        >"$T/out" 2>&1 && "$DTPLAN" simulate "$T/calplan.json" >"$T/out" 2>&1 &&
        ok "simulate on the calibrated profile" || fail "solve/simulate on the calibrated profile: $(cat "$T/out")"
    # a run on a measured profile never gets the calibrate hint, however far off the step
    "$DTPLAN" solve --mem 2G --model gpt2-tiny --seq 64 --steps 12 --hardware "$T/cal.json" \
        --out "$T/runc" -o "$T/calplan1.json" >"$T/out" 2>&1 || fail "solve on the calibrated profile: $(cat "$T/out")"
    "$DTRUN" "$T/calplan1.json" --no-progress >/dev/null 2>"$T/err" || fail "dtrun on the calibrated profile: $(cat "$T/err")"
    grep -q 'dtrun: done:' "$T/err" && ! grep -q 'holds no measurement' "$T/err" &&
        ok "no calibrate hint on a calibrated profile" || fail "calibrated profile's run: $(cat "$T/err")"
else
    fail "calibrate --plan: $(cat "$T/out")"
fi
# with MPI (calibrate relaunches itself under mpirun -n 2): the engine's collectives
# measured one by one, as a ZeRO step runs them (docs/hardware.md "Calibration")
command -v mpirun >/dev/null || fail "mpirun missing: calibrate's collectives are not tested"
if "$DTPLAN" calibrate -o "$T/calm.json" --plan "$SRC/configs/plans/tiny-cpu.json" >"$T/out" 2>&1; then
    python3 - "$T/calm.json" <<'PY' && ok "calibrate measured all-reduce, reduce-scatter and all-gather: $(grep -o 'busbw all-reduce[^;]*' "$T/out")" ||
import json, sys
h = json.load(open(sys.argv[1]))
ok = all(h.get(k, 0) > 0 for k in ("intra_busbw", "intra_busbw_reduce_scatter", "intra_busbw_allgather")) and \
     "the engine's all-reduce, reduce-scatter and all-gather (dt_comm" in h["source"] and "on 2 rank(s)" in h["source"]
sys.exit(0 if ok else 1)
PY
        fail "calibrate under MPI: per-collective busbw missing: $(grep -E 'busbw|source' "$T/calm.json")"
else
    fail "calibrate under MPI: $(cat "$T/out")"
fi
bad "cannot open" "$DTPLAN" calibrate --no-mpi -o "$T/cal2.json" --plan "$T/missing.json"
bad "needs a value" "$DTPLAN" calibrate --no-mpi -o "$T/cal2.json" --plan
[ ! -e "$T/cal2.json" ] && ok "calibrate wrote nothing on bad input" || fail "calibrate wrote $T/cal2.json on bad input"
# -o: a user's file is never replaced (refused before any measuring), a FIFO neither; an
# earlier calibration may be (the MPI run above wrote calm.json: recalibrate into it)
printf '{"my": "profile"}\n' >"$T/mine.json"
bad "exists and is not a profile calibrate wrote" "$DTPLAN" calibrate --no-mpi -o "$T/mine.json"
[ "$(cat "$T/mine.json")" = '{"my": "profile"}' ] && ok "calibrate left the user's file at -o as it was" ||
    fail "calibrate changed the user's file at -o: $(cat "$T/mine.json")"
mkfifo "$T/fifo.json"
bad "not a regular file" "$DTPLAN" calibrate --no-mpi -o "$T/fifo.json"
if "$DTPLAN" calibrate --no-mpi -o "$T/calm.json" --plan "$SRC/configs/plans/tiny-cpu.json" >"$T/out" 2>&1 &&
    ! grep -q "on 2 rank(s)" "$T/calm.json"; then
    ok "calibrate replaced its own earlier profile"
else
    fail "recalibrating into calibrate's own profile: $(cat "$T/out")"
fi
ls "$T" | grep -q '\.tmp' && fail "calibrate left a temporary file: $(ls "$T")" || ok "no temporary file left"

[ $FAILS -eq 0 ] && echo "all passed" || echo "$FAILS failure(s)"
[ $FAILS -eq 0 ]
