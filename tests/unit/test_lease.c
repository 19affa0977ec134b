/* test_lease.c — the lease table (broker/lease.c) on its own: random capability ids
 * (nonzero, distinct, found by binary search), display numbers in attach order, and a
 * randomized new/free churn up to BROKER_LEASES_MAX with lease_table_check() after
 * every mutation, every live id found and absent ids (0, neighbours) not found. */
#include "broker/lease.h"
#include "common/err.h"
#include "common/log.h"

#include <check.h>
#include <stdlib.h>

#define T_CHURN_STEPS 5000  /* new/free operations in the randomized run */

START_TEST(test_lease_new_find_free)
{
    struct lease_table t;
    struct lease *a = NULL, *b = NULL;
    lease_table_init(&t);
    ck_assert_int_eq(lease_new(&t, "kvd", 10, 5, &a), 0);
    ck_assert_int_eq(lease_new(&t, "kvctl", 11, 6, &b), 0);
    ck_assert_uint_ne(a->id, 0);
    ck_assert_uint_ne(b->id, 0);
    ck_assert_uint_ne(a->id, b->id);
    ck_assert_uint_eq(a->num, 1);
    ck_assert_uint_eq(b->num, 2);
    ck_assert_ptr_eq(lease_find(&t, a->id), a);
    ck_assert_ptr_eq(lease_find(&t, b->id), b);
    ck_assert_ptr_null(lease_find(&t, 0));
    ck_assert_ptr_null(lease_find(&t, 1));
    ck_assert_ptr_null(lease_find(&t, 2));
    ck_assert_int_eq(lease_table_check(&t), 0);
    uint64_t aid = a->id;
    lease_free(&t, a);
    ck_assert_ptr_null(lease_find(&t, aid));
    ck_assert_ptr_eq(lease_find(&t, b->id), b);
    ck_assert_uint_eq(t.n, 1);
    ck_assert_int_eq(lease_table_check(&t), 0);
    struct lease *c = NULL;
    ck_assert_int_eq(lease_new(&t, "kvd", 12, 7, &c), 0);
    ck_assert_uint_eq(c->num, 3); /* display numbers are not reused */
    ck_assert_uint_ne(c->id, aid);
    lease_table_release(&t);
}
END_TEST

START_TEST(test_lease_table_full)
{
    struct lease_table t;
    struct lease *l = NULL;
    lease_table_init(&t);
    for (int i = 0; i < BROKER_LEASES_MAX; i++)
        ck_assert_int_eq(lease_new(&t, "x", 1, 0, &l), 0);
    l = NULL;
    ck_assert_int_eq(lease_new(&t, "x", 1, 0, &l), KVD_EOVERLOAD);
    ck_assert_ptr_null(l);
    ck_assert_uint_eq(t.n, BROKER_LEASES_MAX);
    ck_assert_int_eq(lease_table_check(&t), 0);
    lease_table_release(&t);
}
END_TEST

START_TEST(test_lease_churn)
{
    struct lease_table t;
    struct lease *live[BROKER_LEASES_MAX];
    uint32_t n = 0;
    lease_table_init(&t);
    srand(11);
    for (int step = 0; step < T_CHURN_STEPS; step++) {
        bool add = n == 0 || (n < BROKER_LEASES_MAX && rand() % 2);
        if (add) {
            struct lease *l = NULL;
            ck_assert_int_eq(lease_new(&t, "c", 1, 0, &l), 0);
            for (uint32_t i = 0; i < n; i++)
                ck_assert_uint_ne(live[i]->id, l->id);
            live[n++] = l;
        } else {
            uint32_t k = (uint32_t)rand() % n;
            uint64_t id = live[k]->id;
            lease_free(&t, live[k]);
            live[k] = live[--n];
            ck_assert_ptr_null(lease_find(&t, id));
        }
        ck_assert_uint_eq(t.n, n);
        ck_assert_int_eq(lease_table_check(&t), 0);
        for (uint32_t i = 0; i < n; i++) {
            ck_assert_ptr_eq(lease_find(&t, live[i]->id), live[i]);
            const struct lease *nb = lease_find(&t, live[i]->id + 1);
            ck_assert(nb == NULL || nb->id == live[i]->id + 1); /* only an exact match */
        }
        ck_assert_ptr_null(lease_find(&t, 0));
    }
    lease_table_release(&t);
    ck_assert_uint_eq(t.n, 0);
}
END_TEST

int main(void)
{
    log_setup("test_lease", LOG_LEVEL_WARN);
    Suite *s = suite_create("lease");
    TCase *tc = tcase_create("lease");
    tcase_add_test(tc, test_lease_new_find_free);
    tcase_add_test(tc, test_lease_table_full);
    tcase_add_test(tc, test_lease_churn);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
