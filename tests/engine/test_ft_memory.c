/* test_ft_memory.c — issue 32: dtrun's memory under freeze, LoRA and QLoRA equals the planner's
 * terms for the runtime dtrun, term by term (docs/finetune.md "In dtrun", docs/memory-model.md
 * "Fine-tuning"): for GPT-2 and Qwen3 (tiny), freeze (the last blocks, the first blocks,
 * some modules), LoRA (every linear, q_proj / v_proj only, dropout > 0) and QLoRA (NF4 with
 * double quantisation, FP4 without; fp32 compute in fp32, bf16 compute under mixed-bf16), with and
 * without checkpointed blocks, in fp32, mixed-bf16 and mixed-fp16 (the 16-bit base set and
 * its fp32 working copies), at ZeRO 0-3 (one rank), the bytes dt_memtrack counts per
 * category after the model and the ZeRO engine are created equal the plan's
 * (dt_memory_phases, runtime dtrun):
 *   params      the trained set (its ZeRO-3 shard) + the frozen base, replicated (QLoRA: the
 *               quantised linears' storage, dt_storage_tensor_bytes each, + the rest);
 *   grads       the trained set's (ZeRO-2/3: its shard);
 *   optimizer   AdamW's moments over the trained set;
 *   activations dt_lm_activation_bytes: the engine's layout (blocks below the first
 *               trained one share one record, unread inputs two buffers, x·Aᵀ per adapted
 *               linear only, lm_head's input only when the classifier is trained);
 *   buffers     the step's scratch, LoRA's scratch, QLoRA's dequantised weight (the largest
 *               in the compute dtype), ZeRO's unit buffers sized by the
 *               trained part of each unit, and under a 16-bit precision the fp32 working
 *               copies of each set (dt_ftplan_dtrun_convert_bytes).
 * And each activation term against a hand count of the engine's tensors for one case, so
 * a planner and an engine wrong the same way still fail; and the inputs of frozen,
 * unadapted linears, which saved blocks leave to the shared record, read by nothing (the
 * gradients equal those of a run that recomputes every block). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_comm.h"
#include "dt_finetune.h"
#include "dt_ftplan.h"
#include "dt_lm.h"
#include "dt_memory.h"
#include "dt_memtrack.h"
#include "dt_test.h"
#include "dt_test_memtrack.h"
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
    int materialized;        /* materialized attention (its backward reads the probabilities, not the output) */
    int fp4;                 /* qlora: FP4 without double quantisation (else NF4 with) */
} ft_case;

static void set_method(dt_plan *p, const ft_case *c) {
    dt_error err = {0};
    dt_finetune_defaults(c->method, &p->finetune);
    if (c->method == DT_FT_FREEZE) {
        p->finetune.trainable_layers = c->layers;
        if (c->modules)
            CHECK(dt_ft_names_parse(c->modules, "--trainable-modules", &p->finetune.trainable_modules, &err) == 0);
    } else {
        if (c->method == DT_FT_QLORA) {   /* bf16 compute under mixed-bf16 (LLaMA-Factory's), else fp32 */
            p->finetune.compute_dtype = p->precision.param == DT_DTYPE_BF16 ? DT_DTYPE_BF16 : DT_DTYPE_FP32;
            if (c->fp4) {
                p->finetune.quant = DT_STORAGE_FP4;
                p->finetune.double_quant = 0;
            }
        }
        p->finetune.lora_dropout = c->dropout;
        if (c->targets) {
            p->finetune.lora_target_all = 0;
            CHECK(dt_ft_names_parse(c->targets, "--lora-target", &p->finetune.lora_target, &err) == 0);
        }
    }
    p->activations.ckpt_layers = c->K;
    p->activations.attention = c->materialized ? DT_ATTN_MATERIALIZED : DT_ATTN_FLASH;
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
    dt_test_tracked_snapshot(before);
    const dt_lm_options o = {.B = p.batch.micro_batch, .T = p.batch.seq_len, .ckpt_layers = c->K,
                             .attn = p.activations.attention, .device = DT_DEVICE_CPU, .ordinal = 0,
                             .flags = stage == 3 ? DT_LM_NO_FLAT : 0, .finetune = &p.finetune};
    dt_lm *g = NULL;
    dt_zero *z = NULL;
    dt_plan zp = p;   /* ZeRO runs the trained set's precision, as dtrun's trainer passes it (engine/run/train.c) */
    dt_lm_trained_precision(&p.precision, &p.finetune, &zp.precision);
    if (dt_lm_create_opts(&p.model, &p.precision, &o, &g, &err) || dt_zero_create(&zp, comm, g, &z, &err)) {
        fprintf(stderr, "%s ZeRO-%d: %s\n", c->name, stage, err.msg);
        CHECK(0);
        dt_lm_free(g);
        return;
    }
    char label[160];
    snprintf(label, sizeof label, "%s ZeRO-%d", c->name, stage);
    dt_test_tracked_check(before, m, label);
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
    ft_case fz = {"freeze last 1", DT_FT_FREEZE, 1, NULL, NULL, 0, 0, 0, 0};
    set_method(&p, &fz);
    int64_t want = x * (2 + 2) + rec * 2 + head_stats;
    CHECK_EQ_I64(dt_memory_activations(&p, 0), want);
    /* LoRA on every linear: every block kept, block 0's input kept (x[0] is the encoder's
     * output: no buffer to share), no shared record, lnf its own buffer, 4 adapters per block */
    ft_case lo = {"lora all", DT_FT_LORA, 0, NULL, NULL, 0, 0, 0, 0};
    set_method(&p, &lo);
    want = x * (L + 1) + rec * L + x + head_stats + 4 * N * r * 4 * L;
    CHECK_EQ_I64(dt_memory_activations(&p, 0), want);
    (void)err;
}

/* The tensors a saved block leaves to the shared record are read by nothing: the trained
 * gradients with no block checkpointed (sharing) equal, bit for bit, those with every block
 * recomputed (nothing shared by a saved block: every block's record is the recompute area). */
static void unread_is_unread(dt_plan p, const ft_case *c) {
    set_method(&p, c);
    dt_error err = {0};
    dt_lm *g[2] = {NULL, NULL};
    const int64_t B = p.batch.micro_batch, T = p.batch.seq_len, N = B * T;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)N), *tgt = malloc(sizeof(int32_t) * (size_t)N);
    for (int64_t i = 0; i < N && tok && tgt; i++) tok[i] = (int32_t)((i * 7) % 256), tgt[i] = (int32_t)((i * 11 + 3) % 256);
    for (int k = 0; k < 2; k++) {
        const dt_lm_options o = {.B = B, .T = T, .ckpt_layers = k ? p.model.n_layer : 0, .attn = p.activations.attention,
                                 .device = DT_DEVICE_CPU, .ordinal = 0, .flags = 0, .finetune = &p.finetune};
        float loss = 0.0f;
        CHECK(tok && tgt && dt_lm_create_opts(&p.model, &p.precision, &o, &g[k], &err) == DT_OK);
        if (!g[k] || !tok || !tgt) break;
        CHECK(dt_lm_init_random(g[k], 5, &err) == DT_OK && dt_lm_init_base_random(g[k], 5, &err) == DT_OK);
        dt_lm_zero_grad(g[k]);
        CHECK(dt_lm_forward(g[k], tok, tgt, &loss, &err) == DT_OK && dt_lm_backward(g[k], 1.0f, &err) == DT_OK);
    }
    if (g[0] && g[1]) {
        int same = memcmp(dt_lm_grads(g[0]), dt_lm_grads(g[1]), dt_lm_num_params(g[0]) * sizeof(float)) == 0;
        if (!same) fprintf(stderr, "%s %s: gradients differ with the unread tensors shared\n", p.model.name, c->name);
        CHECK(same);
        /* and there was something to share: the planner's term for it (the engine's bytes
         * equal the planner's total: check_stage) */
        dt_ftplan ft;
        dt_ft_terms t;
        p.activations.ckpt_layers = 0;
        CHECK(dt_ftplan_of(&p, &ft, &err) == DT_OK && dt_ftplan_terms(&p, &ft, &t) == DT_OK);
        CHECK(t.act_dropped > 0);
    }
    dt_lm_free(g[0]);
    dt_lm_free(g[1]);
    free(tok), free(tgt);
}

/* The MPI temporaries the optimizer step still holds (dt_zero_untracked_tail): full
 * fine-tuning's tail is all of backward's (the embedding's and two blocks' reduce-scatters
 * in flight); a freeze of the last blocks leaves none in flight, since the frozen blocks'
 * hooks wait for the trained blocks' collectives and the frozen embedding has none. */
static void comm_tail(void) {
    dt_plan p = dt_test_load_plan("configs/plans/tiny-cpu.json");
    dt_precision_from_preset(DT_PREC_FP32, &p.precision);
    p.model.n_layer = 5;
    p.parallel.world_size = 2;
    p.parallel.overlap_comm = 1;
    for (int stage = 1; stage <= 3; stage++) {
        p.parallel.zero_stage = stage;
        int64_t comm, io;
        dt_finetune_defaults(DT_FT_FULL, &p.finetune);
        dt_zero_untracked_bytes(&p, 0, &comm, &io);
        CHECK(comm > 0);
        CHECK_EQ_I64(dt_zero_untracked_tail(&p, 0), comm);
        const ft_case fz = {"freeze last 2", DT_FT_FREEZE, 2, NULL, NULL, 0, 0, 0, 0};
        set_method(&p, &fz);
        dt_zero_untracked_bytes(&p, 0, &comm, &io);
        CHECK(comm > 0);
        CHECK_EQ_I64(dt_zero_untracked_tail(&p, 0), 0);
        p.parallel.overlap_comm = 0;   /* one collective at a time: as the backward's */
        dt_zero_untracked_bytes(&p, 0, &comm, &io);
        CHECK_EQ_I64(dt_zero_untracked_tail(&p, 0), comm);
        p.parallel.overlap_comm = 1;
    }
}

int main(void) {
    dt_comm *comm = NULL;
    dt_error err;
    if (dt_comm_init_self(&comm, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    hand_count_gpt2();
    comm_tail();
    static const ft_case cases[] = {
        {"freeze last 2", DT_FT_FREEZE, 2, NULL, NULL, 0, 0, 0, 0},
        {"freeze last 2, 2 checkpointed", DT_FT_FREEZE, 2, NULL, NULL, 0, 2, 0, 0},
        {"freeze last 1, all checkpointed", DT_FT_FREEZE, 1, NULL, NULL, 0, -1, 0, 0},
        {"freeze first 1", DT_FT_FREEZE, -1, NULL, NULL, 0, 0, 0, 0},
        {"freeze last 2 mlp", DT_FT_FREEZE, 2, "mlp", NULL, 0, 0, 0, 0},
        {"lora all", DT_FT_LORA, 0, NULL, NULL, 0, 0, 0, 0},
        {"lora all, dropout 0.1, 1 checkpointed", DT_FT_LORA, 0, NULL, NULL, 0.1, 1, 0, 0},
        {"lora q,v", DT_FT_LORA, 0, NULL, "q_proj,v_proj", 0, 0, 0, 0},
        {"lora c_attn", DT_FT_LORA, 0, NULL, "c_attn", 0, 0, 0, 0},
        {"lora q,v, materialized attention", DT_FT_LORA, 0, NULL, "q_proj,v_proj", 0, 0, 1, 0},
        {"lora c_attn, materialized attention", DT_FT_LORA, 0, NULL, "c_attn", 0, 0, 1, 0},
        {"qlora all nf4-dq", DT_FT_QLORA, 0, NULL, NULL, 0, 0, 0, 0},
        {"qlora all fp4, dropout 0.1, 1 checkpointed", DT_FT_QLORA, 0, NULL, NULL, 0.1, 1, 0, 1},
        {"qlora q,v nf4-dq", DT_FT_QLORA, 0, NULL, "q_proj,v_proj", 0, 0, 0, 0},
        {"qlora c_attn nf4-dq", DT_FT_QLORA, 0, NULL, "c_attn", 0, 0, 0, 0},
    };
    const char *plans[2] = {"configs/plans/tiny-cpu.json", "tests/kernels/golden/train/qwen3.plan.json"};
    /* fp32, and the 16-bit base sets (lora16): a 16-bit trained set under freeze, fp32 adapters
     * over a 16-bit base under LoRA, each with its widened copies (bf16: gemm16's LoRA input) */
    const dt_precision_preset precs[3] = {DT_PREC_FP32, DT_PREC_MIXED_BF16, DT_PREC_MIXED_FP16};
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 3; k++) {
            dt_plan p = dt_test_load_plan(plans[f]);
            dt_precision_from_preset(precs[k], &p.precision);
            p.runtime.kind = DT_RUNTIME_DTRUN;
            p.parallel.world_size = 1;
            p.cluster.nodes = p.cluster.gpus_per_node = 1;
            p.prediction.valid = 0;
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                ft_case c = cases[i];
                const int gpt2 = p.model.family == DT_FAMILY_GPT2;
                if (c.targets && gpt2 != !strcmp(c.targets, "c_attn")) continue;   /* the family's module names */
                if (c.method == DT_FT_QLORA && precs[k] == DT_PREC_MIXED_FP16) continue;   /* not built: refused */
                if (c.K < 0) c.K = p.model.n_layer;
                fprintf(stderr, "== %s %s: %s\n", p.model.name, dt_precision_preset_name(precs[k]), c.name);
                for (int stage = 0; stage <= 3; stage++) check_stage(comm, p, &c, stage);
                if (k == 0 && (c.targets || c.modules)) unread_is_unread(p, &c);
            }
        }
    dt_comm_free(comm);
    TEST_MAIN_END();
}
