/* test_data.c — the data loader: a directory of text files (binary files and
 * symlinks skipped), llm.c shards (valid, truncated, wrong magic, wrong version,
 * token outside the vocab), windows and targets, train/valid split, shuffling
 * determinism and resume positions; a FIFO or device as a data file is refused
 * at once (it used to block forever), and skipped inside a data directory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    test_shuffle_determinism();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    TEST_MAIN_END();
}
