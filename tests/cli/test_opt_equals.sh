#!/bin/bash
# Every long option of every command takes "--opt=value" as it takes "--opt value"
# (GNU getopt_long's two spellings; cli/common dt_cli_split_equals). For each command
# the options are read from its --help, so an option added later is covered without
# editing this test. Each option is given both ways, followed by an option no command
# knows (--zz-no-such-option) so that nothing runs: the exit status, stdout and stderr
# must be the same. Then a few full commands, both ways, must give the same output.
# Usage: test_opt_equals.sh DTPLAN DTRUN SRCDIR
set -u
DTPLAN=$1
DTRUN=$2
SRC=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
fails=0
checked=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

same_both_ways() {   # same_both_ways PROG CMD OPT VALUE [MORE ARGS...]
    local prog=$1 cmd=$2 opt=$3 val=$4
    shift 4
    local -a pre=()
    [ -n "$cmd" ] && pre=("$cmd")
    timeout 60 "$prog" "${pre[@]}" "$opt=$val" "$@" </dev/null >eq.out 2>eq.err
    local rc1=$?
    timeout 60 "$prog" "${pre[@]}" "$opt" "$val" "$@" </dev/null >sp.out 2>sp.err
    local rc2=$?
    sed -i -E 's/[0-9.]+ ms\b/N ms/g' eq.out sp.out eq.err sp.err   # the solver's own timing
    checked=$((checked + 1))
    if [ $rc1 -ne $rc2 ] || ! cmp -s eq.out sp.out || ! cmp -s eq.err sp.err; then
        bad "$(basename "$prog") $cmd $opt=$val differs from $opt $val: exit $rc1 vs $rc2;" \
            "stderr '$(head -c 200 eq.err)' vs '$(head -c 200 sp.err)'"
        return 1
    fi
    return 0
}

# options_of PROG [CMD]: the long options its --help names
options_of() {
    local -a pre=()
    [ -n "${2:-}" ] && pre=("$2")
    "$1" "${pre[@]}" --help 2>&1 | grep -oE -- '--[a-z][a-z0-9-]*[a-z0-9]' | sort -u | grep -vx -- '--help'
}

check_command() {   # check_command PROG CMD
    local prog=$1 cmd=$2 n=0 opt
    local opts
    opts=$(options_of "$prog" "$cmd")
    [ -n "$opts" ] || { bad "$(basename "$prog") $cmd --help names no option"; return; }
    for opt in $opts; do
        # a value no option accepts (the error names the option), then an option that stops the command
        same_both_ways "$prog" "$cmd" "$opt" "x" --zz-no-such-option
        n=$((n + 1))
    done
    echo "ok: $(basename "$prog") ${cmd:-(train)}: $n options"
}

for cmd in estimate solve show export simulate compare report calibrate validate; do
    check_command "$DTPLAN" "$cmd"
done
check_command "$DTRUN" ""
for cmd in sample tokenize prepare calibrate; do
    check_command "$DTRUN" "$cmd"
done

# the stopping option is refused by each command, so the checks above ran nothing
for cmd in estimate solve show export simulate compare report validate; do
    "$DTPLAN" "$cmd" --zz-no-such-option >/dev/null 2>&1 && bad "dtplan $cmd accepts --zz-no-such-option"
done
for cmd in "" sample tokenize prepare calibrate; do
    "$DTRUN" $cmd --zz-no-such-option </dev/null >/dev/null 2>&1 && bad "dtrun $cmd accepts --zz-no-such-option"
done

# whole commands that succeed, both ways
same_both_ways "$DTPLAN" estimate --params 7B --gpus=8 --mem=80G --seq=2048 || true
grep -q "ZeRO" eq.out || bad "dtplan estimate --params=7B ... printed no table: $(head -c 200 eq.err)"
same_both_ways "$DTPLAN" solve --params 1B --gpus=2 --mem=24G -o plan.json || true
[ -s plan.json ] || bad "dtplan solve --mem=24G ... wrote no plan: $(head -c 200 eq.err)"
same_both_ways "$DTPLAN" export --deepspeed plan.json -o ds.json || true
grep -q zero_optimization ds.json || bad "dtplan export --deepspeed=plan.json wrote no config: $(head -c 200 eq.err)"
printf 'Hello, world\n' >in.txt
"$DTRUN" tokenize --tokenizer="$SRC/tests/tokenizer/data/gpt2-mini.json" <in.txt >eq.out 2>eq.err
"$DTRUN" tokenize --tokenizer "$SRC/tests/tokenizer/data/gpt2-mini.json" <in.txt >sp.out 2>&1
checked=$((checked + 1))
[ -s eq.out ] && cmp -s eq.out sp.out || bad "dtrun tokenize --tokenizer=FILE: '$(cat eq.out eq.err)' vs '$(cat sp.out)'"
# a value that itself looks like an option is given after '='; after a bare -- nothing is split
"$DTRUN" tokenize --tokenizer=--zz=1 </dev/null >eq.out 2>eq.err
grep -q -- "--zz=1" eq.err || bad "dtrun tokenize --tokenizer=--zz=1 did not take '--zz=1' as the value: $(cat eq.err)"

echo "$checked comparisons"
[ $fails -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed ($fails differences)"
exit $((fails > 0))
