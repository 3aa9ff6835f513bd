/* test_vlm.c — LLaVA models (models/vision.c, the llava branch of models/model.c):
 * parameter counts per module against transformers' LlavaForConditionalGeneration built from
 * the catalog's config.json (tests/models/golden/llava_counts.txt), the activations a
 * trained tower and the projector keep against what torch's autograd saved per stage
 * (llava_saved.txt; both from scripts/gen_llava_goldens.py), the published totals of
 * llava-1.5-7b / 13b, the image-token arithmetic, and the one-line refusals of bad configs. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dt_model.h"
#include "dt_test.h"
#include "dt_vision.h"

/* Bytes per element of the golden's fp32 run; int64 position ids (CLIPVisionEmbeddings'
 * position_embedding lookup keeps its index, one row of tower tokens per micro-batch). */
#define FP32 4
#define INDEX_BYTES 8

static int resolve(const char *name, dt_model *m, dt_vlm *v) {
    dt_error e = {0};
    int rc = dt_model_resolve_vlm(name, m, v, &e);
    if (rc) fprintf(stderr, "%s: %s\n", name, e.msg);
    return rc;
}

/* Calls row on every non-comment line of a golden file; returns how many rows there were. */
static int golden_rows(const char *path, int (*row)(const char *line)) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char line[512];
    int rows = 0;
    while (f && fgets(line, sizeof line, f))
        if (line[0] != '#') rows += row(line);
    if (f) fclose(f);
    return rows;
}

static int count_row(const char *line) {
    char name[64];
    long long tower, proj, lm, head, total;
    if (sscanf(line, "%63s %lld %lld %lld %lld %lld", name, &tower, &proj, &lm, &head, &total) != 6) return 0;
    dt_model m;
    dt_vlm v;
    CHECK_EQ_I64(resolve(name, &m, &v), DT_OK);
    CHECK(dt_vlm_active(&v));
    CHECK_EQ_I64(dt_vision_tower_params(&v), tower);
    CHECK_EQ_I64(dt_vision_projector_params(&v, &m), proj);
    CHECK_EQ_I64(dt_model_params(&m), lm + head);
    CHECK_EQ_I64(dt_model_params(&m) + dt_vision_tower_params(&v) + dt_vision_projector_params(&v, &m), total);
    /* the parameter groups (role vision) sum to the same, trained or frozen as the stage says */
    dt_pgroups tg, pg;
    dt_error e = {0};
    v.stage = DT_VLM_SFT;
    CHECK_EQ_I64(dt_vision_pgroups(&v, &m, DT_DTYPE_BF16, &tg, &pg, &e), DT_OK);
    CHECK(tg.role == DT_ROLE_VISION && pg.role == DT_ROLE_VISION);
    CHECK_EQ_I64(dt_pgroups_elems(&tg, DT_TRAIN_FROZEN), tower);
    CHECK_EQ_I64(dt_pgroups_elems(&pg, DT_TRAIN_TRAINED), proj);
    CHECK_EQ_I64(dt_pgroups_bytes(&tg, DT_TRAIN_FROZEN), 2 * tower);
    v.stage = DT_VLM_FULL;
    CHECK_EQ_I64(dt_vision_pgroups(&v, &m, DT_DTYPE_BF16, &tg, &pg, &e), DT_OK);
    CHECK_EQ_I64(dt_pgroups_elems(&tg, DT_TRAIN_TRAINED), tower);
    return 1;
}

/* Bytes a trained tower keeps for n images in fp32 with eager attention: what the golden's
 * "tower_kept" column measured. */
static int64_t tower_bytes(const dt_vlm *v, int64_t n) {
    dt_vision_saved s;
    dt_vision_tower_saved(v, 1, &s);
    return n * FP32 * (s.act + s.stats + s.probs + s.pixels) + INDEX_BYTES * dt_vlm_tower_tokens(v);
}

static int saved_row(const char *line) {
    char stage[32];
    long long n, kept, all, proj, block;
    if (sscanf(line, "%31s %lld %lld %lld %lld %lld", stage, &n, &kept, &all, &proj, &block) != 6) return 0;
    dt_model m;
    dt_vlm v;
    dt_error e = {0};
    CHECK_EQ_I64(resolve("llava-tiny", &m, &v), DT_OK);
    CHECK_EQ_I64(dt_vlm_stage_parse(stage, &v.stage, &e), DT_OK);
    /* a frozen tower keeps nothing: autograd saves no tensor for an op without a grad input */
    CHECK_EQ_I64(dt_vlm_trains_tower(&v) ? tower_bytes(&v, n) : 0, kept);
    CHECK_EQ_I64(FP32 * n * dt_vision_projector_saved(&v, &m), proj);
    if (dt_vlm_trains_tower(&v)) {
        dt_vlm one = v;
        one.tower.select_layer = 1;   /* one block: what the tower keeps less the embeddings' */
        dt_vision_saved s;
        dt_vision_tower_saved(&one, 1, &s);
        const int64_t pre_ln = dt_vlm_tower_tokens(&v) * (v.tower.hidden + 2);   /* input + mean, rstd */
        CHECK_EQ_I64(FP32 * n * (s.act + s.stats + s.probs - pre_ln), block);
    }
    return 1;
}

static void published(void) {
    /* The llava-hf model cards: 7.06B and 13.35B parameters (llava-hf/llava-1.5-7b-hf, -13b-hf) */
    dt_model m;
    dt_vlm v;
    CHECK_EQ_I64(resolve("llava-1.5-7b", &m, &v), DT_OK);
    const int64_t t7 = dt_model_params(&m) + dt_vision_tower_params(&v) + dt_vision_projector_params(&v, &m);
    CHECK(t7 >= INT64_C(7055000000) && t7 < INT64_C(7065000000));
    CHECK_EQ_I64(dt_vlm_patches(&v), 576);   /* ViT-L/14 at 336 px: (336 / 14)^2 */
    CHECK_EQ_I64(dt_vlm_image_tokens(&v), 576);   /* "default": the class token dropped */
    CHECK_EQ_I64(dt_vlm_tower_tokens(&v), 577);
    CHECK_EQ_I64(dt_vlm_used_layers(&v), 23);     /* vision_feature_layer -2 of 24 blocks */
    CHECK_EQ_I64(dt_vision_projector_params(&v, &m), 20979712);   /* finetune-facts §8, LLaVA builder.py */
    CHECK_EQ_I64(resolve("llava-1.5-13b", &m, &v), DT_OK);
    const int64_t t13 = dt_model_params(&m) + dt_vision_tower_params(&v) + dt_vision_projector_params(&v, &m);
    CHECK(t13 >= INT64_C(13345000000) && t13 < INT64_C(13355000000));
    CHECK_EQ_I64(dt_vision_projector_params(&v, &m), 31467520);
    v.tower.keep_cls = 1;
    CHECK_EQ_I64(dt_vlm_image_tokens(&v), 577);
    v.images_per_sample = 2;
    CHECK_EQ_I64(dt_vlm_sequence_image_tokens(&v), 1154);
}

static void expect_fail(const char *json, const char *needle) {
    dt_model m;
    dt_vlm v;
    dt_error e = {0};
    CHECK_EQ_I64(dt_model_from_config_json_vlm(json, "cfg", &m, &v, &e), DT_EINVAL);
    if (!strstr(e.msg, needle)) fprintf(stderr, "expected '%s' in: %s\n", needle, e.msg);
    CHECK(strstr(e.msg, needle) != NULL);
    CHECK(strchr(e.msg, '\n') == NULL);
}

static void refusals(void) {
    expect_fail("{\"model_type\":\"llava\"}", "vision_config");
    expect_fail("{\"model_type\":\"llava\",\"vision_config\":{\"hidden_size\":64}}", "image_size");
    expect_fail("{\"model_type\":\"llava\",\"vision_config\":{\"model_type\":\"resnet\",\"image_size\":32,\"patch_size\":8,"
                "\"hidden_size\":32,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":64}}",
                "resnet");
    expect_fail("{\"model_type\":\"llava\",\"vision_feature_layer\":[-2,-5],\"vision_config\":{\"image_size\":32,"
                "\"patch_size\":8,\"hidden_size\":32,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                "\"intermediate_size\":64}}", "vision_feature_layer");
    expect_fail("{\"model_type\":\"llava\",\"vision_config\":{\"image_size\":30,\"patch_size\":31,\"hidden_size\":32,"
                "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":64}}", "patch_size");
    /* text-only callers refuse a VLM in one line instead of dropping the tower */
    dt_model m;
    dt_error e = {0};
    CHECK_EQ_I64(dt_model_resolve("llava-tiny", &m, &e), DT_EINVAL);
    CHECK(strstr(e.msg, "vision-language") != NULL);
    /* a SigLIP tower (no class token, a pooling head) and LlamaConfig's defaults for an empty text_config */
    dt_vlm v;
    CHECK_EQ_I64(dt_model_from_config_json_vlm("{\"model_type\":\"llava\",\"vision_config\":{\"model_type\":"
                                               "\"siglip_vision_model\",\"image_size\":384,\"patch_size\":14,"
                                               "\"hidden_size\":1152,\"num_hidden_layers\":27,\"num_attention_heads\":16,"
                                               "\"intermediate_size\":4304}}", "siglip", &m, &v, &e), DT_OK);
    if (e.code) fprintf(stderr, "%s\n", e.msg);
    CHECK_EQ_I64(dt_vlm_tower_tokens(&v), 729);
    CHECK_EQ_I64(dt_vlm_image_tokens(&v), 729);
    CHECK_EQ_I64(m.hidden, 4096);
    CHECK_EQ_I64(m.n_layer, 32);
    CHECK_EQ_I64(m.vocab, 32000);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_vlm llava_counts.txt llava_saved.txt\n");
        return 2;
    }
    CHECK_EQ_I64(golden_rows(argv[1], count_row), 3);
    CHECK_EQ_I64(golden_rows(argv[2], saved_row), 3);
    published();
    refusals();
    TEST_MAIN_END();
}
