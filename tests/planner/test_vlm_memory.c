/* test_vlm_memory.c — what a vision-language plan adds to the memory and time models
 * (planner/vlm.c, planner/finetune.c's vision groups), from first principles:
 *   - model states per stage at ZeRO-0 and ZeRO-3: the frozen tower as bf16 weights only, the
 *     projector always trained, the language model frozen in pretrain; bytes exact;
 *   - activations: full less sft is the trained tower's formula (docs/vlm.md), written out here
 *     independently; sft and pretrain differ only in the language model's frozen linears;
 *   - the per-part rows sum to the breakdown;
 *   - time: the tower's backward only in full; the vision FLOPs in the step;
 *   - a text plan is untouched (no vision terms). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_memory.h"
#include "dt_model.h"
#include "dt_test.h"
#include "dt_timemodel.h"
#include "dt_timeterms.h"
#include "dt_vision.h"
#include "dt_vlmplan.h"

#define BF16 2
#define FP32 4
#define ADAM_MIXED 12   /* fp32 master + m + v */

static void plan_of(dt_plan *p, const char *model, dt_vlm_stage stage, int zero, int64_t gpus) {
    dt_error e = {0};
    dt_plan_defaults(p);
    if (dt_model_resolve_vlm(model, &p->model, &p->vlm, &e) ||
        dt_hardware_load("H100-SXM-80GB", NULL, &p->cluster.hw, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
    p->cluster.device = DT_DEVICE_CUDA;
    p->cluster.gpus_per_node = gpus;
    p->parallel.world_size = gpus;
    p->parallel.zero_stage = zero;
    p->vlm.stage = stage;
    p->batch.micro_batch = 4;
    p->batch.seq_len = 2048;
    p->batch.global_batch = 4 * gpus;
}

static dt_mem_breakdown mem(const dt_plan *p) {
    dt_mem_breakdown m;
    dt_error e = {0};
    int rc = dt_memory_estimate(p, &m, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    CHECK_EQ_I64(rc, DT_OK);
    return m;
}

/* The trained tower's activations, per docs/vlm.md's table, for ViT-L/14-336 (CLIP, flash). */
static int64_t tower_act(const dt_plan *p) {
    const dt_vision_tower *t = &p->vlm.tower;
    const int64_t s = 577, h = t->hidden, f = t->ffn, a = t->n_head, Lu = 23, e = BF16;
    const int64_t n = p->batch.micro_batch * p->vlm.images_per_sample;
    const int64_t values = 3 * 336 * 336 + s * h + Lu * s * (8 * h + 3 * f);
    const int64_t stats = 2 * s + Lu * s * 4 + Lu * a * s;
    return n * (e * values + FP32 * stats) + 8 * s;
}

static void states(void) {
    dt_plan p;
    plan_of(&p, "llava-1.5-7b", DT_VLM_SFT, 0, 8);
    const int64_t tower = dt_vision_tower_params(&p.vlm), proj = dt_vision_projector_params(&p.vlm, &p.model);
    const int64_t lm = dt_model_params(&p.model);
    dt_mem_breakdown m = mem(&p);
    CHECK_EQ_I64(m.params, BF16 * (tower + proj + lm));
    CHECK_EQ_I64(m.grads, BF16 * (proj + lm));
    CHECK_EQ_I64(m.optimizer, ADAM_MIXED * (proj + lm));
    p.vlm.stage = DT_VLM_PRETRAIN;
    m = mem(&p);
    CHECK_EQ_I64(m.params, BF16 * (tower + proj + lm));
    CHECK_EQ_I64(m.grads, BF16 * proj);
    CHECK_EQ_I64(m.optimizer, ADAM_MIXED * proj);
    p.vlm.stage = DT_VLM_FULL;
    m = mem(&p);
    CHECK_EQ_I64(m.grads, BF16 * (tower + proj + lm));
    CHECK_EQ_I64(m.optimizer, ADAM_MIXED * (tower + proj + lm));
    /* ZeRO-3 as DeepSpeed runs it: the frozen tower partitioned with everything else
     * (zero.Init partitions frozen parameters too); the trained state by N */
    plan_of(&p, "llava-1.5-7b", DT_VLM_SFT, 3, 8);
    p.runtime.kind = DT_RUNTIME_DEEPSPEED;
    m = mem(&p);
    const int64_t want = (BF16 * tower + 7) / 8 + BF16 * ((proj + lm + 7) / 8);
    CHECK(m.params >= want - 16 && m.params <= want + 16);
    CHECK(m.optimizer >= ADAM_MIXED * ((proj + lm) / 8) && m.optimizer <= ADAM_MIXED * ((proj + lm) / 8 + 1));
    /* dtrun keeps the frozen base (here the tower) whole on every rank at every stage
     * (its base set, docs/finetune.md "In dtrun"); the trained part is partitioned alike */
    p.runtime.kind = DT_RUNTIME_DTRUN;
    m = mem(&p);
    const int64_t want_dtrun = BF16 * tower + BF16 * ((proj + lm + 7) / 8);
    CHECK(m.params >= want_dtrun - 16 && m.params <= want_dtrun + 16);
}

static void activations(void) {
    dt_plan p;
    plan_of(&p, "llava-1.5-7b", DT_VLM_SFT, 0, 8);
    const int64_t sft = mem(&p).activations;
    p.vlm.stage = DT_VLM_FULL;
    const int64_t full = mem(&p).activations;
    CHECK_EQ_I64(full - sft, tower_act(&p));
    dt_vlm_act va;
    dt_vlmplan_activations(&p, &va);
    CHECK_EQ_I64(va.tower, tower_act(&p));
    /* the projector: n (h + 2H) values per image, always */
    CHECK_EQ_I64(va.projector, BF16 * 4 * 576 * (1024 + 2 * 4096));
    p.vlm.stage = DT_VLM_PRETRAIN;
    const int64_t pre = mem(&p).activations;
    CHECK(pre > 0 && pre < sft);   /* frozen linears keep no input, yet backward runs through every block */
    /* two images: twice the tower's and the projector's */
    p.vlm.stage = DT_VLM_FULL;
    p.vlm.images_per_sample = 2;
    dt_vlmplan_activations(&p, &va);
    CHECK_EQ_I64(va.tower, tower_act(&p));
    CHECK_EQ_I64(va.projector, BF16 * 8 * 576 * (1024 + 2 * 4096));
    /* the per-part rows sum to the breakdown */
    for (int st = 0; st < DT_VLM_STAGES; st++) {
        p.vlm.stage = (dt_vlm_stage)st;
        dt_mem_breakdown m = mem(&p);
        dt_vlm_share s[DT_VLM_PARTS];
        dt_error e = {0};
        CHECK_EQ_I64(dt_vlmplan_shares(&p, &m, s, &e), DT_OK);
        CHECK_EQ_I64(s[0].params + s[1].params + s[2].params, m.params);
        CHECK_EQ_I64(s[0].activations + s[1].activations + s[2].activations, m.activations);
        CHECK(s[DT_VLM_PART_LLM].activations > 0);
        CHECK_EQ_I64(s[DT_VLM_PART_TOWER].activations, st == DT_VLM_FULL ? tower_act(&p) : 0);
    }
}

static void time_terms(void) {
    dt_plan p;
    dt_time_compute c[DT_VLM_STAGES];
    dt_error e = {0};
    for (int st = 0; st < DT_VLM_STAGES; st++) {
        plan_of(&p, "llava-1.5-7b", (dt_vlm_stage)st, 0, 8);
        CHECK_EQ_I64(dt_time_compute_micro(&p, &c[st], &e), DT_OK);
    }
    /* the forward is the same in every stage; the backward grows with what is trained */
    CHECK(c[DT_VLM_PRETRAIN].fwd_s == c[DT_VLM_SFT].fwd_s && c[DT_VLM_SFT].fwd_s == c[DT_VLM_FULL].fwd_s);
    CHECK(c[DT_VLM_PRETRAIN].bwd_s < c[DT_VLM_SFT].bwd_s && c[DT_VLM_SFT].bwd_s < c[DT_VLM_FULL].bwd_s);
    /* full - sft backward = the tower's backward: 2 x its forward FLOPs per image at the achievable rate */
    const double tower_bwd = 2.0 * 4 * dt_vision_tower_fwd_flops(&p.vlm) / p.cluster.hw.achievable_flops[DT_DTYPE_BF16];
    CHECK_NEAR(c[DT_VLM_FULL].bwd_s - c[DT_VLM_SFT].bwd_s, tower_bwd, 1e-9);
    /* ViT-L/14 at 336 px: timm's model table lists vit_large_patch14_clip_336 at 191.1 GMACs per
     * image (its pooled head aside), 2 FLOPs each */
    CHECK(dt_vision_tower_fwd_flops(&p.vlm) > 2 * 189e9 && dt_vision_tower_fwd_flops(&p.vlm) < 2 * 192e9);
    CHECK(dt_vlmplan_flops_per_seq(&p) > 0);
    /* a text plan: no vision terms */
    dt_plan t;
    plan_of(&t, "llava-1.5-7b", DT_VLM_SFT, 0, 8);
    memset(&t.vlm, 0, sizeof t.vlm);
    dt_vlm_act va;
    dt_vlmplan_activations(&t, &va);
    CHECK_EQ_I64(va.tower + va.projector, 0);
    CHECK(dt_vlmplan_flops_per_seq(&t) == 0.0);
}

int main(void) {
    states();
    activations();
    time_terms();
    TEST_MAIN_END();
}
