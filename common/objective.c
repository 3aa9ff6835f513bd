/* objective.c — the objective a plan carries: names, defaults, model-free checks and its
 * plan.json section (dt_objective.h, dt_objective_json.h; docs/objectives.md). */
#include "dt_objective.h"
#include "dt_objective_json.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

static const char *const k_names[DT_OBJ_COUNT] = {"auto", "pt", "sft", "rm", "dpo", "grpo", "ppo"};
static const char *const k_place[2] = {"colocated", "split"};
/* TRL PPOConfig kl_coef (trl experimental/ppo/ppo_config.py: 0.05). */
#define PPO_DEFAULT_KL 0.05

static const char *const k_pref[DT_PREF_COUNT] = {"sigmoid", "hinge", "ipo", "kto_pair", "orpo", "simpo"};
static const char *const k_head[2] = {"score", "value"};

const char *dt_pref_loss_name(dt_pref_loss l) { return (int)l >= 0 && l < DT_PREF_COUNT ? k_pref[l] : "?"; }

int dt_pref_loss_parse(const char *s, dt_pref_loss *out, dt_error *err) {
    for (int i = 0; i < DT_PREF_COUNT; i++)
        if (!strcmp(s, k_pref[i])) return *out = (dt_pref_loss)i, DT_OK;
    return dt_errorf(err, DT_EINVAL, "'%s' is not a dpo loss (sigmoid, hinge, ipo, kto_pair, orpo or simpo)", s);
}

int dt_pref_loss_ref_free(dt_pref_loss l) { return l == DT_PREF_ORPO || l == DT_PREF_SIMPO; }

const char *dt_rm_head_name(dt_rm_head h) { return (int)h >= 0 && h < 2 ? k_head[h] : "?"; }

int dt_rm_head_parse(const char *s, dt_rm_head *out, dt_error *err) {
    for (int i = 0; i < 2; i++)
        if (!strcmp(s, k_head[i])) return *out = (dt_rm_head)i, DT_OK;
    return dt_errorf(err, DT_EINVAL, "'%s' is not an rm head (score: a sequence classifier; value: a value "
                     "head on the causal LM, LLaMA-Factory's)", s);
}

const char *dt_obj_name(dt_obj_kind k) { return (int)k >= 0 && k < DT_OBJ_COUNT ? k_names[k] : "?"; }

int dt_obj_parse(const char *s, dt_obj_kind *out, dt_error *err) {
    for (int i = 1; i < DT_OBJ_COUNT; i++)
        if (!strcmp(s, k_names[i])) return *out = (dt_obj_kind)i, DT_OK;
    return dt_errorf(err, DT_EINVAL, "--objective '%s': unknown objective (pt, sft, rm, dpo, grpo or ppo)", s);
}

dt_obj_kind dt_obj_effective(const dt_objective *o, int loss_mask) {
    if (o->kind != DT_OBJ_AUTO) return o->kind;
    return loss_mask ? DT_OBJ_SFT : DT_OBJ_PT;
}

void dt_objective_defaults(dt_obj_kind k, dt_objective *out) {
    memset(out, 0, sizeof *out);
    out->kind = k;
    if (k == DT_OBJ_GRPO) {
        out->num_generations = DT_OBJ_DEFAULT_GENERATIONS;
        out->temperature = DT_OBJ_DEFAULT_TEMPERATURE;
        out->top_p = DT_OBJ_DEFAULT_TOP_P;
        out->num_iterations = DT_OBJ_DEFAULT_ITERATIONS;
    }
    if (k == DT_OBJ_PPO) out->num_generations = 1, out->kl_coef = PPO_DEFAULT_KL;
    if (k == DT_OBJ_DPO) out->pref_beta = DT_OBJ_DEFAULT_PREF_BETA;
    if (dt_obj_generates(k)) out->completion_len = DT_OBJ_DEFAULT_COMPLETION;
}

int dt_obj_pairs(dt_obj_kind k) { return k == DT_OBJ_RM || k == DT_OBJ_DPO; }
int dt_obj_generates(dt_obj_kind k) { return k == DT_OBJ_GRPO || k == DT_OBJ_PPO; }

int dt_objective_check(const dt_objective *o, int64_t seq_len, int64_t rollout_batch, const char *where,
                       dt_error *err) {
    const char *name = dt_obj_name(o->kind);
    if ((int)o->kind < 0 || o->kind >= DT_OBJ_COUNT) return dt_errorf(err, DT_EINVAL, "%s: unknown objective", where);
    if (o->precompute_ref && o->kind != DT_OBJ_DPO)
        return dt_errorf(err, DT_EINVAL, "%s: precompute-ref is a dpo setting; %s computes its reference log-probs "
                         "inside the step (drop it, or use --objective dpo)", where, name);
    if (o->kind != DT_OBJ_DPO && (o->pref_loss != DT_PREF_SIGMOID || o->pref_beta != 0.0))
        return dt_errorf(err, DT_EINVAL, "%s: pref-loss and pref-beta are dpo settings, not %s's (drop them, or use "
                         "--objective dpo)", where, name);
    if ((int)o->pref_loss < 0 || o->pref_loss >= DT_PREF_COUNT || !(o->pref_beta >= 0.0) || !isfinite(o->pref_beta))
        return dt_errorf(err, DT_EINVAL, "%s: pref-loss must be one of sigmoid, hinge, ipo, kto_pair, orpo, simpo and "
                         "pref-beta a number >= 0", where);
    if (!(o->label_smoothing >= 0.0 && o->label_smoothing < 0.5) ||
        (o->label_smoothing != 0.0 && (o->kind != DT_OBJ_DPO || o->pref_loss != DT_PREF_SIGMOID)))
        return dt_errorf(err, DT_EINVAL, "%s: label-smoothing must be in [0, 0.5) and belongs to dpo's sigmoid loss "
                         "(cDPO), not %s / %s", where, name, dt_pref_loss_name(o->pref_loss));
    if (o->precompute_ref && dt_pref_loss_ref_free(o->pref_loss))
        return dt_errorf(err, DT_EINVAL, "%s: precompute-ref with pref-loss %s, which uses no reference (drop "
                         "--precompute-ref)", where, dt_pref_loss_name(o->pref_loss));
    if (o->kind != DT_OBJ_RM && o->rm_head != DT_RM_HEAD_SCORE)
        return dt_errorf(err, DT_EINVAL, "%s: rm-head is an rm setting, not %s's (drop it, or use --objective rm)",
                         where, name);
    if ((int)o->rm_head < 0 || o->rm_head > DT_RM_HEAD_VALUE)
        return dt_errorf(err, DT_EINVAL, "%s: rm-head must be score or value", where);
    const int gen = dt_obj_generates(o->kind);
    if (!gen && (o->num_generations || o->completion_len || o->gen_batch || o->kl_coef != 0.0))
        return dt_errorf(err, DT_EINVAL, "%s: num-generations, max-completion-length, kl-coef and gen-batch are "
                         "grpo / ppo settings, not %s's (drop them, or use --objective grpo)", where, name);
    if (o->kind != DT_OBJ_GRPO && (o->temperature != 0.0 || o->top_p != 0.0))
        return dt_errorf(err, DT_EINVAL, "%s: temperature and top-p are grpo settings, not %s's (drop them, or use "
                         "--objective grpo)", where, name);
    if (o->kind == DT_OBJ_GRPO ? o->num_iterations < 1 : o->num_iterations != 0)
        return dt_errorf(err, DT_EINVAL, "%s: num-iterations %" PRId64 ": %s", where, o->num_iterations,
                         o->kind == DT_OBJ_GRPO ? "must be >= 1 (TRL's default is 1)"
                                                : "a grpo setting (drop it, or use --objective grpo)");
    if (o->kind == DT_OBJ_GRPO && (!(o->temperature > 0.0) || !isfinite(o->temperature) || !(o->top_p > 0.0) ||
                                   !(o->top_p <= 1.0)))
        return dt_errorf(err, DT_EINVAL, "%s: temperature %g must be > 0 and top-p %g in (0, 1] (TRL's defaults: 1 "
                         "and 1)", where, o->temperature, o->top_p);
    if (o->kind != DT_OBJ_PPO && (o->placement != DT_PLACE_COLOCATED || o->gen_mem_fraction != 0.0))
        return dt_errorf(err, DT_EINVAL, "%s: placement and gen-mem-fraction are ppo settings, not %s's (drop "
                         "them, or use --objective ppo)", where, name);
    if (!gen) return DT_OK;
    if (o->num_generations < 1 || (o->kind == DT_OBJ_PPO && o->num_generations != 1))
        return dt_errorf(err, DT_EINVAL, "%s: num-generations %" PRId64 ": %s", where, o->num_generations,
                         o->kind == DT_OBJ_PPO ? "ppo samples one completion per prompt (drop it)" : "must be >= 1 (TRL's default is 8)");
    if (o->completion_len < 1 || o->completion_len >= seq_len)
        return dt_errorf(err, DT_EINVAL, "%s: max-completion-length %" PRId64 " must be 1 .. seq_len - 1 = %" PRId64
                         " (the prompt is seq_len minus the completion; raise --seq or lower it)",
                         where, o->completion_len, seq_len - 1);
    if (!(o->kl_coef >= 0.0) || o->gen_batch < 0 || !(o->gen_mem_fraction >= 0.0 && o->gen_mem_fraction < 1.0))
        return dt_errorf(err, DT_EINVAL, "%s: kl-coef must be >= 0, gen-batch >= 0 and gen-mem-fraction in [0, 1)", where);
    if (rollout_batch > 0 && rollout_batch % o->num_generations)
        return dt_errorf(err, DT_EINVAL, "%s: num-generations %" PRId64 " does not divide the global batch %" PRId64
                         " (micro x ranks x accumulation; TRL: generation_batch_size must be divisible by "
                         "num_generations) — pick a batch that is a multiple of it", where, o->num_generations,
                         rollout_batch);
    return DT_OK;
}

void dt_objective_write_json(cJSON *root, const dt_objective *o) {
    if (o->kind == DT_OBJ_AUTO) return;   /* absent: pt / sft from the data, as every older plan */
    cJSON *j = cJSON_AddObjectToObject(root, "objective");
    if (!j) return;
    cJSON_AddStringToObject(j, "kind", k_names[o->kind]);
    if (o->kind == DT_OBJ_DPO) {
        cJSON_AddBoolToObject(j, "precompute_ref", o->precompute_ref != 0);
        cJSON_AddStringToObject(j, "pref_loss", k_pref[o->pref_loss]);
        cJSON_AddNumberToObject(j, "pref_beta", o->pref_beta);
        if (o->label_smoothing != 0.0) cJSON_AddNumberToObject(j, "label_smoothing", o->label_smoothing);
    }
    if (o->kind == DT_OBJ_RM) cJSON_AddStringToObject(j, "rm_head", k_head[o->rm_head]);
    if (!dt_obj_generates(o->kind)) return;
    cJSON_AddNumberToObject(j, "num_generations", (double)o->num_generations);
    cJSON_AddNumberToObject(j, "max_completion_length", (double)o->completion_len);
    cJSON_AddNumberToObject(j, "kl_coef", o->kl_coef);
    cJSON_AddNumberToObject(j, "gen_batch", (double)o->gen_batch);
    if (o->kind == DT_OBJ_GRPO) {
        cJSON_AddNumberToObject(j, "temperature", o->temperature);
        cJSON_AddNumberToObject(j, "top_p", o->top_p);
        cJSON_AddNumberToObject(j, "num_iterations", (double)o->num_iterations);
    }
    if (o->kind != DT_OBJ_PPO) return;
    cJSON_AddStringToObject(j, "placement", k_place[o->placement]);
    cJSON_AddNumberToObject(j, "gen_mem_fraction", o->gen_mem_fraction);
}

void dt_objective_read_json(dt_jobj *root, dt_objective *o, dt_error *err) {
    memset(o, 0, sizeof *o);
    if (root->failed || !dt_jobj_has(root, "objective")) return;   /* absent: auto */
    dt_jobj j;
    int v = 0;
    if (dt_jobj_open(&j, root, "objective", err)) return;
    if (!dt_jobj_enum(&j, "kind", k_names, DT_OBJ_COUNT, &v, err)) o->kind = (dt_obj_kind)v;
    if (!j.failed && o->kind == DT_OBJ_AUTO)
        j.failed = dt_errorf(err, DT_EINVAL, "$.objective.kind: \"auto\" plans carry no objective section (delete "
                             "it, or name pt, sft, rm, dpo, grpo or ppo)");
    if (!j.failed && o->kind == DT_OBJ_DPO) {
        dt_jobj_bool(&j, "precompute_ref", &o->precompute_ref, err);
        /* optional (plans before them: sigmoid, 0.1) */
        o->pref_beta = DT_OBJ_DEFAULT_PREF_BETA;
        if (!j.failed && dt_jobj_has(&j, "pref_loss") && !dt_jobj_enum(&j, "pref_loss", k_pref, DT_PREF_COUNT, &v, err))
            o->pref_loss = (dt_pref_loss)v;
        if (!j.failed && dt_jobj_has(&j, "pref_beta")) dt_jobj_num(&j, "pref_beta", DT_JNUM_NONNEG, &o->pref_beta, err);
        if (!j.failed && dt_jobj_has(&j, "label_smoothing"))   /* optional: 0 */
            dt_jobj_num(&j, "label_smoothing", DT_JNUM_NONNEG, &o->label_smoothing, err);
    }
    if (!j.failed && o->kind == DT_OBJ_RM && dt_jobj_has(&j, "rm_head") &&   /* optional: score */
        !dt_jobj_enum(&j, "rm_head", k_head, 2, &v, err))
        o->rm_head = (dt_rm_head)v;
    if (!j.failed && dt_obj_generates(o->kind)) {
        dt_jobj_int(&j, "num_generations", 1, INT32_MAX, &o->num_generations, err);
        dt_jobj_int(&j, "max_completion_length", 1, INT32_MAX, &o->completion_len, err);
        dt_jobj_num(&j, "kl_coef", DT_JNUM_NONNEG, &o->kl_coef, err);
        dt_jobj_int(&j, "gen_batch", 0, INT32_MAX, &o->gen_batch, err);
    }
    if (!j.failed && o->kind == DT_OBJ_GRPO) {   /* optional (plans before them: TRL's 1 and 1) */
        o->temperature = DT_OBJ_DEFAULT_TEMPERATURE;
        o->top_p = DT_OBJ_DEFAULT_TOP_P;
        o->num_iterations = DT_OBJ_DEFAULT_ITERATIONS;
        if (dt_jobj_has(&j, "temperature")) dt_jobj_num(&j, "temperature", DT_JNUM_POS, &o->temperature, err);
        if (!j.failed && dt_jobj_has(&j, "top_p")) dt_jobj_num(&j, "top_p", DT_JNUM_POS, &o->top_p, err);
        if (!j.failed && dt_jobj_has(&j, "num_iterations"))
            dt_jobj_int(&j, "num_iterations", 1, INT32_MAX, &o->num_iterations, err);
    }
    if (!j.failed && o->kind == DT_OBJ_PPO) {
        if (!dt_jobj_enum(&j, "placement", k_place, 2, &v, err)) o->placement = (dt_placement)v;
        dt_jobj_num(&j, "gen_mem_fraction", DT_JNUM_UNIT_OPEN, &o->gen_mem_fraction, err);
    }
    if (!j.failed && dt_objective_check(o, INT32_MAX, 0, "$.objective", err)) j.failed = err->code;
    if (dt_jobj_close(&j, err)) root->failed = j.failed;
}
