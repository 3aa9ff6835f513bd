/* dt_units.h — parsing and printing of counts and byte sizes.
 *
 * Counts (parameters, tokens) are decimal: "32B" = 32e9, "6.7B", "7e9", "350M",
 * "125k"/"125K". Memory sizes follow the convention users type:
 *   "80G", "80GiB", "80g"  = 80 * 2^30 bytes (binary when no 'B' follows or 'iB' does)
 *   "80GB"                 = 80 * 10^9 bytes (decimal when written with a trailing 'B')
 *   "512M" = 512 MiB, "1T" = 1 TiB, "4096B" = 4096 bytes.
 * A size without a unit ("80": bytes? GiB?) is an error asking for one:
 *   "--mem: '80' has no unit; write 80G (GiB) or 80GB (10^9 bytes)".
 * Zero, negative, non-finite and trailing-garbage inputs are errors (DT_EINVAL)
 * whose message names the offending text and gives an example that works. */
#ifndef DT_UNITS_H
#define DT_UNITS_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"

typedef enum { DT_UNITS_GIB = 0, DT_UNITS_GB = 1 } dt_units;

/* what: names the option in error messages, e.g. "--params". */
int dt_parse_count(const char *s, const char *what, int64_t *out, dt_error *err);
int dt_parse_bytes(const char *s, const char *what, int64_t *out, dt_error *err);
/* A plain whole number (digits, optionally '-') in [min, max] for options such as
 * --gpus, --seq, --steps: messages name the option and show "what example", e.g.
 * "--gpus: 0 is below the minimum 1 (e.g. --gpus 8)". */
int dt_parse_int(const char *s, const char *what, int64_t min, int64_t max, int64_t example, int64_t *out,
                 dt_error *err);
/* "GB" or "GiB" (case-insensitive) */
int dt_parse_units(const char *s, dt_units *out, dt_error *err);

/* "12.34 GiB" / "13.25 GB": two decimals, the unit always printed. A non-zero
 * size that would show as 0.00 steps down ("3.93 MiB", "12.00 KiB", "100 B";
 * decimal: MB, kB); zero stays "0.00 GiB". Returns buf. */
char *dt_format_bytes(int64_t bytes, dt_units u, char *buf, size_t n);
/* bytes as a plain number in the display unit (bytes / 2^30 or / 1e9) */
double dt_bytes_in(int64_t bytes, dt_units u);
const char *dt_units_name(dt_units u);   /* "GiB" / "GB" */
/* "32.76B", "124.44M": a parameter count for humans */
char *dt_format_count(int64_t n, char *buf, size_t len);

#endif
