#include "broker/opts.h"

#include "broker/pool.h"
#include "common/kvlayout.h"
#include "common/mem.h"
#include "proto/broker_msg.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kvd-broker [options]\n"
    "Owns the KV page pool: creates it, hands it to workers (broker.fd), and serves page\n"
    "allocation, the prefix index and leases on broker.sock (nanomsg REP).\n"
    "\n"
    "model geometry (one of):\n"
    "  --model PATH            GGUF model: layers, kv heads, head dim and fingerprint\n"
    "  --layers N --kv-heads N --head-dim N [--model-fp X]   the same, given by hand\n"
    "pool:\n"
    "  --block-size N          tokens per page (default 16, max 1024)\n"
    "  --kv-dtype f32|f16      KV element format (default f32)\n"
    "  --pool-bytes SIZE       pool size, K/M/G/T suffixes (binary)\n"
    "  --pool-fraction F       pool size as a fraction (0, 1] of MemAvailable (host) or\n"
    "                          of free device memory (cuda)\n"
    "                          default: host 256M (capped at half of MemAvailable);\n"
    "                          cuda 0.5 of free device memory\n"
    "  --backend host|cuda|cuda-vmm|cuda-ipc|auto\n"
    "                          memory backend (default auto: cuda when a GPU is present,\n"
    "                          else host; cuda = VMM with cudaIpc fallback)\n"
    "  --cuda-device N         device ordinal for the cuda backend (default 0)\n"
    "serving:\n"
    "  --lease-timeout-ms MS   a client silent this long loses its pages (default 3000)\n"
    "  --runtime-dir DIR       sockets directory (default $KVD_RUNTIME_DIR, else\n"
    "                          $XDG_RUNTIME_DIR/kvd, else /tmp/kvd-$UID)\n"
    "  --ready-fd N            write \"ready\\n\" to fd N once serving, then close it\n"
    "  --exit-with-parent PID  get SIGTERM when parent PID dies (kvd passes its own pid)\n"
    "  --log-level error|warn|info|debug   (default info)\n"
    "  --help                  this text\n"
    "Under systemd (NOTIFY_SOCKET set) it sends READY=1, STATUS= and WATCHDOG=1, and parks\n"
    "the host pool and its prefix index in the unit's fd store (FileDescriptorStoreMax=2):\n"
    "a restarted broker with the same model and geometry takes them back, KV intact.\n"
    "Exit codes: 0 clean stop (SIGTERM/SIGINT), 64 bad flag, 69 another broker serves\n"
    "the runtime dir, 70 internal failure, 78 bad configuration.\n";

enum {
    OPT_MODEL = 256,
    OPT_LAYERS,
    OPT_KV_HEADS,
    OPT_HEAD_DIM,
    OPT_MODEL_FP,
    OPT_BLOCK_SIZE,
    OPT_KV_DTYPE,
    OPT_POOL_BYTES,
    OPT_POOL_FRACTION,
    OPT_BACKEND,
    OPT_CUDA_DEVICE,
    OPT_LEASE_TIMEOUT,
    OPT_RUNTIME_DIR,
    OPT_READY_FD,
    OPT_EXIT_WITH_PARENT,
    OPT_LOG_LEVEL,
    OPT_HELP,
};

static const struct option longopts[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"kv-heads", required_argument, NULL, OPT_KV_HEADS},
    {"head-dim", required_argument, NULL, OPT_HEAD_DIM},
    {"model-fp", required_argument, NULL, OPT_MODEL_FP},
    {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
    {"kv-dtype", required_argument, NULL, OPT_KV_DTYPE},
    {"pool-bytes", required_argument, NULL, OPT_POOL_BYTES},
    {"pool-fraction", required_argument, NULL, OPT_POOL_FRACTION},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"cuda-device", required_argument, NULL, OPT_CUDA_DEVICE},
    {"lease-timeout-ms", required_argument, NULL, OPT_LEASE_TIMEOUT},
    {"runtime-dir", required_argument, NULL, OPT_RUNTIME_DIR},
    {"ready-fd", required_argument, NULL, OPT_READY_FD},
    {"exit-with-parent", required_argument, NULL, OPT_EXIT_WITH_PARENT},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

int broker_parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return -EINVAL;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: return -EINVAL;
    }
    if ((*end == 'i' || *end == 'I') && shift)
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || (shift && v > (UINT64_MAX >> shift)))
        return -EINVAL;
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || *s == '-' || v < min || v > max)
        return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

static int bad(const char *flag, const char *val, const char *what)
{
    fprintf(stderr, "kvd-broker: invalid %s '%s': %s\n", flag, val, what);
    return BROKER_EX_USAGE;
}

int broker_opts_parse(struct broker_opts *o, int argc, char **argv, FILE *out)
{
    memset(o, 0, sizeof(*o));
    o->log_level = LOG_LEVEL_INFO;
    o->block_size = BROKER_BLOCK_SIZE_DEFAULT;
    o->kv_dtype = KV_DTYPE_F32;
    o->backend = MEM_BACKEND_ANY;
    o->cuda_fallback = true;
    o->ready_fd = -1;
    o->lease_timeout_ms = BROKER_LEASE_TIMEOUT_MS_DEFAULT;
    optind = 1;
    opterr = 0;
    int c;
    uint32_t u;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        const char *a = optarg;
        switch (c) {
        case OPT_MODEL: o->model_path = a; break;
        case OPT_LAYERS:
            if (parse_u32(a, 1, KV_LAYERS_MAX, &o->n_layers))
                return bad("--layers", a, "expected 1..512");
            break;
        case OPT_KV_HEADS:
            if (parse_u32(a, 1, KV_HEADS_MAX, &o->n_kv_heads))
                return bad("--kv-heads", a, "expected 1..1024");
            break;
        case OPT_HEAD_DIM:
            if (parse_u32(a, 1, KV_HEAD_DIM_MAX, &o->head_dim))
                return bad("--head-dim", a, "expected 1..1024");
            break;
        case OPT_MODEL_FP: {
            char *end;
            errno = 0;
            o->model_fp = strtoull(a, &end, 0);
            if (errno || end == a || *end || *a == '-')
                return bad("--model-fp", a, "expected an unsigned 64-bit number");
            break;
        }
        case OPT_BLOCK_SIZE:
            if (parse_u32(a, 1, KV_BLOCK_TOKENS_MAX, &o->block_size))
                return bad("--block-size", a, "expected 1..1024 tokens");
            break;
        case OPT_KV_DTYPE: {
            enum kv_dtype dt;
            if (kv_dtype_parse(a, &dt))
                return bad("--kv-dtype", a, "expected f32 or f16");
            o->kv_dtype = dt;
            break;
        }
        case OPT_POOL_BYTES:
            if (broker_parse_size(a, &o->pool_bytes) || o->pool_bytes == 0)
                return bad("--pool-bytes", a, "expected a size like 512M or 8G");
            break;
        case OPT_POOL_FRACTION: {
            char *end;
            o->pool_fraction = strtod(a, &end);
            if (end == a || *end || !(o->pool_fraction > 0 && o->pool_fraction <= 1))
                return bad("--pool-fraction", a, "expected a number in (0, 1]");
            break;
        }
        case OPT_BACKEND:
            o->cuda_fallback = strcmp(a, "auto") == 0 || strcmp(a, "cuda") == 0;
            if (strcmp(a, "auto") == 0)
                o->backend = MEM_BACKEND_ANY;
            else if (mem_backend_parse(a, &o->backend))
                return bad("--backend", a, "expected host, cuda, cuda-vmm, cuda-ipc or auto");
            break;
        case OPT_CUDA_DEVICE:
            if (parse_u32(a, 0, 1024, &u))
                return bad("--cuda-device", a, "expected a device ordinal");
            o->cuda_device = (int)u;
            break;
        case OPT_LEASE_TIMEOUT:
            if (parse_u32(a, 1, BROKER_LEASE_TIMEOUT_MS_MAX, &o->lease_timeout_ms))
                return bad("--lease-timeout-ms", a, "expected 1..3600000");
            break;
        case OPT_RUNTIME_DIR: o->runtime_dir = a; break;
        case OPT_READY_FD:
            if (parse_u32(a, 0, INT32_MAX, &u))
                return bad("--ready-fd", a, "expected a file descriptor number");
            o->ready_fd = (int)u;
            break;
        case OPT_EXIT_WITH_PARENT:
            if (parse_u32(a, 1, INT32_MAX, &u))
                return bad("--exit-with-parent", a, "expected a process id");
            o->parent_pid = (int)u;
            break;
        case OPT_LOG_LEVEL:
            if (log_level_parse(a, &o->log_level))
                return bad("--log-level", a, "expected error, warn, info or debug");
            break;
        case OPT_HELP: fputs(usage, out); return 1;
        case ':':
            fprintf(stderr, "kvd-broker: flag '%s' needs a value (see --help)\n",
                    argv[optind - 1]);
            return BROKER_EX_USAGE;
        default:
            fprintf(stderr, "kvd-broker: unknown flag '%s' (see --help)\n", argv[optind - 1]);
            return BROKER_EX_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kvd-broker: unexpected argument '%s' (see --help)\n", argv[optind]);
        return BROKER_EX_USAGE;
    }
    if (o->pool_bytes && o->pool_fraction) {
        fprintf(stderr, "kvd-broker: give --pool-bytes or --pool-fraction, not both\n");
        return BROKER_EX_CONFIG;
    }
    bool by_hand = o->n_layers || o->n_kv_heads || o->head_dim;
    if (o->model_path && by_hand) {
        fprintf(stderr, "kvd-broker: give --model or --layers/--kv-heads/--head-dim, not both\n");
        return BROKER_EX_CONFIG;
    }
    if (!o->model_path && !(o->n_layers && o->n_kv_heads && o->head_dim)) {
        fprintf(stderr, "kvd-broker: no model geometry: give --model PATH, or all of "
                        "--layers, --kv-heads and --head-dim\n");
        return BROKER_EX_CONFIG;
    }
    return 0;
}
