/* dt_json.h — strict JSON reading and stable printing on top of cJSON.
 *
 * What cJSON leaves to the caller and every dtplan/dtrun file format needs
 * (DaveGamble/cJSON 1.7.15, cJSON.h: cJSON_ParseWithOpts, cJSON_GetErrorPtr):
 *   - a strict RFC 8259 check before cJSON sees the text (cJSON accepts leading zeros,
 *     raw control characters, unpaired surrogates, invalid UTF-8, and cuts strings at
 *     \u0000), its errors located as "line L, column C",
 *   - trailing garbage and duplicate keys rejected (DeepSpeed rejects duplicates),
 *   - bounded reading: regular files only, with a size limit,
 *   - typed getters whose errors name the JSON path and the offending value:
 *       "$.batch.micro_batch: expected a positive integer, got "4"",
 *   - integers stored as doubles accepted only when integral (5e8 is fine, 2.5 is not),
 *   - unknown keys reported with the keys that are allowed,
 *   - a deterministic 2-space pretty printer (integral numbers printed as integers,
 *     others with the shortest of %.15g / %.16g / %.17g that reads back exactly), so that
 *     write -> read -> write gives identical text.
 *
 * Why the check and the printer are ours and not jansson's (which would replace both
 * cJSON and the check): docs/architecture.md "Libraries". The check is held against
 * jansson's parser on a JSONTestSuite-style table (tests/plan/test_json.c).
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

/* ---- reading input files ----
 * Every file dtplan reads (plans, DeepSpeed configs, HF config.json, hardware
 * profiles, traces, run reports, metrics.jsonl) goes through dt_read_file: it must be
 * a regular file (a FIFO, device, directory or socket is refused with one line
 * naming the path and what it is, and is never read, so /dev/zero cannot fill memory
 * and a FIFO cannot block) of at most max_bytes. The limits are far above any real
 * input and low enough that a wrong path fails at once: */
#define DT_READ_MAX_JSON ((size_t)64 << 20)    /* 64 MiB: plans, DeepSpeed and HF configs, hardware
                                                * profiles, run reports (real ones are below 1 MiB) */
#define DT_READ_MAX_TRACE ((size_t)256 << 20)  /* 256 MiB: Chrome traces and metrics.jsonl, which grow
                                                * with the run (a 1000-step dtrun trace is ~20 MB) */

/* Reads a whole regular file of at most max_bytes into a malloc'd, NUL-terminated
 * buffer (free with free()); len (may be NULL) receives the byte count. Errors:
 * DT_EIO when it cannot be opened or read (the message names the path and the OS
 * reason), DT_EINVAL when it is not a regular file, is larger than max_bytes, or
 * holds a NUL byte (not text). */
int dt_read_file(const char *path, size_t max_bytes, char **out, size_t *len, dt_error *err);
/* Its first step, for readers that stream a file themselves: dt_file_open_regular
 * (dt_file.h). */
/* dt_json_read_file = dt_read_file with DT_READ_MAX_JSON. */
int dt_json_read_file(const char *path, char **out, size_t *len, dt_error *err);

/* 1-based line and column of byte offset in text (column counts bytes). */
void dt_json_line_col(const char *text, size_t offset, int *line, int *col);

/* Nesting bound of the validator: objects/arrays open at once. dtplan's files nest
 * at most 5 deep; the bound keeps hostile input from costing anything. */
#define DT_JSON_MAX_DEPTH 64

/* Strict RFC 8259 check of len bytes of text, before any parser sees it: one value
 * with white space around it; numbers without leading zeros, '+', NaN or Infinity,
 * at most 63 characters and finite as a double; strings with no raw control
 * characters, only the RFC's escapes, no \u0000, no unpaired surrogates, and
 * well-formed UTF-8 throughout; no trailing commas, comments, single quotes or
 * byte order mark; nesting at most DT_JSON_MAX_DEPTH. The first violation is one
 * line: "<what>:L:C: invalid JSON near '<text>': <what is wrong>" (or
 * "<what>:L:C: invalid JSON: unexpected end of input (...)"). */
int dt_json_validate(const char *text, size_t len, const char *what, dt_error *err);

/* Strict parse: dt_json_validate, then cJSON, then duplicate keys rejected
 * ("<what>: $.a.b: duplicate key"). what names the source in messages (a file path,
 * "plan", ...). *out is freed with cJSON_Delete. */
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
