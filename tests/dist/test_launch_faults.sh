#!/bin/bash
# dtrun's own launch and failure handling end to end (docs/launch.md §4,
# docs/dtrun.md "Failure tests"), on gpt2-tiny CPU ranks:
#  1. `dtrun plan.json` with a 2-rank stage-2 plan starts both ranks itself
#     (no mpirun on the command line) and trains.
#  2. DT_TEST_KILL_RANK=1 DT_TEST_KILL_STEP=7: rank 1 dies by SIGKILL mid-step;
#     dtrun exits non-zero within --timeout naming rank 1, no process of the
#     run remains, the last complete checkpoint (step 4) resumes on the same
#     world bitwise (losses and final weights) and on world 1 within 1e-5.
#  3. DT_TEST_HANG_RANK/STEP: a rank sleeps instead of communicating; the
#     others name it from the heartbeats within the timeout (dtrun's spawner,
#     and plain mpirun -n 4).
#  4. A launched world that disagrees with the plan: exit 2, both numbers.
#  5. Resume on a smaller world (4 -> 2 -> 1) equals the uninterrupted run
#     within fp32 tolerance (test_zero.sh covers 2 -> 4 and stage changes).
# Usage: test_launch_faults.sh DTPLAN DTRUN SRCDIR
set -u
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3 mpirun pgrep
export OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/dt_test_faults_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok   $*"; }
TIMEOUT=10     # --timeout for the kill runs, seconds
HANG_TIMEOUT=5 # --timeout for the hang runs (each waits it out in full)
SLACK=8        # seconds allowed on top of it (teardown grace, diagnosis, start-up)

# plan STAGE WORLD OUT: gpt2-tiny, 16 sequences per step at every world size, checkpoint every 4 steps
plan() {
    python3 - "$SRC/configs/plans/tiny-cpu.json" "$@" <<'PY'
import json, sys
src, stage, world, out = sys.argv[1:]
p = json.load(open(src))
w = int(world)
p["parallel"].update(zero_stage=int(stage), world_size=w)
p["cluster"]["gpus_per_node"] = w
p["batch"].update(micro_batch=4, grad_accum=16 // 4 // w, global_batch=16)
p["data"]["eval_interval"] = 0
p["output"]["save_interval"] = 4
json.dump(p, open(out, "w"), indent=2)
PY
}
# losses STEP_FROM STEP_TO METRICS: the loss column of those steps (the last record of each step)
losses() {
    python3 - "$@" <<'PY'
import json, sys
a, b, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
by = {}
for l in open(path):
    r = json.loads(l); by[r["step"]] = r["loss"]
print(" ".join(repr(by.get(s)) for s in range(a, b + 1)))
PY
}
# close A B: every loss within relative 1e-5
close() {
    python3 -c "
import sys
a, b = sys.argv[1].split(), sys.argv[2].split()
d = max(abs(float(x) - float(y)) / abs(float(x)) for x, y in zip(a, b)) if len(a) == len(b) and 'None' not in a + b else 1
print(f'max relative difference {d:.3g}'); sys.exit(0 if d <= 1e-5 else 1)" "$1" "$2"
}
# leftovers: processes whose command line names this test's directory
leftovers() { pgrep -f "$TMP/" || true; }

plan 2 2 "$TMP/p2.json"
plan 0 1 "$TMP/p1.json"
plan 2 4 "$TMP/p4.json"

# 1. dtrun's own spawning: the reference run for what follows
"$DTRUN" "$TMP/p2.json" --out "$TMP/straight" --max-steps 12 --quiet 2>"$TMP/err" || fail "dtrun p2.json exited $?: $(cat "$TMP/err")"
[ "$(wc -l <"$TMP/straight/metrics.jsonl" 2>/dev/null)" = 12 ] || fail "spawned run: metrics.jsonl lacks 12 steps"
[ -f "$TMP/straight/run-report-rank00001.json" ] || fail "spawned run: rank 1 did not report (one rank ran?)"
grep -q "state=done" "$TMP/straight/hb/rank-1" 2>/dev/null || fail "spawned run: no clean heartbeat for rank 1"
python3 -c "import json,sys; r=json.load(open('$TMP/straight/run-report.json')); sys.exit(0 if r['comm']['equal'] else 1)" ||
    fail "spawned run: bytes per collective differ from the plan"
[ $FAIL = 0 ] && ok "dtrun p2.json: 2 ranks spawned, stage 2, 12 steps"

# 2. kill rank 1 in step 7 (checkpoints at 4 and 8: step 4 is the last complete one)
t0=$(date +%s.%N)
DT_TEST_KILL_RANK=1 DT_TEST_KILL_STEP=7 "$DTRUN" "$TMP/p2.json" --out "$TMP/killed" --max-steps 12 --timeout $TIMEOUT \
    --quiet 2>"$TMP/err"
rc=$?
el=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
[ $rc -ne 0 ] || fail "kill: dtrun exited 0"
grep -q "^dtrun: rank 1 (pid [0-9]*, host .*) was killed by signal 9" "$TMP/err" || fail "kill: rank 1 not named: $(cat "$TMP/err")"
python3 -c "import sys; sys.exit(0 if $el <= $TIMEOUT + $SLACK else 1)" || fail "kill: took ${el} s (timeout $TIMEOUT s)"
sleep 0.5
[ -z "$(leftovers)" ] || fail "kill: processes remain: $(pgrep -af "$TMP/")"
[ -f "$TMP/killed/ckpt-00000004/model.safetensors" ] || fail "kill: no complete checkpoint at step 4"
[ -e "$TMP/killed/ckpt-00000008" ] && fail "kill: a checkpoint past the kill exists"
echo "     kill: rc $rc after ${el} s: $(head -1 "$TMP/err")"
cp -r "$TMP/killed" "$TMP/killed-w1"
# resume, same world: bitwise
"$DTRUN" "$TMP/p2.json" --out "$TMP/killed" --max-steps 12 --resume --quiet 2>"$TMP/err" || fail "resume after kill exited $?: $(cat "$TMP/err")"
want=$(losses 5 12 "$TMP/straight/metrics.jsonl")
got=$(losses 5 12 "$TMP/killed/metrics.jsonl")
if [ "$want" = "$got" ] && cmp -s "$TMP/straight/ckpt-00000012/model.safetensors" "$TMP/killed/ckpt-00000012/model.safetensors"; then
    ok "kill rank 1 at step 7, resume from step 4 on 2 ranks: losses 5..12 and final weights bitwise"
else fail "resume after kill is not bitwise: want $want got $got"; fi
# resume on world 1 (resharding the step-4 checkpoint)
"$DTRUN" "$TMP/p1.json" --out "$TMP/killed-w1" --max-steps 12 --resume --quiet 2>"$TMP/err" || fail "resume on 1 rank exited $?: $(cat "$TMP/err")"
d=$(close "$want" "$(losses 5 12 "$TMP/killed-w1/metrics.jsonl")") && ok "resume after kill on 1 rank: $d" ||
    fail "resume after kill on 1 rank: $d"

# 3. hung rank: dtrun's spawner (2 ranks), then plain mpirun (4 ranks, rank 2 hangs)
hang() {  # LABEL RANK STEP -- command...
    local label=$1 r=$2 s=$3
    shift 4
    t0=$(date +%s.%N)
    DT_TEST_HANG_RANK=$r DT_TEST_HANG_STEP=$s "$@" --max-steps 12 --timeout $HANG_TIMEOUT --quiet >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    el=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
    local line
    line=$(grep -m1 "did not complete within $HANG_TIMEOUT s" "$TMP/err")
    [ $rc -ne 0 ] || fail "$label: exited 0"
    echo "$line" | grep -q "heartbeats: rank $r last beat [0-9]* s ago at step $s " ||
        fail "$label: rank $r not named: $(cat "$TMP/err")"
    python3 -c "import sys; sys.exit(0 if $el <= $HANG_TIMEOUT + $SLACK else 1)" || fail "$label: took ${el} s (timeout $HANG_TIMEOUT s)"
    sleep 0.5
    [ -z "$(leftovers)" ] || fail "$label: processes remain: $(pgrep -af "$TMP/")"
    echo "     $label: rc $rc after ${el} s: $line"
}
f0=$FAIL
hang "hang (dtrun, 2 ranks)" 1 3 -- "$DTRUN" "$TMP/p2.json" --out "$TMP/hung2"
hang "hang (mpirun -n 4)" 2 5 -- mpirun -n 4 --oversubscribe "$DTRUN" "$TMP/p4.json" --out "$TMP/hung4"
[ $FAIL = $f0 ] && ok "hung rank named by the others within the timeout, no process left"

# 4. launched world vs plan
msg=$(mpirun -n 2 --oversubscribe "$DTRUN" "$TMP/p4.json" --out "$TMP/mm" --quiet 2>&1); rc=$?
[ $rc = 2 ] && [ "$(echo "$msg" | grep -c '^dtrun:')" = 1 ] &&
    echo "$msg" | grep -q "^dtrun: the plan wants world_size 4 (1 node(s) x 4 ranks) but mpirun started 2 rank(s)" &&
    ok "mpirun -n 2 with a 4-rank plan: exit 2, one line" || fail "world mismatch under mpirun (rc $rc): $msg"
msg=$("$DTRUN" --nproc-per-node 4 "$TMP/p2.json" --out "$TMP/mm" --quiet 2>&1); rc=$?
[ $rc = 2 ] && echo "$msg" | grep -q "plan wants world_size 2 .* give 4 rank" &&
    ok "--nproc-per-node 4 with a 2-rank plan: exit 2" || fail "--nproc-per-node mismatch (rc $rc): $msg"
[ -e "$TMP/mm" ] && fail "a refused launch wrote $TMP/mm"

# 5. resume on smaller worlds: 4 ranks to step 4, 2 ranks to 8, 1 rank to 12 vs the uninterrupted 2-rank run
"$DTRUN" "$TMP/p4.json" --out "$TMP/shrink" --max-steps 4 --quiet &&
    "$DTRUN" "$TMP/p2.json" --out "$TMP/shrink" --max-steps 8 --resume --quiet &&
    "$DTRUN" "$TMP/p1.json" --out "$TMP/shrink" --max-steps 12 --resume --quiet || fail "shrinking resume runs failed"
d=$(close "$(losses 1 12 "$TMP/straight/metrics.jsonl")" "$(losses 1 12 "$TMP/shrink/metrics.jsonl")") &&
    ok "resume 4 -> 2 -> 1 ranks: $d" || fail "resume 4 -> 2 -> 1 ranks: $d"
exit $FAIL
