/* dt_dsexport.h — a plan as DeepSpeed would run it: the equivalent DeepSpeed config
 * JSON and the torchrun / dtrun / SLURM launch lines, in the style of the users'
 * torchrun + DeepSpeed runbooks (docs/plan-format.md "DeepSpeed export").
 *
 * Mapping (docs/plan-format.md, "DeepSpeed export"): zero_optimization from
 * parallel (bucket sizes in elements, as DeepSpeed counts them), bf16/fp16 from
 * precision (fp16 with the loss-scale fields), the batch triple from batch,
 * gradient_clipping, optimizer AdamW from optimizer, scheduler from schedule
 * (DeepSpeed's own parameter names; "constant" writes no scheduler). Importing the
 * result with `dtplan estimate --deepspeed` gives back the same stage, offload,
 * buckets, batch and precision. All strings returned are malloc'd (free()). */
#ifndef DT_DSEXPORT_H
#define DT_DSEXPORT_H

#include <stdio.h>

#include "dt_error.h"
#include "dt_consts.h"
#include "dt_plan.h"

#define DT_DEFAULT_MASTER_PORT DT_TORCHRUN_DEFAULT_PORT

typedef struct dt_dsexport_opts {
    const char *config_path;  /* DeepSpeed config file named in the launch lines */
    const char *plan_path;    /* plan file named in the dtrun line */
    const char *script;       /* training script for torchrun (default "train.py") */
    const char *master_addr;  /* default "$MASTER_ADDR" (left to the shell) */
    int master_port;          /* default 29500 */
    const char *job_name;     /* sbatch --job-name (default "dtplan") */
} dt_dsexport_opts;

void dt_dsexport_opts_default(dt_dsexport_opts *o);

/* Closes f, an open_memstream stream over *buf, and returns *buf (the caller frees it); NULL
 * with "export WHAT: out of memory" (DT_ENOMEM) when the stream fails. Shared by the exports. */
char *dt_export_text_close(FILE *f, char **buf, const char *what, dt_error *err);

/* The DeepSpeed config for a valid plan, pretty-printed JSON with a trailing newline. */
char *dt_dsexport_config(const dt_plan *p, dt_error *err);

/* What the config cannot say by itself (activation checkpointing is the model
 * code's choice, pure-bf16 has no DeepSpeed switch, ...), one "note: ..." per
 * line; "" when there is nothing to say. */
char *dt_dsexport_notes(const dt_plan *p, dt_error *err);

/* torchrun line (DeepSpeed) and dtrun line (the plan itself), as the users' runbooks write it:
 * torchrun --nnodes N --nproc_per_node M --node_rank $NODE_RANK --master_addr A
 *          --master_port P train.py --deepspeed ds_config.json */
char *dt_dsexport_launch(const dt_plan *p, const dt_dsexport_opts *o, dt_error *err);

/* An sbatch script: one task per node, torchrun per node (stas00/ml-engineering,
 * orchestration/slurm/launchers/torchrun-launcher.slurm). */
char *dt_dsexport_sbatch(const dt_plan *p, const dt_dsexport_opts *o, dt_error *err);

#endif
