#include "broker/pool.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void list_push_tail(struct pool *p, struct pool_list *l, uint32_t id)
{
    struct pool_page *pg = &p->pages[id];
    pg->next = POOL_NIL;
    pg->prev = l->tail;
    if (l->tail != POOL_NIL)
        p->pages[l->tail].next = id;
    else
        l->head = id;
    l->tail = id;
    l->n++;
}

static void list_remove(struct pool *p, struct pool_list *l, uint32_t id)
{
    struct pool_page *pg = &p->pages[id];
    if (pg->prev != POOL_NIL)
        p->pages[pg->prev].next = pg->next;
    else
        l->head = pg->next;
    if (pg->next != POOL_NIL)
        p->pages[pg->next].prev = pg->prev;
    else
        l->tail = pg->prev;
    pg->prev = pg->next = POOL_NIL;
    l->n--;
}

int pool_init(struct pool *p, uint32_t n_pages, pool_evict_cb cb, void *ctx)
{
    if (n_pages == 0 || n_pages == POOL_NIL)
        return -EINVAL;
    struct pool_page *pages = calloc(n_pages, sizeof(*pages));
    if (!pages)
        return -ENOMEM;
    memset(p, 0, sizeof(*p));
    p->pages = pages;
    p->n_pages = n_pages;
    p->free_q = (struct pool_list){POOL_NIL, POOL_NIL, 0};
    p->lru = (struct pool_list){POOL_NIL, POOL_NIL, 0};
    p->evict_cb = cb;
    p->evict_ctx = ctx;
    for (uint32_t i = 0; i < n_pages; i++)
        list_push_tail(p, &p->free_q, i);
    return 0;
}

void pool_release(struct pool *p)
{
    free(p->pages);
    memset(p, 0, sizeof(*p));
}

/* Removes the LRU head from the cache: index entry dropped, page becomes free-state. */
static uint32_t evict_one(struct pool *p)
{
    uint32_t id = p->lru.head;
    KVD_BUG_ON(id == POOL_NIL);
    list_remove(p, &p->lru, id);
    if (p->evict_cb)
        p->evict_cb(p->evict_ctx, id);
    p->pages[id].indexed = false;
    p->pages[id].state = POOL_PAGE_FREE;
    p->evictions++;
    return id;
}

int pool_alloc(struct pool *p, uint32_t n, uint32_t *out)
{
    if ((uint64_t)n > (uint64_t)p->free_q.n + p->lru.n)
        return KVD_ENOPAGES;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id;
        if (p->free_q.head != POOL_NIL) {
            id = p->free_q.head;
            list_remove(p, &p->free_q, id);
        } else {
            id = evict_one(p);
        }
        struct pool_page *pg = &p->pages[id];
        pg->state = POOL_PAGE_USED;
        pg->refcnt = 1;
        p->n_used++;
        out[i] = id;
    }
    return 0;
}

int pool_ref(struct pool *p, uint32_t page)
{
    if (page >= p->n_pages || p->pages[page].state == POOL_PAGE_FREE)
        return -EINVAL;
    struct pool_page *pg = &p->pages[page];
    if (pg->refcnt == POOL_REFCNT_MAX)
        return -EOVERFLOW;
    if (pg->state == POOL_PAGE_CACHED) {
        list_remove(p, &p->lru, page);
        pg->state = POOL_PAGE_USED;
        p->n_used++;
    }
    pg->refcnt++;
    return 0;
}

int pool_unref(struct pool *p, uint32_t page)
{
    if (page >= p->n_pages || p->pages[page].state != POOL_PAGE_USED)
        return -EINVAL;
    struct pool_page *pg = &p->pages[page];
    if (--pg->refcnt)
        return 0;
    p->n_used--;
    if (pg->indexed) {
        pg->state = POOL_PAGE_CACHED;
        list_push_tail(p, &p->lru, page);
    } else {
        pg->state = POOL_PAGE_FREE;
        list_push_tail(p, &p->free_q, page);
    }
    return 0;
}

void pool_unref_seq(struct pool *p, const uint32_t *pages, size_t n)
{
    while (n--) {
        int rc = pool_unref(p, pages[n]);
        KVD_BUG_ON(rc != 0);
    }
}

int pool_set_indexed(struct pool *p, uint32_t page)
{
    if (page >= p->n_pages || p->pages[page].state != POOL_PAGE_USED || p->pages[page].indexed)
        return -EINVAL;
    p->pages[page].indexed = true;
    return 0;
}

int pool_adopt_cached(struct pool *p, uint32_t page)
{
    if (page >= p->n_pages || p->pages[page].state != POOL_PAGE_FREE)
        return -EINVAL;
    list_remove(p, &p->free_q, page);
    p->pages[page].state = POOL_PAGE_CACHED;
    p->pages[page].indexed = true;
    list_push_tail(p, &p->lru, page);
    return 0;
}

uint32_t pool_evict_cached(struct pool *p, uint32_t max)
{
    uint32_t k = 0;
    for (; k < max && p->lru.n; k++) {
        uint32_t id = evict_one(p);
        list_push_tail(p, &p->free_q, id);
    }
    return k;
}

static int check_list(const struct pool *p, const struct pool_list *l, uint8_t state,
                      const char *name, uint8_t *seen)
{
    uint32_t n = 0, prev = POOL_NIL;
    for (uint32_t id = l->head; id != POOL_NIL; id = p->pages[id].next) {
        if (id >= p->n_pages || seen[id] || n > p->n_pages) {
            log_err("pool check: %s list corrupt at page %u", name, id);
            return -EINVAL;
        }
        const struct pool_page *pg = &p->pages[id];
        seen[id] = 1;
        if (pg->prev != prev || pg->state != state || pg->refcnt != 0 ||
            pg->indexed != (state == POOL_PAGE_CACHED)) {
            log_err("pool check: page %u on the %s list has state %u refcnt %u indexed %d",
                    id, name, pg->state, pg->refcnt, pg->indexed);
            return -EINVAL;
        }
        prev = id;
        n++;
    }
    if (prev != l->tail || n != l->n) {
        log_err("pool check: %s list holds %u pages, count says %u", name, n, l->n);
        return -EINVAL;
    }
    return 0;
}

int pool_check(const struct pool *p)
{
    uint8_t *seen = calloc(p->n_pages, 1);
    if (!seen)
        return -ENOMEM;
    int rc = check_list(p, &p->free_q, POOL_PAGE_FREE, "free", seen);
    if (!rc)
        rc = check_list(p, &p->lru, POOL_PAGE_CACHED, "cached", seen);
    uint32_t used = 0;
    for (uint32_t i = 0; !rc && i < p->n_pages; i++) {
        const struct pool_page *pg = &p->pages[i];
        if (seen[i])
            continue;
        if (pg->state != POOL_PAGE_USED || pg->refcnt == 0 || pg->prev != POOL_NIL ||
            pg->next != POOL_NIL) {
            log_err("pool check: page %u on no list has state %u refcnt %u", i, pg->state,
                    pg->refcnt);
            rc = -EINVAL;
        }
        used++;
    }
    if (!rc && (used != p->n_used ||
                p->free_q.n != p->n_pages - p->n_used - p->lru.n)) {
        log_err("pool check: free %u != total %u - used %u - cached %u", p->free_q.n,
                p->n_pages, p->n_used, p->lru.n);
        rc = -EINVAL;
    }
    free(seen);
    return rc;
}
