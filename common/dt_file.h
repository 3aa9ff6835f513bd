/* dt_file.h — the file helpers every room uses: regular files only (a FIFO would
 * block, a device never ends, a directory is no file), atomic writes (a temporary
 * in the same directory, fsync, rename, fsync the directory) and directories. A
 * file's size + CRC-32C, which checkpoints record, is common/hash/dt_filesum.h.
 *
 * Wording, one for every program: "PATH: cannot open: REASON" and "PATH: is a FIFO,
 * not a regular file: give the path of a WHAT". Codes: an input the user can fix (a
 * path that does not exist, is not a regular file, cannot be read for permission) is
 * DT_EINVAL; an output that cannot be written, and the OS failing (a full disk, an I/O
 * error), DT_EIO. */
#ifndef DT_FILE_H
#define DT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"

/* For opening an input: DT_EINVAL for an errno that means the path is wrong (ENOENT,
 * ENOTDIR, EACCES, ...), DT_EIO for the others. */
int dt_file_errno_code(int e);

/* "a regular file", "a FIFO", "a directory", "a character device", ... for a stat st_mode. */
const char *dt_file_kind(unsigned mode);

/* Opens path read-only without blocking and refuses anything but a regular file.
 * what names the file the caller expects ("plan", "tokenizer.json"), for the hint.
 * *fd (close it) and *size (bytes; may be NULL) on success. */
int dt_file_open_regular(const char *path, const char *what, int *fd, uint64_t *size, dt_error *err);

/* Reads a whole regular file of at most max_bytes (DT_EINVAL over it, naming the
 * limit; a file that grows past it while read is refused too) into a malloc'd buffer
 * with a NUL after its len bytes (binary files too: the NUL only helps text readers).
 * The one whole-file reader: dt_read_file (dt_json.h) is it plus a check for text. */
int dt_file_read(const char *path, const char *what, uint64_t max_bytes, char **out, size_t *len, dt_error *err);

/* Writes n chunks (ptr[i], len[i]) to path atomically: path.tmp, every write checked,
 * fsync, rename, fsync the directory; on failure path.tmp is removed and path is
 * untouched. (With the file's CRC-32C: dt_filesum.h.) */
int dt_file_write_chunks_atomic(const char *path, const void *const *ptr, const size_t *len, int n,
                                dt_error *err);
/* The same for one buffer. */
int dt_write_file_atomic(const char *path, const void *data, size_t len, dt_error *err);

/* fsyncs a directory (so a rename inside it is durable). */
int dt_fsync_dir(const char *dir, dt_error *err);
/* The directory part of path ("." for a bare name, "/" for "/x"), in out (n bytes). */
void dt_file_parent_dir(const char *path, char *out, size_t n);
/* mkdir -p: creates dir and its missing parents (mode 0755). */
int dt_mkdirs(const char *dir, dt_error *err);

#endif
