/* ckpt_tp.c — checkpoints of tensor-parallel runs in the tp 1 format (ckpt_tp.h). */
#include "ckpt_tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_dtype.h"
#include "dt_safetensors.h"

int ckpt_tp_size(const dt_lm *g) { return dt_lm_num_tensors(g) ? dt_lm_tensor(g, 0)->tp.size : 1; }

static size_t full_numel(const dt_tensor_info *t) {
    return (size_t)(t->ndim == 2 ? t->tp.full[0] * t->tp.full[1] : t->tp.full[0]);
}

size_t ckpt_tp_params(const dt_lm *g) {
    if (ckpt_tp_size(g) == 1) return dt_lm_num_params(g);
    size_t n = 0;
    for (int i = 0; i < dt_lm_num_tensors(g); i++) n += full_numel(dt_lm_tensor(g, i));
    return n;
}

/* The run of t's local elements from e (before end) whose places in the whole tensor are
 * consecutive: *fe the first's, the run's length returned. */
static size_t run_at(const dt_tensor_info *t, size_t e, size_t end, size_t *fe) {
    *fe = dt_lm_tp_full_elem(t, e);
    size_t len = 1;
    while (e + len < end && dt_lm_tp_full_elem(t, e + len) == *fe + len) len++;
    return len;
}

typedef struct {
    dt_zero_range *r;
    int n, cap;
} range_vec;

static int push(range_vec *v, size_t flat, size_t state, size_t count) {
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 64;
        dt_zero_range *nr = realloc(v->r, (size_t)cap * sizeof *nr);
        if (!nr) return -1;
        v->r = nr;
        v->cap = cap;
    }
    v->r[v->n++] = (dt_zero_range){flat, state, count};
    return 0;
}

/* zero range r's pieces in the whole model's layout into v */
static int map_range(const dt_lm *g, dt_zero_range r, int for_save, range_vec *v) {
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        const size_t a = t->offset > r.flat_begin ? t->offset : r.flat_begin;
        const size_t b = t->offset + t->numel < r.flat_begin + r.count ? t->offset + t->numel : r.flat_begin + r.count;
        if (a >= b || (for_save && !t->tp.split && t->tp.rank != 0)) continue;
        for (size_t e = a - t->offset; e < b - t->offset;) {
            size_t fe, len = run_at(t, e, b - t->offset, &fe);
            if (push(v, t->full_offset + fe, r.state_begin + (t->offset + e - r.flat_begin), len)) return -1;
            e += len;
        }
    }
    return 0;
}

int ckpt_tp_ranges(const dt_zero *z, const dt_lm *g, int for_save, dt_zero_range **out, int *n, dt_error *err) {
    range_vec v = {0};
    const int tp = ckpt_tp_size(g);
    for (int i = 0; i < dt_zero_num_ranges(z); i++) {
        const dt_zero_range r = dt_zero_range_at(z, i);
        if (tp == 1 ? push(&v, r.flat_begin, r.state_begin, r.count) : map_range(g, r, for_save, &v)) {
            free(v.r);
            return dt_errorf(err, DT_ENOMEM, "checkpoint: out of memory for the optimizer ranges");
        }
    }
    *out = v.r;
    *n = v.n;
    return DT_OK;
}

/* ---- weights ---- */

typedef struct {
    dt_lm *g;
    dt_comm *tp;
    dt_dtype pdt;
    size_t esz;
    char *unit;        /* [group numel] this rank's unit as consolidated, param dtype */
    char *all;         /* [tp x group numel] every TP rank's */
    char *whole;       /* [largest whole tensor] one tensor assembled */
    dt_st_stream *s;   /* the writer's stream (world rank 0), else NULL */
} tp_sink;

/* Tensor t (of a unit that starts at unit_off) whole from every TP rank's unit in k->all,
 * put into the stream. */
static int put_whole(tp_sink *k, const dt_tensor_info *t, size_t unit_off, size_t unit_n, dt_error *err) {
    char name[DT_ST_NAME_MAX];
    snprintf(name, sizeof name, "%s%s", dt_lm_hf_prefix(k->g), t->name);
    const size_t at = t->offset - unit_off;
    if (!t->tp.split) return dt_st_stream_put(k->s, name, 0, k->all + at * k->esz, t->numel * k->esz, err);
    const int tp = t->tp.size;
    for (int r = 0; r < tp; r++) {
        dt_tensor_info tr = *t;
        tr.tp.rank = r;
        const char *src = k->all + ((size_t)r * unit_n + at) * k->esz;
        for (size_t e = 0; e < t->numel; e++)
            memcpy(k->whole + dt_lm_tp_full_elem(&tr, e) * k->esz, src + e * k->esz, k->esz);
    }
    return dt_st_stream_put(k->s, name, 0, k->whole, full_numel(t) * k->esz, err);
}

/* dt_zero_unit_fn: pieces of a unit collected; at its last one, the unit of every TP rank
 * gathered and (the writer) each of its tensors put whole */
static int tp_unit(void *ctx, int unit, size_t flat_off, size_t n, const void *params, dt_error *err) {
    tp_sink *k = ctx;
    const size_t off = dt_lm_group_offset(k->g, unit), un = dt_lm_group_numel(k->g, unit);
    memcpy(k->unit + (flat_off - off) * k->esz, params, n * k->esz);
    if (flat_off + n != off + un) return DT_OK;
    int rc = dt_comm_allgather(k->tp, k->unit, k->all, un, k->pdt, err);
    for (int i = 0; i < dt_lm_num_tensors(k->g) && !rc && k->s; i++)
        if (dt_lm_tensor(k->g, i)->group == unit) rc = put_whole(k, dt_lm_tensor(k->g, i), off, un, err);
    return rc;
}

/* the header: every tensor whole, under its Hugging Face name */
static int whole_layout(dt_st_writer *w, const dt_lm *g, dt_dtype pdt, dt_error *err) {
    int rc = dt_st_writer_meta(w, "format", "pt", err);
    char name[DT_ST_NAME_MAX];
    for (int i = 0; i < dt_lm_num_tensors(g) && !rc; i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        snprintf(name, sizeof name, "%s%s", dt_lm_hf_prefix(g), t->name);
        rc = dt_st_writer_add(w, name, dt_st_dtype_name(pdt), t->ndim, t->tp.full, NULL, err);
    }
    return rc;
}

int ckpt_tp_weights_save(dt_lm *g, dt_zero *z, dt_dtype pdt, int dp_rank0, int write, const char *path,
                         dt_file_sum *sum, dt_error *err) {
    if (!dp_rank0) return dt_zero_consolidate_params(z, NULL, NULL, err);
    tp_sink k = {g, dt_zero_tp(z), pdt, (size_t)dt_dtype_size(pdt), NULL, NULL, NULL, NULL};
    size_t big = 0, whole = 0;
    for (int u = 0; u < dt_lm_num_groups(g); u++)
        if (dt_lm_group_numel(g, u) > big) big = dt_lm_group_numel(g, u);
    for (int i = 0; i < dt_lm_num_tensors(g); i++)
        if (full_numel(dt_lm_tensor(g, i)) > whole) whole = full_numel(dt_lm_tensor(g, i));
    const size_t tp = (size_t)dt_comm_size(k.tp);
    k.unit = malloc((big ? big : 1) * k.esz);
    k.all = malloc((big ? big : 1) * tp * k.esz);
    k.whole = write ? malloc((whole ? whole : 1) * k.esz) : NULL;
    dt_st_writer *w = write ? dt_st_writer_new() : NULL;
    int rc = k.unit && k.all && (!write || (k.whole && w))
                 ? DT_OK
                 : dt_errorf(err, DT_ENOMEM, "%s: out of memory gathering the tensor-parallel weights", path);
    if (!rc && write && !(rc = whole_layout(w, g, pdt, err))) rc = dt_st_stream_open(w, path, &k.s, err);
    /* the gathers run whatever happened above: the other ranks are in them */
    dt_error e2;
    dt_error_clear(&e2);
    int rc2 = dt_zero_consolidate_params(z, tp_unit, &k, rc ? &e2 : err);
    if (!rc) rc = rc2;
    if (k.s && rc) dt_st_stream_abort(k.s);
    else if (k.s) rc = dt_st_stream_close_sum(k.s, sum, err);
    dt_st_writer_free(w);
    free(k.unit);
    free(k.all);
    free(k.whole);
    return rc;
}

typedef struct {
    const dt_lm *g;
    dt_st_file *f;
    dt_dtype pdt;
    const char *path;
} tp_src;

/* dt_zero_read_fn: flat elements [lo, lo + n) of this rank's slices from the whole tensors */
static int tp_read(void *ctx, size_t lo, size_t n, void *dst, dt_error *err) {
    tp_src *s = ctx;
    const size_t ds = (size_t)dt_dtype_size(s->pdt);
    char name[DT_ST_NAME_MAX];
    for (int i = 0; i < dt_lm_num_tensors(s->g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(s->g, i);
        const size_t a = t->offset > lo ? t->offset : lo, b = t->offset + t->numel < lo + n ? t->offset + t->numel : lo + n;
        if (a >= b) continue;
        snprintf(name, sizeof name, "%s%s", dt_lm_hf_prefix(s->g), t->name);
        const dt_st_tensor *st = dt_st_find(s->f, name);
        dt_dtype sdt;
        const int64_t f1 = t->ndim == 2 ? t->tp.full[1] : 1, s1 = st && st->ndim == 2 ? st->shape[1] : 1;
        if (!st || st->shape[0] != t->tp.full[0] || s1 != f1 || st->ndim != t->ndim || dt_st_dtype_parse(st->dtype, &sdt))
            return dt_errorf(err, DT_EINVAL, "%s: no tensor %s of shape [%lld, %lld] (F32, BF16 or F16)", s->path, name,
                             (long long)t->tp.full[0], (long long)f1);
        const char *src = dt_st_data(s->f, st);
        const size_t ss = (size_t)dt_dtype_size(sdt);
        for (size_t e = a - t->offset; e < b - t->offset;) {
            size_t fe, len = run_at(t, e, b - t->offset, &fe);
            dt_convert((char *)dst + (t->offset + e - lo) * ds, s->pdt, src + fe * ss, sdt, len);
            e += len;
        }
    }
    return DT_OK;
}

int ckpt_tp_weights_load(dt_zero *z, const dt_lm *g, dt_dtype pdt, const char *path, dt_error *err) {
    tp_src s = {g, NULL, pdt, path};
    if (dt_st_open(path, &s.f, err)) return err->code;
    int rc = dt_zero_load_params(z, tp_read, &s, err);
    dt_st_close(s.f);
    return rc;
}
