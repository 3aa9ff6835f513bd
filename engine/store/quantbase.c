/* quantbase.c — QLoRA's quantised base on disk (dt_quantbase.h). */
#include "dt_quantbase.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "dt_hfdir.h"
#include "dt_quant.h"

#define QB_PARTS_MAX 6
#define QB_TEXT_MAX 512          /* the packed quant-state JSON (~170 bytes) */
#define QB_DOUBLE_DIGITS 17      /* enough significant digits to round-trip any double */
/* Python's repr switches to exponent notation outside [1e-4, 1e16) (float_repr_style 'short') */
#define PY_REPR_EXP_MIN (-4)
#define PY_REPR_EXP_MAX 16
#define QB_SINGLE_FILE "model.safetensors"
#define QB_SUFFIX_MAX 64         /* ".quant_state.bitsandbytes__nf4", the longest part suffix */

/* One serialised tensor of a quantised weight: its key, dtype, shape and bytes. */
typedef struct {
    char name[DT_ST_NAME_MAX];
    const char *dtype;
    int ndim;
    int64_t shape[2];
    void *data;
    size_t bytes;
    int text;            /* the quant-state JSON (not part of the model's storage) */
} qb_part;

/* repr() of a Python float: the shortest digits that round-trip, in repr's notation. */
static void py_repr(double v, char *out, size_t n) {
    char e[48];
    int p = 1;
    for (; p <= QB_DOUBLE_DIGITS; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    const int exp = atoi(strchr(e, 'e') + 1);
    if (exp < PY_REPR_EXP_MIN || exp >= PY_REPR_EXP_MAX) {   /* C's %e spells it as repr does */
        snprintf(out, n, "%s", e);
        return;
    }
    const int decimals = p - 1 - exp > 0 ? p - 1 - exp : 0;
    snprintf(out, n, "%.*f%s", decimals, v, decimals ? "" : ".0");
}

/* torch's dtype name as str(dtype).strip("torch.") spells it */
static const char *torch_dtype_name(dt_dtype t) {
    return t == DT_DTYPE_BF16 ? "bfloat16" : t == DT_DTYPE_FP16 ? "float16" : "float32";
}

/* json.dumps of the QuantState's non-tensor fields (functional.py as_dict: quant_type, blocksize,
 * dtype, shape; nested: nested_blocksize, nested_dtype, nested_offset = offset.item()) */
static void state_json(const dt_lm_qstate *s, dt_dtype pdt, char *text) {
    int k = snprintf(text, QB_TEXT_MAX, "{\"quant_type\": \"%s\", \"blocksize\": %lld, \"dtype\": \"%s\", \"shape\": "
                     "[%lld, %lld]", dt_storage_name((dt_storage)s->fmt), (long long)s->block, torch_dtype_name(pdt),
                     (long long)s->rows, (long long)s->cols);
    if (s->double_quant) {
        char off[48];
        py_repr((double)*s->offset, off, sizeof off);
        k += snprintf(text + k, QB_TEXT_MAX - (size_t)k, ", \"nested_blocksize\": %d, \"nested_dtype\": \"float32\", "
                      "\"nested_offset\": %s", DT_QUANT_NESTED_BLOCK, off);
    }
    snprintf(text + k, QB_TEXT_MAX - (size_t)k, "}");
}

static int add_part(qb_part *p, int n, const char key[DT_ST_NAME_MAX - QB_SUFFIX_MAX], const char *suffix, const char *dtype, int ndim, int64_t d0,
                    int64_t d1, void *data, size_t esz) {
    qb_part *q = &p[n];
    snprintf(q->name, sizeof q->name, "%s%s", key, suffix);
    q->dtype = dtype;
    q->ndim = ndim;
    q->shape[0] = d0;
    q->shape[1] = d1;
    q->data = data;
    q->bytes = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1) * esz;
    q->text = 0;
    return n + 1;
}

/* Quantised tensor i's serialised parts (dt_quantbase.h's list); text holds the JSON. */
static int parts_of(dt_lm *g, int i, dt_dtype pdt, char text[QB_TEXT_MAX], qb_part p[QB_PARTS_MAX]) {
    dt_lm_qstate s;
    dt_lm_quant_state(g, i, &s);
    char key[DT_ST_NAME_MAX - QB_SUFFIX_MAX];
    snprintf(key, sizeof key, "%s%s", dt_lm_hf_prefix(g), dt_lm_quant_tensor(g, i)->name);
    const size_t f = sizeof(float);
    int n = add_part(p, 0, key, "", "U8", 2, (s.n + 1) / 2, 1, s.packed, 1);
    n = s.double_quant ? add_part(p, n, key, ".absmax", "U8", 1, s.nb, 0, s.qabsmax, 1)
                       : add_part(p, n, key, ".absmax", "F32", 1, s.nb, 0, s.absmax, f);
    n = add_part(p, n, key, ".quant_map", "F32", 1, DT_QUANT_4BIT_CODES, 0, s.code, f);
    if (s.double_quant) {
        n = add_part(p, n, key, ".nested_absmax", "F32", 1, s.nnb, 0, s.nested_absmax, f);
        n = add_part(p, n, key, ".nested_quant_map", "F32", 1, DT_QUANT_DYNAMIC_CODES, 0, s.map, f);
    }
    state_json(&s, pdt, text);
    char suffix[QB_SUFFIX_MAX];
    snprintf(suffix, sizeof suffix, ".quant_state.bitsandbytes__%s", dt_storage_name((dt_storage)s.fmt));
    n = add_part(p, n, key, suffix, "U8", 1, (int64_t)strlen(text), 0, text, 1);
    p[n - 1].text = 1;
    return n;
}

/* fn on every serialised part of every quantised tensor, in order; stops at an error */
typedef int (*part_fn)(const qb_part *q, void *ctx, dt_error *err);

static int each_part(dt_lm *g, dt_dtype pdt, part_fn fn, void *ctx, dt_error *err) {
    char text[QB_TEXT_MAX];
    qb_part p[QB_PARTS_MAX];
    int rc = DT_OK;
    for (int i = 0; i < dt_lm_num_quant_tensors(g) && !rc; i++) {
        const int n = parts_of(g, i, pdt, text, p);
        for (int k = 0; k < n && !rc; k++) rc = fn(&p[k], ctx, err);
    }
    return rc;
}

typedef struct {
    dt_st_writer *w;
    int with_data;
} add_ctx;

static int add_one(const qb_part *q, void *ctx, dt_error *err) {
    const add_ctx *a = ctx;
    if (a->with_data && q->text)   /* the JSON lives only as long as this call */
        return dt_st_writer_add_copy(a->w, q->name, q->dtype, q->ndim, q->shape, q->data, q->bytes, err);
    return dt_st_writer_add(a->w, q->name, q->dtype, q->ndim, q->shape, a->with_data ? q->data : NULL, err);
}

int dt_quantbase_add(dt_st_writer *w, dt_lm *g, dt_dtype pdt, int with_data, dt_error *err) {
    add_ctx a = {w, with_data};
    return each_part(g, pdt, add_one, &a, err);
}

static int put_one(const qb_part *q, void *ctx, dt_error *err) {
    return dt_st_stream_put(ctx, q->name, 0, q->data, q->bytes, err);
}

int dt_quantbase_put(dt_lm *g, dt_dtype pdt, dt_st_stream *s, dt_error *err) {
    return each_part(g, pdt, put_one, s, err);
}

/* f's entry for part q: present, q's dtype and size; NULL otherwise */
static const void *file_part(const dt_st_file *f, const qb_part *q) {
    const dt_st_tensor *t = dt_st_find(f, q->name);
    if (!t || strcmp(t->dtype, q->dtype) || t->end - t->begin != q->bytes) return NULL;
    return dt_st_data(f, t);
}

typedef struct {
    const dt_st_file *f;
    const char *file;
} check_ctx;

static int check_one(const qb_part *q, void *ctx, dt_error *err) {
    const check_ctx *c = ctx;
    const void *d = file_part(c->f, q);
    if (d && !memcmp(d, q->data, q->bytes)) return DT_OK;
    return dt_errorf(err, DT_EINVAL,
                     "%s: the quantised base differs from this run's (%s %s): resume with the output.init, data.seed "
                     "and quantisation settings the run started with", c->file, q->name,
                     d ? "differs" : "is missing or of another dtype or size");
}

int dt_quantbase_check(dt_lm *g, dt_dtype pdt, const char *file, dt_error *err) {
    if (!dt_lm_num_quant_tensors(g)) return DT_OK;
    dt_st_file *f;
    if (dt_st_open(file, &f, err)) return err->code;
    check_ctx c = {f, file};
    int rc = each_part(g, pdt, check_one, &c, err);
    dt_st_close(f);
    return rc;
}

/* ---- loading ---- */

/* The one file that may hold the quantised form: path itself, or dir/model.safetensors; "" none. */
static void single_file(const char *path, char *out, size_t n) {
    struct stat sb;
    out[0] = '\0';
    if (!dt_hf_is_dir(path)) {
        snprintf(out, n, "%s", path);
        return;
    }
    char p[DT_ST_NAME_MAX * 4];
    snprintf(p, sizeof p, "%s/" QB_SINGLE_FILE, path);
    if (stat(p, &sb) == 0) snprintf(out, n, "%s", p);
}

/* 1 when file holds the first quantised weight in bitsandbytes' form (its code book entry, there
 * whatever the format) */
static int holds_quantised(dt_lm *g, dt_dtype pdt, const char *file) {
    dt_st_file *f;
    dt_error e = {0};
    if (!file[0] || dt_st_open(file, &f, &e)) return 0;
    char text[QB_TEXT_MAX];
    qb_part p[QB_PARTS_MAX];
    parts_of(g, 0, pdt, text, p);
    const int found = dt_st_find(f, p[2].name) != NULL;   /* W.quant_map */
    dt_st_close(f);
    return found;
}

/* The stored state's nested_offset (double quantisation) from its JSON (len bytes) into *offset. */
static int read_offset(const char *json, size_t len, float *offset) {
    cJSON *o = cJSON_ParseWithLength(json, len);
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, "nested_offset") : NULL;
    const int ok = cJSON_IsNumber(v);
    if (ok) *offset = (float)v->valuedouble;
    cJSON_Delete(o);
    return ok;
}

/* Tensor i's parts copied from f; its JSON must then be ours (the same format, block, shape). */
static int load_stored_one(dt_lm *g, dt_dtype pdt, const dt_st_file *f, const char *file, int i, dt_error *err) {
    char text[QB_TEXT_MAX];
    qb_part p[QB_PARTS_MAX];
    int n = parts_of(g, i, pdt, text, p);
    const qb_part *js = &p[n - 1];
    const dt_st_tensor *jt = dt_st_find(f, js->name);
    dt_lm_qstate s;
    dt_lm_quant_state(g, i, &s);
    if (!jt || strcmp(jt->dtype, "U8"))
        return dt_errorf(err, DT_EINVAL, "%s: %s is missing: the file is quantised otherwise than this plan (plan the "
                         "--quant, --double-quant and --quant-block it was made with)", file, js->name);
    const char *fj = dt_st_data(f, jt);
    const size_t flen = (size_t)(jt->end - jt->begin);
    if (s.double_quant && !read_offset(fj, flen, s.offset))
        return dt_errorf(err, DT_EINVAL, "%s: %s has no nested_offset", file, js->name);
    for (int k = 0; k + 1 < n; k++) {
        const void *d = file_part(f, &p[k]);
        if (!d)
            return dt_errorf(err, DT_EINVAL, "%s: %s is missing or of another dtype or size than this plan's "
                             "quantisation (plan the --quant, --double-quant and --quant-block it was made with)",
                             file, p[k].name);
        memcpy(p[k].data, d, p[k].bytes);
    }
    /* with the offset read; the state's "dtype" (what it was quantised from, the model's param dtype)
     * may be any float dtype: the bytes are read as they are, as transformers reads a pre-quantised
     * checkpoint's quant state (a mixed-bf16 run's checkpoint sampled or trained on in fp32) */
    const dt_dtype any[] = {pdt, DT_DTYPE_FP32, DT_DTYPE_BF16, DT_DTYPE_FP16};
    for (size_t k = 0; k < sizeof any / sizeof any[0]; k++) {
        n = parts_of(g, i, any[k], text, p);
        if (flen == p[n - 1].bytes && !memcmp(fj, text, flen)) return DT_OK;
    }
    n = parts_of(g, i, pdt, text, p);
    return dt_errorf(err, DT_EINVAL, "%s: %s is %.*s; this plan quantises it as %s", file, js->name, (int)flen, fj,
                     text);
}

static int load_stored(dt_lm *g, dt_dtype pdt, const char *file, dt_error *err) {
    dt_st_file *f;
    if (dt_st_open(file, &f, err)) return err->code;
    int rc = DT_OK;
    for (int i = 0; i < dt_lm_num_quant_tensors(g) && !rc; i++) rc = load_stored_one(g, pdt, f, file, i, err);
    dt_st_close(f);
    return rc;
}

/* every quantised tensor read as fp32 by name and quantised */
static int load_float(dt_lm *g, const char *path, dt_error *err) {
    dt_hf_src *s;
    if (dt_hf_src_open_quant(g, path, &s, err)) return err->code;
    size_t largest = 0;
    for (int i = 0; i < dt_lm_num_quant_tensors(g); i++)
        if (dt_lm_quant_tensor(g, i)->numel > largest) largest = dt_lm_quant_tensor(g, i)->numel;
    float *w = malloc(sizeof(float) * largest);   /* [largest] one weight's values at a time */
    int rc = w ? DT_OK : dt_errorf(err, DT_ENOMEM, "%s: out of memory for one weight (%zu values)", path, largest);
    for (int i = 0; i < dt_lm_num_quant_tensors(g) && !rc; i++) {
        const dt_tensor_info *t = dt_lm_quant_tensor(g, i);
        rc = dt_hf_src_read(s, t->offset, t->numel, DT_DTYPE_FP32, w, err);
        if (!rc) rc = dt_lm_quant_set(g, i, w, err);
    }
    free(w);
    dt_hf_src_close(s);
    return rc;
}

int dt_quantbase_load(dt_lm *g, dt_dtype pdt, const char *path, dt_error *err) {
    if (!dt_lm_num_quant_tensors(g)) return DT_OK;
    char file[DT_ST_NAME_MAX * 4];
    single_file(path, file, sizeof file);
    return holds_quantised(g, pdt, file) ? load_stored(g, pdt, file, err) : load_float(g, path, err);
}
