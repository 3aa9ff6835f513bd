#!/bin/bash
# grpo in dtrun (docs/objectives.md "In dtrun"): the digit-successor task of scripts/grpo_demo.sh
# ("3=" -> "4", a random-weight Llama of 2 layers, hidden 32; a 16-token tokenizer made from
# tests/tokenizer/data/qwen2-mini.json's settings) through `dtrun prepare --format prompts`,
# `dtplan solve --objective grpo` and `dtrun PLAN`:
#   - the mean reward rises with the built-in exact-answer reward (40 steps, G 16, beta 0; the
#     curve is dtplan report's reward.png), and with beta 0.04 (a frozen reference: kl > 0 logged);
#   - a user reward command (--reward-command) is what scores: partial credit raises the reward;
#   - 2 ranks under mpirun (ZeRO-1, and ZeRO-3 with beta 0.04, accumulation 1) take the same
#     steps as 1 rank with accumulation 2 (rollouts seeded by the data, not the rank);
#   - a group spread over micro-batches (8 x 20 with G 16) takes the same step as 160 x 1;
#   - a resume from a checkpoint continues bitwise; LoRA with beta 0.04 (reference = adapters off);
#   - num_iterations 2 (TRL's, the paper's mu): a rollout serves 2 steps (same rewards), the
#     ratio is 1 on its first (nothing clipped) and leaves the clip range on a second;
#     2 ranks take 1 rank's steps; a resume at a rollout's start continues bitwise, one inside
#     its 2 steps is refused by name (its fix, a plan of num_iterations 1, resumes it);
#     --num-iterations 0 / 2x / with dpo refused by dtplan;
#   - bad input, one line and exit 2, nothing half-written: an empty prompt and a prompt longer
#     than --seq (prepare names FILE:LINE; a previous output stays whole), a plan whose seq_len
#     the prompt and completion exceed (dtrun names the record before any step), a record
#     without an answer and no reward command, a reward command that fails (names it), prompt
#     shards given to a dpo plan.
# Usage: test_grpo_dtrun.sh DTPLAN DTRUN SRCDIR
set -u
DTPLAN=$1
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3 mpirun
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dt_scratch dt_test_grpo_dtrun
T=$TMP
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
cd "$T" || exit 1

python3 - "$SRC/tests/tokenizer/data/qwen2-mini.json" <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))
vocab = {str(d): d for d in range(10)}
vocab["="] = 10
for i, c in enumerate("abcd"): vocab[c] = 12 + i
tok = dict(base, added_tokens=[dict(base["added_tokens"][0], id=11)],   # <|endoftext|> 11
           model=dict(base["model"], vocab=vocab, merges=[]))
json.dump(tok, open("tok.json", "w"))
# the planner's byte-tokenizer check wants 256 rows; the generator samples only the tokenizer's 16
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
           "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 16, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": False}, open("config.json", "w"))
with open("prompts.jsonl", "w") as f:
    for d in range(10): f.write(json.dumps({"prompt": f"{d}=", "answer": str((d + 1) % 10)}) + "\n")
with open("noanswer.jsonl", "w") as f:
    for d in range(10): f.write(json.dumps({"prompt": f"{d}="}) + "\n")
open("empty.jsonl", "w").write('{"prompt": "1=", "answer": "2"}\n{"prompt": "", "answer": "1"}\n')
open("long.jsonl", "w").write('{"prompt": "1=", "answer": "2"}\n{"prompt": "123456=", "answer": "1"}\n')
open("reward.py", "w").write(
    "import json, sys\n"
    "for l in sys.stdin:\n"
    "    r = json.loads(l); c = r['completion'].strip()\n"
    "    print(1.0 if c[:1] == r['answer'] else 0.2 if c[:1].isdigit() else 0.0)\n")
PY

"$DTRUN" prepare --format prompts --tokenizer tok.json --out pr --val-fraction 0 --seq 6 --quiet prompts.jsonl ||
    { echo "FAIL: prepare --format prompts"; exit 1; }
plan() {   # plan OUT GPUS STAGE STEPS [solve args]: a grpo plan of the task (micro-batch, accumulation set after)
    local out=$1 gpus=$2 stage=$3 steps=$4
    shift 4
    "$DTPLAN" solve --model config.json --gpus "$gpus" --mem 2G --hardware cpu --stages "$stage" --objective grpo \
        --num-generations 16 --max-completion-length 2 --data pr --seq 6 --global-batch 160 --steps "$steps" \
        --warmup 0 --precision fp32 --lr 1e-2 "$@" -o "$out" >/dev/null || { echo "FAIL: plan $out"; exit 1; }
}
set_batch() {   # set_batch PLAN MICRO ACCUM
    python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); p["batch"].update(micro_batch=int(sys.argv[2]),
grad_accum=int(sys.argv[3])); p.pop("prediction", None); json.dump(p, open(sys.argv[1], "w"))' "$@"
}
rises() {   # rises RUN WHAT: the mean reward of the last 5 steps exceeds the first 5's by 0.2
    python3 - "$1" "$2" <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
r = [x["reward"] for x in m]
first, last = sum(r[:5]) / 5, sum(r[-5:]) / 5
for k in ("reward_std", "frac_reward_zero_std", "completions/mean_length", "completions/clipped_ratio", "kl"):
    if k not in m[-1]: print(f"FAIL {sys.argv[2]}: metrics.jsonl has no {k}"); sys.exit(1)
if not last > first + 0.2:
    print(f"FAIL {sys.argv[2]}: the mean reward did not rise: " + " ".join(f"{x:.3f}" for x in r)); sys.exit(1)
print(f"ok   {sys.argv[2]}: mean reward {first:.3f} -> {last:.3f} (first / last five steps): "
      + " ".join(f"{x:.2f}" for x in r))
PY
}

# ---- the reward rises: exact answer, beta 0 and beta 0.04 ----
plan g.json 1 0 40
if "$DTRUN" g.json --out g --no-progress 2>g.log; then
    rises g "grpo beta 0" || FAIL=1
    grep -q "objective grpo: 10 training prompts" g.log || fail "the log does not describe the grpo run"
    "$DTPLAN" report g -o grep >/dev/null 2>grep.err && [ -s grep/reward.png ] && grep -q "reward.png" grep/report.md ||
        fail "dtplan report of a grpo run draws no reward curve: $(cat grep.err)"
else
    fail "grpo run: $(tail -3 g.log)"
fi
plan gk.json 1 0 30 --kl-coef 0.04
if "$DTRUN" gk.json --out gk --quiet; then
    rises gk "grpo beta 0.04" || FAIL=1
    python3 -c 'import json, sys; m = [json.loads(l) for l in open("gk/metrics.jsonl")]
sys.exit(0 if m[0]["kl"] == 0 and m[-1]["kl"] > 0 else 1)' || fail "beta 0.04: kl not 0 at the start and > 0 after"
else
    fail "grpo beta 0.04 run"
fi

# ---- a user reward command scores the completions ----
if "$DTRUN" g.json --out gu --quiet --reward-command "python3 $T/reward.py" --max-steps 20; then
    python3 - <<'PY' || FAIL=1
import json
r = [json.loads(l)["reward"] for l in open("gu/metrics.jsonl")]
e = [json.loads(l)["reward"] for l in open("g/metrics.jsonl")][:len(r)]
# the command's partial credit (0.2 for any digit) scores the same completions above the exact answer's
if not (r[0] > e[0] and sum(r[-5:]) / 5 > sum(r[:5]) / 5):
    print(f"FAIL reward command: {r} against the exact answer's {e}"); raise SystemExit(1)
print(f"ok   reward command: first step {r[0]:.3f} (exact answer {e[0]:.3f}), mean {sum(r[:5]) / 5:.3f} -> "
      f"{sum(r[-5:]) / 5:.3f}")
PY
else
    fail "grpo run with --reward-command"
fi

# ---- 2 ranks equal 1 rank ----
plan g1.json 1 0 6
set_batch g1.json 80 2
plan g2.json 2 1 6
set_batch g2.json 80 1
same_steps() {   # same_steps BASE OUT WHAT: OUT's losses, grad norms (1e-5) and rewards (1e-6) are BASE's
    python3 - "$1" "$2" "$3" <<PY || FAIL=1
$dt_metrics_close
import sys
bad = []
metrics_close(sys.argv[2], sys.argv[1], bad, rel=1e-5)
a, b = series(sys.argv[1], "reward"), series(sys.argv[2], "reward")
if max(abs(x - y) for x, y in zip(a, b)) > 1e-6: bad.append(f"rewards differ: {a} vs {b}")
# reward_std over every rank's rewards (TRL gathers them), not the mean of each rank's std
sa, sb = series(sys.argv[1], "reward_std"), series(sys.argv[2], "reward_std")
if max(abs(x - y) for x, y in zip(sa, sb)) > 1e-6: bad.append(f"reward_std differs: {sa} vs {sb}")
if bad: print(f"FAIL {sys.argv[3]}:\n  " + "\n  ".join(bad)); raise SystemExit(1)
print(f"ok   {sys.argv[3]} takes 1 rank's steps: rewards {b}")
PY
}
if dt_run_ranks "$DTRUN" 1 g1.json g1 && dt_run_ranks "$DTRUN" 2 g2.json g2; then
    same_steps g1 g2 "grpo on 2 ranks (ZeRO-1)"
else
    fail "grpo 1-rank / 2-rank runs"
fi
# a group spread over micro-batches (micro-batch 8 < G 16, accumulation 20): the step is the one
# micro-batch of 160's (one rollout per step, dapo normalised by the step's tokens, as TRL)
plan ga.json 1 0 4
set_batch ga.json 8 20
plan gb.json 1 0 4
set_batch gb.json 160 1
if dt_run_ranks "$DTRUN" 1 ga.json ga && dt_run_ranks "$DTRUN" 1 gb.json gb; then
    python3 - <<PY || FAIL=1
$dt_metrics_close
a, b = series("gb", "grad_norm"), series("ga", "grad_norm")
ra, rb = series("gb", "reward"), series("ga", "reward")
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
if len(a) != 4 or d > 1e-5 or ra != rb:
    print(f"FAIL accumulation 20 x 8 vs 1 x 160: grad norms {b} vs {a}, rewards {rb} vs {ra}"); raise SystemExit(1)
print(f"ok   grpo with groups spread over micro-batches: 20 x 8 takes the 1 x 160 step (grad norm within {d:.1g})")
PY
else
    fail "grpo accumulation runs"
fi
# ZeRO-3 with beta 0.04: the generator filled from each unit's all-gather, the reference replicated
plan k1.json 1 0 6 --kl-coef 0.04
set_batch k1.json 80 2
plan k3.json 2 3 6 --kl-coef 0.04
set_batch k3.json 80 1
if dt_run_ranks "$DTRUN" 1 k1.json k1 && dt_run_ranks "$DTRUN" 2 k3.json k3; then
    same_steps k1 k3 "grpo on 2 ranks at ZeRO-3 with beta 0.04"
else
    fail "grpo ZeRO-3 runs"
fi
# the plan's temperature and top_p (TRL's GRPOConfig temperature / top_p): sampled with them, the
# loss's log-probs at the temperature; 2 ranks still take 1 rank's steps, and the plan keeps them
plan t1.json 1 0 4 --temperature 0.7 --top-p 0.9
set_batch t1.json 80 2
plan t2.json 2 1 4 --temperature 0.7 --top-p 0.9
set_batch t2.json 80 1
python3 -c 'import json, sys; o = json.load(open(sys.argv[1]))["objective"]
sys.exit(not (o["temperature"] == 0.7 and o["top_p"] == 0.9))' t2.json || fail "the plan lacks temperature 0.7 / top_p 0.9"
if dt_run_ranks "$DTRUN" 1 t1.json t1 && dt_run_ranks "$DTRUN" 2 t2.json t2; then
    same_steps t1 t2 "grpo at temperature 0.7, top_p 0.9 on 2 ranks"
    python3 - <<PY || FAIL=1
$dt_metrics_close
a, b = series("g1", "loss"), series("t1", "loss")
if a[:4] == b: print("FAIL temperature 0.7 / top_p 0.9 changed no loss"); raise SystemExit(1)
print("ok   temperature 0.7 / top_p 0.9 sample and score otherwise than 1 / 1")
PY
else
    fail "grpo runs at temperature 0.7"
fi
# bad sampler and iteration settings: one line, exit 2, no plan written
for bad in "--temperature 0" "--top-p 1.5" "--top-p 0" "--num-iterations 0" "--num-iterations 2x"; do
    rm -f bad.json
    # shellcheck disable=SC2086
    "$DTPLAN" solve --model config.json --gpus 1 --mem 2G --hardware cpu --objective grpo --num-generations 16 \
        --max-completion-length 2 --data pr --seq 6 --global-batch 160 --precision fp32 $bad -o bad.json \
        >/dev/null 2>err.txt
    rc=$?
    if [ $rc -ne 2 ] || [ "$(wc -l <err.txt)" -ne 1 ] || ! grep -q "temperature\|top-p\|num-iterations" err.txt || [ -e bad.json ]; then
        fail "$bad: exit $rc, $(cat err.txt)"
    else
        echo "ok   $bad refused: $(cat err.txt)"
    fi
done

# ---- a resume continues bitwise (2 prompts per micro-batch, accumulation 5) ----
resumes() {   # resumes PLAN SAVE STOP WHAT: 6 steps, saved every SAVE; stopped at STOP and resumed, the same
    local pl=$1 every=$2 stop=$3 what=$4
    set_batch "$pl" 32 5
    python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); p["output"].update(save_interval=int(sys.argv[2]),
keep_last=4); json.dump(p, open(sys.argv[1], "w"))' "$pl" "$every"
    if dt_run_ranks "$DTRUN" 1 "$pl" "$pl.a" && dt_run_ranks "$DTRUN" 1 "$pl" "$pl.b" --max-steps "$stop" &&
       dt_run_ranks "$DTRUN" 1 "$pl" "$pl.b" --resume; then
        python3 -c 'import json, sys; k = ("step", "loss", "reward", "grad_norm"); r = lambda d: [[json.loads(l)[x]
for x in k] for l in open(d + "/metrics.jsonl")]; sys.exit(r(sys.argv[1]) != r(sys.argv[2]))' "$pl.a" "$pl.b" &&
            echo "ok   $what: steps $((stop + 1))-6 equal the uninterrupted run's" || fail "$what: the resumed run differs"
    else
        fail "$what: runs"
    fi
}
plan gr.json 1 0 6
resumes gr.json 3 3 "grpo resume"

# ---- num_iterations 2 (TRL's, the paper's mu): a rollout serves 2 steps, the second clips its
# ratio to the generating policy's log-probs; 2 ranks take 1 rank's steps; a resume at a rollout's
# start continues bitwise, one inside it is refused by name ----
plan i1.json 1 0 6 --num-iterations 2
set_batch i1.json 80 2
plan i2.json 2 1 6 --num-iterations 2
set_batch i2.json 80 1
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["objective"]["num_iterations"] != 2)' i2.json ||
    fail "the plan lacks num_iterations 2"
if dt_run_ranks "$DTRUN" 1 i1.json i1 && dt_run_ranks "$DTRUN" 2 i2.json i2; then
    same_steps i1 i2 "grpo num_iterations 2 on 2 ranks (ZeRO-1)"
    python3 - <<PY || FAIL=1
$dt_metrics_close
r, c = series("i1", "reward"), series("i1", "clip_ratio/region_mean")
# steps 1, 3, 5 generate; 2, 4, 6 reuse their rollout (same rewards) with the ratio to the
# generating policy: 1 on a rollout's first step (nothing clipped), off 1 on its second
bad = [f"steps {i + 1}, {i + 2} do not share a rollout: rewards {r[i]} {r[i + 1]}" for i in (0, 2, 4) if r[i] != r[i + 1]]
bad += [f"step {i + 1}: ratio clipped on a rollout's first step ({c[i]})" for i in (0, 2, 4) if c[i] != 0]
if not any(c[i] > 0 for i in (1, 3, 5)): bad.append(f"the second iterations' ratio stayed in the clip range: {c}")
if r[0] == r[2] == r[4]: bad.append(f"no new rollout every 2 steps: rewards {r}")
if bad: print("FAIL num_iterations 2:\n  " + "\n  ".join(bad)); raise SystemExit(1)
print(f"ok   num_iterations 2: a rollout per 2 steps, clip_ratio/region_mean {c}")
PY
else
    fail "grpo num_iterations 2 runs"
fi
plan ir.json 1 0 6 --num-iterations 2
resumes ir.json 2 4 "num_iterations 2 resume at step 4"
dt_run_ranks "$DTRUN" 1 ir.json ic --max-steps 3 || fail "num_iterations 2 run to step 3"
dt_bad "inside a grpo rollout's num_iterations 2 steps" "$DTRUN" ir.json --out ic --quiet --resume
[ "$(wc -l <ic/metrics.jsonl)" = 3 ] || fail "a refused num_iterations resume changed ic/metrics.jsonl"
plan ir1.json 1 0 6   # the refusal's fix: that checkpoint resumes with a plan of num_iterations 1
set_batch ir1.json 32 5
dt_run_ranks "$DTRUN" 1 ir1.json ic --resume && [ "$(wc -l <ic/metrics.jsonl)" = 6 ] ||
    fail "the mid-rollout checkpoint does not resume with --num-iterations 1"
dt_bad "--num-iterations is a grpo setting, not dpo's" "$DTPLAN" solve --model config.json --gpus 1 --mem 2G \
    --hardware cpu --objective dpo --num-iterations 2 --data pr --seq 6 --global-batch 8 --precision fp32 -o nd.json
[ -e nd.json ] && fail "a refused --num-iterations wrote a plan"

# ---- LoRA: the reference is the policy with its adapters off (kl 0 at the start, then > 0) ----
plan gl.json 1 0 8 --kl-coef 0.04 --finetune lora
if dt_run_ranks "$DTRUN" 1 gl.json gl; then
    python3 -c 'import json, sys; m = [json.loads(l) for l in open("gl/metrics.jsonl")]
sys.exit(0 if m[0]["kl"] == 0 and m[-1]["kl"] > 0 else 1)' && echo "ok   grpo under LoRA with beta 0.04" ||
        fail "LoRA grpo: kl not 0 at the start and > 0 after"
else
    fail "LoRA grpo run"
fi

# ---- chat prompts (ChatML, rendered to the assistant's header) on a tiny Qwen3 at ZeRO-2 ----
python3 - "$SRC/models/catalog/qwen3-tiny.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(vocab_size=1500)
json.dump(c, open("q3.json", "w"))
with open("chat.jsonl", "w") as f:
    for i in range(8): f.write(json.dumps({"prompt": [{"role": "user", "content": f"What is {i}+1?"}], "answer": i + 1}) + "\n")
PY
if "$DTRUN" prepare --format prompts --tokenizer "$SRC/tests/tokenizer/data/qwen2-mini.json" --out cp --val-fraction 0 \
       --seq 48 --quiet chat.jsonl &&
   "$DTPLAN" solve --model q3.json --gpus 1 --mem 2G --hardware cpu --stages 2 --objective grpo --num-generations 4 \
       --max-completion-length 8 --data cp --seq 48 --global-batch 16 --steps 3 --warmup 0 --precision fp32 \
       -o cq.json >/dev/null && dt_run_ranks "$DTRUN" 1 cq.json cq; then
    [ "$(wc -l <cq/metrics.jsonl)" = 3 ] && echo "ok   grpo on chat prompts (Qwen3, ZeRO-2)" || fail "chat grpo: no 3 steps"
else
    fail "grpo on chat prompts"
fi

# ---- bad input ----
mkdir keep && cp -r pr keep/
dt_bad "empty.jsonl:2" "$DTRUN" prepare --format prompts --tokenizer tok.json --out pr --seq 6 --quiet empty.jsonl
dt_bad "long.jsonl:2" "$DTRUN" prepare --format prompts --tokenizer tok.json --out pr --seq 6 --quiet long.jsonl
diff -r pr keep/pr >/dev/null || fail "a refused prepare changed the previous output"
"$DTRUN" prepare --format prompts --tokenizer tok.json --out prl --val-fraction 0 --quiet long.jsonl prompts.jsonl ||
    fail "prepare without --seq"
plan bad.json 1 0 2
python3 -c 'import json; p = json.load(open("bad.json")); p["data"]["train"] = "prl/train"; json.dump(p, open("bad.json", "w"))'
dt_bad "line 2" "$DTRUN" bad.json --out badrun --quiet
[ -e badrun/metrics.jsonl ] && fail "a refused grpo run wrote metrics.jsonl"
"$DTRUN" prepare --format prompts --tokenizer tok.json --out pn --val-fraction 0 --quiet noanswer.jsonl ||
    fail "prepare prompts without answers"
dt_bad "reward-command" "$DTRUN" g.json --data pn/train --out nr --quiet
dt_bad "'cat >/dev/null; exit 3' exited with status 3" "$DTRUN" g.json --out rf --quiet \
    --reward-command "cat >/dev/null; exit 3"
ls rf/ckpt-* >/dev/null 2>&1 && fail "a run whose reward command failed wrote a checkpoint"
"$DTPLAN" solve --model config.json --gpus 1 --mem 2G --hardware cpu --stages 0 --objective dpo --data pr --seq 6 \
    --global-batch 8 --steps 2 --precision fp32 -o d.json >/dev/null || fail "plan dpo"
dt_bad "prepare --format pairs" "$DTRUN" d.json --out dd --quiet
[ $FAIL = 0 ] && echo "PASS"
exit $FAIL
