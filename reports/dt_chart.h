/* dt_chart.h — small chart library on GNU libplot: stacked/grouped bars, x-y
 * series (lines, markers, log axes), Gantt timelines with an optional
 * line panel underneath. Used by dtplan (estimate/solve/simulate/report) and
 * dtrun. Description and pictures: docs/reports.md.
 *
 * Output format comes from the file name: ".png" (bitmap, width x height
 * pixels) or ".svg" (vector, width x height CSS pixels, 96 per inch).
 * Every function validates all of its input before it draws, returns DT_OK or
 * a DT_E* code with one line in err, and never prints. A file is written to a
 * temporary name next to `path` and renamed over it only when complete, so a
 * failed call leaves no partial chart behind (an older file at `path` stays).
 *
 * Units: every coordinate is in the caller's data unit (the one the axis label
 * names, e.g. "GiB" or "ms"); pixel sizes are pixels of the default 960x600
 * figure and scale with the figure. */
#ifndef DT_CHART_H
#define DT_CHART_H

#include <stdint.h>

#include "dt_error.h"

#define DT_CHART_DEFAULT_WIDTH 960   /* pixels */
#define DT_CHART_DEFAULT_HEIGHT 600  /* pixels */
#define DT_CHART_MIN_SIZE 240        /* smallest width or height accepted, pixels */
#define DT_CHART_MAX_SIZE 8192       /* largest width or height accepted, pixels */

/* Colours are 0xRRGGBB wrapped by DT_RGB(); 0 (a zeroed struct) means "the
 * next colour of the built-in palette" (Tableau 10). */
#define DT_RGB(hex) (0x1000000u | ((uint32_t)(hex) & 0xFFFFFFu))
#define DT_COLOR_AUTO 0u

typedef struct dt_chart_opts {
    const char *title;     /* drawn on top; NULL or "" = none */
    const char *x_label;   /* with the unit, e.g. "step time (s)" */
    const char *y_label;   /* with the unit, e.g. "memory per GPU (GiB)" */
    int width, height;     /* pixels; 0 = DT_CHART_DEFAULT_WIDTH/HEIGHT */
} dt_chart_opts;

/* A horizontal reference line (e.g. the GPU's memory limit), shown dashed with
 * its label in the legend. Ignored when label is NULL. */
typedef struct dt_chart_hline {
    const char *label;     /* e.g. "limit 80.00 GiB" */
    double y;              /* data units of the y axis */
    uint32_t color;        /* 0 = red */
} dt_chart_hline;

/* ---- bars ---- */

typedef enum {
    DT_BARS_STACKED = 0,   /* segments on top of each other; total printed on top */
    DT_BARS_GROUPED = 1    /* segments side by side within each bar's slot */
} dt_bars_mode;

typedef struct dt_chart_bars {
    dt_bars_mode mode;
    int n_bars;                        /* >= 1 */
    int n_segments;                    /* >= 1 */
    const char *const *bar_labels;     /* [n_bars], under the axis (rotated when long) */
    const char *const *segment_labels; /* [n_segments], the legend */
    const uint32_t *segment_colors;    /* [n_segments] DT_RGB() values, or NULL = palette */
    const double *values;              /* [n_bars][n_segments] row-major, finite, >= 0 */
    int value_labels;                  /* 1: print totals (stacked) / values (grouped) */
    dt_chart_hline limit;              /* optional */
} dt_chart_bars;

int dt_chart_bars_draw(const char *path, const dt_chart_opts *o, const dt_chart_bars *b,
                       dt_error *err);

/* ---- x-y series ---- */

typedef enum {
    DT_MARK_NONE = 0,
    DT_MARK_DOT = 1,       /* filled circle */
    DT_MARK_CROSS = 2,     /* x */
    DT_MARK_PLUS = 3,
    DT_MARK_SQUARE = 4,    /* filled */
    DT_MARK_TRIANGLE = 5,  /* filled */
    DT_MARK_DIAMOND = 6,   /* filled */
    DT_MARK_STAR = 7       /* filled five-pointed star with a dark outline */
} dt_chart_marker;

typedef struct dt_chart_style {
    const char *label;     /* legend text; NULL = not in the legend */
    uint32_t color;        /* DT_RGB() or DT_COLOR_AUTO */
    dt_chart_marker marker;
    double marker_px;      /* marker diameter; 0 = 9 px */
    int line;              /* 1: join the points (in the order given) with a line */
    int steps;             /* with line: a staircase (value holds until the next x) */
    int dashed;            /* with line: dashed */
} dt_chart_style;

typedef struct dt_chart_series {
    dt_chart_style style;
    int n;                 /* points, >= 1 */
    const double *x, *y;   /* [n], finite (and > 0 on a log axis) */
    /* Optional [n] per-point class: point i is drawn with classes[point_class[i]]
     * (marker, colour, size) of the dt_chart_xy instead of style's marker; the
     * classes then appear in the legend. Lets one series mark e.g. infeasible /
     * feasible / chosen candidates. */
    const int *point_class;
} dt_chart_series;

typedef struct dt_chart_xy {
    int n_series;                    /* >= 1 */
    const dt_chart_series *series;   /* [n_series] */
    int n_classes;                   /* 0 unless a series uses point_class */
    const dt_chart_style *classes;   /* [n_classes] */
    int x_log, y_log;                /* 1: log10 axis */
    int y_from_zero;                 /* 1: the y axis starts at 0 (linear only) */
    dt_chart_hline hline;            /* optional */
} dt_chart_xy;

int dt_chart_xy_draw(const char *path, const dt_chart_opts *o, const dt_chart_xy *xy,
                     dt_error *err);

/* ---- Gantt timeline (+ optional panel below sharing the time axis) ---- */

typedef struct dt_chart_interval {
    int row;               /* 0..n_rows-1 */
    int kind;              /* 0..n_kinds-1: colour and legend entry */
    double t0, t1;         /* ms, finite, t0 <= t1 */
} dt_chart_interval;

typedef struct dt_chart_gantt {
    int n_rows;                       /* >= 1, drawn top to bottom */
    const char *const *row_labels;    /* [n_rows], e.g. "compute", "comm", "h2d" */
    int n_kinds;                      /* >= 1 */
    const char *const *kind_labels;   /* [n_kinds] */
    const uint32_t *kind_colors;      /* [n_kinds] or NULL = palette */
    int n_intervals;                  /* >= 1 */
    const dt_chart_interval *intervals;
} dt_chart_gantt;

/* o->x_label names the time axis (default "time (ms)"); o->y_label labels the
 * lower panel. below may be NULL (Gantt only); its series' x are ms, its
 * log/classes fields are not used. */
int dt_chart_gantt_draw(const char *path, const dt_chart_opts *o, const dt_chart_gantt *g,
                        const dt_chart_xy *below, dt_error *err);

#endif
