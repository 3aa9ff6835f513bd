/* lm_tp.c — tensor parallelism inside the model (dt_lm_options.tp; lm_internal.h lists
 * the hooks): Megatron-LM's split (Shoeybi et al. 2019, §3 and Figure 3). A rank holds
 * whole heads of q/k/v and a slice of the MLP's inner width (column-parallel: split by
 * output), the matching input slices of o_proj / down (row-parallel: split by input), and
 * V / tp vocabulary rows of the embedding and lm_head. Communication per block and
 * micro-batch: the row-parallel outputs summed over the group in forward (Megatron's g),
 * the column-parallel inputs' gradients summed in backward (f): 2 + 2 all-reduces of
 * [N, C], as Narayanan et al. SC'21 §3.2 count them. Norms and the row-parallel biases
 * are replicated and act on summed tensors, so every rank computes the same gradient for
 * them (Megatron without sequence parallelism does the same: no all-reduce of them);
 * Qwen3's q/k norms see only a rank's heads, so their gradients are summed over the group.
 * Vocab-parallel embedding: each rank looks up its rows (zeros elsewhere), then the sum.
 * Vocab-parallel cross-entropy (Megatron's vocab_parallel_cross_entropy): the row maxima
 * gathered, sum-exp and the target's logit summed; no rank holds the whole logits.
 * Host loops: tensor parallelism runs on the CPU device (dt_lm_check_tp). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_device.h"
#include "dt_devmath.h"
#include "dt_finetune.h"
#include "lm_internal.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

int dt_lm_check_tp(const dt_model *m, int64_t tp, dt_device device, const dt_finetune *ft, dt_error *err) {
    if (tp < 1) return dt_errorf(err, DT_EINVAL, "tensor parallelism: tp %lld must be >= 1", (long long)tp);
    if (tp == 1) return DT_OK;
    const struct {
        const char *what;
        int64_t n;
    } dims[] = {{"attention heads", m->n_head}, {"KV heads", m->n_kv_head}, {"ffn size", m->ffn},
                {"vocabulary", m->vocab}};
    for (int i = 0; i < N_OF(dims); i++)
        if (dims[i].n % tp)
            return dt_errorf(err, DT_EINVAL,
                             "layout.tp %lld does not divide the model's %s (%lld): dtrun splits them evenly over "
                             "the TP ranks (whole heads; the vocabulary is not padded); use a common divisor",
                             (long long)tp, dims[i].what, (long long)dims[i].n);
    if (device != DT_DEVICE_CPU)
        return dt_errorf(err, DT_EINVAL,
                         "layout.tp %lld on the CUDA device: dtrun's tensor parallelism runs on CPU ranks (MPI) "
                         "only; plan it for runtime deepspeed or fsdp, or tp 1",
                         (long long)tp);
    if (ft && ft->method != DT_FT_FULL)
        return dt_errorf(err, DT_EINVAL,
                         "layout.tp %lld with fine-tuning method %s: dtrun's tensor parallelism trains full "
                         "fine-tuning only; use tp 1 (ZeRO) for %s",
                         (long long)tp, dt_ft_method_name(ft->method), dt_ft_method_name(ft->method));
    return DT_OK;
}

int64_t dt_lm_vocab(const dt_lm *g) { return g->Vfull; }

size_t dt_lm_tp_full_elem(const dt_tensor_info *t, size_t e) {
    const dt_tp_split *s = &t->tp;
    if (!s->split) return e;
    const int64_t d1 = t->ndim == 2 ? t->shape[1] : 1, f1 = t->ndim == 2 ? s->full[1] : 1;
    int64_t i = (int64_t)e / d1, j = (int64_t)e % d1;
    int64_t *x = s->split == 1 ? &i : &j;
    const int64_t n = s->split == 1 ? t->shape[0] : t->shape[1];
    const int64_t seg = n / s->pack, k = *x / seg, w = *x % seg;
    *x = k * seg * s->size + (int64_t)s->rank * seg + w;
    return (size_t)(i * f1 + j);
}

/* ---- the shard's description and dimensions ---- */

static void shard_sublayer(dt_lm *g, dt_sublayer_desc *s, int64_t tp, int *ncol, int *nrow, int *npart, int attn) {
    for (int i = 0; i < s->n_in; i++) {
        g->tp_col[*ncol] = s->in[i].name;
        /* one in-linear on the attention: GPT-2's packed q | k | v, split per q, k, v */
        g->tp_col_pack[(*ncol)++] = attn && s->n_in == 1 ? 3 : 1;
        s->in[i].out /= tp;
    }
    for (int i = 0; i < s->n_in_norm; i++) {
        g->tp_partial[(*npart)++] = s->in_norm[i].name;
        s->in_norm[i].rows /= tp;
    }
    g->tp_row[(*nrow)++] = s->out.name;
    s->out.in /= tp;
}

void lm_tp_shard_desc(dt_lm *g, dt_model_desc *d) {
    if (!g->tp) return;
    const int64_t tp = g->tp->size;
    int ncol = 0, nrow = 0, npart = 0;
    shard_sublayer(g, &d->block.attn, tp, &ncol, &nrow, &npart, 1);
    shard_sublayer(g, &d->block.mlp, tp, &ncol, &nrow, &npart, 0);
    d->block.n_head /= tp;
    d->block.n_kv_head /= tp;
    g->tp_vocab[0] = d->embed[0].name;
    d->embed[0].rows /= tp;
    g->tp_vocab[1] = d->lm_head.name;
    d->lm_head.out /= tp;
}

void lm_tp_configure(dt_lm *g) {
    g->Vfull = g->V;
    if (!g->tp) return;
    const int64_t tp = g->tp->size;
    g->H /= tp;
    g->Hkv /= tp;
    g->QD = g->H * g->D;
    g->KVD = g->Hkv * g->D;
    g->F /= tp;
    g->V /= tp;
    g->v0 = (int64_t)g->tp->rank * g->V;
}

static int named(const char *const *names, int n, const char *module) {
    for (int i = 0; i < n; i++)
        if (names[i] && module && strcmp(names[i], module) == 0) return i;
    return -1;
}

size_t lm_tp_mark(const dt_lm *g, dt_tensor_info *t, const char *module, const char *tensor) {
    dt_tp_split s = {0, 1, 0, 1, 0, {t->shape[0], t->shape[1]}};
    if (g->tp) {
        const int in_out = g->family->weight_layout == LM_W_IN_OUT, weight = strcmp(tensor, "weight") == 0;
        int c;
        s.rank = g->tp->rank;
        s.size = g->tp->size;
        if ((c = named(g->tp_col, N_OF(g->tp_col), module)) >= 0) {   /* split by output */
            s.pack = g->tp_col_pack[c];
            s.split = weight && in_out ? 2 : 1;
        } else if (named(g->tp_row, N_OF(g->tp_row), module) >= 0) {   /* by input; bias replicated */
            s.split = weight ? (in_out ? 1 : 2) : 0;
        } else if (named(g->tp_vocab, N_OF(g->tp_vocab), module) >= 0) {   /* [V, C] rows */
            s.split = 1;
        } else if (named(g->tp_partial, N_OF(g->tp_partial), module) >= 0) {
            s.partial = 1;
        }
        if (s.split) s.full[s.split - 1] *= s.size;
    }
    t->tp = s;
    return (size_t)(t->ndim == 2 ? s.full[0] * s.full[1] : s.full[0]);
}

/* ---- scratch ---- */

static void *tp_buf(const dt_lm *g, size_t bytes) { return g->dev->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, bytes); }

/* elements of block 0's partial-gradient tensors (the same in every block) */
static size_t partial_numel(const dt_lm *g) {
    size_t n = 0;
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].group == 1 && g->tensors[i].tp.partial) n += g->tensors[i].numel;
    return n;
}

int lm_tp_alloc(dt_lm *g) {
    if (!g->tp) return 1;
    const size_t N = (size_t)(g->B * g->T), np = partial_numel(g);
    g->tp_out = tp_buf(g, N);
    g->tp_tgt = tp_buf(g, sizeof(int32_t) * N);
    g->tp_red = tp_buf(g, sizeof(float) * 2 * N);
    g->tp_max = tp_buf(g, sizeof(float) * N * (size_t)g->tp->size);
    if (np) g->tp_saved = tp_buf(g, sizeof(float) * 2 * np);
    return g->tp_out && g->tp_tgt && g->tp_red && g->tp_max && (!np || g->tp_saved);
}

void lm_tp_free(dt_lm *g) {
    void *bufs[] = {g->tp_out, g->tp_tgt, g->tp_red, g->tp_max, g->tp_saved};
    for (int i = 0; i < N_OF(bufs); i++)
        if (bufs[i]) g->dev->free(bufs[i]);
}

/* ---- collectives ---- */

int lm_tp_allreduce(dt_lm *g, float *buf, size_t n) {
    if (!g->tp) return DT_OK;
    return g->tp->allreduce_sum(g->tp->ctx, buf, n, &g->tp_err);
}

int lm_tp_row_output(dt_lm *g, float *out, const float *bias, int64_t N, int64_t OC) {
    int rc = lm_tp_allreduce(g, out, (size_t)(N * OC));
    if (rc || !bias) return rc;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < OC; c++) out[n * OC + c] += bias[c];
    return DT_OK;
}

/* ---- vocab-parallel embedding ---- */

void lm_tp_localize_inputs(dt_lm *g) {
    if (!g->tp) return;
    for (int64_t n = 0; n < g->B * g->T; n++) {
        const int64_t v = (int64_t)g->inputs[n] - g->v0;
        const int mine = v >= 0 && v < g->V;
        g->tp_out[n] = (uint8_t)!mine;
        g->inputs[n] = mine ? (int32_t)v : 0;
    }
}

/* rows of x [N, C] whose token is outside this rank's vocabulary slice set to 0 */
static void zero_foreign_rows(const dt_lm *g, float *x) {
    for (int64_t n = 0; n < g->B * g->T; n++)
        if (g->tp_out[n]) memset(x + n * g->C, 0, sizeof(float) * (size_t)g->C);
}

int lm_tp_encoder_reduce(dt_lm *g, float *x0, const void *wpe) {
    if (!g->tp) return DT_OK;
    const int64_t B = g->B, T = g->T, C = g->C;
    zero_foreign_rows(g, x0);
    int rc = lm_tp_allreduce(g, x0, (size_t)(B * T * C));
    if (rc || !wpe) return rc;
    const float *p = wpe;   /* [T, C] fp32 */
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++) x0[(b * T + t) * C + c] += p[t * C + c];
    return DT_OK;
}

void lm_tp_encoder_backward_prep(dt_lm *g, void *dwpe) {
    if (!g->tp) return;
    const int64_t B = g->B, T = g->T, C = g->C;
    if (dwpe) {
        /* fp32 grads: straight into the gradient; 16-bit: summed in the fp32 scratch gw
         * ([maxT, C] fits: lm.c sizes it), then rounded into storage once */
        const int f32 = g->gt == DT_DTYPE_FP32;
        float *acc = f32 ? dwpe : g->gw;
        if (!f32) memset(acc, 0, sizeof(float) * (size_t)(T * C));
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t c = 0; c < C; c++) acc[t * C + c] += g->dres[(b * T + t) * C + c];
        if (!f32) g->dev->accumulate_16(dwpe, g->gt, acc, (size_t)(T * C));
    }
    zero_foreign_rows(g, g->dres);
}

/* ---- vocab-parallel cross-entropy ---- */

/* target n as a row of this rank's logits, or -1 (ignored, or another rank's row) */
static int64_t local_target(const dt_lm *g, int64_t n) {
    const int32_t t = g->targets[n];
    if (t == DT_IGNORE_INDEX) return -1;
    const int64_t v = (int64_t)t - g->v0;
    return v >= 0 && v < g->V ? v : -1;
}

int lm_tp_xent_forward(dt_lm *g, int has_targets, double *mean) {
    const int64_t N = g->B * g->T, V = g->V, P = g->tp->size;
    float *send = g->tp_red;   /* [N] this rank's row maxima, then [2N] sum-exp | target logit */
    for (int64_t n = 0; n < N; n++) {
        const float *z = g->logits + n * V;
        float mx = -INFINITY;
        for (int64_t v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
        send[n] = mx;
    }
    int rc = g->tp->allgather(g->tp->ctx, send, g->tp_max, (size_t)N, &g->tp_err);
    if (rc) return rc;
    for (int64_t n = 0; n < N; n++) {
        float mx = -INFINITY;
        for (int64_t r = 0; r < P; r++) mx = g->tp_max[r * N + n] > mx ? g->tp_max[r * N + n] : mx;
        g->ce_lse[n] = mx;   /* the global maximum until the sum arrives */
        const float *z = g->logits + n * V;
        float s = 0.0f;
        for (int64_t v = 0; v < V; v++) s += dt_fast_expf(z[v] - mx);
        const int64_t t = has_targets ? local_target(g, n) : -1;
        send[n] = s;
        send[N + n] = t >= 0 ? z[t] : 0.0f;
    }
    if ((rc = lm_tp_allreduce(g, send, (size_t)(2 * N)))) return rc;
    double total = 0.0;
    for (int64_t n = 0; n < N; n++) {
        g->ce_lse[n] += logf(send[n]);
        if (!has_targets) continue;
        g->ce_losses[n] = g->targets[n] == DT_IGNORE_INDEX ? 0.0f : g->ce_lse[n] - send[N + n];
        total += g->ce_losses[n];
    }
    *mean = has_targets ? total / (double)N : 0.0;
    return DT_OK;
}

void lm_tp_xent_backward(dt_lm *g, float dloss) {
    const int64_t N = g->B * g->T, V = g->V;
    for (int64_t n = 0; n < N; n++) {
        float *z = g->logits + n * V;
        if (g->targets[n] == DT_IGNORE_INDEX) {   /* no loss, no gradient */
            memset(z, 0, sizeof(float) * (size_t)V);
            continue;
        }
        const float l = g->ce_lse[n];
        for (int64_t v = 0; v < V; v++) z[v] = dt_ce_dlogit(z[v], l, dloss);
        const int64_t t = local_target(g, n);
        if (t >= 0) z[t] -= dloss;
    }
}

/* ---- partial gradients (Qwen3's q/k norms) ---- */

/* calls fn on each partial tensor of block l's group: its gradient in G, and its place in
 * the saved scratch */
void lm_tp_partial_save(dt_lm *g, int l, const float *G) {
    if (!g->tp || !g->tp_saved) return;
    size_t k = 0;
    for (int i = 0; i < g->ntensors; i++) {
        const dt_tensor_info *t = &g->tensors[i];
        if (t->group != 1 + l || !t->tp.partial) continue;
        memcpy(g->tp_saved + k, G + (t->offset - g->group_off[1 + l]), sizeof(float) * t->numel);
        k += t->numel;
    }
}

int lm_tp_partial_reduce(dt_lm *g, int l, float *G) {
    if (!g->tp || !g->tp_saved) return DT_OK;
    const size_t np = partial_numel(g);
    float *saved = g->tp_saved, *delta = g->tp_saved + np;
    size_t k = 0;
    for (int i = 0; i < g->ntensors; i++) {   /* this micro-step's contribution */
        const dt_tensor_info *t = &g->tensors[i];
        if (t->group != 1 + l || !t->tp.partial) continue;
        const float *gi = G + (t->offset - g->group_off[1 + l]);
        for (size_t e = 0; e < t->numel; e++) delta[k + e] = gi[e] - saved[k + e];
        k += t->numel;
    }
    int rc = lm_tp_allreduce(g, delta, np);
    if (rc) return rc;
    k = 0;
    for (int i = 0; i < g->ntensors; i++) {
        const dt_tensor_info *t = &g->tensors[i];
        if (t->group != 1 + l || !t->tp.partial) continue;
        float *gi = G + (t->offset - g->group_off[1 + l]);
        for (size_t e = 0; e < t->numel; e++) gi[e] = saved[k + e] + delta[k + e];
        k += t->numel;
    }
    return DT_OK;
}
