/* test_image.c — image decoding and CLIPImageProcessor preprocessing (dt_image.h,
 * docs/vlm-images.md) against Hugging Face:
 *   - every row of tests/data/images/goldens.json (scripts/gen_image_goldens.py: the
 *     pixel_values of transformers' default CLIPImageProcessor, torchvision backend, on
 *     committed JPEG / PNG images of every mode): our decode + crop + normalize must give
 *     the same float32 values. Tolerance: 0 (bit-exact). The processor's output is a
 *     function of a uint8 crop, and the resize is integer arithmetic, so anything but an
 *     exact match is a wrong rule, not rounding; the largest difference seen is printed;
 *   - bad input: truncated, corrupt, empty, other formats, an unsupported JPEG colour
 *     space, a decompression bomb (refused from the header), a resize or a square that
 *     would be one, a missing file, a FIFO: one line naming the file.
 * Usage: test_image SOURCE_DIR */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jpeglib.h>
#include <zlib.h>

#include "dt_file.h"
#include "dt_image.h"
#include "dt_json.h"
#include "dt_test.h"
#include "dt_test_data.h"

static char dir[1024];

static void golden_rows(void) {
    char p[1200];
    snprintf(p, sizeof p, "%s/goldens.json", dir);
    size_t n;
    char *text = dt_test_slurp(p, &n);
    cJSON *root = cJSON_Parse(text);
    CHECK(root != NULL);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(root, "rows");
    int count = 0;
    double worst = 0.0;
    for (const cJSON *r = rows ? rows->child : NULL; r; r = r->next, count++) {
        const char *img = cJSON_GetObjectItemCaseSensitive(r, "image")->valuestring;
        const char *gold = cJSON_GetObjectItemCaseSensitive(r, "golden")->valuestring;
        dt_clip_opts o;
        dt_clip_defaults(&o, cJSON_GetObjectItemCaseSensitive(r, "shortest_edge")->valueint);
        o.crop_height = cJSON_GetObjectItemCaseSensitive(r, "crop_height")->valueint;
        o.crop_width = cJSON_GetObjectItemCaseSensitive(r, "crop_width")->valueint;
        o.pad_square = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "pad_square"));
        o.exif_transpose = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "load_image"));
        const size_t plane = (size_t)o.crop_height * o.crop_width;
        snprintf(p, sizeof p, "%s/%s", dir, img);
        dt_image im;
        dt_error err = {0};
        int rc = dt_image_load(p, DT_IMAGE_MAX_PIXELS, &im, &err);
        if (rc) fprintf(stderr, "%s\n", err.msg);
        CHECK(rc == DT_OK);
        if (rc) continue;
        uint8_t *u8 = malloc(3 * plane);
        float *got = malloc(3 * plane * sizeof *got);
        CHECK(dt_image_clip_u8(&im, &o, u8, &err) == DT_OK);
        dt_image_normalize(u8, plane, &o, got);
        snprintf(p, sizeof p, "%s/%s", dir, gold);
        size_t gn;
        float *want = (float *)dt_test_slurp(p, &gn);
        CHECK_EQ_I64(gn, 3 * plane * sizeof(float));
        double maxd = 0.0;
        size_t diff = 0;
        for (size_t i = 0; gn == 3 * plane * sizeof(float) && i < 3 * plane; i++) {
            const double d = fabs((double)got[i] - want[i]);
            if (d > maxd) maxd = d;
            diff += got[i] != want[i];
        }
        /* in units of 1/255 after rescale: |d| * std (the normalize divides by std) */
        printf("%-28s %-10s %4dx%-4d -> %dx%d: %zu of %zu values differ, max |diff| %.3g\n", img, gold + strlen(img) + 1,
               im.width, im.height, o.crop_width, o.crop_height, diff, 3 * plane, maxd);
        if (diff) fprintf(stderr, "%s: %zu values differ from %s\n", img, diff, gold);
        CHECK(diff == 0);
        if (maxd > worst) worst = maxd;
        free(want);
        free(u8);
        free(got);
        dt_image_free(&im);
    }
    printf("%d golden rows, largest difference %.3g\n", count, worst);
    CHECK(count >= 28);
    cJSON_Delete(root);
    free(text);
}

/* the decode of bytes must fail with DT_EINVAL and a message holding want */
static void expect_bad(const void *bytes, size_t n, uint64_t max_pixels, const char *want) {
    dt_image im;
    dt_error err = {0};
    int rc = dt_image_decode(bytes, n, "x.img", max_pixels, &im, &err);
    if (rc != DT_EINVAL || !strstr(err.msg, want) || strncmp(err.msg, "x.img: ", 7) || strchr(err.msg, '\n'))
        fprintf(stderr, "expected DT_EINVAL with \"%s\", got %d: %s\n", want, rc, err.msg);
    CHECK(rc == DT_EINVAL && strstr(err.msg, want) && !strncmp(err.msg, "x.img: ", 7) && !strchr(err.msg, '\n'));
    CHECK(im.rgba == NULL);
}

/* A 2-component JPEG (libjpeg's JCS_UNKNOWN): a mode neither Pillow nor dtrun reads. */
static void two_component_jpeg(void) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    unsigned char *buf = NULL;
    unsigned long n = 0;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &buf, &n);
    c.image_width = 8;
    c.image_height = 8;
    c.input_components = 2;
    c.in_color_space = JCS_UNKNOWN;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, JCS_UNKNOWN);
    jpeg_start_compress(&c, TRUE);
    unsigned char row[16] = {0};
    while (c.next_scanline < c.image_height) {
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    expect_bad(buf, n, DT_IMAGE_MAX_PIXELS, "JPEG with 2 components in an unsupported colour space");
    free(buf);
}

static void bad_input(void) {
    const char *files[] = {"rgb-97x61.jpg", "rgb-progressive-120x90.jpg", "rgba-50x80.png", "palette-31x29.png"};
    for (int f = 0; f < 4; f++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, files[f]);
        size_t n;
        uint8_t *b = (uint8_t *)dt_test_slurp(p, &n);
        expect_bad(b, n * 2 / 3, DT_IMAGE_MAX_PIXELS, "truncated");   /* cut inside the image data */
        expect_bad(b, 40, DT_IMAGE_MAX_PIXELS, "truncated");           /* cut inside the headers */
        expect_bad(b, n, 100, "above the limit of 100");               /* refused from the header */
        uint8_t *c = malloc(n);
        memcpy(c, b, n);
        for (size_t i = n / 3; i < n / 3 + 64 && i < n; i++) c[i] ^= 0x5A;   /* corrupt data */
        dt_image im;
        dt_error err = {0};
        int rc = dt_image_decode(c, n, "x.img", DT_IMAGE_MAX_PIXELS, &im, &err);
        /* libjpeg recovers from some corrupt entropy data, as Pillow does; a PNG's CRC fails */
        if (rc) CHECK(rc == DT_EINVAL && !strncmp(err.msg, "x.img: corrupt or truncated", 27));
        else dt_image_free(&im);
        if (f >= 2) CHECK(rc == DT_EINVAL);
        free(c);
        free(b);
    }
    expect_bad("", 0, DT_IMAGE_MAX_PIXELS, "the file is empty");
    expect_bad("GIF89a\1\0\1\0", 10, DT_IMAGE_MAX_PIXELS, "a GIF image");
    expect_bad("RIFF\0\0\0\0WEBPVP8 ", 16, DT_IMAGE_MAX_PIXELS, "a WebP image");
    expect_bad("hello, world", 12, DT_IMAGE_MAX_PIXELS, "not a JPEG or PNG");
    /* a PNG header claiming 100000 x 100000 pixels (valid CRC): refused before any allocation */
    uint8_t bomb[33] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                        0, 1, 0x86, 0xA0, 0, 1, 0x86, 0xA0, 8, 2, 0, 0, 0};
    const uint32_t crc = (uint32_t)crc32(0, bomb + 12, 17);
    for (int i = 0; i < 4; i++) bomb[29 + i] = (uint8_t)(crc >> (24 - 8 * i));
    expect_bad(bomb, sizeof bomb, DT_IMAGE_MAX_PIXELS, "100000x100000 = 10000000000 pixels is above the limit of 89478485");
    /* a JPEG whose frame header says 60000 x 60000 (below libjpeg's own 65500 limit) */
    char p[1200];
    snprintf(p, sizeof p, "%s/rgb-97x61.jpg", dir);
    size_t n;
    uint8_t *j = (uint8_t *)dt_test_slurp(p, &n);
    for (size_t i = 0; i + 9 < n; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xC0) {   /* SOF0: length, precision, height, width */
            const uint8_t side[4] = {0xEA, 0x60, 0xEA, 0x60};
            memcpy(j + i + 5, side, 4);
            break;
        }
    expect_bad(j, n, DT_IMAGE_MAX_PIXELS, "60000x60000 = 3600000000 pixels is above the limit");
    free(j);

    dt_image im;
    dt_error err = {0};
    CHECK(dt_image_load("/nonexistent/dir/x.jpg", DT_IMAGE_MAX_PIXELS, &im, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "/nonexistent/dir/x.jpg") != NULL);
    char fifo[64];
    snprintf(fifo, sizeof fifo, "/tmp/dt_test_image_fifo.%d", (int)getpid());
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    err = (dt_error){0};
    CHECK(dt_image_load(fifo, DT_IMAGE_MAX_PIXELS, &im, &err) == DT_EINVAL);   /* never blocks */
    CHECK(strstr(err.msg, "FIFO") != NULL);
    unlink(fifo);
    dt_clip_opts o;
    dt_clip_defaults(&o, 0);
    uint8_t px[3] = {1, 2, 3};
    uint8_t px4[4] = {1, 2, 3, 255};
    dt_image one = {1, 1, px4, 0, 1};
    CHECK(dt_image_clip_u8(&one, &o, px, &err) == DT_EINVAL);
    /* an aspect ratio whose resize would be a bomb: 1 x 400000 to 336 on the short side */
    dt_image thin = {1, 400000, calloc(400000, 4), 0, 1};
    dt_clip_defaults(&o, 336);
    uint8_t *crop = malloc(3 * 336 * 336);
    err = (dt_error){0};
    CHECK(dt_image_clip_u8(&thin, &o, crop, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "336x134400000 = 45158400000 pixels, above the limit of 89478485") != NULL);
    o.pad_square = 1;   /* padded to a square first: 400000 x 400000 resized down, which is fine */
    dt_image small_thin = {1, 4000, calloc(4000, 4), 0, 1};
    CHECK(dt_image_clip_u8(&small_thin, &o, crop, &err) == DT_OK);
    CHECK(dt_image_clip_u8(&thin, &o, crop, &err) == DT_EINVAL);   /* padded: 400000^2 pixels */
    CHECK(strstr(err.msg, "padded to a square would be 400000x400000") != NULL);
    free(crop);
    dt_image_free(&thin);
    dt_image_free(&small_thin);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_image SOURCE_DIR\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s/tests/data/images", argv[1]);
    golden_rows();
    bad_input();
    two_component_jpeg();
    TEST_MAIN_END();
}
