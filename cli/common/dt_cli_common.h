/* dt_cli_common.h — what both programs' commands share: how a failure is printed
 * (one line on stderr, "PROG: message") and which exit status it gets (2 for what
 * the user can fix: bad input or an infeasible request; 1 otherwise). */
#ifndef DT_CLI_COMMON_H
#define DT_CLI_COMMON_H

#include "dt_error.h"

/* The program name every message starts with ("dtplan", "dtrun"); main sets it
 * once, before any command runs. */
void dt_cli_set_prog(const char *prog);
const char *dt_cli_prog(void);

/* The exit status of a DT_E* code: 2 for DT_EINVAL and DT_EINFEASIBLE, 1 for the
 * others (the OS, memory, a dead rank, a bug), 0 for DT_OK. */
int dt_cli_exit_code(int code);

/* Prints "PROG: <message>" (one line) on stderr and returns status, so a command
 * can write: return dt_cli_fail(2, "--mem: ..."). */
int dt_cli_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "PROG: <err->msg>" and returns dt_cli_exit_code(code) (code is usually
 * err->code; a caller that knows better passes its own). */
int dt_cli_fail_err(int code, const dt_error *err);

/* GNU getopt_long's "--name=value" for every option of every command: rewrites
 * *argv so that each "--name=value" (name of letters, digits, '-' and '_', before
 * the first '=') becomes the two arguments "--name" "value", which every command's
 * parser reads as it reads the spaced form. Nothing after a bare "--" is touched.
 * A value that itself looks like "--x=y" is given as "--opt=--x=y". main calls it
 * once, before dispatching; the new argv lives until exit. Returns 0, or 1 when out
 * of memory (argv untouched). */
int dt_cli_split_equals(int *argc, char ***argv);

#endif
