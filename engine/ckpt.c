/* ckpt.c — see dt_ckpt.h. */
#include "dt_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_json.h"
#include "dt_safetensors.h"

#define DT_HF_PREFIX "transformer."
/* llm.c model checkpoint header (llmc-lessons.md §4.1, §8.2) */
#define DT_LLMC_MAGIC 20240326
#define DT_LLMC_V_FP32 3
#define DT_LLMC_V_BF16 5
#define DT_LLMC_HEADER_INTS 256
#define DT_GPT2_FFN_MULT 4           /* GPT-2's MLP width is 4C */
#define DT_CKPT_STEP_DIGITS 8

/* ---- small helpers ---- */

static const dt_tensor_info *find_tensor(const dt_gpt2 *g, const char *name) {
    for (int i = 0; i < dt_gpt2_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_gpt2_tensor(g, i);
        if (strcmp(t->name, name) == 0) return t;
    }
    return NULL;
}

int dt_mkdirs(const char *dir, dt_error *err) {
    char buf[DT_PATH_MAX * 2];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return dt_errorf(err, DT_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return dt_errorf(err, DT_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
    return DT_OK;
}

/* Removes a directory of plain files (checkpoints are flat). */
static void rm_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[DT_PATH_MAX * 2];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* Converts n elements into dst (dtype dt) from possibly unaligned src. */
static void convert_in(void *dst, dt_dtype dt, const void *src, dt_dtype st, size_t n) {
    size_t es = (size_t)dt_dtype_size(st);
    if (((uintptr_t)src % es) == 0) {
        dt_convert(dst, dt, src, st, n);
        return;
    }
    void *tmp = malloc(n * es);
    memcpy(tmp, src, n * es);
    dt_convert(dst, dt, tmp, st, n);
    free(tmp);
}

static char *pelem(void *base, dt_dtype dt, size_t off) {
    return (char *)base + off * (size_t)dt_dtype_size(dt);
}

/* ---- weights: safetensors ---- */

/* a model whose flat parameters a ZeRO-3 engine released (dt_gpt2_release_flat) */
static int require_flat(dt_gpt2 *g, const char *path, dt_error *err) {
    if (dt_gpt2_params(g)) return DT_OK;
    return dt_errorf(err, DT_EINVAL,
                     "%s: the model's flat parameters are released (ZeRO stage 3); "
                     "consolidate them first (dt_zero_consolidate_params)", path);
}

/* ---- the flat parameters on the host ----
 * On the CPU device the model's flat buffer is host memory and the files read
 * and write it in place. On a device the host cannot address (CUDA) a weights
 * file goes through one transient host copy of the flat parameters (host pool:
 * pinned), copied from the device before a save and to it after a load. */

/* A host view of g's flat parameters (pdt): the buffer itself, or a transient
 * copy holding the device's values when fill is set. NULL when out of memory. */
static void *params_host(dt_gpt2 *g, dt_dtype pdt, int fill, const char *path, dt_error *err) {
    const dt_device_ops *dev = dt_gpt2_device_ops(g);
    void *flat = dt_gpt2_params(g);
    if (dev->host_addressable) return flat;
    size_t bytes = dt_gpt2_num_params(g) * (size_t)dt_dtype_size(pdt);
    void *h = dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, bytes);
    if (!h) {
        dt_errorf(err, DT_ENOMEM, "%s: cannot allocate %zu bytes of host memory for the weights", path, bytes);
        return NULL;
    }
    if (fill) {
        dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_D2H);
        dev->memcpy(h, flat, bytes, DT_COPY_D2H, DT_STREAM_D2H);
        dev->stream_sync(DT_STREAM_D2H);
        /* an asynchronous device error (the copy or earlier work) would leave h stale */
        if (dev->synchronize(err)) {
            dt_error_prefix(err, "%s: ", path);
            dev->free(h);
            return NULL;
        }
    }
    return h;
}

/* Ends params_host: a loaded copy goes to the device (store set), then is freed. */
static int params_host_done(dt_gpt2 *g, dt_dtype pdt, void *h, int store, dt_error *err) {
    const dt_device_ops *dev = dt_gpt2_device_ops(g);
    if (!h || dev->host_addressable) return DT_OK;
    int rc = DT_OK;
    if (store) {
        size_t bytes = dt_gpt2_num_params(g) * (size_t)dt_dtype_size(pdt);
        dev->memcpy(dt_gpt2_params(g), h, bytes, DT_COPY_H2D, DT_STREAM_H2D);
        dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
        dev->stream_sync(DT_STREAM_H2D);
        rc = dev->synchronize(err);
    }
    dev->free(h);
    return rc;
}

/* Adds every tensor of g to w under its Hugging Face name, data from the flat
 * parameters at base (NULL: layout only, for the streaming writer). */
static int add_weights(dt_st_writer *w, dt_gpt2 *g, dt_dtype pdt, void *base, dt_error *err) {
    int rc = dt_st_writer_meta(w, "format", "pt", err);
    char name[DT_ST_NAME_MAX];
    for (int i = 0; i < dt_gpt2_num_tensors(g) && !rc; i++) {
        const dt_tensor_info *t = dt_gpt2_tensor(g, i);
        snprintf(name, sizeof name, DT_HF_PREFIX "%s", t->name);
        rc = dt_st_writer_add(w, name, dt_st_dtype_name(pdt), t->ndim, t->shape,
                              base ? pelem(base, pdt, t->offset) : NULL, err);
    }
    return rc;
}

int dt_weights_save(dt_gpt2 *g, dt_dtype pdt, const char *path, dt_error *err) {
    if (require_flat(g, path, err)) return err->code;
    void *h = params_host(g, pdt, 1, path, err);
    if (!h) return err->code;
    dt_st_writer *w = dt_st_writer_new();
    int rc = w ? add_weights(w, g, pdt, h, err) : dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    if (!rc) rc = dt_st_write(w, path, err);
    dt_st_writer_free(w);
    params_host_done(g, pdt, h, 0, NULL);
    return rc;
}

/* ---- weights streamed unit by unit (ZeRO stage 3) ---- */

typedef struct {
    dt_gpt2 *g;
    dt_st_stream *s;
    dt_dtype pdt;
} unit_sink;

/* dt_zero_unit_fn: writes the tensors of one gathered unit at their offsets */
static int put_unit(void *ctx, int unit, size_t flat_off, size_t n, const void *params, dt_error *err) {
    unit_sink *k = ctx;
    const size_t esz = (size_t)dt_dtype_size(k->pdt);
    char name[DT_ST_NAME_MAX];
    for (int i = 0; i < dt_gpt2_num_tensors(k->g); i++) {
        const dt_tensor_info *t = dt_gpt2_tensor(k->g, i);
        if (t->group != unit) continue;
        if (t->offset < flat_off || t->offset + t->numel > flat_off + n)
            return dt_errorf(err, DT_ERUNTIME, "weights: tensor %s lies outside its unit %d", t->name, unit);
        snprintf(name, sizeof name, DT_HF_PREFIX "%s", t->name);
        int rc = dt_st_stream_put(k->s, name, 0, (const char *)params + (t->offset - flat_off) * esz,
                                  t->numel * esz, err);
        if (rc) return rc;
    }
    return DT_OK;
}

/* Every rank calls it (stage 3's gathers are collective); write != 0 on the
 * rank that writes path. The file is byte-identical to dt_weights_save's: the
 * same layout, header first, then each unit's tensors as the unit is gathered,
 * so no rank holds the full weights (docs/zero.md "Flat buffers"). */
static int weights_save_streamed(dt_gpt2 *g, dt_zero *z, dt_dtype pdt, int write, const char *path,
                                 dt_error *err) {
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
    if (k.s && rc) dt_st_stream_abort(k.s);
    else if (k.s) rc = dt_st_stream_close(k.s, err);
    dt_st_writer_free(w);
    return rc;
}

/* into params: host memory of g's flat layout (params_host) */
static int load_safetensors_into(dt_gpt2 *g, dt_dtype pdt, const char *path, void *params, dt_error *err) {
    dt_st_file *f;
    if (dt_st_open(path, &f, err)) return err->code;
    int rc = DT_OK;
    char name[DT_ST_NAME_MAX];
    for (int i = 0; i < dt_gpt2_num_tensors(g) && !rc; i++) {
        const dt_tensor_info *t = dt_gpt2_tensor(g, i);
        snprintf(name, sizeof name, DT_HF_PREFIX "%s", t->name);
        const dt_st_tensor *s = dt_st_find(f, name);
        if (!s) s = dt_st_find(f, t->name);
        if (!s) {
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" (or \"%s\") is missing", path, name, t->name);
            break;
        }
        dt_dtype sdt;
        if (dt_st_dtype_parse(s->dtype, &sdt)) {
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" has dtype %s (F32, BF16 or F16 expected)",
                           path, s->name, s->dtype);
            break;
        }
        int same = s->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
        if (!same) {
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" has shape [%lld%s%lld] but the model needs [%lld%s%lld]",
                           path, s->name, (long long)s->shape[0], s->ndim > 1 ? ", " : "",
                           s->ndim > 1 ? (long long)s->shape[1] : 0LL, (long long)t->shape[0],
                           t->ndim > 1 ? ", " : "", t->ndim > 1 ? (long long)t->shape[1] : 0LL);
            break;
        }
        convert_in(pelem(params, pdt, t->offset), pdt, dt_st_data(f, s), sdt, t->numel);
    }
    dt_st_close(f);
    return rc;
}

static int load_safetensors(dt_gpt2 *g, dt_dtype pdt, const char *path, dt_error *err) {
    if (require_flat(g, path, err)) return err->code;
    void *h = params_host(g, pdt, 0, path, err);
    if (!h) return err->code;
    int rc = load_safetensors_into(g, pdt, path, h, err);
    int rc2 = params_host_done(g, pdt, h, rc == DT_OK, rc ? NULL : err);
    return rc ? rc : rc2;
}

/* ---- weights: llm.c .bin ---- */

/* dst[in, out] (Conv1D) = src[out, in]^T (Linear); both fp32. */
static void transpose(float *dst, const float *src, int64_t out, int64_t in) {
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) dst[i * out + o] = src[o * in + i];
}

static int load_llmc(dt_gpt2 *g, const dt_model *m, dt_dtype pdt, const char *path, void *params,
                     dt_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return dt_errorf(err, DT_EINVAL, "%s: cannot open: %s", path, strerror(errno));
    int32_t h[DT_LLMC_HEADER_INTS];
    if (fread(h, sizeof h, 1, f) != 1) {
        fclose(f);
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
    if (rc) {
        fclose(f);
        return rc;
    }
    /* sizes in llm.c order (llmc-lessons.md §8.2) */
    const int64_t sizes[16] = {Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
                               L * C * C, L * C, L * C, L * C, L * 4 * C * C, L * 4 * C,
                               L * C * 4 * C, L * C, C, C};
    int64_t total = 0;
    for (int i = 0; i < 16; i++) total += sizes[i];
    dt_dtype sdt = h[1] == DT_LLMC_V_FP32 ? DT_DTYPE_FP32 : DT_DTYPE_BF16;
    size_t es = (size_t)dt_dtype_size(sdt);
    void *raw = malloc((size_t)total * es);
    float *all = malloc((size_t)total * sizeof(float));
    size_t got = fread(raw, es, (size_t)total, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != (size_t)total || extra) {
        free(raw);
        free(all);
        return dt_errorf(err, DT_EINVAL,
                         "%s: llm.c checkpoint holds %zu values after the header, the header implies "
                         "%lld (truncated or wrong sizes)",
                         path, got + (size_t)extra, (long long)total);
    }
    dt_convert(all, DT_DTYPE_FP32, raw, sdt, (size_t)total);
    free(raw);
    const float *p[16];
    p[0] = all;
    for (int i = 1; i < 16; i++) p[i] = p[i - 1] + sizes[i - 1];
    float *tmp = malloc((size_t)(4 * C * C > Vp * C ? 4 * C * C : V * C) * sizeof(float) + 64);
    char name[128];
    struct { const char *suffix; int src; int64_t rows, cols; int tr; } per_layer[] = {
        {"ln_1.weight", 2, 1, C, 0},       {"ln_1.bias", 3, 1, C, 0},
        {"attn.c_attn.weight", 4, 3 * C, C, 1}, {"attn.c_attn.bias", 5, 1, 3 * C, 0},
        {"attn.c_proj.weight", 6, C, C, 1}, {"attn.c_proj.bias", 7, 1, C, 0},
        {"ln_2.weight", 8, 1, C, 0},       {"ln_2.bias", 9, 1, C, 0},
        {"mlp.c_fc.weight", 10, 4 * C, C, 1}, {"mlp.c_fc.bias", 11, 1, 4 * C, 0},
        {"mlp.c_proj.weight", 12, C, 4 * C, 1}, {"mlp.c_proj.bias", 13, 1, C, 0}};
    /* wte: first V of Vp rows; wpe; ln_f */
    struct { const char *name; const float *src; int64_t n; } whole[] = {
        {"wte.weight", p[0], V * C}, {"wpe.weight", p[1], maxT * C},
        {"ln_f.weight", p[14], C},   {"ln_f.bias", p[15], C}};
    for (size_t i = 0; i < sizeof whole / sizeof whole[0] && !rc; i++) {
        const dt_tensor_info *t = find_tensor(g, whole[i].name);
        if (!t || (int64_t)t->numel != whole[i].n) {
            rc = dt_errorf(err, DT_EINTERNAL, "model has no tensor %s of %lld elements", whole[i].name,
                           (long long)whole[i].n);
            break;
        }
        dt_convert(pelem(params, pdt, t->offset), pdt, whole[i].src, DT_DTYPE_FP32, t->numel);
    }
    for (int64_t l = 0; l < L && !rc; l++) {
        for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0] && !rc; k++) {
            snprintf(name, sizeof name, "h.%lld.%s", (long long)l, per_layer[k].suffix);
            const dt_tensor_info *t = find_tensor(g, name);
            int64_t n = per_layer[k].rows * per_layer[k].cols;
            if (!t || (int64_t)t->numel != n) {
                rc = dt_errorf(err, DT_EINTERNAL, "model has no tensor %s of %lld elements", name, (long long)n);
                break;
            }
            const float *src = p[per_layer[k].src] + l * n;
            if (per_layer[k].tr) {
                transpose(tmp, src, per_layer[k].rows, per_layer[k].cols);
                src = tmp;
            }
            dt_convert(pelem(params, pdt, t->offset), pdt, src, DT_DTYPE_FP32, t->numel);
        }
    }
    free(tmp);
    free(all);
    return rc;
}

int dt_weights_load(dt_gpt2 *g, const dt_model *m, dt_dtype pdt, const char *path, dt_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return dt_errorf(err, DT_EINVAL, "%s: cannot open init weights: %s", path, strerror(errno));
    int32_t magic = 0;
    size_t got = fread(&magic, sizeof magic, 1, f);
    fclose(f);
    if (require_flat(g, path, err)) return err->code;
    void *h = params_host(g, pdt, 0, path, err);
    if (!h) return err->code;
    int rc = got == 1 && magic == DT_LLMC_MAGIC ? load_llmc(g, m, pdt, path, h, err)
                                                : load_safetensors_into(g, pdt, path, h, err);
    int rc2 = params_host_done(g, pdt, h, rc == DT_OK, rc ? NULL : err);
    return rc ? rc : rc2;
}

/* ---- HF config.json ---- */

/* GPT-2's <|endoftext|> id in its 50257-token BPE vocabulary (HF GPT2Config). */
#define DT_GPT2_EOT_TOKEN 50256

int dt_hf_config_write(const dt_model *m, const char *path, dt_error *err) {
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(c, "model_type", "gpt2");
    /* GPT-2's tanh-approximated GELU, what the engine computes */
    cJSON_AddStringToObject(c, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(c, "vocab_size", (double)m->vocab);
    cJSON_AddNumberToObject(c, "n_positions", (double)m->max_pos);
    cJSON_AddNumberToObject(c, "n_ctx", (double)m->max_pos);
    cJSON_AddNumberToObject(c, "n_embd", (double)m->hidden);
    cJSON_AddNumberToObject(c, "n_layer", (double)m->n_layer);
    cJSON_AddNumberToObject(c, "n_head", (double)m->n_head);
    cJSON_AddNumberToObject(c, "n_inner", (double)m->ffn);
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", m->norm_eps);
    cJSON_AddNumberToObject(c, "attn_pdrop", 0.0);
    cJSON_AddNumberToObject(c, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(c, "resid_pdrop", 0.0);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 1);
    /* GPT2Config defaults both to 50256 (<|endoftext|>); a smaller vocabulary (the
     * byte tokenizer's 256) has no such token, so say so instead of inheriting it. */
    if (m->vocab > DT_GPT2_EOT_TOKEN) {
        cJSON_AddNumberToObject(c, "bos_token_id", DT_GPT2_EOT_TOKEN);
        cJSON_AddNumberToObject(c, "eos_token_id", DT_GPT2_EOT_TOKEN);
    } else {
        cJSON_AddNullToObject(c, "bos_token_id");
        cJSON_AddNullToObject(c, "eos_token_id");
    }
    char *txt = dt_json_print(c);
    cJSON_Delete(c);
    if (!txt) return dt_errorf(err, DT_ENOMEM, "config.json: out of memory");
    int rc = dt_write_file_atomic(path, txt, strlen(txt), err);
    free(txt);
    return rc;
}

/* ---- checkpoints ---- */

#define DT_OPTIM_FILE_FMT "optim-%05d-of-%05d.safetensors"

static int write_optim(const char *path, dt_optim *o, dt_error *err) {
    dt_st_writer *w = dt_st_writer_new();
    int64_t n = (int64_t)dt_optim_numel(o);
    const char *mdt = dt_st_dtype_name(dt_optim_moment_dtype(o));
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)n);
    int rc = dt_st_writer_meta(w, "shard_begin", "0", err);
    if (!rc) rc = dt_st_writer_meta(w, "shard_numel", num, err);
    if (!rc) rc = dt_st_writer_meta(w, "total_numel", num, err);
    if (!rc) rc = dt_st_writer_add(w, "exp_avg", mdt, 1, &n, dt_optim_m(o), err);
    if (!rc) rc = dt_st_writer_add(w, "exp_avg_sq", mdt, 1, &n, dt_optim_v(o), err);
    if (!rc && dt_optim_has_master(o)) rc = dt_st_writer_add(w, "master", "F32", 1, &n, dt_optim_master(o), err);
    if (!rc) rc = dt_st_write(w, path, err);
    dt_st_writer_free(w);
    return rc;
}

static char *state_json(const dt_train_state *st, const dt_precision *prec, size_t nparams, int world,
                        int stage) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "format", DT_CKPT_FORMAT);
    cJSON_AddNumberToObject(c, "step", (double)st->step);
    cJSON_AddNumberToObject(c, "adam_step", (double)st->adam_step);
    cJSON_AddNumberToObject(c, "skipped_steps", (double)st->skipped_steps);
    cJSON_AddNumberToObject(c, "tokens", (double)st->tokens);
    cJSON_AddNumberToObject(c, "world_size", world);
    cJSON_AddNumberToObject(c, "zero_stage", stage);
    cJSON_AddNumberToObject(c, "num_params", (double)nparams);
    cJSON_AddStringToObject(c, "precision", dt_precision_preset_name(prec->preset));
    cJSON_AddStringToObject(c, "param_dtype", dt_dtype_name(prec->param));
    char hex[32];
    snprintf(hex, sizeof hex, "%016" PRIx64, st->rng);
    cJSON_AddStringToObject(c, "rng", hex);
    cJSON *d = cJSON_AddObjectToObject(c, "data");
    cJSON_AddNumberToObject(d, "epoch", (double)st->data.epoch);
    cJSON_AddNumberToObject(d, "cursor", (double)st->data.cursor);
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
    char *txt = dt_json_print(c);
    cJSON_Delete(c);
    return txt;
}

static int prune(const char *out_dir, int64_t keep_last) {
    DIR *d = opendir(out_dir);
    if (!d) return 0;
    int64_t steps[4096];
    int n = 0;
    struct dirent *e;
    size_t pl = strlen(DT_CKPT_PREFIX);
    while ((e = readdir(d)) && n < (int)(sizeof steps / sizeof steps[0])) {
        char *end;
        if (strncmp(e->d_name, DT_CKPT_PREFIX, pl) != 0) continue;
        long long s = strtoll(e->d_name + pl, &end, 10);
        if (*end || end == e->d_name + pl) continue;
        steps[n++] = s;
    }
    closedir(d);
    /* sort ascending (few entries) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && steps[j - 1] > steps[j]; j--) {
            int64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    char p[DT_PATH_MAX * 2];
    for (int i = 0; i + keep_last < n; i++) {
        snprintf(p, sizeof p, "%s/" DT_CKPT_PREFIX "%0*lld", out_dir, DT_CKPT_STEP_DIGITS, (long long)steps[i]);
        rm_flat_dir(p);
    }
    return 0;
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
    rm_flat_dir(old);
    return rc;
}

int dt_ckpt_save(const char *out_dir, dt_gpt2 *g, const dt_model *m, const dt_precision *prec,
                 dt_optim *o, const dt_train_state *st, const char *plan_json, int64_t keep_last,
                 char *saved_path, size_t saved_len, dt_error *err) {
    if (dt_mkdirs(out_dir, err)) return err->code;
    char tmp[DT_PATH_MAX * 2], fin[DT_PATH_MAX * 2], old[DT_PATH_MAX * 2], p[DT_PATH_MAX * 3];
    long long step = (long long)st->step;
    snprintf(tmp, sizeof tmp, "%s/." DT_CKPT_PREFIX "%0*lld.tmp", out_dir, DT_CKPT_STEP_DIGITS, step);
    snprintf(fin, sizeof fin, "%s/" DT_CKPT_PREFIX "%0*lld", out_dir, DT_CKPT_STEP_DIGITS, step);
    snprintf(old, sizeof old, "%s/." DT_CKPT_PREFIX "%0*lld.old", out_dir, DT_CKPT_STEP_DIGITS, step);
    rm_flat_dir(tmp);
    rm_flat_dir(old);
    if (mkdir(tmp, 0755) != 0)
        return dt_errorf(err, DT_EIO, "%s: cannot create checkpoint directory: %s", tmp, strerror(errno));
    int rc;
    snprintf(p, sizeof p, "%s/model.safetensors", tmp);
    rc = dt_weights_save(g, prec->param, p, err);
    snprintf(p, sizeof p, "%s/config.json", tmp);
    if (!rc) rc = dt_hf_config_write(m, p, err);
    if (!rc && o) {
        snprintf(p, sizeof p, "%s/" DT_OPTIM_FILE_FMT, tmp, 0, 1);
        rc = write_optim(p, o, err);
    }
    if (!rc && plan_json) {
        snprintf(p, sizeof p, "%s/plan.json", tmp);
        rc = dt_write_file_atomic(p, plan_json, strlen(plan_json), err);
    }
    if (!rc) rc = finish_dir(out_dir, tmp, fin, old, state_json(st, prec, dt_gpt2_num_params(g), 1, 0), err);
    if (rc) {
        rm_flat_dir(tmp);
        return dt_error_prefix(err, "checkpoint at step %lld", step);
    }
    if (saved_path) snprintf(saved_path, saved_len, "%s", fin);
    if (keep_last > 0) prune(out_dir, keep_last);
    return DT_OK;
}

int dt_ckpt_latest(const char *out_dir, char *path, size_t path_len, int64_t *step, dt_error *err) {
    *step = -1;
    DIR *d = opendir(out_dir);
    if (!d) return DT_OK;
    struct dirent *e;
    size_t pl = strlen(DT_CKPT_PREFIX);
    char p[DT_PATH_MAX * 3];
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, DT_CKPT_PREFIX, pl) != 0) continue;
        long long s = strtoll(e->d_name + pl, &end, 10);
        if (*end || end == e->d_name + pl) continue;
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

static int get_i64(const cJSON *o, const char *key, int64_t *out, const char *path, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) && !cJSON_IsBool(v))
        return dt_errorf(err, DT_EINVAL, "%s: missing or non-numeric \"%s\"", path, key);
    *out = cJSON_IsBool(v) ? cJSON_IsTrue(v) : (int64_t)v->valuedouble;
    return DT_OK;
}

static int get_f64(const cJSON *o, const char *key, double *out, const char *path, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return dt_errorf(err, DT_EINVAL, "%s: missing or non-numeric \"%s\"", path, key);
    *out = v->valuedouble;
    return DT_OK;
}

static int parse_state(const char *path, dt_train_state *st, const dt_precision *prec, size_t nparams,
                       dt_error *err) {
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
    int64_t np = 0, world = 0, b = 0;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, DT_CKPT_FORMAT) != 0) {
        rc = dt_errorf(err, DT_EINVAL, "%s: not a %s checkpoint state", path, DT_CKPT_FORMAT);
    } else if (!cJSON_IsString(pr) || strcmp(pr->valuestring, dt_precision_preset_name(prec->preset)) != 0) {
        rc = dt_errorf(err, DT_EINVAL, "%s: checkpoint precision %s differs from the plan's %s", path,
                       cJSON_IsString(pr) ? pr->valuestring : "?", dt_precision_preset_name(prec->preset));
    } else if (!cJSON_IsString(rng) || !cJSON_IsObject(d) || !cJSON_IsObject(l)) {
        rc = dt_errorf(err, DT_EINVAL, "%s: missing rng, data or loss_scaler", path);
    }
    if (!rc) rc = get_i64(c, "num_params", &np, path, err);
    if (!rc && (size_t)np != nparams)
        rc = dt_errorf(err, DT_EINVAL, "%s: checkpoint has %lld parameters, the model %zu", path, (long long)np, nparams);
    if (!rc) rc = get_i64(c, "world_size", &world, path, err);
    if (!rc && world < 1) rc = dt_errorf(err, DT_EINVAL, "%s: world_size %lld invalid", path, (long long)world);
    if (!rc) rc = get_i64(c, "step", &st->step, path, err);
    if (!rc) rc = get_i64(c, "adam_step", &st->adam_step, path, err);
    if (!rc) rc = get_i64(c, "skipped_steps", &st->skipped_steps, path, err);
    if (!rc) rc = get_i64(c, "tokens", &st->tokens, path, err);
    if (!rc) rc = get_i64(d, "epoch", &st->data.epoch, path, err);
    if (!rc) rc = get_i64(d, "cursor", &st->data.cursor, path, err);
    dt_loss_scaler *s = &st->scaler;
    if (!rc) rc = get_i64(l, "dynamic", &b, path, err);
    s->dynamic = (int)b;
    if (!rc) rc = get_f64(l, "cur_scale", &s->cur_scale, path, err);
    if (!rc) rc = get_f64(l, "scale_factor", &s->scale_factor, path, err);
    if (!rc) rc = get_i64(l, "scale_window", &s->scale_window, path, err);
    if (!rc) rc = get_f64(l, "min_scale", &s->min_scale, path, err);
    if (!rc) rc = get_i64(l, "delayed_shift", &b, path, err);
    s->delayed_shift = (int)b;
    if (!rc) rc = get_i64(l, "cur_hysteresis", &b, path, err);
    s->cur_hysteresis = (int)b;
    if (!rc) rc = get_i64(l, "consecutive_hysteresis", &b, path, err);
    s->consecutive_hysteresis = (int)b;
    if (!rc) rc = get_i64(l, "cur_iter", &s->cur_iter, path, err);
    if (!rc) rc = get_i64(l, "last_overflow_iter", &s->last_overflow_iter, path, err);
    if (!rc) st->rng = strtoull(rng->valuestring, NULL, 16);
    cJSON_Delete(c);
    return rc;
}

static int load_optim(const char *path, dt_optim *o, dt_error *err) {
    dt_st_file *f;
    if (dt_st_open(path, &f, err)) return err->code;
    int rc = DT_OK;
    size_t n = dt_optim_numel(o);
    struct { const char *name; void *dst; dt_dtype dt; } arr[3] = {
        {"exp_avg", dt_optim_m(o), dt_optim_moment_dtype(o)},
        {"exp_avg_sq", dt_optim_v(o), dt_optim_moment_dtype(o)},
        {"master", dt_optim_master(o), DT_DTYPE_FP32}};
    for (int i = 0; i < 3 && !rc; i++) {
        if (!arr[i].dst) continue;
        const dt_st_tensor *t = dt_st_find(f, arr[i].name);
        if (!t || dt_st_numel(t) != n || strcmp(t->dtype, dt_st_dtype_name(arr[i].dt)) != 0) {
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" missing or not %zu x %s", path, arr[i].name,
                           n, dt_st_dtype_name(arr[i].dt));
            break;
        }
        memcpy(arr[i].dst, dt_st_data(f, t), n * (size_t)dt_dtype_size(arr[i].dt));
    }
    dt_st_close(f);
    return rc;
}

int dt_ckpt_load(const char *ckpt_dir, dt_gpt2 *g, const dt_precision *prec, dt_optim *o,
                 dt_train_state *st, dt_error *err) {
    char p[DT_PATH_MAX * 3];
    int rc;
    snprintf(p, sizeof p, "%s/state.json", ckpt_dir);
    if (st && (rc = parse_state(p, st, prec, dt_gpt2_num_params(g), err))) return rc;
    snprintf(p, sizeof p, "%s/model.safetensors", ckpt_dir);
    if ((rc = load_safetensors(g, prec->param, p, err))) return rc;
    if (o) {
        snprintf(p, sizeof p, "%s/" DT_OPTIM_FILE_FMT, ckpt_dir, 0, 1);
        if ((rc = load_optim(p, o, err))) return rc;
    }
    return DT_OK;
}

/* ---- sharded checkpoints (ZeRO) ---- */

/* "flat_begin:count,..." of this rank's optimizer ranges, in state order */
static char *ranges_text(const dt_zero *z) {
    int n = dt_zero_num_ranges(z);
    size_t cap = (size_t)n * 48 + 1, len = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    t[0] = '\0';
    for (int i = 0; i < n; i++) {
        dt_zero_range r = dt_zero_range_at(z, i);
        len += (size_t)snprintf(t + len, cap - len, "%s%zu:%zu", len ? "," : "", r.flat_begin, r.count);
    }
    return t;
}

/* This rank's valid optimizer elements, concatenated in range order. */
static int write_optim_shard(const char *path, dt_zero *z, dt_error *err) {
    int n = dt_zero_num_ranges(z);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += dt_zero_range_at(z, i).count;
    const dt_dtype dts[3] = {DT_DTYPE_FP32, dt_zero_moment_dtype(z), dt_zero_moment_dtype(z)};
    const char *names[3] = {"master", "exp_avg", "exp_avg_sq"};
    void *arr[3] = {NULL, NULL, NULL};
    char *rt = ranges_text(z);
    int rc = rt ? DT_OK : dt_errorf(err, DT_ENOMEM, "checkpoint: out of memory");
    for (int k = 0; k < 3 && !rc; k++) {
        if (k == 0 && !dt_zero_has_master(z)) continue;
        size_t es = (size_t)dt_dtype_size(dts[k]);
        if (!(arr[k] = malloc(total ? total * es : 1))) {
            rc = dt_errorf(err, DT_ENOMEM, "checkpoint: out of memory for the optimizer shard");
            break;
        }
        size_t pos = 0;
        for (int i = 0; i < n && !rc; i++) {
            dt_zero_range r = dt_zero_range_at(z, i);
            rc = dt_zero_state_read(z, k, r.state_begin, r.count, (char *)arr[k] + pos * es, err);
            pos += r.count;
        }
    }
    dt_st_writer *w = dt_st_writer_new();
    int64_t cnt = (int64_t)total;
    if (!rc) rc = dt_st_writer_meta(w, "ranges", rt, err);
    for (int k = 0; k < 3 && !rc; k++)
        if (arr[k]) rc = dt_st_writer_add(w, names[k], dt_st_dtype_name(dts[k]), 1, &cnt, arr[k], err);
    if (!rc) rc = dt_st_write(w, path, err);
    dt_st_writer_free(w);
    for (int k = 0; k < 3; k++) free(arr[k]);
    free(rt);
    return rc;
}

/* Every rank calls this (it is collective: barriers, and stage 3 gathers the
 * weights). Rank 0 owns the directory; each rank writes its optimizer shard. */
int dt_ckpt_save_zero(const char *out_dir, dt_gpt2 *g, const dt_model *m, const dt_precision *prec,
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
    if (rank == 0) {
        if (dt_mkdirs(out_dir, err)) return err->code;
        rm_flat_dir(tmp);
        rm_flat_dir(old);
        if (mkdir(tmp, 0755) != 0)
            return dt_errorf(err, DT_EIO, "%s: cannot create checkpoint directory: %s", tmp, strerror(errno));
    }
    if ((rc = dt_comm_barrier(c, err))) return rc;
    /* stage 0 keeps identical full state on every rank: rank 0 writes it once */
    int writers = stage == 0 ? 1 : world;
    if (rank < writers) {
        snprintf(p, sizeof p, "%s/" DT_OPTIM_FILE_FMT, tmp, rank, writers);
        rc = write_optim_shard(p, z, err);
    }
    if (rc) return dt_error_prefix(err, "checkpoint at step %lld", step);
    if ((rc = dt_comm_barrier(c, err))) return rc;
    snprintf(p, sizeof p, "%s/model.safetensors", tmp);
    if (stage == 3) {   /* collective; only rank 0 writes, one gathered unit at a time */
        rc = weights_save_streamed(g, z, prec->param, rank == 0, p, err);
        if (rc && rank != 0) return rc;
    }
    if (rank == 0) {
        if (stage != 3) rc = dt_weights_save(g, prec->param, p, err);
        snprintf(p, sizeof p, "%s/config.json", tmp);
        if (!rc) rc = dt_hf_config_write(m, p, err);
        if (!rc && plan_json) {
            snprintf(p, sizeof p, "%s/plan.json", tmp);
            rc = dt_write_file_atomic(p, plan_json, strlen(plan_json), err);
        }
        if (!rc)
            rc = finish_dir(out_dir, tmp, fin, old, state_json(st, prec, dt_gpt2_num_params(g), world, stage), err);
        if (rc) {
            rm_flat_dir(tmp);
            return dt_error_prefix(err, "checkpoint at step %lld", step);
        }
        if (keep_last > 0) prune(out_dir, keep_last);
    }
    if (saved_path) snprintf(saved_path, saved_len, "%s", fin);
    return dt_comm_barrier(c, err);
}

/* Copies the elements of one shard file that fall in this rank's ranges. */
static int load_optim_shard(const char *path, dt_zero *z, dt_error *err) {
    dt_st_file *f;
    if (dt_st_open(path, &f, err)) return err->code;
    const char *rt = dt_st_metadata(f, "ranges");
    char single[64];
    const char *sb = dt_st_metadata(f, "shard_begin"), *sn = dt_st_metadata(f, "shard_numel");
    if (!rt && sb && sn) {   /* a single-rank checkpoint (dt_ckpt_save): one range */
        snprintf(single, sizeof single, "%s:%s", sb, sn);
        rt = single;
    }
    const dt_dtype dts[3] = {DT_DTYPE_FP32, dt_zero_moment_dtype(z), dt_zero_moment_dtype(z)};
    const char *names[3] = {"master", "exp_avg", "exp_avg_sq"};
    const char *src[3] = {NULL, NULL, NULL};
    int rc = DT_OK;
    if (!rt) rc = dt_errorf(err, DT_EINVAL, "%s: no \"ranges\" metadata (not a sharded optimizer file)", path);
    for (int k = 0; k < 3 && !rc; k++) {
        if (k == 0 && !dt_zero_has_master(z)) continue;
        const dt_st_tensor *t = dt_st_find(f, names[k]);
        if (!t || strcmp(t->dtype, dt_st_dtype_name(dts[k])) != 0)
            rc = dt_errorf(err, DT_EINVAL, "%s: tensor \"%s\" missing or not %s", path, names[k],
                           dt_st_dtype_name(dts[k]));
        else src[k] = dt_st_data(f, t);
    }
    const char *q = rt;
    size_t pos = 0;
    while (!rc && q && *q) {
        char *end;
        size_t fb = strtoull(q, &end, 10), cnt = 0;
        if (*end == ':') cnt = strtoull(end + 1, &end, 10);
        else rc = dt_errorf(err, DT_EINVAL, "%s: malformed ranges metadata", path);
        for (int i = 0; i < dt_zero_num_ranges(z) && !rc; i++) {
            dt_zero_range r = dt_zero_range_at(z, i);
            size_t a = fb > r.flat_begin ? fb : r.flat_begin;
            size_t e = fb + cnt < r.flat_begin + r.count ? fb + cnt : r.flat_begin + r.count;
            for (int k = 0; k < 3 && a < e && !rc; k++) {
                if (!src[k]) continue;
                size_t es = (size_t)dt_dtype_size(dts[k]);
                rc = dt_zero_state_write(z, k, r.state_begin + (a - r.flat_begin), e - a,
                                         src[k] + (pos + (a - fb)) * es, err);
            }
        }
        pos += cnt;
        q = *end == ',' ? end + 1 : end;
    }
    dt_st_close(f);
    return rc;
}

int dt_ckpt_load_zero(const char *ckpt_dir, dt_gpt2 *g, const dt_precision *prec, dt_zero *z,
                      dt_train_state *st, int64_t *saved_world, dt_error *err) {
    char p[DT_PATH_MAX * 3];
    int rc;
    snprintf(p, sizeof p, "%s/state.json", ckpt_dir);
    if ((rc = parse_state(p, st, prec, dt_gpt2_num_params(g), err))) return rc;
    snprintf(p, sizeof p, "%s/model.safetensors", ckpt_dir);
    if ((rc = load_safetensors(g, prec->param, p, err))) return rc;
    if ((rc = dt_zero_init_from_model(z, err))) return rc;
    /* every optimizer file of the saved world: resharding to this world/stage */
    DIR *d = opendir(ckpt_dir);
    if (!d) return dt_errorf(err, DT_EIO, "%s: cannot list: %s", ckpt_dir, strerror(errno));
    struct dirent *e;
    int files = 0, of = 0;
    while (!rc && (e = readdir(d))) {
        int rk, wd;
        if (sscanf(e->d_name, "optim-%d-of-%d.safetensors", &rk, &wd) != 2) continue;
        snprintf(p, sizeof p, "%s/%s", ckpt_dir, e->d_name);
        rc = load_optim_shard(p, z, err);
        files++;
        of = wd;
    }
    closedir(d);
    if (!rc && (files == 0 || files != of))
        rc = dt_errorf(err, DT_EINVAL, "%s: %d optimizer shard files, expected %d", ckpt_dir, files, of);
    if (saved_world) *saved_world = of;
    return rc;
}
