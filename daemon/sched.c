/* sched.c — continuous batching, admission by pages, preemption (see sched.h). */
#include "daemon/sched.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Relative cost of computing one token vs attending over one token of context, used
 * only to balance a step among workers (a token's matmuls dwarf one KV read). */
#define SCHED_TOKEN_COST 16

static void list_unlink(struct sched_seq **head, struct sched_seq **tail, struct sched_seq *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        *head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    else
        *tail = x->prev;
    x->prev = x->next = NULL;
}

static void list_push_back(struct sched_seq **head, struct sched_seq **tail, struct sched_seq *x)
{
    x->next = NULL;
    x->prev = *tail;
    if (*tail)
        (*tail)->next = x;
    else
        *head = x;
    *tail = x;
}

static void list_push_front(struct sched_seq **head, struct sched_seq **tail, struct sched_seq *x)
{
    x->prev = NULL;
    x->next = *head;
    if (*head)
        (*head)->prev = x;
    else
        *tail = x;
    *head = x;
}

int sched_init(struct sched *s, const struct sched_limits *lim)
{
    if (!lim->max_batch_tokens || !lim->max_running || !lim->max_model_len || !lim->block_size ||
        !lim->total_pages)
        return -EINVAL;
    struct sched t;
    memset(&t, 0, sizeof(t));
    t.lim = *lim;
    t.max_pages = (lim->max_model_len + lim->block_size - 1) / lim->block_size;
    t.order_next = 1;
    t.plan.entries = calloc(lim->max_running, sizeof(*t.plan.entries));
    t.plan.preempted = calloc(lim->max_running, sizeof(*t.plan.preempted));
    t.plan.failed = calloc(lim->max_running + 1, sizeof(*t.plan.failed));
    if (!t.plan.entries || !t.plan.preempted || !t.plan.failed) {
        free(t.plan.entries);
        free(t.plan.preempted);
        free(t.plan.failed);
        return -ENOMEM;
    }
    *s = t;
    return 0;
}

void sched_release(struct sched *s)
{
    free(s->plan.entries);
    free(s->plan.preempted);
    free(s->plan.failed);
    memset(s, 0, sizeof(*s));
}

/* Pages a sequence must hold to have computed n tokens. */
static uint32_t seq_target_pages(const struct sched *s, const struct sched_seq *q, uint32_t n)
{
    if (s->lim.naive)
        return s->max_pages;
    (void)q;
    return sched_pages_for(s, n);
}

int sched_submit(struct sched *s, struct sched_seq *seq)
{
    KVD_BUG_ON(seq->state != SCHED_NEW || seq->n_tokens == 0);
    uint32_t need = s->lim.naive ? s->max_pages : sched_pages_for(s, seq->n_tokens + 1);
    if (seq->n_tokens + 1 > s->lim.max_model_len || need > s->lim.total_pages)
        return KVD_ETOOLONG;
    if (s->n_queued >= s->lim.max_queue)
        return KVD_EOVERLOAD;
    seq->state = SCHED_QUEUED;
    seq->n_computed = seq->n_pages = seq->n_cached = seq->n_committed = 0;
    list_push_back(&s->q_head, &s->q_tail, seq);
    s->n_queued++;
    return 0;
}

void sched_preempt(struct sched *s, struct sched_seq *seq)
{
    KVD_BUG_ON(seq->state != SCHED_RUNNING);
    list_unlink(&s->r_head, &s->r_tail, seq);
    s->n_running--;
    seq->state = SCHED_PREEMPTED;
    seq->n_computed = seq->n_pages = seq->n_committed = 0;
    seq->preemptions++;
    s->preemptions++;
    list_push_front(&s->q_head, &s->q_tail, seq);
    s->n_queued++;
    log_info("preempted seq %llu (%u tokens, preemption %u, %llu in total)",
             (unsigned long long)seq->id, seq->n_tokens, seq->preemptions,
             (unsigned long long)s->preemptions);
}

void sched_finish(struct sched *s, struct sched_seq *seq)
{
    switch (seq->state) {
    case SCHED_QUEUED:
    case SCHED_PREEMPTED:
        list_unlink(&s->q_head, &s->q_tail, seq);
        s->n_queued--;
        break;
    case SCHED_RUNNING:
        list_unlink(&s->r_head, &s->r_tail, seq);
        s->n_running--;
        break;
    case SCHED_NEW:
    case SCHED_DONE:
        break;
    }
    seq->state = SCHED_DONE;
}

static void plan_entry(struct sched_plan *p, struct sched_seq *q, uint32_t n, uint32_t need,
                       bool admitted)
{
    struct sched_entry *e = &p->entries[p->n_entries++];
    e->seq = q;
    e->pos0 = q->n_computed;
    e->n = n;
    e->need_pages = need;
    e->sample = q->n_computed + n == q->n_tokens;
    e->admitted = admitted;
    e->worker = 0;
    p->n_tokens += n;
}

/* The next sequence to admit (see SCHED_REORDER_WINDOW). */
static struct sched_seq *sched_pick_next(const struct sched *s)
{
    struct sched_seq *head = s->q_head, *best = head;
    if (!s->lim.cache_aware || head->state == SCHED_PREEMPTED ||
        s->n_queued > SCHED_REORDER_QUEUE_MAX)
        return head;
    uint32_t i = 1;
    for (struct sched_seq *q = head->next; q && i < SCHED_REORDER_WINDOW; q = q->next, i++) {
        if (q->state != SCHED_QUEUED)
            break;
        if (q->prefix_hint > best->prefix_hint)
            best = q;
    }
    /* Nobody in front of best may have been overtaken too often already. */
    for (struct sched_seq *o = head; o != best; o = o->next)
        if (o->overtaken >= SCHED_OVERTAKE_MAX)
            return head;
    return best;
}

struct sched_plan *sched_plan(struct sched *s, uint32_t avail)
{
    struct sched_plan *p = &s->plan;
    uint32_t budget = s->lim.max_batch_tokens;
    p->n_entries = p->n_preempted = p->n_failed = 0;
    p->n_tokens = 0;

    /* Running sequences, oldest first. Victims are taken from the tail, which is
     * always newer than the sequence being planned, so they have no entry yet. */
    struct sched_seq *q = s->r_head;
    while (q && budget > 0) {
        if (q->n_computed >= q->n_tokens) { /* finished, awaiting sched_finish */
            q = q->next;
            continue;
        }
        uint32_t n = q->n_tokens - q->n_computed;
        if (n > budget)
            n = budget;
        uint32_t target = seq_target_pages(s, q, q->n_computed + n);
        uint32_t need = target > q->n_pages ? target - q->n_pages : 0;
        bool q_gone = false;
        while (need > avail) {
            struct sched_seq *victim = s->r_tail;
            if (victim == q && s->n_running == 1) {
                /* Alone and still short: no preemption can ever make it fit. */
                log_warn("seq %llu cannot fit: needs %u more pages, %u obtainable, nothing "
                         "left to preempt",
                         (unsigned long long)q->id, need, avail);
                sched_finish(s, q);
                p->failed[p->n_failed++] = q;
                q_gone = true;
                break;
            }
            avail += victim->n_pages; /* an estimate: shared pages stay in use */
            sched_preempt(s, victim);
            p->preempted[p->n_preempted++] = victim;
            if (victim == q) {
                q_gone = true;
                break;
            }
        }
        if (q_gone)
            break; /* q was the newest: nothing after it */
        avail -= need;
        budget -= n;
        plan_entry(p, q, n, target > q->n_pages ? target : q->n_pages, false);
        q = q->next; /* read after preemptions: they unlink from the tail */
    }

    /* Admission, FCFS (or cache-aware), only when nobody had to be preempted. */
    while (p->n_preempted == 0 && s->q_head && budget > 0 && s->n_running < s->lim.max_running) {
        q = sched_pick_next(s);
        uint32_t total = s->lim.naive ? s->max_pages : sched_pages_for(s, q->n_tokens);
        if (total > s->lim.total_pages) {
            list_unlink(&s->q_head, &s->q_tail, q);
            s->n_queued--;
            q->state = SCHED_DONE;
            p->failed[p->n_failed++] = q;
            continue;
        }
        if (total > avail)
            break; /* the chosen one waits for pages, nobody overtakes it */
        for (struct sched_seq *o = s->q_head; o && o != q; o = o->next)
            o->overtaken++;
        avail -= total;
        list_unlink(&s->q_head, &s->q_tail, q);
        s->n_queued--;
        q->state = SCHED_RUNNING;
        q->order = s->order_next++;
        q->n_cached = 0;
        list_push_back(&s->r_head, &s->r_tail, q);
        s->n_running++;
        uint32_t n = q->n_tokens < budget ? q->n_tokens : budget;
        budget -= n;
        plan_entry(p, q, n, total, true);
    }
    return p;
}

void sched_entry_hit(struct sched *s, struct sched_entry *e, uint32_t hit_blocks)
{
    struct sched_seq *q = e->seq;
    uint32_t hit = hit_blocks * s->lim.block_size;
    KVD_BUG_ON(!e->admitted || hit >= q->n_tokens || e->pos0 != 0);
    q->n_pages = hit_blocks;
    q->n_computed = hit;
    q->n_cached = hit;
    q->n_committed = hit_blocks;
    uint32_t left = q->n_tokens - hit;
    s->plan.n_tokens -= e->n;
    if (e->n > left)
        e->n = left;
    s->plan.n_tokens += e->n;
    e->pos0 = hit;
    e->sample = hit + e->n == q->n_tokens;
}

uint32_t sched_assign(struct sched *s, uint32_t n_workers)
{
    struct sched_plan *p = &s->plan;
    uint64_t load[SCHED_WORKERS_MAX] = {0};
    uint32_t used = 0;
    if (n_workers > SCHED_WORKERS_MAX)
        n_workers = SCHED_WORKERS_MAX;
    if (n_workers == 0)
        n_workers = 1;
    for (uint32_t i = 0; i < p->n_entries; i++) {
        struct sched_entry *e = &p->entries[i];
        if (!e->seq)
            continue;
        uint32_t best = 0;
        for (uint32_t w = 1; w < n_workers; w++)
            if (load[w] < load[best])
                best = w;
        /* A sequence costs its tokens plus its context (attention reads it). */
        load[best] += (uint64_t)e->n * SCHED_TOKEN_COST + e->pos0 + 1;
        e->worker = best;
    }
    for (uint32_t w = 0; w < n_workers; w++)
        used += load[w] > 0;
    return used;
}

int sched_entry_done(struct sched *s, struct sched_entry *e, bool has_token, uint32_t token)
{
    struct sched_seq *q = e->seq;
    (void)s;
    KVD_BUG_ON(q->n_computed != e->pos0 || e->pos0 + e->n > q->n_tokens);
    q->n_computed += e->n;
    if (!has_token)
        return 0;
    if (q->n_tokens >= q->max_total)
        return -ENOSPC;
    q->tokens[q->n_tokens++] = token;
    return 0;
}

int sched_check(const struct sched *s)
{
    uint32_t n = 0;
    uint64_t last = 0;
    for (const struct sched_seq *q = s->r_head; q; q = q->next, n++) {
        if (q->state != SCHED_RUNNING || q->order <= last ||
            (q->next ? q->next->prev != q : s->r_tail != q) || q->n_computed > q->n_tokens ||
            q->n_computed > q->n_pages * s->lim.block_size) {
            log_err("sched check: running seq %llu inconsistent", (unsigned long long)q->id);
            return -EINVAL;
        }
        last = q->order;
    }
    if (n != s->n_running || n > s->lim.max_running) {
        log_err("sched check: running count %u, recorded %u", n, s->n_running);
        return -EINVAL;
    }
    n = 0;
    for (const struct sched_seq *q = s->q_head; q; q = q->next, n++) {
        if ((q->state != SCHED_QUEUED && q->state != SCHED_PREEMPTED) || q->n_pages ||
            q->n_computed || (q->next ? q->next->prev != q : s->q_tail != q)) {
            log_err("sched check: waiting seq %llu inconsistent", (unsigned long long)q->id);
            return -EINVAL;
        }
    }
    if (n != s->n_queued) {
        log_err("sched check: queue count %u, recorded %u", n, s->n_queued);
        return -EINVAL;
    }
    return 0;
}
