/* config.c — defaults, config file and flags for kvd (see config.h). */
#include "daemon/config.h"

#include "common/err.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum opt_kind {
    OPT_STR,
    OPT_U32,
    OPT_SIZE,
    OPT_DTYPE,
    OPT_ALLOC,
    OPT_ONOFF,
    OPT_LEVEL,
    OPT_BACKEND
};

struct opt {
    const char *name;
    enum opt_kind kind;
    size_t off;        /* offset of the field in struct kvd_config */
    size_t cap;        /* OPT_STR: buffer size */
    uint64_t min, max; /* OPT_U32 / OPT_SIZE bounds */
};

#define F(field) offsetof(struct kvd_config, field)
#define CAP(field) sizeof(((struct kvd_config *)0)->field)

static const struct opt config_opts[] = {
    {"model", OPT_STR, F(model), CAP(model), 0, 0},
    {"runtime-dir", OPT_STR, F(runtime_dir), CAP(runtime_dir), 0, 0},
    {"broker", OPT_STR, F(broker), CAP(broker), 0, 0},
    {"backend", OPT_BACKEND, F(backend), CAP(backend), 0, 0},
    {"workers", OPT_U32, F(workers), 0, 1, CONFIG_WORKERS_MAX},
    {"threads", OPT_U32, F(threads), 0, 1, CONFIG_THREADS_MAX},
    {"pool-bytes", OPT_SIZE, F(pool_bytes), 0, 4096, UINT64_MAX / 2},
    {"block-size", OPT_U32, F(block_size), 0, 1, KV_BLOCK_TOKENS_MAX},
    {"kv-dtype", OPT_DTYPE, F(kv_dtype), 0, 0, 0},
    {"max-model-len", OPT_U32, F(max_model_len), 0, 2, CONFIG_MAX_MODEL_LEN_MAX},
    {"max-batch-tokens", OPT_U32, F(max_batch_tokens), 0, 1, CONFIG_MAX_MODEL_LEN_MAX},
    {"max-running", OPT_U32, F(max_running), 0, 1, CONFIG_MAX_RUNNING_MAX},
    {"max-queue", OPT_U32, F(max_queue), 0, 1, CONFIG_MAX_QUEUE_MAX},
    {"grace-ms", OPT_U32, F(grace_ms), 0, 0, CONFIG_GRACE_MS_MAX},
    {"step-timeout-ms", OPT_U32, F(step_timeout_ms), 0, 0, CONFIG_STEP_TIMEOUT_MS_MAX},
    {"alloc", OPT_ALLOC, F(alloc), 0, 0, 0},
    {"prefix-cache", OPT_ONOFF, F(prefix_cache), 0, 0, 0},
    {"log-level", OPT_LEVEL, F(log_level), 0, 0, 0},
};
#define CONFIG_N_OPTS (sizeof(config_opts) / sizeof(config_opts[0]))

static int cfg_fail(char err[CONFIG_ERR_LEN], int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int cfg_fail(char err[CONFIG_ERR_LEN], int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, CONFIG_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return code;
}

void config_defaults(struct kvd_config *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->backend, sizeof(c->backend), "host");
    c->workers = CONFIG_DEF_WORKERS;
    c->threads = CONFIG_DEF_THREADS;
    c->pool_bytes = CONFIG_DEF_POOL_BYTES;
    c->block_size = CONFIG_DEF_BLOCK_SIZE;
    c->kv_dtype = KV_DTYPE_F32;
    c->max_model_len = CONFIG_DEF_MAX_MODEL_LEN;
    c->max_batch_tokens = CONFIG_DEF_MAX_BATCH_TOKENS;
    c->max_running = CONFIG_DEF_MAX_RUNNING;
    c->max_queue = CONFIG_DEF_MAX_QUEUE;
    c->grace_ms = CONFIG_DEF_GRACE_MS;
    c->step_timeout_ms = CONFIG_DEF_STEP_TIMEOUT_MS;
    c->alloc = CONFIG_ALLOC_PAGED;
    c->prefix_cache = true;
    c->log_level = LOG_LEVEL_INFO;
}

int config_parse_size(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -ERANGE;
    unsigned shift = 0;
    switch (*end) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default:
        return -EINVAL;
    }
    if (*end == 'i' || *end == 'B') /* accept "16MiB", "16MB" spelled out */
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    if (*end != '\0')
        return -EINVAL;
    if (shift && v > (UINT64_MAX >> shift))
        return -ERANGE;
    *out = (uint64_t)v << shift;
    return 0;
}

static const struct opt *opt_find(const char *name)
{
    for (size_t i = 0; i < CONFIG_N_OPTS; i++)
        if (strcmp(config_opts[i].name, name) == 0)
            return &config_opts[i];
    return NULL;
}

int config_set(struct kvd_config *c, const char *key, const char *value, char err[CONFIG_ERR_LEN])
{
    const struct opt *o = opt_find(key);
    if (!o)
        return cfg_fail(err, CONFIG_EUSAGE, "unknown setting '%s'", key);
    char *field = (char *)c + o->off;
    uint64_t v;
    switch (o->kind) {
    case OPT_STR:
        if (strlen(value) >= o->cap)
            return cfg_fail(err, CONFIG_EBAD, "value of '%s' is too long (max %zu bytes)", key,
                            o->cap - 1);
        memcpy(field, value, strlen(value) + 1);
        return 0;
    case OPT_BACKEND:
        if (strcmp(value, "host") != 0 && strcmp(value, "cuda") != 0 &&
            strcmp(value, "cuda-vmm") != 0 && strcmp(value, "cuda-ipc") != 0 &&
            strcmp(value, "auto") != 0)
            return cfg_fail(err, CONFIG_EBAD,
                            "bad value '%s' for '%s': host, cuda, cuda-vmm, cuda-ipc or auto",
                            value, key);
        snprintf(field, o->cap, "%s", value);
        return 0;
    case OPT_U32:
    case OPT_SIZE:
        if (config_parse_size(value, &v) < 0 || (o->kind == OPT_U32 && v > UINT32_MAX))
            return cfg_fail(err, CONFIG_EBAD, "bad value '%s' for '%s': not a %s", value, key,
                            o->kind == OPT_SIZE ? "size" : "number");
        if (v < o->min || v > o->max)
            return cfg_fail(err, CONFIG_EBAD, "value %llu for '%s' is out of range [%llu, %llu]",
                            (unsigned long long)v, key, (unsigned long long)o->min,
                            (unsigned long long)o->max);
        if (o->kind == OPT_U32)
            *(uint32_t *)(void *)field = (uint32_t)v;
        else
            *(uint64_t *)(void *)field = v;
        return 0;
    case OPT_DTYPE: {
        enum kv_dtype dt;
        if (kv_dtype_parse(value, &dt) < 0)
            return cfg_fail(err, CONFIG_EBAD, "unknown kv dtype '%s' (f32, f16)", value);
        c->kv_dtype = (uint32_t)dt;
        return 0;
    }
    case OPT_ALLOC:
        if (strcmp(value, "paged") == 0)
            c->alloc = CONFIG_ALLOC_PAGED;
        else if (strcmp(value, "naive") == 0)
            c->alloc = CONFIG_ALLOC_NAIVE;
        else
            return cfg_fail(err, CONFIG_EBAD, "bad value '%s' for 'alloc': paged or naive", value);
        return 0;
    case OPT_ONOFF:
        if (strcmp(value, "on") == 0 || strcmp(value, "true") == 0 || strcmp(value, "1") == 0)
            *(bool *)(void *)field = true;
        else if (strcmp(value, "off") == 0 || strcmp(value, "false") == 0 ||
                 strcmp(value, "0") == 0)
            *(bool *)(void *)field = false;
        else
            return cfg_fail(err, CONFIG_EBAD, "bad value '%s' for '%s': on or off", value, key);
        return 0;
    case OPT_LEVEL: {
        enum log_level l;
        if (log_level_parse(value, &l) < 0)
            return cfg_fail(err, CONFIG_EBAD, "bad log level '%s': error, warn, info or debug",
                            value);
        c->log_level = l;
        return 0;
    }
    }
    return cfg_fail(err, CONFIG_EBAD, "internal: option kind of '%s'", key);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Reads `key = value` lines. Any error is CONFIG_EBAD (exit 78), with file:line. */
static int config_read_file(struct kvd_config *c, const char *path, char err[CONFIG_ERR_LEN])
{
    FILE *f = fopen(path, "re");
    if (!f)
        return cfg_fail(err, CONFIG_EBAD, "cannot read config file '%s': %s", path,
                        strerror(errno));
    char line[CONFIG_LINE_MAX];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
            rc = cfg_fail(err, CONFIG_EBAD, "%s:%d: line longer than %d bytes", path, lineno,
                          CONFIG_LINE_MAX - 2);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = cfg_fail(err, CONFIG_EBAD, "%s:%d: expected 'key = value'", path, lineno);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        if (strcmp(key, "config") == 0) {
            rc =
                cfg_fail(err, CONFIG_EBAD, "%s:%d: 'config' cannot be set in a file", path, lineno);
            break;
        }
        char e2[CONFIG_ERR_LEN];
        if (config_set(c, key, val, e2) != 0) {
            rc = cfg_fail(err, CONFIG_EBAD, "%s:%d: %s", path, lineno, e2);
            break;
        }
    }
    if (rc == 0 && ferror(f))
        rc = cfg_fail(err, CONFIG_EBAD, "cannot read config file '%s'", path);
    fclose(f);
    return rc;
}

/* Splits argv[i] into name/value ("--x=v" or "--x v"); advances *i. */
static int arg_next(int argc, char *const argv[], int *i, char name[64], const char **value,
                    char err[CONFIG_ERR_LEN])
{
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
        return cfg_fail(err, CONFIG_EUSAGE, "unexpected argument '%s'", a);
    a += 2;
    const char *eq = strchr(a, '=');
    size_t n = eq ? (size_t)(eq - a) : strlen(a);
    if (n >= 64)
        return cfg_fail(err, CONFIG_EUSAGE, "unknown flag '%s'", argv[*i]);
    memcpy(name, a, n);
    name[n] = '\0';
    if (strcmp(name, "help") == 0 || strcmp(name, "version") == 0) {
        *value = NULL;
        (*i)++;
        return 0;
    }
    if (strcmp(name, "config") != 0 && !opt_find(name))
        return cfg_fail(err, CONFIG_EUSAGE, "unknown flag '--%s' (see --help)", name);
    if (eq) {
        *value = eq + 1;
        (*i)++;
        return 0;
    }
    if (*i + 1 >= argc)
        return cfg_fail(err, CONFIG_EUSAGE, "flag '--%s' needs a value", name);
    *value = argv[*i + 1];
    *i += 2;
    return 0;
}

enum config_status config_load(struct kvd_config *c, int argc, char *const argv[],
                               const char *default_file, char err[CONFIG_ERR_LEN])
{
    char name[64];
    const char *value, *explicit_file = NULL;
    int rc;
    if (err)
        err[0] = '\0';
    config_defaults(c);
    /* Pass 1: syntax, --help, --config. */
    for (int i = 1; i < argc;) {
        if ((rc = arg_next(argc, argv, &i, name, &value, err)) != 0)
            return (enum config_status)rc;
        if (strcmp(name, "help") == 0)
            return CONFIG_HELP;
        if (strcmp(name, "version") == 0)
            return CONFIG_VERSION;
        if (strcmp(name, "config") == 0)
            explicit_file = value;
    }
    /* The file. */
    const char *file = explicit_file;
    if (!file) {
        const char *def = default_file ? default_file : CONFIG_DEFAULT_FILE;
        if (access(def, F_OK) == 0)
            file = def;
    }
    if (file) {
        if (strlen(file) >= sizeof(c->config_file))
            return (enum config_status)cfg_fail(err, CONFIG_EBAD, "config path too long");
        if ((rc = config_read_file(c, file, err)) != 0)
            return (enum config_status)rc;
        snprintf(c->config_file, sizeof(c->config_file), "%s", file);
    }
    /* Pass 2: flags win. */
    for (int i = 1; i < argc;) {
        if ((rc = arg_next(argc, argv, &i, name, &value, err)) != 0)
            return (enum config_status)rc;
        if (strcmp(name, "config") == 0)
            continue;
        char e2[CONFIG_ERR_LEN];
        if ((rc = config_set(c, name, value, e2)) != 0)
            return (enum config_status)cfg_fail(err, rc, "--%s: %s", name, e2);
    }
    if (c->max_batch_tokens < 1 || c->max_model_len < 2)
        return (enum config_status)cfg_fail(err, CONFIG_EBAD, "limits too small");
    return CONFIG_OK;
}

const char *config_usage(void)
{
    return "usage: kvd [FLAGS]\n"
           "Serves LLM text generation; the KV cache lives in pages owned by kvd-broker.\n"
           "Every flag can also be set in the config file as `name = value`; flags win.\n"
           "  --config FILE           config file (default " CONFIG_DEFAULT_FILE " if it exists)\n"
           "  --model FILE            GGUF model (default: the bundled stories260K.gguf)\n"
           "  --runtime-dir DIR       sockets directory ($KVD_RUNTIME_DIR, $XDG_RUNTIME_DIR/kvd,\n"
           "                          /tmp/kvd-$UID)\n"
           "  --broker DIR|ADDR       use a running broker (its runtime dir or ipc:// address)\n"
           "                          instead of spawning one\n"
           "  --backend host|cuda|cuda-vmm|cuda-ipc|auto\n"
           "                          pool memory of a spawned broker (default host)\n"
           "  --workers N             worker processes (default 1, max 64)\n"
           "  --threads T             threads per worker (default 1)\n"
           "  --pool-bytes SIZE       KV pool size of a spawned broker, K/M/G (default 64M)\n"
           "  --block-size N          tokens per page (default 16)\n"
           "  --kv-dtype f32|f16      KV element type (default f32)\n"
           "  --max-model-len N       tokens per sequence, prompt + output (default 512)\n"
           "  --max-batch-tokens N    tokens computed per step (default 2048)\n"
           "  --max-running N         sequences running at once (default 64)\n"
           "  --max-queue N           waiting requests before 'overloaded' (default 1024)\n"
           "  --grace-ms MS           SIGTERM grace period for in-flight requests (default "
           "10000)\n"
           "  --step-timeout-ms MS    a worker silent this long on one step is killed and the\n"
           "                          step re-run elsewhere; 0 = never (default 60000)\n"
           "  --alloc paged|naive     page allocation on demand, or max-model-len reserved at\n"
           "                          admission (the baseline to compare with; default paged)\n"
           "  --prefix-cache on|off   share cached prompt blocks (default on)\n"
           "  --log-level LEVEL       error|warn|info|debug (default info)\n"
           "  --help                  this text\n"
           "  --version               version\n"
           "Exit codes: 0 ok, 1 runtime failure, 64 bad flag, 69 another kvd serves the\n"
           "runtime dir, 78 bad config.\n";
}
