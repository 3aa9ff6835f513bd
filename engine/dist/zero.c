/* zero.c — see dt_zero.h and docs/zero.md. */
#include "dt_zero.h"
#include "dt_consts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "dt_layout.h"
#include "dt_memtrack.h"
#include "dt_model.h"
#include "dt_offload.h"
#include "dt_pgroup.h"
#include "dt_tracer.h"
#include "dt_clock.h"

#define EMB 2          /* buffer id of unit 0; blocks alternate ids 0 and 1 */
#define NBUF 3
/* Without overlap_comm every block collective completes before the next unit
 * runs, so block ids 0 and 1 share one buffer and all reduce-scatters one
 * receive buffer (planner/memory.c counts exactly these; docs/zero.md "Buffers"). */

typedef struct {
    size_t off, n;     /* flat offset and elements of the unit */
    size_t P, S;       /* padded elements (multiple of W; n for stage 0) and shard elements */
    size_t sb;         /* first state element of this rank's shard */
} unit;

typedef struct {
    dt_comm_req *req;  /* NULL: nothing in flight */
    int unit;          /* reduce-scatter: unit whose shard recv holds; gather: unit in the buffer */
    int acc;           /* reduce-scatter: add recv into the gradient shard on completion */
    double t0_us;      /* --trace: when the collective was issued */
} pend;

/* --trace: a stage-0 all-reduce in flight (issue time, elements) */
typedef struct {
    double t0_us;
    size_t n;
} ar_trace;

struct dt_zero {
    const dt_plan *p;
    dt_comm *c;
    dt_comm *tpc;               /* tensor parallelism: the TP group the model's shard is in, else NULL */
    dt_lm *g;
    const dt_device_ops *dev;   /* the model's device: every buffer and copy below goes through it */
    int hostdev;                /* dev->host_addressable: the CPU device, no staging needed */
    int W, r, stage, overlap, last;
    dt_offload oo, op;
    dt_dtype pdt, gdt, mdt, hgdt;
    size_t psz, gsz;
    int nu;
    unit *u;
    size_t state_n, maxP, maxS;
    int has_master;
    dt_offload_store st[3];   /* master (fp32), m, v: [state_n] */
    dt_offload_store pstore;  /* stage 3: parameter shard [state_n] */
    void *swap[DT_DS_OPT_SWAP_BUFFERS];   /* nvme optimizer staging (host) */
    void *pswap[DT_DS_PARAM_SWAP_BUFFERS];/* nvme param staging (host) */
    void *hgrad;           /* offload: upcast gradient shard (host) [state_n]; NULL where the
                            * optimizer reads the shard in place (grads_in_place) */
    void *gshard;          /* stages 2/3: gradient shard accumulator [state_n] */
    void *gbuf[NBUF];      /* stages 2/3: full-unit gradients; stage 1: send buckets */
    void *rsrecv[NBUF];    /* stages 2/3: reduce-scatter receive [maxS] */
    void *pbuf[NBUF];      /* stage 3: gathered unit params */
    void *pstage;          /* stages 1/2: padded unit params for the all-gather [maxP] */
    /* non-host-addressable devices (CUDA) only: */
    void *hstage;          /* host [maxS] of max(param, grad) dtype, offload only: a shard on
                            * its way to or from the host-side optimizer */
    float *dscal;          /* device [2]: the step's scalar all-reduce (W > 1) */
    int shared;            /* no overlap: ids 0/1 alias one buffer, rsrecv one receive */
    int had_flat_params, had_flat_grads;   /* the model's flat buffers existed at creation (restored at free) */
    void *test_copy;       /* DT_TEST_EXTRA_MODEL_COPY: an untracked whole-model copy (the memory test's
                            * negative control), held until dt_zero_free */
    pend rs[NBUF], ag[NBUF];
    int held[NBUF];        /* stage 3: unit whose gathered params pbuf[i] holds, -1 none */
    int emb_fwd_after;     /* stage 3: after_forward(0) calls seen in this forward */
    dt_comm_req **ar;      /* stage 0: all-reduces in flight */
    ar_trace *art;         /* --trace: their issue times and sizes [car] */
    int nar, car;
    size_t reduced_from;   /* stage 0: flat grads [reduced_from, Ψ) are all-reduced */
    double comm_s;         /* wall time blocked in collectives (calls + waits) */
    dt_error *herr;        /* where hook failures are reported */
    dt_error hook_err;
    /* --trace: the compute span open since the end of the last hook (the model
     * computes between hooks): its unit (-1: none) and kind, from tr_t0 */
    int tr_unit;
    dt_sim_kind tr_kind;
    double tr_t0;
};

/* times a communication call into z->comm_s */
#define TIMED(z, call) ({ double t0_ = dt_clock_s(); int rc_ = (call); (z)->comm_s += dt_clock_s() - t0_; rc_; })
/* the same, and a --trace span of the blocking collective on the comm stream */
#define TRACED(z, kind, unit, bytes, call)                                                         \
    ({                                                                                             \
        double tt0_ = dt_tracer_now_us();                                                          \
        int trc_ = TIMED(z, call);                                                                 \
        if (dt_tracer_on()) dt_tracer_span(kind, DT_SIM_COMM, unit, 1, bytes, tt0_, dt_tracer_now_us()); \
        trc_;                                                                                      \
    })

/* ---- --trace: compute spans between hooks ---- */

/* Called first in every hook: closes the compute span the model ran since the
 * previous hook. */
static void tr_close(dt_zero *z) {
    if (!dt_tracer_on() || z->tr_unit < 0) return;
    dt_tracer_span(z->tr_kind, DT_SIM_COMPUTE, z->tr_unit, 1, -1, z->tr_t0, dt_tracer_now_us());
    z->tr_unit = -1;
}
/* Called last in a hook: the model now computes unit u (-1: nothing traced). */
static void tr_open(dt_zero *z, dt_sim_kind kind, int u) {
    if (!dt_tracer_on()) return;
    z->tr_unit = u;
    z->tr_kind = kind;
    z->tr_t0 = dt_tracer_now_us();
}

static void *dmem(const dt_zero *z, dt_mem_pool pool, dt_mem_category cat, size_t bytes) {
    return bytes ? z->dev->alloc(pool, cat, bytes) : NULL;
}
/* Elements of a unit's full buffer: a unit may hold nothing trained (a frozen embedding
 * under the freeze method, dt_lm.h's base set), and still gets one element so its group
 * binds to memory of its own (dt_lm_bind_group reads NULL as the flat buffer). */
static size_t unit_buf_elems(size_t n) { return n ? n : 1; }
static void dfree(const dt_zero *z, void *p) {
    if (p) z->dev->free(p);
}
static void *at(void *p, size_t i, size_t esz) { return (char *)p + i * esz; }

/* Offloaded optimizer on a host-addressable device (the CPU) with gradients already
 * in the optimizer's dtype (no master to upcast to): the host gradient partition
 * would be a copy of the shard in the same memory, so the optimizer reads the
 * shard in place (planner/memory.c host_terms counts the same). */
static int grads_in_place(const dt_zero *z) { return z->hostdev && z->hgdt == z->gdt; }
static size_t minz(size_t a, size_t b) { return a < b ? a : b; }

static int bid(int u) { return u == 0 ? EMB : u % 2; }
static size_t my_lo(const dt_zero *z, int u) { return z->stage == 0 ? 0 : (size_t)z->r * z->u[u].S; }
static size_t my_valid(const dt_zero *z, int u) {
    size_t lo = my_lo(z, u);
    return lo >= z->u[u].n ? 0 : minz(z->u[u].S, z->u[u].n - lo);
}

/* ---- copies between device memory and host memory ----
 * On the CPU device "device" memory is host memory: every copy below is a plain
 * memcpy and no staging happens (host_view returns its argument). On CUDA the
 * kernels run on the compute stream, so each transfer is ordered after the
 * kernels that produced its source with an explicit hand-off (dt_device.h), and
 * the host waits for the copy before it reads (D2H) or reuses (H2D) its buffer:
 * every transfer is synchronous, as docs/time-model.md assumes. */

/* device -> host; h may be read on return */
static void to_host(const dt_zero *z, void *h, const void *d, size_t bytes) {
    if (!bytes || h == d) return;
    if (z->hostdev) {
        memcpy(h, d, bytes);
        return;
    }
    z->dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_D2H);
    z->dev->memcpy(h, d, bytes, DT_COPY_D2H, DT_STREAM_D2H);
    z->dev->stream_sync(DT_STREAM_D2H);
}
/* host -> device; kernels enqueued afterwards see the bytes, h may be reused on return */
static void to_dev(const dt_zero *z, void *d, const void *h, size_t bytes) {
    if (!bytes || h == d) return;
    if (z->hostdev) {
        memcpy(d, h, bytes);
        return;
    }
    z->dev->handoff(DT_STREAM_COMPUTE, DT_STREAM_H2D);   /* earlier kernels are done with d */
    z->dev->memcpy(d, h, bytes, DT_COPY_H2D, DT_STREAM_H2D);
    z->dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
    z->dev->stream_sync(DT_STREAM_H2D);
}
/* device -> device, on the compute stream */
static void d2d(const dt_zero *z, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) z->dev->memcpy(dst, src, bytes, DT_COPY_D2D, DT_STREAM_COMPUTE);
}
/* either direction: *_dev says whether each side is device memory */
static void xcopy(const dt_zero *z, void *dst, int dst_dev, const void *src, int src_dev, size_t bytes) {
    if (dst_dev && src_dev) d2d(z, dst, src, bytes);
    else if (dst_dev) to_dev(z, dst, src, bytes);
    else if (src_dev) to_host(z, dst, src, bytes);
    else if (bytes && dst != src) memcpy(dst, src, bytes);
}
/* device data d readable on the host: d itself where the host can address it,
 * else copied into staging */
static const void *host_view(const dt_zero *z, const void *d, size_t bytes, void *staging) {
    if (z->hostdev) return d;
    to_host(z, staging, d, bytes);
    return staging;
}
/* where a store's element lo is, as a pointer and whether it is device memory
 * (file-backed stores come through host staging) */
static int store_dev(const dt_offload_store *s) { return dt_store_on_device(s); }

/* ---- collectives (W = 1: local copies, nothing counted) ---- */

static int c_reduce_scatter(dt_zero *z, int unit, const void *send, void *recv, size_t S, dt_comm_req **req,
                            dt_error *err) {
    if (z->W == 1) {
        d2d(z, recv, send, S * z->gsz);
        return DT_OK;
    }
    if (req) return TIMED(z, dt_comm_ireduce_scatter(z->c, send, recv, S, z->gdt, DT_RED_AVG, req, err));
    return TRACED(z, DT_SIM_REDUCE_SCATTER, unit, (int64_t)(S * (size_t)z->W * z->gsz),
                  dt_comm_reduce_scatter(z->c, send, recv, S, z->gdt, DT_RED_AVG, err));
}

/* in place: this rank's block is already at recv + r*S */
static int c_allgather(dt_zero *z, int unit, void *recv, size_t S, dt_comm_req **req, dt_error *err) {
    if (z->W == 1) return DT_OK;
    void *send = at(recv, (size_t)z->r * S, z->psz);
    if (req) return TIMED(z, dt_comm_iallgather(z->c, send, recv, S, z->pdt, req, err));
    return TRACED(z, DT_SIM_ALLGATHER, unit, (int64_t)(S * (size_t)z->W * z->psz),
                  dt_comm_allgather(z->c, send, recv, S, z->pdt, err));
}

static int finish_rs(dt_zero *z, int b, dt_error *err) {
    pend *pd = &z->rs[b];
    if (pd->req) {
        dt_comm_req *q = pd->req;
        pd->req = NULL;
        if (TIMED(z, dt_comm_wait(z->c, q, err))) return err->code;
        if (dt_tracer_on())
            dt_tracer_span(DT_SIM_REDUCE_SCATTER, DT_SIM_COMM, pd->unit, 1,
                           (int64_t)(z->u[pd->unit].P * z->gsz), pd->t0_us, dt_tracer_now_us());
    }
    if (pd->acc) {
        const unit *u = &z->u[pd->unit];
        z->dev->add(at(z->gshard, u->sb, z->gsz), z->rsrecv[b], z->gdt, u->S);
        pd->acc = 0;
    }
    return DT_OK;
}

static int finish_ag(dt_zero *z, int b, dt_error *err) {
    pend *pd = &z->ag[b];
    if (!pd->req) return DT_OK;
    dt_comm_req *q = pd->req;
    pd->req = NULL;
    if (TIMED(z, dt_comm_wait(z->c, q, err))) return err->code;
    if (dt_tracer_on())
        dt_tracer_span(DT_SIM_ALLGATHER, DT_SIM_COMM, pd->unit, 1, (int64_t)(z->u[pd->unit].P * z->psz),
                       pd->t0_us, dt_tracer_now_us());
    z->held[b] = pd->unit;
    return DT_OK;
}

/* ---- stage 3: gathers ---- */

/* Starts (overlap) or runs the all-gather of unit u into its parameter buffer:
 * this rank's shard goes to its block of the buffer first (the H2D copy when
 * parameters are offloaded), then an in-place all-gather. */
static int gather(dt_zero *z, int u, int async, dt_error *err) {
    int b = bid(u);
    int rc;
    if ((rc = finish_ag(z, b, err))) return rc;
    const unit *un = &z->u[u];
    void *dst = at(z->pbuf[b], my_lo(z, u), z->psz);
    double tx0 = dt_tracer_now_us();
    void *src = dt_store_get(&z->pstore, un->sb, un->S, z->pswap[0], err);
    if (!src) return err->code;
    xcopy(z, dst, !z->hostdev, src, store_dev(&z->pstore), un->S * z->psz);
    if (z->op != DT_OFFLOAD_NONE && dt_tracer_on())   /* the shard's host(/NVMe) -> device copy */
        dt_tracer_span(DT_SIM_H2D, DT_SIM_XFER, u, 1, (int64_t)(un->S * z->psz), tx0, dt_tracer_now_us());
    z->held[b] = -1;
    if (z->shared && b != EMB) z->held[1 - b] = -1;   /* the same storage */
    if (async && z->W > 1) {
        z->ag[b].unit = u;
        z->ag[b].t0_us = dt_tracer_now_us();
        return c_allgather(z, u, z->pbuf[b], un->S, &z->ag[b].req, err);
    }
    if ((rc = c_allgather(z, u, z->pbuf[b], un->S, NULL, err))) return rc;
    z->held[b] = u;
    return DT_OK;
}

static int ensure_gathered(dt_zero *z, int u, dt_error *err) {
    int b = bid(u);
    if (z->ag[b].req && z->ag[b].unit == u) return finish_ag(z, b, err);
    if (z->held[b] == u) return DT_OK;
    return gather(z, u, 0, err);
}

static int prefetch(dt_zero *z, int u, dt_error *err) {
    if (!z->overlap || u < 1 || u >= z->nu) return DT_OK;
    return gather(z, u, 1, err);
}

/* ---- hooks ---- */

static int bind(dt_zero *z, int u) {
    int b = bid(u);
    void *params = z->stage == 3 ? z->pbuf[b] : NULL;
    void *grads = z->stage >= 2 ? z->gbuf[b] : NULL;
    return dt_lm_bind_group(z->g, u, params, grads);
}

static int hook_before_forward(void *ctx, int u) {
    dt_zero *z = ctx;
    dt_error *err = z->herr;
    int rc;
    tr_close(z);
    if (z->stage == 3) {
        if (u == 0) {
            if (z->held[EMB] != 0) {
                z->emb_fwd_after = 0;
                if ((rc = ensure_gathered(z, 0, err))) return rc;
                if ((rc = prefetch(z, 1, err))) return rc;
            }
        } else {
            if ((rc = ensure_gathered(z, u, err))) return rc;
            if ((rc = prefetch(z, u + 1, err))) return rc;
        }
    }
    tr_open(z, DT_SIM_FORWARD, u);
    return bind(z, u);
}

static int hook_after_forward(void *ctx, int u) {
    dt_zero *z = ctx;
    /* --trace: u's forward span stays open until the next hook (the loss after
     * the classifier is u's too); nothing here communicates */
    if (z->stage != 3) return DT_OK;
    if (u == 0) {
        /* unit 0 serves the encoder and, tied, the classifier: released after both */
        if (++z->emb_fwd_after == (dt_lm_tied(z->g) ? 2 : 1)) z->held[EMB] = -1;
    } else {
        z->held[bid(u)] = -1;
    }
    return DT_OK;
}

static int hook_before_backward(void *ctx, int u) {
    dt_zero *z = ctx;
    dt_error *err = z->herr;
    int rc, b = bid(u);
    tr_close(z);
    if (z->stage >= 2) {
        if ((rc = finish_rs(z, b, err))) return rc;   /* the buffer is reused below */
        z->dev->memset0(z->gbuf[b], z->u[u].P * z->gsz);
    }
    if (z->stage == 3) {
        if ((rc = ensure_gathered(z, u, err))) return rc;
        /* tied: backward starts at unit 0 (the classifier) and goes on at the
         * head; untied: unit 0 (the encoder) is the last, nothing follows it */
        if (u != 0 || dt_lm_tied(z->g)) {
            int next = u == 0 ? z->nu - 1 : u - 1;
            if ((rc = prefetch(z, next, err))) return rc;
        }
    }
    tr_open(z, DT_SIM_BACKWARD, u);
    return bind(z, u);
}

static int ar_push(dt_zero *z, size_t lo, size_t n, dt_error *err) {
    void *buf = at(dt_lm_grads(z->g), lo, z->gsz);
    if (z->W == 1) return DT_OK;
    if (!z->overlap)
        return TRACED(z, DT_SIM_ALLREDUCE, -1, (int64_t)(n * z->gsz),
                      dt_comm_allreduce(z->c, buf, n, z->gdt, DT_RED_AVG, err));
    if (z->nar == z->car) {
        int nc = z->car ? 2 * z->car : 16;
        dt_comm_req **q = realloc(z->ar, (size_t)nc * sizeof *q);
        if (!q) return dt_errorf(err, DT_ENOMEM, "zero: out of memory for requests");
        z->ar = q;
        ar_trace *a = realloc(z->art, (size_t)nc * sizeof *a);
        if (!a) return dt_errorf(err, DT_ENOMEM, "zero: out of memory for requests");
        z->art = a;
        z->car = nc;
    }
    z->art[z->nar] = (ar_trace){dt_tracer_now_us(), n};
    return TIMED(z, dt_comm_iallreduce(z->c, buf, n, z->gdt, DT_RED_AVG, &z->ar[z->nar++], err));
}

/* after_backward(1), block 0's, is followed by the encoder's backward, unit 0's
 * (docs/time-model.md "Measuring"); after unit 0 the pass is over */
static int hook_after_backward_body(dt_zero *z, int u);
static int hook_after_backward(void *ctx, int u) {
    dt_zero *z = ctx;
    tr_close(z);
    int rc = hook_after_backward_body(z, u);
    tr_open(z, DT_SIM_BACKWARD, u == 1 ? 0 : u == 0 ? -1 : u);
    return rc;
}

static int hook_after_backward_body(dt_zero *z, int u) {
    dt_error *err = z->herr;
    const unit *un = &z->u[u];
    int rc, b = bid(u);
    switch (z->stage) {
    case 0: {
        if (!z->last) return DT_OK;
        /* buckets of reduce_bucket_elems, from the top of the flat gradient down,
         * as soon as a whole bucket is complete; the rest when unit 0 is */
        size_t B = (size_t)z->p->parallel.reduce_bucket_elems;
        while (z->reduced_from - un->off >= B) {
            if ((rc = ar_push(z, z->reduced_from - B, B, err))) return rc;
            z->reduced_from -= B;
        }
        if (u == 0 && z->reduced_from > 0) {
            if ((rc = ar_push(z, 0, z->reduced_from, err))) return rc;
            z->reduced_from = 0;
        }
        return DT_OK;
    }
    case 1: {
        if (!z->last) return DT_OK;
        b = u % 2;
        if ((rc = finish_rs(z, b, err))) return rc;
        void *flat = at(dt_lm_grads(z->g), un->off, z->gsz);
        d2d(z, z->gbuf[b], flat, un->n * z->gsz);
        z->dev->memset0(at(z->gbuf[b], un->n, z->gsz), (un->P - un->n) * z->gsz);
        /* the shard lands at the start of the unit's own (now free) gradient range */
        z->rs[b].unit = u;
        z->rs[b].t0_us = dt_tracer_now_us();
        return c_reduce_scatter(z, u, z->gbuf[b], flat, un->S, z->overlap && z->W > 1 ? &z->rs[b].req : NULL,
                                err);
    }
    default: {
        z->rs[b].unit = u;
        z->rs[b].acc = 1;
        z->rs[b].t0_us = dt_tracer_now_us();
        if ((rc = c_reduce_scatter(z, u, z->gbuf[b], z->rsrecv[b], un->S,
                                   z->overlap && z->W > 1 ? &z->rs[b].req : NULL, err)))
            return rc;
        if (!z->rs[b].req && (rc = finish_rs(z, b, err))) return rc;
        if (z->stage == 3) z->held[b] = -1;
        return DT_OK;
    }
    }
}

/* ---- create / free ---- */

/* Error path only (a clean step leaves nothing in flight): collectives still
 * queued on a device the host cannot address (NCCL on CUDA). Freeing device
 * memory waits for all device work (cudaFree / cudaDeviceSynchronize have no
 * deadline), so a collective stuck on a dead peer would hang the rank there.
 * dt_comm_wait polls each one with the communicator's deadline and aborts the
 * communicator on error or timeout, after which the queued NCCL work ends. On
 * the CPU nothing waits for collectives when freeing, so nothing is done there. */
static void drain_collectives(dt_zero *z) {
    if (z->hostdev) return;
    dt_error e;
    dt_error_clear(&e);
    for (int b = 0; b < NBUF; b++) {
        dt_comm_req *q = z->rs[b].req;
        z->rs[b].req = NULL;
        if (q) (void)dt_comm_wait(z->c, q, &e);
        q = z->ag[b].req;
        z->ag[b].req = NULL;
        if (q) (void)dt_comm_wait(z->c, q, &e);
    }
    for (int i = 0; i < z->nar; i++) (void)dt_comm_wait(z->c, z->ar[i], &e);
    z->nar = 0;
}

void dt_zero_free(dt_zero *z) {
    if (!z) return;
    drain_collectives(z);
    dt_lm_set_hooks(z->g, NULL);
    for (int i = 0; i < 3; i++) dt_store_close(&z->st[i]);
    dt_store_close(&z->pstore);
    for (int i = 0; i < DT_DS_OPT_SWAP_BUFFERS; i++) dfree(z, z->swap[i]);
    for (int i = 0; i < DT_DS_PARAM_SWAP_BUFFERS; i++) dfree(z, z->pswap[i]);
    dfree(z, z->hgrad);
    dfree(z, z->gshard);
    free(z->test_copy);
    for (int i = 0; i < NBUF; i++) {
        /* aliases (z->shared) are freed once, through id 0 */
        if (!z->shared || i != 1) dfree(z, z->gbuf[i]);
        if (!z->shared || i != 1) dfree(z, z->pbuf[i]);
        if (!z->shared || i == 0) dfree(z, z->rsrecv[i]);
    }
    dfree(z, z->pstage);
    dfree(z, z->hstage);
    dfree(z, z->dscal);
    /* the model goes back to its own flat storage (re-allocated in its original
     * categories, contents undefined, where release_flat freed it), so no group
     * keeps pointing at the buffers just freed; only if that allocation fails do
     * the groups stay stale, and then the model must only be freed. A model
     * created without flat buffers (DT_LM_NO_FLAT, every ZeRO-3 run) gets none:
     * allocating the whole model at teardown is what it was created to avoid,
     * and its groups must be bound again before another pass, as after creation */
    dt_error e;
    dt_error_clear(&e);
    if (dt_lm_restore_flat(z->g, z->had_flat_params, 0, DT_MEM_PARAMS, &e) == DT_OK &&
        dt_lm_restore_flat(z->g, 0, z->had_flat_grads, DT_MEM_GRADS, &e) == DT_OK && z->had_flat_params &&
        z->had_flat_grads)
        for (int u = 0; u < z->nu; u++) dt_lm_bind_group(z->g, u, NULL, NULL);
    free(z->ar);
    free(z->art);
    free(z->u);
    free(z);
}

static int open_store(dt_zero *z, dt_offload_store *s, dt_offload where, dt_mem_category cat, const char *name,
                      dt_dtype dt, dt_error *err) {
    if (where == DT_OFFLOAD_NVME) {
        char fname[128];
        snprintf(fname, sizeof fname, "dtrun-%s-rank%05d.bin", name, z->r);
        return dt_store_open_file(s, z->p->parallel.nvme_path, fname, z->state_n, dt, err);
    }
    return dt_store_open_mem(s, z->dev, where == DT_OFFLOAD_CPU ? DT_POOL_HOST : DT_POOL_DEVICE, cat,
                             z->state_n, dt, err);
}

/* Stages 2/3: the full-unit gradient buffers (the embedding's, and one or two for
 * blocks) and the reduce-scatter receives. */
static int alloc_unit_grads(dt_zero *z, dt_error *err) {
    size_t blk = 0;
    for (int i = 1; i < z->nu; i++) blk = z->u[i].P > blk ? z->u[i].P : blk;
    for (int i = 0; i < NBUF; i++) {
        if (z->shared && i == 1) z->gbuf[1] = z->gbuf[0];
        else if (!(z->gbuf[i] = dmem(z, DT_POOL_DEVICE, DT_MEM_BUFFERS, unit_buf_elems(i == EMB ? z->u[0].P : blk) * z->gsz)))
            return dt_errorf(err, DT_ENOMEM, "zero: cannot allocate the gradient buffers");
        if (z->shared && i > 0) z->rsrecv[i] = z->rsrecv[0];
        else if (!(z->rsrecv[i] = dmem(z, DT_POOL_DEVICE, DT_MEM_BUFFERS, z->maxS * z->gsz)))
            return dt_errorf(err, DT_ENOMEM, "zero: cannot allocate the reduce-scatter receive buffers");
    }
    return DT_OK;
}

static int release_flat(dt_zero *z, dt_error *err);

int dt_zero_create(const dt_plan *p, dt_comm *c, dt_lm *g, dt_zero **out, dt_error *err) {
    *out = NULL;
    dt_zero *z = calloc(1, sizeof *z);
    if (!z) return dt_errorf(err, DT_ENOMEM, "zero: out of memory");
    z->p = p;
    z->c = c;
    z->g = g;
    z->dev = dt_lm_device_ops(g);
    z->hostdev = z->dev->host_addressable;
    z->W = dt_comm_size(c);
    z->r = dt_comm_rank(c);
    z->stage = p->parallel.zero_stage;
    z->overlap = p->parallel.overlap_comm;
    z->oo = p->parallel.offload_optimizer;
    z->op = p->parallel.offload_param;
    z->pdt = p->precision.param;
    z->gdt = p->precision.grad;
    z->mdt = p->precision.moment;
    z->has_master = p->precision.has_master;
    z->hgdt = z->has_master ? DT_DTYPE_FP32 : z->gdt;
    z->psz = (size_t)dt_dtype_size(z->pdt);
    z->gsz = (size_t)dt_dtype_size(z->gdt);
    z->herr = &z->hook_err;
    z->had_flat_params = dt_lm_params(g) != NULL;
    z->had_flat_grads = dt_lm_grads(g) != NULL;
    z->shared = !z->overlap;
    z->tr_unit = -1;
    for (int i = 0; i < NBUF; i++) z->held[i] = -1;
    /* stores never opened (no master; pstore below stage 3) must not close fd 0 */
    for (int i = 0; i < 3; i++) z->st[i].fd = -1;
    z->pstore.fd = -1;
    int rc = DT_OK;
    if (z->W != dt_layout_dp(p))   /* world_size without a layout; each TP shard's DP group with one */
        rc = dt_errorf(err, DT_EINVAL, "the plan's data-parallel size is %lld but %d ranks were launched",
                       (long long)dt_layout_dp(p), z->W);
    else if (z->stage < 0 || z->stage > 3)
        rc = dt_errorf(err, DT_EINVAL, "zero_stage %d: must be 0..3", z->stage);
    if (rc) {
        free(z);
        return rc;
    }
    /* units: the model's parameter groups (embeddings, blocks, final norm) */
    z->nu = dt_lm_num_groups(g);
    z->u = calloc((size_t)z->nu, sizeof *z->u);
    if (!z->u) {
        free(z);
        return dt_errorf(err, DT_ENOMEM, "zero: out of memory");
    }
    size_t sb = 0, W = (size_t)z->W;
    for (int i = 0; i < z->nu; i++) {
        unit *un = &z->u[i];
        un->off = dt_lm_group_offset(g, i);
        un->n = dt_lm_group_numel(g, i);
        if (z->stage == 0) {
            un->P = un->S = un->n;
            un->sb = un->off;
        } else {
            un->P = (un->n + W - 1) / W * W;
            un->S = un->P / W;
            un->sb = sb;
            sb += un->S;
        }
        if (un->P > z->maxP) z->maxP = un->P;
        if (un->S > z->maxS) z->maxS = un->S;
    }
    z->state_n = z->stage == 0 ? dt_lm_num_params(g) : sb;

    /* stages 2/3: the unit gradient buffers first; stage 2 then frees the model's flat
     * gradients before anything else is allocated, so start-up never holds them and
     * the optimizer state together (docs/dtrun.md "Real memory per phase") */
    if (z->stage >= 2) rc = alloc_unit_grads(z, err);
    if (!rc && z->stage == 2 && dt_lm_grads(g)) rc = release_flat(z, err);

    /* optimizer state: device, host (cpu) or nvme files with bounded staging */
    if (!rc && z->has_master) rc = open_store(z, &z->st[0], z->oo, DT_MEM_OPTIMIZER, "master", DT_DTYPE_FP32, err);
    if (!rc) rc = open_store(z, &z->st[1], z->oo, DT_MEM_OPTIMIZER, "exp_avg", z->mdt, err);
    if (!rc) rc = open_store(z, &z->st[2], z->oo, DT_MEM_OPTIMIZER, "exp_avg_sq", z->mdt, err);
    if (!rc && z->oo == DT_OFFLOAD_NVME) {
        /* one tile: sub_group_size elements, at least the largest unit shard (the
         * step works one unit at a time; DeepSpeed makes a parameter larger than
         * sub_group_size a sub-group of its own), at most the rank's shard */
        size_t sub = (size_t)p->parallel.sub_group_elems;
        sub = minz(sub > z->maxS ? sub : z->maxS, z->state_n);
        size_t w = (size_t)dt_dtype_size(z->has_master ? DT_DTYPE_FP32 : z->mdt);
        for (int i = 0; i < DT_DS_OPT_SWAP_BUFFERS && !rc; i++)
            if (!(z->swap[i] = dmem(z, DT_POOL_HOST, DT_MEM_BUFFERS, sub * w)))
                rc = dt_errorf(err, DT_ENOMEM, "zero: cannot allocate the nvme optimizer staging");
    }
    if (!rc && z->oo != DT_OFFLOAD_NONE && !grads_in_place(z) &&
        !(z->hgrad = dmem(z, DT_POOL_HOST, DT_MEM_BUFFERS, z->state_n * (size_t)dt_dtype_size(z->hgdt))))
        rc = dt_errorf(err, DT_ENOMEM, "zero: cannot allocate the host gradient partition");
    /* stage 3: the parameter shard, gathered units; stages 2/3: gradient shard */
    if (!rc && z->stage == 3) {
        rc = open_store(z, &z->pstore, z->op, DT_MEM_PARAMS, "params", z->pdt, err);
        size_t pbn = z->op == DT_OFFLOAD_NVME ? minz(((size_t)DT_DS_PARAM_BUFFER_ELEMS), z->state_n) : 0;
        if (!rc && z->maxS > (pbn ? pbn : z->maxS))
            rc = dt_errorf(err, DT_EINVAL, "zero: a unit shard exceeds the nvme parameter buffer");
        for (int i = 0; i < DT_DS_PARAM_SWAP_BUFFERS && !rc && pbn; i++)
            if (!(z->pswap[i] = dmem(z, DT_POOL_HOST, DT_MEM_BUFFERS, pbn * z->psz)))
                rc = dt_errorf(err, DT_ENOMEM, "zero: cannot allocate the nvme parameter staging");
        size_t blk = 0;
        for (int i = 1; i < z->nu; i++) blk = z->u[i].P > blk ? z->u[i].P : blk;
        for (int i = 0; i < NBUF && !rc; i++) {
            if (z->shared && i == 1) z->pbuf[1] = z->pbuf[0];
            else if (!(z->pbuf[i] = dmem(z, DT_POOL_DEVICE, DT_MEM_BUFFERS, unit_buf_elems(i == EMB ? z->u[0].P : blk) * z->psz)))
                rc = dt_errorf(err, DT_ENOMEM, "zero: cannot allocate the gathered-parameter buffers");
        }
    }
    if (!rc && z->stage >= 2 && !(z->gshard = dmem(z, DT_POOL_DEVICE, DT_MEM_GRADS, z->state_n * z->gsz)))
        rc = dt_errorf(err, DT_ENOMEM, "zero: cannot allocate the gradient shard");
    if (!rc && z->stage == 1)
        for (int i = 0; i < 2 && !rc; i++) {
            if (z->shared && i == 1) z->gbuf[1] = z->gbuf[0];
            else if (!(z->gbuf[i] = dmem(z, DT_POOL_DEVICE, DT_MEM_BUFFERS, z->maxP * z->gsz)))
                rc = dt_errorf(err, DT_ENOMEM, "zero: cannot allocate the reduce-scatter buckets");
        }
    if (!rc && (z->stage == 1 || z->stage == 2) &&
        !(z->pstage = dmem(z, DT_POOL_DEVICE, DT_MEM_BUFFERS, z->maxP * z->psz)))
        rc = dt_errorf(err, DT_ENOMEM, "zero: cannot allocate the all-gather buffer");
    /* staging where the host cannot address device memory: a shard on its way
     * to or from the host-side optimizer (offload), the scalar all-reduce */
    if (!rc && !z->hostdev) {
        size_t esz = z->psz > z->gsz ? z->psz : z->gsz;
        if (z->oo != DT_OFFLOAD_NONE && !(z->hstage = dmem(z, DT_POOL_HOST, DT_MEM_BUFFERS, z->maxS * esz)))
            rc = dt_errorf(err, DT_ENOMEM, "zero: cannot allocate the host staging buffer");
        if (!rc && z->W > 1 && !(z->dscal = dmem(z, DT_POOL_DEVICE, DT_MEM_BUFFERS, 2 * sizeof(float))))
            rc = dt_errorf(err, DT_ENOMEM, "zero: cannot allocate the scalar all-reduce buffer");
    }
    if (rc) {
        dt_zero_free(z);
        return rc;
    }
    dt_lm_hooks h = {z, hook_before_forward, hook_after_forward, hook_before_backward, hook_after_backward};
    dt_lm_set_hooks(g, &h);
    *out = z;
    return DT_OK;
}

/* ---- state ---- */

/* Stages 2/3: every group is bound to the engine's own buffers (stage 2: the
 * gradient unit buffers; stage 3: parameters and gradients), then the model's
 * flat copies this stage does not keep are freed, so a rank holds what
 * planner/memory.c counts and nothing more (docs/zero.md "Flat buffers"). */
static int release_flat(dt_zero *z, dt_error *err) {
    if (z->stage < 2) return DT_OK;
    for (int u = 0; u < z->nu; u++)
        if (bind(z, u))
            return dt_errorf(err, DT_ERUNTIME, "zero: cannot bind unit %d to the stage-%d buffers", u, z->stage);
    return dt_lm_release_flat(z->g, z->stage == 3, 1, err);
}

/* Sets this rank's shard of unit i — the fp32 master and (stage 3) the
 * parameter shard — from src: the my_valid elements of the unit that start at
 * my_lo, in the parameter dtype, in device memory (host memory on the CPU). */
static int init_unit(dt_zero *z, int i, const void *src, dt_error *err) {
    const unit *un = &z->u[i];
    size_t v = my_valid(z, i);
    int rc;
    if (z->has_master) {
        dt_offload_store *ms = &z->st[0];
        if (store_dev(ms)) {
            float *m = at(ms->mem, un->sb, 4);
            z->dev->memset0(m, un->S * sizeof(float));
            z->dev->convert(m, DT_DTYPE_FP32, src, z->pdt, v);
        } else {   /* host (offload cpu) or file (nvme): converted on the host */
            float *m = dt_store_is_file(ms) ? z->swap[0] : at(ms->mem, un->sb, 4);
            memset(m, 0, un->S * sizeof(float));
            dt_convert(m, DT_DTYPE_FP32, host_view(z, src, v * z->psz, z->hstage), z->pdt, v);
            if ((rc = dt_store_put(ms, un->sb, un->S, m, err))) return rc;
        }
    }
    if (z->stage == 3) {
        dt_offload_store *ps = &z->pstore;
        if (store_dev(ps)) {
            void *d = at(ps->mem, un->sb, z->psz);
            z->dev->memset0(d, un->S * z->psz);
            d2d(z, d, src, v * z->psz);
        } else {   /* offload_param cpu / nvme, or the CPU device */
            void *d = dt_store_is_file(ps) ? z->pswap[0] : at(ps->mem, un->sb, z->psz);
            memset(d, 0, un->S * z->psz);
            xcopy(z, d, 0, src, !z->hostdev, v * z->psz);
            if ((rc = dt_store_put(ps, un->sb, un->S, d, err))) return rc;
        }
    }
    return DT_OK;
}

int dt_zero_init_from_model(dt_zero *z, dt_error *err) {
    const void *flat = dt_lm_params(z->g);
    if (!flat)
        return dt_errorf(err, DT_EINVAL,
                         "zero: the model's flat parameters were already released (stage 3); "
                         "initialise the shards once, from a model holding the full weights");
    for (int i = 0; i < z->nu; i++) {
        const void *src = at((void *)flat, z->u[i].off + my_lo(z, i), z->psz);   /* device memory */
        int rc = init_unit(z, i, src, err);
        if (rc) return rc;
    }
    return release_flat(z, err);
}

/* Block reduce-scatters in flight beside the embedding's with overlap_comm: stage 1
 * has two send buckets (gbuf[0..1]), one the embedding's; stages 2/3 the embedding's
 * buffer (EMB) and the two block buffers. */
#define RS_BLOCKS_STAGE1 1
#define RS_BLOCKS_STAGE23 2

/* What one reduce-scatter of `call` bytes makes rank `rank` hold: libnbc's temporary of
 * the call (rank 0), or of a piece plus the piece's packed send blocks (every rank)
 * when the call exceeds a piece (comm.c). */
static int64_t rs_temporary(int64_t call, int rank) {
    const int64_t piece = (int64_t)DT_COMM_PIECE_BYTES;
    if (call <= piece) return rank == 0 ? call : 0;
    return rank == 0 ? 2 * piece : piece;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

void dt_zero_untracked_bytes(const dt_plan *p, int rank, int64_t *comm, int64_t *io) {
    const dt_parallel *q = &p->parallel;
    const int64_t W = q->world_size;
    int64_t E, U, psi;   /* the units' trained parts and the trained elements (dt_model_zero_units) */
    dt_model_zero_units(&p->model, &p->finetune, W, &E, &U, &psi);
    const int64_t gsz = dt_dtype_size(p->precision.grad), piece = (int64_t)DT_COMM_PIECE_BYTES;
    const int64_t shard = (psi + (q->zero_stage >= 1 ? W : 1) - 1) / (q->zero_stage >= 1 ? W : 1);
    *io = min64((int64_t)DT_IO_CHUNK_BYTES, 4 * (shard > 0 ? shard : 1));   /* fp32 state pieces */
    *comm = 0;
    if (W <= 1) return;   /* the "self" backend copies */
    if (q->zero_stage == 0) {   /* in-place all-reduces of reduce_bucket_elems, one piece each in flight */
        const int64_t bucket = min64(q->reduce_bucket_elems, psi);
        const int64_t inflight = q->overlap_comm ? (psi + bucket - 1) / bucket : 1;
        *comm = inflight * min64(gsz * bucket, piece);
        return;
    }
    /* reduce-scatters of the largest padded unit: libnbc's temporary on rank 0, the
     * packed send blocks of a piece on every rank when the call exceeds a piece */
    const int64_t te = rs_temporary(gsz * E, rank), tu = rs_temporary(gsz * U, rank);
    if (!q->overlap_comm) *comm = te > tu ? te : tu;   /* one collective at a time */
    else *comm = te + (q->zero_stage == 1 ? RS_BLOCKS_STAGE1 : RS_BLOCKS_STAGE23) * tu;
}

int64_t dt_zero_untracked_tail(const dt_plan *p, int rank) {
    const dt_parallel *q = &p->parallel;
    int64_t comm, io;
    dt_zero_untracked_bytes(p, rank, &comm, &io);
    if (q->world_size <= 1 || q->zero_stage == 0 || !q->overlap_comm) return comm;
    const int64_t W = q->world_size, gsz = dt_dtype_size(p->precision.grad);
    int64_t E, U, psi;
    dt_model_zero_units(&p->model, &p->finetune, W, &E, &U, &psi);
    const int64_t j0 = dt_model_first_trained_block(&p->model, &p->finetune);
    const int64_t bufs = q->zero_stage == 1 ? RS_BLOCKS_STAGE1 : RS_BLOCKS_STAGE23;
    const int64_t blocks = min64(bufs, j0 < 2 ? 2 - j0 : 0);   /* blocks j0 .. 1 */
    return rs_temporary(gsz * E, rank) + blocks * rs_temporary(gsz * U, rank);
}

/* DT_TEST_IO_CHUNK_BYTES below this is refused (the default stays): the widest
 * element (fp32 master) must fit, with room for a few. */
#define DT_IO_CHUNK_MIN 64

size_t dt_io_chunk_bytes(void) {
    static size_t bytes;   /* read once; every rank reads the same environment */
    if (!bytes) {
        const char *s = getenv("DT_TEST_IO_CHUNK_BYTES");
        char *end = NULL;
        unsigned long long v = s && *s ? strtoull(s, &end, 10) : 0;
        bytes = end && !*end && v >= DT_IO_CHUNK_MIN ? (size_t)v : DT_IO_CHUNK_BYTES;
    }
    return bytes;
}

/* Writes elements [lo, lo + count) of store s from host memory h (the store's dtype). */
static int put_from_host(dt_zero *z, dt_offload_store *s, size_t lo, size_t count, const void *h, dt_error *err) {
    if (store_dev(s)) {
        to_dev(z, at(s->mem, lo, (size_t)dt_dtype_size(s->dt)), h, count * (size_t)dt_dtype_size(s->dt));
        return DT_OK;
    }
    return dt_store_put(s, lo, count, h, err);
}

/* The fp32 master of unit i's shard elements [c, c + k) from their parameters
 * at host memory p: converted straight into a host store, else through h32. */
static int master_from_host(dt_zero *z, int i, size_t c, size_t k, const void *p, float *h32, dt_error *err) {
    dt_offload_store *ms = &z->st[0];
    const size_t lo = z->u[i].sb + c;
    if (ms->mem && !store_dev(ms)) {
        dt_convert(at(ms->mem, lo, sizeof(float)), DT_DTYPE_FP32, p, z->pdt, k);
        return DT_OK;
    }
    dt_convert(h32, DT_DTYPE_FP32, p, z->pdt, k);
    return put_from_host(z, ms, lo, k, h32, err);
}

/* Stage 3: this rank's shard of every unit from fn. Where the parameter shard
 * is host memory, fn writes into it; else pieces of E elements go through hp
 * (and the master's through h32), zeros past the unit's valid elements. */
static int load_shards(dt_zero *z, dt_zero_read_fn fn, void *ctx, dt_error *err) {
    dt_offload_store *ps = &z->pstore;
    const int direct = ps->mem && !store_dev(ps);
    const size_t chunk = dt_io_chunk_bytes(), per = z->psz + (z->has_master ? sizeof(float) : 0);
    const size_t E = minz(chunk / per > 0 ? chunk / per : 1, z->maxS);
    void *hp = direct ? NULL : dmem(z, DT_POOL_HOST, DT_MEM_BUFFERS, E * z->psz);
    /* the master's pieces need staging unless the master is host memory */
    const int stage32 = z->has_master && !(z->st[0].mem && !store_dev(&z->st[0]));
    float *h32 = stage32 ? dmem(z, DT_POOL_HOST, DT_MEM_BUFFERS, E * sizeof(float)) : NULL;
    int rc = DT_OK;
    if (E && ((!direct && !hp) || (stage32 && !h32)))
        rc = dt_errorf(err, DT_ENOMEM, "zero: cannot allocate %zu bytes of host memory to load the shards", E * per);
    for (int i = 0; i < z->nu && !rc; i++) {
        const unit *un = &z->u[i];
        const size_t v = my_valid(z, i), flat = un->off + my_lo(z, i);
        if (direct) {   /* the shard itself, then its master piece by piece */
            void *d = at(ps->mem, un->sb, z->psz);
            memset(d, 0, un->S * z->psz);
            rc = v ? fn(ctx, flat, v, d, err) : DT_OK;
            for (size_t c = 0; c < un->S && !rc && z->has_master; c += E)
                rc = master_from_host(z, i, c, minz(E, un->S - c), at(d, c, z->psz), h32, err);
            continue;
        }
        for (size_t c = 0; c < un->S && !rc; c += E) {
            const size_t k = minz(E, un->S - c), r = c < v ? minz(k, v - c) : 0;
            memset(at(hp, r, z->psz), 0, (k - r) * z->psz);
            if (r) rc = fn(ctx, flat + c, r, hp, err);
            if (!rc) rc = put_from_host(z, ps, un->sb + c, k, hp, err);
            if (!rc && z->has_master) rc = master_from_host(z, i, c, k, hp, h32, err);
        }
    }
    dfree(z, hp);
    dfree(z, h32);
    return rc;
}

int dt_zero_load_params(dt_zero *z, dt_zero_read_fn fn, void *ctx, dt_error *err) {
    int rc;
    if (z->stage == 3) {
        if ((rc = load_shards(z, fn, ctx, err))) return rc;
        /* an asynchronous device error in the uploads (CUDA; DT_OK on the CPU) */
        if ((rc = z->dev->synchronize(err))) return rc;
        return release_flat(z, err);
    }
    /* stages 0-2: every rank holds the full parameters anyway */
    void *flat = dt_lm_params(z->g);
    if (!flat) return dt_errorf(err, DT_EINVAL, "zero: stage %d needs the model's flat parameters", z->stage);
    const size_t N = dt_lm_num_params(z->g);
    if (z->hostdev) {
        rc = fn(ctx, 0, N, flat, err);
    } else {
        const size_t E = minz(dt_io_chunk_bytes() / z->psz > 0 ? dt_io_chunk_bytes() / z->psz : 1, N);
        void *h = dmem(z, DT_POOL_HOST, DT_MEM_BUFFERS, E * z->psz);
        rc = h ? DT_OK : dt_errorf(err, DT_ENOMEM, "zero: cannot allocate %zu bytes of host memory to load the "
                                   "parameters", E * z->psz);
        for (size_t c = 0; c < N && !rc; c += E) {
            const size_t k = minz(E, N - c);
            if (!(rc = fn(ctx, c, k, h, err))) to_dev(z, at(flat, c, z->psz), h, k * z->psz);
        }
        dfree(z, h);
        if (!rc) rc = z->dev->synchronize(err);
    }
    return rc ? rc : dt_zero_init_from_model(z, err);
}

/* dt_zero_read_fn of the seeded init: dt_lm_init_slice (a pure function of
 * (seed, flat index), so any slice equals those elements of the whole) */
typedef struct {
    const dt_lm *g;
    uint64_t seed;
    dt_dtype pdt;
} init_src;

static int read_init(void *ctx, size_t lo, size_t n, void *dst, dt_error *err) {
    const init_src *s = ctx;
    (void)err;
    dt_lm_init_slice(s->g, s->seed, lo, n, dst, s->pdt);
    return DT_OK;
}

/* The memory test's negative control (tests/engine/test_real_memory.sh): with
 * DT_TEST_EXTRA_MODEL_COPY=1 the seeded init also materialises the whole model in host
 * memory the engine does not track — what a partitioned init that builds the full model
 * first would hold — and keeps it for the run; the test's upper bound must catch it. */
static int test_extra_copy(dt_zero *z, const init_src *s, dt_error *err) {
    const char *env = getenv("DT_TEST_EXTRA_MODEL_COPY");
    if (!env || strcmp(env, "1")) return DT_OK;
    const size_t n = dt_lm_num_params(z->g);
    free(z->test_copy);
    if (!(z->test_copy = malloc(n * z->psz)))
        return dt_errorf(err, DT_ENOMEM, "zero: DT_TEST_EXTRA_MODEL_COPY: cannot allocate %zu bytes", n * z->psz);
    return read_init((void *)s, 0, n, z->test_copy, err);   /* written: resident */
}

int dt_zero_init_random(dt_zero *z, uint64_t seed, dt_error *err) {
    init_src s = {z->g, seed, z->pdt};
    int rc = test_extra_copy(z, &s, err);
    return rc ? rc : dt_zero_load_params(z, read_init, &s, err);
}

void dt_zero_begin_step(dt_zero *z) {
    if (z->stage <= 1) dt_lm_zero_grad(z->g);
    else z->dev->memset0(z->gshard, z->state_n * z->gsz);
    z->reduced_from = dt_lm_num_params(z->g);
    z->last = 0;
}

void dt_zero_set_micro(dt_zero *z, int last, dt_error *err) {
    z->last = last;
    z->herr = err ? err : &z->hook_err;
}

int dt_zero_end_backward(dt_zero *z, dt_error *err) {
    int rc;
    for (int b = 0; b < NBUF; b++) {
        if ((rc = finish_rs(z, b, err))) return rc;
        if ((rc = finish_ag(z, b, err))) return rc;
    }
    for (int i = 0; i < z->nar; i++) {
        if ((rc = TIMED(z, dt_comm_wait(z->c, z->ar[i], err)))) {
            z->nar = 0;
            return rc;
        }
        if (dt_tracer_on())
            dt_tracer_span(DT_SIM_ALLREDUCE, DT_SIM_COMM, -1, 1, (int64_t)(z->art[i].n * z->gsz), z->art[i].t0_us,
                           dt_tracer_now_us());
    }
    z->nar = 0;
    return DT_OK;
}

/* sum of squares of n gradients and whether any is inf/nan. The CPU device
 * keeps optim.c's fixed-block order (results bitwise as before the device
 * abstraction); other devices use their sumsq (DT_SUMSQ_CHUNK order, the same
 * bits on every device). A float inf/nan makes the double sum inf/nan, and
 * squares of finite floats cannot overflow a double (n * 3.4e38^2 << 1.8e308),
 * so the sum's finiteness is exactly the gradients' (no separate all_finite pass). */
static double grads_sumsq(const dt_zero *z, const void *g, size_t n, int *nonfinite) {
    if (z->hostdev) return dt_grad_sumsq(g, z->gdt, n, nonfinite);
    double s = n ? z->dev->sumsq(g, z->gdt, n) : 0.0;
    *nonfinite = !isfinite(s);
    return s;
}

void dt_zero_set_tp(dt_zero *z, dt_comm *tp) { z->tpc = tp; }
dt_comm *dt_zero_tp(const dt_zero *z) { return z->tpc; }

/* This shard's range i of gradients as the optimizer reads them (stage 0: the flat
 * gradients; 1: the unit's start in them, where the reduce-scatter left the shard; 2/3:
 * the gradient shard) */
static const void *range_grads(const dt_zero *z, int i) {
    if (z->stage <= 1) return at(dt_lm_grads(z->g), z->u[i].off, z->gsz);
    return at(z->gshard, z->u[i].sb, z->gsz);
}

/* Tensor parallelism: the squared norm of this rank's gradients with each replicated
 * tensor (the same on every TP rank) weighted 1 / tp, so the sum over the TP group counts
 * it once and each split tensor's slice once. */
static double tp_weighted_sumsq(const dt_zero *z, int *nonfinite) {
    const double tp = (double)dt_comm_size(z->tpc);
    double s = 0.0;
    for (int i = 0; i < z->nu; i++) {
        const dt_zero_range r = dt_zero_range_at(z, i);
        const void *gp = range_grads(z, i);
        for (int k = 0; k < dt_lm_num_tensors(z->g); k++) {
            const dt_tensor_info *t = dt_lm_tensor(z->g, k);
            size_t a = t->offset > r.flat_begin ? t->offset : r.flat_begin;
            size_t b = minz(t->offset + t->numel, r.flat_begin + r.count);
            if (a >= b) continue;
            int f = 0;
            const double w = t->tp.split ? 1.0 : 1.0 / tp;
            s += w * grads_sumsq(z, at((void *)gp, a - r.flat_begin, z->gsz), b - a, &f);
            *nonfinite |= f;
        }
    }
    return s;
}

/* the TP group's sum of this rank's weighted squared norm (a non-finite one stays so) */
static int tp_reduce_sumsq(dt_zero *z, double *s, int *nf, dt_error *err) {
    float buf = *nf ? INFINITY : (float)*s;
    if (dt_comm_allreduce(z->tpc, &buf, 1, DT_DTYPE_FP32, DT_RED_SUM, err)) return err->code;
    *s = (double)buf;
    *nf = !isfinite(buf);
    return DT_OK;
}

int dt_zero_reduce_scalars(dt_zero *z, double *loss, double *sumsq, int *nonfinite, dt_error *err) {
    int nf = 0;
    double s = 0;
    if (z->tpc) {
        s = tp_weighted_sumsq(z, &nf);
    } else if (z->stage == 0) {
        s = grads_sumsq(z, dt_lm_grads(z->g), dt_lm_num_params(z->g), &nf);
    } else if (z->stage == 1) {
        for (int i = 0; i < z->nu; i++) {
            int f = 0;
            s += grads_sumsq(z, at(dt_lm_grads(z->g), z->u[i].off, z->gsz), my_valid(z, i), &f);
            nf |= f;
        }
    } else {
        s = grads_sumsq(z, z->gshard, z->state_n, &nf);
    }
    if (z->W > 1) {
        /* stage 0: the loss alone (gradients are already identical everywhere);
         * stages 1-3: loss and this shard's squared norm, one 8-byte all-reduce
         * (through a device buffer where collectives take device memory) */
        float buf[2] = {(float)*loss, nf ? INFINITY : (float)s};
        int n = z->stage == 0 ? 1 : 2;
        float *cb = z->dscal ? z->dscal : buf;
        to_dev(z, cb, buf, (size_t)n * sizeof(float));
        if (TRACED(z, DT_SIM_ALLREDUCE, -1, (int64_t)(n * (int)sizeof(float)),
                   dt_comm_allreduce(z->c, cb, (size_t)n, DT_DTYPE_FP32, DT_RED_SUM, err)))
            return err->code;
        to_host(z, buf, cb, (size_t)n * sizeof(float));
        *loss = (double)buf[0] / z->W;
        if (n == 2) {
            s = (double)buf[1];
            nf = !isfinite(buf[1]);
        }
    }
    if (z->tpc && tp_reduce_sumsq(z, &s, &nf, err)) return err->code;
    *sumsq = s;
    *nonfinite = nf || !isfinite(s);
    return DT_OK;
}

/* grads of unit u as the optimizer reads them: this rank's shard (device
 * memory), copied to the host (upcast with a master) when the optimizer is
 * offloaded; where the host cannot address the device, 16-bit grads that are
 * upcast come through hstage first */
static const void *unit_grads(dt_zero *z, int u, size_t v) {
    const unit *un = &z->u[u];
    const void *gp = z->stage >= 2 ? at(z->gshard, un->sb, z->gsz) : at(dt_lm_grads(z->g), un->off, z->gsz);
    if (z->oo == DT_OFFLOAD_NONE || grads_in_place(z)) return gp;
    void *h = at(z->hgrad, un->sb, (size_t)dt_dtype_size(z->hgdt));
    double t0 = dt_tracer_now_us();
    const void *src = host_view(z, gp, v * z->gsz, z->hgdt == z->gdt ? h : z->hstage);
    if (src != h) dt_convert(h, z->hgdt, src, z->gdt, v);
    if (dt_tracer_on()) dt_tracer_span(DT_SIM_D2H, DT_SIM_XFER, u, 0, (int64_t)(v * z->gsz), t0, dt_tracer_now_us());
    return h;
}

/* Unit u's gathered-parameter buffer as device scratch for its parameter shard
 * (stage 3, parameters offloaded, AdamW on the device): free between a step's
 * backward and the next forward. */
static void *unit_scratch(dt_zero *z, int u) {
    int b = bid(u);
    z->held[b] = -1;
    if (z->shared && b != EMB) z->held[1 - b] = -1;   /* the same storage */
    return z->pbuf[b];
}

/* --trace, optimizer offloaded to NVMe: the span of unit u's optimizer state
 * moving between NVMe and host since tx (moments of msz bytes per element, plus
 * the fp32 master), its length added to *xfer_us */
static void trace_nvme(const dt_zero *z, int u, size_t msz, double tx, double *xfer_us) {
    if (z->oo != DT_OFFLOAD_NVME || !dt_tracer_on()) return;
    const size_t per_elem = 2 * msz + (z->has_master ? 4 : 0);
    double t1 = dt_tracer_now_us();
    dt_tracer_span(DT_SIM_NVME, DT_SIM_XFER, u, 0, (int64_t)(z->u[u].S * per_elem), tx, t1);
    *xfer_us += t1 - tx;
}

int dt_zero_optimizer_step(dt_zero *z, const dt_adamw *hp, double grad_mul, int64_t t, dt_error *err) {
    const size_t msz = (size_t)dt_dtype_size(z->mdt), hsz = (size_t)dt_dtype_size(z->oo ? z->hgdt : z->gdt);
    /* offloaded: AdamW on the host (OpenMP, engine/model/optim.c); else the device's adamw */
    const int on_host = z->oo != DT_OFFLOAD_NONE;
    void *flatp = dt_lm_params(z->g);
    int rc;
    /* --trace: one optimizer span per step, its length the step's time less the
     * collectives and offload copies inside it (their own spans) */
    const double opt_t0 = dt_tracer_now_us(), comm0 = z->comm_s;
    double xfer_us = 0;
    for (int i = 0; i < z->nu; i++) {
        const unit *un = &z->u[i];
        size_t lo = my_lo(z, i), v = my_valid(z, i);
        void *params;   /* the shard's parameters; pdev: in device memory */
        int pdev = !z->hostdev;
        if (z->stage == 0) {
            params = at(flatp, un->off, z->psz);
        } else if (z->stage <= 2) {
            params = at(z->pstage, lo, z->psz);
            z->dev->memset0(params, un->S * z->psz);
            d2d(z, params, at(flatp, un->off + lo, z->psz), v * z->psz);
        } else if (!(params = dt_store_get(&z->pstore, un->sb, un->S, z->pswap[0], err))) {
            return err->code;
        } else {
            pdev = store_dev(&z->pstore);
        }
        double tx = dt_tracer_now_us();
        const void *grads = unit_grads(z, i, v);   /* before hstage takes the params */
        xfer_us += dt_tracer_now_us() - tx;
        /* wp: the parameters where AdamW runs, staged to the host for the host
         * optimizer or to the device for the device's; on the CPU device always
         * the shard itself */
        void *wp = params;
        int wdev = pdev;
        if (on_host && pdev) {
            wp = z->hstage;
            wdev = 0;
        } else if (!on_host && !pdev && !z->hostdev) {
            wp = unit_scratch(z, i);
            wdev = 1;
        }
        xcopy(z, wp, wdev, params, pdev, v * z->psz);
        void *st[3] = {NULL, NULL, NULL};
        tx = dt_tracer_now_us();
        for (int k = 0; k < 3; k++)
            if ((k > 0 || z->has_master) && !(st[k] = dt_store_get(&z->st[k], un->sb, un->S, z->swap[k], err)))
                return err->code;
        trace_nvme(z, i, msz, tx, &xfer_us);   /* optimizer state read from NVMe */
        /* one call per tensor piece: trainability and weight decay are per tensor,
         * as the model declared them (dt_tensor_info.flags) */
        for (int ti = 0; ti < dt_lm_num_tensors(z->g); ti++) {
            const dt_tensor_info *tt = dt_lm_tensor(z->g, ti);
            if (tt->group != i || !(tt->flags & DT_TENSOR_TRAINABLE)) continue;
            size_t a = tt->offset > un->off + lo ? tt->offset : un->off + lo;
            size_t e = minz(tt->offset + tt->numel, un->off + lo + v);
            if (a >= e) continue;
            size_t j = a - (un->off + lo);
            dt_adamw_arrays arr = {
                .master = st[0] ? (float *)st[0] + j : NULL,
                .m = at(st[1], j, msz), .v = at(st[2], j, msz),
                .params = at(wp, j, z->psz), .grads = (const char *)grads + j * hsz,
                .param_dt = z->pdt, .grad_dt = z->oo ? z->hgdt : z->gdt, .moment_dt = z->mdt};
            const int decay = (tt->flags & DT_TENSOR_DECAY) != 0;
            if (on_host) {
                dt_adamw_apply(&arr, e - a, hp, grad_mul, decay, t);
            } else {
                dt_adamw_scalars sc = dt_adamw_make_scalars(hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay,
                                                            grad_mul, decay, t);
                z->dev->adamw(arr.params, arr.param_dt, arr.master, arr.m, arr.v, arr.moment_dt, arr.grads,
                              arr.grad_dt, e - a, &sc);
            }
        }
        xcopy(z, params, pdev, wp, wdev, v * z->psz);
        tx = dt_tracer_now_us();
        for (int k = 0; k < 3; k++)
            if (st[k] && (rc = dt_store_put(&z->st[k], un->sb, un->S, st[k], err))) return rc;
        trace_nvme(z, i, msz, tx, &xfer_us);   /* and written back */
        if (z->stage == 3 && (rc = dt_store_put(&z->pstore, un->sb, un->S, params, err))) return rc;
        if (z->stage == 1 || z->stage == 2) {
            if ((rc = c_allgather(z, i, z->pstage, un->S, NULL, err))) return rc;
            d2d(z, at(flatp, un->off, z->psz), z->pstage, un->n * z->psz);
        }
    }
    if (dt_tracer_on()) {
        double busy = dt_tracer_now_us() - opt_t0 - (z->comm_s - comm0) * 1e6 - xfer_us;
        dt_tracer_span(DT_SIM_OPTIMIZER, z->oo != DT_OFFLOAD_NONE ? DT_SIM_CPU : DT_SIM_COMPUTE, -1, 0, -1, opt_t0,
                       opt_t0 + (busy > 0 ? busy : 0));
    }
    return DT_OK;
}

int dt_zero_consolidate_params(dt_zero *z, dt_zero_unit_fn fn, void *ctx, dt_error *err) {
    int rc = DT_OK;
    /* pieces of at most dt_io_chunk_bytes(); a device the host cannot address
     * copies each into one host buffer of that size */
    size_t maxn = 0;
    for (int i = 0; i < z->nu; i++) maxn = z->u[i].n > maxn ? z->u[i].n : maxn;
    const size_t E = minz(dt_io_chunk_bytes() / z->psz > 0 ? dt_io_chunk_bytes() / z->psz : 1, maxn);
    void *host = NULL;
    if (fn && !z->hostdev && E && !(host = dmem(z, DT_POOL_HOST, DT_MEM_BUFFERS, E * z->psz)))
        rc = dt_errorf(err, DT_ENOMEM, "zero: cannot allocate %zu bytes of host memory to write the weights",
                       E * z->psz);
    for (int i = 0; i < z->nu; i++) {
        const unit *un = &z->u[i];
        const void *params;
        if (z->stage == 3) {
            int grc = gather(z, i, 0, err);   /* collective: runs even after fn failed */
            if (grc) {
                dfree(z, host);
                return grc;
            }
            params = z->pbuf[bid(i)];
            z->held[bid(i)] = -1;
        } else {
            params = at(dt_lm_params(z->g), un->off, z->psz);
        }
        for (size_t c = 0; c < un->n && fn && !rc; c += E) {
            const size_t k = minz(E, un->n - c);
            const void *hv = host_view(z, at((void *)params, c, z->psz), k * z->psz, host);
            /* an asynchronous device error would leave the host copy stale */
            if (!z->hostdev) rc = z->dev->synchronize(err);
            if (!rc) rc = fn(ctx, i, un->off + c, k, hv, err);
        }
    }
    dfree(z, host);
    return rc;
}

/* ---- state access for checkpoints ---- */

double dt_zero_comm_seconds(const dt_zero *z) { return z->comm_s; }

int dt_zero_num_ranges(const dt_zero *z) { return z->nu; }
dt_zero_range dt_zero_range_at(const dt_zero *z, int i) {
    dt_zero_range r = {z->u[i].off + my_lo(z, i), z->u[i].sb, my_valid(z, i)};
    return r;
}
int dt_zero_stage(const dt_zero *z) { return z->stage; }
size_t dt_zero_state_numel(const dt_zero *z) { return z->state_n; }
int dt_zero_has_master(const dt_zero *z) { return z->has_master; }
dt_dtype dt_zero_moment_dtype(const dt_zero *z) { return z->mdt; }

int dt_zero_state_read(dt_zero *z, int which, size_t lo, size_t count, void *dst, dt_error *err) {
    dt_offload_store *s = &z->st[which];
    if (store_dev(s)) {
        size_t es = (size_t)dt_dtype_size(s->dt);
        to_host(z, dst, at(s->mem, lo, es), count * es);
        /* an asynchronous device error would leave dst stale (CUDA; DT_OK on the CPU) */
        return z->dev->synchronize(err);
    }
    void *p = dt_store_get(s, lo, count, dst, err);
    if (!p) return err->code;
    if (p != dst) memcpy(dst, p, count * (size_t)dt_dtype_size(s->dt));
    return DT_OK;
}

int dt_zero_state_write(dt_zero *z, int which, size_t lo, size_t count, const void *src, dt_error *err) {
    dt_offload_store *s = &z->st[which];
    if (store_dev(s)) {
        size_t es = (size_t)dt_dtype_size(s->dt);
        to_dev(z, at(s->mem, lo, es), src, count * es);
        return DT_OK;
    }
    return dt_store_put(s, lo, count, src, err);
}
