/* cmd_simulate.c — `dtplan simulate plan.json [--trace FILE] [--plot FILE] [--json]`:
 * one optimizer step as a discrete-event simulation (dt_simulate.h), compared with
 * the closed-form time and memory models. docs/simulate.md. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_cli.h"
#include "dt_cli_ft.h"
#include "dt_cli_obj.h"
#include "dt_consts.h"
#include "dt_json.h"
#include "dt_layout.h"
#include "dt_memory.h"
#include "dt_objplan.h"
#include "dt_parallel3d.h"
#include "dt_report_charts.h"
#include "dt_simulate.h"
#include "dt_timemodel.h"
#include "dt_trace.h"


static int usage(FILE *f) {
    fprintf(f,
            "usage: dtplan simulate PLAN.json [--runtime R] [--detail] [--trace FILE.json] [--plot FILE.png|.svg] [--json]\n"
            "  Simulates one optimizer step on one rank event by event (compute, communication,\n"
            "  transfers, CPU optimizer) and device memory over time; compares with the\n"
            "  closed-form time and memory models.\n"
            "  --trace FILE   Chrome trace-event JSON (Perfetto / chrome://tracing)\n"
            "  --plot FILE    timeline (Gantt by stream) and memory over time, PNG or SVG\n"
            "  --detail       every segment of the critical path (default: a summary, the 5 largest\n"
            "                 contributors by phase and kind)\n"
            "  --json         machine-readable summary on stdout\n"
            "  --runtime R    simulate the plan as run by dtrun | deepspeed | fsdp | megatron (default: the plan's own;\n"
            "                 another runtime takes its defaults, docs/memory-model.md \"Runtime profiles\")\n"
            "       dtplan simulate --config FILE.yaml [estimate's options] [--detail] [--trace F] [--plot F] [--json]\n"
            "  --config FILE  simulate the configuration a LLaMA-Factory / HF TrainingArguments / runbook config\n"
            "                 runs (as dtplan estimate --config builds it); --config-format F as estimate's\n"
            "  --finetune M and its settings: simulate the plan under another fine-tuning method (below;\n"
            "                 default: the plan's own)\n"
            "  --objective O and its settings: simulate the plan under another objective (below; default:\n"
            "                 the plan's own); generation and the other models' forwards are phases of the step\n");
    if (f == stdout) dt_ft_usage(f), dt_obj_usage(f);
    return f == stdout ? 0 : 2;
}


/* The unit a parameter-unit index names: "embeddings", "block.N" (1-based), "head". */
static const char *unit_label(const dt_plan *p, int u, char *buf, size_t n) {
    if (u < 0) return NULL;
    if (u == 0) snprintf(buf, n, "embeddings");
    else if (u <= p->model.n_layer) snprintf(buf, n, "block.%d", u);
    else snprintf(buf, n, "head");
    return buf;
}

static int write_trace(const dt_plan *p, const dt_sim_result *r, const char *path, dt_error *err) {
    dt_trace *t = dt_trace_new();
    if (!t) return dt_errorf(err, DT_ENOMEM, "trace: out of memory");
    int rc = DT_OK;
    for (int s = 0; s < DT_SIM_STREAMS && !rc; s++) rc = dt_trace_thread_name(t, 0, s, dt_sim_stream_name(s), err);
    for (int i = 0; i < r->n_events && !rc; i++) {
        const dt_sim_event *e = &r->events[i];
        char ub[32];
        dt_trace_span sp = {dt_sim_kind_name(e->kind), dt_sim_stream_name(e->stream), 0, (int)e->stream,
                            e->t0_s * DT_US_PER_S, (e->t1_s - e->t0_s) * DT_US_PER_S,
                            unit_label(p, e->unit, ub, sizeof ub), e->micro,
                            e->bytes > 0 ? e->bytes : -1};
        rc = dt_trace_add_span(t, &sp, err);
    }
    const char *keys[DT_SIMMEM_COUNT];
    for (int c = 0; c < DT_SIMMEM_COUNT; c++) keys[c] = dt_sim_mem_name(c);
    for (int i = 0; i < r->n_mem && !rc; i++) {
        double v[DT_SIMMEM_COUNT];
        for (int c = 0; c < DT_SIMMEM_COUNT; c++) v[c] = (double)r->mem[i].bytes[c] / DT_MIB;
        rc = dt_trace_add_counter(t, "device memory (MiB)", 0, r->mem[i].t_s * DT_US_PER_S, DT_SIMMEM_COUNT, keys, v,
                                  err);
    }
    if (!rc) rc = dt_trace_write(t, path, err);
    dt_trace_free(t);
    return rc;
}

static int write_plot(const dt_plan *p, const dt_sim_result *r, const char *path, dt_error *err) {
    static const dt_timeline_stream stream_of[DT_SIM_STREAMS] = {DT_TL_COMPUTE, DT_TL_COMM, DT_TL_H2D, DT_TL_CPU_OPT};
    static const dt_timeline_kind kind_of[DT_SIM_KINDS] = {
        DT_TL_FORWARD,   DT_TL_BACKWARD, DT_TL_RECOMPUTE, DT_TL_ALLREDUCE, DT_TL_REDUCE_SCATTER,
        DT_TL_ALLGATHER, DT_TL_COPY_H2D, DT_TL_COPY_D2H,  DT_TL_COPY_H2D,  DT_TL_OPTIMIZER};
    dt_timeline_event *ev = malloc(sizeof *ev * (size_t)(r->n_events > 0 ? r->n_events : 1));
    dt_timeline_mem *mem = malloc(sizeof *mem * (size_t)(r->n_mem > 0 ? r->n_mem : 1));
    if (!ev || !mem) {
        free(ev);
        free(mem);
        return dt_errorf(err, DT_ENOMEM, "plot: out of memory");
    }
    for (int i = 0; i < r->n_events; i++)
        ev[i] = (dt_timeline_event){stream_of[r->events[i].stream], kind_of[r->events[i].kind], r->events[i].t0_s,
                                    r->events[i].t1_s};
    for (int i = 0; i < r->n_mem; i++) mem[i] = (dt_timeline_mem){r->mem[i].t_s, r->mem[i].total};
    char title[160];
    snprintf(title, sizeof title, "%s, ZeRO-%d, %lld rank(s), one step (simulated)", p->model.name,
             p->parallel.zero_stage, (long long)p->parallel.world_size);
    int rc = dt_chart_step_timeline(path, title, r->n_events, ev, r->n_mem, mem, 0, DT_UNITS_GIB, err);
    free(ev);
    free(mem);
    return rc;
}

/* Critical path summary: time per (phase, kind) over the whole path, the largest
 * DT_SIM_TOP first; --detail prints every segment (print_critical). */
#define DT_SIM_TOP 5
static void print_critical_summary(const dt_sim_result *r) {
    enum { MAXG = 64 };
    typedef struct { const char *phase; int kind, n; double s; } group;
    group g[MAXG];
    int ng = 0, segs = 0;
    double total = 0;
    for (int i = 0; i < r->n_critical; i++) {
        const dt_sim_event *e = &r->events[r->critical[i]];
        double d = e->t1_s - e->t0_s;
        total += d;
        if (i == 0 || e->kind != r->events[r->critical[i - 1]].kind ||
            strcmp(e->phase, r->events[r->critical[i - 1]].phase))
            segs++;
        int k = 0;
        while (k < ng && !(g[k].kind == (int)e->kind && !strcmp(g[k].phase, e->phase))) k++;
        if (k == ng) {
            if (ng == MAXG) continue;
            g[ng].phase = e->phase, g[ng].kind = (int)e->kind, g[ng].n = 0, g[ng].s = 0, ng++;
        }
        g[k].n++, g[k].s += d;
    }
    printf("critical path   %12.3f ms in %d segments (%d events); largest contributors:\n", total * DT_MS_PER_S, segs,
           r->n_critical);
    for (int t = 0; t < DT_SIM_TOP && t < ng; t++) {
        int best = t;
        for (int k = t + 1; k < ng; k++)
            if (g[k].s > g[best].s) best = k;
        if (best != t) {
            group tmp = g[t];
            g[t] = g[best], g[best] = tmp;
        }
        printf("  %-9s %-15s x%-4d %12.3f ms  %5.1f %%\n", g[t].phase, dt_sim_kind_name((dt_sim_kind)g[t].kind),
               g[t].n, g[t].s * DT_MS_PER_S, total > 0 ? 100.0 * g[t].s / total : 0.0);
    }
    if (ng > DT_SIM_TOP) printf("  (%d more; --detail prints every segment)\n", ng - DT_SIM_TOP);
    else printf("  (--detail prints every segment)\n");
}

/* Critical path, consecutive events of the same kind and phase merged. */
static void print_critical(const dt_sim_result *r) {
    printf("critical path:\n");
    for (int i = 0; i < r->n_critical;) {
        const dt_sim_event *e = &r->events[r->critical[i]];
        int j = i;
        double dur = 0;
        while (j < r->n_critical && r->events[r->critical[j]].kind == e->kind &&
               r->events[r->critical[j]].phase == e->phase) {
            dur += r->events[r->critical[j]].t1_s - r->events[r->critical[j]].t0_s;
            j++;
        }
        printf("  %-9s %-15s x%-4d %12.3f ms  (from %.3f ms)\n", e->phase, dt_sim_kind_name(e->kind), j - i,
               dur * DT_MS_PER_S, e->t0_s * DT_MS_PER_S);
        i = j;
    }
}

/* Closed-form category of a simulated memory category. */
static const char *closed_form_cat(int c) {
    switch (c) {
    case DT_SIMMEM_PARAMS: return "params";
    case DT_SIMMEM_GRADS: return "grads";
    case DT_SIMMEM_OPTIMIZER: return "optimizer";
    case DT_SIMMEM_ACTIVATIONS: return "activations";
    case DT_SIMMEM_RESERVE: return "reserve";
    default: return "buffers";
    }
}

/* Columns of the per-stage schedule drawing. */
#define PIPE_COLUMNS 100

/* A layout plan: the pipeline schedule stage by stage (dt_p3_pipeline), drawn as one line
 * per stage (F forward, B backward, '.' idle), against the time model's step. */
static int simulate_layout(const dt_plan *p, int json) {
    dt_error e;
    dt_error_clear(&e);
    dt_time_breakdown tb;
    if (dt_time_estimate(p, &tb, &e)) return dt_cli_fail(2, "%s", e.msg);
    char lay[320];
    dt_p3_describe(p, lay, sizeof lay);
    if (p->layout.pp <= 1) {
        if (json) printf("{\n  \"model_step_s\": %.9g,\n  \"pipeline\": false\n}\n", tb.step_s);
        else printf("layout %s: no pipeline to schedule; the step is the time model's %.3f ms\n", lay,
                    tb.step_s * DT_MS_PER_S);
        return 0;
    }
    dt_p3_pipe pp;
    if (dt_p3_pipeline(p, &pp, &e)) return dt_cli_fail_err(e.code, &e);
    const int per = pp.n_pass / (int)p->layout.pp;
    if (json) {
        printf("{\n  \"pipeline_s\": %.9g,\n  \"model_step_s\": %.9g,\n  \"stage0_bubble\": %.9g,\n  \"passes\": %d\n}\n",
               pp.step_s, tb.step_s, pp.bubble_frac, pp.n_pass);
        dt_p3_pipe_free(&pp);
        return 0;
    }
    printf("simulated pipeline of %s: %s\n", p->model.name, lay);
    const double bub = (double)(p->layout.pp - 1) / (double)(p->layout.vpp > 0 ? p->layout.vpp : 1) /
                       (double)p->batch.grad_accum;
    printf("micro-batches %lld per step; %d passes; forward+backward passes end at %.3f ms; stage 0 idle %.1f %% "
           "of it (the bubble (p-1)/(v m) = %.1f %% of the ideal time is %.1f %% of the step)\n",
           (long long)p->batch.grad_accum, pp.n_pass, pp.step_s * DT_MS_PER_S, 100.0 * pp.bubble_frac, 100.0 * bub,
           100.0 * bub / (1.0 + bub));
    printf("time model step %.3f ms (the passes + exposed DP / p2p communication + optimizer)\n", tb.step_s * DT_MS_PER_S);
    printf("schedule, one column = %.3f ms (F forward, B backward, . idle):\n", pp.step_s * DT_MS_PER_S / PIPE_COLUMNS);
    for (int s = 0; s < (int)p->layout.pp; s++) {
        char row[PIPE_COLUMNS + 1];
        memset(row, '.', PIPE_COLUMNS);
        row[PIPE_COLUMNS] = '\0';
        for (int k = 0; k < per; k++) {
            const dt_p3_pass *ps = &pp.pass[s * per + k];
            int c0 = (int)(ps->t0_s / pp.step_s * PIPE_COLUMNS), c1 = (int)(ps->t1_s / pp.step_s * PIPE_COLUMNS);
            for (int c = c0; c <= c1 && c < PIPE_COLUMNS; c++) row[c] = ps->backward ? 'B' : 'F';
        }
        printf("  stage %3d |%s|\n", s, row);
    }
    dt_p3_pipe_free(&pp);
    return 0;
}

/* simulate's own options; a plan path only when plan_path is non-NULL. */
typedef struct {
    const char *plan_path, *trace, *plot, *runtime;
    int json, detail;
    dt_ft_args fta;   /* --finetune and its settings: the plan under another method */
    dt_obj_args oba;  /* --objective and its settings: the plan under another objective */
} sim_opts;

static int parse_sim_opts(int argc, char **argv, int want_path, sim_opts *o) {
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), -1;
        int ft = dt_ft_args_take(&o->fta, argc, argv, &i, "simulate");
        if (!ft) ft = dt_obj_args_take(&o->oba, argc, argv, &i, "simulate");
        if (ft == 2) return 2;
        if (ft) continue;
        if (!strcmp(argv[i], "--json")) o->json = 1;
        else if (!strcmp(argv[i], "--detail")) o->detail = 1;
        else if (!strcmp(argv[i], "--runtime")) {
            if (!(o->runtime = dt_cli_value(argc, argv, &i, "simulate"))) return 2;
        } else if (!strcmp(argv[i], "--trace") || !strcmp(argv[i], "--plot")) {
            int is_trace = !strcmp(argv[i], "--trace");
            const char *v = dt_cli_value(argc, argv, &i, "simulate");
            if (!v) return 2;
            *(is_trace ? &o->trace : &o->plot) = v;
        } else if (argv[i][0] == '-') return dt_cli_fail(2, "simulate: unknown option '%s' (see dtplan simulate --help)", argv[i]);
        else if (!want_path) return dt_cli_fail(2, "simulate: with --config, no plan file ('%s')", argv[i]);
        else if (o->plan_path) return dt_cli_fail(2, "simulate: one plan only ('%s' and '%s')", o->plan_path, argv[i]);
        else o->plan_path = argv[i];
    }
    if (want_path && !o->plan_path) return dt_cli_fail(2, "simulate: no plan given (usage: dtplan simulate PLAN.json)");
    dt_error e;
    dt_error_clear(&e);
    if (o->plot && dt_cli_check_plot_name("--plot", o->plot, "timeline.png", &e)) return dt_cli_fail(2, "%s", e.msg);
    return 0;
}

static int simulate_run(dt_plan p, const sim_opts *o);

int dt_cmd_simulate(int argc, char **argv) {
    sim_opts o;
    int rc = parse_sim_opts(argc, argv, 1, &o);
    if (rc) return rc < 0 ? 0 : rc;
    dt_error e;
    dt_error_clear(&e);
    dt_runtime_kind kind = DT_RUNTIME_DTRUN;
    if (o.runtime && dt_runtime_parse(o.runtime, &kind, &e)) return dt_cli_fail(2, "simulate: %s", e.msg);
    dt_plan p;
    if (dt_plan_load(o.plan_path, &p, &e)) return dt_cli_fail(2, "%s", e.msg);
    if (o.runtime && kind != p.runtime.kind) {
        /* the plan under another runtime, with that runtime's defaults */
        dt_plan_set_runtime(&p, kind);
        p.activations.selective = 0;
        p.prediction.valid = 0;
        if (dt_plan_validate(&p, &e))
            return dt_cli_fail(2, "simulate: --runtime %s cannot run %s: %s", o.runtime, o.plan_path, e.msg);
    }
    return simulate_run(p, &o);
}

int dt_simulate_plan(dt_plan *p, int argc, char **argv) {
    sim_opts o;
    int rc = parse_sim_opts(argc, argv, 0, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.runtime) return dt_cli_fail(2, "simulate: with --config, --runtime is the plan's (give it before the config's)");
    return simulate_run(*p, &o);
}

static int simulate_run(dt_plan p, const sim_opts *o) {
    const char *trace = o->trace, *plot = o->plot;
    const int json = o->json, detail = o->detail;
    dt_error e;
    dt_error_clear(&e);
    if (dt_layout_active(&p)) return simulate_layout(&p, json);
    if (o->fta.given) {   /* the plan under another method, priced afresh */
        if (dt_ft_args_apply(&o->fta, &p)) return 2;
        p.prediction.valid = 0;
    }
    if (o->oba.given) {   /* the plan under another objective, priced afresh */
        if (dt_obj_args_apply(&o->oba, &p)) return 2;
        p.prediction.valid = 0;
    }
    /* an objective: the simulator replays the policy's training at its shape (pairs: 2 x
     * micro-batch); generation and the other models' forwards are phases before it */
    dt_obj_terms ot;
    dt_plan shaped = p;
    int64_t np = 0;
    dt_objplan_terms(&p, &ot);
    if (dt_objplan_active(&p)) {
        dt_objplan_shape(&p, &np, &shaped);
        if (dt_objplan_time(&p, &ot, &e)) return dt_cli_fail(2, "%s", e.msg);
    }
    const double obj_s = dt_objplan_step_s(&ot);
    dt_chart_set_device(p.cluster.device);
    dt_time_breakdown tb;
    dt_mem_breakdown mb;
    if (dt_time_estimate(&p, &tb, &e) || dt_memory_estimate(&p, &mb, &e)) return dt_cli_fail(2, "%s", e.msg);
    dt_sim_result r;
    if (dt_simulate(&shaped, &r, &e)) return dt_cli_fail_err(e.code, &e);

    int rc = 0;
    if (trace && write_trace(&p, &r, trace, &e)) rc = dt_cli_fail_err(e.code, &e);
    if (!rc && plot && write_plot(&p, &r, plot, &e)) rc = dt_cli_fail(2, "%s", e.msg);
    if (rc) { dt_sim_free(&r); return rc; }

    const dt_sim_mem_sample *pk = &r.mem[r.peak_index];
    r.step_s += obj_s;   /* the objective's phases run before the simulated training (0 for pt / sft) */
    const double dt_pct = tb.step_s > 0 ? 100.0 * (r.step_s - tb.step_s) / tb.step_s : 0.0;
    const int64_t dm = pk->total - mb.total;
    const double exposed_pct = r.step_s > 0 ? 100.0 * r.comm_exposed_s / r.step_s : 0.0;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step_s", r.step_s);
        cJSON_AddNumberToObject(o, "model_step_s", tb.step_s);
        cJSON_AddNumberToObject(o, "step_diff_pct", dt_pct);
        cJSON_AddNumberToObject(o, "compute_busy_s", r.compute_busy_s);
        cJSON_AddNumberToObject(o, "comm_s", r.comm_s);
        cJSON_AddNumberToObject(o, "comm_exposed_s", r.comm_exposed_s);
        cJSON_AddNumberToObject(o, "model_comm_exposed_s", tb.comm_exposed_s);
        cJSON_AddNumberToObject(o, "comm_exposed_pct", exposed_pct);
        cJSON_AddNumberToObject(o, "peak_bytes", (double)pk->total);
        cJSON_AddNumberToObject(o, "peak_t_s", pk->t_s);
        cJSON_AddNumberToObject(o, "model_peak_bytes", (double)mb.total);
        cJSON *cats = cJSON_AddObjectToObject(o, "peak_categories");
        for (int c = 0; c < DT_SIMMEM_COUNT; c++) cJSON_AddNumberToObject(cats, dt_sim_mem_name(c), (double)pk->bytes[c]);
        cJSON_AddNumberToObject(o, "events", r.n_events);
        if (dt_objplan_active(&p)) {
            cJSON *ph = cJSON_AddObjectToObject(o, "objective_phases_s");
            cJSON_AddNumberToObject(ph, "prefill", ot.prefill_s);
            cJSON_AddNumberToObject(ph, "decode", ot.decode_s);
            cJSON_AddNumberToObject(ph, "reference_forwards", ot.ref_fwd_s);
            cJSON_AddNumberToObject(ph, "critic", ot.critic_s);
            cJSON_AddNumberToObject(ph, "training", r.step_s - obj_s);
        }
        char *txt = dt_json_print(o);
        cJSON_Delete(o);
        if (txt) printf("%s\n", txt);
        free(txt);
        dt_sim_free(&r);
        return txt ? 0 : 1;
    }
    printf("simulated step of %s: ZeRO-%d, %lld rank(s), micro %lld x accum %lld, %lld checkpointed layers, "
           "%d events\n",
           p.model.name, p.parallel.zero_stage, (long long)p.parallel.world_size, (long long)p.batch.micro_batch,
           (long long)p.batch.grad_accum, (long long)p.activations.ckpt_layers, r.n_events);
    dt_ft_print_summary(&p, "finetune        ");
    dt_vlm_print_summary(&p, "vision          ");
    dt_obj_print_summary(&p, "objective       ");
    if (dt_objplan_active(&p))
        printf("phases          generation %.3f ms (prefill %.3f + decode %.3f), reference/reward/critic forwards "
               "%.3f ms, critic training %.3f ms, then the policy's training %.3f ms (simulated below)\n",
               (ot.prefill_s + ot.decode_s) * DT_MS_PER_S, ot.prefill_s * DT_MS_PER_S, ot.decode_s * DT_MS_PER_S,
               ot.ref_fwd_s * DT_MS_PER_S, ot.critic_s * DT_MS_PER_S, (r.step_s - obj_s) * DT_MS_PER_S);
    if (p.runtime.kind != DT_RUNTIME_DTRUN)
        printf("runtime         %s, %s attention%s (the closed form's memory is its largest phase)\n",
               dt_runtime_name(p.runtime.kind), dt_attn_kernel_name(p.runtime.attention),
               p.activations.selective ? ", selective recompute" : "");
    printf("step time       %12.3f ms   (time model %.3f ms, %+.2f %%)\n", r.step_s * DT_MS_PER_S, tb.step_s * DT_MS_PER_S,
           dt_pct);
    printf("compute busy    %12.3f ms\n", r.compute_busy_s * DT_MS_PER_S);
    printf("communication   %12.3f ms   exposed %.3f ms = %.1f %% of the step (time model exposed %.3f ms)\n",
           r.comm_s * DT_MS_PER_S, r.comm_exposed_s * DT_MS_PER_S, exposed_pct, tb.comm_exposed_s * DT_MS_PER_S);
    if (detail) print_critical(&r);
    else print_critical_summary(&r);
    printf("peak device memory %.1f MiB at %.3f ms (closed form %.1f MiB, %+.1f MiB)\n", (double)pk->total / DT_MIB,
           pk->t_s * DT_MS_PER_S, (double)mb.total / DT_MIB, (double)dm / DT_MIB);
    printf("live at the peak:\n");
    for (int c = 0; c < DT_SIMMEM_COUNT; c++)
        if (pk->bytes[c]) printf("  %-12s %12.1f MiB  (closed form: %s)\n", dt_sim_mem_name(c), (double)pk->bytes[c] / DT_MIB,
                                 closed_form_cat(c));
    int64_t sim_buf = pk->bytes[DT_SIMMEM_GATHERED] + pk->bytes[DT_SIMMEM_UNIT_GRADS] + pk->bytes[DT_SIMMEM_BUCKETS] +
                      pk->bytes[DT_SIMMEM_WORKSPACE];
    if (dm > 0)
        printf("the simulated peak exceeds the closed form: a transient it misses (buffers %.1f MiB simulated vs "
               "%.1f MiB closed form, activations %.1f vs %.1f MiB)\n",
               (double)sim_buf / DT_MIB, (double)mb.buffers / DT_MIB, (double)pk->bytes[DT_SIMMEM_ACTIVATIONS] / DT_MIB,
               (double)mb.activations / DT_MIB);
    else if (dm < 0)
        printf("the closed form is an upper bound: it holds every buffer allowance at once (buffers %.1f MiB "
               "simulated at the peak vs %.1f MiB closed form)\n",
               (double)sim_buf / DT_MIB, (double)mb.buffers / DT_MIB);
    if (trace) printf("trace: %s\n", trace);
    if (plot) printf("plot: %s\n", plot);
    dt_sim_free(&r);
    return 0;
}
