/* dt_filesum.h — what a checkpoint records per file: its size and CRC-32C
 * (dt_crc32c.h), of a file on disk or of one written atomically (dt_file.h's writer).
 * Messages and codes as dt_file.h's. */
#ifndef DT_FILESUM_H
#define DT_FILESUM_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"

typedef struct dt_file_sum {
    uint64_t bytes;
    uint32_t crc32c;
} dt_file_sum;

/* The size and CRC-32C of a regular file's bytes. */
int dt_file_sum_compute(const char *path, const char *what, dt_file_sum *sum, dt_error *err);

/* Extends crc (a CRC-32C) over bytes [from, to) of the open file fd (path names it in
 * messages); DT_EIO when the file is shorter than to. */
int dt_file_crc32c_range(int fd, uint64_t from, uint64_t to, uint32_t *crc, const char *path, dt_error *err);

/* dt_file_write_chunks_atomic (dt_file.h), and sum (may be NULL) set to the written
 * file's size and CRC-32C. */
int dt_file_write_chunks_atomic_sum(const char *path, const void *const *ptr, const size_t *len, int n,
                                    dt_file_sum *sum, dt_error *err);
/* The same for one buffer. */
int dt_write_file_atomic_sum(const char *path, const void *data, size_t len, dt_file_sum *sum, dt_error *err);

#endif
