/* kvctl.h — the admin CLI's commands (kvctl [GLOBAL FLAGS] COMMAND [FLAGS]; the global
 * flags --runtime-dir, --json, --timeout-ms, --log-level go before or after COMMAND).
 *
 * Each command takes its own argv (argv[0] = command name, global flags removed), talks to kvd over
 * admin.sock (kvctl_admin.h) or kvd.sock (the SDK), prints aligned text or, with
 * --json, one JSON object (documented in tools/README-kvctl.md), and returns the process
 * exit code: 0, KVCTL_EX_USAGE (bad flags), KVCTL_EX_UNAVAILABLE (kvd missing, dead or
 * not answering), KVCTL_EX_FAIL (kvd answered with an error, or the request failed).
 */
#ifndef KVD_TOOLS_KVCTL_H
#define KVD_TOOLS_KVCTL_H

#include "proto/admin_msg.h"

#include <stdbool.h>
#include <stdio.h>

#define KVCTL_EX_FAIL 1
#define KVCTL_EX_USAGE 64          /* sysexits EX_USAGE */
#define KVCTL_EX_UNAVAILABLE 69    /* sysexits EX_UNAVAILABLE */
#define KVCTL_TIMEOUT_MS_DEFAULT 3000 /* per admin call / SDK connect */
#define KVCTL_TIMEOUT_MS_MAX 600000   /* --timeout-ms upper bound (10 min) */

struct kvctl {
    const char *runtime_dir;      /* NULL: paths.h default */
    bool json;                    /* --json */
    bool color;                   /* stdout is a terminal (and NO_COLOR unset) */
    int timeout_ms;               /* --timeout-ms */
};

int kvctl_cmd_pool(const struct kvctl *k, int argc, char **argv);
int kvctl_cmd_seqs(const struct kvctl *k, int argc, char **argv);
int kvctl_cmd_workers(const struct kvctl *k, int argc, char **argv);
int kvctl_cmd_prefix(const struct kvctl *k, int argc, char **argv);
int kvctl_cmd_evict(const struct kvctl *k, int argc, char **argv);
int kvctl_cmd_map(const struct kvctl *k, int argc, char **argv);
int kvctl_cmd_top(const struct kvctl *k, int argc, char **argv);
int kvctl_cmd_generate(const struct kvctl *k, int argc, char **argv);

/* Exit code for a failed kvd call: unavailable for connection problems, else fail. */
int kvctl_exit_for(int rc);
/* Prints "kvctl: <msg>" on stderr (one line). */
void kvctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Shared by pool, top and map: prefix hit ratio in [0, 1] (0 when no queries). */
double kvctl_hit_ratio(const struct admin_pool *p);
/* Prints the pool block (plain text) to f. */
void kvctl_print_pool(FILE *f, const struct admin_pool *p);
/* Writes an occupancy bar of width cells: used/shared, cached, free. */
void kvctl_print_bar(FILE *f, const struct admin_pool *p, int width, bool color);

#endif
