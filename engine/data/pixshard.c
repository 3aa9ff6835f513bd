/* pixshard.c — pixel shards and the vision-language loader (dt_pixshard.h). */
#include "dt_pixshard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dt_crc32c.h"
#include "dt_file.h"
#include "dt_json.h"

#define PATH_BYTES 4096
#define PIX_CHANNELS 3

/* ---------------------------------------------------------------- the header */

static void put32(uint8_t *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *b) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | b[i];
    return v;
}
static uint64_t get64(const uint8_t *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}
static void putf32(uint8_t *b, float f) {
    uint32_t v;
    memcpy(&v, &f, 4);
    put32(b, v);
}
static float getf32(const uint8_t *b) {
    uint32_t v = get32(b);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

static uint64_t image_bytes(const dt_pix_header *h) { return (uint64_t)PIX_CHANNELS * h->height * h->width; }

static void encode_header(const dt_pix_header *h, uint8_t *b) {
    memset(b, 0, DT_PIX_HEADER_BYTES);
    memcpy(b, DT_PIX_MAGIC, 4);
    put32(b + 4, DT_PIX_VERSION);
    put32(b + 8, DT_PIX_HEADER_BYTES);
    put32(b + 12, PIX_CHANNELS);
    put32(b + 16, h->height);
    put32(b + 20, h->width);
    put32(b + 24, h->split);
    put32(b + 28, h->shard_index);
    put64(b + 32, h->docs);
    put64(b + 40, h->images);
    put64(b + 48, h->prepare_id);
    put32(b + 56, h->image_token_id);
    put32(b + 60, h->image_tokens);
    for (int c = 0; c < 3; c++) {
        putf32(b + 64 + 4 * c, h->mean[c]);
        putf32(b + 76 + 4 * c, h->std[c]);
    }
    uint64_t r;
    memcpy(&r, &h->rescale, 8);
    put64(b + 88, r);
    put32(b + 96, h->flags);
    put32(b + 100, h->payload_crc);
    put32(b + DT_PIX_CRC_SPAN, dt_crc32c(0, b, DT_PIX_CRC_SPAN));
}

/* the header's fields and the file size they imply */
static int parse_header(const uint8_t *b, uint64_t file_bytes, const char *path, dt_pix_header *h, dt_error *err) {
    if (file_bytes < DT_PIX_HEADER_BYTES)
        return dt_errorf(err, DT_EINVAL, "%s: truncated pixel shard: %llu bytes, shorter than the %d-byte header",
                         path, (unsigned long long)file_bytes, DT_PIX_HEADER_BYTES);
    if (memcmp(b, DT_PIX_MAGIC, 4)) return dt_errorf(err, DT_EINVAL, "%s: not a pixel shard (no \"DTPX\" magic)", path);
    if (get32(b + 4) != DT_PIX_VERSION || get32(b + 8) != DT_PIX_HEADER_BYTES || get32(b + 12) != PIX_CHANNELS)
        return dt_errorf(err, DT_EINVAL, "%s: pixel shard version %u (header %u bytes, %u channels); this dtrun reads "
                         "version %d: prepare the data again", path, get32(b + 4), get32(b + 8), get32(b + 12),
                         DT_PIX_VERSION);
    if (get32(b + DT_PIX_CRC_SPAN) != dt_crc32c(0, b, DT_PIX_CRC_SPAN))
        return dt_errorf(err, DT_EINVAL, "%s: pixel shard header CRC mismatch (the file is damaged)", path);
    memset(h, 0, sizeof *h);
    h->height = get32(b + 16);
    h->width = get32(b + 20);
    h->split = get32(b + 24);
    h->shard_index = get32(b + 28);
    h->docs = get64(b + 32);
    h->images = get64(b + 40);
    h->prepare_id = get64(b + 48);
    h->image_token_id = get32(b + 56);
    h->image_tokens = get32(b + 60);
    for (int c = 0; c < 3; c++) {
        h->mean[c] = getf32(b + 64 + 4 * c);
        h->std[c] = getf32(b + 76 + 4 * c);
    }
    uint64_t r = get64(b + 88);
    memcpy(&h->rescale, &r, 8);
    h->flags = get32(b + 96);
    h->payload_crc = get32(b + 100);
    for (int i = DT_PIX_CRC_SPAN + 4; i < DT_PIX_HEADER_BYTES; i++)
        if (b[i]) return dt_errorf(err, DT_EINVAL, "%s: pixel shard header byte %d is not zero", path, i);
    const uint32_t side_max = 1u << 14;
    if (h->height < 1 || h->width < 1 || h->height > side_max || h->width > side_max || h->split > 1 ||
        (h->flags & ~(DT_PIX_FLAG_PAD | DT_PIX_FLAG_LOAD_IMAGE)) || h->images > h->docs || !(h->rescale > 0) || h->image_tokens < 1)
        return dt_errorf(err, DT_EINVAL, "%s: pixel shard header out of range (crop %ux%u, split %u, flags %u, "
                         "%llu images for %llu documents)", path, h->width, h->height, h->split, h->flags,
                         (unsigned long long)h->images, (unsigned long long)h->docs);
    const uint64_t room = file_bytes - DT_PIX_HEADER_BYTES;   /* counts bounded first: no overflow below */
    const int fits = h->docs <= room / DT_PIX_DOC_BYTES && h->images <= room / image_bytes(h);
    const uint64_t want = fits ? DT_PIX_HEADER_BYTES + h->images * image_bytes(h) + h->docs * DT_PIX_DOC_BYTES : 0;
    if (!fits || want != file_bytes)
        return dt_errorf(err, DT_EINVAL, "%s: truncated or padded pixel shard: the header says %llu images and %llu "
                         "documents (%llu bytes) but the file has %llu bytes", path, (unsigned long long)h->images,
                         (unsigned long long)h->docs, (unsigned long long)want, (unsigned long long)file_bytes);
    return DT_OK;
}

/* ---------------------------------------------------------------- the writer */

struct dt_pix_writer {
    dt_pix_header h;
    char path[PATH_BYTES], tmp[PATH_BYTES];
    int fd;
    uint32_t crc;
    dt_pix_doc *docs;
    uint64_t cap;
};

static int write_all(int fd, const void *p, size_t n, const char *path, dt_error *err) {
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return dt_errorf(err, DT_EIO, "%s: cannot write: %s", path, k < 0 ? strerror(errno) : "no progress");
        c += k;
        n -= (size_t)k;
    }
    return DT_OK;
}

int dt_pix_writer_open(const char *path, const dt_pix_header *h, dt_pix_writer **out, dt_error *err) {
    *out = NULL;
    dt_pix_writer *w = calloc(1, sizeof *w);
    if (!w) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    w->h = *h;
    w->h.docs = w->h.images = 0;
    if ((size_t)snprintf(w->path, sizeof w->path, "%s", path) >= sizeof w->path ||
        (size_t)snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path) >= sizeof w->tmp) {
        free(w);
        return dt_errorf(err, DT_EINVAL, "%s: path too long", path);
    }
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int e = errno;
        free(w);
        return dt_errorf(err, DT_EIO, "%s.tmp: cannot create: %s", path, strerror(e));
    }
    uint8_t zero[DT_PIX_HEADER_BYTES] = {0};
    int rc = write_all(w->fd, zero, sizeof zero, w->tmp, err);
    if (rc) {
        dt_pix_writer_abort(w);
        return rc;
    }
    *out = w;
    return DT_OK;
}

int dt_pix_writer_put(dt_pix_writer *w, uint64_t token_offset, uint32_t token_count, const uint8_t *crop,
                      dt_error *err) {
    if (w->h.docs == w->cap) {
        uint64_t c = w->cap ? 2 * w->cap : 1024;
        dt_pix_doc *nd = realloc(w->docs, (size_t)c * sizeof *nd);
        if (!nd) return dt_errorf(err, DT_ENOMEM, "%s: out of memory for the document table", w->path);
        w->docs = nd;
        w->cap = c;
    }
    dt_pix_doc *d = &w->docs[w->h.docs++];
    d->token_offset = token_offset;
    d->token_count = token_count;
    d->image = DT_PIX_NO_IMAGE;
    if (!crop) return DT_OK;
    if (w->h.images >= INT32_MAX) return dt_errorf(err, DT_EINVAL, "%s: more than 2^31 images in one shard", w->path);
    d->image = (int32_t)w->h.images++;
    w->crc = dt_crc32c(w->crc, crop, (size_t)image_bytes(&w->h));
    return write_all(w->fd, crop, (size_t)image_bytes(&w->h), w->tmp, err);
}

int dt_pix_writer_close(dt_pix_writer *w, dt_error *err) {
    int rc = DT_OK;
    const size_t tb = (size_t)w->h.docs * DT_PIX_DOC_BYTES;
    uint8_t *table = malloc(tb ? tb : 1);
    if (!table) rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", w->path);
    for (uint64_t i = 0; !rc && i < w->h.docs; i++) {
        uint8_t *e = table + i * DT_PIX_DOC_BYTES;
        put64(e, w->docs[i].token_offset);
        put32(e + 8, w->docs[i].token_count);
        put32(e + 12, (uint32_t)w->docs[i].image);
    }
    if (!rc) {
        w->h.payload_crc = dt_crc32c(w->crc, table, tb);
        rc = write_all(w->fd, table, tb, w->tmp, err);
    }
    uint8_t hb[DT_PIX_HEADER_BYTES];
    encode_header(&w->h, hb);
    if (!rc && pwrite(w->fd, hb, sizeof hb, 0) != (ssize_t)sizeof hb)
        rc = dt_errorf(err, DT_EIO, "%s: cannot write the header: %s", w->tmp, strerror(errno));
    if (!rc && fsync(w->fd)) rc = dt_errorf(err, DT_EIO, "%s: cannot fsync: %s", w->tmp, strerror(errno));
    free(table);
    if (!rc) {
        int c = close(w->fd);
        w->fd = -1;
        if (c) rc = dt_errorf(err, DT_EIO, "%s: cannot close: %s", w->tmp, strerror(errno));
    }
    if (!rc && rename(w->tmp, w->path)) rc = dt_errorf(err, DT_EIO, "%s: cannot rename: %s", w->tmp, strerror(errno));
    if (!rc) {
        char dir[PATH_BYTES];
        dt_file_parent_dir(w->path, dir, sizeof dir);
        rc = dt_fsync_dir(dir, err);
        w->tmp[0] = '\0';   /* nothing left to remove */
    }
    dt_pix_writer_abort(w);
    return rc;
}

void dt_pix_writer_abort(dt_pix_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->tmp[0]) unlink(w->tmp);
    free(w->docs);
    free(w);
}

/* ---------------------------------------------------------------- the loader */

typedef struct {
    void *tok_map, *pix_map;
    size_t tok_len, pix_len;
    dt_shard_header th;
    dt_pix_header ph;
    const uint8_t *images;
    const uint8_t *table;
    const uint8_t *mask;
} vlm_shard;

struct dt_vlm_data {
    vlm_shard *shards;
    int n_shards;
    uint64_t n_docs;
    uint64_t *doc_first;   /* [n_shards + 1]: documents of shard s are [doc_first[s], doc_first[s + 1]) */
    dt_clip_opts clip;
    int height, width;
};

static int map_file(const char *path, const char *what, void **map, size_t *len, dt_error *err) {
    int fd;
    uint64_t size;
    if (dt_file_open_regular(path, what, &fd, &size, err)) return err->code;
    *len = (size_t)size;
    *map = size ? mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (*map == MAP_FAILED) {
        *map = NULL;
        return dt_errorf(err, DT_EIO, "%s: cannot map: %s", path, strerror(errno));
    }
    return DT_OK;
}

static int open_pair(dt_vlm_data *d, vlm_shard *s, const char *tok_path, const char *pix_path, dt_error *err) {
    int rc = map_file(tok_path, "token shard", &s->tok_map, &s->tok_len, err);
    if (!rc) rc = map_file(pix_path, "pixel shard", &s->pix_map, &s->pix_len, err);
    if (!rc && s->tok_len < DT_SHARD2_HEADER_BYTES)
        rc = dt_errorf(err, DT_EINVAL, "%s: truncated token shard", tok_path);
    if (!rc) rc = dt_shard2_parse(s->tok_map, s->tok_len, tok_path, &s->th, err);
    if (!rc) rc = dt_shard2_check_payload(s->tok_map, &s->th, tok_path, err);
    if (!rc) rc = parse_header(s->pix_map ? s->pix_map : (const void *)"", s->pix_len, pix_path, &s->ph, err);
    if (rc) return rc;
    s->images = (const uint8_t *)s->pix_map + DT_PIX_HEADER_BYTES;
    s->table = s->images + s->ph.images * image_bytes(&s->ph);
    if (dt_crc32c(0, s->images, s->pix_len - DT_PIX_HEADER_BYTES) != s->ph.payload_crc)
        return dt_errorf(err, DT_EINVAL, "%s: pixel shard payload CRC mismatch (the file is damaged)", pix_path);
    if (s->ph.prepare_id != s->th.prepare_id || s->ph.docs != s->th.docs || s->ph.shard_index != s->th.shard_index ||
        !(s->th.flags & DT_SHARD2_FLAG_MASK))
        return dt_errorf(err, DT_EINVAL, "%s: does not belong to %s (prepare id, shard index or documents differ): "
                         "both must come from one dtrun prepare --format llava", pix_path, tok_path);
    if (d->n_shards && (s->ph.height != d->shards[0].ph.height || s->ph.width != d->shards[0].ph.width ||
                        s->ph.prepare_id != d->shards[0].ph.prepare_id))
        return dt_errorf(err, DT_EINVAL, "%s: crop size or prepare id differs from the split's first shard", pix_path);
    s->mask = (const uint8_t *)s->tok_map + DT_SHARD2_HEADER_BYTES + s->th.count * s->th.token_bytes;
    for (uint64_t i = 0; i < s->ph.docs; i++) {   /* the table within the shard */
        const uint8_t *e = s->table + i * DT_PIX_DOC_BYTES;
        const uint64_t off = get64(e), n = get32(e + 8);
        const int32_t img = (int32_t)get32(e + 12);
        if (off > s->th.count || n > s->th.count - off || n == 0 || img < DT_PIX_NO_IMAGE ||
            (img >= 0 && (uint64_t)img >= s->ph.images))
            return dt_errorf(err, DT_EINVAL, "%s: document %llu is out of range (tokens %llu + %llu of %llu, image %d)",
                             pix_path, (unsigned long long)i, (unsigned long long)off, (unsigned long long)n,
                             (unsigned long long)s->th.count, img);
    }
    return DT_OK;
}

/* the shards of split in prepare.json; the pixel shard of each is its name with .px */
static int read_manifest(const char *dir, dt_split split, cJSON **root, const cJSON **list, dt_error *err) {
    char path[PATH_BYTES], *text = NULL;
    size_t n;
    snprintf(path, sizeof path, "%s/prepare.json", dir);
    int rc = dt_json_read_file(path, &text, &n, err);
    if (!rc) rc = dt_json_parse(text, path, root, err);
    free(text);
    if (rc) return rc;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(*root, "input_format");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(*root, "splits"),
                                                       split == DT_SPLIT_TRAIN ? "train" : "val");
    *list = cJSON_GetObjectItemCaseSensitive(sp, "shards");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "llava") || !cJSON_IsArray(*list))
        return dt_errorf(err, DT_EINVAL, "%s: not the output of dtrun prepare --format llava (input_format %s)", path,
                         cJSON_IsString(fmt) ? fmt->valuestring : "missing");
    return DT_OK;
}

int dt_vlm_open(const char *dir, dt_split split, dt_vlm_data **out, dt_error *err) {
    *out = NULL;
    cJSON *root = NULL;
    const cJSON *list = NULL;
    int rc = read_manifest(dir, split, &root, &list, err);
    dt_vlm_data *d = rc ? NULL : calloc(1, sizeof *d);
    const int n = rc ? 0 : cJSON_GetArraySize(list);
    if (!rc && d) {
        d->shards = calloc((size_t)n + 1, sizeof *d->shards);
        d->doc_first = calloc((size_t)n + 1, sizeof *d->doc_first);
    }
    if (!rc && (!d || !d->shards || !d->doc_first)) rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", dir);
    if (!rc && n == 0) rc = dt_errorf(err, DT_EINVAL, "%s/prepare.json: the %s split has no shards", dir,
                                      split == DT_SPLIT_TRAIN ? "train" : "val");
    int i = 0;
    for (const cJSON *e = rc ? NULL : list->child; e && !rc; e = e->next, i++) {
        char tp[PATH_BYTES], pp[PATH_BYTES];
        const size_t k = cJSON_IsString(e) ? strlen(e->valuestring) : 0;
        if (k < 5 || strcmp(e->valuestring + k - 4, ".bin") || strstr(e->valuestring, "..") ||
            (size_t)snprintf(tp, sizeof tp, "%s/%s", dir, e->valuestring) >= sizeof tp) {
            rc = dt_errorf(err, DT_EINVAL, "%s/prepare.json: shard %d is not a .bin name inside the directory", dir, i);
            break;
        }
        snprintf(pp, sizeof pp, "%.*s.px", (int)strlen(tp) - 4, tp);
        rc = open_pair(d, &d->shards[i], tp, pp, err);
        d->n_shards = i + 1;
        if (!rc) d->doc_first[i + 1] = d->doc_first[i] + d->shards[i].ph.docs;
    }
    cJSON_Delete(root);
    if (rc) {
        dt_vlm_close(d);
        return rc;
    }
    const dt_pix_header *h = &d->shards[0].ph;
    d->n_docs = d->doc_first[d->n_shards];
    d->height = (int)h->height;
    d->width = (int)h->width;
    dt_clip_defaults(&d->clip, d->height);
    d->clip.crop_width = d->width;
    memcpy(d->clip.mean, h->mean, sizeof h->mean);
    memcpy(d->clip.std, h->std, sizeof h->std);
    d->clip.rescale = h->rescale;
    if (d->n_docs == 0) {
        dt_vlm_close(d);
        return dt_errorf(err, DT_EINVAL, "%s: the split has no documents", dir);
    }
    *out = d;
    return DT_OK;
}

void dt_vlm_close(dt_vlm_data *d) {
    if (!d) return;
    for (int i = 0; i < d->n_shards; i++) {
        if (d->shards[i].tok_map) munmap(d->shards[i].tok_map, d->shards[i].tok_len);
        if (d->shards[i].pix_map) munmap(d->shards[i].pix_map, d->shards[i].pix_len);
    }
    free(d->shards);
    free(d->doc_first);
    free(d);
}

uint64_t dt_vlm_docs(const dt_vlm_data *d) { return d->n_docs; }

void dt_vlm_image_size(const dt_vlm_data *d, int *height, int *width) {
    *height = d->height;
    *width = d->width;
}

static uint32_t token_at(const vlm_shard *s, uint64_t i) {
    const uint8_t *p = (const uint8_t *)s->tok_map + DT_SHARD2_HEADER_BYTES + i * s->th.token_bytes;
    return s->th.token_bytes == 2 ? (uint32_t)(p[0] | p[1] << 8) : get32(p);
}

/* one row: document doc (global index) */
static int fill_row(const dt_vlm_data *d, uint64_t doc, int t, int32_t *tokens, int32_t *labels, float *pixels,
                    uint8_t *has_image, dt_error *err) {
    int s = 0;
    while (doc >= d->doc_first[s + 1]) s++;
    const vlm_shard *sh = &d->shards[s];
    const uint8_t *e = sh->table + (doc - d->doc_first[s]) * DT_PIX_DOC_BYTES;
    const uint64_t off = get64(e), n = get32(e + 8);
    const int32_t img = (int32_t)get32(e + 12);
    const uint64_t keep = n < (uint64_t)t ? n : (uint64_t)t;
    uint64_t placeholders = 0;
    for (uint64_t i = 0; i < (uint64_t)t; i++) {
        if (i >= keep) {
            tokens[i] = (int32_t)sh->th.eot_id;
            labels[i] = DT_LABEL_IGNORE;
            continue;
        }
        tokens[i] = (int32_t)token_at(sh, off + i);
        labels[i] = dt_shard2_mask_bit(sh->mask, off + i) ? tokens[i] : DT_LABEL_IGNORE;
        placeholders += (uint32_t)tokens[i] == sh->ph.image_token_id;
    }
    const size_t plane = (size_t)d->height * d->width;
    *has_image = img >= 0;
    if (img < 0) {
        memset(pixels, 0, 3 * plane * sizeof *pixels);
        return DT_OK;
    }
    if (placeholders != sh->ph.image_tokens)
        return dt_errorf(err, DT_EINVAL, "document %llu: %llu tokens do not fit in a sequence of %d without cutting its "
                         "%u image tokens; raise the sequence length", (unsigned long long)doc,
                         (unsigned long long)n, t, sh->ph.image_tokens);
    dt_image_normalize(sh->images + (uint64_t)img * 3 * plane, plane, &d->clip, pixels);
    return DT_OK;
}

int dt_vlm_batch(dt_vlm_data *d, uint64_t first, int b, int t, int32_t *tokens, int32_t *labels, float *pixels,
                 uint8_t *has_image, dt_error *err) {
    if (b < 1 || t < 1) return dt_errorf(err, DT_EINVAL, "a batch of %d x %d tokens: both must be >= 1", b, t);
    const size_t plane = (size_t)d->height * d->width;
    for (int r = 0; r < b; r++) {
        int rc = fill_row(d, (first + (uint64_t)r) % d->n_docs, t, tokens + (size_t)r * t, labels + (size_t)r * t,
                          pixels + (size_t)r * 3 * plane, has_image + r, err);
        if (rc) return rc;
    }
    return DT_OK;
}
