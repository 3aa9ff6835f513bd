/* dt_memory.h — the memory model: bytes per rank (device), per node (host) and
 * on NVMe for a plan's model, ZeRO stage, offload, precision, batch and
 * checkpointing. Formulas and sources: docs/memory-model.md. The estimate (memory.c)
 * dispatches a plan with a layout to planner/parallel3d.c and a fine-tuning method to
 * planner/finetune.c; both stand on the pieces of dt_activations.h and dt_placement.h. */
#ifndef DT_MEMORY_H
#define DT_MEMORY_H

#include "dt_activations.h"
#include "dt_placement.h"
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

/* The objective's terms (dt_objplan_terms, planner/dt_objplan.h) and, under the runtime dtrun,
 * its reference model's activation buffer and scratch in bytes: the layout a full-fine-tuning
 * policy of the reference's rows allocates (dpo: 2 x micro-batch, grpo: micro-batch), since
 * dtrun's forward-only reference allocates that layout. t is a struct dt_obj_terms. */
struct dt_obj_terms;
void dt_memory_objective_terms(const dt_plan *p, struct dt_obj_terms *t);

/* Runtime profiles deepspeed / fsdp (docs/memory-model.md "Runtime profiles"): the device
 * peak is the largest of what is live in each phase of the step, not the sum of every
 * term's own peak. dtrun keeps the sum (its engine allocates every buffer at once). */
typedef enum {
    DT_MEM_PHASE_SUM = 0,     /* dtrun: every term at once */
    DT_MEM_PHASE_BWD_START,   /* the loss backward: all activations, the loss's fp32 buffers */
    DT_MEM_PHASE_BWD_END,     /* the embedding's backward: activations freed, gradients complete */
    DT_MEM_PHASE_STEP,        /* the optimizer step and the parameter all-gather */
    DT_MEM_PHASE_COUNT
} dt_mem_phase;
typedef struct dt_mem_phases {
    dt_mem_breakdown at[DT_MEM_PHASE_COUNT];   /* at[SUM] only for dtrun; host / NVMe equal in all */
    dt_mem_phase peak;                         /* the phase dt_memory_estimate reports */
} dt_mem_phases;
/* Every phase of p (n_params as dt_memory_estimate_n). */
int dt_memory_phases(const dt_plan *p, int64_t n_params, dt_mem_phases *out, dt_error *err);
const char *dt_mem_phase_name(dt_mem_phase ph);   /* "all terms", "backward start", ... */
/* Runtimes deepspeed / fsdp: the compute workspace of the loss backward (token ids, the
 * backward's activation gradients, the loss's B x T x V buffers), bytes per rank. */
int64_t dt_memory_hf_workspace(const dt_plan *p);
/* dtrun on the CPU device (docs/memory-model.md "The CPU runtime term"): a rank's
 * resident bytes beyond what the engine allocates, bytes per rank. The plan's reserve
 * column on such plans is base + max(comm, io): the largest phase. */
typedef struct dt_mem_runtime {
    int64_t base;   /* code, libraries, OpenMP/OpenBLAS, MPI: the profile's runtime_mpi_bytes
                     * (world > 1) or runtime_bytes as dtplan calibrate measured them; profiles
                     * without them: reserve_bytes */
    int64_t comm;   /* MPI's temporaries of the gradient collectives: backward, optimizer step */
    int64_t io;     /* one checkpoint I/O chunk: save, load, export */
} dt_mem_runtime;
/* Fills out and returns 1 for a dtrun plan on the CPU device, else zeroes it and
 * returns 0 (the reserve is the profile's reserve_bytes). n_params as dt_memory_estimate_n. */
int dt_memory_cpu_runtime(const dt_plan *p, int64_t n_params, dt_mem_runtime *out);

/* 1 for a Hugging Face run (runtime deepspeed / fsdp) on CPU ranks: its total is the rank
 * process's peak, with the profile's measured torch / DeepSpeed footprint as the reserve
 * and the rank's share of the host-side offload terms included (docs/memory-model.md
 * "Hugging Face runs on CPU ranks"). */
int dt_memory_hf_on_cpu(const dt_plan *p);

/* Activations kept for backward, all blocks + head, bytes per rank: full fine-tuning's
 * (dt_activations.h) or, for another method, dt_ftplan_activations. */
int64_t dt_memory_activations(const dt_plan *p, int64_t ckpt_layers);

#endif
