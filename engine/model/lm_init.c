/* lm_init.c — dt_lm's initial parameters (dt_lm_init_random, dt_lm_init_slice):
 * every tensor by the init rule its family declared with it (dt_tensor_info.init:
 * 0, 1 or N(0, std²)), nothing inferred from its name. docs/engine.md
 * "Initialisation". */
#include <math.h>

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
#define DT_SPLITMIX_GAMMA 0x9e3779b97f4a7c15ULL
#define DT_TWO_POW_53 9007199254740992.0

static uint64_t splitmix64_at(uint64_t seed, uint64_t counter) {
    uint64_t z = seed + counter * DT_SPLITMIX_GAMMA;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* uniform in (0, 1): 53 random bits, never 0 */
static double uniform01_at(uint64_t seed, uint64_t counter) {
    return ((double)(splitmix64_at(seed, counter) >> 11) + 0.5) / DT_TWO_POW_53;
}

static double normal_at(uint64_t seed, uint64_t e) {
    double u1 = uniform01_at(seed, 2 * e + 1), u2 = uniform01_at(seed, 2 * e + 2);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void dt_lm_init_slice(const dt_lm *g, uint64_t seed, size_t lo, size_t n, void *dst, dt_dtype dt) {
    size_t hi = lo + n > g->nparams ? g->nparams : lo + n;
    for (int i = 0; i < g->ntensors; i++) {
        const dt_tensor_info *t = &g->tensors[i];
        size_t a = t->offset > lo ? t->offset : lo, b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (a >= b) continue;
        /* the rule the family declared with the tensor (lm_layout_add) */
        const int constant = t->init.kind != DT_INIT_NORMAL;
        const float c = t->init.kind == DT_INIT_ONE ? 1.0f : 0.0f;
        const double std = t->init.std;
        int64_t cnt = (int64_t)(b - a);
#pragma omp parallel for schedule(static) if (cnt > DT_INIT_PAR_MIN)
        for (int64_t k = 0; k < cnt; k++) {
            size_t e = a + (size_t)k;
            float v = constant ? c : (float)(normal_at(seed, e) * std);
            dt_store(dst, dt, e - lo, v);
        }
    }
}

int dt_lm_init_random(dt_lm *g, uint64_t seed, dt_error *err) {
    /* drawn on the host: into the params directly, or into a host staging copy */
    if (!g->params)
        return dt_errorf(err, DT_EINVAL,
                         "model: no flat parameter buffer to initialise (created without one or "
                         "released for ZeRO-3); initialise the shards with dt_lm_init_slice");
    size_t bytes = g->nparams * (size_t)g->psz;
    void *host = g->dev->host_addressable ? g->params
                                          : g->dev->alloc(DT_POOL_HOST, DT_MEM_BUFFERS, bytes);
    if (!host)
        return dt_errorf(err, DT_ENOMEM, "model: out of host memory staging the %zu initial parameters",
                         g->nparams);
    dt_lm_init_slice(g, seed, 0, g->nparams, host, g->pt);
    if (host != g->params) {
        g->dev->memcpy(g->params, host, bytes, DT_COPY_H2D, DT_STREAM_H2D);
        g->dev->handoff(DT_STREAM_H2D, DT_STREAM_COMPUTE);
        /* the upload is done once the compute stream passed the hand-off; a
         * pending asynchronous error stays recorded for the caller's next
         * synchronize (synchronize(NULL) would clear it unreported) */
        g->dev->stream_sync(DT_STREAM_COMPUTE);
        g->dev->free(host);
    }
    return DT_OK;
}
