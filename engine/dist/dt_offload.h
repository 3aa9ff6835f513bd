/* dt_offload.h — where a sharded array lives: an accounted memory pool (device,
 * or host for offload "cpu") or a file under the plan's nvme_path (offload
 * "nvme", DeepSpeed ZeRO-Infinity). The engine reads and writes a file-backed
 * array one bounded slice at a time through a staging buffer it owns, so only the
 * staging buffers are resident (docs/zero.md "Offload").
 * Counts are ELEMENTS of the store's dtype unless a name says bytes. */
#ifndef DT_OFFLOAD_H
#define DT_OFFLOAD_H

#include <stddef.h>

#include "dt_dtype.h"
#include "dt_error.h"
#include "dt_memtrack.h"

struct dt_device_ops;

typedef struct dt_offload_store {
    dt_dtype dt;
    size_t n;            /* elements */
    void *mem;           /* memory-backed: the array; NULL when file-backed */
    dt_mem_pool pool;    /* memory-backed: where mem lives (device memory on CUDA for
                          * DT_POOL_DEVICE: not host-addressable) */
    const struct dt_device_ops *dev;   /* memory-backed: the allocator of mem */
    int fd;              /* file-backed: open descriptor; -1 otherwise */
    char path[600];      /* file-backed: the file (removed by dt_store_close) */
} dt_offload_store;

/* n elements of dt in pool/cat of device dev (dev->alloc: pinned host memory
 * for DT_POOL_HOST on CUDA), zero-filled. */
int dt_store_open_mem(dt_offload_store *s, const struct dt_device_ops *dev, dt_mem_pool pool, dt_mem_category cat,
                      size_t n, dt_dtype dt, dt_error *err);
/* 1 when the array is memory the host cannot dereference (device pool on CUDA). */
int dt_store_on_device(const dt_offload_store *s);
/* n elements of dt in dir/name (created or truncated, zero-filled). */
int dt_store_open_file(dt_offload_store *s, const char *dir, const char *name, size_t n, dt_dtype dt,
                       dt_error *err);
void dt_store_close(dt_offload_store *s);
int dt_store_is_file(const dt_offload_store *s);

/* Elements [lo, lo + count): memory-backed returns a pointer into the array
 * (staging unused; a device pointer when dt_store_on_device); file-backed reads
 * them into staging (host memory) and returns staging. NULL on an I/O error
 * (err filled). */
void *dt_store_get(dt_offload_store *s, size_t lo, size_t count, void *staging, dt_error *err);
/* Writes src to elements [lo, lo + count) (a no-op when src already is the
 * memory there). src is in the store's own memory space: device memory for a
 * store on the device (copied on the device's compute stream), host memory
 * otherwise. */
int dt_store_put(dt_offload_store *s, size_t lo, size_t count, const void *src, dt_error *err);

#endif
