/* runreport.c — run-report.json: measured memory, step time and throughput next
 * to the plan's prediction (docs/dtrun.md "Output files"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cjson/cJSON.h>

#include "dt_gemm_cpu.h"
#include "dt_consts.h"
#include "dt_json.h"
#include "dt_memreport.h"
#include "dt_memtrack.h"
#include "dt_train.h"

#define DT_REPORT_FORMAT "dtrun.report/1"

void dt_run_measure_memory(dt_run_measure *m) {
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++) m->peak[c] = dt_mem_peak(DT_POOL_DEVICE, (dt_mem_category)c);
    m->peak_total = dt_mem_peak_total(DT_POOL_DEVICE);
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++) m->host_peak[c] = dt_mem_peak(DT_POOL_HOST, (dt_mem_category)c);
    m->host_peak_total = dt_mem_peak_total(DT_POOL_HOST);
    struct rusage ru;
    /* getrusage reports ru_maxrss in KiB on Linux */
    m->peak_rss_bytes = getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * (int64_t)DT_KIB : 0;
    /* the memory probe's per-phase resets restart ru_maxrss; it keeps the whole run's peak */
    int64_t probe_peak = dt_memprobe_process_peak();
    if (probe_peak > m->peak_rss_bytes) m->peak_rss_bytes = probe_peak;
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
    /* dtrun refreshes the prediction before it trains (dt_plan_refresh_prediction,
     * planner/dt_timemodel.h), so a plan reaching here without one was handed to
     * dt_train directly: nothing to compare against. */
    if (plan->prediction.valid) {
        pred = plan->prediction.memory;
    } else {
        have_pred = 0;
        source = "none";
        memset(&pred, 0, sizeof pred);
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
    /* "measured" above keeps its keys; the category figures are the engine's
     * count, so they appear again under the name that says so */
    cJSON *tk = cJSON_AddObjectToObject(r, "tracked");
    for (int i = 0; i < 6; i++) cJSON_AddNumberToObject(tk, names[i], (double)mv[i]);
    cJSON_AddNumberToObject(tk, "host_total", (double)m->host_peak_total);
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

    /* distributed: this rank, its host pool, and the bytes per collective */
    cJSON_AddNumberToObject(r, "rank", m->rank);
    cJSON_AddNumberToObject(r, "world_size", (double)(m->world > 0 ? m->world : 1));
    cJSON_AddNumberToObject(r, "zero_stage", plan->parallel.zero_stage);
    cJSON_AddStringToObject(r, "offload_optimizer", dt_offload_name(plan->parallel.offload_optimizer));
    cJSON_AddStringToObject(r, "offload_param", dt_offload_name(plan->parallel.offload_param));
    {
        /* the plan predicts the host pool per node: one rank's part is 1/gpus_per_node */
        const int64_t n = plan->cluster.gpus_per_node > 0 ? plan->cluster.gpus_per_node : 1;
        const dt_mem_category hc[3] = {DT_MEM_PARAMS, DT_MEM_OPTIMIZER, DT_MEM_BUFFERS};
        const int64_t hp[3] = {pred.host_params / n, pred.host_optimizer / n, pred.host_buffers / n};
        cJSON *h = cJSON_AddObjectToObject(r, "host");
        cJSON *hpj = cJSON_AddObjectToObject(h, "predicted");
        cJSON *hmj = cJSON_AddObjectToObject(h, "measured");   /* the old key of "tracked" */
        cJSON *htj = cJSON_AddObjectToObject(h, "tracked");
        cJSON *hdj = cJSON_AddObjectToObject(h, "diff_pct");
        for (int i = 0; i < 3; i++) {
            const char *nm = dt_mem_category_name(hc[i]);
            /* the trainer's reading of the device's host pool (pinned memory on CUDA) */
            int64_t mv2 = m->host_peak[hc[i]];
            if (have_pred) cJSON_AddNumberToObject(hpj, nm, (double)hp[i]);
            else cJSON_AddNullToObject(hpj, nm);
            cJSON_AddNumberToObject(hmj, nm, (double)mv2);
            cJSON_AddNumberToObject(htj, nm, (double)mv2);
            if (have_pred) add_num_or_null(hdj, nm, pct(mv2, hp[i]));
            else cJSON_AddNullToObject(hdj, nm);
        }
        cJSON_AddNumberToObject(hmj, "total", (double)m->host_peak_total);
        cJSON_AddNumberToObject(htj, "total", (double)m->host_peak_total);
    }
    int64_t pc[DT_COLL_COUNT];
    const char *csrc = "plan";
    if (plan->prediction.valid) {
        memcpy(pc, plan->prediction.comm_bytes, sizeof pc);
    } else {
        memset(pc, 0, sizeof pc);
        csrc = "none";
    }
    if (m->have_comm) {
        cJSON *cm = cJSON_AddObjectToObject(r, "comm");
        cJSON_AddStringToObject(cm, "source", csrc);
        cJSON *cp = cJSON_AddObjectToObject(cm, "predicted_bytes_per_step");
        cJSON *cmm = cJSON_AddObjectToObject(cm, "measured_bytes_per_step");
        int equal = strcmp(csrc, "none") != 0;
        for (int c = 0; c < DT_COLL_COUNT; c++) {
            const char *nm = dt_collective_name((dt_collective)c);
            if (strcmp(csrc, "none") != 0) cJSON_AddNumberToObject(cp, nm, (double)pc[c]);
            else cJSON_AddNullToObject(cp, nm);
            cJSON_AddNumberToObject(cmm, nm, (double)m->comm_bytes[c]);
            if (m->comm_bytes[c] != pc[c]) equal = 0;
        }
        cJSON_AddBoolToObject(cm, "equal", equal);
        cJSON_AddBoolToObject(cm, "same_every_step", m->comm_constant);
        add_num_or_null(cm, "time_s_per_step", m->comm_time_s);
        add_num_or_null(cm, "share_of_step", m->step_time_s > 0 ? m->comm_time_s / m->step_time_s : NAN);
        if (plan->prediction.valid) {
            add_num_or_null(cm, "predicted_exposed_s", plan->prediction.time.comm_exposed_s);
            add_num_or_null(cm, "predicted_share_of_step",
                            plan->prediction.time.step_s > 0
                                ? plan->prediction.time.comm_exposed_s / plan->prediction.time.step_s
                                : NAN);
        }
    }

    cJSON *l = cJSON_AddObjectToObject(r, "loss");
    add_num_or_null(l, "first", m->first_loss);
    add_num_or_null(l, "last", m->last_loss);
    add_num_or_null(l, "valid", m->last_valid_loss);

    /* the CPU GEMM kernels this process chose at start-up (dt_gemm_cpu.h) */
    char gemm_desc[512] = "";
    if (plan->cluster.device == DT_DEVICE_CPU) {
        const dt_gemm_choice *gc = dt_gemm_cpu_choice();
        cJSON *gj = cJSON_AddObjectToObject(r, "gemm");
        cJSON_AddStringToObject(gj, "fp32", dt_gemm_kernel_name(gc->f32));
        cJSON_AddStringToObject(gj, "bf16", dt_gemm_kernel_name(gc->bf16));
        cJSON_AddBoolToObject(gj, "forced", gc->forced);
        cJSON_AddStringToObject(gj, "openblas_core", gc->openblas_core);
        cJSON_AddStringToObject(gj, "onednn_version", gc->onednn_version);
        cJSON_AddStringToObject(gj, "onednn_isa", gc->onednn_isa);
        cJSON_AddStringToObject(gj, "text", dt_gemm_cpu_describe(gemm_desc, sizeof gemm_desc));
    }

    dt_memreport_json(r, plan, m->rank, &m->probe);   /* real memory per phase: kernel and driver */
    char *txt = dt_json_print(r);
    cJSON_Delete(r);
    if (!txt) return dt_errorf(err, DT_ENOMEM, "run report: out of memory");
    int rc = dt_json_write_file_atomic(path, txt, err);
    free(txt);
    if (rc || !log) return rc;

    fprintf(log, "memory per rank (device pool, MiB), predicted (%s) vs tracked peak (the engine's count):\n",
            source);
    for (int i = 0; i < 6; i++) {
        if (have_pred)
            fprintf(log, "  %-12s %12.3f %12.3f  %+7.2f%%\n", names[i], (double)pv[i] / DT_MIB,
                    (double)mv[i] / DT_MIB, pct(mv[i], pv[i]));
        else
            fprintf(log, "  %-12s %12s %12.3f\n", names[i], "-", (double)mv[i] / DT_MIB);
    }
    fprintf(log, "  real peak RSS %.1f MiB (kernel, whole run), step %.1f ms, %.0f tokens/s\n",
            (double)m->peak_rss_bytes / DT_MIB,
            m->step_time_s * 1e3, m->tokens_per_s);
    if (gemm_desc[0]) fprintf(log, "  gemm: %s\n", gemm_desc);
    return DT_OK;
}
