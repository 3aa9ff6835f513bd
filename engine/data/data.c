/* data.c — see dt_data.h. */
#include "dt_data.h"
#include "dt_file.h"
#include "dt_sha256.h"        /* dt_sha256_hex: fingerprints in messages */
#include "dt_shard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DT_SHARD_HEADER_BYTES (DT_SHARD_HEADER_INTS * 4)
/* Other llm.c magics, named in errors so a mix-up is obvious (docs/dtrun.md "Data"):
 * a model checkpoint (llm.c train_gpt2.py write_model), llama3's uint32 shards. */
#define DT_LLMC_MODEL_MAGIC 20240326
#define DT_LLMC_LLAMA3_SHARD_MAGIC 20240801

typedef struct {
    char path[1024];
    const uint8_t *bytes;     /* text: byte tokens */
    const uint16_t *toks;     /* shard: uint16 tokens (into the mapping) */
    const uint32_t *toks32;   /* v2 shard of a vocabulary above 2^16: uint32 tokens */
    const uint8_t *mask;      /* v2 shard's loss mask bits, NULL: every target counts */
    int mapped;               /* map is an mmap (shards), else malloc'd text */
    void *map;                /* mmap base, or malloc'd text */
    size_t map_len;
    int64_t ntok;
} dt_source;

struct dt_corpus {
    dt_source *src;
    int nsrc;
    int nfiles;
    int subdirs;     /* subfolders of a data directory, not read */
    int64_t ntok;
    int has_mask;
    int has_fp;      /* a v2 shard gave fp */
    unsigned char fp[DT_SHARD2_FINGERPRINT_BYTES];
    char fp_path[1024];   /* the shard fp came from */
    int64_t vocab;   /* largest vocab a v2 shard header names (0: none) */
};

static inline int32_t src_tok(const dt_source *s, int64_t i) {
    return s->toks32 ? (int32_t)s->toks32[i] : s->toks ? s->toks[i] : s->bytes[i];
}

#define FP_SHOWN_HEX DT_FINGERPRINT_SHOWN_HEX
#define HEX_DIGIT_BITS 4
static void fp_short(const unsigned char fp[DT_SHARD2_FINGERPRINT_BYTES], char out[FP_SHOWN_HEX + 1]) {
    char hex[2 * DT_SHA256_BYTES + 1];
    dt_sha256_hex(fp, hex);
    memcpy(out, hex, FP_SHOWN_HEX);
    out[FP_SHOWN_HEX] = '\0';
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int dt_fingerprint_from_hex(const char *hex, unsigned char out[DT_SHARD2_FINGERPRINT_BYTES], dt_error *err) {
    const size_t n = 2 * DT_SHARD2_FINGERPRINT_BYTES;
    if (strlen(hex) != n)
        return dt_errorf(err, DT_EINVAL, "tokenizer fingerprint \"%s\" is not %zu hex digits", hex, n);
    for (size_t i = 0; i < DT_SHARD2_FINGERPRINT_BYTES; i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return dt_errorf(err, DT_EINVAL, "tokenizer fingerprint \"%s\" is not %zu hex digits", hex, n);
        out[i] = (unsigned char)(hi << HEX_DIGIT_BITS | lo);
    }
    return DT_OK;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* A one-name list holding path (a data file given directly). */
static int single_name(const char *path, char ***names_out, int *n_out, dt_error *err) {
    char **names = malloc(sizeof *names);
    if (names && !(names[0] = strdup(path))) {
        free(names);
        names = NULL;
    }
    if (!names) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    *names_out = names;
    *n_out = 1;
    return DT_OK;
}

/* Regular files of dir (no symlinks), sorted; suffix filters when non-NULL. */
/* The regular files of dir (not its subfolders: *subdirs counts those skipped). */
static int list_dir(const char *dir, const char *suffix, char ***names_out, int *n_out, int *subdirs,
                    dt_error *err) {
    DIR *d = opendir(dir);
    if (!d) return dt_errorf(err, DT_EINVAL, "%s: cannot open data directory: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (e->d_type == DT_DIR) {
            (*subdirs)++;
            continue;
        }
        size_t len = strlen(e->d_name);
        if (suffix) {
            size_t sl = strlen(suffix);
            if (len < sl || strcmp(e->d_name + len - sl, suffix) != 0) continue;
        }
        char full[2048];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, (size_t)cap * sizeof *names);
            if (!nn) break;
            names = nn;
        }
        if (!(names[n] = strdup(full))) break;
        n++;
    }
    int complete = e == NULL;
    closedir(d);
    if (!complete) {
        free_names(names, n);
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory listing the data directory", dir);
    }
    if (n > 1) qsort(names, (size_t)n, sizeof *names, name_cmp);
    *names_out = names;
    *n_out = n;
    return DT_OK;
}

static int open_text(dt_corpus *c, const char *path, int is_dir, int64_t vocab, dt_error *err) {
    char **names = NULL;
    int n = 0;
    if (is_dir ? list_dir(path, NULL, &names, &n, &c->subdirs, err) : single_name(path, &names, &n, err))
        return err->code;
    uint8_t *all = NULL;
    size_t total = 0;
    int used = 0, rc = DT_OK;
    for (int i = 0; i < n && rc == DT_OK; i++) {
        char *text = NULL;
        size_t len = 0;
        if ((rc = dt_file_read(names[i], "data file", (uint64_t)SIZE_MAX / 2, &text, &len, err))) break;
        uint8_t *buf = (uint8_t *)text;
        if (memchr(buf, 0, len)) {           /* binary (e.g. fortune's strfile .dat index) */
            free(buf);
            if (!is_dir)
                rc = dt_errorf(err, DT_EINVAL,
                               "%s: holds NUL bytes, so it is not text; use data.format \"llmc\" "
                               "for token shards", names[i]);
            continue;
        }
        uint8_t *na = realloc(all, total + len + 1);
        if (!na) {
            free(buf);
            rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory reading text", names[i]);
            break;
        }
        all = na;
        memcpy(all + total, buf, len);
        total += len;
        used++;
        free(buf);
    }
    free_names(names, n);
    if (rc) {
        free(all);
        return rc;
    }
    if (used == 0 || total == 0) {
        free(all);
        return dt_errorf(err, DT_EINVAL, "%s: no text found (no regular, non-binary, non-empty files)",
                         path);
    }
    if (vocab < DT_BYTE_VOCAB) {
        for (size_t i = 0; i < total; i++)
            if (all[i] >= vocab) {
                int b = all[i];
                free(all);
                return dt_errorf(err, DT_EINVAL,
                                 "%s: byte 0x%02x at offset %zu is outside the model's vocab of %lld; "
                                 "the byte tokenizer needs vocab >= 256",
                                 path, b, i, (long long)vocab);
            }
    }
    c->src = calloc(1, sizeof *c->src);
    if (!c->src) {
        free(all);
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    }
    c->nsrc = 1;
    c->nfiles = used;
    snprintf(c->src[0].path, sizeof c->src[0].path, "%s", path);
    c->src[0].bytes = all;
    c->src[0].map = all;
    c->src[0].ntok = (int64_t)total;
    c->ntok = (int64_t)total;
    return DT_OK;
}

/* A v2 shard (dt_shard.h) already mapped: header, payload CRC, the model's vocab and the
 * expected tokenizer fingerprint, and the corpus's one tokenizer. */
static int open_shard2(dt_corpus *c, dt_source *s, const dt_corpus_opts *o, dt_error *err) {
    const char *path = s->path;
    dt_shard_header h;
    int rc = dt_shard2_parse(s->map, s->map_len, path, &h, err);
    if (!rc) rc = dt_shard2_check_payload(s->map, &h, path, err);
    if (rc) return rc;
    char got[FP_SHOWN_HEX + 1], want[FP_SHOWN_HEX + 1];
    fp_short(h.fingerprint, got);
    if ((int64_t)h.vocab > o->vocab)
        return dt_errorf(err, DT_EINVAL,
                         "%s: the shard's tokenizer has a vocabulary of %llu tokens, more than the model's vocab "
                         "of %lld: prepare the data with the model's tokenizer or use a model with vocab >= %llu",
                         path, (unsigned long long)h.vocab, (long long)o->vocab, (unsigned long long)h.vocab);
    if (o->fingerprint && memcmp(o->fingerprint, h.fingerprint, DT_SHARD2_FINGERPRINT_BYTES)) {
        fp_short(o->fingerprint, want);
        if (o->fingerprint_of)
            return dt_errorf(err, DT_EINVAL, "%s: tokenizer fingerprint %s differs from %s of %s: %s", path, got, want,
                             o->fingerprint_of,
                             o->fingerprint_hint ? o->fingerprint_hint
                                                 : "the shard was prepared with another tokenizer (dtrun prepare "
                                                   "--tokenizer)");
        return dt_errorf(err, DT_EINVAL,
                         "%s: tokenizer fingerprint %s differs from the expected %s: the shard was prepared with "
                         "another tokenizer (dtrun prepare --tokenizer)",
                         path, got, want);
    }
    if (c->has_fp && memcmp(c->fp, h.fingerprint, DT_SHARD2_FINGERPRINT_BYTES)) {
        fp_short(c->fp, want);
        return dt_errorf(err, DT_EINVAL,
                         "%s: tokenizer fingerprint %s differs from %s of %s: one data path holds shards of two "
                         "tokenizers",
                         path, got, want, c->fp_path);
    }
    if (!c->has_fp) {
        c->has_fp = 1;
        memcpy(c->fp, h.fingerprint, sizeof c->fp);
        snprintf(c->fp_path, sizeof c->fp_path, "%s", path);
    }
    if ((int64_t)h.vocab > c->vocab) c->vocab = (int64_t)h.vocab;
    const unsigned char *payload = (const unsigned char *)s->map + DT_SHARD2_HEADER_BYTES;
    s->ntok = (int64_t)h.count;
    if (h.token_bytes == 2) s->toks = (const uint16_t *)payload;
    else s->toks32 = (const uint32_t *)payload;
    if (h.flags & DT_SHARD2_FLAG_MASK) {
        s->mask = payload + h.count * h.token_bytes;
        c->has_mask = 1;
    }
    /* the CRC matched, so a token at or above the header's vocab was written so */
    for (int64_t i = 0; i < s->ntok; i++) {
        int64_t t = src_tok(s, i);
        if (t >= (int64_t)h.vocab)
            return dt_errorf(err, DT_EINVAL, "%s: token %lld at position %lld is outside the shard's vocab of %llu",
                             path, (long long)t, (long long)i, (unsigned long long)h.vocab);
    }
    return DT_OK;
}

static int open_shard(dt_corpus *c, dt_source *s, const char *path, const dt_corpus_opts *o, dt_error *err) {
    snprintf(s->path, sizeof s->path, "%s", path);
    const int64_t vocab = o->vocab;
    int fd;
    uint64_t fsize = 0;
    if (dt_file_open_regular(path, "token shard", &fd, &fsize, err)) return err->code;
    size_t size = (size_t)fsize;
    if (size < DT_SHARD_HEADER_BYTES) {
        close(fd);
        return dt_errorf(err, DT_EINVAL,
                         "%s: truncated token shard: %zu bytes, shorter than the %d-byte header",
                         path, size, DT_SHARD_HEADER_BYTES);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return dt_errorf(err, DT_EIO, "%s: cannot map: %s", path, strerror(errno));
    s->map = map;
    s->map_len = size;
    s->mapped = 1;
    if (dt_shard2_is(map, size)) return open_shard2(c, s, o, err);
    if (o->fingerprint && !o->llmc_unchecked)
        return dt_errorf(err, DT_EINVAL,
                         "%s: an llm.c shard carries no tokenizer fingerprint, and one was expected: prepare the "
                         "data with dtrun prepare", path);
    const int32_t *h = map;
    if (h[0] != DT_SHARD_MAGIC) {
        const char *hint = h[0] == DT_LLMC_MODEL_MAGIC ? " (this is an llm.c model checkpoint, not data)"
                           : h[0] == DT_LLMC_LLAMA3_SHARD_MAGIC ? " (a uint32 llama3 shard: not supported)"
                                                                : "";
        return dt_errorf(err, DT_EINVAL,
                         "%s: not a token shard: magic %d, expected llm.c's %d or dtrun's \"" DT_SHARD2_MAGIC "\"%s",
                         path, h[0], DT_SHARD_MAGIC, hint);
    }
    if (h[1] != DT_SHARD_VERSION)
        return dt_errorf(err, DT_EINVAL, "%s: llm.c shard version %d, expected %d (uint16 tokens)",
                         path, h[1], DT_SHARD_VERSION);
    if (h[2] < 0 || size != DT_SHARD_HEADER_BYTES + 2 * (size_t)h[2])
        return dt_errorf(err, DT_EINVAL,
                         "%s: truncated llm.c shard: header says %d tokens (%zu bytes) but the file "
                         "has %zu bytes",
                         path, h[2], DT_SHARD_HEADER_BYTES + 2 * (size_t)(h[2] < 0 ? 0 : h[2]), size);
    s->ntok = h[2];
    s->toks = (const uint16_t *)((const char *)map + DT_SHARD_HEADER_BYTES);
    for (int64_t i = 0; i < s->ntok; i++)
        if (s->toks[i] >= vocab)
            return dt_errorf(err, DT_EINVAL,
                             "%s: token %d at position %lld is outside the model's vocab of %lld",
                             path, s->toks[i], (long long)i, (long long)vocab);
    return DT_OK;
}

int dt_corpus_open(const char *path, const char *format, int64_t vocab, dt_corpus **out,
                   dt_error *err) {
    dt_corpus_opts o = {.vocab = vocab, .fingerprint = NULL};
    return dt_corpus_open_opts(path, format, &o, out, err);
}

int dt_corpus_open_opts(const char *path, const char *format, const dt_corpus_opts *o, dt_corpus **out,
                        dt_error *err) {
    const int64_t vocab = o->vocab;
    *out = NULL;
    struct stat st;
    if (!path || !path[0]) return dt_errorf(err, DT_EINVAL, "data: no path given (data.train or --data)");
    if (stat(path, &st) != 0)
        return dt_errorf(err, DT_EINVAL, "%s: data path not found: %s", path, strerror(errno));
    int is_dir = S_ISDIR(st.st_mode);
    /* a FIFO would block the run forever, a device never ends */
    if (!is_dir && !S_ISREG(st.st_mode))
        return dt_errorf(err, DT_EINVAL, "%s: is %s, not a regular file or a directory: give a data file or a "
                         "directory of data files (data.train or --data)", path, dt_file_kind(st.st_mode));
    dt_corpus *c = calloc(1, sizeof *c);
    if (!c) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    int rc;
    if (strcmp(format, "text") == 0) {
        rc = open_text(c, path, is_dir, vocab, err);
    } else if (strcmp(format, "llmc") == 0) {
        char **names = NULL;
        int n = 0;
        rc = DT_OK;
        rc = is_dir ? list_dir(path, ".bin", &names, &n, &c->subdirs, err) : single_name(path, &names, &n, err);
        if (!rc && n == 0) rc = dt_errorf(err, DT_EINVAL, "%s: no *.bin token shards in the directory", path);
        if (!rc && !(c->src = calloc((size_t)n, sizeof *c->src)))
            rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory for %d shards", path, n);
        if (!rc) {
            for (int i = 0; i < n && !rc; i++) {
                rc = open_shard(c, &c->src[i], names[i], o, err);
                c->nsrc = i + 1;
                c->ntok += c->src[i].ntok;
            }
            c->nfiles = n;
        }
        free_names(names, n);
    } else {
        rc = dt_errorf(err, DT_EINVAL, "data.format \"%s\" is not known (use \"text\" or \"llmc\")", format);
    }
    if (rc) {
        dt_corpus_free(c);
        return rc;
    }
    *out = c;
    return DT_OK;
}

void dt_corpus_free(dt_corpus *c) {
    if (!c) return;
    for (int i = 0; i < c->nsrc; i++) {
        if (c->src[i].mapped) munmap(c->src[i].map, c->src[i].map_len);
        else free(c->src[i].map);
    }
    free(c->src);
    free(c);
}

int64_t dt_corpus_tokens(const dt_corpus *c) { return c->ntok; }
int dt_corpus_has_mask(const dt_corpus *c) { return c->has_mask; }
int64_t dt_corpus_vocab(const dt_corpus *c) { return c->vocab; }
int dt_corpus_fingerprint(const dt_corpus *c, unsigned char out[DT_SHARD2_FINGERPRINT_BYTES]) {
    if (c->has_fp) memcpy(out, c->fp, sizeof c->fp);
    return c->has_fp;
}
int dt_corpus_files(const dt_corpus *c) { return c->nfiles; }
int dt_corpus_subdirs(const dt_corpus *c) { return c->subdirs; }

static int64_t source_windows(const dt_source *s, int64_t T) {
    return s->ntok > T ? (s->ntok - 1) / T : 0;
}

int64_t dt_corpus_windows(const dt_corpus *c, int64_t seq_len) {
    int64_t n = 0;
    for (int i = 0; i < c->nsrc; i++) n += source_windows(&c->src[i], seq_len);
    return n;
}

void dt_split_windows(int64_t n, double valid_fraction, int64_t *train_count, int64_t *valid_count) {
    int64_t v = 0;
    if (valid_fraction > 0.0 && n > 1) {
        v = (int64_t)(valid_fraction * (double)n + 0.5);
        if (v < 1) v = 1;
        if (v > n - 1) v = n - 1;
    }
    *valid_count = v;
    *train_count = n - v;
}

/* ---- loader ---- */

struct dt_loader {
    const dt_corpus *c;
    int64_t T, B, first, count;
    int shuffle, rank, world;
    uint64_t seed;
    int64_t *win_start;     /* [nsrc + 1] prefix sums of windows per source */
    int64_t *perm;          /* [count] this epoch's order (identity without shuffle) */
    dt_loader_pos pos;
};

uint64_t dt_rng_next(uint64_t *state) {
    /* splitmix64 (Steele, Lea, Flood 2014): constants from the published generator */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void dt_epoch_perm(int64_t *perm, int64_t n, int shuffle, uint64_t seed, int64_t epoch) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    if (!shuffle) return;
    /* the epoch's permutation depends only on (seed, epoch) */
    uint64_t st = seed;
    uint64_t key = dt_rng_next(&st) ^ (uint64_t)epoch;
    st = key;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(dt_rng_next(&st) % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static void make_perm(dt_loader *l) { dt_epoch_perm(l->perm, l->count, l->shuffle, l->seed, l->pos.epoch); }

int dt_loader_create(const dt_corpus *c, int64_t seq_len, int64_t B, int64_t first,
                     int64_t count, int shuffle, uint64_t seed, int rank, int world,
                     const char *what, dt_loader **out, dt_error *err) {
    *out = NULL;
    int64_t total = dt_corpus_windows(c, seq_len);
    if (count < 0) count = total - first;
    if (first < 0 || first + count > total)
        return dt_errorf(err, DT_EINTERNAL, "%s: window range %lld+%lld outside 0..%lld", what,
                         (long long)first, (long long)count, (long long)total);
    if (count < B * world)
        return dt_errorf(err, DT_EINVAL,
                         "%s: %lld tokens make %lld sequences of %lld+1 tokens, fewer than one batch "
                         "of %lld; use more data or a smaller micro_batch/seq_len",
                         what, (long long)c->ntok, (long long)count, (long long)seq_len,
                         (long long)(B * world));
    dt_loader *l = calloc(1, sizeof *l);
    if (!l) return dt_errorf(err, DT_ENOMEM, "%s: out of memory creating the data loader", what);
    l->c = c;
    l->T = seq_len;
    l->B = B;
    l->first = first;
    l->count = count;
    l->shuffle = shuffle;
    l->seed = seed;
    l->rank = rank;
    l->world = world;
    l->win_start = malloc((size_t)(c->nsrc + 1) * sizeof *l->win_start);
    l->perm = malloc((size_t)count * sizeof *l->perm);
    if (!l->win_start || !l->perm) {
        dt_loader_free(l);
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory for %lld windows", what, (long long)count);
    }
    l->win_start[0] = 0;
    for (int i = 0; i < c->nsrc; i++)
        l->win_start[i + 1] = l->win_start[i] + source_windows(&c->src[i], seq_len);
    make_perm(l);
    *out = l;
    return DT_OK;
}

void dt_loader_free(dt_loader *l) {
    if (!l) return;
    free(l->win_start);
    free(l->perm);
    free(l);
}

static void read_window(const dt_loader *l, int64_t w, int32_t *in, int32_t *tg, uint8_t *mask) {
    /* w: global window index -> (source, offset) by binary search over prefix sums */
    int lo = 0, hi = l->c->nsrc - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (l->win_start[mid] <= w) lo = mid;
        else hi = mid - 1;
    }
    const dt_source *s = &l->c->src[lo];
    int64_t off = (w - l->win_start[lo]) * l->T;
    for (int64_t t = 0; t < l->T; t++) {
        in[t] = src_tok(s, off + t);
        tg[t] = src_tok(s, off + t + 1);
        if (mask) mask[t] = (uint8_t)dt_shard2_mask_bit(s->mask, (uint64_t)(off + t + 1));
    }
}

void dt_loader_next_masked(dt_loader *l, int32_t *inputs, int32_t *targets, uint8_t *mask) {
    int64_t per_step = l->B * l->world;
    if (l->pos.cursor + per_step > l->count) {
        l->pos.epoch++;
        l->pos.cursor = 0;
        make_perm(l);
    }
    for (int64_t b = 0; b < l->B; b++) {
        int64_t k = l->pos.cursor + l->rank * l->B + b;
        read_window(l, l->first + l->perm[k], inputs + b * l->T, targets + b * l->T, mask ? mask + b * l->T : NULL);
    }
    l->pos.cursor += per_step;
}

void dt_loader_next(dt_loader *l, int32_t *inputs, int32_t *targets) {
    dt_loader_next_masked(l, inputs, targets, NULL);
}

void dt_loader_reset(dt_loader *l) {
    int remake = l->pos.epoch != 0;
    l->pos.epoch = 0;
    l->pos.cursor = 0;
    if (remake) make_perm(l);
}

dt_loader_pos dt_loader_get_pos(const dt_loader *l) { return l->pos; }
int64_t dt_loader_windows(const dt_loader *l) { return l->count; }

int dt_loader_set_pos(dt_loader *l, dt_loader_pos pos, dt_error *err) {
    if (pos.epoch < 0 || pos.cursor < 0 || pos.cursor > l->count)
        return dt_errorf(err, DT_EINVAL,
                         "data position epoch %lld cursor %lld does not fit a set of %lld windows "
                         "(was the data changed since the checkpoint?)",
                         (long long)pos.epoch, (long long)pos.cursor, (long long)l->count);
    l->pos = pos;
    make_perm(l);
    return DT_OK;
}

int dt_shard_write(const char *path, const uint16_t *tokens, int64_t n, dt_error *err) {
    size_t len = DT_SHARD_HEADER_BYTES + 2 * (size_t)n;
    unsigned char *buf = calloc(1, len);
    if (!buf) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    int32_t h[DT_SHARD_HEADER_INTS] = {0};
    h[0] = DT_SHARD_MAGIC;
    h[1] = DT_SHARD_VERSION;
    h[2] = (int32_t)n;
    memcpy(buf, h, sizeof h);
    if (n) memcpy(buf + DT_SHARD_HEADER_BYTES, tokens, 2 * (size_t)n);
    int rc = dt_write_file_atomic(path, buf, len, err);
    free(buf);
    return rc;
}
