/* test_json.c — dt_json: locations, paths, typed getters, printer round trip, files. */
#include <unistd.h>

#include "dt_json.h"
#include "dt_test.h"

static void test_locations(void) {
    int l, c;
    dt_json_line_col("ab\ncd\n", 4, &l, &c);
    CHECK(l == 2 && c == 2);
    dt_json_line_col("x", 0, &l, &c);
    CHECK(l == 1 && c == 1);
    char p[64];
    dt_json_path_join(p, sizeof p, "$.a", "micro_batch");
    CHECK_STR(p, "$.a.micro_batch");
    dt_json_path_join(p, sizeof p, "$", "has space");
    CHECK_STR(p, "$[\"has space\"]");
    cJSON *t = NULL;
    dt_error err = {0};
    CHECK_EQ_I64(dt_json_parse("{\"a\": {\"b\": 1, \"b\": 2}}", "cfg.json", &t, &err), DT_EINVAL);
    CHECK_STR(err.msg, "cfg.json: $.a.b: duplicate key (each key may appear once per object)");
    CHECK_EQ_I64(dt_json_parse("[{\"x\": 1}, {\"y\": 1, \"y\": 1}]", "cfg", &t, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "$[1].y: duplicate key") != NULL);
    CHECK_EQ_I64(dt_json_parse("{\"b\":[1,2,],}", "cfg", &t, &err), DT_EINVAL);
    CHECK_STR(err.msg, "cfg:1:11: invalid JSON near '],}'");
    CHECK_EQ_I64(dt_json_parse("{\"b\": 1}", "cfg", &t, &err), 0);
    cJSON_Delete(t);
}

static void test_getters(void) {
    cJSON *t = NULL;
    dt_error err = {0};
    CHECK_EQ_I64(dt_json_parse("{\"n\": 5e8, \"f\": 2.5, \"s\": \"x\", \"e\": \"cpu\", \"b\": false, \"z\": 1}",
                               "t", &t, &err), 0);
    dt_jobj r;
    int64_t n = 0;
    double f = 0;
    int e = -1, b = -1;
    char s[4];
    static const char *const names[] = {"none", "cpu", "nvme"};
    CHECK_EQ_I64(dt_jobj_init(&r, t, "$.x", &err), 0);
    CHECK_EQ_I64(dt_jobj_int(&r, "n", 1, INT64_MAX, &n, &err), 0);
    CHECK_EQ_I64(n, 500000000);
    CHECK_EQ_I64(dt_jobj_num(&r, "f", DT_JNUM_POS, &f, &err), 0);
    CHECK(f == 2.5);
    CHECK_EQ_I64(dt_jobj_str(&r, "s", 0, s, sizeof s, &err), 0);
    CHECK_STR(s, "x");
    CHECK_EQ_I64(dt_jobj_enum(&r, "e", names, 3, &e, &err), 0);
    CHECK_EQ_I64(e, 1);
    CHECK_EQ_I64(dt_jobj_bool(&r, "b", &b, &err), 0);
    CHECK_EQ_I64(b, 0);
    CHECK_EQ_I64(dt_jobj_close(&r, &err), DT_EINVAL);       /* "z" never asked for */
    CHECK_STR(err.msg, "$.x.z: unknown key (allowed here: n, f, s, e, b)");
    /* errors are sticky: the first one stays in err */
    CHECK_EQ_I64(dt_jobj_init(&r, t, "$", &err), 0);
    CHECK_EQ_I64(dt_jobj_int(&r, "f", 0, 10, &n, &err), DT_EINVAL);
    CHECK_STR(err.msg, "$.f: expected an integer in [0, 10], got 2.5");
    CHECK_EQ_I64(dt_jobj_int(&r, "missing", 0, 10, &n, &err), DT_EINVAL);
    CHECK_STR(err.msg, "$.f: expected an integer in [0, 10], got 2.5");
    CHECK_EQ_I64(dt_jobj_init(&r, t, "$", &err), 0);
    CHECK_EQ_I64(dt_jobj_enum(&r, "s", names, 3, &e, &err), DT_EINVAL);
    CHECK_STR(err.msg, "$.s: expected one of \"none\", \"cpu\", \"nvme\", got \"x\"");
    CHECK_EQ_I64(dt_jobj_init(&r, t, "$", &err), 0);
    CHECK_EQ_I64(dt_jobj_bool(&r, "z", &b, &err), DT_EINVAL);
    CHECK_STR(err.msg, "$.z: expected true or false, got 1");
    CHECK_EQ_I64(dt_jobj_init(&r, t, "$", &err), 0);
    CHECK_EQ_I64(dt_jobj_str(&r, "e", 0, s, 3, &err), DT_EINVAL);   /* "cpu" needs 4 bytes */
    CHECK(strstr(err.msg, "a string of at most 2 bytes") != NULL);
    cJSON_Delete(t);
}

static void test_printer(void) {
    const char *in = "{\"a\": [0.1, 1e21, -0.0, 5e8, 0.3333333333333333, 1e-08, -7],"
                     " \"s\": \"q\\\"\\\\\\n\\u0001\", \"o\": {}, \"e\": [], \"m\": [{\"x\": null}, true]}";
    cJSON *t = cJSON_Parse(in);
    char *p1 = dt_json_print(t);
    cJSON *t2 = cJSON_Parse(p1);
    CHECK(t2 != NULL);
    char *p2 = dt_json_print(t2);
    CHECK_STR(p1, p2);
    CHECK(cJSON_Compare(t, t2, 1));
    CHECK(strstr(p1, "\"a\": [0.1, 1e+21, 0, 500000000, 0.3333333333333333, 1e-08, -7]") != NULL);
    CHECK(strstr(p1, "\"s\": \"q\\\"\\\\\\n\\u0001\"") != NULL);
    CHECK(strstr(p1, "\"o\": {},\n  \"e\": [],") != NULL);
    CHECK(strstr(p1, "\"m\": [\n    {\n      \"x\": null\n    },\n    true\n  ]") != NULL);
    CHECK(p1[strlen(p1) - 1] == '\n');
    free(p1);
    free(p2);
    cJSON_Delete(t);
    cJSON_Delete(t2);
}

static void test_files(void) {
    char dir[] = "/tmp/dt_json_test_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/a.json", dir);
    dt_error err = {0};
    CHECK_EQ_I64(dt_json_write_file_atomic(path, "{}\n", &err), 0);
    char *text = NULL;
    size_t len = 0;
    CHECK_EQ_I64(dt_json_read_file(path, &text, &len, &err), 0);
    CHECK(text && len == 3 && !strcmp(text, "{}\n"));
    free(text);
    FILE *f = fopen(path, "wb");
    fwrite("{\0}", 1, 3, f);
    fclose(f);
    CHECK_EQ_I64(dt_json_read_file(path, &text, NULL, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "NUL byte") != NULL);
    CHECK_EQ_I64(dt_json_read_file(dir, &text, NULL, &err), DT_EIO);   /* a directory */
    unlink(path);
    rmdir(dir);
}

int main(void) {
    test_locations();
    test_getters();
    test_printer();
    test_files();
    TEST_MAIN_END();
}
