/* finetune.c — the fine-tuning method's settings: defaults, names, range checks
 * (dt_finetune.h) and the plan's "finetune" section (dt_finetune_json.h,
 * docs/plan-format.md "finetune"). */
#include "dt_finetune.h"
#include "dt_finetune_json.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const k_method_names[] = {"full", "freeze", "lora", "qlora"};
#define N_METHODS ((int)(sizeof k_method_names / sizeof k_method_names[0]))

/* LLaMA-Factory lora_alpha default: None -> 2 x lora_rank (hparams/finetuning_args.py). */
#define DT_FT_ALPHA_OVER_RANK 2.0
/* bitsandbytes' allowed 4-bit block sizes (functional.py quantize_4bit: 4096 .. 32, powers of 2). */
#define DT_QUANT_BLOCK_MIN 32
#define DT_QUANT_BLOCK_MAX 4096
/* The module transformers' bitsandbytes integration leaves unquantised by default: the output
 * layer (integrations/bitsandbytes.py get_keys_to_not_convert: the tied / last module). */
#define DT_QUANT_DEFAULT_SKIP "lm_head"

void dt_finetune_defaults(dt_ft_method m, dt_finetune *out) {
    memset(out, 0, sizeof *out);
    out->method = m;
    if (m == DT_FT_FREEZE) out->trainable_layers = DT_FT_DEFAULT_TRAINABLE_LAYERS;
    if (m == DT_FT_LORA || m == DT_FT_QLORA) {
        out->lora_rank = DT_FT_DEFAULT_LORA_RANK;
        out->lora_alpha = DT_FT_ALPHA_OVER_RANK * DT_FT_DEFAULT_LORA_RANK;
        out->lora_target_all = 1;
        out->adapter_dtype = DT_DTYPE_FP32;
    }
    if (m == DT_FT_QLORA) {
        out->quant = DT_STORAGE_NF4;
        out->double_quant = 1;
        out->compute_dtype = DT_DTYPE_BF16;
        out->quant_block = DT_QUANT_BLOCK;
        out->quant_skip.n = 1;
        snprintf(out->quant_skip.name[0], DT_FT_NAME_MAX, "%s", DT_QUANT_DEFAULT_SKIP);
    }
}

const char *dt_ft_method_name(dt_ft_method m) {
    return (unsigned)m < (unsigned)N_METHODS ? k_method_names[m] : "?";
}

int dt_ft_method_parse(const char *s, dt_ft_method *out, dt_error *err) {
    for (int i = 0; i < N_METHODS; i++)
        if (s && !strcmp(s, k_method_names[i])) {
            *out = (dt_ft_method)i;
            return DT_OK;
        }
    return dt_errorf(err, DT_EINVAL, "--finetune '%s': not a method (full, freeze, lora or qlora)", s ? s : "");
}

int dt_ft_is_lora(const dt_finetune *ft) { return ft->method == DT_FT_LORA || ft->method == DT_FT_QLORA; }

int dt_ft_names_parse(const char *list, const char *what, dt_ft_names *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    const char *s = list ? list : "";
    while (*s) {
        while (*s == ',' || isspace((unsigned char)*s)) s++;
        if (!*s) break;
        const char *e = s;
        while (*e && *e != ',') e++;
        size_t len = (size_t)(e - s);
        while (len > 0 && isspace((unsigned char)s[len - 1])) len--;
        if (out->n == DT_FT_MAX_NAMES)
            return dt_errorf(err, DT_EINVAL, "%s: more than %d module names", what, DT_FT_MAX_NAMES);
        if (len >= DT_FT_NAME_MAX)
            return dt_errorf(err, DT_EINVAL, "%s: module name '%.*s' is longer than %d characters", what, (int)len, s,
                             DT_FT_NAME_MAX - 1);
        snprintf(out->name[out->n++], DT_FT_NAME_MAX, "%.*s", (int)len, s);
        s = e;
    }
    if (out->n == 0) return dt_errorf(err, DT_EINVAL, "%s: no module names (e.g. q_proj,v_proj)", what);
    return DT_OK;
}

int dt_ft_names_has(const dt_ft_names *list, const char *name) {
    for (int i = 0; i < list->n; i++)
        if (!strcmp(list->name[i], name)) return 1;
    return 0;
}

double dt_ft_lora_scale(const dt_finetune *ft) {
    if (ft->lora_rank <= 0) return 0.0;
    return ft->use_rslora ? ft->lora_alpha / sqrt((double)ft->lora_rank) : ft->lora_alpha / (double)ft->lora_rank;
}

int dt_finetune_check(const dt_finetune *ft, const char *where, dt_error *err) {
    if ((unsigned)ft->method >= (unsigned)N_METHODS)
        return dt_errorf(err, DT_EINVAL, "%s: unknown fine-tuning method %d", where, (int)ft->method);
    if (ft->method == DT_FT_FREEZE && ft->trainable_layers == 0)
        return dt_errorf(err, DT_EINVAL,
                         "%s: trainable_layers 0 trains no block (N > 0: the last N blocks, N < 0: the first |N|)",
                         where);
    if (!dt_ft_is_lora(ft)) return DT_OK;
    if (ft->lora_rank < 1)
        return dt_errorf(err, DT_EINVAL, "%s: LoRA rank %lld: the rank must be at least 1 (e.g. --lora-rank 8)", where,
                         (long long)ft->lora_rank);
    if (!(ft->lora_alpha > 0) || !isfinite(ft->lora_alpha))
        return dt_errorf(err, DT_EINVAL, "%s: LoRA alpha %g must be a positive number (e.g. --lora-alpha 16)", where,
                         ft->lora_alpha);
    if (!(ft->lora_dropout >= 0 && ft->lora_dropout < 1))
        return dt_errorf(err, DT_EINVAL, "%s: LoRA dropout %g is not in [0, 1) (e.g. --lora-dropout 0.05)", where,
                         ft->lora_dropout);
    if (!ft->lora_target_all && ft->lora_target.n == 0)
        return dt_errorf(err, DT_EINVAL, "%s: no LoRA target modules (--lora-target all, or e.g. q_proj,v_proj)",
                         where);
    if (ft->method != DT_FT_QLORA) return DT_OK;
    if (!dt_storage_is_quantized(ft->quant))
        return dt_errorf(err, DT_EINVAL, "%s: QLoRA needs a quantised base (--quant nf4, fp4 or int8), not %s", where,
                         dt_storage_name(ft->quant));
    const int64_t b = ft->quant_block;
    if (ft->quant != DT_STORAGE_INT8 && (b < DT_QUANT_BLOCK_MIN || b > DT_QUANT_BLOCK_MAX || (b & (b - 1))))
        return dt_errorf(err, DT_EINVAL, "%s: quantisation block %lld: bitsandbytes takes a power of two in %d..%d "
                         "(default %d)", where, (long long)b, DT_QUANT_BLOCK_MIN, DT_QUANT_BLOCK_MAX, DT_QUANT_BLOCK);
    return DT_OK;
}

/* ------------------------------------------------------------ plan.json */

static void add_names(cJSON *o, const char *key, const dt_ft_names *l) {
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (int i = 0; a && i < l->n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(l->name[i]));
}

void dt_finetune_write_json(cJSON *root, const dt_finetune *ft) {
    if (ft->method == DT_FT_FULL) return;   /* absent: full fine-tuning, as every older plan */
    cJSON *o = cJSON_AddObjectToObject(root, "finetune");
    if (!o) return;
    cJSON_AddStringToObject(o, "method", k_method_names[ft->method]);
    if (ft->method == DT_FT_FREEZE) {
        cJSON_AddNumberToObject(o, "trainable_layers", (double)ft->trainable_layers);
        add_names(o, "trainable_modules", &ft->trainable_modules);
        return;
    }
    cJSON *l = cJSON_AddObjectToObject(o, "lora");
    if (!l) return;
    cJSON_AddNumberToObject(l, "rank", (double)ft->lora_rank);
    cJSON_AddNumberToObject(l, "alpha", ft->lora_alpha);
    cJSON_AddNumberToObject(l, "dropout", ft->lora_dropout);
    if (ft->lora_target_all) {
        dt_ft_names all = {1, {"all"}};
        add_names(l, "target", &all);
    } else {
        add_names(l, "target", &ft->lora_target);
    }
    cJSON_AddBoolToObject(l, "use_rslora", ft->use_rslora != 0);
    add_names(l, "modules_to_save", &ft->modules_to_save);
    cJSON_AddStringToObject(l, "adapter_dtype", dt_dtype_name(ft->adapter_dtype));
    if (ft->method != DT_FT_QLORA) return;
    cJSON *q = cJSON_AddObjectToObject(o, "quant");
    if (!q) return;
    cJSON_AddStringToObject(q, "type", dt_storage_name(ft->quant));
    cJSON_AddBoolToObject(q, "double_quant", ft->double_quant != 0);
    cJSON_AddStringToObject(q, "compute_dtype", dt_dtype_name(ft->compute_dtype));
    cJSON_AddNumberToObject(q, "block_size", (double)ft->quant_block);
    add_names(q, "skip_modules", &ft->quant_skip);
    cJSON_AddBoolToObject(q, "upcast_unquantized", ft->upcast_unquantized != 0);
}

/* A required array of module-name strings (may be empty). */
static void read_names(dt_jobj *r, const char *key, dt_ft_names *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    if (r->failed) return;
    const cJSON *a = dt_jobj_item(r, key, err);
    if (!a) {
        r->failed = err->code;
        return;
    }
    if (!cJSON_IsArray(a)) {
        r->failed = dt_errorf(err, DT_EINVAL, "%s.%s: expected an array of module names", r->path, key);
        return;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        if (!cJSON_IsString(it) || !it->valuestring[0] || strlen(it->valuestring) >= DT_FT_NAME_MAX ||
            out->n == DT_FT_MAX_NAMES) {
            r->failed = dt_errorf(err, DT_EINVAL, "%s.%s[%d]: expected a module name of 1..%d characters (at most %d "
                                  "names)", r->path, key, out->n, DT_FT_NAME_MAX - 1, DT_FT_MAX_NAMES);
            return;
        }
        snprintf(out->name[out->n++], DT_FT_NAME_MAX, "%s", it->valuestring);
    }
}

static const char *const k_dtype_names[] = {"fp32", "bf16", "fp16"};
static const char *const k_quant_names[] = {"nf4", "fp4", "int8"};
static const dt_storage k_quant_stores[] = {DT_STORAGE_NF4, DT_STORAGE_FP4, DT_STORAGE_INT8};

static void read_lora(dt_jobj *o, dt_finetune *ft, dt_error *err) {
    dt_jobj l;
    int v = 0;
    if (dt_jobj_open(&l, o, "lora", err)) return;   /* o->failed is set */
    dt_jobj_int(&l, "rank", 1, INT32_MAX, &ft->lora_rank, err);
    dt_jobj_num(&l, "alpha", DT_JNUM_POS, &ft->lora_alpha, err);
    dt_jobj_num(&l, "dropout", DT_JNUM_UNIT_OPEN, &ft->lora_dropout, err);
    read_names(&l, "target", &ft->lora_target, err);
    if (!l.failed && ft->lora_target.n == 1 && !strcmp(ft->lora_target.name[0], "all"))
        ft->lora_target_all = 1, ft->lora_target.n = 0;
    dt_jobj_bool(&l, "use_rslora", &ft->use_rslora, err);
    read_names(&l, "modules_to_save", &ft->modules_to_save, err);
    if (!dt_jobj_enum(&l, "adapter_dtype", k_dtype_names, 3, &v, err)) ft->adapter_dtype = (dt_dtype)v;
    if (dt_jobj_close(&l, err)) o->failed = l.failed;
}

static void read_quant(dt_jobj *o, dt_finetune *ft, dt_error *err) {
    dt_jobj q;
    int v = 0;
    if (dt_jobj_open(&q, o, "quant", err)) return;
    if (!dt_jobj_enum(&q, "type", k_quant_names, 3, &v, err)) ft->quant = k_quant_stores[v];
    dt_jobj_bool(&q, "double_quant", &ft->double_quant, err);
    if (!dt_jobj_enum(&q, "compute_dtype", k_dtype_names, 3, &v, err)) ft->compute_dtype = (dt_dtype)v;
    dt_jobj_int(&q, "block_size", 1, DT_QUANT_BLOCK_MAX, &ft->quant_block, err);
    read_names(&q, "skip_modules", &ft->quant_skip, err);
    dt_jobj_bool(&q, "upcast_unquantized", &ft->upcast_unquantized, err);
    if (dt_jobj_close(&q, err)) o->failed = q.failed;
}

void dt_finetune_read_json(dt_jobj *root, dt_finetune *ft, dt_error *err) {
    memset(ft, 0, sizeof *ft);
    if (root->failed || !dt_jobj_has(root, "finetune")) return;   /* absent: full */
    dt_jobj o;
    int v = 0;
    if (dt_jobj_open(&o, root, "finetune", err)) return;
    if (!dt_jobj_enum(&o, "method", k_method_names, N_METHODS, &v, err)) ft->method = (dt_ft_method)v;
    if (!o.failed && ft->method == DT_FT_FULL)
        o.failed = dt_errorf(err, DT_EINVAL, "$.finetune.method: \"full\" plans carry no finetune section (delete it, "
                             "or name freeze, lora or qlora)");
    if (!o.failed && ft->method == DT_FT_FREEZE) {
        dt_jobj_int(&o, "trainable_layers", -INT32_MAX, INT32_MAX, &ft->trainable_layers, err);
        read_names(&o, "trainable_modules", &ft->trainable_modules, err);
    }
    if (!o.failed && dt_ft_is_lora(ft)) read_lora(&o, ft, err);
    if (!o.failed && ft->method == DT_FT_QLORA) read_quant(&o, ft, err);
    if (!o.failed && dt_finetune_check(ft, "$.finetune", err)) o.failed = err->code;
    if (dt_jobj_close(&o, err)) root->failed = o.failed;
}
