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

/* GPT-2 init from seed: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
 * biases 0, LayerNorm weight 1. Deterministic for a given seed. */
void dt_gpt2_init_random(dt_gpt2 *g, uint64_t seed);

/* inputs, targets: [B, T] token ids. targets may be NULL (logits only).
 * *loss = mean cross-entropy over B*T (fp32). */
int dt_gpt2_forward(dt_gpt2 *g, const int32_t *inputs, const int32_t *targets, float *loss,
                    dt_error *err);
/* Backward of the last forward (which must have had targets); gradients are
 * ACCUMULATED into the grad buffer, scaled by grad_scale (1/accum * loss scale). */
int dt_gpt2_backward(dt_gpt2 *g, float grad_scale, dt_error *err);
void dt_gpt2_zero_grad(dt_gpt2 *g);
/* fp32 logits [B, T, V] of the last forward. */
const float *dt_gpt2_logits(const dt_gpt2 *g);

#endif
