/* dt_gpt2.h — the GPT-2 family transformer on a device backend: parameter
 * layout, forward, backward, activation checkpointing.
 *
 * Parameters live in one flat buffer (param dtype) with an offset table, grouped
 * per layer so ZeRO can gather / reduce-scatter one group at a time:
 *   group 0        : wte [V, C], wpe [maxT, C]
 *   group 1 + l    : block l: ln_1.{weight,bias} [C], attn.c_attn.{weight [C, 3C], bias [3C]},
 *                    attn.c_proj.{weight [C, C], bias [C]}, ln_2.{weight,bias} [C],
 *                    mlp.c_fc.{weight [C, 4C], bias [4C]}, mlp.c_proj.{weight [4C, C], bias [C]}
 *   group L + 1    : ln_f.{weight,bias} [C]
 * Weight shapes are written as Hugging Face's Conv1D stores them ([in, out]).
 * Gradients use the same layout in the grad dtype. The model touches a group's
 * parameters / gradients only through dt_gpt2_group_params/_grads pointers, which
 * the distributed runtime may rebind, and calls the hooks around each group. */
#ifndef DT_GPT2_H
#define DT_GPT2_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_memtrack.h"
#include "dt_model.h"
#include "dt_plan.h"
#include "dt_precision.h"

typedef struct dt_gpt2 dt_gpt2;

typedef struct dt_tensor_info {
    const char *name;     /* Hugging Face name without the "transformer." prefix, e.g. "h.3.attn.c_attn.weight" */
    int group;            /* 0 .. L+1 */
    size_t offset;        /* elements from the start of the flat buffer */
    size_t numel;
    int ndim;             /* 1 or 2 */
    int64_t shape[2];
} dt_tensor_info;

/* Called by the model around each parameter group; any may be NULL. A non-zero
 * return aborts the pass with that code (err filled by the hook's owner). */
typedef struct dt_gpt2_hooks {
    void *ctx;
    int (*before_forward)(void *ctx, int group);
    int (*after_forward)(void *ctx, int group);
    int (*before_backward)(void *ctx, int group);
    int (*after_backward)(void *ctx, int group);   /* group's grads complete for this micro-step */
} dt_gpt2_hooks;

/* B: micro-batch, T: sequence length (<= max_pos). ckpt_layers: the first
 * ckpt_layers blocks keep only their input and are recomputed in backward.
 * Allocates params (DT_MEM_PARAMS), grads (DT_MEM_GRADS), saved activations
 * (DT_MEM_ACTIVATIONS) and scratch/logits (DT_MEM_BUFFERS) through dt_memtrack. */
int dt_gpt2_create(const dt_model *m, const dt_precision *prec, int64_t B, int64_t T,
                   int64_t ckpt_layers, dt_attention attn, dt_gpt2 **out, dt_error *err);
/* The same on a device (dt_device.h): DT_DEVICE_CPU is dt_gpt2_create;
 * DT_DEVICE_CUDA binds this process to GPU `ordinal` (LOCAL_RANK) and fails with
 * DT_ERUNTIME when the build has no CUDA or no GPU is visible. On CUDA every
 * pointer this API returns or accepts (params, grads, logits, group pointers,
 * dt_gpt2_bind_group storage) is DEVICE memory from the device's alloc, and
 * hooks run on the host between kernels enqueued on the compute stream. */
int dt_gpt2_create_on(const dt_model *m, const dt_precision *prec, int64_t B, int64_t T,
                      int64_t ckpt_layers, dt_attention attn, dt_device device, int ordinal,
                      dt_gpt2 **out, dt_error *err);
dt_device dt_gpt2_device(const dt_gpt2 *g);
/* The device's operation table (copies, allocation, sync) for callers that
 * move data in and out of the model's storage. */
const struct dt_device_ops *dt_gpt2_device_ops(const dt_gpt2 *g);
void dt_gpt2_free(dt_gpt2 *g);

int dt_gpt2_num_tensors(const dt_gpt2 *g);
const dt_tensor_info *dt_gpt2_tensor(const dt_gpt2 *g, int i);
int dt_gpt2_num_groups(const dt_gpt2 *g);                  /* L + 2 */
size_t dt_gpt2_group_offset(const dt_gpt2 *g, int group);  /* elements */
size_t dt_gpt2_group_numel(const dt_gpt2 *g, int group);
size_t dt_gpt2_num_params(const dt_gpt2 *g);

void *dt_gpt2_params(dt_gpt2 *g);   /* flat, param dtype, num_params elements */
void *dt_gpt2_grads(dt_gpt2 *g);    /* flat, grad dtype */
void dt_gpt2_set_hooks(dt_gpt2 *g, const dt_gpt2_hooks *hooks);

/* Hook order. Forward: before/after_forward(0) around the encoder, then
 * before/after_forward(1 + l) for each block l, before/after_forward(L + 1) around
 * ln_f, then before/after_forward(0) AGAIN around the tied classifier (wte).
 * Backward: before_backward(0) (classifier), before/after_backward(L + 1),
 * before/after_backward(1 + l) for l = L-1 .. 0 (a checkpointed block is
 * recomputed inside its pair), encoder, after_backward(0). Group 0's grads are
 * complete only at after_backward(0), the last call. */

/* Per-group storage, as the model sees it: the base of a group's parameters
 * (param dtype) and gradients (grad dtype), group_numel elements each. By
 * default they point into the flat buffers. */
void *dt_gpt2_group_params(dt_gpt2 *g, int group);
void *dt_gpt2_group_grads(dt_gpt2 *g, int group);
/* Rebinds a group's parameter and gradient storage (e.g. a ZeRO-3 gather buffer
 * or a ZeRO-2 bucket); NULL restores the default (the flat buffer). The memory
 * must hold group_numel elements of the param / grad dtype and outlive its use.
 * Returns DT_EINVAL for a group outside 0 .. L+1. */
int dt_gpt2_bind_group(dt_gpt2 *g, int group, void *params, void *grads);
/* Frees the flat parameter and/or gradient buffer once every group has been
 * rebound to the caller's storage (ZeRO-2 keeps gradients only per unit, ZeRO-3
 * parameters too), so a rank holds what its stage says and nothing more.
 * DT_EINVAL (nothing freed) while any group still points into that buffer.
 * Afterwards dt_gpt2_params / dt_gpt2_grads return NULL and binding a group
 * back to the released buffer (NULL) fails, until dt_gpt2_restore_flat. */
int dt_gpt2_release_flat(dt_gpt2 *g, int params, int grads, dt_error *err);
/* Re-allocates a released flat buffer (contents undefined) in category cat (e.g.
 * DT_MEM_BUFFERS for a checkpoint's transient consolidation); groups keep their
 * bindings. A buffer that was never released is left as it is. */
int dt_gpt2_restore_flat(dt_gpt2 *g, int params, int grads, dt_mem_category cat, dt_error *err);

/* GPT-2 init from seed: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
 * biases 0, LayerNorm weight 1. Deterministic for a given seed. */
void dt_gpt2_init_random(dt_gpt2 *g, uint64_t seed);

/* inputs, targets: [B, T] token ids. targets may be NULL (logits only).
 * *loss = mean cross-entropy over B*T (fp32). */
int dt_gpt2_forward(dt_gpt2 *g, const int32_t *inputs, const int32_t *targets, float *loss,
                    dt_error *err);
/* Tokens outside 0..V-1 are DT_EINVAL. Without targets *loss is not written. */
/* Backward of the last forward (which must have had targets); gradients are
 * ACCUMULATED into the grad buffer, scaled by grad_scale (1/accum * loss scale). */
int dt_gpt2_backward(dt_gpt2 *g, float grad_scale, dt_error *err);
void dt_gpt2_zero_grad(dt_gpt2 *g);
/* fp32 logits [B, T, V] of the last forward (after dt_gpt2_backward the buffer
 * holds the logit gradients instead). */
const float *dt_gpt2_logits(const dt_gpt2 *g);

/* 1 if every gradient (through the bound group pointers) is finite, 0 if any is
 * inf or NaN: the overflow test of fp16 dynamic loss scaling. */
int dt_gpt2_grads_finite(const dt_gpt2 *g);
/* Sum of squared gradients over all groups, in double, in an order independent
 * of the thread count (global-norm clipping: norm = sqrt(sumsq) / loss scale). */
double dt_gpt2_grad_sumsq(const dt_gpt2 *g);
/* Bytes of the saved-activation allocation (DT_MEM_ACTIVATIONS), the quantity
 * docs/activations.md defines. */
size_t dt_gpt2_activation_bytes(const dt_gpt2 *g);

#endif
