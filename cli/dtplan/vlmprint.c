/* vlmprint.c — dtplan's lines for a vision-language plan (dt_cli_ft.h, docs/vlm.md): the
 * header line, and every memory term with the vision tower, projector and language model
 * named. */
#include <inttypes.h>
#include <stdio.h>

#include "dt_cli_ft.h"
#include "dt_memory.h"
#include "dt_vision.h"
#include "dt_vlmplan.h"

static const char *trains(const dt_vlm *v) {
    switch (v->stage) {
    case DT_VLM_PRETRAIN: return "the projector (tower and language model frozen)";
    case DT_VLM_SFT: return "the projector + language model (tower frozen)";
    default: return "everything";
    }
}

void dt_vlm_print_summary(const dt_plan *p, const char *label) {
    const dt_vlm *v = &p->vlm;
    if (!dt_vlm_active(v)) return;
    const int64_t img = dt_vlm_sequence_image_tokens(v);
    char c1[32], c2[32];
    printf("%s%s ViT (%s params) %" PRId64 " blocks, hidden %" PRId64 ", %" PRId64 " px / patch %" PRId64 " (features of block %"
           PRId64 "), projector %s (%s params); %" PRId64 " image tokens per image x %" PRId64 " = %" PRId64 " of --seq %" PRId64
           " (%" PRId64 " text); stage %s trains %s\n",
           label, dt_vit_kind_name(v->tower.kind), dt_format_count(dt_vision_tower_params(v), c1, sizeof c1),
           v->tower.n_layer, v->tower.hidden, v->tower.image_size, v->tower.patch, dt_vlm_used_layers(v),
           dt_projector_name(v->projector), dt_format_count(dt_vision_projector_params(v, &p->model), c2, sizeof c2),
           dt_vlm_image_tokens(v),
           v->images_per_sample, img, p->batch.seq_len, p->batch.seq_len - img, dt_vlm_stage_name(v->stage), trains(v));
}

static const char *why(dt_vlm_part k, const dt_plan *p, char *buf, size_t n) {
    const dt_vlm *v = &p->vlm;
    const int64_t B = p->batch.micro_batch;
    switch (k) {
    case DT_VLM_PART_TOWER:
        if (!dt_vlm_trains_tower(v)) {
            snprintf(buf, n, "frozen: no activations (run without a graph: no input needs a gradient)");
        } else {
            snprintf(buf, n, "%" PRId64 " images x %" PRId64 " tokens (patches + class), blocks 0..%" PRId64 ": "
                     "Korthikanti's non-causal block + pixels", B * v->images_per_sample, dt_vlm_tower_tokens(v),
                     dt_vlm_used_layers(v) - 1);
        }
        break;
    case DT_VLM_PART_PROJECTOR:
        snprintf(buf, n, "%" PRId64 " image tokens: linear_1, GELU and linear_2 inputs", B * dt_vlm_sequence_image_tokens(v));
        break;
    default:
        snprintf(buf, n, "%" PRId64 " tokens per sequence (image + text)%s", p->batch.seq_len,
                 dt_vlm_trains_llm(v) ? "" : "; frozen, backward still runs through it to the image features");
    }
    return buf;
}

void dt_vlm_print_terms(const dt_plan *p, dt_units u) {
    if (!dt_vlm_active(&p->vlm)) return;
    dt_mem_breakdown m;
    dt_vlm_share s[DT_VLM_PARTS];
    dt_error e = {0};
    if (dt_memory_estimate(p, &m, &e) || dt_vlmplan_shares(p, &m, s, &e)) {
        printf("vision-language terms: %s\n", e.msg);
        return;
    }
    char c1[32], c2[32], b[4][32], w[256];
    printf("\nvision-language terms, stage %s, ZeRO-%d, offload %s/%s, per %s (docs/vlm.md):\n",
           dt_vlm_stage_name(p->vlm.stage), p->parallel.zero_stage, dt_offload_name(p->parallel.offload_optimizer),
           dt_offload_name(p->parallel.offload_param), p->cluster.device == DT_DEVICE_CPU ? "rank" : "GPU");
    printf("  %-15s %9s %9s %12s %12s %12s %12s  %s\n", "part", "trained", "frozen", "params", "grads", "optimizer",
           "activations", "activations are");
    for (int k = 0; k < DT_VLM_PARTS; k++)
        printf("  %-15s %9s %9s %12s %12s %12s %12s  %s\n", dt_vlm_part_name((dt_vlm_part)k),
               dt_format_count(s[k].trained, c1, sizeof c1), dt_format_count(s[k].frozen, c2, sizeof c2),
               dt_format_bytes(s[k].params, u, b[0], sizeof b[0]), dt_format_bytes(s[k].grads, u, b[1], sizeof b[1]),
               dt_format_bytes(s[k].optimizer, u, b[2], sizeof b[2]),
               dt_format_bytes(s[k].activations, u, b[3], sizeof b[3]), why((dt_vlm_part)k, p, w, sizeof w));
    printf("  frozen parts: weights only, as loaded; trained: %d + %d + %d B per parameter (%s) by ZeRO stage; "
           "buffers and reserve as in the table above\n", dt_precision_param_bytes(&p->precision),
           dt_precision_grad_bytes(&p->precision), dt_precision_optimizer_bytes(&p->precision),
           dt_precision_preset_name(p->precision.preset));
}

void dt_vlm_print_json(const dt_plan *p) {
    const dt_vlm *v = &p->vlm;
    if (!dt_vlm_active(v)) return;
    dt_vlm_act a;
    dt_vlmplan_activations(p, &a);
    printf("  \"vision\": {\"tower\": \"%s\", \"stage\": \"%s\", \"tower_params\": %" PRId64
           ", \"projector_params\": %" PRId64 ", \"image_tokens_per_image\": %" PRId64 ", \"images_per_sample\": %" PRId64
           ", \"tower_activation_bytes\": %" PRId64 ", \"projector_activation_bytes\": %" PRId64 "},\n",
           dt_vit_kind_name(v->tower.kind), dt_vlm_stage_name(v->stage), dt_vision_tower_params(v),
           dt_vision_projector_params(v, &p->model), dt_vlm_image_tokens(v), v->images_per_sample, a.tower,
           a.projector);
}
