/* test_client_msg.c — proto/client_msg: every message round-trips; every malformed
 * input (missing field, wrong type, unknown key, value over its named limit, bad UTF-8,
 * truncated msgpack) is rejected with KVD_EMSG. */
#include "proto/client_msg.h"

#include "common/err.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Parses w's bytes into m; asserts the envelope is fine. */
static void parse_ok(struct wbuf *w, struct wmsg *m)
{
    char err[WIRE_ERR_LEN] = "";
    int rc = wmsg_parse(m, w->sb.data, w->sb.size, err);
    ck_assert_msg(rc == 0, "parse: %s", err);
}

/* Builds a generate message by hand: {v, t, id, <extra key, packed by fn>}. */
typedef void (*pack_fn)(msgpack_packer *pk);

static int decode_generate_with(const char *key, pack_fn fn, bool with_prompt)
{
    struct wbuf w;
    struct wmsg m;
    struct client_generate g;
    char err[WIRE_ERR_LEN] = "";
    wbuf_init(&w);
    wire_begin(&w, "generate", 1 + (with_prompt ? 1 : 0) + (key ? 1 : 0));
    wire_put_u64(&w, "id", 7);
    if (with_prompt)
        wire_put_str(&w, "prompt", "hello");
    if (key) {
        wire_key(&w, key);
        fn(&w.pk);
    }
    parse_ok(&w, &m);
    int rc = client_generate_decode(&m, &g, err);
    client_generate_release(&g);
    wmsg_release(&m);
    wbuf_release(&w);
    return rc;
}

static void pk_str_bad_utf8(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 2);
    msgpack_pack_str_body(pk, "\xc3\x28", 2);
}
static void pk_neg(msgpack_packer *pk) { msgpack_pack_int64(pk, -1); }
static void pk_big_u(msgpack_packer *pk) { msgpack_pack_uint64(pk, 1u << 31); }
static void pk_str(msgpack_packer *pk)
{
    msgpack_pack_str(pk, 1);
    msgpack_pack_str_body(pk, "x", 1);
}
static void pk_f_2(msgpack_packer *pk) { msgpack_pack_double(pk, 2.0); }
static void pk_f_nan(msgpack_packer *pk) { msgpack_pack_double(pk, NAN); }
static void pk_u21(msgpack_packer *pk) { msgpack_pack_uint32(pk, CLIENT_MAX_LOGPROBS + 1); }
static void pk_u0(msgpack_packer *pk) { msgpack_pack_uint32(pk, 0); }
static void pk_empty_arr(msgpack_packer *pk) { msgpack_pack_array(pk, 0); }
static void pk_too_many_stops(msgpack_packer *pk)
{
    msgpack_pack_array(pk, CLIENT_MAX_STOP + 1);
    for (int i = 0; i < CLIENT_MAX_STOP + 1; i++)
        pk_str(pk);
}
static void pk_long_stop(msgpack_packer *pk)
{
    char buf[CLIENT_STOP_MAX_BYTES + 1];
    memset(buf, 'a', sizeof(buf));
    msgpack_pack_array(pk, 1);
    msgpack_pack_str(pk, sizeof(buf));
    msgpack_pack_str_body(pk, buf, sizeof(buf));
}
static void pk_tokens_ok(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint32(pk, 1);
    msgpack_pack_uint32(pk, 2);
}
static void pk_tokens_bad_id(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint64(pk, (uint64_t)CLIENT_TOKEN_ID_MAX + 1);
}
static void pk_bool(msgpack_packer *pk) { msgpack_pack_true(pk); }

START_TEST(test_generate_roundtrip)
{
    struct client_generate g, d;
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN] = "";
    uint32_t toks[] = {1, 450, 7, 511};
    uint32_t stops[] = {2, 13};
    client_generate_init(&g);
    g.id = 0xfeedbeefcafeULL;
    g.tokens = toks;
    g.n_tokens = 4;
    g.max_tokens = 99;
    g.temperature = 0.7;
    g.top_k = 40;
    g.top_p = 0.9;
    g.min_p = 0.05;
    g.has_seed = true;
    g.seed = 1234567890123ULL;
    g.repetition_penalty = 1.1;
    g.frequency_penalty = -0.5;
    g.presence_penalty = 0.25;
    g.n_stop = 2;
    g.stop[0] = "\n\n";
    g.stop[1] = "The end";
    g.stop_token_ids = stops;
    g.n_stop_token_ids = 2;
    g.ignore_eos = true;
    g.logprobs = 20;
    g.prompt_logprobs = true;
    g.stream = false;
    g.timeout_ms = 1500;
    g.cache_salt = "tenant-a";
    g.cache_salt_len = 8;
    wbuf_init(&w);
    ck_assert_int_eq(client_generate_encode(&g, &w, err), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_generate_decode(&m, &d, err), 0);
    ck_assert_uint_eq(d.id, g.id);
    ck_assert_ptr_null(d.prompt);
    ck_assert_uint_eq(d.n_tokens, 4);
    ck_assert_mem_eq(d.tokens, toks, sizeof(toks));
    ck_assert_uint_eq(d.max_tokens, 99);
    ck_assert_double_eq(d.temperature, 0.7);
    ck_assert_uint_eq(d.top_k, 40);
    ck_assert_double_eq(d.top_p, 0.9);
    ck_assert_double_eq(d.min_p, 0.05);
    ck_assert(d.has_seed);
    ck_assert_uint_eq(d.seed, 1234567890123ULL);
    ck_assert_double_eq(d.repetition_penalty, 1.1);
    ck_assert_double_eq(d.frequency_penalty, -0.5);
    ck_assert_double_eq(d.presence_penalty, 0.25);
    ck_assert_uint_eq(d.n_stop, 2);
    ck_assert_str_eq(d.stop[0], "\n\n");
    ck_assert_str_eq(d.stop[1], "The end");
    ck_assert_uint_eq(d.n_stop_token_ids, 2);
    ck_assert_mem_eq(d.stop_token_ids, stops, sizeof(stops));
    ck_assert(d.ignore_eos);
    ck_assert_uint_eq(d.logprobs, 20);
    ck_assert(d.prompt_logprobs);
    ck_assert(!d.stream);
    ck_assert_uint_eq(d.timeout_ms, 1500);
    ck_assert_str_eq(d.cache_salt, "tenant-a");
    client_generate_release(&d);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_generate_defaults)
{
    struct client_generate d;
    char err[WIRE_ERR_LEN] = "";
    struct wbuf w;
    struct wmsg m;
    wbuf_init(&w);
    wire_begin(&w, "generate", 2);
    wire_put_u64(&w, "id", 3);
    wire_put_str(&w, "prompt", "Once upon a time");
    parse_ok(&w, &m);
    ck_assert_int_eq(client_generate_decode(&m, &d, err), 0);
    ck_assert_str_eq(d.prompt, "Once upon a time");
    ck_assert_uint_eq(d.prompt_len, 16);
    ck_assert_uint_eq(d.max_tokens, 16);
    ck_assert_double_eq(d.temperature, 1.0);
    ck_assert_double_eq(d.top_p, 1.0);
    ck_assert_double_eq(d.repetition_penalty, 1.0);
    ck_assert(!d.has_seed);
    ck_assert(d.stream);
    ck_assert(!d.ignore_eos);
    ck_assert_uint_eq(d.logprobs, 0);
    ck_assert_ptr_null(d.cache_salt);
    client_generate_release(&d);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_generate_rejects)
{
    /* prompt and tokens both, or neither */
    ck_assert_int_eq(decode_generate_with("tokens", pk_tokens_ok, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with(NULL, NULL, false), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("tokens", pk_tokens_ok, false), 0);
    ck_assert_int_eq(decode_generate_with("tokens", pk_empty_arr, false), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("tokens", pk_tokens_bad_id, false), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("prompt", pk_str_bad_utf8, false), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("unknown_field", pk_str, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("max_tokens", pk_u0, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("max_tokens", pk_big_u, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("max_tokens", pk_str, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("temperature", pk_neg, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("temperature", pk_f_nan, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("top_p", pk_f_2, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("top_p", pk_u0, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("min_p", pk_f_2, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("logprobs", pk_u21, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("stop", pk_too_many_stops, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("stop", pk_long_stop, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("stop", pk_str, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("stream", pk_str, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("stream", pk_bool, true), 0);
    ck_assert_int_eq(decode_generate_with("seed", pk_neg, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("cache_salt", pk_str_bad_utf8, true), KVD_EMSG);
    ck_assert_int_eq(decode_generate_with("repetition_penalty", pk_u0, true), KVD_EMSG);
}
END_TEST

START_TEST(test_generate_encode_validates)
{
    struct client_generate g;
    struct wbuf w;
    char err[WIRE_ERR_LEN] = "";
    wbuf_init(&w);
    client_generate_init(&g);
    ck_assert_int_eq(client_generate_encode(&g, &w, err), KVD_EMSG); /* no prompt */
    ck_assert_uint_eq(w.sb.size, 0);                                  /* w untouched */
    g.prompt = "hi";
    g.prompt_len = 2;
    g.logprobs = CLIENT_MAX_LOGPROBS + 1;
    ck_assert_int_eq(client_generate_encode(&g, &w, err), KVD_EMSG);
    ck_assert(strstr(err, "logprobs") != NULL);
    g.logprobs = 5;
    g.n_stop = 1;
    g.stop[0] = "";
    ck_assert_int_eq(client_generate_encode(&g, &w, err), KVD_EMSG);
    g.n_stop = 0;
    g.max_tokens = CLIENT_MAX_NEW_TOKENS + 1;
    ck_assert_int_eq(client_generate_encode(&g, &w, err), KVD_EMSG);
    g.max_tokens = 8;
    ck_assert_uint_eq(w.sb.size, 0);
    ck_assert_int_eq(client_generate_encode(&g, &w, err), 0);
    ck_assert_uint_gt(w.sb.size, 0);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_handshake_roundtrip)
{
    struct client_hello h = {.name = "kvctl"}, hd;
    struct client_welcome x = {.session = 42,
                               .addr = "ipc:///tmp/kvd-0/s-42.sock",
                               .max_model_len = 512,
                               .model = "stories260K",
                               .vocab_size = 512,
                               .block_size = 16},
                          xd;
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN] = "";
    wbuf_init(&w);
    ck_assert_int_eq(client_hello_encode(&h, &w, err), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_hello_decode(&m, &hd, err), 0);
    ck_assert_str_eq(hd.name, "kvctl");
    ck_assert_int_eq(client_welcome_decode(&m, &xd, err), KVD_EMSG); /* wrong type */
    wmsg_release(&m);
    wbuf_release(&w);

    ck_assert_int_eq(client_welcome_encode(&x, &w, err), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_welcome_decode(&m, &xd, err), 0);
    ck_assert_uint_eq(xd.session, 42);
    ck_assert_str_eq(xd.addr, x.addr);
    ck_assert_str_eq(xd.model, "stories260K");
    ck_assert_uint_eq(xd.max_model_len, 512);
    ck_assert_uint_eq(xd.vocab_size, 512);
    ck_assert_uint_eq(xd.block_size, 16);
    wmsg_release(&m);
    wbuf_release(&w);

    x.addr[0] = '\0';
    ck_assert_int_eq(client_welcome_encode(&x, &w, err), KVD_EMSG);
    /* welcome missing block_size */
    wire_begin(&w, "welcome", 5);
    wire_put_u64(&w, "session", 1);
    wire_put_str(&w, "addr", "ipc:///x");
    wire_put_u64(&w, "max_model_len", 512);
    wire_put_str(&w, "model", "m");
    wire_put_u64(&w, "vocab_size", 512);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_welcome_decode(&m, &xd, err), KVD_EMSG);
    ck_assert(strstr(err, "block_size") != NULL);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_simple_and_cancel)
{
    struct wbuf w;
    struct wmsg m;
    struct client_cancel c = {.id = 9}, cd;
    char err[WIRE_ERR_LEN] = "";
    wbuf_init(&w);
    ck_assert_int_eq(client_simple_encode("ping", &w), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_simple_decode(&m, "ping", err), 0);
    ck_assert_int_eq(client_simple_decode(&m, "pong", err), KVD_EMSG);
    wmsg_release(&m);
    wbuf_release(&w);
    ck_assert_int_eq(client_simple_encode("generate", &w), KVD_EMSG);
    /* ping with an extra field */
    wire_begin(&w, "ping", 1);
    wire_put_u64(&w, "x", 1);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_simple_decode(&m, "ping", err), KVD_EMSG);
    wmsg_release(&m);
    wbuf_release(&w);

    ck_assert_int_eq(client_cancel_encode(&c, &w), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_cancel_decode(&m, &cd, err), 0);
    ck_assert_uint_eq(cd.id, 9);
    wmsg_release(&m);
    wbuf_release(&w);
    wire_begin(&w, "cancel", 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_cancel_decode(&m, &cd, err), KVD_EMSG);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

static void fill_lp(struct client_logprob *e, uint32_t tok, uint32_t k)
{
    memset(e, 0, sizeof(*e));
    e->present = true;
    e->token = tok;
    e->logprob = -0.25 * tok;
    e->n_top = k;
    for (uint32_t i = 0; i < k; i++) {
        e->top[i].token = tok + i;
        e->top[i].logprob = -(double)i - 0.5;
    }
}

START_TEST(test_tokens_roundtrip)
{
    uint32_t toks[] = {5, 6, 7};
    struct client_logprob lps[3];
    struct client_tokens t = {.id = 11, .tokens = toks, .n_tokens = 3, .text = "a \xc3\xa9",
                              .text_len = 4, .logprobs = lps, .n_logprobs = 3},
                         d;
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN] = "";
    for (int i = 0; i < 3; i++)
        fill_lp(&lps[i], toks[i], (uint32_t)i * 10);
    lps[2].top[3].logprob = -INFINITY; /* -inf is a legal logprob */
    wbuf_init(&w);
    ck_assert_int_eq(client_tokens_encode(&t, &w, err), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_tokens_decode(&m, &d, err), 0);
    ck_assert_uint_eq(d.id, 11);
    ck_assert_uint_eq(d.n_tokens, 3);
    ck_assert_mem_eq(d.tokens, toks, sizeof(toks));
    ck_assert_str_eq(d.text, "a \xc3\xa9");
    ck_assert_uint_eq(d.n_logprobs, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert(d.logprobs[i].present);
        ck_assert_uint_eq(d.logprobs[i].token, toks[i]);
        ck_assert_double_eq(d.logprobs[i].logprob, lps[i].logprob);
        ck_assert_uint_eq(d.logprobs[i].n_top, lps[i].n_top);
        for (uint32_t k = 0; k < lps[i].n_top; k++) {
            ck_assert_uint_eq(d.logprobs[i].top[k].token, lps[i].top[k].token);
            ck_assert(d.logprobs[i].top[k].logprob == lps[i].top[k].logprob);
        }
    }
    client_tokens_release(&d);
    wmsg_release(&m);
    wbuf_release(&w);

    /* invalid: split UTF-8 char in text, logprob count mismatch, NaN logprob */
    t.text = "\xc3";
    t.text_len = 1;
    ck_assert_int_eq(client_tokens_encode(&t, &w, err), KVD_EMSG);
    t.text = "ok";
    t.text_len = 2;
    t.n_logprobs = 2;
    ck_assert_int_eq(client_tokens_encode(&t, &w, err), KVD_EMSG);
    t.n_logprobs = 3;
    lps[0].logprob = NAN;
    ck_assert_int_eq(client_tokens_encode(&t, &w, err), KVD_EMSG);
    t.n_tokens = 0;
    ck_assert_int_eq(client_tokens_encode(&t, &w, err), KVD_EMSG);
    ck_assert_uint_eq(w.sb.size, 0);

    /* hand-made: a top pair with three elements */
    wire_begin(&w, "tokens", 4);
    wire_put_u64(&w, "id", 1);
    wire_put_u32s(&w, "tokens", toks, 1);
    wire_put_str(&w, "text", "x");
    wire_key(&w, "logprobs");
    msgpack_pack_array(&w.pk, 1);
    msgpack_pack_array(&w.pk, 3);
    msgpack_pack_uint32(&w.pk, 5);
    msgpack_pack_double(&w.pk, -1.0);
    msgpack_pack_array(&w.pk, 1);
    msgpack_pack_array(&w.pk, 3);
    msgpack_pack_uint32(&w.pk, 5);
    msgpack_pack_double(&w.pk, -1.0);
    msgpack_pack_double(&w.pk, -1.0);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_tokens_decode(&m, &d, err), KVD_EMSG);
    client_tokens_release(&d);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_done_roundtrip)
{
    uint32_t toks[] = {100, 200};
    struct client_logprob lps[2], plps[3];
    struct client_done d, o;
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN] = "";
    client_done_init(&d);
    fill_lp(&lps[0], 100, 2);
    fill_lp(&lps[1], 200, 2);
    memset(&plps[0], 0, sizeof(plps[0]));
    fill_lp(&plps[1], 3, 1);
    fill_lp(&plps[2], 4, 1);
    d.id = 5;
    d.finish = CLIENT_FINISH_LENGTH;
    d.prompt_tokens = 3;
    d.cached_prompt_tokens = 0;
    d.completion_tokens = 2;
    d.tokens = toks;
    d.n_tokens = 2;
    d.text = "hi";
    d.text_len = 2;
    d.logprobs = lps;
    d.n_logprobs = 2;
    d.prompt_logprobs = plps;
    d.n_prompt_logprobs = 3;
    wbuf_init(&w);
    ck_assert_int_eq(client_done_encode(&d, &w, err), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_done_decode(&m, &o, err), 0);
    ck_assert_uint_eq(o.id, 5);
    ck_assert_int_eq(o.finish, CLIENT_FINISH_LENGTH);
    ck_assert_int_eq(o.code, 0);
    ck_assert_str_eq(o.msg, "");
    ck_assert_uint_eq(o.prompt_tokens, 3);
    ck_assert_uint_eq(o.completion_tokens, 2);
    ck_assert_mem_eq(o.tokens, toks, sizeof(toks));
    ck_assert_str_eq(o.text, "hi");
    ck_assert_uint_eq(o.n_prompt_logprobs, 3);
    ck_assert(!o.prompt_logprobs[0].present);
    ck_assert(o.prompt_logprobs[1].present);
    ck_assert_uint_eq(o.prompt_logprobs[2].token, 4);
    client_done_release(&o);
    wmsg_release(&m);
    wbuf_release(&w);

    /* an error done: code travels as its stable name */
    struct client_done e;
    client_done_init(&e);
    e.id = 6;
    e.finish = CLIENT_FINISH_ERROR;
    e.code = KVD_ETOOLONG;
    strcpy(e.msg, "prompt of 900 tokens exceeds max-model-len 512");
    e.prompt_tokens = 900;
    ck_assert_int_eq(client_done_encode(&e, &w, err), 0);
    ck_assert(memmem(w.sb.data, w.sb.size, "ETOOLONG", 8) != NULL);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_done_decode(&m, &o, err), 0);
    ck_assert_int_eq(o.finish, CLIENT_FINISH_ERROR);
    ck_assert_int_eq(o.code, KVD_ETOOLONG);
    ck_assert_str_eq(o.msg, e.msg);
    ck_assert_ptr_null(o.tokens);
    client_done_release(&o);
    wmsg_release(&m);
    wbuf_release(&w);

    /* invalid: error without code, stop with code, cached > prompt, first prompt lp set */
    e.code = 0;
    ck_assert_int_eq(client_done_encode(&e, &w, err), KVD_EMSG);
    e.finish = CLIENT_FINISH_STOP;
    e.code = KVD_EINTERNAL;
    ck_assert_int_eq(client_done_encode(&e, &w, err), KVD_EMSG);
    d.cached_prompt_tokens = 4;
    ck_assert_int_eq(client_done_encode(&d, &w, err), KVD_EMSG);
    d.cached_prompt_tokens = 0;
    fill_lp(&plps[0], 1, 0);
    ck_assert_int_eq(client_done_encode(&d, &w, err), KVD_EMSG);
    ck_assert_uint_eq(w.sb.size, 0);

    /* hand-made: unknown finish reason */
    wire_begin(&w, "done", 5);
    wire_put_u64(&w, "id", 1);
    wire_put_str(&w, "finish_reason", "exploded");
    wire_put_u64(&w, "prompt_tokens", 1);
    wire_put_u64(&w, "cached_prompt_tokens", 0);
    wire_put_u64(&w, "completion_tokens", 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(client_done_decode(&m, &o, err), KVD_EMSG);
    client_done_release(&o);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_truncated_and_garbage)
{
    struct client_generate g;
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN] = "";
    client_generate_init(&g);
    g.prompt = "Once upon a time";
    g.prompt_len = strlen(g.prompt);
    wbuf_init(&w);
    ck_assert_int_eq(client_generate_encode(&g, &w, err), 0);
    /* every strict prefix of a valid message fails to parse */
    for (size_t n = 0; n < w.sb.size; n++) {
        int rc = wmsg_parse(&m, w.sb.data, n, err);
        ck_assert_int_eq(rc, KVD_EMSG);
        wmsg_release(&m);
    }
    ck_assert_int_eq(wmsg_parse(&m, "\xc1\xc1\xc1", 3, err), KVD_EMSG);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_utf8)
{
    ck_assert(client_utf8_is_valid("", 0));
    ck_assert(client_utf8_is_valid("abc", 3));
    ck_assert(client_utf8_is_valid("\xe2\x82\xac", 3));      /* euro sign */
    ck_assert(client_utf8_is_valid("\xf0\x9f\x98\x80", 4));  /* emoji */
    ck_assert(!client_utf8_is_valid("\xe2\x82", 2));         /* truncated */
    ck_assert(!client_utf8_is_valid("\xc0\xaf", 2));         /* overlong */
    ck_assert(!client_utf8_is_valid("\xed\xa0\x80", 3));     /* surrogate */
    ck_assert(!client_utf8_is_valid("a\0b", 3));             /* NUL */
    ck_assert(!client_utf8_is_valid("\xff", 1));
    enum client_finish f;
    ck_assert_int_eq(client_finish_parse("cancelled", 9, &f), 0);
    ck_assert_int_eq(f, CLIENT_FINISH_CANCELLED);
    ck_assert_int_eq(client_finish_parse("cancel", 6, &f), KVD_EMSG);
    ck_assert_str_eq(client_finish_name(CLIENT_FINISH_ERROR), "error");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("client_msg");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_generate_roundtrip);
    tcase_add_test(tc, test_generate_defaults);
    tcase_add_test(tc, test_generate_rejects);
    tcase_add_test(tc, test_generate_encode_validates);
    tcase_add_test(tc, test_handshake_roundtrip);
    tcase_add_test(tc, test_simple_and_cancel);
    tcase_add_test(tc, test_tokens_roundtrip);
    tcase_add_test(tc, test_done_roundtrip);
    tcase_add_test(tc, test_truncated_and_garbage);
    tcase_add_test(tc, test_utf8);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
