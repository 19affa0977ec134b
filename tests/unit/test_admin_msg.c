/* test_admin_msg.c — proto/admin_msg: requests and every reply round-trip; replies that
 * break the accounting invariants (used + cached + free != total, hits > queries, ...),
 * unknown states, unknown keys and over-limit lists are rejected with KVD_EMSG. */
#include "proto/admin_msg.h"

#include "common/err.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static void parse_ok(struct wbuf *w, struct wmsg *m)
{
    char err[WIRE_ERR_LEN] = "";
    int rc = wmsg_parse(m, w->sb.data, w->sb.size, err);
    ck_assert_msg(rc == 0, "parse: %s", err);
}

START_TEST(test_requests)
{
    char err[WIRE_ERR_LEN] = "";
    for (int r = 0; r < ADMIN_REQ_COUNT_; r++) {
        struct wbuf w;
        struct wmsg m;
        enum admin_req got;
        wbuf_init(&w);
        ck_assert_int_eq(admin_request_encode((enum admin_req)r, &w), 0);
        parse_ok(&w, &m);
        ck_assert_int_eq(admin_request_decode(&m, &got, err), 0);
        ck_assert_int_eq(got, r);
        ck_assert_str_eq(m.type, admin_req_name((enum admin_req)r));
        wmsg_release(&m);
        wbuf_release(&w);
    }
    struct wbuf w;
    struct wmsg m;
    enum admin_req got;
    wbuf_init(&w);
    ck_assert_int_eq(admin_request_encode(ADMIN_REQ_COUNT_, &w), KVD_EMSG);
    wire_begin(&w, "reboot", 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_request_decode(&m, &got, err), KVD_EMSG);
    ck_assert(strstr(err, "reboot") != NULL);
    wmsg_release(&m);
    wbuf_release(&w);
    wire_begin(&w, "evict", 1);
    wire_put_bool(&w, "cached", false);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_request_decode(&m, &got, err), KVD_EMSG);
    wmsg_release(&m);
    wbuf_release(&w);
    wire_begin(&w, "evict", 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_request_decode(&m, &got, err), KVD_EMSG);
    wmsg_release(&m);
    wbuf_release(&w);
    wire_begin(&w, "pool", 1);
    wire_put_u64(&w, "verbose", 1);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_request_decode(&m, &got, err), KVD_EMSG);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

static struct admin_pool sample_pool(void)
{
    struct admin_pool p = {.pages_total = 100,
                           .pages_free = 60,
                           .pages_used = 30,
                           .pages_cached = 10,
                           .pages_shared = 4,
                           .page_bytes = 10240,
                           .pool_bytes = 1024000,
                           .block_size = 16,
                           .kv_dtype = "f32",
                           .alloc = "paged",
                           .prefix_cache = true,
                           .max_model_len = 512,
                           .tokens_stored = 470,
                           .waste_ratio = 0.0208,
                           .prefix_query_tokens = 1000,
                           .prefix_hit_tokens = 640,
                           .preemptions = 3,
                           .requests_running = 5,
                           .requests_queued = 2,
                           .requests_finished = 77,
                           .requests_failed = 1,
                           .prompt_tokens_total = 5000,
                           .prefill_tokens_total = 4400,
                           .output_tokens_total = 9000,
                           .steps_total = 1234,
                           .uptime_ms = 99000};
    return p;
}

START_TEST(test_pool)
{
    struct admin_pool p = sample_pool(), d;
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN] = "";
    wbuf_init(&w);
    ck_assert_int_eq(admin_pool_encode(&p, &w), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_pool_decode(&m, &d, err), 0);
    ck_assert_mem_eq(&d, &p, offsetof(struct admin_pool, kv_dtype));
    ck_assert_str_eq(d.kv_dtype, "f32");
    ck_assert_str_eq(d.alloc, "paged");
    ck_assert(d.prefix_cache);
    ck_assert_double_eq(d.waste_ratio, 0.0208);
    ck_assert_uint_eq(d.prefix_hit_tokens, 640);
    ck_assert_uint_eq(d.uptime_ms, 99000);
    ck_assert_uint_eq(d.requests_queued, 2);
    wmsg_release(&m);
    wbuf_release(&w);

    p.pages_free = 61; /* breaks the three-way accounting */
    ck_assert_int_eq(admin_pool_encode(&p, &w), KVD_EMSG);
    p = sample_pool();
    p.waste_ratio = 1.5;
    ck_assert_int_eq(admin_pool_encode(&p, &w), KVD_EMSG);
    p = sample_pool();
    p.prefix_hit_tokens = 1001;
    ck_assert_int_eq(admin_pool_encode(&p, &w), KVD_EMSG);
    p = sample_pool();
    strcpy(p.kv_dtype, "f 32");
    ck_assert_int_eq(admin_pool_encode(&p, &w), KVD_EMSG);
    ck_assert_uint_eq(w.sb.size, 0);

    /* a reply missing a field names it */
    wire_begin(&w, "pool", 1);
    wire_put_u64(&w, "pages_total", 1);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_pool_decode(&m, &d, err), KVD_EMSG);
    ck_assert(strstr(err, "missing field") != NULL);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_seqs)
{
    struct admin_seq seqs[3] = {
        {.id = 1, .state = ADMIN_SEQ_DECODE, .tokens = 40, .pages = 3, .shared_pages = 2,
         .worker = 0},
        {.id = 2, .state = ADMIN_SEQ_QUEUED, .tokens = 10, .pages = 0, .shared_pages = 0,
         .worker = -1},
        {.id = 3, .state = ADMIN_SEQ_PREEMPTED, .tokens = 99, .pages = 0, .shared_pages = 0,
         .worker = -1},
    };
    struct admin_seqs s = {.seqs = seqs, .n = 3, .n_total = 3}, d;
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN] = "";
    wbuf_init(&w);
    ck_assert_int_eq(admin_seqs_encode(&s, &w), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_seqs_decode(&m, &d, err), 0);
    ck_assert_uint_eq(d.n, 3);
    ck_assert_uint_eq(d.n_total, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(d.seqs[i].id, seqs[i].id);
        ck_assert_int_eq(d.seqs[i].state, seqs[i].state);
        ck_assert_uint_eq(d.seqs[i].tokens, seqs[i].tokens);
        ck_assert_uint_eq(d.seqs[i].pages, seqs[i].pages);
        ck_assert_uint_eq(d.seqs[i].shared_pages, seqs[i].shared_pages);
        ck_assert_int_eq(d.seqs[i].worker, seqs[i].worker);
    }
    admin_seqs_release(&d);
    wmsg_release(&m);
    wbuf_release(&w);

    s.n_total = 2;
    ck_assert_int_eq(admin_seqs_encode(&s, &w), KVD_EMSG);
    s.n_total = 3;
    seqs[0].shared_pages = 4;
    ck_assert_int_eq(admin_seqs_encode(&s, &w), KVD_EMSG);
    seqs[0].shared_pages = 2;
    seqs[1].worker = -2;
    ck_assert_int_eq(admin_seqs_encode(&s, &w), KVD_EMSG);

    /* unknown state string */
    wire_begin(&w, "seqs", 2);
    wire_key(&w, "seqs");
    msgpack_pack_array(&w.pk, 1);
    msgpack_pack_map(&w.pk, 6);
    wire_put_u64(&w, "id", 1);
    wire_put_str(&w, "state", "sleeping");
    wire_put_u64(&w, "tokens", 1);
    wire_put_u64(&w, "pages", 1);
    wire_put_u64(&w, "shared_pages", 0);
    wire_put_i64(&w, "worker", 0);
    wire_put_u64(&w, "n_total", 1);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_seqs_decode(&m, &d, err), KVD_EMSG);
    admin_seqs_release(&d);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_workers)
{
    struct admin_worker ws[2] = {
        {.index = 0, .pid = 1234, .state = ADMIN_WORKER_BUSY, .steps = 500, .restarts = 1},
        {.index = 1, .pid = 0, .state = ADMIN_WORKER_RESTARTING, .steps = 7, .restarts = 3},
    };
    struct admin_workers s = {.workers = ws, .n = 2}, d;
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN] = "";
    wbuf_init(&w);
    ck_assert_int_eq(admin_workers_encode(&s, &w), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_workers_decode(&m, &d, err), 0);
    ck_assert_uint_eq(d.n, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(d.workers[i].index, ws[i].index);
        ck_assert_int_eq(d.workers[i].pid, ws[i].pid);
        ck_assert_int_eq(d.workers[i].state, ws[i].state);
        ck_assert_uint_eq(d.workers[i].steps, ws[i].steps);
        ck_assert_uint_eq(d.workers[i].restarts, ws[i].restarts);
    }
    admin_workers_release(&d);
    wmsg_release(&m);
    wbuf_release(&w);
    ws[0].pid = -5;
    ck_assert_int_eq(admin_workers_encode(&s, &w), KVD_EMSG);
    s.n = ADMIN_MAX_WORKERS + 1;
    ck_assert_int_eq(admin_workers_encode(&s, &w), KVD_EMSG);
    ck_assert_uint_eq(w.sb.size, 0);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_prefix_map_evict)
{
    struct admin_prefix p = {.enabled = true, .entries = 50, .cached_pages = 20,
                             .hit_tokens = 800, .query_tokens = 1000, .evictions = 9,
                             .n_top = 2},
                        pd;
    p.top[0] = (struct admin_prefix_top){.tokens = 256, .pages = 16, .seqs = 5};
    p.top[1] = (struct admin_prefix_top){.tokens = 64, .pages = 4, .seqs = 2};
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN] = "";
    wbuf_init(&w);
    ck_assert_int_eq(admin_prefix_encode(&p, &w), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_prefix_decode(&m, &pd, err), 0);
    ck_assert(pd.enabled);
    ck_assert_uint_eq(pd.entries, 50);
    ck_assert_uint_eq(pd.cached_pages, 20);
    ck_assert_uint_eq(pd.hit_tokens, 800);
    ck_assert_uint_eq(pd.query_tokens, 1000);
    ck_assert_uint_eq(pd.evictions, 9);
    ck_assert_uint_eq(pd.n_top, 2);
    ck_assert_uint_eq(pd.top[0].tokens, 256);
    ck_assert_uint_eq(pd.top[0].pages, 16);
    ck_assert_uint_eq(pd.top[1].seqs, 2);
    wmsg_release(&m);
    wbuf_release(&w);
    p.hit_tokens = 1001;
    ck_assert_int_eq(admin_prefix_encode(&p, &w), KVD_EMSG);

    uint8_t pages[7] = {0, 1, 2, 3, 3, 1, 0};
    struct admin_map mp = {.pages_total = 7, .pages = pages}, md;
    ck_assert_int_eq(admin_map_encode(&mp, &w), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_map_decode(&m, &md, err), 0);
    ck_assert_uint_eq(md.pages_total, 7);
    ck_assert_mem_eq(md.pages, pages, 7);
    admin_map_release(&md);
    wmsg_release(&m);
    wbuf_release(&w);
    pages[3] = ADMIN_PAGE_COUNT_;
    ck_assert_int_eq(admin_map_encode(&mp, &w), KVD_EMSG);
    /* bin length disagreeing with pages_total */
    wire_begin(&w, "map", 2);
    wire_put_u64(&w, "pages_total", 8);
    wire_put_bin(&w, "pages", pages, 3);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_map_decode(&m, &md, err), KVD_EMSG);
    admin_map_release(&md);
    wmsg_release(&m);
    wbuf_release(&w);

    struct admin_evict e = {.evicted = 12}, ed;
    ck_assert_int_eq(admin_evict_encode(&e, &w), 0);
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_evict_decode(&m, &ed, err), 0);
    ck_assert_uint_eq(ed.evicted, 12);
    ck_assert_int_eq(admin_pool_decode(&m, &(struct admin_pool){0}, err), KVD_EMSG);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

START_TEST(test_error_reply)
{
    struct wbuf w;
    struct wmsg m;
    const char *msg;
    size_t n;
    char err[WIRE_ERR_LEN] = "";
    struct admin_evict ed;
    wbuf_init(&w);
    wire_error_reply(&w, KVD_EBUSY, "pages in use");
    parse_ok(&w, &m);
    ck_assert_int_eq(admin_evict_decode(&m, &ed, err), KVD_EMSG);
    ck_assert_int_eq(wmsg_error(&m, &msg, &n), KVD_EBUSY);
    ck_assert_int_eq((int)n, 12);
    wmsg_release(&m);
    wbuf_release(&w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("admin_msg");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_requests);
    tcase_add_test(tc, test_pool);
    tcase_add_test(tc, test_seqs);
    tcase_add_test(tc, test_workers);
    tcase_add_test(tc, test_prefix_map_evict);
    tcase_add_test(tc, test_error_reply);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
