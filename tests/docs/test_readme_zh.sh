#!/usr/bin/env bash
# README.zh-CN.md shows the same commands as README.md (issue 18): every command line of
# its fenced ```sh / ```bash blocks (comments dropped) is also a command line of README.md's,
# and README.md links to it. Usage: test_readme_zh.sh DTPLAN DTRUN SOURCE_DIR
set -u
SRC=$3
cmds() {
    awk '/^```(sh|bash)[ \t]*$/ { inb = 1; next } /^```/ { inb = 0; next }
         inb { line = $0; sub(/[ \t]+#[ \t].*$/, "", line); sub(/^[ \t]*#.*$/, "", line); sub(/[ \t]+$/, "", line)
               if (line != "") print line }' "$1"
}
[ -f "$SRC/README.zh-CN.md" ] || { echo "FAIL: no README.zh-CN.md"; exit 1; }
grep -q '(README.zh-CN.md)' "$SRC/README.md" || { echo "FAIL: README.md does not link README.zh-CN.md"; exit 1; }
cmds "$SRC/README.md" >"${TMPDIR:-/tmp}/en.$$"
n=0 fails=0
while IFS= read -r c; do
    n=$((n + 1))
    grep -qxF -- "$c" "${TMPDIR:-/tmp}/en.$$" || { echo "FAIL: README.zh-CN.md has a command README.md lacks: $c"; fails=$((fails + 1)); }
done < <(cmds "$SRC/README.zh-CN.md")
# and the other way: the Chinese path leaves out no command
while IFS= read -r c; do
    grep -qxF -- "$c" <(cmds "$SRC/README.zh-CN.md") || { echo "FAIL: README.md's command missing from README.zh-CN.md: $c"; fails=$((fails + 1)); }
done <"${TMPDIR:-/tmp}/en.$$"
rm -f "${TMPDIR:-/tmp}/en.$$"
[ "$n" -ge 10 ] || { echo "FAIL: only $n commands in README.zh-CN.md"; exit 1; }
echo "$n commands checked, $fails failed"
[ "$fails" -eq 0 ]
