/* memreport.c — see dt_memreport.h. */
#include "dt_memreport.h"
#include "dt_consts.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_hardware.h"
#include "dt_json.h"
#include "dt_memtrack.h"
#include "dt_zero.h"

#define DT_RSS_SOURCE "kernel: VmHWM of /proc/self/status, reset per phase by writing 5 to /proc/self/clear_refs"
#define DT_RSS_SAMPLED "kernel: VmRSS of /proc/self/status sampled at each phase's begin and end (start-up: VmHWM)"
#define DT_DEV_SOURCE "driver: cudaMemGetInfo total - free, highest value after each device allocation and at phase boundaries"
#define DT_RUNTIME_LABEL "runtime: code, libraries, MPI, allocator"
#define DT_MEMREPORT_ALL_RANKS 8   /* the text shows every rank up to this many */
#define DT_DEV_RUNTIME_LABEL "runtime: CUDA context, cuBLAS, NCCL, other processes"

void dt_memreport_predicted(const dt_plan *plan, int64_t *rss, int64_t *device) {
    *rss = *device = -1;
    if (!plan->prediction.valid) return;
    const dt_mem_breakdown *m = &plan->prediction.memory;
    /* the plan predicts the host pool per node: one rank's part is 1/gpus_per_node */
    const int64_t n = plan->cluster.gpus_per_node > 0 ? plan->cluster.gpus_per_node : 1;
    const int64_t host = m->host_total / n;
    if (plan->cluster.device == DT_DEVICE_CPU) {
        *rss = m->total + host;   /* both pools are the process's memory */
    } else {
        *rss = host;
        *device = m->total;
    }
}

int dt_memreport_phase_predicted(const dt_plan *plan, int rank, int resumed_or_init, int64_t out[DT_PHASE_COUNT]) {
    int64_t rss, dev;
    dt_memreport_predicted(plan, &rss, &dev);
    for (int p = 0; p < DT_PHASE_COUNT; p++) out[p] = rss;
    if (rss < 0 || plan->cluster.device != DT_DEVICE_CPU || plan->runtime.kind != DT_RUNTIME_DTRUN) return 0;
    /* the plan's reserve on the CPU is the runtime term at its largest phase: take it
     * out and put back what each phase holds (docs/memory-model.md "The CPU runtime term") */
    int64_t comm, io;
    dt_zero_untracked_bytes(plan, rank, &comm, &io);
    const int64_t base = rss - plan->prediction.memory.reserve +
                         dt_hardware_runtime_bytes(&plan->cluster.hw, plan->parallel.world_size);
    for (int p = 0; p < DT_PHASE_COUNT; p++) out[p] = base;
    out[DT_PHASE_BACKWARD] += comm;
    out[DT_PHASE_OPTIMIZER] += dt_zero_untracked_tail(plan, rank);
    /* ZeRO-0 keeps the same state on every rank: rank 0 writes the checkpoint alone
     * (engine/store/ckpt.c, writers = 1), the others stream nothing */
    if (plan->parallel.zero_stage > 0 || rank == 0) out[DT_PHASE_CKPT_SAVE] += io;
    out[DT_PHASE_CKPT_LOAD] += io;   /* the export streams from the engine's own buffers on the CPU */
    if (resumed_or_init) out[DT_PHASE_STARTUP] += io;
    return 1;
}

static void num_or_null(cJSON *o, const char *k, int ok, double v) {
    if (ok && isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

void dt_memreport_json(cJSON *report, const dt_plan *plan, int rank, const dt_memprobe_report *pr) {
    int64_t prss, pdev, pph[DT_PHASE_COUNT];
    dt_memreport_predicted(plan, &prss, &pdev);
    /* start-up streams weights through the I/O chunk when it loads a checkpoint or a file */
    const int loads = pr->ph[DT_PHASE_CKPT_LOAD].runs > 0 || plan->output.init[0];
    const int per_phase = dt_memreport_phase_predicted(plan, rank, loads, pph);
    cJSON *rm = cJSON_AddObjectToObject(report, "real_memory");
    cJSON_AddStringToObject(rm, "probe", dt_probe_mode_name(pr->mode));
    cJSON_AddStringToObject(rm, "rss_source", pr->mode == DT_PROBE_RESET    ? DT_RSS_SOURCE
                                              : pr->mode == DT_PROBE_SAMPLE ? DT_RSS_SAMPLED
                                                                            : "none");
    cJSON_AddStringToObject(rm, "note", pr->note);
    if (pr->device) cJSON_AddStringToObject(rm, "device_source", DT_DEV_SOURCE);
    else cJSON_AddNullToObject(rm, "device_source");
    cJSON *pj = cJSON_AddObjectToObject(rm, "predicted");
    cJSON_AddStringToObject(pj, "source", prss >= 0 ? "plan" : "none");
    num_or_null(pj, "rss_total", prss >= 0, (double)prss);
    num_or_null(pj, "reserve", prss >= 0, (double)plan->prediction.memory.reserve);
    num_or_null(pj, "device_total", pdev >= 0, (double)pdev);
    /* CPU plans: per phase (the runtime term by phase); else the plan's total for all */
    cJSON_AddBoolToObject(pj, "per_phase", per_phase);
    if (per_phase) {
        int64_t comm, io;
        dt_zero_untracked_bytes(plan, rank, &comm, &io);
        cJSON *rj = cJSON_AddObjectToObject(pj, "runtime");
        cJSON_AddNumberToObject(rj, "base", (double)dt_hardware_runtime_bytes(&plan->cluster.hw,
                                                                                plan->parallel.world_size));
        cJSON_AddBoolToObject(rj, "base_measured", plan->cluster.hw.runtime_bytes > 0 || plan->cluster.hw.runtime_mpi_bytes > 0);
        cJSON_AddNumberToObject(rj, "comm", (double)comm);
        cJSON_AddNumberToObject(rj, "comm_tail", (double)dt_zero_untracked_tail(plan, rank));
        cJSON_AddNumberToObject(rj, "io", (double)io);
    }
    cJSON *ph = cJSON_AddObjectToObject(rm, "phases");
    for (int p = 0; p < DT_PHASE_COUNT; p++) {
        const dt_phase_stat *s = &pr->ph[p];
        cJSON *o = cJSON_AddObjectToObject(ph, dt_phase_name((dt_phase)p));
        const int ran = s->runs > 0, real = ran && s->rss_peak >= 0;
        cJSON_AddNumberToObject(o, "runs", (double)s->runs);
        num_or_null(o, "seconds", ran, s->seconds);
        num_or_null(o, "real_peak_rss", real, (double)s->rss_peak);
        cJSON *tj = cJSON_AddObjectToObject(o, "tracked");
        for (int c = 0; c < DT_MEM_CAT_COUNT; c++)
            num_or_null(tj, dt_mem_category_name((dt_mem_category)c), ran, (double)s->tracked[c]);
        num_or_null(tj, "total", ran, (double)s->tracked_total);
        num_or_null(o, "runtime", real, (double)(s->rss_peak - s->tracked_total));
        const int64_t pr_p = pph[p];
        num_or_null(o, "predicted_total", ran && pr_p >= 0, (double)pr_p);
        num_or_null(o, "real_minus_predicted", real && pr_p >= 0, (double)(s->rss_peak - pr_p));
        num_or_null(o, "diff_pct", real && pr_p > 0, 100.0 * (double)(s->rss_peak - pr_p) / (double)pr_p);
        if (!pr->device) continue;
        cJSON *dj = cJSON_AddObjectToObject(o, "device");
        const int dev = ran && s->dev_used_peak >= 0;
        num_or_null(dj, "driver_used_peak", dev, (double)s->dev_used_peak);
        num_or_null(dj, "tracked", dev, (double)s->dev_tracked);
        num_or_null(dj, "runtime", dev, (double)(s->dev_used_peak - s->dev_tracked));
        num_or_null(dj, "predicted_total", ran && pdev >= 0, (double)pdev);
        num_or_null(dj, "used_minus_predicted", dev && pdev >= 0, (double)(s->dev_used_peak - pdev));
    }
}

/* ---- the text table, from a rank's report ---- */

/* phase p's number at path "a" or "a.b" in MiB; NAN when absent or null */
static double mib_at(const cJSON *phases, int p, const char *a, const char *b) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(phases, dt_phase_name((dt_phase)p));
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, a) : NULL;
    if (v && b) v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsNumber(v) ? v->valuedouble / DT_MIB : NAN;
}

static void row(FILE *log, const char *label, const cJSON *phases, const char *a, const char *b) {
    fprintf(log, "  %-44s", label);
    for (int p = 0; p < DT_PHASE_COUNT; p++) {
        double v = mib_at(phases, p, a, b);
        if (isnan(v)) fprintf(log, " %10s", "-");
        else fprintf(log, " %10.2f", v);
    }
    fprintf(log, "\n");
}

static void print_rank(FILE *log, int rank, const cJSON *rm) {
    const cJSON *phases = cJSON_GetObjectItemCaseSensitive(rm, "phases");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(rm, "probe");
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(rm, "device_source");
    fprintf(log, "rank %-41d", rank);
    for (int p = 0; p < DT_PHASE_COUNT; p++) fprintf(log, " %10s", dt_phase_label((dt_phase)p));
    fprintf(log, "\n  %-44s", "runs");
    for (int p = 0; p < DT_PHASE_COUNT; p++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(phases, dt_phase_name((dt_phase)p));
        const cJSON *r = o ? cJSON_GetObjectItemCaseSensitive(o, "runs") : NULL;
        if (cJSON_IsNumber(r) && r->valuedouble > 0) fprintf(log, " %10.0f", r->valuedouble);
        else fprintf(log, " %10s", "-");
    }
    fprintf(log, "\n");
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++) {
        char label[64];
        snprintf(label, sizeof label, "tracked %s", dt_mem_category_name((dt_mem_category)c));
        row(log, label, phases, "tracked", dt_mem_category_name((dt_mem_category)c));
    }
    row(log, "tracked total (the engine's count)", phases, "tracked", "total");
    row(log, DT_RUNTIME_LABEL, phases, "runtime", NULL);
    row(log, cJSON_IsString(mode) && !strcmp(mode->valuestring, "sample") ? "real peak RSS (kernel, sampled)"
                                                                          : "real peak RSS (kernel)",
        phases, "real_peak_rss", NULL);
    row(log, "predicted (plan, this phase)", phases, "predicted_total", NULL);
    row(log, "real - predicted", phases, "real_minus_predicted", NULL);
    fprintf(log, "  %-44s", "real vs predicted");
    for (int p = 0; p < DT_PHASE_COUNT; p++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(phases, dt_phase_name((dt_phase)p));
        const cJSON *d = o ? cJSON_GetObjectItemCaseSensitive(o, "diff_pct") : NULL;
        if (cJSON_IsNumber(d)) fprintf(log, " %+9.1f%%", d->valuedouble);
        else fprintf(log, " %10s", "-");
    }
    fprintf(log, "\n");
    if (cJSON_IsString(dev)) {
        row(log, "device: tracked (device pool)", phases, "device", "tracked");
        row(log, "device " DT_DEV_RUNTIME_LABEL, phases, "device", "runtime");
        row(log, "device: used peak (driver)", phases, "device", "driver_used_peak");
        row(log, "device: predicted total (plan)", phases, "device", "predicted_total");
        row(log, "device: used - predicted", phases, "device", "used_minus_predicted");
    }
}

/* rank r's report, parsed; NULL with err set */
static cJSON *read_rank(const char *out_dir, int r, dt_error *err) {
    char path[DT_PATH_MAX + 48];
    if (r == 0) snprintf(path, sizeof path, "%s/run-report.json", out_dir);
    else snprintf(path, sizeof path, "%s/run-report-rank%05d.json", out_dir, r);
    char *txt = NULL;
    cJSON *j = NULL;
    int rc = dt_json_read_file(path, &txt, NULL, err) || dt_json_parse(txt, path, &j, err);
    free(txt);
    if (rc) return NULL;
    if (!cJSON_GetObjectItemCaseSensitive(j, "real_memory")) {
        cJSON_Delete(j);
        dt_errorf(err, DT_EINVAL, "%s: no \"real_memory\" section", path);
        return NULL;
    }
    return j;
}

/* the highest real peak of any phase in a rank's real_memory, bytes */
static double highest_peak(const cJSON *rm) {
    double m = 0;
    const cJSON *phases = cJSON_GetObjectItemCaseSensitive(rm, "phases");
    for (int p = 0; p < DT_PHASE_COUNT; p++) {
        double v = mib_at(phases, p, "real_peak_rss", NULL);
        if (!isnan(v) && v > m) m = v;
    }
    return m;
}

static void print_header(FILE *log, const cJSON *rm) {
    const cJSON *pj = cJSON_GetObjectItemCaseSensitive(rm, "predicted");
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(rm, "rss_source");
    const cJSON *note = cJSON_GetObjectItemCaseSensitive(rm, "note");
    const cJSON *res = pj ? cJSON_GetObjectItemCaseSensitive(pj, "reserve") : NULL;
    fprintf(log, "real memory per rank and phase, MiB; real peak RSS from the %s",
            cJSON_IsString(src) ? src->valuestring : "?");
    if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(rm, "device_source")))
        fprintf(log, "; device used from the %s", DT_DEV_SOURCE);
    fprintf(log, ".\n  tracked = what the engine counted of its own allocations at its peak in the phase; "
                 DT_RUNTIME_LABEL " = real - tracked.\n");
    const cJSON *pp = pj ? cJSON_GetObjectItemCaseSensitive(pj, "per_phase") : NULL;
    const cJSON *rt = pj ? cJSON_GetObjectItemCaseSensitive(pj, "runtime") : NULL;
    if (cJSON_IsTrue(pp) && rt) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(rt, "base"), *c = cJSON_GetObjectItemCaseSensitive(rt, "comm");
        const cJSON *io = cJSON_GetObjectItemCaseSensitive(rt, "io");
        fprintf(log, "  predicted = the plan's terms + the runtime term of the phase (rank 0's figures): runtime "
                     "%.2f MiB (%s), + MPI collective temporaries %.2f MiB in backward / optimizer, + I/O chunk "
                     "%.2f MiB in checkpoint save / load.\n",
                cJSON_IsNumber(b) ? b->valuedouble / DT_MIB : NAN,
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rt, "base_measured")) ? "measured by calibrate"
                                                                                    : "the profile's reserve",
                cJSON_IsNumber(c) ? c->valuedouble / DT_MIB : NAN, cJSON_IsNumber(io) ? io->valuedouble / DT_MIB : NAN);
    } else if (cJSON_IsNumber(res)) {
        fprintf(log, "  predicted = the plan's total for the rank (incl. its reserve of %.2f MiB), every phase.\n",
                res->valuedouble / DT_MIB);
    }
    if (cJSON_IsString(note) && note->valuestring[0]) fprintf(log, "  note: %s\n", note->valuestring);
}

int dt_memreport_print(const char *out_dir, int world, FILE *log, dt_error *err) {
    if (!log) return DT_OK;
    if (world < 1) world = 1;
    /* every rank up to DT_MEMREPORT_ALL_RANKS; beyond, rank 0 and the rank with the highest peak */
    int top = 0;
    if (world > DT_MEMREPORT_ALL_RANKS) {
        double best = -1;
        for (int r = 0; r < world; r++) {
            cJSON *j = read_rank(out_dir, r, err);
            if (!j) return err->code;
            double v = highest_peak(cJSON_GetObjectItemCaseSensitive(j, "real_memory"));
            if (v > best) {
                best = v;
                top = r;
            }
            cJSON_Delete(j);
        }
    }
    for (int r = 0; r < world; r++) {
        if (world > DT_MEMREPORT_ALL_RANKS && r != 0 && r != top) continue;
        cJSON *j = read_rank(out_dir, r, err);
        if (!j) return err->code;
        const cJSON *rm = cJSON_GetObjectItemCaseSensitive(j, "real_memory");
        if (r == 0) print_header(log, rm);
        print_rank(log, r, rm);
        cJSON_Delete(j);
    }
    if (world > DT_MEMREPORT_ALL_RANKS && top != 0)
        fprintf(log, "  (%d ranks: rank 0 and rank %d, the highest peak, shown; the others' tables are in "
                     "run-report-rank<r>.json)\n",
                world, top);
    else if (world > DT_MEMREPORT_ALL_RANKS)
        fprintf(log, "  (%d ranks: rank 0, the highest peak, shown; the others' tables are in "
                     "run-report-rank<r>.json)\n",
                world);
    return DT_OK;
}
