/* admin_msg.h — the admin protocol on admin.sock (kvctl, kvd-bench -> kvd).
 *
 * Transport: kvd binds NN_REP at ipc://DIR/admin.sock; a client connects NN_REQ, sends
 * one request and reads one reply. Requests carry no fields except "evict":
 *   "pool"    -> "pool"    {struct admin_pool fields}
 *   "seqs"    -> "seqs"    {seqs: [{id, state, tokens, pages, shared_pages, worker}],
 *                           n_total}
 *   "workers" -> "workers" {workers: [{index, pid, state, steps, restarts}]}
 *   "prefix"  -> "prefix"  {enabled, entries, cached_pages, hit_tokens, query_tokens,
 *                           evictions, top: [{tokens, pages, seqs}]}
 *   "map"     -> "map"     {pages_total, pages: bin, one ADMIN_PAGE_* byte per page}
 *   "evict" {cached: true} -> "evict" {evicted} (pages dropped from the prefix cache;
 *                           pages in use are never touched). cached must be true;
 *                           anything else is EMSG.
 * Any request may instead get an "err" reply (wire.h): EMSG for an unknown or malformed
 * request, ESHUTDOWN, EPEER (the broker did not answer), EINTERNAL.
 * The reply's "t" equals the request's "t". Field names on the wire equal the member
 * names below; they are also the names kvctl --json prints (a stable interface).
 *
 * Occupancy is three-way (DESIGN.md principle 6): pages_used + pages_cached +
 * pages_free == pages_total; pages_shared counts the used pages with refcount > 1.
 * waste_ratio = 1 - (tokens_stored * bytes per token) / (pages_used * page_bytes),
 * i.e. the fraction of bytes held by sequences that hold no real token K/V
 * (0 when no page is used). Counters (prefix_*, preemptions, *_total) are monotonic
 * since kvd started.
 *
 * Encode never fails on a struct within the limits; decode checks every field, type,
 * limit and unknown key, and fills *out (arrays calloc'd; free with the matching
 * *_release, also after a failed decode). Any thread; no shared state.
 */
#ifndef KVD_PROTO_ADMIN_MSG_H
#define KVD_PROTO_ADMIN_MSG_H

#include "proto/wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ADMIN_MAX_SEQS 4096          /* sequences listed in one "seqs" reply (n_total says all) */
#define ADMIN_MAX_WORKERS 256        /* workers in one "workers" reply */
#define ADMIN_PREFIX_TOP_MAX 16      /* largest shared prefixes in a "prefix" reply */
#define ADMIN_MAP_MAX_PAGES (8u << 20) /* pages in one "map" reply (one byte each) */
#define ADMIN_NAME_MAX 32            /* bytes of a state / dtype / mode string */

enum admin_req {
    ADMIN_REQ_POOL = 0,
    ADMIN_REQ_SEQS,
    ADMIN_REQ_WORKERS,
    ADMIN_REQ_PREFIX,
    ADMIN_REQ_MAP,
    ADMIN_REQ_EVICT,
    ADMIN_REQ_COUNT_
};

/* Page states in a "map" reply. */
enum admin_page {
    ADMIN_PAGE_FREE = 0,   /* on the free list */
    ADMIN_PAGE_USED = 1,   /* refcount 1 */
    ADMIN_PAGE_SHARED = 2, /* refcount >= 2 (prefix shared by several sequences) */
    ADMIN_PAGE_CACHED = 3, /* refcount 0, still in the prefix index (evictable) */
    ADMIN_PAGE_COUNT_
};

struct admin_pool {
    uint64_t pages_total;          /* pages in the pool */
    uint64_t pages_free;           /* free (never used, or evicted) */
    uint64_t pages_used;           /* refcount >= 1 (held by sequences) */
    uint64_t pages_cached;         /* refcount 0, indexed, evictable */
    uint64_t pages_shared;         /* of pages_used: refcount >= 2 */
    uint64_t page_bytes;           /* bytes per page */
    uint64_t pool_bytes;           /* bytes of the whole pool */
    uint32_t block_size;           /* tokens per page */
    char kv_dtype[ADMIN_NAME_MAX + 1]; /* "f32", "f16", ... (kvlayout.h names) */
    char alloc[ADMIN_NAME_MAX + 1];    /* "paged" or "naive" (--alloc) */
    bool prefix_cache;             /* --prefix-cache on? */
    uint32_t max_model_len;        /* tokens */
    uint64_t tokens_stored;        /* tokens whose K/V sit in pages held by sequences */
    double waste_ratio;            /* [0, 1], see the header comment */
    uint64_t prefix_query_tokens;  /* prompt tokens looked up in the prefix index */
    uint64_t prefix_hit_tokens;    /* of which found cached (not recomputed) */
    uint64_t preemptions;          /* sequences preempted (pages released, recomputed) */
    uint32_t requests_running;     /* sequences admitted (prefill or decode) now */
    uint32_t requests_queued;      /* waiting for admission (incl. preempted) now */
    uint64_t requests_finished;    /* ended with stop or length */
    uint64_t requests_failed;      /* ended with error or cancelled */
    uint64_t prompt_tokens_total;  /* prompt tokens of admitted requests */
    uint64_t prefill_tokens_total; /* prompt tokens actually computed (incl. recompute) */
    uint64_t output_tokens_total;  /* tokens generated */
    uint64_t steps_total;          /* worker steps completed */
    uint64_t uptime_ms;            /* since kvd started */
};

enum admin_seq_state {
    ADMIN_SEQ_QUEUED = 0,   /* "queued" */
    ADMIN_SEQ_PREFILL,      /* "prefill" */
    ADMIN_SEQ_DECODE,       /* "decode" */
    ADMIN_SEQ_PREEMPTED,    /* "preempted" */
    ADMIN_SEQ_COUNT_
};

struct admin_seq {
    uint64_t id;                  /* kvd's sequence id */
    enum admin_seq_state state;
    uint32_t tokens;              /* prompt + generated tokens so far */
    uint32_t pages;               /* pages in its block table */
    uint32_t shared_pages;        /* of which shared with others (refcount >= 2) */
    int32_t worker;               /* worker index running it, -1 when none */
};

struct admin_seqs {
    struct admin_seq *seqs;       /* n entries (<= ADMIN_MAX_SEQS) */
    size_t n;
    uint64_t n_total;             /* live sequences in kvd (>= n) */
};

enum admin_worker_state {
    ADMIN_WORKER_STARTING = 0,    /* "starting": spawned, no hello yet */
    ADMIN_WORKER_IDLE,            /* "idle" */
    ADMIN_WORKER_BUSY,            /* "busy": a step in flight */
    ADMIN_WORKER_RESTARTING,      /* "restarting": died, waiting for back-off */
    ADMIN_WORKER_STOPPED,         /* "stopped" */
    ADMIN_WORKER_COUNT_
};

struct admin_worker {
    uint32_t index;               /* N of worker-N.sock */
    int32_t pid;                  /* 0 when not running */
    enum admin_worker_state state;
    uint64_t steps;               /* steps completed by this slot (all incarnations) */
    uint32_t restarts;            /* times restarted after dying */
};

struct admin_workers {
    struct admin_worker *workers; /* n entries (<= ADMIN_MAX_WORKERS) */
    size_t n;
};

struct admin_prefix_top {
    uint32_t tokens;              /* length of the shared prefix in tokens */
    uint32_t pages;               /* its pages */
    uint32_t seqs;                /* live sequences sharing it */
};

struct admin_prefix {
    bool enabled;                 /* --prefix-cache on */
    uint64_t entries;             /* blocks in the prefix index (in use + cached) */
    uint64_t cached_pages;        /* of which refcount 0 */
    uint64_t hit_tokens;          /* prompt tokens served from the index */
    uint64_t query_tokens;        /* prompt tokens looked up */
    uint64_t evictions;           /* cached pages evicted (LRU or evict --cached) */
    struct admin_prefix_top top[ADMIN_PREFIX_TOP_MAX]; /* largest first */
    uint32_t n_top;
};

struct admin_map {
    uint64_t pages_total;
    uint8_t *pages;               /* pages_total bytes, enum admin_page each */
};

struct admin_evict {
    uint64_t evicted;             /* cached pages dropped */
};

const char *admin_req_name(enum admin_req r);          /* "pool", ...; "?" if invalid */
const char *admin_seq_state_name(enum admin_seq_state s);
const char *admin_worker_state_name(enum admin_worker_state s);

/* Requests. For ADMIN_REQ_EVICT the request carries cached: true. */
int admin_request_encode(enum admin_req r, struct wbuf *w);
/* Decodes any request; EMSG for an unknown type or a field out of place. */
int admin_request_decode(const struct wmsg *m, enum admin_req *out, char err[WIRE_ERR_LEN]);

/* Replies. */
int admin_pool_encode(const struct admin_pool *p, struct wbuf *w);
int admin_pool_decode(const struct wmsg *m, struct admin_pool *out, char err[WIRE_ERR_LEN]);

int admin_seqs_encode(const struct admin_seqs *s, struct wbuf *w);
int admin_seqs_decode(const struct wmsg *m, struct admin_seqs *out, char err[WIRE_ERR_LEN]);
void admin_seqs_release(struct admin_seqs *s);

int admin_workers_encode(const struct admin_workers *s, struct wbuf *w);
int admin_workers_decode(const struct wmsg *m, struct admin_workers *out,
                         char err[WIRE_ERR_LEN]);
void admin_workers_release(struct admin_workers *s);

int admin_prefix_encode(const struct admin_prefix *p, struct wbuf *w);
int admin_prefix_decode(const struct wmsg *m, struct admin_prefix *out, char err[WIRE_ERR_LEN]);

int admin_map_encode(const struct admin_map *p, struct wbuf *w);
int admin_map_decode(const struct wmsg *m, struct admin_map *out, char err[WIRE_ERR_LEN]);
void admin_map_release(struct admin_map *p);

int admin_evict_encode(const struct admin_evict *e, struct wbuf *w);
int admin_evict_decode(const struct wmsg *m, struct admin_evict *out, char err[WIRE_ERR_LEN]);

#endif
