/* dt_cli_obj.h — the objective options every dtplan command that builds or re-prices a
 * plan takes (estimate, solve, simulate), and the objective lines the commands print
 * (docs/objectives.md "Commands"). */
#ifndef DT_CLI_OBJ_H
#define DT_CLI_OBJ_H

#include <stdio.h>

#include "dt_plan.h"
#include "dt_units.h"

enum {
    OBJ_KIND, OBJ_GEN, OBJ_COMPLETION, OBJ_KL, OBJ_GEN_BATCH, OBJ_TEMPERATURE, OBJ_TOP_P, OBJ_PLACEMENT, OBJ_GEN_MEM, OBJ_PREF_LOSS, OBJ_PREF_BETA,
    OBJ_RM_HEAD, OBJ_LABEL_SMOOTHING, OBJ_ITERATIONS, OBJ_N_VALUES
};
typedef struct dt_obj_args {
    const char *v[OBJ_N_VALUES];   /* option values as given, indexed by the OBJ_ enum */
    int precompute_ref;            /* --precompute-ref */
    int given;                     /* any objective option appeared */
} dt_obj_args;

/* argv[*i] when it is an objective option ("--opt value" or "--opt=value"): stores it,
 * advances *i and returns 1; 0 when it is not one; 2 after printing one line on a
 * missing, empty or repeated value. */
int dt_obj_args_take(dt_obj_args *a, int argc, char **argv, int *i, const char *cmd);
/* The objective of a (dt_objective_defaults of --objective; none given: the plan's own)
 * into p->objective, checked against p's batch: 0, or 2 after printing one line naming
 * the option and the fix. Settings without their objective are refused. */
int dt_obj_args_apply(const dt_obj_args *a, dt_plan *p);
void dt_obj_usage(FILE *f);

/* "objective  dpo: policy + frozen reference ..." — one line for headers; nothing for pt / sft. */
void dt_obj_print_summary(const dt_plan *p, const char *label);
/* Every model's rows and the generation phase for plan p as priced, in units u. */
void dt_obj_print_terms(const dt_plan *p, dt_units u);
/* '  "objective": {...},' for estimate --json; nothing for pt / sft. */
void dt_obj_print_json(const dt_plan *p);
/* The settings as TRL / LLaMA-Factory spell them (export). */
void dt_obj_print_framework(const dt_plan *p, FILE *f);

#endif
