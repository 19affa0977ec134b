/* kvlayout.h — the KV pool's geometry and the byte layout inside one page.
 *
 * A page is self-contained (DESIGN.md principle 3): block_size tokens x all layers x
 * K and V, plus the quantization scales of those values. Layout version 1:
 *
 *   page = data region, then scale region, then padding to KV_PAGE_ALIGN bytes
 *   data region, in this order of dimensions (outermost first):
 *       [layer][kv: 0 = K, 1 = V][kv_head][slot (token within the block)][head_dim]
 *     element (l, kv, h, s, d) is at element index
 *       (((l * 2 + kv) * n_kv_heads + h) * block_size + s) * head_dim + d
 *     so one head's keys for all slots of a block are contiguous: attention reads
 *     block_size x head_dim values in a row.
 *   scale region (only for dtypes with scales_per_vector > 0): one float32 scale per
 *     (layer, kv, head, slot) vector, same index order without head_dim.
 *   Elements are stored in the page's kv dtype (f32: IEEE binary32, f16: IEEE binary16,
 *   little-endian).
 *
 * page_bytes = round_up(data_bytes + scale_bytes, KV_PAGE_ALIGN). Anything that moves a
 * byte inside a page bumps KV_LAYOUT_VERSION; the version is part of the pool
 * descriptor checked at every attach. Header-only; any thread.
 */
#ifndef KVD_COMMON_KVLAYOUT_H
#define KVD_COMMON_KVLAYOUT_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__cplusplus) && !defined(_Static_assert)
#define _Static_assert static_assert /* nvcc compiles .cu files as C++ */
#endif

#define KV_LAYOUT_VERSION 1
#define KV_PAGE_ALIGN 256          /* bytes; page starts stay aligned for SIMD and GPU loads */
#define KV_BLOCK_TOKENS_MAX 1024   /* tokens per page; slots fit in 16 bits */
#define KV_LAYERS_MAX 512
#define KV_HEADS_MAX 1024
#define KV_HEAD_DIM_MAX 1024
_Static_assert(KV_BLOCK_TOKENS_MAX <= UINT16_MAX, "slot index is kept in 16 bits");

/* The list of KV element formats. Values are stable: they travel in pool descriptors. */
enum kv_dtype {
    KV_DTYPE_F32 = 0,
    KV_DTYPE_F16 = 1,
    KV_DTYPE_COUNT_ /* quantized formats (fp8, int8, q4, q2) are appended here */
};

struct kv_dtype_info {
    const char *name;          /* as on the command line: "f32", "f16" */
    uint32_t bits_per_value;   /* storage bits per element */
    uint32_t scales_per_vector;/* float32 scales per (layer, kv, head, slot) vector */
};

static const struct kv_dtype_info kv_dtype_table[KV_DTYPE_COUNT_] = {
    [KV_DTYPE_F32] = {"f32", 32, 0},
    [KV_DTYPE_F16] = {"f16", 16, 0},
};

static inline const struct kv_dtype_info *kv_dtype_get(uint32_t dt)
{
    return dt < KV_DTYPE_COUNT_ ? &kv_dtype_table[dt] : NULL;
}

/* Parses a dtype name; returns 0 or -EINVAL. */
static inline int kv_dtype_parse(const char *s, enum kv_dtype *out)
{
    for (uint32_t i = 0; i < KV_DTYPE_COUNT_; i++)
        if (strcmp(s, kv_dtype_table[i].name) == 0) {
            *out = (enum kv_dtype)i;
            return 0;
        }
    return -EINVAL;
}

/* The model's shape as far as KV is concerned, plus the page format. */
struct kv_geom {
    uint32_t n_layers;
    uint32_t n_kv_heads;
    uint32_t head_dim;
    uint32_t block_size;   /* tokens per page */
    uint32_t kv_dtype;     /* enum kv_dtype */
    uint64_t data_bytes;   /* derived: K/V element bytes per page */
    uint64_t scale_bytes;  /* derived: scale bytes per page */
    uint64_t page_bytes;   /* derived: data + scales, rounded up to KV_PAGE_ALIGN */
};

/* Fills the derived fields. Returns 0, or -EINVAL (g untouched) on a zero or
 * out-of-range dimension or an unknown dtype. */
static inline int kv_geom_init(struct kv_geom *g, uint32_t n_layers, uint32_t n_kv_heads,
                               uint32_t head_dim, uint32_t block_size, uint32_t kv_dtype)
{
    const struct kv_dtype_info *dt = kv_dtype_get(kv_dtype);
    if (!dt || n_layers == 0 || n_layers > KV_LAYERS_MAX || n_kv_heads == 0 ||
        n_kv_heads > KV_HEADS_MAX || head_dim == 0 || head_dim > KV_HEAD_DIM_MAX ||
        block_size == 0 || block_size > KV_BLOCK_TOKENS_MAX)
        return -EINVAL;
    uint64_t vectors = (uint64_t)n_layers * 2 * n_kv_heads * block_size;
    uint64_t data_bits = vectors * head_dim * dt->bits_per_value;
    struct kv_geom r = {n_layers, n_kv_heads, head_dim, block_size, kv_dtype, 0, 0, 0};
    r.data_bytes = (data_bits + 7) / 8;
    r.scale_bytes = vectors * dt->scales_per_vector * sizeof(float);
    r.page_bytes = (r.data_bytes + r.scale_bytes + KV_PAGE_ALIGN - 1) / KV_PAGE_ALIGN *
                   KV_PAGE_ALIGN;
    *g = r;
    return 0;
}

/* Element index of (layer, kv, head, slot, 0) inside a page's data region. */
static inline size_t kv_elem_index(const struct kv_geom *g, uint32_t layer, uint32_t kv,
                                   uint32_t head, uint32_t slot)
{
    return ((((size_t)layer * 2 + kv) * g->n_kv_heads + head) * g->block_size + slot) *
           g->head_dim;
}

/* Byte offset of page `page` from the pool base. size_t: pools exceed 4 GiB. */
static inline size_t kv_page_offset(const struct kv_geom *g, uint32_t page)
{
    return (size_t)page * (size_t)g->page_bytes;
}

/* Index of the float32 scale of vector (layer, kv, head, slot) in the scale region. */
static inline size_t kv_scale_index(const struct kv_geom *g, uint32_t layer, uint32_t kv,
                                    uint32_t head, uint32_t slot)
{
    return (((size_t)layer * 2 + kv) * g->n_kv_heads + head) * g->block_size + slot;
}

#endif
