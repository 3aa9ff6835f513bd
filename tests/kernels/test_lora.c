/* test_lora.c — dtrun's LoRA against Hugging Face transformers + PEFT:
 * tests/kernels/golden/lora/ (scripts/gen_lora_goldens.py). The base is the llama-family
 * golden checkpoint (tests/kernels/golden/llama/{llama,qwen3}: GQA, llama3 RoPE scaling;
 * q/k norm, head_dim != hidden / heads) read into the model's base set by name
 * (dt_weights_load_base), the adapters (r 8, alpha 16, every linear of the blocks, llama's
 * fused q | k and gate | up adapted per module) set to the golden's init.<name>. Checked, fp32,
 * B 2 x T 13 (no multiple of any tile):
 *   logits, loss               the forward of the first micro-batch
 *   grad.<name>                every adapter's gradient (the base has none)
 *   step_losses, step_norms    20 optimizer steps of 2 accumulated micro-batches: AdamW
 *                              (decay on the adapters), WarmupDecayLR, global-norm clipping
 *   after.<name>               every adapter after them
 * The same with lora_dropout 0.1, PEFT's dropout replaced by the engine's counter-based masks
 * (dt_lm_dropout_key, reproduced by the script).
 * Tolerances as test_llama.c's (fp32 against torch's fp32): logits 2e-5 abs, losses and norms
 * 1e-5 relative, gradients 1e-4 of each tensor's largest, adapters after the steps 1e-4 abs.
 *
 * mixed-bf16 (the "-bf16" goldens: Llama, Qwen3, Qwen3 with dropout): the base stored bf16,
 * the adapters fp32 with fp32 gradients and AdamW without a master copy, bf16 activations —
 * what Hugging Face Trainer bf16=True runs with PEFT's fp32 adapters under autocast, and what
 * the planner counts for dtrun (dt_lm_trained_precision). bf16 GEMMs round differently from
 * torch's autocast (which rounds every linear's output to bf16; dtrun keeps fp32 outputs
 * until an activation is stored, and runs the adapters' GEMMs in fp32 on the bf16 input), so
 * neither run reproduces the other to bf16's unit roundoff (2^-8) over a network. The bound
 * is accuracy instead: the golden also holds the same PEFT model in fp32 on the same
 * bf16-rounded base (ref.*, the exact answer both approximate), and every quantity of dtrun's
 * run must be within LG_BF16_VS_PEFT (2) times PEFT + autocast's own distance from it — as
 * accurate as the stack users run, to a factor 2 for rounding at other places — and within
 * LG_BF16_REL_CAP of it relative to the quantity's size (bf16's 2^-8 times 8 for the
 * accumulation over the blocks), so a large error of PEFT's cannot hide one of ours.
 * With a second argument "cuda" every case runs on the CUDA device (exit 77 without a GPU;
 * the fp32 tolerances x GPU_TOL_SCALE for cuBLAS's summation order, as test_llama.c; the
 * bf16 bounds as they are: bf16's rounding, not the order, dominates them); the optimizer
 * steps on host copies of the adapters and their gradients.
 * Usage: test_kernels_lora GOLDEN_DIR [cuda] (tests/kernels/golden) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_ckpt.h"
#include "dt_device.h"
#include "dt_finetune.h"
#include "dt_json.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_optim.h"
#include "dt_safetensors.h"
#include "dt_test.h"
#include "lora_golden.h"

#define LOGIT_TOL 2e-5
#define LOSS_RTOL 1e-5
#define GRAD_RTOL 1e-4
#define AFTER_TOL 1e-4
#define PATH_MAX_LEN 1024
#define LORA_TENSORS_PER_BLOCK 14   /* A and B of q, k, v, o, gate, up, down */
#define GPU_TOL_SCALE 10.0          /* test_llama.c's */
#define SKIP 77                     /* ctest's SKIP_RETURN_CODE for the GPU tests */

static dt_device g_device = DT_DEVICE_CPU;   /* where the cases run */
static double g_tol = 1.0;                  /* the fp32 tolerances' scale for that device */

/* n floats between the model's memory p (device or host) and host memory h */
static void model_copy(const dt_lm *g, float *dst, const float *src, size_t n, int to_host) {
    const dt_device_ops *dev = dt_lm_device_ops(g);
    const dt_copy_kind kind = dev->host_addressable ? DT_COPY_H2H : to_host ? DT_COPY_D2H : DT_COPY_H2D;
    const dt_stream_id s = to_host ? DT_STREAM_D2H : DT_STREAM_H2D;
    if (to_host) dev->handoff(DT_STREAM_COMPUTE, s);
    dev->memcpy(dst, src, n * sizeof(float), kind, s);
    if (!to_host) dev->handoff(s, DT_STREAM_COMPUTE);
    dev->stream_sync(s);
}

typedef struct {
    const char *name;
    int dropout, bf16;
} lora_case;

static void check_case(const char *golden_dir, const lora_case *c) {
    const char *name = c->name, *ref = c->bf16 ? "ref." : "";   /* bf16: measured against the exact */
    char dir[PATH_MAX_LEN], file[PATH_MAX_LEN], refp[16];
    snprintf(dir, sizeof dir, "%s/llama/%s", golden_dir, name);
    snprintf(file, sizeof file, "%s/lora/%s%s%s.safetensors", golden_dir, name, c->dropout ? "-dropout" : "",
             c->bf16 ? "-bf16" : "");
    snprintf(refp, sizeof refp, "%sgrad", ref);
    dt_model m;
    golden_model_of(dir, &m);
    dt_error err = {0};
    dt_st_file *f;
    if (dt_st_open(file, &f, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    const int64_t B = (int64_t)lg_meta(f, "B"), T = (int64_t)lg_meta(f, "T"), steps = (int64_t)lg_meta(f, "steps");
    const int64_t accum = (int64_t)lg_meta(f, "accum");
    dt_finetune ft;
    dt_finetune_defaults(DT_FT_LORA, &ft);
    ft.lora_rank = (int64_t)lg_meta(f, "r");
    ft.lora_alpha = lg_meta(f, "alpha");
    ft.lora_dropout = lg_meta(f, "dropout");
    const uint64_t drop_seed = strtoull(dt_st_metadata(f, "drop_seed"), NULL, 10);
    dt_precision pr, trained;
    dt_precision_from_preset(c->bf16 ? DT_PREC_MIXED_BF16 : DT_PREC_FP32, &pr);
    dt_lm_trained_precision(&pr, &ft, &trained);
    /* PEFT's fp32 adapters: fp32 weights and gradients, no master copy, whatever the precision */
    CHECK(trained.param == DT_DTYPE_FP32 && trained.grad == DT_DTYPE_FP32 && !trained.has_master);
    const dt_lm_options o = {.B = B, .T = T, .attn = DT_ATTN_FLASH, .device = g_device, .finetune = &ft};
    dt_lm *g;
    if (dt_lm_create_opts(&m, &pr, &o, &g, &err) || dt_weights_load_base(g, &m, pr.param, dir, &err)) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        exit(1);
    }
    /* the trained set is the adapters and nothing else; the base holds every model tensor */
    CHECK_EQ_I64(dt_lm_num_tensors(g), LORA_TENSORS_PER_BLOCK * m.n_layer);
    /* the adapters and their gradients on the host (params, grads), the model's own (dparams, dgrads) */
    const size_t np = dt_lm_num_params(g);
    float *dparams = dt_lm_params(g), *dgrads = dt_lm_grads(g);
    float *params = malloc(np * sizeof(float)), *grads = malloc(np * sizeof(float));
    lg_set_adapters_into(g, f, params);
    model_copy(g, dparams, params, np, 0);

    const int32_t *seq = (const int32_t *)lg_tensor(f, "seq", (uint64_t)(steps * accum * B * (T + 1)));
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(B * T)), *tg = malloc(sizeof(int32_t) * (size_t)(B * T));
    lg_micro(seq, accum, B, T, 0, 0, in, tg);
    float loss = 0.0f;
    dt_lm_zero_grad(g);
    dt_lm_set_dropout(g, 1, dt_lm_dropout_key(drop_seed, 0, 0));
    CHECK(dt_lm_forward(g, in, tg, &loss, &err) == DT_OK);
    const size_t nlog = (size_t)(B * T * m.vocab);
    const float *want_logits = lg_ref(f, ref, "logits", nlog);
    float *logits = malloc(nlog * sizeof(float));
    model_copy(g, logits, dt_lm_logits(g), nlog, 1);
    double rm;
    const double le = golden_max_abs_diff(logits, want_logits, nlog, &rm);
    const float gl = lg_ref(f, ref, "loss", 1)[0];
    const float first_loss = loss;
    CHECK(dt_lm_backward(g, 1.0f, &err) == DT_OK);
    model_copy(g, grads, dgrads, np, 1);
    const double ge = lg_worst_vs(g, grads, f, refp, 1);
    printf("%s%s%s: logits |diff| %.3g, loss %.7f vs %.7f, adapter gradients worst %.3g of each tensor's largest\n",
           name, c->dropout ? " (dropout)" : "", c->bf16 ? " mixed-bf16" : "", le, loss, gl, ge);
    if (c->bf16) {
        lg_check_bf16("logits", le, golden_max_abs_diff(lg_tensor(f, "logits", nlog), want_logits, nlog, &rm),
                   lg_max_abs(want_logits, nlog));
        lg_check_bf16("gradients (relative)", ge, lg_worst_golden(g, f, "grad", refp, 1), 1.0);
    } else {
        CHECK(le <= LOGIT_TOL * g_tol);
        CHECK(fabs(loss - gl) <= LOSS_RTOL * g_tol * fabs(gl));
        CHECK(ge <= GRAD_RTOL * g_tol);
    }

    /* the training loop: accumulation, clipping, schedule, AdamW over the trained set's precision */
    dt_optim *opt;
    CHECK(dt_optim_create(&trained, dt_lm_num_params(g), &opt, &err) == DT_OK);
    dt_optim_init_master(opt, params);
    dt_schedule sched = {.kind = DT_SCHED_WARMUP_DECAY_LR, .total_steps = steps,
                         .warmup_steps = (int64_t)lg_meta(f, "warmup"), .warmup_linear = 1};
    const double lr = lg_meta(f, "lr"), max_norm = lg_meta(f, "max_norm");
    const float *want = lg_ref(f, ref, "step_losses", (uint64_t)steps);
    const float *want_norm = lg_ref(f, ref, "step_norms", (uint64_t)steps);
    double *got = malloc(sizeof(double) * (size_t)steps), *got_norm = malloc(sizeof(double) * (size_t)steps);
    for (int64_t s = 0; s < steps; s++) {
        dt_lm_zero_grad(g);
        double total = 0;
        for (int64_t a = 0; a < accum; a++) {
            lg_micro(seq, accum, B, T, s, a, in, tg);
            dt_lm_set_dropout(g, 1, dt_lm_dropout_key(drop_seed, s, a));
            CHECK(dt_lm_forward(g, in, tg, &loss, &err) == DT_OK);
            CHECK(dt_lm_backward(g, 1.0f / (float)accum, &err) == DT_OK);
            total += loss;
        }
        const double norm = sqrt(dt_lm_grad_sumsq(g));
        model_copy(g, grads, dgrads, np, 1);
        got[s] = total / (double)accum;
        got_norm[s] = norm;
        dt_adamw hp = {dt_schedule_lr(&sched, lr, s), lg_meta(f, "beta1"), lg_meta(f, "beta2"), lg_meta(f, "eps"),
                       lg_meta(f, "weight_decay")};
        const double div = dt_clip_divisor(norm, 1.0, max_norm);
        for (int i = 0; i < dt_lm_num_tensors(g); i++) {
            const dt_tensor_info *t = dt_lm_tensor(g, i);
            dt_optim_update(opt, params, grads, t->offset, t->numel, &hp, 1.0 / div, (t->flags & DT_TENSOR_DECAY) != 0,
                            s + 1);
        }
        model_copy(g, dparams, params, np, 0);
    }
    const double worst_loss = lg_worst_rel(want, got, NULL, (size_t)steps);
    const double worst_norm = lg_worst_rel(want_norm, got_norm, NULL, (size_t)steps);
    snprintf(refp, sizeof refp, "%safter", ref);
    const double ae = lg_worst_vs(g, params, f, refp, c->bf16);
    printf("%s%s%s: %lld steps x %lld micro-batches: losses worst %.3g relative, norms %.3g, adapters after %.3g\n",
           name, c->dropout ? " (dropout)" : "", c->bf16 ? " mixed-bf16" : "", (long long)steps, (long long)accum,
           worst_loss, worst_norm, ae);
    if (c->bf16) {
        const float *peft_loss = lg_tensor(f, "step_losses", (uint64_t)steps);
        const float *peft_norm = lg_tensor(f, "step_norms", (uint64_t)steps);
        /* the first micro-batch's loss joins the 40 of the steps: one scalar's error is a draw,
         * the worst of many is PEFT's error's scale */
        const double loss0 = fabs(first_loss - gl) / fabs(gl);
        lg_check_bf16("losses (relative)", loss0 > worst_loss ? loss0 : worst_loss,
                   lg_worst_rel(want, NULL, peft_loss, (size_t)steps), 1.0);
        lg_check_bf16("step norms (relative)", worst_norm, lg_worst_rel(want_norm, NULL, peft_norm, (size_t)steps), 1.0);
        lg_check_bf16("adapters after (relative)", ae, lg_worst_golden(g, f, "after", refp, 1), 1.0);
    } else {
        CHECK(worst_loss <= LOSS_RTOL * g_tol);
        CHECK(worst_norm <= LOSS_RTOL * g_tol);
        CHECK(ae <= AFTER_TOL * g_tol);
    }
    free(logits);
    free(params);
    free(grads);
    free(got);
    free(got_norm);
    dt_optim_free(opt);
    free(in);
    free(tg);
    dt_st_close(f);
    dt_lm_free(g);
}

int main(int argc, char **argv) {
    if (argc != 2 && !(argc == 3 && !strcmp(argv[2], "cuda"))) {
        fprintf(stderr, "usage: test_kernels_lora GOLDEN_DIR [cuda]\n");
        return 2;
    }
    const int cuda = argc == 3;
    if (cuda && dt_device_cuda_count() == 0) {
        printf("no GPU: skipped\n");
        return SKIP;
    }
    g_device = cuda ? DT_DEVICE_CUDA : DT_DEVICE_CPU;
    g_tol = cuda ? GPU_TOL_SCALE : 1.0;
    static const lora_case cases[] = {{"llama", 0, 0}, {"qwen3", 0, 0}, {"llama", 1, 0}, {"qwen3", 1, 0},
                                      {"llama", 0, 1}, {"qwen3", 0, 1}, {"qwen3", 1, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(argv[1], &cases[i]);
    TEST_MAIN_END();
}
