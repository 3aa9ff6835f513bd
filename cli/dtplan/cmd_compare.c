/* cmd_compare.c — `dtplan compare A.json B.json [--json]`: two Chrome traces
 * (`dtplan simulate --trace`, `dtrun --trace`) side by side, time per phase and
 * the step time, with B's difference from A in %. Phases and the per-step
 * normalisation: docs/simulate.md ("Comparing traces"). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_cli.h"
#include "dt_json.h"
#include "dt_trace.h"

#define MS_PER_US 1e-3
#define CMP_MAX_PHASES 64
/* A step's optimizer runs once per rank (device AdamW on the compute stream or
 * CPU AdamW with offload): counting these events per rank gives the steps. */
#define CMP_STEP_MARKER "optimizer"

/* The phases of docs/simulate.md ("Event names") in the simulator's order; other
 * names in a trace are listed after them, in order of first appearance. */
static const char *const k_known[] = {"forward", "backward",  "recompute", "allreduce", "reduce_scatter",
                                      "allgather", "h2d",     "d2h",       "nvme",      "optimizer"};
#define CMP_N_KNOWN ((int)(sizeof k_known / sizeof k_known[0]))

typedef struct {
    char name[DT_TRACE_NAME_MAX];
    double us[2];      /* per rank per step, µs, trace A and B */
    int count[2];      /* events (all ranks, all steps) */
} cmp_phase;

typedef struct {
    int ranks, steps;
    double step_us;    /* (last end - first start) per rank, averaged, / steps */
} cmp_shape;

static int usage(FILE *f) {
    fprintf(f,
            "usage: dtplan compare A.json B.json [--json]\n"
            "  Time per phase (forward, backward, recompute, allreduce, reduce_scatter, allgather,\n"
            "  h2d, d2h, nvme, optimizer) and step time of two Chrome traces (dtplan simulate --trace,\n"
            "  dtrun --trace), per rank per step, with B's difference from A in %%.\n"
            "  --json   machine-readable output\n");
    return f == stdout ? 0 : 2;
}


static int phase_index(cmp_phase *ph, int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(ph[i].name, name)) return i;
    if (*n == CMP_MAX_PHASES) return -1;
    snprintf(ph[*n].name, sizeof ph[*n].name, "%s", name);
    return (*n)++;
}

/* Ranks = distinct pids; steps = optimizer events per rank (at least 1). */
static void trace_shape(const dt_trace_data *d, cmp_shape *s) {
    int max_pid = 0;
    for (int i = 0; i < d->n_spans; i++)
        if (d->spans[i].pid > max_pid) max_pid = d->spans[i].pid;
    double *t0 = malloc(sizeof *t0 * (size_t)(max_pid + 1)), *t1 = malloc(sizeof *t1 * (size_t)(max_pid + 1));
    int *seen = calloc((size_t)max_pid + 1, sizeof *seen);
    s->ranks = 0, s->steps = 1, s->step_us = 0;
    if (!t0 || !t1 || !seen) { free(t0), free(t1), free(seen); return; }
    int markers = 0;
    for (int i = 0; i < d->n_spans; i++) {
        const dt_trace_rspan *e = &d->spans[i];
        int p = e->pid < 0 ? 0 : e->pid;
        if (!seen[p]) { seen[p] = 1, s->ranks++, t0[p] = e->ts_us, t1[p] = e->ts_us + e->dur_us; }
        if (e->ts_us < t0[p]) t0[p] = e->ts_us;
        if (e->ts_us + e->dur_us > t1[p]) t1[p] = e->ts_us + e->dur_us;
        if (!strcmp(e->name, CMP_STEP_MARKER)) markers++;
    }
    if (s->ranks > 0 && markers >= s->ranks) s->steps = markers / s->ranks;
    double span = 0;
    for (int p = 0; p <= max_pid; p++)
        if (seen[p]) span += t1[p] - t0[p];
    if (s->ranks > 0) s->step_us = span / s->ranks / s->steps;
    free(t0), free(t1), free(seen);
}

static double diff_pct(double a, double b, int *defined) {
    *defined = 1;
    if (a == 0) {
        *defined = b == 0;
        return 0.0;
    }
    return 100.0 * (b - a) / a;
}

static int load(const char *path, dt_trace_data *d) {
    dt_error e;
    dt_error_clear(&e);
    if (dt_trace_read(path, d, &e)) return dt_cli_fail(e.code == DT_ENOMEM ? 1 : 2, "%s", e.msg);
    if (d->n_spans == 0) {
        dt_trace_data_free(d);
        return dt_cli_fail(2, "%s: the trace has no \"X\" spans to compare (write one with dtplan simulate --trace)", path);
    }
    return 0;
}

int dt_cmd_compare(int argc, char **argv) {
    const char *path[2] = {NULL, NULL};
    int json = 0, n_paths = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout);
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (argv[i][0] == '-' && argv[i][1]) return dt_cli_fail(2, "compare: unknown option '%s' (see dtplan compare --help)", argv[i]);
        else if (n_paths == 2) return dt_cli_fail(2, "compare: two traces only (got a third, '%s')", argv[i]);
        else path[n_paths++] = argv[i];
    }
    if (n_paths != 2) return dt_cli_fail(2, "compare: needs two traces (usage: dtplan compare A.json B.json)");

    dt_trace_data d[2];
    int rc = load(path[0], &d[0]);
    if (rc) return rc;
    if ((rc = load(path[1], &d[1]))) {
        dt_trace_data_free(&d[0]);
        return rc;
    }
    cmp_phase *ph = calloc(CMP_MAX_PHASES, sizeof *ph);
    if (!ph) {
        dt_trace_data_free(&d[0]), dt_trace_data_free(&d[1]);
        return dt_cli_fail(1, "compare: out of memory");
    }
    int n = 0;
    for (int k = 0; k < CMP_N_KNOWN; k++) phase_index(ph, &n, k_known[k]);
    cmp_shape sh[2];
    for (int t = 0; t < 2 && !rc; t++) {
        trace_shape(&d[t], &sh[t]);
        const double per = 1.0 / ((double)sh[t].ranks * sh[t].steps);
        for (int i = 0; i < d[t].n_spans; i++) {
            int k = phase_index(ph, &n, d[t].spans[i].name);
            if (k < 0) {
                rc = dt_cli_fail(2, "%s: more than %d distinct event names; is this a dtplan/dtrun trace?", path[t],
                          CMP_MAX_PHASES);
                break;
            }
            ph[k].us[t] += d[t].spans[i].dur_us * per;
            ph[k].count[t]++;
        }
    }
    dt_trace_data_free(&d[0]), dt_trace_data_free(&d[1]);
    if (rc) {
        free(ph);
        return rc;
    }

    int def;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "a", path[0]);
        cJSON_AddStringToObject(o, "b", path[1]);
        cJSON *arr = cJSON_AddArrayToObject(o, "phases");
        for (int k = 0; k < n; k++) {
            if (!ph[k].count[0] && !ph[k].count[1]) continue;
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "name", ph[k].name);
            cJSON_AddNumberToObject(p, "a_ms", ph[k].us[0] * MS_PER_US);
            cJSON_AddNumberToObject(p, "b_ms", ph[k].us[1] * MS_PER_US);
            double d_pct = diff_pct(ph[k].us[0], ph[k].us[1], &def);
            if (def) cJSON_AddNumberToObject(p, "diff_pct", d_pct);
            else cJSON_AddNullToObject(p, "diff_pct");
            cJSON_AddItemToArray(arr, p);
        }
        cJSON *s = cJSON_AddObjectToObject(o, "step");
        cJSON_AddNumberToObject(s, "a_ms", sh[0].step_us * MS_PER_US);
        cJSON_AddNumberToObject(s, "b_ms", sh[1].step_us * MS_PER_US);
        double d_pct = diff_pct(sh[0].step_us, sh[1].step_us, &def);
        if (def) cJSON_AddNumberToObject(s, "diff_pct", d_pct);
        else cJSON_AddNullToObject(s, "diff_pct");
        cJSON_AddNumberToObject(s, "a_ranks", sh[0].ranks);
        cJSON_AddNumberToObject(s, "b_ranks", sh[1].ranks);
        cJSON_AddNumberToObject(s, "a_steps", sh[0].steps);
        cJSON_AddNumberToObject(s, "b_steps", sh[1].steps);
        char *txt = dt_json_print(o);
        cJSON_Delete(o);
        free(ph);
        if (!txt) return dt_cli_fail(1, "compare: out of memory");
        printf("%s", txt);
        free(txt);
        return 0;
    }
    printf("A: %s (%d rank(s), %d step(s))\nB: %s (%d rank(s), %d step(s))\n", path[0], sh[0].ranks, sh[0].steps,
           path[1], sh[1].ranks, sh[1].steps);
    printf("time per rank per step (busy time of each phase; phases on different streams overlap):\n");
    printf("  %-16s %12s %12s %9s\n", "phase", "A (ms)", "B (ms)", "B vs A");
    for (int k = 0; k < n; k++) {
        if (!ph[k].count[0] && !ph[k].count[1]) continue;
        double d_pct = diff_pct(ph[k].us[0], ph[k].us[1], &def);
        char pct[32];
        if (def) snprintf(pct, sizeof pct, "%+.1f%%", d_pct);
        else snprintf(pct, sizeof pct, "only B");
        printf("  %-16s %12.3f %12.3f %9s\n", ph[k].name, ph[k].us[0] * MS_PER_US, ph[k].us[1] * MS_PER_US, pct);
    }
    double d_pct = diff_pct(sh[0].step_us, sh[1].step_us, &def);
    printf("  %-16s %12.3f %12.3f %+8.1f%%\n", "step time", sh[0].step_us * MS_PER_US, sh[1].step_us * MS_PER_US,
           def ? d_pct : 0.0);
    free(ph);
    return 0;
}
