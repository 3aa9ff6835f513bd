/* test_hf_cpu.c — `--runtime deepspeed | fsdp` on CPU ranks (issue 34 item 2): every term but
 * the reserve is the GPU code's, the reserve is the profile's measured footprint for the
 * plan's stage, offloaded states count in the rank's own total, a profile without the
 * measurement is refused, and the per-stage footprints survive the profile and plan
 * formats. */
#include <stdint.h>
#include <stdlib.h>

#include "dt_hardware.h"
#include "dt_memory.h"
#include "dt_test.h"
#include "plan_fixture.h"

#define MIB ((int64_t)1 << 20)
/* measured-looking footprints per ZeRO stage (distinct, so a wrong index shows) */
static const int64_t k_ds_foot[DT_HW_STAGES] = {780 * MIB, 830 * MIB, 831 * MIB, 850 * MIB};
static const int64_t k_torch_foot[DT_HW_STAGES] = {700 * MIB, 0, 720 * MIB, 721 * MIB};

static void hf_plan(dt_plan *p, const char *hw, dt_runtime_kind kind, int stage, dt_offload opt, dt_offload param) {
    dt_error e = {0};
    fixture_plan(p, "gpt2", 0, 2);
    CHECK(dt_hardware_load(hw, NULL, &p->cluster.hw, &e) == DT_OK);
    p->cluster.device = p->cluster.hw.device;
    p->cluster.hw.reserve_bytes = 0;
    for (int s = 0; s < DT_HW_STAGES; s++)
        p->cluster.hw.deepspeed_runtime_bytes[s] = k_ds_foot[s], p->cluster.hw.torch_runtime_bytes[s] = k_torch_foot[s];
    dt_plan_set_runtime(p, kind);
    p->parallel.zero_stage = stage;
    p->parallel.offload_optimizer = opt;
    p->parallel.offload_param = param;
    p->batch.micro_batch = 4, p->batch.grad_accum = 1, p->batch.global_batch = 8, p->batch.seq_len = 128;
}

static void phases(const dt_plan *p, dt_mem_phases *ph) {
    dt_error e = {0};
    int rc = dt_memory_phases(p, 0, ph, &e);
    if (rc) fprintf(stderr, "dt_memory_phases: %s\n", e.msg);
    CHECK(rc == DT_OK);
}

/* the same terms as the GPU run, the footprint as reserve, the host share in the total */
static void check_same_code(dt_runtime_kind kind, int stage, dt_offload opt, dt_offload param) {
    dt_plan cpu, gpu;
    hf_plan(&cpu, "cpu", kind, stage, opt, param);
    hf_plan(&gpu, "H100-SXM-80GB", kind, stage, opt, param);
    CHECK(dt_memory_hf_on_cpu(&cpu) && !dt_memory_hf_on_cpu(&gpu));
    dt_mem_phases c, g;
    phases(&cpu, &c);
    phases(&gpu, &g);
    const int64_t foot = kind == DT_RUNTIME_DEEPSPEED ? k_ds_foot[stage] : k_torch_foot[stage];
    for (int i = DT_MEM_PHASE_BWD_START; i < DT_MEM_PHASE_COUNT; i++) {
        const dt_mem_breakdown *a = &c.at[i], *b = &g.at[i];
        CHECK_EQ_I64(a->params, b->params);
        CHECK_EQ_I64(a->grads, b->grads);
        CHECK_EQ_I64(a->optimizer, b->optimizer);
        CHECK_EQ_I64(a->activations, b->activations);
        CHECK_EQ_I64(a->buffers, b->buffers);
        CHECK_EQ_I64(a->host_total, b->host_total);
        CHECK_EQ_I64(a->reserve, foot);
        const int64_t host_share = (a->host_total + cpu.cluster.gpus_per_node - 1) / cpu.cluster.gpus_per_node;
        CHECK_EQ_I64(a->total, a->params + a->grads + a->optimizer + a->activations + a->buffers + foot + host_share);
    }
}

static void test_terms(void) {
    for (int s = 0; s <= 3; s++) check_same_code(DT_RUNTIME_DEEPSPEED, s, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    check_same_code(DT_RUNTIME_DEEPSPEED, 2, DT_OFFLOAD_CPU, DT_OFFLOAD_NONE);
    check_same_code(DT_RUNTIME_DEEPSPEED, 3, DT_OFFLOAD_CPU, DT_OFFLOAD_CPU);
    check_same_code(DT_RUNTIME_FSDP, 0, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    check_same_code(DT_RUNTIME_FSDP, 3, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    /* offload really moves bytes into the rank's total: ZeRO-3 with everything offloaded */
    dt_plan p;
    hf_plan(&p, "cpu", DT_RUNTIME_DEEPSPEED, 3, DT_OFFLOAD_CPU, DT_OFFLOAD_CPU);
    dt_mem_phases ph;
    phases(&p, &ph);
    CHECK(ph.at[ph.peak].host_total > 0);
}

static void test_refused_without_footprint(void) {
    dt_plan p;
    dt_error e = {0};
    hf_plan(&p, "cpu", DT_RUNTIME_DEEPSPEED, 2, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK(dt_plan_validate(&p, &e) == DT_OK);
    memset(p.cluster.hw.deepspeed_runtime_bytes, 0, sizeof p.cluster.hw.deepspeed_runtime_bytes);
    CHECK(dt_plan_validate(&p, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "deepspeed_runtime_bytes") != NULL && strstr(e.msg, "validate_runtimes.sh") != NULL);
    hf_plan(&p, "cpu", DT_RUNTIME_FSDP, 3, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    memset(p.cluster.hw.torch_runtime_bytes, 0, sizeof p.cluster.hw.torch_runtime_bytes);
    CHECK(dt_plan_validate(&p, &e) == DT_EINVAL && strstr(e.msg, "torch_runtime_bytes") != NULL);
}

static const char *profile_with(const char *field) {
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"format\": \"dtplan.hardware/1\", \"name\": \"t\", \"device\": \"cpu\", \"device_mem_bytes\": "
             "4294967296, \"reserve_bytes\": 1, \"peak_flops\": {\"fp32\": 1e11, \"bf16\": 1e11, \"fp16\": 1e11}, "
             "\"achievable_flops\": {\"fp32\": 1e11, \"bf16\": 1e11, \"fp16\": 1e11}, \"mem_bw\": 1e10, "
             "\"intra_busbw\": 1e9, \"intra_alpha_s\": 1e-5, \"default_interconnect\": \"10Gb\", \"interconnects\": "
             "{\"10Gb\": {\"busbw\": 1e9, \"alpha_s\": 5e-5}}, \"h2d_bw\": 1e10, \"host_mem_bytes\": 17179869184, "
             "\"cpu_adam_params_per_s\": 1e8, \"nvme_bw\": 1e9, \"nvme_bytes\": 1e10%s}",
             field);
    return buf;
}

static void test_profile_and_plan_formats(void) {
    dt_hardware hw;
    dt_error e = {0};
    int rc = dt_hardware_parse(profile_with(", \"deepspeed_runtime_bytes\": [1, 2, 3, 4], \"torch_runtime_bytes\": 5"),
                               "t", &hw, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    CHECK(rc == DT_OK);
    CHECK_EQ_I64(dt_hardware_hf_runtime_bytes(&hw, 1, 2), 3);
    CHECK_EQ_I64(dt_hardware_hf_runtime_bytes(&hw, 1, -1), 4);
    CHECK_EQ_I64(dt_hardware_hf_runtime_bytes(&hw, 0, 1), 5);
    CHECK(dt_hardware_parse(profile_with(", \"deepspeed_runtime_bytes\": [1, 2, 3]"), "t", &hw, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "deepspeed_runtime_bytes") != NULL);
    CHECK(dt_hardware_parse(profile_with(", \"torch_runtime_bytes\": [1, 2, 3, 4.5]"), "t", &hw, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "torch_runtime_bytes[3]") != NULL);

    /* a plan keeps them */
    dt_plan p, q;
    hf_plan(&p, "cpu", DT_RUNTIME_DEEPSPEED, 3, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    char *text = dt_plan_to_json(&p, &e);
    CHECK(text != NULL);
    rc = text ? dt_plan_parse(text, &q, &e) : DT_EINVAL;
    if (rc) fprintf(stderr, "plan round trip: %s\n", e.msg);
    CHECK(rc == DT_OK);
    for (int s = 0; s < DT_HW_STAGES && rc == DT_OK; s++) {
        CHECK_EQ_I64(q.cluster.hw.deepspeed_runtime_bytes[s], k_ds_foot[s]);
        CHECK_EQ_I64(q.cluster.hw.torch_runtime_bytes[s], k_torch_foot[s]);
    }
    free(text);
}

int main(void) {
    test_terms();
    test_refused_without_footprint();
    test_profile_and_plan_formats();
    TEST_MAIN_END();
}
