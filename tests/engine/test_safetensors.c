/* test_safetensors.c — write/read round trip (F32, BF16, metadata, 8-byte
 * header padding, ordering), the reader's validation of damaged files (sizes
 * that overflow, offsets that are not integers, FIFOs and directories), and
 * the file sums of checkpoints (CRC-32C: check value, table == instruction,
 * the writers' sums == a sum of the written file). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_crc32c.h"
#include "dt_safetensors.h"
#include "dt_test.h"

static char dir[256];

static void path_of(char *p, size_t n, const char *name) { snprintf(p, n, "%s/%s", dir, name); }

/* Writes a raw safetensors file: 8-byte length, header text, payload bytes. */
static void write_raw(const char *name, const char *header, size_t payload) {
    char p[512];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    uint64_t n = strlen(header);
    fwrite(&n, 8, 1, f);
    fwrite(header, 1, n, f);
    for (size_t i = 0; i < payload; i++) fputc(0, f);
    fclose(f);
}

static void expect_bad(const char *name, const char *needle) {
    char p[512];
    path_of(p, sizeof p, name);
    dt_st_file *f = NULL;
    dt_error err;
    dt_error_clear(&err);
    int rc = dt_st_open(p, &f, &err);
    CHECK(rc == DT_EINVAL);
    if (rc == DT_EINVAL) {
        if (!strstr(err.msg, needle)) fprintf(stderr, "%s: message '%s' lacks '%s'\n", name, err.msg, needle);
        CHECK(strstr(err.msg, needle) != NULL);
        CHECK(strstr(err.msg, name) != NULL);   /* names the file */
    }
    CHECK(f == NULL);
}

static void test_round_trip(void) {
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {0x3f80, 0x4000, 0xbf80};   /* bf16 1, 2, -1 */
    int64_t sa[2] = {2, 3}, sb[1] = {3};
    dt_st_writer *w = dt_st_writer_new();
    dt_error err;
    CHECK(dt_st_writer_add(w, "z.bf16", "BF16", 1, sb, b, &err) == DT_OK);
    CHECK(dt_st_writer_add(w, "a.f32", "F32", 2, sa, a, &err) == DT_OK);
    CHECK(dt_st_writer_add(w, "a.f32", "F32", 2, sa, a, &err) == DT_EINVAL);   /* duplicate */
    CHECK(dt_st_writer_add(w, "q", "F13", 1, sb, b, &err) == DT_EINVAL);
    CHECK(dt_st_writer_meta(w, "format", "pt", &err) == DT_OK);
    char p[512];
    path_of(p, sizeof p, "rt.safetensors");
    CHECK(dt_st_write(w, p, &err) == DT_OK);
    dt_st_writer_free(w);
    CHECK(access(p, F_OK) == 0);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    CHECK(access(tmp, F_OK) != 0);   /* the temporary name is gone */

    /* header length is a multiple of 8 (reference writer's padding) */
    FILE *fp = fopen(p, "rb");
    uint64_t hn = 0;
    CHECK(fread(&hn, 8, 1, fp) == 1);
    fclose(fp);
    CHECK(hn % 8 == 0);

    dt_st_file *f;
    CHECK(dt_st_open(p, &f, &err) == DT_OK);
    CHECK_EQ_I64(dt_st_count(f), 2);
    CHECK_STR(dt_st_metadata(f, "format"), "pt");
    CHECK(dt_st_metadata(f, "nope") == NULL);
    const dt_st_tensor *t = dt_st_find(f, "a.f32");
    CHECK(t != NULL);
    if (t) {
        CHECK_STR(t->dtype, "F32");
        CHECK_EQ_I64(t->ndim, 2);
        CHECK_EQ_I64(t->shape[1], 3);
        CHECK_EQ_I64(t->begin, 0);   /* 4-byte dtypes first */
        CHECK(memcmp(dt_st_data(f, t), a, sizeof a) == 0);
    }
    t = dt_st_find(f, "z.bf16");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_I64(t->begin, 24);
        CHECK(memcmp(dt_st_data(f, t), b, sizeof b) == 0);
    }
    dt_st_close(f);
    dt_dtype dt;
    CHECK(dt_st_dtype_parse("BF16", &dt) == DT_OK && dt == DT_DTYPE_BF16);
    CHECK(dt_st_dtype_parse("I64", &dt) != DT_OK);
    CHECK_STR(dt_st_dtype_name(DT_DTYPE_FP16), "F16");
}

/* reads a whole file into a malloc'd buffer */
static unsigned char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n ? *n : 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

/* The streaming writer: same bytes as dt_st_write whatever the tensor order; an
 * incomplete stream fails at close and leaves neither the file nor its .tmp;
 * overlapping, gapped or out-of-range puts are refused; abort removes the .tmp. */
static void test_stream(void) {
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {0x3f80, 0x4000, 0xbf80};
    int64_t sa[2] = {2, 3}, sb[1] = {3};
    dt_error err;
    char ref[512], st[512], tmp[600];
    path_of(ref, sizeof ref, "ref.safetensors");
    path_of(st, sizeof st, "st.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp", st);
    dt_st_writer *w = dt_st_writer_new();
    CHECK(dt_st_writer_add(w, "a.f32", "F32", 2, sa, a, &err) == DT_OK);
    CHECK(dt_st_writer_add(w, "z.bf16", "BF16", 1, sb, b, &err) == DT_OK);
    CHECK(dt_st_write(w, ref, &err) == DT_OK);

    dt_st_stream *s = NULL;
    CHECK(dt_st_stream_open(w, st, &s, &err) == DT_OK);
    CHECK(dt_st_stream_put(s, "z.bf16", 0, b, sizeof b, &err) == DT_OK);   /* tensors in any order */
    CHECK(dt_st_stream_put(s, "a.f32", 0, a, 12, &err) == DT_OK);            /* a tensor in pieces */
    CHECK(dt_st_stream_put(s, "a.f32", 12, a + 3, 12, &err) == DT_OK);
    CHECK(dt_st_stream_close(s, &err) == DT_OK);
    size_t n1 = 0, n2 = 0;
    unsigned char *r1 = slurp(ref, &n1), *r2 = slurp(st, &n2);
    CHECK(r1 && r2 && n1 == n2 && n1 > 0 && memcmp(r1, r2, n1) == 0);
    free(r1);
    free(r2);
    CHECK(access(tmp, F_OK) != 0);

    /* incomplete: close fails, nothing left behind (an older file stays as it was) */
    CHECK(dt_st_stream_open(w, st, &s, &err) == DT_OK);
    CHECK(dt_st_stream_put(s, "a.f32", 0, a, sizeof a, &err) == DT_OK);
    dt_error_clear(&err);
    CHECK(dt_st_stream_close(s, &err) != DT_OK);
    CHECK(err.msg[0] != '\0');
    CHECK(access(tmp, F_OK) != 0);
    r2 = slurp(st, &n2);
    r1 = slurp(ref, &n1);
    CHECK(r1 && r2 && n1 == n2 && memcmp(r1, r2, n1) == 0);   /* the complete file from before */
    free(r1);
    free(r2);

    /* bad puts are refused; abort removes the temporary */
    CHECK(dt_st_stream_open(w, st, &s, &err) == DT_OK);
    CHECK(dt_st_stream_put(s, "nope", 0, a, 4, &err) != DT_OK);
    CHECK(dt_st_stream_put(s, "a.f32", 20, a, 8, &err) != DT_OK);   /* past the tensor's end */
    CHECK(dt_st_stream_put(s, "a.f32", 0, a, 8, &err) == DT_OK);
    CHECK(dt_st_stream_put(s, "a.f32", 4, a, 8, &err) != DT_OK);    /* overlaps bytes already put */
    CHECK(dt_st_stream_put(s, "a.f32", 16, a, 8, &err) != DT_OK);   /* leaves a gap */
    dt_st_stream_abort(s);
    CHECK(access(tmp, F_OK) != 0);
    dt_st_writer_free(w);
}

static void test_validation(void) {
    /* size does not match shape x dtype */
    write_raw("size.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4);
    expect_bad("size.safetensors", "needs 8");
    /* a hole between tensors */
    write_raw("hole.safetensors",
              "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12);
    expect_bad("hole.safetensors", "hole or overlap");
    /* overlapping tensors */
    write_raw("overlap.safetensors",
              "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    expect_bad("overlap.safetensors", "hole or overlap");
    /* truncated payload */
    write_raw("trunc.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 10);
    expect_bad("trunc.safetensors", "truncated");
    /* header length beyond the file */
    write_raw("hlen.safetensors", "", 0);
    char p[512];
    path_of(p, sizeof p, "hlen.safetensors");
    FILE *f = fopen(p, "wb");
    uint64_t n = 1000;
    fwrite(&n, 8, 1, f);
    fwrite("{}", 1, 2, f);
    fclose(f);
    expect_bad("hlen.safetensors", "header length");
    /* shorter than 8 bytes */
    path_of(p, sizeof p, "tiny.safetensors");
    f = fopen(p, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    expect_bad("tiny.safetensors", "shorter than");
    /* not JSON, not an object, unknown dtype, duplicate key, bad metadata */
    write_raw("json.safetensors", "{\"x\": [", 0);
    expect_bad("json.safetensors", "json.safetensors");
    write_raw("arr.safetensors", "[1, 2]   ", 0);
    expect_bad("arr.safetensors", "not a JSON object");
    write_raw("dtype.safetensors", "{\"x\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_bad("dtype.safetensors", "unknown dtype");
    write_raw("dup.safetensors",
              "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    expect_bad("dup.safetensors", "duplicate");
    write_raw("meta.safetensors", "{\"__metadata__\":{\"a\":1}}", 0);
    expect_bad("meta.safetensors", "must be a string");
    /* an empty file with only metadata and a padded header is fine */
    write_raw("empty.safetensors", "{\"__metadata__\":{\"format\":\"pt\"}}      ", 0);
    dt_st_file *ok;
    dt_error err;
    path_of(p, sizeof p, "empty.safetensors");
    CHECK(dt_st_open(p, &ok, &err) == DT_OK);
    if (ok) {
        CHECK_EQ_I64(dt_st_count(ok), 0);
        dt_st_close(ok);
    }
}

/* sizes derived from the header are bounded before anything uses them */
static void test_hostile_headers(void) {
    /* 2^32 x 2^32 F32 elements: the product wraps uint64 to 0 bytes, which used to pass */
    write_raw("wrap.safetensors",
              "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0);
    expect_bad("wrap.safetensors", "needs more than");
    write_raw("frac.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.5]}}", 4);
    expect_bad("frac.safetensors", "must be integers");
    write_raw("huge.safetensors", "{\"x\":{\"dtype\":\"U8\",\"shape\":[1e300],\"data_offsets\":[0,1e300]}}", 0);
    expect_bad("huge.safetensors", "shape entries must be integers");
    /* not a regular file: refused at once (a FIFO would block the open) */
    char p[512];
    path_of(p, sizeof p, "fifo.safetensors");
    CHECK(mkfifo(p, 0644) == 0);
    expect_bad("fifo.safetensors", "is a FIFO, not a regular file");
    path_of(p, sizeof p, "dir.safetensors");
    CHECK(mkdir(p, 0755) == 0);
    expect_bad("dir.safetensors", "is a directory, not a regular file");
}

/* CRC-32C one bit at a time, straight from the polynomial: the reference ISA-L's
 * dt_crc32c is checked against */
static uint32_t crc32c_bitwise(uint32_t crc, const unsigned char *p, size_t n) {
    uint32_t c = ~crc;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static void test_sums(void) {
    CHECK_EQ_I64(dt_crc32c(0, "123456789", 9), 0xE3069283u);   /* the CRC-32C check value */
    /* RFC 3720 (iSCSI) appendix B.4: 32 bytes of zeros, of ones, incrementing, decrementing */
    unsigned char v[4][32];
    for (int i = 0; i < 32; i++) v[0][i] = 0, v[1][i] = 0xff, v[2][i] = (unsigned char)i, v[3][i] = (unsigned char)(31 - i);
    static const uint32_t rfc3720[4] = {0x8A9136AAu, 0x62A8AB43u, 0x46DD794Eu, 0x113FDB5Cu};
    for (int t = 0; t < 4; t++) CHECK_EQ_I64(dt_crc32c(0, v[t], 32), rfc3720[t]);
    unsigned char buf[1031];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 131 + 7);
    int same = 1;   /* every length and alignment, and in pieces */
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n += 37)
            same &= dt_crc32c(0, buf + off, n) == crc32c_bitwise(0, buf + off, n) &&
                    dt_crc32c(dt_crc32c(0, buf + off, n / 3), buf + off + n / 3, n - n / 3) ==
                        crc32c_bitwise(0, buf + off, n);
    CHECK(same);
    /* the writers' sums are the sums of the files they wrote */
    float a[100];
    for (int i = 0; i < 100; i++) a[i] = (float)i;
    int64_t sh[1] = {100}, sh2[1] = {50};
    dt_st_writer *w = dt_st_writer_new();
    dt_error err;
    CHECK(dt_st_writer_add(w, "b", "F32", 1, sh2, a + 50, &err) == DT_OK);
    CHECK(dt_st_writer_add(w, "a", "F32", 1, sh, a, &err) == DT_OK);
    char p[512];
    path_of(p, sizeof p, "sum.safetensors");
    dt_file_sum ws = {0}, fs = {0};
    CHECK(dt_st_write_sum(w, p, &ws, &err) == DT_OK);
    CHECK(dt_file_sum_compute(p, "test file", &fs, &err) == DT_OK);
    CHECK(ws.bytes == fs.bytes && ws.crc32c == fs.crc32c && fs.bytes > 600);
    /* the stream, tensors put out of file order (read back at close) and in order */
    for (int order = 0; order < 2; order++) {
        dt_st_stream *st;
        dt_file_sum ss = {0};
        path_of(p, sizeof p, order ? "sum-s1.safetensors" : "sum-s0.safetensors");
        CHECK(dt_st_stream_open(w, p, &st, &err) == DT_OK);
        if (order) {
            CHECK(dt_st_stream_put(st, "a", 0, a, 400, &err) == DT_OK);
            CHECK(dt_st_stream_put(st, "b", 0, a + 50, 200, &err) == DT_OK);
        } else {
            CHECK(dt_st_stream_put(st, "b", 0, a + 50, 200, &err) == DT_OK);
            CHECK(dt_st_stream_put(st, "a", 0, a, 100, &err) == DT_OK);
            CHECK(dt_st_stream_put(st, "a", 100, (char *)a + 100, 300, &err) == DT_OK);
        }
        CHECK(dt_st_stream_close_sum(st, &ss, &err) == DT_OK);
        CHECK(ss.bytes == ws.bytes && ss.crc32c == ws.crc32c);
    }
    dt_st_writer_free(w);
    path_of(p, sizeof p, "text.txt");
    CHECK(dt_write_file_atomic_sum(p, "hello\n", 6, &ws, &err) == DT_OK);
    CHECK(ws.bytes == 6 && ws.crc32c == dt_crc32c(0, "hello\n", 6));
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dt_test_st_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_round_trip();
    test_stream();
    test_validation();
    test_hostile_headers();
    test_sums();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    TEST_MAIN_END();
}
