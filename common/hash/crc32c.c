/* crc32c.c — see dt_crc32c.h: the project's convention (0 to start, the result
 * final) over ISA-L's crc32_iscsi, which takes and returns the register without the
 * pre- and post-inversion and an int length. */
#include "dt_crc32c.h"

#include <isa-l/crc.h>

#define DT_CRC32C_PIECE ((size_t)1 << 30)   /* bytes per call: below crc32_iscsi's INT_MAX */

uint32_t dt_crc32c(uint32_t crc, const void *data, size_t n) {
    unsigned char *p = (unsigned char *)data;   /* crc32_iscsi only reads it */
    uint32_t c = ~crc;
    while (n) {
        size_t k = n < DT_CRC32C_PIECE ? n : DT_CRC32C_PIECE;
        c = crc32_iscsi(p, (int)k, c);
        p += k;
        n -= k;
    }
    return ~c;
}
