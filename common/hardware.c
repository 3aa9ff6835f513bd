/* hardware.c — hardware profiles: configs/hardware/ (one .json per profile), built into the binary
 * (cmake/EmbedFiles.cmake) or read from a path. Format "dtplan.hardware/1",
 * every field required, unknown keys rejected; numbers and their sources are in
 * docs/hardware.md. */
#include "dt_hardware.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dt_json.h"

#define DT_HARDWARE_FORMAT "dtplan.hardware/1"

typedef struct { const char *name; const char *text; } dt_embedded_file;
extern const dt_embedded_file dt_hardware_files[];
extern const int dt_hardware_files_count;

int dt_hardware_catalog_count(void) { return dt_hardware_files_count; }

const char *dt_hardware_catalog_name(int i) {
    if (i < 0 || i >= dt_hardware_files_count) return NULL;
    return dt_hardware_files[i].name;
}

static int str_ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

/* ---- strict field readers (what names the source, e.g. the profile name) ---- */

static const char *const k_top_keys[] = {
    "format", "name", "device", "device_mem_bytes", "reserve_bytes", "peak_flops",
    "achievable_flops", "mem_bw", "intra_busbw", "intra_alpha_s", "default_interconnect",
    "interconnects", "h2d_bw", "host_mem_bytes", "cpu_adam_params_per_s", "nvme_bw",
    "nvme_bytes", "source", "attention_flops", "op_overhead_s", "elementwise_bw", "sm_count",
    "runtime_bytes", "runtime_mpi_bytes", "torch_runtime_bytes", "deepspeed_runtime_bytes", "thread_efficiency", "thread_cores", "intra_busbw_reduce_scatter",
    "intra_busbw_allgather", "gemm_peak_fraction", "mem_bw_fraction"};
static const char *const k_dtype_keys[] = {"fp32", "bf16", "fp16"};
static const char *const k_net_keys[] = {"busbw", "alpha_s"};

static int check_keys(const cJSON *obj, const char *const *keys, int n, const char *what,
                      const char *path, dt_error *err) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        int ok = 0;
        for (int i = 0; i < n; i++)
            if (it->string && !strcmp(it->string, keys[i])) ok = 1;
        if (!ok)
            return dt_errorf(err, DT_EINVAL, "hardware profile %s: %s.%s: unknown key", what, path,
                             it->string ? it->string : "?");
    }
    return DT_OK;
}

static int get_num(const cJSON *obj, const char *key, int allow_zero, const char *what,
                   const char *path, double *out, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return dt_errorf(err, DT_EINVAL, "hardware profile %s: %s.%s: missing", what, path, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
        (!allow_zero && v->valuedouble == 0))
        return dt_errorf(err, DT_EINVAL, "hardware profile %s: %s.%s: expected a %s number", what,
                         path, key, allow_zero ? "non-negative" : "positive");
    *out = v->valuedouble;
    return DT_OK;
}

static int get_bytes(const cJSON *obj, const char *key, const char *what, int64_t *out,
                     dt_error *err) {
    double d = 0;
    if (get_num(obj, key, 0, what, "$", &d, err)) return err->code;
    /* 2^62: keeps later byte sums far from int64 overflow */
    if (d != floor(d) || d > 4611686018427387904.0)
        return dt_errorf(err, DT_EINVAL, "hardware profile %s: $.%s: expected an integer byte count",
                         what, key);
    *out = (int64_t)d;
    return DT_OK;
}

/* absent: zeros; one byte count: every stage; an array: one per ZeRO stage 0..3 */
static int get_stage_bytes(const cJSON *obj, const char *key, const char *what, int64_t out[DT_HW_STAGES],
                           dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return DT_OK;
    const int one = cJSON_IsNumber(v);
    if (!one && (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != DT_HW_STAGES))
        return dt_errorf(err, DT_EINVAL, "hardware profile %s: $.%s: expected a byte count or %d of them (ZeRO "
                         "stages 0..3)", what, key, DT_HW_STAGES);
    for (int s = 0; s < DT_HW_STAGES; s++) {
        const cJSON *e = one ? v : cJSON_GetArrayItem(v, s);
        const double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        /* 2^62: keeps later byte sums far from int64 overflow */
        if (!isfinite(d) || d < 0 || d != floor(d) || d > 4611686018427387904.0)
            return dt_errorf(err, DT_EINVAL, "hardware profile %s: $.%s[%d]: expected an integer byte count", what,
                             key, s);
        out[s] = (int64_t)d;
    }
    return DT_OK;
}

static int get_str(const cJSON *obj, const char *key, const char *what, char *buf, size_t n,
                   dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return dt_errorf(err, DT_EINVAL, "hardware profile %s: $.%s: missing", what, key);
    if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) >= n)
        return dt_errorf(err, DT_EINVAL,
                         "hardware profile %s: $.%s: expected a non-empty string under %zu chars",
                         what, key, n);
    snprintf(buf, n, "%s", v->valuestring);
    return DT_OK;
}

static int get_dtype_table(const cJSON *root, const char *key, const char *what, double out[3],
                           dt_error *err) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, key);
    char path[64];
    snprintf(path, sizeof path, "$.%s", key);
    if (!cJSON_IsObject(t))
        return dt_errorf(err, DT_EINVAL,
                         "hardware profile %s: %s: expected an object {\"fp32\", \"bf16\", \"fp16\"}",
                         what, path);
    if (check_keys(t, k_dtype_keys, 3, what, path, err)) return err->code;
    /* indexed by dt_dtype: fp32, bf16, fp16; 0 = the device has no such arithmetic */
    for (int i = 0; i < 3; i++)
        if (get_num(t, k_dtype_keys[i], 1, what, path, &out[i], err)) return err->code;
    return DT_OK;
}

/* The optional measured GPU fractions: each in [0, 1] (0 = not measured; above 1 would mean a
 * rate beyond the datasheet's, i.e. a profile for another device). */
static int get_fractions(const cJSON *root, const char *what, dt_hardware *hw, dt_error *err) {
    if (cJSON_GetObjectItemCaseSensitive(root, "gemm_peak_fraction") &&
        get_dtype_table(root, "gemm_peak_fraction", what, hw->gemm_peak_fraction, err))
        return err->code;
    if (cJSON_GetObjectItemCaseSensitive(root, "mem_bw_fraction") &&
        get_num(root, "mem_bw_fraction", 1, what, "$", &hw->mem_bw_fraction, err))
        return err->code;
    for (int i = 0; i < 3; i++)
        if (hw->gemm_peak_fraction[i] > 1.0)
            return dt_errorf(err, DT_EINVAL,
                             "hardware profile %s: $.gemm_peak_fraction.%s: %g is above 1 (a GEMM faster than "
                             "peak_flops.%s: the peak is another device's; recalibrate with the right --base)",
                             what, k_dtype_keys[i], hw->gemm_peak_fraction[i], k_dtype_keys[i]);
    if (hw->mem_bw_fraction > 1.0)
        return dt_errorf(err, DT_EINVAL,
                         "hardware profile %s: $.mem_bw_fraction: %g is above 1 (a copy faster than mem_bw: the "
                         "bandwidth is another device's; recalibrate with the right --base)", what, hw->mem_bw_fraction);
    return DT_OK;
}

/* "100", "100G", "100Gb", "100gbps", "100Gb/s" -> "100gb"; "8x400Gb" -> "8x400gb". */
static void normalise_link(const char *s, char *out, size_t n) {
    size_t j = 0;
    for (; *s && j + 1 < n; s++) out[j++] = (char)tolower((unsigned char)*s);
    out[j] = '\0';
    static const char *const suffixes[] = {"gbit/s", "gb/s", "gbps", "gbit", "gb", "g"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t ls = strlen(suffixes[i]);
        if (j > ls && !strcmp(out + j - ls, suffixes[i])) {
            out[j - ls] = '\0';
            break;
        }
    }
    snprintf(out + strlen(out), n - strlen(out), "gb");
}

static int select_interconnect(const cJSON *root, const char *want, const char *what,
                               dt_hardware *hw, dt_error *err) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "interconnects");
    if (!cJSON_IsObject(t) || !t->child)
        return dt_errorf(err, DT_EINVAL,
                         "hardware profile %s: $.interconnects: expected a non-empty object", what);
    char list[256] = "", wn[48], kn[48];
    normalise_link(want, wn, sizeof wn);
    const cJSON *hit = NULL;
    for (const cJSON *it = t->child; it; it = it->next) {
        char path[96];
        snprintf(path, sizeof path, "$.interconnects.%s", it->string);
        if (!cJSON_IsObject(it))
            return dt_errorf(err, DT_EINVAL, "hardware profile %s: %s: expected an object", what,
                             path);
        if (check_keys(it, k_net_keys, 2, what, path, err)) return err->code;
        double bw, a;
        if (get_num(it, "busbw", 0, what, path, &bw, err) ||
            get_num(it, "alpha_s", 1, what, path, &a, err))
            return err->code;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "",
                 it->string);
        normalise_link(it->string, kn, sizeof kn);
        if (!strcmp(kn, wn)) hit = it;
    }
    if (!hit)
        return dt_errorf(err, DT_EINVAL, "--interconnect: hardware profile %s has no interconnect '%s' (choose one of: %s)",
                         what, want, list);
    if (strlen(hit->string) >= sizeof hw->interconnect)
        return dt_errorf(err, DT_EINVAL, "hardware profile %s: interconnect name too long", what);
    snprintf(hw->interconnect, sizeof hw->interconnect, "%s", hit->string);
    hw->inter_busbw = cJSON_GetObjectItemCaseSensitive(hit, "busbw")->valuedouble;
    hw->inter_alpha_s = cJSON_GetObjectItemCaseSensitive(hit, "alpha_s")->valuedouble;
    return DT_OK;
}

/* Parses profile JSON text; what names it in messages. */
static int parse_profile(const char *text, const char *what, const char *interconnect,
                         dt_hardware *hw, dt_error *err) {
    cJSON *root = NULL;
    int rc = dt_json_parse(text, what, &root, err);   /* strict JSON, duplicate keys refused */
    if (rc) return dt_error_prefix(err, "hardware profile");
    memset(hw, 0, sizeof *hw);
    char fmt[32], dev[16], def_link[32];
    if (!cJSON_IsObject(root)) {
        rc = dt_errorf(err, DT_EINVAL, "hardware profile %s: expected a JSON object", what);
        goto done;
    }
    if ((rc = check_keys(root, k_top_keys, (int)(sizeof k_top_keys / sizeof k_top_keys[0]), what,
                         "$", err)))
        goto done;
    if ((rc = get_str(root, "format", what, fmt, sizeof fmt, err))) goto done;
    if (strcmp(fmt, DT_HARDWARE_FORMAT)) {
        rc = dt_errorf(err, DT_EINVAL, "hardware profile %s: $.format: expected \"%s\", got \"%s\"",
                       what, DT_HARDWARE_FORMAT, fmt);
        goto done;
    }
    if ((rc = get_str(root, "name", what, hw->name, sizeof hw->name, err))) goto done;
    if ((rc = get_str(root, "device", what, dev, sizeof dev, err))) goto done;
    if (!strcmp(dev, "cuda")) hw->device = DT_DEVICE_CUDA;
    else if (!strcmp(dev, "cpu")) hw->device = DT_DEVICE_CPU;
    else {
        rc = dt_errorf(err, DT_EINVAL, "hardware profile %s: $.device: expected \"cuda\" or \"cpu\"",
                       what);
        goto done;
    }
    if ((rc = get_bytes(root, "device_mem_bytes", what, &hw->device_mem_bytes, err)) ||
        (rc = get_bytes(root, "reserve_bytes", what, &hw->reserve_bytes, err)) ||
        (rc = get_bytes(root, "host_mem_bytes", what, &hw->host_mem_bytes, err)) ||
        (rc = get_bytes(root, "nvme_bytes", what, &hw->nvme_bytes, err)) ||
        (rc = get_dtype_table(root, "peak_flops", what, hw->peak_flops, err)) ||
        (rc = get_dtype_table(root, "achievable_flops", what, hw->achievable_flops, err)) ||
        (rc = get_num(root, "mem_bw", 0, what, "$", &hw->mem_bw, err)) ||
        (rc = get_num(root, "intra_busbw", 0, what, "$", &hw->intra_busbw, err)) ||
        (rc = get_num(root, "intra_alpha_s", 1, what, "$", &hw->intra_alpha_s, err)) ||
        (rc = get_num(root, "h2d_bw", 0, what, "$", &hw->h2d_bw, err)) ||
        (rc = get_num(root, "cpu_adam_params_per_s", 0, what, "$", &hw->cpu_adam_params_per_s, err)) ||
        (rc = get_num(root, "nvme_bw", 0, what, "$", &hw->nvme_bw, err)) ||
        (rc = get_str(root, "default_interconnect", what, def_link, sizeof def_link, err)))
        goto done;
    /* optional kernel-level terms: absent = 0 (docs/time-model.md) */
    if ((cJSON_GetObjectItemCaseSensitive(root, "attention_flops") &&
         (rc = get_num(root, "attention_flops", 1, what, "$", &hw->attention_flops, err))) ||
        (cJSON_GetObjectItemCaseSensitive(root, "op_overhead_s") &&
         (rc = get_num(root, "op_overhead_s", 1, what, "$", &hw->op_overhead_s, err))) ||
        (cJSON_GetObjectItemCaseSensitive(root, "elementwise_bw") &&
         (rc = get_num(root, "elementwise_bw", 1, what, "$", &hw->elementwise_bw, err))) ||
        (cJSON_GetObjectItemCaseSensitive(root, "sm_count") &&
         (rc = get_num(root, "sm_count", 1, what, "$", &hw->sm_count, err))) ||
        (cJSON_GetObjectItemCaseSensitive(root, "runtime_bytes") &&
         (rc = get_bytes(root, "runtime_bytes", what, &hw->runtime_bytes, err))) ||
        (cJSON_GetObjectItemCaseSensitive(root, "runtime_mpi_bytes") &&
         (rc = get_bytes(root, "runtime_mpi_bytes", what, &hw->runtime_mpi_bytes, err))) ||
        (rc = get_stage_bytes(root, "torch_runtime_bytes", what, hw->torch_runtime_bytes, err)) ||
        (rc = get_stage_bytes(root, "deepspeed_runtime_bytes", what, hw->deepspeed_runtime_bytes, err)) ||
        (cJSON_GetObjectItemCaseSensitive(root, "thread_efficiency") &&
         (rc = get_num(root, "thread_efficiency", 0, what, "$", &hw->thread_efficiency, err))) ||
        (cJSON_GetObjectItemCaseSensitive(root, "thread_cores") &&
         (rc = get_num(root, "thread_cores", 0, what, "$", &hw->thread_cores, err))) ||
        (cJSON_GetObjectItemCaseSensitive(root, "intra_busbw_reduce_scatter") &&
         (rc = get_num(root, "intra_busbw_reduce_scatter", 0, what, "$", &hw->intra_busbw_rs, err))) ||
        (cJSON_GetObjectItemCaseSensitive(root, "intra_busbw_allgather") &&
         (rc = get_num(root, "intra_busbw_allgather", 0, what, "$", &hw->intra_busbw_ag, err))))
        goto done;
    /* both or neither; a fraction in (0, 1] measured with a whole number >= 2 of threads */
    if ((hw->thread_efficiency > 0) != (hw->thread_cores > 0) || hw->thread_efficiency > 1 ||
        (hw->thread_cores > 0 && (hw->thread_cores < 2 || hw->thread_cores != floor(hw->thread_cores)))) {
        rc = dt_errorf(err, DT_EINVAL,
                       "hardware profile %s: thread_efficiency %g with thread_cores %g: give both, an efficiency "
                       "in (0, 1] and a whole number of threads >= 2 (dtplan calibrate writes them)",
                       what, hw->thread_efficiency, hw->thread_cores);
        goto done;
    }
    if ((rc = get_fractions(root, what, hw, err))) goto done;
    if (hw->sm_count != floor(hw->sm_count) || hw->sm_count > 1e6) {
        rc = dt_errorf(err, DT_EINVAL, "hardware profile %s: $.sm_count: expected a whole number of SMs, got %g",
                       what, hw->sm_count);
        goto done;
    }
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "source");
    if (src && !cJSON_IsString(src)) {
        rc = dt_errorf(err, DT_EINVAL, "hardware profile %s: $.source: expected a string", what);
        goto done;
    }
    if (hw->reserve_bytes >= hw->device_mem_bytes) {
        rc = dt_errorf(err, DT_EINVAL,
                       "hardware profile %s: reserve_bytes (%lld) must be below device_mem_bytes (%lld)",
                       what, (long long)hw->reserve_bytes, (long long)hw->device_mem_bytes);
        goto done;
    }
    for (int i = 0; i < 3; i++) {
        if (hw->achievable_flops[i] > hw->peak_flops[i]) {
            rc = dt_errorf(err, DT_EINVAL,
                           "hardware profile %s: achievable_flops.%s exceeds peak_flops.%s", what,
                           k_dtype_keys[i], k_dtype_keys[i]);
            goto done;
        }
    }
    if (hw->achievable_flops[DT_DTYPE_FP32] <= 0) {
        rc = dt_errorf(err, DT_EINVAL, "hardware profile %s: achievable_flops.fp32 must be positive",
                       what);
        goto done;
    }
    rc = select_interconnect(root, interconnect ? interconnect : def_link, what, hw, err);
done:
    cJSON_Delete(root);
    return rc;
}

static int looks_like_path(const char *s) {
    size_t n = strlen(s);
    return strchr(s, '/') != NULL || (n > 5 && str_ieq(s + n - 5, ".json"));
}

int dt_hardware_load(const char *name_or_path, const char *interconnect, dt_hardware *out,
                     dt_error *err) {
    if (!name_or_path || !name_or_path[0])
        return dt_errorf(err, DT_EINVAL, "empty --hardware (try: H100-SXM-80GB, cpu, or a profile .json path)");
    if (looks_like_path(name_or_path)) {
        char *text = NULL;
        if (dt_json_read_file(name_or_path, &text, NULL, err)) {
            err->code = DT_EINVAL;   /* a --hardware path that cannot be read is bad input */
            return dt_error_prefix(err, "--hardware");
        }
        int rc = parse_profile(text, name_or_path, interconnect, out, err);
        free(text);
        /* the file the user named: say which option (the link is --interconnect's) */
        if (rc && err && strncmp(err->msg, "--interconnect", 14)) dt_error_prefix(err, "--hardware");
        return rc;
    }
    for (int i = 0; i < dt_hardware_files_count; i++)
        if (str_ieq(dt_hardware_files[i].name, name_or_path))
            return parse_profile(dt_hardware_files[i].text, dt_hardware_files[i].name, interconnect,
                                 out, err);
    char list[512] = "";
    for (int i = 0; i < dt_hardware_files_count; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 dt_hardware_files[i].name);
    return dt_errorf(err, DT_EINVAL, "--hardware: unknown hardware '%s' (built-in profiles: %s; or a .json path)",
                     name_or_path, list);
}

int dt_hardware_parse(const char *text, const char *what, dt_hardware *out, dt_error *err) {
    return parse_profile(text, what, NULL, out, err);
}

char *dt_hardware_text(const char *name_or_path, dt_error *err) {
    dt_hardware h;
    if (dt_hardware_load(name_or_path, NULL, &h, err)) return NULL;
    char *text = NULL;
    if (looks_like_path(name_or_path)) {
        if (dt_json_read_file(name_or_path, &text, NULL, err)) return NULL;
        return text;
    }
    for (int i = 0; i < dt_hardware_files_count; i++)
        if (str_ieq(dt_hardware_files[i].name, name_or_path)) {
            text = strdup(dt_hardware_files[i].text);
            if (!text) dt_errorf(err, DT_ENOMEM, "hardware profile %s: out of memory", name_or_path);
            return text;
        }
    dt_errorf(err, DT_EINVAL, "--hardware: unknown hardware '%s'", name_or_path);
    return NULL;
}

void dt_hardware_mem_text(const dt_hardware *hw, char *buf, size_t n) {
    const int64_t bytes = hw->device_mem_bytes, gib = INT64_C(1) << 30, gb = INT64_C(1000000000);
    if (bytes % gib == 0) snprintf(buf, n, "%lldG", (long long)(bytes / gib));
    else if (bytes % gb == 0) snprintf(buf, n, "%lldGB", (long long)(bytes / gb));
    else if (bytes >= gib) snprintf(buf, n, "%lldG", (long long)(bytes / gib));
    else snprintf(buf, n, "%lldM", (long long)(bytes >> 20));
}

int dt_hardware_check_mem_limit(const dt_hardware *hw, int64_t limit, const char *flag, const char *text,
                                int suggest_hardware, dt_error *err) {
    if (limit <= hw->device_mem_bytes) return DT_OK;
    char have[32], bigger[160] = "";
    dt_hardware_mem_text(hw, have, sizeof have);
    /* the smallest built-in profile of the same device kind that holds the limit */
    int64_t best = 0;
    if (!suggest_hardware)
        return dt_errorf(err, DT_EINVAL, "%s %s is above the %.2f GiB per device of hardware profile %s; give %s %s or less",
                         flag, text, (double)hw->device_mem_bytes / 1073741824.0, hw->name, flag, have);
    for (int i = 0; i < dt_hardware_files_count; i++) {
        dt_hardware h;
        if (dt_hardware_load(dt_hardware_files[i].name, NULL, &h, NULL) || h.device != hw->device ||
            h.device_mem_bytes < limit || (best && h.device_mem_bytes >= best))
            continue;
        best = h.device_mem_bytes;
        snprintf(bigger, sizeof bigger, "--hardware %s (%.2f GiB)", h.name, (double)h.device_mem_bytes / 1073741824.0);
    }
    return dt_errorf(err, DT_EINVAL,
                     "%s %s is above the %.2f GiB per device of hardware profile %s; give %s %s or less, or %s",
                     flag, text, (double)hw->device_mem_bytes / 1073741824.0, hw->name, flag, have,
                     bigger[0] ? bigger : "--hardware with the .json profile of a device that has more memory");
}

double dt_hardware_sm_count(const dt_hardware *hw) {
    if (hw->sm_count > 0) return hw->sm_count;
    if (hw->device != DT_DEVICE_CUDA) return 0.0;
    /* a plan's hardware block does not carry sm_count: take the built-in profile's */
    for (int i = 0; i < dt_hardware_files_count; i++) {
        if (!str_ieq(dt_hardware_files[i].name, hw->name)) continue;
        cJSON *root = cJSON_Parse(dt_hardware_files[i].text);
        const cJSON *n = root ? cJSON_GetObjectItemCaseSensitive(root, "sm_count") : NULL;
        double v = cJSON_IsNumber(n) && n->valuedouble > 0 ? n->valuedouble : 0.0;
        cJSON_Delete(root);
        return v;
    }
    return 0.0;
}

int64_t dt_hardware_runtime_bytes(const dt_hardware *hw, int64_t world) {
    const int64_t measured = world > 1 && hw->runtime_mpi_bytes > 0 ? hw->runtime_mpi_bytes : hw->runtime_bytes;
    return measured > 0 ? measured : hw->reserve_bytes;
}

int64_t dt_hardware_hf_runtime_bytes(const dt_hardware *hw, int deepspeed, int stage) {
    const int64_t *v = deepspeed ? hw->deepspeed_runtime_bytes : hw->torch_runtime_bytes;
    if (stage >= 0) return stage < DT_HW_STAGES ? v[stage] : 0;
    int64_t most = 0;
    for (int s = 0; s < DT_HW_STAGES; s++) most = v[s] > most ? v[s] : most;
    return most;
}

int dt_hardware_is_measured(const dt_hardware *hw) {
    if (hw->device == DT_DEVICE_CPU) return hw->thread_efficiency > 0 || hw->runtime_bytes > 0;
    for (int t = 0; t < 3; t++)
        if (hw->gemm_peak_fraction[t] > 0) return 1;
    return hw->mem_bw_fraction > 0;
}
