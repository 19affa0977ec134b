/* test_kvd_harness.c — see test_kvd_harness.h. */
#include "test_kvd_harness.h"

#include "common/err.h"
#include "proto/admin_msg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KH_POLL_MS 50
#define KH_REQ_TIMEOUT_MS 5000

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void kh_tmpdir(char out[256])
{
    snprintf(out, 256, "/tmp/kvdtest.XXXXXX");
    if (!mkdtemp(out))
        abort();
}

int kh_start(struct kh_kvd *k, const char *bin, const char *dir, const char *sock_name,
             const char *const *extra)
{
    const char *bindir = getenv("KVD_BIN_DIR");
    char path[512], sock[300];
    snprintf(path, sizeof(path), "%s/%s", bindir ? bindir : ".", bin);
    snprintf(k->dir, sizeof(k->dir), "%s", dir);
    snprintf(k->log, sizeof(k->log), "%s/%s.log", dir, bin);
    snprintf(sock, sizeof(sock), "%s/%s", dir, sock_name);
    char *argv[KH_ARGS_MAX];
    int a = 0;
    argv[a++] = path;
    argv[a++] = "--runtime-dir";
    argv[a++] = (char *)dir;
    for (int i = 0; extra && extra[i] && a < KH_ARGS_MAX - 1; i++)
        argv[a++] = (char *)extra[i];
    argv[a] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        int fd = open(k->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
        }
        execv(path, argv);
        _exit(127);
    }
    k->pid = pid;
    uint64_t deadline = now_ms() + KH_START_TIMEOUT_MS;
    while (now_ms() < deadline) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            k->pid = 0;
            k->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            return -ECHILD;
        }
        if (access(sock, F_OK) == 0) {
            if (strcmp(bin, "kvd") != 0)
                return 0;
            struct kvd_client *c;
            if (kvd_connect(dir, 2000, &c) == 0) {
                kvd_close(c);
                return 0;
            }
        }
        sleep_ms(KH_POLL_MS);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    k->pid = 0;
    return -ETIMEDOUT;
}

int kh_stop(struct kh_kvd *k, int sig)
{
    if (k->pid <= 0)
        return -ECHILD;
    if (sig)
        kill(k->pid, sig);
    uint64_t deadline = now_ms() + KH_STOP_TIMEOUT_MS;
    int st;
    while (now_ms() < deadline) {
        if (waitpid(k->pid, &st, WNOHANG) == k->pid) {
            k->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        sleep_ms(KH_POLL_MS);
    }
    kill(k->pid, SIGKILL);
    waitpid(k->pid, NULL, 0);
    k->pid = 0;
    return -ETIMEDOUT;
}

/* One REQ/REP round trip on ipc://dir/name. */
/* The reply's strings point into *raw: nn_freemsg(*raw) after decoding (also on error). */
static int kh_roundtrip(const char *dir, const char *name, struct wbuf *req, struct wmsg *rep,
                        void **raw)
{
    *raw = NULL;
    memset(rep, 0, sizeof(*rep));
    char addr[300];
    snprintf(addr, sizeof(addr), "ipc://%s/%s", dir, name);
    int s = nn_socket(AF_SP, NN_REQ), rc = 0;
    if (s < 0)
        return -nn_errno();
    int to = KH_REQ_TIMEOUT_MS;
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to));
    nn_setsockopt(s, NN_SOL_SOCKET, NN_SNDTIMEO, &to, sizeof(to));
    void *buf = NULL;
    int n;
    char err[WIRE_ERR_LEN];
    if (nn_connect(s, addr) < 0 || nn_send(s, req->sb.data, req->sb.size, 0) < 0 ||
        (n = nn_recv(s, &buf, NN_MSG, 0)) < 0) {
        rc = -nn_errno();
        nn_close(s);
        return rc;
    }
    rc = wmsg_parse(rep, buf, (size_t)n, err);
    *raw = buf;
    nn_close(s);
    return rc;
}

int kh_broker_stats(const char *dir, struct broker_stats *st)
{
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    broker_req_stats_encode(&w);
    void *raw;
    int rc = kh_roundtrip(dir, "broker.sock", &w, &m, &raw);
    wbuf_release(&w);
    if (rc == 0)
        rc = broker_rep_stats_decode(&m, st, err);
    wmsg_release(&m);
    if (raw)
        nn_freemsg(raw);
    return rc;
}

uint32_t kh_wait_pages_used_zero(const char *dir)
{
    struct broker_stats st;
    uint32_t used = UINT32_MAX;
    for (int i = 0; i < 100; i++) {
        if (kh_broker_stats(dir, &st) == 0) {
            used = st.pages_used;
            if (used == 0)
                return 0;
        }
        sleep_ms(KH_POLL_MS);
    }
    return used;
}

/* Admin "workers": worker `index`'s pid and completed steps; -ENOENT if no such worker. */
static int kh_worker_info(const char *dir, uint32_t index, pid_t *pid_out, uint64_t *steps_out)
{
    struct wbuf w;
    struct wmsg m;
    struct admin_workers ws;
    char err[WIRE_ERR_LEN];
    int found = -ENOENT;
    wbuf_init(&w);
    admin_request_encode(ADMIN_REQ_WORKERS, &w);
    void *raw;
    int rc = kh_roundtrip(dir, "admin.sock", &w, &m, &raw);
    wbuf_release(&w);
    memset(&ws, 0, sizeof(ws));
    if (rc == 0 && admin_workers_decode(&m, &ws, err) == 0)
        for (size_t i = 0; i < ws.n; i++)
            if (ws.workers[i].index == index) {
                *pid_out = ws.workers[i].pid;
                *steps_out = ws.workers[i].steps;
                found = 0;
            }
    admin_workers_release(&ws);
    wmsg_release(&m);
    if (raw)
        nn_freemsg(raw);
    return found;
}

pid_t kh_worker_pid(const char *dir, uint32_t index)
{
    pid_t pid = 0;
    uint64_t steps;
    return kh_worker_info(dir, index, &pid, &steps) == 0 ? pid : 0;
}

int64_t kh_worker_steps(const char *dir, uint32_t index)
{
    pid_t pid;
    uint64_t steps = 0;
    int rc = kh_worker_info(dir, index, &pid, &steps);
    return rc < 0 ? rc : (int64_t)steps;
}

int kh_admin_pool(const char *dir, struct admin_pool *out)
{
    struct wbuf w;
    struct wmsg m;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    admin_request_encode(ADMIN_REQ_POOL, &w);
    void *raw;
    int rc = kh_roundtrip(dir, "admin.sock", &w, &m, &raw);
    wbuf_release(&w);
    if (rc == 0)
        rc = admin_pool_decode(&m, out, err);
    wmsg_release(&m);
    if (raw)
        nn_freemsg(raw);
    return rc;
}

pid_t kh_find_pid(const char *bin, const char *needle)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    pid_t found = 0;
    while (d && (e = readdir(d)) && !found) {
        char path[300], cmd[4096];
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0)
            continue;
        snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, cmd, sizeof(cmd) - 1);
        close(fd);
        if (n <= 0)
            continue;
        cmd[n] = '\0';
        size_t l0 = strlen(cmd), lb = strlen(bin);
        bool match_bin = l0 >= lb && strcmp(cmd + l0 - lb, bin) == 0;
        bool match_needle = false;
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(cmd + i) + 1)
            if (strstr(cmd + i, needle))
                match_needle = true;
        if (match_bin && match_needle)
            found = pid;
    }
    if (d)
        closedir(d);
    return found;
}

void kh_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[600];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

int64_t kh_admin_evict(const char *dir)
{
    struct wbuf w;
    struct wmsg m;
    struct admin_evict e;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    admin_request_encode(ADMIN_REQ_EVICT, &w);
    void *raw;
    int rc = kh_roundtrip(dir, "admin.sock", &w, &m, &raw);
    wbuf_release(&w);
    if (rc == 0)
        rc = admin_evict_decode(&m, &e, err);
    wmsg_release(&m);
    if (raw)
        nn_freemsg(raw);
    return rc < 0 ? rc : (int64_t)e.evicted;
}

static int kh_collect_cb(const struct kvd_event *ev, void *arg)
{
    struct kh_result *r = arg;
    if (ev->type != KVD_EVENT_TOKENS)
        return 0;
    r->n_events++;
    for (size_t i = 0; i < ev->n_tokens && r->n_tokens < KH_TOKENS_MAX; i++)
        r->tokens[r->n_tokens++] = ev->tokens[i];
    if (r->text_len + ev->text_len < sizeof(r->text)) {
        memcpy(r->text + r->text_len, ev->text, ev->text_len);
        r->text_len += ev->text_len;
        r->text[r->text_len] = '\0';
    }
    return 0;
}

void kh_generate(struct kvd_client *c, const struct kvd_params *p, int timeout_ms,
                 struct kh_result *out)
{
    struct kvd_event done;
    memset(out, 0, sizeof(*out));
    memset(&done, 0, sizeof(done));
    out->rc = kvd_generate(c, p, kh_collect_cb, out, timeout_ms, &done);
    if (done.type != KVD_EVENT_DONE)
        return;
    out->finish = done.finish;
    out->code = done.code;
    out->prompt_tokens = done.prompt_tokens;
    out->cached_prompt_tokens = done.cached_prompt_tokens;
    out->completion_tokens = done.completion_tokens;
    if (!p->stream) {
        for (size_t i = 0; i < done.n_tokens && out->n_tokens < KH_TOKENS_MAX; i++)
            out->tokens[out->n_tokens++] = done.tokens[i];
        if (done.text_len < sizeof(out->text)) {
            memcpy(out->text, done.text, done.text_len);
            out->text_len = done.text_len;
            out->text[out->text_len] = '\0';
        }
    }
}

void kh_params_greedy(struct kvd_params *p, const uint32_t *toks, size_t n, uint32_t max_tokens)
{
    kvd_params_init(p);
    p->tokens = toks;
    p->n_tokens = n;
    p->max_tokens = max_tokens;
    p->temperature = 0;
}
