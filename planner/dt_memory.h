/* dt_memory.h — the memory model: bytes per rank (device), per node (host) and
 * on NVMe for a plan's model, ZeRO stage, offload, precision, batch and
 * checkpointing. Formulas and sources: docs/memory-model.md. */
#ifndef DT_MEMORY_H
#define DT_MEMORY_H

#include "dt_plan.h"

/* Fills out from p (model, cluster, parallel, batch, precision, activations).
 * reserve comes from p->cluster.hw.reserve_bytes. Fails (DT_EINVAL) on plans
 * the model cannot describe (e.g. offload_param with stage < 3). */
int dt_memory_estimate(const dt_plan *p, dt_mem_breakdown *out, dt_error *err);

/* dt_memory_estimate with the model-state parameter count given explicitly
 * (n_params > 0): a derived shape (--params 32B) keeps the exact requested count
 * for params/grads/optimizer while activations and gather units use the shape.
 * n_params <= 0 means dt_model_params(&p->model). */
int dt_memory_estimate_n(const dt_plan *p, int64_t n_params, dt_mem_breakdown *out, dt_error *err);

/* The pieces, for the solver's linearisation and the simulator (bytes per rank). */
int64_t dt_memory_activations_per_block(const dt_plan *p, int checkpointed); /* saved by one block */
int64_t dt_memory_activations(const dt_plan *p, int64_t ckpt_layers);        /* all blocks + head */

#endif
