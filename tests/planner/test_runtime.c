/* test_runtime.c — the runtime profiles deepspeed / fsdp (docs/memory-model.md "Runtime
 * profiles"): Hugging Face's activation terms against hand-counted tensors (Korthikanti
 * et al. 2022's 34sbh + 5as^2b for GPT-2 eager attention with dropout), offload placement,
 * the phase-wise peak, ZeRO-3 reuse distance and persistence, FSDP's states, selective
 * recompute in the memory and time models, the solver's selective choice (MILP == brute
 * force), and the simulator's peak against the closed form. */
#include <stdlib.h>
#include <string.h>

#include "dt_memory.h"
#include "dt_model.h"
#include "dt_simulate.h"
#include "dt_solve.h"
#include "dt_timemodel.h"
#include "plan_fixture.h"

/* gpt2 or qwen3-0.6b under runtime kind on gpus H100 ranks, no reserve */
static void hf_plan(dt_plan *p, const char *model, int64_t gpus, dt_runtime_kind kind) {
    dt_error e = {0};
    fixture_plan(p, model, 0, gpus);
    CHECK(dt_hardware_load("H100-SXM-80GB", NULL, &p->cluster.hw, &e) == DT_OK);
    p->cluster.hw.reserve_bytes = 0;
    p->cluster.device = p->cluster.hw.device;
    p->batch.global_batch = gpus;
    dt_plan_set_runtime(p, kind);
}

static int64_t total(const dt_plan *p) {
    dt_mem_breakdown m;
    dt_error e = {0};
    CHECK(dt_memory_estimate(p, &m, &e) == DT_OK);
    return m.total;
}

/* GPT-2 under HF: the description's 32·BTC + stats, the two residual dropout masks (1 byte
 * per element), NewGELU's three extra F-wide tensors; eager attention with dropout keeps
 * 5 bytes per B·H·T² element: Korthikanti's 34·sbh + 5·a·s²·b, plus the fp32 LayerNorm
 * statistics they ignore (16 bytes per token) and, unfused, 3F·a. */
static void test_gpt2_hf_block(void) {
    dt_plan p;
    hf_plan(&p, "gpt2", 1, DT_RUNTIME_DEEPSPEED);
    const int64_t B = 4, T = 64, C = 768, F = 3072, H = 12, a = 2, BT = B * T;
    p.batch.micro_batch = B;
    p.batch.seq_len = T;
    CHECK(p.runtime.dropout && p.runtime.unfused_act && !p.runtime.upcast_norm && !p.runtime.upcast_softmax);
    const int64_t lse = 4 * B * H * T;
    CHECK_EQ_I64(dt_memory_activations_per_block(&p, 0), 34 * BT * C + 16 * BT + lse + 3 * a * BT * F);
    dt_error e = {0};
    CHECK(dt_plan_set_attention(&p, "eager", "--attention", &e) == DT_OK);
    CHECK(p.activations.attention == DT_ATTN_MATERIALIZED);
    p.runtime.unfused_act = 0;
    CHECK_EQ_I64(dt_memory_activations_per_block(&p, 0), 34 * BT * C + 16 * BT + 5 * a / 2 * B * H * T * T);
    /* selective recompute drops exactly the s² part */
    p.activations.selective = 1;
    CHECK_EQ_I64(dt_memory_activations_per_block(&p, 0), 34 * BT * C + 16 * BT);
    /* without dropout the softmax output is the PV input: a bytes per element, no masks */
    p.activations.selective = 0;
    p.runtime.dropout = 0;
    CHECK_EQ_I64(dt_memory_activations_per_block(&p, 0), 32 * BT * C + 16 * BT + a * B * H * T * T);
    /* the head adds the embedding dropout's mask with dropout on */
    p.runtime.dropout = 1;
    dt_plan q = p;
    q.runtime.kind = DT_RUNTIME_DTRUN;
    memset(&q.runtime, 0, sizeof q.runtime);
    q.activations.attention = DT_ATTN_MATERIALIZED;
    const int64_t head_hf = dt_memory_activations(&p, 0) - 12 * dt_memory_activations_per_block(&p, 0);
    const int64_t head_dt = dt_memory_activations(&q, 0) - 12 * dt_memory_activations_per_block(&q, 0);
    CHECK_EQ_I64(head_hf - head_dt, BT * C);
}

/* Qwen3-0.6B under HF: RMSNorm's fp32 input copy (+4 bytes per normalised element: two block
 * norms of C and the q/k norms of (H + Hkv)·d), SiLU·up keeps one more F; eager with an fp32
 * softmax keeps 4 + a bytes per score. */
static void test_llama_hf_block(void) {
    dt_plan p, q;
    hf_plan(&p, "qwen3-0.6b", 1, DT_RUNTIME_FSDP);
    const int64_t B = 2, T = 128, C = 1024, H = 16, Hkv = 8, d = 128, F = 3072, a = 2, BT = B * T;
    p.batch.micro_batch = B;
    p.batch.seq_len = T;
    q = p;
    memset(&q.runtime, 0, sizeof q.runtime);
    CHECK(!p.runtime.dropout && p.runtime.upcast_norm && p.runtime.upcast_softmax);
    const int64_t dtrun_block = dt_memory_activations_per_block(&q, 0);
    CHECK_EQ_I64(dt_memory_activations_per_block(&p, 0) - dtrun_block, 4 * BT * (2 * C + (H + Hkv) * d) + a * BT * F);
    dt_error e = {0};
    CHECK(dt_plan_set_attention(&p, "eager", "--attention", &e) == DT_OK);
    const int64_t lse = 4 * B * H * T;
    CHECK_EQ_I64(dt_memory_activations_per_block(&p, 0) - dtrun_block,
                 4 * BT * (2 * C + (H + Hkv) * d) + a * BT * F - lse + (4 + a) * B * H * T * T);
}

/* Offload placement: DeepSpeed keeps the reduced gradient partition in pinned host memory with
 * offload_optimizer (stage_1_and_2.py / stage3.py self.device = cpu); dtrun keeps it on the device. */
static void test_offload_placement(void) {
    dt_plan p;
    dt_mem_breakdown m;
    dt_error e = {0};
    hf_plan(&p, "qwen3-0.6b", 8, DT_RUNTIME_DEEPSPEED);
    for (int stage = 2; stage <= 3; stage++) {
        p.parallel.zero_stage = stage;
        p.parallel.offload_optimizer = DT_OFFLOAD_NONE;
        dt_mem_phases ph;
        CHECK(dt_memory_phases(&p, 0, &ph, &e) == DT_OK);
        const int64_t shard = (dt_model_params(&p.model) + 7) / 8;
        CHECK_EQ_I64(ph.at[DT_MEM_PHASE_BWD_END].grads, 2 * shard);
        p.parallel.offload_optimizer = DT_OFFLOAD_CPU;
        CHECK(dt_memory_phases(&p, 0, &ph, &e) == DT_OK);
        for (int i = DT_MEM_PHASE_BWD_START; i < DT_MEM_PHASE_COUNT; i++) CHECK_EQ_I64(ph.at[i].grads, 0);
        CHECK(ph.at[DT_MEM_PHASE_BWD_END].host_buffers >= 4 * shard * 8);   /* the fp32 partition, per node */
    }
    memset(&p.runtime, 0, sizeof p.runtime);
    p.activations.attention = DT_ATTN_FLASH;
    CHECK(dt_memory_estimate(&p, &m, &e) == DT_OK);
    CHECK(m.grads > 0);
}

/* The phase-wise peak is the largest phase, each phase a sum of its live terms; with one
 * micro-step stage 2's gradients do not exist at the loss backward. */
static void test_phase_peak(void) {
    dt_plan p;
    dt_error e = {0};
    hf_plan(&p, "qwen3-0.6b", 8, DT_RUNTIME_DEEPSPEED);
    p.batch.micro_batch = 4;
    p.batch.seq_len = 1024;
    p.parallel.zero_stage = 2;
    dt_mem_phases ph;
    CHECK(dt_memory_phases(&p, 0, &ph, &e) == DT_OK);
    CHECK(ph.peak == DT_MEM_PHASE_BWD_START);
    CHECK_EQ_I64(ph.at[DT_MEM_PHASE_BWD_START].grads, 0);
    for (int i = DT_MEM_PHASE_BWD_START; i < DT_MEM_PHASE_COUNT; i++) {
        const dt_mem_breakdown *b = &ph.at[i];
        CHECK_EQ_I64(b->total, b->params + b->grads + b->optimizer + b->activations + b->buffers + b->reserve);
        CHECK(b->total <= ph.at[ph.peak].total);
    }
    CHECK_EQ_I64(total(&p), ph.at[ph.peak].total);
    /* accumulation keeps the partition from the first micro-step: it is live at the loss backward */
    p.batch.grad_accum = 4;
    p.batch.global_batch = 4 * 4 * 8;
    CHECK(dt_memory_phases(&p, 0, &ph, &e) == DT_OK);
    CHECK(ph.at[DT_MEM_PHASE_BWD_START].grads > 0);
}

/* ZeRO-3: a larger stage3_max_reuse_distance keeps more blocks gathered across the turn from
 * forward to backward; the persistence threshold keeps small tensors whole on every rank. */
static void test_zero3_fetch(void) {
    dt_plan p;
    hf_plan(&p, "gpt2", 8, DT_RUNTIME_DEEPSPEED);
    p.parallel.zero_stage = 3;
    p.runtime.max_reuse_distance = 0;
    const int64_t none = total(&p);
    p.runtime.max_reuse_distance = 1000000000;   /* gpt2 (124M) stays gathered whole */
    const int64_t all = total(&p);
    CHECK(all > none);
    CHECK(all - none <= 2 * dt_model_params(&p.model));
    p.runtime.max_reuse_distance = 0;
    p.runtime.persistence_threshold = 0;
    const int64_t nothing_persists = total(&p);
    p.runtime.persistence_threshold = 100000;
    CHECK(total(&p) > nothing_persists);   /* gpt2's biases and norms stay whole */
    /* block matrix vs module: the transient gradient is a block's largest matrix instead of V·h */
    const int64_t by_module = total(&p);
    p.runtime.largest_layer = DT_LARGEST_BLOCK_MATRIX;
    CHECK_EQ_I64(by_module - total(&p), 2 * (dt_model_largest_module_params(&p.model) -
                                             dt_model_largest_block_matrix_params(&p.model)));
}

/* FSDP keeps fp32 sharded params, fp32 sharded grads and m, v: 4 + 4 + 8 bytes per shard element. */
static void test_fsdp_states(void) {
    dt_plan p;
    dt_error e = {0};
    hf_plan(&p, "qwen3-0.6b", 8, DT_RUNTIME_FSDP);
    p.parallel.zero_stage = 3;
    dt_mem_phases ph;
    CHECK(dt_memory_phases(&p, 0, &ph, &e) == DT_OK);
    const int64_t shard = (dt_model_params(&p.model) + 7) / 8;
    const dt_mem_breakdown *b = &ph.at[DT_MEM_PHASE_BWD_END];
    CHECK_EQ_I64(b->params, 4 * shard);
    CHECK_EQ_I64(b->grads, 4 * shard);
    CHECK_EQ_I64(b->optimizer, 8 * shard);
    /* stage 1 does not exist in FSDP; CPUOffload moves params, grads and optimizer together */
    p.parallel.zero_stage = 1;
    CHECK(dt_plan_validate(&p, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "FSDP has no optimizer-only sharding") != NULL);
    p.parallel.zero_stage = 3;
    p.parallel.offload_optimizer = DT_OFFLOAD_CPU;
    CHECK(dt_plan_validate(&p, &e) == DT_EINVAL);
    p.parallel.offload_param = DT_OFFLOAD_CPU;
    CHECK(dt_plan_validate(&p, &e) == DT_OK);
}

/* Selective recompute in the time model: the attention core of every block, once per
 * micro-step, and a checkpointed block's recompute (a whole forward under torch.utils.checkpoint)
 * includes it. The step stays affine in K. */
static void test_selective_time(void) {
    dt_plan p;
    dt_error e = {0};
    hf_plan(&p, "qwen3-0.6b", 8, DT_RUNTIME_DEEPSPEED);
    CHECK(dt_plan_set_attention(&p, "eager", "--attention", &e) == DT_OK);
    dt_time_compute cm;
    CHECK(dt_time_compute_micro(&p, &cm, &e) == DT_OK);
    CHECK_NEAR(cm.block_recompute_s, cm.block_fwd_s, 1e-12);   /* the whole forward, unlike dtrun's */
    dt_time_terms t0, t1;
    CHECK(dt_time_terms_build(&p, &t0, &e) == DT_OK);
    p.activations.selective = 1;
    CHECK(dt_time_terms_build(&p, &t1, &e) == DT_OK);
    const double L = (double)p.model.n_layer;
    CHECK_NEAR(t1.recompute_base_s, L * cm.attn_core_s, 1e-12);
    CHECK_NEAR(t1.per_ckpt_s, t0.per_ckpt_s - cm.attn_core_s, 1e-12);
    dt_time_breakdown a, b;
    dt_time_terms_eval(&t1, p.model.n_layer, &a);
    dt_time_terms_eval(&t0, p.model.n_layer, &b);
    CHECK_NEAR(a.step_s, b.step_s, 1e-9);   /* every block checkpointed: selective costs nothing more */
}

/* The solver may choose selective recompute (eager attention, HF runtimes) and the MILP
 * agrees with brute force; a memory limit between the two choices forces it. */
static void test_solver_selective(void) {
    dt_solve_request rq;
    dt_error e = {0};
    memset(&rq, 0, sizeof rq);
    hf_plan(&rq.base, "qwen3-0.6b", 8, DT_RUNTIME_DEEPSPEED);
    CHECK(dt_plan_set_attention(&rq.base, "eager", "--attention", &e) == DT_OK);
    rq.base.batch.seq_len = 2048;
    rq.base.batch.global_batch = 64;
    rq.base.cluster.hw.reserve_bytes = 0;
    /* the flat achievable_flops time model (no sm_count, a custom profile's name): under the
     * shape-aware GPU model (eager attention's core memory-bound, the micro-batch no longer
     * free) selective recompute wins at none of these limits, and this checks the solver's
     * selective linearisation, which needs a case where it wins */
    rq.base.cluster.hw.sm_count = 0;
    strcpy(rq.base.cluster.hw.name, "H100-flat");
    rq.host_limit_bytes = rq.base.cluster.hw.host_mem_bytes;
    rq.nvme_limit_bytes = rq.base.cluster.hw.nvme_bytes;
    rq.stage_mask = 0xF;
    rq.allow_offload = 1;
    int saw_selective = 0;
    const int64_t limits[] = {(int64_t)16 << 30, (int64_t)24 << 30, (int64_t)40 << 30, (int64_t)80 << 30};
    for (int i = 0; i < 4; i++) {
        rq.mem_limit_bytes = limits[i];
        dt_solve_result *a = malloc(sizeof *a), *b = malloc(sizeof *b);
        int ra = dt_solve(&rq, a, &e), rb = dt_solve_enumerate(&rq, b, &e);
        CHECK(ra == rb);
        if (ra == DT_OK && rb == DT_OK) {
            CHECK_NEAR(a->best.step_s, b->best.step_s, 1e-6);
            CHECK(a->best.mem.total <= rq.mem_limit_bytes);
            saw_selective |= a->best.selective;
            CHECK(a->plan.activations.selective == a->best.selective);
        }
        free(a);
        free(b);
    }
    CHECK(saw_selective);
}

/* The simulator under HF runtimes: gradients fill in during the backward, and its peak
 * stays within the closed form's largest phase (which holds every allowance at once). */
static void test_simulator_peak(void) {
    const dt_runtime_kind kinds[2] = {DT_RUNTIME_DEEPSPEED, DT_RUNTIME_FSDP};
    for (int k = 0; k < 2; k++)
        for (int stage = 0; stage <= 3; stage++) {
            if (kinds[k] == DT_RUNTIME_FSDP && stage == 1) continue;
            dt_plan p;
            dt_error e = {0};
            hf_plan(&p, "qwen3-0.6b", 8, kinds[k]);
            p.parallel.zero_stage = stage;
            p.parallel.overlap_comm = 1;
            p.batch.micro_batch = 2;
            p.batch.seq_len = 1024;
            p.batch.global_batch = 16;
            dt_sim_result r;
            CHECK(dt_simulate(&p, &r, &e) == DT_OK);
            const int64_t closed = total(&p), sim = r.mem[r.peak_index].total;
            CHECK(sim <= closed);
            CHECK((double)sim >= 0.75 * (double)closed);
            dt_sim_free(&r);
        }
}

/* Names, parsing, and the dtrun profile: all zero, no runtime section. */
static void test_names(void) {
    dt_runtime_kind k;
    dt_error e = {0};
    CHECK(dt_runtime_parse("fsdp", &k, &e) == DT_OK && k == DT_RUNTIME_FSDP);
    CHECK(dt_runtime_parse("megatron-lm", &k, &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "--runtime 'megatron-lm': unknown runtime (use dtrun, deepspeed, fsdp or megatron") != NULL);
    CHECK(!strcmp(dt_runtime_name(DT_RUNTIME_DEEPSPEED), "deepspeed"));
    CHECK(!strcmp(dt_attn_kernel_name(DT_KERNEL_SDPA), "sdpa"));
    CHECK(!strcmp(dt_mem_phase_name(DT_MEM_PHASE_BWD_END), "backward end"));
    dt_plan p;
    dt_plan_defaults(&p);
    CHECK(p.runtime.kind == DT_RUNTIME_DTRUN && p.runtime.max_reuse_distance == 0);
    CHECK(dt_plan_set_attention(&p, "sdpa", "--attention", &e) == DT_EINVAL);
    CHECK(strstr(e.msg, "flash or materialized") != NULL);
}

/* Qwen3-0.6B under DeepSpeed on 2 nodes x 8 H100 joined by one 100 Gb NIC each: the
 * network the ZeRO++ and gradient-collective tests price. */
static void two_node_plan(dt_plan *p) {
    dt_error e = {0};
    hf_plan(p, "qwen3-0.6b", 16, DT_RUNTIME_DEEPSPEED);
    p->cluster.nodes = 2, p->cluster.gpus_per_node = 8;
    CHECK(dt_hardware_load("H100-SXM-80GB", "100Gb", &p->cluster.hw, &e) == DT_OK);
}

/* DeepSpeed's partial offload (offload_optimizer.ratio): sub-groups of sub_group_size
 * elements, the first int((1 - ratio) x count) on the GPU with their fp32 master, moments and
 * fp32 gradient; one sub-group truncates to none. ZeRO++ hpZ: a secondary 16-bit partition
 * of the partitioned tensors over the hpZ group. The optimizer step and transfers split
 * between the CPU and the GPU; qwZ, qgZ and hpZ shrink what the step communicates. */
static void test_partial_offload_and_zeropp(void) {
    dt_plan p;
    dt_error e = {0};
    dt_mem_phases full, part;
    hf_plan(&p, "qwen3-0.6b", 8, DT_RUNTIME_DEEPSPEED);
    p.parallel.zero_stage = 3;
    p.parallel.offload_optimizer = DT_OFFLOAD_CPU;
    const int64_t psi = dt_model_params(&p.model), shard = (psi + 7) / 8;
    p.parallel.sub_group_elems = 10000000;   /* 1e7: the shard (~75M) is 8 sub-groups */
    const int64_t count = (shard + 9999999) / 10000000, on_gpu = (int64_t)(0.7 * (double)count) * 10000000;
    CHECK(dt_memory_phases(&p, 0, &full, &e) == DT_OK);
    p.runtime.offload_ratio = 0.3;
    CHECK(dt_plan_validate(&p, &e) == DT_OK);
    CHECK_EQ_I64(dt_memory_ds_gpu_opt_elems(&p, shard), on_gpu);
    CHECK(dt_memory_phases(&p, 0, &part, &e) == DT_OK);
    for (int i = DT_MEM_PHASE_BWD_START; i < DT_MEM_PHASE_COUNT; i++) {
        CHECK_EQ_I64(part.at[i].optimizer - full.at[i].optimizer, 12 * on_gpu);   /* master, m, v */
        CHECK_EQ_I64(part.at[i].grads - full.at[i].grads, 4 * on_gpu);            /* the fp32 gradient */
        CHECK_EQ_I64(full.at[i].host_optimizer - part.at[i].host_optimizer, 8 * 12 * on_gpu);
        CHECK_EQ_I64(full.at[i].host_buffers - part.at[i].host_buffers, 8 * 4 * on_gpu);
    }
    p.parallel.sub_group_elems = 1000000000;   /* one sub-group: int(0.7 x 1) = 0 stay on the GPU */
    CHECK_EQ_I64(dt_memory_ds_gpu_opt_elems(&p, shard), 0);
    /* time: the GPU's share steps at HBM speed instead of the CPU's AdamW, and skips the PCIe copies */
    p.parallel.sub_group_elems = 10000000;
    dt_time_terms tf, tp;
    p.runtime.offload_ratio = 1.0;
    CHECK(dt_time_terms_build(&p, &tf, &e) == DT_OK);
    p.runtime.offload_ratio = 0.3;
    CHECK(dt_time_terms_build(&p, &tp, &e) == DT_OK);
    const double host = (double)(shard - on_gpu) / (double)shard;
    CHECK_NEAR(tp.offload_s, tf.offload_s * host, 1e-12);
    CHECK(tp.optimizer_s < tf.optimizer_s && tp.optimizer_s > tf.optimizer_s * host);
    /* a ratio needs stage 3 with the optimizer on the CPU, and the deepspeed runtime */
    p.parallel.offload_optimizer = DT_OFFLOAD_NONE;
    CHECK(dt_plan_validate(&p, &e) == DT_EINVAL && strstr(e.msg, "partial offloading needs ZeRO stage 3"));
    p.runtime.offload_ratio = 1.0;

    /* hpZ: + the secondary partition, 2 bytes per partitioned element / 8 */
    dt_mem_breakdown a, b;
    CHECK(dt_memory_estimate(&p, &a, &e) == DT_OK);
    p.runtime.hpz_partition = 8;
    CHECK(dt_plan_validate(&p, &e) == DT_OK);
    CHECK(dt_memory_estimate(&p, &b, &e) == DT_OK);
    const int64_t persist = dt_model_small_tensor_params(&p.model, p.runtime.persistence_threshold);
    CHECK_EQ_I64(b.params - a.params, 2 * ((psi - persist + 7) / 8));
    p.runtime.hpz_partition = 3;
    CHECK(dt_plan_validate(&p, &e) == DT_EINVAL && strstr(e.msg, "does not divide the world size 8"));

    /* communication on 2 nodes x 8: hpZ's backward gathers stay in the node, qwZ halves the
     * forward gathers, qgZ quarters the reduce-scatter; each alone lowers the step's comm */
    two_node_plan(&p);
    p.parallel.zero_stage = 3;
    dt_time_terms t0, t1;
    CHECK(dt_time_terms_build(&p, &t0, &e) == DT_OK);
    int64_t *hpz = &p.runtime.hpz_partition;
    int *qw = &p.runtime.quantized_weights, *qg = &p.runtime.quantized_gradients;
    for (int k = 0; k < 3; k++) {
        *hpz = k == 0 ? 8 : 1, *qw = k == 1, *qg = k == 2;
        CHECK(dt_plan_validate(&p, &e) == DT_OK);
        CHECK(dt_time_terms_build(&p, &t1, &e) == DT_OK);
        CHECK(t1.comm_total_s < t0.comm_total_s);
        CHECK_NEAR(t1.compute_s, t0.compute_s, 1e-15);
    }
    /* ZeRO++ is DeepSpeed's and stage 3's */
    p.parallel.zero_stage = 2;
    CHECK(dt_plan_validate(&p, &e) == DT_EINVAL && strstr(e.msg, "ZeRO++ is a stage-3 option"));
}

/* The simulator follows ZeRO++: qwZ's forward all-gathers carry half the bytes, qgZ's
 * reduce-scatters a quarter, hpZ's backward all-gathers run on the node's links (2 x 8
 * H100 over 100 Gb): less time than across the nodes. */
static void sim_comm(const dt_plan *p, const char *phase, dt_sim_kind kind, int64_t *bytes, double *busy) {
    dt_sim_result r;
    dt_error e = {0};
    *bytes = 0, *busy = 0.0;
    CHECK(dt_simulate(p, &r, &e) == DT_OK);
    if (e.code) return;
    for (int i = 0; i < r.n_events; i++) {
        const dt_sim_event *ev = &r.events[i];
        if (ev->kind != kind || strcmp(ev->phase, phase)) continue;
        *bytes += ev->bytes, *busy += ev->t1_s - ev->t0_s;
    }
    dt_sim_free(&r);
}

static void test_simulator_zeropp(void) {
    dt_plan p;
    two_node_plan(&p);
    p.parallel.zero_stage = 3;
    p.batch.micro_batch = 2, p.batch.seq_len = 1024, p.batch.global_batch = 32;
    int64_t f0, f1, b0, b1, r0, r1;
    double tf0, tf1, tb0, tb1, tr0, tr1;
    sim_comm(&p, "forward", DT_SIM_ALLGATHER, &f0, &tf0);
    sim_comm(&p, "backward", DT_SIM_ALLGATHER, &b0, &tb0);
    sim_comm(&p, "backward", DT_SIM_REDUCE_SCATTER, &r0, &tr0);
    CHECK(f0 > 0 && b0 > 0 && r0 > 0);
    p.runtime.quantized_weights = 1;
    sim_comm(&p, "forward", DT_SIM_ALLGATHER, &f1, &tf1);
    CHECK(llabs(2 * f1 - f0) <= 64 && tf1 < tf0);   /* int8 instead of bf16 (per-unit rounding) */
    p.runtime.quantized_weights = 0, p.runtime.quantized_gradients = 1;
    sim_comm(&p, "backward", DT_SIM_REDUCE_SCATTER, &r1, &tr1);
    CHECK(llabs(4 * r1 - r0) <= 64 && tr1 < tr0);   /* int4 instead of bf16 */
    p.runtime.quantized_gradients = 0, p.runtime.hpz_partition = 8;
    sim_comm(&p, "backward", DT_SIM_ALLGATHER, &b1, &tb1);
    CHECK(b1 == b0 && tb1 < tb0);                   /* the same bytes, within the node */
}

/* DeepSpeed's gradient collective as its config has it: communication_data_type casts the
 * buckets (fp32: twice bf16's bytes), reduce_scatter false all-reduces them at stages 1-2
 * (twice the ring traffic); the bytes per step and the simulator follow. */
static void test_grad_collective(void) {
    dt_plan p;
    dt_error e = {0};
    two_node_plan(&p);
    p.parallel.zero_stage = 2;
    int64_t b0[DT_COLL_COUNT], b1[DT_COLL_COUNT];
    dt_time_terms t0, t1;
    CHECK(dt_time_terms_build(&p, &t0, &e) == DT_OK && dt_time_comm_bytes(&p, b0, &e) == DT_OK);
    p.runtime.comm_dtype_set = 1, p.runtime.comm_dtype = DT_DTYPE_FP32;
    CHECK(dt_plan_validate(&p, &e) == DT_OK);
    CHECK(dt_time_terms_build(&p, &t1, &e) == DT_OK && dt_time_comm_bytes(&p, b1, &e) == DT_OK);
    CHECK_EQ_I64(b1[DT_COLL_REDUCE_SCATTER], 2 * b0[DT_COLL_REDUCE_SCATTER]);
    CHECK(t1.comm_total_s > t0.comm_total_s);
    p.runtime.comm_dtype_set = 0, p.runtime.grads_allreduce = 1;
    CHECK(dt_plan_validate(&p, &e) == DT_OK);
    CHECK(dt_time_terms_build(&p, &t1, &e) == DT_OK && dt_time_comm_bytes(&p, b1, &e) == DT_OK);
    CHECK_EQ_I64(b1[DT_COLL_REDUCE_SCATTER], 0);
    CHECK_EQ_I64(b1[DT_COLL_ALLREDUCE] - b0[DT_COLL_ALLREDUCE], b0[DT_COLL_REDUCE_SCATTER]);
    CHECK(t1.comm_total_s > t0.comm_total_s);
    int64_t bytes;
    double busy;
    sim_comm(&p, "backward", DT_SIM_ALLREDUCE, &bytes, &busy);
    CHECK(bytes == b0[DT_COLL_REDUCE_SCATTER] && busy > 0);   /* the simulator all-reduces them too */
    /* stage 3 reduce-scatters whatever the key says; fsdp has no such key */
    p.parallel.zero_stage = 3;
    CHECK(dt_time_comm_bytes(&p, b1, &e) == DT_OK && b1[DT_COLL_REDUCE_SCATTER] > 0);
    p.runtime.kind = DT_RUNTIME_FSDP;
    CHECK(dt_plan_validate(&p, &e) == DT_EINVAL && strstr(e.msg, "DeepSpeed's options, not fsdp's"));
}

int main(void) {
    test_names();
    test_gpt2_hf_block();
    test_llama_hf_block();
    test_offload_placement();
    test_phase_peak();
    test_zero3_fetch();
    test_fsdp_states();
    test_selective_time();
    test_solver_selective();
    test_simulator_peak();
    test_partial_offload_and_zeropp();
    test_simulator_zeropp();
    test_grad_collective();
    TEST_MAIN_END();
}
