#!/usr/bin/env bash
# Issue 36: dtplan export --torchtitan. Two plans (plain FSDP; TP 2 x PP 2 x FSDP) against
# committed golden TOMLs, the TOML parsed back (python3 tomllib) with every key checked against
# torchtitan's job_config.py field list, the torchrun / sbatch lines, and the refusals (one
# line naming the key, exit 2, nothing written).
# usage: test_titan_cli.sh DTPLAN DTRUN SOURCE_DIR
set -u
. "$(dirname "$0")/../lib.sh"
dt_need python3
DTPLAN=$1 SRC=$3 T=$(mktemp -d) fails=0 G=$3/tests/parallel/golden
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

"$DTPLAN" solve --mem 80G --model llama-3.1-8b --gpus 8 --global-batch 32 --seq 4096 --runtime fsdp \
    -o "$T/base.json" >"$T/out" 2>&1 || fail "solve: $(cat "$T/out")"
python3 - "$T/base.json" "$T" <<'PY' || fail "writing the plans"
import json, sys
p = json.load(open(sys.argv[1])); d = sys.argv[2]
p.pop("prediction", None); p.pop("layout", None)
p["runtime"]["kind"] = "fsdp"
p["parallel"].update(zero_stage=3, offload_optimizer="none", offload_param="none")
p["activations"].update(ckpt_layers=32); p["activations"].pop("selective_recompute", None)
p["batch"].update(micro_batch=2, grad_accum=2, global_batch=32)
p["output"].update(dir="out/llama8b", save_interval=500)
p["schedule"].update(kind="WarmupCosineLR", total_steps=1000, warmup_steps=100, warmup_type="linear", cos_min_ratio=0.1)
json.dump(p, open(d + "/fsdp.json", "w"), indent=2)
q = json.loads(json.dumps(p))
q["layout"] = {"tp": 2, "cp": 1, "pp": 2}
q["activations"].update(ckpt_layers=8)
q["batch"].update(micro_batch=1, grad_accum=8, global_batch=16)
json.dump(q, open(d + "/tp2pp2.json", "w"), indent=2)
def bad(name, f):
    b = json.loads(json.dumps(p)); f(b); json.dump(b, open(d + "/bad_" + name + ".json", "w"), indent=2)
# ZeRO-1 and a partial offload are DeepSpeed plans (the fsdp runtime refuses them itself)
ds = lambda b, **kw: (b["runtime"].update(kind="deepspeed"), b["parallel"].update(**kw))
bad("zero1", lambda b: ds(b, zero_stage=1))
bad("optonly", lambda b: ds(b, offload_optimizer="cpu"))
bad("nvme", lambda b: ds(b, offload_optimizer="nvme", offload_param="nvme", nvme_path="/tmp"))
bad("ckpt", lambda b: b["activations"].update(ckpt_layers=5))
bad("ddp_tp", lambda b: (b["parallel"].update(zero_stage=0), b["batch"].update(global_batch=16),
                         b.update(layout={"tp": 2, "cp": 1, "pp": 1})))
bad("rope", lambda b: b["model"].pop("rope_scaling"))   # Llama 3 8B without 3.1's RoPE scaling
bad("fp16", lambda b: b["precision"].update(preset="mixed-fp16", param="fp16", grad="fp16", activation="fp16"))
PY

golden() {
    local name=$1
    "$DTPLAN" export --torchtitan "$T/$name.json" -o "$T/$name.toml" --slurm "$T/$name.slurm" >"$T/$name.out" 2>"$T/err" ||
        { fail "export $name: $(cat "$T/err")"; return; }
    # the paths of this run's temporary directory are not part of the golden
    sed "s#$T/##g" "$T/$name.toml" >"$T/$name.cmp"
    if [ -n "${DT_REGEN:-}" ]; then cp "$T/$name.cmp" "$G/titan_$name.toml"; fi
    diff -u "$G/titan_$name.toml" "$T/$name.cmp" >"$T/diff" && ok "$name: the TOML equals the golden" ||
        fail "$name differs from tests/parallel/golden/titan_$name.toml: $(cat "$T/diff")"
    grep -q "torchrun --nnodes 1 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint \"localhost:0\" -m torchtitan.train --job.config_file $T/$name.toml" "$T/$name.out" &&
        ok "$name: the torchrun line" || fail "$name launch: $(cat "$T/$name.out")"
    bash -n "$T/$name.slurm" && grep -q "^srun PYTORCH_ALLOC_CONF" "$T/$name.slurm" && ok "$name: the sbatch script parses" ||
        fail "$name sbatch: $(cat "$T/$name.slurm")"
}
golden fsdp
golden tp2pp2

# parse back: valid TOML, every table and key one of torchtitan's job_config.py (commit in the file)
python3 - "$T/fsdp.toml" "$T/tp2pp2.toml" <<'PY' && ok "the TOMLs parse and use only torchtitan's keys" || fail "TOML parse-back"
import sys, tomllib
known = {
 "job": {"dump_folder", "description"}, "model": {"name", "flavor"},
 "optimizer": {"name", "lr", "beta1", "beta2", "eps", "weight_decay"},
 "lr_scheduler": {"warmup_steps", "decay_ratio", "decay_type", "min_lr_factor"},
 "training": {"local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps", "dtype",
              "mixed_precision_param", "mixed_precision_reduce", "enable_cpu_offload"},
 "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                 "tensor_parallel_degree", "context_parallel_degree", "pipeline_parallel_degree",
                 "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size", "module_fqns_per_model_part"},
 "checkpoint": {"enable", "folder", "interval", "keep_latest_k"},
 "activation_checkpoint": {"mode", "selective_ac_option"}, "compile": {"enable"}, "debug": {"seed"}}
for path in sys.argv[1:]:
    t = tomllib.load(open(path, "rb"))
    for sec, kv in t.items():
        assert sec in known, (path, sec)
        for k in kv: assert k in known[sec], (path, sec, k)
    par = t["parallelism"]
    world = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] * \
        par["tensor_parallel_degree"] * par["context_parallel_degree"] * par["pipeline_parallel_degree"]
    assert world == 8, (path, world)
    if par["pipeline_parallel_degree"] > 1:
        parts = par["module_fqns_per_model_part"]
        layers = [m for part in parts for m in part if m.startswith("layers.")]
        assert layers == ["layers.%d" % i for i in range(32)], layers
        assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
        t_ = t["training"]
        assert t_["local_batch_size"] % par["pipeline_parallel_microbatch_size"] == 0
        dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
        assert t_["global_batch_size"] == t_["local_batch_size"] * dp, t_
PY

# strings are TOML strings: a quote and a backslash in the output directory survive the round trip
python3 - "$T/fsdp.json" "$T/q.json" <<'PY' || fail "writing the quoted plan"
import json, sys
p = json.load(open(sys.argv[1])); p["output"]["dir"] = 'out/"q"\\b'
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
"$DTPLAN" export --torchtitan "$T/q.json" -o "$T/q.toml" >/dev/null 2>"$T/err" || fail "export q: $(cat "$T/err")"
python3 -c 'import sys, tomllib; d = tomllib.load(open(sys.argv[1], "rb"))["job"]["dump_folder"]; assert d == "out/\"q\"\\b", d' \
    "$T/q.toml" && ok "a quoted output directory round-trips" || fail "quoted dump_folder: $(grep dump_folder "$T/q.toml")"

refused() {   # dt_bad's rule, and no TOML left behind
    dt_bad "$2" "$DTPLAN" export --torchtitan "$T/bad_$1.json" -o "$T/bad_$1.toml"
    [ -e "$T/bad_$1.toml" ] && fail "$1: wrote the TOML"
    ok "$1: $(cat "$T/err")"
}
refused zero1 "parallel.zero_stage 1: torchtitan's FSDP2 shards parameters, gradients and optimizer states together"
refused optonly "parallel.offload_optimizer / offload_param"
refused nvme "parallel.offload nvme"
refused fp16 "precision fp16"
refused rope "model 'llama-3.1-8b' (32 layers, hidden 4096, ffn 14336, rope_theta 500000, its RoPE scaling) is none of torchtitan's flavors"
"$DTPLAN" solve --mem 80G --model llama-3.1-8b --gpus 8 --runtime fsdp --finetune lora -o "$T/lora.json" >/dev/null 2>&1
"$DTPLAN" export --torchtitan "$T/lora.json" -o "$T/lora.toml" >"$T/out" 2>"$T/err"
[ $? -eq 2 ] && [ ! -e "$T/lora.toml" ] && grep -q "finetune.method: torchtitan trains every parameter" "$T/err" &&
    ok "a LoRA plan: $(cat "$T/err")" || fail "lora: $(cat "$T/err")"
refused ckpt "activations.ckpt_layers 5: torchtitan checkpoints every n-th of the 32 blocks"
refused ddp_tp "parallel.zero_stage 0 with a layout"
"$DTPLAN" solve --mem 80G --model llama-2-7b --gpus 8 --runtime fsdp -o "$T/l2.json" >/dev/null 2>&1
"$DTPLAN" export --torchtitan "$T/l2.json" -o "$T/l2.toml" >"$T/out" 2>"$T/err"
[ $? -eq 2 ] && grep -q "model 'llama-2-7b' .* is none of torchtitan's flavors" "$T/err" && ok "a model torchtitan lacks" ||
    fail "llama-2-7b: $(cat "$T/err")"
echo keep >"$T/exists.toml"
"$DTPLAN" export --torchtitan "$T/fsdp.json" -o "$T/exists.toml" >"$T/out" 2>"$T/err"
[ $? -eq 2 ] && [ "$(cat "$T/exists.toml")" = keep ] && ok "an existing -o is not replaced" || fail "exists: $(cat "$T/err")"
"$DTPLAN" export --torchtitan "$T/fsdp.json" >"$T/out" 2>"$T/err"
[ $? -eq 2 ] && grep -q "needs -o FILE.toml" "$T/err" && ok "-o is required" || fail "no -o: $(cat "$T/err")"

echo "$fails failed"
[ $fails -eq 0 ]
