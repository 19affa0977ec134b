/* admin_ep.c — admin.sock (proto/admin_msg.h): pool, seqs, workers, prefix, map, evict.
 *
 * Replies that need the broker (every kind but "workers") are built asynchronously:
 * reading admin.sock pauses (a cooked REP socket remembers only the latest request),
 * kvd asks the broker for stats, then pages its dump (ADMIN_DUMP_PAGES_MAX pages at
 * most: refcounts give pages_shared and the map), then replies and resumes.
 * tokens_stored counts the computed tokens of kvd's live sequences, capped by the
 * capacity of the pages in use (a shared page is one page however many share it).
 */
#include "daemon/kvd.h"

#include "common/err.h"
#include "common/log.h"
#include "proto/admin_msg.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ADMIN_DUMP_PAGES_MAX (1u << 20) /* pages walked for refcounts; larger pools: none */

struct admin_job {
    struct kvd *d;
    enum admin_req req;
    struct broker_stats st;
    uint8_t *state; /* per page: enum admin_page (NULL if not dumped) */
    uint32_t n_pages;
    uint32_t dumped;
    uint64_t evicted;
    uint32_t top_first[ADMIN_PREFIX_TOP_MAX]; /* first page of each "prefix" top group */
};

static void admin_send(struct kvd *d, struct wbuf *w)
{
    int rc = nnuv_send(&d->admin_ep, w->sb.data, w->sb.size);
    if (rc < 0)
        log_warn("cannot reply on admin.sock: %s", kvd_strerror(rc));
}

static void admin_send_err(struct kvd *d, int code, const char *msg)
{
    struct wbuf w;
    wbuf_init(&w);
    wire_error_reply(&w, code, msg);
    admin_send(d, &w);
    wbuf_release(&w);
}

static void job_end(struct admin_job *j)
{
    struct kvd *d = j->d;
    free(j->state);
    free(j);
    d->admin_waiting = false;
    if (d->admin_open)
        nnuv_recv_resume(&d->admin_ep);
}

static uint32_t seq_shared_pages(const struct admin_job *j, const struct kvd_req *r)
{
    uint32_t n = 0;
    if (!j->state)
        return 0;
    for (uint32_t i = 0; i < r->seq.n_pages; i++)
        n += r->seq.blocks[i] < j->n_pages && j->state[r->seq.blocks[i]] == ADMIN_PAGE_SHARED;
    return n;
}

static void reply_pool(struct admin_job *j, struct wbuf *w)
{
    struct kvd *d = j->d;
    struct admin_pool p;
    memset(&p, 0, sizeof(p));
    p.pages_total = j->st.pages_total;
    p.pages_free = j->st.pages_free;
    p.pages_used = j->st.pages_used;
    p.pages_cached = j->st.pages_cached;
    for (uint32_t i = 0; j->state && i < j->n_pages; i++)
        p.pages_shared += j->state[i] == ADMIN_PAGE_SHARED;
    p.page_bytes = j->st.page_bytes;
    p.pool_bytes = j->st.pool_bytes;
    p.block_size = j->st.block_size;
    snprintf(p.kv_dtype, sizeof(p.kv_dtype), "%s", j->st.kv_dtype);
    snprintf(p.alloc, sizeof(p.alloc), "%s",
             d->cfg.alloc == CONFIG_ALLOC_NAIVE ? "naive" : "paged");
    p.prefix_cache = d->cfg.prefix_cache;
    p.max_model_len = d->cfg.max_model_len;
    uint64_t stored = 0;
    for (const struct kvd_req *r = d->reqs; r; r = r->a_next)
        if (r->seq.n_pages)
            stored += r->seq.n_computed;
    uint64_t cap_tokens = (uint64_t)p.pages_used * p.block_size;
    p.tokens_stored = stored < cap_tokens ? stored : cap_tokens;
    if (p.pages_used && p.page_bytes) {
        double per_token = (double)(d->geom.data_bytes + d->geom.scale_bytes) / d->geom.block_size;
        double held = (double)p.pages_used * (double)p.page_bytes;
        double w_ = 1.0 - (double)p.tokens_stored * per_token / held;
        p.waste_ratio = w_ < 0 ? 0 : w_ > 1 ? 1 : w_;
    }
    p.prefix_query_tokens = d->ctr.prefix_query_tokens;
    p.prefix_hit_tokens = d->ctr.prefix_hit_tokens;
    p.preemptions = d->sched.preemptions;
    p.requests_running = d->sched.n_running;
    p.requests_queued = d->sched.n_queued;
    p.requests_finished = d->ctr.requests_finished;
    p.requests_failed = d->ctr.requests_failed;
    p.prompt_tokens_total = d->ctr.prompt_tokens;
    p.prefill_tokens_total = d->ctr.prefill_tokens;
    p.output_tokens_total = d->ctr.output_tokens;
    p.steps_total = d->ctr.steps;
    p.uptime_ms = kvd_now_ms(d) - d->t_start_ms;
    admin_pool_encode(&p, w);
}

static void reply_seqs(struct admin_job *j, struct wbuf *w)
{
    struct kvd *d = j->d;
    struct admin_seqs s = {.seqs = calloc(ADMIN_MAX_SEQS, sizeof(struct admin_seq))};
    if (!s.seqs) {
        wire_error_reply(w, -ENOMEM, "out of memory");
        return;
    }
    for (const struct kvd_req *r = d->reqs; r; r = r->a_next) {
        s.n_total++;
        if (s.n >= ADMIN_MAX_SEQS)
            continue;
        struct admin_seq *q = &s.seqs[s.n++];
        q->id = r->seq.id;
        switch (r->seq.state) {
        case SCHED_PREEMPTED:
            q->state = ADMIN_SEQ_PREEMPTED;
            break;
        case SCHED_RUNNING:
            q->state = r->seq.n_computed < r->n_prompt ? ADMIN_SEQ_PREFILL : ADMIN_SEQ_DECODE;
            break;
        default:
            q->state = ADMIN_SEQ_QUEUED;
            break;
        }
        q->tokens = r->seq.n_tokens;
        q->pages = r->seq.n_pages;
        q->shared_pages = seq_shared_pages(j, r);
        q->worker = r->worker;
    }
    admin_seqs_encode(&s, w);
    free(s.seqs);
}

static void reply_workers(struct kvd *d, struct wbuf *w)
{
    struct admin_worker ws[ADMIN_MAX_WORKERS];
    struct admin_workers a = {.workers = ws, .n = 0};
    static const enum admin_worker_state map[] = {[KW_STARTING] = ADMIN_WORKER_STARTING,
                                                  [KW_IDLE] = ADMIN_WORKER_IDLE,
                                                  [KW_BUSY] = ADMIN_WORKER_BUSY,
                                                  [KW_RESTARTING] = ADMIN_WORKER_RESTARTING,
                                                  [KW_STOPPED] = ADMIN_WORKER_STOPPED};
    for (uint32_t i = 0; i < d->n_workers && a.n < ADMIN_MAX_WORKERS; i++) {
        const struct kvd_worker *k = &d->workers[i];
        struct admin_worker *x = &ws[a.n++];
        x->index = k->index;
        x->pid = (int32_t)k->pid;
        x->state = map[k->state];
        x->steps = k->steps;
        x->restarts = (uint32_t)k->restarts;
    }
    admin_workers_encode(&a, w);
}

static void reply_prefix(struct admin_job *j, struct wbuf *w)
{
    struct kvd *d = j->d;
    struct admin_prefix p;
    memset(&p, 0, sizeof(p));
    p.enabled = d->cfg.prefix_cache;
    p.entries = j->st.prefix_entries;
    p.cached_pages = j->st.pages_cached;
    p.hit_tokens = d->ctr.prefix_hit_tokens;
    p.query_tokens = d->ctr.prefix_query_tokens;
    p.evictions = j->st.prefix_evictions;
    /* Group live sequences by their first page when it is shared; a group's prefix is
     * the longest run of leading shared pages among its members. */
    for (const struct kvd_req *r = d->reqs; r && j->state; r = r->a_next) {
        if (!r->seq.n_pages || r->seq.blocks[0] >= j->n_pages ||
            j->state[r->seq.blocks[0]] != ADMIN_PAGE_SHARED)
            continue;
        uint32_t lead = 0;
        while (lead < r->seq.n_pages && r->seq.blocks[lead] < j->n_pages &&
               j->state[r->seq.blocks[lead]] == ADMIN_PAGE_SHARED)
            lead++;
        uint32_t first = r->seq.blocks[0], g;
        for (g = 0; g < p.n_top; g++)
            if (j->top_first[g] == first)
                break;
        if (g == p.n_top) {
            if (p.n_top >= ADMIN_PREFIX_TOP_MAX)
                continue;
            p.n_top++;
            j->top_first[g] = first;
            p.top[g].pages = 0;
        }
        p.top[g].seqs++;
        if (lead > p.top[g].pages)
            p.top[g].pages = lead;
        p.top[g].tokens = p.top[g].pages * d->cfg.block_size;
    }
    /* largest first */
    for (uint32_t a = 0; a < p.n_top; a++)
        for (uint32_t b = a + 1; b < p.n_top; b++)
            if (p.top[b].tokens > p.top[a].tokens) {
                struct admin_prefix_top t = p.top[a];
                p.top[a] = p.top[b];
                p.top[b] = t;
            }
    admin_prefix_encode(&p, w);
}

static void job_reply(struct admin_job *j)
{
    struct wbuf w;
    wbuf_init(&w);
    switch (j->req) {
    case ADMIN_REQ_POOL:
        reply_pool(j, &w);
        break;
    case ADMIN_REQ_SEQS:
        reply_seqs(j, &w);
        break;
    case ADMIN_REQ_PREFIX:
        reply_prefix(j, &w);
        break;
    case ADMIN_REQ_MAP: {
        struct admin_map m = {.pages_total = j->n_pages, .pages = j->state};
        if (j->state)
            admin_map_encode(&m, &w);
        else
            wire_error_reply(&w, KVD_EINTERNAL, "pool too large to map");
        break;
    }
    case ADMIN_REQ_EVICT: {
        struct admin_evict e = {.evicted = j->evicted};
        admin_evict_encode(&e, &w);
        break;
    }
    default:
        reply_workers(j->d, &w);
        break;
    }
    admin_send(j->d, &w);
    wbuf_release(&w);
    job_end(j);
}

static void job_fail(struct admin_job *j, int code, const char *what)
{
    char msg[128];
    snprintf(msg, sizeof(msg), "broker %s failed: %s", what, kvd_errname(code));
    admin_send_err(j->d, code == KVD_ESHUTDOWN ? KVD_ESHUTDOWN : KVD_EPEER, msg);
    job_end(j);
}

static void job_dump_next(struct admin_job *j);

static void dump_cb(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    struct admin_job *j = arg;
    struct broker_dump dp;
    char err[WIRE_ERR_LEN] = "";
    (void)b;
    memset(&dp, 0, sizeof(dp));
    if (status == 0)
        status = broker_rep_dump_decode(m, &dp, err);
    if (status < 0) {
        job_fail(j, status, "dump");
        return;
    }
    for (size_t i = 0; i < dp.n; i++) {
        const struct broker_dump_page *pg = &dp.pages[i];
        if (pg->page >= j->n_pages)
            continue;
        j->state[pg->page] = pg->state == BROKER_PAGE_CACHED ? ADMIN_PAGE_CACHED
                             : pg->state == BROKER_PAGE_FREE ? ADMIN_PAGE_FREE
                             : pg->refcnt >= 2               ? ADMIN_PAGE_SHARED
                                                             : ADMIN_PAGE_USED;
    }
    j->dumped = dp.n ? dp.start + (uint32_t)dp.n : j->n_pages;
    broker_dump_release(&dp);
    job_dump_next(j);
}

static void job_dump_next(struct admin_job *j)
{
    if (!j->state || j->dumped >= j->n_pages) {
        job_reply(j);
        return;
    }
    struct wbuf w;
    wbuf_init(&w);
    broker_req_dump_encode(&w, j->dumped, BROKER_DUMP_MAX);
    int rc = bcli_call(&j->d->bc, &w, dump_cb, j);
    if (rc < 0) {
        wbuf_release(&w);
        job_fail(j, rc, "dump");
    }
}

static void stats_cb(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    struct admin_job *j = arg;
    char err[WIRE_ERR_LEN] = "";
    (void)b;
    if (status == 0)
        status = broker_rep_stats_decode(m, &j->st, err);
    if (status < 0) {
        job_fail(j, status, "stats");
        return;
    }
    j->d->bstats = j->st;
    j->d->bstats_valid = true;
    j->n_pages = j->st.pages_total;
    if (j->req != ADMIN_REQ_EVICT && j->n_pages <= ADMIN_DUMP_PAGES_MAX) {
        j->state = calloc(j->n_pages ? j->n_pages : 1, 1);
        if (!j->state) {
            job_fail(j, -ENOMEM, "dump");
            return;
        }
    }
    job_dump_next(j);
}

static void evict_cb(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    struct admin_job *j = arg;
    char err[WIRE_ERR_LEN] = "";
    (void)b;
    if (status == 0)
        status = broker_rep_ok_decode(m, &j->evicted, err);
    if (status < 0) {
        job_fail(j, status, "evict_cached");
        return;
    }
    log_info("evicted %llu cached pages on admin request", (unsigned long long)j->evicted);
    prefixhint_clear(&j->d->hints);
    job_reply(j);
}

static void admin_recv_cb(struct nnuv *n, const void *buf, size_t len)
{
    struct kvd *d = n->data;
    struct wmsg m;
    char err[WIRE_ERR_LEN] = "";
    enum admin_req req;
    int rc = wmsg_parse(&m, buf, len, err);
    if (rc == 0)
        rc = admin_request_decode(&m, &req, err);
    wmsg_release(&m);
    if (rc < 0) {
        admin_send_err(d, rc, err);
        return;
    }
    if (req == ADMIN_REQ_WORKERS) {
        struct wbuf w;
        wbuf_init(&w);
        reply_workers(d, &w);
        admin_send(d, &w);
        wbuf_release(&w);
        return;
    }
    struct admin_job *j = calloc(1, sizeof(*j));
    if (!j) {
        admin_send_err(d, -ENOMEM, "out of memory");
        return;
    }
    j->d = d;
    j->req = req;
    struct wbuf w;
    wbuf_init(&w);
    bcli_cb cb = stats_cb;
    if (req == ADMIN_REQ_EVICT) {
        broker_req_evict_cached_encode(&w);
        cb = evict_cb;
    } else {
        broker_req_stats_encode(&w);
    }
    rc = bcli_call(&d->bc, &w, cb, j);
    if (rc < 0) {
        wbuf_release(&w);
        free(j);
        admin_send_err(d, rc == KVD_ESHUTDOWN ? rc : KVD_EPEER, "broker unreachable");
        return;
    }
    d->admin_waiting = true;
    nnuv_recv_pause(&d->admin_ep);
}

int admin_ep_open(struct kvd *d)
{
    int rc = nnuv_listen(&d->admin_ep, d->loop, d->rundir, PATHS_SOCK_ADMIN, NN_REP, false,
                         admin_recv_cb, d, NULL);
    if (rc < 0)
        return rc;
    d->admin_open = true;
    return 0;
}

static void admin_ep_closed(struct nnuv *n)
{
    struct kvd *d = n->data;
    char path[PATHS_MAX];
    if (paths_join(path, sizeof(path), d->rundir, PATHS_SOCK_ADMIN) == 0)
        unlink(path);
    d->admin_open = false;
    kvd_maybe_finish_shutdown(d);
}

void admin_ep_close(struct kvd *d)
{
    if (d->admin_open && !d->admin_ep.closing)
        nnuv_close(&d->admin_ep, admin_ep_closed);
}
