/* layout.c — the plan's "layout" section: reading, writing, the rules (dt_layout.h).
 * Sources: Megatron-LM megatron/training/arguments.py (divisibility, interleaving),
 * DeepSpeed deepspeed/runtime/pipe/engine.py (ZeRO stage < 2 with PipelineModule),
 * torchtitan torchtitan/distributed/parallel_dims.py (dp_shard x cp x tp x pp = world);
 * summarised in docs/parallelism.md. */
#include "dt_layout.h"

#include <inttypes.h>
#include <string.h>

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const k_schedule_names[] = {"1f1b", "interleaved"};

static int64_t one_if_zero(int64_t v) { return v > 0 ? v : 1; }

dt_layout dt_layout_of(const dt_plan *p) {
    dt_layout l = p->layout;
    l.tp = one_if_zero(l.tp), l.cp = one_if_zero(l.cp), l.pp = one_if_zero(l.pp), l.vpp = one_if_zero(l.vpp);
    if (l.tp == 1) l.sp = 0;
    return l;
}

int dt_layout_active(const dt_plan *p) {
    dt_layout l = dt_layout_of(p);
    /* a Megatron-LM plan is always one of Megatron's layouts (tp = cp = pp = 1 included):
     * its memory and time are the layout model's, with no Hugging Face terms */
    return l.tp > 1 || l.cp > 1 || l.pp > 1 || p->runtime.kind == DT_RUNTIME_MEGATRON;
}

int64_t dt_layout_dp(const dt_plan *p) {
    dt_layout l = dt_layout_of(p);
    int64_t model = l.tp * l.cp * l.pp;
    return p->parallel.world_size / model > 0 ? p->parallel.world_size / model : 1;
}

int64_t dt_layout_stage_layers(const dt_plan *p, int64_t s) {
    dt_layout l = dt_layout_of(p);
    const int64_t L = p->model.n_layer;
    if (l.pp == 1) return L;
    if (!l.first_stage_layers && !l.last_stage_layers) return L / l.pp;
    int64_t first = l.first_stage_layers, last = l.last_stage_layers;
    if (s == 0) return first;
    if (s == l.pp - 1) return last;
    return (L - first - last) / (l.pp - 2);
}

const char *dt_pp_schedule_name(dt_pp_schedule s) {
    return (unsigned)s < (unsigned)N_OF(k_schedule_names) ? k_schedule_names[s] : "?";
}

void dt_layout_set(dt_plan *p, int64_t tp, int sp, int64_t cp, int64_t pp, int64_t vpp) {
    memset(&p->layout, 0, sizeof p->layout);
    p->layout.tp = tp, p->layout.cp = cp, p->layout.pp = pp, p->layout.vpp = vpp;
    p->layout.sp = tp > 1 && sp;
    p->layout.schedule = vpp > 1 ? DT_PP_INTERLEAVED : DT_PP_1F1B;
}

static int validate_split(const dt_plan *p, const dt_layout *l, dt_error *err) {
    const int64_t L = p->model.n_layer;
    if (l->first_stage_layers || l->last_stage_layers) {
        int64_t mid = L - l->first_stage_layers - l->last_stage_layers;
        if (l->pp < 2 || l->first_stage_layers < 1 || l->last_stage_layers < 1 || mid < 0 ||
            (l->pp == 2 && mid != 0) || (l->pp > 2 && (mid < l->pp - 2 || mid % (l->pp - 2))))
            return dt_errorf(err, DT_EINVAL,
                             "layout.first_stage_layers %" PRId64 " + last_stage_layers %" PRId64
                             " leave %" PRId64 " of %" PRId64 " layers, not an equal share (at least one) for "
                             "each of the %" PRId64 " middle stages (Megatron-LM --decoder-first/last-pipeline-num-"
                             "layers); adjust them or set both to 0",
                             l->first_stage_layers, l->last_stage_layers, mid, L, l->pp > 2 ? l->pp - 2 : 0);
        if (l->vpp > 1)
            return dt_errorf(err, DT_EINVAL,
                             "layout: an uneven split (first_stage_layers / last_stage_layers) with virtual_stages "
                             "%" PRId64 " is not described; set virtual_stages 1 or both to 0", l->vpp);
    } else if (L % l->pp) {
        return dt_errorf(err, DT_EINVAL,
                         "layout.pp %" PRId64 " does not divide the model's %" PRId64 " layers (Megatron-LM: "
                         "num_layers must be divisible by the pipeline size); use a divisor, or give "
                         "first_stage_layers and last_stage_layers",
                         l->pp, L);
    }
    if (l->vpp > 1) {
        if (l->pp < DT_LAYOUT_MIN_PP_INTERLEAVED)
            return dt_errorf(err, DT_EINVAL,
                             "layout.virtual_stages %" PRId64 " needs pp >= %d (Megatron-LM's interleaved schedule); "
                             "this layout has pp %" PRId64,
                             l->vpp, DT_LAYOUT_MIN_PP_INTERLEAVED, l->pp);
        if ((L / l->pp) % l->vpp)
            return dt_errorf(err, DT_EINVAL,
                             "layout.virtual_stages %" PRId64 " does not divide the %" PRId64 " layers of each "
                             "pipeline stage; use a divisor of %" PRId64,
                             l->vpp, L / l->pp, L / l->pp);
        if (p->batch.grad_accum % l->pp)
            return dt_errorf(err, DT_EINVAL,
                             "layout: the interleaved schedule needs the micro-batches per step (batch.grad_accum "
                             "%" PRId64 ") to be a multiple of pp %" PRId64 " (Megatron-LM schedules.py)",
                             p->batch.grad_accum, l->pp);
    }
    if ((l->schedule == DT_PP_INTERLEAVED) != (l->vpp > 1))
        return dt_errorf(err, DT_EINVAL,
                         "layout.schedule \"%s\" with virtual_stages %" PRId64 ": interleaved goes with "
                         "virtual_stages > 1, 1f1b with 1",
                         dt_pp_schedule_name(l->schedule), l->vpp);
    return DT_OK;
}

static int validate_runtime_combo(const dt_plan *p, const dt_layout *l, dt_error *err) {
    switch (p->runtime.kind) {
    case DT_RUNTIME_DTRUN:   /* tensor parallelism x ZeRO-DP (docs/parallelism.md "In dtrun") */
        if (l->cp > 1 || l->pp > 1 || l->sp)
            return dt_errorf(err, DT_EINVAL,
                             "layout tp %" PRId64 " x cp %" PRId64 " x pp %" PRId64 "%s with runtime dtrun: dtrun runs "
                             "tensor parallelism (tp, sequence_parallel false) x ZeRO data parallelism only; plan "
                             "context / pipeline / sequence parallelism for runtime deepspeed or fsdp (dtplan solve "
                             "--runtime fsdp), or set cp 1, pp 1, sequence_parallel false",
                             l->tp, l->cp, l->pp, l->sp ? " + sequence_parallel" : "");
        if (p->model.ffn % l->tp || p->model.vocab % l->tp)
            return dt_errorf(err, DT_EINVAL,
                             "layout.tp %" PRId64 " does not divide the model's ffn size %" PRId64 " and vocabulary %" PRId64
                             ": dtrun splits both evenly over the TP ranks (it does not pad the vocabulary as Megatron-LM's "
                             "--make-vocab-size-divisible-by does); use a common divisor, or runtime deepspeed / fsdp",
                             l->tp, p->model.ffn, p->model.vocab);
        break;
    case DT_RUNTIME_DEEPSPEED:
        if (l->pp > 1 && p->parallel.zero_stage >= 2)
            return dt_errorf(err, DT_EINVAL,
                             "ZeRO stage %d with DeepSpeed's pipeline engine (layout.pp %" PRId64 "): DeepSpeed "
                             "refuses it (runtime/pipe/engine.py: ZeRO-2 and ZeRO-3 are incompatible with pipeline "
                             "parallelism); use zero_stage 0 or 1, or runtime fsdp",
                             p->parallel.zero_stage, l->pp);
        if (l->cp > 1)
            return dt_errorf(err, DT_EINVAL,
                             "layout.cp %" PRId64 " with runtime deepspeed: DeepSpeed has no ring context "
                             "parallelism (its Ulysses sequence parallelism is a different scheme); use runtime fsdp "
                             "(torchtitan) or cp 1",
                             l->cp);
        break;
    case DT_RUNTIME_FSDP:
    case DT_RUNTIME_MEGATRON:   /* TP, SP, CP, PP, interleaving; its DP rules are in plan.c */
        break;
    }
    /* the layout's time model prices no host transfers (docs/parallelism.md) */
    if (p->parallel.offload_optimizer != DT_OFFLOAD_NONE || p->parallel.offload_param != DT_OFFLOAD_NONE)
        return dt_errorf(err, DT_EINVAL,
                         "layout tp %" PRId64 " x cp %" PRId64 " x pp %" PRId64 " with offload (optimizer %s, "
                         "parameters %s): not described by the planner; use offload none with a layout",
                         l->tp, l->cp, l->pp, dt_offload_name(p->parallel.offload_optimizer),
                         dt_offload_name(p->parallel.offload_param));
    return DT_OK;
}

int dt_layout_validate(const dt_plan *p, dt_error *err) {
    const dt_layout *raw = &p->layout;
    if (raw->tp < 0 || raw->cp < 0 || raw->pp < 0 || raw->vpp < 0 || raw->first_stage_layers < 0 ||
        raw->last_stage_layers < 0 || (raw->sp != 0 && raw->sp != 1) || (unsigned)raw->schedule > DT_PP_INTERLEAVED)
        return dt_errorf(err, DT_EINVAL, "layout: degrees and layer counts must be >= 1, sp 0 or 1");
    if (!dt_layout_active(p)) {
        if (one_if_zero(raw->vpp) > 1 || raw->first_stage_layers || raw->last_stage_layers)
            return dt_errorf(err, DT_EINVAL,
                             "layout: virtual_stages or an uneven split without pipeline parallelism (pp 1)");
        return DT_OK;
    }
    dt_layout l = dt_layout_of(p);
    const dt_model *m = &p->model;
    if (m->n_head % l.tp || m->n_kv_head % l.tp)
        return dt_errorf(err, DT_EINVAL,
                         "layout.tp %" PRId64 " does not divide the model's %" PRId64 " attention heads and %" PRId64
                         " KV heads (Megatron splits whole heads over the TP ranks); use a common divisor",
                         l.tp, m->n_head, m->n_kv_head);
    if (raw->sp && l.tp == 1)
        return dt_errorf(err, DT_EINVAL, "layout.sequence_parallel needs tp > 1 (it splits over the TP group)");
    if (l.pp > m->n_layer)
        return dt_errorf(err, DT_EINVAL,
                         "layout.pp %" PRId64 " is larger than the model's %" PRId64 " layers (every pipeline "
                         "stage needs at least one layer): use pp <= %" PRId64,
                         l.pp, m->n_layer, m->n_layer);
    if (p->batch.seq_len % l.cp)
        return dt_errorf(err, DT_EINVAL,
                         "layout.cp %" PRId64 " does not divide batch.seq_len %" PRId64 " (each CP rank holds an "
                         "equal slice of the sequence)",
                         l.cp, p->batch.seq_len);
    const int64_t world = p->parallel.world_size, model = l.tp * l.cp * l.pp;
    if (model > world || world % model)
        return dt_errorf(err, DT_EINVAL,
                         "layout tp %" PRId64 " x cp %" PRId64 " x pp %" PRId64 " = %" PRId64 " ranks %s the "
                         "cluster's %" PRId64 " (nodes %" PRId64 " x gpus_per_node %" PRId64 "); the data-parallel "
                         "size is world / (tp x cp x pp)",
                         l.tp, l.cp, l.pp, model, model > world ? "is larger than" : "does not divide", world,
                         p->cluster.nodes, p->cluster.gpus_per_node);
    int rc = validate_split(p, &l, err);
    return rc ? rc : validate_runtime_combo(p, &l, err);
}

void dt_layout_write(cJSON *root, const dt_plan *p) {
    dt_layout l = dt_layout_of(p);
    if (l.tp == 1 && l.cp == 1 && l.pp == 1) return;   /* a megatron plan at 1 x 1 x 1 too: no section */
    cJSON *o = cJSON_AddObjectToObject(root, "layout");
    if (!o) return;
    cJSON_AddNumberToObject(o, "tp", (double)l.tp);
    cJSON_AddBoolToObject(o, "sequence_parallel", l.sp);
    cJSON_AddNumberToObject(o, "cp", (double)l.cp);
    cJSON_AddNumberToObject(o, "pp", (double)l.pp);
    cJSON_AddNumberToObject(o, "virtual_stages", (double)l.vpp);
    cJSON_AddStringToObject(o, "schedule", dt_pp_schedule_name(l.schedule));
    if (l.first_stage_layers || l.last_stage_layers) {
        cJSON_AddNumberToObject(o, "first_stage_layers", (double)l.first_stage_layers);
        cJSON_AddNumberToObject(o, "last_stage_layers", (double)l.last_stage_layers);
    }
}

/* Strict: tp, cp and pp are required; sequence_parallel (default true with tp > 1, as
 * torchtitan's enable_sequence_parallel), virtual_stages (1), schedule (from virtual_stages)
 * and the uneven split (both or neither) are optional; any other key is unknown. */
void dt_layout_read(dt_jobj *root, dt_plan *p, dt_error *err) {
    dt_layout *l = &p->layout;
    memset(l, 0, sizeof *l);
    if (!dt_jobj_has(root, "layout")) return;
    dt_jobj r;
    if (dt_jobj_open(&r, root, "layout", err)) return;
    const int64_t most = INT64_C(1000000);
    dt_jobj_int(&r, "tp", 1, most, &l->tp, err);
    dt_jobj_int(&r, "cp", 1, most, &l->cp, err);
    dt_jobj_int(&r, "pp", 1, most, &l->pp, err);
    l->vpp = 1, l->sp = l->tp > 1;
    if (dt_jobj_has(&r, "sequence_parallel")) dt_jobj_bool(&r, "sequence_parallel", &l->sp, err);
    if (dt_jobj_has(&r, "virtual_stages")) dt_jobj_int(&r, "virtual_stages", 1, most, &l->vpp, err);
    l->schedule = l->vpp > 1 ? DT_PP_INTERLEAVED : DT_PP_1F1B;
    int v = 0;
    if (dt_jobj_has(&r, "schedule") &&
        !dt_jobj_enum(&r, "schedule", k_schedule_names, N_OF(k_schedule_names), &v, err))
        l->schedule = (dt_pp_schedule)v;
    int has_first = dt_jobj_has(&r, "first_stage_layers"), has_last = dt_jobj_has(&r, "last_stage_layers");
    if (has_first) dt_jobj_int(&r, "first_stage_layers", 1, most, &l->first_stage_layers, err);
    if (has_last) dt_jobj_int(&r, "last_stage_layers", 1, most, &l->last_stage_layers, err);
    if (!r.failed && has_first != has_last)
        r.failed = dt_errorf(err, DT_EINVAL, "%s: give both first_stage_layers and last_stage_layers, or neither",
                             r.path);
    if (!r.failed && l->tp == 1 && l->cp == 1 && l->pp == 1)
        r.failed = dt_errorf(err, DT_EINVAL,
                             "%s: tp, cp and pp are all 1: a plain data-parallel plan carries no layout section "
                             "(delete it)", r.path);
    if (dt_jobj_close(&r, err)) root->failed = r.failed;
}
