/* cli_common.c — see dt_cli_common.h */
#include "dt_cli_common.h"

#include <stdarg.h>
#include <stdio.h>

static const char *g_prog = "dtplan";

void dt_cli_set_prog(const char *prog) { g_prog = prog; }

const char *dt_cli_prog(void) { return g_prog; }

int dt_cli_exit_code(int code) {
    if (code == DT_OK) return 0;
    return code == DT_EINVAL || code == DT_EINFEASIBLE ? 2 : 1;
}

int dt_cli_fail(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", g_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return status;
}

int dt_cli_fail_err(int code, const dt_error *err) {
    fprintf(stderr, "%s: %s\n", g_prog, err->msg);
    return dt_cli_exit_code(code);
}
