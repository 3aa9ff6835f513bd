/* vlmconfig.c — a Hugging Face LLaVA model's own settings for `dtrun prepare --format llava`
 * (dt_prepare.h): preprocessor_config.json (CLIPImageProcessor) and config.json
 * (LlavaConfig), so that the prepared data is what that model's processor would make. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_json.h"
#include "dt_prepare.h"

/* PILImageResampling.BICUBIC (transformers image_utils), CLIPImageProcessor's resample */
#define HF_RESAMPLE_BICUBIC 3
#define CLIP_RESCALE_TOL 1e-12

static int read_json(const char *path, cJSON **root, dt_error *err) {
    char *text = NULL;
    size_t n;
    int rc = dt_json_read_file(path, &text, &n, err);
    if (!rc) rc = dt_json_parse(text, path, root, err);
    free(text);
    if (!rc && !cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        *root = NULL;
        rc = dt_errorf(err, DT_EINVAL, "%s: expected a JSON object", path);
    }
    return rc;
}

/* a side from "size" / "crop_size": an integer, or {key: n} */
static int side(const cJSON *v, const char *key, const char *path, const char *name, int *out, dt_error *err) {
    const cJSON *x = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, key) : v;
    if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > (1 << 14) || x->valuedouble != floor(x->valuedouble))
        return dt_errorf(err, DT_EINVAL, "%s: $.%s: expected %s a positive integer (pixels)", path, name,
                         cJSON_IsObject(v) ? "{\"...\": n} with" : "");
    *out = (int)x->valuedouble;
    return DT_OK;
}

static int three(const cJSON *root, const char *key, const char *path, float *out, dt_error *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!a) return DT_OK;   /* CLIP's default */
    if (cJSON_GetArraySize(a) != 3) return dt_errorf(err, DT_EINVAL, "%s: $.%s: expected 3 numbers (R, G, B)", path, key);
    for (int c = 0; c < 3; c++) {
        const cJSON *x = cJSON_GetArrayItem(a, c);
        if (!cJSON_IsNumber(x)) return dt_errorf(err, DT_EINVAL, "%s: $.%s[%d]: expected a number", path, key, c);
        out[c] = (float)x->valuedouble;
    }
    return DT_OK;
}

/* the do_* switches this preprocessing implements are all on; one off is refused */
static int switches_on(const cJSON *root, const char *path, dt_error *err) {
    static const char *const on[] = {"do_resize", "do_center_crop", "do_rescale", "do_normalize", "do_convert_rgb"};
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, on[i]);
        if (v && !cJSON_IsTrue(v))
            return dt_errorf(err, DT_EINVAL, "%s: $.%s is not true: dtrun prepares images as CLIPImageProcessor's "
                             "full pipeline only", path, on[i]);
    }
    return DT_OK;
}

int dt_prep_read_processor(const char *path, dt_clip_opts *clip, dt_error *err) {
    cJSON *root = NULL;
    int rc = read_json(path, &root, err);
    if (rc) return rc;
    dt_clip_opts o;
    dt_clip_defaults(&o, DT_PREP_IMAGE_SIZE);
    o.pad_square = clip->pad_square;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "image_processor_type");
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "resample");
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "rescale_factor");
    if (type && (!cJSON_IsString(type) || (strcmp(type->valuestring, "CLIPImageProcessor") &&
                                           strcmp(type->valuestring, "CLIPImageProcessorFast"))))
        rc = dt_errorf(err, DT_EINVAL, "%s: $.image_processor_type %s: dtrun implements CLIPImageProcessor only",
                       path, cJSON_IsString(type) ? type->valuestring : "(not a string)");
    if (!rc && res && (!cJSON_IsNumber(res) || res->valuedouble != HF_RESAMPLE_BICUBIC))
        rc = dt_errorf(err, DT_EINVAL, "%s: $.resample: only %d (bicubic) is implemented", path, HF_RESAMPLE_BICUBIC);
    if (!rc) rc = switches_on(root, path, err);
    if (!rc) rc = side(cJSON_GetObjectItemCaseSensitive(root, "size"), "shortest_edge", path, "size", &o.shortest_edge, err);
    const cJSON *crop = cJSON_GetObjectItemCaseSensitive(root, "crop_size");
    if (!rc) rc = side(crop, "height", path, "crop_size", &o.crop_height, err);
    if (!rc) rc = side(crop, cJSON_IsObject(crop) ? "width" : "height", path, "crop_size", &o.crop_width, err);
    if (!rc) rc = three(root, "image_mean", path, o.mean, err);
    if (!rc) rc = three(root, "image_std", path, o.std, err);
    if (!rc && rf) {
        if (!cJSON_IsNumber(rf) || !(rf->valuedouble > 0))
            rc = dt_errorf(err, DT_EINVAL, "%s: $.rescale_factor: expected a number above 0", path);
        else o.rescale = rf->valuedouble;
    }
    cJSON_Delete(root);
    if (!rc) rc = dt_clip_check(&o, err);
    if (rc) return rc;
    *clip = o;
    return DT_OK;
}

int dt_prep_read_llava_config(const char *path, int64_t *image_token_id, int *image_tokens, dt_error *err) {
    cJSON *root = NULL;
    int rc = read_json(path, &root, err);
    if (rc) return rc;
    /* transformers' LlavaConfig: image_token_index (image_token_id in newer files) */
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "image_token_index");
    if (!id) id = cJSON_GetObjectItemCaseSensitive(root, "image_token_id");
    const cJSON *vc = cJSON_GetObjectItemCaseSensitive(root, "vision_config");
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(vc, "image_size");
    const cJSON *patch = cJSON_GetObjectItemCaseSensitive(vc, "patch_size");
    const cJSON *strat = cJSON_GetObjectItemCaseSensitive(root, "vision_feature_select_strategy");
    if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= INT32_MAX)
        rc = dt_errorf(err, DT_EINVAL, "%s: no image_token_index (a LLaVA config.json has one, e.g. 32000)", path);
    else if (!cJSON_IsNumber(size) || !cJSON_IsNumber(patch) || patch->valuedouble < 1 || size->valuedouble < 1 ||
             fmod(size->valuedouble, patch->valuedouble) != 0)
        rc = dt_errorf(err, DT_EINVAL, "%s: $.vision_config: image_size and patch_size (image_size a multiple of "
                       "patch_size) are needed for the image token count", path);
    else if (strat && (!cJSON_IsString(strat) || (strcmp(strat->valuestring, "default") && strcmp(strat->valuestring, "full"))))
        rc = dt_errorf(err, DT_EINVAL, "%s: $.vision_feature_select_strategy: expected \"default\" or \"full\"", path);
    if (!rc) {
        /* (image_size / patch_size)^2 patches; "full" keeps the class token as well
         * (transformers LlavaProcessor: num_image_tokens, + 1 for "full") */
        const int64_t per_side = (int64_t)(size->valuedouble / patch->valuedouble);
        const int64_t n = per_side * per_side + (strat && !strcmp(strat->valuestring, "full"));
        *image_token_id = (int64_t)id->valuedouble;
        *image_tokens = (int)n;
    }
    cJSON_Delete(root);
    return rc;
}
