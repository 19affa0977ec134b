/* core.h — the broker's request handling, independent of sockets and the event loop.
 *
 * struct broker ties the page pool, the prefix index and the leases together and keeps
 * them in step (broker_check verifies it): a page's refcount equals the number of
 * sequence page-list entries naming it, across all leases; a page is indexed in the
 * pool exactly when the prefix index has an entry for it. broker_handle() turns one
 * request message into one reply message (always: bad input gets an "err" reply and
 * changes nothing). Time comes in as monotonic milliseconds from the caller, so tests
 * drive expiry without sleeping. Loop thread only.
 */
#ifndef KVD_BROKER_CORE_H
#define KVD_BROKER_CORE_H

#include "broker/lease.h"
#include "broker/pool.h"
#include "broker/prefix.h"
#include "common/mem.h"
#include "proto/broker_msg.h"

struct broker {
    struct pool pool;
    struct prefix prefix;
    struct lease_table leases;
    struct pool_desc desc;          /* what attach hands out and checks against */
    uint32_t lease_timeout_ms;
    uint64_t start_ms;
    uint64_t requests;              /* handled */
    uint64_t errors;                /* answered with err */
    uint64_t leases_expired;
    uint32_t *scratch;              /* BROKER_LOOKUP_MAX page ids, for alloc and lookup */
};

/* Empty pool of desc->num_pages pages. 0, -EINVAL, -ENOMEM (b zeroed). */
int broker_init(struct broker *b, const struct pool_desc *desc, uint32_t lease_timeout_ms,
                uint64_t now_ms);
void broker_release(struct broker *b);

/* Handles one request of len bytes; writes exactly one reply message into reply (which
 * must be empty). Returns 0 when the reply is not "err", else the error code replied. */
int broker_handle(struct broker *b, const void *msg, size_t len, uint64_t now_ms,
                  struct wbuf *reply);

/* Ends every lease silent for lease_timeout_ms or more, releasing its refs. Returns how
 * many leases were expired. */
uint32_t broker_expire(struct broker *b, uint64_t now_ms);
/* Ends one lease now (detach path). Returns the refs released. */
uint64_t broker_lease_end(struct broker *b, struct lease *l);

/* Re-indexes h -> page as a cached page in a freshly initialised broker (a pool taken
 * back from the systemd fd store). 0, -EINVAL (page out of range or not free), -EEXIST
 * / -EBUSY (hash or page already indexed); nothing changes on failure. */
int broker_adopt_cached(struct broker *b, const struct broker_hash *h, uint32_t page);

void broker_stats_fill(const struct broker *b, uint64_t now_ms, struct broker_stats *s);
/* pool_check + prefix_check + the cross-module invariants above. 0 or -EINVAL. */
int broker_check(const struct broker *b);

#endif
