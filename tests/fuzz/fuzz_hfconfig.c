/* Fuzz target: the Hugging Face config.json reader (models/model.c), then the
 * arithmetic on what it accepted. */
#include "dt_fuzz.h"

#include "dt_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = dt_fuzz_text(data, size);
    dt_error err;
    dt_error_clear(&err);
    dt_model m;
    if (dt_model_from_config_json(s, "fuzz", &m, &err) == DT_OK) {
        if (dt_model_validate(&m, &err) != DT_OK) abort();   /* accepted means valid */
        volatile int64_t n = dt_model_params(&m);
        volatile double f = dt_model_train_flops_per_seq(&m, 1024);
        (void)n;
        (void)f;
    }
    free(s);
    return 0;
}
