#!/usr/bin/env bash
# bench_generate.sh — decoding tokens/s of dtrun's generator (KV cache), of decoding without a
# cache (a whole forward per token, `dtrun sample` before the generator) and of transformers'
# generate, same model, prompts, batch and new tokens, greedy, side by side in one run
# (docs/benchmarks.md "Generation"; issue 33).
#
#   bash bench/bench_generate.sh [BUILD] [BATCH] [PROMPT_LEN] [NEW]
#
# BUILD: a build folder holding bench_generate (default build). Dev time only: PY (default
# /tmp/hfvenv/bin/python) with torch and transformers. The model is a random Qwen3-shaped
# decoder written once under WORK (default /tmp/dt-genbench): hidden 512, intermediate 1536,
# 8 heads / 4 kv heads, head_dim 64, 8 layers, vocab 32000, untied (~50M parameters).
# Both sides use the same thread count (THREADS, default: the cores, nproc).
set -u
BUILD=${1:-build}
BATCH=${2:-8}
PLEN=${3:-32}
NEW=${4:-64}
PY=${PY:-/tmp/hfvenv/bin/python}
WORK=${WORK:-/tmp/dt-genbench}
THREADS=${THREADS:-$(nproc)}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=$WORK/qwen3-50m
if [ ! -f "$MODEL/config.json" ]; then
  "$PY" - "$MODEL" <<'PYEOF' || exit 1
import sys, torch, transformers
torch.manual_seed(0)
cfg = transformers.Qwen3Config(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                               num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=512,
                               tie_word_embeddings=False)
transformers.Qwen3ForCausalLM(cfg).save_pretrained(sys.argv[1])
PYEOF
fi
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $THREADS; load: $(uptime | sed 's/.*load average: //')"
OMP_NUM_THREADS=$THREADS "$BUILD/bench/bench_generate" "$MODEL" "$BATCH" "$PLEN" "$NEW" || exit 1
"$PY" "$HERE/generate_ref.py" "$MODEL" "$BATCH" "$PLEN" "$NEW" 3 "$THREADS" 2>/dev/null || exit 1
echo "load after: $(uptime | sed 's/.*load average: //')"
