/* fdstore.h — the pool outlives the broker: parking it in systemd's file-descriptor
 * store and taking it back after a restart (DESIGN.md "Memory backends").
 *
 * Under systemd (NOTIFY_SOCKET set; the unit needs FileDescriptorStoreMax >= 2) the
 * broker parks its host pool memfd as "kvd-pool" when it creates it, and at a clean stop
 * parks "kvd-state": a sealed memfd holding the pool descriptor and the prefix index
 * (block hash -> page). systemd hands both back to the next broker of the unit
 * (LISTEN_FDS / LISTEN_FDNAMES); that broker re-verifies the descriptor against its own
 * flags, bumps the epoch, maps the same memory and re-indexes every entry as a cached
 * page: KV written before the restart is served again. Leases do not survive: clients
 * re-attach. Host backend only (cuda pools are not parked). Main thread, before and
 * after the loop runs.
 *
 * kvd-state layout (little-endian): u32 FDSTORE_STATE_MAGIC, u32 FDSTORE_STATE_VERSION,
 * the pool descriptor (pool_desc_encode, POOL_DESC_WIRE_BYTES), u32 n, then n entries of
 * 16 hash bytes + u32 page.
 */
#ifndef KVD_BROKER_FDSTORE_H
#define KVD_BROKER_FDSTORE_H

#include "broker/core.h"
#include "common/mem.h"

#include <stdbool.h>

#define FDSTORE_POOL_NAME "kvd-pool"
#define FDSTORE_STATE_NAME "kvd-state"
#define FDSTORE_STATE_MAGIC 0x5344564bu /* "KVDS" little-endian */
#define FDSTORE_STATE_VERSION 1

struct fdstore_entry {
    struct broker_hash hash;
    uint32_t page;
};

/* True when systemd's notify socket is there (otherwise parking is a no-op). */
bool fdstore_enabled(void);
/* Picks "kvd-pool" and "kvd-state" out of the fds systemd passed; fds of other names
 * are closed. 0 with both set; -ENOENT when either is missing (any found one closed and
 * both set to -1). */
int fdstore_take(int *pool_fd, int *state_fd);
/* Reads a kvd-state memfd. 0 with *d and *entries (calloc'd, caller frees), or KVD_EMSG
 * (bad magic, version or size). Does not close fd. */
int fdstore_load(int state_fd, struct pool_desc *d, struct fdstore_entry **entries, size_t *n);
/* Parks mp's fds as "kvd-pool". 0 or a negative code (logged). */
int fdstore_park_pool(const struct mem_pool *mp);
/* Writes b's descriptor and index into a new sealed memfd and parks it as "kvd-state",
 * replacing an earlier one. 0 or a negative code (logged). */
int fdstore_save(const struct broker *b);

#endif
