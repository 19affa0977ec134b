/* pool.h — the page allocator: page states, free queue, refcounts, LRU of cached pages.
 *
 * Invariants (pool_check verifies all of them):
 * - every page is exactly one of: free (refcnt 0, not indexed, on free_q), in use
 *   (refcnt >= 1, on no list) or cached (refcnt 0, indexed, on cached_lru);
 * - n_free + n_used + n_cached == n_pages, and each count matches its list;
 * - the lists are intrusive doubly-linked lists over page records (prev/next page ids),
 *   so removing any page from a list is O(1).
 * Allocation takes free pages first (FIFO), then evicts cached pages from the LRU head
 * (least recently released first), calling the evict callback so the prefix index
 * drops the entry. Releasing pages of a sequence goes tail block first, so a finished
 * sequence's tail blocks are evicted before its head blocks. All operations are O(1) per
 * page. Loop thread only; no locking.
 */
#ifndef KVD_BROKER_POOL_H
#define KVD_BROKER_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POOL_NIL UINT32_MAX       /* "no page" in list links */
#define POOL_REFCNT_MAX UINT32_MAX /* a page's refs; one per (lease, seq) holding it */

enum pool_page_state { POOL_PAGE_FREE = 0, POOL_PAGE_USED = 1, POOL_PAGE_CACHED = 2 };

struct pool_page {
    uint32_t prev;      /* list link (page id or POOL_NIL) */
    uint32_t next;      /* list link */
    uint32_t refcnt;    /* holders */
    uint8_t state;      /* enum pool_page_state */
    bool indexed;       /* in the prefix index (set by pool_set_indexed) */
};

struct pool_list {
    uint32_t head;      /* next to take */
    uint32_t tail;      /* last added */
    uint32_t n;
};

/* Called when a cached page is evicted (before it is reused); the callee removes the
 * page's prefix index entry. Must not call back into the pool. */
typedef void (*pool_evict_cb)(void *ctx, uint32_t page);

struct pool {
    struct pool_page *pages;   /* n_pages records, calloc'd */
    uint32_t n_pages;
    struct pool_list free_q;   /* free pages, FIFO */
    struct pool_list lru;      /* cached pages; head = least recently released */
    uint32_t n_used;
    uint64_t evictions;        /* cached pages evicted since init */
    pool_evict_cb evict_cb;
    void *evict_ctx;
};

/* All pages free. 0, -EINVAL (n_pages 0), -ENOMEM (p untouched). */
int pool_init(struct pool *p, uint32_t n_pages, pool_evict_cb cb, void *ctx);
void pool_release(struct pool *p);

/* Takes n pages, refcount 1 each, into out[0..n). All or nothing: KVD_ENOPAGES when
 * fewer than n are free or cached, with the pool untouched. */
int pool_alloc(struct pool *p, uint32_t n, uint32_t *out);
/* One more ref on a used or cached page (a cached page leaves the LRU: a prefix hit).
 * -EINVAL on a free page or an id out of range; -EOVERFLOW at POOL_REFCNT_MAX. */
int pool_ref(struct pool *p, uint32_t page);
/* One ref fewer; at 0 the page becomes cached (indexed) or free. -EINVAL when the page
 * holds no ref or the id is out of range; nothing changes then. */
int pool_unref(struct pool *p, uint32_t page);
/* Unrefs pages[n-1] down to pages[0] (tail first). Each must hold a ref (KVD_BUG_ON). */
void pool_unref_seq(struct pool *p, const uint32_t *pages, size_t n);
/* Marks a used page as indexed. -EINVAL if not in use or already indexed. */
int pool_set_indexed(struct pool *p, uint32_t page);
/* Makes a free page cached (indexed, refcount 0, at the LRU tail): re-adopting the index
 * of a pool a previous broker filled. -EINVAL if the page is not free. */
int pool_adopt_cached(struct pool *p, uint32_t page);
/* Evicts up to max cached pages, LRU first (callback per page). Returns the count. */
uint32_t pool_evict_cached(struct pool *p, uint32_t max);

static inline uint32_t pool_count_free(const struct pool *p) { return p->free_q.n; }
static inline uint32_t pool_count_cached(const struct pool *p) { return p->lru.n; }
static inline uint32_t pool_count_used(const struct pool *p) { return p->n_used; }
static inline bool pool_page_is_cached(const struct pool *p, uint32_t page)
{
    return page < p->n_pages && p->pages[page].state == POOL_PAGE_CACHED;
}
static inline bool pool_page_is_used(const struct pool *p, uint32_t page)
{
    return page < p->n_pages && p->pages[page].state == POOL_PAGE_USED;
}

/* Verifies every invariant above by walking all lists and records. 0, or -EINVAL with
 * the first violation logged. O(n_pages). */
int pool_check(const struct pool *p);

#endif
