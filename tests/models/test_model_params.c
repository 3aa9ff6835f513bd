/* Exact parameter counts of every catalog entry against the published table
 * (docs/models.md "Catalog": counts from each model's HF config.json), largest
 * modules, derived shapes, FLOPs. */
#include <stdint.h>

#include "dt_model.h"
#include "dt_vision.h"
#include "dt_test.h"

/* The embedded files (cmake/EmbedFiles.cmake), to check names against file stems. */
typedef struct { const char *name; const char *text; } dt_embedded_file;
extern const dt_embedded_file dt_catalog_files[];

typedef struct {
    const char *name;
    int64_t params;        /* exact published / architecture count */
    int64_t largest;       /* DeepSpeed model_to_params' largest module; 0 = not tabulated */
    double published_b;    /* the publisher's rounded figure in billions (docs/models.md "Catalog"); 0 = none */
    double unit_b;         /* its last digit's unit: the exact count must round to the figure */
} expect_t;

/* The tiny models' counts are computed by hand from the formulas of docs/models.md,
 * "Parameter counts":
 *   gpt2-tiny  : V·h + P·h + L(12h² + 13h) + 2h with V 256, P 64, h 64, L 2
 *              = 16384 + 4096 + 2·(49152 + 832) + 128 = 120,576
 *   gpt2-small-test: 32768 + 16384 + 4·(196608 + 1664) + 256 = 842,496
 *   llama-tiny : h 64, a 4, k 2, d 16, f 176, V 256, untied:
 *                per layer 64·64 + 2·64·32 + 64·64 + 3·64·176 + 2·64 = 46,208;
 *                total 2·46208 + 64 + 2·256·64 = 125,248
 *   qwen3-tiny : h 64, a 4, k 2, d 32, f 128, V 256, tied, q/k norm:
 *                per layer 64·128 + 2·64·64 + 128·64 + 2·32 + 3·64·128 + 2·64 = 49,344;
 *                total 2·49344 + 64 + 256·64 = 115,136 */
static const expect_t expected[] = {
    {"gpt2", 124439808, 38597376, 0, 0},               /* 50257·768 */
    {"gpt2-medium", 354823168, 51463168, 0, 0},        /* 50257·1024 */
    {"gpt2-large", 774030080, 64328960, 0, 0},
    {"gpt2-xl", 1557611200, 80411200, 0, 0},
    {"qwen3-0.6b", 596049920, 155582464, 0.6, 0.1},    /* model card: 0.6B */
    {"qwen3-1.7b", 1720574976, 311164928, 1.7, 0.1},   /* model card: 1.7B (non-embedding 1.4B) */
    {"qwen3-4b", 4022468096, 388956160, 4.02, 0.01},   /* hub: 4.02B */
    {"qwen3-8b", 8190735360, 622329856, 8.2, 0.1},     /* model card: 8.2B */
    {"qwen3-14b", 14768307200, 777912320, 14.8, 0.1},  /* model card: 14.8B */
    {"qwen3-32b", 32762123264, 777912320, 32.8, 0.1},  /* model card: 32.8B */
    {"qwen2.5-0.5b", 494032768, 136134656, 0.494, 0.001},   /* hub: 494M (card 0.49B) */
    {"qwen2.5-1.5b", 1543714304, 233373696, 1.54, 0.01},
    {"qwen2.5-3b", 3085938688, 311164928, 3.09, 0.01},
    {"qwen2.5-7b", 7615616512, 544997376, 7.62, 0.01},      /* hub: 7.62B (card 7.61B) */
    {"qwen2.5-14b", 14770033664, 778567680, 14.8, 0.1},
    {"qwen2.5-32b", 32763876352, 778567680, 32.8, 0.1},     /* hub: 32.8B (card 32.5B) */
    {"qwen2.5-72b", 72706203648, 1245708288, 72.7, 0.1},
    {"llama-2-7b", 6738415616, 131072000, 6.74, 0.01},
    {"llama-2-13b", 13015864320, 163840000, 13.0, 0.1},
    {"llama-2-70b", 68976648192, 262144000, 69.0, 0.1},
    {"llama-3.1-8b", 8030261248, 525336576, 8.03, 0.01},    /* 128256·4096 */
    {"llama-3.1-70b", 70553706496, 1050673152, 70.6, 0.1},
    {"llama-3.1-405b", 405853388800, 2101346304, 406, 1},
    {"llama-3.2-1b", 1235814400, 262668288, 1.24, 0.01},    /* model card: 1.23B */
    {"llama-3.2-3b", 3212749824, 394002432, 3.21, 0.01},
    {"llama-3.3-70b-instruct", 70553706496, 1050673152, 70.6, 0.1},
    {"mistral-7b-v0.3", 7248023552, 134217728, 7.25, 0.01},
    {"gpt2-tiny", 120576, 16640, 0, 0},                /* c_fc 64·256+256 > wte 256·64 */
    {"gpt2-small-test", 842496, 66048, 0, 0},         /* c_fc 128·512+512 = 66048 > wte 32768 */
    {"llama-tiny", 125248, 16384, 0, 0},
    /* LLaVA: language model + CLIP tower + projector (models/vision.c), as transformers counts
     * LlavaForConditionalGeneration (tests/models/golden/llava_counts.txt); llava-hf model cards:
     * 7.06B, 13.35B. The largest module is the language model's. */
    {"llava-1.5-7b", 7063427072, 131334144, 7.06, 0.01},
    {"llava-1.5-13b", 13351494656, 164167680, 13.35, 0.01},
    {"llava-tiny", 164000, 16384, 0, 0},
    {"qwen3-tiny", 115136, 16384, 0, 0},               /* the tied embedding */
};

int main(void) {
    dt_error err = {0};
    int n = (int)(sizeof expected / sizeof expected[0]);

    /* Every catalog entry has an expectation and vice versa. */
    CHECK_EQ_I64(dt_model_catalog_count(), n);
    for (int i = 0; i < dt_model_catalog_count(); i++) {
        const char *name = dt_model_catalog_name(i);
        int found = 0;
        for (int j = 0; j < n; j++) found |= strcmp(name, expected[j].name) == 0;
        if (!found) fprintf(stderr, "catalog entry '%s' has no expected count\n", name);
        CHECK(found);
        /* _name_or_path agrees with the file name (the embedded stem may stop at the
         * first dot: "qwen3-0.6b.json" -> "qwen3-0") */
        const char *stem = dt_catalog_files[i].name;
        if (strncmp(name, stem, strlen(stem)) != 0)
            fprintf(stderr, "catalog file '%s' says its name is '%s'\n", stem, name);
        CHECK(strncmp(name, stem, strlen(stem)) == 0);
    }
    CHECK(dt_model_catalog_name(-1) == NULL);
    CHECK(dt_model_catalog_name(n) == NULL);

    for (int j = 0; j < n; j++) {
        dt_model m;
        dt_vlm v;
        int rc = dt_model_resolve_vlm(expected[j].name, &m, &v, &err);
        if (rc) fprintf(stderr, "%s: %s\n", expected[j].name, err.msg);
        CHECK_EQ_I64(rc, DT_OK);
        if (rc) continue;
        CHECK_STR(m.name, expected[j].name);
        CHECK_EQ_I64(m.derived, 0);
        const int64_t total = dt_model_params(&m) + (dt_vlm_active(&v) ? dt_vision_tower_params(&v) +
                                                                         dt_vision_projector_params(&v, &m) : 0);
        if (total != expected[j].params) fprintf(stderr, "model %s\n", m.name);
        CHECK_EQ_I64(total, expected[j].params);
        if (expected[j].largest) CHECK_EQ_I64(dt_model_largest_module_params(&m), expected[j].largest);
        /* the exact count rounds to the publisher's figure (half a unit of its last digit) */
        if (expected[j].published_b > 0) {
            double off = fabs((double)total / 1e9 - expected[j].published_b);
            if (off > expected[j].unit_b / 2 + 1e-12)
                fprintf(stderr, "%s: %.4fB does not round to the published %gB\n", m.name,
                        (double)total / 1e9, expected[j].published_b);
            CHECK(off <= expected[j].unit_b / 2 + 1e-12);
        }
        CHECK_EQ_I64(dt_model_embedding_params(&m) + m.n_layer * dt_model_block_params(&m) +
                         dt_model_head_params(&m),
                     dt_model_params(&m));
        CHECK_EQ_I64(dt_model_validate(&m, &err), DT_OK);
    }

    /* Shape details the families depend on. */
    dt_model m;
    CHECK_EQ_I64(dt_model_resolve("Qwen2.5-32B", &m, &err), DT_OK);   /* case-insensitive */
    CHECK_STR(m.name, "qwen2.5-32b");
    CHECK(m.family == DT_FAMILY_LLAMA && m.qkv_bias == 1 && m.qk_norm == 0 && !m.tied_embeddings);
    CHECK_EQ_I64(m.head_dim, 128);
    CHECK_NEAR(m.rope_theta, 1e6, 1e-12);
    CHECK_EQ_I64(dt_model_resolve("QWEN3-0.6B", &m, &err), DT_OK);
    CHECK(m.qk_norm == 1 && m.qkv_bias == 0 && m.tied_embeddings == 1);
    CHECK_EQ_I64(m.n_kv_head, 8);
    CHECK_EQ_I64(m.n_head * m.head_dim, 2048);   /* head_dim from config, != hidden / heads */
    /* non-embedding count on the model card: 440,467,456 */
    CHECK_EQ_I64(dt_model_params(&m) - dt_model_embedding_params(&m), 440467456);
    CHECK_EQ_I64(dt_model_resolve("GPT2", &m, &err), DT_OK);
    CHECK(m.family == DT_FAMILY_GPT2 && m.tied_embeddings && m.qkv_bias);
    CHECK_EQ_I64(m.ffn, 3072);      /* n_inner null -> 4h */
    CHECK_EQ_I64(m.max_pos, 1024);
    CHECK_NEAR(m.norm_eps, 1e-5, 1e-12);
    CHECK_STR(dt_family_name(m.family), "gpt2");
    /* the names users type: Qwen2.5 / Llama-3.x / Mistral, any case */
    CHECK_EQ_I64(dt_model_resolve("qwen2.5-7b", &m, &err), DT_OK);
    CHECK(m.qkv_bias == 1 && m.n_kv_head == 4 && m.vocab == 152064);
    CHECK_EQ_I64(dt_model_resolve("Llama-3.2-1B", &m, &err), DT_OK);
    CHECK(m.tied_embeddings == 1 && m.head_dim == 64 && m.rope_scaling.type == DT_ROPE_LLAMA3);
    CHECK_NEAR(m.rope_scaling.factor, 32.0, 1e-12);
    char hub[64];
    CHECK(dt_model_catalog_hub_id("QWEN2.5-7B", hub, sizeof hub) == 1);
    CHECK_STR(hub, "Qwen/Qwen2.5-7B");
    CHECK(dt_model_catalog_hub_id("llama-3.3-70b-instruct", hub, sizeof hub) == 1);
    CHECK_STR(hub, "meta-llama/Llama-3.3-70B-Instruct");
    CHECK(dt_model_catalog_hub_id("gpt5", hub, sizeof hub) == 0);
    CHECK(dt_model_catalog_hub_id("qwen2.5-7b", hub, 4) == 0);   /* does not fit */
    CHECK_EQ_I64(dt_model_resolve("Mistral-7B-v0.3", &m, &err), DT_OK);
    CHECK(m.vocab == 32768 && m.n_kv_head == 8 && !m.qkv_bias);
    CHECK_EQ_I64(dt_model_resolve("gpt2-tiny", &m, &err), DT_OK);
    CHECK(m.n_layer == 2 && m.hidden == 64 && m.n_head == 4 && m.vocab == 256 && m.max_pos == 64);
    CHECK_EQ_I64(dt_model_resolve("llama-tiny", &m, &err), DT_OK);
    CHECK(m.n_head == 4 && m.n_kv_head == 2 && m.head_dim == 16);
    CHECK_STR(dt_family_name(m.family), "llama");

    /* Unknown names list the catalog. */
    dt_error_clear(&err);
    CHECK_EQ_I64(dt_model_resolve("gpt5", &m, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "unknown model 'gpt5'") != NULL);
    CHECK(strstr(err.msg, "qwen3-32b") != NULL && strstr(err.msg, "gpt2-medium") != NULL);
    CHECK(strchr(err.msg, '\n') == NULL);
    CHECK_EQ_I64(dt_model_resolve("", &m, &err), DT_EINVAL);

    /* FLOPs convention (docs/models.md): 3 x (2·matmul·T + L·4·T²·a·d), lm_head counted. */
    CHECK_EQ_I64(dt_model_resolve("gpt2", &m, &err), DT_OK);
    {
        double T = 1024, h = 768, L = 12, V = 50257;
        double block_mm = 12 * h * h;   /* c_attn 3h², c_proj h², c_fc 4h², mlp c_proj 4h² */
        double block = 2 * block_mm * T + 4 * T * T * h;
        CHECK_NEAR(dt_model_block_fwd_flops_per_seq(&m, 1024), block, 1e-12);
        CHECK_NEAR(dt_model_train_flops_per_seq(&m, 1024), 3 * (L * block + 2 * V * h * T), 1e-12);
    }
    CHECK_EQ_I64(dt_model_resolve("llama-2-70b", &m, &err), DT_OK);
    {
        double T = 4096, h = 8192, f = 28672, L = 80, V = 32000, q = 64 * 128, kv = 8 * 128;
        double block_mm = h * q + 2 * h * kv + q * h + 3 * h * f;
        double block = 2 * block_mm * T + 4 * T * T * q;
        CHECK_NEAR(dt_model_block_fwd_flops_per_seq(&m, 4096), block, 1e-12);
        CHECK_NEAR(dt_model_train_flops_per_seq(&m, 4096), 3 * (L * block + 2 * V * h * T), 1e-12);
        /* close to the 6·Ψ·T rule of thumb for a big model at moderate T */
        CHECK_NEAR(dt_model_train_flops_per_seq(&m, 4096), 6.0 * 68976648192.0 * 4096, 0.15);
    }

    /* Derived shapes: within 5% of the request from 125M to 175B and beyond. */
    static const double sizes[] = {100e6, 125e6, 200e6, 350e6, 760e6, 1.3e9, 2.7e9, 6.7e9, 13e9, 20e9,
                                   32e9,  50e9,  70e9,  100e9, 175e9, 400e9, 1e12};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        dt_model d;
        int rc = dt_model_for_params((int64_t)sizes[i], &d, &err);
        if (rc) fprintf(stderr, "%g: %s\n", sizes[i], err.msg);
        CHECK_EQ_I64(rc, DT_OK);
        if (rc) continue;
        CHECK(d.derived == 1 && d.family == DT_FAMILY_LLAMA);
        CHECK(strncmp(d.name, "derived-", 8) == 0);
        CHECK(dt_model_derived_source(&d) != NULL);
        CHECK_EQ_I64(dt_model_validate(&d, &err), DT_OK);
        double got = (double)dt_model_params(&d);
        if (fabs(got / sizes[i] - 1) > 0.05)
            fprintf(stderr, "derived %g -> %.0f (L %lld, h %lld)\n", sizes[i], got,
                    (long long)d.n_layer, (long long)d.hidden);
        CHECK_NEAR(got, sizes[i], 0.05);
        /* bigger requests never give smaller models (monotone) */
        if (i > 0) {
            dt_model prev;
            CHECK_EQ_I64(dt_model_for_params((int64_t)sizes[i - 1], &prev, &err), DT_OK);
            CHECK(dt_model_params(&prev) <= dt_model_params(&d));
        }
    }
    {
        /* "32B" -> the Qwen2.5-32B shape (without its q/k/v bias) */
        dt_model d;
        CHECK_EQ_I64(dt_model_for_params(INT64_C(32000000000), &d, &err), DT_OK);
        CHECK(d.hidden == 5120 && d.n_layer == 64 && d.n_head == 40 && d.n_kv_head == 8);
        CHECK(d.head_dim == 128 && d.ffn == 27648 && d.vocab == 152064 && !d.tied_embeddings);
        CHECK_STR(d.name, "derived-32.00B");
        CHECK_EQ_I64(dt_model_params(&d), INT64_C(32763876352) - 64 * (5120 + 2 * 1024));
        CHECK(strstr(dt_model_derived_source(&d), "Qwen2.5-32B") != NULL);
        /* "7B" -> Llama-2-7B unchanged */
        CHECK_EQ_I64(dt_model_for_params(INT64_C(7000000000), &d, &err), DT_OK);
        CHECK_EQ_I64(dt_model_params(&d), INT64_C(6738415616));
        CHECK_STR(dt_model_derived_source(&d), "Llama-2-7B");
        CHECK_EQ_I64(dt_model_resolve("gpt2", &d, &err), DT_OK);
        CHECK(dt_model_derived_source(&d) == NULL);
    }
    {
        /* "175B" -> GPT-3's 96 x 12288 shape, 96 heads */
        dt_model d;
        CHECK_EQ_I64(dt_model_for_params(INT64_C(175000000000), &d, &err), DT_OK);
        CHECK(d.hidden == 12288 && d.n_layer == 96 && d.n_head == 96 && d.n_kv_head == 96);
    }
    CHECK_EQ_I64(dt_model_for_params(99999999, &m, &err), DT_EINVAL);
    CHECK_EQ_I64(dt_model_for_params(1000, &m, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "--params") != NULL);
    CHECK_EQ_I64(dt_model_for_params(INT64_MAX, &m, &err), DT_EINVAL);

    TEST_MAIN_END();
}
