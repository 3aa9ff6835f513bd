/* arch.c — the architecture description's family names and consistency check
 * (dt_arch.h). */
#include "dt_arch.h"

#include <math.h>
#include <stddef.h>

const char *dt_family_name(dt_family f) {
    switch (f) {
    case DT_FAMILY_GPT2: return "gpt2";
    case DT_FAMILY_LLAMA: return "llama";
    }
    return "?";
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
    } else if (!(m->rope_theta > 0) || !isfinite(m->rope_theta)) {
        return dt_errorf(err, DT_EINVAL, "model '%s': rope_theta must be positive", m->name);
    }
    return DT_OK;
}

