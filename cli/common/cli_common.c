/* cli_common.c — see dt_cli_common.h */
#include "dt_cli_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* "--name=value" with a non-empty name of option characters: the length of "--name", else 0 */
static size_t equals_option_len(const char *a) {
    if (a[0] != '-' || a[1] != '-') return 0;
    size_t n = 2;
    while (a[n] == '-' || a[n] == '_' || (a[n] >= '0' && a[n] <= '9') || (a[n] >= 'a' && a[n] <= 'z') ||
           (a[n] >= 'A' && a[n] <= 'Z'))
        n++;
    return n > 2 && a[n] == '=' ? n : 0;
}

static char **g_split_argv;   /* the rewritten argv (reachable until exit) */
static char *g_split_names;   /* its "--name" strings, one block */

int dt_cli_split_equals(int *argc, char ***argv) {
    int n = *argc, extra = 0, end = n;
    size_t names = 0;
    for (int i = 1; i < n; i++) {
        if (!strcmp((*argv)[i], "--")) {
            end = i;
            break;
        }
        size_t k = equals_option_len((*argv)[i]);
        if (k) extra++, names += k + 1;
    }
    if (!extra) return 0;
    char **out = malloc(((size_t)n + (size_t)extra + 1) * sizeof *out);
    char *buf = malloc(names);
    if (!out || !buf) {
        free(out);
        free(buf);
        return 1;
    }
    int m = 0;
    char *b = buf;
    for (int i = 0; i < n; i++) {
        char *a = (*argv)[i];
        size_t k = i > 0 && i < end ? equals_option_len(a) : 0;
        if (!k) {
            out[m++] = a;
            continue;
        }
        memcpy(b, a, k);
        b[k] = '\0';
        out[m++] = b;
        out[m++] = a + k + 1;
        b += k + 1;
    }
    out[m] = NULL;
    g_split_argv = out;
    g_split_names = buf;
    *argc = m;
    *argv = out;
    return 0;
}
