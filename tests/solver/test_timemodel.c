/* test_timemodel.c — bytes communicated per stage (exact, by hand from the unit
 * layout), the alpha-beta formula, intra vs inter-node bandwidth, overlap,
 * recompute, offload and optimizer terms, MFU, and the error paths. */
#include <math.h>
#include <string.h>

#include "dt_memory.h"
#include "dt_model.h"
#include "dt_solve.h"
#include "dt_test.h"
#include "dt_timemodel.h"

static int64_t pad(int64_t n, int64_t w) { return (n + w - 1) / w * w; }

static void setup(dt_plan *p, const char *model, const char *hw, int64_t nodes, int64_t gpn) {
    dt_error err;
    dt_plan_defaults(p);
    if (dt_model_resolve(model, &p->model, &err)) fprintf(stderr, "%s\n", err.msg);
    if (dt_hardware_load(hw, NULL, &p->cluster.hw, &err)) fprintf(stderr, "%s\n", err.msg);
    p->cluster.device = p->cluster.hw.device;
    p->cluster.nodes = nodes;
    p->cluster.gpus_per_node = gpn;
    p->parallel.world_size = nodes * gpn;
    p->batch.micro_batch = 2;
    p->batch.grad_accum = 3;
    p->batch.global_batch = 2 * 3 * nodes * gpn;
    p->batch.seq_len = 128;
}

/* The flat achievable_flops model: a cuda profile without sm_count whose name is no
 * built-in's (a custom profile; docs/time-model.md "Shape-aware GPU compute"). The checks
 * below that write the flat formulas out use it. */
static void flat_gpu(dt_plan *p) {
    p->cluster.hw.sm_count = 0;
    strncat(p->cluster.hw.name, "-flat", sizeof p->cluster.hw.name - strlen(p->cluster.hw.name) - 1);
}

/* ring all-reduce / reduce-scatter time, written out independently */
static double ar(double n, double a, double bw, double S) { return 2 * (n - 1) * a + 2 * (n - 1) / n * S / bw; }
static double rs(double n, double a, double bw, double S) { return (n - 1) * a + (n - 1) / n * S / bw; }

int main(void) {
    dt_plan p;
    dt_error err;
    int64_t b[DT_COLL_COUNT];
    dt_time_breakdown t, t2;

    /* ---- bytes per rank per step, W = 3 so every unit needs padding ---- */
    setup(&p, "llama-tiny", "A100-80GB", 1, 3);
    const int64_t W = 3, A = 3, L = p.model.n_layer;
    const int64_t emb = dt_model_embedding_params(&p.model), blk = dt_model_block_params(&p.model),
                  head = dt_model_head_params(&p.model), psi = dt_model_params(&p.model);
    const int64_t psi_pad = pad(emb, W) + L * pad(blk, W) + (head ? pad(head, W) : 0);
    CHECK(psi_pad >= psi);
    CHECK_EQ_I64(emb + L * blk + head, psi);
    p.parallel.zero_stage = 0;
    CHECK(dt_time_comm_bytes(&p, b, &err) == DT_OK);
    CHECK_EQ_I64(b[DT_COLL_ALLREDUCE], psi * 2 + 4); /* bf16 grads once per step + loss */
    CHECK_EQ_I64(b[DT_COLL_REDUCE_SCATTER], 0);
    CHECK_EQ_I64(b[DT_COLL_ALLGATHER], 0);
    p.parallel.zero_stage = 1;
    CHECK(dt_time_comm_bytes(&p, b, &err) == DT_OK);
    CHECK_EQ_I64(b[DT_COLL_REDUCE_SCATTER], psi_pad * 2);
    CHECK_EQ_I64(b[DT_COLL_ALLGATHER], psi_pad * 2);
    CHECK_EQ_I64(b[DT_COLL_ALLREDUCE], 8);
    p.parallel.zero_stage = 2;
    CHECK(dt_time_comm_bytes(&p, b, &err) == DT_OK);
    CHECK_EQ_I64(b[DT_COLL_REDUCE_SCATTER], A * psi_pad * 2); /* every micro-step */
    CHECK_EQ_I64(b[DT_COLL_ALLGATHER], psi_pad * 2);
    p.parallel.zero_stage = 3;
    CHECK(dt_time_comm_bytes(&p, b, &err) == DT_OK);
    CHECK_EQ_I64(b[DT_COLL_ALLGATHER], 2 * A * psi_pad * 2); /* forward + backward, every micro-step */
    CHECK_EQ_I64(b[DT_COLL_REDUCE_SCATTER], A * psi_pad * 2);
    CHECK_EQ_I64(b[DT_COLL_BROADCAST], 0);
    /* fp32: 4-byte elements */
    dt_precision_from_preset(DT_PREC_FP32, &p.precision);
    CHECK(dt_time_comm_bytes(&p, b, &err) == DT_OK);
    CHECK_EQ_I64(b[DT_COLL_ALLGATHER], 2 * A * psi_pad * 4);
    /* world size 1: no collectives at all */
    setup(&p, "llama-tiny", "cpu", 1, 1);
    p.parallel.zero_stage = 3;
    CHECK(dt_time_comm_bytes(&p, b, &err) == DT_OK);
    CHECK_EQ_I64(b[0] + b[1] + b[2] + b[3], 0);
    CHECK(dt_time_estimate(&p, &t, &err) == DT_OK);
    CHECK(t.comm_s == 0 && t.comm_exposed_s == 0);

    /* ---- alpha-beta, stage 0 without overlap: every byte exposed ---- */
    setup(&p, "gpt2", "H100-SXM-80GB", 1, 4);
    p.parallel.zero_stage = 0;
    p.parallel.overlap_comm = 0;
    flat_gpu(&p);
    p.parallel.reduce_bucket_elems = 50000000; /* gpt2 (124M) -> 3 buckets */
    const dt_hardware *hw = &p.cluster.hw;
    int64_t n = dt_model_params(&p.model);
    int64_t last = n - 2 * 50000000;
    double want = 2 * ar(4, hw->intra_alpha_s, hw->intra_busbw, 50000000.0 * 2) +
                  ar(4, hw->intra_alpha_s, hw->intra_busbw, (double)last * 2) +
                  ar(4, hw->intra_alpha_s, hw->intra_busbw, 4);
    CHECK(dt_time_estimate(&p, &t, &err) == DT_OK);
    CHECK_NEAR(t.comm_s, want, 1e-12);
    CHECK_NEAR(t.comm_exposed_s, want, 1e-12);
    /* compute: 3 micro-steps x 2 sequences of train FLOPs at achievable bf16 */
    double fl = 3 * 2 * dt_model_train_flops_per_seq(&p.model, 128);
    CHECK_NEAR(t.compute_s, fl / hw->achievable_flops[DT_DTYPE_BF16], 1e-12);
    CHECK_NEAR(t.step_s, t.compute_s + t.recompute_s + t.comm_exposed_s + t.offload_s + t.optimizer_s, 1e-12);
    CHECK_NEAR(t.tokens_per_s, p.batch.global_batch * 128.0 / t.step_s, 1e-12);
    CHECK_NEAR(t.mfu * t.step_s * 4 * hw->peak_flops[DT_DTYPE_BF16], 4 * fl, 1e-9);
    /* overlap hides part of it but never below the last bucket */
    p.parallel.overlap_comm = 1;
    CHECK(dt_time_estimate(&p, &t2, &err) == DT_OK);
    CHECK_NEAR(t2.comm_s, want, 1e-12);
    CHECK(t2.comm_exposed_s < t.comm_exposed_s);
    CHECK(t2.comm_exposed_s >= ar(4, hw->intra_alpha_s, hw->intra_busbw, (double)last * 2));
    /* two nodes: the inter-node busbw (100 Gb default) decides */
    setup(&p, "gpt2", "H100-SXM-80GB", 2, 2);
    p.parallel.zero_stage = 0;
    p.parallel.overlap_comm = 0;
    p.parallel.reduce_bucket_elems = 50000000;
    want = 2 * ar(4, hw->inter_alpha_s, hw->inter_busbw, 50000000.0 * 2) +
           ar(4, hw->inter_alpha_s, hw->inter_busbw, (double)last * 2) + ar(4, hw->inter_alpha_s, hw->inter_busbw, 4);
    CHECK(dt_time_estimate(&p, &t2, &err) == DT_OK);
    CHECK_NEAR(t2.comm_s, want, 1e-12);
    CHECK(t2.comm_s > 10 * t.comm_s);

    /* ---- stage 3: compute-bound with overlap -> only the unhideable ends are exposed ---- */
    setup(&p, "llama-2-7b", "H100-SXM-80GB", 1, 8);
    flat_gpu(&p);
    p.batch.micro_batch = 8;
    p.batch.seq_len = 4096;
    p.batch.global_batch = 8 * 3 * 8;
    p.parallel.zero_stage = 3;
    p.parallel.overlap_comm = 1;
    dt_time_terms tt;
    CHECK(dt_time_terms_build(&p, &tt, &err) == DT_OK);
    CHECK(tt.n_phases == 2);
    double emb_ag = rs(8, hw->intra_alpha_s, hw->intra_busbw, (double)pad(dt_model_embedding_params(&p.model), 8) * 2);
    CHECK_NEAR(tt.phase[0].tail_s, emb_ag, 1e-12);
    CHECK(tt.phase[0].comm_s < tt.phase[0].work0_s); /* hidden */
    CHECK(dt_time_estimate(&p, &t, &err) == DT_OK);
    CHECK_NEAR(t.comm_exposed_s,
               tt.comm_fixed_exposed_s + 3 * (tt.phase[0].tail_s + tt.phase[1].tail_s), 1e-12);
    /* checkpointing: recompute = K x a block's forward less its MLP down projection
     * (b*s x F x C multiply-adds: the engine stops after GELU), every micro-step */
    p.activations.ckpt_layers = 10;
    CHECK(dt_time_estimate(&p, &t2, &err) == DT_OK);
    CHECK_NEAR(t2.recompute_s,
               10 * 3 * 8 * (dt_model_block_fwd_flops_per_seq(&p.model, 4096) -
                             2.0 * 4096 * (double)p.model.ffn * (double)p.model.hidden) /
                   hw->achievable_flops[DT_DTYPE_BF16],
               1e-12);
    CHECK_NEAR(t2.step_s - t.step_s, t2.recompute_s, 1e-9); /* exposure already at its floor */
    /* stage 3 moves more than stage 2, which moves more than stage 1 */
    double c3 = t.comm_s;
    p.parallel.zero_stage = 2;
    CHECK(dt_time_estimate(&p, &t, &err) == DT_OK);
    double c2 = t.comm_s;
    p.parallel.zero_stage = 1;
    CHECK(dt_time_estimate(&p, &t, &err) == DT_OK);
    CHECK(c3 > c2 && c2 > t.comm_s);
    /* exposed communication never exceeds all communication, for every stage and overlap */
    for (int st = 0; st < 4; st++)
        for (int ov = 0; ov < 2; ov++) {
            p.parallel.zero_stage = st;
            p.parallel.overlap_comm = ov;
            p.cluster.nodes = 2, p.cluster.gpus_per_node = 4; /* slow inter-node link: comm-bound */
            CHECK(dt_time_estimate(&p, &t, &err) == DT_OK);
            CHECK(t.comm_exposed_s <= t.comm_s * (1 + 1e-12));
            CHECK(ov || fabs(t.comm_exposed_s - t.comm_s) <= 1e-12 * t.comm_s);
            p.cluster.nodes = 1, p.cluster.gpus_per_node = 8;
        }
    p.parallel.overlap_comm = 1;

    /* ---- offload: transfers at h2d_bw, CPU Adam at cpu_adam_params_per_s per node ---- */
    p.parallel.zero_stage = 2;
    p.parallel.offload_optimizer = DT_OFFLOAD_CPU;
    p.activations.ckpt_layers = 0;
    CHECK(dt_time_estimate(&p, &t, &err) == DT_OK);

    const int64_t Lb = p.model.n_layer;
    int64_t shard_pad = (pad(dt_model_embedding_params(&p.model), 8) + Lb * pad(dt_model_block_params(&p.model), 8) +
                         pad(dt_model_head_params(&p.model), 8)) / 8;
    CHECK_NEAR(t.offload_s, shard_pad * (2.0 + 2.0) / hw->h2d_bw, 1e-12);
    CHECK_NEAR(t.optimizer_s, shard_pad * 8.0 / hw->cpu_adam_params_per_s, 1e-12);
    p.parallel.offload_optimizer = DT_OFFLOAD_NVME;
    CHECK(dt_time_estimate(&p, &t2, &err) == DT_OK);
    CHECK_NEAR(t2.offload_s - t.offload_s, 2.0 * shard_pad * 8 * 12 / hw->nvme_bw, 1e-12);
    /* device AdamW (no offload) is memory-bound and far faster than CPU Adam */
    p.parallel.offload_optimizer = DT_OFFLOAD_NONE;
    CHECK(dt_time_estimate(&p, &t2, &err) == DT_OK);
    CHECK(t2.offload_s == 0 && t2.optimizer_s < t.optimizer_s / 10);

    /* ---- dt_predict fills everything ---- */
    CHECK(dt_predict(&p, &err) == DT_OK);
    CHECK(p.prediction.valid == 1);
    CHECK(p.prediction.memory.total > 0 && p.prediction.time.step_s > 0);
    CHECK(p.prediction.comm_bytes[DT_COLL_REDUCE_SCATTER] > 0);

    /* ---- kernel-level terms (docs/time-model.md): attention at its own rate,
     * a fixed cost per engine op, a CPU node's cores shared by its ranks ---- */
    setup(&p, "gpt2", "H100-SXM-80GB", 1, 1);
    dt_precision_from_preset(DT_PREC_FP32, &p.precision);
    p.activations.ckpt_layers = 0;
    flat_gpu(&p);
    dt_time_breakdown base_t, k_t;
    dt_time_compute cm0, cm1;
    CHECK(dt_time_estimate(&p, &base_t, &err) == DT_OK);
    CHECK(dt_time_compute_micro(&p, &cm0, &err) == DT_OK);
    const double R32 = p.cluster.hw.achievable_flops[DT_DTYPE_FP32], Lg = (double)p.model.n_layer;
    CHECK_NEAR(cm0.fwd_s + cm0.bwd_s, 2 * dt_model_train_flops_per_seq(&p.model, 128) / R32, 1e-12);
    /* a recomputed block (engine/model/lm.c: block_forward with xout = NULL) skips the
     * MLP down projection, a [b*s, F] x [F, C] GEMM */
    const double f_down = 2.0 * 2.0 * 128.0 * (double)p.model.ffn * (double)p.model.hidden; /* b = 2 */
    CHECK_NEAR(cm0.block_fwd_s, 2 * dt_model_block_fwd_flops_per_seq(&p.model, 128) / R32, 1e-12);
    CHECK_NEAR(cm0.block_recompute_s, (2 * dt_model_block_fwd_flops_per_seq(&p.model, 128) - f_down) / R32, 1e-12);
    /* attention at half the GEMM rate: +1 x its FLOPs / R, forward and 2x backward,
     * with the attention FLOPs written out (QK^T + PV: 2 x 2 x T^2 x H x d) */
    double fa = 2.0 * 2.0 * 2.0 * 128.0 * 128.0 * (double)(p.model.n_head * p.model.head_dim); /* b = 2 */
    p.cluster.hw.attention_flops = R32 / 2;
    CHECK(dt_time_compute_micro(&p, &cm1, &err) == DT_OK);
    CHECK_NEAR(cm1.fwd_s - cm0.fwd_s, Lg * fa / R32, 1e-12);
    CHECK_NEAR(cm1.bwd_s - cm0.bwd_s, 2 * Lg * fa / R32, 1e-12);
    CHECK_NEAR(cm1.block_fwd_s - cm0.block_fwd_s, fa / R32, 1e-12);
    CHECK_NEAR(cm1.block_recompute_s - cm0.block_recompute_s, fa / R32, 1e-12);
    CHECK(dt_time_estimate(&p, &k_t, &err) == DT_OK);
    CHECK_NEAR(k_t.compute_s - base_t.compute_s, 3 /* A */ * 3 * Lg * fa / R32, 1e-12);
    p.cluster.hw.attention_flops = 0;   /* 0 = the GEMM rate: unchanged */
    CHECK(dt_time_estimate(&p, &k_t, &err) == DT_OK);
    CHECK_NEAR(k_t.step_s, base_t.step_s, 1e-15);
    /* op overhead: per micro-step 14 + 16 ops per block and 4 + 6 outside; a
     * recomputed block's 11 ops (no down projection, no second residual add) */
    p.cluster.hw.op_overhead_s = 1e-5;
    CHECK(dt_time_estimate(&p, &k_t, &err) == DT_OK);
    CHECK_NEAR(k_t.compute_s - base_t.compute_s, 3 * 1e-5 * (30 * Lg + 10), 1e-12);
    p.activations.ckpt_layers = 4;
    CHECK(dt_time_estimate(&p, &k_t, &err) == DT_OK);
    CHECK_NEAR(k_t.recompute_s, 4 * 3 * (cm0.block_recompute_s + 11 * 1e-5), 1e-12);
    p.cluster.hw.op_overhead_s = 0;
    p.activations.ckpt_layers = 0;
    /* element-wise traffic per token, fp32: block fwd 10C + 2F, recompute 7C + 2F,
     * bwd 8C + 3F (bias sums are part of the linears), outside fwd 5C + V,
     * bwd 7C + 2V elements, at elementwise_bw */
    p.cluster.hw.elementwise_bw = 1e11;
    CHECK(dt_time_compute_micro(&p, &cm1, &err) == DT_OK);
    {
        double C = (double)p.model.hidden, F = (double)p.model.ffn, V = (double)p.model.vocab;
        double tok = 2.0 * 128.0, by = 4.0 / 1e11;
        CHECK_NEAR(cm1.fwd_s - cm0.fwd_s, tok * by * (Lg * (10 * C + 2 * F) + 5 * C + V), 1e-12);
        CHECK_NEAR(cm1.bwd_s - cm0.bwd_s, tok * by * (Lg * (8 * C + 3 * F) + 7 * C + 2 * V), 1e-12);
        CHECK_NEAR(cm1.block_fwd_s - cm0.block_fwd_s, tok * by * (10 * C + 2 * F), 1e-12);
        CHECK_NEAR(cm1.block_recompute_s - cm0.block_recompute_s, tok * by * (7 * C + 2 * F), 1e-12);
    }
    p.cluster.hw.elementwise_bw = 0;
    /* a CPU node's ranks share its FLOP/s and memory bandwidth; GPUs do not */
    setup(&p, "gpt2", "cpu", 1, 1);
    dt_precision_from_preset(DT_PREC_FP32, &p.precision);
    CHECK(dt_time_compute_micro(&p, &cm0, &err) == DT_OK);
    CHECK(dt_time_estimate(&p, &base_t, &err) == DT_OK);
    p.cluster.gpus_per_node = p.parallel.world_size = 4;
    p.batch.global_batch *= 4;
    CHECK(dt_time_compute_micro(&p, &cm1, &err) == DT_OK);
    CHECK_NEAR(cm1.fwd_s - p.cluster.hw.op_overhead_s * (12 * 14 + 4),
               4 * (cm0.fwd_s - p.cluster.hw.op_overhead_s * (12 * 14 + 4)), 1e-12);
    CHECK(p.cluster.hw.elementwise_bw > 0);   /* the cpu profile states it: shared too */
    CHECK(dt_time_estimate(&p, &k_t, &err) == DT_OK);
    CHECK_NEAR(k_t.optimizer_s, 4 * base_t.optimizer_s, 1e-12 + 1e-9 * base_t.optimizer_s);
    /* threads of one rank (docs/time-model.md "Threads of one rank"): a rank on all
     * thread_cores threads keeps thread_efficiency of the summed rate; one thread per
     * rank loses nothing; 2 of 4 threads lose the geometric half; the optimizer's
     * memory-bound time keeps the node's rate */
    {
        const double ops = p.cluster.hw.op_overhead_s * (12 * 14 + 4), eff = 0.8;
        dt_time_compute c1, c2;
        dt_time_breakdown e1;
        setup(&p, "gpt2", "cpu", 1, 1);
        dt_precision_from_preset(DT_PREC_FP32, &p.precision);
        CHECK(dt_time_compute_micro(&p, &cm0, &err) == DT_OK);
        p.cluster.hw.thread_efficiency = eff, p.cluster.hw.thread_cores = 2;
        CHECK(dt_time_compute_micro(&p, &c1, &err) == DT_OK);
        CHECK_NEAR(c1.fwd_s - ops, (cm0.fwd_s - ops) / eff, 1e-12);
        CHECK(dt_time_estimate(&p, &e1, &err) == DT_OK);
        CHECK_NEAR(e1.optimizer_s, base_t.optimizer_s, 1e-12 + 1e-9 * base_t.optimizer_s);
        p.cluster.gpus_per_node = p.parallel.world_size = 2;   /* one thread per rank */
        p.batch.global_batch *= 2;
        CHECK(dt_time_compute_micro(&p, &c2, &err) == DT_OK);
        CHECK_NEAR(c2.fwd_s - ops, 2 * (cm0.fwd_s - ops), 1e-12);
        p.cluster.hw.thread_cores = 4;   /* 2 threads of 4 measured */
        CHECK(dt_time_compute_micro(&p, &c2, &err) == DT_OK);
        CHECK_NEAR(c2.fwd_s - ops, 2 * (cm0.fwd_s - ops) / sqrt(eff), 1e-12);
    }
    /* a profile's own reduce-scatter / all-gather busbw on one node (calibrate measures them
     * through the engine's collectives): the reduce-scatter's bytes at half the rate cost
     * (n-1)/n x bytes / busbw more; across nodes the link's busbw holds for all */
    {
        dt_time_breakdown a, b2;
        int64_t by[DT_COLL_COUNT];
        setup(&p, "gpt2", "cpu", 1, 2);
        p.parallel.zero_stage = 2;
        dt_precision_from_preset(DT_PREC_FP32, &p.precision);
        const double bw = p.cluster.hw.intra_busbw;
        CHECK(dt_time_busbw(&p, DT_COLL_REDUCE_SCATTER) == bw && dt_time_busbw(&p, DT_COLL_ALLGATHER) == bw);
        CHECK(dt_time_estimate(&p, &a, &err) == DT_OK && dt_time_comm_bytes(&p, by, &err) == DT_OK);
        p.cluster.hw.intra_busbw_rs = bw / 2, p.cluster.hw.intra_busbw_ag = 3 * bw;
        CHECK(dt_time_busbw(&p, DT_COLL_REDUCE_SCATTER) == bw / 2 && dt_time_busbw(&p, DT_COLL_ALLGATHER) == 3 * bw);
        CHECK(dt_time_busbw(&p, DT_COLL_ALLREDUCE) == bw);
        p.cluster.hw.intra_busbw_ag = 0;
        CHECK(dt_time_estimate(&p, &b2, &err) == DT_OK);
        CHECK_NEAR(b2.comm_s - a.comm_s, 0.5 * (double)by[DT_COLL_REDUCE_SCATTER] / bw, 1e-9);
        setup(&p, "gpt2", "H100-SXM-80GB", 2, 4);
        p.cluster.hw.intra_busbw_rs = 1.0;
        CHECK(dt_time_busbw(&p, DT_COLL_REDUCE_SCATTER) == p.cluster.hw.inter_busbw);
    }
    setup(&p, "gpt2", "H100-SXM-80GB", 1, 4);
    dt_precision_from_preset(DT_PREC_FP32, &p.precision);
    CHECK(dt_time_compute_micro(&p, &cm1, &err) == DT_OK);
    setup(&p, "gpt2", "H100-SXM-80GB", 1, 1);
    dt_precision_from_preset(DT_PREC_FP32, &p.precision);
    CHECK(dt_time_compute_micro(&p, &cm0, &err) == DT_OK);
    CHECK_NEAR(cm1.fwd_s, cm0.fwd_s, 1e-15);

    /* ---- errors ---- */
    setup(&p, "gpt2", "V100-32GB", 1, 1);
    CHECK(dt_time_estimate(&p, &t, &err) == DT_EINVAL); /* mixed-bf16 on Volta */
    CHECK(strstr(err.msg, "V100-32GB") && strstr(err.msg, "bf16"));
    dt_precision_from_preset(DT_PREC_MIXED_FP16, &p.precision);
    CHECK(dt_time_estimate(&p, &t, &err) == DT_OK);
    p.parallel.world_size = 5;
    CHECK(dt_time_estimate(&p, &t, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "world_size") != NULL);
    p.parallel.world_size = 1;
    p.activations.ckpt_layers = p.model.n_layer + 1;
    CHECK(dt_time_estimate(&p, &t, &err) == DT_EINVAL);
    TEST_MAIN_END();
}
