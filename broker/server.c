#include "broker/server.h"

#include "common/err.h"
#include "common/fdpass.h"
#include "common/log.h"
#include "common/pool_attach.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#define SERVER_SOCK_MODE 0660

static void handle_closed_cb(uv_handle_t *h)
{
    struct broker_server *s = h->data;
    s->n_handles--;
}

static void close_handle(uv_handle_t *h)
{
    if (h->data && !uv_is_closing(h))
        uv_close(h, handle_closed_cb);
}

/* ---- broker.sock --------------------------------------------------------------- */

static void nn_readable_cb(uv_poll_t *p, int status, int events)
{
    struct broker_server *s = p->data;
    (void)events;
    if (status < 0) {
        log_err("cannot poll '%s': %s", s->sock_path, uv_strerror(status));
        return;
    }
    for (;;) {
        void *msg = NULL;
        int n = nn_recv(s->nn_sock, &msg, NN_MSG, NN_DONTWAIT);
        if (n < 0) {
            int e = nn_errno();
            if (e != EAGAIN && e != EINTR)
                log_err("cannot receive on '%s': %s", s->sock_path, nn_strerror(e));
            return;
        }
        msgpack_sbuffer_clear(&s->reply.sb);
        broker_handle(s->core, msg, (size_t)n, uv_now(s->loop), &s->reply);
        nn_freemsg(msg);
        if (nn_send(s->nn_sock, s->reply.sb.data, s->reply.sb.size, NN_DONTWAIT) < 0)
            log_warn("cannot send a reply on '%s': %s (the client will time out)",
                     s->sock_path, nn_strerror(nn_errno()));
    }
}

static int nn_open(struct broker_server *s)
{
    char addr[PATHS_MAX + 8];
    int rc = paths_ipc_addr(addr, sizeof(addr), s->dir, PATHS_SOCK_BROKER);
    if (rc)
        return rc;
    int sock = nn_socket(AF_SP, NN_REP);
    if (sock < 0)
        return -nn_errno();
    int maxsz = (int)WIRE_MSG_MAX + 1; /* larger ones reach wmsg_parse and get an error */
    int fd;
    size_t fdsz = sizeof(fd);
    if (nn_setsockopt(sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &maxsz, sizeof(maxsz)) < 0 ||
        nn_bind(sock, addr) < 0 || nn_getsockopt(sock, NN_SOL_SOCKET, NN_RCVFD, &fd, &fdsz) < 0) {
        rc = -nn_errno();
        nn_close(sock);
        return rc;
    }
    chmod(s->sock_path, SERVER_SOCK_MODE);
    s->nn_sock = sock;
    if ((rc = uv_poll_init(s->loop, &s->nn_poll, fd)))
        return rc;
    s->nn_poll.data = s;
    s->n_handles++;
    return uv_poll_start(&s->nn_poll, UV_READABLE, nn_readable_cb);
}

/* ---- broker.fd ----------------------------------------------------------------- */

static void fd_accept_cb(uv_poll_t *p, int status, int events)
{
    struct broker_server *s = p->data;
    (void)events;
    if (status < 0) {
        log_err("cannot poll '%s': %s", s->fd_path, uv_strerror(status));
        return;
    }
    for (;;) {
        int c = accept4(s->fd_listen, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                log_err("cannot accept on '%s': %s", s->fd_path, strerror(errno));
            return;
        }
        pid_t pid = 0;
        int rc = fdpass_peer_check(c, &pid);
        if (rc == 0)
            rc = pool_attach_serve(c, s->mem);
        if (rc)
            log_warn("pool hand-over on '%s' refused or failed (pid %d): %s", s->fd_path,
                     (int)pid, kvd_strerror(rc));
        else {
            s->attaches++;
            log_info("pool handed over to pid %d (%u fds)", (int)pid, s->mem->n_fds);
        }
        close(c);
    }
}

/* An existing socket file: refuse if a broker answers, else it is stale. */
static int fd_path_claim(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int t = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (t < 0)
        return -errno;
    int rc = connect(t, (struct sockaddr *)&sa, sizeof(sa));
    int e = errno;
    close(t);
    if (rc == 0)
        return -EADDRINUSE;
    if (e == ECONNREFUSED)
        unlink(path);
    return 0;
}

static int fd_open(struct broker_server *s)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(s->fd_path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, s->fd_path);
    int rc = fd_path_claim(s->fd_path);
    if (rc)
        return rc;
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l < 0)
        return -errno;
    if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(s->fd_path, SERVER_SOCK_MODE) < 0 ||
        listen(l, SERVER_FD_BACKLOG) < 0) {
        rc = -errno;
        close(l);
        return rc;
    }
    s->fd_listen = l;
    if ((rc = uv_poll_init(s->loop, &s->fd_poll, l)))
        return rc;
    s->fd_poll.data = s;
    s->n_handles++;
    return uv_poll_start(&s->fd_poll, UV_READABLE, fd_accept_cb);
}

/* ---- timer and signals ---------------------------------------------------------- */

static void tick_cb(uv_timer_t *t)
{
    struct broker_server *s = t->data;
    uint64_t now = uv_now(s->loop);
    broker_expire(s->core, now);
    if (now - s->last_status_ms >= SERVER_STATUS_EVERY_MS) {
        const struct pool *p = &s->core->pool;
        sd_notifyf(0, "STATUS=%u pages: %u used, %u cached, %u free; %u leases", p->n_pages,
                   pool_count_used(p), pool_count_cached(p), pool_count_free(p),
                   s->core->leases.n);
        s->last_status_ms = now;
    }
    if (s->watchdog_ms && now - s->last_watchdog_ms >= s->watchdog_ms / 2) {
        sd_notify(0, "WATCHDOG=1");
        s->last_watchdog_ms = now;
    }
}

static void signal_cb(uv_signal_t *h, int signum)
{
    struct broker_server *s = h->data;
    log_info("stopping on signal %d", signum);
    sd_notify(0, "STOPPING=1");
    broker_server_stop(s);
}

int broker_server_start(struct broker_server *s, uv_loop_t *loop, struct broker *core,
                        const struct mem_pool *mem, const char *dir)
{
    int rc;
    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->core = core;
    s->mem = mem;
    s->nn_sock = -1;
    s->fd_listen = -1;
    wbuf_init(&s->reply);
    snprintf(s->dir, sizeof(s->dir), "%s", dir);
    if ((rc = paths_join(s->sock_path, sizeof(s->sock_path), dir, PATHS_SOCK_BROKER)) ||
        (rc = paths_join(s->fd_path, sizeof(s->fd_path), dir, PATHS_SOCK_FD)))
        goto out_stop;
    if ((rc = fd_open(s))) { /* first: it tells whether another broker runs here */
        log_err("cannot listen on '%s': %s", s->fd_path,
                rc == -EADDRINUSE ? "another broker is serving it" : kvd_strerror(rc));
        goto out_stop;
    }
    if ((rc = nn_open(s))) {
        log_err("cannot bind '%s': %s", s->sock_path, kvd_strerror(rc));
        goto out_stop;
    }
    uint32_t period = core->lease_timeout_ms / 4;
    if (period < SERVER_TICK_MIN_MS)
        period = SERVER_TICK_MIN_MS;
    uint64_t wd_usec = 0;
    if (sd_watchdog_enabled(0, &wd_usec) > 0) {
        s->watchdog_ms = wd_usec / 1000;
        if (s->watchdog_ms / 4 < period)
            period = (uint32_t)(s->watchdog_ms / 4 ? s->watchdog_ms / 4 : 1);
    }
    uv_timer_init(loop, &s->tick);
    s->tick.data = s;
    s->n_handles++;
    uv_timer_start(&s->tick, tick_cb, period, period);
    uv_signal_init(loop, &s->sig_term);
    s->sig_term.data = s;
    s->n_handles++;
    uv_signal_init(loop, &s->sig_int);
    s->sig_int.data = s;
    s->n_handles++;
    if ((rc = uv_signal_start(&s->sig_term, signal_cb, SIGTERM)) ||
        (rc = uv_signal_start(&s->sig_int, signal_cb, SIGINT)))
        goto out_stop;
    return 0;
out_stop:
    broker_server_stop(s);
    return rc;
}

void broker_server_stop(struct broker_server *s)
{
    if (s->stopping)
        return;
    s->stopping = true;
    close_handle((uv_handle_t *)&s->nn_poll);
    close_handle((uv_handle_t *)&s->fd_poll);
    close_handle((uv_handle_t *)&s->tick);
    close_handle((uv_handle_t *)&s->sig_term);
    close_handle((uv_handle_t *)&s->sig_int);
    if (s->nn_sock >= 0) {
        nn_close(s->nn_sock);
        s->nn_sock = -1;
        unlink(s->sock_path);
    }
    if (s->fd_listen >= 0) {
        close(s->fd_listen);
        s->fd_listen = -1;
        unlink(s->fd_path);
    }
    wbuf_release(&s->reply);
}
