/* mem_host.c — the host backend of common/mem.h: a sealed memfd, mapped shared.
 *
 * Sealing F_SEAL_SHRINK|F_SEAL_GROW means no process holding the fd can truncate the
 * pool under the others (which would SIGBUS them). The creator pre-faults every page
 * (MAP_POPULATE, then a write per OS page) so the pool's memory is committed at start,
 * not on a worker's first touch. Nothing is named in /dev/shm: a crash leaves nothing.
 */
#include "common/mem.h"

#include "common/log.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MEM_HOST_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

static void set_chunks(struct mem_pool *mp)
{
    for (uint32_t c = 0; c < mp->desc.n_chunks; c++)
        mp->chunk_base[c] = mp->base + (size_t)c * mp->desc.chunk_bytes;
}

int mem_host_create(struct mem_pool *mp, const struct pool_desc *d)
{
    int rc, fd = memfd_create("kvd-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)d->pool_bytes) < 0) {
        rc = -errno;
        goto out_close_fd;
    }
    if (fcntl(fd, F_ADD_SEALS, MEM_HOST_SEALS) < 0) {
        rc = -errno;
        goto out_close_fd;
    }
    void *p = mmap(NULL, d->pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
        rc = -errno;
        goto out_close_fd;
    }
    /* MAP_POPULATE is best effort; touching each OS page makes the commitment real. */
    long os_page = sysconf(_SC_PAGESIZE);
    for (size_t off = 0; off < d->pool_bytes; off += (size_t)os_page)
        ((volatile uint8_t *)p)[off] = 0;
    mp->desc = *d;
    mp->base = p;
    mp->fds[0] = fd;
    mp->n_fds = 1;
    mp->owner = true;
    set_chunks(mp);
    return 0;
out_close_fd:
    close(fd);
    return rc;
}

int mem_host_import(struct mem_pool *mp, const struct pool_desc *d, int *fds, uint32_t n_fds)
{
    if (n_fds != 1 || fds[0] < 0) {
        log_err("cannot import host pool: %u fds received, expected 1", n_fds);
        return -EINVAL;
    }
    struct stat st;
    if (fstat(fds[0], &st) < 0)
        return -errno;
    if ((uint64_t)st.st_size != d->pool_bytes) {
        log_err("cannot import host pool: memfd is %lld bytes, descriptor says %llu",
                (long long)st.st_size, (unsigned long long)d->pool_bytes);
        return -EINVAL;
    }
    int seals = fcntl(fds[0], F_GET_SEALS);
    if (seals < 0 || (seals & MEM_HOST_SEALS) != MEM_HOST_SEALS) {
        log_err("cannot import host pool: memfd is not sealed against resizing");
        return -EPERM;
    }
    void *p = mmap(NULL, d->pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    if (p == MAP_FAILED)
        return -errno;
    mp->desc = *d;
    mp->base = p;
    mp->owner = false;
    set_chunks(mp);
    return 0;
}

void mem_host_release(struct mem_pool *mp)
{
    if (mp->base)
        munmap(mp->base, mp->desc.pool_bytes);
    for (uint32_t i = 0; i < mp->n_fds; i++)
        if (mp->fds[i] >= 0)
            close(mp->fds[i]);
}

int64_t mem_host_available(void)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f)
        return -errno;
    char line[128];
    long long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -ENOENT : (int64_t)kb * 1024;
}

int mem_host_adopt(struct mem_pool *mp, const struct pool_desc *d, int fd)
{
    mem_pool_init(mp);
    int fds[1] = {fd};
    int rc = mem_host_import(mp, d, fds, 1);
    if (rc)
        return rc;
    mp->fds[0] = fd;
    mp->n_fds = 1;
    mp->owner = true;
    return 0;
}
