#!/bin/bash
# validate_mem.sh — the memory model against what the kernel measures
# (docs/benchmarks.md "Predicted vs real memory per phase", docs/dtrun.md
# "Real memory per phase"): GPT-2 124M and 355M (catalog gpt2, gpt2-medium),
# fp32, seq 128, micro-batch 1, on 1 and 2 ranks, ZeRO 0-3 x offload none / cpu
# (cpu = the optimizer on the host, at stage 3 the parameters too; stage 0 has
# no offload; nvme, on request = the optimizer state in files under OUT/nvme,
# stage 3 only). Each config trains STEPS steps with a validation pass and a
# checkpoint at the end, then resumes for one more step (the checkpoint-load
# phase). Per config, rank and phase it prints the plan's prediction for the
# rank and phase (the run report's, docs/dtrun.md "Real memory per phase")
# beside the real peak RSS of the phase and their ratio, and what the engine
# tracked and the runtime remainder (real - tracked). The profile is the cpu
# profile with this machine's memory and the runtime footprint `dtrun
# calibrate` measures here (runtime_bytes, runtime_mpi_bytes). Phases: start-up, forward, backward, optimizer, eval,
# ckpt save, export from the first run; ckpt load from the resumed one.
#
# usage: bench/validate_mem.sh [BUILD_DIR] [--steps N] [--models "gpt2 gpt2-medium"]
#                              [--methods "full freeze lora qlora qlora-bf16"] [--objectives "dpo grpo"]
#                              [--worlds "1 2"] [--stages "0 1 2 3"] [--offload "none cpu"]
#                              [--mem-factor X] [--quick] [--baseline DIR]
#                              [--runtime-from PROFILE.json] [--sub-group-size N] [--tp N]
#   BUILD_DIR     where dtplan and dtrun are (default build)
#   --methods M   fine-tuning methods (issue 32; default full): full; freeze = the last 2
#                 blocks trained (dtplan --finetune freeze --trainable-layers 2, LLaMA-
#                 Factory's default); lora = r 8, alpha 16, dropout 0 on every linear of
#                 the blocks (--finetune lora, LLaMA-Factory's defaults); qlora = the same
#                 adapters over the blocks' linears in NF4 with double quantisation, fp32
#                 compute (--finetune qlora --compute-dtype fp32); qlora-bf16 = the same with
#                 bf16 compute under mixed-bf16 (--compute-dtype bf16 --precision mixed-bf16:
#                 LLaMA-Factory's quantization_bit 4 with bf16: true); every other method is
#                 planned fp32. Any catalog model
#                 (--models "gpt2-medium qwen3-0.6b"); the text is the fortunes' bytes.
#   --objectives O  objectives (issue 33 item 6; default none: next-token prediction on the
#                 fortunes): dpo (dtplan --objective dpo: policy + frozen reference, chosen
#                 and rejected in one batch of 2 x micro-batch 1) and grpo (--objective grpo
#                 --num-generations 4 --max-completion-length 32, beta 0.04 so a reference is
#                 held; micro-batch 2 x accumulation 2 = one group of 4 per rank and step),
#                 on synthetic preference pairs / prompts written with the qwen2-mini
#                 tokenizer (tests/tokenizer/data, 1500 ids) and prepared by dtrun prepare;
#                 the objective's phases (objective, generate) get their own columns. Models
#                 for objectives: catalog names or config.json paths (the recorded run's
#                 Qwen3-0.6B block x 8: bench/objectives_model.py DIR writes DIR/config.json).
#   --baseline DIR  also run every config with DIR/dtrun (an earlier build) first;
#                 the tables then have a row per build ("before": DIR, "after":
#                 BUILD_DIR) and OUT/compare.md puts the transient phases (start-up,
#                 ckpt save, ckpt load, export) of the two side by side
#   --runtime-from P  take runtime_bytes / runtime_mpi_bytes from profile P
#                 instead of running `dtrun calibrate` (30-60 s) first
#   --calibrated  plan with the calibrated profile whole (its rates too, not only the
#                 runtime footprint), so the step-time column is a prediction for this
#                 machine
#   --steps N     steps of the first run (default 2; the resumed run adds one)
#   Each row also carries the run's mean step time and the plan's prediction for it
#   (run-report.json measured / predicted step_time_s): a step-time figure only on a
#   quiet machine and a calibrated profile (docs/benchmarks.md).
#   --offload M   modes among none cpu nvme (default "none cpu")
#   --sub-group-size N  DeepSpeed's sub_group_size for the plans (dtplan solve
#                 --sub-group-size: the NVMe optimizer's host swap buffers)
#   --quick       gpt2 only, stages 0 and 3, no offload (a smoke run)
#   --tp N        tensor parallelism (layout tp N, no SP: docs/parallelism.md "In dtrun"):
#                 each world of --worlds is tp x dp ranks, the global batch dp, ZeRO over
#                 the DP group; no offload (a layout has none). The model's heads, KV
#                 heads, ffn and vocabulary must divide by N (e.g. qwen3-tiny, gpt2-small-test,
#                 qwen2.5-0.5b; GPT-2's 50257 does not)
#   --mem-factor  a config is skipped, with a note, when X times its rough need
#                 (the model states of all ranks, plus the full model twice for
#                 the checkpoint) exceeds MemAvailable (default 1.3)
# Writes OUT/rows.tsv (every config, rank and phase) and OUT/table.md (one row
# per config and rank: predicted, and real (ratio) per phase); OUT =
# $DT_VALIDATE_OUT or a temporary directory. The checkpoints of a config are
# removed after it ran. docs/benchmarks.md has a recorded run.
set -u
BUILD=build STEPS=2 MODELS="gpt2 gpt2-medium" WORLDS="1 2" QUICK=0 FACTOR=1.3
STAGES="0 1 2 3" MODES="none cpu" BASELINE="" RT_FROM="" SUBGROUP="" METHODS=full CALIBRATED=0 TP=1 OBJECTIVES=none
while [ $# -gt 0 ]; do
    case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --methods) METHODS=$2; shift 2 ;;
    --objectives) OBJECTIVES=$2; shift 2 ;;
    --calibrated) CALIBRATED=1; shift ;;
    --worlds) WORLDS=$2; shift 2 ;;
    --stages) STAGES=$2; shift 2 ;;
    --offload) MODES=$2; shift 2 ;;
    --mem-factor) FACTOR=$2; shift 2 ;;
    --quick) QUICK=1; MODELS=gpt2; shift ;;
    --baseline) BASELINE=$2; shift 2 ;;
    --runtime-from) RT_FROM=$2; shift 2 ;;
    --sub-group-size) SUBGROUP=$2; shift 2 ;;
    --tp) TP=$2; shift 2 ;;
    -h | --help) sed -n '2,72p' "$0"; exit 0 ;;
    -*) echo "validate_mem.sh: unknown option '$1'" >&2; exit 2 ;;
    *) BUILD=$1; shift ;;
    esac
done
SRC=${DT_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}   # DT_SOURCE_DIR: the tree, for a copy of the script run elsewhere
DTPLAN=$BUILD/dtplan DTRUN=$BUILD/dtrun
for b in "$DTPLAN" "$DTRUN" ${BASELINE:+"$BASELINE/dtrun"}; do
    [ -x "$b" ] || { echo "validate_mem.sh: $b not built" >&2; exit 2; }
done
BUILDS="after=$DTRUN"
[ -n "$BASELINE" ] && BUILDS="before=$BASELINE/dtrun after=$DTRUN"
command -v python3 >/dev/null || { echo "validate_mem.sh: python3 missing" >&2; exit 2; }
OUT=${DT_VALIDATE_OUT:-$(mktemp -d /tmp/dt_validate_mem_XXXXXX)}
mkdir -p "$OUT"
DATA=/usr/share/games/fortunes
export OMP_WAIT_POLICY=PASSIVE
NPROC=$(nproc)

# the cpu profile with this machine's memory as the device's, so the solver
# writes plans for models the 4 GiB default would refuse (the engine's device
# is the host here anyway)
MEM_KIB=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
# the runtime footprint of a rank on this machine (docs/memory-model.md "The CPU runtime term")
if [ -z "$RT_FROM" ]; then
    RT_FROM=$OUT/calibrated.json
    "$DTRUN" calibrate -o "$RT_FROM" >"$OUT/calibrate.log" 2>&1 ||
        { echo "validate_mem.sh: dtrun calibrate failed: $(tail -1 "$OUT/calibrate.log")" >&2; exit 2; }
fi
BASE_PROFILE=$SRC/configs/hardware/cpu.json
[ "$CALIBRATED" = 1 ] && BASE_PROFILE=$RT_FROM
python3 - "$BASE_PROFILE" "$OUT/cpu-here.json" "$MEM_KIB" "$RT_FROM" <<'PY'
import json, sys
src, out, kib, rt = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.load(open(sys.argv[4]))
h = json.load(open(src))
h["name"] = "cpu-here"
h["device_mem_bytes"] = h["host_mem_bytes"] = kib * 1024
for k in ("runtime_bytes", "runtime_mpi_bytes"):
    if k in rt: h[k] = rt[k]
json.dump(h, open(out, "w"), indent=2)
PY
[ -s "$OUT/cpu-here.json" ] || { echo "validate_mem.sh: cannot write $OUT/cpu-here.json" >&2; exit 2; }
MEM_LIMIT=$((MEM_KIB / 1024 / 1024))G

echo "validate_mem: $(date -u +%FT%TZ), $NPROC CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"\
     "$((MEM_KIB / 1024)) MiB, load $(cut -d' ' -f1-3 /proc/loadavg), steps $STEPS + 1 resumed, out $OUT"
[ -n "$BASELINE" ] && echo "builds: before = $BASELINE/dtrun, after = $DTRUN"
printf 'build\tmodel\tmethod\tstage\toffload\tworld\ttp\trank\tphase\truns\tpredicted\treal\ttracked\truntime\tratio\tstep_s\tpred_step_s\n' >"$OUT/rows.tsv"
: >"$OUT/skipped.txt"

# the dtplan flags of a method (--methods)
method_flags() {
    case "$1" in
    full) ;;
    freeze) echo --finetune freeze --trainable-layers 2 ;;
    lora) echo --finetune lora --lora-rank 8 --lora-alpha 16 ;;
    qlora) echo --finetune qlora --lora-rank 8 --lora-alpha 16 --compute-dtype fp32 ;;
    qlora-bf16) echo --finetune qlora --lora-rank 8 --lora-alpha 16 --compute-dtype bf16 ;;
    *) echo "validate_mem.sh: unknown method '$1' (full, freeze, lora, qlora, qlora-bf16)" >&2; return 1 ;;
    esac
}
# the precision a method is planned in: fp32, but bf16 QLoRA's mixed-bf16 (what dtrun trains it under)
method_precision() { if [ "$1" = qlora-bf16 ]; then echo mixed-bf16; else echo fp32; fi; }
for ft in $METHODS; do method_flags "$ft" >/dev/null || exit 2; done

# the dtplan flags and the prepared data of an objective (--objectives)
GRPO_G=4 GRPO_COMPLETION=32
objective_flags() {
    case "$1" in
    none) echo --data "$DATA" ;;
    dpo) echo --objective dpo --data "$OUT/data-dpo" ;;
    grpo) echo --objective grpo --num-generations $GRPO_G --max-completion-length $GRPO_COMPLETION \
               --kl-coef 0.04 --data "$OUT/data-grpo" ;;
    *) echo "validate_mem.sh: unknown objective '$1' (none, dpo, grpo)" >&2; return 1 ;;
    esac
}
for ob in $OBJECTIVES; do
    objective_flags "$ob" >/dev/null || exit 2
    [ "$ob" = none ] && continue
    python3 "$SRC/bench/objectives_data.py" "$ob" "$OUT/$ob.jsonl" || exit 2
    fmt=pairs; [ "$ob" = grpo ] && fmt=prompts
    "$DTRUN" prepare --format $fmt --tokenizer "$SRC/tests/tokenizer/data/qwen2-mini.json" --out "$OUT/data-$ob" \
        --val-fraction 0 --seq 128 --quiet "$OUT/$ob.jsonl" ||
        { echo "validate_mem.sh: dtrun prepare --format $fmt failed" >&2; exit 2; }
done

# plan MODEL STAGE OFFLOAD WORLD FILE RUNDIR METHOD OBJECTIVE
plan() {
    local m=$1 s=$2 o=$3 w=$4 f=$5 d=$6 ft=$7 ob=$8
    local per=1; [ "$ob" = grpo ] && per=$GRPO_G   # grpo: one group of G completions per rank and step
    [ "$o" = nvme ] && mkdir -p "$OUT/nvme"
    "$DTPLAN" solve --mem "$MEM_LIMIT" --hardware "$OUT/cpu-here.json" --model "$m" --seq 128 $(method_flags "$ft") \
        --precision "$(method_precision "$ft")" --no-layouts --gpus "$w" --global-batch $((w * per)) $(objective_flags "$ob") --steps $((STEPS + 1)) \
        --eval-interval 2 --out "$d" -o "$f" ${SUBGROUP:+--sub-group-size "$SUBGROUP"} \
        $([ "$o" = nvme ] && echo --nvme-path "$OUT/nvme") >/dev/null 2>"$OUT/solve.err" || {
        echo "  solve failed: $(tail -1 "$OUT/solve.err")"; return 1; }
    python3 - "$f" "$s" "$o" "$w" "$OUT/nvme" "$TP" "$per" <<'PY'
import json, sys
f, s, o, w, nvme, tp, per = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6]), int(sys.argv[7])
p = json.load(open(f))
if tp > 1:   # TP x DP: the global batch is the DP group's (one sequence per DP rank)
    p["layout"] = {"tp": tp, "cp": 1, "pp": 1, "sequence_parallel": False}
    w //= tp
p["parallel"].update(zero_stage=s, offload_optimizer=o,
                     offload_param="cpu" if o == "cpu" and s == 3 else "none",
                     nvme_path=nvme if o == "nvme" else "")
# grpo: micro-batch 2 x accumulation 2 = the rank's group of G = 4
p["batch"].update(micro_batch=per // 2 if per > 1 else 1, grad_accum=2 if per > 1 else 1, global_batch=w * per)
p["activations"]["ckpt_layers"] = 0
p["data"].update(eval_interval=2, eval_batches=1)
p["output"].update(save_interval=0, keep_last=1)
p["prediction"]["valid"] = False   # dtrun recomputes it for the edited configuration
json.dump(p, open(f, "w"), indent=2)
PY
}

# predicted bytes per rank (dtplan estimate --plan: the row of the plan's configuration)
predicted_all_ranks() {
    python3 - "$1" "$2" <<'PY'
import json, sys
# a quick bound from the plan's own arithmetic: params + grads + optimizer
# (fp32: 16 B/param) per rank on the device and host together, plus activations;
# under freeze / LoRA the frozen base (4 B/param, replicated) and 16 B per trained param
p = json.load(open(sys.argv[1])); w = int(sys.argv[2])
m = p["model"]
n = 12 * m["n_layer"] * m["hidden"] ** 2 + (m["vocab"] + m["max_pos"]) * m["hidden"]
st = p["parallel"]["zero_stage"]
ft = p.get("finetune", {})
t = n   # trained: freeze's blocks, LoRA's adapters (at most 2 % of the blocks at r 8)
if ft.get("method") == "freeze": t = 12 * abs(ft.get("trainable_layers", 2)) * m["hidden"] ** 2
if ft.get("method") in ("lora", "qlora"): t = 0.02 * n
# the frozen base's bytes: 4 B/param, but under qlora the blocks' linears at 4 bits plus their
# absmax (0.5 + 4/64 B/param, an upper bound with or without double quantisation)
lin = 12 * m["n_layer"] * m["hidden"] ** 2 if ft.get("method") == "qlora" else 0
frozen = 4 * (n - t - lin) + (0.5 + 4 / 64) * lin
tp = p.get("layout", {}).get("tp", 1)   # a TP rank holds 1/tp of it, ZeRO over dp = w / tp
d = w // tp
per = ({0: 16 * t, 1: 8 * t + 8 * t / d, 2: 4 * t + 12 * t / d, 3: 16 * t / d}[st] + frozen) / tp
if p["parallel"]["offload_optimizer"] == "nvme": per -= 8 * t / w   # m and v in files
print(int(per * w + 2 * (frozen + 4 * t)))   # + the start-up's whole model per rank and the checkpoint writer
PY
}

[ "$QUICK" = 1 ] && { MODES=none; STAGES="0 3"; }
for m in $MODELS; do
  for ob in $OBJECTIVES; do
  for ft in $METHODS; do
    for w in $WORLDS; do
      for s in $STAGES; do
        for o in $MODES; do
          [ "$s" = 0 ] && [ "$o" = cpu ] && continue
          [ "$s" != 3 ] && [ "$o" = nvme ] && continue   # DeepSpeed: NVMe optimizer offload needs stage 3
          fl=$ft; [ "$ob" != none ] && fl="$ft $ob"   # the table's method column: "full dpo"
          label="$m $fl ZeRO-$s offload $o, $w rank(s)$([ "$TP" -gt 1 ] && echo " (tp $TP)")"
          if [ "$TP" -gt 1 ] && { [ "$o" != none ] || [ $((w % TP)) != 0 ]; }; then
              echo "$label: skipped (tp $TP: no offload, a world that tp divides)" | tee -a "$OUT/skipped.txt"; continue
          fi
          f=$OUT/plan.json d=$OUT/run
          rm -rf "$d"
          plan "$m" "$s" "$o" "$w" "$f" "$d" "$ft" "$ob" || { echo "$label: skipped (no plan)" | tee -a "$OUT/skipped.txt"; continue; }
          need=$(predicted_all_ranks "$f" "$w")
          avail=$(($(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) * 1024))
          want=$(python3 -c "print(int($need * $FACTOR))")
          if [ "$want" -gt "$avail" ]; then
              echo "$label: skipped: needs about $((want / 1048576)) MiB ($FACTOR x the model states and the checkpoint), $((avail / 1048576)) MiB available" | tee -a "$OUT/skipped.txt"
              continue
          fi
          export OMP_NUM_THREADS=$(( NPROC / w > 0 ? NPROC / w : 1 ))
          for bd in $BUILDS; do
            bl=${bd%%=*} run=${bd#*=}
            t0=$(date +%s)
            rm -rf "$d"
            if ! "$run" "$f" --out "$d" --max-steps "$STEPS" --no-progress >"$OUT/run1.log" 2>&1; then
                echo "$label ($bl): FAILED (first run): $(tail -2 "$OUT/run1.log")" | tee -a "$OUT/skipped.txt"; continue
            fi
            mkdir -p "$d/first"
            cp "$d"/run-report*.json "$d/first/"
            if ! "$run" "$f" --out "$d" --resume --max-steps $((STEPS + 1)) --no-progress >"$OUT/run2.log" 2>&1; then
                echo "$label ($bl): FAILED (resumed run): $(tail -2 "$OUT/run2.log")" | tee -a "$OUT/skipped.txt"; continue
            fi
            python3 - "$d" "$m" "$s" "$o" "$w" "$bl" "$fl" "$TP" >>"$OUT/rows.tsv" <<'PY'
import json, sys
d, m, s, o, w, bl, ft, tp = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6], sys.argv[7], sys.argv[8]
PH = ["startup", "forward", "backward", "objective", "generate", "optimizer", "eval", "ckpt_save", "ckpt_load", "export"]
for r in range(w):
    name = "run-report.json" if r == 0 else "run-report-rank%05d.json" % r
    rep = json.load(open(f"{d}/first/{name}"))
    first = rep["real_memory"]["phases"]
    step, pstep = rep["measured"].get("step_time_s"), rep["predicted"].get("step_time_s")
    second = json.load(open(f"{d}/{name}"))["real_memory"]["phases"]
    for ph in PH:
        e = (second if ph == "ckpt_load" else first).get(ph)
        if e is None: continue   # a build without the phase
        real, pred = e["real_peak_rss"], e["predicted_total"]
        tr = e["tracked"]["total"]
        ratio = real / pred if real and pred else float("nan")
        print(f"{bl}\t{m}\t{ft}\t{s}\t{o}\t{w}\t{tp}\t{r}\t{ph}\t{e['runs']}\t{pred}\t{real}\t{tr}\t{e['runtime']}\t{ratio:.3f}\t{step}\t{pstep}")
PY
            echo "$label ($bl): done in $(( $(date +%s) - t0 )) s, load $(cut -d' ' -f1 /proc/loadavg)"
          done
          rm -rf "$d" "$OUT/nvme"
        done
      done
    done
  done
  done
done

python3 - "$OUT/rows.tsv" >"$OUT/table.md" <<'PY'
import csv, sys
PH = ["startup", "forward", "backward", "objective", "generate", "optimizer", "eval", "ckpt_save", "ckpt_load", "export"]
LB = ["start-up", "forward", "backward", "objective", "generate", "optimizer", "eval", "ckpt save", "ckpt load", "export"]
MIB = 1 << 20
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
keys = []
by = {}
for r in rows:
    k = (r["model"], r["method"], r["stage"], r["offload"], r["world"] + (f" (tp {r['tp']})" if r["tp"] != "1" else ""),
         r["rank"], r["build"])
    if k not in by: keys.append(k); by[k] = {}
    by[k][r["phase"]] = r
two = len({k[6] for k in keys}) > 1
print("| model | method | ZeRO | offload | ranks | rank | " + ("build | " if two else "") + "predicted MiB | " + " | ".join(LB)
      + " | step s (predicted) |")
print("|---|---|---|---|---|---|" + ("---|" if two else "") + "---:|" + "---:|" * len(PH) + "---:|")
def f(x):
    try: return float(x)
    except (TypeError, ValueError): return float("nan")
for k in keys:
    e = by[k]
    ran = [ph for ph in ("forward", "objective") if ph in e and e[ph]["runs"] != "0"]   # objectives: their micro-step
    pred = f(e[ran[0]]["predicted"]) if ran else float("nan")
    cells = []
    for ph in PH:   # each phase against its own prediction
        if ph not in e or e[ph]["real"] in ("None", "") or e[ph]["runs"] == "0":
            cells.append("-"); continue
        real = f(e[ph]["real"])
        cells.append(f"{real / MIB:.0f} ({real / f(e[ph]['predicted']):.2f})")
    b = f"{k[6]} | " if two else ""
    any_ph = next(iter(e.values()))
    st = f"{f(any_ph['step_s']):.2f} ({f(any_ph['pred_step_s']):.2f})"
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {k[4]} | {k[5]} | {b}{pred / MIB:.0f} | " + " | ".join(cells) + f" | {st} |")
PY
# --baseline: the transient phases before -> after, per config and rank
[ -n "$BASELINE" ] && python3 - "$OUT/rows.tsv" >"$OUT/compare.md" <<'PY'
import csv, sys
PH = ["startup", "ckpt_save", "ckpt_load", "export"]
LB = ["start-up", "ckpt save", "ckpt load", "export"]
MIB = 1 << 20
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
by, keys = {}, []
for r in rows:
    k = (r["model"], r["method"], r["stage"], r["offload"], r["world"], r["rank"])
    if k not in by: keys.append(k); by[k] = {}
    by[k][(r["build"], r["phase"])] = r
print("| model | method | ZeRO | offload | ranks | rank | predicted MiB | " + " | ".join(f"{l} before → after" for l in LB) + " |")
print("|---|---|---|---|---|---|---:|" + "---:|" * len(PH))
def cell(e, b, ph):
    r = e.get((b, ph))
    if not r or r["real"] in ("None", ""): return "-"
    return f"{float(r['real']) / MIB:.0f} ({float(r['real']) / float(r['predicted']):.2f})"
for k in keys:
    e = by[k]
    pred = float(next(iter(e.values()))["predicted"])
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {k[4]} | {k[5]} | {pred / MIB:.0f} | "
          + " | ".join(f"{cell(e, 'before', ph)} → {cell(e, 'after', ph)}" for ph in PH) + " |")
PY
echo
echo "real peak RSS per phase, MiB (real / predicted); predicted = the plan's figure for the rank and phase"
echo "(column 'predicted MiB': the forward's, an objective's micro-step's; step s: rank's mean step time, the plan's prediction):"
cat "$OUT/table.md"
if [ -n "$BASELINE" ]; then
    echo; echo "transient phases, before ($BASELINE) -> after ($BUILD), MiB (real / predicted):"; cat "$OUT/compare.md"
fi
if [ -s "$OUT/skipped.txt" ]; then echo; echo "skipped / failed:"; cat "$OUT/skipped.txt"; fi
echo
echo "every config, rank and phase (predicted, real, tracked, runtime in bytes): $OUT/rows.tsv"
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
