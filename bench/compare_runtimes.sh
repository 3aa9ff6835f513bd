#!/bin/bash
# compare_runtimes.sh — dtplan's prediction of each run bench/validate_runtimes.sh measured,
# beside the measurement (issue 34 items 2-3; docs/validation.md "DeepSpeed and PyTorch on
# CPU ranks").
#
# The hardware profile is configs/hardware/cpu.json with this machine's memory, the
# runtime's footprint the calibration runs measured (footprint.csv: the larger rank, per
# runtime and stage -> deepspeed_runtime_bytes / torch_runtime_bytes) and, with
# --calibrated P, the rates of `dtplan calibrate` (P). Every other term is the planner's GPU
# code: `dtplan estimate --json --runtime deepspeed --deepspeed cfg.json` for DeepSpeed,
# `--runtime fsdp --zero-stage 0 | 3` for DDP / FSDP2, the model's HF config.json.
#
# Cells, per configuration and rank (the measured peak is the kernel's VmHWM of the phase,
# the largest over the steps):
#   backward  measured backward-phase peak  vs  max(predicted backward start, backward end)
#   step      measured optimizer-step peak  vs  predicted optimizer step
#   run       measured peak of forward, backward and step  vs  predicted peak (the row's total)
#   time      measured median step (forward + backward + step, steps after the first)  vs
#             the predicted step time
# error = predicted / measured - 1; goals 5 % (memory) and 15 % (time). The phases before
# the first step (import, model build, initialize) and the checkpoint save are printed as
# measured: the planner predicts the training step.
#
# usage: bench/compare_runtimes.sh OUT [BUILD_DIR] [--calibrated PROFILE.json]
# Writes OUT/cpu-here.json, OUT/compare.csv and OUT/compare.md.
set -u
OUT="" BUILD=build CAL=""
while [ $# -gt 0 ]; do
    case "$1" in
    --calibrated) CAL=$2; shift 2 ;;
    -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
    -*) echo "compare_runtimes.sh: unknown option '$1'" >&2; exit 2 ;;
    *) if [ -z "$OUT" ]; then OUT=$1; else BUILD=$1; fi; shift ;;
    esac
done
[ -n "$OUT" ] && [ -s "$OUT/runtimes.csv" ] && [ -s "$OUT/footprint.csv" ] ||
    { echo "compare_runtimes.sh: OUT must hold validate_runtimes.sh's runtimes.csv and footprint.csv" >&2; exit 2; }
SRC=$(cd "$(dirname "$0")/.." && pwd)
DTPLAN=$BUILD/dtplan
[ -x "$DTPLAN" ] || { echo "compare_runtimes.sh: $DTPLAN not built" >&2; exit 2; }
command -v python3 >/dev/null || { echo "compare_runtimes.sh: python3 missing" >&2; exit 2; }
MEM_KIB=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
python3 - "$SRC" "$OUT" "$DTPLAN" "$MEM_KIB" "$CAL" <<'PY'
import csv, json, os, re, subprocess, sys
src, out, dtplan, kib, cal = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
MEM_GOAL, TIME_GOAL = 0.05, 0.15   # issue 34 item 3

hw = json.load(open(os.path.join(src, "configs/hardware/cpu.json")))
if cal:
    hw.update({k: v for k, v in json.load(open(cal)).items() if k not in ("name", "format")})
hw["name"] = "cpu-here"
hw["device_mem_bytes"] = hw["host_mem_bytes"] = kib * 1024
foot = {}
for r in csv.DictReader(open(os.path.join(out, "footprint.csv"))):
    k = (r["runtime"], int(r["stage"]))
    foot[k] = max(foot.get(k, 0), int(r["peak_bytes"]))
hw["deepspeed_runtime_bytes"] = [foot.get(("deepspeed", s), 0) for s in range(4)]
ddp, fsdp = foot.get(("ddp", 0), 0), foot.get(("fsdp", 3), 0)
hw["torch_runtime_bytes"] = [ddp, 0, fsdp, fsdp]
prof = os.path.join(out, "cpu-here.json")
json.dump(hw, open(prof, "w"), indent=2)

meas = {}
for r in csv.DictReader(open(os.path.join(out, "runtimes.csv"))):
    meas.setdefault((r["config"], int(r["rank"])), {})[r["phase"]] = r
runs = [l.split() for l in open(os.path.join(out, "runs.tsv")) if l.strip()]

def predict(name, model, rt, stage, off, prec, bk, ck):
    cmd = [dtplan, "estimate", "--json", "--model", os.path.join(out, "models", model + ".json"), "--gpus", "2",
           "--seq", "128", "--hardware", prof, "--attention", "sdpa"]
    if ck == "1":
        cmd += ["--ckpt", "full"]
    if rt == "deepspeed":
        cmd += ["--runtime", "deepspeed", "--deepspeed", os.path.join(out, "cfg", name + ".json")]
    else:
        cmd += ["--runtime", "fsdp", "--zero-stage", stage, "--micro-batch", "4",
                "--precision", "mixed-bf16" if prec == "bf16" else "fp32"]
    j = subprocess.run(cmd, capture_output=True, text=True)
    t = subprocess.run([c for c in cmd if c != "--json"], capture_output=True, text=True)
    if j.returncode or t.returncode:
        return None, (j.stderr or t.stderr).strip().splitlines()[-1]
    row = json.loads(j.stdout)["rows"][0]
    m = re.search(r"time\s+step ([0-9.e+-]+) s", t.stdout)
    return dict(row=row, step_s=float(m.group(1)) if m else None), None

def err(p, m):
    return p / m - 1.0 if m else float("nan")

cells, lines = [], []
for w in runs:
    name, model, rt, stage, off, prec, bk, ck, zi = w[:9]
    load1 = w[9] if len(w) > 9 else ""
    pred, why = predict(name, model, rt, stage, off, prec, bk, ck)
    for rank in (0, 1):
        ph = meas.get((name, rank))
        if not ph:
            continue
        pk = lambda k: int(ph[k]["peak_bytes"]) if k in ph else 0
        run_peak = max(pk("forward"), pk("backward"), pk("step"))
        base = dict(config=name, rank=rank, load1=load1, import_=pk("import"), model_=pk("model"),
                    initialize=pk("initialize"), save=pk("save"))
        if pred is None:
            cells.append(dict(base, cell="run", measured=run_peak, predicted="", error="", note=why))
            continue
        pt = pred["row"]["phase_totals"]
        for cell, m, p in (("backward", pk("backward"), max(pt["backward start"], pt["backward end"])),
                           ("step", pk("step"), pt["optimizer step"]),
                           ("run", run_peak, pred["row"]["per_gpu"]["total"])):
            cells.append(dict(base, cell=cell, measured=m, predicted=p, error=round(err(p, m), 4), note=""))
        if "step" in ph and ph["step"]["step_seconds"] and pred["step_s"]:
            m = float(ph["step"]["step_seconds"])
            cells.append(dict(base, cell="time", measured=m, predicted=pred["step_s"],
                              error=round(err(pred["step_s"], m), 4), note=""))

keys = ["config", "rank", "cell", "measured", "predicted", "error", "load1", "import_", "model_", "initialize", "save", "note"]
with open(os.path.join(out, "compare.csv"), "w", newline="") as f:
    wr = csv.DictWriter(f, fieldnames=keys)
    wr.writeheader()
    wr.writerows(cells)
MiB = 1 << 20
with open(os.path.join(out, "compare.md"), "w") as f:
    f.write("| configuration | rank | init peaks MiB (import / model / initialize) | backward MiB meas / pred (err) | "
            "step MiB meas / pred (err) | run peak MiB meas / pred (err) | step s meas / pred (err) | load |\n")
    f.write("|---|---|---|---|---|---|---|---|\n")
    by = {}
    for c in cells:
        by.setdefault((c["config"], c["rank"]), {})[c["cell"]] = c
    ok = {"mem": [0, 0], "time": [0, 0]}
    for (name, rank), d in by.items():
        b = next(iter(d.values()))
        def fmt(c, unit):
            if c not in d:
                return "—"
            x = d[c]
            if x["predicted"] == "":
                return f"{x['measured'] / unit:.0f} / — ({x['note']})"
            good = abs(x["error"]) <= (TIME_GOAL if c == "time" else MEM_GOAL)
            kind = "time" if c == "time" else "mem"
            ok[kind][0] += good; ok[kind][1] += 1
            if unit == 1:
                return f"{x['measured']:.3f} / {x['predicted']:.3f} ({x['error'] * 100:+.0f} %)"
            return f"{x['measured'] / unit:.0f} / {x['predicted'] / unit:.0f} ({x['error'] * 100:+.1f} %)"
        f.write(f"| {name} | {rank} | {b['import_'] / MiB:.0f} / {b['model_'] / MiB:.0f} / {b['initialize'] / MiB:.0f} | "
                f"{fmt('backward', MiB)} | {fmt('step', MiB)} | {fmt('run', MiB)} | {fmt('time', 1)} | {b['load1']} |\n")
    f.write(f"\nmemory cells within {MEM_GOAL * 100:.0f} %: {ok['mem'][0]} of {ok['mem'][1]}; "
            f"step times within {TIME_GOAL * 100:.0f} %: {ok['time'][0]} of {ok['time'][1]}\n")
print(open(os.path.join(out, "compare.md")).read())
PY
