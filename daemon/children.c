/* children.c — the kvd-broker kvd spawns when no --broker is given.
 *
 * The broker gets --ready-fd 3: a pipe whose other end kvd reads; "ready\n" on it means
 * broker.sock serves. No readiness within KVD_BROKER_READY_TIMEOUT_MS, or an exit before
 * it, is a start-up failure. Once serving, the broker's death is handed to
 * kvd_broker_lost() (main.c): a new broker is spawned, workers re-attach, and every
 * sequence is recomputed from its tokens (DESIGN.md principle 1).
 */
#include "daemon/kvd.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BROKER_ARGV_MAX 32
#define READY_LINE "ready\n"

struct broker_spawn_ctx {
    struct kvd *d;
    uv_pipe_t pipe;
    uv_timer_t timer;
    char buf[16];
    size_t len;
    void (*ready_cb)(struct kvd *d, int status);
    bool reported;
    int open_handles;
};

static void spawn_ctx_closed(uv_handle_t *h)
{
    struct broker_spawn_ctx *c = h->data;
    if (--c->open_handles == 0)
        free(c);
}

static void spawn_report(struct broker_spawn_ctx *c, int status)
{
    if (c->reported)
        return;
    c->reported = true;
    uv_read_stop((uv_stream_t *)&c->pipe);
    uv_close((uv_handle_t *)&c->pipe, spawn_ctx_closed);
    uv_close((uv_handle_t *)&c->timer, spawn_ctx_closed);
    struct kvd *d = c->d;
    d->broker_ready_ctx = NULL;
    c->ready_cb(d, status);
}

static void ready_alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct broker_spawn_ctx *c = h->data;
    (void)hint;
    b->base = c->buf + c->len;
    b->len = sizeof(c->buf) - 1 - c->len;
}

static void ready_read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct broker_spawn_ctx *c = s->data;
    (void)b;
    if (n < 0) {
        log_err("kvd-broker closed its ready pipe without saying ready");
        spawn_report(c, KVD_EPEER);
        return;
    }
    c->len += (size_t)n;
    c->buf[c->len] = '\0';
    if (strstr(c->buf, READY_LINE))
        spawn_report(c, 0);
    else if (c->len >= sizeof(c->buf) - 1)
        spawn_report(c, KVD_EPEER);
}

static void ready_timeout_cb(uv_timer_t *t)
{
    struct broker_spawn_ctx *c = t->data;
    log_err("kvd-broker not ready after %d ms", KVD_BROKER_READY_TIMEOUT_MS);
    spawn_report(c, KVD_ETIMEDOUT);
}

static void broker_proc_closed(uv_handle_t *h)
{
    struct kvd *d = h->data;
    d->broker_live = false;
    kvd_maybe_finish_shutdown(d);
}

static void broker_exit_cb(uv_process_t *p, int64_t status, int sig)
{
    struct kvd *d = p->data;
    uv_close((uv_handle_t *)p, broker_proc_closed);
    if (d->broker_ready_ctx) {
        log_err("kvd-broker exited before ready (status %lld, signal %d); if another broker "
                "serves this runtime dir, stop it, or reuse it with `kvd --broker DIR`",
                (long long)status, sig);
        spawn_report(d->broker_ready_ctx, KVD_EPEER);
        return;
    }
    if (d->shutting_down) {
        log_info("kvd-broker exited (status %lld, signal %d)", (long long)status, sig);
        return;
    }
    log_err("kvd-broker died (status %lld, signal %d): the KV pool is gone", (long long)status,
            sig);
    kvd_broker_lost(d);
}

int broker_spawn(struct kvd *d, void (*ready_cb)(struct kvd *d, int status))
{
    struct broker_spawn_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->d = d;
    c->ready_cb = ready_cb;
    char bin[CONFIG_PATH_MAX + 16], bs[16], pool[32], ppid[16];
    snprintf(ppid, sizeof(ppid), "%d", (int)getpid());
    snprintf(bin, sizeof(bin), "%s/kvd-broker", d->bin_dir);
    snprintf(bs, sizeof(bs), "%u", d->cfg.block_size);
    snprintf(pool, sizeof(pool), "%llu", (unsigned long long)d->cfg.pool_bytes);
    static const char *const lvl[] = {"error", "warn", "info", "debug"};
    char *args[BROKER_ARGV_MAX];
    int a = 0;
    args[a++] = bin;
    args[a++] = "--runtime-dir";
    args[a++] = d->rundir;
    args[a++] = "--model";
    args[a++] = d->model.path;
    args[a++] = "--block-size";
    args[a++] = bs;
    args[a++] = "--kv-dtype";
    args[a++] = (char *)kv_dtype_get(d->cfg.kv_dtype)->name;
    args[a++] = "--pool-bytes";
    args[a++] = pool;
    args[a++] = "--backend";
    args[a++] = d->cfg.backend;
    args[a++] = "--ready-fd";
    args[a++] = "3";
    args[a++] = "--exit-with-parent"; /* a SIGKILLed kvd leaves no broker behind */
    args[a++] = ppid;
    args[a++] = "--log-level";
    args[a++] = (char *)lvl[d->cfg.log_level];
    args[a] = NULL;
    uv_pipe_init(d->loop, &c->pipe, 0);
    uv_timer_init(d->loop, &c->timer);
    c->pipe.data = c->timer.data = c;
    c->open_handles = 2;
    uv_stdio_container_t stdio[4] = {
        {.flags = UV_IGNORE},
        {.flags = UV_INHERIT_FD, .data.fd = 1},
        {.flags = UV_INHERIT_FD, .data.fd = 2},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&c->pipe}};
    uv_process_options_t o = {
        .exit_cb = broker_exit_cb, .file = bin, .args = args, .stdio_count = 4, .stdio = stdio};
    d->broker_proc.data = d;
    int rc = uv_spawn(d->loop, &d->broker_proc, &o);
    if (rc < 0) {
        log_err("cannot spawn '%s': %s", bin, uv_strerror(rc));
        uv_close((uv_handle_t *)&d->broker_proc, NULL);
        c->reported = true;
        uv_close((uv_handle_t *)&c->pipe, spawn_ctx_closed);
        uv_close((uv_handle_t *)&c->timer, spawn_ctx_closed);
        return rc;
    }
    d->broker_spawned = d->broker_live = true;
    d->broker_ready_ctx = c;
    log_info("spawned kvd-broker (pid %d), pool %llu bytes", d->broker_proc.pid,
             (unsigned long long)d->cfg.pool_bytes);
    uv_read_start((uv_stream_t *)&c->pipe, ready_alloc_cb, ready_read_cb);
    uv_timer_start(&c->timer, ready_timeout_cb, KVD_BROKER_READY_TIMEOUT_MS, 0);
    return 0;
}

void broker_stop(struct kvd *d)
{
    if (d->broker_spawned && d->broker_live)
        uv_process_kill(&d->broker_proc, SIGTERM);
}

bool broker_is_running(const struct kvd *d)
{
    return d->broker_live || d->broker_ready_ctx;
}
