/* test_tp_memory.c — a dtrun tensor-parallel plan on CPU ranks: the planner's terms for it
 * (planner/dtrun_tp.c: the engine's TP shard on its DP group, the TP group's buffers) equal
 * the bytes dt_memtrack counts per category after the engine builds the rank's shard and
 * the ZeRO engine over the DP group, as dtrun's trainer builds them (engine/run/train.c
 * connect_tp, build_model), on every rank. Run under mpirun: 4 ranks = TP 2 x DP 2, 2 ranks
 * = TP 2 x DP 1; GPT-2 (packed c_attn, tied head), Qwen3 (GQA, partial q/k-norm gradients),
 * fp32 and mixed-bf16, ZeRO 0-3, with and without checkpointed blocks. And one hand count of
 * the shard's parameters, so a planner and an engine wrong the same way still fail; and the
 * TP collectives' time of a micro-batch against a hand count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_comm.h"
#include "dt_dtrun_tp.h"
#include "dt_layout.h"
#include "dt_lm.h"
#include "dt_memory.h"
#include "dt_parallel3d.h"
#include "dt_memtrack.h"
#include "dt_test.h"
#include "dt_test_memtrack.h"
#include "dt_test_plan.h"
#include "dt_tpgroup.h"
#include "dt_zero.h"

#define TP 2

static void check_stage(dt_comm *world, dt_tpgroup *tpg, dt_plan p, int stage, int64_t K) {
    p.parallel.zero_stage = stage;
    p.activations.ckpt_layers = K;
    dt_error err = {0};
    dt_mem_phases ph;
    const int rank = dt_comm_rank(world);
    if (dt_memory_phases(&p, 0, &ph, &err)) {
        fprintf(stderr, "rank %d %s ZeRO-%d: %s\n", rank, p.model.name, stage, err.msg);
        CHECK(0);
        return;
    }
    const dt_mem_breakdown *m = &ph.at[ph.peak];
    int64_t before[DT_MEM_CAT_COUNT];
    dt_test_tracked_snapshot(before);
    const dt_lm_options o = {.B = p.batch.micro_batch, .T = p.batch.seq_len, .ckpt_layers = K,
                             .attn = p.activations.attention, .device = DT_DEVICE_CPU, .ordinal = 0,
                             .flags = stage == 3 ? DT_LM_NO_FLAT : 0, .finetune = &p.finetune,
                             .tp = dt_tpgroup_model(tpg)};
    dt_lm *g = NULL;
    dt_zero *z = NULL;
    if (dt_lm_create_opts(&p.model, &p.precision, &o, &g, &err) ||
        dt_zero_create(&p, dt_tpgroup_dp(tpg), g, &z, &err)) {
        fprintf(stderr, "rank %d %s ZeRO-%d: %s\n", rank, p.model.name, stage, err.msg);
        CHECK(0);
        dt_lm_free(g);
        return;
    }
    char label[160];
    snprintf(label, sizeof label, "rank %d %s %s ZeRO-%d K %lld", rank, p.model.name,
             dt_precision_preset_name(p.precision.preset), stage, (long long)K);
    dt_test_tracked_check(before, m, label);
    CHECK_EQ_I64((int64_t)dt_lm_activation_bytes(g), m->activations);
    dt_zero_free(z);
    dt_lm_free(g);
}

/* GPT-2's shard by hand: c_attn [C, 3C/t] + bias, c_proj [C/t, C] + bias C, c_fc [C, F/t] +
 * bias, mlp c_proj [F/t, C] + bias C, two LayerNorms 2C each; wte [V/t, C], wpe [P, C], ln_f. */
static void hand_count(const dt_plan *p) {
    const dt_model *m = &p->model;
    const int64_t C = m->hidden, F = m->ffn, V = m->vocab, P = m->max_pos, t = TP;
    const int64_t block = C * 3 * C / t + 3 * C / t + C / t * C + C + C * F / t + F / t + F / t * C + C + 2 * 2 * C;
    const int64_t psi = m->n_layer * block + V / t * C + P * C + 2 * C;
    dt_plan fp = *p;
    dt_precision_from_preset(DT_PREC_FP32, &fp.precision);
    fp.parallel.zero_stage = 0;
    dt_mem_breakdown b;
    dt_error err = {0};
    CHECK(dt_memory_estimate_n(&fp, 0, &b, &err) == DT_OK);
    CHECK_EQ_I64(b.params, 4 * psi);
    CHECK_EQ_I64(b.grads, 4 * psi);
    /* ZeRO-3 over the DP group: the shard's partition */
    fp.parallel.zero_stage = 3;
    CHECK(dt_memory_estimate_n(&fp, 0, &b, &err) == DT_OK);
    const int64_t dp = dt_layout_dp(&fp);
    if (dp == 1) CHECK_EQ_I64(b.params, 4 * psi);
    else CHECK(b.params >= 4 * (psi / dp) && b.params < 4 * psi);
}

/* The TP collectives of one micro-batch (dt_p3_time_terms on the plan): per block 2 + 2
 * all-reduces of [B·T, C] fp32, the embedding's and the classifier's all-reduce, the loss's
 * all-gather of B·T·tp row maxima and all-reduce of 2·B·T, each a ring over tp ranks on the
 * profile's intra-node bus bandwidth and latency (what dtrun calibrate measures); fp32 under
 * a 16-bit precision too (engine/model/lm_tp.c all-reduces fp32). */
static void tp_time(const dt_plan *p) {
    const double N = (double)(p->batch.micro_batch * p->batch.seq_len), C = (double)p->model.hidden;
    const double bw = p->cluster.hw.intra_busbw, a = p->cluster.hw.intra_alpha_s, t = TP;
    const double ar = 2 * (t - 1) * a + 4 * N * C * 2 * (t - 1) / t / bw;       /* ring all-reduce */
    const double ag = (t - 1) * a + 4 * N * t * (t - 1) / t / bw;               /* all-gather */
    const double red = 2 * (t - 1) * a + 4 * N * 2 * 2 * (t - 1) / t / bw;     /* 2 fp32 per token */
    const double want = (double)p->model.n_layer * 4 * ar + 2 * ar + ag + red;
    dt_time_terms tt;
    dt_p3_time parts;
    dt_error err = {0};
    for (int k = 0; k < 2; k++) {
        dt_plan q = *p;
        dt_precision_from_preset(k ? DT_PREC_MIXED_BF16 : DT_PREC_FP32, &q.precision);
        CHECK(dt_p3_time_terms(&q, &tt, &parts, &err) == DT_OK);
        CHECK_NEAR(parts.tp_comm_s, want, 1e-9 * want);
        CHECK(parts.tp_inter == 0);
    }
}

int main(void) {
    dt_error err = {0};
    dt_comm *world = NULL;
    dt_tpgroup *tpg = NULL;
    if (dt_comm_init_mpi(&world, 60.0, &err) || dt_tpgroup_create(world, TP, &tpg, &err)) {
        fprintf(stderr, "init: %s\n", err.msg);
        return 1;
    }
    const int n = dt_comm_size(world);
    const char *plans[2] = {"configs/plans/tiny-cpu.json", "tests/kernels/golden/train/qwen3.plan.json"};
    const dt_precision_preset precs[2] = {DT_PREC_FP32, DT_PREC_MIXED_BF16};
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 2; k++) {
            dt_plan p = dt_test_load_plan(plans[f]);
            dt_precision_from_preset(precs[k], &p.precision);
            p.runtime.kind = DT_RUNTIME_DTRUN;
            p.cluster.device = DT_DEVICE_CPU;
            p.parallel.world_size = n;
            p.cluster.nodes = 1, p.cluster.gpus_per_node = n;
            p.parallel.offload_optimizer = p.parallel.offload_param = DT_OFFLOAD_NONE;
            p.prediction.valid = 0;
            dt_layout_set(&p, TP, 0, 1, 1, 1);
            CHECK(dt_dtrun_tp_active(&p));
            if (f == 0 && k == 0) hand_count(&p);
            if (k == 0) tp_time(&p);
            for (int stage = 0; stage <= 3; stage++) {
                check_stage(world, tpg, p, stage, 0);
                check_stage(world, tpg, p, stage, p.model.n_layer);
            }
        }
    int failed = dt_test_failures;
    dt_tpgroup_free(tpg);
    dt_comm_free(world);
    if (failed) fprintf(stderr, "rank failed %d check(s)\n", failed);
    return failed ? 1 : 0;
}
