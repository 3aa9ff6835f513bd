/* Fuzz target: the plan reader (common/plan.c), and the writer on what it accepted. */
#include "dt_fuzz.h"

#include "dt_plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = dt_fuzz_text(data, size);
    dt_error err;
    dt_error_clear(&err);
    dt_plan p;
    if (dt_plan_parse(s, &p, &err) == DT_OK) {
        char *again = dt_plan_to_json(&p, &err);   /* an accepted plan round-trips */
        if (again) {
            dt_plan q;
            if (dt_plan_parse(again, &q, &err) != DT_OK) abort();
        }
        free(again);
    }
    free(s);
    return 0;
}
