/* dt_sha256.h — SHA-256 (FIPS 180-4, "Secure Hash Standard", sections 5.3.3 and 6.2),
 * used for tokenizer fingerprints (dt_tokenizer.h dt_tok_fingerprint) that token shards
 * record (docs/data.md). Test vector: SHA-256("abc") = ba7816bf 8f01cfea 414140de 5dae2223
 * b00361a3 96177a9c b410ff61 f20015ad (FIPS 180-4 example, NIST CSRC). */
#ifndef DT_SHA256_H
#define DT_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define DT_SHA256_BYTES 32
#define DT_SHA256_BLOCK 64

typedef struct dt_sha256 {
    uint32_t h[8];
    uint64_t bytes;                    /* message length so far */
    unsigned char buf[DT_SHA256_BLOCK];
    size_t fill;                       /* bytes waiting in buf */
} dt_sha256;

void dt_sha256_init(dt_sha256 *s);
void dt_sha256_update(dt_sha256 *s, const void *data, size_t n);
void dt_sha256_final(dt_sha256 *s, unsigned char out[DT_SHA256_BYTES]);
/* Lower-case hex of a digest: out holds 2 * DT_SHA256_BYTES + 1 chars. */
void dt_sha256_hex(const unsigned char d[DT_SHA256_BYTES], char out[2 * DT_SHA256_BYTES + 1]);

#endif
