/* mem.c — backend-independent parts of common/mem.h: names, chunk layout, descriptor
 * check, and dispatch to the host or cuda backend. */
#include "common/mem.h"

#include "common/err.h"
#include "common/log.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *const backend_names[MEM_BACKEND_COUNT_] = {
    [MEM_BACKEND_ANY] = "any",
    [MEM_BACKEND_HOST] = "host",
    [MEM_BACKEND_CUDA_VMM] = "cuda-vmm",
    [MEM_BACKEND_CUDA_IPC] = "cuda-ipc",
};

const char *mem_backend_name(uint32_t backend)
{
    return backend < MEM_BACKEND_COUNT_ ? backend_names[backend] : "unknown";
}

int mem_backend_parse(const char *s, uint32_t *out)
{
    if (strcmp(s, "cuda") == 0) {
        *out = MEM_BACKEND_CUDA_VMM;
        return 0;
    }
    for (uint32_t i = MEM_BACKEND_HOST; i < MEM_BACKEND_COUNT_; i++)
        if (strcmp(s, backend_names[i]) == 0) {
            *out = i;
            return 0;
        }
    return -EINVAL;
}

int pool_desc_layout(struct pool_desc *d, uint64_t pool_bytes_wanted, uint64_t align,
                     uint32_t n_chunks_wanted)
{
    uint64_t pb = d->geom.page_bytes;
    if (pb == 0 || align == 0)
        return -EINVAL;
    uint64_t pages = pool_bytes_wanted / pb;
    if (pages == 0)
        return -EINVAL;
    if (pages > MEM_POOL_PAGES_MAX)
        pages = MEM_POOL_PAGES_MAX;
    uint64_t chunks = n_chunks_wanted ? n_chunks_wanted : 1;
    if (chunks > MEM_CHUNKS_MAX)
        chunks = MEM_CHUNKS_MAX;
    if (chunks > pages)
        chunks = pages;
    uint64_t ppc = (pages + chunks - 1) / chunks;
    chunks = (pages + ppc - 1) / ppc;
    uint64_t cb = (ppc * pb + align - 1) / align * align;
    d->num_pages = (uint32_t)pages;
    d->n_chunks = (uint32_t)chunks;
    d->pages_per_chunk = (uint32_t)ppc;
    d->chunk_bytes = cb;
    d->pool_bytes = cb * chunks;
    return 0;
}

#define CHECK_FIELD(name, have, want)                                                       \
    do {                                                                                   \
        if ((want) != 0 && (have) != (want)) {                                             \
            if (why && why_cap)                                                            \
                snprintf(why, why_cap, "%s is %llu, expected %llu", name,                  \
                         (unsigned long long)(have), (unsigned long long)(want));          \
            return KVD_EMISMATCH;                                                          \
        }                                                                                  \
    } while (0)

int pool_desc_check(const struct pool_desc *have, const struct pool_desc *expect, char *why,
                    size_t why_cap)
{
    if (why && why_cap)
        why[0] = '\0';
    if (!expect)
        return 0;
    CHECK_FIELD("pool_id", have->pool_id, expect->pool_id);
    CHECK_FIELD("epoch", have->epoch, expect->epoch);
    CHECK_FIELD("model_fp", have->model_fp, expect->model_fp);
    CHECK_FIELD("layout_version", have->layout_version, expect->layout_version);
    CHECK_FIELD("backend", have->backend, expect->backend);
    CHECK_FIELD("num_pages", have->num_pages, expect->num_pages);
    const struct kv_geom *h = &have->geom, *e = &expect->geom;
    CHECK_FIELD("n_layers", h->n_layers, e->n_layers);
    CHECK_FIELD("n_kv_heads", h->n_kv_heads, e->n_kv_heads);
    CHECK_FIELD("head_dim", h->head_dim, e->head_dim);
    CHECK_FIELD("block_size", h->block_size, e->block_size);
    CHECK_FIELD("page_bytes", h->page_bytes, e->page_bytes);
    CHECK_FIELD("data_bytes", h->data_bytes, e->data_bytes);
    CHECK_FIELD("scale_bytes", h->scale_bytes, e->scale_bytes);
    if (e->page_bytes != 0 && h->kv_dtype != e->kv_dtype) {
        const struct kv_dtype_info *hi = kv_dtype_get(h->kv_dtype), *ei = kv_dtype_get(e->kv_dtype);
        if (why && why_cap)
            snprintf(why, why_cap, "kv_dtype is %s, expected %s", hi ? hi->name : "?",
                     ei ? ei->name : "?");
        return KVD_EMISMATCH;
    }
    return 0;
}

void mem_pool_init(struct mem_pool *mp)
{
    memset(mp, 0, sizeof(*mp));
    for (uint32_t i = 0; i < MEM_CHUNKS_MAX; i++)
        mp->fds[i] = -1;
}

/* Structural sanity of a descriptor before anything is mapped from it. */
static int desc_sane(const struct pool_desc *d)
{
    if (d->num_pages == 0 || d->n_chunks == 0 || d->n_chunks > MEM_CHUNKS_MAX ||
        d->pages_per_chunk == 0 || d->geom.page_bytes == 0 ||
        (uint64_t)d->pages_per_chunk * d->geom.page_bytes > d->chunk_bytes ||
        (uint64_t)d->n_chunks * d->pages_per_chunk < d->num_pages ||
        (uint64_t)(d->n_chunks - 1) * d->pages_per_chunk >= d->num_pages ||
        d->pool_bytes != (uint64_t)d->n_chunks * d->chunk_bytes)
        return -EINVAL;
    return 0;
}

int mem_pool_create(struct mem_pool *mp, const struct pool_desc *d)
{
    mem_pool_init(mp);
    if (desc_sane(d))
        return -EINVAL;
    switch (d->backend) {
    case MEM_BACKEND_HOST:
        return mem_host_create(mp, d);
    case MEM_BACKEND_CUDA_VMM:
    case MEM_BACKEND_CUDA_IPC:
        return mem_cuda_create(mp, d);
    default:
        return -EINVAL;
    }
}

int mem_pool_import(struct mem_pool *mp, const struct pool_desc *d, int *fds, uint32_t n_fds,
                    const void *blob, size_t blob_len)
{
    int rc;
    mem_pool_init(mp);
    if (desc_sane(d))
        rc = KVD_EMSG;
    else if (d->backend == MEM_BACKEND_HOST)
        rc = mem_host_import(mp, d, fds, n_fds);
    else if (d->backend == MEM_BACKEND_CUDA_VMM || d->backend == MEM_BACKEND_CUDA_IPC)
        rc = mem_cuda_import(mp, d, fds, n_fds, blob, blob_len);
    else
        rc = KVD_EMSG;
    for (uint32_t i = 0; i < n_fds; i++)
        if (fds[i] >= 0) {
            close(fds[i]);
            fds[i] = -1;
        }
    return rc;
}

void mem_pool_release(struct mem_pool *mp)
{
    if (mp->desc.backend == MEM_BACKEND_HOST)
        mem_host_release(mp);
    else if (mp->desc.backend == MEM_BACKEND_CUDA_VMM || mp->desc.backend == MEM_BACKEND_CUDA_IPC)
        mem_cuda_release(mp);
    mem_pool_init(mp);
}
