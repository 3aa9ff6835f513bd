#!/usr/bin/env bash
# Issue 36: layouts (TP / SP / CP / PP) in plans and in dtplan. A plan without a layout is
# read and written as before; a layout round-trips; every bad layout is one line, exit 2;
# solve weighs layouts against DP x ZeRO and says why it picked one; show and simulate say
# the layout and draw the pipeline.
# usage: test_parallel_cli.sh DTPLAN DTRUN SOURCE_DIR
set -u
. "$(dirname "$0")/../lib.sh"
dt_need python3
DTPLAN=$1 SRC=$3 T=$(mktemp -d) fails=0
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# the acceptance request of issue 36: 70B on 8 nodes x 8 GPUs
"$DTPLAN" solve --mem 80G --model llama-2-70b --gpus 64 --nodes 8 --global-batch 512 -o "$T/p.json" >"$T/out" 2>&1 ||
    fail "solve 70B on 64 GPUs: $(cat "$T/out")"
grep -q "^layouts weighed against DP x ZeRO" "$T/out" && grep -q "^  DP x ZeRO: " "$T/out" &&
    grep -q "^  with a layout: " "$T/out" && grep -q "^  why: " "$T/out" &&
    ok "solve weighs layouts against DP x ZeRO and says why" || fail "no verdict: $(cat "$T/out")"
grep -q '"layout": {' "$T/p.json" && ok "the chosen plan records its layout" || fail "plan has no layout section"
# the verdict names both alternatives (a ZeRO stage without a layout; a TP x CP x PP layout with its
# stage), gives each one's step and parts, and its "why" is their arithmetic and agrees with the plan
python3 - "$T/out" "$T/p.json" <<'PY' && ok "the verdict names DP x ZeRO and the layout, and why agrees with the plan" ||
import json, re, sys
out = open(sys.argv[1]).read().split("layouts weighed against DP x ZeRO", 1)[1]
plan = json.load(open(sys.argv[2]))
dp = re.search(r"\n  DP x ZeRO: +(.*)\n +step ([\d.e+-]+) s = compute .* exposed comm ([\d.e+-]+) ", out)
ly = re.search(r"\n  with a layout: +(.*)\n +step ([\d.e+-]+) s = compute .* exposed comm ([\d.e+-]+) ", out)
why = re.search(r"\n  why: (the layout|DP x ZeRO) is faster: the other step takes ([\d.]+)% longer "
                r"\(exposed communication ([\d.e+-]+) s vs ([\d.e+-]+) s", out)
assert dp and ly and why, "verdict lines not as documented:\n" + out
assert re.match(r"(DDP \(stage 0\)|ZeRO-[123]), ", dp.group(1)) and "layout" not in dp.group(1), dp.group(1)
assert re.match(r"(DDP \(stage 0\)|ZeRO-[123]), ", ly.group(1)), ly.group(1)
assert re.search(r", layout TP \d+( \+ SP)? x CP \d+ x PP \d+( interleaved)? \(runtime fsdp\)", ly.group(1)), ly.group(1)
step = {"DP x ZeRO": float(dp.group(2)), "the layout": float(ly.group(2))}
comm = {"DP x ZeRO": float(dp.group(3)), "the layout": float(ly.group(3))}
won = why.group(1); lost = "DP x ZeRO" if won == "the layout" else "the layout"
assert step[won] <= step[lost], (step, won)
assert abs(float(why.group(2)) - 100 * (step[lost] / step[won] - 1)) < 0.2, (why.group(0), step)
assert (float(why.group(3)), float(why.group(4))) == (comm[won], comm[lost]), (why.group(0), comm)
assert ("layout" in plan) == (won == "the layout"), "the plan's layout section disagrees with the verdict"
assert abs(plan["prediction"]["time"]["step_s"] - step[won]) <= 1e-3 * step[won], (plan["prediction"]["time"], step)
PY
    fail "the verdict does not name both alternatives or disagrees with the plan"
"$DTPLAN" show "$T/p.json" >"$T/show" 2>&1 && grep -q "^layout       TP [0-9]* .* x PP [0-9]* .* x DP [0-9]* = 64 ranks" "$T/show" &&
    ok "show prints the layout" || fail "show: $(cat "$T/show")"
grep -q "^batch .* x data-parallel [0-9]*;" "$T/show" || fail "show's batch line lacks the data-parallel size"
# --no-layouts: DP x ZeRO only, as before issue 36; one node: layouts only with --layouts
"$DTPLAN" solve --mem 80G --model llama-2-70b --gpus 64 --nodes 8 --global-batch 512 --no-layouts -o "$T/dp.json" \
    >"$T/out2" 2>&1 || fail "solve --no-layouts: $(cat "$T/out2")"
grep -q '"layout"' "$T/dp.json" && fail "--no-layouts plan has a layout"
grep -q "layouts weighed" "$T/out2" && fail "--no-layouts still weighs layouts"
"$DTPLAN" solve --mem 80G --model llama-2-13b --gpus 8 >"$T/out3" 2>&1 || fail "solve one node: $(cat "$T/out3")"
grep -q "layouts weighed" "$T/out3" && fail "one node weighs layouts without --layouts"
"$DTPLAN" solve --mem 80G --model llama-2-13b --gpus 8 --layouts --runtime deepspeed >"$T/out4" 2>&1 &&
    grep -q "layouts planned for runtime deepspeed" "$T/out4" && ok "--layouts on one node, runtime deepspeed" ||
    fail "--layouts --runtime deepspeed: $(cat "$T/out4")"

# a hand-made layout: TP 8 x PP 4 x DP 2 under fsdp (torchtitan), 1F1B and interleaved
python3 - "$T/p.json" "$T" <<'PY' || fail "writing the layout plans"
import json, sys
p = json.load(open(sys.argv[1])); d = sys.argv[2]
p.pop("prediction", None)
p["runtime"]["kind"] = "fsdp"
p["parallel"]["zero_stage"] = 2
p["parallel"]["offload_optimizer"] = p["parallel"]["offload_param"] = "none"
p["activations"]["ckpt_layers"] = 0
p["batch"].update(micro_batch=1, grad_accum=8, global_batch=16)
p["layout"] = {"tp": 8, "cp": 1, "pp": 4}
json.dump(p, open(d + "/l1.json", "w"), indent=2)
q = dict(p); q["layout"] = {"tp": 8, "cp": 1, "pp": 4, "virtual_stages": 2}
json.dump(q, open(d + "/l2.json", "w"), indent=2)
def bad(name, **kw):
    b = json.loads(json.dumps(p))
    for k, v in kw.items():
        sec, key = k.split("__")
        if v is None: b[sec].pop(key)
        else: b[sec][key] = v
    json.dump(b, open(d + "/bad_" + name + ".json", "w"), indent=2)
bad("tp_heads", layout__tp=3)
bad("pp_layers", layout__pp=96)
bad("too_big", layout__pp=16)
bad("pp_split", layout__tp=2, layout__pp=32)
bad("cp_seq", layout__cp=3, layout__tp=1, layout__pp=1)
bad("unknown", layout__dp=2)
bad("all_one", layout__tp=1, layout__pp=1)
bad("half_split", layout__first_stage_layers=18)
b = json.loads(json.dumps(p)); b["runtime"]["kind"] = "deepspeed"; b["parallel"]["zero_stage"] = 3
json.dump(b, open(d + "/bad_ds_zero3.json", "w"), indent=2)
b["parallel"]["zero_stage"] = 2
json.dump(b, open(d + "/bad_ds_zero2.json", "w"), indent=2)
b = json.loads(json.dumps(p)); b["runtime"]["kind"] = "deepspeed"; b["parallel"]["zero_stage"] = 1
json.dump(b, open(d + "/mg.json", "w"), indent=2)
b = json.loads(json.dumps(p)); b["parallel"].update(zero_stage=3, offload_optimizer="cpu", offload_param="cpu")
json.dump(b, open(d + "/bad_offload.json", "w"), indent=2)
b = json.loads(json.dumps(p)); b.pop("runtime")
json.dump(b, open(d + "/bad_dtrun.json", "w"), indent=2)
b["layout"] = {"tp": 8, "cp": 1, "pp": 1}   # sequence_parallel defaults on with tp > 1
json.dump(b, open(d + "/bad_dtrun_sp.json", "w"), indent=2)
b["layout"]["sequence_parallel"] = False
b["batch"].update(micro_batch=1, grad_accum=2, global_batch=16)   # dp 64 / 8 = 8
json.dump(b, open(d + "/dtrun_tp.json", "w"), indent=2)
PY
"$DTPLAN" show "$T/l1.json" >/dev/null 2>"$T/err" && ok "a layout plan loads" || fail "l1: $(cat "$T/err")"
# round trip: write (estimate --plan does not write; solve's plan was written by dt_plan_save) and re-read
"$DTPLAN" simulate "$T/l1.json" >"$T/sim" 2>&1 && grep -q "^  stage   3 |" "$T/sim" &&
    grep -q "stage 0 idle .* of it (the bubble (p-1)/(v m) = 37.5 %" "$T/sim" &&
    ok "simulate draws the 1F1B pipeline per stage" || fail "simulate 1F1B: $(cat "$T/sim")"
"$DTPLAN" simulate "$T/l2.json" >"$T/sim2" 2>&1 && grep -q "interleaved, 2 model chunks per rank" "$T/sim2" &&
    grep -q "bubble (p-1)/(v m) = 18.8 %" "$T/sim2" && ok "simulate draws the interleaved pipeline" ||
    fail "simulate interleaved: $(cat "$T/sim2")"
"$DTPLAN" estimate --plan "$T/l1.json" >"$T/est" 2>&1 && grep -q "^time " "$T/est" && ok "estimate --plan on a layout" ||
    fail "estimate --plan: $(cat "$T/est")"
"$DTPLAN" export --deepspeed "$T/l1.json" >"$T/out" 2>"$T/err"
[ $? -eq 2 ] && grep -q "is not a DeepSpeed config setting" "$T/err" && ok "export --deepspeed refuses a layout" ||
    fail "export of a layout: $(cat "$T/err")"

# Megatron-LM's arguments for a layout plan (ZeRO-1 = its distributed optimizer); ZeRO-2 refused
"$DTPLAN" export --megatron "$T/mg.json" --slurm "$T/mg.slurm" >"$T/mg.out" 2>"$T/err" || fail "export --megatron: $(cat "$T/err")"
for a in "--tensor-model-parallel-size 8" "--pipeline-model-parallel-size 4" "--sequence-parallel" \
    "--use-distributed-optimizer" "--micro-batch-size 1" "--global-batch-size 16" "--num-layers 80" \
    "--group-query-attention" "--num-query-groups 8" "--swiglu" "--normalization RMSNorm" \
    "--untie-embeddings-and-output-weights" "pretrain_gpt.py"; do
    grep -qF -- "$a" "$T/mg.out" || fail "export --megatron lacks '$a'"
    grep -qF -- "$a" "$T/mg.slurm" || fail "the Megatron sbatch script lacks '$a'"
done
grep -q "^torchrun --nnodes 8 --nproc_per_node 8 --node_rank \$NODE_RANK" "$T/mg.out" && ok "export --megatron" ||
    fail "export --megatron: $(cat "$T/mg.out")"
bash -n "$T/mg.slurm" && ok "the Megatron sbatch script parses" || fail "mg.slurm: bash -n"
"$DTPLAN" export --megatron "$T/l1.json" >"$T/out" 2>"$T/err"
[ $? -eq 2 ] && grep -q "ZeRO stage 2: Megatron-LM shards only the optimizer states" "$T/err" &&
    ok "export --megatron refuses ZeRO-2" || fail "export --megatron of ZeRO-2: $(cat "$T/err")"

# bad input: one line naming the rule, exit 2
badplan() {
    local name=$1 want=$2
    "$DTPLAN" show "$T/bad_$name.json" >"$T/out" 2>"$T/err"
    local rc=$?
    [ $rc -eq 2 ] || { fail "$name: exit $rc (want 2): $(cat "$T/err")"; return; }
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$name: not one line: $(cat "$T/err")"
    [ -s "$T/out" ] && fail "$name: wrote to stdout"
    grep -qF -- "$want" "$T/err" && ok "$name: $(cat "$T/err")" || fail "$name: '$(cat "$T/err")' lacks '$want'"
}
badplan tp_heads "layout.tp 3 does not divide the model's 64 attention heads and 8 KV heads"
badplan pp_layers "layout.pp 96 is larger than the model's 80 layers"
badplan too_big "layout tp 8 x cp 1 x pp 16 = 128 ranks is larger than the cluster's 64"
badplan pp_split "layout.pp 32 does not divide the model's 80 layers"
badplan cp_seq "layout.cp 3 does not divide batch.seq_len 1024"
badplan unknown "dp"
badplan all_one "tp, cp and pp are all 1"
badplan half_split "give both first_stage_layers and last_stage_layers"
badplan ds_zero3 "ZeRO stage 3 with DeepSpeed's pipeline engine"
badplan ds_zero2 "ZeRO stage 2 with DeepSpeed's pipeline engine"
badplan dtrun "layout tp 8 x cp 1 x pp 4 + sequence_parallel with runtime dtrun: dtrun runs tensor parallelism (tp, sequence_parallel false) x ZeRO data parallelism only"
badplan dtrun_sp "layout tp 8 x cp 1 x pp 1 + sequence_parallel with runtime dtrun"
"$DTPLAN" show "$T/dtrun_tp.json" >/dev/null 2>"$T/err" && ok "a tp 8 plan for runtime dtrun loads" ||
    fail "dtrun tp 8: $(cat "$T/err")"
badplan offload "with offload (optimizer cpu, parameters cpu): not described"

# an uneven split (Megatron's --decoder-first/last-pipeline-num-layers): 18 + 2 x 22 + 18
python3 - "$T/l1.json" "$T/u.json" <<'PY' || fail "writing the uneven plan"
import json, sys
p = json.load(open(sys.argv[1]))
p["layout"].update(first_stage_layers=18, last_stage_layers=18)
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
"$DTPLAN" show "$T/u.json" >"$T/show" 2>&1 && grep -q "18 / 22 / 18 layers on first / middle / last stages" "$T/show" &&
    ok "an uneven split" || fail "uneven split: $(cat "$T/show")"
"$DTPLAN" solve --mem 2G --model gpt2-tiny --gpus 4 --layouts --hardware cpu --finetune lora >"$T/out" 2>"$T/err"
[ $? -eq 2 ] && grep -q "layouts are modelled for full fine-tuning only" "$T/err" &&
    ok "--layouts with LoRA on CPU ranks is refused" || fail "--layouts on cpu with lora: $(cat "$T/err")"

# dtrun on CPU ranks: tp is a decision variable where its engine runs it (docs/parallelism.md "In dtrun").
# Qwen2.5-0.5B on 4 ranks of 4 GiB: DP x ZeRO-3 does not fit (the 136M-element embedding unit's
# buffers), TP 2 x ZeRO-3 does; tp 3 and 4 are not weighed, each with its reason.
"$DTPLAN" solve --hardware cpu --model qwen2.5-0.5b --mem 4G --host-mem 200G --gpus 4 --seq 512 --global-batch 8 \
    --precision fp32 --no-offload -o "$T/cpu_tp.json" >"$T/out" 2>&1 || fail "solve dtrun tp on cpu: $(cat "$T/out")"
grep -q "^layouts weighed against DP x ZeRO (layouts planned for runtime dtrun):" "$T/out" &&
    grep -q "^  tp 3 not weighed: tp 3 does not divide the ranks per node (4)" "$T/out" &&
    grep -q "^  tp 4 not weighed: tp 4 does not divide the attention heads (14)" "$T/out" &&
    grep -q "^  why: the layout fits and DP x ZeRO does not" "$T/out" &&
    ok "solve on CPU ranks weighs dtrun's tp, says which degrees it cannot run and why it picked TP" ||
    fail "dtrun tp verdict: $(cat "$T/out")"
python3 - "$T/cpu_tp.json" <<'PY' && ok "the CPU plan records tp 2 without SP, for runtime dtrun" || fail "cpu tp plan: $(cat "$T/cpu_tp.json")"
import json, sys
p = json.load(open(sys.argv[1]))
l = p["layout"]
assert (l["tp"], l["cp"], l["pp"], l["sequence_parallel"]) == (2, 1, 1, False), l
assert p.get("runtime", {}).get("kind", "dtrun") == "dtrun" and p["parallel"]["world_size"] == 4
assert p["prediction"]["memory"]["total"] <= 4 * 2**30
PY
# GPT-2's 50257-token vocabulary: tp 2 is not weighed (dtrun does not pad it); DP x ZeRO is chosen
"$DTPLAN" solve --hardware cpu --model gpt2 --mem 4G --gpus 2 --seq 128 --global-batch 2 -o "$T/cpu_g.json" >"$T/out" 2>&1 ||
    fail "solve gpt2 on cpu: $(cat "$T/out")"
grep -q "^  tp 2 not weighed: tp 2 does not divide the vocabulary (50257)" "$T/out" &&
    grep -q "^  why: DP x ZeRO is the only kind of candidate here" "$T/out" && ! grep -q '"layout"' "$T/cpu_g.json" &&
    ok "gpt2's odd vocabulary: tp not weighed, said why" || fail "gpt2 cpu verdict: $(cat "$T/out")"
"$DTPLAN" solve --hardware cpu --model qwen2.5-0.5b --mem 4G --host-mem 200G --gpus 4 --seq 512 --global-batch 8 \
    --precision fp32 --no-offload --no-layouts >"$T/out" 2>&1
grep -q "layouts weighed" "$T/out" && fail "--no-layouts on cpu still weighs tp"

echo "$fails failed"
[ $fails -eq 0 ]
