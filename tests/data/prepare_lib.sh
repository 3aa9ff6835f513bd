# prepare_lib.sh — what the `dtrun prepare` shell tests share (test_prepare_cli.sh,
# test_vlm_cli.sh); sourced after DTRUN, TMP and fail() are set.

# listing DIR: every path below DIR with its checksum (what "unchanged" compares)
listing() { (cd "$1" 2>/dev/null && find . -type f -exec md5sum {} + | sort) ; }

# expect CODE PATTERN ARGS...: exit code, one stderr line matching PATTERN, nothing on stdout
expect() {
  local code=$1 pat=$2
  shift 2
  "$DTRUN" prepare "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ "$rc" -eq "$code" ] || fail "prepare $* exited $rc, expected $code: $(cat "$TMP/err")"
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "prepare $*: expected one stderr line, got: $(cat "$TMP/err")"
  grep -q -- "$pat" "$TMP/err" || fail "prepare $*: stderr lacks '$pat': $(cat "$TMP/err")"
  [ ! -s "$TMP/out" ] || fail "prepare $*: printed on stdout: $(cat "$TMP/out")"
}
