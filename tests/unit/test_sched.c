/* test_sched.c — the scheduler's pure logic: batching, chunked prefill, admission by
 * pages, FCFS, preemption of the newest, lone-sequence failure, worker split. */
#include "common/err.h"
#include "daemon/sched.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define T_MAX_LEN 64
#define T_BS 4

struct tseq {
    struct sched_seq s;
    uint32_t tokens[T_MAX_LEN];
    uint32_t blocks[T_MAX_LEN / T_BS];
};

static void tseq_init(struct tseq *t, uint64_t id, uint32_t prompt, uint32_t max_total)
{
    memset(t, 0, sizeof(*t));
    t->s.id = id;
    t->s.tokens = t->tokens;
    t->s.blocks = t->blocks;
    for (uint32_t i = 0; i < prompt; i++)
        t->tokens[i] = 100 + i;
    t->s.n_tokens = prompt;
    t->s.max_total = max_total;
}

static struct sched_limits lim(uint32_t batch, uint32_t running, uint32_t pages)
{
    struct sched_limits l = {.max_batch_tokens = batch,
                             .max_running = running,
                             .max_queue = 8,
                             .max_model_len = T_MAX_LEN,
                             .block_size = T_BS,
                             .total_pages = pages,
                             .naive = false};
    return l;
}

/* Plays the daemon: gives every entry its pages from *avail and runs it, sampling
 * token 7 when asked. */
static void run_plan(struct sched *s, struct sched_plan *p, uint32_t *avail)
{
    for (uint32_t i = 0; i < p->n_preempted; i++)
        ck_assert_uint_eq(p->preempted[i]->n_pages, 0);
    for (uint32_t i = 0; i < p->n_entries; i++) {
        struct sched_entry *e = &p->entries[i];
        uint32_t add = e->need_pages - e->seq->n_pages;
        ck_assert_uint_le(add, *avail);
        *avail -= add;
        e->seq->n_pages = e->need_pages;
    }
    for (uint32_t i = 0; i < p->n_entries; i++)
        sched_entry_done(s, &p->entries[i], p->entries[i].sample, 7);
    ck_assert_int_eq(sched_check(s), 0);
}

START_TEST(test_init_rejects_zero)
{
    struct sched s;
    struct sched_limits l = lim(0, 1, 1);
    ck_assert_int_eq(sched_init(&s, &l), -EINVAL);
}
END_TEST

START_TEST(test_submit_limits)
{
    struct sched s;
    struct sched_limits l = lim(16, 4, 4); /* 4 pages = 16 tokens */
    l.max_queue = 2;
    ck_assert_int_eq(sched_init(&s, &l), 0);
    struct tseq a, b, c, big, toolong;
    tseq_init(&big, 9, 16, 20); /* needs 17 tokens -> 5 pages > pool */
    ck_assert_int_eq(sched_submit(&s, &big.s), KVD_ETOOLONG);
    tseq_init(&toolong, 10, T_MAX_LEN, T_MAX_LEN); /* prompt == max-model-len */
    ck_assert_int_eq(sched_submit(&s, &toolong.s), KVD_ETOOLONG);
    tseq_init(&a, 1, 3, 10);
    tseq_init(&b, 2, 3, 10);
    tseq_init(&c, 3, 3, 10);
    ck_assert_int_eq(sched_submit(&s, &a.s), 0);
    ck_assert_int_eq(sched_submit(&s, &b.s), 0);
    ck_assert_int_eq(sched_submit(&s, &c.s), KVD_EOVERLOAD);
    ck_assert_uint_eq(s.n_queued, 2);
    ck_assert_int_eq(sched_check(&s), 0);
    sched_release(&s);
}
END_TEST

START_TEST(test_continuous_batching_and_chunked_prefill)
{
    struct sched s;
    struct sched_limits l = lim(8, 4, 100);
    ck_assert_int_eq(sched_init(&s, &l), 0);
    struct tseq a, b;
    tseq_init(&a, 1, 3, 20);  /* short prompt */
    tseq_init(&b, 2, 13, 30); /* long prompt: chunked over 8-token budget */
    ck_assert_int_eq(sched_submit(&s, &a.s), 0);
    ck_assert_int_eq(sched_submit(&s, &b.s), 0);
    uint32_t avail = 100;
    struct sched_plan *p = sched_plan(&s, avail);
    ck_assert_uint_eq(p->n_entries, 2);
    ck_assert_uint_eq(p->entries[0].n, 3);
    ck_assert(p->entries[0].sample);
    ck_assert_uint_eq(p->entries[1].n, 5); /* the rest of the budget */
    ck_assert(!p->entries[1].sample);
    ck_assert_uint_eq(p->entries[1].need_pages, 4); /* whole prompt's pages at admission */
    ck_assert_uint_eq(p->n_tokens, 8);
    run_plan(&s, p, &avail);
    ck_assert_uint_eq(a.s.n_tokens, 4);
    /* Next step: a decodes 1 token, b continues its prefill with 7 (budget 8). */
    p = sched_plan(&s, avail);
    ck_assert_uint_eq(p->n_entries, 2);
    ck_assert_uint_eq(p->entries[0].seq->id, 1);
    ck_assert_uint_eq(p->entries[0].n, 1);
    ck_assert_uint_eq(p->entries[0].pos0, 3);
    ck_assert_uint_eq(p->entries[1].pos0, 5);
    ck_assert_uint_eq(p->entries[1].n, 7);
    run_plan(&s, p, &avail);
    p = sched_plan(&s, avail);
    ck_assert_uint_eq(p->entries[1].n, 1);
    ck_assert(p->entries[1].sample);
    run_plan(&s, p, &avail);
    ck_assert_uint_eq(b.s.n_tokens, 14);
    ck_assert_uint_eq(b.s.n_computed, 13);
    sched_finish(&s, &a.s);
    sched_finish(&s, &b.s);
    ck_assert_uint_eq(s.n_running, 0);
    ck_assert_int_eq(sched_check(&s), 0);
    sched_release(&s);
}
END_TEST

START_TEST(test_admission_fcfs_by_pages)
{
    struct sched s;
    struct sched_limits l = lim(64, 8, 10);
    ck_assert_int_eq(sched_init(&s, &l), 0);
    struct tseq a, b, c;
    tseq_init(&a, 1, 12, 40); /* 3 pages */
    tseq_init(&b, 2, 20, 40); /* 5 pages */
    tseq_init(&c, 3, 2, 40);  /* 1 page: would fit, but must not overtake b */
    sched_submit(&s, &a.s);
    sched_submit(&s, &b.s);
    sched_submit(&s, &c.s);
    struct sched_plan *p = sched_plan(&s, 6);
    ck_assert_uint_eq(p->n_entries, 1);
    ck_assert_uint_eq(p->entries[0].seq->id, 1);
    ck_assert_uint_eq(s.n_queued, 2);
    ck_assert_ptr_eq(s.q_head, &b.s);
    ck_assert_int_eq(sched_check(&s), 0);
    sched_release(&s);
}
END_TEST

START_TEST(test_max_running)
{
    struct sched s;
    struct sched_limits l = lim(64, 2, 100);
    ck_assert_int_eq(sched_init(&s, &l), 0);
    struct tseq t[3];
    for (int i = 0; i < 3; i++) {
        tseq_init(&t[i], (uint64_t)i + 1, 2, 10);
        sched_submit(&s, &t[i].s);
    }
    struct sched_plan *p = sched_plan(&s, 100);
    ck_assert_uint_eq(p->n_entries, 2);
    ck_assert_uint_eq(s.n_running, 2);
    ck_assert_uint_eq(s.n_queued, 1);
    sched_release(&s);
}
END_TEST

START_TEST(test_preempt_newest_then_resume)
{
    struct sched s;
    struct sched_limits l = lim(64, 4, 4); /* 4 pages x 4 tokens */
    ck_assert_int_eq(sched_init(&s, &l), 0);
    struct tseq a, b;
    tseq_init(&a, 1, 4, 12); /* 1 page, decoding needs a 2nd at token 5 */
    tseq_init(&b, 2, 8, 12); /* 2 pages */
    sched_submit(&s, &a.s);
    sched_submit(&s, &b.s);
    uint32_t avail = 4;
    struct sched_plan *p = sched_plan(&s, avail);
    ck_assert_uint_eq(p->n_entries, 2);
    run_plan(&s, p, &avail); /* a: 5 tokens/1 page, b: 9 tokens/2 pages, avail 1 */
    ck_assert_uint_eq(avail, 1);
    /* a needs page 2 (takes the last one); b needs page 3: none -> preempt b (newest). */
    p = sched_plan(&s, avail);
    ck_assert_uint_eq(p->n_preempted, 1);
    ck_assert_ptr_eq(p->preempted[0], &b.s);
    ck_assert_uint_eq(p->n_entries, 1);
    ck_assert_ptr_eq(p->entries[0].seq, &a.s);
    ck_assert_uint_eq(s.preemptions, 1);
    ck_assert_uint_eq(b.s.state, SCHED_PREEMPTED);
    ck_assert_uint_eq(b.s.n_tokens, 9); /* keeps its generated token for recompute */
    ck_assert_ptr_eq(s.q_head, &b.s);
    avail += 2; /* the caller released b's pages */
    run_plan(&s, p, &avail);
    /* a finishes; b is readmitted and recomputes all 9 tokens. */
    sched_finish(&s, &a.s);
    avail += a.s.n_pages;
    p = sched_plan(&s, avail);
    ck_assert_uint_eq(p->n_entries, 1);
    ck_assert_ptr_eq(p->entries[0].seq, &b.s);
    ck_assert_uint_eq(p->entries[0].pos0, 0);
    ck_assert_uint_eq(p->entries[0].n, 9);
    ck_assert(p->entries[0].sample);
    run_plan(&s, p, &avail);
    ck_assert_uint_eq(b.s.n_tokens, 10);
    sched_release(&s);
}
END_TEST

START_TEST(test_lone_sequence_fails_not_livelock)
{
    struct sched s;
    struct sched_limits l = lim(64, 4, 8);
    ck_assert_int_eq(sched_init(&s, &l), 0);
    struct tseq a;
    tseq_init(&a, 1, 4, 30);
    sched_submit(&s, &a.s);
    uint32_t avail = 1; /* someone else holds the rest of the pool */
    struct sched_plan *p = sched_plan(&s, avail);
    run_plan(&s, p, &avail);
    ck_assert_uint_eq(avail, 0);
    p = sched_plan(&s, avail); /* needs a 2nd page, none obtainable, alone */
    ck_assert_uint_eq(p->n_failed, 1);
    ck_assert_ptr_eq(p->failed[0], &a.s);
    ck_assert_uint_eq(p->n_preempted, 0);
    ck_assert_uint_eq(a.s.state, SCHED_DONE);
    ck_assert_uint_eq(s.n_running, 0);
    ck_assert_int_eq(sched_check(&s), 0);
    sched_release(&s);
}
END_TEST

START_TEST(test_prefix_hit_shrinks_entry)
{
    struct sched s;
    struct sched_limits l = lim(64, 4, 100);
    ck_assert_int_eq(sched_init(&s, &l), 0);
    struct tseq a;
    tseq_init(&a, 1, 10, 30);
    sched_submit(&s, &a.s);
    struct sched_plan *p = sched_plan(&s, 100);
    ck_assert(p->entries[0].admitted);
    a.s.n_pages = 2; /* the broker joined 2 cached pages */
    sched_entry_hit(&s, &p->entries[0], 2);
    ck_assert_uint_eq(p->entries[0].pos0, 8);
    ck_assert_uint_eq(p->entries[0].n, 2);
    ck_assert(p->entries[0].sample);
    ck_assert_uint_eq(p->n_tokens, 2);
    ck_assert_uint_eq(a.s.n_cached, 8);
    ck_assert_uint_eq(a.s.n_committed, 2);
    uint32_t avail = 100;
    run_plan(&s, p, &avail);
    ck_assert_uint_eq(a.s.n_computed, 10);
    ck_assert_uint_eq(a.s.n_tokens, 11);
    sched_release(&s);
}
END_TEST

START_TEST(test_naive_reserves_max_model_len)
{
    struct sched s;
    struct sched_limits l = lim(64, 8, 40); /* max_model_len 64 = 16 pages */
    l.naive = true;
    ck_assert_int_eq(sched_init(&s, &l), 0);
    struct tseq t[3];
    for (int i = 0; i < 3; i++) {
        tseq_init(&t[i], (uint64_t)i + 1, 2, 10);
        sched_submit(&s, &t[i].s);
    }
    struct sched_plan *p = sched_plan(&s, 40);
    ck_assert_uint_eq(p->n_entries, 2); /* 2 x 16 pages fit in 40, a third does not */
    ck_assert_uint_eq(p->entries[0].need_pages, 16);
    uint32_t avail = 40;
    run_plan(&s, p, &avail);
    p = sched_plan(&s, avail); /* decoding never needs more pages */
    for (uint32_t i = 0; i < p->n_entries; i++)
        ck_assert_uint_eq(p->entries[i].need_pages, p->entries[i].seq->n_pages);
    sched_release(&s);
}
END_TEST

START_TEST(test_assign_splits_among_workers)
{
    struct sched s;
    struct sched_limits l = lim(64, 8, 100);
    ck_assert_int_eq(sched_init(&s, &l), 0);
    struct tseq t[4];
    for (int i = 0; i < 4; i++) {
        tseq_init(&t[i], (uint64_t)i + 1, 4, 10);
        sched_submit(&s, &t[i].s);
    }
    sched_plan(&s, 100);
    ck_assert_uint_eq(sched_assign(&s, 2), 2);
    uint32_t per[2] = {0, 0};
    for (uint32_t i = 0; i < s.plan.n_entries; i++)
        per[s.plan.entries[i].worker]++;
    ck_assert_uint_eq(per[0], 2);
    ck_assert_uint_eq(per[1], 2);
    ck_assert_uint_eq(sched_assign(&s, 1), 1);
    sched_release(&s);
}
END_TEST

START_TEST(test_finish_queued_and_cancel)
{
    struct sched s;
    struct sched_limits l = lim(64, 8, 100);
    ck_assert_int_eq(sched_init(&s, &l), 0);
    struct tseq a, b;
    tseq_init(&a, 1, 4, 10);
    tseq_init(&b, 2, 4, 10);
    sched_submit(&s, &a.s);
    sched_submit(&s, &b.s);
    sched_finish(&s, &a.s);
    ck_assert_uint_eq(s.n_queued, 1);
    ck_assert_ptr_eq(s.q_head, &b.s);
    ck_assert_int_eq(sched_check(&s), 0);
    /* A token past max_total is refused. */
    struct sched_plan *p = sched_plan(&s, 100);
    b.s.max_total = 4;
    b.s.n_pages = p->entries[0].need_pages;
    ck_assert_int_eq(sched_entry_done(&s, &p->entries[0], true, 5), -ENOSPC);
    ck_assert_uint_eq(b.s.n_tokens, 4);
    sched_release(&s);
}
END_TEST

START_TEST(test_cache_aware_admission)
{
    struct sched s;
    struct sched_limits l = lim(64, 8, 100);
    l.cache_aware = true;
    ck_assert_int_eq(sched_init(&s, &l), 0);
    struct tseq a, b, c;
    tseq_init(&a, 1, 8, 20);
    tseq_init(&b, 2, 8, 20);
    tseq_init(&c, 3, 8, 20);
    c.s.prefix_hint = 2; /* expects 2 cached blocks */
    sched_submit(&s, &a.s);
    sched_submit(&s, &b.s);
    sched_submit(&s, &c.s);
    struct sched_plan *p = sched_plan(&s, 2); /* room for one 2-page prompt */
    ck_assert_uint_eq(p->n_entries, 1);
    ck_assert_ptr_eq(p->entries[0].seq, &c.s);
    ck_assert_uint_eq(a.s.overtaken, 1);
    ck_assert_uint_eq(b.s.overtaken, 1);
    ck_assert_int_eq(sched_check(&s), 0);
    /* Without cache awareness: plain FCFS. */
    sched_release(&s);
    l.cache_aware = false;
    ck_assert_int_eq(sched_init(&s, &l), 0);
    tseq_init(&a, 1, 8, 20);
    tseq_init(&c, 3, 8, 20);
    c.s.prefix_hint = 2;
    sched_submit(&s, &a.s);
    sched_submit(&s, &c.s);
    p = sched_plan(&s, 2);
    ck_assert_ptr_eq(p->entries[0].seq, &a.s);
    sched_release(&s);
}
END_TEST

START_TEST(test_cache_aware_no_starvation)
{
    struct sched s;
    struct sched_limits l = lim(64, 64, 1000);
    l.cache_aware = true;
    l.max_queue = 64;
    ck_assert_int_eq(sched_init(&s, &l), 0);
    static struct tseq head, later[SCHED_OVERTAKE_MAX + 2];
    tseq_init(&head, 1, 4, 10);
    sched_submit(&s, &head.s);
    /* Each round one later arrival with a cached prefix competes with the old head. */
    int rounds = 0;
    for (int i = 0; i < SCHED_OVERTAKE_MAX + 2 && head.s.state == SCHED_QUEUED; i++) {
        tseq_init(&later[i], 10 + (uint64_t)i, 4, 10);
        later[i].s.prefix_hint = 3;
        sched_submit(&s, &later[i].s);
        struct sched_plan *p = sched_plan(&s, 1); /* one admission per round */
        ck_assert_uint_eq(p->n_entries, 1);
        if (p->entries[0].seq != &head.s)
            sched_finish(&s, p->entries[0].seq); /* it ran and ended: pages back */
        rounds++;
    }
    ck_assert_uint_eq(head.s.state, SCHED_RUNNING);
    ck_assert_int_eq(rounds, SCHED_OVERTAKE_MAX + 1); /* overtaken exactly the cap */
    ck_assert_uint_eq(head.s.overtaken, SCHED_OVERTAKE_MAX);
    ck_assert_int_eq(sched_check(&s), 0);
    sched_release(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("sched");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_init_rejects_zero);
    tcase_add_test(tc, test_submit_limits);
    tcase_add_test(tc, test_continuous_batching_and_chunked_prefill);
    tcase_add_test(tc, test_admission_fcfs_by_pages);
    tcase_add_test(tc, test_max_running);
    tcase_add_test(tc, test_preempt_newest_then_resume);
    tcase_add_test(tc, test_lone_sequence_fails_not_livelock);
    tcase_add_test(tc, test_prefix_hit_shrinks_entry);
    tcase_add_test(tc, test_naive_reserves_max_model_len);
    tcase_add_test(tc, test_assign_splits_among_workers);
    tcase_add_test(tc, test_finish_queued_and_cancel);
    tcase_add_test(tc, test_cache_aware_admission);
    tcase_add_test(tc, test_cache_aware_no_starvation);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
