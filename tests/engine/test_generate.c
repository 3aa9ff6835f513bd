/* test_generate.c — the generator (engine/model/dt_generate.h) against Hugging Face
 * transformers' generate: tests/engine/golden/generate/ (scripts/gen_generate_goldens.py),
 * tiny Llama / Qwen3 / Qwen2 / GPT-2 models. Per case:
 *   greedy tokens equal generate's token for token, all prompts in one batch (their own
 *   lengths) and each alone; the raw logits of every step within LOGIT_TOL;
 *   with generate's eos_token_id: the same tokens up to and including the EOS, then stop;
 * and the sampler: the same seed gives the same completions, another seed others; a
 * sequence's completion does not depend on the batch around it; top_k 1 and a tiny top_p
 * are greedy; the first token's frequencies over many seeds follow softmax(logits / temp)
 * within a chi-square bound; a prompt that does not fit and a token outside the vocabulary.
 * The weights' ways in (llama and gpt2 cases): LoRA on every linear with random A and B,
 * merged, gives the logits of the model's own LoRA forward, and left out those of the base;
 * groups bound to storage outside the flat buffer (as ZeRO-3 gathers them), the flat buffer
 * released, load as the flat model did. QLoRA's quantised linears load dequantised: the
 * generator's logits and greedy token are the QLoRA model's own forward's.
 * Usage: test_engine_generate GOLDEN_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_ckpt.h"
#include "dt_finetune.h"
#include "dt_generate.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_safetensors.h"
#include "dt_test.h"

/* fp32 against torch's fp32 over 2 layers (the llama goldens' logits tolerance, test_llama.c) */
#define LOGIT_TOL 2e-5
#define PATH_LEN 1024
#define MAX_PROMPTS 8
#define SAMPLE_DRAWS 4096
#define SAMPLE_TEMP 1.5
/* chi-square bound: the 0.999 quantile of chi2 with 127 degrees of freedom is ~186; bins
 * with expected count < 5 are pooled, which only lowers the degrees of freedom */
#define CHI2_BOUND 190.0

typedef struct {
    dt_model m;
    dt_lm *lm;
    dt_st_file *f;
    int64_t n, new_tokens, V;
    const int32_t *prompts[MAX_PROMPTS];
    int64_t plen[MAX_PROMPTS];
} gcase;

static int load_case(const char *dir, gcase *c) {
    char p[PATH_LEN + 32];
    dt_error err;
    dt_error_clear(&err);
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (dt_model_resolve(p, &c->m, &err)) goto fail;
    dt_precision pr;
    dt_precision_from_preset(DT_PREC_FP32, &pr);
    if (dt_lm_create(&c->m, &pr, 1, 8, 0, DT_ATTN_FLASH, &c->lm, &err) ||
        dt_weights_load(c->lm, &c->m, DT_DTYPE_FP32, dir, &err))
        goto fail;
    snprintf(p, sizeof p, "%s/golden.safetensors", dir);
    if (dt_st_open(p, &c->f, &err)) goto fail;
    const dt_st_tensor *pt = dt_st_find(c->f, "prompts"), *lt = dt_st_find(c->f, "free.logits");
    const int32_t *pl = dt_st_data(c->f, dt_st_find(c->f, "plen"));
    c->n = pt->shape[0];
    c->new_tokens = lt->shape[1];
    c->V = lt->shape[2];
    for (int64_t i = 0; i < c->n; i++) {
        c->prompts[i] = (const int32_t *)dt_st_data(c->f, pt) + i * pt->shape[1];
        c->plen[i] = pl[i];
    }
    return 0;
fail:
    fprintf(stderr, "%s: %s\n", dir, err.msg);
    return 1;
}

static const int32_t *gtok(const gcase *c, const char *name) { return dt_st_data(c->f, dt_st_find(c->f, name)); }

static dt_gen *make_gen(gcase *c, int64_t batch) {
    dt_gen *gen = NULL;
    dt_error err;
    dt_error_clear(&err);
    if (dt_gen_create(&c->m, batch, c->m.max_pos, &gen, &err) || dt_gen_load(gen, c->lm, NULL, 1, &err)) {
        fprintf(stderr, "generator: %s\n", err.msg);
        dt_gen_free(gen);
        return NULL;
    }
    return gen;
}

/* Greedy over prompts [i0, i0 + n) in one batch vs the golden tokens; logits checked too. */
static void check_greedy(gcase *c, dt_gen *gen, int64_t i0, int64_t n, const char *which, double *worst) {
    const int64_t NEW = c->new_tokens, V = c->V;
    dt_gen_params p = {.max_new_tokens = NEW, .temperature = 0.0, .top_p = 1.0};
    int eos = strcmp(which, "eos.tokens") == 0;
    if (eos) {
        p.n_eos = 1;
        p.eos[0] = gtok(c, "eos.id")[0];
    }
    int32_t *out = malloc((size_t)(n * NEW) * sizeof *out);
    int64_t len[MAX_PROMPTS];
    float *lg = malloc((size_t)(n * NEW * V) * sizeof *lg);
    dt_error err;
    CHECK(dt_gen_run(gen, &p, n, c->prompts + i0, c->plen + i0, out, len, lg, &err) == DT_OK);
    const int32_t *want = gtok(c, which) + i0 * NEW;
    const float *wl = dt_st_data(c->f, dt_st_find(c->f, "free.logits"));
    for (int64_t i = 0; i < n; i++) {
        int64_t wlen = 0;
        while (wlen < NEW && want[i * NEW + wlen] >= 0) wlen++;
        CHECK_EQ_I64(len[i], wlen);
        for (int64_t t = 0; t < NEW; t++) {
            if (out[i * NEW + t] != want[i * NEW + t])
                fprintf(stderr, "  %s prompt %lld step %lld: %d, transformers %d\n", which, (long long)(i0 + i),
                        (long long)t, out[i * NEW + t], want[i * NEW + t]);
            CHECK(out[i * NEW + t] == want[i * NEW + t]);
        }
        for (int64_t t = 0; t < len[i] && !eos; t++)
            for (int64_t v = 0; v < V; v++) {
                double e = fabs(lg[(i * NEW + t) * V + v] - wl[((i0 + i) * NEW + t) * V + v]);
                if (e > *worst) *worst = e;
            }
    }
    free(out);
    free(lg);
}

/* Sampled completions of all prompts with seed and knobs; out [n, NEW]. */
static void sample(gcase *c, dt_gen *gen, uint64_t seed, double temp, int64_t top_k, double top_p, int64_t i0,
                   int64_t n, int32_t *out) {
    dt_gen_params p = {.max_new_tokens = c->new_tokens, .temperature = temp, .top_k = top_k, .top_p = top_p,
                       .seed = seed};
    int64_t len[MAX_PROMPTS];
    dt_error err;
    CHECK(dt_gen_run(gen, &p, n, c->prompts + i0, c->plen + i0, out, len, NULL, &err) == DT_OK);
}

static void check_sampling(gcase *c, dt_gen *gen) {
    const int64_t n = c->n, NEW = c->new_tokens;
    const size_t sz = (size_t)(n * NEW) * sizeof(int32_t);
    int32_t *a = malloc(sz), *b = malloc(sz), *one = malloc(sz);
    sample(c, gen, 7, 1.0, 0, 1.0, 0, n, a);
    sample(c, gen, 7, 1.0, 0, 1.0, 0, n, b);
    CHECK(memcmp(a, b, sz) == 0);                /* the seed reproduces */
    sample(c, gen, 8, 1.0, 0, 1.0, 0, n, b);
    CHECK(memcmp(a, b, sz) != 0);                /* another seed differs */
    /* sequence 0 alone: its own stream (seed, 0), whatever else runs */
    sample(c, gen, 7, 1.0, 0, 1.0, 0, 1, one);
    CHECK(memcmp(a, one, (size_t)NEW * sizeof(int32_t)) == 0);
    /* top_k 1 and top_p tiny leave only the argmax: greedy */
    const int32_t *want = gtok(c, "free.tokens");
    sample(c, gen, 3, 1.0, 1, 1.0, 0, n, b);
    CHECK(memcmp(b, want, sz) == 0);
    sample(c, gen, 3, 1.0, 0, 1e-6, 0, n, b);
    CHECK(memcmp(b, want, sz) == 0);
    free(a);
    free(b);
    free(one);
}

/* The first token over SAMPLE_DRAWS seeds against softmax(logits / temp) of prompt 0's
 * golden logits: chi-square over the bins (pooled below 5 expected). */
static void check_distribution(gcase *c, dt_gen *gen) {
    const int64_t V = c->V;
    const float *lg = dt_st_data(c->f, dt_st_find(c->f, "free.logits"));
    double *pr = calloc((size_t)V, sizeof *pr), sum = 0, mx = -INFINITY;
    int64_t *cnt = calloc((size_t)V, sizeof *cnt);
    for (int64_t v = 0; v < V; v++) mx = fmax(mx, lg[v] / SAMPLE_TEMP);
    for (int64_t v = 0; v < V; v++) sum += (pr[v] = exp(lg[v] / SAMPLE_TEMP - mx));
    dt_gen_params p = {.max_new_tokens = 1, .temperature = SAMPLE_TEMP, .top_p = 1.0};
    int32_t tok;
    int64_t len;
    dt_error err;
    for (int s = 0; s < SAMPLE_DRAWS; s++) {
        p.seed = (uint64_t)s;
        if (dt_gen_run(gen, &p, 1, c->prompts, c->plen, &tok, &len, NULL, &err) != DT_OK) break;
        cnt[tok]++;
    }
    double chi2 = 0, pool_e = 0, pool_o = 0;
    for (int64_t v = 0; v < V; v++) {
        double e = SAMPLE_DRAWS * pr[v] / sum;
        if (e < 5) {
            pool_e += e, pool_o += (double)cnt[v];
            continue;
        }
        chi2 += (cnt[v] - e) * (cnt[v] - e) / e;
    }
    if (pool_e > 0) chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
    printf("  first-token chi2 over %d draws at T %.1f: %.1f (bound %.0f)\n", SAMPLE_DRAWS, SAMPLE_TEMP, chi2,
           CHI2_BOUND);
    CHECK(chi2 < CHI2_BOUND);
    free(pr);
    free(cnt);
}

/* Errors: a prompt that does not fit, a token outside the vocabulary. */
static void check_errors(gcase *c, dt_gen *gen) {
    dt_gen_params p = {.max_new_tokens = c->m.max_pos, .temperature = 0.0, .top_p = 1.0};
    int32_t out[1024];
    int64_t len[MAX_PROMPTS];
    dt_error err;
    dt_error_clear(&err);
    CHECK(dt_gen_run(gen, &p, 1, c->prompts, c->plen, out, len, NULL, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "prompt 0") != NULL);
    const int32_t bad[2] = {1, (int32_t)c->V};
    const int32_t *bp = bad;
    const int64_t bl = 2;
    p.max_new_tokens = 2;
    CHECK(dt_gen_run(gen, &p, 1, &bp, &bl, out, len, NULL, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "vocabulary") != NULL);
}

/* The first generated step's logits [V] of prompt 0 with gen loaded from lm. */
static void first_logits(gcase *c, dt_lm *lm, const dt_finetune *ft, int adapters, float *lg) {
    dt_gen *gen = NULL;
    dt_error err;
    dt_gen_params p = {.max_new_tokens = 1, .temperature = 0.0, .top_p = 1.0};
    int32_t tok;
    int64_t len;
    CHECK(dt_gen_create(&c->m, 1, c->m.max_pos, &gen, &err) == DT_OK);
    if (!gen) return;
    if (dt_gen_load(gen, lm, ft, adapters, &err) != DT_OK) fprintf(stderr, "  load: %s\n", err.msg);
    CHECK(dt_gen_run(gen, &p, 1, c->prompts, c->plen, &tok, &len, lg, &err) == DT_OK);
    dt_gen_free(gen);
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - (double)b[i]));
    return w;
}

/* LoRA (r 4, every linear, A and B random) built over the case's weights: the generator's
 * merged logits vs the model's LoRA forward at prompt 0's last position; adapters left out vs
 * the plain model's. Then the plain model's groups rebound outside the flat buffer. */
/* A model of method ft->method (r 4, every linear) over the case's weights, its adapters drawn
 * (A and B random); NULL on failure (reported). */
static dt_lm *adapted_model(gcase *c, const char *dir, dt_finetune *ft) {
    dt_precision pr;
    dt_precision_from_preset(DT_PREC_FP32, &pr);
    ft->lora_rank = 4;
    const dt_lm_options o = {.B = 1, .T = c->plen[0], .attn = DT_ATTN_FLASH, .device = DT_DEVICE_CPU, .finetune = ft};
    dt_lm *g = NULL;
    dt_error err;
    if (dt_lm_create_opts(&c->m, &pr, &o, &g, &err) || dt_weights_load_base(g, &c->m, DT_DTYPE_FP32, dir, &err)) {
        fprintf(stderr, "%s: %s\n", dt_ft_method_name(ft->method), err.msg);
        CHECK(0);
        dt_lm_free(g);
        return NULL;
    }
    float *A = dt_lm_params(g);   /* the trained set: the adapters, drawn here */
    for (size_t i = 0; i < dt_lm_num_params(g); i++)
        A[i] = 0.05f * (float)((int64_t)(i * 2654435761u % 2001) - 1000) / 1000.0f;
    return g;
}

static void check_weights_in(gcase *c, const char *dir) {
    dt_finetune ft;
    dt_finetune_defaults(DT_FT_LORA, &ft);
    const int64_t P = c->plen[0], V = c->V;
    dt_error err;
    float *base = malloc((size_t)V * sizeof(float)), *merged = malloc((size_t)V * sizeof(float));
    first_logits(c, c->lm, NULL, 1, base);
    dt_lm *lora = adapted_model(c, dir, &ft);
    if (!lora) goto out;
    float loss;
    CHECK(dt_lm_forward(lora, c->prompts[0], NULL, &loss, &err) == DT_OK);
    first_logits(c, lora, &ft, 1, merged);
    const double e_merged = max_diff(merged, dt_lm_logits(lora) + (P - 1) * V, V);
    first_logits(c, lora, &ft, 0, merged);
    const double e_off = max_diff(merged, base, V);
    const double moved = max_diff(dt_lm_logits(lora) + (P - 1) * V, base, V);
    printf("  lora merged vs its forward %.2e, adapters left out vs base %.2e (the adapters move the logits %.2f)\n",
           e_merged, e_off, moved);
    CHECK(e_merged < LOGIT_TOL && e_off == 0.0 && moved > 0.1);
    /* groups bound outside the flat buffer, the flat buffer released */
    const int ng = dt_lm_num_groups(c->lm);
    void **store = calloc((size_t)ng, sizeof *store);
    for (int g = 0; g < ng; g++) {
        const size_t n = dt_lm_group_numel(c->lm, g) * sizeof(float);
        store[g] = malloc(n);
        memcpy(store[g], dt_lm_group_params(c->lm, g), n);
        CHECK(dt_lm_bind_group(c->lm, g, store[g], dt_lm_group_grads(c->lm, g)) == DT_OK);
    }
    CHECK(dt_lm_release_flat(c->lm, 1, 0, &err) == DT_OK);
    first_logits(c, c->lm, NULL, 1, merged);
    CHECK(max_diff(merged, base, V) == 0.0);
    for (int g = 0; g < ng; g++) free(store[g]);   /* c->lm is not used after this */
    free(store);
out:
    dt_lm_free(lora);
    free(base), free(merged);
}

/* QLoRA (NF4, r 4, every linear) over the case's weights: the generator loads the quantised
 * linears dequantised, so its first step's logits equal the model's own forward at prompt 0's
 * last position, adapters merged and left out, and its greedy token is that forward's argmax. */
static void check_qlora(gcase *c, const char *dir) {
    dt_finetune ft;
    dt_finetune_defaults(DT_FT_QLORA, &ft);
    ft.compute_dtype = DT_DTYPE_FP32;   /* dtrun's QLoRA computes in fp32 (lm_qbase_check) */
    const int64_t P = c->plen[0], V = c->V;
    dt_error err;
    float *lg = malloc((size_t)V * sizeof(float)), *fwd = malloc((size_t)V * sizeof(float));
    dt_lm *q = adapted_model(c, dir, &ft);
    CHECK(q == NULL || dt_lm_num_quant_tensors(q) > 0);
    for (int adapters = 1; q && lg && fwd && adapters >= 0; adapters--) {
        float loss;
        dt_lm_set_adapters(q, adapters);
        CHECK(dt_lm_forward(q, c->prompts[0], NULL, &loss, &err) == DT_OK);
        memcpy(fwd, dt_lm_logits(q) + (P - 1) * V, (size_t)V * sizeof(float));
        first_logits(c, q, &ft, adapters, lg);
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++) best = fwd[v] > fwd[best] ? v : best;
        int32_t tok = -1;
        int64_t len = 0;
        dt_gen *gen = NULL;
        const dt_gen_params gp = {.max_new_tokens = 1, .temperature = 0.0, .top_p = 1.0};
        CHECK(dt_gen_create(&c->m, 1, c->m.max_pos, &gen, &err) == DT_OK);
        CHECK(gen && dt_gen_load(gen, q, &ft, adapters, &err) == DT_OK &&
              dt_gen_run(gen, &gp, 1, c->prompts, c->plen, &tok, &len, NULL, &err) == DT_OK);
        dt_gen_free(gen);
        const double e = max_diff(lg, fwd, V);
        printf("  qlora (adapters %s): generator vs its forward %.2e, greedy %d = argmax %lld\n",
               adapters ? "merged" : "left out", e, tok, (long long)best);
        CHECK(e < LOGIT_TOL && tok == (int32_t)best);
    }
    dt_lm_free(q);
    free(lg), free(fwd);
}

static void run_case(const char *root, const char *name) {
    char dir[PATH_LEN];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    gcase c = {0};
    if (load_case(dir, &c)) {
        CHECK(0);
        return;
    }
    dt_gen *gen = make_gen(&c, MAX_PROMPTS);
    CHECK(gen != NULL);
    if (gen) {
        double worst = 0;
        check_greedy(&c, gen, 0, c.n, "free.tokens", &worst);   /* one batch, own lengths */
        for (int64_t i = 0; i < c.n; i++) check_greedy(&c, gen, i, 1, "free.tokens", &worst);
        check_greedy(&c, gen, 0, c.n, "eos.tokens", &worst);
        printf("%s: greedy = transformers generate; worst logit error %.2e (tol %.0e)\n", name, worst, LOGIT_TOL);
        CHECK(worst < LOGIT_TOL);
        check_sampling(&c, gen);
        check_distribution(&c, gen);
        check_errors(&c, gen);
        check_weights_in(&c, dir);
        check_qlora(&c, dir);
    }
    dt_gen_free(gen);
    dt_lm_free(c.lm);
    dt_st_close(c.f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s GOLDEN_DIR\n", argv[0]);
        return 2;
    }
    const char *cases[] = {"llama", "qwen3", "qwen2", "gpt2"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(argv[1], cases[i]);
    TEST_MAIN_END();
}
