/* test_wire.c — the msgpack envelope: version/type checks, strict field readers, and the
 * pre-check that stops declared sizes from driving allocations. */
#include "common/err.h"
#include "proto/wire.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static void parse_buf(const struct wbuf *w, struct wmsg *m, int want)
{
    char err[WIRE_ERR_LEN] = "";
    ck_assert_int_eq(wmsg_parse(m, w->sb.data, w->sb.size, err), want);
}

START_TEST(test_round_trip_fields)
{
    struct wbuf w;
    wbuf_init(&w);
    wire_begin(&w, "demo", 5);
    wire_put_u64(&w, "n", 42);
    wire_put_i64(&w, "neg", -7);
    wire_put_f64(&w, "x", 0.5);
    wire_put_str(&w, "s", "hello");
    uint32_t ids[3] = {1, 2, 3};
    wire_put_u32s(&w, "ids", ids, 3);
    struct wmsg m;
    parse_buf(&w, &m, 0);
    ck_assert(wmsg_is(&m, "demo"));
    char err[WIRE_ERR_LEN];
    static const char *const keys[] = {"n", "neg", "x", "s", "ids", NULL};
    ck_assert_int_eq(wire_check_keys(&m.root, keys, err), 0);
    uint64_t n;
    ck_assert_int_eq(wire_u64(&m.root, "n", true, 0, 100, &n, err), 0);
    ck_assert_uint_eq(n, 42);
    ck_assert_int_eq(wire_u64(&m.root, "n", true, 0, 41, &n, err), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(err, "'n'"));
    int64_t i;
    ck_assert_int_eq(wire_i64(&m.root, "neg", true, 0, -10, 10, &i, err), 0);
    ck_assert_int_eq(i, -7);
    double x;
    ck_assert_int_eq(wire_f64(&m.root, "x", true, 0, 0, 1, &x, err), 0);
    ck_assert(x == 0.5);
    const char *s;
    size_t sl;
    ck_assert_int_eq(wire_str(&m.root, "s", true, 5, &s, &sl, err), 0);
    ck_assert_int_eq(wire_str(&m.root, "s", true, 4, &s, &sl, err), KVD_EMSG);
    uint32_t *v;
    size_t vn;
    ck_assert_int_eq(wire_u32_array(&m.root, "ids", true, 3, 3, &v, &vn, err), 0);
    ck_assert_uint_eq(vn, 3);
    ck_assert_uint_eq(v[2], 3);
    free(v);
    ck_assert_int_eq(wire_u32_array(&m.root, "ids", true, 2, 3, &v, &vn, err), KVD_EMSG);
    ck_assert_int_eq(wire_u64(&m.root, "missing", true, 0, 1, &n, err), KVD_EMSG);
    ck_assert_int_eq(wire_u64(&m.root, "missing", false, 9, 10, &n, err), 0);
    ck_assert_uint_eq(n, 9);
    static const char *const fewer[] = {"n", NULL};
    ck_assert_int_eq(wire_check_keys(&m.root, fewer, err), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(err, "unknown field"));
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_version_and_type)
{
    struct wbuf w;
    wbuf_init(&w);
    msgpack_pack_map(&w.pk, 2);
    msgpack_pack_str(&w.pk, 1);
    msgpack_pack_str_body(&w.pk, "v", 1);
    msgpack_pack_uint32(&w.pk, KVD_PROTO_VERSION + 1);
    msgpack_pack_str(&w.pk, 1);
    msgpack_pack_str_body(&w.pk, "t", 1);
    msgpack_pack_str(&w.pk, 1);
    msgpack_pack_str_body(&w.pk, "x", 1);
    struct wmsg m;
    parse_buf(&w, &m, KVD_EPROTO);
    wmsg_release(&m);
    wbuf_release(&w);

    msgpack_pack_array(&w.pk, 0);
    parse_buf(&w, &m, KVD_EMSG); /* not a map */
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_declared_sizes_cannot_allocate)
{
    /* array32 declaring 2^32-1 elements, map32 likewise, str32 of 4 GiB: 5 bytes each */
    static const unsigned char bombs[][5] = {
        {0xdd, 0xff, 0xff, 0xff, 0xff},
        {0xdf, 0xff, 0xff, 0xff, 0xff},
        {0xdb, 0xff, 0xff, 0xff, 0xff},
        {0xc6, 0x7f, 0xff, 0xff, 0xff},
    };
    for (size_t i = 0; i < sizeof(bombs) / sizeof(bombs[0]); i++) {
        struct wmsg m;
        char err[WIRE_ERR_LEN] = "";
        ck_assert_int_eq(wire_precheck(bombs[i], sizeof(bombs[i]), err), KVD_EMSG);
        ck_assert_int_eq(wmsg_parse(&m, bombs[i], sizeof(bombs[i]), err), KVD_EMSG);
        ck_assert_ptr_nonnull(strstr(err, "malformed"));
        wmsg_release(&m);
    }
    /* truncations of a valid message are all refused, never crash */
    struct wbuf w;
    wbuf_init(&w);
    wire_begin(&w, "demo", 1);
    wire_put_str(&w, "s", "some text");
    for (size_t cut = 0; cut < w.sb.size; cut++) {
        struct wmsg m;
        char err[WIRE_ERR_LEN];
        ck_assert_int_eq(wmsg_parse(&m, w.sb.data, cut, err), KVD_EMSG);
        wmsg_release(&m);
    }
    wbuf_release(&w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_round_trip_fields);
    tcase_add_test(tc, test_version_and_type);
    tcase_add_test(tc, test_declared_sizes_cannot_allocate);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
