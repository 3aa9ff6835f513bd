/* dt_test.h — minimal assertion macros for the C tests: each failure prints
 * file:line, the expression and the values, and the test exits 1 at the end. */
#ifndef DT_TEST_H
#define DT_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dt_test_failures = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            dt_test_failures++;                                                      \
        }                                                                            \
    } while (0)

#define CHECK_EQ_I64(a, b)                                                                   \
    do {                                                                                     \
        int64_t va_ = (int64_t)(a), vb_ = (int64_t)(b);                                      \
        if (va_ != vb_) {                                                                    \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %" PRId64 " != %s = %" PRId64 "\n", \
                    __FILE__, __LINE__, #a, va_, #b, vb_);                                   \
            dt_test_failures++;                                                              \
        }                                                                                    \
    } while (0)

/* |a - b| <= tol * max(1, |b|) */
#define CHECK_NEAR(a, b, tol)                                                             \
    do {                                                                                  \
        double va_ = (double)(a), vb_ = (double)(b);                                      \
        double sc_ = fabs(vb_) > 1.0 ? fabs(vb_) : 1.0;                                   \
        if (!(fabs(va_ - vb_) <= (tol) * sc_)) {                                          \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.10g vs %s = %.10g (tol %g)\n", \
                    __FILE__, __LINE__, #a, va_, #b, vb_, (double)(tol));                 \
            dt_test_failures++;                                                           \
        }                                                                                 \
    } while (0)

#define CHECK_STR(a, b)                                                                    \
    do {                                                                                   \
        const char *sa_ = (a), *sb_ = (b);                                                 \
        if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0) {                                       \
            fprintf(stderr, "%s:%d: CHECK_STR failed: %s = \"%s\" vs \"%s\"\n", __FILE__,   \
                    __LINE__, #a, sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)");             \
            dt_test_failures++;                                                            \
        }                                                                                  \
    } while (0)

#define TEST_MAIN_END()                                                          \
    do {                                                                         \
        if (dt_test_failures) {                                                  \
            fprintf(stderr, "%d check(s) failed\n", dt_test_failures);           \
            return 1;                                                            \
        }                                                                        \
        printf("ok\n");                                                          \
        return 0;                                                                \
    } while (0)

#endif
