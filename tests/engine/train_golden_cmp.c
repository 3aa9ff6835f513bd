/* train_golden_cmp.c — compares one dtrun run with a training-loop golden
 * (tests/kernels/golden/train/<case>.golden.safetensors, scripts/gen_train_golden.py):
 * the per-step loss, gradient norm and LR of metrics.jsonl, and every parameter of
 * the final checkpoint's model.safetensors. Prints the worst figures; exit 0 when
 * everything is within tolerance, 1 otherwise, 2 on unreadable input.
 *
 * Usage: train_golden_cmp GOLDEN STEPS_TXT MODEL [--loss-rel X] [--norm-rel X]
 *                         [--lr-rel X] [--param-lr X]
 *   STEPS_TXT: one line per step, "step loss grad_norm lr" (jq -r '"\(.step) \(.loss)
 *   \(.grad_norm) \(.lr)"' metrics.jsonl).
 *   Parameters: |dtrun - golden| <= param_lr * lr (lr: the golden's "lr" metadata, the
 *   plan's peak LR) for every element except the golden's AdamW-ill-conditioned ones
 *   ("illcond.<name>": flat indices), which are held to the sum of the step LRs (the
 *   distance AdamW's normalised steps can move an element in the run) — see
 *   docs/engine.md "Training-loop golden". */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_safetensors.h"

#define MAX_STEPS 4096

static int die(const char *what, const dt_error *e) {
    fprintf(stderr, "train_golden_cmp: %s: %s\n", what, e ? e->msg : "");
    return 2;
}

/* A golden F32 vector [n] into out (n <= cap); returns n or -1. */
static int64_t vec(const dt_st_file *f, const char *name, double *out, int64_t cap) {
    const dt_st_tensor *t = dt_st_find(f, name);
    if (!t || strcmp(t->dtype, "F32") != 0 || t->ndim != 1 || t->shape[0] > cap) return -1;
    const float *p = dt_st_data(f, t);
    for (int64_t i = 0; i < t->shape[0]; i++) out[i] = p[i];
    return t->shape[0];
}

static int is_param(const char *name) {
    return strncmp(name, "step_", 5) != 0 && strcmp(name, "windows") != 0 && strncmp(name, "illcond.", 8) != 0;
}

/* worst |a - b| / |b| over n steps (b the golden; equal values are 0 apart, so a golden 0 —
 * WarmupCosineLR's first step — is met only by exactly 0); *at: its step (1-based) */
static double worst_rel(const double *a, const double *b, int64_t n, int64_t *at) {
    double w = 0;
    *at = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = a[i] == b[i] ? 0.0 : fabs(a[i] - b[i]) / fabs(b[i]);
        if (!(r <= w)) {   /* NaN counts as worst, and stays so */
            w = isnan(r) ? INFINITY : r;
            *at = i + 1;
        }
    }
    return w;
}

int main(int argc, char **argv) {
    double loss_rel = 1e-5, norm_rel = 1e-5, lr_rel = 1e-6, param_lr = 1e-3;
    if (argc < 4) {
        fprintf(stderr, "usage: train_golden_cmp GOLDEN STEPS_TXT MODEL [--loss-rel X] [--norm-rel X] "
                        "[--lr-rel X] [--param-lr X]\n");
        return 2;
    }
    for (int i = 4; i < argc; i += 2) {
        char *end = NULL;
        double v = i + 1 < argc ? strtod(argv[i + 1], &end) : NAN;
        if (!end || *end || !(v > 0)) {
            fprintf(stderr, "train_golden_cmp: %s expects a number > 0\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--loss-rel")) loss_rel = v;
        else if (!strcmp(argv[i], "--norm-rel")) norm_rel = v;
        else if (!strcmp(argv[i], "--lr-rel")) lr_rel = v;
        else if (!strcmp(argv[i], "--param-lr")) param_lr = v;
        else {
            fprintf(stderr, "train_golden_cmp: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    dt_error err = {0};
    dt_st_file *g = NULL, *m = NULL;
    if (dt_st_open(argv[1], &g, &err)) return die(argv[1], &err);
    if (dt_st_open(argv[3], &m, &err)) return die(argv[3], &err);
    const char *lrs = dt_st_metadata(g, "lr");
    const double lr = lrs ? strtod(lrs, NULL) : 0;
    if (!(lr > 0)) return die(argv[1], &(dt_error){DT_EINVAL, "no positive \"lr\" in the metadata"});

    static double gl[MAX_STEPS], gn[MAX_STEPS], glr[MAX_STEPS], dl[MAX_STEPS], dn[MAX_STEPS], dlr[MAX_STEPS];
    int64_t S = vec(g, "step_losses", gl, MAX_STEPS);
    if (S < 1 || vec(g, "step_grad_norms", gn, MAX_STEPS) != S || vec(g, "step_lrs", glr, MAX_STEPS) != S)
        return die(argv[1], &(dt_error){DT_EINVAL, "step_losses / step_grad_norms / step_lrs missing or unequal"});
    double sum_lr = 0;
    for (int64_t i = 0; i < S; i++) sum_lr += glr[i];

    FILE *f = fopen(argv[2], "r");
    if (!f) return die(argv[2], &(dt_error){DT_EIO, "cannot open"});
    int64_t n = 0, step;
    int fails = 0;
    while (n < MAX_STEPS && fscanf(f, "%" SCNd64 " %lf %lf %lf", &step, &dl[n], &dn[n], &dlr[n]) == 4) {
        if (step != n + 1) {
            printf("FAIL: metrics line %" PRId64 " is step %" PRId64 "\n", n + 1, step);
            fails++;
        }
        n++;
    }
    fclose(f);
    if (n != S) {
        printf("FAIL: dtrun logged %" PRId64 " steps, the golden has %" PRId64 "\n", n, S);
        return 1;
    }
    int64_t at;
    double wl = worst_rel(dl, gl, S, &at);
    printf("loss      worst rel error %.3g (step %" PRId64 ": dtrun %.9g, golden %.9g), tolerance %g\n", wl, at,
           dl[at ? at - 1 : 0], gl[at ? at - 1 : 0], loss_rel);
    if (!(wl <= loss_rel)) fails++;
    double wn = worst_rel(dn, gn, S, &at);
    printf("grad_norm worst rel error %.3g (step %" PRId64 "), tolerance %g\n", wn, at, norm_rel);
    if (!(wn <= norm_rel)) fails++;
    double wr = worst_rel(dlr, glr, S, &at);
    printf("lr        worst rel error %.3g (step %" PRId64 "), tolerance %g\n", wr, at, lr_rel);
    if (!(wr <= lr_rel)) fails++;

    /* parameters: the golden's every tensor in the checkpoint and back */
    double worst = 0, worst_ill = 0;
    char wname[DT_ST_NAME_MAX] = "", iname[DT_ST_NAME_MAX] = "";
    int64_t widx = -1, iidx = -1, nparams = 0, nill = 0, ntensors = 0;
    for (int i = 0; i < dt_st_count(g); i++) {
        const dt_st_tensor *gt = dt_st_get(g, i);
        if (!is_param(gt->name)) continue;
        ntensors++;
        const dt_st_tensor *mt = dt_st_find(m, gt->name);
        if (!mt) {
            printf("FAIL: %s: not in the checkpoint\n", gt->name);
            fails++;
            continue;
        }
        int same = mt->ndim == gt->ndim && !strcmp(mt->dtype, "F32") && !strcmp(gt->dtype, "F32");
        for (int d = 0; same && d < gt->ndim; d++) same = mt->shape[d] == gt->shape[d];
        if (!same) {
            printf("FAIL: %s: shape or dtype differs (checkpoint %s, %d dims)\n", gt->name, mt->dtype, mt->ndim);
            fails++;
            continue;
        }
        const int64_t cnt = (int64_t)dt_st_numel(gt);
        const float *a = dt_st_data(m, mt), *b = dt_st_data(g, gt);
        unsigned char *ill = calloc((size_t)cnt + 1, 1);
        if (!ill) return die(gt->name, &(dt_error){DT_ENOMEM, "out of memory"});
        char key[DT_ST_NAME_MAX + 16];
        snprintf(key, sizeof key, "illcond.%s", gt->name);
        const dt_st_tensor *it = dt_st_find(g, key);
        if (it && !strcmp(it->dtype, "I32")) {
            const int32_t *ix = dt_st_data(g, it);
            for (uint64_t k = 0; k < dt_st_numel(it); k++)
                if (ix[k] >= 0 && ix[k] < cnt) ill[ix[k]] = 1;
        }
        double tw = 0, tiw = 0;
        int64_t tidx = -1, tiidx = -1, tbad = 0;
        for (int64_t k = 0; k < cnt; k++) {
            double d = fabs((double)a[k] - (double)b[k]);
            if (ill[k]) {
                nill++;
                if (!(d <= tiw)) tiw = isnan(d) ? INFINITY : d, tiidx = k;
                if (!(d <= sum_lr)) tbad++;
            } else {
                if (!(d <= tw)) tw = isnan(d) ? INFINITY : d, tidx = k;
                if (!(d <= param_lr * lr)) tbad++;
            }
        }
        free(ill);
        nparams += cnt;
        if (tbad) {
            printf("FAIL: %s: %" PRId64 " element(s) beyond tolerance; worst %.3g lr at [%" PRId64 "]", gt->name,
                   tbad, tw / lr, tidx);
            if (tiidx >= 0) printf(", ill-conditioned %.3g lr at [%" PRId64 "]", tiw / lr, tiidx);
            printf("\n");
            fails++;
        }
        if (!(tw <= worst)) worst = tw, widx = tidx, snprintf(wname, sizeof wname, "%s", gt->name);
        if (!(tiw <= worst_ill)) worst_ill = tiw, iidx = tiidx, snprintf(iname, sizeof iname, "%s", gt->name);
    }
    for (int i = 0; i < dt_st_count(m); i++)
        if (!dt_st_find(g, dt_st_get(m, i)->name)) {
            printf("FAIL: %s: in the checkpoint, not in the golden\n", dt_st_get(m, i)->name);
            fails++;
        }
    printf("params    %" PRId64 " tensors, %" PRId64 " elements: worst |dtrun - golden| %.3g lr (%s[%" PRId64
           "]), tolerance %g lr (lr %g)\n",
           ntensors, nparams, worst / lr, wname, widx, param_lr, lr);
    printf("          %" PRId64 " AdamW-ill-conditioned elements: worst %.3g lr (%s[%" PRId64
           "]), tolerance %.3g lr (sum of the step lrs)\n",
           nill, worst_ill / lr, iname[0] ? iname : "-", iidx, sum_lr / lr);
    dt_st_close(g);
    dt_st_close(m);
    if (fails) printf("FAIL: %d check(s) failed\n", fails);
    return fails ? 1 : 0;
}
