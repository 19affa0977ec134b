#include "broker/fdstore.h"

#include "common/err.h"
#include "common/log.h"
#include "common/pool_attach.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#define FDSTORE_HDR_BYTES (8 + POOL_DESC_WIRE_BYTES + 4)
#define FDSTORE_ENTRY_BYTES (BROKER_HASH_BYTES + 4)

bool fdstore_enabled(void)
{
    const char *e = getenv("NOTIFY_SOCKET");
    return e && *e;
}

int fdstore_take(int *pool_fd, int *state_fd)
{
    char **names = NULL;
    *pool_fd = *state_fd = -1;
    int n = sd_listen_fds_with_names(1, &names);
    for (int i = 0; i < n; i++) {
        int fd = SD_LISTEN_FDS_START + i;
        const char *nm = names && names[i] ? names[i] : "";
        if (strcmp(nm, FDSTORE_POOL_NAME) == 0 && *pool_fd < 0)
            *pool_fd = fd;
        else if (strcmp(nm, FDSTORE_STATE_NAME) == 0 && *state_fd < 0)
            *state_fd = fd;
        else
            close(fd);
        fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    if (names)
        for (int i = 0; i < n; i++)
            free(names[i]);
    free(names);
    if (*pool_fd >= 0 && *state_fd >= 0)
        return 0;
    if (*pool_fd >= 0)
        close(*pool_fd);
    if (*state_fd >= 0)
        close(*state_fd);
    *pool_fd = *state_fd = -1;
    return -ENOENT;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int fdstore_load(int state_fd, struct pool_desc *d, struct fdstore_entry **entries, size_t *n)
{
    struct stat st;
    if (fstat(state_fd, &st) < 0)
        return -errno;
    size_t len = (size_t)st.st_size;
    if (len < FDSTORE_HDR_BYTES)
        return KVD_EMSG;
    uint8_t *buf = malloc(len);
    if (!buf)
        return -ENOMEM;
    int rc = KVD_EMSG;
    struct fdstore_entry *e = NULL;
    if (pread(state_fd, buf, len, 0) != (ssize_t)len)
        goto out_free;
    uint32_t cnt = get32(buf + 8 + POOL_DESC_WIRE_BYTES);
    if (get32(buf) != FDSTORE_STATE_MAGIC || get32(buf + 4) != FDSTORE_STATE_VERSION ||
        pool_desc_decode(d, buf + 8, POOL_DESC_WIRE_BYTES) ||
        len != FDSTORE_HDR_BYTES + (size_t)cnt * FDSTORE_ENTRY_BYTES || cnt > d->num_pages)
        goto out_free;
    if (cnt && !(e = calloc(cnt, sizeof(*e)))) {
        rc = -ENOMEM;
        goto out_free;
    }
    for (uint32_t i = 0; i < cnt; i++) {
        const uint8_t *p = buf + FDSTORE_HDR_BYTES + (size_t)i * FDSTORE_ENTRY_BYTES;
        memcpy(e[i].hash.b, p, BROKER_HASH_BYTES);
        e[i].page = get32(p + BROKER_HASH_BYTES);
    }
    *entries = e;
    *n = cnt;
    rc = 0;
out_free:
    free(buf);
    return rc;
}

int fdstore_park_pool(const struct mem_pool *mp)
{
    if (!fdstore_enabled() || mp->desc.backend != MEM_BACKEND_HOST)
        return 0;
    int rc = sd_pid_notify_with_fds(0, 0, "FDSTORE=1\nFDNAME=" FDSTORE_POOL_NAME, mp->fds,
                                    mp->n_fds);
    if (rc < 0)
        log_warn("cannot park the pool in the systemd fd store: %s", kvd_strerror(rc));
    return rc < 0 ? rc : 0;
}

int fdstore_save(const struct broker *b)
{
    if (!fdstore_enabled() || b->desc.backend != MEM_BACKEND_HOST)
        return 0;
    const struct prefix *px = &b->prefix;
    size_t len = FDSTORE_HDR_BYTES + (size_t)px->n_entries * FDSTORE_ENTRY_BYTES;
    uint8_t *buf = calloc(1, len);
    if (!buf)
        return -ENOMEM;
    put32(buf, FDSTORE_STATE_MAGIC);
    put32(buf + 4, FDSTORE_STATE_VERSION);
    pool_desc_encode(&b->desc, buf + 8, POOL_DESC_WIRE_BYTES);
    put32(buf + 8 + POOL_DESC_WIRE_BYTES, (uint32_t)px->n_entries);
    uint8_t *p = buf + FDSTORE_HDR_BYTES;
    for (uint32_t pg = 0; pg < px->n_pages; pg++)
        if (px->has[pg]) {
            memcpy(p, px->hash[pg].b, BROKER_HASH_BYTES);
            put32(p + BROKER_HASH_BYTES, pg);
            p += FDSTORE_ENTRY_BYTES;
        }
    int rc, fd = memfd_create("kvd-state", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        rc = -errno;
        goto out_free;
    }
    if (write(fd, buf, len) != (ssize_t)len ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
        rc = errno ? -errno : -EIO;
        goto out_close;
    }
    sd_notify(0, "FDSTOREREMOVE=1\nFDNAME=" FDSTORE_STATE_NAME);
    rc = sd_pid_notify_with_fds(0, 0, "FDSTORE=1\nFDNAME=" FDSTORE_STATE_NAME, &fd, 1);
    rc = rc < 0 ? rc : 0;
    if (rc == 0)
        log_info("parked the prefix index (%llu entries) in the systemd fd store",
                 (unsigned long long)px->n_entries);
out_close:
    close(fd);
out_free:
    if (rc)
        log_warn("cannot park the prefix index: %s", kvd_strerror(rc));
    free(buf);
    return rc;
}
