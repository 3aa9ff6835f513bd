/* dt_cli_ft.h — the fine-tuning options every dtplan command that builds or re-prices a
 * plan takes (estimate, solve, simulate), and the fine-tuning lines the commands print
 * (docs/finetune.md "Commands"). */
#ifndef DT_CLI_FT_H
#define DT_CLI_FT_H

#include "dt_plan.h"
#include "dt_units.h"

enum {
    FT_METHOD, FT_LAYERS, FT_MODULES, FT_RANK, FT_ALPHA, FT_DROPOUT, FT_TARGET, FT_SAVE, FT_QUANT, FT_DQ,
    FT_COMPUTE, FT_SKIP, FT_ADAPTER, FT_BLOCK, FT_VLM_STAGE, FT_IMAGES, FT_N_VALUES
};
typedef struct dt_ft_args {
    const char *v[FT_N_VALUES];   /* option values as given, indexed by the FT_ enum */
    int rslora, kbit;             /* --use-rslora, --prepare-kbit */
    int given;                    /* any fine-tuning option appeared */
} dt_ft_args;

/* argv[*i] when it is a fine-tuning option ("--opt value" or "--opt=value"): stores it,
 * advances *i and returns 1; 0 when it is not one; 2 after printing one line on a
 * missing, empty or repeated value. */
int dt_ft_args_take(dt_ft_args *a, int argc, char **argv, int *i, const char *cmd);
/* The method of a (defaults: dt_finetune_defaults of --finetune, full when absent) into
 * p->finetune and, for a vision-language model (p->vlm, docs/vlm.md), --vlm-stage and
 * --images-per-sample into p->vlm (both refused on a text model, in one line), 
 * p->finetune, checked against p's model (dt_model_pgroups): 0, or 2 after printing one
 * line naming the option and the fix. Settings without the method they belong to are
 * refused ("--lora-rank needs --finetune lora or qlora"). */
int dt_ft_args_apply(const dt_ft_args *a, dt_plan *p);
/* The usage lines of the options. */
void dt_ft_usage(FILE *f);

/* "finetune   lora r 16 ...: N trainable of M (x %)" — one line for headers; nothing for full
 * (a vision-language plan: its stage, image tokens and the trained parameters). */
void dt_ft_print_summary(const dt_plan *p, const char *label);
/* Every term the method changes, for plan p as priced (memory of its stage and offload,
 * time of its step), in units u (dtplan estimate / show). */
void dt_ft_print_terms(const dt_plan *p, dt_units u);
/* '  "finetune": {...},' for estimate --json: the method and its group sums (elements, bytes);
 * nothing for full. */
void dt_ft_print_json(const dt_plan *p);
/* The settings as PEFT, bitsandbytes / transformers and LLaMA-Factory spell them (export);
 * m splits freeze's modules into LLaMA-Factory's block and extra lists. */
void dt_ft_print_framework(const dt_finetune *ft, const dt_model *m, FILE *f);

/* A vision-language plan (cli/dtplan/vlmprint.c, docs/vlm.md): one header line (tower, image
 * tokens of --seq, what the stage trains), and every memory term per part (vision tower,
 * projector, language model) for plan p as priced. Nothing for a text plan. */
void dt_vlm_print_summary(const dt_plan *p, const char *label);
void dt_vlm_print_terms(const dt_plan *p, dt_units u);
/* '  "vision": {...},' for estimate --json: the tower, stage, counts and the vision activations
 * per rank (bytes); nothing for a text plan. */
void dt_vlm_print_json(const dt_plan *p);

#endif
