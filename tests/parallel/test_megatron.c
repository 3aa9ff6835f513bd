/* test_megatron.c — runtime megatron (issue 36 item 1: Megatron-LM's own model code as a
 * runtime; docs/parallelism.md "Runtimes").
 *
 * 1. The name parses, prints and survives plan.json; its defaults carry none of the Hugging
 *    Face overheads; ZeRO-2 / 3, CPU ranks and offload are refused by name; export
 *    --deepspeed refuses a megatron plan by name.
 * 2. The memory of a megatron plan against Megatron-LM's own formula,
 *    megatron/training/theoretical_memory_usage.py (NVIDIA/Megatron-LM d98e8a64,
 *    compute_weight_and_optimizer_memory and compute_activation_memory, the SP + selective
 *    path), for three configurations whose Megatron figures are worked out by hand below. Ours
 *    equals Megatron's but for the terms docs/parallelism.md "Megatron-LM's theoretical
 *    memory" lists, each checked to the byte: the token ids Megatron counts (8 s b p bytes,
 *    x the schedule factor, / t), the biases and replicated LayerNorms it leaves out, GPT-2's
 *    position table, the final LayerNorm's place, and flash attention's log-sum-exp. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_dsexport.h"
#include "dt_layout.h"
#include "dt_memory.h"
#include "dt_model.h"
#include "dt_parallel3d.h"
#include "dt_test.h"

/* A gpt2-family (GPT-3 architecture: LayerNorm, GeLU, biases, tied embeddings) plan of the
 * given shape under runtime megatron: SP, selective recompute, micro-batch 1, s 2048. */
typedef struct {
    int64_t h, a, L, F, V;
    int64_t nodes, gpus_per_node, tp, pp, vpp, m;
    int stage;       /* 1: --use-distributed-optimizer */
    int flash;       /* 0: materialized (unfused attention, Megatron's path A assumes it recomputed) */
} mg_case;

static void mg_plan(dt_plan *p, const mg_case *c) {
    dt_plan_defaults(p);
    dt_error e = {0};
    dt_model *mo = &p->model;
    CHECK(dt_model_resolve("gpt2", mo, &e) == 0);
    snprintf(mo->name, sizeof mo->name, "gpt3-shape");
    mo->n_layer = c->L, mo->hidden = c->h, mo->n_head = c->a, mo->n_kv_head = c->a, mo->head_dim = c->h / c->a;
    mo->ffn = c->F, mo->vocab = c->V, mo->max_pos = 2048;
    p->cluster.nodes = c->nodes, p->cluster.gpus_per_node = c->gpus_per_node, p->cluster.device = DT_DEVICE_CUDA;
    CHECK(dt_hardware_load("A100-80GB", NULL, &p->cluster.hw, &e) == 0);
    p->parallel.world_size = c->nodes * c->gpus_per_node;
    dt_plan_set_runtime(p, DT_RUNTIME_MEGATRON);
    CHECK(dt_plan_set_attention(p, c->flash ? "flash" : "materialized", "--attention", &e) == 0);
    p->activations.selective = 1;
    dt_layout_set(p, c->tp, 1, 1, c->pp, c->vpp);
    p->batch.seq_len = 2048, p->batch.micro_batch = 1, p->batch.grad_accum = c->m;
    p->batch.global_batch = c->m * dt_layout_dp(p);
    p->parallel.zero_stage = c->stage;
    if (dt_plan_validate(p, &e)) fprintf(stderr, "megatron plan: %s\n", e.msg), dt_test_failures++;
}

/* ---- 1. the runtime's name, defaults, rules */

static void names_and_rules(void) {
    dt_runtime_kind k = DT_RUNTIME_DTRUN;
    dt_error e = {0};
    CHECK(dt_runtime_parse("megatron", &k, &e) == 0 && k == DT_RUNTIME_MEGATRON);
    CHECK(!strcmp(dt_runtime_name(DT_RUNTIME_MEGATRON), "megatron"));
    CHECK(dt_runtime_parse("megatronlm", &k, &e) != 0 && strstr(e.msg, "megatron"));
    dt_plan p;
    const mg_case c = {12288, 96, 96, 4 * 12288, 51200, 8, 8, 8, 4, 1, 16, 1, 1};
    mg_plan(&p, &c);
    const dt_runtime *r = &p.runtime;
    /* Megatron-LM's fused code: no unfused activation, no fp32 norm copy, no fp32 softmax copy;
     * its loss upcasts in place (fused_loss); GPT keeps Megatron's default dropout 0.1 */
    CHECK(!r->unfused_act && !r->upcast_norm && !r->upcast_softmax && r->fused_loss && r->upcast_logits && r->dropout);
    CHECK(dt_layout_active(&p));
    /* plan.json keeps the runtime */
    char *json = dt_plan_to_json(&p, &e);
    CHECK(json && strstr(json, "\"kind\": \"megatron\""));
    dt_plan q;
    CHECK(json && dt_plan_parse(json, &q, &e) == 0 && q.runtime.kind == DT_RUNTIME_MEGATRON && q.parallel.zero_stage == 1);
    free(json);
    /* tp = cp = pp = 1 is a megatron plan without a layout section, and reads back */
    const mg_case one = {2048, 16, 24, 8192, 51200, 1, 8, 1, 1, 1, 4, 1, 1};
    mg_plan(&p, &one);
    json = dt_plan_to_json(&p, &e);
    CHECK(json && !strstr(json, "\"layout\""));
    CHECK(json && dt_plan_parse(json, &q, &e) == 0 && q.runtime.kind == DT_RUNTIME_MEGATRON);
    free(json);
    /* Megatron-LM has no ZeRO-2 / 3, runs on GPUs, does not offload: refused by name */
    for (int st = 2; st <= 3; st++) {
        mg_plan(&p, &c);
        p.parallel.zero_stage = st;
        dt_error_clear(&e);
        CHECK(dt_plan_validate(&p, &e) == DT_EINVAL && strstr(e.msg, "megatron") && strstr(e.msg, "ZeRO-"));
    }
    mg_plan(&p, &c);   /* sdpa is PyTorch's kernel under Hugging Face code, not a Megatron backend */
    CHECK(dt_plan_set_attention(&p, "sdpa", "--attention", &e) == DT_EINVAL && strstr(e.msg, "flash or eager"));
    p.runtime.attention = DT_KERNEL_SDPA;
    CHECK(dt_plan_validate(&p, &e) == DT_EINVAL && strstr(e.msg, "\"sdpa\" with runtime megatron"));
    mg_plan(&p, &c);
    p.parallel.offload_optimizer = DT_OFFLOAD_CPU;
    CHECK(dt_plan_validate(&p, &e) == DT_EINVAL && strstr(e.msg, "offload"));
    mg_plan(&p, &c);
    CHECK(dt_hardware_load("cpu", NULL, &p.cluster.hw, &e) == 0);
    p.cluster.device = DT_DEVICE_CPU;
    CHECK(dt_plan_validate(&p, &e) == DT_EINVAL && strstr(e.msg, "CUDA GPUs only"));
    /* DeepSpeed's export names the runtime */
    mg_plan(&p, &c);
    dt_error_clear(&e);
    char *ds = dt_dsexport_config(&p, &e);
    CHECK(!ds && strstr(e.msg, "runtime megatron") && strstr(e.msg, "export --megatron"));
    free(ds);
}

/* ---- 2. theoretical_memory_usage.py */

/* Bytes ours keeps beyond Megatron's weight count, per byte-per-parameter bpp: per layer the
 * 9h biases (QKV 3h, projection h, MLP 4h + h) Megatron leaves out and the two LayerNorms
 * (4h) it splits over t but every TP rank holds whole; GPT-2's position table (2048 h,
 * replicated); the final LayerNorm (2h), which Megatron spreads over p x t shards and which
 * sits whole on the last stage (stage 0 when p = 1). */
static double weights_extra(const mg_case *c, double bpp) {
    const double h = (double)c->h, Ls = (double)(c->L / c->pp), t = (double)c->tp, p = (double)c->pp;
    const double final_norm = (c->pp == 1 ? 2.0 * h : 0.0) - 2.0 * h / (p * t);
    return bpp * (Ls * (9.0 * h + 4.0 * h) - Ls * 4.0 * h / t + 2048.0 * h + final_norm);
}

/* One case: ours on stage 0 against Megatron's weight_opt and activation figures; ids =
 * Megatron's token-id bytes (8 s b p x factor / t); lse = flash's log-sum-exp bytes. */
static void against(const char *name, const mg_case *c, double mg_weights, double mg_act, double ids, double lse) {
    dt_plan p;
    mg_plan(&p, c);
    dt_p3_stage_mem sm;
    dt_error e = {0};
    CHECK(dt_p3_stage_memory(&p, 0, 0, &sm, &e) == 0);
    const double d = (double)dt_layout_dp(&p);
    /* Megatron's bytes per parameter: 18 = 2 bf16 weights + 4 fp32 grads + 12 (fp32 main
     * weights, Adam m, v); 6 + 12/d with the distributed optimizer */
    const double bpp = c->stage == 1 ? 6.0 + 12.0 / d : 18.0;
    CHECK_EQ_I64(sm.mem.grads, 4 * sm.params_elems);   /* --bf16: the fp32 grad buffer */
    const double ours_states = (double)(sm.mem.params + sm.mem.grads + sm.mem.optimizer);
    /* the distributed optimizer rounds its shard up to whole elements: 1e-9 relative */
    CHECK_NEAR(ours_states - mg_weights, weights_extra(c, bpp), 1e-9);
    CHECK_NEAR((double)sm.mem.activations, mg_act - ids + lse, 1e-12);
    if (fabs((double)sm.mem.activations - (mg_act - ids + lse)) > 1)
        fprintf(stderr, "%s: activations ours %lld, Megatron %.0f - ids %.0f + lse %.0f\n", name,
                (long long)sm.mem.activations, mg_act, ids, lse);
    /* no ZeRO bucket (Megatron reduces in its grad buffer): SP's gathered input, and with
     * p > 1 the two receive buffers of 1/t of an activation (scatter-gather) */
    const int64_t sbh2 = 2 * 2048 * c->h;
    CHECK_EQ_I64(sm.mem.buffers, sbh2 + (c->pp > 1 ? 2 * sbh2 / c->tp : 0));
}

static void theoretical(void) {
    /* C1: GPT-3 175B (h 12288, a 96, L 96, F 4h, V 51200), s 2048, b 1, t 8, p 4, v 1, m 16, 64
     * GPUs -> d 2, distributed optimizer.
     * Weights: layer = 2h(F + 2) + 4h^2 = 1,208,008,704 + 603,979,776 = 1,811,988,480;
     *   block = 96 layer + 2h = 173,950,918,656; block / p = 43,487,729,664; emb = hV =
     *   629,145,600; shard = (block / p + emb) / t = 5,514,609,408; x (6 + 12/2 = 12 bytes)
     *   = 66,175,312,896.
     * Activations: sbh(18 + 4F/h) L = 2048 x 12288 x 34 x 96 = 82,141,249,536; + 8sbp = 65,536;
     *   + sbhp = 100,663,296; sum 82,241,978,368 x min(1, m/p) = 1, / t = 10,280,247,296.
     *   ids = 8 s b p / t = 8,192. */
    const mg_case c1 = {12288, 96, 96, 4 * 12288, 51200, 8, 8, 8, 4, 1, 16, 1, 0};
    against("C1", &c1, 66175312896.0, 10280247296.0, 8192.0, 0.0);
    /* C1 with flash attention (Megatron's default backend): ours adds the log-sum-exp, 4 bytes
     * per query row and head, 4 s b a / t per layer x L layer-equivalents on stage 0
     * = 4*2048*96/8*96 = 9,437,184 bytes; Megatron's formula has no such term. */
    mg_case c1f = c1;
    c1f.flash = 1;
    against("C1 flash", &c1f, 66175312896.0, 10280247296.0, 8192.0, 9437184.0);
    /* C2: the same model, t 8, p 8, interleaved v 3 (12 layers per rank, 4 per chunk), m 16,
     * 64 GPUs -> d 1, no distributed optimizer (18 bytes per parameter).
     * Weights: block / p = 21,743,864,832; + emb = 22,373,010,432; / t = 2,796,626,304; x 18
     *   = 50,339,273,472.
     * Activations: 82,141,249,536 + 8sbp 131,072 + sbhp 201,326,592 = 82,342,707,200,
     *   x (1 + (p - 1)/(p v)) = 31/24, / t: 13,294,916,266.67; ids = 131,072 x 31/24 / 8 =
     *   21,162.67. Ours: 31 chunks of 4 layers in flight on rank 0 = 124 = 96 x 31/24. */
    const mg_case c2 = {12288, 96, 96, 4 * 12288, 51200, 8, 8, 8, 8, 3, 16, 0, 0};
    against("C2", &c2, 50339273472.0, 82342707200.0 * 31.0 / 24.0 / 8.0, 131072.0 * 31.0 / 24.0 / 8.0, 0.0);
    /* C3: GPT-3 XL (h 2048, a 16, L 24, F 8192, V 51200), t 2, p 1, one node of 8 -> d 4,
     * distributed optimizer: the output layer is on stage 0.
     * Weights: layer = 2 x 2048 x 8194 + 4 x 2048^2 = 33,562,624 + 16,777,216 = 50,339,840;
     *   block = 24 layer + 2h = 1,208,160,256; emb = 104,857,600; shard = 1,313,017,856 / 2
     *   = 656,508,928; x (6 + 12/4 = 9) = 5,908,580,352.
     * Activations: 2048 x 2048 x 34 x 24 = 3,422,552,064; + 8sb = 16,384; + sbh = 4,194,304;
     *   + the output layer and loss 4sbh(1 + V/h) = 16,777,216 + 419,430,400; total
     *   3,862,970,368 / t = 1,931,485,184; ids = 16,384 / 2 = 8,192. Ours keeps the same
     *   output terms: the final norm's and the head's inputs 2 x 2sbh / t and the fp32
     *   exp-logits 4sbV / t (nothing keeps the bf16 logits, cross_entropy.py). */
    const mg_case c3 = {2048, 16, 24, 8192, 51200, 1, 8, 2, 1, 1, 4, 1, 0};
    against("C3", &c3, 5908580352.0, 1931485184.0, 8192.0, 0.0);
}

int main(void) {
    names_and_rules();
    theoretical();
    TEST_MAIN_END();
}
