/* test_tokenizer.c — dt_tokenizer.h against the goldens of `tokenizers`
 * (scripts/gen_tokenizer_goldens.py, tests/tokenizer/data/): for each tokenizer and
 * each corpus case, encode == the ids `tokenizers` gave and decode(encode(x)) == x;
 * then the error paths (malformed files, unsupported kinds, bad ids, bad UTF-8).
 * Usage: test_tokenizer DATA_DIR */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_json.h"
#include "dt_test.h"
#include "dt_tokenizer.h"

static const char *data_dir;

/* the corpus escapes: \n \t \r \\ */
static size_t unescape(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n && strchr("ntr\\", s[i + 1])) {
            char c = s[++i];
            out[o++] = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : '\\';
        } else {
            out[o++] = s[i];
        }
    }
    return o;
}

static char *slurp(const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", data_dir, name);
    char *text = NULL;
    dt_error err = {0};
    if (dt_read_file(path, (size_t)64 << 20, &text, len, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return text;
}

/* next line of text at *pos (without its newline); NULL at the end */
static const char *next_line(const char *text, size_t len, size_t *pos, size_t *n) {
    if (*pos >= len) return NULL;
    const char *s = text + *pos;
    const char *nl = memchr(s, '\n', len - *pos);
    *n = nl ? (size_t)(nl - s) : len - *pos;
    *pos += *n + (nl ? 1 : 0);
    return s;
}

static void check_goldens(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.json", data_dir, name);
    dt_error err = {0};
    dt_tokenizer *t = NULL;
    int rc = dt_tok_load(path, &t, &err);
    CHECK_EQ_I64(rc, 0);
    if (rc) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    size_t clen, ilen, cpos = 0, ipos = 0, cn, in;
    char *corpus = slurp("corpus.txt", &clen);
    snprintf(path, sizeof path, "%s.ids", name);
    char *golden = slurp(path, &ilen);
    const char *cl, *il;
    int cases = 0;
    char *buf = malloc(clen + 1);
    while ((cl = next_line(corpus, clen, &cpos, &cn))) {
        il = next_line(golden, ilen, &ipos, &in);
        CHECK(il != NULL);
        if (!il) break;
        cases++;
        size_t n = unescape(cl, cn, buf);
        int32_t *ids;
        size_t nids;
        rc = dt_tok_encode(t, buf, n, 1, &ids, &nids, &err);
        CHECK_EQ_I64(rc, 0);
        if (rc) {
            fprintf(stderr, "%s case %d: %s\n", name, cases, err.msg);
            continue;
        }
        /* compare with the golden line */
        char *want = malloc(in + 1), *got = malloc(nids * 12 + 1);
        memcpy(want, il, in);
        want[in] = '\0';
        size_t o = 0;
        for (size_t i = 0; i < nids; i++) o += (size_t)sprintf(got + o, i ? " %d" : "%d", (int)ids[i]);
        got[o] = '\0';
        if (strcmp(want, got)) {
            fprintf(stderr, "%s case %d '%.*s':\n  want %s\n  got  %s\n", name, cases, (int)cn, cl, want, got);
            dt_test_failures++;
        }
        char *text;
        size_t tlen;
        rc = dt_tok_decode(t, ids, nids, &text, &tlen, &err);
        CHECK_EQ_I64(rc, 0);
        if (!rc) {
            if (tlen != n || memcmp(text, buf, n)) {
                fprintf(stderr, "%s case %d: decode(encode(x)) != x: '%s'\n", name, cases, text);
                dt_test_failures++;
            }
            free(text);
        }
        free(want);
        free(got);
        free(ids);
    }
    CHECK(cases >= 30);
    free(buf);
    free(corpus);
    free(golden);

    /* special tokens and sizes */
    CHECK_EQ_I64(dt_tok_token_id(t, "<|endoftext|>"), 0);
    CHECK_EQ_I64(dt_tok_token_id(t, "no such token here"), -1);
    CHECK(dt_tok_vocab_size(t) >= 1000);
    /* with_special = 0: the special token's text is ordinary text */
    int32_t *ids;
    size_t nids;
    CHECK_EQ_I64(dt_tok_encode(t, "<|endoftext|>", 13, 0, &ids, &nids, &err), 0);
    CHECK(nids > 1);
    for (size_t i = 0; i < nids; i++) CHECK(ids[i] != 0);
    char *text;
    size_t tlen;
    CHECK_EQ_I64(dt_tok_decode(t, ids, nids, &text, &tlen, &err), 0);
    CHECK_STR(text, "<|endoftext|>");
    free(text);
    free(ids);
    /* empty input */
    CHECK_EQ_I64(dt_tok_encode(t, "", 0, 1, &ids, &nids, &err), 0);
    CHECK_EQ_I64(nids, 0);
    free(ids);
    /* bad UTF-8 and bad ids */
    CHECK_EQ_I64(dt_tok_encode(t, "ab\xff", 3, 1, &ids, &nids, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "UTF-8") != NULL);
    CHECK_EQ_I64(dt_tok_encode(t, "\xc0\xaf", 2, 1, &ids, &nids, &err), DT_EINVAL);
    int32_t bad[2] = {5, dt_tok_vocab_size(t)};
    CHECK_EQ_I64(dt_tok_decode(t, bad, 2, &text, &tlen, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "out of range") != NULL);
    bad[1] = -1;
    CHECK_EQ_I64(dt_tok_decode(t, bad, 2, &text, &tlen, &err), DT_EINVAL);
    /* a long word (a whitespace run, a long Chinese run) stays fast */
    size_t big = 200000;
    char *w = malloc(big);
    memset(w, ' ', big);
    CHECK_EQ_I64(dt_tok_encode(t, w, big, 1, &ids, &nids, &err), 0);
    CHECK_EQ_I64(dt_tok_decode(t, ids, nids, &text, &tlen, &err), 0);
    CHECK(tlen == big && !memcmp(text, w, big));
    free(text);
    free(ids);
    free(w);
    dt_tok_free(t);
}

/* load_bad: the text must fail with code and a message holding each of want[] */
static void load_bad(const char *json, int code, const char *want1, const char *want2) {
    dt_error err = {0};
    dt_tokenizer *t = (dt_tokenizer *)1;
    int rc = dt_tok_load_text(json, strlen(json), "tok.json", &t, &err);
    CHECK_EQ_I64(rc, code);
    CHECK(t == NULL);
    CHECK(strchr(err.msg, '\n') == NULL);
    if (want1 && !strstr(err.msg, want1)) {
        fprintf(stderr, "message lacks '%s': %s\n", want1, err.msg);
        dt_test_failures++;
    }
    if (want2 && !strstr(err.msg, want2)) {
        fprintf(stderr, "message lacks '%s': %s\n", want2, err.msg);
        dt_test_failures++;
    }
}

#define SUPPORTED "byte-level BPE tokenizer.json (GPT-2, Llama-3, Qwen2) is supported"
#define BL "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}"

static void check_errors(void) {
    dt_error err = {0};
    dt_tokenizer *t = NULL;
    CHECK_EQ_I64(dt_tok_load("/nonexistent/tokenizer.json", &t, &err), DT_EIO);
    CHECK(strstr(err.msg, "/nonexistent/tokenizer.json") != NULL);
    CHECK_EQ_I64(dt_tok_load("/", &t, &err), DT_EINVAL);
    load_bad("{\"model\":", DT_EINVAL, "tok.json", "invalid JSON");
    load_bad("[1,2]", DT_EINVAL, SUPPORTED, NULL);
    load_bad("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", DT_EINVAL, "WordPiece", SUPPORTED);
    load_bad("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", DT_EINVAL, "Unigram", SUPPORTED);
    load_bad("{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"a\":0},\"merges\":[]}," BL "}",
             DT_EINVAL, "byte_fallback", SUPPORTED);
    load_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}," BL "}",
             DT_EINVAL, "merges[0]", "not in the vocabulary");
    load_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"a\":1},\"merges\":[]}," BL "}",
             DT_EINVAL, "duplicate key", NULL);
    load_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}," BL "}",
             DT_EINVAL, "id 0", NULL);
    load_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}," BL "}", DT_EINVAL, "vocab", NULL);
    load_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
             "\"pre_tokenizer\":{\"type\":\"Metaspace\"}}",
             DT_EINVAL, "Metaspace", SUPPORTED);
    load_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", DT_EINVAL, "pre_tokenizer", SUPPORTED);
    load_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":{\"type\":\"Lowercase\"}," BL "}",
             DT_EINVAL, "Lowercase", NULL);
    load_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
             "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
             "\"pattern\":{\"Regex\":\"(unclosed\"},\"behavior\":\"Isolated\",\"invert\":false},"
             "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}}",
             DT_EINVAL, "regex", NULL);
    load_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}," BL
             ",\"decoder\":{\"type\":\"WordPiece\"}}",
             DT_EINVAL, "decoder", NULL);
    /* a minimal valid one: string and list merges, an added token, ignore_merges */
    const char *ok = "{\"added_tokens\":[{\"id\":5,\"content\":\"<s>\",\"special\":true}],"
                     "\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,"
                     "\"abb\":3,\"Ġ\":4,\"bab\":6},\"merges\":[\"a b\",[\"ab\",\"b\"]]}," BL "}";
    CHECK_EQ_I64(dt_tok_load_text(ok, strlen(ok), "ok", &t, &err), 0);
    if (t) {
        int32_t *ids;
        size_t n;
        CHECK_EQ_I64(dt_tok_encode(t, "abb<s>ab bab", 12, 1, &ids, &n, &err), 0);
        /* abb (whole, in the vocabulary) | <s> | ab | " bab" by merges: Ġ b ab */
        int32_t want[] = {3, 5, 2, 4, 1, 2};
        CHECK_EQ_I64(n, 6);
        for (size_t i = 0; i < n && i < 6; i++) CHECK_EQ_I64(ids[i], want[i]);
        free(ids);
        /* "bab" is in the vocabulary: ignore_merges takes it whole (merges give b ab) */
        CHECK_EQ_I64(dt_tok_encode(t, "bab", 3, 1, &ids, &n, &err), 0);
        CHECK_EQ_I64(n, 1);
        if (n == 1) CHECK_EQ_I64(ids[0], 6);
        free(ids);
        CHECK_EQ_I64(dt_tok_encode(t, "c", 1, 1, &ids, &n, &err), DT_EINVAL);
        CHECK_EQ_I64(dt_tok_vocab_size(t), 7);
        dt_tok_free(t);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_tokenizer DATA_DIR\n");
        return 2;
    }
    data_dir = argv[1];
    check_goldens("gpt2-mini");
    check_goldens("qwen2-mini");
    check_goldens("llama3-mini");
    check_errors();
    TEST_MAIN_END();
}
