/* test_model_room.c — the model room's contracts (docs/engine.md "The model room"):
 *   - each family's tensor table, which the engine lays out from models/' block
 *     description (models/family.c k_family_rows), has the sizes models/ counts with:
 *     the embedding group, every block group, its linears' weights, the head group —
 *     for GPT-2, Qwen3 (q/k norm, untied head), Qwen2 (q/k/v bias, tied) and Llama;
 *   - every tensor carries the flags and init rule its family declared: trainable,
 *     weight decay on exactly the matrices, biases 0, norm weights 1, matrices
 *     N(0, 0.02) (GPT-2's residual projections 0.02 / sqrt(2L)), and the init draws
 *     by them (a bias 0, a norm weight 1, a matrix's sample std near its rule's);
 *   - a frozen tensor (DT_TENSOR_TRAINABLE cleared) is left bit for bit as it was by
 *     ZeRO's optimizer step while the others move, at stage 0 and stage 3. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_comm.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_optim.h"
#include "dt_plan.h"
#include "dt_test.h"
#include "dt_test_plan.h"
#include "dt_zero.h"

/* HF initializer_range of both families (GPT2Config, LlamaConfig) */
#define INIT_STD 0.02
/* a matrix's sample std must be within this fraction of its rule's (thousands of draws) */
#define STD_TOL 0.1

static dt_lm *create(const dt_model *m) {
    dt_precision fp32;
    dt_precision_from_preset(DT_PREC_FP32, &fp32);
    dt_lm *g = NULL;
    dt_error err;
    const dt_lm_options o = {.B = 1, .T = 8, .ckpt_layers = 0, .attn = DT_ATTN_FLASH, .device = DT_DEVICE_CPU,
                             .ordinal = 0, .flags = 0};
    if (dt_lm_create_opts(m, &fp32, &o, &g, &err)) {
        fprintf(stderr, "%s: %s\n", m->name, err.msg);
        exit(1);
    }
    return g;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* group sizes against models/ (one block description for both) */
static void check_sizes(const dt_model *m, const dt_lm *g) {
    const int L = (int)m->n_layer;
    CHECK_EQ_I64(dt_lm_num_groups(g), L + 2);
    CHECK_EQ_I64(dt_lm_group_numel(g, 0), dt_model_embedding_params(m));
    CHECK_EQ_I64(dt_lm_group_numel(g, L + 1), dt_model_head_params(m));
    CHECK_EQ_I64(dt_lm_num_params(g), dt_model_params(m));
    for (int l = 0; l < L; l++) {
        CHECK_EQ_I64(dt_lm_group_numel(g, 1 + l), dt_model_block_params(m));
        int64_t matrices = 0;
        for (int i = 0; i < dt_lm_num_tensors(g); i++) {
            const dt_tensor_info *t = dt_lm_tensor(g, i);
            if (t->group == 1 + l && t->ndim == 2) matrices += (int64_t)t->numel;
        }
        CHECK_EQ_I64(matrices, dt_model_block_matmul_params(m));
    }
}

/* the declared flags and init rules, against the conventions of HF's _init_weights
 * and DeepSpeed / HF Trainer's decay groups */
static void check_flags(const dt_model *m, const dt_lm *g) {
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        CHECK(t->flags & DT_TENSOR_TRAINABLE);
        CHECK(!!(t->flags & DT_TENSOR_DECAY) == (t->ndim == 2));
        const int norm = strstr(t->name, "norm") != NULL || strstr(t->name, "ln_") != NULL;
        if (ends_with(t->name, ".bias")) {
            CHECK(t->init.kind == DT_INIT_ZERO);
        } else if (norm) {
            CHECK(t->init.kind == DT_INIT_ONE);
        } else {
            const int residual = m->family == DT_FAMILY_GPT2 && strstr(t->name, "c_proj.weight");
            CHECK(t->init.kind == DT_INIT_NORMAL);
            CHECK_NEAR(t->init.std, residual ? INIT_STD / sqrt(2.0 * (double)m->n_layer) : INIT_STD, 1e-15);
        }
        if (t->init.kind != DT_INIT_NORMAL) CHECK(t->ndim == 1);
    }
}

/* the init draws by the declared rules */
static void check_init(const dt_lm *g0) {
    dt_lm *g = (dt_lm *)g0;
    CHECK(dt_lm_init_random(g, 5, NULL) == DT_OK);
    const float *p = dt_lm_params(g);
    for (int i = 0; i < dt_lm_num_tensors(g); i++) {
        const dt_tensor_info *t = dt_lm_tensor(g, i);
        const float *x = p + t->offset;
        if (t->init.kind != DT_INIT_NORMAL) {
            const float want = t->init.kind == DT_INIT_ONE ? 1.0f : 0.0f;
            int same = 1;
            for (size_t k = 0; k < t->numel; k++) same &= x[k] == want;
            CHECK(same);
            continue;
        }
        double s2 = 0.0;
        for (size_t k = 0; k < t->numel; k++) s2 += (double)x[k] * x[k];
        CHECK_NEAR(sqrt(s2 / (double)t->numel) / t->init.std, 1.0, STD_TOL);
    }
}

static void check_family(const char *label, const dt_model *m) {
    fprintf(stderr, "== %s\n", label);
    dt_lm *g = create(m);
    check_sizes(m, g);
    check_flags(m, g);
    check_init(g);
    dt_lm_free(g);
}

static int find(const dt_lm *g, const char *name) {
    for (int i = 0; i < dt_lm_num_tensors(g); i++)
        if (strcmp(dt_lm_tensor(g, i)->name, name) == 0) return i;
    return -1;
}

/* dt_zero_unit_fn: a piece of the full fp32 parameters into the flat host copy ctx */
static int gather_piece(void *ctx, int unit, size_t flat_off, size_t n, const void *params, dt_error *err) {
    (void)unit;
    (void)err;
    memcpy((float *)ctx + flat_off, params, n * sizeof(float));
    return DT_OK;
}

/* One optimizer step with one tensor frozen: it keeps every bit, the rest move. */
static void check_frozen(dt_comm *comm, int stage) {
    fprintf(stderr, "== frozen weight, ZeRO %d\n", stage);
    dt_plan p = dt_test_load_plan("configs/plans/tiny-cpu.json");
    p.parallel.zero_stage = stage;
    p.parallel.world_size = 1;
    p.cluster.gpus_per_node = 1;
    dt_precision_from_preset(DT_PREC_FP32, &p.precision);
    dt_error err = {0};
    dt_lm *g = NULL;
    const dt_lm_options o = {.B = 2, .T = 16, .ckpt_layers = 0, .attn = DT_ATTN_FLASH, .device = DT_DEVICE_CPU,
                             .ordinal = 0, .flags = 0};
    CHECK(dt_lm_create_opts(&p.model, &p.precision, &o, &g, &err) == DT_OK);
    if (!g) return;
    const int frozen = find(g, "h.0.attn.c_attn.weight"), moving = find(g, "h.0.mlp.c_fc.weight");
    CHECK(frozen >= 0 && moving >= 0);
    /* what a plan's frozen parameter group will declare at layout time */
    ((dt_tensor_info *)dt_lm_tensor(g, frozen))->flags &= ~DT_TENSOR_TRAINABLE;
    dt_zero *z = NULL;
    CHECK(dt_zero_create(&p, comm, g, &z, &err) == DT_OK);
    CHECK(dt_zero_init_random(z, 3, &err) == DT_OK);
    const size_t n = dt_lm_num_params(g);
    float *before = malloc(n * sizeof(float)), *after = malloc(n * sizeof(float));
    int32_t tok[2 * 16], tgt[2 * 16];
    for (int i = 0; i < 2 * 16; i++) tok[i] = (i * 7) % 256, tgt[i] = (i * 11 + 3) % 256;
    CHECK(before && after);
    if (!before || !after || !z) goto out;
    CHECK(dt_zero_consolidate_params(z, gather_piece, before, &err) == DT_OK);
    dt_zero_begin_step(z);
    dt_zero_set_micro(z, 1, &err);
    float loss = 0.0f;
    double l = 0.0, sumsq = 0.0;
    int nonfinite = 0;
    const dt_adamw hp = {1e-2, 0.9, 0.999, 1e-8, 0.1};
    CHECK(dt_lm_forward(g, tok, tgt, &loss, &err) == DT_OK);
    CHECK(dt_lm_backward(g, 1.0f, &err) == DT_OK);
    CHECK(dt_zero_end_backward(z, &err) == DT_OK);
    l = loss;
    CHECK(dt_zero_reduce_scalars(z, &l, &sumsq, &nonfinite, &err) == DT_OK);
    CHECK(sumsq > 0.0 && !nonfinite);
    CHECK(dt_zero_optimizer_step(z, &hp, 1.0, 1, &err) == DT_OK);
    CHECK(dt_zero_consolidate_params(z, gather_piece, after, &err) == DT_OK);
    const dt_tensor_info *tf = dt_lm_tensor(g, frozen), *tm = dt_lm_tensor(g, moving);
    CHECK(memcmp(before + tf->offset, after + tf->offset, tf->numel * sizeof(float)) == 0);
    CHECK(memcmp(before + tm->offset, after + tm->offset, tm->numel * sizeof(float)) != 0);
out:
    if (err.code) fprintf(stderr, "error: %s\n", err.msg);
    free(before);
    free(after);
    dt_zero_free(z);
    dt_lm_free(g);
}

int main(void) {
    dt_plan gpt2 = dt_test_load_plan("configs/plans/tiny-cpu.json");
    check_family("gpt2", &gpt2.model);
    dt_plan qwen3 = dt_test_load_plan("tests/kernels/golden/train/qwen3.plan.json");
    check_family("qwen3 (q/k norm, untied head)", &qwen3.model);
    dt_model qwen2 = qwen3.model;
    qwen2.qk_norm = 0;
    qwen2.qkv_bias = 1;
    qwen2.tied_embeddings = 1;
    check_family("qwen2 (q/k/v bias, tied)", &qwen2);
    dt_model llama = qwen2;
    llama.qkv_bias = 0;
    llama.tied_embeddings = 0;
    check_family("llama", &llama);

    dt_comm *comm = NULL;
    dt_error err;
    if (dt_comm_init_self(&comm, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    check_frozen(comm, 0);
    check_frozen(comm, 3);
    dt_comm_free(comm);
    TEST_MAIN_END();
}
