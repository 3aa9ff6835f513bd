/* filesum.c — see dt_filesum.h. */
#include "dt_filesum.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_crc32c.h"
#include "dt_file.h"

#define DT_SUM_CHUNK ((size_t)1 << 20)   /* bytes read at a time when summing a file */

int dt_file_crc32c_range(int fd, uint64_t from, uint64_t to, uint32_t *crc, const char *path, dt_error *err) {
    unsigned char *buf = malloc(DT_SUM_CHUNK);
    if (!buf) return dt_errorf(err, DT_ENOMEM, "%s: out of memory for the checksum", path);
    int rc = DT_OK;
    while (from < to && !rc) {
        size_t want = to - from < DT_SUM_CHUNK ? (size_t)(to - from) : DT_SUM_CHUNK;
        ssize_t k = pread(fd, buf, want, (off_t)from);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            rc = dt_errorf(err, DT_EIO, "%s: cannot read: %s", path,
                           k < 0 ? strerror(errno) : "the file is shorter than it was");
        else {
            *crc = dt_crc32c(*crc, buf, (size_t)k);
            from += (uint64_t)k;
        }
    }
    free(buf);
    return rc;
}

int dt_file_sum_compute(const char *path, const char *what, dt_file_sum *sum, dt_error *err) {
    int fd;
    uint64_t size = 0;
    if (dt_file_open_regular(path, what, &fd, &size, err)) return err->code;
    uint32_t crc = 0;
    int rc = dt_file_crc32c_range(fd, 0, size, &crc, path, err);
    close(fd);
    sum->bytes = size;
    sum->crc32c = crc;
    return rc;
}

int dt_file_write_chunks_atomic_sum(const char *path, const void *const *ptr, const size_t *len, int n,
                                    dt_file_sum *sum, dt_error *err) {
    int rc = dt_file_write_chunks_atomic(path, ptr, len, n, err);
    if (rc || !sum) return rc;
    /* the bytes just written, summed from memory (the writer checked every write) */
    sum->bytes = 0;
    sum->crc32c = 0;
    for (int i = 0; i < n; i++) {
        sum->crc32c = dt_crc32c(sum->crc32c, ptr[i], len[i]);
        sum->bytes += len[i];
    }
    return DT_OK;
}

int dt_write_file_atomic_sum(const char *path, const void *data, size_t len, dt_file_sum *sum, dt_error *err) {
    return dt_file_write_chunks_atomic_sum(path, &data, &len, 1, sum, err);
}
