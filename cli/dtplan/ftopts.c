/* ftopts.c — dtplan's fine-tuning options and lines (dt_cli_ft.h, docs/finetune.md). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_cli.h"
#include "dt_cli_ft.h"
#include "dt_ftplan.h"
#include "dt_memory.h"
#include "dt_model.h"
#include "dt_pgroup.h"
#include "dt_timemodel.h"

#define GIB 1073741824.0
/* sanity bound on --lora-rank / --quant-block: far above any model's width */
#define FT_MAX_INT ((int64_t)1 << 30)

typedef struct {
    const char *name, *example;
    unsigned methods;   /* the methods the option belongs to (bit per dt_ft_method) */
} ft_opt;
#define M_FREEZE (1u << DT_FT_FREEZE)
#define M_LORA ((1u << DT_FT_LORA) | (1u << DT_FT_QLORA))
#define M_QLORA (1u << DT_FT_QLORA)
#define M_ANY 0xFu
static const ft_opt k_ft_opts[FT_N_VALUES] = {
    [FT_METHOD] = {"--finetune", "lora", M_ANY},
    [FT_LAYERS] = {"--trainable-layers", "2", M_FREEZE},
    [FT_MODULES] = {"--trainable-modules", "mlp,lm_head", M_FREEZE},
    [FT_RANK] = {"--lora-rank", "16", M_LORA},
    [FT_ALPHA] = {"--lora-alpha", "32", M_LORA},
    [FT_DROPOUT] = {"--lora-dropout", "0.05", M_LORA},
    [FT_TARGET] = {"--lora-target", "all", M_LORA},
    [FT_SAVE] = {"--modules-to-save", "lm_head", M_LORA},
    [FT_QUANT] = {"--quant", "nf4", M_QLORA},
    [FT_DQ] = {"--double-quant", "on", M_QLORA},
    [FT_COMPUTE] = {"--compute-dtype", "bf16", M_QLORA},
    [FT_SKIP] = {"--quant-skip", "lm_head", M_QLORA},
    [FT_ADAPTER] = {"--adapter-dtype", "fp32", M_LORA},
    [FT_BLOCK] = {"--quant-block", "64", M_QLORA},
    [FT_VLM_STAGE] = {"--vlm-stage", "sft", M_ANY},
    [FT_IMAGES] = {"--images-per-sample", "1", M_ANY},
};

int dt_ft_args_take(dt_ft_args *a, int argc, char **argv, int *i, const char *cmd) {
    const char *arg = argv[*i];
    if (!strcmp(arg, "--use-rslora") || !strcmp(arg, "--prepare-kbit")) {
        int *flag = arg[2] == 'u' ? &a->rslora : &a->kbit;
        if (*flag) return dt_cli_fail(2, "%s: %s given twice", cmd, arg);
        *flag = a->given = 1;
        return 1;
    }
    const char *eq = strchr(arg, '=');
    const size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    for (int k = 0; k < FT_N_VALUES; k++) {
        if (strlen(k_ft_opts[k].name) != len || strncmp(arg, k_ft_opts[k].name, len)) continue;
        const char *val = eq ? eq + 1 : (*i + 1 < argc ? argv[++*i] : NULL);
        if (!val || !*val)
            return dt_cli_fail(2, "%s: %s needs a value (e.g. %s %s)", cmd, k_ft_opts[k].name, k_ft_opts[k].name,
                               k_ft_opts[k].example);
        if (a->v[k]) return dt_cli_fail(2, "%s: %s given twice", cmd, k_ft_opts[k].name);
        a->v[k] = val;
        a->given = 1;
        return 1;
    }
    return 0;
}

void dt_ft_usage(FILE *f) {
    fprintf(f,
            "fine-tuning (docs/finetune.md; default full: every parameter trained):\n"
            "  --finetune M          full | freeze | lora | qlora\n"
            "  --trainable-layers N  freeze: the last N blocks (default 2); negative: the first |N|\n"
            "  --trainable-modules L freeze: block modules to train (self_attn, mlp, mlp.down_proj, ...; default all)\n"
            "                        and outer modules trained whole (embed_tokens, norm, lm_head)\n"
            "  --lora-rank R         lora/qlora: rank (default 8); --lora-alpha A (default 2 x rank);\n"
            "                        --lora-dropout P (default 0); --use-rslora (scale alpha / sqrt(r))\n"
            "  --lora-target L       all (default: every linear of the blocks) or PEFT names, e.g. q_proj,v_proj\n"
            "  --modules-to-save L   modules trained whole beside the adapters (PEFT), e.g. lm_head\n"
            "  --adapter-dtype T     fp32 (default: PEFT's autocast_adapter_dtype) | bf16 | fp16\n"
            "  --quant Q             qlora: nf4 (default) | fp4 | int8; --double-quant on|off (default on);\n"
            "                        --compute-dtype bf16|fp16|fp32 (default bf16); --quant-block N (default 64)\n"
            "  --quant-skip L        linears kept 16-bit (default lm_head); --prepare-kbit: PEFT's\n"
            "                        prepare_model_for_kbit_training (every unquantised parameter in fp32)\n"
            "vision-language models (docs/vlm.md: llava-1.5-7b, a LLaVA config.json):\n"
            "  --vlm-stage S         pretrain (the projector only) | sft (projector + LLM) | full (everything;\n"
            "                        the default); with --finetune lora under sft: LoRA on the LLM + the projector\n"
            "  --images-per-sample N images per sequence (default 1); their image tokens count in the sequence\n");
}

/* ---- building the method ---- */

static int bad(const char *opt, const char *val, const char *what, const char *example) {
    return dt_cli_fail(2, "%s '%s': %s (e.g. %s %s)", opt, val, what, opt, example);
}

static int num(const dt_ft_args *a, int k, double *out) {
    char *end = NULL;
    double x = strtod(a->v[k], &end);
    if (!end || *end || end == a->v[k] || !isfinite(x)) return bad(k_ft_opts[k].name, a->v[k], "not a number", k_ft_opts[k].example);
    *out = x;
    return 0;
}

static int integer(const dt_ft_args *a, int k, int64_t lo, int64_t *out) {
    char *end = NULL;
    long long x = strtoll(a->v[k], &end, 10);
    if (!end || *end || end == a->v[k] || x < lo || x > FT_MAX_INT)
        return bad(k_ft_opts[k].name, a->v[k], lo < 0 ? "not an integer" : "not a non-negative integer",
                   k_ft_opts[k].example);
    *out = x;
    return 0;
}

static int names(const dt_ft_args *a, int k, dt_ft_names *out) {
    dt_error e = {0};
    if (dt_ft_names_parse(a->v[k], k_ft_opts[k].name, out, &e)) return dt_cli_fail(2, "%s", e.msg);
    return 0;
}

static int dtype(const dt_ft_args *a, int k, dt_dtype *out) {
    dt_error e = {0};
    if (dt_dtype_parse(a->v[k], out, &e)) return bad(k_ft_opts[k].name, a->v[k], "expected fp32, bf16 or fp16", k_ft_opts[k].example);
    return 0;
}

static int lora_settings(const dt_ft_args *a, dt_finetune *ft) {
    if (a->v[FT_RANK] && integer(a, FT_RANK, 0, &ft->lora_rank)) return 2;
    if (ft->lora_rank < 1) return dt_cli_fail(2, "--lora-rank %s: a LoRA rank is at least 1 (e.g. --lora-rank 8)", a->v[FT_RANK]);
    ft->lora_alpha = 2.0 * (double)ft->lora_rank;   /* LLaMA-Factory: lora_alpha None -> 2 x rank */
    if (a->v[FT_ALPHA] && num(a, FT_ALPHA, &ft->lora_alpha)) return 2;
    if (a->v[FT_DROPOUT] && num(a, FT_DROPOUT, &ft->lora_dropout)) return 2;
    if (a->v[FT_TARGET]) {
        ft->lora_target_all = !strcmp(a->v[FT_TARGET], "all") || !strcmp(a->v[FT_TARGET], "all-linear");
        if (!ft->lora_target_all && names(a, FT_TARGET, &ft->lora_target)) return 2;
    }
    if (a->v[FT_SAVE] && names(a, FT_SAVE, &ft->modules_to_save)) return 2;
    if (a->v[FT_ADAPTER] && dtype(a, FT_ADAPTER, &ft->adapter_dtype)) return 2;
    ft->use_rslora = a->rslora;
    return 0;
}

static int qlora_settings(const dt_ft_args *a, dt_finetune *ft) {
    dt_error e = {0};
    if (a->v[FT_QUANT]) {
        if (dt_storage_parse(a->v[FT_QUANT], &ft->quant, &e) || !dt_storage_is_quantized(ft->quant))
            return bad("--quant", a->v[FT_QUANT], "expected nf4, fp4 or int8", "nf4");
    }
    if (a->v[FT_DQ]) {
        if (strcmp(a->v[FT_DQ], "on") && strcmp(a->v[FT_DQ], "off")) return bad("--double-quant", a->v[FT_DQ], "expected on or off", "on");
        ft->double_quant = !strcmp(a->v[FT_DQ], "on");
    }
    if (a->v[FT_COMPUTE] && dtype(a, FT_COMPUTE, &ft->compute_dtype)) return 2;
    if (a->v[FT_SKIP] && names(a, FT_SKIP, &ft->quant_skip)) return 2;
    if (a->v[FT_BLOCK] && integer(a, FT_BLOCK, 1, &ft->quant_block)) return 2;
    ft->upcast_unquantized = a->kbit;
    return 0;
}

/* --vlm-stage / --images-per-sample onto p->vlm (a vision-language model only), then the stage
 * against the method: the groups of dt_ftplan_of. */
static int vlm_settings(const dt_ft_args *a, dt_plan *p) {
    dt_error e = {0};
    const int given = a->v[FT_VLM_STAGE] || a->v[FT_IMAGES];
    if (!given && !dt_vlm_active(&p->vlm)) return 0;
    if (!dt_vlm_active(&p->vlm))
        return dt_cli_fail(2, "%s: %s is a text model (no vision tower); give a vision-language model, e.g. --model "
                           "llava-1.5-7b or a LLaVA config.json", a->v[FT_VLM_STAGE] ? "--vlm-stage" : "--images-per-sample",
                           p->model.name);
    if (a->v[FT_VLM_STAGE] && dt_vlm_stage_parse(a->v[FT_VLM_STAGE], &p->vlm.stage, &e))
        return dt_cli_fail(2, "%s", e.msg);
    if (a->v[FT_IMAGES]) {
        int64_t n = 0;
        if (integer(a, FT_IMAGES, 0, &n)) return 2;
        if (n < 1) return bad("--images-per-sample", a->v[FT_IMAGES], "a sample holds at least one image", "1");
        p->vlm.images_per_sample = n;
    }
    dt_ftplan ft;
    if (dt_ftplan_of(p, &ft, &e)) return dt_cli_fail(2, "%s", e.msg);
    return 0;
}

int dt_ft_args_apply(const dt_ft_args *a, dt_plan *p) {
    dt_error e = {0};
    dt_ft_method m = DT_FT_FULL;
    if (a->v[FT_METHOD] && dt_ft_method_parse(a->v[FT_METHOD], &m, &e)) return dt_cli_fail(2, "%s", e.msg);
    for (int k = 0; k < FT_N_VALUES; k++)
        if (a->v[k] && !(k_ft_opts[k].methods & (1u << m)))
            return dt_cli_fail(2, "%s belongs to --finetune %s; this is --finetune %s (add e.g. --finetune %s)",
                               k_ft_opts[k].name, k_ft_opts[k].methods == M_FREEZE ? "freeze" :
                               k_ft_opts[k].methods == M_QLORA ? "qlora" : "lora or qlora", dt_ft_method_name(m),
                               k_ft_opts[k].methods == M_FREEZE ? "freeze" : k_ft_opts[k].methods == M_QLORA ? "qlora" : "lora");
    if ((a->rslora && !(M_LORA & (1u << m))) || (a->kbit && m != DT_FT_QLORA))
        return dt_cli_fail(2, "%s belongs to --finetune %s; this is --finetune %s", a->rslora ? "--use-rslora" : "--prepare-kbit",
                           a->rslora ? "lora or qlora" : "qlora", dt_ft_method_name(m));
    dt_finetune ft;
    dt_finetune_defaults(m, &ft);
    if (a->v[FT_LAYERS] && integer(a, FT_LAYERS, -FT_MAX_INT, &ft.trainable_layers)) return 2;
    if (a->v[FT_MODULES] && names(a, FT_MODULES, &ft.trainable_modules)) return 2;
    if (dt_ft_is_lora(&ft) && lora_settings(a, &ft)) return 2;
    if (m == DT_FT_QLORA && qlora_settings(a, &ft)) return 2;
    dt_pgroups g;
    if (dt_finetune_check(&ft, "fine-tuning", &e) ||
        dt_model_pgroups(&p->model, &ft, p->precision.param, DT_ROLE_POLICY, &g, &e))
        return dt_cli_fail(2, "%s", e.msg);
    p->finetune = ft;
    return vlm_settings(a, p);
}

/* ---- printing ---- */

void dt_ft_print_summary(const dt_plan *p, const char *label) {
    if (p->finetune.method == DT_FT_FULL) return;
    dt_ftplan ft;
    dt_error e = {0};
    char d[256], c1[32], c2[32];
    dt_ftplan_describe(&p->finetune, d, sizeof d);
    if (dt_ftplan_of(p, &ft, &e)) {
        printf("%s%s (%s)\n", label, d, e.msg);
        return;
    }
    const int64_t all = ft.trained + ft.adapter + ft.frozen, tr = ft.trained + ft.adapter;
    printf("%s%s: %s trainable of %s (%.3f%%)\n", label, d, dt_format_count(tr, c1, sizeof c1),
           dt_format_count(all, c2, sizeof c2), all > 0 ? 100.0 * (double)tr / (double)all : 0.0);
}

static void line(const char *name, int64_t bytes, dt_units u, const char *why) {
    char b[48];
    printf("  %-22s %12s  %s\n", name, dt_format_bytes(bytes, u, b, sizeof b), why);
}

static const char *storage_split(const dt_ftplan *ft, char *buf, size_t n) {
    const int64_t q = dt_pgroups_quantized_elems(&ft->g);
    char c1[32], c2[32];
    if (!q) {
        snprintf(buf, n, "%s parameters", dt_format_count(ft->frozen, c1, sizeof c1));
        return buf;
    }
    snprintf(buf, n, "%s quantised linear weights + %s kept 16-bit (embeddings, norms, skipped modules, biases)",
             dt_format_count(q, c1, sizeof c1), dt_format_count(ft->frozen - q, c2, sizeof c2));
    return buf;
}

static void print_time(const dt_plan *p, const dt_ftplan *ft) {
    dt_time_breakdown t;
    dt_time_compute cm;
    dt_error e = {0};
    if (dt_time_estimate(p, &t, &e) || dt_time_compute_micro(p, &cm, &e)) return;
    printf("time (per step; docs/finetune.md \"Time\"):\n");
    printf("  step %.4g s = compute %.4g + recompute %.4g + exposed comm %.4g + offload %.4g + optimizer %.4g; "
           "%.0f tokens/s\n", t.step_s, t.compute_s, t.recompute_s, t.comm_exposed_s, t.offload_s, t.optimizer_s,
           t.tokens_per_s);
    printf("  per micro-step forward %.4g s, backward %.4g s: backward reaches blocks %" PRId64 "..%" PRId64
           " of %" PRId64 "; weight-gradient GEMMs only for trained linears; LoRA's GEMMs and %s kernel launches; "
           "%s\n", cm.fwd_s, cm.bwd_s, ft->first_layer, p->model.n_layer - 1, p->model.n_layer,
           dt_ft_is_lora(&p->finetune) ? "their" : "no",
           ft->dequant_elems ? "every quantised weight dequantised on each use (forward, backward, recompute)"
                             : "no dequantisation");
}

void dt_ft_print_terms(const dt_plan *p, dt_units u) {
    if (p->finetune.method == DT_FT_FULL) return;
    dt_ftplan ft;
    dt_ft_terms t;
    dt_mem_breakdown m;
    dt_error e = {0};
    if (dt_ftplan_of(p, &ft, &e) || dt_ftplan_terms(p, &ft, &t) || dt_memory_estimate(p, &m, &e)) {
        printf("fine-tuning: %s\n", e.msg);
        return;
    }
    char d[256], sp[256], why[768], c1[32];
    dt_ftplan_describe(&p->finetune, d, sizeof d);
    const dt_precision *pr = &p->precision;
    printf("\nfine-tuning terms, ZeRO-%d, offload %s/%s, per %s (docs/finetune.md, docs/memory-model.md "
           "\"Fine-tuning\"):\n  method: %s\n", p->parallel.zero_stage, dt_offload_name(p->parallel.offload_optimizer),
           dt_offload_name(p->parallel.offload_param), p->cluster.device == DT_DEVICE_CPU ? "rank" : "GPU", d);
    snprintf(why, sizeof why, "%s stored as loaded%s; no gradient, optimizer state or master copy%s",
             storage_split(&ft, sp, sizeof sp),
             p->finetune.method == DT_FT_QLORA ? (p->finetune.double_quant ? " (4-bit + absmax per 64, double-quantised per 256)"
                                                                           : " (4-bit + fp32 absmax per 64)") : "",
             p->parallel.zero_stage == 3 ? "; ZeRO-3 partitions it" : "; ZeRO-1/2 replicate it");
    line("frozen weights", t.frozen_weights, u, why);
    if (t.frozen_host) line("frozen weights (host)", t.frozen_host, u, "per node: ZeRO-3 parameter offload");
    if (ft.trained) {
        snprintf(why, sizeof why, "%s trained base parameters: %d + %d + %d B each (%s), by ZeRO stage as in full "
                 "fine-tuning", dt_format_count(ft.trained, c1, sizeof c1), dt_precision_param_bytes(pr),
                 dt_precision_grad_bytes(pr), dt_precision_optimizer_bytes(pr), dt_precision_preset_name(pr->preset));
        line("trained state", m.params + m.grads + m.optimizer - t.frozen_weights - t.adapter_weights - t.adapter_grads -
                                  t.adapter_optimizer, u, why);
    }
    if (ft.adapter) {
        snprintf(why, sizeof why, "%s adapter parameters (lora_A [r, in], lora_B [out, r]) in %s",
                 dt_format_count(ft.adapter, c1, sizeof c1),
                 p->runtime.kind == DT_RUNTIME_DTRUN ? dt_dtype_name(p->finetune.adapter_dtype)
                                                     : "the precision's dtype (the runtime casts the model)");
        line("adapter weights", t.adapter_weights, u, why);
        line("adapter gradients", t.adapter_grads, u, "same dtype as the adapters");
        line("adapter optimizer", t.adapter_optimizer, u,
             p->parallel.offload_optimizer != DT_OFFLOAD_NONE ? "offloaded to the host with the optimizer"
                                                               : "AdamW m and v (fp32), + master when adapters are 16-bit");
    }
    const int dtrun = p->runtime.kind == DT_RUNTIME_DTRUN;
    line("activations", m.activations, u,
         dtrun ? "what dtrun's engine keeps (docs/memory-model.md \"Activations under --runtime dtrun\"), below"
               : "what autograd keeps, below");
    line("  not kept: early blocks", t.act_skipped, u, "blocks below the first trainable one run without a graph");
    line("  not kept: frozen", t.act_dropped, u, "inputs of frozen, unadapted linears; frozen norms' outputs; the head's input");
    if (ft.adapter) {
        line("  LoRA x A^T", t.act_lora, u, "r values per token per adapted linear (lora_B's input)");
        line("  LoRA dropout", t.act_dropout, u,
             dtrun ? "none: dtrun keeps x and regenerates the mask in backward"
                   : "dropout(x) and its 1-byte mask per adapted linear (lora_dropout > 0)");
        if (t.lora_scratch)
            line("LoRA scratch", t.lora_scratch, u, "dy B [BT, r] and dropout(x) of the widest input, fp32 (in buffers)");
    }
    const int64_t logits = (int64_t)4 * p->batch.micro_batch * p->batch.seq_len * p->model.vocab;
    line("fp32 logits", logits, u, "B x T x V in fp32 for the loss (in buffers)");
    if (t.dequant) line("dequantised weight", t.dequant, u, "the largest quantised linear in the compute dtype, per use (in buffers)");
    line("buffers", m.buffers, u, "logits, loss, gradients in flight, communication buckets");
    line("reserve", m.reserve, u, "the hardware profile's");
    line("total", m.total, u, "");
    print_time(p, &ft);
}

void dt_ft_print_json(const dt_plan *p) {
    dt_ftplan ft;
    dt_error e = {0};
    if (p->finetune.method == DT_FT_FULL || dt_ftplan_of(p, &ft, &e)) return;
    printf("  \"finetune\": {\"method\": \"%s\", \"trained\": %" PRId64 ", \"adapter\": %" PRId64 ", \"frozen\": %" PRId64
           ", \"frozen_bytes\": %" PRId64 ", \"quantized\": %" PRId64 ", \"first_backward_block\": %" PRId64 "},\n",
           dt_ft_method_name(p->finetune.method), ft.trained, ft.adapter, ft.frozen, ft.frozen_bytes,
           dt_pgroups_quantized_elems(&ft.g), ft.first_layer);
}

void dt_ft_print_framework(const dt_finetune *ft, const dt_model *m, FILE *f) {
    if (ft->method == DT_FT_FULL) return;
    char targets[DT_FT_MAX_NAMES * DT_FT_NAME_MAX + 32] = "";
    size_t used = 0;
    for (int i = 0; i < ft->lora_target.n; i++)
        used += (size_t)snprintf(targets + used, sizeof targets - used, "%s\"%s\"", i ? ", " : "", ft->lora_target.name[i]);
    fprintf(f, "fine-tuning (%s) as the Hugging Face tools spell it:\n", dt_ft_method_name(ft->method));
    if (ft->method == DT_FT_FREEZE) {
        fprintf(f, "  LLaMA-Factory: finetuning_type: freeze, freeze_trainable_layers: %lld", (long long)ft->trainable_layers);
        /* its two lists: modules of the trained blocks, and modules outside the blocks (adapter.py) */
        for (int outer = 0; outer < 2; outer++) {
            int n = 0;
            for (int i = 0; i < ft->trainable_modules.n; i++)
                if (dt_model_outer_module(m, ft->trainable_modules.name[i]) == outer)
                    fprintf(f, "%s%s", n++ ? "," : outer ? ", freeze_extra_modules: " : ", freeze_trainable_modules: ",
                            ft->trainable_modules.name[i]);
            if (!outer && !n) fprintf(f, ", freeze_trainable_modules: all");
        }
        fprintf(f, "\n");
        return;
    }
    char save[DT_FT_MAX_NAMES * DT_FT_NAME_MAX + 32] = "None";
    used = 0;
    for (int i = 0; i < ft->modules_to_save.n; i++)
        used += (size_t)snprintf(save + used, sizeof save - used, "%s\"%s\"%s", i ? ", " : "[", ft->modules_to_save.name[i],
                                 i + 1 == ft->modules_to_save.n ? "]" : "");
    fprintf(f, "  PEFT: LoraConfig(r=%lld, lora_alpha=%g, lora_dropout=%g, target_modules=%s%s%s, use_rslora=%s, "
               "modules_to_save=%s)\n",
            (long long)ft->lora_rank, ft->lora_alpha, ft->lora_dropout, ft->lora_target_all ? "\"all-linear\"" : "[",
            ft->lora_target_all ? "" : targets, ft->lora_target_all ? "" : "]", ft->use_rslora ? "True" : "False", save);
    if (ft->method == DT_FT_QLORA && ft->quant != DT_STORAGE_INT8)
        fprintf(f, "  transformers: BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"%s\", "
                   "bnb_4bit_use_double_quant=%s, bnb_4bit_compute_dtype=torch.%s)\n",
                dt_storage_name(ft->quant), ft->double_quant ? "True" : "False",
                ft->compute_dtype == DT_DTYPE_BF16 ? "bfloat16" : ft->compute_dtype == DT_DTYPE_FP16 ? "float16" : "float32");
    if (ft->method == DT_FT_QLORA && ft->quant == DT_STORAGE_INT8)
        fprintf(f, "  transformers: BitsAndBytesConfig(load_in_8bit=True)\n");
    fprintf(f, "  LLaMA-Factory: finetuning_type: lora, lora_rank: %lld, lora_alpha: %g, lora_dropout: %g, lora_target: %s",
            (long long)ft->lora_rank, ft->lora_alpha, ft->lora_dropout, ft->lora_target_all ? "all" : "");
    for (int i = 0; !ft->lora_target_all && i < ft->lora_target.n; i++) fprintf(f, "%s%s", i ? "," : "", ft->lora_target.name[i]);
    if (ft->use_rslora) fprintf(f, ", use_rslora: true");
    for (int i = 0; i < ft->modules_to_save.n; i++)   /* LLaMA-Factory's name for PEFT's modules_to_save */
        fprintf(f, "%s%s", i ? "," : ", additional_target: ", ft->modules_to_save.name[i]);
    if (ft->method == DT_FT_QLORA)
        fprintf(f, ", quantization_bit: %d, quantization_type: %s, double_quantization: %s",
                ft->quant == DT_STORAGE_INT8 ? 8 : 4, dt_storage_name(ft->quant), ft->double_quant ? "true" : "false");
    fprintf(f, "\n");
}
