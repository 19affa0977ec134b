#include "common/pool_attach.h"

#include "common/err.h"
#include "common/fdpass.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define PA_HDR_BYTES 8 /* magic + version */

struct pa_cursor {
    uint8_t *p;
    const uint8_t *end;
    bool short_read;
};

static void put32(struct pa_cursor *c, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        *c->p++ = (uint8_t)(v >> (8 * i));
}

static void put64(struct pa_cursor *c, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        *c->p++ = (uint8_t)(v >> (8 * i));
}

static uint64_t get_n(struct pa_cursor *c, int bytes)
{
    if (c->end - c->p < bytes) {
        c->short_read = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)*c->p++ << (8 * i);
    return v;
}

size_t pool_desc_encode(const struct pool_desc *d, uint8_t *buf, size_t cap)
{
    if (cap < POOL_DESC_WIRE_BYTES)
        return 0;
    struct pa_cursor c = {buf, buf + cap, false};
    put64(&c, d->pool_id);
    put32(&c, d->epoch);
    put64(&c, d->model_fp);
    put32(&c, d->geom.n_layers);
    put32(&c, d->geom.n_kv_heads);
    put32(&c, d->geom.head_dim);
    put32(&c, d->geom.block_size);
    put32(&c, d->geom.kv_dtype);
    put64(&c, d->geom.data_bytes);
    put64(&c, d->geom.scale_bytes);
    put64(&c, d->geom.page_bytes);
    put32(&c, d->layout_version);
    put32(&c, d->backend);
    put32(&c, d->num_pages);
    put64(&c, d->pool_bytes);
    put32(&c, d->n_chunks);
    put64(&c, d->chunk_bytes);
    put32(&c, d->pages_per_chunk);
    put32(&c, (uint32_t)d->cuda_device);
    return (size_t)(c.p - buf);
}

int pool_desc_decode(struct pool_desc *out, const uint8_t *buf, size_t len)
{
    struct pa_cursor c = {(uint8_t *)buf, buf + len, false};
    struct pool_desc d;
    memset(&d, 0, sizeof(d));
    d.pool_id = get_n(&c, 8);
    d.epoch = (uint32_t)get_n(&c, 4);
    d.model_fp = get_n(&c, 8);
    d.geom.n_layers = (uint32_t)get_n(&c, 4);
    d.geom.n_kv_heads = (uint32_t)get_n(&c, 4);
    d.geom.head_dim = (uint32_t)get_n(&c, 4);
    d.geom.block_size = (uint32_t)get_n(&c, 4);
    d.geom.kv_dtype = (uint32_t)get_n(&c, 4);
    d.geom.data_bytes = get_n(&c, 8);
    d.geom.scale_bytes = get_n(&c, 8);
    d.geom.page_bytes = get_n(&c, 8);
    d.layout_version = (uint32_t)get_n(&c, 4);
    d.backend = (uint32_t)get_n(&c, 4);
    d.num_pages = (uint32_t)get_n(&c, 4);
    d.pool_bytes = get_n(&c, 8);
    d.n_chunks = (uint32_t)get_n(&c, 4);
    d.chunk_bytes = get_n(&c, 8);
    d.pages_per_chunk = (uint32_t)get_n(&c, 4);
    d.cuda_device = (int32_t)(uint32_t)get_n(&c, 4);
    if (c.short_read || d.backend >= MEM_BACKEND_COUNT_ || d.n_chunks > MEM_CHUNKS_MAX ||
        d.num_pages > MEM_POOL_PAGES_MAX || d.geom.kv_dtype >= KV_DTYPE_COUNT_)
        return KVD_EMSG;
    *out = d;
    return 0;
}

int pool_attach_serve(int conn, const struct mem_pool *mp)
{
    int rc = fdpass_peer_check(conn, NULL);
    if (rc)
        return rc;
    fdpass_set_timeout(conn, FDPASS_TIMEOUT_MS);
    size_t cap = PA_HDR_BYTES + POOL_DESC_WIRE_BYTES + 4 + mp->blob_len;
    if (cap > FDPASS_FRAME_MAX)
        return -EMSGSIZE;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return -ENOMEM;
    struct pa_cursor c = {buf, buf + cap, false};
    put32(&c, POOL_ATTACH_MAGIC);
    put32(&c, POOL_ATTACH_VERSION);
    c.p += pool_desc_encode(&mp->desc, c.p, POOL_DESC_WIRE_BYTES);
    put32(&c, (uint32_t)mp->blob_len);
    if (mp->blob_len)
        memcpy(c.p, mp->blob, mp->blob_len);
    rc = fdpass_send(conn, buf, cap, mp->fds, mp->n_fds);
    free(buf);
    return rc;
}

static int connect_unix(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int rc = -errno;
        close(s);
        return rc;
    }
    return s;
}

int pool_attach(const char *fd_sock_path, const struct pool_desc *expect, struct mem_pool *out)
{
    int fds[FDPASS_FDS_MAX];
    size_t n_fds = 0, len = 0;
    uint8_t *buf = NULL;
    char why[160];
    int rc, s = connect_unix(fd_sock_path);
    mem_pool_init(out);
    if (s < 0) { /* callers retry these while the broker starts: they log the last one */
        if (s == -ENOENT || s == -ECONNREFUSED)
            log_debug("cannot attach pool '%s' yet: %s", fd_sock_path, kvd_strerror(s));
        else
            log_err("cannot attach pool '%s': %s", fd_sock_path, kvd_strerror(s));
        return s;
    }
    fdpass_set_timeout(s, FDPASS_TIMEOUT_MS);
    if ((rc = fdpass_peer_check(s, NULL))) {
        log_err("cannot attach pool '%s': broker runs as another user", fd_sock_path);
        goto out_close_sock;
    }
    if (!(buf = malloc(FDPASS_FRAME_MAX))) {
        rc = -ENOMEM;
        goto out_close_sock;
    }
    if ((rc = fdpass_recv(s, buf, FDPASS_FRAME_MAX, &len, fds, FDPASS_FDS_MAX, &n_fds))) {
        log_err("cannot attach pool '%s': %s", fd_sock_path, kvd_strerror(rc));
        goto out_free;
    }
    struct pa_cursor c = {buf, buf + len, false};
    struct pool_desc d;
    uint32_t magic = (uint32_t)get_n(&c, 4), ver = (uint32_t)get_n(&c, 4);
    if (c.short_read || magic != POOL_ATTACH_MAGIC || ver != POOL_ATTACH_VERSION ||
        pool_desc_decode(&d, c.p, (size_t)(c.end - c.p))) {
        log_err("cannot attach pool '%s': bad hand-over frame (magic %08x, version %u)",
                fd_sock_path, magic, ver);
        rc = KVD_EMSG;
        goto out_close_fds;
    }
    c.p += POOL_DESC_WIRE_BYTES;
    uint32_t blob_len = (uint32_t)get_n(&c, 4);
    if (c.short_read || blob_len != (size_t)(c.end - c.p)) {
        log_err("cannot attach pool '%s': hand-over blob of %u bytes is truncated", fd_sock_path,
                blob_len);
        rc = KVD_EMSG;
        goto out_close_fds;
    }
    if ((rc = pool_desc_check(&d, expect, why, sizeof(why)))) {
        log_err("cannot attach pool '%s': descriptor mismatch: %s (pool %016llx epoch %u)",
                fd_sock_path, why, (unsigned long long)d.pool_id, d.epoch);
        goto out_close_fds;
    }
    rc = mem_pool_import(out, &d, fds, (uint32_t)n_fds, c.p, blob_len); /* closes fds */
    if (rc)
        log_err("cannot attach pool '%s': %s backend import failed: %s", fd_sock_path,
                mem_backend_name(d.backend), kvd_strerror(rc));
    n_fds = 0;
out_close_fds:
    for (size_t i = 0; i < n_fds; i++)
        close(fds[i]);
out_free:
    free(buf);
out_close_sock:
    close(s);
    return rc;
}
