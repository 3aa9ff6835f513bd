/* dt_solve.h — choosing the fastest configuration that fits: a MILP in GLPK over
 * (ZeRO stage, optimizer offload, parameter offload, micro-batch) with an integer
 * number of checkpointed layers per choice, and a brute-force enumerator of the
 * same candidate set (the MILP's test oracle). Formulation: docs/solver.md.
 *
 * Units: bytes for memory, seconds for time. Memory limits are per device
 * (rank), host and NVMe limits per node. */
#ifndef DT_SOLVE_H
#define DT_SOLVE_H

#include <stdint.h>

#include "dt_plan.h"

/* ---- the time model's structure in the number of checkpointed layers K ----
 * For a fixed (stage, offload, micro-batch) the step time is convex piecewise
 * linear in K:
 *   step(K) = base_s + per_ckpt_s * K
 *           + sum_i mult_i * max(tail_i, comm_i - work0_i - work_per_ckpt_i * K)
 * (each max term is the exposed communication of one overlap phase, docs/time-model.md).
 * dt_time_estimate evaluates exactly this; the solver linearises it (epigraph). */
#define DT_TT_MAX_PHASES 4
typedef struct dt_time_phase {
    double mult;            /* how many times per step the phase occurs */
    double tail_s;          /* communication that can never be hidden (first/last unit) */
    double comm_s;          /* all communication of the phase */
    double work0_s;         /* compute it may hide behind, at K = 0 */
    double work_per_ckpt_s; /* extra hiding compute per checkpointed layer (recompute) */
} dt_time_phase;

typedef struct dt_time_terms {
    double base_s;          /* K-independent: compute, exposed non-overlapped comm, offload, optimizer,
                             * selective recompute of every block */
    double per_ckpt_s;      /* recompute per checkpointed layer per step (less its selective part) */
    double recompute_base_s;/* K-independent recompute: selective recompute of all L blocks per step */
    int n_phases;
    dt_time_phase phase[DT_TT_MAX_PHASES];
    /* the parts, for dt_time_breakdown (K-independent ones) */
    double compute_s, comm_total_s, comm_fixed_exposed_s, offload_s, optimizer_s;
    double recompute_per_layer_s;   /* == per_ckpt_s */
} dt_time_terms;

/* Builds the terms for p (p->activations.ckpt_layers is ignored). */
int dt_time_terms_build(const dt_plan *p, dt_time_terms *t, dt_error *err);
/* Evaluates the terms at K checkpointed layers; fills out (step, exposed comm, ...)
 * except tokens_per_s and mfu. */
void dt_time_terms_eval(const dt_time_terms *t, int64_t K, dt_time_breakdown *out);

/* ---- the solver ---- */
typedef struct dt_solve_request {
    dt_plan base;              /* model, cluster (nodes, gpus_per_node, hw), precision,
                                * batch.global_batch and seq_len, parallel buckets/overlap,
                                * optimizer, data, output: copied into the chosen plan */
    int64_t mem_limit_bytes;   /* per device, including the profile's reserve */
    int64_t host_limit_bytes;  /* per node */
    int64_t nvme_limit_bytes;  /* per node */
    unsigned stage_mask;       /* bit s set: ZeRO stage s may be chosen */
    int allow_offload;         /* 0: offload_optimizer = offload_param = none */
    int layouts;               /* 1: tp, cp, pp and v are decision variables too (docs/parallelism.md
                                * "Solving"); 0: data parallelism only */
    dt_runtime_kind layout_runtime; /* the runtime a layout's plan is for (base's when it runs them) */
} dt_solve_request;

typedef struct dt_solve_choice {
    int valid;                 /* 0: nothing (e.g. the stage was not allowed) */
    int fits;                  /* fits device, host and NVMe limits */
    int zero_stage;
    dt_offload offload_optimizer, offload_param;
    int64_t micro_batch, grad_accum, ckpt_layers;
    int selective;             /* selective attention recompute (runtimes deepspeed / fsdp) */
    dt_layout layout;          /* TP / CP / PP (all zero: DP x ZeRO only) */
    dt_runtime_kind runtime;   /* the runtime its plan is for */
    dt_time_breakdown time;    /* dt_time_estimate of the choice (step_s == time.step_s) */
    double step_s;
    dt_mem_breakdown mem;      /* dt_memory_estimate of the choice */
} dt_solve_choice;

typedef struct dt_solve_result {
    dt_plan plan;              /* the chosen plan, prediction filled (valid only on success) */
    dt_solve_choice best;
    /* per stage: the fastest fitting choice, or (fits = 0) the one needing the least
     * device memory when none of that stage fits */
    dt_solve_choice per_stage[4];
    dt_solve_choice min_memory; /* the least device memory over every candidate (infeasible report) */
    /* with rq->layouts: the fastest fitting choice without a layout and with one (valid = 0:
     * no such candidate; fits = 0: none fits, the least-memory one) */
    dt_solve_choice best_dp, best_layout;
    int n_candidates;          /* (stage, offloads, micro-batch) choices considered */
    int n_columns, n_rows;     /* MILP size (0 for the enumerator) */
    int milp_solves;           /* glp_intopt calls, including tie-break and cut rounds */
} dt_solve_result;

/* Bound on the micro-batch walk: every divisor of global_batch / world_size is a
 * candidate, so the walk costs O(global_batch / world_size) steps plus the memory
 * model at L + 1 points per divisor. 65536 sequences per rank per optimizer step is
 * far above real runs (a 4M-token batch of 2048-token sequences on one GPU is 2048)
 * and solves in about a second; beyond it dt_solve_check fails at once, naming
 * --global-batch. */
#define DT_SOLVE_MAX_SEQS_PER_RANK INT64_C(65536)

/* The request's own checks, done first by every entry point (and by the CLI before
 * it prints anything): global batch a positive multiple of the world size and within
 * DT_SOLVE_MAX_SEQS_PER_RANK per rank, positive limits, a stage allowed. DT_EINVAL. */
int dt_solve_check(const dt_solve_request *rq, dt_error *err);
/* Bytes of a node's host memory the plan p uses per node when each rank uses m: the
 * host-side offload, plus on a CPU plan every rank's own memory (the ranks of a
 * node share its RAM). What the solver checks against the host limit. */
int64_t dt_solve_node_host_bytes(const dt_plan *p, const dt_mem_breakdown *m);

/* The MILP. DT_EINFEASIBLE when nothing fits (message: the smallest memory limit
 * that would fit and its configuration; out->min_memory holds it); DT_EINVAL for
 * bad requests (global batch not divisible by the world size, ...). */
int dt_solve(const dt_solve_request *rq, dt_solve_result *out, dt_error *err);
/* The same answer by exhaustive enumeration of every candidate and every K,
 * evaluated with dt_memory_estimate and dt_time_estimate directly. */
int dt_solve_enumerate(const dt_solve_request *rq, dt_solve_result *out, dt_error *err);

/* Relative tolerance under which two step times count as equal (then less device
 * memory wins); shared by the MILP's lexicographic second solve and the enumerator.
 * It must exceed GLPK's feasibility tolerance (1e-7 on the O(1)-scaled time row). */
#define DT_SOLVE_TIME_TIE_REL 1e-6

/* Every point the enumerator evaluates: each candidate (stage, offloads, micro-batch)
 * at every number of checkpointed layers K = 0..L, with its memory, step time and
 * whether it fits (dtplan solve --plot). fn returns DT_OK to go on, or an error
 * code (with err filled) that stops the walk and is returned. */
typedef int (*dt_solve_visit_fn)(void *ud, const dt_solve_choice *c, dt_error *err);
int dt_solve_candidates(const dt_solve_request *rq, dt_solve_visit_fn fn, void *ud, dt_error *err);

#endif
