/* broker_rep.c — the reply half of proto/broker_msg.h: encoders (broker side) and
 * strict decoders (client side) of every broker reply. */
#include "proto/broker_msg.h"

#include "common/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- replies: encode ----------------------------------------------------------- */

int broker_rep_attach_encode(struct wbuf *w, uint64_t lease, uint32_t lease_timeout_ms,
                             const struct pool_desc *pool)
{
    wire_begin(w, "attached", 3);
    wire_put_u64(w, "lease", lease);
    wire_put_u64(w, "lease_timeout_ms", lease_timeout_ms);
    broker_pool_desc_put(w, "pool", pool);
    return 0;
}

int broker_rep_ok_encode(struct wbuf *w, uint64_t n)
{
    wire_begin(w, "ok", 1);
    wire_put_u64(w, "n", n);
    return 0;
}

int broker_rep_pages_encode(struct wbuf *w, const uint32_t *pages, size_t n)
{
    if (n > BROKER_SEQ_PAGES_MAX)
        return -EINVAL;
    wire_begin(w, "pages", 1);
    wire_put_u32s(w, "pages", pages, n);
    return 0;
}

#define BM_STATS_FIELDS 30

int broker_rep_stats_encode(struct wbuf *w, const struct broker_stats *s)
{
    wire_begin(w, "stats", BM_STATS_FIELDS);
    wire_put_u64(w, "pool_id", s->pool_id);
    wire_put_u64(w, "epoch", s->epoch);
    wire_put_u64(w, "model_fp", s->model_fp);
    wire_put_str(w, "backend", s->backend);
    wire_put_str(w, "kv_dtype", s->kv_dtype);
    wire_put_u64(w, "n_layers", s->n_layers);
    wire_put_u64(w, "n_kv_heads", s->n_kv_heads);
    wire_put_u64(w, "head_dim", s->head_dim);
    wire_put_u64(w, "block_size", s->block_size);
    wire_put_u64(w, "page_bytes", s->page_bytes);
    wire_put_u64(w, "pool_bytes", s->pool_bytes);
    wire_put_u64(w, "pages_total", s->pages_total);
    wire_put_u64(w, "pages_free", s->pages_free);
    wire_put_u64(w, "pages_used", s->pages_used);
    wire_put_u64(w, "pages_cached", s->pages_cached);
    wire_put_u64(w, "prefix_entries", s->prefix_entries);
    wire_put_u64(w, "prefix_query_blocks", s->prefix_query_blocks);
    wire_put_u64(w, "prefix_hit_blocks", s->prefix_hit_blocks);
    wire_put_u64(w, "prefix_query_tokens", s->prefix_query_tokens);
    wire_put_u64(w, "prefix_hit_tokens", s->prefix_hit_tokens);
    wire_put_u64(w, "prefix_evictions", s->prefix_evictions);
    wire_put_u64(w, "leases", s->leases);
    wire_put_u64(w, "seqs", s->seqs);
    wire_put_u64(w, "requests", s->requests);
    wire_put_u64(w, "errors", s->errors);
    wire_put_u64(w, "leases_expired", s->leases_expired);
    wire_put_u64(w, "uptime_ms", s->uptime_ms);
    /* derived, for humans reading a raw dump: hit ratio in per mille is left to kvctl */
    wire_put_u64(w, "pages_evictable", s->pages_cached);
    wire_put_u64(w, "pages_allocatable", (uint64_t)s->pages_free + s->pages_cached);
    wire_put_u64(w, "layout_version", KV_LAYOUT_VERSION);
    return 0;
}

int broker_rep_dump_begin(struct wbuf *w, uint32_t total, uint32_t start, size_t n)
{
    if (n > BROKER_DUMP_MAX)
        return -EINVAL;
    wire_begin(w, "dump", 3);
    wire_put_u64(w, "total", total);
    wire_put_u64(w, "start", start);
    wire_key(w, "pages");
    msgpack_pack_array(&w->pk, n);
    return 0;
}

/* A page is [page, state, refcnt, indexed, [lease, seq, lease, seq, ...]]. */
int broker_rep_dump_page(struct wbuf *w, const struct broker_dump_page *p)
{
    if (p->n_owners > BROKER_DUMP_OWNERS_MAX)
        return -EINVAL;
    msgpack_pack_array(&w->pk, 5);
    msgpack_pack_uint32(&w->pk, p->page);
    msgpack_pack_uint32(&w->pk, p->state);
    msgpack_pack_uint32(&w->pk, p->refcnt);
    if (p->indexed)
        msgpack_pack_true(&w->pk);
    else
        msgpack_pack_false(&w->pk);
    msgpack_pack_array(&w->pk, 2 * p->n_owners);
    for (uint32_t i = 0; i < p->n_owners; i++) {
        msgpack_pack_uint64(&w->pk, p->owners[i].lease);
        msgpack_pack_uint64(&w->pk, p->owners[i].seq);
    }
    return 0;
}

/* ---- replies: decode ----------------------------------------------------------- */

/* 0 when m is of type t; the err reply's code (msg copied) or KVD_EMSG otherwise. */
static int rep_expect(const struct wmsg *m, const char *t, char err[WIRE_ERR_LEN])
{
    if (wmsg_is(m, t))
        return 0;
    if (wmsg_is(m, "err")) {
        const char *msg;
        size_t len;
        int code = wmsg_error(m, &msg, &len);
        if (err)
            snprintf(err, WIRE_ERR_LEN, "%.*s", (int)(len > WIRE_ERR_LEN - 1 ? WIRE_ERR_LEN - 1 : len),
                     msg);
        return code;
    }
    return wire_fail(err, KVD_EMSG, "unexpected reply '%.40s', expected '%s'",
                   m->type ? m->type : "", t);
}

int broker_rep_attach_decode(const struct wmsg *m, uint64_t *lease, uint32_t *lease_timeout_ms,
                             struct pool_desc *pool, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"lease", "lease_timeout_ms", "pool", NULL};
    uint64_t l;
    uint32_t to;
    const msgpack_object *p;
    struct pool_desc d;
    int rc;
    if ((rc = rep_expect(m, "attached", err)) || (rc = wire_check_keys(&m->root, keys, err)) ||
        (rc = wire_u64(&m->root, "lease", true, 0, UINT64_MAX, &l, err)) ||
        (rc = wire_u32(&m->root, "lease_timeout_ms", true, 0, BROKER_LEASE_TIMEOUT_MS_MAX, &to,
                       err)) ||
        (rc = wire_map(&m->root, "pool", true, &p, err)) ||
        (rc = broker_pool_desc_get(p, false, &d, err)))
        return rc;
    *lease = l;
    if (lease_timeout_ms)
        *lease_timeout_ms = to;
    if (pool)
        *pool = d;
    return 0;
}

int broker_rep_ok_decode(const struct wmsg *m, uint64_t *n, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"n", NULL};
    uint64_t v;
    int rc;
    if ((rc = rep_expect(m, "ok", err)) || (rc = wire_check_keys(&m->root, keys, err)) ||
        (rc = wire_u64(&m->root, "n", false, 0, UINT64_MAX, &v, err)))
        return rc;
    if (n)
        *n = v;
    return 0;
}

int broker_rep_pages_decode(const struct wmsg *m, uint32_t **pages, size_t *n,
                            char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"pages", NULL};
    int rc;
    if ((rc = rep_expect(m, "pages", err)) || (rc = wire_check_keys(&m->root, keys, err)))
        return rc;
    return wire_u32_array(&m->root, "pages", true, BROKER_SEQ_PAGES_MAX, MEM_POOL_PAGES_MAX - 1,
                          pages, n, err);
}

static int get_name(const msgpack_object *r, const char *key, char out[BROKER_NAME_MAX],
                    char err[WIRE_ERR_LEN])
{
    const char *s;
    size_t n;
    int rc = wire_str(r, key, true, BROKER_NAME_MAX - 1, &s, &n, err);
    if (rc)
        return rc;
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

int broker_rep_stats_decode(const struct wmsg *m, struct broker_stats *out,
                            char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {
        "pool_id", "epoch", "model_fp", "backend", "kv_dtype", "n_layers", "n_kv_heads",
        "head_dim", "block_size", "page_bytes", "pool_bytes", "pages_total", "pages_free",
        "pages_used", "pages_cached", "prefix_entries", "prefix_query_blocks",
        "prefix_hit_blocks", "prefix_query_tokens", "prefix_hit_tokens", "prefix_evictions",
        "leases", "seqs", "requests", "errors", "leases_expired", "uptime_ms",
        "pages_evictable", "pages_allocatable", "layout_version", NULL};
    struct broker_stats s;
    memset(&s, 0, sizeof(s));
    const msgpack_object *r = &m->root;
    int rc;
    if ((rc = rep_expect(m, "stats", err)) || (rc = wire_check_keys(r, keys, err)))
        return rc;
#define U64(k) \
    if (!rc) rc = wire_u64(r, #k, true, 0, UINT64_MAX, &s.k, err)
#define U32(k) \
    if (!rc) rc = wire_u32(r, #k, true, 0, UINT32_MAX, &s.k, err)
    U64(pool_id);
    U32(epoch);
    U64(model_fp);
    U32(n_layers);
    U32(n_kv_heads);
    U32(head_dim);
    U32(block_size);
    U64(page_bytes);
    U64(pool_bytes);
    U32(pages_total);
    U32(pages_free);
    U32(pages_used);
    U32(pages_cached);
    U64(prefix_entries);
    U64(prefix_query_blocks);
    U64(prefix_hit_blocks);
    U64(prefix_query_tokens);
    U64(prefix_hit_tokens);
    U64(prefix_evictions);
    U32(leases);
    U64(seqs);
    U64(requests);
    U64(errors);
    U64(leases_expired);
    U64(uptime_ms);
#undef U64
#undef U32
    if (!rc) rc = get_name(r, "backend", s.backend, err);
    if (!rc) rc = get_name(r, "kv_dtype", s.kv_dtype, err);
    if (rc)
        return rc;
    *out = s;
    return 0;
}

static int get_dump_page(const msgpack_object *e, uint32_t i, struct broker_dump_page *p,
                         char err[WIRE_ERR_LEN])
{
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 5)
        return wire_fail(err, KVD_EMSG, "dump page %u is not a 5-entry array", i);
    const msgpack_object *f = e->via.array.ptr;
    for (int k = 0; k < 3; k++)
        if (f[k].type != MSGPACK_OBJECT_POSITIVE_INTEGER || f[k].via.u64 > UINT32_MAX)
            return wire_fail(err, KVD_EMSG, "dump page %u: field %d is not a u32", i, k);
    if (f[3].type != MSGPACK_OBJECT_BOOLEAN || f[4].type != MSGPACK_OBJECT_ARRAY ||
        f[4].via.array.size % 2 || f[4].via.array.size > 2 * BROKER_DUMP_OWNERS_MAX)
        return wire_fail(err, KVD_EMSG, "dump page %u: bad indexed flag or owner list", i);
    p->page = (uint32_t)f[0].via.u64;
    p->state = (uint32_t)f[1].via.u64;
    p->refcnt = (uint32_t)f[2].via.u64;
    p->indexed = f[3].via.boolean;
    p->n_owners = f[4].via.array.size / 2;
    for (uint32_t k = 0; k < f[4].via.array.size; k++) {
        const msgpack_object *o = &f[4].via.array.ptr[k];
        if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return wire_fail(err, KVD_EMSG, "dump page %u: owner id is not a u64", i);
        if (k % 2 == 0)
            p->owners[k / 2].lease = o->via.u64;
        else
            p->owners[k / 2].seq = o->via.u64;
    }
    if (p->state > BROKER_PAGE_CACHED)
        return wire_fail(err, KVD_EMSG, "dump page %u: state %u unknown", i, p->state);
    return 0;
}

int broker_rep_dump_decode(const struct wmsg *m, struct broker_dump *out,
                           char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"total", "start", "pages", NULL};
    struct broker_dump d;
    memset(&d, 0, sizeof(d));
    const msgpack_object *a;
    int rc;
    if ((rc = rep_expect(m, "dump", err)) || (rc = wire_check_keys(&m->root, keys, err)) ||
        (rc = wire_u32(&m->root, "total", true, 0, UINT32_MAX, &d.total, err)) ||
        (rc = wire_u32(&m->root, "start", true, 0, UINT32_MAX, &d.start, err)) ||
        (rc = wire_array(&m->root, "pages", true, BROKER_DUMP_MAX, &a, err)))
        return rc;
    d.n = a->via.array.size;
    if (d.n && !(d.pages = calloc(d.n, sizeof(*d.pages))))
        return wire_fail(err, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < d.n; i++)
        if ((rc = get_dump_page(&a->via.array.ptr[i], i, &d.pages[i], err))) {
            broker_dump_release(&d);
            return rc;
        }
    *out = d;
    return 0;
}

void broker_dump_release(struct broker_dump *d)
{
    free(d->pages);
    memset(d, 0, sizeof(*d));
}
