/* train.c — see dt_train.h. */
#include "dt_train.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dt_ckpt.h"
#include "dt_clock.h"
#include "dt_data.h"
#include "dt_device.h"
#include "dt_lm.h"
#include "dt_heartbeat.h"
#include "dt_hfdir.h"
#include "dt_json.h"
#include "dt_memprobe.h"
#include "dt_memreport.h"
#include "dt_memtrack.h"
#include "dt_objrun.h"
#include "dt_optim.h"
#include "dt_runadapter.h"
#include "dt_rundir.h"
#include "dt_sha256.h"
#include "dt_layout.h"
#include "dt_tpgroup.h"
#include "dt_tracer.h"
#include "dt_vlmtrain.h"
#include "dt_zero.h"

#define DT_PROGRESS_WIDTH 24     /* characters of the progress bar */
#define DT_LOG_LINES 20          /* non-TTY: about this many progress lines per run */
#define DT_MSG_MAX 256
/* The step's loss-carrying target count crosses the ranks as two fp32 limbs (low, high):
 * one 8-byte all-reduce (global_counted) */
#define DT_COUNT_LIMBS 2
/* After a collective timed out: how long a rank waits (capped at a quarter of
 * the timeout) for its healthy peers, stuck in the same collective, to time out
 * too and re-beat, so that only the culprit's heartbeat stays old. Healthy ranks
 * enter a collective within one step's compute jitter of each other. */
#define DT_DIAG_GRACE_S 1.0

typedef struct {
    /* the plan as the trained set runs it: own, the caller's plan with the trained set's
     * precision (dt_lm_trained_precision; the same but for LoRA's fp32 adapters under a
     * 16-bit precision), which ZeRO, the optimizer and checkpoints use; src: the caller's,
     * whose precision the model, the base set and the fp16 loss scaling use */
    const dt_plan *plan, *src;
    dt_plan own;
    const dt_train_opts *opts;
    char out_dir[DT_PATH_MAX];
    char *plan_json;             /* the plan file's text, stored in checkpoints */
    /* LoRA: the base's fingerprint for each checkpoint's PEFT adapter (rank 0, at the
     * first save; "" with a random base) */
    char base_fp[DT_ADAPTER_FP_HEX];
    int base_fp_done;
    const dt_device_ops *dev;    /* the plan's device (cluster.device), bound to LOCAL_RANK's GPU on cuda */
    dt_lm *g;
    dt_model model;              /* the policy's model: the plan's, as its objective configures it */
    dt_zero *z;
    /* the objective's loss, data and extra models (dt_objrun.h); NULL: next-token cross-entropy */
    const dt_objrun_ops *obj;
    dt_objrun *objr;
    dt_objrun_metrics step_m, eval_m;   /* the last step's and evaluation's objective metrics */
    dt_vlmrun *vr;               /* a VLM plan's model (dt_vlmtrain.h; g is its language model), else NULL */
    int vlm_from_dir;            /* its weights came from output.init (a LLaVA directory) */
    dt_comm *comm;
    int own_comm, rank, world;
    /* tensor parallelism (layout.tp > 1): the TP and DP groups (NULL: none); the data, ZeRO
     * and the token counts run over dcomm, the rank's DP group (the world without TP) */
    dt_tpgroup *tpg;
    dt_comm *dcomm;
    int drank, dworld;
    int64_t step_bytes[DT_COLL_COUNT];   /* bytes per collective of the last training step */
    int bytes_constant;                  /* every step moved the same bytes */
    double comm_s;                       /* time blocked in collectives, timed steps */
    dt_corpus *train_c, *valid_c;
    dt_loader *train_l, *valid_l;
    int32_t *inputs, *targets;   /* [B, T] */
    /* SFT data (a v2 shard's loss mask): the step's micro-batches, read ahead so each
     * one's share of the step's counted targets is known before its backward */
    int masked;
    int32_t *step_inputs, *step_targets;   /* [accum, B, T]; masked-out targets DT_IGNORE_INDEX */
    uint8_t *mask;                         /* [B, T] */
    int64_t *counted;                      /* [accum]: each micro-batch's counted targets */
    float *count_buf;                      /* [2] the count's all-reduce where collectives take device
                                              memory (not host-addressable), world > 1; else NULL */
    char data_fp[DT_CKPT_FINGERPRINT_HEX + 1];   /* the training shards' tokenizer, hex; "" none */
    int count_bits;                        /* bits of the count's low limb (global_counted) */
    dt_train_state st;
    FILE *metrics;
    FILE *log;                   /* human output: opts->log on rank 0, NULL elsewhere */
    int tty;
    int refused;                 /* every rank refused the output directory (dt_rundir_prepare) */
    dt_heartbeat *hb;            /* OUT/hb/rank-K, world > 1 (docs/launch.md §4) */
    /* the step loop */
    int64_t total, stop;         /* the schedule's steps; where this run stops (--max-steps) */
    int64_t log_every;           /* non-TTY: a progress line every this many steps */
    double tokens_per_step;      /* all ranks together */
    double first_time;           /* wall time of the first step (warm-up) */
    double time_sum, comm_sum;   /* wall time and time in collectives of the later steps */
    int64_t timed;               /* steps timed so far */
    char msg[DT_MSG_MAX];        /* the loss scaler's message of the last step, "" none */
} trainer;

/* what one step produced, for the metrics line and the log */
typedef struct {
    double loss, lr, norm;       /* global mean loss, learning rate, unscaled gradient norm */
    int skipped;                 /* fp16 overflow: no update */
    double secs, tps;            /* wall time and tokens/s of the step */
    double cpu_secs;             /* this process's CPU time (user + system, all threads) in the step */
    double vloss;                /* validation loss, NAN when not evaluated */
} step_out;

/* the kernel's count of this process's CPU time, every thread's user + system */
static double process_cpu_s(void) { return dt_clock_of(CLOCK_PROCESS_CPUTIME_ID); }

static int check_plan(const dt_plan *p, int world, dt_error *err) {
    if (p->parallel.world_size != world)
        return dt_errorf(err, DT_EINVAL,
                         "the plan asks for %lld ranks (parallel.world_size) but %d were launched; "
                         "launch %lld ranks or re-plan with dtplan solve ... --gpus %d",
                         (long long)p->parallel.world_size, world, (long long)p->parallel.world_size, world);
    if (p->batch.seq_len > p->model.max_pos)
        return dt_errorf(err, DT_EINVAL, "batch.seq_len %lld exceeds the model's max_pos %lld",
                         (long long)p->batch.seq_len, (long long)p->model.max_pos);
    if (p->schedule.total_steps < 1)
        return dt_errorf(err, DT_EINVAL, "schedule.total_steps must be >= 1");
    return DT_OK;
}

/* The tokenizer the shards must have been prepared with (docs/data.md "What the trainer
 * does with them"): the one output.init's Hugging Face directory ships (tokenizer.json /
 * tokenizer.model, fingerprinted as dtrun prepare does), else the plan's
 * data.tokenizer_fingerprint (dtplan solve --data); when both are there they must agree.
 * Fills o's fingerprint, whose it is and the hint, all pointing into e; none known: unset. */
typedef struct {
    unsigned char fp[DT_TOK_FINGERPRINT_BYTES];
    char path[DT_PATH_MAX * 2], of[DT_PATH_MAX * 3], hint[DT_PATH_MAX * 3];
} expected_tok;

static int expected_tokenizer(const trainer *t, expected_tok *e, dt_corpus_opts *o, dt_error *err) {
    const dt_data *d = &t->plan->data;
    const char *init = t->plan->output.init;
    const int shown = DT_FINGERPRINT_SHOWN_HEX;
    int found = 0;
    dt_error unread;
    dt_error_clear(&unread);
    /* a tokenizer dtrun cannot read: the shards cannot have been prepared with it here */
    if (init[0] && dt_hf_is_dir(init) &&
        dt_hf_tokenizer_fingerprint(init, e->fp, e->path, sizeof e->path, &found, &unread) && t->log)
        fprintf(t->log, "dtrun: warning: output.init: %s; the shards are not checked against the model's tokenizer\n",
                unread.msg);
    if (found) {
        char hex[DT_CKPT_FINGERPRINT_HEX + 1];
        dt_sha256_hex(e->fp, hex);
        if (d->tokenizer_fingerprint[0] && strcmp(hex, d->tokenizer_fingerprint) != 0)
            return dt_errorf(err, DT_EINVAL,
                             "the model's tokenizer %s (fingerprint %.*s) is not the one the plan's data was prepared "
                             "with (%s, fingerprint %.*s): prepare the data with dtrun prepare --tokenizer %s, then "
                             "dtplan solve --data DIR",
                             e->path, shown, hex, d->tokenizer_path[0] ? d->tokenizer_path : "data.tokenizer_path",
                             shown, d->tokenizer_fingerprint, e->path);
        snprintf(e->of, sizeof e->of, "the model's tokenizer %s", e->path);
        snprintf(e->hint, sizeof e->hint, "the shards were prepared with another tokenizer: prepare them with dtrun "
                 "prepare --tokenizer %s", e->path);
        o->llmc_unchecked = !d->tokenizer_fingerprint[0];   /* llm.c shards name no tokenizer: not checked */
    } else if (d->tokenizer_fingerprint[0]) {
        if (dt_fingerprint_from_hex(d->tokenizer_fingerprint, e->fp, err)) return dt_error_prefix(err, "data");
        snprintf(e->of, sizeof e->of, "the tokenizer the plan's data was prepared with (data.tokenizer_fingerprint%s%s)",
                 d->tokenizer_path[0] ? ": " : "", d->tokenizer_path);
        snprintf(e->hint, sizeof e->hint, "these are not the shards the plan was made for: give those, or re-plan "
                 "with dtplan solve --data DIR for these");
    } else {
        return DT_OK;
    }
    o->fingerprint = e->fp;
    o->fingerprint_of = e->of;
    o->fingerprint_hint = e->hint;
    return DT_OK;
}

/* SFT data on several ranks: the limb width of the step's count all-reduce (global_counted),
 * checked to count the largest step exactly, and its device buffer where one is needed. */
static int setup_global_count(trainer *t, dt_error *err) {
    const dt_plan *p = t->plan;
    if (t->world < 2) return DT_OK;
    /* each limb's sum over the ranks stays below 2^FLT_MANT_DIG: exact in fp32 */
    t->count_bits = FLT_MANT_DIG;
    for (int w = 1; w < t->world; w *= 2) t->count_bits--;
    const int64_t most = p->batch.grad_accum * p->batch.micro_batch * p->batch.seq_len * t->world;
    if (t->count_bits < 1 || (most >> t->count_bits) >> FLT_MANT_DIG != 0)
        return dt_errorf(err, DT_EINVAL,
                         "a step of %lld tokens on %d ranks is too large to count its loss-carrying targets "
                         "exactly: use fewer ranks or a smaller global batch",
                         (long long)most, t->world);
    if (t->dev->host_addressable) return DT_OK;
    t->count_buf = t->dev->alloc(DT_POOL_DEVICE, DT_MEM_BUFFERS, DT_COUNT_LIMBS * sizeof(float));
    if (!t->count_buf) return dt_errorf(err, DT_ENOMEM, "out of device memory for the step's token count");
    return DT_OK;
}

/* The objective's data and models (rm / dpo: the preference pairs of train_path and data.valid). */
static int open_objective(trainer *t, const char *train_path, const dt_corpus_opts *o, dt_error *err) {
    const dt_objrun_ctx c = {.plan = t->plan, .model = &t->model, .comm = t->comm, .zero = t->z, .rank = t->rank,
                             .world = t->world, .train_path = train_path, .valid_path = t->plan->data.valid,
                             .fingerprint = o->fingerprint, .fingerprint_hint = o->fingerprint_hint, .log = t->log,
                             .reward_cmd = t->opts->reward_cmd, .reward_timeout_s = t->opts->reward_timeout_s,
                             .vlm = t->vr};
    if (t->obj->open(&c, t->g, &t->objr, err)) return err->code;
    snprintf(t->data_fp, sizeof t->data_fp, "%s", t->obj->data_fingerprint(t->objr));
    return DT_OK;
}

static int setup_data(trainer *t, dt_error *err) {
    const dt_plan *p = t->plan;
    const dt_data *d = &p->data;
    const char *train_path = t->opts->data_path ? t->opts->data_path : d->train;
    int64_t T = p->batch.seq_len, B = p->batch.micro_batch;
    expected_tok e;
    dt_corpus_opts o = {.vocab = p->model.vocab};
    unsigned char fp[DT_SHARD2_FINGERPRINT_BYTES];
    if (expected_tokenizer(t, &e, &o, err)) return err->code;
    if (t->obj) return open_objective(t, train_path, &o, err);
    if (dt_corpus_open_opts(train_path, d->format, &o, &t->train_c, err)) return err->code;
    if (dt_corpus_fingerprint(t->train_c, fp)) dt_sha256_hex(fp, t->data_fp);
    if (dt_corpus_has_mask(t->train_c)) {   /* SFT shards: read each step's micro-batches ahead */
        const size_t n = (size_t)(B * T), accum = (size_t)p->batch.grad_accum;
        t->masked = 1;
        t->step_inputs = malloc(accum * n * sizeof(int32_t));
        t->step_targets = malloc(accum * n * sizeof(int32_t));
        t->mask = malloc(n);
        t->counted = malloc(accum * sizeof(int64_t));
        if (!t->step_inputs || !t->step_targets || !t->mask || !t->counted)
            return dt_errorf(err, DT_ENOMEM, "out of memory for %zu micro-batches of masked data", accum);
        if (setup_global_count(t, err)) return err->code;
    }
    int64_t n = dt_corpus_windows(t->train_c, T), ntrain = n, nvalid = 0;
    const dt_corpus *vc = NULL;
    int64_t vfirst = 0;
    if (d->valid[0]) {
        if (dt_corpus_open_opts(d->valid, d->format, &o, &t->valid_c, err)) return err->code;
        vc = t->valid_c;
        nvalid = dt_corpus_windows(vc, T);
    } else if (d->valid_fraction > 0) {
        dt_split_windows(n, d->valid_fraction, &ntrain, &nvalid);
        vc = t->train_c;
        vfirst = ntrain;
    }
    if (dt_loader_create(t->train_c, T, B, 0, ntrain, 1, d->seed, t->drank, t->dworld, "training data", &t->train_l,
                         err))
        return dt_error_prefix(err, "%s", train_path);
    /* validation needs at least one micro-batch of windows; with fewer it is skipped */
    if (vc && d->eval_interval > 0 && nvalid >= B &&
        dt_loader_create(vc, T, B, vfirst, nvalid, 0, d->seed, 0, 1, "validation data", &t->valid_l, err))
        return err->code;
    return DT_OK;
}

/* --resume: the checkpoint's training data (state.json data.tokenizer_fingerprint) and the
 * shards now must share a tokenizer; a checkpoint that names none is not checked. Then the
 * state records the data's tokenizer for the next checkpoint. */
static int check_resumed_data(trainer *t, const char *ckpt, dt_error *err) {
    const char *was = t->st.data_fingerprint, *now = t->data_fp;
    const int shown = DT_FINGERPRINT_SHOWN_HEX;
    if (was[0] && strcmp(was, now) != 0)
        return dt_errorf(err, DT_EINVAL,
                         "--resume: %s was trained on shards of tokenizer %.*s but the data %s %s%.*s: resume with the "
                         "data it was trained on (--data), or start a new run from its weights (--init %s --out "
                         "NEW_DIR)",
                         ckpt, shown, was, t->opts->data_path ? t->opts->data_path : t->plan->data.train,
                         now[0] ? "is of tokenizer " : "carries no tokenizer fingerprint (text or llm.c shards)", shown,
                         now, ckpt);
    snprintf(t->st.data_fingerprint, sizeof t->st.data_fingerprint, "%s", now);
    return DT_OK;
}

/* The base set (the frozen tensors of a freeze plan; none under full fine-tuning): from
 * output.init, or drawn from the seed, on every rank, fresh or resumed (a checkpoint holds
 * only what is trained). */
static int init_base(trainer *t, dt_error *err) {
    const dt_plan *p = t->plan;
    if (t->vr) return dt_vlmtrain_init_base(t->vr, p, &t->vlm_from_dir, err);   /* the tower, and the base set */
    if (p->output.init[0]) {
        if (dt_weights_load_base(t->g, &t->model, t->src->precision.param, p->output.init, err))
            return dt_error_prefix(err, "output.init");
        return DT_OK;
    }
    return dt_lm_init_base_random(t->g, p->data.seed, err);
}

static int init_weights(trainer *t, int64_t *resumed_from, dt_error *err) {
    const dt_plan *p = t->plan;
    *resumed_from = -1;
    if (init_base(t, err)) return err->code;
    if (t->opts->resume) {
        char path[DT_PATH_MAX * 2];
        int64_t step;
        if (dt_ckpt_latest(t->out_dir, path, sizeof path, &step, err)) return err->code;
        if (step >= 0) {
            int64_t saved_world = 0;
            dt_memprobe_begin(DT_PHASE_CKPT_LOAD);
            if (dt_ckpt_load_zero(path, t->g, &t->model, &p->precision, t->z, &t->st, &saved_world, err))
                return err->code;
            dt_memprobe_end(DT_PHASE_CKPT_LOAD);
            if (dt_ckpt_check_base(path, t->g, t->src->precision.param, err)) return err->code;
            if (check_resumed_data(t, path, err)) return err->code;
            *resumed_from = step;
            if (!t->st.run_id[0]) dt_run_id_new(t->st.run_id);   /* a checkpoint from before run ids */
            if (t->opts->log && t->rank == 0 && saved_world != t->world)
                fprintf(t->opts->log, "dtrun: optimizer state of %lld shard(s) resharded for %d rank(s), stage %d\n",
                        (long long)saved_world, t->world, p->parallel.zero_stage);
            if (t->obj && t->obj->resume_step && t->obj->resume_step(t->objr, step, err)) return err->code;
            return t->obj ? t->obj->set_pos(t->objr, t->st.data, err) : dt_loader_set_pos(t->train_l, t->st.data, err);
        }
        if (t->opts->log) fprintf(t->opts->log, "dtrun: no checkpoint in %s, starting from step 0\n", t->out_dir);
    }
    if (t->opts->init_adapter) {   /* LoRA adapters from a PEFT directory, over the base or the seed */
        dt_adapter *a = NULL;
        int rc = dt_run_adapter_open(p, t->opts->init_adapter, &a, err);
        if (!rc && dt_weights_load_zero_adapter(t->z, t->g, &t->model, p->precision.param, p->output.init, a,
                                                p->data.seed, err))
            rc = dt_error_prefix(err, "--init-adapter %s", t->opts->init_adapter);
        dt_adapter_free(a);
        if (rc) return rc;
    } else if (t->vlm_from_dir) {   /* the LLaVA directory's trained set, read by init_base */
        if (dt_zero_init_from_model(t->z, err)) return err->code;
    } else if (p->output.init[0]) {   /* stage 3: each rank reads only its shards of the file */
        /* LoRA from a base model: the adapters it lacks start as PEFT starts them, from the seed;
         * a reward model from a causal LM: its score head as transformers initialises it */
        if (dt_ft_is_lora(&p->finetune) || t->model.num_labels > 0
                ? dt_weights_load_zero_seeded(t->z, t->g, &t->model, p->precision.param, p->output.init, p->data.seed,
                                              err)
                : dt_weights_load_zero(t->z, t->g, &t->model, p->precision.param, p->output.init, err))
            return dt_error_prefix(err, "output.init");
    } else if (dt_zero_init_random(t->z, p->data.seed, err)) {
        return err->code;
    }
    dt_loss_scaler_init(&t->st.scaler, &t->src->precision);
    t->st.rng = p->data.seed;
    dt_run_id_new(t->st.run_id);   /* a new series of checkpoints (keep_last prunes only its own) */
    snprintf(t->st.data_fingerprint, sizeof t->st.data_fingerprint, "%s", t->data_fp);
    return DT_OK;
}

/* The next micro-batch; with SFT data the targets the mask leaves out become
 * DT_IGNORE_INDEX (no loss). Returns the targets that count. */
static int64_t next_batch(trainer *t, dt_loader *l, int32_t *inputs, int32_t *targets) {
    const int64_t n = t->plan->batch.micro_batch * t->plan->batch.seq_len;
    if (!t->masked) {
        dt_loader_next(l, inputs, targets);
        return n;
    }
    dt_loader_next_masked(l, inputs, targets, t->mask);
    int64_t counted = 0;
    for (int64_t i = 0; i < n; i++) {
        if (t->mask[i]) counted++;
        else targets[i] = DT_IGNORE_INDEX;
    }
    return counted;
}

static int evaluate(trainer *t, double *loss_out, dt_error *err) {
    if (t->obj) {
        dt_zero_set_micro(t->z, 0, err);
        if (t->obj->evaluate(t->objr, t->g, loss_out, &t->eval_m, err)) return err->code;
        return t->dev->synchronize(err);
    }
    dt_loader_reset(t->valid_l);
    int64_t nb = t->plan->data.eval_batches > 0 ? t->plan->data.eval_batches : 1;
    int64_t avail = dt_loader_windows(t->valid_l) / t->plan->batch.micro_batch;
    if (nb > avail) nb = avail;
    double sum = 0;
    for (int64_t i = 0; i < nb; i++) {
        float loss;
        next_batch(t, t->valid_l, t->inputs, t->targets);
        dt_zero_set_micro(t->z, 0, err);
        dt_lm_set_dropout(t->g, 0, 0);   /* evaluation: no LoRA dropout */
        if (dt_lm_forward(t->g, t->inputs, t->targets, &loss, err)) return err->code;
        sum += loss;
    }
    *loss_out = sum / (double)nb;
    /* an asynchronous device error (CUDA / cuBLAS) during evaluation */
    return t->dev->synchronize(err);
}

/* device-pool bytes allocated now, through the device's own accounting */
static int64_t device_bytes_now(const dt_device_ops *dev) {
    int64_t s = 0;
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++) s += dev->mem_current(DT_POOL_DEVICE, (dt_mem_category)c);
    return s;
}

static void progress(trainer *t, int64_t step, int64_t stop, double loss, double tps, double eta_s) {
    FILE *log = t->opts->log;
    double frac = (double)step / (double)stop;
    char bar[DT_PROGRESS_WIDTH + 1];
    int fill = (int)(frac * DT_PROGRESS_WIDTH);
    for (int i = 0; i < DT_PROGRESS_WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[DT_PROGRESS_WIDTH] = '\0';
    double mib = (double)device_bytes_now(t->dev) / (1024.0 * 1024.0);
    fprintf(log, "\rstep %lld/%lld [%s] loss %.4f | %.0f tok/s | ETA %02d:%02d | tracked %.1f MiB ",
            (long long)step, (long long)stop, bar, loss, tps, (int)(eta_s / 60), (int)fmod(eta_s, 60), mib);
    fflush(log);
}

/* Test-only fault injection (docs/dtrun.md "Failure tests"), ignored unless set:
 * DT_TEST_KILL_RANK=r DT_TEST_KILL_STEP=s makes rank r raise SIGKILL in step s
 * (1-based) between its first forward and backward; DT_TEST_HANG_RANK/_STEP
 * makes it sleep there for good instead of communicating. */
static int env_equals(const char *name, int64_t v) {
    const char *s = getenv(name);
    char *end;
    if (!s || !*s) return 0;
    long long x = strtoll(s, &end, 10);
    return !*end && x == v;
}

static void test_fault(const trainer *t) {
    const int64_t step = t->st.step + 1;
    if (env_equals("DT_TEST_KILL_RANK", t->rank) && env_equals("DT_TEST_KILL_STEP", step)) raise(SIGKILL);
    if (env_equals("DT_TEST_HANG_RANK", t->rank) && env_equals("DT_TEST_HANG_STEP", step))
        for (;;) pause();
}

/* A collective failed (DT_ECOMM: a timeout, or MPI/NCCL reporting a lost peer):
 * append the heartbeat diagnosis naming the rank that died or hangs. This rank
 * re-beats first and waits DT_DIAG_GRACE_S so the healthy peers do the same. */
static void name_culprit(trainer *t, dt_error *err) {
    if (!t->hb || t->world < 2 || err->code != DT_ECOMM) return;
    const double timeout = dt_comm_timeout(t->comm);
    dt_heartbeat_beat(t->hb, t->st.step + 1);
    double grace = fmin(DT_DIAG_GRACE_S, timeout / 4);
    struct timespec ts = {(time_t)grace, (long)(1e9 * (grace - floor(grace)))};
    nanosleep(&ts, NULL);
    char msg[DT_MSG_MAX * 2], line[DT_ERROR_MSG_MAX];
    int who = dt_heartbeat_diagnose(t->out_dir, t->world, timeout / 2, NULL, msg, sizeof msg);
    snprintf(line, sizeof line, "%.600s; %s%.400s", err->msg, who >= 0 ? "heartbeats: " : "", msg);
    memcpy(err->msg, line, sizeof line);
}

/* The loss-carrying targets (label != DT_IGNORE_INDEX) of the step's micro-batches on
 * every rank together, into *count (this rank's on entry), as transformers' Trainer with
 * average_tokens_across_devices=True counts num_items_in_batch
 * (src/transformers/trainer.py, get_batch_samples: labels.ne(-100) summed over the
 * step's batches, then accelerator.gather(num_items_in_batch).sum(); compute_loss
 * multiplies the loss by num_processes, as the share above multiplies by the world).
 * One all-reduce (sum) of 8 bytes: dt_comm reduces floating point, so the count goes
 * as two fp32 limbs, low count_bits bits and the rest, whose sums over the ranks stay
 * below 2^FLT_MANT_DIG and are therefore exact in any order (setup_global_count). */
static int global_counted(trainer *t, int64_t *count, dt_error *err) {
    if (t->dworld < 2) return DT_OK;
    const int64_t low = ((int64_t)1 << t->count_bits) - 1;
    float limbs[DT_COUNT_LIMBS] = {(float)(*count & low), (float)(*count >> t->count_bits)};
    const size_t bytes = sizeof limbs;
    float *buf = t->count_buf ? t->count_buf : limbs;
    if (buf != limbs) {
        t->dev->memcpy(buf, limbs, bytes, DT_COPY_H2D, DT_STREAM_H2D);
        t->dev->stream_sync(DT_STREAM_H2D);
    }
    if (dt_comm_allreduce(t->dcomm, buf, DT_COUNT_LIMBS, DT_DTYPE_FP32, DT_RED_SUM, err)) return err->code;
    if (buf != limbs) {
        t->dev->memcpy(limbs, buf, bytes, DT_COPY_D2H, DT_STREAM_D2H);
        t->dev->stream_sync(DT_STREAM_D2H);
    }
    *count = ((int64_t)limbs[1] << t->count_bits) + (int64_t)limbs[0];
    return DT_OK;
}

/* Where the training data stands (a checkpoint keeps it). */
static dt_loader_pos data_pos(const trainer *t) {
    return t->obj ? t->obj->get_pos(t->objr) : dt_loader_get_pos(t->train_l);
}

/* One optimizer step through the ZeRO engine (dt_zero.h); fills the metrics it
 * produced. Loss and norm are global (all ranks). */
static int train_step(trainer *t, double *loss_out, double *lr_out, double *norm_out, int *skipped,
                      char *msg, dt_error *err) {
    const dt_plan *p = t->plan;
    const int64_t accum = p->batch.grad_accum;
    dt_loss_scaler *sc = &t->st.scaler;
    const double scale = sc->cur_scale;   /* the scale this step's loss is multiplied by */
    dt_zero_begin_step(t->z);
    /* Each micro-batch's share of the step: 1/accum, or with SFT data its counted
     * targets over the step's counted targets on all ranks, times the world size
     * because the ranks' gradients and losses are then averaged: the step's loss is
     * sum(mask * CE) / sum(mask) over the whole global batch, whatever the ranks
     * and accumulation (docs/data.md "What the trainer does with them") */
    const int64_t n = p->batch.micro_batch * p->batch.seq_len;
    int64_t step_counted = 0;
    if (t->masked) {
        for (int64_t a = 0; a < accum; a++) {
            t->counted[a] = next_batch(t, t->train_l, t->step_inputs + a * n, t->step_targets + a * n);
            step_counted += t->counted[a];
        }
        if (global_counted(t, &step_counted, err)) return err->code;
    }
    double loss_sum = 0;
    for (int64_t a = 0; a < accum; a++) {
        float loss;
        const int32_t *in = t->inputs, *tg = t->targets;
        double grad_scale = scale / (double)accum, share = 1.0 / (double)accum;
        if (t->masked) {
            in = t->step_inputs + a * n;
            tg = t->step_targets + a * n;
            share = step_counted > 0 ? (double)t->counted[a] * t->dworld / (double)step_counted : 0.0;
            grad_scale = scale * share;
        } else if (!t->obj) {
            dt_loader_next(t->train_l, t->inputs, t->targets);
        }
        dt_zero_set_micro(t->z, a == accum - 1, err);
        dt_tracer_set_micro((int)a);
        /* LoRA dropout's masks: this step's, this rank's micro-batch (resumes draw the same) */
        dt_lm_set_dropout(t->g, 1, dt_lm_dropout_key(t->plan->data.seed, t->st.step, (int64_t)t->rank * accum + a));
        if (t->obj) {   /* the objective's own batch, forwards, loss and backward */
            double oloss;
            dt_memprobe_begin(DT_PHASE_OBJECTIVE);
            if (t->obj->micro(t->objr, t->g, (float)grad_scale, &oloss, err)) return err->code;
            dt_memprobe_end(DT_PHASE_OBJECTIVE);
            loss_sum += oloss;
            continue;
        }
        dt_memprobe_begin(DT_PHASE_FORWARD);
        if (dt_lm_forward(t->g, in, tg, &loss, err)) return err->code;
        dt_memprobe_end(DT_PHASE_FORWARD);
        if (a == 0) test_fault(t);
        dt_memprobe_begin(DT_PHASE_BACKWARD);
        if (dt_lm_backward(t->g, (float)grad_scale, err)) return err->code;
        dt_memprobe_end(DT_PHASE_BACKWARD);
        loss_sum += t->masked ? loss * share * (double)accum : loss;
    }
    dt_memprobe_begin(DT_PHASE_OPTIMIZER);   /* ends in run_step, after a skipped step too */
    if (dt_zero_end_backward(t->z, err)) return err->code;
    t->st.tokens += (int64_t)t->tokens_per_step;
    double loss = loss_sum / (double)accum, sumsq = 0;
    int nonfinite = 0;
    if (dt_zero_reduce_scalars(t->z, &loss, &sumsq, &nonfinite, err)) return err->code;
    /* Once per step, the first asynchronous device error (a failed kernel, GEMM
     * or copy on CUDA; nothing on the CPU) before its loss and norm are used.
     * Here every collective of the step has completed (reduce_scalars waited for
     * them with their deadline), so waiting for all streams cannot hang on a
     * collective; the optimizer step's errors surface at the next step, before
     * a save, or after the loop. */
    if (t->dev->synchronize(err)) return err->code;
    *loss_out = loss;
    double norm = sqrt(sumsq);
    *norm_out = norm / scale;
    *skipped = 0;
    if (t->src->precision.param == DT_DTYPE_FP16) {
        if (dt_loss_scaler_update(sc, nonfinite, msg, DT_MSG_MAX, err)) return err->code;
        if (nonfinite) {
            *skipped = 1;
            t->st.skipped_steps++;
            *lr_out = dt_schedule_lr(&p->schedule, p->optimizer.lr, t->st.adam_step);
            t->st.data = data_pos(t);
            return DT_OK;
        }
    } else if (nonfinite) {
        return dt_errorf(err, DT_ERUNTIME,
                         "step %lld: non-finite gradients (loss %g); lower optimizer.lr or enable "
                         "grad_clip",
                         (long long)t->st.step + 1, *loss_out);
    }
    /* DeepSpeed unscale_and_clip_grads, with the scale the loss was multiplied by */
    double div = dt_clip_divisor(norm, scale, p->optimizer.grad_clip);
    double lr = dt_schedule_lr(&p->schedule, p->optimizer.lr, t->st.adam_step);
    t->st.adam_step++;
    dt_adamw hp = {lr, p->optimizer.beta1, p->optimizer.beta2, p->optimizer.eps, p->optimizer.weight_decay};
    if (dt_zero_optimizer_step(t->z, &hp, 1.0 / div, t->st.adam_step, err)) return err->code;
    *lr_out = lr;
    t->st.data = data_pos(t);
    return DT_OK;
}

static int save(trainer *t, dt_error *err) {
    char path[DT_PATH_MAX * 2];
    /* no checkpoint from a step whose device work failed */
    if (t->dev->synchronize(err)) return err->code;
    dt_memprobe_begin(DT_PHASE_CKPT_SAVE);
    if (dt_ckpt_save_zero(t->out_dir, t->g, &t->model, &t->plan->precision, t->z, t->comm, &t->st,
                          t->plan_json, t->plan->output.keep_last, path, sizeof path, err))
        return err->code;
    dt_memprobe_end(DT_PHASE_CKPT_SAVE);
    if (t->rank == 0 && dt_ft_is_lora(&t->plan->finetune)) {   /* the adapter in PEFT's format beside it */
        if (!t->base_fp_done && dt_run_adapter_fingerprint(t->plan, t->base_fp, err)) return err->code;
        t->base_fp_done = 1;
        if (dt_run_adapter_write(path, t->g, t->plan, t->base_fp, err)) return dt_error_prefix(err, "%s", path);
    }
    if (t->opts->log && t->rank == 0) {
        if (t->tty) fprintf(t->opts->log, "\n");
        fprintf(t->opts->log, "dtrun: saved checkpoint %s%s\n", path,
                dt_ft_is_lora(&t->plan->finetune) ? " (LoRA adapter in PEFT's format: " DT_RUN_ADAPTER_DIR "/)" : "");
    }
    return DT_OK;
}

static void trainer_free(trainer *t) {
    if (t->metrics) fclose(t->metrics);
    if (t->obj) t->obj->free(t->objr);
    dt_loader_free(t->train_l);
    dt_loader_free(t->valid_l);
    dt_corpus_free(t->train_c);
    dt_corpus_free(t->valid_c);
    free(t->inputs);
    free(t->targets);
    free(t->step_inputs);
    free(t->step_targets);
    free(t->mask);
    free(t->counted);
    if (t->count_buf) t->dev->free(t->count_buf);
    dt_zero_free(t->z);
    if (t->vr) dt_vlmrun_free(t->vr);   /* g is its language model */
    else dt_lm_free(t->g);
    dt_tpgroup_free(t->tpg);
    if (t->own_comm) dt_comm_free(t->comm);
    free(t->plan_json);
}

static double comm_seconds(trainer *t) { return dt_zero_comm_seconds(t->z); }

/* ---- dt_train's phases, in the order it runs them ---- */

/* Tensor parallelism (layout.tp > 1, docs/parallelism.md "In dtrun"): the TP and DP
 * groups; what is not built yet refused in one line before anything is written. */
static int connect_tp(trainer *t, dt_error *err) {
    const int64_t tp = dt_layout_of(t->plan).tp;
    t->dcomm = t->comm;
    t->drank = t->rank;
    t->dworld = t->world;
    if (tp <= 1) return DT_OK;
    if (t->obj)
        return dt_errorf(err, DT_EINVAL,
                         "layout.tp %lld with objective %s: dtrun's tensor parallelism trains pt / sft only; "
                         "set layout.tp to 1 (ZeRO over the data-parallel ranks) or train with --objective sft",
                         (long long)tp, dt_obj_name(t->plan->objective.kind));
    int rc = dt_lm_check_tp(&t->plan->model, tp, t->plan->cluster.device, &t->plan->finetune, err);
    if (rc) return rc;
    if (t->plan->output.init[0])
        return dt_errorf(err, DT_EINVAL,
                         "layout.tp %lld with output.init: dtrun's tensor-parallel runs start from the seed or "
                         "resume a checkpoint (any TP degree); start from the weights at tp 1, then resume at tp %lld",
                         (long long)tp, (long long)tp);
    if ((rc = dt_tpgroup_create(t->comm, (int)tp, &t->tpg, err))) return rc;
    t->dcomm = dt_tpgroup_dp(t->tpg);
    t->drank = dt_comm_rank(t->dcomm);
    t->dworld = dt_comm_size(t->dcomm);
    return DT_OK;
}

/* Communicator (self unless the caller passed one), plan check, then device; on failure nothing to free. */
static int trainer_connect(trainer *t, const dt_plan *plan, const dt_train_opts *opts, dt_error *err) {
    t->src = plan;
    t->own = *plan;
    dt_lm_trained_precision(&plan->precision, &plan->finetune, &t->own.precision);
    t->plan = &t->own;
    t->opts = opts;
    t->comm = opts->comm;
    int rc;
    if (!t->comm) {
        if ((rc = dt_comm_init_self(&t->comm, err))) return rc;
        t->own_comm = 1;
    }
    t->rank = dt_comm_rank(t->comm);
    t->world = dt_comm_size(t->comm);
    /* NULL: pt / sft; a VLM plan's own table (dt_vlmtrain.h) */
    t->obj = dt_vlm_active(&plan->vlm) ? dt_vlmtrain_ops() : dt_objrun_for(plan->objective.kind);
    /* the device first: a cuda plan on a build or machine without a GPU stops
     * here with dt_device_get's one line, before anything is written */
    if ((rc = check_plan(plan, t->world, err)) || (t->obj && (rc = t->obj->check(plan, err))) ||
        (rc = dt_device_get(plan->cluster.device, dt_comm_local_rank(t->comm), &t->dev, err)) ||
        (rc = connect_tp(t, err))) {
        if (t->own_comm) dt_comm_free(t->comm);
        return rc;
    }
    return DT_OK;
}

/* Where the run writes: rank 0's log and TTY mode, the output directory, heartbeat and plan text. */
static int open_run_dir(trainer *t, dt_error *err) {
    const dt_train_opts *opts = t->opts;
    int rc;
    /* human output from rank 0 only; every rank reports its own errors */
    t->log = t->rank == 0 ? opts->log : NULL;
    t->tty = t->log && (opts->progress > 0 || (opts->progress < 0 && isatty(fileno(t->log))));
    snprintf(t->out_dir, sizeof t->out_dir, "%s", opts->out_dir ? opts->out_dir : t->plan->output.dir);
    /* a new run only into an absent or empty directory (dt_rundir.h); nothing is written before */
    dt_out_mode mode = opts->resume ? DT_OUT_RESUME : opts->overwrite ? DT_OUT_OVERWRITE : DT_OUT_NEW;
    if ((rc = dt_rundir_prepare(t->out_dir, mode, t->comm, &t->refused, err))) return rc;
    if (opts->plan_path && dt_json_read_file(opts->plan_path, &t->plan_json, NULL, err)) return err->code;
    return DT_OK;
}

/* ZeRO-3: each rank draws or reads only its shards (the seed, output.init or a
 * checkpoint), so the model's flat buffers are never allocated. */
static int partitioned_init(const trainer *t) { return t->plan->parallel.zero_stage == 3; }

/* Model, ZeRO engine, data, batch buffers and weights, fresh or resumed (*resumed: its step, else -1). */
static int build_model(trainer *t, int64_t *resumed, dt_error *err) {
    const dt_plan *plan = t->plan;
    const int64_t B = plan->batch.micro_batch, T = plan->batch.seq_len;
    *resumed = -1;
    /* ZeRO-3: no rank ever holds the whole model (dt_zero_load_params) */
    unsigned flags = partitioned_init(t) ? DT_LM_NO_FLAT : 0;
    /* the objective's model and rows: rm a sequence classifier; rm / dpo 2B rows (chosen,
     * rejected) per micro-batch of B pairs */
    t->model = plan->model;
    const int64_t rows = t->obj ? t->obj->rows_per_example : 1;
    if (t->obj) t->obj->configure(plan, &t->model);
    const dt_lm_options lo = {.B = B * rows, .T = T, .ckpt_layers = plan->activations.ckpt_layers,
                              .attn = plan->activations.attention, .device = plan->cluster.device,
                              .ordinal = dt_comm_local_rank(t->comm), .flags = flags,
                              .finetune = &plan->finetune, .tp = t->tpg ? dt_tpgroup_model(t->tpg) : NULL};
    int rc = t->obj == dt_vlmtrain_ops() ? dt_vlmtrain_create(plan, &lo, &t->vr, err)
                                         : dt_lm_create_opts(&t->model, &t->src->precision, &lo, &t->g, err);
    if (!rc && t->vr) t->g = dt_vlmrun_lm(t->vr);
    if (!rc) rc = dt_zero_create(plan, t->dcomm, t->g, &t->z, err);
    if (!rc && t->tpg) dt_zero_set_tp(t->z, dt_tpgroup_tp(t->tpg));
    if (!rc) rc = setup_data(t, err);
    if (!rc && !t->obj) {
        t->inputs = malloc((size_t)(B * T) * sizeof(int32_t));    /* [B, T] */
        t->targets = malloc((size_t)(B * T) * sizeof(int32_t));   /* [B, T] */
        if (!t->inputs || !t->targets)
            rc = dt_errorf(err, DT_ENOMEM, "out of memory for a micro-batch's %lld x %lld input and target tokens",
                           (long long)B, (long long)T);
    }
    if (!rc) rc = init_weights(t, resumed, err);
    return rc;
}

/* The steps this run takes (--max-steps stops early; the schedule keeps its length), per-step constants. */
static void plan_steps(trainer *t) {
    const dt_plan *plan = t->plan;
    t->total = plan->schedule.total_steps;
    t->stop = t->opts->max_steps > 0 && t->opts->max_steps < t->total ? t->opts->max_steps : t->total;
    t->log_every = t->stop / DT_LOG_LINES > 0 ? t->stop / DT_LOG_LINES : 1;
    t->tokens_per_step = (double)(plan->batch.grad_accum * plan->batch.micro_batch * plan->batch.seq_len * t->dworld) *
                         (double)(t->obj ? t->obj->rows_per_example : 1);
    t->bytes_constant = 1;
}

#define DT_METRICS_PATH_MAX (DT_PATH_MAX + 32)
static void metrics_path(const trainer *t, char *p) {
    snprintf(p, DT_METRICS_PATH_MAX, "%s/metrics.jsonl", t->out_dir);
}

/* metrics.jsonl, on rank 0 only: appended to when resuming, else started afresh. A
 * resumed run first cuts it back to the checkpoint's step (a run killed after its
 * last checkpoint logged steps the resumed run logs again). */
static int open_metrics(trainer *t, int append, dt_error *err) {
    if (t->rank != 0) return DT_OK;
    char mpath[DT_METRICS_PATH_MAX];
    metrics_path(t, mpath);
    if (append && dt_metrics_truncate(mpath, t->st.step, err)) return err->code;
    t->metrics = fopen(mpath, append ? "a" : "w");
    if (!t->metrics) return dt_errorf(err, DT_EIO, "%s: cannot write: %s", mpath, strerror(errno));
    return DT_OK;
}

/* The run's header lines on rank 0: model, batch, ranks, ZeRO and offload, resume. */
static void print_banner(const trainer *t, int64_t resumed) {
    const dt_plan *plan = t->plan;
    FILE *log = t->log;
    if (!log) return;
    fprintf(log, "dtrun: %s, %zu params, %s, B=%lld T=%lld accum=%lld, ckpt %lld/%lld layers, %lld train windows\n",
            plan->model.name, dt_lm_num_params(t->g), dt_precision_preset_name(plan->precision.preset),
            (long long)plan->batch.micro_batch, (long long)plan->batch.seq_len, (long long)plan->batch.grad_accum,
            (long long)plan->activations.ckpt_layers, (long long)plan->model.n_layer,
            (long long)(t->obj ? t->obj->examples(t->objr) : dt_loader_windows(t->train_l)));
    if (t->vr)
        fprintf(log, "dtrun: vision-language stage %s: %lld training documents with their images (pixel shards), "
                     "the %s tower frozen; a LlavaForConditionalGeneration export at the end\n",
                dt_vlm_stage_name(plan->vlm.stage), (long long)t->obj->examples(t->objr),
                dt_vit_kind_name(plan->vlm.tower.kind));
    else if (t->obj && plan->objective.kind == DT_OBJ_GRPO)
        fprintf(log, "dtrun: objective grpo: %lld training prompts, %lld completions per prompt, %lld rows per "
                     "micro-batch; %s\n", (long long)t->obj->examples(t->objr),
                (long long)plan->objective.num_generations, (long long)plan->batch.micro_batch,
                plan->objective.kl_coef != 0 ? "a frozen reference for the KL term" : "no reference (beta 0)");
    else if (t->obj)
        fprintf(log, "dtrun: objective %s: %lld training pairs, %lld rows per micro-batch (chosen, then rejected)%s\n",
                dt_obj_name(plan->objective.kind), (long long)t->obj->examples(t->objr),
                (long long)(plan->batch.micro_batch * t->obj->rows_per_example),
                plan->objective.kind == DT_OBJ_DPO ? "; a frozen reference (replicated) for the log-prob ratios"
                                                   : "; the score head at the last non-pad token");
    if (dt_lm_num_base_params(t->g))
        fprintf(log, "dtrun: %s fine-tune: %zu params trained, %zu frozen (replicated on every rank, no gradient "
                     "or optimizer state); backward from block %lld up\n",
                dt_ft_method_name(plan->finetune.method), dt_lm_num_params(t->g),
                dt_lm_num_base_params(t->g) + dt_lm_num_quant_params(t->g), (long long)dt_lm_first_trained_layer(t->g));
    if (dt_lm_num_quant_tensors(t->g))   /* QLoRA: the base linears as bitsandbytes stores them */
        fprintf(log, "dtrun: qlora base: %d linears, %zu params quantised to %s%s in %zu bytes, dequantised per use "
                     "to fp32\n", dt_lm_num_quant_tensors(t->g), dt_lm_num_quant_params(t->g),
                dt_storage_name(plan->finetune.quant), plan->finetune.double_quant ? " (double-quantised absmax)" : "",
                dt_lm_quant_bytes(t->g));
    fprintf(log, "dtrun: %d rank(s) (%s), ZeRO stage %d, offload optimizer %s / params %s%s\n", t->world,
            dt_comm_backend_name(t->comm), plan->parallel.zero_stage,
            dt_offload_name(plan->parallel.offload_optimizer), dt_offload_name(plan->parallel.offload_param),
            plan->parallel.overlap_comm ? ", overlapped communication" : "");
    int sub = t->train_c ? dt_corpus_subdirs(t->train_c) : 0;
    if (sub > 0)
        fprintf(log, "dtrun: data: %d file(s) of %s read; its %d subfolder(s) are not (a data directory is read "
                     "one level deep: give a subfolder itself, or move the files up)\n",
                dt_corpus_files(t->train_c), t->opts->data_path ? t->opts->data_path : t->plan->data.train, sub);
    if (t->masked)
        fprintf(log, "dtrun: data: SFT loss mask: only the targets the shards mark (the assistant's tokens) carry "
                     "loss, averaged over the counted targets of the whole global batch (all ranks)\n");
    if (resumed >= 0) fprintf(log, "dtrun: resumed from step %lld\n", (long long)resumed);
}

/* Memory peaks count from here; --trace starts the tracer, time zero after a barrier so ranks line up. */
static int start_measuring(trainer *t, dt_error *err) {
    t->dev->mem_reset_peaks();
    dt_mem_reset_peaks();   /* the host allocations outside the device (the same counters on the cpu) */
    if (!t->opts->trace_path) return DT_OK;
    int rc;
    if ((rc = dt_tracer_start(t->rank, t->plan->model.n_layer, err))) return rc;
    if (t->world > 1 && (rc = dt_comm_barrier(t->comm, err))) return rc;
    dt_tracer_set_origin();
    return DT_OK;
}

/* Bytes per collective of the step just run; bytes_constant drops when they change. */
static void record_traffic(trainer *t) {
    for (int c = 0; c < DT_COLL_COUNT; c++) {
        int64_t b = dt_comm_bytes(t->comm, (dt_collective)c);
        if (t->timed > 0 && b != t->step_bytes[c]) t->bytes_constant = 0;
        t->step_bytes[c] = b;
    }
}

/* Times a step: the first (warm-up) apart, the later ones summed with their time in collectives. */
static void time_step(trainer *t, double secs, double comm_secs) {
    if (t->timed == 0) t->first_time = secs;
    else {
        t->time_sum += secs;
        t->comm_sum += comm_secs;
    }
    t->timed++;
}

/* Mean wall time of a step, the first excluded when more than one ran. */
static double mean_step_s(const trainer *t) {
    return t->timed > 1 ? t->time_sum / (double)(t->timed - 1) : t->first_time;
}

/* Validation on the plan's interval and at the schedule's end only (so --max-steps changes nothing). */
static int evaluate_if_due(trainer *t, double *vloss, dt_train_result *res, dt_error *err) {
    int64_t ei = t->plan->data.eval_interval;
    if (!((t->valid_l || t->obj) && ei > 0 && (t->st.step % ei == 0 || t->st.step == t->total))) return DT_OK;
    dt_memprobe_begin(DT_PHASE_EVAL);
    int rc = evaluate(t, vloss, err);
    dt_memprobe_end(DT_PHASE_EVAL);
    if (!rc && !isnan(*vloss)) res->last_valid_loss = *vloss;
    return rc;
}

/* An objective's metrics as metrics.jsonl fields under TRL's names (the step's "loss" is
 * already the line's own: skip_loss). */
static void write_objective_metrics(FILE *f, const dt_objrun_metrics *m, int skip_loss) {
    for (int i = skip_loss; i < m->n; i++) fprintf(f, ", \"%s\": %.9g", m->name[i], m->value[i]);
}

/* The step's line of metrics.jsonl (rank 0). */
static int write_metrics(trainer *t, const step_out *o, dt_error *err) {
    if (!t->metrics) return DT_OK;
    char mpath[DT_METRICS_PATH_MAX];
    const int64_t good = dt_metrics_size(t->metrics);   /* a failed write is cut back to here */
    fprintf(t->metrics,
            "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"tokens_per_s\": %.1f, \"step_ms\": %.3f, "
            "\"grad_norm\": %.9g, \"loss_scale\": %g, \"skipped\": %s, \"mem\": %lld, \"cpu_ms\": %.3f",
            (long long)t->st.step, o->loss, o->lr, o->tps, o->secs * 1e3, o->norm, t->st.scaler.cur_scale,
            o->skipped ? "true" : "false", (long long)device_bytes_now(t->dev), o->cpu_secs * 1e3);
    if (!isnan(o->vloss)) fprintf(t->metrics, ", \"val_loss\": %.9g", o->vloss);
    write_objective_metrics(t->metrics, &t->step_m, 1);
    write_objective_metrics(t->metrics, &t->eval_m, 0);
    fprintf(t->metrics, "}\n");
    metrics_path(t, mpath);
    return dt_metrics_commit(t->metrics, good, mpath, err);
}

/* An objective's accuracy on a log line (rewards/accuracies, accuracy, and their eval_). */
static void log_accuracy(FILE *log, const dt_objrun_metrics *m) {
    for (int i = 1; i < m->n; i++)
        if (strstr(m->name[i], "accurac")) fprintf(log, " %s %.4f", m->name[i], m->value[i]);
}

/* The step on rank 0's log: the scaler's message, then the progress bar (TTY) or a periodic line. */
static void log_step(trainer *t, const step_out *o) {
    FILE *log = t->log;
    const int64_t step = t->st.step, stop = t->stop;
    if (!log) return;
    if (t->msg[0]) fprintf(log, "%sdtrun: step %lld: %s\n", t->tty ? "\n" : "", (long long)step, t->msg);
    if (t->tty) {
        progress(t, step, stop, o->loss, o->tps, mean_step_s(t) * (double)(stop - step));
        if (!isnan(o->vloss)) fprintf(log, "\nstep %lld: val loss %.4f\n", (long long)step, o->vloss);
    } else if (step % t->log_every == 0 || step == stop || !isnan(o->vloss)) {
        fprintf(log, "step %lld/%lld: loss %.4f lr %.3g norm %.3f %.0f tok/s", (long long)step, (long long)stop,
                o->loss, o->lr, o->norm, o->tps);
        log_accuracy(log, &t->step_m);
        if (!isnan(o->vloss)) fprintf(log, " val loss %.4f", o->vloss);
        log_accuracy(log, &t->eval_m);
        fprintf(log, "\n");
    }
}

/* A checkpoint on the plan's save interval and at the run's last step. */
static int save_if_due(trainer *t, dt_error *err) {
    int64_t si = t->plan->output.save_interval;
    if ((si > 0 && t->st.step % si == 0) || t->st.step == t->stop) return save(t, err);
    return DT_OK;
}

/* One pass of the step loop: train, time, validate, record, log, and checkpoint when due. */
static int run_step(trainer *t, dt_train_result *res, dt_error *err) {
    step_out o = {0};
    double t0 = dt_clock_s(), c0 = comm_seconds(t), u0 = process_cpu_s();
    int rc;
    t->msg[0] = '\0';
    dt_heartbeat_beat(t->hb, t->st.step + 1);
    dt_comm_reset_counters(t->comm);
    if ((rc = train_step(t, &o.loss, &o.lr, &o.norm, &o.skipped, t->msg, err))) return rc;
    dt_memprobe_end(DT_PHASE_OPTIMIZER);
    o.secs = dt_clock_s() - t0;
    o.cpu_secs = process_cpu_s() - u0;
    double dc = comm_seconds(t) - c0;
    record_traffic(t);
    t->st.step++;
    time_step(t, o.secs, dc);
    o.tps = t->tokens_per_step / o.secs;
    if (t->st.step == res->first_step + 1) res->first_loss = o.loss;
    res->last_loss = o.loss;
    if (o.skipped) res->skipped++;
    o.vloss = NAN;
    t->eval_m.n = 0;
    if ((rc = evaluate_if_due(t, &o.vloss, res, err))) return rc;
    if (t->obj && (rc = t->obj->step_metrics(t->objr, &t->step_m, err))) return rc;
    if ((rc = write_metrics(t, &o, err))) return rc;
    log_step(t, &o);
    return save_if_due(t, err);
}

/* The step loop, up to the stop step; the first failure ends it. */
static int run_steps(trainer *t, dt_train_result *res, dt_error *err) {
    int rc = DT_OK;
    while (!rc && t->st.step < t->stop) rc = run_step(t, res, err);
    return rc;
}

/* This rank's run report: measured memory, speed, losses and traffic next to the plan's prediction. */
static int write_run_report(trainer *t, const dt_train_result *res, dt_error *err) {
    dt_run_measure m;
    memset(&m, 0, sizeof m);
    dt_run_measure_memory(&m);
    /* the device's own accounting (identical to dt_memtrack's on the cpu):
     * cudaMalloc'd device memory and pinned host memory on cuda */
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++) {
        m.peak[c] = t->dev->mem_peak(DT_POOL_DEVICE, (dt_mem_category)c);
        m.host_peak[c] = t->dev->mem_peak(DT_POOL_HOST, (dt_mem_category)c);
    }
    m.peak_total = t->dev->mem_peak_total(DT_POOL_DEVICE);
    m.host_peak_total = t->dev->mem_peak_total(DT_POOL_HOST);
    m.step_time_s = res->step_time_s;
    m.tokens_per_s = res->tokens_per_s;
    m.steps = res->steps;
    m.first_loss = res->first_loss;
    m.last_loss = res->last_loss;
    m.last_valid_loss = res->last_valid_loss;
    m.rank = t->rank;
    m.world = t->world;
    m.have_comm = t->timed > 0;
    m.comm_constant = t->bytes_constant;
    for (int c = 0; c < DT_COLL_COUNT; c++) m.comm_bytes[c] = t->step_bytes[c];
    m.comm_time_s = t->timed > 1 ? t->comm_sum / (double)(t->timed - 1) : NAN;
    dt_memprobe_get(&m.probe);
    char rpath[DT_PATH_MAX + 48];
    if (t->rank == 0) snprintf(rpath, sizeof rpath, "%s/run-report.json", t->out_dir);
    else snprintf(rpath, sizeof rpath, "%s/run-report-rank%05d.json", t->out_dir, t->rank);
    return dt_run_report_write(rpath, t->plan, t->opts->plan_path, &m, t->log, err);
}

/* A VLM run's model as a LlavaForConditionalGeneration directory beside its checkpoints (rank 0). */
static int export_vlm(trainer *t, dt_error *err) {
    char path[DT_PATH_MAX * 2];
    if (dt_vlmtrain_export(t->vr, t->plan, t->out_dir, t->st.step, path, sizeof path, err)) return err->code;
    if (t->log) fprintf(t->log, "dtrun: wrote %s (LlavaForConditionalGeneration, Hugging Face's names)\n", path);
    return DT_OK;
}

/* After the loop (rc: its outcome): device errors, culprit, result figures; on success report and trace. */
static int finish_run(trainer *t, int rc, dt_train_result *res, dt_error *err) {
    /* the last optimizer step's asynchronous device errors, before the report */
    if (!rc && t->dev) rc = t->dev->synchronize(err);
    if (rc) name_culprit(t, err);
    if (t->log && t->tty) fprintf(t->log, "\n");
    res->steps = t->st.step;
    res->step_time_s = mean_step_s(t);
    res->tokens_per_s = res->step_time_s > 0 ? t->tokens_per_step / res->step_time_s : 0;
    char mpath[DT_METRICS_PATH_MAX];
    metrics_path(t, mpath);
    if (!rc) rc = dt_metrics_close(&t->metrics, mpath, err);   /* flushed, fsynced, closed: checked */
    if (!rc) rc = write_run_report(t, res, err);
    /* every rank's real memory per phase, read back from the reports once all are written */
    if (!rc && t->world > 1) rc = dt_comm_barrier(t->comm, err);
    if (!rc && t->vr && t->rank == 0) rc = export_vlm(t, err);
    if (!rc && t->log) rc = dt_memreport_print(t->out_dir, t->world, t->log, err);
    if (!rc && t->opts->trace_path) {
        rc = dt_tracer_finish(t->opts->trace_path, t->comm, err);
        if (!rc && t->log) fprintf(t->log, "dtrun: wrote trace %s\n", t->opts->trace_path);
    }
    return rc;
}

/* Stops the tracer, closes the heartbeat (ok: a clean run) and frees the trainer. */
static void trainer_close(trainer *t, int ok) {
    dt_tracer_stop();
    dt_heartbeat_close(t->hb, ok);
    trainer_free(t);
}

int dt_train(const dt_plan *plan, const dt_train_opts *opts, dt_train_result *res, dt_error *err) {
    memset(res, 0, sizeof *res);
    res->last_valid_loss = NAN;
    trainer t;
    memset(&t, 0, sizeof t);
    int rc = trainer_connect(&t, plan, opts, err);
    if (rc) return rc;
    dt_memprobe_init(t.dev);   /* real memory per phase (dt_memprobe.h); start-up from exec */
    dt_memprobe_clear();
    dt_memprobe_begin(DT_PHASE_STARTUP);
    int64_t resumed = -1;
    /* a new VLM run's export must find its directory free before --overwrite clears anything */
    if (!opts->resume && dt_vlm_active(&plan->vlm)) {
        const int64_t total = plan->schedule.total_steps;
        rc = dt_vlmtrain_check_export(opts->out_dir ? opts->out_dir : plan->output.dir,
                                      opts->max_steps > 0 && opts->max_steps < total ? opts->max_steps : total, err);
        if (rc) goto done;
    }
    if ((rc = open_run_dir(&t, err)) || (rc = build_model(&t, &resumed, err))) goto done;
    plan_steps(&t);
    res->first_step = t.st.step;
    if (resumed >= 0 && t.st.step >= t.stop) {   /* --resume of a finished run: nothing runs or is written */
        res->finished = 1;
        res->steps = t.st.step;
        goto done;
    }
    /* a resumed VLM run's export must find its directory free before any step runs */
    if (t.vr && (rc = dt_vlmtrain_check_export(t.out_dir, t.stop, err))) goto done;
    if (t.world > 1 && (rc = dt_heartbeat_open(&t.hb, t.out_dir, t.rank, err))) goto done;
    if ((rc = open_metrics(&t, opts->resume, err))) goto done;
    print_banner(&t, resumed);
    if ((rc = start_measuring(&t, err))) goto done;
    dt_memprobe_end(DT_PHASE_STARTUP);
    rc = run_steps(&t, res, err);
    rc = finish_run(&t, rc, res, err);
done:
    res->refused = t.refused;
    trainer_close(&t, rc == DT_OK);
    return rc;
}
