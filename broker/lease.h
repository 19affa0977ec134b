/* lease.h — leases (one per attached client) and, per lease, its sequences' page lists.
 *
 * A lease's id is a capability: nanomsg REP cannot tell who sent a request, so holding
 * the id is what authorises using the lease. Ids are 64-bit values from getrandom(2),
 * never 0 and never equal to another live lease's id (collision-checked), so a foreign
 * process cannot guess one. The id goes only to the attaching client: never into logs,
 * dump replies or stats. Operators see the lease's display number instead (num: 1, 2, 3
 * ... in attach order, never reused within one broker run). Lookup by id is a binary
 * search over the live leases sorted by id (O(log BROKER_LEASES_MAX)). Each lease
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
    uint64_t id;                 /* capability: random, nonzero; never log or show it */
    uint64_t num;                /* display number for logs, dump and operators */
    uint32_t slot;               /* index in lease_table.slot */
    char client[BROKER_CLIENT_NAME_MAX + 1];
    uint32_t pid;
    uint64_t last_ms;            /* last request naming this lease (monotonic ms) */
    uint64_t n_seqs;
    uint64_t n_refs;             /* pages held, all sequences */
    struct lease_seq *bucket[LEASE_SEQ_BUCKETS];
};

#define LEASE_ID_TRIES 8   /* fresh random ids tried before giving up (a clash is ~2^-58) */

/* Invariants (lease_table_check): by_id[0..n) are exactly the non-NULL slots, sorted by
 * strictly increasing nonzero id; slot[l->slot] == l. */
struct lease_table {
    struct lease *slot[BROKER_LEASES_MAX];  /* NULL: unused; stable while a lease lives */
    struct lease *by_id[BROKER_LEASES_MAX]; /* live leases sorted by id, n entries */
    uint32_t n;
    uint64_t next_num;                      /* display number of the next lease */
};

void lease_table_init(struct lease_table *t);
/* Frees every lease and sequence (no pool refs are touched: the pool dies too). */
void lease_table_release(struct lease_table *t);

/* New lease with a fresh random id. 0 and *out; KVD_EOVERLOAD (BROKER_LEASES_MAX live);
 * -ENOMEM; -errno of getrandom(2), or -EAGAIN when LEASE_ID_TRIES ids all clashed. The
 * table is untouched on failure. */
int lease_new(struct lease_table *t, const char *client, uint32_t pid, uint64_t now_ms,
              struct lease **out);
/* The live lease with this id, or NULL (also for id 0). */
struct lease *lease_find(const struct lease_table *t, uint64_t id);
/* Checks the invariants above. 0 or -EINVAL (logged). */
int lease_table_check(const struct lease_table *t);
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
