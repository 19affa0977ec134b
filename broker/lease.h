/* lease.h — leases (one per attached client) and, per lease, its sequences' page lists.
 *
 * A lease is identified by a nonzero u64 never reused within one broker run. Each lease
 * holds sequences (client-chosen u64 ids); a sequence holds an ordered page list, one
 * pool ref per entry (block i of the sequence is pages[i]). This module only keeps the
 * bookkeeping: refs are taken and dropped by the broker core, which keeps the two in
 * step (n_refs of a lease == sum of its sequences' page counts). Loop thread only.
 */
#ifndef KVD_BROKER_LEASE_H
#define KVD_BROKER_LEASE_H

#include "proto/broker_msg.h"

#include <stdbool.h>
#include <stdint.h>

#define LEASE_SEQ_BUCKETS 1024   /* per lease; chains stay short below ~10k live seqs */

struct lease_seq {
    uint64_t id;
    uint32_t *pages;             /* n entries; cap allocated */
    uint32_t n;
    uint32_t cap;
    struct lease_seq *hnext;     /* bucket chain */
};

struct lease {
    uint64_t id;
    char client[BROKER_CLIENT_NAME_MAX + 1];
    uint32_t pid;
    uint64_t last_ms;            /* last request naming this lease (monotonic ms) */
    uint64_t n_seqs;
    uint64_t n_refs;             /* pages held, all sequences */
    struct lease_seq *bucket[LEASE_SEQ_BUCKETS];
};

struct lease_table {
    struct lease *slot[BROKER_LEASES_MAX];  /* NULL: unused */
    uint32_t n;
    uint64_t next_id;
};

void lease_table_init(struct lease_table *t);
/* Frees every lease and sequence (no pool refs are touched: the pool dies too). */
void lease_table_release(struct lease_table *t);

/* New lease. 0 and *out, KVD_EOVERLOAD (BROKER_LEASES_MAX live), -ENOMEM. */
int lease_new(struct lease_table *t, const char *client, uint32_t pid, uint64_t now_ms,
              struct lease **out);
struct lease *lease_find(struct lease_table *t, uint64_t id);
/* Frees l and its (already emptied of refs by the caller) sequences. */
void lease_free(struct lease_table *t, struct lease *l);

struct lease_seq *lease_seq_find(struct lease *l, uint64_t seq);
/* Finds or creates seq. NULL: -ENOMEM or BROKER_SEQS_PER_LEASE_MAX reached (*rc says). */
struct lease_seq *lease_seq_get(struct lease *l, uint64_t seq, int *rc);
/* Appends pages; KVD_EMSG when the sequence would exceed BROKER_SEQ_PAGES_MAX, -ENOMEM;
 * nothing appended on failure. */
int lease_seq_push(struct lease *l, struct lease_seq *s, const uint32_t *pages, uint32_t n);
/* Unlinks and frees s (its refs already dropped by the caller). */
void lease_seq_drop(struct lease *l, struct lease_seq *s);

/* Iteration: for (s = lease_seq_first(l, &b); s; s = lease_seq_next(l, s, &b)). Safe to
 * drop the current sequence only if next is taken first. */
struct lease_seq *lease_seq_first(const struct lease *l, uint32_t *b);
struct lease_seq *lease_seq_next(const struct lease *l, const struct lease_seq *s, uint32_t *b);

#endif
