/* safetensors.c — see dt_safetensors.h. */
#include "dt_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_crc32c.h"
#include "dt_json.h"

#define DT_ST_LEN_BYTES 8   /* the u64 header length prefix */
#define DT_ST_ALIGN 8       /* writers pad the header to this (reference writer) */
#define DT_ST_MAX_EXACT ((uint64_t)1 << 53)   /* JSON numbers are doubles: larger ones are not exact */

struct dt_st_file {
    char path[1024];
    void *map;
    size_t size;
    const unsigned char *data;   /* start of the byte buffer */
    dt_st_tensor *t;
    int n;
    char **meta_k, **meta_v;
    int n_meta;
};

int dt_st_dtype_bytes(const char *s) {
    static const struct { const char *name; int bytes; } tab[] = {
        {"F64", 8}, {"I64", 8}, {"U64", 8}, {"C64", 8}, {"F32", 4}, {"I32", 4}, {"U32", 4},
        {"F16", 2}, {"BF16", 2}, {"I16", 2}, {"U16", 2}, {"I8", 1}, {"U8", 1}, {"BOOL", 1},
        {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"F8_E4M3FNUZ", 1}, {"F8_E5M2FNUZ", 1}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(tab[i].name, s) == 0) return tab[i].bytes;
    return 0;
}

const char *dt_st_dtype_name(dt_dtype t) {
    switch (t) {
    case DT_DTYPE_BF16: return "BF16";
    case DT_DTYPE_FP16: return "F16";
    default: return "F32";
    }
}

int dt_st_dtype_parse(const char *s, dt_dtype *out) {
    if (strcmp(s, "F32") == 0) *out = DT_DTYPE_FP32;
    else if (strcmp(s, "BF16") == 0) *out = DT_DTYPE_BF16;
    else if (strcmp(s, "F16") == 0) *out = DT_DTYPE_FP16;
    else return DT_EINVAL;
    return DT_OK;
}

uint64_t dt_st_numel(const dt_st_tensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

/* numel x eb of a parsed tensor, or 0 with *overflow set when it exceeds 2^53
 * (no file that size exists; it would also wrap uint64 arithmetic). */
static uint64_t tensor_bytes(const dt_st_tensor *t, int eb, int *overflow) {
    uint64_t n = (uint64_t)eb;
    *overflow = 0;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t k = (uint64_t)t->shape[d];
        if (k && n > DT_ST_MAX_EXACT / k) {
            *overflow = 1;
            return 0;
        }
        n *= k;
    }
    return n;
}

static int by_begin(const void *a, const void *b) {
    const dt_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int parse_header(dt_st_file *f, const char *json, dt_error *err) {
    cJSON *root;
    if (dt_json_parse(json, f->path, &root, err)) return err->code;
    int rc = DT_OK;
    if (!cJSON_IsObject(root)) {
        rc = dt_errorf(err, DT_EINVAL, "%s: safetensors header is not a JSON object", f->path);
        goto done;
    }
    int n = 0;
    for (cJSON *e = root->child; e; e = e->next) n++;
    f->t = calloc((size_t)n + 1, sizeof *f->t);
    if (!f->t) {
        rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory for %d tensor entries", f->path, n);
        goto done;
    }
    for (cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e)) {
                rc = dt_errorf(err, DT_EINVAL, "%s: __metadata__ must be an object of strings", f->path);
                goto done;
            }
            int m = 0;
            for (cJSON *k = e->child; k; k = k->next) m++;
            f->meta_k = calloc((size_t)m + 1, sizeof *f->meta_k);
            f->meta_v = calloc((size_t)m + 1, sizeof *f->meta_v);
            if (!f->meta_k || !f->meta_v) {
                rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory for __metadata__", f->path);
                goto done;
            }
            for (cJSON *k = e->child; k; k = k->next) {
                if (!cJSON_IsString(k)) {
                    rc = dt_errorf(err, DT_EINVAL, "%s: __metadata__.%s must be a string", f->path,
                                   k->string);
                    goto done;
                }
                f->meta_k[f->n_meta] = strdup(k->string);
                f->meta_v[f->n_meta] = strdup(k->valuestring);
                if (!f->meta_k[f->n_meta++] || !f->meta_v[f->n_meta - 1]) {
                    rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory for __metadata__", f->path);
                    goto done;
                }
            }
            continue;
        }
        dt_st_tensor *t = &f->t[f->n];
        if (strlen(e->string) >= DT_ST_NAME_MAX) {
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor name longer than %d bytes", f->path, DT_ST_NAME_MAX - 1);
            goto done;
        }
        snprintf(t->name, sizeof t->name, "%s", e->string);
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) ||
            cJSON_GetArraySize(of) != 2) {
            rc = dt_errorf(err, DT_EINVAL,
                           "%s: tensor \"%s\" needs \"dtype\" (string), \"shape\" (array) and "
                           "\"data_offsets\" ([begin, end])", f->path, t->name);
            goto done;
        }
        int eb = dt_st_dtype_bytes(dt->valuestring);
        if (!eb) {
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\": unknown dtype \"%s\"", f->path, t->name,
                           dt->valuestring);
            goto done;
        }
        snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);
        t->ndim = cJSON_GetArraySize(sh);
        if (t->ndim > DT_ST_MAX_DIMS) {
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" has %d dims (max %d)", f->path, t->name,
                           t->ndim, DT_ST_MAX_DIMS);
            goto done;
        }
        int d = 0;
        for (cJSON *s = sh->child; s; s = s->next, d++) {
            if (!cJSON_IsNumber(s) || !(s->valuedouble >= 0 && s->valuedouble <= (double)DT_ST_MAX_EXACT) ||
                s->valuedouble != (double)(int64_t)s->valuedouble) {
                rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\": shape entries must be integers >= 0",
                               f->path, t->name);
                goto done;
            }
            t->shape[d] = (int64_t)s->valuedouble;
        }
        cJSON *b = cJSON_GetArrayItem(of, 0), *en = cJSON_GetArrayItem(of, 1);
        if (!cJSON_IsNumber(b) || !cJSON_IsNumber(en) || !(b->valuedouble >= 0) ||
            !(en->valuedouble >= b->valuedouble) || en->valuedouble > (double)DT_ST_MAX_EXACT ||
            b->valuedouble != (double)(int64_t)b->valuedouble || en->valuedouble != (double)(int64_t)en->valuedouble) {
            rc = dt_errorf(err, DT_EINVAL,
                           "%s: tensor \"%s\": data_offsets must be integers [begin, end] with 0 <= begin <= end",
                           f->path, t->name);
            goto done;
        }
        t->begin = (uint64_t)b->valuedouble;
        t->end = (uint64_t)en->valuedouble;
        int overflow;
        uint64_t need = tensor_bytes(t, eb, &overflow);
        if (overflow || t->end - t->begin != need) {
            rc = dt_errorf(err, DT_EINVAL,
                           "%s: tensor \"%s\": data_offsets span %llu bytes but shape x %s needs %s%llu",
                           f->path, t->name, (unsigned long long)(t->end - t->begin), t->dtype,
                           overflow ? "more than " : "", overflow ? (unsigned long long)DT_ST_MAX_EXACT
                                                                  : (unsigned long long)need);
            goto done;
        }
        f->n++;
    }
done:
    cJSON_Delete(root);
    return rc;
}

int dt_st_open(const char *path, dt_st_file **out, dt_error *err) {
    *out = NULL;
    int fd;
    uint64_t fsize = 0;
    if (dt_file_open_regular(path, "safetensors file", &fd, &fsize, err)) return err->code;
    dt_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    }
    snprintf(f->path, sizeof f->path, "%s", path);
    f->size = (size_t)fsize;
    int rc = DT_OK;
    if (f->size < DT_ST_LEN_BYTES) {
        close(fd);
        rc = dt_errorf(err, DT_EINVAL, "%s: not a safetensors file: %zu bytes, shorter than the 8-byte header length",
                       path, f->size);
        goto fail;
    }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        rc = dt_errorf(err, DT_EIO, "%s: cannot map: %s", path, strerror(errno));
        goto fail;
    }
    uint64_t n = 0;
    memcpy(&n, f->map, sizeof n);   /* little-endian host (x86-64, aarch64) */
    if (n > DT_ST_HEADER_MAX || n > f->size - DT_ST_LEN_BYTES) {
        rc = dt_errorf(err, DT_EINVAL,
                       "%s: not a safetensors file: header length %llu exceeds the file (%zu bytes) "
                       "or the 100 MB limit", path, (unsigned long long)n, f->size);
        goto fail;
    }
    char *json = malloc(n + 1);
    if (!json) {
        rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory for a %llu-byte header", path, (unsigned long long)n);
        goto fail;
    }
    memcpy(json, (char *)f->map + DT_ST_LEN_BYTES, n);
    json[n] = '\0';
    rc = parse_header(f, json, err);
    free(json);
    if (rc) goto fail;
    f->data = (const unsigned char *)f->map + DT_ST_LEN_BYTES + n;
    /* tensors must tile the buffer from 0, no holes or overlaps */
    dt_st_tensor *sorted = malloc(((size_t)f->n + 1) * sizeof *sorted);
    if (!sorted) {
        rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    memcpy(sorted, f->t, (size_t)f->n * sizeof *sorted);
    if (f->n > 1) qsort(sorted, (size_t)f->n, sizeof *sorted, by_begin);
    uint64_t pos = 0;
    for (int i = 0; i < f->n && !rc; i++) {
        if (sorted[i].begin != pos)
            rc = dt_errorf(err, DT_EINVAL,
                           "%s: tensor \"%s\" starts at byte %llu but the previous one ends at %llu "
                           "(hole or overlap)", path, sorted[i].name,
                           (unsigned long long)sorted[i].begin, (unsigned long long)pos);
        pos = sorted[i].end;
    }
    free(sorted);
    if (!rc && DT_ST_LEN_BYTES + n + pos != f->size)
        rc = dt_errorf(err, DT_EINVAL,
                       "%s: the header describes %llu bytes of tensor data but the file holds %llu "
                       "(truncated or trailing bytes)", path, (unsigned long long)pos,
                       (unsigned long long)(f->size - DT_ST_LEN_BYTES - n));
    if (rc) goto fail;
    *out = f;
    return DT_OK;
fail:
    dt_st_close(f);
    return rc;
}

void dt_st_close(dt_st_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->size);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_k[i]);
        free(f->meta_v[i]);
    }
    free(f->meta_k);
    free(f->meta_v);
    free(f->t);
    free(f);
}

int dt_st_count(const dt_st_file *f) { return f->n; }
const dt_st_tensor *dt_st_get(const dt_st_file *f, int i) { return i >= 0 && i < f->n ? &f->t[i] : NULL; }

const dt_st_tensor *dt_st_find(const dt_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const void *dt_st_data(const dt_st_file *f, const dt_st_tensor *t) { return f->data + t->begin; }

const char *dt_st_metadata(const dt_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_k[i], key) == 0) return f->meta_v[i];
    return NULL;
}

/* ---- writer ---- */

typedef struct {
    dt_st_tensor t;
    const void *data;
} dt_st_entry;

struct dt_st_writer {
    dt_st_entry *e;
    int n, cap;
    cJSON *meta;
    void **own;       /* copies the writer keeps (dt_st_writer_add_copy), freed with it */
    int nown;
};

dt_st_writer *dt_st_writer_new(void) {
    dt_st_writer *w = calloc(1, sizeof *w);
    if (w) w->meta = cJSON_CreateObject();
    return w;
}

void dt_st_writer_free(dt_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->nown; i++) free(w->own[i]);
    free(w->own);
    free(w->e);
    cJSON_Delete(w->meta);
    free(w);
}

int dt_st_writer_add(dt_st_writer *w, const char *name, const char *dtype, int ndim,
                     const int64_t *shape, const void *data, dt_error *err) {
    int eb = dt_st_dtype_bytes(dtype);
    if (!eb) return dt_errorf(err, DT_EINVAL, "safetensors: unknown dtype \"%s\"", dtype);
    if (ndim < 0 || ndim > DT_ST_MAX_DIMS || strlen(name) >= DT_ST_NAME_MAX)
        return dt_errorf(err, DT_EINVAL, "safetensors: tensor \"%s\": bad rank or name", name);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->e[i].t.name, name) == 0)
            return dt_errorf(err, DT_EINVAL, "safetensors: duplicate tensor \"%s\"", name);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        dt_st_entry *ne = realloc(w->e, (size_t)w->cap * sizeof *ne);
        if (!ne) return dt_errorf(err, DT_ENOMEM, "safetensors: out of memory");
        w->e = ne;
    }
    dt_st_entry *e = &w->e[w->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->t.name, sizeof e->t.name, "%s", name);
    snprintf(e->t.dtype, sizeof e->t.dtype, "%s", dtype);
    e->t.ndim = ndim;
    for (int d = 0; d < ndim; d++) e->t.shape[d] = shape[d];
    e->data = data;
    return DT_OK;
}

int dt_st_writer_add_copy(dt_st_writer *w, const char *name, const char *dtype, int ndim, const int64_t *shape,
                          const void *data, size_t bytes, dt_error *err) {
    void **own = realloc(w->own, sizeof *own * (size_t)(w->nown + 1));
    if (!own) return dt_errorf(err, DT_ENOMEM, "safetensors: out of memory");
    w->own = own;
    void *copy = malloc(bytes ? bytes : 1);
    if (!copy) return dt_errorf(err, DT_ENOMEM, "safetensors: out of memory");
    memcpy(copy, data, bytes);
    w->own[w->nown++] = copy;
    return dt_st_writer_add(w, name, dtype, ndim, shape, copy, err);
}

int dt_st_writer_meta(dt_st_writer *w, const char *key, const char *value, dt_error *err) {
    cJSON_DeleteItemFromObjectCaseSensitive(w->meta, key);
    if (!cJSON_AddStringToObject(w->meta, key, value))
        return dt_errorf(err, DT_ENOMEM, "safetensors: out of memory");
    return DT_OK;
}

static int by_align_desc(const void *a, const void *b) {
    const dt_st_entry *x = a, *y = b;
    int bx = dt_st_dtype_bytes(x->t.dtype), by = dt_st_dtype_bytes(y->t.dtype);
    if (bx != by) return by - bx;
    return strcmp(x->t.name, y->t.name);
}

/* Lays the tensors out (the reference writer's order: descending dtype
 * alignment, then name; offsets tile the buffer from 0) and returns the length
 * prefix + padded JSON header in *hdr (malloc'd), its length in *hlen. */
static int build_header(dt_st_writer *w, char **hdr, size_t *hlen, dt_error *err) {
    if (w->n > 1) qsort(w->e, (size_t)w->n, sizeof *w->e, by_align_desc);
    cJSON *root = cJSON_CreateObject();
    if (cJSON_GetArraySize(w->meta) > 0)
        cJSON_AddItemToObject(root, "__metadata__", cJSON_Duplicate(w->meta, 1));
    uint64_t pos = 0;
    for (int i = 0; i < w->n; i++) {
        dt_st_tensor *t = &w->e[i].t;
        t->begin = pos;
        t->end = pos + dt_st_numel(t) * (uint64_t)dt_st_dtype_bytes(t->dtype);
        pos = t->end;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "dtype", t->dtype);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
        cJSON *of = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)t->begin));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)t->end));
        cJSON_AddItemToObject(root, t->name, o);
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) return dt_errorf(err, DT_ENOMEM, "safetensors: out of memory");
    size_t jl = strlen(json);
    size_t padded = (jl + DT_ST_ALIGN - 1) / DT_ST_ALIGN * DT_ST_ALIGN;
    char *h = malloc(DT_ST_LEN_BYTES + padded);
    if (!h) {
        free(json);
        return dt_errorf(err, DT_ENOMEM, "safetensors: out of memory");
    }
    uint64_t n = padded;
    memcpy(h, &n, sizeof n);
    memcpy(h + DT_ST_LEN_BYTES, json, jl);
    memset(h + DT_ST_LEN_BYTES + jl, ' ', padded - jl);
    free(json);
    *hdr = h;
    *hlen = DT_ST_LEN_BYTES + padded;
    return DT_OK;
}

int dt_st_write(dt_st_writer *w, const char *path, dt_error *err) { return dt_st_write_sum(w, path, NULL, err); }

int dt_st_write_sum(dt_st_writer *w, const char *path, dt_file_sum *sum, dt_error *err) {
    char *hdr;
    size_t hlen;
    int rc = build_header(w, &hdr, &hlen, err);
    if (rc) return rc;
    int nc = w->n + 1;
    const void **ptr = malloc((size_t)nc * sizeof *ptr);
    size_t *len = malloc((size_t)nc * sizeof *len);
    if (!ptr || !len) {
        free(ptr);
        free(len);
        free(hdr);
        return dt_errorf(err, DT_ENOMEM, "safetensors: out of memory");
    }
    ptr[0] = hdr;
    len[0] = hlen;
    for (int i = 0; i < w->n; i++) {
        ptr[i + 1] = w->e[i].data;
        len[i + 1] = (size_t)(w->e[i].t.end - w->e[i].t.begin);
    }
    rc = dt_file_write_chunks_atomic_sum(path, ptr, len, nc, sum, err);
    free(ptr);
    free(len);
    free(hdr);
    return rc;
}

/* ---- streaming writer ---- */

struct dt_st_stream {
    dt_st_writer *w;       /* the layout (sorted, offsets set) */
    int fd;
    uint64_t data_at;      /* file offset of the byte buffer */
    uint64_t written;      /* tensor bytes put so far */
    uint64_t total;        /* tensor bytes the layout holds */
    uint64_t *done;        /* [w->n] bytes of each tensor put so far (puts go in order) */
    uint32_t crc;          /* CRC-32C of the file's bytes [0, crc_to) */
    uint64_t crc_to;       /* puts landing exactly here extend crc; close reads back the rest */
    char path[2048], tmp[2048];
};

int dt_st_stream_open(dt_st_writer *w, const char *path, dt_st_stream **out, dt_error *err) {
    *out = NULL;
    dt_st_stream *s = calloc(1, sizeof *s);
    if (!s) return dt_errorf(err, DT_ENOMEM, "safetensors: out of memory");
    char *hdr;
    size_t hlen;
    int rc = build_header(w, &hdr, &hlen, err);
    if (rc) {
        free(s);
        return rc;
    }
    s->w = w;
    s->done = calloc(w->n ? (size_t)w->n : 1, sizeof *s->done);
    if (!s->done) {
        free(hdr);
        free(s);
        return dt_errorf(err, DT_ENOMEM, "safetensors: out of memory");
    }
    s->data_at = hlen;
    s->total = w->n ? w->e[w->n - 1].t.end : 0;
    snprintf(s->path, sizeof s->path, "%s", path);
    snprintf(s->tmp, sizeof s->tmp, "%s.tmp", path);
    s->fd = open(s->tmp, O_RDWR | O_CREAT | O_TRUNC, 0644);   /* read back by the checksum */
    if (s->fd < 0) {
        rc = dt_errorf(err, DT_EIO, "%s: cannot create: %s", s->tmp, strerror(errno));
        free(hdr);
        free(s->done);
        free(s);
        return rc;
    }
    ssize_t k = pwrite(s->fd, hdr, hlen, 0);
    if (k > 0 && (size_t)k == hlen) {
        s->crc = dt_crc32c(0, hdr, hlen);
        s->crc_to = hlen;
    }
    free(hdr);
    if (k < 0 || (size_t)k != hlen) {
        rc = dt_errorf(err, DT_EIO, "%s: cannot write the header: %s", s->tmp, k < 0 ? strerror(errno) : "short write");
        dt_st_stream_abort(s);
        return rc;
    }
    *out = s;
    return DT_OK;
}

int dt_st_stream_put(dt_st_stream *s, const char *name, uint64_t off, const void *data, size_t len, dt_error *err) {
    const dt_st_tensor *t = NULL;
    int ti = -1;
    for (int i = 0; i < s->w->n && !t; i++)
        if (strcmp(s->w->e[i].t.name, name) == 0) t = &s->w->e[(ti = i)].t;
    if (!t) return dt_errorf(err, DT_EINVAL, "safetensors: tensor \"%s\" is not in the layout", name);
    /* in order within a tensor, so every byte is put exactly once and close's count proves it */
    if (off != s->done[ti])
        return dt_errorf(err, DT_EINVAL, "safetensors: tensor \"%s\": put at byte %llu, expected %llu (in order)",
                         name, (unsigned long long)off, (unsigned long long)s->done[ti]);
    if (off > t->end - t->begin || len > t->end - t->begin - off)
        return dt_errorf(err, DT_EINVAL, "safetensors: tensor \"%s\": bytes [%llu, %llu) outside its %llu", name,
                         (unsigned long long)off, (unsigned long long)(off + len),
                         (unsigned long long)(t->end - t->begin));
    const char *p = data;
    uint64_t at = s->data_at + t->begin + off;
    if (at == s->crc_to) {   /* in file order: summed now, not read back at close */
        s->crc = dt_crc32c(s->crc, data, len);
        s->crc_to += len;
    }
    while (len > 0) {
        ssize_t k = pwrite(s->fd, p, len, (off_t)at);
        if (k <= 0) return dt_errorf(err, DT_EIO, "%s: cannot write: %s", s->tmp, k < 0 ? strerror(errno) : "no progress");
        p += k;
        at += (uint64_t)k;
        len -= (size_t)k;
        s->written += (uint64_t)k;
        s->done[ti] += (uint64_t)k;
    }
    return DT_OK;
}

int dt_st_stream_close(dt_st_stream *s, dt_error *err) { return dt_st_stream_close_sum(s, NULL, err); }

int dt_st_stream_close_sum(dt_st_stream *s, dt_file_sum *sum, dt_error *err) {
    int rc = DT_OK;
    if (s->written != s->total)
        rc = dt_errorf(err, DT_EINVAL, "%s: %llu of %llu tensor bytes were written", s->path,
                       (unsigned long long)s->written, (unsigned long long)s->total);
    else if (sum)
        rc = dt_file_crc32c_range(s->fd, s->crc_to, s->data_at + s->total, &s->crc, s->tmp, err);
    if (!rc) {
        int bad = fsync(s->fd) != 0, e = errno;
        if (close(s->fd) != 0 && !bad) {
            bad = 1;
            e = errno;
        }
        s->fd = -1;
        if (!bad && rename(s->tmp, s->path) != 0) {
            bad = 1;
            e = errno;
        }
        if (bad) rc = dt_errorf(err, DT_EIO, "%s: cannot write: %s", s->path, strerror(e));
    }
    if (rc) {
        dt_st_stream_abort(s);
        return rc;
    }
    if (sum) {
        sum->bytes = s->data_at + s->total;
        sum->crc32c = s->crc;
    }
    char dir[2048];
    dt_file_parent_dir(s->path, dir, sizeof dir);
    free(s->done);
    free(s);
    return dt_fsync_dir(dir, err);
}

void dt_st_stream_abort(dt_st_stream *s) {
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    unlink(s->tmp);
    free(s->done);
    free(s);
}

