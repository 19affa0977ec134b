/* kvctl_admin.h — one admin.sock connection (NN_REQ) for kvctl and kvd-bench.
 *
 * admin_conn_open checks first that something listens on DIR/admin.sock (a missing or
 * stale socket fails at once with -ENOENT / -ECONNREFUSED, never a hang); every call
 * then waits at most timeout_ms for the reply (-ETIMEDOUT). A reply that is an "err"
 * message returns its code, with kvd's message in err. Single-threaded.
 */
#ifndef KVD_TOOLS_KVCTL_ADMIN_H
#define KVD_TOOLS_KVCTL_ADMIN_H

#include "proto/admin_msg.h"
#include "proto/wire.h"

#include <stddef.h>

struct admin_conn {
    int sock;                     /* NN_REQ, -1 when closed */
    int timeout_ms;
    char path[256];               /* admin.sock path, for messages */
};

/* A received reply: m points into buf; release with admin_reply_release. */
struct admin_reply {
    void *buf;                    /* nanomsg message */
    struct wmsg m;
};

int admin_conn_open(struct admin_conn *c, const char *runtime_dir, int timeout_ms,
                    char err[WIRE_ERR_LEN]);
void admin_conn_close(struct admin_conn *c);
/* Sends request r and waits for its reply (any non-"err" reply is returned parsed). */
int admin_conn_call(struct admin_conn *c, enum admin_req r, struct admin_reply *out,
                    char err[WIRE_ERR_LEN]);
void admin_reply_release(struct admin_reply *r);

/* Convenience: call + decode a pool reply. */
int admin_conn_pool(struct admin_conn *c, struct admin_pool *out, char err[WIRE_ERR_LEN]);

#endif
