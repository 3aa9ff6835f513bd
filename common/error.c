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

/* Puts the formatted text before (at_end 0) or after (at_end 1) the message. */
static int rewrite(dt_error *err, int at_end, const char *fmt, va_list ap) {
    if (!err) return DT_EINTERNAL;
    char text[DT_ERROR_MSG_MAX], old[DT_ERROR_MSG_MAX];
    vsnprintf(text, sizeof text, fmt, ap);
    memcpy(old, err->msg, sizeof old);
    if (at_end) snprintf(err->msg, sizeof err->msg, "%.500s%.500s", old, text);
    else snprintf(err->msg, sizeof err->msg, "%.500s: %.500s", text, old);
    return err->code;
}

int dt_error_prefix(dt_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = rewrite(err, 0, fmt, ap);
    va_end(ap);
    return rc;
}

int dt_error_suffix(dt_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = rewrite(err, 1, fmt, ap);
    va_end(ap);
    return rc;
}

void dt_error_clear(dt_error *err) {
    if (!err) return;
    err->code = DT_OK;
    err->msg[0] = '\0';
}
