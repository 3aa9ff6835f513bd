/* userexport.c — a plan as LLaMA-Factory / TrainingArguments / runbook config text
 * (dt_userexport.h; docs/configs.md "Export"). New files are written key by key; a user's
 * file is edited in place: each value's bytes come from libyaml's marks, so comments and
 * everything not changed stay as they were. */
#include "dt_userexport.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "dt_model.h"
#include "dt_pgroup.h"

#define KEY_DEPTH 3

typedef enum { X_STR, X_NUM, X_INT, X_BOOL, X_NULL } xkind;

typedef struct {
    const char *path[KEY_DEPTH];   /* "training", "batch_size" (NULL-terminated) */
    xkind kind;
    char text[DT_PATH_MAX];        /* as YAML writes it */
    double num;
    int only_if_absent;            /* defaults a file needs; never overwrite the user's */
    const char *also;              /* a user's value that says the same as text (stage pt for sft) */
    int model;                     /* the model: equal when the user's name resolves to model_name */
    char model_name[64];
    const char *dflt;              /* a user's file without the key means this: not added */
    const char *alt;               /* a user's file with this key instead says it its way (epochs) */
} xkey;

#define MAX_XKEYS 48
typedef struct {
    xkey k[MAX_XKEYS];
    int n;
} xlist;

/* A float PyYAML reads back as a float: a dot and a signed exponent (yaml/resolver.py). */
static void yaml_float(double x, char *out, size_t n) {
    char b[64];
    snprintf(b, sizeof b, "%.15g", x);
    char *e = strchr(b, 'e');
    if (!strchr(b, '.')) {
        if (e) snprintf(out, n, "%.*s.0%s", (int)(e - b), b, e);
        else snprintf(out, n, "%s.0", b);
    } else {
        snprintf(out, n, "%s", b);
    }
}

static xkey *add(xlist *l, const char *a, const char *b, xkind kind) {
    if (l->n >= MAX_XKEYS) return NULL;
    xkey *k = &l->k[l->n++];
    memset(k, 0, sizeof *k);
    k->path[0] = a;
    k->path[1] = b;
    k->kind = kind;
    return k;
}

static void add_int(xlist *l, const char *a, const char *b, int64_t v) {
    xkey *k = add(l, a, b, X_INT);
    if (k) snprintf(k->text, sizeof k->text, "%lld", (long long)v), k->num = (double)v;
}
static void add_num(xlist *l, const char *a, const char *b, double v) {
    xkey *k = add(l, a, b, X_NUM);
    if (k) yaml_float(v, k->text, sizeof k->text), k->num = v;
}
static xkey *add_bool(xlist *l, const char *a, const char *b, int v) {
    xkey *k = add(l, a, b, X_BOOL);
    if (k) snprintf(k->text, sizeof k->text, "%s", v ? "true" : "false"), k->num = v;
    return k;
}
static xkey *add_str(xlist *l, const char *a, const char *b, const char *v) {
    xkey *k = add(l, a, b, v ? X_STR : X_NULL);
    if (k) snprintf(k->text, sizeof k->text, "%s", v ? v : "null");
    return k;
}

int dt_userexport_needs_deepspeed(const dt_plan *p) {
    return p->parallel.zero_stage > 0 || p->parallel.offload_optimizer != DT_OFFLOAD_NONE ||
           p->parallel.offload_param != DT_OFFLOAD_NONE;
}

static const char *hf_schedule(dt_sched_kind k) {
    static const char *const n[] = {"constant", "constant_with_warmup", "linear", "cosine"};
    return n[k];
}

static void names_text(const dt_ft_names *l, int from, int to, char *out, size_t n) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = from; i < to && used < n; i++) used += (size_t)snprintf(out + used, n - used, "%s%s", used ? "," : "", l->name[i]);
}

static size_t note(char *notes, size_t n, size_t used, const char *what) {
    if (used < n) used += (size_t)snprintf(notes + used, n - used, "note: %s\n", what);
    return used;
}

/* The plan's fine-tuning method as LLaMA-Factory's keys (hparams/finetuning_args.py,
 * model_args.py; their meaning: userconfig.c finish_method); dflt: what an absent key
 * means there, so a user's file without it is left so. What LLaMA-Factory has no key for
 * goes to notes. */
static void method_keys(const dt_plan *p, xlist *l, char *notes, size_t n) {
    const dt_finetune *ft = &p->finetune;
    const int lora = dt_ft_is_lora(ft);
    size_t used = 0;
    char v[DT_PATH_MAX];
    notes[0] = '\0';
    add_str(l, "finetuning_type", NULL, lora ? "lora" : ft->method == DT_FT_FREEZE ? "freeze" : "full")->dflt = "lora";
    if (ft->method == DT_FT_FREEZE) {
        add_int(l, "freeze_trainable_layers", NULL, ft->trainable_layers);
        l->k[l->n - 1].dflt = "2";
        char outer[DT_PATH_MAX] = "";
        size_t ou = 0;
        dt_ft_names block = {0};
        for (int i = 0; i < ft->trainable_modules.n; i++) {   /* LLaMA-Factory's two lists: in and outside the blocks */
            const char *name = ft->trainable_modules.name[i];
            if (dt_model_outer_module(&p->model, name)) ou += (size_t)snprintf(outer + ou, sizeof outer - ou, "%s%s", ou ? "," : "", name);
            else if (strcmp(name, "all")) memcpy(block.name[block.n++], name, DT_FT_NAME_MAX);
        }
        names_text(&block, 0, block.n, v, sizeof v);
        add_str(l, "freeze_trainable_modules", NULL, block.n ? v : "all")->dflt = "all";
        add_str(l, "freeze_extra_modules", NULL, ou ? outer : NULL)->dflt = "null";
    }
    if (lora) {
        add_int(l, "lora_rank", NULL, ft->lora_rank);
        l->k[l->n - 1].dflt = "8";
        char two_r[32];
        snprintf(two_r, sizeof two_r, "%lld", (long long)(2 * ft->lora_rank));
        if (ft->lora_alpha == floor(ft->lora_alpha) && fabs(ft->lora_alpha) < 1e15) add_int(l, "lora_alpha", NULL, (int64_t)ft->lora_alpha);
        else add_num(l, "lora_alpha", NULL, ft->lora_alpha);
        l->k[l->n - 1].dflt = strcmp(l->k[l->n - 1].text, two_r) ? NULL : l->k[l->n - 1].text;   /* None: 2 x rank */
        add_num(l, "lora_dropout", NULL, ft->lora_dropout);
        l->k[l->n - 1].dflt = "0.0";
        names_text(&ft->lora_target, 0, ft->lora_target.n, v, sizeof v);
        add_str(l, "lora_target", NULL, ft->lora_target_all ? "all" : v)->dflt = "all";
        names_text(&ft->modules_to_save, 0, ft->modules_to_save.n, v, sizeof v);
        add_str(l, "additional_target", NULL, ft->modules_to_save.n ? v : NULL)->dflt = "null";
        add_bool(l, "use_rslora", NULL, ft->use_rslora)->dflt = "false";
        const int pure = p->precision.preset == DT_PREC_PURE_BF16;
        if (ft->adapter_dtype != (pure ? DT_DTYPE_BF16 : DT_DTYPE_FP32))
            used = note(notes, n, used, pure ? "LLaMA-Factory keeps the adapters in bf16 under pure_bf16; the plan's "
                                               "adapter dtype has no key there"
                                             : "LLaMA-Factory casts the adapters to fp32 (bf16 only with pure_bf16); the "
                                               "plan's adapter dtype has no key there");
    }
    if (ft->method == DT_FT_QLORA) {
        add_int(l, "quantization_bit", NULL, ft->quant == DT_STORAGE_INT8 ? 8 : 4);
        xkey *qm = add_str(l, "quantization_method", NULL, "bnb");
        qm->dflt = "bnb";
        qm->only_if_absent = 1;   /* "bitsandbytes" in older LLaMA-Factory: the user's spelling stays */
        if (ft->quant != DT_STORAGE_INT8) {
            add_str(l, "quantization_type", NULL, dt_storage_name(ft->quant))->dflt = "nf4";
            add_bool(l, "double_quantization", NULL, ft->double_quant)->dflt = "true";
        }
        const dt_precision_preset pr = p->precision.preset;
        const dt_dtype lf_compute = pr == DT_PREC_MIXED_BF16 || pr == DT_PREC_PURE_BF16 ? DT_DTYPE_BF16
                                    : pr == DT_PREC_MIXED_FP16 ? DT_DTYPE_FP16 : DT_DTYPE_FP32;
        if (ft->compute_dtype != lf_compute)
            used = note(notes, n, used, "LLaMA-Factory dequantises to the training dtype (bf16 / fp16, else fp32); the "
                                        "plan's other compute dtype has no key there");
        if (ft->quant_block != DT_QUANT_BLOCK) used = note(notes, n, used, "bitsandbytes' block size through "
                                                                          "LLaMA-Factory is 64; the plan's has no key");
        if (ft->quant_skip.n != 1 || strcmp(ft->quant_skip.name[0], "lm_head"))
            used = note(notes, n, used, "LLaMA-Factory keeps only transformers' default (lm_head) 16-bit; the plan's "
                                        "--quant-skip has no key");
        if (ft->upcast_unquantized)
            used = note(notes, n, used, "LLaMA-Factory does not call prepare_model_for_kbit_training; --prepare-kbit has "
                                        "no key (upcast_layernorm upcasts the norms only)");
    } else {
        add_str(l, "quantization_bit", NULL, NULL)->dflt = "null";   /* a user's 4-bit file planned without it */
    }
}

/* The plan's objective as LLaMA-Factory's stage and RLHF keys (finetuning_args.py; their
 * meaning: userconfig.c finish_objective). AUTO (pt, or sft for masked data): stage sft unless
 * the user's file names one. What LLaMA-Factory cannot say goes to notes. */
static void objective_keys(const dt_plan *p, xlist *l, char *notes, size_t n) {
    const dt_objective *o = &p->objective;
    size_t used = strlen(notes);
    if (o->kind == DT_OBJ_AUTO) {
        add_str(l, "stage", NULL, "sft")->also = "pt";   /* pt / sft by the data's mask; a user's dpo / rm is not */
        return;
    }
    add_str(l, "stage", NULL, dt_obj_name(o->kind));
    if (o->kind == DT_OBJ_RM && o->rm_head == DT_RM_HEAD_SCORE)
        used = note(notes, n, used, "LLaMA-Factory's rm trains a value head beside the LM head, whose logits it "
                                    "computes; the plan's score head (TRL RewardTrainer) has no key there (plan "
                                    "--rm-head value for LLaMA-Factory's run)");
    if (o->kind != DT_OBJ_DPO) return;
    add_str(l, "pref_loss", NULL, dt_pref_loss_name(o->pref_loss))->dflt = "sigmoid";
    add_num(l, "pref_beta", NULL, o->pref_beta);
    l->k[l->n - 1].dflt = "0.1";
    if (o->label_smoothing != 0.0) add_num(l, "dpo_label_smoothing", NULL, o->label_smoothing);
    if (o->precompute_ref)
        note(notes, n, used, "LLaMA-Factory has no precomputed reference log-probs: its dpo holds the reference "
                             "(TRL's precompute_ref_log_probs says it)");
}

/* The keys of one format, from the plan. */
static void plan_keys(const dt_plan *p, dt_ucfg_format fmt, const char *ds, xlist *l, char *notes, size_t n) {
    const char *t = fmt == DT_UCFG_RUNBOOK ? "training" : NULL;
#define K(name) (t ? t : name), (t ? name : NULL)
    const int bf16 = p->precision.preset == DT_PREC_MIXED_BF16 || p->precision.preset == DT_PREC_PURE_BF16;
    const int fp16 = p->precision.preset == DT_PREC_MIXED_FP16;
    const int ckpt = p->activations.ckpt_layers > 0;
    size_t used = 0;
    if (notes) notes[0] = '\0';
    if (ckpt && p->activations.ckpt_layers < p->model.n_layer && notes)
        used += (size_t)snprintf(notes + used, n - used,
                                 "note: the plan checkpoints %lld of %lld layers; the config can only say all or none "
                                 "(written: all)\n",
                                 (long long)p->activations.ckpt_layers, (long long)p->model.n_layer);
    if (p->activations.selective && notes && used < n)
        used += (size_t)snprintf(notes + used, n - used,
                                 "note: the plan's selective attention recompute has no config key\n");
    if (fmt != DT_UCFG_LLAMAFACTORY && p->finetune.method != DT_FT_FULL && notes && used < n)
        used += (size_t)snprintf(notes + used, n - used,
                                 "note: %s has no fine-tuning keys (PEFT's LoraConfig and BitsAndBytesConfig are separate "
                                 "objects, below): read it back with the plan's --finetune options\n",
                                 fmt == DT_UCFG_HF ? "TrainingArguments" : "the runbook's training: block");
    if (fmt != DT_UCFG_LLAMAFACTORY && p->objective.kind >= DT_OBJ_RM && notes && used < n)
        used += (size_t)snprintf(notes + used, n - used,
                                 "note: %s has no objective keys (TRL's %s carries them): read it back with --objective "
                                 "%s\n", fmt == DT_UCFG_HF ? "TrainingArguments" : "the runbook's training: block",
                                 p->objective.kind == DT_OBJ_DPO ? "DPOConfig" : p->objective.kind == DT_OBJ_RM
                                                                    ? "RewardConfig" : "trainer config",
                                 dt_obj_name(p->objective.kind));
    if (fmt == DT_UCFG_RUNBOOK) {
        xkey *mk = add_str(l, "model", NULL, p->model.name);
        mk->only_if_absent = mk->model = 1;
        snprintf(mk->model_name, sizeof mk->model_name, "%s", p->model.name);
        add_int(l, K("batch_size"), p->batch.micro_batch * p->parallel.world_size);
        add_int(l, K("accumulation_steps"), p->batch.grad_accum);
        add_bool(l, K("use_mixed_precision"), bf16 || fp16);
        if (bf16 || fp16) add_str(l, K("mixed_precision"), fp16 ? "fp16" : "bf16")->dflt = "bf16";   /* the reader's */
        add_str(l, K("distributed_strategy"), ds && *ds ? "deepspeed" : "ddp");
    } else {
        if (fmt == DT_UCFG_LLAMAFACTORY) {
            /* the hub id LLaMA-Factory downloads (the catalog's _name_or_path), else the plan's name */
            char hub[DT_PATH_MAX];
            int is_hub = dt_model_catalog_hub_id(p->model.name, hub, sizeof hub);
            xkey *mk = add_str(l, "model_name_or_path", NULL, is_hub ? hub : p->model.name);
            mk->model = 1;
            snprintf(mk->model_name, sizeof mk->model_name, "%s", p->model.name);
            if (!is_hub && notes && used < n)
                used += (size_t)snprintf(notes + used, n - used,
                                         "note: %s is not a catalog model: point model_name_or_path at its directory\n",
                                         p->model.name);
            add_bool(l, "do_train", NULL, 1)->only_if_absent = 1;
            char ft_notes[2048];
            method_keys(p, l, ft_notes, sizeof ft_notes);
            objective_keys(p, l, ft_notes, sizeof ft_notes);
            if (notes && used < n) used += (size_t)snprintf(notes + used, n - used, "%s", ft_notes);
            add_int(l, "cutoff_len", NULL, p->batch.seq_len);
        }
        add_str(l, "output_dir", NULL, p->output.dir[0] ? p->output.dir : "saves")->only_if_absent = 1;
        add_int(l, "per_device_train_batch_size", NULL, p->batch.micro_batch);
        add_int(l, "gradient_accumulation_steps", NULL, p->batch.grad_accum);
        add_bool(l, "bf16", NULL, bf16 && !(fmt == DT_UCFG_LLAMAFACTORY && p->precision.preset == DT_PREC_PURE_BF16))
            ->dflt = "false";
        add_bool(l, "fp16", NULL, fp16)->dflt = "false";
        if (fmt == DT_UCFG_LLAMAFACTORY)
            add_bool(l, "pure_bf16", NULL, p->precision.preset == DT_PREC_PURE_BF16)->dflt = "false";
    }
    if (fmt == DT_UCFG_LLAMAFACTORY) {
        add_bool(l, "disable_gradient_checkpointing", NULL, !ckpt)->dflt = "false";
        if (p->runtime.kind != DT_RUNTIME_DTRUN)
            add_str(l, "flash_attn", NULL,
                    p->runtime.attention == DT_KERNEL_FLASH ? "fa2" : p->runtime.attention == DT_KERNEL_EAGER ? "disabled"
                                                                                                              : "sdpa")
                ->dflt = "sdpa";   /* auto: sdpa where torch has it */
    } else {
        add_bool(l, K("gradient_checkpointing"), ckpt)->dflt = "false";
    }
    add_str(l, K("deepspeed"), ds && *ds ? ds : NULL);
    add_num(l, K("learning_rate"), p->optimizer.lr);
    if (p->schedule.total_steps > 0) {
        add_int(l, K("max_steps"), p->schedule.total_steps);
        l->k[l->n - 1].alt = fmt == DT_UCFG_RUNBOOK ? "epochs" : "num_train_epochs";
    }
    add_int(l, K("warmup_steps"), p->schedule.warmup_steps);
    l->k[l->n - 1].alt = "warmup_ratio";
    add_str(l, K("lr_scheduler_type"), hf_schedule(p->schedule.kind));
    if (p->output.save_interval > 0) add_int(l, K("save_steps"), p->output.save_interval);
#undef K
}

/* ------------------------------------------------------------ in-place editing */

typedef struct {
    int seq;          /* the order edits were made: equal offsets keep it */
    size_t at;        /* byte offset in the original */
    size_t del;       /* bytes replaced */
    char *text;       /* inserted (malloc'd) */
} xedit;

typedef struct {
    xedit e[MAX_XKEYS + 1];   /* + the newline a file without a final one gets before appended keys */
    int n;
    int eof_newline;          /* that newline is already an edit */
    int flow_inserts;   /* keys added to a JSON (flow) mapping so far: each after the first takes a comma */
} xedits;

/* libyaml's mark.index counts characters (a CR LF as two), not bytes: the byte offset of
 * character idx of UTF-8 text (what yaml_parser_load accepted), after a UTF-8 BOM, which
 * its reader consumes without counting. */
static size_t byte_at(const char *text, size_t len, size_t idx) {
    size_t i = len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3) ? 3 : 0;
    for (size_t n = 0; i < len; i++) {
        if (((unsigned char)text[i] & 0xC0) == 0x80) continue;   /* a continuation byte */
        if (n++ == idx) return i;
    }
    return len;
}

static yaml_node_t *map_get(yaml_document_t *d, yaml_node_t *map, const char *key, yaml_node_t **key_node) {
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(d, p->key);
        if (k && k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key)) {
            if (key_node) *key_node = k;
            return yaml_document_get_node(d, p->value);
        }
    }
    return NULL;
}

/* Whether the scalar node already says what k says (1.0e-5 and 1e-05 are equal numbers). */
static int same_value(const yaml_node_t *v, const xkey *k) {
    const char *s = (const char *)v->data.scalar.value;
    if (k->model) {
        dt_model m;
        char resolved[DT_PATH_MAX];
        dt_error e;
        return dt_usercfg_model(s, &m, resolved, sizeof resolved, &e) == DT_OK && !strcmp(m.name, k->model_name);
    }
    if (k->kind == X_STR) return !strcmp(s, k->text);
    if (k->kind == X_NULL) return !*s || !strcmp(s, "null") || !strcmp(s, "~");
    if (k->kind == X_BOOL) {
        int t = !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on");
        int f = !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off");
        return (t && k->num == 1) || (f && k->num == 0);
    }
    char *end = NULL;
    double x = strtod(s, &end);
    if (end == s || *end) return 0;
    if (k->kind == X_INT) return x == k->num;
    return strchr(s, '.') && fabs(x - k->num) <= 1e-12 * fabs(k->num);   /* PyYAML's float needs the dot */
}

static char *render(const xkey *k, int json) {
    char *out = malloc(strlen(k->text) * 2 + 8);
    if (!out) return NULL;
    int quote = k->kind == X_STR && (json || strpbrk(k->text, ":#{}[],&*!|>'\"%@`") || !*k->text);
    if (!quote) return strcpy(out, k->text);
    char *o = out;
    *o++ = '"';
    for (const char *s = k->text; *s; s++) {
        if (*s == '"' || *s == '\\') *o++ = '\\';
        *o++ = *s;
    }
    *o++ = '"';
    *o = '\0';
    return out;
}

/* The node a block collection's content ends with: its last pair's value or last item,
 * down to a scalar or a flow collection (a block collection's own end mark is the next
 * token, which may be a line of the enclosing mapping). */
static yaml_node_t *last_leaf(yaml_document_t *d, yaml_node_t *n) {
    for (int depth = 0; n && depth < 64; depth++) {
        if (n->type == YAML_MAPPING_NODE && n->data.mapping.style != YAML_FLOW_MAPPING_STYLE &&
            n->data.mapping.pairs.top > n->data.mapping.pairs.start)
            n = yaml_document_get_node(d, (n->data.mapping.pairs.top - 1)->value);
        else if (n->type == YAML_SEQUENCE_NODE && n->data.sequence.style != YAML_FLOW_SEQUENCE_STYLE &&
                 n->data.sequence.items.top > n->data.sequence.items.start)
            n = yaml_document_get_node(d, *(n->data.sequence.items.top - 1));
        else
            break;
    }
    return n;
}

/* Where a new key of mapping map goes: after the line its last value ends on; indent =
 * its first key's column. JSON (flow) mappings: before the closing brace. */
static size_t insert_point(yaml_document_t *d, yaml_node_t *map, const char *text, size_t len, int *indent) {
    *indent = 0;
    yaml_node_pair_t *first = map->data.mapping.pairs.start, *last = map->data.mapping.pairs.top - 1;
    if (map->data.mapping.style == YAML_FLOW_MAPPING_STYLE) {
        if (first <= last) return byte_at(text, len, (yaml_document_get_node(d, last->value)->end_mark).index);
        size_t at = byte_at(text, len, (map->end_mark).index);   /* {}: before the closing brace */
        while (at > 0 && text[at - 1] != '}') at--;
        return at ? at - 1 : 0;
    }
    if (first > last || map == yaml_document_get_root_node(d)) return len;   /* top level: appended */
    *indent = (int)yaml_document_get_node(d, first->key)->start_mark.column;
    yaml_node_t *leaf = last_leaf(d, yaml_document_get_node(d, last->value));
    size_t at = leaf ? byte_at(text, len, leaf->end_mark.index) : len;
    if (at > 0 && text[at - 1] == '\n') return at;   /* a block scalar ends with its line */
    while (at < len && text[at] != '\n') at++;
    return at < len ? at + 1 : len;
}

static int plan_edit(yaml_document_t *d, yaml_node_t *root, const xkey *k, const char *text, size_t len, int json,
                     xedits *ed, dt_error *err) {
    yaml_node_t *map = root, *v = NULL, *kn = NULL;
    int depth = 0;
    while (depth + 1 < KEY_DEPTH && k->path[depth + 1]) {
        yaml_node_t *m = map_get(d, map, k->path[depth], NULL);
        if (!m || m->type != YAML_MAPPING_NODE)
            return dt_errorf(err, DT_EINVAL, "--config: '%s' is not a mapping to add '%s' to", k->path[depth],
                             k->path[depth + 1]);
        map = m;
        depth++;
    }
    const char *key = k->path[depth];
    v = map_get(d, map, key, &kn);
    if (v && key && !strcmp(key, "deepspeed") && v->type == YAML_MAPPING_NODE) {
        kn = NULL;
        v = map_get(d, v, "config_path", &kn);   /* the runbook's deepspeed: {config_path: ...} */
    }
    if (v && (k->only_if_absent || (v->type == YAML_SCALAR_NODE && same_value(v, k)))) return DT_OK;
    if (v && k->also && v->type == YAML_SCALAR_NODE && !strcmp((const char *)v->data.scalar.value, k->also)) return DT_OK;
    if (!v && ((k->dflt && !strcmp(k->text, k->dflt)) || (k->alt && map_get(d, map, k->alt, NULL)))) return DT_OK;
    if (ed->n >= MAX_XKEYS) return dt_errorf(err, DT_EINTERNAL, "export: too many edits");
    char *val = render(k, json);
    if (!val) return dt_errorf(err, DT_ENOMEM, "export: out of memory");
    xedit *e = &ed->e[ed->n];
    e->seq = ed->n++;
    if (v) {
        e->at = byte_at(text, len, (v->start_mark).index);
        e->del = byte_at(text, len, (v->end_mark).index) - e->at;
        if (v->type != YAML_SCALAR_NODE && v->start_mark.line != kn->start_mark.line) {
            /* a block value on the following lines: replace from after "key:" */
            e->at = byte_at(text, len, (kn->end_mark).index);
            while (e->at < len && text[e->at] != ':') e->at++;
            e->at++;
            e->del = byte_at(text, len, (v->end_mark).index) - e->at;
            char *sp = malloc(strlen(val) + 3);
            if (!sp) return free(val), dt_errorf(err, DT_ENOMEM, "export: out of memory");
            sprintf(sp, " %s\n", val);
            free(val);
            val = sp;
        }
        if (e->del == 0 && v->type == YAML_SCALAR_NODE) {   /* "key:" or a flow "key" with an empty (null) value */
            int colon = 0;
            for (size_t i = kn ? byte_at(text, len, (kn->end_mark).index) : e->at; i < e->at && i < len; i++) colon |= text[i] == ':';
            char *sp = malloc(strlen(val) + 3);
            if (!sp) return free(val), dt_errorf(err, DT_ENOMEM, "export: out of memory");
            sprintf(sp, "%s %s", colon ? "" : ":", val);
            free(val);
            val = sp;
        }
        e->text = val;
        return DT_OK;
    }
    int indent;
    e->at = insert_point(d, map, text, len, &indent);
    /* at one offset: value replacements (seq < MAX_XKEYS), then the final newline, then new keys
     * of a nested block (training: may end the file), then new top-level keys */
    const int block = map->data.mapping.style != YAML_FLOW_MAPPING_STYLE;
    e->seq += (block && map == root ? 2 : 1) * (MAX_XKEYS + 1);
    e->del = 0;
    if (block && e->at == len && len && text[len - 1] != '\n' && !ed->eof_newline) {
        xedit *nl = &ed->e[ed->n++];
        *nl = (xedit){MAX_XKEYS, len, 0, strdup("\n")};
        if (!nl->text) return dt_errorf(err, DT_ENOMEM, "export: out of memory");
        ed->eof_newline = 1;
    }
    size_t need = strlen(key) + strlen(val) + (size_t)indent + 16;
    e->text = malloc(need);
    if (!e->text) return free(val), dt_errorf(err, DT_ENOMEM, "export: out of memory");
    if (map->data.mapping.style == YAML_FLOW_MAPPING_STYLE)
        snprintf(e->text, need, "%s\n  \"%s\": %s",
                 map->data.mapping.pairs.start < map->data.mapping.pairs.top || ed->flow_inserts++ ? "," : "", key, val);
    else
        snprintf(e->text, need, "%*s%s: %s\n", indent, "", key, val);
    free(val);
    return DT_OK;
}

static int cmp_edit(const void *a, const void *b) {
    const xedit *x = a, *y = b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static char *apply_edits(const char *text, size_t len, xedits *ed, dt_error *err) {
    qsort(ed->e, (size_t)ed->n, sizeof ed->e[0], cmp_edit);
    size_t out_len = len + 1;
    for (int i = 0; i < ed->n; i++) out_len += strlen(ed->e[i].text);
    char *out = malloc(out_len);
    if (!out) return dt_errorf(err, DT_ENOMEM, "export: out of memory"), NULL;
    size_t o = 0, at = 0;
    for (int i = 0; i < ed->n; i++) {
        memcpy(out + o, text + at, ed->e[i].at - at);
        o += ed->e[i].at - at;
        size_t tl = strlen(ed->e[i].text);
        memcpy(out + o, ed->e[i].text, tl);
        o += tl;
        at = ed->e[i].at + ed->e[i].del;
    }
    memcpy(out + o, text + at, len - at);
    o += len - at;
    out[o] = '\0';
    return out;
}

/* 1 when text parses as one YAML document (what edit_original hands back must, as the file
 * it edited did: an edit next to an unusual layout, e.g. a key repeated or split from its
 * ':' across lines, could break it; tests/fuzz/fuzz_userexport.c found one). */
static int yaml_parses(const char *text) {
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return 0;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, strlen(text));
    int ok = yaml_parser_load(&parser, &doc);
    if (ok) yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return ok;
}

static char *edit_original(const xlist *l, const char *text, size_t len, dt_error *err) {
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return dt_errorf(err, DT_ENOMEM, "export: out of memory"), NULL;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        dt_errorf(err, DT_EINVAL, "--config: YAML syntax error at %d:%d: %s", (int)parser.problem_mark.line + 1,
                  (int)parser.problem_mark.column + 1, parser.problem ? parser.problem : "malformed");
        yaml_parser_delete(&parser);
        return NULL;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    xedits ed = {.n = 0};
    char *out = NULL;
    int rc = root && root->type == YAML_MAPPING_NODE
                 ? DT_OK
                 : dt_errorf(err, DT_EINVAL, "--config: the file is not a mapping of keys");
    int json = root && root->data.mapping.style == YAML_FLOW_MAPPING_STYLE;
    for (int i = 0; i < l->n && !rc; i++) rc = plan_edit(&doc, root, &l->k[i], text, len, json, &ed, err);
    if (!rc) out = apply_edits(text, len, &ed, err);
    if (out && !yaml_parses(out)) {   /* refused, never written broken */
        free(out);
        out = NULL;
        dt_errorf(err, DT_EINVAL,
                  "--config: this file's layout cannot be edited in place (a key written twice, or a key and its "
                  "':' on different lines?): tidy it, or export without --config");
    }
    for (int i = 0; i < ed.n; i++) free(ed.e[i].text);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return out;
}

char *dt_userexport(const dt_plan *p, dt_ucfg_format fmt, const char *ds_path, const char *original, size_t len,
                    const char *original_path, char *notes, size_t n, dt_error *err) {
    if (fmt != DT_UCFG_LLAMAFACTORY && fmt != DT_UCFG_HF && fmt != DT_UCFG_RUNBOOK)
        return dt_errorf(err, DT_EINVAL, "export: a format is needed (llamafactory, hf or runbook)"), NULL;
    if (dt_plan_validate(p, err)) return NULL;
    if (fmt == DT_UCFG_LLAMAFACTORY && (p->objective.kind == DT_OBJ_GRPO || p->objective.kind == DT_OBJ_PPO))
        return dt_errorf(err, DT_EINVAL, "export --llamafactory: the plan's %s objective has no LLaMA-Factory stage "
                         "(LLaMA-Factory has no grpo, and its ppo trains a value head on the policy, not the plan's "
                         "separate critic): run it with TRL or OpenRLHF (dtplan export --deepspeed writes the DeepSpeed "
                         "config)", dt_obj_name(p->objective.kind)), NULL;
    xlist l = {.n = 0};
    plan_keys(p, fmt, ds_path, &l, notes, n);
    if (original) {
        /* the user's file must read as a config of that format first (no repeated or unknown
         * keys, no syntax error): what the edit starts from is then well defined */
        dt_usercfg *uc = malloc(sizeof *uc);
        if (!uc) return dt_errorf(err, DT_ENOMEM, "export: out of memory"), NULL;
        int rc = dt_usercfg_parse(original, len, original_path ? original_path : "--config", fmt, uc, err);
        int methods_only = uc->methods_refused;   /* a LoRA file may still take a full plan */
        free(uc);
        if (rc && !methods_only) return NULL;
        return edit_original(&l, original, len, err);
    }
    /* a new file, in the order LLaMA-Factory's examples use; the runbook's keys under training: */
    size_t cap = 4096;
    char *out = malloc(cap);
    if (!out) return dt_errorf(err, DT_ENOMEM, "export: out of memory"), NULL;
    size_t o = (size_t)snprintf(out, cap, "# written by dtplan export from the plan (docs/configs.md)\n");
    int in_training = 0;
    for (int i = 0; i < l.n; i++) {
        const xkey *k = &l.k[i];
        char *val = render(k, 0);
        if (!val) return free(out), dt_errorf(err, DT_ENOMEM, "export: out of memory"), NULL;
        if (k->path[1] && !in_training) o += (size_t)snprintf(out + o, cap - o, "%s:\n", k->path[0]), in_training = 1;
        o += (size_t)snprintf(out + o, cap - o, "%s%s: %s\n", k->path[1] ? "  " : "", k->path[1] ? k->path[1] : k->path[0],
                              val);
        free(val);
        if (o >= cap) return free(out), dt_errorf(err, DT_EINTERNAL, "export: config longer than %zu bytes", cap), NULL;
    }
    return out;
}
