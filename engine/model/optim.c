/* optim.c — see dt_optim.h. */
#include "dt_optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_memtrack.h"

/* One element of a buffer of dtype t, as fp32 (and back, rounding to nearest even). */
static inline float ld(const void *p, dt_dtype t, size_t i) {
    switch (t) {
    case DT_DTYPE_BF16: return dt_bf16_to_f32(((const dt_bf16 *)p)[i]);
    case DT_DTYPE_FP16: return dt_fp16_to_f32(((const dt_fp16 *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static inline void st(void *p, dt_dtype t, size_t i, float x) {
    switch (t) {
    case DT_DTYPE_BF16: ((dt_bf16 *)p)[i] = dt_f32_to_bf16(x); break;
    case DT_DTYPE_FP16: ((dt_fp16 *)p)[i] = dt_f32_to_fp16(x); break;
    default: ((float *)p)[i] = x; break;
    }
}

struct dt_optim {
    dt_precision prec;
    size_t n;
    float *master;     /* [n] fp32, or NULL */
    void *m, *v;       /* [n] moment dtype */
};

int dt_optim_create(const dt_precision *prec, size_t n, dt_optim **out, dt_error *err) {
    return dt_optim_create_in(prec, n, DT_POOL_DEVICE, out, err);
}

int dt_optim_create_in(const dt_precision *prec, size_t n, dt_mem_pool pool, dt_optim **out,
                       dt_error *err) {
    *out = NULL;
    if (n == 0) return dt_errorf(err, DT_EINVAL, "optimizer: no parameters to optimise");
    if (prec->moment != DT_DTYPE_FP32 && prec->moment != DT_DTYPE_BF16)
        return dt_errorf(err, DT_EINVAL, "optimizer: moments in %s are not supported (use fp32 or bf16)",
                         dt_dtype_name(prec->moment));
    if (prec->has_master && prec->master != DT_DTYPE_FP32)
        return dt_errorf(err, DT_EINVAL, "optimizer: master weights must be fp32, not %s",
                         dt_dtype_name(prec->master));
    if (!prec->has_master && prec->param == DT_DTYPE_FP16)
        return dt_errorf(err, DT_EINVAL,
                         "optimizer: fp16 params need fp32 master weights (use mixed-fp16)");
    dt_optim *o = calloc(1, sizeof *o);
    if (!o) return dt_errorf(err, DT_ENOMEM, "optimizer: out of memory");
    o->prec = *prec;
    o->n = n;
    size_t msz = (size_t)dt_dtype_size(prec->moment);
    o->m = dt_mem_alloc(pool, DT_MEM_OPTIMIZER, n * msz);
    o->v = dt_mem_alloc(pool, DT_MEM_OPTIMIZER, n * msz);
    if (prec->has_master) o->master = dt_mem_alloc(pool, DT_MEM_OPTIMIZER, n * sizeof(float));
    if (!o->m || !o->v || (prec->has_master && !o->master)) {
        dt_optim_free(o);
        return dt_errorf(err, DT_ENOMEM, "optimizer: cannot allocate state for %zu parameters", n);
    }
    *out = o;
    return DT_OK;
}

void dt_optim_free(dt_optim *o) {
    if (!o) return;
    dt_mem_free(o->master);
    dt_mem_free(o->m);
    dt_mem_free(o->v);
    free(o);
}

size_t dt_optim_numel(const dt_optim *o) { return o->n; }
int dt_optim_has_master(const dt_optim *o) { return o->master != NULL; }
dt_dtype dt_optim_moment_dtype(const dt_optim *o) { return o->prec.moment; }
float *dt_optim_master(dt_optim *o) { return o->master; }
void *dt_optim_m(dt_optim *o) { return o->m; }
void *dt_optim_v(dt_optim *o) { return o->v; }

void dt_optim_init_master(dt_optim *o, const void *params) {
    if (!o->master) return;
    for (size_t i = 0; i < o->n; i++) o->master[i] = ld(params, o->prec.param, i);
}

/* The per-element update, torch.optim.AdamW's order (decay first, then Adam):
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p = p (1 - lr wd) - lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) */
/* (dt_adamw_elem, dt_devmath.h: the device kernels compute the same.) The scalars go by
 * value into every thread (firstprivate): read through a pointer the compiler could not
 * prove apart from the arrays the loop writes, they were reloaded per element and the
 * loop stayed scalar (docs/benchmarks.md "AdamW"). */

/* the fp32 preset: every array fp32, no master */
static void adamw_fp32(float *restrict p, float *restrict m, float *restrict v, const float *restrict g,
                       long long n, dt_adamw_scalars k) {
#pragma omp parallel for schedule(static) firstprivate(k)
    for (long long i = 0; i < n; i++) p[i] = dt_adamw_elem(p[i], g[i], &m[i], &v[i], &k);
}

/* mixed-bf16: fp32 master and moments, bf16 params and grads */
static void adamw_master_bf16(float *restrict master, float *restrict m, float *restrict v, dt_bf16 *restrict params,
                              const dt_bf16 *restrict grads, long long n, dt_adamw_scalars k) {
#pragma omp parallel for schedule(static) firstprivate(k)
    for (long long i = 0; i < n; i++) {
        const float p = dt_adamw_elem(master[i], dt_bf16_to_f32(grads[i]), &m[i], &v[i], &k);
        master[i] = p;
        params[i] = dt_f32_to_bf16(p);
    }
}

/* other mixes with an fp32 master and moments: 16-bit or fp32 params and grads */
static void adamw_master(float *restrict master, float *restrict m, float *restrict v, void *params, dt_dtype pdt,
                         const void *grads, dt_dtype gdt, long long n, dt_adamw_scalars k) {
    if (pdt == DT_DTYPE_BF16 && gdt == DT_DTYPE_BF16) {
        adamw_master_bf16(master, m, v, params, grads, n, k);
        return;
    }
#pragma omp parallel for schedule(static) firstprivate(k)
    for (long long i = 0; i < n; i++) {
        const float p = dt_adamw_elem(master[i], ld(grads, gdt, (size_t)i), &m[i], &v[i], &k);
        master[i] = p;
        st(params, pdt, (size_t)i, p);
    }
}

void dt_adamw_apply(const dt_adamw_arrays *a, size_t count, const dt_adamw *hp, double grad_mul,
                    int decay, int64_t t) {
    const dt_adamw_scalars k =
        dt_adamw_make_scalars(hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, grad_mul, decay, t);
    const dt_dtype pdt = a->param_dt, gdt = a->grad_dt, mdt = a->moment_dt;
    float *master = a->master;
    void *params = a->params, *mm = a->m, *vv = a->v;
    const void *grads = a->grads;
    const long long n = (long long)count;
    if (mdt == DT_DTYPE_FP32 && !master && pdt == DT_DTYPE_FP32 && gdt == DT_DTYPE_FP32) {
        adamw_fp32(params, mm, vv, grads, n, k);
        return;
    }
    if (mdt == DT_DTYPE_FP32 && master) {
        adamw_master(master, mm, vv, params, pdt, grads, gdt, n, k);
        return;
    }
#pragma omp parallel for schedule(static) firstprivate(k)
    for (long long i = 0; i < n; i++) {   /* 16-bit moments */
        float m = ld(mm, mdt, (size_t)i), v = ld(vv, mdt, (size_t)i);
        const float p = dt_adamw_elem(master ? master[i] : ld(params, pdt, (size_t)i), ld(grads, gdt, (size_t)i),
                                      &m, &v, &k);
        st(mm, mdt, (size_t)i, m);
        st(vv, mdt, (size_t)i, v);
        if (master) master[i] = p;
        st(params, pdt, (size_t)i, p);
    }
}

static void *elem(void *p, dt_dtype t, size_t i) { return p ? (char *)p + i * (size_t)dt_dtype_size(t) : NULL; }

void dt_optim_update_at(dt_optim *o, size_t state_begin, void *params, const void *grads,
                        dt_dtype grad_dt, size_t count, const dt_adamw *hp, double grad_mul,
                        int decay, int64_t t) {
    dt_adamw_arrays a = {
        .master = o->master ? o->master + state_begin : NULL,
        .m = elem(o->m, o->prec.moment, state_begin),
        .v = elem(o->v, o->prec.moment, state_begin),
        .params = params, .grads = grads,
        .param_dt = o->prec.param, .grad_dt = grad_dt, .moment_dt = o->prec.moment};
    dt_adamw_apply(&a, count, hp, grad_mul, decay, t);
}

void dt_optim_update(dt_optim *o, void *params, const void *grads, size_t begin, size_t count,
                     const dt_adamw *hp, double grad_mul, int decay, int64_t t) {
    dt_optim_update_at(o, begin, elem(params, o->prec.param, begin),
                       (const char *)grads + begin * (size_t)dt_dtype_size(o->prec.grad), o->prec.grad,
                       count, hp, grad_mul, decay, t);
}

/* Fixed block partition (not per thread) so the sum does not depend on the
 * number of OpenMP threads. */
#define DT_SUMSQ_BLOCKS 1024

/* One block's sum of squares in SUMSQ_LANES double accumulators, element i of the block
 * into lane i mod SUMSQ_LANES, the lanes added in order at the end: the same double for
 * any thread count. One accumulator made every add wait for the previous one (a
 * dependency chain at the add's latency): GPT-2 124M's norm took longer than its AdamW. */
#define SUMSQ_LANES 8
static double lanes_total(const double *acc) {
    double s = 0.0;
    for (int j = 0; j < SUMSQ_LANES; j++) s += acc[j];
    return s;
}
static double sumsq_lanes_f32(const float *restrict g, size_t n, int *nonfinite) {
    double acc[SUMSQ_LANES] = {0};
    int nf = 0;
    size_t i = 0;
    for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)
        for (int j = 0; j < SUMSQ_LANES; j++) {
            const double x = (double)g[i + j];
            nf |= !isfinite(g[i + j]);
            acc[j] += x * x;
        }
    for (; i < n; i++) {
        const double x = (double)g[i];
        nf |= !isfinite(g[i]);
        acc[i % SUMSQ_LANES] += x * x;
    }
    *nonfinite = nf;
    return lanes_total(acc);
}
static double sumsq_lanes(const void *grads, dt_dtype dt, size_t lo, size_t hi, int *nonfinite) {
    double acc[SUMSQ_LANES] = {0};
    int nf = 0;
    for (size_t i = lo; i < hi; i++) {
        const float g = ld(grads, dt, i);
        nf |= !isfinite(g);
        acc[(i - lo) % SUMSQ_LANES] += (double)g * (double)g;
    }
    *nonfinite = nf;
    return lanes_total(acc);
}

double dt_grad_sumsq(const void *grads, dt_dtype dt, size_t n, int *nonfinite) {
    double part[DT_SUMSQ_BLOCKS];
    int bad[DT_SUMSQ_BLOCKS];
    size_t bs = (n + DT_SUMSQ_BLOCKS - 1) / DT_SUMSQ_BLOCKS;
    if (bs == 0) bs = 1;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < DT_SUMSQ_BLOCKS; b++) {
        size_t lo = (size_t)b * bs, hi = lo + bs < n ? lo + bs : n;
        part[b] = dt_dtype_size(dt) == 4 ? sumsq_lanes_f32((const float *)grads + lo, lo < hi ? hi - lo : 0, &bad[b])
                                         : sumsq_lanes(grads, dt, lo, hi, &bad[b]);
    }
    double s = 0.0;
    int nf = 0;
    for (int b = 0; b < DT_SUMSQ_BLOCKS; b++) {
        s += part[b];
        nf |= bad[b];
    }
    if (nonfinite) *nonfinite = nf || !isfinite(s);
    return s;
}

/* DeepSpeed adds this to the unscaled norm before dividing by the clip value
 * (runtime/zero/stage_1_and_2.py unscale_and_clip_grads). */
#define DT_CLIP_NORM_EPS 1e-6

double dt_clip_divisor(double norm, double loss_scale, double max_norm) {
    double clip = 1.0;
    if (max_norm > 0.0) {
        clip = (norm / loss_scale + DT_CLIP_NORM_EPS) / max_norm;
        if (clip < 1.0) clip = 1.0;
    }
    return clip * loss_scale;
}

/* ---- schedules: deepspeed/runtime/lr_schedules.py ---- */

/* DeepSpeed clamps warmup_num_steps to at least 2 (the log warmup divides by ln W). */
#define DT_MIN_WARMUP_STEPS 2

/* WarmupLR._get_gamma / WarmupCosineLR.get_lr_ratio's warmup part at last_batch_iteration i < W */
static double warmup_gamma(const dt_schedule *s, int64_t i, int64_t W) {
    if (s->warmup_linear) return (double)i / (double)W;
    return 1.0 / log((double)W) * log((double)i + 1.0);
}

/* WarmupDecayLR._get_gamma after the warmup: max(0, (T - i) / max(1, T - W)) */
static double decay_gamma(int64_t i, int64_t T, int64_t W) {
    double span = (double)(T - W) > 1.0 ? (double)(T - W) : 1.0;
    double g = (double)(T - i) / span;
    return g > 0.0 ? g : 0.0;
}

/* WarmupCosineLR.get_lr_ratio after the warmup: the cosine progress clamped to [0, 1] (the
 * ratio stays at cos_min_ratio at and past the end, and when T <= W), then max(0, ratio). */
static double cosine_ratio(const dt_schedule *s, int64_t i, int64_t T, int64_t W) {
    double real_last = (double)(i - W + 1);
    double real_total = T - W > 1 ? (double)(T - W) : 1.0;
    double progress = real_last / real_total < 1.0 ? real_last / real_total : 1.0;
    double r = (1.0 + cos(M_PI * progress)) / 2.0;
    r = s->cos_min_ratio + (1.0 - s->cos_min_ratio) * r;
    return r > 0.0 ? r : 0.0;
}

/* The scheduler's value at last_batch_iteration i >= -1 (i = -1: what __init__ sets). */
static double schedule_at(const dt_schedule *s, double lr, int64_t i) {
    int64_t W = s->warmup_steps > DT_MIN_WARMUP_STEPS ? s->warmup_steps : DT_MIN_WARMUP_STEPS;
    int64_t T = s->total_steps;
    switch (s->kind) {
    case DT_SCHED_CONSTANT:
        return lr;
    case DT_SCHED_WARMUP_LR:
    case DT_SCHED_WARMUP_DECAY_LR: {
        if (i < 0) return s->warmup_min_lr;
        double g = i < W ? warmup_gamma(s, i, W) : s->kind == DT_SCHED_WARMUP_LR ? 1.0 : decay_gamma(i, T, W);
        return s->warmup_min_lr + (lr - s->warmup_min_lr) * g;
    }
    case DT_SCHED_WARMUP_COSINE_LR: {
        if (i < 0) return 0.0;
        double r = i < W ? s->warmup_min_lr + (1.0 - s->warmup_min_lr) * warmup_gamma(s, i, W)
                         : cosine_ratio(s, i, T, W);
        return lr * r;
    }
    }
    return lr;
}

double dt_schedule_lr(const dt_schedule *s, double lr, int64_t t) {
    return schedule_at(s, lr, t - 1);
}

const char *dt_schedule_name(dt_sched_kind k) {
    switch (k) {
    case DT_SCHED_CONSTANT: return "constant";
    case DT_SCHED_WARMUP_LR: return "WarmupLR";
    case DT_SCHED_WARMUP_DECAY_LR: return "WarmupDecayLR";
    case DT_SCHED_WARMUP_COSINE_LR: return "WarmupCosineLR";
    }
    return "?";
}

/* ---- loss scaler: deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler ---- */

#define DT_LOSS_SCALE_FACTOR 2.0   /* DynamicLossScaler scale_factor default */

void dt_loss_scaler_init(dt_loss_scaler *s, const dt_precision *prec) {
    memset(s, 0, sizeof *s);
    s->scale_factor = DT_LOSS_SCALE_FACTOR;
    s->last_overflow_iter = -1;
    s->cur_scale = 1.0;
    s->min_scale = 1.0;
    s->scale_window = 1;
    s->delayed_shift = 1;
    s->cur_hysteresis = 1;
    if (prec->param != DT_DTYPE_FP16) return;
    if (prec->loss_scale > 0.0) {
        s->cur_scale = prec->loss_scale;
        return;
    }
    s->dynamic = 1;
    s->cur_scale = ldexp(1.0, prec->initial_scale_power);
    s->scale_window = prec->loss_scale_window > 0 ? prec->loss_scale_window : 1;
    s->min_scale = prec->min_loss_scale;
    s->delayed_shift = prec->hysteresis > 0 ? prec->hysteresis : 1;
    s->cur_hysteresis = s->delayed_shift;
}

int dt_loss_scaler_update(dt_loss_scaler *s, int overflow, char *msg, size_t msg_len,
                          dt_error *err) {
    if (msg && msg_len) msg[0] = '\0';
    if (!s->dynamic) {
        if (overflow && msg)
            snprintf(msg, msg_len, "OVERFLOW! Skipping step. Static loss scale %g is kept",
                     s->cur_scale);
        s->cur_iter++;
        return DT_OK;
    }
    if (overflow) {
        if (s->delayed_shift == 1 || s->cur_hysteresis == 1) {
            if (s->cur_scale == s->min_scale)
                return dt_errorf(err, DT_ERUNTIME,
                                 "Current loss scale already at minimum (%g) - cannot decrease "
                                 "scale anymore: the fp16 gradients overflow at every scale; "
                                 "lower the learning rate or use mixed-bf16",
                                 s->min_scale);
            double next = s->cur_scale / s->scale_factor;
            if (next < s->min_scale) next = s->min_scale;
            if (msg)
                snprintf(msg, msg_len,
                         "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: %g, reducing to %g",
                         s->cur_scale, next);
            s->cur_scale = next;
        } else {
            if (msg)
                snprintf(msg, msg_len,
                         "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: %g, but hysteresis "
                         "is %d. Reducing hysteresis to %d",
                         s->cur_scale, s->cur_hysteresis, s->cur_hysteresis - 1);
            s->cur_hysteresis--;
        }
        s->last_overflow_iter = s->cur_iter;
    } else {
        if (s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
        if ((s->cur_iter - s->last_overflow_iter) % s->scale_window == 0) {
            if (!s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
            s->cur_scale *= s->scale_factor;
        }
    }
    s->cur_iter++;
    return DT_OK;
}
