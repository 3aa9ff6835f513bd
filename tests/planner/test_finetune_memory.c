/* test_finetune_memory.c — the fine-tuning terms of the memory and time models
 * (planner/finetune.c):
 *   - activations against what PyTorch autograd keeps under transformers + PEFT
 *     (tests/planner/golden/ft_activations.txt, scripts/gen_finetune_activation_goldens.py):
 *     full, freeze, LoRA on all linears / q,v / with dropout, per byte, once the full
 *     model's own per-block difference from that run (RoPE's cos / sin, which the HF profile
 *     does not count) and the CPU's dropout masks (kept in the input's dtype there, one byte
 *     by the GPU's fused kernel the profile models) are accounted for;
 *   - ZeRO's treatment of frozen weights (replicated at 1-2, partitioned at 3) and of the
 *     adapters' state (offload), the adapters' dtype;
 *   - time: a frozen early half runs no backward, LoRA adds work, QLoRA dequantises;
 *   - the solver keeps the method. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_ftplan.h"
#include "dt_memory.h"
#include "dt_model.h"
#include "dt_solve.h"
#include "dt_test.h"
#include "dt_timemodel.h"

#define MAX_LAYERS 16
#define CPU_MASK_BYTES 2   /* torch on a CPU keeps dropout's noise in the bf16 input's dtype */

static void gpu_plan(dt_plan *p, const char *model) {
    dt_error e = {0};
    dt_plan_defaults(p);
    if (dt_model_resolve(model, &p->model, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
    if (dt_hardware_load("H100-SXM-80GB", NULL, &p->cluster.hw, &e)) exit(1);
    p->cluster.device = DT_DEVICE_CUDA;
}

/* the blocks' activations (head apart), bytes, and the dropout masks they keep, elements/token */
static int64_t blocks_bytes(const dt_plan *p, int64_t *masks) {
    *masks = 0;
    if (!dt_ftplan_active(p)) return dt_memory_activations(p, 0) - dt_memory_head_activations(p);
    dt_ftplan ft;
    dt_error e = {0};
    CHECK(dt_ftplan_of(p, &ft, &e) == DT_OK);
    const int64_t a = dt_dtype_size(p->precision.activation), BT = p->batch.micro_batch * p->batch.seq_len;
    const int64_t head_drop = a * BT * dt_pgroups_head_dropped(&p->model, &ft.g);
    for (int64_t l = ft.first_layer; l < p->model.n_layer; l++) {
        dt_ft_saved s;
        dt_pgroups_block_saved(&p->model, &ft.g, &p->finetune, l, 1, l > ft.first_layer || ft.grad_into_first, &s);
        *masks += s.lora_dropout_in - s.masks_unkept;
    }
    return dt_ftplan_activations(p, &ft, 0) - dt_memory_head_activations(p) + head_drop;
}

static void activations_vs_torch(const char *dir) {
    char path[1024], line[4096];
    snprintf(path, sizeof path, "%s/ft_activations.txt", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return;
    snprintf(path, sizeof path, "%s/llama-ft-probe.json", dir);
    dt_plan p;
    gpu_plan(&p, path);
    dt_plan_set_runtime(&p, DT_RUNTIME_DEEPSPEED);   /* HF model code: what the golden ran */
    long long B = 0, T = 0;
    int64_t gap = -1, cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        if (!B) {
            CHECK(sscanf(line, "%lld %lld", &B, &T) == 2);
            p.batch.micro_batch = B, p.batch.seq_len = T, p.batch.global_batch = B;
            continue;
        }
        char name[64], method[16], targets[128];
        long long r, n, per[MAX_LAYERS];
        double drop;
        int off = 0, k = 0;
        if (sscanf(line, "%63s %15s %127s %lld %lf %lld%n", name, method, targets, &r, &drop, &n, &off) != 6) continue;
        for (char *s = line + off; k < MAX_LAYERS;) {
            char *end;
            long long v = strtoll(s, &end, 10);
            if (end == s) break;
            per[k++] = v, s = end;
        }
        CHECK_EQ_I64(k, p.model.n_layer);
        int64_t torch = 0;
        for (int i = 0; i < k; i++) torch += per[i];
        dt_error e = {0};
        dt_ft_method m = DT_FT_FULL;
        CHECK(dt_ft_method_parse(method, &m, &e) == DT_OK);
        dt_finetune_defaults(m, &p.finetune);
        if (m == DT_FT_FREEZE) p.finetune.trainable_layers = n;
        if (m == DT_FT_LORA) {
            p.finetune.lora_rank = r, p.finetune.lora_alpha = 2.0 * (double)r, p.finetune.lora_dropout = drop;
            p.finetune.lora_target_all = !strcmp(targets, "all");
            if (!p.finetune.lora_target_all) CHECK(dt_ft_names_parse(targets, "t", &p.finetune.lora_target, &e) == DT_OK);
        }
        int64_t masks;
        const int64_t ours = blocks_bytes(&p, &masks);
        if (m == DT_FT_FULL) {   /* the full model's own per-block difference */
            CHECK((torch - ours) % p.model.n_layer == 0 && torch >= ours);
            gap = (torch - ours) / p.model.n_layer;
            cases++;
            continue;
        }
        CHECK(gap >= 0);
        dt_ftplan ft;
        CHECK(dt_ftplan_of(&p, &ft, &e) == DT_OK);
        const int64_t expect = ours + (p.model.n_layer - ft.first_layer) * gap + (CPU_MASK_BYTES - 1) * B * T * masks;
        if (expect != torch)
            fprintf(stderr, "%s: planner %" PRId64 " (+ %" PRId64 " per reached block, masks %" PRId64 ") = %" PRId64
                    ", torch %" PRId64 "\n", name, ours, gap, masks, expect, torch);
        CHECK_EQ_I64(expect, torch);
        cases++;
    }
    fclose(f);
    CHECK(cases == 5);
}

static void zero_rules(void) {
    dt_plan p;
    gpu_plan(&p, "llama-3.1-8b");
    p.batch.seq_len = 1024;
    p.cluster.gpus_per_node = p.parallel.world_size = 8;
    p.batch.global_batch = 8;
    dt_finetune_defaults(DT_FT_QLORA, &p.finetune);
    dt_ftplan ft;
    dt_ft_terms t;
    dt_error e = {0};
    CHECK(dt_ftplan_of(&p, &ft, &e) == DT_OK);
    for (int stage = 0; stage <= 3; stage++) {
        p.parallel.zero_stage = stage;
        CHECK(dt_ftplan_terms(&p, &ft, &t) == DT_OK);
        /* dtrun keeps the frozen base replicated at every stage (its base set) */
        CHECK_EQ_I64(t.frozen_weights, ft.frozen_bytes);
        /* the adapters (fp32 under dtrun): weights 4 B, grads 4 B, m + v 8 B, by stage */
        CHECK_EQ_I64(t.adapter_weights, 4 * (stage == 3 ? (ft.adapter + 7) / 8 : ft.adapter));
        CHECK_EQ_I64(t.adapter_grads, 4 * (stage >= 2 ? (ft.adapter + 7) / 8 : ft.adapter));
        CHECK_EQ_I64(t.adapter_optimizer, 8 * (stage >= 1 ? (ft.adapter + 7) / 8 : ft.adapter));
    }
    /* DeepSpeed: ZeRO-1/2 partition only the trained state; ZeRO-3 every parameter */
    dt_plan_set_runtime(&p, DT_RUNTIME_DEEPSPEED);
    for (int stage = 0; stage <= 3; stage++) {
        p.parallel.zero_stage = stage;
        CHECK(dt_ftplan_terms(&p, &ft, &t) == DT_OK);
        CHECK_EQ_I64(t.frozen_weights, stage == 3 ? (ft.frozen_bytes + 7) / 8 : ft.frozen_bytes);
    }
    p.parallel.offload_optimizer = DT_OFFLOAD_CPU;
    p.parallel.offload_param = DT_OFFLOAD_CPU;
    CHECK(dt_ftplan_terms(&p, &ft, &t) == DT_OK);
    CHECK_EQ_I64(t.adapter_optimizer, 0);
    CHECK_EQ_I64(t.frozen_weights, 0);
    CHECK_EQ_I64(t.frozen_host, (ft.frozen_bytes + 7) / 8 * 8);
    /* dtrun never offloads the base: it stays on the device */
    dt_plan_set_runtime(&p, DT_RUNTIME_DTRUN);
    CHECK(dt_ftplan_terms(&p, &ft, &t) == DT_OK);
    CHECK_EQ_I64(t.frozen_weights, ft.frozen_bytes);
    CHECK_EQ_I64(t.frozen_host, 0);
    /* the memory model's params column at stage 2: the frozen base plus the adapters */
    p.parallel.zero_stage = 2, p.parallel.offload_optimizer = p.parallel.offload_param = DT_OFFLOAD_NONE;
    dt_mem_breakdown m;
    CHECK(dt_memory_estimate(&p, &m, &e) == DT_OK);
    CHECK_EQ_I64(m.params, ft.frozen_bytes + 4 * ft.adapter);
    CHECK_EQ_I64(m.grads, 4 * ((ft.adapter + 7) / 8));
    /* the dequantised transient: the largest NF4 weight (gate / up / down: 4096 x 14336) in bf16 */
    CHECK_EQ_I64(t.dequant, 2 * 4096 * 14336);
}

static void time_terms(void) {
    dt_plan p;
    gpu_plan(&p, "llama-2-7b");
    p.batch.seq_len = 2048;
    dt_time_compute full, fz, lo, ql;
    dt_error e = {0};
    CHECK(dt_time_compute_micro(&p, &full, &e) == DT_OK);
    dt_finetune_defaults(DT_FT_FREEZE, &p.finetune);
    p.finetune.trainable_layers = 16;   /* the upper half: backward through 16 of 32 blocks, all GEMMs there */
    CHECK(dt_time_compute_micro(&p, &fz, &e) == DT_OK);
    CHECK(fz.fwd_s == full.fwd_s);
    CHECK(fz.bwd_s < 0.6 * full.bwd_s && fz.bwd_s > 0.4 * full.bwd_s);
    dt_finetune_defaults(DT_FT_LORA, &p.finetune);   /* every block reached, dX only, plus LoRA */
    CHECK(dt_time_compute_micro(&p, &lo, &e) == DT_OK);
    CHECK(lo.fwd_s > full.fwd_s && lo.bwd_s < full.bwd_s && lo.bwd_s > 0.5 * full.bwd_s);
    dt_finetune_defaults(DT_FT_QLORA, &p.finetune);   /* + dequantisation on every use */
    CHECK(dt_time_compute_micro(&p, &ql, &e) == DT_OK);
    CHECK(ql.fwd_s > lo.fwd_s && ql.bwd_s > lo.bwd_s);
    CHECK(dt_ftplan_flops_ratio(&p) < 1.0 && dt_ftplan_flops_ratio(&p) > 0.6);
}

static void solve_keeps_method(void) {
    dt_solve_request *rq = calloc(1, sizeof *rq);
    dt_solve_result *r = calloc(1, sizeof *r);
    dt_error e = {0};
    CHECK(rq && r);
    if (!rq || !r) return;
    gpu_plan(&rq->base, "qwen2.5-7b");
    rq->base.batch.global_batch = 16;
    rq->mem_limit_bytes = (int64_t)24 << 30;
    rq->host_limit_bytes = rq->base.cluster.hw.host_mem_bytes;
    rq->nvme_limit_bytes = rq->base.cluster.hw.nvme_bytes;
    rq->stage_mask = 0xF;
    rq->allow_offload = 0;
    CHECK(dt_solve(rq, r, &e) == DT_EINFEASIBLE);   /* full fine-tuning of 7.6B in 24 GiB, no offload */
    dt_finetune_defaults(DT_FT_LORA, &rq->base.finetune);
    CHECK(dt_solve(rq, r, &e) == DT_OK);
    CHECK(r->plan.finetune.method == DT_FT_LORA && r->plan.finetune.lora_rank == 8);
    CHECK(r->plan.prediction.memory.total <= rq->mem_limit_bytes);
    free(rq);
    free(r);
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    if (argc == 2) activations_vs_torch(argv[1]);
    zero_rules();
    time_terms();
    solve_keeps_method();
    TEST_MAIN_END();
}
