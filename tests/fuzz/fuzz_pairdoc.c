/* Fuzz target: preference pairs and prompt records (engine/data/prepare_pair.c). The first
 * byte chooses a pair (even) or a prompt (odd) record and, by its upper bits, a length limit
 * (0: none); the rest is the record, encoded with the committed qwen2-mini tokenizer and
 * ChatML. An accepted pair must hold: the prompt no longer than either side and shorter than
 * the limit, each side within the limit, and a batch of it whose targets are either -100 or
 * the next id. A refusal must leave nothing allocated (ASan's leak check). */
#include "dt_fuzz.h"

#include "dt_pairdoc.h"

static dt_tokenizer *g_tok;
static dt_prepdoc_ctx g_ctx;

static void check_pair(const dt_pair *p, int64_t max_len) {
    for (int s = 0; s < 2; s++) {
        if (!p->ids[s] || p->prompt_n > p->n[s]) abort();
        if (max_len > 0 && (p->n[s] > (size_t)max_len || p->prompt_n >= (size_t)max_len)) abort();
    }
    int64_t T = (int64_t)(p->n[0] > p->n[1] ? p->n[0] : p->n[1]);
    if (T == 0) abort();
    int32_t *ids = malloc((size_t)(2 * T) * sizeof *ids), *tg = malloc((size_t)(2 * T) * sizeof *tg);
    dt_error err;
    if (!ids || !tg || dt_pair_batch(p, 1, T, 0, ids, tg, &err) != DT_OK) abort();
    for (int64_t i = 0; i + 1 < 2 * T; i++)
        if (tg[i] != -100 && (i % T == T - 1 || tg[i] != ids[i + 1])) abort();
    free(ids), free(tg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    dt_error err;
    dt_error_clear(&err);
    if (!g_tok) {
        if (dt_tok_load(DT_FUZZ_TOKENIZER, &g_tok, &err) != DT_OK ||
            dt_prepdoc_init(&g_ctx, g_tok, DT_FUZZ_TOKENIZER, DT_PREP_CHAT, DT_CHAT_CHATML, &err) != DT_OK) {
            fprintf(stderr, "fuzz_pairdoc: %s\n", err.msg);
            abort();
        }
    }
    int64_t max_len = data[0] >> 1;
    const char *rec = (const char *)data + 1;
    size_t n = size - 1;
    if (data[0] % 2 == 0) {
        dt_pair p;
        if (dt_pairdoc_encode(&g_ctx, rec, n, "fuzz", 1, max_len, &p, &err) == DT_OK) check_pair(&p, max_len);
        else if (p.ids[0] || p.ids[1]) abort();
        dt_pair_free(&p);
    } else {
        int32_t *ids;
        size_t k;
        char *answer;
        if (dt_promptdoc_encode(&g_ctx, rec, n, "fuzz", 1, max_len, &ids, &k, &answer, &err) == DT_OK) {
            if (max_len > 0 && k >= (size_t)max_len) abort();
            free(ids), free(answer);
        } else if (ids || answer) {
            abort();
        }
    }
    return 0;
}
