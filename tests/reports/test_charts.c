/* test_charts.c — every chart kind to PNG and SVG, read back and measured
 * (size, non-blank, colours), and the error paths (bad names, bad data, no
 * partial files). Usage: test_charts [KEEP_DIR] — with KEEP_DIR the charts
 * stay there for looking at; otherwise a temporary directory is removed. */
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_report_charts.h"
#include "dt_test.h"
#include "png_check.h"

static char g_dir[512];

/* Thresholds for "not blank". Ink = pixels that are not background: the
 * charts here measure 2.2% (a single curve) to 34% (bars), but a frame with
 * axes, grid and text and no data measures 2.1% too, so ink only catches an
 * empty image; the colour count and the per-chart data-colour checks are what
 * prove the data was drawn. Colours: background, text, axis and grid are 4,
 * so 5 needs at least one data colour (libplot's PNG is not antialiased). */
#define MIN_INK 0.015
#define MIN_COLORS 5
#define MIN_SVG_ELEMENTS 30

static const char *out_path(const char *name) {
    static char buf[8][700];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", g_dir, name);
    return p;
}

static int count_dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* Checks one written PNG: signature, IHDR size, decodes, ink and colours. */
static void check_png(const char *path, uint32_t w, uint32_t h, chart_png *keep) {
    chart_png p;
    if (keep) keep->rgb = NULL;
    if (!png_read(path, &p)) {
        fprintf(stderr, "%s: %s\n", path, p.why);
        CHECK(0);
        return;
    }
    CHECK_EQ_I64(p.width, w);
    CHECK_EQ_I64(p.height, h);
    CHECK_EQ_I64(p.bg, 0xFFFFFF);   /* white, whatever BG_COLOR says in the environment */
    if (p.ink < MIN_INK || p.colors < MIN_COLORS || getenv("DT_CHART_VERBOSE"))
        fprintf(stderr, "%s: ink %.4f colours %d\n", path, p.ink, p.colors);
    CHECK(p.ink >= MIN_INK);
    CHECK(p.colors >= MIN_COLORS);
    if (keep) *keep = p;
    else free(p.rgb);
}

static void check_svg(const char *path, double w, double h) {
    svg_info s;
    CHECK(svg_read(path, &s));
    CHECK_NEAR(s.width_in, w / 96.0, 1e-3);
    CHECK_NEAR(s.height_in, h / 96.0, 1e-3);
    if (s.elements < MIN_SVG_ELEMENTS || getenv("DT_CHART_VERBOSE")) fprintf(stderr, "%s: %d elements\n", path, s.elements);
    CHECK(s.elements >= MIN_SVG_ELEMENTS);
}

/* The checker itself must see a blank image as blank (else the tests could not fail). */
static void test_checker_detects_blank(void) {
    enum { W = 64, H = 32 };
    unsigned char px[H * W * 3];
    memset(px, 0xFF, sizeof px);
    px[(5 * W + 7) * 3] = 0;   /* one dark-ish pixel at (7,5) */
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = W;
    im.height = H;
    im.format = PNG_FORMAT_RGB;
    png_alloc_size_t n = 0;
    CHECK(png_image_write_get_memory_size(im, n, 0, px, 0, NULL));
    unsigned char *png = malloc(n);
    CHECK(png && png_image_write_to_memory(&im, png, &n, 0, px, 0, NULL));
    chart_png p;
    png_decode(png, n, &p);
    CHECK(p.ok);
    CHECK_EQ_I64(p.width, W);
    CHECK_NEAR(p.ink, 1.0 / (W * H), 1e-12);
    CHECK_EQ_I64(p.colors, 2);
    CHECK(p.ink < MIN_INK);
    free(p.rgb);
    free(png);
}

/* ---- generic charts ---- */

static const char *k_seg[] = {"params", "grads", "optimizer", "activations"};
static const char *k_bars[] = {"ZeRO-0", "ZeRO-1", "ZeRO-2", "ZeRO-3",
                               "ZeRO-3 + optimizer offload (cpu)"};

static int draw_stacked(const char *path, dt_error *err) {
    static const double v[5 * 4] = {16, 16, 48, 9, 16, 16, 6, 9, 16, 2, 6, 9, 2, 2, 6, 9, 2, 2, 0, 9};
    static const uint32_t colors[4] = {DT_RGB(0x123456), 0, 0, 0};
    dt_chart_opts o = {"Stacked bars", "configuration", "memory (GiB)", 0, 0};
    dt_chart_bars b = {DT_BARS_STACKED, 5, 4, k_bars, k_seg, colors, v, 1,
                       {"limit 80 GiB", 80.0, DT_RGB(0xCC0000)}};
    return dt_chart_bars_draw(path, &o, &b, err);
}

static int draw_xy(const char *path, int w, int h, dt_error *err) {
    enum { N = 40 };
    static double x[N], y1[N], y2[N];
    static int cls[N];
    for (int i = 0; i < N; i++) {
        x[i] = 0.5 * pow(1.2, i);            /* spans > 3 decades: log x */
        y1[i] = 100.0 / (1 + i) + 1;
        y2[i] = 3 + (i * 37 % 11);
        cls[i] = i == 17 ? 2 : (i % 3 == 0) ? 0 : 1;
    }
    dt_chart_style classes[3] = {{"infeasible", DT_RGB(0x999999), DT_MARK_CROSS, 9, 0, 0, 0},
                                 {"feasible", DT_RGB(0x1F77B4), DT_MARK_DOT, 9, 0, 0, 0},
                                 {"chosen", DT_RGB(0xD62728), DT_MARK_STAR, 22, 0, 0, 0}};
    dt_chart_series s[2] = {{{"1/x curve", 0, DT_MARK_SQUARE, 6, 1, 0, 1}, N, x, y1, NULL},
                            {{NULL, 0, DT_MARK_DOT, 0, 0, 0, 0}, N, x, y2, cls}};
    dt_chart_opts o = {"X-Y: log axes, classes", "time (s)", "value (units)", w, h};
    dt_chart_xy xy = {2, s, 3, classes, 1, 1, 0, {"reference 50", 50.0, 0}};
    return dt_chart_xy_draw(path, &o, &xy, err);
}

static int draw_gantt(const char *path, int with_panel, dt_error *err) {
    static const char *rows[] = {"compute", "comm", "h2d", "cpu-optimizer"};
    static const char *kinds[] = {"forward", "backward", "reduce-scatter", "copy", "optimizer"};
    dt_chart_interval iv[64];
    int n = 0;
    for (int l = 0; l < 8; l++) iv[n++] = (dt_chart_interval){0, 0, l * 10.0, l * 10.0 + 9};
    for (int l = 0; l < 8; l++) {
        double t = 80 + l * 20.0;
        iv[n++] = (dt_chart_interval){0, 1, t, t + 19};
        iv[n++] = (dt_chart_interval){1, 2, t + 19, t + 30};
        iv[n++] = (dt_chart_interval){2, 3, t + 25, t + 25.3};   /* sub-pixel: still drawn */
    }
    iv[n++] = (dt_chart_interval){3, 4, 245, 300};
    double mt[50], mv[50];
    for (int i = 0; i < 50; i++) {
        mt[i] = i * 6.0;
        mv[i] = 20 + (i < 25 ? i : 50 - i) * 1.2;
    }
    dt_chart_series s = {{"allocated", 0, DT_MARK_NONE, 0, 1, 1, 0}, 50, mt, mv, NULL};
    dt_chart_xy below = {1, &s, 0, NULL, 0, 0, 1, {"limit 60 GiB", 60, 0}};
    dt_chart_gantt g = {4, rows, 5, kinds, NULL, n, iv};
    dt_chart_opts o = {"Gantt", "time (ms)", "memory (GiB)", 0, 0};
    return dt_chart_gantt_draw(path, &o, &g, with_panel ? &below : NULL, err);
}

static void test_generic(void) {
    dt_error err = {0};
    const char *png = out_path("stacked.png"), *svg = out_path("stacked.svg");
    CHECK_EQ_I64(draw_stacked(png, &err), DT_OK);
    CHECK_EQ_I64(draw_stacked(svg, &err), DT_OK);
    chart_png p;
    check_png(png, 960, 600, &p);
    if (p.rgb) {
        CHECK(png_has_color(&p, 0x123456));   /* the segment colour asked for */
        CHECK(png_has_color(&p, 0xCC0000));   /* the limit line */
        free(p.rgb);
    }
    check_svg(svg, 960, 600);
    size_t n = 0;
    char *text = (char *)slurp(svg, &n);
    CHECK(text && strstr(text, "fill=\"#123456\"") != NULL);   /* the segment colour */
    free(text);

    /* grouped bars; a non-default size */
    static const double v[3 * 2] = {10, 12, 5, 4.5, 0, 1};
    static const char *bl[] = {"a", "b", "c"}, *sl[] = {"predicted", "measured"};
    dt_chart_opts o = {"Grouped", "category", "GiB", 640, 400};
    dt_chart_bars b = {DT_BARS_GROUPED, 3, 2, bl, sl, NULL, v, 1, {0}};
    CHECK_EQ_I64(dt_chart_bars_draw(out_path("grouped.png"), &o, &b, &err), DT_OK);
    CHECK_EQ_I64(dt_chart_bars_draw(out_path("grouped.svg"), &o, &b, &err), DT_OK);
    check_png(out_path("grouped.png"), 640, 400, NULL);
    check_svg(out_path("grouped.svg"), 640, 400);

    /* many bars: labels rotate, every label still within the image */
    enum { NB = 40 };
    double mv[NB];
    const char *ml[NB];
    char names[NB][32];
    for (int i = 0; i < NB; i++) {
        mv[i] = 1 + i % 7;
        snprintf(names[i], sizeof names[i], "candidate number %d", i);
        ml[i] = names[i];
    }
    dt_chart_opts om = {"Many bars", "candidate", "value (1)", 0, 0};
    dt_chart_bars bm = {DT_BARS_STACKED, NB, 1, ml, sl, NULL, mv, 0, {0}};
    CHECK_EQ_I64(dt_chart_bars_draw(out_path("many.png"), &om, &bm, &err), DT_OK);
    check_png(out_path("many.png"), 960, 600, NULL);

    CHECK_EQ_I64(draw_xy(out_path("xy.png"), 0, 0, &err), DT_OK);
    CHECK_EQ_I64(draw_xy(out_path("xy.svg"), 0, 0, &err), DT_OK);
    check_png(out_path("xy.png"), 960, 600, &p);
    if (p.rgb) {
        CHECK(png_has_color(&p, 0xD62728));   /* the chosen star */
        CHECK(png_has_color(&p, 0x999999));   /* infeasible crosses */
        free(p.rgb);
    }
    check_svg(out_path("xy.svg"), 960, 600);
    /* small and large figures keep their requested size */
    CHECK_EQ_I64(draw_xy(out_path("xy_small.png"), 480, 300, &err), DT_OK);
    check_png(out_path("xy_small.png"), 480, 300, NULL);
    CHECK_EQ_I64(draw_xy(out_path("xy_big.png"), 1600, 1000, &err), DT_OK);
    check_png(out_path("xy_big.png"), 1600, 1000, NULL);

    /* smallest figure, wide tick labels: labels thin out instead of overlapping */
    static const double tx[3] = {0, 125000, 250000}, ty[3] = {1, 3, 2};
    dt_chart_series ts = {{"tokens", 0, DT_MARK_DOT, 0, 1, 0, 0}, 3, tx, ty, NULL};
    dt_chart_xy txy = {1, &ts, 0, NULL, 0, 0, 1, {0}};
    dt_chart_opts to = {"Tiny", "tokens (1)", "loss (nats)", DT_CHART_MIN_SIZE, DT_CHART_MIN_SIZE};
    CHECK_EQ_I64(dt_chart_xy_draw(out_path("xy_tiny.png"), &to, &txy, &err), DT_OK);
    check_png(out_path("xy_tiny.png"), DT_CHART_MIN_SIZE, DT_CHART_MIN_SIZE, NULL);

    CHECK_EQ_I64(draw_gantt(out_path("gantt.png"), 0, &err), DT_OK);
    CHECK_EQ_I64(draw_gantt(out_path("gantt.svg"), 0, &err), DT_OK);
    check_png(out_path("gantt.png"), 960, 600, NULL);
    check_svg(out_path("gantt.svg"), 960, 600);
    CHECK_EQ_I64(draw_gantt(out_path("gantt2.png"), 1, &err), DT_OK);
    CHECK_EQ_I64(draw_gantt(out_path("gantt2.svg"), 1, &err), DT_OK);
    check_png(out_path("gantt2.png"), 960, 600, NULL);
    check_svg(out_path("gantt2.svg"), 960, 600);
    if (err.code) fprintf(stderr, "last error: %s\n", err.msg);
}

/* ---- domain charts ---- */

static dt_mem_breakdown mem(double p, double g, double o, double a, double b, double r) {
    const double GiB = 1073741824.0;
    dt_mem_breakdown m = {0};
    m.params = (int64_t)(p * GiB);
    m.grads = (int64_t)(g * GiB);
    m.optimizer = (int64_t)(o * GiB);
    m.activations = (int64_t)(a * GiB);
    m.buffers = (int64_t)(b * GiB);
    m.reserve = (int64_t)(r * GiB);
    m.total = m.params + m.grads + m.optimizer + m.activations + m.buffers + m.reserve;
    return m;
}

/* Draws stem.png and stem.svg and checks both; each of the data colours
 * (0-terminated list, e.g. a segment, the chosen star, the limit line) must
 * appear in the PNG's pixels and as "#rrggbb" in the SVG. */
static void both(const char *stem, int (*draw)(const char *, dt_error *), const uint32_t *colors) {
    char png[64], svg[64];
    dt_error err = {0};
    snprintf(png, sizeof png, "%s.png", stem);
    snprintf(svg, sizeof svg, "%s.svg", stem);
    int rc = draw(out_path(png), &err);
    if (rc) fprintf(stderr, "%s: %s\n", png, err.msg);
    CHECK_EQ_I64(rc, DT_OK);
    rc = draw(out_path(svg), &err);
    if (rc) fprintf(stderr, "%s: %s\n", svg, err.msg);
    CHECK_EQ_I64(rc, DT_OK);
    chart_png p;
    check_png(out_path(png), 960, 600, &p);
    size_t n = 0;
    char *text = (char *)slurp(out_path(svg), &n);
    for (int i = 0; colors[i]; i++) {
        char hex[16];
        snprintf(hex, sizeof hex, "\"#%06x\"", colors[i]);
        if (p.rgb && !png_has_color(&p, colors[i])) fprintf(stderr, "%s: no pixel of #%06x\n", png, colors[i]);
        CHECK(p.rgb && png_has_color(&p, colors[i]));
        CHECK(text && strstr(text, hex) != NULL);
    }
    free(text);
    free(p.rgb);
    check_svg(out_path(svg), 960, 600);
}

/* 32B on 8 x 80 GiB GPUs (docs/memory-model.md "Worked example"), rounded GiB per rank */
static int draw_memory_rows(const char *path, dt_error *err) {
    const char *labels[] = {"ZeRO-0 (DDP)", "ZeRO-1", "ZeRO-2", "ZeRO-3",
                            "ZeRO-3 + offload optimizer", "ZeRO-3 + offload all"};
    dt_mem_breakdown r[6] = {mem(61, 61, 366, 14, 3, 2), mem(61, 61, 46, 14, 3, 2),
                             mem(61, 7.6, 46, 14, 3, 2), mem(7.6, 7.6, 46, 14, 4, 2),
                             mem(7.6, 7.6, 0, 14, 4, 2), mem(0, 7.6, 0, 14, 4, 2)};
    return dt_chart_memory_rows(path, "Qwen2.5-32B on 8 x H100 80 GiB: memory per GPU", 6, labels, r,
                                (int64_t)80 << 30, DT_UNITS_GIB, err);
}

static int draw_candidates(const char *path, dt_error *err) {
    enum { N = 60 };
    dt_chart_candidate c[N];
    uint64_t s = 12345;   /* deterministic LCG (Knuth MMIX constants) */
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(s >> 11) / 9007199254740992.0;
        c[i].step_s = 2.0 + 10.0 * u + (i % 5);
        c[i].peak_bytes = (int64_t)((30 + 90 * (1 - u) + 3 * (i % 7)) * 1073741824.0);
        c[i].feasible = c[i].peak_bytes < ((int64_t)80 << 30);
    }
    return dt_chart_candidates(path, "Solver candidates", N, c, 7, "chosen: ZeRO-2, micro 4, ckpt 32",
                               (int64_t)80 << 30, DT_UNITS_GIB, err);
}

enum { NSTEP = 300 };
static double g_step[NSTEP], g_loss[NSTEP], g_tps[NSTEP], g_st[NSTEP], g_vstep[10], g_vloss[10];

static void make_curves(void) {
    for (int i = 0; i < NSTEP; i++) {
        g_step[i] = i + 1;
        g_loss[i] = 2.0 + 8.5 * exp(-i / 40.0) + 0.08 * sin(i * 1.7);
        g_tps[i] = i < 3 ? 9000 + 1000 * i : 12000 + 300 * sin(i * 0.9);
        g_st[i] = 8192.0 / g_tps[i];   /* 8192 tokens per step */
    }
    for (int i = 0; i < 10; i++) {
        g_vstep[i] = 30 * (i + 1);
        g_vloss[i] = 2.1 + 8.5 * exp(-g_vstep[i] / 40.0);
    }
}

static int draw_loss(const char *path, dt_error *err) {
    dt_chart_curve t = {NSTEP, g_step, g_loss}, v = {10, g_vstep, g_vloss};
    return dt_chart_loss(path, "GPT-2 124M, 2 ranks ZeRO-2: loss", t, v, err);
}
static int draw_tps(const char *path, dt_error *err) {
    dt_chart_curve t = {NSTEP, g_step, g_tps};
    return dt_chart_throughput(path, NULL, t, 11500, err);
}
static int draw_steptime(const char *path, dt_error *err) {
    dt_chart_curve t = {20, g_step, g_st};
    return dt_chart_step_time(path, NULL, t, 0.72, err);
}
static int draw_memcmp(const char *path, dt_error *err) {
    dt_mem_breakdown p = mem(0.23, 0.23, 0.9, 2.1, 0.4, 1), m = mem(0.23, 0.25, 0.9, 2.4, 0.31, 0);
    return dt_chart_memory_compare(path, NULL, &p, &m, 0, DT_UNITS_GIB, err);
}
static int draw_timecmp(const char *path, dt_error *err) {
    dt_time_breakdown p = {.compute_s = 0.5, .recompute_s = 0.1, .comm_exposed_s = 0.05,
                           .offload_s = 0.0, .optimizer_s = 0.02, .step_s = 0.67};
    dt_time_breakdown m = {.compute_s = 0.55, .recompute_s = 0.12, .comm_exposed_s = 0.09,
                           .offload_s = 0.0, .optimizer_s = 0.03, .step_s = 0.79};
    return dt_chart_time_compare(path, NULL, &p, &m, err);
}

static int draw_timeline(const char *path, dt_error *err) {
    dt_timeline_event ev[200];
    dt_timeline_mem mm[200];
    int n = 0, nm = 0;
    double t = 0, gib = 1073741824.0, alloc = 20 * gib;
    const int L = 12;
    mm[nm++] = (dt_timeline_mem){0, (int64_t)alloc};
    for (int l = 0; l < L; l++, t += 0.004) {
        ev[n++] = (dt_timeline_event){DT_TL_COMM, DT_TL_ALLGATHER, t, t + 0.002};
        ev[n++] = (dt_timeline_event){DT_TL_COMPUTE, DT_TL_FORWARD, t + 0.002, t + 0.006};
        alloc += 1.5 * gib;
        mm[nm++] = (dt_timeline_mem){t + 0.006, (int64_t)alloc};
    }
    t += 0.002;
    for (int l = 0; l < L; l++, t += 0.008) {
        ev[n++] = (dt_timeline_event){DT_TL_COMPUTE, l % 3 == 0 ? DT_TL_RECOMPUTE : DT_TL_BACKWARD, t, t + 0.008};
        ev[n++] = (dt_timeline_event){DT_TL_COMM, DT_TL_REDUCE_SCATTER, t + 0.008, t + 0.011};
        ev[n++] = (dt_timeline_event){DT_TL_H2D, DT_TL_COPY_D2H, t + 0.011, t + 0.0125};
        alloc -= 1.5 * gib;
        mm[nm++] = (dt_timeline_mem){t + 0.008, (int64_t)alloc};
    }
    ev[n++] = (dt_timeline_event){DT_TL_CPU_OPT, DT_TL_OPTIMIZER, t + 0.012, t + 0.03};
    ev[n++] = (dt_timeline_event){DT_TL_H2D, DT_TL_NVME, t + 0.006, t + 0.012};
    ev[n++] = (dt_timeline_event){DT_TL_H2D, DT_TL_COPY_H2D, t + 0.03, t + 0.034};
    mm[nm++] = (dt_timeline_mem){t + 0.034, (int64_t)alloc};
    return dt_chart_step_timeline(path, "Simulated step: ZeRO-3 + optimizer offload", n, ev, nm, mm,
                                  (int64_t)40 << 30, DT_UNITS_GIB, err);
}

static void test_domain(void) {
    make_curves();
    /* colours from report_charts.c: segments, classes, curves, limit lines */
    both("memory_rows", draw_memory_rows, (const uint32_t[]){0x4E79A7, 0x59A14F, 0xE15759, 0xD62728, 0});
    both("candidates", draw_candidates, (const uint32_t[]){0x9A9A9A, 0x1F77B4, 0xD62728, 0});
    both("loss", draw_loss, (const uint32_t[]){0x4E79A7, 0xF28E2B, 0});
    both("throughput", draw_tps, (const uint32_t[]){0x2F5D8C, 0xE15759, 0});
    both("step_time", draw_steptime, (const uint32_t[]){0x2F5D8C, 0xE15759, 0});
    both("memory_compare", draw_memcmp, (const uint32_t[]){0x9DB9D6, 0x2F5D8C, 0});
    both("time_compare", draw_timecmp, (const uint32_t[]){0x9DB9D6, 0x2F5D8C, 0});
    both("timeline", draw_timeline, (const uint32_t[]){0x4E79A7, 0x1B3F66, 0x499894, 0x9C755F, 0x2F5D8C, 0xD62728, 0});

    /* GB units and no limit; valid loss absent */
    dt_error err = {0};
    dt_mem_breakdown r = mem(1, 1, 2, 3, 0.5, 0);
    const char *lab[] = {"only"};
    CHECK_EQ_I64(dt_chart_memory_rows(out_path("mem_gb.png"), NULL, 1, lab, &r, 0, DT_UNITS_GB, &err), DT_OK);
    check_png(out_path("mem_gb.png"), 960, 600, NULL);
    /* all feasible, none chosen: the legend has no "infeasible" / "chosen" entries */
    dt_chart_candidate cf[3] = {{1.0, (int64_t)1 << 30, 1}, {2.0, (int64_t)2 << 30, 1}, {3.0, (int64_t)3 << 30, 1}};
    CHECK_EQ_I64(dt_chart_candidates(out_path("cand_ok.png"), NULL, 3, cf, -1, NULL, 0, DT_UNITS_GIB, &err), DT_OK);
    if (err.code) fprintf(stderr, "cand_ok: %s\n", err.msg);
    chart_png pc;
    check_png(out_path("cand_ok.png"), 960, 600, &pc);
    if (pc.rgb) {
        CHECK(!png_has_color(&pc, 0xD62728) && !png_has_color(&pc, 0x9A9A9A));
        free(pc.rgb);
    }
    dt_chart_curve t = {NSTEP, g_step, g_loss}, none = {0, NULL, NULL};
    CHECK_EQ_I64(dt_chart_loss(out_path("loss_train.png"), NULL, t, none, &err), DT_OK);
    check_png(out_path("loss_train.png"), 960, 600, NULL);
}

/* ---- error paths ---- */

/* rc must be code, the message non-empty and one line, and nothing new in the directory. */
#define CHECK_FAILS(call, want)                                                     \
    do {                                                                            \
        dt_error e_ = {0};                                                          \
        int before_ = count_dir_entries(g_dir);                                     \
        int rc_ = (call);                                                           \
        CHECK_EQ_I64(rc_, want);                                                    \
        CHECK_EQ_I64(e_.code, want);                                                \
        CHECK(e_.msg[0] != '\0' && strchr(e_.msg, '\n') == NULL);                   \
        CHECK_EQ_I64(count_dir_entries(g_dir), before_);                            \
        if (rc_ != (want) || getenv("DT_CHART_VERBOSE"))                           \
            fprintf(stderr, "  rc %d: %s\n", rc_, e_.msg);                          \
        err = e_;                                                                   \
    } while (0)

static void test_errors(void) {
    dt_error err = {0};
    static const double v[2] = {1, 2}, vnan[2] = {1, NAN}, vneg[2] = {1, -1};
    static const char *l2[] = {"a", "b"}, *l1[] = {"s"};
    dt_chart_opts o = {"t", "x", "y", 0, 0};
    dt_chart_bars b = {DT_BARS_STACKED, 2, 1, l2, l1, NULL, v, 1, {0}};

    CHECK_FAILS(dt_chart_bars_draw(out_path("bad.jpg"), &o, &b, &e_), DT_EINVAL);
    CHECK(strstr(err.msg, ".png") != NULL);
    CHECK_FAILS(dt_chart_bars_draw(out_path("noext"), &o, &b, &e_), DT_EINVAL);
    CHECK_FAILS(dt_chart_bars_draw(NULL, &o, &b, &e_), DT_EINVAL);
    CHECK_FAILS(dt_chart_bars_draw("/nonexistent-dir-dt/x.png", &o, &b, &e_), DT_EIO);
    CHECK(strstr(err.msg, "/nonexistent-dir-dt/x.png") != NULL);
    /* a directory in place of the file: rename fails, the temp file is removed */
    mkdir(out_path("adir.png"), 0755);
    CHECK_FAILS(dt_chart_bars_draw(out_path("adir.png"), &o, &b, &e_), DT_EIO);
    rmdir(out_path("adir.png"));

    dt_chart_bars bad = b;
    bad.n_bars = 0;
    CHECK_FAILS(dt_chart_bars_draw(out_path("b.png"), &o, &bad, &e_), DT_EINVAL);
    bad = b;
    bad.values = vnan;
    CHECK_FAILS(dt_chart_bars_draw(out_path("b.png"), &o, &bad, &e_), DT_EINVAL);
    CHECK(strstr(err.msg, "values[1]") != NULL);
    bad.values = vneg;
    CHECK_FAILS(dt_chart_bars_draw(out_path("b.svg"), &o, &bad, &e_), DT_EINVAL);
    CHECK(strstr(err.msg, "negative") != NULL);
    bad = b;
    bad.bar_labels = NULL;
    CHECK_FAILS(dt_chart_bars_draw(out_path("b.png"), &o, &bad, &e_), DT_EINVAL);
    bad = b;
    bad.limit = (dt_chart_hline){"limit", INFINITY, 0};
    CHECK_FAILS(dt_chart_bars_draw(out_path("b.png"), &o, &bad, &e_), DT_EINVAL);
    dt_chart_opts big = o;
    big.width = 100000;
    CHECK_FAILS(dt_chart_bars_draw(out_path("b.png"), &big, &b, &e_), DT_EINVAL);
    big.width = -5;
    CHECK_FAILS(dt_chart_bars_draw(out_path("b.png"), &big, &b, &e_), DT_EINVAL);

    /* a failed call leaves an existing chart untouched */
    const char *keep = out_path("keep.png");
    CHECK_EQ_I64(dt_chart_bars_draw(keep, &o, &b, &err), DT_OK);
    size_t n0 = 0, n1 = 0;
    unsigned char *before = slurp(keep, &n0);
    bad = b;
    bad.values = vnan;
    CHECK_FAILS(dt_chart_bars_draw(keep, &o, &bad, &e_), DT_EINVAL);
    unsigned char *after = slurp(keep, &n1);
    CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);

    /* x-y */
    static const double x[3] = {1, 2, 3}, y0[3] = {0, 1, 2}, ynan[3] = {1, NAN, 2};
    static const int cls_bad[3] = {0, 1, 5};
    dt_chart_series s = {{"s", 0, DT_MARK_DOT, 0, 1, 0, 0}, 3, x, y0, NULL};
    dt_chart_xy xy = {1, &s, 0, NULL, 0, 1, 0, {0}};   /* log y with a 0 */
    CHECK_FAILS(dt_chart_xy_draw(out_path("x.png"), &o, &xy, &e_), DT_EINVAL);
    CHECK(strstr(err.msg, "log") != NULL);
    xy.y_log = 0;
    s.y = ynan;
    CHECK_FAILS(dt_chart_xy_draw(out_path("x.png"), &o, &xy, &e_), DT_EINVAL);
    s.y = y0;
    s.n = 0;
    CHECK_FAILS(dt_chart_xy_draw(out_path("x.svg"), &o, &xy, &e_), DT_EINVAL);
    s.n = 3;
    s.point_class = cls_bad;   /* classes but no class styles */
    CHECK_FAILS(dt_chart_xy_draw(out_path("x.png"), &o, &xy, &e_), DT_EINVAL);
    dt_chart_style one[2] = {{"a", 0, DT_MARK_DOT, 0, 0, 0, 0}, {"b", 0, DT_MARK_STAR, 0, 0, 0, 0}};
    xy.n_classes = 2;
    xy.classes = one;          /* class 5 of 0..1 */
    CHECK_FAILS(dt_chart_xy_draw(out_path("x.png"), &o, &xy, &e_), DT_EINVAL);
    CHECK(strstr(err.msg, "class 5") != NULL);
    xy.n_classes = 0;
    xy.classes = NULL;
    xy.n_series = 0;
    CHECK_FAILS(dt_chart_xy_draw(out_path("x.png"), &o, &xy, &e_), DT_EINVAL);

    /* Gantt */
    static const char *rows[] = {"r"}, *kinds[] = {"k"};
    dt_chart_interval iv = {0, 0, 5, 1};   /* t1 < t0 */
    dt_chart_gantt g = {1, rows, 1, kinds, NULL, 1, &iv};
    CHECK_FAILS(dt_chart_gantt_draw(out_path("g.png"), &o, &g, NULL, &e_), DT_EINVAL);
    iv = (dt_chart_interval){1, 0, 0, 1};   /* row out of range */
    CHECK_FAILS(dt_chart_gantt_draw(out_path("g.png"), &o, &g, NULL, &e_), DT_EINVAL);
    g.n_intervals = 0;
    CHECK_FAILS(dt_chart_gantt_draw(out_path("g.png"), &o, &g, NULL, &e_), DT_EINVAL);

    /* domain */
    dt_mem_breakdown m = mem(1, 1, 1, 1, 1, 1);
    m.grads = -1;
    const char *lab[] = {"x"};
    CHECK_FAILS(dt_chart_memory_rows(out_path("m.png"), NULL, 1, lab, &m, 0, DT_UNITS_GIB, &e_), DT_EINVAL);
    CHECK(strstr(err.msg, "grads") != NULL);
    CHECK_FAILS(dt_chart_memory_rows(out_path("m.png"), NULL, 0, lab, &m, 0, DT_UNITS_GIB, &e_), DT_EINVAL);
    dt_chart_candidate c[2] = {{1.0, 10, 1}, {NAN, 10, 1}};
    CHECK_FAILS(dt_chart_candidates(out_path("c.png"), NULL, 2, c, 0, NULL, 0, DT_UNITS_GIB, &e_), DT_EINVAL);
    CHECK_FAILS(dt_chart_candidates(out_path("c.png"), NULL, 1, c, 3, NULL, 0, DT_UNITS_GIB, &e_), DT_EINVAL);
    dt_chart_curve none = {0, NULL, NULL};
    CHECK_FAILS(dt_chart_loss(out_path("l.png"), NULL, none, none, &e_), DT_EINVAL);
    dt_timeline_event ev = {DT_TL_COMPUTE, DT_TL_FORWARD, 0.002, 0.001};
    CHECK_FAILS(dt_chart_step_timeline(out_path("t.png"), NULL, 1, &ev, 0, NULL, 0, DT_UNITS_GIB, &e_), DT_EINVAL);
    ev = (dt_timeline_event){(dt_timeline_stream)9, DT_TL_FORWARD, 0, 1};
    CHECK_FAILS(dt_chart_step_timeline(out_path("t.png"), NULL, 1, &ev, 0, NULL, 0, DT_UNITS_GIB, &e_), DT_EINVAL);
    CHECK_STR(dt_timeline_stream_name(DT_TL_CPU_OPT), "cpu-optimizer");
}

/* libplot reads unset parameters from the environment; the charts must not. */
static void test_environment_ignored(void) {
    setenv("BITMAPSIZE", "100x100", 1);
    setenv("BG_COLOR", "black", 1);
    setenv("ROTATION", "90", 1);
    setenv("EMULATE_COLOR", "yes", 1);
    setenv("PAGESIZE", "a4", 1);
    dt_error err = {0};
    chart_png p;
    CHECK_EQ_I64(draw_stacked(out_path("env.png"), &err), DT_OK);
    check_png(out_path("env.png"), 960, 600, &p);
    if (p.rgb) {
        CHECK(png_has_color(&p, 0x123456));   /* colour, not grey */
        free(p.rgb);
    }
    CHECK_EQ_I64(draw_stacked(out_path("env.svg"), &err), DT_OK);
    check_svg(out_path("env.svg"), 960, 600);
    unsetenv("BITMAPSIZE");
    unsetenv("BG_COLOR");
    unsetenv("ROTATION");
    unsetenv("EMULATE_COLOR");
    unsetenv("PAGESIZE");
}

static int rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char p[1024];
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    return rmdir(dir);
}

int main(int argc, char **argv) {
    int keep = argc > 1;
    if (keep) {
        snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
        mkdir(g_dir, 0755);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(g_dir, sizeof g_dir, "%s/dt_charts_XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(g_dir)) {
            perror("mkdtemp");
            return 1;
        }
    }
    test_checker_detects_blank();
    test_generic();
    test_domain();
    test_errors();
    test_environment_ignored();
    if (!keep) CHECK(rm_tree(g_dir) == 0);   /* also proves no stray files remain */
    TEST_MAIN_END();
}
