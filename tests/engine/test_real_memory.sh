#!/usr/bin/env bash
# Real memory per phase in dtrun's run report (docs/dtrun.md "Real memory per
# phase"): gpt2-tiny on 1 and 2 ranks under ZeRO-0 and ZeRO-3 trains 2 steps
# and saves, then resumes for 2 more with a validation pass, so the resumed
# run passes through every phase (start-up, forward, backward, optimizer, eval,
# ckpt save, ckpt load, export). Every rank's report must have every phase with
# a real peak RSS > 0 (the kernel's figure), at least the tracked total of that
# phase less a tolerance, the runtime remainder = real - tracked, the plan's
# prediction for the phase next to it (the plan's terms + the CPU runtime term as
# it is in the phase: + MPI temporaries in backward / optimizer, + the I/O chunk
# in save / load and a resumed start-up; none above the plan's total);
# the compatibility keys ("measured") beside the
# new "tracked"; and the end-of-run text must show each rank's table with the
# runtime line. Usage: test_real_memory.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3 mpirun
dt_need_fortunes
export OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/dt_test_realmem_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0

# plan STAGE WORLD OUT: tiny-cpu at the given stage and world, validation every 2 steps
plan() {
    python3 - "$SRC/configs/plans/tiny-cpu.json" "$@" <<'PY'
import json, sys
src, stage, world, out = sys.argv[1:]
p = json.load(open(src))
w = int(world)
p["parallel"].update(zero_stage=int(stage), world_size=w)
p["cluster"]["gpus_per_node"] = w
p["batch"].update(micro_batch=4, grad_accum=4 // w, global_batch=16)
p["data"].update(eval_interval=2, eval_batches=2)
json.dump(p, open(out, "w"), indent=2)
PY
}

for world in 1 2; do
  for stage in 0 3; do
    label="world $world, ZeRO-$stage"
    pl=$TMP/plan-$world-$stage.json
    out=$TMP/run-$world-$stage
    plan "$stage" "$world" "$pl"
    if ! "$DTRUN" "$pl" --out "$out" --max-steps 2 --no-progress >"$TMP/log1" 2>&1; then
      echo "FAIL: $label: first run exited non-zero: $(tail -3 "$TMP/log1")"; fails=$((fails + 1)); continue
    fi
    if ! "$DTRUN" "$pl" --out "$out" --max-steps 4 --resume --no-progress >"$TMP/log2" 2>&1; then
      echo "FAIL: $label: resumed run exited non-zero: $(tail -3 "$TMP/log2")"; fails=$((fails + 1)); continue
    fi
    python3 - "$out" "$world" "$TMP/log2" "$label" <<'PY' || fails=$((fails + 1))
import json, sys
out, world, log, label = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
PHASES = ["startup", "forward", "backward", "optimizer", "eval", "ckpt_save", "ckpt_load", "export"]
CATS = ["params", "grads", "optimizer", "activations", "buffers"]
MIB = 1 << 20
bad = []
for r in range(world):
    path = out + ("/run-report.json" if r == 0 else "/run-report-rank%05d.json" % r)
    rep = json.load(open(path))
    # the count keeps its old key and has its own name now
    if rep.get("tracked") != {k: rep["measured"][k] for k in CATS + ["total"]} | {"host_total": rep["measured"]["host_total"]}:
        bad.append(f"rank {r}: 'tracked' differs from the compatibility key 'measured'")
    rm = rep.get("real_memory")
    if not rm:
        bad.append(f"rank {r}: no real_memory section"); continue
    if rm["probe"] not in ("reset", "sample"):
        bad.append(f"rank {r}: probe mode {rm['probe']} ({rm['note']})")
    pred = rm["predicted"]["rss_total"]
    if not pred or pred <= 0:
        bad.append(f"rank {r}: no predicted total ({rm['predicted']})")
    for ph in PHASES:
        e = rm["phases"].get(ph)
        if not e or e["runs"] < 1:
            bad.append(f"rank {r}: phase {ph} missing or never ran"); continue
        real, tr = e["real_peak_rss"], e["tracked"]
        if not real or real <= 0:
            bad.append(f"rank {r} {ph}: real peak {real}"); continue
        tot = tr["total"]
        if tot != sum(tr[c] for c in CATS):
            bad.append(f"rank {r} {ph}: tracked total {tot} != sum of categories")
        # resident: every tracked block is zero-filled, so the kernel counts it;
        # tolerance for the kernel's per-CPU RSS counters. The sampling fallback
        # (clear_refs refused) reads RSS at the phase's ends only: a lower bound
        tol = MIB + 0.02 * tot
        if rm["probe"] == "reset" and real < tot - tol:
            bad.append(f"rank {r} {ph}: real {real} < tracked {tot} - {tol:.0f}")
        if e["runtime"] != real - tot:
            bad.append(f"rank {r} {ph}: runtime {e['runtime']} != real - tracked {real - tot}")
        pp = rm["predicted"]
        want = pred
        if pp.get("per_phase"):
            rt = pp["runtime"]
            extra = {"backward": rt["comm"], "optimizer": rt["comm"], "ckpt_save": rt["io"],
                     "ckpt_load": rt["io"],
                     "startup": rt["io"] if rm["phases"]["ckpt_load"]["runs"] > 0 else 0}.get(ph, 0)
            want = pred - pp["reserve"] + rt["base"] + extra
            if want > pred:
                bad.append(f"rank {r} {ph}: the phase's prediction {want} exceeds the plan's total {pred}")
        else:   # every plan here is a CPU plan
            bad.append(f"rank {r}: a CPU plan without a per-phase prediction")
        if e["predicted_total"] != want or e["real_minus_predicted"] != real - want:
            bad.append(f"rank {r} {ph}: predicted {e['predicted_total']} (want {want}) / difference {e['real_minus_predicted']}")
    if rep["measured"]["peak_rss_bytes"] < max(rm["phases"][p]["real_peak_rss"] or 0 for p in PHASES):
        bad.append(f"rank {r}: whole-run peak RSS below a phase's peak")
# the end-of-run text (rank 0 prints every rank's table)
txt = open(log).read()
for r in range(world):
    if f"\nrank {r} " not in txt:
        bad.append(f"text: no table for rank {r}")
if txt.count("  runtime: code, libraries, MPI, allocator") != world:
    bad.append(f"text: {txt.count('  runtime: code, libraries, MPI, allocator')} runtime lines for {world} ranks")
if "vs tracked peak" not in txt or "vs measured peak" in txt:
    bad.append("text: the tracked table is not called tracked")
if bad:
    print(f"FAIL: {label}:\n  " + "\n  ".join(bad))
    sys.exit(1)
rm0 = json.load(open(out + "/run-report.json"))["real_memory"]["phases"]
print(f"ok: {label}: " + ", ".join(f"{p} {rm0[p]['real_peak_rss'] / MIB:.1f}" for p in PHASES) + " MiB (rank 0)")
PY
  done
done
[ "$fails" -eq 0 ] || { echo "$fails configuration(s) failed"; exit 1; }
echo "all configurations passed"
