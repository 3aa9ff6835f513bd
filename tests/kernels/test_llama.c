/* test_llama.c — the llama-family model (Llama, Qwen2, Qwen3) against Hugging Face
 * transformers: tests/kernels/golden/llama/ (scripts/gen_llama_goldens.py). Each
 * case directory is loaded through the engine's Hugging Face reader
 * (dt_weights_load on a save_pretrained directory) and checked:
 *   logits, loss               fp32 forward of the golden batch
 *   grad.<name>                every parameter's gradient (fp32)
 *   step_losses, after.<name>  three AdamW steps (decay on ndim >= 2 only)
 * also with the materialized attention, with every block checkpointed
 * (recompute), and the transformers-written bf16 sharded fixture's logits;
 * mixed-bf16 (bf16 GEMMs) within its derived budget, checkpointing bitwise.
 * Tolerances (fp32 against torch's fp32, both ~1e-6 from float64 per the
 * goldens' metadata): logits 2e-5 abs, loss 1e-5 rel, gradients 1e-4 of each
 * tensor's largest, parameters after the steps 1e-4 abs (Adam normalises each
 * element, so a near-zero gradient turns rounding into up to ~3e-5; README there).
 * With a second argument "cuda" the same forward / gradient checks run on the
 * CUDA device (exit 77 without a GPU; tolerances x GPU_TOL_SCALE for cuBLAS's
 * summation order), the AdamW steps stay on the CPU.
 * Usage: test_kernels_llama GOLDEN_DIR [cuda] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_ckpt.h"
#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_json.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_optim.h"
#include "dt_safetensors.h"
#include "dt_test.h"
#include "golden_util.h"

#define LOGIT_TOL 2e-5
#define LOSS_RTOL 1e-5
#define GRAD_RTOL 1e-4
#define AFTER_TOL 1e-4
#define STEPS 3
#define PATH_MAX_LEN 1024
#define SKIP 77
#define GPU_TOL_SCALE 10.0
/* bf16's unit roundoff (8 significant bits, round to nearest): the budget of
 * docs/engine.md "Precision" counts roundings of u each, first order, no
 * cancellation: the parameters once, the forward's saved activations on the
 * path (x[0], per block ln1, [qk_raw], qk, v, att, res1, ln2, gu, act, x[l+1],
 * then the final norm), the backward's activation-gradient roundings (dlogits,
 * two linears per block on the deepest path) and the bf16 gradient store. */
#define BF16_U 0x1p-8
#define LLAMA_SAVED_PER_BLOCK 9   /* + 1 with q/k norm (qk_raw) */

static double bf16_forward_roundings(const dt_model *m) {
    return 1.0 + 2.0 + (double)m->n_layer * (LLAMA_SAVED_PER_BLOCK + (m->qk_norm ? 1 : 0));
}
static double bf16_grad_roundings(const dt_model *m) {
    return bf16_forward_roundings(m) + (2.0 * (double)m->n_layer + 1.0) + 1.0;
}

static dt_device g_device = DT_DEVICE_CPU;   /* where the forward / gradient checks run */
static double g_tol = 1.0;                  /* tolerance scale for that device */

/* n floats of the model's memory (device or host), as host memory the caller frees */
static float *host_copy(const dt_lm *g, const float *p, size_t n) {
    const dt_device_ops *dev = dt_lm_device_ops(g);
    float *h = malloc(n * sizeof(float));
    dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_D2H);
    dev->memcpy(h, p, n * sizeof(float), dev->host_addressable ? DT_COPY_H2H : DT_COPY_D2H, DT_STREAM_D2H);
    dev->stream_sync(DT_STREAM_D2H);
    return h;
}

typedef struct {
    dt_st_file *f;
    int64_t B, T;
    const int32_t *inputs, *targets;
} golden;

static const float *gtensor(const golden *gd, const char *name, uint64_t numel) {
    const dt_st_tensor *t = dt_st_find(gd->f, name);
    if (!t) {
        fprintf(stderr, "golden: tensor %s missing\n", name);
        exit(1);
    }
    if (numel && dt_st_numel(t) != numel) {
        fprintf(stderr, "golden: tensor %s has %llu elements, expected %llu\n", name,
                (unsigned long long)dt_st_numel(t), (unsigned long long)numel);
        exit(1);
    }
    return dt_st_data(gd->f, t);
}

static void golden_open(const char *path, golden *gd) {
    dt_error err;
    if (dt_st_open(path, &gd->f, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    const dt_st_tensor *in = dt_st_find(gd->f, "inputs");
    if (!in || in->ndim != 2) {
        fprintf(stderr, "%s: no inputs [B, T]\n", path);
        exit(1);
    }
    gd->B = in->shape[0];
    gd->T = in->shape[1];
    gd->inputs = dt_st_data(gd->f, in);
    gd->targets = dt_st_find(gd->f, "targets") ? (const int32_t *)dt_st_data(gd->f, dt_st_find(gd->f, "targets")) : NULL;
}

static void model_of(const char *dir, dt_model *m) { golden_model_of(dir, m); }

static dt_lm *load_on(dt_device device, const char *dir, const dt_model *m, dt_precision_preset preset, int64_t B,
                      int64_t T, int64_t K, dt_attention attn) {
    dt_precision pr;
    dt_precision_from_preset(preset, &pr);
    dt_lm *g;
    dt_error err;
    if (dt_lm_create_on(m, &pr, B, T, K, attn, device, 0, &g, &err) || dt_weights_load(g, m, pr.param, dir, &err)) {
        fprintf(stderr, "%s: %s\n", dir, err.msg);
        exit(1);
    }
    return g;
}

static dt_lm *load(const char *dir, const dt_model *m, dt_precision_preset preset, int64_t B, int64_t T,
                   int64_t K, dt_attention attn) {
    return load_on(g_device, dir, m, preset, B, T, K, attn);
}

static double max_abs_diff(const float *a, const float *b, size_t n, double *ref_max) {
    return golden_max_abs_diff(a, b, n, ref_max);
}

/* forward: logits and loss */
static void check_forward(const char *what, dt_lm *g, const golden *gd) {
    dt_error err;
    float loss = 0;
    CHECK(dt_lm_forward(g, gd->inputs, gd->targets, &loss, &err) == DT_OK);
    size_t nl = (size_t)(gd->B * gd->T) * (size_t)dt_st_find(gd->f, "logits")->shape[2];
    float *logits = host_copy(g, dt_lm_logits(g), nl);
    double e = max_abs_diff(logits, gtensor(gd, "logits", nl), nl, NULL);
    free(logits);
    double ref = gtensor(gd, "loss", 1)[0];
    printf("%s: logits max |diff| %.3g, loss %.7f vs %.7f\n", what, e, loss, ref);
    CHECK(e < LOGIT_TOL * g_tol);
    CHECK(fabs(loss - ref) <= LOSS_RTOL * g_tol * fabs(ref));
}

/* backward: every parameter's gradient */
static void check_grads(const char *what, dt_lm *g, const golden *gd) {
    dt_error err;
    CHECK(dt_lm_backward(g, 1.0f, &err) == DT_OK);
    double worst = 0;
    const char *worst_name = "";
    float *grads = host_copy(g, dt_lm_grads(g), dt_lm_num_params(g));
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        char name[DT_ST_NAME_MAX];
        snprintf(name, sizeof name, "grad.%s", t->name);
        double rm;
        double e = max_abs_diff(grads + t->offset, gtensor(gd, name, t->numel), t->numel, &rm);
        double rel = e / (rm > 0 ? rm : 1);
        if (rel > worst) {
            worst = rel;
            worst_name = t->name;
        }
    }
    free(grads);
    printf("%s: worst gradient %s, max |diff| / max |ref| %.3g\n", what, worst_name, worst);
    CHECK(worst < GRAD_RTOL * g_tol);
}

/* three AdamW steps on the same batch, decay on matrices only */
/* A parameter whose gradient is zero in exact arithmetic: the key projection's bias adds
 * q_i . b to every score of query row i, and softmax ignores a constant per row, so
 * dL/db_k = 0; what both implementations compute for it is rounding noise (the golden's
 * generator counts its elements among the ill-conditioned ones), and AdamW normalises that
 * noise into full-size steps of either sign. */
static int zero_gradient_param(const char *name) { return strstr(name, "self_attn.k_proj.bias") != NULL; }

/* How far two AdamW runs can drift apart on such a parameter in `steps` steps: each step
 * moves a parameter by at most lr (1 - beta1) / sqrt(1 - beta2) when 1 - beta1 >
 * sqrt(1 - beta2), else by lr (Kingma & Ba 2015, "Adam", section 2.1), in either direction,
 * in each run. */
static double adamw_noise_bound(const dt_adamw *hp, int steps) {
    double r = (1.0 - hp->beta1) / sqrt(1.0 - hp->beta2);
    return 2.0 * steps * hp->lr * (r > 1.0 ? r : 1.0);
}

static void check_steps(const char *dir, const dt_model *m, const golden *gd) {
    dt_lm *g = load_on(DT_DEVICE_CPU, dir, m, DT_PREC_FP32, gd->B, gd->T, 0, DT_ATTN_FLASH);
    dt_precision pr;
    dt_precision_from_preset(DT_PREC_FP32, &pr);
    size_t P = dt_lm_num_params(g);
    dt_optim *o;
    dt_error err;
    CHECK(dt_optim_create(&pr, P, &o, &err) == DT_OK);
    dt_optim_init_master(o, dt_lm_params(g));
    const char *md_lr = dt_st_metadata(gd->f, "lr"), *md_wd = dt_st_metadata(gd->f, "weight_decay");
    const char *md_b1 = dt_st_metadata(gd->f, "beta1"), *md_b2 = dt_st_metadata(gd->f, "beta2");
    const char *md_eps = dt_st_metadata(gd->f, "eps");
    CHECK(md_lr && md_wd && md_b1 && md_b2 && md_eps);
    dt_adamw hp = {atof(md_lr), atof(md_b1), atof(md_b2), atof(md_eps), atof(md_wd)};
    const float *step_losses = gtensor(gd, "step_losses", STEPS);
    for (int t = 1; t <= STEPS; t++) {
        float loss;
        dt_lm_zero_grad(g);
        CHECK(dt_lm_forward(g, gd->inputs, gd->targets, &loss, &err) == DT_OK);
        CHECK(dt_lm_backward(g, 1.0f, &err) == DT_OK);
        CHECK(fabs(loss - step_losses[t - 1]) <= LOSS_RTOL * fabs(step_losses[t - 1]));
        for (int i = 0; i < dt_lm_num_tensors(g); i++) {
            const dt_tensor_info *ti = dt_lm_tensor(g, i);
            dt_optim_update(o, dt_lm_params(g), dt_lm_grads(g), ti->offset, ti->numel, &hp, 1.0, ti->ndim >= 2, t);
        }
    }
    double worst = 0, worst_noise = 0;
    const double noise_tol = adamw_noise_bound(&hp, STEPS);
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        char name[DT_ST_NAME_MAX];
        snprintf(name, sizeof name, "after.%s", t->name);
        double e = max_abs_diff((const float *)dt_lm_params(g) + t->offset, gtensor(gd, name, t->numel), t->numel,
                                NULL);
        if (zero_gradient_param(t->name)) worst_noise = e > worst_noise ? e : worst_noise;
        else if (e > worst) worst = e;
    }
    printf("%s: after %d AdamW steps, worst |param - reference| %.3g (key biases, zero gradient in exact "
           "arithmetic: %.3g, bound %.3g)\n", dir, STEPS, worst, worst_noise, noise_tol);
    CHECK(worst < AFTER_TOL);
    CHECK(worst_noise <= noise_tol);
    dt_optim_free(o);
    dt_lm_free(g);
}

/* Targets set to DT_IGNORE_INDEX carry no loss: the loss is the mean of the
 * per-token cross-entropy over the counted positions (computed here in double from
 * the unmasked run's logits), ignored rows of the logit gradient are 0 and the
 * others are the unmasked run's scaled by N / counted. */
static void check_ignore_index(const char *what, dt_lm *g, const golden *gd) {
    const int64_t N = gd->B * gd->T, V = dt_st_find(gd->f, "logits")->shape[2];
    dt_error err;
    float full_loss, loss;
    CHECK(dt_lm_forward(g, gd->inputs, gd->targets, &full_loss, &err) == DT_OK);
    float *logits = host_copy(g, dt_lm_logits(g), (size_t)(N * V));
    CHECK(dt_lm_backward(g, 1.0f, &err) == DT_OK);
    float *dfull = host_copy(g, dt_lm_logits(g), (size_t)(N * V));   /* dlogits */
    int32_t *tg = malloc((size_t)N * sizeof *tg);
    double ce = 0;
    int64_t counted = 0;
    for (int64_t n = 0; n < N; n++) {
        tg[n] = n % 3 == 0 ? gd->targets[n] : DT_IGNORE_INDEX;   /* every third position counts */
        if (tg[n] == DT_IGNORE_INDEX) continue;
        double mx = -INFINITY, s = 0;
        for (int64_t v = 0; v < V; v++) mx = fmax(mx, logits[n * V + v]);
        for (int64_t v = 0; v < V; v++) s += exp(logits[n * V + v] - mx);
        ce += mx + log(s) - logits[n * V + tg[n]];
        counted++;
    }
    ce /= (double)counted;
    CHECK(dt_lm_forward(g, gd->inputs, tg, &loss, &err) == DT_OK);
    CHECK(dt_lm_backward(g, 1.0f, &err) == DT_OK);
    float *dmask = host_copy(g, dt_lm_logits(g), (size_t)(N * V));
    double worst = 0;
    int zero_rows = 1;
    for (int64_t n = 0; n < N; n++)
        for (int64_t v = 0; v < V; v++) {
            double d = dmask[n * V + v];
            if (tg[n] == DT_IGNORE_INDEX) zero_rows &= d == 0.0;
            else worst = fmax(worst, fabs(d - dfull[n * V + v] * (double)N / (double)counted));
        }
    printf("%s: masked loss %.7f vs %.7f (full %.7f), dlogits max |diff| %.3g\n", what, loss, ce, full_loss, worst);
    CHECK(fabs(loss - ce) <= LOSS_RTOL * g_tol * fabs(ce));
    CHECK(zero_rows);
    CHECK(worst < LOGIT_TOL * g_tol);
    /* out of the vocabulary and not the ignore value: one line */
    tg[1] = -7;
    CHECK(dt_lm_forward(g, gd->inputs, tg, &loss, &err) == DT_EINVAL && strstr(err.msg, "-100") != NULL);
    free(tg);
    free(logits);
    free(dfull);
    free(dmask);
}

/* mixed-bf16 (bf16 params, activations and grads; the linears' bf16 GEMMs with
 * the activation gradient rounded to bf16): the fp32 golden within the bf16 budget
 * (logits and loss relative to the reference's largest / itself: the forward's
 * roundings; each gradient's max |diff| / max |ref|: all of them), and
 * checkpointing every block gives bitwise the same loss and gradients. */
static void check_bf16(const char *dir, const char *name, const dt_model *m, const golden *gd) {
    const int64_t V = dt_st_find(gd->f, "logits")->shape[2];
    const size_t nl = (size_t)(gd->B * gd->T * V);
    dt_lm *g = load(dir, m, DT_PREC_MIXED_BF16, gd->B, gd->T, 0, DT_ATTN_FLASH);
    dt_lm *gk = load(dir, m, DT_PREC_MIXED_BF16, gd->B, gd->T, m->n_layer, DT_ATTN_FLASH);
    dt_error err;
    float loss = 0, loss_k = 0;
    CHECK(dt_lm_forward(g, gd->inputs, gd->targets, &loss, &err) == DT_OK);
    float *logits = host_copy(g, dt_lm_logits(g), nl);
    double lref;
    double le = max_abs_diff(logits, gtensor(gd, "logits", nl), nl, &lref) / lref;
    free(logits);
    double ref = gtensor(gd, "loss", 1)[0], lo = fabs(loss - ref) / fabs(ref);
    CHECK(dt_lm_backward(g, 1.0f, &err) == DT_OK);
    CHECK(dt_lm_forward(gk, gd->inputs, gd->targets, &loss_k, &err) == DT_OK);
    CHECK(dt_lm_backward(gk, 1.0f, &err) == DT_OK);
    size_t P = dt_lm_num_params(g);
    uint16_t *g16 = malloc(P * sizeof *g16), *gk16 = malloc(P * sizeof *gk16);
    float *grads = malloc(P * sizeof *grads);
    const dt_device_ops *dev = dt_lm_device_ops(g);
    dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_D2H);
    dev->memcpy(g16, dt_lm_grads(g), P * 2, dev->host_addressable ? DT_COPY_H2H : DT_COPY_D2H, DT_STREAM_D2H);
    dev->memcpy(gk16, dt_lm_grads(gk), P * 2, dev->host_addressable ? DT_COPY_H2H : DT_COPY_D2H, DT_STREAM_D2H);
    dev->stream_sync(DT_STREAM_D2H);
    dt_convert(grads, DT_DTYPE_FP32, g16, DT_DTYPE_BF16, P);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        char gname[DT_ST_NAME_MAX];
        snprintf(gname, sizeof gname, "grad.%s", t->name);
        double rm;
        double e = max_abs_diff(grads + t->offset, gtensor(gd, gname, t->numel), t->numel, &rm);
        if (e / (rm > 0 ? rm : 1) > worst) {
            worst = e / (rm > 0 ? rm : 1);
            worst_name = t->name;
        }
    }
    int same = memcmp(&loss, &loss_k, sizeof loss) == 0 && memcmp(g16, gk16, P * 2) == 0;
    const double ftol = bf16_forward_roundings(m) * BF16_U, gtol = bf16_grad_roundings(m) * BF16_U;
    printf("%s (bf16): logits max |diff| / max |ref| %.3g, loss %.3g relative (budget %.3g), worst "
           "gradient %s %.3g (budget %.3g); every block checkpointed: %s\n",
           name, le, lo, ftol, worst_name, worst, gtol, same ? "bitwise equal" : "DIFFERENT");
    CHECK(le < ftol && lo < ftol && worst < gtol);
    CHECK(same);
    free(g16);
    free(gk16);
    free(grads);
    dt_lm_free(gk);
    dt_lm_free(g);
}

static void check_case(const char *root, const char *name) {
    char dir[PATH_MAX_LEN], p[PATH_MAX_LEN + 64], what[PATH_MAX_LEN + 32];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(p, sizeof p, "%s/golden.safetensors", dir);
    dt_model m;
    model_of(dir, &m);
    golden gd;
    golden_open(p, &gd);
    static const struct {
        const char *label;
        dt_attention attn;
        int all_ckpt;
    } variants[] = {{"flash", DT_ATTN_FLASH, 0}, {"materialized", DT_ATTN_MATERIALIZED, 0}, {"checkpointed", DT_ATTN_FLASH, 1}};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        dt_lm *g = load(dir, &m, DT_PREC_FP32, gd.B, gd.T, variants[v].all_ckpt ? m.n_layer : 0, variants[v].attn);
        snprintf(what, sizeof what, "%s (%s)", name, variants[v].label);
        check_forward(what, g, &gd);
        check_grads(what, g, &gd);
        dt_lm_free(g);
    }
    dt_lm *g = load(dir, &m, DT_PREC_FP32, gd.B, gd.T, 0, DT_ATTN_FLASH);
    snprintf(what, sizeof what, "%s (ignore index)", name);
    check_ignore_index(what, g, &gd);
    dt_lm_free(g);
    if (g_device == DT_DEVICE_CPU) check_steps(dir, &m, &gd);
    check_bf16(dir, name, &m, &gd);
    dt_st_close(gd.f);
}

/* transformers' own bf16 shards: read shard by shard, widened to fp32 */
static void check_sharded(const char *root) {
    char dir[PATH_MAX_LEN], p[PATH_MAX_LEN + 64];
    snprintf(dir, sizeof dir, "%s/qwen3-bf16-sharded", root);
    snprintf(p, sizeof p, "%s/expected.safetensors", dir);
    dt_model m;
    model_of(dir, &m);
    golden gd;
    golden_open(p, &gd);
    dt_lm *g = load(dir, &m, DT_PREC_FP32, gd.B, gd.T, 0, DT_ATTN_FLASH);
    dt_error err;
    CHECK(dt_lm_forward(g, gd.inputs, NULL, NULL, &err) == DT_OK);
    size_t nl = (size_t)(gd.B * gd.T * m.vocab);
    float *logits = host_copy(g, dt_lm_logits(g), nl);
    double e = max_abs_diff(logits, gtensor(&gd, "logits", nl), nl, NULL);
    free(logits);
    printf("qwen3-bf16-sharded: logits max |diff| %.3g\n", e);
    CHECK(e < LOGIT_TOL * g_tol);
    dt_lm_free(g);
    dt_st_close(gd.f);
}

int main(int argc, char **argv) {
    if (argc != 2 && !(argc == 3 && !strcmp(argv[2], "cuda"))) {
        fprintf(stderr, "usage: test_kernels_llama GOLDEN_DIR [cuda]\n");
        return 2;
    }
    if (argc == 3) {
        if (dt_device_cuda_count() == 0) {
            printf("no GPU: skipped\n");
            return SKIP;
        }
        g_device = DT_DEVICE_CUDA;
        g_tol = GPU_TOL_SCALE;
    }
    check_case(argv[1], "llama");
    check_case(argv[1], "qwen2");
    check_case(argv[1], "qwen3");
    check_sharded(argv[1]);
    TEST_MAIN_END();
}
