/* dt_ttexport.h — a plan as torchtitan runs it: the job TOML (torchtitan.train --job.config_file)
 * and the torchrun / sbatch lines of its run_train.sh and multinode_trainer.slurm
 * (docs/parallelism.md "Export to torchtitan"). Keys: pytorch/torchtitan
 * torchtitan/config/job_config.py at commit 238fa9953e4aec2a62582121564273d7cbb1e9f1 (the
 * last release of the TOML job config; later commits replace it with Python registries).
 * Strings are malloc'd. */
#ifndef DT_TTEXPORT_H
#define DT_TTEXPORT_H

#include "dt_dsexport.h"
#include "dt_plan.h"

/* The job TOML for plan p. Fails (DT_EINVAL, one line naming the plan key) where torchtitan
 * cannot run the plan as planned: CPU ranks; ZeRO-1 (FSDP2 shards parameters, gradients and
 * optimizer states together); offload other than all of it to the CPU; NVMe; fp16; LoRA /
 * QLoRA / freeze; objectives other than pt; a vision tower; a model shape none of torchtitan's
 * llama3 / qwen3 flavors has; TP without SP; a checkpointed-layer count that is not every n-th
 * layer; DeepSpeed's log warmup. */
char *dt_ttexport_toml(const dt_plan *p, dt_error *err);
/* The torchrun line of every node (run_train.sh's, with --nnodes / --rdzv for several) that
 * trains with the TOML at toml_path. Same refusals. */
char *dt_ttexport_launch(const dt_plan *p, const dt_dsexport_opts *o, const char *toml_path, dt_error *err);
/* The same as an sbatch script: one torchrun per node (multinode_trainer.slurm). */
char *dt_ttexport_sbatch(const dt_plan *p, const dt_dsexport_opts *o, const char *toml_path, dt_error *err);

#endif
