/* dt_test_data.h — helpers shared by the engine/data tests: whole files and the committed
 * mini tokenizers, each exiting with the reader's message when it fails (a test fixture
 * that cannot be read is a broken checkout, not a test result). */
#ifndef DT_TEST_DATA_H
#define DT_TEST_DATA_H

#include <stdio.h>
#include <stdlib.h>

#include "dt_file.h"
#include "dt_tokenizer.h"

/* fixtures are small; this bounds a wrong path to a huge file */
#define DT_TEST_FILE_MAX ((uint64_t)64 << 20)

/* The whole file (NUL after its *n bytes), malloc'd. */
static inline char *dt_test_slurp(const char *path, size_t *n) {
    char *b = NULL;
    dt_error err = {0};
    if (dt_file_read(path, "test file", DT_TEST_FILE_MAX, &b, n, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return b;
}

/* SRC/tests/tokenizer/data/FILE loaded; its path in path (n bytes). */
static inline dt_tokenizer *dt_test_load_tok(const char *src, const char *file, char *path, size_t n) {
    snprintf(path, n, "%s/tests/tokenizer/data/%s", src, file);
    dt_tokenizer *t = NULL;
    dt_error err = {0};
    if (dt_tok_load(path, &t, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return t;
}

#endif
