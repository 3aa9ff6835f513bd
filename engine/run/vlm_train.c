/* vlm_train.c — the trainer's vision-language run (dt_vlmtrain.h; docs/vlm.md "In dtrun").
 *
 * Data: the documents of a llava prepare (dt_vlm_batch), in the prepare's order (no
 * shuffle, as LLaVA's own data is shuffled once before it is written), sharded as the token
 * loader shards windows: each micro-batch of the step takes world x B documents, rank r the
 * r-th B of them; the position a checkpoint keeps counts the documents of all ranks, so a
 * resume on another world size continues with the same documents. The loss is each
 * micro-batch's mean cross-entropy over its counted targets (labels shifted by one: Hugging
 * Face's labels are unshifted), averaged over the micro-batches and the ranks, as
 * transformers' Trainer before average_tokens_across_devices. */
#include "dt_vlmtrain.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_data.h"
#include "dt_devmath.h"
#include "dt_pixshard.h"
#include "dt_vit.h"
#include "dt_vlmdir.h"

/* transformers' PreTrainedModel.save_pretrained max_shard_size default, "5GB" = 5 * 10^9 bytes */
#define VLM_EXPORT_SHARD_BYTES 5000000000ull
/* the random tower's matrices and embeddings: N(0, std^2), LlavaConfig's initializer_range 0.02
 * (a test's start only: a real run starts from --init, a pretrained CLIP tower) */
#define VLM_TOWER_INIT_STD 0.02
/* the training split's subdirectory of a prepare's output (docs/data.md "prepare's output") */
#define DT_VLM_TRAIN_SPLIT "train"

struct dt_objrun {
    dt_vlmrun *r;
    dt_vlm_data *d;
    int rank, world;
    int64_t B, T;
    int64_t pos;                 /* documents consumed by all ranks */
    int32_t *tokens, *labels;    /* [B, T] as dt_vlm_batch gives them */
    int32_t *targets;            /* [B, T] labels shifted left by one, DT_IGNORE_INDEX at the end */
    float *pixels;               /* [B, 3, H, W] */
    uint8_t *has;                /* [B] */
};

static int vlm_check(const dt_plan *p, dt_error *err) {
    const dt_lm_options lo = {.device = p->cluster.device, .finetune = &p->finetune};
    if (dt_vlmrun_check(&p->vlm, &p->precision, &lo, err)) return err->code;
    if (p->vlm.images_per_sample != 1)
        return dt_errorf(err, DT_EINVAL, "vlm: images_per_sample %lld: a llava prepare's documents hold one image "
                         "each; dtrun trains images_per_sample 1", (long long)p->vlm.images_per_sample);
    if (p->parallel.zero_stage == 3)
        return dt_errorf(err, DT_EINVAL, "vlm: ZeRO-3 with a vision-language model is not built in dtrun yet "
                         "(--init and the export need the whole language model on each rank): use zero_stage 0, 1 or 2");
    if (p->parallel.offload_optimizer != DT_OFFLOAD_NONE || p->parallel.offload_param != DT_OFFLOAD_NONE)
        return dt_errorf(err, DT_EINVAL, "vlm: offload with a vision-language model is not built in dtrun yet: "
                         "re-plan without --offload");
    if (p->objective.kind > DT_OBJ_SFT)
        return dt_errorf(err, DT_EINVAL, "vlm: objective %s with a vision-language model is not built: the stages "
                         "train next-token prediction (pt / sft)", dt_obj_name(p->objective.kind));
    if (p->data.eval_interval > 0 && (p->data.valid[0] || p->data.valid_fraction > 0))
        return dt_errorf(err, DT_EINVAL, "vlm: held-out evaluation of a vision-language run is not built in dtrun "
                         "yet: set data.eval_interval 0");
    return DT_OK;
}

static void vlm_configure(const dt_plan *p, dt_model *m) { (void)p, (void)m; }

static void vlm_free(dt_objrun *o) {
    if (!o) return;
    dt_vlm_close(o->d);
    free(o->tokens);
    free(o->labels);
    free(o->targets);
    free(o->pixels);
    free(o->has);
    free(o);
}

/* The prepare's output directory of a training path: the plan's data.train names its train/
 * split (dtplan solve --data), --data the directory itself. */
static const char *prepare_dir(const char *train, char *dir, size_t cap) {
    const size_t n = strlen(train), sl = strlen("/" DT_VLM_TRAIN_SPLIT);
    if (n <= sl || n >= cap || strcmp(train + n - sl, "/" DT_VLM_TRAIN_SPLIT) != 0) return train;
    memcpy(dir, train, n - sl);
    dir[n - sl] = 0;
    return dir;
}

static int vlm_open(const dt_objrun_ctx *c, dt_lm *policy, dt_objrun **out, dt_error *err) {
    (void)policy;
    const dt_plan *p = c->plan;
    char dir[DT_PATH_MAX];
    dt_objrun *o = calloc(1, sizeof *o);
    if (!o) return dt_errorf(err, DT_ENOMEM, "vlm: out of memory");
    o->r = c->vlm, o->rank = c->rank, o->world = c->world;
    o->B = p->batch.micro_batch, o->T = p->batch.seq_len;
    int rc = dt_vlm_open(prepare_dir(c->train_path, dir, sizeof dir), DT_SPLIT_TRAIN, &o->d, err);
    if (rc) {
        vlm_free(o);
        return dt_error_prefix(err, "%s", c->train_path);
    }
    int h, w;
    dt_vlm_image_size(o->d, &h, &w);
    const int64_t size = p->vlm.tower.image_size;
    if (h != size || w != size) {
        vlm_free(o);
        return dt_errorf(err, DT_EINVAL, "%s: the pixel shards hold %dx%d crops, the model's tower takes %lldx%lld: "
                         "prepare again with --image-size %lld (or --model-config)", c->train_path, h, w,
                         (long long)size, (long long)size, (long long)size);
    }
    const size_t n = (size_t)(o->B * o->T), px = (size_t)(o->B * 3 * h * w);
    o->tokens = malloc(n * sizeof(int32_t));
    o->labels = malloc(n * sizeof(int32_t));
    o->targets = malloc(n * sizeof(int32_t));
    o->pixels = malloc(px * sizeof(float));
    o->has = malloc((size_t)o->B);
    if (!o->tokens || !o->labels || !o->targets || !o->pixels || !o->has) {
        vlm_free(o);
        return dt_errorf(err, DT_ENOMEM, "vlm: out of memory for a micro-batch");
    }
    *out = o;
    return DT_OK;
}

/* this rank's B documents of the next micro-batch; targets[t] = labels[t + 1] */
static int next_batch(dt_objrun *o, dt_error *err) {
    const uint64_t first = (uint64_t)(o->pos + (int64_t)o->rank * o->B);
    if (dt_vlm_batch(o->d, first, (int)o->B, (int)o->T, o->tokens, o->labels, o->pixels, o->has, err)) return err->code;
    o->pos += (int64_t)o->world * o->B;
    for (int64_t b = 0; b < o->B; b++) {
        const int32_t *l = o->labels + b * o->T;
        int32_t *tg = o->targets + b * o->T;
        for (int64_t t = 0; t + 1 < o->T; t++) tg[t] = l[t + 1] == DT_LABEL_IGNORE ? DT_IGNORE_INDEX : l[t + 1];
        tg[o->T - 1] = DT_IGNORE_INDEX;
    }
    return DT_OK;
}

static int vlm_micro(dt_objrun *o, dt_lm *g, float grad_scale, double *loss, dt_error *err) {
    (void)g;
    float l;
    if (next_batch(o, err) || dt_vlmrun_forward(o->r, o->pixels, o->has, o->tokens, o->targets, &l, err) ||
        dt_vlmrun_backward(o->r, grad_scale, err))
        return err->code;
    *loss = l;
    return DT_OK;
}

static int vlm_step_metrics(dt_objrun *o, dt_objrun_metrics *m, dt_error *err) {
    (void)o, (void)err;
    m->n = 0;
    return DT_OK;
}

static int vlm_evaluate(dt_objrun *o, dt_lm *g, double *loss, dt_objrun_metrics *m, dt_error *err) {
    (void)o, (void)g, (void)err;
    *loss = NAN;
    m->n = 0;
    return DT_OK;
}

static int64_t vlm_examples(const dt_objrun *o) { return (int64_t)dt_vlm_docs(o->d); }

static dt_loader_pos vlm_get_pos(const dt_objrun *o) {
    const int64_t n = vlm_examples(o);
    return (dt_loader_pos){o->pos / n, o->pos % n};
}

static int vlm_set_pos(dt_objrun *o, dt_loader_pos pos, dt_error *err) {
    if (pos.epoch < 0 || pos.cursor < 0 || pos.cursor >= vlm_examples(o))
        return dt_errorf(err, DT_EINVAL, "vlm: the checkpoint's data position (epoch %lld, document %lld) is outside "
                         "the %lld documents of the data", (long long)pos.epoch, (long long)pos.cursor,
                         (long long)vlm_examples(o));
    o->pos = pos.epoch * vlm_examples(o) + pos.cursor;
    return DT_OK;
}

static const char *vlm_fingerprint(const dt_objrun *o) {
    (void)o;
    return "";
}

static const dt_objrun_ops k_vlm_ops = {
    .kind = DT_OBJ_SFT, .rows_per_example = 1, .check = vlm_check, .configure = vlm_configure, .open = vlm_open,
    .micro = vlm_micro, .step_metrics = vlm_step_metrics, .evaluate = vlm_evaluate, .examples = vlm_examples,
    .get_pos = vlm_get_pos, .set_pos = vlm_set_pos, .data_fingerprint = vlm_fingerprint, .free = vlm_free};

const dt_objrun_ops *dt_vlmtrain_ops(void) { return &k_vlm_ops; }

int dt_vlmtrain_create(const dt_plan *p, const dt_lm_options *o, dt_vlmrun **r, dt_error *err) {
    int rc = vlm_check(p, err);
    return rc ? rc : dt_vlmrun_create(&p->model, &p->vlm, &p->precision, o, r, err);
}

/* a standard normal from two splitmix64 uniforms (Box-Muller, cos branch) */
static double tower_normal(uint64_t *s) {
    const double u1 = ((double)(dt_rng_next(s) >> 11) + 1.0) / 9007199254740993.0;   /* (0, 1]: 2^53 + 1 */
    const double u2 = (double)(dt_rng_next(s) >> 11) / 9007199254740992.0;           /* [0, 1): 2^53 */
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* the tower from seed: LayerNorm weights 1, biases 0, every other tensor N(0, std^2) */
static void tower_random(dt_vit *v, uint64_t seed) {
    float *w = dt_vit_tower_params(v);
    uint64_t s = seed;
    for (int i = 0; i < dt_vit_num_tensors(v, DT_VIT_TOWER); i++) {
        const dt_vit_tensor *t = dt_vit_tensor_at(v, DT_VIT_TOWER, i);
        const size_t nl = strlen(t->name);
        const int bias = nl > 5 && strcmp(t->name + nl - 5, ".bias") == 0;
        const int norm = !bias && (strstr(t->name, "layer_norm") || strstr(t->name, "layernorm") ||
                                   strstr(t->name, "layrnorm"));
        for (size_t k = 0; k < t->numel; k++)
            w[t->offset + k] = bias ? 0.0f : norm ? 1.0f : (float)(tower_normal(&s) * VLM_TOWER_INIT_STD);
    }
}

int dt_vlmtrain_init_base(dt_vlmrun *r, const dt_plan *p, int *from_dir, dt_error *err) {
    *from_dir = p->output.init[0] != 0;
    if (*from_dir) {
        if (dt_vlmdir_load(r, &p->model, &p->vlm, p->output.init, err)) return dt_error_prefix(err, "output.init");
        return DT_OK;
    }
    /* the tower's stream apart from the language model's (seed + 1: the language model's draws are
     * keyed by the flat element index of seed, lm_init.c) */
    tower_random(dt_vlmrun_vit(r), p->data.seed + 1);
    return dt_lm_init_base_random(dt_vlmrun_lm(r), p->data.seed, err);
}

static int export_path(const char *out_dir, int64_t step, char *path, size_t cap, dt_error *err) {
    if (snprintf(path, cap, "%s/hf-step%08lld", out_dir, (long long)step) >= (int)cap)
        return dt_errorf(err, DT_EINVAL, "vlm: the export path under %s is too long", out_dir);
    return DT_OK;
}

int dt_vlmtrain_check_export(const char *out_dir, int64_t stop, dt_error *err) {
    char path[DT_PATH_MAX * 2];
    if (export_path(out_dir, stop, path, sizeof path, err)) return err->code;
    DIR *d = opendir(path);
    if (!d) return DT_OK;
    int empty = 1;
    for (struct dirent *e; empty && (e = readdir(d));) empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    if (!empty)
        return dt_errorf(err, DT_EINVAL, "%s holds an earlier run's export, which this run's would replace: move it "
                         "away, or train into another --out", path);
    return DT_OK;
}

int dt_vlmtrain_export(dt_vlmrun *r, const dt_plan *p, const char *out_dir, int64_t step, char *path, size_t cap,
                       dt_error *err) {
    if (export_path(out_dir, step, path, cap, err)) return err->code;
    return dt_vlmdir_save(r, &p->model, &p->vlm, path, VLM_EXPORT_SHARD_BYTES, err);
}
