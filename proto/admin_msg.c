#include "proto/admin_msg.h"

#include "common/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const req_names[ADMIN_REQ_COUNT_] = {"pool",   "seqs", "workers",
                                                        "prefix", "map",  "evict"};
static const char *const seq_state_names[ADMIN_SEQ_COUNT_] = {"queued", "prefill", "decode",
                                                              "preempted"};
static const char *const worker_state_names[ADMIN_WORKER_COUNT_] = {
    "starting", "idle", "busy", "restarting", "stopped"};

const char *admin_req_name(enum admin_req r)
{
    return (unsigned)r < ADMIN_REQ_COUNT_ ? req_names[r] : "?";
}

const char *admin_seq_state_name(enum admin_seq_state s)
{
    return (unsigned)s < ADMIN_SEQ_COUNT_ ? seq_state_names[s] : "?";
}

const char *admin_worker_state_name(enum admin_worker_state s)
{
    return (unsigned)s < ADMIN_WORKER_COUNT_ ? worker_state_names[s] : "?";
}

/* Index of the string object o in names[0..n), or -1. */
static int name_index(const msgpack_object *o, const char *const *names, int n)
{
    if (!o || o->type != MSGPACK_OBJECT_STR)
        return -1;
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == o->via.str.size &&
            memcmp(names[i], o->via.str.ptr, o->via.str.size) == 0)
            return i;
    return -1;
}

static int get_name(const msgpack_object *r, const char *key, char out[ADMIN_NAME_MAX + 1],
                    char err[WIRE_ERR_LEN])
{
    const char *p;
    size_t n;
    int rc = wire_str(r, key, true, ADMIN_NAME_MAX, &p, &n, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x21 || p[i] > 0x7e)
            return wire_fail(err, KVD_EMSG, "field '%s' must be printable ASCII", key);
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

static bool name_is_valid(const char *s)
{
    size_t n = strnlen(s, ADMIN_NAME_MAX + 1);
    if (n > ADMIN_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return false;
    return true;
}

/* ---- requests ---- */

int admin_request_encode(enum admin_req r, struct wbuf *w)
{
    if ((unsigned)r >= ADMIN_REQ_COUNT_)
        return KVD_EMSG;
    wire_begin(w, req_names[r], r == ADMIN_REQ_EVICT ? 1 : 0);
    if (r == ADMIN_REQ_EVICT)
        wire_put_bool(w, "cached", true);
    return 0;
}

int admin_request_decode(const struct wmsg *m, enum admin_req *out, char err[WIRE_ERR_LEN])
{
    static const char *const none[] = {NULL};
    static const char *const evict_keys[] = {"cached", NULL};
    int r = -1, rc;
    for (int i = 0; i < ADMIN_REQ_COUNT_; i++)
        if (wmsg_is(m, req_names[i]))
            r = i;
    if (r < 0)
        return wire_fail(err, KVD_EMSG, "unknown admin request '%.32s'", m->type ? m->type : "");
    if (r == ADMIN_REQ_EVICT) {
        bool cached;
        if ((rc = wire_check_keys(&m->root, evict_keys, err)) ||
            (rc = wire_bool(&m->root, "cached", true, false, &cached, err)))
            return rc;
        if (!cached)
            return wire_fail(err, KVD_EMSG, "evict needs cached: true (only cached pages are evicted)");
    } else if ((rc = wire_check_keys(&m->root, none, err))) {
        return rc;
    }
    *out = (enum admin_req)r;
    return 0;
}

/* ---- pool ---- */

#define POOL_U64_FIELDS(X)                                                                   \
    X(pages_total) X(pages_free) X(pages_used) X(pages_cached) X(pages_shared) X(page_bytes) \
    X(pool_bytes) X(tokens_stored) X(prefix_query_tokens) X(prefix_hit_tokens)               \
    X(preemptions) X(requests_finished) X(requests_failed) X(prompt_tokens_total)            \
    X(prefill_tokens_total) X(output_tokens_total) X(steps_total) X(uptime_ms)
#define POOL_U32_FIELDS(X) X(block_size) X(max_model_len) X(requests_running) X(requests_queued)
#define POOL_COUNT_ONE(f) +1
#define POOL_N_FIELDS (0 POOL_U64_FIELDS(POOL_COUNT_ONE) POOL_U32_FIELDS(POOL_COUNT_ONE) + 4)

static int pool_check(const struct admin_pool *p, char err[WIRE_ERR_LEN])
{
    if (p->pages_used + p->pages_cached + p->pages_free != p->pages_total)
        return wire_fail(err, KVD_EMSG, "pool: used + cached + free != total");
    if (p->pages_shared > p->pages_used)
        return wire_fail(err, KVD_EMSG, "pool: shared pages exceed used pages");
    if (!(p->waste_ratio >= 0 && p->waste_ratio <= 1))
        return wire_fail(err, KVD_EMSG, "pool: waste_ratio outside [0, 1]");
    if (p->prefix_hit_tokens > p->prefix_query_tokens)
        return wire_fail(err, KVD_EMSG, "pool: prefix hits exceed queries");
    if (!name_is_valid(p->kv_dtype) || !name_is_valid(p->alloc))
        return wire_fail(err, KVD_EMSG, "pool: kv_dtype or alloc name invalid");
    return 0;
}

int admin_pool_encode(const struct admin_pool *p, struct wbuf *w)
{
    if (pool_check(p, NULL))
        return KVD_EMSG;
    wire_begin(w, "pool", POOL_N_FIELDS);
#define PUT(f) wire_put_u64(w, #f, p->f);
    POOL_U64_FIELDS(PUT)
    POOL_U32_FIELDS(PUT)
#undef PUT
    wire_put_str(w, "kv_dtype", p->kv_dtype);
    wire_put_str(w, "alloc", p->alloc);
    wire_put_bool(w, "prefix_cache", p->prefix_cache);
    wire_put_f64(w, "waste_ratio", p->waste_ratio);
    return 0;
}

int admin_pool_decode(const struct wmsg *m, struct admin_pool *out, char err[WIRE_ERR_LEN])
{
#define KEY(f) #f,
    static const char *const keys[] = {POOL_U64_FIELDS(KEY) POOL_U32_FIELDS(KEY) "kv_dtype",
                                       "alloc", "prefix_cache", "waste_ratio", NULL};
#undef KEY
    const msgpack_object *r = &m->root;
    int rc;
    memset(out, 0, sizeof(*out));
    if (!wmsg_is(m, "pool"))
        return wire_fail(err, KVD_EMSG, "expected a 'pool' reply");
    if ((rc = wire_check_keys(r, keys, err)))
        return rc;
#define GET64(f)                                                                             \
    if ((rc = wire_u64(r, #f, true, 0, UINT64_MAX, &out->f, err)))                           \
        return rc;
#define GET32(f)                                                                             \
    if ((rc = wire_u32(r, #f, true, 0, UINT32_MAX, &out->f, err)))                           \
        return rc;
    POOL_U64_FIELDS(GET64)
    POOL_U32_FIELDS(GET32)
#undef GET64
#undef GET32
    if ((rc = get_name(r, "kv_dtype", out->kv_dtype, err)) ||
        (rc = get_name(r, "alloc", out->alloc, err)) ||
        (rc = wire_bool(r, "prefix_cache", true, false, &out->prefix_cache, err)) ||
        (rc = wire_f64(r, "waste_ratio", true, 0, 0, 1, &out->waste_ratio, err)))
        return rc;
    return pool_check(out, err);
}

/* ---- seqs ---- */

int admin_seqs_encode(const struct admin_seqs *s, struct wbuf *w)
{
    if (s->n > ADMIN_MAX_SEQS || s->n_total < s->n || (s->n && !s->seqs))
        return KVD_EMSG;
    for (size_t i = 0; i < s->n; i++)
        if ((unsigned)s->seqs[i].state >= ADMIN_SEQ_COUNT_ || s->seqs[i].worker < -1 ||
            s->seqs[i].shared_pages > s->seqs[i].pages)
            return KVD_EMSG;
    wire_begin(w, "seqs", 2);
    wire_key(w, "seqs");
    msgpack_pack_array(&w->pk, s->n);
    for (size_t i = 0; i < s->n; i++) {
        const struct admin_seq *q = &s->seqs[i];
        msgpack_pack_map(&w->pk, 6);
        wire_put_u64(w, "id", q->id);
        wire_put_str(w, "state", seq_state_names[q->state]);
        wire_put_u64(w, "tokens", q->tokens);
        wire_put_u64(w, "pages", q->pages);
        wire_put_u64(w, "shared_pages", q->shared_pages);
        wire_put_i64(w, "worker", q->worker);
    }
    wire_put_u64(w, "n_total", s->n_total);
    return 0;
}

void admin_seqs_release(struct admin_seqs *s)
{
    free(s->seqs);
    memset(s, 0, sizeof(*s));
}

int admin_seqs_decode(const struct wmsg *m, struct admin_seqs *out, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"seqs", "n_total", NULL};
    static const char *const item_keys[] = {"id",    "state",        "tokens",
                                            "pages", "shared_pages", "worker", NULL};
    const msgpack_object *r = &m->root, *arr;
    int rc;
    memset(out, 0, sizeof(*out));
    if (!wmsg_is(m, "seqs"))
        return wire_fail(err, KVD_EMSG, "expected a 'seqs' reply");
    if ((rc = wire_check_keys(r, keys, err)) ||
        (rc = wire_array(r, "seqs", true, ADMIN_MAX_SEQS, &arr, err)) ||
        (rc = wire_u64(r, "n_total", true, 0, UINT64_MAX, &out->n_total, err)))
        return rc;
    if (out->n_total < arr->via.array.size)
        return wire_fail(err, KVD_EMSG, "seqs: n_total smaller than the list");
    if (arr->via.array.size &&
        !(out->seqs = calloc(arr->via.array.size, sizeof(*out->seqs))))
        return -ENOMEM;
    for (uint32_t i = 0; i < arr->via.array.size; i++) {
        const msgpack_object *it = &arr->via.array.ptr[i];
        struct admin_seq *q = &out->seqs[i];
        int64_t worker;
        if ((rc = wire_check_keys(it, item_keys, err)) ||
            (rc = wire_u64(it, "id", true, 0, UINT64_MAX, &q->id, err)) ||
            (rc = wire_u32(it, "tokens", true, 0, UINT32_MAX, &q->tokens, err)) ||
            (rc = wire_u32(it, "pages", true, 0, UINT32_MAX, &q->pages, err)) ||
            (rc = wire_u32(it, "shared_pages", true, 0, UINT32_MAX, &q->shared_pages, err)) ||
            (rc = wire_i64(it, "worker", true, 0, -1, INT32_MAX, &worker, err)))
            return rc;
        int st = name_index(wire_get(it, "state"), seq_state_names, ADMIN_SEQ_COUNT_);
        if (st < 0)
            return wire_fail(err, KVD_EMSG, "seqs: entry %u has an unknown state", i);
        if (q->shared_pages > q->pages)
            return wire_fail(err, KVD_EMSG, "seqs: entry %u shares more pages than it holds", i);
        q->state = (enum admin_seq_state)st;
        q->worker = (int32_t)worker;
        out->n = i + 1;
    }
    return 0;
}

/* ---- workers ---- */

int admin_workers_encode(const struct admin_workers *s, struct wbuf *w)
{
    if (s->n > ADMIN_MAX_WORKERS || (s->n && !s->workers))
        return KVD_EMSG;
    for (size_t i = 0; i < s->n; i++)
        if ((unsigned)s->workers[i].state >= ADMIN_WORKER_COUNT_ || s->workers[i].pid < 0)
            return KVD_EMSG;
    wire_begin(w, "workers", 1);
    wire_key(w, "workers");
    msgpack_pack_array(&w->pk, s->n);
    for (size_t i = 0; i < s->n; i++) {
        const struct admin_worker *k = &s->workers[i];
        msgpack_pack_map(&w->pk, 5);
        wire_put_u64(w, "index", k->index);
        wire_put_i64(w, "pid", k->pid);
        wire_put_str(w, "state", worker_state_names[k->state]);
        wire_put_u64(w, "steps", k->steps);
        wire_put_u64(w, "restarts", k->restarts);
    }
    return 0;
}

void admin_workers_release(struct admin_workers *s)
{
    free(s->workers);
    memset(s, 0, sizeof(*s));
}

int admin_workers_decode(const struct wmsg *m, struct admin_workers *out,
                         char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"workers", NULL};
    static const char *const item_keys[] = {"index", "pid", "state", "steps", "restarts",
                                            NULL};
    const msgpack_object *r = &m->root, *arr;
    int rc;
    memset(out, 0, sizeof(*out));
    if (!wmsg_is(m, "workers"))
        return wire_fail(err, KVD_EMSG, "expected a 'workers' reply");
    if ((rc = wire_check_keys(r, keys, err)) ||
        (rc = wire_array(r, "workers", true, ADMIN_MAX_WORKERS, &arr, err)))
        return rc;
    if (arr->via.array.size &&
        !(out->workers = calloc(arr->via.array.size, sizeof(*out->workers))))
        return -ENOMEM;
    for (uint32_t i = 0; i < arr->via.array.size; i++) {
        const msgpack_object *it = &arr->via.array.ptr[i];
        struct admin_worker *k = &out->workers[i];
        int64_t pid;
        if ((rc = wire_check_keys(it, item_keys, err)) ||
            (rc = wire_u32(it, "index", true, 0, UINT32_MAX, &k->index, err)) ||
            (rc = wire_i64(it, "pid", true, 0, 0, INT32_MAX, &pid, err)) ||
            (rc = wire_u64(it, "steps", true, 0, UINT64_MAX, &k->steps, err)) ||
            (rc = wire_u32(it, "restarts", true, 0, UINT32_MAX, &k->restarts, err)))
            return rc;
        int st = name_index(wire_get(it, "state"), worker_state_names, ADMIN_WORKER_COUNT_);
        if (st < 0)
            return wire_fail(err, KVD_EMSG, "workers: entry %u has an unknown state", i);
        k->state = (enum admin_worker_state)st;
        k->pid = (int32_t)pid;
        out->n = i + 1;
    }
    return 0;
}

/* ---- prefix ---- */

int admin_prefix_encode(const struct admin_prefix *p, struct wbuf *w)
{
    if (p->n_top > ADMIN_PREFIX_TOP_MAX || p->hit_tokens > p->query_tokens ||
        p->cached_pages > p->entries)
        return KVD_EMSG;
    wire_begin(w, "prefix", 7);
    wire_put_bool(w, "enabled", p->enabled);
    wire_put_u64(w, "entries", p->entries);
    wire_put_u64(w, "cached_pages", p->cached_pages);
    wire_put_u64(w, "hit_tokens", p->hit_tokens);
    wire_put_u64(w, "query_tokens", p->query_tokens);
    wire_put_u64(w, "evictions", p->evictions);
    wire_key(w, "top");
    msgpack_pack_array(&w->pk, p->n_top);
    for (uint32_t i = 0; i < p->n_top; i++) {
        msgpack_pack_map(&w->pk, 3);
        wire_put_u64(w, "tokens", p->top[i].tokens);
        wire_put_u64(w, "pages", p->top[i].pages);
        wire_put_u64(w, "seqs", p->top[i].seqs);
    }
    return 0;
}

int admin_prefix_decode(const struct wmsg *m, struct admin_prefix *out, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"enabled",    "entries",   "cached_pages", "hit_tokens",
                                       "query_tokens", "evictions", "top",          NULL};
    static const char *const item_keys[] = {"tokens", "pages", "seqs", NULL};
    const msgpack_object *r = &m->root, *arr;
    int rc;
    memset(out, 0, sizeof(*out));
    if (!wmsg_is(m, "prefix"))
        return wire_fail(err, KVD_EMSG, "expected a 'prefix' reply");
    if ((rc = wire_check_keys(r, keys, err)) ||
        (rc = wire_bool(r, "enabled", true, false, &out->enabled, err)) ||
        (rc = wire_u64(r, "entries", true, 0, UINT64_MAX, &out->entries, err)) ||
        (rc = wire_u64(r, "cached_pages", true, 0, UINT64_MAX, &out->cached_pages, err)) ||
        (rc = wire_u64(r, "hit_tokens", true, 0, UINT64_MAX, &out->hit_tokens, err)) ||
        (rc = wire_u64(r, "query_tokens", true, 0, UINT64_MAX, &out->query_tokens, err)) ||
        (rc = wire_u64(r, "evictions", true, 0, UINT64_MAX, &out->evictions, err)) ||
        (rc = wire_array(r, "top", true, ADMIN_PREFIX_TOP_MAX, &arr, err)))
        return rc;
    if (out->hit_tokens > out->query_tokens || out->cached_pages > out->entries)
        return wire_fail(err, KVD_EMSG, "prefix: hits exceed queries or cached exceeds entries");
    for (uint32_t i = 0; i < arr->via.array.size; i++) {
        const msgpack_object *it = &arr->via.array.ptr[i];
        struct admin_prefix_top *t = &out->top[i];
        if ((rc = wire_check_keys(it, item_keys, err)) ||
            (rc = wire_u32(it, "tokens", true, 0, UINT32_MAX, &t->tokens, err)) ||
            (rc = wire_u32(it, "pages", true, 0, UINT32_MAX, &t->pages, err)) ||
            (rc = wire_u32(it, "seqs", true, 0, UINT32_MAX, &t->seqs, err)))
            return rc;
        out->n_top = i + 1;
    }
    return 0;
}

/* ---- map ---- */

int admin_map_encode(const struct admin_map *p, struct wbuf *w)
{
    if (p->pages_total > ADMIN_MAP_MAX_PAGES || (p->pages_total && !p->pages))
        return KVD_EMSG;
    for (uint64_t i = 0; i < p->pages_total; i++)
        if (p->pages[i] >= ADMIN_PAGE_COUNT_)
            return KVD_EMSG;
    wire_begin(w, "map", 2);
    wire_put_u64(w, "pages_total", p->pages_total);
    wire_put_bin(w, "pages", p->pages, p->pages_total);
    return 0;
}

void admin_map_release(struct admin_map *p)
{
    free(p->pages);
    memset(p, 0, sizeof(*p));
}

int admin_map_decode(const struct wmsg *m, struct admin_map *out, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"pages_total", "pages", NULL};
    const msgpack_object *r = &m->root;
    int rc;
    memset(out, 0, sizeof(*out));
    if (!wmsg_is(m, "map"))
        return wire_fail(err, KVD_EMSG, "expected a 'map' reply");
    if ((rc = wire_check_keys(r, keys, err)) ||
        (rc = wire_u64(r, "pages_total", true, 0, ADMIN_MAP_MAX_PAGES, &out->pages_total, err)))
        return rc;
    const msgpack_object *b = wire_get(r, "pages");
    if (!b || b->type != MSGPACK_OBJECT_BIN || b->via.bin.size != out->pages_total)
        return wire_fail(err, KVD_EMSG, "field 'pages' must be bin of pages_total bytes");
    for (uint32_t i = 0; i < b->via.bin.size; i++)
        if ((uint8_t)b->via.bin.ptr[i] >= ADMIN_PAGE_COUNT_)
            return wire_fail(err, KVD_EMSG, "field 'pages' has an unknown state at page %u", i);
    if (out->pages_total && !(out->pages = malloc(out->pages_total)))
        return -ENOMEM;
    if (out->pages_total)
        memcpy(out->pages, b->via.bin.ptr, out->pages_total);
    return 0;
}

/* ---- evict ---- */

int admin_evict_encode(const struct admin_evict *e, struct wbuf *w)
{
    wire_begin(w, "evict", 1);
    wire_put_u64(w, "evicted", e->evicted);
    return 0;
}

int admin_evict_decode(const struct wmsg *m, struct admin_evict *out, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"evicted", NULL};
    int rc;
    memset(out, 0, sizeof(*out));
    if (!wmsg_is(m, "evict"))
        return wire_fail(err, KVD_EMSG, "expected an 'evict' reply");
    if ((rc = wire_check_keys(&m->root, keys, err)))
        return rc;
    return wire_u64(&m->root, "evicted", true, 0, UINT64_MAX, &out->evicted, err);
}
