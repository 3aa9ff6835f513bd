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

# dt_run_ranks DTRUN WORLD PLAN OUT [args]: dtrun on PLAN into OUT, quiet, as one process
# (world 1) or WORLD ranks under mpirun.
dt_run_ranks() {
    local bin=$1 w=$2 pl=$3 out=$4
    shift 4
    if [ "$w" = 1 ]; then "$bin" "$pl" --out "$out" --quiet "$@"
    else mpirun -n "$w" --oversubscribe "$bin" "$pl" --out "$out" --quiet "$@"; fi
}

# dt_metrics_close: a python3 snippet for the tests' checks (prepend it to their own): bad
# (a list of messages) gets one when OUT's and BASE's per-step loss or grad_norm
# (metrics.jsonl) differ in length or by more than rel relatively (grad_norm: rel_norm when
# given); run_reports: every rank's
# run report as (path, dict), one message when there are not WORLD of them.
dt_metrics_close='
import json
def series(d, k):
    return [json.loads(l)[k] for l in open(d + "/metrics.jsonl")]
def metrics_close(out, base, bad, rel=1e-5, rel_norm=None):
    for k in ("loss", "grad_norm"):
        a, b = series(base, k), series(out, k)
        if len(a) != len(b): bad.append(f"{k}: {len(b)} steps vs {len(a)}")
        d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
        r = rel_norm if k == "grad_norm" and rel_norm is not None else rel
        if d > r: bad.append(f"{k} relative difference {d:.3g} > {r:g}")
def run_reports(out, world, bad):
    import glob
    paths = sorted(glob.glob(out + "/run-report*.json"))
    if len(paths) != int(world): bad.append(f"{len(paths)} run reports for {world} ranks")
    return [(rp, json.load(open(rp))) for rp in paths]
'

# dt_cuda_probe DTRUN PLAN DIR: is there a GPU? a one-step run of the device:cuda PLAN into DIR/probe
# answers it: exit 77 (skipped) when dtrun finds none, 1 when the run fails otherwise.
dt_cuda_probe() {
    if ! "$1" "$2" --out "$3/probe" --quiet --max-steps 1 2>"$3/probe.err"; then
        if grep -q "no usable GPU\|no GPU visible\|no CUDA backend" "$3/probe.err"; then
            echo "no CUDA GPU: skipped ($(cat "$3/probe.err"))"
            exit 77
        fi
        echo "FAIL: the cuda probe run failed: $(cat "$3/probe.err")"
        exit 1
    fi
}

# dt_scratch PREFIX: TMP, a fresh directory /tmp/PREFIX_XXXXXX removed when the script exits.
dt_scratch() {
    TMP=$(mktemp -d "/tmp/$1_XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
    # shellcheck disable=SC2064
    trap "rm -rf '$TMP'" EXIT
}
