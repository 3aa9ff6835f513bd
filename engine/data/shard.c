/* shard.c — token shards v2 (dt_shard.h, docs/data.md): the header's bytes, its checks,
 * and the streaming writer. Little-endian hosts only (x86-64, aarch64), as the rest of
 * the engine's file formats (safetensors.c). */
#include "dt_shard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_crc32c.h"
#include "dt_file.h"

/* header field offsets (dt_shard.h's table) */
enum {
    OFF_MAGIC = 0,
    OFF_VERSION = 4,
    OFF_HEADER_BYTES = 8,
    OFF_TOKEN_BYTES = 12,
    OFF_FLAGS = 16,
    OFF_SPLIT = 20,
    OFF_VOCAB = 24,
    OFF_COUNT = 32,
    OFF_DOCS = 40,
    OFF_PREPARE_ID = 48,
    OFF_SHARD_INDEX = 56,
    OFF_EOT = 60,
    OFF_FINGERPRINT = 64,
    OFF_PAYLOAD_CRC = 96,
    OFF_HEADER_CRC = DT_SHARD2_CRC_SPAN,
    OFF_PADDING = 104
};

/* the writer's token buffer before each fwrite */
#define SHARD_WRITE_CHUNK_TOKENS 65536

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }
static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t mask_bytes(uint64_t count) { return (count + 7) / 8; }

uint64_t dt_shard2_file_bytes(const dt_shard_header *h) {
    return DT_SHARD2_HEADER_BYTES + h->count * h->token_bytes +
           ((h->flags & DT_SHARD2_FLAG_MASK) ? mask_bytes(h->count) : 0);
}

uint32_t dt_shard2_token_bytes(uint64_t vocab) { return vocab <= DT_SHARD2_U16_VOCAB ? 2 : 4; }

int dt_shard2_is(const void *bytes, size_t len) {
    return len >= DT_SHARD2_MAGIC_BYTES && !memcmp(bytes, DT_SHARD2_MAGIC, DT_SHARD2_MAGIC_BYTES);
}

static void encode_header(const dt_shard_header *h, unsigned char b[DT_SHARD2_HEADER_BYTES]) {
    memset(b, 0, DT_SHARD2_HEADER_BYTES);
    memcpy(b + OFF_MAGIC, DT_SHARD2_MAGIC, DT_SHARD2_MAGIC_BYTES);
    put32(b + OFF_VERSION, DT_SHARD2_VERSION);
    put32(b + OFF_HEADER_BYTES, DT_SHARD2_HEADER_BYTES);
    put32(b + OFF_TOKEN_BYTES, h->token_bytes);
    put32(b + OFF_FLAGS, h->flags);
    put32(b + OFF_SPLIT, h->split);
    put64(b + OFF_VOCAB, h->vocab);
    put64(b + OFF_COUNT, h->count);
    put64(b + OFF_DOCS, h->docs);
    put64(b + OFF_PREPARE_ID, h->prepare_id);
    put32(b + OFF_SHARD_INDEX, h->shard_index);
    put32(b + OFF_EOT, h->eot_id);
    memcpy(b + OFF_FINGERPRINT, h->fingerprint, DT_SHARD2_FINGERPRINT_BYTES);
    put32(b + OFF_PAYLOAD_CRC, h->payload_crc);
    put32(b + OFF_HEADER_CRC, dt_crc32c(0, b, DT_SHARD2_CRC_SPAN));
}

int dt_shard2_parse(const void *bytes, uint64_t file_bytes, const char *path, dt_shard_header *h,
                    dt_error *err) {
    const unsigned char *b = bytes;
    memset(h, 0, sizeof *h);
    if (file_bytes < DT_SHARD2_HEADER_BYTES)
        return dt_errorf(err, DT_EINVAL, "%s: truncated token shard: %llu bytes, shorter than the %d-byte header",
                         path, (unsigned long long)file_bytes, DT_SHARD2_HEADER_BYTES);
    if (!dt_shard2_is(b, DT_SHARD2_MAGIC_BYTES))
        return dt_errorf(err, DT_EINVAL, "%s: not a dtrun token shard (no \"" DT_SHARD2_MAGIC "\" magic)", path);
    uint32_t version = get32(b + OFF_VERSION), hb = get32(b + OFF_HEADER_BYTES);
    if (version != DT_SHARD2_VERSION)
        return dt_errorf(err, DT_EINVAL, "%s: token shard version %u, this dtrun reads version %d", path, version,
                         DT_SHARD2_VERSION);
    if (hb != DT_SHARD2_HEADER_BYTES)
        return dt_errorf(err, DT_EINVAL, "%s: token shard header of %u bytes, expected %d", path, hb,
                         DT_SHARD2_HEADER_BYTES);
    if (get32(b + OFF_HEADER_CRC) != dt_crc32c(0, b, DT_SHARD2_CRC_SPAN))
        return dt_errorf(err, DT_EINVAL, "%s: damaged token shard: the header's CRC-32C does not match", path);
    for (size_t i = OFF_PADDING; i < DT_SHARD2_HEADER_BYTES; i++)
        if (b[i])
            return dt_errorf(err, DT_EINVAL, "%s: token shard header byte %zu is not zero (a newer format?)", path, i);
    h->token_bytes = get32(b + OFF_TOKEN_BYTES);
    h->flags = get32(b + OFF_FLAGS);
    h->split = get32(b + OFF_SPLIT);
    h->vocab = get64(b + OFF_VOCAB);
    h->count = get64(b + OFF_COUNT);
    h->docs = get64(b + OFF_DOCS);
    h->prepare_id = get64(b + OFF_PREPARE_ID);
    h->shard_index = get32(b + OFF_SHARD_INDEX);
    h->eot_id = get32(b + OFF_EOT);
    memcpy(h->fingerprint, b + OFF_FINGERPRINT, DT_SHARD2_FINGERPRINT_BYTES);
    h->payload_crc = get32(b + OFF_PAYLOAD_CRC);
    if (h->token_bytes != 2 && h->token_bytes != 4)
        return dt_errorf(err, DT_EINVAL, "%s: token shard with %u-byte tokens (2 or 4 expected)", path, h->token_bytes);
    if (h->vocab == 0 || (h->token_bytes == 2 && h->vocab > DT_SHARD2_U16_VOCAB) || h->vocab > UINT32_MAX)
        return dt_errorf(err, DT_EINVAL, "%s: token shard vocab size %llu does not fit %u-byte tokens", path,
                         (unsigned long long)h->vocab, h->token_bytes);
    if (h->flags & ~DT_SHARD2_FLAG_MASK)
        return dt_errorf(err, DT_EINVAL, "%s: token shard flags 0x%x hold bits this dtrun does not know", path,
                         h->flags);
    if (h->split != DT_SPLIT_TRAIN && h->split != DT_SPLIT_VAL)
        return dt_errorf(err, DT_EINVAL, "%s: token shard split %u (0 train, 1 validation expected)", path, h->split);
    if (h->eot_id != DT_SHARD2_NO_TOKEN && h->eot_id >= h->vocab)
        return dt_errorf(err, DT_EINVAL, "%s: token shard end-of-text id %u is outside its vocab of %llu", path,
                         h->eot_id, (unsigned long long)h->vocab);
    /* the counts bound the file: overflow-free since count <= file_bytes is checked first */
    if (h->count > file_bytes || dt_shard2_file_bytes(h) != file_bytes)
        return dt_errorf(err, DT_EINVAL,
                         "%s: truncated token shard: the header says %llu tokens (%llu bytes) but the file has %llu bytes",
                         path, (unsigned long long)h->count,
                         (unsigned long long)(h->count > file_bytes ? 0 : dt_shard2_file_bytes(h)),
                         (unsigned long long)file_bytes);
    return DT_OK;
}

int dt_shard2_check_payload(const void *file, const dt_shard_header *h, const char *path, dt_error *err) {
    uint64_t n = dt_shard2_file_bytes(h) - DT_SHARD2_HEADER_BYTES;
    uint32_t crc = dt_crc32c(0, (const unsigned char *)file + DT_SHARD2_HEADER_BYTES, (size_t)n);
    if (crc != h->payload_crc)
        return dt_errorf(err, DT_EINVAL,
                         "%s: damaged token shard: the tokens' CRC-32C is %08x, the header says %08x", path, crc,
                         h->payload_crc);
    return DT_OK;
}

/* ---------------------------------------------------------------- the writer */

struct dt_shard_writer {
    char path[4096], tmp[4096 + 8];
    FILE *f;
    dt_shard_header h;
    uint8_t *mask;          /* bits, grown as tokens come */
    size_t mask_cap;
    uint32_t crc;           /* of the tokens so far */
    unsigned char *buf;     /* SHARD_WRITE_CHUNK_TOKENS tokens, encoded */
};

int dt_shard_writer_open(const char *path, const dt_shard_header *h, dt_shard_writer **out, dt_error *err) {
    *out = NULL;
    if ((h->token_bytes != 2 && h->token_bytes != 4) || h->vocab == 0 ||
        (h->token_bytes == 2 && h->vocab > DT_SHARD2_U16_VOCAB))
        return dt_errorf(err, DT_EINTERNAL, "%s: shard writer given %u-byte tokens for vocab %llu", path,
                         h->token_bytes, (unsigned long long)h->vocab);
    dt_shard_writer *w = calloc(1, sizeof *w);
    if (!w) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    if (strlen(path) >= sizeof w->path) {
        free(w);
        return dt_errorf(err, DT_EINVAL, "%s: path too long", path);
    }
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    w->h = *h;
    w->h.count = 0;
    w->h.docs = 0;
    w->buf = malloc((size_t)SHARD_WRITE_CHUNK_TOKENS * 4);
    w->f = w->buf ? fopen(w->tmp, "wb") : NULL;
    if (!w->f) {
        int e = errno;
        free(w->buf);
        free(w);
        return e == ENOMEM ? dt_errorf(err, DT_ENOMEM, "%s: out of memory", path)
                           : dt_errorf(err, DT_EIO, "%s.tmp: cannot create: %s", path, strerror(e));
    }
    /* the header's place: zeros now, the real one at close */
    unsigned char zero[DT_SHARD2_HEADER_BYTES] = {0};
    if (fwrite(zero, 1, sizeof zero, w->f) != sizeof zero) {
        int e = errno;
        dt_shard_writer_abort(w);
        return dt_errorf(err, DT_EIO, "%s.tmp: cannot write: %s", path, strerror(e));
    }
    *out = w;
    return DT_OK;
}

uint64_t dt_shard_writer_count(const dt_shard_writer *w) { return w->h.count; }

int dt_shard_writer_put(dt_shard_writer *w, const int32_t *ids, const uint8_t *mask, size_t n, uint64_t docs,
                        dt_error *err) {
    const int has_mask = (w->h.flags & DT_SHARD2_FLAG_MASK) != 0;
    if (has_mask) {
        size_t need = (size_t)mask_bytes(w->h.count + n);
        if (need > w->mask_cap) {
            size_t cap = w->mask_cap ? w->mask_cap : 4096;
            while (cap < need) cap *= 2;
            uint8_t *nm = realloc(w->mask, cap);
            if (!nm) return dt_errorf(err, DT_ENOMEM, "%s: out of memory for the loss mask", w->path);
            memset(nm + w->mask_cap, 0, cap - w->mask_cap);
            w->mask = nm;
            w->mask_cap = cap;
        }
    }
    for (size_t i = 0; i < n;) {
        size_t k = n - i < SHARD_WRITE_CHUNK_TOKENS ? n - i : SHARD_WRITE_CHUNK_TOKENS;
        for (size_t j = 0; j < k; j++) {
            int32_t id = ids[i + j];
            if (id < 0 || (uint64_t)id >= w->h.vocab)
                return dt_errorf(err, DT_EINTERNAL, "%s: token %d outside the vocab of %llu", w->path, (int)id,
                                 (unsigned long long)w->h.vocab);
            if (w->h.token_bytes == 2) {
                w->buf[2 * j] = (unsigned char)id;
                w->buf[2 * j + 1] = (unsigned char)(id >> 8);
            } else {
                put32(w->buf + 4 * j, (uint32_t)id);
            }
            uint64_t pos = w->h.count + i + j;
            if (has_mask && (!mask || mask[i + j])) w->mask[pos >> 3] |= (uint8_t)(1u << (pos & 7));
        }
        size_t bytes = k * w->h.token_bytes;
        if (fwrite(w->buf, 1, bytes, w->f) != bytes)
            return dt_errorf(err, DT_EIO, "%s: cannot write: %s", w->tmp, strerror(errno));
        w->crc = dt_crc32c(w->crc, w->buf, bytes);
        i += k;
    }
    w->h.count += n;
    w->h.docs += docs;
    return DT_OK;
}

void dt_shard_writer_abort(dt_shard_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    unlink(w->tmp);
    free(w->mask);
    free(w->buf);
    free(w);
}

int dt_shard_writer_close(dt_shard_writer *w, dt_error *err) {
    int rc = DT_OK;
    uint32_t crc = w->crc;
    if (w->h.flags & DT_SHARD2_FLAG_MASK) {
        size_t mb = (size_t)mask_bytes(w->h.count);
        if (mb && fwrite(w->mask, 1, mb, w->f) != mb)
            rc = dt_errorf(err, DT_EIO, "%s: cannot write: %s", w->tmp, strerror(errno));
        if (mb) crc = dt_crc32c(crc, w->mask, mb);
    }
    w->h.payload_crc = crc;
    unsigned char hb[DT_SHARD2_HEADER_BYTES];
    encode_header(&w->h, hb);
    if (!rc && (fflush(w->f) != 0 || fseek(w->f, 0, SEEK_SET) != 0 || fwrite(hb, 1, sizeof hb, w->f) != sizeof hb ||
                fflush(w->f) != 0 || fsync(fileno(w->f)) != 0))
        rc = dt_errorf(err, DT_EIO, "%s: cannot write: %s", w->tmp, strerror(errno));
    int cl = fclose(w->f);
    w->f = NULL;
    if (!rc && cl != 0) rc = dt_errorf(err, DT_EIO, "%s: cannot write: %s", w->tmp, strerror(errno));
    if (!rc && rename(w->tmp, w->path) != 0)
        rc = dt_errorf(err, DT_EIO, "%s: cannot rename into place: %s", w->path, strerror(errno));
    if (rc) {
        dt_shard_writer_abort(w);
        return rc;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", w->path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    rc = dt_fsync_dir(slash ? (dir[0] ? dir : "/") : ".", err);
    free(w->mask);
    free(w->buf);
    free(w);
    return rc;
}

int dt_shard2_write(const char *path, const dt_shard_header *h, const int32_t *ids, const uint8_t *mask,
                    size_t n, dt_error *err) {
    dt_shard_writer *w;
    int rc = dt_shard_writer_open(path, h, &w, err);
    if (rc) return rc;
    if ((rc = dt_shard_writer_put(w, ids, mask, n, h->docs, err))) {
        dt_shard_writer_abort(w);
        return rc;
    }
    return dt_shard_writer_close(w, err);
}
