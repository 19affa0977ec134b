/* test_kvd_harness.h — runs the real kvd (which spawns the real kvd-broker and
 * kvd-worker) in a temporary runtime dir for end-to-end tests, and reads the broker's
 * own page accounting. Test process only; no globals. */
#ifndef KVD_TEST_KVD_HARNESS_H
#define KVD_TEST_KVD_HARNESS_H

#include "kvd_client.h"
#include "proto/broker_msg.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define KH_START_TIMEOUT_MS 20000 /* kvd + broker + workers up and serving */
#define KH_STOP_TIMEOUT_MS 20000  /* SIGTERM to exit */
#define KH_ARGS_MAX 32
#define KH_TOKENS_MAX 4096 /* generated ids one helper call collects */

struct kh_kvd {
    pid_t pid;
    char dir[256];
    char log[300];
    int status; /* exit status when kh_start saw it exit (-ECHILD) */
};

/* A fresh temp dir (mkdtemp under /tmp). */
void kh_tmpdir(char out[256]);
/* Starts bin (e.g. "kvd", "kvd-broker") from $KVD_BIN_DIR with --runtime-dir dir and the
 * NULL-terminated extra args, stderr to dir/<bin>.log. Waits until sock_name exists in
 * dir and (for kvd) a client can connect. 0, -ECHILD (it exited first; k->status holds
 * its exit status), -ETIMEDOUT or -errno. */
int kh_start(struct kh_kvd *k, const char *bin, const char *dir, const char *sock_name,
             const char *const *extra);
/* Sends sig (0: none, it was told already), waits. Returns the exit status (0..255), 128+signal, or
 * -ETIMEDOUT (then it was SIGKILLed). */
int kh_stop(struct kh_kvd *k, int sig);
/* Broker stats straight from broker.sock in dir. */
int kh_broker_stats(const char *dir, struct broker_stats *st);
/* Waits (<= 5 s) until the broker reports 0 pages in use; returns the last count. */
uint32_t kh_wait_pages_used_zero(const char *dir);
/* pid of worker `index` (admin "workers"); 0 if unknown. */
pid_t kh_worker_pid(const char *dir, uint32_t index);
/* Steps worker `index` completed (admin "workers"); -ENOENT if kvd has no such worker. */
int64_t kh_worker_steps(const char *dir, uint32_t index);
/* Admin "pool" (kvd's view): 0 or a negative code. */
struct admin_pool;
int kh_admin_pool(const char *dir, struct admin_pool *out);
/* pid of a process whose argv[0] ends with `bin` and whose command line contains
 * `needle` (e.g. the runtime dir); 0 if none. Scans /proc. */
pid_t kh_find_pid(const char *bin, const char *needle);
/* Removes dir and the files in it (logs, stale sockets); for passing tests. */
void kh_rmdir(const char *dir);
/* Sends admin "evict"; returns the count or a negative code. */
int64_t kh_admin_evict(const char *dir);

/* Result of a collected request. */
struct kh_result {
    int rc; /* kvd_generate's result */
    enum kvd_finish finish;
    int code;
    uint32_t prompt_tokens, cached_prompt_tokens, completion_tokens;
    uint32_t tokens[KH_TOKENS_MAX];
    size_t n_tokens; /* from stream events (stream) or done (non-stream) */
    char text[KH_TOKENS_MAX * 8];
    size_t text_len;
    uint32_t n_events; /* TOKENS events */
};
/* One request on c, waits for its DONE (timeout_ms), collects events. */
void kh_generate(struct kvd_client *c, const struct kvd_params *p, int timeout_ms,
                 struct kh_result *out);
/* Greedy params for token ids. */
void kh_params_greedy(struct kvd_params *p, const uint32_t *toks, size_t n, uint32_t max_tokens);

#endif
