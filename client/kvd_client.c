/* kvd_client.c — libkvd-client: session handshake, request submission, event stream.
 * Contract in kvd_client.h; wire format in proto/client_msg.h. */
#include "client/kvd_client.h"

#include "common/err.h"
#include "common/paths.h"
#include "proto/client_msg.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <nanomsg/pair.h>
#include <nanomsg/reqrep.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define KVD_CLIENT_POLL_SLICE_MS 100   /* longest single wait: deadlines are checked this often */
#define KVD_CLIENT_BYE_WAIT_MS 200     /* how long kvd_close waits to hand "bye" over */
#define KVD_CLIENT_CANCEL_GRACE_MS 2000 /* kvd_generate waits this long for a cancelled DONE */

_Static_assert(KVD_MAX_LOGPROBS == CLIENT_MAX_LOGPROBS, "SDK and wire agree on top-K");
_Static_assert(KVD_MAX_STOP == CLIENT_MAX_STOP, "SDK and wire agree on stop strings");
_Static_assert(KVD_CLIENT_PING_MS == CLIENT_PING_INTERVAL_MS, "ping period");
_Static_assert(KVD_CLIENT_DEAD_MS == KVD_SESSION_TIMEOUT_MS, "session timeout");
_Static_assert(KVD_MODEL_NAME_MAX == CLIENT_MODEL_NAME_MAX, "model name length");
/* struct kvd_logprob is handed out as a view of struct client_logprob. */
_Static_assert(sizeof(struct kvd_logprob) == sizeof(struct client_logprob), "lp size");
_Static_assert(offsetof(struct kvd_logprob, present) == offsetof(struct client_logprob, present),
               "lp present");
_Static_assert(offsetof(struct kvd_logprob, token) == offsetof(struct client_logprob, token),
               "lp token");
_Static_assert(offsetof(struct kvd_logprob, logprob) == offsetof(struct client_logprob, logprob),
               "lp logprob");
_Static_assert(offsetof(struct kvd_logprob, n_top) == offsetof(struct client_logprob, n_top),
               "lp n_top");
_Static_assert(offsetof(struct kvd_logprob, top) == offsetof(struct client_logprob, top),
               "lp top");
_Static_assert(sizeof(struct kvd_top) == sizeof(struct client_top), "top size");
_Static_assert((int)KVD_FINISH_ERROR == (int)CLIENT_FINISH_ERROR, "finish enum");

/* A received message kept for later (kvd_generate saw another request's event). */
struct pending {
    void *buf;                 /* nanomsg message, nn_freemsg */
    size_t len;
    struct pending *next;
};

struct kvd_client {
    int pair;                          /* NN_PAIR socket of the session */
    struct kvd_info info;
    uint64_t next_id;                  /* request ids: 1, 2, ... */
    int io_timeout_ms;                 /* bound for sends and the handshake */
    int64_t last_rx_ms;                /* monotonic time anything last arrived */
    bool ended;                        /* kvd sent "bye" */
    struct pending *q_head, *q_tail;   /* events kept for kvd_next_event */
    /* storage behind the last event handed out */
    struct client_tokens ev_tokens;
    struct client_done ev_done;
    char last_err[WIRE_ERR_LEN];
    /* ping thread */
    pthread_t pinger;
    bool pinger_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;                         /* under mu */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void kvd_params_init(struct kvd_params *p)
{
    *p = (struct kvd_params)KVD_PARAMS_INIT;
}

const struct kvd_info *kvd_client_info(const struct kvd_client *c) { return &c->info; }

const char *kvd_client_last_error(const struct kvd_client *c) { return c->last_err; }

/* Fast check that something accepts connections on path: nanomsg's ipc connect would
 * otherwise retry silently until the timeout. */
static int probe_unix(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

static int nn_set_timeouts(int s, int ms)
{
    int max = -1; /* no receive size cap below WIRE_MSG_MAX: wmsg_parse enforces it */
    if (nn_setsockopt(s, NN_SOL_SOCKET, NN_SNDTIMEO, &ms, sizeof(ms)) < 0 ||
        nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &ms, sizeof(ms)) < 0 ||
        nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max, sizeof(max)) < 0)
        return -nn_errno();
    return 0;
}

/* hello -> welcome on kvd.sock. */
static int handshake(const char *dir, int timeout_ms, struct client_welcome *wel, char *err)
{
    char addr[PATHS_MAX];
    struct client_hello h = {.name = "libkvd-client"};
    struct wbuf w;
    struct wmsg m = {0};
    void *buf = NULL;
    int rc, s;
    if ((rc = paths_ipc_addr(addr, sizeof(addr), dir, PATHS_SOCK_CLIENT)))
        return rc;
    if ((s = nn_socket(AF_SP, NN_REQ)) < 0)
        return -nn_errno();
    wbuf_init(&w);
    if ((rc = nn_set_timeouts(s, timeout_ms)))
        goto out_close;
    if (nn_connect(s, addr) < 0) {
        rc = -nn_errno();
        goto out_close;
    }
    if ((rc = client_hello_encode(&h, &w, err)))
        goto out_close;
    if (nn_send(s, w.sb.data, w.sb.size, 0) < 0) {
        rc = nn_errno() == EAGAIN ? -ETIMEDOUT : -nn_errno();
        goto out_close;
    }
    int n = nn_recv(s, &buf, NN_MSG, 0);
    if (n < 0) {
        rc = nn_errno() == EAGAIN ? -ETIMEDOUT : -nn_errno();
        goto out_close;
    }
    if ((rc = wmsg_parse(&m, buf, (size_t)n, err)))
        goto out_free;
    if (wmsg_is(&m, "err")) {
        const char *msg;
        size_t ml;
        rc = wmsg_error(&m, &msg, &ml);
        snprintf(err, WIRE_ERR_LEN, "kvd refused the session: %.*s", (int)ml, msg);
        goto out_free;
    }
    rc = client_welcome_decode(&m, wel, err);
out_free:
    wmsg_release(&m);
    nn_freemsg(buf);
out_close:
    wbuf_release(&w);
    nn_close(s);
    return rc;
}

static void *pinger_main(void *arg)
{
    struct kvd_client *c = arg;
    struct wbuf w;
    wbuf_init(&w);
    client_simple_encode("ping", &w);
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += KVD_CLIENT_PING_MS / 1000;
        ts.tv_nsec += (long)(KVD_CLIENT_PING_MS % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        while (!c->stop && pthread_cond_timedwait(&c->cv, &c->mu, &ts) != ETIMEDOUT)
            ;
        if (c->stop)
            break;
        /* nanomsg sockets are thread-safe; a full pipe just skips this ping. */
        nn_send(c->pair, w.sb.data, w.sb.size, NN_DONTWAIT);
    }
    pthread_mutex_unlock(&c->mu);
    wbuf_release(&w);
    return NULL;
}

int kvd_connect(const char *runtime_dir, int timeout_ms, struct kvd_client **out)
{
    char dir[PATHS_MAX], path[PATHS_MAX], err[WIRE_ERR_LEN] = "";
    struct client_welcome wel;
    int rc;
    if (timeout_ms <= 0)
        return -EINVAL;
    if ((rc = paths_runtime_dir(dir, sizeof(dir), runtime_dir)) ||
        (rc = paths_join(path, sizeof(path), dir, PATHS_SOCK_CLIENT)) ||
        (rc = probe_unix(path)))
        return rc;
    if ((rc = handshake(dir, timeout_ms, &wel, err)))
        return rc;
    struct kvd_client *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->next_id = 1;
    c->io_timeout_ms = timeout_ms;
    c->info.session = wel.session;
    c->info.max_model_len = wel.max_model_len;
    c->info.vocab_size = wel.vocab_size;
    c->info.block_size = wel.block_size;
    memcpy(c->info.model, wel.model, sizeof(c->info.model));
    client_tokens_init(&c->ev_tokens);
    client_done_init(&c->ev_done);
    if ((c->pair = nn_socket(AF_SP, NN_PAIR)) < 0) {
        rc = -nn_errno();
        goto out_free;
    }
    if ((rc = nn_set_timeouts(c->pair, timeout_ms)))
        goto out_close;
    if (nn_connect(c->pair, wel.addr) < 0) {
        rc = -nn_errno();
        goto out_close;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    if ((rc = -pthread_create(&c->pinger, NULL, pinger_main, c)))
        goto out_sync;
    c->pinger_started = true;
    c->last_rx_ms = now_ms();
    *out = c;
    return 0;
out_sync:
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
out_close:
    nn_close(c->pair);
out_free:
    free(c);
    return rc;
}

/* Sends a message on the session, waiting up to the connect timeout for room. */
static int session_send(struct kvd_client *c, const struct wbuf *w)
{
    int64_t deadline = now_ms() + c->io_timeout_ms;
    if (c->ended)
        return KVD_ESHUTDOWN;
    for (;;) {
        if (nn_send(c->pair, w->sb.data, w->sb.size, NN_DONTWAIT) >= 0)
            return 0;
        int e = nn_errno();
        if (e != EAGAIN)
            return -e;
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            snprintf(c->last_err, sizeof(c->last_err), "kvd did not take the message in %d ms",
                     c->io_timeout_ms);
            return KVD_EPEER;
        }
        struct nn_pollfd pfd = {.fd = c->pair, .events = NN_POLLOUT};
        nn_poll(&pfd, 1, (int)(left < KVD_CLIENT_POLL_SLICE_MS ? left : KVD_CLIENT_POLL_SLICE_MS));
    }
}

static void pending_free_all(struct kvd_client *c)
{
    while (c->q_head) {
        struct pending *p = c->q_head;
        c->q_head = p->next;
        nn_freemsg(p->buf);
        free(p);
    }
    c->q_tail = NULL;
}

void kvd_close(struct kvd_client *c)
{
    if (!c)
        return;
    if (!c->ended) {
        struct wbuf w;
        wbuf_init(&w);
        client_simple_encode("bye", &w);
        int saved = c->io_timeout_ms;
        c->io_timeout_ms = KVD_CLIENT_BYE_WAIT_MS;
        session_send(c, &w);
        c->io_timeout_ms = saved;
        wbuf_release(&w);
    }
    if (c->pinger_started) {
        pthread_mutex_lock(&c->mu);
        c->stop = true;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->pinger, NULL);
    }
    nn_close(c->pair);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    pending_free_all(c);
    client_tokens_release(&c->ev_tokens);
    client_done_release(&c->ev_done);
    free(c);
}

int kvd_submit(struct kvd_client *c, const struct kvd_params *p, uint64_t *id)
{
    struct client_generate g;
    struct wbuf w;
    int rc;
    client_generate_init(&g);
    g.id = c->next_id;
    g.prompt = (char *)p->prompt;
    g.prompt_len = p->prompt ? strlen(p->prompt) : 0;
    g.tokens = (uint32_t *)p->tokens;
    g.n_tokens = p->n_tokens;
    if (p->tokens && p->n_tokens == 0)
        g.tokens = NULL; /* caught below as "neither prompt nor tokens" */
    g.max_tokens = p->max_tokens;
    g.temperature = p->temperature;
    g.top_k = p->top_k;
    g.top_p = p->top_p;
    g.min_p = p->min_p;
    g.has_seed = p->has_seed;
    g.seed = p->seed;
    g.repetition_penalty = p->repetition_penalty;
    g.frequency_penalty = p->frequency_penalty;
    g.presence_penalty = p->presence_penalty;
    if (p->n_stop > KVD_MAX_STOP) {
        snprintf(c->last_err, sizeof(c->last_err), "more than %d stop strings", KVD_MAX_STOP);
        return KVD_EMSG;
    }
    g.n_stop = (uint32_t)p->n_stop;
    for (size_t i = 0; i < p->n_stop; i++)
        g.stop[i] = (char *)p->stop[i];
    g.stop_token_ids = (uint32_t *)p->stop_token_ids;
    g.n_stop_token_ids = p->n_stop_token_ids;
    g.ignore_eos = p->ignore_eos;
    g.logprobs = p->logprobs;
    g.prompt_logprobs = p->prompt_logprobs;
    g.stream = p->stream;
    g.timeout_ms = p->timeout_ms;
    g.cache_salt = (char *)p->cache_salt;
    g.cache_salt_len = p->cache_salt ? strlen(p->cache_salt) : 0;
    wbuf_init(&w);
    /* g borrows the caller's pointers: never client_generate_release it. */
    rc = client_generate_encode(&g, &w, c->last_err);
    if (rc == 0)
        rc = session_send(c, &w);
    wbuf_release(&w);
    if (rc == 0)
        *id = c->next_id++;
    return rc;
}

int kvd_cancel(struct kvd_client *c, uint64_t id)
{
    struct client_cancel x = {.id = id};
    struct wbuf w;
    wbuf_init(&w);
    client_cancel_encode(&x, &w);
    int rc = session_send(c, &w);
    wbuf_release(&w);
    return rc;
}

/* Takes the next raw message: from the kept queue when use_queue, else from the socket,
 * waiting up to timeout_ms. 0, -EAGAIN (nothing in time) or KVD_EPEER (kvd silent). */
static int take_msg(struct kvd_client *c, bool use_queue, int timeout_ms, void **buf,
                    size_t *len)
{
    if (use_queue && c->q_head) {
        struct pending *p = c->q_head;
        c->q_head = p->next;
        if (!c->q_head)
            c->q_tail = NULL;
        *buf = p->buf;
        *len = p->len;
        free(p);
        return 0;
    }
    if (c->ended)
        return KVD_ESHUTDOWN;
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        void *b = NULL;
        int n = nn_recv(c->pair, &b, NN_MSG, NN_DONTWAIT);
        if (n >= 0) {
            c->last_rx_ms = now_ms();
            *buf = b;
            *len = (size_t)n;
            return 0;
        }
        if (nn_errno() != EAGAIN)
            return -nn_errno();
        int64_t now = now_ms();
        if (now - c->last_rx_ms > KVD_CLIENT_DEAD_MS) {
            snprintf(c->last_err, sizeof(c->last_err), "kvd silent for %lld ms",
                     (long long)(now - c->last_rx_ms));
            return KVD_EPEER;
        }
        int64_t left = deadline - now;
        if (left <= 0)
            return -EAGAIN;
        struct nn_pollfd pfd = {.fd = c->pair, .events = NN_POLLIN};
        nn_poll(&pfd, 1, (int)(left < KVD_CLIENT_POLL_SLICE_MS ? left : KVD_CLIENT_POLL_SLICE_MS));
    }
}

static void fill_tokens_event(struct kvd_client *c, struct kvd_event *ev)
{
    const struct client_tokens *t = &c->ev_tokens;
    memset(ev, 0, sizeof(*ev));
    ev->type = KVD_EVENT_TOKENS;
    ev->id = t->id;
    ev->tokens = t->tokens;
    ev->n_tokens = t->n_tokens;
    ev->text = t->text ? t->text : "";
    ev->text_len = t->text_len;
    ev->logprobs = (const struct kvd_logprob *)t->logprobs;
    ev->n_logprobs = t->n_logprobs;
    ev->msg = "";
}

static void fill_done_event(struct kvd_client *c, struct kvd_event *ev)
{
    const struct client_done *d = &c->ev_done;
    memset(ev, 0, sizeof(*ev));
    ev->type = KVD_EVENT_DONE;
    ev->id = d->id;
    ev->tokens = d->tokens;
    ev->n_tokens = d->n_tokens;
    ev->text = d->text ? d->text : "";
    ev->text_len = d->text_len;
    ev->logprobs = (const struct kvd_logprob *)d->logprobs;
    ev->n_logprobs = d->n_logprobs;
    ev->finish = (enum kvd_finish)d->finish;
    ev->code = d->code;
    ev->msg = d->msg;
    ev->prompt_tokens = d->prompt_tokens;
    ev->cached_prompt_tokens = d->cached_prompt_tokens;
    ev->completion_tokens = d->completion_tokens;
    ev->prompt_logprobs = (const struct kvd_logprob *)d->prompt_logprobs;
    ev->n_prompt_logprobs = d->n_prompt_logprobs;
}

/* Decodes one message into an event. 1 = an event was produced, 0 = consumed silently
 * (pong), <0 = error. With only_id != 0, another request's event is kept for later
 * (2 = kept: buf now belongs to the queue). */
static int handle_msg(struct kvd_client *c, void *buf, size_t len, uint64_t only_id,
                      struct kvd_event *ev)
{
    struct wmsg m;
    int rc = wmsg_parse(&m, buf, len, c->last_err);
    if (rc)
        goto out;
    if (wmsg_is(&m, "pong")) {
        rc = client_simple_decode(&m, "pong", c->last_err);
    } else if (wmsg_is(&m, "bye")) {
        c->ended = true;
        snprintf(c->last_err, sizeof(c->last_err), "kvd ended the session");
        rc = KVD_ESHUTDOWN;
    } else if (wmsg_is(&m, "err")) {
        const char *msg;
        size_t ml;
        rc = wmsg_error(&m, &msg, &ml);
        snprintf(c->last_err, sizeof(c->last_err), "kvd: %.*s", (int)ml, msg);
    } else if (wmsg_is(&m, "tokens") || wmsg_is(&m, "done")) {
        bool is_tok = wmsg_is(&m, "tokens");
        const msgpack_object *ido = wire_get(&m.root, "id");
        if (only_id && ido && ido->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
            ido->via.u64 != only_id) {
            struct pending *p = malloc(sizeof(*p));
            if (!p) {
                rc = -ENOMEM;
                goto out;
            }
            *p = (struct pending){.buf = buf, .len = len};
            if (c->q_tail)
                c->q_tail->next = p;
            else
                c->q_head = p;
            c->q_tail = p;
            wmsg_release(&m);
            return 2;
        }
        client_tokens_release(&c->ev_tokens);
        client_done_release(&c->ev_done);
        if (is_tok) {
            rc = client_tokens_decode(&m, &c->ev_tokens, c->last_err);
            if (rc == 0)
                fill_tokens_event(c, ev);
        } else {
            rc = client_done_decode(&m, &c->ev_done, c->last_err);
            if (rc == 0)
                fill_done_event(c, ev);
        }
        if (rc == 0)
            rc = 1;
    } else {
        snprintf(c->last_err, sizeof(c->last_err), "unexpected message '%.32s' from kvd",
                 m.type);
        rc = KVD_EMSG;
    }
out:
    wmsg_release(&m);
    nn_freemsg(buf);
    return rc;
}

/* Waits for the next event (of only_id when non-zero), up to timeout_ms. */
static int next_event(struct kvd_client *c, struct kvd_event *ev, int timeout_ms,
                      uint64_t only_id)
{
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        void *buf = NULL;
        size_t len = 0;
        int64_t left = deadline - now_ms();
        int rc = take_msg(c, only_id == 0, left > 0 ? (int)left : 0, &buf, &len);
        if (rc)
            return rc;
        rc = handle_msg(c, buf, len, only_id, ev);
        if (rc == 1)
            return 0;
        if (rc < 0)
            return rc;
    }
}

int kvd_next_event(struct kvd_client *c, struct kvd_event *ev, int timeout_ms)
{
    return next_event(c, ev, timeout_ms, 0);
}

int kvd_generate(struct kvd_client *c, const struct kvd_params *p, kvd_event_cb cb,
                 void *arg, int timeout_ms, struct kvd_event *done_out)
{
    uint64_t id;
    struct kvd_event ev;
    int rc = kvd_submit(c, p, &id);
    if (rc)
        return rc;
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    bool cancelled = false, timed_out = false;
    for (;;) {
        int64_t left = deadline - now_ms();
        rc = next_event(c, &ev, left > 0 ? (int)left : 0, id);
        if (rc == -EAGAIN && !timed_out) {
            /* our deadline: cancel, then give kvd a short grace for the DONE */
            timed_out = true;
            if ((rc = kvd_cancel(c, id)))
                return rc;
            deadline = now_ms() + KVD_CLIENT_CANCEL_GRACE_MS;
            continue;
        }
        if (rc == -EAGAIN)
            return KVD_ETIMEDOUT;
        if (rc)
            return rc;
        if (cb && !cancelled && cb(&ev, arg) != 0 && ev.type != KVD_EVENT_DONE) {
            cancelled = true;
            if ((rc = kvd_cancel(c, id)))
                return rc;
        }
        if (ev.type == KVD_EVENT_DONE)
            break;
    }
    if (done_out)
        *done_out = ev;
    if (timed_out)
        return KVD_ETIMEDOUT;
    if (ev.finish == KVD_FINISH_STOP || ev.finish == KVD_FINISH_LENGTH)
        return 0;
    return ev.code ? ev.code : KVD_EINTERNAL;
}
