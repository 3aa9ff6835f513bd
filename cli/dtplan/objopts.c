/* objopts.c — dtplan's objective options and lines (dt_cli_obj.h, docs/objectives.md). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_cli.h"
#include "dt_cli_obj.h"
#include "dt_memory.h"
#include "dt_objplan.h"
#include "dt_timemodel.h"

/* sanity bound on counts: far above any batch or completion length */
#define OBJ_MAX_INT ((int64_t)1 << 30)

static const struct {
    const char *name, *example;
} k_opts[OBJ_N_VALUES] = {
    [OBJ_KIND] = {"--objective", "dpo"},           [OBJ_GEN] = {"--num-generations", "8"},
    [OBJ_COMPLETION] = {"--max-completion-length", "512"}, [OBJ_KL] = {"--kl-coef", "0.04"},
    [OBJ_GEN_BATCH] = {"--gen-batch", "16"},       [OBJ_TEMPERATURE] = {"--temperature", "0.7"},
    [OBJ_TOP_P] = {"--top-p", "0.9"},              [OBJ_PLACEMENT] = {"--placement", "colocated"},
    [OBJ_GEN_MEM] = {"--gen-mem-fraction", "0.3"},  [OBJ_PREF_LOSS] = {"--pref-loss", "sigmoid"},
    [OBJ_PREF_BETA] = {"--pref-beta", "0.1"},      [OBJ_RM_HEAD] = {"--rm-head", "value"},
    [OBJ_LABEL_SMOOTHING] = {"--label-smoothing", "0.1"}, [OBJ_ITERATIONS] = {"--num-iterations", "2"},
};

int dt_obj_args_take(dt_obj_args *a, int argc, char **argv, int *i, const char *cmd) {
    const char *arg = argv[*i];
    if (!strcmp(arg, "--precompute-ref")) {
        if (a->precompute_ref) return dt_cli_fail(2, "%s: --precompute-ref given twice", cmd);
        a->precompute_ref = a->given = 1;
        return 1;
    }
    const char *eq = strchr(arg, '=');
    const size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    for (int k = 0; k < OBJ_N_VALUES; k++) {
        if (strlen(k_opts[k].name) != len || strncmp(arg, k_opts[k].name, len)) continue;
        const char *val = eq ? eq + 1 : (*i + 1 < argc ? argv[++*i] : NULL);
        if (!val || !*val)
            return dt_cli_fail(2, "%s: %s needs a value (e.g. %s %s)", cmd, k_opts[k].name, k_opts[k].name,
                               k_opts[k].example);
        if (a->v[k]) return dt_cli_fail(2, "%s: %s given twice", cmd, k_opts[k].name);
        a->v[k] = val;
        a->given = 1;
        return 1;
    }
    return 0;
}

void dt_obj_usage(FILE *f) {
    fprintf(f, "objective (docs/objectives.md; default sft for masked chat data, pt otherwise):\n"
               "  --objective O         pt | sft | rm | dpo | grpo | ppo\n"
               "  --precompute-ref      dpo: reference log-probs computed beforehand (no reference model)\n"
               "  --pref-loss L         dpo: sigmoid (default) | hinge | ipo | kto_pair | orpo | simpo (LLaMA-Factory's\n"
               "                        pref_loss; orpo and simpo hold no reference model)\n"
               "  --pref-beta B         dpo: the loss's beta (default 0.1; no effect on memory or time)\n"
               "  --label-smoothing E   dpo sigmoid: conservative DPO's label smoothing in [0, 0.5) (default 0)\n"
               "  --rm-head H           rm: score (default: a classifier head instead of the LM head) | value (a value\n"
               "                        head beside the LM head, whose logits stay: LLaMA-Factory's rm stage)\n"
               "  --num-generations G   grpo: completions per prompt (default 8; must divide the global batch)\n"
               "  --max-completion-length C  grpo/ppo: generated tokens (default 512; the prompt: sequence minus C)\n"
               "  --kl-coef B           grpo/ppo: KL coefficient (grpo default 0: no reference; ppo 0.05)\n"
               "  --gen-batch S         grpo/ppo: sequences decoded at once per GPU (default: the rank's rollout)\n"
               "  --temperature T       grpo: the sampler's temperature (default 1, TRL's; > 0)\n"
               "  --top-p P             grpo: nucleus sampling's top_p (default 1: every token; in (0, 1])\n"
               "  --num-iterations N    grpo: optimizer steps per rollout (TRL's num_iterations, the paper's mu;\n"
               "                        default 1; >= 2: the clipped ratio to the generating policy's log-probs)\n"
               "  --placement P         ppo: colocated (default) | split (frozen models on their own GPUs)\n"
               "  --gen-mem-fraction F  ppo: a separate generation engine's share of each GPU (vLLM's\n"
               "                        gpu_memory_utilization; default 0: generation in the training engine)\n");
}


static int integer(const dt_obj_args *a, int k, int64_t lo, int64_t *out) {
    char *end = NULL;
    long long x = strtoll(a->v[k], &end, 10);
    if (!end || *end || end == a->v[k] || x < lo || x > OBJ_MAX_INT)
        return dt_cli_fail(2, "%s '%s': not an integer >= %" PRId64 " (e.g. %s %s)", k_opts[k].name, a->v[k], lo,
                           k_opts[k].name, k_opts[k].example);
    *out = x;
    return 0;
}

static int real(const dt_obj_args *a, int k, double *out) {
    char *end = NULL;
    double x = strtod(a->v[k], &end);
    if (!end || *end || end == a->v[k] || !isfinite(x) || x < 0)
        return dt_cli_fail(2, "%s '%s': not a number >= 0 (e.g. %s %s)", k_opts[k].name, a->v[k], k_opts[k].name,
                           k_opts[k].example);
    *out = x;
    return 0;
}

int dt_obj_args_apply(const dt_obj_args *a, dt_plan *p) {
    if (!a->given) return 0;   /* the plan's own objective (none: auto) */
    dt_error e = {0};
    dt_obj_kind k = p->objective.kind;
    if (a->v[OBJ_KIND] && dt_obj_parse(a->v[OBJ_KIND], &k, &e)) return dt_cli_fail(2, "%s", e.msg);
    if (k == DT_OBJ_AUTO)
        return dt_cli_fail(2, "%s needs --objective (e.g. --objective %s)",
                           a->precompute_ref ? "--precompute-ref" : "an objective setting", a->precompute_ref ? "dpo" : "grpo");
    dt_objective o;
    if (a->v[OBJ_KIND]) dt_objective_defaults(k, &o);
    else o = p->objective;
    o.precompute_ref = a->precompute_ref || (o.precompute_ref && !a->v[OBJ_KIND]);
    if (a->v[OBJ_GEN] && integer(a, OBJ_GEN, 1, &o.num_generations)) return 2;
    if (a->v[OBJ_COMPLETION] && integer(a, OBJ_COMPLETION, 1, &o.completion_len)) return 2;
    if (a->v[OBJ_GEN_BATCH] && integer(a, OBJ_GEN_BATCH, 1, &o.gen_batch)) return 2;
    if (a->v[OBJ_KL] && real(a, OBJ_KL, &o.kl_coef)) return 2;
    if (a->v[OBJ_TEMPERATURE] && real(a, OBJ_TEMPERATURE, &o.temperature)) return 2;
    if (a->v[OBJ_TOP_P] && real(a, OBJ_TOP_P, &o.top_p)) return 2;
    if (a->v[OBJ_ITERATIONS] && integer(a, OBJ_ITERATIONS, 1, &o.num_iterations)) return 2;
    for (int i = 0; i < OBJ_N_VALUES; i++)
        if (a->v[i] && k != DT_OBJ_GRPO && (i == OBJ_TEMPERATURE || i == OBJ_TOP_P || i == OBJ_ITERATIONS))
            return dt_cli_fail(2, "%s is a grpo setting, not %s's (drop it, or use --objective grpo)", k_opts[i].name,
                               dt_obj_name(k));
    if (a->v[OBJ_GEN_MEM] && real(a, OBJ_GEN_MEM, &o.gen_mem_fraction)) return 2;
    dt_error pe = {0};
    if (a->v[OBJ_PREF_LOSS] && dt_pref_loss_parse(a->v[OBJ_PREF_LOSS], &o.pref_loss, &pe))
        return dt_cli_fail(2, "--pref-loss: %s (e.g. --pref-loss sigmoid)", pe.msg);
    if (a->v[OBJ_PREF_BETA] && real(a, OBJ_PREF_BETA, &o.pref_beta)) return 2;
    if (a->v[OBJ_LABEL_SMOOTHING] && real(a, OBJ_LABEL_SMOOTHING, &o.label_smoothing)) return 2;
    if (a->v[OBJ_LABEL_SMOOTHING] && k != DT_OBJ_DPO)
        return dt_cli_fail(2, "--label-smoothing is a dpo setting, not %s's (drop it, or use --objective dpo)",
                           dt_obj_name(k));
    if (a->v[OBJ_RM_HEAD] && dt_rm_head_parse(a->v[OBJ_RM_HEAD], &o.rm_head, &pe))
        return dt_cli_fail(2, "--rm-head: %s (e.g. --rm-head value)", pe.msg);
    for (int i = OBJ_PREF_LOSS; i <= OBJ_RM_HEAD; i++)
        if (a->v[i] && k != (i == OBJ_RM_HEAD ? DT_OBJ_RM : DT_OBJ_DPO))
            return dt_cli_fail(2, "%s is a%s setting, not %s's (drop it, or use --objective %s)", k_opts[i].name,
                               i == OBJ_RM_HEAD ? "n rm" : " dpo", dt_obj_name(k), i == OBJ_RM_HEAD ? "rm" : "dpo");
    if (a->v[OBJ_PLACEMENT]) {
        if (!strcmp(a->v[OBJ_PLACEMENT], "colocated")) o.placement = DT_PLACE_COLOCATED;
        else if (!strcmp(a->v[OBJ_PLACEMENT], "split")) o.placement = DT_PLACE_SPLIT;
        else return dt_cli_fail(2, "--placement '%s': colocated or split (e.g. --placement split)", a->v[OBJ_PLACEMENT]);
    }
    /* settings given for an objective that does not take them: name the option */
    if (a->precompute_ref && k != DT_OBJ_DPO)
        return dt_cli_fail(2, "--precompute-ref is a dpo setting; %s computes what it needs inside the step (drop it, "
                           "or use --objective dpo)", dt_obj_name(k));
    if (!dt_obj_generates(k))
        for (int i = OBJ_GEN; i <= OBJ_GEN_BATCH; i++)
            if (a->v[i])
                return dt_cli_fail(2, "%s is a grpo / ppo setting, not %s's (drop it, or use --objective grpo)",
                                   k_opts[i].name, dt_obj_name(k));
    for (int i = OBJ_PLACEMENT; i <= OBJ_GEN_MEM; i++)
        if (a->v[i] && k != DT_OBJ_PPO)
            return dt_cli_fail(2, "%s is a ppo setting, not %s's (drop it, or use --objective ppo)", k_opts[i].name,
                               dt_obj_name(k));
    if (a->v[OBJ_GEN] && k == DT_OBJ_PPO)
        return dt_cli_fail(2, "--num-generations is grpo's: ppo samples one completion per prompt (drop it)");
    if (dt_objective_check(&o, p->batch.seq_len, p->batch.global_batch, "--objective", &e))
        return dt_cli_fail(2, "%s", e.msg);
    p->objective = o;
    return 0;
}

void dt_obj_print_summary(const dt_plan *p, const char *label) {
    if (!dt_objplan_active(p)) return;
    char d[256];
    dt_objplan_describe(p, d, sizeof d);
    printf("%s%s (docs/objectives.md)\n", label, d);
}

static void row(const char *model, const char *state, int64_t b, dt_units u, const char *note) {
    char s[32];
    printf("  %-11s %-9s %12s  %s\n", model, state, dt_format_bytes(b, u, s, sizeof s), note);
}

void dt_obj_print_terms(const dt_plan *p, dt_units u) {
    if (!dt_objplan_active(p)) return;
    dt_obj_terms t;
    dt_mem_phases ph;
    dt_error e = {0};
    dt_memory_objective_terms(p, &t);
    if (dt_memory_phases(p, p->model.requested_params, &ph, &e)) return;
    dt_objplan_generation(p, &t, &ph, 0);   /* measured against the reported peak: excess already in */
    const dt_mem_breakdown *m = &ph.at[ph.peak];
    const dt_obj_kind k = dt_obj_effective(&p->objective, p->data.loss_mask);
    const int pairs = dt_obj_pairs(k);
    const double r = t.critic_ratio;
    /* the policy's own state: the peak's minus the other models' */
    const int64_t crit_p = (int64_t)((double)(m->params - t.ref_weights - t.reward_weights) * r / (1.0 + r));
    const int64_t crit_g = (int64_t)((double)m->grads * r / (1.0 + r)), crit_o = (int64_t)((double)m->optimizer * r / (1.0 + r));
    printf("\nmodels (ZeRO-%d, offload %s/%s; per %s, at the peak):\n", p->parallel.zero_stage,
           dt_offload_name(p->parallel.offload_optimizer), dt_offload_name(p->parallel.offload_param), "GPU");
    printf("  %-11s %-9s %12s  %s\n", "model", "term", "bytes", "note");
    const char *pol = k == DT_OBJ_RM ? "reward" : k == DT_OBJ_PPO ? "actor" : "policy";
    row(pol, "weights", m->params - t.ref_weights - t.reward_weights - crit_p, u,
        k != DT_OBJ_RM ? "trained"
        : p->objective.rm_head == DT_RM_HEAD_VALUE ? "trained, value head h -> 1 beside the LM head"
                                                   : "trained, score head h -> 1 instead of the LM head");
    row(pol, "grads", m->grads - crit_g, u, "");
    row(pol, "optimizer", m->optimizer - crit_o, u, "");
    row(pol, "activ", m->activations - t.ref_activations, u,
        pairs ? "chosen + rejected: 2 x micro-batch sequences" : "kept for backward");
    const int dtrun = p->runtime.kind == DT_RUNTIME_DTRUN;
    if (t.ref_held && !t.split)
        row("reference", "weights", t.ref_weights, u,
            dtrun ? "frozen, forward only; replicated on every rank at every stage (dtrun)"
            : p->parallel.zero_stage == 3 ? "frozen, forward only; partitioned (ZeRO-3)"
                                          : "frozen, forward only; replicated on every rank");
    if (t.ref_activations) row("reference", "activ", t.ref_activations, u, "dtrun: its own activation buffer (its rows)");
    if (t.ref_buffers) row("reference", "buffers", t.ref_buffers, u, "dtrun: its logits and scratch");
    if (k == DT_OBJ_PPO) {
        row("critic", "weights", crit_p, u, "trained (the policy's architecture + a score head)");
        row("critic", "grads", crit_g, u, "");
        row("critic", "optimizer", crit_o, u, "");
        if (!t.split) row("reward", "weights", t.reward_weights, u, "frozen, forward only");
        else row("frozen grp", "per GPU", t.split_frozen, u, "split placement: reference + reward on their own GPUs");
    }
    if (t.gen_engine) row("gen engine", "reserved", t.gen_engine, u, "--gen-mem-fraction x device memory (its KV cache inside)");
    if (dt_obj_generates(k)) {
        row("generation", "KV cache", t.kv_cache, u, "2 L kv d bytes x seq_len x sequences in flight");
        row("generation", "logits", t.sampler_logits, u, "sampler: last position's logits + fp32 copy");
        if (t.gathered) row("generation", "gathered", t.gathered, u, "ZeRO-3: the policy's other partitions for generate");
        if (t.generator) row("generation", "generator", t.generator, u, "dtrun: fp32 weights + KV cache + logits + scratch, held all run");
        if (t.gen_unit) row("generation", "unit", t.gen_unit, u, "dtrun ZeRO-3: the largest group, gathered for the generator");
        if (t.rollout_batch) row("generation", "rollout", t.rollout_batch, u, "ids, labels, mask per token; lengths, rewards");
        row("generation", "phase", t.gen_total, u,
            dtrun ? "dtrun: allocated up front, every phase holds it (the total)"
            : t.gen_total >= m->total ? "the step's peak: its excess over training is in buffers" : "below the training peak");
    }
    if (dt_objplan_time(p, &t, &e)) return;
    if (dt_objplan_step_s(&t) <= 0) return;   /* rm: one model, no phase of its own */
    printf("  time per step: reference/reward/critic forwards %.4g s, critic training %.4g s, prefill %.4g s, "
           "decode %.4g s", t.ref_fwd_s, t.critic_s, t.prefill_s, t.decode_s);
    if (dt_obj_generates(k))
        printf(" (%" PRId64 " completions per GPU, %" PRId64 " at once)", t.rollout_seqs, t.gen_seqs);
    printf("\n");
}

void dt_obj_print_json(const dt_plan *p) {
    if (!dt_objplan_active(p)) return;
    const dt_objective *o = &p->objective;
    dt_obj_terms t;
    dt_error e = {0};
    dt_objplan_terms(p, &t);
    dt_objplan_time(p, &t, &e);
    printf("  \"objective\": {\"kind\": \"%s\", \"reference\": %s, \"reference_bytes\": %" PRId64
           ", \"reward_bytes\": %" PRId64 ", \"critic_ratio\": %g, \"num_generations\": %" PRId64
           ", \"max_completion_length\": %" PRId64 ", \"kv_cache_bytes\": %" PRId64 ", \"sampler_logits_bytes\": %" PRId64
           ", \"gathered_bytes\": %" PRId64 ", \"gen_engine_bytes\": %" PRId64 ", \"ref_fwd_s\": %g, \"critic_s\": %g"
           ", \"prefill_s\": %g, \"decode_s\": %g, \"pref_loss\": \"%s\", \"pref_beta\": %g, \"rm_head\": \"%s\"},\n",
           dt_obj_name(o->kind), t.ref_held ? "true" : "false", t.ref_weights, t.reward_weights, t.critic_ratio,
           o->num_generations, o->completion_len, t.kv_cache, t.sampler_logits, t.gathered, t.gen_engine, t.ref_fwd_s,
           t.critic_s, t.prefill_s, t.decode_s, dt_pref_loss_name(o->pref_loss), o->pref_beta,
           dt_rm_head_name(o->rm_head));
}

void dt_obj_print_framework(const dt_plan *p, FILE *f) {
    if (!dt_objplan_active(p)) return;
    const dt_objective *o = &p->objective;
    static const char *const lf_stage[] = {"pt", "pt", "sft", "rm", "dpo", "grpo", "ppo"};
    switch (o->kind) {
    case DT_OBJ_DPO:   /* TRL has sigmoid / hinge / ipo as loss_type; orpo, simpo are its ORPO / CPO trainers */
        fprintf(f, "TRL DPOConfig: precompute_ref_log_probs=%s, beta=%g%s%s; LLaMA-Factory: stage: dpo, pref_loss: %s, "
                "pref_beta: %g\n", o->precompute_ref ? "True" : "False", o->pref_beta,
                o->pref_loss <= DT_PREF_IPO ? ", loss_type=" : "", o->pref_loss <= DT_PREF_IPO ? dt_pref_loss_name(o->pref_loss) : "",
                dt_pref_loss_name(o->pref_loss), o->pref_beta);
        break;
    case DT_OBJ_RM:
        fprintf(f, "%s; LLaMA-Factory: stage: rm%s\n",
                o->rm_head == DT_RM_HEAD_VALUE ? "trl AutoModelForCausalLMWithValueHead (a value head on the causal LM)"
                                               : "TRL RewardConfig (AutoModelForSequenceClassification, num_labels=1)",
                o->rm_head == DT_RM_HEAD_VALUE ? "" : " (which trains a value head instead: plan --rm-head value)");
        break;
    case DT_OBJ_GRPO:
        fprintf(f, "TRL GRPOConfig: num_generations=%" PRId64 ", max_completion_length=%" PRId64 ", beta=%g, "
                "num_iterations=%" PRId64 "%s\n", o->num_generations, o->completion_len, o->kl_coef, o->num_iterations,
                p->parallel.zero_stage == 3 ? ", ds3_gather_for_generation=True" : "");
        break;
    default:
        fprintf(f, "LLaMA-Factory: stage: %s%s\n", lf_stage[o->kind],
                o->kind == DT_OBJ_PPO && o->gen_mem_fraction > 0 ? "; vLLM gpu_memory_utilization for the generation engine" : "");
        break;
    }
}
