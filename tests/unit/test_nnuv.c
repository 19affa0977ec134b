/* test_nnuv.c — nanomsg sockets in a libuv loop: receive callbacks, a send that would
 * block is queued and flushed when the peer appears, pause/resume, and the loop closes
 * clean (every handle closed, exact callback counts). */
#include "daemon/nnuv.h"

#include <check.h>
#include <errno.h>
#include <nanomsg/nn.h>
#include <nanomsg/pair.h>
#include <nanomsg/reqrep.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct ctx {
    int recvs, closes;
    char last[64];
    uv_timer_t stop;
};

static void on_recv_echo(struct nnuv *n, const void *buf, size_t len)
{
    struct ctx *c = n->data;
    c->recvs++;
    snprintf(c->last, sizeof(c->last), "%.*s", (int)len, (const char *)buf);
    ck_assert_int_eq(nnuv_send(n, buf, len), 0);
}

static void on_close(struct nnuv *n)
{
    struct ctx *c = n->data;
    c->closes++;
}

static void stop_cb(uv_timer_t *t)
{
    uv_stop(t->loop);
}

static void addr_of(char *out, size_t cap, const char *tag)
{
    snprintf(out, cap, "ipc:///tmp/kvd-test-nnuv-%d-%s.sock", (int)getpid(), tag);
}

/* Removes the socket file behind an ipc:// address. */
static void addr_unlink(const char *addr)
{
    unlink(addr + strlen("ipc://"));
}

static void run_for(uv_loop_t *loop, struct ctx *c, int ms)
{
    uv_timer_start(&c->stop, stop_cb, (uint64_t)ms, 0);
    uv_run(loop, UV_RUN_DEFAULT);
}

START_TEST(test_rep_echo)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct ctx c = {0};
    uv_timer_init(&loop, &c.stop);
    char addr[128];
    addr_of(addr, sizeof(addr), "rep");
    int rep = nn_socket(AF_SP, NN_REP);
    ck_assert_int_ge(nn_bind(rep, addr), 0);
    struct nnuv n;
    ck_assert_int_eq(nnuv_init(&n, &loop, rep, on_recv_echo, &c), 0);
    int req = nn_socket(AF_SP, NN_REQ);
    ck_assert_int_ge(nn_connect(req, addr), 0);
    int to = 2000;
    nn_setsockopt(req, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to));
    ck_assert_int_eq(nn_send(req, "hello", 5, 0), 5);
    run_for(&loop, &c, 200);
    ck_assert_int_eq(c.recvs, 1);
    ck_assert_str_eq(c.last, "hello");
    char buf[16];
    ck_assert_int_eq(nn_recv(req, buf, sizeof(buf), 0), 5);
    ck_assert_mem_eq(buf, "hello", 5);
    nnuv_close(&n, on_close);
    uv_close((uv_handle_t *)&c.stop, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(c.closes, 1);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    nn_close(req);
    addr_unlink(addr);
}
END_TEST

START_TEST(test_send_queued_until_peer)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct ctx c = {0};
    uv_timer_init(&loop, &c.stop);
    char addr[128];
    addr_of(addr, sizeof(addr), "pair");
    int a = nn_socket(AF_SP, NN_PAIR);
    ck_assert_int_ge(nn_bind(a, addr), 0);
    struct nnuv n;
    ck_assert_int_eq(nnuv_init(&n, &loop, a, NULL, &c), 0);
    /* No peer: nanomsg would block; nnuv keeps the messages in order. */
    for (int i = 0; i < 3; i++) {
        char m[8];
        snprintf(m, sizeof(m), "m%d", i);
        ck_assert_int_eq(nnuv_send(&n, m, strlen(m)), 0);
    }
    ck_assert_uint_ge(nnuv_queued(&n), 1);
    int b = nn_socket(AF_SP, NN_PAIR);
    ck_assert_int_ge(nn_connect(b, addr), 0);
    run_for(&loop, &c, 300);
    ck_assert_uint_eq(nnuv_queued(&n), 0);
    int to = 2000;
    nn_setsockopt(b, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to));
    for (int i = 0; i < 3; i++) {
        char buf[8], want[8];
        snprintf(want, sizeof(want), "m%d", i);
        int r = nn_recv(b, buf, sizeof(buf), 0);
        ck_assert_int_eq(r, (int)strlen(want));
        ck_assert_mem_eq(buf, want, (size_t)r);
    }
    nnuv_close(&n, on_close);
    nnuv_close(&n, on_close); /* idempotent */
    ck_assert_int_eq(nnuv_send(&n, "x", 1), -EPIPE);
    uv_close((uv_handle_t *)&c.stop, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(c.closes, 1);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    nn_close(b);
    addr_unlink(addr);
}
END_TEST

static void on_recv_count(struct nnuv *n, const void *buf, size_t len)
{
    struct ctx *c = n->data;
    (void)buf;
    (void)len;
    c->recvs++;
}

START_TEST(test_pause_resume)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct ctx c = {0};
    uv_timer_init(&loop, &c.stop);
    char addr[128];
    addr_of(addr, sizeof(addr), "pause");
    int a = nn_socket(AF_SP, NN_PAIR);
    ck_assert_int_ge(nn_bind(a, addr), 0);
    struct nnuv n;
    ck_assert_int_eq(nnuv_init(&n, &loop, a, on_recv_count, &c), 0);
    int b = nn_socket(AF_SP, NN_PAIR);
    ck_assert_int_ge(nn_connect(b, addr), 0);
    run_for(&loop, &c, 50);
    nnuv_recv_pause(&n);
    ck_assert_int_eq(nn_send(b, "1", 1, 0), 1);
    ck_assert_int_eq(nn_send(b, "2", 1, 0), 1);
    run_for(&loop, &c, 100);
    ck_assert_int_eq(c.recvs, 0);
    nnuv_recv_resume(&n);
    run_for(&loop, &c, 100);
    ck_assert_int_eq(c.recvs, 2);
    nnuv_close(&n, on_close);
    uv_close((uv_handle_t *)&c.stop, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    nn_close(b);
    addr_unlink(addr);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("nnuv");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_rep_echo);
    tcase_add_test(tc, test_send_queued_until_peer);
    tcase_add_test(tc, test_pause_resume);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
