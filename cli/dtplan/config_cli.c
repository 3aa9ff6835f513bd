/* config_cli.c — `--config FILE` for estimate / solve / simulate (docs/configs.md): the
 * config (planner/userconfig.c) becomes the options the command already has, each only
 * where the command line does not give it; what every key did is printed first. solve
 * then shows the config's own configuration (and the runbook's distributed_strategy:
 * auto rule) next to its choice, and the learning rate for a changed global batch. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_cli.h"
#include "dt_dsconfig.h"
#include "dt_memory.h"
#include "dt_model.h"
#include "dt_pgroup.h"
#include "dt_timemodel.h"
#include "dt_units.h"
#include "dt_userconfig.h"

#define CFG_MAX_ARGS 96
#define GIB 1073741824.0
#define CFG_MAX_STEPS 1099511627776.0   /* dtplan solve's bound on --steps (2^40) */
#define DT_BYTE_VOCAB_IDS 256           /* the byte tokenizer's ids (common/plan.c BYTE_VOCAB) */

/* What solve's hook needs after the command ran. */
static struct {
    int active;
    dt_usercfg cfg;
    int64_t gpus;
    int64_t cfg_global;       /* the config's global batch (0 unknown) */
    int cfg_stage;            /* the stage the config runs without a DeepSpeed file */
    dt_lr_scaling scaling;
    char lr_given;            /* --lr on the command line */
} g_cfg;

static char g_args[CFG_MAX_ARGS][DT_PATH_MAX];
static char *g_argv[CFG_MAX_ARGS + 1];

static const char *find_opt(int argc, char **argv, const char *name) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return NULL;
}

static int has_flag(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name)) return 1;
    return 0;
}

static int push(int *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int push(int *n, const char *fmt, ...) {
    if (*n >= CFG_MAX_ARGS) return dt_cli_fail(2, "--config: too many options");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_args[*n], sizeof g_args[*n], fmt, ap);
    va_end(ap);
    g_argv[*n] = g_args[*n];
    ++*n;
    return 0;
}

/* name value, unless the command line already gives name (it wins; the report says so). */
static int push_opt(int *n, int argc, char **argv, FILE *rep, const char *name, const char *value) {
    if (find_opt(argc, argv, name)) {
        fprintf(rep, "  %s %s from the config: the command line's %s %s wins\n", name, value, name,
                find_opt(argc, argv, name));
        return 0;
    }
    return push(n, "%s", name) || push(n, "%s", value);
}

static void print_report(FILE *f, const dt_usercfg *c) {
    int used = 0;
    for (int i = 0; i < c->n_keys; i++) used += c->keys[i].use == DT_UKEY_USED;
    fprintf(f, "config %s (%s): %d keys, %d used, %d without effect on the prediction\n", c->path,
            dt_ucfg_format_name(c->format), c->n_keys, used, c->n_keys - used);
    for (int i = 0; i < c->n_keys; i++)
        fprintf(f, "  %-32s line %-4d %-9s %s\n", c->keys[i].key, c->keys[i].line,
                c->keys[i].use == DT_UKEY_USED ? "used" : "no effect", c->keys[i].why);
}

/* The config's stage when it names no DeepSpeed file: the runbook's explicit strategy or
 * its auto rule, else DDP (stage 0: the Trainer without DeepSpeed). */
static int config_stage(const dt_usercfg *c, const dt_model *m) {
    if (c->strategy_stage >= 0) return c->strategy_stage;
    if (c->strategy_auto) return dt_runbook_auto_stage(dt_model_params(m));
    return 0;
}

/* num_train_epochs as optimizer steps: epochs x the training tokens of --data (a dtrun
 * prepare output) / (global batch x sequence), rounded up; 0 when either is unknown. */
static int64_t epoch_steps(const dt_usercfg *c, int argc, char **argv, const char *data, int64_t global, FILE *rep) {
    const char *seq_s = find_opt(argc, argv, "--seq");
    int64_t seq = seq_s ? atoll(seq_s) : c->seq_len;
    if (!(c->epochs > 0) || !data || global <= 0 || seq <= 0) {
        if (c->epochs > 0)
            fprintf(rep, "  num_train_epochs %g: give --steps, or --data naming a prepare output (its token count "
                         "sets the steps)\n", c->epochs);
        return 0;
    }
    int64_t tokens = dt_prepared_train_tokens(data);
    if (tokens <= 0) {
        fprintf(rep, "  num_train_epochs %g: --data %s has no prepare.json to count tokens in; give --steps\n", c->epochs,
                data);
        return 0;
    }
    double per_step = (double)global * (double)seq, x = ceil(c->epochs * (double)tokens / per_step);
    if (!(x <= CFG_MAX_STEPS)) {
        fprintf(rep, "  num_train_epochs %g: %.3g steps is beyond any run; give --steps\n", c->epochs, x);
        return 0;
    }
    int64_t steps = x < 1 ? 1 : (int64_t)x;
    fprintf(rep, "  num_train_epochs %g x %lld training tokens (%s) / (global batch %lld x %lld tokens) = %lld steps\n",
            c->epochs, (long long)tokens, data, (long long)global, (long long)seq, (long long)steps);
    return steps;
}

/* The training data the config names (docs/configs.md "Data"): LLaMA-Factory's one `dataset`
 * as the dtrun prepare output DATASET_DIR/NAME (dataset_dir relative to the working directory,
 * as LLaMA-Factory reads it; default "data"), or the hf format's train_file when it is one.
 * Else NULL: the plan names no data, and the report says how to give it. path: n bytes. */
static const char *config_data(const dt_usercfg *c, const dt_model *m, char *path, size_t n, FILE *rep) {
    if (!c->dataset[0]) return NULL;
    const char *dir = c->dataset_dir[0] ? c->dataset_dir : "data";
    int w = c->format == DT_UCFG_LLAMAFACTORY ? snprintf(path, n, "%s/%s", dir, c->dataset)
                                              : snprintf(path, n, "%s", c->dataset);
    if (w < 0 || (size_t)w >= n) return NULL;   /* longer than any path the plan holds */
    if (dt_prepared_is_output(path)) {
        fprintf(rep, "  %s %s: the dtrun prepare output %s is the plan's data\n",
                c->format == DT_UCFG_LLAMAFACTORY ? "dataset" : "train_file", c->dataset, path);
        return path;
    }
    fprintf(rep, "  %s %s: %s holds no dtrun prepare output, so the plan names no training data%s: tokenize it with "
                 "the model's tokenizer (dtrun prepare --tokenizer TOKENIZER --out %s FILE...) or give --data DIR\n",
            c->format == DT_UCFG_LLAMAFACTORY ? "dataset" : "train_file", c->dataset, path,
            m->vocab > DT_BYTE_VOCAB_IDS ? "" : " (the byte-level demo text is read instead)", path);
    return NULL;
}

/* The config key an option of dt_model_pgroups' messages stands for (its line in the file). */
static int key_line(const dt_usercfg *c, const char *key) {
    for (int i = 0; i < c->n_keys; i++)
        if (!strcmp(c->keys[i].key, key)) return c->keys[i].line;
    return 0;
}

/* The config's method checked against model m (a LoRA target or module the family lacks, a
 * rank above a targeted linear's width): one line naming FILE:LINE and the key. */
static int check_method(const dt_usercfg *c, const dt_model *m, const dt_finetune *ft) {
    static const struct { const char *opt, *key; } map[] = {
        {"--lora-target", "lora_target"}, {"--lora-rank", "lora_rank"}, {"--modules-to-save", "additional_target"},
        {"--trainable-layers", "freeze_trainable_layers"}, {"--trainable-modules", "freeze_trainable_modules"},
    };
    dt_pgroups *g = malloc(sizeof *g);
    dt_error e;
    dt_error_clear(&e);
    if (!g) return dt_cli_fail(1, "--config: out of memory");
    int rc = dt_model_pgroups(m, ft, DT_DTYPE_BF16, DT_ROLE_POLICY, g, &e);
    free(g);
    if (!rc) return 0;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        size_t n = strlen(map[i].opt);
        if (strncmp(e.msg, map[i].opt, n) || e.msg[n] != ' ') continue;
        const char *key = map[i].key, *rest = e.msg + n + 1;
        /* freeze_extra_modules' names reach dt_model_pgroups inside --trainable-modules */
        for (int k = c->freeze_block_names; !strcmp(key, "freeze_trainable_modules") && k < ft->trainable_modules.n; k++) {
            size_t len = strlen(ft->trainable_modules.name[k]);
            if (!strncmp(rest, ft->trainable_modules.name[k], len) && rest[len] == ':') key = "freeze_extra_modules";
        }
        return dt_cli_fail(2, "%s:%d: %s %s", c->path, key_line(c, key), key, rest);
    }
    return dt_cli_fail(2, "%s: %s", c->path, e.msg);
}

/* x as the shortest of %.15g / %.17g that reads back as x (0.05, not 0.050000000000000003). */
static void exact(double x, char *out, size_t n) {
    snprintf(out, n, "%.15g", x);
    if (strtod(out, NULL) != x) snprintf(out, n, "%.17g", x);
}

static void names_text(const dt_ft_names *l, char *out, size_t n) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < l->n && used < n; i++) used += (size_t)snprintf(out + used, n - used, "%s%s", i ? "," : "", l->name[i]);
}

/* The config's fine-tuning method as the --finetune options (ftopts.c) stand for it, each
 * only where the command line does not give it; --finetune on the command line replaces the
 * config's method whole. */
static void config_method(const dt_usercfg *c, const dt_model *m, dt_finetune *ft) {
    *ft = c->finetune;
    /* _setup_freeze_tuning: range(max(0, L - N), L) or range(min(-N, L)): |N| > L trains every block */
    if (ft->method == DT_FT_FREEZE && llabs(ft->trainable_layers) > m->n_layer)
        ft->trainable_layers = ft->trainable_layers > 0 ? m->n_layer : -m->n_layer;
}

static int push_finetune(int *n, int argc, char **argv, FILE *rep, const dt_usercfg *c, const dt_model *m) {
    dt_finetune ft;
    config_method(c, m, &ft);
    if (find_opt(argc, argv, "--finetune")) {
        fprintf(rep, "  finetuning_type %s from the config: the command line's --finetune %s wins (with its own "
                     "settings)\n", dt_ft_method_name(ft.method), find_opt(argc, argv, "--finetune"));
        return 0;
    }
    if (ft.method == DT_FT_FULL) return 0;
    if (ft.trainable_layers != c->finetune.trainable_layers)
        fprintf(rep, "  freeze_trainable_layers %lld: %s has %lld blocks; LLaMA-Factory trains all of them\n",
                (long long)c->finetune.trainable_layers, m->name, (long long)m->n_layer);
    char v[DT_PATH_MAX];
    int rc = push_opt(n, argc, argv, rep, "--finetune", dt_ft_method_name(ft.method));
    if (ft.method == DT_FT_FREEZE) {
        snprintf(v, sizeof v, "%lld", (long long)ft.trainable_layers), rc |= push_opt(n, argc, argv, rep, "--trainable-layers", v);
        if (ft.trainable_modules.n)
            names_text(&ft.trainable_modules, v, sizeof v), rc |= push_opt(n, argc, argv, rep, "--trainable-modules", v);
        return rc;
    }
    snprintf(v, sizeof v, "%lld", (long long)ft.lora_rank), rc |= push_opt(n, argc, argv, rep, "--lora-rank", v);
    if (c->lora_alpha_given)   /* else LLaMA-Factory's 2 x rank, of a --lora-rank on the command line too */
        exact(ft.lora_alpha, v, sizeof v), rc |= push_opt(n, argc, argv, rep, "--lora-alpha", v);
    exact(ft.lora_dropout, v, sizeof v), rc |= push_opt(n, argc, argv, rep, "--lora-dropout", v);
    if (ft.lora_target_all) snprintf(v, sizeof v, "all");
    else names_text(&ft.lora_target, v, sizeof v);
    rc |= push_opt(n, argc, argv, rep, "--lora-target", v);
    if (ft.modules_to_save.n)
        names_text(&ft.modules_to_save, v, sizeof v), rc |= push_opt(n, argc, argv, rep, "--modules-to-save", v);
    if (ft.use_rslora && !has_flag(argc, argv, "--use-rslora")) rc |= push(n, "--use-rslora");
    if (ft.adapter_dtype != DT_DTYPE_FP32)   /* pure_bf16: LLaMA-Factory leaves the adapters in bf16 */
        rc |= push_opt(n, argc, argv, rep, "--adapter-dtype", dt_dtype_name(ft.adapter_dtype));
    if (ft.method == DT_FT_QLORA) {
        rc |= push_opt(n, argc, argv, rep, "--quant", dt_storage_name(ft.quant));
        if (ft.quant != DT_STORAGE_INT8) rc |= push_opt(n, argc, argv, rep, "--double-quant", ft.double_quant ? "on" : "off");
        rc |= push_opt(n, argc, argv, rep, "--compute-dtype", dt_dtype_name(ft.compute_dtype));
    }
    return rc;
}

/* The config's stage (rm, dpo) as the objective options (objopts.c), unless --objective is given. */
static int push_objective(int *n, int argc, char **argv, FILE *rep, const dt_usercfg *c) {
    const dt_objective *o = &c->objective;
    if (o->kind == DT_OBJ_AUTO) return 0;
    if (find_opt(argc, argv, "--objective")) {
        fprintf(rep, "  stage %s from the config: the command line's --objective %s wins (with its own settings)\n",
                c->stage, find_opt(argc, argv, "--objective"));
        return 0;
    }
    char v[64];
    int rc = push_opt(n, argc, argv, rep, "--objective", dt_obj_name(o->kind));
    if (o->kind == DT_OBJ_RM) rc |= push_opt(n, argc, argv, rep, "--rm-head", dt_rm_head_name(o->rm_head));
    if (o->kind == DT_OBJ_DPO) {
        rc |= push_opt(n, argc, argv, rep, "--pref-loss", dt_pref_loss_name(o->pref_loss));
        exact(o->pref_beta, v, sizeof v), rc |= push_opt(n, argc, argv, rep, "--pref-beta", v);
        if (o->label_smoothing != 0.0)
            exact(o->label_smoothing, v, sizeof v), rc |= push_opt(n, argc, argv, rep, "--label-smoothing", v);
    }
    return rc;
}

/* dpo's ref_model must have the policy's shape (the plan's reference is a copy of the policy's
 * architecture): resolved as model_name_or_path is, compared; one line FILE:LINE otherwise. */
static int check_ref_model(const dt_usercfg *c, const dt_model *m) {
    if (!c->ref_model[0]) return 0;
    dt_model ref;
    dt_error e;
    char resolved[DT_PATH_MAX];
    dt_error_clear(&e);
    if (dt_usercfg_model(c->ref_model, &ref, resolved, sizeof resolved, &e))
        return dt_cli_fail(2, "%s:%d: ref_model: %s (the plan needs the reference's shape)", c->path, c->ref_model_line,
                           e.msg);
    if (ref.n_layer != m->n_layer || ref.hidden != m->hidden || ref.vocab != m->vocab || ref.n_head != m->n_head ||
        ref.n_kv_head != m->n_kv_head || dt_model_params(&ref) != dt_model_params(m))
        return dt_cli_fail(2, "%s:%d: ref_model %s (%lld layers, hidden %lld, %lld parameters) is not shaped as the "
                              "policy %s (%lld layers, hidden %lld, %lld): a reference of another architecture is not "
                              "modelled; use the policy's own weights (remove ref_model) or a checkpoint of it",
                           c->path, c->ref_model_line, c->ref_model, (long long)ref.n_layer, (long long)ref.hidden,
                           (long long)dt_model_params(&ref), m->name, (long long)m->n_layer, (long long)m->hidden,
                           (long long)dt_model_params(m));
    return 0;
}

int dt_cli_config_expand(const char *cmd, int argc, char **argv, int *out_argc, char ***out_argv) {
    const char *path = find_opt(argc, argv, "--config"), *fmt_s = find_opt(argc, argv, "--config-format");
    const char *scaling = find_opt(argc, argv, "--lr-scaling");
    int json = has_flag(argc, argv, "--json");
    FILE *rep = json ? stderr : stdout;
    dt_error err;
    dt_error_clear(&err);
    dt_ucfg_format fmt = DT_UCFG_AUTO;
    if (!path)
        return dt_cli_fail(2, "%s: %s needs --config FILE (e.g. --config train.yaml)", cmd,
                           scaling ? "--lr-scaling" : fmt_s ? "--config-format" : "--config");
    static const char *const once[] = {"--config", "--config-format", "--lr-scaling"};
    for (size_t k = 0; k < sizeof once / sizeof once[0]; k++) {
        int seen = 0;
        for (int i = 1; i < argc; i++) seen += !strcmp(argv[i], once[k]);
        if (seen > 1) return dt_cli_fail(2, "%s: %s given twice", cmd, once[k]);
    }
    if (fmt_s && dt_ucfg_format_parse(fmt_s, &fmt, &err)) return dt_cli_fail(2, "%s", err.msg);
    g_cfg.scaling = DT_LR_SCALE_NONE;
    if (scaling && strcmp(cmd, "solve")) return dt_cli_fail(2, "%s: --lr-scaling applies to solve", cmd);
    if (scaling && dt_lr_scaling_parse(scaling, &g_cfg.scaling, &err)) return dt_cli_fail(2, "%s", err.msg);
    dt_usercfg *c = &g_cfg.cfg;
    if (dt_usercfg_load(path, fmt, c, &err)) return dt_cli_fail(2, "%s", err.msg);

    /* the model: the command line's, else the config's */
    dt_model m;
    char model[DT_PATH_MAX] = "";
    const char *cli_model = find_opt(argc, argv, "--model"), *cli_params = find_opt(argc, argv, "--params");
    if (!cli_model && !cli_params) {
        if (!c->model[0])
            return dt_cli_fail(2, "%s: %s names no model (model_name_or_path); give --model NAME|config.json", cmd,
                               path);
        if (dt_usercfg_model(c->model, &m, model, sizeof model, &err)) return dt_cli_fail(2, "%s: %s", path, err.msg);
        if (!strchr(model, '/')) snprintf(model, sizeof model, "%s", m.name);   /* the catalog's own name */
    } else if (cli_model && dt_model_resolve_vlm(cli_model, &m, &(dt_vlm){0}, &err)) {   /* a VLM: its LLM here */
        return dt_cli_fail(2, "%s", err.msg);
    } else if (cli_params) {
        int64_t n;
        if (dt_parse_count(cli_params, "--params", &n, &err) || dt_model_for_params(n, &m, &err))
            return dt_cli_fail(2, "%s", err.msg);
    }
    int64_t gpus = 1;
    const char *g = find_opt(argc, argv, "--gpus");
    if (g && dt_parse_int(g, "--gpus", 1, INT64_C(1) << 20, 8, &gpus, &err)) return dt_cli_fail(2, "%s", err.msg);
    int64_t micro = c->micro_batch;
    if (c->total_batch) {
        if (c->total_batch % gpus)
            return dt_cli_fail(2, "%s: training.batch_size %lld (the total over the GPUs) does not divide by --gpus "
                                  "%lld; make it a multiple of the GPU count (e.g. %lld)",
                               path, (long long)c->total_batch, (long long)gpus,
                               (long long)(gpus * (c->total_batch / gpus + 1)));
        micro = c->total_batch / gpus;
    }
    int64_t accum = c->grad_accum ? c->grad_accum : 1;
    g_cfg.active = 1;
    g_cfg.gpus = gpus;
    g_cfg.cfg_global = micro ? micro * accum * gpus : 0;
    g_cfg.cfg_stage = config_stage(c, &m);
    g_cfg.lr_given = find_opt(argc, argv, "--lr") != NULL;

    dt_finetune ft;
    config_method(c, &m, &ft);
    if (!find_opt(argc, argv, "--finetune") && ft.method != DT_FT_FULL && check_method(c, &m, &ft)) return 2;
    if (!find_opt(argc, argv, "--finetune") && ft.method == DT_FT_QLORA && ft.quant == DT_STORAGE_INT8 && c->deepspeed[0]) {
        /* model_utils/quantization.py: under ZeRO-3 only a 4-bit base loads ("Only 4-bit quantized model can
         * use fsdp+qlora") */
        dt_dsconfig ds;
        if (dt_dsconfig_load(c->deepspeed, &ds, &err) == DT_OK && ds.zero_stage == 3)
            return dt_cli_fail(2, "%s:%d: quantization_bit: 8 with DeepSpeed ZeRO-3 (%s): LLaMA-Factory loads only a "
                                  "4-bit base under ZeRO-3; use quantization_bit: 4 or a ZeRO-2 config", path,
                               key_line(c, "quantization_bit"), c->deepspeed_written);
    }
    if (!find_opt(argc, argv, "--objective") && check_ref_model(c, &m)) return 2;
    print_report(rep, c);
    if (c->model[0] && (cli_model || cli_params))
        fprintf(rep, "  model_name_or_path %s from the config: the command line's %s %s wins\n", c->model,
                cli_model ? "--model" : "--params", cli_model ? cli_model : cli_params);
    int n = 0;
    if (push(&n, "%s", cmd)) return 2;
    /* the command line first, without --config / --config-format / --lr-scaling */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") || !strcmp(argv[i], "--config-format") || !strcmp(argv[i], "--lr-scaling")) {
            i++;
            continue;
        }
        if (push(&n, "%s", argv[i])) return 2;
    }
    char v[64];
    int rc = 0;
    if (model[0]) rc |= push_opt(&n, argc, argv, rep, "--model", model);
    if (c->seq_len) snprintf(v, sizeof v, "%lld", (long long)c->seq_len), rc |= push_opt(&n, argc, argv, rep, "--seq", v);
    if (c->precision >= 0)
        rc |= push_opt(&n, argc, argv, rep, "--precision", dt_precision_preset_name((dt_precision_preset)c->precision));
    /* the Trainer / DeepSpeed / torch DDP run PyTorch model code: the deepspeed runtime profile
     * (docs/memory-model.md "Runtime profiles"), stage 0 being DDP */
    rc |= push_opt(&n, argc, argv, rep, "--runtime", "deepspeed");
    if (c->attention[0])
        rc |= push_opt(&n, argc, argv, rep, "--attention", c->attention);
    if (rc || push_finetune(&n, argc, argv, rep, c, &m) || push_objective(&n, argc, argv, rep, c)) return 2;
    if (!strcmp(cmd, "solve")) {
        char data_path[DT_PATH_MAX];
        const char *data = find_opt(argc, argv, "--data");
        if (!data && (data = config_data(c, &m, data_path, sizeof data_path, rep))) rc |= push_opt(&n, argc, argv, rep, "--data", data);
        if (g_cfg.cfg_global)
            snprintf(v, sizeof v, "%lld", (long long)g_cfg.cfg_global), rc |= push_opt(&n, argc, argv, rep, "--global-batch", v);
        if (c->lr > 0) snprintf(v, sizeof v, "%g", c->lr), rc |= push_opt(&n, argc, argv, rep, "--lr", v);
        int64_t steps = c->max_steps ? c->max_steps : epoch_steps(c, argc, argv, data, g_cfg.cfg_global, rep);
        if (steps) snprintf(v, sizeof v, "%lld", (long long)steps), rc |= push_opt(&n, argc, argv, rep, "--steps", v);
        int64_t warm = c->warmup_steps >= 0 ? c->warmup_steps
                       : c->warmup_ratio >= 0 && steps ? (int64_t)(c->warmup_ratio * (double)steps + 0.5) : -1;
        if (warm >= 0) snprintf(v, sizeof v, "%lld", (long long)warm), rc |= push_opt(&n, argc, argv, rep, "--warmup", v);
        if (c->schedule >= 0) {
            static const char *const names[] = {"constant", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
            rc |= push_opt(&n, argc, argv, rep, "--schedule", names[c->schedule]);
        }
        if (c->save_steps) snprintf(v, sizeof v, "%lld", (long long)c->save_steps), rc |= push_opt(&n, argc, argv, rep, "--save-interval", v);
    } else {
        if (micro) snprintf(v, sizeof v, "%lld", (long long)micro), rc |= push_opt(&n, argc, argv, rep, "--micro-batch", v);
        if (c->grad_accum) snprintf(v, sizeof v, "%lld", (long long)c->grad_accum), rc |= push_opt(&n, argc, argv, rep, "--grad-accum", v);
        if (c->ckpt >= 0) rc |= push_opt(&n, argc, argv, rep, "--ckpt", c->ckpt ? "full" : "none");
        if (c->deepspeed[0]) {
            rc |= push_opt(&n, argc, argv, rep, "--deepspeed", c->deepspeed);
        } else if (!find_opt(argc, argv, "--deepspeed")) {
            snprintf(v, sizeof v, "%d", g_cfg.cfg_stage);
            rc |= push_opt(&n, argc, argv, rep, "--zero-stage", v);
            rc |= push_opt(&n, argc, argv, rep, "--offload-optimizer", "none");
            rc |= push_opt(&n, argc, argv, rep, "--offload-param", "none");
        }
    }
    if (rc) return 2;
    if (c->strategy_auto)
        fprintf(rep, "distributed_strategy: auto: %s has %.2fB parameters -> %s (the runbook's rule: < 1B DDP, 1-7B "
                     "ZeRO-2, > 7B ZeRO-3)%s\n",
                m.name, (double)dt_model_params(&m) / 1e9, g_cfg.cfg_stage ? (g_cfg.cfg_stage == 2 ? "ZeRO-2" : "ZeRO-3") : "DDP",
                strcmp(cmd, "solve") ? "" : "; solve's own choice follows, then both side by side");
    fprintf(rep, "as options: dtplan");
    for (int i = 0; i < n; i++) fprintf(rep, " %s", g_args[i]);
    fprintf(rep, "\n\n");
    g_argv[n] = NULL;
    *out_argc = n;
    *out_argv = g_argv;
    return 0;
}

/* The config's own configuration on the solved plan's cluster: its stage (DeepSpeed file,
 * runbook strategy or DDP), micro-batch, accumulation and checkpointing. */
static int config_plan(const dt_plan *solved, dt_plan *p, dt_error *err) {
    const dt_usercfg *c = &g_cfg.cfg;
    *p = *solved;
    p->prediction.valid = 0;
    int64_t micro = c->total_batch ? c->total_batch / g_cfg.gpus : c->micro_batch ? c->micro_batch : 1;
    p->batch.micro_batch = micro;
    p->batch.grad_accum = c->grad_accum ? c->grad_accum : 1;
    p->batch.global_batch = micro * p->batch.grad_accum * p->parallel.world_size;
    p->activations.ckpt_layers = c->ckpt > 0 ? p->model.n_layer : 0;
    p->activations.selective = 0;
    p->parallel.offload_optimizer = p->parallel.offload_param = DT_OFFLOAD_NONE;
    p->parallel.zero_stage = g_cfg.cfg_stage;
    p->parallel.overlap_comm = g_cfg.cfg_stage == 3;
    if (c->deepspeed[0]) {
        dt_dsconfig ds;
        if (dt_dsconfig_load(c->deepspeed, &ds, err) || dt_dsconfig_apply(&ds, p, NULL, err)) return err->code;
        if (p->runtime.kind == DT_RUNTIME_DEEPSPEED && dt_dsconfig_apply_runtime(&ds, p, NULL, err)) return err->code;
    }
    return dt_plan_validate(p, err);
}

static void print_side(const char *label, const dt_plan *p) {
    dt_mem_breakdown mb;
    dt_time_breakdown tb;
    dt_error e;
    if (dt_memory_estimate(p, &mb, &e) || dt_time_estimate(p, &tb, &e)) {
        printf("  %-24s cannot be evaluated: %s\n", label, e.msg);
        return;
    }
    printf("  %-24s ZeRO-%d, offload %s/%s, global batch %lld = micro-batch %lld x accumulation %lld x %lld GPUs, "
           "%lld/%lld layers checkpointed: %.2f GiB per GPU, step %.4g s\n",
           label, p->parallel.zero_stage, dt_offload_name(p->parallel.offload_optimizer),
           dt_offload_name(p->parallel.offload_param), (long long)p->batch.global_batch, (long long)p->batch.micro_batch,
           (long long)p->batch.grad_accum, (long long)p->parallel.world_size,
           (long long)p->activations.ckpt_layers, (long long)p->model.n_layer, (double)mb.total / GIB, tb.step_s);
}

void dt_cli_config_after_solve(dt_plan *plan) {
    if (!g_cfg.active) return;
    const dt_usercfg *c = &g_cfg.cfg;
    dt_plan own;
    dt_error e;
    printf("the config's own configuration next to solve's:\n");
    if (config_plan(plan, &own, &e)) printf("  %-24s cannot be evaluated: %s\n", "config", e.msg);
    else print_side(c->strategy_auto ? "runbook rule (auto)" : "config as written", &own);
    print_side("solve's choice", plan);
    /* the learning rate under a changed global batch (the runbook's two rules) */
    if (c->lr > 0 && g_cfg.cfg_global && plan->batch.global_batch != g_cfg.cfg_global && !g_cfg.lr_given) {
        double lin = dt_lr_scaled(c->lr, g_cfg.cfg_global, plan->batch.global_batch, DT_LR_SCALE_LINEAR);
        double sq = dt_lr_scaled(c->lr, g_cfg.cfg_global, plan->batch.global_batch, DT_LR_SCALE_SQRT);
        plan->optimizer.lr = dt_lr_scaled(c->lr, g_cfg.cfg_global, plan->batch.global_batch, g_cfg.scaling);
        printf("learning rate: global batch %lld (the config's %lld): linear scaling %g, square-root %g; the plan "
               "keeps %g (--lr-scaling %s)\n",
               (long long)plan->batch.global_batch, (long long)g_cfg.cfg_global, lin, sq, plan->optimizer.lr,
               dt_lr_scaling_name(g_cfg.scaling));
    }
}
