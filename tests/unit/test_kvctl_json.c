/* test_kvctl_json.c — the JSON writer behind kvctl/kvd-bench --json: commas and nesting,
 * string escaping (quotes, backslash, control bytes; UTF-8 untouched), non-finite
 * numbers as null. Output compared byte for byte with hand-written JSON. */
#include "tools/kvctl_json.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static char *render(void (*fn)(struct json *j))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    struct json j;
    json_init(&j, f);
    fn(&j);
    fclose(f);
    return buf;
}

static void doc_nested(struct json *j)
{
    json_obj_begin(j, NULL);
    json_u64(j, "a", 18446744073709551615ull);
    json_i64(j, "b", -3);
    json_arr_begin(j, "c");
    json_null(j, NULL);
    json_obj_begin(j, NULL);
    json_bool(j, "t", true);
    json_obj_end(j);
    json_arr_begin(j, NULL);
    json_arr_end(j);
    json_arr_end(j);
    json_f64(j, "d", 0.25);
    json_f64(j, "nan", NAN);
    json_f64(j, "inf", -INFINITY);
    json_obj_end(j);
    json_end(j);
}

static void doc_strings(struct json *j)
{
    json_arr_begin(j, NULL);
    json_str(j, NULL, "q\"b\\s/");
    json_str(j, NULL, "n\nt\tr\r\x01\x1f\x7f");
    json_str(j, NULL, "caf\xc3\xa9 \xf0\x9f\x98\x80");
    json_strn(j, NULL, "ab\0cd", 5);
    json_str(j, NULL, NULL);
    json_arr_end(j);
    json_end(j);
}

START_TEST(test_nested)
{
    char *s = render(doc_nested);
    ck_assert_str_eq(s, "{\"a\": 18446744073709551615, \"b\": -3, \"c\": [null, {\"t\": true}, "
                        "[]], \"d\": 0.25, \"nan\": null, \"inf\": null}\n");
    free(s);
}
END_TEST

START_TEST(test_strings)
{
    char *s = render(doc_strings);
    ck_assert_str_eq(s, "[\"q\\\"b\\\\s/\", \"n\\nt\\tr\\r\\u0001\\u001f\\u007f\", "
                        "\"caf\xc3\xa9 \xf0\x9f\x98\x80\", \"ab\\u0000cd\", null]\n");
    free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kvctl_json");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_nested);
    tcase_add_test(tc, test_strings);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
