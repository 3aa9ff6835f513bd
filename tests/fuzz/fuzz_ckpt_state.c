/* Fuzz target: a checkpoint's state.json reader (engine/store/ckpt.c
 * dt_ckpt_state_read), for a fp16 and a bf16 plan of GPT-2 tiny's size. */
#include "dt_fuzz.h"

#include "dt_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = dt_fuzz_file(data, size, path, sizeof path);
    static const dt_precision_preset presets[] = {DT_PREC_MIXED_FP16, DT_PREC_MIXED_BF16};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        dt_precision prec;
        dt_precision_from_preset(presets[i], &prec);
        dt_error err;
        dt_error_clear(&err);
        dt_train_state st;
        (void)dt_ckpt_state_read(path, &prec, 120576, &st, &err);   /* gpt2-tiny */
    }
    close(fd);
    return 0;
}
