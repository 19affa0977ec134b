/* server.h — kvd-broker's sockets on one libuv loop.
 *
 * broker.sock: nanomsg NN_REP bound at ipc://DIR/broker.sock; its NN_RCVFD is polled
 *   with uv_poll, every request is handled synchronously by broker_handle() and answered
 *   with NN_DONTWAIT, so the loop never blocks on a client.
 * broker.fd: AF_UNIX SOCK_STREAM listener (non-blocking, polled); each connection gets
 *   the pool hand-over (pool_attach_serve: SO_PEERCRED uid check, one SCM_RIGHTS frame)
 *   and is closed.
 * A repeating timer expires silent leases, refreshes the systemd STATUS= line and sends
 *   WATCHDOG=1 when the unit has a watchdog. SIGTERM/SIGINT stop the loop cleanly.
 * Sockets are mode 0660 in a 0700 runtime dir and are unlinked at stop. Loop thread only.
 */
#ifndef KVD_BROKER_SERVER_H
#define KVD_BROKER_SERVER_H

#include "broker/core.h"
#include "common/mem.h"
#include "common/paths.h"
#include "proto/wire.h"

#include <uv.h>

#define SERVER_TICK_MIN_MS 10       /* lease timer period floor */
#define SERVER_STATUS_EVERY_MS 1000 /* systemd STATUS= refresh period */
#define SERVER_FD_BACKLOG 64        /* pending broker.fd connections */

struct broker_server {
    uv_loop_t *loop;
    struct broker *core;             /* borrowed; outlives the server */
    const struct mem_pool *mem;      /* borrowed: what broker.fd hands out */
    char dir[PATHS_MAX];
    char sock_path[PATHS_MAX];       /* DIR/broker.sock */
    char fd_path[PATHS_MAX];         /* DIR/broker.fd */
    int nn_sock;                     /* -1 when closed */
    int fd_listen;                   /* -1 when closed */
    uv_poll_t nn_poll;
    uv_poll_t fd_poll;
    uv_timer_t tick;
    uv_signal_t sig_term;
    uv_signal_t sig_int;
    struct wbuf reply;
    uint64_t watchdog_ms;            /* 0: no systemd watchdog */
    uint64_t last_status_ms;
    uint64_t last_watchdog_ms;
    uint64_t attaches;               /* broker.fd hand-overs served */
    int n_handles;                   /* open uv handles, for a clean close */
    bool stopping;
};

/* Binds both sockets in dir, starts polls, timer and signal handlers. 0, or: -EADDRINUSE
 * (another broker answers on broker.fd), -errno; nothing stays open on failure. */
int broker_server_start(struct broker_server *s, uv_loop_t *loop, struct broker *core,
                        const struct mem_pool *mem, const char *dir);
/* Closes every handle and socket and unlinks the socket files; the loop then runs out.
 * Idempotent. */
void broker_server_stop(struct broker_server *s);

#endif
