#!/usr/bin/env bash
# grpo_demo.sh — GRPO teaching a tiny model something checkable, on this CPU in seconds: a
# random-weight Llama-family model (2 layers, hidden 32, 16 tokens) learns a digit's successor
# ("3=" -> "4") from the built-in exact-answer reward alone (G 16 completions for each of the
# 10 prompts, TRL's defaults beta 0 / one iteration / scale_rewards group / loss dapo, AdamW lr
# 1e-2, 40 steps). Prints each step's TRL metrics (the reward curve) and the first and last
# steps' mean reward; it is the engine_grpo test's run (tests/engine/test_grpo.c), which fails
# unless the reward rises by 0.3. The same task through dtrun (prepare --format prompts, dtplan solve
# --objective grpo, dtrun PLAN) is the engine_grpo_dtrun test (tests/engine/test_grpo_dtrun.sh).
#
#   bash scripts/grpo_demo.sh [BUILD]     (default build)
set -eu
BUILD=${1:-build}
exec env OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$BUILD/tests/engine/test_engine_grpo"
