/* dt_error.h — error values shared by every dtplan/dtrun module.
 *
 * Library functions never exit and never print: they return 0 on success and a
 * non-zero DT_E* code on failure, with a one-line, human-readable message in
 * the caller's dt_error (naming the thing that was wrong and what would fix it).
 * The CLIs print err.msg and turn the code into an exit status. */
#ifndef DT_ERROR_H
#define DT_ERROR_H

#include <stddef.h>

enum {
    DT_OK = 0,
    DT_EINVAL = 2,   /* bad user input (argument, file contents): CLI exit code 2 */
    DT_EINFEASIBLE = 3, /* a well-formed request with no solution (solver) */
    DT_EIO = 4,      /* file system / OS failure */
    DT_ENOMEM = 5,   /* allocation failed */
    DT_ERUNTIME = 6, /* failure while running (communication, dead rank, numerics) */
    DT_EINTERNAL = 7, /* a bug: an invariant did not hold */
    DT_ECOMM = 8     /* a collective failed or did not complete (MPI, NCCL, a timeout): another
                      * rank died or hangs; callers that diagnose peers test for this code,
                      * never for words of the message. CLI exit code 1, as DT_ERUNTIME */
};

#define DT_ERROR_MSG_MAX 1024

typedef struct dt_error {
    int code;                    /* one of the DT_E* codes, DT_OK when clear */
    char msg[DT_ERROR_MSG_MAX];  /* one line, no trailing newline */
} dt_error;

/* Formats the message into err (when err is non-NULL) and returns code, so a
 * caller can write: return dt_errorf(err, DT_EINVAL, "bad --mem '%s'", s); */
int dt_errorf(dt_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes an existing message: "context: previous message". Returns err->code. */
int dt_error_prefix(dt_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends to an existing message: "previous message<suffix>" (the suffix says
 * what to do). Returns err->code. */
int dt_error_suffix(dt_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void dt_error_clear(dt_error *err);

#endif
