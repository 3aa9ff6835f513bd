#!/usr/bin/env bash
# The validation suite of published measurements (docs/validation.md), three checks:
#  1. the stated bounds: every memory case within 10 % and every fits / out-of-memory case
#     agreeing (dtplan validate --max-memory-error 10);
#  2. the per-case bounds of tests/validation/bounds.txt: every throughput case within its
#     bound (the issue's 25 % goal where the case meets it, else its current error rounded up
#     to 5 %), every listed rank group still ordered as measured, and every throughput case
#     listed there;
#  3. no case moves unnoticed: each case's prediction equals tests/validation/expected.txt
#     (name, predicted value) to 1e-6 relative, so a model change that moves a case fails
#     here until expected.txt and docs/validation.md's table are updated with it.
# usage: check_suite.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTPLAN=$1 SRC=$3 T=$(mktemp -d) fails=0
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
CASES=$SRC/tests/validation/cases

"$DTPLAN" validate "$CASES" --max-memory-error 10 >"$T/table" 2>"$T/err" || fail "bounds: $(cat "$T/err")"
cat "$T/table"
grep -q '^summary: ' "$T/table" || fail "no summary line"
n_files=$(ls "$CASES"/*.json | wc -l)
[ "$n_files" -ge 20 ] || fail "the suite has $n_files cases, fewer than 20"

# every case cites a source with a URL
for f in "$CASES"/*.json; do
    grep -q '"url": "https\?://' "$f" || fail "$(basename "$f") cites no URL"
done

"$DTPLAN" validate "$CASES" --json >"$T/json" 2>"$T/err" || fail "validate --json: $(cat "$T/err")"

# per-case throughput bounds and kept rank groups (bounds.txt)
grep -o '"name": "[^"]*", "runtime": "[^"]*", "quantity": "\(samples_per_s\|tokens_per_s_per_gpu\)", "measured": [^,]*, "predicted": [^,]*, "error": [^,]*' "$T/json" |
    sed -E 's/"name": "([^"]*)".*"error": (.*)/\1 \2/' >"$T/terr"
grep -o '{"group": "[^"]*", "kept": [a-z]*}' "$T/json" | sed -E 's/.*"group": "([^"]*)", "kept": ([a-z]*).*/\1 \2/' >"$T/groups"
awk 'FILENAME == ARGV[1] { if ($1 == "throughput") bound[$2] = $3; else if ($1 == "group") group[$2] = 1; next }
     FILENAME == ARGV[2] { e = $2 * 100; if (e < 0) e = -e
                           if (!($1 in bound)) { printf "throughput case %s has no bound in bounds.txt\n", $1; bad = 1; next }
                           if (e > bound[$1] + 1e-9) { printf "case %s: throughput off by %.1f %%, beyond its bound %s %%\n", $1, e, bound[$1]; bad = 1 }
                           seen[$1] = 1; next }
     { if ($1 in group) { if ($2 != "true") { printf "rank group %s: predicted order no longer the measured one\n", $1; bad = 1 }
                          gseen[$1] = 1 } }
     END { for (k in bound) if (!(k in seen)) { printf "bounds.txt names %s, not a throughput case of the suite\n", k; bad = 1 }
           for (k in group) if (!(k in gseen)) { printf "bounds.txt names group %s, not in the suite\n", k; bad = 1 }
           exit bad }' "$SRC/tests/validation/bounds.txt" "$T/terr" "$T/groups" >"$T/bounds" ||
    { cat "$T/bounds" >&2; fail "per-case bounds"; }
grep -o '"name": "[^"]*", "runtime": "[^"]*", "quantity": "[^"]*", "measured": [^,]*, "predicted": [^,]*' "$T/json" |
    sed -E 's/"name": "([^"]*)".*"predicted": (.*)/\1 \2/' | sort >"$T/now"
sort "$SRC/tests/validation/expected.txt" >"$T/want"
awk 'NR == FNR { want[$1] = $2; next }
     !($1 in want) { printf "new case %s (predicted %s): add it to tests/validation/expected.txt\n", $1, $2; bad = 1; next }
     { w = want[$1] + 0; v = $2 + 0; d = v - w; if (d < 0) d = -d; s = w < 0 ? -w : w; if (s < 1) s = 1
       if (d > 1e-6 * s) { printf "case %s moved: predicted %s, expected.txt has %s (update expected.txt and docs/validation.md)\n", $1, $2, want[$1]; bad = 1 }
       delete want[$1] }
     END { for (k in want) { printf "case %s is in expected.txt but not in the suite\n", k; bad = 1 } exit bad }' \
    "$T/want" "$T/now" >"$T/moves" || { cat "$T/moves" >&2; fail "predictions moved"; }

[ $fails -eq 0 ] && echo ok
exit $((fails > 0))
