/* sha256.c — see dt_sha256.h: the project's names over Nettle's sha256. */
#include "dt_sha256.h"

#include <stdio.h>

void dt_sha256_init(dt_sha256 *s) { sha256_init(&s->ctx); }

void dt_sha256_update(dt_sha256 *s, const void *data, size_t n) { sha256_update(&s->ctx, n, data); }

void dt_sha256_final(dt_sha256 *s, unsigned char out[DT_SHA256_BYTES]) {
    sha256_digest(&s->ctx, DT_SHA256_BYTES, out);
}

void dt_sha256_hex(const unsigned char d[DT_SHA256_BYTES], char out[2 * DT_SHA256_BYTES + 1]) {
    for (int i = 0; i < DT_SHA256_BYTES; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}
