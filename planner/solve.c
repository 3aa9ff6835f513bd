/* solve.c — the planner's MILP (GLPK) and its brute-force oracle (dt_solve.h).
 *
 * Candidates: every (stage, offload_optimizer, offload_param, micro-batch) the
 * request allows and dt_plan_validate accepts; micro-batch runs over the divisors
 * of global_batch / world, so the accumulation is an integer. For each candidate
 * the memory model is evaluated at every K = 0..L checkpointed layers and cut into
 * maximal runs on which (device, host, NVMe) bytes are exactly affine in K; each
 * run is one MILP "choice" with x (binary) and k (integer, lo·x <= k <= hi·x).
 * Formulation, linearisation and tolerances: docs/solver.md. */
#include "dt_solve.h"

#include <glpk.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_memory.h"
#include "dt_timemodel.h"

/* Memory rows are written in GiB so coefficients stay near 1..1e3 (docs/solver.md "Numerics"). */
#define DT_SOLVE_MEM_SCALE (1.0 / 1073741824.0)
/* GLPK MIP time limit (ms): generous; a solve takes milliseconds. */
#define DT_SOLVE_TM_LIM_MS 10000
/* Rounds of "verify exactly, cut, re-solve" before giving up (docs/solver.md). */
#define DT_SOLVE_MAX_CUT_ROUNDS 16

typedef struct {
    int stage;
    dt_offload oo, op;
    int sel;                    /* selective attention recompute */
    int64_t mb, accum;
    int64_t lo, hi;             /* K range of this affine run */
    int64_t dev0, host0, nvme0; /* bytes at K = lo */
    int64_t ddev, dhost, dnvme; /* bytes per extra checkpointed layer */
    dt_time_terms tt;
    int cand;                   /* index of the (stage, offload, mb) candidate */
} dt_choice_run;

typedef struct {
    const dt_solve_request *rq;
    dt_choice_run *runs;
    int n_runs, cap_runs;
    int n_cand;
    int64_t L;
    /* lazy cuts from exact verification: k_j >= kmin[j] * x_j (kmin > hi bans j) */
    int64_t *kmin;
} dt_ctx;

static int64_t mem_dev(const dt_mem_breakdown *m) { return m->total; }

static void plan_for(const dt_solve_request *rq, int stage, dt_offload oo, dt_offload op, int sel, int64_t mb,
                     int64_t K, dt_plan *p) {
    *p = rq->base;
    int64_t W = p->cluster.nodes * p->cluster.gpus_per_node;
    p->parallel.world_size = W;
    p->parallel.zero_stage = stage;
    p->parallel.offload_optimizer = oo;
    p->parallel.offload_param = op;
    if (oo != DT_OFFLOAD_NVME && op != DT_OFFLOAD_NVME) p->parallel.nvme_path[0] = '\0';   /* "" if unused */
    p->batch.micro_batch = mb;
    p->batch.grad_accum = rq->base.batch.global_batch / (W * mb);
    p->activations.ckpt_layers = K;
    p->activations.selective = sel;
    p->prediction.valid = 0;
}

/* Selective attention recompute is a choice where it saves memory: HF model code
 * (runtimes deepspeed / fsdp) with eager attention, whose s x s probabilities it drops;
 * sdpa and flash keep none to drop. */
static int n_selective(const dt_solve_request *rq) {
    const dt_runtime *r = &rq->base.runtime;
    return r->kind != DT_RUNTIME_DTRUN && r->attention == DT_KERNEL_EAGER ? 2 : 1;
}

/* What a node's host memory holds: its host-side offload, and on a CPU plan also
 * every rank's "device" memory, which is the same RAM (the ranks of a node share one
 * memory; docs/memory-model.md "CPU ranks share the node"). */
int64_t dt_solve_node_host_bytes(const dt_plan *p, const dt_mem_breakdown *m) {
    if (p->cluster.device != DT_DEVICE_CPU) return m->host_total;
    int64_t ranks = p->cluster.gpus_per_node, dev = mem_dev(m);
    if (dt_memory_hf_on_cpu(p))   /* a rank's total already holds its share of the host terms */
        return dev > INT64_MAX / (ranks > 0 ? ranks : 1) ? INT64_MAX : ranks * dev;
    return dev > INT64_MAX / 2 / (ranks > 0 ? ranks : 1) ? INT64_MAX : m->host_total + ranks * dev;
}

static int64_t node_host_bytes(const dt_solve_request *rq, const dt_mem_breakdown *m) {
    return dt_solve_node_host_bytes(&rq->base, m);
}

static int fits(const dt_solve_request *rq, const dt_mem_breakdown *m) {
    return mem_dev(m) <= rq->mem_limit_bytes && node_host_bytes(rq, m) <= rq->host_limit_bytes &&
           m->nvme <= rq->nvme_limit_bytes;
}

int dt_solve_check(const dt_solve_request *rq, dt_error *err) {
    const dt_plan *b = &rq->base;
    if (b->cluster.nodes < 1 || b->cluster.gpus_per_node < 1)
        return dt_errorf(err, DT_EINVAL, "nodes and gpus per node must be >= 1");
    int64_t W = b->cluster.nodes * b->cluster.gpus_per_node;
    if (b->batch.global_batch < 1 || b->batch.global_batch % W)
        return dt_errorf(err, DT_EINVAL,
                         "--global-batch %lld is not a multiple of the world size %lld (--gpus): every rank takes "
                         "the same number of sequences per step; e.g. --global-batch %lld",
                         (long long)b->batch.global_batch, (long long)W,
                         (long long)(W * (b->batch.global_batch / W > 0 ? b->batch.global_batch / W : 1)));
    /* every micro-batch that divides global / world is a candidate: bound the walk */
    int64_t per_rank = b->batch.global_batch / W;
    if (per_rank > DT_SOLVE_MAX_SEQS_PER_RANK)
        return dt_errorf(err, DT_EINVAL,
                         "--global-batch %lld gives %lld sequences per rank per step over %lld rank(s), above the "
                         "%lld the solver enumerates micro-batches for; lower --global-batch to %lld or less, or "
                         "raise --gpus",
                         (long long)b->batch.global_batch, (long long)per_rank, (long long)W,
                         (long long)DT_SOLVE_MAX_SEQS_PER_RANK, (long long)(DT_SOLVE_MAX_SEQS_PER_RANK * W));
    if (rq->mem_limit_bytes <= 0 || rq->host_limit_bytes <= 0 || rq->nvme_limit_bytes < 0)
        return dt_errorf(err, DT_EINVAL, "memory limits must be positive");
    if (!(rq->stage_mask & 0xFu))
        return dt_errorf(err, DT_EINVAL, "no ZeRO stage allowed (--stages takes a list like 0,1,2,3)");
    if (b->model.n_layer < 1) return dt_errorf(err, DT_EINVAL, "model has no layers");
    return DT_OK;
}

static int push_run(dt_ctx *c, const dt_choice_run *r, dt_error *err) {
    if (c->n_runs == c->cap_runs) {
        int cap = c->cap_runs ? 2 * c->cap_runs : 64;
        dt_choice_run *nr = realloc(c->runs, (size_t)cap * sizeof *nr);
        if (!nr) return dt_errorf(err, DT_ENOMEM, "solver: out of memory");
        c->runs = nr;
        c->cap_runs = cap;
    }
    c->runs[c->n_runs++] = *r;
    return DT_OK;
}

/* Offload options per stage (DeepSpeed: optimizer offload from stage 1, param offload stage 3). */
static const dt_offload k_offloads[3] = {DT_OFFLOAD_NONE, DT_OFFLOAD_CPU, DT_OFFLOAD_NVME};

/* Calls fn(stage, oo, op, sel, mb) for every candidate of the request (validated plans only). */
typedef int (*dt_cand_fn)(void *ud, int stage, dt_offload oo, dt_offload op, int sel, int64_t mb,
                          dt_error *err);
static int for_each_candidate(const dt_solve_request *rq, dt_cand_fn fn, void *ud, int *n_out,
                              dt_error *err) {
    int64_t W = rq->base.cluster.nodes * rq->base.cluster.gpus_per_node;
    int64_t per_rank = rq->base.batch.global_batch / W;
    int n = 0;
    dt_error first;
    dt_error_clear(&first);
    for (int s = 0; s < 4; s++) {
        if (!(rq->stage_mask & (1u << s))) continue;
        int n_oo = (s >= 1 && rq->allow_offload) ? 3 : 1;
        int n_op = (s == 3 && rq->allow_offload) ? 3 : 1;
        for (int a = 0; a < n_oo; a++)
            for (int o = 0; o < n_op; o++)
                for (int sel = 0; sel < n_selective(rq); sel++)
                    for (int64_t mb = 1; mb <= per_rank; mb++) {
                        if (per_rank % mb) continue;
                        dt_plan p;
                        dt_error e;
                        dt_error_clear(&e);
                        plan_for(rq, s, k_offloads[a], k_offloads[o], sel, mb, 0, &p);
                        if (dt_plan_validate(&p, &e)) {
                            if (!first.code) first = e;
                            continue;
                        }
                        n++;
                        if (fn(ud, s, k_offloads[a], k_offloads[o], sel, mb, err)) return err->code;
                    }
    }
    *n_out = n;
    if (n == 0) {
        if (first.code) return dt_errorf(err, DT_EINVAL, "no valid configuration: %s", first.msg);
        return dt_errorf(err, DT_EINVAL, "no candidate configuration (check --stages)");
    }
    return DT_OK;
}

/* ---- building the runs: exact memory at every K, split into affine pieces ---- */
static int add_candidate_runs(void *ud, int stage, dt_offload oo, dt_offload op, int sel, int64_t mb,
                              dt_error *err) {
    dt_ctx *c = ud;
    const int64_t L = c->L;
    dt_plan p;
    plan_for(c->rq, stage, oo, op, sel, mb, 0, &p);
    dt_choice_run r;
    memset(&r, 0, sizeof r);
    r.stage = stage, r.oo = oo, r.op = op, r.sel = sel, r.mb = mb, r.accum = p.batch.grad_accum;
    r.cand = c->n_cand++;
    if (dt_time_terms_build(&p, &r.tt, err)) return err->code;
    int64_t prev[3] = {0, 0, 0}, d[3] = {0, 0, 0};
    for (int64_t K = 0; K <= L; K++) {
        dt_mem_breakdown m;
        p.activations.ckpt_layers = K;
        if (dt_memory_estimate(&p, &m, err)) return err->code;
        int64_t v[3] = {mem_dev(&m), node_host_bytes(c->rq, &m), m.nvme};
        if (K == 0) {
            r.lo = r.hi = 0;
            r.dev0 = v[0], r.host0 = v[1], r.nvme0 = v[2];
        } else if (K == r.lo + 1) {
            for (int i = 0; i < 3; i++) d[i] = v[i] - prev[i];
            r.hi = K;
        } else if (v[0] - prev[0] == d[0] && v[1] - prev[1] == d[1] && v[2] - prev[2] == d[2]) {
            r.hi = K;
        } else { /* the affine run ends at K - 1; start a new one at K */
            r.ddev = d[0], r.dhost = d[1], r.dnvme = d[2];
            if (push_run(c, &r, err)) return err->code;
            r.lo = r.hi = K;
            r.dev0 = v[0], r.host0 = v[1], r.nvme0 = v[2];
            d[0] = d[1] = d[2] = 0;
        }
        for (int i = 0; i < 3; i++) prev[i] = v[i];
    }
    r.ddev = d[0], r.dhost = d[1], r.dnvme = d[2];
    return push_run(c, &r, err);
}

static int64_t run_dev(const dt_choice_run *r, int64_t K) { return r->dev0 + (K - r->lo) * r->ddev; }
static int64_t run_host(const dt_choice_run *r, int64_t K) { return r->host0 + (K - r->lo) * r->dhost; }
static int64_t run_nvme(const dt_choice_run *r, int64_t K) { return r->nvme0 + (K - r->lo) * r->dnvme; }

/* ---- the MILP ---- */
static jmp_buf g_glpk_fail;
static void on_glpk_error(void *info) {
    (void)info;
    longjmp(g_glpk_fail, 1);
}

/* Column layout per run j: x_j, k_j, then one e per overlap phase. */
typedef struct {
    int *col0;      /* first column of run j (x), 0 = no columns; k = col0 + 1; e_i = col0 + 2 + i */
    int n_cols;
    int *ia, *ja;   /* matrix entries for glp_load_matrix (1-based): row, column, value */
    double *ar;
    int cap_nz;
} dt_milp_layout;

/* The fixed rows; each run then adds two link rows and two rows per overlap phase. */
enum { R_ONEHOT = 1, R_DEV, R_HOST, R_NVME, R_FIXED_COUNT = 4 };

/* What the model builders below write into. */
typedef struct {
    glp_prob *lp;
    const dt_milp_layout *ly;
    int nz;         /* matrix entries written so far */
    double ts;      /* time scale: 1 / the fastest K-independent time */
} dt_milp_builder;

/* Frees the layout's arrays. */
static void layout_free(dt_milp_layout *ly) {
    free(ly->col0), free(ly->ia), free(ly->ja), free(ly->ar);
}

/* Gives columns to the runs of the stages in stage_mask that no cut has banned,
 * and allocates room for their matrix entries. */
static int layout_build(const dt_ctx *c, unsigned stage_mask, dt_milp_layout *ly, dt_error *err) {
    memset(ly, 0, sizeof *ly);
    ly->col0 = calloc((size_t)c->n_runs, sizeof *ly->col0);
    if (!ly->col0) return dt_errorf(err, DT_ENOMEM, "solver: out of memory");
    int nz_est = 8;
    for (int j = 0; j < c->n_runs; j++) {
        if (!((stage_mask >> c->runs[j].stage) & 1u) || c->kmin[j] > c->runs[j].hi) continue;
        ly->col0[j] = ly->n_cols + 1;
        ly->n_cols += 2 + c->runs[j].tt.n_phases;
        nz_est += 12 + 6 * c->runs[j].tt.n_phases; /* upper bound of the nz_add calls for run j */
    }
    ly->cap_nz = nz_est + 1;
    ly->ia = malloc((size_t)ly->cap_nz * sizeof *ly->ia);
    ly->ja = malloc((size_t)ly->cap_nz * sizeof *ly->ja);
    ly->ar = malloc((size_t)ly->cap_nz * sizeof *ly->ar);
    if (!ly->ia || !ly->ja || !ly->ar) {
        layout_free(ly);
        return dt_errorf(err, DT_ENOMEM, "solver: out of memory");
    }
    return DT_OK;
}

/* Appends the matrix entry (row i, column j) = v. */
static void nz_add(dt_milp_builder *b, int i, int j, double v) {
    ++b->nz;
    b->ly->ia[b->nz] = i;
    b->ly->ja[b->nz] = j;
    b->ly->ar[b->nz] = v;
}

/* Row 1: exactly one run is chosen; rows 2-4: device memory less the reserve,
 * host and NVMe, each within its limit (GiB). */
static void milp_add_fixed_rows(glp_prob *lp, const dt_solve_request *rq) {
    glp_add_rows(lp, R_FIXED_COUNT);
    glp_set_row_bnds(lp, R_ONEHOT, GLP_FX, 1.0, 1.0);
    glp_set_row_bnds(lp, R_DEV, GLP_UP, 0.0,
                     (double)(rq->mem_limit_bytes - rq->base.cluster.hw.reserve_bytes) * DT_SOLVE_MEM_SCALE);
    glp_set_row_bnds(lp, R_HOST, GLP_UP, 0.0, (double)rq->host_limit_bytes * DT_SOLVE_MEM_SCALE);
    glp_set_row_bnds(lp, R_NVME, GLP_UP, 0.0, (double)rq->nvme_limit_bytes * DT_SOLVE_MEM_SCALE);
}

/* Time rows are in units of the fastest K-independent time, so the objective is
 * O(1) and GLPK's absolute tolerances (1e-7) are far below DT_SOLVE_TIME_TIE_REL.
 * Returns the factor that converts seconds to those units. */
static double milp_time_scale(const dt_ctx *c, const dt_milp_layout *ly) {
    double tref = 0.0;
    for (int j = 0; j < c->n_runs; j++)
        if (ly->col0[j] && c->runs[j].tt.base_s > 0 && (tref == 0.0 || c->runs[j].tt.base_s < tref))
            tref = c->runs[j].tt.base_s;
    return tref > 0 ? 1.0 / tref : 1.0;
}

/* Run r's x (binary) and k (integer in 0..hi) columns, their objective
 * base·x + per_ckpt·k, and their entries in the fixed rows: the one-hot and the
 * memory, affine in k on [lo, hi]: a·x + d·k with a = m(lo) - lo·d. */
static void milp_add_run_columns(dt_milp_builder *b, const dt_choice_run *r, int x, double reserve) {
    glp_prob *lp = b->lp;
    int k = x + 1;
    glp_set_col_kind(lp, x, GLP_BV);
    glp_set_col_kind(lp, k, GLP_IV);
    glp_set_col_bnds(lp, k, GLP_DB, 0.0, (double)r->hi);
    if (r->hi == 0) glp_set_col_bnds(lp, k, GLP_FX, 0.0, 0.0);
    glp_set_obj_coef(lp, x, r->tt.base_s * b->ts);
    glp_set_obj_coef(lp, k, r->tt.per_ckpt_s * b->ts);
    nz_add(b, R_ONEHOT, x, 1.0);
    double a_dev = ((double)r->dev0 - reserve - (double)r->lo * (double)r->ddev) * DT_SOLVE_MEM_SCALE;
    nz_add(b, R_DEV, x, a_dev);
    if (r->ddev) nz_add(b, R_DEV, k, (double)r->ddev * DT_SOLVE_MEM_SCALE);
    nz_add(b, R_HOST, x, ((double)r->host0 - (double)r->lo * (double)r->dhost) * DT_SOLVE_MEM_SCALE);
    if (r->dhost) nz_add(b, R_HOST, k, (double)r->dhost * DT_SOLVE_MEM_SCALE);
    nz_add(b, R_NVME, x, ((double)r->nvme0 - (double)r->lo * (double)r->dnvme) * DT_SOLVE_MEM_SCALE);
    if (r->dnvme) nz_add(b, R_NVME, k, (double)r->dnvme * DT_SOLVE_MEM_SCALE);
}

/* Linking rows lo·x <= k <= hi·x: k is 0 unless the run is chosen; lo includes
 * any cut's minimum. */
static void milp_add_link_rows(dt_milp_builder *b, const dt_choice_run *r, int x, int64_t lo) {
    glp_prob *lp = b->lp;
    int k = x + 1;
    int row = glp_add_rows(lp, 2);
    glp_set_row_bnds(lp, row, GLP_UP, 0.0, 0.0);
    nz_add(b, row, k, 1.0);
    nz_add(b, row, x, -(double)r->hi);
    glp_set_row_bnds(lp, row + 1, GLP_LO, 0.0, 0.0);
    nz_add(b, row + 1, k, 1.0);
    if (lo) nz_add(b, row + 1, x, -(double)lo);
}

/* Exposed communication of each overlap phase, the epigraph of a max:
 *   e >= tail·x,  e >= (comm - work0)·x - work_per_ckpt·k
 * with e in the objective at the phase's multiplicity. */
static void milp_add_exposure_rows(dt_milp_builder *b, const dt_choice_run *r, int x) {
    glp_prob *lp = b->lp;
    int k = x + 1;
    for (int i = 0; i < r->tt.n_phases; i++) {
        const dt_time_phase *ph = &r->tt.phase[i];
        int e = x + 2 + i;
        glp_set_col_kind(lp, e, GLP_CV);
        glp_set_col_bnds(lp, e, GLP_LO, 0.0, 0.0);
        glp_set_obj_coef(lp, e, ph->mult);
        int er = glp_add_rows(lp, 2);
        glp_set_row_bnds(lp, er, GLP_LO, 0.0, 0.0);
        nz_add(b, er, e, 1.0);
        if (ph->tail_s) nz_add(b, er, x, -ph->tail_s * b->ts);
        glp_set_row_bnds(lp, er + 1, GLP_LO, 0.0, 0.0);
        nz_add(b, er + 1, e, 1.0);
        if (ph->comm_s - ph->work0_s) nz_add(b, er + 1, x, -(ph->comm_s - ph->work0_s) * b->ts);
        if (ph->work_per_ckpt_s) nz_add(b, er + 1, k, ph->work_per_ckpt_s * b->ts);
    }
}

/* The whole model in lp, minimising step time: columns, fixed rows, and each
 * run's columns, link rows and exposure rows; then the matrix is loaded. */
static void milp_build(glp_prob *lp, const dt_ctx *c, const dt_milp_layout *ly) {
    const dt_solve_request *rq = c->rq;
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_cols(lp, ly->n_cols);
    milp_add_fixed_rows(lp, rq);
    dt_milp_builder b = {lp, ly, 0, milp_time_scale(c, ly)};
    const double reserve = (double)rq->base.cluster.hw.reserve_bytes;
    for (int j = 0; j < c->n_runs; j++) {
        const dt_choice_run *r = &c->runs[j];
        if (!ly->col0[j]) continue;
        int x = ly->col0[j];
        int64_t lo = r->lo > c->kmin[j] ? r->lo : c->kmin[j];
        milp_add_run_columns(&b, r, x, reserve);
        milp_add_link_rows(&b, r, x, lo);
        milp_add_exposure_rows(&b, r, x);
    }
    glp_load_matrix(lp, b.nz, ly->ia, ly->ja, ly->ar);
}

/* glp_intopt settings: presolve, silent, DT_SOLVE_TM_LIM_MS, no MIP gap. */
static void milp_init_parm(glp_iocp *parm) {
    glp_init_iocp(parm);
    parm->presolve = GLP_ON;
    parm->msg_lev = GLP_MSG_OFF;
    parm->tm_lim = DT_SOLVE_TM_LIM_MS;
    parm->mip_gap = 0.0;
}

/* Pass 1: minimum step time. DT_OK when GLPK found a solution, DT_EINFEASIBLE,
 * or an error. */
static int milp_min_time(glp_prob *lp, const glp_iocp *parm, int *n_solves, dt_error *err) {
    int grc = glp_intopt(lp, parm);
    int st = glp_mip_status(lp);
    ++*n_solves;
    if (grc == GLP_ENOPFS || grc == GLP_ENODFS || (grc == 0 && st == GLP_NOFEAS)) return DT_EINFEASIBLE;
    if (grc != 0 && grc != GLP_ETMLIM && grc != GLP_EMIPGAP)
        return dt_errorf(err, DT_EINTERNAL, "solver: glp_intopt failed (code %d)", grc);
    if (st != GLP_OPT && st != GLP_FEAS)
        return grc == GLP_ETMLIM ? dt_errorf(err, DT_EINTERNAL, "solver: GLPK time limit with no solution")
                                 : DT_EINFEASIBLE;
    return DT_OK;
}

/* Turns the objective into a row, objective <= limit, and clears it. */
static int milp_objective_to_row(glp_prob *lp, int ncol, double limit, dt_error *err) {
    int tr = glp_add_rows(lp, 1);
    int *idx = malloc((size_t)(ncol + 1) * sizeof *idx);
    double *val = malloc((size_t)(ncol + 1) * sizeof *val);
    if (!idx || !val) {
        free(idx), free(val);
        return dt_errorf(err, DT_ENOMEM, "solver: out of memory");
    }
    int n = 0;
    for (int col = 1; col <= ncol; col++) {
        double oc = glp_get_obj_coef(lp, col);
        if (oc != 0.0) idx[++n] = col, val[n] = oc;
    }
    glp_set_mat_row(lp, tr, n, idx, val);
    glp_set_row_bnds(lp, tr, GLP_UP, 0.0, limit);
    for (int col = 1; col <= ncol; col++) glp_set_obj_coef(lp, col, 0.0);
    free(idx), free(val);
    return DT_OK;
}

/* Pass 2: among plans within the tie tolerance of the best time, least device
 * memory (the memory row's coefficients, without the reserve). */
static int milp_tie_break(glp_prob *lp, const dt_ctx *c, const dt_milp_layout *ly, const glp_iocp *parm,
                          int *n_solves, dt_error *err) {
    double tstar = glp_mip_obj_val(lp);
    if (milp_objective_to_row(lp, ly->n_cols, tstar * (1.0 + DT_SOLVE_TIME_TIE_REL), err)) return err->code;
    for (int j = 0; j < c->n_runs; j++) {
        const dt_choice_run *r = &c->runs[j];
        if (!ly->col0[j]) continue;
        glp_set_obj_coef(lp, ly->col0[j], ((double)r->dev0 - (double)r->lo * (double)r->ddev) * DT_SOLVE_MEM_SCALE);
        glp_set_obj_coef(lp, ly->col0[j] + 1, (double)r->ddev * DT_SOLVE_MEM_SCALE);
    }
    int grc = glp_intopt(lp, parm);
    int st = glp_mip_status(lp);
    ++*n_solves;
    if (grc != 0 && grc != GLP_ETMLIM && grc != GLP_EMIPGAP)
        return dt_errorf(err, DT_EINTERNAL, "solver: tie-break glp_intopt failed (code %d)", grc);
    if (st != GLP_OPT && st != GLP_FEAS)
        return dt_errorf(err, DT_EINTERNAL, "solver: tie-break found no solution (status %d)", st);
    return DT_OK;
}

/* The chosen run (x_j = 1) into *pick and its checkpointed layers k_j into *pick_k. */
static int milp_read_pick(glp_prob *lp, const dt_ctx *c, const dt_milp_layout *ly, int *pick, int64_t *pick_k,
                          dt_error *err) {
    *pick = -1;
    for (int j = 0; j < c->n_runs; j++)
        if (ly->col0[j] && lround(glp_mip_col_val(lp, ly->col0[j])) == 1) {
            *pick = j;
            *pick_k = lround(glp_mip_col_val(lp, ly->col0[j] + 1));
        }
    if (*pick < 0) return dt_errorf(err, DT_EINTERNAL, "solver: MILP solution selects no choice");
    return DT_OK;
}

/* Solves min time (then min device memory among time-ties) over the runs whose
 * stage is in stage_mask. Returns DT_OK with *pick and *pick_k, DT_EINFEASIBLE, or an
 * error. n_rows_out/n_cols_out report the size. */
static int milp_solve(dt_ctx *c, unsigned stage_mask, int *pick, int64_t *pick_k, int *n_solves,
                      int *n_rows_out, int *n_cols_out, dt_error *err) {
    dt_milp_layout ly;
    if (layout_build(c, stage_mask, &ly, err)) return err->code;
    if (ly.n_cols == 0) { /* no run of these stages is left */
        layout_free(&ly);
        return DT_EINFEASIBLE;
    }
    glp_prob *volatile lp = NULL;
    if (setjmp(g_glpk_fail)) {
        /* GLPK hit a fatal error: only glp_free_env is safe now (GLPK reference manual, glp_error_hook) */
        glp_error_hook(NULL, NULL);
        glp_free_env();
        layout_free(&ly);
        return dt_errorf(err, DT_EINTERNAL, "solver: GLPK reported a fatal error (model of %d columns)",
                         ly.n_cols);
    }
    glp_error_hook(on_glpk_error, NULL);
    glp_term_out(GLP_OFF);
    lp = glp_create_prob();
    milp_build(lp, c, &ly);
    glp_iocp parm;
    milp_init_parm(&parm);
    int rc = milp_min_time(lp, &parm, n_solves, err);
    if (rc == DT_OK) rc = milp_tie_break(lp, c, &ly, &parm, n_solves, err);
    if (rc == DT_OK) rc = milp_read_pick(lp, c, &ly, pick, pick_k, err);
    *n_rows_out = glp_get_num_rows(lp);
    *n_cols_out = ly.n_cols;
    glp_delete_prob(lp);
    glp_error_hook(NULL, NULL);
    layout_free(&ly);
    return rc;
}

static void fill_choice(const dt_solve_request *rq, int stage, dt_offload oo, dt_offload op, int sel, int64_t mb,
                        int64_t K, dt_solve_choice *ch, dt_plan *plan_out) {
    dt_plan p;
    dt_error e;
    plan_for(rq, stage, oo, op, sel, mb, K, &p);
    memset(ch, 0, sizeof *ch);
    ch->valid = 1;
    ch->zero_stage = stage, ch->offload_optimizer = oo, ch->offload_param = op, ch->selective = sel;
    ch->micro_batch = mb, ch->grad_accum = p.batch.grad_accum, ch->ckpt_layers = K;
    dt_time_breakdown t;
    if (dt_memory_estimate(&p, &ch->mem, &e) == DT_OK && dt_time_estimate(&p, &t, &e) == DT_OK) {
        ch->step_s = t.step_s;
        ch->fits = fits(rq, &ch->mem);
    }
    if (plan_out) *plan_out = p;
}

static void fill_from_run(const dt_ctx *c, int j, int64_t K, dt_solve_choice *ch, dt_plan *p) {
    const dt_choice_run *r = &c->runs[j];
    fill_choice(c->rq, r->stage, r->oo, r->op, r->sel, r->mb, K, ch, p);
}

/* Smallest device memory over the runs of the stages in mask that fit host and NVMe
 * (or, if none does, over all of them). */
static int min_memory_run(const dt_ctx *c, unsigned mask, int64_t *K_out) {
    int best = -1;
    int64_t best_mem = 0;
    for (int pass = 0; pass < 2 && best < 0; pass++)
        for (int j = 0; j < c->n_runs; j++) {
            const dt_choice_run *r = &c->runs[j];
            if (!((mask >> r->stage) & 1u)) continue;
            /* memory is affine on the run: its minimum is at an end */
            int64_t K = run_dev(r, r->hi) < run_dev(r, r->lo) ? r->hi : r->lo;
            if (pass == 0 && (run_host(r, K) > c->rq->host_limit_bytes ||
                              run_nvme(r, K) > c->rq->nvme_limit_bytes))
                continue;
            if (best < 0 || run_dev(r, K) < best_mem) best = j, best_mem = run_dev(r, K), *K_out = K;
        }
    return best;
}

static const char *stage_label(int s) {
    static const char *const n[4] = {"DDP (stage 0)", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    return s >= 0 && s < 4 ? n[s] : "?";
}

static void describe(const dt_solve_choice *ch, char *buf, size_t n) {
    snprintf(buf, n, "%s, offload optimizer %s, param %s, micro-batch %lld x accumulation %lld, %lld checkpointed layers%s",
             stage_label(ch->zero_stage), dt_offload_name(ch->offload_optimizer),
             dt_offload_name(ch->offload_param), (long long)ch->micro_batch, (long long)ch->grad_accum,
             (long long)ch->ckpt_layers, ch->selective ? ", selective attention recompute" : "");
}

/* NVMe candidates need a directory for their files (the request's nvme_path): without
 * one they are not candidates, and an infeasible answer says how to add them. */
static const char *nvme_hint(const dt_solve_request *rq) {
    return !rq->base.parallel.nvme_path[0] && rq->allow_offload && (rq->stage_mask & (1u << 3))
               ? "; NVMe offload (ZeRO-Infinity) is a candidate only with --nvme-path DIR"
               : "";
}

static int infeasible_message(const dt_solve_request *rq, const dt_solve_choice *mm, dt_error *err) {
    char cfg[256];
    describe(mm, cfg, sizeof cfg);
    double gib = 1073741824.0;
    if (node_host_bytes(rq, &mm->mem) > rq->host_limit_bytes || mm->mem.nvme > rq->nvme_limit_bytes)
        return dt_errorf(err, DT_EINFEASIBLE,
                         "nothing fits: even the smallest configuration (%s) needs %.2f GiB host memory per node%s "
                         "(limit %.2f) and %.2f GiB NVMe (limit %.2f)%s%s",
                         cfg, node_host_bytes(rq, &mm->mem) / gib,
                         rq->base.cluster.device == DT_DEVICE_CPU ? " (its ranks' memory included: they share it)" : "",
                         rq->host_limit_bytes / gib, mm->mem.nvme / gib, rq->nvme_limit_bytes / gib,
                         rq->base.cluster.device == DT_DEVICE_CPU ? "; fewer ranks per node (--gpus) or --host-mem "
                                                                    "if the machine has more" : "",
                         nvme_hint(rq));
    const dt_hardware *hw = &rq->base.cluster.hw;
    if (mem_dev(&mm->mem) > hw->device_mem_bytes)   /* no --mem can help: say what can */
        return dt_errorf(err, DT_EINFEASIBLE,
                         "nothing fits in %.2f GiB per GPU; the smallest memory that fits is %.2f GiB (with %s), more "
                         "than the %.2f GiB per device of hardware profile %s: raise --gpus%s, or use a --hardware "
                         "profile with more memory",
                         rq->mem_limit_bytes / gib, mem_dev(&mm->mem) / gib, cfg, hw->device_mem_bytes / gib, hw->name,
                         rq->allow_offload ? "" : ", drop --no-offload");
    return dt_errorf(err, DT_EINFEASIBLE,
                     "nothing fits in %.2f GiB per GPU; the smallest memory that fits is %.2f GiB "
                     "(--mem %.0fM) with %s",
                     rq->mem_limit_bytes / gib, mem_dev(&mm->mem) / gib,
                     ceil((double)mem_dev(&mm->mem) / 1048576.0), cfg);
}

/* Solves for the stages in mask, verifying the pick exactly and cutting until it holds. */
static int solve_verified(dt_ctx *c, unsigned mask, dt_solve_result *out, int *pick, int64_t *K,
                          dt_error *err) {
    for (int round = 0; round < DT_SOLVE_MAX_CUT_ROUNDS; round++) {
        int rc = milp_solve(c, mask, pick, K, &out->milp_solves, &out->n_rows, &out->n_columns, err);
        if (rc) return rc;
        const dt_choice_run *r = &c->runs[*pick];
        if (run_dev(r, *K) <= c->rq->mem_limit_bytes && run_host(r, *K) <= c->rq->host_limit_bytes &&
            run_nvme(r, *K) <= c->rq->nvme_limit_bytes)
            return DT_OK;
        /* GLPK accepted the pick within its feasibility tolerance but it does not fit
         * exactly: more checkpointing is the only way this run can fit (memory is
         * non-increasing in K on it), else ban it */
        c->kmin[*pick] = r->ddev < 0 && r->dhost <= 0 && r->dnvme <= 0 ? *K + 1 : r->hi + 1;
    }
    return dt_errorf(err, DT_EINTERNAL, "solver: exact verification did not converge");
}

static int ctx_build(dt_ctx *c, const dt_solve_request *rq, dt_solve_result *out, dt_error *err) {
    memset(c, 0, sizeof *c);
    c->rq = rq;
    c->L = rq->base.model.n_layer;
    if (for_each_candidate(rq, add_candidate_runs, c, &out->n_candidates, err)) return err->code;
    c->kmin = calloc((size_t)c->n_runs, sizeof *c->kmin);
    if (!c->kmin) return dt_errorf(err, DT_ENOMEM, "solver: out of memory");
    return DT_OK;
}

static void ctx_free(dt_ctx *c) {
    free(c->runs);
    free(c->kmin);
}

int dt_solve(const dt_solve_request *rq, dt_solve_result *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    if (dt_solve_check(rq, err)) return err->code;
    dt_ctx c;
    int rc = ctx_build(&c, rq, out, err);
    if (rc) {
        ctx_free(&c);
        return rc;
    }
    int pick;
    int64_t K;
    rc = solve_verified(&c, rq->stage_mask, out, &pick, &K, err);
    if (rc == DT_OK) {
        fill_from_run(&c, pick, K, &out->best, &out->plan);
        rc = dt_predict(&out->plan, err);
    }
    const int main_rows = out->n_rows, main_cols = out->n_columns; /* report the full model's size */
    /* the best of every other allowed stage, or its least-memory configuration */
    for (int s = 0; s < 4 && (rc == DT_OK || rc == DT_EINFEASIBLE); s++) {
        if (!((rq->stage_mask >> s) & 1u)) continue;
        /* the chosen stage is solved on its own too: the overall pick broke a near-tie
         * across stages, a stage's own best breaks ties within that stage only */
        int srcp = rc == DT_OK ? solve_verified(&c, 1u << s, out, &pick, &K, err) : DT_EINFEASIBLE;
        if (srcp == DT_OK) {
            fill_from_run(&c, pick, K, &out->per_stage[s], NULL);
        } else if (srcp == DT_EINFEASIBLE) {
            int j = min_memory_run(&c, 1u << s, &K);
            if (j >= 0) fill_from_run(&c, j, K, &out->per_stage[s], NULL);
        } else {
            rc = srcp;
        }
    }
    out->n_rows = main_rows, out->n_columns = main_cols;
    if (rc == DT_EINFEASIBLE) {
        int j = min_memory_run(&c, rq->stage_mask, &K);
        if (j >= 0) {
            fill_from_run(&c, j, K, &out->min_memory, NULL);
            infeasible_message(rq, &out->min_memory, err);
        } else {
            dt_errorf(err, DT_EINFEASIBLE, "nothing fits");
        }
    }
    ctx_free(&c);
    glp_free_env();
    return rc;
}

/* ---- brute force: every candidate, every K, the models called directly ----
 * Lexicographic like the MILP: pass 0 finds the fastest fitting time (overall and
 * per stage) and the least-memory choice; pass 1 takes, among fitting choices
 * within DT_SOLVE_TIME_TIE_REL of that time, the one with least device memory. */
typedef struct {
    const dt_solve_request *rq;
    dt_solve_result *out;
    int64_t L;
    int pass;
    double tmin[4], tmin_all;   /* pass 0 results; < 0 = none fits */
} dt_enum_ctx;

/* Infeasible candidates rank by device memory among those that fit host and NVMe. */
static int better_infeasible(const dt_solve_request *rq, const dt_solve_choice *a, const dt_solve_choice *b) {
    if (!b->valid) return 1;
    int ha = node_host_bytes(rq, &a->mem) <= rq->host_limit_bytes && a->mem.nvme <= rq->nvme_limit_bytes;
    int hb = node_host_bytes(rq, &b->mem) <= rq->host_limit_bytes && b->mem.nvme <= rq->nvme_limit_bytes;
    if (ha != hb) return ha;
    return mem_dev(&a->mem) < mem_dev(&b->mem);
}

/* pass 1: a within the tie window of tmin and with less memory than the incumbent */
static int better_tied(const dt_solve_choice *a, const dt_solve_choice *b, double tmin) {
    if (a->step_s > tmin * (1.0 + DT_SOLVE_TIME_TIE_REL)) return 0;
    return !b->valid || !b->fits || mem_dev(&a->mem) < mem_dev(&b->mem);
}

static int enum_candidate(void *ud, int stage, dt_offload oo, dt_offload op, int sel, int64_t mb, dt_error *err) {
    dt_enum_ctx *e = ud;
    dt_solve_result *o = e->out;
    for (int64_t K = 0; K <= e->L; K++) {
        dt_solve_choice ch;
        dt_plan p;
        plan_for(e->rq, stage, oo, op, sel, mb, K, &p);
        memset(&ch, 0, sizeof ch);
        dt_time_breakdown t;
        if (dt_memory_estimate(&p, &ch.mem, err) || dt_time_estimate(&p, &t, err)) return err->code;
        ch.valid = 1;
        ch.fits = fits(e->rq, &ch.mem);
        ch.zero_stage = stage, ch.offload_optimizer = oo, ch.offload_param = op, ch.selective = sel;
        ch.micro_batch = mb, ch.grad_accum = p.batch.grad_accum, ch.ckpt_layers = K;
        ch.step_s = t.step_s;
        if (e->pass == 0) {
            if (ch.fits) {
                if (e->tmin[stage] < 0 || ch.step_s < e->tmin[stage]) e->tmin[stage] = ch.step_s;
                if (e->tmin_all < 0 || ch.step_s < e->tmin_all) e->tmin_all = ch.step_s;
            } else if (!o->per_stage[stage].valid || better_infeasible(e->rq, &ch, &o->per_stage[stage])) {
                o->per_stage[stage] = ch;
            }
            if (better_infeasible(e->rq, &ch, &o->min_memory)) o->min_memory = ch;
        } else if (ch.fits) {
            if (better_tied(&ch, &o->per_stage[stage], e->tmin[stage])) o->per_stage[stage] = ch;
            if (better_tied(&ch, &o->best, e->tmin_all)) o->best = ch;
        }
    }
    return DT_OK;
}

int dt_solve_enumerate(const dt_solve_request *rq, dt_solve_result *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    if (dt_solve_check(rq, err)) return err->code;
    dt_enum_ctx e = {rq, out, rq->base.model.n_layer, 0, {-1, -1, -1, -1}, -1};
    for (e.pass = 0; e.pass < 2; e.pass++)
        if (for_each_candidate(rq, enum_candidate, &e, &out->n_candidates, err)) return err->code;
    if (!out->best.valid) return infeasible_message(rq, &out->min_memory, err);
    const dt_solve_choice *b = &out->best;
    plan_for(rq, b->zero_stage, b->offload_optimizer, b->offload_param, b->selective, b->micro_batch, b->ckpt_layers,
             &out->plan);
    return dt_predict(&out->plan, err);
}

/* ---- every evaluated point, for `dtplan solve --plot` ---- */
typedef struct {
    const dt_solve_request *rq;
    dt_solve_visit_fn fn;
    void *ud;
    int64_t L;
} dt_visit_ctx;

static int visit_candidate(void *ud, int stage, dt_offload oo, dt_offload op, int sel, int64_t mb, dt_error *err) {
    dt_visit_ctx *v = ud;
    for (int64_t K = 0; K <= v->L; K++) {
        dt_solve_choice ch;
        fill_choice(v->rq, stage, oo, op, sel, mb, K, &ch, NULL);
        if (ch.step_s > 0 && v->fn(v->ud, &ch, err)) return err->code;
    }
    return DT_OK;
}

int dt_solve_candidates(const dt_solve_request *rq, dt_solve_visit_fn fn, void *ud, dt_error *err) {
    if (dt_solve_check(rq, err)) return err->code;
    dt_visit_ctx v = {rq, fn, ud, rq->base.model.n_layer};
    int n = 0;
    return for_each_candidate(rq, visit_candidate, &v, &n, err);
}
