/* dt_cli.h — dtplan subcommands. Each takes the arguments after the subcommand
 * name (argv[0] is the subcommand) and returns the process exit status:
 * 0 success, 2 bad input or infeasible request, 1 other failure. Each prints
 * its own usage on --help. */
#ifndef DT_CLI_H
#define DT_CLI_H

int dt_cmd_estimate(int argc, char **argv);
int dt_cmd_solve(int argc, char **argv);
int dt_cmd_show(int argc, char **argv);
int dt_cmd_export(int argc, char **argv);
int dt_cmd_calibrate(int argc, char **argv);
int dt_cmd_simulate(int argc, char **argv);
int dt_cmd_compare(int argc, char **argv);
int dt_cmd_report(int argc, char **argv);

#endif
