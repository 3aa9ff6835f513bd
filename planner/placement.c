/* placement.c — where parts of a rank's ZeRO shard live (dt_placement.h): DeepSpeed's
 * partial optimizer offload and hpZ secondary partition, the CPU engine's in-place
 * gradients. The memory model counts their bytes; the time model their transfers.
 * Sources: docs/memory-model.md "Host memory and NVMe", "ZeRO++ and partial offload". */
#include "dt_placement.h"

#include "dt_model.h"
#include "memory_internal.h"

/* On the CPU device an offloaded optimizer whose gradients need no upcast (no master, or
 * fp32 gradients) reads the gradient shard where it lies: the engine keeps no host copy
 * (engine/dist/zero.c grads_in_place). */
int dt_memory_cpu_grads_in_place(const dt_plan *p) {
    const dt_precision *pr = &p->precision;
    return cpu_engine_layout(p) && (!pr->has_master || pr->grad == DT_DTYPE_FP32);
}

int64_t dt_memory_ds_gpu_opt_elems(const dt_plan *p, int64_t shard) {
    const dt_runtime *r = &p->runtime;
    if (r->kind != DT_RUNTIME_DEEPSPEED || p->parallel.zero_stage != 3 ||
        p->parallel.offload_optimizer != DT_OFFLOAD_CPU || r->offload_ratio >= 1.0 || shard <= 0)
        return 0;
    const int64_t sub = p->parallel.sub_group_elems > 0 ? p->parallel.sub_group_elems : shard;
    const int64_t count = ceil_div(shard, sub);
    const int64_t on_gpu = (int64_t)((1.0 - r->offload_ratio) * (double)count);   /* Python's int(): truncation */
    return imin(smul(on_gpu, sub), shard);
}

int64_t dt_memory_ds_hpz_elems(const dt_plan *p, int64_t psi) {
    const dt_runtime *r = &p->runtime;
    if (r->kind != DT_RUNTIME_DEEPSPEED || p->parallel.zero_stage != 3 || r->hpz_partition <= 1) return 0;
    const int64_t persist = imin(dt_model_small_tensor_params(&p->model, r->persistence_threshold), psi);
    return ceil_div(psi - persist, r->hpz_partition);
}
