/* Fuzz target: the Hugging Face config.json reader (models/model.c; a LLaVA config's vision
 * side too), then the arithmetic on what it accepted. */
#include "dt_fuzz.h"

#include "dt_model.h"
#include "dt_vision.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = dt_fuzz_text(data, size);
    dt_error err;
    dt_error_clear(&err);
    dt_model m;
    dt_vlm v;
    if (dt_model_from_config_json_vlm(s, "fuzz", &m, &v, &err) == DT_OK) {
        if (dt_model_validate(&m, &err) != DT_OK) abort();   /* accepted means valid */
        if (dt_vlm_active(&v) && dt_vlm_check(&v, "fuzz", &err) != DT_OK) abort();
        volatile int64_t n = dt_model_params(&m) + dt_vision_tower_params(&v) + dt_vision_projector_params(&v, &m);
        volatile double fv = dt_vision_tower_fwd_flops(&v);
        (void)fv;
        volatile double f = dt_model_train_flops_per_seq(&m, 1024);
        (void)n;
        (void)f;
    }
    free(s);
    return 0;
}
