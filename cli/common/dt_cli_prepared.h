/* dt_cli_prepared.h — --data naming `dtrun prepare`'s output (its prepare.json, or its
 * train/ folder; docs/data.md), for dtplan solve and for dtrun on a plan that names no data:
 * the plan reads its shards (data.format llmc, train/ and val/), the tokenizer's vocabulary
 * must fit the model's (DT_EINVAL otherwise), and the plan records the tokenizer's
 * fingerprint and path and whether the loss is masked. */
#ifndef DT_CLI_PREPARED_H
#define DT_CLI_PREPARED_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_plan.h"

/* The training tokens of `dtrun prepare`'s output at data (its prepare.json's
 * splits.train.tokens); -1 when data is not such an output. */
int64_t dt_prepared_train_tokens(const char *data);
/* 1 when data is such an output (or its train/ folder). */
int dt_prepared_is_output(const char *data);
/* Sets b's data section from the output at data; note (a line to print) says what the
 * plan's steps read. data NULL or not such an output: nothing changes, note "". */
int dt_solve_apply_prepared(dt_plan *b, const char *data, char *note, size_t note_len, dt_error *err);

#endif
