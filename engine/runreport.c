/* runreport.c — run-report.json: measured memory, step time and throughput next
 * to the plan's prediction (DESIGN §1: the product's central claim). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cjson/cJSON.h>

#include "dt_json.h"
#include "dt_memory.h"
#include "dt_memtrack.h"
#include "dt_train.h"

#define DT_REPORT_FORMAT "dtrun.report/1"
#define DT_KIB 1024   /* getrusage reports ru_maxrss in KiB on Linux */
#define DT_MIB (1024.0 * 1024.0)

void dt_run_measure_memory(dt_run_measure *m) {
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++) m->peak[c] = dt_mem_peak(DT_POOL_DEVICE, (dt_mem_category)c);
    m->peak_total = dt_mem_peak_total(DT_POOL_DEVICE);
    m->host_peak_total = dt_mem_peak_total(DT_POOL_HOST);
    struct rusage ru;
    m->peak_rss_bytes = getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * DT_KIB : 0;
}

static double pct(int64_t measured, int64_t predicted) {
    if (predicted == 0) return measured == 0 ? 0.0 : NAN;
    return 100.0 * (double)(measured - predicted) / (double)predicted;
}

static void add_num_or_null(cJSON *o, const char *k, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

int dt_run_report_write(const char *path, const dt_plan *plan, const char *plan_path,
                        const dt_run_measure *m, FILE *log, dt_error *err) {
    dt_mem_breakdown pred;
    const char *source = "plan";
    int have_pred = 1;
    if (plan->prediction.valid) {
        pred = plan->prediction.memory;
    } else {
        dt_error e2;
        dt_error_clear(&e2);
        if (dt_memory_estimate(plan, &pred, &e2) == DT_OK) {
            source = "recomputed";   /* the plan carried no (or a stale) prediction */
        } else {
            have_pred = 0;
            source = "none";
            memset(&pred, 0, sizeof pred);
        }
    }
    /* The engine has no "reserve" allocation (runtime context / allocator slack),
     * so totals compare against the predicted total without it. */
    int64_t pv[6] = {pred.params, pred.grads, pred.optimizer, pred.activations, pred.buffers,
                     pred.total - pred.reserve};
    int64_t mv[6] = {m->peak[0], m->peak[1], m->peak[2], m->peak[3], m->peak[4], m->peak_total};
    const char *names[6] = {"params", "grads", "optimizer", "activations", "buffers", "total"};

    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "format", DT_REPORT_FORMAT);
    cJSON_AddStringToObject(r, "plan", plan_path ? plan_path : "");
    cJSON_AddStringToObject(r, "model", plan->model.name);
    cJSON_AddStringToObject(r, "precision", dt_precision_preset_name(plan->precision.preset));
    cJSON_AddNumberToObject(r, "micro_batch", (double)plan->batch.micro_batch);
    cJSON_AddNumberToObject(r, "grad_accum", (double)plan->batch.grad_accum);
    cJSON_AddNumberToObject(r, "seq_len", (double)plan->batch.seq_len);
    cJSON_AddNumberToObject(r, "ckpt_layers", (double)plan->activations.ckpt_layers);
    cJSON_AddNumberToObject(r, "steps", (double)m->steps);

    cJSON *p = cJSON_AddObjectToObject(r, "predicted");
    cJSON_AddStringToObject(p, "source", source);
    for (int i = 0; i < 6; i++) {
        if (have_pred) cJSON_AddNumberToObject(p, names[i], (double)pv[i]);
        else cJSON_AddNullToObject(p, names[i]);
    }
    if (have_pred) cJSON_AddNumberToObject(p, "reserve", (double)pred.reserve);
    if (plan->prediction.valid) {
        add_num_or_null(p, "step_time_s", plan->prediction.time.step_s);
        add_num_or_null(p, "tokens_per_s", plan->prediction.time.tokens_per_s);
    }

    cJSON *me = cJSON_AddObjectToObject(r, "measured");
    for (int i = 0; i < 6; i++) cJSON_AddNumberToObject(me, names[i], (double)mv[i]);
    cJSON_AddNumberToObject(me, "host_total", (double)m->host_peak_total);
    cJSON_AddNumberToObject(me, "peak_rss_bytes", (double)m->peak_rss_bytes);
    add_num_or_null(me, "step_time_s", m->step_time_s);
    add_num_or_null(me, "tokens_per_s", m->tokens_per_s);

    cJSON *d = cJSON_AddObjectToObject(r, "diff_pct");
    for (int i = 0; i < 6; i++) {
        if (have_pred) add_num_or_null(d, names[i], pct(mv[i], pv[i]));
        else cJSON_AddNullToObject(d, names[i]);
    }
    if (plan->prediction.valid && plan->prediction.time.step_s > 0 && m->step_time_s > 0)
        cJSON_AddNumberToObject(d, "step_time_s",
                                100.0 * (m->step_time_s - plan->prediction.time.step_s) /
                                    plan->prediction.time.step_s);

    cJSON *l = cJSON_AddObjectToObject(r, "loss");
    add_num_or_null(l, "first", m->first_loss);
    add_num_or_null(l, "last", m->last_loss);
    add_num_or_null(l, "valid", m->last_valid_loss);

    char *txt = dt_json_print(r);
    cJSON_Delete(r);
    if (!txt) return dt_errorf(err, DT_ENOMEM, "run report: out of memory");
    int rc = dt_json_write_file_atomic(path, txt, err);
    free(txt);
    if (rc || !log) return rc;

    fprintf(log, "memory per rank (device, MiB), predicted (%s) vs measured peak:\n", source);
    for (int i = 0; i < 6; i++) {
        if (have_pred)
            fprintf(log, "  %-12s %12.3f %12.3f  %+7.2f%%\n", names[i], (double)pv[i] / DT_MIB,
                    (double)mv[i] / DT_MIB, pct(mv[i], pv[i]));
        else
            fprintf(log, "  %-12s %12s %12.3f\n", names[i], "-", (double)mv[i] / DT_MIB);
    }
    fprintf(log, "  peak RSS %.1f MiB, step %.1f ms, %.0f tokens/s\n", (double)m->peak_rss_bytes / DT_MIB,
            m->step_time_s * 1e3, m->tokens_per_s);
    return DT_OK;
}
