/* kvd-broker: owns the KV page pool. main() parses flags, sizes and creates the pool,
 * starts the server on one libuv loop and runs it until SIGTERM/SIGINT. */
#include "broker/core.h"
#include "broker/fdstore.h"
#include "broker/opts.h"
#include "broker/server.h"
#include "common/err.h"
#include "common/gguf.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/paths.h"

#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#define BROKER_CUDA_CHUNK_TARGET (1ull << 30) /* bytes per cuda chunk before rounding */
#define BROKER_POOL_EPOCH_FIRST 1             /* epoch of a freshly created pool */

/* Fills geometry and fingerprint from --model or the by-hand flags. 0 or exit code. */
static int model_geometry(const struct broker_opts *o, struct pool_desc *d)
{
    uint32_t layers = o->n_layers, heads = o->n_kv_heads, hd = o->head_dim;
    uint64_t fp = o->model_fp;
    if (o->model_path) {
        struct gguf_file g;
        struct gguf_llama_hparams hp;
        char err[GGUF_ERR_LEN];
        int rc = gguf_open(&g, o->model_path, err);
        if (rc) {
            log_err("cannot read model '%s': %s", o->model_path, err);
            return BROKER_EX_CONFIG;
        }
        rc = gguf_llama_hparams(&g, &hp, err);
        if (rc) {
            log_err("cannot use model '%s': %s", o->model_path, err);
            gguf_close(&g);
            return BROKER_EX_CONFIG;
        }
        layers = hp.n_layer;
        heads = hp.n_head_kv;
        hd = hp.head_dim;
        fp = gguf_model_fingerprint(&g);
        gguf_close(&g);
    }
    if (kv_geom_init(&d->geom, layers, heads, hd, o->block_size, o->kv_dtype)) {
        log_err("invalid KV geometry: %u layers, %u kv heads, head dim %u, block %u", layers,
                heads, hd, o->block_size);
        return BROKER_EX_CONFIG;
    }
    d->model_fp = fp;
    return 0;
}

/* Picks the backend and the pool size; fills d's layout. 0 or exit code. */
static int pool_plan(const struct broker_opts *o, struct pool_desc *d)
{
    char why[160];
    uint32_t backend = o->backend;
    if (backend == MEM_BACKEND_ANY)
        backend = mem_cuda_available(why, sizeof(why)) ? mem_cuda_best_backend()
                                                       : MEM_BACKEND_HOST;
    else if (backend != MEM_BACKEND_HOST && !mem_cuda_available(why, sizeof(why))) {
        log_err("cannot use backend '%s': %s", mem_backend_name(backend), why);
        return BROKER_EX_CONFIG;
    }
    d->backend = backend;
    uint64_t bytes = o->pool_bytes, align, chunks = 1;
    if (backend == MEM_BACKEND_HOST) {
        int64_t avail = mem_host_available();
        if (!bytes && o->pool_fraction) {
            if (avail < 0) {
                log_err("cannot size the pool: MemAvailable unknown: %s", kvd_strerror((int)avail));
                return BROKER_EX_CONFIG;
            }
            bytes = (uint64_t)((double)avail * o->pool_fraction);
        } else if (!bytes) {
            bytes = BROKER_HOST_POOL_DEFAULT;
            if (avail > 0 && bytes > (uint64_t)((double)avail * BROKER_HOST_AVAIL_CAP))
                bytes = (uint64_t)((double)avail * BROKER_HOST_AVAIL_CAP);
        }
        align = (uint64_t)sysconf(_SC_PAGESIZE);
        d->cuda_device = -1;
    } else {
        if (!bytes) {
            int64_t free_b = mem_cuda_free_bytes();
            if (free_b < 0) {
                log_err("cannot size the pool: free device memory unknown: %s",
                        kvd_strerror((int)free_b));
                return BROKER_EX_CONFIG;
            }
            double f = o->pool_fraction ? o->pool_fraction : BROKER_CUDA_FRACTION_DEFAULT;
            bytes = (uint64_t)((double)free_b * f);
        }
        align = mem_cuda_granularity();
        chunks = (bytes + BROKER_CUDA_CHUNK_TARGET - 1) / BROKER_CUDA_CHUNK_TARGET;
        d->cuda_device = o->cuda_device;
    }
    if (pool_desc_layout(d, bytes, align, (uint32_t)(chunks > MEM_CHUNKS_MAX ? MEM_CHUNKS_MAX : chunks))) {
        log_err("pool of %llu bytes holds no page of %llu bytes", (unsigned long long)bytes,
                (unsigned long long)d->geom.page_bytes);
        return BROKER_EX_CONFIG;
    }
    return 0;
}

/* A pool parked in systemd's fd store by the previous broker of this unit: take it back
 * when its descriptor matches what the flags ask for (same model, geometry, dtype, layout,
 * host backend); the epoch is bumped. 0 and *mem / *d filled with entries to re-index,
 * or -ENOENT (nothing parked, or it does not match: a new pool is made). */
static int pool_take_back(const struct pool_desc *want, struct pool_desc *d,
                          struct mem_pool *mem, struct fdstore_entry **entries, size_t *n)
{
    int pool_fd, state_fd;
    if (fdstore_take(&pool_fd, &state_fd))
        return -ENOENT;
    struct pool_desc old, expect;
    char why[160] = "";
    int rc = fdstore_load(state_fd, &old, entries, n);
    close(state_fd);
    memset(&expect, 0, sizeof(expect));
    expect.model_fp = want->model_fp;
    expect.geom = want->geom;
    expect.layout_version = want->layout_version;
    expect.backend = MEM_BACKEND_HOST;
    if (rc == 0 && want->backend != MEM_BACKEND_HOST) {
        snprintf(why, sizeof(why), "backend %s pools are not parked",
                 mem_backend_name(want->backend));
        rc = -ENOTSUP;
    }
    if (rc == 0)
        rc = pool_desc_check(&old, &expect, why, sizeof(why));
    if (rc == 0) {
        old.epoch++;
        rc = mem_host_adopt(mem, &old, pool_fd);
    }
    if (rc) {
        log_warn("not taking back the parked pool: %s%s%s; creating a new one", kvd_strerror(rc),
                 why[0] ? ": " : "", why);
        close(pool_fd);
        free(*entries);
        *entries = NULL;
        *n = 0;
        return -ENOENT;
    }
    *d = old;
    log_info("took back pool %016llx from the systemd fd store: epoch %u, %zu indexed pages",
             (unsigned long long)old.pool_id, old.epoch, *n);
    return 0;
}

static void ready_signal(int fd)
{
    if (fd >= 0) {
        static const char msg[] = "ready\n";
        if (write(fd, msg, sizeof(msg) - 1) != (ssize_t)(sizeof(msg) - 1))
            log_warn("cannot write to --ready-fd %d: %s", fd, strerror(errno));
        close(fd);
    }
    sd_notify(0, "READY=1");
}

int main(int argc, char **argv)
{
    struct broker_opts o;
    int rc = broker_opts_parse(&o, argc, argv, stdout);
    if (rc)
        return rc == 1 ? 0 : rc;
    log_setup("kvd-broker", o.log_level);
    signal(SIGPIPE, SIG_IGN);
    /* Die with the kvd that spawned us; the getppid check closes the race where it died
     * before the prctl. */
    if (o.parent_pid && (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != o.parent_pid)) {
        log_err("parent %d is gone: not starting", o.parent_pid);
        return 1;
    }

    char dir[PATHS_MAX];
    if ((rc = paths_runtime_dir(dir, sizeof(dir), o.runtime_dir)) || (rc = paths_ensure_dir(dir))) {
        log_err("cannot use runtime dir '%s': %s", dir, kvd_strerror(rc));
        return BROKER_EX_CONFIG;
    }
    struct pool_desc d;
    memset(&d, 0, sizeof(d));
    if ((rc = model_geometry(&o, &d)) || (rc = pool_plan(&o, &d)))
        return rc;
    if (getrandom(&d.pool_id, sizeof(d.pool_id), 0) != sizeof(d.pool_id))
        d.pool_id = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    d.epoch = BROKER_POOL_EPOCH_FIRST;
    d.layout_version = KV_LAYOUT_VERSION;

    struct mem_pool mem;
    struct fdstore_entry *parked = NULL;
    size_t n_parked = 0;
    bool taken_back = pool_take_back(&d, &d, &mem, &parked, &n_parked) == 0;
    rc = taken_back ? 0 : mem_pool_create(&mem, &d);
    if (rc && d.backend == MEM_BACKEND_CUDA_VMM && o.cuda_fallback) {
        log_warn("cuda-vmm pool failed (%s); falling back to cuda-ipc", kvd_strerror(rc));
        d.backend = MEM_BACKEND_CUDA_IPC;
        pool_desc_layout(&d, d.pool_bytes, MEM_CUDA_CHUNK_ALIGN, d.n_chunks);
        rc = mem_pool_create(&mem, &d);
    }
    if (rc) {
        log_err("cannot create a %s pool of %llu bytes: %s", mem_backend_name(d.backend),
                (unsigned long long)d.pool_bytes, kvd_strerror(rc));
        return BROKER_EX_SOFTWARE;
    }
    if (!taken_back)
        fdstore_park_pool(&mem);

    uv_loop_t loop;
    struct broker core;
    struct broker_server srv;
    int exit_code = 0;
    uv_loop_init(&loop);
    if ((rc = broker_init(&core, &d, o.lease_timeout_ms, uv_now(&loop)))) {
        log_err("cannot set up the page table: %s", kvd_strerror(rc));
        exit_code = BROKER_EX_SOFTWARE;
        free(parked);
        goto out_release_mem;
    }
    for (size_t i = 0; i < n_parked; i++)
        if (broker_adopt_cached(&core, &parked[i].hash, parked[i].page))
            log_warn("parked index entry for page %u dropped (invalid or duplicate)",
                     parked[i].page);
    free(parked);
    parked = NULL;
    if ((rc = broker_server_start(&srv, &loop, &core, &mem, dir))) {
        exit_code = rc == -EADDRINUSE ? BROKER_EX_UNAVAILABLE : BROKER_EX_SOFTWARE;
        goto out_release_core;
    }
    log_info("serving pool %016llx in '%s': %u pages of %llu bytes (%s, block %u, %u layers x "
             "%u kv heads x %u), %llu bytes, backend %s, lease timeout %u ms",
             (unsigned long long)d.pool_id, dir, d.num_pages,
             (unsigned long long)d.geom.page_bytes, kv_dtype_get(d.geom.kv_dtype)->name,
             d.geom.block_size, d.geom.n_layers, d.geom.n_kv_heads, d.geom.head_dim,
             (unsigned long long)d.pool_bytes, mem_backend_name(d.backend), o.lease_timeout_ms);
    ready_signal(o.ready_fd);
    uv_run(&loop, UV_RUN_DEFAULT);
    fdstore_save(&core);
    log_info("stopped: %llu requests, %llu errors, %llu hand-overs",
             (unsigned long long)core.requests, (unsigned long long)core.errors,
             (unsigned long long)srv.attaches);
out_release_core:
    broker_server_stop(&srv);
    uv_run(&loop, UV_RUN_DEFAULT); /* let close callbacks run */
    broker_release(&core);
out_release_mem:
    if (uv_loop_close(&loop))
        log_warn("event loop closed with handles still open");
    mem_pool_release(&mem);
    return exit_code;
}
