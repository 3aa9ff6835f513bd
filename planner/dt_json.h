/* dt_json.h — strict JSON reading and stable printing on top of cJSON.
 *
 * What cJSON leaves to the caller and every dtplan/dtrun file format needs
 * (reference/ecosystem.md §9):
 *   - syntax errors located as "line L, column C" (cJSON only gives a pointer),
 *   - trailing garbage and duplicate keys rejected (DeepSpeed rejects duplicates),
 *   - typed getters whose errors name the JSON path and the offending value:
 *       "$.batch.micro_batch: expected a positive integer, got "4"",
 *   - integers stored as doubles accepted only when integral (5e8 is fine, 2.5 is not),
 *   - unknown keys reported with the keys that are allowed,
 *   - a deterministic 2-space pretty printer (integral numbers printed as integers,
 *     others with the shortest of %.15g / %.16g / %.17g that reads back exactly), so that
 *     write -> read -> write gives identical text.
 *
 * Usage (one reader per JSON object):
 *   dt_jobj r;
 *   if (dt_jobj_open(&r, root, "$", "batch", err)) return err->code;   // required object
 *   dt_jobj_int(&r, "micro_batch", 1, INT64_MAX, &b->micro_batch, err);
 *   ...
 *   if (dt_jobj_close(&r, err)) ...     // any key never asked for is "unknown"
 * Getters return 0 or DT_EINVAL; after the first error the reader is "failed" and
 * later calls return the same code without touching err, so a caller may check once. */
#ifndef DT_JSON_H
#define DT_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "dt_error.h"

#define DT_JSON_PATH_MAX 256
#define DT_JOBJ_MAX_KEYS 64
/* largest integer a double holds exactly: 2^53 */
#define DT_JSON_MAX_EXACT_INT 9007199254740992LL

/* Reads a whole file into a malloc'd, NUL-terminated buffer (free with free()).
 * len (may be NULL) receives the byte count. Errors: DT_EIO naming the path. */
int dt_json_read_file(const char *path, char **out, size_t *len, dt_error *err);

/* 1-based line and column of byte offset in text (column counts bytes). */
void dt_json_line_col(const char *text, size_t offset, int *line, int *col);

/* Strict parse: syntax errors as "<what>:L:C: invalid JSON near '...'", trailing
 * garbage rejected, duplicate keys rejected ("<what>: $.a.b: duplicate key").
 * what names the source in messages (a file path, "plan", ...). *out is freed with
 * cJSON_Delete. */
int dt_json_parse(const char *text, const char *what, cJSON **out, dt_error *err);

/* Reports the first duplicate key anywhere under item; path is item's JSON path. */
int dt_json_check_duplicates(const cJSON *item, const char *path, dt_error *err);

/* "$.a" + "b" -> "$.a.b" (keys that are not identifiers are written ["..."]). */
void dt_json_path_join(char *out, size_t n, const char *path, const char *key);

/* The value as compact JSON for error messages, cut to n-1 bytes with "...". */
void dt_json_describe(const cJSON *v, char *buf, size_t n);

/* ---- the object reader ---- */
typedef struct dt_jobj {
    const cJSON *obj;                     /* NULL after a failed open */
    char path[DT_JSON_PATH_MAX];          /* "$.batch" */
    const char *asked[DT_JOBJ_MAX_KEYS];  /* keys asked for (string literals), for close() */
    int n_asked;
    int failed;                           /* first error code, sticky */
} dt_jobj;

/* Starts reading obj (must be a JSON object) at path. */
int dt_jobj_init(dt_jobj *r, const cJSON *obj, const char *path, dt_error *err);
/* Starts reading the required object parent.key (child path parent->path + key). */
int dt_jobj_open(dt_jobj *r, dt_jobj *parent, const char *key, dt_error *err);
/* 1 when key is present (marks it asked for, so close() will not call it unknown). */
int dt_jobj_has(dt_jobj *r, const char *key);
/* The raw item for key (NULL and an error when missing). */
const cJSON *dt_jobj_item(dt_jobj *r, const char *key, dt_error *err);

/* Integer in [min, max] (JSON number with an integral value). */
int dt_jobj_int(dt_jobj *r, const char *key, int64_t min, int64_t max, int64_t *out,
                dt_error *err);
/* Same, into an int (bounds must fit an int). */
int dt_jobj_int32(dt_jobj *r, const char *key, int min, int max, int *out, dt_error *err);

typedef enum {
    DT_JNUM_ANY = 0,      /* any finite number */
    DT_JNUM_NONNEG = 1,   /* >= 0 */
    DT_JNUM_POS = 2,      /* > 0 */
    DT_JNUM_UNIT = 3,     /* 0 <= x <= 1 */
    DT_JNUM_UNIT_OPEN = 4 /* 0 <= x < 1 */
} dt_jnum_range;
int dt_jobj_num(dt_jobj *r, const char *key, dt_jnum_range range, double *out, dt_error *err);

/* JSON true/false only (not 0/1) -> 1/0. */
int dt_jobj_bool(dt_jobj *r, const char *key, int *out, dt_error *err);

/* String that fits buf (n bytes incl. NUL); allow_empty = 0 rejects "". */
int dt_jobj_str(dt_jobj *r, const char *key, int allow_empty, char *buf, size_t n,
                dt_error *err);

/* One of names[0..count-1] (exact, case-sensitive) -> its index. */
int dt_jobj_enum(dt_jobj *r, const char *key, const char *const *names, int count, int *out,
                 dt_error *err);

/* Errors on the first key of the object that was never asked for:
 * "$.batch.micro_bach: unknown key (allowed: micro_batch, grad_accum, ...)". */
int dt_jobj_close(dt_jobj *r, dt_error *err);

/* ---- printing ---- */
/* 2-space indented JSON, one key per line, arrays of numbers on one line, trailing
 * newline. Returns malloc'd text (free with free()) or NULL when out of memory. */
char *dt_json_print(const cJSON *item);

/* Writes text to path atomically: path.tmp.<pid> in the same directory, fsync,
 * rename over path, fsync the directory. On any error the old file is untouched
 * and the temporary file removed. */
int dt_json_write_file_atomic(const char *path, const char *text, dt_error *err);

#endif
