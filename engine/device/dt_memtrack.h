/* dt_memtrack.h — every engine allocation goes through here, tagged with a pool
 * (device / host) and a category, so a run can report measured bytes next to
 * the plan's prediction (run-report.json, docs/dtrun.md "Output files"). On the
 * CPU device both pools are ordinary host memory, but they are accounted
 * separately so offload placement is real and measurable. Thread-safe. */
#ifndef DT_MEMTRACK_H
#define DT_MEMTRACK_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DT_MEM_PARAMS = 0,
    DT_MEM_GRADS = 1,
    DT_MEM_OPTIMIZER = 2,     /* master weights + moments */
    DT_MEM_ACTIVATIONS = 3,   /* saved for backward */
    DT_MEM_BUFFERS = 4,       /* comm buckets, gathered layers, logits/loss temporaries, scratch */
    DT_MEM_CAT_COUNT = 5
} dt_mem_category;

typedef enum { DT_POOL_DEVICE = 0, DT_POOL_HOST = 1, DT_POOL_COUNT = 2 } dt_mem_pool;

/* 64-byte aligned, zero-filled. NULL on failure (bytes == 0 returns NULL). */
void *dt_mem_alloc(dt_mem_pool pool, dt_mem_category cat, size_t bytes);
void dt_mem_free(void *p);    /* NULL is fine */

int64_t dt_mem_current(dt_mem_pool pool, dt_mem_category cat);  /* bytes live now */
int64_t dt_mem_peak(dt_mem_pool pool, dt_mem_category cat);     /* max bytes live */
/* Peak of the pool's sum over categories (not the sum of per-category peaks). */
int64_t dt_mem_peak_total(dt_mem_pool pool);
int64_t dt_mem_current_total(dt_mem_pool pool);
/* Sets each peak to the current value (e.g. after initialisation). */
void dt_mem_reset_peaks(void);
/* A second peak, independent of the ones above: the "window" the memory probe
 * (dt_memprobe.h) opens per phase. The window's peak is the highest sum over
 * both pools since the last dt_mem_window_reset (since process start before
 * the first); at[c] receives each category's bytes (both pools) at that moment. */
void dt_mem_window_reset(void);
int64_t dt_mem_window_peak(int64_t at[DT_MEM_CAT_COUNT]);
const char *dt_mem_category_name(dt_mem_category cat); /* "params", "grads", ... */

#endif
