/* prefixhint.c — see prefixhint.h. */
#include "daemon/prefixhint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PREFIXHINT_MASK (PREFIXHINT_SLOTS - 1)
_Static_assert((PREFIXHINT_SLOTS & PREFIXHINT_MASK) == 0, "slots must be a power of two");

static uint32_t slot_of(const struct blockhash *k)
{
    uint64_t v;
    memcpy(&v, k->b, sizeof(v));
    return (uint32_t)(v ^ (v >> 32)) & PREFIXHINT_MASK;
}

int prefixhint_init(struct prefixhint *h)
{
    memset(h, 0, sizeof(*h));
    h->keys = calloc(PREFIXHINT_SLOTS, sizeof(*h->keys));
    h->used = calloc(PREFIXHINT_SLOTS, 1);
    if (!h->keys || !h->used) {
        prefixhint_release(h);
        return -ENOMEM;
    }
    return 0;
}

void prefixhint_release(struct prefixhint *h)
{
    free(h->keys);
    free(h->used);
    memset(h, 0, sizeof(*h));
}

void prefixhint_clear(struct prefixhint *h)
{
    if (h->used)
        memset(h->used, 0, PREFIXHINT_SLOTS);
    h->n = 0;
}

bool prefixhint_has(const struct prefixhint *h, const struct blockhash *k)
{
    if (!h->used)
        return false;
    for (uint32_t i = slot_of(k), probes = 0; probes < PREFIXHINT_SLOTS;
         i = (i + 1) & PREFIXHINT_MASK, probes++) {
        if (!h->used[i])
            return false;
        if (blockhash_eq(&h->keys[i], k))
            return true;
    }
    return false;
}

void prefixhint_add(struct prefixhint *h, const struct blockhash *k)
{
    if (!h->used || prefixhint_has(h, k))
        return;
    if (h->n >= PREFIXHINT_SLOTS / 4 * 3)
        prefixhint_clear(h); /* beliefs age out wholesale; lookups stay exact */
    uint32_t i = slot_of(k);
    while (h->used[i])
        i = (i + 1) & PREFIXHINT_MASK;
    h->used[i] = 1;
    h->keys[i] = *k;
    h->n++;
}

uint32_t prefixhint_leading(const struct prefixhint *h, const struct blockhash *hashes, uint32_t n)
{
    uint32_t i = 0;
    while (i < n && prefixhint_has(h, &hashes[i]))
        i++;
    return i;
}
