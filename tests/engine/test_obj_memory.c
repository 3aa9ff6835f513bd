/* test_obj_memory.c — issue 33 item 1: dtrun's memory under the dpo and grpo objectives equals
 * the planner's terms for the runtime dtrun, category by category (docs/objectives.md "Memory
 * in dtrun", after test_ft_memory.c's freeze / LoRA check): for GPT-2 and Qwen3 (tiny), fp32,
 * full fine-tuning and LoRA, ZeRO 0-3 on one rank, the bytes dt_memtrack counts per category
 * once the trainer's models exist equal dt_memory_phases' (all terms, runtime dtrun):
 *   the policy as dtrun's trainer builds it (engine/run/train.c: rows_per_example x micro-batch
 *   rows) with its ZeRO engine;
 *   dpo: the reference (engine/run/objective_pairs.c objrun_reference_open, 2 x micro-batch
 *   rows): flat and replicated at every stage, its activation buffer and scratch; none under
 *   LoRA (the policy with its adapters off);
 *   grpo: the generator (dt_gen_create for the rank's micro-batch x accumulation completions of
 *   seq_len tokens: its fp32 weights, KV cache, logits, scratch), the reference when beta != 0
 *   without LoRA (micro-batch rows); plus the two buffers dtrun allocates untracked
 *   (objective_grpo_run.c: the ZeRO-3 unit it gathers each group into; objective_grpo.c: the
 *   rollout rows), counted here from their types.
 * And the terms one by one: the generator's against dt_gen_bytes, its KV cache against the
 * formula 2 L kv d 4 x T x S, the reference's weights replicated under ZeRO-3. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_comm.h"
#include "dt_finetune.h"
#include "dt_generate.h"
#include "dt_grpo.h"
#include "dt_lm.h"
#include "dt_memory.h"
#include "dt_memtrack.h"
#include "dt_objplan.h"
#include "dt_objrun.h"
#include "dt_test.h"
#include "dt_test_plan.h"
#include "dt_zero.h"
#include "objective_pairs.h"

typedef struct {
    const char *name;
    dt_obj_kind kind;
    int lora;
    double beta;   /* grpo's KL coefficient */
} obj_case;

static int64_t tracked(dt_mem_category c) {
    return dt_mem_current(DT_POOL_DEVICE, c) + dt_mem_current(DT_POOL_HOST, c);
}

static void set_case(dt_plan *p, const obj_case *c, int stage) {
    dt_objective_defaults(c->kind, &p->objective);
    p->objective.kind = c->kind;
    if (c->kind == DT_OBJ_GRPO) {
        p->objective.num_generations = 2;
        p->objective.completion_len = p->batch.seq_len / 2;
        p->objective.kl_coef = c->beta;
        p->batch.grad_accum = 2;   /* a rollout of micro-batch x 2 completions */
    }
    dt_finetune_defaults(c->lora ? DT_FT_LORA : DT_FT_FULL, &p->finetune);
    p->parallel.zero_stage = stage;
    p->parallel.offload_optimizer = DT_OFFLOAD_NONE;
    p->parallel.offload_param = DT_OFFLOAD_NONE;
}

/* The engine's untracked buffers of a grpo run (see the file's comment). */
static int64_t grpo_untracked(const dt_plan *p, dt_lm *g) {
    const int64_t S = p->batch.micro_batch * p->batch.grad_accum, T = p->batch.seq_len;
    const dt_grpo_rollout r = {0};
    int64_t bytes = S * T * (int64_t)(sizeof *r.ids + sizeof *r.labels + sizeof *r.mask) +
                    S * (int64_t)(sizeof *r.plen + sizeof *r.clen + sizeof *r.rewards + sizeof *r.adv);
    if (p->parallel.zero_stage == 3) {
        size_t most = 0;
        for (int u = 0; u < dt_lm_num_groups(g); u++)
            if (dt_lm_group_numel(g, u) > most) most = dt_lm_group_numel(g, u);
        bytes += (int64_t)(most * sizeof(float));
    }
    return bytes;
}

/* The objective's own models, as its open creates them. */
static int open_models(const dt_plan *p, dt_comm *comm, dt_model *m, dt_lm **ref, dt_gen **gen, dt_error *err) {
    const dt_objrun_ctx c = {.plan = p, .model = m, .comm = comm, .rank = 0, .world = 1};
    const int ref_wanted = !dt_ft_is_lora(&p->finetune) &&
                           (p->objective.kind == DT_OBJ_DPO || p->objective.kl_coef != 0);
    if (p->objective.kind == DT_OBJ_GRPO &&
        dt_gen_create(m, p->batch.micro_batch * p->batch.grad_accum, p->batch.seq_len, gen, err))
        return err->code;
    if (!ref_wanted) return DT_OK;
    const int64_t rows = p->objective.kind == DT_OBJ_DPO ? 2 * p->batch.micro_batch : p->batch.micro_batch;
    return objrun_reference_open(&c, rows, ref, err);
}

static void check_stage(dt_comm *comm, dt_plan p, const obj_case *c, int stage) {
    set_case(&p, c, stage);
    dt_error err = {0};
    dt_mem_phases ph;
    const int planned = dt_memory_phases(&p, 0, &ph, &err) == DT_OK;
    if (!planned) fprintf(stderr, "%s %s ZeRO-%d, the plan: %s\n", p.model.name, c->name, stage, err.msg);
    CHECK(planned);
    if (!planned) return;
    const dt_mem_breakdown *m = &ph.at[DT_MEM_PHASE_SUM];
    dt_obj_terms t;
    dt_memory_objective_terms(&p, &t);
    int64_t before[DT_MEM_CAT_COUNT];
    for (int k = 0; k < DT_MEM_CAT_COUNT; k++) before[k] = tracked((dt_mem_category)k);
    const int64_t rows = c->kind == DT_OBJ_DPO ? 2 : 1;   /* dt_objrun_dpo / _grpo rows_per_example */
    const dt_lm_options o = {.B = p.batch.micro_batch * rows, .T = p.batch.seq_len, .ckpt_layers = 0,
                             .attn = p.activations.attention, .device = DT_DEVICE_CPU, .ordinal = 0,
                             .flags = stage == 3 ? DT_LM_NO_FLAT : 0, .finetune = &p.finetune};
    dt_model model = p.model;
    dt_lm *g = NULL, *ref = NULL;
    dt_zero *z = NULL;
    dt_gen *gen = NULL;
    dt_plan zp = p;
    dt_lm_trained_precision(&p.precision, &p.finetune, &zp.precision);
    if (dt_lm_create_opts(&model, &p.precision, &o, &g, &err) || dt_zero_create(&zp, comm, g, &z, &err) ||
        open_models(&p, comm, &model, &ref, &gen, &err)) {
        fprintf(stderr, "%s ZeRO-%d: %s\n", c->name, stage, err.msg);
        CHECK(0);
    } else {
        int64_t got[DT_MEM_CAT_COUNT];
        for (int k = 0; k < DT_MEM_CAT_COUNT; k++) got[k] = tracked((dt_mem_category)k) - before[k];
        if (c->kind == DT_OBJ_GRPO) got[DT_MEM_BUFFERS] += grpo_untracked(&p, g);
        const int64_t want[DT_MEM_CAT_COUNT] = {m->params, m->grads, m->optimizer, m->activations, m->buffers};
        for (int k = 0; k < DT_MEM_CAT_COUNT; k++) {
            if (got[k] != want[k])
                fprintf(stderr, "%s %s ZeRO-%d %s: engine %lld, planner %lld (%+lld)\n", p.model.name, c->name, stage,
                        dt_mem_category_name((dt_mem_category)k), (long long)got[k], (long long)want[k],
                        (long long)(got[k] - want[k]));
            CHECK_EQ_I64(got[k], want[k]);
        }
        /* the terms one by one */
        CHECK_EQ_I64(t.ref_held, ref != NULL);
        if (ref) {
            CHECK_EQ_I64(t.ref_weights, (int64_t)(dt_lm_num_params(ref) * sizeof(float)));
            CHECK_EQ_I64(t.ref_activations, (int64_t)dt_lm_activation_bytes(ref));
        }
        if (gen) {
            CHECK_EQ_I64(t.generator, (int64_t)dt_gen_bytes(gen));
            const dt_model *mm = &p.model;
            CHECK_EQ_I64(t.kv_cache, 2 * mm->n_layer * mm->n_kv_head * mm->head_dim * 4 * p.batch.seq_len *
                                         p.batch.micro_batch * p.batch.grad_accum);
            CHECK(t.kv_cache > 0 && t.kv_cache < t.generator);
            /* dtrun holds the generator through every phase: the generation phase is the total */
            dt_objplan_generation(&p, &t, &ph, 0);
            CHECK_EQ_I64(t.gen_total, m->total);
            CHECK_EQ_I64(t.gen_excess, 0);
        }
    }
    dt_gen_free(gen);
    dt_lm_free(ref);
    dt_zero_free(z);
    dt_lm_free(g);
    for (int k = 0; k < DT_MEM_CAT_COUNT; k++)   /* everything freed: nothing left tracked */
        CHECK_EQ_I64(tracked((dt_mem_category)k), before[k]);
}

/* The planner's other runtimes keep DeepSpeed's placement: the reference partitioned under
 * ZeRO-3 (TRL prepare_deepspeed), dtrun's replicated. */
static void ref_placement(void) {
    dt_plan p = dt_test_load_plan("tests/kernels/golden/train/qwen3.plan.json");
    dt_precision_from_preset(DT_PREC_FP32, &p.precision);
    p.parallel.world_size = 4;
    p.cluster.nodes = 1, p.cluster.gpus_per_node = 4;
    const obj_case dpo = {"dpo", DT_OBJ_DPO, 0, 0};
    set_case(&p, &dpo, 3);
    dt_obj_terms t;
    const int64_t whole = dt_objplan_policy_params(&p) * 4;
    p.runtime.kind = DT_RUNTIME_DTRUN;
    dt_memory_objective_terms(&p, &t);
    CHECK_EQ_I64(t.ref_weights, whole);
    CHECK(t.ref_activations > 0 && t.ref_buffers > 0);
    p.runtime.kind = DT_RUNTIME_DEEPSPEED;
    dt_memory_objective_terms(&p, &t);
    CHECK_EQ_I64(t.ref_weights, (whole + 3) / 4);
    CHECK_EQ_I64(t.ref_activations, 0);   /* DeepSpeed's reference runs under no_grad: nothing saved */
}

int main(void) {
    dt_error err = {0};
    dt_comm *comm = NULL;
    const int self = dt_comm_init_self(&comm, &err) == DT_OK;
    if (!self) fprintf(stderr, "the self communicator: %s\n", err.msg);
    CHECK(self);
    if (!self) return 1;
    /* the generator's attention-score rows are one per OpenMP thread; the plan counts one
     * (planner/objective.c dtrun_generator) */
    omp_set_num_threads(1);
    ref_placement();
    static const obj_case cases[] = {
        {"dpo", DT_OBJ_DPO, 0, 0},          {"dpo lora", DT_OBJ_DPO, 1, 0},
        {"grpo beta 0", DT_OBJ_GRPO, 0, 0}, {"grpo beta 0.04", DT_OBJ_GRPO, 0, 0.04},
        {"grpo lora beta 0.04", DT_OBJ_GRPO, 1, 0.04},
    };
    const char *plans[2] = {"configs/plans/tiny-cpu.json", "tests/kernels/golden/train/qwen3.plan.json"};
    for (int f = 0; f < 2; f++) {
        dt_plan p = dt_test_load_plan(plans[f]);
        dt_precision_from_preset(DT_PREC_FP32, &p.precision);
        p.runtime.kind = DT_RUNTIME_DTRUN;
        p.parallel.world_size = 1;
        p.cluster.nodes = p.cluster.gpus_per_node = 1;
        p.prediction.valid = 0;
        p.activations.ckpt_layers = 0;
        p.output.init[0] = '\0';   /* the references initialise from the seed, as the policy */
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            fprintf(stderr, "== %s: %s\n", p.model.name, cases[i].name);
            for (int stage = 0; stage <= 3; stage++) check_stage(comm, p, &cases[i], stage);
        }
    }
    dt_comm_free(comm);
    TEST_MAIN_END();
}
