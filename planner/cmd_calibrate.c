/* cmd_calibrate.c — placeholder until the subcommand lands (owner replaces this file). */
#include <stdio.h>

#include "dt_cli.h"

int dt_cmd_calibrate(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dtplan calibrate: not available in this build yet\n");
    return 1;
}
