/* test_hardware.c — built-in profiles load and are sane; interconnect selection;
 * bad profile files are rejected with a message naming the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_hardware.h"
#include "dt_test.h"

static const char *write_tmp(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", name);
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    return path;
}

/* A valid profile with one field replaced: fmt takes the replacement text. */
static const char *k_good =
    "{\"format\": \"dtplan.hardware/1\", \"name\": \"t\", \"device\": \"cpu\",\n"
    " \"device_mem_bytes\": %s, \"reserve_bytes\": 1024,\n"
    " \"peak_flops\": {\"fp32\": 1e11, \"bf16\": 1e11, \"fp16\": 1e11},\n"
    " \"achievable_flops\": {\"fp32\": %s, \"bf16\": 5e10, \"fp16\": 5e10},\n"
    " \"mem_bw\": 1e10, \"intra_busbw\": 1e9, \"intra_alpha_s\": 1e-5,\n"
    " \"default_interconnect\": \"10Gb\",\n"
    " \"interconnects\": {\"10Gb\": {\"busbw\": 1e9, \"alpha_s\": 5e-5}, \"100Gb\": {\"busbw\": 1.2e10, \"alpha_s\": 2e-5}},\n"
    " \"h2d_bw\": 1e10, \"host_mem_bytes\": 1073741824, \"cpu_adam_params_per_s\": 1e9,\n"
    " \"nvme_bw\": 1e9, \"nvme_bytes\": 1073741824%s}\n";

static int load_variant(const char *mem, const char *ach, const char *extra, const char *link,
                        dt_hardware *hw, dt_error *err) {
    char text[2048];
    snprintf(text, sizeof text, k_good, mem, ach, extra);
    const char *path = write_tmp("dt_test_profile.json", text);
    if (!path) return -1;
    return dt_hardware_load(path, link, hw, err);
}

int main(void) {
    dt_hardware hw;
    dt_error err;
    const char *required[] = {"H100-SXM-80GB", "H200", "A100-80GB", "A100-40GB", "V100-32GB", "cpu"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        dt_error_clear(&err);
        int rc = dt_hardware_load(required[i], NULL, &hw, &err);
        if (rc) fprintf(stderr, "%s: %s\n", required[i], err.msg);
        CHECK(rc == DT_OK);
        CHECK_STR(hw.name, required[i]);
        CHECK(hw.device_mem_bytes > hw.reserve_bytes && hw.reserve_bytes > 0);
        CHECK(hw.achievable_flops[DT_DTYPE_FP32] > 0);
        for (int t = 0; t < 3; t++) CHECK(hw.achievable_flops[t] <= hw.peak_flops[t]);
        CHECK(hw.mem_bw > 0 && hw.intra_busbw > 0 && hw.inter_busbw > 0 && hw.h2d_bw > 0);
        CHECK(hw.inter_busbw < hw.intra_busbw || !strcmp(required[i], "cpu"));
        /* every profile carries the five inter-node speeds the issue names */
        const char *links[] = {"10Gb", "25Gb", "100Gb", "200Gb", "400Gb"};
        double prev = 0;
        for (int l = 0; l < 5; l++) {
            CHECK(dt_hardware_load(required[i], links[l], &hw, &err) == DT_OK);
            CHECK_STR(hw.interconnect, links[l]);
            CHECK(hw.inter_busbw > prev); /* faster link, more bus bandwidth */
            prev = hw.inter_busbw;
        }
    }
    CHECK(dt_hardware_catalog_count() >= 6);
    /* case-insensitive names, and the interconnect spellings users type */
    CHECK(dt_hardware_load("h100-sxm-80gb", "100", &hw, &err) == DT_OK);
    CHECK_STR(hw.interconnect, "100Gb");
    CHECK_NEAR(hw.inter_busbw, 12e9, 1e-12); /* nccl-tests#29/#119: ~12 GB/s per 100 Gb/s NIC */
    CHECK(dt_hardware_load("H100-SXM-80GB", "400Gb/s", &hw, &err) == DT_OK);
    CHECK_STR(hw.interconnect, "400Gb");
    CHECK(dt_hardware_load("H100-SXM-80GB", "25gbps", &hw, &err) == DT_OK);
    CHECK_STR(hw.interconnect, "25Gb");
    /* datasheet anchors */
    CHECK(dt_hardware_load("H100-SXM-80GB", NULL, &hw, &err) == DT_OK);
    CHECK_NEAR(hw.peak_flops[DT_DTYPE_BF16], 989.4e12, 1e-12);
    CHECK_EQ_I64(hw.device_mem_bytes, 80LL << 30);
    CHECK(dt_hardware_load("V100-32GB", NULL, &hw, &err) == DT_OK);
    CHECK(hw.peak_flops[DT_DTYPE_BF16] == 0); /* Volta has no bf16 */

    /* errors name the thing and the fix */
    CHECK(dt_hardware_load("B200", NULL, &hw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "unknown hardware 'B200'") && strstr(err.msg, "H100-SXM-80GB"));
    CHECK(dt_hardware_load("H100-SXM-80GB", "3Gb", &hw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "no interconnect '3Gb'") && strstr(err.msg, "400Gb"));
    CHECK(dt_hardware_load("/nonexistent/x.json", NULL, &hw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "/nonexistent/x.json") != NULL);

    CHECK(load_variant("4294967296", "5e10", "", NULL, &hw, &err) == DT_OK);
    CHECK_STR(hw.interconnect, "10Gb");
    CHECK(load_variant("4294967296", "5e10", "", "100G", &hw, &err) == DT_OK);
    CHECK_NEAR(hw.inter_busbw, 1.2e10, 1e-12);
    CHECK(load_variant("4294967296", "5e10", ", \"colour\": 1", NULL, &hw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "$.colour: unknown key") != NULL);
    CHECK(load_variant("512", "5e10", "", NULL, &hw, &err) == DT_EINVAL); /* reserve >= memory */
    CHECK(strstr(err.msg, "reserve_bytes") != NULL);
    CHECK(load_variant("4294967296", "2e11", "", NULL, &hw, &err) == DT_EINVAL); /* achievable > peak */
    CHECK(strstr(err.msg, "achievable_flops.fp32") != NULL);
    CHECK(load_variant("-1", "5e10", "", NULL, &hw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "device_mem_bytes") != NULL);
    CHECK(load_variant("4294967296.5", "5e10", "", NULL, &hw, &err) == DT_EINVAL); /* not an integer */
    CHECK(load_variant("\"4G\"", "5e10", "", NULL, &hw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "device_mem_bytes") != NULL);
    const char *bad = write_tmp("dt_test_profile_bad.json", "{\"format\": \"dtplan.hardware/1\",");
    CHECK(bad && dt_hardware_load(bad, NULL, &hw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "invalid JSON") != NULL);
    /* optional kernel-level terms: absent = 0, present = read, negative = one clear error */
    CHECK(load_variant("1073741824", "5e10", "", NULL, &hw, &err) == DT_OK);
    CHECK(hw.attention_flops == 0 && hw.op_overhead_s == 0);
    CHECK(load_variant("1073741824", "5e10", ", \"attention_flops\": 7e9, \"op_overhead_s\": 2e-6", NULL, &hw,
                       &err) == DT_OK);
    CHECK_NEAR(hw.attention_flops, 7e9, 1e-12);
    CHECK_NEAR(hw.op_overhead_s, 2e-6, 1e-12);
    CHECK(load_variant("1073741824", "5e10", ", \"op_overhead_s\": -1", NULL, &hw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "op_overhead_s") != NULL);
    CHECK(load_variant("1073741824", "5e10", ", \"attention_flops\": \"fast\"", NULL, &hw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "attention_flops") != NULL);
    /* calibrate's threads-of-one-rank and per-collective fields: optional, checked when present */
    CHECK(load_variant("1073741824", "5e10", ", \"thread_efficiency\": 0.9, \"thread_cores\": 2, "
                       "\"intra_busbw_reduce_scatter\": 4.9e8, \"intra_busbw_allgather\": 2.9e9", NULL, &hw, &err) == DT_OK);
    CHECK_NEAR(hw.thread_efficiency, 0.9, 1e-12);
    CHECK_NEAR(hw.thread_cores, 2, 0);
    CHECK_NEAR(hw.intra_busbw_rs, 4.9e8, 1e-3);
    CHECK_NEAR(hw.intra_busbw_ag, 2.9e9, 1e-3);
    const char *bad_threads[] = {", \"thread_efficiency\": 0.9", ", \"thread_cores\": 2",
                                 ", \"thread_efficiency\": 1.5, \"thread_cores\": 2",
                                 ", \"thread_efficiency\": 0.9, \"thread_cores\": 1",
                                 ", \"thread_efficiency\": 0.9, \"thread_cores\": 2.5"};
    for (size_t i = 0; i < sizeof bad_threads / sizeof bad_threads[0]; i++) {
        CHECK(load_variant("1073741824", "5e10", bad_threads[i], NULL, &hw, &err) == DT_EINVAL);
        CHECK(strstr(err.msg, "thread_efficiency") && strstr(err.msg, "dtplan calibrate writes them"));
    }
    CHECK(load_variant("1073741824", "5e10", ", \"intra_busbw_reduce_scatter\": 0", NULL, &hw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "intra_busbw_reduce_scatter") != NULL);
    CHECK(load_variant("1073741824", "5e10", ", \"intra_busbw_allgather\": -1", NULL, &hw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "intra_busbw_allgather") != NULL);
    /* dtplan calibrate --device cuda's measured fractions: optional, each in [0, 1], all three dtypes */
    CHECK(load_variant("1073741824", "5e10", ", \"gemm_peak_fraction\": {\"fp32\": 0.9, \"bf16\": 0.75, "
                       "\"fp16\": 0}, \"mem_bw_fraction\": 0.91", NULL, &hw, &err) == DT_OK);
    CHECK(hw.gemm_peak_fraction[DT_DTYPE_FP32] == 0.9 && hw.gemm_peak_fraction[DT_DTYPE_BF16] == 0.75 &&
          hw.gemm_peak_fraction[DT_DTYPE_FP16] == 0 && hw.mem_bw_fraction == 0.91);
    const char *bad_frac[] = {", \"gemm_peak_fraction\": {\"fp32\": 1.2, \"bf16\": 0.7, \"fp16\": 0.7}",
                              ", \"gemm_peak_fraction\": {\"bf16\": 0.7}",
                              ", \"gemm_peak_fraction\": 0.8",
                              ", \"mem_bw_fraction\": 1.5", ", \"mem_bw_fraction\": -0.1"};
    const char *bad_frac_key[] = {"gemm_peak_fraction.fp32", "gemm_peak_fraction", "gemm_peak_fraction",
                                  "mem_bw_fraction", "mem_bw_fraction"};
    for (size_t i = 0; i < sizeof bad_frac / sizeof bad_frac[0]; i++) {
        CHECK(load_variant("1073741824", "5e10", bad_frac[i], NULL, &hw, &err) == DT_EINVAL);
        CHECK(strstr(err.msg, bad_frac_key[i]) != NULL);
    }
    CHECK(load_variant("1073741824", "5e10", ", \"mem_bw_fraction\": 1.5", NULL, &hw, &err) == DT_EINVAL &&
          strstr(err.msg, "recalibrate with the right --base"));
    /* a profile's text, built-in or from a file, parses to what loading gives */
    {
        char *text = dt_hardware_text("H100-SXM-80GB", &err);
        dt_hardware a, b;
        CHECK(text && dt_hardware_parse(text, "H100 text", &a, &err) == DT_OK);
        CHECK(dt_hardware_load("h100-sxm-80gb", NULL, &b, &err) == DT_OK);
        CHECK(text && a.sm_count == b.sm_count && a.peak_flops[1] == b.peak_flops[1] && !strcmp(a.name, b.name));
        free(text);
        CHECK(dt_hardware_text("no-such-gpu", &err) == NULL && strstr(err.msg, "no-such-gpu"));
        CHECK(dt_hardware_parse("{\"format\": 1}", "bad text", &a, &err) == DT_EINVAL && strstr(err.msg, "bad text"));
    }
    CHECK(dt_hardware_load("cpu", NULL, &hw, &err) == DT_OK);
    CHECK(hw.attention_flops > 0 && hw.op_overhead_s > 0 && hw.elementwise_bw > 0); /* the cpu profile states them */
    CHECK(load_variant("1073741824", "5e10", ", \"elementwise_bw\": 3e9", NULL, &hw, &err) == DT_OK);
    CHECK_NEAR(hw.elementwise_bw, 3e9, 1e-12);
    /* a profile is "measured" only by the fields dtplan calibrate writes */
    CHECK(dt_hardware_load("cpu", NULL, &hw, &err) == DT_OK && !dt_hardware_is_measured(&hw));
    CHECK(load_variant("1073741824", "5e10", ", \"thread_efficiency\": 0.8, \"thread_cores\": 2", NULL, &hw,
                       &err) == DT_OK && dt_hardware_is_measured(&hw));
    CHECK(load_variant("1073741824", "5e10", ", \"runtime_bytes\": 41943040", NULL, &hw, &err) == DT_OK &&
          dt_hardware_is_measured(&hw));
    CHECK(load_variant("1073741824", "5e10", ", \"mem_bw_fraction\": 0.9", NULL, &hw, &err) == DT_OK &&
          !dt_hardware_is_measured(&hw));   /* a GPU's fraction says nothing of a CPU */
    CHECK(dt_hardware_load("H100-SXM-80GB", NULL, &hw, &err) == DT_OK && !dt_hardware_is_measured(&hw));
    hw.gemm_peak_fraction[DT_DTYPE_BF16] = 0.7;
    CHECK(dt_hardware_is_measured(&hw));
    hw.gemm_peak_fraction[DT_DTYPE_BF16] = 0, hw.mem_bw_fraction = 0.9;
    CHECK(dt_hardware_is_measured(&hw));
    hw.mem_bw_fraction = 0, hw.runtime_bytes = 1 << 20;
    CHECK(!dt_hardware_is_measured(&hw));   /* a CPU field says nothing of a GPU */
    TEST_MAIN_END();
}
