/* pgroup.c — a model's parameter groups under a fine-tuning method (dt_pgroup.h),
 * built from the family description (dt_model_describe over models/family.c's
 * k_family_rows): no second table of modules. Name matching follows the tools users
 * run: PEFT matches a target against the end of a module's dotted path
 * (tuners/tuners_utils.py check_target_module_exists: key == target or
 * key.endswith("." + target)); LLaMA-Factory's freeze_trainable_modules name modules
 * right after the block index (model/adapter.py _setup_freeze_tuning:
 * ".{idx}.{module}" in the parameter's name). */
#include "dt_pgroup.h"
#include "dt_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_MAX 512   /* room for a family's module names in a message */

/* ---- the description's tensors, in HF order ---- */

typedef struct {
    const char *module, *tensor;
    int64_t rows, cols;
    int linear;
} tensor_ref;

#define BLOCK_TENSORS_MAX 32
typedef struct {
    int n;
    tensor_ref t[BLOCK_TENSORS_MAX];
} tensor_list;

static void push(tensor_list *l, const char *module, const char *tensor, int64_t rows, int64_t cols, int linear) {
    if (l->n < BLOCK_TENSORS_MAX && rows > 0 && cols > 0) l->t[l->n++] = (tensor_ref){module, tensor, rows, cols, linear};
}

static void push_norm(tensor_list *l, const dt_norm_desc *n) {
    push(l, n->name, "weight", 1, n->width, 0);
    if (n->kind == DT_NORM_LAYERNORM) push(l, n->name, "bias", 1, n->width, 0);
}

static void push_linear(tensor_list *l, const dt_linear_desc *x) {
    push(l, x->name, "weight", x->out, x->in, 1);
    if (x->bias) push(l, x->name, "bias", 1, x->out, 0);
}

static void block_tensors(const dt_model_desc *d, tensor_list *l) {
    memset(l, 0, sizeof *l);
    const dt_sublayer_desc *subs[2] = {&d->block.attn, &d->block.mlp};
    for (int k = 0; k < 2; k++) {
        push_norm(l, &subs[k]->norm);
        for (int i = 0; i < subs[k]->n_in; i++) push_linear(l, &subs[k]->in[i]);
        for (int i = 0; i < subs[k]->n_in_norm; i++) push_norm(l, &subs[k]->in_norm[i]);
        push_linear(l, &subs[k]->out);
    }
}

/* Outside the blocks: embeddings, final norm, the untied lm_head. */
static void outer_tensors(const dt_model_desc *d, tensor_list *l) {
    memset(l, 0, sizeof *l);
    for (int i = 0; i < d->n_embed; i++) push(l, d->embed[i].name, "weight", d->embed[i].rows, d->embed[i].width, 1);
    push_norm(l, &d->final_norm);
    if (!d->lm_head_tied) push(l, d->lm_head.name, "weight", d->lm_head.out, d->lm_head.in, 1);
}

/* ---- names ---- */

static int suffix_match(const char *path, const char *pat) {
    size_t lp = strlen(path), lq = strlen(pat);
    if (lq > lp) return 0;
    return !strcmp(path, pat) || (lq < lp && path[lp - lq - 1] == '.' && !strcmp(path + lp - lq, pat));
}

static int prefix_match(const char *path, const char *pat) {
    size_t lq = strlen(pat);
    return !strncmp(path, pat, lq) && (path[lq] == '\0' || path[lq] == '.');
}

/* lm_head of a tied model is the embedding's tensor. */
static const char *outer_alias(const dt_model_desc *d, const char *name) {
    if (d->lm_head_tied && !strcmp(name, d->lm_head.name) && d->n_embed > 0) return d->embed[0].name;
    return name;
}

static int is_outer(const dt_model_desc *d, const tensor_list *outer, const char *name) {
    const char *n = outer_alias(d, name);
    for (int i = 0; i < outer->n; i++)
        if (!strcmp(outer->t[i].module, n)) return 1;
    return 0;
}

int dt_model_outer_module(const dt_model *m, const char *name) {
    dt_model_desc d;
    tensor_list outer;
    dt_model_describe(m, &d);
    outer_tensors(&d, &outer);
    return is_outer(&d, &outer, name);
}

static int in_list(const dt_model_desc *d, const dt_ft_names *l, const char *module) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(outer_alias(d, l->name[i]), module)) return 1;
    return 0;
}

/* "a, b, c" of the distinct modules of l (linears only when linears_only). */
static void module_names(const tensor_list *l, int linears_only, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < l->n && used < n; i++) {
        if (linears_only && !l->t[i].linear) continue;
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = !strcmp(l->t[j].module, l->t[i].module);
        if (!seen) used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", l->t[i].module);
    }
}

/* ---- building ---- */

static int add(dt_pgroups *s, dt_pgroup g, dt_error *err) {
    if (s->n == DT_PGROUPS_MAX)
        return dt_errorf(err, DT_EINTERNAL, "model description: more than %d parameter groups", DT_PGROUPS_MAX);
    s->g[s->n++] = g;
    return DT_OK;
}

/* Storage of a frozen base tensor: QLoRA quantises every linear of the blocks (and any
 * other nn.Linear not in skip_modules; transformers replace_with_bnb_linear) and leaves the
 * rest in the load dtype, or fp32 after prepare_model_for_kbit_training. */
static dt_storage base_storage(const dt_finetune *ft, const tensor_ref *t, int outer_embedding, dt_dtype load) {
    if (ft->method != DT_FT_QLORA) return dt_storage_of_dtype(load);
    const int quantized = t->linear && !outer_embedding && !dt_ft_names_has(&ft->quant_skip, t->module) &&
                          strcmp(t->tensor, "weight") == 0;
    if (quantized) return ft->quant;
    return ft->upcast_unquantized ? DT_STORAGE_FP32 : dt_storage_of_dtype(load);
}

typedef struct {
    const dt_model *m;
    const dt_finetune *ft;
    dt_dtype load;
    int64_t lo, hi;        /* freeze: the trained blocks [lo, hi) */
    int block_names;       /* freeze: some trainable_modules name block modules */
} build_ctx;

static int freeze_selects(const build_ctx *c, const char *module) {
    if (!c->block_names) return 1;
    for (int i = 0; i < c->ft->trainable_modules.n; i++)
        if (prefix_match(module, c->ft->trainable_modules.name[i])) return 1;
    return 0;
}

static int adapter_groups(dt_pgroups *s, const build_ctx *c, const tensor_ref *t, int in_block, dt_error *err) {
    const int64_t r = c->ft->lora_rank, L = in_block ? c->m->n_layer : 1;
    dt_storage st = dt_storage_of_dtype(c->ft->adapter_dtype);
    dt_pgroup a = {t->module, "lora_A.weight", in_block, 0, L, r, t->cols, DT_TRAIN_ADAPTER, st, 1, 0};
    dt_pgroup b = {t->module, "lora_B.weight", in_block, 0, L, t->rows, r, DT_TRAIN_ADAPTER, st, 1, 0};
    if (add(s, a, err)) return err->code;
    return add(s, b, err);
}

static int lora_targets(const build_ctx *c, const tensor_ref *t, int in_block) {
    if (!t->linear || strcmp(t->tensor, "weight")) return 0;
    if (c->ft->lora_target_all) return in_block;   /* every linear of the blocks, not lm_head */
    for (int i = 0; i < c->ft->lora_target.n; i++)
        if (suffix_match(t->module, c->ft->lora_target.name[i])) return 1;
    return 0;
}

static int block_groups(dt_pgroups *s, const build_ctx *c, const tensor_ref *t, dt_error *err) {
    const dt_finetune *ft = c->ft;
    const int64_t L = c->m->n_layer;
    dt_pgroup g = {t->module, t->tensor, 1, 0, L, t->rows, t->cols, DT_TRAIN_TRAINED, dt_storage_of_dtype(c->load),
                   t->linear, 0};
    if (ft->method == DT_FT_FULL) return add(s, g, err);
    if (ft->method == DT_FT_FREEZE) {
        if (!freeze_selects(c, t->module)) {
            g.train = DT_TRAIN_FROZEN;
            return add(s, g, err);
        }
        dt_pgroup parts[3] = {g, g, g};
        parts[0].first_layer = 0, parts[0].n_layers = c->lo, parts[0].train = DT_TRAIN_FROZEN;
        parts[1].first_layer = c->lo, parts[1].n_layers = c->hi - c->lo;
        parts[2].first_layer = c->hi, parts[2].n_layers = L - c->hi, parts[2].train = DT_TRAIN_FROZEN;
        for (int i = 0; i < 3; i++)
            if (parts[i].n_layers > 0 && add(s, parts[i], err)) return err->code;
        return DT_OK;
    }
    g.train = DT_TRAIN_FROZEN;
    g.storage = base_storage(ft, t, 0, c->load);
    if (add(s, g, err)) return err->code;
    for (int i = 0; i < ft->modules_to_save.n; i++)
        if (suffix_match(t->module, ft->modules_to_save.name[i])) {   /* PEFT's trained copy beside the original */
            dt_pgroup copy = g;
            copy.train = DT_TRAIN_TRAINED, copy.storage = dt_storage_of_dtype(c->load);
            if (add(s, copy, err)) return err->code;
            break;
        }
    return lora_targets(c, t, 1) ? adapter_groups(s, c, t, 1, err) : DT_OK;
}

static int outer_groups(dt_pgroups *s, const build_ctx *c, const dt_model_desc *d, const tensor_ref *t, int embedding,
                        dt_error *err) {
    const dt_finetune *ft = c->ft;
    dt_pgroup g = {t->module, t->tensor, 0, 0, 1, t->rows, t->cols, DT_TRAIN_TRAINED, dt_storage_of_dtype(c->load),
                   t->linear, embedding};
    if (ft->method == DT_FT_FULL) return add(s, g, err);
    if (ft->method == DT_FT_FREEZE) {
        if (!in_list(d, &ft->trainable_modules, t->module)) g.train = DT_TRAIN_FROZEN;
        return add(s, g, err);
    }
    g.train = DT_TRAIN_FROZEN;
    g.storage = base_storage(ft, t, embedding, c->load);
    if (add(s, g, err)) return err->code;
    if (in_list(d, &ft->modules_to_save, t->module)) {
        dt_pgroup copy = g;
        copy.train = DT_TRAIN_TRAINED, copy.storage = dt_storage_of_dtype(c->load);
        if (add(s, copy, err)) return err->code;
    }
    return lora_targets(c, t, 0) ? adapter_groups(s, c, t, 0, err) : DT_OK;
}

/* ---- the model's checks of the method's settings ---- */

static int check_freeze(const dt_model *m, const dt_model_desc *d, const tensor_list *blk, const tensor_list *outer,
                        build_ctx *c, dt_error *err) {
    const dt_finetune *ft = c->ft;
    const int64_t L = m->n_layer, N = ft->trainable_layers;
    if (N == 0 || N > L || N < -L)
        return dt_errorf(err, DT_EINVAL,
                         "--trainable-layers %lld: %s has %lld blocks (use 1..%lld for the last N, -1..-%lld for the "
                         "first N)", (long long)N, m->name, (long long)L, (long long)L, (long long)L);
    c->lo = N > 0 ? L - N : 0;
    c->hi = N > 0 ? L : -N;
    for (int i = 0; i < ft->trainable_modules.n; i++) {
        const char *n = ft->trainable_modules.name[i];
        if (!strcmp(n, "all") || is_outer(d, outer, n)) continue;
        int found = 0;
        for (int k = 0; k < blk->n && !found; k++) found = prefix_match(blk->t[k].module, n);
        if (!found) {
            char bl[LIST_MAX], ol[LIST_MAX];
            module_names(blk, 0, bl, sizeof bl);
            module_names(outer, 0, ol, sizeof ol);
            return dt_errorf(err, DT_EINVAL, "--trainable-modules %s: %s (%s family) has no module '%s' (in its blocks: "
                             "%s, or their parents self_attn / mlp / attn; outside them: %s)", n, m->name,
                             dt_family_name(m->family), n, bl, ol);
        }
        c->block_names = 1;
    }
    return DT_OK;
}

static int check_lora(const dt_model *m, const dt_model_desc *d, const tensor_list *blk, const tensor_list *outer,
                      const build_ctx *c, dt_error *err) {
    const dt_finetune *ft = c->ft;
    char bl[LIST_MAX];
    module_names(blk, 1, bl, sizeof bl);
    for (int i = 0; !ft->lora_target_all && i < ft->lora_target.n; i++) {
        const char *n = ft->lora_target.name[i];
        int found = 0;
        for (int k = 0; k < blk->n && !found; k++) found = blk->t[k].linear && suffix_match(blk->t[k].module, n);
        for (int k = 0; k < outer->n && !found; k++) found = outer->t[k].linear && !strcmp(outer->t[k].module, n);
        if (!found)
            return dt_errorf(err, DT_EINVAL, "--lora-target %s: %s (%s family) has no linear '%s' (its blocks' linears: "
                             "%s; or all)", n, m->name, dt_family_name(m->family), n, bl);
    }
    for (int i = 0; i < ft->modules_to_save.n; i++) {
        const char *n = ft->modules_to_save.name[i];
        int found = is_outer(d, outer, n);
        for (int k = 0; k < blk->n && !found; k++) found = suffix_match(blk->t[k].module, n);
        if (!found) {
            char ol[LIST_MAX];
            module_names(outer, 0, ol, sizeof ol);
            return dt_errorf(err, DT_EINVAL, "--modules-to-save %s: %s has no module '%s' (e.g. %s)", n, m->name, n, ol);
        }
    }
    for (int i = 0; ft->method == DT_FT_QLORA && i < ft->quant_skip.n; i++) {
        const char *n = ft->quant_skip.name[i];
        int found = is_outer(d, outer, n);
        for (int k = 0; k < blk->n && !found; k++) found = !strcmp(blk->t[k].module, n);
        if (!found)
            return dt_errorf(err, DT_EINVAL, "--quant-skip %s: %s has no module '%s' (its blocks' linears: %s; lm_head)",
                             n, m->name, n, bl);
    }
    return DT_OK;
}

/* rank <= min(in, out) of every adapted linear (a larger rank adds parameters and no rank). */
static int check_ranks(const dt_model *m, const dt_pgroups *s, const dt_finetune *ft, dt_error *err) {
    for (int i = 0; i < s->n; i++) {
        const dt_pgroup *g = &s->g[i];
        if (g->train != DT_TRAIN_ADAPTER || strcmp(g->tensor, "lora_B.weight")) continue;
        const dt_pgroup *a = i > 0 ? &s->g[i - 1] : g;   /* lora_A comes first */
        const int64_t in = a->cols, out = g->rows, lim = in < out ? in : out;
        if (ft->lora_rank > lim)
            return dt_errorf(err, DT_EINVAL, "--lora-rank %lld: above min(in, out) = %lld of %s's %s (in %lld, out "
                             "%lld): use --lora-rank %lld or less", (long long)ft->lora_rank, (long long)lim, m->name,
                             g->module, (long long)in, (long long)out, (long long)lim);
    }
    return DT_OK;
}

int dt_model_pgroups(const dt_model *m, const dt_finetune *ft, dt_dtype load_dtype, dt_model_role role,
                     dt_pgroups *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    out->role = role;
    out->n_layer = m->n_layer;
    out->double_quant = ft->double_quant;
    out->quant_block = ft->quant_block > 0 ? ft->quant_block : DT_QUANT_BLOCK;
    int rc = dt_finetune_check(ft, "fine-tuning", err);
    if (rc) return rc;
    dt_model_desc d;
    dt_model_describe(m, &d);
    tensor_list blk, outer;
    block_tensors(&d, &blk);
    outer_tensors(&d, &outer);
    build_ctx c = {m, ft, load_dtype, 0, m->n_layer, 0};
    if (ft->method == DT_FT_FREEZE && (rc = check_freeze(m, &d, &blk, &outer, &c, err))) return rc;
    if (dt_ft_is_lora(ft) && (rc = check_lora(m, &d, &blk, &outer, &c, err))) return rc;
    /* HF order: embeddings, the blocks, the final norm, lm_head */
    for (int i = 0; i < d.n_embed; i++)
        if ((rc = outer_groups(out, &c, &d, &outer.t[i], 1, err))) return rc;
    for (int i = 0; i < blk.n; i++)
        if ((rc = block_groups(out, &c, &blk.t[i], err))) return rc;
    for (int i = d.n_embed; i < outer.n; i++)
        if ((rc = outer_groups(out, &c, &d, &outer.t[i], 0, err))) return rc;
    return dt_ft_is_lora(ft) ? check_ranks(m, out, ft, err) : DT_OK;
}

/* ---- sums ---- */

int64_t dt_pgroup_elems(const dt_pgroup *g) { return g->n_layers * g->rows * g->cols; }

int64_t dt_pgroup_bytes(const dt_pgroups *s, const dt_pgroup *g) {
    return g->n_layers * dt_storage_tensor_bytes(g->storage, g->rows, g->cols, s->double_quant, s->quant_block);
}

int64_t dt_pgroups_elems(const dt_pgroups *s, dt_trainability t) {
    int64_t n = 0;
    for (int i = 0; i < s->n; i++)
        if (s->g[i].train == t) n += dt_pgroup_elems(&s->g[i]);
    return n;
}

int64_t dt_pgroups_bytes(const dt_pgroups *s, dt_trainability t) {
    int64_t n = 0;
    for (int i = 0; i < s->n; i++)
        if (s->g[i].train == t) n += dt_pgroup_bytes(s, &s->g[i]);
    return n;
}

int64_t dt_pgroups_quantized_elems(const dt_pgroups *s) {
    int64_t n = 0;
    for (int i = 0; i < s->n; i++)
        if (dt_storage_is_quantized(s->g[i].storage)) n += dt_pgroup_elems(&s->g[i]);
    return n;
}

int64_t dt_pgroups_largest_quantized(const dt_pgroups *s) {
    int64_t best = 0;
    for (int i = 0; i < s->n; i++)
        if (dt_storage_is_quantized(s->g[i].storage) && s->g[i].rows * s->g[i].cols > best)
            best = s->g[i].rows * s->g[i].cols;
    return best;
}

int dt_pgroups_embedding_trained(const dt_pgroups *s) {
    for (int i = 0; i < s->n; i++)
        if (s->g[i].embedding && s->g[i].train != DT_TRAIN_FROZEN) return 1;
    return 0;
}

int64_t dt_pgroups_first_trained_layer(const dt_pgroups *s) {
    if (dt_pgroups_embedding_trained(s)) return 0;
    int64_t first = s->n_layer;
    for (int i = 0; i < s->n; i++)
        if (s->g[i].in_block && s->g[i].train != DT_TRAIN_FROZEN && s->g[i].n_layers > 0 && s->g[i].first_layer < first)
            first = s->g[i].first_layer;
    return first;
}

static int covers(const dt_pgroup *g, int64_t layer) {
    return g->in_block && layer >= g->first_layer && layer < g->first_layer + g->n_layers;
}

void dt_pgroups_module_state(const dt_pgroups *s, const char *module, int64_t layer, int *trained, int *adapted) {
    *trained = *adapted = 0;
    for (int i = 0; i < s->n; i++) {
        const dt_pgroup *g = &s->g[i];
        if (!covers(g, layer) || strcmp(g->module, module)) continue;
        if (g->train == DT_TRAIN_TRAINED && !strcmp(g->tensor, "weight")) *trained = 1;
        if (g->train == DT_TRAIN_ADAPTER) *adapted = 1;
    }
}

int dt_pgroups_tensor_trained(const dt_pgroups *s, const char *module, const char *tensor, int64_t layer) {
    for (int i = 0; i < s->n; i++) {
        const dt_pgroup *g = &s->g[i];
        const int here = layer < 0 ? !g->in_block : covers(g, layer);
        if (here && g->train == DT_TRAIN_TRAINED && !strcmp(g->module, module) && !strcmp(g->tensor, tensor))
            return 1;
    }
    return 0;
}

/* ---- activations ---- */

/* A linear input x is kept for the weight gradient when the weight is trained, and by
 * lora_A (x itself when dropout is 0, dropout(x) otherwise) when adapted. */
static int keeps_input(const dt_pgroups *s, const char *module, int64_t layer, int dropout) {
    int tr, ad;
    dt_pgroups_module_state(s, module, layer, &tr, &ad);
    return tr || (ad && !dropout);
}

static void sublayer_ft_saved(const dt_pgroups *s, const dt_sublayer_desc *sub, int64_t layer, int dropout,
                              int core_keeps_out, int64_t r, dt_ft_saved *acc) {
    int kept = keeps_input(s, sub->norm.name, layer, 0);   /* a trained norm weight keeps its normalised output */
    for (int i = 0; i < sub->n_in; i++) kept |= keeps_input(s, sub->in[i].name, layer, dropout);
    if (!kept) acc->dropped += sub->norm.width * sub->norm.rows;
    if (!core_keeps_out && !keeps_input(s, sub->out.name, layer, dropout)) acc->dropped += sub->out.in;
    const dt_linear_desc *lins[DT_SUBLAYER_MAX_IN + 1];
    int n = 0;
    for (int i = 0; i < sub->n_in; i++) lins[n++] = &sub->in[i];
    lins[n++] = &sub->out;
    for (int i = 0; i < n; i++) {
        int tr, ad;
        dt_pgroups_module_state(s, lins[i]->name, layer, &tr, &ad);
        if (!ad) continue;
        acc->lora_rank += r;
        if (dropout) acc->lora_dropout_in += lins[i]->in;
    }
}

void dt_pgroups_block_saved(const dt_model *m, const dt_pgroups *s, const dt_finetune *ft, int64_t layer,
                            int attn_keeps_out, int grad_in, dt_ft_saved *out) {
    memset(out, 0, sizeof *out);
    dt_model_desc d;
    dt_model_describe(m, &d);
    const int dropout = dt_ft_is_lora(ft) && ft->lora_dropout > 0;
    const int64_t r = dt_ft_is_lora(ft) ? ft->lora_rank : 0;
    sublayer_ft_saved(s, &d.block.attn, layer, dropout, attn_keeps_out, r, out);
    sublayer_ft_saved(s, &d.block.mlp, layer, dropout, 0, r, out);
    /* no gradient into the block: its first norm's input (the residual) only serves it */
    int tr, ad;
    if (!grad_in) {
        out->first_norm = d.block.attn.norm.width * d.block.attn.norm.rows;
        dt_pgroups_module_state(s, d.block.attn.norm.name, layer, &out->first_norm_trained, &ad);
        for (int i = 0; dropout && !out->first_norm_trained && i < d.block.attn.n_in; i++) {
            dt_pgroups_module_state(s, d.block.attn.in[i].name, layer, &tr, &ad);
            if (ad && !tr) out->masks_unkept += d.block.attn.in[i].in;
        }
    }
    const dt_norm_desc *norms[2] = {&d.block.attn.norm, &d.block.mlp.norm};
    for (int k = 0; k < 2; k++) {
        dt_pgroups_module_state(s, norms[k]->name, layer, &tr, &ad);
        if (norms[k]->kind == DT_NORM_RMSNORM && !tr) out->frozen_rms += norms[k]->width * norms[k]->rows;
    }
}

int64_t dt_pgroups_head_dropped(const dt_model *m, const dt_pgroups *s) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    for (int i = 0; i < s->n; i++) {
        const dt_pgroup *g = &s->g[i];
        if (g->in_block || g->train == DT_TRAIN_FROZEN) continue;
        if (!strcmp(g->module, d.final_norm.name) || !strcmp(g->module, d.lm_head.name)) return 0;
        if (d.lm_head_tied && d.n_embed > 0 && !strcmp(g->module, d.embed[0].name)) return 0;   /* the tied head */
    }
    return d.lm_head.in;
}

int dt_pgroups_classifier_trained(const dt_model *m, const dt_pgroups *s) {
    dt_model_desc d;
    dt_model_describe(m, &d);
    const char *cls = d.lm_head_tied && d.n_embed > 0 ? d.embed[0].name : d.lm_head.name;
    for (int i = 0; i < s->n; i++)
        if (!s->g[i].in_block && s->g[i].train != DT_TRAIN_FROZEN && !strcmp(s->g[i].module, cls)) return 1;
    return 0;
}

int64_t dt_pgroups_unit_elems(const dt_pgroups *s, int64_t unit) {
    int64_t n = 0;
    for (int i = 0; i < s->n; i++) {
        const dt_pgroup *g = &s->g[i];
        if (g->train == DT_TRAIN_FROZEN) continue;
        const int here = unit == 0 ? !g->in_block && g->embedding
                         : unit <= s->n_layer ? covers(g, unit - 1)
                                              : !g->in_block && !g->embedding;
        if (here) n += g->rows * g->cols;
    }
    return n;
}

static int64_t pad_to_ranks(int64_t n, int64_t W) { return W > 1 ? (n + W - 1) / W * W : n; }

/* m's groups under ft (malloc'd), or NULL for full fine-tuning (or a method m cannot take) */
static dt_pgroups *method_groups(const dt_model *m, const dt_finetune *ft) {
    dt_pgroups *s = ft && ft->method != DT_FT_FULL ? malloc(sizeof *s) : NULL;
    dt_error ignored;
    if (s && dt_model_pgroups(m, ft, DT_DTYPE_FP32, DT_ROLE_POLICY, s, &ignored)) free(s), s = NULL;
    return s;
}

int64_t dt_model_first_trained_block(const dt_model *m, const dt_finetune *ft) {
    dt_pgroups *s = method_groups(m, ft);
    const int64_t j0 = s ? dt_pgroups_first_trained_layer(s) : 0;
    free(s);
    return j0;
}

void dt_model_zero_units(const dt_model *m, const dt_finetune *ft, int64_t W, int64_t *emb, int64_t *other,
                         int64_t *state) {
    dt_pgroups *s = method_groups(m, ft);
    if (!s) {
        *emb = pad_to_ranks(dt_model_embedding_params(m), W);
        const int64_t b = pad_to_ranks(dt_model_block_params(m), W), h = pad_to_ranks(dt_model_head_params(m), W);
        *other = b > h ? b : h;
        *state = dt_model_params(m);
        return;
    }
    *emb = pad_to_ranks(dt_pgroups_unit_elems(s, 0), W);
    *other = 0;
    *state = dt_pgroups_unit_elems(s, 0);
    for (int64_t u = 1; u <= m->n_layer + 1; u++) {
        const int64_t n = dt_pgroups_unit_elems(s, u);
        if (pad_to_ranks(n, W) > *other) *other = pad_to_ranks(n, W);
        *state += n;
    }
    free(s);
}

/* ---- time ---- */

int64_t dt_pgroups_block_lora_macs(const dt_pgroups *s, int64_t layer) {
    int64_t n = 0;
    for (int i = 0; i < s->n; i++)
        if (covers(&s->g[i], layer) && s->g[i].train == DT_TRAIN_ADAPTER) n += s->g[i].rows * s->g[i].cols;
    return n;
}

int64_t dt_pgroups_block_trained_matmul(const dt_model *m, const dt_pgroups *s, int64_t layer) {
    (void)m;
    int64_t n = 0;
    for (int i = 0; i < s->n; i++) {
        const dt_pgroup *g = &s->g[i];
        if (covers(g, layer) && g->linear && g->train == DT_TRAIN_TRAINED && !strcmp(g->tensor, "weight"))
            n += g->rows * g->cols;
    }
    return n;
}

int dt_pgroups_block_adapted(const dt_pgroups *s, int64_t layer) {
    int n = 0;
    for (int i = 0; i < s->n; i++)
        if (covers(&s->g[i], layer) && s->g[i].train == DT_TRAIN_ADAPTER && !strcmp(s->g[i].tensor, "lora_A.weight"))
            n++;
    return n;
}
