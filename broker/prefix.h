/* prefix.h — the prefix index: 128-bit chained block hash -> page id.
 *
 * Invariants (prefix_check): each page has at most one entry and each hash maps to at
 * most one page; every entry is reachable from its bucket; n_entries counts them. The
 * daemon computes hashes (common/blockhash.h); the index treats them as opaque bytes and
 * buckets them by their first 8 bytes (already uniformly distributed). Chaining is
 * intrusive over per-page records, so memory is fixed at init: O(n_pages).
 * The index does not take page refs: the broker core keeps it in step with the pool
 * (an indexed page is in use or cached; eviction removes the entry). Loop thread only.
 */
#ifndef KVD_BROKER_PREFIX_H
#define KVD_BROKER_PREFIX_H

#include "proto/broker_msg.h"

#include <stdbool.h>
#include <stdint.h>

struct prefix_stats {
    uint64_t query_blocks;   /* hashes asked by lookups */
    uint64_t hit_blocks;     /* of those, served from the index */
    uint64_t evictions;      /* entries removed because their page was evicted */
    uint64_t inserts;        /* entries added */
};

struct prefix {
    uint32_t *bucket;             /* n_buckets heads (page id or UINT32_MAX) */
    uint32_t mask;                /* n_buckets - 1 (power of two) */
    uint32_t *next;               /* per page: next page in the same bucket */
    struct broker_hash *hash;     /* per page: its entry's hash (valid when has[page]) */
    uint8_t *has;                 /* per page: 1 when the page has an entry */
    uint32_t n_pages;
    uint64_t n_entries;
    struct prefix_stats st;
};

/* Empty index for n_pages pages. 0, -EINVAL, -ENOMEM (px untouched). */
int prefix_init(struct prefix *px, uint32_t n_pages);
void prefix_release(struct prefix *px);

/* 0 and *page set, or KVD_ENOTFOUND. Does not count as a query. */
int prefix_find(const struct prefix *px, const struct broker_hash *h, uint32_t *page);
/* Longest run of leading hashes that are indexed: writes their pages into pages[] and
 * returns the run length; counts n queried blocks and the hits. */
uint32_t prefix_match(struct prefix *px, const struct broker_hash *h, uint32_t n,
                      uint32_t *pages);
/* Adds h -> page. -EEXIST (h already indexed; nothing changes), -EBUSY (page already has
 * an entry), -EINVAL (page out of range). */
int prefix_insert(struct prefix *px, const struct broker_hash *h, uint32_t page);
/* Removes page's entry (evicted counts it as an eviction). 0 or KVD_ENOTFOUND. */
int prefix_remove_page(struct prefix *px, uint32_t page, bool evicted);
static inline bool prefix_page_has(const struct prefix *px, uint32_t page)
{
    return page < px->n_pages && px->has[page];
}
/* Verifies the invariants above. 0, or -EINVAL with the first violation logged. */
int prefix_check(const struct prefix *px);

#endif
