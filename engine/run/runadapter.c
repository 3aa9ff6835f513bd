/* runadapter.c — a LoRA run's PEFT adapter beside each checkpoint (dt_runadapter.h). */
#include "dt_runadapter.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_hfdir.h"
#include "dt_safetensors.h"

int dt_run_adapter_fingerprint(const dt_plan *p, char hex[DT_ADAPTER_FP_HEX], dt_error *err) {
    hex[0] = '\0';
    if (!dt_ft_is_lora(&p->finetune) || !p->output.init[0] || !dt_hf_is_dir(p->output.init)) return DT_OK;
    if (dt_adapter_base_fingerprint(p->output.init, hex, err)) return dt_error_prefix(err, "output.init");
    return DT_OK;
}

/* The tensors of g's trained set, each pointing into the checkpoint's mapped model.safetensors
 * (key: the family's Hugging Face prefix + the engine name), which must hold them in fp32. */
static int collect(const dt_st_file *f, const char *path, const dt_lm *g, dt_adapter_tensor *t, int *n,
                   dt_error *err) {
    const char *prefix = dt_lm_hf_prefix(g);
    char key[DT_ST_NAME_MAX];
    *n = 0;
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *ti = dt_lm_tensor(g, i);
        snprintf(key, sizeof key, "%s%s", prefix, ti->name);
        const dt_st_tensor *st = dt_st_find(f, key);
        if (!st || strcmp(st->dtype, "F32") != 0)
            return dt_errorf(err, DT_EINVAL, "%s: %s %s; the checkpoint is damaged: resume from an earlier one",
                             path, key, st ? "is not F32 (LoRA trains fp32 tensors)" : "is missing");
        t[*n] = (dt_adapter_tensor){ti->name, ti->ndim, {ti->shape[0], ti->ndim > 1 ? ti->shape[1] : 1},
                                    (const float *)dt_st_data(f, st)};
        (*n)++;
    }
    return DT_OK;
}

/* A reward model's adapter (rm): task_type SEQ_CLS, whose modules_to_save PEFT's
 * PeftModelForSequenceClassification extends with its classifier names (peft 0.21.2
 * peft_model.py: classifier_module_names = ["classifier", "score"]), so the trained score head
 * is saved as "base_model.model.score.weight" and PeftModel.from_pretrained restores it. */
static const char *const k_cls_modules[] = {"classifier", DT_LM_SCORE_HEAD};

static void seq_cls_config(const dt_plan *p, dt_adapter_config *cfg) {
    if (p->objective.kind != DT_OBJ_RM) return;
    cfg->seq_cls = 1;
    dt_ft_names *l = &cfg->ft.modules_to_save;
    for (size_t i = 0; i < sizeof k_cls_modules / sizeof *k_cls_modules; i++)
        if (!dt_ft_names_has(l, k_cls_modules[i]) && l->n < DT_FT_MAX_NAMES)
            snprintf(l->name[l->n++], sizeof l->name[0], "%s", k_cls_modules[i]);
}

int dt_run_adapter_write(const char *ckpt_dir, const dt_lm *g, const dt_plan *p, const char *fp, dt_error *err) {
    if (!dt_ft_is_lora(&p->finetune)) return DT_OK;
    char path[DT_PATH_MAX * 2], dir[DT_PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/model.safetensors", ckpt_dir);
    snprintf(dir, sizeof dir, "%s/" DT_RUN_ADAPTER_DIR, ckpt_dir);
    dt_adapter_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.ft = p->finetune;
    cfg.family = dt_lm_family(g);
    seq_cls_config(p, &cfg);
    /* base_model_name_or_path: the base's absolute path (PEFT resolves a relative one against the
     * loader's working directory), or the model's name for a random base */
    char *abs = p->output.init[0] ? realpath(p->output.init, NULL) : NULL;
    snprintf(cfg.base_model, sizeof cfg.base_model, "%s",
             abs ? abs : p->output.init[0] ? p->output.init : p->model.name);
    free(abs);
    snprintf(cfg.base_fingerprint, sizeof cfg.base_fingerprint, "%s", fp ? fp : "");
    dt_adapter_tensor *t = calloc((size_t)dt_lm_num_tensors(g) + 1, sizeof *t);
    if (!t) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", dir);
    dt_st_file *f = NULL;
    int n = 0, rc = dt_st_open(path, &f, err);
    if (!rc) rc = collect(f, path, g, t, &n, err);
    if (!rc) rc = dt_adapter_write(dir, &cfg, t, n, err);
    dt_st_close(f);
    free(t);
    return rc ? dt_error_prefix(err, "adapter") : DT_OK;
}

int dt_run_adapter_open(const dt_plan *p, const char *dir, dt_adapter **out, dt_error *err) {
    *out = NULL;
    const dt_finetune *ft = &p->finetune;
    if (!dt_ft_is_lora(ft))
        return dt_errorf(err, DT_EINVAL, "--init-adapter %s: the plan trains %s, not LoRA: plan it with --finetune lora",
                         dir, dt_ft_method_name(ft->method));
    dt_adapter *a = NULL;
    if (dt_adapter_read(dir, &a, err)) return dt_error_prefix(err, "--init-adapter");
    const dt_finetune *af = &dt_adapter_cfg(a)->ft;
    int rc = DT_OK;
    if (af->lora_rank != ft->lora_rank || af->lora_alpha != ft->lora_alpha || af->use_rslora != ft->use_rslora)
        rc = dt_errorf(err, DT_EINVAL,
                       "--init-adapter %s: r %lld, lora_alpha %g%s, but the plan's LoRA is r %lld, alpha %g%s: plan it "
                       "with --lora-rank %lld --lora-alpha %g%s",
                       dir, (long long)af->lora_rank, af->lora_alpha, af->use_rslora ? ", rsLoRA" : "",
                       (long long)ft->lora_rank, ft->lora_alpha, ft->use_rslora ? ", rsLoRA" : "",
                       (long long)af->lora_rank, af->lora_alpha, af->use_rslora ? " --use-rslora" : "");
    dt_model m = p->model;
    if (p->objective.kind == DT_OBJ_RM) m.num_labels = 1;   /* the reward model's score head (objective_rm.c) */
    if (!rc && dt_adapter_check_model(a, &m, err)) rc = dt_error_prefix(err, "--init-adapter");
    if (!rc && p->output.init[0] && dt_hf_is_dir(p->output.init) && dt_adapter_check_base(a, p->output.init, err))
        rc = dt_error_prefix(err, "--init-adapter");
    if (rc) {
        dt_adapter_free(a);
        return rc;
    }
    *out = a;
    return DT_OK;
}
