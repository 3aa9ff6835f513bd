/* cli_util.c — what every dtrun subcommand does the same way with bad input
 * (dt_dtrun_cli.h): the exit status an error code maps to, the one line it prints,
 * and integer flags. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_dtrun_cli.h"
#include "dt_json.h"

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

/* 1 when path holds a JSON object whose "source" starts with DT_CALIBRATE_SOURCE_PREFIX */
static int written_by_calibrate(const char *path) {
    char *text = NULL;
    dt_error e = {0};
    cJSON *root = NULL;
    int ours = dt_json_read_file(path, &text, NULL, &e) == DT_OK && dt_json_parse(text, path, &root, &e) == DT_OK;
    const cJSON *src = ours ? cJSON_GetObjectItemCaseSensitive(root, "source") : NULL;
    ours = cJSON_IsString(src) &&
           !strncmp(src->valuestring, DT_CALIBRATE_SOURCE_PREFIX, strlen(DT_CALIBRATE_SOURCE_PREFIX));
    cJSON_Delete(root);
    free(text);
    return ours;
}

int dt_calibrate_check_out(const char *prog, const char *out) {
    struct stat st;
    if (stat(out, &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            fprintf(stderr, "%s: calibrate: -o %s is not a regular file; give a path for a new .json file\n", prog, out);
            return 2;
        }
        if (written_by_calibrate(out)) return 0;
        fprintf(stderr, "%s: calibrate: -o %s exists and is not a profile calibrate wrote; give a new path (or "
                        "move the file away)\n", prog, out);
        return 2;
    }
    if (errno != ENOENT) {
        fprintf(stderr, "%s: calibrate: -o %s: %s\n", prog, out, strerror(errno));
        return 2;
    }
    /* its folder must take a file: said now, not after the measuring */
    char dir[4096];
    const char *slash = strrchr(out, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - out + (slash == out)) : 1, slash ? out : ".");
    if (access(dir, W_OK | X_OK) == 0) return 0;
    fprintf(stderr, "%s: calibrate: -o %s: cannot write into '%s' (%s); give a path in a writable folder\n", prog, out,
            dir, strerror(errno));
    return 2;
}
