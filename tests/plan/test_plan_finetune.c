/* test_plan_finetune.c — plan.json's optional "finetune" section (common/finetune.c):
 * each method round-trips field for field and text for text; a plan without the section
 * is full fine-tuning and its text does not change; unknown / missing / wrong keys are one
 * line naming the JSON path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_model.h"
#include "dt_plan.h"
#include "dt_test.h"

static void plan_for(dt_plan *p, const char *model) {
    dt_error err = {0};
    dt_plan_defaults(p);
    if (dt_model_resolve(model, &p->model, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    p->batch.seq_len = 32;
}

/* text with the first occurrence of from replaced by to (malloc'd) */
static char *replace(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    if (!at) {
        fprintf(stderr, "replace: no '%s' in the plan\n", from);
        exit(1);
    }
    size_t n = strlen(text) - strlen(from) + strlen(to) + 1, head = (size_t)(at - text);
    char *out = malloc(n);
    memcpy(out, text, head);
    snprintf(out + head, n - head, "%s%s", to, at + strlen(from));
    return out;
}

static void expect_reject(const char *text, const char *from, const char *to, const char *want) {
    char *t = replace(text, from, to);
    dt_plan p;
    dt_error err = {0};
    int rc = dt_plan_parse(t, &p, &err);
    if (rc != DT_EINVAL || !strstr(err.msg, want) || strchr(err.msg, '\n')) {
        fprintf(stderr, "reject [%s -> %s]: rc %d \"%s\", wanted \"%s\"\n", from, to, rc, err.msg, want);
        dt_test_failures++;
    }
    free(t);
}

static char *round_trip(const dt_plan *p, dt_plan *back) {
    dt_error err = {0};
    char *t0 = dt_plan_to_json(p, &err);
    CHECK(t0 != NULL);
    if (!t0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    CHECK_EQ_I64(dt_plan_parse(t0, back, &err), DT_OK);
    char *t1 = dt_plan_to_json(back, &err);
    CHECK(t1 && !strcmp(t0, t1));
    free(t1);
    return t0;
}

int main(void) {
    dt_plan p, q;
    /* full: no section, and the text of an older plan is what it was */
    plan_for(&p, "llama-tiny");
    char *full = round_trip(&p, &q);
    CHECK(!strstr(full, "finetune"));
    CHECK(q.finetune.method == DT_FT_FULL);

    /* freeze */
    dt_finetune_defaults(DT_FT_FREEZE, &p.finetune);
    p.finetune.trainable_layers = -1;
    dt_error err = {0};
    CHECK(dt_ft_names_parse("mlp,lm_head", "x", &p.finetune.trainable_modules, &err) == DT_OK);
    char *fz = round_trip(&p, &q);
    CHECK(strstr(fz, "\"method\": \"freeze\"") && strstr(fz, "\"trainable_layers\": -1"));
    CHECK(q.finetune.trainable_layers == -1 && q.finetune.trainable_modules.n == 2 &&
          !strcmp(q.finetune.trainable_modules.name[1], "lm_head"));
    expect_reject(fz, "\"trainable_layers\": -1", "\"trainable_layers\": 0", "trainable_layers 0");
    expect_reject(fz, "\"trainable_layers\": -1", "\"lora\": {}, \"trainable_layers\": -1", "$.finetune.lora: unknown key");

    /* lora */
    dt_finetune_defaults(DT_FT_LORA, &p.finetune);
    p.finetune.lora_rank = 16, p.finetune.lora_alpha = 32, p.finetune.lora_dropout = 0.05;
    p.finetune.lora_target_all = 0, p.finetune.use_rslora = 1;
    CHECK(dt_ft_names_parse("q_proj,v_proj", "x", &p.finetune.lora_target, &err) == DT_OK);
    CHECK(dt_ft_names_parse("lm_head", "x", &p.finetune.modules_to_save, &err) == DT_OK);
    char *lo = round_trip(&p, &q);
    CHECK(q.finetune.method == DT_FT_LORA && q.finetune.lora_rank == 16 && q.finetune.lora_alpha == 32 &&
          q.finetune.lora_dropout == 0.05 && q.finetune.use_rslora && q.finetune.lora_target.n == 2 &&
          !q.finetune.lora_target_all && q.finetune.modules_to_save.n == 1 && q.finetune.adapter_dtype == DT_DTYPE_FP32);
    CHECK(dt_ft_lora_scale(&q.finetune) == 32.0 / 4.0);   /* rsLoRA: alpha / sqrt(r) */
    expect_reject(lo, "\"rank\": 16", "\"rank\": 0", "$.finetune.lora.rank");
    expect_reject(lo, "\"dropout\": 0.05", "\"dropout\": 1", "$.finetune.lora.dropout");
    expect_reject(lo, "\"use_rslora\": true", "\"use_rslora\": true, \"use_dora\": true", "$.finetune.lora.use_dora: unknown key");
    expect_reject(lo, "\"adapter_dtype\": \"fp32\"", "\"adapter_dtype\": \"fp8\"", "$.finetune.lora.adapter_dtype");
    expect_reject(lo, "\"method\": \"lora\"", "\"method\": \"dora\"", "$.finetune.method");
    expect_reject(lo, "\"method\": \"lora\"", "\"method\": \"full\"", "\"full\" plans carry no finetune section");
    expect_reject(lo, "\"target\": [", "\"target\": 3, \"x\": [", "$.finetune.lora.target: expected an array");

    /* qlora, "all" targets */
    dt_finetune_defaults(DT_FT_QLORA, &p.finetune);
    p.finetune.quant = DT_STORAGE_FP4, p.finetune.double_quant = 0, p.finetune.upcast_unquantized = 1;
    char *ql = round_trip(&p, &q);
    CHECK(strstr(ql, "\"target\": [\"all\"]") || strstr(ql, "\"all\""));
    CHECK(q.finetune.method == DT_FT_QLORA && q.finetune.lora_target_all && q.finetune.quant == DT_STORAGE_FP4 &&
          !q.finetune.double_quant && q.finetune.upcast_unquantized && q.finetune.quant_block == 64 &&
          q.finetune.compute_dtype == DT_DTYPE_BF16 && q.finetune.quant_skip.n == 1);
    expect_reject(ql, "\"type\": \"fp4\"", "\"type\": \"bf16\"", "$.finetune.quant.type");
    expect_reject(ql, "\"block_size\": 64", "\"block_size\": 48", "quantisation block 48");
    expect_reject(ql, "\"double_quant\": false", "\"double_quant\": 0", "$.finetune.quant.double_quant");
    expect_reject(ql, "\"double_quant\": false,", "", "$.finetune.quant.double_quant: missing required key");
    free(full), free(fz), free(lo), free(ql);
    TEST_MAIN_END();
}
