/* test_ckpt.c — checkpoints and resume through the real training loop on a tiny
 * GPT-2: 2N steps straight == N steps, stop, resume, N steps (bitwise: weights,
 * optimizer state, losses) for every precision preset, with checkpointed layers
 * and materialized attention; keep-last-K; incomplete checkpoints ignored;
 * weights round trip (safetensors, llm.c .bin, and an llm.c header whose padded
 * vocab would need 64 GiB); fp16 overflow steps skipped; checkpoint
 * verification (a flipped byte, a file from elsewhere, state.json values that
 * do not add up); the output-directory rules and metrics.jsonl's truncation. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_ckpt.h"
#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_lm.h"
#include "dt_plan.h"
#include "dt_rundir.h"
#include "dt_test.h"
#include "dt_test_plan.h"
#include "dt_train.h"

static char dir[256];

static void make_text(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/text", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/text/corpus.txt", dir);
    FILE *f = fopen(p, "w");
    const char *lines[] = {"The quick brown fox jumps over the lazy dog.\n",
                           "A journey of a thousand miles begins with a single step.\n",
                           "To be or not to be, that is the question.\n",
                           "All that glitters is not gold.\n"};
    for (int i = 0; i < 400; i++) fputs(lines[(i * 7) % 4], f);
    fclose(f);
}

static dt_plan base_plan(dt_precision_preset preset) {
    dt_plan p = dt_test_tiny_plan();
    dt_precision_from_preset(preset, &p.precision);
    p.batch.micro_batch = 2;
    p.batch.grad_accum = 2;
    p.batch.global_batch = 4;
    p.batch.seq_len = 32;
    p.schedule.total_steps = 10;
    p.schedule.warmup_steps = 2;
    p.data.eval_interval = 2;
    p.data.eval_batches = 2;
    p.data.valid_fraction = 0.1;
    snprintf(p.data.train, sizeof p.data.train, "%s/text", dir);
    p.output.save_interval = 0;
    p.output.keep_last = 2;
    p.prediction.valid = 0;
    return p;
}

static int train(const dt_plan *p, const char *out, int64_t max_steps, int resume, dt_train_result *r) {
    dt_train_opts o;
    memset(&o, 0, sizeof o);
    o.out_dir = out;
    o.max_steps = max_steps;
    o.resume = resume;
    o.progress = 0;
    dt_error err;
    int rc = dt_train(p, &o, r, &err);
    if (rc) fprintf(stderr, "dt_train: %s\n", err.msg);
    return rc;
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len + 1);
    if (fread(b, 1, *len, f) != *len) *len = 0;
    b[*len] = 0;
    fclose(f);
    return b;
}

static int files_equal(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    unsigned char *x = slurp(a, &la), *y = slurp(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

/* The "loss" (and "val_loss") texts of metrics.jsonl lines for steps > from. */
static void losses(const char *out, int64_t from, char *buf, size_t n) {
    char p[600];
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    size_t len;
    unsigned char *m = slurp(p, &len);
    buf[0] = 0;
    if (!m) return;
    for (char *line = strtok((char *)m, "\n"); line; line = strtok(NULL, "\n")) {
        long long step = -1;
        sscanf(line, "{\"step\": %lld", &step);
        if (step <= from) continue;
        char *l = strstr(line, "\"loss\": "), *v = strstr(line, "\"val_loss\": ");
        char piece[96];
        snprintf(piece, sizeof piece, "%lld:%.*s;", step, (int)strcspn(l + 8, ","), l + 8);
        strncat(buf, piece, n - strlen(buf) - 1);
        if (v) {
            snprintf(piece, sizeof piece, "v%.*s;", (int)strcspn(v + 12, "}"), v + 12);
            strncat(buf, piece, n - strlen(buf) - 1);
        }
    }
    free(m);
}

static void check_resume(const char *tag, dt_plan p) {
    enum { N = 3 };
    char a[512], b[512], fa[700], fb[700];
    snprintf(a, sizeof a, "%s/%s-straight", dir, tag);
    snprintf(b, sizeof b, "%s/%s-resumed", dir, tag);
    dt_train_result ra, rb1, rb2;
    CHECK(train(&p, a, 2 * N, 0, &ra) == DT_OK);
    CHECK(train(&p, b, N, 0, &rb1) == DT_OK);
    CHECK_EQ_I64(rb1.steps, N);
    CHECK(train(&p, b, 2 * N, 1, &rb2) == DT_OK);
    CHECK_EQ_I64(rb2.first_step, N);
    CHECK_EQ_I64(rb2.steps, 2 * N);
    const char *files[] = {"model.safetensors", "optim-00000-of-00001.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(fa, sizeof fa, "%s/ckpt-%08d/%s", a, 2 * N, files[i]);
        snprintf(fb, sizeof fb, "%s/ckpt-%08d/%s", b, 2 * N, files[i]);
        if (!files_equal(fa, fb)) fprintf(stderr, "%s: %s differs after resume\n", tag, files[i]);
        CHECK(files_equal(fa, fb));
    }
    char la[4096], lb[4096];
    losses(a, 0, la, sizeof la);
    losses(b, 0, lb, sizeof lb);   /* metrics.jsonl was appended to on resume */
    if (strcmp(la, lb) != 0) fprintf(stderr, "%s: losses differ\n  %s\n  %s\n", tag, la, lb);
    CHECK_STR(la, lb);
    CHECK(strstr(la, "v") != NULL);   /* validation ran (every 2 steps) */
    CHECK(ra.last_loss == rb2.last_loss);
    /* the state file's counters */
    snprintf(fa, sizeof fa, "%s/ckpt-%08d/state.json", b, 2 * N);
    size_t len;
    unsigned char *st = slurp(fa, &len);
    CHECK(st && strstr((char *)st, "\"step\": 6") && strstr((char *)st, "\"adam_step\": 6"));
    free(st);
}

static void test_resume_all_presets(void) {
    check_resume("fp32", base_plan(DT_PREC_FP32));
    check_resume("mixed-bf16", base_plan(DT_PREC_MIXED_BF16));
    check_resume("mixed-fp16", base_plan(DT_PREC_MIXED_FP16));
    check_resume("pure-bf16", base_plan(DT_PREC_PURE_BF16));
    dt_plan p = base_plan(DT_PREC_MIXED_BF16);
    p.activations.ckpt_layers = 1;
    p.activations.attention = DT_ATTN_MATERIALIZED;
    check_resume("ckpt1-materialized", p);
}

/* save every step, keep 2: only the newest two remain, no temporary directories */
static void test_keep_last(void) {
    dt_plan p = base_plan(DT_PREC_FP32);
    p.output.save_interval = 1;
    p.output.keep_last = 2;
    char out[512], q[700];
    snprintf(out, sizeof out, "%s/keep", dir);
    dt_train_result r;
    CHECK(train(&p, out, 5, 0, &r) == DT_OK);
    for (int s = 1; s <= 5; s++) {
        snprintf(q, sizeof q, "%s/ckpt-%08d/state.json", out, s);
        CHECK((access(q, F_OK) == 0) == (s >= 4));
        snprintf(q, sizeof q, "%s/.ckpt-%08d.tmp", out, s);
        CHECK(access(q, F_OK) != 0);
    }
    /* an interrupted save (temporary directory) and a directory without state.json
     * are never taken for a checkpoint */
    snprintf(q, sizeof q, "%s/.ckpt-00000009.tmp", out);
    mkdir(q, 0755);
    snprintf(q, sizeof q, "%s/ckpt-00000008", out);
    mkdir(q, 0755);
    char latest[700];
    int64_t step;
    dt_error err;
    CHECK(dt_ckpt_latest(out, latest, sizeof latest, &step, &err) == DT_OK);
    CHECK_EQ_I64(step, 5);
    CHECK(strstr(latest, "ckpt-00000005") != NULL);
    /* resuming continues from 5 */
    CHECK(train(&p, out, 6, 1, &r) == DT_OK);
    CHECK_EQ_I64(r.first_step, 5);
    snprintf(q, sizeof q, "%s/nothing-here", dir);
    CHECK(dt_ckpt_latest(q, latest, sizeof latest, &step, &err) == DT_OK);
    CHECK_EQ_I64(step, -1);
}

static dt_lm *model(const dt_plan *p) {
    dt_lm *g = NULL;
    dt_error err;
    if (dt_lm_create(&p->model, &p->precision, 1, 8, 0, DT_ATTN_FLASH, &g, &err))
        fprintf(stderr, "gpt2: %s\n", err.msg);
    return g;
}

static const dt_tensor_info *ti(const dt_lm *g, const char *name) {
    for (int i = 0; i < dt_lm_num_tensors(g); i++)
        if (strcmp(dt_lm_tensor(g, i)->name, name) == 0) return dt_lm_tensor(g, i);
    fprintf(stderr, "no tensor %s\n", name);
    exit(1);
}

static void test_weights_round_trip(void) {
    dt_plan p = base_plan(DT_PREC_FP32);
    dt_lm *a = model(&p), *b = model(&p);
    CHECK(dt_lm_init_random(a, 7, NULL) == DT_OK);
    CHECK(dt_lm_init_random(b, 8, NULL) == DT_OK);
    size_t n = dt_lm_num_params(a);
    char path[512];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    dt_error err;
    CHECK(dt_weights_save(a, DT_DTYPE_FP32, path, &err) == DT_OK);
    CHECK(memcmp(dt_lm_params(a), dt_lm_params(b), n * 4) != 0);
    CHECK(dt_weights_load(b, &p.model, DT_DTYPE_FP32, path, &err) == DT_OK);
    CHECK(memcmp(dt_lm_params(a), dt_lm_params(b), n * 4) == 0);

    /* fp32 file into a bf16 model: rounded to nearest even */
    dt_plan pb = base_plan(DT_PREC_MIXED_BF16);
    dt_lm *c = model(&pb);
    CHECK(dt_weights_load(c, &pb.model, DT_DTYPE_BF16, path, &err) == DT_OK);
    const float *pa = dt_lm_params(a);
    const dt_bf16 *pc = dt_lm_params(c);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= pc[i] == dt_f32_to_bf16(pa[i]);
    CHECK(ok);
    dt_lm_free(c);

    /* a model of another shape: the error names the tensor */
    dt_plan p2 = base_plan(DT_PREC_FP32);
    p2.model.hidden = 32;
    p2.model.head_dim = 8;
    p2.model.ffn = 128;
    dt_lm *d = model(&p2);
    CHECK(dt_weights_load(d, &p2.model, DT_DTYPE_FP32, path, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "wte.weight") != NULL || strstr(err.msg, "shape") != NULL);
    dt_lm_free(d);

    /* llm.c v3 checkpoint of a's weights: Linear [out, in] layout, vocab padded to Vp */
    const int64_t C = p.model.hidden, L = p.model.n_layer, V = p.model.vocab, T = p.model.max_pos;
    const int64_t Vp = V + 64;
    snprintf(path, sizeof path, "%s/model.bin", dir);
    FILE *f = fopen(path, "wb");
    int32_t h[256] = {20240326, 3, (int32_t)T, (int32_t)V, (int32_t)L, (int32_t)p.model.n_head, (int32_t)C, (int32_t)Vp};
    fwrite(h, sizeof h, 1, f);
    const float *w = dt_lm_params(a);
    const dt_tensor_info *wte = ti(a, "wte.weight"), *wpe = ti(a, "wpe.weight");
    fwrite(w + wte->offset, 4, (size_t)(V * C), f);
    float *zero = calloc((size_t)((Vp - V) * C), 4);
    fwrite(zero, 4, (size_t)((Vp - V) * C), f);
    free(zero);
    fwrite(w + wpe->offset, 4, (size_t)(T * C), f);
    const char *per[12] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                           "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                           "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    for (int k = 0; k < 12; k++) {
        for (int64_t l = 0; l < L; l++) {
            char name[64];
            snprintf(name, sizeof name, "h.%lld.%s", (long long)l, per[k]);
            const dt_tensor_info *t = ti(a, name);
            if (t->ndim == 1) {
                fwrite(w + t->offset, 4, t->numel, f);
            } else {   /* HF [in, out] -> llm.c [out, in] */
                int64_t in = t->shape[0], out = t->shape[1];
                for (int64_t o = 0; o < out; o++)
                    for (int64_t i = 0; i < in; i++) fwrite(w + t->offset + i * out + o, 4, 1, f);
            }
        }
    }
    fwrite(w + ti(a, "ln_f.weight")->offset, 4, (size_t)C, f);
    fwrite(w + ti(a, "ln_f.bias")->offset, 4, (size_t)C, f);
    fclose(f);
    CHECK(dt_lm_init_random(b, 9, NULL) == DT_OK);
    CHECK(dt_weights_load(b, &p.model, DT_DTYPE_FP32, path, &err) == DT_OK);
    CHECK(memcmp(dt_lm_params(a), dt_lm_params(b), n * 4) == 0);
    /* truncate it: a clear error */
    CHECK(truncate(path, 4096) == 0);
    CHECK(dt_weights_load(b, &p.model, DT_DTYPE_FP32, path, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "truncated") != NULL);
    /* a header declaring a padded vocab of 2^28 (64 GiB of values) in a 1 KiB file:
     * refused before anything is allocated (it used to crash) */
    h[7] = 1 << 28;
    f = fopen(path, "wb");
    fwrite(h, sizeof h, 1, f);
    fclose(f);
    CHECK(dt_weights_load(b, &p.model, DT_DTYPE_FP32, path, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "padded vocab 268435456") != NULL);
    dt_lm_free(a);
    dt_lm_free(b);
}

/* fp16 with a huge initial scale: the first steps overflow and are skipped,
 * the scale halves (after hysteresis), training then proceeds. */
static void test_fp16_overflow_skips(void) {
    dt_plan p = base_plan(DT_PREC_MIXED_FP16);
    p.precision.initial_scale_power = 20;
    p.precision.hysteresis = 1;
    char out[512], mp[600];
    snprintf(out, sizeof out, "%s/fp16skip", dir);
    dt_train_result r;
    CHECK(train(&p, out, 10, 0, &r) == DT_OK);
    CHECK(r.skipped > 0);
    CHECK(r.skipped < 10);
    snprintf(mp, sizeof mp, "%s/metrics.jsonl", out);
    size_t len;
    unsigned char *m = slurp(mp, &len);
    CHECK(m && strstr((char *)m, "\"skipped\": true") && strstr((char *)m, "\"skipped\": false"));
    CHECK(m && strstr((char *)m, "\"loss_scale\": 524288"));   /* 2^19 after the first skip */
    free(m);
    snprintf(mp, sizeof mp, "%s/ckpt-00000010/state.json", out);
    m = slurp(mp, &len);
    char want[64];
    snprintf(want, sizeof want, "\"adam_step\": %lld", (long long)(10 - r.skipped));
    CHECK(m && strstr((char *)m, want));
    free(m);
}

/* plans the single-rank engine refuses, with the message the CLI prints */
static void test_refusals(void) {
    dt_plan p = base_plan(DT_PREC_FP32);
    p.parallel.world_size = 2;
    p.cluster.gpus_per_node = 2;
    dt_train_result r;
    dt_train_opts o;
    memset(&o, 0, sizeof o);
    dt_error err;
    CHECK(dt_train(&p, &o, &r, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "asks for 2 ranks") != NULL);
    /* a cuda plan without a usable GPU (no CUDA in the build, or none visible):
     * dt_device_get's one-line reason, before anything is written */
    if (dt_device_cuda_count() == 0) {
        p = base_plan(DT_PREC_FP32);
        p.cluster.device = DT_DEVICE_CUDA;
        CHECK(dt_train(&p, &o, &r, &err) == DT_ERUNTIME);
        CHECK(strstr(err.msg, "cuda") != NULL);
        CHECK(strchr(err.msg, '\n') == NULL);
    }
}

/* Replaces the first occurrence of from in path by to. */
static void edit_file(const char *path, const char *from, const char *to) {
    size_t len;
    unsigned char *b = slurp(path, &len);
    char *at = b ? strstr((char *)b, from) : NULL;
    CHECK(at != NULL);
    if (!at) {
        free(b);
        return;
    }
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, (size_t)(at - (char *)b), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(b);
}

static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    fseek(f, at, SEEK_END);
    int c = fgetc(f);
    fseek(f, at, SEEK_END);
    fputc(c ^ 0x10, f);
    fclose(f);
}

/* --resume of out must fail with DT_EINVAL and a message holding needle */
static void expect_resume_fails(const dt_plan *p, const char *out, const char *needle) {
    dt_train_opts o;
    memset(&o, 0, sizeof o);
    o.out_dir = out;
    o.max_steps = 6;
    o.resume = 1;
    dt_train_result r;
    dt_error err;
    dt_error_clear(&err);
    int rc = dt_train(p, &o, &r, &err);
    if (rc != DT_EINVAL || !strstr(err.msg, needle))
        fprintf(stderr, "resume of %s: rc %d, '%s' (expected '%s')\n", out, rc, err.msg, needle);
    CHECK(rc == DT_EINVAL && strstr(err.msg, needle) != NULL);
}

/* every file a resume reads is checked against the sums and counters of state.json */
static void test_verification(void) {
    dt_plan p = base_plan(DT_PREC_MIXED_FP16);
    p.output.save_interval = 2;
    p.output.keep_last = 0;
    char out[512], q[700], q2[700];
    snprintf(out, sizeof out, "%s/verify", dir);
    dt_train_result r;
    CHECK(train(&p, out, 4, 0, &r) == DT_OK);
    snprintf(q, sizeof q, "%s/ckpt-00000004/optim-00000-of-00001.safetensors", out);
    flip_byte(q, -3);
    expect_resume_fails(&p, out, "optim-00000-of-00001.safetensors: checksum mismatch");
    flip_byte(q, -3);
    snprintf(q, sizeof q, "%s/ckpt-00000004/config.json", out);
    edit_file(q, "{", "{ ");
    expect_resume_fails(&p, out, "ckpt-00000004/config.json: checksum mismatch");
    edit_file(q, "{ ", "{");
    /* a shard that is not this checkpoint's */
    snprintf(q, sizeof q, "%s/ckpt-00000002/optim-00000-of-00001.safetensors", out);
    snprintf(q2, sizeof q2, "%s/ckpt-00000004/optim-00000-of-00001.safetensors", out);
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "cp %s %s.keep && cp %s %s", q2, q2, q, q2);
    CHECK(system(cmd) == 0);
    expect_resume_fails(&p, out, "optimizer state of step 2 in a checkpoint of step 4");
    snprintf(cmd, sizeof cmd, "mv %s.keep %s", q2, q2);
    CHECK(system(cmd) == 0);
    /* state.json values that cannot be right (a scale window of 0 would divide by zero later) */
    snprintf(q, sizeof q, "%s/ckpt-00000004/state.json", out);
    edit_file(q, "\"scale_window\": ", "\"scale_window\": 0, \"was\": ");
    expect_resume_fails(&p, out, "\"scale_window\" is 0");
    edit_file(q, "\"scale_window\": 0, \"was\": ", "\"scale_window\": ");
    edit_file(q, "\"cur_iter\": 4", "\"cur_iter\": 3");
    expect_resume_fails(&p, out, "loss scaler is at iteration 3 but the step is 4");
    edit_file(q, "\"cur_iter\": 3", "\"cur_iter\": 4");
    edit_file(q, "\"step\": 4,", "\"step\": -4,");
    expect_resume_fails(&p, out, "\"step\" is -4");
    edit_file(q, "\"step\": -4,", "\"step\": 4,");
    /* a checkpoint directory renamed to another step */
    snprintf(q, sizeof q, "%s/ckpt-00000004", out);
    snprintf(q2, sizeof q2, "%s/ckpt-00000005", out);
    CHECK(rename(q, q2) == 0);
    expect_resume_fails(&p, out, "ckpt-00000005: state.json is at step 4");
    CHECK(rename(q2, q) == 0);
    /* restored: it resumes */
    CHECK(train(&p, out, 6, 1, &r) == DT_OK);
    CHECK_EQ_I64(r.first_step, 4);
}

/* the output directory's rules (dt_rundir.h) and metrics.jsonl's truncation */
static void test_rundir(void) {
    char d[512], q[700];
    dt_error err;
    snprintf(d, sizeof d, "%s/rundir", dir);
    CHECK(dt_rundir_check(d, DT_OUT_NEW, &err) == DT_OK);   /* absent */
    mkdir(d, 0755);
    CHECK(dt_rundir_check(d, DT_OUT_NEW, &err) == DT_OK);   /* empty */
    snprintf(q, sizeof q, "%s/metrics.jsonl", d);
    FILE *f = fopen(q, "w");
    fputs("{\"step\": 1, \"loss\": 5}\n{\"step\": 2, \"loss\": 4}\n{\"step\": 3, \"loss\": 3}\n"
          "{\"step\": 2, \"loss\": 4}\n{\"step\": 3, \"loss\"", f);
    fclose(f);
    CHECK(dt_rundir_check(d, DT_OUT_NEW, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "not empty") && strstr(err.msg, "--resume") && strstr(err.msg, "--overwrite"));
    CHECK(dt_rundir_check(d, DT_OUT_RESUME, &err) == DT_OK);     /* only dtrun's files, no checkpoint */
    CHECK(dt_rundir_check(d, DT_OUT_OVERWRITE, &err) == DT_OK);
    /* cut back to step 2; the repeated and the partial lines go too */
    CHECK(dt_metrics_truncate(q, 2, &err) == DT_OK);
    size_t len;
    unsigned char *m = slurp(q, &len);
    CHECK(m && strcmp((char *)m, "{\"step\": 1, \"loss\": 5}\n{\"step\": 2, \"loss\": 4}\n") == 0);
    free(m);
    CHECK(dt_metrics_truncate(q, 0, &err) == DT_OK);
    m = slurp(q, &len);
    CHECK(m && len == 0);
    free(m);
    snprintf(q, sizeof q, "%s/gone.jsonl", d);
    CHECK(dt_metrics_truncate(q, 3, &err) == DT_OK && access(q, F_OK) != 0);
    /* a foreign file: --resume without a checkpoint refuses, --overwrite keeps it */
    snprintf(q, sizeof q, "%s/notes.txt", d);
    f = fopen(q, "w");
    fputs("mine", f);
    fclose(f);
    CHECK(dt_rundir_check(d, DT_OUT_RESUME, &err) == DT_EINVAL && strstr(err.msg, "notes.txt"));
    snprintf(q, sizeof q, "%s/ckpt-00000007", d);
    mkdir(q, 0755);
    snprintf(q, sizeof q, "%s/ckpt-00000007/state.json", d);
    fclose(fopen(q, "w"));
    snprintf(q, sizeof q, "%s/ckpt-00000007/mine.txt", d);
    fclose(fopen(q, "w"));
    CHECK(dt_rundir_clear(d, &err) == DT_OK);
    snprintf(q, sizeof q, "%s/notes.txt", d);
    CHECK(access(q, F_OK) == 0);
    snprintf(q, sizeof q, "%s/ckpt-00000007/mine.txt", d);
    CHECK(access(q, F_OK) == 0);
    snprintf(q, sizeof q, "%s/ckpt-00000007/state.json", d);
    CHECK(access(q, F_OK) != 0);
    snprintf(q, sizeof q, "%s/metrics.jsonl", d);
    CHECK(access(q, F_OK) != 0);
    /* not a directory */
    CHECK(dt_rundir_check("/dev/null", DT_OUT_NEW, &err) == DT_EINVAL && strstr(err.msg, "not a directory"));
    char id1[DT_RUN_ID_LEN + 1], id2[DT_RUN_ID_LEN + 1];
    dt_run_id_new(id1);
    dt_run_id_new(id2);
    CHECK(strlen(id1) == DT_RUN_ID_LEN && strcmp(id1, id2) != 0);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dt_test_ckpt_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    make_text();
    test_resume_all_presets();
    test_keep_last();
    test_weights_round_trip();
    test_fp16_overflow_skips();
    test_refusals();
    test_verification();
    test_rundir();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!dt_test_failures && system(cmd) != 0) return 1;
    TEST_MAIN_END();
}
