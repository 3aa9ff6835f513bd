/* train.c — see dt_train.h. */
#include "dt_train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dt_ckpt.h"
#include "dt_data.h"
#include "dt_device.h"
#include "dt_gpt2.h"
#include "dt_heartbeat.h"
#include "dt_json.h"
#include "dt_memtrack.h"
#include "dt_optim.h"
#include "dt_tracer.h"
#include "dt_zero.h"

#define DT_PROGRESS_WIDTH 24     /* characters of the progress bar */
#define DT_LOG_LINES 20          /* non-TTY: about this many progress lines per run */
#define DT_MSG_MAX 256
/* After a collective timed out: how long a rank waits (capped at a quarter of
 * the timeout) for its healthy peers, stuck in the same collective, to time out
 * too and re-beat, so that only the culprit's heartbeat stays old. Healthy ranks
 * enter a collective within one step's compute jitter of each other. */
#define DT_DIAG_GRACE_S 1.0

typedef struct {
    const dt_plan *plan;
    const dt_train_opts *opts;
    char out_dir[DT_PATH_MAX];
    char *plan_json;             /* the plan file's text, stored in checkpoints */
    const dt_device_ops *dev;    /* the plan's device (cluster.device), bound to LOCAL_RANK's GPU on cuda */
    dt_gpt2 *g;
    dt_zero *z;
    dt_comm *comm;
    int own_comm, rank, world;
    int64_t step_bytes[DT_COLL_COUNT];   /* bytes per collective of the last training step */
    int bytes_constant;                  /* every step moved the same bytes */
    double comm_s;                       /* time blocked in collectives, timed steps */
    dt_corpus *train_c, *valid_c;
    dt_loader *train_l, *valid_l;
    int32_t *inputs, *targets;   /* [B, T] */
    dt_train_state st;
    FILE *metrics;
    int tty;
    dt_heartbeat *hb;            /* OUT/hb/rank-K, world > 1 (docs/launch.md §4) */
} trainer;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int check_plan(const dt_plan *p, int world, dt_error *err) {
    if (p->parallel.world_size != world)
        return dt_errorf(err, DT_EINVAL,
                         "the plan asks for %lld ranks (parallel.world_size) but %d were launched; "
                         "launch %lld ranks or re-plan with dtplan for %d",
                         (long long)p->parallel.world_size, world, (long long)p->parallel.world_size, world);
    if (p->model.family != DT_FAMILY_GPT2)
        return dt_errorf(err, DT_EINVAL, "model %s is of the %s family; the engine runs GPT-2 models",
                         p->model.name, dt_family_name(p->model.family));
    if (p->batch.seq_len > p->model.max_pos)
        return dt_errorf(err, DT_EINVAL, "batch.seq_len %lld exceeds the model's max_pos %lld",
                         (long long)p->batch.seq_len, (long long)p->model.max_pos);
    if (p->schedule.total_steps < 1)
        return dt_errorf(err, DT_EINVAL, "schedule.total_steps must be >= 1");
    return DT_OK;
}

static int setup_data(trainer *t, dt_error *err) {
    const dt_plan *p = t->plan;
    const dt_data *d = &p->data;
    const char *train_path = t->opts->data_path ? t->opts->data_path : d->train;
    int64_t T = p->batch.seq_len, B = p->batch.micro_batch;
    if (dt_corpus_open(train_path, d->format, p->model.vocab, &t->train_c, err)) return err->code;
    int64_t n = dt_corpus_windows(t->train_c, T), ntrain = n, nvalid = 0;
    const dt_corpus *vc = NULL;
    int64_t vfirst = 0;
    if (d->valid[0]) {
        if (dt_corpus_open(d->valid, d->format, p->model.vocab, &t->valid_c, err)) return err->code;
        vc = t->valid_c;
        nvalid = dt_corpus_windows(vc, T);
    } else if (d->valid_fraction > 0) {
        dt_split_windows(n, d->valid_fraction, &ntrain, &nvalid);
        vc = t->train_c;
        vfirst = ntrain;
    }
    if (dt_loader_create(t->train_c, T, B, 0, ntrain, 1, d->seed, t->rank, t->world, "training data", &t->train_l,
                         err))
        return dt_error_prefix(err, "%s", train_path);
    /* validation needs at least one micro-batch of windows; with fewer it is skipped */
    if (vc && d->eval_interval > 0 && nvalid >= B &&
        dt_loader_create(vc, T, B, vfirst, nvalid, 0, d->seed, 0, 1, "validation data", &t->valid_l, err))
        return err->code;
    return DT_OK;
}

static int init_weights(trainer *t, int64_t *resumed_from, dt_error *err) {
    const dt_plan *p = t->plan;
    *resumed_from = -1;
    if (t->opts->resume) {
        char path[DT_PATH_MAX * 2];
        int64_t step;
        if (dt_ckpt_latest(t->out_dir, path, sizeof path, &step, err)) return err->code;
        if (step >= 0) {
            int64_t saved_world = 0;
            if (dt_ckpt_load_zero(path, t->g, &p->precision, t->z, &t->st, &saved_world, err)) return err->code;
            *resumed_from = step;
            if (t->opts->log && t->rank == 0 && saved_world != t->world)
                fprintf(t->opts->log, "dtrun: optimizer state of %lld shard(s) resharded for %d rank(s), stage %d\n",
                        (long long)saved_world, t->world, p->parallel.zero_stage);
            return dt_loader_set_pos(t->train_l, t->st.data, err);
        }
        if (t->opts->log) fprintf(t->opts->log, "dtrun: no checkpoint in %s, starting from step 0\n", t->out_dir);
    }
    if (p->output.init[0]) {
        if (dt_weights_load(t->g, &p->model, p->precision.param, p->output.init, err))
            return dt_error_prefix(err, "output.init");
    } else {
        dt_gpt2_init_random(t->g, p->data.seed);
    }
    if (dt_zero_init_from_model(t->z, err)) return err->code;
    dt_loss_scaler_init(&t->st.scaler, &p->precision);
    t->st.rng = p->data.seed;
    return DT_OK;
}

static int evaluate(trainer *t, double *loss_out, dt_error *err) {
    dt_loader_reset(t->valid_l);
    int64_t nb = t->plan->data.eval_batches > 0 ? t->plan->data.eval_batches : 1;
    int64_t avail = dt_loader_windows(t->valid_l) / t->plan->batch.micro_batch;
    if (nb > avail) nb = avail;
    double sum = 0;
    for (int64_t i = 0; i < nb; i++) {
        float loss;
        dt_loader_next(t->valid_l, t->inputs, t->targets);
        dt_zero_set_micro(t->z, 0, err);
        if (dt_gpt2_forward(t->g, t->inputs, t->targets, &loss, err)) return err->code;
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
    fprintf(log, "\rstep %lld/%lld [%s] loss %.4f | %.0f tok/s | ETA %02d:%02d | mem %.1f MiB ",
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

/* A collective failed (timeout, or MPI/NCCL reporting a lost peer): append the
 * heartbeat diagnosis naming the rank that died or hangs. This rank re-beats
 * first and waits DT_DIAG_GRACE_S so the healthy peers do the same. */
static void name_culprit(trainer *t, dt_error *err) {
    if (!t->hb || t->world < 2) return;
    if (!strstr(err->msg, "did not complete within") && !strstr(err->msg, "MPI ") && !strstr(err->msg, "NCCL "))
        return;
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

/* One optimizer step through the ZeRO engine (dt_zero.h); fills the metrics it
 * produced. Loss and norm are global (all ranks). */
static int train_step(trainer *t, double *loss_out, double *lr_out, double *norm_out, int *skipped,
                      char *msg, dt_error *err) {
    const dt_plan *p = t->plan;
    const int64_t accum = p->batch.grad_accum;
    dt_loss_scaler *sc = &t->st.scaler;
    const double scale = sc->cur_scale;   /* the scale this step's loss is multiplied by */
    dt_zero_begin_step(t->z);
    double loss_sum = 0;
    for (int64_t a = 0; a < accum; a++) {
        float loss;
        dt_loader_next(t->train_l, t->inputs, t->targets);
        dt_zero_set_micro(t->z, a == accum - 1, err);
        dt_tracer_set_micro((int)a);
        if (dt_gpt2_forward(t->g, t->inputs, t->targets, &loss, err)) return err->code;
        if (a == 0) test_fault(t);
        if (dt_gpt2_backward(t->g, (float)(scale / (double)accum), err)) return err->code;
        loss_sum += loss;
    }
    if (dt_zero_end_backward(t->z, err)) return err->code;
    t->st.tokens += accum * p->batch.micro_batch * p->batch.seq_len * t->world;
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
    if (p->precision.param == DT_DTYPE_FP16) {
        if (dt_loss_scaler_update(sc, nonfinite, msg, DT_MSG_MAX, err)) return err->code;
        if (nonfinite) {
            *skipped = 1;
            t->st.skipped_steps++;
            *lr_out = dt_schedule_lr(&p->schedule, p->optimizer.lr, t->st.adam_step);
            t->st.data = dt_loader_get_pos(t->train_l);
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
    t->st.data = dt_loader_get_pos(t->train_l);
    return DT_OK;
}

static int save(trainer *t, dt_error *err) {
    char path[DT_PATH_MAX * 2];
    /* no checkpoint from a step whose device work failed */
    if (t->dev->synchronize(err)) return err->code;
    if (dt_ckpt_save_zero(t->out_dir, t->g, &t->plan->model, &t->plan->precision, t->z, t->comm, &t->st,
                          t->plan_json, t->plan->output.keep_last, path, sizeof path, err))
        return err->code;
    if (t->opts->log && t->rank == 0) {
        if (t->tty) fprintf(t->opts->log, "\n");
        fprintf(t->opts->log, "dtrun: saved checkpoint %s\n", path);
    }
    return DT_OK;
}

static void trainer_free(trainer *t) {
    if (t->metrics) fclose(t->metrics);
    dt_loader_free(t->train_l);
    dt_loader_free(t->valid_l);
    dt_corpus_free(t->train_c);
    dt_corpus_free(t->valid_c);
    free(t->inputs);
    free(t->targets);
    dt_zero_free(t->z);
    dt_gpt2_free(t->g);
    if (t->own_comm) dt_comm_free(t->comm);
    free(t->plan_json);
}

static double comm_seconds(trainer *t) { return dt_zero_comm_seconds(t->z); }

int dt_train(const dt_plan *plan, const dt_train_opts *opts, dt_train_result *res, dt_error *err) {
    memset(res, 0, sizeof *res);
    res->last_valid_loss = NAN;
    trainer t;
    memset(&t, 0, sizeof t);
    t.plan = plan;
    t.opts = opts;
    t.comm = opts->comm;
    int rc;
    if (!t.comm) {
        if ((rc = dt_comm_init_self(&t.comm, err))) return rc;
        t.own_comm = 1;
    }
    t.rank = dt_comm_rank(t.comm);
    t.world = dt_comm_size(t.comm);
    /* the device first: a cuda plan on a build or machine without a GPU stops
     * here with dt_device_get's one line, before anything is written */
    if ((rc = check_plan(plan, t.world, err)) ||
        (rc = dt_device_get(plan->cluster.device, dt_comm_local_rank(t.comm), &t.dev, err))) {
        if (t.own_comm) dt_comm_free(t.comm);
        return rc;
    }
    /* human output from rank 0 only; every rank reports its own errors */
    FILE *log = t.rank == 0 ? opts->log : NULL;
    t.tty = log && (opts->progress > 0 || (opts->progress < 0 && isatty(fileno(log))));
    snprintf(t.out_dir, sizeof t.out_dir, "%s", opts->out_dir ? opts->out_dir : plan->output.dir);
    if ((rc = dt_mkdirs(t.out_dir, err))) goto done;
    if (t.world > 1 && (rc = dt_heartbeat_open(&t.hb, t.out_dir, t.rank, err))) goto done;
    if (opts->plan_path && dt_json_read_file(opts->plan_path, &t.plan_json, NULL, err)) {
        rc = err->code;
        goto done;
    }

    const int64_t B = plan->batch.micro_batch, T = plan->batch.seq_len;
    rc = dt_gpt2_create_on(&plan->model, &plan->precision, B, T, plan->activations.ckpt_layers,
                           plan->activations.attention, plan->cluster.device, dt_comm_local_rank(t.comm), &t.g,
                           err);
    if (!rc) rc = dt_zero_create(plan, t.comm, t.g, &t.z, err);
    if (!rc) rc = setup_data(&t, err);
    t.inputs = malloc((size_t)(B * T) * sizeof(int32_t));
    t.targets = malloc((size_t)(B * T) * sizeof(int32_t));
    int64_t resumed = -1;
    if (!rc) rc = init_weights(&t, &resumed, err);
    if (rc) goto done;
    const int64_t total = plan->schedule.total_steps;
    const int64_t stop = opts->max_steps > 0 && opts->max_steps < total ? opts->max_steps : total;
    res->first_step = t.st.step;
    if (t.rank == 0) {
        char mpath[DT_PATH_MAX + 32];
        snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", t.out_dir);
        t.metrics = fopen(mpath, resumed >= 0 ? "a" : "w");
        if (!t.metrics) {
            rc = dt_errorf(err, DT_EIO, "%s: cannot write: %s", mpath, strerror(errno));
            goto done;
        }
    }
    if (log) {
        fprintf(log, "dtrun: %s, %zu params, %s, B=%lld T=%lld accum=%lld, ckpt %lld/%lld layers, %lld train windows\n",
                plan->model.name, dt_gpt2_num_params(t.g), dt_precision_preset_name(plan->precision.preset),
                (long long)B, (long long)T, (long long)plan->batch.grad_accum,
                (long long)plan->activations.ckpt_layers, (long long)plan->model.n_layer,
                (long long)dt_loader_windows(t.train_l));
        fprintf(log, "dtrun: %d rank(s) (%s), ZeRO stage %d, offload optimizer %s / params %s%s\n", t.world,
                dt_comm_backend_name(t.comm), plan->parallel.zero_stage,
                dt_offload_name(plan->parallel.offload_optimizer), dt_offload_name(plan->parallel.offload_param),
                plan->parallel.overlap_comm ? ", overlapped communication" : "");
        if (resumed >= 0) fprintf(log, "dtrun: resumed from step %lld\n", (long long)resumed);
    }
    /* peaks from here on: what a training step needs (set-up temporaries excluded) */
    t.dev->mem_reset_peaks();
    dt_mem_reset_peaks();   /* the host allocations outside the device (the same counters on the cpu) */
    const double tokens_per_step = (double)(plan->batch.grad_accum * B * T * t.world);
    /* --trace: time zero right after a barrier, so the ranks' spans line up */
    if (opts->trace_path) {
        if ((rc = dt_tracer_start(t.rank, plan->model.n_layer, err))) goto done;
        if (t.world > 1 && (rc = dt_comm_barrier(t.comm, err))) goto done;
        dt_tracer_set_origin();
    }
    double time_sum = 0, first_time = 0, comm_sum = 0;
    int64_t timed = 0, log_every = stop / DT_LOG_LINES > 0 ? stop / DT_LOG_LINES : 1;
    char msg[DT_MSG_MAX];
    t.bytes_constant = 1;
    while (t.st.step < stop) {
        double t0 = now_s(), loss = 0, lr = 0, norm = 0, c0 = comm_seconds(&t);
        int skipped;
        msg[0] = '\0';
        dt_heartbeat_beat(t.hb, t.st.step + 1);
        dt_comm_reset_counters(t.comm);
        if ((rc = train_step(&t, &loss, &lr, &norm, &skipped, msg, err))) break;
        double dt = now_s() - t0, dc = comm_seconds(&t) - c0;
        for (int c = 0; c < DT_COLL_COUNT; c++) {
            int64_t b = dt_comm_bytes(t.comm, (dt_collective)c);
            if (timed > 0 && b != t.step_bytes[c]) t.bytes_constant = 0;
            t.step_bytes[c] = b;
        }
        t.st.step++;
        if (timed == 0) first_time = dt;
        else {
            time_sum += dt;
            comm_sum += dc;
        }
        timed++;
        double mean = timed > 1 ? time_sum / (double)(timed - 1) : first_time;
        double tps = tokens_per_step / dt;
        if (t.st.step == res->first_step + 1) res->first_loss = loss;
        res->last_loss = loss;
        if (skipped) res->skipped++;
        double vloss = NAN;
        int64_t ei = plan->data.eval_interval;
        /* on the plan's interval and at the schedule's end only, so --max-steps changes nothing */
        if (t.valid_l && ei > 0 && (t.st.step % ei == 0 || t.st.step == total)) {
            if ((rc = evaluate(&t, &vloss, err))) break;
            res->last_valid_loss = vloss;
        }
        if (t.metrics) {
            fprintf(t.metrics,
                    "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"tokens_per_s\": %.1f, \"step_ms\": %.3f, "
                    "\"grad_norm\": %.9g, \"loss_scale\": %g, \"skipped\": %s, \"mem\": %lld",
                    (long long)t.st.step, loss, lr, tps, dt * 1e3, norm, t.st.scaler.cur_scale,
                    skipped ? "true" : "false", (long long)device_bytes_now(t.dev));
            if (!isnan(vloss)) fprintf(t.metrics, ", \"val_loss\": %.9g", vloss);
            fprintf(t.metrics, "}\n");
            fflush(t.metrics);
        }
        if (log) {
            if (msg[0]) fprintf(log, "%sdtrun: step %lld: %s\n", t.tty ? "\n" : "", (long long)t.st.step, msg);
            if (t.tty) {
                progress(&t, t.st.step, stop, loss, tps, mean * (double)(stop - t.st.step));
                if (!isnan(vloss)) fprintf(log, "\nstep %lld: val loss %.4f\n", (long long)t.st.step, vloss);
            } else if (t.st.step % log_every == 0 || t.st.step == stop || !isnan(vloss)) {
                fprintf(log, "step %lld/%lld: loss %.4f lr %.3g norm %.3f %.0f tok/s%s", (long long)t.st.step,
                        (long long)stop, loss, lr, norm, tps, isnan(vloss) ? "\n" : "");
                if (!isnan(vloss)) fprintf(log, " val loss %.4f\n", vloss);
            }
        }
        int64_t si = plan->output.save_interval;
        if ((si > 0 && t.st.step % si == 0) || t.st.step == stop)
            if ((rc = save(&t, err))) break;
    }
    /* the last optimizer step's asynchronous device errors, before the report */
    if (!rc && t.dev) rc = t.dev->synchronize(err);
    if (rc) name_culprit(&t, err);
    if (log && t.tty) fprintf(log, "\n");
    res->steps = t.st.step;
    res->step_time_s = timed > 1 ? time_sum / (double)(timed - 1) : first_time;
    res->tokens_per_s = res->step_time_s > 0 ? tokens_per_step / res->step_time_s : 0;
    if (!rc) {
        dt_run_measure m;
        memset(&m, 0, sizeof m);
        dt_run_measure_memory(&m);
        /* the device's own accounting (identical to dt_memtrack's on the cpu):
         * cudaMalloc'd device memory and pinned host memory on cuda */
        for (int c = 0; c < DT_MEM_CAT_COUNT; c++) {
            m.peak[c] = t.dev->mem_peak(DT_POOL_DEVICE, (dt_mem_category)c);
            m.host_peak[c] = t.dev->mem_peak(DT_POOL_HOST, (dt_mem_category)c);
        }
        m.peak_total = t.dev->mem_peak_total(DT_POOL_DEVICE);
        m.host_peak_total = t.dev->mem_peak_total(DT_POOL_HOST);
        m.step_time_s = res->step_time_s;
        m.tokens_per_s = res->tokens_per_s;
        m.steps = res->steps;
        m.first_loss = res->first_loss;
        m.last_loss = res->last_loss;
        m.last_valid_loss = res->last_valid_loss;
        m.rank = t.rank;
        m.world = t.world;
        m.have_comm = timed > 0;
        m.comm_constant = t.bytes_constant;
        for (int c = 0; c < DT_COLL_COUNT; c++) m.comm_bytes[c] = t.step_bytes[c];
        m.comm_time_s = timed > 1 ? comm_sum / (double)(timed - 1) : NAN;
        char rpath[DT_PATH_MAX + 48];
        if (t.rank == 0) snprintf(rpath, sizeof rpath, "%s/run-report.json", t.out_dir);
        else snprintf(rpath, sizeof rpath, "%s/run-report-rank%05d.json", t.out_dir, t.rank);
        rc = dt_run_report_write(rpath, plan, opts->plan_path, &m, log, err);
    }
    if (!rc && opts->trace_path) {
        rc = dt_tracer_finish(opts->trace_path, t.comm, err);
        if (!rc && log) fprintf(log, "dtrun: wrote trace %s\n", opts->trace_path);
    }
done:
    dt_tracer_stop();
    dt_heartbeat_close(t.hb, rc == DT_OK);
    trainer_free(&t);
    return rc;
}
