/* config.h — kvd's settings: defaults, config file, command-line flags.
 *
 * Precedence (lowest first): built-in defaults, the config file, flags. The config file
 * is `--config FILE` when given (must exist), else /etc/kvd/kvd.conf if it exists, else
 * none. File syntax: one `key = value` per line (key = a flag's long name without
 * "--"), `#` starts a comment, blank lines ignored. Sizes accept K/M/G (binary) suffixes.
 * Pure functions of their inputs; any thread; no globals.
 */
#ifndef KVD_DAEMON_CONFIG_H
#define KVD_DAEMON_CONFIG_H

#include "common/kvlayout.h"
#include "common/log.h"
#include "common/paths.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONFIG_PATH_MAX 1024 /* bytes of a file path setting */
#define CONFIG_DEFAULT_FILE "/etc/kvd/kvd.conf"
#define CONFIG_LINE_MAX 2048                /* bytes of one config-file line */
#define CONFIG_WORKERS_MAX 64               /* worker processes */
#define CONFIG_THREADS_MAX 256              /* threads per worker */
#define CONFIG_MAX_MODEL_LEN_MAX (1u << 20) /* tokens; also bounds one sequence's memory */
#define CONFIG_MAX_RUNNING_MAX 4096         /* concurrently running sequences */
#define CONFIG_MAX_QUEUE_MAX (1u << 20)     /* waiting requests */
#define CONFIG_GRACE_MS_MAX 600000          /* shutdown grace period cap */
#define CONFIG_ERR_LEN 256                  /* bytes of the one-line error message */

/* Defaults (the embedded configuration `kvd` runs with no arguments). */
#define CONFIG_DEF_WORKERS 1
#define CONFIG_DEF_THREADS 1
#define CONFIG_DEF_POOL_BYTES (64ull << 20) /* host memory for KV pages */
#define CONFIG_DEF_BLOCK_SIZE 16            /* tokens per page (vLLM's default) */
#define CONFIG_DEF_MAX_MODEL_LEN 512        /* stories260K's trained context */
#define CONFIG_DEF_MAX_BATCH_TOKENS 2048    /* tokens computed per step */
#define CONFIG_DEF_MAX_RUNNING 64
#define CONFIG_DEF_MAX_QUEUE 1024
#define CONFIG_DEF_GRACE_MS 10000           /* SIGTERM: time to finish in-flight requests */
#define CONFIG_DEF_STEP_TIMEOUT_MS 60000    /* a worker silent this long on a step is killed */
#define CONFIG_STEP_TIMEOUT_MS_MAX 86400000 /* one day */

enum config_alloc { CONFIG_ALLOC_PAGED = 0, CONFIG_ALLOC_NAIVE };

struct kvd_config {
    char model[CONFIG_PATH_MAX];       /* GGUF path; "" = the bundled model */
    char runtime_dir[PATHS_MAX];       /* "" = common/paths.h resolution */
    char broker[PATHS_MAX];            /* "" = spawn one; else a runtime dir or ipc:// addr */
    char backend[16];                  /* pool backend passed to a spawned broker: host|cuda */
    char config_file[CONFIG_PATH_MAX]; /* the file that was read, "" if none */
    uint32_t workers;                  /* worker processes */
    uint32_t threads;                  /* threads per worker */
    uint64_t pool_bytes;               /* bytes of KV pool (spawned broker) */
    uint32_t block_size;               /* tokens per page */
    uint32_t kv_dtype;                 /* enum kv_dtype */
    uint32_t max_model_len;            /* tokens per sequence (prompt + output) */
    uint32_t max_batch_tokens;         /* tokens computed per step */
    uint32_t max_running;              /* sequences in the running set */
    uint32_t max_queue;                /* waiting requests before "overloaded" */
    uint32_t grace_ms;                 /* shutdown grace period */
    uint32_t step_timeout_ms;          /* worker step deadline; 0 = none */
    enum config_alloc alloc;           /* paged (on demand) or naive (max-model-len) */
    bool prefix_cache;                 /* share full prompt blocks through the broker */
    enum log_level log_level;
};

/* Result of config_load. */
enum config_status {
    CONFIG_OK = 0,
    CONFIG_HELP = 1,     /* --help given: print config_usage(), exit 0 */
    CONFIG_VERSION = 2,  /* --version given */
    CONFIG_EUSAGE = -64, /* unknown flag or flag without its value: exit 64 */
    CONFIG_EBAD = -78,   /* bad value or unreadable/bad config file: exit 78 */
};

void config_defaults(struct kvd_config *c);

/* Builds c from defaults, the config file and argv (argv[0] is skipped). default_file
 * is the implicit file to read when present (NULL: CONFIG_DEFAULT_FILE). On failure
 * err holds one line naming the flag/file/line; c is then unspecified. */
enum config_status config_load(struct kvd_config *c, int argc, char *const argv[],
                               const char *default_file, char err[CONFIG_ERR_LEN]);

/* Applies one setting by name (flag name without "--"). 0, CONFIG_EUSAGE (unknown key)
 * or CONFIG_EBAD (bad value); c unchanged on failure. */
int config_set(struct kvd_config *c, const char *key, const char *value, char err[CONFIG_ERR_LEN]);

/* Parses "123", "64K", "16M", "2G" (binary multiples). 0 or -EINVAL / -ERANGE. */
int config_parse_size(const char *s, uint64_t *out);

/* The usage text, truthful: every flag, its default. */
const char *config_usage(void);

#endif
