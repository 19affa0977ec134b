/* broker_msg.c — the request half of proto/broker_msg.h: the block hash, the pool
 * descriptor map, request encoders and the strict request decoder, and the raw msgpack
 * pre-check. Replies live in broker_rep.c. */
#include "proto/broker_msg.h"

#include "common/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- pool descriptor as a map ------------------------------------------------- */

#define BM_DESC_FIELDS 19

void broker_pool_desc_put(struct wbuf *w, const char *key, const struct pool_desc *d)
{
    wire_key(w, key);
    msgpack_pack_map(&w->pk, BM_DESC_FIELDS);
    wire_put_u64(w, "pool_id", d->pool_id);
    wire_put_u64(w, "epoch", d->epoch);
    wire_put_u64(w, "model_fp", d->model_fp);
    wire_put_u64(w, "n_layers", d->geom.n_layers);
    wire_put_u64(w, "n_kv_heads", d->geom.n_kv_heads);
    wire_put_u64(w, "head_dim", d->geom.head_dim);
    wire_put_u64(w, "block_size", d->geom.block_size);
    wire_put_u64(w, "kv_dtype", d->geom.kv_dtype);
    wire_put_u64(w, "data_bytes", d->geom.data_bytes);
    wire_put_u64(w, "scale_bytes", d->geom.scale_bytes);
    wire_put_u64(w, "page_bytes", d->geom.page_bytes);
    wire_put_u64(w, "layout_version", d->layout_version);
    wire_put_u64(w, "backend", d->backend);
    wire_put_u64(w, "num_pages", d->num_pages);
    wire_put_u64(w, "pool_bytes", d->pool_bytes);
    wire_put_u64(w, "n_chunks", d->n_chunks);
    wire_put_u64(w, "chunk_bytes", d->chunk_bytes);
    wire_put_u64(w, "pages_per_chunk", d->pages_per_chunk);
    wire_put_i64(w, "cuda_device", d->cuda_device);
}

int broker_pool_desc_get(const msgpack_object *map, bool partial, struct pool_desc *out,
                         char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {
        "pool_id",     "epoch",       "model_fp",   "n_layers",       "n_kv_heads",
        "head_dim",    "block_size",  "kv_dtype",   "data_bytes",     "scale_bytes",
        "page_bytes",  "layout_version", "backend", "num_pages",      "pool_bytes",
        "n_chunks",    "chunk_bytes", "pages_per_chunk", "cuda_device", NULL};
    struct pool_desc d;
    memset(&d, 0, sizeof(d));
    bool req = !partial;
    int64_t dev = 0;
    int rc = wire_check_keys(map, keys, err);
    if (!rc) rc = wire_u64(map, "pool_id", req, 0, UINT64_MAX, &d.pool_id, err);
    if (!rc) rc = wire_u32(map, "epoch", req, 0, UINT32_MAX, &d.epoch, err);
    if (!rc) rc = wire_u64(map, "model_fp", req, 0, UINT64_MAX, &d.model_fp, err);
    if (!rc) rc = wire_u32(map, "n_layers", req, 0, KV_LAYERS_MAX, &d.geom.n_layers, err);
    if (!rc) rc = wire_u32(map, "n_kv_heads", req, 0, KV_HEADS_MAX, &d.geom.n_kv_heads, err);
    if (!rc) rc = wire_u32(map, "head_dim", req, 0, KV_HEAD_DIM_MAX, &d.geom.head_dim, err);
    if (!rc)
        rc = wire_u32(map, "block_size", req, 0, KV_BLOCK_TOKENS_MAX, &d.geom.block_size, err);
    if (!rc)
        rc = wire_u32(map, "kv_dtype", req, 0, KV_DTYPE_COUNT_ - 1, &d.geom.kv_dtype, err);
    if (!rc) rc = wire_u64(map, "data_bytes", req, 0, UINT64_MAX, &d.geom.data_bytes, err);
    if (!rc) rc = wire_u64(map, "scale_bytes", req, 0, UINT64_MAX, &d.geom.scale_bytes, err);
    if (!rc) rc = wire_u64(map, "page_bytes", req, 0, UINT64_MAX, &d.geom.page_bytes, err);
    if (!rc)
        rc = wire_u32(map, "layout_version", req, 0, UINT32_MAX, &d.layout_version, err);
    if (!rc) rc = wire_u32(map, "backend", req, 0, MEM_BACKEND_COUNT_ - 1, &d.backend, err);
    if (!rc) rc = wire_u32(map, "num_pages", req, 0, MEM_POOL_PAGES_MAX, &d.num_pages, err);
    if (!rc) rc = wire_u64(map, "pool_bytes", req, 0, UINT64_MAX, &d.pool_bytes, err);
    if (!rc) rc = wire_u32(map, "n_chunks", req, 0, MEM_CHUNKS_MAX, &d.n_chunks, err);
    if (!rc) rc = wire_u64(map, "chunk_bytes", req, 0, UINT64_MAX, &d.chunk_bytes, err);
    if (!rc)
        rc = wire_u32(map, "pages_per_chunk", req, 0, MEM_POOL_PAGES_MAX, &d.pages_per_chunk,
                      err);
    if (!rc) rc = wire_i64(map, "cuda_device", req, 0, -1, INT32_MAX, &dev, err);
    if (rc)
        return rc;
    d.cuda_device = (int32_t)dev;
    if (!partial && (d.num_pages == 0 || d.n_chunks == 0 || d.pages_per_chunk == 0 ||
                     d.geom.page_bytes == 0))
        return wire_fail(err, KVD_EMSG, "pool descriptor has zero pages, chunks or page bytes");
    *out = d;
    return 0;
}

/* ---- requests: encode ---------------------------------------------------------- */

static void put_hashes(struct wbuf *w, const char *key, const struct broker_hash *h, size_t n)
{
    wire_key(w, key);
    msgpack_pack_array(&w->pk, n);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_bin(&w->pk, BROKER_HASH_BYTES);
        msgpack_pack_bin_body(&w->pk, h[i].b, BROKER_HASH_BYTES);
    }
}

/* The fields of an expect descriptor that are set (nonzero). */
static uint32_t expect_fields(const struct pool_desc *e, bool put, struct wbuf *w)
{
    uint32_t n = 0;
#define EXPECT_FIELD(name, val)                                                             \
    do {                                                                                   \
        if ((val) != 0) {                                                                  \
            n++;                                                                           \
            if (put)                                                                       \
                wire_put_u64(w, name, (uint64_t)(val));                                    \
        }                                                                                  \
    } while (0)
    EXPECT_FIELD("pool_id", e->pool_id);
    EXPECT_FIELD("epoch", e->epoch);
    EXPECT_FIELD("model_fp", e->model_fp);
    EXPECT_FIELD("n_layers", e->geom.n_layers);
    EXPECT_FIELD("n_kv_heads", e->geom.n_kv_heads);
    EXPECT_FIELD("head_dim", e->geom.head_dim);
    EXPECT_FIELD("block_size", e->geom.block_size);
    EXPECT_FIELD("kv_dtype", e->geom.kv_dtype);
    EXPECT_FIELD("data_bytes", e->geom.data_bytes);
    EXPECT_FIELD("scale_bytes", e->geom.scale_bytes);
    EXPECT_FIELD("page_bytes", e->geom.page_bytes);
    EXPECT_FIELD("layout_version", e->layout_version);
    EXPECT_FIELD("backend", e->backend);
    EXPECT_FIELD("num_pages", e->num_pages);
#undef EXPECT_FIELD
    return n;
}

int broker_req_attach_encode(struct wbuf *w, const char *client, uint32_t pid,
                             const struct pool_desc *expect)
{
    if (!client || strlen(client) > BROKER_CLIENT_NAME_MAX)
        return -EINVAL;
    wire_begin(w, "attach", expect ? 3 : 2);
    wire_put_str(w, "client", client);
    wire_put_u64(w, "pid", pid);
    if (expect) {
        wire_key(w, "expect");
        msgpack_pack_map(&w->pk, expect_fields(expect, false, NULL));
        expect_fields(expect, true, w);
    }
    return 0;
}

static int lease_only(struct wbuf *w, const char *t, uint64_t lease)
{
    wire_begin(w, t, 1);
    wire_put_u64(w, "lease", lease);
    return 0;
}

int broker_req_heartbeat_encode(struct wbuf *w, uint64_t lease)
{
    return lease_only(w, "heartbeat", lease);
}

int broker_req_detach_encode(struct wbuf *w, uint64_t lease)
{
    return lease_only(w, "detach", lease);
}

int broker_req_alloc_encode(struct wbuf *w, uint64_t lease, uint64_t seq, uint32_t n)
{
    if (n == 0 || n > BROKER_ALLOC_MAX)
        return -EINVAL;
    wire_begin(w, "alloc", 3);
    wire_put_u64(w, "lease", lease);
    wire_put_u64(w, "seq", seq);
    wire_put_u64(w, "n", n);
    return 0;
}

int broker_req_free_encode(struct wbuf *w, uint64_t lease, uint64_t seq)
{
    wire_begin(w, "free", 2);
    wire_put_u64(w, "lease", lease);
    wire_put_u64(w, "seq", seq);
    return 0;
}

int broker_req_lookup_encode(struct wbuf *w, uint64_t lease, uint64_t seq,
                             const struct broker_hash *hashes, size_t n)
{
    if (n > BROKER_LOOKUP_MAX || (n && !hashes))
        return -EINVAL;
    wire_begin(w, "lookup", 3);
    wire_put_u64(w, "lease", lease);
    wire_put_u64(w, "seq", seq);
    put_hashes(w, "hashes", hashes, n);
    return 0;
}

int broker_req_commit_encode(struct wbuf *w, uint64_t lease, uint64_t seq, uint32_t block,
                             const struct broker_hash *hashes, size_t n)
{
    if (n == 0 || n > BROKER_LOOKUP_MAX || !hashes || block >= BROKER_SEQ_PAGES_MAX)
        return -EINVAL;
    wire_begin(w, "commit", 4);
    wire_put_u64(w, "lease", lease);
    wire_put_u64(w, "seq", seq);
    wire_put_u64(w, "block", block);
    put_hashes(w, "hashes", hashes, n);
    return 0;
}

int broker_req_stats_encode(struct wbuf *w)
{
    wire_begin(w, "stats", 0);
    return 0;
}

int broker_req_dump_encode(struct wbuf *w, uint32_t start, uint32_t max)
{
    if (max > BROKER_DUMP_MAX)
        return -EINVAL;
    wire_begin(w, "dump", 2);
    wire_put_u64(w, "start", start);
    wire_put_u64(w, "max", max);
    return 0;
}

int broker_req_evict_cached_encode(struct wbuf *w)
{
    wire_begin(w, "evict_cached", 0);
    return 0;
}

/* ---- raw pre-check ------------------------------------------------------------- */

int broker_msg_precheck(const void *buf, size_t len, size_t max_len, char err[WIRE_ERR_LEN])
{
    if (len > max_len)
        return wire_fail(err, KVD_EMSG, "message of %zu bytes exceeds the %zu byte limit", len,
                       max_len);
    return wire_precheck(buf, len, err);
}

/* ---- requests: decode ---------------------------------------------------------- */

static const char *const req_names[BROKER_REQ_COUNT_] = {
    [BROKER_REQ_ATTACH] = "attach",   [BROKER_REQ_HEARTBEAT] = "heartbeat",
    [BROKER_REQ_DETACH] = "detach",   [BROKER_REQ_ALLOC] = "alloc",
    [BROKER_REQ_FREE] = "free",       [BROKER_REQ_LOOKUP] = "lookup",
    [BROKER_REQ_COMMIT] = "commit",   [BROKER_REQ_STATS] = "stats",
    [BROKER_REQ_DUMP] = "dump",       [BROKER_REQ_EVICT_CACHED] = "evict_cached",
};

const char *broker_req_name(enum broker_req_type t)
{
    return (unsigned)t < BROKER_REQ_COUNT_ ? req_names[t] : "?";
}

static int get_hashes(const msgpack_object *map, const char *key, bool need_one,
                      struct broker_hash **out, size_t *n, char err[WIRE_ERR_LEN])
{
    const msgpack_object *a;
    int rc = wire_array(map, key, true, BROKER_LOOKUP_MAX, &a, err);
    if (rc)
        return rc;
    uint32_t cnt = a->via.array.size;
    if (need_one && cnt == 0)
        return wire_fail(err, KVD_EMSG, "field '%s' must not be empty", key);
    struct broker_hash *h = cnt ? calloc(cnt, sizeof(*h)) : NULL;
    if (cnt && !h)
        return wire_fail(err, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < cnt; i++) {
        const msgpack_object *e = &a->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_BIN || e->via.bin.size != BROKER_HASH_BYTES) {
            free(h);
            return wire_fail(err, KVD_EMSG, "field '%s'[%u] must be a %d-byte bin", key, i,
                           BROKER_HASH_BYTES);
        }
        memcpy(h[i].b, e->via.bin.ptr, BROKER_HASH_BYTES);
    }
    *out = h;
    *n = cnt;
    return 0;
}

static int decode_body(const msgpack_object *r, struct broker_req *q, char err[WIRE_ERR_LEN])
{
    static const char *const k_attach[] = {"client", "pid", "expect", NULL};
    static const char *const k_lease[] = {"lease", NULL};
    static const char *const k_alloc[] = {"lease", "seq", "n", NULL};
    static const char *const k_free[] = {"lease", "seq", NULL};
    static const char *const k_lookup[] = {"lease", "seq", "hashes", NULL};
    static const char *const k_commit[] = {"lease", "seq", "block", "hashes", NULL};
    static const char *const k_none[] = {NULL};
    static const char *const k_dump[] = {"start", "max", NULL};
    int rc;
    const char *s;
    size_t sn;
    const msgpack_object *e;

    switch (q->type) {
    case BROKER_REQ_ATTACH:
        if ((rc = wire_check_keys(r, k_attach, err)) ||
            (rc = wire_str(r, "client", true, BROKER_CLIENT_NAME_MAX, &s, &sn, err)) ||
            (rc = wire_u32(r, "pid", true, 0, UINT32_MAX, &q->pid, err)) ||
            (rc = wire_map(r, "expect", false, &e, err)))
            return rc;
        memcpy(q->client, s, sn);
        q->client[sn] = '\0';
        if (e && (rc = broker_pool_desc_get(e, true, &q->expect, err)))
            return rc;
        return 0;
    case BROKER_REQ_HEARTBEAT:
    case BROKER_REQ_DETACH:
        if ((rc = wire_check_keys(r, k_lease, err)))
            return rc;
        return wire_u64(r, "lease", true, 0, UINT64_MAX, &q->lease, err);
    case BROKER_REQ_ALLOC:
        if ((rc = wire_check_keys(r, k_alloc, err)) ||
            (rc = wire_u64(r, "lease", true, 0, UINT64_MAX, &q->lease, err)) ||
            (rc = wire_u64(r, "seq", true, 0, UINT64_MAX, &q->seq, err)) ||
            (rc = wire_u32(r, "n", true, 0, BROKER_ALLOC_MAX, &q->n, err)))
            return rc;
        if (q->n == 0)
            return wire_fail(err, KVD_EMSG, "field 'n' must be at least 1");
        return 0;
    case BROKER_REQ_FREE:
        if ((rc = wire_check_keys(r, k_free, err)) ||
            (rc = wire_u64(r, "lease", true, 0, UINT64_MAX, &q->lease, err)))
            return rc;
        return wire_u64(r, "seq", true, 0, UINT64_MAX, &q->seq, err);
    case BROKER_REQ_LOOKUP:
        if ((rc = wire_check_keys(r, k_lookup, err)) ||
            (rc = wire_u64(r, "lease", true, 0, UINT64_MAX, &q->lease, err)) ||
            (rc = wire_u64(r, "seq", true, 0, UINT64_MAX, &q->seq, err)))
            return rc;
        return get_hashes(r, "hashes", false, &q->hashes, &q->n_hashes, err);
    case BROKER_REQ_COMMIT:
        if ((rc = wire_check_keys(r, k_commit, err)) ||
            (rc = wire_u64(r, "lease", true, 0, UINT64_MAX, &q->lease, err)) ||
            (rc = wire_u64(r, "seq", true, 0, UINT64_MAX, &q->seq, err)) ||
            (rc = wire_u32(r, "block", true, 0, BROKER_SEQ_PAGES_MAX - 1, &q->block, err)))
            return rc;
        return get_hashes(r, "hashes", true, &q->hashes, &q->n_hashes, err);
    case BROKER_REQ_STATS:
    case BROKER_REQ_EVICT_CACHED:
        return wire_check_keys(r, k_none, err);
    case BROKER_REQ_DUMP:
        if ((rc = wire_check_keys(r, k_dump, err)) ||
            (rc = wire_u32(r, "start", false, 0, UINT32_MAX, &q->dump_start, err)))
            return rc;
        return wire_u32(r, "max", false, BROKER_DUMP_MAX, BROKER_DUMP_MAX, &q->dump_max, err);
    case BROKER_REQ_COUNT_:
        break;
    }
    return wire_fail(err, KVD_EINTERNAL, "request type out of range");
}

int broker_req_decode(const struct wmsg *m, struct broker_req *out, char err[WIRE_ERR_LEN])
{
    memset(out, 0, sizeof(*out));
    int t = -1;
    for (int i = 0; i < BROKER_REQ_COUNT_; i++)
        if (wmsg_is(m, req_names[i]))
            t = i;
    if (t < 0)
        return wire_fail(err, KVD_EMSG, "unknown message type '%.40s'", m->type ? m->type : "");
    out->type = (enum broker_req_type)t;
    int rc = decode_body(&m->root, out, err);
    if (rc)
        broker_req_release(out);
    return rc;
}

void broker_req_release(struct broker_req *r)
{
    free(r->hashes);
    memset(r, 0, sizeof(*r));
}

