#!/usr/bin/env bash
# The validation suite of published measurements (docs/validation.md), two checks:
#  1. the stated bounds: every memory case within 10 % and every fits / out-of-memory case
#     agreeing (dtplan validate --max-memory-error 10); throughput is reported against its
#     25 % goal, not bounded (the time model still misses it: docs/validation.md);
#  2. no case moves unnoticed: each case's prediction equals tests/validation/expected.txt
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
