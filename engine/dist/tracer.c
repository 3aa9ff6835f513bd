/* tracer.c — see dt_tracer.h. Spans are kept in memory (a few per unit per
 * micro-step) and written once at the end of the run. */
#include "dt_tracer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dt_trace.h"
#include "dt_clock.h"

#define DT_TRACER_PATH_MAX 4200
#define DT_TRACER_FIRST_CAP 1024   /* spans; doubles as needed */

typedef struct {
    int kind, stream, unit, micro;   /* micro < 0: once per step */
    int64_t bytes;
    double t0_us, t1_us;
} rec;

int dt_tracer_enabled = 0;

static struct {
    int rank;
    int64_t n_layer;
    int micro;
    double origin_s;
    rec *r;
    size_t n, cap;
    int oom;   /* a span could not be stored: reported by dt_tracer_finish */
} g_tr;

int dt_tracer_start(int rank, int64_t n_layer, dt_error *err) {
    dt_tracer_stop();
    g_tr.r = malloc(DT_TRACER_FIRST_CAP * sizeof *g_tr.r);
    if (!g_tr.r) return dt_errorf(err, DT_ENOMEM, "--trace: out of memory for the span buffer");
    g_tr.cap = DT_TRACER_FIRST_CAP;
    g_tr.rank = rank;
    g_tr.n_layer = n_layer;
    g_tr.origin_s = dt_clock_s();
    dt_tracer_enabled = 1;
    return DT_OK;
}

void dt_tracer_set_origin(void) {
    if (dt_tracer_enabled) g_tr.origin_s = dt_clock_s();
}

double dt_tracer_now_us(void) { return dt_tracer_enabled ? (dt_clock_s() - g_tr.origin_s) * 1e6 : 0.0; }

void dt_tracer_set_micro(int micro) { g_tr.micro = micro; }

void dt_tracer_span(dt_sim_kind kind, dt_sim_stream stream, int unit, int per_micro, int64_t bytes, double t0_us,
                    double t1_us) {
    if (!dt_tracer_enabled) return;
    if (g_tr.n == g_tr.cap) {
        rec *q = realloc(g_tr.r, 2 * g_tr.cap * sizeof *q);
        if (!q) {
            g_tr.oom = 1;
            return;
        }
        g_tr.r = q;
        g_tr.cap *= 2;
    }
    g_tr.r[g_tr.n++] = (rec){(int)kind, (int)stream, unit, per_micro ? g_tr.micro : -1, bytes, t0_us,
                             t1_us > t0_us ? t1_us : t0_us};
}

void dt_tracer_stop(void) {
    free(g_tr.r);
    memset(&g_tr, 0, sizeof g_tr);
    dt_tracer_enabled = 0;
}

/* "embeddings", "block.N" (1-based), "head": the simulator's unit names */
static const char *unit_name(int unit, int64_t L, char *buf, size_t n) {
    if (unit < 0) return NULL;
    if (unit == 0) return "embeddings";
    if (unit > L) return "head";
    snprintf(buf, n, "block.%d", unit);
    return buf;
}

static int write_part(const char *part, dt_error *err) {
    FILE *f = fopen(part, "w");
    if (!f) return dt_errorf(err, DT_EIO, "--trace: cannot write %s: %s", part, strerror(errno));
    int ok = fprintf(f, "%d %" PRId64 "\n", g_tr.rank, g_tr.n_layer) > 0;
    for (size_t i = 0; ok && i < g_tr.n; i++) {
        const rec *r = &g_tr.r[i];
        ok = fprintf(f, "%d %d %d %d %" PRId64 " %.3f %.3f\n", r->kind, r->stream, r->unit, r->micro, r->bytes,
                     r->t0_us, r->t1_us) > 0;
    }
    if (fclose(f) != 0) ok = 0;
    return ok ? DT_OK : dt_errorf(err, DT_EIO, "--trace: cannot write %s (disk full?)", part);
}

/* Adds rank r's part file to t. */
static int merge_part(dt_trace *t, const char *part, dt_error *err) {
    FILE *f = fopen(part, "r");
    if (!f) return dt_errorf(err, DT_EIO, "--trace: cannot read %s: %s", part, strerror(errno));
    int rank, rc = DT_OK;
    int64_t L;
    if (fscanf(f, "%d %" SCNd64, &rank, &L) != 2) rc = dt_errorf(err, DT_EIO, "--trace: %s: bad header", part);
    for (int s = 0; !rc && s < DT_SIM_STREAMS; s++)
        rc = dt_trace_thread_name(t, rank, s, dt_sim_stream_name((dt_sim_stream)s), err);
    rec r;
    char ub[32];
    while (!rc && fscanf(f, "%d %d %d %d %" SCNd64 " %lf %lf", &r.kind, &r.stream, &r.unit, &r.micro, &r.bytes,
                         &r.t0_us, &r.t1_us) == 7) {
        if (r.kind < 0 || r.kind >= DT_SIM_KINDS || r.stream < 0 || r.stream >= DT_SIM_STREAMS) {
            rc = dt_errorf(err, DT_EIO, "--trace: %s: bad span", part);
            break;
        }
        dt_trace_span s = {dt_sim_kind_name((dt_sim_kind)r.kind), dt_sim_stream_name((dt_sim_stream)r.stream),
                           rank, r.stream, r.t0_us, r.t1_us - r.t0_us, unit_name(r.unit, L, ub, sizeof ub),
                           r.micro, r.bytes};
        rc = dt_trace_add_span(t, &s, err);
    }
    fclose(f);
    return rc;
}

int dt_tracer_finish(const char *path, dt_comm *comm, dt_error *err) {
    if (!dt_tracer_enabled) return DT_OK;
    int rank = dt_comm_rank(comm), world = dt_comm_size(comm), rc = DT_OK;
    char part[DT_TRACER_PATH_MAX];
    if (strlen(path) > DT_TRACER_PATH_MAX - 32) rc = dt_errorf(err, DT_EINVAL, "--trace: path too long");
    else if (g_tr.oom) rc = dt_errorf(err, DT_ENOMEM, "--trace: out of memory while collecting spans");
    if (!rc) {
        snprintf(part, sizeof part, "%s.rank%d.part", path, rank);
        rc = write_part(part, err);
    }
    dt_tracer_stop();
    /* every rank's part is on disk before rank 0 reads them (one file system:
     * the ranks of a traced run share the output path) */
    dt_error berr;
    if (world > 1 && dt_comm_barrier(comm, &berr) && !rc) {
        *err = berr;
        rc = err->code;
    }
    if (rc || rank != 0) return rc;
    dt_trace *t = dt_trace_new();
    if (!t) return dt_errorf(err, DT_ENOMEM, "--trace: out of memory");
    for (int r = 0; r < world && !rc; r++) {
        snprintf(part, sizeof part, "%s.rank%d.part", path, r);
        rc = merge_part(t, part, err);
        remove(part);
    }
    if (!rc) rc = dt_trace_write(t, path, err);
    dt_trace_free(t);
    return rc;
}
