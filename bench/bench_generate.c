/* bench_generate.c — the generator's decoding rate (engine/model/dt_generate.h) on a Hugging
 * Face model directory, and, for the same prompts, the rate of decoding without a KV cache
 * (a whole forward of the sequence per new token, as `dtrun sample` did before the
 * generator; timed once, on the first prompt alone, after the generator's runs warmed the
 * machine: it is the slow side). bench/bench_generate.sh runs it beside transformers' generate.
 *
 *   bench_generate MODEL_DIR BATCH PROMPT_LEN NEW [REPEATS]
 *
 * Prompts: BATCH sequences of PROMPT_LEN ids drawn from a fixed seed (splitmix64 of the index,
 * modulo the vocabulary); greedy, no EOS, NEW tokens each. Prints one line per method:
 * wall seconds (CLOCK_MONOTONIC; the generator's: the best of REPEATS, default 3, after an
 * untimed warm-up) and new tokens per second (sequences x NEW / wall). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dt_ckpt.h"
#include "dt_generate.h"
#include "dt_lm.h"
#include "dt_model.h"

#define PATH_LEN 4096
#define DEFAULT_REPEATS 3

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* greedy without a cache: the whole window through dt_lm_forward per token (B = 1 model) */
static int nocache(dt_lm *lm, const dt_model *m, const int32_t *prompt, int64_t P, int64_t NEW, int32_t *ctx,
                   dt_error *err) {
    const int64_t T = P + NEW;
    memset(ctx, 0, (size_t)T * sizeof *ctx);
    memcpy(ctx, prompt, (size_t)P * sizeof *ctx);
    for (int64_t len = P; len < T; len++) {
        int rc = dt_lm_forward(lm, ctx, NULL, NULL, err);
        if (rc) return rc;
        const float *lg = dt_lm_logits(lm) + (len - 1) * m->vocab;
        int64_t best = 0;
        for (int64_t v = 1; v < m->vocab; v++)
            if (lg[v] > lg[best]) best = v;
        ctx[len] = (int32_t)best;
    }
    return DT_OK;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL_DIR BATCH PROMPT_LEN NEW [REPEATS]\n", argv[0]);
        return 2;
    }
    const int64_t B = atoll(argv[2]), P = atoll(argv[3]), NEW = atoll(argv[4]);
    const int reps = argc > 5 ? atoi(argv[5]) : DEFAULT_REPEATS;
    char p[PATH_LEN];
    snprintf(p, sizeof p, "%s/config.json", argv[1]);
    dt_model m;
    dt_error err;
    dt_error_clear(&err);
    dt_precision pr;
    dt_precision_from_preset(DT_PREC_FP32, &pr);
    dt_lm *lm = NULL;
    dt_gen *gen = NULL;
    if (dt_model_resolve(p, &m, &err) || dt_lm_create(&m, &pr, 1, P + NEW, 0, DT_ATTN_FLASH, &lm, &err) ||
        dt_weights_load(lm, &m, DT_DTYPE_FP32, argv[1], &err) || dt_gen_create(&m, B, P + NEW, &gen, &err) ||
        dt_gen_load(gen, lm, NULL, 0, &err)) {
        fprintf(stderr, "bench_generate: %s\n", err.msg);
        return 1;
    }
    int32_t *ids = malloc((size_t)(B * P) * sizeof *ids), *out = malloc((size_t)(B * NEW) * sizeof *out);
    int32_t *ctx = malloc((size_t)(P + NEW) * sizeof *ctx);
    const int32_t **prompts = malloc((size_t)B * sizeof *prompts);
    int64_t *plen = malloc((size_t)B * sizeof *plen), *olen = malloc((size_t)B * sizeof *olen);
    for (int64_t i = 0; i < B * P; i++) ids[i] = (int32_t)(mix((uint64_t)i) % (uint64_t)m.vocab);
    for (int64_t i = 0; i < B; i++) prompts[i] = ids + i * P, plen[i] = P;
    dt_gen_params gp = {.max_new_tokens = NEW, .temperature = 0.0, .top_p = 1.0};
    double best = 1e30, best_nc = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = now();
        if (dt_gen_run(gen, &gp, B, prompts, plen, out, olen, NULL, &err)) break;
        double t = now() - t0;
        if (r > 0 && t < best) best = t;
    }
    {
        double t0 = now();
        if (!nocache(lm, &m, prompts[0], P, NEW, ctx, &err)) best_nc = now() - t0;
        if (memcmp(ctx + P, out, (size_t)NEW * sizeof *ctx) != 0)
            fprintf(stderr, "bench_generate: the cache and no-cache greedy tokens differ\n");
    }
    if (err.msg[0]) fprintf(stderr, "bench_generate: %s\n", err.msg);
    printf("dtrun-kvcache  batch %lld prompt %lld new %lld: %.3f s, %.1f tokens/s\n", (long long)B, (long long)P,
           (long long)NEW, best, (double)(B * NEW) / best);
    printf("dtrun-nocache  batch 1 prompt %lld new %lld: %.3f s, %.1f tokens/s\n", (long long)P, (long long)NEW,
           best_nc, (double)NEW / best_nc);
    free(ids), free(out), free(ctx), free(prompts), free(plen), free(olen);
    dt_gen_free(gen);
    dt_lm_free(lm);
    return 0;
}
