#!/usr/bin/env bash
# bench_tokenize.sh — tokenizer throughput: dtrun vs Hugging Face `tokenizers` and `tiktoken`
# on the same corpus and the same vocabulary, 1 and 2 threads, in one run (issue 15 item 4;
# docs/benchmarks.md "Tokenizer throughput").
#
#   bash bench/bench_tokenize.sh [BUILD] [REPS]
#
# BUILD: a build folder holding dtrun (default: build); REPS: repetitions (default 3), the
# table gives the median. Dev time only: PY (default /tmp/hfvenv/bin/python) must have
# `tokenizers` and `tiktoken` (pip install tokenizers tiktoken). CORPUS (default
# /tmp/dt-tokbench/corpus.txt) is written once by bench/tokenize_ref.py (Debian's licences,
# fortunes and changelogs, plus tests/tokenizer/data/corpus.txt: ~10 MB of UTF-8).
#
# What is timed:
#   dtrun-tokenize   the whole process: `dtrun tokenize --tokenizer T < CORPUS > /dev/null`
#                    (load, read lines, encode, print the ids as text); single-threaded
#   dtrun-prepare    the whole process: `dtrun prepare --tokenizer T --out DIR --format text
#                    CORPUS` with OMP_NUM_THREADS=1/2 (index, read, encode 1 MiB pieces in
#                    parallel, shuffle, write and fsync the uint16 shards and prepare.json)
#   hf-encode_batch  Tokenizer.from_file(T).encode_batch(lines), RAYON_NUM_THREADS=1/2: the
#                    call only (file already in memory, tokenizer loaded)
#   hf-encode-whole  Tokenizer.encode(whole text): the call only
#   tiktoken-batch   Encoding built from T, encode_batch(lines, num_threads=1/2,
#                    allowed_special="all"): the call only; reported only for a tokenizer
#                    whose tiktoken ids equal tokenizers' ids on the corpus
# Before timing, dtrun tokenize's ids are checked equal to tokenizers' per line. Runs of the
# implementations are interleaved within each repetition so machine load hits all alike.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=${1:-$ROOT/build}
REPS=${2:-3}
PY=${PY:-/tmp/hfvenv/bin/python}
CORPUS=${CORPUS:-/tmp/dt-tokbench/corpus.txt}
WORK=$(mktemp -d /tmp/dt-tokbench-run.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
DTRUN=$BUILD/dtrun
REF="$PY $HERE/tokenize_ref.py"
TOKS="gpt2 qwen2"

die() { echo "bench_tokenize.sh: $*" >&2; exit 1; }
[ -x "$DTRUN" ] || die "$DTRUN not found (give the build folder)"
$PY -c 'import tokenizers, tiktoken' 2>/dev/null || die "$PY lacks tokenizers or tiktoken (pip install tokenizers tiktoken)"
[ -x /usr/bin/time ] || die "/usr/bin/time (Debian package time) is needed"

echo "== machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "== versions: $($PY -c 'import tokenizers, tiktoken; print("tokenizers", tokenizers.__version__, "tiktoken", tiktoken.__version__)'), dtrun $DTRUN"
echo "== start $(date -u '+%F %T UTC'), load: $(uptime | sed 's/.*load average: //')"
if [ ! -s "$CORPUS" ]; then
    mkdir -p "$(dirname "$CORPUS")"
    $REF corpus "$CORPUS" || die "cannot write the corpus"
fi
BYTES=$(stat -c %s "$CORPUS")
echo "== corpus: $CORPUS, $BYTES bytes, $(wc -l < "$CORPUS") lines"

declare -A TIK
for t in $TOKS; do
    T=$ROOT/tests/tokenizer/data/$t-mini.json
    "$DTRUN" tokenize --tokenizer "$T" < "$CORPUS" > "$WORK/$t.ids" || die "dtrun tokenize failed on $t"
    $REF check-ours "$T" "$CORPUS" "$WORK/$t.ids" || die "dtrun's ids differ from tokenizers' ($t): not timing"
    rm -f "$WORK/$t.ids"
    if $REF check-tiktoken "$T" "$CORPUS"; then TIK[$t]=1; else TIK[$t]=0; echo "   (tiktoken not reported for $t)"; fi
done

RES=$WORK/results
# dtrun: wall seconds of the whole process (GNU time); for tokenize also CPU / wall
ours() { # rep tok impl threads cmd...
    local rep=$1 t=$2 impl=$3 th=$4; shift 4
    OMP_NUM_THREADS=$th /usr/bin/time -f "%e %U %S" -o "$WORK/time" "$@" < "$CORPUS" > /dev/null ||
        die "$impl failed"
    read -r wall usr sys < "$WORK/time"
    echo "$rep $t $impl $th $wall" >> "$RES"
    printf '   %-8s %-18s %d thr %7.2f s  cpu/wall %.2f\n' "$t" "$impl" "$th" "$wall" \
        "$(awk -v u="$usr" -v s="$sys" -v w="$wall" 'BEGIN { print (w > 0 ? (u + s) / w : 0) }')"
}
ref() { # rep tok impl threads lib
    local out
    out=$($REF time "$5" "$ROOT/tests/tokenizer/data/$2-mini.json" "$CORPUS" "$4") || die "$3 failed"
    echo "$1 $2 $3 $4 ${out% *}" >> "$RES"
    printf '   %-8s %-18s %d thr %7.2f s\n' "$2" "$3" "$4" "${out% *}"
}

for rep in $(seq 1 "$REPS"); do
    echo "== repetition $rep, load: $(uptime | sed 's/.*load average: //')"
    for t in $TOKS; do
        T=$ROOT/tests/tokenizer/data/$t-mini.json
        for th in 1 2; do
            [ "$th" = 1 ] && ours "$rep" "$t" dtrun-tokenize 1 "$DTRUN" tokenize --tokenizer "$T"
            ref "$rep" "$t" hf-encode_batch "$th" hf-batch
            ours "$rep" "$t" dtrun-prepare "$th" "$DTRUN" prepare --tokenizer "$T" --out "$WORK/shards-$t" \
                --format text --quiet --no-progress "$CORPUS"
            [ "${TIK[$t]}" = 1 ] && ref "$rep" "$t" tiktoken-batch "$th" tiktoken
            ref "$rep" "$t" hf-encode-whole "$th" hf-single
        done
    done
done
echo "== end $(date -u '+%F %T UTC'), load: $(uptime | sed 's/.*load average: //')"
echo
$REF table "$RES" "$BYTES"
