/* test_sampler.c — worker/sampler: greedy, temperature, top-k/top-p/min-p truncation,
 * penalties, logprob definition, determinism of the (seed, position) draw. */
#include "worker/sampler.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_DRAWS 20000        /* draws for the frequency tests */
#define FREQ_TOL 0.02        /* |observed - expected| frequency bound at N_DRAWS (~4 sigma) */

static struct sampler smp;

static void setup(void) { ck_assert_int_eq(sampler_init(&smp, 6), 0); }
static void teardown(void) { sampler_release(&smp); }

/* logits = log(p) for the given probabilities (rest of the 6 get p = 0 -> -inf-ish) */
static void logits_of(float *l, const double *p, int n)
{
    for (int i = 0; i < 6; i++)
        l[i] = i < n && p[i] > 0 ? (float)log(p[i]) : -50.0f;
}

static void freq(const struct step_sampling *sp, const double *p, int n, double *out)
{
    float l[6];
    struct step_seq_result r;
    memset(out, 0, 6 * sizeof(double));
    for (uint64_t pos = 0; pos < N_DRAWS; pos++) {
        logits_of(l, p, n);
        sampler_sample(&smp, l, sp, NULL, 0, pos, 0, &r);
        ck_assert_uint_lt(r.token, 6);
        out[r.token] += 1.0 / N_DRAWS;
    }
}

START_TEST(test_greedy_and_ties)
{
    struct step_sampling sp;
    struct step_seq_result r;
    step_sampling_default(&sp);
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f};
    sampler_sample(&smp, l, &sp, NULL, 0, 0, 3, &r);
    ck_assert(r.has_token);
    ck_assert_uint_eq(r.token, 1); /* tie between 1 and 3: lowest id */
    /* logprob = log-softmax */
    double lse = log(exp(0.5) + 2 * exp(2.0) + exp(-1.0) + exp(1.0) + exp(0.0));
    ck_assert_float_eq_tol(r.logprob, 2.0 - lse, 1e-6);
    ck_assert_uint_eq(r.n_top, 3);
    ck_assert_uint_eq(r.top[0].token, 1);
    ck_assert_uint_eq(r.top[1].token, 3);
    ck_assert_uint_eq(r.top[2].token, 4);
    ck_assert_float_eq_tol(r.top[2].logprob, 1.0 - lse, 1e-6);
}
END_TEST

START_TEST(test_temperature_frequencies)
{
    static const double p[3] = {0.5, 0.3, 0.2};
    struct step_sampling sp;
    double f[6];
    step_sampling_default(&sp);
    sp.temperature = 1.0f;
    sp.seed = 42;
    freq(&sp, p, 3, f);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(fabs(f[i] - p[i]) < FREQ_TOL, "id %d: %.3f vs %.3f", i, f[i], p[i]);
    /* temperature 0.5 squares the odds: p ~ p^2 normalised */
    sp.temperature = 0.5f;
    freq(&sp, p, 3, f);
    double z = 0.25 + 0.09 + 0.04;
    ck_assert(fabs(f[0] - 0.25 / z) < FREQ_TOL);
    ck_assert(fabs(f[2] - 0.04 / z) < FREQ_TOL);
}
END_TEST

START_TEST(test_truncation)
{
    static const double p[4] = {0.5, 0.3, 0.15, 0.05};
    struct step_sampling sp;
    double f[6];
    step_sampling_default(&sp);
    sp.temperature = 1.0f;
    sp.seed = 7;
    sp.top_k = 2; /* keeps 0 and 1: 0.625 / 0.375 */
    freq(&sp, p, 4, f);
    ck_assert(f[2] == 0 && f[3] == 0);
    ck_assert(fabs(f[0] - 0.625) < FREQ_TOL);
    sp.top_k = 0;
    sp.top_p = 0.7f; /* 0.5 < 0.7 <= 0.8: keeps 0 and 1 */
    freq(&sp, p, 4, f);
    ck_assert(f[2] == 0 && f[3] == 0 && f[1] > 0.3);
    sp.top_p = 0.9f; /* keeps 0, 1, 2 */
    freq(&sp, p, 4, f);
    ck_assert(f[3] == 0 && f[2] > 0.1);
    sp.top_p = 1.0f;
    sp.min_p = 0.35f; /* threshold 0.175: keeps 0 and 1 */
    freq(&sp, p, 4, f);
    ck_assert(f[2] == 0 && f[3] == 0);
    ck_assert(fabs(f[0] - 0.625) < FREQ_TOL);
    sp.min_p = 0.0f;
    sp.top_k = 1; /* top_k 1 with temperature is greedy */
    freq(&sp, p, 4, f);
    ck_assert(fabs(f[0] - 1.0) < 1e-9 && f[1] == 0);
}
END_TEST

START_TEST(test_deterministic_draw)
{
    struct step_sampling sp;
    struct step_seq_result r1, r2;
    step_sampling_default(&sp);
    sp.temperature = 1.0f;
    sp.seed = 99;
    float l[6] = {0, 0, 0, 0, 0, 0}, l2[6] = {0, 0, 0, 0, 0, 0};
    int differ = 0;
    for (uint64_t pos = 0; pos < 64; pos++) {
        memset(l, 0, sizeof(l));
        memset(l2, 0, sizeof(l2));
        sampler_sample(&smp, l, &sp, NULL, 0, pos, 0, &r1);
        sampler_sample(&smp, l2, &sp, NULL, 0, pos, 0, &r2);
        ck_assert_uint_eq(r1.token, r2.token); /* re-run gives the same token */
        sp.seed = 100;
        memset(l2, 0, sizeof(l2));
        sampler_sample(&smp, l2, &sp, NULL, 0, pos, 0, &r2);
        differ += r1.token != r2.token;
        sp.seed = 99;
    }
    ck_assert_int_gt(differ, 20); /* another seed gives another stream */
    ck_assert(sampler_uniform(1, 2) == sampler_uniform(1, 2));
    ck_assert(sampler_uniform(1, 2) != sampler_uniform(1, 3));
    ck_assert(sampler_uniform(1, 2) >= 0.0 && sampler_uniform(1, 2) < 1.0);
}
END_TEST

START_TEST(test_penalties)
{
    struct step_sampling sp;
    step_sampling_default(&sp);
    float l[6] = {4.0f, -1.0f, 3.0f, 1.0f, 0.0f, 2.0f};
    const uint32_t hist[] = {0, 1, 2, 2, 2, 77 /* out of vocab: ignored */};
    sp.repetition_penalty = 2.0f;
    sampler_penalize(&smp, l, &sp, hist, 6);
    ck_assert_float_eq(l[0], 2.0f);
    ck_assert_float_eq(l[1], -2.0f);
    ck_assert_float_eq(l[2], 1.5f);
    ck_assert_float_eq(l[3], 1.0f);
    sp.repetition_penalty = 1.0f;
    sp.frequency_penalty = 0.5f;
    sp.presence_penalty = 0.25f;
    sampler_penalize(&smp, l, &sp, hist, 6);
    ck_assert_float_eq(l[0], 2.0f - 0.5f - 0.25f);
    ck_assert_float_eq(l[2], 1.5f - 1.5f - 0.25f);
    ck_assert_float_eq(l[5], 2.0f);
    /* counts were reset: a second call with no history changes nothing */
    float before = l[2];
    sampler_penalize(&smp, l, &sp, NULL, 0);
    ck_assert_float_eq(l[2], before);
    /* greedy after penalties: the penalised favourite loses */
    float g[6] = {4.0f, 0, 3.5f, 0, 0, 0};
    struct step_seq_result r;
    sp.frequency_penalty = 1.0f;
    sp.presence_penalty = 0;
    const uint32_t h0[] = {0};
    sampler_sample(&smp, g, &sp, h0, 1, 0, 0, &r);
    ck_assert_uint_eq(r.token, 2);
}
END_TEST

/* Reported logprobs are before temperature: the same whatever the temperature. */
START_TEST(test_logprob_before_temperature)
{
    struct step_sampling sp;
    struct step_seq_result a, b;
    step_sampling_default(&sp);
    float l1[6] = {1, 2, 3, 4, 5, 6}, l2[6] = {1, 2, 3, 4, 5, 6};
    sp.temperature = 0.0f;
    sampler_sample(&smp, l1, &sp, NULL, 0, 5, 2, &a);
    sp.temperature = 3.0f;
    sp.top_k = 1; /* forces the same token */
    sampler_sample(&smp, l2, &sp, NULL, 0, 5, 2, &b);
    ck_assert_uint_eq(a.token, 5);
    ck_assert_uint_eq(b.token, 5);
    ck_assert_float_eq(a.logprob, b.logprob);
    ck_assert_float_eq(a.top[1].logprob, b.top[1].logprob);
    double lse = sampler_logsumexp(l1, 6);
    ck_assert_float_eq_tol(a.logprob, 6.0 - lse, 1e-6);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_greedy_and_ties);
    tcase_add_test(tc, test_temperature_frequencies);
    tcase_add_test(tc, test_truncation);
    tcase_add_test(tc, test_deterministic_draw);
    tcase_add_test(tc, test_penalties);
    tcase_add_test(tc, test_logprob_before_temperature);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
