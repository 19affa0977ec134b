/* broker_harness.h — runs a real kvd-broker process in a temp runtime dir for tests,
 * and talks to it over the real broker.sock (nanomsg REQ). Test code only. */
#ifndef KVD_TESTS_BROKER_HARNESS_H
#define KVD_TESTS_BROKER_HARNESS_H

#include "common/paths.h"
#include "proto/broker_msg.h"

#include <stdbool.h>
#include <sys/types.h>

#define BH_READY_TIMEOUT_MS 15000 /* broker start (pool pre-fault included) */
#define BH_RCV_TIMEOUT_MS 5000    /* one request's reply */
#define BH_ARGS_MAX 32

struct bh {
    pid_t pid;                      /* broker process, 0 when not running */
    char dir[PATHS_MAX];            /* temp runtime dir */
    char sock_path[PATHS_MAX];      /* dir/broker.sock */
    char fd_path[PATHS_MAX];        /* dir/broker.fd */
    char addr[PATHS_MAX + 8];       /* ipc:// address of broker.sock */
};

/* Path of a built binary ($KVD_BIN_DIR/name). */
const char *bh_bin(const char *name, char *buf, size_t cap);
/* Spawns kvd-broker with the test geometry (2 layers, 2 kv heads, head dim 8, block 4,
 * f32) plus extra args (NULL-terminated, may be NULL) in a fresh temp dir; waits for
 * --ready-fd. 0, or -1 when it exited or timed out (its exit status in *status). */
int bh_start(struct bh *h, const char *const *extra, int *status);
/* Spawns kvd-broker with exactly args (after argv[0]) and waits for it to exit (at
 * most timeout_ms); returns its exit status or -1 on timeout (then killed). */
int bh_run(const char *const *args, int timeout_ms);
/* SIGTERM, wait; returns the exit status (-1 when killed by a signal). Removes the dir. */
int bh_stop(struct bh *h);

/* A REQ socket connected to the broker, with BH_RCV_TIMEOUT_MS. >= 0 or -1. */
int bh_connect(const struct bh *h);
/* Sends w (then reset) and parses the reply into m; *raw keeps the bytes m points into:
 * release with bh_reply_free(m, raw). 0, or -1 on a transport failure. */
int bh_call(int sock, struct wbuf *w, struct wmsg *m, void **raw);
int bh_call_raw(int sock, const void *buf, size_t len, struct wmsg *m, void **raw);
void bh_reply_free(struct wmsg *m, void *raw);

/* Convenience wrappers (assert-free; return the broker's code). */
int bh_attach(int sock, uint64_t *lease, struct pool_desc *pool);
int bh_alloc(int sock, uint64_t lease, uint64_t seq, uint32_t n, uint32_t *pages);
int bh_stats(int sock, struct broker_stats *s);

#endif
