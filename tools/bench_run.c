/* bench_run.c — the kvd-bench measurement loop (contract in bench_run.h). */
#include "tools/bench_run.h"

#include "common/err.h"
#include "tools/kvctl_admin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_WAIT_SLICE_MS 20        /* longest wait for an event between bookkeeping */
#define BENCH_PROGRESS_MS 200         /* progress bar redraw period (terminal) */
#define BENCH_PROGRESS_WIDTH 30       /* cells of the progress bar */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void bench_result_release(struct bench_result *res)
{
    free(res->recs);
    free(res->samples);
    memset(res, 0, sizeof(*res));
}

static int add_sample(struct bench_result *res, size_t *cap, double t, const struct admin_pool *p)
{
    if (res->n_samples == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        struct bench_sample *ns = realloc(res->samples, nc * sizeof(*ns));
        if (!ns)
            return -ENOMEM;
        res->samples = ns;
        *cap = nc;
    }
    res->samples[res->n_samples++] = (struct bench_sample){.t = t, .pool = *p};
    return 0;
}

static void progress(const struct bench_cfg *cfg, size_t done, size_t total, size_t inflight,
                     uint64_t tokens, double t, bool final, bool tty, int *last_decile)
{
    if (!cfg->progress)
        return;
    double frac = total ? (double)done / (double)total : 1;
    if (cfg->duration_s > 0 && t / cfg->duration_s > frac)
        frac = t / cfg->duration_s > 1 ? 1 : t / cfg->duration_s;
    if (tty) {
        int fill = (int)(frac * BENCH_PROGRESS_WIDTH);
        fputc('\r', stderr);
        fputc('[', stderr);
        for (int i = 0; i < BENCH_PROGRESS_WIDTH; i++)
            fputc(i < fill ? '#' : '.', stderr);
        fprintf(stderr, "] %zu/%zu done, %zu in flight, %.1f s, %.0f tok/s   ", done, total,
                inflight, t, t > 0 ? (double)tokens / t : 0.0);
        if (final)
            fputc('\n', stderr);
    } else {
        int decile = (int)(frac * 10);
        if (decile > *last_decile || final) {
            *last_decile = decile;
            fprintf(stderr, "kvd-bench: %3d %%  %zu/%zu done, %.1f s\n", decile * 10, done,
                    total, t);
        }
    }
}

static int submit_one(struct kvd_client *c, const struct bench_req *q, uint64_t *id)
{
    struct kvd_params p = KVD_PARAMS_INIT;
    p.tokens = q->tokens;
    p.n_tokens = q->n_tokens;
    p.max_tokens = q->max_tokens;
    p.ignore_eos = true;
    p.temperature = 0;
    p.stream = true;
    return kvd_submit(c, &p, id);
}

int bench_run(const struct bench_cfg *cfg, struct kvd_client *c, const struct bench_workload *w,
              struct bench_result *res, char *err, size_t err_len)
{
    struct admin_conn ac;
    char aerr[WIRE_ERR_LEN] = "";
    size_t cap_samples = 0, next = 0, n_done = 0, inflight = 0, n_sub = 0;
    uint64_t tokens = 0;
    int rc = 0, last_decile = -1;
    bool tty = isatty(STDERR_FILENO);
    memset(res, 0, sizeof(*res));
    res->recs = calloc(w->n ? w->n : 1, sizeof(*res->recs));
    size_t *by_id = calloc(w->n + 1, sizeof(*by_id)); /* SDK ids are 1, 2, ... in submit order */
    if (!res->recs || !by_id) {
        free(by_id);
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    res->n = w->n;
    for (size_t i = 0; i < w->n; i++)
        res->recs[i] = (struct bench_rec){.t_submit = -1, .t_first = -1, .t_done = -1};
    res->have_pool = admin_conn_open(&ac, cfg->runtime_dir, cfg->timeout_ms, aerr) == 0;
    if (!res->have_pool)
        fprintf(stderr, "kvd-bench: warning: no pool samples: %s\n", aerr);
    double t0 = mono_s(), next_sample = 0, next_progress = 0, drain_deadline = -1;
    uint64_t first_id = 0;
    if (res->have_pool) {
        /* the baseline for every counter difference (prefill tokens, preemptions, prefix
         * hits) is taken before the first submit: sampled after it, kvd could already
         * have run a prefill step that the difference would then miss */
        struct admin_pool p;
        if (admin_conn_pool(&ac, &p, aerr) == 0)
            add_sample(res, &cap_samples, 0, &p);
        next_sample = cfg->sample_ms / 1000.0;
    }
    for (;;) {
        double now = mono_s() - t0;
        bool stop_issuing = next >= w->n || (cfg->duration_s > 0 && now >= cfg->duration_s);
        while (!stop_issuing && next < w->n) {
            if (cfg->concurrency ? inflight >= cfg->concurrency : w->reqs[next].arrival_s > now)
                break;
            uint64_t id;
            struct bench_rec *r = &res->recs[next];
            r->t_submit = mono_s() - t0;
            if ((rc = submit_one(c, &w->reqs[next], &id))) {
                if (rc == KVD_EPEER || rc == KVD_ESHUTDOWN) {
                    snprintf(err, err_len, "kvd went away: %s", kvd_strerror(rc));
                    goto out;
                }
                r->done = true;
                r->code = rc;
                r->t_done = r->t_submit;
                if (!res->first_error[0])
                    snprintf(res->first_error, sizeof(res->first_error), "submit: %s: %s",
                             kvd_errname(rc), kvd_client_last_error(c));
                n_done++;
                next++;
                rc = 0;
                continue;
            }
            if (!first_id)
                first_id = id;
            if (id - first_id + 1 > w->n) {
                snprintf(err, err_len, "SDK request ids out of sequence");
                rc = KVD_EINTERNAL;
                goto out;
            }
            by_id[id - first_id] = next;
            n_sub++;
            inflight++;
            if (inflight > res->peak_inflight)
                res->peak_inflight = (unsigned)inflight;
            next++;
        }
        if (stop_issuing && inflight == 0)
            break;
        if (stop_issuing && cfg->duration_s > 0 && drain_deadline < 0)
            drain_deadline = now + BENCH_DRAIN_MS / 1000.0;
        if (drain_deadline > 0 && now > drain_deadline) {
            /* cancel what is left; their DONE events still arrive */
            for (size_t k = 0; k < n_sub; k++)
                if (!res->recs[by_id[k]].done)
                    kvd_cancel(c, first_id + k);
            drain_deadline = now + BENCH_DRAIN_MS / 1000.0;
        }
        if (res->have_pool && now >= next_sample) {
            struct admin_pool p;
            if (admin_conn_pool(&ac, &p, aerr) == 0)
                add_sample(res, &cap_samples, now, &p);
            next_sample = now + cfg->sample_ms / 1000.0;
        }
        if (now >= next_progress) {
            progress(cfg, n_done, w->n, inflight, tokens, now, false, tty, &last_decile);
            next_progress = now + BENCH_PROGRESS_MS / 1000.0;
        }
        struct kvd_event ev;
        rc = kvd_next_event(c, &ev, BENCH_WAIT_SLICE_MS);
        if (rc == -EAGAIN) {
            rc = 0;
            continue;
        }
        if (rc) {
            snprintf(err, err_len, "lost kvd: %s %s", kvd_strerror(rc), kvd_client_last_error(c));
            goto out;
        }
        if (ev.id < first_id || ev.id - first_id >= n_sub)
            continue; /* not ours */
        struct bench_rec *r = &res->recs[by_id[ev.id - first_id]];
        double t = mono_s() - t0;
        if (ev.n_tokens && r->t_first < 0)
            r->t_first = t;
        r->n_out += (uint32_t)ev.n_tokens;
        tokens += ev.n_tokens;
        if (ev.type == KVD_EVENT_DONE && !r->done) {
            r->done = true;
            r->t_done = t;
            r->prompt_tokens = ev.prompt_tokens;
            r->cached_prompt_tokens = ev.cached_prompt_tokens;
            bool ok = ev.finish == KVD_FINISH_STOP || ev.finish == KVD_FINISH_LENGTH;
            r->code = ok ? 0 : (ev.code ? ev.code : KVD_EINTERNAL);
            if (!ok && !res->first_error[0])
                snprintf(res->first_error, sizeof(res->first_error), "%s: %s",
                         kvd_errname(r->code), ev.msg);
            if (t > res->t_end)
                res->t_end = t;
            inflight--;
            n_done++;
        }
    }
    if (res->have_pool) {
        struct admin_pool p;
        if (admin_conn_pool(&ac, &p, aerr) == 0)
            add_sample(res, &cap_samples, mono_s() - t0, &p);
    }
    progress(cfg, n_done, w->n, inflight, tokens, mono_s() - t0, true, tty, &last_decile);
    rc = 0;
out:
    if (res->have_pool)
        admin_conn_close(&ac);
    free(by_id);
    return rc;
}
