/* dt_finetune.h — the fine-tuning method a plan carries (plan.json "finetune",
 * docs/plan-format.md, docs/finetune.md): which parameters are trained, which are
 * frozen, which adapters are added, and how the frozen base is stored. A zeroed
 * struct is full fine-tuning (every parameter trained), what every plan without the
 * section means. What the method does to a model's parameter groups — names, counts,
 * trainability, storage — is models/dt_pgroup.h; memory and time are the planner's.
 *
 * The settings follow Hugging Face PEFT (LoraConfig), bitsandbytes / transformers
 * (BitsAndBytesConfig) and LLaMA-Factory (finetuning_args.py) names and meanings. */
#ifndef DT_FINETUNE_H
#define DT_FINETUNE_H

#include <stdint.h>

#include "dt_error.h"
#include "dt_precision.h"
#include "dt_quant.h"

typedef enum {
    DT_FT_FULL = 0,     /* every parameter trained (the default) */
    DT_FT_FREEZE = 1,   /* some blocks / modules trained, the rest frozen (LLaMA-Factory finetuning_type freeze) */
    DT_FT_LORA = 2,     /* frozen base + low-rank adapters (PEFT LoRA) */
    DT_FT_QLORA = 3     /* LoRA over a 4-bit (or 8-bit) quantised base (bitsandbytes + PEFT) */
} dt_ft_method;

#define DT_FT_MAX_NAMES 16
#define DT_FT_NAME_MAX 48
/* A list of module names as the user wrote them (PEFT matches a name against the end of
 * a module's dotted path: "q_proj" names every layers.N.self_attn.q_proj). */
typedef struct dt_ft_names {
    int n;
    char name[DT_FT_MAX_NAMES][DT_FT_NAME_MAX];
} dt_ft_names;

/* LLaMA-Factory's freeze_trainable_layers default, LoraConfig's r default: finetuning_args.py,
 * peft tuners/lora/config.py. */
#define DT_FT_DEFAULT_TRAINABLE_LAYERS 2
#define DT_FT_DEFAULT_LORA_RANK 8

typedef struct dt_finetune {
    dt_ft_method method;
    /* freeze: trainable_layers > 0 trains the last N blocks, < 0 the first |N|
     * (LLaMA-Factory freeze_trainable_layers); trainable_modules: block modules to train
     * inside those blocks (none listed: all of them, LLaMA-Factory's "all") and modules
     * outside the blocks trained whole (embed_tokens, lm_head, norm; wte, wpe, ln_f). */
    int64_t trainable_layers;
    dt_ft_names trainable_modules;
    /* lora / qlora (PEFT LoraConfig): r, lora_alpha (scale alpha / r, or alpha / sqrt(r) with
     * use_rslora), lora_dropout, target_modules (lora_target_all: every linear of the blocks,
     * PEFT's "all-linear" without the output layer, LLaMA-Factory's lora_target all),
     * modules_to_save (trained whole, as PEFT's ModulesToSaveWrapper copies),
     * adapter_dtype (PEFT autocast_adapter_dtype=True keeps adapters fp32). */
    int64_t lora_rank;
    double lora_alpha;
    double lora_dropout;
    int lora_target_all;
    dt_ft_names lora_target;
    int use_rslora;
    dt_ft_names modules_to_save;
    dt_dtype adapter_dtype;
    /* qlora: the base linears' storage (nf4 / fp4 / int8), double quantisation of the 4-bit
     * absmax, the dtype each use dequantises to (bnb_4bit_compute_dtype), the modules kept
     * in the load dtype besides the non-linears (llm_int8_skip_modules; transformers keeps
     * lm_head), and PEFT prepare_model_for_kbit_training's upcast of every non-quantised
     * parameter to fp32 (upcast_unquantized). */
    dt_storage quant;
    int double_quant;
    dt_dtype compute_dtype;
    int64_t quant_block;
    dt_ft_names quant_skip;
    int upcast_unquantized;
} dt_finetune;

/* Defaults for method m (the fields m does not use stay zero): freeze: the last 2 blocks;
 * lora / qlora: r 8, alpha 16 (LLaMA-Factory: 2 x rank), dropout 0, all linears, fp32
 * adapters; qlora: nf4, double quantisation, bf16 compute, block 64, lm_head kept. */
void dt_finetune_defaults(dt_ft_method m, dt_finetune *out);
const char *dt_ft_method_name(dt_ft_method m);   /* "full" | "freeze" | "lora" | "qlora" */
int dt_ft_method_parse(const char *s, dt_ft_method *out, dt_error *err);
int dt_ft_is_lora(const dt_finetune *ft);         /* lora or qlora */
/* Splits "a,b,c" into out (trimmed, no empty names); what names the option in errors. */
int dt_ft_names_parse(const char *list, const char *what, dt_ft_names *out, dt_error *err);
/* 1 when list holds name (exact). */
int dt_ft_names_has(const dt_ft_names *list, const char *name);
/* LoRA's scale: alpha / r, or alpha / sqrt(r) with use_rslora (peft tuners/lora/layer.py). */
double dt_ft_lora_scale(const dt_finetune *ft);
/* Ranges that need no model: rank >= 1, alpha > 0, dropout in [0, 1), trainable_layers != 0,
 * quant a quantised format, block a power of two in 32..4096 (bitsandbytes' allowed sizes).
 * Checks against the model (target names, rank <= min(in, out), layers in range) are
 * dt_model_pgroups'. where prefixes the message ("$.finetune", "--lora-rank"). */
int dt_finetune_check(const dt_finetune *ft, const char *where, dt_error *err);

#endif
