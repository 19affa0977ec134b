/* paths.h — where kvd's sockets live (DESIGN.md "Sockets").
 *
 * Runtime dir: --runtime-dir if given, else $KVD_RUNTIME_DIR, else $XDG_RUNTIME_DIR/kvd,
 * else /tmp/kvd-$UID. Sockets are created mode 0660 inside a 0700 directory.
 * nanomsg addresses are "ipc://" + path. Any thread.
 */
#ifndef KVD_COMMON_PATHS_H
#define KVD_COMMON_PATHS_H

#include <stddef.h>

#define PATHS_MAX 256                 /* bytes; AF_UNIX sun_path is 108, ipc:// adds 6 */
#define PATHS_SOCK_CLIENT "kvd.sock"  /* SDK, kvctl -> kvd: generate, stream, cancel */
#define PATHS_SOCK_ADMIN "admin.sock" /* kvctl -> kvd: pool, seqs, prefix, workers, evict */
#define PATHS_SOCK_BROKER "broker.sock" /* kvd, kvctl -> broker: control */
#define PATHS_SOCK_FD "broker.fd"     /* workers -> broker: pool fd hand-over (AF_UNIX) */
#define PATHS_SOCK_WORKER_FMT "worker-%d.sock" /* kvd <-> worker N */

/* Resolves the runtime dir into out (override may be NULL). 0, or -ENAMETOOLONG. */
int paths_runtime_dir(char *out, size_t cap, const char *override);
/* Creates dir (and missing parents) with mode 0700; an existing dir is fine. 0 or -errno. */
int paths_ensure_dir(const char *dir);
/* out = dir + "/" + name. 0, or -ENAMETOOLONG (AF_UNIX limit checked). */
int paths_join(char *out, size_t cap, const char *dir, const char *name);
/* out = "ipc://" + dir + "/" + name. 0, or -ENAMETOOLONG. */
int paths_ipc_addr(char *out, size_t cap, const char *dir, const char *name);

#endif
