/* dt_image.h — images for vision-language training (docs/vlm-images.md): JPEG (libjpeg-turbo)
 * and PNG (libpng) decoded to 8-bit RGB the way Hugging Face's image processors see them,
 * then CLIPImageProcessor's preprocessing (resize the shortest edge, bicubic with
 * antialiasing; center crop; rescale 1/255; normalize by mean / std).
 *
 * Decoding matches PIL.Image.open followed by transformers' convert_to_rgb (the
 * processor's do_convert_rgb): grey is replicated; an alpha channel (RGBA, grey + alpha,
 * a palette or colour key with tRNS) is composited on opaque white with Pillow's
 * Image.alpha_composite arithmetic (in dt_image_clip_u8; LLaVA's training code, pad_square,
 * uses PIL's convert("RGB"), which drops it); CMYK / YCCK JPEG is read with Adobe's inverted
 * polarity and converted with Pillow's cmyk2rgb; 16-bit samples keep their high byte
 * (Pillow's ";16B" unpackers), except 16-bit grey, which Pillow holds as "I;16" and
 * converts to RGB by clipping at 255. EXIF orientation is read (JPEG APP1) but applied only
 * with exif_transpose (dt_clip_opts): PIL.Image.open and the processor do not apply it,
 * transformers' load_image does. Other formats (GIF, WebP, BMP, TIFF) are refused by name.
 *
 * Preprocessing matches transformers 5.x's default CLIPImageProcessor (the torchvision
 * backend): torchvision's resize of a uint8 image, bicubic, antialias=True, which on CPU
 * is PyTorch's separable uint8 kernel (Pillow-SIMD's): int16 fixed-point weights, the
 * horizontal pass first, each pass rounded to uint8. The processor's output is therefore
 * a function of the uint8 crop, which is what this module produces (dt_image_clip_u8) and
 * what pixel shards store; dt_image_normalize gives the float32 pixel_values.
 * Errors through dt_error (DT_EINVAL for bad image input, one line naming the file);
 * nothing is printed. Sizes are pixels unless named *_bytes. */
#ifndef DT_IMAGE_H
#define DT_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"

/* PIL.Image.MAX_IMAGE_PIXELS = int(1024 * 1024 * 1024 // 4 // 3): Pillow warns above it
 * (DecompressionBombWarning) and refuses above twice it; dtrun refuses above it, before
 * any pixel buffer is allocated */
#define DT_IMAGE_MAX_PIXELS 89478485ULL
/* bytes of an image file read at most (the pixel limit bounds what it may decode to) */
#define DT_IMAGE_MAX_FILE_BYTES ((uint64_t)256 << 20)
/* progressive JPEG scans read at most (libjpeg-turbo's djpeg -maxscans guards against
 * the same CPU bomb: a few hundred bytes per scan, each scan a pass over the image) */
#define DT_IMAGE_MAX_JPEG_SCANS 500

/* transformers.image_utils OPENAI_CLIP_MEAN / OPENAI_CLIP_STD */
#define DT_CLIP_MEAN {0.48145466f, 0.4578275f, 0.40821073f}
#define DT_CLIP_STD {0.26862954f, 0.26130258f, 0.27577711f}
/* CLIPImageProcessor's rescale_factor (transformers: 1 / 255) */
#define DT_CLIP_RESCALE (1.0 / 255.0)

typedef struct dt_image {
    int width, height;
    uint8_t *rgba;  /* [height][width][4], malloc'd; alpha 255 where the file has none */
    int has_alpha;  /* the file has an alpha channel or a tRNS colour key (PIL: "A" in
                       getbands() or info["transparency"]) */
    int orientation;   /* EXIF Orientation, 1..8 (1: none or not read) */
} dt_image;

/* Decodes a JPEG or PNG of n bytes (name: for messages). DT_EINVAL for a truncated or
 * corrupt file, an unsupported format or mode, or width x height above max_pixels
 * (refused from the header, before the pixels are allocated). */
int dt_image_decode(const void *bytes, size_t n, const char *name, uint64_t max_pixels, dt_image *out,
                    dt_error *err);
/* dt_image_decode of a regular file (a FIFO, a directory or a device is refused, never
 * opened for blocking reads). */
int dt_image_load(const char *path, uint64_t max_pixels, dt_image *out, dt_error *err);
void dt_image_free(dt_image *im);

/* CLIPImageProcessor's settings (preprocessor_config.json), and LLaVA-1.5's
 * image_aspect_ratio "pad" (expand2square on the mean colour before the processor). */
typedef struct dt_clip_opts {
    int shortest_edge;       /* size.shortest_edge: 336 for LLaVA-1.5's ViT-L/14-336 */
    int crop_height, crop_width;
    int pad_square;          /* 1: LLaVA-1.5's training code (image_aspect_ratio "pad"):
                                PIL convert("RGB") (alpha dropped), then expand2square
                                on the mean colour; 0: the HF processor alone */
    int exif_transpose;      /* 1: transformers' load_image first: Pillow's exif_transpose,
                                then convert("RGB") (alpha dropped) */
    float mean[3], std[3];
    double rescale;          /* rescale_factor */
} dt_clip_opts;

/* CLIP's defaults at shortest edge / crop size (pad_square 0). */
void dt_clip_defaults(dt_clip_opts *o, int size);
/* DT_EINVAL for settings out of range (sides 1..8192, std > 0, mean in [0, 1]). */
int dt_clip_check(const dt_clip_opts *o, dt_error *err);
/* The uint8 crop the processor normalizes: out[3][crop_height][crop_width] (channels
 * first). DT_EINVAL for settings out of range. */
int dt_image_clip_u8(const dt_image *im, const dt_clip_opts *o, uint8_t *out, dt_error *err);
/* pixel_values from such a crop, as the processor computes them in float32:
 * (x - mean * (1 / rescale)) / (std * (1 / rescale)); n = crop pixels per channel. */
void dt_image_normalize(const uint8_t *chw, size_t n, const dt_clip_opts *o, float *out);

#endif
