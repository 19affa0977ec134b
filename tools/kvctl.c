/* kvctl.c — kvd's admin CLI: global flags, then one command (kvctl.h). */
#include "tools/kvctl.h"

#include "common/log.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvctl [--runtime-dir DIR] [--json] [--timeout-ms MS] [--log-level L] COMMAND\n"
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
            "--runtime-dir  where kvd's sockets are (default $KVD_RUNTIME_DIR,\n"
            "               $XDG_RUNTIME_DIR/kvd, /tmp/kvd-$UID)\n"
            "--json         one JSON object (workers: a list) instead of text; also\n"
            "               accepted after the command\n"
            "--timeout-ms   how long to wait for kvd (default %d)\n"
            "exit: 0 ok, 1 kvd answered with an error, 64 usage, 69 kvd unreachable\n",
            KVCTL_TIMEOUT_MS_DEFAULT);
}

int main(int argc, char **argv)
{
    struct kvctl k = {.timeout_ms = KVCTL_TIMEOUT_MS_DEFAULT};
    enum log_level lvl = LOG_LEVEL_WARN;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            k.json = true;
        } else if (strcmp(a, "--runtime-dir") == 0 && i + 1 < argc) {
            k.runtime_dir = argv[++i];
        } else if (strcmp(a, "--timeout-ms") == 0 && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 600000) {
                kvctl_error("--timeout-ms must be 1..600000");
                return KVCTL_EX_USAGE;
            }
            k.timeout_ms = (int)v;
        } else if (strcmp(a, "--log-level") == 0 && i + 1 < argc) {
            if (log_level_parse(argv[++i], &lvl)) {
                kvctl_error("--log-level must be error|warn|info|debug");
                return KVCTL_EX_USAGE;
            }
        } else {
            kvctl_error("unknown or incomplete option '%s'", a);
            usage(stderr);
            return KVCTL_EX_USAGE;
        }
    }
    log_setup("kvctl", lvl);
    if (i >= argc) {
        kvctl_error("no command given");
        usage(stderr);
        return KVCTL_EX_USAGE;
    }
    k.color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR");
    /* --json is also accepted after the command (kvctl generate ... --json) */
    int n = i + 1;
    for (int a = i + 1; a < argc; a++) {
        if (strcmp(argv[a], "--json") == 0)
            k.json = true;
        else
            argv[n++] = argv[a];
    }
    argc = n;
    static const struct {
        const char *name;
        int (*fn)(const struct kvctl *, int, char **);
    } cmds[] = {{"pool", kvctl_cmd_pool},       {"seqs", kvctl_cmd_seqs},
                {"workers", kvctl_cmd_workers}, {"prefix", kvctl_cmd_prefix},
                {"map", kvctl_cmd_map},         {"top", kvctl_cmd_top},
                {"evict", kvctl_cmd_evict},     {"generate", kvctl_cmd_generate}};
    for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++)
        if (strcmp(argv[i], cmds[c].name) == 0)
            return cmds[c].fn(&k, argc - i, argv + i);
    kvctl_error("unknown command '%s'", argv[i]);
    usage(stderr);
    return KVCTL_EX_USAGE;
}
