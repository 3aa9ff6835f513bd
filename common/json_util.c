/* json_util.c — see dt_json.h */
#include "dt_json.h"

#include "dt_file.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- files */

int dt_read_file(const char *path, size_t max_bytes, char **out, size_t *len, dt_error *err) {
    size_t n = 0;
    int rc = dt_file_read(path, "file", max_bytes, out, &n, err);
    if (rc) return rc;
    if (strlen(*out) != n) {
        free(*out);
        *out = NULL;
        return dt_errorf(err, DT_EINVAL, "'%s' contains a NUL byte: not a text file", path);
    }
    if (len) *len = n;
    return DT_OK;
}

int dt_json_read_file(const char *path, char **out, size_t *len, dt_error *err) {
    return dt_read_file(path, DT_READ_MAX_JSON, out, len, err);
}

static int fsync_dir_of(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) return -1;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int dt_json_write_file_atomic(const char *path, const char *text, dt_error *err) {
    char tmp[4096 + 64];
    if (!path || !*path) return dt_errorf(err, DT_EINVAL, "no output path given");
    if (strlen(path) > 4096) return dt_errorf(err, DT_EINVAL, "output path too long");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return dt_errorf(err, DT_EIO, "cannot create '%s' (temporary for '%s'): %s", tmp, path,
                         strerror(errno));
    size_t len = strlen(text), done = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            return dt_errorf(err, DT_EIO, "cannot write '%s': %s", tmp, strerror(e));
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return dt_errorf(err, DT_EIO, "cannot fsync '%s': %s", tmp, strerror(e));
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return dt_errorf(err, DT_EIO, "cannot close '%s': %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return dt_errorf(err, DT_EIO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(e));
    }
    /* Makes the rename durable; some file systems refuse fsync on directories,
     * which does not make the (already complete) file any less valid. */
    (void)fsync_dir_of(path);
    return DT_OK;
}

/* --------------------------------------------------------------- parsing */

void dt_json_line_col(const char *text, size_t offset, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < offset && text[i]; i++) {
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

void dt_json_path_join(char *out, size_t n, const char *path, const char *key) {
    int ident = (isalpha((unsigned char)key[0]) || key[0] == '_');
    for (const char *k = key; *k && ident; k++)
        if (!isalnum((unsigned char)*k) && *k != '_' && *k != '-') ident = 0;
    if (ident)
        snprintf(out, n, "%s.%s", path, key);
    else
        snprintf(out, n, "%s[\"%s\"]", path, key);
}

int dt_json_check_duplicates(const cJSON *item, const char *path, dt_error *err) {
    char sub[DT_JSON_PATH_MAX];
    int i = 0;
    for (const cJSON *c = item ? item->child : NULL; c; c = c->next, i++) {
        if (cJSON_IsObject(item)) {
            for (const cJSON *d = item->child; d != c; d = d->next) {
                if (d->string && c->string && !strcmp(d->string, c->string)) {
                    dt_json_path_join(sub, sizeof sub, path, c->string);
                    return dt_errorf(err, DT_EINVAL,
                                     "%s: duplicate key (each key may appear once per object)",
                                     sub);
                }
            }
            dt_json_path_join(sub, sizeof sub, path, c->string ? c->string : "");
        } else {
            snprintf(sub, sizeof sub, "%s[%d]", path, i);
        }
        if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
            int rc = dt_json_check_duplicates(c, sub, err);
            if (rc) return rc;
        }
    }
    return DT_OK;
}

/* ------------------------------------------------------- RFC 8259 validation */

/* The validator walks the text once, byte by byte, with an explicit stack of the
 * open containers (no recursion), and stops at the first thing RFC 8259 does not
 * allow. It runs before cJSON, which is lenient where the RFC is not (leading zeros,
 * raw control characters, unpaired surrogates, invalid UTF-8, ...). */
typedef struct {
    const unsigned char *s;
    size_t n;
    const char *what;
    dt_error *err;
} jv_ctx;

/* The text at off for a message: up to 20 bytes on the same line, bytes outside
 * printable ASCII written as \xNN, so the message stays one printable line. */
static void jv_near(const jv_ctx *v, size_t off, char *buf, size_t n) {
    size_t k = 0;
    for (size_t i = off; i < v->n && i < off + 20 && k + 5 < n; i++) {
        unsigned char c = v->s[i];
        if (c == '\n' || c == '\r') break;
        if (c < 0x20 || c >= 0x7f) k += (size_t)snprintf(buf + k, n - k, "\\x%02X", c);
        else buf[k++] = (char)c;
    }
    buf[k] = '\0';
}

static int jv_fail(const jv_ctx *v, size_t off, const char *why) {
    int line, col;
    dt_json_line_col((const char *)v->s, off, &line, &col);
    if (off >= v->n)
        return dt_errorf(v->err, DT_EINVAL, "%s:%d:%d: invalid JSON: unexpected end of input (%s)", v->what,
                         line, col, why);
    char near[96];
    jv_near(v, off, near, sizeof near);
    return dt_errorf(v->err, DT_EINVAL, "%s:%d:%d: invalid JSON near '%s': %s", v->what, line, col, near, why);
}

static size_t jv_ws(const jv_ctx *v, size_t i) {
    while (i < v->n && (v->s[i] == ' ' || v->s[i] == '\t' || v->s[i] == '\n' || v->s[i] == '\r')) i++;
    return i;
}

static int jv_hex(unsigned char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Four hex digits at s[i..i+3] -> code unit, or -1. */
static long jv_u16(const jv_ctx *v, size_t i) {
    if (i + 4 > v->n) return -1;
    long u = 0;
    for (int k = 0; k < 4; k++) {
        int h = jv_hex(v->s[i + (size_t)k]);
        if (h < 0) return -1;
        u = u * 16 + h;
    }
    return u;
}

/* Length of the well-formed UTF-8 sequence at s[i] (RFC 3629, table 3-7 of the
 * Unicode standard: no overlong forms, no surrogates, nothing above U+10FFFF), 0 if none. */
static size_t jv_utf8(const jv_ctx *v, size_t i) {
    const unsigned char *s = v->s + i;
    size_t left = v->n - i;
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;   /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else return 0;
    if (left < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < len; k++)
        if (s[k] < 0x80 || s[k] > 0xBF) return 0;
    return len;
}

/* A string starting at the '"' at *i; on success *i is just past the closing quote. */
static int jv_string(const jv_ctx *v, size_t *i) {
    size_t start = *i, p = start + 1;
    for (;;) {
        if (p >= v->n) return jv_fail(v, v->n, "a string is not closed");
        unsigned char c = v->s[p];
        if (c == '"') {
            *i = p + 1;
            return DT_OK;
        }
        if (c < 0x20) {
            char why[128];
            snprintf(why, sizeof why, "raw control character U+%04X inside a string (write it escaped, e.g. \\n or \\u%04X)",
                     c, c);
            return jv_fail(v, p, why);
        }
        if (c >= 0x80) {
            size_t len = jv_utf8(v, p);
            if (!len) return jv_fail(v, p, "invalid UTF-8 (JSON text must be UTF-8)");
            p += len;
            continue;
        }
        if (c != '\\') {
            p++;
            continue;
        }
        if (p + 1 >= v->n) return jv_fail(v, v->n, "a string is not closed");
        unsigned char e = v->s[p + 1];
        if (e && strchr("\"\\/bfnrt", e)) {
            p += 2;
            continue;
        }
        if (e != 'u') return jv_fail(v, p, "invalid escape (allowed: \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
        long u = jv_u16(v, p + 2);
        if (u < 0) return jv_fail(v, p, "\\u needs four hex digits");
        if (u == 0) return jv_fail(v, p, "\\u0000 (NUL) inside a string is not accepted (it would cut the string)");
        if (u >= 0xDC00 && u <= 0xDFFF)
            return jv_fail(v, p, "unpaired UTF-16 surrogate (a low surrogate without a high one before it)");
        if (u >= 0xD800 && u <= 0xDBFF) {
            long lo = p + 8 <= v->n && v->s[p + 6] == '\\' && v->s[p + 7] == 'u' ? jv_u16(v, p + 8) : -1;
            if (lo < 0xDC00 || lo > 0xDFFF)
                return jv_fail(v, p, "unpaired UTF-16 surrogate (a high surrogate must be followed by \\uDC00..\\uDFFF)");
            p += 12;
            continue;
        }
        p += 6;
    }
}

#define JV_NOT_NUMBERS "NaN and Infinity are not JSON numbers"
#define JV_NO_COMMENTS "comments are not JSON"

/* DT_JSON_MAX_NUMBER_CHARS: cJSON copies a number into a 64-byte buffer and would
 * read a longer one in two pieces; no real value needs more digits. */
#define DT_JSON_MAX_NUMBER_CHARS 63

static int isdig(unsigned char c) { return c >= '0' && c <= '9'; }

/* number = [ "-" ] ( "0" / digit1-9 *digit ) [ "." 1*digit ] [ ( "e" / "E" ) [ "+" / "-" ] 1*digit ] */
static int jv_number(const jv_ctx *v, size_t *i) {
    size_t start = *i, p = start;
    if (p < v->n && v->s[p] == '-') p++;
    if (p >= v->n || !isdig(v->s[p])) {
        if (p < v->n && (v->s[p] == 'I' || v->s[p] == 'N')) return jv_fail(v, start, JV_NOT_NUMBERS);
        return jv_fail(v, start, "'-' must be followed by a digit");
    }
    if (v->s[p] == '0' && p + 1 < v->n && isdig(v->s[p + 1]))
        return jv_fail(v, start, "a number with a leading zero (write 1, not 01)");
    while (p < v->n && isdig(v->s[p])) p++;
    if (p < v->n && v->s[p] == '.') {
        p++;
        if (p >= v->n || !isdig(v->s[p])) return jv_fail(v, start, "a digit must follow the decimal point (write 1.0, not 1.)");
        while (p < v->n && isdig(v->s[p])) p++;
    }
    if (p < v->n && (v->s[p] == 'e' || v->s[p] == 'E')) {
        p++;
        if (p < v->n && (v->s[p] == '+' || v->s[p] == '-')) p++;
        if (p >= v->n || !isdig(v->s[p])) return jv_fail(v, start, "an exponent needs digits (write 1e5)");
        while (p < v->n && isdig(v->s[p])) p++;
    }
    if (p - start > DT_JSON_MAX_NUMBER_CHARS) return jv_fail(v, start, "a number longer than 63 characters");
    char buf[DT_JSON_MAX_NUMBER_CHARS + 1];
    memcpy(buf, v->s + start, p - start);
    buf[p - start] = '\0';
    if (!isfinite(strtod(buf, NULL))) return jv_fail(v, start, "a number too large for a double (above 1.8e308)");
    *i = p;
    return DT_OK;
}

/* A member's key and its ':' at *i (after white space); *i ends past the ':'. */
static int jv_key(const jv_ctx *v, size_t *i, const char *expected) {
    if (*i >= v->n || v->s[*i] != '"')
        return jv_fail(v, *i, *i < v->n && v->s[*i] == '\'' ? "single quotes are not JSON (keys use double quotes)"
                                                             : expected);
    int rc = jv_string(v, i);
    if (rc) return rc;
    *i = jv_ws(v, *i);
    if (*i >= v->n || v->s[*i] != ':') return jv_fail(v, *i, "expected ':' after the key");
    (*i)++;
    return DT_OK;
}

/* What a value cannot start with, said plainly. */
static int jv_bad_value(const jv_ctx *v, size_t i) {
    if (i >= v->n) return jv_fail(v, i, "a value is missing");
    unsigned char c = v->s[i];
    const char *why = "expected a value (an object, array, string, number, true, false or null)";
    if (c == '\'') why = "single quotes are not JSON (strings use double quotes)";
    else if (c == '/') why = JV_NO_COMMENTS;
    else if (c == '+') why = "a number cannot start with '+'";
    else if (c == '.') why = "a number needs a digit before the decimal point (write 0.5)";
    else if (c == 'N' || c == 'I') why = JV_NOT_NUMBERS;
    else if (c == ',') why = "a value is missing before ','";
    else if (c == ']' || c == '}') why = "a value is missing (a trailing comma? RFC 8259 allows none)";
    else if (c >= 0x80) why = "a value cannot start with a non-ASCII byte (strings go in double quotes)";
    return jv_fail(v, i, why);
}

int dt_json_validate(const char *text, size_t len, const char *what, dt_error *err) {
    jv_ctx v = {(const unsigned char *)text, len, what ? what : "JSON", err};
    char stack[DT_JSON_MAX_DEPTH];   /* '{' or '[' per open container */
    int depth = 0;
    size_t i = 0;
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3))
        return jv_fail(&v, 0, "a UTF-8 byte order mark (save the file as UTF-8 without BOM)");
    for (;;) {
        /* a value at i */
        i = jv_ws(&v, i);
        if (i >= v.n) return jv_fail(&v, i, depth ? "a value is missing" : "no JSON value");
        unsigned char c = v.s[i];
        int rc = DT_OK;
        if (c == '{' || c == '[') {
            if (depth == DT_JSON_MAX_DEPTH) {
                char why[96];
                snprintf(why, sizeof why, "nesting deeper than %d objects/arrays", DT_JSON_MAX_DEPTH);
                return jv_fail(&v, i, why);
            }
            stack[depth++] = (char)c;
            i = jv_ws(&v, i + 1);
            if (i < v.n && v.s[i] == (c == '{' ? '}' : ']')) {
                depth--;
                i++;
            } else if (c == '{') {
                if ((rc = jv_key(&v, &i, "expected a key in double quotes or '}'"))) return rc;
                continue;   /* the first member's value */
            } else {
                continue;   /* the first element */
            }
        } else if (c == '"') {
            rc = jv_string(&v, &i);
        } else if (c == '-' || isdig(c)) {
            rc = jv_number(&v, &i);
        } else if (c == 't' || c == 'f' || c == 'n') {
            const char *lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
            size_t l = strlen(lit);
            if (v.n - i < l || memcmp(v.s + i, lit, l)) return jv_fail(&v, i, "expected true, false or null (lower case)");
            i += l;
        } else {
            return jv_bad_value(&v, i);
        }
        if (rc) return rc;
        /* after a value: close containers, or ',' to the next member / element */
        for (;;) {
            i = jv_ws(&v, i);
            if (depth == 0) {
                if (i < v.n)
                    return jv_fail(&v, i, v.s[i] == '/' ? JV_NO_COMMENTS : "text after the JSON value (one value per file)");
                return DT_OK;
            }
            char top = stack[depth - 1];
            char close = top == '{' ? '}' : ']';
            if (i >= v.n) return jv_fail(&v, i, top == '{' ? "an object is not closed" : "an array is not closed");
            if (v.s[i] == close) {
                depth--;
                i++;
                continue;
            }
            if (v.s[i] == '/') return jv_fail(&v, i, JV_NO_COMMENTS);
            if (v.s[i] != ',')
                return jv_fail(&v, i, top == '{' ? "expected ',' or '}' after a member" : "expected ',' or ']' after an element");
            i = jv_ws(&v, i + 1);
            if (i < v.n && (v.s[i] == '}' || v.s[i] == ']'))
                return jv_fail(&v, i, "a trailing comma (RFC 8259 allows none)");
            if (top == '{' && (rc = jv_key(&v, &i, "expected a key in double quotes"))) return rc;
            break;   /* the next value */
        }
    }
}

int dt_json_parse(const char *text, const char *what, cJSON **out, dt_error *err) {
    *out = NULL;
    if (!what) what = "JSON";
    int rc = dt_json_validate(text, strlen(text), what, err);
    if (rc) return rc;
    /* the text is RFC 8259 JSON within cJSON's limits: cJSON fails only without memory */
    cJSON *root = cJSON_ParseWithOpts(text, NULL, 1);
    if (!root) return dt_errorf(err, DT_ENOMEM, "%s: out of memory while parsing the JSON", what);
    rc = dt_json_check_duplicates(root, "$", err);
    if (rc) {
        cJSON_Delete(root);
        return dt_error_prefix(err, "%s", what);
    }
    *out = root;
    return DT_OK;
}

void dt_json_describe(const cJSON *v, char *buf, size_t n) {
    if (!n) return;
    char *s = v ? cJSON_PrintUnformatted((cJSON *)v) : NULL;
    if (!s) {
        snprintf(buf, n, "%s", v ? "(unprintable)" : "nothing");
        return;
    }
    if (strlen(s) < n) {
        snprintf(buf, n, "%s", s);
    } else if (n > 4) {
        memcpy(buf, s, n - 4);
        memcpy(buf + n - 4, "...", 4);
    } else {
        buf[0] = '\0';
    }
    cJSON_free(s);
}

/* ---------------------------------------------------------------- reader */

static int jfail(dt_jobj *r, dt_error *err, const char *key, const char *expected,
                 const cJSON *got) {
    char path[DT_JSON_PATH_MAX], desc[64];
    dt_json_path_join(path, sizeof path, r->path, key);
    dt_json_describe(got, desc, sizeof desc);
    r->failed = DT_EINVAL;
    return dt_errorf(err, DT_EINVAL, "%s: expected %s, got %s", path, expected, desc);
}

int dt_jobj_init(dt_jobj *r, const cJSON *obj, const char *path, dt_error *err) {
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path);
    if (!cJSON_IsObject(obj)) {
        char desc[64];
        dt_json_describe(obj, desc, sizeof desc);
        r->failed = DT_EINVAL;
        return dt_errorf(err, DT_EINVAL, "%s: expected an object, got %s", path, desc);
    }
    r->obj = obj;
    return DT_OK;
}

static void mark(dt_jobj *r, const char *key) {
    for (int i = 0; i < r->n_asked; i++)
        if (!strcmp(r->asked[i], key)) return;
    if (r->n_asked < DT_JOBJ_MAX_KEYS) r->asked[r->n_asked++] = key;
}

int dt_jobj_has(dt_jobj *r, const char *key) {
    if (!r->obj) return 0;
    mark(r, key);
    return cJSON_GetObjectItemCaseSensitive(r->obj, key) != NULL;
}

const cJSON *dt_jobj_item(dt_jobj *r, const char *key, dt_error *err) {
    if (r->failed || !r->obj) {
        r->failed = r->failed ? r->failed : DT_EINVAL;
        return NULL;
    }
    mark(r, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->obj, key);
    if (!v) {
        char path[DT_JSON_PATH_MAX];
        dt_json_path_join(path, sizeof path, r->path, key);
        r->failed = DT_EINVAL;
        dt_errorf(err, DT_EINVAL, "%s: missing required key", path);
    }
    return v;
}

int dt_jobj_open(dt_jobj *r, dt_jobj *parent, const char *key, dt_error *err) {
    memset(r, 0, sizeof *r);
    const cJSON *v = dt_jobj_item(parent, key, err);
    if (!v) {
        r->failed = parent->failed;
        return r->failed;
    }
    char path[DT_JSON_PATH_MAX];
    dt_json_path_join(path, sizeof path, parent->path, key);
    int rc = dt_jobj_init(r, v, path, err);
    if (rc) parent->failed = rc;
    return rc;
}

static void int_expectation(int64_t min, int64_t max, char *buf, size_t n) {
    if (min == 1 && max == INT64_MAX)
        snprintf(buf, n, "a positive integer");
    else if (min == 0 && max == INT64_MAX)
        snprintf(buf, n, "a non-negative integer");
    else if (max == INT64_MAX)
        snprintf(buf, n, "an integer >= %" PRId64, min);
    else
        snprintf(buf, n, "an integer in [%" PRId64 ", %" PRId64 "]", min, max);
}

int dt_jobj_int(dt_jobj *r, const char *key, int64_t min, int64_t max, int64_t *out,
                dt_error *err) {
    const cJSON *v = dt_jobj_item(r, key, err);
    if (!v) return r->failed;
    char want[96];
    int_expectation(min, max, want, sizeof want);
    if (!cJSON_IsNumber(v)) return jfail(r, err, key, want, v);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || fabs(d) > (double)DT_JSON_MAX_EXACT_INT)
        return jfail(r, err, key, want, v);
    int64_t i = (int64_t)d;
    if (i < min || i > max) return jfail(r, err, key, want, v);
    *out = i;
    return DT_OK;
}

int dt_jobj_int32(dt_jobj *r, const char *key, int min, int max, int *out, dt_error *err) {
    int64_t v = 0;
    int rc = dt_jobj_int(r, key, min, max, &v, err);
    if (!rc) *out = (int)v;
    return rc;
}

int dt_jobj_num(dt_jobj *r, const char *key, dt_jnum_range range, double *out, dt_error *err) {
    static const char *const want[] = {"a number", "a non-negative number", "a positive number",
                                       "a number in [0, 1]", "a number in [0, 1)"};
    const cJSON *v = dt_jobj_item(r, key, err);
    if (!v) return r->failed;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return jfail(r, err, key, want[range], v);
    double d = v->valuedouble;
    int ok = 1;
    switch (range) {
    case DT_JNUM_ANY: break;
    case DT_JNUM_NONNEG: ok = d >= 0; break;
    case DT_JNUM_POS: ok = d > 0; break;
    case DT_JNUM_UNIT: ok = d >= 0 && d <= 1; break;
    case DT_JNUM_UNIT_OPEN: ok = d >= 0 && d < 1; break;
    }
    if (!ok) return jfail(r, err, key, want[range], v);
    *out = d;
    return DT_OK;
}

int dt_jobj_bool(dt_jobj *r, const char *key, int *out, dt_error *err) {
    const cJSON *v = dt_jobj_item(r, key, err);
    if (!v) return r->failed;
    if (!cJSON_IsBool(v)) return jfail(r, err, key, "true or false", v);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return DT_OK;
}

int dt_jobj_str(dt_jobj *r, const char *key, int allow_empty, char *buf, size_t n,
                dt_error *err) {
    const cJSON *v = dt_jobj_item(r, key, err);
    if (!v) return r->failed;
    const char *want = allow_empty ? "a string" : "a non-empty string";
    if (!cJSON_IsString(v) || !v->valuestring) return jfail(r, err, key, want, v);
    if (!allow_empty && !v->valuestring[0]) return jfail(r, err, key, want, v);
    if (strlen(v->valuestring) >= n) {
        char w[64];
        snprintf(w, sizeof w, "a string of at most %zu bytes", n - 1);
        return jfail(r, err, key, w, v);
    }
    snprintf(buf, n, "%s", v->valuestring);
    return DT_OK;
}

int dt_jobj_enum(dt_jobj *r, const char *key, const char *const *names, int count, int *out,
                 dt_error *err) {
    const cJSON *v = dt_jobj_item(r, key, err);
    if (!v) return r->failed;
    if (cJSON_IsString(v) && v->valuestring)
        for (int i = 0; i < count; i++)
            if (names[i] && !strcmp(v->valuestring, names[i])) {
                *out = i;
                return DT_OK;
            }
    char want[256];
    size_t used = (size_t)snprintf(want, sizeof want, "one of");
    for (int i = 0; i < count && used < sizeof want; i++)
        used += (size_t)snprintf(want + used, sizeof want - used, "%s \"%s\"", i ? "," : "",
                                 names[i] ? names[i] : "?");
    return jfail(r, err, key, want, v);
}

int dt_jobj_close(dt_jobj *r, dt_error *err) {
    if (r->failed) return r->failed;
    for (const cJSON *c = r->obj->child; c; c = c->next) {
        int known = 0;
        for (int i = 0; i < r->n_asked && !known; i++) known = !strcmp(r->asked[i], c->string);
        if (known) continue;
        char path[DT_JSON_PATH_MAX], allowed[512];
        dt_json_path_join(path, sizeof path, r->path, c->string);
        size_t used = 0;
        allowed[0] = '\0';
        for (int i = 0; i < r->n_asked && used < sizeof allowed; i++)
            used += (size_t)snprintf(allowed + used, sizeof allowed - used, "%s%s", i ? ", " : "",
                                     r->asked[i]);
        r->failed = DT_EINVAL;
        return dt_errorf(err, DT_EINVAL, "%s: unknown key (allowed here: %s)", path, allowed);
    }
    return DT_OK;
}

/* -------------------------------------------------------------- printing */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *t, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, t, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *t) { sb_put(b, t, strlen(t)); }

static void sb_indent(sbuf *b, int depth) {
    for (int i = 0; i < depth; i++) sb_put(b, "  ", 2);
}

static void sb_quoted(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                sb_str(b, esc);
            } else {
                sb_put(b, (const char *)p, 1);
            }
        }
    }
    sb_put(b, "\"", 1);
}

static void sb_number(sbuf *b, double d) {
    char t[40];
    if (!isfinite(d)) {
        sb_str(b, "null"); /* JSON has no NaN/Inf; cJSON does the same */
        return;
    }
    if (d == floor(d) && fabs(d) < (double)DT_JSON_MAX_EXACT_INT) {
        snprintf(t, sizeof t, "%" PRId64, (int64_t)d);
    } else {
        /* the shortest of 15, 16, 17 significant digits that reads back exactly */
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(t, sizeof t, "%.*g", digits, d);
            if (strtod(t, NULL) == d) break;
        }
    }
    sb_str(b, t);
}

static int is_scalar(const cJSON *v) { return !cJSON_IsObject(v) && !cJSON_IsArray(v); }

static void print_value(sbuf *b, const cJSON *v, int depth) {
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        int obj = cJSON_IsObject(v);
        if (!v->child) {
            sb_str(b, obj ? "{}" : "[]");
            return;
        }
        int inline_array = !obj;
        for (const cJSON *c = v->child; c && inline_array; c = c->next)
            inline_array = is_scalar(c);
        sb_str(b, obj ? "{" : "[");
        for (const cJSON *c = v->child; c; c = c->next) {
            if (inline_array) {
                if (c != v->child) sb_str(b, ", ");
            } else {
                sb_str(b, c == v->child ? "\n" : ",\n");
                sb_indent(b, depth + 1);
            }
            if (obj) {
                sb_quoted(b, c->string ? c->string : "");
                sb_str(b, ": ");
            }
            print_value(b, c, depth + 1);
        }
        if (!inline_array) {
            sb_str(b, "\n");
            sb_indent(b, depth);
        }
        sb_str(b, obj ? "}" : "]");
    } else if (cJSON_IsString(v)) {
        sb_quoted(b, v->valuestring ? v->valuestring : "");
    } else if (cJSON_IsNumber(v)) {
        sb_number(b, v->valuedouble);
    } else if (cJSON_IsTrue(v)) {
        sb_str(b, "true");
    } else if (cJSON_IsFalse(v)) {
        sb_str(b, "false");
    } else {
        sb_str(b, "null");
    }
}

char *dt_json_print(const cJSON *item) {
    sbuf b = {0};
    print_value(&b, item, 0);
    sb_str(&b, "\n");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
