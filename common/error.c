/* error.c — see dt_error.h */
#include "dt_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int dt_errorf(dt_error *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int dt_error_prefix(dt_error *err, const char *fmt, ...) {
    if (!err) return DT_EINTERNAL;
    char prefix[DT_ERROR_MSG_MAX], old[DT_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%.500s: %.500s", prefix, old);
    return err->code;
}

int dt_error_suffix(dt_error *err, const char *fmt, ...) {
    if (!err) return DT_EINTERNAL;
    char suffix[DT_ERROR_MSG_MAX], old[DT_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(suffix, sizeof suffix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%.500s%.500s", old, suffix);
    return err->code;
}

void dt_error_clear(dt_error *err) {
    if (!err) return;
    err->code = DT_OK;
    err->msg[0] = '\0';
}
