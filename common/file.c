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

static void size_words(uint64_t bytes, char *buf, size_t n) {
    if (bytes % ((uint64_t)1 << 20) == 0) snprintf(buf, n, "%llu MiB", (unsigned long long)(bytes >> 20));
    else snprintf(buf, n, "%llu bytes", (unsigned long long)bytes);
}

int dt_file_read(const char *path, const char *what, uint64_t max_bytes, char **out, size_t *len, dt_error *err) {
    int fd;
    uint64_t size = 0;
    *out = NULL;
    if (dt_file_open_regular(path, what, &fd, &size, err)) return err->code;
    if (size > max_bytes || size >= (uint64_t)SIZE_MAX) {
        char lim[48];
        size_words(max_bytes, lim, sizeof lim);
        close(fd);
        return dt_errorf(err, DT_EINVAL, "%s: %llu bytes, more than the %s a %s may have", path,
                         (unsigned long long)size, lim, what);
    }
    char *buf = malloc((size_t)size + 1);
    if (!buf) {
        close(fd);
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory for %llu bytes", path, (unsigned long long)size);
    }
    size_t got = 0;
    while (got < (size_t)size) {
        ssize_t k = read(fd, buf + got, (size_t)size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    int e = errno;
    close(fd);
    if (got != (size_t)size) {
        free(buf);
        return dt_errorf(err, DT_EIO, "%s: cannot read: %s", path, got < (size_t)size ? strerror(e) : "short read");
    }
    buf[got] = '\0';
    *out = buf;
    *len = got;
    return DT_OK;
}

/* Streams chunks to path.tmp, fsyncs, renames; every write checked. chunks:
 * (ptr, len) pairs. */
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
