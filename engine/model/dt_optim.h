/* dt_optim.h — AdamW over a flat parameter buffer, learning-rate schedules,
 * global-norm clipping and fp16 dynamic loss scaling, with DeepSpeed's
 * semantics (docs/dtrun.md "What a step does", which names the DeepSpeed sources).
 *
 * Optimizer state per precision preset (dt_precision):
 *   fp32        : m, v fp32; the params are the master.
 *   mixed-bf16,
 *   mixed-fp16  : fp32 master copy + fp32 m, v; the 16-bit params are rounded
 *                 (to nearest even) from the master after every update.
 *   pure-bf16   : bf16 m, v, no master; the update is computed in fp32 and
 *                 rounded into the bf16 params.
 * All state lives in one allocation per array in DT_MEM_OPTIMIZER (device pool),
 * so a later ZeRO engine can own any contiguous element range of it.
 * Counts are in elements unless a name says bytes. */
#ifndef DT_OPTIM_H
#define DT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_memtrack.h"
#include "dt_plan.h"
#include "dt_precision.h"

/* ---- AdamW ---- */

typedef struct dt_adamw {
    double lr;             /* this step's learning rate (from the schedule) */
    double beta1, beta2, eps;
    double weight_decay;   /* decoupled (torch.optim.AdamW, DeepSpeed adam_w_mode) */
} dt_adamw;

typedef struct dt_optim dt_optim;

/* n: parameters (elements) this optimizer owns. Allocates master (if the preset
 * has one) and m, v in the preset's moment dtype; all zero. */
int dt_optim_create(const dt_precision *prec, size_t n, dt_optim **out, dt_error *err);
void dt_optim_free(dt_optim *o);
/* The same in a chosen memory pool: DT_POOL_HOST for offload_optimizer = cpu. */
int dt_optim_create_in(const dt_precision *prec, size_t n, dt_mem_pool pool, dt_optim **out,
                       dt_error *err);

/* Copies the working params (prec->param dtype) into the fp32 master; a no-op
 * without a master. Call once after the params are initialised or loaded. */
void dt_optim_init_master(dt_optim *o, const void *params);

/* One AdamW update of elements [begin, begin + count) of the flat buffers.
 * grad_mul multiplies every gradient first (1 / (loss_scale * clip_coef)).
 * decay: 1 applies weight_decay to this range, 0 does not. t: the 1-based step
 * used for bias correction (successful steps only). Deterministic and
 * independent of the thread count. */
void dt_optim_update(dt_optim *o, void *params, const void *grads, size_t begin, size_t count,
                     const dt_adamw *hp, double grad_mul, int decay, int64_t t);

/* The same update with the state index decoupled from the data: state elements
 * [state_begin, state_begin + count) against params[0 .. count) (param dtype) and
 * grads[0 .. count) of grad_dt (a sharded or offloaded engine keeps them apart). */
void dt_optim_update_at(dt_optim *o, size_t state_begin, void *params, const void *grads,
                        dt_dtype grad_dt, size_t count, const dt_adamw *hp, double grad_mul,
                        int decay, int64_t t);

/* The raw AdamW kernel on explicit arrays (element 0 of each is the range's
 * first): what the optimizer objects and the NVMe swap path both run. */
typedef struct dt_adamw_arrays {
    float *master;           /* fp32, or NULL: params are the master */
    void *m, *v;             /* moment_dt */
    void *params;            /* param_dt, written (read too without a master) */
    const void *grads;       /* grad_dt */
    dt_dtype param_dt, grad_dt, moment_dt;
} dt_adamw_arrays;
void dt_adamw_apply(const dt_adamw_arrays *a, size_t count, const dt_adamw *hp, double grad_mul,
                    int decay, int64_t t);

size_t dt_optim_numel(const dt_optim *o);
int dt_optim_has_master(const dt_optim *o);
dt_dtype dt_optim_moment_dtype(const dt_optim *o);
float *dt_optim_master(dt_optim *o);   /* NULL without a master */
void *dt_optim_m(dt_optim *o);         /* moment dtype */
void *dt_optim_v(dt_optim *o);

/* Sum of squares (fp64) of n gradients of dtype dt, and whether any is inf/nan.
 * Deterministic: fixed-size blocks summed in order. */
double dt_grad_sumsq(const void *grads, dt_dtype dt, size_t n, int *nonfinite);

/* DeepSpeed's combined unscale + clip factor (stage_1_and_2.unscale_and_clip_grads):
 * norm is the global L2 norm of the *scaled* grads; returns the divisor
 *   clip * loss_scale, clip = max(1, (norm / loss_scale + 1e-6) / max_norm)
 * (max_norm <= 0 disables clipping: clip = 1). Multiply grads by 1/divisor. */
double dt_clip_divisor(double norm, double loss_scale, double max_norm);

/* ---- learning-rate schedules (DeepSpeed lr_schedules.py) ----
 * The learning rate the optimizer step uses when t optimizer steps have been applied before it
 * (overflow-skipped fp16 steps do not count), exactly as under DeepSpeed's engine: the
 * scheduler's __init__ sets the first value (last_batch_iteration -1: warmup_min_lr, or 0 for
 * WarmupCosineLR) and engine.py _take_model_step steps it after each applied step, so step t
 * uses the scheduler's value at last_batch_iteration t - 1. Past total_steps the value stays
 * at its end (WarmupDecayLR 0, WarmupCosineLR cos_min_ratio * lr). lr is the optimizer's peak
 * learning rate. Checked against DeepSpeed's classes: tests/engine/golden/lr_schedules.txt. */
double dt_schedule_lr(const dt_schedule *s, double lr, int64_t t);
const char *dt_schedule_name(dt_sched_kind k);   /* "constant", "WarmupLR", ... */

/* ---- fp16 dynamic loss scaler (DeepSpeed DynamicLossScaler) ---- */

typedef struct dt_loss_scaler {
    int dynamic;              /* 0: static scale (bf16 / fp32: 1.0) */
    double cur_scale;
    double scale_factor;      /* 2 */
    int64_t scale_window;
    double min_scale;
    int delayed_shift;        /* hysteresis */
    int cur_hysteresis;
    int consecutive_hysteresis;
    int64_t cur_iter;
    int64_t last_overflow_iter;
} dt_loss_scaler;

/* From the plan's precision: fp16 with loss_scale 0 -> dynamic, initial scale
 * 2^initial_scale_power; fp16 with loss_scale > 0 -> that static scale;
 * everything else -> static 1.0. */
void dt_loss_scaler_init(dt_loss_scaler *s, const dt_precision *prec);

/* Advances the state machine after one optimizer step. overflow: the step's
 * gradients held an inf/nan (the step is skipped by the caller). Fills msg (may
 * be NULL) with DeepSpeed's log line when an overflow happened, "" otherwise.
 * Returns DT_ERUNTIME (with err) when an overflow happens at the minimum scale,
 * as DeepSpeed raises. */
int dt_loss_scaler_update(dt_loss_scaler *s, int overflow, char *msg, size_t msg_len,
                          dt_error *err);

#endif
