/* test_broker_core.c — the broker's request handling (broker/core.c) through the real
 * proto/broker_msg encoders and decoders, in process: attach/alloc/free/lookup/commit/
 * stats/dump/evict flows, lease expiry and detach, every bad-input case (malformed
 * msgpack, unknown type, unknown field, absurd sizes, wrong version, descriptor mismatch)
 * answered with a clear err that changes nothing, a randomized multi-lease run with
 * broker_check() after every request, and lease ids as capabilities (QA item 11: a
 * foreign process guessing a lease id gets ENOTFOUND and changes nothing). */
#include "broker/core.h"
#include "common/err.h"
#include "common/log.h"
#include "common/pool_attach.h"
#include "proto/broker_msg.h"
#include "tests/unit/hash_helper.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define T_PAGES 32
#define T_TIMEOUT_MS 1000

static struct pool_desc t_desc(void)
{
    struct pool_desc d;
    memset(&d, 0, sizeof(d));
    ck_assert_int_eq(kv_geom_init(&d.geom, 2, 2, 8, 4, KV_DTYPE_F32), 0);
    d.pool_id = 0x1122334455667788ull;
    d.epoch = 1;
    d.model_fp = 0xfeedull;
    d.layout_version = KV_LAYOUT_VERSION;
    d.backend = MEM_BACKEND_HOST;
    d.cuda_device = -1;
    ck_assert_int_eq(pool_desc_layout(&d, T_PAGES * d.geom.page_bytes, 4096, 1), 0);
    ck_assert_uint_eq(d.num_pages, T_PAGES);
    return d;
}

/* The last reply's bytes: a parsed wmsg points into them, so they live until the next
 * call (test code, one thread per forked test). */
static struct wbuf last_reply;

/* Sends w's message to b, parses the reply into m (caller releases m before the next
 * call), resets w. */
static int call(struct broker *b, struct wbuf *w, uint64_t now, struct wmsg *m)
{
    char err[WIRE_ERR_LEN] = "";
    wbuf_release(&last_reply);
    int rc = broker_handle(b, w->sb.data, w->sb.size, now, &last_reply);
    ck_assert_msg(wmsg_parse(m, last_reply.sb.data, last_reply.sb.size, err) == 0,
                  "reply unparsable: %s", err);
    ck_assert_int_eq(rc == 0, !wmsg_is(m, "err"));
    wbuf_release(w);
    ck_assert_int_eq(broker_check(b), 0);
    return rc;
}

static uint64_t do_attach(struct broker *b, uint64_t now)
{
    struct wbuf w;
    struct wmsg m;
    uint64_t lease;
    uint32_t to;
    struct pool_desc got, want = t_desc();
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    ck_assert_int_eq(broker_req_attach_encode(&w, "test", 1234, NULL), 0);
    ck_assert_int_eq(call(b, &w, now, &m), 0);
    ck_assert_msg(broker_rep_attach_decode(&m, &lease, &to, &got, err) == 0, "%s", err);
    ck_assert_uint_eq(to, T_TIMEOUT_MS);
    ck_assert_uint_eq(got.geom.page_bytes, want.geom.page_bytes);
    ck_assert_uint_eq(got.geom.kv_dtype, want.geom.kv_dtype);
    ck_assert_uint_eq(got.pool_id, want.pool_id);
    ck_assert_uint_eq(got.num_pages, T_PAGES);
    ck_assert_int_eq(pool_desc_check(&got, &want, err, sizeof(err)), 0);
    wmsg_release(&m);
    return lease;
}

/* alloc: 0 and pages, or the err code */
static int do_alloc(struct broker *b, uint64_t lease, uint64_t seq, uint32_t n, uint32_t *out)
{
    struct wbuf w;
    struct wmsg m;
    uint32_t *pages = NULL;
    size_t np = 0;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    ck_assert_int_eq(broker_req_alloc_encode(&w, lease, seq, n), 0);
    call(b, &w, 0, &m);
    int rc = broker_rep_alloc_decode(&m, &pages, &np, err);
    if (rc == 0) {
        ck_assert_uint_eq(np, n);
        if (out)
            memcpy(out, pages, n * sizeof(*out));
    }
    free(pages);
    wmsg_release(&m);
    return rc;
}

static int64_t do_ok(struct broker *b, struct wbuf *w, uint64_t now, int *code)
{
    struct wmsg m;
    uint64_t n = 0;
    char err[WIRE_ERR_LEN];
    call(b, w, now, &m);
    int rc = broker_rep_ok_decode(&m, &n, err);
    wmsg_release(&m);
    if (code)
        *code = rc;
    return rc ? -1 : (int64_t)n;
}

static struct broker_stats do_stats(struct broker *b)
{
    struct wbuf w;
    struct wmsg m;
    struct broker_stats s;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    broker_req_stats_encode(&w);
    call(b, &w, 0, &m);
    ck_assert_msg(broker_rep_stats_decode(&m, &s, err) == 0, "%s", err);
    wmsg_release(&m);
    ck_assert_uint_eq(s.pages_free, s.pages_total - s.pages_used - s.pages_cached);
    return s;
}

static void mk_hashes(struct broker_hash *h, uint32_t n, uint32_t salt0)
{
    uint32_t toks[4];
    for (uint32_t i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++)
            toks[k] = salt0 + i * 4 + (uint32_t)k;
        h[i] = test_hash_block(0xfeed, 4, i ? &h[i - 1] : NULL, toks);
    }
}

START_TEST(test_alloc_free_stats)
{
    struct broker b;
    struct pool_desc d = t_desc();
    struct wbuf w;
    uint32_t pages[T_PAGES];
    ck_assert_int_eq(broker_init(&b, &d, T_TIMEOUT_MS, 0), 0);
    uint64_t lease = do_attach(&b, 0);
    ck_assert_int_eq(do_alloc(&b, lease, 7, 10, pages), 0);
    ck_assert_int_eq(do_alloc(&b, lease, 8, 20, NULL), 0);
    ck_assert_int_eq(do_alloc(&b, lease, 9, 3, NULL), KVD_ENOPAGES); /* 2 left */
    struct broker_stats s = do_stats(&b);
    ck_assert_uint_eq(s.pages_used, 30);
    ck_assert_uint_eq(s.pages_free, 2);
    ck_assert_uint_eq(s.seqs, 2);
    ck_assert_uint_eq(s.leases, 1);
    ck_assert_str_eq(s.kv_dtype, "f32");
    ck_assert_str_eq(s.backend, "host");
    wbuf_init(&w);
    broker_req_free_encode(&w, lease, 7);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 10);
    broker_req_free_encode(&w, lease, 7);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 0); /* idempotent */
    broker_req_free_encode(&w, lease + 99, 7);
    int code;
    ck_assert_int_eq(do_ok(&b, &w, 0, &code), -1);
    ck_assert_int_eq(code, KVD_ENOTFOUND);
    s = do_stats(&b);
    ck_assert_uint_eq(s.pages_used, 20);
    ck_assert_uint_eq(s.pages_free, 12);
    ck_assert_uint_eq(s.errors, 2);
    broker_req_detach_encode(&w, lease);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 20);
    s = do_stats(&b);
    ck_assert_uint_eq(s.pages_free, T_PAGES);
    ck_assert_uint_eq(s.leases, 0);
    broker_release(&b);
}
END_TEST

START_TEST(test_prefix_flow)
{
    struct broker b;
    struct pool_desc d = t_desc();
    struct wbuf w;
    struct wmsg m;
    struct broker_hash h[6];
    uint32_t a[6], *pages = NULL;
    size_t np;
    char err[WIRE_ERR_LEN];
    mk_hashes(h, 6, 1000);
    ck_assert_int_eq(broker_init(&b, &d, T_TIMEOUT_MS, 0), 0);
    uint64_t l1 = do_attach(&b, 0), l2 = do_attach(&b, 0);
    /* seq 1 of lease 1: nothing cached yet */
    wbuf_init(&w);
    broker_req_lookup_encode(&w, l1, 1, h, 6);
    call(&b, &w, 0, &m);
    ck_assert_int_eq(broker_rep_lookup_decode(&m, &pages, &np, err), 0);
    ck_assert_uint_eq(np, 0);
    wmsg_release(&m);
    ck_assert_int_eq(do_alloc(&b, l1, 1, 5, a), 0);
    broker_req_commit_encode(&w, l1, 1, 0, h, 4); /* 4 full blocks, the 5th partial */
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 4);
    broker_req_commit_encode(&w, l1, 1, 0, h, 4);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 0); /* re-commit: nothing new */
    int code;
    broker_req_commit_encode(&w, l1, 1, 4, h, 2); /* block 5 does not exist */
    ck_assert_int_eq(do_ok(&b, &w, 0, &code), -1);
    ck_assert_int_eq(code, KVD_ENOTFOUND);
    broker_req_commit_encode(&w, l1, 1, 1, h + 3, 1); /* page of block 1 under another hash */
    ck_assert_int_eq(do_ok(&b, &w, 0, &code), -1);
    ck_assert_int_eq(code, KVD_EMSG);
    /* lease 2, while seq 1 still runs: shares the first 4 pages */
    broker_req_lookup_encode(&w, l2, 5, h, 6);
    call(&b, &w, 0, &m);
    ck_assert_int_eq(broker_rep_lookup_decode(&m, &pages, &np, err), 0);
    ck_assert_uint_eq(np, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(pages[i], a[i]);
    free(pages);
    pages = NULL;
    wmsg_release(&m);
    ck_assert_uint_eq(b.pool.pages[a[0]].refcnt, 2);
    /* lookup on a seq that holds pages is refused */
    broker_req_lookup_encode(&w, l2, 5, h, 6);
    call(&b, &w, 0, &m);
    ck_assert_int_eq(broker_rep_lookup_decode(&m, &pages, &np, err), KVD_EBUSY);
    wmsg_release(&m);
    /* both finish: the 4 indexed pages become cached, the partial one free */
    broker_req_free_encode(&w, l1, 1);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 5);
    broker_req_free_encode(&w, l2, 5);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 4);
    struct broker_stats s = do_stats(&b);
    ck_assert_uint_eq(s.pages_cached, 4);
    ck_assert_uint_eq(s.pages_used, 0);
    ck_assert_uint_eq(s.prefix_entries, 4);
    ck_assert_uint_eq(s.prefix_hit_blocks, 4);
    ck_assert_uint_eq(s.prefix_query_blocks, 12);
    ck_assert_uint_eq(s.prefix_hit_tokens, 16);
    /* a hit after the original sequence finished */
    broker_req_lookup_encode(&w, l2, 6, h, 3);
    call(&b, &w, 0, &m);
    ck_assert_int_eq(broker_rep_lookup_decode(&m, &pages, &np, err), 0);
    ck_assert_uint_eq(np, 3);
    free(pages);
    pages = NULL;
    wmsg_release(&m);
    /* dump shows owners and states */
    broker_req_dump_encode(&w, 0, BROKER_DUMP_MAX);
    call(&b, &w, 0, &m);
    struct broker_dump dump;
    ck_assert_msg(broker_rep_dump_decode(&m, &dump, err) == 0, "%s", err);
    ck_assert_uint_eq(dump.total, T_PAGES);
    ck_assert_uint_eq(dump.n, T_PAGES);
    ck_assert_uint_eq(dump.pages[a[0]].state, BROKER_PAGE_USED);
    ck_assert_uint_eq(dump.pages[a[0]].n_owners, 1);
    /* owners show the display number (#2: second attach), never the capability */
    ck_assert_uint_eq(dump.pages[a[0]].owners[0].lease, 2);
    ck_assert_uint_ne(dump.pages[a[0]].owners[0].lease, l2);
    ck_assert_uint_eq(dump.pages[a[0]].owners[0].seq, 6);
    ck_assert_uint_eq(dump.pages[a[3]].state, BROKER_PAGE_CACHED);
    ck_assert(dump.pages[a[3]].indexed);
    ck_assert_uint_eq(dump.pages[a[4]].state, BROKER_PAGE_FREE);
    broker_dump_release(&dump);
    wmsg_release(&m);
    /* evict_cached empties the cache but leaves pages in use alone */
    broker_req_evict_cached_encode(&w);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 1);
    s = do_stats(&b);
    ck_assert_uint_eq(s.pages_cached, 0);
    ck_assert_uint_eq(s.prefix_entries, 3);
    ck_assert_uint_eq(s.prefix_evictions, 1);
    /* a miss after eviction */
    broker_req_free_encode(&w, l2, 6);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 3);
    broker_req_evict_cached_encode(&w);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 3);
    broker_req_lookup_encode(&w, l2, 7, h, 3);
    call(&b, &w, 0, &m);
    ck_assert_int_eq(broker_rep_lookup_decode(&m, &pages, &np, err), 0);
    ck_assert_uint_eq(np, 0);
    wmsg_release(&m);
    broker_release(&b);
}
END_TEST

/* Cached pages are reused only when no free page remains, least recently used first. */
START_TEST(test_alloc_evicts_cached_lru)
{
    struct broker b;
    struct pool_desc d = t_desc();
    struct wbuf w;
    struct broker_hash h[4];
    uint32_t a[4], rest[T_PAGES];
    mk_hashes(h, 4, 1);
    ck_assert_int_eq(broker_init(&b, &d, T_TIMEOUT_MS, 0), 0);
    uint64_t l = do_attach(&b, 0);
    ck_assert_int_eq(do_alloc(&b, l, 1, 4, a), 0);
    wbuf_init(&w);
    broker_req_commit_encode(&w, l, 1, 0, h, 4);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 4);
    broker_req_free_encode(&w, l, 1);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 4);
    ck_assert_int_eq(do_alloc(&b, l, 2, T_PAGES - 4, rest), 0); /* the free ones */
    ck_assert_uint_eq(do_stats(&b).pages_cached, 4);
    ck_assert_int_eq(do_alloc(&b, l, 3, 1, rest), 0);
    ck_assert_uint_eq(rest[0], a[3]); /* tail block evicted first */
    struct broker_stats s = do_stats(&b);
    ck_assert_uint_eq(s.pages_cached, 3);
    ck_assert_uint_eq(s.prefix_evictions, 1);
    ck_assert_int_eq(do_alloc(&b, l, 3, 4, NULL), KVD_ENOPAGES);
    ck_assert_uint_eq(do_stats(&b).pages_cached, 3); /* nothing evicted by a refused alloc */
    broker_release(&b);
}
END_TEST

START_TEST(test_lease_expiry)
{
    struct broker b;
    struct pool_desc d = t_desc();
    struct wbuf w;
    ck_assert_int_eq(broker_init(&b, &d, T_TIMEOUT_MS, 0), 0);
    uint64_t l1 = do_attach(&b, 0), l2 = do_attach(&b, 0);
    ck_assert_int_eq(do_alloc(&b, l1, 1, 8, NULL), 0);
    ck_assert_int_eq(do_alloc(&b, l2, 1, 8, NULL), 0);
    wbuf_init(&w);
    broker_req_heartbeat_encode(&w, l2);
    ck_assert_int_eq(do_ok(&b, &w, 900, NULL), 0);
    ck_assert_uint_eq(broker_expire(&b, 999), 0);
    ck_assert_uint_eq(broker_expire(&b, 1000), 1); /* l1 silent 1000 ms */
    ck_assert_int_eq(broker_check(&b), 0);
    struct broker_stats s = do_stats(&b);
    ck_assert_uint_eq(s.pages_used, 8);
    ck_assert_uint_eq(s.leases, 1);
    ck_assert_uint_eq(s.leases_expired, 1);
    int code;
    broker_req_heartbeat_encode(&w, l1);
    ck_assert_int_eq(do_ok(&b, &w, 1000, &code), -1);
    ck_assert_int_eq(code, KVD_ENOTFOUND);
    ck_assert_uint_eq(broker_expire(&b, 1899), 0);
    ck_assert_uint_eq(broker_expire(&b, 1900), 1);
    ck_assert_uint_eq(do_stats(&b).pages_free, T_PAGES);
    broker_release(&b);
}
END_TEST

/* Sends raw bytes; asserts an err reply with code; returns nothing changed. */
static void expect_err_raw(struct broker *b, const void *buf, size_t len, int code,
                           const char *needle)
{
    struct wbuf r;
    struct wmsg m;
    const char *msg;
    size_t ml;
    char err[WIRE_ERR_LEN];
    struct broker_stats before, after;
    broker_stats_fill(b, 0, &before);
    wbuf_init(&r);
    ck_assert_int_eq(broker_handle(b, buf, len, 0, &r), code);
    ck_assert_int_eq(wmsg_parse(&m, r.sb.data, r.sb.size, err), 0); /* r outlives m */
    ck_assert(wmsg_is(&m, "err"));
    ck_assert_int_eq(wmsg_error(&m, &msg, &ml), code);
    char text[WIRE_ERR_LEN + 1];
    snprintf(text, sizeof(text), "%.*s", (int)ml, msg);
    ck_assert_msg(strstr(text, needle), "error '%s' lacks '%s'", text, needle);
    wmsg_release(&m);
    wbuf_release(&r);
    broker_stats_fill(b, 0, &after);
    ck_assert_uint_eq(after.pages_used, before.pages_used);
    ck_assert_uint_eq(after.pages_free, before.pages_free);
    ck_assert_uint_eq(after.leases, before.leases);
    ck_assert_uint_eq(after.errors, before.errors + 1);
    ck_assert_int_eq(broker_check(b), 0);
}

static void expect_err(struct broker *b, struct wbuf *w, int code, const char *needle)
{
    expect_err_raw(b, w->sb.data, w->sb.size, code, needle);
    wbuf_release(w);
}

START_TEST(test_bad_input)
{
    struct broker b;
    struct pool_desc d = t_desc();
    struct wbuf w;
    ck_assert_int_eq(broker_init(&b, &d, T_TIMEOUT_MS, 0), 0);
    uint64_t l = do_attach(&b, 0);
    ck_assert_int_eq(do_alloc(&b, l, 1, 2, NULL), 0);
    /* malformed msgpack, truncated message, empty message, non-map */
    expect_err_raw(&b, "\xc1\xc1\xc1", 3, KVD_EMSG, "malformed");
    wbuf_init(&w);
    broker_req_alloc_encode(&w, l, 1, 1);
    expect_err_raw(&b, w.sb.data, w.sb.size - 1, KVD_EMSG, "malformed");
    wbuf_release(&w);
    expect_err_raw(&b, "", 0, KVD_EMSG, "empty");
    expect_err_raw(&b, "\x93\x01\x02\x03", 4, KVD_EMSG, "not a map");
    /* wrong protocol version */
    msgpack_pack_map(&w.pk, 2);
    msgpack_pack_str(&w.pk, 1);
    msgpack_pack_str_body(&w.pk, "v", 1);
    msgpack_pack_uint32(&w.pk, KVD_PROTO_VERSION + 1);
    msgpack_pack_str(&w.pk, 1);
    msgpack_pack_str_body(&w.pk, "t", 1);
    msgpack_pack_str(&w.pk, 5);
    msgpack_pack_str_body(&w.pk, "stats", 5);
    expect_err(&b, &w, KVD_EPROTO, "version");
    /* unknown type, unknown field, wrong field type */
    wire_begin(&w, "format_disk", 0);
    expect_err(&b, &w, KVD_EMSG, "unknown message type");
    wire_begin(&w, "alloc", 4);
    wire_put_u64(&w, "lease", l);
    wire_put_u64(&w, "seq", 1);
    wire_put_u64(&w, "n", 1);
    wire_put_u64(&w, "priority", 9);
    expect_err(&b, &w, KVD_EMSG, "unknown field 'priority'");
    wire_begin(&w, "alloc", 3);
    wire_put_u64(&w, "lease", l);
    wire_put_str(&w, "seq", "one");
    wire_put_u64(&w, "n", 1);
    expect_err(&b, &w, KVD_EMSG, "'seq'");
    wire_begin(&w, "alloc", 2);
    wire_put_u64(&w, "lease", l);
    wire_put_u64(&w, "seq", 1);
    expect_err(&b, &w, KVD_EMSG, "missing field 'n'");
    /* absurd sizes */
    wire_begin(&w, "alloc", 3);
    wire_put_u64(&w, "lease", l);
    wire_put_u64(&w, "seq", 1);
    wire_put_u64(&w, "n", 1ull << 40);
    expect_err(&b, &w, KVD_EMSG, "limit");
    wire_begin(&w, "alloc", 3);
    wire_put_u64(&w, "lease", l);
    wire_put_u64(&w, "seq", 1);
    wire_put_u64(&w, "n", 0);
    expect_err(&b, &w, KVD_EMSG, "at least 1");
    wire_begin(&w, "lookup", 3);
    wire_put_u64(&w, "lease", l);
    wire_put_u64(&w, "seq", 2);
    wire_key(&w, "hashes");
    msgpack_pack_array(&w.pk, BROKER_LOOKUP_MAX + 1);
    for (uint32_t i = 0; i < BROKER_LOOKUP_MAX + 1; i++) {
        msgpack_pack_bin(&w.pk, 16);
        msgpack_pack_bin_body(&w.pk, "0123456789abcdef", 16);
    }
    expect_err(&b, &w, KVD_EMSG, "limit");
    wire_begin(&w, "lookup", 3);
    wire_put_u64(&w, "lease", l);
    wire_put_u64(&w, "seq", 2);
    wire_key(&w, "hashes");
    msgpack_pack_array(&w.pk, 1);
    msgpack_pack_bin(&w.pk, 8);
    msgpack_pack_bin_body(&w.pk, "01234567", 8);
    expect_err(&b, &w, KVD_EMSG, "16-byte");
    wire_begin(&w, "attach", 2);
    wire_put_str(&w, "client", "a-client-name-that-is-much-too-long-to-be-accepted-by-the-broker-ok");
    wire_put_u64(&w, "pid", 1);
    expect_err(&b, &w, KVD_EMSG, "'client'");
    /* containers that declare more elements than the message holds (msgpack-c would
     * allocate for the declared count before noticing) */
    expect_err_raw(&b, "\xdd\xff\xff\xff\xff", 5, KVD_EMSG, "elements declared");
    expect_err_raw(&b, "\x81\xa1v\xdf\x10\x00\x00\x00", 8, KVD_EMSG, "elements declared");
    expect_err_raw(&b, "\x81\xa1v\xc6\x7f\xff\xff\xff", 8, KVD_EMSG, "runs past");
    /* a huge message */
    size_t big = WIRE_MSG_MAX + 1;
    char *huge = calloc(1, big);
    ck_assert_ptr_nonnull(huge);
    expect_err_raw(&b, huge, big, KVD_EMSG, "limit");
    free(huge);
    /* descriptor mismatch at attach: no lease is created */
    struct pool_desc e;
    memset(&e, 0, sizeof(e));
    e.model_fp = 0xbad;
    broker_req_attach_encode(&w, "w", 1, &e);
    expect_err(&b, &w, KVD_EMISMATCH, "model_fp");
    memset(&e, 0, sizeof(e));
    ck_assert_int_eq(kv_geom_init(&e.geom, 2, 2, 8, 4, KV_DTYPE_F16), 0);
    broker_req_attach_encode(&w, "w", 1, &e);
    expect_err(&b, &w, KVD_EMISMATCH, "page_bytes");
    memset(&e, 0, sizeof(e));
    e.geom.block_size = 16;
    broker_req_attach_encode(&w, "w", 1, &e);
    expect_err(&b, &w, KVD_EMISMATCH, "block_size");
    /* a matching partial expect is fine */
    memset(&e, 0, sizeof(e));
    e.model_fp = 0xfeed;
    e.geom.n_layers = 2;
    struct wmsg m;
    broker_req_attach_encode(&w, "w", 1, &e);
    ck_assert_int_eq(call(&b, &w, 0, &m), 0);
    wmsg_release(&m);
    /* unknown lease */
    broker_req_alloc_encode(&w, 4242, 1, 1);
    expect_err(&b, &w, KVD_ENOTFOUND, "no such lease");
    /* still serving: the first lease's pages are intact and alloc works */
    ck_assert_int_eq(do_alloc(&b, l, 1, 2, NULL), 0);
    ck_assert_uint_eq(do_stats(&b).pages_used, 4);
    broker_release(&b);
}
END_TEST

START_TEST(test_lease_limit)
{
    struct broker b;
    struct pool_desc d = t_desc();
    struct wbuf w;
    ck_assert_int_eq(broker_init(&b, &d, T_TIMEOUT_MS, 0), 0);
    for (int i = 0; i < BROKER_LEASES_MAX; i++)
        do_attach(&b, 0);
    wbuf_init(&w);
    broker_req_attach_encode(&w, "one-too-many", 1, NULL);
    expect_err(&b, &w, KVD_EOVERLOAD, "limit");
    broker_release(&b);
}
END_TEST

/* QA item 11: a foreign process sends alloc/free/lookup/detach naming guessed lease ids
 * (small integers, and the neighbours of a real id): every one is ENOTFOUND, no page
 * changes hands, the real lease keeps working. */
START_TEST(test_guessed_lease_refused)
{
    struct broker b;
    struct pool_desc d = t_desc();
    struct wbuf w;
    struct broker_hash h[2];
    mk_hashes(h, 2, 7);
    ck_assert_int_eq(broker_init(&b, &d, T_TIMEOUT_MS, 0), 0);
    uint64_t kvd = do_attach(&b, 0);
    ck_assert_int_eq(do_alloc(&b, kvd, 1, 3, NULL), 0);
    wbuf_init(&w);
    uint64_t guesses[2 * BROKER_LEASES_MAX + 4];
    size_t ng = 0;
    for (uint64_t g = 0; g < 2 * BROKER_LEASES_MAX; g++)
        guesses[ng++] = g;
    guesses[ng++] = kvd + 1;
    guesses[ng++] = kvd - 1;
    guesses[ng++] = kvd ^ 1;
    guesses[ng++] = kvd ^ (1ull << 63);
    for (size_t i = 0; i < ng; i++) {
        if (guesses[i] == kvd) /* cannot happen for a random id; skip rather than fail */
            continue;
        broker_req_alloc_encode(&w, guesses[i], 424242, 5);
        expect_err(&b, &w, KVD_ENOTFOUND, "no such lease"); /* asserts nothing changed */
        broker_req_free_encode(&w, guesses[i], 1);
        expect_err(&b, &w, KVD_ENOTFOUND, "no such lease");
        broker_req_lookup_encode(&w, guesses[i], 9, h, 2);
        expect_err(&b, &w, KVD_ENOTFOUND, "no such lease");
        broker_req_detach_encode(&w, guesses[i]);
        expect_err(&b, &w, KVD_ENOTFOUND, "no such lease");
    }
    struct broker_stats s = do_stats(&b);
    ck_assert_uint_eq(s.pages_used, 3);
    ck_assert_uint_eq(s.seqs, 1);
    ck_assert_uint_eq(s.leases, 1);
    ck_assert_int_eq(do_alloc(&b, kvd, 2, 2, NULL), 0); /* the holder still can */
    broker_req_free_encode(&w, kvd, 1);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 3);
    broker_release(&b);
}
END_TEST

/* Attach ids are random capabilities: nonzero, distinct, not sequential, not small, and
 * a detached lease's id is refused afterwards (an id is never handed out twice here). */
START_TEST(test_lease_ids_random)
{
    struct broker b;
    struct pool_desc d = t_desc();
    struct wbuf w;
    uint64_t ids[3 * BROKER_LEASES_MAX];
    size_t n = 0;
    ck_assert_int_eq(broker_init(&b, &d, T_TIMEOUT_MS, 0), 0);
    wbuf_init(&w);
    for (int round = 0; round < 3; round++) {
        size_t first = n;
        for (int i = 0; i < BROKER_LEASES_MAX; i++)
            ids[n++] = do_attach(&b, 0);
        for (size_t i = first; i < n; i++) {
            broker_req_detach_encode(&w, ids[i]);
            ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 0);
        }
    }
    for (size_t i = 0; i < n; i++) {
        /* P(a random 64-bit id below 2^24) = 2^-40: a small id means a counter */
        ck_assert_uint_gt(ids[i], 1ull << 24);
        if (i > 0) {
            ck_assert_uint_ne(ids[i], ids[i - 1] + 1);
            ck_assert_uint_ne(ids[i - 1], ids[i] + 1);
        }
        for (size_t j = 0; j < i; j++)
            ck_assert_uint_ne(ids[i], ids[j]);
        broker_req_heartbeat_encode(&w, ids[i]); /* all detached: all refused */
        expect_err(&b, &w, KVD_ENOTFOUND, "no such lease");
    }
    broker_release(&b);
}
END_TEST

/* Randomized requests from several leases; broker_check after each (inside call()). */
START_TEST(test_randomized)
{
    struct broker b;
    struct pool_desc d = t_desc();
    struct wbuf w;
    struct wmsg m;
    struct broker_hash h[3][8];
    char err[WIRE_ERR_LEN];
    for (int f = 0; f < 3; f++)
        mk_hashes(h[f], 8, 100u * (uint32_t)f);
    ck_assert_int_eq(broker_init(&b, &d, T_TIMEOUT_MS, 0), 0);
    uint64_t leases[3];
    uint64_t now = 0;
    for (int i = 0; i < 3; i++)
        leases[i] = do_attach(&b, now);
    srand(4242);
    wbuf_init(&w);
    for (int step = 0; step < 4000; step++) {
        int li = rand() % 3;
        uint64_t seq = (uint64_t)(rand() % 6), l = leases[li];
        int f = rand() % 3;
        switch (rand() % 7) {
        case 0:
        case 1:
            broker_req_alloc_encode(&w, l, seq, 1 + (uint32_t)rand() % 6);
            break;
        case 2:
            broker_req_free_encode(&w, l, seq);
            break;
        case 3:
            broker_req_lookup_encode(&w, l, seq, h[f], 1 + (size_t)(rand() % 8));
            break;
        case 4:
            broker_req_commit_encode(&w, l, seq, (uint32_t)(rand() % 4), h[f],
                                     1 + (size_t)(rand() % 4));
            break;
        case 5:
            if (rand() % 20 == 1) { /* a foreign guess: refused, nothing changes */
                broker_req_alloc_encode(&w, (uint64_t)(rand() % 8), seq, 1);
                expect_err(&b, &w, KVD_ENOTFOUND, "no such lease");
                continue;
            }
            if (rand() % 20 == 0)
                broker_req_evict_cached_encode(&w);
            else
                broker_req_heartbeat_encode(&w, l);
            break;
        case 6:
            if (rand() % 30 == 0) { /* a lease dies: expire it, attach a fresh one */
                broker_req_detach_encode(&w, l);
                call(&b, &w, now, &m);
                wmsg_release(&m);
                leases[li] = do_attach(&b, now);
                continue;
            }
            broker_req_stats_encode(&w);
            break;
        }
        call(&b, &w, now, &m); /* asserts broker_check */
        if (wmsg_is(&m, "err")) {
            int code = wmsg_error(&m, NULL, NULL);
            ck_assert_msg(code == KVD_ENOPAGES || code == KVD_EBUSY || code == KVD_ENOTFOUND ||
                              code == KVD_EMSG,
                          "unexpected error %s", kvd_errname(code));
        }
        wmsg_release(&m);
        (void)err;
    }
    wbuf_release(&w);
    broker_release(&b);
}
END_TEST

/* A client that dies holding indexed pages: after its lease expires the pages stay
 * cached, and a new lease (a restarted daemon) hits them. */
START_TEST(test_cache_survives_lease_expiry)
{
    struct broker b;
    struct pool_desc d = t_desc();
    struct wbuf w;
    struct wmsg m;
    struct broker_hash h[3];
    uint32_t a[3], *pages = NULL;
    size_t np;
    char err[WIRE_ERR_LEN];
    mk_hashes(h, 3, 77);
    ck_assert_int_eq(broker_init(&b, &d, T_TIMEOUT_MS, 0), 0);
    uint64_t l1 = do_attach(&b, 0);
    ck_assert_int_eq(do_alloc(&b, l1, 1, 3, a), 0);
    wbuf_init(&w);
    broker_req_commit_encode(&w, l1, 1, 0, h, 3);
    ck_assert_int_eq(do_ok(&b, &w, 0, NULL), 3);
    ck_assert_uint_eq(broker_expire(&b, 5000), 1); /* the daemon died */
    struct broker_stats s = do_stats(&b);
    ck_assert_uint_eq(s.pages_cached, 3);
    ck_assert_uint_eq(s.pages_used, 0);
    uint64_t l2 = do_attach(&b, 5000);
    broker_req_lookup_encode(&w, l2, 1, h, 3);
    call(&b, &w, 5000, &m);
    ck_assert_int_eq(broker_rep_lookup_decode(&m, &pages, &np, err), 0);
    ck_assert_uint_eq(np, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(pages[i], a[i]);
    free(pages);
    wmsg_release(&m);
    broker_release(&b);
}
END_TEST

/* Mutated and truncated valid requests: every one gets a parseable reply, and the
 * broker's invariants hold after each (ASan runs this too). */
START_TEST(test_mutation_fuzz)
{
    struct broker b;
    struct pool_desc d = t_desc();
    struct broker_hash h[4];
    mk_hashes(h, 4, 5);
    ck_assert_int_eq(broker_init(&b, &d, T_TIMEOUT_MS, 0), 0);
    uint64_t l = do_attach(&b, 0);
    struct pool_desc e;
    memset(&e, 0, sizeof(e));
    e.model_fp = 0xfeed;
    struct wbuf seeds[9];
    for (int i = 0; i < 9; i++)
        wbuf_init(&seeds[i]);
    broker_req_alloc_encode(&seeds[0], l, 1, 3);
    broker_req_free_encode(&seeds[1], l, 1);
    broker_req_lookup_encode(&seeds[2], l, 2, h, 4);
    broker_req_commit_encode(&seeds[3], l, 1, 0, h, 2);
    broker_req_attach_encode(&seeds[4], "fuzz", 1, &e);
    broker_req_dump_encode(&seeds[5], 0, 8);
    broker_req_stats_encode(&seeds[6]);
    broker_req_heartbeat_encode(&seeds[7], l);
    broker_req_evict_cached_encode(&seeds[8]);
    srand(99);
    uint8_t buf[1024];
    struct wbuf r;
    wbuf_init(&r);
    int errs = 0;
    for (int it = 0; it < 20000; it++) {
        const struct wbuf *sd = &seeds[rand() % 9];
        size_t n = sd->sb.size;
        memcpy(buf, sd->sb.data, n);
        int flips = rand() % 4;
        for (int k = 0; k < flips; k++)
            buf[rand() % n] = (uint8_t)rand();
        if (rand() % 4 == 0)
            n = (size_t)rand() % n;
        msgpack_sbuffer_clear(&r.sb);
        int rc = broker_handle(&b, buf, n, 0, &r);
        struct wmsg m;
        char err[WIRE_ERR_LEN];
        if (wmsg_parse(&m, r.sb.data, r.sb.size, err))
            ck_abort_msg("unparsable reply: %s", err);
        if (wmsg_is(&m, "err") != (rc != 0))
            ck_abort_msg("reply type disagrees with the return code %d", rc);
        errs += rc != 0;
        wmsg_release(&m);
        if (it % 16 == 0 && broker_check(&b))
            ck_abort_msg("broker_check failed after iteration %d", it);
        if (b.leases.n > BROKER_LEASES_MAX / 2) /* keep attach from filling the table */
            for (uint32_t i = 0; i < BROKER_LEASES_MAX; i++)
                if (b.leases.slot[i] && b.leases.slot[i]->id != l)
                    broker_lease_end(&b, b.leases.slot[i]);
    }
    ck_assert_int_eq(broker_check(&b), 0);
    ck_assert_int_gt(errs, 1000); /* the mutations did reach the error paths */
    wbuf_release(&r);
    for (int i = 0; i < 9; i++)
        wbuf_release(&seeds[i]);
    broker_release(&b);
}
END_TEST

START_TEST(test_desc_roundtrip)
{
    struct pool_desc d = t_desc(), got;
    uint8_t buf[256];
    ck_assert_uint_eq(pool_desc_encode(&d, buf, sizeof(buf)), POOL_DESC_WIRE_BYTES);
    ck_assert_int_eq(pool_desc_decode(&got, buf, POOL_DESC_WIRE_BYTES), 0);
    ck_assert_uint_eq(got.geom.n_layers, d.geom.n_layers);
    ck_assert_uint_eq(got.geom.block_size, d.geom.block_size);
    ck_assert_uint_eq(got.geom.page_bytes, d.geom.page_bytes);
    ck_assert_uint_eq(got.pool_id, d.pool_id);
    ck_assert_uint_eq(got.pool_bytes, d.pool_bytes);
    ck_assert_int_eq(got.cuda_device, -1);
    ck_assert_int_eq(pool_desc_decode(&got, buf, POOL_DESC_WIRE_BYTES - 1), KVD_EMSG);
    char why[160];
    ck_assert_int_eq(pool_desc_check(&got, &d, why, sizeof(why)), 0);
    got.epoch = 2;
    ck_assert_int_eq(pool_desc_check(&got, &d, why, sizeof(why)), KVD_EMISMATCH);
    ck_assert_ptr_nonnull(strstr(why, "epoch is 2, expected 1"));
}
END_TEST

int main(void)
{
    wbuf_init(&last_reply);
    log_setup("test_broker_core", LOG_LEVEL_WARN);
    Suite *s = suite_create("broker_core");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_alloc_free_stats);
    tcase_add_test(tc, test_prefix_flow);
    tcase_add_test(tc, test_alloc_evicts_cached_lru);
    tcase_add_test(tc, test_lease_expiry);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_lease_limit);
    tcase_add_test(tc, test_guessed_lease_refused);
    tcase_add_test(tc, test_lease_ids_random);
    tcase_add_test(tc, test_randomized);
    tcase_add_test(tc, test_desc_roundtrip);
    tcase_add_test(tc, test_cache_survives_lease_expiry);
    tcase_add_test(tc, test_mutation_fuzz);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
