/* dt_mgexport.h — a plan as Megatron-LM runs it: pretrain_gpt.py's arguments for the plan's
 * model, layout, batch, precision, recompute, optimizer and schedule, behind the torchrun line
 * of every node, and an sbatch script (docs/parallelism.md "Export to Megatron-LM").
 * Argument names: NVIDIA/Megatron-LM megatron/training/arguments.py. Strings are malloc'd. */
#ifndef DT_MGEXPORT_H
#define DT_MGEXPORT_H

#include "dt_dsexport.h"
#include "dt_plan.h"

/* The torchrun line (o->script defaults to pretrain_gpt.py when it is "train.py") with one
 * argument per line, and "# note: ..." lines for what the plan cannot say (the data and the
 * tokenizer paths are left to $DATA_PATH and $TOKENIZER). Fails (DT_EINVAL, one line) on
 * plans Megatron-LM cannot run as planned: ZeRO stage 2 or 3 (its distributed optimizer
 * shards only the optimizer states, ZeRO-1), CPU ranks, offload. */
char *dt_mgexport_launch(const dt_plan *p, const dt_dsexport_opts *o, dt_error *err);
/* The same as an sbatch script: one torchrun per node. */
char *dt_mgexport_sbatch(const dt_plan *p, const dt_dsexport_opts *o, dt_error *err);

#endif
