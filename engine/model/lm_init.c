/* lm_init.c — dt_lm's initial parameters (dt_lm_init_random, dt_lm_init_slice):
 * every tensor by the init rule its family declared with it (dt_tensor_info.init:
 * 0, 1 or N(0, std²)), nothing inferred from its name. docs/engine.md
 * "Initialisation". */
#include <math.h>
#include <stdlib.h>

#include "dt_device.h"
#include "dt_dtype.h"
#include "lm_internal.h"

/* Tensors shorter than this are initialised on one thread. */
#define DT_INIT_PAR_MIN 65536

/* The initial value of every parameter is a pure function of (seed, flat
 * element index), so any slice can be drawn without the rest: a ZeRO-3 rank
 * draws only its shard, and the weights are bitwise the same for any world
 * size (the role of DeepSpeed's zero.Init; docs/engine.md "Initialisation").
 *
 * Element e takes a standard normal by Box–Muller (cos branch) from two
 * uniforms, the splitmix64 outputs (Steele, Lea, Flood 2014) at counters 2e + 1
 * and 2e + 2 of the stream seeded with seed. */
/* uniform in (0, 1): 53 random bits, never 0 (lm_internal.h) */
static double uniform01_at(uint64_t seed, uint64_t counter) { return lm_uniform01_at(seed, counter); }

static double normal_at(uint64_t seed, uint64_t e) {
    double u1 = uniform01_at(seed, 2 * e + 1), u2 = uniform01_at(seed, 2 * e + 2);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* U(-1, 1) from the first uniform of element e's counters (DT_INIT_UNIFORM, scaled by its bound) */
static double uniform_at(uint64_t seed, uint64_t e) { return 2.0 * uniform01_at(seed, 2 * e + 1) - 1.0; }

/* element e's standard draw of a random rule: N(0, 1) or U(-1, 1) */
static double draw_at(dt_init_kind kind, uint64_t seed, uint64_t e) {
    return kind == DT_INIT_UNIFORM ? uniform_at(seed, e) : normal_at(seed, e);
}

/* Elements [lo, hi) of a set (tensors t[0 .. n)) into dst[0 .. hi - lo), each by the
 * counter of its full_offset. */
static void init_set(const dt_tensor_info *t, int n, uint64_t seed, size_t lo, size_t hi, void *dst, dt_dtype dt) {
    for (int i = 0; i < n; i++) {
        size_t a = t[i].offset > lo ? t[i].offset : lo, b = t[i].offset + t[i].numel < hi ? t[i].offset + t[i].numel : hi;
        if (a >= b) continue;
        /* the rule the family declared with the tensor (lm_layout_add) */
        const dt_init_kind kind = t[i].init.kind;
        const int constant = kind != DT_INIT_NORMAL && kind != DT_INIT_UNIFORM;
        const float c = kind == DT_INIT_ONE ? 1.0f : 0.0f;
        const double std = t[i].init.std;
        const size_t shift = t[i].full_offset - t[i].offset;   /* 0 under full fine-tuning */
        int64_t cnt = (int64_t)(b - a);
#pragma omp parallel for schedule(static) if (cnt > DT_INIT_PAR_MIN)
        for (int64_t k = 0; k < cnt; k++) {
            size_t e = a + (size_t)k;
            /* tensor parallelism: the element's place in the whole tensor */
            const size_t fe = t[i].tp.split ? t[i].full_offset + dt_lm_tp_full_elem(&t[i], e - t[i].offset) : e + shift;
            float v = constant ? c : (float)(draw_at(kind, seed, fe) * std);
            dt_store(dst, dt, e - lo, v);
        }
    }
}

void dt_lm_init_slice(const dt_lm *g, uint64_t seed, size_t lo, size_t n, void *dst, dt_dtype dt) {
    size_t hi = lo + n > g->nparams ? g->nparams : lo + n;
    init_set(g->tensors, g->ntensors, seed, lo, hi, dst, dt);
}

/* The whole of a flat buffer (nelems of dtype dt) from seed: drawn on the host into
 * it, or into a host staging copy uploaded after. */
static int init_flat(dt_lm *g, void *flat, dt_dtype dt, size_t nelems, const dt_tensor_info *t, int n,
                     uint64_t seed, dt_error *err) {
    size_t bytes = nelems * (size_t)dt_dtype_size(dt);
    void *host = g->dev->host_addressable ? flat : g->dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, bytes);
    if (!host)
        return dt_errorf(err, DT_ENOMEM, "model: out of host memory staging the %zu initial parameters", nelems);
    init_set(t, n, seed, 0, nelems, host, dt);
    if (host != flat) {
        g->dev->memcpy(flat, host, bytes, DT_COPY_H2D, DT_STREAM_H2D);
        g->dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
        /* the upload is done once the compute stream passed the hand-off; a
         * pending asynchronous error stays recorded for the caller's next
         * synchronize (synchronize(NULL) would clear it unreported) */
        g->dev->stream_sync(DT_STREAM_COMPUTE);
        g->dev->free(host);
    }
    return DT_OK;
}

int dt_lm_init_random(dt_lm *g, uint64_t seed, dt_error *err) {
    if (!g->params)
        return dt_errorf(err, DT_EINVAL,
                         "model: no flat parameter buffer to initialise (created without one or "
                         "released for ZeRO-3); initialise the shards with dt_lm_init_slice");
    return init_flat(g, g->params, g->pt, g->nparams, g->tensors, g->ntensors, seed, err);
}

/* QLoRA's quantised linears: each drawn by its rule at its full_offset, then quantised */
static int init_quant(dt_lm *g, uint64_t seed, dt_error *err) {
    size_t largest = 0;
    for (int i = 0; i < dt_lm_num_quant_tensors(g); i++)
        if (dt_lm_quant_tensor(g, i)->numel > largest) largest = dt_lm_quant_tensor(g, i)->numel;
    if (!largest) return DT_OK;
    float *w = malloc(sizeof(float) * largest);   /* [largest] one weight's values at a time, as quantbase.c's load */
    if (!w) return dt_errorf(err, DT_ENOMEM, "model: out of memory for one quantised weight (%zu values)", largest);
    int rc = DT_OK;
    for (int i = 0; i < dt_lm_num_quant_tensors(g) && !rc; i++) {
        const dt_tensor_info *t = dt_lm_quant_tensor(g, i);
        init_set(t, 1, seed, t->offset, t->offset + t->numel, w, DT_DTYPE_FP32);
        rc = dt_lm_quant_set(g, i, w, err);
    }
    free(w);
    return rc;
}

int dt_lm_init_base_random(dt_lm *g, uint64_t seed, dt_error *err) {
    int rc = g->nbase_params ? init_flat(g, g->base, g->bt, g->nbase_params, g->btensors, g->nbase, seed, err) : DT_OK;
    return rc ? rc : init_quant(g, seed, err);
}
