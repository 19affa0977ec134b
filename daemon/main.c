/* main.c — kvd: start-up, signals, readiness, clean shutdown.
 *
 * Start: config -> model -> broker (spawned with --ready-fd, or --broker) -> attach
 * (the pool descriptor is checked against the model and flags) -> scheduler -> workers
 * -> kvd.sock and admin.sock -> "ready" (log + sd_notify READY=1).
 * Shutdown (SIGTERM/SIGINT; a second signal makes it immediate): stop accepting
 * sessions and requests, end queued requests (ESHUTDOWN), give running ones
 * --grace-ms, then end them (ESHUTDOWN), let the last "done"s drain, say "bye" to
 * sessions, stop workers, detach from the broker and stop the broker kvd spawned;
 * children that do not exit within KVD_STOP_TIMEOUT_MS are killed. The loop ends when
 * every handle has closed. Exit: 0 clean, 1 runtime failure, 64 bad flag, 69 another kvd
 * serves the runtime dir, 78 bad config.
 */
#include "daemon/kvd.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#define KVD_DRAIN_MS 200 /* last "done" messages leave before sessions close */
#define KVD_EXIT_RUNTIME 1
#define KVD_EXIT_USAGE 64
#define KVD_EXIT_UNAVAILABLE 69 /* another kvd serves this runtime dir */
#define KVD_EXIT_CONFIG 78

/* Phase 2 of the shutdown and the timers it needs, kept with main's state. */
struct kvd_main {
    struct kvd d;
    uv_timer_t drain_timer;
    uv_timer_t kill_timer;
    bool phase2, handles_closed;
};

uint64_t kvd_now_ms(const struct kvd *d)
{
    return uv_now(d->loop);
}

static struct kvd_main *kvd_main_of(struct kvd *d)
{
    return (struct kvd_main *)((char *)d - offsetof(struct kvd_main, d));
}

static void notify(struct kvd *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notify(struct kvd *d, const char *fmt, ...)
{
    if (!d->notify)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    sd_notify(0, buf);
}

static void close_if_open(uv_handle_t *h)
{
    if (h->loop && !uv_is_closing(h))
        uv_close(h, NULL);
}

static void detach_done(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    struct kvd *d = b->data;
    (void)status;
    (void)m;
    (void)arg;
    bcli_close(&d->bc, NULL);
    broker_stop(d);
}

static void kill_timer_cb(uv_timer_t *t)
{
    struct kvd *d = t->data;
    for (uint32_t i = 0; i < d->n_workers; i++)
        if (d->workers[i].proc_live && d->workers[i].pid) {
            log_warn("worker %u did not stop: killing it", i);
            uv_process_kill(&d->workers[i].proc, SIGKILL);
        }
    if (d->broker_spawned && d->broker_live) {
        log_warn("kvd-broker did not stop: killing it");
        uv_process_kill(&d->broker_proc, SIGKILL);
    }
}

/* Everything is closed but the loop's own bookkeeping: close the remaining timers. */
static void close_remaining(struct kvd_main *km)
{
    struct kvd *d = &km->d;
    if (km->handles_closed)
        return;
    km->handles_closed = true;
    uv_timer_stop(&km->kill_timer);
    close_if_open((uv_handle_t *)&km->kill_timer);
    close_if_open((uv_handle_t *)&km->drain_timer);
    close_if_open((uv_handle_t *)&d->sweep_timer);
    close_if_open((uv_handle_t *)&d->wd_timer);
    close_if_open((uv_handle_t *)&d->broker_timer);
    close_if_open((uv_handle_t *)&d->sig_term);
    close_if_open((uv_handle_t *)&d->sig_int);
    if (d->sched.plan.entries)
        engine_close(d);
}

static void drain_timer_cb(uv_timer_t *t)
{
    struct kvd_main *km = t->data;
    struct kvd *d = &km->d;
    sessions_close_all(d);
    admin_ep_close(d);
    client_ep_close(d);
    workers_stop(d);
    if (d->bc_open && d->bc.lease) {
        struct wbuf w;
        wbuf_init(&w);
        broker_req_detach_encode(&w, d->bc.lease);
        if (bcli_call(&d->bc, &w, detach_done, NULL) < 0) {
            wbuf_release(&w);
            bcli_close(&d->bc, NULL);
            broker_stop(d);
        }
    } else {
        if (d->bc_open)
            bcli_close(&d->bc, NULL);
        broker_stop(d);
    }
    uv_timer_start(&km->kill_timer, kill_timer_cb, KVD_STOP_TIMEOUT_MS, 0);
    kvd_maybe_finish_shutdown(d);
}

void kvd_maybe_finish_shutdown(struct kvd *d)
{
    struct kvd_main *km = kvd_main_of(d);
    if (!d->shutting_down)
        return;
    if (!km->phase2) {
        if (d->n_reqs > 0 || d->broker_ready_ctx)
            return;
        km->phase2 = true;
        notify(d, "STATUS=stopping: closing sessions, workers and broker");
        uv_timer_start(&km->drain_timer, drain_timer_cb, KVD_DRAIN_MS, 0);
        return;
    }
    if (uv_is_active((uv_handle_t *)&km->drain_timer))
        return;
    bool children = !workers_all_stopped(d) || (d->broker_spawned && d->broker_live);
    if (!children && d->n_sessions == 0 && !d->client_open && !d->admin_open && !d->bc_closing)
        close_remaining(km);
}

void kvd_begin_shutdown(struct kvd *d, bool now)
{
    uint64_t t = kvd_now_ms(d);
    if (d->shutting_down) {
        if (now)
            d->shutdown_deadline_ms = t;
        engine_kick(d);
        return;
    }
    d->shutting_down = true;
    d->shutdown_deadline_ms = now ? t : t + d->cfg.grace_ms;
    log_info("shutting down: %u requests in flight, %u ms grace", d->n_reqs,
             now ? 0 : d->cfg.grace_ms);
    notify(d, "STOPPING=1\nSTATUS=stopping: finishing %u requests", d->n_reqs);
    client_ep_close(d);
    if (d->sched.plan.entries)
        engine_kick(d);
    kvd_maybe_finish_shutdown(d);
}

static void signal_cb(uv_signal_t *h, int signum)
{
    struct kvd *d = h->data;
    log_info("received %s", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    kvd_begin_shutdown(d, d->shutting_down);
}

static void sweep_timer_cb(uv_timer_t *t)
{
    struct kvd *d = t->data;
    sessions_sweep(d);
    if (d->sched.plan.entries)
        engine_sweep_if_idle(d);
    kvd_maybe_finish_shutdown(d);
}

static void wd_timer_cb(uv_timer_t *t)
{
    struct kvd *d = t->data;
    notify(d, "WATCHDOG=1\nSTATUS=serving: %u running, %u queued, %llu steps", d->sched.n_running,
           d->sched.n_queued, (unsigned long long)d->ctr.steps);
}

static void start_failed(struct kvd *d, int code, const char *what)
{
    log_err("cannot start: %s: %s", what, kvd_strerror(code));
    if (!d->exit_code)
        d->exit_code = code == KVD_EMISMATCH ? KVD_EXIT_CONFIG : KVD_EXIT_RUNTIME;
    kvd_begin_shutdown(d, true);
}

static void serving(struct kvd *d)
{
    uint32_t pages = d->bc.pool.num_pages;
    uint32_t per_seq = sched_pages_for(&d->sched, d->cfg.max_model_len);
    log_info("KV pool: %u pages x %u tokens = %llu tokens of KV (%llu bytes, %s, page %llu "
             "bytes); max concurrency at max-model-len %u: %u sequences",
             pages, d->cfg.block_size, (unsigned long long)pages * d->cfg.block_size,
             (unsigned long long)d->bc.pool.pool_bytes, kv_dtype_get(d->cfg.kv_dtype)->name,
             (unsigned long long)d->geom.page_bytes, d->cfg.max_model_len,
             per_seq ? pages / per_seq : 0);
    log_info("kvd serving model '%s' (%s) with %u worker(s), alloc %s, prefix cache %s",
             d->model.name, d->model.path, d->n_workers,
             d->cfg.alloc == CONFIG_ALLOC_NAIVE ? "naive" : "paged",
             d->cfg.prefix_cache ? "on" : "off");
    log_info("listening on ipc://%s/%s (admin: ipc://%s/%s)", d->rundir, PATHS_SOCK_CLIENT,
             d->rundir, PATHS_SOCK_ADMIN);
    log_info("first request: %s/kvctl%s%s generate --prompt \"Once upon a time\" --temperature 0",
             d->bin_dir, d->cfg.runtime_dir[0] ? " --runtime-dir " : "", d->cfg.runtime_dir);
    notify(d, "READY=1\nSTATUS=serving on %s/%s", d->rundir, PATHS_SOCK_CLIENT);
}

static void attached_cb(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    struct kvd *d = b->data;
    (void)m;
    (void)arg;
    if (status < 0) {
        start_failed(d, status, "attaching to the broker's pool");
        return;
    }
    if (d->shutting_down)
        return;
    struct sched_limits lim = {
        .max_batch_tokens =
            d->cfg.max_batch_tokens < STEP_MAX_TOKENS ? d->cfg.max_batch_tokens : STEP_MAX_TOKENS,
        .max_running = d->cfg.max_running < STEP_MAX_SEQS * SCHED_WORKERS_MAX
                           ? d->cfg.max_running
                           : STEP_MAX_SEQS * SCHED_WORKERS_MAX,
        .max_queue = d->cfg.max_queue,
        .max_model_len = d->cfg.max_model_len,
        .block_size = d->cfg.block_size,
        .total_pages = b->pool.num_pages,
        .naive = d->cfg.alloc == CONFIG_ALLOC_NAIVE,
        .cache_aware = d->cfg.prefix_cache,
    };
    int rc = sched_init(&d->sched, &lim);
    if (rc == 0 && d->cfg.prefix_cache && prefixhint_init(&d->hints) < 0)
        log_warn("no memory for prefix hints: admission stays plain FCFS");
    if (rc == 0)
        rc = engine_init(d);
    if (rc < 0) {
        start_failed(d, rc, "scheduler");
        return;
    }
    uint32_t per_seq = sched_pages_for(&d->sched, d->cfg.max_model_len);
    if (per_seq > b->pool.num_pages) {
        /* naive reserves max-model-len at admission: nothing could ever be admitted */
        bool naive = d->cfg.alloc == CONFIG_ALLOC_NAIVE;
        char what[256];
        snprintf(what, sizeof(what),
                 "the KV pool holds %llu tokens (%u pages of %u), one sequence of "
                 "max-model-len %u needs %llu",
                 (unsigned long long)b->pool.num_pages * d->cfg.block_size, b->pool.num_pages,
                 d->cfg.block_size, d->cfg.max_model_len,
                 (unsigned long long)per_seq * d->cfg.block_size);
        if (naive) {
            log_err("cannot serve with --alloc naive: %s; raise --pool-bytes or lower "
                    "--max-model-len",
                    what);
            d->exit_code = KVD_EXIT_CONFIG;
            kvd_begin_shutdown(d, true);
            return;
        }
        log_warn("%s: long sequences will be refused (ETOOLONG) or preempted", what);
    }
    if (d->cfg.max_running > STEP_MAX_SEQS * d->cfg.workers)
        log_warn("--max-running %u exceeds %u sequences per step x %u workers: a step may be "
                 "refused by a worker",
                 d->cfg.max_running, STEP_MAX_SEQS, d->cfg.workers);
    if (d->cfg.max_batch_tokens < d->cfg.max_running)
        log_warn("--max-batch-tokens %u is below --max-running %u: the newest sequences may "
                 "wait for a step while older ones decode",
                 d->cfg.max_batch_tokens, d->cfg.max_running);
    if ((rc = workers_start(d)) < 0) {
        start_failed(d, rc, "starting workers");
        return;
    }
    if ((rc = client_ep_open(d)) < 0) {
        start_failed(d, rc, "opening kvd.sock");
        return;
    }
    if ((rc = admin_ep_open(d)) < 0) {
        start_failed(d, rc, "opening admin.sock");
        return;
    }
    serving(d);
}

static void reattached_cb(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    struct kvd *d = b->data;
    (void)m;
    (void)arg;
    if (status < 0) {
        log_err("cannot attach to the broker again: %s", kvd_errname(status));
        d->exit_code = KVD_EXIT_RUNTIME;
        d->reattaching = false;
        kvd_begin_shutdown(d, true);
        return;
    }
    /* the lease id is a capability (broker/lease.h): never logged */
    log_warn("attached to the broker again: running sequences will be recomputed");
    (void)b;
    d->broker_backoff_ms = 0;
    d->reattaching = false;
    d->lease_reset = true;
    engine_kick(d);
}

static void lease_lost_cb(struct bcli *b)
{
    struct kvd *d = b->data;
    if (d->shutting_down || d->reattaching)
        return;
    struct pool_desc expect = b->pool; /* the same pool, or refuse */
    expect.epoch = 0;
    d->reattaching = true;
    if (bcli_attach(b, "kvd", &expect, reattached_cb, NULL) < 0) {
        d->reattaching = false;
        d->exit_code = KVD_EXIT_RUNTIME;
        kvd_begin_shutdown(d, true);
    }
}

static void broker_ready(struct kvd *d, int status)
{
    if (status < 0) {
        start_failed(d, status, "kvd-broker did not start");
        return;
    }
    if (d->shutting_down) {
        kvd_maybe_finish_shutdown(d);
        return;
    }
    int rc = bcli_init(&d->bc, d->loop, d->broker_addr, d);
    if (rc < 0) {
        start_failed(d, rc, "connecting to the broker");
        return;
    }
    d->bc_open = true;
    d->bc.lease_lost_cb = lease_lost_cb;
    struct pool_desc expect;
    memset(&expect, 0, sizeof(expect));
    expect.model_fp = d->model.fp;
    expect.geom = d->geom;
    expect.layout_version = KV_LAYOUT_VERSION;
    if ((rc = bcli_attach(&d->bc, "kvd", &expect, attached_cb, NULL)) < 0)
        start_failed(d, rc, "attaching to the broker");
}

static void broker_respawn_cb(uv_timer_t *t);

/* A respawned broker is ready: connect, attach (same model and geometry), recompute. */
static void broker_reready(struct kvd *d, int status)
{
    if (d->shutting_down) {
        kvd_maybe_finish_shutdown(d);
        return;
    }
    if (status < 0) {
        log_err("restarted kvd-broker did not start: %s", kvd_errname(status));
        d->broker_backoff_ms = d->broker_backoff_ms * 2 > KVD_BROKER_BACKOFF_MAX_MS
                                   ? KVD_BROKER_BACKOFF_MAX_MS
                                   : d->broker_backoff_ms * 2;
        uv_timer_start(&d->broker_timer, broker_respawn_cb, d->broker_backoff_ms, 0);
        return;
    }
    int rc = bcli_init(&d->bc, d->loop, d->broker_addr, d);
    if (rc < 0) {
        start_failed(d, rc, "connecting to the restarted broker");
        return;
    }
    d->bc_open = true;
    d->bc.lease_lost_cb = lease_lost_cb;
    struct pool_desc expect;
    memset(&expect, 0, sizeof(expect));
    expect.model_fp = d->model.fp;
    expect.geom = d->geom;
    expect.layout_version = KV_LAYOUT_VERSION;
    if ((rc = bcli_attach(&d->bc, "kvd", &expect, reattached_cb, NULL)) < 0)
        start_failed(d, rc, "attaching to the restarted broker");
}

static void broker_respawn_cb(uv_timer_t *t)
{
    struct kvd *d = t->data;
    if (d->shutting_down)
        return;
    if (broker_is_running(d) || d->bc_closing) { /* handles of the old one still closing */
        uv_timer_start(&d->broker_timer, broker_respawn_cb, KVD_BROKER_BACKOFF_MIN_MS, 0);
        return;
    }
    d->broker_restarts++;
    log_warn("restarting kvd-broker (restart %u)", d->broker_restarts);
    int rc = broker_spawn(d, broker_reready);
    if (rc < 0)
        broker_reready(d, rc);
}

static void bc_closed_cb(struct bcli *b)
{
    struct kvd *d = b->data;
    d->bc_closing = false;
    kvd_maybe_finish_shutdown(d);
}

void kvd_broker_lost(struct kvd *d)
{
    if (d->shutting_down)
        return;
    if (d->broker_restarts >= KVD_BROKER_RESTARTS_MAX) {
        log_err("kvd-broker died %u times: giving up", d->broker_restarts + 1);
        d->exit_code = KVD_EXIT_RUNTIME;
        if (d->bc_open)
            bcli_close(&d->bc, NULL);
        kvd_begin_shutdown(d, true);
        return;
    }
    /* Pause the engine, fail what waits on the dead broker at once, let the workers
     * drop the old mapping; sequences recompute once attached again. */
    d->reattaching = true;
    if (d->bc_open) {
        d->bc_open = false;
        d->bc_closing = true;
        bcli_close(&d->bc, bc_closed_cb);
    }
    workers_recycle(d);
    if (!d->broker_backoff_ms)
        d->broker_backoff_ms = KVD_BROKER_BACKOFF_MIN_MS;
    uv_timer_start(&d->broker_timer, broker_respawn_cb, d->broker_backoff_ms, 0);
}

static int resolve_broker(struct kvd *d)
{
    const char *b = d->cfg.broker;
    if (!b[0]) {
        snprintf(d->broker_dir, sizeof(d->broker_dir), "%s", d->rundir);
        return paths_ipc_addr(d->broker_addr, sizeof(d->broker_addr), d->rundir, PATHS_SOCK_BROKER);
    }
    if (strncmp(b, "ipc://", 6) == 0) {
        char tmp[PATHS_MAX];
        snprintf(d->broker_addr, sizeof(d->broker_addr), "%s", b);
        snprintf(tmp, sizeof(tmp), "%s", b + 6);
        snprintf(d->broker_dir, sizeof(d->broker_dir), "%s", dirname(tmp));
        return 0;
    }
    snprintf(d->broker_dir, sizeof(d->broker_dir), "%s", b);
    if (strcmp(d->broker_dir, d->rundir) != 0)
        log_info("worker sockets go to the broker's dir '%s' (workers attach the pool there)",
                 d->broker_dir);
    return paths_ipc_addr(d->broker_addr, sizeof(d->broker_addr), b, PATHS_SOCK_BROKER);
}

/* True when something accepts connections on the AF_UNIX socket at path. */
static bool sock_is_live(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return false;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return live;
}

static int kvd_setup(struct kvd *d)
{
    int rc;
    char exe[CONFIG_PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        log_err("cannot find my own binary: %s", strerror(errno));
        return KVD_EXIT_RUNTIME;
    }
    exe[n] = '\0';
    snprintf(d->bin_dir, sizeof(d->bin_dir), "%s", dirname(exe));
    if ((rc = paths_runtime_dir(d->rundir, sizeof(d->rundir), d->cfg.runtime_dir)) < 0 ||
        (rc = paths_ensure_dir(d->rundir)) < 0) {
        log_err("cannot use runtime dir '%s': %s", d->rundir, kvd_strerror(rc));
        return KVD_EXIT_CONFIG;
    }
    char sock[PATHS_MAX];
    if (paths_join(sock, sizeof(sock), d->rundir, PATHS_SOCK_CLIENT) == 0 && sock_is_live(sock)) {
        log_err("another kvd serves '%s' (its %s answers): not starting", d->rundir,
                PATHS_SOCK_CLIENT);
        return KVD_EXIT_UNAVAILABLE;
    }
    char model[CONFIG_PATH_MAX];
    if (d->cfg.model[0]) {
        snprintf(model, sizeof(model), "%s", d->cfg.model);
    } else if ((rc = model_default_path(model, sizeof(model))) < 0) {
        log_err("cannot find the bundled model next to '%s' (give --model): %s", d->bin_dir,
                kvd_strerror(rc));
        return KVD_EXIT_CONFIG;
    }
    if (model_open(&d->model, model) < 0)
        return KVD_EXIT_CONFIG;
    const struct gguf_llama_hparams *hp = &d->model.hp;
    if (kv_geom_init(&d->geom, hp->n_layer, hp->n_head_kv, hp->head_dim, d->cfg.block_size,
                     d->cfg.kv_dtype) < 0) {
        log_err("model '%s' does not fit the KV layout (layers %u, kv heads %u, head dim %u)",
                model, hp->n_layer, hp->n_head_kv, hp->head_dim);
        return KVD_EXIT_CONFIG;
    }
    if (d->cfg.max_model_len > hp->n_ctx_train)
        log_warn("--max-model-len %u exceeds the model's trained context %u", d->cfg.max_model_len,
                 hp->n_ctx_train);
    if ((rc = resolve_broker(d)) < 0) {
        log_err("bad --broker '%s': %s", d->cfg.broker, kvd_strerror(rc));
        return KVD_EXIT_CONFIG;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct kvd_main km; /* main's state; everything else gets a pointer */
    struct kvd *d = &km.d;
    char err[CONFIG_ERR_LEN];
    enum config_status cs = config_load(&d->cfg, argc, argv, NULL, err);
    switch (cs) {
    case CONFIG_HELP:
        fputs(config_usage(), stdout);
        return 0;
    case CONFIG_VERSION:
        printf("kvd %s\n", KVD_VERSION);
        return 0;
    case CONFIG_EUSAGE:
        fprintf(stderr, "kvd: %s\n", err);
        return KVD_EXIT_USAGE;
    case CONFIG_EBAD:
        fprintf(stderr, "kvd: %s\n", err);
        return KVD_EXIT_CONFIG;
    case CONFIG_OK:
        break;
    }
    log_setup("kvd", d->cfg.log_level);
    if (d->cfg.config_file[0])
        log_info("read config file '%s'", d->cfg.config_file);
    signal(SIGPIPE, SIG_IGN);
    int rc = kvd_setup(d);
    if (rc) {
        model_close(&d->model);
        return rc;
    }
    d->loop = uv_default_loop();
    d->t_start_ms = uv_now(d->loop);
    d->notify = getenv("NOTIFY_SOCKET") != NULL;
    uv_timer_init(d->loop, &km.drain_timer);
    uv_timer_init(d->loop, &km.kill_timer);
    km.drain_timer.data = &km;
    km.kill_timer.data = d;
    uv_timer_init(d->loop, &d->sweep_timer);
    d->sweep_timer.data = d;
    uv_timer_start(&d->sweep_timer, sweep_timer_cb, KVD_SWEEP_INTERVAL_MS, KVD_SWEEP_INTERVAL_MS);
    uv_timer_init(d->loop, &d->wd_timer);
    d->wd_timer.data = d;
    uv_timer_init(d->loop, &d->broker_timer);
    d->broker_timer.data = d;
    uint64_t wd_usec = 0;
    if (d->notify && sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec >= 2000)
        uv_timer_start(&d->wd_timer, wd_timer_cb, wd_usec / 2000, wd_usec / 2000);
    uv_signal_init(d->loop, &d->sig_term);
    uv_signal_init(d->loop, &d->sig_int);
    d->sig_term.data = d->sig_int.data = d;
    uv_signal_start(&d->sig_term, signal_cb, SIGTERM);
    uv_signal_start(&d->sig_int, signal_cb, SIGINT);
    if (d->cfg.broker[0]) {
        log_info("using the broker at %s", d->broker_addr);
        broker_ready(d, 0);
    } else if ((rc = broker_spawn(d, broker_ready)) < 0) {
        start_failed(d, rc, "spawning kvd-broker");
    }
    uv_run(d->loop, UV_RUN_DEFAULT);
    if (d->sched.plan.entries)
        sched_release(&d->sched);
    prefixhint_release(&d->hints);
    free(d->workers);
    model_close(&d->model);
    rc = uv_loop_close(d->loop);
    if (rc < 0)
        log_warn("event loop closed with handles open: %s", uv_strerror(rc));
    log_info("kvd stopped");
    return d->exit_code;
}
