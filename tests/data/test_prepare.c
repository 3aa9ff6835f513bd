/* test_prepare.c — dtrun prepare's engine (dt_prepare.h, dt_prepdoc.h, docs/data.md):
 *   - chat documents against the goldens of scripts/gen_tokenizer_goldens.py (the chat
 *     templates rendered as Hugging Face does, tokenized by `tokenizers`; the mask on the
 *     assistant's tokens), for ChatML (qwen2-mini) and Llama-3 (llama3-mini);
 *   - the shapes of JSONL lines and their one-line errors naming file and line;
 *   - whole runs: text folders (recursion, binary files, symlinks, empty and hidden files,
 *     --out inside an input folder skipped), the shards read back through data.c with the
 *     tokenizer's fingerprint, every document's text recovered, a text of several pieces
 *     giving the ids of the whole, the same bytes with 1 and 2 threads, the split, shard
 *     rollover, SentencePiece, chat with its mask;
 *   - the output directory's rules and the failures that leave it as it was.
 * Usage: test_prepare SOURCE_DIR */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_data.h"
#include "dt_json.h"
#include "dt_prepare.h"
#include "dt_prepdoc.h"
#include "dt_test.h"
#include "dt_test_data.h"
#include "dt_tokenizer.h"

static const char *src;
static char tmp[256];

static void path_of(char *out, size_t n, const char *base, const char *name) {
    size_t a = strlen(base), b = strlen(name);
    if (a + b + 2 > n) {
        fprintf(stderr, "path too long: %s/%s\n", base, name);
        exit(1);
    }
    memcpy(out, base, a);
    out[a] = '/';
    memcpy(out + a + 1, name, b + 1);
}

static void write_file(const char *name, const void *data, size_t len) {
    char p[1024];
    path_of(p, sizeof p, tmp, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(data, 1, len, f) == len);
    fclose(f);
}

static void mkdir_tmp(const char *name) {
    char p[1024];
    path_of(p, sizeof p, tmp, name);
    mkdir(p, 0755);
}

/* a binary file's bytes (a shard) */
static char *slurp_bin(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

static int exists(const char *base, const char *name) {
    char p[1024];
    struct stat st;
    path_of(p, sizeof p, base, name);
    return stat(p, &st) == 0;
}

/* ---------------------------------------------------------------- chat goldens */

/* next line of text (no newline); NULL at the end */
static const char *next_line(const char *text, size_t len, size_t *pos, size_t *n) {
    if (*pos >= len) return NULL;
    const char *s = text + *pos;
    const char *nl = memchr(s, '\n', len - *pos);
    *n = nl ? (size_t)(nl - s) : len - *pos;
    *pos += *n + (nl ? 1 : 0);
    return s;
}

static int same_numbers(const char *line, size_t n, const int32_t *v, const uint8_t *m, size_t k) {
    char *buf = malloc(n + 1);
    memcpy(buf, line, n);
    buf[n] = '\0';
    size_t i = 0;
    int ok = 1;
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " "), i++)
        ok &= i < k && atol(tok) == (v ? v[i] : m[i]);
    free(buf);
    return ok && i == k;
}

static void check_chat_goldens(const char *tok_file, dt_chat_template tmpl, const char *golden_name) {
    char tp[1024], p[1024];
    dt_tokenizer *t = dt_test_load_tok(src, tok_file, tp, sizeof tp);
    dt_prepdoc_ctx ctx;
    dt_error err = {0};
    CHECK_EQ_I64(dt_prepdoc_init(&ctx, t, tp, DT_PREP_CHAT, tmpl, &err), 0);
    size_t jl, gl, jpos = 0, gpos = 0, n, gn;
    snprintf(p, sizeof p, "%s/tests/data/chat.jsonl", src);
    char *jsonl = dt_test_slurp(p, &jl);
    snprintf(p, sizeof p, "%s/tests/data/%s", src, golden_name);
    char *golden = dt_test_slurp(p, &gl);
    const char *line;
    uint64_t lineno = 0;
    int docs = 0;
    while ((line = next_line(jsonl, jl, &jpos, &n))) {
        lineno++;
        const char *g = next_line(golden, gl, &gpos, &gn);
        CHECK(g != NULL);
        if (!g) break;
        int skip;
        CHECK_EQ_I64(dt_prepdoc_check_line(&ctx, line, n, "chat.jsonl", lineno, &skip, &err), 0);
        if (gn == 4 && !memcmp(g, "skip", 4)) {
            CHECK(skip);
            continue;
        }
        CHECK(!skip);
        int32_t *ids;
        uint8_t *mask;
        size_t k;
        CHECK_EQ_I64(dt_prepdoc_encode(&ctx, line, n, 1, &ids, &mask, &k, &err), 0);
        size_t mn;
        const char *m = next_line(golden, gl, &gpos, &mn);
        if (!same_numbers(g, gn, ids, NULL, k) || !m || !same_numbers(m, mn, NULL, mask, k)) {
            fprintf(stderr, "%s line %llu: ids or mask differ from %s\n", tok_file, (unsigned long long)lineno,
                    golden_name);
            dt_test_failures++;
        }
        docs++;
        free(ids);
        free(mask);
    }
    CHECK(docs >= 6);
    free(jsonl);
    free(golden);
    dt_tok_free(t);
}

/* ---------------------------------------------------------------- line shapes */

static void bad_line(const dt_prepdoc_ctx *ctx, const char *line, const char *want1, const char *want2) {
    dt_error err = {0};
    int skip;
    CHECK_EQ_I64(dt_prepdoc_check_line(ctx, line, strlen(line), "in.jsonl", 12, &skip, &err), DT_EINVAL);
    CHECK(strchr(err.msg, '\n') == NULL && strncmp(err.msg, "in.jsonl:12", 11) == 0);
    if ((want1 && !strstr(err.msg, want1)) || (want2 && !strstr(err.msg, want2))) {
        fprintf(stderr, "'%s': message lacks '%s' / '%s': %s\n", line, want1, want2 ? want2 : "", err.msg);
        dt_test_failures++;
    }
}

static void check_shapes(void) {
    char tp[1024];
    dt_tokenizer *t = dt_test_load_tok(src, "qwen2-mini.json", tp, sizeof tp);
    dt_prepdoc_ctx j, c;
    dt_error err = {0};
    CHECK_EQ_I64(dt_prepdoc_init(&j, t, tp, DT_PREP_JSONL, DT_CHAT_CHATML, &err), 0);
    CHECK_EQ_I64(dt_prepdoc_init(&c, t, tp, DT_PREP_CHAT, DT_CHAT_CHATML, &err), 0);
    bad_line(&j, "{\"text\": \"a\",}", "in.jsonl:12:", "invalid JSON");
    bad_line(&j, "{\"text\": \"a\"", "in.jsonl:12:", "end of input");
    bad_line(&j, "[1, 2]", "expected an object", NULL);
    bad_line(&j, "{\"txt\": \"a\"}", "no \"text\" string", NULL);
    bad_line(&j, "{\"text\": 5}", "$.text", "expected a string");
    bad_line(&j, "{\"text\": \"a\", \"text\": \"b\"}", "duplicate key", NULL);
    bad_line(&j, "{\"messages\": []}", "--format chat", NULL);
    bad_line(&j, "{\"text\": \"bad \\ud800 surrogate\"}", "invalid JSON", NULL);
    bad_line(&c, "{\"messages\": {}}", "$.messages", NULL);
    bad_line(&c, "{\"messages\": [{\"role\": \"user\"}]}", "$.messages[0]", "content");
    bad_line(&c, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", "$.messages[0].role", "tool");
    bad_line(&c, "{\"messages\": [{\"role\": \"user\", \"content\": null}]}", "content", "expected a string");
    bad_line(&c, "{\"instruction\": \"x\"}", "output", NULL);
    bad_line(&c, "{\"prompt\": \"x\", \"completion\": \"y\"}", "neither \"messages\" nor \"instruction\"", NULL);
    int skip;
    CHECK_EQ_I64(dt_prepdoc_check_line(&j, "{\"text\": \"\"}", 12, "x", 1, &skip, &err), 0);
    CHECK(skip);
    /* the template's tokens must exist */
    dt_tokenizer *sp = dt_test_load_tok(src, "llama2-mini.model", tp, sizeof tp);
    CHECK_EQ_I64(dt_prepdoc_init(&c, sp, tp, DT_PREP_CHAT, DT_CHAT_CHATML, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "<|im_start|>") && strstr(err.msg, "llama2-mini.model"));
    CHECK_EQ_I64(dt_prepdoc_init(&c, t, "qwen2", DT_PREP_CHAT, DT_CHAT_LLAMA3, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "<|begin_of_text|>") != NULL);
    dt_tok_free(sp);
    dt_tok_free(t);
}

/* ---------------------------------------------------------------- whole runs */

/* Every document of a prepared split (the shards in DIR/split read through data.c with
 * the tokenizer's fingerprint): ids between end-of-text tokens, decoded. */
typedef struct {
    char **text;
    size_t *len;
    int n;
    uint64_t tokens, trained;
} doc_set;

static void free_docs(doc_set *d) {
    for (int i = 0; i < d->n; i++) free(d->text[i]);
    free(d->text);
    free(d->len);
    memset(d, 0, sizeof *d);
}

static void read_split(const char *out, const char *split, const dt_tokenizer *t, doc_set *d) {
    char p[1024];
    path_of(p, sizeof p, out, split);
    unsigned char fp[DT_TOK_FINGERPRINT_BYTES];
    dt_tok_fingerprint(t, fp);
    dt_corpus_opts o = {.vocab = dt_tok_vocab_size(t), .fingerprint = fp};
    dt_corpus *c = NULL;
    dt_error err = {0};
    int rc = dt_corpus_open_opts(p, "llmc", &o, &c, &err);
    CHECK_EQ_I64(rc, 0);
    if (rc) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    /* one window over everything (one shard per split here): T = tokens - 1, B = 1 */
    int64_t n = dt_corpus_tokens(c);
    int32_t *in = malloc((size_t)n * sizeof *in), *tg = malloc((size_t)n * sizeof *tg);
    uint8_t *m = malloc((size_t)n);
    dt_loader *l = NULL;
    CHECK_EQ_I64(dt_loader_create(c, n - 1, 1, 0, -1, 0, 0, 0, 1, "all", &l, &err), 0);
    dt_loader_next_masked(l, in, tg, m);
    in[n - 1] = tg[n - 2];   /* in: every token */
    const int32_t eot = dt_tok_eot_id(t);
    CHECK_EQ_I64(in[0], eot);
    d->tokens = (uint64_t)n;
    d->trained = 0;
    for (int64_t i = 0; i < n - 1; i++) d->trained += m[i];   /* targets 1 .. n-1 */
    for (int64_t start = 1, i = 1; i <= n; i++) {
        if (i < n && in[i] != eot) continue;
        char *text;
        size_t len;
        CHECK_EQ_I64(dt_tok_decode(t, in + start, (size_t)(i - start), &text, &len, &err), 0);
        d->text = realloc(d->text, (size_t)(d->n + 1) * sizeof *d->text);
        d->len = realloc(d->len, (size_t)(d->n + 1) * sizeof *d->len);
        d->text[d->n] = text;
        d->len[d->n++] = len;
        start = i + 1;
    }
    free(in);
    free(tg);
    free(m);
    dt_loader_free(l);
    dt_corpus_free(c);
}

static int has_doc(const doc_set *d, const char *text) {
    for (int i = 0; i < d->n; i++)
        if (d->len[i] == strlen(text) && !memcmp(d->text[i], text, d->len[i])) return 1;
    return 0;
}

static int run_prepare(dt_prep_opts *o, dt_prep_result *r, dt_error *err) {
    dt_error_clear(err);
    return dt_prepare(o, r, err);
}

static void check_text_run(void) {
    char tp[1024], in[1024], out[1024], p[1024];
    dt_tokenizer *t = dt_test_load_tok(src, "qwen2-mini.json", tp, sizeof tp);
    mkdir_tmp("in");
    mkdir_tmp("in/b");
    mkdir_tmp("in/b/c");
    const char *z = "caf\xc3\xa9 <|endoftext|> zed\n", *deep = "deep\n\n  down";
    write_file("in/a.txt", "first document\n", 15);
    write_file("in/b/z.txt", z, strlen(z));
    write_file("in/b/c/deep.txt", deep, strlen(deep));
    write_file("in/b/empty.txt", "", 0);
    write_file("in/b/.hidden", "hidden", 6);
    write_file("in/b/bin.dat", "a\0b", 3);
    path_of(p, sizeof p, tmp, "in/a.txt");
    path_of(in, sizeof in, tmp, "in/b/link.txt");
    CHECK(symlink(p, in) == 0);
    path_of(in, sizeof in, tmp, "in");
    path_of(out, sizeof out, tmp, "in/out");   /* inside the input folder: not read */
    const char *inputs[] = {in};
    dt_prep_opts o;
    dt_prep_defaults(&o);
    o.tokenizer = tp;
    o.out = out;
    o.inputs = inputs;
    o.n_inputs = 1;
    o.val_fraction = 0;
    dt_prep_result r;
    dt_error err;
    int rc = run_prepare(&o, &r, &err);
    CHECK_EQ_I64(rc, 0);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    CHECK_EQ_I64(r.docs[0], 3);
    CHECK_EQ_I64(r.docs[1], 0);
    CHECK_EQ_I64(r.files, 4);           /* a.txt, z.txt, deep.txt, empty.txt */
    CHECK_EQ_I64(r.skipped_files, 2);   /* bin.dat, link.txt */
    CHECK_EQ_I64(r.skipped_docs, 1);    /* empty.txt */
    CHECK_EQ_I64(r.shards[0], 1);
    CHECK_EQ_I64(r.token_bytes, 2);
    CHECK(exists(out, DT_PREP_MANIFEST) && exists(out, "train/train-000000.bin") && !exists(out, "val"));
    CHECK(!exists(out, DT_PREP_STAGING));
    doc_set d = {0};
    read_split(out, "train", t, &d);
    CHECK_EQ_I64(d.n, 3);
    CHECK(has_doc(&d, "first document\n"));
    CHECK(has_doc(&d, z));   /* the special token's text as text */
    CHECK(has_doc(&d, deep));
    CHECK_EQ_I64(d.tokens, r.tokens[0]);
    free_docs(&d);

    /* again: the previous output is replaced, the result the same bytes */
    path_of(p, sizeof p, out, "train/train-000000.bin");
    size_t n1, n2;
    char *b1 = slurp_bin(p, &n1);
    rc = run_prepare(&o, &r, &err);
    CHECK_EQ_I64(rc, 0);
    char *b2 = slurp_bin(p, &n2);
    CHECK(n1 == n2 && !memcmp(b1, b2, n1));
    free(b1);
    free(b2);
    /* a file of its own in --out: refused, nothing changed */
    path_of(p, sizeof p, out, "notes.txt");
    FILE *f = fopen(p, "w");
    fputs("mine", f);
    fclose(f);
    rc = run_prepare(&o, &r, &err);
    CHECK_EQ_I64(rc, DT_EINVAL);
    CHECK(strstr(err.msg, "notes.txt") && strstr(err.msg, "did not write"));
    CHECK(exists(out, DT_PREP_MANIFEST) && exists(out, "train/train-000000.bin"));
    unlink(p);
    path_of(p, sizeof p, out, "train/mine.bin");
    f = fopen(p, "w");
    fclose(f);
    rc = run_prepare(&o, &r, &err);
    CHECK_EQ_I64(rc, DT_EINVAL);
    CHECK(strstr(err.msg, "train/mine.bin") != NULL);
    unlink(p);
    /* a stale staging folder (a killed run) is cleared */
    path_of(p, sizeof p, out, DT_PREP_STAGING);
    mkdir(p, 0755);
    path_of(p, sizeof p, out, DT_PREP_STAGING "/train");
    mkdir(p, 0755);
    path_of(p, sizeof p, out, DT_PREP_STAGING "/train/train-000003.bin.tmp");
    f = fopen(p, "w");
    fclose(f);
    rc = run_prepare(&o, &r, &err);
    CHECK_EQ_I64(rc, 0);
    CHECK(!exists(out, DT_PREP_STAGING));
    /* --out is a file */
    path_of(p, sizeof p, tmp, "in/a.txt");
    o.out = p;
    CHECK_EQ_I64(run_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "not a directory") != NULL);
    o.out = out;
    /* stop requested: DT_ERUNTIME and the old output whole */
    volatile sig_atomic_t stop = 1;
    o.stop = &stop;
    CHECK_EQ_I64(run_prepare(&o, &r, &err), DT_ERUNTIME);
    CHECK(strstr(err.msg, "interrupted") != NULL);
    CHECK(exists(out, DT_PREP_MANIFEST) && exists(out, "train/train-000000.bin") && !exists(out, DT_PREP_STAGING));
    o.stop = NULL;
    dt_tok_free(t);
}

/* A text of several pieces gives the ids of the whole text; 1 and 2 threads the same bytes. */
static void check_pieces(void) {
    char tp[1024], p[1024], o1[1024], o2[1024];
    dt_tokenizer *t = dt_test_load_tok(src, "qwen2-mini.json", tp, sizeof tp);
    size_t clen;
    snprintf(p, sizeof p, "%s/tests/tokenizer/data/corpus.txt", src);
    char *corpus = dt_test_slurp(p, &clen);
    size_t reps = ((size_t)5 << 20) / clen + 1, n = reps * clen;   /* 5 MiB: 5 pieces */
    char *big = malloc(n);
    for (size_t i = 0; i < reps; i++) memcpy(big + i * clen, corpus, clen);
    write_file("big.txt", big, n);
    path_of(p, sizeof p, tmp, "big.txt");
    path_of(o1, sizeof o1, tmp, "o1");
    path_of(o2, sizeof o2, tmp, "o2");
    const char *inputs[] = {p};
    dt_prep_opts o;
    dt_prep_defaults(&o);
    o.tokenizer = tp;
    o.inputs = inputs;
    o.n_inputs = 1;
    o.shard_tokens = 300000;   /* several shards */
    dt_prep_result r1, r2;
    dt_error err;
    o.out = o1;
    o.threads = 1;
    CHECK_EQ_I64(run_prepare(&o, &r1, &err), 0);
    o.out = o2;
    o.threads = 2;
    CHECK_EQ_I64(run_prepare(&o, &r2, &err), 0);
    CHECK(r1.shards[0] > 2 && r1.shards[0] == r2.shards[0] && r1.tokens[0] == r2.tokens[0]);
    CHECK_EQ_I64(r1.docs[1], 0);   /* one document: no validation split by default */
    int32_t *ids;
    size_t k;
    CHECK_EQ_I64(dt_tok_encode(t, big, n, 0, &ids, &k, &err), 0);
    CHECK_EQ_I64(r1.tokens[0], k + 1);
    /* every shard: identical across thread counts, and together [eot] + ids */
    size_t at = 0;
    int same = 1, equal = 1;
    for (int s = 0; s < r1.shards[0]; s++) {
        char name[64], a[1024], b[1024];
        snprintf(name, sizeof name, "train/train-%06d.bin", s);
        path_of(a, sizeof a, o1, name);
        path_of(b, sizeof b, o2, name);
        size_t na, nb;
        char *ba = slurp_bin(a, &na), *bb = slurp_bin(b, &nb);
        same &= na == nb && !memcmp(ba, bb, na);
        for (size_t i = 1024; i + 1 < na; i += 2, at++) {
            uint16_t v;
            memcpy(&v, ba + i, 2);
            int32_t want = at == 0 ? dt_tok_eot_id(t) : ids[at - 1];
            equal &= v == want;
        }
        free(ba);
        free(bb);
    }
    CHECK(same);
    CHECK(equal);
    CHECK_EQ_I64(at, k + 1);
    free(ids);
    free(big);
    free(corpus);
    dt_tok_free(t);
}

/* The split takes ceil(F x N) documents; SentencePiece documents start with </s>. */
static void check_split_and_spm(void) {
    char tp[1024], in[1024], out[1024];
    dt_tokenizer *t = dt_test_load_tok(src, "llama2-mini.model", tp, sizeof tp);
    mkdir_tmp("ten");
    for (int i = 0; i < 10; i++) {
        char name[64], text[64];
        snprintf(name, sizeof name, "ten/doc%d.txt", i);
        int len = snprintf(text, sizeof text, "Document number %d.\nIt has 2 lines.", i);
        write_file(name, text, (size_t)len);
    }
    path_of(in, sizeof in, tmp, "ten");
    path_of(out, sizeof out, tmp, "ten-out");
    const char *inputs[] = {in};
    dt_prep_opts o;
    dt_prep_defaults(&o);
    o.tokenizer = tp;
    o.out = out;
    o.inputs = inputs;
    o.n_inputs = 1;
    o.val_fraction = 0.25;   /* ceil(2.5) = 3 */
    dt_prep_result r;
    dt_error err;
    int rc = run_prepare(&o, &r, &err);
    CHECK_EQ_I64(rc, 0);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    CHECK_EQ_I64(r.docs[1], 3);
    CHECK_EQ_I64(r.docs[0], 7);
    doc_set tr = {0}, va = {0};
    read_split(out, "train", t, &tr);
    read_split(out, "val", t, &va);
    CHECK_EQ_I64(tr.n + va.n, 10);
    for (int i = 0; i < 10; i++) {
        char text[64];
        snprintf(text, sizeof text, "Document number %d.\nIt has 2 lines.", i);
        CHECK(has_doc(&tr, text) != has_doc(&va, text));   /* in exactly one split */
    }
    free_docs(&tr);
    free_docs(&va);
    /* another seed, another split; too large a fraction */
    o.seed = 7;
    CHECK_EQ_I64(run_prepare(&o, &r, &err), 0);
    o.val_fraction = 0.95;
    CHECK_EQ_I64(run_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "leaves none for training") != NULL);
    dt_tok_free(t);
}

static void check_chat_run(void) {
    char tp[1024], in[1024], out[1024], p[1024];
    dt_tokenizer *t = dt_test_load_tok(src, "qwen2-mini.json", tp, sizeof tp);
    snprintf(in, sizeof in, "%s/tests/data/chat.jsonl", src);
    path_of(out, sizeof out, tmp, "chat-out");
    const char *inputs[] = {in};
    dt_prep_opts o;
    dt_prep_defaults(&o);
    o.tokenizer = tp;
    o.out = out;
    o.inputs = inputs;
    o.n_inputs = 1;
    o.format = DT_PREP_CHAT;
    o.val_fraction = 0;
    dt_prep_result r;
    dt_error err;
    int rc = run_prepare(&o, &r, &err);
    CHECK_EQ_I64(rc, 0);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    CHECK_EQ_I64(r.docs[0], 7);
    CHECK_EQ_I64(r.skipped_docs, 1);
    /* the golden's mask lines add up to what was trained */
    snprintf(p, sizeof p, "%s/tests/data/chat-chatml.golden", src);
    size_t gl, pos = 0, n;
    char *g = dt_test_slurp(p, &gl);
    const char *line;
    uint64_t ones = 0;
    int k = 0;
    while ((line = next_line(g, gl, &pos, &n))) {
        if (n == 4 && !memcmp(line, "skip", 4)) continue;
        if (k++ % 2 == 1)
            for (size_t i = 0; i < n; i++) ones += line[i] == '1';
    }
    free(g);
    CHECK_EQ_I64(r.trained[0], ones);
    doc_set d = {0};
    read_split(out, "train", t, &d);
    CHECK_EQ_I64(d.n, 7);
    CHECK_EQ_I64(d.trained, ones);   /* the mask read back by data.c */
    free_docs(&d);
    dt_tok_free(t);
}

/* Bad input: one line naming what is wrong; nothing left behind. */
static void check_bad_inputs(void) {
    char tp[1024], in[1024], out[1024];
    dt_tokenizer *t = dt_test_load_tok(src, "qwen2-mini.json", tp, sizeof tp);
    dt_tok_free(t);
    path_of(out, sizeof out, tmp, "bad-out");
    dt_prep_opts o;
    dt_prep_defaults(&o);
    o.tokenizer = tp;
    o.out = out;
    o.n_inputs = 1;
    const char *inputs[1];
    o.inputs = inputs;
    dt_prep_result r;
    dt_error err;
    /* not UTF-8, on line 3 */
    write_file("latin1.txt", "one\ntwo\ncaf\xe9\n", 13);
    path_of(in, sizeof in, tmp, "latin1.txt");
    inputs[0] = in;
    CHECK_EQ_I64(run_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "latin1.txt:3:") && strstr(err.msg, "not UTF-8") && strstr(err.msg, "0xE9"));
    CHECK(!exists(tmp, "bad-out"));
    /* a NUL byte in a file named directly */
    write_file("nul.txt", "a\0b", 3);
    path_of(in, sizeof in, tmp, "nul.txt");
    CHECK_EQ_I64(run_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "nul.txt") && strstr(err.msg, "NUL"));
    /* malformed JSONL on line 3 */
    const char *jl = "{\"text\": \"ok\"}\n\n{\"text\": \"no end}\n";
    write_file("bad.jsonl", jl, strlen(jl));
    path_of(in, sizeof in, tmp, "bad.jsonl");
    o.format = DT_PREP_JSONL;
    CHECK_EQ_I64(run_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "bad.jsonl:3:") && strstr(err.msg, "invalid JSON"));
    CHECK(!exists(tmp, "bad-out"));
    /* an unsupported tokenizer.json names its model type */
    const char *wp = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}";
    write_file("wp.json", wp, strlen(wp));
    path_of(tp, sizeof tp, tmp, "wp.json");
    CHECK_EQ_I64(run_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "WordPiece") != NULL);
    /* no documents; a missing input */
    mkdir_tmp("nothing");
    dt_tok_free(dt_test_load_tok(src, "qwen2-mini.json", tp, sizeof tp));
    path_of(in, sizeof in, tmp, "nothing");
    CHECK_EQ_I64(run_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "no documents") != NULL);
    path_of(in, sizeof in, tmp, "missing.jsonl");
    CHECK_EQ_I64(run_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "missing.jsonl") != NULL);
    CHECK(!exists(tmp, "bad-out"));
    /* options */
    o.val_fraction = 1.0;
    CHECK_EQ_I64(run_prepare(&o, &r, &err), DT_EINVAL);
    o.val_fraction = DT_PREP_VAL_AUTO;
    o.shard_tokens = 0;
    CHECK_EQ_I64(run_prepare(&o, &r, &err), DT_EINVAL);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_prepare SOURCE_DIR\n");
        return 2;
    }
    src = argv[1];
    snprintf(tmp, sizeof tmp, "/tmp/dt_test_prepare_XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    check_chat_goldens("qwen2-mini.json", DT_CHAT_CHATML, "chat-chatml.golden");
    check_chat_goldens("llama3-mini.json", DT_CHAT_LLAMA3, "chat-llama3.golden");
    check_shapes();
    check_text_run();
    check_pieces();
    check_split_and_spm();
    check_chat_run();
    check_bad_inputs();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) return 1;
    TEST_MAIN_END();
}
