/* mem_cuda.cu — the cuda backends of common/mem.h (built only when nvcc exists).
 *
 * cuda-vmm: each chunk is a cuMemCreate allocation with a POSIX-fd shareable handle
 *   (cuMemExportToShareableHandle); every process reserves one VA range for the whole
 *   pool and maps chunk i at i * chunk_bytes. cuda-ipc (fallback where the driver lacks
 *   POSIX-fd VMM handles): one cudaMalloc arena per chunk, exported as a
 *   cudaIpcMemHandle_t in the blob; importers cudaIpcOpenMemHandle each chunk.
 * Driver API functions are taken at run time with cudaGetDriverEntryPointByVersion: the
 * binary never links libcuda, so it starts on hosts without the NVIDIA driver (where
 * cudaGetDeviceCount fails cleanly and the broker picks the host backend).
 * Compiled as CUDA C++; the C headers are included with extern "C". Loop thread only.
 */
#define _Static_assert static_assert /* kvlayout.h is C11; nvcc compiles C++ */
#define _Noreturn [[noreturn]]
extern "C" {
#include "common/err.h"
#include "common/log.h"
#include "common/mem.h"
}

#include <cuda.h>          /* driver types only: no libcuda at link time */
#include <cudaTypedefs.h>  /* PFN_* of the driver entry points */
#include <cuda_runtime_api.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MEM_CUDA_ENTRY_VERSION 12000 /* driver ABI requested for the entry points */

struct cuda_drv {
    PFN_cuDeviceGetAttribute_v2000 dev_attr;
    PFN_cuMemGetAllocationGranularity_v10020 granularity;
    PFN_cuMemCreate_v10020 create;
    PFN_cuMemRelease_v10020 release;
    PFN_cuMemExportToShareableHandle_v10020 export_fd;
    PFN_cuMemImportFromShareableHandle_v10020 import_fd;
    PFN_cuMemAddressReserve_v10020 reserve;
    PFN_cuMemAddressFree_v10020 addr_free;
    PFN_cuMemMap_v10020 map;
    PFN_cuMemUnmap_v10020 unmap;
    PFN_cuMemSetAccess_v10020 set_access;
};

struct cuda_priv {
    struct cuda_drv drv;
    CUmemGenericAllocationHandle h[MEM_CHUNKS_MAX]; /* vmm: chunk allocations */
    uint32_t n_h;
    uint32_t n_mapped;          /* vmm: chunks mapped into va */
    CUdeviceptr va;             /* vmm: reserved range (0 when none) */
    size_t va_size;
    uint32_t n_arenas;          /* ipc: chunks allocated (owner) or opened (importer) */
};

static int drv_sym(const char *name, void **fn)
{
    cudaDriverEntryPointQueryResult q;
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, fn, MEM_CUDA_ENTRY_VERSION,
                                                     cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn) {
        log_err("cannot find CUDA driver function '%s': %s", name,
                e != cudaSuccess ? cudaGetErrorString(e) : "symbol not found");
        return -ENOTSUP;
    }
    return 0;
}

static int drv_load(struct cuda_drv *d)
{
    int rc = 0;
    rc = rc ? rc : drv_sym("cuDeviceGetAttribute", (void **)&d->dev_attr);
    rc = rc ? rc : drv_sym("cuMemGetAllocationGranularity", (void **)&d->granularity);
    rc = rc ? rc : drv_sym("cuMemCreate", (void **)&d->create);
    rc = rc ? rc : drv_sym("cuMemRelease", (void **)&d->release);
    rc = rc ? rc : drv_sym("cuMemExportToShareableHandle", (void **)&d->export_fd);
    rc = rc ? rc : drv_sym("cuMemImportFromShareableHandle", (void **)&d->import_fd);
    rc = rc ? rc : drv_sym("cuMemAddressReserve", (void **)&d->reserve);
    rc = rc ? rc : drv_sym("cuMemAddressFree", (void **)&d->addr_free);
    rc = rc ? rc : drv_sym("cuMemMap", (void **)&d->map);
    rc = rc ? rc : drv_sym("cuMemUnmap", (void **)&d->unmap);
    rc = rc ? rc : drv_sym("cuMemSetAccess", (void **)&d->set_access);
    return rc;
}

/* Converts once, at the edge: logs the call and returns -EIO (-ENOTSUP if unsupported). */
static int cu_fail(const char *what, CUresult r)
{
    log_err("cuda driver call '%s' failed: CUresult %d", what, (int)r);
    return r == CUDA_ERROR_NOT_SUPPORTED ? -ENOTSUP : -EIO;
}

static int rt_fail(const char *what, cudaError_t e)
{
    log_err("cuda runtime call '%s' failed: %s", what, cudaGetErrorString(e));
    return e == cudaErrorNotSupported ? -ENOTSUP : -EIO;
}

extern "C" bool mem_cuda_available(char *why, size_t why_cap)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why && why_cap)
            snprintf(why, why_cap, "no CUDA device: %s",
                     e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
        return false;
    }
    return true;
}

extern "C" int64_t mem_cuda_free_bytes(void)
{
    size_t f = 0, t = 0;
    cudaError_t e = cudaMemGetInfo(&f, &t);
    return e == cudaSuccess ? (int64_t)f : rt_fail("cudaMemGetInfo", e);
}

static CUmemAllocationProp vmm_prop(int dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

extern "C" uint32_t mem_cuda_best_backend(void)
{
    struct cuda_drv d;
    int dev = 0, vmm = 0, fd = 0;
    if (drv_load(&d) || cudaGetDevice(&dev) != cudaSuccess)
        return MEM_BACKEND_CUDA_IPC;
    if (d.dev_attr(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) ||
        d.dev_attr(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev))
        return MEM_BACKEND_CUDA_IPC;
    return vmm && fd ? MEM_BACKEND_CUDA_VMM : MEM_BACKEND_CUDA_IPC;
}

extern "C" uint64_t mem_cuda_granularity(void)
{
    struct cuda_drv d;
    int dev = 0;
    size_t g = 0;
    if (drv_load(&d) || cudaGetDevice(&dev) != cudaSuccess)
        return MEM_CUDA_CHUNK_ALIGN;
    CUmemAllocationProp p = vmm_prop(dev);
    if (d.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || g == 0)
        return MEM_CUDA_CHUNK_ALIGN;
    uint64_t a = MEM_CUDA_CHUNK_ALIGN;
    return (a + g - 1) / g * g;
}

/* Reserves the VA range, maps every handle and grants read/write to dev. */
static int vmm_map_all(struct mem_pool *mp, struct cuda_priv *p, int dev)
{
    const struct pool_desc *d = &mp->desc;
    CUresult r = p->drv.reserve(&p->va, d->pool_bytes, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        return cu_fail("cuMemAddressReserve", r);
    p->va_size = d->pool_bytes;
    for (uint32_t c = 0; c < p->n_h; c++) {
        r = p->drv.map(p->va + (CUdeviceptr)c * d->chunk_bytes, d->chunk_bytes, 0, p->h[c], 0);
        if (r != CUDA_SUCCESS)
            return cu_fail("cuMemMap", r);
        p->n_mapped++;
    }
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = p->drv.set_access(p->va, d->pool_bytes, &acc, 1);
    if (r != CUDA_SUCCESS)
        return cu_fail("cuMemSetAccess", r);
    mp->base = (uint8_t *)(uintptr_t)p->va;
    for (uint32_t c = 0; c < d->n_chunks; c++)
        mp->chunk_base[c] = mp->base + (size_t)c * d->chunk_bytes;
    return 0;
}

static int priv_new(struct mem_pool *mp, const struct pool_desc *d, bool need_drv)
{
    struct cuda_priv *p = (struct cuda_priv *)calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    mp->priv = p;
    mp->desc = *d;
    mp->device = true;
    int rc = need_drv ? drv_load(&p->drv) : 0;
    if (rc)
        return rc;
    cudaError_t e = cudaSetDevice(d->cuda_device < 0 ? 0 : d->cuda_device);
    if (e == cudaSuccess)
        e = cudaFree(0); /* creates the primary context the driver calls use */
    return e == cudaSuccess ? 0 : rt_fail("cudaSetDevice", e);
}

extern "C" int mem_cuda_create(struct mem_pool *mp, const struct pool_desc *d)
{
    bool vmm = d->backend == MEM_BACKEND_CUDA_VMM;
    int dev = d->cuda_device < 0 ? 0 : d->cuda_device;
    int rc = priv_new(mp, d, vmm);
    struct cuda_priv *p = (struct cuda_priv *)mp->priv;
    mp->owner = true;
    if (rc)
        goto out_release;
    if (vmm) {
        CUmemAllocationProp prop = vmm_prop(dev);
        for (uint32_t c = 0; c < d->n_chunks; c++) {
            CUresult r = p->drv.create(&p->h[c], d->chunk_bytes, &prop, 0);
            if (r != CUDA_SUCCESS) {
                rc = cu_fail("cuMemCreate", r);
                goto out_release;
            }
            p->n_h++;
            int fd = -1;
            r = p->drv.export_fd(&fd, p->h[c], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            if (r != CUDA_SUCCESS) {
                rc = cu_fail("cuMemExportToShareableHandle", r);
                goto out_release;
            }
            mp->fds[c] = fd;
            mp->n_fds++;
        }
        if ((rc = vmm_map_all(mp, p, dev)))
            goto out_release;
    } else {
        if (!(mp->blob = (uint8_t *)calloc(d->n_chunks, MEM_IPC_HANDLE_BYTES))) {
            rc = -ENOMEM;
            goto out_release;
        }
        mp->blob_len = (size_t)d->n_chunks * MEM_IPC_HANDLE_BYTES;
        static_assert(sizeof(cudaIpcMemHandle_t) == MEM_IPC_HANDLE_BYTES, "ipc handle size");
        for (uint32_t c = 0; c < d->n_chunks; c++) {
            void *ptr = NULL;
            cudaError_t e = cudaMalloc(&ptr, d->chunk_bytes);
            if (e != cudaSuccess) {
                rc = rt_fail("cudaMalloc", e);
                goto out_release;
            }
            mp->chunk_base[c] = (uint8_t *)ptr;
            p->n_arenas++;
            cudaIpcMemHandle_t h;
            if ((e = cudaIpcGetMemHandle(&h, ptr)) != cudaSuccess) {
                rc = rt_fail("cudaIpcGetMemHandle", e);
                goto out_release;
            }
            memcpy(mp->blob + (size_t)c * MEM_IPC_HANDLE_BYTES, &h, MEM_IPC_HANDLE_BYTES);
        }
    }
    /* Pre-fault and zero: the memory is committed now, not at a worker's first write. */
    for (uint32_t c = 0; c < d->n_chunks; c++) {
        cudaError_t e = cudaMemset(mp->chunk_base[c], 0, d->chunk_bytes);
        if (e != cudaSuccess) {
            rc = rt_fail("cudaMemset", e);
            goto out_release;
        }
    }
    cudaDeviceSynchronize();
    return 0;
out_release:
    mem_cuda_release(mp);
    mem_pool_init(mp);
    return rc;
}

extern "C" int mem_cuda_import(struct mem_pool *mp, const struct pool_desc *d, int *fds,
                               uint32_t n_fds, const void *blob, size_t blob_len)
{
    bool vmm = d->backend == MEM_BACKEND_CUDA_VMM;
    int dev = d->cuda_device < 0 ? 0 : d->cuda_device;
    int rc = priv_new(mp, d, vmm);
    struct cuda_priv *p = (struct cuda_priv *)mp->priv;
    mp->owner = false;
    if (rc)
        goto out_release;
    if (vmm) {
        if (n_fds != d->n_chunks) {
            log_err("cannot import cuda-vmm pool: %u fds for %u chunks", n_fds, d->n_chunks);
            rc = -EINVAL;
            goto out_release;
        }
        for (uint32_t c = 0; c < n_fds; c++) {
            CUresult r = p->drv.import_fd(&p->h[c], (void *)(uintptr_t)fds[c],
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            if (r != CUDA_SUCCESS) {
                rc = cu_fail("cuMemImportFromShareableHandle", r);
                goto out_release;
            }
            p->n_h++;
        }
        if ((rc = vmm_map_all(mp, p, dev)))
            goto out_release;
    } else {
        if (blob_len != (size_t)d->n_chunks * MEM_IPC_HANDLE_BYTES) {
            log_err("cannot import cuda-ipc pool: %zu handle bytes for %u chunks", blob_len,
                    d->n_chunks);
            rc = -EINVAL;
            goto out_release;
        }
        for (uint32_t c = 0; c < d->n_chunks; c++) {
            cudaIpcMemHandle_t h;
            void *ptr = NULL;
            memcpy(&h, (const uint8_t *)blob + (size_t)c * MEM_IPC_HANDLE_BYTES, sizeof(h));
            cudaError_t e = cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess);
            if (e != cudaSuccess) {
                rc = rt_fail("cudaIpcOpenMemHandle", e);
                goto out_release;
            }
            mp->chunk_base[c] = (uint8_t *)ptr;
            p->n_arenas++;
        }
    }
    return 0;
out_release:
    mem_cuda_release(mp);
    mem_pool_init(mp);
    return rc;
}

extern "C" void mem_cuda_release(struct mem_pool *mp)
{
    struct cuda_priv *p = (struct cuda_priv *)mp->priv;
    if (p) {
        if (p->n_mapped)
            p->drv.unmap(p->va, (size_t)p->n_mapped * mp->desc.chunk_bytes);
        if (p->va)
            p->drv.addr_free(p->va, p->va_size);
        for (uint32_t c = 0; c < p->n_h; c++)
            p->drv.release(p->h[c]);
        for (uint32_t c = 0; c < p->n_arenas; c++) {
            if (mp->owner)
                cudaFree(mp->chunk_base[c]);
            else
                cudaIpcCloseMemHandle(mp->chunk_base[c]);
        }
        free(p);
    }
    for (uint32_t i = 0; i < mp->n_fds; i++)
        if (mp->fds[i] >= 0)
            close(mp->fds[i]);
    free(mp->blob);
    mp->priv = NULL;
    mp->blob = NULL;
}

extern "C" int mem_cuda_copy(void *dst, const void *src, size_t n)
{
    cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyDefault);
    return e == cudaSuccess ? 0 : rt_fail("cudaMemcpy", e);
}
