/* nnuv.h — one nanomsg socket driven by a libuv loop, never blocking it.
 *
 * The socket's NN_RCVFD is polled (uv_poll) and every ready message is received with
 * NN_DONTWAIT and handed to recv_cb. Sends never block: nnuv_send copies the message
 * and tries NN_DONTWAIT; if the socket would block, the copy waits in a FIFO (at most
 * NNUV_SENDQ_MAX messages) and NN_SNDFD is polled until it drains. For REP sockets that
 * answer asynchronously, nnuv_recv_pause/resume stop reading until the reply is sent
 * (a cooked REP socket remembers only the latest request).
 * Lifecycle: nnuv_init (takes ownership of the socket on success) ... nnuv_close; the
 * struct must stay valid until close_cb runs. Loop thread only.
 */
#ifndef KVD_DAEMON_NNUV_H
#define KVD_DAEMON_NNUV_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#define NNUV_SENDQ_MAX 65536 /* queued outgoing messages before nnuv_send says -ENOBUFS */

struct nnuv;
/* A message arrived. buf is valid only during the call. */
typedef void (*nnuv_recv_cb)(struct nnuv *n, const void *buf, size_t len);
typedef void (*nnuv_close_cb)(struct nnuv *n);

struct nnuv_msg {
    struct nnuv_msg *next;
    size_t len;
    char data[];
};

struct nnuv {
    /* public */
    void *data; /* the owner's pointer */
    int sock;   /* the nanomsg socket (read-only) */
    /* private */
    uv_poll_t rpoll, spoll;
    int rfd, sfd; /* -1 when the socket cannot do that direction */
    bool reading, spoll_on, closing;
    int open_handles;
    struct nnuv_msg *q_head, *q_tail;
    size_t q_len;
    nnuv_recv_cb recv_cb;
    nnuv_close_cb close_cb;
};

/* Wraps sock. recv_cb may be NULL for a send-only socket. 0 or a negative errno (the
 * socket stays the caller's then). */
int nnuv_init(struct nnuv *n, uv_loop_t *loop, int sock, nnuv_recv_cb recv_cb, void *data);

/* Binds a fresh nanomsg socket of `protocol` (NN_REP, NN_PAIR) at dir/name (mode 0660,
 * a stale socket file removed first) and wraps it as nnuv_init does. rcvmax_unlimited
 * lifts nanomsg's 1 MiB receive limit (kvd's own WIRE_MSG_MAX checks still apply).
 * If path is not NULL it receives the socket file's path (PATHS_MAX bytes). 0, or a
 * negative errno with nothing left open (bind failures are logged). */
int nnuv_listen(struct nnuv *n, uv_loop_t *loop, const char *dir, const char *name,
                int protocol, bool rcvmax_unlimited, nnuv_recv_cb recv_cb, void *data,
                char *path);

/* Sends a copy of buf. 0 (sent or queued), -ENOBUFS (queue full), -ENOMEM, -EPIPE
 * (closing), or another negative errno from nanomsg (message dropped). */
int nnuv_send(struct nnuv *n, const void *buf, size_t len);

void nnuv_recv_pause(struct nnuv *n);
void nnuv_recv_resume(struct nnuv *n);
/* Messages waiting in the send queue. */
size_t nnuv_queued(const struct nnuv *n);

/* Stops polling, drops unsent messages, closes the socket; close_cb (may be NULL) runs
 * once the handles are closed. Idempotent. */
void nnuv_close(struct nnuv *n, nnuv_close_cb close_cb);

#endif
