/* kvctl.c — kvd's admin CLI: global flags, then one command (kvctl.h). */
#include "tools/kvctl.h"

#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvctl [GLOBAL FLAGS] COMMAND [COMMAND FLAGS] [GLOBAL FLAGS]\n"
            "\n"
            "commands:\n"
            "  pool                 pages total / in use / cached / free, waste, prefix hits\n"
            "  seqs                 live sequences: id, state, tokens, pages, shared, worker\n"
            "  workers              workers: pid, state, steps, restarts\n"
            "  prefix               prefix cache: entries, hit/query tokens, evictions, top\n"
            "  map                  a picture of the pool, one cell per page (or group)\n"
            "  top [--iterations N] [--interval-ms MS]   live view; q quits\n"
            "  evict --cached       drop every cached page (pages in use are never touched)\n"
            "  generate ...         one request via the SDK (kvctl generate --help)\n"
            "\n"
            "global flags (before or after the command):\n"
            "--runtime-dir DIR  where kvd's sockets are (default $KVD_RUNTIME_DIR,\n"
            "                   $XDG_RUNTIME_DIR/kvd, /tmp/kvd-$UID)\n"
            "--json             one JSON object (workers: a list) instead of text\n"
            "--timeout-ms MS    how long to wait for kvd, 1..%d (default %d); after\n"
            "                   'generate' it is the request's deadline instead\n"
            "--log-level L      error|warn|info|debug (default warn)\n"
            "exit: 0 ok, 1 kvd answered with an error, 64 usage, 69 kvd unreachable\n",
            KVCTL_TIMEOUT_MS_MAX, KVCTL_TIMEOUT_MS_DEFAULT);
}

/* Value of a global flag at argv[*i]: "--flag VALUE" or "--flag=VALUE"; NULL if absent. */
static const char *flag_value(const char *flag, int argc, char **argv, int *i, bool *matched)
{
    size_t n = strlen(flag);
    const char *a = argv[*i];
    *matched = false;
    if (strncmp(a, flag, n) != 0 || (a[n] != '\0' && a[n] != '='))
        return NULL;
    *matched = true;
    if (a[n] == '=')
        return a + n + 1;
    return *i + 1 < argc ? argv[++*i] : NULL;
}

/* Tries argv[*i] as a global flag. Returns 1 (consumed; *i moved past its value), 0 (not
 * a global flag) or -1 (a global flag with a missing or bad value; message printed).
 * Commands that own a flag of the same name list it in skip (generate: --timeout-ms). */
static int global_opt(struct kvctl *k, enum log_level *lvl, int argc, char **argv, int *i,
                      const char *skip)
{
    const char *a = argv[*i], *v;
    bool m;
    if (strcmp(a, "--json") == 0) {
        k->json = true;
        return 1;
    }
    if ((v = flag_value("--runtime-dir", argc, argv, i, &m)) || m) {
        if (!v || !*v) {
            kvctl_error("--runtime-dir needs a directory");
            return -1;
        }
        k->runtime_dir = v;
        return 1;
    }
    if (!(skip && strcmp(skip, "--timeout-ms") == 0) &&
        ((v = flag_value("--timeout-ms", argc, argv, i, &m)) || m)) {
        char *end;
        errno = 0;
        long t = v ? strtol(v, &end, 10) : 0;
        if (!v || end == v || *end || errno || t < 1 || t > KVCTL_TIMEOUT_MS_MAX) {
            kvctl_error("bad value '%s' for --timeout-ms (expected milliseconds, 1..%d)",
                        v ? v : "", KVCTL_TIMEOUT_MS_MAX);
            return -1;
        }
        k->timeout_ms = (int)t;
        return 1;
    }
    if ((v = flag_value("--log-level", argc, argv, i, &m)) || m) {
        if (!v || log_level_parse(v, lvl)) {
            kvctl_error("bad value '%s' for --log-level (expected error|warn|info|debug)",
                        v ? v : "");
            return -1;
        }
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(const struct kvctl *, int, char **);
        const char *own_flag; /* a flag the command itself defines, not taken as global */
    } cmds[] = {{"pool", kvctl_cmd_pool, NULL},
                {"seqs", kvctl_cmd_seqs, NULL},
                {"workers", kvctl_cmd_workers, NULL},
                {"prefix", kvctl_cmd_prefix, NULL},
                {"map", kvctl_cmd_map, NULL},
                {"top", kvctl_cmd_top, NULL},
                {"evict", kvctl_cmd_evict, NULL},
                {"generate", kvctl_cmd_generate, "--timeout-ms"}};
    struct kvctl k = {.timeout_ms = KVCTL_TIMEOUT_MS_DEFAULT};
    enum log_level lvl = LOG_LEVEL_WARN;
    int cmd = -1, n = 0, rc;
    /* Global flags before or after the command; everything else (the command and its
     * own flags) is compacted into argv[0..n) in order. */
    for (int i = 1; i < argc; i++) {
        const char *skip = cmd >= 0 ? cmds[cmd].own_flag : NULL;
        /* --help before any command, or after one without its own (all but generate) */
        if ((cmd < 0 || cmds[cmd].fn != kvctl_cmd_generate) &&
            (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)) {
            usage(stdout);
            return 0;
        }
        if ((rc = global_opt(&k, &lvl, argc, argv, &i, skip)) < 0)
            return KVCTL_EX_USAGE;
        if (rc > 0)
            continue;
        if (cmd < 0 && argv[i][0] == '-') {
            kvctl_error("unknown option '%s' (see kvctl --help)", argv[i]);
            return KVCTL_EX_USAGE;
        }
        if (cmd < 0) {
            for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]) && cmd < 0; c++)
                if (strcmp(argv[i], cmds[c].name) == 0)
                    cmd = (int)c;
            if (cmd < 0) {
                kvctl_error("unknown command '%s' (see kvctl --help)", argv[i]);
                return KVCTL_EX_USAGE;
            }
        }
        argv[n++] = argv[i];
    }
    log_setup("kvctl", lvl);
    if (cmd < 0) {
        kvctl_error("no command given");
        usage(stderr);
        return KVCTL_EX_USAGE;
    }
    k.color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR");
    argv[n] = NULL;
    return cmds[cmd].fn(&k, n, argv);
}
