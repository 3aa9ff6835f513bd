/* tokenizer.c — byte-level BPE tokenizer.json (dt_tokenizer.h, docs/tokenizers.md), and the
 * dispatch to SentencePiece models (dt_spm.h, tokenizer_spm.cc) for files that are not JSON.
 *
 * Tokens are kept as raw bytes: at load every vocabulary string is mapped back through
 * ByteLevel's byte-to-unicode table (GPT-2's bytes_to_unicode), so encoding works on the
 * text's bytes directly and decoding is a concatenation. A merge "a b" becomes
 * (id(a), id(b)) -> (rank, id(ab)) in a hash table; BPE of one pre-token starts from one
 * symbol per byte and repeatedly merges the adjacent pair of lowest rank (leftmost on
 * ties), which is the order `tokenizers`' priority queue gives. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_file.h"
#include "dt_json.h"
#include "dt_sha256.h"
#include "dt_spm.h"
#include "dt_tokenizer.h"

#define TOK_SUPPORTED "byte-level BPE tokenizer.json (GPT-2, Llama-3, Qwen2) is supported"
#define TOK_MAX_STAGES 8
/* NFC fast path. In the Unicode Character Database every code point below U+0300 has
 * NFC_Quick_Check = Yes and Canonical_Combining_Class = 0, and the second character of
 * every canonical composition is at U+0300 or above (DerivedNormalizationProps.txt,
 * UnicodeData.txt; checked against Python's unicodedata 14.0): text whose bytes are all
 * below 0xCC, the UTF-8 lead byte of U+0300, is already NFC. */
#define NFC_SAFE_BYTE_LIMIT 0xCC

/* ByteLevel's default split regex (tokenizers, pre_tokenizers/byte_level.rs) */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---------------------------------------------------------------- hash tables */

typedef struct {
    char *key;     /* raw bytes, owned (NULL: empty slot) */
    size_t len;
    int32_t id;
} str_slot;

typedef struct {
    str_slot *s;
    size_t cap, n; /* cap a power of two */
} str_map;

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static int32_t str_map_get(const str_map *m, const char *k, size_t n) {
    if (!m->cap) return -1;
    for (size_t i = hash_bytes(k, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        const str_slot *s = &m->s[i];
        if (!s->key) return -1;
        if (s->len == n && !memcmp(s->key, k, n)) return s->id;
    }
}

static int str_map_grow(str_map *m) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    str_slot *ns = calloc(cap, sizeof *ns);
    if (!ns) return DT_ENOMEM;
    for (size_t j = 0; j < m->cap; j++) {
        if (!m->s[j].key) continue;
        size_t i = hash_bytes(m->s[j].key, m->s[j].len) & (cap - 1);
        while (ns[i].key) i = (i + 1) & (cap - 1);
        ns[i] = m->s[j];
    }
    free(m->s);
    m->s = ns;
    m->cap = cap;
    return DT_OK;
}

/* Inserts a copy of k; 1 when k was already there (nothing changed), <0 never. */
static int str_map_put(str_map *m, const char *k, size_t n, int32_t id, int *dup) {
    *dup = 0;
    if ((m->n + 1) * 2 > m->cap && str_map_grow(m)) return DT_ENOMEM;
    size_t i = hash_bytes(k, n) & (m->cap - 1);
    for (; m->s[i].key; i = (i + 1) & (m->cap - 1)) {
        if (m->s[i].len == n && !memcmp(m->s[i].key, k, n)) {
            *dup = 1;
            return DT_OK;
        }
    }
    char *c = malloc(n + 1);
    if (!c) return DT_ENOMEM;
    memcpy(c, k, n);
    c[n] = '\0';
    m->s[i] = (str_slot){c, n, id};
    m->n++;
    return DT_OK;
}

static void str_map_free(str_map *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->s[i].key);
    free(m->s);
    memset(m, 0, sizeof *m);
}

typedef struct {
    uint64_t key; /* (left << 32 | right) + 1; 0: empty */
    int32_t rank, id;
} pair_slot;

typedef struct {
    pair_slot *s;
    size_t cap, n;
} pair_map;

static uint64_t pair_key(int32_t a, int32_t b) { return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1; }

static const pair_slot *pair_map_get(const pair_map *m, int32_t a, int32_t b) {
    if (!m->cap) return NULL;
    uint64_t k = pair_key(a, b);
    for (size_t i = hash_bytes(&k, sizeof k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->s[i].key) return NULL;
        if (m->s[i].key == k) return &m->s[i];
    }
}

static int pair_map_put(pair_map *m, int32_t a, int32_t b, int32_t rank, int32_t id) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        pair_slot *ns = calloc(cap, sizeof *ns);
        if (!ns) return DT_ENOMEM;
        for (size_t j = 0; j < m->cap; j++) {
            if (!m->s[j].key) continue;
            size_t i = hash_bytes(&m->s[j].key, sizeof m->s[j].key) & (cap - 1);
            while (ns[i].key) i = (i + 1) & (cap - 1);
            ns[i] = m->s[j];
        }
        free(m->s);
        m->s = ns;
        m->cap = cap;
    }
    uint64_t k = pair_key(a, b);
    size_t i = hash_bytes(&k, sizeof k) & (m->cap - 1);
    for (; m->s[i].key; i = (i + 1) & (m->cap - 1))
        if (m->s[i].key == k) return DT_OK; /* a repeated merge keeps its first rank */
    m->s[i] = (pair_slot){k, rank, id};
    m->n++;
    return DT_OK;
}

/* ---------------------------------------------------------------- the tokenizer */

typedef struct {
    char *text;
    size_t len;
    int32_t id;
    int special;
} added_tok;

typedef struct {
    pcre2_code *re;
} split_stage;

struct dt_tokenizer {
    str_map vocab;         /* raw bytes -> id (model vocabulary) */
    pair_map merges;       /* (left id, right id) -> rank, merged id */
    int32_t byte_id[256];  /* id of each single byte, -1 when missing */
    int ignore_merges;
    added_tok *added;
    int n_added;
    str_map added_map;     /* added token content -> index into added */
    uint8_t added_first[256]; /* 1: some added token starts with this byte */
    split_stage stages[TOK_MAX_STAGES];
    int n_stages;
    int add_prefix_space;
    const UNormalizer2 *nfc; /* the NFC normalizer (ICU) when the file asks for it, else NULL */
    dt_spm *spm;           /* a SentencePiece model: everything above is unused */
    int32_t n_ids;         /* vocab size */
    char **id_text;        /* id -> bytes (NULL: no token) */
    size_t *id_len;
};

/* ByteLevel: bytes_to_unicode(). byte -> code point, and its inverse. */
static void byte_level_table(uint32_t b2u[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        b2u[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* Decodes one UTF-8 character at s (valid: cJSON strings passed the strict validator). */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    if (s[0] < 0x80 || n < 2) {
        *cp = s[0];
        return 1;
    }
    if ((s[0] & 0xE0) == 0xC0) {
        *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if ((s[0] & 0xF0) == 0xE0 && n >= 3) {
        *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    if (n >= 4) {
        *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
              ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        return 4;
    }
    *cp = s[0];
    return 1;
}

/* Strict UTF-8 check (no overlongs, surrogates or code points above U+10FFFF);
 * returns the offset of the first bad byte, or n. */
static size_t utf8_check(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            k = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            k = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (i + k > n) return i;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += k;
    }
    return n;
}

/* Vocabulary string (byte-level code points) -> raw bytes in buf (at most len bytes:
 * every code point gives one byte, or its own UTF-8 when outside the table). */
static size_t unmap_token(const int16_t *u2b, const char *s, size_t len, char *buf) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < len) {
        uint32_t cp;
        size_t k = utf8_next(p + i, len - i, &cp);
        if (cp < 324 && u2b[cp] >= 0) {
            buf[o++] = (char)u2b[cp];
        } else {
            memcpy(buf + o, p + i, k);
            o += k;
        }
        i += k;
    }
    return o;
}

static int unsupported(dt_error *err, const char *what, const char *fmt, const char *name) {
    char head[256];
    snprintf(head, sizeof head, fmt, name);
    return dt_errorf(err, DT_EINVAL, "%s: %s; only " TOK_SUPPORTED, what, head);
}

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* true / false / missing-or-null (def) */
static int jbool(const cJSON *o, const char *key, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsTrue(v)) return 1;
    if (cJSON_IsFalse(v)) return 0;
    return def;
}

static int add_stage(dt_tokenizer *t, const char *pattern, const char *what, dt_error *err) {
    if (t->n_stages >= TOK_MAX_STAGES)
        return dt_errorf(err, DT_EINVAL, "%s: more than %d split stages in the pre-tokenizer", what,
                         TOK_MAX_STAGES);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return dt_errorf(err, DT_EINVAL, "%s: pre-tokenizer regex does not compile at offset %zu: %s",
                         what, (size_t)eo, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
    t->stages[t->n_stages++].re = re;
    return DT_OK;
}

static int load_byte_level(dt_tokenizer *t, const cJSON *pt, const char *what, dt_error *err) {
    t->add_prefix_space = jbool(pt, "add_prefix_space", 1);
    if (t->add_prefix_space && t->n_stages)
        return unsupported(err, what, "ByteLevel add_prefix_space after a Split%s", "");
    if (jbool(pt, "use_regex", 1)) return add_stage(t, GPT2_PATTERN, what, err);
    return DT_OK;
}

static int load_pre_tokenizer(dt_tokenizer *t, const cJSON *pt, const char *what, int *saw_bl,
                              dt_error *err) {
    const char *type = jstr(pt, "type");
    if (!type) return dt_errorf(err, DT_EINVAL, "%s: pre_tokenizer without a \"type\"", what);
    if (!strcmp(type, "ByteLevel")) {
        if (*saw_bl) return unsupported(err, what, "two ByteLevel pre-tokenizers%s", "");
        *saw_bl = 1;
        return load_byte_level(t, pt, what, err);
    }
    if (!strcmp(type, "Split")) {
        if (*saw_bl) return unsupported(err, what, "a Split after ByteLevel%s", "");
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
        const char *behavior = jstr(pt, "behavior");
        if (!behavior || strcmp(behavior, "Isolated"))
            return unsupported(err, what, "Split behavior \"%s\" (only \"Isolated\")",
                               behavior ? behavior : "(none)");
        if (jbool(pt, "invert", 0)) return unsupported(err, what, "Split with invert%s", "");
        const char *re = jstr(pat, "Regex");
        if (re) return add_stage(t, re, what, err);
        const char *lit = jstr(pat, "String");
        if (!lit) return dt_errorf(err, DT_EINVAL, "%s: Split without a Regex or String pattern", what);
        /* a literal string: quote it for PCRE2 (\Q...\E cannot hold "\E") */
        size_t n = strlen(lit);
        char *q = malloc(n * 2 + 1);
        if (!q) return DT_ENOMEM;
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            if (strchr("\\^$.|?*+()[]{}", lit[i])) q[o++] = '\\';
            q[o++] = lit[i];
        }
        q[o] = '\0';
        int rc = add_stage(t, q, what, err);
        free(q);
        return rc;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        if (!cJSON_IsArray(list))
            return dt_errorf(err, DT_EINVAL, "%s: Sequence pre_tokenizer without \"pretokenizers\"", what);
        const cJSON *c;
        cJSON_ArrayForEach(c, list) {
            int rc = load_pre_tokenizer(t, c, what, saw_bl, err);
            if (rc) return rc;
        }
        return DT_OK;
    }
    return unsupported(err, what, "pre_tokenizer type \"%s\"", type);
}

/* Duplicate keys, checked with a hash per object (dt_json_check_duplicates is quadratic,
 * and a real vocabulary object has 150k keys). */
static int check_dups(const cJSON *item, const char *what, dt_error *err) {
    if (!cJSON_IsObject(item) && !cJSON_IsArray(item)) return DT_OK;
    str_map seen = {0};
    int rc = DT_OK;
    for (const cJSON *c = item->child; c && !rc; c = c->next) {
        if (cJSON_IsObject(item) && c->string) {
            int dup;
            rc = str_map_put(&seen, c->string, strlen(c->string), 0, &dup);
            if (!rc && dup)
                rc = dt_errorf(err, DT_EINVAL, "%s: duplicate key \"%.200s\"", what, c->string);
        }
        if (!rc) rc = check_dups(c, what, err);
    }
    str_map_free(&seen);
    return rc;
}

/* *p holds at least need bytes (capacity *cap) */
static int grow_bytes(char **p, size_t *cap, size_t need) {
    if (need <= *cap && *p) return DT_OK;
    char *nb = realloc(*p, need ? need : 1);
    if (!nb) return DT_ENOMEM;
    *p = nb, *cap = need;
    return DT_OK;
}

static int set_id_text(dt_tokenizer *t, int32_t id, const char *b, size_t n) {
    free(t->id_text[id]);
    t->id_text[id] = malloc(n + 1);
    if (!t->id_text[id]) return DT_ENOMEM;
    memcpy(t->id_text[id], b, n);
    t->id_text[id][n] = '\0';
    t->id_len[id] = n;
    return DT_OK;
}

static int load_model(dt_tokenizer *t, const cJSON *root, const char *what, dt_error *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return dt_errorf(err, DT_EINVAL, "%s: no \"model\" object", what);
    const char *type = jstr(model, "type");
    if (!type) {
        /* very old files leave the type out; a BPE model is the one with merges */
        if (!cJSON_GetObjectItemCaseSensitive(model, "merges"))
            return unsupported(err, what, "model without a \"type\"%s", "");
        type = "BPE";
    }
    if (strcmp(type, "BPE")) return unsupported(err, what, "model type \"%s\"", type);
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (drop && !cJSON_IsNull(drop)) return unsupported(err, what, "BPE dropout%s", "");
    if (jbool(model, "byte_fallback", 0))
        return unsupported(err, what, "BPE byte_fallback (a SentencePiece-style BPE)%s", "");
    const char *csp = jstr(model, "continuing_subword_prefix");
    const char *eow = jstr(model, "end_of_word_suffix");
    if ((csp && *csp) || (eow && *eow))
        return unsupported(err, what, "BPE with a subword prefix or word suffix%s", "");
    t->ignore_merges = jbool(model, "ignore_merges", 0);

    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) return dt_errorf(err, DT_EINVAL, "%s: $.model.vocab: expected an object", what);
    uint32_t b2u[256];
    int16_t u2b[324];
    byte_level_table(b2u);
    for (int i = 0; i < 324; i++) u2b[i] = -1;
    for (int b = 0; b < 256; b++) u2b[b2u[b]] = (int16_t)b;

    /* ids: the vocabulary's and the added tokens' */
    int64_t max_id = -1;
    const cJSON *c;
    cJSON_ArrayForEach(c, vocab) {
        if (!cJSON_IsNumber(c) || c->valuedouble < 0 || c->valuedouble > 16777216.0 ||
            c->valuedouble != (double)(int64_t)c->valuedouble)
            return dt_errorf(err, DT_EINVAL, "%s: $.model.vocab[\"%.100s\"]: expected an id in [0, 2^24]",
                             what, c->string);
        if ((int64_t)c->valuedouble > max_id) max_id = (int64_t)c->valuedouble;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return dt_errorf(err, DT_EINVAL, "%s: $.added_tokens: expected an array", what);
    cJSON_ArrayForEach(c, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const char *content = jstr(c, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 16777216.0 ||
            id->valuedouble != (double)(int64_t)id->valuedouble || !content || !*content)
            return dt_errorf(err, DT_EINVAL,
                             "%s: $.added_tokens: each entry needs an \"id\" in [0, 2^24] and a non-empty \"content\"",
                             what);
        if ((int64_t)id->valuedouble > max_id) max_id = (int64_t)id->valuedouble;
    }
    if (max_id < 0) return dt_errorf(err, DT_EINVAL, "%s: empty vocabulary", what);
    t->n_ids = (int32_t)(max_id + 1);
    t->id_text = calloc((size_t)t->n_ids, sizeof *t->id_text);
    t->id_len = calloc((size_t)t->n_ids, sizeof *t->id_len);
    if (!t->id_text || !t->id_len) return DT_ENOMEM;

    size_t bufcap = 256;
    char *buf = malloc(bufcap);
    if (!buf) return DT_ENOMEM;
    int rc = DT_OK;
    cJSON_ArrayForEach(c, vocab) {
        size_t n = strlen(c->string);
        if ((rc = grow_bytes(&buf, &bufcap, n))) break;
        size_t bn = unmap_token(u2b, c->string, n, buf);
        int32_t id = (int32_t)c->valuedouble;
        int dup;
        if ((rc = str_map_put(&t->vocab, buf, bn, id, &dup))) break;
        if (dup) {
            rc = dt_errorf(err, DT_EINVAL, "%s: $.model.vocab: \"%.100s\" maps to the same bytes as another token",
                           what, c->string);
            break;
        }
        if (t->id_text[id]) {
            rc = dt_errorf(err, DT_EINVAL, "%s: $.model.vocab: id %d given to two tokens", what, (int)id);
            break;
        }
        if ((rc = set_id_text(t, id, buf, bn))) break;
    }
    for (int b = 0; b < 256; b++) {
        char ch = (char)b;
        t->byte_id[b] = str_map_get(&t->vocab, &ch, 1);
    }

    /* merges: "a b" strings or [a, b] lists, rank = position */
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!rc && !cJSON_IsArray(merges))
        rc = dt_errorf(err, DT_EINVAL, "%s: $.model.merges: expected an array", what);
    int32_t rank = 0;
    char *ab = NULL;
    size_t abcap = 0;
    if (!rc) {
        cJSON_ArrayForEach(c, merges) {
            const char *a, *b;
            size_t an, bn;
            if (cJSON_IsString(c)) {
                const char *sp = strchr(c->valuestring, ' ');
                if (!sp || strchr(sp + 1, ' ')) {
                    rc = dt_errorf(err, DT_EINVAL, "%s: $.model.merges[%d]: expected \"a b\", got \"%.100s\"",
                                   what, (int)rank, c->valuestring);
                    break;
                }
                a = c->valuestring, an = (size_t)(sp - a), b = sp + 1, bn = strlen(b);
            } else if (cJSON_IsArray(c) && cJSON_GetArraySize(c) == 2 &&
                       cJSON_IsString(c->child) && cJSON_IsString(c->child->next)) {
                a = c->child->valuestring, an = strlen(a);
                b = c->child->next->valuestring, bn = strlen(b);
            } else {
                rc = dt_errorf(err, DT_EINVAL, "%s: $.model.merges[%d]: expected \"a b\" or [\"a\", \"b\"]",
                               what, (int)rank);
                break;
            }
            if ((rc = grow_bytes(&ab, &abcap, an + bn))) break;
            size_t ra = unmap_token(u2b, a, an, ab);
            int32_t ia = str_map_get(&t->vocab, ab, ra);
            size_t rb = unmap_token(u2b, b, bn, ab + ra);
            int32_t ib = str_map_get(&t->vocab, ab + ra, rb);
            int32_t iab = str_map_get(&t->vocab, ab, ra + rb);
            if (ia < 0 || ib < 0 || iab < 0) {
                rc = dt_errorf(err, DT_EINVAL, "%s: $.model.merges[%d]: %s of the merge is not in the vocabulary",
                               what, (int)rank, ia < 0 ? "the left part" : ib < 0 ? "the right part" : "the result");
                break;
            }
            if ((rc = pair_map_put(&t->merges, ia, ib, rank, iab))) break;
            rank++;
        }
    }
    free(ab);
    free(buf);
    if (rc) return rc;

    /* added tokens */
    int na = cJSON_GetArraySize(added);
    if (na > 0) {
        t->added = calloc((size_t)na, sizeof *t->added);
        if (!t->added) return DT_ENOMEM;
    }
    cJSON_ArrayForEach(c, added) {
        const char *content = jstr(c, "content");
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(c, "id")->valuedouble;
        if (jbool(c, "lstrip", 0) || jbool(c, "rstrip", 0) || jbool(c, "single_word", 0))
            return unsupported(err, what, "added token \"%.100s\" with lstrip, rstrip or single_word", content);
        size_t n = strlen(content);
        int dup;
        if ((rc = str_map_put(&t->added_map, content, n, t->n_added, &dup))) return rc;
        if (dup) return dt_errorf(err, DT_EINVAL, "%s: $.added_tokens: \"%.100s\" twice", what, content);
        added_tok *a = &t->added[t->n_added++];
        a->len = n;
        a->id = id;
        a->special = jbool(c, "special", 0);
        a->text = malloc(n + 1);
        if (!a->text) return DT_ENOMEM;
        memcpy(a->text, content, n + 1);
        t->added_first[(unsigned char)content[0]] = 1;
        if ((rc = set_id_text(t, id, content, n))) return rc;
    }
    return DT_OK;
}

int dt_tok_load_text(const char *text, size_t len, const char *what, dt_tokenizer **out,
                     dt_error *err) {
    *out = NULL;
    int rc = dt_json_validate(text, len, what, err);
    if (rc) return rc;
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) return dt_errorf(err, DT_ENOMEM, "%s: out of memory parsing JSON", what);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dt_errorf(err, DT_EINVAL, "%s: expected a JSON object (a tokenizer.json); " TOK_SUPPORTED, what);
    }
    if ((rc = check_dups(root, what, err))) {
        cJSON_Delete(root);
        return rc;
    }
    dt_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        cJSON_Delete(root);
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory", what);
    }
    rc = load_model(t, root, what, err);
    if (!rc) {
        const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
        if (norm && !cJSON_IsNull(norm)) {
            const char *nt = jstr(norm, "type");
            if (!nt || strcmp(nt, "NFC")) {
                rc = unsupported(err, what, "normalizer \"%s\"", nt ? nt : "(no type)");
            } else {
                UErrorCode ue = U_ZERO_ERROR;
                t->nfc = unorm2_getNFCInstance(&ue);
                if (U_FAILURE(ue))
                    rc = dt_errorf(err, DT_EINTERNAL, "%s: ICU's NFC normalizer is not available: %s", what,
                                   u_errorName(ue));
            }
        }
    }
    if (!rc) {
        const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
        int saw_bl = 0;
        if (!pt || cJSON_IsNull(pt)) rc = unsupported(err, what, "no pre_tokenizer (byte-level BPE needs ByteLevel)%s", "");
        else rc = load_pre_tokenizer(t, pt, what, &saw_bl, err);
        if (!rc && !saw_bl) rc = unsupported(err, what, "a pre_tokenizer without ByteLevel%s", "");
    }
    if (!rc) {
        const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
        const char *dt = dec && !cJSON_IsNull(dec) ? jstr(dec, "type") : "ByteLevel";
        if (!dt || strcmp(dt, "ByteLevel")) rc = unsupported(err, what, "decoder \"%s\"", dt ? dt : "(no type)");
    }
    cJSON_Delete(root);
    if (rc == DT_ENOMEM && err && err->code != DT_ENOMEM) dt_errorf(err, DT_ENOMEM, "%s: out of memory", what);
    if (rc) {
        dt_tok_free(t);
        return rc;
    }
    *out = t;
    return DT_OK;
}

/* A tokenizer file is at most DT_READ_MAX_JSON bytes (Llama-2's tokenizer.model is
 * 0.5 MB, a 150k-vocabulary tokenizer.json 7-11 MB). */
/* A tokenizer.json is a JSON object: its first byte after white space is '{'. A
 * SentencePiece model is a serialized protobuf ModelProto, whose first byte is a field
 * tag (0x0A for field 1, the pieces), never '{'. */
static int looks_like_json(const char *text, size_t len) {
    size_t i = 0;
    while (i < len && strchr(" \t\r\n", text[i]) && text[i]) i++;
    return i < len && text[i] == '{';
}

static int load_spm(const char *bytes, size_t len, const char *what, dt_tokenizer **out, dt_error *err) {
    dt_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", what);
    int rc = dt_spm_load(bytes, len, what, &t->spm, err);
    if (rc) {
        free(t);
        return rc;
    }
    t->n_ids = dt_spm_size(t->spm);
    if (t->n_ids <= 0) {
        dt_tok_free(t);
        return dt_errorf(err, DT_EINVAL, "%s: the SentencePiece model has no pieces", what);
    }
    *out = t;
    return DT_OK;
}

int dt_tok_load(const char *path, dt_tokenizer **out, dt_error *err) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    int rc = dt_file_read(path, "tokenizer file", DT_READ_MAX_JSON, &text, &len, err);
    if (rc) return rc;
    if (looks_like_json(text, len)) rc = dt_tok_load_text(text, len, path, out, err);
    else rc = load_spm(text, len, path, out, err);
    free(text);
    return rc;
}

void dt_tok_free(dt_tokenizer *t) {
    if (!t) return;
    dt_spm_free(t->spm);
    str_map_free(&t->vocab);
    str_map_free(&t->added_map);
    free(t->merges.s);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].text);
    free(t->added);
    for (int i = 0; i < t->n_stages; i++) pcre2_code_free(t->stages[i].re);
    if (t->id_text)
        for (int32_t i = 0; i < t->n_ids; i++) free(t->id_text[i]);
    free(t->id_text);
    free(t->id_len);
    free(t);
}

int32_t dt_tok_vocab_size(const dt_tokenizer *t) { return t->n_ids; }

int32_t dt_tok_token_id(const dt_tokenizer *t, const char *token) {
    if (t->spm) return dt_spm_piece_id(t->spm, token);
    size_t n = strlen(token);
    int32_t a = str_map_get(&t->added_map, token, n);
    if (a >= 0) return t->added[a].id;
    return str_map_get(&t->vocab, token, n);
}

dt_tok_kind dt_tok_get_kind(const dt_tokenizer *t) { return t->spm ? DT_TOK_SENTENCEPIECE : DT_TOK_BPE_JSON; }

/* End-of-text tokens of tokenizer.json files, in the order they are looked for: GPT-2's
 * and Qwen2's <|endoftext|> (Qwen2's eos for pretraining text; its chat turns end with
 * <|im_end|>), Llama-3's <|end_of_text|>, then the </s> / <eos> of other families. */
static const char *const EOT_NAMES[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};

int32_t dt_tok_eot_id(const dt_tokenizer *t) {
    if (t->spm) return dt_spm_eos_id(t->spm);
    for (size_t i = 0; i < sizeof EOT_NAMES / sizeof EOT_NAMES[0]; i++) {
        int32_t a = str_map_get(&t->added_map, EOT_NAMES[i], strlen(EOT_NAMES[i]));
        if (a >= 0) return t->added[a].id;
    }
    return -1;
}

const char *dt_tok_token_text(const dt_tokenizer *t, int32_t id, size_t *len) {
    *len = 0;
    if (id < 0 || id >= t->n_ids) return NULL;
    if (t->spm) return dt_spm_piece(t->spm, id, len);
    if (!t->id_text[id]) return NULL;
    *len = t->id_len[id];
    return t->id_text[id];
}

/* Length-prefixed (4 bytes, little-endian) token texts of ids 0 .. n-1; an id without a
 * token is the length DT_TOK_FP_NO_TOKEN alone (docs/data.md "Tokenizer fingerprint"). */
#define DT_TOK_FP_NO_TOKEN 0xFFFFFFFFu

void dt_tok_fingerprint(const dt_tokenizer *t, unsigned char out[DT_TOK_FINGERPRINT_BYTES]) {
    dt_sha256 h;
    dt_sha256_init(&h);
    for (int32_t id = 0; id < t->n_ids; id++) {
        size_t n;
        const char *s = dt_tok_token_text(t, id, &n);
        uint32_t len = s ? (uint32_t)n : DT_TOK_FP_NO_TOKEN;
        unsigned char le[4] = {(unsigned char)len, (unsigned char)(len >> 8), (unsigned char)(len >> 16),
                               (unsigned char)(len >> 24)};
        dt_sha256_update(&h, le, sizeof le);
        if (s) dt_sha256_update(&h, s, n);
    }
    dt_sha256_final(&h, out);
}

/* ---------------------------------------------------------------- encoding */

/* BPE heap entry: the pair starting at symbol pos, valid while both ids are still there */
typedef struct {
    int32_t rank, pos, left, right;
} bpe_cand;

typedef struct {
    int32_t *v;
    size_t n, cap;
    int32_t *sym, *next, *prev; /* BPE scratch */
    bpe_cand *heap;
    size_t symcap;
    pcre2_match_data *md; /* the overall match only (one pair of offsets) */
} ids_buf;

static int ids_push(ids_buf *b, int32_t id) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        int32_t *nv = realloc(b->v, cap * sizeof *nv);
        if (!nv) return DT_ENOMEM;
        b->v = nv, b->cap = cap;
    }
    b->v[b->n++] = id;
    return DT_OK;
}

static int cand_less(const bpe_cand *a, const bpe_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(bpe_cand *h, size_t *n, bpe_cand c) {
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static bpe_cand heap_pop(bpe_cand *h, size_t *n) {
    bpe_cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(&h[c + 1], &h[c])) c++;
        if (!cand_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

static void push_pair(const dt_tokenizer *t, ids_buf *b, size_t *nh, int32_t pos) {
    int32_t nx = b->next[pos];
    if (nx < 0) return;
    const pair_slot *p = pair_map_get(&t->merges, b->sym[pos], b->sym[nx]);
    if (p) heap_push(b->heap, nh, (bpe_cand){p->rank, pos, b->sym[pos], b->sym[nx]});
}

/* BPE of one pre-token (raw bytes): symbols in a linked list, candidate pairs in a heap
 * ordered by (rank, position) — the order of `tokenizers`' priority queue; O(n log n). */
static int bpe_word(const dt_tokenizer *t, const char *w, size_t n, ids_buf *b, dt_error *err) {
    if (!n) return DT_OK;
    if (t->ignore_merges) {
        int32_t id = str_map_get(&t->vocab, w, n);
        if (id >= 0) return ids_push(b, id);
    }
    if (n > INT32_MAX / 4) return dt_errorf(err, DT_EINVAL, "a pre-token of %zu bytes is too long", n);
    if (n > b->symcap) {
        int32_t *ns = realloc(b->sym, n * sizeof *ns);
        if (!ns) return DT_ENOMEM;
        b->sym = ns;
        int32_t *nx = realloc(b->next, n * sizeof *nx);
        if (!nx) return DT_ENOMEM;
        b->next = nx;
        int32_t *pv = realloc(b->prev, n * sizeof *pv);
        if (!pv) return DT_ENOMEM;
        b->prev = pv;
        bpe_cand *nh = realloc(b->heap, 3 * n * sizeof *nh);
        if (!nh) return DT_ENOMEM;
        b->heap = nh;
        b->symcap = n;
    }
    int32_t *s = b->sym, *next = b->next, *prev = b->prev;
    for (size_t i = 0; i < n; i++) {
        s[i] = t->byte_id[(unsigned char)w[i]];
        if (s[i] < 0)
            return dt_errorf(err, DT_EINVAL, "byte 0x%02X has no token in the vocabulary (no unk_token)",
                             (unsigned char)w[i]);
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        prev[i] = (int32_t)i - 1;
    }
    size_t nh = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, b, &nh, (int32_t)i);
    while (nh) {
        bpe_cand c = heap_pop(b->heap, &nh);
        int32_t j = next[c.pos];
        if (s[c.pos] != c.left || j < 0 || s[j] != c.right) continue; /* stale */
        s[c.pos] = pair_map_get(&t->merges, c.left, c.right)->id;
        s[j] = -1; /* removed */
        next[c.pos] = next[j];
        if (next[j] >= 0) prev[next[j]] = c.pos;
        if (prev[c.pos] >= 0) push_pair(t, b, &nh, prev[c.pos]);
        push_pair(t, b, &nh, c.pos);
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        if (ids_push(b, s[i])) return DT_ENOMEM;
    return DT_OK;
}

/* Runs split stages k.. over text[0..n) (Isolated: matches and the gaps between them are
 * pieces), then BPE on each piece. */
static int split_encode(const dt_tokenizer *t, int k, const char *text, size_t n, ids_buf *b,
                        dt_error *err) {
    if (!n) return DT_OK;
    if (k == t->n_stages) return bpe_word(t, text, n, b, err);
    pcre2_match_data *md = b->md;
    PCRE2_SIZE pos = 0, last = 0;
    while (pos <= n) {
        int r = pcre2_match(t->stages[k].re, (PCRE2_SPTR)text, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (r == PCRE2_ERROR_NOMATCH) break;
        if (r < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(r, msg, sizeof msg);
            return dt_errorf(err, DT_ERUNTIME, "pre-tokenizer regex failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        PCRE2_SIZE s = ov[0], e = ov[1];
        if (e == s) { /* an empty match: skip one character */
            pos = s + 1;
            while (pos < n && ((unsigned char)text[pos] & 0xC0) == 0x80) pos++;
            if (s >= n) break;
            continue;
        }
        /* s and e are copied out of md before the next stage reuses it */
        int rc = split_encode(t, k + 1, text + last, s - last, b, err);
        if (!rc) rc = split_encode(t, k + 1, text + s, e - s, b, err);
        if (rc) return rc;
        last = pos = e;
    }
    return split_encode(t, k + 1, text + last, n - last, b, err);
}

/* NFC of n bytes of valid UTF-8 through ICU (UTF-8 -> UTF-16, normalize, back); *out is
 * NULL when the text is already NFC (then use text as it is), else malloc'd, *out_n bytes. */
static int nfc_text(const UNormalizer2 *nfc, const char *text, size_t n, char **out, size_t *out_n,
                    dt_error *err) {
    *out = NULL;
    size_t i = 0;
    while (i < n && (unsigned char)text[i] < NFC_SAFE_BYTE_LIMIT) i++;
    if (i == n) return DT_OK;
    if (n > INT32_MAX / 2) return dt_errorf(err, DT_EINVAL, "a text segment of %zu bytes is too long to normalize", n);
    UErrorCode ue = U_ZERO_ERROR;
    int32_t n16 = 0;
    u_strFromUTF8(NULL, 0, &n16, text, (int32_t)n, &ue);   /* preflight: the UTF-16 length */
    if (ue == U_BUFFER_OVERFLOW_ERROR) ue = U_ZERO_ERROR;
    UChar *src = malloc(((size_t)n16 + 1) * sizeof *src);
    if (!src) return DT_ENOMEM;
    u_strFromUTF8(src, n16 + 1, NULL, text, (int32_t)n, &ue);
    int rc = DT_OK;
    if (U_SUCCESS(ue) && unorm2_isNormalized(nfc, src, n16, &ue)) {
        free(src);
        return U_SUCCESS(ue) ? DT_OK : dt_errorf(err, DT_EINTERNAL, "NFC check failed: %s", u_errorName(ue));
    }
    /* the output's UTF-16 length by preflight (NFC may shorten or lengthen the text) */
    int32_t cap = U_SUCCESS(ue) ? unorm2_normalize(nfc, src, n16, NULL, 0, &ue) : 0;
    if (ue == U_BUFFER_OVERFLOW_ERROR) ue = U_ZERO_ERROR;
    UChar *dst = U_SUCCESS(ue) ? malloc(((size_t)cap + 1) * sizeof *dst) : NULL;
    if (U_SUCCESS(ue) && !dst) rc = DT_ENOMEM;
    if (!rc && U_SUCCESS(ue)) unorm2_normalize(nfc, src, n16, dst, cap + 1, &ue);
    int32_t n8 = 0;
    if (!rc && U_SUCCESS(ue)) u_strToUTF8(NULL, 0, &n8, dst, cap, &ue);
    if (ue == U_BUFFER_OVERFLOW_ERROR) ue = U_ZERO_ERROR;
    char *o = !rc && U_SUCCESS(ue) ? malloc((size_t)n8 + 1) : NULL;
    if (!rc && U_SUCCESS(ue) && !o) rc = DT_ENOMEM;
    if (!rc && U_SUCCESS(ue)) u_strToUTF8(o, n8 + 1, NULL, dst, cap, &ue);
    free(src);
    free(dst);
    if (!rc && U_FAILURE(ue)) rc = dt_errorf(err, DT_EINTERNAL, "NFC normalization failed: %s", u_errorName(ue));
    if (rc) {
        free(o);
        return rc;
    }
    *out = o;
    *out_n = (size_t)n8;
    return DT_OK;
}

/* One segment of normalized text: the pre-tokenizer (with ByteLevel's prefix space), then BPE. */
static int encode_normalized(const dt_tokenizer *t, const char *text, size_t n, ids_buf *b, dt_error *err) {
    if (!n) return DT_OK;
    if (!t->add_prefix_space || text[0] == ' ') return split_encode(t, 0, text, n, b, err);
    char *tmp = malloc(n + 1);
    if (!tmp) return DT_ENOMEM;
    tmp[0] = ' ';
    memcpy(tmp + 1, text, n);
    int rc = split_encode(t, 0, tmp, n + 1, b, err);
    free(tmp);
    return rc;
}

/* One segment of text between added tokens: the normalizer (NFC), then the rest
 * (tokenizers normalizes each segment the added tokens leave, then pre-tokenizes). */
static int encode_segment(const dt_tokenizer *t, const char *text, size_t n, ids_buf *b, dt_error *err) {
    if (!n || !t->nfc) return encode_normalized(t, text, n, b, err);
    char *norm = NULL;
    size_t nn = 0;
    int rc = nfc_text(t->nfc, text, n, &norm, &nn, err);
    if (rc) return rc;
    if (!norm) return encode_normalized(t, text, n, b, err);
    rc = encode_normalized(t, norm, nn, b, err);
    free(norm);
    return rc;
}

size_t dt_tok_utf8_check(const char *text, size_t len) { return utf8_check((const unsigned char *)text, len); }

int dt_tok_encode(const dt_tokenizer *t, const char *text, size_t len, int with_special,
                  int32_t **ids, size_t *n_ids, dt_error *err) {
    *ids = NULL;
    *n_ids = 0;
    size_t bad = utf8_check((const unsigned char *)text, len);
    if (bad < len)
        return dt_errorf(err, DT_EINVAL, "input is not UTF-8 (byte 0x%02X at offset %zu)",
                         (unsigned char)text[bad], bad);
    if (t->spm) return dt_spm_encode(t->spm, text, len, ids, n_ids, err);
    ids_buf b = {0};
    b.md = pcre2_match_data_create(1, NULL);
    if (!b.md) return dt_errorf(err, DT_ENOMEM, "out of memory encoding %zu bytes", len);
    int rc = DT_OK;
    size_t seg = 0, i = 0;
    while (i < len && !rc) {
        const added_tok *best = NULL;
        if (!t->added_first[(unsigned char)text[i]]) {
            i++;
            continue;
        }
        for (int a = 0; a < t->n_added; a++) {
            const added_tok *at = &t->added[a];
            if ((at->special && !with_special) || at->len > len - i || at->text[0] != text[i]) continue;
            if (memcmp(at->text, text + i, at->len)) continue;
            if (!best || at->len > best->len) best = at;
        }
        if (!best) {
            i++;
            continue;
        }
        rc = encode_segment(t, text + seg, i - seg, &b, err);
        if (!rc) rc = ids_push(&b, best->id);
        i += best->len;
        seg = i;
    }
    if (!rc) rc = encode_segment(t, text + seg, len - seg, &b, err);
    free(b.sym);
    free(b.next);
    free(b.prev);
    free(b.heap);
    pcre2_match_data_free(b.md);
    if (rc) {
        free(b.v);
        if (rc == DT_ENOMEM) dt_errorf(err, DT_ENOMEM, "out of memory encoding %zu bytes", len);
        return rc;
    }
    *ids = b.v;
    *n_ids = b.n;
    return DT_OK;
}

/* ---------------------------------------------------------------- decoding */

int dt_tok_decode(const dt_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len,
                  dt_error *err) {
    *out = NULL;
    if (len) *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_ids)
            return dt_errorf(err, DT_EINVAL, "token id %ld is out of range (vocabulary: 0..%ld)",
                             (long)ids[i], (long)t->n_ids - 1);
        if (t->spm) continue;
        if (!t->id_text[ids[i]])
            return dt_errorf(err, DT_EINVAL, "token id %ld is not used by this tokenizer (no token has it)",
                             (long)ids[i]);
        total += t->id_len[ids[i]];
    }
    if (t->spm) return dt_spm_decode(t->spm, ids, n, out, len, err);
    char *s = malloc(total + 1);
    if (!s) return dt_errorf(err, DT_ENOMEM, "out of memory decoding %zu tokens", n);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(s + o, t->id_text[ids[i]], t->id_len[ids[i]]);
        o += t->id_len[ids[i]];
    }
    s[o] = '\0';
    *out = s;
    if (len) *len = o;
    return DT_OK;
}
