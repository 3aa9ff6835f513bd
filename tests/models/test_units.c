/* Counts and byte sizes: the table of good and bad inputs from dt_units.h. */
#include <stdint.h>

#include "dt_test.h"
#include "dt_units.h"

typedef struct {
    const char *text;
    int64_t value;   /* 0 = must be rejected */
} case_t;

#define GIB (INT64_C(1) << 30)

int main(void) {
    dt_error err = {0};
    int64_t v;

    static const case_t counts[] = {
        {"32B", INT64_C(32000000000)}, {"6.7B", INT64_C(6700000000)}, {"7e9", INT64_C(7000000000)},
        {"350M", 350000000},           {"125k", 125000},              {"125K", 125000},
        {"1.5T", INT64_C(1500000000000)}, {"124439808", 124439808},   {"0.5B", 500000000},
        {"7E9", INT64_C(7000000000)},  {"1.3b", 1300000000},          {"2G", INT64_C(2000000000)},
        {"32X", 0}, {"", 0}, {"-8B", 0}, {"0", 0}, {"0B", 0}, {"nan", 0}, {"inf", 0},
        {"32BB", 0}, {"32 B", 0}, {" 32B", 0}, {"B", 0}, {".", 0}, {"1e", 0}, {"1e99", 0},
        {"2.5", 0}, {"0x10", 0}, {"+5", 0}, {"9.3e18", 0}, {"32Bx", 0}, {"1..2", 0},
    };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        dt_error_clear(&err);
        v = -1;
        int rc = dt_parse_count(counts[i].text, "--params", &v, &err);
        if (counts[i].value) {
            if (rc) fprintf(stderr, "count '%s': %s\n", counts[i].text, err.msg);
            CHECK_EQ_I64(rc, DT_OK);
            CHECK_EQ_I64(v, counts[i].value);
        } else {
            if (rc == DT_OK) fprintf(stderr, "count '%s' accepted as %lld\n", counts[i].text, (long long)v);
            CHECK_EQ_I64(rc, DT_EINVAL);
            CHECK(strncmp(err.msg, "--params: ", 10) == 0);
            CHECK(strstr(err.msg, counts[i].text) != NULL);
        }
    }
    CHECK_EQ_I64(dt_parse_count("32X", "--params", &v, &err), DT_EINVAL);
    CHECK_STR(err.msg, "--params: cannot parse '32X' (expected a count such as 32B, 6.7B, 7e9 or 350M)");
    CHECK_EQ_I64(dt_parse_count("-8B", "--params", &v, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "positive") != NULL);
    CHECK_EQ_I64(dt_parse_count("0", "--params", &v, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "positive") != NULL);
    CHECK_EQ_I64(dt_parse_count("1e30", "--params", &v, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "too large") != NULL);
    CHECK_EQ_I64(dt_parse_count(NULL, NULL, &v, &err), DT_EINVAL);

    static const case_t sizes[] = {
        {"80G", 80 * GIB}, {"80GiB", 80 * GIB}, {"80g", 80 * GIB}, {"80Gi", 80 * GIB},
        {"80gib", 80 * GIB}, {"80GB", INT64_C(80000000000)}, {"80gb", INT64_C(80000000000)},
        {"512M", 512 * (INT64_C(1) << 20)}, {"512MB", 512000000}, {"1T", INT64_C(1) << 40},
        {"1TB", INT64_C(1000000000000)}, {"1.5G", 3 * (GIB / 2)}, {"4096", 0}, {"4096B", 4096},
        {"2K", 2048}, {"2kB", 2000}, {"1P", INT64_C(1) << 50}, {"1e3", 0}, {"1e3B", 1000}, {"0.5GiB", GIB / 2},
        {"80", 0}, {"1.5", 0},
        {"80X", 0}, {"", 0}, {"-8G", 0}, {"0", 0}, {"0G", 0}, {"nan", 0}, {"inf", 0}, {"80GBs", 0},
        {"80 G", 0}, {"G", 0}, {"8E", 0}, {"1e30", 0}, {"80GiBB", 0}, {"9000P", 0}, {"80iB", 0},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        dt_error_clear(&err);
        v = -1;
        int rc = dt_parse_bytes(sizes[i].text, "--mem", &v, &err);
        if (sizes[i].value) {
            if (rc) fprintf(stderr, "size '%s': %s\n", sizes[i].text, err.msg);
            CHECK_EQ_I64(rc, DT_OK);
            CHECK_EQ_I64(v, sizes[i].value);
        } else {
            if (rc == DT_OK) fprintf(stderr, "size '%s' accepted as %lld\n", sizes[i].text, (long long)v);
            CHECK_EQ_I64(rc, DT_EINVAL);
            CHECK(strncmp(err.msg, "--mem: ", 7) == 0);
            CHECK(strstr(err.msg, sizes[i].text) != NULL);
        }
    }

    /* a size without a unit is refused with both readings spelled out (issue 16) */
    CHECK_EQ_I64(dt_parse_bytes("80", "--mem", &v, &err), DT_EINVAL);
    CHECK_STR(err.msg, "--mem: '80' has no unit; write 80G (GiB) or 80GB (10^9 bytes)");
    CHECK_EQ_I64(dt_parse_bytes("512", "--host-mem", &v, &err), DT_EINVAL);
    CHECK_STR(err.msg, "--host-mem: '512' has no unit; write 512G (GiB) or 512GB (10^9 bytes)");

    /* plain whole numbers for --gpus, --seq, ...: the example is the option's own */
    CHECK_EQ_I64(dt_parse_int("8", "--gpus", 1, 1 << 20, 8, &v, &err), DT_OK);
    CHECK_EQ_I64(v, 8);
    CHECK_EQ_I64(dt_parse_int("0", "--gpus", 1, 1 << 20, 8, &v, &err), DT_EINVAL);
    CHECK_STR(err.msg, "--gpus: 0 is below the minimum 1 (e.g. --gpus 8)");
    CHECK_EQ_I64(dt_parse_int("-8", "--gpus", 1, 1 << 20, 8, &v, &err), DT_EINVAL);
    CHECK_STR(err.msg, "--gpus: -8 is below the minimum 1 (e.g. --gpus 8)");
    CHECK_EQ_I64(dt_parse_int("8B", "--gpus", 1, 1 << 20, 8, &v, &err), DT_EINVAL);
    CHECK_STR(err.msg, "--gpus: '8B' is not a whole number (e.g. --gpus 8)");
    CHECK_EQ_I64(dt_parse_int("99999999999999999999999", "--seq", 1, 1 << 24, 1024, &v, &err), DT_EINVAL);
    CHECK_STR(err.msg, "--seq: 99999999999999999999999 is above the supported maximum 16777216 (e.g. --seq 1024)");
    CHECK_EQ_I64(dt_parse_int("", "--nodes", 1, 1 << 20, 2, &v, &err), DT_EINVAL);
    CHECK_STR(err.msg, "--nodes: empty value (e.g. --nodes 2)");
    CHECK_EQ_I64(dt_parse_int("0", "--warmup", 0, 1 << 30, 100, &v, &err), DT_OK);
    CHECK_EQ_I64(v, 0);

    dt_units u;
    CHECK_EQ_I64(dt_parse_units("GB", &u, &err), DT_OK);
    CHECK(u == DT_UNITS_GB);
    CHECK_EQ_I64(dt_parse_units("gib", &u, &err), DT_OK);
    CHECK(u == DT_UNITS_GIB);
    CHECK_EQ_I64(dt_parse_units("MB", &u, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "'MB'") != NULL);
    CHECK_STR(dt_units_name(DT_UNITS_GIB), "GiB");
    CHECK_STR(dt_units_name(DT_UNITS_GB), "GB");

    char buf[64];
    CHECK_STR(dt_format_bytes(80 * GIB, DT_UNITS_GIB, buf, sizeof buf), "80.00 GiB");
    CHECK_STR(dt_format_bytes(80 * GIB, DT_UNITS_GB, buf, sizeof buf), "85.90 GB");
    CHECK_STR(dt_format_bytes(INT64_C(256000000000), DT_UNITS_GB, buf, sizeof buf), "256.00 GB");
    CHECK_STR(dt_format_bytes(INT64_C(13250000000), DT_UNITS_GB, buf, sizeof buf), "13.25 GB");
    CHECK_STR(dt_format_bytes(0, DT_UNITS_GIB, buf, sizeof buf), "0.00 GiB");
    /* sizes that would print as 0.00 step down a unit */
    CHECK_STR(dt_format_bytes(482304, DT_UNITS_GIB, buf, sizeof buf), "0.46 MiB");
    CHECK_STR(dt_format_bytes(5000, DT_UNITS_GIB, buf, sizeof buf), "4.88 KiB");
    CHECK_STR(dt_format_bytes(4 * (INT64_C(1) << 20), DT_UNITS_GIB, buf, sizeof buf), "4.00 MiB");
    CHECK_STR(dt_format_bytes(INT64_C(2500000), DT_UNITS_GB, buf, sizeof buf), "2.50 MB");
    CHECK_STR(dt_format_bytes(100, DT_UNITS_GIB, buf, sizeof buf), "100 B");
    CHECK_STR(dt_format_bytes(12, DT_UNITS_GB, buf, sizeof buf), "12 B");
    CHECK_STR(dt_format_bytes(6 * (INT64_C(1) << 20), DT_UNITS_GIB, buf, sizeof buf), "0.01 GiB");
    CHECK_NEAR(dt_bytes_in(INT64_C(120000000000), DT_UNITS_GB), 120.0, 1e-15);
    CHECK_NEAR(dt_bytes_in(3 * GIB, DT_UNITS_GIB), 3.0, 1e-15);

    CHECK_STR(dt_format_count(INT64_C(32763876352), buf, sizeof buf), "32.76B");
    CHECK_STR(dt_format_count(124439808, buf, sizeof buf), "124.44M");
    CHECK_STR(dt_format_count(125000, buf, sizeof buf), "125.00K");
    CHECK_STR(dt_format_count(INT64_C(1500000000000), buf, sizeof buf), "1.50T");
    CHECK_STR(dt_format_count(512, buf, sizeof buf), "512");
    CHECK_STR(dt_format_count(999999, buf, sizeof buf), "1.00M");   /* no "1000.00K" */

    TEST_MAIN_END();
}
