#include "broker_harness.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define BH_READY_FD 3 /* fd number the broker gets for --ready-fd */

const char *bh_bin(const char *name, char *buf, size_t cap)
{
    const char *d = getenv("KVD_BIN_DIR");
    snprintf(buf, cap, "%s/%s", d && *d ? d : "bin", name);
    return buf;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Spawns the broker with argv; ready_w (if >= 0) becomes fd BH_READY_FD in the child. */
static pid_t spawn_broker(const char *const *args, int ready_w)
{
    char bin[PATHS_MAX];
    const char *argv[BH_ARGS_MAX + 2];
    int n = 0;
    argv[n++] = bh_bin("kvd-broker", bin, sizeof(bin));
    for (int i = 0; args && args[i] && n < BH_ARGS_MAX; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (ready_w >= 0)
        posix_spawn_file_actions_adddup2(&fa, ready_w, BH_READY_FD);
    else /* bh_run: keep --help text out of the test log */
        posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc ? -1 : pid;
}

int bh_start(struct bh *h, const char *const *extra, int *status)
{
    memset(h, 0, sizeof(*h));
    snprintf(h->dir, sizeof(h->dir), "/tmp/kvd-bt-XXXXXX");
    if (!mkdtemp(h->dir))
        return -1;
    paths_join(h->sock_path, sizeof(h->sock_path), h->dir, PATHS_SOCK_BROKER);
    paths_join(h->fd_path, sizeof(h->fd_path), h->dir, PATHS_SOCK_FD);
    paths_ipc_addr(h->addr, sizeof(h->addr), h->dir, PATHS_SOCK_BROKER);
    const char *args[BH_ARGS_MAX];
    int n = 0;
    const char *base[] = {"--runtime-dir", h->dir, "--layers", "2", "--kv-heads", "2",
                          "--head-dim", "8", "--block-size", "4", "--model-fp", "0xfeed",
                          "--ready-fd", "3", "--log-level", "warn"};
    bool backend_given = false;
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
        args[n++] = base[i];
    for (int i = 0; extra && extra[i] && n < BH_ARGS_MAX - 3; i++) {
        backend_given |= strcmp(extra[i], "--backend") == 0;
        args[n++] = extra[i];
    }
    if (!backend_given) { /* tests use the host pool unless they ask otherwise */
        args[n++] = "--backend";
        args[n++] = "host";
    }
    args[n] = NULL;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    h->pid = spawn_broker(args, p[1]);
    close(p[1]);
    if (h->pid < 0) {
        close(p[0]);
        h->pid = 0;
        return -1;
    }
    char buf[16] = "";
    struct pollfd pf = {p[0], POLLIN, 0};
    ssize_t k = 0;
    if (poll(&pf, 1, BH_READY_TIMEOUT_MS) == 1)
        k = read(p[0], buf, sizeof(buf) - 1);
    close(p[0]);
    if (k == 6 && memcmp(buf, "ready\n", 6) == 0)
        return 0;
    int st = -1;
    kill(h->pid, SIGKILL);
    waitpid(h->pid, &st, 0);
    if (status)
        *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    h->pid = 0;
    rmdir(h->dir);
    return -1;
}

int bh_run(const char *const *args, int timeout_ms)
{
    pid_t pid = spawn_broker(args, -1);
    if (pid < 0)
        return -1;
    int64_t end = now_ms() + timeout_ms;
    int st;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(10000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int bh_stop(struct bh *h)
{
    int st = -1;
    if (h->pid > 0) {
        kill(h->pid, SIGTERM);
        waitpid(h->pid, &st, 0);
    }
    h->pid = 0;
    unlink(h->sock_path); /* only matters if the broker failed to clean up */
    unlink(h->fd_path);
    rmdir(h->dir);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int bh_connect(const struct bh *h)
{
    int s = nn_socket(AF_SP, NN_REQ);
    int to = BH_RCV_TIMEOUT_MS, resend = 3600000; /* never resend: requests are not idempotent */
    if (s < 0)
        return -1;
    if (nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to)) < 0 ||
        nn_setsockopt(s, NN_REQ, NN_REQ_RESEND_IVL, &resend, sizeof(resend)) < 0 ||
        nn_connect(s, h->addr) < 0) {
        nn_close(s);
        return -1;
    }
    return s;
}

int bh_call_raw(int sock, const void *buf, size_t len, struct wmsg *m, void **raw)
{
    char err[WIRE_ERR_LEN];
    *raw = NULL;
    memset(m, 0, sizeof(*m));
    if (nn_send(sock, buf, len, 0) < 0)
        return -1;
    int n = nn_recv(sock, raw, NN_MSG, 0);
    if (n < 0) {
        *raw = NULL;
        return -1;
    }
    if (wmsg_parse(m, *raw, (size_t)n, err)) {
        fprintf(stderr, "unparsable reply: %s\n", err);
        return -1;
    }
    return 0;
}

int bh_call(int sock, struct wbuf *w, struct wmsg *m, void **raw)
{
    int rc = bh_call_raw(sock, w->sb.data, w->sb.size, m, raw);
    wbuf_release(w);
    return rc;
}

void bh_reply_free(struct wmsg *m, void *raw)
{
    wmsg_release(m);
    if (raw)
        nn_freemsg(raw);
}

int bh_attach(int sock, uint64_t *lease, struct pool_desc *pool)
{
    struct wbuf w;
    struct wmsg m;
    void *raw;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    broker_req_attach_encode(&w, "test", (uint32_t)getpid(), NULL);
    if (bh_call(sock, &w, &m, &raw))
        return KVD_EPEER;
    int rc = broker_rep_attach_decode(&m, lease, NULL, pool, err);
    bh_reply_free(&m, raw);
    return rc;
}

int bh_alloc(int sock, uint64_t lease, uint64_t seq, uint32_t n, uint32_t *pages)
{
    struct wbuf w;
    struct wmsg m;
    void *raw;
    uint32_t *p = NULL;
    size_t np = 0;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    broker_req_alloc_encode(&w, lease, seq, n);
    if (bh_call(sock, &w, &m, &raw))
        return KVD_EPEER;
    int rc = broker_rep_alloc_decode(&m, &p, &np, err);
    if (rc == 0 && pages)
        memcpy(pages, p, np * sizeof(*p));
    free(p);
    bh_reply_free(&m, raw);
    return rc;
}

int bh_stats(int sock, struct broker_stats *s)
{
    struct wbuf w;
    struct wmsg m;
    void *raw;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    broker_req_stats_encode(&w);
    if (bh_call(sock, &w, &m, &raw))
        return KVD_EPEER;
    int rc = broker_rep_stats_decode(&m, s, err);
    bh_reply_free(&m, raw);
    return rc;
}
