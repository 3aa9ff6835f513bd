#!/usr/bin/env bash
# Every command of README.md's ```sh blocks runs as written (issue 18: a new user's
# first hour). Usage: test_readme_commands.sh DTPLAN DTRUN SOURCE_DIR [README]
#
# The commands run in order, in a temp directory that holds links to the source's
# configs/, models/ and tests/ (README's commands are written for the repository root), with `dtplan` and
# `dtrun` replaced by the build's binaries. ```bash blocks are not run (installing
# packages, two-node launches). Commands on a GPU plan (gpu-plan.json) must either
# succeed (a GPU is present) or fail with exit 1 and exactly one line on stderr.
# A failure names the README line and the command.
set -u
DTPLAN=$(readlink -f "$1") DTRUN=$(readlink -f "$2") SRC=$(readlink -f "$3")
README=${4:-$SRC/README.md}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
ln -s "$SRC/configs" "$T/configs"
# the tiny LLaVA example reads the catalog and the test tokenizer and images
ln -s "$SRC/models" "$T/models"
ln -s "$SRC/tests" "$T/tests"
fails=0

# "LINE<TAB>COMMAND" for every command line of the ```sh blocks (comments dropped)
mapfile -t CMDS < <(awk '
    /^```sh[ \t]*$/ { inb = 1; next }
    /^```/ { inb = 0; next }
    inb {
        line = $0
        sub(/[ \t]+#[ \t].*$/, "", line); sub(/^[ \t]*#.*$/, "", line)
        sub(/[ \t]+$/, "", line)
        if (line != "") printf "%d\t%s\n", NR, line
    }' "$README")
[ "${#CMDS[@]}" -ge 10 ] || { echo "FAIL: only ${#CMDS[@]} commands found in $README"; exit 1; }

start=$(date +%s)
for entry in "${CMDS[@]}"; do
    ln=${entry%%$'\t'*} cmd=${entry#*$'\t'}
    # the programs, as whole words, by the build's binaries
    run=$(printf '%s' "$cmd" | sed -E "s#(^|[ ;&|(])dtplan( |\$)#\\1$DTPLAN\\2#g; s#(^|[ ;&|(])dtrun( |\$)#\\1$DTRUN\\2#g")
    t0=$(date +%s)
    (cd "$T" && timeout 600 bash -c "$run" </dev/null >"$T/.out" 2>"$T/.err")
    rc=$?
    if [[ "$cmd" == *gpu-plan.json* && "$cmd" == dtrun* ]]; then
        if [ "$rc" -ne 0 ]; then
            nl=$(grep -c . "$T/.err")
            if [ "$rc" -ne 1 ] || [ "$nl" -ne 1 ]; then
                echo "FAIL README.md:$ln: $cmd"
                echo "  without a GPU it must exit 1 with one line; got exit $rc and $nl lines:"
                sed 's/^/    /' "$T/.err" | head -20
                fails=$((fails + 1))
            else
                echo "ok   README.md:$ln ($(($(date +%s) - t0)) s, no GPU: $(cat "$T/.err")): $cmd"
            fi
            continue
        fi
    fi
    if [ "$rc" -ne 0 ]; then
        echo "FAIL README.md:$ln (exit $rc): $cmd"
        tail -n 20 "$T/.err" | sed 's/^/    /'
        fails=$((fails + 1))
    else
        echo "ok   README.md:$ln ($(($(date +%s) - t0)) s): $cmd"
    fi
done
echo "${#CMDS[@]} commands, $fails failed, $(($(date +%s) - start)) s"
[ "$fails" -eq 0 ]
