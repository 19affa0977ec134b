/* workers.c — kvd-worker processes: spawn, hello, steps, death, restart with back-off.
 *
 * kvd binds one NN_PAIR per worker slot at ipc://DIR/worker-N.sock, DIR being the broker's
 * runtime dir (workers find broker.fd there too; it is kvd's own unless --broker names
 * another);
 * each incarnation of worker N connects there and says "hello". A slot is IDLE only
 * between a hello and the next step, so a step is never queued towards a dead or
 * not-yet-connected worker (a stale step must never reach pages that changed owner).
 * When a worker exits its step (if any) goes back to the engine, which re-sends it to
 * another idle worker; the slot restarts after a back-off that doubles per quick crash
 * (KVD_WORKER_BACKOFF_MIN_MS .. KVD_WORKER_BACKOFF_MAX_MS) and resets after
 * KVD_WORKER_STABLE_MS of life.
 */
#include "daemon/kvd.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <nanomsg/pair.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WORKER_ARGV_MAX 24

static void worker_spawn(struct kvd_worker *w);
static int worker_bind(struct kvd_worker *w);

uint32_t workers_idle(const struct kvd *d)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < d->n_workers; i++)
        n += d->workers[i].state == KW_IDLE;
    return n;
}

bool workers_all_stopped(const struct kvd *d)
{
    for (uint32_t i = 0; i < d->n_workers; i++)
        if (d->workers[i].proc_live || d->workers[i].nn_open)
            return false;
    return true;
}

static void worker_on_hello(struct kvd_worker *w, const struct wmsg *m)
{
    struct kvd *d = w->d;
    struct step_hello h;
    char err[WIRE_ERR_LEN];
    if (step_hello_decode(m, &h, err) < 0) {
        log_err("worker %u: bad hello: %s", w->index, err);
        return;
    }
    if (h.index != w->index || h.model_fp != d->model.fp) {
        log_err("worker %u: hello says index %u, model fingerprint %016llx (expected "
                "%016llx): killing it",
                w->index, h.index, (unsigned long long)h.model_fp, (unsigned long long)d->model.fp);
        if (w->proc_live)
            uv_process_kill(&w->proc, SIGKILL);
        return;
    }
    if (w->state != KW_STARTING) {
        log_warn("worker %u: unexpected hello in state %d", w->index, (int)w->state);
        return;
    }
    log_info("worker %u ready (pid %u)", w->index, h.pid);
    w->state = KW_IDLE;
    engine_worker_idle(d);
}

static void worker_recv_cb(struct nnuv *n, const void *buf, size_t len)
{
    struct kvd_worker *w = n->data;
    struct wmsg m;
    char err[WIRE_ERR_LEN];
    if (wmsg_parse(&m, buf, len, err) < 0) {
        log_err("worker %u: unparsable message: %s", w->index, err);
        wmsg_release(&m);
        return;
    }
    if (wmsg_is(&m, "hello")) {
        worker_on_hello(w, &m);
    } else if (wmsg_is(&m, "result") || wmsg_is(&m, "err")) {
        uint64_t sid = 0;
        if (wmsg_is(&m, "err"))
            sid = step_err_step_id(&m);
        else if (wire_u64(&m.root, "step_id", true, 0, UINT64_MAX, &sid, err) < 0)
            sid = 0;
        if (w->state == KW_BUSY && sid != w->step_id) {
            log_warn("worker %u: reply for step %llu while %llu is in flight (dropped)", w->index,
                     (unsigned long long)sid, (unsigned long long)w->step_id);
        } else if (w->state == KW_BUSY) {
            uv_timer_stop(&w->timer);
            w->state = KW_IDLE;
            w->steps++;
            engine_on_result(w->d, w, &m);
            engine_worker_idle(w->d);
        } else {
            log_warn("worker %u: reply with no step in flight (dropped)", w->index);
        }
    } else {
        log_warn("worker %u: unexpected message '%s'", w->index, m.type);
    }
    wmsg_release(&m);
}

static void worker_step_timeout_cb(uv_timer_t *t)
{
    struct kvd_worker *w = t->data;
    if (w->state == KW_BUSY && w->proc_live) {
        log_err("worker %u (pid %d) silent for %u ms on a step: killing it", w->index, (int)w->pid,
                w->d->cfg.step_timeout_ms);
        uv_process_kill(&w->proc, SIGKILL);
    }
}

int worker_send_step(struct kvd *d, struct kvd_worker *w, struct wbuf *step, uint64_t step_id)
{
    if (w->state != KW_IDLE)
        return -EAGAIN;
    int rc = nnuv_send(&w->nn, step->sb.data, step->sb.size);
    if (rc < 0) {
        log_err("cannot send a step to worker %u: %s", w->index, kvd_strerror(rc));
        return rc;
    }
    w->state = KW_BUSY;
    w->step_id = step_id;
    if (d->cfg.step_timeout_ms)
        uv_timer_start(&w->timer, worker_step_timeout_cb, d->cfg.step_timeout_ms, 0);
    return 0;
}

static void worker_restart_cb(uv_timer_t *t)
{
    struct kvd_worker *w = t->data;
    if (w->d->shutting_down || w->state != KW_RESTARTING)
        return;
    if (w->nn_open) { /* the old socket is still closing */
        uv_timer_start(&w->timer, worker_restart_cb, KVD_WORKER_BACKOFF_MIN_MS, 0);
        return;
    }
    int rc = worker_bind(w);
    if (rc < 0) {
        log_err("worker %u: cannot bind its socket: %s", w->index, kvd_strerror(rc));
        uv_timer_start(&w->timer, worker_restart_cb, KVD_WORKER_BACKOFF_MAX_MS, 0);
        return;
    }
    worker_spawn(w);
}

static void worker_nn_closed(struct nnuv *n);

static void worker_proc_closed(uv_handle_t *h)
{
    struct kvd_worker *w = h->data;
    w->proc_live = false;
    kvd_maybe_finish_shutdown(w->d);
}

static void worker_exit_cb(uv_process_t *p, int64_t status, int sig)
{
    struct kvd_worker *w = p->data;
    struct kvd *d = w->d;
    bool was_busy = w->state == KW_BUSY;
    uv_timer_stop(&w->timer);
    w->pid = 0;
    uv_close((uv_handle_t *)p, worker_proc_closed);
    if (d->shutting_down) {
        w->state = KW_STOPPED;
        log_info("worker %u exited (status %lld, signal %d)", w->index, (long long)status, sig);
    } else if (sig == 0 && status == KVD_WORKER_EXIT_CONFIG) {
        /* Not a crash: the worker refused the model, the pool or its options and would
         * refuse again on every restart. Stop with the same code (systemd: no restart);
         * requests in flight end with ESHUTDOWN. */
        log_err("worker %u refused to run (exit %d: bad model, pool or option; its reason "
                "is logged above): not restarting it, kvd stops",
                w->index, KVD_WORKER_EXIT_CONFIG);
        w->state = KW_STOPPED;
        d->exit_code = KVD_WORKER_EXIT_CONFIG;
        d->shutdown_msg = "kvd is stopping: its worker refused the model or pool (see kvd's log)";
        kvd_begin_shutdown(d, true);
    } else {
        uint64_t lived = kvd_now_ms(d) - w->started_ms;
        if (lived >= KVD_WORKER_STABLE_MS)
            w->backoff_ms = KVD_WORKER_BACKOFF_MIN_MS;
        else if (w->backoff_ms == 0)
            w->backoff_ms = KVD_WORKER_BACKOFF_MIN_MS;
        else
            w->backoff_ms = w->backoff_ms * 2 > KVD_WORKER_BACKOFF_MAX_MS
                                ? KVD_WORKER_BACKOFF_MAX_MS
                                : w->backoff_ms * 2;
        if (d->reattaching)
            log_info("worker %u exited (status %lld, signal %d) to attach the new pool: "
                     "restarting in %u ms",
                     w->index, (long long)status, sig, w->backoff_ms);
        else
            log_warn("worker %u died (status %lld, signal %d)%s: restarting in %u ms", w->index,
                     (long long)status, sig, was_busy ? " during a step" : "", w->backoff_ms);
        w->state = KW_RESTARTING;
        w->restarts++;
        if (w->nn_open && !w->nn.closing)
            nnuv_close(&w->nn, worker_nn_closed);
        uv_timer_start(&w->timer, worker_restart_cb, w->backoff_ms, 0);
    }
    if (was_busy)
        engine_worker_lost(d, w);
}

static void worker_spawn(struct kvd_worker *w)
{
    struct kvd *d = w->d;
    char bin[CONFIG_PATH_MAX + 16], idx[16], thr[16];
    snprintf(bin, sizeof(bin), "%s/kvd-worker", d->bin_dir);
    snprintf(idx, sizeof(idx), "%u", w->index);
    snprintf(thr, sizeof(thr), "%u", d->cfg.threads);
    static const char *const lvl[] = {"error", "warn", "info", "debug"};
    char *args[WORKER_ARGV_MAX];
    int a = 0;
    args[a++] = bin;
    args[a++] = "--index";
    args[a++] = idx;
    args[a++] = "--runtime-dir";
    args[a++] = d->broker_dir;
    args[a++] = "--model";
    args[a++] = d->model.path;
    args[a++] = "--threads";
    args[a++] = thr;
    args[a++] = "--log-level";
    args[a++] = (char *)lvl[d->cfg.log_level];
    args[a] = NULL;
    uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
                                     {.flags = UV_INHERIT_FD, .data.fd = 1},
                                     {.flags = UV_INHERIT_FD, .data.fd = 2}};
    uv_process_options_t o = {
        .exit_cb = worker_exit_cb, .file = bin, .args = args, .stdio_count = 3, .stdio = stdio};
    w->proc.data = w;
    w->state = KW_STARTING;
    w->started_ms = kvd_now_ms(d);
    int rc = uv_spawn(d->loop, &w->proc, &o);
    if (rc < 0) {
        log_err("cannot spawn '%s': %s", bin, uv_strerror(rc));
        uv_close((uv_handle_t *)&w->proc, NULL);
        w->state = KW_RESTARTING;
        w->backoff_ms = KVD_WORKER_BACKOFF_MAX_MS;
        uv_timer_start(&w->timer, worker_restart_cb, w->backoff_ms, 0);
        return;
    }
    w->proc_live = true;
    w->pid = w->proc.pid;
    log_info("spawned worker %u (pid %d)", w->index, (int)w->pid);
}

/* Binds worker-N.sock afresh: a new socket carries nothing queued for a dead
 * incarnation (a stale step must never reach the next one). */
static int worker_bind(struct kvd_worker *w)
{
    struct kvd *d = w->d;
    char name[32];
    snprintf(name, sizeof(name), PATHS_SOCK_WORKER_FMT, (int)w->index);
    /* Workers find broker.fd and worker-N.sock in one dir: the broker's. */
    int rc = nnuv_listen(&w->nn, d->loop, d->broker_dir, name, NN_PAIR, true, worker_recv_cb, w,
                         NULL);
    if (rc < 0)
        return rc;
    w->nn_open = true;
    return 0;
}

int workers_start(struct kvd *d)
{
    d->workers = calloc(d->cfg.workers, sizeof(*d->workers));
    if (!d->workers)
        return -ENOMEM;
    d->n_workers = d->cfg.workers;
    for (uint32_t i = 0; i < d->n_workers; i++) {
        struct kvd_worker *w = &d->workers[i];
        w->d = d;
        w->index = i;
        w->slot = -1;
        w->state = KW_STOPPED;
        uv_timer_init(d->loop, &w->timer);
        w->timer.data = w;
        int rc = worker_bind(w);
        if (rc < 0)
            return rc;
        worker_spawn(w);
    }
    return 0;
}

void workers_recycle(struct kvd *d)
{
    for (uint32_t i = 0; i < d->n_workers; i++) {
        struct kvd_worker *w = &d->workers[i];
        if (w->proc_live && w->pid) {
            log_info("worker %u (pid %d): restarting to attach the new pool", w->index,
                     (int)w->pid);
            uv_process_kill(&w->proc, SIGTERM);
        }
    }
}

static void worker_nn_closed(struct nnuv *n)
{
    struct kvd_worker *w = n->data;
    w->nn_open = false;
    kvd_maybe_finish_shutdown(w->d);
}

void workers_stop(struct kvd *d)
{
    for (uint32_t i = 0; i < d->n_workers; i++) {
        struct kvd_worker *w = &d->workers[i];
        uv_timer_stop(&w->timer);
        if (!uv_is_closing((uv_handle_t *)&w->timer))
            uv_close((uv_handle_t *)&w->timer, NULL);
        /* Every request has ended: a worker still busy runs an abandoned step (it may be
         * hung or stopped, where SIGTERM would wait): kill it now. */
        if (w->proc_live && w->pid)
            uv_process_kill(&w->proc, w->state == KW_BUSY ? SIGKILL : SIGTERM);
        if (w->nn_open && !w->nn.closing)
            nnuv_close(&w->nn, worker_nn_closed);
        if (w->state != KW_STARTING && w->state != KW_IDLE && w->state != KW_BUSY)
            w->state = KW_STOPPED;
    }
}
