/* dt_cli.h — dtplan subcommands. Each takes the arguments after the subcommand
 * name (argv[0] is the subcommand) and returns the process exit status:
 * 0 success, 2 bad input or infeasible request, 1 other failure. Each prints
 * its own usage on --help. */
#ifndef DT_CLI_H
#define DT_CLI_H

#include "dt_cli_common.h"   /* dt_cli_fail, dt_cli_fail_err, dt_cli_exit_code */
#include "dt_cli_prepared.h" /* --data naming a dtrun prepare output */
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

/* --config FILE (config_cli.c; docs/configs.md): argv with the config's settings as the
 * command's own options (the command line's win), after printing what each key did
 * (stdout; stderr with --json). Returns an exit status (0: *out_argc / *out_argv hold the
 * expanded arguments, valid until the next call). cmd: estimate, solve or simulate. */
int dt_cli_config_expand(const char *cmd, int argc, char **argv, int *out_argc, char ***out_argv);
/* solve, before it writes the plan: the config's own configuration (and the runbook's
 * distributed_strategy: auto rule) next to solve's choice, and --lr-scaling applied to
 * plan->optimizer.lr when the global batch changed. Nothing without --config. */
void dt_cli_config_after_solve(dt_plan *plan);
/* estimate's plan for one configuration (a --deepspeed file, or --zero-stage with both
 * offload filters): parses estimate's options; returns an exit status. */
int dt_estimate_plan(int argc, char **argv, dt_plan *out);
/* simulate a loaded plan with simulate's own options (--trace, --plot, --json, --detail). */
int dt_simulate_plan(dt_plan *p, int argc, char **argv);

#endif
