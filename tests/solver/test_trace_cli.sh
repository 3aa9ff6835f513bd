#!/bin/bash
# dtrun --trace: a traced 2-step, 2-rank run writes a Chrome trace in the
# simulator's format that `dtplan compare` reads next to `dtplan simulate --trace`
# (per-phase differences printed). Timing values are not asserted (shared machine);
# the structure is. Bad input: --trace without a value, an unwritable path.
# Usage: test_trace_cli.sh DTPLAN DTRUN SRC_DIR
set -u
DTPLAN=$1 DTRUN=$2 SRC=$3
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v mpirun >/dev/null || { echo "FAIL: mpirun missing (scripts/setup.sh installs openmpi-bin)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# tiny-cpu as a 2-rank ZeRO-2 plan, short sequences so the run takes well under a second
jq '.parallel.world_size=2 | .cluster.gpus_per_node=2 | .parallel.zero_stage=2
    | .batch.global_batch=(.batch.micro_batch*.batch.grad_accum*2) | .batch.seq_len=32
    | .prediction={"valid":false}' "$SRC/configs/plans/tiny-cpu.json" > "$W/plan.json" || fail "jq"

"$DTRUN" "$W/plan.json" --out "$W/run" --max-steps 2 --quiet --trace "$W/run.json" || fail "traced run"
[ -s "$W/run.json" ] || fail "no trace written"
ls "$W"/run.json.rank* 2>/dev/null && fail "part files left behind"
# structure: both ranks, the simulator's names and streams, one optimizer span per step per rank
jq -e '.traceEvents | map(select(.ph=="X")) | (map(.pid)|unique) == [0,1]' "$W/run.json" >/dev/null || fail "pids"
for n in forward backward reduce_scatter allgather allreduce optimizer; do
    jq -e --arg n "$n" '[.traceEvents[] | select(.ph=="X" and .name==$n)] | length > 0' "$W/run.json" >/dev/null ||
        fail "no $n span"
done
jq -e '[.traceEvents[] | select(.ph=="X" and .name=="optimizer")] | length == 4' "$W/run.json" >/dev/null ||
    fail "optimizer spans != 2 steps x 2 ranks"
jq -e '[.traceEvents[] | select(.ph=="X" and .name=="forward" and .cat=="compute" and .tid==0
        and .args.unit=="block.1" and .args.micro==1)] | length == 4' "$W/run.json" >/dev/null ||
    fail "forward of block.1 in micro-step 1: want 2 steps x 2 ranks"
jq -e '[.traceEvents[] | select(.ph=="X" and .name=="reduce_scatter")] | all(.cat=="comm" and .tid==1 and .args.bytes>0)' \
    "$W/run.json" >/dev/null || fail "reduce_scatter spans on the comm stream with bytes"
jq -e '[.traceEvents[] | select(.ph=="X")] | all(.dur >= 0 and .ts >= 0)' "$W/run.json" >/dev/null || fail "times"

"$DTPLAN" simulate "$W/plan.json" --trace "$W/sim.json" >/dev/null || fail "simulate"
out=$("$DTPLAN" compare "$W/sim.json" "$W/run.json") || fail "compare exit $?"
echo "$out"
echo "$out" | grep -q "(2 rank(s), 2 step(s))" || fail "compare did not see 2 ranks x 2 steps"
for n in forward backward reduce_scatter allgather optimizer "step time"; do
    echo "$out" | grep -Eq "^  $n +[0-9.]+ +[0-9.]+ +[-+][0-9.]+%" || fail "compare: no $n row with a difference"
done
"$DTPLAN" compare "$W/sim.json" "$W/run.json" --json | jq -e '.step.b_steps == 2 and .step.b_ranks == 2' >/dev/null ||
    fail "compare --json"

# bad input: one line, exit 2
"$DTRUN" "$W/plan.json" --out "$W/run2" --trace 2>"$W/err"; rc=$?
[ $rc -eq 2 ] || fail "--trace without a value: exit $rc"
# an unwritable trace path fails the run with a message naming it
jq '.parallel.world_size=1 | .cluster.gpus_per_node=1 | .batch.global_batch=(.batch.micro_batch*.batch.grad_accum)' \
    "$W/plan.json" > "$W/plan1.json"
"$DTRUN" "$W/plan1.json" --out "$W/run3" --max-steps 1 --quiet --trace "$W/no/such/dir/t.json" 2>"$W/err"; rc=$?
[ $rc -ne 0 ] || fail "unwritable trace path accepted"
grep -q "no/such/dir" "$W/err" || fail "error does not name the path: $(cat "$W/err")"
# untraced runs write no trace
"$DTRUN" "$W/plan1.json" --out "$W/run4" --max-steps 1 --quiet || fail "untraced run"
ls "$W"/run4/*.json.rank* "$W"/*.part 2>/dev/null && fail "untraced run left trace files"
echo "PASS"
