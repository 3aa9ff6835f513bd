/* test_vlm_golden.c — dtrun's LLaVA engine (engine/model/dt_vlmrun.h) against transformers'
 * LlavaForConditionalGeneration: tests/engine/golden/vlm/{llama,qwen2}/
 * (scripts/gen_vlm_engine_goldens.py; a CLIP tower of 3 blocks, features of block 2 without
 * the class token, the mlp2x_gelu projector, a 2-block Llama or Qwen2). For each stage
 * (pretrain: the projector trained, the language model frozen; sft: the projector and the
 * language model trained; the tower frozen in both), fp32, B 2 x T 40 with 16 image tokens
 * per sequence:
 *   features                 the tower's selected features of micro-batch (0, 0)
 *   logits, loss             the forward of micro-batch (0, 0)
 *   grad.proj.*, grad.text.* every trained tensor's gradient (the projector's come through the
 *                            language model's gradient of its input embeddings)
 *   mixed.*                  the same batch with sequence 1 text-only (no image, its pixel rows
 *                            unread), as a mixed LLaVA batch
 *   step_losses, step_norms  20 AdamW steps of 2 accumulated micro-batches, global-norm clipping
 *   after.proj.*             the projector after them
 * Tolerances (fp32 against torch's fp32, summation orders differ): measured distances are
 * ~1e-6 for features and logits and ~1e-6 relative for gradients; the bounds are
 * test_lora.c's (logits 2e-5 abs, losses and norms 1e-5 relative, gradients 1e-4 of each
 * tensor's largest, weights after the steps 1e-4 abs), features as logits.
 * Also: stage full and a sequence whose image tokens do not match its images are refused.
 * Usage: test_engine_vlm_golden GOLDEN_DIR (tests/engine/golden/vlm) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/golden_util.h"
#include "dt_ckpt.h"
#include "dt_hfdir.h"
#include "dt_json.h"
#include "dt_optim.h"
#include "dt_safetensors.h"
#include "dt_test.h"
#include "dt_vlmdir.h"
#include "dt_vlmrun.h"

#define LOGIT_TOL 2e-5
#define LOSS_RTOL 1e-5
#define GRAD_RTOL 1e-4
#define AFTER_TOL 1e-4

static const void *gt(dt_st_file *f, const char *name, uint64_t numel) {
    const dt_st_tensor *t = dt_st_find(f, name);
    if (!t || (numel && dt_st_numel(t) != numel)) {
        fprintf(stderr, "golden: tensor %s missing or of another size\n", name);
        exit(1);
    }
    return dt_st_data(f, t);
}

static double meta(dt_st_file *f, const char *key) {
    const char *v = dt_st_metadata(f, key);
    if (!v) {
        fprintf(stderr, "golden: metadata %s missing\n", key);
        exit(1);
    }
    return atof(v);
}

static void model_of(const char *dir, dt_model *m, dt_vlm *v) {
    char p[DT_GOLDEN_PATH_MAX + 16], *txt = NULL;
    dt_error err = {0};
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (dt_json_read_file(p, &txt, NULL, &err) || dt_model_from_config_json_vlm(txt, p, m, v, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    free(txt);
}

/* 1 when tensor t of the language model is the projector (its group 0's extra tensors) */
static int is_proj(const dt_tensor_info *t) {
    return !strncmp(t->name, DT_VLM_PROJECTOR_PREFIX, strlen(DT_VLM_PROJECTOR_PREFIX));
}

/* the tower from the golden's vision.<name>, the projector from proj.<name> */
static void load_vision(dt_vlmrun *r, dt_st_file *f) {
    dt_vit *t = dt_vlmrun_vit(r);
    dt_lm *g = dt_vlmrun_lm(r);
    char key[DT_ST_NAME_MAX];
    for (int i = 0; i < dt_vit_num_tensors(t, DT_VIT_TOWER); i++) {
        const dt_vit_tensor *x = dt_vit_tensor_at(t, DT_VIT_TOWER, i);
        snprintf(key, sizeof key, "vision.%s", x->name);
        memcpy(dt_vit_tower_params(t) + x->offset, gt(f, key, x->numel), x->numel * sizeof(float));
    }
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *x = dt_lm_tensor(g, i);
        if (!is_proj(x)) continue;
        snprintf(key, sizeof key, "proj.%s", x->name + strlen(DT_VLM_PROJECTOR_PREFIX));
        memcpy((float *)dt_lm_params(g) + x->offset, gt(f, key, x->numel), x->numel * sizeof(float));
    }
}

/* worst difference of the language model's trained tensors in flat (params or grads) from the
 * golden's: the projector's from prefix.proj.<name>, the others' (proj 0) from prefix.text.<name>
 * (rel: of each tensor's largest) */
static double worst_of(const dt_lm *g, const float *flat, dt_st_file *f, const char *prefix, int proj, int rel) {
    double worst = 0;
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *x = dt_lm_tensor(g, i);
        if (is_proj(x) != proj) continue;
        char key[DT_ST_NAME_MAX];
        if (proj) snprintf(key, sizeof key, "%s.proj.%s", prefix, x->name + strlen(DT_VLM_PROJECTOR_PREFIX));
        else snprintf(key, sizeof key, "%s.text.%s", prefix, x->name);
        double rm, e = golden_max_abs_diff(flat + x->offset, gt(f, key, x->numel), x->numel, &rm);
        if (rel) e /= rm > 0 ? rm : 1.0;
        worst = e > worst ? e : worst;
    }
    return worst;
}

typedef struct {
    dt_st_file *f;
    int64_t B, T, steps, accum, npx;
    const float *pixels;
    const int32_t *inputs, *targets;
} golden;

static const float *px_of(const golden *c, int64_t s, int64_t a) { return c->pixels + (s * c->accum + a) * c->B * c->npx; }
static const int32_t *in_of(const golden *c, int64_t s, int64_t a) { return c->inputs + (s * c->accum + a) * c->B * c->T; }
static const int32_t *tg_of(const golden *c, int64_t s, int64_t a) { return c->targets + (s * c->accum + a) * c->B * c->T; }

/* A pass after its forward, against the golden's tensors under key prefix pre ("sft",
 * "sft.mixed"): the logits, then the backward and the gradients of the projector and the
 * language model (each of each tensor's largest); the golden's loss in *gl. */
typedef struct {
    double logits, proj, text;
    float gl;
} pass_diff;

static pass_diff check_pass(dt_vlmrun *r, const golden *c, const char *pre, int64_t V) {
    dt_error err = {0};
    dt_lm *g = dt_vlmrun_lm(r);
    const size_t nl = (size_t)(c->B * c->T * V);
    pass_diff d;
    char key[64];
    double rm;
    snprintf(key, sizeof key, "%s.logits", pre);
    d.logits = golden_max_abs_diff(dt_lm_logits(g), gt(c->f, key, nl), nl, &rm);
    snprintf(key, sizeof key, "%s.loss", pre);
    d.gl = ((const float *)gt(c->f, key, 1))[0];
    CHECK(dt_vlmrun_backward(r, 1.0f, &err) == DT_OK);
    snprintf(key, sizeof key, "%s.grad", pre);
    d.proj = worst_of(g, dt_lm_grads(g), c->f, key, 1, 1);
    d.text = worst_of(g, dt_lm_grads(g), c->f, key, 0, 1);
    return d;
}

static void check_pass_bounds(const pass_diff *d, float loss) {
    CHECK(d->logits <= LOGIT_TOL);
    CHECK(fabs(loss - d->gl) <= LOSS_RTOL * fabs(d->gl));
    CHECK(d->proj <= GRAD_RTOL);
    CHECK(d->text <= GRAD_RTOL);
}

/* the forward and backward of micro-batch (0, 0) */
static void check_forward(dt_vlmrun *r, const golden *c, const char *stage, int64_t V) {
    dt_error err = {0};
    dt_lm *g = dt_vlmrun_lm(r);
    dt_vit *t = dt_vlmrun_vit(r);
    float loss = 0.0f;
    dt_lm_zero_grad(g);
    CHECK(dt_vlmrun_forward(r, px_of(c, 0, 0), NULL, in_of(c, 0, 0), tg_of(c, 0, 0), &loss, &err) == DT_OK);
    const size_t nf = (size_t)(c->B * dt_vit_tokens(t)) * (size_t)dt_vit_tensor_at(t, DT_VIT_TOWER, 0)->numel;
    double rm;
    const double fe = golden_max_abs_diff(dt_vit_features(t), gt(c->f, "features", nf), nf, &rm);
    const pass_diff d = check_pass(r, c, stage, V);
    printf("  %s: features |diff| %.3g, logits %.3g, loss %.7f vs %.7f, gradients: projector %.3g, language model "
           "%.3g (%d trained tensors, the projector's 4 among them) of each tensor's largest\n", stage, fe, d.logits,
           loss, d.gl, d.proj, d.text, dt_lm_num_tensors(g));
    CHECK(fe <= LOGIT_TOL);
    check_pass_bounds(&d, loss);
}

/* micro-batch (0, 0) with sequence 1 text-only (mixed.inputs): its pixel rows NaN, never read */
static void check_mixed(dt_vlmrun *r, const golden *c, const char *stage, int64_t V) {
    dt_error err = {0};
    const size_t row = (size_t)c->npx;
    float *px = malloc(sizeof(float) * row * (size_t)c->B), loss = 0.0f;
    memcpy(px, px_of(c, 0, 0), sizeof(float) * row);
    for (size_t e = row; e < row * (size_t)c->B; e++) px[e] = NAN;
    uint8_t has[2] = {1, 0};
    CHECK(c->B == 2);
    dt_lm_zero_grad(dt_vlmrun_lm(r));
    CHECK(dt_vlmrun_forward(r, px, has, gt(c->f, "mixed.inputs", (uint64_t)(c->B * c->T)),
                            gt(c->f, "mixed.targets", (uint64_t)(c->B * c->T)), &loss, &err) == DT_OK);
    char pre[48];
    snprintf(pre, sizeof pre, "%s.mixed", stage);
    const pass_diff d = check_pass(r, c, pre, V);
    printf("  %s, sequence 1 text-only: logits |diff| %.3g, loss %.7f vs %.7f, gradients: projector %.3g, language "
           "model %.3g\n", stage, d.logits, loss, d.gl, d.proj, d.text);
    check_pass_bounds(&d, loss);
    free(px);
}

/* *worst = max(*worst, |got - want| / |want|) */
static void track(double *worst, double got, double want) {
    const double e = fabs(got - want) / fabs(want);
    if (e > *worst) *worst = e;
}

/* step s's gradients, accumulated over its micro-batches from zero; their mean loss */
static double accumulate(dt_vlmrun *r, const golden *c, int64_t s) {
    dt_error err = {0};
    double total = 0;
    dt_lm_zero_grad(dt_vlmrun_lm(r));
    for (int64_t a = 0; a < c->accum; a++) {
        float loss = 0.0f;
        CHECK(dt_vlmrun_forward(r, px_of(c, s, a), NULL, in_of(c, s, a), tg_of(c, s, a), &loss, &err) == DT_OK);
        CHECK(dt_vlmrun_backward(r, 1.0f / (float)c->accum, &err) == DT_OK);
        total += loss;
    }
    return total / (double)c->accum;
}

/* the STEPS-step loop: AdamW over the language model's trained set (the projector's tensors
 * among it), clipped by their global norm */
static void check_training(dt_vlmrun *r, const golden *c, const char *stage) {
    dt_error err = {0};
    dt_lm *g = dt_vlmrun_lm(r);
    dt_precision pr;
    dt_precision_from_preset(DT_PREC_FP32, &pr);
    dt_optim *opt;   /* the language model's trained set: the projector and (sft) its own tensors */
    CHECK(dt_optim_create(&pr, dt_lm_num_params(g), &opt, &err) == DT_OK);
    char key[64];
    snprintf(key, sizeof key, "%s.step_losses", stage);
    const float *want = gt(c->f, key, (uint64_t)c->steps);
    snprintf(key, sizeof key, "%s.step_norms", stage);
    const float *want_norm = gt(c->f, key, (uint64_t)c->steps);
    const dt_adamw hp = {meta(c->f, "lr"), meta(c->f, "beta1"), meta(c->f, "beta2"), meta(c->f, "eps"),
                         meta(c->f, "weight_decay")};
    double worst_loss = 0, worst_norm = 0;
    for (int64_t s = 0; s < c->steps; s++) {
        track(&worst_loss, accumulate(r, c, s), want[s]);
        const double norm = sqrt(dt_lm_grad_sumsq(dt_vlmrun_lm(r)));
        track(&worst_norm, norm, want_norm[s]);
        const double mul = 1.0 / dt_clip_divisor(norm, 1.0, meta(c->f, "max_norm"));
        for (int i = 0; i < dt_lm_num_tensors(g); i++) {
            const dt_tensor_info *x = dt_lm_tensor(g, i);
            dt_optim_update(opt, dt_lm_params(g), dt_lm_grads(g), x->offset, x->numel, &hp, mul,
                            (x->flags & DT_TENSOR_DECAY) != 0, s + 1);
        }
    }
    snprintf(key, sizeof key, "%s.after", stage);
    const double ae = worst_of(g, dt_lm_params(g), c->f, key, 1, 0);
    printf("  %s: %lld steps x %lld micro-batches: losses worst %.3g relative, norms %.3g, projector after %.3g\n",
           stage, (long long)c->steps, (long long)c->accum, worst_loss, worst_norm, ae);
    CHECK(worst_loss <= LOSS_RTOL);
    CHECK(worst_norm <= LOSS_RTOL);
    CHECK(ae <= AFTER_TOL);
    dt_optim_free(opt);
}

/* the language model's own tensors (both sets) by name from dir/model.safetensors (fp32) */
static int load_text(dt_lm *g, const char *dir, dt_error *err) {
    char p[DT_GOLDEN_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    dt_st_file *f;
    if (dt_st_open(p, &f, err)) return err->code;
    for (int set = 0; set < 2; set++)
        for (int i = 0; i < (set ? dt_lm_num_base_tensors(g) : dt_lm_num_tensors(g)); i++) {
            const dt_tensor_info *x = set ? dt_lm_base_tensor(g, i) : dt_lm_tensor(g, i);
            float *base = set ? dt_lm_base_params(g) : dt_lm_params(g);
            if (!is_proj(x)) memcpy(base + x->offset, gt(f, x->name, x->numel), x->numel * sizeof(float));
        }
    dt_st_close(f);
    return DT_OK;
}

static dt_vlmrun *open_model(const char *dir, dt_model *m, dt_vlm *v, const golden *c, dt_error *err) {
    dt_precision pr;
    dt_precision_from_preset(DT_PREC_FP32, &pr);
    const dt_lm_options o = {.B = c->B, .T = c->T, .attn = DT_ATTN_FLASH, .device = DT_DEVICE_CPU};
    dt_vlmrun *r;
    if (dt_vlmrun_create(m, v, &pr, &o, &r, err)) return NULL;
    char text[DT_GOLDEN_PATH_MAX];
    snprintf(text, sizeof text, "%s/text", dir);
    if (load_text(dt_vlmrun_lm(r), text, err)) {
        dt_vlmrun_free(r);
        return NULL;
    }
    load_vision(r, c->f);
    return r;
}

/* 1 when n floats at a and b are bitwise equal; an empty set (a NULL pointer: a stage without a
 * frozen base) is equal without being read (memcmp's arguments must not be NULL) */
static int same_floats(const float *a, const float *b, size_t n) {
    return n == 0 || !memcmp(a, b, n * sizeof(float));
}

/* 1 when every parameter of a and b (tower, both sets of the language model: the projector among them) is bitwise equal */
static int same_params(dt_vlmrun *a, dt_vlmrun *b) {
    dt_vit *va = dt_vlmrun_vit(a), *vb = dt_vlmrun_vit(b);
    dt_lm *ga = dt_vlmrun_lm(a), *gb = dt_vlmrun_lm(b);
    return same_floats(dt_vit_tower_params(va), dt_vit_tower_params(vb), (size_t)dt_vit_tower_numel(va)) &&
           same_floats(dt_lm_params(ga), dt_lm_params(gb), (size_t)dt_lm_num_params(ga)) &&
           same_floats(dt_lm_base_params(ga), dt_lm_base_params(gb), (size_t)dt_lm_num_base_params(ga));
}

/* a model of the golden's shape, from a LlavaForConditionalGeneration directory */
static dt_vlmrun *from_dir(const dt_model *m, const dt_vlm *v, const golden *c, const char *dir, dt_error *err) {
    dt_precision pr;
    dt_precision_from_preset(DT_PREC_FP32, &pr);
    const dt_lm_options o = {.B = c->B, .T = c->T, .attn = DT_ATTN_FLASH, .device = DT_DEVICE_CPU};
    dt_vlmrun *r;
    if (dt_vlmrun_create(m, v, &pr, &o, &r, err)) return NULL;
    if (dt_vlmdir_load(r, m, v, dir, err)) {
        dt_vlmrun_free(r);
        return NULL;
    }
    return r;
}

/* removes what dt_vlmdir_save wrote into dir (config, index, shards), then dir */
static void remove_export(const char *dir) {
    char p[DT_GOLDEN_PATH_MAX + 64];
    const char *fixed[] = {"config.json", "model.safetensors", "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, fixed[i]);
        unlink(p);
    }
    for (int n = 1; n < 100; n++)
        for (int k = 1; k <= n; k++) {
            snprintf(p, sizeof p, "%s/model-%05d-of-%05d.safetensors", dir, k, n);
            unlink(p);
        }
    rmdir(dir);
}

/* Hugging Face directories in and out: the golden's hf/ (transformers' save_pretrained, sharded)
 * read into the same parameters as the golden's own tensors; written back (sharded) and read
 * again bitwise; a non-empty export directory and a directory of another model refused.
 * DT_KEEP_EXPORT=DIR keeps the export in DIR/<case> (scripts/check_vlm_export.py loads it). */
#define EXPORT_SHARD_BYTES 100000
static void check_hfdir(const char *dir, const char *name, const dt_model *m, dt_vlm *v, const golden *c) {
    dt_error err = {0};
    char hf[DT_GOLDEN_PATH_MAX + 8], tmpl[] = "/tmp/dt_vlm_export_XXXXXX", out[DT_GOLDEN_PATH_MAX + 8];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    const char *keep = getenv("DT_KEEP_EXPORT");
    CHECK(mkdtemp(tmpl) != NULL);
    snprintf(out, sizeof out, "%s/%s", keep ? keep : tmpl, keep ? name : "export");
    static const dt_vlm_stage stages[2] = {DT_VLM_PRETRAIN, DT_VLM_SFT};
    for (int k = 0; k < 2; k++) {
        v->stage = stages[k];
        dt_vlmrun *ref = open_model(dir, (dt_model *)m, v, c, &err), *a = from_dir(m, v, c, hf, &err);
        CHECK(ref && a);
        CHECK(same_params(ref, a));
        remove_export(out);
        CHECK(dt_vlmdir_save(a, m, v, out, EXPORT_SHARD_BYTES, &err) == DT_OK);
        dt_vlmrun *b = from_dir(m, v, c, out, &err);
        CHECK(b && same_params(a, b));
        CHECK(dt_vlmdir_save(a, m, v, out, EXPORT_SHARD_BYTES, &err) == DT_EINVAL && strstr(err.msg, "is not empty"));
        printf("  %s: %s read as the golden's tensors, exported (sharded) and read back bitwise\n",
               dt_vlm_stage_name(v->stage), hf);
        dt_vlmrun_free(ref);
        dt_vlmrun_free(a);
        dt_vlmrun_free(b);
    }
    dt_vlm other = *v;
    other.image_token_index--;
    CHECK(from_dir(m, &other, c, hf, &err) == NULL && strstr(err.msg, "config.json: image_token_index is"));
    printf("  refused: %s\n", err.msg);
    if (!keep) remove_export(out);
    rmdir(tmpl);
}

static void check_case(const char *root, const char *name) {
    char dir[DT_GOLDEN_PATH_MAX], file[DT_GOLDEN_PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(file, sizeof file, "%s/golden.safetensors", dir);
    dt_model m;
    dt_vlm v;
    model_of(dir, &m, &v);
    dt_error err = {0};
    golden c = {0};
    if (dt_st_open(file, &c.f, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    c.B = (int64_t)meta(c.f, "B"), c.T = (int64_t)meta(c.f, "T"), c.steps = (int64_t)meta(c.f, "steps");
    c.accum = (int64_t)meta(c.f, "accum");
    c.npx = v.tower.channels * v.tower.image_size * v.tower.image_size;
    const int64_t micro = c.steps * c.accum * c.B;
    c.pixels = gt(c.f, "pixels", (uint64_t)(micro * c.npx));
    c.inputs = gt(c.f, "inputs", (uint64_t)(micro * c.T));
    c.targets = gt(c.f, "targets", (uint64_t)(micro * c.T));
    printf("%s\n", name);
    static const dt_vlm_stage stages[2] = {DT_VLM_PRETRAIN, DT_VLM_SFT};
    for (int k = 0; k < 2; k++) {
        v.stage = stages[k];
        dt_vlmrun *r = open_model(dir, &m, &v, &c, &err);
        if (!r) {
            fprintf(stderr, "%s %s: %s\n", name, dt_vlm_stage_name(v.stage), err.msg);
            exit(1);
        }
        /* pretrain: the language model's own tensors are all base set, its trained set the projector's */
        CHECK_EQ_I64(dt_lm_num_tensors(dt_vlmrun_lm(r)) == 4, v.stage == DT_VLM_PRETRAIN);
        check_forward(r, &c, dt_vlm_stage_name(v.stage), m.vocab);
        check_mixed(r, &c, dt_vlm_stage_name(v.stage), m.vocab);
        check_training(r, &c, dt_vlm_stage_name(v.stage));
        dt_vlmrun_free(r);
    }
    check_hfdir(dir, name, &m, &v, &c);
    /* refusals: stage full; a sequence with an image token too few */
    v.stage = DT_VLM_FULL;
    CHECK(open_model(dir, &m, &v, &c, &err) == NULL && strstr(err.msg, "--vlm-stage full"));
    v.stage = DT_VLM_SFT;
    dt_vlmrun *r = open_model(dir, &m, &v, &c, &err);
    CHECK(r != NULL);
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(c.B * c.T));
    memcpy(in, in_of(&c, 0, 0), sizeof(int32_t) * (size_t)(c.B * c.T));
    for (int64_t t = 0; t < c.T; t++)
        if (in[c.T + t] == v.image_token_index) {
            in[c.T + t] = 0;
            break;
        }
    float loss;
    CHECK(dt_vlmrun_forward(r, px_of(&c, 0, 0), NULL, in, tg_of(&c, 0, 0), &loss, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "sequence 1 holds 15 image tokens") != NULL);
    printf("  refused: %s\n", err.msg);
    free(in);
    dt_vlmrun_free(r);
    dt_st_close(c.f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s GOLDEN_DIR\n", argv[0]);
        return 2;
    }
    check_case(argv[1], "llama");
    check_case(argv[1], "qwen2");
    TEST_MAIN_END();
}
