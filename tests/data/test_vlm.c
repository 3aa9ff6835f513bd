/* test_vlm.c — `dtrun prepare --format llava` and its loader (dt_prepare.h, dt_prepdoc.h,
 * dt_pixshard.h, docs/vlm-images.md):
 *   - every record of tests/data/llava.json against the ids Hugging Face's tokenizers give
 *     for the rendered chat with <image> an added token expanded 16 times
 *     (scripts/gen_image_goldens.py: llava-chatml.golden, llava-llama3.golden); the mask
 *     on exactly the assistants' answers and their end-of-turn tokens;
 *   - record shapes refused with one line (image count, a list of images, a bad "from");
 *   - a whole prepare read back through dt_vlm_open / dt_vlm_batch: the pixel values of an
 *     image equal the HF processor's golden bit for bit, labels are -100 on prompts, image
 *     placeholders and padding, text-only records carry no image, a sequence too short for
 *     the image is refused;
 *   - bad images under --on-bad-image stop (exit code 2's DT_EINVAL naming the record, the
 *     previous output untouched) and skip (counted); damaged pixel shards refused.
 * Usage: test_vlm SOURCE_DIR */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_file.h"
#include "dt_json.h"
#include "dt_pixshard.h"
#include "dt_prepare.h"
#include "dt_prepdoc.h"
#include "dt_test.h"
#include "dt_test_data.h"
#include "dt_tokenizer.h"

#define N_IMG 16       /* the goldens' placeholders per image */
#define QWEN_IMAGE_ID 1500
#define LLAMA_IMAGE_ID 1505

static const char *src;
static char tmp[256];

/* the n-th element of the committed list, as its bytes (cJSON printed: the same record) */
static char *record_text(const cJSON *list, int i) {
    return cJSON_PrintUnformatted(cJSON_GetArrayItem(list, i));
}

static void check_goldens(const char *tok_name, dt_chat_template tmpl, int32_t image_id, const char *golden) {
    char tp[1024], p[1024];
    dt_tokenizer *t = dt_test_load_tok(src, tok_name, tp, sizeof tp);
    dt_prepdoc_ctx ctx;
    dt_error err = {0};
    CHECK_EQ_I64(dt_prepdoc_init(&ctx, t, tp, DT_PREP_LLAVA, tmpl, &err), 0);
    ctx.image_id = image_id;
    ctx.image_tokens = N_IMG;
    size_t n;
    snprintf(p, sizeof p, "%s/tests/data/llava.json", src);
    char *json = dt_test_slurp(p, &n);
    cJSON *list = cJSON_Parse(json);
    snprintf(p, sizeof p, "%s/tests/data/%s", src, golden);
    char *gold = dt_test_slurp(p, &n);
    char *save = NULL, *line = strtok_r(gold, "\n", &save);   /* the comment line */
    int checked = 0;
    for (int i = 0; i < cJSON_GetArraySize(list); i++) {
        line = strtok_r(NULL, "\n", &save);
        CHECK(line != NULL);
        if (!line) break;
        char *rec = record_text(list, i);
        int skip = 0;
        CHECK_EQ_I64(dt_prepdoc_check_line(&ctx, rec, strlen(rec), "llava.json", 1, &skip, &err), 0);
        CHECK(skip == !strcmp(line, "skip"));
        if (!skip) {
            int32_t *ids;
            uint8_t *mask;
            size_t k, g = 0, images = 0;
            CHECK_EQ_I64(dt_prepdoc_encode(&ctx, rec, strlen(rec), 0, &ids, &mask, &k, &err), 0);
            int same = 1;
            char *s2 = NULL, *line2 = strdup(line);
            for (char *v = strtok_r(line2, " ", &s2); v; v = strtok_r(NULL, " ", &s2), g++)
                same &= g < k && atol(v) == ids[g];
            free(line2);
            if (!same || g != k) fprintf(stderr, "%s: record %d: ids differ from the golden\n", golden, i);
            CHECK(same && g == k);
            /* the trained tokens decode to the answers, each followed by its end of turn */
            const cJSON *conv = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(list, i), "conversations");
            char want[4096] = "";
            for (const cJSON *m = conv->child; m; m = m->next) {
                if (strcmp(cJSON_GetObjectItemCaseSensitive(m, "from")->valuestring, "gpt")) continue;
                const char *v = cJSON_GetObjectItemCaseSensitive(m, "value")->valuestring;
                if (tmpl == DT_CHAT_LLAMA3) {   /* the template's | trim */
                    while (*v == ' ' || *v == '\n') v++;
                    size_t l = strlen(v);
                    while (l && (v[l - 1] == ' ' || v[l - 1] == '\n')) l--;
                    strncat(want, v, l);
                    strcat(want, "<|eot_id|>");
                } else {
                    strcat(want, v);
                    strcat(want, "<|im_end|>");
                }
            }
            int32_t *trained = malloc(k * sizeof *trained);
            size_t nt = 0;
            for (size_t j = 0; j < k; j++) {
                if (mask[j]) trained[nt++] = ids[j];
                if (ids[j] == image_id) {
                    images++;
                    CHECK(mask[j] == 0);
                }
            }
            char *text;
            size_t tl;
            CHECK_EQ_I64(dt_tok_decode(t, trained, nt, &text, &tl, &err), 0);
            CHECK_STR(text, want);
            CHECK_EQ_I64(images, cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(list, i), "image") ? N_IMG : 0);
            free(text);
            free(trained);
            free(ids);
            free(mask);
            checked++;
        }
        free(rec);
    }
    CHECK_EQ_I64(checked, 5);
    cJSON_Delete(list);
    free(json);
    free(gold);
    dt_tok_free(t);
}

static void bad_record(const dt_prepdoc_ctx *ctx, const char *rec, const char *want) {
    dt_error err = {0};
    int skip;
    int rc = dt_prepdoc_check_line(ctx, rec, strlen(rec), "d.json", 9, &skip, &err);
    if (rc != DT_EINVAL || !strstr(err.msg, want) || strncmp(err.msg, "d.json:9: ", 10))
        fprintf(stderr, "record %s: expected \"%s\", got %d: %s\n", rec, want, rc, err.msg);
    CHECK(rc == DT_EINVAL && strstr(err.msg, want) && !strncmp(err.msg, "d.json:9: ", 10));
}

static void record_shapes(void) {
    char tp[1024];
    dt_tokenizer *t = dt_test_load_tok(src, "qwen2-mini.json", tp, sizeof tp);
    dt_prepdoc_ctx ctx;
    dt_error err = {0};
    CHECK_EQ_I64(dt_prepdoc_init(&ctx, t, tp, DT_PREP_LLAVA, DT_CHAT_CHATML, &err), 0);
    bad_record(&ctx, "{\"image\": \"a.jpg\", \"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}]}",
               "0 \"<image>\" for one image");
    bad_record(&ctx, "{\"conversations\": [{\"from\": \"human\", \"value\": \"<image>\"}]}", "1 \"<image>\" for no image");
    bad_record(&ctx, "{\"image\": [\"a.jpg\"], \"conversations\": []}", "one image per record");
    bad_record(&ctx, "{\"conversations\": [{\"from\": \"bot\", \"value\": \"x\"}]}", "not one of human, gpt, system");
    bad_record(&ctx, "{\"conversations\": []}", "non-empty array");
    bad_record(&ctx, "{\"image\": \"\", \"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"}]}", "an empty path");
    dt_tok_free(t);
}

/* ---------------------------------------------------------------- whole runs */

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char q[1024];
        snprintf(q, sizeof q, "%s/%s", dir, e->d_name);
        struct stat st;
        if (!lstat(q, &st) && S_ISDIR(st.st_mode)) rm_tree(q);
        else unlink(q);
    }
    closedir(d);
    rmdir(dir);
}

static void opts_for(dt_prep_opts *o, const char **in, char *tp, const char *out, const char *images) {
    dt_prep_defaults(o);
    snprintf(tp, 1024, "%s/tests/tokenizer/data/qwen2-mini.json", src);
    o->tokenizer = tp;
    o->out = out;
    o->inputs = in;
    o->n_inputs = 1;
    o->format = DT_PREP_LLAVA;
    o->image_folder = images;
    o->image_token_id = QWEN_IMAGE_ID;
    o->image_tokens = N_IMG;
    o->val_fraction = 0;
    o->threads = 2;
    o->clip.shortest_edge = 64;   /* the goldens' s64c56 setting */
    o->clip.crop_height = o->clip.crop_width = 56;
}

static void whole_run(void) {
    char in[1024], images[1024], out[512], tp[1024];
    snprintf(in, sizeof in, "%s/tests/data/llava.json", src);
    snprintf(images, sizeof images, "%s/tests/data/images", src);
    snprintf(out, sizeof out, "%s/out", tmp);
    const char *inputs[1] = {in};
    dt_prep_opts o;
    opts_for(&o, inputs, tp, out, images);
    o.shard_tokens = 60;   /* several shards; documents never split */
    dt_prep_result r;
    dt_error err = {0};
    int rc = dt_prepare(&o, &r, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    CHECK_EQ_I64(rc, 0);
    CHECK_EQ_I64(r.docs[0], 5);
    CHECK_EQ_I64(r.images[0], 4);
    CHECK_EQ_I64(r.skipped_docs, 1);
    CHECK(r.shards[0] >= 3);

    dt_vlm_data *d = NULL;
    CHECK_EQ_I64(dt_vlm_open(out, DT_SPLIT_TRAIN, &d, &err), 0);
    if (!d) return;
    CHECK_EQ_I64(dt_vlm_docs(d), 5);
    int h, w;
    dt_vlm_image_size(d, &h, &w);
    CHECK(h == 56 && w == 56);
    const int B = 5, T = 96;
    const size_t px = (size_t)3 * h * w;
    int32_t *tok = malloc(sizeof *tok * B * T), *lab = malloc(sizeof *lab * B * T);
    float *pix = malloc(sizeof *pix * B * px);
    uint8_t has[5];
    CHECK_EQ_I64(dt_vlm_batch(d, 0, B, T, tok, lab, pix, has, &err), 0);
    char gp[1200];
    snprintf(gp, sizeof gp, "%s/rgb-97x61.jpg.s64c56.f32", images);
    size_t gn;
    float *golden = (float *)dt_test_slurp(gp, &gn);
    int found_golden = 0, text_only = 0;
    for (int b = 0; b < B; b++) {
        int n_img = 0;
        for (int i = 0; i < T; i++) {
            const int32_t t = tok[b * T + i], l = lab[b * T + i];
            CHECK(l == DT_LABEL_IGNORE || l == t);
            if (t == QWEN_IMAGE_ID) {
                n_img++;
                CHECK(l == DT_LABEL_IGNORE);
            }
        }
        CHECK_EQ_I64(n_img, has[b] ? N_IMG : 0);
        CHECK(lab[b * T + T - 1] == DT_LABEL_IGNORE);   /* padding, or the trailing newline */
        if (!has[b]) {
            text_only++;
            for (size_t i = 0; i < px; i++) CHECK(pix[b * px + i] == 0.0f);
        }
        if (has[b] && gn == px * sizeof(float) && !memcmp(pix + b * px, golden, gn)) found_golden++;
    }
    CHECK_EQ_I64(text_only, 1);
    CHECK_EQ_I64(found_golden, 1);   /* rgb-97x61.jpg, bit for bit as the HF processor */
    /* a sequence that would cut an image's placeholders */
    rc = dt_vlm_batch(d, 0, B, 8, tok, lab, pix, has, &err);
    CHECK_EQ_I64(rc, DT_EINVAL);
    CHECK(strstr(err.msg, "image tokens") != NULL);
    free(golden);
    free(tok);
    free(lab);
    free(pix);
    dt_vlm_close(d);

    /* a damaged pixel shard: one byte of an image, then a truncated file */
    char px0[1024];
    snprintf(px0, sizeof px0, "%s/train/train-000000.px", out);
    size_t n;
    char *b = dt_test_slurp(px0, &n);
    b[DT_PIX_HEADER_BYTES + 5] ^= 1;
    CHECK_EQ_I64(dt_write_file_atomic(px0, b, n, &err), 0);
    CHECK_EQ_I64(dt_vlm_open(out, DT_SPLIT_TRAIN, &d, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "train-000000.px: pixel shard payload CRC mismatch") != NULL);
    b[DT_PIX_HEADER_BYTES + 5] ^= 1;
    CHECK_EQ_I64(dt_write_file_atomic(px0, b, n - 3, &err), 0);
    CHECK_EQ_I64(dt_vlm_open(out, DT_SPLIT_TRAIN, &d, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "truncated or padded pixel shard") != NULL);
    CHECK_EQ_I64(dt_write_file_atomic(px0, b, n, &err), 0);
    free(b);
}

/* an image folder with one image broken: stop keeps the old output, skip counts it */
static void bad_images(void) {
    char in[1024], images[512], out[512], tp[1024], p[1024];
    snprintf(in, sizeof in, "%s/tests/data/llava.json", src);
    snprintf(images, sizeof images, "%s/imgs", tmp);
    snprintf(out, sizeof out, "%s/out", tmp);   /* whole_run's output */
    mkdir(images, 0755);
    const char *names[] = {"rgb-97x61.jpg", "cmyk-60x40.jpg", "rgba-50x80.png", "gray-64x64.jpg", "palette-31x29.png"};
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/tests/data/images/%s", src, names[i]);
        size_t n;
        char *b = dt_test_slurp(p, &n);
        char q[1024];
        snprintf(q, sizeof q, "%s/%s", images, names[i]);
        dt_error e = {0};
        CHECK_EQ_I64(dt_write_file_atomic(q, b, i == 1 ? n / 2 : n, &e), 0);   /* the CMYK JPEG truncated */
        free(b);
    }
    char man[1024];
    snprintf(man, sizeof man, "%s/prepare.json", out);
    size_t before_n;
    char *before = dt_test_slurp(man, &before_n);
    const char *inputs[1] = {in};
    dt_prep_opts o;
    opts_for(&o, inputs, tp, out, images);
    dt_prep_result r;
    dt_error err = {0};
    int rc = dt_prepare(&o, &r, &err);
    CHECK_EQ_I64(rc, DT_EINVAL);
    CHECK(strstr(err.msg, "llava.json: record 2 (id cmyk): image: ") != NULL);
    CHECK(strstr(err.msg, "cmyk-60x40.jpg: corrupt or truncated JPEG") != NULL);
    CHECK(strstr(err.msg, "--on-bad-image skip") != NULL);
    size_t after_n;
    char *after = dt_test_slurp(man, &after_n);
    CHECK(after_n == before_n && !memcmp(before, after, before_n));   /* nothing half-written */
    free(after);
    free(before);
    o.on_bad_image = DT_BAD_IMAGE_SKIP;
    rc = dt_prepare(&o, &r, &err);
    CHECK_EQ_I64(rc, 0);
    CHECK_EQ_I64(r.bad_images, 1);
    CHECK_EQ_I64(r.docs[0], 4);
    CHECK_EQ_I64(r.images[0], 3);
    CHECK(strstr(r.first_bad_image, "record 2 (id cmyk)") != NULL);
    /* a missing image and a FIFO */
    snprintf(p, sizeof p, "%s/cmyk-60x40.jpg", images);
    unlink(p);
    o.on_bad_image = DT_BAD_IMAGE_STOP;
    CHECK_EQ_I64(dt_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "cmyk-60x40.jpg: cannot open") != NULL);
    CHECK(mkfifo(p, 0600) == 0);
    CHECK_EQ_I64(dt_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "is a FIFO") != NULL);
    unlink(p);
    /* a decompression bomb by the limit */
    o.max_image_pixels = 1000;
    CHECK_EQ_I64(dt_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "llava.json: record ") && strstr(err.msg, "pixels is above the limit of 1000"));
    /* an id the text itself can produce */
    o.image_token_id = 300;
    CHECK_EQ_I64(dt_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "--image-token-id 300 is the tokenizer's token") != NULL);
    /* a tokenizer without <image> and no id given */
    o.image_token_id = DT_PREP_IMAGE_ID_AUTO;
    CHECK_EQ_I64(dt_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "no <image> token") && strstr(err.msg, "--image-token-id"));
    o.image_folder = NULL;
    CHECK_EQ_I64(dt_prepare(&o, &r, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "--image-folder") != NULL);
}

/* the list's own shape: not a list, not closed, trailing comma */
static void bad_lists(void) {
    const char *cases[][2] = {{"{\"id\": 1}", "expected a JSON list of records"},
                              {"[{\"id\": 1, \"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"}]}",
                               "the list is not closed"},
                              {"[{\"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"}]},]", "record 1: expected an object"},
                              {"[1]", "record 0: expected an object"},
                              {"[{\"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"}]}] x", "text after the list"},
                              {"[{\"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"]}]", "(record 0 of the list)"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char in[512], out[512], tp[1024];
        snprintf(in, sizeof in, "%s/bad.json", tmp);
        snprintf(out, sizeof out, "%s/out-bad", tmp);
        dt_error err = {0};
        CHECK_EQ_I64(dt_write_file_atomic(in, cases[i][0], strlen(cases[i][0]), &err), 0);
        const char *inputs[1] = {in};
        dt_prep_opts o;
        opts_for(&o, inputs, tp, out, tmp);
        dt_prep_result r;
        int rc = dt_prepare(&o, &r, &err);
        if (rc != DT_EINVAL || !strstr(err.msg, cases[i][1]))
            fprintf(stderr, "%s: expected \"%s\", got %d: %s\n", cases[i][0], cases[i][1], rc, err.msg);
        CHECK(rc == DT_EINVAL && strstr(err.msg, cases[i][1]));
        struct stat st;
        CHECK(stat(out, &st) != 0);   /* nothing written */
    }
}

/* the model's own files: llava-1.5's values; "full" adds the class token; refusals */
static void model_configs(void) {
    char p[1024], q[512];
    dt_clip_opts c, want;
    dt_clip_defaults(&c, 10);
    dt_clip_defaults(&want, DT_PREP_IMAGE_SIZE);
    c.pad_square = want.pad_square = 1;
    dt_error err = {0};
    snprintf(p, sizeof p, "%s/tests/data/llava-hf/preprocessor_config.json", src);
    CHECK_EQ_I64(dt_prep_read_processor(p, &c, &err), 0);
    CHECK(!memcmp(&c, &want, sizeof c));
    int64_t id = 0;
    int n = 0;
    snprintf(p, sizeof p, "%s/tests/data/llava-hf/config.json", src);
    CHECK_EQ_I64(dt_prep_read_llava_config(p, &id, &n, &err), 0);
    CHECK(id == 32000 && n == DT_PREP_IMAGE_TOKENS);
    const char *full = "{\"image_token_index\": 7, \"vision_feature_select_strategy\": \"full\", "
                       "\"vision_config\": {\"image_size\": 224, \"patch_size\": 14}}";
    snprintf(q, sizeof q, "%s/c.json", tmp);
    CHECK_EQ_I64(dt_write_file_atomic(q, full, strlen(full), &err), 0);
    CHECK_EQ_I64(dt_prep_read_llava_config(q, &id, &n, &err), 0);
    CHECK(id == 7 && n == 16 * 16 + 1);
    const char *bad[][2] = {{"{\"vision_config\": {\"image_size\": 224, \"patch_size\": 14}}", "no image_token_index"},
                            {"{\"image_token_index\": 7, \"vision_config\": {\"image_size\": 225, \"patch_size\": 14}}",
                             "a multiple of patch_size"}};
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_I64(dt_write_file_atomic(q, bad[i][0], strlen(bad[i][0]), &err), 0);
        CHECK_EQ_I64(dt_prep_read_llava_config(q, &id, &n, &err), DT_EINVAL);
        CHECK(strstr(err.msg, bad[i][1]) != NULL);
    }
    const char *badp[][2] = {{"{\"do_center_crop\": false}", "$.do_center_crop is not true"},
                             {"{\"image_processor_type\": \"SiglipImageProcessor\"}", "CLIPImageProcessor only"},
                             {"{\"size\": {\"height\": 384, \"width\": 384}, \"crop_size\": 384}", "$.size"},
                             {"{\"size\": 224, \"crop_size\": 224, \"image_std\": [0.5, 0, 0.5]}", "the std above 0"}};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_I64(dt_write_file_atomic(q, badp[i][0], strlen(badp[i][0]), &err), 0);
        int rc = dt_prep_read_processor(q, &c, &err);
        if (rc != DT_EINVAL || !strstr(err.msg, badp[i][1])) fprintf(stderr, "%s: %d %s\n", badp[i][0], rc, err.msg);
        CHECK(rc == DT_EINVAL && strstr(err.msg, badp[i][1]));
    }
    CHECK(!memcmp(&c, &want, sizeof c));   /* a refused file leaves the settings as they were */
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_vlm SOURCE_DIR\n");
        return 2;
    }
    src = argv[1];
    snprintf(tmp, sizeof tmp, "/tmp/dt_test_vlm.%d", (int)getpid());
    rm_tree(tmp);
    mkdir(tmp, 0755);
    check_goldens("qwen2-mini.json", DT_CHAT_CHATML, QWEN_IMAGE_ID, "llava-chatml.golden");
    check_goldens("llama3-mini.json", DT_CHAT_LLAMA3, LLAMA_IMAGE_ID, "llava-llama3.golden");
    record_shapes();
    whole_run();
    bad_images();
    bad_lists();
    model_configs();
    rm_tree(tmp);
    TEST_MAIN_END();
}
