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
/* 1: the plan runs on the CPU device with an offloaded optimizer that reads the
 * gradient shard in place (no master, or fp32 gradients): no host gradient copy, no
 * copy time (docs/memory-model.md "Host memory and NVMe"). */
int dt_memory_cpu_grads_in_place(const dt_plan *p);
/* DeepSpeed's partial optimizer offload (runtime.offload_ratio < 1, stage 3, optimizer on
 * the CPU): elements of a rank's optimizer shard that stay on the GPU. stage3.py splits the
 * shard into sub-groups of sub_group_size elements and keeps sub-group i on the GPU while
 * i < int((1 - ratio) x count) (subgroup_to_device); 0 otherwise. */
int64_t dt_memory_ds_gpu_opt_elems(const dt_plan *p, int64_t shard);
/* ZeRO++ hpZ (runtime.hpz_partition > 1): elements of the secondary partition of the 16-bit
 * parameters a rank holds, its share of every partitioned tensor over its hpZ group
 * (partition_parameters.py _partition_param_sec: tensor_size // group size); 0 when off. */
int64_t dt_memory_ds_hpz_elems(const dt_plan *p, int64_t psi);

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

/* The pieces, for the solver's linearisation and the simulator (bytes per rank). */
int64_t dt_memory_activations_per_block(const dt_plan *p, int checkpointed); /* saved by one block */
int64_t dt_memory_activations(const dt_plan *p, int64_t ckpt_layers);        /* all blocks + head */

#endif
