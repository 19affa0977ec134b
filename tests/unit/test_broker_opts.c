/* test_broker_opts.c — kvd-broker's flag parsing: sizes with suffixes, defaults, the exit
 * codes for bad flags (64) and bad configurations (78), and the descriptor layout helper
 * that turns a byte budget into pages and chunks. */
#include "broker/opts.h"
#include "common/mem.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>

START_TEST(test_parse_size)
{
    uint64_t v;
    ck_assert_int_eq(broker_parse_size("4096", &v), 0);
    ck_assert_uint_eq(v, 4096);
    ck_assert_int_eq(broker_parse_size("64K", &v), 0);
    ck_assert_uint_eq(v, 64u << 10);
    ck_assert_int_eq(broker_parse_size("256M", &v), 0);
    ck_assert_uint_eq(v, 256u << 20);
    ck_assert_int_eq(broker_parse_size("2G", &v), 0);
    ck_assert_uint_eq(v, 2ull << 30);
    ck_assert_int_eq(broker_parse_size("1GiB", &v), 0);
    ck_assert_uint_eq(v, 1ull << 30);
    ck_assert_int_eq(broker_parse_size("3t", &v), 0);
    ck_assert_uint_eq(v, 3ull << 40);
    ck_assert_int_eq(broker_parse_size("", &v), -EINVAL);
    ck_assert_int_eq(broker_parse_size("-1M", &v), -EINVAL);
    ck_assert_int_eq(broker_parse_size("12Q", &v), -EINVAL);
    ck_assert_int_eq(broker_parse_size("1.5G", &v), -EINVAL);
    ck_assert_int_eq(broker_parse_size("99999999999999T", &v), -EINVAL); /* overflows */
}
END_TEST

static int parse(struct broker_opts *o, int argc, const char **argv)
{
    FILE *out = fopen("/dev/null", "w");
    int rc = broker_opts_parse(o, argc, (char **)argv, out);
    fclose(out);
    return rc;
}

START_TEST(test_flags)
{
    struct broker_opts o;
    const char *ok[] = {"kvd-broker", "--layers", "4", "--kv-heads", "2", "--head-dim", "64",
                        "--kv-dtype", "f16", "--pool-bytes", "8M", "--lease-timeout-ms",
                        "500", "--backend", "host", "--model-fp", "0x10", NULL};
    ck_assert_int_eq(parse(&o, 17, ok), 0);
    ck_assert_uint_eq(o.n_layers, 4);
    ck_assert_uint_eq(o.kv_dtype, KV_DTYPE_F16);
    ck_assert_uint_eq(o.pool_bytes, 8u << 20);
    ck_assert_uint_eq(o.lease_timeout_ms, 500);
    ck_assert_uint_eq(o.backend, MEM_BACKEND_HOST);
    ck_assert_uint_eq(o.model_fp, 16);
    ck_assert_uint_eq(o.block_size, BROKER_BLOCK_SIZE_DEFAULT);
    ck_assert(!o.cuda_fallback);
    const char *help[] = {"kvd-broker", "--help", NULL};
    ck_assert_int_eq(parse(&o, 2, help), 1);
    const char *unknown[] = {"kvd-broker", "--nope", NULL};
    ck_assert_int_eq(parse(&o, 2, unknown), BROKER_EX_USAGE);
    const char *noval[] = {"kvd-broker", "--block-size", NULL};
    ck_assert_int_eq(parse(&o, 2, noval), BROKER_EX_USAGE);
    const char *block0[] = {"kvd-broker", "--block-size", "0", NULL};
    ck_assert_int_eq(parse(&o, 3, block0), BROKER_EX_USAGE);
    const char *frac[] = {"kvd-broker", "--pool-fraction", "1.5", NULL};
    ck_assert_int_eq(parse(&o, 3, frac), BROKER_EX_USAGE);
    const char *stray[] = {"kvd-broker", "--layers", "2", "extra", NULL};
    ck_assert_int_eq(parse(&o, 4, stray), BROKER_EX_USAGE);
    const char *nogeom[] = {"kvd-broker", "--layers", "2", NULL};
    ck_assert_int_eq(parse(&o, 3, nogeom), BROKER_EX_CONFIG);
    const char *both[] = {"kvd-broker", "--model", "m.gguf", "--layers", "2", NULL};
    ck_assert_int_eq(parse(&o, 5, both), BROKER_EX_CONFIG);
    const char *cuda[] = {"kvd-broker", "--model", "m.gguf", "--backend", "cuda", NULL};
    ck_assert_int_eq(parse(&o, 5, cuda), 0);
    ck_assert_uint_eq(o.backend, MEM_BACKEND_CUDA_VMM);
    ck_assert(o.cuda_fallback);
}
END_TEST

START_TEST(test_desc_layout)
{
    struct pool_desc d = {0};
    ck_assert_int_eq(kv_geom_init(&d.geom, 2, 2, 8, 4, KV_DTYPE_F32), 0); /* 1 KiB pages */
    ck_assert_int_eq(pool_desc_layout(&d, 512, 4096, 1), -EINVAL);       /* < one page */
    ck_assert_int_eq(pool_desc_layout(&d, 10 * 1024 + 5, 4096, 1), 0);
    ck_assert_uint_eq(d.num_pages, 10);
    ck_assert_uint_eq(d.n_chunks, 1);
    ck_assert_uint_eq(d.chunk_bytes, 12288); /* rounded up to the alignment */
    ck_assert_uint_eq(d.pool_bytes, 12288);
    ck_assert_int_eq(pool_desc_layout(&d, 10 * 1024, 2048, 3), 0);
    ck_assert_uint_eq(d.pages_per_chunk, 4);
    ck_assert_uint_eq(d.n_chunks, 3); /* 4 + 4 + 2 pages */
    ck_assert_uint_eq(d.chunk_bytes, 4096);
    ck_assert_uint_eq(mem_pool_page_offset(&d, 5), 4096 + 1024);
    ck_assert_uint_eq(mem_pool_page_offset(&d, 9), 2 * 4096 + 1024);
    ck_assert_int_eq(pool_desc_layout(&d, 4 * 1024, 2048, 1000), 0);
    ck_assert_uint_eq(d.n_chunks, 4); /* never more chunks than pages */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("broker_opts");
    TCase *tc = tcase_create("opts");
    tcase_add_test(tc, test_parse_size);
    tcase_add_test(tc, test_flags);
    tcase_add_test(tc, test_desc_layout);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
