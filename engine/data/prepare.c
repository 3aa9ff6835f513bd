/* prepare.c — dtrun prepare (dt_prepare.h, docs/data.md): inputs -> index -> shuffled,
 * split, tokenized documents -> token shards v2, staged and moved into place at the end.
 *
 * The index holds, per document, its items: a JSONL line, or a piece of a text file (a
 * text file is read in pieces of at most PIECE_BYTES, cut after a newline that a
 * non-space character follows: every pre-tokenizer regex of the supported tokenizers ends
 * a pre-token there, so the ids are those of the whole file; a SentencePiece model starts
 * each piece with its dummy-prefix space). Pass 2 reads a batch of items in the
 * permuted order, tokenizes them with OpenMP threads (each item on its own), and appends
 * the results in order: the shards do not depend on the thread count. */
#include "dt_prepare.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dt_clock.h"
#include "dt_data.h"          /* dt_rng_next */
#include "dt_json.h"
#include "dt_pixshard.h"
#include "dt_prepdoc.h"
#include "dt_file.h"
#include "dt_sha256.h"
#include "dt_tokenizer.h"

/* pieces of a text file; a pass-2 batch (input bytes, items); JSONL read blocks */
#define PIECE_BYTES ((size_t)1 << 20)
/* SentencePiece encodes a piece as one sentence, in time and memory that grow faster than
 * its length (python's sentencepiece on llama2-mini: 1 MiB in one call 0.39 s, in 64 KiB
 * calls 0.15 s; dtrun with 1 MiB pieces used ~190 MB per thread): smaller pieces, each
 * starting with the model's dummy-prefix space (docs/data.md) */
#define SPM_PIECE_BYTES ((size_t)64 << 10)
#define BATCH_BYTES ((uint64_t)16 << 20)
#define BATCH_ITEMS 4096
/* llava: records per batch (each holds a decoded image and its crop while the batch is
 * processed: 64 x 3 x 336 x 336 bytes = 21 MiB of crops) */
#define LLAVA_BATCH_ITEMS 64
#define READ_BLOCK ((size_t)1 << 20)
/* a JSONL line is one JSON document: the bound of every JSON file dtrun reads */
#define MAX_LINE_BYTES DT_READ_MAX_JSON
/* folder nesting followed at most (symlinks are not followed, so only bind mounts loop) */
#define MAX_DEPTH 64
/* open input files kept between reads of pass 2 */
#define FD_CACHE 16
/* digits of a shard's number in its name: train-000000.bin */
#define SHARD_DIGITS 6
#define PATH_BYTES 4096

typedef struct {
    uint64_t off;     /* in its file */
    uint64_t line;    /* 1-based line of its first byte */
    uint32_t len;
    uint32_t file;
} prep_item;

typedef struct {
    const dt_prep_opts *o;
    dt_tokenizer *tok;
    dt_prepdoc_ctx ctx;
    unsigned char fp[DT_TOK_FINGERPRINT_BYTES];
    char stage[PATH_BYTES];
    struct stat out_st;
    /* index */
    char **files;
    uint64_t n_files, cap_files;
    prep_item *items;
    uint64_t n_items, cap_items;
    uint64_t *doc_first;   /* [n_docs + 1]: doc d's items are [doc_first[d], doc_first[d + 1]) */
    uint64_t n_docs, cap_docs;
    uint64_t bytes, skipped_files, skipped_docs;
    char *buf;             /* PIECE_BYTES / READ_BLOCK scratch */
    size_t piece;          /* PIECE_BYTES, SPM_PIECE_BYTES for a SentencePiece model */
    double t0;   /* dt_clock_s() at the start of the phase */
    dt_prep_progress prog;
    /* pass 2 */
    dt_shard_writer *w[2];
    dt_shard_header h[2];
    dt_pix_writer *pw[2];   /* llava: the pixel shard beside w[s] */
    dt_pix_header ph[2];
    struct { uint32_t file; int fd; } fds[FD_CACHE];
    int fd_next;
    uint64_t prepare_id;
    dt_prep_result *res;
} prep;

/* out = a/b; 1 when it does not fit (check_opts bounds --out, so only folder walks can) */
static int join(char *out, size_t n, const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la + 1 + lb + 1 > n) {
        if (n) out[0] = '\0';
        return 1;
    }
    memcpy(out, a, la);
    out[la] = '/';
    memcpy(out + la + 1, b, lb + 1);
    return 0;
}

static double since(double t0) { return dt_clock_s() - t0; }

static void report(prep *p) {
    if (!p->o->progress) return;
    p->prog.seconds = since(p->t0);
    p->o->progress(&p->prog, p->o->progress_arg);
}

static int stopped(const prep *p, dt_error *err) {
    if (p->o->stop && *p->o->stop) return dt_errorf(err, DT_ERUNTIME, "interrupted: nothing was written to %s", p->o->out);
    return DT_OK;
}

/* name == prefix + '-' + SHARD_DIGITS digits + ".bin" (+ ".tmp") */
static int shard_name(const char *name, const char *prefix) {
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) || name[pl] != '-') return 0;
    const char *d = name + pl + 1;
    if (strspn(d, "0123456789") != SHARD_DIGITS) return 0;
    return !strcmp(d + SHARD_DIGITS, ".bin") || !strcmp(d + SHARD_DIGITS, ".bin.tmp") ||
           !strcmp(d + SHARD_DIGITS, ".px") || !strcmp(d + SHARD_DIGITS, ".px.tmp");
}

/* prepare.json, or a temporary of dt_json_write_file_atomic (prepare.json.tmp.PID) */
static int manifest_name(const char *name) {
    size_t n = strlen(DT_PREP_MANIFEST);
    if (strncmp(name, DT_PREP_MANIFEST, n)) return 0;
    if (!name[n]) return 1;
    return !strncmp(name + n, ".tmp", 4) && (!name[n + 4] || (name[n + 4] == '.' && name[n + 5] &&
                                                              strspn(name + n + 5, "0123456789") == strlen(name + n + 5)));
}

/* The first entry of a split folder that is not a shard of that split ("" when none). */
static int foreign_in_split(const char *dir, const char *prefix, char *found, size_t n, dt_error *err) {
    found[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) return dt_errorf(err, DT_EINVAL, "%s: cannot list: %s; choose another --out", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char q[PATH_BYTES];
        struct stat st;
        if (!shard_name(e->d_name, prefix) || join(q, sizeof q, dir, e->d_name) || lstat(q, &st) ||
            !S_ISREG(st.st_mode)) {
            join(found, n, prefix, e->d_name);
            break;
        }
    }
    closedir(d);
    return DT_OK;
}

/* out/NAME when it is not prepare's: the name ("" when it is) */
static int foreign_entry(const char *out, const char *name, char *found, size_t n, dt_error *err) {
    char q[PATH_BYTES];
    struct stat st;
    found[0] = '\0';
    if (join(q, sizeof q, out, name)) return dt_errorf(err, DT_EINVAL, "%s/%s: path too long", out, name);
    if (lstat(q, &st)) return dt_errorf(err, DT_EINVAL, "%s: cannot stat: %s", q, strerror(errno));
    if (S_ISREG(st.st_mode) && manifest_name(name)) return DT_OK;
    if (S_ISDIR(st.st_mode) && (!strcmp(name, DT_PREP_TRAIN_DIR) || !strcmp(name, DT_PREP_VAL_DIR)))
        return foreign_in_split(q, name, found, n, err);
    if (S_ISDIR(st.st_mode) && !strcmp(name, DT_PREP_STAGING)) {
        DIR *d = opendir(q);
        if (!d) return dt_errorf(err, DT_EINVAL, "%s: cannot list: %s", q, strerror(errno));
        struct dirent *e;
        int rc = DT_OK;
        while (!rc && !found[0] && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[PATH_BYTES];
            rc = foreign_entry(q, e->d_name, sub, sizeof sub, err);
            if (!rc && sub[0]) join(found, n, DT_PREP_STAGING, sub);
        }
        closedir(d);
        return rc;
    }
    snprintf(found, n, "%s", name);
    return DT_OK;
}

/* dt_rundir.h's rule for prepare: out absent, empty, or only prepare's own files. */
static int check_out(const char *out, dt_error *err) {
    struct stat st;
    if (stat(out, &st)) {
        if (errno == ENOENT) return DT_OK;
        return dt_errorf(err, DT_EINVAL, "%s: cannot use the output directory: %s; choose another --out", out,
                         strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return dt_errorf(err, DT_EINVAL, "%s: is %s, not a directory; choose another --out", out,
                         dt_file_kind(st.st_mode));
    DIR *d = opendir(out);
    if (!d) return dt_errorf(err, DT_EINVAL, "%s: cannot list the output directory: %s", out, strerror(errno));
    struct dirent *e;
    char found[PATH_BYTES] = "";
    int rc = DT_OK;
    while (!rc && !found[0] && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        rc = foreign_entry(out, e->d_name, found, sizeof found, err);
    }
    closedir(d);
    if (!rc && found[0])
        rc = dt_errorf(err, DT_EINVAL,
                       "%s: the output directory holds %s, which dtrun prepare did not write; it replaces only a "
                       "previous prepare's output: choose another --out or an empty one",
                       out, found);
    return rc;
}

/* Removes a split folder's shards (and temporaries) and the folder; absent is fine. */
static int clear_split(const char *dir, const char *prefix, dt_error *err) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? DT_OK : dt_errorf(err, DT_EIO, "%s: cannot list: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = DT_OK;
    while (!rc && (e = readdir(d))) {
        if (!shard_name(e->d_name, prefix)) continue;
        char q[PATH_BYTES];
        if (join(q, sizeof q, dir, e->d_name) || (unlink(q) && errno != ENOENT)) rc = dt_errorf(err, DT_EIO, "%s: cannot remove: %s", q, strerror(errno));
    }
    closedir(d);
    if (!rc && rmdir(dir) && errno != ENOENT)
        rc = dt_errorf(err, DT_EIO, "%s: cannot remove: %s", dir, strerror(errno));
    return rc;
}

/* Removes dir's prepare.json (and its temporaries). */
static int clear_manifest(const char *dir, dt_error *err) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? DT_OK : dt_errorf(err, DT_EIO, "%s: cannot list: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = DT_OK;
    while (!rc && (e = readdir(d))) {
        if (!manifest_name(e->d_name)) continue;
        char q[PATH_BYTES];
        if (join(q, sizeof q, dir, e->d_name) || (unlink(q) && errno != ENOENT)) rc = dt_errorf(err, DT_EIO, "%s: cannot remove: %s", q, strerror(errno));
    }
    closedir(d);
    return rc;
}

static int clear_stage(const char *stage, dt_error *err) {
    char q[PATH_BYTES];
    int rc = join(q, sizeof q, stage, DT_PREP_TRAIN_DIR) ? DT_EINVAL : clear_split(q, DT_PREP_TRAIN_DIR, err);
    if (!rc) rc = join(q, sizeof q, stage, DT_PREP_VAL_DIR) ? DT_EINVAL : clear_split(q, DT_PREP_VAL_DIR, err);
    if (!rc) rc = clear_manifest(stage, err);
    if (!rc && rmdir(stage) && errno != ENOENT)
        rc = dt_errorf(err, DT_EIO, "%s: cannot remove: %s", stage, strerror(errno));
    return rc;
}

/* ---------------------------------------------------------------- the index */

static int grow(void **v, uint64_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return DT_OK;
    uint64_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *nv = realloc(*v, (size_t)c * elem);
    if (!nv) return DT_ENOMEM;
    *v = nv;
    *cap = c;
    return DT_OK;
}

static int add_item(prep *p, uint32_t file, uint64_t off, size_t len, uint64_t line) {
    if (grow((void **)&p->items, &p->cap_items, p->n_items + 1, sizeof *p->items)) return DT_ENOMEM;
    p->items[p->n_items++] = (prep_item){off, line, (uint32_t)len, file};
    p->bytes += len;
    return DT_OK;
}

static int add_doc(prep *p, uint64_t first_item) {
    if (grow((void **)&p->doc_first, &p->cap_docs, p->n_docs + 2, sizeof *p->doc_first)) return DT_ENOMEM;
    p->doc_first[p->n_docs++] = first_item;
    p->prog.docs = p->n_docs;
    return DT_OK;
}

static int pread_all(int fd, char *buf, size_t n, uint64_t off, const char *path, dt_error *err) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return dt_errorf(err, DT_EIO, "%s: cannot read: %s", path,
                             k < 0 ? strerror(errno) : "the file is shorter than it was (changed while being prepared?)");
        got += (size_t)k;
    }
    return DT_OK;
}

/* Unicode White_Space (what \s of the pre-tokenizers' regexes matches in UCP mode) */
static int uni_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Where to end a piece of n bytes (more of the file follows): after the last newline that
 * a non-space character follows; else after the last newline; else at the last character
 * boundary. */
static size_t piece_cut(const char *b, size_t n) {
    const unsigned char *u = (const unsigned char *)b;
    size_t last_nl = 0;
    for (size_t i = n - 1; i >= 1; i--) {
        if (u[i - 1] != '\n') continue;
        if (!last_nl) last_nl = i;
        uint32_t c = u[i];
        size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
        if (i + k > n) continue;   /* the character does not fit: decide on an earlier newline */
        if (k == 2) c = (c & 0x1F) << 6 | (u[i + 1] & 0x3F);
        else if (k == 3) c = (c & 0x0F) << 12 | (uint32_t)(u[i + 1] & 0x3F) << 6 | (u[i + 2] & 0x3F);
        else if (k == 4) c = 0x10000;   /* above every space */
        if (!uni_space(c)) return i;
    }
    if (last_nl) return last_nl;
    size_t j = n - 1;   /* before the last character, which may be cut short */
    while (j > 0 && (u[j] & 0xC0) == 0x80) j--;
    return j > 0 ? j : n;
}

static uint64_t count_lines(const char *b, size_t n) {
    uint64_t k = 0;
    for (const char *q = b; (q = memchr(q, '\n', (size_t)(b + n - q))); q++) k++;
    return k;
}

/* A text file: one document of pieces; in a folder a binary file (a NUL byte) is skipped
 * (*binary = 1). */
static int index_text(prep *p, uint32_t fi, const char *path, int named, int *binary, dt_error *err) {
    *binary = 0;
    int fd;
    uint64_t size = 0;
    if (dt_file_open_regular(path, "text file", &fd, &size, err)) return err->code;
    if (size == 0) {
        close(fd);
        p->skipped_docs++;
        return DT_OK;
    }
    uint64_t first = p->n_items, pos = 0, line = 1, bytes0 = p->bytes;
    int rc = DT_OK;
    while (pos < size && !rc) {
        size_t want = size - pos < p->piece ? (size_t)(size - pos) : p->piece;
        if ((rc = pread_all(fd, p->buf, want, pos, path, err))) break;
        size_t len = pos + want < size ? piece_cut(p->buf, want) : want;
        const char *nul = memchr(p->buf, 0, len);
        if (nul) {
            if (named)
                rc = dt_errorf(err, DT_EINVAL, "%s: holds a NUL byte at offset %llu, so it is not text", path,
                               (unsigned long long)(pos + (uint64_t)(nul - p->buf)));
            else {   /* binary (fortune's .dat index beside the texts): not a document */
                p->n_items = first;
                p->bytes = bytes0;
                *binary = 1;
            }
            close(fd);
            return rc;
        }
        size_t bad = dt_tok_utf8_check(p->buf, len);
        if (bad < len) {
            rc = dt_errorf(err, DT_EINVAL,
                           "%s:%llu: not UTF-8 (byte 0x%02X at offset %llu); Hugging Face's loaders refuse such "
                           "text too: convert it (iconv -f LATIN1 -t UTF-8) or leave the file out",
                           path, (unsigned long long)(line + count_lines(p->buf, bad)), (unsigned char)p->buf[bad],
                           (unsigned long long)(pos + bad));
            break;
        }
        if ((rc = add_item(p, fi, pos, len, line))) break;
        line += count_lines(p->buf, len);
        pos += len;
        p->prog.bytes_done += len;
        if (!rc) rc = stopped(p, err);
        report(p);
    }
    close(fd);
    if (!rc) rc = add_doc(p, first);
    return rc;
}

/* One JSONL line: checked, then indexed as one document (or skipped). */
static int index_line(prep *p, uint32_t fi, const char *path, const char *line, size_t n, uint64_t off,
                      uint64_t lineno, dt_error *err) {
    size_t i = 0;
    while (i < n && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) i++;
    if (i == n) return DT_OK;   /* a blank line: no document (pandas and datasets skip them too) */
    int skip, rc = dt_prepdoc_check_line(&p->ctx, line, n, path, lineno, &skip, err);
    if (rc) return rc;
    if (skip) {
        p->skipped_docs++;
        return DT_OK;
    }
    if ((rc = add_item(p, fi, off, n, lineno))) return rc;
    return add_doc(p, p->n_items - 1);
}

static int index_jsonl(prep *p, uint32_t fi, const char *path, dt_error *err) {
    int fd;
    uint64_t size = 0;
    if (dt_file_open_regular(path, "JSONL file", &fd, &size, err)) return err->code;
    char *line = NULL;
    size_t len = 0, cap = 0;
    uint64_t pos = 0, line_off = 0, lineno = 1;
    int rc = DT_OK;
    while (pos < size && !rc) {
        size_t want = size - pos < READ_BLOCK ? (size_t)(size - pos) : READ_BLOCK;
        if ((rc = pread_all(fd, p->buf, want, pos, path, err))) break;
        size_t i = 0;
        while (i < want && !rc) {
            const char *nl = memchr(p->buf + i, '\n', want - i);
            size_t k = nl ? (size_t)(nl - (p->buf + i)) : want - i;
            if (len + k > MAX_LINE_BYTES) {
                rc = dt_errorf(err, DT_EINVAL, "%s:%llu: a line of more than %zu MiB; one JSON document per line",
                               path, (unsigned long long)lineno, MAX_LINE_BYTES >> 20);
                break;
            }
            if (len + k > cap) {
                size_t c = cap ? cap : READ_BLOCK;
                while (c < len + k) c *= 2;
                char *nlb = realloc(line, c);
                if (!nlb) {
                    rc = dt_errorf(err, DT_ENOMEM, "%s:%llu: out of memory for the line", path,
                                   (unsigned long long)lineno);
                    break;
                }
                line = nlb;
                cap = c;
            }
            memcpy(line + len, p->buf + i, k);
            len += k;
            i += k;
            if (nl) {
                rc = index_line(p, fi, path, line, len, line_off, lineno, err);
                i++;
                line_off = pos + i;
                lineno++;
                len = 0;
            }
        }
        pos += want;
        p->prog.bytes_done += want;
        if (!rc) rc = stopped(p, err);
        report(p);
    }
    if (!rc && len) rc = index_line(p, fi, path, line, len, line_off, lineno, err);
    free(line);
    close(fd);
    return rc;
}

/* llava: one element of the list, checked, indexed as one document whose item's line is
 * its record index (0-based, the index in the JSON list: what messages name). */
static int index_record(prep *p, uint32_t fi, const char *path, const char *elem, size_t n, uint64_t off,
                        uint64_t lineno, uint64_t record, dt_error *err) {
    int skip, rc = dt_prepdoc_check_line(&p->ctx, elem, n, path, lineno, &skip, err);
    if (rc) return dt_error_suffix(err, " (record %llu of the list)", (unsigned long long)record);
    if (n > UINT32_MAX) return dt_errorf(err, DT_EINVAL, "%s:%llu: record %llu is larger than 4 GiB", path,
                                         (unsigned long long)lineno, (unsigned long long)record);
    if (skip) {
        p->skipped_docs++;
        return DT_OK;
    }
    if ((rc = add_item(p, fi, off, n, record))) return rc;
    return add_doc(p, p->n_items - 1);
}

/* the scan of a JSON list: where it is between the records */
typedef struct {
    int started, closed, expect;   /* '[' seen; ']' seen; an element must come next (after '[' or ',') */
    int depth, in_str, esc;        /* inside an element */
    uint64_t line, record, start, start_line;
    char *elem;
    size_t len, cap;
} list_scan;

static int scan_append(list_scan *s, char c) {
    if (s->len == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 4096;
        char *ne = realloc(s->elem, nc);
        if (!ne) return DT_ENOMEM;
        s->elem = ne;
        s->cap = nc;
    }
    s->elem[s->len++] = c;
    return DT_OK;
}

/* One byte of the file at offset pos, outside the records. */
static int scan_outside(list_scan *s, const char *path, char c, uint64_t pos, dt_error *err) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') return DT_OK;
    if (!s->started) {
        if (c != '[')
            return dt_errorf(err, DT_EINVAL, "%s:%llu: expected a JSON list of records ([{\"id\", \"image\", "
                             "\"conversations\"}, ...]) as LLaVA's data; JSON Lines chats are --format chat",
                             path, (unsigned long long)s->line);
        s->started = s->expect = 1;
        return DT_OK;
    }
    if (s->closed)
        return dt_errorf(err, DT_EINVAL, "%s:%llu: text after the list's closing ]", path, (unsigned long long)s->line);
    if (c == ']' && (!s->expect || s->record == 0)) {
        s->closed = 1;
        return DT_OK;
    }
    if (c == ',' && !s->expect) {
        s->expect = 1;
        return DT_OK;
    }
    if (c != '{' || !s->expect)
        return dt_errorf(err, DT_EINVAL, "%s:%llu: record %llu: expected an object {\"id\", \"image\", "
                         "\"conversations\"}%s", path, (unsigned long long)s->line, (unsigned long long)s->record,
                         s->expect ? "" : " after a comma");
    s->expect = 0;
    s->depth = 1;
    s->start = pos;
    s->start_line = s->line;
    s->len = 0;
    return scan_append(s, c) ? dt_errorf(err, DT_ENOMEM, "%s: out of memory for a record", path) : DT_OK;
}

/* One byte inside a record: strings and nesting followed; the record ends at depth 0. */
static int scan_inside(prep *p, uint32_t fi, list_scan *s, const char *path, char c, dt_error *err) {
    if (scan_append(s, c)) return dt_errorf(err, DT_ENOMEM, "%s: out of memory for a record", path);
    if (s->len > MAX_LINE_BYTES)
        return dt_errorf(err, DT_EINVAL, "%s:%llu: record %llu is longer than %zu MiB", path,
                         (unsigned long long)s->start_line, (unsigned long long)s->record, MAX_LINE_BYTES >> 20);
    if (s->in_str) {
        if (s->esc) s->esc = 0;
        else if (c == '\\') s->esc = 1;
        else if (c == '"') s->in_str = 0;
        return DT_OK;
    }
    if (c == '"') s->in_str = 1;
    else if (c == '{' || c == '[') s->depth++;
    else if (c == '}' || c == ']') s->depth--;
    if (s->depth) return DT_OK;
    return index_record(p, fi, path, s->elem, s->len, s->start, s->start_line, s->record++, err);
}

/* llava: a JSON file holding one list (LLaVA's llava_v1_5_mix665k.json, about 1 GB): read
 * in blocks, each element found by a scan that follows strings and nesting, then checked
 * on its own (never the whole list in memory). */
static int index_json_list(prep *p, uint32_t fi, const char *path, dt_error *err) {
    int fd;
    uint64_t size = 0;
    if (dt_file_open_regular(path, "LLaVA JSON file", &fd, &size, err)) return err->code;
    list_scan s = {.line = 1};
    uint64_t pos = 0;
    int rc = DT_OK;
    while (pos < size && !rc) {
        size_t want = size - pos < READ_BLOCK ? (size_t)(size - pos) : READ_BLOCK;
        if ((rc = pread_all(fd, p->buf, want, pos, path, err))) break;
        for (size_t i = 0; i < want && !rc; i++) {
            const char c = p->buf[i];
            rc = s.depth ? scan_inside(p, fi, &s, path, c, err) : scan_outside(&s, path, c, pos + i, err);
            s.line += c == '\n';
        }
        pos += want;
        p->prog.bytes_done += want;
        if (!rc) rc = stopped(p, err);
        report(p);
    }
    if (!rc && !s.closed)
        rc = dt_errorf(err, DT_EINVAL, "%s: %s: the list is not closed (the file is truncated?)", path,
                       s.started ? "ends inside the list" : "empty");
    free(s.elem);
    close(fd);
    return rc;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static int add_path(prep *p, const char *path, int depth, int named, dt_error *err);

static int add_dir(prep *p, const char *dir, int depth, dt_error *err) {
    if (depth > MAX_DEPTH)
        return dt_errorf(err, DT_EINVAL, "%s: folders nested more than %d deep", dir, MAX_DEPTH);
    DIR *d = opendir(dir);
    if (!d) return dt_errorf(err, DT_EINVAL, "%s: cannot list: %s", dir, strerror(errno));
    char **names = NULL;
    uint64_t n = 0, cap = 0;
    struct dirent *e;
    int rc = DT_OK;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;   /* hidden files, . and .., the staging folder */
        char q[PATH_BYTES];
        if (join(q, sizeof q, dir, e->d_name)) {
            rc = dt_errorf(err, DT_EINVAL, "%s/%s: path too long", dir, e->d_name);
            break;
        }
        if (grow((void **)&names, &cap, n + 1, sizeof *names) || !(names[n] = strdup(q))) {
            rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory listing the folder", dir);
            break;
        }
        n++;
    }
    closedir(d);
    if (!rc && n > 1) qsort(names, (size_t)n, sizeof *names, name_cmp);
    for (uint64_t i = 0; i < n && !rc; i++) rc = add_path(p, names[i], depth + 1, 0, err);
    for (uint64_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

static int add_path(prep *p, const char *path, int depth, int named, dt_error *err) {
    struct stat st;
    /* a path given is followed when it is a symlink; inside folders symlinks are skipped
     * (they would read a file twice, or loop) */
    if ((named ? stat(path, &st) : lstat(path, &st)) != 0)
        return dt_errorf(err, DT_EINVAL, "%s: cannot read the input: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        if (st.st_dev == p->out_st.st_dev && st.st_ino == p->out_st.st_ino) {
            if (named)
                return dt_errorf(err, DT_EINVAL, "%s: is the output directory; the inputs must be elsewhere", path);
            return DT_OK;   /* --out inside an input folder: not an input */
        }
        return add_dir(p, path, depth, err);
    }
    if (!S_ISREG(st.st_mode)) {
        if (named)
            return dt_errorf(err, DT_EINVAL, "%s: is %s, not a regular file or a folder", path, dt_file_kind(st.st_mode));
        p->skipped_files++;
        return DT_OK;
    }
    const char *ext = p->o->format == DT_PREP_LLAVA ? ".json" : ".jsonl";
    if (!named && p->o->format != DT_PREP_TEXT && !ends_with(path, ext)) {
        p->skipped_files++;   /* a README beside the .jsonl (llava: .json) files */
        return DT_OK;
    }
    if (p->n_files >= UINT32_MAX) return dt_errorf(err, DT_EINVAL, "%s: more than 2^32 input files", path);
    if (grow((void **)&p->files, &p->cap_files, p->n_files + 1, sizeof *p->files) ||
        !(p->files[p->n_files] = strdup(path)))
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    uint32_t fi = (uint32_t)p->n_files++;
    int binary = 0;
    int rc = p->o->format == DT_PREP_TEXT    ? index_text(p, fi, path, named, &binary, err)
             : p->o->format == DT_PREP_LLAVA ? index_json_list(p, fi, path, err)
                                             : index_jsonl(p, fi, path, err);
    if (binary) {
        free(p->files[--p->n_files]);
        p->skipped_files++;
    }
    return rc;
}

/* ---------------------------------------------------------------- pass 2 */

static int item_fd(prep *p, uint32_t file, int *fd, dt_error *err) {
    for (int i = 0; i < FD_CACHE; i++)
        if (p->fds[i].fd >= 0 && p->fds[i].file == file) return *fd = p->fds[i].fd, DT_OK;
    uint64_t size;
    int nfd;
    if (dt_file_open_regular(p->files[file], "input file", &nfd, &size, err)) return err->code;
    int k = p->fd_next;
    p->fd_next = (p->fd_next + 1) % FD_CACHE;
    if (p->fds[k].fd >= 0) close(p->fds[k].fd);
    p->fds[k].fd = nfd;
    p->fds[k].file = file;
    *fd = nfd;
    return DT_OK;
}

static const char *split_name(int split) { return split == DT_SPLIT_TRAIN ? DT_PREP_TRAIN_DIR : DT_PREP_VAL_DIR; }

/* the shard's name in its split folder: train-000000.bin */
static void shard_file(int split, int index, char *out, size_t n) {
    char num[24];
    snprintf(num, sizeof num, "%0*d", SHARD_DIGITS, index);
    join(out, n, split_name(split), split_name(split));   /* "train/train" */
    size_t k = strlen(out);
    if (k + strlen(num) + sizeof "-.bin" <= n) snprintf(out + k, n - k, "-%s.bin", num);
}

/* Completes the open shard of a split (and its pixel shard). */
static int close_shard(prep *p, int split, dt_error *err) {
    int rc = dt_shard_writer_close(p->w[split], err);
    p->w[split] = NULL;
    if (p->pw[split]) {
        dt_error e2;
        int rc2 = dt_pix_writer_close(p->pw[split], rc ? &e2 : err);
        p->pw[split] = NULL;
        if (!rc) rc = rc2;
    }
    if (!rc) p->res->shards[split]++;
    return rc;
}

static int open_shard(prep *p, int split, dt_error *err) {
    dt_prep_result *r = p->res;
    char q[PATH_BYTES], name[64];
    join(q, sizeof q, p->stage, split_name(split));
    if (mkdir(q, 0755) && errno != EEXIST) return dt_errorf(err, DT_EIO, "%s: cannot create: %s", q, strerror(errno));
    p->h[split].shard_index = (uint32_t)r->shards[split];
    shard_file(split, r->shards[split], name, sizeof name);
    join(q, sizeof q, p->stage, name);
    int rc = dt_shard_writer_open(q, &p->h[split], &p->w[split], err);
    if (rc || p->o->format != DT_PREP_LLAVA) return rc;
    strcpy(q + strlen(q) - strlen(".bin"), ".px");
    p->ph[split].shard_index = (uint32_t)r->shards[split];
    return dt_pix_writer_open(q, &p->ph[split], &p->pw[split], err);
}

/* Appends a document's ids to its split, opening and closing shards at shard_tokens. A
 * llava document is never split: it goes whole into a new shard when the open one
 * cannot take it, with its image (crop, or NULL) in the pixel shard beside it. */
static int split_put(prep *p, int split, const int32_t *ids, const uint8_t *mask, size_t n, int starts_doc,
                     const uint8_t *crop, dt_error *err) {
    dt_prep_result *r = p->res;
    const int llava = p->o->format == DT_PREP_LLAVA;
    const uint64_t cap = (uint64_t)p->o->shard_tokens;
    if (starts_doc) r->docs[split]++;
    r->tokens[split] += n;
    for (size_t i = 0; i < n; i++) r->trained[split] += mask ? mask[i] : 1;
    int rc;
    if (llava && p->w[split] && dt_shard_writer_count(p->w[split]) + n > cap &&
        (rc = close_shard(p, split, err)))
        return rc;
    if (llava) {
        if (!p->w[split] && (rc = open_shard(p, split, err))) return rc;
        const uint64_t at = dt_shard_writer_count(p->w[split]);
        if (n > UINT32_MAX) return dt_errorf(err, DT_EINVAL, "a record of more than 2^32 tokens");
        if ((rc = dt_shard_writer_put(p->w[split], ids, mask, n, 1, err)) ||
            (rc = dt_pix_writer_put(p->pw[split], at, (uint32_t)n, crop, err)))
            return rc;
        r->images[split] += crop != NULL;
        return dt_shard_writer_count(p->w[split]) >= cap ? close_shard(p, split, err) : DT_OK;
    }
    while (n) {
        if (!p->w[split] && (rc = open_shard(p, split, err))) return rc;
        uint64_t room = cap - dt_shard_writer_count(p->w[split]);
        size_t k = n < room ? n : (size_t)room;
        if ((rc = dt_shard_writer_put(p->w[split], ids, mask, k, starts_doc ? 1 : 0, err))) return rc;
        starts_doc = 0;
        ids += k;
        if (mask) mask += k;
        n -= k;
        if (dt_shard_writer_count(p->w[split]) == cap && (rc = close_shard(p, split, err))) return rc;
    }
    return DT_OK;
}

typedef struct {
    uint64_t item;
    int split, first;
    char *bytes;        /* into the batch buffer */
    int32_t *ids;
    uint8_t *mask;
    size_t n;
    int rc;
    /* llava */
    uint8_t *crop;      /* [3][crop_height][crop_width], NULL for a text-only record */
    int img_rc;
    dt_error *img_err;  /* why the image failed: "IMAGE: what", with the record's id */
} batch_slot;

/* llava, any thread: the slot's image loaded and cropped (nothing for a text-only record) */
static void slot_image(const prep *p, batch_slot *sl) {
    const dt_prep_opts *o = p->o;
    char *image = NULL, id[256];
    dt_error e;
    sl->img_rc = dt_prepdoc_image(sl->bytes, p->items[sl->item].len, &image, id, sizeof id, &e);
    if (!sl->img_rc && image) {
        char path[PATH_BYTES];
        dt_image im;
        if (join(path, sizeof path, o->image_folder, image))
            sl->img_rc = dt_errorf(&e, DT_EINVAL, "%s/%s: path too long", o->image_folder, image);
        else
            sl->img_rc = dt_image_load(path, o->max_image_pixels, &im, &e);
        if (!sl->img_rc) {
            sl->crop = malloc((size_t)3 * o->clip.crop_height * o->clip.crop_width);
            sl->img_rc = sl->crop ? dt_image_clip_u8(&im, &o->clip, sl->crop, &e)
                                  : dt_errorf(&e, DT_ENOMEM, "%s: out of memory for the crop", path);
            dt_image_free(&im);
        }
    }
    if (sl->img_rc && (sl->img_err = malloc(sizeof *sl->img_err))) {
        *sl->img_err = e;
        dt_error_prefix(sl->img_err, "record %llu%s%s%s: image", (unsigned long long)p->items[sl->item].line,
                        id[0] ? " (id " : "", id, id[0] ? ")" : "");
    }
    free(image);
}

/* llava: what a record whose image failed does to the run (slot i of the batch) */
static int bad_image(prep *p, const batch_slot *sl, dt_error *err) {
    const char *file = p->files[p->items[sl->item].file];
    const char *why = sl->img_err ? sl->img_err->msg : "out of memory";
    if (sl->img_rc != DT_EINVAL || p->o->on_bad_image == DT_BAD_IMAGE_STOP)
        return dt_errorf(err, sl->img_rc, "%s: %s%s", file, why,
                         sl->img_rc == DT_EINVAL ? "; --on-bad-image skip leaves such records out and counts them" : "");
    if (!p->res->bad_images++)
        snprintf(p->res->first_bad_image, sizeof p->res->first_bad_image, "%.400s: %.600s", file, why);
    return DT_OK;
}

static int run_batches(prep *p, const uint64_t *perm, uint64_t n_val, dt_error *err) {
    const uint64_t N = p->n_docs;
    batch_slot *slots = calloc(BATCH_ITEMS, sizeof *slots);
    char *buf = NULL;
    uint64_t buf_cap = 0;
    if (!slots) return dt_errorf(err, DT_ENOMEM, "out of memory for a batch");
    const int nt = p->o->threads > 0 ? p->o->threads : omp_get_max_threads();
    const int llava = p->o->format == DT_PREP_LLAVA;
    const int batch_items = llava ? LLAVA_BATCH_ITEMS : BATCH_ITEMS;
    uint64_t pos = 0, item = p->doc_first[perm[0]];
    int rc = DT_OK;
    p->t0 = dt_clock_s();
    p->prog = (dt_prep_progress){.phase = 1, .bytes_total = p->bytes};
    while (pos < N && !rc) {
        /* the next items in the permuted order, up to BATCH_BYTES / BATCH_ITEMS */
        int ns = 0;
        uint64_t bytes = 0;
        while (pos < N && ns < batch_items && (ns == 0 || bytes + p->items[item].len <= BATCH_BYTES)) {
            uint64_t d = perm[pos];
            slots[ns] = (batch_slot){.item = item, .split = pos < n_val ? DT_SPLIT_VAL : DT_SPLIT_TRAIN,
                                     .first = item == p->doc_first[d]};
            bytes += p->items[item].len;
            ns++;
            if (++item == p->doc_first[d + 1] && ++pos < N) item = p->doc_first[perm[pos]];
        }
        if (bytes > buf_cap) {
            char *nb = realloc(buf, (size_t)bytes);
            if (!nb) {
                rc = dt_errorf(err, DT_ENOMEM, "out of memory for a batch of %llu bytes", (unsigned long long)bytes);
                break;
            }
            buf = nb;
            buf_cap = bytes;
        }
        uint64_t off = 0;
        for (int i = 0; i < ns && !rc; i++) {
            const prep_item *it = &p->items[slots[i].item];
            int fd = -1;
            slots[i].bytes = buf + off;
            off += it->len;
            if (!(rc = item_fd(p, it->file, &fd, err)))
                rc = pread_all(fd, slots[i].bytes, it->len, it->off, p->files[it->file], err);
        }
        if (rc) break;
        /* tokenize: each item on its own, any thread; results stay in their slots */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int i = 0; i < ns; i++) {
            dt_error e;
            slots[i].rc = dt_prepdoc_encode(&p->ctx, slots[i].bytes, p->items[slots[i].item].len, slots[i].first,
                                            &slots[i].ids, &slots[i].mask, &slots[i].n, &e);
            if (llava && !slots[i].rc) slot_image(p, &slots[i]);
        }
        for (int i = 0; i < ns && !rc; i++) {
            const prep_item *it = &p->items[slots[i].item];
            if (slots[i].rc) {   /* the first failure in order, its message made again */
                int32_t *ids;
                uint8_t *mask;
                size_t n;
                rc = dt_prepdoc_encode(&p->ctx, slots[i].bytes, it->len, slots[i].first, &ids, &mask, &n, err);
                if (!rc) rc = dt_errorf(err, DT_EINTERNAL, "tokenizing failed once and then not");
                dt_error_prefix(err, "%s:%llu", p->files[it->file], (unsigned long long)it->line);
                break;
            }
            if (slots[i].img_rc) {
                rc = bad_image(p, &slots[i], err);
                continue;
            }
            rc = split_put(p, slots[i].split, slots[i].ids, slots[i].mask, slots[i].n, slots[i].first, slots[i].crop,
                           err);
            p->prog.bytes_done += it->len;
            p->prog.tokens += slots[i].n;
            p->prog.docs += (uint64_t)slots[i].first;
        }
        for (int i = 0; i < ns; i++) {
            free(slots[i].ids);
            free(slots[i].mask);
            free(slots[i].crop);
            free(slots[i].img_err);
            slots[i] = (batch_slot){0};
        }
        if (!rc) rc = stopped(p, err);
        report(p);
    }
    free(slots);
    free(buf);
    for (int s = 0; s < 2 && !rc; s++)
        if (p->w[s]) rc = close_shard(p, s, err);
    return rc;
}

/* ---------------------------------------------------------------- manifest, commit */

static const char *const FORMAT_NAMES[] = {"text", "jsonl", "chat", "llava", "pairs", "prompts"};
static const char *const CHAT_NAMES[] = {"chatml", "llama3"};

cJSON *dt_prep_manifest_split(const dt_prep_result *r, int s, const char *count_key) {
    cJSON *sp = cJSON_CreateObject(), *sh = cJSON_CreateArray();
    cJSON_AddNumberToObject(sp, count_key, (double)r->docs[s]);
    cJSON_AddNumberToObject(sp, "tokens", (double)r->tokens[s]);
    cJSON_AddNumberToObject(sp, "trained_tokens", (double)r->trained[s]);
    for (int k = 0; k < r->shards[s]; k++) {
        char q[64];
        shard_file(s, k, q, sizeof q);
        cJSON_AddItemToArray(sh, cJSON_CreateString(q));
    }
    cJSON_AddItemToObject(sp, "shards", sh);
    return sp;
}

static int write_manifest(const prep *p, const char *path, dt_error *err) {
    const dt_prep_opts *o = p->o;
    const dt_prep_result *r = p->res;
    cJSON *root = cJSON_CreateObject(), *t = cJSON_CreateObject(), *in = cJSON_CreateArray(),
          *splits = cJSON_CreateObject();
    char id[17];
    snprintf(id, sizeof id, "%016llx", (unsigned long long)p->prepare_id);
    cJSON_AddStringToObject(root, "format", "dtrun-prepare");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "prepare_id", id);
    cJSON_AddStringToObject(t, "path", o->tokenizer);
    cJSON_AddStringToObject(t, "kind", dt_tok_get_kind(p->tok) == DT_TOK_SENTENCEPIECE ? "sentencepiece" : "bpe-json");
    cJSON_AddNumberToObject(t, "vocab_size", (double)r->vocab);
    cJSON_AddNumberToObject(t, "eot_id", p->ctx.eot);
    cJSON_AddStringToObject(t, "fingerprint", r->fingerprint);
    cJSON_AddItemToObject(root, "tokenizer", t);
    cJSON_AddNumberToObject(root, "token_bytes", r->token_bytes);
    cJSON_AddStringToObject(root, "input_format", FORMAT_NAMES[o->format]);
    if (o->format == DT_PREP_CHAT || o->format == DT_PREP_LLAVA)
        cJSON_AddStringToObject(root, "chat_template", CHAT_NAMES[o->chat]);
    cJSON_AddBoolToObject(root, "loss_mask", o->format == DT_PREP_CHAT || o->format == DT_PREP_LLAVA);
    if (o->format == DT_PREP_LLAVA) {
        cJSON *im = cJSON_CreateObject(), *m = cJSON_CreateArray(), *sd = cJSON_CreateArray();
        cJSON_AddStringToObject(im, "image_folder", o->image_folder);
        cJSON_AddStringToObject(im, "processor", "CLIPImageProcessor (transformers 5.x torchvision backend)");
        cJSON_AddNumberToObject(im, "shortest_edge", o->clip.shortest_edge);
        cJSON_AddNumberToObject(im, "crop_height", o->clip.crop_height);
        cJSON_AddNumberToObject(im, "crop_width", o->clip.crop_width);
        cJSON_AddBoolToObject(im, "pad_square", o->clip.pad_square);
        cJSON_AddStringToObject(im, "loader", o->clip.exif_transpose ? "load_image" : "open");
        for (int c = 0; c < 3; c++) {
            cJSON_AddItemToArray(m, cJSON_CreateNumber(o->clip.mean[c]));
            cJSON_AddItemToArray(sd, cJSON_CreateNumber(o->clip.std[c]));
        }
        cJSON_AddItemToObject(im, "image_mean", m);
        cJSON_AddItemToObject(im, "image_std", sd);
        cJSON_AddNumberToObject(im, "rescale_factor", o->clip.rescale);
        cJSON_AddNumberToObject(im, "image_token_id", p->ctx.image_id);
        cJSON_AddNumberToObject(im, "image_tokens", o->image_tokens);
        cJSON_AddStringToObject(im, "on_bad_image", o->on_bad_image == DT_BAD_IMAGE_SKIP ? "skip" : "stop");
        cJSON_AddNumberToObject(im, "max_image_pixels", (double)o->max_image_pixels);
        cJSON_AddNumberToObject(im, "skipped_bad_images", (double)r->bad_images);
        cJSON_AddItemToObject(root, "images", im);
    }
    cJSON_AddNumberToObject(root, "seed", (double)o->seed);
    cJSON_AddNumberToObject(root, "val_fraction", r->val_fraction);
    cJSON_AddNumberToObject(root, "shard_tokens", (double)o->shard_tokens);
    for (int i = 0; i < o->n_inputs; i++) cJSON_AddItemToArray(in, cJSON_CreateString(o->inputs[i]));
    cJSON_AddItemToObject(root, "inputs", in);
    cJSON_AddNumberToObject(root, "files", (double)r->files);
    cJSON_AddNumberToObject(root, "skipped_files", (double)r->skipped_files);
    cJSON_AddNumberToObject(root, "skipped_documents", (double)r->skipped_docs);
    cJSON_AddNumberToObject(root, "input_bytes", (double)r->bytes);
    for (int s = 0; s < 2; s++) {
        const char *name = split_name(s);
        cJSON *sp = dt_prep_manifest_split(r, s, "documents");
        if (o->format == DT_PREP_LLAVA) {   /* beside each token shard: NAME.px (dt_pixshard.h) */
            cJSON *pxs = cJSON_CreateArray();
            for (int k = 0; k < r->shards[s]; k++) {
                char q[64];
                shard_file(s, k, q, sizeof q);
                strcpy(q + strlen(q) - strlen(".bin"), ".px");
                cJSON_AddItemToArray(pxs, cJSON_CreateString(q));
            }
            cJSON_AddItemToObject(sp, "pixel_shards", pxs);
            cJSON_AddNumberToObject(sp, "images", (double)r->images[s]);
        }
        cJSON_AddItemToObject(splits, name, sp);
    }
    cJSON_AddItemToObject(root, "splits", splits);
    return dt_prep_manifest_write(root, path, err);
}

int dt_prep_manifest_write(struct cJSON *root, const char *path, dt_error *err) {
    char *text = dt_json_print(root);
    cJSON_Delete(root);
    if (!text) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    int rc = dt_json_write_file_atomic(path, text, err);
    free(text);
    return rc;
}

/* Moves the staged output into out: the old prepare.json goes first (the directory no
 * longer claims a complete output), then the old shards, then the new ones move in and
 * the new prepare.json last. */
static int commit(prep *p, dt_error *err) { return dt_prep_stage_commit(p->o->out, p->stage, p->res->shards, err); }

int dt_prep_stage_commit(const char *out, const char *stage, const int shards[2], dt_error *err) {
    char from[PATH_BYTES], to[PATH_BYTES];
    int rc = clear_manifest(out, err);
    if (!rc) rc = dt_fsync_dir(out, err);
    for (int s = 0; s < 2 && !rc; s++) {
        const char *name = split_name(s);
        join(to, sizeof to, out, name);
        if ((rc = clear_split(to, name, err))) break;
        join(from, sizeof from, stage, name);
        if (shards[s] && rename(from, to))
            rc = dt_errorf(err, DT_EIO, "%s: cannot move into place: %s", to, strerror(errno));
    }
    join(from, sizeof from, stage, DT_PREP_MANIFEST);
    join(to, sizeof to, out, DT_PREP_MANIFEST);
    if (!rc && rename(from, to)) rc = dt_errorf(err, DT_EIO, "%s: cannot move into place: %s", to, strerror(errno));
    if (!rc && rmdir(stage)) rc = dt_errorf(err, DT_EIO, "%s: cannot remove: %s", stage, strerror(errno));
    return rc ? rc : dt_fsync_dir(out, err);
}

/* ---------------------------------------------------------------- the run */

int dt_prep_stage_open(const char *out, char *stage, size_t n, int *created, dt_error *err) {
    int rc = check_out(out, err);
    if (rc) return rc;
    struct stat st;
    *created = stat(out, &st) != 0;
    if ((rc = dt_mkdirs(out, err))) return rc;
    if (join(stage, n, out, DT_PREP_STAGING)) return dt_errorf(err, DT_EINVAL, "%s: output path too long", out);
    if ((rc = clear_stage(stage, err))) return rc;
    if (mkdir(stage, 0755)) return dt_errorf(err, DT_EIO, "%s: cannot create: %s", stage, strerror(errno));
    return DT_OK;
}

void dt_prep_stage_abort(const char *out, const char *stage, int created) {
    dt_error ignored;
    clear_stage(stage, &ignored);   /* what this run staged; the old output is untouched */
    if (created) rmdir(out);
}

void dt_prep_shard_name(int split, int index, char *out, size_t n) { shard_file(split, index, out, n); }

int dt_prep_split(uint64_t N, double val_fraction, uint64_t seed, const char *what, uint64_t **perm,
                  uint64_t *n_val, double *used, dt_error *err) {
    /* the split: Hugging Face datasets' train_test_split takes ceil(test_size x n) */
    *n_val = 0;
    double frac = val_fraction == DT_PREP_VAL_AUTO ? (N > 1 ? DT_PREP_VAL_FRACTION : 0.0) : val_fraction;
    if (frac > 0) {
        double v = frac * (double)N;
        *n_val = (uint64_t)v;
        if ((double)*n_val < v) (*n_val)++;
        if (*n_val >= N)
            return dt_errorf(err, DT_EINVAL,
                             "--val-fraction %g of %llu %s(s) leaves none for training: give more %ss "
                             "or --val-fraction 0",
                             frac, (unsigned long long)N, what, what);
    }
    *used = frac;
    /* the order: Fisher-Yates from splitmix64 seeded with the seed alone */
    uint64_t *pm = malloc((size_t)(N ? N : 1) * sizeof *pm);
    if (!pm) return dt_errorf(err, DT_ENOMEM, "out of memory for %llu %ss", (unsigned long long)N, what);
    for (uint64_t i = 0; i < N; i++) pm[i] = i;
    uint64_t state = seed;
    for (uint64_t i = N - 1; N && i > 0; i--) {
        uint64_t j = dt_rng_next(&state) % (i + 1), t = pm[i];
        pm[i] = pm[j];
        pm[j] = t;
    }
    *perm = pm;
    return DT_OK;
}

void dt_prep_defaults(dt_prep_opts *o) {
    memset(o, 0, sizeof *o);
    o->format = DT_PREP_TEXT;
    o->chat = DT_CHAT_CHATML;
    o->val_fraction = DT_PREP_VAL_AUTO;
    o->seed = DT_PREP_SEED;
    o->shard_tokens = DT_PREP_SHARD_TOKENS;
    dt_clip_defaults(&o->clip, DT_PREP_IMAGE_SIZE);
    o->image_token_id = DT_PREP_IMAGE_ID_AUTO;
    o->image_tokens = DT_PREP_IMAGE_TOKENS;
    o->on_bad_image = DT_BAD_IMAGE_STOP;
    o->max_image_pixels = DT_IMAGE_MAX_PIXELS;
}

/* The run's id: the first 8 bytes of SHA-256 over what decides its output (tokenizer,
 * options, the input files' names and sizes), so a run repeated gives the same shards. */
static uint64_t run_id(const prep *p) {
    dt_sha256 h;
    unsigned char d[DT_SHA256_BYTES];
    const dt_prep_opts *o = p->o;
    dt_sha256_init(&h);
    dt_sha256_update(&h, p->fp, sizeof p->fp);
    int64_t v[5] = {(int64_t)o->seed, o->shard_tokens, o->format, o->chat, (int64_t)p->n_docs};
    dt_sha256_update(&h, v, sizeof v);
    if (o->format == DT_PREP_LLAVA) {   /* what decides the pixel shards and placeholders */
        int64_t im[9] = {o->clip.shortest_edge, o->clip.crop_height, o->clip.crop_width, o->clip.pad_square,
                         o->clip.exif_transpose, p->ctx.image_id, o->image_tokens, o->on_bad_image,
                         (int64_t)o->max_image_pixels};
        dt_sha256_update(&h, im, sizeof im);
        dt_sha256_update(&h, o->clip.mean, sizeof o->clip.mean);
        dt_sha256_update(&h, o->clip.std, sizeof o->clip.std);
        dt_sha256_update(&h, o->image_folder, strlen(o->image_folder) + 1);
    }
    dt_sha256_update(&h, &o->val_fraction, sizeof o->val_fraction);
    for (uint64_t i = 0; i < p->n_files; i++) dt_sha256_update(&h, p->files[i], strlen(p->files[i]) + 1);
    dt_sha256_update(&h, &p->bytes, sizeof p->bytes);
    dt_sha256_final(&h, d);
    uint64_t id = 0;
    for (int i = 0; i < 8; i++) id = id << 8 | d[i];
    return id;
}

static int check_opts(const dt_prep_opts *o, dt_error *err) {
    if (!o->tokenizer || !o->tokenizer[0]) return dt_errorf(err, DT_EINVAL, "no tokenizer given (--tokenizer)");
    if (!o->out || !o->out[0]) return dt_errorf(err, DT_EINVAL, "no output directory given (--out)");
    if (o->n_inputs < 1) return dt_errorf(err, DT_EINVAL, "no inputs given (text files, folders or JSONL files)");
    if (!(o->val_fraction >= 0.0 && o->val_fraction < 1.0) && o->val_fraction != DT_PREP_VAL_AUTO)
        return dt_errorf(err, DT_EINVAL, "--val-fraction %g: must be in [0, 1)", o->val_fraction);
    if (o->shard_tokens < 1) return dt_errorf(err, DT_EINVAL, "--shard-tokens %lld: must be >= 1", (long long)o->shard_tokens);
    if (o->format == DT_PREP_LLAVA) {
        if (!o->image_folder || !o->image_folder[0])
            return dt_errorf(err, DT_EINVAL, "--format llava needs --image-folder DIR (the records' \"image\" paths "
                             "are relative to it, as LLaVA's --image_folder)");
        if (o->image_tokens < 1 || o->image_tokens > (1 << 20))
            return dt_errorf(err, DT_EINVAL, "--image-tokens %d: must be 1..%d", o->image_tokens, 1 << 20);
        if (o->image_token_id < DT_PREP_IMAGE_ID_AUTO || o->image_token_id >= INT32_MAX)
            return dt_errorf(err, DT_EINVAL, "--image-token-id %lld: must be a token id >= 0",
                             (long long)o->image_token_id);
        if (o->max_image_pixels < 1) return dt_errorf(err, DT_EINVAL, "--max-image-pixels: must be >= 1");
        if (dt_clip_check(&o->clip, err)) return err->code;
    }
    if (o->format == DT_PREP_PAIRS)
        return dt_errorf(err, DT_EINTERNAL, "prepare: pairs are prepared by dt_prepare_pairs, not dt_prepare");
    if (o->format < DT_PREP_TEXT || o->format > DT_PREP_LLAVA || o->chat < DT_CHAT_CHATML || o->chat > DT_CHAT_LLAMA3)
        return dt_errorf(err, DT_EINTERNAL, "prepare: format %d / chat template %d out of range", o->format, o->chat);
    if (strlen(o->out) + sizeof "/" DT_PREP_STAGING "/" DT_PREP_TRAIN_DIR "/train-000000.bin.tmp" >= PATH_BYTES)
        return dt_errorf(err, DT_EINVAL, "%s: output path too long", o->out);
    return DT_OK;
}

static int run(prep *p, int *created, dt_error *err) {
    const dt_prep_opts *o = p->o;
    dt_prep_result *r = p->res;
    int rc = dt_tok_load(o->tokenizer, &p->tok, err);
    if (rc) return rc;
    if ((rc = dt_prepdoc_init(&p->ctx, p->tok, o->tokenizer, o->format, o->chat, err))) return rc;
    dt_tok_fingerprint(p->tok, p->fp);
    dt_sha256_hex(p->fp, r->fingerprint);
    r->vocab = dt_tok_vocab_size(p->tok);
    if (o->format == DT_PREP_LLAVA) {
        int64_t id = o->image_token_id;
        if (id == DT_PREP_IMAGE_ID_AUTO && (id = dt_tok_token_id(p->tok, DT_PREP_IMAGE_TOKEN)) < 0)
            return dt_errorf(err, DT_EINVAL, "%s: the tokenizer has no " DT_PREP_IMAGE_TOKEN " token: give the model's "
                             "image token id with --image-token-id (its config.json's image_token_index, e.g. 32000 "
                             "for llava-1.5)", o->tokenizer);
        size_t tl = 0;
        const char *text = id < r->vocab ? dt_tok_token_text(p->tok, (int32_t)id, &tl) : NULL;
        if (text && (tl != strlen(DT_PREP_IMAGE_TOKEN) || memcmp(text, DT_PREP_IMAGE_TOKEN, tl)))
            return dt_errorf(err, DT_EINVAL, "--image-token-id %lld is the tokenizer's token \"%.*s\", which text can "
                             "produce too: give the id of its " DT_PREP_IMAGE_TOKEN " token, or one past its vocabulary "
                             "of %lld (the model's image_token_index)", (long long)id, (int)(tl < 40 ? tl : 40), text,
                             (long long)r->vocab);
        p->ctx.image_id = (int32_t)id;
        p->ctx.image_tokens = o->image_tokens;
        if (id >= r->vocab) r->vocab = id + 1;   /* an id the model adds past the tokenizer's vocabulary */
    }
    r->token_bytes = dt_shard2_token_bytes((uint64_t)r->vocab);
    p->piece = dt_tok_get_kind(p->tok) == DT_TOK_SENTENCEPIECE ? SPM_PIECE_BYTES : PIECE_BYTES;

    /* the output directory: checked, created, a stale staging folder removed */
    if ((rc = dt_prep_stage_open(o->out, p->stage, sizeof p->stage, created, err))) return rc;
    if (stat(o->out, &p->out_st)) return dt_errorf(err, DT_EIO, "%s: cannot stat: %s", o->out, strerror(errno));

    /* pass 1: the index */
    if (!(p->buf = malloc(PIECE_BYTES > READ_BLOCK ? PIECE_BYTES : READ_BLOCK)))
        return dt_errorf(err, DT_ENOMEM, "out of memory");
    p->t0 = dt_clock_s();
    for (int i = 0; i < o->n_inputs && !rc; i++) rc = add_path(p, o->inputs[i], 0, 1, err);
    if (rc) return rc;
    if (p->n_docs == 0)
        return dt_errorf(err, DT_EINVAL, "%s%s: no documents found (%llu files read, %llu skipped)", o->inputs[0],
                         o->n_inputs > 1 ? " ..." : "", (unsigned long long)p->n_files,
                         (unsigned long long)p->skipped_files);
    p->doc_first[p->n_docs] = p->n_items;
    r->files = p->n_files;
    r->skipped_files = p->skipped_files;
    r->skipped_docs = p->skipped_docs;
    r->bytes = p->bytes;

    const uint64_t N = p->n_docs;
    uint64_t n_val = 0, *perm = NULL;
    if ((rc = dt_prep_split(N, o->val_fraction, o->seed, "document", &perm, &n_val, &r->val_fraction, err)))
        return rc;
    p->prepare_id = run_id(p);
    for (int s = 0; s < 2; s++) {
        dt_shard_header *h = &p->h[s];
        memset(h, 0, sizeof *h);
        h->token_bytes = r->token_bytes;
        h->flags = o->format == DT_PREP_CHAT || o->format == DT_PREP_LLAVA ? DT_SHARD2_FLAG_MASK : 0;
        h->split = (uint32_t)s;
        h->vocab = (uint64_t)r->vocab;
        h->prepare_id = p->prepare_id;
        h->eot_id = (uint32_t)p->ctx.eot;
        memcpy(h->fingerprint, p->fp, sizeof h->fingerprint);
        dt_pix_header *ph = &p->ph[s];
        memset(ph, 0, sizeof *ph);
        ph->height = (uint32_t)o->clip.crop_height;
        ph->width = (uint32_t)o->clip.crop_width;
        ph->split = (uint32_t)s;
        ph->prepare_id = p->prepare_id;
        ph->image_token_id = (uint32_t)p->ctx.image_id;
        ph->image_tokens = (uint32_t)o->image_tokens;
        memcpy(ph->mean, o->clip.mean, sizeof ph->mean);
        memcpy(ph->std, o->clip.std, sizeof ph->std);
        ph->rescale = o->clip.rescale;
        ph->flags = (o->clip.pad_square ? DT_PIX_FLAG_PAD : 0) | (o->clip.exif_transpose ? DT_PIX_FLAG_LOAD_IMAGE : 0);
    }
    for (int i = 0; i < FD_CACHE; i++) p->fds[i].fd = -1;
    rc = run_batches(p, perm, n_val, err);
    free(perm);
    if (rc) return rc;
    char q[PATH_BYTES];
    join(q, sizeof q, p->stage, DT_PREP_MANIFEST);
    if ((rc = write_manifest(p, q, err))) return rc;
    return commit(p, err);
}

int dt_prepare(const dt_prep_opts *o, dt_prep_result *res, dt_error *err) {
    memset(res, 0, sizeof *res);
    int rc = check_opts(o, err);
    if (rc) return rc;
    double t0 = dt_clock_s();
    prep *p = calloc(1, sizeof *p);
    if (!p) return dt_errorf(err, DT_ENOMEM, "out of memory");
    p->o = o;
    p->res = res;
    for (int i = 0; i < FD_CACHE; i++) p->fds[i].fd = -1;
    int created = 0;
    rc = run(p, &created, err);
    for (int s = 0; s < 2; s++) {
        dt_shard_writer_abort(p->w[s]);
        dt_pix_writer_abort(p->pw[s]);
    }
    for (int i = 0; i < FD_CACHE; i++)
        if (p->fds[i].fd >= 0) close(p->fds[i].fd);
    if (rc && p->stage[0]) dt_prep_stage_abort(o->out, p->stage, created);
    dt_tok_free(p->tok);
    for (uint64_t i = 0; i < p->n_files; i++) free(p->files[i]);
    free(p->files);
    free(p->items);
    free(p->doc_first);
    free(p->buf);
    free(p);
    res->seconds = since(t0);
    return rc;
}
