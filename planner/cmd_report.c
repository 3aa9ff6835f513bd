/* cmd_report.c — placeholder until the subcommand lands (owner replaces this file). */
#include <stdio.h>

#include "dt_cli.h"

int dt_cmd_report(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dtplan report: not available in this build yet\n");
    return 1;
}
