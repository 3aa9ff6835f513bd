/* dt_placement.h — where parts of a rank's ZeRO shard live: on the GPU under DeepSpeed's
 * partial optimizer offload, in hpZ's secondary partition, or read in place by the CPU
 * engine's offloaded optimizer. Elements unless a name says otherwise; the memory model
 * (dt_memory.h) counts their bytes, the time model (dt_timeterms.h) their transfers. */
#ifndef DT_PLACEMENT_H
#define DT_PLACEMENT_H

#include <stdint.h>

#include "dt_plan.h"

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

#endif
