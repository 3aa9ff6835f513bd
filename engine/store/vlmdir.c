/* vlmdir.c — LlavaForConditionalGeneration directories in and out (dt_vlmdir.h). Every tensor
 * has one name as transformers 5 holds it (model.vision_tower.X, model.multi_modal_projector.X,
 * model.language_model.Y, lm_head.weight) and the names it is found under on disk: what
 * transformers 5's save_pretrained writes (its conversion_mapping.py "llava" renamings, reversed:
 * vision_tower.X, multi_modal_projector.X, language_model.model.Y, language_model.lm_head.weight),
 * and transformers 4's CLIPVisionModel prefix (vision_tower.vision_model.X, which
 * base_model_prefix "vision_model" strips). dtrun writes the first of the on-disk names. */
#include "dt_vlmdir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_dtype.h"
#include "dt_file.h"
#include "dt_hfdir.h"
#include "dt_json.h"
#include "dt_safetensors.h"

#define NAME_MAX_LEN DT_ST_NAME_MAX
#define ALIASES 4
#define PATH_LEN 4096
#define TOWER "model.vision_tower."
#define PROJ "model.multi_modal_projector."
#define LANG "model.language_model."

/* one tensor of the model: its names, where its fp32 values live, its shape */
typedef struct {
    char name[ALIASES][NAME_MAX_LEN];   /* [0]: transformers' in-memory name; [1]: as saved; others: accepted */
    int naliases;
    float *data;
    size_t numel;
    int ndim;
    int64_t shape[4];
    int found;
} vt;

typedef struct {
    vt *t;
    int n;
} vt_list;

static void aliases(vt *x, const char *canon) {
    snprintf(x->name[0], NAME_MAX_LEN, "%s", canon);
    x->naliases = 2;
    if (!strncmp(canon, TOWER, strlen(TOWER))) {
        const char *rest = canon + strlen(TOWER);
        snprintf(x->name[1], NAME_MAX_LEN, "vision_tower.%s", rest);
        snprintf(x->name[2], NAME_MAX_LEN, "vision_tower.vision_model.%s", rest);
        snprintf(x->name[3], NAME_MAX_LEN, TOWER "vision_model.%s", rest);
        x->naliases = 4;
    } else if (!strncmp(canon, PROJ, strlen(PROJ))) {
        snprintf(x->name[1], NAME_MAX_LEN, "multi_modal_projector.%s", canon + strlen(PROJ));
    } else if (!strncmp(canon, LANG, strlen(LANG))) {
        snprintf(x->name[1], NAME_MAX_LEN, "language_model.model.%s", canon + strlen(LANG));
    } else {
        snprintf(x->name[1], NAME_MAX_LEN, "language_model.%s", canon);
    }
}

/* the language model's tensor t (dt_lm's name "model.Y", "lm_head.weight", or the projector's
 * "multi_modal_projector.X") at data */
static void add_lm(vt *x, const dt_tensor_info *t, float *data) {
    char canon[NAME_MAX_LEN];
    if (!strncmp(t->name, DT_VLM_PROJECTOR_PREFIX, strlen(DT_VLM_PROJECTOR_PREFIX)))
        snprintf(canon, sizeof canon, "model.%s", t->name);   /* the projector, in group 0 */
    else if (!strncmp(t->name, "model.", 6)) snprintf(canon, sizeof canon, LANG "%s", t->name + 6);
    else snprintf(canon, sizeof canon, "%s", t->name);
    aliases(x, canon);
    x->data = data, x->numel = t->numel, x->ndim = t->ndim;
    x->shape[0] = t->shape[0], x->shape[1] = t->shape[1];
}

static void add_vit(vt *x, const char *prefix, const dt_vit_tensor *t, float *data) {
    char canon[NAME_MAX_LEN * 2];
    snprintf(canon, sizeof canon, "%s%s", prefix, t->name);
    aliases(x, canon);
    x->data = data, x->numel = t->numel, x->ndim = t->ndim;
    memcpy(x->shape, t->shape, sizeof x->shape);
}

/* every tensor of r: the tower, then the language model's trained set (the projector among
 * it) and base set */
static int list_of(dt_vlmrun *r, vt_list *out, dt_error *err) {
    dt_lm *g = dt_vlmrun_lm(r);
    dt_vit *v = dt_vlmrun_vit(r);
    const int nt = dt_vit_num_tensors(v, DT_VIT_TOWER);
    const int n = nt + dt_lm_num_tensors(g) + dt_lm_num_base_tensors(g);
    out->t = calloc((size_t)n, sizeof *out->t);
    if (!out->t) return dt_errorf(err, DT_ENOMEM, "vlm: out of memory for the tensor table");
    int k = 0;
    for (int i = 0; i < nt; i++) {
        const dt_vit_tensor *t = dt_vit_tensor_at(v, DT_VIT_TOWER, i);
        add_vit(&out->t[k++], TOWER, t, dt_vit_tower_params(v) + t->offset);
    }
    for (int i = 0; i < dt_lm_num_tensors(g); i++)
        add_lm(&out->t[k++], dt_lm_tensor(g, i), (float *)dt_lm_params(g) + dt_lm_tensor(g, i)->offset);
    for (int i = 0; i < dt_lm_num_base_tensors(g); i++)
        add_lm(&out->t[k++], dt_lm_base_tensor(g, i), (float *)dt_lm_base_params(g) + dt_lm_base_tensor(g, i)->offset);
    out->n = k;
    return DT_OK;
}

/* ---- the config ---- */

/* the first field of (m, v) that the directory's (fm, fv) describes otherwise */
static int same_config(const dt_model *m, const dt_vlm *v, const dt_model *fm, const dt_vlm *fv, const char *path,
                       dt_error *err) {
    const struct {
        const char *key;
        int64_t want, got;
    } f[] = {
        {"vision_config.image_size", v->tower.image_size, fv->tower.image_size},
        {"vision_config.patch_size", v->tower.patch, fv->tower.patch},
        {"vision_config.hidden_size", v->tower.hidden, fv->tower.hidden},
        {"vision_config.num_hidden_layers", v->tower.n_layer, fv->tower.n_layer},
        {"vision_config.num_attention_heads", v->tower.n_head, fv->tower.n_head},
        {"vision_config.intermediate_size", v->tower.ffn, fv->tower.ffn},
        {"vision_feature_layer", v->tower.select_layer, fv->tower.select_layer},
        {"image_token_index", v->image_token_index, fv->image_token_index},
        {"text_config.hidden_size", m->hidden, fm->hidden},
        {"text_config.num_hidden_layers", m->n_layer, fm->n_layer},
        {"text_config.num_attention_heads", m->n_head, fm->n_head},
        {"text_config.num_key_value_heads", m->n_kv_head, fm->n_kv_head},
        {"text_config.intermediate_size", m->ffn, fm->ffn},
        {"text_config.vocab_size", m->vocab, fm->vocab},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].want != f[i].got)
            return dt_errorf(err, DT_EINVAL, "%s: %s is %lld, the planned model's is %lld (give a checkpoint of the "
                             "planned model, or plan this one: dtplan solve --model %s)", path, f[i].key,
                             (long long)f[i].got, (long long)f[i].want, path);
    return DT_OK;
}

static int check_config(const dt_model *m, const dt_vlm *v, const char *dir, dt_error *err) {
    char path[PATH_LEN], *txt = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    dt_model fm;
    dt_vlm fv;
    memset(&fv, 0, sizeof fv);
    int rc = dt_json_read_file(path, &txt, NULL, err);
    if (!rc) rc = dt_model_from_config_json_vlm(txt, path, &fm, &fv, err);
    free(txt);
    if (!rc && !dt_vlm_active(&fv))
        rc = dt_errorf(err, DT_EINVAL, "%s: not a LLaVA config (no vision_config): --init takes a "
                       "LlavaForConditionalGeneration directory for a vision-language plan", path);
    return rc ? rc : same_config(m, v, &fm, &fv, path, err);
}

/* ---- reading ---- */

static int shape_ok(const vt *x, const dt_st_tensor *s) {
    if (s->ndim != x->ndim) return 0;
    for (int d = 0; d < x->ndim; d++)
        if (s->shape[d] != x->shape[d]) return 0;
    return 1;
}

/* x from file f's entry s (any alias): dtype and shape checked, converted to fp32 */
static int read_one(vt *x, const dt_st_file *f, const dt_st_tensor *s, const char *path, dt_error *err) {
    dt_dtype st;
    if (dt_st_dtype_parse(s->dtype, &st) || (st != DT_DTYPE_FP32 && st != DT_DTYPE_BF16 && st != DT_DTYPE_FP16))
        return dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" has dtype %s (F32, BF16 or F16 expected)", path, s->name,
                         s->dtype);
    if (!shape_ok(x, s))
        return dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" has another shape than the planned model's (%d dims, "
                         "first %lld; expected %d dims, first %lld)", path, s->name, s->ndim, (long long)s->shape[0],
                         x->ndim, (long long)x->shape[0]);
    if (x->found)
        return dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" is there twice (under two names or in two shards)", path,
                         s->name);
    const size_t es = (size_t)dt_dtype_size(st);
    void *tmp = malloc(x->numel * es);   /* aligned for the conversion, whatever the file's offset */
    if (!tmp) return dt_errorf(err, DT_ENOMEM, "%s: out of memory reading \"%s\"", path, s->name);
    memcpy(tmp, dt_st_data(f, s), x->numel * es);
    dt_convert(x->data, DT_DTYPE_FP32, tmp, st, x->numel);
    free(tmp);
    x->found = 1;
    return DT_OK;
}

static int read_file(vt_list *l, const char *path, dt_error *err) {
    dt_st_file *f = NULL;
    int rc = dt_st_open(path, &f, err);
    for (int i = 0; !rc && i < l->n; i++)
        for (int a = 0; !rc && a < l->t[i].naliases; a++) {
            const dt_st_tensor *s = dt_st_find(f, l->t[i].name[a]);
            if (s) rc = read_one(&l->t[i], f, s, path, err);
        }
    if (f) dt_st_close(f);
    return rc;
}

static int read_dir(vt_list *l, const char *dir, dt_error *err) {
    char path[PATH_LEN];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (dt_hf_is_dir(dir) && access(path, F_OK) == 0) return read_file(l, path, err);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    char (*names)[256] = NULL;
    int n = 0, rc = dt_hf_index_shards(path, &names, &n, err);
    for (int k = 0; !rc && k < n; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        rc = read_file(l, path, err);
    }
    free(names);
    return rc;
}

int dt_vlmdir_load(dt_vlmrun *r, const dt_model *m, const dt_vlm *v, const char *dir, dt_error *err) {
    int rc = check_config(m, v, dir, err);
    if (rc) return rc;
    vt_list l = {0};
    if (!(rc = list_of(r, &l, err)) && !(rc = read_dir(&l, dir, err)))
        for (int i = 0; i < l.n && !rc; i++)
            if (!l.t[i].found)
                rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" (or \"%s\") is missing: not a checkpoint of the "
                               "planned model", dir, l.t[i].name[1], l.t[i].name[0]);
    free(l.t);
    return rc;
}

/* ---- writing ---- */

static cJSON *vision_config(const dt_vlm *v) {
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON_AddStringToObject(c, "model_type", "clip_vision_model");
    cJSON_AddStringToObject(c, "hidden_act", "quick_gelu");
    cJSON_AddNumberToObject(c, "hidden_size", (double)v->tower.hidden);
    cJSON_AddNumberToObject(c, "image_size", (double)v->tower.image_size);
    cJSON_AddNumberToObject(c, "patch_size", (double)v->tower.patch);
    cJSON_AddNumberToObject(c, "num_channels", (double)v->tower.channels);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)v->tower.n_layer);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)v->tower.n_head);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)v->tower.ffn);
    return c;
}

/* transformers' LlavaConfig: the text model's own config.json (dt_hf_config_text) as text_config */
static char *llava_config_text(const dt_model *m, const dt_vlm *v, int64_t tokens) {
    char *ttxt = dt_hf_config_text(m);
    cJSON *c = cJSON_CreateObject(), *tc = ttxt ? cJSON_Parse(ttxt) : NULL, *vc = vision_config(v);
    free(ttxt);
    char *out = NULL;
    if (c && tc && vc) {
        cJSON_DeleteItemFromObject(tc, "architectures");
        cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
        cJSON_AddItemToArray(arch, cJSON_CreateString("LlavaForConditionalGeneration"));
        cJSON_AddStringToObject(c, "model_type", "llava");
        cJSON_AddNumberToObject(c, "image_token_index", (double)v->image_token_index);
        cJSON_AddNumberToObject(c, "image_seq_length", (double)tokens);
        cJSON_AddStringToObject(c, "projector_hidden_act", "gelu");
        cJSON_AddBoolToObject(c, "multimodal_projector_bias", 1);
        cJSON_AddNumberToObject(c, "vision_feature_layer", (double)v->tower.select_layer);
        cJSON_AddStringToObject(c, "vision_feature_select_strategy", v->tower.keep_cls ? "full" : "default");
        cJSON_AddBoolToObject(c, "tie_word_embeddings", m->tied_embeddings);
        cJSON_AddItemToObject(c, "text_config", tc);
        cJSON_AddItemToObject(c, "vision_config", vc);
        tc = vc = NULL;
        out = dt_json_print(c);
    }
    cJSON_Delete(c);
    cJSON_Delete(tc);
    cJSON_Delete(vc);
    return out;
}

/* dir absent (created) or an empty directory */
static int fresh_dir(const char *dir, dt_error *err) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno != ENOENT) return dt_errorf(err, DT_EIO, "%s: %s", dir, strerror(errno));
        return dt_mkdirs(dir, err);
    }
    const struct dirent *e;
    int used = 0;
    while (!used && (e = readdir(d))) used = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    if (used)
        return dt_errorf(err, DT_EINVAL, "%s is not empty: the export writes into a new or empty directory (nothing "
                         "there is overwritten); name another", dir);
    return DT_OK;
}

/* the shard of each tensor (greedy in order, a new shard when the next would pass shard_bytes) */
static int shard_of(const vt_list *l, uint64_t shard_bytes, int *file) {
    int k = 0;
    uint64_t fill = 0;
    for (int i = 0; i < l->n; i++) {
        const uint64_t b = (uint64_t)l->t[i].numel * sizeof(float);
        if (fill > 0 && fill + b > shard_bytes) k++, fill = 0;
        file[i] = k;
        fill += b;
    }
    return k + 1;
}

static void shard_name(char *out, size_t n, int k, int nshards) {
    if (nshards == 1) snprintf(out, n, "model.safetensors");
    else snprintf(out, n, "model-%05d-of-%05d.safetensors", k + 1, nshards);
}

static int write_shard(const vt_list *l, const int *file, int k, const char *path, dt_error *err) {
    dt_st_writer *w = dt_st_writer_new();
    if (!w) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    int rc = dt_st_writer_meta(w, "format", "pt", err);
    for (int i = 0; !rc && i < l->n; i++)
        if (file[i] == k)
            rc = dt_st_writer_add(w, l->t[i].name[1], "F32", l->t[i].ndim, l->t[i].shape, l->t[i].data, err);
    if (!rc) rc = dt_st_write(w, path, err);
    dt_st_writer_free(w);
    return rc;
}

static int write_index(const vt_list *l, const int *file, int nshards, const char *dir, dt_error *err) {
    cJSON *c = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(c, "metadata"), *wm = cJSON_AddObjectToObject(c, "weight_map");
    uint64_t total = 0;
    char fname[64];
    for (int i = 0; i < l->n; i++) {
        total += (uint64_t)l->t[i].numel * sizeof(float);
        shard_name(fname, sizeof fname, file[i], nshards);
        cJSON_AddStringToObject(wm, l->t[i].name[1], fname);
    }
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    char *txt = dt_json_print(c), path[PATH_LEN];
    cJSON_Delete(c);
    if (!txt) return dt_errorf(err, DT_ENOMEM, "%s: out of memory for the index", dir);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    int rc = dt_write_file_atomic(path, txt, strlen(txt), err);
    free(txt);
    return rc;
}

int dt_vlmdir_save(dt_vlmrun *r, const dt_model *m, const dt_vlm *v, const char *dir, uint64_t shard_bytes,
                   dt_error *err) {
    vt_list l = {0};
    int rc = fresh_dir(dir, err);
    if (!rc) rc = list_of(r, &l, err);
    int *file = rc ? NULL : calloc((size_t)l.n, sizeof *file);
    if (!rc && !file) rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", dir);
    char path[PATH_LEN], fname[64];
    const int nshards = rc ? 0 : shard_of(&l, shard_bytes, file);
    for (int k = 0; !rc && k < nshards; k++) {
        shard_name(fname, sizeof fname, k, nshards);
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        rc = write_shard(&l, file, k, path, err);
    }
    if (!rc && nshards > 1) rc = write_index(&l, file, nshards, dir, err);
    if (!rc) {
        char *cfg = llava_config_text(m, v, dt_vit_tokens(dt_vlmrun_vit(r)));
        snprintf(path, sizeof path, "%s/config.json", dir);
        rc = cfg ? dt_write_file_atomic(path, cfg, strlen(cfg), err)
                 : dt_errorf(err, DT_ENOMEM, "%s: out of memory for config.json", dir);
        free(cfg);
    }
    free(file);
    free(l.t);
    return rc;
}
