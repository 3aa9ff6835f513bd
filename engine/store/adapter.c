/* adapter.c — see dt_adapter.h. PEFT's format: peft 0.21.2 utils/save_and_load.py
 * (get_peft_model_state_dict: "base_model.model." + key, the adapter name removed;
 * modules_to_save saved under their base key), tuners/lora/config.py (LoraConfig fields and
 * defaults), config.py (PeftConfigMixin.save_pretrained: adapter_config.json). */
#include "dt_adapter.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "adapter_internal.h"
#include "dt_crc32c.h"
#include "dt_dtype.h"
#include "dt_file.h"
#include "dt_hfdir.h"
#include "dt_json.h"
#include "dt_lm.h"
#include "dt_pgroup.h"
#include "dt_safetensors.h"
#include "dt_sha256.h"

#define PEFT_PREFIX "base_model.model."
#define SUFFIX_A ".lora_A.weight"
#define SUFFIX_B ".lora_B.weight"
/* The format written: the peft release whose LoraConfig keys and defaults we write. */
#define PEFT_FORMAT_VERSION "0.21.2"
/* An index file is JSON of a few hundred bytes per tensor; this bounds a hostile one. */
#define INDEX_MAX_BYTES ((uint64_t)64 << 20)
/* Pages of a mapped file dropped after every this many bytes read (fingerprint). */
#define FP_CHUNK_BYTES ((size_t)64 << 20)
#define DIR_MODE 0755

/* What goes between "base_model.model." and an engine name: dt_lm_hf_prefix's values
 * (GPT2LMHeadModel keeps GPT2Model under "transformer."; LlamaForCausalLM's names are whole). */
static const char *family_prefix(dt_family f) { return f == DT_FAMILY_GPT2 ? "transformer." : ""; }

/* The linears a family's blocks hold, as module paths inside a block (models/family.c). */
static const char *const LLAMA_LINEARS[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                            "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                            "mlp.down_proj"};
static const char *const GPT2_LINEARS[] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* A block linear of family f: "model.layers.N.<linear>" (llama) / "h.N.<linear>" (gpt2).
 * *layer the block. 0 when module is not one. */
static int block_linear(dt_family f, const char *module, int64_t *layer, const char **lin) {
    const char *head = f == DT_FAMILY_GPT2 ? "h." : "model.layers.";
    size_t hn = strlen(head);
    if (strncmp(module, head, hn)) return 0;
    char *end = NULL;
    errno = 0;
    long long l = strtoll(module + hn, &end, 10);
    if (errno || end == module + hn || *end != '.' || l < 0) return 0;
    const char *const *tab = f == DT_FAMILY_GPT2 ? GPT2_LINEARS : LLAMA_LINEARS;
    int nt = f == DT_FAMILY_GPT2 ? (int)(sizeof GPT2_LINEARS / sizeof *GPT2_LINEARS)
                                 : (int)(sizeof LLAMA_LINEARS / sizeof *LLAMA_LINEARS);
    for (int i = 0; i < nt; i++)
        if (!strcmp(end + 1, tab[i])) {
            *layer = l;
            *lin = tab[i];
            return 1;
        }
    return 0;
}

/* PEFT's modules_to_save match: the module path equals a listed name or ends with "." + it
 * (peft utils/other.py _set_trainable, key.endswith(target_key) on dotted paths). */
static int saved_module(const dt_ft_names *list, const char *module) {
    for (int i = 0; i < list->n; i++) {
        const char *m = list->name[i];
        size_t a = strlen(module), b = strlen(m);
        if (!strcmp(module, m) || (a > b && module[a - b - 1] == '.' && !strcmp(module + a - b, m))) return 1;
    }
    return 0;
}

/* Splits an engine name into kind and module. A name neither LoRA nor of modules_to_save: -1. */
static int classify(const char *name, const dt_ft_names *saved, char *module, size_t n) {
    int kind = -1;
    size_t len = strlen(name), cut = len;
    if (ends_with(name, SUFFIX_A)) kind = DT_ADAPTER_LORA_A, cut = len - strlen(SUFFIX_A);
    else if (ends_with(name, SUFFIX_B)) kind = DT_ADAPTER_LORA_B, cut = len - strlen(SUFFIX_B);
    else if (ends_with(name, ".weight")) kind = DT_ADAPTER_SAVED, cut = len - strlen(".weight");
    else if (ends_with(name, ".bias")) kind = DT_ADAPTER_SAVED, cut = len - strlen(".bias");
    if (kind < 0 || cut >= n) return -1;
    memcpy(module, name, cut);
    module[cut] = '\0';
    if (kind == DT_ADAPTER_SAVED && !saved_module(saved, module)) return -1;
    return kind;
}

/* One tensor's place: LoRA on a block linear of the family (or lm_head), or a saved module. */
static int check_module(dt_family f, int kind, const char *module, const char *name, const char *where,
                        dt_error *err) {
    int64_t layer;
    const char *lin;
    if (kind == DT_ADAPTER_SAVED || block_linear(f, module, &layer, &lin) ||
        (f == DT_FAMILY_LLAMA && !strcmp(module, "lm_head")))
        return DT_OK;
    return dt_errorf(err, DT_EINVAL,
                     "%s: tensor '%s': %s has no linear '%s' to adapt (LoRA goes on the blocks' linears: %s); "
                     "use an adapter made for a %s model",
                     where, name, dt_family_name(f), module,
                     f == DT_FAMILY_GPT2 ? "attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj"
                                         : "q/k/v/o_proj, gate/up/down_proj",
                     dt_family_name(f));
}

/* Shapes of a LoRA pair: A [r, in], B [out, r]. */
static int check_pair(const char *module, int rank, int ndim_a, const int64_t *sa, int ndim_b, const int64_t *sb,
                      const char *where, dt_error *err) {
    if (ndim_a != 2 || ndim_b != 2 || sa[0] != rank || sb[1] != rank || sa[1] < 1 || sb[0] < 1)
        return dt_errorf(err, DT_EINVAL,
                         "%s: '%s': lora_A must be [r, in] and lora_B [out, r] with r = %d (the config's r); "
                         "got lora_A %dD [%lld, %lld], lora_B %dD [%lld, %lld]: the adapter's files disagree, "
                         "save it again",
                         where, module, rank, ndim_a, (long long)sa[0], (long long)(ndim_a > 1 ? sa[1] : 0), ndim_b,
                         (long long)sb[0], (long long)(ndim_b > 1 ? sb[1] : 0));
    return DT_OK;
}

/* ---------------- writing ---------------- */

typedef struct {
    const dt_adapter_tensor *a, *b;
    char module[DT_ST_NAME_MAX];
} pair_ref;

static int cmp_str(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

static cJSON *names_array(const dt_ft_names *l) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < l->n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(l->name[i]));
    return a;
}

/* LoraConfig.to_dict() of peft 0.21.2 as save_pretrained writes it: every key, sorted,
 * the ones we do not use at their defaults. targets: the adapted module paths (sorted). */
static char *config_json(const dt_adapter_config *c, char **targets, int nt) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const char *nulls[] = {"alora_invocation_tokens", "arrow_config", "auto_mapping", "corda_config",
                           "eva_config", "exclude_modules", "kasa_config", "layer_replication",
                           "layers_pattern", "layers_to_transform", "lora_ga_config", "megatron_config",
                           "monteclora_config", "revision", "target_parameters", "trainable_token_indices",
                           "use_bdlora", "velora_config"};
    for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++) cJSON_AddNullToObject(o, nulls[i]);
    cJSON_AddItemToObject(o, "alpha_pattern", cJSON_CreateObject());
    cJSON_AddItemToObject(o, "rank_pattern", cJSON_CreateObject());
    cJSON_AddItemToObject(o, "loftq_config", cJSON_CreateObject());
    if (c->base_model[0]) cJSON_AddStringToObject(o, "base_model_name_or_path", c->base_model);
    else cJSON_AddNullToObject(o, "base_model_name_or_path");
    cJSON_AddStringToObject(o, "bias", "none");
    cJSON_AddBoolToObject(o, "ensure_weight_tying", 0);
    cJSON_AddBoolToObject(o, "fan_in_fan_out", c->family == DT_FAMILY_GPT2);
    cJSON_AddBoolToObject(o, "inference_mode", 1);
    cJSON_AddBoolToObject(o, "init_lora_weights", 1);
    cJSON_AddNumberToObject(o, "lora_alpha", c->ft.lora_alpha);
    cJSON_AddBoolToObject(o, "lora_bias", 0);
    cJSON_AddNumberToObject(o, "lora_dropout", c->ft.lora_dropout);
    cJSON_AddStringToObject(o, "megatron_core", "megatron.core");
    if (c->ft.modules_to_save.n) cJSON_AddItemToObject(o, "modules_to_save", names_array(&c->ft.modules_to_save));
    else cJSON_AddNullToObject(o, "modules_to_save");
    cJSON_AddStringToObject(o, "peft_type", "LORA");
    cJSON_AddStringToObject(o, "peft_version", PEFT_FORMAT_VERSION);
    cJSON_AddNumberToObject(o, "qalora_group_size", 16);   /* LoraConfig default */
    cJSON_AddNumberToObject(o, "r", (double)c->ft.lora_rank);
    cJSON *tm = cJSON_CreateArray();
    for (int i = 0; tm && i < nt; i++) cJSON_AddItemToArray(tm, cJSON_CreateString(targets[i]));
    cJSON_AddItemToObject(o, "target_modules", tm);
    cJSON_AddStringToObject(o, "task_type", c->seq_cls ? "SEQ_CLS" : "CAUSAL_LM");
    cJSON_AddBoolToObject(o, "use_dora", 0);
    cJSON_AddBoolToObject(o, "use_qalora", 0);
    cJSON_AddBoolToObject(o, "use_rslora", c->ft.use_rslora);
    /* sort the keys as json.dumps(sort_keys=True) does */
    int n = cJSON_GetArraySize(o);
    char *out = NULL;
    cJSON *sorted = cJSON_CreateObject();
    if (sorted) {
        for (int k = 0; k < n; k++) {
            cJSON *best = NULL;
            for (cJSON *it = o->child; it; it = it->next)
                if (!best || strcmp(it->string, best->string) < 0) best = it;
            cJSON_AddItemToObject(sorted, best->string, cJSON_DetachItemViaPointer(o, best));
        }
        out = dt_json_print(sorted);
        cJSON_Delete(sorted);
    }
    cJSON_Delete(o);
    return out;
}

/* ---- the output directory: temp beside it, renamed onto it ---- */

int dt_path_join(char *out, size_t n, const char *dir, const char *name, dt_error *err) {
    if ((size_t)snprintf(out, n, "%s/%s", dir, name) < n) return DT_OK;
    return dt_errorf(err, DT_EINVAL, "%s/%s: path longer than %zu bytes", dir, name, n - 1);
}

/* out without trailing slashes ("merged/" names the directory "merged"), in buf. */
static int strip_slashes(const char *out, char *buf, size_t n, dt_error *err) {
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/') len--;
    if (len >= n) return dt_errorf(err, DT_EINVAL, "%s: path too long", out);
    memcpy(buf, out, len);
    buf[len] = '\0';
    return DT_OK;
}

int dt_outdir_begin(const char *out_arg, const char *what, char *tmp, size_t n, dt_error *err) {
    char out[DT_HFW_PATH_MAX];
    if (strip_slashes(out_arg, out, sizeof out, err)) return err->code;
    struct stat st;
    if (lstat(out, &st) == 0) {
        DIR *d = S_ISDIR(st.st_mode) ? opendir(out) : NULL;
        int empty = d != NULL;
        for (struct dirent *e; d && (e = readdir(d));)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
        if (d) closedir(d);
        if (!empty)
            return dt_errorf(err, DT_EINVAL,
                             "%s: already exists (%s): give %s a new directory (nothing is written into "
                             "one that exists)",
                             out, S_ISDIR(st.st_mode) ? "a directory that is not empty" : dt_file_kind(st.st_mode),
                             what);
    } else if (errno != ENOENT) {
        return dt_errorf(err, dt_file_errno_code(errno), "%s: cannot stat: %s", out, strerror(errno));
    }
    char parent[DT_HFW_PATH_MAX];
    dt_file_parent_dir(out, parent, sizeof parent);
    if (stat(parent, &st) || !S_ISDIR(st.st_mode))
        return dt_errorf(err, DT_EINVAL, "%s: its parent directory %s does not exist: create it first", out,
                         parent);
    if ((size_t)snprintf(tmp, n, "%s.tmpXXXXXX", out) >= n)
        return dt_errorf(err, DT_EINVAL, "%s: path too long", out);
    if (!mkdtemp(tmp)) return dt_errorf(err, DT_EIO, "%s: cannot create a directory: %s", tmp, strerror(errno));
    chmod(tmp, DIR_MODE);   /* mkdtemp makes it 0700; a model directory is 0755 as dt_mkdirs makes them */
    return DT_OK;
}

int dt_outdir_commit(const char *tmp, const char *out_arg, dt_error *err) {
    char out[DT_HFW_PATH_MAX];
    if (strip_slashes(out_arg, out, sizeof out, err) || dt_fsync_dir(tmp, err)) return err->code;
    /* rename(2) replaces an empty directory atomically; dt_outdir_begin allowed only that */
    if (rename(tmp, out))
        return dt_errorf(err, DT_EIO, "%s: cannot rename %s onto it: %s", out, tmp, strerror(errno));
    char parent[DT_HFW_PATH_MAX];
    dt_file_parent_dir(out, parent, sizeof parent);
    return dt_fsync_dir(parent, err);
}

void dt_outdir_abort(const char *tmp) {
    DIR *d = opendir(tmp);
    char p[DT_HFW_PATH_MAX];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if ((size_t)snprintf(p, sizeof p, "%s/%s", tmp, e->d_name) < sizeof p) unlink(p);
    }
    if (d) closedir(d);
    rmdir(tmp);
}

/* ---- dt_adapter_write ---- */

static int find_pairs(const dt_adapter_config *cfg, const dt_adapter_tensor *t, int n, pair_ref *pairs, int *np,
                      dt_error *err) {
    *np = 0;
    for (int i = 0; i < n; i++) {
        char module[DT_ST_NAME_MAX];
        int kind = classify(t[i].name, &cfg->ft.modules_to_save, module, sizeof module);
        if (kind < 0)
            return dt_errorf(err, DT_EINVAL,
                             "adapter tensor '%s': neither a lora_A / lora_B weight nor a module of "
                             "modules_to_save: pass only the adapter's tensors",
                             t[i].name);
        if (check_module(cfg->family, kind, module, t[i].name, "adapter", err)) return err->code;
        if (t[i].ndim < 1 || t[i].ndim > 2 || !t[i].data || t[i].shape[0] < 1 || (t[i].ndim == 2 && t[i].shape[1] < 1))
            return dt_errorf(err, DT_EINVAL, "adapter tensor '%s': needs 1 or 2 dimensions >= 1 and data",
                             t[i].name);
        if (kind == DT_ADAPTER_SAVED) continue;
        int k = 0;
        while (k < *np && strcmp(pairs[k].module, module)) k++;
        if (k == *np) {
            memset(&pairs[k], 0, sizeof pairs[k]);
            snprintf(pairs[k].module, sizeof pairs[k].module, "%s", module);
            (*np)++;
        }
        const dt_adapter_tensor **slot = kind == DT_ADAPTER_LORA_A ? &pairs[k].a : &pairs[k].b;
        if (*slot) return dt_errorf(err, DT_EINVAL, "adapter tensor '%s': given twice", t[i].name);
        *slot = &t[i];
    }
    for (int k = 0; k < *np; k++) {
        if (!pairs[k].a || !pairs[k].b)
            return dt_errorf(err, DT_EINVAL, "adapter module '%s': has lora_%s but no lora_%s: pass both", pairs[k].module,
                             pairs[k].a ? "A" : "B", pairs[k].a ? "B" : "A");
        if (check_pair(pairs[k].module, (int)cfg->ft.lora_rank, pairs[k].a->ndim, pairs[k].a->shape, pairs[k].b->ndim,
                       pairs[k].b->shape, "adapter", err))
            return err->code;
    }
    return DT_OK;
}

static int write_files(const char *tmp, const dt_adapter_config *cfg, const dt_adapter_tensor *t, int n,
                       char **targets, int nt, dt_error *err) {
    char path[DT_HFW_PATH_MAX], key[DT_ST_NAME_MAX];
    char *json = config_json(cfg, targets, nt);
    if (!json) return dt_errorf(err, DT_ENOMEM, "adapter_config.json: out of memory");
    int rc = dt_path_join(path, sizeof path, tmp, DT_ADAPTER_CONFIG_FILE, err);
    if (!rc) rc = dt_json_write_file_atomic(path, json, err);
    free(json);
    if (rc) return rc;
    dt_st_writer *w = dt_st_writer_new();
    if (!w) return dt_errorf(err, DT_ENOMEM, "adapter: out of memory");
    rc = dt_st_writer_meta(w, "format", "pt", err);
    if (!rc && cfg->base_fingerprint[0]) rc = dt_st_writer_meta(w, "dt_base_fingerprint", cfg->base_fingerprint, err);
    for (int i = 0; !rc && i < n; i++) {
        if ((size_t)snprintf(key, sizeof key, "%s%s%s", PEFT_PREFIX, family_prefix(cfg->family), t[i].name) >=
            sizeof key) {
            rc = dt_errorf(err, DT_EINVAL, "adapter tensor '%s': name too long", t[i].name);
            break;
        }
        rc = dt_st_writer_add(w, key, "F32", t[i].ndim, t[i].shape, t[i].data, err);
    }
    if (!rc) rc = dt_path_join(path, sizeof path, tmp, DT_ADAPTER_WEIGHTS_FILE, err);
    if (!rc) rc = dt_st_write(w, path, err);
    dt_st_writer_free(w);
    return rc;
}

int dt_adapter_write(const char *dir, const dt_adapter_config *cfg, const dt_adapter_tensor *t, int n,
                     dt_error *err) {
    if (!dt_ft_is_lora(&cfg->ft))
        return dt_errorf(err, DT_EINVAL, "adapter %s: the method is %s, not lora / qlora: only LoRA adapters are "
                         "written in PEFT's format", dir, dt_ft_method_name(cfg->ft.method));
    if (dt_finetune_check(&cfg->ft, "adapter", err)) return err->code;
    if (n < 1) return dt_errorf(err, DT_EINVAL, "adapter %s: no tensors to write", dir);
    pair_ref *pairs = calloc((size_t)n, sizeof *pairs);
    char **targets = calloc((size_t)n, sizeof *targets);
    if (!pairs || !targets) {
        free(pairs), free(targets);
        return dt_errorf(err, DT_ENOMEM, "adapter %s: out of memory", dir);
    }
    int np = 0;
    int rc = find_pairs(cfg, t, n, pairs, &np, err);
    /* target_modules: the base model's module paths PEFT wraps (the HF prefix included) */
    char(*paths)[DT_ST_NAME_MAX] = rc ? NULL : calloc((size_t)np + 1, sizeof *paths);
    if (!rc && !paths) rc = dt_errorf(err, DT_ENOMEM, "adapter %s: out of memory", dir);
    for (int k = 0; !rc && k < np; k++) {
        snprintf(paths[k], sizeof paths[k], "%s%s", family_prefix(cfg->family), pairs[k].module);
        targets[k] = paths[k];
    }
    if (!rc) qsort(targets, (size_t)np, sizeof *targets, cmp_str);
    char tmp[DT_HFW_PATH_MAX];
    if (!rc) rc = dt_outdir_begin(dir, "the adapter directory", tmp, sizeof tmp, err);
    if (!rc) {
        rc = write_files(tmp, cfg, t, n, targets, np, err);
        if (!rc) rc = dt_outdir_commit(tmp, dir, err);
        if (rc) dt_outdir_abort(tmp);
    }
    free(paths), free(pairs), free(targets);
    return rc;
}

/* ---------------- reading ---------------- */

struct dt_adapter {
    char dir[DT_HFW_PATH_MAX];
    dt_adapter_config cfg;
    int fan_in_fan_out;
    dt_st_file *st;
    int n;
    dt_adapter_entry *e;
    char (*names)[DT_ST_NAME_MAX];
    char (*modules)[DT_ST_NAME_MAX];
};

int dt_adapter_is_score_head(const dt_adapter *a, const dt_adapter_entry *e) {
    return a->cfg.seq_cls && e->kind == DT_ADAPTER_SAVED && !strcmp(e->name, DT_LM_SCORE_HEAD ".weight");
}

void dt_adapter_free(dt_adapter *a) {
    if (!a) return;
    dt_st_close(a->st);
    free(a->e), free(a->names), free(a->modules);
    free(a);
}
const dt_adapter_config *dt_adapter_cfg(const dt_adapter *a) { return &a->cfg; }
int dt_adapter_count(const dt_adapter *a) { return a->n; }
const dt_adapter_entry *dt_adapter_get(const dt_adapter *a, int i) { return &a->e[i]; }
double dt_adapter_scale(const dt_adapter *a) { return dt_ft_lora_scale(&a->cfg.ft); }

const dt_adapter_entry *dt_adapter_find(const dt_adapter *a, const char *name) {
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->e[i].name, name)) return &a->e[i];
    return NULL;
}

void dt_adapter_entry_f32(const dt_adapter_entry *e, float *dst) {
    size_t n = (size_t)e->shape[0] * (size_t)(e->ndim > 1 ? e->shape[1] : 1);
    if (!strcmp(e->dtype, "F32")) {
        memcpy(dst, e->data, n * sizeof(float));
        return;
    }
    const uint16_t *s = e->data;
    int bf = !strcmp(e->dtype, "BF16");
    for (size_t i = 0; i < n; i++) dst[i] = bf ? dt_bf16_to_f32(s[i]) : dt_fp16_to_f32(s[i]);
}

/* A list of strings (or null) of the config into out. */
static int config_names(const cJSON *root, const char *key, const char *path, dt_ft_names *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return DT_OK;
    if (cJSON_IsString(v))
        return dt_errorf(err, DT_EINVAL,
                         "%s: %s is the pattern '%s': only a list of module names is read; save the adapter "
                         "with target_modules as a list",
                         path, key, v->valuestring);
    if (!cJSON_IsArray(v)) return dt_errorf(err, DT_EINVAL, "%s: %s must be a list of module names", path, key);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!cJSON_IsString(it) || strlen(it->valuestring) >= DT_FT_NAME_MAX)
            return dt_errorf(err, DT_EINVAL, "%s: %s: each entry must be a module name under %d characters", path,
                             key, DT_FT_NAME_MAX);
        if (out->n < DT_FT_MAX_NAMES) snprintf(out->name[out->n++], DT_FT_NAME_MAX, "%s", it->valuestring);
    }
    return DT_OK;
}

static int config_bool(const cJSON *root, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = cJSON_IsTrue(v);
    return !v || cJSON_IsBool(v) || cJSON_IsNull(v);
}

static int pattern_empty(const cJSON *root, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    return !v || cJSON_IsNull(v) || (cJSON_IsObject(v) && !v->child);
}

/* adapter_config.json: a LoRA config whose settings we can apply. */
static int parse_config(const char *path, dt_adapter *a, dt_error *err) {
    char *text = NULL;
    size_t len = 0;
    if (dt_json_read_file(path, &text, &len, err)) return err->code;
    cJSON *root = NULL;
    int rc = dt_json_parse(text, path, &root, err);
    free(text);
    if (rc) return rc;
    dt_finetune *ft = &a->cfg.ft;
    dt_finetune_defaults(DT_FT_LORA, ft);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "peft_type");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "r");
    const cJSON *alpha = cJSON_GetObjectItemCaseSensitive(root, "lora_alpha");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(root, "lora_dropout");
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(root, "bias");
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(root, "base_model_name_or_path");
    const cJSON *task = cJSON_GetObjectItemCaseSensitive(root, "task_type");
    a->cfg.seq_cls = cJSON_IsString(task) && !strcmp(task->valuestring, "SEQ_CLS");
    int dora = 0;
    if (!cJSON_IsObject(root)) rc = dt_errorf(err, DT_EINVAL, "%s: not a JSON object: give PEFT's adapter_config.json", path);
    else if (!cJSON_IsString(type) || strcmp(type->valuestring, "LORA"))
        rc = dt_errorf(err, DT_EINVAL, "%s: peft_type is %s, not \"LORA\": only LoRA adapters are read", path,
                       cJSON_IsString(type) ? type->valuestring : "missing");
    else if (!cJSON_IsNumber(r) || r->valuedouble != floor(r->valuedouble) || r->valuedouble < 1 ||
             r->valuedouble > INT_MAX)
        rc = dt_errorf(err, DT_EINVAL, "%s: r must be a whole number >= 1 (the LoRA rank, e.g. 8)", path);
    else if (!cJSON_IsNumber(alpha) || !(alpha->valuedouble > 0) || !isfinite(alpha->valuedouble))
        rc = dt_errorf(err, DT_EINVAL, "%s: lora_alpha must be a number > 0 (e.g. 16 = 2 x r)", path);
    else if (drop && !cJSON_IsNull(drop) && (!cJSON_IsNumber(drop) || drop->valuedouble < 0 || drop->valuedouble >= 1))
        rc = dt_errorf(err, DT_EINVAL, "%s: lora_dropout must be in [0, 1)", path);
    else if (bias && !(cJSON_IsString(bias) && !strcmp(bias->valuestring, "none")))
        rc = dt_errorf(err, DT_EINVAL, "%s: bias must be \"none\" (trained biases are not supported): train the "
                       "adapter with bias=\"none\"", path);
    else if (!config_bool(root, "use_dora", &dora) || dora)
        rc = dt_errorf(err, DT_EINVAL, "%s: use_dora: DoRA adapters are not supported: use a plain LoRA adapter", path);
    else if (!pattern_empty(root, "rank_pattern") || !pattern_empty(root, "alpha_pattern"))
        rc = dt_errorf(err, DT_EINVAL, "%s: rank_pattern / alpha_pattern set: per-module ranks are not supported; "
                       "use one r and lora_alpha", path);
    else if (!config_bool(root, "use_rslora", &ft->use_rslora) || !config_bool(root, "fan_in_fan_out", &a->fan_in_fan_out))
        rc = dt_errorf(err, DT_EINVAL, "%s: use_rslora and fan_in_fan_out must be true or false", path);
    if (!rc) {
        ft->lora_rank = (int64_t)r->valuedouble;
        ft->lora_alpha = alpha->valuedouble;
        ft->lora_dropout = cJSON_IsNumber(drop) ? drop->valuedouble : 0;
        ft->lora_target_all = 0;
        if (cJSON_IsString(base)) snprintf(a->cfg.base_model, sizeof a->cfg.base_model, "%s", base->valuestring);
        rc = config_names(root, "modules_to_save", path, &ft->modules_to_save, err);
    }
    /* target_modules is informative here (the tensors say what is adapted): a pattern is fine */
    if (!rc && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(root, "target_modules")))
        rc = config_names(root, "target_modules", path, &ft->lora_target, err);
    cJSON_Delete(root);
    return rc;
}

/* The tensors of adapter_model.safetensors: names, kinds, modules; the family from the keys. */
static int parse_tensors(const char *path, dt_adapter *a, dt_error *err) {
    int n = dt_st_count(a->st);
    a->e = calloc((size_t)n + 1, sizeof *a->e);
    a->names = calloc((size_t)n + 1, sizeof *a->names);
    a->modules = calloc((size_t)n + 1, sizeof *a->modules);
    if (!a->e || !a->names || !a->modules) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    if (n == 0) return dt_errorf(err, DT_EINVAL, "%s: holds no tensors: save the adapter again", path);
    int gpt2 = 0;
    for (int i = 0; i < n; i++) gpt2 += !strncmp(dt_st_get(a->st, i)->name, PEFT_PREFIX "transformer.",
                                                 strlen(PEFT_PREFIX "transformer."));
    a->cfg.family = gpt2 ? DT_FAMILY_GPT2 : DT_FAMILY_LLAMA;
    const char *pre = family_prefix(a->cfg.family);
    char want[DT_ST_NAME_MAX];
    snprintf(want, sizeof want, "%s%s", PEFT_PREFIX, pre);
    for (int i = 0; i < n; i++) {
        const dt_st_tensor *t = dt_st_get(a->st, i);
        dt_adapter_entry *e = &a->e[i];
        if (strncmp(t->name, want, strlen(want)))
            return dt_errorf(err, DT_EINVAL,
                             "%s: key '%s' is not under '%s' (every key of a %s adapter is): the file mixes "
                             "models; save the adapter again",
                             path, t->name, want, dt_family_name(a->cfg.family));
        snprintf(a->names[i], sizeof a->names[i], "%s", t->name + strlen(want));
        e->name = a->names[i];
        e->module = a->modules[i];
        e->kind = classify(e->name, &a->cfg.ft.modules_to_save, a->modules[i], sizeof a->modules[i]);
        if (e->kind < 0)
            return dt_errorf(err, DT_EINVAL,
                             "%s: key '%s' is neither a lora_A / lora_B weight nor a module of modules_to_save: "
                             "not an adapter this reader knows (DoRA, embeddings, biases are not supported)",
                             path, t->name);
        if (check_module(a->cfg.family, e->kind, e->module, t->name, path, err)) return err->code;
        if (dt_st_dtype_parse(t->dtype, &(dt_dtype){0}) || t->ndim < 1 || t->ndim > 2)
            return dt_errorf(err, DT_EINVAL, "%s: '%s' is %s %dD: adapters hold F32 / BF16 / F16 tensors of 1 or 2 "
                             "dimensions", path, t->name, t->dtype, t->ndim);
        snprintf(e->dtype, sizeof e->dtype, "%s", t->dtype);
        e->ndim = t->ndim;
        e->shape[0] = t->shape[0];
        e->shape[1] = t->ndim > 1 ? t->shape[1] : 1;
        e->data = dt_st_data(a->st, t);
    }
    a->n = n;
    return DT_OK;
}

/* Every lora_A has its lora_B and both have the config's rank. */
static int check_pairs(const dt_adapter *a, const char *path, dt_error *err) {
    char other[DT_ST_NAME_MAX];
    for (int i = 0; i < a->n; i++) {
        const dt_adapter_entry *e = &a->e[i];
        if (e->kind == DT_ADAPTER_SAVED) continue;
        snprintf(other, sizeof other, "%s%s", e->module, e->kind == DT_ADAPTER_LORA_A ? SUFFIX_B : SUFFIX_A);
        const dt_adapter_entry *o = dt_adapter_find(a, other);
        if (!o)
            return dt_errorf(err, DT_EINVAL, "%s: '%s' has no '%s': the file is incomplete; save the adapter again",
                             path, e->name, other);
        const dt_adapter_entry *A = e->kind == DT_ADAPTER_LORA_A ? e : o, *B = e->kind == DT_ADAPTER_LORA_A ? o : e;
        if (check_pair(e->module, (int)a->cfg.ft.lora_rank, A->ndim, A->shape, B->ndim, B->shape, path, err))
            return err->code;
    }
    return DT_OK;
}

static int missing_file(const char *dir, const char *file, dt_error *err) {
    return dt_errorf(err, DT_EINVAL, "%s: no %s: not a whole adapter directory; give the directory "
                     "PeftModel.save_pretrained (or dtrun) wrote", dir, file);
}

int dt_adapter_read(const char *dir, dt_adapter **out, dt_error *err) {
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return dt_errorf(err, DT_EINVAL, "%s: %s: give the adapter directory (adapter_config.json + "
                         "adapter_model.safetensors)", dir, errno == ENOENT ? "does not exist" : "not a directory");
    dt_adapter *a = calloc(1, sizeof *a);
    if (!a) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", dir);
    snprintf(a->dir, sizeof a->dir, "%s", dir);
    char cpath[DT_HFW_PATH_MAX], wpath[DT_HFW_PATH_MAX];
    int rc = dt_path_join(cpath, sizeof cpath, dir, DT_ADAPTER_CONFIG_FILE, err);
    if (!rc) rc = dt_path_join(wpath, sizeof wpath, dir, DT_ADAPTER_WEIGHTS_FILE, err);
    if (rc) {
        free(a);
        return rc;
    }
    if (lstat(cpath, &st) && errno == ENOENT) rc = missing_file(dir, DT_ADAPTER_CONFIG_FILE, err);
    else if (lstat(wpath, &st) && errno == ENOENT) rc = missing_file(dir, DT_ADAPTER_WEIGHTS_FILE, err);
    if (!rc) rc = parse_config(cpath, a, err);
    if (!rc) rc = dt_st_open(wpath, &a->st, err);
    if (!rc) rc = parse_tensors(wpath, a, err);
    if (!rc) rc = check_pairs(a, wpath, err);
    if (!rc && a->fan_in_fan_out != (a->cfg.family == DT_FAMILY_GPT2))
        rc = dt_errorf(err, DT_EINVAL, "%s: fan_in_fan_out is %s but the tensors are a %s model's (Conv1D: true; "
                       "nn.Linear: false): fix the config",
                       cpath, a->fan_in_fan_out ? "true" : "false", dt_family_name(a->cfg.family));
    if (!rc) {
        const char *fp = dt_st_metadata(a->st, "dt_base_fingerprint");
        if (fp) snprintf(a->cfg.base_fingerprint, sizeof a->cfg.base_fingerprint, "%s", fp);
    }
    if (rc) {
        dt_adapter_free(a);
        return rc;
    }
    *out = a;
    return DT_OK;
}

/* ---------------- a base model's weights ---------------- */

void dt_hfw_close(dt_hfw *w) {
    if (!w) return;
    for (int i = 0; i < w->nfiles; i++) dt_st_close(w->files[i]);
    free(w->files), free(w->fname), free(w->by_name), free(w->in_order);
    free(w);
}

static int cmp_entry(const void *x, const void *y) {
    return strcmp(((const dt_hfw_entry *)x)->t->name, ((const dt_hfw_entry *)y)->t->name);
}

const dt_hfw_entry *dt_hfw_find(const dt_hfw *w, const char *name) {
    int lo = 0, hi = w->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(w->by_name[mid].t->name, name);
        if (!c) return &w->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

/* The shard names of model.safetensors.index.json, in first-use order, unique. */
static int index_files(const char *dir, dt_hfw *w, dt_error *err) {
    char path[DT_HFW_PATH_MAX], *text = NULL;
    size_t len = 0;
    if (dt_path_join(path, sizeof path, dir, DT_HFW_INDEX_FILE, err)) return err->code;
    if (dt_file_read(path, "model.safetensors.index.json", INDEX_MAX_BYTES, &text, &len, err)) return err->code;
    cJSON *root = NULL;
    int rc = dt_json_parse(text, path, &root, err);
    free(text);
    if (rc) return rc;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map"), *it;
    int n = cJSON_GetArraySize(map);
    if (!cJSON_IsObject(map) || n < 1) rc = dt_errorf(err, DT_EINVAL, "%s: no \"weight_map\" object: not a "
                                                      "transformers index; save the model again", path);
    if (!rc && (!(w->fname = calloc((size_t)n, sizeof *w->fname)) || !(w->files = calloc((size_t)n, sizeof *w->files))))
        rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    const cJSON *entries = rc ? NULL : map;
    cJSON_ArrayForEach(it, entries) {
        const char *f = cJSON_IsString(it) ? it->valuestring : "";
        if (!*f || strchr(f, '/') || f[0] == '.' || strlen(f) >= sizeof w->fname[0]) {
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor '%s': shard name must be a file name in the directory", path,
                           it->string);
            break;
        }
        int k = 0;
        while (k < w->nfiles && strcmp(w->fname[k], f)) k++;
        if (k == w->nfiles) snprintf(w->fname[w->nfiles++], sizeof w->fname[0], "%s", f);
    }
    cJSON_Delete(root);
    return rc;
}

int dt_hfw_open(const char *dir, dt_hfw **out, dt_error *err) {
    *out = NULL;
    dt_hfw *w = calloc(1, sizeof *w);
    if (!w) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", dir);
    char path[DT_HFW_PATH_MAX];
    struct stat st;
    int rc = dt_path_join(path, sizeof path, dir, DT_HFW_SINGLE_FILE, err);
    if (rc) {
    } else if (lstat(path, &st) == 0) {
        w->fname = calloc(1, sizeof *w->fname);
        w->files = calloc(1, sizeof *w->files);
        if (!w->fname || !w->files) rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", dir);
        else snprintf(w->fname[w->nfiles++], sizeof w->fname[0], "%s", DT_HFW_SINGLE_FILE);
    } else {
        if ((rc = dt_path_join(path, sizeof path, dir, DT_HFW_INDEX_FILE, err))) {
        } else if (lstat(path, &st))
            rc = dt_errorf(err, DT_EINVAL, "%s: neither model.safetensors nor model.safetensors.index.json: give a "
                           "Hugging Face model directory with safetensors weights", dir);
        else rc = index_files(dir, w, err);
    }
    int total = 0;
    for (int k = 0; !rc && k < w->nfiles; k++) {
        if ((rc = dt_path_join(path, sizeof path, dir, w->fname[k], err))) break;
        if (lstat(path, &st) && errno == ENOENT) {
            rc = dt_errorf(err, DT_EINVAL, "%s: shard %s listed by model.safetensors.index.json is missing: copy "
                           "the whole model directory", dir, w->fname[k]);
            break;
        }
        if ((rc = dt_st_open(path, &w->files[k], err))) break;
        total += dt_st_count(w->files[k]);
    }
    if (!rc && (!(w->by_name = calloc((size_t)total + 1, sizeof *w->by_name)) ||
                !(w->in_order = calloc((size_t)total + 1, sizeof *w->in_order))))
        rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", dir);
    for (int k = 0; !rc && k < w->nfiles; k++)
        for (int i = 0; i < dt_st_count(w->files[k]); i++) {
            dt_hfw_entry e = {k, dt_st_get(w->files[k], i)};
            w->by_name[w->n] = e;
            w->in_order[w->n++] = e;
        }
    if (!rc) qsort(w->by_name, (size_t)w->n, sizeof *w->by_name, cmp_entry);
    for (int i = 1; !rc && i < w->n; i++)
        if (!strcmp(w->by_name[i].t->name, w->by_name[i - 1].t->name))
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor '%s' is in both %s and %s: keep one copy", dir,
                           w->by_name[i].t->name, w->fname[w->by_name[i - 1].file], w->fname[w->by_name[i].file]);
    if (rc) {
        dt_hfw_close(w);
        return rc;
    }
    *out = w;
    return DT_OK;
}

void dt_hfw_fingerprint(const dt_hfw *w, char hex[65]) {
    dt_sha256 h;
    dt_sha256_init(&h);
    for (int i = 0; i < w->n; i++) {
        const dt_st_tensor *t = w->by_name[i].t;
        const unsigned char *p = dt_st_data(w->files[w->by_name[i].file], t);
        uint64_t bytes = t->end - t->begin;
        uint32_t crc = 0;
        for (uint64_t off = 0; off < bytes; off += FP_CHUNK_BYTES) {
            size_t len = (size_t)(bytes - off < FP_CHUNK_BYTES ? bytes - off : FP_CHUNK_BYTES);
            crc = dt_crc32c(crc, p + off, len);
            dt_map_release(p + off, len);
        }
        /* the record: name NUL dtype NUL ndim shape[ndim] (int64 little-endian) crc32c */
        int64_t nd = t->ndim;
        dt_sha256_update(&h, t->name, strlen(t->name) + 1);
        dt_sha256_update(&h, t->dtype, strlen(t->dtype) + 1);
        dt_sha256_update(&h, &nd, sizeof nd);
        dt_sha256_update(&h, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
        dt_sha256_update(&h, &crc, sizeof crc);
    }
    unsigned char d[DT_SHA256_BYTES];
    dt_sha256_final(&h, d);
    dt_sha256_hex(d, hex);
}

int dt_adapter_base_fingerprint(const char *hfdir, char hex[DT_ADAPTER_FP_HEX], dt_error *err) {
    dt_hfw *w = NULL;
    if (dt_hfw_open(hfdir, &w, err)) return err->code;
    dt_hfw_fingerprint(w, hex);
    dt_hfw_close(w);
    return DT_OK;
}

/* ---------------- against the plan's model ---------------- */

/* The pgroup of m for an in-block linear lin's tensor ("lora_A.weight"), or an outer module. */
static const dt_pgroup *find_group(const dt_pgroups *s, const char *module, const char *tensor, int64_t layer,
                                   int in_block) {
    for (int i = 0; i < s->n; i++) {
        const dt_pgroup *g = &s->g[i];
        if (g->in_block != in_block || strcmp(g->tensor, tensor)) continue;
        if (in_block ? strcmp(g->module, module) || layer < g->first_layer || layer >= g->first_layer + g->n_layers
                     : !ends_with(module, g->module))
            continue;
        return g;
    }
    return NULL;
}

int dt_adapter_check_model(const dt_adapter *a, const dt_model *m, dt_error *err) {
    if (m->family != a->cfg.family)
        return dt_errorf(err, DT_EINVAL, "adapter: made for a %s model, the model is %s (%s): use an adapter "
                         "trained on this model", dt_family_name(a->cfg.family), m->name, dt_family_name(m->family));
    dt_finetune ft = a->cfg.ft;
    ft.method = DT_FT_LORA;
    ft.lora_target_all = 1;
    ft.modules_to_save.n = 0;   /* a saved module keeps its base shape: looked up as a frozen tensor */
    dt_pgroups *s = malloc(sizeof *s);
    if (!s) return dt_errorf(err, DT_ENOMEM, "adapter: out of memory");
    int rc = dt_model_pgroups(m, &ft, DT_DTYPE_FP32, DT_ROLE_POLICY, s, err);
    if (rc) dt_error_prefix(err, "adapter (r %lld) on %s", (long long)ft.lora_rank, m->name);
    for (int i = 0; !rc && i < a->n; i++) {
        const dt_adapter_entry *e = &a->e[i];
        int64_t layer = 0;
        const char *lin = NULL;
        if (dt_adapter_is_score_head(a, e)) {   /* [num_labels, hidden]: the plan's model must be the classifier */
            if (m->num_labels < 1 || e->shape[0] != m->num_labels || e->shape[1] != m->hidden || e->ndim != 2)
                rc = dt_errorf(err, DT_EINVAL, "adapter tensor '%s' is [%lld, %lld]: a reward model's score head; "
                               "the plan's %s %s: plan it with --objective rm", e->name, (long long)e->shape[0],
                               (long long)e->shape[1], m->name,
                               m->num_labels < 1 ? "is a causal LM" : "has another shape");
            continue;
        }
        int in_block = block_linear(m->family, e->module, &layer, &lin);
        const char *tensor = e->kind == DT_ADAPTER_LORA_A ? "lora_A.weight"
                             : e->kind == DT_ADAPTER_LORA_B ? "lora_B.weight"
                             : ends_with(e->name, ".bias") ? "bias" : "weight";
        const dt_pgroup *g = find_group(s, in_block ? lin : e->module, tensor, layer, in_block);
        if (!g) {
            rc = dt_errorf(err, DT_EINVAL, "adapter tensor '%s': %s has no such module%s: use an adapter trained on "
                           "this model", e->name, m->name, in_block && layer >= m->n_layer ? " (a block past its last)" : "");
            break;
        }
        int64_t rows = g->rows, cols = g->cols;
        if (g->tensor[0] != 'l' && g->rows == 1) rows = cols, cols = 1;   /* vectors: [n] */
        if (e->shape[0] != rows || e->shape[1] != cols)
            rc = dt_errorf(err, DT_EINVAL, "adapter tensor '%s' is [%lld, %lld]; %s needs [%lld, %lld]: the adapter "
                           "was trained on another model", e->name, (long long)e->shape[0], (long long)e->shape[1],
                           m->name, (long long)rows, (long long)cols);
    }
    free(s);
    return rc;
}

/* ---------------- against a base model directory ---------------- */

/* The base's key with (bare = 0) or without (bare = 1) the family's prefix. */
static int base_key(const dt_adapter *a, const dt_adapter_entry *e, int bare, char *key, size_t n) {
    const char *pre = bare ? "" : family_prefix(a->cfg.family);
    int len = e->kind == DT_ADAPTER_SAVED ? snprintf(key, n, "%s%s", pre, e->name)
                                          : snprintf(key, n, "%s%s.weight", pre, e->module);
    return len >= 0 && (size_t)len < n;
}

const dt_hfw_entry *dt_adapter_base_find(const dt_adapter *a, const dt_adapter_entry *e, const dt_hfw *w, char *key,
                                         size_t n) {
    /* GPT2LMHeadModel's keys ("transformer.h.0...."), else GPT2Model's bare ones
     * ("h.0....", openai-community/gpt2's own file), as dt_hf_load_dir accepts both */
    const dt_hfw_entry *be = base_key(a, e, 0, key, n) ? dt_hfw_find(w, key) : NULL;
    if (!be && *family_prefix(a->cfg.family) && base_key(a, e, 1, key, n)) {
        be = dt_hfw_find(w, key);
        if (!be) base_key(a, e, 0, key, n);   /* the message names the full key */
    }
    return be;
}

/* One adapter tensor against the base's tensor at key: a saved module has its shape; a LoRA
 * pair's in / out are the linear's (Conv1D [in, out] with fan_in_fan_out). */
static int check_against(const dt_adapter *a, const dt_adapter_entry *e, const dt_st_tensor *t, const char *key,
                         const char *hfdir, dt_error *err) {
    int64_t r0 = t->shape[0], r1 = t->ndim > 1 ? t->shape[1] : 1;
    if (e->kind == DT_ADAPTER_SAVED) {
        if (e->shape[0] == r0 && e->shape[1] == r1 && e->ndim == t->ndim) return DT_OK;
        return dt_errorf(err, DT_EINVAL, "%s: '%s' is [%lld, %lld], %s's '%s' [%lld, %lld]: the adapter was trained "
                         "on another model", a->dir, e->name, (long long)e->shape[0], (long long)e->shape[1], hfdir,
                         key, (long long)r0, (long long)r1);
    }
    char bname[DT_ST_NAME_MAX + 16];
    snprintf(bname, sizeof bname, "%s%s", e->module, SUFFIX_B);
    const dt_adapter_entry *b = dt_adapter_find(a, bname);
    int fif = a->fan_in_fan_out;
    int64_t out = fif ? r1 : r0, in = fif ? r0 : r1;
    if (b && t->ndim == 2 && e->shape[1] == in && b->shape[0] == out) return DT_OK;
    return dt_errorf(err, DT_EINVAL, "%s: '%s' adapts [out %lld, in %lld] but %s's '%s' is %s[%lld, %lld]: the "
                     "adapter was trained on another model", a->dir, e->module, (long long)(b ? b->shape[0] : 0),
                     (long long)e->shape[1], hfdir, key, fif ? "a Conv1D [in, out] " : "", (long long)r0,
                     (long long)r1);
}

int dt_adapter_check_hfw(const dt_adapter *a, const dt_hfw *w, const char *hfdir, dt_error *err) {
    char key[DT_ST_NAME_MAX + 32];
    for (int k = 0; k < a->n; k++) {
        const dt_adapter_entry *e = &a->e[k];
        if (e->kind == DT_ADAPTER_LORA_B) continue;
        const dt_hfw_entry *be = dt_adapter_base_find(a, e, w, key, sizeof key);
        if (!be && dt_adapter_is_score_head(a, e)) continue;   /* a causal-LM base: PEFT adds a fresh head, the adapter's replaces it */
        if (!be)
            return dt_errorf(err, DT_EINVAL, "%s: the adapter's '%s' has no base tensor '%s' in %s: use the model "
                             "the adapter was trained on", a->dir, e->name, key, hfdir);
        if (check_against(a, e, be->t, key, hfdir, err)) return err->code;
    }
    if (!a->cfg.base_fingerprint[0]) return DT_OK;
    char have[DT_ADAPTER_FP_HEX];
    dt_hfw_fingerprint(w, have);
    if (!strcmp(have, a->cfg.base_fingerprint)) return DT_OK;
    return dt_errorf(err, DT_EINVAL, "%s: the adapter was trained on another base (fingerprint %.12s..., %s has "
                     "%.12s...): use the model it was trained on", a->dir, a->cfg.base_fingerprint, hfdir, have);
}

int dt_adapter_check_base(const dt_adapter *a, const char *hfdir, dt_error *err) {
    dt_hfw *w = NULL;
    if (dt_hfw_open(hfdir, &w, err)) return err->code;
    int rc = dt_adapter_check_hfw(a, w, hfdir, err);
    dt_hfw_close(w);
    return rc;
}

