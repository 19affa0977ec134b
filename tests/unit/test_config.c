/* test_config.c — defaults, config file, flags winning, sizes, exit-code classes. */
#include "daemon/config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpfile_path[64];

static const char *write_file(const char *text)
{
    snprintf(tmpfile_path, sizeof(tmpfile_path), "/tmp/kvd-test-config-XXXXXX");
    int fd = mkstemp(tmpfile_path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return tmpfile_path;
}

#define LOAD(c, err, ...)                                                                          \
    ({                                                                                             \
        char *argv_[] = {"kvd", __VA_ARGS__};                                                      \
        config_load(c, (int)(sizeof(argv_) / sizeof(argv_[0])), argv_, "/nonexistent/kvd.conf",    \
                    err);                                                                          \
    })

START_TEST(test_defaults)
{
    struct kvd_config c;
    char err[CONFIG_ERR_LEN];
    char *argv[] = {"kvd"};
    ck_assert_int_eq(config_load(&c, 1, argv, "/nonexistent/kvd.conf", err), CONFIG_OK);
    ck_assert_uint_eq(c.workers, CONFIG_DEF_WORKERS);
    ck_assert_uint_eq(c.block_size, 16);
    ck_assert_uint_eq(c.pool_bytes, CONFIG_DEF_POOL_BYTES);
    ck_assert(c.prefix_cache);
    ck_assert_int_eq(c.alloc, CONFIG_ALLOC_PAGED);
    ck_assert_str_eq(c.backend, "host");
    ck_assert_str_eq(c.config_file, "");
    ck_assert_uint_eq(c.step_timeout_ms, CONFIG_DEF_STEP_TIMEOUT_MS);
}
END_TEST

START_TEST(test_sizes)
{
    uint64_t v;
    ck_assert_int_eq(config_parse_size("123", &v), 0);
    ck_assert_uint_eq(v, 123);
    ck_assert_int_eq(config_parse_size("64K", &v), 0);
    ck_assert_uint_eq(v, 65536);
    ck_assert_int_eq(config_parse_size("16M", &v), 0);
    ck_assert_uint_eq(v, 16u << 20);
    ck_assert_int_eq(config_parse_size("2G", &v), 0);
    ck_assert_uint_eq(v, 2ull << 30);
    ck_assert_int_eq(config_parse_size("3MiB", &v), 0);
    ck_assert_uint_eq(v, 3u << 20);
    ck_assert_int_lt(config_parse_size("", &v), 0);
    ck_assert_int_lt(config_parse_size("-1", &v), 0);
    ck_assert_int_lt(config_parse_size("12X", &v), 0);
    ck_assert_int_lt(config_parse_size("99999999999999999999", &v), 0);
    ck_assert_int_lt(config_parse_size("99999999999G", &v), 0);
}
END_TEST

START_TEST(test_flags)
{
    struct kvd_config c;
    char err[CONFIG_ERR_LEN];
    ck_assert_int_eq(LOAD(&c, err, "--workers", "3", "--pool-bytes=32M", "--alloc", "naive",
                          "--prefix-cache", "off", "--kv-dtype", "f16", "--log-level", "debug",
                          "--step-timeout-ms", "0"),
                     CONFIG_OK);
    ck_assert_uint_eq(c.step_timeout_ms, 0);
    ck_assert_uint_eq(c.workers, 3);
    ck_assert_uint_eq(c.pool_bytes, 32u << 20);
    ck_assert_int_eq(c.alloc, CONFIG_ALLOC_NAIVE);
    ck_assert(!c.prefix_cache);
    ck_assert_uint_eq(c.kv_dtype, KV_DTYPE_F16);
    ck_assert_int_eq(c.log_level, LOG_LEVEL_DEBUG);
}
END_TEST

START_TEST(test_errors)
{
    struct kvd_config c;
    char err[CONFIG_ERR_LEN];
    ck_assert_int_eq(LOAD(&c, err, "--bogus", "1"), CONFIG_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "bogus"));
    ck_assert_int_eq(LOAD(&c, err, "--workers"), CONFIG_EUSAGE);
    ck_assert_int_eq(LOAD(&c, err, "stray"), CONFIG_EUSAGE);
    ck_assert_int_eq(LOAD(&c, err, "--workers", "0"), CONFIG_EBAD);
    ck_assert_ptr_nonnull(strstr(err, "workers"));
    ck_assert_int_eq(LOAD(&c, err, "--workers", "many"), CONFIG_EBAD);
    ck_assert_int_eq(LOAD(&c, err, "--alloc", "lazy"), CONFIG_EBAD);
    ck_assert_int_eq(LOAD(&c, err, "--kv-dtype", "q1"), CONFIG_EBAD);
    ck_assert_int_eq(LOAD(&c, err, "--config", "/nonexistent/x.conf"), CONFIG_EBAD);
    ck_assert_int_eq(LOAD(&c, err, "--help"), CONFIG_HELP);
    ck_assert_ptr_nonnull(strstr(config_usage(), "--max-batch-tokens"));
}
END_TEST

START_TEST(test_file_then_flags_win)
{
    struct kvd_config c;
    char err[CONFIG_ERR_LEN];
    const char *f = write_file("# kvd config\n"
                               "workers = 2\n"
                               "pool-bytes = 8M   # comment\n"
                               "\n"
                               "max-model-len=256\n"
                               "prefix-cache = off\n");
    ck_assert_int_eq(LOAD(&c, err, "--config", (char *)f, "--workers", "5"), CONFIG_OK);
    ck_assert_uint_eq(c.workers, 5); /* flag wins */
    ck_assert_uint_eq(c.pool_bytes, 8u << 20);
    ck_assert_uint_eq(c.max_model_len, 256);
    ck_assert(!c.prefix_cache);
    ck_assert_str_eq(c.config_file, f);
    unlink(f);
    /* The implicit default file is read when it exists. */
    f = write_file("max-running = 7\n");
    char *argv[] = {"kvd"};
    ck_assert_int_eq(config_load(&c, 1, argv, f, err), CONFIG_OK);
    ck_assert_uint_eq(c.max_running, 7);
    unlink(f);
}
END_TEST

START_TEST(test_bad_file)
{
    struct kvd_config c;
    char err[CONFIG_ERR_LEN];
    const char *f = write_file("workers = 2\nnonsense line\n");
    ck_assert_int_eq(LOAD(&c, err, "--config", (char *)f), CONFIG_EBAD);
    ck_assert_ptr_nonnull(strstr(err, ":2:"));
    unlink(f);
    f = write_file("colour = blue\n");
    ck_assert_int_eq(LOAD(&c, err, "--config", (char *)f), CONFIG_EBAD); /* unknown key */
    unlink(f);
    f = write_file("block-size = 0\n");
    ck_assert_int_eq(LOAD(&c, err, "--config", (char *)f), CONFIG_EBAD);
    unlink(f);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("config");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_sizes);
    tcase_add_test(tc, test_flags);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_file_then_flags_win);
    tcase_add_test(tc, test_bad_file);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
