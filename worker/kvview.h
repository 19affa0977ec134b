/* kvview.h — how the worker addresses K/V: one view over a pool plus block tables.
 *
 * A kv_view describes memory laid out as common/kvlayout.h pages (layout v1):
 * page p starts at base + (p / pages_per_chunk) * chunk_bytes
 *                       + (p % pages_per_chunk) * page_bytes,
 * and inside a page (layer, kv, head) owns block_size contiguous slot vectors of
 * head_dim elements. A sequence's position t lives in page bt[t / block_size], slot
 * t % block_size. The ONE address helper is kv_row(); attention walks a sequence block
 * by block and reads the slot rows in place (no gather into a contiguous copy).
 *
 * A contiguous KV cache is the special case of one page per sequence with block_size =
 * the sequence capacity (kv_view_contiguous): the same forward code then runs
 * non-paged attention, which is the baseline bench/worker-bench compares against.
 * The view does not own the memory. Any thread may read a view.
 */
#ifndef KVD_WORKER_KVVIEW_H
#define KVD_WORKER_KVVIEW_H

#include "common/kvlayout.h"
#include "common/mem.h"

#include <stddef.h>
#include <stdint.h>

struct kv_view {
    uint8_t *base;            /* start of the pool in this process */
    size_t page_bytes;        /* bytes per page */
    size_t chunk_bytes;       /* bytes per chunk (pages never straddle chunks) */
    uint32_t pages_per_chunk; /* pages per chunk */
    uint32_t num_pages;       /* valid page ids are < num_pages */
    uint32_t n_layers;
    uint32_t n_kv_heads;
    uint32_t head_dim;        /* elements per K or V vector */
    uint32_t block_size;      /* tokens (slots) per page */
    uint32_t kv_dtype;        /* enum kv_dtype: KV_DTYPE_F32 or KV_DTYPE_F16 */
    uint32_t elem_bytes;      /* 4 or 2 */
};

/* View over a mapped host pool (one or more back-to-back chunks). 0 or -ENOTSUP for a
 * device pool or a kv dtype the CPU path does not compute with. */
static inline int kv_view_from_pool(struct kv_view *v, const struct mem_pool *mp)
{
    const struct pool_desc *d = &mp->desc;
    if (mp->device || !mp->base ||
        (d->geom.kv_dtype != KV_DTYPE_F32 && d->geom.kv_dtype != KV_DTYPE_F16))
        return -ENOTSUP;
    *v = (struct kv_view){
        .base = mp->base,
        .page_bytes = d->geom.page_bytes,
        .chunk_bytes = d->chunk_bytes,
        .pages_per_chunk = d->pages_per_chunk,
        .num_pages = d->num_pages,
        .n_layers = d->geom.n_layers,
        .n_kv_heads = d->geom.n_kv_heads,
        .head_dim = d->geom.head_dim,
        .block_size = d->geom.block_size,
        .kv_dtype = d->geom.kv_dtype,
        .elem_bytes = d->geom.kv_dtype == KV_DTYPE_F16 ? 2 : 4,
    };
    return 0;
}

/* View over one caller-allocated region of num_pages pages of geometry g (tests). */
static inline void kv_view_from_region(struct kv_view *v, void *base, const struct kv_geom *g,
                                       uint32_t num_pages)
{
    *v = (struct kv_view){
        .base = base,
        .page_bytes = g->page_bytes,
        .chunk_bytes = g->page_bytes * num_pages,
        .pages_per_chunk = num_pages,
        .num_pages = num_pages,
        .n_layers = g->n_layers,
        .n_kv_heads = g->n_kv_heads,
        .head_dim = g->head_dim,
        .block_size = g->block_size,
        .kv_dtype = g->kv_dtype,
        .elem_bytes = g->kv_dtype == KV_DTYPE_F16 ? 2 : 4,
    };
}

/* Bytes a contiguous cache of n_seqs sequences x capacity tokens needs. */
static inline size_t kv_view_contiguous_bytes(uint32_t n_layers, uint32_t n_kv_heads,
                                              uint32_t head_dim, uint32_t kv_dtype,
                                              uint32_t capacity, uint32_t n_seqs)
{
    size_t eb = kv_dtype == KV_DTYPE_F16 ? 2 : 4;
    return (size_t)n_layers * 2 * n_kv_heads * capacity * head_dim * eb * n_seqs;
}

/* Contiguous layout: sequence i owns "page" i holding capacity positions; block table
 * of sequence i is {i}. (block_size here may exceed KV_BLOCK_TOKENS_MAX.) */
static inline void kv_view_contiguous(struct kv_view *v, void *base, uint32_t n_layers,
                                      uint32_t n_kv_heads, uint32_t head_dim,
                                      uint32_t kv_dtype, uint32_t capacity, uint32_t n_seqs)
{
    size_t page = kv_view_contiguous_bytes(n_layers, n_kv_heads, head_dim, kv_dtype, capacity, 1);
    *v = (struct kv_view){
        .base = base,
        .page_bytes = page,
        .chunk_bytes = page * n_seqs,
        .pages_per_chunk = n_seqs,
        .num_pages = n_seqs,
        .n_layers = n_layers,
        .n_kv_heads = n_kv_heads,
        .head_dim = head_dim,
        .block_size = capacity,
        .kv_dtype = kv_dtype,
        .elem_bytes = kv_dtype == KV_DTYPE_F16 ? 2 : 4,
    };
}

/* Address of slot 0 of (layer, kv, head) in page: block_size rows of head_dim elements
 * follow contiguously. page < num_pages (checked before the hot loop). */
static inline uint8_t *kv_row(const struct kv_view *v, uint32_t page, uint32_t layer,
                              uint32_t kv, uint32_t head)
{
    size_t page_off = (size_t)(page / v->pages_per_chunk) * v->chunk_bytes +
                      (size_t)(page % v->pages_per_chunk) * v->page_bytes;
    size_t elem = ((((size_t)layer * 2 + kv) * v->n_kv_heads + head) * v->block_size) *
                  v->head_dim;
    return v->base + page_off + elem * v->elem_bytes;
}

#endif
