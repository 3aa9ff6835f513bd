/* Fuzz target: the JSON reader every input file goes through (common/dt_json.h). */
#include "dt_fuzz.h"

#include <cjson/cJSON.h>

#include "dt_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = dt_fuzz_text(data, size);
    dt_error err;
    dt_error_clear(&err);
    cJSON *root = NULL;
    if (dt_json_parse(s, "fuzz", &root, &err) == DT_OK) {
        char *again = dt_json_print(root);   /* what we parsed prints back */
        free(again);
        cJSON_Delete(root);
    }
    free(s);
    return 0;
}
