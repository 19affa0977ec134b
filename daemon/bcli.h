/* bcli.h — kvd's asynchronous client of kvd-broker (broker.sock, NN_REQ).
 *
 * One request is in flight at a time (REQ semantics); the rest wait in a FIFO, so the
 * broker sees requests in the order they were made (a free issued before an alloc is
 * handled first). Each request's callback runs exactly once: with status 0 and the
 * parsed reply (possibly an "err" reply: use the broker_rep_*_decode functions), or
 * with KVD_EPEER (no reply within BCLI_REPLY_TIMEOUT_MS) / KVD_ESHUTDOWN (closing),
 * m NULL. A call that fails (returns < 0) never runs its callback.
 * Lease: bcli_attach obtains one; a heartbeat timer renews it every third of the lease
 * timeout. Loop thread only.
 */
#ifndef KVD_DAEMON_BCLI_H
#define KVD_DAEMON_BCLI_H

#include "common/mem.h"
#include "daemon/nnuv.h"
#include "proto/wire.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define BCLI_REPLY_TIMEOUT_MS 5000 /* a broker silent this long is dead (KVD_EPEER) */
#define BCLI_QUEUE_MAX 100000      /* requests waiting; more is a bug or a dead broker */

struct bcli;
typedef void (*bcli_cb)(struct bcli *b, int status, const struct wmsg *m, void *arg);

struct bcli_req {
    struct bcli_req *next;
    bcli_cb cb;
    void *arg;
    size_t len;
    char data[];
};

struct bcli {
    void *data; /* owner */
    uv_loop_t *loop;
    struct nnuv nn;
    uv_timer_t reply_timer;
    uv_timer_t hb_timer;
    struct bcli_req *head, *tail; /* head is in flight when in_flight */
    size_t queued;
    bool in_flight, closing, nn_open;
    uint64_t lease; /* 0 until attached */
    uint32_t lease_timeout_ms;
    struct pool_desc pool; /* from the attach reply */
    uint64_t requests, failures;
    int open_handles;
    void (*close_cb)(struct bcli *b);
    /* Set by the owner: the broker answered a heartbeat with ENOTFOUND (lease expired,
     * or detached by someone else). The heartbeat stops; lease is 0. */
    void (*lease_lost_cb)(struct bcli *b);
};

/* Connects to addr (ipc://...). 0 or a negative errno. */
int bcli_init(struct bcli *b, uv_loop_t *loop, const char *addr, void *data);

/* Queues the message in w (copied; w is reset). 0, -ENOBUFS, -ENOMEM or KVD_ESHUTDOWN. */
int bcli_call(struct bcli *b, struct wbuf *w, bcli_cb cb, void *arg);

/* Attaches with expect (NULL: no check); on success b->lease / b->pool are set and the
 * heartbeat runs before cb(status 0). cb gets the broker's error code otherwise. */
int bcli_attach(struct bcli *b, const char *client, const struct pool_desc *expect, bcli_cb cb,
                void *arg);

/* Fails every queued request with KVD_ESHUTDOWN, closes. close_cb may be NULL. */
void bcli_close(struct bcli *b, void (*close_cb)(struct bcli *b));

#endif
