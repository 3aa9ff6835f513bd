#!/usr/bin/env bash
# The first hour's rough edges (issue 18), one check each:
#  2. one parameter-count rule: estimate and solve size --params 32B's model states alike
#  3. solve's default --seq follows the model (gpt2-tiny has 64 positions)
#  4. simulate prints a summary; --detail the whole critical path
#  5. dtrun sample --help, dtrun --help names --no-progress, estimate --plot says where,
#     CPU plans say "per rank"
#  6. a DeepSpeed config or an HF config.json given as a plan is named as such
# Usage: test_first_hour_cli.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTPLAN=$1 DTRUN=$2 SRC=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }

# ---- 2. one parameter-count rule ----
"$DTPLAN" estimate --params 32B --gpus 8 >"$T/est" 2>&1 || fail "estimate --params 32B"
"$DTPLAN" solve --mem 80G --params 32B --gpus 8 -o "$T/p32.json" >"$T/sol" 2>&1 || fail "solve --params 32B: $(cat "$T/sol")"
"$DTPLAN" estimate --plan "$T/p32.json" >"$T/estp" 2>&1 || fail "estimate --plan"
for f in est sol estp; do
    grep -q "32000000000 as requested (32.00B): model states use it; the derived shape .*has 32763417600 (32.76B" "$T/$f" \
        && ok "$f states the parameter rule" || fail "$f does not state the rule: $(grep -i param "$T/$f" | head -3)"
done
grep -q "exactly, as requested" "$T/estp" && fail "estimate --plan still says 'exactly, as requested' of the shape's count"
python3 - "$T/p32.json" <<'PY' && ok "solve's plan sizes the states by 32e9" || fail "solve's plan does not use 32e9 for the model states"
import json, sys
p = json.load(open(sys.argv[1]))
m, pr, z = p["model"], p["prediction"]["memory"], p["parallel"]
assert m["requested_params"] == 32000000000, m
N = z["world_size"]
# mixed-bf16: 12 bytes of optimizer state per parameter, sharded over N from stage 1 on
want = 12 * 32000000000 // N if z["zero_stage"] >= 1 and z["offload_optimizer"] == "none" else None
assert want is None or pr["optimizer"] == want, (pr["optimizer"], want)
PY
o_est=$("$DTPLAN" estimate --params 32B --gpus 8 --zero-stage 3 --json | python3 -c \
    'import json,sys; r=json.load(sys.stdin)["rows"]; print([x for x in r if x["offload_optimizer"]=="none" and x["offload_param"]=="none"][0]["per_gpu"]["optimizer"])' 2>"$T/err")
[ "$o_est" = 48000000000 ] && ok "estimate ZeRO-3 optimizer 48e9 bytes per GPU (44.70 GiB)" || fail "estimate ZeRO-3 optimizer: '$o_est' $(cat "$T/err")"

# ---- 3. solve's default --seq follows the model ----
if "$DTPLAN" solve --model gpt2-tiny --hardware cpu --mem 4G -o "$T/tiny.json" >"$T/out" 2>&1; then
    grep -q "seq 64" "$T/out" && ok "solve gpt2-tiny: default seq 64" || fail "solve gpt2-tiny: $(head -1 "$T/out")"
else
    fail "solve --model gpt2-tiny --hardware cpu: $(cat "$T/out")"
fi
"$DTPLAN" solve --help | grep -q "default min(1024, the model's positions)" && ok "solve --help: --seq default" \
    || fail "solve --help does not state the --seq default"

# ---- 4. simulate: summary by default, --detail ----
"$DTPLAN" simulate "$T/p32.json" >"$T/sim" 2>&1 || fail "simulate"
"$DTPLAN" simulate "$T/p32.json" --detail >"$T/simd" 2>&1 || fail "simulate --detail"
n=$(wc -l <"$T/sim") nd=$(wc -l <"$T/simd")
[ "$n" -le 30 ] && ok "simulate summary: $n lines" || fail "simulate prints $n lines by default (want <= 30)"
[ "$nd" -gt 100 ] && grep -q "^critical path:" "$T/simd" && ok "simulate --detail: $nd lines" || fail "simulate --detail: $nd lines"
grep -q "largest contributors" "$T/sim" && grep -q -- "--detail" "$T/sim" || fail "simulate summary names no contributors / --detail"
"$DTPLAN" simulate --help | grep -q -- "--detail" && ok "simulate --help: --detail" || fail "simulate --help lacks --detail"

# ---- 5. help texts, --plot, per rank ----
"$DTRUN" sample --help >"$T/out" 2>&1 && grep -q "^usage: dtrun sample" "$T/out" && ok "dtrun sample --help" \
    || fail "dtrun sample --help: rc $?, $(head -2 "$T/out")"
"$DTRUN" --help | grep -q -- "--no-progress" && ok "dtrun --help: --no-progress" || fail "dtrun --help lacks --no-progress"
(cd "$T" && "$DTPLAN" estimate --params 7B --gpus 8 --plot mem.png) >"$T/out" 2>&1
grep -qx "plot: mem.png" "$T/out" && [ -s "$T/mem.png" ] && ok "estimate --plot says where" || fail "estimate --plot: $(tail -2 "$T/out")"
"$DTPLAN" estimate --model gpt2-tiny --hardware cpu >"$T/out" 2>&1
grep -q "per rank" "$T/out" && ! grep -q "per GPU" "$T/out" && ok "CPU estimate says per rank" \
    || fail "CPU estimate: $(grep -n 'per GPU' "$T/out" | head -3)"
"$DTPLAN" solve --model gpt2-tiny --hardware cpu --mem 4G >"$T/out" 2>&1
grep -q "per GPU" "$T/out" && fail "CPU solve says per GPU: $(grep 'per GPU' "$T/out" | head -2)" || ok "CPU solve says per rank"
"$DTPLAN" estimate --params 7B --gpus 8 | grep -q "per GPU" && ok "GPU estimate still says per GPU" || fail "GPU estimate lost 'per GPU'"

# ---- 6. not a plan ----
"$DTRUN" "$SRC/configs/deepspeed/zero3.json" >"$T/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "this is a DeepSpeed config .*not a plan; .*dtplan estimate --deepspeed .*dtplan solve --model NAME --mem 80G -o plan.json" "$T/out" \
    && ok "dtrun names a DeepSpeed config" || fail "dtrun DeepSpeed config: rc $rc, $(cat "$T/out")"
"$DTPLAN" estimate --help | grep -q -- "--deepspeed" || fail "the message points to estimate --deepspeed, which --help lacks"
"$DTPLAN" show "$SRC/models/catalog/gpt2.json" >"$T/out" 2>&1
grep -q "Hugging Face model config.json .*not a plan" "$T/out" && ok "show names an HF config.json" || fail "HF config: $(cat "$T/out")"
printf '{"train_batch_size": 16}\n' >"$T/ds.json"
"$DTPLAN" simulate "$T/ds.json" 2>&1 | grep -q "DeepSpeed config" && ok "simulate names a DeepSpeed config" || fail "simulate on a DeepSpeed config"

[ "$fails" -eq 0 ] && echo "first hour: all checks passed" || { echo "first hour: $fails failed"; exit 1; }
