/* test_weights_slices.c — weights read slice by slice (docs/dtrun.md "Bounded
 * checkpoint I/O"): every weights source — a .safetensors file (F32, and BF16
 * into an fp32 model), a sharded Hugging Face directory (index + 2 shards), an
 * llm.c checkpoint (v3 fp32, v5 bf16) — read
 *   - by dt_hf_src_read over random element ranges (safetensors, directory),
 *   - by dt_weights_load_zero into a ZeRO-3 engine whose model has no flat
 *     buffers (DT_LM_NO_FLAT), offload none / param+optimizer cpu / nvme, fp32
 *     and mixed-bf16 (fp32 master), then consolidated (dt_zero_consolidate_params),
 *   - by dt_weights_load_zero at stage 2 (the full flat parameters),
 * must give bitwise the parameters dt_weights_load gives the whole model, and the
 * master their fp32 value. DT_TEST_IO_CHUNK_BYTES is set small so every transfer
 * takes many chunks (pieces crossing tensor and unit boundaries). Runs on one
 * rank, or under mpirun -n 2 (each rank reads only its own shards; the
 * consolidation all-gathers them). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_ckpt.h"
#include "dt_comm.h"
#include "dt_dtype.h"
#include "dt_hfdir.h"
#include "dt_lm.h"
#include "dt_plan.h"
#include "dt_safetensors.h"
#include "dt_test.h"
#include "dt_test_plan.h"
#include "dt_zero.h"

/* bytes per transfer chunk in this test: 1024 fp32 elements, far below a unit of the tiny model */
#define TEST_CHUNK "4096"
#define RANDOM_RANGES 200
#define LLMC_PAD_ROWS 64   /* llm.c pads the vocabulary rows (train_gpt2.py write_model); any padding works */

static char dir[256];
static dt_comm *comm;

static dt_plan base_plan(dt_precision_preset preset, int stage, dt_offload off) {
    dt_plan p = dt_test_tiny_plan();
    dt_precision_from_preset(preset, &p.precision);
    p.parallel.world_size = dt_comm_size(comm);
    p.parallel.zero_stage = stage;
    p.parallel.offload_optimizer = off;
    p.parallel.offload_param = stage == 3 ? off : DT_OFFLOAD_NONE;
    snprintf(p.parallel.nvme_path, sizeof p.parallel.nvme_path, "%s/nvme", dir);
    return p;
}

static dt_lm *model(const dt_plan *p, unsigned flags) {
    dt_lm *g = NULL;
    dt_error err;
    const dt_lm_options o = {.B = 1, .T = 8, .ckpt_layers = 0, .attn = DT_ATTN_FLASH, .device = DT_DEVICE_CPU,
                             .ordinal = 0, .flags = flags};
    if (dt_lm_create_opts(&p->model, &p->precision, &o, &g, &err)) {
        fprintf(stderr, "model: %s\n", err.msg);
        exit(1);
    }
    return g;
}

static const dt_tensor_info *ti(const dt_lm *g, const char *name) {
    for (int i = 0; i < dt_lm_num_tensors(g); i++)
        if (strcmp(dt_lm_tensor(g, i)->name, name) == 0) return dt_lm_tensor(g, i);
    fprintf(stderr, "no tensor %s\n", name);
    exit(1);
}

/* ---- the sources, written from model a ---- */

/* a sharded save_pretrained directory: tensors alternate between two shards */
static void write_hf_dir(dt_lm *a, const dt_model *m, const char *d) {
    dt_error err;
    mkdir(d, 0755);
    char p[1024];
    snprintf(p, sizeof p, "%s/config.json", d);
    CHECK(dt_hf_config_write(m, p, &err) == DT_OK);
    dt_st_writer *w[2] = {dt_st_writer_new(), dt_st_writer_new()};
    char name[DT_ST_NAME_MAX];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    FILE *idx = fopen(p, "w");
    fprintf(idx, "{\"metadata\": {}, \"weight_map\": {");
    const float *w32 = dt_lm_params(a);
    for (int i = 0; i < dt_lm_num_tensors(a); i++) {
        const dt_tensor_info *t = dt_lm_tensor(a, i);
        snprintf(name, sizeof name, "%s%s", dt_lm_hf_prefix(a), t->name);
        CHECK(dt_st_writer_add(w[i % 2], name, "F32", t->ndim, t->shape, w32 + t->offset, &err) == DT_OK);
        fprintf(idx, "%s\"%s\": \"model-%05d-of-00002.safetensors\"", i ? ", " : "", name, i % 2 + 1);
    }
    fprintf(idx, "}}\n");
    fclose(idx);
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/model-%05d-of-00002.safetensors", d, k + 1);
        CHECK(dt_st_write(w[k], p, &err) == DT_OK);
        dt_st_writer_free(w[k]);
    }
}

/* an llm.c checkpoint of a's weights (train_gpt2.py write_model): Linear
 * [out, in] layout, vocabulary padded, values fp32 (version 3) or bf16 (5) */
static void write_llmc(dt_lm *a, const dt_model *m, const char *path, int bf16) {
    const int64_t C = m->hidden, L = m->n_layer, V = m->vocab, T = m->max_pos, Vp = V + LLMC_PAD_ROWS;
    FILE *f = fopen(path, "wb");
    int32_t h[256] = {20240326, bf16 ? 5 : 3, (int32_t)T, (int32_t)V, (int32_t)L, (int32_t)m->n_head, (int32_t)C,
                      (int32_t)Vp};
    fwrite(h, sizeof h, 1, f);
    const float *w = dt_lm_params(a);
#define PUT(x)                                                     \
    do {                                                           \
        float v_ = (x);                                            \
        if (bf16) {                                                \
            dt_bf16 b_ = dt_f32_to_bf16(v_);                       \
            fwrite(&b_, 2, 1, f);                                  \
        } else {                                                   \
            fwrite(&v_, 4, 1, f);                                  \
        }                                                          \
    } while (0)
    const dt_tensor_info *wte = ti(a, "wte.weight"), *wpe = ti(a, "wpe.weight");
    for (int64_t i = 0; i < V * C; i++) PUT(w[wte->offset + i]);
    for (int64_t i = 0; i < (Vp - V) * C; i++) PUT(0.0f);
    for (int64_t i = 0; i < T * C; i++) PUT(w[wpe->offset + i]);
    const char *per[12] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                           "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                           "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    for (int k = 0; k < 12; k++)
        for (int64_t l = 0; l < L; l++) {
            char name[64];
            snprintf(name, sizeof name, "h.%lld.%s", (long long)l, per[k]);
            const dt_tensor_info *t = ti(a, name);
            if (t->ndim == 1) {
                for (size_t i = 0; i < t->numel; i++) PUT(w[t->offset + i]);
            } else {   /* HF [in, out] -> llm.c [out, in] */
                int64_t in = t->shape[0], out = t->shape[1];
                for (int64_t o = 0; o < out; o++)
                    for (int64_t i = 0; i < in; i++) PUT(w[t->offset + i * out + o]);
            }
        }
    for (int64_t i = 0; i < C; i++) PUT(w[ti(a, "ln_f.weight")->offset + i]);
    for (int64_t i = 0; i < C; i++) PUT(w[ti(a, "ln_f.bias")->offset + i]);
#undef PUT
    fclose(f);
}

/* ---- checks ---- */

typedef struct {
    char *buf;
    size_t esz;
} gather_ctx;

/* dt_zero_unit_fn: the consolidated pieces into one host buffer */
static int collect(void *ctx, int unit, size_t flat_off, size_t n, const void *params, dt_error *err) {
    gather_ctx *c = ctx;
    (void)unit;
    (void)err;
    memcpy(c->buf + flat_off * c->esz, params, n * c->esz);
    return DT_OK;
}

/* The reference: path through dt_weights_load into a whole model of preset. */
static void *reference(const char *path, dt_precision_preset preset, size_t *bytes) {
    dt_plan p = base_plan(preset, 0, DT_OFFLOAD_NONE);
    dt_lm *g = model(&p, 0);
    dt_error err;
    if (dt_weights_load(g, &p.model, p.precision.param, path, &err)) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        exit(1);
    }
    *bytes = dt_lm_num_params(g) * (size_t)dt_dtype_size(p.precision.param);
    void *r = malloc(*bytes);
    memcpy(r, dt_lm_params(g), *bytes);
    dt_lm_free(g);
    return r;
}

/* path into a ZeRO engine of stage / offload / preset: the parameters it holds
 * equal ref, the fp32 master their upcast */
static void check_zero(const char *tag, const char *path, dt_precision_preset preset, int stage, dt_offload off,
                       const void *ref) {
    dt_plan p = base_plan(preset, stage, off);
    dt_lm *g = model(&p, stage == 3 ? DT_LM_NO_FLAT : 0);
    dt_zero *z = NULL;
    dt_error err;
    const size_t n = dt_lm_num_params(g), esz = (size_t)dt_dtype_size(p.precision.param);
    int rc = dt_zero_create(&p, comm, g, &z, &err);
    if (!rc) rc = dt_weights_load_zero(z, g, &p.model, p.precision.param, path, &err);
    if (rc) fprintf(stderr, "%s: %s\n", tag, err.msg);
    CHECK(rc == DT_OK);
    gather_ctx c = {calloc(n, esz), esz};
    if (!rc) rc = dt_zero_consolidate_params(z, collect, &c, &err);
    CHECK(rc == DT_OK);
    int same = memcmp(c.buf, ref, n * esz) == 0;
    if (!same) fprintf(stderr, "%s: the consolidated parameters differ from the whole load\n", tag);
    CHECK(same);
    if (!rc && dt_zero_has_master(z)) {   /* master = the parameters in fp32, in every range this rank holds */
        int ok = 1;
        for (int i = 0; i < dt_zero_num_ranges(z); i++) {
            dt_zero_range r = dt_zero_range_at(z, i);
            const size_t cnt = r.count ? r.count : 1;
            float *m = malloc(cnt * sizeof(float)), *want = malloc(cnt * sizeof(float));
            CHECK(dt_zero_state_read(z, 0, r.state_begin, r.count, m, &err) == DT_OK);
            dt_convert(want, DT_DTYPE_FP32, (const char *)ref + r.flat_begin * esz, p.precision.param, r.count);
            ok &= memcmp(m, want, r.count * sizeof(float)) == 0;
            free(m);
            free(want);
        }
        if (!ok) fprintf(stderr, "%s: the master is not the parameters' fp32 value\n", tag);
        CHECK(ok);
    }
    if (stage == 3) CHECK(dt_lm_params(g) == NULL);   /* no rank ever allocated the flat model */
    free(c.buf);
    dt_zero_free(z);
    dt_lm_free(g);
}

/* dt_hf_src_read over random ranges of a file or directory equals ref */
static void check_ranges(const char *tag, const char *path, int is_dir, const void *ref) {
    dt_plan p = base_plan(DT_PREC_FP32, 0, DT_OFFLOAD_NONE);
    dt_lm *g = model(&p, DT_LM_NO_FLAT);
    dt_error err;
    dt_hf_src *s = NULL;
    int rc = is_dir ? dt_hf_src_open_dir(g, path, &s, &err) : dt_hf_src_open_file(g, path, &s, &err);
    if (rc) fprintf(stderr, "%s: %s\n", tag, err.msg);
    CHECK(rc == DT_OK);
    const size_t N = dt_lm_num_params(g);
    float *buf = malloc(N * sizeof(float));
    uint64_t x = 88172645463325252ULL;   /* xorshift64 (Marsaglia 2003), a fixed sequence */
    int ok = 1;
    for (int i = 0; i < RANDOM_RANGES && !rc; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t lo = (size_t)(x % N);
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n = 1 + (size_t)(x % (N - lo));
        if ((rc = dt_hf_src_read(s, lo, n, DT_DTYPE_FP32, buf, &err))) break;
        ok &= memcmp(buf, (const float *)ref + lo, n * sizeof(float)) == 0;
    }
    if (!ok) fprintf(stderr, "%s: a random range differs\n", tag);
    CHECK(ok && rc == DT_OK);
    free(buf);
    dt_hf_src_close(s);
    dt_lm_free(g);
}

int main(void) {
    setenv("DT_TEST_IO_CHUNK_BYTES", TEST_CHUNK, 1);
    dt_error err;
    int mpi = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
    if ((mpi ? dt_comm_init_mpi(&comm, 60.0, &err) : dt_comm_init_self(&comm, &err))) {
        fprintf(stderr, "comm: %s\n", err.msg);
        return 1;
    }
    snprintf(dir, sizeof dir, "/tmp/dt_test_slices_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char p[512], nv[512];
    snprintf(nv, sizeof nv, "%s/nvme", dir);
    mkdir(nv, 0755);

    /* the weights every source holds: a's seeded init, and a bf16 copy */
    dt_plan pf = base_plan(DT_PREC_FP32, 0, DT_OFFLOAD_NONE), pb = base_plan(DT_PREC_MIXED_BF16, 0, DT_OFFLOAD_NONE);
    dt_lm *a = model(&pf, 0), *b = model(&pb, 0);
    CHECK(dt_lm_init_random(a, 7, NULL) == DT_OK);
    CHECK(dt_lm_init_random(b, 7, NULL) == DT_OK);
    char f32[512], bf[512], hf[512], l3[512], l5[512];
    snprintf(f32, sizeof f32, "%s/w32.safetensors", dir);
    snprintf(bf, sizeof bf, "%s/wbf16.safetensors", dir);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    snprintf(l3, sizeof l3, "%s/v3.bin", dir);
    snprintf(l5, sizeof l5, "%s/v5.bin", dir);
    CHECK(dt_weights_save(a, DT_DTYPE_FP32, f32, &err) == DT_OK);
    CHECK(dt_weights_save(b, DT_DTYPE_BF16, bf, &err) == DT_OK);
    write_hf_dir(a, &pf.model, hf);
    write_llmc(a, &pf.model, l3, 0);
    write_llmc(a, &pf.model, l5, 1);

    /* what the whole-model loads give: the seeded values, their bf16 rounding, the bf16 file upcast */
    const size_t n = dt_lm_num_params(a);
    size_t bytes;
    void *r32 = reference(f32, DT_PREC_FP32, &bytes);
    CHECK(bytes == n * 4 && memcmp(r32, dt_lm_params(a), bytes) == 0);
    void *rbf = reference(bf, DT_PREC_FP32, &bytes);   /* the bf16 file into an fp32 model: exact upcast */
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= ((float *)rbf)[i] == dt_bf16_to_f32(((dt_bf16 *)dt_lm_params(b))[i]);
    CHECK(ok);
    void *rhf = reference(hf, DT_PREC_FP32, &bytes);
    CHECK(memcmp(rhf, r32, bytes) == 0);
    void *rl3 = reference(l3, DT_PREC_FP32, &bytes);
    CHECK(memcmp(rl3, r32, bytes) == 0);
    void *rl5 = reference(l5, DT_PREC_FP32, &bytes);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= ((float *)rl5)[i] == dt_bf16_to_f32(dt_f32_to_bf16(((float *)r32)[i]));
    CHECK(ok);
    void *r16 = reference(f32, DT_PREC_MIXED_BF16, &bytes);   /* fp32 file into a bf16 model */

    check_ranges("safetensors file, random ranges", f32, 0, r32);
    check_ranges("bf16 safetensors file, random ranges", bf, 0, rbf);
    check_ranges("sharded directory, random ranges", hf, 1, r32);

    struct { const char *name, *path; const void *ref; } src[] = {
        {"safetensors", f32, r32}, {"bf16 safetensors", bf, rbf}, {"sharded directory", hf, r32},
        {"llm.c v3", l3, r32}, {"llm.c v5", l5, rl5}};
    const dt_offload offs[] = {DT_OFFLOAD_NONE, DT_OFFLOAD_CPU, DT_OFFLOAD_NVME};
    for (size_t s = 0; s < sizeof src / sizeof src[0]; s++) {
        for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++) {
            snprintf(p, sizeof p, "%s, ZeRO-3, offload %s, fp32", src[s].name, dt_offload_name(offs[o]));
            check_zero(p, src[s].path, DT_PREC_FP32, 3, offs[o], src[s].ref);
        }
        snprintf(p, sizeof p, "%s, ZeRO-2, fp32", src[s].name);
        check_zero(p, src[s].path, DT_PREC_FP32, 2, DT_OFFLOAD_NONE, src[s].ref);
    }
    /* mixed-bf16: bf16 parameters and their fp32 master, in memory and on nvme */
    for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++) {
        snprintf(p, sizeof p, "safetensors, ZeRO-3, offload %s, mixed-bf16", dt_offload_name(offs[o]));
        check_zero(p, f32, DT_PREC_MIXED_BF16, 3, offs[o], r16);
    }
    check_zero("safetensors, ZeRO-1, mixed-bf16", f32, DT_PREC_MIXED_BF16, 1, DT_OFFLOAD_NONE, r16);

    free(r32);
    free(rbf);
    free(rhf);
    free(rl3);
    free(rl5);
    free(r16);
    dt_lm_free(a);
    dt_lm_free(b);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    dt_comm_free(comm);
    TEST_MAIN_END();
}
