/* test_data.c — the data loader: a directory of text files (binary files and
 * symlinks skipped), llm.c shards (valid, truncated, wrong magic, wrong version,
 * token outside the vocab), dtrun's v2 shards (uint16 and uint32 tokens, the loss mask
 * through dt_loader_next_masked, a vocab larger than the model's, an unexpected or mixed
 * tokenizer fingerprint, damaged headers and payloads), windows and targets,
 * train/valid split, shuffling determinism and resume positions; a FIFO or device as a
 * data file is refused at once (it used to block forever), and skipped inside a data
 * directory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_crc32c.h"
#include "dt_data.h"
#include "dt_test.h"

static char dir[256];

static void write_file(const char *name, const void *data, size_t len) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    fwrite(data, 1, len, f);
    fclose(f);
}

static void test_text_dir(void) {
    char td[512];
    snprintf(td, sizeof td, "%s/text", dir);
    mkdir(td, 0755);
    /* b comes after a: concatenation in name order */
    write_file("text/b.txt", "0123456789", 10);
    write_file("text/a.txt", "abcdefghij", 10);
    const unsigned char bin[4] = {1, 0, 2, 3};   /* a NUL byte: fortune's .dat index */
    write_file("text/a.dat", bin, sizeof bin);
    char target[512], link[512];
    snprintf(target, sizeof target, "%s/text/a.txt", dir);
    snprintf(link, sizeof link, "%s/text/a.u8", dir);
    CHECK(symlink(target, link) == 0);   /* skipped: would duplicate a.txt */

    dt_corpus *c;
    dt_error err;
    CHECK(dt_corpus_open(td, "text", 256, &c, &err) == DT_OK);
    CHECK_EQ_I64(dt_corpus_tokens(c), 20);
    CHECK_EQ_I64(dt_corpus_files(c), 2);
    /* T = 4: windows of 5 tokens at 0, 4, 8, 12: (20 - 1) / 4 = 4 */
    CHECK_EQ_I64(dt_corpus_windows(c, 4), 4);
    dt_loader *l;
    CHECK(dt_loader_create(c, 4, 1, 0, -1, 0, 7, 0, 1, "t", &l, &err) == DT_OK);
    int32_t in[4], tg[4];
    dt_loader_next(l, in, tg);
    CHECK(in[0] == 'a' && in[3] == 'd' && tg[0] == 'b' && tg[3] == 'e');
    dt_loader_next(l, in, tg);
    dt_loader_next(l, in, tg);   /* window 2 starts at 8: "ij01" -> "j012" */
    CHECK(in[0] == 'i' && in[2] == '0' && tg[3] == '2');
    dt_loader_free(l);

    dt_corpus_free(c);
    /* a byte outside a small vocab is an error naming the path */
    CHECK(dt_corpus_open(td, "text", 64, &c, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "vocab") != NULL);

    /* a single binary file given as text */
    char p[512];
    snprintf(p, sizeof p, "%s/text/a.dat", dir);
    dt_corpus *c2;
    CHECK(dt_corpus_open(p, "text", 256, &c2, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "a.dat") != NULL);
    CHECK(dt_corpus_open("/nonexistent/dir", "text", 256, &c2, &err) == DT_EINVAL);
    CHECK(dt_corpus_open(td, "bpe", 256, &c2, &err) == DT_EINVAL);
}

static void test_split(void) {
    int64_t tr, va;
    dt_split_windows(100, 0.05, &tr, &va);
    CHECK_EQ_I64(va, 5);
    CHECK_EQ_I64(tr, 95);
    dt_split_windows(10, 0.01, &tr, &va);   /* at least one */
    CHECK_EQ_I64(va, 1);
    dt_split_windows(10, 0.0, &tr, &va);
    CHECK_EQ_I64(va, 0);
    CHECK_EQ_I64(tr, 10);
}

static void make_shard(const char *name, int64_t n, uint16_t base) {
    uint16_t *t = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) t[i] = (uint16_t)(base + i % 1000);
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    dt_error err;
    CHECK(dt_shard_write(p, t, n, &err) == DT_OK);
    free(t);
}

static void test_shards(void) {
    char sd[512], p[512];
    snprintf(sd, sizeof sd, "%s/shards", dir);
    mkdir(sd, 0755);
    make_shard("shards/s0.bin", 1001, 0);
    make_shard("shards/s1.bin", 2001, 5000);
    dt_corpus *c;
    dt_error err;
    CHECK(dt_corpus_open(sd, "llmc", 50257, &c, &err) == DT_OK);
    CHECK_EQ_I64(dt_corpus_tokens(c), 3002);
    /* T = 100: 10 + 20 windows; no window crosses a shard */
    CHECK_EQ_I64(dt_corpus_windows(c, 100), 30);
    dt_loader *l;
    CHECK(dt_loader_create(c, 100, 2, 0, -1, 0, 1, 0, 1, "t", &l, &err) == DT_OK);
    int32_t in[200], tg[200];
    for (int i = 0; i < 5; i++) dt_loader_next(l, in, tg);
    dt_loader_next(l, in, tg);   /* windows 10, 11: the second shard's first two */
    CHECK(in[0] == 5000 && tg[0] == 5001 && in[100] == 5100);
    dt_loader_free(l);
    dt_corpus_free(c);

    /* token outside the vocab */
    CHECK(dt_corpus_open(sd, "llmc", 256, &c, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "s0.bin") != NULL && strstr(err.msg, "vocab") != NULL);

    /* truncated: drop the last byte of a copy */
    snprintf(p, sizeof p, "%s/shards/s0.bin", dir);
    FILE *f = fopen(p, "rb");
    unsigned char *buf = malloc(1024 + 2002);
    size_t n = fread(buf, 1, 1024 + 2002, f);
    fclose(f);
    CHECK_EQ_I64(n, 1024 + 2002);
    write_file("trunc.bin", buf, n - 1);
    snprintf(p, sizeof p, "%s/trunc.bin", dir);
    CHECK(dt_corpus_open(p, "llmc", 50257, &c, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "trunc.bin") != NULL && strstr(err.msg, "truncated") != NULL);
    printf("truncated: %s\n", err.msg);
    write_file("short.bin", buf, 100);
    snprintf(p, sizeof p, "%s/short.bin", dir);
    CHECK(dt_corpus_open(p, "llmc", 50257, &c, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "header") != NULL);

    /* mislabelled magic (an llm.c model file's) */
    int32_t magic = 20240326;
    memcpy(buf, &magic, 4);
    write_file("model.bin", buf, n);
    snprintf(p, sizeof p, "%s/model.bin", dir);
    CHECK(dt_corpus_open(p, "llmc", 50257, &c, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "model.bin") != NULL && strstr(err.msg, "magic 20240326") != NULL);
    printf("magic: %s\n", err.msg);
    /* wrong version */
    magic = 20240520;
    int32_t version = 7;
    memcpy(buf, &magic, 4);
    memcpy(buf + 4, &version, 4);
    write_file("v7.bin", buf, n);
    snprintf(p, sizeof p, "%s/v7.bin", dir);
    CHECK(dt_corpus_open(p, "llmc", 50257, &c, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "version 7") != NULL);
    free(buf);
}

static void v2_header(dt_shard_header *h, uint64_t vocab, int masked, unsigned char fp_byte) {
    memset(h, 0, sizeof *h);
    h->token_bytes = dt_shard2_token_bytes(vocab);
    h->flags = masked ? DT_SHARD2_FLAG_MASK : 0;
    h->vocab = vocab;
    h->eot_id = 0;
    h->prepare_id = 42;
    memset(h->fingerprint, fp_byte, sizeof h->fingerprint);
}

/* a copy of dir/from with byte at off XORed by x (x = 0: cut to off bytes) as dir/to */
static void damaged_copy(const char *from, const char *to, size_t off, unsigned char x) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, from);
    FILE *f = fopen(p, "rb");
    unsigned char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (x) buf[off] ^= x;
    else n = off;
    write_file(to, buf, n);
}

/* a copy of dir/from with the u32 at off set to v and the header CRC made right again */
static void patched_copy(const char *from, const char *to, size_t off, uint32_t v) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, from);
    FILE *f = fopen(p, "rb");
    unsigned char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    memcpy(buf + off, &v, 4);
    uint32_t crc = dt_crc32c(0, buf, DT_SHARD2_CRC_SPAN);
    memcpy(buf + DT_SHARD2_CRC_SPAN, &crc, 4);
    write_file(to, buf, n);
}

static void expect_refused(const char *name, const dt_corpus_opts *o, const char *want1, const char *want2) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    dt_corpus *c = NULL;
    dt_error err;
    dt_error_clear(&err);
    int rc = dt_corpus_open_opts(p, "llmc", o, &c, &err);
    CHECK_EQ_I64(rc, DT_EINVAL);
    CHECK(c == NULL && strchr(err.msg, '\n') == NULL);
    if ((want1 && !strstr(err.msg, want1)) || (want2 && !strstr(err.msg, want2))) {
        fprintf(stderr, "%s: message lacks '%s' / '%s': %s\n", name, want1, want2 ? want2 : "", err.msg);
        dt_test_failures++;
    }
}

/* v2 shards (dt_shard.h): both widths, the mask, and every refusal. */
static void test_shards_v2(void) {
    char sd[512], p[512];
    dt_error err;
    snprintf(sd, sizeof sd, "%s/v2", dir);
    mkdir(sd, 0755);
    /* uint32 tokens of a Qwen2-sized vocabulary with a mask (every third token trained) */
    enum { N = 1001 };
    int32_t ids[N];
    uint8_t mask[N];
    for (int i = 0; i < N; i++) {
        ids[i] = 151000 + i % 600;
        mask[i] = i % 3 == 0;
    }
    dt_shard_header h;
    v2_header(&h, 151646, 1, 0xAB);
    snprintf(p, sizeof p, "%s/v2/a.bin", dir);
    CHECK(dt_shard2_write(p, &h, ids, mask, N, &err) == DT_OK);
    struct stat st;
    CHECK(stat(p, &st) == 0 && st.st_size == 1024 + 4 * N + (N + 7) / 8);
    /* uint16 tokens, no mask, same tokenizer */
    for (int i = 0; i < N; i++) ids[i] = 7 + i;
    v2_header(&h, 151646, 0, 0xAB);
    h.token_bytes = 4;   /* the writer takes the header's width: 4 is allowed below 2^16 too */
    snprintf(p, sizeof p, "%s/v2/b.bin", dir);
    CHECK(dt_shard2_write(p, &h, ids, NULL, N, &err) == DT_OK);

    unsigned char fp[DT_SHARD2_FINGERPRINT_BYTES];
    memset(fp, 0xAB, sizeof fp);
    dt_corpus_opts o = {.vocab = 151936, .fingerprint = fp};   /* Qwen2's padded embedding rows */
    dt_corpus *c = NULL;
    CHECK(dt_corpus_open_opts(sd, "llmc", &o, &c, &err) == DT_OK);
    if (c) {
        CHECK_EQ_I64(dt_corpus_tokens(c), 2 * N);
        CHECK(dt_corpus_has_mask(c));
        CHECK_EQ_I64(dt_corpus_vocab(c), 151646);
        unsigned char got[DT_SHARD2_FINGERPRINT_BYTES];
        CHECK(dt_corpus_fingerprint(c, got) && !memcmp(got, fp, sizeof fp));
        /* T = 10, B = 1, in order: window 0 of a.bin, then b.bin's from window 100 */
        dt_loader *l;
        CHECK(dt_loader_create(c, 10, 1, 0, -1, 0, 1, 0, 1, "v2", &l, &err) == DT_OK);
        int32_t in[10], tg[10];
        uint8_t m[10];
        dt_loader_next_masked(l, in, tg, m);
        for (int t = 0; t < 10; t++) {
            CHECK_EQ_I64(in[t], 151000 + t);
            CHECK_EQ_I64(tg[t], 151000 + t + 1);
            CHECK_EQ_I64(m[t], (t + 1) % 3 == 0);   /* the mask of the target's position */
        }
        for (int w = 1; w < 100; w++) dt_loader_next_masked(l, in, tg, NULL);
        dt_loader_next_masked(l, in, tg, m);
        CHECK_EQ_I64(in[0], 7);
        for (int t = 0; t < 10; t++) CHECK_EQ_I64(m[t], 1);   /* an unmasked shard: all trained */
        dt_loader_free(l);
        dt_corpus_free(c);
    }
    /* no expectation: fine, and a model vocab smaller than the tokenizer's is refused */
    o.fingerprint = NULL;
    CHECK(dt_corpus_open_opts(sd, "llmc", &o, &c, &err) == DT_OK);
    dt_corpus_free(c);
    o.vocab = 50257;
    expect_refused("v2/a.bin", &o, "151646", "50257");
    /* another tokenizer expected: both fingerprints named */
    o.vocab = 151936;
    unsigned char other[DT_SHARD2_FINGERPRINT_BYTES];
    memset(other, 0xCD, sizeof other);
    o.fingerprint = other;
    expect_refused("v2/a.bin", &o, "abababababababab", "cdcdcdcdcdcdcdcd");
    /* two tokenizers in one folder */
    v2_header(&h, 151646, 0, 0xEF);
    snprintf(p, sizeof p, "%s/v2/c.bin", dir);
    CHECK(dt_shard2_write(p, &h, ids, NULL, 10, &err) == DT_OK);
    o.fingerprint = NULL;
    expect_refused("v2", &o, "two tokenizers", "c.bin");
    unlink(p);
    /* an llm.c shard carries no fingerprint: refused when one is expected */
    make_shard("v2llmc.bin", 100, 0);
    o.fingerprint = fp;
    expect_refused("v2llmc.bin", &o, "llm.c shard carries no tokenizer fingerprint", NULL);
    o.fingerprint = NULL;

    /* damage: payload byte, header byte, truncation, flags, width, padding */
    damaged_copy("v2/a.bin", "pay.bin", 1024 + 17, 0x01);
    expect_refused("pay.bin", &o, "pay.bin", "CRC-32C");
    damaged_copy("v2/a.bin", "hdr.bin", 33, 0x01);
    expect_refused("hdr.bin", &o, "hdr.bin", "header's CRC-32C");
    damaged_copy("v2/a.bin", "cut.bin", 1024 + 4 * N - 3, 0);
    expect_refused("cut.bin", &o, "cut.bin", "truncated");
    damaged_copy("v2/a.bin", "short2.bin", 600, 0);
    expect_refused("short2.bin", &o, "short2.bin", "header");
    damaged_copy("v2/a.bin", "pad.bin", 500, 0x80);
    expect_refused("pad.bin", &o, "pad.bin", NULL);   /* the header CRC does not cover the padding: named */
    /* headers whose CRC is right but whose fields are not */
    patched_copy("v2/b.bin", "w3.bin", 12, 3);          /* token bytes */
    expect_refused("w3.bin", &o, "w3.bin", "3-byte tokens");
    patched_copy("v2/b.bin", "flags.bin", 16, 6);       /* unknown flag bits */
    expect_refused("flags.bin", &o, "flags.bin", "flags");
    patched_copy("v2/b.bin", "ver.bin", 4, 3);          /* version */
    expect_refused("ver.bin", &o, "ver.bin", "version 3");
    patched_copy("v2/b.bin", "count.bin", 32, N + 1);   /* count against the size */
    expect_refused("count.bin", &o, "count.bin", "truncated");
    v2_header(&h, 70000, 0, 0xAB);
    h.token_bytes = 2;   /* 70000 ids do not fit uint16 */
    snprintf(p, sizeof p, "%s/w16.bin", dir);
    CHECK(dt_shard2_write(p, &h, ids, NULL, 10, &err) == DT_EINTERNAL);   /* the writer refuses too */
    /* 16-bit, unmasked, a token above the header's vocab cannot be written */
    v2_header(&h, 100, 0, 0xAB);
    snprintf(p, sizeof p, "%s/big.bin", dir);
    CHECK(dt_shard2_write(p, &h, ids, NULL, 200, &err) == DT_EINTERNAL);
    CHECK(stat(p, &st) != 0);   /* nothing left under the name (nor the temporary) */
    snprintf(p, sizeof p, "%s/big.bin.tmp", dir);
    CHECK(stat(p, &st) != 0);
}

/* Shuffling depends only on (seed, epoch); a loader moved to a saved position
 * continues exactly like the original. */
static void test_shuffle_determinism(void) {
    enum { NTOK = 4001, T = 10, B = 3 };
    uint16_t *toks = malloc(NTOK * 2);
    for (int i = 0; i < NTOK; i++) toks[i] = (uint16_t)i;
    char p[512];
    snprintf(p, sizeof p, "%s/det.bin", dir);
    dt_error err;
    CHECK(dt_shard_write(p, toks, NTOK, &err) == DT_OK);
    free(toks);
    dt_corpus *c;
    CHECK(dt_corpus_open(p, "llmc", 65536, &c, &err) == DT_OK);
    dt_loader *a, *b, *d;
    CHECK(dt_loader_create(c, T, B, 0, 380, 1, 1234, 0, 1, "a", &a, &err) == DT_OK);
    CHECK(dt_loader_create(c, T, B, 0, 380, 1, 1234, 0, 1, "b", &b, &err) == DT_OK);
    CHECK(dt_loader_create(c, T, B, 0, 380, 1, 999, 0, 1, "d", &d, &err) == DT_OK);
    int32_t ia[B * T], ta[B * T], ib[B * T], tb[B * T], id[B * T], td[B * T];
    int same_seed_equal = 1, diff_seed_differs = 0, in_order = 1;
    dt_loader_pos saved = {0, 0};
    /* 300 batches of 3 cross two epoch boundaries (126 per epoch) */
    for (int s = 0; s < 300; s++) {
        if (s == 200) saved = dt_loader_get_pos(a);
        dt_loader_next(a, ia, ta);
        dt_loader_next(b, ib, tb);
        dt_loader_next(d, id, td);
        same_seed_equal &= memcmp(ia, ib, sizeof ia) == 0;
        diff_seed_differs |= memcmp(ia, id, sizeof ia) != 0;
        in_order &= ia[0] % T == 0 && ia[0] < 3800 && ta[T - 1] == ia[T - 1] + 1;
    }
    CHECK(same_seed_equal);
    CHECK(diff_seed_differs);
    CHECK(in_order);
    CHECK_EQ_I64(saved.epoch, 1);
    /* replay from the saved position on a fresh loader */
    dt_loader *r;
    CHECK(dt_loader_create(c, T, B, 0, 380, 1, 1234, 0, 1, "r", &r, &err) == DT_OK);
    dt_loader_reset(a);
    CHECK(dt_loader_set_pos(r, saved, &err) == DT_OK);
    CHECK(dt_loader_set_pos(a, saved, &err) == DT_OK);
    int replay_equal = 1;
    for (int s = 0; s < 100; s++) {
        dt_loader_next(a, ia, ta);
        dt_loader_next(r, ib, tb);
        replay_equal &= memcmp(ia, ib, sizeof ia) == 0;
    }
    CHECK(replay_equal);
    /* each epoch visits every window once: count visits over one full epoch */
    dt_loader_reset(r);
    int *seen = calloc(380, sizeof *seen);
    for (int s = 0; s < 126; s++) {
        dt_loader_next(r, ib, tb);
        for (int k = 0; k < B; k++) seen[ib[k * T] / T]++;
    }
    int dup = 0, visited = 0;
    for (int w = 0; w < 380; w++) {
        dup |= seen[w] > 1;
        visited += seen[w];
    }
    CHECK(!dup);
    CHECK_EQ_I64(visited, 378);
    free(seen);
    /* ranks of a 2-rank world read disjoint halves of each global batch */
    dt_loader *r0, *r1;
    CHECK(dt_loader_create(c, T, B, 0, 380, 1, 5, 0, 2, "r0", &r0, &err) == DT_OK);
    CHECK(dt_loader_create(c, T, B, 0, 380, 1, 5, 1, 2, "r1", &r1, &err) == DT_OK);
    dt_loader_next(r0, ia, ta);
    dt_loader_next(r1, ib, tb);
    CHECK(memcmp(ia, ib, sizeof ia) != 0);
    /* too few windows for one batch */
    dt_loader *bad;
    CHECK(dt_loader_create(c, T, 500, 0, -1, 0, 5, 0, 1, "big", &bad, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "fewer than one batch") != NULL);
    CHECK(dt_loader_set_pos(r, (dt_loader_pos){0, 10000}, &err) == DT_EINVAL);
    dt_loader_free(a);
    dt_loader_free(b);
    dt_loader_free(d);
    dt_loader_free(r);
    dt_loader_free(r0);
    dt_loader_free(r1);
    dt_corpus_free(c);
}

/* opening a FIFO for reading waits for a writer: the loader must never do it */
static void test_not_regular(void) {
    char fifo[512], d[512];
    snprintf(fifo, sizeof fifo, "%s/fifo.bin", dir);
    CHECK(mkfifo(fifo, 0644) == 0);
    const char *formats[] = {"text", "llmc"};
    for (int i = 0; i < 2; i++) {
        dt_corpus *c = NULL;
        dt_error err;
        dt_error_clear(&err);
        CHECK(dt_corpus_open(fifo, formats[i], 256, &c, &err) == DT_EINVAL);
        CHECK(c == NULL);
        CHECK(strstr(err.msg, "fifo.bin: is a FIFO, not a regular file or a directory") != NULL);
    }
    dt_corpus *c = NULL;
    dt_error err;
    CHECK(dt_corpus_open("/dev/zero", "text", 256, &c, &err) == DT_EINVAL);   /* never ends */
    CHECK(strstr(err.msg, "character device") != NULL);
    /* in a directory, only regular files are data: the FIFO next to a shard is skipped */
    snprintf(d, sizeof d, "%s/mixed", dir);
    mkdir(d, 0755);
    snprintf(fifo, sizeof fifo, "%s/mixed/a.bin", dir);
    CHECK(mkfifo(fifo, 0644) == 0);
    make_shard("mixed/b.bin", 300, 0);
    CHECK(dt_corpus_open(d, "llmc", 50257, &c, &err) == DT_OK);
    if (c) CHECK_EQ_I64(dt_corpus_tokens(c), 300);
    dt_corpus_free(c);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dt_test_data_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_not_regular();
    test_text_dir();
    test_split();
    test_shards();
    test_shards_v2();
    test_shuffle_determinism();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    TEST_MAIN_END();
}
