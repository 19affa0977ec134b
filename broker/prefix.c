#include "broker/prefix.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX_NIL UINT32_MAX

static uint32_t bucket_of(const struct prefix *px, const struct broker_hash *h)
{
    uint64_t v;
    memcpy(&v, h->b, sizeof(v));
    return (uint32_t)(v ^ (v >> 32)) & px->mask;
}

int prefix_init(struct prefix *px, uint32_t n_pages)
{
    if (n_pages == 0 || n_pages > (1u << 30))
        return -EINVAL;
    uint32_t nb = 1;
    while (nb < n_pages)
        nb <<= 1;
    struct prefix p = {0};
    p.bucket = malloc(sizeof(*p.bucket) * nb);
    p.next = malloc(sizeof(*p.next) * n_pages);
    p.hash = calloc(n_pages, sizeof(*p.hash));
    p.has = calloc(n_pages, 1);
    if (!p.bucket || !p.next || !p.hash || !p.has) {
        prefix_release(&p);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < nb; i++)
        p.bucket[i] = PREFIX_NIL;
    for (uint32_t i = 0; i < n_pages; i++)
        p.next[i] = PREFIX_NIL;
    p.mask = nb - 1;
    p.n_pages = n_pages;
    *px = p;
    return 0;
}

void prefix_release(struct prefix *px)
{
    free(px->bucket);
    free(px->next);
    free(px->hash);
    free(px->has);
    memset(px, 0, sizeof(*px));
}

int prefix_find(const struct prefix *px, const struct broker_hash *h, uint32_t *page)
{
    for (uint32_t id = px->bucket[bucket_of(px, h)]; id != PREFIX_NIL; id = px->next[id])
        if (memcmp(px->hash[id].b, h->b, BROKER_HASH_BYTES) == 0) {
            *page = id;
            return 0;
        }
    return KVD_ENOTFOUND;
}

uint32_t prefix_match(struct prefix *px, const struct broker_hash *h, uint32_t n,
                      uint32_t *pages)
{
    uint32_t k = 0;
    while (k < n && prefix_find(px, &h[k], &pages[k]) == 0)
        k++;
    px->st.query_blocks += n;
    px->st.hit_blocks += k;
    return k;
}

int prefix_insert(struct prefix *px, const struct broker_hash *h, uint32_t page)
{
    uint32_t other;
    if (page >= px->n_pages)
        return -EINVAL;
    if (px->has[page])
        return -EBUSY;
    if (prefix_find(px, h, &other) == 0)
        return -EEXIST;
    uint32_t b = bucket_of(px, h);
    px->hash[page] = *h;
    px->has[page] = 1;
    px->next[page] = px->bucket[b];
    px->bucket[b] = page;
    px->n_entries++;
    px->st.inserts++;
    return 0;
}

int prefix_remove_page(struct prefix *px, uint32_t page, bool evicted)
{
    if (page >= px->n_pages || !px->has[page])
        return KVD_ENOTFOUND;
    uint32_t *link = &px->bucket[bucket_of(px, &px->hash[page])];
    while (*link != page) {
        KVD_BUG_ON(*link == PREFIX_NIL);
        link = &px->next[*link];
    }
    *link = px->next[page];
    px->next[page] = PREFIX_NIL;
    px->has[page] = 0;
    px->n_entries--;
    if (evicted)
        px->st.evictions++;
    return 0;
}

int prefix_check(const struct prefix *px)
{
    uint64_t reached = 0;
    for (uint32_t b = 0; b <= px->mask; b++)
        for (uint32_t id = px->bucket[b]; id != PREFIX_NIL; id = px->next[id]) {
            if (id >= px->n_pages || !px->has[id] || bucket_of(px, &px->hash[id]) != b ||
                ++reached > px->n_entries) {
                log_err("prefix check: bucket %u chain corrupt at page %u", b, id);
                return -EINVAL;
            }
            uint32_t found;
            if (prefix_find(px, &px->hash[id], &found) || found != id) {
                log_err("prefix check: hash of page %u is also indexed at page %u", id, found);
                return -EINVAL;
            }
        }
    uint64_t has = 0;
    for (uint32_t i = 0; i < px->n_pages; i++)
        has += px->has[i];
    if (reached != px->n_entries || has != px->n_entries) {
        log_err("prefix check: %llu entries reachable, %llu flagged, count %llu",
                (unsigned long long)reached, (unsigned long long)has,
                (unsigned long long)px->n_entries);
        return -EINVAL;
    }
    return 0;
}
