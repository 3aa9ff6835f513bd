/* test_json.c — dt_json: locations, paths, typed getters, printer round trip, files,
 * the strict RFC 8259 check (a JSONTestSuite-style table: y_ = must accept, n_ = must
 * reject) and the bounded file reader (FIFO, device, directory, size limit). */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

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
    CHECK_STR(err.msg, "cfg:1:11: invalid JSON near '],}': a trailing comma (RFC 8259 allows none)");
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
    CHECK_EQ_I64(dt_json_read_file(dir, &text, NULL, &err), DT_EINVAL);   /* a directory */
    CHECK(strstr(err.msg, "is a directory, not a regular file") != NULL);
    unlink(path);
    rmdir(dir);
}


/* ---- the strict check: y_ must parse, n_ must fail with one "invalid JSON" line ----
 * Names follow nst/JSONTestSuite (test_parsing/). Where that suite says y_ or i_ and
 * dtplan rejects, the case is n_ here with the reason: \u0000 (cJSON would cut the
 * string), lone surrogates (i_), numbers that overflow a double (i_), numbers longer
 * than cJSON's 63-character buffer, a byte order mark (i_). */
typedef struct {
    const char *name;
    const char *text;
} json_case;

static const json_case k_accept[] = {
    {"y_array_empty", "[]"},
    {"y_array_arraysWithSpaces", "[[]   ]"},
    {"y_array_heterogeneous", "[null, 1, \"1\", {}]"},
    {"y_array_with_several_null", "[1,null,null,null,2]"},
    {"y_array_with_trailing_space", "[2] "},
    {"y_number", "[123e65]"},
    {"y_number_0e+1", "[0e+1]"},
    {"y_number_0e1", "[0e1]"},
    {"y_number_int_with_exp", "[20e1]"},
    {"y_number_minus_zero", "[-0]"},
    {"y_number_negative_int", "[-123]"},
    {"y_number_negative_zero_real", "[-0.0]"},
    {"y_number_real_capital_e_neg_exp", "[1E-2]"},
    {"y_number_real_fraction_exponent", "[123.456e78]"},
    {"y_number_real_underflow", "[123e-10000000]"},
    {"y_number_simple_real", "[123.456789]"},
    {"y_number_after_space", "[ 4]"},
    {"y_number_63_chars", "[123456789012345678901234567890123456789012345678901234567890123]"},
    {"y_object_basic", "{\"asd\":\"sdf\"}"},
    {"y_object_empty", "{}"},
    {"y_object_empty_key", "{\"\":0}"},
    {"y_object_nested", "{\"a\": {\"b\": [1, {\"c\": null}]}}"},
    {"y_object_with_newlines", "{\n\"a\": \"b\"\n}"},
    {"y_object_crlf_and_tabs", "{\r\n\t\"a\"\t:\r\n1\r\n}"},
    {"y_string_1_2_3_bytes_UTF-8_sequences", "[\"\\u0060\\u012a\\u12AB\"]"},
    {"y_string_accepted_surrogate_pair", "[\"\\uD801\\udc37\"]"},
    {"y_string_last_surrogates_1_and_2", "[\"\\uDBFF\\uDFFF\"]"},
    {"y_string_allowed_escapes", "[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"]"},
    {"y_string_comments", "[\"a/*b*/c/*d//e\"]"},
    {"y_string_escaped_noncharacter", "[\"\\uFFFF\"]"},
    {"y_string_nonCharacterInUTF-8_U+FFFF", "[\"\xEF\xBF\xBF\"]"},
    {"y_string_utf8", "[\"\xE2\x82\xAC\xF0\x9D\x84\x9E\"]"},
    {"y_string_unicode_U+10FFFE_nonchar", "[\"\xF4\x8F\xBF\xBE\"]"},
    {"y_string_two_byte_utf8", "[\"\xC3\xA9\"]"},
    {"y_string_space", "\" \""},
    {"y_structure_lonely_false", "false"},
    {"y_structure_lonely_int", "42"},
    {"y_structure_lonely_negative_real", "-0.1"},
    {"y_structure_lonely_null", "null"},
    {"y_structure_lonely_string", "\"asd\""},
    {"y_structure_lonely_true", "true"},
    {"y_structure_trailing_newline", "[\"a\"]\n"},
    {"y_structure_whitespace_array", " [] "},
};

static const json_case k_reject[] = {
    /* numbers */
    {"n_number_with_leading_zero", "[012]"},
    {"n_number_-01", "[-01]"},
    {"n_number_+1", "[+1]"},
    {"n_number_.2e-3", "[.2e-3]"},
    {"n_number_neg_real_without_int_part", "[-.123]"},
    {"n_number_1.0e", "[1.0e]"},
    {"n_number_1.0e+", "[1.0e+]"},
    {"n_number_2.", "[2.]"},
    {"n_number_NaN", "[NaN]"},
    {"n_number_infinity", "[Infinity]"},
    {"n_number_minus_infinity", "[-Infinity]"},
    {"n_number_hex_1_digit", "[0x1]"},
    {"n_number_minus_space_1", "[- 1]"},
    {"n_number_0.1.2", "[0.1.2]"},
    {"n_number_real_with_alpha", "[1.2a-3]"},
    {"n_number_huge_exp (i_ in the suite)", "[1e400]"},
    {"n_number_64_chars (cJSON's buffer)", "[1234567890123456789012345678901234567890123456789012345678901234]"},
    /* strings */
    {"n_string_unescaped_ctrl_char", "[\"a\x1f" "a\"]"},
    {"n_string_unescaped_newline", "[\"new\nline\"]"},
    {"n_string_unescaped_tab", "[\"\t\"]"},
    {"n_string_escaped_null (y_ in the suite: cJSON cuts the string)", "[\"a\\u0000b\"]"},
    {"n_string_single_quote", "['single quote']"},
    {"n_string_escape_x", "[\"\\x00\"]"},
    {"n_string_invalid_backslash_esc", "[\"\\a\"]"},
    {"n_string_incomplete_escape", "[\"\\\"]"},
    {"n_string_invalid_unicode_escape", "[\"\\uqqqq\"]"},
    {"n_string_incomplete_surrogate_escape", "[\"\\uD834\\uDd\"]"},
    {"n_string_1_surrogate_then_escape", "[\"\\uD800\\\"]"},
    {"n_string_lone_high_surrogate (i_ in the suite)", "[\"\\uD800\"]"},
    {"n_string_lone_low_surrogate (i_ in the suite)", "[\"\\uDC00\"]"},
    {"n_string_inverted_surrogates (i_ in the suite)", "[\"\\uDc00\\uD800\"]"},
    {"n_string_invalid_utf8", "[\"\xFF\"]"},
    {"n_string_overlong_sequence_2_bytes", "[\"\xC0\xAF\"]"},
    {"n_string_overlong_sequence_3_bytes", "[\"\xE0\x80\xAF\"]"},
    {"n_string_UTF8_surrogate", "[\"\xED\xA0\x80\"]"},
    {"n_string_not_in_unicode_range", "[\"\xF4\xBF\xBF\xBF\"]"},
    {"n_string_truncated_utf8", "[\"\xE2\x82\"]"},
    {"n_string_lone_continuation_byte", "[\"\x81\"]"},
    {"n_string_unclosed", "[\"a"},
    {"n_string_no_quotes_with_bad_escape", "[\\n]"},
    /* objects */
    {"n_object_trailing_comma", "{\"id\":0,}"},
    {"n_object_single_quote", "{'a':0}"},
    {"n_object_unquoted_key", "{a: \"b\"}"},
    {"n_object_missing_colon", "{\"a\" b}"},
    {"n_object_missing_value", "{\"a\":"},
    {"n_object_comma_instead_of_colon", "{\"x\", null}"},
    {"n_object_non_string_key", "{1:1}"},
    {"n_object_double_colon", "{\"x\"::\"b\"}"},
    {"n_object_trailing_comment", "{\"a\":\"b\"}/**/"},
    {"n_object_with_single_line_comment", "{\"a\":1 // c\n}"},
    {"n_object_unclosed", "{\"a\":1"},
    {"n_object_missing_comma", "{\"a\":1 \"b\":2}"},
    /* arrays */
    {"n_array_extra_comma", "[\"\",]"},
    {"n_array_double_comma", "[1,,2]"},
    {"n_array_leading_comma", "[,1]"},
    {"n_array_unclosed", "[1"},
    {"n_array_colon_instead_of_comma", "[\"\": 1]"},
    {"n_array_missing_comma", "[1 true]"},
    {"n_array_incomplete_true", "[tru]"},
    {"n_array_capitalized_True", "[True]"},
    {"n_array_null_as_nil", "[nil]"},
    /* structure */
    {"n_structure_trailing_garbage", "[1]x"},
    {"n_structure_two_values", "[] []"},
    {"n_structure_lone_values_with_junk", "1 2"},
    {"n_structure_number_with_trailing_garbage", "2@"},
    {"n_structure_object_followed_by_closing_object", "{}}"},
    {"n_structure_UTF8_BOM_empty_object (i_ in the suite)", "\xEF\xBB\xBF{}"},
    {"n_structure_whitespace_formfeed", "[\f]"},
    {"n_structure_no_data", ""},
    {"n_structure_only_whitespace", " \n\t "},
    {"n_structure_unicode_identifier", "\xC3\xA5"},
    {"n_structure_comment_before", "/* c */ {}"},
    {"n_structure_angle_bracket", "<.>"},
    {"n_structure_open_object", "{"},
    {"n_structure_close_unopened_array", "1]"},
};

/* Jansson (a strict RFC 8259 parser sharing no code with ours) as the reference: it
 * accepts every k_accept text and rejects every k_reject text, as dt_json_validate does.
 * Duplicate keys are refused by both (JSON_REJECT_DUPLICATES); \u0000 by both (jansson
 * without JSON_ALLOW_NUL). The one difference: jansson's integers are int64, so it refuses
 * a longer integer literal ("too big integer"; RFC 8259 section 6 lets a parser limit the
 * range), which we read as a double. */
static void test_strict_reference(void) {
    json_error_t je;
    for (size_t i = 0; i < sizeof k_accept / sizeof k_accept[0]; i++) {
        json_t *j = json_loads(k_accept[i].text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
        if (!j && strstr(je.text, "too big integer")) continue;
        if (!j) fprintf(stderr, "%s: jansson rejects what we accept: %s\n", k_accept[i].name, je.text);
        CHECK(j != NULL);
        json_decref(j);
    }
    for (size_t i = 0; i < sizeof k_reject / sizeof k_reject[0]; i++) {
        json_t *j = json_loads(k_reject[i].text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
        if (j) fprintf(stderr, "%s: jansson accepts what we reject\n", k_reject[i].name);
        CHECK(j == NULL);
        json_decref(j);
    }
}

/* n levels of "[" then "]": depth n */
static char *nested(int n) {
    char *s = malloc((size_t)2 * (size_t)n + 1);
    if (!s) return NULL;
    for (int i = 0; i < n; i++) s[i] = '[', s[n + i] = ']';
    s[2 * n] = '\0';
    return s;
}

static void test_strict(void) {
    dt_error err = {0};
    cJSON *t = NULL;
    for (size_t i = 0; i < sizeof k_accept / sizeof k_accept[0]; i++) {
        int rc = dt_json_parse(k_accept[i].text, "t", &t, &err);
        if (rc) fprintf(stderr, "%s rejected: %s\n", k_accept[i].name, err.msg);
        CHECK_EQ_I64(rc, DT_OK);
        cJSON_Delete(t);
    }
    for (size_t i = 0; i < sizeof k_reject / sizeof k_reject[0]; i++) {
        dt_error_clear(&err);
        int rc = dt_json_parse(k_reject[i].text, "t.json", &t, &err);
        if (rc != DT_EINVAL) fprintf(stderr, "%s accepted (rc %d)\n", k_reject[i].name, rc);
        CHECK_EQ_I64(rc, DT_EINVAL);
        CHECK(t == NULL);
        /* one printable line: "t.json:L:C: invalid JSON..." */
        int ok = !strncmp(err.msg, "t.json:", 7) && strstr(err.msg, ": invalid JSON") != NULL;
        for (const unsigned char *c = (const unsigned char *)err.msg; *c && ok; c++) ok = *c >= 0x20 && *c < 0x7f;
        if (!ok) fprintf(stderr, "%s: message '%s'\n", k_reject[i].name, err.msg);
        CHECK(ok);
    }
    /* the three the issue names, with their reasons and positions */
    CHECK_EQ_I64(dt_json_parse("{\"a\": 01}", "c", &t, &err), DT_EINVAL);
    CHECK_STR(err.msg, "c:1:7: invalid JSON near '01}': a number with a leading zero (write 1, not 01)");
    CHECK_EQ_I64(dt_json_parse("{\"a\":\n \"x\x01y\"}", "c", &t, &err), DT_EINVAL);
    CHECK_STR(err.msg, "c:2:4: invalid JSON near '\\x01y\"}': raw control character U+0001 inside a string "
                       "(write it escaped, e.g. \\n or \\u0001)");
    CHECK_EQ_I64(dt_json_parse("[\"ab\\u0000cd\"]", "c", &t, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "c:1:5: invalid JSON near '\\u0000cd\"]': \\u0000 (NUL)") != NULL);
    CHECK_EQ_I64(dt_json_parse("{\"a\": 1", "c", &t, &err), DT_EINVAL);
    CHECK_STR(err.msg, "c:1:8: invalid JSON: unexpected end of input (an object is not closed)");
    /* nesting: DT_JSON_MAX_DEPTH levels are fine, one more is not (and 100000 costs nothing) */
    char *s = nested(DT_JSON_MAX_DEPTH);
    CHECK_EQ_I64(dt_json_parse(s, "deep", &t, &err), DT_OK);
    cJSON_Delete(t);
    free(s);
    s = nested(DT_JSON_MAX_DEPTH + 1);
    CHECK_EQ_I64(dt_json_parse(s, "deep", &t, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "nesting deeper than 64") != NULL);
    free(s);
    s = nested(100000);
    CHECK_EQ_I64(dt_json_parse(s, "deep", &t, &err), DT_EINVAL);
    free(s);
    /* the validator alone, on a length (bytes after len are not looked at) */
    CHECK_EQ_I64(dt_json_validate("[1]xyz", 3, "v", &err), DT_OK);
    /* valid text decodes as written: the surrogate pair is one 4-byte UTF-8 character */
    CHECK_EQ_I64(dt_json_parse("[\"\\uD834\\uDD1E\"]", "t", &t, &err), DT_OK);
    CHECK_STR(cJSON_GetArrayItem(t, 0)->valuestring, "\xF0\x9D\x84\x9E");
    cJSON_Delete(t);
}

/* ---- the bounded reader: regular files only, size limit ---- */
static void test_reader_bounds(void) {
    char dir[] = "/tmp/dt_json_read_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128];
    dt_error err = {0};
    char *text = NULL;
    /* a FIFO: refused at once (opening one for reading would wait for a writer) */
    snprintf(path, sizeof path, "%s/fifo.json", dir);
    CHECK(mkfifo(path, 0600) == 0);
    CHECK_EQ_I64(dt_json_read_file(path, &text, NULL, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "is a FIFO, not a regular file") != NULL);
    CHECK(strstr(err.msg, path) != NULL);
    unlink(path);
    /* a device: never read, so /dev/zero cannot fill memory */
    CHECK_EQ_I64(dt_json_read_file("/dev/zero", &text, NULL, &err), DT_EINVAL);
    CHECK_STR(err.msg, "/dev/zero: is a character device, not a regular file: give the path of a file");
    CHECK(text == NULL);
    /* larger than the limit: refused from its size, without reading (a sparse file) */
    snprintf(path, sizeof path, "%s/huge.json", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, (off_t)DT_READ_MAX_JSON + 1) == 0);
    close(fd);
    CHECK_EQ_I64(dt_json_read_file(path, &text, NULL, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "is larger than the 64 MiB this input may have") != NULL);
    /* exactly at a (small) limit is fine, one byte over is not */
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0 && write(fd, "[1,2]", 5) == 5);
    close(fd);
    size_t len = 0;
    CHECK_EQ_I64(dt_read_file(path, 5, &text, &len, &err), DT_OK);
    CHECK(text && len == 5 && !strcmp(text, "[1,2]"));
    free(text);
    text = NULL;
    CHECK_EQ_I64(dt_read_file(path, 4, &text, &len, &err), DT_EINVAL);
    CHECK(strstr(err.msg, "larger than the 4 bytes") != NULL);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    test_locations();
    test_getters();
    test_printer();
    test_files();
    test_strict();
    test_strict_reference();
    test_reader_bounds();
    TEST_MAIN_END();
}
