/* test_gemm_model.c — the shape-aware GPU compute model (docs/time-model.md "Shape-aware
 * GPU compute"): wave quantisation, the roofline crossover, monotonicity in the
 * micro-batch, the switch (cuda + sm_count only; CPU plans untouched), plans read back
 * without sm_count, and the attention kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_hardware.h"
#include "dt_model.h"
#include "dt_test.h"
#include "dt_timemodel.h"

#define LAUNCH 3.8e-6   /* DT_GPU_LAUNCH_S */
#define CAP 0.80        /* DT_GEMM_PEAK_CAP */

static void setup(dt_plan *p, const char *model, const char *hw) {
    dt_error err;
    dt_plan_defaults(p);
    if (dt_model_resolve(model, &p->model, &err)) fprintf(stderr, "%s\n", err.msg);
    if (dt_hardware_load(hw, NULL, &p->cluster.hw, &err)) fprintf(stderr, "%s\n", err.msg);
    p->cluster.device = p->cluster.hw.device;
    p->cluster.nodes = 1;
    p->cluster.gpus_per_node = 1;
    p->parallel.world_size = 1;
    p->batch.micro_batch = 2;
    p->batch.grad_accum = 1;
    p->batch.global_batch = 2;
    p->batch.seq_len = 1024;
}

int main(void) {
    dt_plan p;
    dt_error err;
    dt_hardware a100;
    CHECK(dt_hardware_load("A100-80GB", NULL, &a100, &err) == DT_OK);
    CHECK(a100.sm_count == 108);
    const double peak = a100.peak_flops[DT_DTYPE_BF16], bw = a100.mem_bw, sm = a100.sm_count;

    /* ---- wave quantisation: 108 tiles of 128 x 128 fill one wave; 109 need two ---- */
    {
        const double K = 8192;
        double t108 = dt_time_gemm_s(peak, sm, bw, 2, 128 * 108, 128, K, 1);   /* 108 tiles */
        double t109 = dt_time_gemm_s(peak, sm, bw, 2, 128 * 109, 128, K, 1);   /* 109 tiles */
        double t216 = dt_time_gemm_s(peak, sm, bw, 2, 128 * 216, 128, K, 1);   /* 216 tiles: 2 full waves */
        /* one full wave: 2 x 128 x 128 x K per SM at peak x cap / sm, written out */
        CHECK_NEAR(t108, 2.0 * 128 * 128 * K * sm / (peak * CAP) + LAUNCH, 1e-15);
        CHECK_NEAR(t109 - LAUNCH, 2 * (t108 - LAUNCH), 1e-15);   /* a partial wave costs a whole one */
        CHECK_NEAR(t216, t109, 1e-15);
        double f108 = 2.0 * 128 * 108 * 128 * K, f109 = 2.0 * 128 * 109 * 128 * K;
        CHECK(t109 / f109 > 1.9 * (t108 / f108));   /* slower per FLOP */
        /* tile quantisation: 129 rows cost two tile rows, as 256 */
        CHECK_NEAR(dt_time_gemm_s(peak, sm, bw, 2, 129, 128 * 54, K, 1),
                   dt_time_gemm_s(peak, sm, bw, 2, 256, 128 * 54, K, 1), 1e-15);
        /* batched GEMMs count their tiles together */
        CHECK_NEAR(dt_time_gemm_s(peak, sm, bw, 2, 128, 128, K, 109), t109, 1e-15);
    }

    /* ---- the roofline crossover: a skinny GEMM is memory-bound ---- */
    {
        /* M = 8 tokens x 8192 x 8192: 2 bytes x (8 x 8192 + 8192^2 + 8 x 8192) moved, 2 x 8 x 8192^2
         * FLOPs: intensity ~8 FLOP/byte, far below A100's 312e12 / 2.039e12 = 153 */
        const double M = 8, N = 8192, K = 8192;
        double t = dt_time_gemm_s(peak, sm, bw, 2, M, N, K, 1);
        CHECK_NEAR(t, 2.0 * (M * K + K * N + M * N) / bw + LAUNCH, 1e-15);
        /* a square 8192^3 GEMM is compute-bound: FLOPs at peak x cap (8192 / 128 = 64 tiles a
         * side, 4096 tiles = 37.9 waves of 108 -> 38 waves) */
        double tc = dt_time_gemm_s(peak, sm, bw, 2, 8192, 8192, 8192, 1);
        CHECK_NEAR(tc, 38.0 * 2.0 * 128 * 128 * 8192 * sm / (peak * CAP) + LAUNCH, 1e-15);
        CHECK(2.0 * 3 * 8192.0 * 8192 / bw < tc - LAUNCH);
        /* the crossover in M lies between: time per token falls until the GEMM turns compute-bound */
        double prev = 1e30;
        int crossed = 0;
        for (double m = 8; m <= 8192; m *= 2) {
            double tm = dt_time_gemm_s(peak, sm, bw, 2, m, N, K, 1);
            double mem = 2.0 * (m * K + K * N + m * N) / bw + LAUNCH;
            if (tm > mem + 1e-15) crossed = 1;
            CHECK(tm / m <= prev * (1 + 1e-12));
            prev = tm / m;
        }
        CHECK(crossed);
        /* degenerate shapes cost nothing */
        CHECK(dt_time_gemm_s(peak, sm, bw, 2, 0, N, K, 1) == 0.0);
    }

    /* ---- the switch: cuda profiles with sm_count; CPU plans keep the calibrated model ---- */
    dt_time_compute c0, c1;
    setup(&p, "gpt2", "A100-80GB");
    CHECK(dt_time_gpu_shape_model(&p));
    setup(&p, "gpt2", "cpu");
    CHECK(!dt_time_gpu_shape_model(&p));
    p.cluster.hw.sm_count = 64;   /* ignored off a cuda device */
    CHECK(!dt_time_gpu_shape_model(&p));
    /* a plan read back carries no sm_count: the built-in profile of its name supplies it */
    setup(&p, "gpt2", "A100-80GB");
    CHECK(dt_time_compute_micro(&p, &c0, &err) == DT_OK);
    p.cluster.hw.sm_count = 0;
    CHECK(dt_hardware_sm_count(&p.cluster.hw) == 108);
    CHECK(dt_time_compute_micro(&p, &c1, &err) == DT_OK);
    CHECK(c1.fwd_s == c0.fwd_s && c1.bwd_s == c0.bwd_s);
    /* a custom profile without it: the flat achievable_flops model */
    strcpy(p.cluster.hw.name, "my-gpu");
    CHECK(!dt_time_gpu_shape_model(&p));
    CHECK(dt_time_compute_micro(&p, &c1, &err) == DT_OK);
    CHECK_NEAR(c1.fwd_s + c1.bwd_s,
               2 * dt_model_train_flops_per_seq(&p.model, 1024) / p.cluster.hw.achievable_flops[p.precision.param],
               1e-12);

    /* ---- a calibrated profile's measured figures replace the cited constants ---- */
    {
        dt_time_compute d, m;
        setup(&p, "gpt2", "H100-SXM-80GB");
        dt_precision_from_preset(DT_PREC_MIXED_BF16, &p.precision);
        CHECK(dt_time_compute_micro(&p, &d, &err) == DT_OK);
        /* the measured values equal to the defaults: the same step, to the bit */
        p.cluster.hw.gemm_peak_fraction[DT_DTYPE_BF16] = CAP;
        p.cluster.hw.mem_bw_fraction = 0.88;
        p.cluster.hw.op_overhead_s = LAUNCH;
        CHECK(dt_time_compute_micro(&p, &m, &err) == DT_OK);
        CHECK(m.fwd_s == d.fwd_s && m.bwd_s == d.bwd_s && m.attn_core_s == d.attn_core_s);
        /* a fraction of another dtype does not apply to bf16 GEMMs */
        p.cluster.hw.gemm_peak_fraction[DT_DTYPE_FP32] = 0.1;
        CHECK(dt_time_compute_micro(&p, &m, &err) == DT_OK);
        CHECK(m.fwd_s == d.fwd_s);
        /* half the GEMM efficiency: each math-bound GEMM takes twice as long (the big ones of
         * the block at b x s = 2048 are), so the forward grows, by less than 2x */
        p.cluster.hw.gemm_peak_fraction[DT_DTYPE_BF16] = CAP / 2;
        CHECK(dt_time_compute_micro(&p, &m, &err) == DT_OK);
        CHECK(m.fwd_s > 1.3 * d.fwd_s && m.fwd_s < 2.0 * d.fwd_s);
        /* a slower copy slows the memory-bound element-wise kernels; a slower launch adds per kernel */
        p.cluster.hw.gemm_peak_fraction[DT_DTYPE_BF16] = CAP;
        p.cluster.hw.mem_bw_fraction = 0.44;
        CHECK(dt_time_compute_micro(&p, &m, &err) == DT_OK);
        CHECK(m.fwd_s > d.fwd_s && m.bwd_s > d.bwd_s);
        p.cluster.hw.mem_bw_fraction = 0.88;
        p.cluster.hw.op_overhead_s = 10 * LAUNCH;
        CHECK(dt_time_compute_micro(&p, &m, &err) == DT_OK);
        CHECK(m.fwd_s > d.fwd_s + 9 * LAUNCH * 12);   /* >= one GEMM per block of 12 */
        /* the plan carries them: written and read back, the same step */
        p.cluster.hw.gemm_peak_fraction[DT_DTYPE_BF16] = 0.7;
        p.cluster.hw.mem_bw_fraction = 0.9;
        char *js = dt_plan_to_json(&p, &err);
        CHECK(js != NULL);
        dt_plan q;
        CHECK(js && dt_plan_parse(js, &q, &err) == DT_OK);
        CHECK(q.cluster.hw.gemm_peak_fraction[DT_DTYPE_BF16] == 0.7 && q.cluster.hw.mem_bw_fraction == 0.9 &&
              q.cluster.hw.gemm_peak_fraction[DT_DTYPE_FP32] == 0.1 && q.cluster.hw.op_overhead_s == 10 * LAUNCH);
        CHECK(dt_time_compute_micro(&p, &d, &err) == DT_OK && dt_time_compute_micro(&q, &m, &err) == DT_OK);
        CHECK(m.fwd_s == d.fwd_s && m.bwd_s == d.bwd_s);
        free(js);
        /* a plan claiming a GEMM faster than the peak is refused */
        p.cluster.hw.gemm_peak_fraction[DT_DTYPE_BF16] = 1.2;
        CHECK(dt_plan_validate(&p, &err) != DT_OK && strstr(err.msg, "gemm_peak_fraction.bf16"));
    }

    /* ---- monotone in the micro-batch, every profile, both attention kinds ---- */
    const char *hws[] = {"V100-32GB", "A100-40GB", "A100-80GB", "H100-SXM-80GB", "H200"};
    const char *models[] = {"gpt2", "llama-2-7b"};
    for (int h = 0; h < 5; h++)
        for (int m = 0; m < 2; m++)
            for (int mat = 0; mat < 2; mat++) {
                setup(&p, models[m], hws[h]);
                if (p.cluster.hw.peak_flops[DT_DTYPE_BF16] <= 0) dt_precision_from_preset(DT_PREC_MIXED_FP16, &p.precision);
                p.activations.attention = mat ? DT_ATTN_MATERIALIZED : DT_ATTN_FLASH;
                double prev_f = 0, prev_b = 0, prev_blk = 0;
                for (int64_t b = 1; b <= 32; b++) {
                    p.batch.micro_batch = b;
                    p.batch.global_batch = b;
                    CHECK(dt_time_compute_micro(&p, &c0, &err) == DT_OK);
                    CHECK(c0.fwd_s >= prev_f && c0.bwd_s >= prev_b && c0.block_fwd_s >= prev_blk);
                    CHECK(c0.bwd_s > c0.fwd_s);
                    CHECK(c0.block_recompute_s <= c0.block_fwd_s && c0.attn_core_s < c0.block_fwd_s);
                    /* never faster than the FLOPs at peak x cap */
                    double fl = (double)b * dt_model_train_flops_per_seq(&p.model, 1024);
                    double pk = p.cluster.hw.peak_flops[p.precision.param] * CAP;
                    if (!mat) CHECK(c0.fwd_s + c0.bwd_s > 0.5 * fl / pk);   /* flash skips half the square */
                    else CHECK(c0.fwd_s + c0.bwd_s > fl / pk);
                    prev_f = c0.fwd_s, prev_b = c0.bwd_s, prev_blk = c0.block_fwd_s;
                }
                /* throughput per sequence does not fall as the micro-batch grows 1 -> 32 */
                p.batch.micro_batch = 1;
                CHECK(dt_time_compute_micro(&p, &c1, &err) == DT_OK);
                CHECK((c0.fwd_s + c0.bwd_s) / 32 <= c1.fwd_s + c1.bwd_s);
            }

    /* ---- eager attention streams the b x heads x s^2 scores: slower than flash ---- */
    setup(&p, "gpt2", "V100-32GB");
    dt_precision_from_preset(DT_PREC_MIXED_FP16, &p.precision);
    p.activations.attention = DT_ATTN_FLASH;
    CHECK(dt_time_compute_micro(&p, &c0, &err) == DT_OK);
    p.activations.attention = DT_ATTN_MATERIALIZED;
    CHECK(dt_time_compute_micro(&p, &c1, &err) == DT_OK);
    CHECK(c1.attn_core_s > 2 * c0.attn_core_s);
    /* dtrun's recompute skips the MLP down projection; deepspeed / fsdp rerun the block */
    CHECK(c1.block_recompute_s < c1.block_fwd_s);

    TEST_MAIN_END();
}
