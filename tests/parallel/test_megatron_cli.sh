#!/usr/bin/env bash
# Issue 36, runtime megatron (Megatron-LM's own model code): solve decides tp / cp / pp / v and
# stage 0 / 1 under it, on one node too; the plan stores the runtime; show says it; export
# --megatron writes its arguments and export --deepspeed refuses it by name; estimate --plan
# reproduces the plan's memory.
# usage: test_megatron_cli.sh DTPLAN DTRUN SOURCE_DIR
set -u
. "$(dirname "$0")/../lib.sh"
dt_need python3
DTPLAN=$1 T=$(mktemp -d) fails=0
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# issue 36's request under Megatron-LM: 70B on 8 nodes x 8 GPUs
"$DTPLAN" solve --mem 80G --model llama-2-70b --gpus 64 --nodes 8 --global-batch 512 --runtime megatron \
    -o "$T/p.json" >"$T/out" 2>&1 || fail "solve --runtime megatron 70B: $(cat "$T/out")"
grep -q "^runtime: megatron (Megatron-LM's own model code" "$T/out" && ok "solve names the runtime" ||
    fail "no runtime line: $(cat "$T/out")"
grep -q "^  ZeRO-2         not in Megatron-LM" "$T/out" && grep -q "^  ZeRO-3         not in Megatron-LM" "$T/out" &&
    ok "ZeRO-2 / 3 are not Megatron's" || fail "stages 2-3: $(cat "$T/out")"
python3 - "$T/out" "$T/p.json" <<'PY' && ok "the chosen layout and stage are Megatron's and the plan records them" ||
import json, re, sys
out, plan = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
ch = re.search(r"^chosen: (DDP \(stage 0\)|ZeRO-1), .*layout TP (\d+)( \+ SP)? x CP (\d+) x PP (\d+)( interleaved)? "
               r"\(runtime megatron\)$", out, re.M)
assert ch, out
assert plan["runtime"]["kind"] == "megatron" and plan["parallel"]["zero_stage"] in (0, 1), plan["runtime"]
lay = plan["layout"]
assert (lay["tp"], lay["cp"], lay["pp"]) == (int(ch.group(2)), int(ch.group(4)), int(ch.group(5))), (lay, ch.groups())
assert lay["tp"] <= 8 and 64 % (lay["tp"] * lay["cp"] * lay["pp"]) == 0, lay
r = plan["runtime"]   # Megatron-LM's fused code: none of Hugging Face's overheads
assert r["fused_loss"] and not r["unfused_act"] and not r["upcast_norm"] and not r["upcast_softmax"], r
PY
    fail "chosen plan: $(cat "$T/out")"
# one node: Megatron plans weigh its TP layouts there too (a TP group inside the node)
"$DTPLAN" solve --mem 40G --model llama-2-13b --gpus 8 --global-batch 64 --seq 4096 --runtime megatron \
    -o "$T/n.json" >"$T/out1" 2>&1 || fail "solve one node: $(cat "$T/out1")"
grep -q "^layouts weighed against DP x ZeRO (layouts planned for runtime megatron)" "$T/out1" &&
    grep -q '"layout": {' "$T/n.json" && ok "one node: layouts weighed and one chosen (13B does not fit 40G plainly)" ||
    fail "one node: $(cat "$T/out1")"
"$DTPLAN" show "$T/p.json" >"$T/show" 2>&1 &&
    grep -q "^runtime      megatron (Megatron-LM's own model code)" "$T/show" &&
    grep -q "gradient buffer fp32 (4 B/param: --bf16 accumulates and reduces gradients in fp32)" "$T/show" &&
    ok "show says the runtime and its fp32 gradient buffer" || fail "show: $(cat "$T/show")"
"$DTPLAN" estimate --plan "$T/p.json" >"$T/est" 2>&1 && grep -q "the plan's stored memory prediction matches" "$T/est" &&
    ok "estimate --plan reproduces the stored prediction" || fail "estimate --plan: $(cat "$T/est")"
"$DTPLAN" export --megatron "$T/p.json" >"$T/mg" 2>&1 || fail "export --megatron: $(cat "$T/mg")"
tp=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layout"]["tp"])' "$T/p.json")
st=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["parallel"]["zero_stage"])' "$T/p.json")
dist=0
grep -q -- "--use-distributed-optimizer" "$T/mg" && dist=1
grep -q -- "--tensor-model-parallel-size $tp " "$T/mg" && ! grep -q "Hugging Face model code" "$T/mg" &&
    ! grep -q -- "--grad-reduce-in-bf16" "$T/mg" && [ "$dist" = "$st" ] &&
    ok "export --megatron: its arguments, fp32 gradients, no Hugging Face note" || fail "export --megatron: $(cat "$T/mg")"
"$DTPLAN" export --deepspeed "$T/p.json" -o "$T/ds.json" >"$T/o" 2>"$T/e"
[ $? -eq 2 ] && grep -q "the plan is for runtime megatron" "$T/e" && [ ! -e "$T/ds.json" ] &&
    ok "export --deepspeed refuses a megatron plan by name" || fail "export --deepspeed: $(cat "$T/e")"
# a plan edited to ZeRO-2 is refused by name on load
python3 - "$T/p.json" "$T/z2.json" <<'PY' || fail "writing the ZeRO-2 plan"
import json, sys
p = json.load(open(sys.argv[1])); p["parallel"]["zero_stage"] = 2
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
"$DTPLAN" show "$T/z2.json" >"$T/o" 2>"$T/e"
[ $? -eq 2 ] && grep -q "parallel.zero_stage = 2 with runtime megatron: Megatron-LM has no ZeRO-2" "$T/e" &&
    ok "a ZeRO-2 megatron plan is refused by name" || fail "zero-2 plan: $(cat "$T/e")"

echo "$fails failed"
[ $fails -eq 0 ]
