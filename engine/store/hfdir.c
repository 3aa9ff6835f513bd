/* hfdir.c — see dt_hfdir.h. */
#include "dt_hfdir.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dt_dtype.h"
#include "dt_json.h"
#include "dt_safetensors.h"
#include "dt_zero.h"

/* GPT-2's <|endoftext|> id in its 50257-token BPE vocabulary (HF GPT2Config). */
#define DT_GPT2_EOT_TOKEN 50256
#define DT_HF_INDEX_FILE "model.safetensors.index.json"
#define DT_HF_SINGLE_FILE "model.safetensors"
#define DT_HF_PATH_MAX 4096
/* An unaligned tensor (a file whose writer did not align its offsets) is
 * converted through an aligned copy of at most this many elements at a time. */
#define DT_HF_UNALIGNED_CHUNK ((size_t)1 << 20)

/* ---- config.json ---- */

static void gpt2_config(cJSON *c, const dt_model *m) {
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(c, "model_type", "gpt2");
    /* GPT-2's tanh-approximated GELU, what the engine computes */
    cJSON_AddStringToObject(c, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(c, "vocab_size", (double)m->vocab);
    cJSON_AddNumberToObject(c, "n_positions", (double)m->max_pos);
    cJSON_AddNumberToObject(c, "n_ctx", (double)m->max_pos);
    cJSON_AddNumberToObject(c, "n_embd", (double)m->hidden);
    cJSON_AddNumberToObject(c, "n_layer", (double)m->n_layer);
    cJSON_AddNumberToObject(c, "n_head", (double)m->n_head);
    cJSON_AddNumberToObject(c, "n_inner", (double)m->ffn);
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", m->norm_eps);
    cJSON_AddNumberToObject(c, "attn_pdrop", 0.0);
    cJSON_AddNumberToObject(c, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(c, "resid_pdrop", 0.0);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 1);
    /* GPT2Config defaults both to 50256 (<|endoftext|>); a smaller vocabulary (the
     * byte tokenizer's 256) has no such token, so say so instead of inheriting it. */
    if (m->vocab > DT_GPT2_EOT_TOKEN) {
        cJSON_AddNumberToObject(c, "bos_token_id", DT_GPT2_EOT_TOKEN);
        cJSON_AddNumberToObject(c, "eos_token_id", DT_GPT2_EOT_TOKEN);
    } else {
        cJSON_AddNullToObject(c, "bos_token_id");
        cJSON_AddNullToObject(c, "eos_token_id");
    }
}

/* A sequence classifier's keys (transformers PretrainedConfig: num_labels is the length of
 * id2label, LABEL_i by default; the score is read at the last token that is not pad_token_id). */
static void seq_cls_config(cJSON *c, const dt_model *m) {
    cJSON *id2 = cJSON_AddObjectToObject(c, "id2label"), *l2id = cJSON_AddObjectToObject(c, "label2id");
    for (int64_t i = 0; i < m->num_labels; i++) {
        char k[32], v[32];
        snprintf(k, sizeof k, "%lld", (long long)i);
        snprintf(v, sizeof v, "LABEL_%lld", (long long)i);
        cJSON_AddStringToObject(id2, k, v);
        cJSON_AddNumberToObject(l2id, v, (double)i);
    }
    cJSON_AddNumberToObject(c, "pad_token_id", (double)m->pad_token_id);
}

/* LlamaConfig / Qwen2Config / Qwen3Config keys (transformers models/<type>/configuration_<type>.py);
 * rope scaling in the "rope_scaling" spelling every transformers version reads. */
static void llama_config(cJSON *c, const dt_model *m) {
    const char *type = m->qk_norm ? "qwen3" : m->qkv_bias ? "qwen2" : "llama";
    const char *family = m->qk_norm ? "Qwen3" : m->qkv_bias ? "Qwen2" : "Llama";
    char cls[64];
    snprintf(cls, sizeof cls, "%sFor%s", family, m->num_labels > 0 ? "SequenceClassification" : "CausalLM");
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(cls));
    if (m->num_labels > 0) seq_cls_config(c, m);
    cJSON_AddStringToObject(c, "model_type", type);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddNumberToObject(c, "vocab_size", (double)m->vocab);
    cJSON_AddNumberToObject(c, "max_position_embeddings", (double)m->max_pos);
    cJSON_AddNumberToObject(c, "hidden_size", (double)m->hidden);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)m->ffn);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)m->n_layer);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)m->n_head);
    cJSON_AddNumberToObject(c, "num_key_value_heads", (double)m->n_kv_head);
    cJSON_AddNumberToObject(c, "head_dim", (double)m->head_dim);
    cJSON_AddNumberToObject(c, "rms_norm_eps", m->norm_eps);
    cJSON_AddNumberToObject(c, "rope_theta", m->rope_theta);
    const dt_rope_scaling *rs = &m->rope_scaling;
    if (rs->type != DT_ROPE_DEFAULT) {
        cJSON *r = cJSON_AddObjectToObject(c, "rope_scaling");
        cJSON_AddStringToObject(r, "rope_type", dt_rope_type_name(rs->type));
        cJSON_AddNumberToObject(r, "factor", rs->factor);
        if (rs->type == DT_ROPE_LLAMA3) {
            cJSON_AddNumberToObject(r, "low_freq_factor", rs->low_freq_factor);
            cJSON_AddNumberToObject(r, "high_freq_factor", rs->high_freq_factor);
        }
        if (rs->original_max_pos > 0)
            cJSON_AddNumberToObject(r, "original_max_position_embeddings", (double)rs->original_max_pos);
    }
    if (!strcmp(type, "llama")) {
        cJSON_AddBoolToObject(c, "attention_bias", 0);
        cJSON_AddBoolToObject(c, "mlp_bias", 0);
    }
    if (strcmp(type, "llama")) cJSON_AddBoolToObject(c, "use_sliding_window", 0);
    cJSON_AddNumberToObject(c, "attention_dropout", 0.0);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", m->tied_embeddings);
    cJSON_AddNullToObject(c, "bos_token_id");
    cJSON_AddNullToObject(c, "eos_token_id");
}

char *dt_hf_config_text(const dt_model *m) {
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    if (m->family == DT_FAMILY_LLAMA) llama_config(c, m);
    else gpt2_config(c, m);
    char *txt = dt_json_print(c);
    cJSON_Delete(c);
    return txt;
}

int dt_hf_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The tokenizer files of a model directory, in the order they are looked for
 * (transformers' tokenizer_file / SentencePiece's vocab_file names). */
static const char *const k_tokenizer_files[] = {"tokenizer.json", "tokenizer.model"};

int dt_hf_tokenizer_fingerprint(const char *dir, unsigned char fp[DT_TOK_FINGERPRINT_BYTES], char *path, size_t n,
                                int *found, dt_error *err) {
    *found = 0;
    int rc = DT_OK;
    for (size_t i = 0; i < sizeof k_tokenizer_files / sizeof k_tokenizer_files[0]; i++) {
        char p[DT_HF_PATH_MAX];
        struct stat st;
        dt_error e;
        dt_error_clear(&e);
        snprintf(p, sizeof p, "%s/%s", dir, k_tokenizer_files[i]);
        if (stat(p, &st) != 0) continue;
        dt_tokenizer *t = NULL;
        if (dt_tok_load(p, &t, &e)) {   /* e.g. Llama-2's byte-fallback tokenizer.json: try tokenizer.model */
            if (!rc) rc = dt_errorf(err, e.code, "%s", e.msg);
            continue;
        }
        dt_tok_fingerprint(t, fp);
        dt_tok_free(t);
        snprintf(path, n, "%s", p);
        *found = 1;
        return DT_OK;
    }
    return rc;
}

/* The shape fields and options two descriptions must share to be one model. */
static int same_model(const dt_model *a, const dt_model *b) {
    return a->family == b->family && a->n_layer == b->n_layer && a->hidden == b->hidden &&
           a->n_head == b->n_head && a->n_kv_head == b->n_kv_head && a->head_dim == b->head_dim &&
           a->ffn == b->ffn && a->vocab == b->vocab && a->max_pos == b->max_pos &&
           a->tied_embeddings == b->tied_embeddings && a->qkv_bias == b->qkv_bias && a->qk_norm == b->qk_norm;
}

static void shape_text(const dt_model *m, char *buf, size_t n) {
    snprintf(buf, n, "%s L=%lld C=%lld heads=%lld/%lld head_dim=%lld ffn=%lld V=%lld T=%lld%s%s%s",
             dt_family_name(m->family), (long long)m->n_layer, (long long)m->hidden, (long long)m->n_head,
             (long long)m->n_kv_head, (long long)m->head_dim, (long long)m->ffn, (long long)m->vocab,
             (long long)m->max_pos, m->family == DT_FAMILY_LLAMA && m->tied_embeddings ? " tied" : "",
             m->qkv_bias && m->family == DT_FAMILY_LLAMA ? " qkv-bias" : "", m->qk_norm ? " qk-norm" : "");
}

int dt_hf_check_config(const char *dir, const dt_model *m, const char *what, dt_error *err) {
    char p[DT_HF_PATH_MAX], *txt = NULL;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (dt_json_read_file(p, &txt, NULL, err)) return err->code;
    dt_model cm;
    int rc = dt_model_from_config_json(txt, p, &cm, err);
    free(txt);
    if (rc) return rc;
    if (same_model(&cm, m)) return DT_OK;
    char a[256], b[256];
    shape_text(&cm, a, sizeof a);
    shape_text(m, b, sizeof b);
    return dt_errorf(err, DT_EINVAL, "%s: %s's model (%s) is not the plan's (%s)", p, what, a, b);
}

/* ---- weights ---- */

void dt_map_release(const void *p, size_t len) {
    if (!p || !len) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p / page * page, e = ((uintptr_t)p + len + page - 1) / page * page;
    /* a read-only private file mapping: the pages leave this process's page
     * tables (and its RSS) and stay in the page cache; a later read faults them
     * back in (madvise(2), MADV_DONTNEED) */
    (void)madvise((void *)a, e - a, MADV_DONTNEED);
}

/* Converts n elements into dst (dtype dt) from possibly unaligned src, through a
 * bounded aligned copy when src is unaligned. */
static int convert_in(void *dst, dt_dtype dt, const void *src, dt_dtype st, size_t n) {
    size_t es = (size_t)dt_dtype_size(st), ds = (size_t)dt_dtype_size(dt);
    if (((uintptr_t)src % es) == 0) {
        dt_convert(dst, dt, src, st, n);
        return DT_OK;
    }
    size_t chunk = n < DT_HF_UNALIGNED_CHUNK ? n : DT_HF_UNALIGNED_CHUNK;
    void *tmp = malloc(chunk * es);
    if (!tmp) return DT_ENOMEM;
    for (size_t i = 0; i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        memcpy(tmp, (const char *)src + i * es, k * es);
        dt_convert((char *)dst + i * ds, dt, tmp, st, k);
    }
    free(tmp);
    return DT_OK;
}

static int shape_matches(const dt_st_tensor *s, const dt_tensor_info *t) {
    if (s->ndim != t->ndim) return 0;
    for (int d = 0; d < t->ndim; d++)
        if (s->shape[d] != t->shape[d]) return 0;
    return 1;
}

/* A tensor of g found in an open file: its dtype must be one the engine reads
 * and its shape the model's. */
static int check_tensor(const dt_tensor_info *t, const dt_st_tensor *s, dt_dtype *sdt, const char *path,
                        dt_error *err) {
    if (dt_st_dtype_parse(s->dtype, sdt))
        return dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" has dtype %s (F32, BF16 or F16 expected)", path,
                         s->name, s->dtype);
    if (!shape_matches(s, t))
        return dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" has shape [%lld%s%lld] but the model needs [%lld%s%lld]",
                         path, s->name, (long long)s->shape[0], s->ndim > 1 ? ", " : "",
                         s->ndim > 1 ? (long long)s->shape[1] : 0LL, (long long)t->shape[0], t->ndim > 1 ? ", " : "",
                         t->ndim > 1 ? (long long)t->shape[1] : 0LL);
    return DT_OK;
}

static const dt_st_tensor *find_in(const dt_st_file *f, const dt_lm *g, const dt_tensor_info *t) {
    char name[DT_ST_NAME_MAX];
    snprintf(name, sizeof name, "%s%s", dt_lm_hf_prefix(g), t->name);
    const dt_st_tensor *s = dt_st_find(f, name);
    return s ? s : dt_st_find(f, t->name);
}

/* A shard name from the index: a plain file name inside the directory. */
static int shard_name_ok(const char *s) {
    return s[0] && s[0] != '.' && !strchr(s, '/') && strlen(s) < 256;
}

int dt_hf_index_shards(const char *ipath, char (**names)[256], int *n, dt_error *err) {
    char *txt = NULL;
    if (dt_json_read_file(ipath, &txt, NULL, err)) return err->code;
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return dt_errorf(err, DT_EINVAL, "%s: no \"weight_map\" object (not a safetensors index)", ipath);
    }
    int cap = cJSON_GetArraySize(wm), cnt = 0, rc = DT_OK;
    char (*list)[256] = calloc((size_t)(cap > 0 ? cap : 1), sizeof *list);
    if (!list) {
        cJSON_Delete(root);
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory", ipath);
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e) || !shard_name_ok(e->valuestring)) {
            rc = dt_errorf(err, DT_EINVAL, "%s: weight_map[\"%s\"] is not a shard file name in the directory", ipath,
                           e->string);
            break;
        }
        int dup = 0;
        for (int k = 0; k < cnt && !dup; k++) dup = !strcmp(list[k], e->valuestring);
        if (!dup) snprintf(list[cnt++], sizeof list[0], "%s", e->valuestring);
    }
    cJSON_Delete(root);
    if (rc) {
        free(list);
        return rc;
    }
    *names = list;
    *n = cnt;
    return DT_OK;
}

/* ---- a source of the parameters, read by flat element range ---- */

struct dt_hf_src {
    const dt_lm *g;
    int set;                        /* which of g's parameter sets it reads (DT_LM_SET_*) */
    char dir[DT_HF_PATH_MAX];       /* the directory of the files ("" for one file given by path) */
    char (*names)[256];             /* the files: shard names in dir, or the one file's path in path */
    char path[DT_HF_PATH_MAX];
    int nfiles;
    int *file_of;                   /* [tensors] the file that holds tensor i */
    dt_dtype *sdt;                  /* [tensors] its dtype there */
    const dt_st_tensor **st;        /* [tensors] its entry in the open file (valid while cur = file_of) */
    int cur;                        /* the file mapped now, -1 none */
    dt_st_file *f;
    /* drawn: LoRA adapters (DT_TENSOR_ADAPTER) and a sequence classifier's score the files
     * lack are not required; their elements are drawn from seed by the model's init rule
     * (dt_lm_init_slice) */
    int drawn;
    uint64_t seed;
};

/* Tensor i of the set is an adapter, or a sequence classifier's new head (a causal LM
 * directory has no "score.weight"), that the source draws (the files lack it). */
static int src_drawn(const dt_hf_src *s, int i, const dt_tensor_info *t) {
    return s->drawn && ((t->flags & DT_TENSOR_ADAPTER) || !strcmp(t->name, DT_LM_SCORE_HEAD ".weight")) &&
           s->file_of[i] < 0;
}

/* the tensors of the set s reads */
static int src_ntensors(const dt_hf_src *s) {
    if (s->set == DT_LM_SET_QUANT) return dt_lm_num_quant_tensors(s->g);
    return s->set == DT_LM_SET_BASE ? dt_lm_num_base_tensors(s->g) : dt_lm_num_tensors(s->g);
}
static const dt_tensor_info *src_tensor(const dt_hf_src *s, int i) {
    if (s->set == DT_LM_SET_QUANT) return dt_lm_quant_tensor(s->g, i);
    return s->set == DT_LM_SET_BASE ? dt_lm_base_tensor(s->g, i) : dt_lm_tensor(s->g, i);
}

static void file_path(const dt_hf_src *s, int k, char *p, size_t n) {
    if (s->names) snprintf(p, n, "%s/%s", s->dir, s->names[k]);
    else snprintf(p, n, "%s", s->path);
}

/* Maps file k (unmapping the one before) and points st at its entries. */
static int src_switch(dt_hf_src *s, int k, dt_error *err) {
    if (s->cur == k) return DT_OK;
    dt_st_close(s->f);
    s->f = NULL;
    s->cur = -1;
    char p[DT_HF_PATH_MAX + 260];
    file_path(s, k, p, sizeof p);
    if (dt_st_open(p, &s->f, err)) return err->code;
    s->cur = k;
    for (int i = 0; i < src_ntensors(s); i++)
        s->st[i] = s->file_of[i] == k ? find_in(s->f, s->g, src_tensor(s, i)) : NULL;
    return DT_OK;
}

/* Checks file k: the model's tensors it holds (dtype, shape, none also in an
 * earlier file) are recorded as its; all: every tensor must be there. */
static int src_scan(dt_hf_src *s, int k, int all, dt_error *err) {
    char p[DT_HF_PATH_MAX + 260];
    file_path(s, k, p, sizeof p);
    dt_st_file *f;
    if (dt_st_open(p, &f, err)) return err->code;
    const dt_lm *g = s->g;
    int rc = DT_OK;
    for (int i = 0; i < src_ntensors(s) && !rc; i++) {
        const dt_tensor_info *t = src_tensor(s, i);
        const dt_st_tensor *e = find_in(f, g, t);
        if (!e) {
            if (all && !src_drawn(s, i, t))
                rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s%s\" is missing", p, dt_lm_hf_prefix(g), t->name);
            continue;
        }
        if (s->file_of[i] >= 0) {
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" is also in another shard", p, e->name);
            break;
        }
        if (!(rc = check_tensor(t, e, &s->sdt[i], p, err))) s->file_of[i] = k;
    }
    dt_st_close(f);
    return rc;
}

void dt_hf_src_close(dt_hf_src *s) {
    if (!s) return;
    dt_st_close(s->f);
    free(s->names);
    free(s->file_of);
    free(s->sdt);
    free(s->st);
    free(s);
}

static dt_hf_src *src_new(const dt_lm *g, int set, const uint64_t *seed) {
    dt_hf_src *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->g = g;
    s->set = set;
    s->drawn = seed != NULL;
    s->seed = seed ? *seed : 0;
    int nt = src_ntensors(s) > 0 ? src_ntensors(s) : 1;
    s->cur = -1;
    s->file_of = malloc((size_t)nt * sizeof *s->file_of);
    s->sdt = calloc((size_t)nt, sizeof *s->sdt);
    s->st = calloc((size_t)nt, sizeof *s->st);
    if (!s->file_of || !s->sdt || !s->st) {
        dt_hf_src_close(s);
        return NULL;
    }
    for (int i = 0; i < nt; i++) s->file_of[i] = -1;
    return s;
}

static int open_file_set(const dt_lm *g, int set, const uint64_t *seed, const char *path, dt_hf_src **out,
                         dt_error *err) {
    *out = NULL;
    dt_hf_src *s = src_new(g, set, seed);
    if (!s) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    snprintf(s->path, sizeof s->path, "%s", path);
    s->nfiles = 1;
    int rc = src_scan(s, 0, 1, err);
    if (rc) {
        dt_hf_src_close(s);
        return rc;
    }
    *out = s;
    return DT_OK;
}

int dt_hf_src_open_file(const dt_lm *g, const char *path, dt_hf_src **out, dt_error *err) {
    return open_file_set(g, DT_LM_SET_TRAINED, NULL, path, out, err);
}

static int open_dir_set(const dt_lm *g, int set, const uint64_t *seed, const char *dir, dt_hf_src **out,
                        dt_error *err) {
    *out = NULL;
    char p[DT_HF_PATH_MAX];
    snprintf(p, sizeof p, "%s/" DT_HF_SINGLE_FILE, dir);
    struct stat sb;
    if (stat(p, &sb) == 0) return open_file_set(g, set, seed, p, out, err);
    snprintf(p, sizeof p, "%s/" DT_HF_INDEX_FILE, dir);
    if (stat(p, &sb) != 0)
        return dt_errorf(err, DT_EINVAL,
                         "%s: neither " DT_HF_SINGLE_FILE " nor " DT_HF_INDEX_FILE
                         " is there: give a Hugging Face model directory (save_pretrained) or a .safetensors file",
                         dir);
    dt_hf_src *s = src_new(g, set, seed);
    if (!s) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", dir);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    int rc = dt_hf_index_shards(p, &s->names, &s->nfiles, err);
    for (int k = 0; k < s->nfiles && !rc; k++) rc = src_scan(s, k, 0, err);   /* one shard mapped at a time */
    for (int i = 0; i < src_ntensors(s) && !rc; i++)
        if (s->file_of[i] < 0 && !src_drawn(s, i, src_tensor(s, i)))
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s%s\" is in none of the %d shard(s) of " DT_HF_INDEX_FILE,
                           dir, dt_lm_hf_prefix(g), src_tensor(s, i)->name, s->nfiles);
    if (rc) {
        dt_hf_src_close(s);
        return rc;
    }
    *out = s;
    return DT_OK;
}

int dt_hf_src_open_dir(const dt_lm *g, const char *dir, dt_hf_src **out, dt_error *err) {
    return open_dir_set(g, DT_LM_SET_TRAINED, NULL, dir, out, err);
}

int dt_hf_src_read(dt_hf_src *s, size_t lo, size_t n, dt_dtype pdt, void *dst, dt_error *err) {
    const size_t hi = lo + n, ds = (size_t)dt_dtype_size(pdt);
    for (int i = 0; i < src_ntensors(s); i++) {
        const dt_tensor_info *t = src_tensor(s, i);
        size_t a = t->offset > lo ? t->offset : lo, b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (a >= b) continue;
        if (src_drawn(s, i, t)) {   /* an adapter the base lacks: PEFT's init, from the seed */
            dt_lm_init_slice(s->g, s->seed, a, b - a, (char *)dst + (a - lo) * ds, pdt);
            continue;
        }
        if (src_switch(s, s->file_of[i], err)) return err->code;
        const size_t es = (size_t)dt_dtype_size(s->sdt[i]);
        const char *src = (const char *)dt_st_data(s->f, s->st[i]) + (a - t->offset) * es;
        /* a bounded piece at a time (dt_io_chunk_bytes), its mapped pages released after it */
        const size_t chunk = dt_io_chunk_bytes() / es > 0 ? dt_io_chunk_bytes() / es : 1;
        for (size_t j = a; j < b; j += chunk) {
            size_t k = b - j < chunk ? b - j : chunk;
            const char *p = src + (j - a) * es;
            int rc = convert_in((char *)dst + (j - lo) * ds, pdt, p, s->sdt[i], k);
            dt_map_release(p, k * es);
            if (rc) {
                char fp[DT_HF_PATH_MAX + 260];
                file_path(s, s->cur, fp, sizeof fp);
                return dt_errorf(err, DT_ENOMEM, "%s: out of memory converting tensor \"%s\"", fp, s->st[i]->name);
            }
        }
    }
    return DT_OK;
}

static int load_all(dt_hf_src *s, const dt_lm *g, dt_dtype pdt, void *params, dt_error *err) {
    int rc = dt_hf_src_read(s, 0, dt_lm_num_params(g), pdt, params, err);
    dt_hf_src_close(s);
    return rc;
}

int dt_hf_load_file(const dt_lm *g, dt_dtype pdt, const char *path, void *params, dt_error *err) {
    dt_hf_src *s;
    if (dt_hf_src_open_file(g, path, &s, err)) return err->code;
    return load_all(s, g, pdt, params, err);
}

int dt_hf_load_dir(const dt_lm *g, dt_dtype pdt, const char *dir, void *params, dt_error *err) {
    dt_hf_src *s;
    if (dt_hf_src_open_dir(g, dir, &s, err)) return err->code;
    return load_all(s, g, pdt, params, err);
}

int dt_hf_src_open_base(const dt_lm *g, const char *path, dt_hf_src **out, dt_error *err) {
    return dt_hf_is_dir(path) ? open_dir_set(g, DT_LM_SET_BASE, NULL, path, out, err)
                              : open_file_set(g, DT_LM_SET_BASE, NULL, path, out, err);
}

int dt_hf_src_open_quant(const dt_lm *g, const char *path, dt_hf_src **out, dt_error *err) {
    return dt_hf_is_dir(path) ? open_dir_set(g, DT_LM_SET_QUANT, NULL, path, out, err)
                              : open_file_set(g, DT_LM_SET_QUANT, NULL, path, out, err);
}

int dt_hf_src_open_seeded(const dt_lm *g, const char *path, uint64_t seed, dt_hf_src **out, dt_error *err) {
    return dt_hf_is_dir(path) ? open_dir_set(g, DT_LM_SET_TRAINED, &seed, path, out, err)
                              : open_file_set(g, DT_LM_SET_TRAINED, &seed, path, out, err);
}
