/* Fuzz target: loading initial weights from a file (engine/store/ckpt.c
 * dt_weights_load): safetensors or an llm.c .bin checkpoint, into GPT-2 tiny. */
#include "dt_fuzz.h"

#include "dt_ckpt.h"
#include "dt_lm.h"
#include "dt_model.h"

static dt_lm *g_model;
static dt_model g_arch;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_error err;
    dt_error_clear(&err);
    if (!g_model) {
        dt_precision prec;
        dt_precision_from_preset(DT_PREC_FP32, &prec);
        if (dt_model_resolve("gpt2-tiny", &g_arch, &err) ||
            dt_lm_create(&g_arch, &prec, 1, 8, 0, DT_ATTN_FLASH, &g_model, &err)) {
            fprintf(stderr, "fuzz_weights: %s\n", err.msg);
            abort();
        }
    }
    char path[64];
    int fd = dt_fuzz_file(data, size, path, sizeof path);
    (void)dt_weights_load(g_model, &g_arch, DT_DTYPE_FP32, path, &err);
    close(fd);
    return 0;
}
