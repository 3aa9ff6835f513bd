/* png_check.h — reads back a PNG (through libpng's simplified API, any colour type
 * and bit depth) or an SVG written by the chart library and measures it: size,
 * pixels that differ from the background, distinct colours, SVG drawing elements. */
#ifndef PNG_CHECK_H
#define PNG_CHECK_H

#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct chart_png {
    int ok;                /* 1: parsed and decoded */
    char why[128];         /* when !ok */
    uint32_t width, height;
    double ink;            /* fraction of pixels != background (the top-left pixel) */
    int colors;            /* distinct RGB colours (capped at COLOR_SET) */
    uint32_t bg;           /* background 0xRRGGBB */
    uint32_t *rgb;         /* [height][width] decoded pixels (caller frees) */
} chart_png;

#define COLOR_SET 4096

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    if (b) { b[n] = 0; *len = (size_t)n; }
    return b;
}

/* The fraction of pixels unlike the top-left one, and the distinct colours. */
static void png_measure(chart_png *out) {
    uint32_t *set = calloc(COLOR_SET * 2, sizeof *set);
    size_t diff = 0, total = (size_t)out->width * out->height;
    out->bg = out->rgb[0];
    for (size_t i = 0; i < total; i++) {
        uint32_t v = out->rgb[i];
        diff += v != out->bg;
        if (out->colors < COLOR_SET) {
            uint32_t key = v | 0x1000000u, h = (v * 2654435761u) % (COLOR_SET * 2);
            while (set[h] && set[h] != key) h = (h + 1) % (COLOR_SET * 2);
            if (!set[h]) { set[h] = key; out->colors++; }
        }
    }
    free(set);
    out->ink = total ? (double)diff / total : 0;
}

/* Decodes the PNG in memory (b, n) into out: libpng converts any colour type, bit
 * depth, palette or interlace to 8-bit RGB (alpha composited on nothing: dropped). */
static void png_decode(const unsigned char *b, size_t n, chart_png *out) {
    memset(out, 0, sizeof *out);
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, b, n)) {
        snprintf(out->why, sizeof out->why, "libpng: %s", im.message);
        return;
    }
    im.format = PNG_FORMAT_RGB;
    size_t total = (size_t)im.width * im.height;
    unsigned char *px = malloc(PNG_IMAGE_SIZE(im));
    if (!px || !png_image_finish_read(&im, NULL, px, 0, NULL)) {
        snprintf(out->why, sizeof out->why, "libpng: %s", px ? im.message : "out of memory");
        png_image_free(&im);
        free(px);
        return;
    }
    out->width = im.width;
    out->height = im.height;
    out->rgb = malloc(total * sizeof *out->rgb);
    for (size_t i = 0; i < total; i++)
        out->rgb[i] = (uint32_t)px[3 * i] << 16 | (uint32_t)px[3 * i + 1] << 8 | px[3 * i + 2];
    free(px);
    png_measure(out);
    out->ok = 1;
}

static int png_read(const char *path, chart_png *out) {
    size_t n = 0;
    unsigned char *b = slurp(path, &n);
    if (!b) {
        memset(out, 0, sizeof *out);
        snprintf(out->why, sizeof out->why, "cannot read %s", path);
        return 0;
    }
    png_decode(b, n, out);
    free(b);
    return out->ok;
}

static int png_has_color(const chart_png *p, uint32_t rgb) {
    size_t total = (size_t)p->width * p->height;
    for (size_t i = 0; i < total; i++)
        if (p->rgb[i] == rgb) return 1;
    return 0;
}

typedef struct svg_info {
    int ok;                /* starts with <?xml, has <svg ...>, ends with </svg> */
    double width_in, height_in;
    int elements;          /* <line <rect <path <polyline <polygon <circle <ellipse <text */
} svg_info;

static int count_sub(const char *s, const char *sub) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub)) n++;
    return n;
}

static int svg_read(const char *path, svg_info *out) {
    size_t n = 0;
    memset(out, 0, sizeof *out);
    char *b = (char *)slurp(path, &n);
    if (!b) return 0;
    while (n && (b[n - 1] == '\n' || b[n - 1] == ' ' || b[n - 1] == '\r')) b[--n] = 0;
    const char *svg = strstr(b, "<svg");
    out->ok = strncmp(b, "<?xml", 5) == 0 && svg && n >= 6 && strcmp(b + n - 6, "</svg>") == 0 &&
              count_sub(b, "<svg") == 1 && count_sub(b, "</svg>") == 1;
    if (svg) {
        const char *w = strstr(svg, "width=\""), *h = strstr(svg, "height=\"");
        if (w) out->width_in = atof(w + 7);
        if (h) out->height_in = atof(h + 8);
    }
    const char *els[] = {"<line", "<rect", "<path", "<polyline", "<polygon", "<circle", "<ellipse", "<text"};
    for (size_t i = 0; i < sizeof els / sizeof els[0]; i++) out->elements += count_sub(b, els[i]);
    free(b);
    return out->ok;
}

#endif
