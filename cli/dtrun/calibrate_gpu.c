/* calibrate_gpu.c — `dtrun calibrate --device cuda -o PROFILE.json [--base PROFILE] [--gpu N]
 * [--name NAME]` (also `dtplan calibrate --device cuda ...`): measures a GPU (dt_gpucal.h) and
 * writes its hardware profile: the base (datasheet) profile's figures, with what the GPU showed
 * in place of the time model's cited constants — gemm_peak_fraction per dtype (for
 * DT_GEMM_PEAK_CAP), mem_bw_fraction (DT_HBM_EFFICIENCY), op_overhead_s (DT_GPU_LAUNCH_S) —
 * and its SM count and memory. docs/hardware.md "Calibrating a GPU". */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dt_dtrun_cli.h"
#include "dt_gpucal.h"
#include "dt_hardware.h"
#include "dt_json.h"
#include "dt_precision.h"
#include "dt_timemodel.h"   /* the defaults the measured fields replace */


typedef struct {
    const char *out, *base, *name;
    int64_t gpu;
} calg_args;

static int calg_fail(const char *prog, const dt_error *e) {
    fprintf(stderr, "%s: calibrate: %s\n", prog, e->msg);
    return dt_cli_exit_code(e->code);
}

static int calg_usage(const char *prog, FILE *f) {
    fprintf(f,
            "usage: %s calibrate --device cuda -o PROFILE.json [--base PROFILE] [--gpu N] [--name NAME]\n"
            "  times cuBLAS GEMMs (fp32, bf16, fp16; square sizes up to 16384), a device-to-device copy and\n"
            "  back-to-back kernel launches on one GPU, and writes the base profile (default: the built-in\n"
            "  profile matching the GPU's name and memory) with the measured gemm_peak_fraction,\n"
            "  mem_bw_fraction, op_overhead_s, sm_count and device_mem_bytes (docs/hardware.md)\n",
            prog);
    return f == stdout ? 0 : 2;
}

static int calg_parse(const char *prog, int argc, char **argv, calg_args *a) {
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--device")) {   /* "cuda": how the caller got here */
            i++;
            continue;
        }
        const char **slot = !strcmp(k, "-o") ? &a->out : !strcmp(k, "--base") ? &a->base
                          : !strcmp(k, "--name") ? &a->name : NULL;
        if (!slot && strcmp(k, "--gpu")) {
            fprintf(stderr, "%s: calibrate: unknown option '%s' for --device cuda (usage: %s calibrate --device cuda "
                            "-o PROFILE.json [--base PROFILE] [--gpu N] [--name NAME])\n", prog, k, prog);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: calibrate: %s needs a value\n", prog, k);
            return 2;
        }
        if (slot) *slot = argv[++i];
        else {
            char *end;
            errno = 0;
            long long v = strtoll(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || v < 0 || v > INT32_MAX) {
                fprintf(stderr, "%s: calibrate: --gpu expects an integer >= 0 (a GPU index), got '%s'\n", prog, argv[i]);
                return 2;
            }
            a->gpu = v;
        }
    }
    if (!a->out) {
        fprintf(stderr, "%s: calibrate: -o PATH is required (example: -o configs/hardware/local-gpu.json)\n", prog);
        return 2;
    }
    if (a->name && (!a->name[0] || strlen(a->name) >= sizeof(((dt_hardware *)0)->name))) {
        fprintf(stderr, "%s: calibrate: --name '%s': give 1 to %zu characters\n", prog, a->name,
                sizeof(((dt_hardware *)0)->name) - 1);
        return 2;
    }
    return 0;
}

static void set_num(cJSON *o, const char *key, double v) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddNumberToObject(o, key, v);
}
static void set_str(cJSON *o, const char *key, const char *v) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddStringToObject(o, key, v);
}

/* The base profile's JSON with the measured fields; NULL with err set. */
static char *calg_profile(const calg_args *a, const char *base_name, const dt_hardware *base, const dt_gpucal *m,
                          const double frac[3], double bw_frac, dt_error *err) {
    char *text = dt_hardware_text(base_name, err);
    cJSON *o = NULL;
    if (!text || dt_json_parse(text, base_name, &o, err)) {
        free(text);
        return NULL;
    }
    free(text);
    char name[64], src[1200], day[32];
    snprintf(name, sizeof name, "%s", a->name ? a->name : "local-gpu");
    time_t now = time(NULL);
    struct tm tmv;
    strftime(day, sizeof day, "%Y-%m-%d", gmtime_r(&now, &tmv));
    snprintf(src, sizeof src,
             DT_CALIBRATE_SOURCE_PREFIX " --device cuda on GPU %d '%s' (%d SMs, %.1f GiB), %s: cuBLAS GEMMs with fp32 "
             "accumulation, best square size's median of %d (fp32 N=%lld, bf16 N=%lld, fp16 N=%lld); a %lld MiB "
             "device-to-device copy; empty kernels back to back; the rest is profile %s's",
             m->ordinal, m->gpu_name, m->sm_count, (double)m->total_mem_bytes / 1073741824.0, day, m->reps,
             (long long)m->gemm_n[0], (long long)m->gemm_n[1], (long long)m->gemm_n[2],
             (long long)(m->copy_bytes >> 20), base->name);
    cJSON *gf = cJSON_CreateObject();
    for (int t = 0; t < 3; t++) cJSON_AddNumberToObject(gf, dt_dtype_name((dt_dtype)t), frac[t]);
    set_str(o, "name", name);
    set_str(o, "source", src);
    set_num(o, "device_mem_bytes", (double)m->total_mem_bytes);
    set_num(o, "sm_count", (double)m->sm_count);
    set_num(o, "op_overhead_s", m->launch_s);
    set_num(o, "mem_bw_fraction", bw_frac);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "gemm_peak_fraction");
    cJSON_AddItemToObject(o, "gemm_peak_fraction", gf);
    char *out = dt_json_print(o);
    cJSON_Delete(o);
    if (!out) dt_errorf(err, DT_ENOMEM, "calibrate: out of memory printing the profile");
    return out;
}

static void calg_report(const char *prog, const char *out, const char *base_name, const dt_hardware *base,
                        const dt_gpucal *m, const double frac[3], double bw_frac) {
    printf("%s: calibrate: GPU %d '%s', %d SMs, %.1f GiB; base profile %s\n", prog, m->ordinal, m->gpu_name,
           m->sm_count, (double)m->total_mem_bytes / 1073741824.0, base_name);
    for (int t = 0; t < 3; t++) {
        const char *dn = dt_dtype_name((dt_dtype)t);
        if (m->gemm_flops[t] <= 0) printf("%s: calibrate: GEMM %s: not available on this GPU\n", prog, dn);
        else
            printf("%s: calibrate: GEMM %s %.1f TFLOP/s at N=%lld = %.3f of the peak %.1f (time model default %.2f)\n",
                   prog, dn, m->gemm_flops[t] / 1e12, (long long)m->gemm_n[t], frac[t], base->peak_flops[t] / 1e12,
                   DT_GEMM_PEAK_CAP);
    }
    printf("%s: calibrate: copy %.0f GB/s = %.3f of %.0f GB/s (default %.2f); kernel launch %.2f us (default %.2f)\n",
           prog, m->copy_bw / 1e9, bw_frac, base->mem_bw / 1e9, DT_HBM_EFFICIENCY, m->launch_s * 1e6,
           DT_GPU_LAUNCH_S * 1e6);
    printf("%s: calibrate: wrote %s\n", prog, out);
}

int dt_cmd_calibrate_gpu(const char *prog, int argc, char **argv) {
    calg_args a;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return calg_usage(prog, stdout);
    int rc = calg_parse(prog, argc, argv, &a);
    if (rc || (rc = dt_calibrate_check_out(prog, a.out))) return rc;
    dt_error e = {0};
    dt_hardware base;
    if (a.base && dt_hardware_load(a.base, NULL, &base, &e)) return calg_fail(prog, &e);
    if (a.base && base.device != DT_DEVICE_CUDA) {
        fprintf(stderr, "%s: calibrate: --base %s is a CPU profile; give the GPU's datasheet profile (e.g. "
                        "H100-SXM-80GB)\n", prog, a.base);
        return 2;
    }
    fprintf(stderr, "%s: calibrate: timing GEMMs, a copy and kernel launches on GPU %lld (about a minute) ...\n",
            prog, (long long)a.gpu);
    dt_gpucal m;
    if (dt_gpucal_measure((int)a.gpu, &m, &e)) return calg_fail(prog, &e);
    char matched[64];
    const char *base_name = a.base;
    if (!base_name) {
        if (dt_gpucal_match_profile(m.gpu_name, m.total_mem_bytes, matched, sizeof matched, &e) ||
            dt_hardware_load(matched, NULL, &base, &e))
            return calg_fail(prog, &e);
        base_name = matched;
    }
    double frac[3], bw_frac;
    if (dt_gpucal_fractions(&m, &base, frac, &bw_frac, &e)) return calg_fail(prog, &e);
    char *text = calg_profile(&a, base_name, &base, &m, frac, bw_frac, &e);
    dt_hardware check;
    if (!text || dt_hardware_parse(text, a.out, &check, &e) || dt_json_write_file_atomic(a.out, text, &e)) {
        free(text);
        return calg_fail(prog, &e);
    }
    free(text);
    calg_report(prog, a.out, base_name, &base, &m, frac, bw_frac);
    return 0;
}
