/* cmd_show.c — `dtplan show plan.json`: the plan as a readable, sectioned summary.
 * Bytes in GiB (or GB with --units GB), times in ms, bandwidths in GB/s (10^9
 * bytes/s, the unit nccl-tests and vendors quote), FLOP/s in TFLOP/s. */
#include <stdio.h>
#include <string.h>

#include "dt_cli.h"
#include "dt_consts.h"
#include "dt_layout.h"
#include "dt_cli_ft.h"
#include "dt_cli_obj.h"
#include "dt_ftplan.h"
#include "dt_megatron.h"
#include "dt_model.h"
#include "dt_parallel3d.h"
#include "dt_plan.h"
#include "dt_units.h"

#define GB_PER_BYTE 1e-9    /* bandwidths: decimal GB/s */
#define TERA 1e-12          /* FLOP/s -> TFLOP/s */
#define PERCENT 100.0

static void usage(FILE *f) {
    fprintf(f,
            "usage: dtplan show PLAN.json [--units GiB|GB]\n"
            "\n"
            "Prints a plan section by section: model, cluster and hardware numbers, ZeRO stage\n"
            "and offload, batch, precision, activations, optimizer and schedule, data, output,\n"
            "and the prediction (memory per rank, step time split, communication per step).\n"
            "Bytes in GiB (default) or GB, times in ms, bandwidths in GB/s.\n"
            "\n"
            "example: dtplan show configs/plans/tiny-cpu.json\n");
}

typedef struct {
    dt_units u;
    char buf[8][48];
    int next;
} fmt;

/* rotating buffers so one printf can show several sizes */
static const char *B(fmt *f, int64_t bytes) {
    char *s = f->buf[f->next++ % 8];
    return dt_format_bytes(bytes, f->u, s, sizeof f->buf[0]);
}

static const char *CNT(fmt *f, int64_t n) {
    char *s = f->buf[f->next++ % 8];
    return dt_format_count(n, s, sizeof f->buf[0]);
}

static const char *onoff(int v) { return v ? "on" : "off"; }

/* ", rope scaling llama3 (factor 8, low 1, high 4, original 8192 positions)"; nothing for the default */
static void show_rope_scaling(const dt_rope_scaling *rs) {
    if (rs->type == DT_ROPE_DEFAULT) return;
    printf(",\n             rope scaling %s (factor %g", dt_rope_type_name(rs->type), rs->factor);
    if (rs->type == DT_ROPE_LLAMA3) printf(", low %g, high %g", rs->low_freq_factor, rs->high_freq_factor);
    if (rs->original_max_pos > 0) printf(", original %lld positions", (long long)rs->original_max_pos);
    printf(")");
}

static void show_model(const dt_plan *p, fmt *f) {
    const dt_model *m = &p->model;
    printf("model        %s (%s%s): %lld layers, hidden %lld, %lld heads (%lld kv, head dim %lld), ffn %lld\n",
           m->name, dt_family_name(m->family), m->derived ? ", shape derived from a parameter count" : "",
           (long long)m->n_layer, (long long)m->hidden, (long long)m->n_head, (long long)m->n_kv_head,
           (long long)m->head_dim, (long long)m->ffn);
    printf("             vocab %lld, %lld positions, %s embeddings, norm eps %g", (long long)m->vocab,
           (long long)m->max_pos, m->tied_embeddings ? "tied" : "untied", m->norm_eps);
    if (m->family == DT_FAMILY_LLAMA) {
        printf(", rope theta %g, qkv bias %s, qk norm %s", m->rope_theta, onoff(m->qkv_bias), onoff(m->qk_norm));
        show_rope_scaling(&m->rope_scaling);
    }
    if (m->requested_params > 0)   /* the one parameter-count rule (docs/models.md) */
        printf("\n             %lld parameters as requested: model states use it; the shape has %s\n",
               (long long)m->requested_params, CNT(f, dt_model_params(m)));
    else
        printf("\n             %s parameters\n", CNT(f, dt_model_params(m)));
}

static void show_cluster(const dt_plan *p, fmt *f) {
    const dt_cluster *c = &p->cluster;
    const dt_hardware *h = &c->hw;
    printf("cluster      %lld node(s) x %lld rank(s) = %lld rank(s), device %s, hardware profile \"%s\"\n",
           (long long)c->nodes, (long long)c->gpus_per_node, (long long)(c->nodes * c->gpus_per_node),
           c->device == DT_DEVICE_CUDA ? "cuda" : "cpu", h->name);
    printf("  memory     %s per device (reserve %s), host %s per node, NVMe %s per node\n",
           B(f, h->device_mem_bytes), B(f, h->reserve_bytes), B(f, h->host_mem_bytes), B(f, h->nvme_bytes));
    printf("  compute    peak fp32/bf16/fp16 %.2f/%.2f/%.2f TFLOP/s, achievable %.2f/%.2f/%.2f TFLOP/s\n",
           h->peak_flops[0] * TERA, h->peak_flops[1] * TERA, h->peak_flops[2] * TERA,
           h->achievable_flops[0] * TERA, h->achievable_flops[1] * TERA, h->achievable_flops[2] * TERA);
    printf("  links      memory %.1f GB/s; intra-node bus %.1f GB/s (latency %.1f us); inter-node%s%s%s "
           "%.1f GB/s (%.1f us)\n",
           h->mem_bw * GB_PER_BYTE, h->intra_busbw * GB_PER_BYTE, h->intra_alpha_s * DT_US_PER_S,
           h->interconnect[0] ? " (" : "", h->interconnect, h->interconnect[0] ? ")" : "",
           h->inter_busbw * GB_PER_BYTE, h->inter_alpha_s * DT_US_PER_S);
    printf("             host<->device %.1f GB/s, NVMe %.1f GB/s, CPU AdamW %s params/s per node\n",
           h->h2d_bw * GB_PER_BYTE, h->nvme_bw * GB_PER_BYTE, CNT(f, (int64_t)h->cpu_adam_params_per_s));
}

static void show_parallel(const dt_plan *p, fmt *f) {
    const dt_parallel *q = &p->parallel;
    static const char *const what[] = {"DDP: everything replicated", "optimizer states partitioned",
                                       "optimizer states + gradients partitioned",
                                       "optimizer states + gradients + parameters partitioned"};
    printf("parallel     ZeRO stage %d (%s) over %s %lld\n", q->zero_stage,
           q->zero_stage >= 0 && q->zero_stage <= 3 ? what[q->zero_stage] : "?",
           dt_layout_active(p) ? "the data-parallel group of" : "world size", (long long)dt_layout_dp(p));
    printf("             offload: optimizer %s, parameters %s%s%s%s\n", dt_offload_name(q->offload_optimizer),
           dt_offload_name(q->offload_param), q->nvme_path[0] ? " (NVMe path " : "", q->nvme_path,
           q->nvme_path[0] ? ")" : "");
    printf("             buckets (elements): reduce %s, allgather %s, stage-3 prefetch %s, max live %s, "
           "sub-group %s; overlap_comm %s\n",
           CNT(f, q->reduce_bucket_elems), CNT(f, q->allgather_bucket_elems), CNT(f, q->prefetch_bucket_elems),
           CNT(f, q->max_live_params), CNT(f, q->sub_group_elems), onoff(q->overlap_comm));
    char lay[320];
    dt_p3_describe(p, lay, sizeof lay);
    if (lay[0]) printf("layout       %s; ZeRO over the DP group\n", lay);
}

static void show_training(const dt_plan *p) {
    const dt_batch *b = &p->batch;
    printf("batch        global %lld sequences = micro %lld x accumulation %lld x %s %lld; "
           "seq %lld -> %lld tokens per step\n",
           (long long)b->global_batch, (long long)b->micro_batch, (long long)b->grad_accum,
           dt_layout_active(p) ? "data-parallel" : "world", (long long)dt_layout_dp(p), (long long)b->seq_len, (long long)(b->global_batch * b->seq_len));
    const dt_precision *pr = &p->precision;
    printf("precision    %s: params %s, grads %s, master %s, moments %s, activations %s "
           "(%d / %d / %d bytes per param: param / grad / optimizer)\n",
           dt_precision_preset_name(pr->preset), dt_dtype_name(pr->param), dt_dtype_name(pr->grad),
           pr->has_master ? dt_dtype_name(pr->master) : "none", dt_dtype_name(pr->moment),
           dt_dtype_name(pr->activation), dt_precision_param_bytes(pr), dt_precision_grad_bytes(pr),
           dt_precision_optimizer_bytes(pr));
    if (pr->param == DT_DTYPE_FP16) {
        if (pr->loss_scale > 0)
            printf("             loss scale: static %g\n", pr->loss_scale);
        else
            printf("             loss scale: dynamic from 2^%d, x2 after %d clean steps, hysteresis %d, min %g\n",
                   pr->initial_scale_power, pr->loss_scale_window, pr->hysteresis, pr->min_loss_scale);
    }
    printf("activations  %lld of %lld layers checkpointed (recomputed in backward), %s attention\n",
           (long long)p->activations.ckpt_layers, (long long)p->model.n_layer,
           p->activations.attention == DT_ATTN_FLASH ? "flash" : "materialized");
    if (p->runtime.kind != DT_RUNTIME_DTRUN) {
        const dt_runtime *r = &p->runtime;
        printf("runtime      %s (%s): %s attention%s, dropout %s, logits %s, RMSNorm %s, "
               "activation %s\n",
               dt_runtime_name(r->kind), dt_runtime_code(r->kind), dt_attn_kernel_name(r->attention),
               p->activations.selective ? " with selective recompute" : "", r->dropout ? "on" : "off",
               r->upcast_logits ? "fp32" : "16-bit", r->upcast_norm ? "in fp32" : "as the weights",
               r->unfused_act ? "unfused" : "fused");
        char mg[320];
        dt_mg_describe(p, mg, sizeof mg);
        if (mg[0]) printf("             %s\n", mg);
        if (r->kind == DT_RUNTIME_DEEPSPEED)
            printf("             ZeRO-3: largest layer %s, max_reuse_distance %lld, persistence_threshold %lld, "
                   "fetch overhead %g s per module\n",
                   dt_largest_layer_name(r->largest_layer), (long long)r->max_reuse_distance,
                   (long long)r->persistence_threshold, r->fetch_overhead_s);
        if (r->offload_ratio < 1.0)
            printf("             partial optimizer offload: ratio %g (the first sub-groups stay on the GPU)\n",
                   r->offload_ratio);
        if (r->grads_allreduce || r->comm_dtype_set)
            printf("             gradients: %s%s%s\n", r->grads_allreduce ? "all-reduced (reduce_scatter false)" : "reduce-scattered",
                   r->comm_dtype_set ? ", communicated in " : "", r->comm_dtype_set ? dt_dtype_name(r->comm_dtype) : "");
        if (r->hpz_partition > 1 || r->quantized_weights || r->quantized_gradients)
            printf("             ZeRO++: hpZ %s, qwZ (int8 weight gathers) %s, qgZ (int4 gradients) %s\n",
                   r->hpz_partition > 1 ? "on" : "off", r->quantized_weights ? "on" : "off",
                   r->quantized_gradients ? "on" : "off");
    }
    const dt_optimizer *o = &p->optimizer;
    printf("optimizer    AdamW lr %g, betas (%g, %g), eps %g, weight decay %g, grad clip %s",
           o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->grad_clip > 0 ? "" : "off");
    if (o->grad_clip > 0) printf("%g", o->grad_clip);
    printf("\n");
    const dt_schedule *s = &p->schedule;
    const char *wt = s->warmup_linear ? "linear" : "log";
    switch (s->kind) {
    case DT_SCHED_CONSTANT:
        printf("schedule     constant lr for %lld steps\n", (long long)s->total_steps);
        break;
    case DT_SCHED_WARMUP_LR:
        printf("schedule     WarmupLR: %lld steps; %s warmup over %lld steps from %g to %g, then constant\n",
               (long long)s->total_steps, wt, (long long)s->warmup_steps, s->warmup_min_lr, o->lr);
        break;
    case DT_SCHED_WARMUP_DECAY_LR:
        printf("schedule     WarmupDecayLR: %lld steps; %s warmup over %lld steps from %g to %g, then linear to 0\n",
               (long long)s->total_steps, wt, (long long)s->warmup_steps, s->warmup_min_lr, o->lr);
        break;
    default:
        printf("schedule     WarmupCosineLR: %lld steps; %s warmup over %lld steps from %g x lr, then cosine "
               "to %g x lr\n",
               (long long)s->total_steps, wt, (long long)s->warmup_steps, s->warmup_min_lr, s->cos_min_ratio);
        break;
    }
}

static void show_io(const dt_plan *p) {
    const dt_data *d = &p->data;
    printf("data         %s (%s, %s tokenizer), validation: ", d->train, d->format, d->tokenizer);
    if (d->valid[0])
        printf("%s", d->valid);
    else
        printf("%g%% of the training data", d->valid_fraction * PERCENT);
    if (d->eval_interval > 0)
        printf(", every %lld steps x %lld batches", (long long)d->eval_interval, (long long)d->eval_batches);
    else
        printf(", never evaluated");
    printf(", seed %llu\n", (unsigned long long)d->seed);
    const dt_output *o = &p->output;
    printf("output       %s, checkpoint ", o->dir);
    if (o->save_interval > 0)
        printf("every %lld steps", (long long)o->save_interval);
    else
        printf("at the end only");
    printf(", keep last %lld, init %s\n", (long long)o->keep_last, o->init[0] ? o->init : "random (from the seed)");
}

static void show_prediction(const dt_plan *p, fmt *f) {
    const dt_prediction *pr = &p->prediction;
    if (!pr->valid) {
        printf("prediction   none stored (dtplan solve writes one; dtplan estimate --plan re-evaluates)\n");
        return;
    }
    const dt_mem_breakdown *m = &pr->memory;
    printf("prediction   device memory per rank: total %s = params %s + grads %s + optimizer %s\n",
           B(f, m->total), B(f, m->params), B(f, m->grads), B(f, m->optimizer));
    printf("               + activations %s + buffers %s + reserve %s\n", B(f, m->activations),
           B(f, m->buffers), B(f, m->reserve));
    printf("             host memory per node: total %s = params %s + optimizer %s + buffers %s; NVMe %s\n",
           B(f, m->host_total), B(f, m->host_params), B(f, m->host_optimizer), B(f, m->host_buffers),
           B(f, m->nvme));
    const dt_time_breakdown *t = &pr->time;
    printf("             step %.2f ms: compute %.2f + recompute %.2f + exposed comm %.2f (of %.2f) + offload %.2f "
           "+ optimizer %.2f ms\n",
           t->step_s * DT_MS_PER_S, t->compute_s * DT_MS_PER_S, t->recompute_s * DT_MS_PER_S,
           t->comm_exposed_s * DT_MS_PER_S, t->comm_s * DT_MS_PER_S, t->offload_s * DT_MS_PER_S,
           t->optimizer_s * DT_MS_PER_S);
    printf("             %.0f tokens/s, MFU %.1f%%\n", t->tokens_per_s, t->mfu * PERCENT);
    printf("             communicated per rank per step:");
    for (int c = 0; c < DT_COLL_COUNT; c++)
        printf("%s %s %s", c ? "," : "", dt_collective_name((dt_collective)c), B(f, pr->comm_bytes[c]));
    printf("\n");
}

int dt_cmd_show(int argc, char **argv) {
    const char *path = NULL;
    fmt f = {.u = DT_UNITS_GIB};
    dt_error err = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--units")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dtplan: show: --units needs GiB or GB\n");
                return 2;
            }
            if (dt_parse_units(argv[++i], &f.u, &err)) {
                fprintf(stderr, "dtplan: show: %s\n", err.msg);
                return 2;
            }
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "dtplan: show: unknown option '%s' (see dtplan show --help)\n", argv[i]);
            return 2;
        } else if (path) {
            fprintf(stderr, "dtplan: show: one plan at a time ('%s' and '%s')\n", path, argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        fprintf(stderr, "dtplan: show: no plan given (usage: dtplan show plan.json)\n");
        return 2;
    }
    dt_plan p;
    if (dt_plan_load(path, &p, &err)) {
        fprintf(stderr, "dtplan: %s\n", err.msg);
        return 2; /* a plan that cannot be read is bad input, whatever the reason */
    }
    dt_ftplan ft;   /* the method's settings against the model (common/ cannot check them) */
    if (dt_ftplan_active(&p) && dt_ftplan_of(&p, &ft, &err)) {
        fprintf(stderr, "dtplan: %s: %s\n", path, err.msg);
        return 2;
    }
    printf("plan         %s (%s)\n", path, DT_PLAN_FORMAT);
    show_model(&p, &f);
    show_cluster(&p, &f);
    show_parallel(&p, &f);
    show_training(&p);
    show_io(&p);
    dt_ft_print_summary(&p, "finetune     ");
    dt_vlm_print_summary(&p, "vision       ");
    dt_obj_print_summary(&p, "objective    ");
    show_prediction(&p, &f);
    dt_ft_print_terms(&p, f.u);   /* a fine-tuning plan: every term its method changes */
    dt_vlm_print_terms(&p, f.u);  /* a vision-language plan: the tower, projector and LLM rows */
    dt_obj_print_terms(&p, f.u);  /* an objective: every model's rows, the generation phase */
    return 0;
}
