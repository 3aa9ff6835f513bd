/* file.c — see dt_file.h */
#include "dt_file.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fsync_fd_path(const char *path, int flags) {
    int fd = open(path, flags);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int dt_fsync_dir(const char *dir, dt_error *err) {
    if (fsync_fd_path(dir, O_RDONLY | O_DIRECTORY) != 0)
        return dt_errorf(err, DT_EIO, "%s: cannot fsync directory: %s", dir, strerror(errno));
    return DT_OK;
}

void dt_file_parent_dir(const char *path, char *out, size_t n) {
    snprintf(out, n, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash) snprintf(out, n, ".");
    else if (slash == out) out[1] = '\0';
    else *slash = '\0';
}

const char *dt_file_kind(unsigned mode) {
    mode_t m = (mode_t)mode;
    if (S_ISREG(m)) return "a regular file";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "a special file";
}

int dt_file_errno_code(int e) {
    /* the path is wrong (the user's to fix), not the OS failing */
    int user = e == ENOENT || e == ENOTDIR || e == EACCES || e == EPERM || e == ELOOP || e == ENAMETOOLONG ||
               e == EISDIR || e == ENXIO || e == EROFS;
    return user ? DT_EINVAL : DT_EIO;
}

int dt_file_open_regular(const char *path, const char *what, int *fd_out, uint64_t *size, dt_error *err) {
    *fd_out = -1;
    if (!path || !*path) return dt_errorf(err, DT_EINVAL, "empty file name: give the path of a %s", what);
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return dt_errorf(err, dt_file_errno_code(e), "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return dt_errorf(err, DT_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dt_errorf(err, DT_EINVAL, "%s: is %s, not a regular file: give the path of a %s", path,
                         dt_file_kind(st.st_mode), what);
    }
    int fl = fcntl(fd, F_GETFL);   /* reads of a regular file never block; keep the flags plain */
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *fd_out = fd;
    if (size) *size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    return DT_OK;
}

static int too_large(const char *path, uint64_t max_bytes, dt_error *err) {
    char lim[48];
    if (max_bytes % ((uint64_t)1 << 20) == 0) snprintf(lim, sizeof lim, "%llu MiB", (unsigned long long)(max_bytes >> 20));
    else snprintf(lim, sizeof lim, "%llu bytes", (unsigned long long)max_bytes);
    return dt_errorf(err, DT_EINVAL, "'%s' is larger than the %s this input may have: not the file you meant?",
                     path, lim);
}

int dt_file_read(const char *path, const char *what, uint64_t max_bytes, char **out, size_t *len, dt_error *err) {
    *out = NULL;
    if (max_bytes >= (uint64_t)SIZE_MAX / 2) max_bytes = (uint64_t)SIZE_MAX / 2;
    int fd;
    uint64_t size;
    int rc = dt_file_open_regular(path, what, &fd, &size, err);
    if (rc) return rc;
    if (size > max_bytes) {
        close(fd);
        return too_large(path, max_bytes, err);
    }
    /* the size can change under us: read at most max_bytes + 1 to notice growth */
    size_t cap = (size_t)size + 1, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return dt_errorf(err, DT_ENOMEM, "out of memory reading '%s'", path);
    }
    for (;;) {
        if (n == cap) {
            if (cap > max_bytes) break;
            size_t ncap = cap * 2 > max_bytes + 1 ? (size_t)max_bytes + 1 : cap * 2;
            char *nb = realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                close(fd);
                return dt_errorf(err, DT_ENOMEM, "out of memory reading '%s'", path);
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return dt_errorf(err, DT_EIO, "cannot read '%s': %s", path, strerror(e));
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    if (n > max_bytes) {
        free(buf);
        return too_large(path, max_bytes, err);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return DT_OK;
}

int dt_file_write_chunks_atomic(const char *path, const void *const *ptr, const size_t *len, int n,
                                dt_error *err) {
    char tmp[2048], dir[2048];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return dt_errorf(err, DT_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    int ok = 1;
    for (int i = 0; i < n && ok; i++)
        if (len[i] && fwrite(ptr[i], 1, len[i], f) != len[i]) ok = 0;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        unlink(tmp);
        return dt_errorf(err, DT_EIO, "%s: cannot write: %s", path, strerror(e));
    }
    dt_file_parent_dir(path, dir, sizeof dir);
    return dt_fsync_dir(dir, err);
}

int dt_write_file_atomic(const char *path, const void *data, size_t len, dt_error *err) {
    return dt_file_write_chunks_atomic(path, &data, &len, 1, err);
}


int dt_mkdirs(const char *dir, dt_error *err) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return dt_errorf(err, DT_EINVAL, "%.64s...: directory path longer than %d bytes", dir, PATH_MAX - 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return dt_errorf(err, DT_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return dt_errorf(err, DT_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
    return DT_OK;
}
