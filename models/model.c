/* model.c — resolving architectures (catalog, config.json, bare parameter count).
 * Their arithmetic (counts, FLOPs, saved activations) is family.c's, from the family
 * description. See dt_model.h and docs/models.md.
 *
 * Notation (docs/models.md): L layers, h hidden, a = n_head, k = n_kv_head,
 * d = head_dim, f = ffn, V = vocab, P = max_pos. Counts are elements. */
#include "dt_model.h"
#include "dt_consts.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dt_json.h"
#include "dt_units.h"

/* The catalog, embedded at build time by cmake/EmbedFiles.cmake (name = file stem). */
typedef struct { const char *name; const char *text; } dt_embedded_file;
extern const dt_embedded_file dt_catalog_files[];
extern const int dt_catalog_files_count;


/* HF defaults when a llama-family config omits a key (LlamaConfig defaults). */
#define DT_LLAMA_DEFAULT_RMS_EPS    1e-6
#define DT_LLAMA_DEFAULT_ROPE_THETA 10000.0
/* HF GPT2Config default layer_norm_epsilon. */
#define DT_GPT2_DEFAULT_LN_EPS 1e-5
/* HF MistralConfig's sliding_window when the key is absent (Mistral-7B-v0.1's window). */
#define DT_MISTRAL_DEFAULT_WINDOW 4096

/* ------------------------------------------------------------------ catalog */

/* Canonical catalog names: the lower-cased last component of each file's
 * "_name_or_path" ("Qwen/Qwen3-0.6B" -> "qwen3-0.6b"), which equals the file stem
 * (llava-hf's "-hf" suffix dropped).
 * Taken from the text rather than the embedded name because CMake's NAME_WE
 * stem stops at the first dot ("qwen3-0.6b.json" -> "qwen3-0"). Computed once. */
#define DT_CATALOG_MAX 256
#define DT_CATALOG_CONVERTED_SUFFIX "-hf"
static char catalog_names[DT_CATALOG_MAX][sizeof(((dt_model *)0)->name)];
static pthread_once_t catalog_once = PTHREAD_ONCE_INIT;

static void catalog_init(void) {
    for (int i = 0; i < dt_catalog_files_count && i < DT_CATALOG_MAX; i++) {
        char *dst = catalog_names[i];
        snprintf(dst, sizeof catalog_names[i], "%s", dt_catalog_files[i].name);
        cJSON *root = cJSON_Parse(dt_catalog_files[i].text);
        const cJSON *np = cJSON_GetObjectItemCaseSensitive(root, "_name_or_path");
        if (cJSON_IsString(np)) {
            const char *base = strrchr(np->valuestring, '/');
            base = base ? base + 1 : np->valuestring;
            if (*base) snprintf(dst, sizeof catalog_names[i], "%s", base);
        }
        /* llava-hf's transformers-format conversions end in "-hf" (llava-hf/llava-1.5-7b-hf):
         * the catalog names the model, llava-1.5-7b, as the file stem does */
        const size_t len = strlen(dst);
        if (len > strlen(DT_CATALOG_CONVERTED_SUFFIX) &&
            !strcmp(dst + len - strlen(DT_CATALOG_CONVERTED_SUFFIX), DT_CATALOG_CONVERTED_SUFFIX))
            dst[len - strlen(DT_CATALOG_CONVERTED_SUFFIX)] = '\0';
        for (char *c = dst; *c; c++) *c = (char)tolower((unsigned char)*c);
        cJSON_Delete(root);
    }
}

int dt_model_catalog_count(void) {
    return dt_catalog_files_count < DT_CATALOG_MAX ? dt_catalog_files_count : DT_CATALOG_MAX;
}

const char *dt_model_catalog_name(int i) {
    if (i < 0 || i >= dt_model_catalog_count()) return NULL;
    pthread_once(&catalog_once, catalog_init);
    return catalog_names[i];
}

static int str_ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

static void set_name(dt_model *m, const char *name) {
    snprintf(m->name, sizeof m->name, "%s", name ? name : "");
}

/* ------------------------------------------------------------ config.json */

/* Reads key as a whole number in [1, max]. Absent or null: *out untouched and
 * *present = 0 (when present is non-NULL; otherwise absence is an error). */
static int json_int(const cJSON *root, const char *key, int64_t max, int64_t *out, int *present,
                    const char *name, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        if (present) {
            *present = 0;
            return DT_OK;
        }
        return dt_errorf(err, DT_EINVAL, "%s: config.json is missing the required key '%s'", name, key);
    }
    if (!cJSON_IsNumber(v))
        return dt_errorf(err, DT_EINVAL, "%s: config.json key '%s' must be a number", name, key);
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x) || x < 1 || x > (double)max)
        return dt_errorf(err, DT_EINVAL,
                         "%s: config.json key '%s' must be a whole number in 1..%lld (got %g)", name,
                         key, (long long)max, x);
    *out = (int64_t)x;
    if (present) *present = 1;
    return DT_OK;
}

/* Optional positive finite real; absent or null leaves *out untouched. */
static int json_pos_real(const cJSON *root, const char *key, double *out, const char *name,
                         dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return DT_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
        return dt_errorf(err, DT_EINVAL, "%s: config.json key '%s' must be a positive number", name,
                         key);
    *out = v->valuedouble;
    return DT_OK;
}

/* Optional boolean; absent or null leaves *out untouched. */
static int json_bool(const cJSON *root, const char *key, int *out, const char *name, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return DT_OK;
    if (!cJSON_IsBool(v))
        return dt_errorf(err, DT_EINVAL, "%s: config.json key '%s' must be true or false", name, key);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return DT_OK;
}

/* Optional string that must equal one of the allowed values (activation functions). */
static int json_str_in(const cJSON *root, const char *key, const char *const *allowed,
                       const char *name, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return DT_OK;
    if (!cJSON_IsString(v))
        return dt_errorf(err, DT_EINVAL, "%s: config.json key '%s' must be a string", name, key);
    char list[128] = "";
    for (int i = 0; allowed[i]; i++) {
        if (strcmp(v->valuestring, allowed[i]) == 0) return DT_OK;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'", i ? ", " : "", allowed[i]);
    }
    return dt_errorf(err, DT_EINVAL, "%s: config.json key '%s' is '%s', which this family does not implement (expected %s)",
                     name, key, v->valuestring, list);
}

/* ---- keys that change the architecture: refused when the plan cannot hold them ---- */

/* RoPE scaling types that only rescale the rotary frequencies (no parameters, no
 * FLOPs, the same attention): the plan's shape is unchanged and the plan carries them
 * (dt_rope_scaling). yarn / longrope also scale the attention logits
 * (attention_factor, per-dimension factors), mrope splits the rotary dimensions for
 * images: a different attention than the plan describes. */
static const dt_rope_type k_rope_types[] = {DT_ROPE_DEFAULT, DT_ROPE_LINEAR, DT_ROPE_DYNAMIC, DT_ROPE_LLAMA3};
#define N_ROPE_TYPES ((int)(sizeof k_rope_types / sizeof k_rope_types[0]))

/* Reads config.json's RoPE scaling object rs (the value of key "rope_scaling" or
 * "rope_parameters"; NULL or null: nothing) into *out. *named = 1 when it names a
 * rope_type (or the older "type"). The parameters the type uses (dt_rope_type_uses) are
 * required, as HF's _validate_*_rope_parameters require them, except dynamic's
 * original_max_position_embeddings, which defaults to max_pos (HF's dynamic NTK scales
 * beyond config.max_position_embeddings). Keys the type does not use are ignored, as
 * HF only warns about them. */
static int parse_rope_scaling(const cJSON *rs, const char *key, int64_t max_pos, const char *name,
                              dt_rope_scaling *out, int *named, dt_error *err) {
    memset(out, 0, sizeof *out);
    *named = 0;
    if (!rs || cJSON_IsNull(rs)) return DT_OK;
    if (!cJSON_IsObject(rs))
        return dt_errorf(err, DT_EINVAL, "%s: config.json key '%s' must be an object or null", name, key);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(rs, "type");   /* transformers < 4.45 spelling */
    if (!t || cJSON_IsNull(t)) return DT_OK;                   /* e.g. only rope_theta: the default */
    if (!cJSON_IsString(t))
        return dt_errorf(err, DT_EINVAL, "%s: config.json '%s.rope_type' must be a string", name, key);
    int i = 0;
    while (i < N_ROPE_TYPES && strcmp(t->valuestring, dt_rope_type_name(k_rope_types[i]))) i++;
    if (i == N_ROPE_TYPES)
        return dt_errorf(err, DT_EINVAL,
                         "%s: config.json '%s': rope_type \"%s\" is not modelled (it changes the attention, not only "
                         "the RoPE frequencies); supported: default, linear, dynamic, llama3",
                         name, key, t->valuestring);
    out->type = k_rope_types[i];
    *named = 1;
    for (int p = 0; p < DT_ROPE_N_PARAMS; p++) {
        if (!dt_rope_type_uses(out->type, (dt_rope_param)p)) continue;
        const char *pk = dt_rope_param_key((dt_rope_param)p);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(rs, pk);
        if (!v || cJSON_IsNull(v)) {
            if (out->type == DT_ROPE_DYNAMIC && p == DT_ROPE_ORIGINAL_MAX_POS) {
                out->original_max_pos = max_pos;
                continue;
            }
            return dt_errorf(err, DT_EINVAL, "%s: config.json '%s.%s' is missing: rope_type \"%s\" needs it", name,
                             key, pk, t->valuestring);
        }
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            return dt_errorf(err, DT_EINVAL, "%s: config.json '%s.%s' must be a number", name, key, pk);
        double x = v->valuedouble;
        switch ((dt_rope_param)p) {
        case DT_ROPE_FACTOR: out->factor = x; break;
        case DT_ROPE_LOW_FREQ_FACTOR: out->low_freq_factor = x; break;
        case DT_ROPE_HIGH_FREQ_FACTOR: out->high_freq_factor = x; break;
        case DT_ROPE_ORIGINAL_MAX_POS:
            if (x != floor(x) || x < 1 || x > (double)DT_MAX_POS)
                return dt_errorf(err, DT_EINVAL, "%s: config.json '%s.%s' must be a whole number in 1..%lld (got %g)",
                                 name, key, pk, (long long)DT_MAX_POS, x);
            out->original_max_pos = (int64_t)x;
            break;
        case DT_ROPE_N_PARAMS: break;
        }
    }
    char where[DT_ERROR_MSG_MAX / 2];
    snprintf(where, sizeof where, "%s: config.json '%s'", name, key);
    return dt_rope_scaling_check(out, max_pos, where, err);
}

/* "rope_scaling" (transformers 4.x) and "rope_parameters" (5.x) say the same thing; a
 * config may carry both (5.x writes rope_parameters and reads rope_scaling as an alias).
 * The one that names a rope_type is used; if both do, they must agree. */
static int read_rope_scaling(const cJSON *root, const cJSON *rp, int64_t max_pos, const char *name,
                             dt_rope_scaling *out, dt_error *err) {
    dt_rope_scaling rs, rpar;
    int rs_named, rp_named, rc;
    if ((rc = parse_rope_scaling(cJSON_GetObjectItemCaseSensitive(root, "rope_scaling"), "rope_scaling", max_pos,
                                 name, &rs, &rs_named, err)) ||
        (rc = parse_rope_scaling(rp, "rope_parameters", max_pos, name, &rpar, &rp_named, err)))
        return rc;
    if (rs_named && rp_named && memcmp(&rs, &rpar, sizeof rs))
        return dt_errorf(err, DT_EINVAL,
                         "%s: config.json 'rope_scaling' (%s) and 'rope_parameters' (%s) describe different RoPE "
                         "scalings; keep one",
                         name, dt_rope_type_name(rs.type), dt_rope_type_name(rpar.type));
    *out = rp_named ? rpar : rs;
    return DT_OK;
}

/* Mixture-of-experts keys: more than one expert per block is not a dense MLP. */
static int check_experts(const cJSON *root, const char *name, dt_error *err) {
    static const char *const keys[] = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", NULL};
    for (int i = 0; keys[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
        if (!v || cJSON_IsNull(v)) continue;
        if (!cJSON_IsNumber(v))
            return dt_errorf(err, DT_EINVAL, "%s: config.json key '%s' must be a number", name, keys[i]);
        if (v->valuedouble > 1)
            return dt_errorf(err, DT_EINVAL,
                             "%s: config.json '%s': %g (a mixture of experts) is not modelled: dtplan plans one dense "
                             "MLP per block",
                             name, keys[i], v->valuedouble);
    }
    return DT_OK;
}

/* Sliding-window attention changes what attention stores and computes; a window that
 * covers every position is full attention. mistral uses sliding_window whenever it is
 * not null (4096 when absent); qwen2/qwen3 only with use_sliding_window: true; newer
 * configs also list per-layer "layer_types". */
static int check_sliding_window(const cJSON *root, const char *type, int64_t max_pos, const char *name,
                                dt_error *err) {
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        const cJSON *e;
        if (!cJSON_IsArray(lt))
            return dt_errorf(err, DT_EINVAL, "%s: config.json key 'layer_types' must be an array", name);
        cJSON_ArrayForEach(e, lt) {
            if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention"))
                return dt_errorf(err, DT_EINVAL,
                                 "%s: config.json 'layer_types' lists a layer that is not \"full_attention\" "
                                 "(sliding-window attention is not modelled)", name);
        }
    }
    int mistral = !strcmp(type, "mistral"), qwen = !strcmp(type, "qwen2") || !strcmp(type, "qwen3");
    if (!mistral && !qwen) return DT_OK;   /* LlamaConfig has no sliding window */
    int use = mistral;
    int rc = json_bool(root, "use_sliding_window", &use, name, err);
    if (rc) return rc;
    if (!use) return DT_OK;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    if (w && cJSON_IsNull(w)) return DT_OK;
    int64_t window = DT_MISTRAL_DEFAULT_WINDOW;
    if (w && (rc = json_int(root, "sliding_window", DT_MAX_POS, &window, NULL, name, err))) return rc;
    if (!w && qwen) return DT_OK;   /* Qwen2Config's default window applies only when set */
    if (window >= max_pos) return DT_OK;   /* the window covers every position: full attention */
    return dt_errorf(err, DT_EINVAL,
                     "%s: config.json 'sliding_window': %lld%s is not modelled (dtplan plans full causal attention "
                     "over all %lld positions); use a config without sliding-window attention",
                     name, (long long)window,
                     qwen ? " with 'use_sliding_window': true" : w ? "" : " (MistralConfig's default when absent)",
                     (long long)max_pos);
}

static int parse_gpt2(const cJSON *root, const char *name, dt_model *m, dt_error *err) {
    int rc, present;
    m->family = DT_FAMILY_GPT2;
    if ((rc = json_int(root, "n_embd", DT_MAX_HIDDEN, &m->hidden, NULL, name, err))) return rc;
    if ((rc = json_int(root, "n_layer", DT_MAX_LAYERS, &m->n_layer, NULL, name, err))) return rc;
    if ((rc = json_int(root, "n_head", DT_MAX_HEADS, &m->n_head, NULL, name, err))) return rc;
    if ((rc = json_int(root, "vocab_size", DT_MAX_VOCAB, &m->vocab, NULL, name, err))) return rc;
    if ((rc = json_int(root, "n_positions", DT_MAX_POS, &m->max_pos, &present, name, err))) return rc;
    if (!present && (rc = json_int(root, "n_ctx", DT_MAX_POS, &m->max_pos, NULL, name, err)))
        return dt_error_prefix(err, "(neither 'n_positions' nor 'n_ctx' given)"), rc;
    m->ffn = DT_GPT2_FFN_MULT * m->hidden;
    if ((rc = json_int(root, "n_inner", DT_MAX_FFN, &m->ffn, &present, name, err))) return rc;
    if (m->hidden % m->n_head != 0)
        return dt_errorf(err, DT_EINVAL,
                         "%s: config.json 'n_embd' (%lld) must be divisible by 'n_head' (%lld)", name,
                         (long long)m->hidden, (long long)m->n_head);
    m->n_kv_head = m->n_head;
    m->head_dim = m->hidden / m->n_head;
    m->norm_eps = DT_GPT2_DEFAULT_LN_EPS;
    if ((rc = json_pos_real(root, "layer_norm_epsilon", &m->norm_eps, name, err))) return rc;
    m->tied_embeddings = 1;   /* GPT2LMHeadModel ties lm_head to wte */
    if ((rc = json_bool(root, "tie_word_embeddings", &m->tied_embeddings, name, err))) return rc;
    if (!m->tied_embeddings)
        return dt_errorf(err, DT_EINVAL,
                         "%s: config.json 'tie_word_embeddings': false is not supported for gpt2: dtplan's gpt2 ties "
                         "lm_head to wte as GPT2LMHeadModel does (remove the key)", name);
    int cross = 0;
    if ((rc = json_bool(root, "add_cross_attention", &cross, name, err))) return rc;
    if (cross)
        return dt_errorf(err, DT_EINVAL,
                         "%s: config.json 'add_cross_attention': true (an encoder-decoder gpt2 with cross-attention "
                         "weights) is not supported: dtplan models the decoder-only gpt2", name);
    static const char *const acts[] = {"gelu_new", "gelu", "gelu_pytorch_tanh", NULL};
    if ((rc = json_str_in(root, "activation_function", acts, name, err))) return rc;
    m->qkv_bias = 1;
    m->qk_norm = 0;
    m->rope_theta = 0;
    return DT_OK;
}

static int parse_llama(const cJSON *root, const char *type, const char *name, dt_model *m,
                       dt_error *err) {
    int rc, present;
    m->family = DT_FAMILY_LLAMA;
    if ((rc = json_int(root, "hidden_size", DT_MAX_HIDDEN, &m->hidden, NULL, name, err))) return rc;
    if ((rc = json_int(root, "num_hidden_layers", DT_MAX_LAYERS, &m->n_layer, NULL, name, err))) return rc;
    if ((rc = json_int(root, "num_attention_heads", DT_MAX_HEADS, &m->n_head, NULL, name, err))) return rc;
    if ((rc = json_int(root, "intermediate_size", DT_MAX_FFN, &m->ffn, NULL, name, err))) return rc;
    if ((rc = json_int(root, "vocab_size", DT_MAX_VOCAB, &m->vocab, NULL, name, err))) return rc;
    if ((rc = json_int(root, "max_position_embeddings", DT_MAX_POS, &m->max_pos, NULL, name, err)))
        return rc;
    m->n_kv_head = m->n_head;   /* HF: num_key_value_heads defaults to num_attention_heads */
    if ((rc = json_int(root, "num_key_value_heads", DT_MAX_HEADS, &m->n_kv_head, &present, name, err)))
        return rc;
    if ((rc = json_int(root, "head_dim", DT_MAX_HEAD_DIM, &m->head_dim, &present, name, err))) return rc;
    if (!present) {
        if (m->hidden % m->n_head != 0)
            return dt_errorf(err, DT_EINVAL,
                             "%s: config.json 'hidden_size' (%lld) is not divisible by "
                             "'num_attention_heads' (%lld) and no 'head_dim' is given",
                             name, (long long)m->hidden, (long long)m->n_head);
        m->head_dim = m->hidden / m->n_head;
    }
    m->norm_eps = DT_LLAMA_DEFAULT_RMS_EPS;
    if ((rc = json_pos_real(root, "rms_norm_eps", &m->norm_eps, name, err))) return rc;
    /* RoPE base: "rope_theta" (transformers <= 4.x) or "rope_parameters": {"rope_theta"} (5.x). */
    m->rope_theta = DT_LLAMA_DEFAULT_ROPE_THETA;
    if ((rc = json_pos_real(root, "rope_theta", &m->rope_theta, name, err))) return rc;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    if (rp && !cJSON_IsNull(rp)) {
        if (!cJSON_IsObject(rp))
            return dt_errorf(err, DT_EINVAL, "%s: config.json key 'rope_parameters' must be an object",
                             name);
        if ((rc = json_pos_real(rp, "rope_theta", &m->rope_theta, name, err)))
            return dt_error_prefix(err, "in 'rope_parameters'"), rc;
    }
    m->tied_embeddings = 0;   /* LlamaConfig / Qwen2Config / Qwen3Config default */
    if ((rc = json_bool(root, "tie_word_embeddings", &m->tied_embeddings, name, err))) return rc;
    static const char *const acts[] = {"silu", "swish", NULL};
    if ((rc = json_str_in(root, "hidden_act", acts, name, err))) return rc;

    /* Biases. Qwen2 hard-codes bias on q/k/v (not o); llama/mistral/qwen3 put
     * attention_bias on q, k, v AND o, and mlp_bias on the MLP, which the llama
     * block here does not have: refuse rather than miscount. */
    int attention_bias = 0, mlp_bias = 0;
    if ((rc = json_bool(root, "attention_bias", &attention_bias, name, err))) return rc;
    if ((rc = json_bool(root, "mlp_bias", &mlp_bias, name, err))) return rc;
    int is_qwen2 = strcmp(type, "qwen2") == 0;
    if (!is_qwen2 && attention_bias)
        return dt_errorf(err, DT_EINVAL,
                         "%s: config.json 'attention_bias': true (bias on q/k/v/o) is not supported "
                         "for model_type '%s'; only Qwen2's q/k/v bias is",
                         name, type);
    if (mlp_bias)
        return dt_errorf(err, DT_EINVAL, "%s: config.json 'mlp_bias': true is not supported", name);
    m->qkv_bias = is_qwen2;
    m->qk_norm = strcmp(type, "qwen3") == 0;
    if ((rc = read_rope_scaling(root, rp, m->max_pos, name, &m->rope_scaling, err))) return rc;
    return check_sliding_window(root, type, m->max_pos, name, err);
}

/* The text model of root (one of our families); name as dt_model_from_config_json. */
static int text_from_root(const cJSON *root, const char *name, dt_model *out, dt_error *err) {
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!cJSON_IsString(mt))
        return dt_errorf(err, DT_EINVAL,
                         "%s: config.json has no string 'model_type' (expected gpt2, llama, mistral, "
                         "qwen2, qwen3 or llava)",
                         name);
    const char *type = mt->valuestring;
    int rc = check_experts(root, name, err);
    if (rc) return rc;
    if (strcmp(type, "gpt2") == 0) {
        rc = parse_gpt2(root, name, out, err);
    } else if (strcmp(type, "llama") == 0 || strcmp(type, "mistral") == 0 ||
               strcmp(type, "qwen2") == 0 || strcmp(type, "qwen3") == 0) {
        rc = parse_llama(root, type, name, out, err);
    } else {
        rc = dt_errorf(err, DT_EINVAL,
                       "%s: config.json 'model_type' is '%s' (supported: gpt2, llama, mistral, "
                       "qwen2, qwen3, llava)",
                       name, type);
    }
    if (rc == DT_OK) {
        set_name(out, name);
        out->derived = 0;
        rc = dt_model_validate(out, err);
    }
    return rc;
}

/* ---- LLaVA (transformers LlavaConfig): text_config + vision_config + the projector ---- */

/* LlavaConfig builds a text_config given as a dict through its model_type's config class,
 * so the keys a checkpoint omits take LlamaConfig's defaults (configuration_llama.py);
 * llava-hf/llava-1.5-7b-hf's text_config lists only what differs from them. */
static const struct { const char *key; double value; } k_llama_defaults[] = {
    {"vocab_size", 32000}, {"hidden_size", 4096}, {"intermediate_size", 11008},
    {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"max_position_embeddings", 2048},
};
/* CLIPVisionConfig / SiglipVisionConfig num_channels default; LlavaConfig's
 * vision_feature_layer and image_token_index defaults (configuration_llava.py). */
#define DT_VIT_DEFAULT_CHANNELS 3
#define DT_LLAVA_DEFAULT_FEATURE_LAYER (-2)
#define DT_LLAVA_DEFAULT_IMAGE_TOKEN 32000

/* text_config with LlamaConfig's defaults filled in (a new object the caller deletes). */
static cJSON *llava_text_config(const cJSON *root, const char *name, dt_error *err) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (tc && !cJSON_IsNull(tc) && !cJSON_IsObject(tc)) {
        dt_errorf(err, DT_EINVAL, "%s: config.json key 'text_config' must be an object", name);
        return NULL;
    }
    cJSON *t = tc && cJSON_IsObject(tc) ? cJSON_Duplicate(tc, 1) : cJSON_CreateObject();
    const cJSON *mt = t ? cJSON_GetObjectItemCaseSensitive(t, "model_type") : NULL;
    if (t && !mt) cJSON_AddStringToObject(t, "model_type", "llama");   /* LlavaConfig's default text model */
    mt = t ? cJSON_GetObjectItemCaseSensitive(t, "model_type") : NULL;
    const int llama = cJSON_IsString(mt) && !strcmp(mt->valuestring, "llama");
    for (size_t i = 0; t && llama && i < sizeof k_llama_defaults / sizeof k_llama_defaults[0]; i++)
        if (!cJSON_GetObjectItemCaseSensitive(t, k_llama_defaults[i].key))
            cJSON_AddNumberToObject(t, k_llama_defaults[i].key, k_llama_defaults[i].value);
    if (!t) dt_errorf(err, DT_ENOMEM, "%s: out of memory copying text_config", name);
    return t;
}

/* An optional whole number of either sign (vision_feature_layer, image_token_index). */
static int json_signed(const cJSON *root, const char *key, int64_t *out, const char *name, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return DT_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        fabs(v->valuedouble) > (double)DT_MAX_VOCAB)
        return dt_errorf(err, DT_EINVAL, "%s: config.json key '%s' must be one whole number%s", name, key,
                         cJSON_IsArray(v) ? " (a list of feature layers is not modelled: name one)" : "");
    *out = (int64_t)v->valuedouble;
    return DT_OK;
}

static int parse_vision(const cJSON *root, const char *name, dt_vision_tower *t, dt_error *err) {
    static const char *const keys[] = {"image_size", "patch_size", "hidden_size", "num_hidden_layers",
                                       "num_attention_heads", "intermediate_size"};
    const cJSON *vc = cJSON_GetObjectItemCaseSensitive(root, "vision_config");
    if (!cJSON_IsObject(vc))
        return dt_errorf(err, DT_EINVAL, "%s: a llava config.json needs a 'vision_config' object (the tower's "
                         "model_type, image_size, patch_size, hidden_size, num_hidden_layers, num_attention_heads, "
                         "intermediate_size), as llava-hf/llava-1.5-7b-hf's", name);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!cJSON_GetObjectItemCaseSensitive(vc, keys[i]))
            return dt_errorf(err, DT_EINVAL, "%s: vision_config has no '%s' (the tower's shape needs image_size, "
                             "patch_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size)",
                             name, keys[i]);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(vc, "model_type");
    const char *type = cJSON_IsString(mt) ? mt->valuestring : "clip_vision_model";   /* LlavaConfig's default */
    if (!strcmp(type, "clip_vision_model")) t->kind = DT_VIT_CLIP;
    else if (!strcmp(type, "siglip_vision_model")) t->kind = DT_VIT_SIGLIP, t->head = 1;
    else
        return dt_errorf(err, DT_EINVAL, "%s: vision_config model_type '%s' (supported: clip_vision_model, "
                         "siglip_vision_model)", name, type);
    int rc;
    t->channels = DT_VIT_DEFAULT_CHANNELS;
    if ((rc = json_int(vc, "image_size", DT_MAX_POS, &t->image_size, NULL, name, err)) ||
        (rc = json_int(vc, "patch_size", DT_MAX_POS, &t->patch, NULL, name, err)) ||
        (rc = json_int(vc, "hidden_size", DT_MAX_HIDDEN, &t->hidden, NULL, name, err)) ||
        (rc = json_int(vc, "num_hidden_layers", DT_MAX_LAYERS, &t->n_layer, NULL, name, err)) ||
        (rc = json_int(vc, "num_attention_heads", DT_MAX_HEADS, &t->n_head, NULL, name, err)) ||
        (rc = json_int(vc, "intermediate_size", DT_MAX_FFN, &t->ffn, NULL, name, err)) ||
        (rc = json_int(vc, "num_channels", DT_MAX_HEADS, &t->channels, &(int){0}, name, err)) ||
        (rc = json_bool(vc, "vision_use_head", &t->head, name, err)))
        return dt_error_prefix(err, "vision_config"), rc;
    if (t->kind == DT_VIT_CLIP) t->head = 0;
    static const char *const acts[] = {"quick_gelu", "gelu_pytorch_tanh", "gelu", NULL};
    return json_str_in(vc, "hidden_act", acts, name, err);
}

static int parse_llava(const cJSON *root, const char *name, dt_model *lm, dt_vlm *v, dt_error *err) {
    int rc = parse_vision(root, name, &v->tower, err);
    if (rc) return rc;
    v->tower.select_layer = DT_LLAVA_DEFAULT_FEATURE_LAYER;
    v->image_token_index = DT_LLAVA_DEFAULT_IMAGE_TOKEN;
    if ((rc = json_signed(root, "vision_feature_layer", &v->tower.select_layer, name, err)) ||
        (rc = json_signed(root, "image_token_index", &v->image_token_index, name, err)) ||
        (rc = json_signed(root, "image_token_id", &v->image_token_index, name, err)))   /* transformers 5 */
        return rc;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "vision_feature_select_strategy");
    if (st && !(cJSON_IsString(st) && (!strcmp(st->valuestring, "default") || !strcmp(st->valuestring, "full"))))
        return dt_errorf(err, DT_EINVAL, "%s: vision_feature_select_strategy must be \"default\" (drop the class "
                         "token) or \"full\"", name);
    v->tower.keep_cls = st && !strcmp(st->valuestring, "full");
    int bias = 1;   /* LlavaConfig multimodal_projector_bias default */
    if ((rc = json_bool(root, "multimodal_projector_bias", &bias, name, err))) return rc;
    if (!bias)
        return dt_errorf(err, DT_EINVAL, "%s: multimodal_projector_bias false is not modelled (LLaVA's projector "
                         "has biases)", name);
    static const char *const acts[] = {"gelu", NULL};
    if ((rc = json_str_in(root, "projector_hidden_act", acts, name, err))) return rc;
    v->projector = DT_PROJ_MLP2X;
    v->images_per_sample = 1;
    v->stage = DT_VLM_FULL;
    cJSON *tc = llava_text_config(root, name, err);
    if (!tc) return err->code;
    rc = text_from_root(tc, name, lm, err);
    cJSON_Delete(tc);
    if (rc) return dt_error_prefix(err, "text_config"), rc;
    return dt_vlm_check(v, name, err);
}

int dt_model_from_config_json_vlm(const char *json, const char *name, dt_model *out, dt_vlm *v, dt_error *err) {
    if (!json || !out || !v) return dt_errorf(err, DT_EINTERNAL, "dt_model_from_config_json: NULL argument");
    if (!name) name = "config";
    memset(out, 0, sizeof *out);
    memset(v, 0, sizeof *v);
    cJSON *root = NULL;
    int rc = dt_json_parse(json, name, &root, err);
    if (rc) return rc;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!cJSON_IsObject(root))
        rc = dt_errorf(err, DT_EINVAL, "%s: config.json must be a JSON object", name);
    else if (cJSON_IsString(mt) && !strcmp(mt->valuestring, "llava"))
        rc = parse_llava(root, name, out, v, err);
    else
        rc = text_from_root(root, name, out, err);
    if (!rc) set_name(out, name);
    cJSON_Delete(root);
    return rc;
}

/* A vision-language model where a caller takes text models only: one line naming the way. */
static int refuse_vlm(const dt_vlm *v, const char *name, dt_error *err) {
    if (!dt_vlm_active(v)) return DT_OK;
    return dt_errorf(err, DT_EINVAL, "%s: a vision-language model (LLaVA); only dtplan estimate / solve / simulate "
                     "plan it so far (docs/vlm.md)", name);
}

int dt_model_from_config_json(const char *json, const char *name, dt_model *out, dt_error *err) {
    dt_vlm v;
    int rc = dt_model_from_config_json_vlm(json, name, out, &v, err);
    return rc ? rc : refuse_vlm(&v, out->name, err);
}

/* Display name of a config path: the file stem, or for ".../Qwen3-0.6B/config.json"
 * the directory name (how HF checkouts are laid out). */
static void name_from_path(const char *path, char *name, size_t n) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strlen(base);
    if (len > 5 && str_ieq(base + len - 5, ".json")) len -= 5;
    if (len == 6 && strncmp(base, "config", 6) == 0 && base > path + 1) {
        const char *end = base - 1;   /* the '/' before the file name */
        const char *start = end;
        while (start > path && start[-1] != '/') start--;
        if (end > start) {
            snprintf(name, n, "%.*s", (int)(end - start), start);
            return;
        }
    }
    snprintf(name, n, "%.*s", (int)len, base);
}

int dt_model_catalog_hub_id(const char *name, char *out, size_t n) {
    int found = 0;
    for (int i = 0; name && i < dt_model_catalog_count() && !found; i++) {
        if (!str_ieq(dt_model_catalog_name(i), name)) continue;
        cJSON *root = cJSON_Parse(dt_catalog_files[i].text);
        const cJSON *np = cJSON_GetObjectItemCaseSensitive(root, "_name_or_path");
        if (cJSON_IsString(np) && strlen(np->valuestring) < n) {
            snprintf(out, n, "%s", np->valuestring);
            found = 1;
        }
        cJSON_Delete(root);
    }
    return found;
}

static int is_config_path(const char *s) {
    size_t len = strlen(s);
    return strchr(s, '/') != NULL || (len >= 5 && str_ieq(s + len - 5, ".json"));
}

int dt_model_resolve_vlm(const char *name_or_path, dt_model *out, dt_vlm *v, dt_error *err) {
    memset(v, 0, sizeof *v);
    if (!name_or_path || !*name_or_path)
        return dt_errorf(err, DT_EINVAL, "--model: empty model name (give a catalog name such as "
                                         "gpt2 or a path to a config.json)");
    if (is_config_path(name_or_path)) {
        char *text = NULL;
        int rc = dt_json_read_file(name_or_path, &text, NULL, err);
        if (rc == DT_EIO) err->code = rc = DT_EINVAL;   /* a wrong --model path is bad input */
        if (rc) return dt_error_prefix(err, "--model");
        char name[sizeof out->name];
        name_from_path(name_or_path, name, sizeof name);
        rc = dt_model_from_config_json_vlm(text, name, out, v, err);
        free(text);
        if (rc) dt_error_prefix(err, "--model");   /* the file the user named: say which option */
        return rc;
    }
    int n = dt_model_catalog_count();
    for (int i = 0; i < n; i++)
        if (str_ieq(dt_model_catalog_name(i), name_or_path))
            return dt_model_from_config_json_vlm(dt_catalog_files[i].text, dt_model_catalog_name(i), out, v,
                                                 err);
    char list[DT_ERROR_MSG_MAX / 2];
    size_t used = 0;
    list[0] = '\0';
    for (int i = 0; i < n && used + 1 < sizeof list; i++) {
        int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                         dt_model_catalog_name(i));
        if (w < 0) break;
        used += (size_t)w;
    }
    return dt_errorf(err, DT_EINVAL,
                     "--model: unknown model '%s' (catalog: %s; or give a path to a config.json)",
                     name_or_path, list);
}

int dt_model_resolve(const char *name_or_path, dt_model *out, dt_error *err) {
    dt_vlm v;
    int rc = dt_model_resolve_vlm(name_or_path, out, &v, err);
    return rc ? rc : refuse_vlm(&v, name_or_path, err);
}

/* Parameter counts and FLOPs: family.c, from the family description. */

/* ------------------------------------------------------ derived shapes */

/* Well-known llama-family decoder shapes (docs/models.md, "Derived shapes").
 * dt_model_for_params picks the anchor nearest the request (in log scale); if the
 * anchor's exact count is within DT_DERIVE_EXACT_TOL of it the anchor is used as
 * is, otherwise only the depth L is rescaled to land near the request. */
typedef struct {
    const char *source;
    int64_t hidden, n_layer, n_head, n_kv_head, head_dim, ffn, vocab;
    int tied;
} dt_anchor_shape;

static const dt_anchor_shape dt_anchors[] = {
    /* GPT-3 "Small"/"Medium"/"2.7B" widths (Brown et al. 2020, Table 2.1) as llama
     * blocks: SwiGLU ffn = 8/3·h rounded up to 256, Llama-2's 32000 vocabulary. */
    {"GPT-3 Small width, llama block", 768, 12, 12, 12, 64, 2048, 32000, 0},
    {"GPT-3 Medium width, llama block", 1024, 24, 16, 16, 64, 2816, 32000, 0},
    {"TinyLlama-1.1B", 2048, 22, 32, 4, 64, 5632, 32000, 0},
    {"GPT-3 2.7B width, llama block", 2560, 32, 20, 20, 128, 6912, 32000, 0},
    {"Llama-2-7B", 4096, 32, 32, 32, 128, 11008, 32000, 0},
    {"Llama-2-13B", 5120, 40, 40, 40, 128, 13824, 32000, 0},
    {"Qwen2.5-32B (without q/k/v bias)", 5120, 64, 40, 8, 128, 27648, 152064, 0},
    {"Llama-2-70B", 8192, 80, 64, 8, 128, 28672, 32000, 0},
    {"GPT-3 175B shape, llama block", 12288, 96, 96, 96, 128, 32768, 32000, 0},
};
#define DT_N_ANCHORS ((int)(sizeof dt_anchors / sizeof dt_anchors[0]))
#define DT_DERIVE_EXACT_TOL 0.05       /* use a well-known shape unchanged within 5% */
/* 100M: below this the embeddings (>= 2·32000·768 = 49M for the smallest anchor)
 * dominate and no "standard" shape is meaningful; use --model gpt2-tiny etc. */
#define DT_DERIVE_MIN_PARAMS INT64_C(100000000)
#define DT_DERIVE_MAX_PARAMS INT64_C(100000000000000)  /* 100T */
/* Llama-2 settings for the fields the anchors leave open. */
#define DT_DERIVE_MAX_POS 4096
#define DT_DERIVE_RMS_EPS 1e-5
#define DT_DERIVE_ROPE_THETA 10000.0

static void anchor_model(const dt_anchor_shape *a, dt_model *m) {
    memset(m, 0, sizeof *m);
    m->family = DT_FAMILY_LLAMA;
    m->hidden = a->hidden;
    m->n_layer = a->n_layer;
    m->n_head = a->n_head;
    m->n_kv_head = a->n_kv_head;
    m->head_dim = a->head_dim;
    m->ffn = a->ffn;
    m->vocab = a->vocab;
    m->max_pos = DT_DERIVE_MAX_POS;
    m->tied_embeddings = a->tied;
    m->norm_eps = DT_DERIVE_RMS_EPS;
    m->rope_theta = DT_DERIVE_ROPE_THETA;
    m->derived = 1;
}

int dt_model_for_params(int64_t n_params, dt_model *out, dt_error *err) {
    if (!out) return dt_errorf(err, DT_EINTERNAL, "dt_model_for_params: NULL model");
    if (n_params < DT_DERIVE_MIN_PARAMS || n_params > DT_DERIVE_MAX_PARAMS)
        return dt_errorf(err, DT_EINVAL,
                         "--params: %lld is outside the range a standard decoder shape is derived "
                         "for (100M..100T); give --model NAME or a config.json instead",
                         (long long)n_params);
    int best = 0;
    double best_dist = INFINITY;
    for (int i = 0; i < DT_N_ANCHORS; i++) {
        dt_model a;
        anchor_model(&dt_anchors[i], &a);
        double dist = fabs(log((double)dt_model_params(&a) / (double)n_params));
        if (dist < best_dist) {
            best_dist = dist;
            best = i;
        }
    }
    dt_model m;
    anchor_model(&dt_anchors[best], &m);
    int64_t have = dt_model_params(&m);
    if (fabs((double)have - (double)n_params) > DT_DERIVE_EXACT_TOL * (double)n_params) {
        int64_t fixed = dt_model_embedding_params(&m) + dt_model_head_params(&m);
        int64_t block = dt_model_block_params(&m);
        int64_t layers = (int64_t)llround((double)(n_params - fixed) / (double)block);
        if (layers < 1) layers = 1;
        if (layers > DT_MAX_LAYERS) layers = DT_MAX_LAYERS;
        m.n_layer = layers;
    }
    char count[32];
    dt_format_count(n_params, count, sizeof count);
    snprintf(m.name, sizeof m.name, "derived-%s", count);
    m.requested_params = n_params;
    int rc = dt_model_validate(&m, err);
    if (rc) return rc;
    *out = m;
    return DT_OK;
}

const char *dt_model_derived_source(const dt_model *m) {
    if (!m || !m->derived) return NULL;
    for (int i = 0; i < DT_N_ANCHORS; i++) {
        const dt_anchor_shape *a = &dt_anchors[i];
        if (a->hidden == m->hidden && a->n_head == m->n_head && a->n_kv_head == m->n_kv_head &&
            a->ffn == m->ffn && a->vocab == m->vocab)
            return a->source;
    }
    return NULL;
}
