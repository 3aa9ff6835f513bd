/* Fuzz target: the training-config reader (planner/userconfig.c: libyaml, the key tables,
 * PyYAML scalar typing), in each format. The text is passed with its length, NULs and all. */
#include "dt_fuzz.h"

#include "dt_userconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const dt_ucfg_format fmts[] = {DT_UCFG_AUTO, DT_UCFG_LLAMAFACTORY, DT_UCFG_HF, DT_UCFG_RUNBOOK};
    dt_usercfg *c = malloc(sizeof *c);
    if (!c) return 0;
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
        dt_error err;
        dt_error_clear(&err);
        (void)dt_usercfg_parse((const char *)data, size, "fuzz.yaml", fmts[i], c, &err);
    }
    free(c);
    return 0;
}
