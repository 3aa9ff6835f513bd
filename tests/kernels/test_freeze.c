/* test_freeze.c — the freeze method's two parameter sets (dt_lm.h "Two parameter sets",
 * docs/finetune.md): a model created with a freeze plan puts the frozen tensors in the
 * base set and trains the rest; from the same seed its frozen tensors hold the full run's
 * values, its loss is the full run's bit for bit, and every trained tensor's gradient is
 * bitwise the gradient full fine-tuning computes for it (the same ops on the same values:
 * what PyTorch's requires_grad_(False) leaves of autograd), for GPT-2 (tied, LayerNorm,
 * learned positions), Llama (untied) and Qwen3 (tied, q/k norm), fp32, mixed-bf16 and mixed-fp16,
 * with the trained blocks last (--trainable-layers 1), first (-1: the gradient flows
 * through frozen blocks above them) and a module subset. Also: full fine-tuning through
 * the method struct lays out exactly as without one; the engine's refusals (a fused q | k
 * split by --trainable-modules, LoRA's 16-bit adapters, LoRA's --modules-to-save under a 16-bit
 * precision, QLoRA) are one line. Since the full run's gradients match
 * PyTorch's (kernels_gpt2, kernels_llama), the trained layers' gradients do too.
 * With the argument "cuda" both runs are on the GPU (exit 77 without one).
 * Usage: test_kernels_freeze [cuda] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_device.h"
#include "dt_finetune.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_test.h"

#define SEED 1234u
#define NB 2
#define NT 13   /* a sequence length that is no multiple of any tile */
#define SKIP 77

static dt_device g_device = DT_DEVICE_CPU;

typedef struct {
    const char *what;
    int64_t layers;        /* trainable_layers */
    const char *modules;   /* trainable_modules, or NULL */
} freeze_case;

static void tokens(int32_t *in, int32_t *tg, int64_t V) {
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < NB * NT; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        in[i] = (int32_t)(s % (uint64_t)V);
        tg[i] = (int32_t)((s >> 20) % (uint64_t)V);
    }
}

static dt_lm *make(const dt_model *m, const dt_precision *p, const dt_finetune *ft, dt_error *err) {
    const dt_lm_options o = {.B = NB, .T = NT, .ckpt_layers = 0, .attn = DT_ATTN_FLASH, .device = g_device,
                             .ordinal = 0, .flags = 0, .finetune = ft};
    dt_lm *g = NULL;
    if (dt_lm_create_opts(m, p, &o, &g, err)) return NULL;
    return g;
}

/* forward + backward from the seed; the loss */
static float run(dt_lm *g, const int32_t *in, const int32_t *tg) {
    dt_error err = {0};
    float loss = 0.0f;
    CHECK(dt_lm_init_random(g, SEED, &err) == DT_OK);
    CHECK(dt_lm_init_base_random(g, SEED, &err) == DT_OK);
    dt_lm_zero_grad(g);
    CHECK(dt_lm_forward(g, in, tg, &loss, &err) == DT_OK);
    CHECK(dt_lm_backward(g, 1.0f, &err) == DT_OK);
    return loss;
}

static const dt_tensor_info *by_name(const dt_lm *g, const char *name) {
    for (int i = 0; i < dt_lm_num_tensors(g); i++)
        if (!strcmp(dt_lm_tensor(g, i)->name, name)) return dt_lm_tensor(g, i);
    return NULL;
}

/* bytes of the model's memory (device or host) as host memory the caller frees */
static char *host_copy(const dt_lm *g, const void *p, size_t bytes) {
    const dt_device_ops *dev = dt_lm_device_ops(g);
    char *h = malloc(bytes ? bytes : 1);
    dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_D2H);
    if (bytes) dev->memcpy(h, p, bytes, dev->host_addressable ? DT_COPY_H2H : DT_COPY_D2H, DT_STREAM_D2H);
    dev->stream_sync(DT_STREAM_D2H);
    return h;
}

/* every tensor of z (trained or base) is the same-named tensor of full, bitwise; trained
 * ones' gradients too */
static void compare(dt_lm *full, dt_lm *z, const dt_precision *p, const char *label) {
    const size_t ps = (size_t)dt_dtype_size(p->param), gs = (size_t)dt_dtype_size(p->grad);
    char *fp = host_copy(full, dt_lm_params(full), dt_lm_num_params(full) * ps);
    char *fg = host_copy(full, dt_lm_grads(full), dt_lm_num_params(full) * gs);
    char *zt = host_copy(z, dt_lm_params(z), dt_lm_num_params(z) * ps);
    char *zb = host_copy(z, dt_lm_base_params(z), dt_lm_num_base_params(z) * ps);
    char *zg = host_copy(z, dt_lm_grads(z), dt_lm_num_params(z) * gs);
    int bad = 0;
    for (int set = 0; set < 2; set++) {
        const int n = set ? dt_lm_num_base_tensors(z) : dt_lm_num_tensors(z);
        const char *zp = set ? zb : zt;
        for (int i = 0; i < n; i++) {
            const dt_tensor_info *t = set ? dt_lm_base_tensor(z, i) : dt_lm_tensor(z, i);
            const dt_tensor_info *f = by_name(full, t->name);
            CHECK(f != NULL && f->numel == t->numel && t->set == set);
            if (!f) continue;
            if (memcmp(zp + t->offset * ps, fp + f->offset * ps, t->numel * ps)) {
                fprintf(stderr, "%s: %s's values differ from the full run's\n", label, t->name);
                bad++;
            }
            CHECK((!(t->flags & DT_TENSOR_TRAINABLE)) == set);
            if (!set && memcmp(zg + t->offset * gs, fg + f->offset * gs, t->numel * gs)) {
                fprintf(stderr, "%s: %s's gradient differs from full fine-tuning's\n", label, t->name);
                bad++;
            }
        }
    }
    CHECK(bad == 0);
    CHECK_EQ_I64(dt_lm_num_params(z) + dt_lm_num_base_params(z), dt_lm_num_params(full));
    free(fp), free(fg), free(zt), free(zb), free(zg);
}

static void one_case(const dt_model *m, const dt_precision *p, const freeze_case *c, int64_t first) {
    dt_error err = {0};
    char label[160];
    snprintf(label, sizeof label, "%s %s %s", m->name, p->param == DT_DTYPE_FP32 ? "fp32" : "bf16", c->what);
    dt_finetune ft;
    dt_finetune_defaults(DT_FT_FREEZE, &ft);
    ft.trainable_layers = c->layers;
    if (c->modules) CHECK(dt_ft_names_parse(c->modules, "--trainable-modules", &ft.trainable_modules, &err) == 0);
    int32_t in[NB * NT], tg[NB * NT];
    tokens(in, tg, m->vocab);
    dt_lm *full = make(m, p, NULL, &err), *z = make(m, p, &ft, &err);
    if (!full || !z) {
        fprintf(stderr, "%s: %s\n", label, err.msg);
        CHECK(0);
        dt_lm_free(full);
        dt_lm_free(z);
        return;
    }
    CHECK(dt_lm_num_base_tensors(z) > 0);
    CHECK_EQ_I64(dt_lm_first_trained_layer(z), first);
    float lf = run(full, in, tg), lz = run(z, in, tg);
    if (memcmp(&lf, &lz, sizeof lf)) {
        fprintf(stderr, "%s: loss %.9g vs the full run's %.9g\n", label, lz, lf);
        CHECK(0);
    }
    compare(full, z, p, label);
    dt_lm_free(full);
    dt_lm_free(z);
}

/* full fine-tuning given as a method lays out exactly as without one */
static void full_is_default(const dt_model *m, const dt_precision *p) {
    dt_error err = {0};
    dt_finetune ft;
    dt_finetune_defaults(DT_FT_FULL, &ft);
    dt_lm *a = make(m, p, NULL, &err), *b = make(m, p, &ft, &err);
    CHECK(a && b);
    if (a && b) {
        CHECK_EQ_I64(dt_lm_num_tensors(a), dt_lm_num_tensors(b));
        CHECK_EQ_I64(dt_lm_num_params(a), dt_lm_num_params(b));
        CHECK_EQ_I64(dt_lm_num_base_tensors(b), 0);
        CHECK_EQ_I64(dt_lm_first_trained_layer(b), 0);
        for (int i = 0; i < dt_lm_num_tensors(a); i++)
            CHECK(dt_lm_tensor(a, i)->offset == dt_lm_tensor(b, i)->offset &&
                  dt_lm_tensor(a, i)->full_offset == dt_lm_tensor(a, i)->offset);
    }
    dt_lm_free(a);
    dt_lm_free(b);
}

/* creation fails with one line containing `want` */
static void refused(const dt_model *m, dt_precision_preset preset, const dt_finetune *ft, const char *want) {
    dt_error err = {0};
    dt_precision p;
    dt_precision_from_preset(preset, &p);
    dt_lm *g = make(m, &p, ft, &err);
    CHECK(g == NULL && err.code == DT_EINVAL && strstr(err.msg, want) && !strchr(err.msg, '\n'));
    if (g || !strstr(err.msg, want)) fprintf(stderr, "refusal: \"%s\" (want \"%s\")\n", err.msg, want);
    dt_lm_free(g);
}

int main(int argc, char **argv) {
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "cuda"))) {
        fprintf(stderr, "usage: test_kernels_freeze [cuda]\n");
        return 2;
    }
    if (argc == 2) {
        if (dt_device_cuda_count() == 0) {
            printf("no GPU: skipped\n");
            return SKIP;
        }
        g_device = DT_DEVICE_CUDA;
    }
    const char *names[] = {"gpt2-tiny", "llama-tiny", "qwen3-tiny"};
    const char *subsets[] = {"mlp,ln_f", "mlp,norm", "self_attn,lm_head"};
    const dt_precision_preset presets[] = {DT_PREC_FP32, DT_PREC_MIXED_BF16, DT_PREC_MIXED_FP16};
    const int npresets = (int)(sizeof presets / sizeof presets[0]);
    for (int k = 0; k < 3; k++) {
        dt_model m;
        dt_error err = {0};
        if (dt_model_resolve(names[k], &m, &err)) {
            fprintf(stderr, "%s: %s\n", names[k], err.msg);
            return 1;
        }
        for (int q = 0; q < npresets; q++) {
            dt_precision p;
            dt_precision_from_preset(presets[q], &p);
            full_is_default(&m, &p);
            const freeze_case last = {"last block", 1, NULL}, firstb = {"first block", -1, NULL},
                              sub = {"module subset", 1, subsets[k]};
            one_case(&m, &p, &last, m.n_layer - 1);
            one_case(&m, &p, &firstb, 0);
            /* qwen3-tiny is tied: lm_head is the embedding, so training it reaches block 0 */
            one_case(&m, &p, &sub, k == 2 ? 0 : m.n_layer - 1);
        }
    }
    dt_model llama;
    dt_error err = {0};
    CHECK(dt_model_resolve("llama-tiny", &llama, &err) == 0);
    dt_finetune ft;
    dt_finetune_defaults(DT_FT_FREEZE, &ft);
    ft.trainable_layers = 1;
    CHECK(dt_ft_names_parse("self_attn.q_proj", "--trainable-modules", &ft.trainable_modules, &err) == 0);
    refused(&llama, DT_PREC_FP32, &ft, "one GEMM");
    dt_finetune_defaults(DT_FT_FREEZE, &ft);
    ft.trainable_layers = 5;
    refused(&llama, DT_PREC_FP32, &ft, "--trainable-layers 5");
    /* LoRA: fp32 adapters under every precision (test_lora.c); not 16-bit adapters, nor a
     * 16-bit precision's trained whole modules */
    dt_finetune_defaults(DT_FT_LORA, &ft);
    ft.adapter_dtype = DT_DTYPE_BF16;
    refused(&llama, DT_PREC_MIXED_BF16, &ft, "16-bit adapters (--adapter-dtype)");
    dt_finetune_defaults(DT_FT_LORA, &ft);
    CHECK(dt_ft_names_parse("lm_head", "--modules-to-save", &ft.modules_to_save, &err) == 0);
    refused(&llama, DT_PREC_MIXED_FP16, &ft, "LoRA with --modules-to-save under a 16-bit precision");
    dt_finetune_defaults(DT_FT_QLORA, &ft);
    refused(&llama, DT_PREC_FP32, &ft, "--compute-dtype fp32");   /* QLoRA: fp32 compute only (test_qlora.c) */
    TEST_MAIN_END();
}
