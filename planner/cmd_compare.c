/* cmd_compare.c — placeholder until the subcommand lands (owner replaces this file). */
#include <stdio.h>

#include "dt_cli.h"

int dt_cmd_compare(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dtplan compare: not available in this build yet\n");
    return 1;
}
