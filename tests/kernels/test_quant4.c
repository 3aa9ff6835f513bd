/* test_quant4.c — engine/device/quant4.c against bitsandbytes (goldens written by
 * scripts/gen_quant_goldens.py, tests/kernels/golden/quant4.txt): for every case the
 * same packed NF4 / FP4 bytes, the same absmax (fp32, or the 8-bit codes, nested absmax,
 * offset and dynamic map of the double quantisation) and the same dequantised values,
 * bit for bit; and the storage byte counts of common/dt_quant.h for those tensors. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_dtype.h"
#include "dt_quant4.h"
#include "dt_test.h"

#define LINE_MAX_BYTES (1 << 20)
/* the generator's input stream: scripts/gen_quant_goldens.py inputs() */
#define LCG_A UINT64_C(6364136223846793005)
#define LCG_C UINT64_C(1442695040888963407)
#define OUTLIER_EVERY 97
#define OUTLIER_SCALE 8
#define FNV_OFFSET UINT64_C(0xCBF29CE484222325)
#define FNV_PRIME UINT64_C(0x100000001B3)

typedef struct {
    char name[64], qtype[8], dtype[8];
    int64_t rows, cols, block, seed, scale_log2;
    int dq, zero_first;
} qcase;

/* "key hex hex ..." -> up to max words of width bytes each (little-endian integers). */
static int64_t parse_words(const char *line, const char *key, uint8_t *out, int64_t max, int width) {
    size_t kl = strlen(key);
    if (strncmp(line, key, kl) || line[kl] != ' ') return -1;
    const char *s = line + kl;
    int64_t n = 0;
    while (*s && *s != '\n') {
        char *end;
        unsigned long long v = strtoull(s, &end, 16);
        if (end == s) break;
        if (n < max) memcpy(out + n * width, &v, (size_t)width);   /* little-endian host */
        n++;
        s = end;
    }
    return n;
}

static void make_input(const qcase *c, float *x) {
    const int64_t n = c->rows * c->cols;
    uint64_t s = (uint64_t)c->seed;
    const float scale = ldexpf(1.0f, (int)c->scale_log2 - 23);
    for (int64_t i = 0; i < n; i++) {
        s = s * LCG_A + LCG_C;
        int64_t v = (int64_t)(s >> 40) - (INT64_C(1) << 23);
        if (i % OUTLIER_EVERY == OUTLIER_EVERY - 1) v *= OUTLIER_SCALE;
        x[i] = (float)v * scale;   /* exact: |v| < 2^27 with 3 trailing zero bits when scaled */
        if (c->zero_first && i < c->block) x[i] = 0.0f;
        /* the case's dtype, as x.to(dtype) rounds (to nearest even) */
        if (!strcmp(c->dtype, "bf16")) x[i] = dt_bf16_to_f32(dt_f32_to_bf16(x[i]));
        if (!strcmp(c->dtype, "fp16")) x[i] = dt_fp16_to_f32(dt_f32_to_fp16(x[i]));
    }
}

/* out.to(dtype) bits, as the golden's dequantised words */
static uint32_t as_dtype_bits(float v, const char *dtype) {
    if (!strcmp(dtype, "bf16")) return dt_f32_to_bf16(v);
    if (!strcmp(dtype, "fp16")) return dt_f32_to_fp16(v);
    return dt_f32_bits(v);
}

static int dtype_width(const char *dtype) { return strcmp(dtype, "fp32") ? 2 : 4; }

/* bitsandbytes dequantises a weight with an odd number of columns through its PyTorch
 * fallback, whose FP4 table holds +0.0 where the kernels (and dt_quant4_dequantize) hold
 * -0.0 for code 8: for those cases a -0.0 is compared as +0.0. */
static float fallback_zero(const qcase *c, float v) {
    return (c->cols % 2 && !strcmp(c->qtype, "fp4") && v == 0.0f) ? 0.0f : v;
}

typedef struct {
    uint8_t *packed, *qabsmax;
    float *x, *absmax, *absmax_back, *back, *nested;
} bufs;

static int check_case(const qcase *c, char **lines, int nl) {
    const int64_t n = c->rows * c->cols, nb = dt_quant_blocks(n, c->block);
    const dt_storage fmt = strcmp(c->qtype, "fp4") ? DT_STORAGE_NF4 : DT_STORAGE_FP4;
    const int64_t nn = dt_quant_blocks(nb, DT_QUANT_NESTED_BLOCK);
    bufs b = {malloc((size_t)n), malloc((size_t)nb), malloc((size_t)n * 4), malloc((size_t)nb * 4),
              malloc((size_t)nb * 4), malloc((size_t)n * 4), malloc((size_t)nn * 4)};
    uint8_t *want = malloc((size_t)n * 4 + 64);
    CHECK(b.packed && b.qabsmax && b.x && b.absmax && b.absmax_back && b.back && b.nested && want);
    int failures = 0;
    make_input(c, b.x);
    dt_quant4_quantize(b.x, n, fmt, c->block, b.packed, b.absmax);
    float offset = 0.0f;
    if (c->dq) dt_quant4_double(b.absmax, nb, b.qabsmax, b.nested, &offset);
    for (int i = 0; i < nl; i++) {
        const char *l = lines[i];
        int64_t k;
        if ((k = parse_words(l, "code", want, 16, 4)) >= 0) {
            float code[DT_QUANT_4BIT_CODES];
            dt_quant4_code(fmt, code);
            if (k != 16 || memcmp(code, want, sizeof code)) fprintf(stderr, "%s: code book differs\n", c->name);
            failures += k != 16 || memcmp(code, want, sizeof code) != 0;
        } else if ((k = parse_words(l, "packed", want, n, 1)) >= 0) {
            int64_t bad = 0;
            for (int64_t j = 0; j < (n + 1) / 2 && j < k; j++) bad += b.packed[j] != want[j];
            if (k != (n + 1) / 2 || bad) fprintf(stderr, "%s: packed: %" PRId64 " of %" PRId64 " bytes differ\n", c->name, bad, k);
            failures += k != (n + 1) / 2 || bad != 0;
        } else if ((k = parse_words(l, "absmax", want, nb, c->dq ? 1 : 4)) >= 0) {
            failures += k != nb || memcmp(c->dq ? (void *)b.qabsmax : (void *)b.absmax, want, (size_t)(nb * (c->dq ? 1 : 4)));
            if (k != nb || memcmp(c->dq ? (void *)b.qabsmax : (void *)b.absmax, want, (size_t)(nb * (c->dq ? 1 : 4))))
                fprintf(stderr, "%s: absmax differs\n", c->name);
        } else if ((k = parse_words(l, "offset", want, 1, 4)) >= 0) {
            failures += k != 1 || memcmp(&offset, want, 4) != 0;
            if (memcmp(&offset, want, 4)) fprintf(stderr, "%s: offset differs\n", c->name);
        } else if ((k = parse_words(l, "nested_absmax", want, nn, 4)) >= 0) {
            if (k != nn || memcmp(b.nested, want, (size_t)nn * 4)) fprintf(stderr, "%s: nested absmax differs\n", c->name);
            failures += k != nn || memcmp(b.nested, want, (size_t)nn * 4) != 0;
        } else if ((k = parse_words(l, "nested_code", want, DT_QUANT_DYNAMIC_CODES, 4)) >= 0) {
            float map[DT_QUANT_DYNAMIC_CODES];
            dt_quant_dynamic_map(map);
            if (k != DT_QUANT_DYNAMIC_CODES || memcmp(map, want, sizeof map)) fprintf(stderr, "%s: dynamic map differs\n", c->name);
            failures += k != DT_QUANT_DYNAMIC_CODES || memcmp(map, want, sizeof map) != 0;
        } else if (!strncmp(l, "dequant", 7)) {
            /* dequantise what bitsandbytes stored (through the double quantisation) */
            if (c->dq) dt_quant4_undouble(b.qabsmax, b.nested, offset, nb, b.absmax_back);
            else memcpy(b.absmax_back, b.absmax, (size_t)nb * 4);
            dt_quant4_dequantize(b.packed, b.absmax_back, n, fmt, c->block, b.back);
            const int w = dtype_width(c->dtype);
            if ((k = parse_words(l, "dequant_head", want, n, w)) >= 0) {
                int64_t bad = 0;
                for (int64_t j = 0; j < k && j < n; j++) {
                    uint32_t got = as_dtype_bits(fallback_zero(c, b.back[j]), c->dtype), exp = 0;
                    memcpy(&exp, want + j * w, (size_t)w);
                    bad += got != exp;
                }
                if (bad) fprintf(stderr, "%s: %" PRId64 " dequantised values differ\n", c->name, bad);
                failures += bad != 0;
            } else {
                uint64_t h = FNV_OFFSET, exp = 0;
                for (int64_t j = 0; j < n; j++) {
                    uint32_t v = as_dtype_bits(fallback_zero(c, b.back[j]), c->dtype);
                    for (int byte = 0; byte < w; byte++) h = (h ^ ((v >> (8 * byte)) & 0xFF)) * FNV_PRIME;
                }
                exp = strtoull(l + strlen("dequant_fnv1a "), NULL, 16);
                if (h != exp) fprintf(stderr, "%s: dequantised FNV-1a %016" PRIx64 " vs %016" PRIx64 "\n", c->name, h, exp);
                failures += h != exp;
            }
        }
    }
    /* the planner's byte count for this tensor (dt_storage_tensor_bytes) equals the
     * QuantState's tensors: packed, absmax (or codes + nested absmax + map + offset), code */
    int64_t state = (n + 1) / 2 + 4 * DT_QUANT_4BIT_CODES +
                    (c->dq ? nb + 4 * nn + 4 * DT_QUANT_DYNAMIC_CODES + 4 : 4 * nb);
    CHECK_EQ_I64(dt_storage_tensor_bytes(fmt, c->rows, c->cols, c->dq, c->block), state);
    free(b.packed), free(b.qabsmax), free(b.x), free(b.absmax), free(b.absmax_back), free(b.back), free(b.nested);
    free(want);
    if (failures) fprintf(stderr, "case %s: %d mismatches\n", c->name, failures);
    return failures;
}

#define MAX_LINES 16

int main(int argc, char **argv) {
    CHECK(argc == 2);
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", argv[1]);
        return 1;
    }
    char *buf = malloc(LINE_MAX_BYTES);
    char *lines[MAX_LINES];
    int nl = 0, cases = 0, failures = 0;
    qcase c;
    memset(&c, 0, sizeof c);
    int have = 0;
    CHECK(buf != NULL);
    for (;;) {
        char *got = fgets(buf, LINE_MAX_BYTES, f);
        if (!got || !strncmp(buf, "case ", 5)) {
            if (have) failures += check_case(&c, lines, nl), cases++;
            for (int i = 0; i < nl; i++) free(lines[i]);
            nl = 0;
            if (!got) break;
            int dq = 0, zero = 0;
            CHECK(sscanf(buf, "case %63s %7s %7s %" SCNd64 " %" SCNd64 " %" SCNd64 " %d %" SCNd64 " %" SCNd64 " %d",
                         c.name, c.qtype, c.dtype, &c.rows, &c.cols, &c.block, &dq, &c.seed, &c.scale_log2,
                         &zero) == 10);
            c.dq = dq, c.zero_first = zero, have = 1;
        } else if (buf[0] != '#' && nl < MAX_LINES) {
            lines[nl++] = strdup(buf);
        }
    }
    fclose(f);
    free(buf);
    CHECK(cases >= 7);
    CHECK(failures == 0);
    TEST_MAIN_END();
}
