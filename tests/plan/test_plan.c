/* test_plan.c — plan.json: round-trip, every rejection path, atomic save,
 * configs/plans/tiny-cpu.json, the model's RoPE scaling. */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_json.h"
#include "dt_model.h"
#include "dt_plan.h"
#include "dt_test.h"

/* A small but complete plan: gpt2-tiny, 1 node x 2 ranks, stage 2, every section set. */
static void base_plan(dt_plan *p) {
    dt_error err;
    dt_plan_defaults(p);
    if (dt_model_resolve("gpt2-tiny", &p->model, &err)) {
        fprintf(stderr, "cannot resolve gpt2-tiny: %s\n", err.msg);
        exit(1);
    }
    p->cluster.gpus_per_node = 2;
    p->parallel.world_size = 2;
    p->parallel.zero_stage = 2;
    p->batch.micro_batch = 4;
    p->batch.grad_accum = 3;
    p->batch.global_batch = 24;
    p->batch.seq_len = 64;
    p->activations.ckpt_layers = 1;
    p->optimizer.lr = 3e-4;   /* prints as 0.0003 */
    p->optimizer.eps = 1e-8;
    p->schedule.kind = DT_SCHED_WARMUP_COSINE_LR;
    p->schedule.warmup_min_lr = 0.1;
    p->prediction.valid = 1;
    p->prediction.memory.params = 123456;
    p->prediction.memory.total = 987654321;
    p->prediction.time.step_s = 0.123456789012345678;  /* needs 17 digits */
    p->prediction.time.mfu = 1.0 / 3.0;
    p->prediction.comm_bytes[DT_COLL_REDUCE_SCATTER] = 1 << 20;
}

/* Returns the base plan's JSON text with one change: key path "a.b.c" set to the
 * JSON literal value (added if missing), or deleted when value is NULL. */
static char *mutate(const char *text, const char *path, const char *value) {
    cJSON *root = cJSON_Parse(text);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    cJSON *obj = root;
    char *key = buf, *dot;
    while ((dot = strchr(key, '.'))) {
        *dot = '\0';
        obj = cJSON_GetObjectItemCaseSensitive(obj, key);
        if (!obj) {
            fprintf(stderr, "mutate: no object '%s' in %s\n", key, path);
            exit(1);
        }
        key = dot + 1;
    }
    if (!value) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    } else {
        cJSON *v = cJSON_Parse(value);
        if (!v) {
            fprintf(stderr, "mutate: bad literal %s\n", value);
            exit(1);
        }
        if (cJSON_GetObjectItemCaseSensitive(obj, key))
            cJSON_ReplaceItemInObjectCaseSensitive(obj, key, v);
        else
            cJSON_AddItemToObject(obj, key, v);
    }
    char *out = dt_json_print(root);
    cJSON_Delete(root);
    return out;
}

/* Parsing text must fail with DT_EINVAL and a message containing want. */
static void expect_reject(const char *text, const char *want, const char *what) {
    dt_plan p;
    dt_error err = {0};
    int rc = dt_plan_parse(text, &p, &err);
    if (rc != DT_EINVAL || !strstr(err.msg, want)) {
        fprintf(stderr, "reject [%s]: rc %d msg \"%s\"\n   wanted \"%s\"\n", what, rc, err.msg, want);
        dt_test_failures++;
    }
    if (strchr(err.msg, '\n')) {
        fprintf(stderr, "reject [%s]: message is not one line\n", what);
        dt_test_failures++;
    }
}

static void expect_mut_reject(const char *base, const char *path, const char *value,
                              const char *want) {
    char *t = mutate(base, path, value);
    expect_reject(t, want, path);
    free(t);
}

static void expect_mut_accept(const char *base, const char *path, const char *value,
                              dt_plan *out) {
    char *t = mutate(base, path, value);
    dt_error err = {0};
    if (dt_plan_parse(t, out, &err)) {
        fprintf(stderr, "accept [%s = %s]: %s\n", path, value ? value : "(deleted)", err.msg);
        dt_test_failures++;
    }
    free(t);
}

static void test_round_trip(void) {
    dt_plan p0, p1, p2;
    dt_error err = {0};
    base_plan(&p0);
    CHECK_EQ_I64(dt_plan_validate(&p0, &err), 0);
    char *t0 = dt_plan_to_json(&p0, &err);
    CHECK(t0 != NULL);
    if (!t0) {
        fprintf(stderr, "to_json: %s\n", err.msg);
        return;
    }
    CHECK_EQ_I64(dt_plan_parse(t0, &p1, &err), 0);
    char *t1 = dt_plan_to_json(&p1, &err);
    CHECK_EQ_I64(dt_plan_parse(t1, &p2, &err), 0);
    CHECK_STR(t0, t1);                              /* identical text */
    CHECK(memcmp(&p1, &p2, sizeof p1) == 0);        /* equal struct after one read */
    /* field by field against what was written (p0 may hold bytes past a string's NUL) */
    CHECK_STR(p1.model.name, p0.model.name);
    CHECK_EQ_I64(p1.model.n_layer, 2);
    CHECK_EQ_I64(p1.model.hidden, 64);
    CHECK_EQ_I64(p1.model.vocab, 256);
    CHECK(p1.model.norm_eps == p0.model.norm_eps);
    CHECK_STR(p1.cluster.hw.name, p0.cluster.hw.name);
    CHECK(memcmp(p1.cluster.hw.peak_flops, p0.cluster.hw.peak_flops, sizeof p0.cluster.hw.peak_flops) == 0);
    CHECK(p1.cluster.hw.inter_alpha_s == p0.cluster.hw.inter_alpha_s);
    CHECK_EQ_I64(p1.cluster.hw.device_mem_bytes, p0.cluster.hw.device_mem_bytes);
    CHECK_EQ_I64(p1.parallel.zero_stage, 2);
    CHECK_EQ_I64(p1.parallel.reduce_bucket_elems, 500000000);
    CHECK_EQ_I64(p1.parallel.prefetch_bucket_elems, 50000000);
    CHECK_EQ_I64(p1.batch.global_batch, 24);
    CHECK_EQ_I64(p1.activations.ckpt_layers, 1);
    CHECK(p1.precision.preset == DT_PREC_MIXED_BF16 && p1.precision.has_master == 1);
    CHECK(p1.optimizer.lr == 3e-4 && p1.optimizer.eps == 1e-8);
    CHECK(p1.schedule.kind == DT_SCHED_WARMUP_COSINE_LR && p1.schedule.warmup_linear == 1);
    CHECK(p1.schedule.warmup_min_lr == 0.1);
    CHECK_STR(p1.data.train, "/usr/share/games/fortunes");
    CHECK(p1.data.seed == p0.data.seed);
    CHECK(p1.prediction.valid == 1);
    CHECK(p1.prediction.time.step_s == p0.prediction.time.step_s);  /* exact, 17 digits */
    CHECK(p1.prediction.time.mfu == p0.prediction.time.mfu);
    CHECK_EQ_I64(p1.prediction.comm_bytes[DT_COLL_REDUCE_SCATTER], 1 << 20);
    /* readable numbers */
    CHECK(strstr(t0, "\"lr\": 0.0003,") != NULL);
    CHECK(strstr(t0, "\"reduce_bucket_elems\": 500000000,") != NULL);
    CHECK(strstr(t0, "\"format\": \"dtplan.plan/1\"") != NULL);
    CHECK(strstr(t0, "\"preset\": \"mixed-bf16\"") != NULL);
    CHECK(strstr(t0, "\"kind\": \"WarmupCosineLR\"") != NULL);
    CHECK(strstr(t0, "\"attention\": \"flash\"") != NULL);

    /* a plan without a prediction: absent section reads as valid = 0 */
    char *t = mutate(t0, "prediction", NULL);
    CHECK_EQ_I64(dt_plan_parse(t, &p1, &err), 0);
    CHECK_EQ_I64(p1.prediction.valid, 0);
    CHECK_EQ_I64(p1.prediction.memory.total, 0);
    free(t);
    /* {"valid": false} alone is fine too; valid = true needs every sub-object */
    t = mutate(t0, "prediction", "{\"valid\": false}");
    CHECK_EQ_I64(dt_plan_parse(t, &p1, &err), 0);
    CHECK_EQ_I64(p1.prediction.valid, 0);
    free(t);
    expect_mut_reject(t0, "prediction", "{\"valid\": true, \"memory\": {}}",
                      "$.prediction.memory.params: missing required key");
    expect_mut_reject(t0, "prediction.time", NULL, "$.prediction.time: missing required key");
    /* integral doubles read as integers (DeepSpeed writes 5e8) */
    expect_mut_accept(t0, "parallel.reduce_bucket_elems", "5e8", &p1);
    CHECK_EQ_I64(p1.parallel.reduce_bucket_elems, 500000000);
    /* bytes_per_param is derived and optional */
    expect_mut_accept(t0, "precision.bytes_per_param", NULL, &p1);

    free(t0);
    free(t1);
}

static void test_rejections(void) {
    dt_plan p;
    dt_error err = {0};
    base_plan(&p);
    char *t0 = dt_plan_to_json(&p, &err);
    CHECK(t0 != NULL);
    if (!t0) return;

    /* unknown keys, at every level, named by path */
    expect_mut_reject(t0, "batch.micro_bach", "4", "$.batch.micro_bach: unknown key (allowed here: micro_batch");
    expect_mut_reject(t0, "extra", "1", "$.extra: unknown key");
    expect_mut_reject(t0, "cluster.hardware.peak_flops.int8", "1", "$.cluster.hardware.peak_flops.int8: unknown key");
    expect_mut_reject(t0, "prediction.time.wall_s", "1", "$.prediction.time.wall_s: unknown key");
    /* missing keys and sections */
    expect_mut_reject(t0, "batch.seq_len", NULL, "$.batch.seq_len: missing required key");
    expect_mut_reject(t0, "optimizer", NULL, "$.optimizer: missing required key");
    expect_mut_reject(t0, "format", NULL, "$.format: missing required key");
    expect_mut_reject(t0, "cluster.hardware.nvme_bytes", NULL, "$.cluster.hardware.nvme_bytes: missing required key");
    /* wrong types */
    expect_mut_reject(t0, "batch.micro_batch", "\"4\"", "$.batch.micro_batch: expected a positive integer, got \"4\"");
    expect_mut_reject(t0, "batch.micro_batch", "2.5", "$.batch.micro_batch: expected a positive integer, got 2.5");
    expect_mut_reject(t0, "batch.micro_batch", "0", "$.batch.micro_batch: expected a positive integer, got 0");
    expect_mut_reject(t0, "batch.micro_batch", "1e300", "$.batch.micro_batch: expected a positive integer");
    expect_mut_reject(t0, "activations.ckpt_layers", "-1", "$.activations.ckpt_layers: expected a non-negative integer, got -1");
    expect_mut_reject(t0, "parallel.overlap_comm", "1", "$.parallel.overlap_comm: expected true or false, got 1");
    expect_mut_reject(t0, "optimizer.lr", "\"3e-4\"", "$.optimizer.lr: expected a positive number, got \"3e-4\"");
    expect_mut_reject(t0, "optimizer.beta2", "1", "$.optimizer.beta2: expected a number in [0, 1), got 1");
    expect_mut_reject(t0, "model", "[]", "$.model: expected an object, got []");
    /* data.train "" (or absent): the plan names no training data, which is valid (dtrun asks for --data) */
    expect_mut_reject(t0, "data.train", "7", "$.data.train: expected a string");
    {
        dt_plan nd;
        dt_error e = {0};
        const char *how[2] = {"\"\"", NULL};   /* "" and the key deleted: the same plan */
        for (int k = 0; k < 2; k++) {
            expect_mut_accept(t0, "data.train", how[k], &nd);
            CHECK(nd.data.train[0] == '\0');
            CHECK_EQ_I64(dt_plan_validate(&nd, &e), 0);
            char *j = dt_plan_to_json(&nd, &e);   /* written without the key */
            CHECK(j && !strstr(j, "\"train\""));
            free(j);
        }
        /* the demo text stays for a byte-level model, leaves for a real vocabulary; a named path stays */
        dt_plan d;
        dt_plan_defaults(&d);
        d.model.vocab = 256;
        dt_plan_drop_demo_data(&d);
        CHECK(!strcmp(d.data.train, "/usr/share/games/fortunes"));
        d.model.vocab = 151936;
        dt_plan_drop_demo_data(&d);
        CHECK(d.data.train[0] == '\0');
        snprintf(d.data.train, sizeof d.data.train, "/data/mine");
        dt_plan_drop_demo_data(&d);
        CHECK(!strcmp(d.data.train, "/data/mine"));
    }
    expect_mut_reject(t0, "data.seed", "9007199254740994", "$.data.seed: expected an integer in [0, 9007199254740992]");
    /* bad enums, by name */
    expect_mut_reject(t0, "precision.preset", "\"bf16-mixed\"", "$.precision.preset: expected one of \"mixed-bf16\", \"mixed-fp16\", \"pure-bf16\", \"fp32\", got \"bf16-mixed\"");
    expect_mut_reject(t0, "parallel.offload_optimizer", "\"gpu\"", "$.parallel.offload_optimizer: expected one of \"none\", \"cpu\", \"nvme\", got \"gpu\"");
    expect_mut_reject(t0, "cluster.device", "\"CUDA\"", "$.cluster.device: expected one of \"cpu\", \"cuda\"");
    expect_mut_reject(t0, "activations.attention", "\"sdpa\"", "$.activations.attention: expected one of \"flash\", \"materialized\"");
    expect_mut_reject(t0, "schedule.kind", "\"cosine\"", "$.schedule.kind: expected one of \"constant\", \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\"");
    expect_mut_reject(t0, "model.family", "\"bert\"", "$.model.family: expected one of \"gpt2\", \"llama\"");
    expect_mut_reject(t0, "format", "\"dtplan.plan/2\"", "$.format: expected \"dtplan.plan/1\", got \"dtplan.plan/2\"");
    /* the batch triple, in DeepSpeed's words (deepspeed/runtime/config.py) */
    expect_mut_reject(t0, "batch.global_batch", "30",
                      "Check batch related parameters. train_batch_size is not equal to "
                      "micro_batch_per_gpu * gradient_acc_step * world_size 30 != 4 * 3 * 2");
    /* world size, stage and offload rules */
    expect_mut_reject(t0, "parallel.world_size", "4", "parallel.world_size 4 != cluster.nodes 1 x cluster.gpus_per_node 2");
    expect_mut_reject(t0, "parallel.zero_stage", "4", "Maximum supported ZeRO stage is 3");
    /* no made-up bound in the message ("expected an integer in [0, 1000]" before) */
    expect_mut_reject(t0, "parallel.zero_stage", "-1", "$.parallel.zero_stage: expected a non-negative integer, got -1");
    expect_mut_reject(t0, "parallel.zero_stage", "1e12",
                      "$.parallel.zero_stage: Maximum supported ZeRO stage is 3 (got 1000000000000)");
    expect_mut_reject(t0, "parallel.offload_param", "\"cpu\"", "parallel.offload_param = cpu needs zero_stage 3");
    expect_mut_reject(t0, "parallel.offload_optimizer", "\"nvme\"", "parallel.offload_optimizer = nvme needs zero_stage 3");
    {
        char *s0 = mutate(t0, "parallel.zero_stage", "0");
        expect_mut_reject(s0, "parallel.offload_optimizer", "\"cpu\"", "needs ZeRO stage 1, 2 or 3");
        free(s0);
        char *s3 = mutate(t0, "parallel.zero_stage", "3");
        expect_mut_reject(s3, "parallel.offload_param", "\"nvme\"", "parallel.nvme_path is empty but NVMe offload is on");
        char *s3n = mutate(s3, "parallel.nvme_path", "\"/local_nvme\"");
        char *s3o = mutate(s3n, "parallel.offload_optimizer", "\"nvme\"");
        expect_mut_accept(s3o, "parallel.offload_param", "\"nvme\"", &p);
        CHECK(p.parallel.offload_param == DT_OFFLOAD_NVME && p.parallel.offload_optimizer == DT_OFFLOAD_NVME);
        free(s3);
        free(s3n);
        free(s3o);
    }
    expect_mut_reject(t0, "activations.ckpt_layers", "3", "activations.ckpt_layers = 3 must be in [0, model.n_layer = 2]");
    expect_mut_reject(t0, "batch.seq_len", "128", "batch.seq_len 128 exceeds model.max_pos 64");
    expect_mut_reject(t0, "model.n_head", "5", "model");    /* dt_model_validate: heads must divide */
    /* precision consistency */
    expect_mut_reject(t0, "precision.param", "\"fp32\"", "precision.param = fp32 does not match preset mixed-bf16");
    expect_mut_reject(t0, "precision.grad", "\"fp16\"", "bfloat16 and fp16 modes cannot be simultaneously enabled");
    expect_mut_reject(t0, "precision.has_master", "false", "precision.has_master = false contradicts preset mixed-bf16");
    /* keys that contradict each other are refused, naming both (issue 16) */
    expect_mut_reject(t0, "precision.bytes_per_param.optimizer", "8",
                      "$.precision.bytes_per_param.optimizer = 8 contradicts $.precision.master = \"fp32\" + 2 x "
                      "$.precision.moment = \"fp32\" (12 bytes per parameter, preset mixed-bf16)");
    expect_mut_reject(t0, "precision.bytes_per_param.param", "4",
                      "$.precision.bytes_per_param.param = 4 contradicts $.precision.param = \"bf16\" (2 bytes per "
                      "parameter, preset mixed-bf16)");
    expect_mut_reject(t0, "precision.loss_scale", "0",
                      "precision.loss_scale = 0, initial_scale_power = 0 contradict precision.preset = mixed-bf16");
    expect_mut_reject(t0, "precision.initial_scale_power", "16", "loss scaling applies only to fp16 params");
    {
        char *pb = mutate(t0, "precision.preset", "\"pure-bf16\"");
        char *pbn = mutate(pb, "precision.has_master", "false");
        expect_mut_reject(pbn, "precision.master", "\"fp32\"",
                          "precision.master = fp32 contradicts precision.has_master = false");
        free(pb);
        free(pbn);
    }
    /* gpt2 is always tied (HF GPT2LMHeadModel): an untied gpt2 plan is another model */
    expect_mut_reject(t0, "model.tied_embeddings", "false",
                      "tied_embeddings = false, but gpt2 always ties lm_head to wte");
    /* other cross-field rules */
    expect_mut_reject(t0, "cluster.hardware.device", "\"cuda\"", "cluster.device is cpu but hardware profile");
    expect_mut_reject(t0, "schedule.warmup_steps", "5000", "schedule.warmup_steps = 5000 must be in [0, total_steps");
    expect_mut_reject(t0, "data.tokenizer", "\"gpt2\"", "data.format \"text\" is tokenized by the byte tokenizer");
    expect_mut_reject(t0, "output.keep_last", "0", "$.output.keep_last: expected a positive integer, got 0");

    /* syntax: line:column, trailing garbage, duplicate keys, wrong root */
    expect_reject("{\n  \"format\": \"dtplan.plan/1\",\n  \"model\": [1, 2,]\n}", "plan:3:18: invalid JSON near ']", "syntax");
    expect_reject("{\"format\": \"dtplan.plan/1\"", "plan:1:27: invalid JSON: unexpected end of input", "eof");
    expect_reject("{} x", "plan:1:4: invalid JSON near 'x'", "trailing");
    expect_reject("", "plan:1:1: invalid JSON", "empty");
    expect_reject("[]", "$: expected an object, got []", "root");
    {
        /* a duplicate key inside a section */
        char *dup = malloc(strlen(t0) + 64);
        const char *at = strstr(t0, "\"seq_len\"");
        size_t head = (size_t)(at - t0);
        memcpy(dup, t0, head);
        strcpy(dup + head, "\"seq_len\": 64, ");
        strcat(dup, at);
        expect_reject(dup, "plan: $.batch.seq_len: duplicate key", "duplicate");
        free(dup);
    }
    /* validate() on structs built in code, not only on parsed text */
    base_plan(&p);
    p.parallel.zero_stage = 7;
    CHECK_EQ_I64(dt_plan_validate(&p, &err), DT_EINVAL);
    CHECK_STR(err.msg, "Maximum supported ZeRO stage is 3 (parallel.zero_stage = 7)");
    base_plan(&p);
    p.batch.micro_batch = 0;
    CHECK_EQ_I64(dt_plan_validate(&p, &err), DT_EINVAL);
    CHECK_STR(err.msg, "Micro batch size per gpu: 0 has to be greater than 0");
    base_plan(&p);
    p.cluster.nodes = 2;
    CHECK_EQ_I64(dt_plan_validate(&p, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "parallel.world_size 2 != cluster.nodes 2 x cluster.gpus_per_node 2") != NULL);
    free(t0);
}

static char *slurp(const char *path) {
    char *t = NULL;
    dt_error err;
    if (dt_json_read_file(path, &t, NULL, &err)) return NULL;
    return t;
}

static void test_atomic_save(void) {
    char dir[] = "/tmp/dt_plan_test_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], tmp[300];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    dt_plan p, q;
    dt_error err = {0};
    base_plan(&p);
    CHECK_EQ_I64(dt_plan_save(path, &p, &err), 0);
    char *before = slurp(path);
    CHECK(before != NULL);
    CHECK_EQ_I64(dt_plan_load(path, &q, &err), 0);
    CHECK_EQ_I64(q.batch.global_batch, 24);

    /* an invalid plan is not written at all */
    p.batch.global_batch = 30;
    CHECK_EQ_I64(dt_plan_save(path, &p, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "plan not written") != NULL);
    char *after = slurp(path);
    CHECK(before && after && strcmp(before, after) == 0);
    free(after);

    /* an I/O failure half way (the temporary name cannot be created) leaves the old file */
    p.batch.global_batch = 24;
    p.batch.micro_batch = 4;
    p.optimizer.lr = 1e-3;
    CHECK(mkdir(tmp, 0700) == 0);
    CHECK_EQ_I64(dt_plan_save(path, &p, &err), DT_EIO);
    CHECK(strstr(err.msg, "cannot create") != NULL);
    after = slurp(path);
    CHECK(before && after && strcmp(before, after) == 0);
    free(after);
    rmdir(tmp);

    /* and then the save goes through, leaving no temporary behind */
    CHECK_EQ_I64(dt_plan_save(path, &p, &err), 0);
    CHECK_EQ_I64(dt_plan_load(path, &q, &err), 0);
    CHECK(q.optimizer.lr == 1e-3);
    CHECK(access(tmp, F_OK) != 0);

    /* a directory that does not exist: error naming it, nothing created */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/missing/plan.json", dir);
    CHECK_EQ_I64(dt_plan_save(bad, &p, &err), DT_EIO);
    CHECK(strstr(err.msg, "missing/plan.json") != NULL);

    /* load errors name the file; a path that does not exist is the user's to fix */
    CHECK_EQ_I64(dt_plan_load(bad, &q, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "cannot open") != NULL);
    FILE *f = fopen(path, "w");
    fputs("{\n  \"format\": \"dtplan.plan/1\",\n  \"model\": 3\n}\n", f);
    fclose(f);
    CHECK_EQ_I64(dt_plan_load(path, &q, &err), DT_EINVAL);
    char want[400];
    snprintf(want, sizeof want, "%s: $.model: expected an object, got 3", path);
    CHECK_STR(err.msg, want);
    f = fopen(path, "w");
    fputs("{\n  \"format\": \"dtplan.plan/1\",\n  \"model\": {,}\n}\n", f);
    fclose(f);
    CHECK_EQ_I64(dt_plan_load(path, &q, &err), DT_EINVAL);
    /* the strict check (dt_json_validate) names the stray comma itself */
    snprintf(want, sizeof want, "%s:3:13: invalid JSON near ',}': expected a key in double quotes or '}'", path);
    CHECK_STR(err.msg, want);

    free(before);
    unlink(path);
    rmdir(dir);
}

/* Loads DT_SOURCE_DIR/rel and checks the file is in canonical form (exactly what
 * dtplan writes for the plan it holds). Returns 0 when it loaded. */
static int load_canonical(const char *rel, dt_plan *p) {
    const char *src = getenv("DT_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
    dt_error err = {0};
    if (dt_plan_load(path, p, &err)) {
        fprintf(stderr, "%s: %s\n", rel, err.msg);
        dt_test_failures++;
        return -1;
    }
    CHECK_EQ_I64(dt_plan_validate(p, &err), 0);
    char *file = slurp(path), *canon = dt_plan_to_json(p, &err);
    if (!file || !canon || strcmp(file, canon) != 0) {
        fprintf(stderr, "%s is not in canonical form (regenerate it with dt_plan_save)\n", rel);
        dt_test_failures++;
    }
    free(file);
    free(canon);
    return 0;
}

static void test_tiny_cpu(void) {
    dt_plan p;
    dt_error err = {0};
    if (load_canonical("configs/plans/tiny-cpu.json", &p)) return;
    CHECK_STR(p.model.name, "gpt2-tiny");
    CHECK(p.cluster.device == DT_DEVICE_CPU);
    CHECK_EQ_I64(p.cluster.nodes * p.cluster.gpus_per_node, 1);
    CHECK(p.precision.preset == DT_PREC_FP32 || p.precision.preset == DT_PREC_MIXED_BF16);
    CHECK_STR(p.data.train, "/usr/share/games/fortunes");
    CHECK_STR(p.data.format, "text");
    CHECK(p.schedule.total_steps >= 100 && p.schedule.total_steps <= 1000);
    /* the shape agrees with the catalog entry it names */
    dt_model m;
    CHECK_EQ_I64(dt_model_resolve("gpt2-tiny", &m, &err), 0);
    CHECK_EQ_I64(p.model.n_layer, m.n_layer);
    CHECK_EQ_I64(p.model.hidden, m.hidden);
    CHECK_EQ_I64(p.model.n_head, m.n_head);
    CHECK_EQ_I64(p.model.vocab, m.vocab);
    CHECK_EQ_I64(p.model.max_pos, m.max_pos);
    CHECK_EQ_I64(p.model.ffn, m.ffn);
}

/* The multi-node fixture the CLI tests use: canonical, with a stored prediction. */
static void test_fixture(void) {
    dt_plan p;
    if (load_canonical("tests/plan/fixtures/gpt2-2x4-zero3.json", &p)) return;
    CHECK(p.prediction.valid == 1);
    CHECK(p.prediction.time.step_s > 0);
    CHECK(p.parallel.zero_stage == 3 && p.parallel.offload_param == DT_OFFLOAD_CPU);
    CHECK(p.precision.preset == DT_PREC_MIXED_FP16);
}

static void test_names(void) {
    dt_offload o;
    dt_error err;
    CHECK_STR(dt_offload_name(DT_OFFLOAD_NVME), "nvme");
    CHECK_EQ_I64(dt_offload_parse("cpu", &o, &err), 0);
    CHECK(o == DT_OFFLOAD_CPU);
    CHECK_EQ_I64(dt_offload_parse("CPU", &o, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "'CPU'") != NULL);
    CHECK_STR(dt_collective_name(DT_COLL_ALLREDUCE), "allreduce");
    CHECK_STR(dt_collective_name(DT_COLL_REDUCE_SCATTER), "reduce_scatter");
    CHECK_STR(dt_collective_name(DT_COLL_ALLGATHER), "allgather");
    CHECK_STR(dt_collective_name(DT_COLL_BROADCAST), "broadcast");
}

/* $.model.rope_scaling: written only when not the default, HF's keys, each type's
 * parameters round-trip; read strictly; plans without it read as the default. */
static void test_rope_scaling(void) {
    dt_plan p0, p1, p2;
    dt_error err = {0};
    base_plan(&p0);
    if (dt_model_resolve("llama-3.1-8b", &p0.model, &err)) {
        fprintf(stderr, "llama-3.1-8b: %s\n", err.msg);
        dt_test_failures++;
        return;
    }
    p0.batch.seq_len = 1024;
    static const dt_rope_scaling cases[] = {
        {DT_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192},   /* Llama-3.1's */
        {DT_ROPE_LINEAR, 2.5, 0, 0, 0},
        {DT_ROPE_DYNAMIC, 1.75, 0, 0, 4096},
    };
    static const char *const texts[] = {
        "\"rope_scaling\": {\n      \"rope_type\": \"llama3\",\n      \"factor\": 8,\n      \"low_freq_factor\": 1,\n"
        "      \"high_freq_factor\": 4,\n      \"original_max_position_embeddings\": 8192\n    },",
        "\"rope_scaling\": {\n      \"rope_type\": \"linear\",\n      \"factor\": 2.5\n    },",
        "\"rope_scaling\": {\n      \"rope_type\": \"dynamic\",\n      \"factor\": 1.75,\n"
        "      \"original_max_position_embeddings\": 4096\n    },",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        p0.model.rope_scaling = cases[i];
        char *t0 = dt_plan_to_json(&p0, &err);
        CHECK(t0 != NULL);
        if (!t0) {
            fprintf(stderr, "rope %zu: %s\n", i, err.msg);
            continue;
        }
        if (!strstr(t0, texts[i])) fprintf(stderr, "rope %zu: wanted\n%s\nin\n%s\n", i, texts[i], t0);
        CHECK(strstr(t0, texts[i]) != NULL);
        CHECK(strstr(t0, "\"rope_theta\": 500000,\n    \"rope_scaling\"") != NULL);   /* after rope_theta */
        CHECK_EQ_I64(dt_plan_parse(t0, &p1, &err), 0);
        CHECK(memcmp(&p1.model.rope_scaling, &cases[i], sizeof cases[i]) == 0);
        char *t1 = dt_plan_to_json(&p1, &err);
        CHECK_EQ_I64(dt_plan_parse(t1, &p2, &err), 0);
        CHECK_STR(t0, t1);
        CHECK(memcmp(&p1, &p2, sizeof p1) == 0);
        free(t1);
        free(t0);
    }

    /* strict reading, one line naming the path */
    p0.model.rope_scaling = cases[0];
    char *t0 = dt_plan_to_json(&p0, &err);
    CHECK(t0 != NULL);
    if (!t0) return;
    expect_mut_reject(t0, "model.rope_scaling.beta_fast", "32",
                      "$.model.rope_scaling.beta_fast: unknown key (allowed here: rope_type, factor");
    expect_mut_reject(t0, "model.rope_scaling.low_freq_factor", NULL,
                      "$.model.rope_scaling.low_freq_factor: missing required key");
    expect_mut_reject(t0, "model.rope_scaling.original_max_position_embeddings", "8192.5",
                      "$.model.rope_scaling.original_max_position_embeddings: expected");
    expect_mut_reject(t0, "model.rope_scaling.rope_type", "\"yarn\"",
                      "$.model.rope_scaling.rope_type: expected one of \"linear\", \"dynamic\", \"llama3\"");
    expect_mut_reject(t0, "model.rope_scaling.rope_type", "\"default\"", "$.model.rope_scaling.rope_type: expected one of");
    expect_mut_reject(t0, "model.rope_scaling.factor", "\"8\"", "$.model.rope_scaling.factor: expected a number");
    expect_mut_reject(t0, "model.rope_scaling", "[]", "$.model.rope_scaling: expected an object");
    /* a linear scaling with llama3's keys: the extra keys are unknown for linear */
    expect_mut_reject(t0, "model.rope_scaling.rope_type", "\"linear\"",
                      "$.model.rope_scaling.low_freq_factor: unknown key (allowed here: rope_type, factor)");
    /* ranges: dt_model_validate names the key */
    expect_mut_reject(t0, "model.rope_scaling.factor", "0.5", "model 'llama-3.1-8b': rope_scaling: factor must be a number >= 1");
    expect_mut_reject(t0, "model.rope_scaling.high_freq_factor", "0.5",
                      "rope_scaling: high_freq_factor (0.5) must be greater than low_freq_factor (1)");
    expect_mut_reject(t0, "model.rope_scaling.original_max_position_embeddings", "200000",
                      "rope_scaling: original_max_position_embeddings must be in 1..131072");
    /* a plan written before rope_scaling existed: readable, the default */
    expect_mut_accept(t0, "model.rope_scaling", NULL, &p1);
    CHECK(p1.model.rope_scaling.type == DT_ROPE_DEFAULT && p1.model.rope_scaling.factor == 0);
    free(t0);

    /* a gpt2 plan has none, and refuses one */
    base_plan(&p0);
    t0 = dt_plan_to_json(&p0, &err);
    CHECK(t0 != NULL && strstr(t0, "rope_scaling") == NULL);
    if (!t0) return;
    expect_mut_reject(t0, "model.rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 2}",
                      "model 'gpt2-tiny': rope_scaling is \"linear\", but gpt2 has learned positions");
    free(t0);
}

/* Issue 17: the optional runtime section. A deepspeed plan writes it (and reads back to the
 * same text and struct); a dtrun plan has none, and plans written before it read as dtrun;
 * the section is strict and consistent with activations.attention. */
static void test_runtime_section(void) {
    dt_plan p, q, r;
    dt_error err = {0};
    base_plan(&p);
    char *dtrun = dt_plan_to_json(&p, &err);
    CHECK(dtrun && !strstr(dtrun, "\"runtime\"") && !strstr(dtrun, "selective_recompute"));
    CHECK(dt_hardware_load("H100-SXM-80GB", NULL, &p.cluster.hw, &err) == DT_OK);
    p.cluster.device = DT_DEVICE_CUDA;
    dt_plan_set_runtime(&p, DT_RUNTIME_DEEPSPEED);
    CHECK(dt_plan_set_attention(&p, "eager", "--attention", &err) == DT_OK);
    p.activations.selective = 1;
    p.runtime.max_reuse_distance = 12345;
    char *t0 = dt_plan_to_json(&p, &err);
    CHECK(t0 != NULL);
    if (!t0) {
        free(dtrun);
        return;
    }
    CHECK(strstr(t0, "\"kind\": \"deepspeed\"") && strstr(t0, "\"attention\": \"eager\""));
    CHECK(strstr(t0, "\"selective_recompute\": true") && strstr(t0, "\"attention\": \"materialized\""));
    CHECK_EQ_I64(dt_plan_parse(t0, &q, &err), 0);
    char *t1 = dt_plan_to_json(&q, &err);
    CHECK_EQ_I64(dt_plan_parse(t1, &r, &err), 0);
    CHECK_STR(t0, t1);
    CHECK(memcmp(&q, &r, sizeof q) == 0);
    CHECK(q.runtime.kind == DT_RUNTIME_DEEPSPEED && q.runtime.attention == DT_KERNEL_EAGER && q.activations.selective);
    CHECK_EQ_I64(q.runtime.max_reuse_distance, 12345);
    /* strict: unknown and missing keys, kinds, consistency */
    expect_mut_reject(t0, "runtime.kernel", "\"sdpa\"", "$.runtime.kernel: unknown key");
    expect_mut_reject(t0, "runtime.dropout", NULL, "$.runtime.dropout: missing required key");
    expect_mut_reject(t0, "runtime.kind", "\"megatron-lm\"", "$.runtime.kind");
    /* runtime megatron reads, and refuses this plan's ZeRO-2 by name */
    expect_mut_reject(t0, "runtime.kind", "\"megatron\"", "parallel.zero_stage = 2 with runtime megatron: Megatron-LM has no ZeRO-2");
    expect_mut_reject(t0, "runtime.kind", "\"dtrun\"", "$.runtime.kind: \"dtrun\" plans carry no runtime section");
    expect_mut_reject(t0, "runtime.attention", "\"sdpa\"",
                      "runtime.attention = \"sdpa\" contradicts activations.attention = \"materialized\"");
    expect_mut_reject(t0, "runtime.fetch_overhead_s", "-1", "$.runtime.fetch_overhead_s");
    expect_mut_reject(t0, "cluster.device", "\"cpu\"", "cluster.device");
    expect_mut_accept(t0, "parallel.zero_stage", "1", &q);
    expect_mut_reject(mutate(t0, "runtime.kind", "\"fsdp\""), "parallel.zero_stage", "1",
                      "FSDP has no optimizer-only sharding");
    /* a dtrun plan (every plan before issue 17) cannot ask for selective recompute */
    expect_mut_reject(dtrun, "activations.selective_recompute", "true",
                      "dtrun's engine recomputes whole blocks only");
    expect_mut_accept(dtrun, "activations.selective_recompute", "false", &q);
    CHECK(q.runtime.kind == DT_RUNTIME_DTRUN && !q.activations.selective);
    /* DeepSpeed's partial offload and ZeRO++: optional keys, written only when set, read back */
    CHECK(!strstr(t0, "offload_ratio") && !strstr(t0, "hpz_partition_size") && !strstr(t0, "quantized_"));
    p.parallel.zero_stage = 3;
    p.parallel.offload_optimizer = DT_OFFLOAD_CPU;
    p.runtime.offload_ratio = 0.25, p.runtime.hpz_partition = 2;
    p.runtime.quantized_weights = p.runtime.quantized_gradients = 1;
    p.runtime.comm_dtype_set = 1, p.runtime.comm_dtype = DT_DTYPE_FP32;
    char *z0 = dt_plan_to_json(&p, &err);
    CHECK(z0 && strstr(z0, "\"offload_ratio\": 0.25") && strstr(z0, "\"hpz_partition_size\": 2") &&
          strstr(z0, "\"quantized_weights\": true") && strstr(z0, "\"quantized_gradients\": true"));
    if (z0) {
        CHECK_EQ_I64(dt_plan_parse(z0, &q, &err), 0);
        CHECK(q.runtime.offload_ratio == 0.25 && q.runtime.hpz_partition == 2 && q.runtime.quantized_weights &&
              q.runtime.quantized_gradients);
        CHECK(strstr(z0, "\"communication_data_type\": \"fp32\"") && q.runtime.comm_dtype_set &&
              q.runtime.comm_dtype == DT_DTYPE_FP32);
        expect_mut_reject(z0, "runtime.communication_data_type", "\"int8\"", "$.runtime.communication_data_type");
        expect_mut_accept(z0, "runtime.reduce_scatter", "false", &q);
        CHECK(q.runtime.grads_allreduce == 1);
        expect_mut_reject(z0, "runtime.offload_ratio", "1.5", "$.runtime.offload_ratio");
        expect_mut_reject(z0, "runtime.hpz_partition_size", "0", "$.runtime.hpz_partition_size");
        expect_mut_reject(z0, "runtime.hpz_partition_size", "3", "does not divide the world size 2");
        expect_mut_reject(z0, "runtime.quantized_weights", "1", "$.runtime.quantized_weights");
        expect_mut_reject(z0, "parallel.offload_optimizer", "\"none\"", "partial offloading needs ZeRO stage 3");
        expect_mut_reject(z0, "parallel.zero_stage", "2", "partial offloading needs ZeRO stage 3");
        char *full = mutate(z0, "runtime.offload_ratio", "1");
        expect_mut_reject(full, "parallel.zero_stage", "2", "ZeRO++ is a stage-3 option");
        free(full);
        /* a plan without the keys reads as DeepSpeed's defaults */
        expect_mut_accept(t0, "runtime.max_reuse_distance", "7", &q);
        CHECK(q.runtime.offload_ratio == 1.0 && q.runtime.hpz_partition == 1 && !q.runtime.quantized_weights);
    }
    free(z0);
    free(t0);
    free(t1);
    free(dtrun);
}

int main(void) {
    test_names();
    test_runtime_section();
    test_rope_scaling();
    test_round_trip();
    test_rejections();
    test_atomic_save();
    test_tiny_cpu();
    test_fixture();
    TEST_MAIN_END();
}
