/* dt_reward.h — GRPO's rewards (docs/objectives.md "Engine pieces"): a user's command that
 * scores completions, and the built-in exact-answer check.
 *
 * The command protocol: the command (a /bin/sh -c line, run in its own process group) reads one
 * JSON object per completion on stdin, {"prompt": ..., "completion": ..., "answer": ...}
 * ("answer" only where the record has one), and writes one number per line on stdout, in the
 * same order, then exits 0. Its stderr is the caller's. A command that exits non-zero, dies on a
 * signal, outlives the timeout (then its whole group is killed), prints something that is not a
 * finite number, or prints more or fewer lines than completions is refused with one line naming
 * the command and the record. */
#ifndef DT_REWARD_H
#define DT_REWARD_H

#include <stdint.h>

#include "dt_error.h"

typedef struct dt_reward_item {
    const char *prompt;     /* the prompt as rendered for the model */
    const char *completion; /* the generated text */
    const char *answer;     /* the record's answer field, NULL when it has none */
} dt_reward_item;

/* Runs cmd once for n completions and stores their scores in rewards (n doubles). timeout_s > 0:
 * the wall-clock limit for the whole call. DT_EINVAL for a command that misbehaves as above
 * (the message names the command and, where one is at fault, the record's index and the line),
 * DT_EIO / DT_ERUNTIME when the OS refuses a pipe or the spawn. Nothing is left running. */
int dt_reward_command(const char *cmd, const dt_reward_item *items, int64_t n, double timeout_s, double *rewards,
                      dt_error *err);

/* The built-in exact-answer reward: 1 when the completion, with surrounding white space removed,
 * equals the answer (also trimmed), or when the completion's last number (a run of digits with an
 * optional leading '-' and one '.', commas between digits dropped) equals the answer; else 0.
 * An item with no answer is DT_EINVAL (the data has no answer field). */
int dt_reward_exact(const dt_reward_item *items, int64_t n, double *rewards, dt_error *err);

#endif
