/* broker_msg.h — the control protocol of kvd-broker (broker.sock, nanomsg REQ/REP).
 *
 * Every message is a wire.h envelope {"v": KVD_PROTO_VERSION, "t": type, ...}. One
 * request, one reply; any request may be answered with {"t":"err","code","msg"}.
 *
 *  request "t"    fields                                  reply "t"  fields
 *  attach         client str, pid u32, expect? {desc}    attached   lease, lease_timeout_ms, pool {desc}
 *  heartbeat      lease                                   ok         n = 0
 *  detach         lease                                   ok         n = page refs released
 *  alloc          lease, seq, n (1..BROKER_ALLOC_MAX)     pages      pages [u32] (n fresh pages)
 *  free           lease, seq                              ok         n = page refs released
 *  lookup         lease, seq, hashes [bin16]              pages      pages [u32] (longest cached
 *                                                                    leading run, maybe empty)
 *  commit         lease, seq, block u32, hashes [bin16]   ok         n = blocks newly indexed
 *  stats          -                                       stats      see struct broker_stats
 *  dump           start? u32, max? u32                    dump       total, start, pages [...]
 *  evict_cached   -                                       ok         n = cached pages evicted
 *
 * Semantics (the broker is the only authority on pages, DESIGN.md principle 2):
 * - attach gives a lease. Its id is an unguessable capability (64 random bits, never 0;
 *   REP cannot identify a peer, so knowing the id is the authorisation): a client keeps
 *   it to itself; any other value is ENOTFOUND. dump shows a lease's small display
 *   number (lease #N in the broker's log), never its id. All page refs are held under
 *   a lease and a sequence id (seq, chosen by the client, unique within its lease). A
 *   lease that sends nothing for lease_timeout_ms is expired and every ref it holds is
 *   released; any request naming the lease renews it; heartbeat exists for idle
 *   clients. detach releases at once.
 *   expect: pool descriptor fields to check (absent or 0 = unchecked, pool_desc_check);
 *   a mismatch is err EMISMATCH naming the field, and no lease is created.
 * - alloc appends n pages (refcount 1) to seq's page list: all or nothing; ENOPAGES
 *   when fewer than n pages are free or cached (cached pages are evicted LRU first).
 * - free releases every ref of seq (tail block first, so tail blocks are evicted first);
 *   indexed pages whose refcount drops to 0 become cached, others free. Freeing an
 *   unknown seq is ok with n = 0 (idempotent).
 * - lookup: seq must hold no pages yet. Walks hashes[0..] while each is indexed; those
 *   pages get a ref and become seq's first pages, in order.
 * - commit: registers hashes[i] for seq's page at block index block + i (each must be
 *   a FULL block; the daemon never commits the partial last block). A hash already
 *   indexed to another page keeps that page (n counts only new entries). A page already
 *   indexed under another hash is err EMSG.
 * - hashes: 16 bytes each, opaque to the broker; computed by kvd with common/blockhash.h.
 * Errors: EMSG (malformed, unknown type or field, limit exceeded), EPROTO (version),
 * ENOTFOUND (unknown lease, or a block index past seq's pages), EMISMATCH, ENOPAGES,
 * EBUSY (lookup on a seq that holds pages), EOVERLOAD (BROKER_LEASES_MAX leases).
 *
 * Clients (nanomsg NN_REQ on ipc://DIR/broker.sock): set NN_REQ_RESEND_IVL far above any
 * real reply time (requests such as alloc are not idempotent, a resend would run twice);
 * heartbeat at most every lease_timeout_ms / 3 when idle; keep the received buffer alive
 * while the parsed wmsg (and anything decoded by pointer) is in use. The broker answers
 * in order, one request at a time, and never blocks on a client.
 *
 * Encoders append one complete message to a fresh or reset wbuf and return 0, or -EINVAL
 * (argument over a limit; nothing written). Reply decoders take a parsed wmsg: on an
 * "err" reply they return its code and copy its msg into err; on another type, KVD_EMSG.
 * Out-params are written only on success; arrays are calloc'd, the caller frees.
 * Any thread; no shared state.
 */
#ifndef KVD_PROTO_BROKER_MSG_H
#define KVD_PROTO_BROKER_MSG_H

#include "common/mem.h"
#include "proto/wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BROKER_HASH_BYTES 16           /* XXH3-128, canonical (big-endian) form */
#define BROKER_CLIENT_NAME_MAX 64      /* bytes of attach's client name */
#define BROKER_ALLOC_MAX 4096          /* pages per alloc (65,536 tokens at block 16) */
#define BROKER_LOOKUP_MAX 8192         /* hashes per lookup/commit (131k tokens at 16) */
#define BROKER_SEQ_PAGES_MAX 16384     /* pages one sequence may hold (262k tokens at 16) */
#define BROKER_SEQS_PER_LEASE_MAX 65536 /* live sequences under one lease */
#define BROKER_LEASES_MAX 64           /* live leases (daemon, kvctl, tests) */
#define BROKER_DUMP_MAX 4096           /* pages per dump reply; page through with start */
#define BROKER_DUMP_OWNERS_MAX 8       /* (lease, seq) owners listed per page in a dump */
#define BROKER_NAME_MAX 16             /* bytes of backend / dtype names in stats */
#define BROKER_LEASE_TIMEOUT_MS_DEFAULT 3000 /* ms; a lease silent this long expires */
#define BROKER_LEASE_TIMEOUT_MS_MAX 3600000  /* ms; one hour */
#define BROKER_REQ_BYTES_MAX (256u << 10) /* bytes of one request; a full lookup is ~150 KB */

struct broker_hash {
    uint8_t b[BROKER_HASH_BYTES];
};

/* ---- requests: client side ---------------------------------------------------- */
int broker_req_attach_encode(struct wbuf *w, const char *client, uint32_t pid,
                             const struct pool_desc *expect /* NULL: no check */);
int broker_req_heartbeat_encode(struct wbuf *w, uint64_t lease);
int broker_req_detach_encode(struct wbuf *w, uint64_t lease);
int broker_req_alloc_encode(struct wbuf *w, uint64_t lease, uint64_t seq, uint32_t n);
int broker_req_free_encode(struct wbuf *w, uint64_t lease, uint64_t seq);
int broker_req_lookup_encode(struct wbuf *w, uint64_t lease, uint64_t seq,
                             const struct broker_hash *hashes, size_t n);
int broker_req_commit_encode(struct wbuf *w, uint64_t lease, uint64_t seq, uint32_t block,
                             const struct broker_hash *hashes, size_t n);
int broker_req_stats_encode(struct wbuf *w);
int broker_req_dump_encode(struct wbuf *w, uint32_t start, uint32_t max);
int broker_req_evict_cached_encode(struct wbuf *w);

/* ---- requests: broker side ---------------------------------------------------- */
enum broker_req_type {
    BROKER_REQ_ATTACH,
    BROKER_REQ_HEARTBEAT,
    BROKER_REQ_DETACH,
    BROKER_REQ_ALLOC,
    BROKER_REQ_FREE,
    BROKER_REQ_LOOKUP,
    BROKER_REQ_COMMIT,
    BROKER_REQ_STATS,
    BROKER_REQ_DUMP,
    BROKER_REQ_EVICT_CACHED,
    BROKER_REQ_COUNT_
};

struct broker_req {
    enum broker_req_type type;
    uint64_t lease;                 /* all but attach, stats, dump, evict_cached */
    uint64_t seq;                   /* alloc, free, lookup, commit */
    uint32_t n;                     /* alloc: pages wanted */
    uint32_t block;                 /* commit: block index of hashes[0] */
    struct broker_hash *hashes;     /* lookup, commit: calloc'd, n_hashes entries */
    size_t n_hashes;
    uint32_t dump_start;            /* dump: first page id */
    uint32_t dump_max;              /* dump: pages wanted (<= BROKER_DUMP_MAX) */
    char client[BROKER_CLIENT_NAME_MAX + 1]; /* attach */
    uint32_t pid;                   /* attach */
    struct pool_desc expect;        /* attach: zero fields are unchecked */
};

const char *broker_req_name(enum broker_req_type t); /* "alloc", ...; never NULL */
/* Cheap structural pre-check of raw msgpack before msgpack_unpack: len <= max_len, every
 * byte is a valid msgpack type, and no string, bin, ext, array or map declares more
 * bytes or elements than the message still holds (msgpack-c would otherwise allocate
 * for the declared count first: 5 bytes could ask for 64 GiB). 0, or KVD_EMSG with err. */
int broker_msg_precheck(const void *buf, size_t len, size_t max_len, char err[WIRE_ERR_LEN]);
/* Decodes and validates a request (type, every field, type, limit, no unknown key).
 * 0, or KVD_EMSG with err naming the problem; out is released on failure. */
int broker_req_decode(const struct wmsg *m, struct broker_req *out, char err[WIRE_ERR_LEN]);
void broker_req_release(struct broker_req *r);

/* ---- replies ------------------------------------------------------------------ */
enum broker_page_state { BROKER_PAGE_FREE = 0, BROKER_PAGE_USED = 1, BROKER_PAGE_CACHED = 2 };

struct broker_stats {
    uint64_t pool_id;
    uint32_t epoch;
    uint64_t model_fp;
    char backend[BROKER_NAME_MAX];   /* mem_backend_name() */
    char kv_dtype[BROKER_NAME_MAX];  /* "f32", "f16" */
    uint32_t n_layers, n_kv_heads, head_dim;
    uint32_t block_size;             /* tokens per page */
    uint64_t page_bytes;
    uint64_t pool_bytes;
    uint32_t pages_total;
    uint32_t pages_free;             /* never held, or evicted: no KV worth keeping */
    uint32_t pages_used;             /* refcount >= 1 */
    uint32_t pages_cached;           /* refcount 0, indexed: evictable, NOT counted free */
    uint64_t prefix_entries;         /* hashes in the index */
    uint64_t prefix_query_blocks;    /* blocks asked by lookup */
    uint64_t prefix_hit_blocks;      /* blocks served by lookup */
    uint64_t prefix_query_tokens;    /* query_blocks * block_size */
    uint64_t prefix_hit_tokens;      /* hit_blocks * block_size */
    uint64_t prefix_evictions;       /* cached pages evicted (by alloc or evict_cached) */
    uint32_t leases;                 /* live leases */
    uint64_t seqs;                   /* live sequences, all leases */
    uint64_t requests;               /* requests handled */
    uint64_t errors;                 /* requests answered with err */
    uint64_t leases_expired;         /* leases ended by timeout */
    uint64_t uptime_ms;
};

struct broker_dump_owner {
    uint64_t lease;                  /* the lease's display number (#N), not its id */
    uint64_t seq;
};

struct broker_dump_page {
    uint32_t page;
    uint32_t state;                  /* enum broker_page_state */
    uint32_t refcnt;
    bool indexed;                    /* in the prefix index */
    uint32_t n_owners;               /* listed owners (<= BROKER_DUMP_OWNERS_MAX) */
    struct broker_dump_owner owners[BROKER_DUMP_OWNERS_MAX];
};

struct broker_dump {
    uint32_t total;                  /* pages in the pool */
    uint32_t start;                  /* page id of pages[0] */
    struct broker_dump_page *pages;  /* calloc'd */
    size_t n;
};
void broker_dump_release(struct broker_dump *d);

/* Encoders (broker side). */
int broker_rep_attach_encode(struct wbuf *w, uint64_t lease, uint32_t lease_timeout_ms,
                             const struct pool_desc *pool);
int broker_rep_ok_encode(struct wbuf *w, uint64_t n);
int broker_rep_pages_encode(struct wbuf *w, const uint32_t *pages, size_t n);
int broker_rep_stats_encode(struct wbuf *w, const struct broker_stats *s);
/* A dump reply is begun with its page count, then exactly n pages are added. */
int broker_rep_dump_begin(struct wbuf *w, uint32_t total, uint32_t start, size_t n);
int broker_rep_dump_page(struct wbuf *w, const struct broker_dump_page *p);

/* Decoders (client side). */
int broker_rep_attach_decode(const struct wmsg *m, uint64_t *lease, uint32_t *lease_timeout_ms,
                             struct pool_desc *pool, char err[WIRE_ERR_LEN]);
int broker_rep_ok_decode(const struct wmsg *m, uint64_t *n, char err[WIRE_ERR_LEN]);
int broker_rep_pages_decode(const struct wmsg *m, uint32_t **pages, size_t *n,
                            char err[WIRE_ERR_LEN]);
int broker_rep_stats_decode(const struct wmsg *m, struct broker_stats *s,
                            char err[WIRE_ERR_LEN]);
int broker_rep_dump_decode(const struct wmsg *m, struct broker_dump *d,
                           char err[WIRE_ERR_LEN]);

/* Names per request, for readability at call sites. */
static inline int broker_rep_alloc_decode(const struct wmsg *m, uint32_t **pages, size_t *n,
                                          char err[WIRE_ERR_LEN])
{
    return broker_rep_pages_decode(m, pages, n, err);
}
static inline int broker_rep_lookup_decode(const struct wmsg *m, uint32_t **pages, size_t *n,
                                           char err[WIRE_ERR_LEN])
{
    return broker_rep_pages_decode(m, pages, n, err);
}
static inline int broker_rep_free_decode(const struct wmsg *m, uint64_t *released,
                                         char err[WIRE_ERR_LEN])
{
    return broker_rep_ok_decode(m, released, err);
}
static inline int broker_rep_commit_decode(const struct wmsg *m, uint64_t *indexed,
                                           char err[WIRE_ERR_LEN])
{
    return broker_rep_ok_decode(m, indexed, err);
}

/* Pool descriptor as a msgpack map (used by attach/attached). put writes key + map;
 * get reads a map; `partial` accepts absent fields as 0 (for expect). */
void broker_pool_desc_put(struct wbuf *w, const char *key, const struct pool_desc *d);
int broker_pool_desc_get(const msgpack_object *map, bool partial, struct pool_desc *d,
                         char err[WIRE_ERR_LEN]);

#endif
