/* bench_gpu.c — training throughput and memory of the CUDA engine on one GPU:
 * tokens/s and MFU for GPT-2 124M, GPT-2 350M (gpt2-medium) and Qwen3-0.6B (the
 * Llama family: RMSNorm, RoPE, SwiGLU, grouped-query attention), with the plan's
 * predicted step time (dt_time_estimate on the chosen hardware profile) beside
 * the measured one, and the driver's peak device memory of the process beside
 * the plan's predicted device total (dt_memory_estimate, reserve included).
 *
 * One timed step = forward + backward + the device AdamW update, on one
 * micro-batch (grad_accum 1, world 1, ZeRO 0). MFU uses the model's training
 * FLOPs (dt_model_train_flops_per_seq: 6 N per token plus attention) over the
 * profile's dense peak for the plan's compute dtype. In the mixed presets the
 * GEMMs take the 16-bit operands as they are (cublasGemmEx, fp32 accumulation);
 * fp32 runs fp32 GEMMs (TF32 if DT_CUDA_TF32=1); docs/cuda.md.
 *
 * usage: bench_gpu [--hw PROFILE] [--steps N] [--batch B] [--seq T] [--model NAME]
 *                  [--precision mixed-bf16|mixed-fp16|fp32]
 * Exits 77 without a GPU (nothing measured), 2 on bad arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dt_device.h"
#include "dt_lm.h"
#include "dt_memory.h"
#include "dt_timemodel.h"
#include "dt_clock.h"

static int run_one(const dt_model *m, const char *hw, dt_precision_preset prec, int64_t B, int64_t T, int steps) {
    dt_error err = {0};
    dt_plan p;
    dt_plan_defaults(&p);
    p.model = *m;
    if (dt_hardware_load(hw, NULL, &p.cluster.hw, &err)) {
        fprintf(stderr, "bench_gpu: %s\n", err.msg);
        return 2;
    }
    p.cluster.nodes = p.cluster.gpus_per_node = p.parallel.world_size = 1;
    p.cluster.device = DT_DEVICE_CUDA;
    p.batch.micro_batch = p.batch.global_batch = B;
    p.batch.grad_accum = 1;
    p.batch.seq_len = T;
    dt_precision_from_preset(prec, &p.precision);
    p.activations.attention = DT_ATTN_FLASH;
    dt_time_breakdown tb;
    dt_mem_breakdown mb;
    double pred = 0, pred_mem = 0;
    if (dt_time_estimate(&p, &tb, &err) == 0) pred = tb.step_s;
    if (dt_memory_estimate(&p, &mb, &err) == 0) pred_mem = (double)mb.total;

    dt_lm *g = NULL;
    if (dt_lm_create_on(m, &p.precision, B, T, 0, DT_ATTN_FLASH, DT_DEVICE_CUDA, 0, &g, &err)) {
        fprintf(stderr, "bench_gpu: %s: %s\n", m->name, err.msg);
        return 1;
    }
    const dt_device_ops *d = dt_lm_device_ops(g);
    size_t P = dt_lm_num_params(g);
    float *master = p.precision.has_master ? d->alloc(DT_POOL_DEVICE, DT_MEM_OPTIMIZER, P * 4) : NULL;
    void *mo = d->alloc(DT_POOL_DEVICE, DT_MEM_OPTIMIZER, P * 4);
    void *vo = d->alloc(DT_POOL_DEVICE, DT_MEM_OPTIMIZER, P * 4);
    if ((p.precision.has_master && !master) || !mo || !vo) {
        fprintf(stderr, "bench_gpu: %s: out of GPU memory for the optimizer state\n", m->name);
        return 1;
    }
    if (dt_lm_init_random(g, 1, &err)) {
        fprintf(stderr, "bench_gpu: %s: %s\n", m->name, err.msg);
        return 1;
    }
    if (master) d->convert(master, DT_DTYPE_FP32, dt_lm_params(g), p.precision.param, P);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B * T));
    for (int64_t i = 0; i < B * T; i++) tok[i] = (int32_t)((i * 2654435761u) % (uint64_t)m->vocab);
    float loss = 0;
    double t0 = 0;
    for (int s = 0; s <= steps; s++) {   /* step 0 warms up (cuBLAS heuristics, allocations) */
        if (s == 1) {   /* the warm-up step's errors are reported, not cleared */
            if (d->synchronize(&err)) break;
            t0 = dt_clock_s();
        }
        dt_lm_zero_grad(g);
        if (dt_lm_forward(g, tok, tok, &loss, &err) || dt_lm_backward(g, 1.0f, &err)) break;
        dt_adamw_scalars sc = dt_adamw_make_scalars(6e-4, 0.9, 0.95, 1e-8, 0.1, 1.0, 1, s + 1);
        d->adamw(dt_lm_params(g), p.precision.param, master, mo, vo, DT_DTYPE_FP32,
                 dt_lm_grads(g), p.precision.grad, P, &sc);
    }
    int rc = d->synchronize(&err);
    double step = (dt_clock_s() - t0) / steps;
    if (err.code || rc) {
        fprintf(stderr, "bench_gpu: %s: %s\n", m->name, err.msg);
        return 1;
    }
    double flops = dt_model_train_flops_per_seq(m, T) * (double)B;
    double peak = p.cluster.hw.peak_flops[p.precision.param];
    dt_device_meminfo mi = {0};
    double used = d->meminfo && d->meminfo(&mi, 0) == DT_OK && mi.applicable ? (double)(mi.peak_used - mi.used_at_bind) : 0;
    printf("%-12s %-10s %6.1fM  B=%-3lld T=%-5lld step %8.1f ms  predicted %8.1f ms  %9.0f tok/s  "
           "MFU %5.1f%% (%s peak)  memory %6.2f GiB (driver: peak used - used at bind)  predicted %6.2f GiB  loss %.3f\n",
           m->name, dt_precision_preset_name(prec), (double)P / 1e6, (long long)B, (long long)T, step * 1e3,
           pred * 1e3, (double)(B * T) / step, 100.0 * flops / step / peak, dt_dtype_name(p.precision.param),
           used / 1073741824.0, pred_mem / 1073741824.0, loss);
    if (master) d->free(master);
    d->free(mo);
    d->free(vo);
    free(tok);
    dt_lm_free(g);
    return 0;
}

int main(int argc, char **argv) {
    const char *hw = "H100-SXM-80GB", *only = NULL;
    dt_precision_preset prec = DT_PREC_MIXED_BF16;
    int steps = 10;
    int64_t B = 8, T = 1024;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--hw")) hw = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--batch")) B = atoll(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--seq")) T = atoll(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--model")) only = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--precision")) {
            dt_error perr = {0};
            if (dt_precision_parse_preset(argv[++i], &prec, &perr)) {
                fprintf(stderr, "bench_gpu: %s\n", perr.msg);
                return 2;
            }
        } else {
            fprintf(stderr, "bench_gpu: unknown argument '%s' (--hw --steps --batch --seq --model --precision)\n",
                    argv[i]);
            return 2;
        }
    }
    if (steps < 1 || B < 1 || T < 1) {
        fprintf(stderr, "bench_gpu: --steps, --batch and --seq must be >= 1\n");
        return 2;
    }
    const char *names[] = {"gpt2", "gpt2-medium", "qwen3-0.6b"};
    if (only && strcmp(only, names[0]) && strcmp(only, names[1]) && strcmp(only, names[2])) {
        fprintf(stderr, "bench_gpu: --model %s: choose gpt2, gpt2-medium or qwen3-0.6b\n", only);
        return 2;
    }
    if (dt_device_cuda_count() == 0) {
        printf("bench_gpu: no CUDA GPU visible: nothing measured\n");
        return 77;
    }
    int rc = 0;
    for (int k = 0; k < 3; k++) {
        if (only && strcmp(only, names[k])) continue;
        dt_model m;
        dt_error err = {0};
        if (dt_model_resolve(names[k], &m, &err)) {
            fprintf(stderr, "bench_gpu: %s\n", err.msg);
            return 2;
        }
        if (T > m.max_pos) {
            fprintf(stderr, "bench_gpu: --seq %lld exceeds %s's %lld positions\n", (long long)T,
                    m.name, (long long)m.max_pos);
            return 2;
        }
        rc |= run_one(&m, hw, prec, B, T, steps);
    }
    return rc;
}
