/* report_charts.c — dtplan/dtrun charts built on the generic dt_chart API:
 * memory per option, solver candidates, loss / throughput / step-time curves,
 * predicted vs measured, and the simulated step timeline. */
#include "dt_report_charts.h"
#include "dt_consts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Memory categories, one colour each, the same in every chart. */
enum { CAT_PARAMS, CAT_GRADS, CAT_OPTIMIZER, CAT_ACTIVATIONS, CAT_BUFFERS, CAT_RESERVE, CAT_COUNT };
static dt_device g_device = DT_DEVICE_CUDA;
void dt_chart_set_device(dt_device d) { g_device = d; }
const char *dt_chart_rank_word(void) { return g_device == DT_DEVICE_CPU ? "rank" : "GPU"; }

static const char *const k_cat_names[CAT_COUNT] = {"params", "grads", "optimizer",
                                                   "activations", "buffers", "reserve"};
static const uint32_t k_cat_colors[CAT_COUNT] = {DT_RGB(0x4E79A7), DT_RGB(0xF28E2B),
                                                 DT_RGB(0x59A14F), DT_RGB(0xE15759),
                                                 DT_RGB(0x76B7B2), DT_RGB(0xBAB0AC)};

#define COLOR_PREDICTED DT_RGB(0x9DB9D6)   /* light blue: the model */
#define COLOR_MEASURED DT_RGB(0x2F5D8C)    /* dark blue: the run */
#define COLOR_INFEASIBLE DT_RGB(0x9A9A9A)
#define COLOR_FEASIBLE DT_RGB(0x1F77B4)
#define COLOR_CHOSEN DT_RGB(0xD62728)
#define COLOR_TRAIN DT_RGB(0x4E79A7)
#define COLOR_VALID DT_RGB(0xF28E2B)
#define COLOR_LIMIT DT_RGB(0xD62728)

static void mem_values(const dt_mem_breakdown *m, int64_t out[CAT_COUNT]) {
    out[CAT_PARAMS] = m->params;
    out[CAT_GRADS] = m->grads;
    out[CAT_OPTIMIZER] = m->optimizer;
    out[CAT_ACTIVATIONS] = m->activations;
    out[CAT_BUFFERS] = m->buffers;
    out[CAT_RESERVE] = m->reserve;
}

static int check_mem(const dt_mem_breakdown *m, const char *what, dt_error *err) {
    int64_t v[CAT_COUNT];
    if (!m) return dt_errorf(err, DT_EINVAL, "%s is NULL", what);
    mem_values(m, v);
    for (int c = 0; c < CAT_COUNT; c++)
        if (v[c] < 0)
            return dt_errorf(err, DT_EINVAL, "%s %s = %lld bytes is negative", what,
                             k_cat_names[c], (long long)v[c]);
    return DT_OK;
}

/* The memory axis unit: the caller's (GiB / GB), or its 1/1024 (1/1000) sub-unit
 * MiB / MB when every value is below one unit, so that a small run's bars read
 * "4.3 MiB" instead of "0.004 GiB". */
typedef struct {
    double div;            /* bytes per axis unit */
    const char *name;      /* "GiB", "MiB", "GB", "MB" */
} mem_axis;
#define BYTES_PER_GIB 1073741824.0
#define BYTES_PER_GB 1e9
static mem_axis mem_axis_for(int64_t max_bytes, dt_units u) {
    const int bin = u == DT_UNITS_GIB;
    const double unit = bin ? BYTES_PER_GIB : BYTES_PER_GB;
    if (max_bytes > 0 && (double)max_bytes < unit) return (mem_axis){unit / (bin ? 1024.0 : 1000.0), bin ? "MiB" : "MB"};
    return (mem_axis){unit, dt_units_name(u)};
}

/* "limit 80.00 GiB" into buf; returns buf, or NULL when there is no limit. */
static const char *limit_label(int64_t limit_bytes, dt_units units, char *buf, size_t n) {
    char b[64];
    if (limit_bytes <= 0) return NULL;
    snprintf(buf, n, "limit %s", dt_format_bytes(limit_bytes, units, b, sizeof b));
    return buf;
}

int dt_chart_memory_rows(const char *path, const char *title, int n_rows,
                         const char *const *row_labels, const dt_mem_breakdown *rows,
                         int64_t limit_bytes, dt_units units, dt_error *err) {
    if (n_rows < 1 || !rows)
        return dt_errorf(err, DT_EINVAL, "memory chart '%s': %d rows; need at least one", path ? path : "", n_rows);
    double *v = malloc((size_t)n_rows * CAT_COUNT * sizeof *v);
    if (!v) return dt_errorf(err, DT_ENOMEM, "memory chart: out of memory");
    int rc = DT_OK;
    for (int i = 0; i < n_rows && !rc; i++) {
        int64_t b[CAT_COUNT];
        char what[32];
        snprintf(what, sizeof what, "row %d", i);
        if ((rc = check_mem(&rows[i], what, err))) dt_error_prefix(err, "memory chart '%s'", path ? path : "");
        mem_values(&rows[i], b);
        for (int c = 0; c < CAT_COUNT; c++) v[i * CAT_COUNT + c] = dt_bytes_in(b[c], units);
    }
    if (!rc) {
        char y_label[64], lim[96];
        snprintf(y_label, sizeof y_label, "device memory per %s (%s)", dt_chart_rank_word(), dt_units_name(units));
        char dflt[32];
        snprintf(dflt, sizeof dflt, "Memory per %s", dt_chart_rank_word());
        dt_chart_opts o = {title ? title : dflt, "configuration", y_label, 0, 0};
        dt_chart_bars b = {DT_BARS_STACKED, n_rows, CAT_COUNT, row_labels, k_cat_names,
                           k_cat_colors, v, 1,
                           {limit_label(limit_bytes, units, lim, sizeof lim),
                            dt_bytes_in(limit_bytes, units), COLOR_LIMIT}};
        rc = dt_chart_bars_draw(path, &o, &b, err);
    }
    free(v);
    return rc;
}

int dt_chart_candidates(const char *path, const char *title, int n, const dt_chart_candidate *c,
                        int chosen, const char *chosen_label, int64_t limit_bytes, dt_units units,
                        dt_error *err) {
    if (n < 1 || !c)
        return dt_errorf(err, DT_EINVAL, "candidates chart '%s': %d candidates; need at least one", path ? path : "", n);
    if (chosen < -1 || chosen >= n)
        return dt_errorf(err, DT_EINVAL, "candidates chart '%s': chosen index %d is not -1..%d", path ? path : "", chosen, n - 1);
    double *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    int *cls = malloc((size_t)n * sizeof *cls);
    int rc = DT_OK;
    if (!x || !y || !cls) {
        rc = dt_errorf(err, DT_ENOMEM, "candidates chart: out of memory");
        goto out;
    }
    double tmin = INFINITY, tmax = 0;
    for (int i = 0; i < n; i++) {
        if (!(c[i].step_s > 0) || !isfinite(c[i].step_s) || c[i].peak_bytes < 0) {
            rc = dt_errorf(err, DT_EINVAL, "candidates chart '%s': candidate %d has step %g s, peak %lld bytes; need step > 0 and peak >= 0",
                           path ? path : "", i, c[i].step_s, (long long)c[i].peak_bytes);
            goto out;
        }
        x[i] = c[i].step_s;
        y[i] = dt_bytes_in(c[i].peak_bytes, units);
        cls[i] = i == chosen ? 2 : c[i].feasible ? 1 : 0;
        tmin = fmin(tmin, x[i]);
        tmax = fmax(tmax, x[i]);
    }
    char y_label[64], lim[96];
    snprintf(y_label, sizeof y_label, "peak device memory per %s (%s)", dt_chart_rank_word(), dt_units_name(units));
    dt_chart_opts o = {title ? title : "Candidates", "predicted step time (s)", y_label, 0, 0};
    dt_chart_style classes[3] = {
        {"infeasible", COLOR_INFEASIBLE, DT_MARK_CROSS, 9, 0, 0, 0},
        {"feasible", COLOR_FEASIBLE, DT_MARK_DOT, 9, 0, 0, 0},
        {chosen_label ? chosen_label : "chosen", COLOR_CHOSEN, DT_MARK_STAR, 22, 0, 0, 0},
    };
    dt_chart_series s = {{NULL, 0, DT_MARK_DOT, 0, 0, 0, 0}, n, x, y, cls};
    dt_chart_xy xy = {1, &s, 3, classes, tmax > DT_CHART_LOG_SPAN * tmin, 0, 1,
                      {limit_label(limit_bytes, units, lim, sizeof lim),
                       dt_bytes_in(limit_bytes, units), COLOR_LIMIT}};
    rc = dt_chart_xy_draw(path, &o, &xy, err);
out:
    free(x);
    free(y);
    free(cls);
    return rc;
}

static int check_curve(const char *path, const char *what, dt_chart_curve cv, int optional,
                       dt_error *err) {
    if (cv.n == 0 && optional) return DT_OK;
    if (cv.n < 1 || !cv.step || !cv.value)
        return dt_errorf(err, DT_EINVAL, "chart '%s': %s has %d points; need at least one",
                         path ? path : "", what, cv.n);
    return DT_OK;
}

int dt_chart_loss(const char *path, const char *title, dt_chart_curve train, dt_chart_curve valid,
                  dt_error *err) {
    int rc;
    if ((rc = check_curve(path, "train loss", train, 0, err)) ||
        (rc = check_curve(path, "valid loss", valid, 1, err)))
        return rc;
    dt_chart_series s[2] = {
        {{"train", COLOR_TRAIN, DT_MARK_NONE, 0, 1, 0, 0}, train.n, train.step, train.value, NULL},
        {{"valid", COLOR_VALID, DT_MARK_DOT, 8, 1, 0, 0}, valid.n, valid.step, valid.value, NULL},
    };
    /* a single training point would be invisible as a line */
    if (train.n == 1) s[0].style.marker = DT_MARK_DOT;
    dt_chart_opts o = {title ? title : "Loss", "optimizer step", "cross-entropy loss (nats/token)", 0, 0};
    dt_chart_xy xy = {valid.n ? 2 : 1, s, 0, NULL, 0, 0, 0, {0}};
    return dt_chart_xy_draw(path, &o, &xy, err);
}

int dt_chart_reward(const char *path, const char *title, dt_chart_curve reward, dt_error *err) {
    int rc = check_curve(path, "reward", reward, 0, err);
    if (rc) return rc;
    dt_chart_series s = {{"mean reward", COLOR_TRAIN, reward.n == 1 ? DT_MARK_DOT : DT_MARK_NONE, 8, 1, 0, 0},
                         reward.n, reward.step, reward.value, NULL};
    dt_chart_opts o = {title ? title : "Reward", "optimizer step", "mean reward of the step's completions", 0, 0};
    dt_chart_xy xy = {1, &s, 0, NULL, 0, 0, 0, {0}};
    return dt_chart_xy_draw(path, &o, &xy, err);
}

/* A measured curve with an optional predicted value as a dashed line, whose
 * legend reads "predicted <value> <unit>" (whole numbers from 100 up, else 3
 * significant digits: "11500 tokens/s", "0.72 s"). */
static int curve_vs_prediction(const char *path, const char *title, const char *y_label,
                               const char *what, const char *unit, dt_chart_curve m,
                               double predicted, dt_error *err) {
    int rc;
    if ((rc = check_curve(path, what, m, 0, err))) return rc;
    if (!isfinite(predicted))
        return dt_errorf(err, DT_EINVAL, "chart '%s': predicted %s is not finite", path ? path : "", what);
    char lim[96];
    if (fabs(predicted) >= 100) snprintf(lim, sizeof lim, "predicted %.0f %s", predicted, unit);
    else snprintf(lim, sizeof lim, "predicted %.3g %s", predicted, unit);
    dt_chart_series s = {{"measured", COLOR_MEASURED, m.n <= 50 ? DT_MARK_DOT : DT_MARK_NONE, 6,
                          m.n > 1, 0, 0},
                         m.n, m.step, m.value, NULL};
    dt_chart_opts o = {title, "optimizer step", y_label, 0, 0};
    dt_chart_xy xy = {1, &s, 0, NULL, 0, 0, 1, {predicted > 0 ? lim : NULL, predicted, DT_RGB(0xE15759)}};
    return dt_chart_xy_draw(path, &o, &xy, err);
}

int dt_chart_throughput(const char *path, const char *title, dt_chart_curve tokens_per_s,
                        double predicted_tokens_per_s, dt_error *err) {
    char y_label[48];
    snprintf(y_label, sizeof y_label, "tokens/s (all %ss)", dt_chart_rank_word());
    return curve_vs_prediction(path, title ? title : "Throughput", y_label,
                               "tokens/s", "tokens/s", tokens_per_s,
                               predicted_tokens_per_s, err);
}

int dt_chart_step_time(const char *path, const char *title, dt_chart_curve step_s,
                       double predicted_step_s, dt_error *err) {
    return curve_vs_prediction(path, title ? title : "Step time", "step time (s)", "step time",
                               "s", step_s, predicted_step_s, err);
}

static const char *const k_series_pm[2] = {"predicted", "tracked"};   /* memory: the engine's count */
static const uint32_t k_colors_pm[2] = {COLOR_PREDICTED, COLOR_MEASURED};

int dt_chart_memory_compare(const char *path, const char *title,
                            const dt_mem_breakdown *predicted, const dt_mem_breakdown *measured,
                            int64_t limit_bytes, dt_units units, dt_error *err) {
    int rc;
    if ((rc = check_mem(predicted, "predicted", err)) || (rc = check_mem(measured, "measured", err)))
        return dt_error_prefix(err, "memory chart '%s'", path ? path : "");
    enum { N = CAT_BUFFERS + 2 };   /* five categories + total without reserve */
    const char *labels[N] = {"params", "grads", "optimizer", "activations", "buffers",
                             "total (no reserve)"};
    int64_t vb[N * 2], vmax = limit_bytes;
    double v[N * 2];
    const dt_mem_breakdown *m[2] = {predicted, measured};
    for (int k = 0; k < 2; k++) {
        int64_t b[CAT_COUNT];
        mem_values(m[k], b);
        for (int c = 0; c <= CAT_BUFFERS; c++) vb[c * 2 + k] = b[c];
        int64_t total = m[k]->total - m[k]->reserve;
        vb[(N - 1) * 2 + k] = total > 0 ? total : 0;
    }
    for (int i = 0; i < N * 2; i++) vmax = vb[i] > vmax ? vb[i] : vmax;
    const mem_axis ax = mem_axis_for(vmax, units);
    for (int i = 0; i < N * 2; i++) v[i] = (double)vb[i] / ax.div;
    char y_label[64], lim[96];
    snprintf(y_label, sizeof y_label, "device memory per %s (%s)", dt_chart_rank_word(), ax.name);
    dt_chart_opts o = {title ? title : "Memory: predicted vs tracked", "category", y_label, 0, 0};
    dt_chart_bars b = {DT_BARS_GROUPED, N, 2, labels, k_series_pm, k_colors_pm, v, 1,
                       {limit_label(limit_bytes, units, lim, sizeof lim),
                        (double)limit_bytes / ax.div, COLOR_LIMIT}};
    return dt_chart_bars_draw(path, &o, &b, err);
}

int dt_chart_time_compare(const char *path, const char *title,
                          const dt_time_breakdown *predicted, const dt_time_breakdown *measured,
                          dt_error *err) {
    if (!predicted || !measured)
        return dt_errorf(err, DT_EINVAL, "time chart '%s': predicted or measured breakdown is NULL", path ? path : "");
    enum { N = 6 };
    const char *labels[N] = {"compute", "recompute", "exposed comm", "exposed offload",
                             "optimizer", "step"};
    const dt_time_breakdown *t[2] = {predicted, measured};
    double v[N * 2];
    for (int k = 0; k < 2; k++) {
        const double s[N] = {t[k]->compute_s, t[k]->recompute_s, t[k]->comm_exposed_s,
                             t[k]->offload_s, t[k]->optimizer_s, t[k]->step_s};
        for (int i = 0; i < N; i++) v[i * 2 + k] = s[i] * DT_MS_PER_S;
    }
    dt_chart_opts o = {title ? title : "Step time: predicted vs measured", "phase",
                       "time per optimizer step (ms)", 0, 0};
    dt_chart_bars b = {DT_BARS_GROUPED, N, 2, labels, k_series_pm, k_colors_pm, v, 1, {0}};
    return dt_chart_bars_draw(path, &o, &b, err);
}

/* ---- simulated step timeline ---- */

static const char *const k_stream_names[DT_TL_STREAM_COUNT] = {"compute", "comm", "h2d",
                                                               "cpu-optimizer"};
static const char *const k_kind_names[DT_TL_KIND_COUNT] = {
    "forward", "backward", "recompute", "all-reduce", "reduce-scatter",
    "all-gather", "h2d copy", "d2h copy", "nvme io", "optimizer"};
/* compute in blues/purple, collectives in reds/oranges/yellow, transfers in
 * greens/teal, optimizer brown */
static const uint32_t k_kind_colors[DT_TL_KIND_COUNT] = {
    DT_RGB(0x4E79A7), DT_RGB(0x1B3F66), DT_RGB(0xB07AA1), DT_RGB(0xE15759), DT_RGB(0xF28E2B),
    DT_RGB(0xEDC948), DT_RGB(0x59A14F), DT_RGB(0x8CD17D), DT_RGB(0x499894), DT_RGB(0x9C755F)};

const char *dt_timeline_stream_name(dt_timeline_stream s) {
    return (unsigned)s < DT_TL_STREAM_COUNT ? k_stream_names[s] : "?";
}
const char *dt_timeline_kind_name(dt_timeline_kind k) {
    return (unsigned)k < DT_TL_KIND_COUNT ? k_kind_names[k] : "?";
}

int dt_chart_step_timeline(const char *path, const char *title, int n_events,
                           const dt_timeline_event *events, int n_mem, const dt_timeline_mem *mem,
                           int64_t limit_bytes, dt_units units, dt_error *err) {
    if (n_events < 1 || !events)
        return dt_errorf(err, DT_EINVAL, "timeline chart '%s': %d events; need at least one", path ? path : "", n_events);
    if (n_mem < 0 || (n_mem > 0 && !mem))
        return dt_errorf(err, DT_EINVAL, "timeline chart '%s': %d memory samples but no array", path ? path : "", n_mem);
    /* Only the streams and kinds that occur, in their fixed order. */
    int row_of[DT_TL_STREAM_COUNT], kind_of[DT_TL_KIND_COUNT], n_rows = 0, n_kinds = 0;
    const char *rows[DT_TL_STREAM_COUNT], *kinds[DT_TL_KIND_COUNT];
    uint32_t kcol[DT_TL_KIND_COUNT];
    int used_s[DT_TL_STREAM_COUNT] = {0}, used_k[DT_TL_KIND_COUNT] = {0};
    for (int i = 0; i < n_events; i++) {
        if ((unsigned)events[i].stream >= DT_TL_STREAM_COUNT || (unsigned)events[i].kind >= DT_TL_KIND_COUNT)
            return dt_errorf(err, DT_EINVAL, "timeline chart '%s': event %d has stream %d kind %d; unknown",
                             path ? path : "", i, (int)events[i].stream, (int)events[i].kind);
        used_s[events[i].stream] = used_k[events[i].kind] = 1;
    }
    for (int s = 0; s < DT_TL_STREAM_COUNT; s++)
        if (used_s[s]) { row_of[s] = n_rows; rows[n_rows++] = k_stream_names[s]; }
    for (int k = 0; k < DT_TL_KIND_COUNT; k++)
        if (used_k[k]) { kind_of[k] = n_kinds; kcol[n_kinds] = k_kind_colors[k]; kinds[n_kinds++] = k_kind_names[k]; }

    dt_chart_interval *iv = malloc((size_t)n_events * sizeof *iv);
    double *mt = malloc((size_t)(n_mem ? n_mem : 1) * sizeof *mt);
    double *mv = malloc((size_t)(n_mem ? n_mem : 1) * sizeof *mv);
    int rc = DT_OK;
    if (!iv || !mt || !mv) {
        rc = dt_errorf(err, DT_ENOMEM, "timeline chart: out of memory");
        goto out;
    }
    for (int i = 0; i < n_events; i++)
        iv[i] = (dt_chart_interval){row_of[events[i].stream], kind_of[events[i].kind],
                                    events[i].t0_s * DT_MS_PER_S, events[i].t1_s * DT_MS_PER_S};
    for (int i = 0; i < n_mem; i++) {
        if (mem[i].bytes < 0) {
            rc = dt_errorf(err, DT_EINVAL, "timeline chart '%s': memory sample %d is %lld bytes (negative)",
                           path ? path : "", i, (long long)mem[i].bytes);
            goto out;
        }
        mt[i] = mem[i].t_s * DT_MS_PER_S;
    }
    int64_t mmax = limit_bytes;
    for (int i = 0; i < n_mem; i++) mmax = mem[i].bytes > mmax ? mem[i].bytes : mmax;
    const mem_axis ax = mem_axis_for(mmax, units);
    for (int i = 0; i < n_mem; i++) mv[i] = (double)mem[i].bytes / ax.div;
    char y_label[64], lim[96];
    snprintf(y_label, sizeof y_label, "allocated (%s)", ax.name);
    dt_chart_opts o = {title ? title : "Simulated step", "time (ms)", y_label, 0, 0};
    dt_chart_gantt g = {n_rows, rows, n_kinds, kinds, kcol, n_events, iv};
    dt_chart_series s = {{"device memory", DT_RGB(0x2F5D8C), DT_MARK_NONE, 0, 1, 1, 0}, n_mem, mt, mv, NULL};
    dt_chart_xy below = {1, &s, 0, NULL, 0, 0, 1,
                         {limit_label(limit_bytes, units, lim, sizeof lim),
                          (double)limit_bytes / ax.div, COLOR_LIMIT}};
    rc = dt_chart_gantt_draw(path, &o, &g, n_mem ? &below : NULL, err);
out:
    free(iv);
    free(mt);
    free(mv);
    return rc;
}
