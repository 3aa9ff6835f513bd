/* ckpt.c — see dt_ckpt.h. */
#include "dt_ckpt.h"
#include "dt_consts.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt_tp.h"
#include "dt_adapter.h"
#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_hfdir.h"
#include "dt_json.h"
#include "dt_memprobe.h"
#include "dt_quantbase.h"
#include "dt_safetensors.h"

/* llm.c model checkpoint header (llm.c train_gpt2.py write_model, read by
 * train_gpt2.c gpt2_build_from_checkpoint; docs/dtrun.md "Initialisation") */
#define DT_LLMC_MAGIC 20240326
#define DT_LLMC_V_FP32 3
#define DT_LLMC_V_BF16 5
#define DT_LLMC_HEADER_INTS 256
#define DT_CKPT_STEP_DIGITS 8

/* ---- small helpers ---- */

static const dt_tensor_info *find_tensor(const dt_lm *g, const char *name) {
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        if (strcmp(t->name, name) == 0) return t;
    }
    return NULL;
}

static char *pelem(void *base, dt_dtype dt, size_t off) {
    return (char *)base + off * (size_t)dt_dtype_size(dt);
}

/* ---- weights: safetensors ---- */

/* a model whose flat parameters a ZeRO-3 engine released (dt_lm_release_flat) */
static int require_flat(dt_lm *g, const char *path, dt_error *err) {
    if (dt_lm_params(g)) return DT_OK;
    return dt_errorf(err, DT_EINVAL,
                     "%s: the model's flat parameters are released (ZeRO stage 3); "
                     "consolidate them first (dt_zero_consolidate_params)", path);
}

/* Elements of a dt_io_chunk_bytes() buffer of es-byte elements (at least 1). */
static size_t chunk_elems(size_t es) {
    size_t e = dt_io_chunk_bytes() / es;
    return e ? e : 1;
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Adds every tensor of g to w under its Hugging Face name: the trained set (pdt), data from
 * the flat parameters at base, then the base set (a freeze plan's frozen tensors, so the
 * file is the whole model; in dt_lm_base_dtype), data from dt_lm_base_params; base NULL:
 * layout only, for the streaming writers (put_unit, then put_base). */
static int add_weights(dt_st_writer *w, dt_lm *g, dt_dtype pdt, void *base, dt_error *err) {
    int rc = dt_st_writer_meta(w, "format", "pt", err);
    char name[DT_ST_NAME_MAX];
    for (int set = 0; set < 2 && !rc; set++) {
        const int n = set ? dt_lm_num_base_tensors(g) : dt_lm_num_tensors(g);
        void *flat = !base ? NULL : set ? dt_lm_base_params(g) : base;
        for (int i = 0; i < n && !rc; i++) {
            const dt_tensor_info *t = set ? dt_lm_base_tensor(g, i) : dt_lm_tensor(g, i);
            snprintf(name, sizeof name, "%s%s", dt_lm_hf_prefix(g), t->name);
            const dt_dtype dt = set ? dt_lm_base_dtype(g) : pdt;
            rc = dt_st_writer_add(w, name, dt_st_dtype_name(dt), t->ndim, t->shape,
                                  flat ? pelem(flat, dt, t->offset) : NULL, err);
        }
    }
    /* QLoRA: the quantised linears, their quant state in the model's (the base set's) dtype */
    return rc ? rc : dt_quantbase_add(w, g, dt_lm_base_dtype(g), base != NULL, err);
}

/* Elements [lo, lo + n) of g's base set as host memory: in place where the host addresses
 * it, else copied into h (n elements of dt_lm_base_dtype). */
static const char *base_piece(dt_lm *g, size_t lo, size_t n, void *h, dt_error *err) {
    const dt_device_ops *dev = dt_lm_device_ops(g);
    const dt_dtype bdt = dt_lm_base_dtype(g);
    const char *b = pelem(dt_lm_base_params(g), bdt, lo);
    if (dev->host_addressable) return b;
    const size_t esz = (size_t)dt_dtype_size(bdt);
    dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_D2H);
    dev->memcpy(h, b, n * esz, DT_COPY_D2H, DT_STREAM_D2H);
    dev->stream_sync(DT_STREAM_D2H);
    return dev->synchronize(err) ? NULL : h;
}

/* The streaming writers' second part: the base set's tensors (add_weights' layout), from
 * the replicated base buffer, a dt_io_chunk_bytes() piece at a time. */
static int put_base(dt_lm *g, dt_st_stream *s, const char *path, dt_error *err) {
    const dt_device_ops *dev = dt_lm_device_ops(g);
    const size_t esz = (size_t)dt_dtype_size(dt_lm_base_dtype(g)), N = dt_lm_num_base_params(g), E = min_sz(chunk_elems(esz), N);
    if (!N) return dt_quantbase_put(g, dt_lm_base_dtype(g), s, err);
    void *h = dev->host_addressable ? NULL : dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, E * esz);
    if (!dev->host_addressable && !h)
        return dt_errorf(err, DT_ENOMEM, "%s: cannot allocate %zu bytes of host memory for the weights", path, E * esz);
    char name[DT_ST_NAME_MAX];
    int rc = DT_OK;
    for (int i = 0; i < dt_lm_num_base_tensors(g) && !rc; i++) {
        const dt_tensor_info *t = dt_lm_base_tensor(g, i);
        snprintf(name, sizeof name, "%s%s", dt_lm_hf_prefix(g), t->name);
        for (size_t c = 0; c < t->numel && !rc; c += E) {
            const size_t k = min_sz(E, t->numel - c);
            const char *p = base_piece(g, t->offset + c, k, h, err);
            rc = p ? dt_st_stream_put(s, name, c * esz, p, k * esz, err) : dt_error_prefix(err, "%s", path);
        }
    }
    if (h) dev->free(h);
    return rc ? rc : dt_quantbase_put(g, dt_lm_base_dtype(g), s, err);   /* QLoRA: the quantised linears */
}

/* ---- weights streamed piece by piece ---- */

typedef struct {
    dt_lm *g;
    dt_st_stream *s;
    dt_dtype pdt;
} unit_sink;

/* dt_zero_unit_fn: writes the parts of the tensors of unit `unit` that fall in
 * flat elements [flat_off, flat_off + n) at their offsets (pieces of a unit
 * come in order, so each tensor's bytes are put in order) */
static int put_unit(void *ctx, int unit, size_t flat_off, size_t n, const void *params, dt_error *err) {
    unit_sink *k = ctx;
    const size_t esz = (size_t)dt_dtype_size(k->pdt), hi = flat_off + n;
    char name[DT_ST_NAME_MAX];
    for (int i = 0; i < dt_lm_num_tensors(k->g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(k->g, i);
        size_t a = t->offset > flat_off ? t->offset : flat_off, e = min_sz(t->offset + t->numel, hi);
        if (a >= e) continue;
        if (t->group != unit)
            return dt_errorf(err, DT_ERUNTIME, "weights: tensor %s lies outside its unit %d", t->name, t->group);
        snprintf(name, sizeof name, "%s%s", dt_lm_hf_prefix(k->g), t->name);
        int rc = dt_st_stream_put(k->s, name, (a - t->offset) * esz, (const char *)params + (a - flat_off) * esz,
                                  (e - a) * esz, err);
        if (rc) return rc;
    }
    return DT_OK;
}

/* g's flat parameters on a device the host cannot address, streamed to path
 * through one dt_io_chunk_bytes() host buffer (pinned), so no host copy of the
 * whole model is made; the same bytes as dt_st_write_sum from host memory. */
static int weights_save_device(dt_lm *g, dt_dtype pdt, const char *path, dt_file_sum *sum, dt_error *err) {
    const dt_device_ops *dev = dt_lm_device_ops(g);
    const size_t esz = (size_t)dt_dtype_size(pdt), N = dt_lm_num_params(g), E = min_sz(chunk_elems(esz), N);
    unit_sink k = {g, NULL, pdt};
    void *h = E ? dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, E * esz) : NULL;
    dt_st_writer *w = dt_st_writer_new();
    int rc = w && (h || !E) ? add_weights(w, g, pdt, NULL, err)
                            : dt_errorf(err, DT_ENOMEM, "%s: cannot allocate %zu bytes of host memory for the weights",
                                        path, E * esz);
    if (!rc) rc = dt_st_stream_open(w, path, &k.s, err);
    const char *flat = dt_lm_params(g);
    for (int u = 0; u < dt_lm_num_groups(g) && !rc; u++) {
        const size_t off = dt_lm_group_offset(g, u), n = dt_lm_group_numel(g, u);
        for (size_t c = 0; c < n && !rc; c += E) {
            const size_t cnt = min_sz(E, n - c);
            dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_D2H);
            dev->memcpy(h, flat + (off + c) * esz, cnt * esz, DT_COPY_D2H, DT_STREAM_D2H);
            dev->stream_sync(DT_STREAM_D2H);
            /* an asynchronous device error (the copy or earlier work) would leave h stale */
            if ((rc = dev->synchronize(err))) dt_error_prefix(err, "%s: ", path);
            else rc = put_unit(&k, u, off + c, cnt, h, err);
        }
    }
    if (!rc) rc = put_base(g, k.s, path, err);
    if (k.s && rc) dt_st_stream_abort(k.s);
    else if (k.s) rc = dt_st_stream_close_sum(k.s, sum, err);
    dt_st_writer_free(w);
    if (h) dev->free(h);
    return rc;
}

/* dt_weights_save, returning the file's sum (may be NULL): from the flat
 * buffer in place where the host addresses it, else streamed */
static int weights_save(dt_lm *g, dt_dtype pdt, const char *path, dt_file_sum *sum, dt_error *err) {
    if (require_flat(g, path, err)) return err->code;
    if (!dt_lm_device_ops(g)->host_addressable) return weights_save_device(g, pdt, path, sum, err);
    dt_st_writer *w = dt_st_writer_new();
    int rc = w ? add_weights(w, g, pdt, dt_lm_params(g), err) : dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    if (!rc) rc = dt_st_write_sum(w, path, sum, err);
    dt_st_writer_free(w);
    return rc;
}

int dt_weights_save(dt_lm *g, dt_dtype pdt, const char *path, dt_error *err) {
    return weights_save(g, pdt, path, NULL, err);
}

/* Every rank calls it (stage 3's gathers are collective); write != 0 on the
 * rank that writes path. The file is byte-identical to dt_weights_save's: the
 * same layout, header first, then each unit's tensors piece by piece as
 * dt_zero_consolidate_params hands them over (stage 3 gathers one unit at a
 * time; stages 0-2 pass the flat buffer), so no rank holds a second copy of the
 * weights (docs/zero.md "Flat buffers"). */
static int weights_save_streamed(dt_lm *g, dt_zero *z, dt_dtype pdt, int write, const char *path,
                                 dt_file_sum *sum, dt_error *err) {
    if (!write) return dt_zero_consolidate_params(z, NULL, NULL, err);
    unit_sink k = {g, NULL, pdt};
    dt_st_writer *w = dt_st_writer_new();
    int rc = w ? add_weights(w, g, pdt, NULL, err) : dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    if (!rc) rc = dt_st_stream_open(w, path, &k.s, err);
    /* the gathers run whatever happened above: the other ranks are in them */
    dt_error e2;
    dt_error_clear(&e2);
    int rc2 = dt_zero_consolidate_params(z, rc ? NULL : put_unit, &k, rc ? &e2 : err);
    if (!rc) rc = rc2;
    if (!rc) rc = put_base(g, k.s, path, err);
    if (k.s && rc) dt_st_stream_abort(k.s);
    else if (k.s) rc = dt_st_stream_close_sum(k.s, sum, err);
    dt_st_writer_free(w);
    return rc;
}

/* ---- weights: llm.c .bin ---- */

/* The values an llm.c checkpoint of this header holds (sizes[16] in llm.c
 * order, train_gpt2.c fill_in_parameter_sizes), or 0 when they overflow. */
static uint64_t llmc_sizes(int64_t L, int64_t C, int64_t maxT, int64_t Vp, int64_t sizes[16]) {
    const int64_t f[16][4] = {{Vp, C, 1, 1}, {maxT, C, 1, 1}, {L, C, 1, 1}, {L, C, 1, 1},
                              {L, 3 * C, C, 1}, {L, 3 * C, 1, 1}, {L, C, C, 1}, {L, C, 1, 1},
                              {L, C, 1, 1}, {L, C, 1, 1}, {L, 4 * C, C, 1}, {L, 4 * C, 1, 1},
                              {L, C, 4 * C, 1}, {L, C, 1, 1}, {C, 1, 1, 1}, {C, 1, 1, 1}};
    uint64_t total = 0;
    for (int i = 0; i < 16; i++) {
        int64_t v = 1;
        for (int k = 0; k < 4; k++)
            if (f[i][k] < 0 || __builtin_mul_overflow(v, f[i][k], &v)) return 0;
        sizes[i] = v;
        if (__builtin_add_overflow(total, (uint64_t)v, &total)) return 0;
    }
    return total;
}

/* An llm.c checkpoint (llm.c train_gpt2.py write_model) as a source of the
 * parameters: the file memory-mapped, each tensor of g located in it. Its
 * Linear weights are [out, in] where the model's Conv1D are [in, out]: element
 * j of such a tensor is value (j % out) * in + j / out of its llm.c array. */
typedef struct {
    const dt_lm *g;
    void *map;
    size_t size;
    dt_dtype sdt;                  /* F32 (version 3) or BF16 (version 5) */
    const unsigned char *vals;     /* the values, after the header */
    size_t *src;                   /* [tensors] the tensor's first value in vals */
    int64_t *out;                  /* [tensors] transposed: the Linear's out (rows); 0: stored as the model's */
    float *tmp;                    /* a dt_io_chunk_bytes() fp32 buffer, allocated on first use */
    char path[DT_PATH_MAX];
} llmc_src;

static void llmc_close(llmc_src *s) {
    if (!s) return;
    if (s->map) munmap(s->map, s->size);
    free(s->src);
    free(s->out);
    free(s->tmp);
    free(s);
}

/* Locates tensor `name` of g: its llm.c value offset, out (0: not transposed). */
static int llmc_place(llmc_src *s, const char *name, size_t at, int64_t n, int64_t out, dt_error *err) {
    const dt_tensor_info *t = find_tensor(s->g, name);
    if (!t || (int64_t)t->numel != n)
        return dt_errorf(err, DT_EINTERNAL, "model has no tensor %s of %lld elements", name, (long long)n);
    int i = (int)(t - dt_lm_tensor(s->g, 0));
    s->src[i] = at;
    s->out[i] = out;
    return DT_OK;
}

/* Checks the header against m and the file's size (before anything is
 * allocated or mapped), maps the file and locates every tensor of g. */
static int llmc_open(const dt_lm *g, const dt_model *m, const char *path, llmc_src **out_s, dt_error *err) {
    *out_s = NULL;
    int fd;
    uint64_t fsize = 0;
    if (dt_file_open_regular(path, "llm.c checkpoint", &fd, &fsize, err)) return err->code;
    int32_t h[DT_LLMC_HEADER_INTS];
    if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
        close(fd);
        return dt_errorf(err, DT_EINVAL, "%s: truncated llm.c checkpoint (no 1024-byte header)", path);
    }
    int rc = DT_OK;
    int64_t maxT = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = h[7];
    if (h[0] != DT_LLMC_MAGIC) {
        rc = dt_errorf(err, DT_EINVAL, "%s: not an llm.c model checkpoint: magic %d, expected %d", path,
                       h[0], DT_LLMC_MAGIC);
    } else if (h[1] != DT_LLMC_V_FP32 && h[1] != DT_LLMC_V_BF16) {
        rc = dt_errorf(err, DT_EINVAL, "%s: llm.c checkpoint version %d (3 = fp32 or 5 = bf16 expected)",
                       path, h[1]);
    } else if (L != m->n_layer || C != m->hidden || NH != m->n_head || V != m->vocab ||
               maxT != m->max_pos || Vp < V) {
        rc = dt_errorf(err, DT_EINVAL,
                       "%s: llm.c checkpoint is L=%lld C=%lld NH=%lld V=%lld maxT=%lld but the plan's "
                       "model is L=%lld C=%lld NH=%lld V=%lld maxT=%lld",
                       path, (long long)L, (long long)C, (long long)NH, (long long)V, (long long)maxT,
                       (long long)m->n_layer, (long long)m->hidden, (long long)m->n_head,
                       (long long)m->vocab, (long long)m->max_pos);
    } else if (m->ffn != DT_GPT2_FFN_MULT * C) {
        rc = dt_errorf(err, DT_EINVAL, "%s: llm.c checkpoints assume an MLP of 4C; the model's is %lld",
                       path, (long long)m->ffn);
    }
    /* sizes in llm.c order (llm.c train_gpt2.c fill_in_parameter_sizes); the file
     * must hold exactly them, checked before anything is mapped */
    int64_t sizes[16];
    uint64_t total = rc ? 0 : llmc_sizes(L, C, maxT, Vp, sizes);
    dt_dtype sdt = h[1] == DT_LLMC_V_FP32 ? DT_DTYPE_FP32 : DT_DTYPE_BF16;
    size_t es = (size_t)dt_dtype_size(sdt);
    if (!rc && (total == 0 || total > (fsize - sizeof h) / es || sizeof h + total * es != fsize))
        rc = dt_errorf(err, DT_EINVAL,
                       "%s: llm.c checkpoint header (padded vocab %lld) implies %s%llu bytes of %s values, "
                       "the file holds %llu after the header: truncated, or a damaged header",
                       path, (long long)Vp, total ? "" : "more than ", total ? (unsigned long long)(total * es)
                       : (unsigned long long)UINT64_MAX, sdt == DT_DTYPE_FP32 ? "fp32" : "bf16",
                       (unsigned long long)(fsize - sizeof h));
    llmc_src *s = rc ? NULL : calloc(1, sizeof *s);
    const int nt = dt_lm_num_tensors(g);
    if (!rc && (!s || !(s->src = calloc((size_t)nt, sizeof *s->src)) || !(s->out = calloc((size_t)nt, sizeof *s->out))))
        rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    if (!rc) {
        s->g = g;
        s->sdt = sdt;
        s->size = (size_t)fsize;
        snprintf(s->path, sizeof s->path, "%s", path);
        s->map = mmap(NULL, s->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (s->map == MAP_FAILED) {
            s->map = NULL;
            rc = dt_errorf(err, DT_EIO, "%s: cannot map: %s", path, strerror(errno));
        } else {
            s->vals = (const unsigned char *)s->map + sizeof h;
        }
    }
    close(fd);
    size_t p[16];   /* each llm.c array's first value */
    p[0] = 0;
    for (int i = 1; i < 16 && !rc; i++) p[i] = p[i - 1] + (size_t)sizes[i - 1];
    struct { const char *suffix; int src; int64_t rows, cols; int tr; } per_layer[] = {
        {"ln_1.weight", 2, 1, C, 0},       {"ln_1.bias", 3, 1, C, 0},
        {"attn.c_attn.weight", 4, 3 * C, C, 1}, {"attn.c_attn.bias", 5, 1, 3 * C, 0},
        {"attn.c_proj.weight", 6, C, C, 1}, {"attn.c_proj.bias", 7, 1, C, 0},
        {"ln_2.weight", 8, 1, C, 0},       {"ln_2.bias", 9, 1, C, 0},
        {"mlp.c_fc.weight", 10, 4 * C, C, 1}, {"mlp.c_fc.bias", 11, 1, 4 * C, 0},
        {"mlp.c_proj.weight", 12, C, 4 * C, 1}, {"mlp.c_proj.bias", 13, 1, C, 0}};
    /* wte: the first V of Vp rows; wpe; ln_f */
    if (!rc) rc = llmc_place(s, "wte.weight", p[0], V * C, 0, err);
    if (!rc) rc = llmc_place(s, "wpe.weight", p[1], maxT * C, 0, err);
    if (!rc) rc = llmc_place(s, "ln_f.weight", p[14], C, 0, err);
    if (!rc) rc = llmc_place(s, "ln_f.bias", p[15], C, 0, err);
    char name[128];
    int placed = 4;
    for (int64_t l = 0; l < L && !rc; l++)
        for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0] && !rc; k++, placed++) {
            int64_t n = per_layer[k].rows * per_layer[k].cols;
            snprintf(name, sizeof name, "h.%lld.%s", (long long)l, per_layer[k].suffix);
            rc = llmc_place(s, name, p[per_layer[k].src] + (size_t)(l * n), n, per_layer[k].tr ? per_layer[k].rows : 0,
                            err);
        }
    if (!rc && placed != nt)
        rc = dt_errorf(err, DT_EINTERNAL, "%s: the model has %d tensors, an llm.c checkpoint %d", path, nt, placed);
    if (rc) {
        llmc_close(s);
        return rc;
    }
    *out_s = s;
    return DT_OK;
}

/* Flat elements [lo, lo + n) of g into host dst (pdt): each piece converted to
 * fp32 exactly (bf16 widens exactly; a Linear weight is gathered transposed)
 * and then to pdt, as the whole-file conversion did; pages released after it. */
static int llmc_read(llmc_src *s, size_t lo, size_t n, dt_dtype pdt, void *dst, dt_error *err) {
    const size_t hi = lo + n, es = (size_t)dt_dtype_size(s->sdt), ds = (size_t)dt_dtype_size(pdt);
    const size_t E = chunk_elems(sizeof(float));
    for (int i = 0; i < dt_lm_num_tensors(s->g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(s->g, i);
        size_t a = t->offset > lo ? t->offset : lo, b = min_sz(t->offset + t->numel, hi);
        if (a >= b) continue;
        if ((s->out[i] || s->sdt != DT_DTYPE_FP32) && !s->tmp && !(s->tmp = malloc(E * sizeof(float))))
            return dt_errorf(err, DT_ENOMEM, "%s: out of memory for a %zu-value conversion buffer", s->path, E);
        const unsigned char *base = s->vals + s->src[i] * es;
        const int64_t out = s->out[i], in = out ? (int64_t)t->numel / out : 0;
        for (size_t j = a - t->offset; j < b - t->offset; j += E) {
            const size_t k = min_sz(E, b - t->offset - j);
            char *d = (char *)dst + (t->offset + j - lo) * ds;
            if (out) {   /* Conv1D [in, out] element j = Linear [out, in] value (j % out) * in + j / out */
                for (size_t q = 0; q < k; q++) {
                    size_t e = j + q, v = (e % (size_t)out) * (size_t)in + e / (size_t)out;
                    s->tmp[q] = s->sdt == DT_DTYPE_FP32 ? ((const float *)base)[v]
                                                        : dt_bf16_to_f32(((const dt_bf16 *)base)[v]);
                }
                dt_convert(d, pdt, s->tmp, DT_DTYPE_FP32, k);
                dt_map_release(base, t->numel * es);   /* a piece of the transpose reads the whole tensor */
            } else if (s->sdt == DT_DTYPE_FP32) {
                dt_convert(d, pdt, base + j * es, DT_DTYPE_FP32, k);
                dt_map_release(base + j * es, k * es);
            } else {
                dt_convert(s->tmp, DT_DTYPE_FP32, base + j * es, s->sdt, k);
                dt_convert(d, pdt, s->tmp, DT_DTYPE_FP32, k);
                dt_map_release(base + j * es, k * es);
            }
        }
    }
    return DT_OK;
}

/* ---- a weights source: a safetensors file, a Hugging Face directory or an llm.c checkpoint ---- */

typedef struct {
    dt_hf_src *hf;
    llmc_src *llmc;
    dt_dtype pdt;
    /* dt_weights_load_zero_adapter: no file (every element drawn from seed by g's init rule)
     * and / or a PEFT adapter laid over the trained set's tensors it holds */
    const dt_lm *g;
    int from_seed;
    uint64_t seed;
    const dt_adapter *adapter;
} weights_src;

static void wsrc_close(weights_src *s) {
    dt_hf_src_close(s->hf);
    llmc_close(s->llmc);
}

/* Opens path as dt_weights_load reads it: a directory is a Hugging Face model
 * directory (config.json must be m), a file an llm.c checkpoint by its magic,
 * else safetensors. */
static int wsrc_open(const dt_lm *g, const dt_model *m, dt_dtype pdt, const char *path, const uint64_t *seed,
                     weights_src *s, dt_error *err) {
    memset(s, 0, sizeof *s);
    s->pdt = pdt;
    if (dt_hf_is_dir(path)) {
        if (dt_hf_check_config(path, m, "the model directory", err)) return err->code;
        return seed ? dt_hf_src_open_seeded(g, path, *seed, &s->hf, err) : dt_hf_src_open_dir(g, path, &s->hf, err);
    }
    int fd;
    uint64_t fsize = 0;
    if (dt_file_open_regular(path, "weights file (.safetensors or llm.c .bin)", &fd, &fsize, err)) return err->code;
    int32_t magic = 0;
    int got = read(fd, &magic, sizeof magic) == (ssize_t)sizeof magic;
    close(fd);
    if (got && magic == DT_LLMC_MAGIC) {
        if (m->family != DT_FAMILY_GPT2)
            return dt_errorf(err, DT_EINVAL, "%s: an llm.c checkpoint holds a GPT-2 model, but the plan's %s is of "
                             "the %s family: give a Hugging Face model directory or .safetensors file", path, m->name,
                             dt_family_name(m->family));
        return llmc_open(g, m, path, &s->llmc, err);
    }
    return seed ? dt_hf_src_open_seeded(g, path, *seed, &s->hf, err) : dt_hf_src_open_file(g, path, &s->hf, err);
}

/* The adapter's tensors over flat elements [lo, lo + n) of g's trained set in dst (pdt). */
static void adapter_overlay(const weights_src *s, size_t lo, size_t n, void *dst) {
    const size_t ds = (size_t)dt_dtype_size(s->pdt);
    for (int i = 0; i < dt_lm_num_tensors(s->g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(s->g, i);
        const size_t a = t->offset > lo ? t->offset : lo;
        const size_t b = t->offset + t->numel < lo + n ? t->offset + t->numel : lo + n;
        const dt_adapter_entry *e = a < b ? dt_adapter_find(s->adapter, t->name) : NULL;
        dt_dtype sdt;
        if (!e || dt_st_dtype_parse(e->dtype, &sdt)) continue;   /* dtypes checked by dt_adapter_read */
        const size_t es = (size_t)dt_dtype_size(sdt);
        dt_convert((char *)dst + (a - lo) * ds, s->pdt, (const char *)e->data + (a - t->offset) * es, sdt, b - a);
    }
}

/* dt_zero_read_fn over a weights source */
static int wsrc_read(void *ctx, size_t lo, size_t n, void *dst, dt_error *err) {
    weights_src *s = ctx;
    int rc = DT_OK;
    if (s->from_seed) dt_lm_init_slice(s->g, s->seed, lo, n, dst, s->pdt);
    else rc = s->llmc ? llmc_read(s->llmc, lo, n, s->pdt, dst, err) : dt_hf_src_read(s->hf, lo, n, s->pdt, dst, err);
    if (!rc && s->adapter) adapter_overlay(s, lo, n, dst);
    return rc;
}

/* Every LoRA tensor of g's trained set is in a with its shape, and every tensor of a is one of
 * g's trained tensors with its shape. */
static int adapter_covers(const dt_lm *g, const dt_adapter *a, dt_error *err) {
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        const dt_adapter_entry *e = dt_adapter_find(a, t->name);
        if (!e && (t->flags & DT_TENSOR_ADAPTER))
            return dt_errorf(err, DT_EINVAL, "the adapter has no %s: plan the adapter's target modules (--lora-target)",
                             t->name);
        const int64_t d1 = t->ndim > 1 ? t->shape[1] : 1, e1 = e && e->ndim > 1 ? e->shape[1] : 1;
        if (e && (e->shape[0] != t->shape[0] || e1 != d1))
            return dt_errorf(err, DT_EINVAL, "the adapter's %s is [%lld, %lld], the model's [%lld, %lld]", t->name,
                             (long long)e->shape[0], (long long)e1, (long long)t->shape[0], (long long)d1);
    }
    for (int k = 0; k < dt_adapter_count(a); k++) {
        const dt_adapter_entry *e = dt_adapter_get(a, k);
        int found = 0;
        for (int i = 0; i < dt_lm_num_tensors(g) && !found; i++) found = !strcmp(dt_lm_tensor(g, i)->name, e->name);
        if (!found)
            return dt_errorf(err, DT_EINVAL,
                             "the adapter's %s is not trained by the plan: plan the adapter's target modules "
                             "(--lora-target) and modules to save (--modules-to-save)", e->name);
    }
    return DT_OK;
}

/* The whole source into g's flat parameters: in place where the host addresses
 * them, else through one dt_io_chunk_bytes() host buffer (pinned) and H2D. */
static int read_into(dt_lm *g, weights_src *s, char *flat, size_t N, const char *path, dt_error *err) {
    const dt_device_ops *dev = dt_lm_device_ops(g);
    const size_t esz = (size_t)dt_dtype_size(s->pdt);
    if (dev->host_addressable) return wsrc_read(s, 0, N, flat, err);
    const size_t E = min_sz(chunk_elems(esz), N);
    void *h = E ? dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, E * esz) : NULL;
    int rc = h || !E ? DT_OK
                     : dt_errorf(err, DT_ENOMEM, "%s: cannot allocate %zu bytes of host memory for the weights", path,
                                 E * esz);
    for (size_t c = 0; c < N && !rc; c += E) {
        const size_t k = min_sz(E, N - c);
        if ((rc = wsrc_read(s, c, k, h, err))) break;
        dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_H2D);   /* earlier kernels are done with the parameters */
        dev->memcpy(flat + c * esz, h, k * esz, DT_COPY_H2D, DT_STREAM_H2D);
        dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
        dev->stream_sync(DT_STREAM_H2D);   /* h is reused by the next piece */
    }
    if (!rc) rc = dev->synchronize(err);
    if (h) dev->free(h);
    return rc;
}

static int read_flat(dt_lm *g, weights_src *s, const char *path, dt_error *err) {
    return read_into(g, s, dt_lm_params(g), dt_lm_num_params(g), path, err);
}

int dt_weights_load_base(dt_lm *g, const dt_model *m, dt_dtype pdt, const char *path, dt_error *err) {
    if (dt_lm_num_base_tensors(g) == 0) return dt_quantbase_load(g, pdt, path, err);
    weights_src s;
    memset(&s, 0, sizeof s);
    s.pdt = pdt;
    int rc = dt_hf_is_dir(path) ? dt_hf_check_config(path, m, "the model directory", err) : DT_OK;
    if (!rc) rc = dt_hf_src_open_base(g, path, &s.hf, err);
    if (!rc) rc = read_into(g, &s, dt_lm_base_params(g), dt_lm_num_base_params(g), path, err);
    wsrc_close(&s);
    return rc ? rc : dt_quantbase_load(g, pdt, path, err);   /* QLoRA: the quantised linears */
}

static int check_base_set(const char *path, dt_lm *g, dt_dtype pdt, dt_error *err) {
    const size_t N = dt_lm_num_base_params(g), esz = (size_t)dt_dtype_size(pdt), E = min_sz(chunk_elems(esz), N);
    if (!N) return DT_OK;
    dt_hf_src *s = NULL;
    if (dt_hf_src_open_base(g, path, &s, err))
        return dt_error_suffix(err, " (the checkpoint holds no frozen base this plan's method can check: resume with "
                                    "the finetune section the run was started with)");
    const dt_device_ops *dev = dt_lm_device_ops(g);
    char *a = malloc(E * esz), *h = dev->host_addressable ? NULL : dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, E * esz);
    int rc = a && (h || dev->host_addressable) ? DT_OK : dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    for (size_t c = 0; c < N && !rc; c += E) {
        const size_t k = min_sz(E, N - c);
        const char *ours = NULL;
        if (!(rc = dt_hf_src_read(s, c, k, pdt, a, err)) && !(ours = base_piece(g, c, k, h, err))) rc = err->code;
        if (!rc && memcmp(a, ours, k * esz))
            rc = dt_errorf(err, DT_EINVAL,
                           "%s: the frozen base differs from this run's (elements %zu..%zu of the base set): resume "
                           "with the output.init and data.seed the run started with", path, c, c + k - 1);
    }
    free(a);
    if (h) dev->free(h);
    dt_hf_src_close(s);
    return rc;
}

int dt_ckpt_check_base(const char *ckpt_dir, dt_lm *g, dt_dtype pdt, dt_error *err) {
    char path[DT_PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/model.safetensors", ckpt_dir);
    int rc = check_base_set(path, g, pdt, err);
    return rc ? rc : dt_quantbase_check(g, pdt, path, err);   /* QLoRA: the quantised linears, byte for byte */
}

int dt_weights_load(dt_lm *g, const dt_model *m, dt_dtype pdt, const char *path, dt_error *err) {
    if (require_flat(g, path, err)) return err->code;
    weights_src s;
    int rc = wsrc_open(g, m, pdt, path, NULL, &s, err);
    if (!rc) rc = read_flat(g, &s, path, err);
    wsrc_close(&s);
    return rc;
}

static int load_zero(dt_zero *z, dt_lm *g, const dt_model *m, dt_dtype pdt, const char *path, const uint64_t *seed,
                     dt_error *err) {
    weights_src s;
    int rc = wsrc_open(g, m, pdt, path, seed, &s, err);
    if (!rc) rc = dt_zero_load_params(z, wsrc_read, &s, err);
    wsrc_close(&s);
    return rc;
}

int dt_weights_load_zero(dt_zero *z, dt_lm *g, const dt_model *m, dt_dtype pdt, const char *path, dt_error *err) {
    return load_zero(z, g, m, pdt, path, NULL, err);
}

int dt_weights_load_zero_adapter(dt_zero *z, dt_lm *g, const dt_model *m, dt_dtype pdt, const char *path,
                                 const dt_adapter *a, uint64_t seed, dt_error *err) {
    if (adapter_covers(g, a, err)) return err->code;
    weights_src s;
    int rc = DT_OK;
    if (path && path[0]) {
        rc = wsrc_open(g, m, pdt, path, &seed, &s, err);
    } else {
        memset(&s, 0, sizeof s);
        s.pdt = pdt;
        s.from_seed = 1;
    }
    s.g = g;
    s.seed = seed;
    s.adapter = a;
    if (!rc) rc = dt_zero_load_params(z, wsrc_read, &s, err);
    wsrc_close(&s);
    return rc;
}

int dt_weights_load_zero_seeded(dt_zero *z, dt_lm *g, const dt_model *m, dt_dtype pdt, const char *path,
                                uint64_t seed, dt_error *err) {
    return load_zero(z, g, m, pdt, path, &seed, err);
}

/* ---- HF config.json ---- */

static char *hf_config_text(const dt_model *m) { return dt_hf_config_text(m); }

/* Writes text (freed here; NULL: out of memory) to path atomically, returning its sum. */
static int write_text(const char *path, char *text, dt_file_sum *sum, dt_error *err) {
    if (!text) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    int rc = dt_write_file_atomic_sum(path, text, strlen(text), sum, err);
    free(text);
    return rc;
}

int dt_hf_config_write(const dt_model *m, const char *path, dt_error *err) {
    return write_text(path, hf_config_text(m), NULL, err);
}

/* ---- checkpoints ---- */

#define DT_OPTIM_FILE_FMT "optim-%05d-of-%05d.safetensors"
/* a rank's optimizer-shard sum, handed to rank 0 for state.json; removed before the rename */
#define DT_SUM_FILE_FMT ".optim-%05d-of-%05d.sum"
#define DT_CKPT_MAX_WORLD (1 << 20)                /* world sizes a state.json may name */
#define DT_CKPT_MAX_INT DT_JSON_MAX_EXACT_INT      /* counters are JSON numbers: exact up to 2^53 */
#define DT_CKPT_NAME_MAX 64
#define DT_CKPT_DAMAGED "the checkpoint is damaged or mixed with another; move it aside to resume from an earlier one"

/* One file of a checkpoint and its sum, as state.json's "files" records it. */
typedef struct {
    char name[DT_CKPT_NAME_MAX];
    dt_file_sum sum;
} ckpt_file;

/* What state.json says the directory holds, checked against the files. */
typedef struct {
    ckpt_file *files;   /* NULL: written before sums were recorded (loaded unverified) */
    int nfiles;
    int64_t world, stage;
    int64_t optim_files;   /* written by a tensor-parallel run; 0: the stage's rule */
} ckpt_manifest;

/* A step directory name: "ckpt-" and decimal digits only. */
static int ckpt_step_of(const char *name, int64_t *step) {
    size_t pl = strlen(DT_CKPT_PREFIX), n = strlen(name);
    if (strncmp(name, DT_CKPT_PREFIX, pl) != 0 || n == pl || n - pl > 18) return 0;
    int64_t s = 0;
    for (const char *p = name + pl; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        s = s * 10 + (*p - '0');
    }
    *step = s;
    return 1;
}

/* The files dtrun writes into a checkpoint directory (and their .tmp while written). */
static int is_ckpt_file(const char *name) {
    static const char *fixed[] = {"model.safetensors", "config.json", "plan.json", "state.json"};
    char base[DT_CKPT_NAME_MAX];
    size_t n = strlen(name);
    if (n >= sizeof base) return 0;
    memcpy(base, name, n + 1);
    if (n > 4 && strcmp(base + n - 4, ".tmp") == 0) base[n - 4] = '\0';
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (strcmp(base, fixed[i]) == 0) return 1;
    int r, w, end = 0;
    if (sscanf(base, "optim-%5d-of-%5d.safetensors%n", &r, &w, &end) == 2 && base[end] == '\0' && end) return 1;
    end = 0;
    return sscanf(base, ".optim-%5d-of-%5d.sum%n", &r, &w, &end) == 2 && base[end] == '\0' && end;
}

int dt_ckpt_remove(const char *dir) {
    char p[DT_PATH_MAX * 3];
    /* state.json first: interrupted here, the directory is no longer a checkpoint */
    snprintf(p, sizeof p, "%s/state.json", dir);
    unlink(p);
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_ckpt_file(e->d_name)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    /* a LoRA run's PEFT adapter (DT_CKPT_ADAPTER_DIR: the two files dt_adapter_write writes) */
    static const char *adapter_files[] = {DT_ADAPTER_CONFIG_FILE, DT_ADAPTER_WEIGHTS_FILE};
    for (size_t i = 0; i < sizeof adapter_files / sizeof adapter_files[0]; i++) {
        snprintf(p, sizeof p, "%s/" DT_CKPT_ADAPTER_DIR "/%s", dir, adapter_files[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/" DT_CKPT_ADAPTER_DIR, dir);
    rmdir(p);
    return rmdir(dir);   /* fails, keeping the directory, when it holds files dtrun did not write */
}

/* "flat_begin:count,..." of this rank's optimizer ranges rs[0 .. n), in state order */
static char *ranges_text(const dt_zero_range *rs, int n) {
    size_t cap = (size_t)n * 48 + 1, len = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    t[0] = '\0';
    for (int i = 0; i < n; i++) {
        dt_zero_range r = rs[i];
        len += (size_t)snprintf(t + len, cap - len, "%s%zu:%zu", len ? "," : "", r.flat_begin, r.count);
    }
    return t;
}

/* The order the safetensors writer lays tensors out in (dt_safetensors.h: the
 * reference writer's, descending element size, then name): putting them in it
 * lets the stream sum the bytes as they are written instead of reading them
 * back at close. */
static int optim_file_order(const dt_dtype dts[3], const char *names[3], int k, int j) {
    int bk = dt_dtype_size(dts[k]), bj = dt_dtype_size(dts[j]);
    return bk != bj ? bj - bk : strcmp(names[k], names[j]);
}

/* This rank's valid optimizer elements, concatenated in range order; metadata
 * "ranges" and the step it belongs to. Streamed: each state is read
 * (dt_zero_state_read) into one dt_io_chunk_bytes() buffer a piece at a time
 * and written at its place, so no copy of a whole state is made; the bytes are
 * those dt_st_write_sum writes from whole arrays. */
static int write_optim_shard(const char *path, dt_zero *z, const dt_lm *g, const dt_train_state *st,
                             dt_file_sum *sum, dt_error *err) {
    int n = 0;
    dt_zero_range *rs = NULL;   /* in the whole model's layout (tensor parallelism: ckpt_tp.h) */
    if (ckpt_tp_ranges(z, g, 1, &rs, &n, err)) return err->code;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += rs[i].count;
    const dt_dtype dts[3] = {DT_DTYPE_FP32, dt_zero_moment_dtype(z), dt_zero_moment_dtype(z)};
    const char *names[3] = {"master", "exp_avg", "exp_avg_sq"};
    const int k0 = dt_zero_has_master(z) ? 0 : 1;
    int order[3] = {0, 1, 2}, no = 0;
    for (int k = k0; k < 3; k++) {   /* insertion sort of the (at most 3) states into file order */
        int at = no++;
        while (at > 0 && optim_file_order(dts, names, k, order[at - 1]) < 0) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = k;
    }
    const size_t E = min_sz(chunk_elems(sizeof(float)), total);   /* fp32: the widest state */
    void *buf = E ? malloc(E * sizeof(float)) : NULL;
    char *rt = ranges_text(rs, n);
    dt_st_writer *w = dt_st_writer_new();
    int rc = rt && w && (buf || !E) ? DT_OK
                                    : dt_errorf(err, DT_ENOMEM, "checkpoint: out of memory for the optimizer shard");
    int64_t cnt = (int64_t)total;
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)st->step);
    if (!rc) rc = dt_st_writer_meta(w, "ranges", rt, err);
    if (!rc) rc = dt_st_writer_meta(w, "step", num, err);
    for (int k = k0; k < 3 && !rc; k++)
        rc = dt_st_writer_add(w, names[k], dt_st_dtype_name(dts[k]), 1, &cnt, NULL, err);
    dt_st_stream *s = NULL;
    if (!rc) rc = dt_st_stream_open(w, path, &s, err);
    for (int q = 0; q < no && !rc; q++) {
        const int k = order[q];
        const size_t es = (size_t)dt_dtype_size(dts[k]);
        uint64_t off = 0;   /* bytes of this tensor put so far */
        for (int i = 0; i < n && !rc; i++) {
            dt_zero_range r = rs[i];
            for (size_t c = 0; c < r.count && !rc; c += E) {
                const size_t m = min_sz(E, r.count - c);
                rc = dt_zero_state_read(z, k, r.state_begin + c, m, buf, err);
                if (!rc) rc = dt_st_stream_put(s, names[k], off, buf, m * es, err);
                off += m * es;
            }
        }
    }
    if (s && rc) dt_st_stream_abort(s);
    else if (s) rc = dt_st_stream_close_sum(s, sum, err);
    dt_st_writer_free(w);
    free(buf);
    free(rt);
    free(rs);
    return rc;
}

/* A rank's shard sum, for rank 0 (the checkpoint directory is shared; no collective needed). */
static int write_sum_file(const char *dir, int rank, int writers, const dt_file_sum *s, dt_error *err) {
    char p[DT_PATH_MAX * 3], txt[64];
    snprintf(p, sizeof p, "%s/" DT_SUM_FILE_FMT, dir, rank, writers);
    int n = snprintf(txt, sizeof txt, "%llu %08x\n", (unsigned long long)s->bytes, (unsigned)s->crc32c);
    return dt_write_file_atomic(p, txt, (size_t)n, err);
}

/* Rank 0: another rank's shard sum into f; the sum file is removed. */
static int take_sum_file(const char *dir, int rank, int writers, ckpt_file *f, dt_error *err) {
    char p[DT_PATH_MAX * 3], *txt = NULL;
    snprintf(f->name, sizeof f->name, DT_OPTIM_FILE_FMT, rank, writers);
    snprintf(p, sizeof p, "%s/" DT_SUM_FILE_FMT, dir, rank, writers);
    if (dt_read_file(p, 64, &txt, NULL, err)) return err->code;
    unsigned long long b;
    unsigned c;
    int ok = sscanf(txt, "%llu %x", &b, &c) == 2;
    free(txt);
    unlink(p);
    if (!ok) return dt_errorf(err, DT_EIO, "%s: rank %d's checksum file is malformed", p, rank);
    f->sum.bytes = b;
    f->sum.crc32c = c;
    return DT_OK;
}

static char *state_json(const dt_train_state *st, const dt_precision *prec, size_t nparams, int world,
                        int stage, int tp, const ckpt_file *files, int nfiles) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "format", DT_CKPT_FORMAT);
    cJSON_AddStringToObject(c, "run_id", st->run_id);
    cJSON_AddNumberToObject(c, "step", (double)st->step);
    cJSON_AddNumberToObject(c, "adam_step", (double)st->adam_step);
    cJSON_AddNumberToObject(c, "skipped_steps", (double)st->skipped_steps);
    cJSON_AddNumberToObject(c, "tokens", (double)st->tokens);
    cJSON_AddNumberToObject(c, "world_size", world);
    cJSON_AddNumberToObject(c, "zero_stage", stage);
    if (tp > 1) {   /* tensor parallelism: informational, and the optimizer files written (every TP rank's) */
        cJSON_AddNumberToObject(c, "tensor_parallel", tp);
        cJSON_AddNumberToObject(c, "optim_files", stage == 0 ? tp : world);
    }
    cJSON_AddNumberToObject(c, "num_params", (double)nparams);
    cJSON_AddStringToObject(c, "precision", dt_precision_preset_name(prec->preset));
    cJSON_AddStringToObject(c, "param_dtype", dt_dtype_name(prec->param));
    char hex[32];
    snprintf(hex, sizeof hex, "%016" PRIx64, st->rng);
    cJSON_AddStringToObject(c, "rng", hex);
    cJSON *d = cJSON_AddObjectToObject(c, "data");
    cJSON_AddNumberToObject(d, "epoch", (double)st->data.epoch);
    cJSON_AddNumberToObject(d, "cursor", (double)st->data.cursor);
    if (st->data_fingerprint[0]) cJSON_AddStringToObject(d, "tokenizer_fingerprint", st->data_fingerprint);
    const dt_loss_scaler *s = &st->scaler;
    cJSON *l = cJSON_AddObjectToObject(c, "loss_scaler");
    cJSON_AddBoolToObject(l, "dynamic", s->dynamic);
    cJSON_AddNumberToObject(l, "cur_scale", s->cur_scale);
    cJSON_AddNumberToObject(l, "scale_factor", s->scale_factor);
    cJSON_AddNumberToObject(l, "scale_window", (double)s->scale_window);
    cJSON_AddNumberToObject(l, "min_scale", s->min_scale);
    cJSON_AddNumberToObject(l, "delayed_shift", s->delayed_shift);
    cJSON_AddNumberToObject(l, "cur_hysteresis", s->cur_hysteresis);
    cJSON_AddBoolToObject(l, "consecutive_hysteresis", s->consecutive_hysteresis);
    cJSON_AddNumberToObject(l, "cur_iter", (double)s->cur_iter);
    cJSON_AddNumberToObject(l, "last_overflow_iter", (double)s->last_overflow_iter);
    cJSON *fl = cJSON_AddObjectToObject(c, "files");
    for (int i = 0; i < nfiles; i++) {
        cJSON *o = cJSON_AddObjectToObject(fl, files[i].name);
        snprintf(hex, sizeof hex, "%08x", (unsigned)files[i].sum.crc32c);
        cJSON_AddNumberToObject(o, "bytes", (double)files[i].sum.bytes);
        cJSON_AddStringToObject(o, "crc32c", hex);
    }
    char *txt = dt_json_print(c);
    cJSON_Delete(c);
    return txt;
}

/* The run id in DIR/state.json, or "" (none, unreadable, or not a dtrun checkpoint). */
static void ckpt_run_id(const char *dir, char *id, size_t n) {
    char p[DT_PATH_MAX * 3], *txt = NULL;
    id[0] = '\0';
    snprintf(p, sizeof p, "%s/state.json", dir);
    if (dt_json_read_file(p, &txt, NULL, NULL)) return;
    cJSON *c = cJSON_Parse(txt);
    free(txt);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, "run_id");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "format");
    if (cJSON_IsString(v) && cJSON_IsString(f) && strcmp(f->valuestring, DT_CKPT_FORMAT) == 0)
        snprintf(id, n, "%s", v->valuestring);
    cJSON_Delete(c);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* keep_last: removes all but the newest keep_last checkpoints of this run's
 * series (run_id); checkpoints of other runs, and anything else, stay. */
static void prune(const char *out_dir, int64_t keep_last, const char *run_id) {
    if (keep_last <= 0 || !run_id[0]) return;
    DIR *d = opendir(out_dir);
    if (!d) return;
    int64_t *steps = NULL, s;
    size_t n = 0, cap = 0;
    struct dirent *e;
    char p[DT_PATH_MAX * 2], id[DT_RUN_ID_LEN + 8];
    while ((e = readdir(d))) {
        if (!ckpt_step_of(e->d_name, &s)) continue;
        snprintf(p, sizeof p, "%s/%s", out_dir, e->d_name);
        ckpt_run_id(p, id, sizeof id);
        if (strcmp(id, run_id) != 0) continue;
        if (n == cap) {
            int64_t *ns = realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *steps);
            if (!ns) break;
            steps = ns;
        }
        steps[n++] = s;
    }
    closedir(d);
    if (n > 1) qsort(steps, n, sizeof *steps, cmp_i64);
    for (size_t i = 0; i + (size_t)keep_last < n; i++) {
        snprintf(p, sizeof p, "%s/" DT_CKPT_PREFIX "%0*lld", out_dir, DT_CKPT_STEP_DIGITS, (long long)steps[i]);
        dt_ckpt_remove(p);
    }
    free(steps);
}

/* Writes state.json (state_txt, freed here) last, fsyncs, and renames tmp over
 * fin (an existing fin is moved to old first and removed after). */
static int finish_dir(const char *out_dir, const char *tmp, const char *fin, const char *old, char *state_txt,
                      dt_error *err) {
    char p[DT_PATH_MAX * 3];
    snprintf(p, sizeof p, "%s/state.json", tmp);
    int rc = state_txt ? dt_write_file_atomic(p, state_txt, strlen(state_txt), err)
                       : dt_errorf(err, DT_ENOMEM, "state.json: out of memory");
    free(state_txt);
    if (!rc) rc = dt_fsync_dir(tmp, err);
    if (rc) return rc;
    struct stat sb;
    if (stat(fin, &sb) == 0 && rename(fin, old) != 0)
        rc = dt_errorf(err, DT_EIO, "%s: cannot move the old checkpoint aside: %s", fin, strerror(errno));
    if (!rc && rename(tmp, fin) != 0)
        rc = dt_errorf(err, DT_EIO, "%s: cannot rename into place: %s", fin, strerror(errno));
    if (!rc) rc = dt_fsync_dir(out_dir, err);
    dt_ckpt_remove(old);
    return rc;
}

int dt_ckpt_latest(const char *out_dir, char *path, size_t path_len, int64_t *step, dt_error *err) {
    *step = -1;
    DIR *d = opendir(out_dir);
    if (!d) return DT_OK;
    struct dirent *e;
    char p[DT_PATH_MAX * 3];
    int64_t s;
    while ((e = readdir(d))) {
        if (!ckpt_step_of(e->d_name, &s)) continue;
        snprintf(p, sizeof p, "%s/%s/state.json", out_dir, e->d_name);
        struct stat sb;
        if (stat(p, &sb) != 0) continue;   /* not complete */
        if (s > *step) {
            *step = s;
            snprintf(path, path_len, "%s/%s", out_dir, e->d_name);
        }
    }
    closedir(d);
    (void)err;
    return DT_OK;
}

/* ---- writing a checkpoint ---- */

/* Rank 0's part after the optimizer shards: weights (unless stage 3 streamed them),
 * config.json, plan.json, the other ranks' sums, state.json, the rename. */
static int save_rank0(const char *out_dir, const char *tmp, const char *fin, const char *old, dt_lm *g,
                      const dt_model *m, const dt_precision *prec, const dt_train_state *st, const char *plan_json,
                      int world, int stage, ckpt_file *files, int nfiles, dt_error *err) {
    char p[DT_PATH_MAX * 3];
    int rc = DT_OK, writers = nfiles - 3;   /* files: model, config, plan, then the shards */
    snprintf(p, sizeof p, "%s/config.json", tmp);
    if (!rc) rc = write_text(p, hf_config_text(m), &files[1].sum, err);
    dt_memprobe_end(DT_PHASE_EXPORT);
    if (!rc && plan_json) {
        snprintf(p, sizeof p, "%s/plan.json", tmp);
        rc = dt_write_file_atomic_sum(p, plan_json, strlen(plan_json), &files[2].sum, err);
    }
    for (int r = 1; r < writers && !rc; r++) rc = take_sum_file(tmp, r, writers, &files[3 + r], err);
    if (!rc) {
        /* plan.json is optional: without it the list skips its slot */
        if (!plan_json) memmove(&files[2], &files[3], (size_t)(nfiles - 3) * sizeof *files);
        char *state = state_json(st, prec, ckpt_tp_params(g), world, stage, ckpt_tp_size(g), files,
                                 plan_json ? nfiles : nfiles - 1);
        rc = finish_dir(out_dir, tmp, fin, old, state, err);
    }
    return rc;
}

/* Every rank calls this (it is collective: barriers, and stage 3 gathers the
 * weights). Rank 0 owns the directory; each rank writes its optimizer shard.
 * Every file's size and CRC-32C go into state.json (other ranks hand theirs to
 * rank 0 in a small .sum file next to the shard). */
int dt_ckpt_save_zero(const char *out_dir, dt_lm *g, const dt_model *m, const dt_precision *prec,
                      dt_zero *z, dt_comm *c, const dt_train_state *st, const char *plan_json,
                      int64_t keep_last, char *saved_path, size_t saved_len, dt_error *err) {
    const int rank = dt_comm_rank(c), world = dt_comm_size(c);
    const int stage = dt_zero_stage(z);
    char tmp[DT_PATH_MAX * 2], fin[DT_PATH_MAX * 2], old[DT_PATH_MAX * 2], p[DT_PATH_MAX * 3];
    long long step = (long long)st->step;
    snprintf(tmp, sizeof tmp, "%s/." DT_CKPT_PREFIX "%0*lld.tmp", out_dir, DT_CKPT_STEP_DIGITS, step);
    snprintf(fin, sizeof fin, "%s/" DT_CKPT_PREFIX "%0*lld", out_dir, DT_CKPT_STEP_DIGITS, step);
    snprintf(old, sizeof old, "%s/." DT_CKPT_PREFIX "%0*lld.old", out_dir, DT_CKPT_STEP_DIGITS, step);
    int rc = DT_OK;
    /* stage 0 keeps identical full state on every rank: rank 0 writes it once (tensor
     * parallelism: the TP ranks of data-parallel rank 0, world ranks 0 .. tp-1, each its slices) */
    const int tp = ckpt_tp_size(g), writers = stage == 0 ? tp : world;
    ckpt_file *files = NULL;
    if (rank == 0) {
        if (dt_mkdirs(out_dir, err)) return err->code;
        dt_ckpt_remove(tmp);
        dt_ckpt_remove(old);
        if (mkdir(tmp, 0755) != 0)
            return dt_errorf(err, DT_EIO, "%s: cannot create checkpoint directory: %s", tmp, strerror(errno));
        if (!(files = calloc((size_t)writers + 3, sizeof *files)))
            return dt_errorf(err, DT_ENOMEM, "checkpoint at step %lld: out of memory", step);
        snprintf(files[0].name, sizeof files[0].name, "model.safetensors");
        snprintf(files[1].name, sizeof files[1].name, "config.json");
        snprintf(files[2].name, sizeof files[2].name, "plan.json");
        snprintf(files[3].name, sizeof files[3].name, DT_OPTIM_FILE_FMT, 0, writers);
    }
    if ((rc = dt_comm_barrier(c, err))) {
        free(files);
        return rc;
    }
    if (rank < writers) {
        dt_file_sum sum;
        snprintf(p, sizeof p, "%s/" DT_OPTIM_FILE_FMT, tmp, rank, writers);
        rc = write_optim_shard(p, z, g, st, &sum, err);
        if (!rc && rank == 0) files[3].sum = sum;
        else if (!rc) rc = write_sum_file(tmp, rank, writers, &sum, err);
    }
    if (rc) {
        free(files);
        if (rank == 0) dt_ckpt_remove(tmp);   /* no partial checkpoint stays behind */
        return dt_error_prefix(err, "checkpoint at step %lld", step);
    }
    if ((rc = dt_comm_barrier(c, err))) {
        free(files);
        return rc;
    }
    dt_memprobe_begin(DT_PHASE_EXPORT);
    snprintf(p, sizeof p, "%s/model.safetensors", tmp);
    /* only rank 0 writes, piece by piece (stage 3: one gathered unit at a time,
     * collective; stages 0-2: from the flat buffer, no communication) */
    rc = tp > 1 ? ckpt_tp_weights_save(g, z, prec->param, rank < tp, rank == 0, p, rank == 0 ? &files[0].sum : NULL, err)
                : weights_save_streamed(g, z, prec->param, rank == 0, p, rank == 0 ? &files[0].sum : NULL, err);
    if (rank != 0) dt_memprobe_end(DT_PHASE_EXPORT);
    if (rc && rank != 0) return rc;
    if (rank == 0) {
        if (!rc)
            rc = save_rank0(out_dir, tmp, fin, old, g, m, prec, st, plan_json, world, stage, files, writers + 3, err);
        else
            dt_memprobe_end(DT_PHASE_EXPORT);
        free(files);
        if (rc) {
            dt_ckpt_remove(tmp);
            return dt_error_prefix(err, "checkpoint at step %lld", step);
        }
        prune(out_dir, keep_last, st->run_id);
    }
    if (saved_path) snprintf(saved_path, saved_len, "%s", fin);
    return dt_comm_barrier(c, err);
}

/* ---- reading state.json ---- */

/* An integer in [lo, hi] (JSON true/false read as 1/0). */
static int get_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out, const char *path,
                   dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    double d;
    if (cJSON_IsBool(v)) d = cJSON_IsTrue(v);
    else if (cJSON_IsNumber(v)) d = v->valuedouble;
    else return dt_errorf(err, DT_EINVAL, "%s: missing or non-numeric \"%s\"; " DT_CKPT_DAMAGED, path, key);
    if (!(d >= (double)lo && d <= (double)hi) || d != (double)(int64_t)d)
        return dt_errorf(err, DT_EINVAL, "%s: \"%s\" is %.17g, not an integer in [%lld, %lld]; " DT_CKPT_DAMAGED,
                         path, key, d, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return DT_OK;
}

static int get_int32(const cJSON *o, const char *key, int64_t lo, int *out, const char *path, dt_error *err) {
    int64_t v = 0;
    int rc = get_int(o, key, lo, INT32_MAX, &v, path, err);
    *out = (int)v;
    return rc;
}

/* A finite number > 0. */
static int get_pos(const cJSON *o, const char *key, double *out, const char *path, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble))
        return dt_errorf(err, DT_EINVAL, "%s: \"%s\" must be a finite number > 0; " DT_CKPT_DAMAGED, path, key);
    *out = v->valuedouble;
    return DT_OK;
}

/* hex digits only, 1..max of them */
static int is_hex(const char *s, size_t max) {
    size_t n = strspn(s, "0123456789abcdefABCDEF");
    return n > 0 && n <= max && s[n] == '\0';
}

/* state.json's "files": name -> {"bytes", "crc32c"}; absent in older checkpoints. */
static int parse_files(const cJSON *fl, ckpt_manifest *mf, const char *path, dt_error *err) {
    if (!fl) return DT_OK;
    if (!cJSON_IsObject(fl)) return dt_errorf(err, DT_EINVAL, "%s: \"files\" is not an object; " DT_CKPT_DAMAGED, path);
    int n = cJSON_GetArraySize(fl);
    if (!(mf->files = calloc((size_t)n + 1, sizeof *mf->files)))
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    for (const cJSON *e = fl->child; e; e = e->next) {
        ckpt_file *f = &mf->files[mf->nfiles];
        const cJSON *crc = cJSON_GetObjectItemCaseSensitive(e, "crc32c");
        int64_t bytes = 0;
        if (strlen(e->string) >= sizeof f->name || strchr(e->string, '/') || !is_ckpt_file(e->string) ||
            !cJSON_IsString(crc) || !is_hex(crc->valuestring, 8))
            return dt_errorf(err, DT_EINVAL,
                             "%s: files.\"%s\" is not a checkpoint file with a CRC-32C; " DT_CKPT_DAMAGED, path,
                             e->string);
        if (get_int(e, "bytes", 0, DT_CKPT_MAX_INT, &bytes, path, err)) return err->code;
        snprintf(f->name, sizeof f->name, "%s", e->string);
        f->sum.bytes = (uint64_t)bytes;
        f->sum.crc32c = (uint32_t)strtoul(crc->valuestring, NULL, 16);
        mf->nfiles++;
    }
    return DT_OK;
}

/* The loss scaler's state, checked so that no value can divide by zero or run away. */
static int parse_scaler(const cJSON *l, dt_loss_scaler *s, const char *path, dt_error *err) {
    int64_t v = 0;
    int rc = get_int(l, "dynamic", 0, 1, &v, path, err);
    s->dynamic = (int)v;
    if (!rc) rc = get_pos(l, "cur_scale", &s->cur_scale, path, err);
    if (!rc) rc = get_pos(l, "scale_factor", &s->scale_factor, path, err);
    if (!rc) rc = get_int(l, "scale_window", 1, DT_CKPT_MAX_INT, &s->scale_window, path, err);
    if (!rc) rc = get_pos(l, "min_scale", &s->min_scale, path, err);
    if (!rc) rc = get_int32(l, "delayed_shift", 1, &s->delayed_shift, path, err);
    if (!rc) rc = get_int32(l, "cur_hysteresis", 1, &s->cur_hysteresis, path, err);
    if (!rc) rc = get_int32(l, "consecutive_hysteresis", 0, &s->consecutive_hysteresis, path, err);
    if (!rc) rc = get_int(l, "cur_iter", 0, DT_CKPT_MAX_INT, &s->cur_iter, path, err);
    if (!rc) rc = get_int(l, "last_overflow_iter", -1, s->cur_iter, &s->last_overflow_iter, path, err);
    return rc;
}

/* state.json's data.tokenizer_fingerprint: optional (older checkpoints, data without one). */
static int parse_data_fingerprint(const cJSON *d, dt_train_state *st, const char *path, dt_error *err) {
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(d, "tokenizer_fingerprint");
    if (!fp) return DT_OK;
    if (!cJSON_IsString(fp) || strlen(fp->valuestring) != DT_CKPT_FINGERPRINT_HEX ||
        !is_hex(fp->valuestring, DT_CKPT_FINGERPRINT_HEX))
        return dt_errorf(err, DT_EINVAL, "%s: malformed data.tokenizer_fingerprint; " DT_CKPT_DAMAGED, path);
    snprintf(st->data_fingerprint, sizeof st->data_fingerprint, "%s", fp->valuestring);
    return DT_OK;
}

/* state.json, validated on its own and against the plan (precision, parameter
 * count, step counters that add up). mf receives the file sums, world and stage. */
static int parse_state(const char *path, dt_train_state *st, const dt_precision *prec, size_t nparams,
                       ckpt_manifest *mf, dt_error *err) {
    char *txt;
    if (dt_json_read_file(path, &txt, NULL, err)) return err->code;
    cJSON *c;
    int rc = dt_json_parse(txt, path, &c, err);
    free(txt);
    if (rc) return rc;
    memset(st, 0, sizeof *st);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(c, "format");
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(c, "precision");
    const cJSON *rng = cJSON_GetObjectItemCaseSensitive(c, "rng");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(c, "data");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(c, "loss_scaler");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "run_id");
    int64_t np = 0;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, DT_CKPT_FORMAT) != 0) {
        rc = dt_errorf(err, DT_EINVAL, "%s: not a %s checkpoint state", path, DT_CKPT_FORMAT);
    } else if (!cJSON_IsString(pr) || strcmp(pr->valuestring, dt_precision_preset_name(prec->preset)) != 0) {
        rc = dt_errorf(err, DT_EINVAL, "%s: checkpoint precision %s differs from the plan's %s", path,
                       cJSON_IsString(pr) ? pr->valuestring : "?", dt_precision_preset_name(prec->preset));
    } else if (!cJSON_IsString(rng) || !is_hex(rng->valuestring, 16) || !cJSON_IsObject(d) || !cJSON_IsObject(l)) {
        rc = dt_errorf(err, DT_EINVAL, "%s: missing or malformed rng, data or loss_scaler; " DT_CKPT_DAMAGED, path);
    } else if (id && (!cJSON_IsString(id) || strlen(id->valuestring) > DT_RUN_ID_LEN)) {
        rc = dt_errorf(err, DT_EINVAL, "%s: malformed run_id; " DT_CKPT_DAMAGED, path);
    }
    if (!rc) rc = get_int(c, "num_params", 0, DT_CKPT_MAX_INT, &np, path, err);
    if (!rc && (size_t)np != nparams)
        rc = dt_errorf(err, DT_EINVAL, "%s: checkpoint has %lld parameters, the model %zu", path, (long long)np,
                       nparams);
    if (!rc) rc = get_int(c, "world_size", 1, DT_CKPT_MAX_WORLD, &mf->world, path, err);
    if (!rc) rc = get_int(c, "zero_stage", 0, 3, &mf->stage, path, err);
    if (!rc && cJSON_GetObjectItemCaseSensitive(c, "optim_files"))
        rc = get_int(c, "optim_files", 1, mf->world, &mf->optim_files, path, err);
    if (!rc) rc = get_int(c, "step", 0, DT_CKPT_MAX_INT, &st->step, path, err);
    if (!rc) rc = get_int(c, "adam_step", 0, st->step, &st->adam_step, path, err);
    if (!rc) rc = get_int(c, "skipped_steps", 0, st->step, &st->skipped_steps, path, err);
    if (!rc && st->adam_step + st->skipped_steps != st->step)
        rc = dt_errorf(err, DT_EINVAL, "%s: step %lld is not adam_step %lld + skipped_steps %lld; " DT_CKPT_DAMAGED,
                       path, (long long)st->step, (long long)st->adam_step, (long long)st->skipped_steps);
    if (!rc) rc = get_int(c, "tokens", 0, DT_CKPT_MAX_INT, &st->tokens, path, err);
    if (!rc) rc = get_int(d, "epoch", 0, DT_CKPT_MAX_INT, &st->data.epoch, path, err);
    if (!rc) rc = get_int(d, "cursor", 0, DT_CKPT_MAX_INT, &st->data.cursor, path, err);
    if (!rc) rc = parse_data_fingerprint(d, st, path, err);
    if (!rc) rc = parse_scaler(l, &st->scaler, path, err);
    /* fp16 runs update the scaler once per step, skipped or not */
    if (!rc && prec->param == DT_DTYPE_FP16 && st->scaler.cur_iter != st->step)
        rc = dt_errorf(err, DT_EINVAL,
                       "%s: the loss scaler is at iteration %lld but the step is %lld; " DT_CKPT_DAMAGED, path,
                       (long long)st->scaler.cur_iter, (long long)st->step);
    if (!rc) rc = parse_files(cJSON_GetObjectItemCaseSensitive(c, "files"), mf, path, err);
    if (!rc) {
        st->rng = strtoull(rng->valuestring, NULL, 16);
        if (cJSON_IsString(id)) snprintf(st->run_id, sizeof st->run_id, "%s", id->valuestring);
    }
    cJSON_Delete(c);
    return rc;
}

int dt_ckpt_state_read(const char *path, const dt_precision *prec, size_t nparams, dt_train_state *st,
                       dt_error *err) {
    ckpt_manifest mf;
    memset(&mf, 0, sizeof mf);
    int rc = parse_state(path, st, prec, nparams, &mf, err);
    free(mf.files);
    return rc;
}

/* ---- verifying and loading a checkpoint ---- */

static const ckpt_file *manifest_find(const ckpt_manifest *mf, const char *name) {
    for (int i = 0; i < mf->nfiles; i++)
        if (strcmp(mf->files[i].name, name) == 0) return &mf->files[i];
    return NULL;
}

/* DIR/NAME against the size and CRC-32C state.json records (older checkpoints without sums: nothing to check). */
static int verify_file(const char *dir, const char *name, const ckpt_manifest *mf, dt_error *err) {
    if (!mf->files) return DT_OK;
    char p[DT_PATH_MAX * 3];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    const ckpt_file *f = manifest_find(mf, name);
    if (!f)
        return dt_errorf(err, DT_EINVAL,
                         "%s: not among the files the checkpoint's state.json records; " DT_CKPT_DAMAGED, p);
    dt_file_sum s;
    if (dt_file_sum_compute(p, "checkpoint file", &s, err)) return err->code;
    if (s.bytes != f->sum.bytes || s.crc32c != f->sum.crc32c)
        return dt_errorf(err, DT_EINVAL,
                         "%s: checksum mismatch: state.json records %llu bytes with CRC-32C %08x, the file has "
                         "%llu bytes with CRC-32C %08x; " DT_CKPT_DAMAGED,
                         p, (unsigned long long)f->sum.bytes, (unsigned)f->sum.crc32c, (unsigned long long)s.bytes,
                         (unsigned)s.crc32c);
    return DT_OK;
}

/* The checkpoint's model (config.json) must be the plan's: a 4-head checkpoint
 * has the parameter count of an 8-head plan but is another model. */
static int check_model(const char *dir, const dt_model *m, dt_error *err) {
    if (dt_hf_check_config(dir, m, "the checkpoint", err))
        return dt_error_suffix(err, ": resume with the plan that wrote it (%s/plan.json) or start afresh with another --out",
                               dir);
    return DT_OK;
}

/* Flat element ranges [begin, begin + count) the optimizer shards hold. */
typedef struct {
    size_t begin, count;
} flat_range;

typedef struct {
    flat_range *r;
    size_t n, cap;
} range_list;

static int range_add(range_list *l, size_t begin, size_t count) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        flat_range *nr = realloc(l->r, cap * sizeof *nr);
        if (!nr) return -1;
        l->r = nr;
        l->cap = cap;
    }
    l->r[l->n].begin = begin;
    l->r[l->n++].count = count;
    return 0;
}

static int by_range_begin(const void *a, const void *b) {
    const flat_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* "flat_begin:count,..." into ranges, each inside [0, nparams); *total: their elements. */
static int parse_ranges(const char *rt, size_t nparams, range_list *out, size_t *total, const char *path,
                        dt_error *err) {
    const char *q = rt;
    *total = 0;
    while (*q) {
        char *end;
        if (*q < '0' || *q > '9') break;
        unsigned long long fb = strtoull(q, &end, 10), cnt = 0;
        if (*end != ':' || end[1] < '0' || end[1] > '9') break;
        cnt = strtoull(end + 1, &end, 10);
        if (fb > nparams || cnt > nparams - fb)
            return dt_errorf(err, DT_EINVAL, "%s: optimizer range %llu:%llu lies outside the model's %zu parameters; "
                             DT_CKPT_DAMAGED, path, fb, cnt, nparams);
        if (range_add(out, (size_t)fb, (size_t)cnt)) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
        *total += (size_t)cnt;
        if (*end == '\0') return DT_OK;
        if (*end != ',') break;
        q = end + 1;
    }
    return dt_errorf(err, DT_EINVAL, "%s: malformed \"ranges\" metadata; " DT_CKPT_DAMAGED, path);
}

static int by_zero_begin(const void *a, const void *b) {
    const dt_zero_range *x = a, *y = b;
    return x->flat_begin < y->flat_begin ? -1 : x->flat_begin > y->flat_begin;
}

/* The first of this rank's ranges (sorted by flat_begin, disjoint) that ends after flat
 * element fb: a binary search, so a file's ranges meet this rank's in O(log n) each (a
 * tensor-parallel rank's ranges are one per row segment of its split tensors). */
static int first_meeting(const dt_zero_range *mine, int nmine, size_t fb) {
    int lo = 0, hi = nmine;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (mine[mid].flat_begin + mine[mid].count <= fb) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Copies the elements of one shard file (DIR/NAME) that fall in this rank's
 * ranges, after checking its ranges, sizes and step; the file's ranges are
 * added to cover. A file this rank reads from is verified against its sum. */
static int load_optim_shard(const char *dir, const char *name, dt_zero *z, const dt_zero_range *mine, int nmine,
                            const dt_train_state *st, const ckpt_manifest *mf, size_t nparams, range_list *cover,
                            dt_error *err) {
    char path[DT_PATH_MAX * 3];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    dt_st_file *f;
    if (dt_st_open(path, &f, err)) {
        dt_error e2;   /* a damaged file: say so when its sum disagrees */
        dt_error_clear(&e2);
        if (verify_file(dir, name, mf, &e2)) *err = e2;
        return err->code;
    }
    const char *rt = dt_st_metadata(f, "ranges"), *sstep = dt_st_metadata(f, "step");
    char single[64];
    const char *sb = dt_st_metadata(f, "shard_begin"), *sn = dt_st_metadata(f, "shard_numel");
    if (!rt && sb && sn) {   /* a single-rank checkpoint of an earlier version: one range */
        snprintf(single, sizeof single, "%s:%s", sb, sn);
        rt = single;
    }
    const dt_dtype dts[3] = {DT_DTYPE_FP32, dt_zero_moment_dtype(z), dt_zero_moment_dtype(z)};
    const char *names[3] = {"master", "exp_avg", "exp_avg_sq"};
    const char *src[3] = {NULL, NULL, NULL};
    size_t total = 0, first = cover->n;
    int rc = DT_OK;
    if (!rt) rc = dt_errorf(err, DT_EINVAL, "%s: no \"ranges\" metadata (not a sharded optimizer file)", path);
    else rc = parse_ranges(rt, nparams, cover, &total, path, err);
    if (!rc && sstep && strtoll(sstep, NULL, 10) != st->step)
        rc = dt_errorf(err, DT_EINVAL, "%s: optimizer state of step %s in a checkpoint of step %lld; " DT_CKPT_DAMAGED,
                       path, sstep, (long long)st->step);
    for (int k = 0; k < 3 && !rc; k++) {
        if (k == 0 && !dt_zero_has_master(z)) continue;
        const dt_st_tensor *t = dt_st_find(f, names[k]);
        if (!t || strcmp(t->dtype, dt_st_dtype_name(dts[k])) != 0 || dt_st_numel(t) != total)
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" missing or not %zu x %s (its ranges' elements)", path,
                           names[k], total, dt_st_dtype_name(dts[k]));
        else src[k] = dt_st_data(f, t);
    }
    /* this rank's share of the file: [a, e) of each range that meets one of its own */
    int reads = 0;
    for (size_t i = first; i < cover->n && !rc && !reads; i++) {
        const int j = first_meeting(mine, nmine, cover->r[i].begin);
        reads = j < nmine && mine[j].flat_begin < cover->r[i].begin + cover->r[i].count;
    }
    if (!rc && reads) rc = verify_file(dir, name, mf, err);
    size_t pos = 0;
    for (size_t i = first; i < cover->n && !rc && reads; i++) {
        size_t fb = cover->r[i].begin, cnt = cover->r[i].count;
        for (int j = first_meeting(mine, nmine, fb); j < nmine && mine[j].flat_begin < fb + cnt && !rc; j++) {
            dt_zero_range r = mine[j];
            size_t a = fb > r.flat_begin ? fb : r.flat_begin;
            size_t e = fb + cnt < r.flat_begin + r.count ? fb + cnt : r.flat_begin + r.count;
            for (int k = 0; k < 3 && a < e && !rc; k++) {
                if (!src[k]) continue;
                /* a bounded piece at a time, its mapped pages released after it */
                const size_t es = (size_t)dt_dtype_size(dts[k]), E = chunk_elems(es);
                for (size_t c = a; c < e && !rc; c += E) {
                    const size_t cnt = min_sz(E, e - c);
                    const char *from = src[k] + (pos + (c - fb)) * es;
                    rc = dt_zero_state_write(z, k, r.state_begin + (c - r.flat_begin), cnt, from, err);
                    dt_map_release(from, cnt * es);
                }
            }
        }
        pos += cnt;
    }
    dt_st_close(f);
    return rc;
}

/* The shards' ranges must tile [0, nparams) exactly: no element missing or twice. */
static int check_cover(range_list *cover, size_t nparams, const char *dir, dt_error *err) {
    if (cover->n > 1) qsort(cover->r, cover->n, sizeof *cover->r, by_range_begin);
    size_t at = 0;
    for (size_t i = 0; i < cover->n; i++) {
        if (cover->r[i].count == 0) continue;
        if (cover->r[i].begin != at)
            return dt_errorf(err, DT_EINVAL, "%s: the optimizer shards %s elements from %zu on; " DT_CKPT_DAMAGED, dir,
                             cover->r[i].begin > at ? "miss the" : "hold twice the",
                             cover->r[i].begin > at ? at : cover->r[i].begin);
        at += cover->r[i].count;
    }
    if (at != nparams)
        return dt_errorf(err, DT_EINVAL,
                         "%s: the optimizer shards hold %zu of the model's %zu elements; " DT_CKPT_DAMAGED, dir, at,
                         nparams);
    return DT_OK;
}

/* The optimizer files of the checkpoint: "optim-R-of-W" with one W, every R of
 * [0, W) once, W the writers state.json implies (1 at stage 0), all in its sums. */
static int list_optim_files(const char *dir, const ckpt_manifest *mf, char (**names)[DT_CKPT_NAME_MAX], int *n_out,
                            dt_error *err) {
    const int64_t writers = mf->optim_files ? mf->optim_files : mf->stage == 0 ? 1 : mf->world;
    char(*nm)[DT_CKPT_NAME_MAX] = calloc((size_t)writers, sizeof *nm);
    if (!nm) return dt_errorf(err, DT_ENOMEM, "%s: out of memory", dir);
    *names = nm;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return dt_errorf(err, DT_EIO, "%s: cannot list: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = DT_OK;
    while (!rc && (e = readdir(d))) {
        int rk, wd, end = 0;
        if (sscanf(e->d_name, "optim-%5d-of-%5d.safetensors%n", &rk, &wd, &end) != 2 || e->d_name[end] || !end)
            continue;
        if (wd != writers || rk < 0 || rk >= wd || nm[rk][0])
            rc = dt_errorf(err, DT_EINVAL, "%s/%s: state.json (world %lld, stage %lld) implies %lld optimizer file(s); "
                           DT_CKPT_DAMAGED, dir, e->d_name, (long long)mf->world, (long long)mf->stage,
                           (long long)writers);
        else {
            snprintf(nm[rk], sizeof nm[rk], "%.63s", e->d_name);
            (*n_out)++;
        }
    }
    closedir(d);
    if (!rc && *n_out != writers)
        rc = dt_errorf(err, DT_EINVAL, "%s: %d optimizer shard file(s), state.json (world %lld, stage %lld) implies "
                       "%lld; " DT_CKPT_DAMAGED, dir, *n_out, (long long)mf->world, (long long)mf->stage,
                       (long long)writers);
    int recorded = 0;   /* every recorded shard is one of those present (each is verified against its sum) */
    for (int i = 0; i < mf->nfiles; i++) recorded += strncmp(mf->files[i].name, "optim-", 6) == 0;
    if (!rc && mf->files && recorded != writers)
        rc = dt_errorf(err, DT_EINVAL, "%s: state.json records %d optimizer file(s), the directory holds %lld; "
                       DT_CKPT_DAMAGED, dir, recorded, (long long)writers);
    return rc;
}

/* Everything state.json records that is not an optimizer shard (the weights,
 * config.json, plan.json), verified; a recorded file that is missing fails too. */
static int verify_others(const char *dir, const ckpt_manifest *mf, dt_error *err) {
    int rc = DT_OK;
    if (mf->files && (!manifest_find(mf, "model.safetensors") || !manifest_find(mf, "config.json")))
        return dt_errorf(err, DT_EINVAL,
                         "%s/state.json: no sums for model.safetensors and config.json; " DT_CKPT_DAMAGED, dir);
    for (int i = 0; i < mf->nfiles && !rc; i++)
        if (strncmp(mf->files[i].name, "optim-", 6) != 0) rc = verify_file(dir, mf->files[i].name, mf, err);
    return rc;
}

int dt_ckpt_load_zero(const char *ckpt_dir, dt_lm *g, const dt_model *m, const dt_precision *prec, dt_zero *z,
                      dt_train_state *st, int64_t *saved_world, dt_error *err) {
    char p[DT_PATH_MAX * 3];
    const size_t nparams = ckpt_tp_params(g);   /* the whole model's, whatever the TP degree */
    ckpt_manifest mf = {0};
    const char *base = strrchr(ckpt_dir, '/');
    base = base ? base + 1 : ckpt_dir;
    int64_t dir_step;
    snprintf(p, sizeof p, "%s/state.json", ckpt_dir);
    int rc = parse_state(p, st, prec, nparams, &mf, err);
    if (!rc && ckpt_step_of(base, &dir_step) && dir_step != st->step)
        rc = dt_errorf(err, DT_EINVAL, "%s: state.json is at step %lld; " DT_CKPT_DAMAGED, ckpt_dir,
                       (long long)st->step);
    if (!rc) rc = verify_others(ckpt_dir, &mf, err);
    if (!rc) rc = check_model(ckpt_dir, m, err);
    /* the weights: stage 3 reads only this rank's shard of each unit (no rank
     * holds the whole model), stages 0-2 the full parameters into the flat
     * buffer they keep; either way straight from the mapped file */
    snprintf(p, sizeof p, "%s/model.safetensors", ckpt_dir);
    dt_hf_src *src = NULL;
    if (!rc && ckpt_tp_size(g) > 1) rc = ckpt_tp_weights_load(z, g, prec->param, p, err);
    else if (!rc) rc = dt_hf_src_open_file(g, p, &src, err);
    if (!rc && src) {
        weights_src ws = {.hf = src, .pdt = prec->param};
        rc = dt_zero_load_params(z, wsrc_read, &ws, err);
    }
    dt_hf_src_close(src);
    /* every optimizer file of the saved world: resharding to this world/stage */
    char(*names)[DT_CKPT_NAME_MAX] = NULL;
    int nfiles = 0;
    range_list cover = {0};
    dt_zero_range *mine = NULL;   /* this rank's ranges in the whole model's layout */
    int nmine = 0;
    if (!rc) rc = ckpt_tp_ranges(z, g, 0, &mine, &nmine, err);
    /* for first_meeting: the empty ones dropped (a rank past a unit's end holds none), sorted */
    int kept = 0;
    for (int i = 0; i < nmine; i++)
        if (mine[i].count) mine[kept++] = mine[i];
    nmine = kept;
    if (!rc && nmine > 1) qsort(mine, (size_t)nmine, sizeof *mine, by_zero_begin);
    if (!rc) rc = list_optim_files(ckpt_dir, &mf, &names, &nfiles, err);
    for (int i = 0; i < nfiles && !rc; i++)
        rc = load_optim_shard(ckpt_dir, names[i], z, mine, nmine, st, &mf, nparams, &cover, err);
    free(mine);
    if (!rc) rc = check_cover(&cover, nparams, ckpt_dir, err);
    if (saved_world) *saved_world = nfiles;
    free(cover.r);
    free(names);
    free(mf.files);
    return rc;
}
