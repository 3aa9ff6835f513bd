/* cmd_solve.c — `dtplan solve`: the fastest (stage, offload, micro-batch,
 * accumulation, checkpointed layers) under a memory limit, by GLPK (dt_solve.h),
 * printed with its memory breakdown and predicted speed, the best alternative of
 * every other stage and why it lost; -o writes the plan. docs/solver.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "dt_cli.h"
#include "dt_parallel3d.h"
#include "dt_clock.h"
#include "dt_cli_ft.h"
#include "dt_cli_obj.h"
#include "dt_model.h"
#include "dt_memory.h"
#include "dt_report_charts.h"
#include "dt_solve.h"
#include "dt_timemodel.h"
#include "dt_units.h"

/* Default global batch from the users' runbooks' DeepSpeed memory settings:
 * per-device batch 1 with gradient accumulation 16, times the world size
 * (docs/solver.md). */
#define DT_SOLVE_DEFAULT_PER_DEVICE 1
#define DT_SOLVE_DEFAULT_ACCUM 16
#define DT_SOLVE_DEFAULT_HARDWARE "H100-SXM-80GB"
/* Sanity bounds on the integer options: far beyond any real run, small enough that
 * the byte and FLOP arithmetic cannot overflow (the same as dtplan estimate's). */
#define SOLVE_MAX_GPUS (INT64_C(1) << 20)
#define SOLVE_MAX_SEQ (INT64_C(1) << 24)
#define SOLVE_MAX_BATCH (INT64_C(1) << 40)
/* the ZeRO stages Megatron-LM has: 0 (DDP) and 1 (--use-distributed-optimizer) */
#define SOLVE_MEGATRON_STAGES 0x3u
/* the ZeRO stages dtrun's vision-language trainer runs: 0-2 (engine/run/vlm_train.c) */
#define SOLVE_DTRUN_VLM_STAGES 0x7u
#define SOLVE_MAX_STEPS (INT64_C(1) << 40)

static void usage(FILE *f) {
    fprintf(f,
            "usage: dtplan solve --mem LIMIT (--model NAME|config.json | --params N) [options]\n"
            "  --params N            e.g. 32B: a standard decoder shape is derived; model states use exactly N,\n"
            "                        the shape's own count activations, FLOPs, communication (as estimate)\n"
            "  --mem 80G             memory per GPU (80G = 80 GiB, 80GB = 80e9 bytes; a unit is required,\n"
            "                        at most the profile's device memory)\n"
            "  --gpus N              total ranks (default 1); --nodes N (default 1, must divide --gpus)\n"
            "  --global-batch N      sequences per optimizer step (default %d x %d x world)\n"
            "  --seq N               tokens per sequence (default min(1024, the model's positions))\n"
            "  --hardware NAME|PATH  profile (default %s); --interconnect 100Gb (inter-node link)\n"
            "  --host-mem SIZE       host memory per node (default: the profile's)\n"
            "  --nvme SIZE           NVMe capacity per node (default: the profile's)\n"
            "  --nvme-path DIR       directory for NVMe swap files: NVMe offload (stage 3) is a candidate\n"
            "                        only with it\n"
            "  --precision P         mixed-bf16 (default) | mixed-fp16 | pure-bf16 | fp32\n"
            "  --stages 0,1,2,3      stages the solver may choose (comma-separated, each once); --no-offload;\n"
            "                        --no-overlap\n"
            "  --units GiB|GB        display unit; -o plan.json writes the chosen plan\n"
            "  --runtime R           dtrun (default) | deepspeed | fsdp | megatron: what runs the plan\n"
            "                        (docs/memory-model.md \"Runtime profiles\", docs/parallelism.md \"Runtimes\");\n"
            "                        deepspeed / fsdp / megatron may also choose selective recompute; megatron\n"
            "                        weighs its TP x CP x PP layouts on one node too, stages 0-1 only\n"
            "  --attention A         dtrun: flash (default) | materialized; deepspeed / fsdp: sdpa (default) |\n"
            "                        flash | eager\n"
            "  --sub-group-size N    DeepSpeed's sub_group_size, elements per optimizer tile (default 1e9); with\n"
            "                        NVMe optimizer offload each of the 4 host swap buffers holds one tile\n"
            "  --layouts             weigh tensor / context / pipeline layouts (tp, cp, pp, virtual stages) next\n"
            "                        to DP x ZeRO: the default on GPUs over several nodes, and on CPU ranks\n"
            "                        under runtime dtrun, whose tp only is weighed there;\n"
            "                        --no-layouts turns it off (docs/parallelism.md)\n"
            "  --plot FILE.png|.svg  every evaluated configuration: peak memory vs step time\n"
            "training settings carried by the plan (no effect on memory or time):\n"
            "  --data PATH           training text directory, llm.c shards, or dtrun prepare's output (its shards,\n"
            "                        vocabulary checked) (default /usr/share/games/fortunes)\n"
            "  --steps N             optimizer steps; --warmup N; --lr X (peak, default 2e-4)\n"
            "  --schedule S          constant | WarmupLR (default) | WarmupDecayLR | WarmupCosineLR\n"
            "  --out DIR             dtrun output directory; --eval-interval N; --save-interval N\n"
            "training configs (docs/configs.md):\n"
            "  --config FILE         a LLaMA-Factory / HF TrainingArguments / runbook YAML (or JSON): its model,\n"
            "                        batch, sequence, precision and schedule as the options above (the command\n"
            "                        line's win); its own configuration is shown next to solve's choice\n"
            "  --config-format F     llamafactory | hf | runbook (default: detected)\n"
            "  --lr-scaling S        linear | sqrt | none (default): the learning rate the plan keeps when its\n"
            "                        global batch differs from the config's\n",
            DT_SOLVE_DEFAULT_PER_DEVICE, DT_SOLVE_DEFAULT_ACCUM, DT_SOLVE_DEFAULT_HARDWARE);
    dt_ft_usage(f);
    dt_obj_usage(f);
    fprintf(f, "solve keeps the method; when nothing fits, its line names the first of lora, qlora that would\n");
}

/* "2,3": each item one stage 0..3, once, no empty items (no "1," or ",2" or "2,,3"). */
static int parse_stages(const char *s, unsigned *mask, dt_error *err) {
    static const char hint[] = "write a comma-separated list of ZeRO stages 0..3, each once, e.g. --stages 2,3";
    *mask = 0;
    if (!*s) return dt_errorf(err, DT_EINVAL, "--stages: empty list; %s", hint);
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0)
            return dt_errorf(err, DT_EINVAL, "--stages '%s': an empty item %s; %s", s,
                             !comma ? "after the last comma" : p == s ? "before the first comma" : "between two commas",
                             hint);
        if (len != 1 || *p < '0' || *p > '3')
            return dt_errorf(err, DT_EINVAL, "--stages '%s': '%.*s' is not a ZeRO stage 0..3; %s", s, (int)len, p, hint);
        unsigned bit = 1u << (*p - '0');
        if (*mask & bit) return dt_errorf(err, DT_EINVAL, "--stages '%s': stage %c is listed twice; %s", s, *p, hint);
        *mask |= bit;
        if (!comma) return DT_OK;
        p = comma + 1;
    }
}

static const char *stage_name(int s) {
    static const char *const n[4] = {"DDP (stage 0)", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    return n[s];
}

static void print_config(const dt_solve_choice *c, int64_t L) {
    printf("%s, offload optimizer %s, offload param %s, micro-batch %lld x accumulation %lld, "
           "%lld/%lld layers checkpointed",
           stage_name(c->zero_stage), dt_offload_name(c->offload_optimizer),
           dt_offload_name(c->offload_param), (long long)c->micro_batch, (long long)c->grad_accum,
           (long long)c->ckpt_layers, (long long)L);
    if (c->selective) printf(", selective attention recompute");
    const dt_layout *l = &c->layout;
    if (l->tp > 1 || l->cp > 1 || l->pp > 1)
        printf(", layout TP %lld%s x CP %lld x PP %lld%s (runtime %s)", (long long)l->tp, l->sp ? " + SP" : "",
               (long long)l->cp, (long long)l->pp, l->vpp > 1 ? " interleaved" : "", dt_runtime_name(c->runtime));
    if (l->vpp > 1) printf(", %lld chunks per rank", (long long)l->vpp);
}

/* One side of the layout verdict: the choice, its step and what it is made of, or what it needs. */
static void print_side(const char *label, const dt_solve_choice *c, const dt_solve_request *rq, dt_units u) {
    char b[2][48];
    if (!c->valid) {
        printf("  %-15s no valid configuration\n", label);
        return;
    }
    printf("  %-15s ", label);
    print_config(c, rq->base.model.n_layer);
    if (c->fits)
        printf("\n                  step %.4g s = compute %.4g + recompute %.4g + exposed comm %.4g + optimizer %.4g; "
               "%s per GPU\n",
               c->time.step_s, c->time.compute_s, c->time.recompute_s, c->time.comm_exposed_s, c->time.optimizer_s,
               dt_format_bytes(c->mem.total, u, b[0], 48));
    else
        printf("\n                  does not fit: needs %s per GPU at least (limit %s)\n",
               dt_format_bytes(c->mem.total, u, b[0], 48), dt_format_bytes(rq->mem_limit_bytes, u, b[1], 48));
}

/* dtrun on CPU ranks: the tensor-parallel degrees its engine cannot run, and why. */
static void print_dtrun_tp_refusals(const dt_solve_request *rq) {
    const dt_plan *b = &rq->base;
    if (rq->layout_runtime != DT_RUNTIME_DTRUN || b->cluster.device != DT_DEVICE_CPU) return;
    char why[192];
    for (int64_t tp = 2; tp <= b->cluster.gpus_per_node; tp++)
        if (dt_p3_dtrun_tp_refusal(b, tp, why, sizeof why)) printf("  tp %lld not weighed: %s\n", (long long)tp, why);
}

/* Layouts (TP / CP / PP) weighed against DP x ZeRO alone: both sides and why one won. */
static void print_layout_verdict(const dt_solve_request *rq, const dt_solve_result *r, dt_units u) {
    if (!rq->layouts) return;
    const dt_solve_choice *d = &r->best_dp, *l = &r->best_layout;
    printf("layouts weighed against DP x ZeRO (layouts planned for runtime %s):\n", dt_runtime_name(rq->layout_runtime));
    print_dtrun_tp_refusals(rq);
    print_side("DP x ZeRO:", d, rq, u);
    print_side("with a layout:", l, rq, u);
    const int dl = r->best.layout.tp > 1 || r->best.layout.cp > 1 || r->best.layout.pp > 1;
    const dt_solve_choice *won = dl ? l : d, *lost = dl ? d : l;
    printf("  why: ");
    if (!lost->valid)
        printf("%s is the only kind of candidate here\n", dl ? "a layout" : "DP x ZeRO");
    else if (!lost->fits)
        printf("%s fits and %s does not\n", dl ? "the layout" : "DP x ZeRO", dl ? "DP x ZeRO" : "any layout");
    else
        printf("%s is faster: the other step takes %.1f%% longer (exposed communication %.4g s vs %.4g s, compute + "
               "recompute %.4g s vs %.4g s)\n",
               dl ? "the layout" : "DP x ZeRO", 100.0 * (lost->step_s / won->step_s - 1.0), won->time.comm_exposed_s,
               lost->time.comm_exposed_s, won->time.compute_s + won->time.recompute_s,
               lost->time.compute_s + lost->time.recompute_s);
}

/* A GPU request the dtrun runtime cannot fit may fit as DeepSpeed runs it: DeepSpeed keeps
 * an offloaded optimizer's gradients in host memory, dtrun's engine keeps its gradient
 * partition on the device (docs/memory-model.md "Runtime profiles"). Writes into buf what
 * fits under --runtime deepspeed, for users who will run that ("" when nothing does or
 * the request is not a dtrun GPU one); the infeasible line ends with it. */
static void deepspeed_runtime_hint(const dt_solve_request *rq, char *buf, size_t n) {
    buf[0] = '\0';
    if (rq->base.runtime.kind != DT_RUNTIME_DTRUN || rq->base.cluster.device != DT_DEVICE_CUDA) return;
    dt_solve_request *alt = malloc(sizeof *alt);
    dt_solve_result *r = malloc(sizeof *r);
    dt_error err;
    if (alt && r) {
        *alt = *rq;
        dt_plan_set_runtime(&alt->base, DT_RUNTIME_DEEPSPEED);
        if (dt_solve(alt, r, &err) == DT_OK) {
            const dt_solve_choice *c = &r->best;
            snprintf(buf, n,
                     "; as DeepSpeed runs it (--runtime deepspeed: an offloaded optimizer's gradients stay in host "
                     "memory) it fits: %s, offload optimizer %s, param %s, micro-batch %lld x accumulation %lld, "
                     "%.2f GiB per GPU",
                     stage_name(c->zero_stage), dt_offload_name(c->offload_optimizer),
                     dt_offload_name(c->offload_param), (long long)c->micro_batch, (long long)c->grad_accum,
                     (double)c->mem.total / 1073741824.0);
        }
    }
    free(alt);
    free(r);
}

static void print_result(const dt_solve_request *rq, const dt_solve_result *r, dt_units u,
                         double solve_ms) {
    const dt_plan *p = &r->plan;
    const dt_mem_breakdown *m = &p->prediction.memory;
    const dt_time_breakdown *t = &p->prediction.time;
    char b[8][48];
    int64_t L = p->model.n_layer;
    const char *dev = p->cluster.device == DT_DEVICE_CPU ? "rank" : "GPU";
    printf("chosen: ");
    print_config(&r->best, L);
    char lay[320];
    dt_p3_describe(p, lay, sizeof lay);
    if (lay[0]) printf("\n  layout: %s", lay);
    printf("\n  per %s: params %s, grads %s, optimizer %s, activations %s, buffers %s, reserve %s\n", dev,
           dt_format_bytes(m->params, u, b[0], 48), dt_format_bytes(m->grads, u, b[1], 48),
           dt_format_bytes(m->optimizer, u, b[2], 48), dt_format_bytes(m->activations, u, b[3], 48),
           dt_format_bytes(m->buffers, u, b[4], 48), dt_format_bytes(m->reserve, u, b[5], 48));
    printf("  per %s total %s of %s;  host per node %s of %s;  NVMe %s of %s\n", dev,
           dt_format_bytes(m->total, u, b[0], 48), dt_format_bytes(rq->mem_limit_bytes, u, b[1], 48),
           dt_format_bytes(dt_solve_node_host_bytes(p, m), u, b[2], 48),
           dt_format_bytes(rq->host_limit_bytes, u, b[3], 48),
           dt_format_bytes(m->nvme, u, b[4], 48), dt_format_bytes(rq->nvme_limit_bytes, u, b[5], 48));
    printf("  step %.4g s = compute %.4g + recompute %.4g + exposed comm %.4g (of %.4g) + offload %.4g + "
           "optimizer %.4g\n",
           t->step_s, t->compute_s, t->recompute_s, t->comm_exposed_s, t->comm_s, t->offload_s,
           t->optimizer_s);
    printf("  %.0f tokens/s, MFU %.1f%% (of %s peak %s FLOP/s)\n", t->tokens_per_s, 100.0 * t->mfu,
           p->cluster.hw.name, dt_dtype_name(p->precision.param));
    printf("  bytes per rank per step:");
    int any = 0;
    for (int c = 0; c < DT_COLL_COUNT; c++)
        if (p->prediction.comm_bytes[c]) {
            printf("%s %s %s", any ? "," : "", dt_collective_name((dt_collective)c),
                   dt_format_bytes(p->prediction.comm_bytes[c], u, b[0], 48));
            any = 1;
        }
    if (!any) printf(" none (%s)", p->parallel.world_size == 1 ? "one rank" : "no collectives");
    printf("\nalternatives (best of each other stage):\n");
    for (int s = 0; s < 4; s++) {
        const dt_solve_choice *c = &r->per_stage[s];
        if (s == r->best.zero_stage) continue;
        if (!((rq->stage_mask >> s) & 1u)) {
            printf("  %-14s %s\n", stage_name(s),
                   rq->base.runtime.kind == DT_RUNTIME_MEGATRON && s >= 2 ? "not in Megatron-LM"
                   : dt_vlm_active(&rq->base.vlm) && rq->base.runtime.kind == DT_RUNTIME_DTRUN &&
                           rq->base.cluster.device == DT_DEVICE_CPU && s == 3
                       ? "not in dtrun's VLM trainer yet"
                       : "not allowed (--stages)");
            continue;
        }
        if (!c->valid) {
            printf("  %-14s no valid configuration\n", stage_name(s));
            continue;
        }
        if (c->fits && c->step_s <= r->best.step_s * (1.0 + DT_SOLVE_TIME_TIE_REL)) {
            /* equal step time: the solver's tie-break minimises device memory (docs/solver.md) */
            if (c->mem.total > r->best.mem.total)
                printf("  %-14s tied on time (%.4g s/step), lost the tie-break on memory: +%s per %s (%s), with ",
                       stage_name(s), c->step_s, dt_format_bytes(c->mem.total - r->best.mem.total, u, b[0], 48),
                       dev, dt_format_bytes(c->mem.total, u, b[1], 48));
            else
                printf("  %-14s tied on time (%.4g s/step) and memory (%s per %s): equally good, with ",
                       stage_name(s), c->step_s, dt_format_bytes(c->mem.total, u, b[0], 48), dev);
        } else if (c->fits) {
            printf("  %-14s lost on time: %.4g s/step (+%.1f%%) with ", stage_name(s), c->step_s,
                   100.0 * (c->step_s / r->best.step_s - 1.0));
        } else if (c->mem.total > rq->mem_limit_bytes) {
            printf("  %-14s lost on memory: needs %s per %s at least, with ", stage_name(s),
                   dt_format_bytes(c->mem.total, u, b[0], 48), dev);
        } else {
            printf("  %-14s lost on memory: host %s per node / NVMe %s at least, with ", stage_name(s),
                   dt_format_bytes(c->mem.host_total, u, b[0], 48), dt_format_bytes(c->mem.nvme, u, b[1], 48));
        }
        print_config(c, L);
        printf("\n");
    }
    print_layout_verdict(rq, r, u);
    printf("solver: %d candidates, MILP %d columns x %d rows, %d GLPK solves, %.1f ms\n", r->n_candidates,
           r->n_columns, r->n_rows, r->milp_solves, solve_ms);
}

/* Copies a string option into a fixed plan field, refusing what would not fit. */
static int set_path(char *dst, size_t n, const char *v, const char *what, dt_error *err) {
    if (strlen(v) >= n) return dt_errorf(err, DT_EINVAL, "%s: path longer than %zu bytes", what, n - 1);
    snprintf(dst, n, "%s", v);
    return DT_OK;
}

/* --data/--steps/--lr/--warmup/--schedule/--out/--eval-interval/--save-interval:
 * the training settings dtrun reads from the plan. */
static int apply_training_options(dt_plan *b, const char *data, const char *steps, const char *lr,
                                  const char *warmup, const char *sched, const char *outdir,
                                  const char *eval, const char *save, dt_error *err) {
    int64_t v;
    if (data && set_path(b->data.train, sizeof b->data.train, data, "--data", err)) return err->code;
    if (outdir && set_path(b->output.dir, sizeof b->output.dir, outdir, "--out", err)) return err->code;
    if (steps) {
        if (dt_parse_int(steps, "--steps", 1, SOLVE_MAX_STEPS, 1000, &v, err)) return err->code;
        b->schedule.total_steps = v;
        if (b->schedule.warmup_steps > v) b->schedule.warmup_steps = v / 10;
    }
    if (warmup) {
        if (dt_parse_int(warmup, "--warmup", 0, SOLVE_MAX_STEPS, 100, &v, err)) return err->code;
        b->schedule.warmup_steps = v;
    }
    if (eval) {
        if (dt_parse_int(eval, "--eval-interval", 0, SOLVE_MAX_STEPS, 50, &v, err)) return err->code;
        b->data.eval_interval = v;
    }
    if (save) {
        if (dt_parse_int(save, "--save-interval", 0, SOLVE_MAX_STEPS, 100, &v, err)) return err->code;
        b->output.save_interval = v;
    }
    if (lr) {
        char *end = NULL;
        double x = strtod(lr, &end);
        if (!end || *end || !(x > 0) || x > 1)
            return dt_errorf(err, DT_EINVAL, "--lr: '%s' is not a learning rate in (0, 1] (e.g. --lr 3e-4)", lr);
        b->optimizer.lr = x;
    }
    if (sched) {
        static const char *const names[] = {"constant", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
        int k = -1;
        for (int i = 0; i < 4; i++)
            if (!strcasecmp(sched, names[i])) k = i;
        if (k < 0)
            return dt_errorf(err, DT_EINVAL,
                             "--schedule: unknown '%s' (choices: constant, WarmupLR, WarmupDecayLR, WarmupCosineLR)",
                             sched);
        b->schedule.kind = (dt_sched_kind)k;
    }
    if (b->schedule.warmup_steps > b->schedule.total_steps)
        return dt_errorf(err, DT_EINVAL, "--warmup %lld exceeds --steps %lld (e.g. --warmup %lld)",
                         (long long)b->schedule.warmup_steps, (long long)b->schedule.total_steps,
                         (long long)(b->schedule.total_steps / 10));
    return DT_OK;
}

/* --plot: every evaluated (candidate, K) point, the chosen one highlighted. */
typedef struct {
    dt_chart_candidate *c;
    int n, cap, chosen;
    const dt_solve_choice *best;
} plot_points;

static int collect_point(void *ud, const dt_solve_choice *ch, dt_error *err) {
    plot_points *pp = ud;
    if (pp->n == pp->cap) {
        int cap = pp->cap ? 2 * pp->cap : 1024;
        dt_chart_candidate *nc = realloc(pp->c, (size_t)cap * sizeof *nc);
        if (!nc) return dt_errorf(err, DT_ENOMEM, "solve --plot: out of memory");
        pp->c = nc, pp->cap = cap;
    }
    const dt_solve_choice *b = pp->best;
    if (ch->zero_stage == b->zero_stage && ch->offload_optimizer == b->offload_optimizer &&
        ch->offload_param == b->offload_param && ch->micro_batch == b->micro_batch && ch->ckpt_layers == b->ckpt_layers &&
        ch->selective == b->selective)
        pp->chosen = pp->n;
    pp->c[pp->n++] = (dt_chart_candidate){ch->step_s, ch->mem.total, ch->fits};
    return DT_OK;
}

static int plot_candidates(const dt_solve_request *rq, const dt_solve_result *r, dt_units u, const char *path,
                           dt_error *err) {
    plot_points pp = {NULL, 0, 0, -1, &r->best};
    int rc = dt_solve_candidates(rq, collect_point, &pp, err);
    if (!rc) {
        char title[192], label[128], cnt[32];
        snprintf(title, sizeof title, "%s (%s params), %lld GPU(s): %d candidates x 0..%lld checkpointed layers",
                 rq->base.model.name,
                 /* the count model states use: as requested for a derived shape (docs/models.md) */
                 dt_format_count(rq->base.model.requested_params > 0 ? rq->base.model.requested_params
                                                                     : dt_model_params(&rq->base.model),
                                 cnt, sizeof cnt),
                 (long long)rq->base.parallel.world_size, r->n_candidates, (long long)rq->base.model.n_layer);
        snprintf(label, sizeof label, "chosen: %s, micro %lld, %lld ckpt", stage_name(r->best.zero_stage),
                 (long long)r->best.micro_batch, (long long)r->best.ckpt_layers);
        rc = dt_chart_candidates(path, title, pp.n, pp.c, pp.chosen, label, rq->mem_limit_bytes, u, err);
    }
    free(pp.c);
    return rc;
}

/* The options that take a value, with an example that works (for the messages);
 * k_opts is indexed by this enum. */
enum {
    O_MEM, O_MODEL, O_PARAMS, O_GPUS, O_NODES, O_GBATCH, O_SEQ, O_HARDWARE, O_LINK, O_HOST, O_NVME, O_PREC,
    O_STAGES, O_OUT_PLAN, O_UNITS, O_DATA, O_STEPS, O_LR, O_WARMUP, O_SCHED, O_OUTDIR, O_EVAL, O_SAVE, O_PLOT,
    O_RUNTIME, O_ATTENTION, O_SUB_GROUP, O_NVME_PATH
};
typedef struct {
    const char *name, *example;
} solve_opt;
static const solve_opt k_opts[] = {
    {"--mem", "80G"}, {"--model", "gpt2"}, {"--params", "32B"}, {"--gpus", "8"}, {"--nodes", "2"},
    {"--global-batch", "256"}, {"--seq", "1024"}, {"--hardware", DT_SOLVE_DEFAULT_HARDWARE},
    {"--interconnect", "100Gb"}, {"--host-mem", "512G"}, {"--nvme", "2T"}, {"--precision", "mixed-bf16"},
    {"--stages", "2,3"}, {"-o", "plan.json"}, {"--units", "GiB"}, {"--data", "/usr/share/games/fortunes"},
    {"--steps", "1000"}, {"--lr", "3e-4"}, {"--warmup", "100"}, {"--schedule", "WarmupLR"}, {"--out", "run/"},
    {"--eval-interval", "50"}, {"--save-interval", "100"}, {"--plot", "candidates.png"},
    {"--runtime", "deepspeed"}, {"--attention", "sdpa"}, {"--sub-group-size", "1e8"},
    {"--nvme-path", "/local_nvme"},
};
#define N_OPTS ((int)(sizeof k_opts / sizeof k_opts[0]))
_Static_assert(sizeof k_opts / sizeof k_opts[0] == O_NVME_PATH + 1, "k_opts follows the O_ enum");

/* Nothing fits the user's method: the first cheaper method that would (docs/finetune.md
 * "solve"): full or freeze -> lora -> qlora, each with its defaults (rank 8 on every linear;
 * nf4 with double quantisation), and the command that plans it. "" when none does. */
static void cheaper_method_hint(const dt_solve_request *rq, int argc, char **argv, char *buf, size_t n) {
    static const dt_ft_method order[] = {DT_FT_LORA, DT_FT_QLORA};
    buf[0] = '\0';
    dt_solve_request *alt = malloc(sizeof *alt);
    dt_solve_result *r = malloc(sizeof *r);
    dt_error err;
    for (size_t i = 0; alt && r && i < sizeof order / sizeof order[0]; i++) {
        if (order[i] <= rq->base.finetune.method) continue;
        *alt = *rq;
        dt_finetune_defaults(order[i], &alt->base.finetune);
        if (dt_solve(alt, r, &err) != DT_OK) continue;
        const dt_solve_choice *c = &r->best;
        size_t k = (size_t)snprintf(buf, n, "; --finetune %s fits at micro-batch %lld x accumulation %lld (%s, %.2f GiB "
                                    "per GPU, %.3g s/step): dtplan solve", dt_ft_method_name(order[i]),
                                    (long long)c->micro_batch, (long long)c->grad_accum, stage_name(c->zero_stage),
                                    (double)c->mem.total / 1073741824.0, c->step_s);
        for (int a = 1; a < argc && k < n; a++) {   /* the user's command without its fine-tuning method's options */
            dt_ft_args skip;
            memset(&skip, 0, sizeof skip);
            int j = a;
            /* the vision options stay: the hint plans the same stage and images (docs/vlm.md) */
            if (dt_ft_args_take(&skip, argc, argv, &j, "solve") == 1 && !skip.v[FT_VLM_STAGE] && !skip.v[FT_IMAGES]) {
                a = j;
                continue;
            }
            k += (size_t)snprintf(buf + k, n - k, " %s", argv[a]);
        }
        if (k < n) snprintf(buf + k, n - k, " --finetune %s", dt_ft_method_name(order[i]));
        break;
    }
    free(alt);
    free(r);
}

/* grpo / ppo without --gen-batch: when nothing fits with the rank's whole rollout decoded at
 * once, the largest generation micro-batch (a power of two, GEN_BATCH_MAX down to 1) with which
 * a plan fits: fewer sequences in flight shrink the KV cache and the sampler's logits at the
 * price of more decoding rounds (docs/objectives.md "solve and simulate"). Returns dt_solve's
 * code; *picked the micro-batch chosen (0: none tried). */
#define GEN_BATCH_MAX 64
static int solve_generation_batch(dt_solve_request *rq, dt_solve_result *r, int rc, int64_t *picked, dt_error *err) {
    *picked = 0;
    dt_objective *o = &rq->base.objective;
    if (rc != DT_EINFEASIBLE || !dt_obj_generates(o->kind) || o->gen_batch) return rc;
    for (int64_t s = GEN_BATCH_MAX; s >= 1; s /= 2) {
        o->gen_batch = s;
        dt_error e = {0};
        if (dt_solve(rq, r, &e) == DT_OK) return *picked = s, DT_OK;
    }
    o->gen_batch = 0;
    return rc == DT_OK ? DT_OK : err->code;
}

int dt_cmd_solve(int argc, char **argv) {
    const char *v[N_OPTS] = {0};   /* values, indexed like k_opts */
    int no_offload = 0, no_overlap = 0, no_layouts = 0, layouts = 0;
    dt_ft_args fta;
    memset(&fta, 0, sizeof fta);
    dt_obj_args oba;
    memset(&oba, 0, sizeof oba);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-offload")) { no_offload = 1; continue; }
        if (!strcmp(a, "--no-overlap")) { no_overlap = 1; continue; }
        if (!strcmp(a, "--no-layouts")) { no_layouts = 1; continue; }
        if (!strcmp(a, "--layouts")) { layouts = 1; continue; }
        int k = -1;
        for (int j = 0; j < N_OPTS; j++)
            if (!strcmp(a, k_opts[j].name)) k = j;
        if (k < 0) {
            const int t = dt_ft_args_take(&fta, argc, argv, &i, "solve");
            if (t == 2) return 2;
            if (t) continue;
            const int o = dt_obj_args_take(&oba, argc, argv, &i, "solve");
            if (o == 2) return 2;
            if (o) continue;
        }
        if (k < 0) return dt_cli_fail(2, "solve: unknown option '%s' (see dtplan solve --help)", a);
        if (i + 1 >= argc)
            return dt_cli_fail(2, "solve: %s needs a value (e.g. %s %s)", a, a, k_opts[k].example);
        if (v[k]) return dt_cli_fail(2, "solve: %s given twice", a);
        v[k] = argv[++i];
        if (!*v[k]) return dt_cli_fail(2, "solve: %s: empty value (e.g. %s %s)", a, a, k_opts[k].example);
    }
    const char *mem = v[O_MEM], *model = v[O_MODEL], *params = v[O_PARAMS], *gbatch = v[O_GBATCH];
    const char *gpus = v[O_GPUS] ? v[O_GPUS] : "1", *nodes = v[O_NODES] ? v[O_NODES] : "1", *seq = v[O_SEQ];
    const char *hardware = v[O_HARDWARE] ? v[O_HARDWARE] : DT_SOLVE_DEFAULT_HARDWARE, *link = v[O_LINK];
    const char *host = v[O_HOST], *nvme = v[O_NVME], *prec = v[O_PREC], *outp = v[O_OUT_PLAN], *plot = v[O_PLOT];
    /* Megatron-LM's data parallelism: DDP or its distributed optimizer (ZeRO-1) */
    const int mg_rt = v[O_RUNTIME] && !strcmp(v[O_RUNTIME], "megatron");
    const char *stages = v[O_STAGES] ? v[O_STAGES] : mg_rt ? "0,1" : "0,1,2,3", *units = v[O_UNITS] ? v[O_UNITS] : "GiB";
    dt_error err;
    dt_error_clear(&err);
    if (!mem) return dt_cli_fail(2, "solve: --mem is required (e.g. --mem 80G)");
    if (!model == !params)
        return dt_cli_fail(2, "solve: give exactly one of --model NAME and --params N (e.g. --params 32B)");
    if (plot && dt_cli_check_plot_name("--plot", plot, "candidates.png", &err)) return dt_cli_fail(2, "%s", err.msg);

    dt_solve_request rq;
    memset(&rq, 0, sizeof rq);
    dt_plan *b = &rq.base;
    dt_plan_defaults(b);
    int64_t n_gpus, n_nodes, n;
    dt_units u;
    if (model ? dt_model_resolve_vlm(model, &b->model, &b->vlm, &err) : 0) return dt_cli_fail(2, "%s", err.msg);
    if (params && (dt_parse_count(params, "--params", &n, &err) || dt_model_for_params(n, &b->model, &err)))
        return dt_cli_fail(2, "%s", err.msg);
    dt_plan_drop_demo_data(b);   /* a real vocabulary reads no byte-level demo text: --data names the data */
    if (dt_parse_bytes(mem, "--mem", &rq.mem_limit_bytes, &err) ||
        dt_parse_int(gpus, "--gpus", 1, SOLVE_MAX_GPUS, 8, &n_gpus, &err) ||
        dt_parse_int(nodes, "--nodes", 1, SOLVE_MAX_GPUS, 2, &n_nodes, &err) || dt_parse_units(units, &u, &err) ||
        parse_stages(stages, &rq.stage_mask, &err))
        return dt_cli_fail(2, "%s", err.msg);
    if (mg_rt && (rq.stage_mask & ~SOLVE_MEGATRON_STAGES))
        return dt_cli_fail(2, "solve: --stages %s with --runtime megatron: Megatron-LM has no ZeRO-2 or ZeRO-3 (its "
                              "data parallelism is DDP, stage 0, or the distributed optimizer, stage 1); use --stages "
                              "0,1, or --runtime deepspeed / fsdp", stages);
    if (n_gpus % n_nodes)
        return dt_cli_fail(2, "solve: --gpus %lld is not divisible by --nodes %lld: every node runs the same number "
                              "of GPUs", (long long)n_gpus, (long long)n_nodes);
    if (dt_hardware_load(hardware, link, &b->cluster.hw, &err) ||
        dt_hardware_check_mem_limit(&b->cluster.hw, rq.mem_limit_bytes, "--mem", mem, 1, &err))
        return dt_cli_fail(2, "%s", err.msg);
    b->cluster.device = b->cluster.hw.device;
    if (v[O_RUNTIME]) {
        dt_runtime_kind kind;
        if (dt_runtime_parse(v[O_RUNTIME], &kind, &err)) return dt_cli_fail(2, "%s", err.msg);
        if (kind == DT_RUNTIME_MEGATRON && b->cluster.device != DT_DEVICE_CUDA)
            return dt_cli_fail(2, "solve: --runtime megatron: hardware %s is a CPU profile and Megatron-LM runs on CUDA "
                                  "GPUs only (use a GPU --hardware such as %s, or --runtime dtrun)",
                               b->cluster.hw.name, DT_SOLVE_DEFAULT_HARDWARE);
        if (kind != DT_RUNTIME_DTRUN && b->cluster.device != DT_DEVICE_CUDA &&
            dt_hardware_hf_runtime_bytes(&b->cluster.hw, kind == DT_RUNTIME_DEEPSPEED, -1) <= 0)
            return dt_cli_fail(2, "solve: --runtime %s on CPU ranks needs the CPU profile's measured %s; hardware %s "
                                  "has none (bench/validate_runtimes.sh measures it; or use a GPU --hardware such as "
                                  "%s, or --runtime dtrun)",
                               v[O_RUNTIME], kind == DT_RUNTIME_DEEPSPEED ? "deepspeed_runtime_bytes" : "torch_runtime_bytes",
                               b->cluster.hw.name, DT_SOLVE_DEFAULT_HARDWARE);
        dt_plan_set_runtime(b, kind);
    }
    if (v[O_ATTENTION] && dt_plan_set_attention(b, v[O_ATTENTION], "--attention", &err))
        return dt_cli_fail(2, "solve: %s", err.msg);
    b->cluster.nodes = n_nodes;
    b->cluster.gpus_per_node = n_gpus / n_nodes;
    b->parallel.world_size = n_gpus;
    b->parallel.overlap_comm = !no_overlap;
    if (v[O_SUB_GROUP] && dt_parse_count(v[O_SUB_GROUP], "--sub-group-size", &b->parallel.sub_group_elems, &err))
        return dt_cli_fail(2, "%s", err.msg);
    if (prec) {
        dt_precision_preset pp;
        if (dt_precision_parse_preset(prec, &pp, &err)) return dt_cli_fail(2, "%s", err.msg);
        dt_precision_from_preset(pp, &b->precision);
    }
    /* the default sequence follows the model, as dtplan estimate's does */
    if (b->model.max_pos > 0 && b->model.max_pos < b->batch.seq_len) b->batch.seq_len = b->model.max_pos;
    if (seq && dt_parse_int(seq, "--seq", 1, SOLVE_MAX_SEQ, 1024, &b->batch.seq_len, &err))
        return dt_cli_fail(2, "%s", err.msg);
    b->batch.global_batch = DT_SOLVE_DEFAULT_PER_DEVICE * DT_SOLVE_DEFAULT_ACCUM * n_gpus;
    if (gbatch && dt_parse_int(gbatch, "--global-batch", 1, SOLVE_MAX_BATCH, 256, &b->batch.global_batch, &err))
        return dt_cli_fail(2, "%s", err.msg);
    rq.host_limit_bytes = b->cluster.hw.host_mem_bytes;
    rq.nvme_limit_bytes = b->cluster.hw.nvme_bytes;
    if ((host && dt_parse_bytes(host, "--host-mem", &rq.host_limit_bytes, &err)) ||
        (nvme && dt_parse_bytes(nvme, "--nvme", &rq.nvme_limit_bytes, &err)))
        return dt_cli_fail(2, "%s", err.msg);
    rq.allow_offload = !no_offload;
    /* CPU ranks: dtrun's VLM trainer runs ZeRO 0-2 without offload (engine/run/vlm_train.c: --init
     * and the export hold the whole language model on every rank); solve keeps to what it runs */
    const int dtrun_vlm =
        dt_vlm_active(&b->vlm) && b->runtime.kind == DT_RUNTIME_DTRUN && b->cluster.device == DT_DEVICE_CPU;
    if (dtrun_vlm && v[O_STAGES] && (rq.stage_mask & ~SOLVE_DTRUN_VLM_STAGES))
        return dt_cli_fail(2, "solve: --stages %s for a vision-language model under runtime dtrun: dtrun's VLM trainer "
                              "runs ZeRO 0-2 (no ZeRO-3 yet); use --stages 0,1,2, or --runtime deepspeed", stages);
    if (dtrun_vlm) rq.stage_mask &= SOLVE_DTRUN_VLM_STAGES, rq.allow_offload = 0;
    /* GPU requests over several nodes weigh TP / CP / PP layouts next to DP x ZeRO (--layouts
     * on one node too): under the request's runtime when it runs them (deepspeed, fsdp), else
     * under fsdp (torchtitan's FSDP2 x TP x CP x PP; dtrun runs data parallelism only) */
    if (layouts && no_layouts) return dt_cli_fail(2, "solve: --layouts and --no-layouts contradict each other");
    const int cpu_dtrun = b->cluster.device == DT_DEVICE_CPU && b->runtime.kind == DT_RUNTIME_DTRUN;
    if (layouts && b->cluster.device != DT_DEVICE_CUDA && !cpu_dtrun)
        return dt_cli_fail(2, "solve: --layouts: hardware %s is a CPU profile; on CPU ranks only dtrun's tensor "
                              "parallelism is planned (--runtime dtrun), other layouts for GPUs (use a GPU --hardware "
                              "such as %s)",
                           b->cluster.hw.name, DT_SOLVE_DEFAULT_HARDWARE);
    /* the fine-tuning methods are not modelled with a layout (planner/memory.c refuses the pair) */
    const int fine = fta.v[FT_METHOD] && strcmp(fta.v[FT_METHOD], "full") != 0;
    if (layouts && fine)
        return dt_cli_fail(2, "solve: --layouts with --finetune %s: layouts are modelled for full fine-tuning only "
                              "(drop --layouts: the method is planned with DP x ZeRO)", fta.v[FT_METHOD]);
    /* Megatron-LM plans are its layouts on one node too */
    const int megatron = b->runtime.kind == DT_RUNTIME_MEGATRON;
    if (megatron && fine)
        return dt_cli_fail(2, "solve: --runtime megatron with --finetune %s: Megatron-LM's plans are modelled for full "
                              "training only (use --runtime deepspeed or fsdp for the method)", fta.v[FT_METHOD]);
    rq.layouts = layouts || (!no_layouts && !fine && b->cluster.device == DT_DEVICE_CUDA && (n_nodes > 1 || megatron));
    /* dtrun on CPU ranks runs TP itself (tp a decision variable: docs/parallelism.md "In dtrun") */
    rq.layout_runtime = b->runtime.kind == DT_RUNTIME_DTRUN && !cpu_dtrun ? DT_RUNTIME_FSDP : b->runtime.kind;
    if (v[O_NVME_PATH]) {
        if (strlen(v[O_NVME_PATH]) >= sizeof b->parallel.nvme_path)
            return dt_cli_fail(2, "solve: --nvme-path: longer than %d bytes (use a shorter path)",
                               (int)sizeof b->parallel.nvme_path - 1);
        snprintf(b->parallel.nvme_path, sizeof b->parallel.nvme_path, "%s", v[O_NVME_PATH]);
    }
    if (apply_training_options(b, v[O_DATA], v[O_STEPS], v[O_LR], v[O_WARMUP], v[O_SCHED], v[O_OUTDIR], v[O_EVAL],
                               v[O_SAVE], &err))
        return dt_cli_fail(2, "%s", err.msg);
    if (dt_ft_args_apply(&fta, b)) return 2;   /* the method, checked against the model; solve keeps it */
    if (dt_obj_args_apply(&oba, b)) return 2;  /* the objective, checked against the batch; solve keeps it */
    /* CPU ranks under dtrun: tp weighed by default where its engine may run it (full fine-tuning,
     * pt / sft, several ranks, no vision tower) */
    const int obj_tp = b->objective.kind == DT_OBJ_AUTO || b->objective.kind == DT_OBJ_PT || b->objective.kind == DT_OBJ_SFT;
    if (cpu_dtrun && !no_layouts && !fine && obj_tp && n_gpus > 1 && !dt_vlm_active(&b->vlm)) rq.layouts = 1;
    char data_note[1024];
    if (dt_solve_apply_prepared(b, v[O_DATA], data_note, sizeof data_note, &err))
        return dt_cli_fail(2, "solve: %s", err.msg);
    if (rq.mem_limit_bytes <= b->cluster.hw.reserve_bytes) {
        char rb[48], most[32];
        dt_hardware_mem_text(&b->cluster.hw, most, sizeof most);
        return dt_cli_fail(2, "solve: --mem %s is not above hardware profile %s's runtime reserve %s (e.g. --mem %s)",
                           mem, b->cluster.hw.name, dt_format_bytes(b->cluster.hw.reserve_bytes, u, rb, sizeof rb),
                           most);
    }
    /* every check on the request before anything is printed */
    if (dt_solve_check(&rq, &err)) return dt_cli_fail(2, "solve: %s", err.msg);

    dt_chart_set_device(b->cluster.device);
    char pbuf[32], sbuf[48];
    printf("dtplan solve: %s (%s params), %lld x %s on %lld node(s) (%s inter-node), %s, global batch %lld x "
           "seq %lld\n",
           b->model.name, dt_format_count(dt_model_params(&b->model), pbuf, sizeof pbuf), (long long)n_gpus,
           b->cluster.hw.name, (long long)n_nodes, b->cluster.hw.interconnect,
           dt_precision_preset_name(b->precision.preset), (long long)b->batch.global_batch,
           (long long)b->batch.seq_len);
    if (b->model.requested_params > 0) {
        char rbuf[32];
        printf("params: %lld as requested (%s): model states use it; the derived shape (%lld layers, hidden %lld) "
               "has %lld (%s: activations, FLOPs, communication)\n",
               (long long)b->model.requested_params,
               dt_format_count(b->model.requested_params, rbuf, sizeof rbuf), (long long)b->model.n_layer,
               (long long)b->model.hidden, (long long)dt_model_params(&b->model), pbuf);
    }
    if (b->runtime.kind == DT_RUNTIME_MEGATRON)
        printf("runtime: megatron (%s, %s attention; ZeRO stage 0 = DDP, 1 = its distributed optimizer)\n",
               dt_runtime_code(b->runtime.kind), dt_attn_kernel_name(b->runtime.attention));
    else if (b->runtime.kind != DT_RUNTIME_DTRUN)
        printf("runtime: %s (%s, %s attention); device memory is the step's largest phase\n",
               dt_runtime_name(b->runtime.kind), dt_runtime_code(b->runtime.kind),
               dt_attn_kernel_name(b->runtime.attention));
    if (data_note[0]) printf("%s\n", data_note);
    else if (!b->data.train[0])
        printf("data: none named: %s has a %lld-token vocabulary, so the byte-level demo text is not its data; the "
               "plan names no training data and dtrun asks for it (dtrun prepare --tokenizer TOKENIZER --out DIR "
               "INPUT..., then --data DIR here or to dtrun)\n",
               b->model.name, (long long)b->model.vocab);
    dt_ft_print_summary(b, "finetune: ");
    dt_vlm_print_summary(b, "vision: ");
    dt_obj_print_summary(b, "objective: ");
    /* what dtrun's engine trains (engine/model/lm.c dt_lm_check_method: full, freeze, LoRA with
     * fp32 adapters, under a 16-bit precision without modules_to_save, and QLoRA over NF4 / FP4
     * on the CPU with fp32 compute over fp32 parameters or bf16 compute over mixed-bf16, without
     * --prepare-kbit under 16-bit parameters, lm_qbase.c); dtplan does not link the engine, so
     * the rule is stated here */
    const char *no_engine = NULL;
    const int lora = b->finetune.method == DT_FT_LORA, qlora = b->finetune.method == DT_FT_QLORA;
    const dt_dtype qc = b->finetune.compute_dtype, qp = b->precision.param;
    if (qlora && b->finetune.quant == DT_STORAGE_INT8) no_engine = "QLoRA over an int8 base (plan it with --quant nf4)";
    else if (qlora && qc == DT_DTYPE_FP16)
        no_engine = "QLoRA with fp16 compute (plan it with --compute-dtype bf16 or fp32)";
    else if (qlora && qc == DT_DTYPE_BF16 && (qp != DT_DTYPE_BF16 || b->precision.activation != DT_DTYPE_BF16))
        no_engine = "QLoRA with bf16 compute outside mixed-bf16 (plan it with --precision mixed-bf16)";
    else if (qlora && qc == DT_DTYPE_FP32 && qp != DT_DTYPE_FP32)
        no_engine = "QLoRA with fp32 compute over 16-bit parameters (plan it with --compute-dtype bf16)";
    else if (qlora && qp != DT_DTYPE_FP32 && b->finetune.upcast_unquantized)
        no_engine = "QLoRA with --prepare-kbit over 16-bit parameters (plan it without --prepare-kbit)";
    else if (qlora && b->cluster.device != DT_DEVICE_CPU) no_engine = "QLoRA on the GPU";
    else if (dt_ft_is_lora(&b->finetune) && b->finetune.adapter_dtype != DT_DTYPE_FP32)
        no_engine = "LoRA with 16-bit adapters (plan it with --adapter-dtype fp32)";
    else if (lora && b->precision.param != DT_DTYPE_FP32 && b->finetune.modules_to_save.n > 0)
        no_engine = "LoRA with --modules-to-save under a 16-bit precision (plan it with --precision fp32)";
    if (no_engine && b->runtime.kind == DT_RUNTIME_DTRUN)
        printf("note: this dtrun does not train %s yet; to run the method with PEFT + DeepSpeed, plan it with "
               "--runtime deepspeed\n", no_engine);
    printf("limit: %s per %s (reserve %s included)\n", dt_format_bytes(rq.mem_limit_bytes, u, sbuf, sizeof sbuf),
           dt_chart_rank_word(),
           dt_format_bytes(b->cluster.hw.reserve_bytes, u, pbuf, sizeof pbuf));

    dt_solve_result *r = malloc(sizeof *r);
    if (!r) return dt_cli_fail(1, "solve: out of memory");
    double t0 = dt_clock_s();
    int rc = dt_solve(&rq, r, &err);
    int64_t gen_batch = 0;
    rc = solve_generation_batch(&rq, r, rc, &gen_batch, &err);
    double ms = 1e3 * (dt_clock_s() - t0);
    if (rc) {
        free(r);
        char hint[320] = "", ft_hint[2048] = "";
        if (rc == DT_EINFEASIBLE) deepspeed_runtime_hint(&rq, hint, sizeof hint);
        if (rc == DT_EINFEASIBLE) cheaper_method_hint(&rq, argc, argv, ft_hint, sizeof ft_hint);
        return dt_cli_fail(dt_cli_exit_code(rc), "%s%s%s", err.msg, hint, ft_hint);
    }
    print_result(&rq, r, u, ms);
    dt_cli_config_after_solve(&r->plan);
    if (gen_batch)
        printf("generation: %lld sequences decoded at once per GPU (the whole rollout does not fit; the plan's "
               "objective.gen_batch)\n", (long long)gen_batch);
    if (outp) {
        if (dt_plan_save(outp, &r->plan, &err)) {
            free(r);
            return dt_cli_fail(err.code == DT_ENOMEM ? 1 : 2, "%s", err.msg);
        }
        printf("plan: %s\n", outp);
    }
    if (plot) {
        if (plot_candidates(&rq, r, u, plot, &err)) {
            free(r);
            fprintf(stderr, "dtplan: %s\n", err.msg);
            return err.code == DT_ENOMEM ? 1 : 2;
        }
        printf("plot: %s\n", plot);
    }
    free(r);
    return 0;
}
