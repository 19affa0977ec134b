/* client_ep.c — kvd.sock (NN_REP handshake) and the per-session NN_PAIR sockets
 * (proto/client_msg.h). A session that is silent for KVD_SESSION_TIMEOUT_MS, or says
 * "bye", ends; its requests are cancelled (pages released at the next safe point). */
#include "daemon/kvd.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <nanomsg/pair.h>
#include <nanomsg/reqrep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void ep_reply(struct nnuv *n, struct wbuf *w)
{
    int rc = nnuv_send(n, w->sb.data, w->sb.size);
    if (rc < 0)
        log_warn("cannot reply on kvd.sock: %s", kvd_strerror(rc));
}

static void ep_reply_err(struct nnuv *n, int code, const char *msg)
{
    struct wbuf w;
    wbuf_init(&w);
    wire_error_reply(&w, code, msg);
    ep_reply(n, &w);
    wbuf_release(&w);
}

void session_send(struct kvd_session *s, struct wbuf *w)
{
    if (s->closing)
        return;
    int rc = nnuv_send(&s->nn, w->sb.data, w->sb.size);
    if (rc < 0)
        log_warn("cannot send to session %llu: %s", (unsigned long long)s->id, kvd_strerror(rc));
}

static void session_closed(struct nnuv *n)
{
    struct kvd_session *s = n->data;
    struct kvd *d = s->d;
    unlink(s->path);
    free(s);
    d->n_sessions--;
    kvd_maybe_finish_shutdown(d);
}

/* Ends s: its requests are cancelled without "done" (the client is gone or said bye).
 * send_bye: tell the client first (kvd-initiated close). */
static void session_end(struct kvd_session *s, bool send_bye, const char *why)
{
    struct kvd *d = s->d;
    if (s->closing)
        return;
    log_debug("session %llu ('%s') ends: %s", (unsigned long long)s->id, s->name, why);
    for (struct kvd_req *r = s->reqs, *next; r; r = next) {
        next = r->s_next;
        r->sess = NULL;
        r->s_prev = r->s_next = NULL;
        if (!r->end_code || r->end_code > 0)
            r->end_code = KVD_ECANCELLED;
    }
    s->reqs = NULL;
    if (send_bye) {
        struct wbuf w;
        wbuf_init(&w);
        client_simple_encode("bye", &w);
        session_send(s, &w);
        wbuf_release(&w);
    }
    s->closing = true;
    if (s->prev)
        s->prev->next = s->next;
    else
        d->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    nnuv_close(&s->nn, session_closed);
    engine_kick(d);
}

static void session_on_generate(struct kvd_session *s, const struct wmsg *m)
{
    struct client_generate g;
    char err[WIRE_ERR_LEN] = "";
    client_generate_init(&g);
    if (client_generate_decode(m, &g, err) < 0) {
        uint64_t id;
        const msgpack_object *o = wire_get(&m->root, "id");
        if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
            id = o->via.u64;
            struct client_done done;
            client_done_init(&done);
            done.id = id;
            done.finish = CLIENT_FINISH_ERROR;
            done.code = KVD_EMSG;
            snprintf(done.msg, sizeof(done.msg), "invalid request: %s", err);
            struct wbuf w;
            wbuf_init(&w);
            char e2[WIRE_ERR_LEN];
            if (client_done_encode(&done, &w, e2) == 0)
                session_send(s, &w);
            wbuf_release(&w);
            s->d->ctr.requests_failed++;
        } else {
            struct wbuf w;
            wbuf_init(&w);
            wire_error_reply(&w, KVD_EMSG, err);
            session_send(s, &w);
            wbuf_release(&w);
        }
        client_generate_release(&g);
        return;
    }
    req_start(s->d, s, &g);
    client_generate_release(&g);
}

static void session_recv_cb(struct nnuv *n, const void *buf, size_t len)
{
    struct kvd_session *s = n->data;
    struct kvd *d = s->d;
    struct wmsg m;
    char err[WIRE_ERR_LEN] = "";
    s->last_seen_ms = kvd_now_ms(d);
    if (wmsg_parse(&m, buf, len, err) < 0) {
        struct wbuf w;
        wbuf_init(&w);
        wire_error_reply(&w, KVD_EMSG, err);
        session_send(s, &w);
        wbuf_release(&w);
        wmsg_release(&m);
        return;
    }
    if (wmsg_is(&m, "generate")) {
        session_on_generate(s, &m);
    } else if (wmsg_is(&m, "cancel")) {
        struct client_cancel c;
        if (client_cancel_decode(&m, &c, err) == 0) {
            struct kvd_req *r = req_find(s, c.id);
            if (r && !r->end_code) {
                r->end_code = KVD_ECANCELLED;
                engine_kick(d);
            }
        }
    } else if (wmsg_is(&m, "ping")) {
        struct wbuf w;
        wbuf_init(&w);
        client_simple_encode("pong", &w);
        session_send(s, &w);
        wbuf_release(&w);
    } else if (wmsg_is(&m, "bye")) {
        wmsg_release(&m);
        session_end(s, false, "client said bye");
        return;
    } else {
        struct wbuf w;
        wbuf_init(&w);
        wire_error_reply(&w, KVD_EMSG, "unknown message type");
        session_send(s, &w);
        wbuf_release(&w);
    }
    wmsg_release(&m);
}

static int session_new(struct kvd *d, const char *name, struct kvd_session **out)
{
    struct kvd_session *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    char sock[64];
    s->d = d;
    s->id = ++d->next_session;
    snprintf(s->name, sizeof(s->name), "%s", name);
    snprintf(sock, sizeof(sock), CLIENT_SESSION_SOCK_FMT, (unsigned long long)s->id);
    int rc = nnuv_listen(&s->nn, d->loop, d->rundir, sock, NN_PAIR, true, session_recv_cb, s,
                         s->path);
    if (rc < 0) {
        free(s);
        return rc;
    }
    s->last_seen_ms = kvd_now_ms(d);
    s->next = d->sessions;
    if (d->sessions)
        d->sessions->prev = s;
    d->sessions = s;
    d->n_sessions++;
    *out = s;
    return 0;
}

static void client_ep_recv_cb(struct nnuv *n, const void *buf, size_t len)
{
    struct kvd *d = n->data;
    struct wmsg m;
    char err[WIRE_ERR_LEN] = "";
    if (wmsg_parse(&m, buf, len, err) < 0) {
        ep_reply_err(n, KVD_EMSG, err);
        wmsg_release(&m);
        return;
    }
    struct client_hello h;
    if (!wmsg_is(&m, "hello") || client_hello_decode(&m, &h, err) < 0) {
        ep_reply_err(n, KVD_EMSG, err[0] ? err : "expected hello");
    } else if (d->shutting_down) {
        ep_reply_err(n, KVD_ESHUTDOWN, "kvd is shutting down");
    } else if (d->n_sessions >= KVD_SESSIONS_MAX) {
        ep_reply_err(n, KVD_EOVERLOAD, "too many sessions");
    } else {
        struct kvd_session *s = NULL;
        int rc = session_new(d, h.name, &s);
        if (rc < 0) {
            log_err("cannot create a session: %s", kvd_strerror(rc));
            ep_reply_err(n, KVD_EINTERNAL, "cannot create a session");
        } else {
            struct client_welcome wl;
            memset(&wl, 0, sizeof(wl));
            wl.session = s->id;
            char sock[64];
            snprintf(sock, sizeof(sock), CLIENT_SESSION_SOCK_FMT, (unsigned long long)s->id);
            paths_ipc_addr(wl.addr, sizeof(wl.addr), d->rundir, sock);
            wl.max_model_len = d->cfg.max_model_len;
            snprintf(wl.model, sizeof(wl.model), "%s", d->model.name);
            wl.vocab_size = d->model.tok.n_vocab;
            wl.block_size = d->cfg.block_size;
            struct wbuf w;
            wbuf_init(&w);
            if (client_welcome_encode(&wl, &w, err) == 0)
                ep_reply(n, &w);
            else
                ep_reply_err(n, KVD_EINTERNAL, err);
            wbuf_release(&w);
            log_debug("session %llu opened for '%s'", (unsigned long long)s->id, h.name);
        }
    }
    wmsg_release(&m);
}

int client_ep_open(struct kvd *d)
{
    int rc = nnuv_listen(&d->client_ep, d->loop, d->rundir, PATHS_SOCK_CLIENT, NN_REP, false,
                         client_ep_recv_cb, d, NULL);
    if (rc < 0)
        return rc;
    d->client_open = true;
    return 0;
}

static void client_ep_closed(struct nnuv *n)
{
    struct kvd *d = n->data;
    char path[PATHS_MAX];
    if (paths_join(path, sizeof(path), d->rundir, PATHS_SOCK_CLIENT) == 0)
        unlink(path);
    d->client_open = false;
    kvd_maybe_finish_shutdown(d);
}

void client_ep_close(struct kvd *d)
{
    if (d->client_open && !d->client_ep.closing)
        nnuv_close(&d->client_ep, client_ep_closed);
}

void sessions_sweep(struct kvd *d)
{
    uint64_t now = kvd_now_ms(d);
    for (struct kvd_session *s = d->sessions, *next; s; s = next) {
        next = s->next;
        if (now - s->last_seen_ms > KVD_SESSION_TIMEOUT_MS)
            session_end(s, true, "silent for too long");
    }
}

void sessions_close_all(struct kvd *d)
{
    for (struct kvd_session *s = d->sessions, *next; s; s = next) {
        next = s->next;
        session_end(s, true, "kvd stops");
    }
}
