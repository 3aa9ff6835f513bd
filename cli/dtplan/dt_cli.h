/* dt_cli.h — dtplan subcommands. Each takes the arguments after the subcommand
 * name (argv[0] is the subcommand) and returns the process exit status:
 * 0 success, 2 bad input or infeasible request, 1 other failure. Each prints
 * its own usage on --help. */
#ifndef DT_CLI_H
#define DT_CLI_H

#include "dt_cli_common.h"   /* dt_cli_fail, dt_cli_fail_err, dt_cli_exit_code */
#include "dt_error.h"
#include "dt_plan.h"

int dt_cmd_estimate(int argc, char **argv);
int dt_cmd_solve(int argc, char **argv);
int dt_cmd_show(int argc, char **argv);
int dt_cmd_export(int argc, char **argv);
int dt_cmd_calibrate(int argc, char **argv);

/* The value of the option argv[*i] (advancing *i), or NULL after printing
 * "<cmd>: <option> needs a value (see dtplan <cmd> --help)" when it is missing or empty. */
const char *dt_cli_value(int argc, char **argv, int *i, const char *cmd);
/* A chart file name must end in .png or .svg (the charts pick the format from it):
 * checked before any work, "--plot: 'x.txt' must end in .png or .svg (e.g. --plot mem.png)". */
int dt_cli_check_plot_name(const char *flag, const char *path, const char *example, dt_error *err);
int dt_cmd_simulate(int argc, char **argv);
int dt_cmd_compare(int argc, char **argv);
int dt_cmd_report(int argc, char **argv);
int dt_cmd_validate(int argc, char **argv);

/* --data naming `dtrun prepare`'s output (its prepare.json, or its train/ folder):
 * the plan reads its shards (data.format llmc, train/ and val/), the tokenizer's
 * vocabulary must fit the model's (DT_EINVAL otherwise), and note (a line to print,
 * "" when data is not such a directory) says what the plan's steps read. */
int dt_solve_apply_prepared(dt_plan *b, const char *data, char *note, size_t note_len, dt_error *err);

#endif
