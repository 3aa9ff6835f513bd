/* The training-config reader (planner/userconfig.c, docs/configs.md): PyYAML's scalar
 * typing, format detection, what each key sets, the one place that refuses methods not
 * modelled yet, bad input as one line, the runbook's auto rule and the LR rules. */
#include <math.h>
#include <string.h>

#include "dt_test.h"
#include "dt_userconfig.h"

static dt_usercfg c;   /* large: static */

static int parse(const char *text, dt_ucfg_format fmt, dt_error *err) {
    dt_error_clear(err);
    return dt_usercfg_parse(text, strlen(text), "t.yaml", fmt, &c, err);
}

static const dt_ukey *key(const char *name) {
    for (int i = 0; i < c.n_keys; i++)
        if (!strcmp(c.keys[i].key, name)) return &c.keys[i];
    return NULL;
}

int main(void) {
    dt_error err;

    /* LLaMA-Factory: detected, keys used / without effect, defaults (checkpointing on,
     * cutoff 2048, sdpa), lines */
    CHECK_EQ_I64(parse("model_name_or_path: qwen2.5-7b\nstage: sft\nfinetuning_type: full\n"
                       "per_device_train_batch_size: 4\ngradient_accumulation_steps: 8\nbf16: yes\n"
                       "learning_rate: 2.0e-5\ntemplate: qwen\nlogging_steps: 10\n",
                       DT_UCFG_AUTO, &err), DT_OK);
    CHECK(c.format == DT_UCFG_LLAMAFACTORY);
    CHECK_EQ_I64(c.micro_batch, 4);
    CHECK_EQ_I64(c.grad_accum, 8);
    CHECK_EQ_I64(c.precision, DT_PREC_MIXED_BF16);   /* yes is true in YAML 1.1 */
    CHECK_EQ_I64(c.ckpt, 1);
    CHECK_EQ_I64(c.seq_len, 2048);
    CHECK_STR(c.attention, "sdpa");
    CHECK_NEAR(c.lr, 2e-5, 1e-12);
    CHECK_EQ_I64(c.n_keys, 9);
    CHECK(key("template") && key("template")->use == DT_UKEY_NO_EFFECT && key("template")->line == 8);
    CHECK(key("per_device_train_batch_size")->use == DT_UKEY_USED);

    /* PyYAML's floats need a dot and a signed exponent: 1e-5 is a string */
    CHECK_EQ_I64(parse("finetuning_type: full\nlearning_rate: 1e-5\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:2: 'learning_rate' must be a number, not a string '1e-5'") != NULL);
    CHECK(strstr(err.msg, "1.0e-5") != NULL);
    CHECK_EQ_I64(parse("finetuning_type: full\nlearning_rate: 1.0e5\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    /* ... while JSON's grammar is JSON's */
    CHECK_EQ_I64(parse("{\"learning_rate\": 1e-5, \"per_device_train_batch_size\": 2}", DT_UCFG_AUTO, &err), DT_OK);
    CHECK(c.format == DT_UCFG_HF);
    CHECK_NEAR(c.lr, 1e-5, 1e-12);
    CHECK_EQ_I64(c.precision, DT_PREC_FP32);   /* neither bf16 nor fp16: the Trainer trains in fp32 */
    CHECK_EQ_I64(c.ckpt, -1);
    /* quoted numbers are strings */
    CHECK_EQ_I64(parse("per_device_train_batch_size: \"4\"\n", DT_UCFG_HF, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "must be a whole number") != NULL);

    /* fine-tuning keys as LLaMA-Factory reads them (finetuning_args.py, model_args.py, adapter.py):
     * finetuning_type's default is lora; lora_alpha None or 0 is 2 x rank; lora_target all */
    CHECK_EQ_I64(parse("stage: sft\nlora_rank: 16\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK_EQ_I64(c.finetune.method, DT_FT_LORA);
    CHECK_EQ_I64(c.finetune.lora_rank, 16);
    CHECK_NEAR(c.finetune.lora_alpha, 32.0, 0);
    CHECK(c.finetune.lora_target_all && !c.lora_alpha_given);
    CHECK_EQ_I64(c.finetune.adapter_dtype, DT_DTYPE_FP32);   /* trainable parameters cast to fp32 */
    CHECK(key("lora_rank")->use == DT_UKEY_USED);
    CHECK_EQ_I64(parse("finetuning_type: lora\nlora_rank: 4\nlora_alpha: 0\nlora_dropout: 0.1\n"
                       "lora_target: [q_proj, v_proj]\nadditional_target: lm_head, embed_tokens\nuse_rslora: true\n"
                       "pure_bf16: true\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK_NEAR(c.finetune.lora_alpha, 8.0, 0);
    CHECK_NEAR(c.finetune.lora_dropout, 0.1, 0);
    CHECK(!c.finetune.lora_target_all && c.finetune.lora_target.n == 2);
    CHECK_STR(c.finetune.lora_target.name[1], "v_proj");
    CHECK(c.finetune.modules_to_save.n == 2 && !strcmp(c.finetune.modules_to_save.name[1], "embed_tokens"));
    CHECK(c.finetune.use_rslora);
    CHECK_EQ_I64(c.finetune.adapter_dtype, DT_DTYPE_BF16);   /* pure_bf16: left in half precision */
    /* QLoRA: quantization_bit 4 / 8 with bitsandbytes; type, double quantisation, compute dtype */
    CHECK_EQ_I64(parse("finetuning_type: lora\nquantization_bit: 4\nquantization_type: fp4\n"
                       "double_quantization: false\nfp16: true\nquantization_method: bitsandbytes\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK_EQ_I64(c.finetune.method, DT_FT_QLORA);
    CHECK_EQ_I64(c.finetune.quant, DT_STORAGE_FP4);
    CHECK(!c.finetune.double_quant);
    CHECK_EQ_I64(c.finetune.compute_dtype, DT_DTYPE_FP16);
    CHECK_EQ_I64(parse("finetuning_type: lora\nquantization_bit: 8\nquantization_type: fp4\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK_EQ_I64(c.finetune.quant, DT_STORAGE_INT8);
    CHECK_EQ_I64(c.finetune.compute_dtype, DT_DTYPE_FP32);   /* neither bf16 nor fp16: bnb's float32 */
    CHECK(key("quantization_type")->use == DT_UKEY_NO_EFFECT);
    /* freeze: layers, block modules (all = every one) and the extra modules after them */
    CHECK_EQ_I64(parse("finetuning_type: freeze\nfreeze_trainable_layers: -4\nfreeze_trainable_modules: mlp,self_attn\n"
                       "freeze_extra_modules: [embed_tokens]\nlora_rank: 64\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK_EQ_I64(c.finetune.method, DT_FT_FREEZE);
    CHECK_EQ_I64(c.finetune.trainable_layers, -4);
    CHECK_EQ_I64(c.finetune.trainable_modules.n, 3);
    CHECK_EQ_I64(c.freeze_block_names, 2);
    CHECK_STR(c.finetune.trainable_modules.name[2], "embed_tokens");
    CHECK(key("lora_rank")->use == DT_UKEY_NO_EFFECT && strstr(key("lora_rank")->why, "(this config: freeze)"));
    CHECK_EQ_I64(parse("finetuning_type: freeze\nfreeze_trainable_modules: all\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK_EQ_I64(c.finetune.trainable_modules.n, 0);
    CHECK_EQ_I64(c.finetune.trainable_layers, DT_FT_DEFAULT_TRAINABLE_LAYERS);
    /* bad values and what is not modelled: FILE:LINE and the key */
    CHECK_EQ_I64(parse("finetuning_type: lora\nlora_rank: 0\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:2: lora_rank: 0: a LoRA rank is at least 1") != NULL);
    CHECK_EQ_I64(parse("finetuning_type: lora\nquantization_bit: 3\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:2: quantization_bit: 3: bitsandbytes quantises the base to 4 or 8 bits") != NULL);
    CHECK_EQ_I64(parse("finetuning_type: lora\nquantization_bit: 4\nquantization_method: eetq\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:3: quantization_method: 'eetq' is not modelled") != NULL);
    CHECK_EQ_I64(parse("finetuning_type: lora\nquantization_bit: 4\nquantization_type: int4\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:3: quantization_type: 'int4': expected nf4 or fp4") != NULL);
    CHECK_EQ_I64(parse("finetuning_type: lora\nlora_dropout: 1.0\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:2: lora_dropout") != NULL);
    CHECK_EQ_I64(parse("use_dora: true\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:1: use_dora: DoRA") != NULL);
    CHECK_EQ_I64(parse("finetuning_type: full\nuse_rslora: true\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:2: use_rslora: only valid with finetuning_type: lora") != NULL);
    CHECK_EQ_I64(parse("finetuning_type: lora\nuse_dora: false\npissa_init: false\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK_EQ_I64(parse("finetuning_type: freeze\nfreeze_trainable_layers: 0\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:2: freeze_trainable_layers: 0 trains no block") != NULL);
    CHECK_EQ_I64(parse("finetuning_type: oft\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "finetuning_type: oft is not modelled yet") != NULL);
    CHECK_EQ_I64(parse("finetuning_type: full\nquantization_bit: 8\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "quantization_bit: 8 with finetuning_type full") != NULL);
    CHECK_EQ_I64(parse("finetuning_type: full\nstage: kto\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "stage: kto is not modelled yet") != NULL);
    CHECK_EQ_I64(parse("finetuning_type: full\nstage: ppo\nreward_model: rm\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "stage: ppo is not modelled for LLaMA-Factory yet") != NULL);
    /* rm: LLaMA-Factory's value-head reward model; dpo: its loss and beta */
    CHECK_EQ_I64(parse("finetuning_type: full\nstage: rm\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK_EQ_I64(c.objective.kind, DT_OBJ_RM);
    CHECK_EQ_I64(c.objective.rm_head, DT_RM_HEAD_VALUE);
    CHECK_EQ_I64(parse("finetuning_type: full\nstage: dpo\npref_loss: simpo\npref_beta: 2.5\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK_EQ_I64(c.objective.kind, DT_OBJ_DPO);
    CHECK_EQ_I64(c.objective.pref_loss, DT_PREF_SIMPO);
    CHECK(c.objective.pref_beta == 2.5);
    CHECK_EQ_I64(parse("finetuning_type: full\nstage: dpo\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK(c.objective.pref_loss == DT_PREF_SIGMOID && c.objective.pref_beta == 0.1);
    CHECK_EQ_I64(parse("finetuning_type: full\nstage: sft\npref_loss: simpo\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK_EQ_I64(c.objective.kind, DT_OBJ_AUTO);
    CHECK(key("pref_loss")->use == DT_UKEY_NO_EFFECT);
    CHECK_EQ_I64(parse("finetuning_type: full\nstage: dpo\npref_loss: hinge\ndpo_label_smoothing: 0.2\n", DT_UCFG_AUTO, &err),
                 DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:4: dpo_label_smoothing: only valid with pref_loss: sigmoid") != NULL);
    CHECK_EQ_I64(parse("finetuning_type: full\nstage: pt\nlora_rank: 8\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK(key("lora_rank")->use == DT_UKEY_NO_EFFECT);   /* a lora key with finetuning_type full */
    CHECK_EQ_I64(c.finetune.method, DT_FT_FULL);
    c.quantization_bit = 4;
    CHECK_EQ_I64(dt_usercfg_check_methods(&c, &err), DT_EINVAL);
    /* TrainingArguments has no LoRA keys (PEFT's LoraConfig is separate): named, not "unknown" */
    CHECK_EQ_I64(parse("per_device_train_batch_size: 2\nlora_target: all\n", DT_UCFG_HF, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:2: 'lora_target' is LLaMA-Factory's; TrainingArguments has no fine-tuning keys") != NULL);

    /* contradictions, unknown and repeated keys, refused features */
    CHECK_EQ_I64(parse("bf16: true\nfp16: true\n", DT_UCFG_HF, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "bf16: true and fp16: true contradict") != NULL);
    CHECK_EQ_I64(parse("bf16: true\nfp16: false\n", DT_UCFG_HF, &err), DT_OK);
    CHECK_EQ_I64(parse("per_device_train_batchsize: 2\n", DT_UCFG_HF, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:1: unknown key 'per_device_train_batchsize'") != NULL);
    CHECK_EQ_I64(parse("seed: 1\nseed: 2\n", DT_UCFG_HF, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "t.yaml:2: 'seed' is given twice (also line 1)") != NULL);
    CHECK_EQ_I64(parse("torch_compile: true\n", DT_UCFG_HF, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "torch.compile") != NULL);
    CHECK_EQ_I64(parse("torch_compile: false\n", DT_UCFG_HF, &err), DT_OK);
    CHECK_EQ_I64(parse("optim: adamw_bnb_8bit\n", DT_UCFG_HF, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "adamw_bnb_8bit") != NULL);
    CHECK_EQ_I64(parse("lr_scheduler_type: polynomial\n", DT_UCFG_HF, &err), DT_EINVAL);
    CHECK_EQ_I64(parse("deepspeed: /nonexistent/ds.json\n", DT_UCFG_HF, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "'/nonexistent/ds.json' does not exist") != NULL);

    /* syntax errors: file:line:column; not a mapping; empty */
    CHECK_EQ_I64(parse("a: 1\nb: [1, 2\nc: 3\n", DT_UCFG_HF, &err), DT_EINVAL);
    CHECK(strncmp(err.msg, "t.yaml:", 7) == 0 && strstr(err.msg, "YAML syntax error") != NULL);
    CHECK_EQ_I64(parse("- 1\n- 2\n", DT_UCFG_HF, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "must be a mapping") != NULL);
    CHECK_EQ_I64(parse("", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "empty") != NULL);
    CHECK(strchr(err.msg, '\n') == NULL);

    /* the runbook: training: block, total batch, nested dataloader, strategy, sections */
    CHECK_EQ_I64(parse("model: qwen2.5-7b\ntraining:\n  batch_size: 32\n  accumulation_steps: 4\n"
                       "  use_mixed_precision: true\n  distributed_strategy: auto\ndata:\n  x: 1\n",
                       DT_UCFG_AUTO, &err), DT_OK);
    CHECK(c.format == DT_UCFG_RUNBOOK);
    CHECK_STR(c.model, "qwen2.5-7b");
    CHECK_EQ_I64(c.total_batch, 32);
    CHECK_EQ_I64(c.grad_accum, 4);
    CHECK(c.strategy_auto == 1 && c.precision == DT_PREC_MIXED_BF16);
    CHECK(key("data") && key("data")->use == DT_UKEY_NO_EFFECT);
    CHECK(key("training.batch_size") && key("training.batch_size")->line == 3);
    CHECK_EQ_I64(parse("training:\n  distributed_strategy: zero2\n  mixed_precision: fp16\n  dataloader:\n"
                       "    batch_size: 8\n    num_workers: 4\n", DT_UCFG_AUTO, &err), DT_OK);
    CHECK_EQ_I64(c.strategy_stage, 2);
    CHECK_EQ_I64(c.micro_batch, 8);
    CHECK_EQ_I64(c.precision, DT_PREC_MIXED_FP16);
    CHECK(key("training.dataloader.num_workers") != NULL);
    CHECK_EQ_I64(parse("training:\n  distributed_strategy: fsdp\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK_EQ_I64(parse("training:\n  batch_size: 32\n  dataloader:\n    batch_size: 8\n", DT_UCFG_AUTO, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "keep one") != NULL);
    /* a forced format */
    CHECK_EQ_I64(parse("training:\n  batch_size: 2\n", DT_UCFG_HF, &err), DT_EINVAL);   /* not a TrainingArguments key */
    dt_ucfg_format f;
    CHECK_EQ_I64(dt_ucfg_format_parse("runbook", &f, &err), DT_OK);
    CHECK(f == DT_UCFG_RUNBOOK);
    CHECK_EQ_I64(dt_ucfg_format_parse("yaml", &f, &err), DT_EINVAL);

    /* the runbook's auto rule: < 1B DDP, 1-7B ZeRO-2, > 7B ZeRO-3 */
    CHECK_EQ_I64(dt_runbook_auto_stage(494032768), 0);
    CHECK_EQ_I64(dt_runbook_auto_stage(1000000000), 2);
    CHECK_EQ_I64(dt_runbook_auto_stage(6738415616), 2);
    CHECK_EQ_I64(dt_runbook_auto_stage(7000000000), 2);
    CHECK_EQ_I64(dt_runbook_auto_stage(7615616512), 3);

    /* the two learning-rate rules */
    CHECK_NEAR(dt_lr_scaled(1e-4, 64, 256, DT_LR_SCALE_LINEAR), 4e-4, 1e-12);
    CHECK_NEAR(dt_lr_scaled(1e-4, 64, 256, DT_LR_SCALE_SQRT), 2e-4, 1e-12);
    CHECK_NEAR(dt_lr_scaled(1e-4, 64, 256, DT_LR_SCALE_NONE), 1e-4, 1e-12);
    dt_lr_scaling s;
    CHECK_EQ_I64(dt_lr_scaling_parse("sqrt", &s, &err), DT_OK);
    CHECK(s == DT_LR_SCALE_SQRT);
    CHECK_EQ_I64(dt_lr_scaling_parse("log", &s, &err), DT_EINVAL);
    TEST_MAIN_END();
}
