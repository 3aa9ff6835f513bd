/* dt_zero.h — the ZeRO data-parallel engine (stages 0-3, optimizer / parameter
 * offload) around one dt_lm replica per rank. It executes docs/time-model.md
 * exactly: units = embeddings, each block, the final norm; stages 1-3 pad each
 * unit to a multiple of the world size W and give rank r elements
 * [r*P/W, (r+1)*P/W) of it; the collectives per step are the table there, so
 * dt_comm's byte counters equal dt_time_comm_bytes(plan). docs/zero.md explains the
 * buffers, the hooks and the offload paths.
 *
 * Per optimizer step the trainer calls
 *   dt_zero_begin_step; for each micro-step { dt_zero_set_micro(last?);
 *   dt_lm_forward; dt_lm_backward }; dt_zero_end_backward;
 *   dt_zero_reduce_scalars; dt_zero_sumsq (inside); dt_zero_optimizer_step.
 * With W = 1 no collective runs (copies replace them), whatever the stage.
 * Counts are elements unless a name says bytes. */
#ifndef DT_ZERO_H
#define DT_ZERO_H

#include <stddef.h>
#include <stdint.h>

#include "dt_comm.h"
#include "dt_error.h"
#include "dt_lm.h"
#include "dt_optim.h"
#include "dt_plan.h"

typedef struct dt_zero dt_zero;

/* The most bytes of transient host staging one weights or checkpoint transfer
 * holds at a time: loading weights or a checkpoint (parameters, master, the
 * optimizer state), the ZeRO-3 consolidation and the checkpoint's optimizer
 * shards stream through buffers of at most this size, and a memory-mapped file
 * is read this many bytes at a time before its pages are released, so none of
 * them materialises a whole model or optimizer state (docs/dtrun.md "Bounded
 * checkpoint I/O"). 64 MiB: at the 1-2 GB/s of a disk or a PCIe copy a chunk
 * takes 30-60 ms, so the per-chunk calls cost nothing measurable, while it is
 * small beside the state of any model where the bound matters (GPT-2 124M's
 * fp32 weights alone are 475 MiB). */
#define DT_IO_CHUNK_BYTES ((size_t)64 << 20)
/* DT_IO_CHUNK_BYTES, or DT_TEST_IO_CHUNK_BYTES from the environment (a test-only
 * override, read once, >= 64: tests make the tiny models' transfers take many
 * chunks; docs/dtrun.md "Failure tests"). */
size_t dt_io_chunk_bytes(void);

/* What a run of plan p (CPU device) makes rank `rank` hold beyond the engine's tracked
 * allocations, bytes: *comm, the MPI library's temporaries and the reduce-scatter
 * staging of the gradient collectives (backward, optimizer step; dt_comm.h
 * DT_COMM_PIECE_BYTES); *io, the largest checkpoint / weights transfer buffer
 * (DT_IO_CHUNK_BYTES). The planner counts the same for the rank holding the most,
 * rank 0 (planner/memory.c dt_memory_cpu_runtime; docs/memory-model.md "The CPU
 * runtime term"); tests/engine/test_runtime_term.c checks that they agree. */
void dt_zero_untracked_bytes(const dt_plan *p, int rank, int64_t *comm, int64_t *io);
/* Of *comm above, what is still alive in the optimizer step, bytes: the collectives the
 * step's tail waits for. Stage 0 and without overlap_comm: all of it. With overlap_comm at
 * stages 1-3: the embedding unit's reduce-scatter (issued last) and those of blocks 0 and 1
 * (1 at stage 1), as far as they hold anything trained: a block's hook waits for the
 * reduce-scatter two blocks above it (the block buffers alternate), so under a freeze of
 * the last blocks every block collective has ended inside backward. */
int64_t dt_zero_untracked_tail(const dt_plan *p, int rank);

/* One optimizer-state slice owned by this rank: state elements
 * [state_begin, state_begin + count) hold flat parameters
 * [flat_begin, flat_begin + count). */
typedef struct dt_zero_range {
    size_t flat_begin, state_begin, count;
} dt_zero_range;

/* Installs hooks on g and allocates shards, buffers and the optimizer state per
 * the plan's stage and offload (nvme files under parallel.nvme_path). */
int dt_zero_create(const dt_plan *p, dt_comm *c, dt_lm *g, dt_zero **out, dt_error *err);
void dt_zero_free(dt_zero *z);

/* Takes this rank's shard of the parameters now in g's flat buffer (after init
 * or a weights load) and sets the master copy from them; m, v = 0. Then stages
 * 2/3 bind every group to the engine's buffers and release the model's flat
 * buffers the stage does not keep (stage 2: gradients; stage 3: parameters and
 * gradients; dt_lm_release_flat), so call it once, with the full weights in
 * g: afterwards stage 3 fails with DT_EINVAL (no flat parameters left). */
int dt_zero_init_from_model(dt_zero *z, dt_error *err);
/* The same for a fresh model initialised from seed (dt_lm_init_random's values),
 * through dt_zero_load_params with dt_lm_init_slice as the reader: stages 0-2
 * draw the full parameters into g's flat buffer; stage 3 draws only this rank's
 * slice of each unit, so no rank ever holds the whole model (as DeepSpeed's
 * zero.Init) and g may have been created without flat buffers (DT_LM_NO_FLAT).
 * The shards are bitwise those of the full init. */
int dt_zero_init_random(dt_zero *z, uint64_t seed, dt_error *err);

/* Reads flat parameter elements [lo, lo + n) in the parameter dtype into HOST
 * memory dst[0 .. n): a weights file, a checkpoint, the seeded init. */
typedef int (*dt_zero_read_fn)(void *ctx, size_t lo, size_t n, void *dst, dt_error *err);
/* Sets the parameters from fn, the master from them, m = v = 0. Stages 0-2
 * read the full parameters into g's flat buffer (straight into it where the
 * host addresses it, else through a dt_io_chunk_bytes() host buffer), then as
 * dt_zero_init_from_model. Stage 3 reads only this rank's slice of each unit,
 * straight into the parameter shard where it is host memory, else through
 * host buffers of at most dt_io_chunk_bytes() together, and writes it and its
 * fp32 master through the stores (device, host or nvme), so no rank ever holds
 * the whole model and g may have been created with DT_LM_NO_FLAT. Then stages
 * 2/3 release the flat buffers as dt_zero_init_from_model does. */
int dt_zero_load_params(dt_zero *z, dt_zero_read_fn fn, void *ctx, dt_error *err);

void dt_zero_begin_step(dt_zero *z);
/* last: this micro-step ends the accumulation (stages 0/1 reduce only then).
 * err: where a collective failing inside a model hook is reported (the err
 * given to the next dt_lm_forward / _backward). Call before eval passes too. */
void dt_zero_set_micro(dt_zero *z, int last, dt_error *err);
/* Waits for every collective still in flight after the last backward. */
int dt_zero_end_backward(dt_zero *z, dt_error *err);
/* The step's one scalar all-reduce: *loss (this rank's mean) becomes the mean
 * over ranks; *sumsq the global sum of squared (scaled) gradients; *nonfinite
 * whether any gradient anywhere is inf/nan. */
int dt_zero_reduce_scalars(dt_zero *z, double *loss, double *sumsq, int *nonfinite, dt_error *err);
/* Tensor parallelism: the model is one shard of a TP group tp (dt_lm_options.tp) and z's
 * communicator that shard's DP group; dt_zero_reduce_scalars then sums the squared
 * gradient norm over tp too, each replicated tensor counted once. */
void dt_zero_set_tp(dt_zero *z, dt_comm *tp);
dt_comm *dt_zero_tp(const dt_zero *z);   /* NULL without tensor parallelism */
/* AdamW on this rank's shard, then (stages 1/2) the parameter all-gather. */
int dt_zero_optimizer_step(dt_zero *z, const dt_adamw *hp, double grad_mul, int64_t t, dt_error *err);
/* A piece of one unit of the full parameters, handed to the rank that writes
 * the weights: flat elements [flat_off, flat_off + n) of unit `unit` in the
 * parameter dtype, in HOST memory. Each unit comes in order, in pieces of at
 * most dt_io_chunk_bytes() (on a device the host cannot address each piece is
 * copied into a host buffer of that size first), so a tensor may span pieces. */
typedef int (*dt_zero_unit_fn)(void *ctx, int unit, size_t flat_off, size_t n, const void *params,
                               dt_error *err);
/* Hands every unit's full parameters to fn in unit order, piece by piece (fn
 * NULL: nothing is handed). Stage 3 all-gathers each unit into its gathered-unit buffer first
 * (collective: every rank calls it, fn or not), so no rank ever holds more than
 * one gathered unit and the device buffers stay what planner/memory.c counts;
 * stages 0-2 pass the model's flat parameters, no communication. After fn
 * fails it is not called again but the gathers go on (the other ranks wait in
 * them); the first failure is returned. */
int dt_zero_consolidate_params(dt_zero *z, dt_zero_unit_fn fn, void *ctx, dt_error *err);

/* Wall seconds spent blocked in communication calls and waits since creation
 * (the exposed communication time; its share of a step is what bench reports). */
double dt_zero_comm_seconds(const dt_zero *z);

/* ---- optimizer state, for sharded checkpoints (ckpt.c) ---- */
int dt_zero_num_ranges(const dt_zero *z);
dt_zero_range dt_zero_range_at(const dt_zero *z, int i);
int dt_zero_stage(const dt_zero *z);
size_t dt_zero_state_numel(const dt_zero *z);     /* state elements held (padding included) */
int dt_zero_has_master(const dt_zero *z);
dt_dtype dt_zero_moment_dtype(const dt_zero *z);
/* which: 0 master (fp32), 1 exp_avg, 2 exp_avg_sq. Copies state elements
 * [lo, lo + count) to / from host memory dst / src (through the nvme file when
 * offloaded; D2H / H2D when the state is on a device the host cannot address). */
int dt_zero_state_read(dt_zero *z, int which, size_t lo, size_t count, void *dst, dt_error *err);
int dt_zero_state_write(dt_zero *z, int which, size_t lo, size_t count, const void *src, dt_error *err);

#endif
