/* dt_layout.h — the plan's "layout" section: tensor, sequence, context and pipeline
 * parallelism next to DP x ZeRO (docs/parallelism.md, docs/plan-format.md "layout").
 * Degrees are rank counts; layers are transformer blocks. */
#ifndef DT_LAYOUT_H
#define DT_LAYOUT_H

#include <stdint.h>

#include "dt_json.h"
#include "dt_plan.h"

/* Megatron-LM arguments.py: the interleaved schedule needs more than 2 pipeline stages
 * (p = 2 only with overlap_p2p_comm, which the plan does not describe). */
#define DT_LAYOUT_MIN_PP_INTERLEAVED 3

/* p's layout with zeros read as 1 (a zeroed dt_layout is "no layout"). */
dt_layout dt_layout_of(const dt_plan *p);
/* 1 when tp, cp or pp is above 1, or the runtime is megatron (the plan has a "layout" section
 * and the layout model, planner/parallel3d.c, prices it). */
int dt_layout_active(const dt_plan *p);
/* The data-parallel size: world_size / (tp x cp x pp); world_size without a layout. */
int64_t dt_layout_dp(const dt_plan *p);
/* Transformer blocks held by pipeline stage s (0 .. pp-1), all of its virtual chunks. */
int64_t dt_layout_stage_layers(const dt_plan *p, int64_t s);
const char *dt_pp_schedule_name(dt_pp_schedule s);   /* "1f1b" | "interleaved" */
/* Sets tp/cp/pp/vpp (sp on when tp > 1 and sp != 0), the schedule from vpp, even split. */
void dt_layout_set(dt_plan *p, int64_t tp, int sp, int64_t cp, int64_t pp, int64_t vpp);

/* The layout's own rules, one line each (DT_EINVAL): heads and KV heads divisible by tp,
 * pp no larger than the layers and the split exact, tp x cp x pp dividing the cluster,
 * cp dividing the sequence, interleaving's conditions (Megatron-LM arguments.py), and the
 * combinations each runtime accepts (dtrun: none yet; DeepSpeed: no ZeRO-2/3 with its
 * pipeline engine, no ring context parallelism; fsdp: torchtitan's FSDP2 x TP x CP x PP). */
int dt_layout_validate(const dt_plan *p, dt_error *err);

/* JSON: the optional "$.layout" object, written only when tp, cp or pp is above 1. */
void dt_layout_write(cJSON *root, const dt_plan *p);
void dt_layout_read(dt_jobj *root, dt_plan *p, dt_error *err);

#endif
