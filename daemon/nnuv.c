/* nnuv.c — nanomsg sockets in a libuv loop (see nnuv.h). */
#include "daemon/nnuv.h"

#include "common/log.h"
#include "common/paths.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void nnuv_drain_recv(struct nnuv *n)
{
    while (n->reading && !n->closing) {
        void *buf = NULL;
        int r = nn_recv(n->sock, &buf, NN_MSG, NN_DONTWAIT);
        if (r < 0) {
            int e = nn_errno();
            if (e != EAGAIN && e != EINTR && e != ETERM && e != EBADF && e != EFSM)
                log_warn("nanomsg receive failed on socket %d: %s", n->sock, nn_strerror(e));
            return;
        }
        if (n->recv_cb)
            n->recv_cb(n, buf, (size_t)r);
        nn_freemsg(buf);
    }
}

static void nnuv_rpoll_cb(uv_poll_t *h, int status, int events)
{
    struct nnuv *n = h->data;
    (void)events;
    if (status < 0) {
        log_warn("poll on nanomsg socket %d failed: %s", n->sock, uv_strerror(status));
        return;
    }
    nnuv_drain_recv(n);
}

static int nnuv_try_send_queue(struct nnuv *n)
{
    while (n->q_head) {
        struct nnuv_msg *m = n->q_head;
        if (nn_send(n->sock, m->data, m->len, NN_DONTWAIT) < 0) {
            int e = nn_errno();
            if (e == EAGAIN || e == EINTR)
                return -EAGAIN;
            log_warn("nanomsg send failed on socket %d: %s (message dropped)", n->sock,
                     nn_strerror(e));
        }
        n->q_head = m->next;
        if (!n->q_head)
            n->q_tail = NULL;
        n->q_len--;
        free(m);
    }
    return 0;
}

static void nnuv_spoll_cb(uv_poll_t *h, int status, int events)
{
    struct nnuv *n = h->data;
    (void)events;
    (void)status;
    if (nnuv_try_send_queue(n) == 0 && n->spoll_on) {
        uv_poll_stop(&n->spoll);
        n->spoll_on = false;
    }
}

int nnuv_init(struct nnuv *n, uv_loop_t *loop, int sock, nnuv_recv_cb recv_cb, void *data)
{
    size_t sz = sizeof(int);
    memset(n, 0, sizeof(*n));
    n->sock = sock;
    n->data = data;
    n->recv_cb = recv_cb;
    n->rfd = n->sfd = -1;
    if (recv_cb && nn_getsockopt(sock, NN_SOL_SOCKET, NN_RCVFD, &n->rfd, &sz) < 0)
        return -nn_errno();
    sz = sizeof(int);
    if (nn_getsockopt(sock, NN_SOL_SOCKET, NN_SNDFD, &n->sfd, &sz) < 0)
        return -nn_errno();
    int rc;
    if ((rc = uv_poll_init(loop, &n->spoll, n->sfd)) < 0)
        return rc;
    n->spoll.data = n;
    n->open_handles = 1;
    if (recv_cb) {
        if ((rc = uv_poll_init(loop, &n->rpoll, n->rfd)) < 0) {
            uv_close((uv_handle_t *)&n->spoll, NULL);
            return rc;
        }
        n->rpoll.data = n;
        n->open_handles++;
        n->reading = true;
        uv_poll_start(&n->rpoll, UV_READABLE, nnuv_rpoll_cb);
    }
    return 0;
}

int nnuv_send(struct nnuv *n, const void *buf, size_t len)
{
    if (n->closing)
        return -EPIPE;
    if (!n->q_head) {
        if (nn_send(n->sock, buf, len, NN_DONTWAIT) >= 0)
            return 0;
        int e = nn_errno();
        if (e != EAGAIN && e != EINTR)
            return -e;
    }
    if (n->q_len >= NNUV_SENDQ_MAX)
        return -ENOBUFS;
    struct nnuv_msg *m = malloc(sizeof(*m) + len);
    if (!m)
        return -ENOMEM;
    m->next = NULL;
    m->len = len;
    memcpy(m->data, buf, len);
    if (n->q_tail)
        n->q_tail->next = m;
    else
        n->q_head = m;
    n->q_tail = m;
    n->q_len++;
    if (!n->spoll_on) {
        uv_poll_start(&n->spoll, UV_READABLE, nnuv_spoll_cb);
        n->spoll_on = true;
    }
    return 0;
}

void nnuv_recv_pause(struct nnuv *n)
{
    if (n->reading && n->rfd >= 0) {
        uv_poll_stop(&n->rpoll);
        n->reading = false;
    }
}

void nnuv_recv_resume(struct nnuv *n)
{
    if (!n->reading && n->rfd >= 0 && !n->closing) {
        n->reading = true;
        uv_poll_start(&n->rpoll, UV_READABLE, nnuv_rpoll_cb);
        nnuv_drain_recv(n); /* the fd may already be signalled */
    }
}

size_t nnuv_queued(const struct nnuv *n)
{
    return n->q_len;
}

static void nnuv_handle_closed(uv_handle_t *h)
{
    struct nnuv *n = h->data;
    if (--n->open_handles > 0)
        return;
    nn_close(n->sock);
    n->sock = -1;
    if (n->close_cb)
        n->close_cb(n);
}

void nnuv_close(struct nnuv *n, nnuv_close_cb close_cb)
{
    if (n->closing)
        return;
    n->closing = true;
    n->reading = false;
    n->close_cb = close_cb;
    while (n->q_head) {
        struct nnuv_msg *m = n->q_head;
        n->q_head = m->next;
        free(m);
    }
    n->q_tail = NULL;
    n->q_len = 0;
    uv_close((uv_handle_t *)&n->spoll, nnuv_handle_closed);
    if (n->rfd >= 0 && n->recv_cb)
        uv_close((uv_handle_t *)&n->rpoll, nnuv_handle_closed);
}

int nnuv_listen(struct nnuv *n, uv_loop_t *loop, const char *dir, const char *name,
                int protocol, bool rcvmax_unlimited, nnuv_recv_cb recv_cb, void *data,
                char *path)
{
    char addr[PATHS_MAX], file[PATHS_MAX];
    int rc = paths_ipc_addr(addr, sizeof(addr), dir, name);
    if (rc == 0)
        rc = paths_join(file, sizeof(file), dir, name);
    if (rc < 0)
        return rc;
    unlink(file); /* a stale socket of a crashed kvd or an earlier incarnation */
    int fd = nn_socket(AF_SP, protocol);
    if (fd < 0)
        return -nn_errno();
    int maxsz = -1;
    if (rcvmax_unlimited)
        nn_setsockopt(fd, NN_SOL_SOCKET, NN_RCVMAXSIZE, &maxsz, sizeof(maxsz));
    if (nn_bind(fd, addr) < 0) {
        rc = -nn_errno();
        log_err("cannot bind '%s': %s", addr, nn_strerror(-rc));
        nn_close(fd);
        return rc;
    }
    chmod(file, 0660);
    if ((rc = nnuv_init(n, loop, fd, recv_cb, data)) < 0) {
        nn_close(fd);
        unlink(file);
        return rc;
    }
    if (path)
        memcpy(path, file, sizeof(file));
    return 0;
}
