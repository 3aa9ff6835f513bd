/* dt_safetensors.h — reading and writing safetensors files
 * (safetensors format spec: huggingface/safetensors README, "Format"):
 *   [8 bytes] N, u64 little-endian; [N bytes] JSON header; [rest] tensor bytes.
 * Header entries: "name": {"dtype": "F32"|"BF16"|"F16"|..., "shape": [...],
 * "data_offsets": [begin, end]} (offsets relative to the byte buffer), plus an
 * optional "__metadata__" string->string map.
 *
 * The reader validates what the Rust reader (safetensors/src/tensor.rs) does: N <= 100,000,000, the
 * header is a JSON object, every size matches shape x dtype, tensors tile the
 * buffer from 0 without holes or overlaps, and 8 + N + last end == file size.
 * The writer pads the header with spaces to a multiple of 8 and writes atomically
 * (temp name, fsync, rename). Sizes are bytes unless named numel. */
#ifndef DT_SAFETENSORS_H
#define DT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_file.h"
#include "dt_filesum.h"
#include "dt_precision.h"

#define DT_ST_MAX_DIMS 8
#define DT_ST_NAME_MAX 256
#define DT_ST_HEADER_MAX 100000000ULL   /* safetensors HeaderTooLarge limit */

typedef struct dt_st_tensor {
    char name[DT_ST_NAME_MAX];
    char dtype[8];             /* safetensors spelling: "F32", "BF16", "F16", "I32", ... */
    int ndim;
    int64_t shape[DT_ST_MAX_DIMS];
    uint64_t begin, end;       /* bytes, relative to the data buffer */
} dt_st_tensor;

typedef struct dt_st_file dt_st_file;

int dt_st_open(const char *path, dt_st_file **out, dt_error *err);
void dt_st_close(dt_st_file *f);
int dt_st_count(const dt_st_file *f);
const dt_st_tensor *dt_st_get(const dt_st_file *f, int i);
const dt_st_tensor *dt_st_find(const dt_st_file *f, const char *name);   /* NULL if absent */
const void *dt_st_data(const dt_st_file *f, const dt_st_tensor *t);
const char *dt_st_metadata(const dt_st_file *f, const char *key);      /* NULL if absent */
uint64_t dt_st_numel(const dt_st_tensor *t);

/* dtype mapping: "F32"/"BF16"/"F16" <-> dt_dtype; others fail. */
const char *dt_st_dtype_name(dt_dtype t);
int dt_st_dtype_parse(const char *s, dt_dtype *out);
int dt_st_dtype_bytes(const char *s);   /* bytes per element, 0 if unknown */

/* ---- writer: collect tensors (data is referenced, not copied), then write ---- */
typedef struct dt_st_writer dt_st_writer;

dt_st_writer *dt_st_writer_new(void);
void dt_st_writer_free(dt_st_writer *w);
/* dtype: safetensors spelling. data must stay valid until dt_st_write. */
int dt_st_writer_add(dt_st_writer *w, const char *name, const char *dtype, int ndim,
                     const int64_t *shape, const void *data, dt_error *err);
/* The same with a copy of data's bytes (bytes long, shape x dtype) that the writer keeps
 * until it is freed: for small tensors made for the write (e.g. a serialised state). */
int dt_st_writer_add_copy(dt_st_writer *w, const char *name, const char *dtype, int ndim, const int64_t *shape,
                          const void *data, size_t bytes, dt_error *err);
int dt_st_writer_meta(dt_st_writer *w, const char *key, const char *value, dt_error *err);
int dt_st_write(dt_st_writer *w, const char *path, dt_error *err);

/* ---- streaming writer: the same bytes as dt_st_write without every tensor
 * in memory at once. Add every tensor to w first (data may be NULL: only the
 * layout is used); open writes the header to path.tmp; put writes bytes
 * [off, off + len) of one tensor at their place in the file: tensors in any
 * order, each tensor's bytes in order (off = the bytes of it put so far); close checks that every tensor byte was put, fsyncs,
 * renames to path and fsyncs the directory (as dt_st_write). w must outlive
 * the stream. close and abort free the stream; abort removes path.tmp. ---- */
typedef struct dt_st_stream dt_st_stream;

int dt_st_stream_open(dt_st_writer *w, const char *path, dt_st_stream **out, dt_error *err);
int dt_st_stream_put(dt_st_stream *s, const char *name, uint64_t off, const void *data, size_t len,
                     dt_error *err);
int dt_st_stream_close(dt_st_stream *s, dt_error *err);
void dt_st_stream_abort(dt_st_stream *s);

/* dt_st_write / dt_st_stream_close that also return the written file's sum
 * (dt_file.h; computed from the bytes as they are written; the stream reads back
 * the tensors put out of file order). sum may be NULL. */
int dt_st_write_sum(dt_st_writer *w, const char *path, dt_file_sum *sum, dt_error *err);
int dt_st_stream_close_sum(dt_st_stream *s, dt_file_sum *sum, dt_error *err);

#endif
