#include "broker/lease.h"

#include "common/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    t->next_id = 1;
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

int lease_new(struct lease_table *t, const char *client, uint32_t pid, uint64_t now_ms,
              struct lease **out)
{
    if (t->n >= BROKER_LEASES_MAX)
        return KVD_EOVERLOAD;
    struct lease *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->id = t->next_id++;
    snprintf(l->client, sizeof(l->client), "%s", client);
    l->pid = pid;
    l->last_ms = now_ms;
    for (uint32_t i = 0; i < BROKER_LEASES_MAX; i++)
        if (!t->slot[i]) {
            t->slot[i] = l;
            break;
        }
    t->n++;
    *out = l;
    return 0;
}

struct lease *lease_find(struct lease_table *t, uint64_t id)
{
    for (uint32_t i = 0; i < BROKER_LEASES_MAX; i++)
        if (t->slot[i] && t->slot[i]->id == id)
            return t->slot[i];
    return NULL;
}

void lease_free(struct lease_table *t, struct lease *l)
{
    for (uint32_t i = 0; i < BROKER_LEASES_MAX; i++)
        if (t->slot[i] == l) {
            t->slot[i] = NULL;
            t->n--;
        }
    seqs_free(l);
    free(l);
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
