/* test_blockhash.c — prefix block hashes: chaining, identity separation, known vector. */
#include "common/blockhash.h"

#include <check.h>
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#define BS 4
static const uint32_t toks[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

static struct blockhash_id mkid(uint64_t fp, uint32_t dt, uint32_t bs, const char *salt)
{
    struct blockhash_id id;
    ck_assert_int_eq(blockhash_id_init(&id, fp, dt, bs, salt, salt ? strlen(salt) : 0), 0);
    return id;
}

START_TEST(test_chain_is_prefix_stable)
{
    struct blockhash_id id = mkid(42, 0, BS, NULL);
    struct blockhash a[3], b[3];
    ck_assert_uint_eq(blockhash_chain(&id, toks, 12, 0, NULL, a, 3), 3);
    ck_assert_uint_eq(blockhash_chain(&id, toks, 11, 0, NULL, b, 3), 2); /* partial block */
    ck_assert(blockhash_eq(&a[0], &b[0]));
    ck_assert(blockhash_eq(&a[1], &b[1]));
    /* Incremental from block 2 with block 1 as parent equals the full chain. */
    struct blockhash c;
    ck_assert_uint_eq(blockhash_chain(&id, toks, 12, 2, &a[1], &c, 1), 1);
    ck_assert(blockhash_eq(&c, &a[2]));
    /* max_out respected. */
    ck_assert_uint_eq(blockhash_chain(&id, toks, 12, 0, NULL, b, 1), 1);
}
END_TEST

START_TEST(test_chain_depends_on_parent)
{
    struct blockhash_id id = mkid(42, 0, BS, NULL);
    uint32_t other[8] = {9, 9, 9, 9, 5, 6, 7, 8}; /* block 1 equal, block 0 differs */
    struct blockhash a[2], b[2];
    blockhash_chain(&id, toks, 8, 0, NULL, a, 2);
    blockhash_chain(&id, other, 8, 0, NULL, b, 2);
    ck_assert(!blockhash_eq(&a[0], &b[0]));
    ck_assert(!blockhash_eq(&a[1], &b[1]));
}
END_TEST

START_TEST(test_identity_separates)
{
    struct blockhash base, h;
    struct blockhash_id id = mkid(42, 0, BS, NULL);
    blockhash_next(&id, NULL, toks, &base);
    struct blockhash_id ids[] = {mkid(43, 0, BS, NULL), mkid(42, 1, BS, NULL),
                                 mkid(42, 0, BS, "tenant-a"), mkid(42, 0, BS, "")};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        blockhash_next(&ids[i], NULL, toks, &h);
        if (i == 3) /* empty salt = no salt */
            ck_assert(blockhash_eq(&h, &base));
        else
            ck_assert(!blockhash_eq(&h, &base));
    }
    struct blockhash_id sa = mkid(42, 0, BS, "tenant-a"), sb = mkid(42, 0, BS, "tenant-b");
    struct blockhash ha, hb;
    blockhash_next(&sa, NULL, toks, &ha);
    blockhash_next(&sb, NULL, toks, &hb);
    ck_assert(!blockhash_eq(&ha, &hb));
    /* Different block size: different identity even over the same first 4 tokens. */
    struct blockhash_id i8 = mkid(42, 0, 8, NULL);
    blockhash_next(&i8, NULL, toks, &h);
    ck_assert(!blockhash_eq(&h, &base));
}
END_TEST

START_TEST(test_recipe_matches_independent_xxh3)
{
    /* Recompute block 0 by hand with libxxhash's one-shot API: parent = 16 zero bytes,
     * flag 0, identity digest, tokens as LE u32. */
    struct blockhash_id id = mkid(7, 0, BS, NULL);
    uint8_t buf[16 + 1 + 16 + BS * 4] = {0};
    memcpy(buf + 17, id.digest.b, 16);
    for (int i = 0; i < BS; i++) {
        buf[33 + 4 * i] = (uint8_t)toks[i];
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(buf, sizeof(buf)));
    struct blockhash h;
    blockhash_next(&id, NULL, toks, &h);
    ck_assert_mem_eq(h.b, c.digest, 16);
    char hex[33];
    blockhash_hex(&h, hex);
    ck_assert_uint_eq(strlen(hex), 32);
}
END_TEST

START_TEST(test_bad_identity)
{
    struct blockhash_id id;
    char salt[BLOCKHASH_SALT_MAX + 1];
    memset(salt, 'x', sizeof(salt));
    ck_assert_int_eq(blockhash_id_init(&id, 1, 0, 0, NULL, 0), -EINVAL);
    ck_assert_int_eq(blockhash_id_init(&id, 1, 0, BS, salt, sizeof(salt)), -EINVAL);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("blockhash");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_chain_is_prefix_stable);
    tcase_add_test(tc, test_chain_depends_on_parent);
    tcase_add_test(tc, test_identity_separates);
    tcase_add_test(tc, test_recipe_matches_independent_xxh3);
    tcase_add_test(tc, test_bad_identity);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
