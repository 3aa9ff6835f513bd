#!/usr/bin/env bash
# check_bitwise.sh — do two builds of dtrun train bit for bit the same?
#
# For a refactor that must not change behaviour (issue 30): runs the same plans with
# BUILD_A/dtrun and BUILD_B/dtrun and compares, byte for byte,
#   - every step's loss, grad_norm and lr as metrics.jsonl prints them,
#   - the sha256 of every file of every checkpoint directory (model.safetensors, the
#     optimizer shards, the Hugging Face export (config.json beside model.safetensors),
#     the plan; state.json without its random run_id),
#   - the run report's tracked memory (every "tracked" figure of run-report.json),
# for GPT-2 tiny and the llama family (Qwen3: q/k norm, untied lm_head, checkpointed
# blocks; Qwen2: q/k/v bias, tied, materialized attention), fp32 and mixed-bf16, ZeRO 0
# and 3 (stage 3 with its optimizer and parameters offloaded to the CPU for one case),
# on 2 ranks under mpirun, plus a --resume of one run.
#
# usage: scripts/check_bitwise.sh BUILD_A BUILD_B [SOURCE_DIR]
#        scripts/check_bitwise.sh --negative-control BUILD [SOURCE_DIR]
#   SOURCE_DIR: the tree whose configs/ and tests/kernels/golden/train/ hold the plans
#   and data (default: this script's repository). Keeps its work in a temporary
#   directory (DT_BITWISE_KEEP=1 keeps it). Exit 0: identical; 1: a difference (each
#   one named); 2: bad usage or a run that failed.
#   --negative-control: BUILD against itself on one plan whose second copy differs
#   only in the learning rate (1e-3 -> 1.001e-3); exit 0 when the comparison reports
#   different losses and a different model.safetensors, 1 when it misses either.
set -u
usage() { echo "usage: $0 BUILD_A BUILD_B [SOURCE_DIR] | --negative-control BUILD [SOURCE_DIR]" >&2; exit 2; }
NEGATIVE=0
if [ "${1:-}" = --negative-control ]; then
  NEGATIVE=1
  shift
  [ $# -ge 1 ] && [ $# -le 2 ] || usage
  set -- "$1" "$@"
fi
[ $# -ge 2 ] && [ $# -le 3 ] || usage
A=$(cd "$1" 2>/dev/null && pwd) || { echo "check_bitwise: no build directory '$1'" >&2; exit 2; }
B=$(cd "$2" 2>/dev/null && pwd) || { echo "check_bitwise: no build directory '$2'" >&2; exit 2; }
SRC=${3:-$(cd "$(dirname "$0")/.." && pwd)}
for b in "$A" "$B"; do
  [ -x "$b/dtrun" ] || { echo "check_bitwise: $b/dtrun is not an executable (build it first)" >&2; exit 2; }
done
for tool in jq mpirun sha256sum; do
  command -v "$tool" >/dev/null || { echo "check_bitwise: $tool is needed (scripts/setup.sh)" >&2; exit 2; }
done
TINY=$SRC/configs/plans/tiny-cpu.json
GOLD=$SRC/tests/kernels/golden/train
[ -f "$TINY" ] && [ -f "$GOLD/qwen3.plan.json" ] || { echo "check_bitwise: no plans under $SRC" >&2; exit 2; }
[ -d /usr/share/games/fortunes ] || { echo "check_bitwise: /usr/share/games/fortunes missing (fortunes-min)" >&2; exit 2; }

TMP=$(mktemp -d /tmp/dt_bitwise_XXXXXX)
if [ "${DT_BITWISE_KEEP:-0}" = 1 ]; then echo "check_bitwise: work kept in $TMP"; else trap 'rm -rf "$TMP"' EXIT; fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fails=0

BF16='| .precision |= (.preset = "mixed-bf16" | .param = "bf16" | .grad = "bf16" | .has_master = true
       | .master = "fp32" | .moment = "fp32" | .activation = "bf16"
       | .bytes_per_param = {"param": 2, "grad": 2, "optimizer": 12}) | del(.prediction)'
TWO_RANKS='| .parallel.world_size = 2 | .cluster.gpus_per_node = 2'
# GPT-2 tiny (random init): 6 steps of 2 ranks x micro-batch 4 x accumulation 2
GPT2_BASE='.batch |= (.micro_batch = 4 | .grad_accum = 2 | .global_batch = 16)
  | .schedule |= (.total_steps = 6 | .warmup_steps = 2) | .data.eval_interval = 0
  | .output |= (.save_interval = 3 | .keep_last = 2 | .init = "")'
# Qwen3 from the golden's initial weights: T = 160, 2 of 3 blocks checkpointed, untied
QWEN3_BASE='.data.train = $src + "/" + .data.train | .output.init = $src + "/" + .output.init
  | .batch |= (.micro_batch = 2 | .grad_accum = 1 | .global_batch = 4)
  | .schedule |= (.total_steps = 4 | .warmup_steps = 1) | .output |= (.save_interval = 2 | .keep_last = 2)'
# Qwen2-style (q/k/v bias, tied embeddings) from a random init, materialized attention
QWEN2_EDIT='| .model |= (.name = "qwen2-tiny" | .qk_norm = false | .qkv_bias = true | .tied_embeddings = true)
  | .output.init = "" | .activations |= (.attention = "materialized" | .ckpt_layers = 1)'

# case NAME BASE_PLAN JQ_EDIT: one plan for both builds
cases=()
make_case() {
  local name=$1 base=$2 edit=$3
  jq --arg src "$SRC" "$edit" "$base" >"$TMP/$name.plan.json" ||
    { echo "check_bitwise: cannot write the plan of $name" >&2; exit 2; }
  cases+=("$name")
}
make_case gpt2-z0-fp32 "$TINY" "$GPT2_BASE $TWO_RANKS | .parallel.zero_stage = 0"
make_case gpt2-z3-fp32 "$TINY" "$GPT2_BASE $TWO_RANKS | .parallel.zero_stage = 3"
make_case gpt2-z0-bf16 "$TINY" "$GPT2_BASE $TWO_RANKS | .parallel.zero_stage = 0 $BF16"
make_case gpt2-z3-bf16-offload "$TINY" "$GPT2_BASE $TWO_RANKS | .parallel |= (.zero_stage = 3
  | .offload_optimizer = \"cpu\" | .offload_param = \"cpu\") $BF16"
make_case gpt2-z2-ckpt-materialized "$TINY" "$GPT2_BASE $TWO_RANKS | .parallel.zero_stage = 2
  | .activations |= (.ckpt_layers = 1 | .attention = \"materialized\")"
make_case qwen3-z0-fp32 "$GOLD/qwen3.plan.json" "$QWEN3_BASE $TWO_RANKS | .parallel.zero_stage = 0"
make_case qwen3-z3-fp32 "$GOLD/qwen3.plan.json" "$QWEN3_BASE $TWO_RANKS | .parallel.zero_stage = 3"
make_case qwen3-z0-bf16 "$GOLD/qwen3.plan.json" "$QWEN3_BASE $TWO_RANKS | .parallel.zero_stage = 0 $BF16"
make_case qwen3-z3-bf16 "$GOLD/qwen3.plan.json" "$QWEN3_BASE $TWO_RANKS | .parallel.zero_stage = 3 $BF16"
make_case qwen2-z0-fp32 "$GOLD/qwen3.plan.json" "$QWEN3_BASE $TWO_RANKS | .parallel.zero_stage = 0 $QWEN2_EDIT"
make_case qwen2-z3-bf16 "$GOLD/qwen3.plan.json" "$QWEN3_BASE $TWO_RANKS | .parallel.zero_stage = 3 $QWEN2_EDIT $BF16"

# summary BUILD NAME: the run's comparable facts, one per line
summary() {
  local out=$1
  jq -r '"step \(.step) loss \(.loss) grad_norm \(.grad_norm) lr \(.lr)"' "$out/metrics.jsonl" 2>/dev/null |
    grep -v 'loss null'
  # state.json carries the run's random id (run_id): hashed without it
  (cd "$out" && find . -path './ckpt-*' -type f ! -name state.json | LC_ALL=C sort | xargs -r sha256sum |
    sed 's/^/sha256 /')
  for s in "$out"/ckpt-*/state.json; do
    [ -f "$s" ] && echo "sha256 $(jq -S 'del(.run_id)' "$s" | sha256sum | cut -d' ' -f1)  ${s#"$out"/} without run_id"
  done
  for r in "$out"/run-report*.json; do
    [ -f "$r" ] || continue
    jq -c --arg f "$(basename "$r")" '[paths(scalars) as $p | select(any($p[]; tostring | test("tracked")))
        | {($p | map(tostring) | join(".")): getpath($p)}] | add | {($f): .}' "$r"
  done
}

# run BUILD TAG NAME [dtrun args]: 2 ranks; exit 2 if it fails
run() {
  local build=$1 tag=$2 name=$3
  shift 3
  local out=$TMP/$tag/$name
  mkdir -p "$TMP/$tag"
  local plan=$TMP/$name.plan.json
  [ "$tag" = b ] && [ -f "$TMP/$name.b.plan.json" ] && plan=$TMP/$name.b.plan.json
  if ! mpirun -n 2 --oversubscribe "$build/dtrun" "$plan" --out "$out" --quiet "$@" \
      >"$out.log" 2>&1; then
    echo "check_bitwise: $name failed with $build/dtrun:" >&2
    tail -5 "$out.log" >&2
    exit 2
  fi
}

compare() {   # NAME: A's and B's summaries byte for byte
  local name=$1
  summary "$TMP/a/$name" >"$TMP/a/$name.sum"
  summary "$TMP/b/$name" >"$TMP/b/$name.sum"
  if [ ! -s "$TMP/a/$name.sum" ]; then
    echo "DIFF $name: nothing to compare (no metrics, checkpoints or report)"
    fails=$((fails + 1))
  elif cmp -s "$TMP/a/$name.sum" "$TMP/b/$name.sum"; then
    echo "same $name: $(grep -c '^step' "$TMP/a/$name.sum") steps, $(grep -c '^sha256' "$TMP/a/$name.sum") checkpoint files, $(grep -c 'tracked' "$TMP/a/$name.sum") reports"
  else
    echo "DIFF $name:"
    diff "$TMP/a/$name.sum" "$TMP/b/$name.sum" >"$TMP/$name.diff"
    head -20 "$TMP/$name.diff"
    fails=$((fails + 1))
  fi
}

if [ "$NEGATIVE" = 1 ]; then
  jq '.optimizer.lr = 1.001e-3' "$TMP/gpt2-z0-fp32.plan.json" >"$TMP/gpt2-z0-fp32.b.plan.json"
  run "$A" a gpt2-z0-fp32
  run "$B" b gpt2-z0-fp32
  compare gpt2-z0-fp32 >/dev/null
  if [ "$fails" -eq 1 ] && grep -q '^> step .* loss' "$TMP/gpt2-z0-fp32.diff" &&
      grep -q '^> sha256 .*model.safetensors' "$TMP/gpt2-z0-fp32.diff"; then
    echo "check_bitwise: negative control: a 0.1 % change of the learning rate is reported (losses, model.safetensors)"
    exit 0
  fi
  echo "check_bitwise: negative control FAILED: the changed learning rate went unnoticed"
  exit 1
fi

for name in "${cases[@]}"; do
  run "$A" a "$name"
  run "$B" b "$name"
  compare "$name"
done
# --resume: the gpt2 ZeRO-3 run stopped after its first checkpoint and continued
cp "$TMP/gpt2-z3-fp32.plan.json" "$TMP/gpt2-z3-fp32-resume.plan.json"
for tag in a b; do
  build=$A; [ $tag = b ] && build=$B
  run "$build" $tag gpt2-z3-fp32-resume --max-steps 3
  run "$build" $tag gpt2-z3-fp32-resume --resume
done
compare gpt2-z3-fp32-resume

if [ "$fails" -eq 0 ]; then
  echo "check_bitwise: $A and $B train bit for bit the same (${#cases[@]} plans + a resume)"
  exit 0
fi
echo "check_bitwise: $fails plan(s) differ"
exit 1
