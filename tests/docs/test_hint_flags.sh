#!/bin/bash
# Every hint in the sources that tells the user to run `dtplan CMD ... --FLAG` or
# `dtrun ... --FLAG` names a flag that command's --help lists (a hint that names
# an option that does not exist — once `dtplan solve --world` — sends the user
# nowhere). Scans the C string literals of common/ models/ planner/ engine/ cli/.
# Usage: test_hint_flags.sh DTPLAN DTRUN SRCDIR
set -u
DTPLAN=$1
DTRUN=$2
SRC=$3
fails=0 checked=0
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for c in estimate solve show export simulate compare report calibrate; do
    "$DTPLAN" "$c" --help >"$T/dtplan-$c" 2>&1
done
{ "$DTRUN" --help; "$DTRUN" sample --help; "$DTRUN" calibrate --help; "$DTRUN" tokenize --help; "$DTRUN" prepare --help; } >"$T/dtrun" 2>&1
# "dtplan solve ... --gpus %d" / "dtrun ... --resume": command, then the flags up to the string's end
grep -rhoE '"[^"]*(dtplan (estimate|solve|show|export|simulate|compare|report|calibrate)|dtrun)( [^"]*)?"' \
    --include=*.c --include=*.h --include=*.cu "$SRC"/common "$SRC"/models "$SRC"/planner "$SRC"/engine "$SRC"/cli |
    sed -E 's/.*(dtplan (estimate|solve|show|export|simulate|compare|report|calibrate)|dtrun)/\1/' | sort -u >"$T/hints"
while IFS= read -r h; do
    cmd=$(echo "$h" | awk '{print ($1 == "dtplan") ? "dtplan-" $2 : "dtrun"}')
    w2=$(echo "$h" | awk '{print $2}')
    # "dtrun output directory; ..." is prose, not a command line
    if [ "$cmd" = dtrun ] && [[ $w2 =~ ^[a-z]+$ ]] && ! [[ $w2 =~ ^(sample|calibrate|tokenize|prepare)$ ]]; then continue; fi
    for f in $(echo "$h" | grep -oE -- '--[a-z][a-z0-9-]+' | grep -vx -- '--help' | sort -u); do
        checked=$((checked + 1))
        grep -qE -- "(^|[^a-z-])$f([^a-z-]|$)" "$T/$cmd" ||
            { echo "FAIL: hint \"$h\" names $f, which ${cmd/-/ } --help does not list"; fails=$((fails + 1)); }
    done
done <"$T/hints"
[ $checked -gt 10 ] || { echo "FAIL: only $checked flags found in hints: the scan is broken"; exit 1; }
echo "$checked flag(s) named in $(wc -l <"$T/hints") hint(s)"
[ $fails -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $((fails > 0))
