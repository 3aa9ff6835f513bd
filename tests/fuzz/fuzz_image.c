/* Fuzz target: the image decoders (engine/data/image.c: libjpeg-turbo and libpng behind
 * dt_image_decode, with its header checks, Adobe CMYK, 16-bit and alpha paths), then
 * CLIPImageProcessor's resize and crop of what was accepted, at a small size. The pixel
 * limit is lowered so that a mutated header cannot ask for more memory than the fuzzer's
 * -rss_limit_mb allows; a decode must either fail with a message or give an image, and
 * the crop of an image succeed or, for an aspect ratio that resizes past the limit, be
 * refused with a message. */
#include "dt_fuzz.h"

#include "dt_image.h"

/* 4 Mpixel: 16 MiB of RGBA, well inside the fuzzer's memory limit */
#define FUZZ_MAX_PIXELS ((uint64_t)1 << 22)
#define FUZZ_SIDE 24

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_image im;
    dt_error err;
    dt_error_clear(&err);
    if (dt_image_decode(data, size, "fuzz", FUZZ_MAX_PIXELS, &im, &err) != DT_OK) {
        if (!err.msg[0] || im.rgba) abort();
        return 0;
    }
    if (!im.rgba || im.width < 1 || im.height < 1) abort();
    dt_clip_opts o;
    dt_clip_defaults(&o, FUZZ_SIDE);
    /* pad to a square on odd sizes, when the square stays within the harness's pixel bound
     * (a 52 x 4864 image pads to 23.6 M pixels: legal, but seconds per input under ASan) */
    const uint64_t side = (uint64_t)(im.width > im.height ? im.width : im.height);
    o.pad_square = (size & 1) && side * side <= FUZZ_MAX_PIXELS;
    uint8_t out[3 * FUZZ_SIDE * FUZZ_SIDE];
    /* an aspect ratio whose resize (or square) would pass the pixel limit is refused */
    const int rc = dt_image_clip_u8(&im, &o, out, &err);
    if (rc != DT_OK && (rc != DT_EINVAL || !err.msg[0])) abort();
    dt_image_free(&im);
    return 0;
}
