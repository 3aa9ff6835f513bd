#!/usr/bin/env bash
# bench_image_prep.sh — image preparation throughput: `dtrun prepare --format llava` vs Hugging
# Face's CLIPImageProcessor (both back-ends) on the same JPEG images, in one run (issue 35
# item 6; docs/benchmarks.md "Image preparation").
#
#   bash bench/bench_image_prep.sh [BUILD] [N] [REPS]
#
# BUILD: a build folder holding dtrun (default build); N: images (default 300); REPS
# (default 3): the table gives the median. Dev time only: PY (default /tmp/hfvenv/bin/python)
# needs transformers 5.x, torch, torchvision, Pillow (PYTHONPATH may add the last two).
# The images (640x480, 500x375, 333x500 JPEG, quality 90: COCO's common sizes) and a LLaVA
# JSON of one record per image are made once under WORK (default /tmp/dt-imgbench).
#
# What is timed (wall clock, `date +%s.%N` around the command, or perf_counter in Python):
#   dtrun-prepare  the whole process, OMP_NUM_THREADS=1 and 2: read the JSON, tokenize, decode
#                  (libjpeg-turbo), resize + crop at 336 px, write and fsync the token and
#                  pixel shards and prepare.json
#   hf-torchvision Image.open + CLIPImageProcessor (the default, torchvision back-end),
#                  return_tensors="np", torch.set_num_threads(1): the loop only
#   hf-pil         the same with CLIPImageProcessorPil
# Before timing, every image's pixel_values from dtrun (its crops, normalised as the loader
# does) are checked equal to the default processor's. Implementations are interleaved
# within each repetition so machine load hits all alike; the load average is printed.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=${1:-$ROOT/build}
N=${2:-300}
REPS=${3:-3}
PY=${PY:-/tmp/hfvenv/bin/python}
WORK=${WORK:-/tmp/dt-imgbench}
DTRUN=$BUILD/dtrun
[ -x "$DTRUN" ] || { echo "bench_image_prep: $DTRUN missing (build first)" >&2; exit 1; }
"$PY" -c "import transformers, torchvision, PIL" 2>/dev/null ||
  { echo "bench_image_prep: $PY lacks transformers / torchvision / Pillow" >&2; exit 1; }
if [ ! -f "$WORK/llava.json" ] || [ "$(ls "$WORK/imgs" | wc -l)" -ne "$N" ]; then
  rm -rf "$WORK" && mkdir -p "$WORK" && "$PY" "$HERE/image_prep_ref.py" make "$WORK" "$N" || exit 1
fi
TOK=$ROOT/tests/tokenizer/data/qwen2-mini.json
prep() {   # prep THREADS: seconds of one dtrun prepare
  rm -rf "$WORK/out"
  local t0 t1
  t0=$(date +%s.%N)
  OMP_NUM_THREADS=$1 "$DTRUN" prepare --quiet --tokenizer "$TOK" --format llava --image-token-id 1500 \
    --val-fraction 0 --image-folder "$WORK/imgs" --out "$WORK/out" "$WORK/llava.json" || exit 1
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }'
}
prep 2 >/dev/null
bad=$("$PY" "$HERE/image_prep_ref.py" check "$WORK" "$WORK/out")
[ "$bad" = 0 ] || { echo "bench_image_prep: $bad image(s) differ from the HF processor" >&2; exit 1; }
echo "check: all $N images' pixel_values equal the HF processor's (torchvision back-end)"
declare -A runs
for r in $(seq "$REPS"); do
  runs[dtrun-prepare-1]+="$(prep 1) "
  runs[dtrun-prepare-2]+="$(prep 2) "
  runs[hf-torchvision-1]+="$("$PY" "$HERE/image_prep_ref.py" time "$WORK" torchvision 2>/dev/null) "
  runs[hf-pil-1]+="$("$PY" "$HERE/image_prep_ref.py" time "$WORK" pil 2>/dev/null) "
done
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| implementation | threads | images/s | runs (s) |\n|---|---|---|---|\n'
for k in dtrun-prepare-1 dtrun-prepare-2 hf-torchvision-1 hf-pil-1; do
  med=$(printf '%s\n' ${runs[$k]} | sort -g | sed -n "$(( (REPS + 1) / 2 ))p")
  printf '| %s | %s | %.1f | %s|\n' "${k%-*}" "${k##*-}" "$(awk -v n="$N" -v m="$med" 'BEGIN { print n / m }')" "${runs[$k]}"
done
