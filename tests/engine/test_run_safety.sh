#!/usr/bin/env bash
# dtrun's output directory, resume and write safety (docs/dtrun.md "Output
# directory and resume", "Checkpoint verification"), end to end on gpt2-tiny:
#  1. kill -9 in the middle of training (in-process at step 13, and from outside
#     at an arbitrary point), then --resume: metrics.jsonl holds every step
#     once and equals the uninterrupted run's, bitwise (loss, grad norm, lr,
#     validation loss), as does the final model.safetensors;
#  2. resume twice (10 -> 20 -> 30) equals the straight run; --resume of the
#     finished run says "already finished at step 30" and changes nothing;
#  3. a new run refuses a non-empty --out (one line, nothing written);
#  4. --overwrite replaces dtrun's files and keeps a foreign file (also one
#     inside a ckpt-* directory); keep_last prunes only this run's checkpoints,
#     never another run's;
#  5. a full disk (a tiny tmpfs; without mount rights, a file-size limit): one
#     error line, a non-zero exit, every line before it intact, no partial
#     checkpoint; after space is freed --resume continues;
#  6. damaged or foreign input: a flipped byte in a checkpoint file, a 4-head
#     checkpoint resumed by an 8-head plan, a tampered state.json, an llm.c
#     init file declaring a padded vocab of 2^28, a FIFO as data: one line each,
#     exit 2, no crash, no hang.
# Usage: test_run_safety.sh DTPLAN DTRUN SOURCE_DIR
set -u
DTRUN=$2
SRC=$3
. "$(dirname "$0")/../lib.sh"
dt_need python3
dt_need_fortunes
export OMP_NUM_THREADS=1   # the same thread count in every run: bitwise comparisons
TMP=$(mktemp -d /tmp/dt_test_safety_XXXXXX)
MNT=$TMP/full
cleanup() {
    mountpoint -q "$MNT" 2>/dev/null && umount "$MNT"
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM   # a timeout still unmounts
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
ok() { echo "ok   $*"; }

# plan OUT [key=value...]: tiny-cpu, a checkpoint every 5 steps, keep 2, validation every 10
plan() {
    python3 - "$SRC/configs/plans/tiny-cpu.json" "$@" <<'PY'
import json, sys
src, out, *kv = sys.argv[1:]
p = json.load(open(src))
p["output"].update(save_interval=5, keep_last=2)
p["data"]["eval_interval"] = 10
for a in kv:
    k, v = a.split("=", 1)
    o = p
    *path, last = k.split(".")
    for q in path: o = o[q]
    o[last] = json.loads(v)
json.dump(p, open(out, "w"), indent=2)
PY
}
# run OUT [args...]: dtrun on $PLAN, stderr to $TMP/err
run() { local out=$1; shift; "$DTRUN" "$PLAN" --out "$out" --quiet "$@" 2>"$TMP/err"; }
# series METRICS [N]: "step loss grad_norm lr val_loss" of the first N lines (all), as printed (bitwise)
series() {
    python3 - "$@" <<'PY'
import json, sys
lines = open(sys.argv[1]).readlines()
for l in lines[:int(sys.argv[2])] if len(sys.argv) > 2 else lines:
    r = json.loads(l, parse_float=str)
    print(r["step"], r["loss"], r["grad_norm"], r["lr"], r.get("val_loss", "-"))
PY
}
# same_as_ref OUT LABEL [N]: metrics.jsonl is the reference's first N steps (default all 30), each once
same_as_ref() {
    local n=${3:-30}
    if [ "$(series "$1/metrics.jsonl")" = "$(series "$REF/metrics.jsonl" "$n")" ]; then
        ok "$2: metrics.jsonl equals the uninterrupted run's (steps 1..$n once, bitwise)"
    else
        fail "$2: metrics.jsonl differs from the uninterrupted run's: $(series "$1/metrics.jsonl" | cut -d' ' -f1 | tr '\n' ' ')"
    fi
}
# one_line PATTERN LABEL: $TMP/err is exactly one line matching PATTERN
one_line() {
    [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -Eq -- "$1" "$TMP/err" && ok "$2: $(cat "$TMP/err")" ||
        fail "$2: expected one stderr line matching '$1', got: $(cat "$TMP/err")"
}
listing() { (cd "$1" && find . -printf '%p %s\n' | sort && find . -type f -exec md5sum {} + | sort); }

PLAN=$TMP/plan.json
plan "$PLAN"
"$DTRUN" --help | grep -q -- "--overwrite starts a new run" && ok "--help documents --overwrite" ||
    fail "--help does not document --overwrite"

# ---- the uninterrupted reference ---------------------------------------------------------
REF=$TMP/ref
run "$REF" --max-steps 30 || { echo "FAIL: reference run: $(cat "$TMP/err")"; exit 1; }
[ "$(wc -l <"$REF/metrics.jsonl")" -eq 30 ] || { echo "FAIL: reference run has $(wc -l <"$REF/metrics.jsonl") lines"; exit 1; }

# ---- 1. kill -9, then --resume ------------------------------------------------------------
K=$TMP/killed
DT_TEST_KILL_RANK=0 DT_TEST_KILL_STEP=13 "$DTRUN" "$PLAN" --out "$K" --quiet --max-steps 30 2>/dev/null
rc=$?
[ $rc -eq 137 ] || fail "kill: exited $rc, expected 137 (SIGKILL)"
[ "$(wc -l <"$K/metrics.jsonl")" -eq 12 ] || fail "kill: metrics.jsonl has $(wc -l <"$K/metrics.jsonl") lines before the resume, expected 12"
run "$K" --max-steps 30 --resume || fail "resume after kill exited $?: $(cat "$TMP/err")"
same_as_ref "$K" "kill -9 at step 13, resume from step 10"
cmp -s "$REF/ckpt-00000030/model.safetensors" "$K/ckpt-00000030/model.safetensors" &&
    ok "kill -9 + resume: final model.safetensors bitwise equal" || fail "kill -9 + resume: final weights differ"

# from outside, wherever the run happens to be (a line may be half-written)
X=$TMP/xkill
"$DTRUN" "$PLAN" --out "$X" --quiet --max-steps 30 2>/dev/null &
pid=$!
for _ in $(seq 1 3000); do
    [ "$(cat "$X/metrics.jsonl" 2>/dev/null | wc -l)" -ge 7 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.01
done
kill -9 $pid 2>/dev/null && killed="at line $(wc -l <"$X/metrics.jsonl")" || killed="(it had finished)"
wait $pid 2>/dev/null
run "$X" --max-steps 30 --resume || fail "resume after an outside kill -9 exited $?: $(cat "$TMP/err")"
same_as_ref "$X" "outside kill -9 $killed, resume"

# ---- 2. resume twice; a finished run stays as it is ------------------------------------------
R=$TMP/twice
run "$R" --max-steps 10 && run "$R" --max-steps 20 --resume && run "$R" --max-steps 30 --resume ||
    fail "resume twice: $(cat "$TMP/err")"
same_as_ref "$R" "10 -> resume 20 -> resume 30"
before=$(listing "$R")
"$DTRUN" "$PLAN" --out "$R" --max-steps 30 --resume 2>"$TMP/err" || fail "--resume of a finished run exited $?"
one_line "^dtrun: .*twice: already finished at step 30; nothing changed$" "--resume of a finished run"
[ "$before" = "$(listing "$R")" ] && ok "finished run: no file changed (run-report.json, metrics.jsonl, checkpoints)" ||
    fail "--resume of a finished run changed files: $(diff <(echo "$before") <(listing "$R") | head -5)"
python3 -c "import json,sys; sys.exit(0 if json.load(open('$R/run-report.json'))['steps'] == 30 else 1)" ||
    fail "run-report.json no longer describes the 30-step run"

# ---- 3. a new run refuses a non-empty --out ------------------------------------------------------
N=$TMP/nonempty
mkdir -p "$N" && echo "my notes" >"$N/notes.txt"
before_n=$(listing "$N")
run "$N" --max-steps 2
rc=$?
[ $rc -eq 2 ] || fail "non-empty --out: exit $rc, expected 2"
one_line "^dtrun: .*nonempty: the output directory is not empty.*--resume.*--overwrite.*--out" "non-empty --out refused"
[ "$before_n" = "$(listing "$N")" ] && ok "refused run wrote nothing" || fail "refused run changed $N"
before=$(listing "$R")
run "$R" --max-steps 2
[ $? -eq 2 ] && [ "$before" = "$(listing "$R")" ] && ok "a finished run's directory is refused too, untouched" ||
    fail "a new run into a finished run's directory was not refused cleanly: $(cat "$TMP/err")"
# a 2-rank plan that dtrun would start itself: refused before any rank starts, one line
PLAN2=$TMP/plan2.json
plan "$PLAN2" parallel.world_size=2 cluster.gpus_per_node=2 batch.global_batch=32
"$DTRUN" "$PLAN2" --out "$N" --max-steps 2 --quiet 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] || fail "non-empty --out, 2 ranks: exit $rc, expected 2"
one_line "^dtrun: .*nonempty: the output directory is not empty" "non-empty --out refused before starting 2 ranks"
[ "$before_n" = "$(listing "$N")" ] || fail "refused 2-rank run changed $N"
run "$R" --resume --overwrite
rc=$?
[ $rc -eq 2 ] || fail "--resume with --overwrite: exit $rc, expected 2"
one_line "exclude each other" "--resume with --overwrite"

# ---- 4. --overwrite keeps foreign files; keep_last prunes only its own run ---------------------
O=$TMP/over
cp -r "$R" "$O"
echo "my notes" >"$O/notes.txt"
mkdir -p "$O/ckpt-00000099" && echo "not dtrun's" >"$O/ckpt-00000099/mine.txt"
run "$O" --max-steps 10 --overwrite || fail "--overwrite exited $?: $(cat "$TMP/err")"
same_as_ref "$O" "--overwrite" 10
[ "$(cat "$O/notes.txt")" = "my notes" ] && [ "$(cat "$O/ckpt-00000099/mine.txt")" = "not dtrun's" ] &&
    ok "--overwrite kept notes.txt and ckpt-00000099/mine.txt" || fail "--overwrite lost a foreign file"
[ ! -e "$O/ckpt-00000030" ] && [ ! -e "$O/ckpt-00000025" ] && ok "--overwrite removed the earlier run's checkpoints" ||
    fail "--overwrite left the earlier run's checkpoints: $(ls "$O")"
# another run's checkpoint next to this run's series survives keep_last
F=$TMP/foreign
run "$F" --max-steps 3 || fail "foreign run: $(cat "$TMP/err")"
cp -r "$F/ckpt-00000003" "$O/"
before=$(cd "$O/ckpt-00000003" && md5sum *)
run "$O" --max-steps 30 --resume || fail "resume beside a foreign checkpoint: $(cat "$TMP/err")"
[ "$(ls -d "$O"/ckpt-* | xargs -n1 basename | tr '\n' ' ')" = "ckpt-00000003 ckpt-00000025 ckpt-00000030 ckpt-00000099 " ] &&
    [ "$before" = "$(cd "$O/ckpt-00000003" && md5sum *)" ] &&
    ok "keep_last 2 pruned only this run's checkpoints (another run's ckpt-00000003 and ckpt-00000099 kept)" ||
    fail "keep_last: $(ls "$O")"
same_as_ref "$O" "--overwrite, then resume to 30"

# ---- 5. a full disk ---------------------------------------------------------------------------
# full_run SIZE_KIB OUT [args]: the run on a file system of SIZE_KIB (tmpfs), or with
# every file limited to SIZE_KIB (ulimit -f) where mounting is not permitted
mkdir -p "$MNT"
if mount -t tmpfs -o size=4k tmpfs "$MNT" 2>/dev/null; then
    HOW=tmpfs
    full_run() { mount -o remount,size="$1"k "$MNT" && rm -rf "${MNT:?}"/* && run "$MNT/$2" "${@:3}"; }
    grow() { mount -o remount,size=16m "$MNT"; }
    echo "     disk-full runs on a tmpfs"
else
    HOW=ulimit
    full_run() { (trap '' XFSZ; ulimit -f "$1"; exec "$DTRUN" "$PLAN" --out "$MNT/$2" --quiet "${@:3}") 2>"$TMP/err"; }
    grow() { :; }
    echo "     cannot mount a tmpfs here: disk-full runs with a file-size limit (ulimit -f)"
fi
NOSPACE="No space left on device|File too large"
# metrics.jsonl outgrows the disk (no checkpoint before: save_interval 0)
PLAN_SAVE0=$TMP/plan0.json
plan "$PLAN_SAVE0" output.save_interval=0
P0=$PLAN; PLAN=$PLAN_SAVE0
full_run 4 m --max-steps 30
rc=$?
PLAN=$P0
[ $rc -ne 0 ] || fail "disk full (metrics): exited 0"
one_line "^dtrun: .*m/metrics.jsonl: cannot write: ($NOSPACE)" "disk full while writing metrics.jsonl"
n=$(wc -l <"$MNT/m/metrics.jsonl")
[ "$n" -ge 1 ] && [ "$n" -lt 30 ] && [ "$(tail -c 2 "$MNT/m/metrics.jsonl")" = "}" ] || fail "disk full: metrics.jsonl has $n lines or a partial last line"
same_as_ref "$MNT/m" "disk full after $n steps: every line before it" "$n"
# a checkpoint does not fit: no ckpt-* and no temporary directory remain
full_run 700 c --max-steps 30
rc=$?
[ $rc -ne 0 ] || fail "disk full (checkpoint): exited 0"
one_line "^dtrun: .*checkpoint at step 5.*($NOSPACE)" "disk full while writing the step-5 checkpoint"
[ -z "$(ls -A "$MNT/c" | grep ckpt)" ] && ok "no partial checkpoint left" || fail "partial checkpoint left: $(ls -A "$MNT/c")"
same_as_ref "$MNT/c" "disk full at the checkpoint: metrics.jsonl" 5
# space again: --resume finds no checkpoint, starts from 0 (metrics cut back to nothing) and matches
grow
run "$MNT/c" --max-steps 10 --resume ||
    fail "resume after the full disk: $(cat "$TMP/err")"
same_as_ref "$MNT/c" "after the full disk, --resume without a checkpoint" 10

# ---- 6. damaged and foreign input ----------------------------------------------------------------
D=$TMP/damaged
cp -r "$REF" "$D"
python3 - "$D/ckpt-00000030/model.safetensors" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x01; open(p, "wb").write(b)
PY
run "$D" --max-steps 35 --resume
rc=$?
[ $rc -eq 2 ] || fail "damaged checkpoint: exit $rc, expected 2"
one_line "^dtrun: .*ckpt-00000030/model.safetensors: checksum mismatch.*move it aside" "a flipped byte in model.safetensors"
mv "$D/ckpt-00000030" "$TMP/aside"
run "$D" --max-steps 30 --resume && ok "with the damaged checkpoint moved aside, the run resumes from step 25" ||
    fail "resume from the previous checkpoint: $(cat "$TMP/err")"
# 8 heads of 8 instead of 4 of 16: the same parameter count, another model
PLAN8=$TMP/plan8.json
plan "$PLAN8" model.n_head=8 model.n_kv_head=8 model.head_dim=8
python3 -c "
import json; p = json.load(open('$PLAN8')); p.pop('prediction', None); json.dump(p, open('$PLAN8', 'w'))"
"$DTRUN" "$PLAN8" --out "$R" --max-steps 35 --resume --quiet 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] || fail "8-head plan on a 4-head checkpoint: exit $rc, expected 2"
one_line "^dtrun: .*the checkpoint's model \(gpt2 L=2 C=64 heads=4/4 .*\) is not the plan's \(.*heads=8/8 " "4-head checkpoint, 8-head plan"
# a tampered state.json (counters that do not add up)
S=$TMP/state
cp -r "$REF" "$S"
sed -i 's/"adam_step": 30/"adam_step": 29/' "$S/ckpt-00000030/state.json"
run "$S" --max-steps 35 --resume
rc=$?
[ $rc -eq 2 ] || fail "tampered state.json: exit $rc, expected 2"
one_line "state.json: step 30 is not adam_step 29 \+ skipped_steps 0" "tampered state.json"
# an llm.c init file declaring a padded vocab of 2^28 (a 1 KiB file)
python3 - "$TMP/big-vocab.bin" <<'PY'
import struct, sys
h = [0] * 256
h[:8] = [20240326, 3, 64, 256, 2, 4, 64, 1 << 28]
open(sys.argv[1], "wb").write(struct.pack("<256i", *h))
PY
PLANI=$TMP/plani.json
plan "$PLANI" "output.init=\"$TMP/big-vocab.bin\""
"$DTRUN" "$PLANI" --out "$TMP/init" --max-steps 1 --quiet 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] || fail "llm.c vocab 2^28: exit $rc, expected 2"
one_line "^dtrun: .*big-vocab.bin: llm.c checkpoint header \(padded vocab 268435456\) implies" "llm.c init with a padded vocab of 2^28"
# a FIFO as data: refused at once, never opened for reading
mkfifo "$TMP/fifo"
timeout 60 "$DTRUN" "$PLAN" --out "$TMP/fifo-run" --data "$TMP/fifo" --max-steps 1 --quiet 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] || fail "FIFO as data: exit $rc, expected 2 (124: it blocked)"
one_line "^dtrun: .*fifo: is a FIFO, not a regular file or a directory" "FIFO as --data"

[ $FAILS -eq 0 ] || { echo "$FAILS failure(s)"; exit 1; }
echo "all passed"
