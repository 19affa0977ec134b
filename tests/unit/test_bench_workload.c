/* test_bench_workload.c — kvd-bench workloads: percentiles against hand-computed values,
 * synthetic distributions within their stated bounds and reproducible, Poisson arrival
 * rate, the ideal hit ratio on hand-built prompts, both real trace formats from
 * ../shared/data (sharing preserved: equal hash ids give equal token blocks), and
 * malformed trace lines rejected with the line number. */
#include "tools/bench_workload.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct bench_model model = {.max_model_len = 512, .vocab_size = 512,
                                         .block_size = 16};

START_TEST(test_percentile)
{
    double v[] = {5, 1, 4, 2, 3};
    ck_assert_double_eq(bench_percentile(v, 5, 50), 3);
    ck_assert_double_eq(bench_percentile(v, 5, 0), 1);
    ck_assert_double_eq(bench_percentile(v, 5, 100), 5);
    ck_assert_double_eq_tol(bench_percentile(v, 5, 90), 4.6, 1e-12); /* numpy: 4.6 */
    ck_assert_double_eq_tol(bench_percentile(v, 5, 25), 2.0, 1e-12);
    double one[] = {7};
    ck_assert_double_eq(bench_percentile(one, 1, 99), 7);
    ck_assert(isnan(bench_percentile(NULL, 0, 50)));
    double w[100];
    for (int i = 0; i < 100; i++)
        w[i] = 100 - i; /* 1..100 reversed */
    ck_assert_double_eq_tol(bench_percentile(w, 100, 99), 99.01, 1e-9);
}
END_TEST

START_TEST(test_synthetic_bounds)
{
    struct bench_opts o = {.seed = 42, .n_requests = 2000};
    char err[BENCH_ERR_LEN];
    for (int k = 0; k < BENCH_KIND_COUNT_; k++) {
        struct bench_workload w;
        ck_assert_int_eq(bench_synthetic((enum bench_kind)k, &model, &o, &w, err), 0);
        ck_assert_uint_eq(w.n, 2000);
        double sum_p = 0;
        size_t bad = 0; /* counted, asserted once: Check's asserts cost a syscall each */
        for (size_t i = 0; i < w.n; i++) {
            const struct bench_req *r = &w.reqs[i];
            bad += r->n_tokens < 1 || r->max_tokens < 1 ||
                   r->n_tokens + r->max_tokens > model.max_model_len;
            for (uint32_t t = 0; t < r->n_tokens; t++)
                bad += r->tokens[t] < BENCH_FIRST_TOKEN_ID || r->tokens[t] >= model.vocab_size;
            sum_p += r->n_tokens;
            if (k == BENCH_LONG)
                bad += r->n_tokens < 256 || r->n_tokens > 384 || r->max_tokens < 51 ||
                       r->max_tokens > 102;
        }
        ck_assert_msg(bad == 0, "%s: %zu values out of bounds", bench_kind_name(k), bad);
        if (k == BENCH_CHAT) {
            /* lognormal(median 80, s 0.8) has mean 80 e^0.32 = 110; clipping trims a bit */
            double mean = sum_p / (double)w.n;
            ck_assert_msg(mean > 90 && mean < 120, "chat mean prompt %.1f", mean);
        }
        bench_workload_release(&w);
    }
    o.n_requests = 0;
    struct bench_workload w;
    ck_assert_int_eq(bench_synthetic(BENCH_CHAT, &model, &o, &w, err), -EINVAL);
}
END_TEST

START_TEST(test_synthetic_reproducible_and_shared)
{
    struct bench_opts o = {.seed = 7, .n_requests = 50, .prefix_len = 128};
    struct bench_workload a, b;
    char err[BENCH_ERR_LEN];
    ck_assert_int_eq(bench_synthetic(BENCH_SHARED_PREFIX, &model, &o, &a, err), 0);
    ck_assert_int_eq(bench_synthetic(BENCH_SHARED_PREFIX, &model, &o, &b, err), 0);
    int distinct_prefixes = 0;
    for (size_t i = 0; i < a.n; i++) {
        ck_assert_uint_eq(a.reqs[i].n_tokens, b.reqs[i].n_tokens);
        ck_assert_mem_eq(a.reqs[i].tokens, b.reqs[i].tokens, a.reqs[i].n_tokens * 4);
        bool new_prefix = true;
        for (size_t j = 0; j < i; j++)
            if (memcmp(a.reqs[i].tokens, a.reqs[j].tokens, 128 * 4) == 0)
                new_prefix = false;
        distinct_prefixes += new_prefix;
    }
    ck_assert_int_le(distinct_prefixes, BENCH_SHARED_PREFIXES);
    ck_assert_int_ge(distinct_prefixes, 2);
    /* with 50 requests over 4 prefixes of 8 full blocks, almost all prefix blocks hit */
    double ideal = bench_ideal_hit_ratio(&a, 16);
    ck_assert_msg(ideal > 0.55 && ideal < 0.8, "ideal %.3f", ideal);
    bench_workload_release(&a);
    bench_workload_release(&b);
}
END_TEST

START_TEST(test_ideal_hit_ratio_exact)
{
    uint32_t p1[48], p2[48], p3[32];
    for (int i = 0; i < 48; i++)
        p1[i] = p2[i] = 10 + (uint32_t)i;
    p2[40] = 999; /* differs in block 2 */
    memcpy(p3, p1, sizeof(p3)); /* exactly blocks 0,1: last token must be computed */
    struct bench_req reqs[3] = {{.tokens = p1, .n_tokens = 48, .max_tokens = 1},
                                {.tokens = p2, .n_tokens = 48, .max_tokens = 1},
                                {.tokens = p3, .n_tokens = 32, .max_tokens = 1}};
    struct bench_workload w = {.reqs = reqs, .n = 3};
    /* req1: 0 hits; req2: blocks 0,1 hit = 32; req3: only block 0 may hit = 16 */
    ck_assert_double_eq_tol(bench_ideal_hit_ratio(&w, 16), 48.0 / 128.0, 1e-12);
    /* a changed first block breaks the whole chain */
    p2[0] = 998;
    ck_assert_double_eq_tol(bench_ideal_hit_ratio(&w, 16), 16.0 / 128.0, 1e-12);
}
END_TEST

START_TEST(test_poisson)
{
    struct bench_opts o = {.seed = 3, .n_requests = 20000};
    struct bench_workload w;
    char err[BENCH_ERR_LEN];
    ck_assert_int_eq(bench_synthetic(BENCH_CHAT, &model, &o, &w, err), 0);
    bench_poisson_arrivals(&w, 50.0, 9);
    ck_assert(w.timed);
    ck_assert_double_eq(w.reqs[0].arrival_s, 0);
    size_t unordered = 0;
    for (size_t i = 1; i < w.n; i++)
        unordered += w.reqs[i].arrival_s < w.reqs[i - 1].arrival_s;
    ck_assert_uint_eq(unordered, 0);
    double rate = (double)(w.n - 1) / w.reqs[w.n - 1].arrival_s;
    ck_assert_msg(fabs(rate - 50.0) < 2.0, "rate %.2f", rate); /* 20k samples: ~0.7 % sd */
    bench_workload_release(&w);
}
END_TEST

static char *shared_path(const char *rel)
{
    static char buf[1024];
    const char *d = getenv("KVD_SHARED_DIR");
    snprintf(buf, sizeof(buf), "%s/%s", d ? d : "../shared", rel);
    return buf;
}

START_TEST(test_trace_mooncake)
{
    struct bench_opts o = {.seed = 1, .n_requests = 0};
    struct bench_workload w;
    char err[BENCH_ERR_LEN] = "";
    const char *path = shared_path("data/traces/mooncake_synthetic_trace.jsonl");
    int rc = bench_trace_load(path, &model, &o, &w, err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_uint_eq(w.n, 3993);
    ck_assert(w.timed);
    ck_assert_double_eq(w.scale, 64);
    /* README: an unbounded cache would hit 64.0 % of blocks; in tokens it is 65.1 % */
    ck_assert_msg(fabs(w.trace_ideal_hit_ratio - 0.6512) < 0.001, "ideal %.4f",
                  w.trace_ideal_hit_ratio);
    /* first two records: 40160 / 64 = 628 tokens -> truncated to fit 512 - output */
    ck_assert_uint_le(w.reqs[0].n_tokens + w.reqs[0].max_tokens, 512);
    ck_assert_uint_gt(w.n_truncated, 0);
    ck_assert_double_eq(w.reqs[w.n - 1].arrival_s, 1022.025);
    /* sharing survives: the scaled workload still has a large ideal hit ratio */
    double ideal = bench_ideal_hit_ratio(&w, 16);
    ck_assert_msg(ideal > 0.4, "scaled ideal %.3f", ideal);
    bench_workload_release(&w);

    /* first 10 only, time compressed 10x */
    o.n_requests = 10;
    o.time_scale = 10;
    ck_assert_int_eq(bench_trace_load(path, &model, &o, &w, err), 0);
    ck_assert_uint_eq(w.n, 10);
    bench_workload_release(&w);
}
END_TEST

START_TEST(test_trace_azure)
{
    struct bench_opts o = {.seed = 1, .n_requests = 0};
    struct bench_workload w;
    char err[BENCH_ERR_LEN] = "";
    int rc = bench_trace_load(shared_path("data/traces/AzureLLMInferenceTrace_code.csv"), &model,
                              &o, &w, err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_uint_eq(w.n, 8819);
    ck_assert_double_eq(w.trace_ideal_hit_ratio, -1);
    /* first line 4808,10 -> 4808/16 = 300.5 -> 300 (rounded half to even-ish) .. 301 */
    ck_assert_uint_ge(w.reqs[0].n_tokens, 300);
    ck_assert_uint_le(w.reqs[0].n_tokens, 301);
    ck_assert_uint_ge(w.reqs[0].max_tokens, 2);
    ck_assert_uint_le(w.reqs[0].max_tokens, 3);
    /* second request 0.052 s after the first */
    ck_assert_double_eq_tol(w.reqs[1].arrival_s, 0.052, 1e-6);
    /* no prefix information: essentially nothing to hit */
    ck_assert(bench_ideal_hit_ratio(&w, 16) < 0.01);
    bench_workload_release(&w);
    double t;
    ck_assert_int_eq(bench_parse_azure_time("2023-11-16 18:17:03.9799600", &t), 0);
    ck_assert_double_eq_tol(t, 1700158623.97996, 1e-4);
    ck_assert_int_eq(bench_parse_azure_time("2023-13-16 18:17:03", &t), -EINVAL);
}
END_TEST

static int load_text(const char *text, struct bench_workload *w, char *err)
{
    char path[] = "/tmp/kvd-bench-test-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (int)strlen(text));
    close(fd);
    struct bench_opts o = {.seed = 1};
    int rc = bench_trace_load(path, &model, &o, w, err);
    unlink(path);
    return rc;
}

START_TEST(test_trace_malformed)
{
    struct bench_workload w;
    char err[BENCH_ERR_LEN];
    ck_assert_int_eq(load_text("hello\n", &w, err), -EINVAL);
    ck_assert(strstr(err, "unknown trace format") != NULL);
    ck_assert_int_eq(load_text("TIMESTAMP,ContextTokens,GeneratedTokens\n", &w, err), -EINVAL);
    ck_assert_int_eq(load_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                               "2023-11-16 18:17:03.9,12,x\n",
                               &w, err),
                     -EINVAL);
    ck_assert(strstr(err, ":2:") != NULL);
    ck_assert_int_eq(load_text("{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 3, "
                               "\"hash_ids\": [1]}\n",
                               &w, err),
                     -EINVAL); /* needs 2 hash ids */
    ck_assert(strstr(err, "hash_ids") != NULL);
    ck_assert_int_eq(load_text("{\"timestamp\": 0, \"input_length\": 10, \"hash_ids\": [1]}\n",
                               &w, err),
                     -EINVAL);
    ck_assert_int_eq(load_text("{\"timestamp\": -5, \"input_length\": 10, \"output_length\": 1, "
                               "\"hash_ids\": [1]}\n",
                               &w, err),
                     -EINVAL);
    ck_assert_int_eq(load_text("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, "
                               "\"hash_ids\": [1, 2\n",
                               &w, err),
                     -EINVAL);
    /* a valid two-line trace: equal hash ids give equal token blocks */
    ck_assert_int_eq(load_text("{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 8, "
                               "\"hash_ids\": [5, 6]}\n"
                               "{\"timestamp\": 500, \"input_length\": 700, \"output_length\": 8, "
                               "\"hash_ids\": [5, 9]}\n",
                               &w, err),
                     0);
    ck_assert_uint_eq(w.n, 2);
    ck_assert_uint_eq(w.reqs[0].n_tokens, 16);  /* 1024 / 64 */
    ck_assert_uint_eq(w.reqs[1].n_tokens, 11);  /* 700 / 64 = 10.9 */
    ck_assert_mem_eq(w.reqs[0].tokens, w.reqs[1].tokens, 8 * 4); /* block of id 5 */
    ck_assert(memcmp(w.reqs[0].tokens + 8, w.reqs[1].tokens + 8, 3 * 4) != 0);
    ck_assert_double_eq(w.reqs[1].arrival_s, 0.5);
    ck_assert_double_eq_tol(w.trace_ideal_hit_ratio, 512.0 / 1724.0, 1e-12);
    bench_workload_release(&w);
    ck_assert_int_eq(bench_trace_load("/nonexistent/trace", &model,
                                      &(struct bench_opts){.seed = 1}, &w, err),
                     -ENOENT);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bench_workload");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_percentile);
    tcase_add_test(tc, test_synthetic_bounds);
    tcase_add_test(tc, test_synthetic_reproducible_and_shared);
    tcase_add_test(tc, test_ideal_hit_ratio_exact);
    tcase_add_test(tc, test_poisson);
    tcase_add_test(tc, test_trace_mooncake);
    tcase_add_test(tc, test_trace_azure);
    tcase_add_test(tc, test_trace_malformed);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
