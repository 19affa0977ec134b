/* test_pool.c — broker/pool: states, counts, free-first then LRU eviction, tail-first
 * release order, all-or-nothing alloc, and randomized alloc/ref/unref/index/evict
 * sequences with pool_check() after every operation against an independent model. */
#include "broker/pool.h"
#include "common/err.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct evict_log {
    uint32_t pages[64];
    uint32_t n;
};

static void log_evict_cb(void *ctx, uint32_t page)
{
    struct evict_log *l = ctx;
    if (l->n < 64)
        l->pages[l->n] = page;
    l->n++;
}

START_TEST(test_init_counts)
{
    struct pool p;
    ck_assert_int_eq(pool_init(&p, 0, NULL, NULL), -EINVAL);
    ck_assert_int_eq(pool_init(&p, 4, NULL, NULL), 0);
    ck_assert_uint_eq(pool_count_free(&p), 4);
    ck_assert_uint_eq(pool_count_used(&p), 0);
    ck_assert_uint_eq(pool_count_cached(&p), 0);
    ck_assert_int_eq(pool_check(&p), 0);
    pool_release(&p);
}
END_TEST

START_TEST(test_alloc_all_or_nothing)
{
    struct pool p;
    uint32_t out[8];
    ck_assert_int_eq(pool_init(&p, 4, NULL, NULL), 0);
    ck_assert_int_eq(pool_alloc(&p, 3, out), 0);
    ck_assert_int_eq(pool_check(&p), 0);
    ck_assert_int_eq(pool_alloc(&p, 2, out + 3), KVD_ENOPAGES);
    ck_assert_uint_eq(pool_count_free(&p), 1); /* nothing half-granted */
    ck_assert_uint_eq(pool_count_used(&p), 3);
    ck_assert_int_eq(pool_check(&p), 0);
    /* distinct pages */
    ck_assert(out[0] != out[1] && out[1] != out[2] && out[0] != out[2]);
    pool_release(&p);
}
END_TEST

START_TEST(test_ref_unref_states)
{
    struct pool p;
    uint32_t a;
    ck_assert_int_eq(pool_init(&p, 2, NULL, NULL), 0);
    ck_assert_int_eq(pool_ref(&p, 0), -EINVAL); /* free page cannot be ref'd */
    ck_assert_int_eq(pool_unref(&p, 0), -EINVAL);
    ck_assert_int_eq(pool_ref(&p, 7), -EINVAL);
    ck_assert_int_eq(pool_alloc(&p, 1, &a), 0);
    ck_assert_int_eq(pool_ref(&p, a), 0);
    ck_assert_uint_eq(p.pages[a].refcnt, 2);
    ck_assert_int_eq(pool_unref(&p, a), 0);
    ck_assert(pool_page_is_used(&p, a));
    ck_assert_int_eq(pool_set_indexed(&p, a), 0);
    ck_assert_int_eq(pool_set_indexed(&p, a), -EINVAL); /* twice */
    ck_assert_int_eq(pool_unref(&p, a), 0);
    ck_assert(pool_page_is_cached(&p, a)); /* indexed + refcnt 0 = cached, not free */
    ck_assert_uint_eq(pool_count_cached(&p), 1);
    ck_assert_uint_eq(pool_count_free(&p), 1);
    ck_assert_int_eq(pool_check(&p), 0);
    ck_assert_int_eq(pool_ref(&p, a), 0); /* prefix hit: back in use */
    ck_assert(pool_page_is_used(&p, a));
    ck_assert_uint_eq(pool_count_cached(&p), 0);
    ck_assert_int_eq(pool_check(&p), 0);
    pool_release(&p);
}
END_TEST

/* Free pages go first; only then cached pages, least recently released first, and a
 * sequence released tail-first has its tail blocks evicted first. */
START_TEST(test_eviction_order)
{
    struct pool p;
    struct evict_log ev = {{0}, 0};
    uint32_t seq[4], more[2], x;
    ck_assert_int_eq(pool_init(&p, 6, log_evict_cb, &ev), 0);
    ck_assert_int_eq(pool_alloc(&p, 4, seq), 0);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pool_set_indexed(&p, seq[i]), 0);
    pool_unref_seq(&p, seq, 4); /* releases seq[3], seq[2], seq[1], seq[0] */
    ck_assert_uint_eq(pool_count_cached(&p), 4);
    ck_assert_int_eq(pool_check(&p), 0);
    ck_assert_int_eq(pool_alloc(&p, 2, more), 0); /* the 2 free pages: no eviction */
    ck_assert_uint_eq(ev.n, 0);
    ck_assert_int_eq(pool_alloc(&p, 1, &x), 0);
    ck_assert_uint_eq(ev.n, 1);
    ck_assert_uint_eq(ev.pages[0], seq[3]); /* tail block first */
    ck_assert_uint_eq(x, seq[3]);
    ck_assert(!p.pages[x].indexed);
    ck_assert_int_eq(pool_alloc(&p, 1, &x), 0);
    ck_assert_uint_eq(ev.pages[1], seq[2]);
    ck_assert_uint_eq(pool_evict_cached(&p, 10), 2);
    ck_assert_uint_eq(ev.pages[2], seq[1]);
    ck_assert_uint_eq(ev.pages[3], seq[0]);
    ck_assert_uint_eq(pool_count_free(&p), 2);
    ck_assert_uint_eq(p.evictions, 4);
    ck_assert_int_eq(pool_check(&p), 0);
    pool_release(&p);
}
END_TEST

START_TEST(test_adopt_cached)
{
    struct pool p;
    struct evict_log ev = {{0}, 0};
    uint32_t out[3];
    ck_assert_int_eq(pool_init(&p, 3, log_evict_cb, &ev), 0);
    ck_assert_int_eq(pool_adopt_cached(&p, 1), 0);
    ck_assert_int_eq(pool_adopt_cached(&p, 1), -EINVAL); /* not free any more */
    ck_assert_int_eq(pool_adopt_cached(&p, 3), -EINVAL);
    ck_assert(pool_page_is_cached(&p, 1));
    ck_assert_uint_eq(pool_count_free(&p), 2);
    ck_assert_int_eq(pool_check(&p), 0);
    ck_assert_int_eq(pool_alloc(&p, 3, out), 0); /* free ones first, then evicts page 1 */
    ck_assert_uint_eq(out[2], 1);
    ck_assert_uint_eq(ev.n, 1);
    ck_assert_int_eq(pool_check(&p), 0);
    pool_release(&p);
}
END_TEST

START_TEST(test_check_detects_corruption)
{
    struct pool p;
    uint32_t a;
    ck_assert_int_eq(pool_init(&p, 3, NULL, NULL), 0);
    ck_assert_int_eq(pool_alloc(&p, 1, &a), 0);
    p.pages[a].refcnt = 0; /* in use with no ref: broken */
    ck_assert_int_eq(pool_check(&p), -EINVAL);
    p.pages[a].refcnt = 1;
    p.n_used++; /* count off */
    ck_assert_int_eq(pool_check(&p), -EINVAL);
    p.n_used--;
    ck_assert_int_eq(pool_check(&p), 0);
    pool_release(&p);
}
END_TEST

/* Check's ck_assert records a checkpoint per call (a pipe write in fork mode); the hot
 * randomized loop checks with plain comparisons and aborts the test only on failure. */
#define REQ(c)                                                                             \
    do {                                                                                   \
        if (!(c))                                                                          \
            ck_abort_msg("%s:%d: %s", __FILE__, __LINE__, #c);                             \
    } while (0)
#define REQ_EQ(a, b)                                                                       \
    do {                                                                                   \
        long long a_ = (long long)(a), b_ = (long long)(b);                                \
        if (a_ != b_)                                                                      \
            ck_abort_msg("%s:%d: %s == %lld, expected %lld", __FILE__, __LINE__, #a, a_, b_); \
    } while (0)

/* Independent model: refcount and indexed flag per page; the pool must agree. */
#define RND_PAGES 64
#define RND_STEPS 20000

struct model {
    uint32_t ref[RND_PAGES];
    bool indexed[RND_PAGES];
};

static void model_agree(const struct pool *p, const struct model *m)
{
    uint32_t free_n = 0, used = 0, cached = 0;
    for (uint32_t i = 0; i < RND_PAGES; i++) {
        REQ_EQ(p->pages[i].refcnt, m->ref[i]);
        REQ_EQ(p->pages[i].indexed, m->indexed[i]);
        if (m->ref[i])
            used++;
        else if (m->indexed[i])
            cached++;
        else
            free_n++;
    }
    REQ_EQ(pool_count_used(p), used);
    REQ_EQ(pool_count_cached(p), cached);
    REQ_EQ(pool_count_free(p), free_n);
    REQ_EQ(pool_count_free(p), RND_PAGES - used - cached);
}

struct rnd_ctx {
    struct model *m;
};

static void rnd_evict_cb(void *ctx, uint32_t page)
{
    struct rnd_ctx *c = ctx;
    REQ_EQ(c->m->ref[page], 0);
    REQ(c->m->indexed[page]);
    c->m->indexed[page] = false;
}

START_TEST(test_randomized)
{
    struct pool p;
    struct model m;
    memset(&m, 0, sizeof(m));
    struct rnd_ctx ctx = {&m};
    ck_assert_int_eq(pool_init(&p, RND_PAGES, rnd_evict_cb, &ctx), 0);
    srand(12345u + (unsigned)_i);
    uint32_t out[16];
    for (int step = 0; step < RND_STEPS; step++) {
        uint32_t pg = (uint32_t)rand() % RND_PAGES;
        switch (rand() % 6) {
        case 0: { /* alloc */
            uint32_t n = 1 + (uint32_t)rand() % 16, avail = 0;
            for (uint32_t i = 0; i < RND_PAGES; i++)
                avail += m.ref[i] == 0;
            int rc = pool_alloc(&p, n, out);
            if (n > avail) {
                REQ_EQ(rc, KVD_ENOPAGES);
                break;
            }
            REQ_EQ(rc, 0);
            for (uint32_t i = 0; i < n; i++) {
                REQ_EQ(m.ref[out[i]], 0);
                m.ref[out[i]] = 1;
                m.indexed[out[i]] = false;
            }
            break;
        }
        case 1: /* ref */
            REQ_EQ(pool_ref(&p, pg), (m.ref[pg] || m.indexed[pg]) ? 0 : -EINVAL);
            if (m.ref[pg] || m.indexed[pg])
                m.ref[pg]++;
            break;
        case 2:
        case 3: /* unref (more often, so pages cycle) */
            REQ_EQ(pool_unref(&p, pg), m.ref[pg] ? 0 : -EINVAL);
            if (m.ref[pg])
                m.ref[pg]--;
            break;
        case 4: /* index */
            REQ_EQ(pool_set_indexed(&p, pg), (m.ref[pg] && !m.indexed[pg]) ? 0 : -EINVAL);
            if (m.ref[pg])
                m.indexed[pg] = true;
            break;
        case 5: /* evict some cached */
            if (rand() % 8 == 0) {
                uint32_t cached = 0, k = (uint32_t)rand() % 4;
                for (uint32_t i = 0; i < RND_PAGES; i++)
                    cached += !m.ref[i] && m.indexed[i];
                REQ_EQ(pool_evict_cached(&p, k), k < cached ? k : cached);
            }
            break;
        }
        REQ_EQ(pool_check(&p), 0);
        model_agree(&p, &m);
    }
    pool_release(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_add_test(tc, test_init_counts);
    tcase_add_test(tc, test_alloc_all_or_nothing);
    tcase_add_test(tc, test_ref_unref_states);
    tcase_add_test(tc, test_eviction_order);
    tcase_add_test(tc, test_check_detects_corruption);
    tcase_add_test(tc, test_adopt_cached);
    tcase_add_loop_test(tc, test_randomized, 0, 4);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
