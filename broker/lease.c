#include "broker/lease.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define LEASE_SEQ_CAP0 8 /* first page-list allocation of a sequence */

static uint32_t seq_bucket(uint64_t id)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull; /* murmur3 finalizer step: spreads sequential ids */
    id ^= id >> 33;
    return (uint32_t)(id & (LEASE_SEQ_BUCKETS - 1));
}

void lease_table_init(struct lease_table *t)
{
    memset(t, 0, sizeof(*t));
    t->next_num = 1;
}

static void seqs_free(struct lease *l)
{
    for (uint32_t b = 0; b < LEASE_SEQ_BUCKETS; b++)
        for (struct lease_seq *s = l->bucket[b], *nx; s; s = nx) {
            nx = s->hnext;
            free(s->pages);
            free(s);
        }
}

void lease_table_release(struct lease_table *t)
{
    for (uint32_t i = 0; i < BROKER_LEASES_MAX; i++)
        if (t->slot[i]) {
            seqs_free(t->slot[i]);
            free(t->slot[i]);
        }
    lease_table_init(t);
}

/* Position of id in by_id (found: *at is its index, true), or where it would go. */
static bool by_id_search(const struct lease_table *t, uint64_t id, uint32_t *at)
{
    uint32_t lo = 0, hi = t->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (t->by_id[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *at = lo;
    return lo < t->n && t->by_id[lo]->id == id;
}

/* A random id that is nonzero and no live lease's; *at = its by_id insertion point. */
static int lease_id_pick(const struct lease_table *t, uint64_t *id, uint32_t *at)
{
    for (int i = 0; i < LEASE_ID_TRIES; i++) {
        uint64_t v;
        ssize_t got = getrandom(&v, sizeof(v), 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int rc = -errno;
            log_err("cannot draw a lease id: getrandom: %s", kvd_strerror(rc));
            return rc;
        }
        if (got != (ssize_t)sizeof(v) || v == 0 || by_id_search(t, v, at))
            continue;
        *id = v;
        return 0;
    }
    log_err("cannot draw a lease id: %d random ids in a row were 0, short or taken",
            LEASE_ID_TRIES);
    return -EAGAIN;
}

int lease_new(struct lease_table *t, const char *client, uint32_t pid, uint64_t now_ms,
              struct lease **out)
{
    if (t->n >= BROKER_LEASES_MAX)
        return KVD_EOVERLOAD;
    uint64_t id = 0;
    uint32_t at = 0;
    int rc = lease_id_pick(t, &id, &at);
    if (rc)
        return rc;
    struct lease *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->id = id;
    l->num = t->next_num++;
    snprintf(l->client, sizeof(l->client), "%s", client);
    l->pid = pid;
    l->last_ms = now_ms;
    for (uint32_t i = 0; i < BROKER_LEASES_MAX; i++)
        if (!t->slot[i]) {
            t->slot[i] = l;
            l->slot = i;
            break;
        }
    memmove(&t->by_id[at + 1], &t->by_id[at], sizeof(t->by_id[0]) * (t->n - at));
    t->by_id[at] = l;
    t->n++;
    *out = l;
    return 0;
}

struct lease *lease_find(const struct lease_table *t, uint64_t id)
{
    uint32_t at;
    return id && by_id_search(t, id, &at) ? t->by_id[at] : NULL;
}

void lease_free(struct lease_table *t, struct lease *l)
{
    uint32_t at;
    KVD_BUG_ON(!by_id_search(t, l->id, &at) || t->by_id[at] != l || t->slot[l->slot] != l);
    memmove(&t->by_id[at], &t->by_id[at + 1], sizeof(t->by_id[0]) * (t->n - at - 1));
    t->n--;
    t->by_id[t->n] = NULL;
    t->slot[l->slot] = NULL;
    seqs_free(l);
    free(l);
}

int lease_table_check(const struct lease_table *t)
{
    uint32_t live = 0;
    for (uint32_t i = 0; i < BROKER_LEASES_MAX; i++) {
        const struct lease *l = t->slot[i];
        if (!l)
            continue;
        live++;
        uint32_t at;
        if (l->slot != i || !l->id || !by_id_search(t, l->id, &at) || t->by_id[at] != l) {
            log_err("lease check: lease #%llu in slot %u is not indexed by its id",
                    (unsigned long long)l->num, i);
            return -EINVAL;
        }
    }
    if (live != t->n || t->n > BROKER_LEASES_MAX) {
        log_err("lease check: %u live slots but %u leases indexed", live, t->n);
        return -EINVAL;
    }
    for (uint32_t k = 1; k < t->n; k++)
        if (t->by_id[k - 1]->id >= t->by_id[k]->id) {
            log_err("lease check: id index not strictly sorted at %u", k);
            return -EINVAL;
        }
    return 0;
}

struct lease_seq *lease_seq_find(struct lease *l, uint64_t seq)
{
    for (struct lease_seq *s = l->bucket[seq_bucket(seq)]; s; s = s->hnext)
        if (s->id == seq)
            return s;
    return NULL;
}

struct lease_seq *lease_seq_get(struct lease *l, uint64_t seq, int *rc)
{
    struct lease_seq *s = lease_seq_find(l, seq);
    *rc = 0;
    if (s)
        return s;
    if (l->n_seqs >= BROKER_SEQS_PER_LEASE_MAX) {
        *rc = KVD_EOVERLOAD;
        return NULL;
    }
    if (!(s = calloc(1, sizeof(*s)))) {
        *rc = -ENOMEM;
        return NULL;
    }
    uint32_t b = seq_bucket(seq);
    s->id = seq;
    s->hnext = l->bucket[b];
    l->bucket[b] = s;
    l->n_seqs++;
    return s;
}

int lease_seq_push(struct lease *l, struct lease_seq *s, const uint32_t *pages, uint32_t n)
{
    if ((uint64_t)s->n + n > BROKER_SEQ_PAGES_MAX)
        return KVD_EMSG;
    if (s->n + n > s->cap) {
        uint32_t cap = s->cap ? s->cap : LEASE_SEQ_CAP0;
        while (cap < s->n + n)
            cap *= 2;
        uint32_t *p = realloc(s->pages, sizeof(*p) * cap);
        if (!p)
            return -ENOMEM;
        s->pages = p;
        s->cap = cap;
    }
    memcpy(s->pages + s->n, pages, sizeof(*pages) * n);
    s->n += n;
    l->n_refs += n;
    return 0;
}

void lease_seq_drop(struct lease *l, struct lease_seq *s)
{
    struct lease_seq **link = &l->bucket[seq_bucket(s->id)];
    while (*link != s)
        link = &(*link)->hnext;
    *link = s->hnext;
    l->n_refs -= s->n;
    l->n_seqs--;
    free(s->pages);
    free(s);
}

struct lease_seq *lease_seq_first(const struct lease *l, uint32_t *b)
{
    for (*b = 0; *b < LEASE_SEQ_BUCKETS; (*b)++)
        if (l->bucket[*b])
            return l->bucket[*b];
    return NULL;
}

struct lease_seq *lease_seq_next(const struct lease *l, const struct lease_seq *s, uint32_t *b)
{
    if (s->hnext)
        return s->hnext;
    for ((*b)++; *b < LEASE_SEQ_BUCKETS; (*b)++)
        if (l->bucket[*b])
            return l->bucket[*b];
    return NULL;
}
