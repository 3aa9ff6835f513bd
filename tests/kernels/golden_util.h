/* golden_util.h — what the C tests against transformers' golden files share: the model of
 * a save_pretrained directory (its config.json) and the comparison of float arrays. */
#ifndef DT_GOLDEN_UTIL_H
#define DT_GOLDEN_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dt_json.h"
#include "dt_model.h"

#define DT_GOLDEN_PATH_MAX 1040

/* m from dir/config.json; exits the test with the error on failure */
static inline void golden_model_of(const char *dir, dt_model *m) {
    char p[DT_GOLDEN_PATH_MAX], *txt = NULL;
    dt_error err;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (dt_json_read_file(p, &txt, NULL, &err) || dt_model_from_config_json(txt, p, m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    free(txt);
}

/* max |a - b| over n elements (inf when any is NaN), and (ref_max, may be NULL) max |b| */
static inline double golden_max_abs_diff(const float *a, const float *b, size_t n, double *ref_max) {
    double worst = 0, rm = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
        if (fabs((double)b[i]) > rm) rm = fabs((double)b[i]);
    }
    if (ref_max) *ref_max = rm;
    return worst;
}

#endif
