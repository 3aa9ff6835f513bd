/* test_pairs.c — preference pairs and prompt records (engine/data/prepare_pair.c).
 *
 * tests/data/pairs.jsonl (TRL plain, conversational and implicit-prompt records, LLaMA-Factory's
 * alpaca and sharegpt ranking records, non-ASCII text) encoded with qwen2-mini and ChatML, batched
 * by dt_pair_batch, against tests/data/pairs-chatml.golden (scripts/gen_pair_goldens.py: TRL 1.16's
 * DPOTrainer._prepare_dataset and DataCollatorForPreference): every input id of every row, and the
 * shifted targets against the completion mask, exactly; with max_len 30 (keep_start) too. Then the
 * refusals: an empty side, a prompt of max_len tokens or more, malformed records; and GRPO's
 * prompt records.
 * usage: test_pairs SOURCE_DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_pairdoc.h"
#include "dt_test.h"
#include "dt_test_data.h"

#define MAX_PAIRS 16
#define IGNORE (-100)
#define QWEN_PAD 0 /* qwen2-mini's <|endoftext|>, TRL's pad token in the golden */

static const char *src;
static dt_prepdoc_ctx ctx;
static char *records[MAX_PAIRS];
static size_t n_records;

static void read_records(void) {
    char p[1024];
    snprintf(p, sizeof p, "%s/tests/data/pairs.jsonl", src);
    size_t len;
    char *b = dt_test_slurp(p, &len);
    for (char *s = strtok(b, "\n"); s && n_records < MAX_PAIRS; s = strtok(NULL, "\n")) records[n_records++] = strdup(s);
    free(b);
}

/* one golden batch: header "CASE max_len T npairs i0 i1 ..." then ids / mask rows */
static void check_batch(FILE *g) {
    char name[32];
    long long max_len, T, np;
    if (fscanf(g, "%31s %lld %lld %lld", name, &max_len, &T, &np) != 4) return;
    dt_pair pairs[MAX_PAIRS];
    for (long long i = 0; i < np; i++) {
        int idx = 0;
        CHECK(fscanf(g, "%d", &idx) == 1);
        dt_error err = {0};
        int rc = dt_pairdoc_encode(&ctx, records[idx], strlen(records[idx]), "pairs.jsonl", (uint64_t)idx + 1, max_len,
                                   &pairs[i], &err);
        CHECK_EQ_I64(rc, 0);
        if (rc) fprintf(stderr, "%s\n", err.msg);
    }
    int32_t *ids = calloc((size_t)(2 * np * T), 4), *tg = calloc((size_t)(2 * np * T), 4);
    dt_error err = {0};
    CHECK(dt_pair_batch(pairs, np, T, QWEN_PAD, ids, tg, &err) == 0);
    int64_t bad = 0;
    for (long long r = 0; r < 2 * np; r++) {
        long long want_id[512], want_m[512];
        for (long long t = 0; t < T; t++) CHECK(fscanf(g, "%lld", &want_id[t]) == 1);
        for (long long t = 0; t < T; t++) CHECK(fscanf(g, "%lld", &want_m[t]) == 1);
        for (long long t = 0; t < T; t++) {
            long long want_target = t + 1 < T && want_m[t + 1] ? want_id[t + 1] : IGNORE;
            if (ids[r * T + t] != want_id[t] || tg[r * T + t] != want_target) {
                if (bad++ < 5)
                    fprintf(stderr, "%s row %lld pos %lld: id %d target %d, TRL id %lld target %lld\n", name, r, t,
                            ids[r * T + t], tg[r * T + t], want_id[t], want_target);
            }
        }
    }
    CHECK_EQ_I64(bad, 0);
    if (max_len > 0) CHECK(pairs[np - 1].truncated || pairs[0].truncated || np == 1);
    for (long long i = 0; i < np; i++) dt_pair_free(&pairs[i]);
    free(ids), free(tg);
}

static void check_goldens(void) {
    char p[1024];
    snprintf(p, sizeof p, "%s/tests/data/pairs-chatml.golden", src);
    FILE *g = fopen(p, "r");
    CHECK(g != NULL);
    if (!g) return;
    char line[512];
    CHECK(fgets(line, sizeof line, g) != NULL); /* the comment */
    check_batch(g);
    check_batch(g);
    fclose(g);
}

static void refused(const char *rec, int64_t max_len, const char *words) {
    dt_pair p;
    dt_error err = {0};
    CHECK_EQ_I64(dt_pairdoc_encode(&ctx, rec, strlen(rec), "prefs.jsonl", 7, max_len, &p, &err), DT_EINVAL);
    if (!strstr(err.msg, words) || strncmp(err.msg, "prefs.jsonl:7: ", 15) || strstr(err.msg, ": : ") || strchr(err.msg, '\n')) {
        fprintf(stderr, "%s: message '%s' lacks 'prefs.jsonl:7: ... %s'\n", rec, err.msg, words);
        dt_test_failures++;
    }
    CHECK(p.ids[0] == NULL && p.ids[1] == NULL);
}

static void check_refusals(void) {
    refused("{\"prompt\": \"a\", \"chosen\": \"\", \"rejected\": \"b\"}", 0, "$.chosen: empty");
    refused("{\"instruction\": \"a\", \"chosen\": \"b\", \"rejected\": \"\"}", 0, "$.rejected: empty");
    refused("{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}], \"chosen\": {\"from\": \"gpt\", \"value\": \"\"}, "
            "\"rejected\": {\"from\": \"gpt\", \"value\": \"x\"}}", 0, "$.chosen: empty");
    refused(records[4], 30, "the prompt is 47 tokens, --seq 30 leaves no room");
    refused("{\"prompt\": \"a\", \"chosen\": \"b\"", 0, "");                  /* truncated JSON */
    refused("{\"prompt\": \"a\", \"prompt\": \"b\", \"chosen\": \"c\", \"rejected\": \"d\"}", 0, "duplicate");
    refused("{\"prompt\": \"a\", \"chosen\": 3, \"rejected\": \"d\"}", 0, "$.chosen: expected a string");
    refused("{\"text\": \"a\"}", 0, "not a preference record");
    refused("[1, 2]", 0, "expected an object");
    refused("{\"prompt\": [{\"role\": \"user\", \"content\": \"q\"}], \"chosen\": [{\"role\": \"user\", \"content\": \"a\"}], "
            "\"rejected\": [{\"role\": \"assistant\", \"content\": \"b\"}]}", 0, "$.chosen: expected one assistant message");
    refused("{\"prompt\": [{\"role\": \"bot\", \"content\": \"q\"}], \"chosen\": [], \"rejected\": []}", 0,
            "$.prompt[0].role: \"bot\" is not one of");
    refused("{\"chosen\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"a\"}], "
            "\"rejected\": [{\"role\": \"user\", \"content\": \"other\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}",
            0, "must share their first messages");
    refused("{\"conversations\": [{\"from\": \"robot\", \"value\": \"q\"}], \"chosen\": {\"from\": \"gpt\", \"value\": \"a\"}, "
            "\"rejected\": {\"from\": \"gpt\", \"value\": \"b\"}}", 0, "$.conversations[0].from: \"robot\"");
}

/* GRPO's prompts: the chat prompt ends with the assistant header; answers as text */
static void check_prompts(void) {
    const char *chat = "{\"prompt\": [{\"role\": \"user\", \"content\": \"12+30=\"}], \"answer\": 42}";
    int32_t *ids;
    size_t n;
    char *answer;
    dt_error err = {0};
    CHECK(dt_promptdoc_encode(&ctx, chat, strlen(chat), "p.jsonl", 1, 0, &ids, &n, &answer, &err) == 0);
    CHECK_STR(answer, "42");
    /* the record's prompt is pair record 2's ids up to its completion: same template path */
    int32_t *ref;
    size_t rn;
    const char *roles[] = {"user"}, *contents[] = {"12+30="};
    CHECK(dt_prepdoc_render(&ctx, roles, contents, 1, 1, &ref, &rn, &err) == 0);
    CHECK_EQ_I64(n, rn);
    CHECK(n == rn && !memcmp(ids, ref, n * sizeof *ids));
    CHECK_EQ_I64(ids[0], ctx.special[DT_PD_IM_START]);
    free(ids), free(ref), free(answer);
    const char *plain = "{\"prompt\": \"2+3=\", \"answer\": \"5\"}";
    CHECK(dt_promptdoc_encode(&ctx, plain, strlen(plain), "p.jsonl", 2, 0, &ids, &n, &answer, &err) == 0);
    CHECK_STR(answer, "5");
    CHECK(n > 0);
    free(ids), free(answer);
    const char *noans = "{\"prompt\": \"hello\"}";
    CHECK(dt_promptdoc_encode(&ctx, noans, strlen(noans), "p.jsonl", 3, 0, &ids, &n, &answer, &err) == 0);
    CHECK(answer == NULL);
    free(ids);
    CHECK(dt_promptdoc_encode(&ctx, plain, strlen(plain), "p.jsonl", 4, 2, &ids, &n, &answer, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "p.jsonl:4: the prompt is") != NULL && ids == NULL);
    const char *empty = "{\"prompt\": \"\"}";
    CHECK(dt_promptdoc_encode(&ctx, empty, strlen(empty), "p.jsonl", 5, 0, &ids, &n, &answer, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "p.jsonl:5: $.prompt: empty") != NULL);
    const char *badans = "{\"prompt\": \"x\", \"answer\": [1]}";
    CHECK(dt_promptdoc_encode(&ctx, badans, strlen(badans), "p.jsonl", 6, 0, &ids, &n, &answer, &err) == DT_EINVAL);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_pairs SOURCE_DIR\n");
        return 1;
    }
    src = argv[1];
    char tp[1024];
    dt_tokenizer *t = dt_test_load_tok(src, "qwen2-mini.json", tp, sizeof tp);
    dt_error err = {0};
    if (dt_prepdoc_init(&ctx, t, tp, DT_PREP_CHAT, DT_CHAT_CHATML, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    read_records();
    check_goldens();
    check_refusals();
    check_prompts();
    for (size_t i = 0; i < n_records; i++) free(records[i]);
    dt_tok_free(t);
    TEST_MAIN_END();
}
