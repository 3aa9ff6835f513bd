/* test_memory.c — the memory model against independent oracles: the users'
 * 32B / 8-GPU table (pure-bf16; docs/memory-model.md), the ZeRO paper's 7.5B / 64-GPU example
 * (mixed precision), the saved-activation tables of docs/activations.md written
 * out tensor by tensor, and the host/NVMe and error rules. */
#include <stdint.h>

#include "dt_dsconfig.h"
#include "dt_model.h"
#include "dt_memory.h"
#include "dt_test.h"
#include "plan_fixture.h"

static void base_plan(dt_plan *p, const char *model, int64_t gpus) { fixture_plan(p, model, 0, gpus); }

static void derived_plan(dt_plan *p, int64_t n_params, int64_t gpus, dt_precision_preset prec) {
    fixture_plan(p, NULL, n_params, gpus);
    dt_precision_from_preset(prec, &p->precision);
}

static dt_mem_breakdown est(dt_plan *p, int64_t n, int stage, dt_offload opt, dt_offload par) {
    dt_error e = {0};
    dt_mem_breakdown m;
    p->parallel.zero_stage = stage;
    p->parallel.offload_optimizer = opt;
    p->parallel.offload_param = par;
    int rc = dt_memory_estimate_n(p, n, &m, &e);
    if (rc) fprintf(stderr, "estimate failed: %s\n", e.msg);
    CHECK(rc == 0);
    return m;
}

static int64_t states(const dt_mem_breakdown *m) { return m->params + m->grads + m->optimizer; }

/* The users' 32B / 8-GPU table (docs/memory-model.md "The users' 32B / 8-GPU
 * table"): 2-byte everything: 256 / 144 / 88 / 32 GB, ZeRO-2 + optimizer offload
 * 72 GB, ZeRO-3 + CPU offload 8 + 8 + 0 (the table writes ≈24). */
static void test_users_32b_table(void) {
    const int64_t P = 32000000000LL, GB = 1000000000LL;
    dt_plan p;
    derived_plan(&p, P, 8, DT_PREC_PURE_BF16);
    dt_mem_breakdown m = est(&p, P, 0, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.params, 64 * GB);
    CHECK_EQ_I64(m.grads, 64 * GB);
    CHECK_EQ_I64(m.optimizer, 128 * GB);
    CHECK_EQ_I64(states(&m), 256 * GB);
    m = est(&p, P, 1, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.optimizer, 16 * GB);
    CHECK_EQ_I64(states(&m), 144 * GB);
    m = est(&p, P, 2, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.grads, 8 * GB);
    CHECK_EQ_I64(states(&m), 88 * GB);
    m = est(&p, P, 2, DT_OFFLOAD_CPU, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(states(&m), 72 * GB);
    m = est(&p, P, 3, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.params, 8 * GB);
    CHECK_EQ_I64(states(&m), 32 * GB);
    m = est(&p, P, 3, DT_OFFLOAD_CPU, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.params, 8 * GB);
    CHECK_EQ_I64(m.grads, 8 * GB);
    CHECK_EQ_I64(m.optimizer, 0);
    CHECK_EQ_I64(states(&m), 16 * GB); /* not the table's ≈24 */
    /* the optimizer went to the node's host memory: 8 ranks x 4 B x 4e9 */
    CHECK_EQ_I64(m.host_optimizer, 8 * 4 * 4 * GB);
    CHECK_EQ_I64(m.nvme, 0);
}

/* ZeRO paper (Rajbhandari et al. 2020, Figure 1): 7.5B, N_d = 64, K = 12 */
static void test_zero_paper(void) {
    const int64_t P = 7500000000LL;
    dt_plan p;
    derived_plan(&p, P, 64, DT_PREC_MIXED_BF16);
    dt_mem_breakdown m = est(&p, P, 0, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(states(&m), 120000000000LL);
    m = est(&p, P, 1, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(states(&m), 31406250000LL); /* 4Ψ + 12Ψ/64 = 31.4 GB */
    m = est(&p, P, 2, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(states(&m), 16640625000LL); /* 2Ψ + 14Ψ/64 = 16.6 GB */
    m = est(&p, P, 3, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(states(&m), 1875000000LL); /* 16Ψ/64 = 1.9 GB */
    /* without the exact count the derived shape's own count is used */
    m = est(&p, 0, 0, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(states(&m), 16 * dt_model_params(&p.model));
}

/* docs/activations.md, GPT-2 table written out tensor by tensor */
static void test_activations_gpt2(void) {
    dt_plan p;
    base_plan(&p, "gpt2", 1);
    const int64_t B = 4, T = 64, C = 768, F = 3072, H = 12, L = 12, a = 2;
    p.batch.micro_batch = B;
    p.batch.seq_len = T;
    int64_t x = a * B * T * C, ln1 = a * B * T * C, ln1s = 2 * 4 * B * T, qkv = a * B * T * 3 * C;
    int64_t lse = 4 * B * H * T, att = a * B * T * C, res = a * B * T * C, ln2 = a * B * T * C;
    int64_t ln2s = 2 * 4 * B * T, fc = a * B * T * F, gelu = a * B * T * F;
    int64_t block = x + ln1 + ln1s + qkv + lse + att + res + ln2 + ln2s + fc + gelu;
    CHECK_EQ_I64(dt_memory_activations_per_block(&p, 0), block);
    /* Korthikanti's 34·sbh less the two dropout masks = 32·BTC, plus stats and lse */
    CHECK_EQ_I64(block, 32 * B * T * C + 16 * B * T + 4 * B * H * T);
    CHECK_EQ_I64(dt_memory_activations_per_block(&p, 1), x);
    int64_t head = 2 * a * B * T * C + 8 * B * T;
    CHECK_EQ_I64(dt_memory_activations(&p, 0), L * block + head);
    /* K checkpointed: K inputs + one shared recompute area */
    CHECK_EQ_I64(dt_memory_activations(&p, 5), (L - 5) * block + 5 * x + (block - x) + head);
    CHECK_EQ_I64(dt_memory_activations(&p, L), L * x + (block - x) + head);
    /* materialized attention keeps the B·H·T·T probabilities instead of the lse */
    p.activations.attention = DT_ATTN_MATERIALIZED;
    CHECK_EQ_I64(dt_memory_activations_per_block(&p, 0), block - lse + a * B * H * T * T);
    /* fp32: every a becomes 4 */
    p.activations.attention = DT_ATTN_FLASH;
    dt_precision_from_preset(DT_PREC_FP32, &p.precision);
    CHECK_EQ_I64(dt_memory_activations_per_block(&p, 0), 2 * (block - ln1s - ln2s - lse) + ln1s + ln2s + lse);
}

/* llama family with GQA and Qwen3's q/k norm (qwen3-0.6b: C 1024, H 16, Hkv 8, d 128, F 3072) */
static void test_activations_llama(void) {
    dt_plan p;
    base_plan(&p, "qwen3-0.6b", 1);
    const int64_t B = 2, T = 128, C = 1024, H = 16, Hkv = 8, d = 128, F = 3072, a = 2;
    p.batch.micro_batch = B;
    p.batch.seq_len = T;
    int64_t BT = B * T;
    int64_t block = a * BT * C            /* x */
                  + a * BT * C + 4 * BT   /* rmsnorm 1 out, rstd */
                  + a * BT * H * d        /* q */
                  + 2 * a * BT * Hkv * d  /* k, v */
                  + a * BT * (H + Hkv) * d + 4 * BT * (H + Hkv) /* q/k-norm inputs, rstd */
                  + 4 * B * H * T         /* lse */
                  + a * BT * H * d        /* attention output */
                  + a * BT * C            /* residual */
                  + a * BT * C + 4 * BT   /* rmsnorm 2 out, rstd */
                  + 3 * a * BT * F;       /* gate, up, SiLU(gate)*up */
    CHECK_EQ_I64(dt_memory_activations_per_block(&p, 0), block);
    CHECK_EQ_I64(dt_memory_activations(&p, 0), 28 * block + 2 * a * BT * C + 4 * BT);
}

/* NVMe optimizer offload: 4 host swap buffers of one sub_group_size tile each (fp32 with a
 * master), the tile never below the largest unit's shard (docs/memory-model.md) */
static void test_nvme_sub_group(void) {
    const int64_t P = 32000000000LL, n = 8, sg = 100000000LL, swap_bytes = 4 * 4; /* 4 buffers x fp32 */
    dt_plan p;
    derived_plan(&p, P, n, DT_PREC_MIXED_BF16);
    CHECK_EQ_I64(p.parallel.sub_group_elems, 1000000000LL); /* DeepSpeed's default */
    dt_mem_breakdown d = est(&p, P, 3, DT_OFFLOAD_NVME, DT_OFFLOAD_NONE);
    p.parallel.sub_group_elems = sg;
    dt_mem_breakdown s = est(&p, P, 3, DT_OFFLOAD_NVME, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(d.host_buffers - s.host_buffers, n * swap_bytes * (1000000000LL - sg));
    CHECK_EQ_I64(d.nvme, s.nvme);
    p.parallel.sub_group_elems = 1;
    dt_mem_breakdown f = est(&p, P, 3, DT_OFFLOAD_NVME, DT_OFFLOAD_NONE);
    const dt_model *m = &p.model;
    int64_t unit = dt_model_embedding_params(m);
    if (dt_model_block_params(m) > unit) unit = dt_model_block_params(m);
    if (dt_model_head_params(m) > unit) unit = dt_model_head_params(m);
    const int64_t tile = (unit + n - 1) / n;   /* the unit padded to the world, one rank's part */
    CHECK(tile > 1 && tile < sg);
    CHECK_EQ_I64(s.host_buffers - f.host_buffers, n * swap_bytes * (sg - tile));
}

/* dtrun's CPU device: an offloaded optimizer that needs no upcast reads the gradient shard
 * in place (engine/dist/zero.c grads_in_place): no host gradient partition; with a
 * master (mixed precision, 16-bit grads) the fp32 copy is still made */
static void test_cpu_grads_in_place(void) {
    const int64_t P = 124000000LL;
    dt_plan p;
    dt_error e;
    derived_plan(&p, P, 2, DT_PREC_FP32);
    CHECK(dt_hardware_load("cpu", NULL, &p.cluster.hw, &e) == DT_OK);
    p.cluster.device = p.cluster.hw.device;
    CHECK(dt_memory_cpu_grads_in_place(&p));
    dt_mem_breakdown m = est(&p, P, 2, DT_OFFLOAD_CPU, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.host_buffers, 0);
    CHECK_EQ_I64(m.host_optimizer, 2 * 8 * (P / 2));   /* m and v of both ranks' shards */
    dt_precision_from_preset(DT_PREC_MIXED_BF16, &p.precision);
    CHECK(!dt_memory_cpu_grads_in_place(&p));
    m = est(&p, P, 2, DT_OFFLOAD_CPU, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.host_buffers, 2 * 4 * (P / 2));     /* the fp32 gradient partition */
}

static void test_precision_overrides_and_offload(void) {
    const int64_t P = 32000000000LL;
    dt_plan p;
    derived_plan(&p, P, 8, DT_PREC_MIXED_BF16);
    p.precision.grad = DT_DTYPE_FP32; /* fp32 gradient accumulation */
    dt_mem_breakdown m = est(&p, P, 1, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.grads, 4 * P);
    /* fp32 preset: 4 / 4 / 8 */
    dt_precision_from_preset(DT_PREC_FP32, &p.precision);
    m = est(&p, P, 0, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(states(&m), 16 * P);
    CHECK_EQ_I64(m.optimizer, 8 * P);
    /* NVMe: both offloads, per node = 8 local ranks' shards */
    dt_precision_from_preset(DT_PREC_MIXED_BF16, &p.precision);
    m = est(&p, P, 3, DT_OFFLOAD_NVME, DT_OFFLOAD_NVME);
    CHECK_EQ_I64(m.params, 0);
    CHECK_EQ_I64(m.optimizer, 0);
    CHECK_EQ_I64(m.nvme, (12 + 2) * P);
    CHECK(m.host_buffers > 0 && m.host_optimizer == 0 && m.host_params == 0);
    m = est(&p, P, 3, DT_OFFLOAD_CPU, DT_OFFLOAD_CPU);
    CHECK_EQ_I64(m.host_params, 2 * P);
    CHECK_EQ_I64(m.host_optimizer, 12 * P);
    CHECK_EQ_I64(m.host_buffers, 4 * P); /* fp32 gradient partition for the CPU optimizer */
    CHECK_EQ_I64(m.host_total, 18 * P);
    /* two nodes: each node holds half */
    p.cluster.nodes = 2;
    p.cluster.gpus_per_node = 4;
    m = est(&p, P, 3, DT_OFFLOAD_CPU, DT_OFFLOAD_CPU);
    CHECK_EQ_I64(m.host_total, 9 * P);
}

static void test_totals_and_buffers(void) {
    dt_plan p;
    base_plan(&p, "gpt2-tiny", 2);
    p.cluster.hw.reserve_bytes = 12345;
    const int64_t P = dt_model_params(&p.model);
    dt_mem_breakdown m = est(&p, 0, 0, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    /* a CPU plan's reserve is the runtime term (docs/memory-model.md "The CPU runtime
     * term"): the profile's reserve (no measured runtime) + the larger of the MPI
     * temporaries (an all-reduce of the whole fp32-or-bf16 gradient, under a piece) and
     * the I/O chunk (the fp32 state, under a chunk) */
    {
        const int64_t g = dt_precision_grad_bytes(&p.precision), io = 4 * P, comm = g * P;
        CHECK_EQ_I64(m.reserve, 12345 + (comm > io ? comm : io));
    }
    CHECK_EQ_I64(m.total, m.params + m.grads + m.optimizer + m.activations + m.buffers + m.reserve);
    /* buckets are bounded by the model: 5e8-element buckets shrink to Ψ */
    const int64_t B = p.batch.micro_batch, T = p.batch.seq_len, V = p.model.vocab, C = p.model.hidden;
    /* the CPU engine's GPT-2 compute temporaries (docs/engine.md "Memory"): logits,
     * losses, ids, lse, fp32 gradient scratch, fp32 working copies for 16-bit storage */
    const int64_t F = p.model.ffn, maxpos_c = p.model.max_pos * C;
    const int64_t group = dt_model_block_params(&p.model) > maxpos_c ? dt_model_block_params(&p.model) : maxpos_c;
    CHECK(p.cluster.device == DT_DEVICE_CPU && p.precision.param == DT_DTYPE_BF16);
    int64_t fixed = 4 * B * T * V + 4 * B * T + 8 * B * T + 4 * B * T + 4 * B * T * (5 * C + F) +
                    4 * group + (4 * group + 4 * V + 4 * B * T) + 4 * B * T * (9 * C + 2 * F);
    /* the CPU engine (engine/dist/zero.c, docs/zero.md "Buffers") communicates per
     * padded unit: E embeddings, U the largest block, S the largest shard */
    const int64_t E = dt_model_embedding_params(&p.model), U = dt_model_block_params(&p.model);
    const int64_t Pm = E > U ? E : U, S = Pm / 2; /* gpt2-tiny: both even, no padding at world 2 */
    CHECK(E % 2 == 0 && U % 2 == 0);
    CHECK_EQ_I64(m.buffers, fixed); /* stage 0 all-reduces the flat gradient in place */
    m = est(&p, 0, 1, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.buffers, 2 * Pm + 2 * Pm + fixed);
    m = est(&p, 0, 2, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.buffers, 2 * (E + U) + 2 * S + 2 * Pm + fixed);
    m = est(&p, 0, 3, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.buffers, 2 * (E + U) + 2 * (E + U) + 2 * S + fixed);
    p.parallel.overlap_comm = 1; /* double-buffered blocks, one receive per unit buffer */
    m = est(&p, 0, 3, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.buffers, 2 * (E + 2 * U) + 2 * (E + 2 * U) + 3 * 2 * S + fixed);
    m = est(&p, 0, 1, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.buffers, 2 * 2 * Pm + 2 * Pm + fixed);
    /* odd units are padded to the world: 3 ranks */
    p.cluster.gpus_per_node = 3;
    p.parallel.world_size = 3;
    m = est(&p, 0, 3, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    const int64_t E3 = (E + 2) / 3 * 3, U3 = (U + 2) / 3 * 3, S3 = (E3 > U3 ? E3 : U3) / 3;
    CHECK_EQ_I64(m.buffers, 2 * (E3 + 2 * U3) * 2 + 3 * 2 * S3 + fixed);
    p.cluster.gpus_per_node = 2;
    p.parallel.world_size = 2;
    p.parallel.overlap_comm = 0;
    /* a world of one runs the same unit buffers (local copies replace collectives) */
    p.cluster.gpus_per_node = 1;
    p.parallel.world_size = 1;
    m = est(&p, 0, 0, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.buffers, fixed);
    m = est(&p, 0, 3, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.buffers, 2 * (E + U) * 2 + 2 * Pm + fixed);
    /* a GPU backend: no fp32 working copies, 16-bit gradient scratch, and
     * DeepSpeed's flat buckets, bounded by the model (5e8-element buckets shrink to Ψ) */
    p.cluster.device = DT_DEVICE_CUDA;
    /* logits, losses, ids, the residual gradient in and out and the widest in-linear gradient
     * (bf16), and the CUDA engine's cuBLAS workspace (32 MiB, common/dt_plan.h) */
    CHECK_EQ_I64(DT_CUDA_GEMM_WORKSPACE_BYTES, 32 << 20);
    const int64_t gfixed = 4 * B * T * V + 4 * B * T + 8 * B * T + 2 * B * T * (2 * C + (F > 3 * C ? F : 3 * C)) +
                           DT_CUDA_GEMM_WORKSPACE_BYTES;
    m = est(&p, 0, 0, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.buffers, gfixed); /* a world of one communicates nothing: no buckets */
    p.cluster.gpus_per_node = 2;
    p.parallel.world_size = 2;
    m = est(&p, 0, 0, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.buffers, 2 * P + gfixed);
    m = est(&p, 0, 2, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE); /* overlap off: one ipg buffer + allgather */
    CHECK_EQ_I64(m.buffers, 2 * P + 2 * P + gfixed);
    p.parallel.overlap_comm = 1;
    m = est(&p, 0, 2, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.buffers, 3 * 2 * P + gfixed);
    /* stage 3: reduce bucket + current and prefetched block + the block's full grads */
    m = est(&p, 0, 3, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.buffers, 2 * P + 2 * 2 * U + 2 * U + gfixed);
    /* smaller buckets than the model are used as given */
    p.parallel.reduce_bucket_elems = 1000;
    p.parallel.allgather_bucket_elems = 500;
    m = est(&p, 0, 2, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.buffers, 2 * 1000 * 2 + 500 * 2 + gfixed);
    p.parallel.reduce_bucket_elems = 500000000;
    p.cluster.device = DT_DEVICE_CPU;
    /* partition padding: an odd count over 2 ranks rounds up */
    m = est(&p, 1001, 3, DT_OFFLOAD_NONE, DT_OFFLOAD_NONE);
    CHECK_EQ_I64(m.params, 2 * 501);
}

static void test_errors(void) {
    dt_plan p;
    dt_error e = {0};
    dt_mem_breakdown m;
    base_plan(&p, "gpt2", 8);
    p.parallel.zero_stage = 2;
    p.parallel.offload_param = DT_OFFLOAD_CPU;
    CHECK(dt_memory_estimate(&p, &m, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "offload_param") != NULL);
    p.parallel.offload_param = DT_OFFLOAD_NONE;
    p.parallel.offload_optimizer = DT_OFFLOAD_NVME;
    CHECK(dt_memory_estimate(&p, &m, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "nvme") != NULL);
    p.parallel.offload_optimizer = DT_OFFLOAD_NONE;
    p.parallel.world_size = 7;
    CHECK(dt_memory_estimate(&p, &m, &e) == DT_EINVAL);
    p.parallel.world_size = 8;
    p.activations.ckpt_layers = 13;
    CHECK(dt_memory_estimate(&p, &m, &e) == DT_EINVAL);
    p.activations.ckpt_layers = 0;
    CHECK(dt_memory_estimate(&p, &m, &e) == 0);
    /* absurd sizes are refused, not overflowed */
    p.batch.seq_len = (int64_t)1 << 40;
    p.batch.micro_batch = (int64_t)1 << 20;
    CHECK(dt_memory_estimate(&p, &m, &e) == DT_EINVAL);
}

int main(void) {
    test_users_32b_table();
    test_zero_paper();
    test_activations_gpt2();
    test_activations_llama();
    test_precision_overrides_and_offload();
    test_nvme_sub_group();
    test_cpu_grads_in_place();
    test_totals_and_buffers();
    test_errors();
    TEST_MAIN_END();
}
