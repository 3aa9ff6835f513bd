/* hfdir.c — see dt_hfdir.h. */
#include "dt_hfdir.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "dt_dtype.h"
#include "dt_json.h"
#include "dt_safetensors.h"

/* GPT-2's <|endoftext|> id in its 50257-token BPE vocabulary (HF GPT2Config). */
#define DT_GPT2_EOT_TOKEN 50256
#define DT_HF_INDEX_FILE "model.safetensors.index.json"
#define DT_HF_SINGLE_FILE "model.safetensors"
#define DT_HF_PATH_MAX 4096

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

/* LlamaConfig / Qwen2Config / Qwen3Config keys (transformers models/<type>/configuration_<type>.py);
 * rope scaling in the "rope_scaling" spelling every transformers version reads. */
static void llama_config(cJSON *c, const dt_model *m) {
    const char *type = m->qk_norm ? "qwen3" : m->qkv_bias ? "qwen2" : "llama";
    const char *cls = m->qk_norm ? "Qwen3ForCausalLM" : m->qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(cls));
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

/* Converts n elements into dst (dtype dt) from possibly unaligned src. */
static int convert_in(void *dst, dt_dtype dt, const void *src, dt_dtype st, size_t n) {
    size_t es = (size_t)dt_dtype_size(st);
    if (((uintptr_t)src % es) == 0) {
        dt_convert(dst, dt, src, st, n);
        return DT_OK;
    }
    void *tmp = malloc(n * es);
    if (!tmp) return DT_ENOMEM;
    memcpy(tmp, src, n * es);
    dt_convert(dst, dt, tmp, st, n);
    free(tmp);
    return DT_OK;
}

static int shape_matches(const dt_st_tensor *s, const dt_tensor_info *t) {
    if (s->ndim != t->ndim) return 0;
    for (int d = 0; d < t->ndim; d++)
        if (s->shape[d] != t->shape[d]) return 0;
    return 1;
}

/* One tensor of g found in the open file f: checks and converts it. */
static int load_tensor(const dt_tensor_info *t, const dt_st_file *f, const dt_st_tensor *s, dt_dtype pdt,
                       void *params, const char *path, dt_error *err) {
    dt_dtype sdt;
    if (dt_st_dtype_parse(s->dtype, &sdt))
        return dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" has dtype %s (F32, BF16 or F16 expected)", path,
                         s->name, s->dtype);
    if (!shape_matches(s, t))
        return dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" has shape [%lld%s%lld] but the model needs [%lld%s%lld]",
                         path, s->name, (long long)s->shape[0], s->ndim > 1 ? ", " : "",
                         s->ndim > 1 ? (long long)s->shape[1] : 0LL, (long long)t->shape[0], t->ndim > 1 ? ", " : "",
                         t->ndim > 1 ? (long long)t->shape[1] : 0LL);
    void *dst = (char *)params + t->offset * (size_t)dt_dtype_size(pdt);
    if (convert_in(dst, pdt, dt_st_data(f, s), sdt, t->numel))
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory converting tensor \"%s\"", path, s->name);
    return DT_OK;
}

static const dt_st_tensor *find_in(const dt_st_file *f, const dt_lm *g, const dt_tensor_info *t) {
    char name[DT_ST_NAME_MAX];
    snprintf(name, sizeof name, "%s%s", dt_lm_hf_prefix(g), t->name);
    const dt_st_tensor *s = dt_st_find(f, name);
    return s ? s : dt_st_find(f, t->name);
}

/* Loads the tensors of g that file path holds. seen NULL: every tensor must be
 * there; else seen[i] marks tensor i loaded (twice is an error). */
static int load_file(const dt_lm *g, dt_dtype pdt, const char *path, void *params, unsigned char *seen,
                     dt_error *err) {
    dt_st_file *f;
    if (dt_st_open(path, &f, err)) return err->code;
    int rc = DT_OK;
    for (int i = 0; i < dt_lm_num_tensors(g) && !rc; i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        const dt_st_tensor *s = find_in(f, g, t);
        if (!s) {
            if (!seen)
                rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s%s\" is missing", path, dt_lm_hf_prefix(g), t->name);
            continue;
        }
        if (seen && seen[i]) {
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" is also in another shard", path, s->name);
            break;
        }
        rc = load_tensor(t, f, s, pdt, params, path, err);
        if (seen && !rc) seen[i] = 1;
    }
    dt_st_close(f);
    return rc;
}

int dt_hf_load_file(const dt_lm *g, dt_dtype pdt, const char *path, void *params, dt_error *err) {
    return load_file(g, pdt, path, params, NULL, err);
}

/* A shard name from the index: a plain file name inside the directory. */
static int shard_name_ok(const char *s) {
    return s[0] && s[0] != '.' && !strchr(s, '/') && strlen(s) < 256;
}

/* The distinct shard files of the index's weight_map, in first-seen order. */
static int index_shards(const char *ipath, char (**names)[256], int *n, dt_error *err) {
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

int dt_hf_load_dir(const dt_lm *g, dt_dtype pdt, const char *dir, void *params, dt_error *err) {
    char p[DT_HF_PATH_MAX];
    snprintf(p, sizeof p, "%s/" DT_HF_SINGLE_FILE, dir);
    struct stat st;
    if (stat(p, &st) == 0) return load_file(g, pdt, p, params, NULL, err);
    snprintf(p, sizeof p, "%s/" DT_HF_INDEX_FILE, dir);
    if (stat(p, &st) != 0)
        return dt_errorf(err, DT_EINVAL,
                         "%s: neither " DT_HF_SINGLE_FILE " nor " DT_HF_INDEX_FILE
                         " is there: give a Hugging Face model directory (save_pretrained) or a .safetensors file",
                         dir);
    char(*names)[256] = NULL;
    int n = 0;
    if (index_shards(p, &names, &n, err)) return err->code;
    int nt = dt_lm_num_tensors(g), rc = DT_OK;
    unsigned char *seen = calloc((size_t)nt, 1);
    if (!seen) rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", dir);
    for (int k = 0; k < n && !rc; k++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[k]);
        rc = load_file(g, pdt, p, params, seen, err);   /* one shard mapped at a time */
    }
    for (int i = 0; i < nt && !rc; i++)
        if (!seen[i])
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s%s\" is in none of the %d shard(s) of " DT_HF_INDEX_FILE,
                           dir, dt_lm_hf_prefix(g), dt_lm_tensor(g, i)->name, n);
    free(seen);
    free(names);
    return rc;
}
