/* config.json parsing: both RoPE spellings, RoPE scaling (each type, stored in the
 * model), a config given by path, defaults, and bad configs rejected with the JSON key
 * named. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_model.h"
#include "dt_test.h"

/* Llama-3.1-8B as transformers 5.x writes it: RoPE base and scaling inside "rope_parameters". */
static const char llama31_rope_parameters[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 4096, \"intermediate_size\": 14336,"
    " \"num_hidden_layers\": 32, \"num_attention_heads\": 32, \"num_key_value_heads\": 8,"
    " \"vocab_size\": 128256, \"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-05,"
    " \"tie_word_embeddings\": false, \"hidden_act\": \"silu\","
    " \"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", \"factor\": 8.0,"
    " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}";

/* Llama-3.1's rope_scaling (meta-llama/Llama-3.1-8B config.json) as a JSON object body. */
#define L31_SCALING "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0," \
                    " \"original_max_position_embeddings\": 8192"

/* Minimal valid llama config used as the base of the bad-config table. */
#define BASE_LLAMA                                                                    \
    "\"hidden_size\": 64, \"intermediate_size\": 176, \"num_hidden_layers\": 2,"      \
    " \"num_attention_heads\": 4, \"vocab_size\": 256, \"max_position_embeddings\": 128"

/* Parses a BASE_LLAMA config (max_position_embeddings 128) with the given extra keys. */
static dt_rope_scaling rope_of(const char *extra) {
    char json[1024];
    snprintf(json, sizeof json, "{\"model_type\": \"llama\", " BASE_LLAMA ", %s}", extra);
    dt_model m;
    dt_error err = {0};
    memset(&m, 0xff, sizeof m);   /* nothing may be left from before */
    int rc = dt_model_from_config_json(json, "rope", &m, &err);
    if (rc) fprintf(stderr, "%s: %s\n", json, err.msg);
    CHECK_EQ_I64(rc, DT_OK);
    return m.rope_scaling;
}

static void check_rope(dt_rope_scaling r, dt_rope_type type, double factor, double low, double high, int64_t orig) {
    CHECK_STR(dt_rope_type_name(r.type), dt_rope_type_name(type));
    CHECK_NEAR(r.factor, factor, 0);
    CHECK_NEAR(r.low_freq_factor, low, 0);
    CHECK_NEAR(r.high_freq_factor, high, 0);
    CHECK_EQ_I64(r.original_max_pos, orig);
}

static void expect_error(const char *json, const char *needle) {
    dt_model m;
    dt_error err = {0};
    int rc = dt_model_from_config_json(json, "bad", &m, &err);
    if (rc != DT_EINVAL || !strstr(err.msg, needle))
        fprintf(stderr, "for %s\n  rc %d, message '%s' (wanted '%s')\n", json, rc, err.msg, needle);
    CHECK_EQ_I64(rc, DT_EINVAL);
    CHECK(strstr(err.msg, needle) != NULL);
    CHECK(strchr(err.msg, '\n') == NULL);
}

int main(void) {
    dt_error err = {0};
    dt_model a, b;

    /* rope_parameters spelling == rope_theta spelling (the catalog's llama-3.1-8b) */
    CHECK_EQ_I64(dt_model_from_config_json(llama31_rope_parameters, "l31", &a, &err), DT_OK);
    CHECK_NEAR(a.rope_theta, 500000.0, 1e-12);
    CHECK_EQ_I64(dt_model_resolve("llama-3.1-8b", &b, &err), DT_OK);
    CHECK_NEAR(b.rope_theta, 500000.0, 1e-12);
    CHECK_EQ_I64(dt_model_params(&a), INT64_C(8030261248));
    CHECK_EQ_I64(dt_model_params(&a), dt_model_params(&b));
    CHECK_STR(a.name, "l31");
    /* ... and the same RoPE scaling: the catalog's HF rope_scaling, Llama-3.1's llama3 */
    check_rope(a.rope_scaling, DT_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192);
    check_rope(b.rope_scaling, DT_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192);

    /* RoPE scaling, each type; the keys are HF modeling_rope_utils' */
    CHECK_EQ_I64(dt_model_resolve("llama-tiny", &a, &err), DT_OK);
    check_rope(a.rope_scaling, DT_ROPE_DEFAULT, 0, 0, 0, 0);
    CHECK_EQ_I64(dt_model_resolve("gpt2", &a, &err), DT_OK);
    check_rope(a.rope_scaling, DT_ROPE_DEFAULT, 0, 0, 0, 0);
    check_rope(rope_of("\"rope_theta\": 10000"), DT_ROPE_DEFAULT, 0, 0, 0, 0);
    check_rope(rope_of("\"rope_scaling\": null"), DT_ROPE_DEFAULT, 0, 0, 0, 0);
    check_rope(rope_of("\"rope_scaling\": {\"rope_type\": \"default\"}"), DT_ROPE_DEFAULT, 0, 0, 0, 0);
    check_rope(rope_of("\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1e6}"),
               DT_ROPE_DEFAULT, 0, 0, 0, 0);
    /* linear: factor; the older "type" spelling too; keys the type does not use are ignored */
    check_rope(rope_of("\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 4.0}"), DT_ROPE_LINEAR, 4, 0, 0, 0);
    check_rope(rope_of("\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2, \"low_freq_factor\": 9}"),
               DT_ROPE_LINEAR, 2, 0, 0, 0);
    /* dynamic: original_max_position_embeddings optional, HF's effective value max_pos */
    check_rope(rope_of("\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}"), DT_ROPE_DYNAMIC, 2, 0, 0, 128);
    check_rope(rope_of("\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 1.5,"
                       " \"original_max_position_embeddings\": 64}"),
               DT_ROPE_DYNAMIC, 1.5, 0, 0, 64);
    /* llama3 in either spelling, and both spellings when they agree */
    check_rope(rope_of("\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
                       " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 32}"),
               DT_ROPE_LLAMA3, 8, 1, 4, 32);
    check_rope(rope_of("\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", \"factor\": 32,"
                       " \"low_freq_factor\": 1, \"high_freq_factor\": 4, \"original_max_position_embeddings\": 128}"),
               DT_ROPE_LLAMA3, 32, 1, 4, 128);
    check_rope(rope_of("\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2},"
                       " \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0, \"rope_theta\": 1e4}"),
               DT_ROPE_LINEAR, 2, 0, 0, 0);
    /* only one names a type: that one */
    check_rope(rope_of("\"rope_scaling\": {\"type\": \"linear\", \"factor\": 3}, \"rope_parameters\": {\"rope_theta\": 1e4}"),
               DT_ROPE_LINEAR, 3, 0, 0, 0);

    /* defaults: no num_key_value_heads -> MHA; no head_dim -> h / a; no rope -> 10000;
     * no tie_word_embeddings -> untied; no rms_norm_eps -> 1e-6 */
    CHECK_EQ_I64(dt_model_from_config_json("{\"model_type\": \"mistral\", " BASE_LLAMA "}", "d", &a,
                                           &err), DT_OK);
    CHECK(a.n_kv_head == 4 && a.head_dim == 16 && !a.tied_embeddings && !a.qkv_bias && !a.qk_norm);
    CHECK_NEAR(a.rope_theta, 10000.0, 1e-12);
    CHECK_NEAR(a.norm_eps, 1e-6, 1e-12);
    /* qwen2 always has q/k/v bias, even without attention_bias */
    CHECK_EQ_I64(dt_model_from_config_json("{\"model_type\": \"qwen2\", " BASE_LLAMA "}", "q2", &b,
                                           &err), DT_OK);
    CHECK(b.qkv_bias == 1);
    CHECK_EQ_I64(dt_model_params(&b) - dt_model_params(&a), 2 * (64 + 64 + 64));
    /* qwen3 has q/k norm: 2·d per layer */
    CHECK_EQ_I64(dt_model_from_config_json("{\"model_type\": \"qwen3\", " BASE_LLAMA "}", "q3", &b,
                                           &err), DT_OK);
    CHECK(b.qk_norm == 1 && b.qkv_bias == 0);
    CHECK_EQ_I64(dt_model_params(&b) - dt_model_params(&a), 2 * (2 * 16));
    /* tied llama: one V·h less */
    CHECK_EQ_I64(dt_model_from_config_json(
                     "{\"model_type\": \"llama\", \"tie_word_embeddings\": true, " BASE_LLAMA "}",
                     "t", &b, &err), DT_OK);
    CHECK_EQ_I64(dt_model_params(&a) - dt_model_params(&b), 256 * 64);
    /* gpt2 with an explicit n_inner and n_ctx instead of n_positions */
    CHECK_EQ_I64(dt_model_from_config_json(
                     "{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 1, \"n_head\": 4,"
                     " \"vocab_size\": 10, \"n_ctx\": 8, \"n_inner\": 100}", "g", &a, &err), DT_OK);
    CHECK(a.ffn == 100 && a.max_pos == 8 && a.head_dim == 16);
    /* 10·64 + 8·64 + (3·64·64+192 + 64·64+64 + 64·100+100 + 100·64+64 + 4·64) + 2·64 */
    CHECK_EQ_I64(dt_model_params(&a), 640 + 512 + (12480 + 4160 + 6500 + 6464 + 256) + 128);

    /* A config given by path: "<dir>/Qwen3-0.6B/config.json" is named after its directory. */
    char dir[] = "/tmp/dt_models_test_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char sub[256], path[300];
    snprintf(sub, sizeof sub, "%s/Qwen3-0.6B", dir);
    CHECK(mkdir(sub, 0700) == 0);
    snprintf(path, sizeof path, "%s/config.json", sub);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("{\"model_type\": \"qwen3\", \"hidden_size\": 1024, \"intermediate_size\": 3072,"
              " \"num_hidden_layers\": 28, \"num_attention_heads\": 16, \"num_key_value_heads\": 8,"
              " \"head_dim\": 128, \"vocab_size\": 151936, \"max_position_embeddings\": 40960,"
              " \"rms_norm_eps\": 1e-06, \"rope_parameters\": {\"rope_theta\": 1000000},"
              " \"tie_word_embeddings\": true}", f);
        fclose(f);
    }
    CHECK_EQ_I64(dt_model_resolve(path, &a, &err), DT_OK);
    CHECK_STR(a.name, "Qwen3-0.6B");
    CHECK_EQ_I64(dt_model_params(&a), INT64_C(596049920));
    CHECK_NEAR(a.rope_theta, 1e6, 1e-12);
    /* a bare file name ending in .json is a path too, named by its stem */
    char path2[300];
    snprintf(path2, sizeof path2, "%s/my-model.json", dir);
    CHECK(rename(path, path2) == 0);
    CHECK_EQ_I64(dt_model_resolve(path2, &a, &err), DT_OK);
    CHECK_STR(a.name, "my-model");
    unlink(path2);
    rmdir(sub);
    rmdir(dir);
    /* missing file: one line naming the path */
    dt_error_clear(&err);
    CHECK_EQ_I64(dt_model_resolve("/nonexistent/dir/config.json", &a, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "/nonexistent/dir/config.json") != NULL);
    CHECK_EQ_I64(dt_model_resolve("nope.json", &a, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "--model: nope.json: cannot open") != NULL);

    /* bad configs: the key is named */
    expect_error("{", "invalid JSON");
    expect_error("{\"model_type\": \"llama\", " BASE_LLAMA ", \"vocab_size\": 3}", "duplicate key");
    expect_error("[1, 2]", "must be a JSON object");
    expect_error("{\"hidden_size\": 64}", "model_type");
    expect_error("{\"model_type\": \"bert\", " BASE_LLAMA "}", "'bert'");
    expect_error("{\"model_type\": \"llama\", \"hidden_size\": 64}", "missing the required key 'num_hidden_layers'");
    expect_error("{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 176,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 0,"
                 " \"max_position_embeddings\": 128}", "'vocab_size'");
    expect_error("{\"model_type\": \"llama\", \"hidden_size\": -64, \"intermediate_size\": 176,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 256,"
                 " \"max_position_embeddings\": 128}", "'hidden_size'");
    expect_error("{\"model_type\": \"llama\", \"hidden_size\": 64.5, \"intermediate_size\": 176,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 256,"
                 " \"max_position_embeddings\": 128}", "'hidden_size'");
    expect_error("{\"model_type\": \"llama\", \"hidden_size\": \"64\", \"intermediate_size\": 176,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 256,"
                 " \"max_position_embeddings\": 128}", "'hidden_size' must be a number");
    expect_error("{\"model_type\": \"llama\", \"hidden_size\": 1e300, \"intermediate_size\": 176,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 256,"
                 " \"max_position_embeddings\": 128}", "'hidden_size'");
    expect_error("{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 176,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 5, \"vocab_size\": 256,"
                 " \"max_position_embeddings\": 128}", "'num_attention_heads'");
    expect_error("{\"model_type\": \"llama\", " BASE_LLAMA ", \"num_key_value_heads\": 3}",
                 "n_kv_head");
    expect_error("{\"model_type\": \"llama\", " BASE_LLAMA ", \"rope_theta\": -1}", "'rope_theta'");
    expect_error("{\"model_type\": \"llama\", " BASE_LLAMA ", \"rope_parameters\": {\"rope_theta\": \"x\"}}",
                 "'rope_parameters'");
    expect_error("{\"model_type\": \"llama\", " BASE_LLAMA ", \"rope_parameters\": 5}", "'rope_parameters'");
    expect_error("{\"model_type\": \"llama\", " BASE_LLAMA ", \"tie_word_embeddings\": 1}",
                 "'tie_word_embeddings'");
    expect_error("{\"model_type\": \"llama\", " BASE_LLAMA ", \"rms_norm_eps\": 0}", "'rms_norm_eps'");
    expect_error("{\"model_type\": \"llama\", " BASE_LLAMA ", \"hidden_act\": \"gelu\"}", "'hidden_act'");
    expect_error("{\"model_type\": \"llama\", " BASE_LLAMA ", \"attention_bias\": true}", "'attention_bias'");
    expect_error("{\"model_type\": \"llama\", " BASE_LLAMA ", \"mlp_bias\": true}", "'mlp_bias'");
    expect_error("{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 1, \"n_head\": 4,"
                 " \"vocab_size\": 10}", "'n_ctx'");
    expect_error("{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 1, \"n_head\": 5,"
                 " \"vocab_size\": 10, \"n_positions\": 8}", "'n_head'");
    expect_error("{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 1, \"n_head\": 4,"
                 " \"vocab_size\": 10, \"n_positions\": 8, \"activation_function\": \"relu\"}",
                 "'activation_function'");

    /* RoPE scaling refusals: one line naming the key */
    static const struct { const char *rs, *needle; } bad_rope[] = {
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
         " \"original_max_position_embeddings\": 64}", "'rope_scaling.factor' is missing: rope_type \"llama3\" needs it"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"high_freq_factor\": 4,"
         " \"original_max_position_embeddings\": 64}", "'rope_scaling.low_freq_factor' is missing"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1,"
         " \"original_max_position_embeddings\": 64}", "'rope_scaling.high_freq_factor' is missing"},
        {"\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4}",
         "'rope_parameters.original_max_position_embeddings' is missing"},
        {"\"rope_scaling\": {\"rope_type\": \"linear\"}", "'rope_scaling.factor' is missing: rope_type \"linear\""},
        {"\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": null}", "'rope_scaling.factor' is missing"},
        {"\"rope_scaling\": {\"type\": \"linear\", \"factor\": \"2\"}", "'rope_scaling.factor' must be a number"},
        {"\"rope_scaling\": {\"type\": \"linear\", \"factor\": 0.5}", "'rope_scaling': factor must be a number >= 1"},
        {"\"rope_scaling\": {\"rope_type\": 3}", "'rope_scaling.rope_type' must be a string"},
        {"\"rope_scaling\": [1]", "'rope_scaling' must be an object or null"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 0, \"high_freq_factor\": 4,"
         " \"original_max_position_embeddings\": 64}", "low_freq_factor must be a number > 0"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, \"high_freq_factor\": 4,"
         " \"original_max_position_embeddings\": 64}", "high_freq_factor (4) must be greater than low_freq_factor (4)"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
         " \"original_max_position_embeddings\": 64.5}", "'rope_scaling.original_max_position_embeddings' must be a whole number"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", " L31_SCALING "}",   /* 8192 > this model's 128 positions */
         "original_max_position_embeddings must be in 1..128"},
        {"\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}, \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 4}",
         "'rope_scaling' (linear) and 'rope_parameters' (linear) describe different RoPE scalings"},
    };
    for (size_t i = 0; i < sizeof bad_rope / sizeof bad_rope[0]; i++) {
        char json[1024];
        snprintf(json, sizeof json, "{\"model_type\": \"llama\", " BASE_LLAMA ", %s}", bad_rope[i].rs);
        expect_error(json, bad_rope[i].needle);
    }

    /* keys that change the architecture are refused, naming key and value (issue 16),
     * where ignoring them would plan another model */
#define GPT2_SMALL "\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_layer\": 1, \"n_head\": 4, \"vocab_size\": 10, \"n_positions\": 8"
    static const struct { const char *json, *needle; } unmodelled[] = {
        {"{\"model_type\": \"qwen2\", " BASE_LLAMA ", \"use_sliding_window\": true, \"sliding_window\": 64}",
         "'sliding_window': 64 with 'use_sliding_window': true is not modelled"},
        {"{\"model_type\": \"mistral\", " BASE_LLAMA ", \"sliding_window\": 32}", "'sliding_window': 32 is not modelled"},
        {"{\"model_type\": \"qwen3\", " BASE_LLAMA ", \"layer_types\": [\"full_attention\", \"sliding_attention\"]}",
         "'layer_types'"},
        {"{\"model_type\": \"llama\", " BASE_LLAMA ", \"num_local_experts\": 8}", "'num_local_experts': 8 (a mixture of experts)"},
        {"{\"model_type\": \"qwen2\", " BASE_LLAMA ", \"num_experts\": 64}", "'num_experts': 64"},
        {"{\"model_type\": \"llama\", " BASE_LLAMA ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
         "'rope_scaling': rope_type \"yarn\" is not modelled"},
        {"{\"model_type\": \"llama\", " BASE_LLAMA ", \"rope_parameters\": {\"rope_type\": \"longrope\"}}",
         "'rope_parameters': rope_type \"longrope\""},
        {"{" GPT2_SMALL ", \"tie_word_embeddings\": false}", "'tie_word_embeddings': false is not supported for gpt2"},
        {"{" GPT2_SMALL ", \"add_cross_attention\": true}", "'add_cross_attention': true"},
    };
    for (size_t i = 0; i < sizeof unmodelled / sizeof unmodelled[0]; i++)
        expect_error(unmodelled[i].json, unmodelled[i].needle);
    /* ... and the same keys where they change nothing are accepted */
    static const char *const same[] = {
        "{\"model_type\": \"qwen2\", " BASE_LLAMA ", \"use_sliding_window\": false, \"sliding_window\": 64}",
        "{\"model_type\": \"qwen2\", " BASE_LLAMA ", \"use_sliding_window\": true, \"sliding_window\": 4096}",
        "{\"model_type\": \"mistral\", " BASE_LLAMA ", \"sliding_window\": null}",
        "{\"model_type\": \"llama\", " BASE_LLAMA ", \"num_local_experts\": 1, \"num_experts\": null}",
        "{\"model_type\": \"llama\", " BASE_LLAMA ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}}",
        "{\"model_type\": \"llama\", " BASE_LLAMA ", \"rope_scaling\": null}",
        "{\"model_type\": \"qwen3\", " BASE_LLAMA ", \"layer_types\": [\"full_attention\", \"full_attention\"]}",
    };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        int rc = dt_model_from_config_json(same[i], "same", &b, &err);
        if (rc) fprintf(stderr, "%s: %s\n", same[i], err.msg);
        CHECK_EQ_I64(rc, DT_OK);
    }
    /* every catalog config still resolves */
    for (int i = 0; i < dt_model_catalog_count(); i++) {
        dt_vlm v;   /* LLaVA entries: their language model */
        int rc = dt_model_resolve_vlm(dt_model_catalog_name(i), &b, &v, &err);
        if (rc) fprintf(stderr, "catalog %s: %s\n", dt_model_catalog_name(i), err.msg);
        CHECK_EQ_I64(rc, DT_OK);
    }

    /* dt_model_validate on hand-made shapes */
    CHECK_EQ_I64(dt_model_resolve("llama-tiny", &a, &err), DT_OK);
    b = a;
    b.n_kv_head = 3;
    CHECK_EQ_I64(dt_model_validate(&b, &err), DT_EINVAL);
    b = a;
    b.n_layer = 0;
    CHECK_EQ_I64(dt_model_validate(&b, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "n_layer") != NULL);
    b = a;
    b.rope_theta = 0;
    CHECK_EQ_I64(dt_model_validate(&b, &err), DT_EINVAL);
    CHECK_EQ_I64(dt_model_resolve("gpt2-tiny", &a, &err), DT_OK);
    b = a;
    b.head_dim = 8;
    CHECK_EQ_I64(dt_model_validate(&b, &err), DT_EINVAL);
    b = a;   /* gpt2 is always tied: dt_model_validate is where plans are checked too */
    b.tied_embeddings = 0;
    CHECK_EQ_I64(dt_model_validate(&b, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "tied_embeddings = false, but gpt2 always ties lm_head to wte") != NULL);
    b = a;   /* gpt2 has learned positions: no RoPE scaling */
    b.rope_scaling.type = DT_ROPE_LINEAR;
    b.rope_scaling.factor = 2;
    CHECK_EQ_I64(dt_model_validate(&b, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "rope_scaling is \"linear\", but gpt2 has learned positions") != NULL);
    b = a;
    b.rope_scaling.factor = 2;   /* default with a parameter */
    CHECK_EQ_I64(dt_model_validate(&b, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "rope_scaling: rope_type \"default\" has no factor") != NULL);
    /* the ranges, as a plan's model meets them */
    CHECK_EQ_I64(dt_model_resolve("llama-3.1-8b", &a, &err), DT_OK);
    CHECK_EQ_I64(dt_model_validate(&a, &err), DT_OK);
    static const struct { dt_rope_param p; double v; const char *needle; } ranges[] = {
        {DT_ROPE_FACTOR, 0.99, "rope_scaling: factor must be a number >= 1"},
        {DT_ROPE_LOW_FREQ_FACTOR, -1, "rope_scaling: low_freq_factor must be a number > 0"},
        {DT_ROPE_HIGH_FREQ_FACTOR, 1, "rope_scaling: high_freq_factor (1) must be greater than low_freq_factor (1)"},
        {DT_ROPE_ORIGINAL_MAX_POS, 0, "rope_scaling: original_max_position_embeddings must be in 1..131072"},
        {DT_ROPE_ORIGINAL_MAX_POS, 131073, "original_max_position_embeddings must be in 1..131072"},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        b = a;
        switch (ranges[i].p) {
        case DT_ROPE_FACTOR: b.rope_scaling.factor = ranges[i].v; break;
        case DT_ROPE_LOW_FREQ_FACTOR: b.rope_scaling.low_freq_factor = ranges[i].v; break;
        case DT_ROPE_HIGH_FREQ_FACTOR: b.rope_scaling.high_freq_factor = ranges[i].v; break;
        default: b.rope_scaling.original_max_pos = (int64_t)ranges[i].v; break;
        }
        CHECK_EQ_I64(dt_model_validate(&b, &err), DT_EINVAL);
        if (!strstr(err.msg, ranges[i].needle)) fprintf(stderr, "got '%s', wanted '%s'\n", err.msg, ranges[i].needle);
        CHECK(strstr(err.msg, ranges[i].needle) != NULL);
    }
    b = a;   /* linear has no low/high/original */
    b.rope_scaling.type = DT_ROPE_LINEAR;
    CHECK_EQ_I64(dt_model_validate(&b, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "rope_type \"linear\" has no low_freq_factor") != NULL);
    CHECK(dt_rope_type_uses(DT_ROPE_DYNAMIC, DT_ROPE_ORIGINAL_MAX_POS) && !dt_rope_type_uses(DT_ROPE_DYNAMIC, DT_ROPE_LOW_FREQ_FACTOR));
    CHECK_STR(dt_rope_param_key(DT_ROPE_ORIGINAL_MAX_POS), "original_max_position_embeddings");

    TEST_MAIN_END();
}
