/* test_dsconfig.c — DeepSpeed config import (validation rules, "auto", batch
 * triple wording) and DeepSpeed's own estimators against the numbers DeepSpeed's
 * documentation prints for t5-3b (DeepSpeed docs, "Memory Requirements",
 * docs/code-docs/source/memory.rst). */
#include <stdint.h>

#include "dt_dsconfig.h"
#include "dt_test.h"
#include "plan_fixture.h"

#define SRC(rel) (getenv("DT_SOURCE_DIR") ? getenv("DT_SOURCE_DIR") : ".."), rel

static void plan_for(dt_plan *p, const char *model, int64_t gpus) { fixture_plan(p, model, 0, gpus); }

/* parse + apply; returns the rc of whichever failed, message in e */
static int import(const char *json, dt_plan *p, dt_error *e) {
    dt_dsconfig c;
    int rc = dt_dsconfig_parse(json, "cfg.json", &c, e);
    if (rc) return rc;
    return dt_dsconfig_apply(&c, p, NULL, e);
}

static void expect_error(const char *json, int64_t gpus, const char *needle) {
    dt_plan p;
    dt_error e = {0};
    plan_for(&p, "gpt2", gpus);
    int rc = import(json, &p, &e);
    if (rc != DT_EINVAL || !strstr(e.msg, needle))
        fprintf(stderr, "config %s\n  expected error containing \"%s\", got rc %d: %s\n", json, needle, rc, e.msg);
    CHECK(rc == DT_EINVAL && strstr(e.msg, needle) != NULL);
    CHECK(strchr(e.msg, '\n') == NULL); /* one line */
}

static void test_seed_configs(void) {
    char path[1024];
    dt_error e = {0};
    dt_dsconfig c;
    dt_plan p;
    for (int stage = 1; stage <= 3; stage++) {
        snprintf(path, sizeof path, "%s/%s%d.json", SRC("configs/deepspeed/zero"), stage);
        int rc = dt_dsconfig_load(path, &c, &e);
        if (rc) fprintf(stderr, "%s\n", e.msg);
        CHECK(rc == 0);
        CHECK(c.zero_stage == stage);
        plan_for(&p, "qwen3-0.6b", 1); /* 32 = 4 x 8 x 1 */
        dt_ds_notes notes = {0};
        CHECK(dt_dsconfig_apply(&c, &p, &notes, &e) == 0);
        CHECK(p.parallel.zero_stage == stage);
        CHECK(p.precision.preset == DT_PREC_MIXED_FP16);
        CHECK_EQ_I64(p.batch.micro_batch, 4);
        CHECK_EQ_I64(p.batch.grad_accum, 8);
        CHECK_EQ_I64(p.batch.global_batch, 32);
        CHECK_NEAR(p.optimizer.lr, 3e-5, 1e-12);
        CHECK_NEAR(p.optimizer.beta1, 0.8, 1e-12);
        CHECK_NEAR(p.optimizer.grad_clip, 1.0, 1e-12);
        CHECK(p.schedule.kind == DT_SCHED_WARMUP_LR);
        CHECK_EQ_I64(p.schedule.warmup_steps, 500);
        CHECK(p.precision.initial_scale_power == 16 && p.precision.hysteresis == 2);
        if (stage < 3) {
            CHECK_EQ_I64(p.parallel.reduce_bucket_elems, 200000000);
            CHECK_EQ_I64(p.parallel.allgather_bucket_elems, 200000000);
            CHECK(p.parallel.offload_optimizer == DT_OFFLOAD_NONE);
        } else {
            /* "auto" buckets: HF Trainer's hidden^2 and 0.9 hidden^2 (hidden 1024) */
            CHECK_EQ_I64(p.parallel.reduce_bucket_elems, 1024 * 1024);
            CHECK_EQ_I64(p.parallel.prefetch_bucket_elems, 943718);
            CHECK(p.parallel.offload_optimizer == DT_OFFLOAD_CPU);
            CHECK(p.parallel.offload_param == DT_OFFLOAD_CPU);
            CHECK_EQ_I64(p.parallel.max_live_params, 1000000000);
            CHECK(notes.n >= 2);
        }
        CHECK(p.parallel.overlap_comm == 1);
        /* the same file on 8 GPUs is what DeepSpeed rejects */
        plan_for(&p, "qwen3-0.6b", 8);
        CHECK(dt_dsconfig_apply(&c, &p, NULL, &e) == DT_EINVAL);
        CHECK_STR(e.msg, "Check batch related parameters. train_batch_size is not equal to "
                         "micro_batch_per_gpu * gradient_acc_step * world_size 32 != 4 * 8 * 8 (world_size is "
                         "dtplan's --gpus: use --gpus 1 with this config, or set its train_batch_size to 256 or "
                         "\"auto\")");
    }
}

static void test_batch_inference(void) {
    dt_plan p;
    dt_error e = {0};
    plan_for(&p, "gpt2", 2);
    /* train + micro: gas = 32 // 4 // 2 = 4 */
    CHECK(import("{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4}", &p, &e) == 0);
    CHECK_EQ_I64(p.batch.grad_accum, 4);
    /* micro only: train = micro * world, gas 1 */
    plan_for(&p, "gpt2", 2);
    CHECK(import("{\"train_micro_batch_size_per_gpu\": 3}", &p, &e) == 0);
    CHECK_EQ_I64(p.batch.global_batch, 6);
    CHECK_EQ_I64(p.batch.grad_accum, 1);
    /* "auto" everywhere: the plan's (CLI) values, as HF Trainer fills them */
    plan_for(&p, "gpt2", 4);
    p.batch.micro_batch = 2;
    p.batch.grad_accum = 3;
    CHECK(import("{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\","
                 " \"gradient_accumulation_steps\": \"auto\", \"bf16\": {\"enabled\": \"auto\"}}", &p, &e) == 0);
    CHECK_EQ_I64(p.batch.global_batch, 24);
    CHECK(p.precision.preset == DT_PREC_MIXED_BF16);
    /* floor division then the assertion: 30 with micro 4 on 2 ranks -> gas 3, 24 != 30 */
    expect_error("{\"train_batch_size\": 30, \"train_micro_batch_size_per_gpu\": 4}", 2,
                 "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 30 != 4 * 3 * 2");
    expect_error("{\"gradient_accumulation_steps\": 2}", 1,
                 "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
    expect_error("{\"train_batch_size\": 0, \"train_micro_batch_size_per_gpu\": 1}", 1,
                 "Train batch size: 0 has to be greater than 0");
    expect_error("{\"train_micro_batch_size_per_gpu\": -2}", 1,
                 "Micro batch size per gpu: -2 has to be greater than 0");
    expect_error("{\"train_micro_batch_size_per_gpu\": \"4\"}", 1,
                 "$.train_micro_batch_size_per_gpu: expected an integer or \"auto\"");
}

static void test_rejections(void) {
    expect_error("{\"zero_optimization\": {\"stage\": 4}}", 1, "Maximum supported ZeRO stage is 3");
    expect_error("{\"zero_optimization\": {\"stage\": 2, \"grad_hooks\": true}}", 1,
                 "$.zero_optimization.grad_hooks: unknown key");
    expect_error("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"cpu\", \"colour\": 1}}}", 1,
                 "$.zero_optimization.offload_param.colour: unknown key");
    expect_error("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"nvme\", "
                 "\"nvme_path\": \"/nvme\"}}}", 1, "needs ZeRO stage 3");
    expect_error("{\"zero_optimization\": {\"stage\": 2, \"offload_param\": {\"device\": \"cpu\"}}}", 1,
                 "offload_param device \"cpu\" needs ZeRO stage 3 (stage is 2)");
    expect_error("{\"zero_optimization\": {\"stage\": 0, \"offload_optimizer\": {\"device\": \"cpu\"}}}", 1,
                 "needs ZeRO stage 1, 2 or 3");
    expect_error("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.5}}}", 1,
                 "Partial offloading only supported for ZeRO Stage 3.");
    expect_error("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"disk\"}}}", 1,
                 "$.zero_optimization.offload_optimizer.device: expected one of \"none\", \"cpu\", \"nvme\"");
    expect_error("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\"}}}", 1,
                 "nvme_path: required");
    expect_error("{\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}", 1,
                 "bfloat16 and fp16 modes cannot be simultaneously enabled");
    expect_error("{\"zero_optimization\": {\"stage\": 1, \"stage\": 2}}", 1, "duplicate key");
    expect_error("{\"zero_optimization\": {\"stage\": 3, \"prefetch_bucket_size\": 1, \"stage3_prefetch_bucket_size\": 2}}",
                 1, "given twice");
    expect_error("{\"zero_optimization\": {\"stage\": 2,}}", 1, "invalid JSON");
    expect_error("{\"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": 2.5}}", 1,
                 "$.zero_optimization.reduce_bucket_size: expected an integer >= 1");
}

/* Every key dsconfig.c reads is range-checked, with DeepSpeed's limits where its
 * pydantic models have them (issue 16: nonsense values used to pass). */
static void test_ranges(void) {
    static const struct { const char *json, *needle; } cases[] = {
        {"{\"zero_optimization\": {\"stage\": 7}}", "$.zero_optimization.stage: 7: Maximum supported ZeRO stage is 3"},
        {"{\"zero_optimization\": {\"stage\": -1}}", "expected a ZeRO stage 0, 1, 2 or 3, got -1"},
        {"{\"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": -5}}",
         "$.zero_optimization.reduce_bucket_size: expected an integer >= 1 or \"auto\", got -5"},
        {"{\"zero_optimization\": {\"stage\": 2, \"allgather_bucket_size\": 0}}",
         "$.zero_optimization.allgather_bucket_size: expected an integer >= 1"},
        {"{\"zero_optimization\": {\"stage\": 3, \"stage3_max_live_parameters\": -1}}",
         "stage3_max_live_parameters: expected an integer >= 0"},
        {"{\"zero_optimization\": {\"stage\": 3, \"prefetch_bucket_size\": -1}}", "prefetch_bucket_size: expected an integer >= 0"},
        {"{\"zero_optimization\": {\"stage\": 3, \"sub_group_size\": -1}}", "$.zero_optimization.sub_group_size: expected an integer >= 0"},
        {"{\"zero_optimization\": {\"stage\": 2, \"contiguous_gradients\": \"yes\"}}",
         "$.zero_optimization.contiguous_gradients: expected true or false, got \"yes\""},
        {"{\"zero_optimization\": {\"stage\": 2, \"overlap_comm\": 1}}", "overlap_comm: expected true, false or \"auto\""},
        {"{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"cpu\", \"buffer_count\": -1}}}",
         "$.zero_optimization.offload_param.buffer_count: expected an integer >= 0"},
        {"{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": 1}}}",
         "$.zero_optimization.offload_optimizer.pin_memory: expected true or false"},
        {"{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 1.5}}}",
         "ratio: expected a number in [0, 1]"},
        {"{\"train_batch_size\": -4, \"train_micro_batch_size_per_gpu\": 1}", "Train batch size: -4 has to be greater than 0"},
        {"{\"train_micro_batch_size_per_gpu\": 0}", "Micro batch size per gpu: 0 has to be greater than 0"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": -1}",
         "Gradient accumulation steps: -1 has to be greater than 0"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": -1}", "$.gradient_clipping: expected a number >= 0"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"fp16\": {\"enabled\": true, \"initial_scale_power\": 100}}",
         "$.fp16.initial_scale_power: expected an integer in [0, 64]"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"fp16\": {\"enabled\": true, \"hysteresis\": 0}}",
         "$.fp16.hysteresis: expected an integer in [1, 2147483647]"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"fp16\": {\"enabled\": true, \"min_loss_scale\": 0}}",
         "$.fp16.min_loss_scale: expected a number > 0"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"fp16\": {\"enabled\": true, \"loss_scale\": -1}}",
         "$.fp16.loss_scale: expected a number >= 0"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"fp16\": {\"enabled\": true, \"consecutive_hysteresis\": \"no\"}}",
         "$.fp16.consecutive_hysteresis: expected true or false"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0}}}",
         "$.optimizer.params.lr: expected a number > 0 or \"auto\", got 0"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": -1e-4}}}",
         "$.optimizer.params.lr: expected a number > 0"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"eps\": 0}}}",
         "$.optimizer.params.eps: expected a number > 0"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"weight_decay\": -0.1}}}",
         "$.optimizer.params.weight_decay: expected a number >= 0"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [1.2, 0.9]}}}",
         "$.optimizer.params.betas: expected two numbers in [0, 1)"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_max_lr\": 0}}}",
         "$.scheduler.params.warmup_max_lr: expected a number > 0"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 2.5}}}",
         "$.scheduler.params.warmup_num_steps: expected an integer >= 1"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": 0}}}",
         "$.scheduler.params.total_num_steps: expected an integer >= 1"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
         "{\"total_num_steps\": 10, \"warmup_num_steps\": 100}}}",
         "$.scheduler.params: total_num_steps 10 is less than warmup_num_steps 100"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"cos_min_ratio\": 2}}}",
         "$.scheduler.params.cos_min_ratio: expected a number in [0, 1]"},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_type\": \"cosine\"}}}",
         "$.scheduler.params.warmup_type: expected \"log\" or \"linear\", got \"cosine\""},
        {"{\"train_micro_batch_size_per_gpu\": 1, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
         "{\"warmup_min_lr\": 0.1, \"warmup_max_lr\": 0.01}}}",
         "warmup_min_lr 0.1 exceeds warmup_max_lr 0.01"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_error(cases[i].json, 1, cases[i].needle);
    /* the batch mismatch says which dtplan flag to change */
    expect_error("{\"train_batch_size\": 30, \"train_micro_batch_size_per_gpu\": 4}", 2,
                 "30 != 4 * 3 * 2 (world_size is dtplan's --gpus 2: set the config's train_batch_size to 24 or "
                 "\"auto\", or change --gpus)");
    expect_error("{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2}", 4,
                 "64 != 4 * 2 * 4 (world_size is dtplan's --gpus: use --gpus 8 with this config, or set its "
                 "train_batch_size to 32 or \"auto\")");
    /* in range is accepted: zero-sized stage-3 counts are DeepSpeed's own limits (ge=0) */
    dt_plan p;
    dt_error e = {0};
    plan_for(&p, "gpt2", 1);
    CHECK(import("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, "
                 "\"stage3_prefetch_bucket_size\": 0, \"sub_group_size\": 0, \"contiguous_gradients\": false}, "
                 "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 64, \"min_loss_scale\": 0.5}}", &p, &e) == 0);
}

static void test_accepted_forms(void) {
    dt_plan p;
    dt_error e = {0};
    dt_dsconfig c;
    /* aliases, 5e8-style integral floats, deprecated cpu_offload, unknown top-level key */
    const char *cfg = "{\"train_micro_batch_size_per_gpu\": 1, \"my_note\": 1, \"zero_optimization\": "
                      "{\"stage\": 2, \"cpu_offload\": true, \"reduce_bucket_size\": 5e7, "
                      "\"overlap_comm\": false}}";
    CHECK(dt_dsconfig_parse(cfg, "cfg", &c, &e) == 0);
    CHECK(c.offload_optimizer == DT_OFFLOAD_CPU);
    CHECK(c.notes.n == 2); /* the unknown top-level key, the deprecated spelling */
    plan_for(&p, "gpt2", 1);
    CHECK(dt_dsconfig_apply(&c, &p, NULL, &e) == 0);
    CHECK_EQ_I64(p.parallel.reduce_bucket_elems, 50000000);
    CHECK(p.parallel.overlap_comm == 0);
    CHECK(p.precision.preset == DT_PREC_FP32); /* neither bf16 nor fp16: fp32 */
    CHECK_NEAR(p.optimizer.grad_clip, 0.0, 0); /* DeepSpeed's code default: off */
    /* fp16 without any scaler key: DeepSpeed's class defaults (2^32, hysteresis 1) */
    plan_for(&p, "gpt2", 1);
    CHECK(import("{\"train_micro_batch_size_per_gpu\": 1, \"fp16\": {\"enabled\": true}}", &p, &e) == 0);
    CHECK(p.precision.preset == DT_PREC_MIXED_FP16);
    CHECK(p.precision.initial_scale_power == 32 && p.precision.hysteresis == 1);
    /* stage 3 without overlap_comm: DeepSpeed turns it on */
    plan_for(&p, "gpt2", 1);
    CHECK(import("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, "
                 "\"stage3_max_live_parameters\": 3e8, \"sub_group_size\": 1e8}}", &p, &e) == 0);
    CHECK(p.parallel.overlap_comm == 1);
    CHECK_EQ_I64(p.parallel.max_live_params, 300000000);
    CHECK_EQ_I64(p.parallel.sub_group_elems, 100000000);
    /* 0 (DeepSpeed's ge=0): every parameter its own sub-group; a fraction is refused */
    plan_for(&p, "gpt2", 1);
    CHECK(import("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, "
                 "\"sub_group_size\": 0}}", &p, &e) == 0);
    CHECK_EQ_I64(p.parallel.sub_group_elems, 0);
    plan_for(&p, "gpt2", 1);
    CHECK(import("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, "
                 "\"sub_group_size\": 1.5}}", &p, &e) != 0);
    CHECK(strstr(e.msg, "sub_group_size") != NULL);
}

/* DeepSpeed docs (memory.rst), t5-3b: _all_cold(total_params=2851e6,
 * largest_layer_params=32e6, num_gpus_per_node=8, num_nodes=1) */
static void test_deepspeed_estimators(void) {
    char buf[2048];
    dt_ds_format_zero3_cold(2851000000LL, 32000000LL, 8, 1, buf, sizeof buf);
    const char *z3 =
        "Estimated memory needed for params, optim states and gradients for a:\n"
        "HW: Setup with 1 node, 8 GPUs per node.\n"
        "SW: Model with 2851M total params, 32M largest layer params.\n"
        "  per CPU  |  per GPU |   Options\n"
        "   71.69GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1\n"
        "  127.45GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0\n"
        "   63.72GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=1\n"
        "  127.45GB |   0.78GB | offload_param=none, offload_optimizer=cpu , zero_init=0\n"
        "    1.43GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=1\n"
        "  127.45GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=0\n";
    CHECK_STR(buf, z3);
    dt_ds_format_zero2_cold(2851000000LL, 8, 1, buf, sizeof buf);
    const char *z2 =
        "Estimated memory needed for params, optim states and gradients for a:\n"
        "HW: Setup with 1 node, 8 GPUs per node.\n"
        "SW: Model with 2851M total params.\n"
        "  per CPU  |  per GPU |   Options\n"
        "  127.45GB |   5.31GB | offload_optimizer=cpu \n"
        "  127.45GB |  11.28GB | offload_optimizer=none\n";
    CHECK_STR(buf, z2);
    /* the docs' 15.93GB is the pre-#5099 ZeRO-2 line */
    CHECK_NEAR((double)dt_ds_zero2_gpu_legacy(2851000000LL, 8) / 1073741824.0, 15.93, 0.005 / 15.93);
    /* DeepSpeed issue #4527: 6805M total, 131M largest layer, 4 GPUs -> 0.49 / 3.66 / 29.01 per GPU */
    int64_t cpu, gpu;
    dt_ds_zero3_mem(6805000000LL, 131000000LL, 4, 1, 1, 1, 1, DT_DS_BUFFER_FACTOR, &cpu, &gpu);
    CHECK_NEAR((double)gpu / 1073741824.0, 0.49, 0.01);
    CHECK_NEAR((double)cpu / 1073741824.0, 171.13, 0.0001);
    dt_ds_zero3_mem(6805000000LL, 131000000LL, 4, 1, 1, 0, 1, DT_DS_BUFFER_FACTOR, &cpu, &gpu);
    CHECK_NEAR((double)gpu / 1073741824.0, 3.66, 0.002);
    CHECK_NEAR((double)cpu / 1073741824.0, 152.11, 0.0001);
    dt_ds_zero3_mem(6805000000LL, 131000000LL, 4, 1, 0, 0, 1, DT_DS_BUFFER_FACTOR, &cpu, &gpu);
    CHECK_NEAR((double)gpu / 1073741824.0, 29.01, 0.0005);
    CHECK_NEAR((double)cpu / 1073741824.0, 2.93, 0.002);
    /* a truncated buffer stays NUL-terminated */
    char small[16];
    size_t n = dt_ds_format_zero2_cold(2851000000LL, 8, 1, small, sizeof small);
    CHECK(n == sizeof small - 1 && small[sizeof small - 1] == '\0');
}

/* Issue 17: the deepspeed runtime profile reads stage3_max_reuse_distance and the persistence
 * threshold ("auto": HF's 10 x hidden), both spellings; the dtrun profile leaves them out. */
static void test_runtime_keys(void) {
    dt_plan p;
    dt_error e = {0};
    dt_dsconfig c;
    const char *cfg = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, "
                      "\"stage3_max_reuse_distance\": 2e8, \"stage3_param_persistence_threshold\": \"auto\"}}";
    plan_for(&p, "gpt2", 1);
    CHECK(dt_dsconfig_parse(cfg, "cfg.json", &c, &e) == DT_OK);
    CHECK(dt_dsconfig_apply(&c, &p, NULL, &e) == DT_OK);
    CHECK(dt_dsconfig_apply_runtime(&c, &p, NULL, &e) == DT_OK);   /* dtrun: nothing to set */
    CHECK_EQ_I64(p.runtime.max_reuse_distance, 0);
    dt_plan_set_runtime(&p, DT_RUNTIME_DEEPSPEED);
    dt_ds_notes notes = {0};
    CHECK(dt_dsconfig_apply_runtime(&c, &p, &notes, &e) == DT_OK);
    CHECK_EQ_I64(p.runtime.max_reuse_distance, 200000000);
    CHECK_EQ_I64(p.runtime.persistence_threshold, 10 * 768);
    CHECK(notes.n == 1 && strstr(notes.line[0], "10 x hidden = 7680") != NULL);
    CHECK(dt_dsconfig_parse("{\"zero_optimization\": {\"stage\": 3, \"max_reuse_distance\": 5}}", "c", &c, &e) ==
          DT_OK);
    CHECK(c.reuse_distance.state == DT_DS_SET && c.reuse_distance.value == 5);
    expect_error("{\"zero_optimization\": {\"stage\": 3, \"stage3_max_reuse_distance\": -1}}", 1,
                 "$.zero_optimization.stage3_max_reuse_distance: expected an integer >= 0");
    expect_error("{\"zero_optimization\": {\"stage\": 3, \"stage3_max_reuse_distance\": 1, \"max_reuse_distance\": 2}}",
                 1, "given twice");
}

/* DeepSpeed's offload_optimizer.ratio and ZeRO++'s keys reach the deepspeed runtime; the
 * dtrun runtime and configurations where DeepSpeed ignores them say so in a note; an hpZ
 * size that does not divide the world is refused as DeepSpeed refuses it. */
static int apply_both(const char *cfg, dt_plan *p, int64_t gpus, dt_runtime_kind kind, dt_ds_notes *notes,
                      dt_error *e) {
    dt_dsconfig c;
    plan_for(p, "gpt2", gpus);
    CHECK(dt_hardware_load("H100-SXM-80GB", NULL, &p->cluster.hw, e) == DT_OK);
    p->cluster.device = p->cluster.hw.device;
    p->runtime.kind = kind;   /* as dtplan estimate has it when the config is applied */
    memset(notes, 0, sizeof *notes);
    int rc = dt_dsconfig_parse(cfg, "cfg.json", &c, e);
    if (!rc) rc = dt_dsconfig_apply(&c, p, notes, e);
    if (!rc && kind != DT_RUNTIME_DTRUN) {
        dt_plan_set_runtime(p, kind);
        rc = dt_dsconfig_apply_runtime(&c, p, notes, e);
    }
    if (rc) fprintf(stderr, "(%s: %s)\n", cfg, e->msg);
    return rc;
}

static int has_note(const dt_ds_notes *n, const char *needle) {
    for (int i = 0; i < n->n; i++)
        if (strstr(n->line[i], needle)) return 1;
    return 0;
}

static void test_zeropp_keys(void) {
    dt_plan p;
    dt_error e = {0};
    dt_ds_notes notes;
    const char *cfg = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, "
                      "\"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.3}, \"zero_hpz_partition_size\": 8, "
                      "\"zero_quantized_weights\": true, \"zero_quantized_gradients\": true}}";
    CHECK(apply_both(cfg, &p, 16, DT_RUNTIME_DEEPSPEED, &notes, &e) == DT_OK);
    CHECK(p.runtime.offload_ratio == 0.3 && p.runtime.hpz_partition == 8);
    CHECK(p.runtime.quantized_weights == 1 && p.runtime.quantized_gradients == 1);
    if (dt_plan_validate(&p, &e)) fprintf(stderr, "validate: %s\n", e.msg);
    CHECK(dt_plan_validate(&p, &e) == DT_OK);
    /* dtrun: the plan keeps none of it, the notes say why */
    CHECK(apply_both(cfg, &p, 16, DT_RUNTIME_DTRUN, &notes, &e) == DT_OK);
    CHECK(p.runtime.offload_ratio == 0 && p.runtime.hpz_partition == 0 && !p.runtime.quantized_weights);
    CHECK(has_note(&notes, "offload_optimizer.ratio 0.3: DeepSpeed's partial offload; dtrun's engine"));
    CHECK(has_note(&notes, "ZeRO++; dtrun's engine has none of it"));
    /* ZeRO++ at stage 2 and a ratio without a CPU-offloaded optimizer: DeepSpeed ignores them */
    CHECK(apply_both("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 2, \"zero_hpz_partition_size\": 8}}", &p, 16,
                     DT_RUNTIME_DEEPSPEED, &notes, &e) == DT_OK);
    CHECK(p.runtime.hpz_partition == 1 && has_note(&notes, "ignored at stage 2"));
    CHECK(apply_both("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"none\", "
                     "\"ratio\": 0.5}}}", &p, 16, DT_RUNTIME_DEEPSPEED, &notes, &e) == DT_OK);
    CHECK(p.runtime.offload_ratio == 1.0 && has_note(&notes, "with offload_optimizer none it has no effect"));
    /* refused as DeepSpeed refuses them */
    CHECK(apply_both("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, \"zero_hpz_partition_size\": 3}}", &p, 16,
                     DT_RUNTIME_DEEPSPEED, &notes, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "zero_hpz_partition_size 3 does not divide the world size 16") != NULL);
    expect_error("{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_weights\": 1}}", 1,
                 "zero_quantized_weights");
    expect_error("{\"zero_optimization\": {\"stage\": 3, \"zero_hpz_partition_size\": -2}}", 1,
                 "zero_hpz_partition_size");
    expect_error("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", "
                 "\"ratio\": 0.5}}}", 1, "Partial offloading only supported for ZeRO Stage 3.");
    /* the gradients' collective and dtype: modelled at stages 1-2 (all-reduce) and at every stage (dtype) */
    CHECK(apply_both("{\"train_micro_batch_size_per_gpu\": 1, \"communication_data_type\": \"FP32\", "
                     "\"zero_optimization\": {\"stage\": 2, \"reduce_scatter\": false}}", &p, 16,
                     DT_RUNTIME_DEEPSPEED, &notes, &e) == DT_OK);
    CHECK(p.runtime.grads_allreduce == 1 && p.runtime.comm_dtype_set && p.runtime.comm_dtype == DT_DTYPE_FP32);
    CHECK(dt_plan_validate(&p, &e) == DT_OK);
    CHECK(apply_both("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, "
                     "\"reduce_scatter\": false}}", &p, 16, DT_RUNTIME_DEEPSPEED, &notes, &e) == DT_OK);
    CHECK(p.runtime.grads_allreduce == 0 && has_note(&notes, "reduce_scatter false: no effect at stage 3"));
    CHECK(apply_both("{\"train_micro_batch_size_per_gpu\": 1, \"communication_data_type\": \"bf16\"}", &p, 16,
                     DT_RUNTIME_DTRUN, &notes, &e) == DT_OK);
    CHECK(!p.runtime.comm_dtype_set && has_note(&notes, "dtrun's engine reduce-scatters in the gradient dtype"));
    expect_error("{\"train_micro_batch_size_per_gpu\": 1, \"communication_data_type\": \"int8\"}", 1,
                 "Invalid communication_data_type. Supported data types: ['fp16', 'bf16', 'fp32']. Got: int8");
}

/* Keys DeepSpeed acts on that the planner does not model: a note each when set away from
 * DeepSpeed's default, none at the default (nothing the user wrote is dropped silently). */
static void test_unmodelled_notes(void) {
    dt_dsconfig c;
    dt_error e = {0};
    const char *cfg =
        "{\"train_micro_batch_size_per_gpu\": 1, \"communication_data_type\": \"fp32\", "
        "\"data_types\": {\"grad_accum_dtype\": \"fp32\"}, \"activation_checkpointing\": {\"cpu_checkpointing\": true}, "
        "\"zero_optimization\": {\"stage\": 3, \"reduce_scatter\": false, \"mics_shard_size\": 8, "
        "\"stage3_use_all_reduce_for_fetch_params\": true, \"offload_optimizer\": {\"device\": \"cpu\"}}}";
    CHECK(dt_dsconfig_parse(cfg, "cfg.json", &c, &e) == DT_OK);
    static const char *const want[] = {
        "$.zero_optimization.mics_shard_size 8: not modelled: MiCS",
        "$.zero_optimization.stage3_use_all_reduce_for_fetch_params true: not modelled",
        "$.data_types.grad_accum_dtype \"fp32\": not modelled",
        "$.activation_checkpointing.cpu_checkpointing true: not modelled",
        "$.zero_optimization.offload_optimizer.pin_memory off (DeepSpeed's default)"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!has_note(&c.notes, want[i])) fprintf(stderr, "missing note: %s\n", want[i]);
        CHECK(has_note(&c.notes, want[i]));
    }
    CHECK_EQ_I64(c.notes.n, (int64_t)(sizeof want / sizeof want[0]));   /* reduce_scatter, the comm dtype: modelled */
    CHECK(c.reduce_scatter_off && c.comm_dtype_set && c.comm_dtype == DT_DTYPE_FP32);
    /* DeepSpeed's defaults written out, and a pinned offload: no note */
    CHECK(dt_dsconfig_parse("{\"train_micro_batch_size_per_gpu\": 1, \"communication_data_type\": null, "
                            "\"zero_optimization\": {\"stage\": 3, \"reduce_scatter\": true, \"mics_shard_size\": -1, "
                            "\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}}}",
                            "cfg.json", &c, &e) == DT_OK);
    CHECK_EQ_I64(c.notes.n, 0);
}

int main(void) {
    test_runtime_keys();
    test_zeropp_keys();
    test_unmodelled_notes();
    test_seed_configs();
    test_batch_inference();
    test_rejections();
    test_ranges();
    test_accepted_forms();
    test_deepspeed_estimators();
    TEST_MAIN_END();
}
