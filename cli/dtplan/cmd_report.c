/* cmd_report.c — `dtplan report RUN_DIR [-o OUTDIR] [--plan PLAN.json]`: from a
 * dtrun output directory (metrics.jsonl, run-report.json; docs/dtrun.md) draw
 * loss.png, throughput.png, memory.png and steptime.png and write report.md with
 * them embedded, a predicted-vs-tracked table and the real memory per phase. docs/reports.md. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dt_cli.h"
#include "dt_consts.h"
#include "dt_ftplan.h"
#include "dt_objplan.h"
#include "dt_json.h"
#include "dt_report_charts.h"
#include "dt_timemodel.h"

#define RP_PATH_MAX 4096
#define RP_N_CATS 6   /* params, grads, optimizer, activations, buffers, total (run-report.json) */

static const char *const k_cats[RP_N_CATS] = {"params", "grads", "optimizer", "activations", "buffers", "total"};

static int usage(FILE *f) {
    fprintf(f,
            "usage: dtplan report RUN_DIR [-o OUTDIR] [--plan PLAN.json]\n"
            "  Charts and a Markdown summary of a dtrun output directory (metrics.jsonl,\n"
            "  run-report.json): loss.png, throughput.png, memory.png, steptime.png, report.md;\n"
            "  a grpo run also reward.png (metrics.jsonl's \"reward\": the mean reward per step).\n"
            "  -o OUTDIR         where to write them (default RUN_DIR/report)\n"
            "  --plan PLAN.json  predicted step time / tokens/s from this plan when the run report\n"
            "                    carries none (default: the plan named in run-report.json, if readable)\n");
    return f == stdout ? 0 : 2;
}


/* ---- metrics.jsonl ---- */
typedef struct {
    int n, n_valid, n_reward;
    double *step, *loss, *tps, *step_s;   /* [n] */
    double *rstep, *reward;               /* [n_reward] grpo's mean reward per step */
    double *vstep, *vloss;                /* [n_valid] */
} rp_metrics;

static void metrics_free(rp_metrics *m) {
    free(m->step), free(m->loss), free(m->tps), free(m->step_s), free(m->vstep), free(m->vloss);
    free(m->rstep), free(m->reward);
    memset(m, 0, sizeof *m);
}

static int num_field(const cJSON *o, const char *key, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return 0;
    *out = v->valuedouble;
    return 1;
}

static int read_metrics(const char *path, rp_metrics *m, dt_error *err) {
    memset(m, 0, sizeof *m);
    char *txt = NULL;
    if (dt_read_file(path, DT_READ_MAX_TRACE, &txt, NULL, err)) return err->code;
    int lines = 1;
    for (const char *c = txt; *c; c++) lines += *c == '\n';
    m->step = malloc(sizeof(double) * (size_t)lines), m->loss = malloc(sizeof(double) * (size_t)lines);
    m->tps = malloc(sizeof(double) * (size_t)lines), m->step_s = malloc(sizeof(double) * (size_t)lines);
    m->vstep = malloc(sizeof(double) * (size_t)lines), m->vloss = malloc(sizeof(double) * (size_t)lines);
    m->rstep = malloc(sizeof(double) * (size_t)lines), m->reward = malloc(sizeof(double) * (size_t)lines);
    if (!m->step || !m->loss || !m->tps || !m->step_s || !m->vstep || !m->vloss || !m->rstep || !m->reward) {
        free(txt);
        metrics_free(m);
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory", path);
    }
    int rc = DT_OK, line = 0;
    for (char *p = txt; p && *p && !rc;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        line++;
        const char *q = p;
        while (*q == ' ' || *q == '\t' || *q == '\r') q++;
        if (*q) {
            cJSON *o = NULL;
            double step, loss, tps, ms, v;
            if (dt_json_parse(p, path, &o, err)) {
                /* the line is parsed alone, so the message says line 1: put the file's line in */
                char msg[DT_ERROR_MSG_MAX];
                size_t n = strlen(path);
                snprintf(msg, sizeof msg, "%s", err->msg);
                rc = !strncmp(msg, path, n) && !strncmp(msg + n, ":1:", 3)
                         ? dt_errorf(err, DT_EINVAL, "%s:%d:%s", path, line, msg + n + 3)
                         : dt_errorf(err, DT_EINVAL, "%s:%d: %s", path, line, msg);
            } else if (!cJSON_IsObject(o))
                rc = dt_errorf(err, DT_EINVAL, "%s:%d: not a JSON object (a truncated or corrupted metrics line)", path,
                               line);
            else if (!num_field(o, "step", &step) || !num_field(o, "loss", &loss) ||
                     !num_field(o, "tokens_per_s", &tps) || !num_field(o, "step_ms", &ms))
                rc = dt_errorf(err, DT_EINVAL,
                               "%s:%d: a metrics line needs numeric step, loss, tokens_per_s and step_ms (docs/dtrun.md)",
                               path, line);
            else {
                m->step[m->n] = step, m->loss[m->n] = loss, m->tps[m->n] = tps, m->step_s[m->n] = ms / DT_MS_PER_S;
                m->n++;
                if (num_field(o, "val_loss", &v)) m->vstep[m->n_valid] = step, m->vloss[m->n_valid++] = v;
                if (num_field(o, "reward", &v)) m->rstep[m->n_reward] = step, m->reward[m->n_reward++] = v;
            }
            cJSON_Delete(o);
        }
        p = nl ? nl + 1 : NULL;
    }
    free(txt);
    if (!rc && m->n == 0) rc = dt_errorf(err, DT_EINVAL, "%s: no steps recorded (did the run finish a step?)", path);
    if (rc) metrics_free(m);
    return rc;
}

/* ---- run-report.json ---- */
#define RP_MAX_PHASES 16   /* more than the engine's phases (dt_memprobe.h) */

typedef struct {
    char model[128], precision[32];
    int have_pred;
    double pred[RP_N_CATS], meas[RP_N_CATS], reserve;
    double pred_step_s, pred_tps;        /* <= 0: none */
    double meas_step_s, meas_tps;
    char plan[RP_PATH_MAX];
    double loss_first, loss_last, loss_valid;   /* NAN: none */
    /* real_memory (docs/dtrun.md "Real memory per phase"): what the kernel measured */
    int n_phases;
    struct {
        char name[24];
        double runs, real, tracked, runtime, predicted;   /* bytes; predicted <= 0: none */
    } phase[RP_MAX_PHASES];
    char probe[16];
} rp_run;

static double num_or(const cJSON *o, const char *key, double dflt) {
    double v;
    return num_field(o, key, &v) ? v : dflt;
}

/* The per-phase real peaks, when the run report has them (older reports do not). */
static void read_real_memory(const cJSON *rm, rp_run *r) {
    const cJSON *probe = cJSON_GetObjectItemCaseSensitive(rm, "probe");
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(rm, "phases");
    if (!cJSON_IsObject(rm) || !cJSON_IsObject(ph)) return;
    if (cJSON_IsString(probe)) snprintf(r->probe, sizeof r->probe, "%s", probe->valuestring);
    for (const cJSON *e = ph->child; e && r->n_phases < RP_MAX_PHASES; e = e->next) {
        double real = num_or(e, "real_peak_rss", -1);
        if (!cJSON_IsObject(e) || !e->string || real < 0) continue;
        __typeof__(&r->phase[0]) q = &r->phase[r->n_phases++];
        snprintf(q->name, sizeof q->name, "%s", e->string);
        q->runs = num_or(e, "runs", 0);
        q->real = real;
        q->tracked = num_or(cJSON_GetObjectItemCaseSensitive(e, "tracked"), "total", 0);
        q->runtime = num_or(e, "runtime", 0);
        q->predicted = num_or(e, "predicted_total", 0);
    }
}

static int read_run_report(const char *path, rp_run *r, dt_error *err) {
    memset(r, 0, sizeof *r);
    char *txt = NULL;
    if (dt_json_read_file(path, &txt, NULL, err)) return err->code;
    cJSON *root = NULL;
    int rc = dt_json_parse(txt, path, &root, err);
    free(txt);
    if (rc) return rc;
    const cJSON *pred = cJSON_GetObjectItemCaseSensitive(root, "predicted");
    const cJSON *meas = cJSON_GetObjectItemCaseSensitive(root, "measured");
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(root, "loss");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(meas)) {
        cJSON_Delete(root);
        return dt_errorf(err, DT_EINVAL, "%s: not a dtrun run report (no \"measured\" object; docs/dtrun.md)", path);
    }
    const cJSON *s;
    if (cJSON_IsString(s = cJSON_GetObjectItemCaseSensitive(root, "model")))
        snprintf(r->model, sizeof r->model, "%s", s->valuestring);
    if (cJSON_IsString(s = cJSON_GetObjectItemCaseSensitive(root, "precision")))
        snprintf(r->precision, sizeof r->precision, "%s", s->valuestring);
    if (cJSON_IsString(s = cJSON_GetObjectItemCaseSensitive(root, "plan")))
        snprintf(r->plan, sizeof r->plan, "%s", s->valuestring);
    r->have_pred = cJSON_IsObject(pred);
    for (int c = 0; c < RP_N_CATS && !rc; c++) {
        if (!num_field(meas, k_cats[c], &r->meas[c]) || r->meas[c] < 0)
            rc = dt_errorf(err, DT_EINVAL, "%s: $.measured.%s: expected bytes >= 0", path, k_cats[c]);
        if (r->have_pred && !num_field(pred, k_cats[c], &r->pred[c])) r->have_pred = 0; /* source "none" */
    }
    r->reserve = r->have_pred ? num_or(pred, "reserve", 0) : 0;
    r->pred_step_s = cJSON_IsObject(pred) ? num_or(pred, "step_time_s", 0) : 0;
    r->pred_tps = cJSON_IsObject(pred) ? num_or(pred, "tokens_per_s", 0) : 0;
    r->meas_step_s = num_or(meas, "step_time_s", 0);
    r->meas_tps = num_or(meas, "tokens_per_s", 0);
    read_real_memory(cJSON_GetObjectItemCaseSensitive(root, "real_memory"), r);
    r->loss_first = num_or(loss, "first", NAN);
    r->loss_last = num_or(loss, "last", NAN);
    r->loss_valid = num_or(loss, "valid", NAN);
    cJSON_Delete(root);
    return rc;
}

/* The run report carries the plan's time prediction only when the plan stored a
 * current one; otherwise recompute it from the plan with the time model. */
static void predict_time(rp_run *r, const char *plan_path, char *note, size_t n) {
    note[0] = '\0';
    if (r->pred_step_s > 0 && !plan_path) return;
    const char *pp = plan_path ? plan_path : r->plan;
    if (!pp[0]) return;
    dt_plan p;
    dt_time_breakdown t;
    dt_error e;
    dt_error_clear(&e);
    if (dt_plan_load(pp, &p, &e) || dt_time_estimate(&p, &t, &e)) {
        snprintf(note, n, "no predicted step time: %s", e.msg);
        return;
    }
    r->pred_step_s = t.step_s, r->pred_tps = t.tokens_per_s;
    char ft[256] = "";
    if (p.finetune.method != DT_FT_FULL) {   /* a fine-tuning plan: the method its prediction prices */
        char d[224];
        dt_ftplan_describe(&p.finetune, d, sizeof d);
        snprintf(ft, sizeof ft, " (fine-tuning: %s)", d);
    }
    char ob[288] = "";
    if (dt_objplan_active(&p)) {   /* an objective: its models and generation are in the prediction */
        char d[256];
        dt_objplan_describe(&p, d, sizeof d);
        snprintf(ob, sizeof ob, " (objective %s)", d);
    }
    snprintf(note, n, "predicted step time recomputed from %s with the time model%s%s", pp, ft, ob);
}

/* ---- output ---- */
static int join(char *out, const char *dir, const char *name, dt_error *err) {
    if ((size_t)snprintf(out, RP_PATH_MAX, "%s/%s", dir, name) >= RP_PATH_MAX)
        return dt_errorf(err, DT_EINVAL, "%s: path too long", dir);
    return DT_OK;
}

static double pct(double measured, double predicted) {
    return predicted > 0 ? 100.0 * (measured - predicted) / predicted : NAN;
}

static void md_row(FILE *f, const char *what, double pred, double meas, const char *fmt_unit) {
    char p[48], m[48], d[32];
    if (pred > 0) snprintf(p, sizeof p, "%.3f", pred);
    else snprintf(p, sizeof p, "-");
    snprintf(m, sizeof m, "%.3f", meas);
    double x = pct(meas, pred);
    if (isfinite(x)) snprintf(d, sizeof d, "%+.2f %%", x);
    else snprintf(d, sizeof d, "-");
    fprintf(f, "| %s (%s) | %s | %s | %s |\n", what, fmt_unit, p, m, d);
}

static int write_markdown(const char *path, const char *run_dir, const rp_run *r, const rp_metrics *m,
                          const char *note, dt_error *err) {
    char tmp[RP_PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return dt_errorf(err, DT_EIO, "%s: cannot write: %s", tmp, strerror(errno));
    fprintf(f, "# Run report: %s\n\n", r->model[0] ? r->model : run_dir);
    fprintf(f, "Run directory `%s`%s%s%s, %d steps recorded.\n\n", run_dir, r->plan[0] ? ", plan `" : "", r->plan,
            r->plan[0] ? "`" : "", m->n);
    if (r->precision[0]) fprintf(f, "Precision %s. ", r->precision);
    if (isfinite(r->loss_first) && isfinite(r->loss_last))
        fprintf(f, "Training loss %.4f -> %.4f", r->loss_first, r->loss_last);
    if (isfinite(r->loss_valid)) fprintf(f, ", last validation loss %.4f", r->loss_valid);
    fprintf(f, ".\n\n## Predicted vs tracked and measured (per rank)\n\n");
    fprintf(f, "| quantity | predicted | tracked (memory) / measured (time) | difference |\n|---|---:|---:|---:|\n");
    for (int c = 0; c < RP_N_CATS; c++) {
        char what[48];
        snprintf(what, sizeof what, "%s%s", k_cats[c], c == RP_N_CATS - 1 ? " (without reserve)" : "");
        md_row(f, what, r->have_pred ? r->pred[c] / DT_MIB : 0, r->meas[c] / DT_MIB, "MiB");
    }
    md_row(f, "step time", r->pred_step_s * DT_MS_PER_S, r->meas_step_s * DT_MS_PER_S, "ms");
    md_row(f, "throughput", r->pred_tps, r->meas_tps, "tokens/s");
    fprintf(f, "\nDifference = 100 x (tracked or measured - predicted) / predicted. Tracked memory is the engine's "
               "own count of its allocations, peak per category (not what the OS sees: the next table); the "
               "measured step time is the mean over the steps after the first.%s%s\n\n",
            note[0] ? " Note: " : "", note);
    if (r->n_phases > 0) {
        fprintf(f, "## Real memory per phase (rank 0, peak RSS from the kernel%s%s)\n\n",
                r->probe[0] ? ", probe " : "", r->probe);
        fprintf(f, "| phase | runs | real peak (MiB) | tracked (MiB) | runtime = real - tracked (MiB) | predicted total (MiB) |\n"
                   "|---|---:|---:|---:|---:|---:|\n");
        for (int i = 0; i < r->n_phases; i++)
            fprintf(f, "| %s | %.0f | %.1f | %.1f | %.1f | %.1f |\n", r->phase[i].name, r->phase[i].runs,
                    r->phase[i].real / DT_MIB, r->phase[i].tracked / DT_MIB, r->phase[i].runtime / DT_MIB,
                    r->phase[i].predicted / DT_MIB);
        fprintf(f, "\n");
    }
    fprintf(f, "## Loss\n\n![training and validation loss](loss.png)\n\n");
    fprintf(f, "## Throughput\n\n![tokens per second](throughput.png)\n\n");
    fprintf(f, "## Step time\n\n![step time](steptime.png)\n\n");
    fprintf(f, "## Memory\n\n![predicted vs tracked memory](memory.png)\n");
    if (m->n_reward) fprintf(f, "\n## Reward\n\n![mean reward per step (grpo)](reward.png)\n");
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        remove(tmp);
        return dt_errorf(err, DT_EIO, "%s: cannot write: %s", path, strerror(errno));
    }
    return DT_OK;
}

static int draw(const char *out_dir, const char *run_dir, const rp_run *r, const rp_metrics *m, dt_error *err) {
    char path[RP_PATH_MAX], title[256];
    const char *name = r->model[0] ? r->model : run_dir;
    if (join(path, out_dir, "loss.png", err)) return err->code;
    snprintf(title, sizeof title, "%s: loss", name);
    if (dt_chart_loss(path, title, (dt_chart_curve){m->n, m->step, m->loss},
                      (dt_chart_curve){m->n_valid, m->vstep, m->vloss}, err))
        return err->code;
    if (join(path, out_dir, "throughput.png", err)) return err->code;
    snprintf(title, sizeof title, "%s: throughput", name);
    if (dt_chart_throughput(path, title, (dt_chart_curve){m->n, m->step, m->tps}, r->pred_tps, err)) return err->code;
    if (join(path, out_dir, "steptime.png", err)) return err->code;
    snprintf(title, sizeof title, "%s: step time", name);
    if (dt_chart_step_time(path, title, (dt_chart_curve){m->n, m->step, m->step_s}, r->pred_step_s, err))
        return err->code;
    if (m->n_reward) {   /* grpo: the reward curve */
        if (join(path, out_dir, "reward.png", err)) return err->code;
        snprintf(title, sizeof title, "%s: reward", name);
        if (dt_chart_reward(path, title, (dt_chart_curve){m->n_reward, m->rstep, m->reward}, err)) return err->code;
    }
    /* run-report.json's predicted total excludes the reserve; the chart subtracts it */
    dt_mem_breakdown pb, mb;
    memset(&pb, 0, sizeof pb), memset(&mb, 0, sizeof mb);
    int64_t *pf[5] = {&pb.params, &pb.grads, &pb.optimizer, &pb.activations, &pb.buffers};
    int64_t *mf[5] = {&mb.params, &mb.grads, &mb.optimizer, &mb.activations, &mb.buffers};
    for (int c = 0; c < 5; c++) *pf[c] = r->have_pred ? (int64_t)r->pred[c] : 0, *mf[c] = (int64_t)r->meas[c];
    pb.reserve = (int64_t)r->reserve;
    pb.total = (r->have_pred ? (int64_t)r->pred[5] : 0) + pb.reserve;
    mb.total = (int64_t)r->meas[5];
    if (join(path, out_dir, "memory.png", err)) return err->code;
    snprintf(title, sizeof title, "%s: memory per rank, predicted vs tracked (engine's count)", name);
    return dt_chart_memory_compare(path, title, &pb, &mb, 0, DT_UNITS_GIB, err);
}

int dt_cmd_report(int argc, char **argv) {
    const char *run_dir = NULL, *out_dir = NULL, *plan = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout);
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--out") || !strcmp(argv[i], "--plan")) {
            int is_plan = !strcmp(argv[i], "--plan");
            const char *v = dt_cli_value(argc, argv, &i, "report");
            if (!v) return 2;
            *(is_plan ? &plan : &out_dir) = v;
        } else if (argv[i][0] == '-') return dt_cli_fail(2, "report: unknown option '%s' (see dtplan report --help)", argv[i]);
        else if (run_dir) return dt_cli_fail(2, "report: one run directory only ('%s' and '%s')", run_dir, argv[i]);
        else run_dir = argv[i];
    }
    if (!run_dir) return dt_cli_fail(2, "report: no run directory given (usage: dtplan report RUN_DIR [-o OUTDIR])");
    struct stat st;
    if (stat(run_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return dt_cli_fail(2, "report: '%s' is not a directory (give a dtrun --out directory)", run_dir);

    dt_error e;
    dt_error_clear(&e);
    char mpath[RP_PATH_MAX], rpath[RP_PATH_MAX], def_out[RP_PATH_MAX], md[RP_PATH_MAX];
    if (join(mpath, run_dir, "metrics.jsonl", &e) || join(rpath, run_dir, "run-report.json", &e) ||
        join(def_out, run_dir, "report", &e))
        return dt_cli_fail(2, "%s", e.msg);
    if (!out_dir) out_dir = def_out;
    rp_metrics m;
    rp_run r;
    if (read_metrics(mpath, &m, &e)) return dt_cli_fail(e.code == DT_ENOMEM ? 1 : 2, "%s", e.msg);
    if (read_run_report(rpath, &r, &e)) {
        metrics_free(&m);
        return dt_cli_fail(e.code == DT_ENOMEM ? 1 : 2, "%s", e.msg);
    }
    char note[RP_PATH_MAX + 1200]; /* a path or an error line plus the text around it */
    predict_time(&r, plan, note, sizeof note);
    {   /* CPU runs: the charts say "per rank" / "(all ranks)", not GPUs (best effort: the plan may be gone) */
        dt_plan *pl = malloc(sizeof *pl);
        dt_error pe;
        dt_error_clear(&pe);
        const char *pp = plan ? plan : r.plan;
        if (pl && pp[0] && dt_plan_load(pp, pl, &pe) == DT_OK) dt_chart_set_device(pl->cluster.device);
        free(pl);
    }
    int rc = 0;
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST)
        rc = dt_cli_fail(2, "report: cannot create '%s': %s", out_dir, strerror(errno));
    else if (join(md, out_dir, "report.md", &e) || draw(out_dir, run_dir, &r, &m, &e) ||
             write_markdown(md, run_dir, &r, &m, note, &e))
        rc = dt_cli_fail(e.code == DT_ENOMEM ? 1 : 2, "%s", e.msg);
    if (!rc) {
        printf("report: %s (loss.png, throughput.png, steptime.png, memory.png%s)\n", md,
               m.n_reward ? ", reward.png" : "");
        if (note[0]) printf("note: %s\n", note);
    }
    metrics_free(&m);
    return rc;
}
