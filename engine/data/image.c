/* image.c — JPEG / PNG decoding and CLIPImageProcessor preprocessing (dt_image.h).
 * Sources of each rule are named where it is applied: Pillow 13 (src/libImaging/Convert.c,
 * AlphaComposite.c, JpegImagePlugin.py, PngImagePlugin.py), transformers 5.x
 * (image_processing_backends.py, image_transforms.py), torchvision 0.29
 * (transforms/v2/functional/_geometry.py resize_image) and PyTorch
 * (aten/src/ATen/native/cpu/UpSampleKernel.cpp, UpSampleKernelAVXAntialias.h). */
#include "dt_image.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "dt_file.h"

void dt_image_free(dt_image *im) {
    if (!im) return;
    free(im->rgba);
    im->rgba = NULL;
    im->width = im->height = im->has_alpha = 0;
    im->orientation = 1;
}

static int check_pixels(const char *name, uint64_t w, uint64_t h, uint64_t max_pixels, dt_error *err) {
    if (w == 0 || h == 0) return dt_errorf(err, DT_EINVAL, "%s: the image is empty (%llux%llu)", name,
                                           (unsigned long long)w, (unsigned long long)h);
    if (w * h > max_pixels)
        return dt_errorf(err, DT_EINVAL,
                         "%s: %llux%llu = %llu pixels is above the limit of %llu (PIL's MAX_IMAGE_PIXELS): a "
                         "decompression bomb or an oversized image; shrink it, or raise --max-image-pixels",
                         name, (unsigned long long)w, (unsigned long long)h, (unsigned long long)(w * h),
                         (unsigned long long)max_pixels);
    return DT_OK;
}

static int alloc_rgba(dt_image *out, int w, int h, const char *name, dt_error *err) {
    out->rgba = malloc((size_t)w * (size_t)h * 4);
    if (!out->rgba) return dt_errorf(err, DT_ENOMEM, "%s: out of memory for %dx%d pixels", name, w, h);
    out->width = w;
    out->height = h;
    return DT_OK;
}

/* ------------------------------------------------------------ Pillow's conversions */

/* Pillow AlphaComposite.c: PRECISION_BITS 7 and its rounded division by 255 */
#define AC_PRECISION_BITS 7
#define SHIFTFORDIV255(a) ((((a) >> 8) + (a)) >> 8)
#define WHITE 255u

/* One channel of Image.alpha_composite(white opaque background, (c, a)): the background's
 * alpha is 255, so blend = 255 (255 - a) and outa255 = 255 * 255. */
static uint8_t over_white(uint32_t c, uint32_t a) {
    if (a == 0) return WHITE;
    const uint32_t blend = WHITE * (255 - a);
    const uint32_t outa255 = a * 255 + blend;
    const uint32_t coef1 = a * 255 * 255 * (1u << AC_PRECISION_BITS) / outa255;
    const uint32_t coef2 = 255 * (1u << AC_PRECISION_BITS) - coef1;
    const uint32_t t = c * coef1 + WHITE * coef2;
    return (uint8_t)(SHIFTFORDIV255(t + (0x80u << AC_PRECISION_BITS)) >> AC_PRECISION_BITS);
}

/* Pillow Convert.c MULDIV255 and cmyk2rgb: nk = 255 - k; c' = nk - c * nk / 255 (rounded) */
static uint8_t cmyk_channel(uint32_t c, uint32_t k) {
    const uint32_t nk = 255 - k;
    const uint32_t t = c * nk + 128;
    const int v = (int)nk - (int)(((t >> 8) + t) >> 8);
    return (uint8_t)(v < 0 ? 0 : v);
}

/* A row of ch samples per pixel (8-bit, or 16-bit big-endian when bytes == 2) to RGBA
 * (alpha 255 where the image has none). */
static void row_to_rgba(const uint8_t *in, int w, int ch, int bytes, uint8_t *out) {
    for (int x = 0; x < w; x++, out += 4) {
        const uint8_t *p = in + (size_t)x * ch * bytes;
        out[3] = 255;
        if (bytes == 2 && ch == 1) {   /* Pillow I;16 -> RGB: values above 255 clip to 255 */
            out[0] = out[1] = out[2] = p[0] ? 255 : p[1];
            continue;
        }
        /* 16-bit: the high byte (Pillow's RGB;16B / RGBA;16B / LA;16B unpackers) */
        uint8_t s[4];
        for (int c = 0; c < ch; c++) s[c] = p[c * bytes];
        if (ch <= 2) out[0] = out[1] = out[2] = s[0];
        else memcpy(out, s, 3);
        if (ch == 2 || ch == 4) out[3] = s[ch - 1];
    }
}

/* ------------------------------------------------------------ JPEG (libjpeg-turbo) */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_fail(j_common_ptr c) {
    jpeg_err *e = (jpeg_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

/* Warnings: a premature end of data is an error (Pillow: "image file is truncated"
 * unless ImageFile.LOAD_TRUNCATED_IMAGES); the others (extraneous bytes before a marker)
 * are ignored, as Pillow ignores them. */
static void jpeg_message(j_common_ptr c, int level) {
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) jpeg_fail(c);
}

static void jpeg_progress(j_common_ptr c) {
    j_decompress_ptr d = (j_decompress_ptr)c;
    if (c->is_decompressor && d->input_scan_number > DT_IMAGE_MAX_JPEG_SCANS) {
        jpeg_err *e = (jpeg_err *)c->err;
        snprintf(e->msg, sizeof e->msg, "more than %d progressive scans (a CPU bomb, or corrupt)",
                 DT_IMAGE_MAX_JPEG_SCANS);
        longjmp(e->jb, 1);
    }
}

/* EXIF (JEITA CP-3451, a TIFF structure after "Exif\0\0" in APP1): IFD0's Orientation
 * tag, 1..8; 1 when absent or unreadable (as Pillow's getexif().get(0x0112, 1)) */
#define EXIF_ORIENTATION_TAG 0x0112
#define EXIF_HEADER_BYTES 6
#define TIFF_SHORT 3

static uint32_t tiff_u(const uint8_t *p, int bytes, int big) {
    uint32_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint32_t)p[big ? i : bytes - 1 - i] << (8 * (bytes - 1 - i));
    return v;
}

static int exif_orientation(const uint8_t *d, size_t n) {
    if (n < EXIF_HEADER_BYTES + 8 || memcmp(d, "Exif\0\0", EXIF_HEADER_BYTES)) return 1;
    const uint8_t *t = d + EXIF_HEADER_BYTES;
    const size_t tn = n - EXIF_HEADER_BYTES;
    const int big = t[0] == 'M' && t[1] == 'M';
    if (!big && !(t[0] == 'I' && t[1] == 'I')) return 1;
    const uint32_t ifd = tiff_u(t + 4, 4, big);
    if (ifd > tn - 2) return 1;
    const uint32_t count = tiff_u(t + ifd, 2, big);
    for (uint32_t i = 0; i < count && ifd + 2 + 12 * (size_t)(i + 1) <= tn; i++) {
        const uint8_t *e = t + ifd + 2 + 12 * i;
        if (tiff_u(e, 2, big) != EXIF_ORIENTATION_TAG) continue;
        const uint32_t v = tiff_u(e + 8, 2, big);
        return tiff_u(e + 2, 2, big) == TIFF_SHORT && v >= 1 && v <= 8 ? (int)v : 1;
    }
    return 1;
}

/* The decode itself; volatile locals survive the longjmp */
static int decode_jpeg(const uint8_t *bytes, size_t n, const char *name, uint64_t max_pixels, dt_image *out,
                       dt_error *err) {
    struct jpeg_decompress_struct d;
    jpeg_err je;
    struct jpeg_progress_mgr prog = {.progress_monitor = jpeg_progress};
    uint8_t *volatile row = NULL;
    volatile int rc = DT_OK;
    memset(&d, 0, sizeof d);
    d.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_fail;
    je.pub.emit_message = jpeg_message;
    je.msg[0] = '\0';
    if (setjmp(je.jb)) {
        jpeg_destroy_decompress(&d);
        free(row);
        dt_image_free(out);
        return rc ? rc : dt_errorf(err, DT_EINVAL, "%s: corrupt or truncated JPEG: %s", name, je.msg);
    }
    jpeg_create_decompress(&d);
    d.progress = &prog;
    jpeg_mem_src(&d, bytes, (unsigned long)n);
    jpeg_save_markers(&d, JPEG_APP0 + 1, 0xFFFF);   /* APP1: EXIF */
    jpeg_read_header(&d, TRUE);
    for (jpeg_saved_marker_ptr m = d.marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && out->orientation <= 1) out->orientation = exif_orientation(m->data, m->data_length);
    if ((rc = check_pixels(name, d.image_width, d.image_height, max_pixels, err))) longjmp(je.jb, 1);
    int ch;
    switch (d.jpeg_color_space) {
    case JCS_GRAYSCALE: d.out_color_space = JCS_GRAYSCALE; ch = 1; break;
    case JCS_YCbCr: case JCS_RGB: d.out_color_space = JCS_RGB; ch = 3; break;
    case JCS_CMYK: case JCS_YCCK: d.out_color_space = JCS_CMYK; ch = 4; break;
    default:
        rc = dt_errorf(err, DT_EINVAL, "%s: JPEG with %d components in an unsupported colour space (%d)", name,
                       d.num_components, (int)d.jpeg_color_space);
        longjmp(je.jb, 1);
    }
    /* Pillow's decoder settings: libjpeg's defaults (JDCT_ISLOW, fancy upsampling) */
    jpeg_start_decompress(&d);
    const int w = (int)d.output_width, h = (int)d.output_height;
    if ((rc = alloc_rgba(out, w, h, name, err))) longjmp(je.jb, 1);
    row = malloc((size_t)w * ch);
    if (!row) {
        rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory", name);
        longjmp(je.jb, 1);
    }
    while (d.output_scanline < d.output_height) {
        uint8_t *o = out->rgba + (size_t)d.output_scanline * w * 4;
        JSAMPROW r = row;
        jpeg_read_scanlines(&d, &r, 1);
        if (ch == 4) {   /* JpegImagePlugin: rawmode "CMYK;I", Adobe's inverted polarity */
            for (int x = 0; x < w; x++) {
                const uint8_t *p = row + 4 * x;
                const uint32_t k = 255u - p[3];
                for (int c = 0; c < 3; c++) o[4 * x + c] = cmyk_channel(255u - p[c], k);
                o[4 * x + 3] = 255;
            }
        } else {
            row_to_rgba(row, w, ch, 1, o);
        }
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    free(row);
    return DT_OK;
}

/* ------------------------------------------------------------ PNG (libpng) */

typedef struct {
    const uint8_t *p;
    size_t n, off;
    char msg[256];
} png_src;

static void png_read_mem(png_structp png, png_bytep dst, size_t len) {
    png_src *s = png_get_io_ptr(png);
    if (len > s->n - s->off) png_error(png, "truncated: the file ends inside the image data");
    memcpy(dst, s->p + s->off, len);
    s->off += len;
}

static void png_fail(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_warn(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;   /* Pillow ignores ancillary-chunk trouble as well */
}

static int decode_png(const uint8_t *bytes, size_t n, const char *name, uint64_t max_pixels, dt_image *out,
                      dt_error *err) {
    /* the size from IHDR (the first chunk: PNG spec 5.6) before libpng reads further */
    static const size_t IHDR_END = 24;
    if (n >= IHDR_END && !memcmp(bytes + 12, "IHDR", 4)) {
        const uint8_t *d = bytes + 16;
        const uint64_t w = (uint64_t)d[0] << 24 | d[1] << 16 | d[2] << 8 | d[3];
        const uint64_t h = (uint64_t)d[4] << 24 | d[5] << 16 | d[6] << 8 | d[7];
        int rc = check_pixels(name, w, h, max_pixels, err);
        if (rc) return rc;
    }
    png_src src = {.p = bytes, .n = n};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_warn);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    uint8_t *volatile buf = NULL;
    png_bytep *volatile rows = NULL;
    volatile int rc = DT_OK;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory", name);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free(buf);
        free(rows);
        dt_image_free(out);
        return rc ? rc : dt_errorf(err, DT_EINVAL, "%s: corrupt or truncated PNG: %s", name, src.msg);
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_read_info(png, info);
    const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if ((rc = check_pixels(name, w, h, max_pixels, err))) png_longjmp(png, 1);
    const int depth = png_get_bit_depth(png, info), type = png_get_color_type(png, info);
    const int has_trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
    /* palette -> RGB(A), 1/2/4-bit grey -> 8 bits (scaled, as Pillow's L;1 / L;2 / L;4),
     * tRNS -> an alpha channel (Pillow: convert("RGBA") honours info["transparency"]) */
    png_set_expand(png);
    /* 16-bit grey without alpha stays 16-bit (Pillow's I;16, clipped in row_to_rgb) */
    const int keep16 = depth == 16 && type == PNG_COLOR_TYPE_GRAY && !has_trns;
    if (depth == 16 && !keep16) png_set_strip_16(png);   /* the high byte */
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const int ch = png_get_channels(png, info), sample_bytes = keep16 ? 2 : 1;
    const size_t rowbytes = png_get_rowbytes(png, info);
    if (ch < 1 || ch > 4 || rowbytes != (size_t)w * ch * sample_bytes) {
        snprintf(src.msg, sizeof src.msg, "unsupported PNG layout (colour type %d, depth %d)", type, depth);
        png_longjmp(png, 1);
    }
    buf = malloc(rowbytes * h);
    rows = malloc(sizeof *rows * h);
    if (!buf || !rows || (rc = alloc_rgba(out, (int)w, (int)h, name, err))) {
        if (!rc) rc = dt_errorf(err, DT_ENOMEM, "%s: out of memory for %ux%u pixels", name, w, h);
        png_longjmp(png, 1);
    }
    for (png_uint_32 y = 0; y < h; y++) rows[y] = buf + rowbytes * y;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    for (png_uint_32 y = 0; y < h; y++) row_to_rgba(rows[y], (int)w, ch, sample_bytes, out->rgba + (size_t)y * w * 4);
    out->has_alpha = ch == 2 || ch == 4;
    png_destroy_read_struct(&png, &info, NULL);
    free(buf);
    free(rows);
    return DT_OK;
}

/* ------------------------------------------------------------ format sniffing */

static const char *other_format(const uint8_t *b, size_t n) {
    if (n >= 6 && (!memcmp(b, "GIF87a", 6) || !memcmp(b, "GIF89a", 6))) return "GIF";
    if (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) return "WebP";
    if (n >= 2 && !memcmp(b, "BM", 2)) return "BMP";
    if (n >= 4 && (!memcmp(b, "II*\0", 4) || !memcmp(b, "MM\0*", 4))) return "TIFF";
    return NULL;
}

int dt_image_decode(const void *bytes, size_t n, const char *name, uint64_t max_pixels, dt_image *out,
                    dt_error *err) {
    static const uint8_t JPEG_SOI[3] = {0xFF, 0xD8, 0xFF};
    const uint8_t *b = bytes;
    memset(out, 0, sizeof *out);
    out->orientation = 1;
    if (n >= 3 && !memcmp(b, JPEG_SOI, 3)) return decode_jpeg(b, n, name, max_pixels, out, err);
    if (n >= 8 && !png_sig_cmp(b, 0, 8)) return decode_png(b, n, name, max_pixels, out, err);
    const char *f = other_format(b, n);
    if (f)
        return dt_errorf(err, DT_EINVAL,
                         "%s: a %s image; dtrun decodes JPEG and PNG only: convert it (e.g. ImageMagick's "
                         "convert FILE FILE.png)", name, f);
    return dt_errorf(err, DT_EINVAL, "%s: not a JPEG or PNG image (%s)", name,
                     n ? "unknown leading bytes" : "the file is empty");
}

int dt_image_load(const char *path, uint64_t max_pixels, dt_image *out, dt_error *err) {
    char *bytes;
    size_t n;
    memset(out, 0, sizeof *out);
    int rc = dt_file_read(path, "JPEG or PNG image", DT_IMAGE_MAX_FILE_BYTES, &bytes, &n, err);
    if (rc) return rc;
    rc = dt_image_decode(bytes, n, path, max_pixels, out, err);
    free(bytes);
    return rc;
}

/* ------------------------------------------------------------ CLIPImageProcessor */

void dt_clip_defaults(dt_clip_opts *o, int size) {
    static const float mean[3] = DT_CLIP_MEAN, std[3] = DT_CLIP_STD;
    memset(o, 0, sizeof *o);
    o->shortest_edge = size;
    o->crop_height = o->crop_width = size;
    memcpy(o->mean, mean, sizeof mean);
    memcpy(o->std, std, sizeof std);
    o->rescale = DT_CLIP_RESCALE;
}

/* PyTorch's antialiased bicubic (UpSampleKernel.cpp HelperInterpCubic::aa_filter, the
 * same kernel as Pillow's bicubic_filter): a = -0.5 */
#define CUBIC_A (-0.5)
#define CUBIC_INTERP_SIZE 4   /* taps at scale 1 */
/* int16 weights: the precision grows while the largest weight stays below 2^15
 * (compute_index_ranges_int16_weights, from Pillow-SIMD), at most 22 bits */
#define WEIGHT_BITS_MAX 22
#define INT16_LIMIT (1 << 15)

static double cubic(double x) {
    x = fabs(x);
    if (x < 1.0) return ((CUBIC_A + 2.0) * x - (CUBIC_A + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * CUBIC_A;
    return 0.0;
}

/* One dimension's taps: for output i, inputs [xmin[i], xmin[i] + xsize[i]) with int16
 * weights w[i * ksize + j]; *prec the shared precision in bits. */
typedef struct {
    int *xmin, *xsize;
    int16_t *w;
    int ksize, prec;
} taps;

static void taps_free(taps *t) {
    free(t->xmin);
    free(t->xsize);
    free(t->w);
}

static int taps_make(int in, int outn, taps *t) {
    const double scale = (double)in / outn;   /* area_pixel_compute_scale, align_corners false */
    const double support = scale >= 1.0 ? CUBIC_INTERP_SIZE * 0.5 * scale : CUBIC_INTERP_SIZE * 0.5;
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    t->ksize = (int)ceil(support) * 2 + 1;
    t->xmin = malloc(sizeof *t->xmin * outn);
    t->xsize = malloc(sizeof *t->xsize * outn);
    double *wf = malloc(sizeof *wf * outn * t->ksize);
    t->w = malloc(sizeof *t->w * outn * t->ksize);
    if (!t->xmin || !t->xsize || !wf || !t->w) {
        free(wf);
        taps_free(t);
        return DT_ENOMEM;
    }
    double wmax = 0.0;
    for (int i = 0; i < outn; i++) {
        const double center = scale * (i + 0.5);
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        const int k = hi - lo;
        double *wi = wf + (size_t)i * t->ksize, total = 0.0;
        for (int j = 0; j < k; j++) total += wi[j] = cubic((j + lo - center + 0.5) * invscale);
        for (int j = 0; j < k; j++) {
            if (total != 0.0) wi[j] /= total;
            if (wi[j] > wmax) wmax = wi[j];
        }
        t->xmin[i] = lo;
        t->xsize[i] = k;
    }
    int prec = 0;
    for (; prec < WEIGHT_BITS_MAX; prec++)
        if ((int)(0.5 + wmax * (1 << (prec + 1))) >= INT16_LIMIT) break;
    t->prec = prec > 0 ? prec : 1;   /* at least one bit: the rounding half, 1 << (prec - 1), is defined */
    for (int i = 0; i < outn; i++)
        for (int j = 0; j < t->ksize; j++) {   /* taps past xsize carry no weight */
            double v = j < t->xsize[i] ? wf[(size_t)i * t->ksize + j] * (1 << t->prec) : 0.0;
            v = v < 0 ? v - 0.5 : v + 0.5;   /* rounded half away from zero, held in int16 */
            t->w[(size_t)i * t->ksize + j] = (int16_t)(v <= INT16_MIN ? INT16_MIN : v >= INT16_MAX ? INT16_MAX : v);
        }
    free(wf);
    return DT_OK;
}

static uint8_t clip8(int32_t v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* One pass over RGB rows: dst[y][i] from src[y][xmin..] (horizontal), or dst[i][x] from
 * src[ymin..][x] (vertical); sums start at half an output unit and shift by prec. */
static void pass_h(const uint8_t *src, int sw, int h, const taps *t, int dw, uint8_t *dst) {
    const int32_t half = 1 << (t->prec - 1);
    for (int y = 0; y < h; y++)
        for (int i = 0; i < dw; i++) {
            const int16_t *w = t->w + (size_t)i * t->ksize;
            const uint8_t *s = src + ((size_t)y * sw + t->xmin[i]) * 3;
            int32_t acc[3] = {half, half, half};
            for (int j = 0; j < t->xsize[i]; j++)
                for (int c = 0; c < 3; c++) acc[c] += s[3 * j + c] * w[j];
            for (int c = 0; c < 3; c++) dst[((size_t)y * dw + i) * 3 + c] = clip8(acc[c] >> t->prec);
        }
}

/* acc: stride int32 scratch; rows are summed whole (contiguous in x) for the cache */
static void pass_v(const uint8_t *src, int w, const taps *t, int dh, int32_t *acc, uint8_t *dst) {
    const int32_t half = 1 << (t->prec - 1);
    const size_t stride = (size_t)w * 3;
    for (int i = 0; i < dh; i++) {
        const int16_t *wt = t->w + (size_t)i * t->ksize;
        for (size_t x = 0; x < stride; x++) acc[x] = half;
        for (int j = 0; j < t->xsize[i]; j++) {
            const uint8_t *row = src + (size_t)(t->xmin[i] + j) * stride;
            const int32_t wj = wt[j];
            for (size_t x = 0; x < stride; x++) acc[x] += row[x] * wj;
        }
        for (size_t x = 0; x < stride; x++) dst[(size_t)i * stride + x] = clip8(acc[x] >> t->prec);
    }
}

/* torchvision resize_image of a uint8 RGB image to (oh, ow): *out malloc'd (or im itself
 * when the size does not change: torchvision returns the image as it is). */
static int resize(const uint8_t *rgb, int w, int h, int ow, int oh, uint8_t **out) {
    *out = NULL;
    taps th = {0}, tv = {0};
    uint8_t *mid = NULL, *res = NULL;
    const int need_h = ow != w, need_v = oh != h;
    int rc = DT_OK;
    if ((need_h && (rc = taps_make(w, ow, &th))) || (need_v && (rc = taps_make(h, oh, &tv)))) goto done;
    const uint8_t *cur = rgb;
    if (need_h) {   /* horizontal first (upsample_avx_bilinear_bicubic_uint8) */
        if (!(mid = malloc((size_t)ow * h * 3))) { rc = DT_ENOMEM; goto done; }
        pass_h(rgb, w, h, &th, ow, mid);
        cur = mid;
    }
    if (need_v) {
        int32_t *acc = malloc(sizeof *acc * (size_t)ow * 3);
        if (!acc || !(res = malloc((size_t)ow * oh * 3))) {
            free(acc);
            rc = DT_ENOMEM;
            goto done;
        }
        pass_v(cur, ow, &tv, oh, acc, res);
        free(acc);
    } else {
        res = mid;
        mid = NULL;
    }
    *out = res;
    res = NULL;
done:
    taps_free(&th);
    taps_free(&tv);
    free(mid);
    free(res);
    return rc;
}

/* The RGB image the processor sees. HF (transformers convert_to_rgb, do_convert_rgb): an
 * image with alpha composited on opaque white; LLaVA's training code
 * (Image.open(...).convert("RGB")): alpha dropped. */
static uint8_t *to_rgb(const dt_image *im, int drop_alpha) {
    const size_t n = (size_t)im->width * im->height;
    uint8_t *rgb = malloc(n * 3);
    if (!rgb) return NULL;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = im->rgba + 4 * i;
        for (int c = 0; c < 3; c++) rgb[3 * i + c] = im->has_alpha && !drop_alpha ? over_white(p[c], p[3]) : p[c];
    }
    return rgb;
}

/* Pillow's ImageOps.exif_transpose (transformers' load_image applies it): orientation 2..8
 * is FLIP_LEFT_RIGHT, ROTATE_180, FLIP_TOP_BOTTOM, TRANSPOSE, ROTATE_270, TRANSVERSE,
 * ROTATE_90 (counter-clockwise). rgb (w x h) becomes a new *w x *h image. */
static uint8_t *exif_transpose(uint8_t *rgb, int *w, int *h, int orientation) {
    const int W = *w, H = *h, swap = orientation >= 5;
    const int ow = swap ? H : W, oh = swap ? W : H;
    uint8_t *out = malloc((size_t)ow * oh * 3);
    if (!out) {
        free(rgb);
        return NULL;
    }
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            int sx, sy;
            switch (orientation) {
            case 2: sx = W - 1 - x; sy = y; break;
            case 3: sx = W - 1 - x; sy = H - 1 - y; break;
            case 4: sx = x; sy = H - 1 - y; break;
            case 5: sx = y; sy = x; break;
            case 6: sx = y; sy = H - 1 - x; break;
            case 7: sx = W - 1 - y; sy = H - 1 - x; break;
            default: sx = W - 1 - y; sy = x; break;   /* 8 */
            }
            memcpy(out + ((size_t)y * ow + x) * 3, rgb + ((size_t)sy * W + sx) * 3, 3);
        }
    free(rgb);
    *w = ow;
    *h = oh;
    return out;
}

/* LLaVA train.py expand2square(img, tuple(int(x * 255) for x in image_mean)): the image
 * pasted at ((s - w) // 2, (s - h) // 2) on a square of side max(w, h). */
static uint8_t *pad_square(const uint8_t *rgb, int w, int h, const dt_clip_opts *o) {
    const int s = w > h ? w : h;
    uint8_t *sq = malloc((size_t)s * s * 3);
    if (!sq) return NULL;
    uint8_t bg[3];
    for (int c = 0; c < 3; c++) bg[c] = (uint8_t)(int)(o->mean[c] * 255.0);
    for (size_t i = 0; i < (size_t)s * s; i++) memcpy(sq + 3 * i, bg, 3);
    const int x0 = (s - w) / 2, y0 = (s - h) / 2;
    for (int y = 0; y < h; y++) memcpy(sq + ((size_t)(y + y0) * s + x0) * 3, rgb + (size_t)y * w * 3, (size_t)w * 3);
    return sq;
}

/* transformers get_resize_output_image_size(default_to_square=False): the short side to
 * size, the long one to int(size * long / short) (Python's true division, truncated) */
static void shortest_edge_size(int w, int h, int size, int64_t *ow, int64_t *oh) {
    const int shrt = w <= h ? w : h, lng = w <= h ? h : w;
    const int64_t nl = (int64_t)((double)size * lng / shrt);   /* below 2^13 x 2^32: fits */
    *ow = w <= h ? size : nl;
    *oh = w <= h ? nl : size;
}

/* The crop [ch][cw] of the resized image (rw x rh, HWC) into out (CHW): the processor's
 * center_crop, zero padding first when the crop is larger (tvF.pad, fill 0). */
static void center_crop(const uint8_t *rs, int rw, int rh, int cw, int ch, uint8_t *out) {
    const int top = rh >= ch ? (int)((rh - ch) / 2.0) : -((ch - rh) / 2);
    const int left = rw >= cw ? (int)((rw - cw) / 2.0) : -((cw - rw) / 2);
    const size_t plane = (size_t)ch * cw;
    for (int y = 0; y < ch; y++)
        for (int x = 0; x < cw; x++) {
            const int sy = y + top, sx = x + left;
            const int in = sy >= 0 && sy < rh && sx >= 0 && sx < rw;
            for (int c = 0; c < 3; c++)
                out[c * plane + (size_t)y * cw + x] = in ? rs[((size_t)sy * rw + sx) * 3 + c] : 0;
        }
}

/* preprocessor settings past which a crop is no longer an image for a vision tower */
#define CLIP_MAX_SIDE 8192

int dt_clip_check(const dt_clip_opts *o, dt_error *err) {
    if (o->shortest_edge < 1 || o->shortest_edge > CLIP_MAX_SIDE || o->crop_height < 1 ||
        o->crop_height > CLIP_MAX_SIDE || o->crop_width < 1 || o->crop_width > CLIP_MAX_SIDE)
        return dt_errorf(err, DT_EINVAL, "image preprocessing: shortest edge %d, crop %dx%d: each must be 1..%d",
                         o->shortest_edge, o->crop_width, o->crop_height, CLIP_MAX_SIDE);
    for (int c = 0; c < 3; c++)
        if (!(o->std[c] > 0) || !(o->mean[c] >= 0 && o->mean[c] <= 1))
            return dt_errorf(err, DT_EINVAL, "image preprocessing: mean %g / std %g: the mean must be in [0, 1], "
                             "the std above 0", o->mean[c], o->std[c]);
    if (!(o->rescale > 0)) return dt_errorf(err, DT_EINVAL, "image preprocessing: rescale factor %g", o->rescale);
    return DT_OK;
}

int dt_image_clip_u8(const dt_image *im, const dt_clip_opts *o, uint8_t *out, dt_error *err) {
    if (dt_clip_check(o, err)) return err->code;
    int w = im->width, h = im->height;
    const uint64_t side = (uint64_t)(w > h ? w : h);
    if (o->pad_square && side * side > DT_IMAGE_MAX_PIXELS)   /* expand2square of 60 x 46504: 2.2 G pixels */
        return dt_errorf(err, DT_EINVAL, "a %dx%d image padded to a square would be %llux%llu = %llu pixels, above the "
                         "limit of %llu: crop it first, or prepare with --image-aspect crop", w, h,
                         (unsigned long long)side, (unsigned long long)side, (unsigned long long)(side * side),
                         (unsigned long long)DT_IMAGE_MAX_PIXELS);
    uint8_t *rgb = to_rgb(im, o->pad_square || o->exif_transpose);
    if (rgb && o->exif_transpose && im->orientation >= 2 && im->orientation <= 8)
        rgb = exif_transpose(rgb, &w, &h, im->orientation);
    if (rgb && o->pad_square && w != h) {
        uint8_t *sq = pad_square(rgb, w, h, o);
        free(rgb);
        rgb = sq;
        w = h = w > h ? w : h;
    }
    int64_t ow64, oh64;
    shortest_edge_size(w, h, o->shortest_edge, &ow64, &oh64);
    /* an extreme aspect ratio resizes to a bomb of its own (1 x 300000 -> 336 x 100800000):
     * the resized image is held to the decoder's pixel limit, which also bounds the
     * intermediate pass (at most max(w x h, ow x oh) pixels) */
    if ((uint64_t)ow64 * (uint64_t)oh64 > DT_IMAGE_MAX_PIXELS) {
        free(rgb);
        return dt_errorf(err, DT_EINVAL, "a %dx%d image resized to %d on its shortest edge would be %lldx%lld = %llu "
                         "pixels, above the limit of %llu: crop it first, or prepare with --image-aspect pad",
                         im->width, im->height, o->shortest_edge, (long long)ow64, (long long)oh64,
                         (unsigned long long)ow64 * (unsigned long long)oh64, (unsigned long long)DT_IMAGE_MAX_PIXELS);
    }
    const int ow = (int)ow64, oh = (int)oh64;
    uint8_t *rs = NULL;
    if (!rgb || resize(rgb, w, h, ow, oh, &rs)) {
        free(rgb);
        return dt_errorf(err, DT_ENOMEM, "image preprocessing: out of memory resizing %dx%d to %dx%d", w, h, ow, oh);
    }
    center_crop(rs ? rs : rgb, ow, oh, o->crop_width, o->crop_height, out);
    free(rs);
    free(rgb);
    return DT_OK;
}

void dt_image_normalize(const uint8_t *chw, size_t n, const dt_clip_opts *o, float *out) {
    /* image_processing_backends.py _fuse_mean_std_and_rescale_factor: float32 tensors
     * mean * (1 / rescale_factor) and std * (1 / rescale_factor), then tvF.normalize:
     * (x - mean') / std' in float32 */
    const float inv = (float)(1.0 / o->rescale);
    for (int c = 0; c < 3; c++) {
        const float m = o->mean[c] * inv, s = o->std[c] * inv;
        for (size_t i = 0; i < n; i++) out[c * n + i] = ((float)chw[c * n + i] - m) / s;
    }
}
