/* bench_gpu.c — training throughput of the CUDA engine on one GPU: tokens/s
 * and MFU for GPT-2 124M, GPT-2 350M (gpt2-medium) and a Qwen3-0.6B-shaped
 * GPT-2-family model (Qwen3-0.6B's hidden, layers, heads, ffn and vocabulary in
 * GPT-2's block), with the plan's predicted step time (dt_time_estimate on
 * the chosen hardware profile) beside the measured one.
 *
 * One timed step = forward + backward + the device AdamW update, on one
 * micro-batch (grad_accum 1, world 1, ZeRO 0). MFU uses the model's training
 * FLOPs (dt_model_train_flops_per_seq: 6 N per token plus attention) over the
 * profile's dense peak for the plan's compute dtype (bf16 for mixed-bf16).
 * The engine's GEMMs run in fp32 with fp32 accumulation (TF32 if
 * DT_CUDA_TF32=1); see docs/cuda.md for what that means for MFU.
 *
 * usage: bench_gpu [--hw PROFILE] [--steps N] [--batch B] [--seq T] [--model NAME]
 * Exits 77 without a GPU (nothing measured), 2 on bad arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dt_device.h"
#include "dt_lm.h"
#include "dt_memory.h"
#include "dt_timemodel.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* GPT-2 block with Qwen3-0.6B's sizes (models/catalog/qwen3-0.6b.json) */
static int qwen_shaped(int64_t T, dt_model *m, dt_error *err) {
    dt_model q;
    int rc = dt_model_resolve("qwen3-0.6b", &q, err);
    if (rc) return rc;
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "gpt2-qwen3-0.6b-shape");
    m->family = DT_FAMILY_GPT2;
    m->n_layer = q.n_layer;
    m->hidden = q.hidden;
    m->n_head = m->n_kv_head = q.n_head;
    m->head_dim = q.hidden / q.n_head;
    m->ffn = q.ffn;
    m->vocab = q.vocab;
    m->max_pos = T;
    m->tied_embeddings = 1;
    m->qkv_bias = 1;
    m->norm_eps = 1e-5;
    return DT_OK;
}

static int run_one(const dt_model *m, const char *hw, int64_t B, int64_t T, int steps) {
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
    dt_precision_from_preset(DT_PREC_MIXED_BF16, &p.precision);
    p.activations.attention = DT_ATTN_FLASH;
    dt_time_breakdown tb;
    double pred = 0;
    if (dt_time_estimate(&p, &tb, &err) == 0) pred = tb.step_s;

    dt_lm *g = NULL;
    if (dt_lm_create_on(m, &p.precision, B, T, 0, DT_ATTN_FLASH, DT_DEVICE_CUDA, 0, &g, &err)) {
        fprintf(stderr, "bench_gpu: %s: %s\n", m->name, err.msg);
        return 1;
    }
    const dt_device_ops *d = dt_lm_device_ops(g);
    size_t P = dt_lm_num_params(g);
    float *master = d->alloc(DT_POOL_DEVICE, DT_MEM_OPTIMIZER, P * 4);
    void *mo = d->alloc(DT_POOL_DEVICE, DT_MEM_OPTIMIZER, P * 4);
    void *vo = d->alloc(DT_POOL_DEVICE, DT_MEM_OPTIMIZER, P * 4);
    if (!master || !mo || !vo) {
        fprintf(stderr, "bench_gpu: %s: out of GPU memory for the optimizer state\n", m->name);
        return 1;
    }
    dt_lm_init_random(g, 1);
    d->convert(master, DT_DTYPE_FP32, dt_lm_params(g), p.precision.param, P);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B * T));
    for (int64_t i = 0; i < B * T; i++) tok[i] = (int32_t)((i * 2654435761u) % (uint64_t)m->vocab);
    float loss = 0;
    double t0 = 0;
    for (int s = 0; s <= steps; s++) {   /* step 0 warms up (cuBLAS heuristics, allocations) */
        if (s == 1) {   /* the warm-up step's errors are reported, not cleared */
            if (d->synchronize(&err)) break;
            t0 = now_s();
        }
        dt_lm_zero_grad(g);
        if (dt_lm_forward(g, tok, tok, &loss, &err) || dt_lm_backward(g, 1.0f, &err)) break;
        dt_adamw_scalars sc = dt_adamw_make_scalars(6e-4, 0.9, 0.95, 1e-8, 0.1, 1.0, 1, s + 1);
        d->adamw(dt_lm_params(g), p.precision.param, master, mo, vo, DT_DTYPE_FP32,
                 dt_lm_grads(g), p.precision.grad, P, &sc);
    }
    int rc = d->synchronize(&err);
    double step = (now_s() - t0) / steps;
    if (err.code || rc) {
        fprintf(stderr, "bench_gpu: %s: %s\n", m->name, err.msg);
        return 1;
    }
    double flops = dt_model_train_flops_per_seq(m, T) * (double)B;
    double peak = p.cluster.hw.peak_flops[DT_DTYPE_BF16];
    printf("%-24s %6.1fM  B=%-3lld T=%-5lld step %8.1f ms  predicted %8.1f ms  %9.0f tok/s  "
           "MFU %5.1f%% (bf16 peak)  loss %.3f\n",
           m->name, (double)P / 1e6, (long long)B, (long long)T, step * 1e3, pred * 1e3,
           (double)(B * T) / step, 100.0 * flops / step / peak, loss);
    d->free(master);
    d->free(mo);
    d->free(vo);
    free(tok);
    dt_lm_free(g);
    return 0;
}

int main(int argc, char **argv) {
    const char *hw = "H100-SXM-80GB", *only = NULL;
    int steps = 10;
    int64_t B = 8, T = 1024;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--hw")) hw = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--batch")) B = atoll(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--seq")) T = atoll(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--model")) only = argv[++i];
        else {
            fprintf(stderr, "bench_gpu: unknown argument '%s' (--hw --steps --batch --seq --model)\n",
                    argv[i]);
            return 2;
        }
    }
    if (steps < 1 || B < 1 || T < 1) {
        fprintf(stderr, "bench_gpu: --steps, --batch and --seq must be >= 1\n");
        return 2;
    }
    if (dt_device_cuda_count() == 0) {
        printf("bench_gpu: no CUDA GPU visible: nothing measured\n");
        return 77;
    }
    const char *names[] = {"gpt2", "gpt2-medium", "qwen3-0.6b-shape"};
    int rc = 0;
    for (int k = 0; k < 3; k++) {
        if (only && strcmp(only, names[k])) continue;
        dt_model m;
        dt_error err = {0};
        int mrc = k < 2 ? dt_model_resolve(names[k], &m, &err) : qwen_shaped(T, &m, &err);
        if (mrc) {
            fprintf(stderr, "bench_gpu: %s\n", err.msg);
            return 2;
        }
        if (T > m.max_pos) {
            fprintf(stderr, "bench_gpu: --seq %lld exceeds %s's %lld positions\n", (long long)T,
                    m.name, (long long)m.max_pos);
            return 2;
        }
        rc |= run_one(&m, hw, B, T, steps);
    }
    return rc;
}
