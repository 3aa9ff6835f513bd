/* trace.c — Chrome trace-event JSON writer and reader (dt_trace.h). */
#include "dt_trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_json.h"

struct dt_trace {
    cJSON *root;     /* {"traceEvents": [...], "displayTimeUnit": "ms"} */
    cJSON *events;
};

dt_trace *dt_trace_new(void) {
    dt_trace *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->root = cJSON_CreateObject();
    t->events = t->root ? cJSON_AddArrayToObject(t->root, "traceEvents") : NULL;
    if (!t->events || !cJSON_AddStringToObject(t->root, "displayTimeUnit", "ms")) {
        cJSON_Delete(t->root);
        free(t);
        return NULL;
    }
    return t;
}

void dt_trace_free(dt_trace *t) {
    if (!t) return;
    cJSON_Delete(t->root);
    free(t);
}

static int oom(dt_error *err) { return dt_errorf(err, DT_ENOMEM, "trace: out of memory"); }

int dt_trace_thread_name(dt_trace *t, int pid, int tid, const char *name, dt_error *err) {
    cJSON *e = cJSON_CreateObject();
    if (!e) return oom(err);
    cJSON_AddStringToObject(e, "name", "thread_name");
    cJSON_AddStringToObject(e, "ph", "M");
    cJSON_AddNumberToObject(e, "pid", pid);
    cJSON_AddNumberToObject(e, "tid", tid);
    cJSON *a = cJSON_AddObjectToObject(e, "args");
    if (!a || !cJSON_AddStringToObject(a, "name", name)) { cJSON_Delete(e); return oom(err); }
    cJSON_AddItemToArray(t->events, e);
    return DT_OK;
}

int dt_trace_add_span(dt_trace *t, const dt_trace_span *s, dt_error *err) {
    if (!s->name || !*s->name || !isfinite(s->ts_us) || !isfinite(s->dur_us) || s->dur_us < 0)
        return dt_errorf(err, DT_EINVAL, "trace: span '%s' needs a name, finite ts and dur >= 0",
                         s->name ? s->name : "");
    cJSON *e = cJSON_CreateObject();
    if (!e) return oom(err);
    cJSON_AddStringToObject(e, "name", s->name);
    cJSON_AddStringToObject(e, "cat", s->cat ? s->cat : "");
    cJSON_AddStringToObject(e, "ph", "X");
    cJSON_AddNumberToObject(e, "ts", s->ts_us);
    cJSON_AddNumberToObject(e, "dur", s->dur_us);
    cJSON_AddNumberToObject(e, "pid", s->pid);
    cJSON_AddNumberToObject(e, "tid", s->tid);
    cJSON *a = cJSON_AddObjectToObject(e, "args");
    if (!a) { cJSON_Delete(e); return oom(err); }
    if (s->unit) cJSON_AddStringToObject(a, "unit", s->unit);
    if (s->micro >= 0) cJSON_AddNumberToObject(a, "micro", s->micro);
    if (s->bytes >= 0) cJSON_AddNumberToObject(a, "bytes", (double)s->bytes);
    cJSON_AddItemToArray(t->events, e);
    return DT_OK;
}

int dt_trace_add_counter(dt_trace *t, const char *name, int pid, double ts_us, int n, const char *const *keys,
                         const double *values, dt_error *err) {
    if (!isfinite(ts_us)) return dt_errorf(err, DT_EINVAL, "trace: counter '%s' at a non-finite time", name);
    cJSON *e = cJSON_CreateObject();
    if (!e) return oom(err);
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "ph", "C");
    cJSON_AddNumberToObject(e, "ts", ts_us);
    cJSON_AddNumberToObject(e, "pid", pid);
    cJSON *a = cJSON_AddObjectToObject(e, "args");
    if (!a) { cJSON_Delete(e); return oom(err); }
    for (int i = 0; i < n; i++) cJSON_AddNumberToObject(a, keys[i], values[i]);
    cJSON_AddItemToArray(t->events, e);
    return DT_OK;
}

int dt_trace_write(const dt_trace *t, const char *path, dt_error *err) {
    char *txt = cJSON_PrintUnformatted(t->root);
    if (!txt) return oom(err);
    int rc = dt_json_write_file_atomic(path, txt, err);
    free(txt);
    return rc;
}

static int is_int(const cJSON *v) { return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble); }

int dt_trace_read(const char *path, dt_trace_data *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    char *txt = NULL;
    if (dt_read_file(path, DT_READ_MAX_TRACE, &txt, NULL, err)) return err->code;
    cJSON *root = NULL;
    int rc = dt_json_parse(txt, path, &root, err);
    free(txt);
    if (rc) return rc;
    const cJSON *evs = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "traceEvents") : NULL;
    if (!cJSON_IsArray(evs)) {
        cJSON_Delete(root);
        return dt_errorf(err, DT_EINVAL, "%s: not a trace: expected {\"traceEvents\": [...]}", path);
    }
    int n = cJSON_GetArraySize(evs);
    out->spans = calloc((size_t)(n > 0 ? n : 1), sizeof *out->spans);
    if (!out->spans) { cJSON_Delete(root); return oom(err); }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
        if (!cJSON_IsObject(e) || !cJSON_IsString(ph)) {
            rc = dt_errorf(err, DT_EINVAL, "%s: traceEvents[%d]: expected an object with a string \"ph\"", path, i);
            break;
        }
        if (!strcmp(ph->valuestring, "C")) out->n_counters++;
        if (!strcmp(ph->valuestring, "X")) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
            const cJSON *ts = cJSON_GetObjectItemCaseSensitive(e, "ts");
            const cJSON *dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
            const cJSON *pid = cJSON_GetObjectItemCaseSensitive(e, "pid");
            const cJSON *tid = cJSON_GetObjectItemCaseSensitive(e, "tid");
            if (!cJSON_IsString(name) || !cJSON_IsNumber(ts) || !cJSON_IsNumber(dur) || dur->valuedouble < 0 ||
                !is_int(pid) || !is_int(tid) || (cat && !cJSON_IsString(cat))) {
                rc = dt_errorf(err, DT_EINVAL,
                               "%s: traceEvents[%d]: an \"X\" event needs string name, numeric ts, dur >= 0, "
                               "integer pid and tid",
                               path, i);
                break;
            }
            dt_trace_rspan *s = &out->spans[out->n_spans++];
            snprintf(s->name, sizeof s->name, "%s", name->valuestring);
            snprintf(s->cat, sizeof s->cat, "%s", cat ? cat->valuestring : "");
            s->pid = (int)pid->valuedouble;
            s->tid = (int)tid->valuedouble;
            s->ts_us = ts->valuedouble;
            s->dur_us = dur->valuedouble;
        }
        i++;
    }
    cJSON_Delete(root);
    if (rc) dt_trace_data_free(out);
    return rc;
}

void dt_trace_data_free(dt_trace_data *d) {
    if (!d) return;
    free(d->spans);
    memset(d, 0, sizeof *d);
}

/* ---- the event vocabulary (dt_trace.h) ---- */

const char *dt_sim_kind_name(dt_sim_kind k) {
    static const char *const names[DT_SIM_KINDS] = {"forward",   "backward",  "recompute", "allreduce",
                                                    "reduce_scatter", "allgather", "h2d", "d2h",
                                                    "nvme",      "optimizer"};
    return (unsigned)k < DT_SIM_KINDS ? names[k] : "?";
}

const char *dt_sim_stream_name(dt_sim_stream st) {
    static const char *const names[DT_SIM_STREAMS] = {"compute", "comm", "transfer", "cpu"};
    return (unsigned)st < DT_SIM_STREAMS ? names[st] : "?";
}
