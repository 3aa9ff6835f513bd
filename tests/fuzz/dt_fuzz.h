/* dt_fuzz.h — helpers the fuzz targets share: the input as a NUL-terminated
 * string, or as a file (a memfd, so readers that take a path see exactly the
 * bytes). Every target defines LLVMFuzzerTestOneInput (libFuzzer's entry
 * point); replay.c runs the committed corpus through the same function in the
 * ordinary builds, so a finding, once added to the corpus, stays a regression test. */
#ifndef DT_FUZZ_H
#define DT_FUZZ_H

#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* data as a C string (a NUL byte inside ends it, as it would for any reader). */
static inline char *dt_fuzz_text(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* data as a file: fills path ("/proc/self/fd/N"), returns the fd to close. */
static inline int dt_fuzz_file(const uint8_t *data, size_t size, char *path, size_t n) {
    int fd = memfd_create("dt_fuzz", 0);
    if (fd < 0) abort();
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) abort();
        off += (size_t)w;
    }
    snprintf(path, n, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
