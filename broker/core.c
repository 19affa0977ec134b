#include "broker/core.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Evicting a cached page drops its prefix entry (pool -> index, never the reverse). */
static void broker_evict_cb(void *ctx, uint32_t page)
{
    struct broker *b = ctx;
    int rc = prefix_remove_page(&b->prefix, page, true);
    KVD_BUG_ON(rc != 0);
}

int broker_init(struct broker *b, const struct pool_desc *desc, uint32_t lease_timeout_ms,
                uint64_t now_ms)
{
    int rc;
    memset(b, 0, sizeof(*b));
    if (!desc->num_pages || !lease_timeout_ms)
        return -EINVAL;
    if (!(b->scratch = calloc(BROKER_LOOKUP_MAX, sizeof(*b->scratch))))
        return -ENOMEM;
    if ((rc = pool_init(&b->pool, desc->num_pages, broker_evict_cb, b)))
        goto out_free_scratch;
    if ((rc = prefix_init(&b->prefix, desc->num_pages)))
        goto out_release_pool;
    lease_table_init(&b->leases);
    b->desc = *desc;
    b->lease_timeout_ms = lease_timeout_ms;
    b->start_ms = now_ms;
    return 0;
out_release_pool:
    pool_release(&b->pool);
out_free_scratch:
    free(b->scratch);
    memset(b, 0, sizeof(*b));
    return rc;
}

void broker_release(struct broker *b)
{
    lease_table_release(&b->leases);
    prefix_release(&b->prefix);
    pool_release(&b->pool);
    free(b->scratch);
    memset(b, 0, sizeof(*b));
}

uint64_t broker_lease_end(struct broker *b, struct lease *l)
{
    uint64_t refs = l->n_refs;
    uint32_t bk;
    for (struct lease_seq *s = lease_seq_first(l, &bk), *nx; s; s = nx) {
        nx = lease_seq_next(l, s, &bk);
        pool_unref_seq(&b->pool, s->pages, s->n);
        lease_seq_drop(l, s);
    }
    lease_free(&b->leases, l);
    return refs;
}

uint32_t broker_expire(struct broker *b, uint64_t now_ms)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < BROKER_LEASES_MAX; i++) {
        struct lease *l = b->leases.slot[i];
        if (!l || now_ms - l->last_ms < b->lease_timeout_ms)
            continue;
        uint64_t num = l->num;
        char client[sizeof(l->client)];
        uint32_t pid = l->pid;
        memcpy(client, l->client, sizeof(client));
        uint64_t refs = broker_lease_end(b, l);
        log_warn("lease #%llu of '%s' (pid %u) expired after %u ms of silence: %llu page refs "
                 "released",
                 (unsigned long long)num, client, pid, b->lease_timeout_ms,
                 (unsigned long long)refs);
        b->leases_expired++;
        n++;
    }
    return n;
}

/* ---- request handlers: each returns 0 (reply written) or an error code, with msg
 * filled, and leaves every structure as it was on error. ---------------------------- */

struct hctx {
    struct broker *b;
    const struct broker_req *q;
    const struct lease *lease;      /* set once get_lease found it (for the refusal log) */
    uint64_t now_ms;
    struct wbuf *w;
    char msg[WIRE_ERR_LEN];
};

static int hfail(struct hctx *h, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int hfail(struct hctx *h, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->msg, sizeof(h->msg), fmt, ap);
    va_end(ap);
    return code;
}

static int get_lease(struct hctx *h, struct lease **out)
{
    /* The id is a capability (lease.h): an unknown one is refused without saying more. */
    struct lease *l = lease_find(&h->b->leases, h->q->lease);
    if (!l)
        return hfail(h, KVD_ENOTFOUND, "no such lease (expired, detached or never attached)");
    l->last_ms = h->now_ms;
    h->lease = l;
    *out = l;
    return 0;
}

static int h_attach(struct hctx *h)
{
    struct lease *l = NULL;
    int rc = pool_desc_check(&h->b->desc, &h->q->expect, h->msg, sizeof(h->msg));
    if (rc)
        return rc;
    if ((rc = lease_new(&h->b->leases, h->q->client, h->q->pid, h->now_ms, &l)))
        return hfail(h, rc, "cannot create a lease: %s (limit %d leases)", kvd_strerror(rc),
                     BROKER_LEASES_MAX);
    log_info("lease #%llu attached by '%s' (pid %u)", (unsigned long long)l->num, l->client,
             l->pid);
    return broker_rep_attach_encode(h->w, l->id, h->b->lease_timeout_ms, &h->b->desc);
}

static int h_heartbeat(struct hctx *h)
{
    struct lease *l = NULL;
    int rc = get_lease(h, &l);
    return rc ? rc : broker_rep_ok_encode(h->w, 0);
}

static int h_detach(struct hctx *h)
{
    struct lease *l = NULL;
    int rc = get_lease(h, &l);
    if (rc)
        return rc;
    uint64_t num = l->num, refs = broker_lease_end(h->b, l);
    h->lease = NULL;
    log_info("lease #%llu detached: %llu page refs released", (unsigned long long)num,
             (unsigned long long)refs);
    return broker_rep_ok_encode(h->w, refs);
}

static int h_alloc(struct hctx *h)
{
    struct broker *b = h->b;
    struct lease *l = NULL;
    int rc = get_lease(h, &l);
    if (rc)
        return rc;
    struct lease_seq *s = lease_seq_find(l, h->q->seq);
    bool created = false;
    if (s && (uint64_t)s->n + h->q->n > BROKER_SEQ_PAGES_MAX)
        return hfail(h, KVD_EMSG, "seq %llu would hold %llu pages, limit %d",
                     (unsigned long long)h->q->seq, (unsigned long long)s->n + h->q->n,
                     BROKER_SEQ_PAGES_MAX);
    if ((rc = pool_alloc(&b->pool, h->q->n, b->scratch)))
        return hfail(h, rc, "%u pages wanted, %u free and %u cached of %u", h->q->n,
                     pool_count_free(&b->pool), pool_count_cached(&b->pool), b->pool.n_pages);
    if (!s) {
        s = lease_seq_get(l, h->q->seq, &rc);
        created = true;
    }
    if (!rc)
        rc = lease_seq_push(l, s, b->scratch, h->q->n);
    if (rc) {
        pool_unref_seq(&b->pool, b->scratch, h->q->n);
        if (created && s)
            lease_seq_drop(l, s);
        return hfail(h, rc, "cannot record pages of seq %llu: %s", (unsigned long long)h->q->seq,
                     kvd_strerror(rc));
    }
    return broker_rep_pages_encode(h->w, b->scratch, h->q->n);
}

static int h_free(struct hctx *h)
{
    struct lease *l = NULL;
    int rc = get_lease(h, &l);
    if (rc)
        return rc;
    struct lease_seq *s = lease_seq_find(l, h->q->seq);
    uint64_t n = s ? s->n : 0;
    if (s) {
        pool_unref_seq(&h->b->pool, s->pages, s->n);
        lease_seq_drop(l, s);
    }
    return broker_rep_ok_encode(h->w, n);
}

static int h_lookup(struct hctx *h)
{
    struct broker *b = h->b;
    struct lease *l = NULL;
    int rc = get_lease(h, &l);
    if (rc)
        return rc;
    struct lease_seq *s = lease_seq_find(l, h->q->seq);
    if (s && s->n)
        return hfail(h, KVD_EBUSY, "seq %llu already holds %u pages; lookup must come first",
                     (unsigned long long)h->q->seq, s->n);
    uint32_t k = prefix_match(&b->prefix, h->q->hashes, (uint32_t)h->q->n_hashes, b->scratch);
    if (k == 0)
        return broker_rep_pages_encode(h->w, NULL, 0);
    if (!s && !(s = lease_seq_get(l, h->q->seq, &rc)))
        return hfail(h, rc, "cannot create seq %llu: %s", (unsigned long long)h->q->seq,
                     kvd_strerror(rc));
    if ((rc = lease_seq_push(l, s, b->scratch, k))) {
        lease_seq_drop(l, s);
        return hfail(h, rc, "cannot record pages of seq %llu: %s", (unsigned long long)h->q->seq,
                     kvd_strerror(rc));
    }
    for (uint32_t i = 0; i < k; i++) {
        rc = pool_ref(&b->pool, b->scratch[i]);
        KVD_BUG_ON(rc != 0); /* indexed pages are used or cached; refs < 2^32 */
    }
    return broker_rep_pages_encode(h->w, b->scratch, k);
}

static int h_commit(struct hctx *h)
{
    struct broker *b = h->b;
    const struct broker_req *q = h->q;
    struct lease *l = NULL;
    int rc = get_lease(h, &l);
    if (rc)
        return rc;
    struct lease_seq *s = lease_seq_find(l, q->seq);
    uint32_t have = s ? s->n : 0;
    if ((uint64_t)q->block + q->n_hashes > have)
        return hfail(h, KVD_ENOTFOUND, "blocks %u..%llu of seq %llu: the seq holds %u pages",
                     q->block, (unsigned long long)(q->block + q->n_hashes - 1),
                     (unsigned long long)q->seq, have);
    /* Validate everything before changing anything. */
    for (size_t i = 0; i < q->n_hashes; i++) {
        uint32_t page = s->pages[q->block + i];
        if (prefix_page_has(&b->prefix, page) &&
            memcmp(b->prefix.hash[page].b, q->hashes[i].b, BROKER_HASH_BYTES) != 0)
            return hfail(h, KVD_EMSG, "block %zu of seq %llu (page %u) is already indexed "
                                      "under another hash",
                         q->block + i, (unsigned long long)q->seq, page);
    }
    uint64_t added = 0;
    for (size_t i = 0; i < q->n_hashes; i++) {
        uint32_t page = s->pages[q->block + i];
        if (prefix_page_has(&b->prefix, page))
            continue; /* same hash, committed before */
        rc = prefix_insert(&b->prefix, &q->hashes[i], page);
        if (rc == -EEXIST)
            continue; /* another page holds this block's KV: it stays the indexed one */
        KVD_BUG_ON(rc != 0);
        rc = pool_set_indexed(&b->pool, page);
        KVD_BUG_ON(rc != 0);
        added++;
    }
    return broker_rep_ok_encode(h->w, added);
}

static int h_stats(struct hctx *h)
{
    struct broker_stats s;
    broker_stats_fill(h->b, h->now_ms, &s);
    return broker_rep_stats_encode(h->w, &s);
}

static int h_dump(struct hctx *h)
{
    struct broker *b = h->b;
    uint32_t total = b->pool.n_pages, start = h->q->dump_start;
    uint32_t n = start >= total ? 0 : total - start;
    if (n > h->q->dump_max)
        n = h->q->dump_max;
    struct broker_dump_page *dp = n ? calloc(n, sizeof(*dp)) : NULL;
    if (n && !dp)
        return hfail(h, -ENOMEM, "out of memory for a dump of %u pages", n);
    for (uint32_t i = 0; i < n; i++) {
        const struct pool_page *pg = &b->pool.pages[start + i];
        dp[i].page = start + i;
        dp[i].state = pg->state == POOL_PAGE_USED     ? BROKER_PAGE_USED
                      : pg->state == POOL_PAGE_CACHED ? BROKER_PAGE_CACHED
                                                      : BROKER_PAGE_FREE;
        dp[i].refcnt = pg->refcnt;
        dp[i].indexed = pg->indexed;
    }
    /* Owners: one pass over every sequence's pages (O(total refs)). */
    for (uint32_t li = 0; n && li < BROKER_LEASES_MAX; li++) {
        const struct lease *l = b->leases.slot[li];
        uint32_t bk;
        for (const struct lease_seq *s = l ? lease_seq_first(l, &bk) : NULL; s;
             s = lease_seq_next(l, s, &bk))
            for (uint32_t k = 0; k < s->n; k++) {
                uint32_t p = s->pages[k];
                if (p < start || p - start >= n)
                    continue;
                struct broker_dump_page *d = &dp[p - start];
                if (d->n_owners < BROKER_DUMP_OWNERS_MAX)
                    d->owners[d->n_owners++] = (struct broker_dump_owner){l->num, s->id};
            }
    }
    broker_rep_dump_begin(h->w, total, start, n);
    for (uint32_t i = 0; i < n; i++)
        broker_rep_dump_page(h->w, &dp[i]);
    free(dp);
    return 0;
}

static int h_evict_cached(struct hctx *h)
{
    uint32_t n = pool_evict_cached(&h->b->pool, UINT32_MAX);
    log_info("evicted %u cached pages on request", n);
    return broker_rep_ok_encode(h->w, n);
}

typedef int (*handler_fn)(struct hctx *h);
static const handler_fn handlers[BROKER_REQ_COUNT_] = {
    [BROKER_REQ_ATTACH] = h_attach,     [BROKER_REQ_HEARTBEAT] = h_heartbeat,
    [BROKER_REQ_DETACH] = h_detach,     [BROKER_REQ_ALLOC] = h_alloc,
    [BROKER_REQ_FREE] = h_free,         [BROKER_REQ_LOOKUP] = h_lookup,
    [BROKER_REQ_COMMIT] = h_commit,     [BROKER_REQ_STATS] = h_stats,
    [BROKER_REQ_DUMP] = h_dump,         [BROKER_REQ_EVICT_CACHED] = h_evict_cached,
};

int broker_handle(struct broker *b, const void *msg, size_t len, uint64_t now_ms,
                  struct wbuf *reply)
{
    struct hctx h = {.b = b, .now_ms = now_ms, .w = reply, .msg = ""};
    struct wmsg m;
    struct broker_req q;
    b->requests++;
    memset(&m, 0, sizeof(m));
    int rc = broker_msg_precheck(msg, len, BROKER_REQ_BYTES_MAX, h.msg);
    if (!rc)
        rc = wmsg_parse(&m, msg, len, h.msg);
    if (!rc) {
        rc = broker_req_decode(&m, &q, h.msg);
        if (!rc) {
            h.q = &q;
            rc = handlers[q.type](&h);
            if (rc)
                log_debug("%s from lease #%llu refused: %s: %s", broker_req_name(q.type),
                          h.lease ? (unsigned long long)h.lease->num : 0ull, kvd_errname(rc),
                          h.msg);
            broker_req_release(&q);
        }
    }
    wmsg_release(&m);
    if (rc) {
        if (!h.msg[0])
            snprintf(h.msg, sizeof(h.msg), "%s", kvd_strerror(rc));
        msgpack_sbuffer_clear(&reply->sb);
        wire_error_reply(reply, rc, h.msg);
        b->errors++;
    }
    return rc;
}

int broker_adopt_cached(struct broker *b, const struct broker_hash *h, uint32_t page)
{
    if (page >= b->pool.n_pages || b->pool.pages[page].state != POOL_PAGE_FREE)
        return -EINVAL;
    int rc = prefix_insert(&b->prefix, h, page);
    if (rc)
        return rc;
    rc = pool_adopt_cached(&b->pool, page);
    KVD_BUG_ON(rc != 0);
    return 0;
}

void broker_stats_fill(const struct broker *b, uint64_t now_ms, struct broker_stats *s)
{
    memset(s, 0, sizeof(*s));
    const struct pool_desc *d = &b->desc;
    const struct kv_dtype_info *dt = kv_dtype_get(d->geom.kv_dtype);
    s->pool_id = d->pool_id;
    s->epoch = d->epoch;
    s->model_fp = d->model_fp;
    snprintf(s->backend, sizeof(s->backend), "%s", mem_backend_name(d->backend));
    snprintf(s->kv_dtype, sizeof(s->kv_dtype), "%s", dt ? dt->name : "?");
    s->n_layers = d->geom.n_layers;
    s->n_kv_heads = d->geom.n_kv_heads;
    s->head_dim = d->geom.head_dim;
    s->block_size = d->geom.block_size;
    s->page_bytes = d->geom.page_bytes;
    s->pool_bytes = d->pool_bytes;
    s->pages_total = b->pool.n_pages;
    s->pages_free = pool_count_free(&b->pool);
    s->pages_used = pool_count_used(&b->pool);
    s->pages_cached = pool_count_cached(&b->pool);
    s->prefix_entries = b->prefix.n_entries;
    s->prefix_query_blocks = b->prefix.st.query_blocks;
    s->prefix_hit_blocks = b->prefix.st.hit_blocks;
    s->prefix_query_tokens = b->prefix.st.query_blocks * d->geom.block_size;
    s->prefix_hit_tokens = b->prefix.st.hit_blocks * d->geom.block_size;
    s->prefix_evictions = b->prefix.st.evictions;
    s->leases = b->leases.n;
    for (uint32_t i = 0; i < BROKER_LEASES_MAX; i++)
        if (b->leases.slot[i])
            s->seqs += b->leases.slot[i]->n_seqs;
    s->requests = b->requests;
    s->errors = b->errors;
    s->leases_expired = b->leases_expired;
    s->uptime_ms = now_ms - b->start_ms;
}

int broker_check(const struct broker *b)
{
    int rc = pool_check(&b->pool);
    if (!rc)
        rc = prefix_check(&b->prefix);
    if (!rc)
        rc = lease_table_check(&b->leases);
    if (rc)
        return rc;
    uint32_t n = b->pool.n_pages;
    uint32_t *refs = calloc(n, sizeof(*refs));
    if (!refs)
        return -ENOMEM;
    for (uint32_t li = 0; li < BROKER_LEASES_MAX; li++) {
        const struct lease *l = b->leases.slot[li];
        uint32_t bk;
        uint64_t lease_refs = 0;
        for (const struct lease_seq *s = l ? lease_seq_first(l, &bk) : NULL; s;
             s = lease_seq_next(l, s, &bk)) {
            for (uint32_t k = 0; k < s->n; k++)
                refs[s->pages[k]]++;
            lease_refs += s->n;
        }
        if (l && lease_refs != l->n_refs) {
            log_err("broker check: lease #%llu counts %llu refs, its seqs hold %llu",
                    (unsigned long long)l->num, (unsigned long long)l->n_refs,
                    (unsigned long long)lease_refs);
            rc = -EINVAL;
        }
    }
    for (uint32_t p = 0; !rc && p < n; p++) {
        if (refs[p] != b->pool.pages[p].refcnt) {
            log_err("broker check: page %u has refcnt %u, sequences hold %u refs", p,
                    b->pool.pages[p].refcnt, refs[p]);
            rc = -EINVAL;
        } else if (b->pool.pages[p].indexed != prefix_page_has(&b->prefix, p)) {
            log_err("broker check: page %u indexed flag %d disagrees with the index", p,
                    b->pool.pages[p].indexed);
            rc = -EINVAL;
        }
    }
    free(refs);
    return rc;
}
