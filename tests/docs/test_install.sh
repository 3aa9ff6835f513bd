#!/usr/bin/env bash
# `cmake --install` gives a working tool (issue 18): installs the build into a temp
# prefix and, from /, runs the installed programs (the catalog and hardware profiles are
# embedded), checks the shared files, the man pages and the bash completion.
# Usage: test_install.sh DTPLAN DTRUN SOURCE_DIR  (the build directory is DTPLAN's)
set -u
BUILD=$(dirname "$(readlink -f "$1")") SRC=$(readlink -f "$3")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
P=$T/prefix
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }

cmake --install "$BUILD" --prefix "$P" >"$T/install.log" 2>&1 || { cat "$T/install.log"; echo "FAIL: cmake --install"; exit 1; }
for f in bin/dtplan bin/dtrun share/man/man1/dtplan.1 share/man/man1/dtrun.1 \
         share/bash-completion/completions/dtplan share/bash-completion/completions/dtrun \
         share/dtplan/deepspeed/zero1.json share/dtplan/deepspeed/zero2.json share/dtplan/deepspeed/zero3.json \
         share/dtplan/hardware/H100-SXM-80GB.json share/dtplan/hardware/cpu.json share/dtplan/plans/tiny-cpu.json; do
    [ -f "$P/$f" ] && ok "installed $f" || fail "not installed: $f"
done
# libdtcuda.so beside dtrun, where engine/device/backend.c looks, when the build has it
if [ -f "$BUILD/libdtcuda.so" ]; then
    [ -f "$P/bin/libdtcuda.so" ] && ok "installed bin/libdtcuda.so" || fail "libdtcuda.so built but not installed beside dtrun"
fi

# from /, nothing of the source or build tree in reach
run() {   # run DESCRIPTION COMMAND...: in /, output in $T/out
    local what=$1; shift
    if (cd / && "$@") >"$T/out" 2>&1; then ok "$what"; else fail "$what: $* -> $(tail -3 "$T/out")"; fi
}
run "estimate from /" "$P/bin/dtplan" estimate --params 7B --gpus 8
grep -q "ZeRO" "$T/out" || fail "estimate printed no table"
run "solve from /" "$P/bin/dtplan" solve --hardware cpu --model gpt2-tiny --mem 4G --steps 3 -o "$T/plan.json"
run "dtrun from /" "$P/bin/dtrun" "$T/plan.json" --out "$T/run" --quiet
[ -f "$T/run/run-report.json" ] || fail "dtrun wrote no run-report.json"
run "sample from /" "$P/bin/dtrun" sample "$T/run" --tokens 10
run "show an installed example plan" "$P/bin/dtplan" show "$P/share/dtplan/plans/tiny-cpu.json"
run "estimate with an installed DeepSpeed template" \
    "$P/bin/dtplan" estimate --model llama-2-7b --deepspeed "$P/share/dtplan/deepspeed/zero3.json"
run "solve with an installed hardware profile" \
    "$P/bin/dtplan" solve --hardware "$P/share/dtplan/hardware/A100-80GB.json" --model gpt2 --mem 40G

# man pages: render without warnings, name every command
for m in dtplan dtrun; do
    if command -v groff >/dev/null; then
        w=$(groff -man -Tutf8 -ww -z "$P/share/man/man1/$m.1" 2>&1)
        [ -z "$w" ] && ok "man $m renders" || fail "man $m: $w"
    fi
done
for c in estimate solve show export simulate compare report calibrate; do
    grep -q "^\.B $c\$" "$P/share/man/man1/dtplan.1" || fail "dtplan.1 does not describe '$c'"
done

# completion: loads, completes the subcommands, and every flag it offers is in --help
# (and every flag of --help is offered)
flags_of_help() { "$@" --help 2>&1 | grep -oE -- '(^|[ ,(|[])--?[a-z][a-z0-9-]*' | tr -d ' ,(|[' | sort -u; }
complete_words() {   # complete_words COMPFILE WORD... : what TAB offers after the words
    local file=$1; shift
    bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); f=$(complete -p "$1" | awk "{print \$(NF-1)}"); $f; printf "%s\n" "${COMPREPLY[@]}"' _ "$file" "$@" | sort -u
}
CD=$P/share/bash-completion/completions
[ "$(complete_words "$CD/dtplan" dtplan "" | grep -c -E '^(estimate|solve|show|export|simulate|compare|report|calibrate)$')" -eq 8 ] \
    && ok "dtplan completes its 8 commands" || fail "dtplan completion: $(complete_words "$CD/dtplan" dtplan "" | tr '\n' ' ')"
check_flags() {   # check_flags NAME COMPFILE "WORDS BEFORE" "FLAGS --help NAMES IN PROSE ONLY" HELP-COMMAND...
    local name=$1 file=$2 words=$3 prose=$4; shift 4
    { flags_of_help "$@"; echo --help; } | sort -u | grep -vxF -f <(printf '%s\n' $prose "#none#") >"$T/help"
    # shellcheck disable=SC2086
    complete_words "$file" $words - | grep -- '^-' >"$T/comp"
    local extra missing
    extra=$(comm -13 "$T/help" "$T/comp" | tr '\n' ' ') missing=$(comm -23 "$T/help" "$T/comp" | tr '\n' ' ')
    [ -z "$extra$missing" ] && ok "completion of $name matches --help" \
        || fail "completion of $name: offers but --help lacks: [$extra]; --help has but not offered: [$missing]"
}
for c in estimate solve show export simulate report calibrate; do
    check_flags "dtplan $c" "$CD/dtplan" "dtplan $c" "" "$P/bin/dtplan" "$c"
done
check_flags "dtplan compare" "$CD/dtplan" "dtplan compare" "--trace" "$P/bin/dtplan" compare
# dtrun --help also shows the usage of sample, calibrate, tokenize and merge, whose flags complete after them
check_flags "dtrun" "$CD/dtrun" "dtrun" "--prompt --tokens --seed --temperature --dump-logits -o --plan --no-mpi --device --base --gpu --name --tokenizer --decode --no-special --adapter --max-shard-size --dtype" \
    "$P/bin/dtrun"
check_flags "dtrun sample" "$CD/dtrun" "dtrun sample" "--out" "$P/bin/dtrun" sample
check_flags "dtrun calibrate" "$CD/dtrun" "dtrun calibrate" "" "$P/bin/dtrun" calibrate
check_flags "dtrun tokenize" "$CD/dtrun" "dtrun tokenize" "" "$P/bin/dtrun" tokenize
check_flags "dtrun merge" "$CD/dtrun" "dtrun merge" "" "$P/bin/dtrun" merge

[ "$fails" -eq 0 ] && echo "install: all checks passed" || { echo "install: $fails failed"; exit 1; }
