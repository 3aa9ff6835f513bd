/* dt_sha256.h — SHA-256 (FIPS 180-4, "Secure Hash Standard"), used for tokenizer
 * fingerprints (dt_tokenizer.h dt_tok_fingerprint) that token shards record
 * (docs/data.md). The hashing is GNU Nettle's (Debian nettle-dev; its x86-64 SHA-NI
 * code chosen at run time); this header keeps the project's names and digest layout.
 * Test vector: SHA-256("abc") = ba7816bf 8f01cfea 414140de 5dae2223 b00361a3 96177a9c
 * b410ff61 f20015ad (FIPS 180-4 example, NIST CSRC; tests/tokenizer checks it and
 * the other FIPS vectors). */
#ifndef DT_SHA256_H
#define DT_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include <nettle/sha2.h>

#define DT_SHA256_BYTES 32

typedef struct dt_sha256 {
    struct sha256_ctx ctx;
} dt_sha256;

void dt_sha256_init(dt_sha256 *s);
void dt_sha256_update(dt_sha256 *s, const void *data, size_t n);
/* Writes the digest of everything updated so far; s must be initialised again to reuse. */
void dt_sha256_final(dt_sha256 *s, unsigned char out[DT_SHA256_BYTES]);
/* Lower-case hex of a digest: out holds 2 * DT_SHA256_BYTES + 1 chars. */
void dt_sha256_hex(const unsigned char d[DT_SHA256_BYTES], char out[2 * DT_SHA256_BYTES + 1]);

#endif
