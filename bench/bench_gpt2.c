/* bench_gpt2.c — CPU backend throughput: one full forward + backward of a GPT-2
 * (default GPT-2 124M, B=4, T=64, fp32) against this machine's own GEMM
 * ceiling, a large cblas_sgemm measured in the same run.
 *
 *   bench_gpt2 [--model NAME] [--batch B] [--seq T] [--steps N] [--precision P]
 *              [--ckpt K] [--attention flash|materialized] [--optimizer] [--breakdown]
 *              [--finetune full|freeze|lora] [--lora-rank R]
 *
 * --finetune: the method the step trains (common/dt_finetune.h, the engine's
 * dt_lm_options.finetune; default full). lora: PEFT's LoRA on every linear of the
 * blocks (dt_finetune_defaults: r 8, alpha 2r, dropout 0, fp32 adapters) over a frozen
 * base; --lora-rank R sets r (alpha 2R, LLaMA-Factory's default, as
 * bench/torch_lm_step.py --lora R). freeze: its defaults (the last 2 blocks trained).
 * The optimizer, gradients and "trained params" cover the trained set only (for
 * lora the adapters), the frozen base drawn from the same seed.
 * --optimizer: a full training step — zero_grad, forward, backward, the global
 * gradient norm, clipping and AdamW on the flat parameters (dt_optim.h, decay on
 * 2-D tensors only, as dtrun does for one rank) — timed as "train step"; the
 * forward + backward inside it are still reported as "fwd+bwd".
 * --breakdown: the model's per-op profile (dt_lm_set_profile) over the timed
 * steps: time and share per op kind and pass, GFLOP/s of the GEMMs and of
 * attention, attention's rate as a fraction of the GEMM rate.
 *
 * Achieved FLOP/s counts 6 * N_params * tokens (forward 2, backward 4 FLOPs per
 * parameter per token; Kaplan et al. 2020 §2.1) plus the causal attention the
 * engine performs: per layer, head and (query i, key j <= i) pair, 2*hs FLOPs
 * for q.k and 2*hs for p*v in forward, twice that in backward (12*hs in all).
 * A frozen parameter (the base of --finetune lora / freeze) counts 2 forward and 2
 * backward (the input gradient only, no weight gradient), an upper count for freeze,
 * whose backward stops early. Recompute is not counted (it is overhead, as MFU
 * conventions treat it). Also
 * prints the process CPU time per step, steadier than wall time on a shared machine. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dt_clock.h"
#include "dt_finetune.h"
#include "dt_gemm_cpu.h"
#include "dt_lm.h"
#include "dt_memtrack.h"
#include "dt_optim.h"

/* The ceiling GEMM: square, large enough to run at the BLAS's peak rate. */
#define CEIL_DIM 2048
#define CEIL_REPS 3
#define FLOPS_PER_PARAM_TOKEN 6.0   /* 2 forward + 4 backward */
#define FLOPS_PER_FROZEN_PARAM_TOKEN 4.0   /* 2 forward + 2 backward (input gradient) */
/* --lora-rank R: lora_alpha = LORA_ALPHA_PER_RANK * R (LLaMA-Factory's default alpha,
 * finetuning_args.py: lora_alpha None -> lora_rank * 2) */
#define LORA_ALPHA_PER_RANK 2.0
#define ATT_FLOPS_PER_PAIR_HS 12.0  /* (2 + 2) forward, (4 + 4) backward */
/* --optimizer's AdamW and clip: GPT-2 / nanoGPT's training settings (lr 6e-4,
 * betas 0.9 / 0.95, weight decay 0.1, clip 1.0; Karpathy's nanoGPT train.py),
 * eps torch.optim.AdamW's default; bench/torch_lm_step.py uses the same. */
#define OPT_LR 6e-4
#define OPT_BETA1 0.9
#define OPT_BETA2 0.95
#define OPT_EPS 1e-8
#define OPT_WEIGHT_DECAY 0.1
#define OPT_CLIP 1.0

/* CPU time of the whole process (all threads): on a shared machine a step's CPU
 * time varies far less than its wall time, so precisions compare on it too */
static double cpu_s(void) { return dt_clock_of(CLOCK_PROCESS_CPUTIME_ID); }

static double gemm_ceiling_gflops(void) {
    size_t n = CEIL_DIM;
    float *a = malloc(n * n * sizeof(float)), *b = malloc(n * n * sizeof(float)),
          *c = malloc(n * n * sizeof(float));
    if (!a || !b || !c) return 0.0;
    for (size_t i = 0; i < n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
        c[i] = 0.0f;
    }
    double best = 1e30;
    for (int r = 0; r < CEIL_REPS + 1; r++) {   /* the first call warms up */
        double t0 = dt_clock_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a,
                    (int)n, b, (int)n, 0.0f, c, (int)n);
        double t = dt_clock_s() - t0;
        if (r > 0 && t < best) best = t;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * (double)n * n * n / best / 1e9;
}

static int usage(const char *msg) {
    fprintf(stderr, "bench_gpt2: %s\nusage: bench_gpt2 [--model NAME] [--batch B] [--seq T] "
                    "[--steps N] [--precision fp32|mixed-bf16|mixed-fp16|pure-bf16] [--ckpt K] "
                    "[--attention flash|materialized] [--optimizer] [--breakdown] "
                    "[--finetune full|freeze|lora] [--lora-rank R]\n", msg);
    return 2;
}

/* One optimizer step as dtrun's single rank takes it: the global gradient norm,
 * DeepSpeed's clip divisor (loss scale 1), AdamW per tensor (decay where the model
 * declared it: DT_TENSOR_DECAY, the matrices). t: the 1-based step. */
static void optimizer_step(dt_lm *g, dt_optim *o, int64_t t) {
    const dt_adamw hp = {OPT_LR, OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_WEIGHT_DECAY};
    double div = dt_clip_divisor(sqrt(dt_lm_grad_sumsq(g)), 1.0, OPT_CLIP);
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *ti = dt_lm_tensor(g, i);
        dt_optim_update(o, dt_lm_params(g), dt_lm_grads(g), ti->offset, ti->numel, &hp, 1.0 / div,
                        (ti->flags & DT_TENSOR_DECAY) != 0, t);
    }
}

/* The per-op table of --breakdown: per step means over `steps` steps of step_wall
 * seconds (step_cpu CPU seconds) each; opt_wall / opt_cpu: the optimizer's share
 * (0 without --optimizer). */
static void print_breakdown(const dt_lm *g, const dt_lm_profile *p, int64_t steps,
                            double step_wall, double step_cpu, double opt_wall, double opt_cpu) {
    const double ms = 1e3 / (double)steps;
    double gemm_flops = 0, gemm_wall = 0, op_wall = 0, op_cpu = 0;
    printf("per-op breakdown, mean per step over %lld steps (ms wall; share of the step's wall and "
           "CPU time; GFLOP/s on wall time):\n", (long long)steps);
    printf("  %-14s %8s %8s %8s %8s %6s %9s %6s %8s\n", "op", "fwd", "bwd", "recomp", "total",
           "share", "cpu ms", "cpu %", "GFLOP/s");
    for (int op = 0; op < DT_LM_OP_COUNT; op++) {
        double w[DT_LM_PASS_COUNT], wall = 0, cpu = 0, fl = 0;
        int64_t calls = 0;
        for (int ps = 0; ps < DT_LM_PASS_COUNT; ps++) {
            w[ps] = p->wall[ps][op];
            wall += p->wall[ps][op];
            cpu += p->cpu[ps][op];
            fl += p->flops[ps][op];
            calls += p->calls[ps][op];
        }
        if (!calls) continue;
        op_wall += wall;
        op_cpu += cpu;
        if (op <= DT_LM_OP_CLASSIFIER) {
            gemm_flops += fl;
            gemm_wall += wall;
        }
        char rate[32] = "";
        if (fl > 0) snprintf(rate, sizeof rate, "%.1f", fl / wall / 1e9);
        printf("  %-14s %8.1f %8.1f %8.1f %8.1f %5.1f%% %9.1f %5.1f%% %8s\n",
               dt_lm_op_name(g, (dt_lm_op)op), w[DT_LM_PASS_FWD] * ms, w[DT_LM_PASS_BWD] * ms,
               w[DT_LM_PASS_RECOMPUTE] * ms, wall * ms, 100.0 * wall / step_wall / (double)steps,
               cpu * ms, 100.0 * cpu / step_cpu / (double)steps, rate);
    }
    if (opt_wall > 0)
        printf("  %-14s %8s %8s %8s %8.1f %5.1f%% %9.1f %5.1f%%\n", "optimizer", "", "", "",
               opt_wall * ms, 100.0 * opt_wall / step_wall / (double)steps, opt_cpu * ms,
               100.0 * opt_cpu / step_cpu / (double)steps);
    double rest_wall = step_wall * (double)steps - op_wall - opt_wall;
    double rest_cpu = step_cpu * (double)steps - op_cpu - opt_cpu;
    printf("  %-14s %8s %8s %8s %8.1f %5.1f%% %9.1f %5.1f%%   (zero_grad, hooks, scratch "
           "clears)\n", "other", "", "", "", rest_wall * ms,
           100.0 * rest_wall / step_wall / (double)steps, rest_cpu * ms,
           100.0 * rest_cpu / step_cpu / (double)steps);
    double att_flops = 0, att_wall = 0;
    for (int ps = 0; ps < DT_LM_PASS_COUNT; ps++) {
        att_flops += p->flops[ps][DT_LM_OP_ATTENTION];
        att_wall += p->wall[ps][DT_LM_OP_ATTENTION];
    }
    double gemm_rate = gemm_wall > 0 ? gemm_flops / gemm_wall / 1e9 : 0.0;
    double att_rate = att_wall > 0 ? att_flops / att_wall / 1e9 : 0.0;
    printf("GEMMs (linears + classifier): %.1f GFLOP/s, %.1f%% of the step; attention: %.1f "
           "GFLOP/s = %.2f of the GEMM rate\n", gemm_rate,
           100.0 * gemm_wall / step_wall / (double)steps, att_rate,
           gemm_rate > 0 ? att_rate / gemm_rate : 0.0);
}

int main(int argc, char **argv) {
    const char *model = "gpt2", *precision = "fp32", *method = "full";
    int64_t B = 4, T = 64, steps = 3, K = 0, lora_rank = 0;
    int optimizer = 0, breakdown = 0, have_rank = 0;
    dt_attention attn = DT_ATTN_FLASH;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--optimizer")) {
            optimizer = 1;
            continue;
        }
        if (!strcmp(a, "--breakdown")) {
            breakdown = 1;
            continue;
        }
        if (!v) return usage("missing value after the last option");
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--batch")) B = atoll(v);
        else if (!strcmp(a, "--seq")) T = atoll(v);
        else if (!strcmp(a, "--steps")) steps = atoll(v);
        else if (!strcmp(a, "--ckpt")) K = atoll(v);
        else if (!strcmp(a, "--precision")) precision = v;
        else if (!strcmp(a, "--finetune")) method = v;
        else if (!strcmp(a, "--lora-rank")) {
            lora_rank = atoll(v);
            have_rank = 1;
        }
        else if (!strcmp(a, "--attention")) {
            if (!strcmp(v, "flash")) attn = DT_ATTN_FLASH;
            else if (!strcmp(v, "materialized")) attn = DT_ATTN_MATERIALIZED;
            else return usage("--attention must be flash or materialized");
        } else return usage("unknown option");
        i++;
    }
    if (B < 1 || T < 1 || steps < 1) return usage("--batch, --seq and --steps must be positive");

    dt_error err = {0};
    dt_model m;
    dt_precision_preset pp;
    dt_precision prec;
    if (dt_model_resolve(model, &m, &err) || dt_precision_parse_preset(precision, &pp, &err)) {
        fprintf(stderr, "bench_gpt2: %s\n", err.msg);
        return 2;
    }
    dt_precision_from_preset(pp, &prec);
    dt_ft_method ftm;
    dt_finetune ft;
    if (dt_ft_method_parse(method, &ftm, &err)) {
        fprintf(stderr, "bench_gpt2: %s\n", err.msg);
        return 2;
    }
    dt_finetune_defaults(ftm, &ft);
    if (have_rank) {
        if (!dt_ft_is_lora(&ft)) return usage("--lora-rank needs --finetune lora");
        ft.lora_rank = lora_rank;
        ft.lora_alpha = LORA_ALPHA_PER_RANK * (double)lora_rank;
    }
    if (dt_finetune_check(&ft, "--finetune", &err)) {
        fprintf(stderr, "bench_gpt2: %s\n", err.msg);
        return 2;
    }

    char gemm[256];
    printf("machine: %d OpenMP threads\n", omp_get_max_threads());
    printf("gemm: %s\n", dt_gemm_cpu_describe(gemm, sizeof gemm));
    double ceil_gf = gemm_ceiling_gflops();
    printf("GEMM ceiling: cblas_sgemm %dx%dx%d: %.1f GFLOP/s\n", CEIL_DIM, CEIL_DIM, CEIL_DIM,
           ceil_gf);

    dt_lm *g = NULL;
    const dt_lm_options lo = {.B = B, .T = T, .ckpt_layers = K, .attn = attn, .device = DT_DEVICE_CPU,
                              .finetune = &ft};
    if (dt_lm_create_opts(&m, &prec, &lo, &g, &err)) {
        fprintf(stderr, "bench_gpt2: %s\n", err.msg);
        return 2;
    }
    if (dt_lm_init_random(g, 1337, &err) || dt_lm_init_base_random(g, 1337, &err)) {
        fprintf(stderr, "bench_gpt2: %s\n", err.msg);
        return 2;
    }
    dt_optim *opt = NULL;
    if (optimizer) {
        if (dt_optim_create(&prec, dt_lm_num_params(g), &opt, &err)) {
            fprintf(stderr, "bench_gpt2: %s\n", err.msg);
            return 2;
        }
        dt_optim_init_master(opt, dt_lm_params(g));
    }
    dt_lm_profile prof;
    memset(&prof, 0, sizeof prof);
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(B * T)),
            *tg = malloc(sizeof(int32_t) * (size_t)(B * T));
    uint64_t s = 42;
    for (int64_t i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        in[i] = (int32_t)((s >> 33) % (uint64_t)m.vocab);
        tg[i] = (int32_t)((s >> 13) % (uint64_t)m.vocab);
    }
    double nparams = (double)dt_lm_num_params(g), nbase = (double)dt_lm_num_base_params(g);
    double hs = (double)(m.hidden / m.n_head);
    double pairs = (double)T * (double)(T + 1) / 2.0;
    double flops = (FLOPS_PER_PARAM_TOKEN * nparams + FLOPS_PER_FROZEN_PARAM_TOKEN * nbase) * (double)(B * T) +
                   ATT_FLOPS_PER_PAIR_HS * hs * pairs * (double)(m.n_layer * m.n_head * B);

    float loss = 0.0f;
    double best = 1e30, total = 0.0, cpu_total = 0.0;
    double step_best = 1e30, step_total = 0.0, step_cpu_total = 0.0, opt_wall = 0.0, opt_cpu = 0.0;
    for (int64_t it = 0; it <= steps; it++) {   /* iteration 0 warms up */
        if (it == 1 && breakdown) dt_lm_set_profile(g, &prof);
        double t0 = dt_clock_s(), c0 = cpu_s();
        dt_lm_zero_grad(g);
        if (dt_lm_forward(g, in, tg, &loss, &err) || dt_lm_backward(g, 1.0f, &err)) {
            fprintf(stderr, "bench_gpt2: %s\n", err.msg);
            return 1;
        }
        double t1 = dt_clock_s(), c1 = cpu_s();
        if (opt) optimizer_step(g, opt, it + 1);
        double t2 = dt_clock_s(), c2 = cpu_s();
        if (it > 0) {
            cpu_total += c1 - c0;
            total += t1 - t0;
            if (t1 - t0 < best) best = t1 - t0;
            step_cpu_total += c2 - c0;
            step_total += t2 - t0;
            if (t2 - t0 < step_best) step_best = t2 - t0;
            opt_wall += t2 - t1;
            opt_cpu += c2 - c1;
        }
    }
    dt_lm_set_profile(g, NULL);
    double mean = total / (double)steps;
    double gf = flops / mean / 1e9;
    printf("model: %s, %.0f params, B=%lld T=%lld, %s, %s attention, %lld checkpointed\n",
           m.name, nparams + nbase, (long long)B, (long long)T, precision,
           attn == DT_ATTN_FLASH ? "flash" : "materialized", (long long)K);
    char how[96] = "";
    if (dt_ft_is_lora(&ft))
        snprintf(how, sizeof how, ", r %lld alpha %g on every linear of the blocks", (long long)ft.lora_rank,
                 ft.lora_alpha);
    printf("trainable params: %.0f of %.0f (%s%s)\n", nparams, nparams + nbase, dt_ft_method_name(ftm), how);
    printf("fwd+bwd: mean %.1f ms (best %.1f ms) over %lld steps, loss %.4f\n", mean * 1e3,
           best * 1e3, (long long)steps, loss);
    printf("fwd+bwd CPU time: mean %.1f ms per step (all %d threads)\n",
           cpu_total / (double)steps * 1e3, omp_get_max_threads());
    if (opt) {
        printf("train step: mean %.1f ms (best %.1f ms) over %lld steps, AdamW %.1f ms of it\n",
               step_total / (double)steps * 1e3, step_best * 1e3, (long long)steps,
               opt_wall / (double)steps * 1e3);
        printf("train step CPU time: mean %.1f ms per step (all %d threads)\n",
               step_cpu_total / (double)steps * 1e3, omp_get_max_threads());
    }
    printf("tokens/s: %.1f\n", (double)(B * T) / mean);
    printf("achieved: %.1f GFLOP/s (%.2f GFLOP per step)\n", gf, flops / 1e9);
    printf("ratio to GEMM ceiling: %.1f%%\n", 100.0 * gf / ceil_gf);
    printf("memory: params %.1f MiB, grads %.1f MiB, activations %.1f MiB, buffers %.1f MiB, "
           "optimizer %.1f MiB\n",
           dt_mem_current(DT_POOL_DEVICE, DT_MEM_PARAMS) / 1048576.0,
           dt_mem_current(DT_POOL_DEVICE, DT_MEM_GRADS) / 1048576.0,
           dt_mem_current(DT_POOL_DEVICE, DT_MEM_ACTIVATIONS) / 1048576.0,
           dt_mem_current(DT_POOL_DEVICE, DT_MEM_BUFFERS) / 1048576.0,
           dt_mem_current(DT_POOL_DEVICE, DT_MEM_OPTIMIZER) / 1048576.0);
    if (breakdown)
        print_breakdown(g, &prof, steps, step_total / (double)steps,
                        step_cpu_total / (double)steps, opt ? opt_wall : 0.0, opt ? opt_cpu : 0.0);
    dt_optim_free(opt);
    free(in);
    free(tg);
    dt_lm_free(g);
    return 0;
}
