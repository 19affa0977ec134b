/* opts.h — kvd-broker's command line: parsing, defaults, --help text.
 *
 * Exit conventions (the caller exits with them): 0 after --help, 64 (EX_USAGE) for an
 * unknown flag or a malformed value, 78 (EX_CONFIG) for a configuration that cannot
 * work (no model geometry, ...). Main thread, before the loop starts.
 */
#ifndef KVD_BROKER_OPTS_H
#define KVD_BROKER_OPTS_H

#include "common/log.h"
#include "common/paths.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define BROKER_EX_USAGE 64
#define BROKER_EX_UNAVAILABLE 69  /* another broker serves this runtime dir */
#define BROKER_EX_SOFTWARE 70     /* internal failure (pool creation, sockets) */
#define BROKER_EX_CONFIG 78
#define BROKER_HOST_POOL_DEFAULT (256ull << 20) /* bytes; host pool when no size is given */
#define BROKER_HOST_AVAIL_CAP 0.5     /* default host pool never exceeds this of MemAvailable */
#define BROKER_CUDA_FRACTION_DEFAULT 0.5 /* of free device memory; weights need the rest */
#define BROKER_BLOCK_SIZE_DEFAULT 16  /* tokens per page (vLLM's default) */

struct broker_opts {
    const char *runtime_dir;    /* NULL: paths_runtime_dir() resolution */
    enum log_level log_level;
    const char *model_path;     /* --model: geometry and fingerprint from the GGUF file */
    uint32_t n_layers;          /* --layers (when no --model) */
    uint32_t n_kv_heads;        /* --kv-heads */
    uint32_t head_dim;          /* --head-dim */
    uint64_t model_fp;          /* --model-fp (hex or decimal; 0 = unset) */
    uint32_t block_size;
    uint32_t kv_dtype;          /* enum kv_dtype */
    uint64_t pool_bytes;        /* 0: not given */
    double pool_fraction;       /* 0: not given */
    uint32_t backend;           /* enum mem_backend; MEM_BACKEND_ANY = auto */
    bool cuda_fallback;         /* "cuda" or auto: cuda-ipc when cuda-vmm fails */
    int ready_fd;               /* -1: none */
    int parent_pid;             /* --exit-with-parent: SIGTERM when it dies; 0: none */
    uint32_t lease_timeout_ms;
    int cuda_device;
};

/* Parses argv into o. Returns 0 (run), 1 (--help printed to out: exit 0), or an exit
 * code (64/78) after a message on stderr. */
int broker_opts_parse(struct broker_opts *o, int argc, char **argv, FILE *out);
/* "4096", "64K", "256M", "2G", "1T" (binary multiples). 0 or -EINVAL. */
int broker_parse_size(const char *s, uint64_t *out);

#endif
