/* chart.c — bars, x-y series and Gantt timelines drawn with GNU libplot's
 * thread-safe _r API (plotutils 2.6, "png" and "svg" plotters).
 *
 * Coordinates: user space is the figure in pixels, (0,0) bottom-left to
 * (W,H) top-right, for both formats (the SVG page is W/96 x H/96 inches, so
 * one user unit is one CSS pixel). Layout is computed from measured text
 * widths (pl_flabelwidth_r), so nothing overlaps: title, then the legend in
 * rows, then the plot area, then tick labels and axis labels.
 *
 * libplot facts relied on (docs/reports.md "Output"; GNU plotutils manual,
 * §9.5 "Plotter parameters"):
 * unset plotter parameters fall back to environment variables of the same name,
 * so every parameter that changes the picture is set here; the PNG plotter
 * only has the Hershey stroke fonts; libplot writes warnings to the error
 * stream it is given, which here is a memory buffer (this library never prints).
 *
 * Both formats use the Hershey fonts. With a PostScript font libplot's SVG
 * gets <text> anchored at its start, placed with Helvetica's metrics; a viewer
 * without Helvetica substitutes a wider font (DejaVu Sans: labels measured
 * ~15% wider) and right-aligned or rotated labels then run into the axes.
 * Hershey glyphs are strokes, so the SVG looks exactly like the PNG. */
#include "dt_chart.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>

#include <plot.h>   /* needs FILE from stdio.h first */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---- constants (all lengths in pixels of the 960x600 reference figure) ---- */

#define CSS_PX_PER_INCH 96.0      /* CSS 2.1 §4.3.2: 1in = 96px, SVG page size */
#define REF_WIDTH 960.0           /* figure the sizes below were tuned on */
#define REF_HEIGHT 600.0
#define MIN_SCALE 0.6             /* fonts never shrink below 60% (readability) */
#define FS_TICK 15.0              /* tick labels, value labels */
#define FS_TEXT 16.0              /* axis labels, legend, row labels */
#define FS_TITLE 21.0             /* title (bold) */
#define PAD 14.0                  /* outer margin */
#define TICK_LEN 6.0
#define LINE_W 2.2                /* series lines */
#define AXIS_W 1.3
#define GRID_W 1.0
#define MARKER_PX 9.0             /* default marker diameter */
#define TARGET_TICKS 6            /* about this many labelled ticks per axis */
#define MAX_TICKS 40
#define LABEL_MAX 96              /* characters kept of any label */
#define BAR_FILL 0.62             /* fraction of a bar's slot that is bar */
#define GANTT_BAR 0.72            /* fraction of a Gantt row that is bar */
#define MAX_LABEL_FRAC 0.33       /* rotated bar labels take at most this much height */

#define COLOR_TEXT 0x222222u
#define COLOR_AXIS 0x444444u
#define COLOR_GRID 0xDDDDDDu
#define COLOR_LIMIT 0xD62728u
#define COLOR_OUTLINE 0x333333u

/* Tableau 10 (Tableau Software's default categorical palette, 2016 revision),
 * reordered so the light colours (yellow, pink, grey), weak as thin lines on
 * white, come last. */
static const uint32_t k_palette[] = {0x4E79A7, 0xF28E2B, 0x59A14F, 0xE15759, 0x76B7B2,
                                     0xB07AA1, 0x9C755F, 0xEDC948, 0xFF9DA7, 0xBAB0AC};
#define PALETTE_N ((int)(sizeof k_palette / sizeof k_palette[0]))

/* ---- canvas: one open plotter writing to a temporary file ---- */

typedef struct canvas {
    plPlotter *pl;
    plPlotterParams *pp;
    FILE *out;                 /* the temporary file */
    FILE *log;                 /* libplot's error stream (memory) */
    char *logbuf;
    size_t loglen;
    char *tmp;                 /* temporary path, renamed to path at the end */
    const char *path;
    int svg;
    double W, H, s;            /* figure size (px) and font/line scale */
} canvas;

static int chart_format(const char *path, int *svg, dt_error *err) {
    if (!path || !*path) return dt_errorf(err, DT_EINVAL, "chart: no output file name given");
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (dot && (!slash || dot > slash)) {
        if (strcasecmp(dot, ".png") == 0) { *svg = 0; return DT_OK; }
        if (strcasecmp(dot, ".svg") == 0) { *svg = 1; return DT_OK; }
    }
    return dt_errorf(err, DT_EINVAL, "chart file '%s': unknown format; name it *.png or *.svg", path);
}

static int chart_size(const dt_chart_opts *o, int *w, int *h, dt_error *err) {
    *w = o && o->width ? o->width : DT_CHART_DEFAULT_WIDTH;
    *h = o && o->height ? o->height : DT_CHART_DEFAULT_HEIGHT;
    if (*w < DT_CHART_MIN_SIZE || *w > DT_CHART_MAX_SIZE || *h < DT_CHART_MIN_SIZE ||
        *h > DT_CHART_MAX_SIZE)
        return dt_errorf(err, DT_EINVAL,
                         "chart size %dx%d pixels: width and height must be %d..%d (0 = default %dx%d)",
                         *w, *h, DT_CHART_MIN_SIZE, DT_CHART_MAX_SIZE, DT_CHART_DEFAULT_WIDTH,
                         DT_CHART_DEFAULT_HEIGHT);
    return DT_OK;
}

static void canvas_release(canvas *cv) {
    if (cv->pl) pl_deletepl_r(cv->pl);
    if (cv->pp) pl_deleteplparams(cv->pp);
    if (cv->out) fclose(cv->out);
    if (cv->log) fclose(cv->log);
    free(cv->logbuf);
    free(cv->tmp);
    memset(cv, 0, sizeof *cv);
}

/* Drops the temporary file and everything else (failure path). */
static void canvas_abort(canvas *cv) {
    if (cv->tmp) unlink(cv->tmp);
    canvas_release(cv);
}

static const char *canvas_log(canvas *cv) {
    if (!cv->log) return "";
    fflush(cv->log);
    if (!cv->logbuf || !cv->loglen) return "";
    char *nl = strchr(cv->logbuf, '\n');
    if (nl) *nl = '\0';
    return cv->logbuf;
}

static int canvas_open(canvas *cv, const char *path, const dt_chart_opts *o, dt_error *err) {
    memset(cv, 0, sizeof *cv);
    int w, h, rc;
    if ((rc = chart_format(path, &cv->svg, err)) || (rc = chart_size(o, &w, &h, err))) return rc;
    cv->path = path;
    cv->W = w;
    cv->H = h;
    cv->s = fmin(w / REF_WIDTH, h / REF_HEIGHT);
    if (cv->s < MIN_SCALE) cv->s = MIN_SCALE;

    /* Temporary name in the same directory, so rename() is atomic. */
    static int counter;
    int seq = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
    size_t n = strlen(path) + 48;
    cv->tmp = malloc(n);
    if (!cv->tmp) return dt_errorf(err, DT_ENOMEM, "chart '%s': out of memory", path);
    snprintf(cv->tmp, n, "%s.tmp.%ld.%d", path, (long)getpid(), seq);
    int fd = open(cv->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        free(cv->tmp);
        cv->tmp = NULL;
        return dt_errorf(err, DT_EIO, "cannot write chart '%s': %s (check that the directory exists and is writable)",
                         path, strerror(e));
    }
    cv->out = fdopen(fd, "wb");
    if (!cv->out) {
        close(fd);
        canvas_abort(cv);
        return dt_errorf(err, DT_EIO, "cannot write chart '%s': fdopen failed", path);
    }
    cv->log = open_memstream(&cv->logbuf, &cv->loglen);
    cv->pp = pl_newplparams();
    if (!cv->log || !cv->pp) {
        canvas_abort(cv);
        return dt_errorf(err, DT_ENOMEM, "chart '%s': out of memory", path);
    }
    /* Every parameter that would otherwise come from the environment. */
    char size[64];
    snprintf(size, sizeof size, "%dx%d", w, h);
    pl_setplparam(cv->pp, "BITMAPSIZE", size);
    snprintf(size, sizeof size, "letter,xsize=%.4fin,ysize=%.4fin", w / CSS_PX_PER_INCH,
             h / CSS_PX_PER_INCH);
    pl_setplparam(cv->pp, "PAGESIZE", size);
    pl_setplparam(cv->pp, "BG_COLOR", "white");
    pl_setplparam(cv->pp, "INTERLACE", "no");
    pl_setplparam(cv->pp, "TRANSPARENT_COLOR", "none");
    pl_setplparam(cv->pp, "EMULATE_COLOR", "no");
    pl_setplparam(cv->pp, "ROTATION", "0");
    pl_setplparam(cv->pp, "MAX_LINE_LENGTH", "500");
    cv->pl = pl_newpl_r(cv->svg ? "svg" : "png", NULL, cv->out, cv->log, cv->pp);
    if (!cv->pl || pl_openpl_r(cv->pl) < 0) {
        rc = dt_errorf(err, DT_EINTERNAL, "chart '%s': libplot could not open a %s plotter: %s",
                       path, cv->svg ? "svg" : "png", canvas_log(cv));
        canvas_abort(cv);
        return rc;
    }
    pl_fspace_r(cv->pl, 0.0, 0.0, cv->W, cv->H);
    pl_erase_r(cv->pl);
    pl_joinmod_r(cv->pl, "round");
    pl_capmod_r(cv->pl, "butt");
    return DT_OK;
}

/* Closes the plotter (libplot writes the PNG here), flushes and renames. */
static int canvas_finish(canvas *cv, dt_error *err) {
    int rc = DT_OK;
    if (pl_closepl_r(cv->pl) < 0)
        rc = dt_errorf(err, DT_EIO, "chart '%s': libplot failed to write the image: %s", cv->path,
                       canvas_log(cv));
    pl_deletepl_r(cv->pl);
    cv->pl = NULL;
    if (!rc && (fflush(cv->out) != 0 || ferror(cv->out) || fsync(fileno(cv->out)) != 0))
        rc = dt_errorf(err, DT_EIO, "chart '%s': write failed: %s", cv->path, strerror(errno));
    if (!rc) {
        FILE *f = cv->out;
        cv->out = NULL;
        if (fclose(f) != 0)
            rc = dt_errorf(err, DT_EIO, "chart '%s': write failed: %s", cv->path, strerror(errno));
    }
    if (!rc && rename(cv->tmp, cv->path) != 0)
        rc = dt_errorf(err, DT_EIO, "cannot write chart '%s': %s", cv->path, strerror(errno));
    if (rc) {
        canvas_abort(cv);
        return rc;
    }
    canvas_release(cv);
    return DT_OK;
}

/* rc == DT_OK: finish (write, rename); otherwise drop everything and return rc. */
static int canvas_end(canvas *cv, int rc, dt_error *err) {
    if (rc) {
        canvas_abort(cv);
        return rc;
    }
    return canvas_finish(cv, err);
}

/* ---- drawing helpers ---- */

static void pen(canvas *cv, uint32_t rgb) {
    pl_pencolor_r(cv->pl, (int)((rgb >> 16) & 0xFF) * 257, (int)((rgb >> 8) & 0xFF) * 257,
                  (int)(rgb & 0xFF) * 257);
}
static void fill(canvas *cv, uint32_t rgb) {
    pl_fillcolor_r(cv->pl, (int)((rgb >> 16) & 0xFF) * 257, (int)((rgb >> 8) & 0xFF) * 257,
                   (int)(rgb & 0xFF) * 257);
    pl_filltype_r(cv->pl, 1);
}
static void nofill(canvas *cv) { pl_filltype_r(cv->pl, 0); }
static void width(canvas *cv, double px) { pl_flinewidth_r(cv->pl, px * cv->s); }
static void dashed(canvas *cv, int on) {
    if (on) {
        double d[2] = {9.0 * cv->s, 6.0 * cv->s};
        pl_flinedash_r(cv->pl, 2, d, 0.0);
    } else {
        pl_linemod_r(cv->pl, "solid");
    }
}

static void box(canvas *cv, double x0, double y0, double x1, double y1, uint32_t rgb) {
    pen(cv, rgb);
    fill(cv, rgb);
    width(cv, 0.5);
    pl_fbox_r(cv->pl, x0, y0, x1, y1);
    nofill(cv);
}

static void line(canvas *cv, double x0, double y0, double x1, double y1) {
    pl_fline_r(cv->pl, x0, y0, x1, y1);
}

/* Copies a label for libplot: ASCII only (libplot reads ISO-8859-1), no '\'
 * (libplot escape sequences), at most max_chars characters ("..." when cut). */
static void clean_label(const char *in, char *out, size_t max_chars) {
    size_t n = 0;
    if (max_chars > LABEL_MAX) max_chars = LABEL_MAX;
    for (; in && in[n] && n < max_chars; n++) {
        unsigned char c = (unsigned char)in[n];
        out[n] = (c == '\\') ? '/' : (c < 0x20 || c > 0x7E) ? '?' : (char)c;
    }
    out[n] = '\0';
    if (in && in[n] && n >= 3) memcpy(out + n - 3, "...", 4);
}

static void font(canvas *cv, double size, int bold) {
    const char *f = bold ? "HersheySans-Bold" : "HersheySans";
    pl_fontname_r(cv->pl, f);
    pl_ffontsize_r(cv->pl, size * cv->s);
}

static double text_w(canvas *cv, const char *s, double size, int bold) {
    char buf[LABEL_MAX + 1];
    clean_label(s, buf, LABEL_MAX);
    font(cv, size, bold);
    return pl_flabelwidth_r(cv->pl, buf);
}

/* hj: 'l' 'c' 'r'; vj: 'b' 'c' 't' 'x' (baseline); angle in degrees. */
static void text(canvas *cv, double x, double y, int hj, int vj, double angle, double size,
                 int bold, uint32_t rgb, const char *s) {
    char buf[LABEL_MAX + 1];
    if (!s || !*s) return;
    clean_label(s, buf, LABEL_MAX);
    font(cv, size, bold);
    pen(cv, rgb);
    pl_ftextangle_r(cv->pl, angle);
    pl_fmove_r(cv->pl, x, y);
    pl_alabel_r(cv->pl, hj, vj, buf);
    pl_ftextangle_r(cv->pl, 0.0);
}

static void marker(canvas *cv, double x, double y, dt_chart_marker m, double diam, uint32_t rgb) {
    double r = 0.5 * diam * cv->s;
    plPlotter *pl = cv->pl;
    pen(cv, rgb);
    dashed(cv, 0);
    switch (m) {
    case DT_MARK_NONE: return;
    case DT_MARK_DOT:
        fill(cv, rgb);
        width(cv, 0.5);
        pl_fcircle_r(pl, x, y, r);
        break;
    case DT_MARK_CROSS:
    case DT_MARK_PLUS: {
        width(cv, fmax(1.5, diam / 5.0));
        double d = m == DT_MARK_CROSS ? r * 0.8 : r;
        if (m == DT_MARK_CROSS) {
            line(cv, x - d, y - d, x + d, y + d);
            line(cv, x - d, y + d, x + d, y - d);
        } else {
            line(cv, x - d, y, x + d, y);
            line(cv, x, y - d, x, y + d);
        }
        break;
    }
    case DT_MARK_SQUARE:
        fill(cv, rgb);
        width(cv, 0.5);
        pl_fbox_r(pl, x - 0.85 * r, y - 0.85 * r, x + 0.85 * r, y + 0.85 * r);
        break;
    case DT_MARK_TRIANGLE:
    case DT_MARK_DIAMOND:
    case DT_MARK_STAR: {
        int k = m == DT_MARK_TRIANGLE ? 3 : m == DT_MARK_DIAMOND ? 4 : 10;
        double rr = m == DT_MARK_STAR ? r * 1.25 : r;
        fill(cv, rgb);
        if (m == DT_MARK_STAR) pen(cv, COLOR_OUTLINE);
        width(cv, m == DT_MARK_STAR ? 1.0 : 0.5);
        for (int i = 0; i < k; i++) {
            double a = M_PI / 2 + 2 * M_PI * i / k;
            double ri = (m == DT_MARK_STAR && (i & 1)) ? rr * 0.45 : rr;
            double px = x + ri * cos(a), py = y + ri * sin(a);
            if (i == 0) pl_fmove_r(pl, px, py);
            else pl_fcont_r(pl, px, py);
        }
        pl_closepath_r(pl);
        pl_endpath_r(pl);
        break;
    }
    }
    nofill(cv);
}

/* ---- legend: items laid out in rows under the title ---- */

enum { LEG_BOX, LEG_LINE, LEG_MARKER };

typedef struct legend_item {
    int kind;
    uint32_t color;        /* plain 0xRRGGBB */
    dt_chart_marker marker;
    double marker_px;
    int dashed;
    const char *label;
} legend_item;

typedef struct legend {
    int n, cap;
    legend_item *it;
} legend;

static int legend_add(legend *lg, legend_item item) {
    if (!item.label || !*item.label) return DT_OK;
    if (lg->n == lg->cap) {
        int cap = lg->cap ? 2 * lg->cap : 16;
        legend_item *p = realloc(lg->it, (size_t)cap * sizeof *p);
        if (!p) return DT_ENOMEM;
        lg->it = p;
        lg->cap = cap;
    }
    lg->it[lg->n++] = item;
    return DT_OK;
}

#define LEG_SWATCH 26.0   /* swatch width */
#define LEG_GAP 8.0       /* swatch to text */
#define LEG_SEP 22.0      /* between items */
#define LEG_ROW 1.55      /* row height in font sizes */

static double legend_item_w(canvas *cv, const legend_item *it) {
    return (LEG_SWATCH + LEG_GAP + LEG_SEP) * cv->s + text_w(cv, it->label, FS_TEXT, 0);
}

/* Height the legend needs when it may use `avail` pixels of width. */
static double legend_height(canvas *cv, const legend *lg, double avail) {
    if (!lg->n) return 0.0;
    int rows = 1;
    double x = 0;
    for (int i = 0; i < lg->n; i++) {
        double w = legend_item_w(cv, &lg->it[i]);
        if (x > 0 && x + w > avail) { rows++; x = 0; }
        x += w;
    }
    return rows * LEG_ROW * FS_TEXT * cv->s;
}

/* Draws rows starting at top y, centred in [x0, x0 + avail]. */
static void legend_draw(canvas *cv, const legend *lg, double x0, double avail, double top) {
    double rowh = LEG_ROW * FS_TEXT * cv->s;
    int i = 0;
    double y = top - 0.5 * rowh;
    while (i < lg->n) {
        int j = i;
        double w = 0;
        while (j < lg->n) {
            double wj = legend_item_w(cv, &lg->it[j]);
            if (j > i && w + wj > avail) break;
            w += wj;
            j++;
        }
        double x = x0 + 0.5 * (avail - w + LEG_SEP * cv->s);
        for (int k = i; k < j; k++) {
            const legend_item *it = &lg->it[k];
            double sw = LEG_SWATCH * cv->s;
            if (it->kind == LEG_BOX) {
                double h = 0.42 * FS_TEXT * cv->s;
                box(cv, x + 0.15 * sw, y - h, x + 0.85 * sw, y + h, it->color);
            } else {
                if (it->kind == LEG_LINE) {
                    pen(cv, it->color);
                    width(cv, LINE_W);
                    dashed(cv, it->dashed);
                    line(cv, x, y, x + sw, y);
                    dashed(cv, 0);
                }
                if (it->marker != DT_MARK_NONE)
                    marker(cv, x + 0.5 * sw, y, it->marker,
                           fmin(it->marker_px > 0 ? it->marker_px : MARKER_PX, 16.0), it->color);
            }
            text(cv, x + sw + LEG_GAP * cv->s, y, 'l', 'c', 0, FS_TEXT, 0, COLOR_TEXT, it->label);
            x += legend_item_w(cv, it);
        }
        i = j;
        y -= rowh;
    }
}

/* ---- axes: "nice" ticks (Heckbert, "Nice numbers for graph labels",
 * Graphics Gems I, 1990: steps of 1, 2 or 5 x 10^k, loose labelling) ---- */

typedef struct axis {
    double lo, hi;     /* data range covered */
    int log;
    int n;
    double t[MAX_TICKS];
    double step;       /* linear tick spacing (decides the label decimals) */
    double p0, p1;     /* pixels of lo and hi */
} axis;

/* The 1, 2, 5 x 10^k value nearest x (Heckbert's rounded "nice number"). */
static double nice_num(double x) {
    double e = floor(log10(x));
    double f = x / pow(10.0, e);
    double nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    return nf * pow(10.0, e);
}

static void axis_linear(axis *a, double dmin, double dmax, int from_zero) {
    memset(a, 0, sizeof *a);
    if (from_zero) {
        if (dmin > 0) dmin = 0;
        if (dmax < 0) dmax = 0;
    }
    if (!(dmax > dmin)) {
        double pad = dmin == 0 ? 1.0 : 0.1 * fabs(dmin);
        if (!(from_zero && dmin == 0)) dmin -= pad;
        dmax += pad;
    }
    double step = nice_num((dmax - dmin) / (TARGET_TICKS - 1));
    a->lo = floor(dmin / step) * step;
    a->hi = ceil(dmax / step) * step;
    a->step = step;
    for (int i = 0; i < MAX_TICKS; i++) {
        double v = a->lo + i * step;
        if (v > a->hi + 0.5 * step) break;
        if (fabs(v) < 1e-9 * step) v = 0.0;
        a->t[a->n++] = v;
    }
}

/* dmin > 0. Ticks at powers of ten, plus 2x and 5x when the axis spans few decades. */
static void axis_log(axis *a, double dmin, double dmax) {
    memset(a, 0, sizeof *a);
    a->log = 1;
    int klo = (int)floor(log10(dmin) + 1e-12), khi = (int)ceil(log10(dmax) - 1e-12);
    if (khi <= klo) khi = klo + 1;
    int every = (khi - klo + MAX_TICKS - 1) / MAX_TICKS;
    if (khi - klo > 2 * TARGET_TICKS) every = (khi - klo + TARGET_TICKS - 1) / TARGET_TICKS;
    if (every < 1) every = 1;
    a->lo = pow(10.0, klo);
    a->hi = pow(10.0, khi);
    for (int k = klo; k <= khi && a->n < MAX_TICKS; k++) {
        if ((k - klo) % every == 0) a->t[a->n++] = pow(10.0, k);
        if (khi - klo <= 2 && k < khi)
            for (int m = 2; m <= 5 && a->n < MAX_TICKS; m += 3) a->t[a->n++] = m * pow(10.0, k);
    }
}

static double axis_map(const axis *a, double v) {
    double f = a->log ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo))
                      : (v - a->lo) / (a->hi - a->lo);
    return a->p0 + f * (a->p1 - a->p0);
}

static void tick_label(const axis *a, double v, char *buf, size_t n) {
    double big = fmax(fabs(a->lo), fabs(a->hi));
    if (a->log || big >= 1e6 || (big > 0 && big < 1e-3)) {
        snprintf(buf, n, "%g", v);
        return;
    }
    int dec = a->step >= 1 ? 0 : (int)ceil(-log10(a->step) - 1e-9);
    snprintf(buf, n, "%.*f", dec, v);
}

static double axis_label_w(canvas *cv, const axis *a) {
    double w = 0;
    char buf[64];
    for (int i = 0; i < a->n; i++) {
        tick_label(a, a->t[i], buf, sizeof buf);
        w = fmax(w, text_w(cv, buf, FS_TICK, 0));
    }
    return w;
}

typedef struct frame { double x0, y0, x1, y1; } frame;

/* Horizontal grid lines, tick marks and labels on the left edge. */
static void draw_y_axis(canvas *cv, const frame *f, const axis *a) {
    char buf[64];
    for (int i = 0; i < a->n; i++) {
        double y = axis_map(a, a->t[i]);
        pen(cv, COLOR_GRID);
        width(cv, GRID_W);
        line(cv, f->x0, y, f->x1, y);
        pen(cv, COLOR_AXIS);
        width(cv, AXIS_W);
        line(cv, f->x0 - TICK_LEN * cv->s, y, f->x0, y);
        tick_label(a, a->t[i], buf, sizeof buf);
        text(cv, f->x0 - (TICK_LEN + 4) * cv->s, y, 'r', 'c', 0, FS_TICK, 0, COLOR_TEXT, buf);
    }
}

/* Vertical grid lines, tick marks and (when labels) labels under the bottom
 * edge; every k-th label only when neighbours would touch. */
static void draw_x_axis(canvas *cv, const frame *f, const axis *a, int labels) {
    char buf[64];
    int every = 1;
    if (a->n > 1) {
        double gap = INFINITY, w = axis_label_w(cv, a) + FS_TICK * cv->s;
        for (int i = 1; i < a->n; i++) gap = fmin(gap, fabs(axis_map(a, a->t[i]) - axis_map(a, a->t[i - 1])));
        while (every < a->n && every * gap < w) every++;
    }
    for (int i = 0; i < a->n; i++) {
        double x = axis_map(a, a->t[i]);
        pen(cv, COLOR_GRID);
        width(cv, GRID_W);
        line(cv, x, f->y0, x, f->y1);
        pen(cv, COLOR_AXIS);
        width(cv, AXIS_W);
        line(cv, x, f->y0 - TICK_LEN * cv->s, x, f->y0);
        if (labels && i % every == 0) {
            tick_label(a, a->t[i], buf, sizeof buf);
            text(cv, x, f->y0 - (TICK_LEN + 4) * cv->s, 'c', 't', 0, FS_TICK, 0, COLOR_TEXT, buf);
        }
    }
}

static void draw_frame(canvas *cv, const frame *f) {
    pen(cv, COLOR_AXIS);
    width(cv, AXIS_W);
    dashed(cv, 0);
    nofill(cv);
    pl_fbox_r(cv->pl, f->x0, f->y0, f->x1, f->y1);
}

static void draw_hline(canvas *cv, const frame *f, const axis *ay, const dt_chart_hline *h) {
    if (!h->label) return;
    double y = axis_map(ay, h->y);
    pen(cv, h->color ? h->color & 0xFFFFFFu : COLOR_LIMIT);
    width(cv, LINE_W);
    dashed(cv, 1);
    line(cv, f->x0, y, f->x1, y);
    dashed(cv, 0);
}

static int legend_add_hline(legend *lg, const dt_chart_hline *h) {
    if (!h->label) return DT_OK;
    legend_item it = {LEG_LINE, h->color ? h->color & 0xFFFFFFu : COLOR_LIMIT, DT_MARK_NONE, 0, 1,
                      h->label};
    return legend_add(lg, it);
}

/* Title and legend at the top; returns the y where the plot area may start. */
static double draw_header(canvas *cv, const dt_chart_opts *o, const legend *lg) {
    double top = cv->H - PAD * cv->s;
    if (o && o->title && *o->title) {
        text(cv, 0.5 * cv->W, top, 'c', 't', 0, FS_TITLE, 1, COLOR_TEXT, o->title);
        top -= 1.6 * FS_TITLE * cv->s;
    }
    double avail = cv->W - 2 * PAD * cv->s;
    legend_draw(cv, lg, PAD * cv->s, avail, top);
    top -= legend_height(cv, lg, avail);
    return top - 0.6 * FS_TEXT * cv->s;
}

static double header_height(canvas *cv, const dt_chart_opts *o, const legend *lg) {
    double h = PAD * cv->s;
    if (o && o->title && *o->title) h += 1.6 * FS_TITLE * cv->s;
    h += legend_height(cv, lg, cv->W - 2 * PAD * cv->s);
    return h + 0.6 * FS_TEXT * cv->s;
}

static void draw_y_label(canvas *cv, const char *s, double x, double yc) {
    text(cv, x, yc, 'c', 't', 90, FS_TEXT, 0, COLOR_TEXT, s);
}

static int has_text(const char *s) { return s && *s; }

/* x label centred under the plot at the bottom edge, y label rotated at the left edge. */
static void draw_axis_labels(canvas *cv, const dt_chart_opts *o, const frame *f) {
    if (!o) return;
    text(cv, 0.5 * (f->x0 + f->x1), PAD * cv->s, 'c', 'b', 0, FS_TEXT, 0, COLOR_TEXT, o->x_label);
    draw_y_label(cv, o->y_label, PAD * cv->s, 0.5 * (f->y0 + f->y1));
}

/* ---- input validation ---- */

static int check_values(const double *v, int n, int nonneg, const char *what, dt_error *err) {
    if (!v) return dt_errorf(err, DT_EINVAL, "%s is NULL", what);
    for (int i = 0; i < n; i++) {
        if (!isfinite(v[i]))
            return dt_errorf(err, DT_EINVAL, "%s[%d] is not a finite number; pass finite values", what, i);
        if (nonneg && v[i] < 0)
            return dt_errorf(err, DT_EINVAL, "%s[%d] = %g is negative; bar values must be >= 0", what, i, v[i]);
    }
    return DT_OK;
}

static int check_labels(const char *const *l, int n, const char *what, dt_error *err) {
    if (!l) return dt_errorf(err, DT_EINVAL, "%s is NULL; give %d label(s)", what, n);
    for (int i = 0; i < n; i++)
        if (!l[i]) return dt_errorf(err, DT_EINVAL, "%s[%d] is NULL", what, i);
    return DT_OK;
}

static int check_hline(const dt_chart_hline *h, dt_error *err) {
    if (h->label && !isfinite(h->y))
        return dt_errorf(err, DT_EINVAL, "reference line '%s' is at a non-finite value", h->label);
    return DT_OK;
}

static uint32_t pick_color(uint32_t c, int *next) {
    if (c & 0x1000000u) return c & 0xFFFFFFu;
    return k_palette[(*next)++ % PALETTE_N];
}

static void fmt_value(double v, char *buf, size_t n) {
    double a = fabs(v);
    if (a >= 100 || a == 0) snprintf(buf, n, "%.0f", v);
    else if (a >= 10) snprintf(buf, n, "%.1f", v);
    else if (a >= 0.01) snprintf(buf, n, "%.2f", v);
    else snprintf(buf, n, "%.2g", v);
}

/* ---- bars ---- */

int dt_chart_bars_draw(const char *path, const dt_chart_opts *o, const dt_chart_bars *b,
                       dt_error *err) {
    int rc, svg, w, h;
    if ((rc = chart_format(path, &svg, err)) || (rc = chart_size(o, &w, &h, err))) return rc;
    if (!b) return dt_errorf(err, DT_EINVAL, "chart '%s': no bar data", path);
    if (b->n_bars < 1 || b->n_segments < 1)
        return dt_errorf(err, DT_EINVAL, "chart '%s': %d bars x %d segments; need at least one of each",
                         path, b->n_bars, b->n_segments);
    if (b->mode != DT_BARS_STACKED && b->mode != DT_BARS_GROUPED)
        return dt_errorf(err, DT_EINVAL, "chart '%s': unknown bars mode %d", path, (int)b->mode);
    if ((rc = check_labels(b->bar_labels, b->n_bars, "bar_labels", err)) ||
        (rc = check_labels(b->segment_labels, b->n_segments, "segment_labels", err)) ||
        (rc = check_values(b->values, b->n_bars * b->n_segments, 1, "values", err)) ||
        (rc = check_hline(&b->limit, err)))
        return dt_error_prefix(err, "chart '%s'", path);

    /* y range: totals (stacked) or single values (grouped), and the limit. */
    double ymax = 0;
    for (int i = 0; i < b->n_bars; i++) {
        double sum = 0;
        for (int j = 0; j < b->n_segments; j++) {
            double v = b->values[i * b->n_segments + j];
            sum = b->mode == DT_BARS_STACKED ? sum + v : fmax(sum, v);
        }
        ymax = fmax(ymax, sum);
    }
    if (b->limit.label) ymax = fmax(ymax, b->limit.y);
    axis ay;
    axis_linear(&ay, 0, ymax * (b->value_labels ? 1.08 : 1.0), 1);

    canvas cv;
    if ((rc = canvas_open(&cv, path, o, err))) return rc;
    legend lg = {0};
    int next = 0;
    uint32_t *colors = malloc((size_t)b->n_segments * sizeof *colors);
    char (*labels)[LABEL_MAX + 1] = malloc((size_t)b->n_bars * sizeof *labels);
    if (!colors || !labels) { rc = DT_ENOMEM; goto fail; }
    for (int j = 0; j < b->n_segments; j++) {
        colors[j] = pick_color(b->segment_colors ? b->segment_colors[j] : 0, &next);
        legend_item it = {LEG_BOX, colors[j], DT_MARK_NONE, 0, 0, b->segment_labels[j]};
        if ((rc = legend_add(&lg, it))) goto fail;
    }
    if ((rc = legend_add_hline(&lg, &b->limit))) goto fail;

    double s = cv.s;
    frame f;
    f.y1 = cv.H - header_height(&cv, o, &lg);
    f.x0 = PAD * s + (has_text(o ? o->y_label : NULL) ? 1.7 * FS_TEXT * s : 0) +
           axis_label_w(&cv, &ay) + (TICK_LEN + 8) * s;
    f.x1 = cv.W - 2 * PAD * s;
    double slot = (f.x1 - f.x0) / b->n_bars;

    /* Bar labels: horizontal when they fit, else 30 degrees, else vertical
     * (then every k-th when even vertical ones would touch). */
    double fs = FS_TICK * s, wmax = 0, angle = 0;
    int every = 1;
    for (int i = 0; i < b->n_bars; i++) {
        clean_label(b->bar_labels[i], labels[i], LABEL_MAX);
        wmax = fmax(wmax, text_w(&cv, labels[i], FS_TICK, 0));
    }
    if (wmax > 0.94 * slot) {
        angle = slot >= 2.0 * fs ? 30.0 : 90.0;
        if (slot < 1.2 * fs) every = (int)ceil(1.2 * fs / slot);
        double rad = angle * M_PI / 180.0;
        double maxw = (MAX_LABEL_FRAC * cv.H - fs * cos(rad)) / sin(rad);
        for (int i = 0; i < b->n_bars; i++) {   /* shorten what would not fit */
            size_t len = strlen(labels[i]);
            while (len > 4 && text_w(&cv, labels[i], FS_TICK, 0) > maxw) {
                len--;
                memcpy(labels[i] + len - 3, "...", 4);
            }
        }
        wmax = 0;
        for (int i = 0; i < b->n_bars; i++) wmax = fmax(wmax, text_w(&cv, labels[i], FS_TICK, 0));
        wmax = wmax * sin(rad) + fs * cos(rad);
    } else {
        wmax = fs;
    }
    f.y0 = PAD * s + (has_text(o ? o->x_label : NULL) ? 1.8 * FS_TEXT * s : 0) + wmax +
           (TICK_LEN + 8) * s;
    if (f.y1 - f.y0 < 40 * s) {
        rc = dt_errorf(err, DT_EINVAL, "chart '%s': %dx%d pixels leave no room for the plot (legend or labels too big); make it larger",
                       path, w, h);
        goto out;
    }
    ay.p0 = f.y0;
    ay.p1 = f.y1;

    draw_header(&cv, o, &lg);
    draw_y_axis(&cv, &f, &ay);
    for (int i = 0; i < b->n_bars; i++) {
        double xc = f.x0 + (i + 0.5) * slot;
        double bw = BAR_FILL * slot;
        double base = 0, top = 0;
        for (int j = 0; j < b->n_segments; j++) {
            double v = b->values[i * b->n_segments + j];
            if (b->mode == DT_BARS_STACKED) {
                if (v > 0) {
                    box(&cv, xc - 0.5 * bw, axis_map(&ay, base), xc + 0.5 * bw,
                        axis_map(&ay, base + v), colors[j]);
                    /* thin white seam between segments */
                    if (base > 0) {
                        pen(&cv, 0xFFFFFF);
                        width(&cv, 1.0);
                        line(&cv, xc - 0.5 * bw, axis_map(&ay, base), xc + 0.5 * bw, axis_map(&ay, base));
                    }
                }
                base += v;
                top = base;
            } else {
                double gw = bw / b->n_segments;
                double x0 = xc - 0.5 * bw + j * gw;
                if (v > 0) box(&cv, x0, ay.p0, x0 + 0.9 * gw, axis_map(&ay, v), colors[j]);
                if (b->value_labels) {
                    char buf[32];
                    fmt_value(v, buf, sizeof buf);
                    if (text_w(&cv, buf, FS_TICK, 0) <= 1.05 * gw)
                        text(&cv, x0 + 0.45 * gw, axis_map(&ay, v) + 3 * s, 'c', 'b', 0, FS_TICK, 0,
                             COLOR_TEXT, buf);
                }
            }
        }
        if (b->mode == DT_BARS_STACKED && b->value_labels) {
            char buf[32];
            fmt_value(top, buf, sizeof buf);
            text(&cv, xc, axis_map(&ay, top) + 4 * s, 'c', 'b', 0, FS_TICK, 0, COLOR_TEXT, buf);
        }
        pen(&cv, COLOR_AXIS);
        width(&cv, AXIS_W);
        line(&cv, xc, f.y0 - TICK_LEN * s, xc, f.y0);
        if (i % every == 0) {
            double ly = f.y0 - (TICK_LEN + 4) * s;
            if (angle == 0) text(&cv, xc, ly, 'c', 't', 0, FS_TICK, 0, COLOR_TEXT, labels[i]);
            else text(&cv, xc, ly, 'r', angle == 90 ? 'c' : 't', angle, FS_TICK, 0, COLOR_TEXT, labels[i]);
        }
    }
    draw_hline(&cv, &f, &ay, &b->limit);
    draw_frame(&cv, &f);
    draw_axis_labels(&cv, o, &f);
    goto out;
fail:
    rc = dt_errorf(err, rc, "chart '%s': out of memory", path);
out:
    free(colors);
    free(labels);
    free(lg.it);
    return canvas_end(&cv, rc, err);
}

/* ---- x-y series ---- */

static int check_series(const dt_chart_xy *xy, int x_log, int y_log, dt_error *err) {
    int rc;
    if (xy->n_series < 1 || !xy->series)
        return dt_errorf(err, DT_EINVAL, "%d series; need at least one", xy->n_series);
    if (xy->n_classes < 0 || (xy->n_classes > 0 && !xy->classes))
        return dt_errorf(err, DT_EINVAL, "%d point classes but no class styles", xy->n_classes);
    for (int k = 0; k < xy->n_series; k++) {
        const dt_chart_series *se = &xy->series[k];
        char what[64];
        if (se->n < 1)
            return dt_errorf(err, DT_EINVAL, "series %d ('%s') has %d points; need at least one",
                             k, se->style.label ? se->style.label : "", se->n);
        snprintf(what, sizeof what, "series %d x", k);
        if ((rc = check_values(se->x, se->n, 0, what, err))) return rc;
        snprintf(what, sizeof what, "series %d y", k);
        if ((rc = check_values(se->y, se->n, 0, what, err))) return rc;
        for (int i = 0; i < se->n; i++) {
            if ((x_log && se->x[i] <= 0) || (y_log && se->y[i] <= 0))
                return dt_errorf(err, DT_EINVAL,
                                 "series %d point %d (%g, %g) is not > 0 on a log axis; use a linear axis",
                                 k, i, se->x[i], se->y[i]);
            if (se->point_class && xy->n_classes == 0)
                return dt_errorf(err, DT_EINVAL, "series %d has point classes but the chart gives no class styles", k);
            if (se->point_class && (se->point_class[i] < 0 || se->point_class[i] >= xy->n_classes))
                return dt_errorf(err, DT_EINVAL, "series %d point %d has class %d; classes are 0..%d",
                                 k, i, se->point_class[i], xy->n_classes - 1);
        }
    }
    return check_hline(&xy->hline, err);
}

/* Data range of all series (and the reference line on y). */
static void series_range(const dt_chart_xy *xy, double *xmin, double *xmax, double *ymin,
                         double *ymax) {
    *xmin = *ymin = INFINITY;
    *xmax = *ymax = -INFINITY;
    for (int k = 0; k < xy->n_series; k++) {
        const dt_chart_series *se = &xy->series[k];
        for (int i = 0; i < se->n; i++) {
            *xmin = fmin(*xmin, se->x[i]);
            *xmax = fmax(*xmax, se->x[i]);
            *ymin = fmin(*ymin, se->y[i]);
            *ymax = fmax(*ymax, se->y[i]);
        }
    }
    if (xy->hline.label) {
        *ymin = fmin(*ymin, xy->hline.y);
        *ymax = fmax(*ymax, xy->hline.y);
    }
}

/* 1: some series shows markers; 2: some series is markers only (a scatter). */
static int has_markers(const dt_chart_xy *xy) {
    int m = 0;
    for (int k = 0; k < xy->n_series; k++) {
        const dt_chart_series *se = &xy->series[k];
        if (se->style.marker != DT_MARK_NONE || se->point_class) m = se->style.line ? (m > 1 ? m : 1) : 2;
    }
    return m;
}

/* 1 when some point is drawn with class j (unused classes stay out of the legend). */
static int class_used(const dt_chart_xy *xy, int j) {
    for (int k = 0; k < xy->n_series; k++)
        for (int i = 0; xy->series[k].point_class && i < xy->series[k].n; i++)
            if (xy->series[k].point_class[i] == j) return 1;
    return 0;
}

/* Resolved colours: series then classes, in legend order. */
typedef struct xy_colors { uint32_t *series, *classes; } xy_colors;

static int xy_legend(const dt_chart_xy *xy, legend *lg, xy_colors *c, int *next) {
    c->series = malloc((size_t)xy->n_series * sizeof *c->series);
    c->classes = malloc((size_t)(xy->n_classes + 1) * sizeof *c->classes);
    if (!c->series || !c->classes) return DT_ENOMEM;
    int any_class = 0;
    for (int k = 0; k < xy->n_series; k++) {
        const dt_chart_style *st = &xy->series[k].style;
        c->series[k] = pick_color(st->color, next);
        any_class |= xy->series[k].point_class != NULL;
        legend_item it = {st->line ? LEG_LINE : LEG_MARKER, c->series[k],
                          xy->series[k].point_class ? DT_MARK_NONE : st->marker, st->marker_px,
                          st->dashed, st->label};
        if (it.kind == LEG_MARKER && it.marker == DT_MARK_NONE) continue;
        if (legend_add(lg, it)) return DT_ENOMEM;
    }
    for (int j = 0; j < xy->n_classes; j++) {
        const dt_chart_style *st = &xy->classes[j];
        c->classes[j] = pick_color(st->color, next);
        legend_item it = {LEG_MARKER, c->classes[j], st->marker, st->marker_px, 0, st->label};
        if (any_class && class_used(xy, j) && legend_add(lg, it)) return DT_ENOMEM;
    }
    return legend_add_hline(lg, &xy->hline);
}

/* Lines first (all series), then markers, so markers sit on top. */
static void xy_plot(canvas *cv, const dt_chart_xy *xy, const axis *ax, const axis *ay,
                    const xy_colors *c) {
    for (int k = 0; k < xy->n_series; k++) {
        const dt_chart_series *se = &xy->series[k];
        if (!se->style.line || se->n < 2) continue;
        pen(cv, c->series[k]);
        width(cv, LINE_W);
        dashed(cv, se->style.dashed);
        nofill(cv);
        pl_fmove_r(cv->pl, axis_map(ax, se->x[0]), axis_map(ay, se->y[0]));
        for (int i = 1; i < se->n; i++) {
            if (se->style.steps) pl_fcont_r(cv->pl, axis_map(ax, se->x[i]), axis_map(ay, se->y[i - 1]));
            pl_fcont_r(cv->pl, axis_map(ax, se->x[i]), axis_map(ay, se->y[i]));
        }
        pl_endpath_r(cv->pl);
        dashed(cv, 0);
    }
    /* Classed points: lower class indices first, so "chosen" (last) is on top. */
    for (int j = -1; j < xy->n_classes; j++) {
        for (int k = 0; k < xy->n_series; k++) {
            const dt_chart_series *se = &xy->series[k];
            if ((j < 0) != (se->point_class == NULL)) continue;
            for (int i = 0; i < se->n; i++) {
                const dt_chart_style *st = &se->style;
                uint32_t col = c->series[k];
                if (se->point_class) {
                    if (se->point_class[i] != j) continue;
                    st = &xy->classes[j];
                    col = c->classes[j];
                }
                if (st->marker != DT_MARK_NONE)
                    marker(cv, axis_map(ax, se->x[i]), axis_map(ay, se->y[i]), st->marker,
                           st->marker_px > 0 ? st->marker_px : MARKER_PX, col);
            }
        }
    }
}

static void xy_axes(const dt_chart_xy *xy, axis *ax, axis *ay) {
    double xmin, xmax, ymin, ymax;
    series_range(xy, &xmin, &xmax, &ymin, &ymax);
    int m = has_markers(xy);
    if (m) {   /* keep markers off the frame (x only for scatters: a curve may end at the edge) */
        double px = m == 2 ? 0.03 * (xmax - xmin) : 0, py = 0.04 * (ymax - ymin);
        /* ... but never across zero: steps and bytes stay non-negative */
        if (!xy->x_log) { xmin = xmin >= 0 ? fmax(0, xmin - px) : xmin - px; xmax += px; }
        if (!xy->y_log) { ymin = ymin >= 0 ? fmax(0, ymin - py) : ymin - py; ymax += py; }
    }
    if (xy->x_log) axis_log(ax, xmin, xmax);
    else axis_linear(ax, xmin, xmax, 0);
    if (xy->y_log) axis_log(ay, ymin, ymax);
    else axis_linear(ay, ymin, ymax, xy->y_from_zero);
}

int dt_chart_xy_draw(const char *path, const dt_chart_opts *o, const dt_chart_xy *xy,
                     dt_error *err) {
    int rc, svg, w, h;
    if ((rc = chart_format(path, &svg, err)) || (rc = chart_size(o, &w, &h, err))) return rc;
    if (!xy) return dt_errorf(err, DT_EINVAL, "chart '%s': no series", path);
    if ((rc = check_series(xy, xy->x_log, xy->y_log, err))) return dt_error_prefix(err, "chart '%s'", path);
    axis ax, ay;
    xy_axes(xy, &ax, &ay);

    canvas cv;
    if ((rc = canvas_open(&cv, path, o, err))) return rc;
    legend lg = {0};
    xy_colors col = {0};
    int next = 0;
    if ((rc = xy_legend(xy, &lg, &col, &next))) {
        rc = dt_errorf(err, DT_ENOMEM, "chart '%s': out of memory", path);
        goto out;
    }
    double s = cv.s;
    frame f;
    f.y1 = cv.H - header_height(&cv, o, &lg);
    f.x0 = PAD * s + (has_text(o ? o->y_label : NULL) ? 1.7 * FS_TEXT * s : 0) +
           axis_label_w(&cv, &ay) + (TICK_LEN + 8) * s;
    f.x1 = cv.W - PAD * s - fmax(PAD * s, 0.5 * axis_label_w(&cv, &ax));
    f.y0 = PAD * s + (has_text(o ? o->x_label : NULL) ? 1.8 * FS_TEXT * s : 0) + FS_TICK * s +
           (TICK_LEN + 8) * s;
    if (f.y1 - f.y0 < 40 * s || f.x1 - f.x0 < 40 * s) {
        rc = dt_errorf(err, DT_EINVAL, "chart '%s': %dx%d pixels leave no room for the plot; make it larger",
                       path, w, h);
        goto out;
    }
    ax.p0 = f.x0; ax.p1 = f.x1;
    ay.p0 = f.y0; ay.p1 = f.y1;
    draw_header(&cv, o, &lg);
    draw_x_axis(&cv, &f, &ax, 1);
    draw_y_axis(&cv, &f, &ay);
    draw_hline(&cv, &f, &ay, &xy->hline);
    xy_plot(&cv, xy, &ax, &ay, &col);
    draw_frame(&cv, &f);
    draw_axis_labels(&cv, o, &f);
out:
    free(lg.it);
    free(col.series);
    free(col.classes);
    return canvas_end(&cv, rc, err);
}

/* ---- Gantt ---- */

#define GANTT_SHARE 0.55      /* of the plot height, with a panel below */
#define PANEL_GAP 18.0        /* between the Gantt and the panel below */
#define GANTT_ROW_MAX 46.0    /* row height cap, so a few rows do not become slabs */
#define GANTT_SEAM 2.0        /* pixels cut from the end of an event wider than 3 seams */

int dt_chart_gantt_draw(const char *path, const dt_chart_opts *o, const dt_chart_gantt *g,
                        const dt_chart_xy *below, dt_error *err) {
    int rc, svg, w, h;
    if ((rc = chart_format(path, &svg, err)) || (rc = chart_size(o, &w, &h, err))) return rc;
    if (!g) return dt_errorf(err, DT_EINVAL, "chart '%s': no timeline", path);
    if (g->n_rows < 1 || g->n_kinds < 1 || g->n_intervals < 1 || !g->intervals)
        return dt_errorf(err, DT_EINVAL, "chart '%s': timeline has %d rows, %d kinds, %d intervals; need at least one of each",
                         path, g->n_rows, g->n_kinds, g->n_intervals);
    if ((rc = check_labels(g->row_labels, g->n_rows, "row_labels", err)) ||
        (rc = check_labels(g->kind_labels, g->n_kinds, "kind_labels", err)) ||
        (below && (rc = check_series(below, 0, 0, err))))
        return dt_error_prefix(err, "chart '%s'", path);
    double tmin = INFINITY, tmax = -INFINITY;
    for (int i = 0; i < g->n_intervals; i++) {
        const dt_chart_interval *iv = &g->intervals[i];
        if (iv->row < 0 || iv->row >= g->n_rows || iv->kind < 0 || iv->kind >= g->n_kinds)
            return dt_errorf(err, DT_EINVAL, "chart '%s': interval %d has row %d / kind %d; rows are 0..%d, kinds 0..%d",
                             path, i, iv->row, iv->kind, g->n_rows - 1, g->n_kinds - 1);
        if (!isfinite(iv->t0) || !isfinite(iv->t1) || iv->t1 < iv->t0)
            return dt_errorf(err, DT_EINVAL, "chart '%s': interval %d [%g, %g] ms is not a finite t0 <= t1",
                             path, i, iv->t0, iv->t1);
        tmin = fmin(tmin, iv->t0);
        tmax = fmax(tmax, iv->t1);
    }
    axis ax, ay = {0};
    if (below) {
        double xmin, xmax, ymin, ymax;
        series_range(below, &xmin, &xmax, &ymin, &ymax);
        tmin = fmin(tmin, xmin);
        tmax = fmax(tmax, xmax);
        axis_linear(&ay, ymin, ymax + 0.04 * (ymax - ymin), below->y_from_zero);
    }
    axis_linear(&ax, tmin, tmax, tmin >= 0);

    canvas cv;
    if ((rc = canvas_open(&cv, path, o, err))) return rc;
    double s = cv.s;
    legend lg = {0};
    xy_colors col = {0};
    int next = 0;
    uint32_t *kc = malloc((size_t)g->n_kinds * sizeof *kc);
    if (!kc) { rc = DT_ENOMEM; goto oom; }
    for (int j = 0; j < g->n_kinds; j++) {
        kc[j] = pick_color(g->kind_colors ? g->kind_colors[j] : 0, &next);
        legend_item it = {LEG_BOX, kc[j], DT_MARK_NONE, 0, 0, g->kind_labels[j]};
        if ((rc = legend_add(&lg, it))) goto oom;
    }
    if (below && (rc = xy_legend(below, &lg, &col, &next))) goto oom;

    double label_w = 0;
    for (int r = 0; r < g->n_rows; r++) label_w = fmax(label_w, text_w(&cv, g->row_labels[r], FS_TEXT, 0));
    if (below) label_w = fmax(label_w, axis_label_w(&cv, &ay));
    double x0 = PAD * s + (below && has_text(o ? o->y_label : NULL) ? 1.7 * FS_TEXT * s : 0) + label_w +
                (TICK_LEN + 8) * s;
    double x1 = cv.W - PAD * s - fmax(PAD * s, 0.5 * axis_label_w(&cv, &ax));
    double top = cv.H - header_height(&cv, o, &lg);
    double bottom = PAD * s + 1.8 * FS_TEXT * s + FS_TICK * s + (TICK_LEN + 8) * s;
    double avail = top - bottom - (below ? PANEL_GAP * s : 0);
    /* With a panel below, the Gantt takes GANTT_SHARE (rows capped at
     * GANTT_ROW_MAX) and the panel the rest; alone, it takes everything. */
    double gh = below ? fmin(GANTT_SHARE * avail, g->n_rows * GANTT_ROW_MAX * s) : avail;
    frame fg = {x0, top - gh, x1, top};
    frame fb = {x0, bottom, x1, fg.y0 - PANEL_GAP * s};
    if (gh < g->n_rows * 4 * s || (below && fb.y1 - fb.y0 < 40 * s) || x1 - x0 < 40 * s) {
        rc = dt_errorf(err, DT_EINVAL, "chart '%s': %dx%d pixels leave no room for %d timeline rows; make it larger",
                       path, w, h, g->n_rows);
        goto out;
    }
    draw_header(&cv, o, &lg);
    ax.p0 = x0; ax.p1 = x1;
    draw_x_axis(&cv, &fg, &ax, !below);
    double rowh = (fg.y1 - fg.y0) / g->n_rows;
    for (int r = 0; r < g->n_rows; r++) {
        double yc = fg.y1 - (r + 0.5) * rowh;
        text(&cv, x0 - 8 * s, yc, 'r', 'c', 0, FS_TEXT, 0, COLOR_TEXT, g->row_labels[r]);
        if (r) {
            pen(&cv, COLOR_GRID);
            width(&cv, GRID_W);
            line(&cv, x0, fg.y1 - r * rowh, x1, fg.y1 - r * rowh);
        }
    }
    for (int i = 0; i < g->n_intervals; i++) {
        const dt_chart_interval *iv = &g->intervals[i];
        double yc = fg.y1 - (iv->row + 0.5) * rowh;
        double a = axis_map(&ax, iv->t0), b = axis_map(&ax, iv->t1);
        if (b - a < 1.0) b = a + 1.0;   /* a short event stays visible: one pixel */
        /* a seam between back-to-back events: 2 px, as the box outline takes one */
        else if (b - a > 3.0 * GANTT_SEAM) b -= GANTT_SEAM;
        box(&cv, a, yc - 0.5 * GANTT_BAR * rowh, b, yc + 0.5 * GANTT_BAR * rowh, kc[iv->kind]);
    }
    draw_frame(&cv, &fg);
    if (below) {
        ay.p0 = fb.y0; ay.p1 = fb.y1;
        draw_x_axis(&cv, &fb, &ax, 1);
        draw_y_axis(&cv, &fb, &ay);
        draw_hline(&cv, &fb, &ay, &below->hline);
        xy_plot(&cv, below, &ax, &ay, &col);
        draw_frame(&cv, &fb);
        draw_y_label(&cv, o ? o->y_label : NULL, PAD * s, 0.5 * (fb.y0 + fb.y1));
    }
    text(&cv, 0.5 * (x0 + x1), PAD * s, 'c', 'b', 0, FS_TEXT, 0, COLOR_TEXT,
         has_text(o ? o->x_label : NULL) ? o->x_label : "time (ms)");
    goto out;
oom:
    rc = dt_errorf(err, DT_ENOMEM, "chart '%s': out of memory", path);
out:
    free(kc);
    free(lg.it);
    free(col.series);
    free(col.classes);
    return canvas_end(&cv, rc, err);
}
