# lib.sh — what the shell tests share; each sources it first:
#   . "$(dirname "$0")/../lib.sh"
# A tool a test needs that is missing fails the test (CI installs every one through
# scripts/setup.sh); only GPU tests may skip (exit 77).

# dt_need TOOL...: every TOOL on PATH, else "FAIL: TOOL missing" and exit 1.
dt_need() {
    local t
    for t in "$@"; do
        command -v "$t" >/dev/null || { echo "FAIL: $t missing (scripts/setup.sh installs it)"; exit 1; }
    done
}

# dt_need_fortunes: Debian's fortunes, the real English text the training tests read.
dt_need_fortunes() {
    [ -d /usr/share/games/fortunes ] ||
        { echo "FAIL: /usr/share/games/fortunes missing (fortunes-min; scripts/setup.sh installs it)"; exit 1; }
}

# dt_bad WANT CMD ARGS...: the house rule for bad input (one line naming it, exit 2, nothing on
# stdout); the caller's fail() counts each broken part. Scratch files go to $T.
dt_bad() {
    local want=$1
    shift
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    [ $rc -eq 2 ] || fail "$* -> exit $rc (want 2)"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$* -> not one line: $(cat "$T/err")"
    [ -s "$T/out" ] && fail "$* -> wrote to stdout"
    grep -qF -- "$want" "$T/err" || fail "$* -> '$(cat "$T/err")' lacks '$want'"
}
