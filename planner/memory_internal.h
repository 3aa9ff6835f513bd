/* memory_internal.h — what the memory model's files (memory.c, activations.c,
 * placement.c) share and nobody else uses: byte arithmetic that saturates at 2^60 instead
 * of overflowing, and the widths every term counts with (docs/memory-model.md). */
#ifndef DT_MEMORY_INTERNAL_H
#define DT_MEMORY_INTERNAL_H

#include <stdint.h>

#include "dt_plan.h"

/* fp32 statistics (LayerNorm mean/rstd, RMSNorm rstd, softmax log-sum-exp): docs/activations.md. */
#define STAT_BYTES 4
/* An fp32 copy: RMSNorm's hidden_states.to(torch.float32), the fp32 softmax, fp32 logits. */
#define FP32_BYTES 4

/* Anything above 2^60 bytes (an exabyte) per rank is a nonsensical request; the
 * arithmetic below saturates there instead of overflowing. */
#define MEM_SATURATE ((int64_t)1 << 60)

static inline int64_t smul(int64_t a, int64_t b) {
    if (a <= 0 || b <= 0) return 0;
    if (a > MEM_SATURATE / b) return MEM_SATURATE;
    return a * b;
}
static inline int64_t smul3(int64_t a, int64_t b, int64_t c) { return smul(smul(a, b), c); }
static inline int64_t sadd(int64_t a, int64_t b) {
    int64_t s = a + b;
    return s > MEM_SATURATE ? MEM_SATURATE : s;
}
static inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; }

static inline int64_t act_bytes(const dt_plan *p) { return dt_dtype_size(p->precision.activation); }
/* runtimes deepspeed / fsdp run Hugging Face Transformers' model code (docs/memory-model.md
 * "Runtime profiles"); dtrun its own engine. */
static inline int hf_runtime(const dt_plan *p) { return p->runtime.kind != DT_RUNTIME_DTRUN; }

/* The CPU device runs the engine's own model code (engine/model/lm.c), which
 * implements the gpt2 family: its allocations are mirrored as it makes them (the
 * engine's layout, docs/engine.md "Memory", not the family description). Other
 * devices and families get DeepSpeed's and the description's terms. */
static inline int cpu_engine_layout(const dt_plan *p) { return p->cluster.device == DT_DEVICE_CPU && !hf_runtime(p); }

#endif
