/* prefixhint.h — the block hashes kvd believes sit in the broker's prefix index.
 *
 * Used only to order admission (cache-aware queue, sched.h): a wrong belief costs a
 * little ordering quality, never correctness, because admission still asks the broker
 * (lookup) for the real hits. Filled from kvd's own commits and hits; it does not see
 * evictions, so it is cleared when PREFIXHINT_SLOTS * 3/4 entries are reached and on
 * "evict". Open addressing over the hashes' first 8 bytes (already uniform).
 * Loop thread only.
 */
#ifndef KVD_DAEMON_PREFIXHINT_H
#define KVD_DAEMON_PREFIXHINT_H

#include "common/blockhash.h"

#include <stdbool.h>
#include <stdint.h>

#define PREFIXHINT_SLOTS 65536u /* remembered block hashes (power of two); 1 MiB */

struct prefixhint {
    struct blockhash *keys; /* PREFIXHINT_SLOTS entries */
    uint8_t *used;          /* PREFIXHINT_SLOTS flags */
    uint32_t n;             /* entries in use */
};

int prefixhint_init(struct prefixhint *h); /* 0 or -ENOMEM (h zeroed then) */
void prefixhint_release(struct prefixhint *h);
void prefixhint_clear(struct prefixhint *h);
void prefixhint_add(struct prefixhint *h, const struct blockhash *k);
bool prefixhint_has(const struct prefixhint *h, const struct blockhash *k);
/* Leading entries of hashes[0..n) that are present. */
uint32_t prefixhint_leading(const struct prefixhint *h, const struct blockhash *hashes, uint32_t n);

#endif
