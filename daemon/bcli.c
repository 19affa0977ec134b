/* bcli.c — async broker client (see bcli.h). */
#include "daemon/bcli.h"

#include "common/err.h"
#include "common/log.h"
#include "proto/broker_msg.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void bcli_send_next(struct bcli *b);

static void bcli_complete(struct bcli *b, int status, const struct wmsg *m)
{
    struct bcli_req *r = b->head;
    b->head = r->next;
    if (!b->head)
        b->tail = NULL;
    b->queued--;
    b->in_flight = false;
    uv_timer_stop(&b->reply_timer);
    if (status < 0)
        b->failures++;
    r->cb(b, status, m, r->arg);
    free(r);
    bcli_send_next(b);
}

static void bcli_recv_cb(struct nnuv *n, const void *buf, size_t len)
{
    struct bcli *b = n->data;
    if (!b->in_flight) {
        log_warn("broker reply with no request in flight (dropped)");
        return;
    }
    struct wmsg m;
    char err[WIRE_ERR_LEN];
    int rc = wmsg_parse(&m, buf, len, err);
    if (rc < 0) {
        log_err("cannot parse broker reply: %s", err);
        bcli_complete(b, rc, NULL);
    } else {
        bcli_complete(b, 0, &m);
    }
    wmsg_release(&m);
}

static void bcli_reply_timeout_cb(uv_timer_t *t)
{
    struct bcli *b = t->data;
    if (!b->in_flight)
        return;
    log_err("broker did not answer within %d ms", BCLI_REPLY_TIMEOUT_MS);
    bcli_complete(b, KVD_EPEER, NULL);
}

static void bcli_send_next(struct bcli *b)
{
    while (!b->in_flight && b->head && !b->closing) {
        struct bcli_req *r = b->head;
        int rc = nnuv_send(&b->nn, r->data, r->len);
        if (rc < 0) {
            log_err("cannot send to the broker: %s", kvd_strerror(rc));
            b->in_flight = true; /* so complete pops it */
            bcli_complete(b, KVD_EPEER, NULL);
            return;
        }
        b->in_flight = true;
        b->requests++;
        uv_timer_start(&b->reply_timer, bcli_reply_timeout_cb, BCLI_REPLY_TIMEOUT_MS, 0);
    }
}

int bcli_init(struct bcli *b, uv_loop_t *loop, const char *addr, void *data)
{
    memset(b, 0, sizeof(*b));
    b->data = data;
    b->loop = loop;
    int s = nn_socket(AF_SP, NN_REQ);
    if (s < 0)
        return -nn_errno();
    /* We time out ourselves; never let nanomsg resend a request behind our back. */
    int resend = BCLI_REPLY_TIMEOUT_MS * 1000;
    nn_setsockopt(s, NN_REQ, NN_REQ_RESEND_IVL, &resend, sizeof(resend));
    int maxsz = -1;
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &maxsz, sizeof(maxsz));
    if (nn_connect(s, addr) < 0) {
        int e = -nn_errno();
        nn_close(s);
        return e;
    }
    int rc = nnuv_init(&b->nn, loop, s, bcli_recv_cb, b);
    if (rc < 0) {
        nn_close(s);
        return rc;
    }
    b->nn_open = true;
    uv_timer_init(loop, &b->reply_timer);
    uv_timer_init(loop, &b->hb_timer);
    b->reply_timer.data = b->hb_timer.data = b;
    b->open_handles = 2;
    return 0;
}

int bcli_call(struct bcli *b, struct wbuf *w, bcli_cb cb, void *arg)
{
    if (b->closing)
        return KVD_ESHUTDOWN;
    if (b->queued >= BCLI_QUEUE_MAX)
        return -ENOBUFS;
    struct bcli_req *r = malloc(sizeof(*r) + w->sb.size);
    if (!r)
        return -ENOMEM;
    r->next = NULL;
    r->cb = cb;
    r->arg = arg;
    r->len = w->sb.size;
    memcpy(r->data, w->sb.data, w->sb.size);
    wbuf_release(w);
    if (b->tail)
        b->tail->next = r;
    else
        b->head = r;
    b->tail = r;
    b->queued++;
    bcli_send_next(b);
    return 0;
}

static void bcli_hb_done(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    (void)arg;
    uint64_t n;
    char err[WIRE_ERR_LEN] = "";
    if (status == 0)
        status = broker_rep_ok_decode(m, &n, err);
    if (status < 0 && !b->closing)
        log_warn("broker heartbeat failed: %s %s", kvd_strerror(status), err);
    if (status == KVD_ENOTFOUND && !b->closing && b->lease_lost_cb) {
        log_err("the broker no longer knows kvd's lease: every page it held is gone");
        uv_timer_stop(&b->hb_timer);
        b->lease = 0;
        b->lease_lost_cb(b);
    }
}

static void bcli_hb_cb(uv_timer_t *t)
{
    struct bcli *b = t->data;
    struct wbuf w;
    wbuf_init(&w);
    broker_req_heartbeat_encode(&w, b->lease);
    if (bcli_call(b, &w, bcli_hb_done, NULL) < 0)
        wbuf_release(&w);
}

struct attach_ctx {
    bcli_cb cb;
    void *arg;
};

static void bcli_attach_done(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    struct attach_ctx ctx = *(struct attach_ctx *)arg;
    free(arg);
    char err[WIRE_ERR_LEN] = "";
    if (status == 0) {
        uint64_t lease;
        uint32_t to;
        struct pool_desc pd;
        status = broker_rep_attach_decode(m, &lease, &to, &pd, err);
        if (status == 0) {
            b->lease = lease;
            b->lease_timeout_ms = to;
            b->pool = pd;
            uint64_t ivl = to / 3 ? to / 3 : 1;
            uv_timer_start(&b->hb_timer, bcli_hb_cb, ivl, ivl);
        } else {
            log_err("broker refused attach: %s: %s", kvd_errname(status), err);
        }
    }
    ctx.cb(b, status, m, ctx.arg);
}

int bcli_attach(struct bcli *b, const char *client, const struct pool_desc *expect, bcli_cb cb,
                void *arg)
{
    struct attach_ctx *ctx = malloc(sizeof(*ctx));
    if (!ctx)
        return -ENOMEM;
    ctx->cb = cb;
    ctx->arg = arg;
    struct wbuf w;
    wbuf_init(&w);
    int rc = broker_req_attach_encode(&w, client, (uint32_t)getpid(), expect);
    if (rc == 0)
        rc = bcli_call(b, &w, bcli_attach_done, ctx);
    if (rc < 0) {
        wbuf_release(&w);
        free(ctx);
    }
    return rc;
}

static void bcli_handle_closed(uv_handle_t *h)
{
    struct bcli *b = h->data;
    if (--b->open_handles == 0 && b->close_cb)
        b->close_cb(b);
}

static void bcli_nn_closed(struct nnuv *n)
{
    struct bcli *b = n->data;
    if (--b->open_handles == 0 && b->close_cb)
        b->close_cb(b);
}

void bcli_close(struct bcli *b, void (*close_cb)(struct bcli *b))
{
    if (b->closing)
        return;
    b->closing = true;
    b->close_cb = close_cb;
    while (b->head) {
        b->in_flight = true;
        bcli_complete(b, KVD_ESHUTDOWN, NULL);
    }
    uv_close((uv_handle_t *)&b->reply_timer, bcli_handle_closed);
    uv_close((uv_handle_t *)&b->hb_timer, bcli_handle_closed);
    if (b->nn_open) {
        b->open_handles++;
        nnuv_close(&b->nn, bcli_nn_closed);
    }
}
