/* test_gpucal.c — the host side of GPU calibration (engine/device/dt_gpucal.h), on the CPU:
 * which built-in profile a GPU's name and memory select, the fractions against a base
 * profile and their refusals; and, where no GPU can be used, that measuring fails with one
 * reason instead of figures. The measuring itself is tests/gpu/test_calibrate_gpu.sh. */
#include <string.h>

#include "dt_gpucal.h"
#include "dt_test.h"

#define GIB (INT64_C(1) << 30)

int main(void) {
    dt_error err;
    char name[64];
    /* names as cudaGetDeviceProperties reports them, memory as cudaMemGetInfo does */
    const struct { const char *gpu; int64_t mem; const char *want; } ok[] = {
        {"NVIDIA H100 80GB HBM3", 79 * GIB + GIB / 2, "H100-SXM-80GB"},
        {"NVIDIA A100-SXM4-80GB", 79 * GIB, "A100-80GB"},
        {"NVIDIA A100-SXM4-40GB", 39 * GIB + GIB / 2, "A100-40GB"},
        {"NVIDIA H200", 139 * GIB, "H200"},
        {"Tesla V100-SXM2-32GB", 31 * GIB + GIB / 2, "V100-32GB"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        CHECK(dt_gpucal_match_profile(ok[i].gpu, ok[i].mem, name, sizeof name, &err) == DT_OK);
        CHECK_STR(name, ok[i].want);
    }
    /* no profile of that board or size: refused, naming the GPU and the way out */
    const struct { const char *gpu; int64_t mem; } none[] = {
        {"NVIDIA H100 PCIe", 79 * GIB},          /* a PCIe board: its peak is not the SXM profile's */
        {"NVIDIA H100 NVL", 93 * GIB},
        {"Tesla V100-PCIE-16GB", 15 * GIB},
        {"NVIDIA GeForce RTX 4090", 23 * GIB},   /* no profile of its family */
        {"NVIDIA A100-SXM4-80GB", 60 * GIB},     /* memory far from both A100 profiles */
    };
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        CHECK(dt_gpucal_match_profile(none[i].gpu, none[i].mem, name, sizeof name, &err) == DT_EINVAL);
        CHECK(strstr(err.msg, none[i].gpu) && strstr(err.msg, "--base") && strstr(err.msg, "H100-SXM-80GB"));
    }

    /* fractions of the datasheet figures */
    dt_hardware h100, cpu;
    CHECK(dt_hardware_load("H100-SXM-80GB", NULL, &h100, &err) == DT_OK);
    CHECK(dt_hardware_load("cpu", NULL, &cpu, &err) == DT_OK);
    dt_gpucal m;
    memset(&m, 0, sizeof m);
    snprintf(m.gpu_name, sizeof m.gpu_name, "NVIDIA H100 80GB HBM3");
    m.gemm_flops[DT_DTYPE_FP32] = 0.5 * h100.peak_flops[DT_DTYPE_FP32];
    m.gemm_flops[DT_DTYPE_BF16] = 0.75 * h100.peak_flops[DT_DTYPE_BF16];
    m.gemm_flops[DT_DTYPE_FP16] = 0;   /* cuBLAS refused it */
    m.copy_bw = 0.9 * h100.mem_bw;
    double frac[3], bw;
    CHECK(dt_gpucal_fractions(&m, &h100, frac, &bw, &err) == DT_OK);
    CHECK_NEAR(frac[DT_DTYPE_FP32], 0.5, 1e-12);
    CHECK_NEAR(frac[DT_DTYPE_BF16], 0.75, 1e-12);
    CHECK(frac[DT_DTYPE_FP16] == 0);
    CHECK_NEAR(bw, 0.9, 1e-12);
    /* faster than the base's datasheet: the base is another device's */
    m.gemm_flops[DT_DTYPE_BF16] = 1.1 * h100.peak_flops[DT_DTYPE_BF16];
    CHECK(dt_gpucal_fractions(&m, &h100, frac, &bw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "bf16") && strstr(err.msg, "--base"));
    m.gemm_flops[DT_DTYPE_BF16] = 0.75 * h100.peak_flops[DT_DTYPE_BF16];
    m.copy_bw = 1.2 * h100.mem_bw;
    CHECK(dt_gpucal_fractions(&m, &h100, frac, &bw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "GB/s") && strstr(err.msg, "--base"));
    /* a CPU profile as the base */
    m.copy_bw = 0.9 * h100.mem_bw;
    CHECK(dt_gpucal_fractions(&m, &cpu, frac, &bw, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "CPU profile") != NULL);

    /* measuring without a usable GPU: an error that says why, no figures */
    dt_gpucal got;
    int rc = dt_gpucal_measure(0, &got, &err);
    if (rc != DT_OK) {
        CHECK(rc == DT_ERUNTIME && strstr(err.msg, "cuda") != NULL);
        CHECK(got.gemm_flops[0] == 0 && got.copy_bw == 0);
    } else {   /* a GPU is there: the figures are physical */
        CHECK(got.gemm_flops[DT_DTYPE_FP32] > 0 && got.copy_bw > 0 && got.launch_s > 0 && got.sm_count > 0);
    }
    TEST_MAIN_END();
}
