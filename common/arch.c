/* arch.c — the architecture description's family names and consistency check
 * (dt_arch.h). */
#include "dt_arch.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

const char *dt_family_name(dt_family f) {
    switch (f) {
    case DT_FAMILY_GPT2: return "gpt2";
    case DT_FAMILY_LLAMA: return "llama";
    }
    return "?";
}

const char *dt_rope_type_name(dt_rope_type t) {
    switch (t) {
    case DT_ROPE_DEFAULT: return "default";
    case DT_ROPE_LINEAR: return "linear";
    case DT_ROPE_DYNAMIC: return "dynamic";
    case DT_ROPE_LLAMA3: return "llama3";
    }
    return "?";
}

/* HF's keys (modeling_rope_utils.py), which the plan's "rope_scaling" object shares. */
static const char *const k_rope_param_keys[DT_ROPE_N_PARAMS] = {
    "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};

#define ROPE_BIT(p) (1u << (p))
/* The keys HF's _validate_*_rope_parameters read for each type (dynamic's
 * original_max_position_embeddings is optional in config.json; dtplan stores HF's
 * effective value, max_position_embeddings, when it is absent). */
static const unsigned k_rope_uses[] = {
    [DT_ROPE_DEFAULT] = 0,
    [DT_ROPE_LINEAR] = ROPE_BIT(DT_ROPE_FACTOR),
    [DT_ROPE_DYNAMIC] = ROPE_BIT(DT_ROPE_FACTOR) | ROPE_BIT(DT_ROPE_ORIGINAL_MAX_POS),
    [DT_ROPE_LLAMA3] = ROPE_BIT(DT_ROPE_FACTOR) | ROPE_BIT(DT_ROPE_LOW_FREQ_FACTOR) |
                       ROPE_BIT(DT_ROPE_HIGH_FREQ_FACTOR) | ROPE_BIT(DT_ROPE_ORIGINAL_MAX_POS),
};
#define N_ROPE_TYPES ((int)(sizeof k_rope_uses / sizeof k_rope_uses[0]))
/* A scaling factor below 1 would compress positions (HF: "factor field must be a float >= 1"). */
#define DT_ROPE_MIN_FACTOR 1.0

const char *dt_rope_param_key(dt_rope_param p) {
    return (int)p >= 0 && p < DT_ROPE_N_PARAMS ? k_rope_param_keys[p] : "?";
}

int dt_rope_type_uses(dt_rope_type t, dt_rope_param p) {
    if ((int)t < 0 || (int)t >= N_ROPE_TYPES || (int)p < 0 || p >= DT_ROPE_N_PARAMS) return 0;
    return (k_rope_uses[t] & ROPE_BIT(p)) != 0;
}

static double rope_param_value(const dt_rope_scaling *r, dt_rope_param p) {
    switch (p) {
    case DT_ROPE_FACTOR: return r->factor;
    case DT_ROPE_LOW_FREQ_FACTOR: return r->low_freq_factor;
    case DT_ROPE_HIGH_FREQ_FACTOR: return r->high_freq_factor;
    case DT_ROPE_ORIGINAL_MAX_POS: return (double)r->original_max_pos;
    case DT_ROPE_N_PARAMS: break;
    }
    return 0;
}

int dt_rope_scaling_check(const dt_rope_scaling *r, int64_t max_pos, const char *where, dt_error *err) {
    if ((int)r->type < 0 || (int)r->type >= N_ROPE_TYPES)
        return dt_errorf(err, DT_EINVAL, "%s: unknown rope_type %d", where, (int)r->type);
    const char *type = dt_rope_type_name(r->type);
    for (int p = 0; p < DT_ROPE_N_PARAMS; p++) {
        double v = rope_param_value(r, (dt_rope_param)p);
        if (!dt_rope_type_uses(r->type, (dt_rope_param)p) && v != 0)
            return dt_errorf(err, DT_EINVAL, "%s: rope_type \"%s\" has no %s (got %g)", where, type,
                             k_rope_param_keys[p], v);
    }
    if (dt_rope_type_uses(r->type, DT_ROPE_FACTOR) && !(r->factor >= DT_ROPE_MIN_FACTOR && isfinite(r->factor)))
        return dt_errorf(err, DT_EINVAL, "%s: factor must be a number >= 1 for rope_type \"%s\" (got %g)", where,
                         type, r->factor);
    if (dt_rope_type_uses(r->type, DT_ROPE_LOW_FREQ_FACTOR) && !(r->low_freq_factor > 0 && isfinite(r->low_freq_factor)))
        return dt_errorf(err, DT_EINVAL, "%s: low_freq_factor must be a number > 0 (got %g)", where,
                         r->low_freq_factor);
    /* llama3 interpolates between the bands over high_freq_factor - low_freq_factor */
    if (dt_rope_type_uses(r->type, DT_ROPE_HIGH_FREQ_FACTOR) &&
        !(r->high_freq_factor > r->low_freq_factor && isfinite(r->high_freq_factor)))
        return dt_errorf(err, DT_EINVAL, "%s: high_freq_factor (%g) must be greater than low_freq_factor (%g)",
                         where, r->high_freq_factor, r->low_freq_factor);
    if (dt_rope_type_uses(r->type, DT_ROPE_ORIGINAL_MAX_POS) &&
        (r->original_max_pos < 1 || r->original_max_pos > max_pos))
        return dt_errorf(err, DT_EINVAL,
                         "%s: original_max_position_embeddings must be in 1..%lld (the model's max positions; got "
                         "%lld)",
                         where, (long long)max_pos, (long long)r->original_max_pos);
    return DT_OK;
}

/* One field within [lo, hi]; the message names the model and the field. */
static int check_range(const dt_model *m, const char *field, int64_t v, int64_t lo, int64_t hi, dt_error *err) {
    if (v < lo || v > hi)
        return dt_errorf(err, DT_EINVAL, "model '%s': %s = %lld is outside %lld..%lld", m->name, field,
                         (long long)v, (long long)lo, (long long)hi);
    return DT_OK;
}

int dt_model_validate(const dt_model *m, dt_error *err) {
    if (!m) return dt_errorf(err, DT_EINTERNAL, "dt_model_validate: NULL model");
    if (m->family != DT_FAMILY_GPT2 && m->family != DT_FAMILY_LLAMA)
        return dt_errorf(err, DT_EINVAL, "model '%s': unknown family %d", m->name, (int)m->family);
    const struct { const char *name; int64_t v, lo, hi; } ranges[] = {
        {"n_layer", m->n_layer, 1, DT_MAX_LAYERS},     {"hidden", m->hidden, 1, DT_MAX_HIDDEN},
        {"n_head", m->n_head, 1, DT_MAX_HEADS},        {"n_kv_head", m->n_kv_head, 1, m->n_head},
        {"head_dim", m->head_dim, 1, DT_MAX_HEAD_DIM}, {"ffn", m->ffn, 1, DT_MAX_FFN},
        {"vocab", m->vocab, 1, DT_MAX_VOCAB},          {"max_pos", m->max_pos, 1, DT_MAX_POS},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        int rc = check_range(m, ranges[i].name, ranges[i].v, ranges[i].lo, ranges[i].hi, err);
        if (rc) return rc;
    }
    if (m->n_head * m->head_dim > DT_MAX_QDIM)
        return dt_errorf(err, DT_EINVAL, "model '%s': n_head * head_dim = %lld exceeds %lld", m->name,
                         (long long)(m->n_head * m->head_dim), (long long)DT_MAX_QDIM);
    if (m->n_head % m->n_kv_head != 0)
        return dt_errorf(err, DT_EINVAL,
                         "model '%s': n_head (%lld) must be a multiple of n_kv_head (%lld) for GQA",
                         m->name, (long long)m->n_head, (long long)m->n_kv_head);
    if (!(m->norm_eps > 0) || !isfinite(m->norm_eps))
        return dt_errorf(err, DT_EINVAL, "model '%s': norm epsilon must be positive", m->name);
    if (m->family == DT_FAMILY_GPT2) {
        if (m->n_kv_head != m->n_head || m->n_head * m->head_dim != m->hidden)
            return dt_errorf(err, DT_EINVAL,
                             "model '%s': gpt2 needs n_kv_head == n_head and n_head * head_dim == "
                             "hidden (got %lld, %lld, %lld x %lld vs %lld)",
                             m->name, (long long)m->n_kv_head, (long long)m->n_head,
                             (long long)m->n_head, (long long)m->head_dim, (long long)m->hidden);
        if (!m->qkv_bias || m->qk_norm)
            return dt_errorf(err, DT_EINVAL,
                             "model '%s': gpt2 always has linear biases and no q/k norm", m->name);
        if (!m->tied_embeddings)   /* an untied gpt2 would count and train a second V x h matrix */
            return dt_errorf(err, DT_EINVAL,
                             "model '%s': tied_embeddings = false, but gpt2 always ties lm_head to wte (HF "
                             "GPT2LMHeadModel); set tied_embeddings to true",
                             m->name);
        if (m->rope_scaling.type != DT_ROPE_DEFAULT)   /* learned positions (wpe): no rotary frequencies */
            return dt_errorf(err, DT_EINVAL,
                             "model '%s': rope_scaling is \"%s\", but gpt2 has learned positions and no RoPE; "
                             "remove rope_scaling",
                             m->name, dt_rope_type_name(m->rope_scaling.type));
    } else if (!(m->rope_theta > 0) || !isfinite(m->rope_theta)) {
        return dt_errorf(err, DT_EINVAL, "model '%s': rope_theta must be positive", m->name);
    }
    char where[sizeof m->name + 32];
    snprintf(where, sizeof where, "model '%s': rope_scaling", m->name);
    return dt_rope_scaling_check(&m->rope_scaling, m->max_pos, where, err);
}

