/* Fuzz target: the tokenizer (engine/data/tokenizer.c). First byte even: the rest
 * is a tokenizer.json to load (then a fixed text is encoded and decoded with it).
 * Odd: the rest is text, encoded with the committed qwen2-mini tokenizer and
 * decoded back, which must give the same bytes (byte-level BPE is lossless) when the
 * text has no code point from U+0300 on; otherwise Qwen2's NFC normalizer may have
 * composed it, and the decoded text must encode to the same ids again. */
#include "dt_fuzz.h"

#include "dt_tokenizer.h"

static dt_tokenizer *g_qwen;

static void round_trip(const dt_tokenizer *t, const char *text, size_t len, int must_equal) {
    dt_error err;
    dt_error_clear(&err);
    int32_t *ids = NULL;
    size_t n = 0;
    if (dt_tok_encode(t, text, len, 1, &ids, &n, &err) != DT_OK) return;   /* e.g. invalid UTF-8 */
    char *back = NULL;
    size_t blen = 0;
    if (dt_tok_decode(t, ids, n, &back, &blen, &err) != DT_OK) abort();   /* its own ids decode */
    int high = 0;   /* a byte from 0xCC on: a code point from U+0300 on, which NFC may change */
    for (size_t i = 0; i < len; i++) high |= (unsigned char)text[i] >= 0xCC;
    if (must_equal && !high && (blen != len || memcmp(back, text, len) != 0)) abort();
    if (must_equal && high) {
        int32_t *again = NULL;
        size_t na = 0;
        if (dt_tok_encode(t, back, blen, 1, &again, &na, &err) != DT_OK) abort();
        if (na != n || memcmp(again, ids, n * sizeof *ids) != 0) abort();   /* NFC is idempotent */
        free(again);
    }
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    dt_error err;
    dt_error_clear(&err);
    if (!g_qwen && dt_tok_load(DT_FUZZ_TOKENIZER, &g_qwen, &err) != DT_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
        abort();
    }
    const char *rest = (const char *)data + 1;
    size_t n = size - 1;
    if (data[0] % 2 == 0) {
        dt_tokenizer *t = NULL;
        if (dt_tok_load_text(rest, n, "fuzz.json", &t, &err) == DT_OK) {
            static const char sample[] = "Hello, world! 123 \xe4\xbd\xa0\xe5\xa5\xbd <|endoftext|>\n";
            round_trip(t, sample, sizeof sample - 1, 0);
            dt_tok_free(t);
        }
    } else {
        round_trip(g_qwen, rest, n, 1);
    }
    return 0;
}
