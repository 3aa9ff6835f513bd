/* adapter_merge.c — dt_adapter_merge (dt_adapter.h): base + LoRA adapter -> a Hugging Face
 * model directory, as PEFT's merge_and_unload + transformers' save_pretrained give it.
 *
 * The arithmetic follows peft tuners/lora/layer.py (Linear.get_delta_weight, merge): delta =
 * transpose(B @ A, fan_in_fan_out) * scaling in fp32, then W += delta. Each delta element is
 * the r-term dot product as torch's CPU fp32 GEMM forms it — an fp32 accumulator from 0, one
 * fused multiply-add per k in order (measured: every element of the goldens' B @ A) — times
 * the fp32 scale, added to W in fp32 (each rounded, no contraction: CMakeLists.txt), rounded
 * once to the output dtype. tests/engine/test_adapter.c checks PEFT's merge bit for bit.
 * Sharding follows huggingface_hub split_torch_state_dict_into_shards (tensors in order, a new
 * shard when the next would pass max_shard_size) and its names model-0000k-of-0000n.safetensors. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "adapter_internal.h"
#include "dt_adapter.h"
#include "dt_dtype.h"
#include "dt_file.h"
#include "dt_hfdir.h"
#include "dt_json.h"
#include "dt_safetensors.h"

/* Rows of a tensor merged and written per block: at most this many output bytes. */
#define MERGE_BLOCK_BYTES ((size_t)32 << 20)
/* config.json and the other small files copied are read whole, up to this size each. */
#define COPY_MAX_BYTES ((uint64_t)1 << 30)

/* What happens to one output tensor: a base tensor, or (src NULL) one the adapter adds. */
typedef struct {
    const dt_hfw_entry *src;         /* the base tensor, or NULL: a SEQ_CLS adapter's score head */
    const dt_adapter_entry *a, *b;   /* LoRA pair on it, or NULL */
    const dt_adapter_entry *saved;   /* modules_to_save replacement (or the added tensor), or NULL */
    const char *name;
    int ndim;
    int64_t shape[2];
    int dropped;                     /* left out: a causal LM's lm_head under a SEQ_CLS adapter */
    dt_dtype out;
    int shard;
} merge_item;

typedef struct {
    dt_hfw *base;
    dt_adapter *ad;
    merge_item *items;
    int n, nshards;
    float scale;
    int fif;                       /* fan_in_fan_out: W is [in, out] */
    int64_t to_cls;                /* > 0: the output is a sequence classifier of this many labels */
} merge_job;

/* The causal LM's head a sequence classifier does not have (transformers' LlamaForCausalLM). */
#define MERGE_LM_HEAD "lm_head.weight"

/* The adapter's score head as a new output tensor, the causal LM's lm_head left out. */
static void add_score_head(merge_job *j, const dt_adapter_entry *e, int out_dtype) {
    merge_item *it = &j->items[j->n++];
    dt_dtype sd = DT_DTYPE_FP32;
    dt_st_dtype_parse(e->dtype, &sd);
    *it = (merge_item){.saved = e, .name = e->name, .ndim = e->ndim, .shape = {e->shape[0], e->shape[1]},
                       .out = out_dtype >= 0 ? (dt_dtype)out_dtype : sd};
    for (int i = 0; i < j->n - 1; i++) j->items[i].dropped |= !strcmp(j->items[i].name, MERGE_LM_HEAD);
    j->to_cls = e->shape[0];
}

/* Pairs every adapter tensor with its base tensor; shapes checked. */
static int match(merge_job *j, const char *hfdir, const char *adir, int out_dtype, dt_error *err) {
    char key[DT_ST_NAME_MAX + 32];
    for (int i = 0; i < j->n; i++) {
        merge_item *it = &j->items[i];
        it->src = &j->base->in_order[i];
        dt_dtype sd;
        if (dt_st_dtype_parse(it->src->t->dtype, &sd))
            return dt_errorf(err, DT_EINVAL, "%s: tensor '%s' is %s: merge reads F32 / BF16 / F16 weights", hfdir,
                             it->src->t->name, it->src->t->dtype);
        it->out = out_dtype >= 0 ? (dt_dtype)out_dtype : sd;
        it->name = it->src->t->name;
        it->ndim = it->src->t->ndim;
        it->shape[0] = it->src->t->shape[0];
        it->shape[1] = it->src->t->ndim > 1 ? it->src->t->shape[1] : 1;
    }
    /* dt_adapter_check_hfw passed: every adapter tensor has its base tensor, shapes agree */
    for (int k = 0; k < dt_adapter_count(j->ad); k++) {
        const dt_adapter_entry *e = dt_adapter_get(j->ad, k);
        if (e->kind == DT_ADAPTER_LORA_B) continue;
        const dt_hfw_entry *be = dt_adapter_base_find(j->ad, e, j->base, key, sizeof key);
        if (!be && dt_adapter_is_score_head(j->ad, e)) {
            add_score_head(j, e, out_dtype);
            continue;
        }
        merge_item *it = NULL;
        for (int i = 0; be && i < j->n; i++)
            if (j->items[i].src && j->items[i].src->t == be->t) it = &j->items[i];
        if (!it) return dt_errorf(err, DT_EINTERNAL, "%s: '%s' lost its base tensor after the check", adir, e->name);
        if (e->kind == DT_ADAPTER_SAVED) {
            it->saved = e;
            continue;
        }
        char bname[DT_ST_NAME_MAX + 16];
        snprintf(bname, sizeof bname, "%s.lora_B.weight", e->module);
        it->a = e;
        it->b = dt_adapter_find(j->ad, bname);
    }
    return DT_OK;
}

static uint64_t item_numel(const merge_item *it) { return (uint64_t)it->shape[0] * (uint64_t)it->shape[1]; }

static uint64_t out_bytes(const merge_item *it) {
    return item_numel(it) * (uint64_t)dt_st_dtype_bytes(dt_st_dtype_name(it->out));
}

/* huggingface_hub's rule: a new shard when the next tensor would pass max (a tensor larger
 * than max gets a shard of its own). */
static void assign_shards(merge_job *j, int64_t max) {
    uint64_t cur = 0;
    int s = 0;
    for (int i = 0; i < j->n; i++) {
        if (j->items[i].dropped) continue;
        uint64_t b = out_bytes(&j->items[i]);
        if (cur > 0 && cur + b > (uint64_t)max) s++, cur = 0;
        j->items[i].shard = s;
        cur += b;
    }
    j->nshards = j->n ? s + 1 : 0;
}

static void shard_name(const merge_job *j, int s, char *buf, size_t n) {
    if (j->nshards == 1) snprintf(buf, n, "%s", DT_HFW_SINGLE_FILE);
    else snprintf(buf, n, "model-%05d-of-%05d.safetensors", s + 1, j->nshards);
}

static void to_f32(const void *src, dt_dtype t, size_t n, float *dst) {
    if (t == DT_DTYPE_FP32) memcpy(dst, src, n * sizeof *dst);
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = t == DT_DTYPE_BF16 ? dt_bf16_to_f32(((const uint16_t *)src)[i])
                                        : dt_fp16_to_f32(((const uint16_t *)src)[i]);
}

static void from_f32(const float *src, dt_dtype t, size_t n, void *dst) {
    if (t == DT_DTYPE_FP32) memcpy(dst, src, n * sizeof *src);
    else
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = t == DT_DTYPE_BF16 ? dt_f32_to_bf16(src[i]) : dt_f32_to_fp16(src[i]);
}

/* rows [r0, r0 + nr) of W (cols elements each, fp32 in w) += scale * delta. A [r, in], B [out, r]. */
static void add_delta(const merge_job *j, const float *A, const float *B, int64_t r, int64_t r0, int64_t nr,
                      int64_t cols, int64_t in, float *w) {
    for (int64_t i = 0; i < nr; i++)
        for (int64_t c = 0; c < cols; c++) {
            /* Linear W [out, in]: row = out index o, col = in index; Conv1D W [in, out]: the transpose */
            int64_t o = j->fif ? c : r0 + i, x = j->fif ? r0 + i : c;
            /* fp32, fused multiply-add in k order from 0: what torch's CPU fp32 GEMM computes
             * for B @ A (bit for bit on the goldens); then * scale and + W, each rounded */
            float s = 0.0f;
            for (int64_t k = 0; k < r; k++) s = fmaf(B[o * r + k], A[k * in + x], s);
            float d = s * j->scale;
            w[i * cols + c] += d;
        }
}

/* One tensor: rows in blocks, merged, converted, put into the stream. */
static int put_tensor(const merge_job *j, const merge_item *it, const char *hfdir, dt_st_stream *s, float *A,
                      float *B, float *wf, void *wo, size_t block_rows, dt_error *err) {
    const dt_st_tensor *t = it->src ? it->src->t : NULL;
    const dt_adapter_entry *src_e = it->saved;
    dt_dtype sd;
    dt_st_dtype_parse(src_e ? src_e->dtype : t->dtype, &sd);
    const unsigned char *src = src_e ? src_e->data : dt_st_data(j->base->files[it->src->file], t);
    int64_t rows = it->shape[0], cols = it->shape[1];
    size_t ib = (size_t)dt_st_dtype_bytes(src_e ? src_e->dtype : t->dtype);
    size_t ob = (size_t)dt_st_dtype_bytes(dt_st_dtype_name(it->out));
    int64_t r = 0, in = 0;
    if (it->a) {
        dt_adapter_entry_f32(it->a, A);
        dt_adapter_entry_f32(it->b, B);
        r = it->a->shape[0];
        in = it->a->shape[1];
    }
    for (int64_t r0 = 0; r0 < rows; r0 += (int64_t)block_rows) {
        int64_t nr = rows - r0 < (int64_t)block_rows ? rows - r0 : (int64_t)block_rows;
        size_t ne = (size_t)nr * (size_t)cols;
        const unsigned char *p = src + (size_t)r0 * (size_t)cols * ib;
        to_f32(p, sd, ne, wf);
        if (!src_e) dt_map_release(p, ne * ib);
        if (it->a) add_delta(j, A, B, r, r0, nr, cols, in, wf);
        from_f32(wf, it->out, ne, wo);
        if (dt_st_stream_put(s, it->name, (uint64_t)r0 * (uint64_t)cols * ob, wo, ne * ob, err))
            return dt_error_prefix(err, "merging %s's '%s'", hfdir, it->name);
    }
    return DT_OK;
}

static int write_shard(const merge_job *j, int sh, const char *hfdir, const char *tmp, float *A, float *B, float *wf,
                       void *wo, size_t block_elems, dt_error *err) {
    char name[64], path[DT_HFW_PATH_MAX];
    shard_name(j, sh, name, sizeof name);
    if (dt_path_join(path, sizeof path, tmp, name, err)) return err->code;
    dt_st_writer *w = dt_st_writer_new();
    if (!w) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    int rc = dt_st_writer_meta(w, "format", "pt", err);   /* what transformers writes */
    for (int i = 0; !rc && i < j->n; i++) {
        const merge_item *it = &j->items[i];
        if (it->shard == sh && !it->dropped)
            rc = dt_st_writer_add(w, it->name, dt_st_dtype_name(it->out), it->ndim, it->shape, NULL, err);
    }
    dt_st_stream *s = NULL;
    if (!rc) rc = dt_st_stream_open(w, path, &s, err);
    for (int i = 0; !rc && i < j->n; i++) {
        const merge_item *it = &j->items[i];
        if (it->shard != sh || it->dropped) continue;
        size_t br = block_elems / (size_t)it->shape[1];
        rc = put_tensor(j, it, hfdir, s, A, B, wf, wo, br ? br : 1, err);
    }
    if (s) {
        if (rc) dt_st_stream_abort(s);
        else rc = dt_st_stream_close(s, err);
    }
    dt_st_writer_free(w);
    return rc;
}

static int cmp_item_name(const void *x, const void *y) {
    return strcmp((*(const merge_item *const *)x)->name, (*(const merge_item *const *)y)->name);
}

/* model.safetensors.index.json as transformers 5 writes it. */
static int write_index(const merge_job *j, const char *tmp, dt_error *err) {
    uint64_t total = 0, params = 0;
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject(), *map = cJSON_CreateObject();
    if (!root || !meta || !map) {
        cJSON_Delete(root), cJSON_Delete(meta), cJSON_Delete(map);
        return dt_errorf(err, DT_ENOMEM, "index: out of memory");
    }
    const merge_item **by_name = malloc(((size_t)j->n + 1) * sizeof *by_name);
    int nk = 0;
    for (int i = 0; by_name && i < j->n; i++) {
        if (j->items[i].dropped) continue;
        total += out_bytes(&j->items[i]), params += item_numel(&j->items[i]);
        by_name[nk++] = &j->items[i];
    }
    cJSON_AddNumberToObject(meta, "total_parameters", (double)params);
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON_AddItemToObject(root, "metadata", meta);
    if (by_name) qsort(by_name, (size_t)nk, sizeof *by_name, cmp_item_name);   /* as transformers sorts the weight_map */
    for (int k = 0; k < nk; k++) {
        char name[64];
        shard_name(j, by_name[k]->shard, name, sizeof name);
        cJSON_AddStringToObject(map, by_name[k]->name, name);
    }
    const int oom = !by_name;
    free(by_name);
    if (oom) {
        cJSON_Delete(root), cJSON_Delete(map);
        return dt_errorf(err, DT_ENOMEM, "index: out of memory");
    }
    cJSON_AddItemToObject(root, "weight_map", map);
    char *text = dt_json_print(root), path[DT_HFW_PATH_MAX];
    cJSON_Delete(root);
    if (!text) return dt_errorf(err, DT_ENOMEM, "index: out of memory");
    int rc = dt_path_join(path, sizeof path, tmp, DT_HFW_INDEX_FILE, err);
    if (!rc) rc = dt_json_write_file_atomic(path, text, err);
    free(text);
    return rc;
}

/* Weight files of any format are not copied (the merged safetensors replace them). */
static int is_weight_file(const char *n) {
    const char *ext[] = {".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt", ".gguf"};
    size_t ln = strlen(n);
    if (!strcmp(n, DT_HFW_INDEX_FILE) || !strcmp(n, "pytorch_model.bin.index.json")) return 1;
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
        size_t le = strlen(ext[i]);
        if (ln > le && !strcmp(n + ln - le, ext[i])) return 1;
    }
    return 0;
}

/* A causal LM's config.json made a sequence classifier's of n labels, as transformers'
 * AutoModelForSequenceClassification.save_pretrained writes it: architectures
 * "<Family>ForSequenceClassification", id2label / label2id LABEL_i (PretrainedConfig's default). */
static int config_to_cls(cJSON *root, int64_t n, const char *src, dt_error *err) {
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_GetArrayItem(arch, 0);
    const char *name = cJSON_IsString(a0) ? a0->valuestring : "";
    const char *suffix = "ForCausalLM";
    size_t ln = strlen(name), ls = strlen(suffix);
    if (ln <= ls || strcmp(name + ln - ls, suffix))
        return dt_errorf(err, DT_EINVAL, "%s: architectures is not a *ForCausalLM model: a SEQ_CLS adapter (a reward "
                         "model's score head) merges into a causal LM or a sequence classifier", src);
    char cls[256];
    snprintf(cls, sizeof cls, "%.*sForSequenceClassification", (int)(ln - ls), name);
    cJSON *na = cJSON_CreateArray();
    cJSON_AddItemToArray(na, cJSON_CreateString(cls));
    cJSON_ReplaceItemInObjectCaseSensitive(root, "architectures", na);
    cJSON *id2 = cJSON_CreateObject(), *l2id = cJSON_CreateObject();
    for (int64_t i = 0; i < n; i++) {
        char k[32], v[32];
        snprintf(k, sizeof k, "%lld", (long long)i);
        snprintf(v, sizeof v, "LABEL_%lld", (long long)i);
        cJSON_AddStringToObject(id2, k, v);
        cJSON_AddNumberToObject(l2id, v, (double)i);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "id2label");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "label2id");
    cJSON_AddItemToObject(root, "id2label", id2);
    cJSON_AddItemToObject(root, "label2id", l2id);
    return DT_OK;
}

/* config.json with its dtype set to the output's (transformers 5 "dtype"; 4.x "torch_dtype");
 * to_cls > 0: a sequence classifier's of that many labels (config_to_cls). */
static int copy_config(const char *src, const char *dst, int out_dtype, int64_t to_cls, dt_error *err) {
    char *text = NULL;
    size_t len = 0;
    if (dt_file_read(src, "config.json", COPY_MAX_BYTES, &text, &len, err)) return err->code;
    if (out_dtype < 0 && to_cls < 1) {
        int rc = dt_write_file_atomic(dst, text, len, err);
        free(text);
        return rc;
    }
    cJSON *root = NULL;
    int rc = dt_json_parse(text, src, &root, err);
    free(text);
    if (!rc && to_cls > 0) rc = config_to_cls(root, to_cls, src, err);
    if (rc) {
        cJSON_Delete(root);
        return rc;
    }
    const char *name = out_dtype < 0 ? NULL : out_dtype == DT_DTYPE_FP32 ? "float32" : out_dtype == DT_DTYPE_BF16 ? "bfloat16" : "float16";
    const char *keys[] = {"dtype", "torch_dtype"};
    int set = 0;
    for (int k = 0; name && k < 2; k++)
        if (cJSON_GetObjectItemCaseSensitive(root, keys[k]))
            cJSON_ReplaceItemInObjectCaseSensitive(root, keys[k], cJSON_CreateString(name)), set = 1;
    if (name && !set) cJSON_AddStringToObject(root, "dtype", name);
    char *out = dt_json_print(root);
    cJSON_Delete(root);
    if (!out) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", src);
    rc = dt_json_write_file_atomic(dst, out, err);
    free(out);
    return rc;
}

/* Every regular non-weight file of hfdir (config.json, tokenizer files, generation_config.json,
 * chat templates): a FIFO or device there is refused, subdirectories are not copied. */
static int copy_files(const char *hfdir, const char *tmp, int out_dtype, int64_t to_cls, dt_error *err) {
    DIR *d = opendir(hfdir);
    if (!d) return dt_errorf(err, DT_EINVAL, "%s: cannot open: %s", hfdir, strerror(errno));
    char src[DT_HFW_PATH_MAX], dst[DT_HFW_PATH_MAX];
    int rc = DT_OK, have_config = 0;
    struct stat st;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (e->d_name[0] == '.' || is_weight_file(e->d_name)) continue;
        if ((rc = dt_path_join(src, sizeof src, hfdir, e->d_name, err)) ||
            (rc = dt_path_join(dst, sizeof dst, tmp, e->d_name, err)))
            break;
        if (lstat(src, &st) || S_ISDIR(st.st_mode)) continue;
        if (!strcmp(e->d_name, "config.json")) {
            have_config = 1;
            rc = copy_config(src, dst, out_dtype, to_cls, err);
            continue;
        }
        char *buf = NULL;
        size_t len = 0;
        rc = dt_file_read(src, "model file to copy", COPY_MAX_BYTES, &buf, &len, err);
        if (!rc) rc = dt_write_file_atomic(dst, buf, len, err);
        free(buf);
    }
    closedir(d);
    if (!rc && !have_config)
        rc = dt_errorf(err, DT_EINVAL, "%s: no config.json: give a Hugging Face model directory", hfdir);
    return rc;
}

static int write_all(merge_job *j, const char *hfdir, const char *tmp, int out_dtype, dt_error *err) {
    /* buffers: the largest A and B in fp32, a row block in fp32 and in the output dtype */
    size_t amax = 1, bmax = 1, cmax = 1;
    for (int i = 0; i < j->n; i++) {
        const merge_item *it = &j->items[i];
        size_t cols = (size_t)it->shape[1];
        if (cols > cmax) cmax = cols;
        if (!it->a) continue;
        size_t na = (size_t)(it->a->shape[0] * it->a->shape[1]), nb = (size_t)(it->b->shape[0] * it->b->shape[1]);
        if (na > amax) amax = na;
        if (nb > bmax) bmax = nb;
    }
    size_t block = MERGE_BLOCK_BYTES / sizeof(float);
    if (block < cmax) block = cmax;   /* at least one row */
    float *A = malloc(amax * sizeof *A), *B = malloc(bmax * sizeof *B), *wf = malloc(block * sizeof *wf);
    void *wo = malloc(block * sizeof(float));
    int rc = A && B && wf && wo ? DT_OK : dt_errorf(err, DT_ENOMEM, "merge: out of memory for the row buffers");
    for (int sh = 0; !rc && sh < j->nshards; sh++) rc = write_shard(j, sh, hfdir, tmp, A, B, wf, wo, block, err);
    if (!rc && j->nshards > 1) rc = write_index(j, tmp, err);
    if (!rc) rc = copy_files(hfdir, tmp, out_dtype, j->to_cls, err);
    free(A), free(B), free(wf), free(wo);
    return rc;
}

int dt_adapter_merge(const char *hfdir, const char *adir, const char *out, const dt_merge_opts *o, dt_error *err) {
    merge_job j = {0};
    struct stat st;
    if (stat(hfdir, &st) || !S_ISDIR(st.st_mode))
        return dt_errorf(err, DT_EINVAL, "%s: %s: give --base a Hugging Face model directory", hfdir,
                         errno == ENOENT ? "does not exist" : "not a directory");
    if (o->max_shard_bytes < 1) return dt_errorf(err, DT_EINVAL, "--max-shard-size must be > 0 (e.g. 5GB)");
    int rc = dt_adapter_read(adir, &j.ad, err);
    if (!rc) rc = dt_hfw_open(hfdir, &j.base, err);
    if (!rc) {
        j.n = j.base->n;
        j.fif = dt_adapter_cfg(j.ad)->family == DT_FAMILY_GPT2;
        j.scale = (float)dt_adapter_scale(j.ad);   /* peft: tensor * python float -> fp32 multiply */
        j.items = calloc((size_t)j.n + 1, sizeof *j.items);
        if (!j.items) rc = dt_errorf(err, DT_ENOMEM, "merge: out of memory");
    }
    if (!rc) rc = dt_adapter_check_hfw(j.ad, j.base, hfdir, err);
    if (!rc) rc = match(&j, hfdir, adir, o->out_dtype, err);
    char tmp[DT_HFW_PATH_MAX];
    if (!rc) rc = dt_outdir_begin(out, "-o", tmp, sizeof tmp, err);
    if (!rc) {
        assign_shards(&j, o->max_shard_bytes);
        rc = write_all(&j, hfdir, tmp, o->out_dtype, err);
        if (!rc) rc = dt_outdir_commit(tmp, out, err);
        if (rc) dt_outdir_abort(tmp);
    }
    free(j.items);
    dt_hfw_close(j.base);
    dt_adapter_free(j.ad);
    return rc;
}
