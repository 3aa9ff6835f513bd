/* gpucal.c — the host side of GPU calibration (dt_gpucal.h): the back-end call, the profile
 * match and the fractions; the measuring itself is engine/cuda/calibrate_cuda.cu. */
#include "dt_gpucal.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dt_backend.h"
#include "dt_precision.h"

/* A built-in profile matches a GPU whose memory is within this fraction of the profile's
 * device_mem_bytes: cudaMemGetInfo's total is the board's memory less what the driver keeps
 * (an H100 80GB reports 79.1 GiB against the profile's 80 GiB), while boards of one family
 * differ by 2x (A100 40 / 80 GB, V100 16 / 32 GB). */
#define DT_GPUCAL_MEM_MATCH 0.15

typedef int (*cal_fn)(int ordinal, dt_gpucal *out, dt_error *err);

int dt_gpucal_measure(int ordinal, dt_gpucal *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    cal_fn fn = (cal_fn)dt_backend_cuda_sym("dt_cuda_calibrate", err);
    if (!fn) return err->code;
    return fn(ordinal, out, err);
}

/* case-insensitive substring */
static int has_word(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return 1;
    }
    return 0;
}

int dt_gpucal_match_profile(const char *gpu_name, int64_t total_mem_bytes, char *out, size_t n,
                            dt_error *err) {
    static const char *const families[] = {"V100", "A100", "H100", "H200"};
    static const char *const boards[] = {"PCIe", "NVL"};
    const char *fam = NULL;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (has_word(gpu_name, families[i])) fam = families[i];
    char list[512] = "";
    double best = -1;
    out[0] = '\0';
    for (int i = 0; i < dt_hardware_catalog_count(); i++) {
        const char *name = dt_hardware_catalog_name(i);
        dt_hardware h;
        if (dt_hardware_load(name, NULL, &h, NULL) || h.device != DT_DEVICE_CUDA) continue;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", name);
        if (!fam || !has_word(name, fam)) continue;
        int same_board = 1;
        for (size_t b = 0; b < sizeof boards / sizeof boards[0]; b++)
            if (has_word(gpu_name, boards[b]) != has_word(name, boards[b])) same_board = 0;
        const double off = fabs((double)total_mem_bytes / (double)h.device_mem_bytes - 1.0);
        if (!same_board || off > DT_GPUCAL_MEM_MATCH || (best >= 0 && off >= best)) continue;
        best = off;
        snprintf(out, n, "%s", name);
    }
    if (out[0]) return DT_OK;
    return dt_errorf(err, DT_EINVAL,
                     "GPU '%s' (%.1f GiB) matches no built-in profile (%s); give --base with this GPU's "
                     "datasheet profile (a .json path, format in docs/hardware.md)",
                     gpu_name, (double)total_mem_bytes / 1073741824.0, list);
}

int dt_gpucal_fractions(const dt_gpucal *m, const dt_hardware *base, double gemm_frac[3], double *bw_frac,
                        dt_error *err) {
    if (base->device != DT_DEVICE_CUDA)
        return dt_errorf(err, DT_EINVAL, "--base %s is a CPU profile; give the GPU's datasheet profile "
                         "(e.g. H100-SXM-80GB)", base->name);
    for (int t = 0; t < 3; t++) {
        gemm_frac[t] = m->gemm_flops[t] > 0 && base->peak_flops[t] > 0 ? m->gemm_flops[t] / base->peak_flops[t] : 0.0;
        if (gemm_frac[t] > 1.0)
            return dt_errorf(err, DT_EINVAL,
                             "GPU '%s' ran %s GEMMs at %.1f TFLOP/s, above profile %s's peak of %.1f: the "
                             "profile is another device's; give --base with this GPU's datasheet profile",
                             m->gpu_name, dt_dtype_name((dt_dtype)t), m->gemm_flops[t] / 1e12, base->name,
                             base->peak_flops[t] / 1e12);
    }
    *bw_frac = base->mem_bw > 0 ? m->copy_bw / base->mem_bw : 0.0;
    if (*bw_frac > 1.0)
        return dt_errorf(err, DT_EINVAL,
                         "GPU '%s' copied at %.0f GB/s, above profile %s's memory bandwidth of %.0f GB/s: the "
                         "profile is another device's; give --base with this GPU's datasheet profile",
                         m->gpu_name, m->copy_bw / 1e9, base->name, base->mem_bw / 1e9);
    return DT_OK;
}
