/* sample.c — `dtrun sample`: text generated from a checkpoint (a Hugging Face model
 * directory: a ckpt-NNNNNNNN, a run's --out, or save_pretrained output). Tokens are
 * bytes (the byte tokenizer the default data uses), or, with --tokenizer, the model's
 * own tokenizer (tokenizer.json or tokenizer.model, engine/data/dt_tokenizer.h): the
 * prompt is encoded with it and the generated ids decoded with it. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dt_ckpt.h"
#include "dt_data.h"
#include "dt_dtrun_cli.h"
#include "dt_generate.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_plan.h"
#include "dt_precision.h"
#include "dt_tokenizer.h"

#define DT_SAMPLE_TOKENS 200       /* default --tokens */
#define DT_SAMPLE_TEMPERATURE 0.8  /* default --temperature */
#define DT_SAMPLE_SEED 42          /* default --seed */
#define DT_SAMPLE_PATH_MAX 4096

typedef struct {
    const char *dir, *prompt, *dump, *tokenizer;
    int64_t ntok, seed;
    double temp;
} sample_opts;

static void usage(void) {
    printf("usage: dtrun sample CKPT_DIR [--prompt TEXT] [--tokens N] [--seed S] [--temperature X]\n"
           "                         [--tokenizer TOKENIZER] [--dump-logits FILE]\n"
           "Prints text generated from a checkpoint: CKPT_DIR is a ckpt-NNNNNNNN directory, a\n"
           "run's --out directory (its newest checkpoint) or a Hugging Face model directory.\n"
           "--tokens (default %d) tokens after --prompt, sampled at --temperature (default %g)\n"
           "with --seed (default %d). Tokens are bytes, or with --tokenizer (the model's\n"
           "tokenizer.json or tokenizer.model) the tokenizer's: the prompt is encoded and the\n"
           "output decoded with it. --dump-logits writes the prompt's logits (fp32, one row per\n"
           "position).\n",
           DT_SAMPLE_TOKENS, DT_SAMPLE_TEMPERATURE, DT_SAMPLE_SEED);
}

/* 0 parsed, 1 --help printed, 2 bad input (said) */
static int parse_args(int argc, char **argv, sample_opts *o) {
    *o = (sample_opts){NULL, "\n", NULL, NULL, DT_SAMPLE_TOKENS, DT_SAMPLE_SEED, DT_SAMPLE_TEMPERATURE};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage();
            return 1;
        }
        if (strcmp(a, "--prompt") == 0 && has_val) o->prompt = argv[++i];
        else if (strcmp(a, "--dump-logits") == 0 && has_val) o->dump = argv[++i];
        else if (strcmp(a, "--tokenizer") == 0 && has_val) o->tokenizer = argv[++i];
        else if (strcmp(a, "--tokens") == 0 && has_val) {
            if (dt_cli_parse_i64(argv[++i], "--tokens", 1, &o->ntok)) return 2;
        } else if (strcmp(a, "--seed") == 0 && has_val) {
            if (dt_cli_parse_i64(argv[++i], "--seed", 0, &o->seed)) return 2;
        } else if (strcmp(a, "--temperature") == 0 && has_val) {
            char *end;
            o->temp = strtod(argv[++i], &end);
            if (*end || !(o->temp > 0)) {
                fprintf(stderr, "dtrun: --temperature expects a number > 0, got '%s'\n", argv[i]);
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "dtrun: sample: unknown option '%s'\n", a);
            return 2;
        } else if (!o->dir) o->dir = a;
        else {
            fprintf(stderr, "dtrun: sample: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!o->dir) {
        fprintf(stderr, "dtrun: sample needs a checkpoint directory (a ckpt-NNNNNNNN or a run's --out)\n");
        return 2;
    }
    return 0;
}

/* The model directory: dir itself when it has a config.json, else its newest checkpoint. */
static int find_ckpt(const char *dir, char *ckpt, size_t n, dt_error *err) {
    char p[DT_SAMPLE_PATH_MAX + 16];
    struct stat sb;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (stat(p, &sb) == 0) {
        snprintf(ckpt, n, "%s", dir);
        return DT_OK;
    }
    int64_t step = -1;
    dt_ckpt_latest(dir, ckpt, n, &step, err);
    if (step < 0)
        return dt_errorf(err, DT_EINVAL, "%s: no checkpoint here (no config.json, no ckpt-* directory)", dir);
    return DT_OK;
}

/* The prompt as ids [*len], the last T kept: its bytes, or its tokens. */
static int encode_prompt(const dt_tokenizer *tok, const char *prompt, int64_t vocab, int32_t *ctx, int64_t T,
                         int64_t *len, dt_error *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok) {
        int rc = dt_tok_encode(tok, prompt, strlen(prompt), 1, &ids, &n, err);
        if (rc) return dt_error_prefix(err, "--prompt");
    } else {
        n = strlen(prompt);
        ids = malloc((n ? n : 1) * sizeof *ids);
        if (!ids) return dt_errorf(err, DT_ENOMEM, "out of memory for the prompt");
        for (size_t i = 0; i < n; i++) ids[i] = (unsigned char)prompt[i];
    }
    size_t first = n > (size_t)T ? n - (size_t)T : 0;   /* keep the last T */
    *len = 0;
    for (size_t i = first; i < n; i++) {
        if (ids[i] >= vocab) {
            int32_t id = ids[i];
            free(ids);
            return dt_errorf(err, DT_EINVAL, "--prompt: token %d is outside the model's vocabulary of %lld: give "
                             "the model's own --tokenizer", id, (long long)vocab);
        }
        ctx[(*len)++] = ids[i];
    }
    free(ids);
    if (*len == 0) ctx[(*len)++] = tok ? 0 : '\n';
    return DT_OK;
}

static int dump_logits(const char *path, const float *logits, size_t n, dt_error *err) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(logits, sizeof(float), n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    return ok ? DT_OK : dt_errorf(err, DT_EIO, "%s: cannot write logits: %s", path, strerror(errno));
}

static int print_output(const dt_tokenizer *tok, const char *prompt, const int32_t *ids, int64_t n, dt_error *err) {
    fputs(prompt, stdout);
    if (tok) {
        char *text = NULL;
        size_t len = 0;
        int rc = dt_tok_decode(tok, ids, (size_t)n, &text, &len, err);
        if (rc) return rc;
        fwrite(text, 1, len, stdout);
        free(text);
    } else {
        for (int64_t i = 0; i < n; i++) putchar((int)ids[i]);
    }
    putchar('\n');
    return DT_OK;
}

/* The fine-tuning method the checkpoint's run trained (its plan.json; a directory without
 * one, e.g. a Hugging Face save_pretrained directory, is a whole model: full). A freeze
 * or LoRA checkpoint's model.safetensors holds the base and what was trained (the adapters),
 * so the model is built with the method to apply them. */
static int ckpt_method(const char *ckpt, dt_finetune *ft, dt_error *err) {
    char p[DT_SAMPLE_PATH_MAX + 16];
    struct stat sb;
    memset(ft, 0, sizeof *ft);
    snprintf(p, sizeof p, "%s/plan.json", ckpt);
    if (stat(p, &sb) != 0) return DT_OK;
    dt_plan *plan = malloc(sizeof *plan);
    if (!plan) return dt_errorf(err, DT_ENOMEM, "out of memory");
    int rc = dt_plan_load(p, plan, err);
    if (!rc) *ft = plan->finetune;
    free(plan);
    return rc;
}

/* The model of the checkpoint at ckpt with its method, weights loaded (fp32). */
static int load_model(const char *ckpt, const dt_model *m, int64_t T, dt_lm **g, dt_finetune *ft, dt_error *err) {
    dt_precision prec;
    dt_precision_from_preset(DT_PREC_FP32, &prec);
    int rc = ckpt_method(ckpt, ft, err);
    /* QLoRA: the quantised weights dequantised to fp32 in the fp32 model (a bf16-compute run's too) */
    if (ft->method == DT_FT_QLORA) ft->compute_dtype = DT_DTYPE_FP32;
    const dt_lm_options o = {.B = 1, .T = T, .attn = DT_ATTN_FLASH, .device = DT_DEVICE_CPU, .finetune = ft};
    if (!rc) rc = dt_lm_create_opts(m, &prec, &o, g, err);
    /* the directory: model.safetensors or a sharded save_pretrained layout */
    if (!rc) rc = dt_weights_load(*g, m, DT_DTYPE_FP32, ckpt, err);
    if (!rc) rc = dt_weights_load_base(*g, m, DT_DTYPE_FP32, ckpt, err);
    return rc;
}

/* Generates o->ntok ids after the prompt into out [ntok]; *n how many: the generator's KV
 * cache while the window has room, then one token at a time over the last T - 1 (the
 * oldest dropped, as a window of the model's positions). Ids drawn at --temperature among
 * the first V (the tokenizer's) from --seed. */
static int generate(dt_lm *g, const dt_finetune *ft, const dt_model *m, const sample_opts *o, int64_t V,
                    int32_t *ctx, int64_t len, int32_t *out, int64_t *n, dt_error *err) {
    const int64_t T = m->max_pos;
    int rc = DT_OK;
    if (o->dump) {   /* fp32 [len, V] logits of the prompt (scripts/check_hf_*export.py) */
        rc = dt_lm_forward(g, ctx, NULL, NULL, err);
        if (!rc) rc = dump_logits(o->dump, dt_lm_logits(g), (size_t)(len * m->vocab), err);
        if (rc) return rc;
    }
    dt_gen *gen = NULL;
    /* the cache only as long as prompt and output need (a window of T once they exceed it) */
    rc = dt_gen_create(m, 1, len + o->ntok < T ? len + o->ntok : T, &gen, err);
    if (!rc) rc = dt_gen_load(gen, g, ft, 1, err);   /* a LoRA checkpoint's adapters merged */
    *n = 0;
    for (int64_t chunk = 0; !rc && *n < o->ntok; chunk++) {
        if (len == T) {   /* a full window: drop the oldest */
            memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof *ctx);
            len--;
        }
        const int64_t room = T - len, want = o->ntok - *n;
        dt_gen_params p = {.max_new_tokens = want < room ? want : room, .temperature = o->temp, .top_p = 1.0,
                           .seed = (uint64_t)o->seed + (uint64_t)chunk, .vocab_limit = V};
        int64_t got = 0;
        const int32_t *prompt = ctx;
        rc = dt_gen_run(gen, &p, 1, &prompt, &len, out + *n, &got, NULL, err);
        for (int64_t i = 0; !rc && i < got; i++) ctx[len++] = out[(*n)++];
    }
    dt_gen_free(gen);
    return rc;
}

int dt_cmd_sample(int argc, char **argv) {
    sample_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : 2;
    dt_error err;
    dt_error_clear(&err);
    char ckpt[DT_SAMPLE_PATH_MAX], p[DT_SAMPLE_PATH_MAX + 16];
    int rc = find_ckpt(o.dir, ckpt, sizeof ckpt, &err);
    dt_model m;
    snprintf(p, sizeof p, "%s/config.json", ckpt);
    if (!rc) rc = dt_model_resolve(p, &m, &err);
    if (rc) return dt_cli_fail_err(rc, &err);
    dt_tokenizer *tok = NULL;
    /* a tokenizer that cannot be read is bad input, like the plan or a flag */
    if (o.tokenizer && dt_tok_load(o.tokenizer, &tok, &err)) return dt_cli_fail_err(DT_EINVAL, &err);
    /* the ids to sample from: the tokenizer's, or the 256 bytes */
    int64_t V = tok ? dt_tok_vocab_size(tok) : DT_BYTE_VOCAB;
    if (V > m.vocab) {
        dt_tok_free(tok);
        fprintf(stderr, "dtrun: sample: the %s has %lld ids but the model's vocab is %lld: give the model's own "
                        "--tokenizer\n", tok ? "tokenizer" : "byte tokenizer", (long long)V, (long long)m.vocab);
        return 2;
    }
    dt_lm *g = NULL;
    dt_finetune ft;
    const int64_t T = m.max_pos;
    int32_t *ctx = calloc((size_t)T, sizeof *ctx), *out = calloc((size_t)o.ntok, sizeof *out);
    int64_t len = 0, n = 0;
    if (!ctx || !out) rc = dt_errorf(&err, DT_ENOMEM, "out of memory for %lld tokens", (long long)o.ntok);
    if (!rc) rc = encode_prompt(tok, o.prompt, m.vocab, ctx, T, &len, &err);
    /* the model runs only the prompt (--dump-logits); the generator holds the cache */
    if (!rc) rc = load_model(ckpt, &m, len, &g, &ft, &err);
    if (!rc) rc = generate(g, &ft, &m, &o, V, ctx, len, out, &n, &err);
    if (!rc) rc = print_output(tok, o.prompt, out, n, &err);
    free(ctx);
    free(out);
    dt_lm_free(g);
    dt_tok_free(tok);
    return rc ? dt_cli_fail_err(rc, &err) : 0;
}
