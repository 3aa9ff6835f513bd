/* cli_util.c — what every dtrun subcommand does the same way with bad input
 * (dt_dtrun_cli.h): the exit status an error code maps to, the one line it prints,
 * and integer flags. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "dt_dtrun_cli.h"

int dt_cli_exit_code(int rc) { return rc == DT_EINVAL || rc == DT_EINFEASIBLE ? 2 : 1; }

int dt_cli_fail(int rc, const dt_error *err) {
    fprintf(stderr, "dtrun: %s\n", err->msg);
    return dt_cli_exit_code(rc);
}

int dt_cli_parse_i64(const char *s, const char *what, int64_t min, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < min) {
        fprintf(stderr, "dtrun: %s expects an integer >= %lld, got '%s'\n", what, (long long)min, s);
        return 2;
    }
    *out = v;
    return 0;
}
