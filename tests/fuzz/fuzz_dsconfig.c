/* Fuzz target: the DeepSpeed config reader (planner/dsconfig.c). */
#include "dt_fuzz.h"

#include "dt_dsconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = dt_fuzz_text(data, size);
    dt_error err;
    dt_error_clear(&err);
    dt_dsconfig c;
    (void)dt_dsconfig_parse(s, "fuzz.json", &c, &err);
    free(s);
    return 0;
}
