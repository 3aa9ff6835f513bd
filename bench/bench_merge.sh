#!/usr/bin/env bash
# bench_merge.sh — `dtrun merge` against PEFT's merge_and_unload + save_pretrained on the same
# base and adapter, side by side in one run: wall time and peak resident memory as the kernel
# measured them (GNU time's "Maximum resident set size"), and the merged weights compared
# (docs/benchmarks.md "Merging an adapter"; issue 32).
#
#   bash bench/bench_merge.sh [BUILD] [LAYERS]
#
# BUILD: a build folder holding dtrun (default build). Dev time only: PY (default
# /tmp/hfvenv/bin/python) with torch, transformers, peft. The base is a random Qwen3-shaped
# model written once under WORK (default /tmp/dt-mergebench): hidden 1024, intermediate 3072,
# 16 heads / 8 kv heads, head_dim 64, vocab 32000, untied, LAYERS blocks (default 12: ~217M
# parameters, 0.87 GB fp32), sharded at 200MB; the adapter is PEFT LoRA on every linear, r 16,
# alpha 32, random lora_B (so the merge changes every adapted weight).
# Timed, each as a whole process:
#   dtrun-merge  dtrun merge --base BASE --adapter ADAPTER -o OUT --max-shard-size 200MB
#   peft-merge   AutoModelForCausalLM.from_pretrained(BASE) + PeftModel.from_pretrained +
#                merge_and_unload() + save_pretrained(OUT, max_shard_size="200MB")
# Then every merged tensor is compared (max |dtrun - peft|).
set -u
BUILD=${1:-build}
LAYERS=${2:-12}
PY=${PY:-/tmp/hfvenv/bin/python}
WORK=${WORK:-/tmp/dt-mergebench}
DTRUN=$(readlink -f "$BUILD/dtrun")
mkdir -p "$WORK"
BASE=$WORK/base-L$LAYERS ADAPTER=$WORK/adapter-L$LAYERS
if [ ! -f "$ADAPTER/adapter_config.json" ]; then
  "$PY" - "$BASE" "$ADAPTER" "$LAYERS" <<'PYEOF' || exit 1
import sys, torch, transformers
from peft import LoraConfig, get_peft_model
base, adapter, layers = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
cfg = transformers.Qwen3Config(vocab_size=32000, hidden_size=1024, intermediate_size=3072, num_hidden_layers=layers,
                               num_attention_heads=16, num_key_value_heads=8, head_dim=64,
                               tie_word_embeddings=False)
m = transformers.Qwen3ForCausalLM(cfg)
m.save_pretrained(base, max_shard_size="200MB")
pm = get_peft_model(m, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
with torch.no_grad():
    for n, p in pm.named_parameters():
        if "lora_B" in n:
            p.normal_(0, 0.02)
pm.save_pretrained(adapter)
PYEOF
fi
rm -rf "$WORK/out-dtrun" "$WORK/out-peft"
measure() {   # measure NAME command...: prints "NAME wall_s max_rss_MiB"
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o "$WORK/time.$name" "$@" >/dev/null 2>"$WORK/err.$name" \
    || { echo "$name failed: $(tail -3 "$WORK/err.$name")"; exit 1; }
  read -r wall kb <"$WORK/time.$name"
  printf "%-12s %8.2f s %10.1f MiB\n" "$name" "$wall" "$(echo "$kb / 1024" | bc -l)"
}
sync
echo "base: $(du -sb "$BASE" | cut -f1) bytes ($LAYERS layers); adapter: $(du -sb "$ADAPTER" | cut -f1) bytes"
measure dtrun-merge "$DTRUN" merge --base "$BASE" --adapter "$ADAPTER" -o "$WORK/out-dtrun" --max-shard-size 200MB
measure peft-merge "$PY" -c "
import sys, torch, transformers
from peft import PeftModel
m = transformers.AutoModelForCausalLM.from_pretrained('$BASE', dtype=torch.float32)
m = PeftModel.from_pretrained(m, '$ADAPTER').merge_and_unload()
m.save_pretrained('$WORK/out-peft', max_shard_size='200MB')"
"$PY" - "$WORK/out-dtrun" "$WORK/out-peft" <<'PYEOF'
import os, sys
from safetensors import safe_open
def tensors(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            h = safe_open(os.path.join(d, f), "pt")
            out.update({k: (h, k) for k in h.keys()})
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert set(a) == set(b), set(a) ^ set(b)
worst = max((a[k][0].get_tensor(k) - b[k][0].get_tensor(k)).abs().max().item() for k in a)
print(f"{len(a)} tensors; max |dtrun - peft| = {worst:.3g}")
PYEOF
