/* dt_train.h — the training loop that executes a plan unchanged (docs/dtrun.md
 * "What a step does"), and the run report that sets what it measured next to
 * the plan's prediction. docs/dtrun.md describes the outputs.
 *
 * One optimizer step = grad_accum micro-steps of forward + backward (gradients
 * accumulated, each scaled by loss_scale / grad_accum), then the global gradient
 * norm, the fp16 overflow check (skip + loss-scaler update), DeepSpeed's
 * unscale-and-clip, the LR schedule and AdamW. Weight decay applies to the 2-D
 * weights (embeddings and linear weights), not to biases and LayerNorm params
 * (Hugging Face Trainer's grouping). */
#ifndef DT_TRAIN_H
#define DT_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "dt_comm.h"
#include "dt_error.h"
#include "dt_memprobe.h"
#include "dt_plan.h"

typedef struct dt_train_opts {
    const char *plan_path;   /* copied into checkpoints; named in the report (may be NULL) */
    const char *out_dir;     /* NULL: plan.output.dir */
    const char *data_path;   /* NULL: plan.data.train */
    const char *init_adapter;   /* NULL, or a PEFT LoRA adapter directory a fresh LoRA run's
                                 * adapters start from (dt_run_adapter_open; a resume keeps
                                 * its checkpoint's) */
    int64_t max_steps;       /* stop after this many optimizer steps in total; <= 0: the plan's
                              * schedule.total_steps. Never changes the schedule. */
    int resume;              /* continue from the newest complete checkpoint in out_dir */
    int overwrite;           /* a new run in a non-empty out_dir: remove dtrun's own files there
                              * first, keep every other file (dt_rundir.h); else out_dir must
                              * be absent or empty */
    int progress;            /* -1: a progress bar when log is a TTY; 0 never; 1 always */
    FILE *log;               /* human-readable lines (rank 0 only); NULL: quiet */
    dt_comm *comm;           /* the ranks (dt_comm_size == plan.parallel.world_size); NULL: "self" */
    const char *reward_cmd;  /* grpo: the reward command (dt_reward.h); NULL: the exact answer */
    double reward_timeout_s; /* grpo: its limit per call, seconds */
    const char *trace_path;  /* non-NULL: write the run's timeline there (Chrome trace JSON, the
                              * simulator's event names; engine/dist/dt_tracer.h); collective */
} dt_train_opts;

typedef struct dt_train_result {
    int64_t first_step;      /* the step the run started from (0, or the resumed step) */
    int64_t steps;           /* step reached */
    int64_t skipped;         /* fp16 overflow skips in this run */
    double first_loss, last_loss;
    double last_valid_loss;  /* NAN when never evaluated */
    double step_time_s;      /* mean wall time of a step (the first excluded when > 1 ran) */
    double tokens_per_s;
    int finished;            /* --resume found the run already at its last step: nothing ran,
                              * nothing was written (steps: that step) */
    int refused;             /* the output directory was refused alike on every rank (rank 0
                              * reports the error; no rank wrote anything, none needs aborting) */
} dt_train_result;

/* Trains with the plan's ZeRO stage and offload across the ranks of opts->comm
 * (engine/dist/dt_zero.h) on the plan's device (cluster.device: cpu, or cuda bound to
 * the rank's LOCAL_RANK GPU); collective: every rank calls it. out_dir follows
 * dt_rundir.h (a new run: absent or empty; resume; overwrite). Rank 0 writes
 * out_dir/metrics.jsonl (on resume: cut back to the checkpoint's step, then
 * appended to; every write checked) and run-report.json; rank r > 0
 * writes run-report-rank<r, 5 digits>.json (its own memory); checkpoints are
 * sharded (dt_ckpt_save_zero). A plan whose world size differs from the
 * launched world fails with DT_EINVAL; a cuda plan where the build has no CUDA
 * or no GPU is visible with DT_ERUNTIME (dt_device_get's one-line reason). */
int dt_train(const dt_plan *plan, const dt_train_opts *opts, dt_train_result *res, dt_error *err);

/* ---- run report (runreport.c) ---- */

typedef struct dt_run_measure {
    int64_t peak[5];         /* tracked peak bytes per dt_mem_category, device pool */
    int64_t peak_total;      /* peak of the device pool's sum */
    int64_t host_peak_total; /* peak of the host pool's sum */
    int64_t host_peak[5];    /* tracked peak bytes per dt_mem_category, host pool */
    int64_t peak_rss_bytes;
    double step_time_s;
    double tokens_per_s;
    int64_t steps;
    double first_loss, last_loss, last_valid_loss;
    int rank, world;
    int have_comm;                       /* a training step ran: comm_bytes are measured */
    int comm_constant;                   /* every step moved the same bytes per collective */
    int64_t comm_bytes[DT_COLL_COUNT];   /* bytes per collective in one step (dt_collective) */
    double comm_time_s;                  /* mean time per step blocked in collectives (NAN: unknown) */
    dt_memprobe_report probe;            /* real memory per phase: kernel / driver (dt_memprobe.h) */
} dt_run_measure;

/* Fills m's memory fields from the memory tracker and getrusage. */
void dt_run_measure_memory(dt_run_measure *m);

/* Writes run-report.json: "predicted" (the plan's prediction when valid, else
 * dt_memory_estimate's), "measured" and "diff_pct" per category, step time,
 * tokens/s. Prints the comparison table to log when non-NULL. */
int dt_run_report_write(const char *path, const dt_plan *plan, const char *plan_path,
                        const dt_run_measure *m, FILE *log, dt_error *err);

#endif
