/* pairshard.c — see dt_pairshard.h. Little-endian hosts only, as dt_shard.h's shards. */
#include "dt_pairshard.h"

#include <dirent.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dt_crc32c.h"
#include "dt_file.h"
#include "dt_sha256.h"

/* header field offsets (dt_pairshard.h's table) */
enum {
    PS_MAGIC = 0, PS_VERSION = 4, PS_HEADER = 8, PS_FLAGS = 12, PS_SPLIT = 16, PS_INDEX = 20, PS_VOCAB = 24,
    PS_PAIRS = 32, PS_TOKENS = 40, PS_PREPARE = 48, PS_PAD = 56, PS_EOT = 60, PS_FP = 64, PS_PAYLOAD_CRC = 96,
    PS_HEADER_CRC = 100, PS_CRC_SPAN = 100
};
#define PS_MAGIC_BYTES 4
/* a shard holds at most this many bytes (read whole into memory) */
#define PS_MAX_FILE_BYTES ((uint64_t)1 << 40)
#define PS_NAME_MAX 4096

static uint32_t get32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static uint64_t get64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, sizeof v); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, sizeof v); }

/* ---- writer ---- */

int dt_pairshard_write(const char *path, const dt_pairshard_header *h, const dt_pair *pairs, const dt_pair_src *src,
                       size_t n, dt_error *err) {
    uint64_t tokens = 0;
    for (size_t i = 0; i < n; i++) {
        for (int s = 0; s < 2; s++) {
            if (pairs[i].n[s] <= pairs[i].prompt_n || pairs[i].n[s] > UINT32_MAX)
                return dt_errorf(err, DT_EINVAL, "%s: pair %zu: a side with no completion token", path, i);
            for (size_t k = 0; k < pairs[i].n[s]; k++)
                if (pairs[i].ids[s][k] < 0 || (uint64_t)pairs[i].ids[s][k] >= h->vocab)
                    return dt_errorf(err, DT_EINVAL, "%s: pair %zu: token %d outside the vocabulary of %llu", path,
                                     i, pairs[i].ids[s][k], (unsigned long long)h->vocab);
        }
        tokens += pairs[i].n[0] + pairs[i].n[1];
    }
    const size_t index_bytes = n * DT_PAIRSHARD_INDEX_BYTES, len = DT_SHARD2_HEADER_BYTES + index_bytes + 4 * tokens;
    unsigned char *b = calloc(1, len);
    if (!b) return dt_errorf(err, DT_ENOMEM, "%s: out of memory for %zu bytes", path, len);
    unsigned char *ix = b + DT_SHARD2_HEADER_BYTES, *tk = ix + index_bytes;
    for (size_t i = 0; i < n; i++, ix += DT_PAIRSHARD_INDEX_BYTES) {
        put64(ix, src[i].line);
        put32(ix + 8, src[i].input);
        put32(ix + 12, (uint32_t)pairs[i].prompt_n);
        for (int s = 0; s < 2; s++) {
            put32(ix + 16 + 4 * s, (uint32_t)pairs[i].n[s]);
            memcpy(tk, pairs[i].ids[s], 4 * pairs[i].n[s]);
            tk += 4 * pairs[i].n[s];
        }
    }
    memcpy(b + PS_MAGIC, DT_PAIRSHARD_MAGIC, PS_MAGIC_BYTES);
    put32(b + PS_VERSION, DT_PAIRSHARD_VERSION);
    put32(b + PS_HEADER, DT_SHARD2_HEADER_BYTES);
    put32(b + PS_FLAGS, h->flags);
    put32(b + PS_SPLIT, h->split);
    put32(b + PS_INDEX, h->shard_index);
    put64(b + PS_VOCAB, h->vocab);
    put64(b + PS_PAIRS, n);
    put64(b + PS_TOKENS, tokens);
    put64(b + PS_PREPARE, h->prepare_id);
    put32(b + PS_PAD, h->pad_id);
    put32(b + PS_EOT, h->eot_id);
    memcpy(b + PS_FP, h->fingerprint, DT_SHARD2_FINGERPRINT_BYTES);
    put32(b + PS_PAYLOAD_CRC, dt_crc32c(0, b + DT_SHARD2_HEADER_BYTES, len - DT_SHARD2_HEADER_BYTES));
    put32(b + PS_HEADER_CRC, dt_crc32c(0, b, PS_CRC_SPAN));
    int rc = dt_write_file_atomic(path, b, len, err);
    free(b);
    return rc;
}

/* ---- reader ---- */

typedef struct {
    char *path;
    unsigned char *bytes;   /* the whole file */
    uint64_t pairs;
    const unsigned char *index;
    const int32_t *tokens;
    uint64_t *tok_off;      /* [pairs]: element offset of each pair's chosen tokens */
} ps_shard;

struct dt_pairset {
    ps_shard *sh;
    int nsh;
    int64_t count;
    int64_t *first;         /* [nsh + 1]: global index of each shard's first pair */
    int32_t pad_id;
    uint32_t flags;
    uint64_t prepare_id;
    unsigned char fp[DT_SHARD2_FINGERPRINT_BYTES];
};

/* The header and every pair of one file; tokens below vocab. */
static int check_shard(ps_shard *s, size_t len, const dt_pairset_opts *o, dt_error *err) {
    const unsigned char *b = s->bytes;
    const char *p = s->path;
    if (len < PS_MAGIC_BYTES || memcmp(b, DT_PAIRSHARD_MAGIC, PS_MAGIC_BYTES))
        return dt_errorf(err, DT_EINVAL, "%s: not a pair shard (no DTPS magic): prepare %s data with dtrun prepare "
                         "--format %s", p, o->prompts ? "prompt" : "preference", o->prompts ? "prompts" : "pairs");
    if (len < DT_SHARD2_HEADER_BYTES)
        return dt_errorf(err, DT_EINVAL, "%s: truncated: %zu bytes, less than the %d-byte header", p, len,
                         DT_SHARD2_HEADER_BYTES);
    if (get32(b + PS_HEADER_CRC) != dt_crc32c(0, b, PS_CRC_SPAN))
        return dt_errorf(err, DT_EINVAL, "%s: header CRC mismatch: the file is damaged; prepare it again", p);
    if (get32(b + PS_VERSION) != DT_PAIRSHARD_VERSION || get32(b + PS_HEADER) != DT_SHARD2_HEADER_BYTES ||
        (get32(b + PS_FLAGS) & ~DT_PAIRSHARD_PROMPTS) != 0)
        return dt_errorf(err, DT_EINVAL, "%s: pair shard version %u (header %u bytes, flags %u) is not this dtrun's "
                         "version %d: prepare it again with this dtrun", p, get32(b + PS_VERSION),
                         get32(b + PS_HEADER), get32(b + PS_FLAGS), DT_PAIRSHARD_VERSION);
    s->pairs = get64(b + PS_PAIRS);
    const uint64_t tokens = get64(b + PS_TOKENS);
    if (s->pairs > PS_MAX_FILE_BYTES / DT_PAIRSHARD_INDEX_BYTES || tokens > PS_MAX_FILE_BYTES / 4 ||
        DT_SHARD2_HEADER_BYTES + s->pairs * DT_PAIRSHARD_INDEX_BYTES + 4 * tokens != len)
        return dt_errorf(err, DT_EINVAL, "%s: truncated or damaged: the header says %llu pairs of %llu tokens but the "
                         "file has %zu bytes", p, (unsigned long long)s->pairs, (unsigned long long)tokens, len);
    if (get32(b + PS_PAYLOAD_CRC) != dt_crc32c(0, b + DT_SHARD2_HEADER_BYTES, len - DT_SHARD2_HEADER_BYTES))
        return dt_errorf(err, DT_EINVAL, "%s: payload CRC mismatch: the file is damaged; prepare it again", p);
    if (o->vocab > 0 && get64(b + PS_VOCAB) > (uint64_t)o->vocab)
        return dt_errorf(err, DT_EINVAL, "%s: its tokenizer has %llu ids but the model's vocabulary is %lld: prepare "
                         "the pairs with the model's own tokenizer", p, (unsigned long long)get64(b + PS_VOCAB),
                         (long long)o->vocab);
    s->index = b + DT_SHARD2_HEADER_BYTES;
    s->tokens = (const int32_t *)(s->index + s->pairs * DT_PAIRSHARD_INDEX_BYTES);
    s->tok_off = malloc((s->pairs ? s->pairs : 1) * sizeof *s->tok_off);
    if (!s->tok_off) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", p);
    uint64_t at = 0;
    for (uint64_t i = 0; i < s->pairs; i++) {
        const unsigned char *ix = s->index + i * DT_PAIRSHARD_INDEX_BYTES;
        const uint32_t pn = get32(ix + 12), nc = get32(ix + 16), nr = get32(ix + 20);
        if (nc <= pn || nr <= pn || at + nc + nr > tokens)
            return dt_errorf(err, DT_EINVAL, "%s: pair %llu: lengths %u / %u with a %u-token prompt do not fit the "
                             "file: it is damaged; prepare it again", p, (unsigned long long)i, nc, nr, pn);
        s->tok_off[i] = at;
        at += nc + nr;
    }
    const uint64_t vocab = get64(b + PS_VOCAB);
    for (uint64_t k = 0; k < tokens; k++)
        if ((uint32_t)s->tokens[k] >= vocab)
            return dt_errorf(err, DT_EINVAL, "%s: token %u at %llu outside its vocabulary of %llu: damaged", p,
                             (uint32_t)s->tokens[k], (unsigned long long)k, (unsigned long long)vocab);
    return at == tokens ? DT_OK
                        : dt_errorf(err, DT_EINVAL, "%s: the pairs hold %llu tokens, the header says %llu: damaged",
                                    p, (unsigned long long)at, (unsigned long long)tokens);
}

/* Every shard against the first: one prepare run, one tokenizer; against the caller's tokenizer. */
static int check_set(dt_pairset *s, const dt_pairset_opts *o, dt_error *err) {
    for (int k = 0; k < s->nsh; k++) {
        const unsigned char *b = s->sh[k].bytes;
        if (k == 0) {
            s->pad_id = (int32_t)get32(b + PS_PAD);
            s->flags = get32(b + PS_FLAGS);
            s->prepare_id = get64(b + PS_PREPARE);
            memcpy(s->fp, b + PS_FP, sizeof s->fp);
        } else if (get64(b + PS_PREPARE) != s->prepare_id || memcmp(b + PS_FP, s->fp, sizeof s->fp) ||
                   get32(b + PS_FLAGS) != s->flags) {
            return dt_errorf(err, DT_EINVAL, "%s and %s are of different prepare runs: give one dtrun prepare "
                             "output's shards", s->sh[0].path, s->sh[k].path);
        }
    }
    const int prompts = (s->flags & DT_PAIRSHARD_PROMPTS) != 0;
    if (prompts != (o->prompts != 0))
        return dt_errorf(err, DT_EINVAL, "%s: %s, but this run's objective reads %s: prepare them with dtrun prepare "
                         "--format %s", s->sh[0].path, prompts ? "prompt records (grpo)" : "preference pairs",
                         o->prompts ? "prompt records" : "preference pairs", o->prompts ? "prompts" : "pairs");
    if (o->fingerprint && memcmp(o->fingerprint, s->fp, sizeof s->fp)) {
        char a[2 * DT_SHA256_BYTES + 1];
        dt_sha256_hex(s->fp, a);
        return dt_errorf(err, DT_EINVAL, "%s: prepared with tokenizer %.16s, not the model's; %s", s->sh[0].path, a,
                         o->fingerprint_hint ? o->fingerprint_hint : "prepare the pairs with the model's tokenizer");
    }
    return DT_OK;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The *.bin files of dir, sorted (malloc'd names, *n of them). */
static int list_dir(const char *dir, char ***names, int *n, dt_error *err) {
    DIR *d = opendir(dir);
    if (!d) return dt_errorf(err, DT_EINVAL, "%s: cannot open: %s", dir, strerror(errno));
    struct dirent *e;
    int cap = 0, rc = DT_OK;
    *names = NULL;
    *n = 0;
    while (!rc && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".bin")) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **g = realloc(*names, (size_t)cap * sizeof *g);
            if (!g) rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", dir);
            else *names = g;
        }
        if (!rc && !((*names)[(*n)++] = malloc(strlen(dir) + l + 2))) rc = dt_errorf(err, DT_ENOMEM, "out of memory");
        if (!rc) sprintf((*names)[*n - 1], "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (!rc && *n == 0) rc = dt_errorf(err, DT_EINVAL, "%s: no pair shards (*.bin) in it: prepare preference data "
                                       "with dtrun prepare --format pairs", dir);
    if (!rc) qsort(*names, (size_t)*n, sizeof **names, name_cmp);
    return rc;
}

int dt_pairset_open(const char *path, const dt_pairset_opts *o, dt_pairset **out, dt_error *err) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st)) return dt_errorf(err, DT_EINVAL, "%s: not found: %s", path, strerror(errno));
    dt_pairset *s = calloc(1, sizeof *s);
    if (!s) return dt_errorf(err, DT_ENOMEM, "out of memory");
    char **names = NULL;
    int n = 0, rc = DT_OK;
    if (S_ISDIR(st.st_mode)) {
        rc = list_dir(path, &names, &n, err);
    } else if ((names = malloc(sizeof *names)) && (names[0] = strdup(path))) {
        n = 1;
    } else {
        rc = dt_errorf(err, DT_ENOMEM, "out of memory");
    }
    if (!rc && (!(s->sh = calloc((size_t)n, sizeof *s->sh)) || !(s->first = calloc((size_t)n + 1, sizeof *s->first))))
        rc = dt_errorf(err, DT_ENOMEM, "out of memory");
    for (int k = 0; k < n && !rc; k++) {
        ps_shard *sh = &s->sh[k];
        size_t len = 0;
        sh->path = names[k];
        names[k] = NULL;
        s->nsh++;
        rc = dt_file_read(sh->path, "pair shard", PS_MAX_FILE_BYTES, (char **)&sh->bytes, &len, err);
        if (!rc) rc = check_shard(sh, len, o, err);
        s->first[k + 1] = s->first[k] + (int64_t)sh->pairs;
    }
    for (int k = 0; k < n; k++) free(names[k]);
    free(names);
    if (!rc) rc = check_set(s, o, err);
    if (rc) {
        dt_pairset_free(s);
        return rc;
    }
    s->count = s->first[s->nsh];
    *out = s;
    return DT_OK;
}

void dt_pairset_free(dt_pairset *s) {
    if (!s) return;
    for (int k = 0; k < s->nsh; k++) {
        free(s->sh[k].path);
        free(s->sh[k].bytes);
        free(s->sh[k].tok_off);
    }
    free(s->sh);
    free(s->first);
    free(s);
}

int64_t dt_pairset_count(const dt_pairset *s) { return s->count; }
int32_t dt_pairset_pad_id(const dt_pairset *s) { return s->pad_id; }
const unsigned char *dt_pairset_fingerprint(const dt_pairset *s) { return s->fp; }

/* Pair i as a dt_pair viewing the shard's tokens (never freed), with its shard and index. */
static void pair_at(const dt_pairset *s, int64_t i, dt_pair *p, const ps_shard **sh, uint64_t *j) {
    int k = 0;
    while (k + 1 < s->nsh && s->first[k + 1] <= i) k++;
    *sh = &s->sh[k];
    *j = (uint64_t)(i - s->first[k]);
    const unsigned char *ix = (*sh)->index + *j * DT_PAIRSHARD_INDEX_BYTES;
    int32_t *t = (int32_t *)(uintptr_t)((*sh)->tokens + (*sh)->tok_off[*j]);
    p->prompt_n = get32(ix + 12);
    p->n[0] = get32(ix + 16);
    p->n[1] = get32(ix + 20);
    p->ids[0] = t;
    p->ids[1] = t + p->n[0];
    p->truncated = 0;
}

void dt_pairset_prompt(const dt_pairset *s, int64_t i, const int32_t **ids, int64_t *n, const int32_t **answer,
                       int64_t *answer_n, int *has_answer, char *where, size_t wcap) {
    dt_pair p;
    const ps_shard *sh;
    uint64_t j;
    pair_at(s, i, &p, &sh, &j);
    const unsigned char *ix = sh->index + j * DT_PAIRSHARD_INDEX_BYTES;
    snprintf(where, wcap, "input #%u line %llu (%s, record %llu)", get32(ix + 8), (unsigned long long)get64(ix),
             sh->path, (unsigned long long)j);
    *ids = p.ids[0];
    *n = (int64_t)p.prompt_n;
    *has_answer = p.ids[0][p.prompt_n] != 0;
    *answer = p.ids[0] + p.prompt_n + 1;
    *answer_n = (int64_t)(p.n[0] - p.prompt_n - 1);
}

/* Pair i (shard sh, index j there) against a sequence of T tokens: its prompt must leave room. */
static int check_prompt(const dt_pairset *s, const dt_pair *p, const ps_shard *sh, uint64_t j, int64_t T, dt_error *err) {
    (void)s;
    if (p->prompt_n < (size_t)T) return DT_OK;
    const unsigned char *ix = sh->index + j * DT_PAIRSHARD_INDEX_BYTES;
    return dt_errorf(err, DT_EINVAL, "input #%u line %llu (%s, pair %llu): the prompt is %zu tokens, the plan's "
                     "seq_len %lld leaves no room for a completion; shorten it or re-plan with a longer --seq",
                     get32(ix + 8), (unsigned long long)get64(ix), sh->path, (unsigned long long)j, p->prompt_n,
                     (long long)T);
}

int dt_pairset_check_len(const dt_pairset *s, int64_t T, dt_error *err) {
    for (int64_t i = 0; i < s->count; i++) {
        dt_pair p;
        const ps_shard *sh;
        uint64_t j;
        pair_at(s, i, &p, &sh, &j);
        if (check_prompt(s, &p, sh, j, T, err)) return err->code;
    }
    return DT_OK;
}

int dt_pairset_batch(const dt_pairset *s, const int64_t *idx, int64_t n, int64_t T, int32_t *ids, int32_t *targets,
                     int64_t *ntrunc, dt_error *err) {
    dt_pair *ps = malloc((size_t)(n > 0 ? n : 1) * sizeof *ps);
    if (!ps) return dt_errorf(err, DT_ENOMEM, "out of memory for a batch of %lld pairs", (long long)n);
    int64_t cut = 0;
    int rc = DT_OK;
    for (int64_t b = 0; b < n && !rc; b++) {
        const ps_shard *sh;
        uint64_t j;
        if (idx[b] < 0 || idx[b] >= s->count) {
            rc = dt_errorf(err, DT_EINTERNAL, "pair %lld outside the set of %lld", (long long)idx[b], (long long)s->count);
            break;
        }
        pair_at(s, idx[b], &ps[b], &sh, &j);
        if ((rc = check_prompt(s, &ps[b], sh, j, T, err))) break;
        for (int side = 0; side < 2; side++)
            if (ps[b].n[side] > (size_t)T) ps[b].n[side] = (size_t)T, cut++;
    }
    if (!rc) rc = dt_pair_batch(ps, n, T, s->pad_id, ids, targets, err);
    free(ps);
    if (ntrunc) *ntrunc = cut;
    return rc;
}
