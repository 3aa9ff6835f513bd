/* vlm.c — a vision-language plan's activations and compute beyond its parameter groups
 * (dt_vlmplan.h). Notation: B micro-batch, I images per sample, s tower tokens, n image
 * tokens; element counts from models/vision.c. docs/vlm.md. */
#include "dt_vlmplan.h"

#include "dt_layout.h"
#include "dt_objective.h"
#include "dt_vision.h"

#include <string.h>

/* CLIPVisionEmbeddings' position_embedding(position_ids) keeps its int64 index, one row of
 * tower tokens per micro-batch (tests/models/golden/llava_saved.txt). */
#define POSITION_ID_BYTES 8
/* fp32: LayerNorm statistics, flash's log-sum-exp; eager attention's softmax runs in fp32
 * (CLIPAttention: softmax(..., dtype=torch.float32)) and keeps that output, and the matmul
 * with v keeps its cast to the activation dtype when that is narrower. */
#define FP32_BYTES 4
/* A backward pass costs two forwards (dX and dW GEMMs: docs/time-model.md). */
#define BWD_OVER_FWD 2.0

static int64_t images(const dt_plan *p) { return p->batch.micro_batch * p->vlm.images_per_sample; }

void dt_vlmplan_activations(const dt_plan *p, dt_vlm_act *out) {
    out->tower = out->projector = 0;
    if (!dt_vlm_active(&p->vlm)) return;
    const int64_t a = dt_dtype_size(p->precision.activation), n = images(p);
    out->projector = n * a * dt_vision_projector_saved(&p->vlm, &p->model);
    if (!dt_vlm_trains_tower(&p->vlm)) return;
    dt_vision_saved s;
    const int eager = p->activations.attention == DT_ATTN_MATERIALIZED;
    dt_vision_tower_saved(&p->vlm, eager, &s);
    const int64_t probs = s.probs * (FP32_BYTES + (a < FP32_BYTES ? a : 0));
    out->tower = n * (a * (s.act + s.pixels) + FP32_BYTES * s.stats + probs) +
                 POSITION_ID_BYTES * dt_vlm_tower_tokens(&p->vlm);
}

int64_t dt_vlmplan_activation_bytes(const dt_plan *p) {
    dt_vlm_act v;
    dt_vlmplan_activations(p, &v);
    return v.tower + v.projector;
}

/* Per image: the tower's and the projector's training FLOPs. */
static void image_flops(const dt_plan *p, double *fwd, double *bwd) {
    const double tower = dt_vision_tower_fwd_flops(&p->vlm), proj = dt_vision_projector_fwd_flops(&p->vlm, &p->model);
    *fwd = tower + proj;
    *bwd = BWD_OVER_FWD * (proj + (dt_vlm_trains_tower(&p->vlm) ? tower : 0.0));
}

double dt_vlmplan_flops_per_seq(const dt_plan *p) {
    if (!dt_vlm_active(&p->vlm)) return 0.0;
    double f, b;
    image_flops(p, &f, &b);
    return (double)p->vlm.images_per_sample * (f + b);
}

void dt_vlmplan_adjust_compute(const dt_plan *p, dt_time_compute *c) {
    if (!dt_vlm_active(&p->vlm)) return;
    const dt_hardware *hw = &p->cluster.hw;
    /* the device's rate, shared by the ranks of a CPU node */
    const double share = hw->device == DT_DEVICE_CPU ? 1.0 / (double)p->cluster.gpus_per_node : 1.0;
    const double R = hw->achievable_flops[p->precision.param] * share;
    if (R <= 0) return;
    double f, b;
    image_flops(p, &f, &b);
    c->fwd_s += (double)images(p) * f / R;
    c->bwd_s += (double)images(p) * b / R;
}

int dt_vlmplan_check(const dt_plan *p, dt_error *err) {
    if (!dt_vlm_active(&p->vlm)) return DT_OK;
    if (dt_vlm_check_seq(&p->vlm, p->batch.seq_len, err)) return err->code;
    if (dt_layout_active(p))
        return dt_errorf(err, DT_EINVAL, "a TP / CP / PP layout with a vision tower is not modelled yet: plan %s "
                         "data-parallel (dtplan solve --no-layouts)", p->model.name);
    const dt_obj_kind k = p->objective.kind;
    if (k != DT_OBJ_AUTO && k != DT_OBJ_PT && k != DT_OBJ_SFT)
        return dt_errorf(err, DT_EINVAL, "objective %s with a vision tower is not modelled yet: LLaVA's stages train "
                         "with the language-model loss (--objective sft or pt)", dt_obj_name(k));
    return DT_OK;
}

const char *dt_vlm_part_name(dt_vlm_part k) {
    static const char *const names[DT_VLM_PARTS] = {"vision tower", "projector", "language model"};
    return (unsigned)k < DT_VLM_PARTS ? names[k] : "?";
}
