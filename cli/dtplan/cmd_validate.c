/* cmd_validate.c — `dtplan validate [CASE.json|DIR ...]`: predicts every published
 * measurement of the validation suite (planner/dt_validate.h) and prints predicted next to
 * measured, the error of each, whether each rank group keeps the measured order, and the
 * counts within the goals of issue 17 (memory 10 %, throughput 25 %). With
 * --max-memory-error / --max-throughput-error it fails (exit 1) when a case exceeds the
 * stated bound, when a "fits" case disagrees, or (with --keep-ranks) when a group's order
 * breaks. docs/validation.md. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dt_cli.h"
#include "dt_consts.h"
#include "dt_validate.h"

/* The goals issue 17 sets ("memory within 10 % and throughput within 25 % on every case"). */
#define VAL_GOAL_MEMORY 0.10
#define VAL_GOAL_THROUGHPUT 0.25
#define VAL_MAX_CASES 256
#define VAL_PATH_MAX 1024

typedef struct {
    char path[VAL_PATH_MAX];
    dt_val_case c;
    dt_val_result r;
} val_row;

static int usage(FILE *f) {
    fprintf(f,
            "usage: dtplan validate [CASE.json | DIR ...] [--json] [--max-memory-error PCT]\n"
            "                       [--max-throughput-error PCT] [--keep-ranks]\n"
            "  Predicts each published measurement of the validation suite (default directory:\n"
            "  tests/validation/cases) and prints predicted next to measured (docs/validation.md).\n"
            "  --max-memory-error PCT       fail (exit 1) when a memory case is off by more than PCT %%\n"
            "                               or a fits / out-of-memory case disagrees\n"
            "  --max-throughput-error PCT   fail when a throughput case is off by more than PCT %%\n"
            "  --keep-ranks                 fail when a rank group's predicted order differs from the measured\n"
            "  --json                       one JSON object per case, then the summary\n");
    return f == stdout ? 0 : 2;
}

static int is_memory(dt_val_quantity q) {
    return q == DT_VAL_PEAK_BYTES || q == DT_VAL_PEAK_ALLOCATED_BYTES || q == DT_VAL_FITS;
}

/* Adds path (a case file) or every *.json in it (a directory), sorted by name. */
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int add_path(const char *path, val_row *rows, int *n) {
    struct stat st;
    if (stat(path, &st)) return dt_cli_fail(2, "validate: cannot read '%s' (give case files or directories)", path);
    if (!S_ISDIR(st.st_mode)) {
        if (*n >= VAL_MAX_CASES) return dt_cli_fail(2, "validate: more than %d cases", VAL_MAX_CASES);
        snprintf(rows[(*n)++].path, VAL_PATH_MAX, "%s", path);
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) return dt_cli_fail(2, "validate: cannot open directory '%s'", path);
    char *names[VAL_MAX_CASES];
    int k = 0, rc = 0;
    for (struct dirent *e; (e = readdir(d)) && !rc;) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json")) continue;
        if (k >= VAL_MAX_CASES || !(names[k] = strdup(e->d_name))) rc = dt_cli_fail(2, "validate: too many cases");
        else k++;
    }
    closedir(d);
    qsort(names, (size_t)k, sizeof *names, cmp_str);
    for (int i = 0; i < k; i++) {
        if (!rc && *n >= VAL_MAX_CASES) rc = dt_cli_fail(2, "validate: more than %d cases", VAL_MAX_CASES);
        if (!rc) snprintf(rows[(*n)++].path, VAL_PATH_MAX, "%s/%s", path, names[i]);
        free(names[i]);
    }
    return rc;
}

static void fmt_value(dt_val_quantity q, double v, char *buf, size_t n) {
    switch (q) {
    case DT_VAL_PEAK_BYTES: snprintf(buf, n, "%.2f GiB", v / DT_GIB); break;
    case DT_VAL_PEAK_ALLOCATED_BYTES: snprintf(buf, n, "%.2f GiB alloc", v / DT_GIB); break;
    case DT_VAL_FITS: snprintf(buf, n, "%s", v > 0.5 ? "fits" : "OOM"); break;
    case DT_VAL_SAMPLES_PER_S: snprintf(buf, n, "%.2f samples/s", v); break;
    case DT_VAL_MODEL_TFLOPS_GPU: snprintf(buf, n, "%.0f TFLOP/s/GPU", v); break;
    default: snprintf(buf, n, "%.0f tok/s/GPU", v); break;
    }
}

/* A rank group keeps its order when every pair of its cases is ordered alike by the
 * measurements and the predictions (ties in the measurement impose nothing). */
static int group_kept(const val_row *rows, int n, const char *group) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (strcmp(rows[i].c.rank_group, group) || strcmp(rows[j].c.rank_group, group)) continue;
            if (rows[i].c.measured > rows[j].c.measured && !(rows[i].r.predicted > rows[j].r.predicted)) return 0;
        }
    return 1;
}

typedef struct {
    double max_mem, max_tput;   /* bounds (fractions), < 0: none */
    int keep_ranks, json;
} val_opts;

static int parse_pct(const char *v, const char *flag, double *out) {
    char *end = NULL;
    double x = v ? strtod(v, &end) : NAN;
    if (!v || !end || *end || !(x >= 0) || !isfinite(x))
        return dt_cli_fail(2, "validate: %s '%s': expected a percentage >= 0 (e.g. %s 25)", flag, v ? v : "", flag);
    *out = x / 100.0;
    return 0;
}

static void print_row(const val_row *w) {
    char m[48], p[48], e[32];
    const dt_val_case *c = &w->c;
    fmt_value(c->quantity, c->measured, m, sizeof m);
    if (c->quantity == DT_VAL_FITS) {
        snprintf(p, sizeof p, "%s %.1f GiB", w->r.predicted > 0.5 ? "fits" : "OOM", (double)w->r.peak_bytes / DT_GIB);
        snprintf(e, sizeof e, "%s", w->r.error > 0.5 ? "disagree" : "agree");
    } else {
        fmt_value(c->quantity, w->r.predicted, p, sizeof p);
        snprintf(e, sizeof e, "%+.1f %%", 100.0 * w->r.error);
    }
    printf("%-44s %-9s %-20s %-20s %10s\n", c->name, dt_runtime_name(c->plan.runtime.kind), m, p, e);
}

static void print_json_row(const val_row *w, int last) {
    const dt_val_case *c = &w->c;
    printf("  {\"name\": \"%s\", \"runtime\": \"%s\", \"quantity\": \"%s\", \"measured\": %.17g, \"predicted\": %.17g, "
           "\"error\": %.17g, \"peak_bytes\": %lld, \"step_s\": %.17g, \"rank_group\": \"%s\"}%s\n",
           c->name, dt_runtime_name(c->plan.runtime.kind), dt_val_quantity_name(c->quantity), c->measured,
           w->r.predicted, w->r.error, (long long)w->r.peak_bytes, w->r.step_s, c->rank_group, last ? "" : ",");
}

int dt_cmd_validate(int argc, char **argv) {
    val_opts o = {-1.0, -1.0, 0, 0};
    val_row *rows = calloc(VAL_MAX_CASES, sizeof *rows);
    if (!rows) return dt_cli_fail(1, "validate: out of memory");
    int n = 0, rc = 0, any_path = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            free(rows);
            return usage(stdout);
        }
        if (!strcmp(a, "--json")) o.json = 1;
        else if (!strcmp(a, "--keep-ranks")) o.keep_ranks = 1;
        else if (!strcmp(a, "--max-memory-error") || !strcmp(a, "--max-throughput-error")) {
            const char *v = dt_cli_value(argc, argv, &i, "validate");
            rc = v ? parse_pct(v, a, !strcmp(a, "--max-memory-error") ? &o.max_mem : &o.max_tput) : 2;
        } else if (a[0] == '-') rc = dt_cli_fail(2, "validate: unknown option '%s' (see dtplan validate --help)", a);
        else rc = add_path(a, rows, &n), any_path = 1;
    }
    if (!rc && !any_path) rc = add_path("tests/validation/cases", rows, &n);
    if (!rc && n == 0) rc = dt_cli_fail(2, "validate: no case files (*.json) found");
    dt_error e;
    dt_error_clear(&e);
    for (int i = 0; i < n && !rc; i++) {
        if (dt_validate_case_load(rows[i].path, &rows[i].c, &e) || dt_validate_case_predict(&rows[i].c, &rows[i].r, &e))
            rc = dt_cli_fail(2, "validate: %s", e.msg);
    }
    if (rc) {
        free(rows);
        return rc;
    }
    int mem_n = 0, mem_ok = 0, tput_n = 0, tput_ok = 0, fits_n = 0, fits_ok = 0, over = 0;
    for (int i = 0; i < n; i++) {
        const dt_val_case *c = &rows[i].c;
        const double err = fabs(rows[i].r.error);
        if (c->quantity == DT_VAL_FITS) fits_n++, fits_ok += err < 0.5;
        else if (is_memory(c->quantity)) mem_n++, mem_ok += err <= VAL_GOAL_MEMORY;
        else tput_n++, tput_ok += err <= VAL_GOAL_THROUGHPUT;
        const double bound = is_memory(c->quantity) ? o.max_mem : o.max_tput;
        if (bound >= 0 && (c->quantity == DT_VAL_FITS ? err > 0.5 : err > bound)) over++;
    }
    int groups = 0, kept = 0;
    if (o.json) printf("{\"cases\": [\n");
    else printf("%-44s %-9s %-20s %-20s %10s\n", "case", "runtime", "measured", "predicted", "error");
    for (int i = 0; i < n; i++) {
        if (o.json) print_json_row(&rows[i], i == n - 1);
        else print_row(&rows[i]);
    }
    if (o.json) printf("], \"groups\": [");
    else printf("\nrank groups (the measured order of a source's configurations):\n");
    for (int i = 0; i < n; i++) {
        const char *g = rows[i].c.rank_group;
        int first = g[0] != 0;
        for (int j = 0; j < i && first; j++) first = strcmp(rows[j].c.rank_group, g) != 0;
        if (!first) continue;
        int k = group_kept(rows, n, g);
        groups++, kept += k;
        if (o.json) printf("%s{\"group\": \"%s\", \"kept\": %s}", groups > 1 ? ", " : "", g, k ? "true" : "false");
        else printf("  %-40s %s\n", g, k ? "order kept" : "ORDER BROKEN");
    }
    if (o.json) {
        printf("], \"memory_within_goal\": %d, \"memory_cases\": %d, \"fits_agree\": %d, \"fits_cases\": %d, "
               "\"throughput_within_goal\": %d, \"throughput_cases\": %d, \"groups_kept\": %d, \"groups_total\": %d}\n",
               mem_ok, mem_n, fits_ok, fits_n, tput_ok, tput_n, kept, groups);
    } else {
        printf("\nsummary: memory within %.0f %%: %d of %d; fits / out-of-memory agree: %d of %d; throughput within "
               "%.0f %%: %d of %d; rank groups kept: %d of %d\n",
               100 * VAL_GOAL_MEMORY, mem_ok, mem_n, fits_ok, fits_n, 100 * VAL_GOAL_THROUGHPUT, tput_ok, tput_n, kept,
               groups);
    }
    rc = 0;
    if (over) rc = dt_cli_fail(1, "validate: %d case(s) exceed the stated bounds", over);
    if (o.keep_ranks && kept < groups) rc = dt_cli_fail(1, "validate: %d rank group(s) lost the measured order",
                                                        groups - kept);
    free(rows);
    return rc;
}
