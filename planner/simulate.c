/* simulate.c — one optimizer step as events on four streams (dt_simulate.h).
 * The schedule is the engine's, as docs/time-model.md specifies it; the rules
 * and their consequences are written out in docs/simulate.md.
 *
 * Units: a parameter "unit" is the embeddings (0), a block (1..L) or the final
 * norm + untied head (L+1). Compute runs over "segments" in forward order:
 * embeddings, blocks 1..L, head (lm_head, which uses unit 0 when tied). */
#include "dt_simulate.h"
#include "dt_model.h"

#include <stdlib.h>
#include <string.h>

#include "dt_memory.h"
#include "dt_ftplan.h"
#include "dt_solve.h"
#include "dt_timemodel.h"

/* ---- probes: the time / memory models' numbers, read through their API ---- */

/* All-reduce cost is affine in bytes (alpha-beta ring); reduce-scatter and
 * all-gather of the same buffer cost half at the all-reduce's busbw, their bandwidth
 * part scaled by busbw(all-reduce) / busbw(theirs) where the profile measured them
 * apart (dt_time_busbw; docs/time-model.md). We read
 * two points of it from the stage-0 bucket phase of a probe plan whose buckets are
 * (total-1) elements and 1 element: tail = AR(gb), comm = AR((total-1)gb) + AR(gb). */
typedef struct {
    double c0, per_byte;   /* all-reduce(S) = c0 + per_byte * S, S > 0 */
    double bw_ratio[DT_COLL_COUNT];   /* busbw(all-reduce) / busbw(c) */
} sim_net;

static dt_plan probe_base(const dt_plan *p) {
    dt_plan q = *p;
    q.parallel.offload_optimizer = DT_OFFLOAD_NONE;
    q.parallel.offload_param = DT_OFFLOAD_NONE;
    q.activations.ckpt_layers = 0;
    return q;
}

static int probe_net(const dt_plan *p, sim_net *net, dt_error *err) {
    memset(net, 0, sizeof *net);
    if (p->parallel.world_size <= 1) return DT_OK;   /* no collective runs */
    int64_t total = dt_model_embedding_params(&p->model) +
                    p->model.n_layer * dt_model_block_params(&p->model) + dt_model_head_params(&p->model);
    if (total < 3) return dt_errorf(err, DT_EINVAL, "simulate: model has fewer than 3 parameters");
    dt_plan q = probe_base(p);
    q.parallel.zero_stage = 0;
    q.parallel.overlap_comm = 1;
    q.parallel.reduce_bucket_elems = total - 1;
    dt_time_terms t;
    if (dt_time_terms_build(&q, &t, err)) return err->code;
    if (t.n_phases != 1) return dt_errorf(err, DT_EINTERNAL, "simulate: network probe found no bucket phase");
    const double gb = (double)dt_dtype_size(p->precision.grad);
    double small = t.phase[0].tail_s, big = t.phase[0].comm_s - small;
    net->per_byte = (big - small) / ((double)(total - 2) * gb);
    net->c0 = small - net->per_byte * gb;
    for (int c = 0; c < DT_COLL_COUNT; c++)
        net->bw_ratio[c] = dt_time_busbw(p, DT_COLL_ALLREDUCE) / dt_time_busbw(p, (dt_collective)c);
    return DT_OK;
}

static double coll_s(const sim_net *net, dt_collective c, double bytes) {
    if (bytes <= 0 || (net->c0 == 0 && net->per_byte == 0)) return 0.0;
    if (c == DT_COLL_ALLREDUCE) return net->c0 + net->per_byte * bytes;
    return 0.5 * (net->c0 + net->per_byte * bytes * net->bw_ratio[c]);
}

double dt_sim_collective_s(const dt_plan *p, dt_collective c, double bytes) {
    sim_net net;
    dt_error e;
    dt_error_clear(&e);
    if (probe_net(p, &net, &e)) return -1.0;
    return coll_s(&net, c, bytes);
}



/* The closed form's buffers for stage 0 with 1-element buckets are 1·gb plus the
 * workspace (logits, losses, ids, backward scratch). */
int64_t dt_sim_workspace_bytes(const dt_plan *p) {
    if (p->runtime.kind != DT_RUNTIME_DTRUN) return dt_memory_hf_workspace(p);
    dt_plan q = probe_base(p);
    q.parallel.zero_stage = 0;
    q.parallel.reduce_bucket_elems = 1;
    q.parallel.allgather_bucket_elems = 1;
    dt_mem_breakdown m;
    dt_error e;
    dt_error_clear(&e);
    if (dt_memory_estimate(&q, &m, &e)) return -1;
    return m.buffers - dt_dtype_size(p->precision.grad);
}

/* ---- the simulation state ---- */

typedef struct {
    const dt_plan *p;
    dt_sim_result *r;
    int cap_ev, cap_mem;
    double free_at[DT_SIM_STREAMS];   /* when each stream's last event ends */
    int last_ev[DT_SIM_STREAMS];      /* index of each stream's last event, -1 */
    int64_t cur[DT_SIMMEM_COUNT];
    /* pending memory frees (time, category, bytes), applied in time order */
    int n_pend, cap_pend;
    struct pend { double t; int cat; int64_t bytes; } *pend;
    int *pred;                        /* [event] the event whose end fixed its start, -1 */
    int cap_pred;
    int failed;
} sim;

static int grow(void **ptr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 256;
    while (nc < need) nc *= 2;
    void *np = realloc(*ptr, (size_t)nc * elem);
    if (!np) return -1;
    *ptr = np;
    *cap = nc;
    return 0;
}

/* Memory changes are recorded as deltas and replayed in time order at the end
 * (frees before allocations at the same instant: a kernel's buffers are released
 * when it ends, the next kernel's allocated when it starts). */
static void mem_delta(sim *s, double t, int cat, int64_t bytes) {
    if (bytes == 0) return;
    if (grow((void **)&s->pend, &s->cap_pend, s->n_pend + 1, sizeof *s->pend)) { s->failed = 1; return; }
    s->pend[s->n_pend++] = (struct pend){t, cat, bytes};
}
static void mem_alloc(sim *s, double t, int cat, int64_t bytes) { if (bytes > 0) mem_delta(s, t, cat, bytes); }
static void mem_free_at(sim *s, double t, int cat, int64_t bytes) { if (bytes > 0) mem_delta(s, t, cat, -bytes); }

static int cmp_pend(const void *a, const void *b) {
    const struct pend *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if ((x->bytes < 0) != (y->bytes < 0)) return x->bytes < 0 ? -1 : 1;
    return 0;
}

/* Replays the deltas into samples, starting from the resident bytes in s->cur. */
static void mem_replay(sim *s) {
    dt_sim_result *r = s->r;
    qsort(s->pend, (size_t)s->n_pend, sizeof *s->pend, cmp_pend);
    if (grow((void **)&r->mem, &s->cap_mem, s->n_pend + 1, sizeof *r->mem)) { s->failed = 1; return; }
    for (int i = -1; i < s->n_pend; i++) {
        double t = 0.0;
        if (i >= 0) {
            s->cur[s->pend[i].cat] += s->pend[i].bytes;
            t = s->pend[i].t;
            if (i + 1 < s->n_pend && s->pend[i + 1].t == t) continue; /* one sample per instant */
        }
        dt_sim_mem_sample *m = &r->mem[r->n_mem++];
        m->t_s = t;
        m->total = 0;
        for (int c = 0; c < DT_SIMMEM_COUNT; c++) {
            m->bytes[c] = s->cur[c];
            m->total += s->cur[c];
        }
    }
}

/* Adds an event on stream st that may start when every dep (event indices, -1 =
 * none) has ended and the stream is free, and not before not_before. Returns its
 * index (or -1 on allocation failure). */
static int add_event(sim *s, dt_sim_stream st, dt_sim_kind k, int micro, int unit, const char *phase,
                     double dur, int64_t bytes, double not_before, int dep1, int dep2) {
    dt_sim_result *r = s->r;
    if (grow((void **)&r->events, &s->cap_ev, r->n_events + 1, sizeof *r->events) ||
        grow((void **)&s->pred, &s->cap_pred, r->n_events + 1, sizeof *s->pred)) {
        s->failed = 1;
        return -1;
    }
    double t0 = s->free_at[st];
    int pred = s->last_ev[st];
    if (not_before > t0) { t0 = not_before; pred = -1; }
    int deps[2] = {dep1, dep2};
    for (int i = 0; i < 2; i++)
        if (deps[i] >= 0 && r->events[deps[i]].t1_s > t0) { t0 = r->events[deps[i]].t1_s; pred = deps[i]; }
    if (dur < 0) dur = 0;
    int id = r->n_events++;
    r->events[id] = (dt_sim_event){st, k, micro, unit, phase, t0, t0 + dur, bytes};
    s->pred[id] = pred;
    s->free_at[st] = t0 + dur;
    s->last_ev[st] = id;
    return id;
}

/* ---- the schedule ---- */

typedef struct {
    sim *s;
    const dt_plan *p;
    sim_net net;
    int stage, overlap, has_head, tied, n_units, n_seg;
    int stage3;                /* stage 3 on more than one rank: units are gathered */
    int A;                     /* micro-steps per optimizer step */
    int64_t L, K, W, G, pb, gb;
    dt_offload op, oo;         /* parameter / optimizer offload in effect */
    int64_t *n, *pad;          /* [n_units] elements, padded elements */
    int64_t total, total_pad;  /* their sums */
    int *gf, *gbk;             /* [n_units] this micro-step's forward / backward gather event, -1 */
    int64_t act_full, act_kept, act_head; /* activations of a block, a checkpointed block, the head */
    int fine;                  /* a fine-tuning plan (planner/finetune.c): gradients, the optimizer step
                                * and the updated parameters are the trained state only, sf of the units */
    double sf;
    int64_t ws;                /* workspace (logits, losses, ids, backward scratch) */
    double t_block, t_recompute, head_fwd, bwd_ratio;
    double host_emb, host_blk, host_head; /* DeepSpeed ZeRO-3: host cost of a segment's module fetches
                                           * per pass (dt_time_ds_fetch_host_s), else 0 */
    double offload_s, optimizer_s; /* the time model's offload total and optimizer step (s) */
    sim_net bnet;              /* the backward all-gathers' network: ZeRO++ hpZ's group, else net */
    double fwd_wire, rs_wire;  /* bytes per element on the wire: forward gathers, gradient
                                * collectives (dt_time_zeropp_wire: ZeRO++ qwZ / qgZ, DeepSpeed's
                                * communication_data_type), else pb / gb */
    dt_collective grad_coll;   /* stages 1-3's gradient collective (an all-reduce where DeepSpeed's
                                * reduce_scatter is off) */
    double per_gather_xfer;    /* parameter-offload copies issued so far (s) */
    int64_t grads_start, grads_growth, grads_added; /* runtimes deepspeed / fsdp: gradients at the backward's start, and
                                        * what the backward adds (dt_memory_phases), spread over the units */
} plan_ctx;

static int seg_unit(const plan_ctx *c, int sg) {
    if (sg == c->n_seg - 1) return c->has_head ? (int)(c->L + 1) : 0;
    return sg;
}
static double seg_fwd(const plan_ctx *c, int sg) {
    return sg == 0 ? 0.0 : (sg == c->n_seg - 1 ? c->head_fwd : c->t_block);
}
/* DeepSpeed ZeRO-3's host-side fetch cost of segment sg in one pass: its modules' hooks and
 * synchronisation stall the compute stream (docs/time-model.md "ZeRO-3 under DeepSpeed"). */
static double seg_host(const plan_ctx *c, int sg) {
    return sg == 0 ? c->host_emb : (sg == c->n_seg - 1 ? c->host_head : c->host_blk);
}

/* The error every allocation failure reports. */
static int sim_oom(dt_error *err) { return dt_errorf(err, DT_ENOMEM, "simulate: out of memory"); }

/* A collective on the comm stream after dep, not before `when`. Without
 * overlap_comm the compute stream waits for it (it is issued in line). */
static int comm_event_on(plan_ctx *c, const sim_net *net, dt_sim_kind k, dt_collective coll, int m, int u,
                         const char *phase, int64_t bytes, double when, int dep) {
    sim *s = c->s;
    if (!c->overlap && s->free_at[DT_SIM_COMPUTE] > when) when = s->free_at[DT_SIM_COMPUTE];
    int e = add_event(s, DT_SIM_COMM, k, m, u, phase, coll_s(net, coll, (double)bytes), bytes, when, dep, -1);
    if (e >= 0 && !c->overlap) {
        s->free_at[DT_SIM_COMPUTE] = s->r->events[e].t1_s;
        s->last_ev[DT_SIM_COMPUTE] = e;
    }
    return e;
}

static int comm_event(plan_ctx *c, dt_sim_kind k, dt_collective coll, int m, int u, const char *phase,
                      int64_t bytes, double when, int dep) {
    return comm_event_on(c, &c->net, k, coll, m, u, phase, bytes, when, dep);
}

/* Stage 3: gather unit u (if not yet gathered in this pass) at time `when`. With
 * parameter offload its shard is first copied host->device, synchronously (the
 * compute stream waits for the copy, docs/time-model.md). */
static void gather_unit(plan_ctx *c, int *g, int u, double when, int m, const char *phase) {
    sim *s = c->s;
    if (c->stage != 3 || c->W <= 1 || g[u] >= 0) return;
    int dep = -1;
    if (c->op != DT_OFFLOAD_NONE) {
        const dt_hardware *hw = &c->p->cluster.hw;
        int64_t shard_bytes = c->pad[u] / c->W * c->pb;
        double d = (double)shard_bytes / hw->h2d_bw;
        if (c->op == DT_OFFLOAD_NVME) d += (double)(shard_bytes * c->G) / hw->nvme_bw;
        c->per_gather_xfer += d;
        dep = add_event(s, DT_SIM_XFER, c->op == DT_OFFLOAD_NVME ? DT_SIM_NVME : DT_SIM_H2D, m, u, phase, d,
                        shard_bytes, s->free_at[DT_SIM_COMPUTE], -1, -1);
        if (dep < 0) return;
        s->free_at[DT_SIM_COMPUTE] = s->r->events[dep].t1_s;
        s->last_ev[DT_SIM_COMPUTE] = dep;
    }
    int64_t bytes = c->pad[u] * c->pb;   /* gathered: the 16-bit unit; on the wire: ZeRO++'s widths */
    const int bwd = !strcmp(phase, "backward");
    const int64_t wire = bwd ? bytes : (int64_t)((double)c->pad[u] * c->fwd_wire);
    g[u] = comm_event_on(c, bwd ? &c->bnet : &c->net, DT_SIM_ALLGATHER, DT_COLL_ALLGATHER, m, u, phase, wire, when,
                         dep);
    if (g[u] >= 0) mem_alloc(s, s->r->events[g[u]].t0_s, DT_SIMMEM_GATHERED, bytes);
}

/* Stage 3, before a segment on unit u computes: the segment waits for u's gather
 * (returned, -1: none); with overlap_comm the next segment's unit next_u (-1:
 * none) is prefetched when the segment can start (from `start`). */
static int await_gather(plan_ctx *c, int *g, int u, int next_u, double start, int m, const char *phase) {
    const dt_sim_result *r = c->s->r;
    int dep = c->stage3 ? g[u] : -1;
    if (dep >= 0 && r->events[dep].t1_s > start) start = r->events[dep].t1_s;
    if (c->stage3 && c->overlap && next_u >= 0) gather_unit(c, g, next_u, start, m, phase);
    return dep;
}

/* Exposed communication: comm-stream time during which compute is idle. Both
 * streams' events are sorted by start within a stream. */
static double exposed_comm(const dt_sim_result *r) {
    double exposed = 0.0;
    for (int i = 0; i < r->n_events; i++) {
        const dt_sim_event *e = &r->events[i];
        if (e->stream != DT_SIM_COMM || e->t1_s <= e->t0_s) continue;
        double covered = 0.0;
        for (int j = 0; j < r->n_events; j++) {
            const dt_sim_event *f = &r->events[j];
            if (f->stream != DT_SIM_COMPUTE || f->kind == DT_SIM_H2D || f->kind == DT_SIM_NVME) continue;
            double a = f->t0_s > e->t0_s ? f->t0_s : e->t0_s, b = f->t1_s < e->t1_s ? f->t1_s : e->t1_s;
            if (b > a) covered += b - a;
        }
        exposed += (e->t1_s - e->t0_s) - covered;
    }
    return exposed;
}

/* ---- setting up: the plan's shape and the models' numbers ---- */

/* An empty timeline recording into r. */
static void sim_init(sim *s, const dt_plan *p, dt_sim_result *r) {
    memset(s, 0, sizeof *s);
    s->p = p;
    s->r = r;
    for (int i = 0; i < DT_SIM_STREAMS; i++) s->last_ev[i] = -1;
}

/* The step's shape from the plan: stage, world, offload, units and segments. */
/* Bytes of the trained state of x bytes of parameters (x itself for full fine-tuning). */
static int64_t trained_part(const plan_ctx *c, int64_t x) { return c->fine ? (int64_t)((double)x * c->sf) : x; }

static void ctx_init(plan_ctx *c, sim *s, const dt_plan *p) {
    memset(c, 0, sizeof *c);
    c->s = s;
    c->p = p;
    c->stage = p->parallel.zero_stage;
    c->overlap = p->parallel.overlap_comm != 0;
    c->L = p->model.n_layer;
    c->K = p->activations.ckpt_layers;
    c->W = p->parallel.world_size;
    c->G = p->cluster.gpus_per_node;
    c->pb = dt_dtype_size(p->precision.param);
    c->gb = dt_dtype_size(p->precision.grad);
    c->has_head = dt_model_head_params(&p->model) > 0;
    c->tied = p->model.tied_embeddings != 0;
    c->n_units = (int)(1 + c->L + c->has_head);
    c->n_seg = (int)(c->L + 2);
    c->op = c->stage == 3 ? p->parallel.offload_param : DT_OFFLOAD_NONE;
    c->oo = c->stage >= 1 ? p->parallel.offload_optimizer : DT_OFFLOAD_NONE;
    c->A = (int)p->batch.grad_accum;
    c->stage3 = c->stage == 3 && c->W > 1;
}

/* ZeRO++ (dt_time_zeropp_wire): the wire widths, and hpZ's backward-gather network probed
 * on a plan of the group's ranks (within a node when the node's GPUs divide into groups, as
 * the time model's hpz_net has it; else the plan's own network). */
static int ctx_zeropp(plan_ctx *c, dt_error *err) {
    dt_time_zeropp z;
    dt_time_zeropp_wire(c->p, &z);
    c->fwd_wire = z.fwd_gather_bytes, c->rs_wire = z.grad_bytes, c->grad_coll = z.grad_coll;
    c->bnet = c->net;
    if (z.bwd_gather_ranks == c->W || c->G % z.bwd_gather_ranks) return DT_OK;
    dt_plan q = *c->p;
    q.cluster.nodes = 1, q.cluster.gpus_per_node = z.bwd_gather_ranks, q.parallel.world_size = z.bwd_gather_ranks;
    return probe_net(&q, &c->bnet, err);
}

/* The time and memory models' numbers, read through their APIs: the memory
 * breakdown (*mb), the network, the step-end offload and optimizer times, the
 * workspace, and one micro-step's compute split into segments. */
static int ctx_read_models(plan_ctx *c, dt_mem_breakdown *mb, dt_error *err) {
    const dt_plan *p = c->p;
    dt_time_terms terms;
    if (dt_time_terms_build(p, &terms, err) || dt_memory_estimate(p, mb, err) || probe_net(p, &c->net, err))
        return err->code;
    c->offload_s = terms.offload_s;
    c->optimizer_s = terms.optimizer_s;
    if (ctx_zeropp(c, err)) return err->code;
    /* one micro-step's forward, backward, block forward and block recompute on
     * p's own ranks per node (the time model's dt_time_compute_micro) */
    dt_time_compute cm;
    if (dt_time_compute_micro(p, &cm, err)) return err->code;
    c->ws = dt_sim_workspace_bytes(p);
    if (c->ws < 0) return dt_errorf(err, DT_EINTERNAL, "simulate: workspace probe failed");
    /* per segment forward: a block's forward; embeddings, final norm and lm_head
     * take the rest, on the head segment. A checkpointed block's recompute is
     * shorter than its forward (no MLP down projection, docs/time-model.md). */
    c->t_block = cm.block_fwd_s;
    c->t_recompute = cm.block_recompute_s;
    c->head_fwd = cm.fwd_s - (double)c->L * c->t_block;
    if (c->head_fwd < 0) c->head_fwd = 0;
    c->bwd_ratio = cm.fwd_s > 0 ? cm.bwd_s / cm.fwd_s : 0.0;
    {   /* DeepSpeed ZeRO-3: the embeddings' fetches on segment 0, the lm_head's on the head */
        double blk_f = 0.0, out_f = 0.0;
        const double host = dt_time_ds_fetch_host_s(p, &blk_f, &out_f);
        c->host_blk = host * blk_f;
        c->host_head = out_f > 0 ? host : 0.0;
        c->host_emb = out_f > 1 ? host * (out_f - 1.0) : 0.0;
    }
    if (p->runtime.kind != DT_RUNTIME_DTRUN) {
        dt_mem_phases ph;
        if (dt_memory_phases(p, p->model.requested_params, &ph, err)) return err->code;
        c->grads_start = ph.at[DT_MEM_PHASE_BWD_START].grads;
        c->grads_growth = ph.at[DT_MEM_PHASE_BWD_END].grads - c->grads_start;
    }
    return DT_OK;
}

/* Each unit's parameters, padded to a multiple of the world from stage 1 on
 * (DeepSpeed pads its flat partitions), their totals, the activation sizes the
 * passes allocate, and the per-unit gather indices. */
static int ctx_size_units(plan_ctx *c, dt_error *err) {
    const dt_plan *p = c->p;
    c->n = calloc((size_t)c->n_units, sizeof *c->n);
    c->pad = calloc((size_t)c->n_units, sizeof *c->pad);
    c->gf = malloc(sizeof(int) * (size_t)c->n_units);
    c->gbk = malloc(sizeof(int) * (size_t)c->n_units);
    if (!c->n || !c->pad || !c->gf || !c->gbk) return sim_oom(err);
    for (int u = 0; u < c->n_units; u++) {
        c->n[u] = u == 0 ? dt_model_embedding_params(&p->model)
                         : (u <= c->L ? dt_model_block_params(&p->model) : dt_model_head_params(&p->model));
        c->pad[u] = c->stage >= 1 ? (c->n[u] + c->W - 1) / c->W * c->W : c->n[u];
        c->total += c->n[u];
        c->total_pad += c->pad[u];
    }
    c->act_full = dt_memory_activations_per_block(p, 0);
    c->act_kept = dt_memory_activations_per_block(p, 1);
    c->act_head = dt_memory_activations(p, 0) - c->L * c->act_full;
    c->fine = dt_ftplan_active(p);
    c->sf = c->fine && c->total > 0 ? (double)dt_ftplan_state_elems(p) / (double)c->total : 1.0;
    if (c->fine && c->L > 0) {
        /* blocks keep what the method's autograd keeps (dt_ftplan_activations), spread evenly */
        c->act_head = dt_memory_head_activations(p);
        c->act_full = (dt_memory_activations(p, 0) - c->act_head) / c->L;
        c->act_kept = c->act_full < c->act_kept ? c->act_full : c->act_kept;
    }
    return DT_OK;
}

/* Frees what ctx_size_units allocated. */
static void ctx_free(plan_ctx *c) {
    free(c->n);
    free(c->pad);
    free(c->gf);
    free(c->gbk);
}

/* What is resident when the step starts: the memory model's params, grads,
 * optimizer and reserve. Stage 0 adds one flat reduce bucket, allocated once
 * (DDP-style); the CPU engine all-reduces the gradient buffer in place and
 * allocates none (docs/zero.md). */
static void sim_resident_memory(plan_ctx *c, const dt_mem_breakdown *mb) {
    const dt_plan *p = c->p;
    sim *s = c->s;
    s->cur[DT_SIMMEM_PARAMS] = mb->params;
    s->cur[DT_SIMMEM_GRADS] = p->runtime.kind != DT_RUNTIME_DTRUN ? c->grads_start : mb->grads;
    s->cur[DT_SIMMEM_OPTIMIZER] = mb->optimizer;
    s->cur[DT_SIMMEM_RESERVE] = mb->reserve;
    /* DeepSpeed's stage-0 buckets exist only after backward under the HF runtimes' phases
     * (dt_memory_phases), and are not resident */
    const int64_t bucket0 =
        c->stage == 0 && c->W > 1 && p->cluster.device != DT_DEVICE_CPU && p->runtime.kind == DT_RUNTIME_DTRUN
            ? (p->parallel.reduce_bucket_elems < c->total ? p->parallel.reduce_bucket_elems : c->total) * c->gb
            : 0;
    s->cur[DT_SIMMEM_BUCKETS] = bucket0;
}

/* ---- the micro-steps: forward, backward, gradient reductions ---- */

/* Memory of forward segment sg (unit u, running t0..t1): its activations (the
 * head's and the workspace on the last segment); stage 3 frees a gathered unit
 * after its last forward use (tied unit 0: the lm_head). */
static void forward_memory(plan_ctx *c, int sg, int u, double t0, double t1) {
    sim *s = c->s;
    if (sg >= 1 && sg <= c->L) mem_alloc(s, t0, DT_SIMMEM_ACTIVATIONS, sg <= c->K ? c->act_kept : c->act_full);
    if (sg == c->n_seg - 1) {
        mem_alloc(s, t0, DT_SIMMEM_ACTIVATIONS, c->act_head);
        mem_alloc(s, t0, DT_SIMMEM_WORKSPACE, c->ws);
    }
    int last_use = !(u == 0 && sg == 0 && c->tied);
    if (c->stage3 && last_use) mem_free_at(s, t1, DT_SIMMEM_GATHERED, c->pad[u] * c->pb);
    if (c->stage3 && c->tied && c->has_head && sg == c->n_seg - 1)
        mem_free_at(s, t1, DT_SIMMEM_GATHERED, c->pad[0] * c->pb);
}

/* Micro-step m's forward pass from t_start: segments in order; stage 3 gathers
 * each unit at first use, prefetching the next segment's unit when a segment
 * starts. */
static void sim_forward(plan_ctx *c, int m, double t_start) {
    sim *s = c->s;
    if (c->stage3) gather_unit(c, c->gf, 0, t_start, m, "forward");
    for (int sg = 0; sg < c->n_seg && !s->failed; sg++) {
        int u = seg_unit(c, sg);
        if (c->stage3 && !c->overlap) gather_unit(c, c->gf, u, t_start, m, "forward");
        double start = s->free_at[DT_SIM_COMPUTE] > t_start ? s->free_at[DT_SIM_COMPUTE] : t_start;
        int dep = await_gather(c, c->gf, u, sg + 1 < c->n_seg ? seg_unit(c, sg + 1) : -1, start, m, "forward");
        int e = add_event(s, DT_SIM_COMPUTE, DT_SIM_FORWARD, m, u, "forward", seg_fwd(c, sg) + seg_host(c, sg), 0, t_start,
                          dep, -1);
        if (e < 0) break;
        forward_memory(c, sg, u, s->r->events[e].t0_s, s->r->events[e].t1_s);
    }
}

/* Backward segment sg (unit u) of micro-step m on the compute stream: stage 3
 * waits for u's gather (prefetching the previous segment's unit), and a tied
 * lm_head for the embeddings; a checkpointed block is recomputed right before
 * its backward, in a recompute buffer. Returns the backward event, -1 on failure. */
static int backward_segment(plan_ctx *c, int m, int sg, int u) {
    sim *s = c->s;
    if (c->stage3 && !c->overlap) gather_unit(c, c->gbk, u, 0.0, m, "backward");
    int dep = await_gather(c, c->gbk, u, sg > 0 ? seg_unit(c, sg - 1) : -1, s->free_at[DT_SIM_COMPUTE], m,
                           "backward");
    int dep2 = c->stage3 && c->tied && sg == c->n_seg - 1 ? c->gbk[0] : -1;
    if (sg >= 1 && sg <= c->K) {
        int e = add_event(s, DT_SIM_COMPUTE, DT_SIM_RECOMPUTE, m, u, "backward", c->t_recompute, 0, 0.0, dep, -1);
        if (e < 0) return -1;
        mem_alloc(s, s->r->events[e].t0_s, DT_SIMMEM_WORKSPACE, c->act_full - c->act_kept);
        dep = -1;
    }
    return add_event(s, DT_SIM_COMPUTE, DT_SIM_BACKWARD, m, u, "backward",
                     seg_fwd(c, sg) * c->bwd_ratio + seg_host(c, sg), 0, 0.0, dep, dep2);
}

/* What backward segment sg (unit u, ending at t1) frees: its recompute buffer,
 * its activations (the head's on the last segment, the workspace after the
 * first), and in stage 3 the gathered unit after its last use. */
static void backward_memory(plan_ctx *c, int sg, int u, int last_use, double t1) {
    sim *s = c->s;
    if (sg >= 1 && sg <= c->K) mem_free_at(s, t1, DT_SIMMEM_WORKSPACE, c->act_full - c->act_kept);
    if (sg >= 1 && sg <= c->L) mem_free_at(s, t1, DT_SIMMEM_ACTIVATIONS, sg <= c->K ? c->act_kept : c->act_full);
    if (sg == c->n_seg - 1) mem_free_at(s, t1, DT_SIMMEM_ACTIVATIONS, c->act_head);
    if (sg == 0) mem_free_at(s, t1, DT_SIMMEM_WORKSPACE, c->ws);
    if (c->stage3 && last_use) mem_free_at(s, t1, DT_SIMMEM_GATHERED, c->pad[u] * c->pb);
}

/* Stage 0: buckets over the flat gradient in backward order; unit u's gradient
 * fills *bucket_fill and a bucket is all-reduced once the unit holding its last
 * element is done (event e, ending at t1). Returns the last all-reduce issued,
 * or last_red when none was. */
static int reduce_buckets(plan_ctx *c, int m, int u, int sg, int e, double t1, int64_t *bucket_fill,
                          int last_red) {
    int64_t B = c->p->parallel.reduce_bucket_elems;
    *bucket_fill += c->n[u];
    while (*bucket_fill >= B || (sg == 0 && *bucket_fill > 0)) {
        int64_t n = *bucket_fill >= B ? B : *bucket_fill;
        *bucket_fill -= n;
        last_red = comm_event(c, DT_SIM_ALLREDUCE, DT_COLL_ALLREDUCE, m, u, "backward",
                              (int64_t)((double)n * c->rs_wire), t1, e);
        if (last_red < 0) break;
    }
    return last_red;
}

/* Stages 1-3: unit u's gradient is reduce-scattered after its backward (event e,
 * t0..t1), from a full-size unit gradient (stage 3, allocated at t0) or a
 * bucket (stages 1-2) that lives while the collective runs. Returns the event. */
static int reduce_scatter_unit(plan_ctx *c, int m, int u, int e, double t0, double t1) {
    sim *s = c->s;
    int64_t bytes = trained_part(c, c->pad[u] * c->gb);
    if (c->stage == 3) mem_alloc(s, t0, DT_SIMMEM_UNIT_GRADS, bytes);
    const int64_t wire = trained_part(c, (int64_t)((double)c->pad[u] * c->rs_wire));
    int red = comm_event(c, c->grad_coll == DT_COLL_ALLREDUCE ? DT_SIM_ALLREDUCE : DT_SIM_REDUCE_SCATTER,
                         c->grad_coll, m, u, "backward", wire, t1, e);
    if (red < 0) return red;
    const dt_sim_event *ev = &s->r->events[red];
    int cat = c->stage == 3 ? DT_SIMMEM_UNIT_GRADS : DT_SIMMEM_BUCKETS;
    if (c->stage <= 2) mem_alloc(s, ev->t0_s, cat, bytes);
    mem_free_at(s, ev->t1_s, cat, bytes);
    return red;
}

/* Micro-step m's backward pass: segments in reverse, each unit's gradient reduced
 * after its last backward use when this micro-step reduces (every one from stage
 * 2, else the last). Returns the last reduction event (-1: none). */
static int sim_backward(plan_ctx *c, int m) {
    sim *s = c->s;
    const int reduce_now = c->W > 1 && (c->stage >= 2 || m == c->A - 1);
    int64_t bucket_fill = 0;
    int last_red = -1;
    /* a tied lm_head's backward needs the embeddings first; they stay to the end */
    if (c->stage3 && c->tied) gather_unit(c, c->gbk, 0, s->free_at[DT_SIM_COMPUTE], m, "backward");
    if (c->stage3 && c->overlap)
        gather_unit(c, c->gbk, seg_unit(c, c->n_seg - 1), s->free_at[DT_SIM_COMPUTE], m, "backward");
    for (int sg = c->n_seg - 1; sg >= 0 && !s->failed; sg--) {
        int u = seg_unit(c, sg);
        int e = backward_segment(c, m, sg, u);
        if (e < 0) break;
        double t0 = s->r->events[e].t0_s, t1 = s->r->events[e].t1_s;
        int last_use = !(u == 0 && sg == c->n_seg - 1 && !c->has_head);
        backward_memory(c, sg, u, last_use, t1);
        /* HF runtimes: the gradients fill in as the units' backward ends (the last
         * micro-step's, when the stage keeps them only from its boundary) */
        if (c->grads_growth && m == c->A - 1 && c->total > 0) {
            int64_t add = sg == 0 ? c->grads_growth - c->grads_added
                                  : (int64_t)((double)c->grads_growth * (double)c->n[u] / (double)c->total);
            mem_delta(s, t1, DT_SIMMEM_GRADS, add);
            c->grads_added += add;
        }
        if (!reduce_now || !last_use) continue;
        last_red = c->stage == 0 ? reduce_buckets(c, m, u, sg, e, t1, &bucket_fill, last_red)
                                 : reduce_scatter_unit(c, m, u, e, t0, t1);
    }
    return last_red;
}

/* Every micro-step's forward and backward; the next micro-step's forward waits
 * for this micro-step's reductions. Returns the last reduction (-1: none). */
static int sim_micro_steps(plan_ctx *c) {
    sim *s = c->s;
    int prev_red = -1;
    for (int m = 0; m < c->A && !s->failed; m++) {
        double t_start = s->free_at[DT_SIM_COMPUTE];
        if (prev_red >= 0 && s->r->events[prev_red].t1_s > t_start) t_start = s->r->events[prev_red].t1_s;
        for (int u = 0; u < c->n_units; u++) c->gf[u] = c->gbk[u] = -1;
        sim_forward(c, m, t_start);
        int last_red = sim_backward(c, m);
        if (last_red >= 0) prev_red = last_red;
    }
    return prev_red;
}

/* ---- step end: loss (+ norm) all-reduce, optimizer, param all-gather ---- */

/* The optimizer step from t, after event last. With optimizer offload: the
 * gradient shard copied device->host, the CPU step, the updated shard copied
 * back; the copies take the time model's offload total less the per-gather
 * copies placed above. Else on the compute stream. Returns the last event. */
static int step_optimizer(plan_ctx *c, double t, int last) {
    sim *s = c->s;
    const dt_hardware *hw = &c->p->cluster.hw;
    double step_xfer = c->offload_s - c->per_gather_xfer;
    if (step_xfer < 0) step_xfer = 0;
    if (c->oo != DT_OFFLOAD_NONE) {
        double shard = c->sf * (c->stage == 0 ? (double)c->total : (double)c->total_pad / (double)c->W);
        /* no copy where the CPU device's optimizer reads the shard in place */
        const double d2h_bytes = dt_memory_cpu_grads_in_place(c->p) ? 0.0 : shard * (double)c->gb;
        double d2h = d2h_bytes / hw->h2d_bw;
        if (d2h > step_xfer) d2h = step_xfer;
        int e1 = add_event(s, DT_SIM_XFER, DT_SIM_D2H, -1, -1, "step", d2h, (int64_t)d2h_bytes, t, last, -1);
        int e2 = add_event(s, DT_SIM_CPU, DT_SIM_OPTIMIZER, -1, -1, "step", c->optimizer_s, 0, 0.0, e1, -1);
        return add_event(s, DT_SIM_XFER, c->oo == DT_OFFLOAD_NVME ? DT_SIM_NVME : DT_SIM_H2D, -1, -1, "step",
                         step_xfer - d2h, (int64_t)(shard * c->pb), 0.0, e2, -1);
    }
    last = add_event(s, DT_SIM_COMPUTE, DT_SIM_OPTIMIZER, -1, -1, "step", c->optimizer_s, 0, t, last, -1);
    if (step_xfer > 0) /* parameter offload without optimizer offload cannot occur; keep the total */
        last = add_event(s, DT_SIM_XFER, DT_SIM_H2D, -1, -1, "step", step_xfer, 0, 0.0, last, -1);
    return last;
}

/* Stages 1-2: the updated params all-gathered per unit after event last, nothing
 * left to hide behind, each through a bucket. Returns the last event. */
static int step_param_allgather(plan_ctx *c, int last) {
    sim *s = c->s;
    for (int u = 0; u < c->n_units && last >= 0; u++) {
        int64_t bytes = trained_part(c, c->pad[u] * c->pb);
        double t0 = s->r->events[last].t1_s;
        mem_alloc(s, t0, DT_SIMMEM_BUCKETS, bytes);
        last = add_event(s, DT_SIM_COMM, DT_SIM_ALLGATHER, -1, u, "step",
                         coll_s(&c->net, DT_COLL_ALLGATHER, (double)bytes), bytes, 0.0, last, -1);
        if (last >= 0) mem_free_at(s, s->r->events[last].t1_s, DT_SIMMEM_BUCKETS, bytes);
    }
    return last;
}

/* The step end, after the compute and the last reduction (prev_red): the scalar
 * all-reduce (loss, stage 0; loss + partial squared norm, stages 1-3; fp32),
 * the optimizer, the stage 1-2 all-gather. Returns the last event (-1: failed). */
static int sim_step_end(plan_ctx *c, int prev_red) {
    sim *s = c->s;
    double t = s->free_at[DT_SIM_COMPUTE];
    if (prev_red >= 0 && s->r->events[prev_red].t1_s > t) t = s->r->events[prev_red].t1_s;
    int last = -1;
    if (c->W > 1) {
        int64_t bytes = (int64_t)sizeof(float) * (c->stage == 0 ? 1 : 2);
        last = add_event(s, DT_SIM_COMM, DT_SIM_ALLREDUCE, -1, -1, "step",
                         coll_s(&c->net, DT_COLL_ALLREDUCE, (double)bytes), bytes, t, prev_red, -1);
        if (last >= 0) t = s->r->events[last].t1_s;
    }
    last = step_optimizer(c, t, last);
    if (c->W > 1 && (c->stage == 1 || c->stage == 2)) last = step_param_allgather(c, last);
    return last;
}

/* Places the step's events (micro-steps, then the step end) from the resident
 * memory on, and replays the memory deltas into samples. */
static int sim_schedule(plan_ctx *c, const dt_mem_breakdown *mb, dt_error *err) {
    sim *s = c->s;
    sim_resident_memory(c, mb);
    int prev_red = sim_micro_steps(c);
    if (s->failed) return sim_oom(err);
    int last = sim_step_end(c, prev_red);
    if (s->failed || last < 0) return sim_oom(err);
    mem_replay(s);
    if (s->failed) return sim_oom(err);
    return DT_OK;
}

/* ---- results: summary and critical path ---- */

/* Step time, compute busy time, communication time (and how much of it is
 * exposed), and the memory sample at the peak. */
static void sim_summarize(dt_sim_result *r) {
    for (int i = 0; i < r->n_events; i++) {
        const dt_sim_event *e = &r->events[i];
        if (e->t1_s > r->step_s) r->step_s = e->t1_s;
        if (e->stream == DT_SIM_COMPUTE) r->compute_busy_s += e->t1_s - e->t0_s;
        if (e->stream == DT_SIM_COMM) r->comm_s += e->t1_s - e->t0_s;
    }
    r->comm_exposed_s = exposed_comm(r);
    r->peak_index = 0;
    for (int i = 1; i < r->n_mem; i++)
        if (r->mem[i].total > r->mem[r->peak_index].total) r->peak_index = i;
}

/* An event started by a phase boundary (pred -1) after time 0 continues from
 * the event that ended latest at its start. */
static void link_phase_starts(const dt_sim_result *r, int *pred) {
    for (int i = 0; i < r->n_events; i++) {
        if (pred[i] >= 0 || r->events[i].t0_s <= 0) continue;
        int best = -1;
        for (int j = 0; j < r->n_events; j++)
            if (j != i && r->events[j].t1_s <= r->events[i].t0_s &&
                (best < 0 || r->events[j].t1_s > r->events[best].t1_s))
                best = j;
        pred[i] = best;
    }
}

/* Critical path: from the event ending last, follow the event that fixed each
 * start; r->critical lists it first to last. */
static int sim_critical_path(sim *s, dt_error *err) {
    dt_sim_result *r = s->r;
    int end = 0;
    for (int i = 1; i < r->n_events; i++)
        if (r->events[i].t1_s >= r->events[end].t1_s) end = i;
    link_phase_starts(r, s->pred);
    int n = 0;
    for (int i = end; i >= 0 && n <= r->n_events; i = s->pred[i]) n++;
    r->critical = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!r->critical) return sim_oom(err);
    r->n_critical = n;
    for (int i = end, k = n - 1; i >= 0 && k >= 0; i = s->pred[i]) r->critical[k--] = i;
    return DT_OK;
}

/* Reads the models, sizes the units, schedules the step, then summarises it and
 * finds its critical path. */
int dt_simulate(const dt_plan *p, dt_sim_result *r, dt_error *err) {
    memset(r, 0, sizeof *r);
    sim s;
    plan_ctx c;
    dt_mem_breakdown mb;
    sim_init(&s, p, r);
    ctx_init(&c, &s, p);
    if (ctx_read_models(&c, &mb, err)) return err->code;
    if (c.K < 0 || c.K > c.L) return dt_errorf(err, DT_EINVAL, "simulate: ckpt_layers %lld is not in 0..%lld",
                                               (long long)c.K, (long long)c.L);
    int rc = ctx_size_units(&c, err);
    if (rc == DT_OK) rc = sim_schedule(&c, &mb, err);
    if (rc == DT_OK) {
        sim_summarize(r);
        rc = sim_critical_path(&s, err);
    }
    ctx_free(&c);
    free(s.pend);
    free(s.pred);
    if (rc) dt_sim_free(r);
    return rc;
}

void dt_sim_free(dt_sim_result *r) {
    if (!r) return;
    free(r->events);
    free(r->mem);
    free(r->critical);
    memset(r, 0, sizeof *r);
}

const char *dt_sim_mem_name(dt_sim_mem_cat cat) {
    static const char *const names[DT_SIMMEM_COUNT] = {"params",     "grads",   "optimizer",
                                                      "activations", "gathered", "unit_grads",
                                                      "buckets",    "workspace", "reserve"};
    return (unsigned)cat < DT_SIMMEM_COUNT ? names[cat] : "?";
}
