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
 * Tolerances: tests/kernels/lora_golden.h (as test_llama.c's).
 * Usage: test_kernels_lora GOLDEN_DIR (tests/kernels/golden) */
#include <stdio.h>
#include <stdlib.h>

#include "dt_ckpt.h"
#include "dt_finetune.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_test.h"
#include "lora_golden.h"

#define PATH_MAX_LEN 1024
#define LORA_TENSORS_PER_BLOCK 14   /* A and B of q, k, v, o, gate, up, down */

static void check_case(const char *golden_dir, const char *name, int dropout) {
    char dir[PATH_MAX_LEN], file[PATH_MAX_LEN], label[PATH_MAX_LEN];
    snprintf(dir, sizeof dir, "%s/llama/%s", golden_dir, name);
    snprintf(file, sizeof file, "%s/lora/%s%s.safetensors", golden_dir, name, dropout ? "-dropout" : "");
    snprintf(label, sizeof label, "%s%s", name, dropout ? " (dropout)" : "");
    dt_model m;
    const lg_case c = lg_open(dir, file, label, &m);
    dt_st_file *f = c.f;
    dt_error err = {0};
    dt_finetune ft;
    dt_finetune_defaults(DT_FT_LORA, &ft);
    ft.lora_rank = (int64_t)lg_meta(f, "r");
    ft.lora_alpha = lg_meta(f, "alpha");
    ft.lora_dropout = lg_meta(f, "dropout");
    dt_precision pr;
    dt_precision_from_preset(DT_PREC_FP32, &pr);
    const dt_lm_options o = {.B = c.B, .T = c.T, .attn = DT_ATTN_FLASH, .device = DT_DEVICE_CPU, .finetune = &ft};
    dt_lm *g;
    if (dt_lm_create_opts(&m, &pr, &o, &g, &err) || dt_weights_load_base(g, &m, pr.param, dir, &err)) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        exit(1);
    }
    /* the trained set is the adapters and nothing else; the base holds every model tensor */
    CHECK_EQ_I64(dt_lm_num_tensors(g), LORA_TENSORS_PER_BLOCK * m.n_layer);
    lg_set_adapters(g, f);
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(c.B * c.T)), *tg = malloc(sizeof(int32_t) * (size_t)(c.B * c.T));
    lg_check_forward(g, &c, in, tg);
    lg_check_training(g, &c, &pr, in, tg);
    free(in);
    free(tg);
    dt_st_close(f);
    dt_lm_free(g);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_kernels_lora GOLDEN_DIR\n");
        return 2;
    }
    for (int dropout = 0; dropout < 2; dropout++) {
        check_case(argv[1], "llama", dropout);
        check_case(argv[1], "qwen3", dropout);
    }
    TEST_MAIN_END();
}
