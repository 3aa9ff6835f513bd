/* calibrate.c — `dtrun calibrate -o configs/hardware/local.json [--plan P]` (also
 * reached as `dtplan calibrate`, which forwards here: measuring needs the engine
 * and MPI, which dtplan does not link):
 * measures this machine with the CPU engine's own kernels and writes a profile
 * that dt_hardware_load reads. A few seconds. docs/hardware.md "Calibration",
 * docs/time-model.md "Kernel-level terms".
 *
 * What a CPU rank runs: dtrun gives each of a node's G ranks cores / G OpenMP
 * threads, one thread per rank once G >= cores (engine/dist/launch.c), so every core
 * runs single-threaded engine ops side by side with the other cores'. The
 * compute probes therefore run one thread per core, all cores at once, each on
 * its own buffers (inside an OpenMP region the engine's ops and OpenBLAS run
 * single-threaded), and a node's rate is the slowest core's rate times the
 * number of cores: the ranks meet in a collective every step, so the rank on the
 * slowest core paces the node (docs/time-model.md "node sharing").
 *
 * Kernel classes, at the shapes the engine runs (the plan's micro-batch x
 * sequence, hidden, heads, ffn, vocab with --plan; GPT-2 124M's otherwise):
 *   linear     the block's 4 linears forward + backward (GEMMs with their bias
 *              broadcast / bias sums) and the classifier's 3 GEMMs: FLOP/s
 *   attention  flash attention forward + backward: FLOP/s (QK^T and PV over the
 *              full T x T, the time model's count)
 *   elementwise the block's LayerNorms, residual adds and GELU forward and
 *              backward: the time model's bytes (dt_time_elementwise_elems) / s
 *   op         a 64-element residual add: the fixed cost of one op
 *   adamw      the engine's AdamW update on the plan's optimizer shard: params/s
 * Every probe repeats, interleaved with the others (a busy moment slows all
 * classes alike, not one), every core starting each probe together (a barrier
 * before it), and each core's median repeat counts: the time model adds these
 * rates up into a step, and a step's time is what its kernels typically take
 * (a sum of medians), not what the luckiest repeat took. The best repeat read
 * 30-40 % faster than the median on the development VM even with it 60-80 %
 * idle, and predicted steps that much too short (docs/benchmarks.md).
 *
 * In situ: isolated probes run each kernel again and again on warm buffers;
 * the engine runs them once each, in its own order, on activations the
 * previous op just wrote (or that the forward wrote long ago, in backward).
 * So calibrate also runs the engine's real forward and backward (dt_lm, the
 * plan's model with at most CAL_INSITU_MAX_LAYERS blocks and a vocabulary of at
 * most CAL_VOCAB_PROBE, fp32), one model per core, all cores at once, timed
 * separately, interleaved with the probes. The time model's composition of that
 * same model's forward and backward (dt_time_compute_micro with the probes'
 * per-core rates) splits into FLOP terms (linears at achievable_flops, attention
 * at attention_flops), element-wise terms and op terms; the forward and the
 * backward weigh them differently (backward: 2x the FLOPs, about the same
 * element-wise bytes), so the two measured times determine one factor on the
 * FLOP rates and one on elementwise_bw (a 2 x 2 solve, per core), with which
 * the composition reproduces the measured forward and backward. The op cost
 * stays the probe's. docs/time-model.md "In-situ calibration".
 *
 * Threads of one rank: a rank alone on the node runs every op on all its cores'
 * threads, which is less than the cores' summed single-thread rates (fork / join,
 * serial parts, GEMMs split thinner). The in-situ model's forward + backward runs
 * on one thread and on every core, interleaved, on the wall clock (the waiting a
 * thread does is the loss, and no thread's CPU clock counts it): thread_efficiency
 * = t(1 thread) / (cores x t(all cores)). docs/time-model.md "Threads of one rank". */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dt_comm.h"
#include "dt_dtrun_cli.h"
#include "dt_dtype.h"
#include "dt_lm.h"
#include "dt_hardware.h"
#include "dt_json.h"
#include "dt_ops.h"
#include "dt_optim.h"
#include "dt_plan.h"
#include "dt_timemodel.h"
#include "dt_clock.h"

/* The name the user invoked ("dtplan" when dtplan calibrate forwarded here, else
 * "dtrun"): the prefix of every message. */
static const char *cal_prog = "dtrun";

/* Default shapes: GPT-2 124M (models/catalog) at 256 tokens per micro-step. */
#define CAL_DEF_B 1
#define CAL_DEF_T 256
#define CAL_DEF_C 768
#define CAL_DEF_H 12
#define CAL_DEF_F 3072
#define CAL_DEF_V 50257
#define CAL_DEF_L 12
#define CAL_DEF_ADAM_PARAMS ((int64_t)1 << 22)
/* The classifier GEMMs are timed on at most this many vocabulary rows (the
 * rate of an N x V x C GEMM does not change past a few thousand columns; the
 * full V would take seconds) and scaled to the full vocabulary's FLOPs. */
#define CAL_VOCAB_PROBE 4096
/* AdamW probe: at most this many parameters (past the caches the rate is flat). */
#define CAL_ADAM_MAX ((int64_t)1 << 23)
/* Repeats: enough for a stable median within a time budget per run. */
#define CAL_MIN_REPS 9
#define CAL_MAX_REPS 61
#define CAL_BUDGET_S 3.0
#define CAL_OP_ELEMS 64
#define CAL_OP_CALLS 64      /* op-overhead calls per repeat (one call is ~0.3 us) */
#define CAL_LN_EPS 1e-5f
#define CAL_COPY_BYTES ((size_t)256 << 20)
#define CAL_COPY_REPS 5
/* The collectives: buffers past any last-level cache (a model's gradients are), so the
 * shared-memory transport streams from DRAM as in a step; a call takes ~0.1-0.3 s here. */
#define CAL_COLL_BYTES ((size_t)256 << 20)
#define CAL_COLL_REPS 5
#define CAL_COLL_TIMEOUT_S 600.0   /* dt_comm's deadline per call: the engine's default */
/* Device memory of a CPU rank: a quarter of host RAM (the cpu profile's share, docs/hardware.md). */
#define CAL_DEVICE_SHARE 4
#define CAL_FLOPS_PER_MAC 2.0
/* QK^T and PV, 2 FLOPs per multiply-add each, over the full T x T (the time
 * model's count, dt_model_block_fwd_flops_per_seq); backward = 2 x forward. */
#define CAL_ATTN_FLOPS_PER_TTC 4.0
#define CAL_BWD_OVER_FWD 2.0
/* While rank 0 measures, the other ranks wait without spinning (a busy MPI wait
 * would take a core from the measurement): polling period, ns. */
#define CAL_POLL_NS 1000000L
/* In situ: the engine's forward + backward on the plan's model cut to this many
 * blocks (the per-block terms are what the fit needs; more blocks only take
 * longer), the vocabulary cut to CAL_VOCAB_PROBE, the weights' init seeded. */
#define CAL_INSITU_MAX_LAYERS 2
#define CAL_INSITU_SEED 20240601ull
/* The fitted factors must stay within this range of the probes' rates; outside
 * it (a noisy or degenerate solve) one factor on FLOP and element-wise terms
 * together is fitted to forward + backward instead. */
#define CAL_FIT_MIN 0.25
#define CAL_FIT_MAX 4.0
/* Relative tolerance of the fit's self-check (rounding only: the model is linear in the times). */
#define CAL_FIT_TOL 1e-9
/* A written profile is a few KiB; the summary reads at most this much of it back. */
#define CAL_SOURCE_MAX 65536
/* Peak per core: 2 AVX-512 FMA units x 16 fp32 lanes x 2 FLOPs per cycle at the cpu
 * profile's 2.8 GHz (docs/hardware.md); an estimate, used only for MFU. */
#define CAL_PEAK_PER_CORE (2.8e9 * 2 * 16 * 2)

/* The probes' clock: the calling thread's CPU time, not the wall clock. Each probe runs
 * single-threaded on its core, so on a quiet machine the two agree; on a shared one the
 * wall clock also counts the slices the scheduler gave other processes, and the profile
 * came out up to 3x slow depending on the minute (docs/time-model.md "At GPT-2
 * 124M-774M"). DT_CALIBRATE_CLOCK=wall restores the wall clock (a profile of the machine
 * as loaded now). The all-reduce keeps MPI_Wtime (its ranks wait on each other). */
#define CAL_CLOCK CLOCK_THREAD_CPUTIME_ID
#define CAL_CLOCK_ENV "DT_CALIBRATE_CLOCK"
static clockid_t cal_clk = CAL_CLOCK;
/* called outside any parallel region (copy_bw, measure) before their timings */
static void cal_clock_init(void) {
    const char *c = getenv(CAL_CLOCK_ENV);
    cal_clk = c && strcmp(c, "wall") == 0 ? CLOCK_MONOTONIC : CAL_CLOCK;
}
static double now_s(void) {
    struct timespec t;
    clock_gettime(cal_clk, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The shapes the probes run (one micro-step of one rank). */
typedef struct {
    int64_t B, T, C, H, F, V, L;
    int64_t adam_params;      /* the optimizer shard one rank updates */
    char from[160];           /* where the shapes came from, for the profile's source */
    dt_model model;           /* the model whose forward + backward runs in situ */
    dt_attention attn;
    int has_model;
} cal_shape;

static void default_shape(cal_shape *s) {
    *s = (cal_shape){.B = CAL_DEF_B, .T = CAL_DEF_T, .C = CAL_DEF_C, .H = CAL_DEF_H, .F = CAL_DEF_F,
                     .V = CAL_DEF_V, .L = CAL_DEF_L, .adam_params = CAL_DEF_ADAM_PARAMS};
    snprintf(s->from, sizeof s->from, "GPT-2 124M shapes, %d tokens", CAL_DEF_B * CAL_DEF_T);
    dt_error e;
    s->has_model = dt_model_resolve("gpt2", &s->model, &e) == DT_OK && s->model.hidden == CAL_DEF_C;
    s->attn = DT_ATTN_FLASH;
}

static int shape_from_plan(const char *path, cal_shape *s, dt_error *err) {
    dt_plan p;
    if (dt_plan_load(path, &p, err)) return err->code;
    const dt_model *m = &p.model;
    if (m->n_head < 1 || m->hidden % m->n_head || m->ffn < 1 || m->vocab < 1)
        return dt_errorf(err, DT_EINVAL, "calibrate: plan %s: model %s has no GPT-2-style shapes to probe",
                         path, m->name);
    int64_t total = dt_model_params(m), W = p.parallel.world_size > 0 ? p.parallel.world_size : 1;
    int64_t shard = p.parallel.zero_stage == 0 ? total : (total + W - 1) / W;
    *s = (cal_shape){p.batch.micro_batch, p.batch.seq_len, m->hidden, m->n_head, m->ffn, m->vocab, m->n_layer,
                     shard < CAL_ADAM_MAX ? shard : CAL_ADAM_MAX, "", *m, p.activations.attention, 1};
    snprintf(s->from, sizeof s->from, "plan %.60s: %s, %lld tokens", path, m->name, (long long)(s->B * s->T));
    return DT_OK;
}

/* One core's buffers (allocated by the thread that uses them: first touch). */
typedef struct {
    float *x, *y, *z, *w, *dw, *bias, *dbias;   /* activations [N, max(3C, F, Vp)], weights */
    float *qkv, *dqkv, *att, *datt, *lse;
    float *mean, *rstd, *lnw, *lnb, *dlnw, *dlnb;
    uint16_t *w16;                               /* 16-bit weights for the conversion probe */
    float *params, *grads;
    dt_optim *opt;
    int ok;
} cal_bufs;

static float *filled(size_t n, int salt) {
    float *p = malloc(n * sizeof *p);
    if (p)
        for (size_t i = 0; i < n; i++) p[i] = (float)((i + (size_t)salt) % 17) * 1e-2f; /* small, finite */
    return p;
}

static int64_t max3(int64_t a, int64_t b, int64_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }
static int64_t vprobe(const cal_shape *s) { return s->V < CAL_VOCAB_PROBE ? s->V : CAL_VOCAB_PROBE; }
/* Weight elements of one block's 4 linears: C x 3C, C x C, C x F, F x C. */
static int64_t block_weights(const cal_shape *s) { return 4 * s->C * s->C + 2 * s->C * s->F; }

static void bufs_alloc(cal_bufs *b, const cal_shape *s) {
    memset(b, 0, sizeof *b);
    const int64_t N = s->B * s->T, wide = max3(3 * s->C, s->F, vprobe(s));
    const int64_t lin = wide * (s->C > s->F ? s->C : s->F);   /* largest linear / classifier weight */
    const size_t act = (size_t)(N * wide), wts = (size_t)(lin > block_weights(s) ? lin : block_weights(s));
    b->x = filled(act, 1), b->y = filled(act, 2), b->z = filled(act, 3);
    b->w = filled(wts, 4), b->dw = filled(wts, 5), b->bias = filled((size_t)wide, 6);
    b->dbias = filled((size_t)wide, 7);
    b->qkv = filled((size_t)(N * 3 * s->C), 8), b->dqkv = filled((size_t)(N * 3 * s->C), 9);
    b->att = filled((size_t)(N * s->C), 10), b->datt = filled((size_t)(N * s->C), 11);
    b->lse = filled((size_t)(N * s->H), 12);
    b->mean = filled((size_t)N, 13), b->rstd = filled((size_t)N, 14);
    b->lnw = filled((size_t)s->C, 15), b->lnb = filled((size_t)s->C, 16);
    b->dlnw = filled((size_t)s->C, 17), b->dlnb = filled((size_t)s->C, 18);
    b->w16 = calloc((size_t)block_weights(s), sizeof *b->w16);
    b->params = filled((size_t)s->adam_params, 19), b->grads = filled((size_t)s->adam_params, 20);
    dt_precision fp32;
    dt_error e;
    dt_precision_from_preset(DT_PREC_FP32, &fp32);
    int orc = dt_optim_create(&fp32, (size_t)s->adam_params, &b->opt, &e);
    b->ok = b->x && b->y && b->z && b->w && b->dw && b->bias && b->dbias && b->qkv && b->dqkv && b->att &&
            b->datt && b->lse && b->mean && b->rstd && b->lnw && b->lnb && b->dlnw && b->dlnb && b->w16 &&
            b->params && b->grads && orc == DT_OK;
}

static void bufs_free(cal_bufs *b) {
    float *f[] = {b->x, b->y, b->z, b->w, b->dw, b->bias, b->dbias, b->qkv, b->dqkv, b->att, b->datt,
                  b->lse, b->mean, b->rstd, b->lnw, b->lnb, b->dlnw, b->dlnb, b->params, b->grads};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
    free(b->w16);
    if (b->opt) dt_optim_free(b->opt);
}

/* ---- the probes: one repeat each, returning seconds ---- */

/* The block's 4 linears, forward then backward (engine/model/lm.c's order of shapes). */
static double probe_block_linears(cal_bufs *b, const cal_shape *s) {
    const int64_t N = s->B * s->T, C = s->C, F = s->F;
    const int64_t sh[4][2] = {{C, 3 * C}, {C, C}, {C, F}, {F, C}};
    double t0 = now_s();
    for (int i = 0; i < 4; i++) dt_op_linear_forward(b->z, b->x, b->w, b->bias, N, sh[i][0], sh[i][1]);
    for (int i = 3; i >= 0; i--)
        dt_op_linear_backward(b->y, b->dw, b->dbias, b->z, b->x, b->w, N, sh[i][0], sh[i][1], 0);
    return now_s() - t0;
}
static double block_linear_flops(const cal_shape *s) {
    return (1.0 + CAL_BWD_OVER_FWD) * CAL_FLOPS_PER_MAC * (double)(s->B * s->T) * (double)block_weights(s);
}

/* The tied classifier: logits = x wte^T, dx = dlogits wte, dwte += dlogits^T x,
 * on CAL_VOCAB_PROBE rows at most. */
static double probe_classifier(cal_bufs *b, const cal_shape *s) {
    const int64_t N = s->B * s->T, C = s->C, V = vprobe(s);
    double t0 = now_s();
    dt_op_gemm(0, 1, N, V, C, 1.0f, b->x, C, b->w, C, 0.0f, b->z, V);
    dt_op_gemm(0, 0, N, C, V, 1.0f, b->z, V, b->w, C, 0.0f, b->y, C);
    dt_op_gemm(1, 0, V, C, N, 1.0f, b->z, V, b->x, C, 1.0f, b->dw, C);
    return now_s() - t0;
}
static double classifier_flops(const cal_shape *s, int64_t V) {
    return (1.0 + CAL_BWD_OVER_FWD) * CAL_FLOPS_PER_MAC * (double)(s->B * s->T) * (double)V * (double)s->C;
}

/* 16-bit weights converted to fp32 before each use (forward and backward), as
 * the CPU engine does: one block's weights once. */
static double probe_convert(cal_bufs *b, const cal_shape *s, dt_dtype t) {
    double t0 = now_s();
    dt_convert(b->dw, DT_DTYPE_FP32, b->w16, t, (size_t)block_weights(s));
    return now_s() - t0;
}

static double probe_attention(cal_bufs *b, const cal_shape *s) {
    double t0 = now_s();
    dt_op_attention_forward_flash(b->att, b->lse, b->qkv, s->B, s->T, s->C, s->H);
    dt_op_attention_backward_flash(b->dqkv, b->datt, b->qkv, b->att, b->lse, s->B, s->T, s->C, s->H);
    return now_s() - t0;
}
static double attention_flops_of(const cal_shape *s) {
    return (1.0 + CAL_BWD_OVER_FWD) * CAL_ATTN_FLOPS_PER_TTC * (double)s->B * (double)s->T * (double)s->T *
           (double)s->C;
}

/* The block's element-wise ops: forward ln_1, residual, ln_2, GELU, residual;
 * backward GELU, ln_2, ln_1 (what dt_time_elementwise_elems counts). */
static double probe_elementwise(cal_bufs *b, const cal_shape *s) {
    const int64_t N = s->B * s->T, C = s->C, F = s->F;
    double t0 = now_s();
    dt_op_layernorm_forward(b->z, b->mean, b->rstd, b->x, b->lnw, b->lnb, N, C, CAL_LN_EPS);
    dt_op_residual_forward(b->att, b->x, b->z, N * C);
    dt_op_layernorm_forward(b->z, b->mean, b->rstd, b->att, b->lnw, b->lnb, N, C, CAL_LN_EPS);
    dt_op_gelu_forward(b->y, b->x, N * F);
    dt_op_residual_forward(b->datt, b->att, b->z, N * C);
    dt_op_gelu_backward(b->y, b->x, b->z, N * F);
    dt_op_layernorm_backward(b->datt, b->dlnw, b->dlnb, b->z, b->att, b->lnw, b->mean, b->rstd, N, C);
    dt_op_layernorm_backward(b->datt, b->dlnw, b->dlnb, b->z, b->x, b->lnw, b->mean, b->rstd, N, C);
    return now_s() - t0;
}
static double elementwise_bytes(const cal_shape *s) {
    dt_time_ew_elems ew;
    dt_time_elementwise_elems(s->C, s->F, s->V, &ew);
    return (double)(s->B * s->T) * (ew.block_fwd + ew.block_bwd) * ew.bytes_per_elem;
}

static double probe_op(cal_bufs *b) {
    double t0 = now_s();
    for (int i = 0; i < CAL_OP_CALLS; i++) dt_op_residual_forward(b->z, b->x, b->y, CAL_OP_ELEMS);
    return (now_s() - t0) / CAL_OP_CALLS;
}

static double probe_adamw(cal_bufs *b, const cal_shape *s, int64_t step) {
    const dt_adamw hp = {1e-4, 0.9, 0.999, 1e-8, 0.01};
    double t0 = now_s();
    dt_optim_update(b->opt, b->params, b->grads, 0, (size_t)s->adam_params, &hp, 1.0, 1, step);
    return now_s() - t0;
}

/* ---- in situ: the engine's own forward and backward ---- */

/* The model that runs in situ: the shapes' model, at most CAL_INSITU_MAX_LAYERS
 * blocks and a CAL_VOCAB_PROBE vocabulary (the fit is per term, not per layer). */
static dt_model insitu_model(const cal_shape *s) {
    dt_model m = s->model;
    if (m.n_layer > CAL_INSITU_MAX_LAYERS) m.n_layer = CAL_INSITU_MAX_LAYERS;
    m.vocab = vprobe(s);
    return m;
}

typedef struct {
    dt_lm *g;
    int32_t *tok, *tgt;   /* [B, T] */
} cal_engine;

/* One core's model (created by the thread that runs it: first touch). */
static int engine_create(cal_engine *x, const cal_shape *s, int salt) {
    memset(x, 0, sizeof *x);
    if (!s->has_model) return 1;
    const dt_model m = insitu_model(s);
    /* params + grads (fp32) of every core's model within the profile's device share of host memory */
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE), cores = sysconf(_SC_NPROCESSORS_ONLN);
    double need = 2.0 * sizeof(float) * (double)dt_model_params(&m) * (double)(cores > 0 ? cores : 1);
    if (pages > 0 && psz > 0 && need > (double)pages * (double)psz / CAL_DEVICE_SHARE) return 1;
    const size_t n = (size_t)(s->B * s->T);
    dt_precision fp32;
    dt_error e;
    dt_precision_from_preset(DT_PREC_FP32, &fp32);
    if (dt_lm_create(&m, &fp32, s->B, s->T, 0, s->attn, &x->g, &e)) return 1;
    if (dt_lm_init_random(x->g, CAL_INSITU_SEED, &e)) return 1;
    x->tok = malloc(n * sizeof *x->tok), x->tgt = malloc(n * sizeof *x->tgt);
    if (!x->tok || !x->tgt) return 1;
    for (size_t i = 0; i < n; i++) {   /* any valid tokens: the kernels' work does not depend on them */
        x->tok[i] = (int32_t)((i * 7 + (size_t)salt) % (size_t)m.vocab);
        x->tgt[i] = (int32_t)((i * 11 + 3) % (size_t)m.vocab);
    }
    return 0;
}
static void engine_free(cal_engine *x) {
    if (x->g) dt_lm_free(x->g);
    free(x->tok), free(x->tgt);
}
static double engine_forward(cal_engine *x) {
    float loss;
    dt_error e;
    double t0 = now_s();
    int rc = dt_lm_forward(x->g, x->tok, x->tgt, &loss, &e);
    return rc ? -1.0 : now_s() - t0;
}
static double engine_backward(cal_engine *x) {
    dt_error e;
    double t0 = now_s();
    int rc = dt_lm_backward(x->g, 1.0f, &e);
    double t = now_s() - t0;
    dt_lm_zero_grad(x->g);   /* outside the timing, as dtrun zeroes once per step */
    return rc ? -1.0 : t;
}

/* The time model's forward and backward of the in-situ model on one core with
 * these rates: dt_time_compute_micro on a one-rank plan (the same code that
 * predicts the runs, so the fit below is against the model's own composition). */
static int compose(const cal_shape *s, double R, double Ra, double E, double k, dt_time_compute *out) {
    dt_plan p;
    dt_error e;
    memset(&p, 0, sizeof p);
    p.model = insitu_model(s);
    p.cluster.nodes = p.cluster.gpus_per_node = p.parallel.world_size = 1;
    p.cluster.device = p.cluster.hw.device = DT_DEVICE_CPU;
    p.parallel.reduce_bucket_elems = 1;
    p.batch.micro_batch = s->B, p.batch.grad_accum = 1, p.batch.seq_len = s->T;
    p.batch.global_batch = s->B;
    dt_precision_from_preset(DT_PREC_FP32, &p.precision);
    dt_hardware *h = &p.cluster.hw;
    h->achievable_flops[DT_DTYPE_FP32] = R, h->attention_flops = Ra, h->elementwise_bw = E;
    h->op_overhead_s = k;
    h->mem_bw = h->h2d_bw = h->cpu_adam_params_per_s = h->nvme_bw = 1.0;   /* unused by the compute terms */
    return dt_time_compute_micro(&p, out, &e);
}

/* The fit of one core: factors x (on the FLOP terms' times) and y (on the
 * element-wise terms' times) with
 *   fwd_measured = x F_f + y E_f + O_f,  bwd_measured = x F_b + y E_b + O_b
 * where F, E, O are the composition's FLOP, element-wise and op parts. */
typedef struct {
    double x, y;               /* time factors: rates are divided by them */
    double fwd_s, bwd_s;       /* measured (median) */
    double fwd_pred_s, bwd_pred_s;   /* the probes' composition before the fit */
    int joint;                 /* 1: one factor on both (the 2 x 2 solve was out of range) */
} cal_fit;

static int fit_core(const cal_shape *s, double R, double Ra, double E, double k, double tf, double tb,
                    cal_fit *f) {
    dt_time_compute fl, fe, all;
    if (compose(s, R, Ra, 0.0, 0.0, &fl) || compose(s, R, Ra, E, 0.0, &fe) || compose(s, R, Ra, E, k, &all))
        return 1;
    const double Ff = fl.fwd_s, Fb = fl.bwd_s, Ef = fe.fwd_s - fl.fwd_s, Eb = fe.bwd_s - fl.bwd_s;
    const double Of = all.fwd_s - fe.fwd_s, Ob = all.bwd_s - fe.bwd_s;
    const double rf = tf - Of, rb = tb - Ob, det = Ff * Eb - Fb * Ef;
    *f = (cal_fit){1.0, 1.0, tf, tb, all.fwd_s, all.bwd_s, 0};
    if (tf <= 0 || tb <= 0 || Ff + Ef <= 0) return 1;
    double x = det != 0 ? (rf * Eb - rb * Ef) / det : 0, y = det != 0 ? (Ff * rb - Fb * rf) / det : 0;
    if (!(x >= CAL_FIT_MIN && x <= CAL_FIT_MAX && y >= CAL_FIT_MIN && y <= CAL_FIT_MAX)) {
        x = y = (rf + rb) / (Ff + Fb + Ef + Eb);
        f->joint = 1;
        if (!(x >= CAL_FIT_MIN && x <= CAL_FIT_MAX)) return 1;
    }
    f->x = x, f->y = y;
    /* the composition with the fitted rates must give the measured times back */
    dt_time_compute chk;
    if (compose(s, R / x, Ra / x, E / y, k, &chk)) return 1;
    if (!f->joint && (fabs(chk.fwd_s - tf) > CAL_FIT_TOL * tf || fabs(chk.bwd_s - tb) > CAL_FIT_TOL * tb)) return 1;
    if (f->joint && fabs(chk.fwd_s + chk.bwd_s - tf - tb) > CAL_FIT_TOL * (tf + tb)) return 1;
    return 0;
}

enum { P_LIN, P_CLS, P_CVB, P_CVH, P_ATT, P_EW, P_OP, P_ADAM, P_FWD, P_BWD, P_COUNT };

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}


/* What the node's cores reach together (sums over cores) and per op. */
typedef struct {
    double linear_flops[3];   /* fp32, bf16, fp16: linears + classifier at the model's mix */
    double attention_flops, elementwise_bw, op_s, adam_params_per_s;
    int cores, reps;
    int insitu;                 /* 1: the rates were fitted to the engine's forward + backward */
    cal_fit fit;                /* the median core's fit (for the profile's source) */
    int joint_cores;            /* cores whose fit fell back to one factor */
    int fitted;                 /* cores fitted */
    double thread_efficiency;   /* one rank on all cores: 0 = not measured */
    double thread_t1_s, thread_tc_s;   /* its medians: one thread, all cores (wall) */
} cal_rates;

/* The in-situ model's forward + backward on the wall clock, with `threads` OpenMP
 * threads (the engine's ops and the GEMM layer read omp_get_max_threads). */
static double fwd_bwd_wall(cal_engine *x, int threads) {
    float loss;
    dt_error e;
    omp_set_num_threads(threads);
    double t0 = dt_clock_s();
    int rc = dt_lm_forward(x->g, x->tok, x->tgt, &loss, &e) || dt_lm_backward(x->g, 1.0f, &e);
    double t = dt_clock_s() - t0;
    dt_lm_zero_grad(x->g);
    return rc ? -1.0 : t;
}

/* thread_efficiency = t(1 thread) / (cores x t(cores threads)), medians of `reps`
 * interleaved pairs after one warm-up of each; 0 when it cannot run. */
static void measure_threads(const cal_shape *s, int cores, int reps, cal_rates *out) {
    cal_engine x;
    memset(&x, 0, sizeof x);
    double *t1 = calloc((size_t)reps, sizeof *t1), *tc = calloc((size_t)reps, sizeof *tc);
    const int saved = omp_get_max_threads();
    int ok = t1 && tc && cores >= 2 && engine_create(&x, s, 0) == 0;
    if (ok) ok = fwd_bwd_wall(&x, 1) > 0 && fwd_bwd_wall(&x, cores) > 0;   /* warm-up: JIT, first touch */
    for (int r = 0; r < reps && ok; r++) {
        t1[r] = fwd_bwd_wall(&x, 1);
        tc[r] = fwd_bwd_wall(&x, cores);
        ok = t1[r] > 0 && tc[r] > 0;
    }
    omp_set_num_threads(saved);
    if (ok) {
        out->thread_t1_s = median(t1, reps), out->thread_tc_s = median(tc, reps);
        double eff = out->thread_t1_s / ((double)cores * out->thread_tc_s);
        out->thread_efficiency = eff > 1.0 ? 1.0 : eff;   /* more than linear is cache luck, not a rate */
    }
    engine_free(&x);
    free(t1), free(tc);
}

static int measure(const cal_shape *s, cal_rates *out) {
    const int cores = omp_get_num_procs() > 0 ? omp_get_num_procs() : 1;
    double *t = calloc((size_t)cores * P_COUNT * CAL_MAX_REPS, sizeof *t);
    int reps = CAL_MIN_REPS, bad = 0, no_engine = 0;   /* shared: every thread sees one verdict */
    if (!t) return 1;
    memset(out, 0, sizeof *out);
    cal_clock_init();
#pragma omp parallel num_threads(cores) shared(bad, reps)
    {
        const int me = omp_get_thread_num();
        cal_bufs b;
        cal_engine eng;
        bufs_alloc(&b, s);
        if (!b.ok) {
#pragma omp atomic write
            bad = 1;
        }
        if (engine_create(&eng, s, me)) {   /* no in-situ fit then: the probes' rates as they are */
#pragma omp atomic write
            no_engine = 1;
        }
#pragma omp barrier
        double warm = 0;
        if (!bad) {   /* warm-up: threads, caches, first touch; sizes the repeats */
            double w0 = now_s();
            probe_block_linears(&b, s), probe_classifier(&b, s), probe_convert(&b, s, DT_DTYPE_BF16);
            probe_convert(&b, s, DT_DTYPE_FP16), probe_attention(&b, s), probe_elementwise(&b, s);
            probe_op(&b), probe_adamw(&b, s, 1);
            if (!no_engine) engine_forward(&eng), engine_backward(&eng);
            warm = now_s() - w0;
        }
#pragma omp barrier
#pragma omp single
        {
            int r = warm > 0 ? (int)(CAL_BUDGET_S / warm) : CAL_MAX_REPS;
            reps = r < CAL_MIN_REPS ? CAL_MIN_REPS : (r > CAL_MAX_REPS ? CAL_MAX_REPS : r);
        }
        for (int r = 0; r < reps && !bad; r++) {
            double *tr = t + ((size_t)me * P_COUNT) * CAL_MAX_REPS;
            /* each class starts on every core together (a barrier before each) */
#pragma omp barrier
            tr[P_LIN * CAL_MAX_REPS + r] = probe_block_linears(&b, s);
#pragma omp barrier
            tr[P_CLS * CAL_MAX_REPS + r] = probe_classifier(&b, s);
#pragma omp barrier
            tr[P_CVB * CAL_MAX_REPS + r] = probe_convert(&b, s, DT_DTYPE_BF16);
            tr[P_CVH * CAL_MAX_REPS + r] = probe_convert(&b, s, DT_DTYPE_FP16);
#pragma omp barrier
            tr[P_ATT * CAL_MAX_REPS + r] = probe_attention(&b, s);
#pragma omp barrier
            tr[P_EW * CAL_MAX_REPS + r] = probe_elementwise(&b, s);
#pragma omp barrier
            tr[P_OP * CAL_MAX_REPS + r] = probe_op(&b);
#pragma omp barrier
            tr[P_ADAM * CAL_MAX_REPS + r] = probe_adamw(&b, s, 2 + r);
#pragma omp barrier
            if (!no_engine) tr[P_FWD * CAL_MAX_REPS + r] = engine_forward(&eng);
#pragma omp barrier
            if (!no_engine) tr[P_BWD * CAL_MAX_REPS + r] = engine_backward(&eng);
        }
        bufs_free(&b);
        engine_free(&eng);
    }
    if (bad) { free(t); return 1; }
    /* per core: the median repeat; node: the slowest core's rates times the number
     * of cores — data-parallel ranks meet in a collective every step, so the step
     * ends when the rank on the slowest core does (a sum over cores would price the
     * average core); the op cost (what one rank pays per op) the median over the cores */
    double r_lin[3] = {INFINITY, INFINITY, INFINITY}, r_att = INFINITY, r_ew = INFINITY, r_adam = INFINITY;
    const double Vfull = (double)s->V, Vp = (double)vprobe(s), L = (double)s->L;
    const double conv_per_use = 2.0 * (L * (double)block_weights(s) + Vfull * (double)s->C); /* fwd + bwd */
    double op_med[512], xs[512];
    cal_fit fits[512];
    int nop = 0, nfit = 0;
    for (int c = 0; c < cores; c++) {
        double m[P_COUNT];
        for (int k = 0; k < P_COUNT; k++) m[k] = median(t + ((size_t)c * P_COUNT + k) * CAL_MAX_REPS, reps);
        /* one micro-step's linears: L blocks + the classifier over the full vocabulary */
        double t_lin = L * m[P_LIN] + m[P_CLS] * Vfull / Vp;
        double flops = L * block_linear_flops(s) + classifier_flops(s, s->V);
        double per_conv[2] = {m[P_CVB] / (double)block_weights(s), m[P_CVH] / (double)block_weights(s)};
        /* in situ: scale this core's FLOP and element-wise times to the engine's */
        cal_fit f = {1.0, 1.0, 0, 0, 0, 0, 0};
        if (!no_engine &&
            fit_core(s, flops / t_lin, attention_flops_of(s) / m[P_ATT], elementwise_bytes(s) / m[P_EW], m[P_OP],
                     m[P_FWD], m[P_BWD], &f) == 0 && nfit < 512) {
            xs[nfit] = f.x, fits[nfit++] = f;
        } else {
            f.x = f.y = 1.0;
        }
        t_lin *= f.x;
        r_lin[0] = fmin(r_lin[0], flops / t_lin);
        for (int k = 0; k < 2; k++) r_lin[1 + k] = fmin(r_lin[1 + k], flops / (t_lin + conv_per_use * per_conv[k]));
        r_att = fmin(r_att, attention_flops_of(s) / (m[P_ATT] * f.x));
        r_ew = fmin(r_ew, elementwise_bytes(s) / (m[P_EW] * f.y));
        r_adam = fmin(r_adam, (double)s->adam_params / m[P_ADAM]);
        if (nop < 512) op_med[nop++] = m[P_OP];
    }
    for (int k = 0; k < 3; k++) out->linear_flops[k] = cores * r_lin[k];
    out->attention_flops = cores * r_att;
    out->elementwise_bw = cores * r_ew;
    out->adam_params_per_s = cores * r_adam;
    out->op_s = median(op_med, nop);
    out->fitted = nfit;
    out->insitu = nfit == cores;   /* every core fitted (else a mix: reported as such) */
    if (nfit > 0) {   /* report the core with the median FLOP factor */
        double mx = median(xs, nfit);
        for (int i = 0; i < nfit; i++) {
            if (fits[i].x == mx) out->fit = fits[i];
            out->joint_cores += fits[i].joint;
        }
        if (out->fit.fwd_s == 0) out->fit = fits[0];   /* even count: the mean of two is no core's */
    }
    out->cores = cores;
    out->reps = reps;
    free(t);
    if (!no_engine) measure_threads(s, cores, reps, out);
    return 0;
}

/* Ranks other than 0 wait here, asleep, until rank 0 has measured. */
static void quiet_wait(void) {
    MPI_Request q;
    int done = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &q);
    struct timespec ts = {0, CAL_POLL_NS};
    for (MPI_Test(&q, &done, MPI_STATUS_IGNORE); !done; MPI_Test(&q, &done, MPI_STATUS_IGNORE))
        nanosleep(&ts, NULL);
}

static double copy_bw(void) {
    cal_clock_init();
    char *s = malloc(CAL_COPY_BYTES), *d = malloc(CAL_COPY_BYTES);
    if (!s || !d) return 0;
    memset(s, 1, CAL_COPY_BYTES);
    memset(d, 0, CAL_COPY_BYTES);
    double best = 1e30;
    volatile char sink = 0;
    for (int r = 0; r < CAL_COPY_REPS; r++) {
        s[r] = (char)r;
        double t0 = now_s();
        memcpy(d, s, CAL_COPY_BYTES);
        double t = now_s() - t0;
        sink += d[r];
        if (t < best) best = t;
    }
    (void)sink;
    free(s), free(d);
    return 2.0 * (double)CAL_COPY_BYTES / best; /* read + write */
}

/* nccl-tests busbw (bytes/s) of the engine's own collectives; 0: not measured. */
typedef struct {
    double allreduce, reduce_scatter, allgather;
} cal_busbw;

/* One collective k (0 all-reduce, 1 reduce-scatter, 2 all-gather) of the whole buffer
 * through dt_comm; the slowest rank's time. */
static double coll_once(dt_comm *c, int k, float *a, float *b, size_t N, size_t blk) {
    dt_error e;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int rc = k == 0 ? dt_comm_allreduce(c, a, N, DT_DTYPE_FP32, DT_RED_SUM, &e)
           : k == 1 ? dt_comm_reduce_scatter(c, a, b, blk, DT_DTYPE_FP32, DT_RED_SUM, &e)
                    : dt_comm_allgather(c, b, a, blk, DT_DTYPE_FP32, &e);
    double t = rc ? -1.0 : MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
}

/* The collectives among the ranks of MPI_COMM_WORLD as a ZeRO step runs them (dt_comm:
 * non-blocking calls in DT_COMM_PIECE_BYTES pieces, the engine's MPI settings), on
 * CAL_COLL_BYTES buffers of fp32 zeros (sums stay finite): the median of CAL_COLL_REPS
 * after a warm-up, interleaved. Every rank takes part. */
static void collective_busbw(int *nranks, cal_busbw *out) {
    memset(out, 0, sizeof *out);
    MPI_Comm_size(MPI_COMM_WORLD, nranks);
    const size_t N = CAL_COLL_BYTES / sizeof(float), blk = N / (size_t)*nranks;
    float *a = calloc(N, sizeof *a), *b = calloc(blk, sizeof *b);
    dt_comm *c = NULL;
    dt_error e;
    int ok = a && b && blk > 0 && dt_comm_init_mpi(&c, CAL_COLL_TIMEOUT_S, &e) == DT_OK;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);   /* all or none */
    double t[3][CAL_COLL_REPS];
    for (int r = -1; r < CAL_COLL_REPS && ok; r++)
        for (int k = 0; k < 3 && ok; k++) {
            double s = coll_once(c, k, a, b, N, blk);
            ok = s > 0;
            if (r >= 0) t[k][r] = s;
        }
    if (ok) {
        const double n = *nranks, S = (double)(blk * (size_t)*nranks) * sizeof(float);
        out->allreduce = 2.0 * (n - 1.0) / n * S / median(t[0], CAL_COLL_REPS);
        out->reduce_scatter = (n - 1.0) / n * S / median(t[1], CAL_COLL_REPS);
        out->allgather = (n - 1.0) / n * S / median(t[2], CAL_COLL_REPS);
    }
    if (c) dt_comm_free(c);
    free(a), free(b);
}

/* ---- the runtime footprint (docs/memory-model.md "The CPU runtime term") ----
 * The resident memory of this process once it has run what a rank runs — the engine's
 * kernels on every thread (OpenMP, OpenBLAS / oneDNN buffers), MPI initialised and
 * through a collective — with every buffer it allocated for that freed again: VmRSS of
 * /proc/self/status (proc(5)), a figure the kernel measured. Without MPI the part MPI_Init
 * and the collective added (measured around them) is left out. */
static int64_t vm_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %lld kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib >= 0 ? (int64_t)kib * 1024 : -1;
}

typedef struct {
    int64_t before_mpi, after_mpi, after_probes;   /* VmRSS, bytes; -1: not read */
} cal_rss;

/* runtime_bytes (no MPI) and runtime_mpi_bytes (0: not measured) from the readings */
static void runtime_of(const cal_rss *r, int mpi, int64_t *single, int64_t *with_mpi) {
    *single = *with_mpi = 0;
    if (r->after_probes <= 0) return;
    const int64_t mpi_part = mpi && r->before_mpi > 0 && r->after_mpi > r->before_mpi ? r->after_mpi - r->before_mpi : 0;
    *single = r->after_probes - mpi_part;
    if (mpi) *with_mpi = r->after_probes;
}

static int write_profile(const char *path, const dt_hardware *base, const cal_shape *sh, const cal_rates *k,
                         double bw, const cal_busbw *busbw, int nranks, const cal_rss *rss) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t host = pages > 0 && psz > 0 ? (int64_t)pages * psz : base->host_mem_bytes;
    double peak = (double)(cores > 0 ? cores : 1) * CAL_PEAK_PER_CORE;
    const double *ach = k->linear_flops;
    cJSON *o = cJSON_CreateObject(), *pk = cJSON_CreateObject(), *ac = cJSON_CreateObject();
    cJSON *nets = cJSON_CreateObject();
    static const char *const dn[3] = {"fp32", "bf16", "fp16"};
    for (int i = 0; i < 3; i++) {
        cJSON_AddNumberToObject(pk, dn[i], peak > ach[i] ? peak : ach[i]);
        cJSON_AddNumberToObject(ac, dn[i], ach[i]);
    }
    char fit[400] = "no in-situ fit (the engine's model could not run at these shapes)";
    if (k->fit.fwd_s > 0)
        snprintf(fit, sizeof fit,
                 "%s: engine forward %.3f ms, backward %.3f ms on one core (%d of %d cores fitted) vs the probes' "
                 "composition %.3f / %.3f ms; FLOP-term times x%.3f, element-wise x%.3f%s",
                 k->insitu ? "in situ" : "in situ (partial)", k->fit.fwd_s * 1e3, k->fit.bwd_s * 1e3,
                 k->fitted, k->cores, k->fit.fwd_pred_s * 1e3, k->fit.bwd_pred_s * 1e3,
                 k->fit.x, k->fit.y, k->fit.joint ? " (one factor: the 2x2 solve was out of range)" : "");
    char thr[200] = "";
    if (k->thread_efficiency > 0)
        snprintf(thr, sizeof thr, "; threads of one rank: engine forward + backward %.3f ms on 1 thread, %.3f ms on %d "
                 "(wall clock), efficiency %.3f", k->thread_t1_s * 1e3, k->thread_tc_s * 1e3, k->cores,
                 k->thread_efficiency);
    char src[1400];
    snprintf(src, sizeof src,
             DT_CALIBRATE_SOURCE_PREFIX ": the engine's kernels at %s (B=%lld T=%lld C=%lld H=%lld F=%lld V=%lld), one "
             "thread per core on all %d cores at once, median of %d interleaved repeats per core (%s time): linears + "
             "classifier (16-bit: weights converted first), flash attention fwd+bwd, layernorm/residual/gelu "
             "fwd+bwd, a %d-element residual add, AdamW on %lld params; memcpy %zu MiB; the engine's all-reduce, "
             "reduce-scatter and all-gather (dt_comm: non-blocking, in pieces) of %zu MiB on %d rank(s), median of %d; "
             "%s%s; the rest from the cpu profile",
             sh->from, (long long)sh->B, (long long)sh->T, (long long)sh->C, (long long)sh->H, (long long)sh->F,
             (long long)sh->V, k->cores, k->reps, cal_clk == CLOCK_MONOTONIC ? "wall-clock" : "thread CPU",
             CAL_OP_ELEMS, (long long)sh->adam_params, CAL_COPY_BYTES >> 20, CAL_COLL_BYTES >> 20,
             nranks, CAL_COLL_REPS, fit, thr);
    cJSON_AddStringToObject(o, "format", "dtplan.hardware/1");
    cJSON_AddStringToObject(o, "name", "local");
    cJSON_AddStringToObject(o, "source", src);
    cJSON_AddStringToObject(o, "device", "cpu");
    cJSON_AddNumberToObject(o, "device_mem_bytes", (double)(host / CAL_DEVICE_SHARE));
    cJSON_AddNumberToObject(o, "reserve_bytes", (double)base->reserve_bytes);
    cJSON_AddItemToObject(o, "peak_flops", pk);
    cJSON_AddItemToObject(o, "achievable_flops", ac);
    cJSON_AddNumberToObject(o, "mem_bw", bw);
    cJSON_AddNumberToObject(o, "intra_busbw", busbw->allreduce > 0 ? busbw->allreduce : base->intra_busbw);
    if (busbw->reduce_scatter > 0) cJSON_AddNumberToObject(o, "intra_busbw_reduce_scatter", busbw->reduce_scatter);
    if (busbw->allgather > 0) cJSON_AddNumberToObject(o, "intra_busbw_allgather", busbw->allgather);
    cJSON_AddNumberToObject(o, "intra_alpha_s", base->intra_alpha_s);
    cJSON_AddStringToObject(o, "default_interconnect", base->interconnect);
    /* the network table is not measurable from one machine: the cpu profile's */
    static const char *const links[] = {"10Gb", "25Gb", "100Gb", "200Gb", "400Gb"};
    for (int i = 0; i < 5; i++) {
        dt_hardware h;
        dt_error e;
        if (dt_hardware_load("cpu", links[i], &h, &e)) continue;
        cJSON *n = cJSON_CreateObject();
        cJSON_AddNumberToObject(n, "busbw", h.inter_busbw);
        cJSON_AddNumberToObject(n, "alpha_s", h.inter_alpha_s);
        cJSON_AddItemToObject(nets, links[i], n);
    }
    cJSON_AddItemToObject(o, "interconnects", nets);
    cJSON_AddNumberToObject(o, "h2d_bw", bw / 2.0); /* one-way copy */
    cJSON_AddNumberToObject(o, "host_mem_bytes", (double)host);
    cJSON_AddNumberToObject(o, "cpu_adam_params_per_s", k->adam_params_per_s);
    cJSON_AddNumberToObject(o, "nvme_bw", base->nvme_bw);
    cJSON_AddNumberToObject(o, "nvme_bytes", (double)base->nvme_bytes);
    if (k->attention_flops > 0) cJSON_AddNumberToObject(o, "attention_flops", k->attention_flops);
    if (k->op_s > 0) cJSON_AddNumberToObject(o, "op_overhead_s", k->op_s);
    if (k->elementwise_bw > 0) cJSON_AddNumberToObject(o, "elementwise_bw", k->elementwise_bw);
    if (k->thread_efficiency > 0) {
        cJSON_AddNumberToObject(o, "thread_efficiency", k->thread_efficiency);
        cJSON_AddNumberToObject(o, "thread_cores", k->cores);
    }
    int64_t rt1, rtm;
    runtime_of(rss, nranks > 1, &rt1, &rtm);
    if (rt1 > 0) cJSON_AddNumberToObject(o, "runtime_bytes", (double)rt1);
    if (rtm > 0) cJSON_AddNumberToObject(o, "runtime_mpi_bytes", (double)rtm);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return 1;
    dt_error we = {0};
    int wrc = dt_json_write_file_atomic(path, text, &we);   /* temporary, fsync, rename */
    free(text);
    if (wrc) {
        fprintf(stderr, "%s: calibrate: cannot write '%s': %s\n", cal_prog, path, we.msg);
        return 1;
    }
    dt_hardware check;
    dt_error e;
    if (dt_hardware_load(path, NULL, &check, &e)) {
        fprintf(stderr, "%s: calibrate: wrote an unloadable profile: %s\n", cal_prog, e.msg);
        return 1;
    }
    return 0;
}

/* Re-runs this command under `mpirun -n 2` so the collective can be measured. */
static int relaunch_under_mpirun(const char *out, const char *plan) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = '\0';
    setenv("DT_CALIBRATE_CHILD", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    if (strchr(out, '\'') || (plan && strchr(plan, '\''))) return -1;   /* not quotable below */
    char cmd[12600];
    snprintf(cmd, sizeof cmd, "mpirun -n 2 --oversubscribe --bind-to none '%s' calibrate -o '%s'%s%s%s >/dev/null 2>&1", self, out,
             plan ? " --plan '" : "", plan ? plan : "", plan ? "'" : "");
    return system(cmd);
}

/* Prints the one-line summary of a written profile. */
static void print_summary(const char *out, const dt_hardware *h, int nranks) {
    printf("calibrate: wrote %s (fp32 %.1f, bf16 %.1f, fp16 %.1f GFLOP/s; attention %.1f GFLOP/s; op %.2f us; "
           "element-wise %.1f GB/s; AdamW %.0f M params/s; memcpy %.1f GB/s; busbw all-reduce %.2f, "
           "reduce-scatter %.2f, all-gather %.2f GB/s on %d rank(s); runtime footprint %.1f MiB, %.1f MiB with MPI)\n",
           out, h->achievable_flops[0] / 1e9, h->achievable_flops[1] / 1e9, h->achievable_flops[2] / 1e9,
           h->attention_flops / 1e9, h->op_overhead_s * 1e6, h->elementwise_bw / 1e9, h->cpu_adam_params_per_s / 1e6,
           h->mem_bw / 1e9, h->intra_busbw / 1e9, (h->intra_busbw_rs > 0 ? h->intra_busbw_rs : h->intra_busbw) / 1e9,
           (h->intra_busbw_ag > 0 ? h->intra_busbw_ag : h->intra_busbw) / 1e9, nranks,
           (double)h->runtime_bytes / (1 << 20),
           (double)h->runtime_mpi_bytes / (1 << 20));
    /* the in-situ fit, as the profile's source states it (the profile may come from the mpirun child) */
    FILE *f = fopen(out, "r");
    char *text = f ? calloc(1, CAL_SOURCE_MAX) : NULL;
    if (text && fread(text, 1, CAL_SOURCE_MAX - 1, f) > 0) {
        cJSON *o = cJSON_Parse(text);
        const cJSON *src = o ? cJSON_GetObjectItemCaseSensitive(o, "source") : NULL;
        const char *fit = cJSON_IsString(src) ? strstr(src->valuestring, "in situ") : NULL;
        const char *end = fit ? strstr(fit, "; the rest") : NULL;
        if (fit && end) printf("calibrate: %.*s\n", (int)(end - fit), fit);
        cJSON_Delete(o);
    }
    free(text);
    if (f) fclose(f);
}

int dt_cmd_calibrate(const char *prog, int argc, char **argv) {
    cal_prog = prog;
    const char *out = NULL, *plan = NULL;
    int no_mpi = 0;
    for (int i = 1; i < argc; i++) {   /* --device cuda: the GPU's calibration (calibrate_gpu.c) */
        if (strcmp(argv[i], "--device")) continue;
        if (i + 1 < argc && !strcmp(argv[i + 1], "cuda")) return dt_cmd_calibrate_gpu(prog, argc, argv);
        if (i + 1 >= argc || strcmp(argv[i + 1], "cpu")) {
            fprintf(stderr, "%s: calibrate: --device '%s': expected cpu (the default) or cuda\n", cal_prog,
                    i + 1 < argc ? argv[i + 1] : "");
            return 2;
        }
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s calibrate -o configs/hardware/local.json [--plan PLAN.json] [--no-mpi] [--device cpu]\n"
                   "       %s calibrate --device cuda -o PROFILE.json [--base PROFILE] [--gpu N] [--name NAME]\n"
                   "  times the CPU engine's kernels (linears, attention, element-wise, AdamW), one thread per\n"
                   "  core on every core, at GPT-2 124M's shapes or the plan's (micro-batch x sequence, hidden,\n"
                   "  heads, ffn, vocab), plus memcpy and the bus bandwidth of the engine's all-reduce,\n"
                   "  reduce-scatter and all-gather between 2 local MPI ranks; fits the FLOP and element-wise\n"
                   "  rates so the time model reproduces the engine's own forward and backward, run in situ on\n"
                   "  every core, and measures what one rank's threads keep of them; writes a hardware profile\n"
                   "  (docs/hardware.md); --device cuda measures a GPU instead (--device cuda --help)\n",
                   cal_prog, cal_prog);
            return 0;
        } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--plan") && i + 1 < argc) {
            plan = argv[++i];
        } else if (!strcmp(argv[i], "--no-mpi")) {
            no_mpi = 1;
        } else if (!strcmp(argv[i], "--device")) {   /* cpu: checked above */
            i++;
        } else if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--plan")) && i + 1 == argc) {
            fprintf(stderr, "%s: calibrate: %s needs a value (a file path)\n", cal_prog, argv[i]);
            return 2;
        } else {
            fprintf(stderr, "%s: calibrate: unknown option '%s' (usage: %s calibrate -o local.json "
                            "[--plan PLAN.json] [--no-mpi])\n", cal_prog, argv[i], cal_prog);
            return 2;
        }
    }
    if (!out) {
        fprintf(stderr, "%s: calibrate: -o PATH is required (example: -o configs/hardware/local.json)\n", cal_prog);
        return 2;
    }
    if (strlen(out) > 4000 || (plan && strlen(plan) > 4000)) {
        fprintf(stderr, "%s: calibrate: -o or --plan path too long\n", cal_prog);
        return 2;
    }
    /* -o: a new file in a writable folder or an earlier calibration, said now, not after
     * the 10-30 s of measuring; a user's file is never replaced */
    int orc = dt_calibrate_check_out(cal_prog, out);
    if (orc) return orc;
    dt_hardware base;
    dt_error e;
    cal_shape shape;
    if (dt_hardware_load("cpu", NULL, &base, &e)) {
        fprintf(stderr, "%s: calibrate: %s\n", cal_prog, e.msg);
        return 1;
    }
    default_shape(&shape);
    if (plan && shape_from_plan(plan, &shape, &e)) {   /* bad input: before any measuring */
        fprintf(stderr, "%s: calibrate: %s\n", cal_prog, e.msg);
        return 2;
    }
    int under_mpi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE");
    if (!under_mpi && !getenv("DT_CALIBRATE_CHILD"))   /* the user's process: say what the wait is */
        fprintf(stderr, "%s: calibrate: timing the engine's kernels (%s) on every core%s (10-30 s) ...\n",
                cal_prog, shape.from, no_mpi ? "" : ", and the collectives between 2 MPI ranks");
    if (!under_mpi && !no_mpi && !getenv("DT_CALIBRATE_CHILD")) {
        if (relaunch_under_mpirun(out, plan) == 0) {
            dt_hardware h;
            if (dt_hardware_load(out, NULL, &h, &e) == DT_OK) {
                print_summary(out, &h, 2);
                return 0;
            }
        }
        fprintf(stderr, "%s: calibrate: mpirun -n 2 failed; measuring without MPI (intra_busbw from the cpu profile)\n", cal_prog);
    }
    int rank = 0, nranks = 1;
    cal_busbw busbw = {0, 0, 0};
    cal_rss rss = {vm_rss_bytes(), -1, -1};
    if (under_mpi) {
        dt_comm_mpi_defaults();   /* the engine's MPI settings, before MPI reads them */
        MPI_Init(NULL, NULL);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        collective_busbw(&nranks, &busbw);
    }
    rss.after_mpi = vm_rss_bytes();
    int rc = 0;
    if (rank == 0) {
        /* compute and memory figures, measured while the other ranks sleep */
        cal_rates k;
        double bw = copy_bw();
        if (measure(&shape, &k) || bw <= 0) {
            fprintf(stderr, "%s: calibrate: out of memory for the probes (shapes of %s)\n", cal_prog, shape.from);
            rc = 1;
        } else {
            rss.after_probes = vm_rss_bytes();   /* every probe buffer freed */
            rc = write_profile(out, &base, &shape, &k, bw, &busbw, nranks, &rss);
        }
        dt_hardware h;
        if (!rc && dt_hardware_load(out, NULL, &h, &e) == DT_OK) print_summary(out, &h, nranks);
    }
    if (under_mpi) {
        quiet_wait();   /* rank 0's part releases the sleeping ranks (nonblocking on all: MPI does not
                         * match a blocking barrier with a nonblocking one) */
        MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Finalize();
    }
    return rc;
}
