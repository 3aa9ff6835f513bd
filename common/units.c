/* units.c — counts and byte sizes as users type them; see dt_units.h for the rules. */
#include "dt_units.h"
#include "dt_consts.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DT_GB 1e9
/* Largest value that still converts to int64 exactly-enough: 2^63 is out of range. */
#define DT_INT64_LIMIT 9223372036854775807.0

/* Scans a plain decimal number: digits [ '.' digits ] [ e|E [+|-] digits ].
 * No sign, no hex, no "nan"/"inf". Returns the length consumed (0: not a number). */
static size_t scan_number(const char *s) {
    size_t i = 0, digits = 0;
    while (isdigit((unsigned char)s[i])) i++, digits++;
    if (s[i] == '.') {
        i++;
        while (isdigit((unsigned char)s[i])) i++, digits++;
    }
    if (digits == 0) return 0;
    if (s[i] == 'e' || s[i] == 'E') {
        size_t j = i + 1;
        if (s[j] == '+' || s[j] == '-') j++;
        if (isdigit((unsigned char)s[j])) {
            while (isdigit((unsigned char)s[j])) j++;
            i = j;
        }
    }
    return i;
}

/* Parses the number prefix; on success *value is finite and *rest points after it. */
static int parse_number(const char *s, double *value, const char **rest) {
    size_t n = scan_number(s);
    if (n == 0) return 0;
    char buf[128];
    if (n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end = NULL;
    double v = strtod(buf, &end);
    if (end != buf + n || !isfinite(v)) return 0;
    *value = v;
    *rest = s + n;
    return 1;
}

static const char *what_or_default(const char *what) { return what && *what ? what : "value"; }

/* What a parser expects, for its error messages. */
typedef struct {
    const char *noun;       /* "count" / "size" */
    const char *examples;   /* "32B, 6.7B, 7e9 or 350M" */
    const char *one;        /* a single working example: "32B" */
} dt_expect;

static const dt_expect expect_count = {"count", "32B, 6.7B, 7e9 or 350M", "32B"};
static const dt_expect expect_size = {"size", "80G = 80 GiB, 80GB = 80e9 bytes, 512M or 1T", "80G"};

static int syntax_error(const char *s, const char *what, const dt_expect *e, dt_error *err) {
    return dt_errorf(err, DT_EINVAL, "%s: cannot parse '%s' (expected a %s such as %s)", what, s,
                     e->noun, e->examples);
}

/* The shared front of both parsers: a non-negative decimal number, then *rest. */
static int parse_lead(const char *s, const char *what, const dt_expect *e, double *x,
                      const char **rest, dt_error *err) {
    if (s[0] == '-')
        return dt_errorf(err, DT_EINVAL, "%s: '%s' must be positive (e.g. %s)", what, s, e->one);
    if (!parse_number(s, x, rest)) return syntax_error(s, what, e, err);
    return DT_OK;
}

/* A converted value must be a positive int64: shared range check for counts and bytes. */
static int to_positive_int64(double x, const char *s, const char *what, const dt_expect *e,
                             int64_t *out, dt_error *err) {
    if (x >= DT_INT64_LIMIT)
        return dt_errorf(err, DT_EINVAL, "%s: '%s' is too large (at most about 9.2e18)", what, s);
    int64_t v = (int64_t)llround(x);
    if (v <= 0)
        return dt_errorf(err, DT_EINVAL, "%s: '%s' must be positive (e.g. %s)", what, s, e->one);
    *out = v;
    return DT_OK;
}

int dt_parse_count(const char *s, const char *what, int64_t *out, dt_error *err) {
    what = what_or_default(what);
    if (!s) s = "";
    double x;
    const char *rest;
    int rc = parse_lead(s, what, &expect_count, &x, &rest, err);
    if (rc) return rc;
    double mult = 1;
    switch (*rest) {
    case '\0': break;
    case 'k': case 'K': mult = 1e3; rest++; break;
    case 'm': case 'M': mult = 1e6; rest++; break;
    case 'b': case 'B': case 'g': case 'G': mult = 1e9; rest++; break;
    case 't': case 'T': mult = 1e12; rest++; break;
    default: rest = NULL; break;
    }
    if (!rest || *rest != '\0') return syntax_error(s, what, &expect_count, err);
    double v = x * mult;
    /* A count of things is whole: "6.7B" is, "2.5" is not. Allow double rounding noise. */
    if (v < DT_INT64_LIMIT && fabs(v - nearbyint(v)) > 1e-6 * fmax(1.0, v))
        return dt_errorf(err, DT_EINVAL, "%s: '%s' is not a whole number (e.g. %s)", what, s,
                         expect_count.examples);
    return to_positive_int64(v, s, what, &expect_count, out, err);
}

/* Memory size suffixes. K/M/G/T/P alone, with "i", or with "iB" are binary
 * (2^10k); with a bare trailing "B" they are decimal (10^3k). "B" alone = bytes. */
int dt_parse_bytes(const char *s, const char *what, int64_t *out, dt_error *err) {
    static const char prefixes[] = "KMGTP";
    what = what_or_default(what);
    if (!s) s = "";
    double x;
    const char *rest;
    int rc = parse_lead(s, what, &expect_size, &x, &rest, err);
    if (rc) return rc;
    double mult = 1;
    const char *p = *rest ? strchr(prefixes, toupper((unsigned char)*rest)) : NULL;
    if (p) {
        int power = (int)(p - prefixes) + 1;
        rest++;
        int binary;
        if (*rest == 'i' || *rest == 'I') {   /* "Gi", "GiB" */
            binary = 1;
            rest++;
            if (*rest == 'b' || *rest == 'B') rest++;
        } else if (*rest == 'b' || *rest == 'B') {   /* "GB": decimal */
            binary = 0;
            rest++;
        } else {   /* "G": binary, the convention of --mem 80G */
            binary = 1;
        }
        mult = binary ? pow(DT_KIB, power) : pow(10.0, 3 * power);
    } else if (*rest == 'b' || *rest == 'B') {
        rest++;
    } else if (*rest == '\0') {
        /* "--mem 80": 80 bytes or 80 GiB? A size needs its unit. */
        return dt_errorf(err, DT_EINVAL, "%s: '%s' has no unit; write %sG (GiB) or %sGB (10^9 bytes)", what, s, s, s);
    }
    if (*rest != '\0') return syntax_error(s, what, &expect_size, err);
    return to_positive_int64(x * mult, s, what, &expect_size, out, err);
}

int dt_parse_int(const char *s, const char *what, int64_t min, int64_t max, int64_t example, int64_t *out,
                 dt_error *err) {
    what = what_or_default(what);
    if (!s || !*s) return dt_errorf(err, DT_EINVAL, "%s: empty value (e.g. %s %lld)", what, what, (long long)example);
    const char *p = s + (*s == '-');
    int digits = 0;
    long long v = 0;
    for (; isdigit((unsigned char)*p); p++, digits++)   /* saturates instead of overflowing */
        v = v > (LLONG_MAX - 9) / 10 ? LLONG_MAX : v * 10 + (*p - '0');
    if (*p || !digits)
        return dt_errorf(err, DT_EINVAL, "%s: '%s' is not a whole number (e.g. %s %lld)", what, s, what,
                         (long long)example);
    if (*s == '-') v = -v;
    if (v < min)
        return dt_errorf(err, DT_EINVAL, "%s: %s is below the minimum %lld (e.g. %s %lld)", what, s, (long long)min,
                         what, (long long)example);
    if (v > max)
        return dt_errorf(err, DT_EINVAL, "%s: %s is above the supported maximum %lld (e.g. %s %lld)", what, s,
                         (long long)max, what, (long long)example);
    *out = v;
    return DT_OK;
}

int dt_parse_units(const char *s, dt_units *out, dt_error *err) {
    if (s && (strcasecmp(s, "GiB") == 0)) {
        *out = DT_UNITS_GIB;
        return DT_OK;
    }
    if (s && (strcasecmp(s, "GB") == 0)) {
        *out = DT_UNITS_GB;
        return DT_OK;
    }
    return dt_errorf(err, DT_EINVAL, "--units: unknown unit '%s' (use --units GiB for 2^30 bytes or --units GB for 10^9)",
                     s ? s : "");
}

double dt_bytes_in(int64_t bytes, dt_units u) {
    return (double)bytes / (u == DT_UNITS_GB ? DT_GB : DT_GIB);
}

const char *dt_units_name(dt_units u) { return u == DT_UNITS_GB ? "GB" : "GiB"; }

/* Below this many display units a value prints as "0.00": step down a unit. */
#define DT_FORMAT_MIN_SHOWN 0.005

char *dt_format_bytes(int64_t bytes, dt_units u, char *buf, size_t n) {
    static const char *const binary[] = {"GiB", "MiB", "KiB"}, *const decimal[] = {"GB", "MB", "kB"};
    const char *const *names = u == DT_UNITS_GB ? decimal : binary;
    const double step = u == DT_UNITS_GB ? 1e3 : 1024.0;
    double v = dt_bytes_in(bytes, u);
    int k = 0;
    while (bytes != 0 && fabs(v) < DT_FORMAT_MIN_SHOWN && k < 2) {
        v *= step;
        k++;
    }
    if (!buf || !n) return buf;
    if (bytes != 0 && (fabs(v) < DT_FORMAT_MIN_SHOWN || fabs((double)bytes) < step))
        snprintf(buf, n, "%lld B", (long long)bytes);
    else snprintf(buf, n, "%.2f %s", v, names[k]);
    return buf;
}

char *dt_format_count(int64_t v, char *buf, size_t len) {
    static const struct { double scale; const char *suffix; } steps[] = {
        {1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
    if (!buf || !len) return buf;
    double a = fabs((double)v);
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        if (a >= steps[i].scale) {
            /* 999,999 would print as "1000.00K": move up a step when rounding reaches 1000 */
            if (i > 0 && round(a / steps[i].scale * 100) >= 1000 * 100) i--;
            snprintf(buf, len, "%.2f%s", (double)v / steps[i].scale, steps[i].suffix);
            return buf;
        }
    }
    snprintf(buf, len, "%lld", (long long)v);
    return buf;
}
