/* json_util.c — see dt_json.h */
#include "dt_json.h"

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

int dt_json_read_file(const char *path, char **out, size_t *len, dt_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return dt_errorf(err, DT_EIO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return dt_errorf(err, DT_ENOMEM, "out of memory reading '%s'", path);
    }
    for (;;) {
        if (cap - n < 2) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return dt_errorf(err, DT_ENOMEM, "out of memory reading '%s'", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int failed = ferror(f);
    int saved = errno;
    fclose(f);
    if (failed) {
        free(buf);
        return dt_errorf(err, DT_EIO, "cannot read '%s': %s", path, strerror(saved));
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        free(buf);
        return dt_errorf(err, DT_EINVAL, "'%s' contains a NUL byte: not a JSON text file", path);
    }
    *out = buf;
    if (len) *len = n;
    return DT_OK;
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

int dt_json_parse(const char *text, const char *what, cJSON **out, dt_error *err) {
    *out = NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        size_t len = strlen(text);
        if (off > len) off = len;
        /* cJSON points at the token it could not use; step over white space so the
         * position names something visible. */
        while (off < len && isspace((unsigned char)text[off])) off++;
        int line, col;
        dt_json_line_col(text, off, &line, &col);
        if (off >= len)
            return dt_errorf(err, DT_EINVAL, "%s:%d:%d: invalid JSON: unexpected end of input",
                             what, line, col);
        char near[24];
        size_t k = 0;
        while (k + 1 < sizeof near && off + k < len && text[off + k] != '\n' &&
               text[off + k] != '\r')
            near[k] = text[off + k], k++;
        near[k] = '\0';
        return dt_errorf(err, DT_EINVAL, "%s:%d:%d: invalid JSON near '%s'", what, line, col,
                         near);
    }
    int rc = dt_json_check_duplicates(root, "$", err);
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
