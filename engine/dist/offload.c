/* offload.c — see dt_offload.h. */
#include "dt_offload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_device.h"

int dt_store_open_mem(dt_offload_store *s, const dt_device_ops *dev, dt_mem_pool pool, dt_mem_category cat,
                      size_t n, dt_dtype dt, dt_error *err) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->dt = dt;
    s->n = n;
    s->pool = pool;
    s->dev = dev;
    if (n == 0) return DT_OK;
    s->mem = dev->alloc(pool, cat, n * (size_t)dt_dtype_size(dt));
    if (!s->mem)
        return dt_errorf(err, DT_ENOMEM, "cannot allocate %zu %s elements (%s pool, %s)", n, dt_dtype_name(dt),
                         pool == DT_POOL_HOST ? "host" : "device", dt_mem_category_name(cat));
    return DT_OK;
}

int dt_store_open_file(dt_offload_store *s, const char *dir, const char *name, size_t n, dt_dtype dt,
                       dt_error *err) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->dt = dt;
    s->n = n;
    if (!dir || !dir[0])
        return dt_errorf(err, DT_EINVAL, "nvme offload needs parallel.nvme_path (a directory on a fast disk)");
    mkdir(dir, 0755);
    snprintf(s->path, sizeof s->path, "%s/%s", dir, name);
    s->fd = open(s->path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (s->fd < 0)
        return dt_errorf(err, DT_EIO, "%s: cannot create the nvme offload file: %s (check parallel.nvme_path)",
                         s->path, strerror(errno));
    if (ftruncate(s->fd, (off_t)(n * (size_t)dt_dtype_size(dt))) != 0) {
        int e = errno;
        dt_store_close(s);
        return dt_errorf(err, DT_EIO, "%s: cannot size the nvme offload file: %s", name, strerror(e));
    }
    return DT_OK;
}

void dt_store_close(dt_offload_store *s) {
    if (s->mem) s->dev->free(s->mem);
    s->mem = NULL;
    if (s->fd >= 0) {
        close(s->fd);
        unlink(s->path);
    }
    s->fd = -1;
}

int dt_store_is_file(const dt_offload_store *s) { return s->fd >= 0; }

int dt_store_on_device(const dt_offload_store *s) {
    return s->mem && s->pool == DT_POOL_DEVICE && !s->dev->host_addressable;
}

void *dt_store_get(dt_offload_store *s, size_t lo, size_t count, void *staging, dt_error *err) {
    const size_t es = (size_t)dt_dtype_size(s->dt);
    if (s->fd < 0) return s->mem ? (char *)s->mem + lo * es : staging;
    size_t want = count * es, got = 0;
    while (got < want) {
        ssize_t r = pread(s->fd, (char *)staging + got, want - got, (off_t)(lo * es + got));
        if (r <= 0) {
            dt_errorf(err, DT_EIO, "%s: read failed at element %zu: %s", s->path, lo,
                      r < 0 ? strerror(errno) : "short file");
            return NULL;
        }
        got += (size_t)r;
    }
    return staging;
}

int dt_store_put(dt_offload_store *s, size_t lo, size_t count, const void *src, dt_error *err) {
    const size_t es = (size_t)dt_dtype_size(s->dt);
    if (s->fd < 0) {
        char *dst = (char *)s->mem + lo * es;
        if (!s->mem || dst == src) return DT_OK;
        if (dt_store_on_device(s)) s->dev->memcpy(dst, src, count * es, DT_COPY_D2D, DT_STREAM_COMPUTE);
        else memcpy(dst, src, count * es);
        return DT_OK;
    }
    size_t want = count * es, put = 0;
    while (put < want) {
        ssize_t w = pwrite(s->fd, (const char *)src + put, want - put, (off_t)(lo * es + put));
        if (w <= 0)
            return dt_errorf(err, DT_EIO, "%s: write failed at element %zu: %s", s->path, lo, strerror(errno));
        put += (size_t)w;
    }
    return DT_OK;
}
