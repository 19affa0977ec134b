/* test_kvd_prefix.c — prefix caching end to end (issue 6): outputs identical with the
 * cache on and off (greedy, f32 KV) for full and partial hits, hits while the original
 * still runs, hits after it finished, hits after kvd restarted with the broker kept
 * running, misses after eviction; different cache_salt never share. */
#include "test_kvd_harness.h"

#include "common/err.h"

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEN_TIMEOUT_MS 60000
#define BS 16          /* kvd's default block size */
#define PROMPT_LEN 100 /* tokens: 6 full blocks before the last token -> 96 cached */
#define OUT_LEN 24

/* A realistic prompt: BOS + the model's own greedy continuation of a story start. */
static void make_prompt(struct kvd_client *c, uint32_t *out, size_t n)
{
    struct kvd_params p;
    static struct kh_result r;
    kvd_params_init(&p);
    p.prompt = "Tom had a red kite";
    p.max_tokens = (uint32_t)n;
    p.ignore_eos = true;
    p.temperature = 0;
    p.stream = false;
    kh_generate(c, &p, GEN_TIMEOUT_MS, &r);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_uint_eq(r.n_tokens, n);
    out[0] = 1; /* BOS */
    memcpy(out + 1, r.tokens, (n - 1) * sizeof(uint32_t));
}

static void run(struct kvd_client *c, const uint32_t *toks, size_t n, const char *salt,
                struct kh_result *r)
{
    struct kvd_params p;
    kh_params_greedy(&p, toks, n, OUT_LEN);
    p.stream = false;
    p.cache_salt = salt;
    kh_generate(c, &p, GEN_TIMEOUT_MS, r);
    ck_assert_int_eq(r->rc, 0);
    ck_assert_uint_eq(r->n_tokens, r->completion_tokens);
}

static void same_output(const struct kh_result *a, const struct kh_result *b)
{
    ck_assert_uint_eq(a->n_tokens, b->n_tokens);
    ck_assert_mem_eq(a->tokens, b->tokens, a->n_tokens * sizeof(uint32_t));
}

struct env {
    char dir[256];
    struct kh_kvd kvd;
    struct kvd_client *c;
};

static void env_start(struct env *e, const char *const *extra)
{
    kh_tmpdir(e->dir);
    ck_assert_int_eq(kh_start(&e->kvd, "kvd", e->dir, "kvd.sock", extra), 0);
    ck_assert_int_eq(kvd_connect(e->dir, 5000, &e->c), 0);
}

static void env_stop(struct env *e)
{
    kvd_close(e->c);
    ck_assert_uint_eq(kh_wait_pages_used_zero(e->dir), 0);
    ck_assert_int_eq(kh_stop(&e->kvd, SIGTERM), 0);
    kh_rmdir(e->dir);
}

START_TEST(test_on_off_full_and_partial_hits)
{
    static const char *const off[] = {"--prefix-cache", "off", NULL};
    struct env on, of;
    env_start(&on, NULL);
    env_start(&of, off);
    static uint32_t a[PROMPT_LEN], b[PROMPT_LEN];
    make_prompt(of.c, a, PROMPT_LEN);
    memcpy(b, a, 70 * sizeof(uint32_t)); /* shares 4 full blocks (64 tokens) with a */
    for (int i = 70; i < PROMPT_LEN; i++)
        b[i] = a[i] == 300 ? 301 : 300;
    static struct kh_result on1, on2, on3, off1, off3;
    run(of.c, a, PROMPT_LEN, NULL, &off1);
    run(of.c, b, PROMPT_LEN, NULL, &off3);
    ck_assert_uint_eq(off1.cached_prompt_tokens, 0);
    run(on.c, a, PROMPT_LEN, NULL, &on1); /* miss, fills the cache */
    ck_assert_uint_eq(on1.cached_prompt_tokens, 0);
    run(on.c, a, PROMPT_LEN, NULL, &on2); /* full hit after the original finished */
    ck_assert_uint_eq(on2.cached_prompt_tokens, (PROMPT_LEN - 1) / BS * BS);
    run(on.c, b, PROMPT_LEN, NULL, &on3); /* partial hit */
    ck_assert_uint_eq(on3.cached_prompt_tokens, 64);
    same_output(&on1, &off1);
    same_output(&on2, &off1);
    same_output(&on3, &off3);
    run(of.c, a, PROMPT_LEN, NULL, &off1); /* off never hits */
    ck_assert_uint_eq(off1.cached_prompt_tokens, 0);
    env_stop(&on);
    env_stop(&of);
}
END_TEST

START_TEST(test_hit_while_original_runs)
{
    /* Two workers. The original runs alone first, so every one of its steps goes to the
     * first idle worker, 0 (asserted: worker 1's step count does not move); its prompt
     * pages are written there. While it decodes, the hit arrives and the step is split
     * between both workers, so worker 1 now runs steps reading pages worker 0 wrote
     * (asserted: its step count grows), and the hit's output equals a full compute. */
    static const char *const extra[] = {"--max-model-len", "2048", "--workers", "2", NULL};
    struct env e;
    env_start(&e, extra);
    static uint32_t a[PROMPT_LEN];
    make_prompt(e.c, a, PROMPT_LEN);
    a[1] = a[1] == 400 ? 401 : 400; /* not the prompt make_prompt's request cached */
    struct kvd_client *c2;
    ck_assert_int_eq(kvd_connect(e.dir, 5000, &c2), 0);
    struct kvd_params p;
    kh_params_greedy(&p, a, PROMPT_LEN, 1500);
    p.ignore_eos = true;
    int64_t w1_before = kh_worker_steps(e.dir, 1);
    ck_assert_int_ge(w1_before, 0); /* there is a second worker */
    uint64_t long_id;
    ck_assert_int_eq(kvd_submit(c2, &p, &long_id), 0);
    struct kvd_event ev;
    ck_assert_int_eq(kvd_next_event(c2, &ev, GEN_TIMEOUT_MS), 0);
    ck_assert_int_eq(ev.type, KVD_EVENT_TOKENS);            /* its prompt is computed */
    ck_assert_int_eq(kh_worker_steps(e.dir, 1), w1_before); /* ... all on worker 0 */
    static struct kh_result hit, ref;
    run(e.c, a, PROMPT_LEN, NULL, &hit);
    ck_assert_uint_eq(hit.cached_prompt_tokens, (PROMPT_LEN - 1) / BS * BS);
    ck_assert_int_gt(kh_worker_steps(e.dir, 1), w1_before); /* worker 1 read worker 0's pages */
    ck_assert_int_eq(kvd_cancel(c2, long_id), 0);
    do
        ck_assert_int_eq(kvd_next_event(c2, &ev, GEN_TIMEOUT_MS), 0);
    while (ev.type != KVD_EVENT_DONE);
    kvd_close(c2);
    /* Same output as computing everything (a different salt never hits). */
    run(e.c, a, PROMPT_LEN, "fresh", &ref);
    ck_assert_uint_eq(ref.cached_prompt_tokens, 0);
    same_output(&hit, &ref);
    env_stop(&e);
}
END_TEST

START_TEST(test_eviction_then_miss)
{
    struct env e;
    env_start(&e, NULL);
    static uint32_t a[PROMPT_LEN];
    make_prompt(e.c, a, PROMPT_LEN);
    static struct kh_result r1, r2, r3;
    run(e.c, a, PROMPT_LEN, NULL, &r1);
    run(e.c, a, PROMPT_LEN, NULL, &r2);
    ck_assert_uint_gt(r2.cached_prompt_tokens, 0);
    ck_assert_uint_eq(kh_wait_pages_used_zero(e.dir), 0);
    int64_t ev = kh_admin_evict(e.dir);
    ck_assert_int_ge(ev, (PROMPT_LEN - 1) / BS);
    struct broker_stats st;
    ck_assert_int_eq(kh_broker_stats(e.dir, &st), 0);
    ck_assert_uint_eq(st.pages_cached, 0);
    run(e.c, a, PROMPT_LEN, NULL, &r3);
    ck_assert_uint_eq(r3.cached_prompt_tokens, 0);
    same_output(&r1, &r3);
    same_output(&r2, &r3);
    env_stop(&e);
}
END_TEST

START_TEST(test_cache_salt_separates_tenants)
{
    struct env e;
    env_start(&e, NULL);
    static uint32_t a[PROMPT_LEN];
    make_prompt(e.c, a, PROMPT_LEN);
    static struct kh_result t1, t2, t1b, none;
    run(e.c, a, PROMPT_LEN, "tenant-1", &t1);
    ck_assert_uint_eq(t1.cached_prompt_tokens, 0);
    run(e.c, a, PROMPT_LEN, "tenant-2", &t2);
    ck_assert_uint_eq(t2.cached_prompt_tokens, 0);
    run(e.c, a, PROMPT_LEN, "tenant-1", &t1b);
    ck_assert_uint_eq(t1b.cached_prompt_tokens, (PROMPT_LEN - 1) / BS * BS);
    run(e.c, a, PROMPT_LEN, NULL, &none);
    ck_assert_uint_eq(none.cached_prompt_tokens, 0);
    same_output(&t1, &t2);
    same_output(&t1, &t1b);
    same_output(&t1, &none);
    env_stop(&e);
}
END_TEST

START_TEST(test_hit_after_kvd_restart_with_broker_kept)
{
    char dir[256], model[512];
    kh_tmpdir(dir);
    const char *src = getenv("KVD_SOURCE_DIR");
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf", src ? src : ".");
    const char *const bargs[] = {"--model", model, "--pool-bytes", "32M", "--backend",
                                 "host",    NULL};
    struct kh_kvd broker, k1, k2;
    ck_assert_int_eq(kh_start(&broker, "kvd-broker", dir, "broker.sock", bargs), 0);
    const char *const kargs[] = {"--broker", dir, NULL};
    ck_assert_int_eq(kh_start(&k1, "kvd", dir, "kvd.sock", kargs), 0);
    struct kvd_client *c;
    ck_assert_int_eq(kvd_connect(dir, 5000, &c), 0);
    static uint32_t a[PROMPT_LEN];
    make_prompt(c, a, PROMPT_LEN);
    static struct kh_result r1, r2;
    run(c, a, PROMPT_LEN, NULL, &r1);
    kvd_close(c);
    ck_assert_int_eq(kh_stop(&k1, SIGTERM), 0);
    ck_assert_uint_eq(kh_wait_pages_used_zero(dir), 0);
    ck_assert_int_eq(kh_start(&k2, "kvd", dir, "kvd.sock", kargs), 0);
    ck_assert_int_eq(kvd_connect(dir, 5000, &c), 0);
    run(c, a, PROMPT_LEN, NULL, &r2);
    ck_assert_uint_eq(r2.cached_prompt_tokens, (PROMPT_LEN - 1) / BS * BS);
    same_output(&r1, &r2);
    kvd_close(c);
    ck_assert_uint_eq(kh_wait_pages_used_zero(dir), 0);
    ck_assert_int_eq(kh_stop(&k2, SIGTERM), 0);
    /* A kvd with another kv dtype can never share these pages: its attach is refused
     * (pool descriptor mismatch, exit 78), and its block hashes differ anyway
     * (test_blockhash). */
    const char *const f16[] = {"--broker", dir, "--kv-dtype", "f16", NULL};
    struct kh_kvd k3;
    ck_assert_int_eq(kh_start(&k3, "kvd", dir, "kvd.sock", f16), -ECHILD);
    ck_assert_int_eq(k3.status, 78);
    ck_assert_int_eq(kh_stop(&broker, SIGTERM), 0);
    kh_rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("kvd_prefix");
    TCase *tc = tcase_create("prefix");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_on_off_full_and_partial_hits);
    tcase_add_test(tc, test_hit_while_original_runs);
    tcase_add_test(tc, test_eviction_then_miss);
    tcase_add_test(tc, test_cache_salt_separates_tenants);
    tcase_add_test(tc, test_hit_after_kvd_restart_with_broker_kept);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
