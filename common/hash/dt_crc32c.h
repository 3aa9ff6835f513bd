/* dt_crc32c.h — CRC-32C (Castagnoli, reflected polynomial 0x82F63B78; the
 * checksum of iSCSI, ext4 metadata and SSE4.2's crc32 instruction), used for the
 * per-file checksums of checkpoints (docs/dtrun.md "Checkpoint verification").
 * The checksum is Intel ISA-L's crc32_iscsi (Debian libisal-dev; it picks its
 * SSE4.2 / PCLMUL / AVX-512 code at run time, a table elsewhere).
 * Check value: dt_crc32c(0, "123456789", 9) == 0xE3069283; tests/engine
 * test_safetensors also checks RFC 3720 B.4's vectors and a bitwise reference. */
#ifndef DT_CRC32C_H
#define DT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over n bytes of data. */
uint32_t dt_crc32c(uint32_t crc, const void *data, size_t n);

#endif
