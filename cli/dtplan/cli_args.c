/* cli_args.c — the option helpers dtplan's commands share (dt_cli.h): an option's
 * value, a chart file name. In a file of their own so the commands and the
 * dispatcher (dtplan.c) do not reach into each other (tests/arch/test_circles.py). */
#include <string.h>
#include <strings.h>

#include "dt_cli.h"

const char *dt_cli_value(int argc, char **argv, int *i, const char *cmd) {
    const char *opt = argv[*i];
    if (*i + 1 >= argc || !argv[*i + 1][0]) {
        dt_cli_fail(2, "%s: %s needs a value (see dtplan %s --help)", cmd, opt, cmd);
        return NULL;
    }
    return argv[++*i];
}

int dt_cli_check_plot_name(const char *flag, const char *path, const char *example, dt_error *err) {
    size_t n = strlen(path);
    if (n > 4 && (!strcasecmp(path + n - 4, ".png") || !strcasecmp(path + n - 4, ".svg"))) return DT_OK;
    return dt_errorf(err, DT_EINVAL, "%s: '%s' must end in .png or .svg (e.g. %s %s)", flag, path, flag, example);
}
