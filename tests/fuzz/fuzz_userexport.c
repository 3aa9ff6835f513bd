/* Fuzz target: export into a user's own file (planner/userexport.c: libyaml's marks, the
 * in-place edits) in each format, with a fixed plan (DT_FUZZ_PLAN). An accepted edit must
 * parse again as YAML. */
#include "dt_fuzz.h"

#include <yaml.h>

#include "dt_userexport.h"

static int parses(const char *text) {
    yaml_parser_t p;
    yaml_document_t d;
    if (!yaml_parser_initialize(&p)) return 1;
    yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
    int ok = yaml_parser_load(&p, &d);
    if (ok) yaml_document_delete(&d);
    yaml_parser_delete(&p);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static dt_plan plan;
    static int loaded;
    dt_error err;
    dt_error_clear(&err);
    if (!loaded) {
        if (dt_plan_load(DT_FUZZ_PLAN, &plan, &err)) {
            fprintf(stderr, "fuzz_userexport: %s\n", err.msg);
            abort();
        }
        loaded = 1;
    }
    char *s = dt_fuzz_text(data, size);
    static const dt_ucfg_format fmts[] = {DT_UCFG_LLAMAFACTORY, DT_UCFG_HF, DT_UCFG_RUNBOOK};
    /* the plan as it is (full) and under freeze / QLoRA: the fine-tuning keys' edits too */
    static const dt_ft_method methods[] = {DT_FT_FULL, DT_FT_FREEZE, DT_FT_QLORA};
    for (size_t i = 0; s && i < sizeof fmts / sizeof fmts[0] * 3; i++) {
        char notes[256];
        dt_plan p = plan;
        if (methods[i / 3] != DT_FT_FULL) dt_finetune_defaults(methods[i / 3], &p.finetune);
        char *out = dt_userexport(&p, fmts[i % 3], "ds.json", s, strlen(s), "fuzz.yaml", notes, sizeof notes, &err);
        if (out && !parses(out)) {
            fprintf(stderr, "fuzz_userexport: the edited text does not parse:\n%s\n", out);
            abort();
        }
        free(out);
    }
    free(s);
    return 0;
}
