/* test_prefix.c — broker/prefix (hash -> page index): insert/find/match/remove, refusals,
 * counters, prefix_check after each mutation, and a randomized run against a brute-force
 * model. Hashes come from kvd's one recipe (common/blockhash.h); its identity rules
 * (salt, dtype, parent chaining, token order) are tested in test_blockhash.c. */
#include "broker/prefix.h"
#include "common/err.h"
#include "proto/broker_msg.h"
#include "tests/unit/hash_helper.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct broker_hash hnum(uint32_t i)
{
    struct broker_hash h;
    uint32_t toks[2] = {i, i * 7u + 1u};
    h = test_hash_block(0xabcdefull, 2, NULL, toks);
    return h;
}

START_TEST(test_insert_find_remove)
{
    struct prefix px;
    uint32_t page;
    ck_assert_int_eq(prefix_init(&px, 0), -EINVAL);
    ck_assert_int_eq(prefix_init(&px, 10), 0);
    struct broker_hash a = hnum(1), b = hnum(2);
    ck_assert_int_eq(prefix_find(&px, &a, &page), KVD_ENOTFOUND);
    ck_assert_int_eq(prefix_insert(&px, &a, 3), 0);
    ck_assert_int_eq(prefix_check(&px), 0);
    ck_assert_int_eq(prefix_find(&px, &a, &page), 0);
    ck_assert_uint_eq(page, 3);
    ck_assert_int_eq(prefix_insert(&px, &a, 4), -EEXIST); /* hash kept on page 3 */
    ck_assert_int_eq(prefix_insert(&px, &b, 3), -EBUSY);  /* page 3 has an entry */
    ck_assert_int_eq(prefix_insert(&px, &b, 10), -EINVAL);
    ck_assert_uint_eq(px.n_entries, 1);
    ck_assert(prefix_page_has(&px, 3));
    ck_assert_int_eq(prefix_remove_page(&px, 3, true), 0);
    ck_assert_int_eq(prefix_remove_page(&px, 3, true), KVD_ENOTFOUND);
    ck_assert_uint_eq(px.st.evictions, 1);
    ck_assert_uint_eq(px.n_entries, 0);
    ck_assert_int_eq(prefix_find(&px, &a, &page), KVD_ENOTFOUND);
    ck_assert_int_eq(prefix_check(&px), 0);
    prefix_release(&px);
}
END_TEST

START_TEST(test_match_longest_leading_run)
{
    struct prefix px;
    struct broker_hash h[5];
    uint32_t pages[5];
    for (uint32_t i = 0; i < 5; i++)
        h[i] = hnum(100 + i);
    ck_assert_int_eq(prefix_init(&px, 8), 0);
    ck_assert_int_eq(prefix_insert(&px, &h[0], 5), 0);
    ck_assert_int_eq(prefix_insert(&px, &h[1], 2), 0);
    ck_assert_int_eq(prefix_insert(&px, &h[3], 7), 0); /* block 2 missing: run stops */
    ck_assert_uint_eq(prefix_match(&px, h, 5, pages), 2);
    ck_assert_uint_eq(pages[0], 5);
    ck_assert_uint_eq(pages[1], 2);
    ck_assert_uint_eq(px.st.query_blocks, 5);
    ck_assert_uint_eq(px.st.hit_blocks, 2);
    ck_assert_uint_eq(prefix_match(&px, h + 2, 3, pages), 0); /* leading miss: nothing */
    ck_assert_uint_eq(px.st.hit_blocks, 2);
    ck_assert_int_eq(prefix_check(&px), 0);
    prefix_release(&px);
}
END_TEST

/* Plain comparisons in the hot loop: ck_assert records a checkpoint per call. */
#define REQ_EQ(a, b)                                                                       \
    do {                                                                                   \
        long long a_ = (long long)(a), b_ = (long long)(b);                                \
        if (a_ != b_)                                                                      \
            ck_abort_msg("%s:%d: %s == %lld, expected %lld", __FILE__, __LINE__, #a, a_, b_); \
    } while (0)

#define RND_PAGES 200
#define RND_HASHES 400

START_TEST(test_randomized)
{
    struct prefix px;
    int32_t model_page_of[RND_HASHES]; /* hash i -> page or -1 */
    int32_t model_hash_of[RND_PAGES];  /* page -> hash or -1 */
    struct broker_hash h[RND_HASHES];
    for (int i = 0; i < RND_HASHES; i++) {
        h[i] = hnum((uint32_t)i);
        model_page_of[i] = -1;
    }
    for (int i = 0; i < RND_PAGES; i++)
        model_hash_of[i] = -1;
    ck_assert_int_eq(prefix_init(&px, RND_PAGES), 0);
    srand(777);
    uint64_t entries = 0;
    for (int step = 0; step < 20000; step++) {
        int hi = rand() % RND_HASHES, pg = rand() % RND_PAGES;
        uint32_t found;
        if (rand() % 2) {
            int want = model_hash_of[pg] >= 0 ? -EBUSY : model_page_of[hi] >= 0 ? -EEXIST : 0;
            REQ_EQ(prefix_insert(&px, &h[hi], (uint32_t)pg), want);
            if (!want) {
                model_page_of[hi] = pg;
                model_hash_of[pg] = hi;
                entries++;
            }
        } else {
            int want = model_hash_of[pg] >= 0 ? 0 : KVD_ENOTFOUND;
            REQ_EQ(prefix_remove_page(&px, (uint32_t)pg, false), want);
            if (!want) {
                model_page_of[model_hash_of[pg]] = -1;
                model_hash_of[pg] = -1;
                entries--;
            }
        }
        int q = rand() % RND_HASHES;
        REQ_EQ(prefix_find(&px, &h[q], &found), model_page_of[q] >= 0 ? 0 : KVD_ENOTFOUND);
        if (model_page_of[q] >= 0)
            REQ_EQ(found, (uint32_t)model_page_of[q]);
        REQ_EQ(px.n_entries, entries);
        if (step % 50 == 0)
            REQ_EQ(prefix_check(&px), 0);
    }
    REQ_EQ(prefix_check(&px), 0);
    prefix_release(&px);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("prefix");
    TCase *tc = tcase_create("prefix");
    tcase_add_test(tc, test_insert_find_remove);
    tcase_add_test(tc, test_match_longest_leading_run);
        tcase_add_test(tc, test_randomized);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
