/* test_ft_memory.c — issue 32: dtrun's memory under freeze and LoRA equals the planner's
 * terms for the runtime dtrun, term by term (docs/finetune.md "In dtrun", docs/memory-model.md
 * "Fine-tuning"): for GPT-2 and Qwen3 (tiny), freeze (the last blocks, the first blocks,
 * some modules) and LoRA (every linear, q_proj / v_proj only, dropout > 0), with and
 * without checkpointed blocks, at ZeRO 0-3 (one rank), the bytes dt_memtrack counts per
 * category after the model and the ZeRO engine are created equal the plan's
 * (dt_memory_phases, runtime dtrun):
 *   params      the trained set (its ZeRO-3 shard) + the frozen base, replicated;
 *   grads       the trained set's (ZeRO-2/3: its shard);
 *   optimizer   AdamW's moments over the trained set;
 *   activations dt_lm_activation_bytes: the engine's layout (blocks below the first
 *               trained one share one record, unread inputs two buffers, x·Aᵀ per adapted
 *               linear only, lm_head's input only when the classifier is trained);
 *   buffers     the step's scratch, LoRA's scratch, ZeRO's unit buffers sized by the
 *               trained part of each unit.
 * And each activation term against a hand count of the engine's tensors for one case, so
 * a planner and an engine wrong the same way still fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_comm.h"
#include "dt_finetune.h"
#include "dt_lm.h"
#include "dt_memory.h"
#include "dt_memtrack.h"
#include "dt_test.h"
#include "dt_test_plan.h"
#include "dt_zero.h"

typedef struct {
    const char *name;
    dt_ft_method method;
    int64_t layers;          /* freeze: --trainable-layers */
    const char *modules;     /* freeze: --trainable-modules, or NULL */
    const char *targets;     /* lora: --lora-target, or NULL (all) */
    double dropout;
    int64_t K;               /* checkpointed blocks */
} ft_case;

static void set_method(dt_plan *p, const ft_case *c) {
    dt_error err = {0};
    dt_finetune_defaults(c->method, &p->finetune);
    if (c->method == DT_FT_FREEZE) {
        p->finetune.trainable_layers = c->layers;
        if (c->modules)
            CHECK(dt_ft_names_parse(c->modules, "--trainable-modules", &p->finetune.trainable_modules, &err) == 0);
    } else {
        p->finetune.lora_dropout = c->dropout;
        if (c->targets) {
            p->finetune.lora_target_all = 0;
            CHECK(dt_ft_names_parse(c->targets, "--lora-target", &p->finetune.lora_target, &err) == 0);
        }
    }
    p->activations.ckpt_layers = c->K;
}

static int64_t tracked(dt_mem_category c) {
    return dt_mem_current(DT_POOL_DEVICE, c) + dt_mem_current(DT_POOL_HOST, c);
}

/* one case at one stage: the engine's tracked bytes per category = the plan's terms */
static void check_stage(dt_comm *comm, dt_plan p, const ft_case *c, int stage) {
    set_method(&p, c);
    p.parallel.zero_stage = stage;
    p.parallel.offload_optimizer = DT_OFFLOAD_NONE;
    p.parallel.offload_param = DT_OFFLOAD_NONE;
    dt_error err = {0};
    dt_mem_phases ph;
    if (dt_memory_phases(&p, 0, &ph, &err)) {
        fprintf(stderr, "%s ZeRO-%d: %s\n", c->name, stage, err.msg);
        CHECK(0);
        return;
    }
    const dt_mem_breakdown *m = &ph.at[DT_MEM_PHASE_SUM];
    int64_t before[DT_MEM_CAT_COUNT];
    for (int k = 0; k < DT_MEM_CAT_COUNT; k++) before[k] = tracked((dt_mem_category)k);
    const dt_lm_options o = {.B = p.batch.micro_batch, .T = p.batch.seq_len, .ckpt_layers = c->K,
                             .attn = p.activations.attention, .device = DT_DEVICE_CPU, .ordinal = 0,
                             .flags = stage == 3 ? DT_LM_NO_FLAT : 0, .finetune = &p.finetune};
    dt_lm *g = NULL;
    dt_zero *z = NULL;
    if (dt_lm_create_opts(&p.model, &p.precision, &o, &g, &err) || dt_zero_create(&p, comm, g, &z, &err)) {
        fprintf(stderr, "%s ZeRO-%d: %s\n", c->name, stage, err.msg);
        CHECK(0);
        dt_lm_free(g);
        return;
    }
    const int64_t want[DT_MEM_CAT_COUNT] = {m->params, m->grads, m->optimizer, m->activations, m->buffers};
    for (int k = 0; k < DT_MEM_CAT_COUNT; k++) {
        const int64_t got = tracked((dt_mem_category)k) - before[k];
        if (got != want[k])
            fprintf(stderr, "%s ZeRO-%d %s: engine %lld, planner %lld (%+lld)\n", c->name, stage,
                    dt_mem_category_name((dt_mem_category)k), (long long)got, (long long)want[k],
                    (long long)(got - want[k]));
        CHECK_EQ_I64(got, want[k]);
    }
    CHECK_EQ_I64((int64_t)dt_lm_activation_bytes(g), m->activations);
    dt_zero_free(z);
    dt_lm_free(g);
}

/* The engine's activations for a GPT-2 plan, counted from its tensors by hand
 * (engine/model/lm_gpt2.c gpt2_acts, lm.c layout_acts). */
static void hand_count_gpt2(void) {
    dt_plan p = dt_test_load_plan("configs/plans/tiny-cpu.json");
    dt_precision_from_preset(DT_PREC_FP32, &p.precision);
    p.runtime.kind = DT_RUNTIME_DTRUN;
    p.model.n_layer = 5;   /* enough blocks below the trained one for the inputs to share buffers */
    const int64_t B = p.batch.micro_batch, T = p.batch.seq_len, N = B * T, C = p.model.hidden,
                  H = p.model.n_head, F = p.model.ffn, L = p.model.n_layer, r = 8;
    const int64_t x = 4 * N * C, stats = 2 * 4 * N;
    /* ln1, stats, qkv, lse, att, res1, ln2, stats, fch, gelu */
    const int64_t rec = 4 * N * C + stats + 4 * N * 3 * C + 4 * B * H * T + 3 * 4 * N * C + stats + 2 * 4 * N * F;
    const int64_t head_stats = stats;
    dt_error err = {0};
    /* freeze the last block (of 5): blocks 0 .. 3 share one record, x[0 .. 3] two buffers
     * (block 4's trained ln_1 reads its input x[4]), x[4], x[5]; wte frozen: no lnf */
    ft_case fz = {"freeze last 1", DT_FT_FREEZE, 1, NULL, NULL, 0, 0};
    set_method(&p, &fz);
    int64_t want = x * (2 + 2) + rec * 2 + head_stats;
    CHECK_EQ_I64(dt_memory_activations(&p, 0), want);
    /* LoRA on every linear: every block kept, block 0's input kept (x[0] is the encoder's
     * output: no buffer to share), no shared record, lnf its own buffer, 4 adapters per block */
    ft_case lo = {"lora all", DT_FT_LORA, 0, NULL, NULL, 0, 0};
    set_method(&p, &lo);
    want = x * (L + 1) + rec * L + x + head_stats + 4 * N * r * 4 * L;
    CHECK_EQ_I64(dt_memory_activations(&p, 0), want);
    (void)err;
}

int main(void) {
    dt_comm *comm = NULL;
    dt_error err;
    if (dt_comm_init_self(&comm, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    hand_count_gpt2();
    static const ft_case cases[] = {
        {"freeze last 2", DT_FT_FREEZE, 2, NULL, NULL, 0, 0},
        {"freeze last 2, 2 checkpointed", DT_FT_FREEZE, 2, NULL, NULL, 0, 2},
        {"freeze last 1, all checkpointed", DT_FT_FREEZE, 1, NULL, NULL, 0, -1},
        {"freeze first 1", DT_FT_FREEZE, -1, NULL, NULL, 0, 0},
        {"freeze last 2 mlp", DT_FT_FREEZE, 2, "mlp", NULL, 0, 0},
        {"lora all", DT_FT_LORA, 0, NULL, NULL, 0, 0},
        {"lora all, dropout 0.1, 1 checkpointed", DT_FT_LORA, 0, NULL, NULL, 0.1, 1},
        {"lora q,v", DT_FT_LORA, 0, NULL, "q_proj,v_proj", 0, 0},
        {"lora c_attn", DT_FT_LORA, 0, NULL, "c_attn", 0, 0},
    };
    const char *plans[2] = {"configs/plans/tiny-cpu.json", "tests/kernels/golden/train/qwen3.plan.json"};
    for (int f = 0; f < 2; f++) {
        dt_plan p = dt_test_load_plan(plans[f]);
        dt_precision_from_preset(DT_PREC_FP32, &p.precision);
        p.runtime.kind = DT_RUNTIME_DTRUN;
        p.parallel.world_size = 1;
        p.cluster.nodes = p.cluster.gpus_per_node = 1;
        p.prediction.valid = 0;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            ft_case c = cases[i];
            const int gpt2 = p.model.family == DT_FAMILY_GPT2;
            if (c.targets && gpt2 != !strcmp(c.targets, "c_attn")) continue;   /* the family's module names */
            if (c.modules && gpt2) continue;
            if (c.K < 0) c.K = p.model.n_layer;
            fprintf(stderr, "== %s: %s\n", p.model.name, c.name);
            for (int stage = 0; stage <= 3; stage++) check_stage(comm, p, &c, stage);
        }
    }
    dt_comm_free(comm);
    TEST_MAIN_END();
}
