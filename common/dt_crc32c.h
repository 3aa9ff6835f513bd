/* dt_crc32c.h — CRC-32C (Castagnoli, reflected polynomial 0x82F63B78; the
 * checksum of iSCSI, ext4 metadata and SSE4.2's crc32 instruction), used for the
 * per-file checksums of checkpoints (docs/dtrun.md "Checkpoint verification").
 * Check value: dt_crc32c(0, "123456789", 9) == 0xE3069283.
 * On x86-64 with SSE4.2 the instruction is used (chosen at run time), elsewhere
 * a slicing-by-8 table; both give the same values. */
#ifndef DT_CRC32C_H
#define DT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over n bytes of data. */
uint32_t dt_crc32c(uint32_t crc, const void *data, size_t n);
/* The portable table version (tests compare the two). */
uint32_t dt_crc32c_sw(uint32_t crc, const void *data, size_t n);

#endif
