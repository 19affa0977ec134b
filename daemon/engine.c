/* engine.c — the step cycle (DESIGN.md "Request life", steps 3-6).
 *
 * One cycle at a time: sweep (finish cancelled / timed-out requests at a safe point) ->
 * broker stats (pages obtainable) -> sched_plan -> release preempted pages, fail what
 * can never fit -> per entry: prefix lookup (admitted ones), page alloc -> split the
 * step among idle workers -> results: tokens appended, full blocks committed to the
 * prefix index, finished requests ended -> next cycle. Broker requests go through one
 * FIFO (bcli), so a free issued before an alloc is applied first.
 * A worker that dies mid-step loses only its share: that share is re-sent unchanged to
 * another (or the restarted) worker; the KV already in the pages is reused.
 */
#include "daemon/kvd.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void cycle_start(struct kvd *d);
static void prepare_next(struct kvd *d);

static struct kvd_req *entry_req(const struct sched_entry *e)
{
    return e->seq->owner;
}

int engine_init(struct kvd *d)
{
    for (uint32_t i = 0; i < SCHED_WORKERS_MAX; i++) {
        d->slots[i].entry_idx = calloc(d->cfg.max_running, sizeof(uint32_t));
        if (!d->slots[i].entry_idx)
            return -ENOMEM;
    }
    uv_timer_init(d->loop, &d->eng_timer);
    d->eng_timer.data = d;
    d->eng = ENG_IDLE;
    for (uint32_t i = 0; i < SCHED_WORKERS_MAX; i++)
        d->slots[i].worker = -1;
    return 0;
}

static void eng_timer_cb(uv_timer_t *t)
{
    struct kvd *d = t->data;
    if (d->eng == ENG_IDLE || d->eng == ENG_WAITING)
        cycle_start(d);
}

void engine_kick(struct kvd *d)
{
    if (d->eng == ENG_IDLE || d->eng == ENG_WAITING) {
        d->eng = ENG_WAITING;
        uv_timer_start(&d->eng_timer, eng_timer_cb, 0, 0);
    }
}

bool engine_is_idle(const struct kvd *d)
{
    return d->eng == ENG_IDLE || d->eng == ENG_WAITING;
}

/* The end decided for r now (0: none): client cancel, session gone, timeout, shutdown. */
static int req_due_end(const struct kvd *d, const struct kvd_req *r, uint64_t now, const char **msg)
{
    bool grace_over = d->shutting_down && now >= d->shutdown_deadline_ms;
    *msg = NULL;
    if (r->end_code)
        return r->end_code;
    if (r->deadline_ms && now >= r->deadline_ms) {
        *msg = "request timeout_ms passed";
        return KVD_ETIMEDOUT;
    }
    if (d->shutting_down && (grace_over || r->seq.state != SCHED_RUNNING)) {
        *msg = d->shutdown_msg ? d->shutdown_msg : "kvd is shutting down";
        return KVD_ESHUTDOWN;
    }
    return 0;
}

/* Finishes requests whose end is decided. A request in the step in flight cannot be
 * freed (the step's entries point at it): its client is told now (req_end_early) and
 * the request is finished when its slot completes or is abandoned. */
static void engine_sweep(struct kvd *d)
{
    uint64_t now = kvd_now_ms(d);
    struct kvd_req *next;
    for (struct kvd_req *r = d->reqs; r; r = next) {
        next = r->a_next;
        const char *msg;
        int code = req_due_end(d, r, now, &msg);
        if (!code)
            continue;
        if (!r->in_step)
            req_finish(d, r, code, msg);
        else if (code < 0 && r->sess)
            req_end_early(d, r, code, msg);
    }
}

/* Gives up slot sl of the step in flight: its requests leave the step (their end_code
 * says how they end), a worker still computing it has its late result dropped. */
static void slot_abandon(struct kvd *d, struct engine_slot *sl, int code)
{
    struct sched_plan *p = &d->sched.plan;
    for (uint32_t k = 0; k < sl->n_entries; k++) {
        struct kvd_req *r = entry_req(&p->entries[sl->entry_idx[k]]);
        r->in_step = false;
        r->worker = -1;
        if (!r->end_code || r->end_code > 0)
            r->end_code = code;
    }
    if (sl->worker >= 0) {
        struct kvd_worker *w = &d->workers[sl->worker];
        if (w->slot >= 0 && &d->slots[w->slot] == sl)
            w->slot = -1;
        sl->worker = -1;
    }
    sl->done = true;
    d->slots_pending--;
}

/* True when every request of slot sl already has an error end (told to its client). */
static bool slot_is_ended(struct kvd *d, const struct engine_slot *sl)
{
    struct sched_plan *p = &d->sched.plan;
    for (uint32_t k = 0; k < sl->n_entries; k++)
        if (entry_req(&p->entries[sl->entry_idx[k]])->end_code >= 0)
            return false;
    return true;
}

static void cycle_end(struct kvd *d, bool had_work);

void engine_sweep_if_idle(struct kvd *d)
{
    if (engine_is_idle(d)) {
        engine_sweep(d);
        return;
    }
    if (d->eng != ENG_STEPPING)
        return; /* preparing: bounded by the broker's reply timeout */
    engine_sweep(d);
    bool grace_over = d->shutting_down && kvd_now_ms(d) >= d->shutdown_deadline_ms;
    for (uint32_t s = 0; s < d->n_slots; s++) {
        struct engine_slot *sl = &d->slots[s];
        if (sl->done)
            continue;
        if (grace_over) {
            log_warn("shutdown grace over: abandoning step %llu (%u sequences)%s",
                     (unsigned long long)sl->step_id, sl->n_entries,
                     sl->worker >= 0 ? " still on a worker" : ", no worker took it");
            slot_abandon(d, sl, KVD_ESHUTDOWN);
        } else if (sl->worker < 0 && slot_is_ended(d, sl)) {
            /* No worker computes it: nothing writes its pages, drop it. */
            slot_abandon(d, sl, KVD_ECANCELLED);
        }
    }
    if (d->slots_pending == 0) {
        d->eng = ENG_WAITING;
        engine_sweep(d);
        cycle_end(d, true);
    }
}

static void cycle_end(struct kvd *d, bool had_work)
{
    d->eng = ENG_WAITING;
    if (had_work)
        uv_timer_start(&d->eng_timer, eng_timer_cb, 0, 0);
    else if (d->sched.n_queued || d->sched.n_running)
        uv_timer_start(&d->eng_timer, eng_timer_cb, KVD_ENGINE_RETRY_MS, 0);
    else
        d->eng = ENG_IDLE;
}

static void req_hash_upto(struct kvd *d, struct kvd_req *r, uint32_t upto);

/* Cache-aware admission: how many leading prompt blocks of the first waiting requests
 * kvd believes cached (the broker's lookup decides the real hits). */
static void refresh_prefix_hints(struct kvd *d)
{
    if (!d->sched.lim.cache_aware || d->sched.n_queued > SCHED_REORDER_QUEUE_MAX)
        return;
    uint32_t i = 0;
    for (struct sched_seq *q = d->sched.q_head; q && i < SCHED_REORDER_WINDOW; q = q->next, i++) {
        struct kvd_req *r = q->owner;
        uint32_t n = (q->n_tokens - 1) / d->cfg.block_size;
        if (!r->use_prefix || n == 0) {
            q->prefix_hint = 0;
            continue;
        }
        if (n > BROKER_LOOKUP_MAX)
            n = BROKER_LOOKUP_MAX;
        req_hash_upto(d, r, n);
        q->prefix_hint =
            prefixhint_leading(&d->hints, r->hashes, n < r->n_hashes ? n : r->n_hashes);
    }
}

static void stats_cb(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    struct kvd *d = b->data;
    char err[WIRE_ERR_LEN] = "";
    (void)arg;
    if (status == 0)
        status = broker_rep_stats_decode(m, &d->bstats, err);
    if (status < 0) {
        log_err("cannot read broker stats: %s %s", kvd_errname(status), err);
        d->eng = ENG_WAITING;
        uv_timer_start(&d->eng_timer, eng_timer_cb, BCLI_REPLY_TIMEOUT_MS / 5, 0);
        return;
    }
    d->bstats_valid = true;
    uint32_t avail = d->bstats.pages_free + d->bstats.pages_cached;
    refresh_prefix_hints(d);
    struct sched_plan *p = sched_plan(&d->sched, avail);
    for (uint32_t i = 0; i < p->n_preempted; i++) {
        struct kvd_req *r = p->preempted[i]->owner;
        kvd_release_seq_pages(d, &r->seq);
        r->holds_pages = false;
    }
    for (uint32_t i = 0; i < p->n_failed; i++) {
        struct kvd_req *r = p->failed[i]->owner;
        req_finish(d, r, KVD_ENOPAGES,
                   "the sequence cannot fit in the pages obtainable, even alone");
    }
    d->plan_had_work = p->n_entries > 0 || p->n_preempted > 0 || p->n_failed > 0;
    d->prep_cursor = 0;
    d->prep_phase = 0;
    prepare_next(d);
}

static void lookup_cb(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    struct kvd *d = b->data;
    struct sched_entry *e = arg;
    struct kvd_req *r = entry_req(e);
    uint32_t *pages = NULL;
    size_t n = 0;
    char err[WIRE_ERR_LEN] = "";
    if (status == 0)
        status = broker_rep_lookup_decode(m, &pages, &n, err);
    if (status < 0) {
        log_warn("prefix lookup for seq %llu failed: %s %s (computing it all)",
                 (unsigned long long)r->seq.id, kvd_errname(status), err);
    } else if (n > 0) {
        uint32_t max_hit = (r->seq.n_tokens - 1) / d->cfg.block_size;
        if (n > max_hit || n > r->n_hashes) {
            /* Our block table would no longer match the broker's page list (commits
             * name pages by position): give the sequence up rather than corrupt the
             * prefix index. */
            log_err("broker returned %zu prefix pages for %u hashes: failing seq %llu", n,
                    r->n_hashes, (unsigned long long)r->seq.id);
            free(pages);
            r->end_code = KVD_EINTERNAL;
            sched_preempt(&d->sched, &r->seq);
            kvd_release_seq_pages(d, &r->seq);
            r->holds_pages = false;
            e->seq = NULL;
            d->prep_cursor++;
            d->prep_phase = 0;
            prepare_next(d);
            return;
        } else {
            memcpy(r->seq.blocks, pages, n * sizeof(uint32_t));
            sched_entry_hit(&d->sched, e, (uint32_t)n);
            if (r->seq.preemptions == 0) {
                uint32_t hit = (uint32_t)n * d->cfg.block_size;
                r->cached_prompt = hit < r->n_prompt ? hit : r->n_prompt;
            }
            d->ctr.prefix_hit_tokens += (uint64_t)n * d->cfg.block_size;
        }
    }
    free(pages);
    d->prep_phase = 1;
    prepare_next(d);
}

static void alloc_cb(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    struct kvd *d = b->data;
    struct sched_entry *e = arg;
    struct kvd_req *r = entry_req(e);
    uint32_t *pages = NULL;
    size_t n = 0;
    char err[WIRE_ERR_LEN] = "";
    if (status == 0)
        status = broker_rep_alloc_decode(m, &pages, &n, err);
    uint32_t want = e->need_pages - r->seq.n_pages;
    if (status == 0 && n != want) {
        log_err("broker gave %zu pages, %u asked", n, want);
        status = KVD_EMSG;
    }
    if (status < 0) {
        if (status != KVD_ENOPAGES)
            log_err("page allocation for seq %llu failed: %s %s", (unsigned long long)r->seq.id,
                    kvd_errname(status), err);
        sched_preempt(&d->sched, &r->seq);
        kvd_release_seq_pages(d, &r->seq);
        r->holds_pages = false;
        e->seq = NULL;
    } else {
        memcpy(r->seq.blocks + r->seq.n_pages, pages, n * sizeof(uint32_t));
        r->seq.n_pages += (uint32_t)n;
    }
    free(pages);
    d->prep_cursor++;
    d->prep_phase = 0;
    prepare_next(d);
}

/* Hashes of the full blocks of r's tokens up to block `upto` (exclusive). */
static void req_hash_upto(struct kvd *d, struct kvd_req *r, uint32_t upto)
{
    if (upto <= r->n_hashes)
        return;
    const struct blockhash *parent = r->n_hashes ? &r->hashes[r->n_hashes - 1] : NULL;
    size_t got = blockhash_chain(&r->hid, r->seq.tokens, (size_t)upto * d->cfg.block_size,
                                 r->n_hashes, parent, r->hashes + r->n_hashes, upto - r->n_hashes);
    r->n_hashes += (uint32_t)got;
}

static int send_lookup(struct kvd *d, struct sched_entry *e)
{
    struct kvd_req *r = entry_req(e);
    uint32_t n = (r->seq.n_tokens - 1) / d->cfg.block_size; /* keep the last token */
    if (n == 0)
        return 0;
    if (n > BROKER_LOOKUP_MAX)
        n = BROKER_LOOKUP_MAX;
    req_hash_upto(d, r, n);
    d->ctr.prefix_query_tokens += (uint64_t)n * d->cfg.block_size;
    _Static_assert(sizeof(struct blockhash) == sizeof(struct broker_hash), "16-byte hashes");
    struct wbuf w;
    wbuf_init(&w);
    int rc = broker_req_lookup_encode(&w, d->bc.lease, r->seq.id,
                                      (const struct broker_hash *)r->hashes, n);
    if (rc == 0)
        rc = bcli_call(&d->bc, &w, lookup_cb, e);
    if (rc < 0) {
        wbuf_release(&w);
        return 0;
    }
    r->holds_pages = true;
    return 1;
}

static int send_alloc(struct kvd *d, struct sched_entry *e)
{
    struct kvd_req *r = entry_req(e);
    if (e->need_pages <= r->seq.n_pages)
        return 0;
    uint32_t n = e->need_pages - r->seq.n_pages;
    struct wbuf w;
    wbuf_init(&w);
    int rc =
        n > BROKER_ALLOC_MAX ? -EINVAL : broker_req_alloc_encode(&w, d->bc.lease, r->seq.id, n);
    if (rc == 0)
        rc = bcli_call(&d->bc, &w, alloc_cb, e);
    if (rc < 0) {
        wbuf_release(&w);
        log_err("cannot ask pages for seq %llu: %s", (unsigned long long)r->seq.id,
                kvd_strerror(rc));
        r->end_code = KVD_EINTERNAL;
        sched_preempt(&d->sched, &r->seq);
        kvd_release_seq_pages(d, &r->seq);
        r->holds_pages = false;
        e->seq = NULL;
        return 0;
    }
    r->holds_pages = true;
    return 1;
}

static void dispatch(struct kvd *d);

static void prepare_next(struct kvd *d)
{
    struct sched_plan *p = &d->sched.plan;
    while (d->prep_cursor < p->n_entries) {
        struct sched_entry *e = &p->entries[d->prep_cursor];
        if (!e->seq) {
            d->prep_cursor++;
            continue;
        }
        struct kvd_req *r = entry_req(e);
        if (d->prep_phase == 0) {
            d->prep_phase = 1;
            if (e->admitted && r->use_prefix && send_lookup(d, e))
                return;
        }
        if (send_alloc(d, e))
            return;
        d->prep_cursor++;
        d->prep_phase = 0;
    }
    dispatch(d);
}

static void slot_bind(struct kvd *d, uint32_t si, struct kvd_worker *w);

static void dispatch(struct kvd *d)
{
    struct sched_plan *p = &d->sched.plan;
    uint32_t live = 0;
    for (uint32_t i = 0; i < p->n_entries; i++)
        live += p->entries[i].seq != NULL;
    if (live == 0) {
        /* Nothing runnable (waiting for pages, or every allocation failed): retry after
         * a pause rather than spinning on the broker. */
        cycle_end(d, false);
        return;
    }
    d->eng = ENG_STEPPING;
    uint32_t idle = workers_idle(d);
    uint32_t n_slots = sched_assign(&d->sched, idle ? idle : 1);
    for (uint32_t s = 0; s < n_slots; s++) {
        d->slots[s].n_entries = 0;
        d->slots[s].worker = -1;
        d->slots[s].done = false;
    }
    for (uint32_t i = 0; i < p->n_entries; i++) {
        struct sched_entry *e = &p->entries[i];
        if (!e->seq)
            continue;
        struct engine_slot *sl = &d->slots[e->worker];
        sl->entry_idx[sl->n_entries++] = i;
        entry_req(e)->in_step = true;
    }
    d->n_slots = n_slots;
    d->slots_pending = n_slots;
    engine_worker_idle(d);
}

/* Encodes slot si's share of the step and sends it to worker w. */
static void slot_bind(struct kvd *d, uint32_t si, struct kvd_worker *w)
{
    struct engine_slot *sl = &d->slots[si];
    struct sched_plan *p = &d->sched.plan;
    struct step_seq *ss = calloc(sl->n_entries, sizeof(*ss));
    if (!ss) {
        log_err("out of memory building a step");
        return;
    }
    for (uint32_t k = 0; k < sl->n_entries; k++) {
        struct sched_entry *e = &p->entries[sl->entry_idx[k]];
        struct kvd_req *r = entry_req(e);
        struct step_seq *q = &ss[k];
        q->seq_id = r->seq.id;
        q->n_tokens = e->n;
        q->tokens = r->seq.tokens + e->pos0;
        q->pos0 = e->pos0;
        q->n_blocks = r->seq.n_pages;
        q->blocks = r->seq.blocks;
        q->sample = e->sample;
        q->sp = r->sp;
        bool pen = r->sp.repetition_penalty != 1.0f || r->sp.frequency_penalty != 0.0f ||
                   r->sp.presence_penalty != 0.0f;
        if (pen && e->sample) {
            uint32_t n = r->seq.n_tokens;
            uint32_t from = n > STEP_MAX_PENALTY_TOKENS ? n - STEP_MAX_PENALTY_TOKENS : 0;
            q->penalty_tokens = r->seq.tokens + from;
            q->n_penalty_tokens = n - from;
        }
        q->logprobs = e->sample ? r->logprobs : 0;
        q->prompt_logprobs = r->want_prompt_lp && e->pos0 < r->n_prompt;
        if (q->prompt_logprobs && e->pos0 + e->n < r->n_prompt) {
            q->has_next_token = true;
            q->next_token = r->seq.tokens[e->pos0 + e->n];
        }
        r->worker = (int32_t)w->index;
    }
    struct step_msg msg = {.step_id = ++d->next_step_id, .n_seqs = sl->n_entries, .seqs = ss};
    struct wbuf wb;
    wbuf_init(&wb);
    step_msg_encode(&wb, &msg);
    free(ss);
    sl->step_id = msg.step_id;
    sl->worker = (int32_t)w->index;
    w->slot = (int32_t)si;
    if (worker_send_step(d, w, &wb, msg.step_id) < 0) {
        sl->worker = -1; /* stays pending; retried when a worker turns idle */
        w->slot = -1;
    }
    wbuf_release(&wb);
}

void engine_worker_idle(struct kvd *d)
{
    if (d->eng != ENG_STEPPING) {
        if (d->sched.n_queued || d->sched.n_running)
            engine_kick(d);
        return;
    }
    for (uint32_t s = 0; s < d->n_slots; s++) {
        struct engine_slot *sl = &d->slots[s];
        if (sl->done || sl->worker >= 0)
            continue;
        struct kvd_worker *w = NULL;
        for (uint32_t i = 0; i < d->n_workers && !w; i++)
            if (d->workers[i].state == KW_IDLE)
                w = &d->workers[i];
        if (!w)
            return;
        slot_bind(d, s, w);
    }
}

void engine_worker_lost(struct kvd *d, struct kvd_worker *w)
{
    if (w->slot < 0 || d->eng != ENG_STEPPING)
        return;
    struct engine_slot *sl = &d->slots[w->slot];
    log_warn("worker %u lost step %llu (%u sequences): re-running it", w->index,
             (unsigned long long)sl->step_id, sl->n_entries);
    sl->worker = -1;
    w->slot = -1;
    engine_worker_idle(d);
}

static void commit_cb(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    (void)b;
    uint64_t n, seq = (uint64_t)(uintptr_t)arg;
    char err[WIRE_ERR_LEN] = "";
    if (status == 0)
        status = broker_rep_commit_decode(m, &n, err);
    if (status < 0 && status != KVD_ESHUTDOWN)
        log_warn("prefix commit of seq %llu failed: %s %s", (unsigned long long)seq,
                 kvd_errname(status), err);
}

/* Registers the newly full blocks of r in the prefix index. */
static void commit_full_blocks(struct kvd *d, struct kvd_req *r)
{
    uint32_t full = r->seq.n_computed / d->cfg.block_size;
    if (!d->cfg.prefix_cache || full <= r->seq.n_committed || full > r->seq.n_pages)
        return;
    req_hash_upto(d, r, full);
    uint32_t from = r->seq.n_committed;
    for (uint32_t b = from; b < full; b++)
        prefixhint_add(&d->hints, &r->hashes[b]);
    struct wbuf w;
    wbuf_init(&w);
    int rc = broker_req_commit_encode(&w, d->bc.lease, r->seq.id, from,
                                      (const struct broker_hash *)r->hashes + from, full - from);
    if (rc == 0)
        rc = bcli_call(&d->bc, &w, commit_cb, (void *)(uintptr_t)r->seq.id);
    if (rc < 0)
        wbuf_release(&w);
    r->seq.n_committed = full;
}

static void slot_fail(struct kvd *d, struct engine_slot *sl, int code)
{
    struct sched_plan *p = &d->sched.plan;
    for (uint32_t k = 0; k < sl->n_entries; k++) {
        struct kvd_req *r = entry_req(&p->entries[sl->entry_idx[k]]);
        r->in_step = false;
        r->worker = -1;
        r->end_code = code;
    }
}

static void slot_apply(struct kvd *d, struct engine_slot *sl, const struct step_result *res)
{
    struct sched_plan *p = &d->sched.plan;
    for (uint32_t k = 0; k < sl->n_entries; k++) {
        struct sched_entry *e = &p->entries[sl->entry_idx[k]];
        struct kvd_req *r = entry_req(e);
        const struct step_seq_result *sr = &res->seqs[k];
        r->in_step = false;
        r->worker = -1;
        if (e->pos0 < r->n_prompt)
            d->ctr.prefill_tokens += e->n;
        if (e->admitted && r->seq.preemptions == 0)
            d->ctr.prompt_tokens += r->n_prompt; /* once per request, not per recompute */
        if (sr->n_prompt)
            req_on_prompt_lp(r, e->pos0, sr);
        int rc = sched_entry_done(&d->sched, e, sr->has_token, sr->token);
        commit_full_blocks(d, r);
        if (rc < 0) {
            r->end_code = REQ_END_LENGTH;
            continue;
        }
        if (r->end_code)
            continue; /* cancelled meanwhile: ended at the next sweep */
        if (req_on_token(d, r, sr, sr->has_token))
            continue; /* r->end_code set: finished by the sweep with its text flushed */
        req_stream(d, r, false);
    }
}

void engine_on_result(struct kvd *d, struct kvd_worker *w, const struct wmsg *m)
{
    if (d->eng != ENG_STEPPING || w->slot < 0) {
        log_warn("worker %u sent a result with no step in flight (dropped)", w->index);
        return;
    }
    struct engine_slot *sl = &d->slots[w->slot];
    char err[WIRE_ERR_LEN] = "";
    w->slot = -1;
    if (wmsg_is(m, "err")) {
        const char *msg;
        size_t ml;
        int code = wmsg_error(m, &msg, &ml);
        log_err("worker %u failed step %llu: %s: %.*s", w->index, (unsigned long long)sl->step_id,
                kvd_errname(code), (int)ml, msg);
        slot_fail(d, sl, KVD_EINTERNAL);
    } else {
        struct step_result res;
        memset(&res, 0, sizeof(res));
        int rc = step_result_decode(m, &res, err);
        bool ok = rc == 0 && res.step_id == sl->step_id && res.n_seqs == sl->n_entries;
        for (uint32_t k = 0; ok && k < res.n_seqs; k++) {
            struct sched_entry *e = &d->sched.plan.entries[sl->entry_idx[k]];
            ok = res.seqs[k].seq_id == e->seq->id && res.seqs[k].has_token == e->sample &&
                 (!e->sample || res.seqs[k].token < d->model.tok.n_vocab);
        }
        if (!ok) {
            log_err("worker %u sent a bad result for step %llu: %s", w->index,
                    (unsigned long long)sl->step_id, rc ? err : "does not match the step");
            slot_fail(d, sl, KVD_EINTERNAL);
        } else {
            slot_apply(d, sl, &res);
        }
        step_result_release(&res);
    }
    sl->done = true;
    if (--d->slots_pending == 0) {
        d->ctr.steps++;
        cycle_end(d, true);
    }
}

void engine_close(struct kvd *d)
{
    uv_timer_stop(&d->eng_timer);
    uv_close((uv_handle_t *)&d->eng_timer, NULL);
    for (uint32_t i = 0; i < SCHED_WORKERS_MAX; i++) {
        free(d->slots[i].entry_idx);
        d->slots[i].entry_idx = NULL;
    }
}

static void cycle_start(struct kvd *d)
{
    if (d->reattaching) {
        d->eng = ENG_WAITING;
        uv_timer_start(&d->eng_timer, eng_timer_cb, BCLI_REPLY_TIMEOUT_MS / 5, 0);
        return;
    }
    d->eng = ENG_PREPARING;
    if (d->lease_reset) {
        /* The old lease's pages are gone: every running sequence recomputes. */
        d->lease_reset = false;
        while (d->sched.r_tail) {
            struct kvd_req *r = d->sched.r_tail->owner;
            sched_preempt(&d->sched, &r->seq);
            r->holds_pages = false;
        }
    }
    engine_sweep(d);
    if (!d->sched.n_queued && !d->sched.n_running) {
        d->eng = ENG_IDLE;
        return;
    }
    struct wbuf w;
    wbuf_init(&w);
    broker_req_stats_encode(&w);
    if (bcli_call(&d->bc, &w, stats_cb, NULL) < 0) {
        wbuf_release(&w);
        d->eng = ENG_WAITING;
        uv_timer_start(&d->eng_timer, eng_timer_cb, BCLI_REPLY_TIMEOUT_MS / 5, 0);
    }
}
