/* dt_fuzz_crc.h — for the fuzz targets of checksummed shards (fuzz_shard.c, fuzz_pairshard.c):
 * the input copied with its two CRC-32C sums made right (payload from the 1024-byte header on,
 * then the header's first span bytes), so mutations reach the fields and the payload instead of
 * stopping at the checksum; the copy becomes the file a reader takes (dt_fuzz_file). */
#ifndef DT_FUZZ_CRC_H
#define DT_FUZZ_CRC_H

#include "dt_fuzz.h"   /* first: it sets _GNU_SOURCE */

#include "dt_crc32c.h"

#define DT_FUZZ_SHARD_HEADER 1024

/* data as a file (path, the fd to close); when it starts with magic (4 bytes) and holds a
 * header, the payload CRC at payload_crc_at and the header CRC at span are made right first. */
static inline int dt_fuzz_shard_file(const uint8_t *data, size_t size, const char *magic, size_t payload_crc_at,
                                     size_t span, char *path, size_t n) {
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) abort();
    memcpy(copy, data, size);
    if (size >= DT_FUZZ_SHARD_HEADER && !memcmp(copy, magic, 4)) {
        uint32_t crc = dt_crc32c(0, copy + DT_FUZZ_SHARD_HEADER, size - DT_FUZZ_SHARD_HEADER);
        memcpy(copy + payload_crc_at, &crc, 4);
        crc = dt_crc32c(0, copy, span);
        memcpy(copy + span, &crc, 4);
    }
    int fd = dt_fuzz_file(copy, size, path, n);
    free(copy);
    return fd;
}

#endif
