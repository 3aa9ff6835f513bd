/* test_adapter.c — PEFT LoRA adapters in and out, and their merge (engine/store/dt_adapter.h),
 * against the files PEFT 0.21.2 + transformers 5.24 wrote (scripts/gen_adapter_goldens.py,
 * tests/engine/golden/adapter/{llama,qwen3,gpt2}):
 *   - dt_adapter_read reads PEFT's adapter: config (r, alpha, rsLoRA, modules_to_save, family),
 *     every tensor under its engine name with PEFT's bytes;
 *   - dt_adapter_write of those tensors, read back, is the same adapter; its files carry every
 *     key PEFT's adapter_config.json has and the same safetensors keys;
 *   - dt_adapter_check_model accepts the base's model and refuses another;
 *   - dt_adapter_merge gives PEFT's merge_and_unload bit for bit: fp32 (our dot product is
 *     the fp32 FMA chain torch's CPU GEMM computes, adapter_merge.c), the fp32 merge rounded to
 *     bf16, and a bf16 base; an adapter fingerprinted on one base is refused on a base with one
 *     changed bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "adapter_internal.h"
#include "dt_adapter.h"
#include "dt_dtype.h"
#include "dt_json.h"
#include "dt_model.h"
#include "dt_safetensors.h"
#include "dt_test.h"

static const char *G;   /* tests/engine/golden/adapter */
static char TMP[256];

static void path2(char *out, size_t n, const char *c, const char *rest) { snprintf(out, n, "%s/%s/%s", G, c, rest); }

/* 1. PEFT's adapter, read */
static void test_read_peft(void) {
    const char *cases[] = {"llama", "qwen3", "gpt2"};
    const int ntensors[] = {29, 28, 16};   /* 14 / 14 / 8 adapted linears x 2, + lm_head saved (llama) */
    for (int c = 0; c < 3; c++) {
        char dir[512], wpath[600];
        path2(dir, sizeof dir, cases[c], "adapter");
        dt_adapter *a = NULL;
        dt_error err = {0};
        int rc = dt_adapter_read(dir, &a, &err);
        if (rc) fprintf(stderr, "%s\n", err.msg);
        CHECK(rc == DT_OK);
        if (rc) continue;
        const dt_adapter_config *cfg = dt_adapter_cfg(a);
        CHECK_EQ_I64(cfg->ft.lora_rank, 8);
        CHECK_NEAR(cfg->ft.lora_alpha, 16.0, 0);
        CHECK_EQ_I64(cfg->ft.use_rslora, c == 1);
        CHECK_EQ_I64(cfg->family, c == 2 ? DT_FAMILY_GPT2 : DT_FAMILY_LLAMA);
        CHECK_EQ_I64(cfg->ft.modules_to_save.n, c == 0);
        CHECK_NEAR(dt_adapter_scale(a), c == 1 ? 16.0 / sqrt(8.0) : 2.0, 1e-15);
        CHECK_EQ_I64(dt_adapter_count(a), ntensors[c]);
        const char *name = c == 2 ? "h.1.mlp.c_proj.lora_A.weight" : "model.layers.1.mlp.down_proj.lora_A.weight";
        const char *key = c == 2 ? "base_model.model.transformer.h.1.mlp.c_proj.lora_A.weight"
                                 : "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight";
        const dt_adapter_entry *e = dt_adapter_find(a, name);
        CHECK(e != NULL);
        snprintf(wpath, sizeof wpath, "%s/adapter_model.safetensors", dir);
        dt_st_file *f = NULL;
        CHECK(dt_st_open(wpath, &f, &err) == DT_OK);
        const dt_st_tensor *t = f ? dt_st_find(f, key) : NULL;
        CHECK(t != NULL);
        if (e && t) {
            CHECK_EQ_I64(e->kind, DT_ADAPTER_LORA_A);
            CHECK_EQ_I64(e->shape[0], 8);
            CHECK_EQ_I64(e->shape[1], c == 2 ? 64 : 32);   /* in = 4C (gpt2 mlp) / intermediate 32 */
            CHECK(memcmp(e->data, dt_st_data(f, t), t->end - t->begin) == 0);
        }
        if (c == 0) {
            const dt_adapter_entry *s = dt_adapter_find(a, "lm_head.weight");
            CHECK(s && s->kind == DT_ADAPTER_SAVED && s->shape[0] == 64 && s->shape[1] == 16);
        }
        dt_st_close(f);
        dt_adapter_free(a);
    }
}

/* The keys of a JSON object file. */
static cJSON *read_json(const char *path) {
    char *text = NULL;
    size_t len = 0;
    dt_error err = {0};
    if (dt_json_read_file(path, &text, &len, &err)) return NULL;
    cJSON *r = cJSON_Parse(text);
    free(text);
    return r;
}

/* 2. our writer: PEFT's tensors written and read back */
static void roundtrip(const char *cs) {
    char dir[512], base[512], out[600];
    path2(dir, sizeof dir, cs, "adapter");
    path2(base, sizeof base, cs, "base");
    snprintf(out, sizeof out, "%s/rt_%s", TMP, cs);
    dt_adapter *a = NULL, *b = NULL;
    dt_error err = {0};
    CHECK(dt_adapter_read(dir, &a, &err) == DT_OK);
    if (!a) return;
    int n = dt_adapter_count(a);
    dt_adapter_tensor *t = calloc((size_t)n, sizeof *t);
    float **bufs = calloc((size_t)n, sizeof *bufs);
    for (int i = 0; i < n; i++) {
        const dt_adapter_entry *e = dt_adapter_get(a, i);
        bufs[i] = malloc((size_t)(e->shape[0] * e->shape[1]) * sizeof(float));
        dt_adapter_entry_f32(e, bufs[i]);
        t[i] = (dt_adapter_tensor){e->name, e->ndim, {e->shape[0], e->shape[1]}, bufs[i]};
    }
    dt_adapter_config cfg = *dt_adapter_cfg(a);
    snprintf(cfg.base_model, sizeof cfg.base_model, "tiny-%s", cs);
    CHECK(dt_adapter_base_fingerprint(base, cfg.base_fingerprint, &err) == DT_OK);
    CHECK_EQ_I64((long long)strlen(cfg.base_fingerprint), 64);
    int rc = dt_adapter_write(out, &cfg, t, n, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    CHECK(rc == DT_OK);
    /* never into a directory that holds something */
    CHECK(dt_adapter_write(out, &cfg, t, n, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "already exists") != NULL);
    rc = dt_adapter_read(out, &b, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    CHECK(rc == DT_OK);
    if (b) {
        const dt_adapter_config *c2 = dt_adapter_cfg(b);
        CHECK_EQ_I64(c2->ft.lora_rank, cfg.ft.lora_rank);
        CHECK_NEAR(c2->ft.lora_alpha, cfg.ft.lora_alpha, 0);
        CHECK_EQ_I64(c2->ft.use_rslora, cfg.ft.use_rslora);
        CHECK_EQ_I64(c2->family, cfg.family);
        CHECK_EQ_I64(c2->ft.modules_to_save.n, cfg.ft.modules_to_save.n);
        CHECK_STR(c2->base_model, cfg.base_model);
        CHECK_STR(c2->base_fingerprint, cfg.base_fingerprint);
        CHECK_EQ_I64(dt_adapter_count(b), n);
        for (int i = 0; i < n; i++) {
            const dt_adapter_entry *e = dt_adapter_get(a, i), *f = dt_adapter_find(b, e->name);
            CHECK(f != NULL);
            if (f) CHECK(f->shape[0] == e->shape[0] && f->shape[1] == e->shape[1] &&
                         !memcmp(f->data, e->data, (size_t)(e->shape[0] * e->shape[1]) * sizeof(float)));
        }
    }
    /* every key PEFT's adapter_config.json has, with the same values for the ones that matter */
    char p1[700], p2[700];
    snprintf(p1, sizeof p1, "%s/adapter_config.json", dir);
    snprintf(p2, sizeof p2, "%s/adapter_config.json", out);
    cJSON *peft = read_json(p1), *ours = read_json(p2);
    CHECK(peft && ours);
    for (cJSON *it = peft ? peft->child : NULL; ours && it; it = it->next) {
        cJSON *o = cJSON_GetObjectItemCaseSensitive(ours, it->string);
        if (!o) fprintf(stderr, "%s: our adapter_config.json lacks '%s'\n", cs, it->string);
        CHECK(o != NULL);
        const char *same[] = {"peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "use_rslora",
                              "fan_in_fan_out", "bias", "modules_to_save", "inference_mode", "use_dora"};
        for (size_t k = 0; o && k < sizeof same / sizeof *same; k++)
            if (!strcmp(it->string, same[k])) CHECK(cJSON_Compare(it, o, 1));
    }
    /* target_modules: the same set of module paths PEFT wrote for all-linear (gpt2: its list) */
    cJSON *tp = cJSON_GetObjectItemCaseSensitive(peft, "target_modules"),
          *to = cJSON_GetObjectItemCaseSensitive(ours, "target_modules");
    CHECK(cJSON_IsArray(to));
    if (strcmp(cs, "gpt2")) {
        CHECK_EQ_I64(cJSON_GetArraySize(to), cJSON_GetArraySize(tp));
        cJSON *x;
        cJSON_ArrayForEach(x, tp) {
            int found = 0;
            cJSON *y;
            cJSON_ArrayForEach(y, to) found |= !strcmp(x->valuestring, y->valuestring);
            CHECK(found);
        }
    }
    cJSON_Delete(peft), cJSON_Delete(ours);
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs), free(t);
    dt_adapter_free(a), dt_adapter_free(b);
}

/* 2b. the writer's refusals: one line each, nothing written */
static void test_write_refusals(void) {
    char out[600];
    snprintf(out, sizeof out, "%s/bad_write", TMP);
    float a[8 * 16] = {0}, b[32 * 8] = {0};
    dt_adapter_config cfg = {0};
    dt_finetune_defaults(DT_FT_LORA, &cfg.ft);
    cfg.family = DT_FAMILY_LLAMA;
    dt_adapter_tensor good[2] = {{"model.layers.0.mlp.up_proj.lora_A.weight", 2, {8, 16}, a},
                                 {"model.layers.0.mlp.up_proj.lora_B.weight", 2, {32, 8}, b}};
    struct {
        dt_adapter_tensor t[2];
        int n;
        int method;
        const char *want;
    } cases[] = {
        {{{"model.layers.0.mlp.up_proj.weight", 2, {32, 16}, b}}, 1, DT_FT_LORA, "neither a lora_A"},
        {{{"model.layers.0.mlp.up_proj.lora_A.weight", 2, {8, 16}, a}}, 1, DT_FT_LORA, "no lora_B"},
        {{{"model.layers.0.mlp.up_proj.lora_A.weight", 2, {4, 32}, a}, good[1]}, 2, DT_FT_LORA, "r = 8"},
        {{{"h.0.attn.c_attn.lora_A.weight", 2, {8, 16}, a}, {"h.0.attn.c_attn.lora_B.weight", 2, {32, 8}, b}}, 2,
         DT_FT_LORA, "llama has no linear 'h.0.attn.c_attn'"},
        {{good[0], good[1]}, 2, DT_FT_FULL, "not lora / qlora"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dt_error err = {0};
        cfg.ft.method = (dt_ft_method)cases[i].method;
        CHECK(dt_adapter_write(out, &cfg, cases[i].t, cases[i].n, &err) == DT_EINVAL);
        if (!strstr(err.msg, cases[i].want)) fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, err.msg, cases[i].want);
        CHECK(strstr(err.msg, cases[i].want) != NULL);
        struct stat st;
        CHECK(stat(out, &st) != 0);
    }
    cfg.ft.method = DT_FT_LORA;
    cfg.ft.lora_rank = 0;
    dt_error err = {0};
    CHECK(dt_adapter_write(out, &cfg, good, 2, &err) == DT_EINVAL);
}

/* 3. against the plan's model */
static void test_check_model(void) {
    char cfgp[512], dir[512];
    dt_model m, other;
    dt_error err = {0};
    path2(cfgp, sizeof cfgp, "qwen3", "base/config.json");
    CHECK(dt_model_resolve(cfgp, &m, &err) == DT_OK);
    path2(cfgp, sizeof cfgp, "gpt2", "base/config.json");
    CHECK(dt_model_resolve(cfgp, &other, &err) == DT_OK);
    path2(dir, sizeof dir, "qwen3", "adapter");
    dt_adapter *a = NULL;
    CHECK(dt_adapter_read(dir, &a, &err) == DT_OK);
    if (!a) return;
    int rc = dt_adapter_check_model(a, &m, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    CHECK(rc == DT_OK);
    CHECK(dt_adapter_check_model(a, &other, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "gpt2") != NULL);
    /* a narrower model: q_proj's in differs */
    dt_model narrow = m;
    narrow.hidden = 32;
    CHECK(dt_adapter_check_model(a, &narrow, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "trained on another model") != NULL || strstr(err.msg, "needs") != NULL);
    /* fewer blocks than the adapter adapts */
    dt_model shallow = m;
    shallow.n_layer = 1;
    CHECK(dt_adapter_check_model(a, &shallow, &err) == DT_EINVAL);
    dt_adapter_free(a);
    /* the other two goldens against their own models: gpt2 (Conv1D) and llama with a saved lm_head */
    const char *others[] = {"gpt2", "llama"};
    for (int c = 0; c < 2; c++) {
        path2(cfgp, sizeof cfgp, others[c], "base/config.json");
        path2(dir, sizeof dir, others[c], "adapter");
        a = NULL;
        CHECK(dt_model_resolve(cfgp, &m, &err) == DT_OK);
        CHECK(dt_adapter_read(dir, &a, &err) == DT_OK);
        rc = a ? dt_adapter_check_model(a, &m, &err) : DT_EINVAL;
        if (rc) fprintf(stderr, "%s: %s\n", others[c], err.msg);
        CHECK(rc == DT_OK);
        dt_adapter_free(a);
    }
}

/* The float tensors of a directory's safetensors (read through dt_hfw). */
static float *tensor_f32(const dt_hfw *w, const char *name, int64_t *numel) {
    const dt_hfw_entry *e = dt_hfw_find(w, name);
    if (!e) return NULL;
    *numel = (int64_t)dt_st_numel(e->t);
    float *out = malloc((size_t)*numel * sizeof *out);
    const void *p = dt_st_data(w->files[e->file], e->t);
    for (int64_t i = 0; i < *numel; i++)
        out[i] = !strcmp(e->t->dtype, "F32") ? ((const float *)p)[i] : dt_bf16_to_f32(((const uint16_t *)p)[i]);
    return out;
}

/* 4. merge = PEFT's merge_and_unload */
static void merge_case(const char *cs) {
    char base[512], ad[512], gold[512], out[600], outb[600], goldb[600];
    path2(base, sizeof base, cs, "base");
    path2(ad, sizeof ad, cs, "adapter");
    path2(gold, sizeof gold, cs, "merged");
    snprintf(out, sizeof out, "%s/merged_%s", TMP, cs);
    snprintf(outb, sizeof outb, "%s/merged_bf16_%s", TMP, cs);
    dt_error err = {0};
    dt_merge_opts o = {.max_shard_bytes = 20000, .out_dtype = -1};
    int rc = dt_adapter_merge(base, ad, out, &o, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    CHECK(rc == DT_OK);
    dt_merge_opts ob = {.max_shard_bytes = 5000000000LL, .out_dtype = DT_DTYPE_BF16};
    CHECK(dt_adapter_merge(base, ad, outb, &ob, &err) == DT_OK);
    dt_hfw *wo = NULL, *wg = NULL, *wb = NULL, *wob = NULL, *wbase = NULL;
    dt_adapter *a = NULL;
    CHECK(dt_hfw_open(out, &wo, &err) == DT_OK);
    CHECK(dt_hfw_open(gold, &wg, &err) == DT_OK);
    CHECK(dt_hfw_open(base, &wbase, &err) == DT_OK);
    CHECK(dt_adapter_read(ad, &a, &err) == DT_OK);
    if (!wo || !wg || !a || !wbase) return;
    CHECK(wo->nfiles > 1);   /* sharded at 20 KB, with an index */
    CHECK_EQ_I64(wo->n, wg->n);
    int changed = 0, differ = 0;
    for (int i = 0; i < wg->n; i++) {
        const char *name = wg->by_name[i].t->name;
        int64_t n1 = 0, n2 = 0, n3 = 0;
        float *x = tensor_f32(wo, name, &n1), *y = tensor_f32(wg, name, &n2), *w0 = tensor_f32(wbase, name, &n3);
        CHECK(x && y && n1 == n2);
        if (!x || !y || n1 != n2) {
            free(x), free(y), free(w0);
            continue;
        }
        for (int64_t k = 0; k < n1; k++) {
            if (memcmp(&x[k], &y[k], sizeof x[k])) {
                fprintf(stderr, "%s %s[%lld]: ours %.9g, PEFT %.9g\n", cs, name, (long long)k, x[k], y[k]);
                differ++;
            }
            changed += w0 && x[k] != w0[k];
        }
        free(x), free(y), free(w0);
    }
    CHECK(changed > 1000);   /* the merge changed the weights */
    CHECK_EQ_I64(differ, 0);
    printf("%s: merged fp32 bit-equal to PEFT's (%d elements changed by the merge)\n", cs, changed);
    /* bf16: bit-equal to PEFT's merged model .to(bfloat16) */
    snprintf(goldb, sizeof goldb, "%s/%s/merged_bf16.safetensors", G, cs);
    dt_st_file *gb = NULL;
    CHECK(dt_hfw_open(outb, &wob, &err) == DT_OK);
    CHECK(dt_st_open(goldb, &gb, &err) == DT_OK);
    if (wob && gb) {
        CHECK_EQ_I64(wob->nfiles, 1);
        CHECK_EQ_I64(wob->n, dt_st_count(gb));
        for (int i = 0; i < dt_st_count(gb); i++) {
            const dt_st_tensor *t = dt_st_get(gb, i);
            const dt_hfw_entry *e = dt_hfw_find(wob, t->name);
            CHECK(e && !strcmp(e->t->dtype, "BF16") && e->t->end - e->t->begin == t->end - t->begin);
            if (e && memcmp(dt_st_data(wob->files[e->file], e->t), dt_st_data(gb, t), t->end - t->begin)) {
                fprintf(stderr, "%s: bf16 '%s' differs from PEFT's\n", cs, t->name);
                CHECK(0);
            }
        }
    }
    dt_st_close(gb);
    (void)wb;
    dt_hfw_close(wo), dt_hfw_close(wg), dt_hfw_close(wob), dt_hfw_close(wbase);
    dt_adapter_free(a);
}

/* 4b. a bf16 base (PEFT's default fp32 adapters, a bf16 lm_head copy): the merge, in the base's
 * dtype, is bit-equal to PEFT's bf16 merged model (torch's bf16 += fp32 delta rounds once, as we do) */
static void merge_bf16_base(void) {
    char base[512], ad[512], gold[512], out[600];
    path2(base, sizeof base, "llama_bf16", "base");
    path2(ad, sizeof ad, "llama_bf16", "adapter");
    path2(gold, sizeof gold, "llama_bf16", "merged");
    snprintf(out, sizeof out, "%s/merged_llama_bf16", TMP);
    dt_error err = {0};
    dt_adapter *a = NULL;
    CHECK(dt_adapter_read(ad, &a, &err) == DT_OK);
    const dt_adapter_entry *saved = a ? dt_adapter_find(a, "lm_head.weight") : NULL;
    CHECK(saved && !strcmp(saved->dtype, "BF16"));
    dt_adapter_free(a);
    dt_merge_opts o = {.max_shard_bytes = 5000000000LL, .out_dtype = -1};
    int rc = dt_adapter_merge(base, ad, out, &o, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    CHECK(rc == DT_OK);
    dt_hfw *wo = NULL, *wg = NULL, *wb = NULL;
    CHECK(dt_hfw_open(out, &wo, &err) == DT_OK);
    CHECK(dt_hfw_open(gold, &wg, &err) == DT_OK);
    CHECK(dt_hfw_open(base, &wb, &err) == DT_OK);
    int differ = 0, changed = 0;
    for (int i = 0; wo && wg && wb && i < wg->n; i++) {
        const dt_st_tensor *t = wg->by_name[i].t;
        const dt_hfw_entry *e = dt_hfw_find(wo, t->name), *b = dt_hfw_find(wb, t->name);
        CHECK(e && b && !strcmp(e->t->dtype, "BF16") && e->t->end - e->t->begin == t->end - t->begin);
        if (!e || !b) continue;
        const void *x = dt_st_data(wo->files[e->file], e->t);
        differ += memcmp(x, dt_st_data(wg->files[wg->by_name[i].file], t), t->end - t->begin) != 0;
        changed += memcmp(x, dt_st_data(wb->files[b->file], b->t), t->end - t->begin) != 0;
    }
    CHECK_EQ_I64(differ, 0);
    CHECK_EQ_I64(changed, 15);   /* 14 adapted linears + lm_head */
    dt_hfw_close(wo), dt_hfw_close(wg), dt_hfw_close(wb);
}

/* 5. the fingerprint: the same base passes (roundtrip wrote it); one changed byte is refused */
static void test_fingerprint(void) {
    char src[512], dir[600], path[700], ad[600], out[600];
    path2(src, sizeof src, "llama", "base/model.safetensors");
    snprintf(dir, sizeof dir, "%s/otherbase", TMP);
    mkdir(dir, 0755);
    dt_error err = {0};
    char *buf = NULL;
    size_t len = 0;
    CHECK(dt_file_read(src, "base", 1 << 20, &buf, &len, &err) == DT_OK);
    if (!buf) return;
    buf[len - 3] ^= 1;   /* a bit of the last tensor's data */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(dt_write_file_atomic(path, buf, len, &err) == DT_OK);
    free(buf);
    path2(src, sizeof src, "llama", "base/config.json");
    CHECK(dt_file_read(src, "config", 1 << 20, &buf, &len, &err) == DT_OK);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(dt_write_file_atomic(path, buf, len, &err) == DT_OK);
    free(buf);
    snprintf(ad, sizeof ad, "%s/rt_llama", TMP);
    snprintf(out, sizeof out, "%s/fp_out", TMP);
    dt_merge_opts o = {.max_shard_bytes = 5000000000LL, .out_dtype = -1};
    CHECK(dt_adapter_merge(dir, ad, out, &o, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "another base") != NULL);
    struct stat st;
    CHECK(stat(out, &st) != 0);   /* nothing written */
    path2(src, sizeof src, "llama", "base");
    CHECK(dt_adapter_merge(src, ad, out, &o, &err) == DT_OK);   /* its own base: accepted */
    /* dt_adapter_check_base, what the trainer runs for --init HFDIR --init-adapter DIR */
    dt_adapter *a = NULL;
    CHECK(dt_adapter_read(ad, &a, &err) == DT_OK);
    if (a) {
        CHECK(dt_adapter_check_base(a, src, &err) == DT_OK);
        CHECK(dt_adapter_check_base(a, dir, &err) == DT_EINVAL);
        CHECK(strstr(err.msg, "another base") != NULL);
        path2(src, sizeof src, "qwen3", "base");
        CHECK(dt_adapter_check_base(a, src, &err) == DT_EINVAL);   /* other shapes */
        CHECK(strstr(err.msg, "trained on another model") != NULL);
        dt_adapter_free(a);
    }
}

/* 6. a GPT-2 base with GPT2Model's bare keys ("h.0.attn.c_attn.weight", as openai-community/gpt2
 * ships them) takes PEFT's adapter (keys "...transformer.h.0...") and merges to the same values */
static void test_bare_gpt2(void) {
    char src[512], dir[600], path[700], out[600], ad[512], gold[512];
    path2(src, sizeof src, "gpt2", "base/model.safetensors");
    path2(ad, sizeof ad, "gpt2", "adapter");
    path2(gold, sizeof gold, "gpt2", "merged");
    snprintf(dir, sizeof dir, "%s/bare_gpt2", TMP);
    snprintf(out, sizeof out, "%s/bare_gpt2_merged", TMP);
    mkdir(dir, 0755);
    dt_error err = {0};
    dt_st_file *f = NULL;
    CHECK(dt_st_open(src, &f, &err) == DT_OK);
    if (!f) return;
    dt_st_writer *w = dt_st_writer_new();
    for (int i = 0; i < dt_st_count(f); i++) {
        const dt_st_tensor *t = dt_st_get(f, i);
        const char *bare = strncmp(t->name, "transformer.", 12) ? t->name : t->name + 12;
        CHECK(dt_st_writer_add(w, bare, t->dtype, t->ndim, t->shape, dt_st_data(f, t), &err) == DT_OK);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(dt_st_write(w, path, &err) == DT_OK);
    dt_st_writer_free(w);
    dt_st_close(f);
    char *buf = NULL;
    size_t len = 0;
    path2(src, sizeof src, "gpt2", "base/config.json");
    CHECK(dt_file_read(src, "config", 1 << 20, &buf, &len, &err) == DT_OK);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(buf && dt_write_file_atomic(path, buf, len, &err) == DT_OK);
    free(buf);
    dt_merge_opts o = {.max_shard_bytes = 5000000000LL, .out_dtype = -1};
    int rc = dt_adapter_merge(dir, ad, out, &o, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    CHECK(rc == DT_OK);
    dt_hfw *wo = NULL, *wg = NULL;
    CHECK(dt_hfw_open(out, &wo, &err) == DT_OK);
    CHECK(dt_hfw_open(gold, &wg, &err) == DT_OK);
    int differ = 0;
    for (int i = 0; wo && wg && i < wg->n; i++) {
        const dt_st_tensor *t = wg->by_name[i].t;
        const dt_hfw_entry *e = dt_hfw_find(wo, t->name + 12);   /* "transformer." dropped */
        CHECK(e != NULL);
        if (e) differ += memcmp(dt_st_data(wo->files[e->file], e->t), dt_st_data(wg->files[wg->by_name[i].file], t),
                                t->end - t->begin) != 0;
    }
    CHECK_EQ_I64(differ, 0);
    dt_hfw_close(wo), dt_hfw_close(wg);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_adapter GOLDEN_DIR\n");
        return 2;
    }
    G = argv[1];
    /* DT_ADAPTER_KEEP=DIR (a new directory): the files are written there and kept, for
     * scripts/check_adapter_peft.py (PEFT loads the adapters dt_adapter_write wrote: rt_<case>) */
    const char *keep = getenv("DT_ADAPTER_KEEP");
    snprintf(TMP, sizeof TMP, "%s", keep ? keep : "/tmp/dt_test_adapter_XXXXXX");
    if (keep ? mkdir(TMP, 0755) != 0 : !mkdtemp(TMP)) {
        fprintf(stderr, "cannot create %s\n", TMP);
        return 1;
    }
    test_read_peft();
    roundtrip("llama");
    roundtrip("qwen3");
    roundtrip("gpt2");
    test_write_refusals();
    test_check_model();
    merge_case("llama");
    merge_case("qwen3");
    merge_case("gpt2");
    merge_bf16_base();
    test_fingerprint();
    test_bare_gpt2();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", TMP);
    if (!keep && system(cmd)) fprintf(stderr, "cannot remove %s\n", TMP);
    TEST_MAIN_END();
}
