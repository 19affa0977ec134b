/* test_step_msg.c — proto/step_msg: round trips of hello/step/result/err and the
 * decoder's refusals (limits, types, unknown keys, truncation). */
#include "common/err.h"
#include "proto/step_msg.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* Encodes with enc, parses back into m. */
static void reparse(struct wbuf *w, struct wmsg *m)
{
    char err[WIRE_ERR_LEN] = "";
    ck_assert_msg(wmsg_parse(m, w->sb.data, w->sb.size, err) == 0, "%s", err);
}

START_TEST(test_hello_roundtrip)
{
    struct wbuf w;
    struct wmsg m;
    struct step_hello h = {3, 4242, 0x1234567890abcdefull, 512}, got;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    step_hello_encode(&w, &h);
    reparse(&w, &m);
    ck_assert_int_eq(step_hello_decode(&m, &got, err), 0);
    ck_assert_uint_eq(got.index, 3);
    ck_assert_uint_eq(got.pid, 4242);
    ck_assert_uint_eq(got.model_fp, 0x1234567890abcdefull);
    ck_assert_uint_eq(got.vocab, 512);
    /* a hello is not a step */
    struct step_msg s;
    ck_assert_int_eq(step_msg_decode(&m, &s, err), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(err, "hello"));
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_step_roundtrip)
{
    uint32_t t0[] = {1, 403, 407}, b0[] = {9, 2, 7}, t1[] = {55}, b1[] = {4}, pen[] = {5, 5, 6};
    struct step_seq q[2];
    memset(q, 0, sizeof(q));
    q[0] = (struct step_seq){.seq_id = 77, .n_tokens = 3, .tokens = t0, .pos0 = 0,
                             .n_blocks = 3, .blocks = b0, .prompt_logprobs = true,
                             .has_next_token = true, .next_token = 261};
    step_sampling_default(&q[0].sp);
    q[1] = (struct step_seq){.seq_id = 78, .n_tokens = 1, .tokens = t1, .pos0 = 12,
                             .n_blocks = 1, .blocks = b1, .sample = true, .logprobs = 5,
                             .n_penalty_tokens = 3, .penalty_tokens = pen};
    q[1].sp = (struct step_sampling){0.7f, 40, 0.9f, 0.05f, 1234, 1.1f, 0.5f, 0.25f};
    struct step_msg s = {99, 2, q}, got;
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    step_msg_encode(&w, &s);
    reparse(&w, &m);
    ck_assert_msg(step_msg_decode(&m, &got, err) == 0, "%s", err);
    ck_assert_uint_eq(got.step_id, 99);
    ck_assert_uint_eq(got.n_seqs, 2);
    ck_assert_uint_eq(got.seqs[0].seq_id, 77);
    ck_assert_uint_eq(got.seqs[0].n_tokens, 3);
    ck_assert_mem_eq(got.seqs[0].tokens, t0, sizeof(t0));
    ck_assert_mem_eq(got.seqs[0].blocks, b0, sizeof(b0));
    ck_assert(!got.seqs[0].sample);
    ck_assert(got.seqs[0].prompt_logprobs);
    ck_assert(got.seqs[0].has_next_token);
    ck_assert_uint_eq(got.seqs[0].next_token, 261);
    ck_assert_float_eq(got.seqs[0].sp.top_p, 1.0f);
    ck_assert_uint_eq(got.seqs[1].pos0, 12);
    ck_assert(got.seqs[1].sample);
    ck_assert_uint_eq(got.seqs[1].logprobs, 5);
    ck_assert_float_eq_tol(got.seqs[1].sp.temperature, 0.7f, 1e-7);
    ck_assert_uint_eq(got.seqs[1].sp.top_k, 40);
    ck_assert_float_eq_tol(got.seqs[1].sp.top_p, 0.9f, 1e-7);
    ck_assert_float_eq_tol(got.seqs[1].sp.min_p, 0.05f, 1e-7);
    ck_assert_uint_eq(got.seqs[1].sp.seed, 1234);
    ck_assert_float_eq_tol(got.seqs[1].sp.repetition_penalty, 1.1f, 1e-7);
    ck_assert_float_eq_tol(got.seqs[1].sp.frequency_penalty, 0.5f, 1e-7);
    ck_assert_float_eq_tol(got.seqs[1].sp.presence_penalty, 0.25f, 1e-7);
    ck_assert_uint_eq(got.seqs[1].n_penalty_tokens, 3);
    ck_assert_mem_eq(got.seqs[1].penalty_tokens, pen, sizeof(pen));
    step_msg_release(&got);
    ck_assert_ptr_null(got.seqs);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_result_and_err_roundtrip)
{
    struct step_lp prompt[2] = {{403, -1.5f}, {407, -0.25f}};
    struct step_seq_result rs[2];
    memset(rs, 0, sizeof(rs));
    rs[0] = (struct step_seq_result){.seq_id = 5, .n_prompt = 2, .prompt = prompt};
    rs[1] = (struct step_seq_result){.seq_id = 6, .has_token = true, .token = 432,
                                     .logprob = -0.125f, .n_top = 2};
    rs[1].top[0] = (struct step_lp){432, -0.125f};
    rs[1].top[1] = (struct step_lp){17, -3.0f};
    struct step_result r = {41, 2, rs}, got;
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    step_result_encode(&w, &r);
    reparse(&w, &m);
    ck_assert_msg(step_result_decode(&m, &got, err) == 0, "%s", err);
    ck_assert_uint_eq(got.step_id, 41);
    ck_assert(!got.seqs[0].has_token);
    ck_assert_uint_eq(got.seqs[0].n_prompt, 2);
    ck_assert_uint_eq(got.seqs[0].prompt[1].token, 407);
    ck_assert_float_eq(got.seqs[0].prompt[1].logprob, -0.25f);
    ck_assert(got.seqs[1].has_token);
    ck_assert_uint_eq(got.seqs[1].token, 432);
    ck_assert_float_eq(got.seqs[1].logprob, -0.125f);
    ck_assert_uint_eq(got.seqs[1].n_top, 2);
    ck_assert_uint_eq(got.seqs[1].top[1].token, 17);
    ck_assert_ptr_null(got.seqs[1].prompt);
    step_result_release(&got);
    wmsg_release(&m);
    wbuf_release(&w);

    wbuf_init(&w);
    step_err_encode(&w, 41, KVD_EMSG, "seq 0: block 3 is page 99, pool has 16 pages");
    reparse(&w, &m);
    const char *msg;
    size_t len;
    ck_assert(wmsg_is(&m, "err"));
    ck_assert_int_eq(wmsg_error(&m, &msg, &len), KVD_EMSG);
    ck_assert_uint_eq(step_err_step_id(&m), 41);
    ck_assert(len > 10 && memcmp(msg, "seq 0:", 6) == 0);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

/* Builds a one-seq step with a hand-packed seq map from (key, uint) pairs + arrays. */
static int decode_custom(void (*pack_seq)(msgpack_packer *), char err[WIRE_ERR_LEN])
{
    struct wbuf w;
    struct wmsg m;
    struct step_msg s;
    wbuf_init(&w);
    wire_begin(&w, "step", 2);
    wire_put_u64(&w, "step_id", 1);
    wire_key(&w, "seqs");
    msgpack_pack_array(&w.pk, 1);
    pack_seq(&w.pk);
    int rc = wmsg_parse(&m, w.sb.data, w.sb.size, err);
    if (rc == 0)
        rc = step_msg_decode(&m, &s, err);
    if (rc == 0)
        step_msg_release(&s);
    wmsg_release(&m);
    wbuf_release(&w);
    return rc;
}

static void key(msgpack_packer *pk, const char *k)
{
    msgpack_pack_str(pk, strlen(k));
    msgpack_pack_str_body(pk, k, strlen(k));
}

static void pack_base(msgpack_packer *pk, uint32_t extra, uint32_t n_tok, uint32_t pos0)
{
    msgpack_pack_map(pk, 5 + extra);
    key(pk, "seq_id");
    msgpack_pack_uint64(pk, 1);
    key(pk, "tokens");
    msgpack_pack_array(pk, n_tok);
    for (uint32_t i = 0; i < n_tok; i++)
        msgpack_pack_uint32(pk, 1);
    key(pk, "pos0");
    msgpack_pack_uint32(pk, pos0);
    key(pk, "blocks");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint32(pk, 0);
    key(pk, "sample");
    msgpack_pack_true(pk);
}

static void seq_ok(msgpack_packer *pk) { pack_base(pk, 0, 2, 0); }
static void seq_no_tokens(msgpack_packer *pk) { pack_base(pk, 0, 0, 0); }
static void seq_pos_too_big(msgpack_packer *pk) { pack_base(pk, 0, 1, STEP_MAX_POS); }
static void seq_too_many_tokens(msgpack_packer *pk) { pack_base(pk, 0, STEP_MAX_TOKENS + 1, 0); }
static void seq_unknown_key(msgpack_packer *pk)
{
    pack_base(pk, 1, 1, 0);
    key(pk, "bogus");
    msgpack_pack_uint32(pk, 1);
}
static void seq_bad_temperature(msgpack_packer *pk)
{
    pack_base(pk, 1, 1, 0);
    key(pk, "temperature");
    msgpack_pack_double(pk, -1.0);
}
static void seq_bad_logprobs(msgpack_packer *pk)
{
    pack_base(pk, 1, 1, 0);
    key(pk, "logprobs");
    msgpack_pack_uint32(pk, STEP_MAX_LOGPROBS + 1);
}
static void seq_token_as_string(msgpack_packer *pk)
{
    pack_base(pk, 1, 1, 0);
    key(pk, "top_k");
    msgpack_pack_str(pk, 1);
    msgpack_pack_str_body(pk, "x", 1);
}
static void seq_zero_rep_penalty(msgpack_packer *pk)
{
    pack_base(pk, 1, 1, 0);
    key(pk, "repetition_penalty");
    msgpack_pack_double(pk, 0.0);
}

START_TEST(test_decode_refuses)
{
    char err[WIRE_ERR_LEN];
    ck_assert_int_eq(decode_custom(seq_ok, err), 0);
    ck_assert_int_eq(decode_custom(seq_no_tokens, err), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(err, "tokens"));
    ck_assert_int_eq(decode_custom(seq_pos_too_big, err), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(err, "pos0"));
    ck_assert_int_eq(decode_custom(seq_too_many_tokens, err), KVD_EMSG);
    ck_assert_int_eq(decode_custom(seq_unknown_key, err), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(err, "bogus"));
    ck_assert_int_eq(decode_custom(seq_bad_temperature, err), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(err, "temperature"));
    ck_assert_int_eq(decode_custom(seq_bad_logprobs, err), KVD_EMSG);
    ck_assert_int_eq(decode_custom(seq_token_as_string, err), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(err, "top_k"));
    ck_assert_int_eq(decode_custom(seq_zero_rep_penalty, err), KVD_EMSG);
}
END_TEST

/* Every truncation of a valid step is refused, never crashes. */
START_TEST(test_truncated)
{
    uint32_t t[] = {1, 2, 3}, b[] = {0};
    struct step_seq q = {.seq_id = 1, .n_tokens = 3, .tokens = t, .n_blocks = 1, .blocks = b,
                         .sample = true};
    step_sampling_default(&q.sp);
    struct step_msg s = {1, 1, &q}, got;
    struct wbuf w;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    step_msg_encode(&w, &s);
    for (size_t len = 1; len < w.sb.size; len++) {
        struct wmsg m;
        int rc = wmsg_parse(&m, w.sb.data, len, err);
        if (rc == 0) {
            rc = step_msg_decode(&m, &got, err);
            if (rc == 0)
                step_msg_release(&got);
        }
        ck_assert_int_lt(rc, 0);
        wmsg_release(&m);
    }
    wbuf_release(&w);
}
END_TEST

/* Random byte mutations of valid step and result messages: every decode either fails
 * cleanly or yields a message within the limits (run under ASan by `make test`). */
#define MUTATIONS 20000 /* mutated messages per kind */
START_TEST(test_mutations)
{
    uint32_t t[] = {1, 2, 3, 4}, b[] = {0, 5}, pen[] = {7, 7};
    struct step_seq q = {.seq_id = 1, .n_tokens = 4, .tokens = t, .n_blocks = 2, .blocks = b,
                         .sample = true, .logprobs = 3, .prompt_logprobs = true,
                         .n_penalty_tokens = 2, .penalty_tokens = pen,
                         .has_next_token = true, .next_token = 9};
    step_sampling_default(&q.sp);
    q.sp.temperature = 0.5f;
    struct step_msg s = {1, 1, &q};
    struct step_lp pl[2] = {{2, -1.0f}, {3, -2.0f}};
    struct step_seq_result rs = {.seq_id = 1, .has_token = true, .token = 4, .logprob = -0.5f,
                                 .n_top = 1, .n_prompt = 2, .prompt = pl};
    rs.top[0] = (struct step_lp){4, -0.5f};
    struct step_result r = {1, 1, &rs};
    struct wbuf w[2];
    wbuf_init(&w[0]);
    wbuf_init(&w[1]);
    step_msg_encode(&w[0], &s);
    step_result_encode(&w[1], &r);
    uint64_t seed = 0x5eed;
    for (int kind = 0; kind < 2; kind++) {
        size_t len = w[kind].sb.size;
        uint8_t *buf = malloc(len);
        for (int i = 0; i < MUTATIONS; i++) {
            memcpy(buf, w[kind].sb.data, len);
            for (int k = 0; k < 1 + i % 4; k++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                buf[(seed >> 33) % len] = (uint8_t)(seed >> 17);
            }
            struct wmsg m;
            char err[WIRE_ERR_LEN];
            if (wmsg_parse(&m, buf, len, err) == 0) {
                if (kind == 0) {
                    struct step_msg got;
                    if (step_msg_decode(&m, &got, err) == 0) {
                        ck_assert_uint_le(got.n_seqs, STEP_MAX_SEQS);
                        ck_assert_uint_ge(got.seqs[0].n_tokens, 1);
                        ck_assert_uint_le(got.seqs[0].logprobs, STEP_MAX_LOGPROBS);
                        step_msg_release(&got);
                    }
                } else {
                    struct step_result got;
                    if (step_result_decode(&m, &got, err) == 0) {
                        ck_assert_uint_le(got.seqs[0].n_top, STEP_MAX_LOGPROBS);
                        step_result_release(&got);
                    }
                }
            }
            wmsg_release(&m);
        }
        free(buf);
    }
    wbuf_release(&w[0]);
    wbuf_release(&w[1]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("step_msg");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120); /* the mutation test under ASan */
    tcase_add_test(tc, test_hello_roundtrip);
    tcase_add_test(tc, test_step_roundtrip);
    tcase_add_test(tc, test_result_and_err_roundtrip);
    tcase_add_test(tc, test_decode_refuses);
    tcase_add_test(tc, test_truncated);
    tcase_add_test(tc, test_mutations);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
