#!/usr/bin/env bash
# After a ctest run: prints the tests that were skipped and fails if any of them
# is not a GPU test (only GPU tests may skip, and only for "no GPU"; a test whose
# tool is missing fails instead). Usage: bash scripts/ci_skips.sh BUILD_DIR CTEST_LOG
set -euo pipefail
B=$1
LOG=$2
skipped=$(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (Skipped)$/\1/p' "$LOG" | sort -u)
gpu=$(ctest --test-dir "$B" -N -L gpu | sed -n 's/^[[:space:]]*Test[[:space:]]*#[0-9]*: \([^ ]*\).*/\1/p' | sort -u)
if [ -z "$skipped" ]; then
    echo "skipped: none"
    exit 0
fi
echo "skipped: $(echo $skipped)"
bad=$(comm -23 <(echo "$skipped") <(echo "$gpu"))
if [ -n "$bad" ]; then
    echo "FAIL: non-GPU tests skipped (only GPU tests may skip): $(echo $bad)"
    exit 1
fi
echo "every skipped test is a GPU test (no GPU here)"
