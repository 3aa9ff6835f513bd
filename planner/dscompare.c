/* dscompare.c — DeepSpeed's own model-state estimators, re-implemented from
 * deepspeed/runtime/zero/stage_1_and_2.py (estimate_zero2_model_states_mem_needs,
 * current since PR #5099) and stage3.py (estimate_zero3_model_states_mem_needs),
 * at DeepSpeed 38327e07 = 0.16.5 (docs/memory-model.md "--compare deepspeed"). P = total params,
 * L = largest layer params, G = total GPUs, g = GPUs per node, N = nodes,
 * f = additional_buffer_factor (CPU numbers only). Python's int() truncates:
 * the results here truncate the same way. */
#include <stdarg.h>
#include <stdio.h>

#include "dt_dsconfig.h"

/* bytes per parameter in DeepSpeed's formulas (their comments name the terms) */
#define DS_FP16_PARAM 2   /* replicated 16-bit params */
#define DS_SHARDED 18     /* 2 fp16 grads + 4 fp32 grads + 4 fp32 params + 8 Adam m,v */
#define DS_CPU_STATES 16  /* fp32 params, grads, m, v on the host */
#define DS_FP32 4         /* one fp32 model copy per local process (init) */
#define DS_GATHER 4       /* 2 B gathered fp16 params + 2 B fp16 grads of the largest layer */
#define DS_LEGACY_PARAM 4 /* <= v0.14.2: 4P + 16P/G */
#define DS_LEGACY_SHARDED 16
#define GIB 1073741824.0  /* DeepSpeed prints bytes/2**30 and calls it "GB" */

static double dmax(double a, double b) { return a > b ? a : b; }

void dt_ds_zero2_mem(int64_t P, int64_t g, int64_t N, int cpu_offload, double f,
                     int64_t *cpu_bytes, int64_t *gpu_bytes) {
    const int64_t G = N * g;
    double cpu;
    int64_t gpu;
    if (cpu_offload) {
        gpu = DS_FP16_PARAM * P;
        cpu = (double)P * dmax(4.0 * (double)G, DS_CPU_STATES) * f;
    } else {
        gpu = DS_FP16_PARAM * P + (int64_t)(DS_SHARDED * (double)P / (double)G);
        cpu = (double)P * DS_FP32 * (double)g * f;
    }
    *cpu_bytes = (int64_t)cpu;
    *gpu_bytes = gpu;
}

int64_t dt_ds_zero2_gpu_legacy(int64_t P, int64_t G) {
    return DS_LEGACY_PARAM * P + (int64_t)(DS_LEGACY_SHARDED * (double)P / (double)G);
}

void dt_ds_zero3_mem(int64_t P, int64_t L, int64_t g, int64_t N, int cpu_offload,
                     int cpu_offload_params, int zero_init, double f, int64_t *cpu_bytes,
                     int64_t *gpu_bytes) {
    const int64_t G = N * g;
    const double gpus_factor = 1.0 / (double)N;
    const int64_t largest_layer_memory = DS_GATHER * L;
    double cpu;
    int64_t gpu;
    if (cpu_offload) {
        if (cpu_offload_params) {
            gpu = largest_layer_memory;
            cpu = zero_init ? (double)P * DS_SHARDED * gpus_factor * f
                            : (double)P * dmax(4.0 * (double)g, DS_SHARDED * gpus_factor) * f;
        } else {
            gpu = largest_layer_memory + (int64_t)(DS_FP16_PARAM * (double)P / (double)G);
            cpu = zero_init ? (double)P * DS_CPU_STATES * gpus_factor * f
                            : (double)P * dmax(4.0 * (double)g, DS_CPU_STATES * gpus_factor) * f;
        }
    } else {
        gpu = largest_layer_memory + (int64_t)(DS_SHARDED * (double)P / (double)G);
        cpu = zero_init ? (double)L * DS_FP32 * (double)g * f : (double)P * DS_FP32 * (double)g * f;
    }
    *cpu_bytes = (int64_t)cpu;
    *gpu_bytes = gpu;
}

typedef struct {
    char *buf;
    size_t n, used;
} outbuf;

static void put(outbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(outbuf *o, const char *fmt, ...) {
    if (o->used + 1 >= o->n) return; /* full (or no buffer): truncate */
    size_t room = o->n - o->used;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->buf + o->used, room, fmt, ap);
    va_end(ap);
    if (k > 0) o->used += (size_t)k < room ? (size_t)k : room - 1;
}

static void header(outbuf *o, int64_t g, int64_t N) {
    put(o, "Estimated memory needed for params, optim states and gradients for a:\n");
    put(o, "HW: Setup with %lld %s, %lld %s per node.\n", (long long)N, N > 1 ? "nodes" : "node",
        (long long)g, g > 1 ? "GPUs" : "GPU");
}

/* f'{OffloadDeviceEnum.cpu:4}' is "cpu " on Python <= 3.10 */
#define DS_CPU_LABEL "cpu "

size_t dt_ds_format_zero2_cold(int64_t P, int64_t g, int64_t N, char *buf, size_t n) {
    outbuf o = {buf, n, 0};
    if (n) buf[0] = '\0';
    header(&o, g, N);
    put(&o, "SW: Model with %lldM total params.\n", (long long)((double)P / 1e6));
    put(&o, "  per CPU  |  per GPU |   Options\n");
    for (int cpu_offload = 1; cpu_offload >= 0; cpu_offload--) {
        int64_t cpu, gpu;
        dt_ds_zero2_mem(P, g, N, cpu_offload, DT_DS_BUFFER_FACTOR, &cpu, &gpu);
        put(&o, " %7.2fGB | %6.2fGB | offload_optimizer=%s\n", (double)cpu / GIB, (double)gpu / GIB,
            cpu_offload ? DS_CPU_LABEL : "none");
    }
    return o.used;
}

size_t dt_ds_format_zero3_cold(int64_t P, int64_t L, int64_t g, int64_t N, char *buf, size_t n) {
    outbuf o = {buf, n, 0};
    if (n) buf[0] = '\0';
    header(&o, g, N);
    put(&o, "SW: Model with %lldM total params, %lldM largest layer params.\n",
        (long long)((double)P / 1e6), (long long)((double)L / 1e6));
    put(&o, "  per CPU  |  per GPU |   Options\n");
    for (int cpu_offload = 1; cpu_offload >= 0; cpu_offload--)
        for (int params = 1; params >= 0; params--) {
            if (!cpu_offload && params) continue;
            for (int zero_init = 1; zero_init >= 0; zero_init--) {
                int64_t cpu, gpu;
                dt_ds_zero3_mem(P, L, g, N, cpu_offload, params, zero_init, DT_DS_BUFFER_FACTOR,
                                &cpu, &gpu);
                put(&o, " %7.2fGB | %6.2fGB | offload_param=%s, offload_optimizer=%s, zero_init=%d\n",
                    (double)cpu / GIB, (double)gpu / GIB, params ? DS_CPU_LABEL : "none",
                    cpu_offload ? DS_CPU_LABEL : "none", zero_init);
            }
        }
    return o.used;
}
