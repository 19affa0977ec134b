/* mem.h — the KV page pool's memory: descriptor, mapped pool, and the backend contract.
 *
 * A pool is num_pages pages of desc.geom.page_bytes each (layout: common/kvlayout.h),
 * held in n_chunks chunks of chunk_bytes. Chunk c holds pages [c * pages_per_chunk,
 * (c + 1) * pages_per_chunk); a page never straddles two chunks. Page p lives at
 *     chunk_base(p / pages_per_chunk) + (p % pages_per_chunk) * page_bytes
 * For the host and cuda-vmm backends the chunks are mapped back to back in one address
 * range, so mem_pool_page_offset() from mp->base is valid; the host backend has one
 * chunk, so the offset is also kv_page_offset(). The cuda-ipc fallback maps each chunk
 * separately: use mem_pool_page_ptr(). Offsets, never pointers, cross processes.
 *
 * Backends (one contract, CMake picks the implementations):
 *   host      memfd_create + ftruncate + F_SEAL_SHRINK|F_SEAL_GROW + mmap(MAP_SHARED),
 *             pre-faulted by the creator. One fd. (common/mem_host.c)
 *   cuda-vmm  cuMemCreate chunks with POSIX-fd shareable handles, one fd per chunk;
 *             importers reserve one VA range and map chunk i at i * chunk_bytes.
 *   cuda-ipc  fallback: one cudaMalloc arena per chunk (2 MiB aligned), exported with
 *             cudaIpcGetMemHandle; handles travel as a blob, no fds.
 *             (both cuda: common/mem_cuda.cu, built only when KVD_HAVE_CUDA; without it
 *             the stubs below return -ENOTSUP.)
 *
 * Ownership: the creator (kvd-broker) owns fds and memory; mem_pool_release() unmaps and
 * closes. An importer (worker) owns only its mapping; the fds it received are closed by
 * mem_pool_import() whether it succeeds or not. A failed create/import leaves mp zeroed.
 * Loop thread of the owning process; a mapped pool's pages may be read and written from
 * any thread (page ownership is the broker's business, not this module's).
 */
#ifndef KVD_COMMON_MEM_H
#define KVD_COMMON_MEM_H

#include "common/kvlayout.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MEM_CHUNKS_MAX 240          /* chunks per pool; < SCM_MAX_FD (253): one sendmsg */
#define MEM_CUDA_CHUNK_ALIGN (2u << 20) /* bytes; cudaMalloc arenas and VMM granularity floor */
#define MEM_IPC_HANDLE_BYTES 64     /* sizeof(cudaIpcMemHandle_t) */
#define MEM_POOL_PAGES_MAX (1u << 30) /* pages; page ids are u32, leave headroom */

enum mem_backend {
    MEM_BACKEND_ANY = 0,      /* in an `expect` descriptor: don't check */
    MEM_BACKEND_HOST = 1,
    MEM_BACKEND_CUDA_VMM = 2,
    MEM_BACKEND_CUDA_IPC = 3,
    MEM_BACKEND_COUNT_
};

/* The pool descriptor: what the broker created, checked at every attach.
 * Stable values only (it crosses processes, encoded field by field). */
struct pool_desc {
    uint64_t pool_id;         /* random, chosen at creation */
    uint32_t epoch;           /* bumped when a restarted broker re-adopts the pool */
    uint64_t model_fp;        /* gguf_model_fingerprint() of the model the KV belongs to */
    struct kv_geom geom;      /* layers, kv heads, head dim, block size, dtype, page bytes */
    uint32_t layout_version;  /* KV_LAYOUT_VERSION of the creator */
    uint32_t backend;         /* enum mem_backend */
    uint32_t num_pages;       /* pages in the pool */
    uint64_t pool_bytes;      /* n_chunks * chunk_bytes: bytes mapped */
    uint32_t n_chunks;        /* 1 .. MEM_CHUNKS_MAX */
    uint64_t chunk_bytes;     /* bytes per chunk (cuda: multiple of the granularity) */
    uint32_t pages_per_chunk; /* pages per chunk (the last chunk may hold fewer) */
    int32_t cuda_device;      /* cuda backends: device ordinal; host: -1 */
};

/* A mapped pool (creator or importer). */
struct mem_pool {
    struct pool_desc desc;
    uint8_t *base;                      /* host / cuda-vmm: start of the whole range */
    uint8_t *chunk_base[MEM_CHUNKS_MAX];/* start of each chunk (host address or device ptr) */
    int fds[MEM_CHUNKS_MAX];            /* creator: fds to hand over (-1 when none) */
    uint32_t n_fds;                     /* creator: valid entries in fds */
    uint8_t *blob;                      /* creator, cuda-ipc: n_chunks IPC handles */
    size_t blob_len;                    /* bytes in blob */
    bool owner;                         /* created here (true) or imported (false) */
    bool device;                        /* pages are device memory (cuda backends) */
    void *priv;                         /* backend-private state */
};

const char *mem_backend_name(uint32_t backend);      /* "host", "cuda-vmm", ...; never NULL */
/* Parses "host", "cuda", "cuda-vmm", "cuda-ipc" ("cuda": vmm, ipc as fallback) */
int mem_backend_parse(const char *s, uint32_t *out);

/* Fills d's chunk fields for pool_bytes_wanted bytes of geom pages, rounding chunks up to
 * `align` bytes (1 for host). 0, or -EINVAL (fewer than one page, or too many pages). */
int pool_desc_layout(struct pool_desc *d, uint64_t pool_bytes_wanted, uint64_t align,
                     uint32_t n_chunks_wanted);

/* Compares have against expect; a field left 0 in expect is not checked (backend: ANY).
 * geom: when expect->geom.page_bytes != 0 (filled by kv_geom_init) every geom field
 * including kv_dtype is compared; otherwise each nonzero dimension is compared alone.
 * Returns 0, or KVD_EMISMATCH with why (a line naming field, got, expected) filled. */
int pool_desc_check(const struct pool_desc *have, const struct pool_desc *expect, char *why,
                    size_t why_cap);

/* Byte offset of page from the start of the contiguous range (host, cuda-vmm). */
static inline size_t mem_pool_page_offset(const struct pool_desc *d, uint32_t page)
{
    return (size_t)(page / d->pages_per_chunk) * (size_t)d->chunk_bytes +
           (size_t)(page % d->pages_per_chunk) * (size_t)d->geom.page_bytes;
}

/* Address of page in this process (host pointer or device pointer). page < num_pages. */
static inline void *mem_pool_page_ptr(const struct mem_pool *mp, uint32_t page)
{
    const struct pool_desc *d = &mp->desc;
    return mp->chunk_base[page / d->pages_per_chunk] +
           (size_t)(page % d->pages_per_chunk) * (size_t)d->geom.page_bytes;
}

/* Creates the pool d describes (d's chunk fields from pool_desc_layout) with d->backend.
 * Dispatches to the backend. 0, or a negative code with mp zeroed. */
int mem_pool_create(struct mem_pool *mp, const struct pool_desc *d);
/* Maps a pool another process created, from its fds (closed here in every case) and
 * blob. 0, or a negative code with mp zeroed. */
int mem_pool_import(struct mem_pool *mp, const struct pool_desc *d, int *fds, uint32_t n_fds,
                    const void *blob, size_t blob_len);
/* Unmaps, closes and frees; mp is zeroed (fds -1). Safe on a zeroed or released pool. */
void mem_pool_release(struct mem_pool *mp);
/* Zeroes mp with every fd -1: the state release leaves. */
void mem_pool_init(struct mem_pool *mp);

/* Host backend (always built). */
int mem_host_create(struct mem_pool *mp, const struct pool_desc *d);
int mem_host_import(struct mem_pool *mp, const struct pool_desc *d, int *fds, uint32_t n_fds);
void mem_host_release(struct mem_pool *mp);
/* Takes over a host pool a previous creator parked (systemd fd store): checks and maps fd
 * like import, but keeps fd and becomes the owner (it hands the pool out). On failure fd
 * is left open for the caller. */
int mem_host_adopt(struct mem_pool *mp, const struct pool_desc *d, int fd);
/* MemAvailable from /proc/meminfo in bytes, or a negative code. */
int64_t mem_host_available(void);

#ifdef KVD_HAVE_CUDA
/* True when cudaGetDeviceCount finds a device; otherwise why says what failed. */
bool mem_cuda_available(char *why, size_t why_cap);
/* Free bytes on the current device (cudaMemGetInfo), or a negative code. */
int64_t mem_cuda_free_bytes(void);
/* Backend CUDA_VMM, or CUDA_IPC when the driver lacks POSIX-fd VMM handles. */
uint32_t mem_cuda_best_backend(void);
/* VMM allocation granularity (>= MEM_CUDA_CHUNK_ALIGN), or MEM_CUDA_CHUNK_ALIGN. */
uint64_t mem_cuda_granularity(void);
int mem_cuda_create(struct mem_pool *mp, const struct pool_desc *d);
int mem_cuda_import(struct mem_pool *mp, const struct pool_desc *d, int *fds, uint32_t n_fds,
                    const void *blob, size_t blob_len);
void mem_cuda_release(struct mem_pool *mp);
/* Copies between host memory and pool memory (device or host); for tests and tools. */
int mem_cuda_copy(void *dst, const void *src, size_t n);
#else
static inline bool mem_cuda_available(char *why, size_t why_cap)
{
    if (why && why_cap)
        __builtin_snprintf(why, why_cap, "built without CUDA (no nvcc at configure time)");
    return false;
}
static inline int64_t mem_cuda_free_bytes(void) { return -ENOTSUP; }
static inline uint32_t mem_cuda_best_backend(void) { return MEM_BACKEND_ANY; }
static inline uint64_t mem_cuda_granularity(void) { return MEM_CUDA_CHUNK_ALIGN; }
static inline int mem_cuda_create(struct mem_pool *mp, const struct pool_desc *d)
{
    (void)mp;
    (void)d;
    return -ENOTSUP;
}
static inline int mem_cuda_import(struct mem_pool *mp, const struct pool_desc *d, int *fds,
                                  uint32_t n_fds, const void *blob, size_t blob_len)
{
    (void)mp;
    (void)d;
    (void)fds;
    (void)n_fds;
    (void)blob;
    (void)blob_len;
    return -ENOTSUP;
}
static inline void mem_cuda_release(struct mem_pool *mp) { (void)mp; }
static inline int mem_cuda_copy(void *dst, const void *src, size_t n)
{
    (void)dst;
    (void)src;
    (void)n;
    return -ENOTSUP;
}
#endif

#endif
