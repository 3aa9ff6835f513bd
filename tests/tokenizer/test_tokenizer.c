/* test_tokenizer.c — dt_tokenizer.h against the goldens of `tokenizers` and `sentencepiece`
 * (scripts/gen_tokenizer_goldens.py, tests/tokenizer/data/): for each tokenizer and
 * each corpus case, encode == the ids the library gave and decode(encode(x)) == x (the
 * NFC of x for Qwen2's NFC normalizer); NFC on decomposed text; fingerprints (and SHA-256's
 * FIPS 180-4 vectors); then the error paths (malformed files, unsupported kinds, bad ids,
 * bad UTF-8). With "released": the released tokenizers of data/released/ against
 * tiktoken / tokenizers / sentencepiece (scripts/gen_released_tokenizer_goldens.py).
 * Usage: test_tokenizer DATA_DIR [released] */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_json.h"
#include "dt_sha256.h"
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

static dt_tokenizer *load_data(const char *file) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", data_dir, file);
    dt_error err = {0};
    dt_tokenizer *t = NULL;
    if (dt_tok_load(path, &t, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return t;
}

/* a normalizer changed x: decode gives the normalized text, whose ids are x's again */
static int normalized_roundtrip(const dt_tokenizer *t, const char *x, size_t n, const char *back, size_t bn,
                                const int32_t *ids, size_t nids) {
    int high = 0;
    for (size_t i = 0; i < n; i++) high |= (unsigned char)x[i] >= 0xCC;   /* U+0300 and above */
    if (!high || dt_tok_get_kind(t) != DT_TOK_BPE_JSON) return 0;
    int32_t *again;
    size_t na;
    dt_error err = {0};
    if (dt_tok_encode(t, back, bn, 1, &again, &na, &err)) return 0;
    int same = na == nids && !memcmp(again, ids, nids * sizeof *ids);
    free(again);
    return same;
}

/* Each case of corpus_file encodes to its line of ids_file; decode(encode(x)) gives x
 * back -- or, with decoded_file (a SentencePiece normalizer that changes text), that
 * file's line; for Qwen2's NFC, text whose NFC has the same ids. All relative to data_dir. */
static void compare_corpus(const dt_tokenizer *t, const char *name, const char *corpus_file, const char *ids_file,
                           const char *decoded_file) {
    size_t clen, ilen, dlen = 0, cpos = 0, ipos = 0, dpos = 0, cn, in, dn = 0;
    char *corpus = slurp(corpus_file, &clen);
    char *golden = slurp(ids_file, &ilen);
    char *decoded = decoded_file ? slurp(decoded_file, &dlen) : NULL;
    const char *cl, *il, *dl = NULL;
    int cases = 0, rc;
    dt_error err = {0};
    char *buf = malloc(clen + 1), *dbuf = malloc(dlen + 1);
    while ((cl = next_line(corpus, clen, &cpos, &cn))) {
        il = next_line(golden, ilen, &ipos, &in);
        CHECK(il != NULL);
        if (decoded) {
            dl = next_line(decoded, dlen, &dpos, &dn);
            CHECK(dl != NULL);
        }
        if (!il || (decoded && !dl)) break;
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
            const char *back = buf;
            size_t bn = n;
            if (decoded) back = dbuf, bn = unescape(dl, dn, dbuf);
            if ((tlen != bn || memcmp(text, back, bn)) &&
                !(!strcmp(name, "qwen2-mini") && normalized_roundtrip(t, buf, n, text, tlen, ids, nids))) {
                fprintf(stderr, "%s case %d: decode(encode(x)) is '%s', not '%.*s'\n", name, cases, text, (int)bn, back);
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
    free(dbuf);
    free(corpus);
    free(golden);
    free(decoded);
}

static void check_goldens(const char *name, const char *ext) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s%s", data_dir, name, ext);
    dt_error err = {0};
    dt_tokenizer *t = NULL;
    int rc = dt_tok_load(path, &t, &err);
    CHECK_EQ_I64(rc, 0);
    if (rc) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    snprintf(path, sizeof path, "%s.ids", name);
    compare_corpus(t, name, "corpus.txt", path, NULL);

    /* special tokens and sizes */
    int32_t *ids;
    size_t nids;
    char *text;
    size_t tlen;
    CHECK_EQ_I64(dt_tok_token_id(t, "no such token here"), -1);
    CHECK(dt_tok_vocab_size(t) >= 1000);
    if (dt_tok_get_kind(t) == DT_TOK_BPE_JSON) {
        CHECK_EQ_I64(dt_tok_token_id(t, "<|endoftext|>"), 0);
        CHECK_EQ_I64(dt_tok_eot_id(t), 0);
        /* with_special = 0: the special token's text is ordinary text */
        CHECK_EQ_I64(dt_tok_encode(t, "<|endoftext|>", 13, 0, &ids, &nids, &err), 0);
        CHECK(nids > 1);
        for (size_t i = 0; i < nids; i++) CHECK(ids[i] != 0);
        CHECK_EQ_I64(dt_tok_decode(t, ids, nids, &text, &tlen, &err), 0);
        CHECK_STR(text, "<|endoftext|>");
        free(text);
        free(ids);
    } else {
        /* Llama-2's ids: <unk> 0, <s> 1, </s> 2; byte pieces; control pieces never come from text */
        CHECK_EQ_I64(dt_tok_token_id(t, "<unk>"), 0);
        CHECK_EQ_I64(dt_tok_token_id(t, "<s>"), 1);
        CHECK_EQ_I64(dt_tok_token_id(t, "</s>"), 2);
        CHECK_EQ_I64(dt_tok_eot_id(t), 2);
        CHECK(dt_tok_token_id(t, "<0x0A>") > 2);
        size_t pl;
        const char *piece = dt_tok_token_text(t, 2, &pl);
        CHECK(piece && pl == 4 && !memcmp(piece, "</s>", 4));
        for (int ws = 0; ws <= 1; ws++) {
            CHECK_EQ_I64(dt_tok_encode(t, "</s>", 4, ws, &ids, &nids, &err), 0);
            CHECK(nids > 1);
            for (size_t i = 0; i < nids; i++) CHECK(ids[i] != 2);
            free(ids);
        }
        /* decoding a control id gives nothing (SentencePiece's Decode) */
        int32_t eos[3] = {1, dt_tok_token_id(t, "<0x41>"), 2};
        CHECK_EQ_I64(dt_tok_decode(t, eos, 3, &text, &tlen, &err), 0);
        CHECK_STR(text, "A");
        free(text);
    }
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

/* Qwen2's NFC normalizer: composed and decomposed spellings give the same ids (and the
 * gpt2 file, without a normalizer, does not); ICU's NFC also reorders combining marks
 * and maps the singletons U+212B ANGSTROM SIGN and U+2126 OHM SIGN. */
static void check_nfc(void) {
    static const char *const pairs[][2] = {
        {"caf\xc3\xa9", "cafe\xcc\x81"},                       /* é, e + U+0301 */
        {"\xe1\xba\xa5 x", "a\xcc\x82\xcc\x81 x"},             /* ấ: a + U+0302 + U+0301 */
        {"\xe1\xba\xa1\xcc\x81", "a\xcc\x81\xcc\xa3"},         /* a + U+0301 + U+0323: reordered */
        {"\xc3\x85\xce\xa9", "\xe2\x84\xab\xe2\x84\xa6"},       /* Å Ω from U+212B U+2126 */
        {"\xea\xb0\x81", "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"}, /* 각 from conjoining jamo */
    };
    dt_tokenizer *q = load_data("qwen2-mini.json"), *g = load_data("gpt2-mini.json");
    dt_error err = {0};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        int32_t *a, *b, *c;
        size_t na, nb, nc;
        CHECK_EQ_I64(dt_tok_encode(q, pairs[k][0], strlen(pairs[k][0]), 1, &a, &na, &err), 0);
        CHECK_EQ_I64(dt_tok_encode(q, pairs[k][1], strlen(pairs[k][1]), 1, &b, &nb, &err), 0);
        CHECK(na == nb && !memcmp(a, b, na * sizeof *a));
        CHECK_EQ_I64(dt_tok_encode(g, pairs[k][1], strlen(pairs[k][1]), 1, &c, &nc, &err), 0);
        CHECK(!(nc == na && !memcmp(a, c, na * sizeof *a)) || k == 2);
        free(a);
        free(b);
        free(c);
    }
    /* around special tokens: the normalizer runs on the text between them */
    const char *s1 = "cafe\xcc\x81<|im_end|>e\xcc\x81", *s2 = "caf\xc3\xa9<|im_end|>\xc3\xa9";
    int32_t *a, *b;
    size_t na, nb;
    CHECK_EQ_I64(dt_tok_encode(q, s1, strlen(s1), 1, &a, &na, &err), 0);
    CHECK_EQ_I64(dt_tok_encode(q, s2, strlen(s2), 1, &b, &nb, &err), 0);
    CHECK(na == nb && !memcmp(a, b, na * sizeof *a));
    free(a);
    free(b);
    dt_tok_free(q);
    dt_tok_free(g);
}

static void check_fingerprints(void) {
    /* FIPS 180-4 examples (NIST CSRC "Example Algorithm" SHA256.pdf), and the empty message */
    static const struct { const char *msg, *hex; } v[] = {
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        dt_sha256 h;
        unsigned char d[DT_SHA256_BYTES];
        char hex[2 * DT_SHA256_BYTES + 1];
        dt_sha256_init(&h);
        dt_sha256_update(&h, v[i].msg, strlen(v[i].msg));
        dt_sha256_final(&h, d);
        dt_sha256_hex(d, hex);
        CHECK_STR(hex, v[i].hex);
    }
    /* a million 'a' fed in odd pieces: 'cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0' */
    dt_sha256 h;
    unsigned char d[DT_SHA256_BYTES];
    char hex[2 * DT_SHA256_BYTES + 1], a[997];
    memset(a, 'a', sizeof a);
    dt_sha256_init(&h);
    for (size_t left = 1000000; left;) {
        size_t k = left < sizeof a ? left : sizeof a;
        dt_sha256_update(&h, a, k);
        left -= k;
    }
    dt_sha256_final(&h, d);
    dt_sha256_hex(d, hex);
    CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

    /* the same file twice: the same fingerprint; two files: two */
    const char *files[] = {"gpt2-mini.json", "qwen2-mini.json", "llama3-mini.json", "llama2-mini.model"};
    unsigned char fp[4][DT_TOK_FINGERPRINT_BYTES], again[DT_TOK_FINGERPRINT_BYTES];
    for (int i = 0; i < 4; i++) {
        dt_tokenizer *t = load_data(files[i]);
        dt_tok_fingerprint(t, fp[i]);
        dt_tok_free(t);
        t = load_data(files[i]);
        dt_tok_fingerprint(t, again);
        dt_tok_free(t);
        CHECK(!memcmp(fp[i], again, sizeof again));
        for (int j = 0; j < i; j++) CHECK(memcmp(fp[i], fp[j], sizeof again) != 0);
    }
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
    CHECK_EQ_I64(dt_tok_load("/nonexistent/tokenizer.json", &t, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "/nonexistent/tokenizer.json") != NULL);
    CHECK_EQ_I64(dt_tok_load("/", &t, &err), DT_EINVAL);
    /* neither JSON nor a SentencePiece model: one line naming both */
    char tmp[] = "/tmp/dt_test_tok_XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, "hello world", 11) == 11);
        close(fd);
        CHECK_EQ_I64(dt_tok_load(tmp, &t, &err), DT_EINVAL);
        CHECK(strstr(err.msg, "tokenizer.json") && strstr(err.msg, "SentencePiece") && !strchr(err.msg, '\n'));
        fd = open(tmp, O_WRONLY | O_TRUNC);
        close(fd);
        CHECK_EQ_I64(dt_tok_load(tmp, &t, &err), DT_EINVAL);
        CHECK(strstr(err.msg, "empty") != NULL);
        unlink(tmp);
    }
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

/* A released tokenizer (tests/tokenizer/data/released/, scripts/gen_released_tokenizer_goldens.py)
 * against the ids of tiktoken and `tokenizers` (byte-level BPE) or sentencepiece;
 * vocab: its size; eot: its end-of-text id. */
static void check_released(const char *name, const char *ext, int32_t vocab, int32_t eot) {
    char path[1024], ids[256], decoded[256];
    snprintf(path, sizeof path, "released/%s%s", name, ext);
    dt_tokenizer *t = load_data(path);
    snprintf(ids, sizeof ids, "released/%s.ids", name);
    snprintf(decoded, sizeof decoded, "released/%s.decoded", name);
    compare_corpus(t, name, "released/released-corpus.txt", ids, strcmp(ext, ".model") ? NULL : decoded);
    CHECK_EQ_I64(dt_tok_vocab_size(t), vocab);
    CHECK_EQ_I64(dt_tok_eot_id(t), eot);
    dt_tok_free(t);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_tokenizer DATA_DIR [released]\n");
        return 2;
    }
    data_dir = argv[1];
    if (argc > 2 && !strcmp(argv[2], "released")) {
        check_released("gpt2", ".json", 50257, 50256);
        check_released("whisper-llama3", ".json", 50258, 50257);
        check_released("botchan-bpe", ".model", 1000, 2);
        check_released("kyoto-unigram", ".model", 8000, 2);
        TEST_MAIN_END();
    }
    check_goldens("gpt2-mini", ".json");
    check_goldens("qwen2-mini", ".json");
    check_goldens("llama3-mini", ".json");
    check_goldens("llama2-mini", ".model");
    check_nfc();
    check_fingerprints();
    check_errors();
    TEST_MAIN_END();
}
