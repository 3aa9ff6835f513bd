/* png_check.h — reads back a PNG (any colour type / bit depth, non-interlaced)
 * or an SVG written by the chart library and measures it: size, pixels that
 * differ from the background, distinct colours, SVG drawing elements. */
#ifndef PNG_CHECK_H
#define PNG_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

typedef struct png_info {
    int ok;                /* 1: parsed and decoded */
    char why[128];         /* when !ok */
    uint32_t width, height;
    int depth, color_type;
    double ink;            /* fraction of pixels != background (the top-left pixel) */
    int colors;            /* distinct RGB colours (capped at COLOR_SET) */
    uint32_t bg;           /* background 0xRRGGBB */
    uint32_t *rgb;         /* [height][width] decoded pixels (caller frees) */
} png_info;

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

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Decodes the PNG in memory (b, n) into out. */
static void png_decode(const unsigned char *b, size_t n, png_info *out) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memset(out, 0, sizeof *out);
    if (n < 33 || memcmp(b, sig, 8) != 0 || memcmp(b + 12, "IHDR", 4) != 0) {
        snprintf(out->why, sizeof out->why, "no PNG signature / IHDR");
        return;
    }
    out->width = be32(b + 16);
    out->height = be32(b + 20);
    out->depth = b[24];
    out->color_type = b[25];
    if (b[28] != 0) { snprintf(out->why, sizeof out->why, "interlaced"); return; }
    int ch = out->color_type == 0 ? 1 : out->color_type == 2 ? 3 : out->color_type == 3 ? 1
           : out->color_type == 4 ? 2 : out->color_type == 6 ? 4 : 0;
    if (!ch) { snprintf(out->why, sizeof out->why, "colour type %d", out->color_type); return; }
    uint32_t pal[256] = {0};
    unsigned char *idat = NULL;
    size_t idat_n = 0;
    for (size_t p = 8; p + 12 <= n;) {
        uint32_t len = be32(b + p);
        const unsigned char *type = b + p + 4, *data = b + p + 8;
        if (p + 12 + len > n) break;
        if (!memcmp(type, "PLTE", 4))
            for (uint32_t i = 0; i < len / 3 && i < 256; i++)
                pal[i] = (uint32_t)data[3 * i] << 16 | data[3 * i + 1] << 8 | data[3 * i + 2];
        if (!memcmp(type, "IDAT", 4)) {
            idat = realloc(idat, idat_n + len);
            memcpy(idat + idat_n, data, len);
            idat_n += len;
        }
        p += 12 + len;
    }
    size_t bits = (size_t)ch * out->depth;
    size_t stride = (out->width * bits + 7) / 8, bpp = bits >= 8 ? bits / 8 : 1;
    uLongf raw_n = (uLongf)((stride + 1) * out->height);
    unsigned char *raw = malloc(raw_n);
    if (!idat || uncompress(raw, &raw_n, idat, (uLong)idat_n) != Z_OK ||
        raw_n != (stride + 1) * out->height) {
        snprintf(out->why, sizeof out->why, "IDAT does not inflate to %zu bytes",
                 (stride + 1) * out->height);
        free(idat);
        free(raw);
        return;
    }
    free(idat);
    /* unfilter in place: row y at raw + y*(stride+1) + 1 */
    for (uint32_t y = 0; y < out->height; y++) {
        unsigned char *row = raw + y * (stride + 1), *cur = row + 1;
        unsigned char *prev = y ? raw + (y - 1) * (stride + 1) + 1 : NULL;
        for (size_t i = 0; i < stride; i++) {
            int a = i >= bpp ? cur[i - bpp] : 0, up = prev ? prev[i] : 0,
                c = (prev && i >= bpp) ? prev[i - bpp] : 0;
            switch (row[0]) {
            case 1: cur[i] += a; break;
            case 2: cur[i] += up; break;
            case 3: cur[i] += (a + up) / 2; break;
            case 4: cur[i] += paeth(a, up, c); break;
            }
        }
    }
    out->rgb = malloc((size_t)out->width * out->height * sizeof *out->rgb);
    for (uint32_t y = 0; y < out->height; y++) {
        const unsigned char *cur = raw + y * (stride + 1) + 1;
        for (uint32_t x = 0; x < out->width; x++) {
            uint32_t s[4];
            for (int k = 0; k < ch; k++) {
                size_t bit = ((size_t)x * ch + k) * out->depth;
                if (out->depth == 16) s[k] = cur[bit / 8];   /* high byte */
                else if (out->depth == 8) s[k] = cur[bit / 8];
                else s[k] = (cur[bit / 8] >> (8 - out->depth - bit % 8)) & ((1u << out->depth) - 1);
            }
            uint32_t rgb;
            if (out->color_type == 3) rgb = pal[s[0] & 255];
            else if (out->color_type == 0 || out->color_type == 4) {
                uint32_t g = out->depth < 8 ? s[0] * 255 / ((1u << out->depth) - 1) : s[0];
                rgb = g << 16 | g << 8 | g;
            } else rgb = s[0] << 16 | s[1] << 8 | s[2];
            out->rgb[(size_t)y * out->width + x] = rgb;
        }
    }
    free(raw);
    /* ink and distinct colours */
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
    out->ok = 1;
}

static int png_read(const char *path, png_info *out) {
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

static int png_has_color(const png_info *p, uint32_t rgb) {
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
