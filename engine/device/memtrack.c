/* memtrack.c — see dt_memtrack.h. A small header in front of each block records
 * its pool, category and size; counters are updated under one mutex. */
#include "dt_memtrack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define DT_MEM_ALIGN 64  /* cache line; also AVX-512 vector width */

typedef struct {
    size_t bytes;
    int pool, cat;
    void *base;          /* what aligned_alloc returned */
} dt_mem_header;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t g_cur[DT_POOL_COUNT][DT_MEM_CAT_COUNT];
static int64_t g_peak[DT_POOL_COUNT][DT_MEM_CAT_COUNT];
static int64_t g_total_cur[DT_POOL_COUNT];
static int64_t g_total_peak[DT_POOL_COUNT];
static int64_t g_win_peak;                                  /* dt_mem_window_*: both pools */
static int64_t g_win_at[DT_POOL_COUNT][DT_MEM_CAT_COUNT];   /* g_cur when g_win_peak was reached */

void *dt_mem_alloc(dt_mem_pool pool, dt_mem_category cat, size_t bytes) {
    if (bytes == 0 || pool < 0 || pool >= DT_POOL_COUNT || cat < 0 || cat >= DT_MEM_CAT_COUNT)
        return NULL;
    size_t total = DT_MEM_ALIGN + bytes;
    total = (total + DT_MEM_ALIGN - 1) / DT_MEM_ALIGN * DT_MEM_ALIGN;
    unsigned char *base = aligned_alloc(DT_MEM_ALIGN, total);
    if (!base) return NULL;
    memset(base + DT_MEM_ALIGN, 0, bytes);
    dt_mem_header *h = (dt_mem_header *)(base + DT_MEM_ALIGN - sizeof(dt_mem_header));
    h->bytes = bytes;
    h->pool = pool;
    h->cat = cat;
    h->base = base;
    pthread_mutex_lock(&g_lock);
    g_cur[pool][cat] += (int64_t)bytes;
    if (g_cur[pool][cat] > g_peak[pool][cat]) g_peak[pool][cat] = g_cur[pool][cat];
    g_total_cur[pool] += (int64_t)bytes;
    if (g_total_cur[pool] > g_total_peak[pool]) g_total_peak[pool] = g_total_cur[pool];
    if (g_total_cur[0] + g_total_cur[1] > g_win_peak) {
        g_win_peak = g_total_cur[0] + g_total_cur[1];
        memcpy(g_win_at, g_cur, sizeof g_win_at);
    }
    pthread_mutex_unlock(&g_lock);
    return base + DT_MEM_ALIGN;
}

void dt_mem_free(void *p) {
    if (!p) return;
    dt_mem_header *h = (dt_mem_header *)((unsigned char *)p - sizeof(dt_mem_header));
    pthread_mutex_lock(&g_lock);
    g_cur[h->pool][h->cat] -= (int64_t)h->bytes;
    g_total_cur[h->pool] -= (int64_t)h->bytes;
    pthread_mutex_unlock(&g_lock);
    free(h->base);
}

static int valid(dt_mem_pool pool, dt_mem_category cat) {
    return pool >= 0 && pool < DT_POOL_COUNT && cat >= 0 && cat < DT_MEM_CAT_COUNT;
}

int64_t dt_mem_current(dt_mem_pool pool, dt_mem_category cat) {
    if (!valid(pool, cat)) return 0;
    pthread_mutex_lock(&g_lock);
    int64_t v = g_cur[pool][cat];
    pthread_mutex_unlock(&g_lock);
    return v;
}

int64_t dt_mem_peak(dt_mem_pool pool, dt_mem_category cat) {
    if (!valid(pool, cat)) return 0;
    pthread_mutex_lock(&g_lock);
    int64_t v = g_peak[pool][cat];
    pthread_mutex_unlock(&g_lock);
    return v;
}

int64_t dt_mem_peak_total(dt_mem_pool pool) {
    if (pool < 0 || pool >= DT_POOL_COUNT) return 0;
    pthread_mutex_lock(&g_lock);
    int64_t v = g_total_peak[pool];
    pthread_mutex_unlock(&g_lock);
    return v;
}

int64_t dt_mem_current_total(dt_mem_pool pool) {
    if (pool < 0 || pool >= DT_POOL_COUNT) return 0;
    pthread_mutex_lock(&g_lock);
    int64_t v = g_total_cur[pool];
    pthread_mutex_unlock(&g_lock);
    return v;
}

void dt_mem_reset_peaks(void) {
    pthread_mutex_lock(&g_lock);
    for (int p = 0; p < DT_POOL_COUNT; p++) {
        for (int c = 0; c < DT_MEM_CAT_COUNT; c++) g_peak[p][c] = g_cur[p][c];
        g_total_peak[p] = g_total_cur[p];
    }
    pthread_mutex_unlock(&g_lock);
}

void dt_mem_window_reset(void) {
    pthread_mutex_lock(&g_lock);
    g_win_peak = g_total_cur[0] + g_total_cur[1];
    memcpy(g_win_at, g_cur, sizeof g_win_at);
    pthread_mutex_unlock(&g_lock);
}

int64_t dt_mem_window_peak(int64_t at[DT_MEM_CAT_COUNT]) {
    pthread_mutex_lock(&g_lock);
    int64_t v = g_win_peak;
    for (int c = 0; c < DT_MEM_CAT_COUNT; c++) at[c] = g_win_at[0][c] + g_win_at[1][c];
    pthread_mutex_unlock(&g_lock);
    return v;
}

const char *dt_mem_category_name(dt_mem_category cat) {
    static const char *names[DT_MEM_CAT_COUNT] = {"params", "grads", "optimizer",
                                                  "activations", "buffers"};
    return valid(DT_POOL_DEVICE, cat) ? names[cat] : "?";
}
