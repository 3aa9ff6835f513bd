/* dt_vlmplan.h — what a vision-language plan's tower and projector (plan.model.vision,
 * common/dt_vlm.h) add to memory and time, per rank. Their parameters are parameter groups of
 * the fine-tuning design (dt_ftplan.h: trained ones join the ZeRO-partitioned state, frozen
 * ones the frozen base); this file adds the rest. Every term and its source: docs/vlm.md,
 * docs/memory-model.md "Vision-language models". */
#ifndef DT_VLMPLAN_H
#define DT_VLMPLAN_H

#include "dt_plan.h"
#include "dt_timeterms.h"

/* Bytes per rank of one micro-batch's vision activations kept for backward: the tower's (only
 * when the stage trains it: a frozen tower runs without a graph, as autograd does when no
 * input requires a gradient) and the projector's (always trained). */
typedef struct dt_vlm_act { int64_t tower, projector; } dt_vlm_act;
void dt_vlmplan_activations(const dt_plan *p, dt_vlm_act *out);
int64_t dt_vlmplan_activation_bytes(const dt_plan *p);   /* tower + projector; 0 for a text plan */

/* Training FLOPs of one sequence's images: the tower's forward always, its backward (2 x) only
 * when trained; the projector's forward and backward. 0 for a text plan. */
double dt_vlmplan_flops_per_seq(const dt_plan *p);
/* Adds the vision side's forward and backward seconds to one micro-step's compute, at the
 * device's achievable rate. */
void dt_vlmplan_adjust_compute(const dt_plan *p, dt_time_compute *c);

/* One part's share of a rank's memory (dtplan estimate's rows): elements trained / frozen, and
 * bytes per rank of its params, gradients, optimizer state (device; ZeRO-partitioned as the
 * plan's stage says; offloaded parts on the host are not in them) and activations. */
typedef enum { DT_VLM_PART_TOWER = 0, DT_VLM_PART_PROJECTOR = 1, DT_VLM_PART_LLM = 2, DT_VLM_PARTS = 3 } dt_vlm_part;
typedef struct dt_vlm_share {
    int64_t trained, frozen;                        /* elements */
    int64_t params, grads, optimizer, activations;  /* bytes per rank */
} dt_vlm_share;
/* The three parts of p under memory breakdown m (dt_memory_estimate's): the tower's and the
 * projector's from their groups, the language model's the rest of m, so the rows sum to m
 * (in planner/finetune.c, which builds the groups). */
int dt_vlmplan_shares(const dt_plan *p, const dt_mem_breakdown *m, dt_vlm_share out[DT_VLM_PARTS], dt_error *err);
const char *dt_vlm_part_name(dt_vlm_part k);   /* "vision tower" | "projector" | "language model" */

/* Refuses what is not modelled with a vision tower (a TP / CP / PP layout, an objective
 * beyond pt / sft) in one line; DT_OK for text plans. */
int dt_vlmplan_check(const dt_plan *p, dt_error *err);

#endif
