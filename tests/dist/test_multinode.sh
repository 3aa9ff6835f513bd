#!/bin/bash
# Multi-node CPU launches without mpirun (docs/launch.md §3 "MPI world without
# mpirun"), two "nodes" on this machine:
#  1. `dtrun --nnodes 2 --node-rank R --nproc-per-node M --master-addr A
#     --master-port P plan.json` on each node: 2 x 2 ranks at stage 3 and
#     2 x 1 ranks at stage 1 with optimizer offload train with the world-1
#     loss trajectory (relative 1e-5) and the plan's bytes per collective.
#  2. Ranks started with torchrun's variables (what `torchrun --no-python`
#     sets; real torchrun too when it is installed) do the same.
#  3. A rank on node 1 killed mid-step: node 1's agent names it, node 0's ranks
#     stop within --timeout, no process of the run is left, and the last
#     checkpoint resumes on the same 2 x 2 launch bitwise.
#  4. A node that never comes, and a missing ompi-server: one clear line, non-zero.
# Usage: test_multinode.sh DTPLAN DTRUN SRCDIR
set -u
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3 pgrep ompi-server
export OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/dt_test_multinode_XXXXXX)
trap 'pkill -KILL -f "$TMP" 2>/dev/null; rm -rf "$TMP"' EXIT
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok   $*"; }
STEPS=8
TIMEOUT=10     # --timeout of the failure runs, seconds
SLACK=10       # on top of it: teardown grace, start-up
# a port per launch, away from other tests' (launch tests use 29500-29999) and below
# Linux's ephemeral range (32768-60999), where MPI's own TCP connections and
# ompi-server get their ports and a fixed choice could collide with them
PORT=$((21000 + $$ % 400 * 20))
next_port() { PORT=$((PORT + 3)); }

# plan STAGE NODES GPN OFFLOAD OUT: gpt2-tiny, 16 sequences per step at every world size
plan() {
    python3 - "$SRC/configs/plans/tiny-cpu.json" "$@" <<'PY'
import json, sys
src, stage, nodes, gpn, oo, out = sys.argv[1:]
p = json.load(open(src))
w = int(nodes) * int(gpn)
p["parallel"].update(zero_stage=int(stage), world_size=w, offload_optimizer=oo)
p["cluster"].update(nodes=int(nodes), gpus_per_node=int(gpn))
p["batch"].update(micro_batch=4, grad_accum=16 // 4 // w, global_batch=16)
p["data"]["eval_interval"] = 0
p["output"]["save_interval"] = 4
json.dump(p, open(out, "w"), indent=2)
PY
}

# same BASE OUT LABEL [exact]: loss per step equal (relative 1e-5, or bitwise) and comm bytes as planned
same() {
    python3 - "$@" <<'PY'
import json, sys, glob
base, out, label = sys.argv[1:4]
exact = len(sys.argv) > 4
def losses(d):
    by = {}
    for l in open(d + "/metrics.jsonl"):
        r = json.loads(l); by[r["step"]] = r["loss"]
    return by
a, b = losses(base), losses(out)
bad = []
if sorted(a) != sorted(b): bad.append(f"steps {sorted(b)} vs {sorted(a)}")
for s in a:
    if s in b and (a[s] != b[s] if exact else abs(a[s] - b[s]) > 1e-5 * abs(a[s])):
        bad.append(f"step {s}: loss {b[s]!r} vs {a[s]!r}")
for rp in glob.glob(out + "/run-report*.json"):
    c = json.load(open(rp))["comm"]
    if not c["equal"]: bad.append(f"{rp}: comm bytes differ from the plan")
print(("FAIL: " if bad else "ok   ") + label + ("" if not bad else ": " + "; ".join(bad)))
sys.exit(1 if bad else 0)
PY
}

# pair NAME LAUNCH: two "nodes" at once — `LAUNCH 0` and `LAUNCH 1` in parallel, with
# output in NAME.node-R.log, exit code in NAME.node-R.rc, end time in NAME.node-R.end;
# then the next launch gets fresh ports
pair() {
    local name=$1 launch=$2 pids=() r
    for r in 0 1; do
        ( "$launch" "$r" >"$name.node-$r.log" 2>&1; echo $? >"$name.node-$r.rc"; date +%s.%N >"$name.node-$r.end" ) &
        pids+=($!)
    done
    wait "${pids[@]}"
    next_port
}
both_ok() { [ "$(cat "$1.node-0.rc")$(cat "$1.node-1.rc")" = 00 ]; }
codes() { echo "exited $(cat "$1.node-0.rc") / $(cat "$1.node-1.rc"): $(cat "$1".node-*.log)"; }

# agents NPROC PLAN OUT [args...]: a dtrun node agent on each of the two nodes (pair)
agents() {
    A_NP=$1 A_PLAN=$2 A_OUT=$3
    shift 3
    A_ARGS=("$@")
    pair "$A_OUT" agent
}
agent() {
    "$DTRUN" --nnodes 2 --node-rank "$1" --nproc-per-node "$A_NP" --master-addr 127.0.0.1 --master-port "$PORT" \
        "$A_PLAN" --out "$A_OUT" --quiet --max-steps $STEPS "${A_ARGS[@]}"
}

# ---- world-1 reference -------------------------------------------------------
plan 0 1 1 none "$TMP/w1.json"
"$DTRUN" "$TMP/w1.json" --out "$TMP/base" --quiet --max-steps $STEPS || fail "world-1 run failed"

# ---- 1. node agents ------------------------------------------------------------
plan 3 2 2 none "$TMP/s3.json"
agents 2 "$TMP/s3.json" "$TMP/s3"
if both_ok "$TMP/s3"; then
    same "$TMP/base" "$TMP/s3" "2 nodes x 2 ranks, stage 3, via --nnodes/--node-rank" || FAIL=1
    n=$(ls "$TMP/s3"/run-report*.json | wc -l)
    [ "$n" = 4 ] || fail "2 x 2 run wrote $n run reports, expected 4"
else
    fail "2 x 2 stage-3 agents $(codes "$TMP/s3")"
fi
plan 1 2 1 cpu "$TMP/s1.json"
agents 1 "$TMP/s1.json" "$TMP/s1"
if both_ok "$TMP/s1"; then
    same "$TMP/base" "$TMP/s1" "2 nodes x 1 rank, stage 1, optimizer offload cpu" || FAIL=1
else
    fail "2 x 1 stage-1 agents $(codes "$TMP/s1")"
fi

# ---- 2. ranks with torchrun's variables ------------------------------------------
plan 2 2 1 none "$TMP/s2.json"
torchrun_vars() {
    env RANK=$1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=$1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
        "$DTRUN" "$TMP/s2.json" --out "$TMP/tr" --quiet --max-steps $STEPS
}
pair "$TMP/tr" torchrun_vars
if both_ok "$TMP/tr"; then
    same "$TMP/base" "$TMP/tr" "2 ranks from torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR/PORT), stage 2" || FAIL=1
else
    fail "torchrun-variable ranks $(codes "$TMP/tr")"
fi
if command -v torchrun >/dev/null; then
    real_torchrun() {
        torchrun --no-python --nnodes 2 --node-rank "$1" --nproc-per-node 1 --master-addr 127.0.0.1 \
            --master-port $PORT "$DTRUN" "$TMP/s2.json" --out "$TMP/trr" --quiet --max-steps $STEPS
    }
    pair "$TMP/trr" real_torchrun
    if both_ok "$TMP/trr"; then
        same "$TMP/base" "$TMP/trr" "real torchrun --no-python, 2 nodes x 1 rank" || FAIL=1
    else
        fail "torchrun --no-python $(codes "$TMP/trr")"
    fi
else
    echo "skip real torchrun (not installed)"
fi

# ---- 3. a rank dies on node 1 --------------------------------------------------
plan 2 2 2 none "$TMP/k.json"
STEPS=10 agents 2 "$TMP/k.json" "$TMP/full"
kill_on_node1() {   # node 1's second rank (global rank 3) dies by SIGKILL in step 7
    local kill_env=()
    [ "$1" = 1 ] && kill_env=(DT_TEST_KILL_RANK=3 DT_TEST_KILL_STEP=7)
    env "${kill_env[@]}" "$DTRUN" --nnodes 2 --node-rank "$1" --nproc-per-node 2 --master-addr 127.0.0.1 \
        --master-port $PORT "$TMP/k.json" --out "$TMP/killed" --quiet --max-steps 10 --timeout $TIMEOUT
}
pair "$TMP/killed" kill_on_node1
# node 1's agent ends right after the kill (it stops its own ranks); node 0's
# ranks must follow within the collective deadline
took=$(python3 -c "print(round($(cat "$TMP/killed.node-0.end") - $(cat "$TMP/killed.node-1.end"), 1))")
rc0=$(cat "$TMP/killed.node-0.rc") rc1=$(cat "$TMP/killed.node-1.rc")
[ "$rc0" != 0 ] && [ "$rc1" != 0 ] || fail "after a killed rank the agents exited $rc0 / $rc1 (both must fail)"
grep -q "^dtrun: rank 3 (pid [0-9]*, host .*) was killed by signal 9" "$TMP/killed.node-1.log" ||
    fail "node 1 does not name rank 3: $(cat "$TMP/killed.node-1.log")"
grep -q "did not complete within $TIMEOUT s" "$TMP/killed.node-0.log" ||
    fail "node 0's ranks do not report the collective timeout: $(cat "$TMP/killed.node-0.log")"
python3 -c "import sys; sys.exit(0 if $took < $TIMEOUT + $SLACK else 1)" ||
    fail "node 0 stopped $took s after node 1 (limit $TIMEOUT + $SLACK s)"
sleep 1
left=$(pgrep -f "$TMP/killed" | wc -l)
[ "$left" = 0 ] || fail "$left process(es) of the killed run remain: $(pgrep -af "$TMP/killed")"
[ -d "$TMP/killed/ckpt-00000004" ] || fail "no step-4 checkpoint survived the kill"
ok "rank 3 killed at step 7: both nodes exit non-zero (node 0 $took s after node 1), rank 3 named, nothing left"
STEPS=10 agents 2 "$TMP/k.json" "$TMP/killed" --resume
if both_ok "$TMP/killed"; then
    same "$TMP/full" "$TMP/killed" "resume from step 4 on the same 2 x 2 launch equals the uninterrupted run bitwise" exact || FAIL=1
else
    fail "resume $(codes "$TMP/killed")"
fi

# ---- 4. launch failures ----------------------------------------------------------
t0=$(date +%s)
"$DTRUN" --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port $PORT \
    "$TMP/s1.json" --out "$TMP/alone" --quiet --timeout 3 >"$TMP/alone.log" 2>&1
rc=$?
next_port
took=$(($(date +%s) - t0))
if [ $rc != 0 ] && grep -q "^dtrun: rank 1 did not connect to 127.0.0.1:[0-9]* within 3 s" "$TMP/alone.log" &&
    [ $took -lt $((3 + SLACK)) ]; then
    ok "node 1 never starts: exit $rc after $took s naming rank 1"
else
    fail "node 1 never starts: exit $rc after $took s: $(cat "$TMP/alone.log")"
fi
no_server() {
    env DT_OMPI_SERVER=/nonexistent/ompi-server "$DTRUN" --nnodes 2 --node-rank "$1" --nproc-per-node 1 \
        --master-addr 127.0.0.1 --master-port $PORT "$TMP/s1.json" --out "$TMP/noserver" --quiet --timeout 20
}
pair "$TMP/noserver" no_server
if [ "$(cat "$TMP/noserver.node-0.rc")" != 0 ] && [ "$(cat "$TMP/noserver.node-1.rc")" != 0 ] &&
    grep -q "^dtrun: cannot run /nonexistent/ompi-server, which a CPU run without mpirun needs" "$TMP/noserver.node-0.log" &&
    grep -q "rank 0 could not start ompi-server" "$TMP/noserver.node-1.log"; then
    ok "ompi-server missing: both nodes exit non-zero, the reason named"
else
    fail "ompi-server missing: $(codes "$TMP/noserver")"
fi
[ -e "$TMP/noserver" ] && fail "a failed launch created its output directory"

exit $FAIL
